/* Indexing by an int64 index tensor: gather and index_select, forward, shape
 * rule and backward (a scatter-add / index_add of the gradient into zeros of
 * the input's shape, as PyTorch's gather_backward and index_select_backward). */
#include "autograd_internal.h"

#include <string.h>

/* A tensor's shape with a 0-dim tensor seen as one element of one dim, as
 * PyTorch's gather and index_select see it (ensure_nonempty_dim/size). */
static int nonempty_shape(const tg_tensor *t, int64_t *shape)
{
    if (t->ndim == 0) {
        shape[0] = 1;
        return 1;
    }
    for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
    return t->ndim;
}

/* "[1, 0, 2]": the multi-index of row-major position i in shape. */
static const char *position_str(char *buf, size_t size, int ndim, const int64_t *shape, int64_t i)
{
    int64_t pos[TG_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        pos[d] = shape[d] ? i % shape[d] : 0;
        i = shape[d] ? i / shape[d] : 0;
    }
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && k < size; d++)
        k += (size_t)snprintf(buf + k, size - k, "%s%lld", d ? ", " : "", (long long)pos[d]);
    if (k < size) snprintf(buf + k, size - k, "]");
    return buf;
}

/* The index as a flat contiguous int64 copy in tp (what backward keeps),
 * every value checked against [0, size); an error naming the first value out
 * of range and where it is. */
static tg_tensor *checked_index(tg_tape *tp, const char *op, const tg_tensor *index, int dim, int64_t size)
{
    int64_t cnt = tg_numel(index);
    tg_tensor *flat = tg_empty(tp, TG_I64, 1, &cnt);
    if (!flat) return NULL;
    int64_t *id = (int64_t *)flat->data;
    if (cnt == 0) return flat;
    tg_tensor fv = *flat; /* the copy seen with index's shape */
    fv.ndim = index->ndim;
    for (int d = 0; d < index->ndim; d++) fv.shape[d] = index->shape[d];
    tg__contiguous_strides(fv.ndim, fv.shape, fv.stride);
    tg_k_copy(&fv, index);
    for (int64_t i = 0; i < cnt; i++) {
        if (id[i] < 0 || id[i] >= size) {
            int64_t shape[TG_MAX_DIMS];
            int nd = nonempty_shape(index, shape);
            char where[160];
            return tg_error("%s: index %lld is out of bounds for dimension %d with size %lld (at index%s)", op,
                            (long long)id[i], dim, (long long)size,
                            position_str(where, sizeof where, nd, shape, i));
        }
    }
    return flat;
}

/* ---- gather ----------------------------------------------------------------------------------- */

tg_tensor *tg_gather(tg_tape *tp, tg_tensor *x, int dim, const tg_tensor *index)
{
    char sx[64], si[64];
    if (!x || !index) return tg__error_null_input("gather");
    if (tg__refuse_q8("gather", x)) return NULL;
    if (index->dtype != TG_I64) return tg_error("gather: index must be int64, got %s", tg_dtype_name(index->dtype));
    int d = tg__wrap_dim("gather", dim, x->ndim);
    if (d < 0) return NULL;
    int64_t xs[TG_MAX_DIMS], is[TG_MAX_DIMS];
    int nd = nonempty_shape(x, xs);
    if (nonempty_shape(index, is) != nd)
        return tg_error("gather: index %s must have the same number of dimensions as input %s",
                        tg_shape_str(index, si, sizeof si), tg_shape_str(x, sx, sizeof sx));
    int64_t cnt = tg_numel(index);
    for (int k = 0; cnt > 0 && k < nd; k++)
        if (k != d && is[k] > xs[k])
            return tg_error("gather: size does not match at dimension %d: expected index %s to be no larger "
                            "than input %s apart from dimension %d",
                            k, tg_shape_str(index, si, sizeof si), tg_shape_str(x, sx, sizeof sx), d);
    tg_tensor *flat = checked_index(tp, "gather", index, d, xs[d]);
    tg_tensor *out = flat ? tg_empty(tp, x->dtype, index->ndim, index->shape) : NULL;
    const tg_tensor *xd = out ? tg__dense(tp, x) : NULL;
    if (!xd) return NULL;
    /* out[i..] = x[i.. with index[i..] along d], row-major over index's shape */
    size_t es = tg_dtype_size(x->dtype);
    int64_t xst[TG_MAX_DIMS];
    tg__contiguous_strides(nd, xs, xst);
    const char *src = tg__ptr(xd, xd->offset);
    char *dst = tg__ptr(out, out->offset);
    const int64_t *id = (const int64_t *)flat->data;
    int64_t pos[TG_MAX_DIMS] = {0};
    for (int64_t i = 0; i < cnt; i++) {
        int64_t off = 0;
        for (int k = 0; k < nd; k++) off += (k == d ? id[i] : pos[k]) * xst[k];
        memcpy(dst + (size_t)i * es, src + (size_t)off * es, es);
        for (int k = nd - 1; k >= 0 && ++pos[k] == is[k]; k--) pos[k] = 0;
    }
    tg_node *n;
    out = tg__record(tp, TG_OP_GATHER, out, 1, &x, 1, &flat, &n);
    if (n) n->iarg[0] = d;
    return out;
}

