/* Losses: mean squared error and cross-entropy over logits. */
#include "autograd_internal.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static tg_tensor *reduce_loss(tg_tape *tp, tg_tensor *elem, tg_reduction r, int64_t count)
{
    if (r == TG_REDUCE_NONE) return elem;
    tg_tensor *out = tg_scalar(tp, elem->dtype, 0.0);
    if (!out) return NULL;
    tg_tensor kv = *out;
    kv.ndim = elem->ndim;
    for (int d = 0; d < elem->ndim; d++) kv.shape[d] = 1, kv.stride[d] = 0;
    tg_k_sum_to(&kv, elem);
    if (r == TG_REDUCE_MEAN) tg_k_binary_scalar(out, out, (double)count, TG_BIN_DIV, false);
    return out;
}

static bool check_reduction(const char *op, tg_reduction r)
{
    if (r != TG_REDUCE_MEAN && r != TG_REDUCE_SUM && r != TG_REDUCE_NONE) {
        tg_error("%s: unknown reduction %d", op, (int)r);
        return false;
    }
    return true;
}

tg_tensor *tg_mse_loss(tg_tape *tp, tg_tensor *input, tg_tensor *target, tg_reduction r)
{
    char si[64], st[64];
    if (!input || !target) return tg__error_null_input("mse_loss");
    if (!tg__check_same_dtype("mse_loss", input, target) || !check_reduction("mse_loss", r)) return NULL;
    if (!tg_same_shape(input, target))
        return tg_error("mse_loss: input %s and target %s must have the same shape", tg_shape_str(input, si, 64),
                        tg_shape_str(target, st, 64));
    tg_tensor *diff = tg__new_like(tp, input);
    tg_tensor *sq = tg__new_like(tp, input);
    if (!diff || !sq) return NULL;
    tg_k_binary(diff, input, target, TG_BIN_SUB);
    tg_k_binary(sq, diff, diff, TG_BIN_MUL);
    tg_tensor *out = reduce_loss(tp, sq, r, tg_numel(input));
    tg_tensor *in[2] = {input, target};
    tg_node *n;
    out = tg__record(tp, TG_OP_MSE_LOSS, out, 2, in, 1, &diff, &n);
    if (n) n->iarg[0] = r;
    return out;
}

/* forward: l = reduce((x - t)^2); so dx = 2 (x - t) dl (/ numel for mean), dt = -dx */
int tg__mse_loss_backward(tg_node *n)
{
    const tg_tensor *diff = n->saved[0];
    tg_tensor *gx = tg__new_like(tg__btape(n), diff);
    if (!gx) return TG_ENOMEM;
    tg_reduction r = (tg_reduction)n->iarg[0];
    tg_k_binary(gx, diff, n->grad, TG_BIN_MUL); /* dl broadcasts (0-dim for mean/sum) */
    double scale = r == TG_REDUCE_MEAN ? 2.0 / (double)tg_numel(diff) : 2.0;
    tg_k_binary_scalar(gx, gx, scale, TG_BIN_MUL, false);
    int st = tg__accum(n->in[0], gx);
    if (st || !tg__needs_grad(n->in[1])) return st;
    tg_k_binary_scalar(gx, gx, -1.0, TG_BIN_MUL, false);
    return tg__accum(n->in[1], gx);
}

/* The (N, C) scores and int64 (N) class targets both losses take; the
 * targets flat in a TG_I64 tensor of tp, checked against C. A target equal
 * to ignore_index is kept as -1: that row has no loss and no gradient, and
 * the mean divides by the rows not ignored (*counted), as PyTorch's. */
static tg_tensor *class_targets(tg_tape *tp, const char *op, const tg_tensor *x, const tg_tensor *target, tg_reduction r,
                                int64_t ignore_index, int64_t *counted)
{
    char sl[64], st[64];
    if (!x || !target) return tg__error_null_input(op);
    if (!tg__check_float(op, x) || !check_reduction(op, r)) return NULL;
    if (x->ndim != 2) return tg_error("%s: input must be (N, C), got %s", op, tg_shape_str(x, sl, 64));
    if (target->dtype != TG_I64 || target->ndim != 1 || target->shape[0] != x->shape[0])
        return tg_error("%s: target must be int64 of shape (%lld), got %s %s", op, (long long)x->shape[0],
                        tg_dtype_name(target->dtype), tg_shape_str(target, st, 64));
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *t = tg_empty(tp, TG_I64, 1, &N);
    if (!t) return NULL;
    int64_t *tv = t->data;
    *counted = 0;
    for (int64_t i = 0; i < N; i++) {
        tv[i] = (int64_t)tg_item_at(target, i);
        if (tv[i] == ignore_index) {
            tv[i] = -1;
            continue;
        }
        if (tv[i] < 0 || tv[i] >= C)
            return tg_error("%s: target %lld at position %lld is out of bounds for %lld classes", op, (long long)tv[i],
                            (long long)i, (long long)C);
        (*counted)++;
    }
    return t;
}

/* PyTorch's sum of the losses of rows not ignored (nll_loss_out_frame): an
 * 8-level cascade of partial sums in the element type, level j + 1 taking
 * level j's sum whenever the row index b has no bit set in level j's
 * 2^p-bit field, p = max(4, ceil(log2 N) / 8); the levels are then added in
 * order. */
#define NLL_CASCADE(T, NAME)                                                                          \
    static T NAME(const T *e, const int64_t *tv, int64_t N)                                       \
    {                                                                                                 \
        int64_t lg = 1;                                                                               \
        while (lg < 63 && ((int64_t)1 << lg) < N) lg++;                                               \
        int64_t p = lg / 8 > 4 ? lg / 8 : 4, mask = ((int64_t)1 << p) - 1;                            \
        T part[8] = {0};                                                                              \
        for (int64_t b = 0; b < N; b++) {                                                             \
            if (tv[b] < 0) continue;                                                                  \
            part[0] += e[b];                                                                          \
            for (int j = 0; j + 1 < 8 && (b & (mask << (j * p))) == 0; j++) {                         \
                part[j + 1] += part[j];                                                               \
                part[j] = 0;                                                                          \
            }                                                                                         \
        }                                                                                             \
        T total = 0;                                                                                  \
        for (int j = 0; j < 8; j++) total += part[j];                                                 \
        return total;                                                                                 \
    }
NLL_CASCADE(float, nll_sum_f32)
NLL_CASCADE(double, nll_sum_f64)

/* Reduces the per-row losses elem (0 for an ignored row) as PyTorch's
 * nll_loss does (the mean divides by the rows not ignored, in the element
 * type). */
