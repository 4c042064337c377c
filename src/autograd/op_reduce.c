/* Reductions (sum, mean, max) and softmax: forward, shape rule, backward. */
#include "autograd_internal.h"

#include <math.h>

/* Output shape of reducing x over dims: keepdim shape in kshape (reduced dims
 * set to 1), final shape in oshape. Returns the output ndim or -1. */
static int reduce_shape(const char *op, const tg_tensor *x, int ndims, const int *dims, bool keepdim,
                        int64_t *kshape, int64_t *oshape, bool *reduced)
{
    for (int d = 0; d < TG_MAX_DIMS; d++) reduced[d] = false;
    if (ndims < 0 || (ndims > 0 && !dims)) {
        tg_error("%s: bad dims list", op);
        return -1;
    }
    if (ndims == 0)
        for (int d = 0; d < x->ndim; d++) reduced[d] = true;
    for (int i = 0; i < ndims; i++) {
        int d = tg__wrap_dim(op, dims[i], x->ndim);
        if (d < 0) return -1;
        if (reduced[d] && x->ndim > 0) {
            tg_error("%s: dim %d appears multiple times in the list of dims", op, d);
            return -1;
        }
        reduced[d] = true;
    }
    int on = 0;
    for (int d = 0; d < x->ndim; d++) {
        kshape[d] = reduced[d] ? 1 : x->shape[d];
        if (!reduced[d] || keepdim) oshape[on++] = kshape[d];
    }
    return on;
}

static tg_tensor *reduce(tg_tape *tp, const char *op, tg_op_id id, tg_tensor *x, int ndims, const int *dims,
                         bool keepdim, bool mean)
{
    if (!x) return tg__error_null_input(op);
    if (!tg__check_float(op, x)) return NULL;
    int64_t kshape[TG_MAX_DIMS], oshape[TG_MAX_DIMS];
    bool reduced[TG_MAX_DIMS];
    int on = reduce_shape(op, x, ndims, dims, keepdim, kshape, oshape, reduced);
    if (on < 0) return NULL;
    tg_tensor *out = tg_empty(tp, x->dtype, on, oshape);
    if (!out) return NULL;
    tg_tensor kv = *out; /* out seen with keepdim shape */
    kv.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) kv.shape[d] = kshape[d];
    tg__contiguous_strides(kv.ndim, kv.shape, kv.stride);
    tg_k_sum_to(&kv, x);
    int64_t count = 1;
    for (int d = 0; d < x->ndim; d++)
        if (reduced[d]) count *= x->shape[d];
    if (mean) tg_k_binary_scalar(out, out, (double)count, TG_BIN_DIV, false);
    tg_node *n;
    out = tg__record(tp, id, out, 1, &x, 0, NULL, &n);
    if (n) {
        for (int d = 0; d < x->ndim; d++) n->iarg[d] = kshape[d];
        n->darg[0] = mean ? 1.0 / (double)count : 1.0;
    }
    return out;
}

tg_tensor *tg_sum(tg_tape *tp, tg_tensor *x) { return reduce(tp, "sum", TG_OP_SUM, x, 0, NULL, false, false); }
tg_tensor *tg_mean(tg_tape *tp, tg_tensor *x) { return reduce(tp, "mean", TG_OP_MEAN, x, 0, NULL, false, true); }
tg_tensor *tg_sum_dims(tg_tape *tp, tg_tensor *x, int ndims, const int *dims, bool keepdim)
{
    return reduce(tp, "sum", TG_OP_SUM_DIMS, x, ndims, dims, keepdim, false);
}
tg_tensor *tg_mean_dims(tg_tape *tp, tg_tensor *x, int ndims, const int *dims, bool keepdim)
{
    return reduce(tp, "mean", TG_OP_MEAN_DIMS, x, ndims, dims, keepdim, true);
}

/* forward: y = sum(x, dims) (or mean); so dx = expand(dy, x.shape) (/ count) */
int tg__sum_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    tg_tensor g = *n->grad; /* seen with keepdim shape, broadcast to x */
    g.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) g.shape[d] = n->iarg[d];
    tg__contiguous_strides(g.ndim, g.shape, g.stride);
    bool fresh;
    tg_tensor *buf = tg__grad_buf(x, &fresh, false);
    if (!buf) return TG_ENOMEM;
    if (fresh) {
        tg_k_copy(buf, &g);
        if (n->darg[0] != 1.0) tg_k_binary_scalar(buf, buf, n->darg[0], TG_BIN_MUL, false);
    } else {
        tg_k_axpy(buf, &g, n->darg[0]);
    }
    return TG_OK;
}

tg_tensor *tg_max_dim(tg_tape *tp, tg_tensor *x, int dim, bool keepdim, tg_tensor **indices)
{
    if (indices) *indices = NULL;
    if (!x) return tg__error_null_input("max");
    if (!tg__check_float("max", x)) return NULL;
    int d = tg__wrap_dim("max", dim, x->ndim);
    if (d < 0) return NULL;
    if (x->ndim > 0 && x->shape[d] == 0)
        return tg_error("max: cannot reduce over a zero-size dimension %d", d);
    int64_t kshape[TG_MAX_DIMS], oshape[TG_MAX_DIMS];
    bool reduced[TG_MAX_DIMS];
    int on = reduce_shape("max", x, 1, &d, keepdim, kshape, oshape, reduced);
    if (on < 0) return NULL;
    tg_tensor *out = tg_empty(tp, x->dtype, on, oshape);
    tg_tensor *idx = tg_empty(tp, TG_I64, on, oshape);
    if (!out || !idx) return NULL;
    tg_tensor ko = *out, ki = *idx;
    ko.ndim = ki.ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) ko.shape[i] = ki.shape[i] = kshape[i];
    tg__contiguous_strides(ko.ndim, ko.shape, ko.stride);
    tg__contiguous_strides(ki.ndim, ki.shape, ki.stride);
    if (x->ndim == 0)
        tg_k_copy(out, x), tg_k_fill(idx, 0);
    else
        tg_k_max_dim(&ko, &ki, x, d);
    tg_node *n;
    out = tg__record(tp, TG_OP_MAX_DIM, out, 1, &x, 1, &idx, &n);
    if (n) n->iarg[0] = x->ndim ? d : -1;
    if (indices && out) *indices = idx;
    return out;
}

