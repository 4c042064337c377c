/* What every optimizer shares: construction from a module or a parameter
 * list, zero_grad, the learning rate, and state_dict in safetensors with
 * PyTorch's state_dict keys flattened ("state.0.exp_avg"). */
#include "optim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_name[] = {"SGD", "Adam", "AdamW"};

tg_optimizer *tg__optimizer_new(tg_tape *tp, tg__opt_kind kind, const char *who, int n, tg_tensor *const *params)
{
    if (!tp) return tg_error("%s: NULL tape", who);
    if (n < 0 || (n > 0 && !params)) return tg_error("%s: bad parameter list", who);
    for (int i = 0; i < n; i++) {
        if (!params[i]) return tg_error("%s: parameter %d is NULL", who, i);
        if (!params[i]->requires_grad || params[i]->grad_fn)
            return tg_error("%s: parameter %d is not a leaf that requires grad", who, i);
        if (!tg_is_contiguous(params[i])) return tg_error("%s: parameter %d is not contiguous", who, i);
    }
    size_t cap = (size_t)(n ? n : 1);
    tg_optimizer *o = tg_tape_alloc(tp, sizeof *o, true);
    if (!o) return NULL;
    o->kind = kind;
    o->tp = tp;
    o->params = tg_tape_alloc(tp, sizeof *o->params * cap, false);
    o->steps = tg_tape_alloc(tp, sizeof *o->steps * cap, true);
    if (!o->params || !o->steps) return NULL;
    for (int s = 0; s < TG__NSLOTS; s++)
        if (!(o->slot[s] = tg_tape_alloc(tp, sizeof *o->slot[s] * cap, true))) return NULL;
    /* A tensor listed twice (tied weights) is one parameter: updated once. */
    for (int i = 0; i < n; i++) {
        bool dup = false;
        for (int j = 0; j < o->n && !dup; j++) dup = o->params[j] == params[i];
        if (!dup) o->params[o->n++] = params[i];
    }
    return o;
}

tg_tensor *tg__optimizer_slot(tg_optimizer *o, int s, int i)
{
    tg_tensor *p = o->params[i], *t = o->slot[s][i];
    /* The module was converted (tg_module_to_dtype) since the last step: the
     * state follows the parameter's dtype. */
    if (t && t->dtype != p->dtype) t = o->slot[s][i] = tg_to_dtype(o->tp, t, p->dtype);
    else if (!t) t = o->slot[s][i] = tg_zeros(o->tp, p->dtype, p->ndim, p->shape);
    return t;
}

const char *tg_optimizer_name(const tg_optimizer *o) { return o ? kind_name[o->kind] : NULL; }

void tg_optimizer_zero_grad(tg_optimizer *o)
{
    if (!o) return;
    for (int i = 0; i < o->n; i++) tg_zero_grad(o->params[i]);
}

int tg_optimizer_step(tg_optimizer *o)
{
    if (!o) return tg_error_status(TG_EINVAL, "optimizer step: NULL optimizer");
    bool prev = tg_set_grad_enabled(false);
    int st = o->kind == TG__OPT_SGD ? tg__sgd_step(o) : tg__adam_step(o);
    tg_set_grad_enabled(prev);
    return st;
}

double tg_optimizer_lr(const tg_optimizer *o) { return o ? o->lr : NAN; }