static tg_tensor *nll_reduce(tg_tape *tp, tg_tensor *elem, const int64_t *tv, tg_reduction r, int64_t counted)
{
    int64_t N = elem->shape[0];
    if (r == TG_REDUCE_NONE) return elem;
    tg_tensor *out = tg_scalar(tp, elem->dtype, 0.0);
    if (!out) return NULL;
    /* every row ignored: the mean is 0/0 = nan, as PyTorch's */
    if (elem->dtype == TG_F32) {
        float v = nll_sum_f32(elem->data, tv, N);
        *(float *)out->data = r == TG_REDUCE_MEAN ? v / (float)counted : v;
    } else {
        double v = nll_sum_f64(elem->data, tv, N);
        *(double *)out->data = r == TG_REDUCE_MEAN ? v / (double)counted : v;
    }
    return out;
}

/* loss_i = -logp[i, t_i], reduced; logp dense (N, C) */
static tg_tensor *nll_forward(tg_tape *tp, const tg_tensor *logp, const tg_tensor *t, tg_reduction r, int64_t counted)
{
    int64_t N = logp->shape[0], C = logp->shape[1];
    tg_tensor *elem = tg_empty(tp, logp->dtype, 1, &N);
    if (!elem) return NULL;
    const int64_t *tv = t->data;
    for (int64_t i = 0; i < N; i++) tg__set_dense(elem, i, tv[i] < 0 ? 0.0 : -tg__get_dense(logp, i * C + tv[i]));
    return nll_reduce(tp, elem, tv, r, counted);
}

/* dl_i: the incoming gradient of row i's loss (the mean divides by the rows
 * not ignored, in the element type as PyTorch's) */
static double row_grad(const tg_node *n, tg_reduction r, int64_t i)
{
    if (r == TG_REDUCE_NONE) return tg_item_at(n->grad, i);
    if (r == TG_REDUCE_SUM) return tg_item(n->grad);
    if (n->grad->dtype == TG_F32) return (float)tg_item(n->grad) / (float)n->iarg[2];
    return tg_item(n->grad) / (double)n->iarg[2];
}

tg_tensor *tg_cross_entropy_ignore(tg_tape *tp, tg_tensor *logits, const tg_tensor *target, tg_reduction r,
                                   int64_t ignore_index)
{
    int64_t counted;
    tg_tensor *t = class_targets(tp, "cross_entropy", logits, target, r, ignore_index, &counted);
    if (!t) return NULL;
    /* Backward needs log_softmax(x) = (x - max) - lse: each row's max and
     * lse are kept, not a second logits-sized tensor */
    int64_t N = logits->shape[0], C = logits->shape[1], sshape[2] = {N, 2};
    const tg_tensor *x = tg__dense(tp, logits);
    tg_tensor *stats = x ? tg_empty(tp, logits->dtype, 2, sshape) : NULL;
    tg_tensor *elem = stats ? tg_empty(tp, logits->dtype, 1, &N) : NULL;
    if (!elem) return NULL;
    tg_k_log_softmax_stats(stats, x);
    const int64_t *tv = t->data;
    for (int64_t i = 0; i < N; i++) {
        if (tv[i] < 0) {
            tg__set_dense(elem, i, 0.0);
        } else if (x->dtype == TG_F32) {
            const float *xr = (const float *)x->data + x->offset + i * C, *st = (const float *)stats->data + 2 * i;
            ((float *)elem->data)[i] = -((xr[tv[i]] - st[0]) - st[1]);
        } else {
            const double *xr = (const double *)x->data + x->offset + i * C, *st = (const double *)stats->data + 2 * i;
            ((double *)elem->data)[i] = -((xr[tv[i]] - st[0]) - st[1]);
        }
    }
    tg_tensor *out = nll_reduce(tp, elem, tv, r, counted);
    tg_tensor *saved[3] = {(tg_tensor *)x, t, stats};
    tg_node *n;
    out = tg__record(tp, TG_OP_CROSS_ENTROPY, out, 1, &logits, 3, saved, &n);
    if (n) n->iarg[0] = r, n->iarg[2] = counted;
    return out;
}

tg_tensor *tg_cross_entropy(tg_tape *tp, tg_tensor *logits, const tg_tensor *target, tg_reduction r)
{
    return tg_cross_entropy_ignore(tp, logits, target, r, TG_IGNORE_INDEX);
}

/* forward: l = reduce(-log_softmax(x)[i, t_i]); so dx_i = (softmax(x_i) - onehot(t_i)) dl_i
 * (dl_i = dl / N for mean) */
int tg__cross_entropy_backward(tg_node *n)
{
    const tg_tensor *x = n->saved[0], *stats = n->saved[2];
    const int64_t *tv = n->saved[1]->data;
    tg_reduction r = (tg_reduction)n->iarg[0];
    int64_t N = x->shape[0], C = x->shape[1];
    tg_tensor *gx = tg_empty(tg__btape(n), x->dtype, 2, x->shape);
    if (!gx) return TG_ENOMEM;
    for (int64_t i = 0; i < N; i++) {
        if (tv[i] < 0) { /* ignored: no gradient */
            memset((char *)gx->data + (size_t)(i * C) * tg_dtype_size(gx->dtype), 0, (size_t)C * tg_dtype_size(gx->dtype));
            continue;
        }
        double g = row_grad(n, r, i);
        if (gx->dtype == TG_F32) {
            /* log_softmax's output again, then as PyTorch's nll_loss
             * backward (-dl_i at the target) and log_softmax backward
             * (dy - exp(y) * sum(dy), fused) */
            const float *xr = (const float *)x->data + x->offset + i * C, *st = (const float *)stats->data + 2 * i;
            float *d = (float *)gx->data + i * C, gt = -(float)g, m = st[0], lse = st[1];
            for (int64_t j = 0; j < C; j++) d[j] = (xr[j] - m) - lse;
            tg__vexpf(d, d, C);
            float et = d[tv[i]];
            for (int64_t j = 0; j < C; j++) d[j] = fmaf(-d[j], gt, 0.0f);
            d[tv[i]] = fmaf(-et, gt, gt);
        } else {
            const double *xr = (const double *)x->data + x->offset + i * C, *st = (const double *)stats->data + 2 * i;
            double *d = (double *)gx->data + i * C;
            for (int64_t j = 0; j < C; j++) d[j] = exp((xr[j] - st[0]) - st[1]) * g;
            d[tv[i]] -= g;
        }
    }
    return tg__accum_owned(n, n->in[0], gx);
}

tg_tensor *tg_nll_loss_ignore(tg_tape *tp, tg_tensor *logp, const tg_tensor *target, tg_reduction r,
                              int64_t ignore_index)
{
    int64_t counted;
    tg_tensor *t = class_targets(tp, "nll_loss", logp, target, r, ignore_index, &counted);
    if (!t) return NULL;
    const tg_tensor *ld = tg__dense(tp, logp);
    tg_tensor *out = ld ? nll_forward(tp, ld, t, r, counted) : NULL;
    tg_node *n;
    out = tg__record(tp, TG_OP_NLL_LOSS, out, 1, &logp, 1, &t, &n);
    if (n) n->iarg[0] = r, n->iarg[1] = logp->shape[1], n->iarg[2] = counted;
    return out;
}

