/* Parameters, the module tree (names, train/eval, dtype), Linear and Dropout. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

tg_tensor *tg_parameter_new(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape)
{
    if (!tg__is_float(dt)) return tg_error("parameter: dtype must be float32 or float64");
    tg_tensor *p = tg_zeros(tp, dt, ndim, shape);
    if (!p) return NULL;
    p->requires_grad = true;
    p->is_param = true;
    return p;
}

tg_module *tg__module_new(tg_tape *tp, tg_module_kind kind, const char *type_name)
{
    tg_module *m = tg_tape_alloc(tp, sizeof *m, true);
    if (!m) return NULL;
    m->kind = kind;
    m->type_name = type_name;
    m->training = true;
    return m;
}

bool tg__module_add_param(tg_module *m, const char *name, tg_tensor *p)
{
    if (!p || m->nparams >= TG_MODULE_MAX_PARAMS) return false;
    m->param_names[m->nparams] = name;
    m->params[m->nparams++] = p;
    return true;
}

bool tg__module_add_buffer(tg_module *m, const char *name, tg_tensor *b)
{
    if (!b || m->nbuffers >= TG_MODULE_MAX_BUFFERS) return false;
    m->buffer_names[m->nbuffers] = name;
    m->buffers[m->nbuffers++] = b;
    return true;
}

bool tg__module_add_child(tg_module *m, const char *name, tg_module *c)
{
    if (!c) return false;
    if (m->nchildren >= TG_MODULE_MAX_CHILDREN) {
        tg_error("module: more than %d children", TG_MODULE_MAX_CHILDREN);
        return false;
    }
    m->child_names[m->nchildren] = name;
    m->children[m->nchildren++] = c;
    return true;
}

bool tg__check_size(const char *op, const char *what, int64_t v)
{
    if (v <= 0) {
        tg_error("%s: %s must be positive, got %lld", op, what, (long long)v);
        return false;
    }
    if (v > ((int64_t)1 << 31)) {
        tg_error("%s: %s of %lld is too large", op, what, (long long)v);
        return false;
    }
    return true;
}

bool tg__check_dropout(const char *op, double p)
{
    if (!(p >= 0 && p < 1)) {
        tg_error("%s: dropout probability %g is outside [0, 1)", op, p);
        return false;
    }
    return true;
}

/* ---- Linear ---------------------------------------------------------------------------- */

/* nn.Linear.reset_parameters: kaiming_uniform_(weight, a=sqrt(5)) then bias
 * from uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bound arithmetic is
 * torch/nn/init.py's, in double, so the bounds are bit-identical. */
tg_module *tg_linear_new(tg_tape *tp, int64_t in_features, int64_t out_features, bool bias)
{
    if (!tg__check_size("Linear", "in_features", in_features) ||
        !tg__check_size("Linear", "out_features", out_features))
        return NULL;
    tg_module *m = tg__module_new(tp, TG_MODULE_LINEAR, "Linear");
    if (!m) return NULL;
    m->d_in = in_features;
    m->d_out = out_features;
    m->qkv_bias = bias;
    int64_t ws[2] = {out_features, in_features}, bs[1] = {out_features};
    tg_tensor *w = tg_parameter_new(tp, TG_F32, 2, ws);
    if (!tg__module_add_param(m, "weight", w)) return NULL;
    double a = sqrt(5.0);
    double gain = sqrt(2.0 / (1 + a * a));
    double std = gain / sqrt((double)in_features);
    double bound = sqrt(3.0) * std;
    if (tg_uniform_(w, -bound, bound, NULL) != TG_OK) return NULL;
    if (bias) {
        tg_tensor *b = tg_parameter_new(tp, TG_F32, 1, bs);
        if (!tg__module_add_param(m, "bias", b)) return NULL;
        double bb = 1.0 / sqrt((double)in_features);
        if (tg_uniform_(b, -bb, bb, NULL) != TG_OK) return NULL;
    }
    return m;
}

tg_module *tg_dropout_new(tg_tape *tp, double p)
{
    if (!tg__check_dropout("Dropout", p)) return NULL;
    tg_module *m = tg__module_new(tp, TG_MODULE_DROPOUT, "Dropout");
    if (m) m->dropout = p;
    return m;
}

tg_tensor *tg__linear_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    return tg_linear(tp, x, m->params[0], m->nparams > 1 ? m->params[1] : NULL);
}

tg_tensor *tg__dropout_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    if (!m->training || m->dropout == 0) return x;
    return tg_dropout(tp, x, m->dropout, m->gen);
}

