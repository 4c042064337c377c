/* What every optimizer shares, whatever its type (the built-in SGD, Adam and
 * AdamW or a user's): construction from a module or a parameter list,
 * per-parameter state created at a parameter's first step, the step loop
 * that calls the type's update once per parameter with a gradient, the
 * learning rate, and state_dict in safetensors with PyTorch's keys
 * flattened ("state.0.exp_avg"). */
#include "optim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_type(const tg_optimizer_type *t)
{
    if (!t || !t->name || !t->name[0]) return tg_error_status(TG_EINVAL, "optimizer: NULL type or type without a name");
    if (!t->step) return tg_error_status(TG_EINVAL, "%s: the optimizer type has no step function", t->name);
    if (t->nstate < 0 || t->nstate > 64 || (t->nstate > 0 && !t->state_names))
        return tg_error_status(TG_EINVAL, "%s: bad state count %d or NULL state names", t->name, t->nstate);
    for (int k = 0; k < t->nstate; k++) {
        const char *s = t->state_names[k];
        if (!s || !s[0] || strchr(s, '.') || strcmp(s, "step") == 0)
            return tg_error_status(TG_EINVAL, "%s: state name %d must be a non-empty name without '.', not 'step'",
                                   t->name, k);
        for (int j = 0; j < k; j++)
            if (strcmp(s, t->state_names[j]) == 0)
                return tg_error_status(TG_EINVAL, "%s: state name '%s' given twice", t->name, s);
    }
    return TG_OK;
}

tg_optimizer *tg_optimizer_new_params(tg_tape *tp, const tg_optimizer_type *type, int n, tg_tensor *const *params,
                                      double lr, const void *options, size_t options_size)
{
    if (check_type(type) != TG_OK) return NULL;
    const char *who = type->name;
    if (!tp) return tg_error("%s: NULL tape", who);
    if (n < 0 || (n > 0 && !params)) return tg_error("%s: bad parameter list", who);
    if (options_size > 0 && !options) return tg_error("%s: NULL options of %zu bytes", who, options_size);
    if (!(lr >= 0) || isinf(lr)) return tg_error("%s: invalid learning rate: %g", who, lr);
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!params[i]) return tg_error("%s: parameter %d is NULL", who, i);
        if (params[i]->grad_fn) return tg_error("%s: can't optimize a non-leaf Tensor (parameter %d)", who, i);
        if (!tg_is_contiguous(params[i])) return tg_error("%s: parameter %d is not contiguous", who, i);
        any = any || params[i]->requires_grad;
    }
    if (!any) return tg_error("%s: optimizer got an empty parameter list (no parameter requires grad)", who);
    tg_optimizer *o = tg_tape_alloc(tp, sizeof *o, true);
    if (!o) return NULL;
    o->type = type;
    o->tp = tp;
    o->lr = lr;
    o->current = -1;
    if (options_size) {
        if (!(o->options = tg_tape_alloc(tp, options_size, false))) return NULL;
        memcpy(o->options, options, options_size);
    }
    o->params = tg_tape_alloc(tp, sizeof *o->params * (size_t)n, false);
    o->steps = tg_tape_alloc(tp, sizeof *o->steps * (size_t)n, true);
    o->state = tg_tape_alloc(tp, sizeof *o->state * (size_t)n * (size_t)(type->nstate ? type->nstate : 1), true);
    if (!o->params || !o->steps || !o->state) return NULL;
    /* A tensor listed twice (tied weights) is one parameter: updated once. */
    for (int i = 0; i < n; i++) {
        bool dup = false;
        for (int j = 0; j < o->n && !dup; j++) dup = o->params[j] == params[i];
        if (!dup) o->params[o->n++] = params[i];
    }
    return o;
}

tg_optimizer *tg_optimizer_new(tg_tape *tp, const tg_optimizer_type *type, tg_module *model, double lr,
                               const void *options, size_t options_size)
{
    if (check_type(type) != TG_OK) return NULL;
    if (!tp || !model) return tg_error("%s: NULL tape or model", type->name);
    tg_named_list l;
    if (tg_module_named_parameters(tp, model, &l) != TG_OK) return NULL;
    return tg_optimizer_new_params(tp, type, l.n, l.tensors, lr, options, options_size);
}