tg_tensor *tg_nll_loss(tg_tape *tp, tg_tensor *logp, const tg_tensor *target, tg_reduction r)
{
    return tg_nll_loss_ignore(tp, logp, target, r, TG_IGNORE_INDEX);
}

/* forward: l = reduce(-logp[i, t_i]); so dlogp[i, t_i] = -dl_i */
int tg__nll_loss_backward(tg_node *n)
{
    const int64_t *tv = n->saved[0]->data;
    tg_reduction r = (tg_reduction)n->iarg[0];
    int64_t N = n->saved[0]->shape[0], C = n->iarg[1];
    int64_t shape[2] = {N, C};
    tg_tensor *gx = tg_zeros(tg__btape(n), n->in[0]->dtype, 2, shape);
    if (!gx) return TG_ENOMEM;
    for (int64_t i = 0; i < N; i++)
        if (tv[i] >= 0) tg__set_dense(gx, i * C + tv[i], -row_grad(n, r, i));
    return tg__accum_owned(n, n->in[0], gx);
}

/* ---- embedding ------------------------------------------------------------------------------------ */

tg_tensor *tg_embedding(tg_tape *tp, tg_tensor *weight, const tg_tensor *ids)
{
    char sw[64];
    if (!weight || !ids) return tg__error_null_input("embedding");
    if (weight->dtype != TG_BF16 && weight->dtype != TG_Q8 && !tg__check_float("embedding", weight)) return NULL;
    if (weight->ndim != 2)
        return tg_error("embedding: weight must be (num_embeddings, embedding_dim), got %s",
                        tg_shape_str(weight, sw, sizeof sw));
    if (ids->dtype != TG_I64) return tg_error("embedding: ids must be int64, got %s", tg_dtype_name(ids->dtype));
    if (ids->ndim >= TG_MAX_DIMS) return tg_error("embedding: ids have too many dims (%d)", ids->ndim);
    int64_t num = weight->shape[0], dim = weight->shape[1], cnt = tg_numel(ids);
    /* the ids, flat and checked, are what backward keeps */
    tg_tensor *flat = tg_empty(tp, TG_I64, 1, &cnt);
    if (!flat) return NULL;
    int64_t *id = (int64_t *)flat->data;
    for (int64_t i = 0; i < cnt; i++) {
        id[i] = (int64_t)tg_item_at(ids, i);
        if (id[i] < 0 || id[i] >= num)
            return tg_error("embedding: id %lld at position %lld is out of range for %lld embeddings", (long long)id[i],
                            (long long)i, (long long)num);
    }
    int64_t shape[TG_MAX_DIMS];
    for (int d = 0; d < ids->ndim; d++) shape[d] = ids->shape[d];
    shape[ids->ndim] = dim;
    bool bf16 = weight->dtype == TG_BF16; /* a frozen bf16 table: rows widened to float32, exactly */
    bool q8 = weight->dtype == TG_Q8;     /* an int8 one: each row's blocks widened, q * d */
    tg_tensor *out = tg_empty(tp, bf16 || q8 ? TG_F32 : weight->dtype, ids->ndim + 1, shape);
    if (out && q8) {
        for (int64_t i = 0; i < cnt; i++) {
            tg_tensor row = *weight, o = *out;
            row.ndim = o.ndim = 2;
            row.shape[0] = o.shape[0] = 1;
            row.shape[1] = o.shape[1] = dim;
            row.stride[1] = weight->stride[1];
            o.stride[0] = row.stride[0] = 0;
            o.stride[1] = 1;
            row.offset = weight->offset + id[i] * weight->stride[0];
            o.offset = out->offset + i * dim;
            if (!tg__q8_copy(&o, &row)) return NULL;
        }
        return tg__record(tp, TG_OP_EMBEDDING, out, 1, &weight, 1, &flat, NULL);
    }
    const tg_tensor *w = out ? tg__dense(tp, weight) : NULL;
    if (!w) return NULL;
    size_t es = tg_dtype_size(weight->dtype), row = (size_t)dim * es;
    const char *src = tg__ptr(w, w->offset);
    char *dst = tg__ptr(out, out->offset);
    for (int64_t i = 0; i < cnt; i++) {
        if (!bf16) {
            memcpy(dst + (size_t)i * row, src + (size_t)id[i] * row, row);
            continue;
        }
        const uint16_t *r = (const uint16_t *)(const void *)src + id[i] * dim;
        float *o = (float *)(void *)dst + i * dim;
        for (int64_t k = 0; k < dim; k++) o[k] = tg__bf16_to_f32(r[k]);
    }
    return tg__record(tp, TG_OP_EMBEDDING, out, 1, &weight, 1, &flat, NULL);
}

/* forward: y[i] = weight[ids[i]]; so dweight[ids[i]] += dy[i] (a scatter-add) */
int tg__embedding_backward(tg_node *n)
{
    tg_tensor *w = n->in[0];
    const tg_tensor *flat = n->saved[0];
    const tg_tensor *g = tg__dense(tg__btape(n), n->grad);
    if (!g) return TG_ENOMEM;
    /* under EXACT a weight whose gradient holds a sum already (a second
     * lookup in this backward, as DPO's two forwards make) gets this
     * lookup's gradient whole first, then added, as PyTorch adds them */
    bool fresh, apart = n->numerics == TG_NUMERICS_EXACT && tg__needs_grad(w) && tg__grad_held(w);
    tg_tensor *buf = apart ? tg_zeros(tg__btape(n), w->dtype, w->ndim, w->shape) : tg__grad_buf(w, &fresh, true);
    if (!buf) return TG_ENOMEM;
    int64_t cnt = flat->shape[0], dim = w->shape[1];
    const int64_t *id = (const int64_t *)flat->data + flat->offset;
    if (buf->dtype == TG_F32) {
        float *b = (float *)buf->data + buf->offset;
        const float *gy = (const float *)g->data + g->offset;
        for (int64_t i = 0; i < cnt; i++)
            for (int64_t k = 0; k < dim; k++) b[id[i] * dim + k] += gy[i * dim + k];
    } else {
        double *b = (double *)buf->data + buf->offset;
        const double *gy = (const double *)g->data + g->offset;
        for (int64_t i = 0; i < cnt; i++)
            for (int64_t k = 0; k < dim; k++) b[id[i] * dim + k] += gy[i * dim + k];
    }
    return apart ? tg__accum(w, buf) : TG_OK;
}

/* ---- fused LayerNorm (the book's: scale * (x - mean) / sqrt(var + eps) + shift) ------------------------ */

/* float32: the book's LayerNorm op for op as PyTorch rounds it.
 *   mean = sum(x) / D (PyTorch's sum), var = x.var(unbiased=False) (in double,
 *   rounded once), c = x - mean, sd = sqrt(var + eps), y = scale * (c / sd) + shift.
 * Saved: x, scale, and (mean, sd) per row. */