/* ---- the tree ---------------------------------------------------------------------------- */

tg_tensor *tg_module_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    if (!m) return tg_error("forward: NULL module");
    if (!x) return tg__error_null_input(m->type_name);
    switch (m->kind) {
    case TG_MODULE_LINEAR: return tg__linear_forward(tp, m, x);
    case TG_MODULE_DROPOUT: return tg__dropout_forward(tp, m, x);
    default: return tg__attention_forward(tp, m, x);
    }
}

void tg_module_train(tg_module *m, bool training)
{
    if (!m) return;
    m->training = training;
    for (int i = 0; i < m->nchildren; i++) tg_module_train(m->children[i], training);
}

void tg_module_set_fused(tg_module *m, bool fused)
{
    if (!m) return;
    m->fused = fused;
    for (int i = 0; i < m->nchildren; i++) tg_module_set_fused(m->children[i], fused);
}

void tg_module_set_generator(tg_module *m, tg_generator *g)
{
    if (!m) return;
    m->gen = g;
    for (int i = 0; i < m->nchildren; i++) tg_module_set_generator(m->children[i], g);
}

int tg_module_to_dtype(tg_tape *tp, tg_module *m, tg_dtype dt)
{
    if (!m) return tg_error_status(TG_EINVAL, "to_dtype: NULL module");
    if (!tg__is_float(dt)) return tg_error_status(TG_EINVAL, "to_dtype: modules hold float32 or float64 only");
    for (int i = 0; i < m->nparams; i++) {
        tg_tensor *p = tg_to_dtype(tp, m->params[i], dt);
        if (!p) return TG_ENOMEM;
        p->requires_grad = true;
        p->is_param = true;
        m->params[i] = p;
    }
    for (int i = 0; i < m->nbuffers; i++) {
        tg_tensor *b = tg_to_dtype(tp, m->buffers[i], dt);
        if (!b) return TG_ENOMEM;
        m->buffers[i] = b;
    }
    for (int i = 0; i < m->nchildren; i++) {
        int s = tg_module_to_dtype(tp, m->children[i], dt);
        if (s) return s;
    }
    return TG_OK;
}

/* Walks the tree in PyTorch's order (own params, own buffers, then children),
 * collecting dotted names. count-only when out arrays are NULL. */
static int walk(tg_tape *tp, const tg_module *m, const char *prefix, bool buffers, tg_named_list *out, int k)
{
    for (int pass = 0; pass < (buffers ? 2 : 1); pass++) {
        int n = pass ? m->nbuffers : m->nparams;
        for (int i = 0; i < n; i++) {
            if (out->names) {
                const char *nm = pass ? m->buffer_names[i] : m->param_names[i];
                size_t len = strlen(prefix) + strlen(nm) + 1;
                char *full = tg_tape_alloc(tp, len, false);
                if (!full) return -1;
                snprintf(full, len, "%s%s", prefix, nm);
                out->names[k] = full;
                out->tensors[k] = pass ? m->buffers[i] : m->params[i];
            }
            k++;
        }
    }
    for (int c = 0; c < m->nchildren; c++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s%s.", prefix, m->child_names[c]);
        k = walk(tp, m->children[c], sub, buffers, out, k);
        if (k < 0) return -1;
    }
    return k;
}

static int collect(tg_tape *tp, const tg_module *m, bool buffers, tg_named_list *out)
{
    if (!m || !out) return tg_error_status(TG_EINVAL, "named_parameters: NULL argument");
    tg_named_list count = {0, NULL, NULL};
    int n = walk(tp, m, "", buffers, &count, 0);
    out->n = n;
    out->names = tg_tape_alloc(tp, sizeof *out->names * (size_t)(n ? n : 1), false);
    out->tensors = tg_tape_alloc(tp, sizeof *out->tensors * (size_t)(n ? n : 1), false);
    if (!out->names || !out->tensors) return TG_ENOMEM;
    if (walk(tp, m, "", buffers, out, 0) < 0) return TG_ENOMEM;
    return TG_OK;
}

int tg_module_named_parameters(tg_tape *tp, const tg_module *m, tg_named_list *out)
{
    return collect(tp, m, false, out);
}

int tg_module_state_dict(tg_tape *tp, const tg_module *m, tg_named_list *out) { return collect(tp, m, true, out); }

void tg_module_zero_grad(tg_module *m)
{
    if (!m) return;
    for (int i = 0; i < m->nparams; i++) tg_zero_grad(m->params[i]);
    for (int i = 0; i < m->nchildren; i++) tg_module_zero_grad(m->children[i]);
}