/* forward: y = x.gather(d, index); so dx = zeros(x.shape).scatter_add_(d,
 * index, dy): each element of dx sums, in the order of index along d, the
 * gradients of the outputs that read it. */
int tg__gather_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    tg_tape *bt = tg__btape(n);
    const tg_tensor *g = tg__dense(bt, n->grad);
    tg_tensor *dx = g ? tg_zeros(bt, x->dtype, x->ndim, x->shape) : NULL;
    if (!dx) return TG_ENOMEM;
    int d = (int)n->iarg[0];
    int64_t xs[TG_MAX_DIMS], is[TG_MAX_DIMS], xst[TG_MAX_DIMS];
    int nd = nonempty_shape(x, xs);
    nonempty_shape(n->out, is);
    tg__contiguous_strides(nd, xs, xst);
    const int64_t *id = (const int64_t *)n->saved[0]->data;
    int64_t cnt = n->saved[0]->shape[0], pos[TG_MAX_DIMS] = {0};
    for (int64_t i = 0; i < cnt; i++) {
        int64_t off = 0;
        for (int k = 0; k < nd; k++) off += (k == d ? id[i] : pos[k]) * xst[k];
        if (dx->dtype == TG_F32)
            ((float *)dx->data)[off] += ((const float *)g->data)[g->offset + i];
        else
            ((double *)dx->data)[off] += ((const double *)g->data)[g->offset + i];
        for (int k = nd - 1; k >= 0 && ++pos[k] == is[k]; k--) pos[k] = 0;
    }
    return tg__accum_owned(n, x, dx);
}

/* ---- index_select ----------------------------------------------------------------------------- */

tg_tensor *tg_index_select(tg_tape *tp, tg_tensor *x, int dim, const tg_tensor *index)
{
    char si[64];
    if (!x || !index) return tg__error_null_input("index_select");
    if (tg__refuse_q8("index_select", x)) return NULL;
    if (index->dtype != TG_I64)
        return tg_error("index_select: index must be int64, got %s", tg_dtype_name(index->dtype));
    if (index->ndim > 1)
        return tg_error("index_select: index must be a vector (1-D), got shape %s",
                        tg_shape_str(index, si, sizeof si));
    int d = tg__wrap_dim("index_select", dim, x->ndim);
    if (d < 0) return NULL;
    int64_t xs[TG_MAX_DIMS];
    int nd = nonempty_shape(x, xs);
    int64_t k = tg_numel(index);
    if (x->ndim == 0 && k != 1)
        return tg_error("index_select: index of a 0-dim tensor must have exactly one element, got %lld",
                        (long long)k);
    tg_tensor *flat = checked_index(tp, "index_select", index, d, xs[d]);
    int64_t os[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) os[i] = i == d ? k : x->shape[i];
    tg_tensor *out = flat ? tg_empty(tp, x->dtype, x->ndim, os) : NULL;
    const tg_tensor *xd = out ? tg__dense(tp, x) : NULL;
    if (!xd) return NULL;
    /* out[o, j, t] = x[o, index[j], t] over (outer, along d, inner) */
    int64_t outer = 1, inner = 1, size = xs[d];
    for (int i = 0; i < d; i++) outer *= xs[i];
    for (int i = d + 1; i < nd; i++) inner *= xs[i];
    size_t row = (size_t)inner * tg_dtype_size(x->dtype);
    const char *src = tg__ptr(xd, xd->offset);
    char *dst = tg__ptr(out, out->offset);
    const int64_t *id = (const int64_t *)flat->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < k; j++)
            memcpy(dst + (size_t)(o * k + j) * row, src + (size_t)(o * size + id[j]) * row, row);
    tg_node *n;
    out = tg__record(tp, TG_OP_INDEX_SELECT, out, 1, &x, 1, &flat, &n);
    if (n) n->iarg[0] = d;
    return out;
}

/* forward: y = x.index_select(d, index); so dx = zeros(x.shape).index_add_(d,
 * index, dy): slice j of dy along d adds into slice index[j] of dx, j in order. */
int tg__index_select_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    tg_tape *bt = tg__btape(n);
    const tg_tensor *g = tg__dense(bt, n->grad);
    tg_tensor *dx = g ? tg_zeros(bt, x->dtype, x->ndim, x->shape) : NULL;
    if (!dx) return TG_ENOMEM;
    int d = (int)n->iarg[0];
    int64_t xs[TG_MAX_DIMS];
    int nd = nonempty_shape(x, xs);
    int64_t outer = 1, inner = 1, size = xs[d], k = n->saved[0]->shape[0];
    for (int i = 0; i < d; i++) outer *= xs[i];
    for (int i = d + 1; i < nd; i++) inner *= xs[i];
    const int64_t *id = (const int64_t *)n->saved[0]->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < k; j++) {
            int64_t to = (o * size + id[j]) * inner, from = (o * k + j) * inner;
            if (dx->dtype == TG_F32) {
                float *a = (float *)dx->data + to;
                const float *b = (const float *)g->data + g->offset + from;
                for (int64_t t = 0; t < inner; t++) a[t] += b[t];
            } else {
                double *a = (double *)dx->data + to;
                const double *b = (const double *)g->data + g->offset + from;
                for (int64_t t = 0; t < inner; t++) a[t] += b[t];
            }
        }
    return tg__accum_owned(n, x, dx);
}
