/* Checkpoints (optim.h): a training run's model, optimizer, generator,
 * progress, identity and the user's tensors in one safetensors file, written
 * atomically and read back only when every part of it fits.
 *
 * Built on the public API alone (state_dict, load_state_dict, the generator
 * state, safetensors), as a user's own checkpoint code would be. Loading
 * checks everything that can be checked without changing anything first;
 * the model and the optimizer check their own parts when they load them, so
 * the model is loaded first, with a copy of its state kept, and put back if
 * the optimizer then refuses its part. */
#include <tapegrad.h>

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT 1
#define K_PROGRESS "train.progress"
#define K_INTS "train.settings"
#define K_FLOATS "train.settings_f64"
#define K_RNG "rng.default"

/* ---- saving ------------------------------------------------------------------------------ */

static int check_parts(const char *who, const tg_checkpoint *ck, const char *path)
{
    if (!ck || !ck->model || !path) return tg_error_status(TG_EINVAL, "%s: NULL checkpoint, model or path", who);
    if (ck->n_values < 0 || (ck->n_values > 0 && !ck->values))
        return tg_error_status(TG_EINVAL, "%s: %d identity values without an array", who, ck->n_values);
    for (int i = 0; i < ck->n_values; i++)
        if (!ck->values[i].name) return tg_error_status(TG_EINVAL, "%s: identity value %d has no name", who, i);
    const tg_named_list *t = &ck->tensors;
    if (t->n < 0 || (t->n > 0 && (!t->names || !t->tensors)))
        return tg_error_status(TG_EINVAL, "%s: %d user tensors without names or tensors", who, t->n);
    for (int i = 0; i < t->n; i++)
        if (!t->names[i]) return tg_error_status(TG_EINVAL, "%s: user tensor %d has no name", who, i);
    return TG_OK;
}

/* prefix + each name of l, appended to items. */
static int add_part(tg_tape *tp, tg_named_tensor *items, int *k, const char *prefix, const tg_named_list *l)
{
    for (int i = 0; i < l->n; i++) {
        size_t len = strlen(prefix) + strlen(l->names[i]) + 1;
        char *name = tg_tape_alloc(tp, len, false);
        if (!name) return tg_error_status(TG_ENOMEM, "checkpoint_save: out of memory");
        snprintf(name, len, "%s%s", prefix, l->names[i]);
        items[(*k)++] = (tg_named_tensor){name, l->tensors[i]};
    }
    return TG_OK;
}

/* The identity values of one kind as a 1-D tensor (NULL when there are none:
 * *none tells it from a failure). */
static tg_tensor *identity_tensor(tg_tape *tp, const tg_checkpoint *ck, bool floats, bool *none)
{
    int64_t n = 0;
    for (int i = 0; i < ck->n_values; i++) n += ck->values[i].is_float == floats;
    *none = n == 0;
    tg_tensor *t = n ? tg_empty(tp, floats ? TG_F64 : TG_I64, 1, &n) : NULL;
    for (int i = 0, j = 0; t && i < ck->n_values; i++) {
        const tg_checkpoint_value *v = &ck->values[i];
        if (v->is_float != floats) continue;
        if (floats)
            ((double *)t->data)[j++] = v->f;
        else
            ((int64_t *)t->data)[j++] = v->i;
    }
    return t;
}

static int save_in(tg_tape *tp, const tg_checkpoint *ck, const char *path)
{
    tg_named_list ms, os = {0};
    int st = tg_module_state_dict(tp, ck->model, &ms);
    if (st == TG_OK && ck->optimizer) st = tg_optimizer_state_dict(tp, ck->optimizer, &os);
    if (st != TG_OK) return st;
    int n = ms.n + os.n + 4 + ck->tensors.n;
    tg_named_tensor *items = tg_tape_alloc(tp, sizeof *items * (size_t)n, false);
    int64_t progress[4] = {FORMAT, ck->epoch, ck->step, ck->tokens_seen}, four = 4, gs = TG_GENERATOR_STATE_BYTES;
    tg_tensor *t_progress = tg_from_data(tp, TG_I64, 1, &four, progress);
    tg_tensor *t_rng = ck->generator ? tg_empty(tp, TG_U8, 1, &gs) : NULL;
    bool no_ints, no_floats;
    tg_tensor *t_ints = identity_tensor(tp, ck, false, &no_ints), *t_floats = identity_tensor(tp, ck, true, &no_floats);
    if (!items || !t_progress || (ck->generator && !t_rng) || (!t_ints && !no_ints) || (!t_floats && !no_floats))
        return tg_error_status(TG_ENOMEM, "checkpoint_save: out of memory");
    int k = 0;
    if ((st = add_part(tp, items, &k, "model.", &ms)) || (st = add_part(tp, items, &k, "optimizer.", &os))) return st;
    items[k++] = (tg_named_tensor){K_PROGRESS, t_progress};
    if (t_ints) items[k++] = (tg_named_tensor){K_INTS, t_ints};
    if (t_floats) items[k++] = (tg_named_tensor){K_FLOATS, t_floats};
    for (int i = 0; i < ck->tensors.n; i++) items[k++] = (tg_named_tensor){ck->tensors.names[i], ck->tensors.tensors[i]};
    if (t_rng) {
        if ((st = tg_generator_get_state(ck->generator, t_rng->data, TG_GENERATOR_STATE_BYTES)) != TG_OK) return st;
        items[k++] = (tg_named_tensor){K_RNG, t_rng};
    }
    return tg_safetensors_save(path, items, k);
}