/* Parameter i's state k, created (zeros, the parameter's dtype and shape)
 * or converted to the parameter's dtype when the module was converted
 * (tg_module_to_dtype) since its last step; NULL if out of memory. */
static tg_tensor *state_at(tg_optimizer *o, int i, int k)
{
    tg_tensor *p = o->params[i], **slot = &o->state[(size_t)i * (size_t)o->type->nstate + (size_t)k];
    if (*slot && (*slot)->dtype != p->dtype) *slot = tg_to_dtype(o->tp, *slot, p->dtype);
    else if (!*slot) *slot = tg_zeros(o->tp, p->dtype, p->ndim, p->shape);
    return *slot;
}

const char *tg_optimizer_name(const tg_optimizer *o) { return o ? o->type->name : NULL; }

const tg_optimizer_type *tg_optimizer_get_type(const tg_optimizer *o) { return o ? o->type : NULL; }

const void *tg_optimizer_options(const tg_optimizer *o) { return o ? o->options : NULL; }

int tg_optimizer_set_step_in_state_dict(tg_optimizer *o, bool on)
{
    if (!o) return tg_error_status(TG_EINVAL, "optimizer set_step_in_state_dict: NULL optimizer");
    o->no_step_entry = !on;
    return TG_OK;
}

int64_t tg_optimizer_step_count(const tg_optimizer *o)
{
    if (!o) return 0;
    if (o->current >= 0) return o->steps[o->current];
    int64_t m = 0;
    for (int i = 0; i < o->n; i++) m = o->steps[i] > m ? o->steps[i] : m;
    return m;
}

void tg_optimizer_zero_grad(tg_optimizer *o)
{
    if (!o) return;
    for (int i = 0; i < o->n; i++) tg_zero_grad(o->params[i]);
}

static int step_all(tg_optimizer *o)
{
    const tg_optimizer_type *t = o->type;
    tg_tensor *state[64];
    for (int i = 0; i < o->n; i++) {
        tg_tensor *p = o->params[i], *g = p->grad;
        if (!g) continue;
        if (!tg_is_contiguous(g) || g->dtype != p->dtype || !tg_same_shape(g, p))
            return tg_error_status(TG_EINVAL, "%s step: the gradient of parameter %d is not a contiguous %s tensor of its shape",
                                   t->name, i, tg_dtype_name(p->dtype));
        for (int k = 0; k < t->nstate; k++)
            if (!(state[k] = state_at(o, i, k))) return TG_ENOMEM;
        o->steps[i]++;
        o->current = i;
        tg_clear_error();
        int st = t->step(o, p, g, state);
        o->current = -1;
        tg__bump(p); /* the update is a write: a node that saved p refuses backward, BF16 copies it again */
        tg__derived_drop(p); /* a copy generation made (BF16's) is stale now: not kept through the next step */
        for (int k = 0; k < t->nstate; k++) tg__bump(state[k]);
        if (st != TG_OK) {
            o->steps[i]--;
            if (!tg_last_error()[0]) tg_error("%s step: parameter %d failed (status %d)", t->name, i, st);
            return st;
        }
    }
    return TG_OK;
}

int tg_optimizer_step(tg_optimizer *o)
{
    if (!o) return tg_error_status(TG_EINVAL, "optimizer step: NULL optimizer");
    if (o->current >= 0) return tg_error_status(TG_EINVAL, "%s step: called from inside a step", o->type->name);
    bool prev = tg_set_grad_enabled(false);
    int st = step_all(o);
    tg_set_grad_enabled(prev);
    return st;
}

double tg_optimizer_lr(const tg_optimizer *o) { return o ? o->lr : NAN; }

int tg_optimizer_set_lr(tg_optimizer *o, double lr)
{
    if (!o) return tg_error_status(TG_EINVAL, "optimizer set_lr: NULL optimizer");
    if (!(lr >= 0) || isinf(lr)) return tg_error_status(TG_EINVAL, "%s: invalid learning rate: %g", o->type->name, lr);
    o->lr = lr;
    return TG_OK;
}

int tg_optimizer_num_params(const tg_optimizer *o) { return o ? o->n : 0; }

tg_tensor *tg_optimizer_param(const tg_optimizer *o, int i)
{
    if (!o) return tg_error("optimizer param: NULL optimizer");
    if (i < 0 || i >= o->n) return tg_error("optimizer param: index %d out of range (%d parameters)", i, o->n);
    return o->params[i];
}