static tg_tensor *layer_norm_f32(tg_tape *tp, tg_tensor *x, const tg_tensor *xd, const tg_tensor *gd,
                                 const tg_tensor *bd, double eps, tg_tensor *scale, tg_tensor *shift)
{
    int64_t D = x->shape[x->ndim - 1], rows = tg_numel(x) / D;
    tg_tensor *out = tg__new_like(tp, x);
    tg_tensor *stats = tg_empty(tp, TG_F32, 1, (int64_t[]){2 * rows});
    if (!xd || !gd || !bd || !out || !stats) return NULL;
    float *st = stats->data, *y = tg__ptr(out, out->offset);
    const float *xs = tg__ptr(xd, xd->offset), *w = tg__ptr(gd, gd->offset), *b = tg__ptr(bd, bd->offset);
    const float epsf = (float)eps;
#pragma omp parallel for if (rows * D > TG_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = xs + r * D;
        float mean = tg__torch_sum_f32(xr, D) / (float)D;
        double sum = 0, m2 = 0;
        for (int64_t k = 0; k < D; k++) sum += xr[k];
        double mu = sum / (double)D;
        for (int64_t k = 0; k < D; k++) m2 += (xr[k] - mu) * (xr[k] - mu);
        float sd = sqrtf((float)(m2 / (double)D) + epsf);
        st[2 * r] = mean, st[2 * r + 1] = sd;
        for (int64_t k = 0; k < D; k++) y[r * D + k] = w[k] * ((xr[k] - mean) / sd) + b[k];
    }
    tg_tensor *in[3] = {x, scale, shift}, *saved[3] = {(tg_tensor *)xd, (tg_tensor *)gd, stats};
    return tg__record(tp, TG_OP_LAYER_NORM, out, 3, in, 3, saved, NULL);
}

/* float32 backward, the book's LayerNorm's graph as PyTorch runs it (dy = g):
 *   dshift = sum_rows g, dscale = sum_rows g * (c / sd), gn = g * scale,
 *   gc = gn / sd, gsd = sum_k -gn * ((c / sd) / sd), gv = (gsd / sd) / 2,
 * and x's gradient receives, in the order backward's schedule delivers them,
 *   gc (x - mean), ((2 / D) * gv) * c (var), -sum_k(gc) / D (mean). */
static int layer_norm_backward_f32(tg_node *n, const tg_tensor *g)
{
    const tg_tensor *x = n->saved[0], *scale = n->saved[1];
    const float *st = n->saved[2]->data;
    int64_t D = x->shape[x->ndim - 1], rows = tg_numel(x) / D;
    tg_tape *bt = tg__btape(n);
    const float *xs = tg__ptr(x, x->offset), *w = tg__ptr(scale, scale->offset), *gy = tg__ptr(g, g->offset);
    if (tg__needs_grad(n->in[0])) {
        bool fresh;
        tg_tensor *buf = tg__grad_buf(n->in[0], &fresh, false);
        int nt = 1;
#ifdef _OPENMP
        nt = omp_get_max_threads();
#endif
        float *scratch = tg_tape_alloc(bt, sizeof(float) * 2 * (size_t)D * (size_t)nt, false);
        if (!buf || !scratch) return TG_ENOMEM;
        float *gx = tg__ptr(buf, buf->offset);
        const float k2 = (float)(2.0 / (double)D);
#pragma omp parallel for if (rows * D > TG_PAR_MIN && nt > 1) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = xs + r * D, *gr = gy + r * D;
            float mean = st[2 * r], sd = st[2 * r + 1];
            int tid = 0;
#ifdef _OPENMP
            tid = omp_get_thread_num();
#endif
            float *gc = scratch + (size_t)tid * 2 * (size_t)D, *t = gc + D;
            for (int64_t k = 0; k < D; k++) {
                float gn = gr[k] * w[k], c = xr[k] - mean;
                gc[k] = gn / sd;
                t[k] = -(gn * ((c / sd) / sd));
            }
            float gv = (tg__torch_sum_f32(t, D) / sd) / 2.0f;
            float gm = -tg__torch_sum_f32(gc, D) / (float)D;
            float g2 = k2 * gv;
            float *o = gx + r * D;
            for (int64_t k = 0; k < D; k++) {
                float a = fresh ? gc[k] : o[k] + gc[k];
                o[k] = (a + g2 * (xr[k] - mean)) + gm;
            }
        }
    }
    if (!tg__needs_grad(n->in[1]) && !tg__needs_grad(n->in[2])) return TG_OK;
    tg_tensor *gs = tg__new_like(bt, scale), *gb = tg__new_like(bt, scale), *prod = tg__new_like(bt, x);
    if (!gs || !gb || !prod) return TG_ENOMEM;
    float *p = prod->data;
    for (int64_t r = 0; r < rows; r++) {
        float mean = st[2 * r], sd = st[2 * r + 1];
        for (int64_t k = 0; k < D; k++) p[r * D + k] = gy[r * D + k] * ((xs[r * D + k] - mean) / sd);
    }
    tg__torch_sum_rows_f32(gb->data, gy, rows, D, D);
    tg__torch_sum_rows_f32(gs->data, p, rows, D, D);
    int st_ok = tg__accum_owned(n, n->in[2], gb); /* the shift's add runs first */
    return st_ok != TG_OK ? st_ok : tg__accum_owned(n, n->in[1], gs);
}

tg_tensor *tg_layer_norm(tg_tape *tp, tg_tensor *x, tg_tensor *scale, tg_tensor *shift, double eps)
{
    char sx[64], ss[64], sb[64];
    if (!x || !scale || !shift) return tg__error_null_input("layer_norm");
    if (!tg__check_float("layer_norm", x) || !tg__check_same_dtype("layer_norm", x, scale) ||
        !tg__check_same_dtype("layer_norm", x, shift))
        return NULL;
    int64_t D = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (D == 0 || scale->ndim != 1 || shift->ndim != 1 || scale->shape[0] != D || shift->shape[0] != D)
        return tg_error("layer_norm: input %s needs scale and shift of shape (%lld), got %s and %s",
                        tg_shape_str(x, sx, 64), (long long)D, tg_shape_str(scale, ss, 64), tg_shape_str(shift, sb, 64));
    if (!(eps >= 0)) return tg_error("layer_norm: eps must be >= 0, got %g", eps);
    int64_t rows = tg_numel(x) / D;
    const tg_tensor *xd = tg__dense(tp, x), *gd = tg__dense(tp, scale), *bd = tg__dense(tp, shift);
    if (x->dtype == TG_F32) return layer_norm_f32(tp, x, xd, gd, bd, eps, scale, shift);
    tg_tensor *out = tg__new_like(tp, x);
    tg_tensor *stats = tg_empty(tp, TG_F64, 1, (int64_t[]){2 * rows}); /* mean, rstd per row */
    if (!xd || !gd || !bd || !out || !stats) return NULL;
    double *st = stats->data;
#pragma omp parallel for if (rows * D > TG_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        double sum = 0, m2 = 0;
        for (int64_t k = 0; k < D; k++) sum += tg__get_dense(xd, r * D + k);
        double mean = sum / (double)D;
        for (int64_t k = 0; k < D; k++) {
            double dv = tg__get_dense(xd, r * D + k) - mean;
            m2 += dv * dv;
        }
        double rstd = 1.0 / sqrt(m2 / (double)D + eps);
        st[2 * r] = mean, st[2 * r + 1] = rstd;
        for (int64_t k = 0; k < D; k++) {
            double xh = (tg__get_dense(xd, r * D + k) - mean) * rstd;
            tg__set_dense(out, r * D + k, xh * tg__get_dense(gd, k) + tg__get_dense(bd, k));
        }
    }
    tg_tensor *in[3] = {x, scale, shift}, *saved[3] = {(tg_tensor *)xd, (tg_tensor *)gd, stats};
    return tg__record(tp, TG_OP_LAYER_NORM, out, 3, in, 3, saved, NULL);
}