int tg_checkpoint_save(const tg_checkpoint *ck, const char *path)
{
    int st = check_parts("checkpoint_save", ck, path);
    if (st != TG_OK) return st;
    for (int i = 0; i < ck->tensors.n; i++)
        if (!ck->tensors.tensors[i])
            return tg_error_status(TG_EINVAL, "checkpoint_save: user tensor '%s' is NULL", ck->tensors.names[i]);
    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_error_status(TG_ENOMEM, "checkpoint_save: out of memory");
    st = save_in(tp, ck, path);
    tg_tape_free(tp);
    return st;
}

/* ---- loading ----------------------------------------------------------------------------- */

/* What load has read and checked, before anything changes. */
typedef struct {
    const char *path;
    tg_safetensors f;
    const int64_t *progress;
    const uint8_t *rng;
    tg_named_list model, optimizer;
    tg_tensor **user;    /* the tensors for ck->tensors, in tp for the NULL slots */
    tg_tensor **backup;  /* a copy of the model's state, while the optimizer loads */
    tg_named_list own;   /* the model's own state_dict */
} loaded;

/* The tensor named key, with its dtype (TG_DTYPE_COUNT: any) and (numel >=
 * 0) its size; NULL with the message. */
static const tg_tensor *need(const loaded *l, const char *key, tg_dtype dt, int64_t numel)
{
    const tg_tensor *t = tg_safetensors_get(&l->f, key);
    if (!t) return tg_error("'%s' is not a tapegrad checkpoint (no '%s')", l->path, key);
    if ((dt != TG_DTYPE_COUNT && t->dtype != dt) || (numel >= 0 && tg_numel(t) != numel))
        return tg_error("'%s': '%s' has the wrong type or size", l->path, key);
    return t;
}

/* The file's entries whose names start with prefix, prefix removed. */
static int part(tg_tape *tp, const loaded *l, const char *prefix, tg_named_list *out)
{
    size_t pl = strlen(prefix);
    int cap = l->f.n ? l->f.n : 1;
    out->n = 0;
    out->names = tg_tape_alloc(tp, sizeof *out->names * (size_t)cap, false);
    out->tensors = tg_tape_alloc(tp, sizeof *out->tensors * (size_t)cap, false);
    if (!out->names || !out->tensors) return tg_error_status(TG_ENOMEM, "checkpoint_load: out of memory");
    for (int i = 0; i < l->f.n; i++)
        if (strncmp(l->f.names[i], prefix, pl) == 0) {
            out->names[out->n] = l->f.names[i] + pl;
            out->tensors[out->n++] = l->f.tensors[i];
        }
    return TG_OK;
}

/* The identity values of one kind against the file's. */
static int check_identity(const loaded *l, const tg_checkpoint *ck, bool floats)
{
    int64_t want = 0;
    for (int i = 0; i < ck->n_values; i++) want += ck->values[i].is_float == floats;
    const char *key = floats ? K_FLOATS : K_INTS;
    const tg_tensor *t = tg_safetensors_get(&l->f, key);
    if (!t && want == 0) return TG_OK;
    if (!(t = need(l, key, floats ? TG_F64 : TG_I64, -1))) return TG_EFORMAT;
    if (tg_numel(t) != want)
        return tg_error_status(TG_EFORMAT, "'%s' belongs to another run: it has %lld %s identity values, this run %lld",
                               l->path, (long long)tg_numel(t), floats ? "float" : "integer", (long long)want);
    for (int i = 0, j = 0; i < ck->n_values; i++) {
        const tg_checkpoint_value *v = &ck->values[i];
        if (v->is_float != floats) continue;
        double f = floats ? ((const double *)t->data)[j] : 0;
        int64_t n = floats ? 0 : ((const int64_t *)t->data)[j];
        j++;
        if (floats ? f == v->f : n == v->i) continue;
        if (v->differs) return tg_error_status(TG_EFORMAT, "'%s' %s", l->path, v->differs);
        if (floats)
            return tg_error_status(TG_EFORMAT, "'%s' belongs to another run: it has %s %g, this run %g", l->path,
                                   v->name, f, v->f);
        return tg_error_status(TG_EFORMAT, "'%s' belongs to another run: it has %s %lld, this run %lld", l->path,
                               v->name, (long long)n, (long long)v->i);
    }
    return TG_OK;
}