int tg_optimizer_set_lr(tg_optimizer *o, double lr)
{
    if (!o) return tg_error_status(TG_EINVAL, "optimizer set_lr: NULL optimizer");
    if (!(lr >= 0) || isinf(lr)) return tg_error_status(TG_EINVAL, "%s: invalid learning rate: %g", kind_name[o->kind], lr);
    o->lr = lr;
    if (o->kind == TG__OPT_SGD)
        o->sgd.lr = lr;
    else
        o->adam.lr = lr;
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

/* The state entries of parameter i that exist for this optimizer: their
 * names (without "state.i.") and slots; count returned. */
static int state_keys(const tg_optimizer *o, const char **names, int *slots)
{
    if (o->kind == TG__OPT_SGD) {
        if (o->sgd.momentum == 0) return 0;
        names[0] = "momentum_buffer", slots[0] = TG__MOMENTUM;
        return 1;
    }
    names[0] = "exp_avg", slots[0] = TG__EXP_AVG;
    names[1] = "exp_avg_sq", slots[1] = TG__EXP_AVG_SQ;
    if (!o->adam.amsgrad) return 2;
    names[2] = "max_exp_avg_sq", slots[2] = TG__MAX_EXP_AVG_SQ;
    return 3;
}

static char *tape_printf(tg_tape *tp, const char *fmt, int i, const char *what)
{
    int len = snprintf(NULL, 0, fmt, i, what);
    char *s = tg_tape_alloc(tp, (size_t)len + 1, false);
    if (s) snprintf(s, (size_t)len + 1, fmt, i, what);
    return s;
}

int tg_optimizer_state_dict(tg_tape *tp, const tg_optimizer *o, tg_named_list *out)
{
    if (!tp || !o || !out) return tg_error_status(TG_EINVAL, "optimizer state_dict: NULL argument");
    const char *names[3];
    int slots[3], nk = state_keys(o, names, slots);
    int cap = 1 + o->n * (nk + 1);
    out->n = 0;
    out->names = tg_tape_alloc(tp, sizeof *out->names * (size_t)cap, false);
    out->tensors = tg_tape_alloc(tp, sizeof *out->tensors * (size_t)cap, false);
    tg_tensor *lr = tg_scalar(tp, TG_F64, o->lr);
    if (!out->names || !out->tensors || !lr) return TG_ENOMEM;
    out->names[out->n] = "param_groups.0.lr";
    out->tensors[out->n++] = lr;
    for (int i = 0; i < o->n; i++) {
        /* as PyTorch: a parameter never stepped has no state */
        bool has = o->kind == TG__OPT_SGD ? o->slot[TG__MOMENTUM][i] != NULL : o->steps[i] > 0;
        if (!has) continue;
        if (o->kind != TG__OPT_SGD) {
            tg_tensor *step = tg_scalar(tp, TG_F32, (double)o->steps[i]);
            char *name = tape_printf(tp, "state.%d.%s", i, "step");
            if (!step || !name) return TG_ENOMEM;
            out->names[out->n] = name;
            out->tensors[out->n++] = step;
        }
        for (int k = 0; k < nk; k++) {
            char *name = tape_printf(tp, "state.%d.%s", i, names[k]);
            if (!name) return TG_ENOMEM;
            out->names[out->n] = name;
            out->tensors[out->n++] = o->slot[slots[k]][i];
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

static int find_key(const char *rest, const char *const *names, int nk)
{
    for (int k = 0; k < nk; k++)
        if (strcmp(rest, names[k]) == 0) return k;
    return -1;
}

int tg_optimizer_load_state_dict(tg_optimizer *o, const tg_named_list *sd)
{
    if (!o || !sd || (sd->n > 0 && (!sd->names || !sd->tensors)))
        return tg_error_status(TG_EINVAL, "optimizer load_state_dict: NULL argument");
    const char *who = kind_name[o->kind];
    const char *names[3];
    int slots[3], nk = state_keys(o, names, slots);
    const tg_tensor *lr = NULL;
    char a[64], b[64];
    /* Pass 1: check everything. */
    for (int j = 0; j < sd->n; j++) {
        const char *key = sd->names[j], *rest;
        const tg_tensor *t = sd->tensors[j];
        int i;
        if (!key || !t) return tg_error_status(TG_EINVAL, "%s load_state_dict: entry %d is NULL", who, j);
        for (int k = 0; k < j; k++)
            if (sd->names[k] && strcmp(sd->names[k], key) == 0)
                return tg_error_status(TG_EFORMAT, "%s load_state_dict: duplicate key '%s'", who, key);
        if (strcmp(key, "param_groups.0.lr") == 0) {
            if (tg_numel(t) != 1 || !tg__is_float(t->dtype))
                return tg_error_status(TG_EFORMAT, "%s load_state_dict: '%s' must be one float", who, key);
            double v = tg_item(t);
            if (!(v >= 0) || isinf(v))
                return tg_error_status(TG_EFORMAT, "%s load_state_dict: invalid learning rate %g", who, v);
            lr = t;
            continue;
        }
        if (!parse_state_key(key, &i, &rest))
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: unexpected key '%s'", who, key);
        if (i >= o->n)
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: '%s' names parameter %d of %d", who, key, i, o->n);
        if (o->kind != TG__OPT_SGD && strcmp(rest, "step") == 0) {
            double v = tg_numel(t) == 1 && tg__is_float(t->dtype) ? tg_item(t) : -1;
            if (!(v >= 1 && v <= 9007199254740992.0 && v == floor(v)))
                return tg_error_status(TG_EFORMAT, "%s load_state_dict: '%s' is not a step count", who, key);
            continue;
        }
        if (find_key(rest, names, nk) < 0)
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: unexpected key '%s' (a state of another optimizer?)",
                                   who, key);
        if (!tg__is_float(t->dtype))
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: '%s' has dtype %s, expected a float type", who, key,
                                   tg_dtype_name(t->dtype));
        if (!tg_same_shape(t, o->params[i]))
            return tg_error_status(TG_EFORMAT, "%s load_state_dict: size mismatch for '%s': %s, parameter %d is %s",
                                   who, key, tg_shape_str(t, a, 64), i, tg_shape_str(o->params[i], b, 64));
    }
    /* Every parameter with state has all of it (Adam: a step and each moment). */
    for (int i = 0; i < o->n; i++) {
        int have = 0, want = nk + (o->kind != TG__OPT_SGD);
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
        if (!parse_state_key(sd->names[j], &i, &rest) || (k = find_key(rest, names, nk)) < 0) continue;
        if (!tg__optimizer_slot(o, slots[k], i)) return TG_ENOMEM;
    }
    /* Pass 3: apply. Parameters without state in sd start afresh. */
    for (int i = 0; i < o->n; i++) o->steps[i] = 0;
    for (int i = 0; i < o->n; i++) {
        bool found = false;
        for (int j = 0; j < sd->n && !found; j++) {
            const char *rest;
            int pi;
            found = parse_state_key(sd->names[j], &pi, &rest) && pi == i;
        }
        if (!found)
            for (int k = 0; k < nk; k++)
                if (o->slot[slots[k]][i]) tg_k_fill(o->slot[slots[k]][i], 0.0);
        if (!found && o->kind == TG__OPT_SGD) o->slot[TG__MOMENTUM][i] = NULL; /* first step copies the gradient */
    }
    for (int j = 0; j < sd->n; j++) {
        const char *rest;
        int i, k;
        if (!parse_state_key(sd->names[j], &i, &rest)) continue;
        if (strcmp(rest, "step") == 0 && o->kind != TG__OPT_SGD)
            o->steps[i] = (int64_t)tg_item(sd->tensors[j]);
        else if ((k = find_key(rest, names, nk)) >= 0)
            tg_k_copy(o->slot[slots[k]][i], sd->tensors[j]);
    }
    if (lr) tg_optimizer_set_lr(o, tg_item(lr));
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