/* forward: y = scale * xhat + shift, xhat = (x - mean) * rstd; so
 *   dshift = sum_rows dy, dscale = sum_rows dy * xhat,
 *   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * scale */
int tg__layer_norm_backward(tg_node *n)
{
    const tg_tensor *x = n->saved[0], *scale = n->saved[1];
    const double *st = n->saved[2]->data;
    int64_t D = x->shape[x->ndim - 1], rows = tg_numel(x) / D;
    tg_tape *bt = tg__btape(n);
    const tg_tensor *g = tg__dense(bt, n->grad);
    if (!g) return TG_ENOMEM;
    if (x->dtype == TG_F32) return layer_norm_backward_f32(n, g);
    int st_ok = TG_OK;
    if (tg__needs_grad(n->in[0])) {
        tg_tensor *gx = tg__new_like(bt, x);
        if (!gx) return TG_ENOMEM;
#pragma omp parallel for if (rows * D > TG_PAR_MIN) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            double mean = st[2 * r], rstd = st[2 * r + 1], a = 0, b = 0;
            for (int64_t k = 0; k < D; k++) {
                double dxh = tg__get_dense(g, r * D + k) * tg__get_dense(scale, k);
                double xh = (tg__get_dense(x, r * D + k) - mean) * rstd;
                a += dxh, b += dxh * xh;
            }
            a /= (double)D, b /= (double)D;
            for (int64_t k = 0; k < D; k++) {
                double dxh = tg__get_dense(g, r * D + k) * tg__get_dense(scale, k);
                double xh = (tg__get_dense(x, r * D + k) - mean) * rstd;
                tg__set_dense(gx, r * D + k, rstd * (dxh - a - xh * b));
            }
        }
        st_ok = tg__accum_owned(n, n->in[0], gx);
    }
    if (st_ok != TG_OK || (!tg__needs_grad(n->in[1]) && !tg__needs_grad(n->in[2]))) return st_ok;
    double *acc = tg_tape_alloc(bt, sizeof(double) * 2 * (size_t)D, true); /* dscale, dshift */
    tg_tensor *gs = tg__new_like(bt, scale), *gb = tg__new_like(bt, scale);
    if (!acc || !gs || !gb) return TG_ENOMEM;
    for (int64_t r = 0; r < rows; r++) {
        double mean = st[2 * r], rstd = st[2 * r + 1];
        for (int64_t k = 0; k < D; k++) {
            double gy = tg__get_dense(g, r * D + k);
            acc[k] += gy * (tg__get_dense(x, r * D + k) - mean) * rstd;
            acc[D + k] += gy;
        }
    }
    for (int64_t k = 0; k < D; k++) tg__set_dense(gs, k, acc[k]), tg__set_dense(gb, k, acc[D + k]);
    st_ok = tg__accum_owned(n, n->in[1], gs);
    return st_ok != TG_OK ? st_ok : tg__accum_owned(n, n->in[2], gb);
}

/* ---- the output head with the cross-entropy, in row chunks ------------------------------------- */

/* Rows per chunk: logits of about 16 MiB at a time, but at least 256 rows.
 * The chunk's products (its logits, x's gradient from them, W's gradient
 * when accumulated) run at a fraction of the machine's sgemm rate on fewer
 * rows: GPT-2's head (V = 50257, d = 768) at 64-74 rows ran at about half
 * of it, at 256 rows at 85-90% (docs/performance.md, "The step against
 * sgemm, and the output head's chunks"). */
static int64_t head_chunk_rows(int64_t V, size_t esize, int64_t N)
{
    int64_t r = (int64_t)((16u << 20) / ((size_t)V * esize));
    if (r < 256) r = 256;
    if (r >= N) return N;
    int64_t k = (N + r - 1) / r; /* k chunks of equal size: no short last one */
    return (N + k - 1) / k;
}

/* One chunk's rows of logits L (rows, V) dense, targets tv (-1: ignored):
 * elem[i] = -log_softmax(L_i)[t_i] (elem may be NULL), and with grad L_i becomes its gradient
 * (softmax(L_i) - onehot(t_i)) * scale (zero for an ignored row). */
static void head_rows(tg_tensor *L, const tg_tensor *stats, const int64_t *tv, void *elem, bool grad, double scale)
{
    int64_t R = L->shape[0], V = L->shape[1];
    bool f32 = L->dtype == TG_F32;
#pragma omp parallel for if (R * V > TG_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < R; i++) {
        if (f32) {
            float *x = (float *)L->data + L->offset + i * V, m = ((const float *)stats->data)[2 * i],
                  lse = ((const float *)stats->data)[2 * i + 1];
            if (elem) ((float *)elem)[i] = tv[i] < 0 ? 0.0f : -((x[tv[i]] - m) - lse);
            if (!grad) continue;
            if (tv[i] < 0) {
                memset(x, 0, sizeof(float) * (size_t)V);
                continue;
            }
            tg__vsub2f(x, x, m, lse, V);
            tg__vexpf(x, x, V);
            x[tv[i]] -= 1.0f;
            tg__vscalef(x, (float)scale, V);
        } else {
            double *x = (double *)L->data + L->offset + i * V, m = ((const double *)stats->data)[2 * i],
                   lse = ((const double *)stats->data)[2 * i + 1];
            if (elem) ((double *)elem)[i] = tv[i] < 0 ? 0.0 : -((x[tv[i]] - m) - lse);
            if (!grad) continue;
            if (tv[i] < 0) {
                memset(x, 0, sizeof(double) * (size_t)V);
                continue;
            }
            for (int64_t j = 0; j < V; j++) x[j] = exp((x[j] - m) - lse) * scale;
            x[tv[i]] -= scale;
        }
    }
}

/* rows [r0, r0 + n) of a dense 2-D tensor, as a view header */
static tg_tensor rows_of(const tg_tensor *t, int64_t r0, int64_t n)
{
    tg_tensor v = *t;
    v.shape[0] = n;
    v.offset = t->offset + r0 * t->stride[0];
    v.grad = NULL, v.grad_fn = NULL, v.requires_grad = false;
    return v;
}

