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

/* torch.sum of a bool, uint8 or int64 tensor: int64, exact (wrapping on
 * overflow as PyTorch's int64 sum); never recorded. */
static tg_tensor *reduce_int(tg_tape *tp, const char *op, const tg_tensor *x, int ndims, const int *dims,
                             bool keepdim)
{
    int64_t kshape[TG_MAX_DIMS], oshape[TG_MAX_DIMS], ost[TG_MAX_DIMS], pos[TG_MAX_DIMS] = {0};
    bool reduced[TG_MAX_DIMS];
    int on = reduce_shape(op, x, ndims, dims, keepdim, kshape, oshape, reduced);
    if (on < 0) return NULL;
    tg_tensor *out = tg_zeros(tp, TG_I64, on, oshape);
    if (!out) return NULL;
    /* out seen with keepdim shape, broadcast back over the reduced dims */
    tg__contiguous_strides(x->ndim, kshape, ost);
    for (int d = 0; d < x->ndim; d++)
        if (reduced[d]) ost[d] = 0;
    uint64_t *o = (uint64_t *)out->data;
    int64_t cnt = tg_numel(x), xo = x->offset, oo = 0;
    for (int64_t i = 0; i < cnt; i++) {
        uint64_t v = x->dtype == TG_I64 ? (uint64_t)((const int64_t *)x->data)[xo] : ((const uint8_t *)x->data)[xo];
        o[oo] += v;
        for (int d = x->ndim - 1; d >= 0; d--) {
            xo += x->stride[d], oo += ost[d];
            if (++pos[d] < x->shape[d]) break;
            xo -= x->stride[d] * x->shape[d], oo -= ost[d] * x->shape[d];
            pos[d] = 0;
        }
    }
    return out;
}

static tg_tensor *reduce(tg_tape *tp, const char *op, tg_op_id id, tg_tensor *x, int ndims, const int *dims,
                         bool keepdim, bool mean)
{
    if (!x) return tg__error_null_input(op);
    if (!mean && (x->dtype == TG_BOOL || x->dtype == TG_U8 || x->dtype == TG_I64))
        return reduce_int(tp, op, x, ndims, dims, keepdim);
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
        n->darg[0] = mean ? (double)count : 0.0; /* the mean's divisor */
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

/* forward: y = sum(x, dims) (or mean); so dx = expand(dy, x.shape) (/ count,
 * a division as PyTorch's mean_backward) */
int tg__sum_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    tg_tensor g = *n->grad; /* seen with keepdim shape, broadcast to x */
    g.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) g.shape[d] = n->iarg[d];
    tg__contiguous_strides(g.ndim, g.shape, g.stride);
    bool mean = n->darg[0] != 0.0;
    if (mean) {
        tg_tensor *t = tg__new_like(tg__btape(n), x);
        if (!t) return TG_ENOMEM;
        tg_k_binary_scalar(t, &g, n->darg[0], TG_BIN_DIV, false);
        return tg__accum_owned(n, x, t);
    }
    bool fresh;
    tg_tensor *buf = tg__grad_buf(x, &fresh, false);
    if (!buf) return TG_ENOMEM;
    if (fresh)
        tg_k_copy(buf, &g);
    else
        tg_k_axpy(buf, &g, 1.0);
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

/* ---- along one dim: var, argmax, topk ------------------------------------------------------------ */

/* x seen as (outer, n, inner) around dim d. */
typedef struct {
    int64_t outer, n, inner;
} dim_split;

static dim_split split_at(const tg_tensor *x, int d)
{
    dim_split s = {1, x->ndim ? x->shape[d] : 1, 1};
    for (int i = 0; i < d; i++) s.outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) s.inner *= x->shape[i];
    return s;
}

/* The value at (o, j, i) of a dense float tensor seen as (outer, n, inner). */
static inline double at3(const tg_tensor *x, dim_split s, int64_t o, int64_t j, int64_t i)
{
    return tg__get_dense(x, (o * s.n + j) * s.inner + i);
}

/* An output of x's shape with dim d of size k (removed when !keepdim and k == 1). */
static tg_tensor *along_out(tg_tape *tp, const tg_tensor *x, int d, int64_t k, bool keepdim, tg_dtype dt)
{
    int64_t shape[TG_MAX_DIMS];
    int on = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != d || keepdim || k != 1) shape[on++] = i == d ? k : x->shape[i];
    return tg_empty(tp, dt, on, shape);
}