/* Each user tensor: present, and into a given one only with its dtype and
 * shape; the NULL slots get copies in tp. */
static int check_user(tg_tape *scratch, tg_tape *tp, loaded *l, const tg_checkpoint *ck)
{
    const tg_named_list *u = &ck->tensors;
    l->user = tg_tape_alloc(scratch, sizeof *l->user * (size_t)(u->n ? u->n : 1), false);
    if (!l->user) return tg_error_status(TG_ENOMEM, "checkpoint_load: out of memory");
    for (int i = 0; i < u->n; i++) {
        const tg_tensor *t = need(l, u->names[i], TG_DTYPE_COUNT, -1), *into = u->tensors[i];
        char a[64], b[64];
        if (!t) return TG_EFORMAT;
        if (!into && !tp)
            return tg_error_status(TG_EINVAL, "checkpoint_load: user tensor '%s' is read into a tape, and tp is NULL",
                                   u->names[i]);
        if (into && (into->dtype != t->dtype || !tg_same_shape(into, t)))
            return tg_error_status(TG_EFORMAT, "'%s': '%s' is %s %s, this run's %s %s", l->path, u->names[i],
                                   tg_dtype_name(t->dtype), tg_shape_str(t, a, 64), tg_dtype_name(into->dtype),
                                   tg_shape_str(into, b, 64));
        if (into && !tg_data_ptr(into))
            return tg_error_status(TG_EINVAL, "checkpoint_load: user tensor '%s' is not contiguous", u->names[i]);
        l->user[i] = into ? NULL : tg_from_data(tp, t->dtype, t->ndim, t->shape, t->data);
        if (!into && !l->user[i]) return tg_error_status(TG_ENOMEM, "checkpoint_load: out of memory");
    }
    return TG_OK;
}

/* The message of a part that refused to load, after the file's name. */
static int part_error(int st, const char *path, const char *what)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", *tg_last_error() ? tg_last_error() : tg_status_str(st));
    return tg_error_status(st, "'%s': %s: %s", path, what, msg);
}

/* Everything but the model's and the optimizer's own checks, which run as
 * they load. */
static int check_all(tg_tape *scratch, tg_tape *tp, loaded *l, const tg_checkpoint *ck)
{
    /* bf16 as it is: a model's frozen bf16 weights load into their own dtype */
    int st = tg_safetensors_load_ex(scratch, l->path, &(tg_safetensors_options){.keep_bf16 = true}, &l->f);
    if (st != TG_OK) return st;
    const tg_tensor *progress = need(l, K_PROGRESS, TG_I64, 4);
    const tg_tensor *rng = progress && ck->generator ? need(l, K_RNG, TG_U8, TG_GENERATOR_STATE_BYTES) : NULL;
    if (!progress || (ck->generator && !rng)) return TG_EFORMAT;
    const int64_t *p = l->progress = progress->data;
    if (p[0] != FORMAT)
        return tg_error_status(TG_EFORMAT, "'%s' has checkpoint format %lld, this tapegrad writes %d", l->path,
                               (long long)p[0], FORMAT);
    /* the step may be -1, as the book's global_step before the first step */
    if (p[1] < 0 || p[2] < -1 || p[3] < 0) return tg_error_status(TG_EFORMAT, "'%s': corrupt progress record", l->path);
    if (ck->n_values > 0 && ((st = check_identity(l, ck, false)) || (st = check_identity(l, ck, true)))) return st;
    if (rng) {
        tg_generator *g = tg_generator_new(0);
        if (!g) return tg_error_status(TG_ENOMEM, "checkpoint_load: out of memory");
        st = tg_generator_set_state(g, rng->data, TG_GENERATOR_STATE_BYTES);
        tg_generator_free(g);
        if (st != TG_OK) return part_error(TG_EFORMAT, l->path, "the generator state");
        l->rng = rng->data;
    }
    if ((st = check_user(scratch, tp, l, ck)) || (st = part(scratch, l, "model.", &l->model)) ||
        (st = part(scratch, l, "optimizer.", &l->optimizer)))
        return st;
    if (ck->optimizer && l->optimizer.n == 0)
        return tg_error_status(TG_EFORMAT, "'%s' is not a tapegrad checkpoint with an optimizer (no 'optimizer.' keys)",
                               l->path);
    return TG_OK;
}