/* What the fused head computes, chunk by chunk (head_pass). */
typedef struct {
    tg_numerics nm;
    const tg_tensor *x, *w, *b; /* x (N, d) and w (V, d) dense */
    const int64_t *tv;          /* targets, -1 ignored */
    int64_t chunk;
    double scale;               /* 1 / counted for the mean, else 1 */
    tg_tensor *L;               /* logits: chunk rows, or (N, V) when kept */
    bool keep;                  /* L holds every row (the logits' gradient kept for W's) */
    tg_tensor *lchunk;          /* with a bf16 L: a chunk's float32 logits (rounded into L once made), else NULL */
    tg_tensor *stats;           /* (chunk, 2), or (N, 2) kept for a replay */
    void *elem;                 /* per-row losses (N), or NULL */
    bool grad;                  /* make the gradients (for an incoming 1) */
    const tg_tensor *u, *bm;    /* a low-rank term u (N, r) @ bm (r, V) added to the logits, or NULL */
    tg_tensor *dh, *dw, *db;    /* x's (N, d), W's (V, d) when accumulated per chunk, b's (V); or NULL */
    tg_tensor *du, *dbm;        /* u's (N, r), bm's (r, V); or NULL */
    tg_tensor *wgrad;           /* W's gradient buffer, accumulated per chunk with alpha wscale, or NULL */
    double wscale;
    bool wfresh;                /* wgrad holds garbage until the first chunk */
} head_pass;

/* One pass over the rows: logits = x W^T (+ b) a chunk at a time, the rows'
 * losses (with stats kept whole, or from them when replaying), and with
 * grad the chunk's logits' gradient in their place, then dh's rows and the
 * chunk's share of W's and b's gradients. */
static bool head_run_pass(tg_tape *tp, head_pass *h)
{
    int64_t N = h->x->shape[0], V = h->w->shape[0];
    size_t es = tg_dtype_size(h->x->dtype);
    for (int64_t r0 = 0; r0 < N; r0 += h->chunk) {
        int64_t n = N - r0 < h->chunk ? N - r0 : h->chunk;
        tg_tensor xc = rows_of(h->x, r0, n), lc = rows_of(h->lchunk ? h->lchunk : h->L, h->keep && !h->lchunk ? r0 : 0, n);
        tg_tensor sc = rows_of(h->stats, h->stats->shape[0] == N ? r0 : 0, n);
        tg_tensor uc = h->u ? rows_of(h->u, r0, n) : lc;
        if (h->b) tg_k_copy(&lc, h->b);
        tg_k_gemm(h->nm, &lc, &xc, false, h->w, true, 1.0, h->b ? 1.0 : 0.0);
        if (h->u) tg_k_gemm(h->nm, &lc, &uc, false, h->bm, false, 1.0, 1.0);
        if (h->elem) tg_k_log_softmax_stats(&sc, &lc);
        head_rows(&lc, &sc, h->tv + r0, h->elem ? (char *)h->elem + (size_t)r0 * es : NULL, h->grad, h->scale);
        if (!h->grad) continue;
        if (h->dh) {
            tg_tensor hc = rows_of(h->dh, r0, n);
            tg_k_gemm(h->nm, &hc, &lc, false, h->w, false, 1.0, 0.0);
        }
        if (h->dw) tg_k_gemm(h->nm, h->dw, &lc, true, &xc, false, 1.0, 1.0);
        if (h->du) {
            tg_tensor dc = rows_of(h->du, r0, n);
            tg_k_gemm(h->nm, &dc, &lc, false, h->bm, true, 1.0, 0.0);
        }
        if (h->dbm) tg_k_gemm(h->nm, h->dbm, &uc, true, &lc, false, 1.0, 1.0);
        if (h->lchunk) {
            tg_tensor kept = rows_of(h->L, r0, n);
            tg_k_copy(&kept, &lc);
        }
        if (h->wgrad) {
            tg_k_gemm(h->nm, h->wgrad, &lc, true, &xc, false, h->wscale, h->wfresh ? 0.0 : 1.0);
            h->wfresh = false;
        }
        if (h->db) {
            tg_tensor acc = *h->db; /* (1, V): the chunk's column sums added */
            acc.ndim = 2, acc.shape[0] = 1, acc.shape[1] = V, acc.stride[0] = V, acc.stride[1] = 1;
            tg_tensor *part = tg_empty(tp, h->db->dtype, 2, acc.shape);
            if (!part) return false;
            tg_k_sum_to(part, &lc);
            tg_k_axpy(&acc, part, 1.0);
        }
    }
    return true;
}

/* The node's inputs in order: x, W, then b, u and bm where given; their
 * positions in iarg[3] (b), iarg[4] (u), -1 when absent. */
static int head_inputs(tg_tensor *const *v, tg_tensor **ins, int64_t *pos_b, int64_t *pos_u)
{
    int n = 2;
    ins[0] = v[0], ins[1] = v[1];
    *pos_b = v[2] ? n : -1;
    if (v[2]) ins[n++] = v[2];
    *pos_u = v[3] ? n : -1;
    if (v[3]) ins[n++] = v[3], ins[n++] = v[4];
    return n;
}

/* The fused head: per chunk of rows, logits = x W^T (+ b) (+ u bm), the
 * rows' losses, and (with grad) the logits' gradient in their place, from
 * which x's (and u's) gradient is made at once (dh, du); W's gradient is
 * either accumulated chunk by chunk (dW, (V, d)) or, with fewer rows than
 * features, the logits' gradient is kept whole for backward (dl, (N, V)):
 * the smaller of the two; b's and bm's are accumulated per chunk.
 * Under BF16 the kept logits' gradient is held in bf16, each chunk made in
 * float32 scratch and rounded into it: W's gradient is a bf16 product, which
 * rounds that operand to the same values (the same bits, half the memory).
 * Everything is for an incoming gradient of 1; backward scales by it.
 * replay: nothing but each row's (max, lse) is kept, and backward computes
 * the logits again, chunk by chunk, with the same products in the same
 * order (the same bits as without replay). */