static int64_t *i64_data(tg_tensor *t) { return (int64_t *)t->data + t->offset; }

/* Mean and sum of squared deviations of row (o, ., i), two passes in double. */
static void row_moments(const tg_tensor *x, dim_split s, int64_t o, int64_t i, double *mean, double *m2)
{
    double sum = 0, ss = 0;
    for (int64_t j = 0; j < s.n; j++) sum += at3(x, s, o, j, i);
    double mu = s.n ? sum / (double)s.n : NAN;
    for (int64_t j = 0; j < s.n; j++) {
        double dv = at3(x, s, o, j, i) - mu;
        ss += dv * dv;
    }
    *mean = mu, *m2 = ss;
}

tg_tensor *tg_var(tg_tape *tp, tg_tensor *x, int dim, bool unbiased, bool keepdim)
{
    if (!x) return tg__error_null_input("var");
    if (!tg__check_float("var", x)) return NULL;
    int d = tg__wrap_dim("var", dim, x->ndim);
    if (d < 0) return NULL;
    const tg_tensor *xd = tg__dense(tp, x);
    tg_tensor *out = xd ? along_out(tp, x, d, 1, keepdim, x->dtype) : NULL;
    if (!out) return NULL;
    dim_split s = split_at(x, d);
    /* torch: divisor = max(N - correction, 0); 0 gives nan (or inf) as there */
    double divisor = (double)s.n - (unbiased ? 1.0 : 0.0);
    if (divisor < 0) divisor = 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            double mean, m2;
            row_moments(xd, s, o, i, &mean, &m2);
            tg__set_dense(out, o * s.inner + i, m2 / divisor);
        }
    tg_node *n;
    out = tg__record(tp, TG_OP_VAR, out, 1, &x, 1, (tg_tensor *const *)&xd, &n);
    if (n) n->iarg[0] = d, n->darg[0] = divisor;
    return out;
}

/* forward: y = sum((x - mean(x))^2, dim) / (N - correction); so
 * dx = ((2 / (N - correction)) * dy) * (x - mean(x, dim)), for float32 each
 * step rounded as PyTorch's var_backward rounds it */
int tg__var_backward(tg_node *n)
{
    const tg_tensor *x = n->saved[0];
    int d = (int)n->iarg[0];
    dim_split s = split_at(x, d);
    tg_tape *tp = tg__btape(n);
    tg_tensor *gx = tg__new_like(tp, x);
    if (!gx) return TG_ENOMEM;
    double divisor = n->darg[0];
    if (x->dtype == TG_F32 && x->ndim > 0) {
        int64_t ks[TG_MAX_DIMS];
        for (int i = 0; i < x->ndim; i++) ks[i] = i == d ? 1 : x->shape[i];
        tg_tensor *mean = tg_empty(tp, TG_F32, x->ndim, ks), *g2 = tg_empty(tp, TG_F32, x->ndim, ks);
        if (!mean || !g2) return TG_ENOMEM;
        tg_k_sum_to(mean, x);
        tg_k_binary_scalar(mean, mean, (double)s.n, TG_BIN_DIV, false);
        tg_tensor g = *n->grad; /* dy seen with keepdim shape */
        g.ndim = x->ndim;
        for (int i = 0; i < x->ndim; i++) g.shape[i] = ks[i];
        tg__contiguous_strides(g.ndim, g.shape, g.stride);
        tg_k_binary_scalar(g2, &g, 2.0 / divisor, TG_BIN_MUL, false);
        tg_k_binary(gx, x, mean, TG_BIN_SUB);
        tg_k_binary(gx, g2, gx, TG_BIN_MUL);
        return tg__accum_owned(n, n->in[0], gx);
    }
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            double mean, m2;
            row_moments(x, s, o, i, &mean, &m2);
            double g = 2.0 * tg_item_at(n->grad, o * s.inner + i) / divisor;
            for (int64_t j = 0; j < s.n; j++) tg__set_dense(gx, (o * s.n + j) * s.inner + i, g * (at3(x, s, o, j, i) - mean));
        }
    return tg__accum_owned(n, n->in[0], gx);
}