/* ---- state_dict ------------------------------------------------------------------------ */

static bool has_step_entry(const tg_optimizer *o) { return !o->no_step_entry; }

int tg_optimizer_state_dict(tg_tape *tp, const tg_optimizer *o, tg_named_list *out)
{
    if (!tp || !o || !out) return tg_error_status(TG_EINVAL, "optimizer state_dict: NULL argument");
    const tg_optimizer_type *t = o->type;
    int cap = 1 + o->n * (t->nstate + 1);
    out->n = 0;
    out->names = tg_tape_alloc(tp, sizeof *out->names * (size_t)cap, false);
    out->tensors = tg_tape_alloc(tp, sizeof *out->tensors * (size_t)cap, false);
    tg_tensor *lr = tg_scalar(tp, TG_F64, o->lr);
    if (!out->names || !out->tensors || !lr) return TG_ENOMEM;
    out->names[out->n] = "param_groups.0.lr";
    out->tensors[out->n++] = lr;
    for (int i = 0; i < o->n; i++) {
        if (o->steps[i] == 0) continue; /* as PyTorch: a parameter never stepped has no state */
        if (has_step_entry(o)) {
            tg_tensor *step = tg_scalar(tp, TG_F32, (double)o->steps[i]);
            char *name = tg__tape_printf(tp, "state.%d.%s", i, "step");
            if (!step || !name) return TG_ENOMEM;
            out->names[out->n] = name;
            out->tensors[out->n++] = step;
        }
        for (int k = 0; k < t->nstate; k++) {
            char *name = tg__tape_printf(tp, "state.%d.%s", i, t->state_names[k]);
            if (!name) return TG_ENOMEM;
            out->names[out->n] = name;
            out->tensors[out->n++] = o->state[(size_t)i * (size_t)t->nstate + (size_t)k];
        }
    }
    return TG_OK;
}

/* "state.<i>.<rest>": i and rest, or false. */
static bool parse_state_key(const char *key, int *i, const char **rest)
{
    if (strncmp(key, "state.", 6) != 0) return false;
    const char *p = key + 6;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] != '.')) return false;
    long v = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p++ - '0');
        if (v > 1000000000L) return false;
    }
    if (*p != '.') return false;
    *i = (int)v;
    *rest = p + 1;
    return true;
}

static int find_key(const tg_optimizer_type *t, const char *rest)
{
    for (int k = 0; k < t->nstate; k++)
        if (strcmp(rest, t->state_names[k]) == 0) return k;
    return -1;
}