/* A copy of the model's state (ck has an optimizer, which may still refuse
 * its part after the model has loaded). */
static int backup_model(tg_tape *scratch, loaded *l, const tg_checkpoint *ck)
{
    int st = tg_module_state_dict(scratch, ck->model, &l->own);
    if (st != TG_OK) return st;
    l->backup = tg_tape_alloc(scratch, sizeof *l->backup * (size_t)(l->own.n ? l->own.n : 1), false);
    if (!l->backup) return tg_error_status(TG_ENOMEM, "checkpoint_load: out of memory");
    for (int i = 0; i < l->own.n; i++) {
        const tg_tensor *t = l->own.tensors[i];
        if (!tg_data_ptr(t))
            return tg_error_status(TG_EINVAL, "checkpoint_load: the model's '%s' is not contiguous", l->own.names[i]);
        if (!(l->backup[i] = tg_from_data(scratch, t->dtype, t->ndim, t->shape, tg_data_ptr(t))))
            return tg_error_status(TG_ENOMEM, "checkpoint_load: out of memory");
    }
    return TG_OK;
}

static void restore_model(const loaded *l)
{
    for (int i = 0; i < l->own.n; i++) {
        const tg_tensor *t = l->backup[i];
        bool g = tg_set_grad_enabled(false);
        tg_copy_(l->own.tensors[i], t); /* the backup of this very tensor: cannot fail */
        tg_set_grad_enabled(g);
    }
}

static int load_in(tg_tape *scratch, tg_tape *tp, tg_checkpoint *ck, const char *path)
{
    loaded l = {.path = path};
    int st = check_all(scratch, tp, &l, ck);
    if (st == TG_OK && ck->optimizer) st = backup_model(scratch, &l, ck);
    if (st != TG_OK) return st;
    /* the file's model part does not fit the model: a malformed file here */
    if ((st = tg_module_load_state_dict(ck->model, &l.model)) != TG_OK)
        return part_error(st == TG_EINVAL ? TG_EFORMAT : st, path, "the model");
    if (ck->optimizer && (st = tg_optimizer_load_state_dict(ck->optimizer, &l.optimizer)) != TG_OK) {
        restore_model(&l);
        return part_error(st, path, "the optimizer");
    }
    /* checked above: these cannot fail */
    if (l.rng) tg_generator_set_state(ck->generator, l.rng, TG_GENERATOR_STATE_BYTES);
    for (int i = 0; i < ck->tensors.n; i++) {
        tg_tensor *into = ck->tensors.tensors[i];
        const tg_tensor *t = tg_safetensors_get(&l.f, ck->tensors.names[i]);
        if (into) {
            bool g = tg_set_grad_enabled(false);
            tg_copy_(into, t); /* checked above: into's shape and dtype */
            tg_set_grad_enabled(g);
        } else
            ck->tensors.tensors[i] = l.user[i];
    }
    ck->epoch = l.progress[1], ck->step = l.progress[2], ck->tokens_seen = l.progress[3];
    return TG_OK;
}

int tg_checkpoint_load(tg_tape *tp, tg_checkpoint *ck, const char *path)
{
    int st = check_parts("checkpoint_load", ck, path);
    if (st != TG_OK) return st;
    tg_tape *scratch = tg_tape_new();
    if (!scratch) return tg_error_status(TG_ENOMEM, "checkpoint_load: out of memory");
    st = load_in(scratch, tp, ck, path);
    tg_tape_free(scratch);
    return st;
}

int tg_checkpoint_load_model(tg_module *model, const char *path)
{
    if (!model || !path) return tg_error_status(TG_EINVAL, "checkpoint_load_model: NULL argument");
    tg_tape *scratch = tg_tape_new();
    if (!scratch) return tg_error_status(TG_ENOMEM, "checkpoint_load_model: out of memory");
    int n = 0;
    tg__safetensors_entry *e = NULL;
    int st = tg__safetensors_header(scratch, path, &n, &e);
    bool trainer = false;
    for (int i = 0; st == TG_OK && i < n; i++) trainer |= strcmp(e[i].name, K_PROGRESS) == 0;
    tg_tape_free(scratch);
    if (st != TG_OK) return st;
    if (!trainer) return tg_module_load(model, path);
    tg_checkpoint ck = {.model = model};
    return tg_checkpoint_load(NULL, &ck, path);
}