tg_tensor *tg_argmax(tg_tape *tp, const tg_tensor *x, int dim, bool keepdim)
{
    if (!x) return tg__error_null_input("argmax");
    if (!tg__check_float("argmax", x)) return NULL;
    int d = tg__wrap_dim("argmax", dim, x->ndim);
    if (d < 0) return NULL;
    if (x->ndim && x->shape[d] == 0) return tg_error("argmax: cannot reduce over a zero-size dimension %d", d);
    const tg_tensor *xd = tg__dense(tp, x);
    tg_tensor *out = xd ? along_out(tp, x, d, 1, keepdim, TG_I64) : NULL;
    if (!out) return NULL;
    dim_split s = split_at(x, d);
    int64_t *o64 = i64_data(out);
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            int64_t best = 0;
            double bv = at3(xd, s, o, 0, i);
            for (int64_t j = 1; j < s.n && !isnan(bv); j++) {
                double v = at3(xd, s, o, j, i);
                if (tg__greater(v, bv)) bv = v, best = j; /* the first index of the maximum */
            }
            o64[o * s.inner + i] = best;
        }
    return out;
}

int tg_topk(tg_tape *tp, tg_tensor *x, int64_t k, int dim, bool largest, bool sorted, tg_tensor **values,
            tg_tensor **indices)
{
    if (values) *values = NULL;
    if (indices) *indices = NULL;
    if (!values || !indices) return tg_error_status(TG_EINVAL, "topk: NULL output pointer");
    if (!x) {
        tg__error_null_input("topk");
        return TG_EINVAL;
    }
    if (!tg__check_float("topk", x)) return TG_EINVAL;
    int d = tg__wrap_dim("topk", dim, x->ndim);
    if (d < 0) return TG_EINVAL;
    dim_split s = split_at(x, d);
    if (k < 0 || k > s.n)
        return tg_error_status(TG_EINVAL, "topk: k (%lld) is out of range for dimension %d of size %lld", (long long)k,
                               d, (long long)s.n);
    (void)sorted; /* always sorted: the order PyTorch's sorted=True gives, ties by index */
    const tg_tensor *xd = tg__dense(tp, x);
    tg_tensor *val = xd ? along_out(tp, x, d, k, true, x->dtype) : NULL;
    tg_tensor *idx = val ? along_out(tp, x, d, k, true, TG_I64) : NULL;
    tg__ranked *row = idx ? tg_tape_alloc(tp, sizeof *row * (size_t)(s.n ? s.n : 1), false) : NULL;
    if (!row) return TG_ENOMEM;
    dim_split so = {s.outer, k, s.inner};
    int64_t *i64 = i64_data(idx);
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            for (int64_t j = 0; j < s.n; j++) row[j] = (tg__ranked){at3(xd, s, o, j, i), j};
            tg__rank(row, (size_t)s.n, largest);
            for (int64_t j = 0; j < k; j++) {
                int64_t at = (o * so.n + j) * so.inner + i;
                tg__set_dense(val, at, row[j].v);
                i64[at] = row[j].i;
            }
        }
    tg_node *n;
    val = tg__record(tp, TG_OP_TOPK, val, 1, &x, 1, &idx, &n);
    if (n) n->iarg[0] = d;
    if (!val) return TG_ENOMEM;
    *values = val;
    *indices = idx;
    return TG_OK;
}

/* forward: values = x.gather(dim, indices); so dx = zeros.scatter(dim, indices, dy) */
int tg__topk_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    const tg_tensor *idx = n->saved[0];
    int d = (int)n->iarg[0];
    dim_split s = split_at(x, d), so = split_at(idx, d);
    tg_tensor *gx = tg__new_like(tg__btape(n), x);
    if (!gx) return TG_ENOMEM;
    tg_k_fill(gx, 0.0);
    const int64_t *i64 = (const int64_t *)idx->data + idx->offset;
    for (int64_t o = 0; o < so.outer; o++)
        for (int64_t j = 0; j < so.n; j++)
            for (int64_t i = 0; i < so.inner; i++) {
                int64_t at = (o * so.n + j) * so.inner + i;
                tg__set_dense(gx, (o * s.n + i64[at]) * s.inner + i, tg_item_at(n->grad, at));
            }
    return tg__accum_owned(n, x, gx);
}