/* forward: y = max(x, dim); so dx[argmax] += dy (zero elsewhere) */
int tg__max_dim_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    bool fresh;
    tg_tensor *buf = tg__grad_buf(x, &fresh, true);
    if (!buf) return TG_ENOMEM;
    int d = (int)n->iarg[0];
    const tg_tensor *idx = n->saved[0];
    int64_t cnt = tg_numel(idx);
    int64_t kshape[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) kshape[i] = i == d ? 1 : x->shape[i];
    for (int64_t i = 0; i < cnt; i++) {
        int64_t r = i, pos[TG_MAX_DIMS];
        for (int k = x->ndim - 1; k >= 0; k--) {
            pos[k] = r % kshape[k];
            r /= kshape[k];
        }
        double g = tg_item_at(n->grad, i);
        if (d >= 0) pos[d] = (int64_t)tg_item_at(idx, i);
        tg_set(buf, pos, tg_get(buf, pos) + g);
    }
    return TG_OK;
}

tg_tensor *tg_max(tg_tape *tp, tg_tensor *x)
{
    if (!x) return tg__error_null_input("max");
    if (!tg__check_float("max", x)) return NULL;
    int64_t cnt = tg_numel(x);
    if (cnt == 0) return tg_error("max: empty tensor has no maximum");
    double best = tg_item_at(x, 0);
    for (int64_t i = 1; i < cnt && !isnan(best); i++) {
        double v = tg_item_at(x, i);
        if (v > best || isnan(v)) best = v;
    }
    tg_tensor *out = tg_scalar(tp, x->dtype, best);
    tg_node *n;
    out = tg__record(tp, TG_OP_MAX_ALL, out, 1, &x, 1, &x, &n);
    if (n) n->darg[0] = best;
    return out;
}

/* forward: y = max(x); so dx = dy / k at each of the k maximal elements
 * (PyTorch's evenly_distribute_backward) */
int tg__max_all_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    bool fresh;
    tg_tensor *buf = tg__grad_buf(x, &fresh, true);
    if (!buf) return TG_ENOMEM;
    const tg_tensor *xs = n->saved[0];
    double best = n->darg[0], g = tg_item(n->grad);
    int64_t cnt = tg_numel(xs), k = 0;
    bool nan_best = isnan(best);
    for (int64_t i = 0; i < cnt; i++) {
        double v = tg_item_at(xs, i);
        k += nan_best ? isnan(v) : v == best;
    }
    for (int64_t i = 0; i < cnt; i++) {
        double v = tg_item_at(xs, i);
        if (nan_best ? isnan(v) : v == best) {
            /* buf is contiguous: flat index i is its element i */
            if (buf->dtype == TG_F32)
                ((float *)buf->data)[i] += (float)(g / (double)k);
            else
                ((double *)buf->data)[i] += g / (double)k;
        }
    }
    return TG_OK;
}

/* ---- softmax ------------------------------------------------------------------------------------- */

static tg_tensor *softmax(tg_tape *tp, const char *op, tg_op_id id, tg_tensor *x, int dim, bool log)
{
    if (!x) return tg__error_null_input(op);
    if (!tg__check_float(op, x)) return NULL;
    int d = tg__wrap_dim(op, dim, x->ndim);
    if (d < 0) return NULL;
    tg_tensor *out = tg__new_like(tp, x);
    if (!out) return NULL;
    tg_k_softmax(out, x, d, log);
    tg_node *n;
    out = tg__record(tp, id, out, 1, &x, 1, &out, &n);
    if (n) n->iarg[0] = d;
    return out;
}

tg_tensor *tg_softmax(tg_tape *tp, tg_tensor *x, int dim) { return softmax(tp, "softmax", TG_OP_SOFTMAX, x, dim, false); }
tg_tensor *tg_log_softmax(tg_tape *tp, tg_tensor *x, int dim)
{
    return softmax(tp, "log_softmax", TG_OP_LOG_SOFTMAX, x, dim, true);
}

/* forward: y = softmax(x); so dx = y * (dy - sum(dy * y))
 * forward: y = log_softmax(x); so dx = dy - exp(y) * sum(dy) */
int tg__softmax_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    bool fresh;
    tg_tensor *buf = tg__grad_buf(x, &fresh, false);
    if (!buf) return TG_ENOMEM;
    bool log = n->op == TG_OP_LOG_SOFTMAX;
    if (fresh) {
        tg_k_softmax_backward(buf, n->saved[0], n->grad, (int)n->iarg[0], log);
    } else {
        tg_tensor *t = tg__new_like(tg__btape(n), buf);
        if (!t) return TG_ENOMEM;
        tg_k_softmax_backward(t, n->saved[0], n->grad, (int)n->iarg[0], log);
        tg_k_axpy(buf, t, 1.0);
    }
    return TG_OK;
}