int tg_optimizer_load_state_dict(tg_optimizer *o, const tg_named_list *sd)
{
    if (!o || !sd || (sd->n > 0 && (!sd->names || !sd->tensors)))
        return tg_error_status(TG_EINVAL, "optimizer load_state_dict: NULL argument");
    const tg_optimizer_type *t = o->type;
    const char *who = t->name;
    const bool steps_saved = has_step_entry(o);
    const tg_tensor *lr = NULL;
    char a[64], b[64];
    /* Pass 1: check everything. */
    for (int j = 0; j < sd->n; j++) {
        const char *key = sd->names[j], *rest;
        const tg_tensor *x = sd->tensors[j];
        int i;
        if (!key || !x) return tg_error_status(TG_EINVAL, "%s load_state_dict: entry %d is NULL", who, j);
        for (int k = 0; k < j; k++)
            if (sd->names[k] && strcmp(sd->names[k], key) == 0)
                return tg_error_status(TG_EFORMAT, "%s load_state_dict: duplicate key '%s'", who, key);
        if (strcmp(key, "param_groups.0.lr") == 0) {
            if (tg_numel(x) != 1 || !tg__is_float(x->dtype))
                return tg_error_status(TG_EFORMAT, "%s load_state_dict: '%s' must be one float", who, key);
            double v = tg_item(x);
            if (!(v >= 0) || isinf(v))
                return tg_error_status(TG_EFORMAT, "%s load_state_dict: invalid learning rate %g", who, v);
            lr = x;
            continue;
        }
        if (!parse_state_key(key, &i, &rest))
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: unexpected key '%s'", who, key);
        if (i >= o->n)
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: '%s' names parameter %d of %d", who, key, i, o->n);
        if (steps_saved && strcmp(rest, "step") == 0) {
            double v = tg_numel(x) == 1 && tg__is_float(x->dtype) ? tg_item(x) : -1;
            if (!(v >= 1 && v <= 9007199254740992.0 && v == floor(v)))
                return tg_error_status(TG_EFORMAT, "%s load_state_dict: '%s' is not a step count", who, key);
            continue;
        }
        if (find_key(t, rest) < 0)
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: unexpected key '%s' (a state of another optimizer?)",
                                   who, key);
        if (!tg__is_float(x->dtype))
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: '%s' has dtype %s, expected a float type", who, key,
                                   tg_dtype_name(x->dtype));
        if (!tg_same_shape(x, o->params[i]))
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: size mismatch for '%s': %s, parameter %d is %s",
                                   who, key, tg_shape_str(x, a, 64), i, tg_shape_str(o->params[i], b, 64));
    }
    /* Every parameter with state has all of it (a step and each state). */
    const int want = t->nstate + steps_saved;
    for (int i = 0; i < o->n; i++) {
        int have = 0;
        for (int j = 0; j < sd->n; j++) {
            const char *rest;
            int pi;
            if (parse_state_key(sd->names[j], &pi, &rest) && pi == i) have++;
        }
        if (have != 0 && have != want)
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: the state of parameter %d is incomplete", who, i);
    }
    /* Pass 2: room for every state tensor first, so that nothing changes
     * unless everything can. */
    for (int j = 0; j < sd->n; j++) {
        const char *rest;
        int i, k;
        if (!parse_state_key(sd->names[j], &i, &rest) || (k = find_key(t, rest)) < 0) continue;
        if (!state_at(o, i, k)) return TG_ENOMEM;
    }
    /* Pass 3: apply. A parameter without state in sd starts afresh (its
     * first step sees count 1 and zeroed state); without saved steps, one
     * with state continues at count 2. */
    for (int i = 0; i < o->n; i++) {
        o->steps[i] = 0;
        for (int k = 0; k < t->nstate; k++) {
            tg_tensor *x = o->state[(size_t)i * (size_t)t->nstate + (size_t)k];
            if (x) tg_k_fill(x, 0.0);
        }
    }
    for (int j = 0; j < sd->n; j++) {
        const char *rest;
        int i, k;
        if (!parse_state_key(sd->names[j], &i, &rest)) continue;
        if (steps_saved && strcmp(rest, "step") == 0) {
            o->steps[i] = (int64_t)tg_item(sd->tensors[j]);
        } else if ((k = find_key(t, rest)) >= 0) {
            tg_k_copy(o->state[(size_t)i * (size_t)t->nstate + (size_t)k], sd->tensors[j]);
            if (!steps_saved) o->steps[i] = 1;
        }
    }
    if (lr) o->lr = tg_item(lr);
    return TG_OK;
}

int tg_optimizer_save(const tg_optimizer *o, const char *path)
{
    if (!o || !path) return tg_error_status(TG_EINVAL, "optimizer save: NULL optimizer or path");
    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_error_status(TG_ENOMEM, "optimizer save: out of memory");
    tg_named_list sd;
    int st = tg_optimizer_state_dict(tp, o, &sd);
    if (st == TG_OK) st = tg__save_named_list(path, &sd);
    tg_tape_free(tp);
    return st;
}

int tg_optimizer_load(tg_optimizer *o, const char *path)
{
    if (!o || !path) return tg_error_status(TG_EINVAL, "optimizer load: NULL optimizer or path");
    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_error_status(TG_ENOMEM, "optimizer load: out of memory");
    tg_safetensors f;
    int st = tg_safetensors_load(tp, path, &f);
    if (st == TG_OK) {
        tg_named_list sd = {f.n, (const char **)f.names, f.tensors};
        st = tg_optimizer_load_state_dict(o, &sd);
    }
    tg_tape_free(tp);
    return st;
}

size_t tg_optimizer_state_bytes(const tg_optimizer *opt)
{
    size_t b = 0;
    for (int i = 0; opt && i < opt->n * opt->type->nstate; i++) {
        const tg_tensor *t = opt->state[i];
        if (t) b += (size_t)tg_numel(t) * tg_dtype_size(t->dtype);
    }
    return b;
}