static tg_tensor *linear_cross_entropy_chunked(tg_tape *tp, tg_tensor *const *v, tg_tensor *t, int64_t counted,
                                               tg_reduction r, int64_t chunk, bool replay)
{
    tg_tensor *x = v[0], *w = v[1], *b = v[2], *u = v[3], *bm = v[4];
    int64_t N = x->shape[0], d = x->shape[1], V = w->shape[0], pos_b, pos_u;
    tg_tensor *ins[5];
    int nin = head_inputs(v, ins, &pos_b, &pos_u);
    bool grad = tg__will_record(nin, ins);
    bool gx = tg__needs_grad(x), gw = tg__needs_grad(w), gb = tg__needs_grad(b), gu = tg__needs_grad(u),
         gbm = tg__needs_grad(bm);
    tg_dtype dt = x->dtype;
    replay &= grad;
    head_pass h = {.nm = tg_tape_numerics(tp), .x = tg__dense(tp, x), .w = tg__dense(tp, w), .b = b, .tv = t->data,
                   .u = u ? tg__dense(tp, u) : NULL, .bm = bm ? tg__dense(tp, bm) : NULL,
                   .chunk = chunk > 0 ? (chunk < N ? chunk : N) : head_chunk_rows(V, tg_dtype_size(dt), N),
                   .keep = grad && !replay && gw && N <= d, .grad = grad && !replay};
    h.scale = r == TG_REDUCE_MEAN ? (dt == TG_F32 ? (double)(1.0f / (float)counted) : 1.0 / (double)counted) : 1.0;
    int64_t sh_l[2] = {h.keep ? N : h.chunk, V}, sh_dh[2] = {N, d}, sh_st[2] = {replay ? N : h.chunk, 2};
    bool keep16 = h.keep && h.nm == TG_NUMERICS_BF16 && dt == TG_F32;
    /* a chunk's logits in the tape's scratch (a replay in backward uses the
     * same memory), the logits' gradient kept whole in the tape */
    tg_tensor lchunk, lscratch;
    if (h.x && h.w && (!u || (h.u && h.bm))) {
        int64_t sh_c[2] = {h.chunk, V};
        void *buf = !h.keep || keep16 ? tg__tape_scratch(tp, tg_dtype_size(dt) * (size_t)(h.chunk * V)) : NULL;
        if (!h.keep || keep16) {
            if (!buf) return NULL;
            lchunk = tg__over(buf, h.x, 2, sh_c);
        }
        if (!h.keep) {
            lscratch = lchunk;
            h.L = &lscratch;
        } else {
            h.L = tg_empty(tp, keep16 ? TG_BF16 : dt, 2, sh_l);
            if (keep16) h.lchunk = &lchunk;
        }
    }
    h.stats = h.L ? tg_empty(tp, dt, 2, sh_st) : NULL;
    tg_tensor *elem = h.stats ? tg_empty(tp, dt, 1, &N) : NULL;
    if (!elem) return NULL;
    h.elem = elem->data;
    if (h.grad) {
        h.dh = gx ? tg_empty(tp, dt, 2, sh_dh) : NULL;
        h.dw = gw && !h.keep ? tg_zeros(tp, dt, 2, w->shape) : NULL;
        h.db = gb ? tg_zeros(tp, dt, 1, &V) : NULL;
        h.du = gu ? tg_empty(tp, dt, 2, u->shape) : NULL;
        h.dbm = gbm ? tg_zeros(tp, dt, 2, bm->shape) : NULL;
        if ((gx && !h.dh) || (gw && !h.keep && !h.dw) || (gb && !h.db) || (gu && !h.du) || (gbm && !h.dbm))
            return NULL;
    }
    if (!head_run_pass(tp, &h)) return NULL;
    /* a step's chunk of logits (tens of MiB) is not held through backward,
     * where the step's memory peaks: a replay makes it again */
    if (grad) tg__tape_scratch_trim(tp, (size_t)8 << 20);
    tg_tensor *out = nll_reduce(tp, elem, t->data, r, counted);
    /* saved: (dh, dW or dl, x when dl is kept, db, -, du, dbm), or for a
     * replay (x, W, b, the targets, the rows' stats, u, bm); none but x, W,
     * b, u and bm a tensor anyone else writes */
    tg_tensor *saved[7] = {h.dh, h.keep ? h.L : h.dw, h.keep ? (tg_tensor *)h.x : NULL, h.db, NULL, h.du, h.dbm};
    if (replay) {
        saved[0] = (tg_tensor *)h.x, saved[1] = (tg_tensor *)h.w, saved[2] = b, saved[3] = t, saved[4] = h.stats;
        saved[5] = (tg_tensor *)h.u, saved[6] = (tg_tensor *)h.bm;
    }
    tg_node *nd;
    out = tg__record(tp, TG_OP_LINEAR_CROSS_ENTROPY, out, nin, ins, 7, saved, &nd);
    if (nd) {
        nd->iarg[0] = h.keep, nd->iarg[1] = replay, nd->iarg[2] = h.chunk, nd->iarg[3] = pos_b, nd->iarg[4] = pos_u;
        nd->darg[0] = h.scale;
    }
    return out;
}

/* g * src into t's gradient buffer (written when fresh) */
static int add_scaled(tg_tensor *t, const tg_tensor *src, double g)
{
    bool fresh;
    tg_tensor *buf = tg__grad_buf(t, &fresh, false);
    if (!buf) return TG_ENOMEM;
    if (fresh) {
        tg_k_copy(buf, src);
        if (g != 1.0) tg_k_binary_scalar(buf, buf, g, TG_BIN_MUL, false);
    } else {
        tg_k_axpy(buf, src, g);
    }
    return TG_OK;
}

/* The gradients a replay or forward made, for an incoming 1 */
typedef struct {
    tg_tensor *dh, *dw, *db, *du, *dbm;
} head_grads;

/* The head's pass again in backward (a replay): the gradients for an
 * incoming 1 into fresh buffers of the node's tape, as forward would have
 * made them (W's per chunk when forward would have kept the logits'
 * gradient: then straight into W's gradient with alpha g). */
static int head_replay(tg_node *n, double g, head_grads *out, bool *w_done)
{
    tg_tape *tp = tg__btape(n);
    tg_tensor *x = n->saved[0], *w = n->saved[1], *b = n->saved[2], *t = n->saved[3], *stats = n->saved[4];
    tg_tensor *u = n->saved[5], *bm = n->saved[6];
    int64_t N = x->shape[0], d = x->shape[1], V = w->shape[0], sh_dh[2] = {N, d};
    int64_t pb = n->iarg[3], pu = n->iarg[4];
    bool gw = tg__needs_grad(n->in[1]);
    head_pass h = {.nm = n->numerics, .x = x, .w = w, .b = b, .u = u, .bm = bm, .tv = t->data, .chunk = n->iarg[2],
                   .scale = n->darg[0], .stats = stats, .grad = true};
    int64_t sh_l[2] = {h.chunk, V};
    void *buf = tg__tape_scratch(tp, tg_dtype_size(x->dtype) * (size_t)(h.chunk * V)); /* as forward's chunk */
    if (!buf) return TG_ENOMEM;
    tg_tensor lc = tg__over(buf, x, 2, sh_l);
    h.L = &lc;
    if (tg__needs_grad(n->in[0]) && !(h.dh = tg_empty(tp, x->dtype, 2, sh_dh))) return TG_ENOMEM;
    if (gw && N <= d) { /* forward would have kept dl: W's gradient per chunk, as backward does then */
        h.wgrad = tg__grad_buf(n->in[1], &h.wfresh, false);
        h.wscale = g;
        if (!h.wgrad) return TG_ENOMEM;
        *w_done = true;
    } else if (gw && !(h.dw = tg_zeros(tp, x->dtype, 2, w->shape))) {
        return TG_ENOMEM;
    }
    if (pb >= 0 && tg__needs_grad(n->in[pb]) && !(h.db = tg_zeros(tp, x->dtype, 1, &V))) return TG_ENOMEM;
    if (pu >= 0 && tg__needs_grad(n->in[pu]) && !(h.du = tg_empty(tp, x->dtype, 2, u->shape))) return TG_ENOMEM;
    if (pu >= 0 && tg__needs_grad(n->in[pu + 1]) && !(h.dbm = tg_zeros(tp, x->dtype, 2, bm->shape))) return TG_ENOMEM;
    if (!head_run_pass(tp, &h)) return TG_ENOMEM;
    *out = (head_grads){h.dh, h.dw, h.db, h.du, h.dbm};
    return TG_OK;
}

/* g * dv into t's gradient, dv owned (scaled in place) */
static int accum_scaled(tg_node *n, tg_tensor *t, tg_tensor *dv, double g)
{
    if (!dv || !tg__needs_grad(t)) return TG_OK;
    tg_tensor v = *dv;
    v.ndim = t->ndim;
    for (int k = 0; k < t->ndim; k++) v.shape[k] = t->shape[k];
    tg__contiguous_strides(v.ndim, v.shape, v.stride);
    if (g != 1.0) tg_k_binary_scalar(&v, &v, g, TG_BIN_MUL, false);
    return tg__accum_owned(n, t, &v);
}

/* forward (per chunk): l = reduce(cross_entropy(x W^T + b, t)); the
 * gradients for dl = 1 were made in forward (dh, dW or dl, db), or are made
 * now by a replay; so dx = g dh, dW += g dW (or g dl^T x, per chunk),
 * db += g db */
int tg__linear_cross_entropy_backward(tg_node *n)
{
    double g = tg_item(n->grad);
    tg_tensor *x = n->in[0], *w = n->in[1];
    tg_tensor *b = n->iarg[3] >= 0 ? n->in[n->iarg[3]] : NULL, *u = n->iarg[4] >= 0 ? n->in[n->iarg[4]] : NULL;
    tg_tensor *bm = u ? n->in[n->iarg[4] + 1] : NULL;
    head_grads hg = {n->saved[0], n->saved[1], n->saved[3], n->saved[5], n->saved[6]};
    bool w_done = false;
    if (n->iarg[1]) {
        int st = head_replay(n, g, &hg, &w_done);
        if (st) return st;
    }
    int st = accum_scaled(n, x, hg.dh, g);
    if (!st) st = accum_scaled(n, u, hg.du, g);
    if (st) return st;
    if (hg.dw && tg__needs_grad(w) && !w_done) {
        if (n->iarg[0]) { /* the logits' gradient kept: W's per chunk, as a replay makes it */
            const tg_tensor *dl = hg.dw, *xs = n->saved[2];
            int64_t chunk = n->iarg[2];
            bool fresh;
            tg_tensor *wg = tg__grad_buf(w, &fresh, false);
            if (!wg) return TG_ENOMEM;
            for (int64_t r0 = 0; r0 < dl->shape[0]; r0 += chunk) {
                int64_t m = dl->shape[0] - r0 < chunk ? dl->shape[0] - r0 : chunk;
                tg_tensor xc = rows_of(xs, r0, m), lc = rows_of(dl, r0, m);
                tg_k_gemm(n->numerics, wg, &lc, true, &xc, false, g, fresh ? 0.0 : 1.0);
                fresh = false;
            }
        } else if ((st = add_scaled(w, hg.dw, g)) != TG_OK) {
            return st;
        }
    }
    if (hg.db && b && tg__needs_grad(b) && (st = add_scaled(b, hg.db, g)) != TG_OK) return st;
    if (hg.dbm && bm && tg__needs_grad(bm)) return add_scaled(bm, hg.dbm, g);
    return TG_OK;
}

tg_tensor *tg__linear_cross_entropy(tg_tape *tp, tg_tensor *x, tg_tensor *w, tg_tensor *b, tg_tensor *u, tg_tensor *bm,
                                    const tg_tensor *target, tg_reduction r, int64_t ignore_index, int64_t chunk_rows,
                                    bool replay)
{
    char sx[64], sw[64];
    static const char op[] = "linear_cross_entropy";
    if (!tp) return tg_error("%s: NULL tape", op);
    if (!x || !w || !target || (!u) != (!bm)) return tg__error_null_input(op);
    /* a bf16 weight: a frozen one, read as the products read it */
    bool frozen_bf16 = tg__is_compact(w->dtype) && !tg__needs_grad(w) && x->dtype == TG_F32;
    if (!tg__check_float(op, x) || (!frozen_bf16 && !tg__check_same_dtype(op, x, w)) ||
        (b && !tg__check_same_dtype(op, x, b)) || (u && (!tg__check_same_dtype(op, x, u) || !tg__check_same_dtype(op, x, bm))))
        return NULL;
    if (x->ndim != 2 || w->ndim != 2 || x->shape[1] != w->shape[1])
        return tg_error("%s: input %s and weight %s must be (N, d) and (V, d)", op, tg_shape_str(x, sx, 64),
                        tg_shape_str(w, sw, 64));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return tg_error("%s: bias %s does not match %lld classes", op, tg_shape_str(b, sx, 64), (long long)w->shape[0]);
    if (u && (u->ndim != 2 || bm->ndim != 2 || u->shape[0] != x->shape[0] || bm->shape[0] != u->shape[1] ||
              bm->shape[1] != w->shape[0]))
        return tg_error("%s: low-rank term %s @ %s does not match %lld rows and %lld classes", op,
                        tg_shape_str(u, sx, 64), tg_shape_str(bm, sw, 64), (long long)x->shape[0],
                        (long long)w->shape[0]);
    if (tg_tape_numerics(tp) == TG_NUMERICS_EXACT || r == TG_REDUCE_NONE || x->shape[0] == 0) {
        tg_tensor *logits = tg_linear(tp, x, w, b);
        if (u) logits = tg_add(tp, logits, tg_matmul(tp, u, bm));
        return tg_cross_entropy_ignore(tp, logits, target, r, ignore_index);
    }
    /* the targets against the classes, as cross_entropy checks them */
    tg_tensor head = *x;
    head.shape[1] = w->shape[0];
    int64_t counted = 0;
    tg_tensor *t = class_targets(tp, op, &head, target, r, ignore_index, &counted);
    tg_tensor *v[5] = {x, w, b, u, bm};
    return t ? linear_cross_entropy_chunked(tp, v, t, counted, r, chunk_rows, replay) : NULL;
}

tg_tensor *tg_linear_cross_entropy(tg_tape *tp, tg_tensor *x, tg_tensor *w, tg_tensor *b, const tg_tensor *target,
                                   tg_reduction r, int64_t ignore_index)
{
    return tg__linear_cross_entropy(tp, x, w, b, NULL, NULL, target, r, ignore_index, 0, false);
}
