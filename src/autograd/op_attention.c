/* The book's attention weights and context as one node, with PyTorch's bits:
 *
 *   s = q @ kT;  s.masked_fill_(mask, -inf);  w = softmax(s / d, dim=-1)
 *   w = dropout(w);  ctx = w @ v
 *
 * (MultiHeadAttention.forward from the scores to the context; q, v
 * (..., T, hd), kT (..., hd, T), mask bool (T, T) broadcast, d = sqrt(hd).
 * With heads_inner the context's storage is (..., T, h, hd), so the heads'
 * merge that follows needs no copy; the products' bits do not depend on
 * where the rows are written.)
 * Every product is the GEMM call the composed ops make, and every
 * elementwise step rounds as theirs, so the output and the gradients equal
 * the composed graph's (and PyTorch's) bit for bit; the dropout mask is drawn
 * from the generator's stream (PyTorch's, or the counter stream) at the same
 * point and as tg_dropout draws it. What differs is memory: the node
 * keeps the softmax output (under the causal mask its lower triangle only)
 * and the mask as bits, where the composed graph
 * keeps the scores, the masked and scaled scores, the weights, the float
 * mask and the dropped weights (five (..., T, T) tensors). The dropped
 * weights are recomputed in a scratch buffer; backward's (..., T, T)
 * temporaries come from the tape's backward pool. */
#include "autograd_internal.h"

#include <math.h>
#include <string.h>

#define OP "attention"

/* x[..., i, j] = value where mask[i, j] (mask (T, T) bool, contiguous or not) */
static void fill_masked(tg_tensor *x, const tg_tensor *mask, double value)
{
    int64_t T = x->shape[x->ndim - 1], rows = x->shape[x->ndim - 2], nb = tg_numel(x) / (rows * T);
    const uint8_t *m = (const uint8_t *)mask->data + mask->offset;
    int64_t s0 = mask->stride[0], s1 = mask->stride[1];
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < T; j++)
                if (m[i * s0 + j * s1]) {
                    int64_t k = (b * rows + i) * T + j;
                    if (x->dtype == TG_F32)
                        ((float *)x->data)[k] = (float)value;
                    else
                        ((double *)x->data)[k] = value;
                }
}

/* q (..., T, hd) -> the weights' shape (..., T, T) */
static void weights_shape(const tg_tensor *q, int64_t *shape)
{
    int n = q->ndim;
    for (int i = 0; i < n - 1; i++) shape[i] = q->shape[i];
    shape[n - 1] = q->shape[n - 2];
}

/* mask[i, j] == (j > i || (window > 0 && i - j >= window)): the book's
 * causal mask, with Gemma 3's sliding window */
bool tg__mask_is_causal(const tg_tensor *mask, int64_t window)
{
    int64_t T = mask->shape[0], s0 = mask->stride[0], s1 = mask->stride[1];
    const uint8_t *m = (const uint8_t *)mask->data + mask->offset;
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++)
            if ((m[i * s0 + j * s1] != 0) != (j > i || (window > 0 && i - j >= window))) return false;
    return true;
}

/* (..., T, T) full <-> the rows' first i + 1 entries back to back in
 * packed (pack: full -> packed; else packed -> full, zeros above the
 * diagonal). Both contiguous. */
static void pack_lower(tg_tensor *packed, tg_tensor *full, int64_t T, bool pack)
{
    size_t es = tg_dtype_size(full->dtype);
    int64_t nb = tg_numel(full) / (T * T);
    char *pk = (char *)packed->data + (size_t)packed->offset * es, *fu = (char *)full->data + (size_t)full->offset * es;
#pragma omp parallel for if (nb * T * T > TG_PAR_MIN) schedule(static)
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = 0; i < T; i++) {
            char *row = fu + (size_t)((b * T + i) * T) * es, *pr = pk + (size_t)(b * (T * (T + 1) / 2) + i * (i + 1) / 2) * es;
            if (pack) {
                memcpy(pr, row, (size_t)(i + 1) * es);
            } else {
                memcpy(row, pr, (size_t)(i + 1) * es);
                memset(row + (size_t)(i + 1) * es, 0, (size_t)(T - i - 1) * es);
            }
        }
}

tg_tensor *tg__attention(tg_tape *tp, tg_tensor *q, tg_tensor *kT, tg_tensor *v, const tg_tensor *mask, double d,
                         double p, tg_generator *g, bool heads_inner)
{
    char s1[64], s2[64], s3[64];
    if (!q || !kT || !v || !mask) return tg__error_null_input(OP);
    if (!tg__check_float(OP, q) || !tg__check_same_dtype(OP, q, kT) || !tg__check_same_dtype(OP, q, v)) return NULL;
    int n = q->ndim;
    bool ok = n >= 3 && kT->ndim == n && v->ndim == n && mask->ndim == 2 && mask->dtype == TG_BOOL;
    int64_t T = ok ? q->shape[n - 2] : 0, hd = ok ? q->shape[n - 1] : 0;
    ok = ok && kT->shape[n - 2] == hd && kT->shape[n - 1] == T && v->shape[n - 2] == T && mask->shape[0] == T &&
         mask->shape[1] == T;
    for (int i = 0; ok && i < n - 2; i++) ok = kT->shape[i] == q->shape[i] && v->shape[i] == q->shape[i];
    if (!ok)
        return tg_error("%s: expects q (..., T, hd), kT (..., hd, T), v (..., T, hd) and a bool (T, T) mask, got %s, "
                        "%s and %s",
                        OP, tg_shape_str(q, s1, 64), tg_shape_str(kT, s2, 64), tg_shape_str(v, s3, 64));
    if (!(p >= 0 && p < 1)) return tg_error("%s: dropout probability %g is outside [0, 1)", OP, p);
    int64_t wshape[TG_MAX_DIMS];
    weights_shape(q, wshape);
    /* s = q @ kT, masked, / d, softmax: in place in w. Backward keeps w, or
     * under a causal mask only its lower triangle (the rest is 0); without
     * backward w is a scratch. */
    int64_t cnt = 1;
    for (int i = 0; i < n; i++) cnt *= wshape[i];
    int64_t nbytes = (cnt + 7) / 8;
    tg_tensor *in[3] = {q, kT, v};
    bool record = tg__will_record(3, in);
    bool packed = record && cnt > 0 && tg__mask_is_causal(mask, 0), wscratch = packed || !record;
    size_t wbytes = (size_t)cnt * tg_dtype_size(q->dtype), need = (wscratch ? wbytes : 0) + (p > 0 ? wbytes : 0);
    char *buf = need ? tg__tape_scratch(tp, need) : NULL;
    if (need && !buf) return NULL;
    tg_tensor wfull, scratch;
    tg_tensor *w = wscratch ? (wfull = tg__over(buf, q, n, wshape), &wfull) : tg_empty(tp, q->dtype, n, wshape);
    if (!w) return NULL;
    tg_k_gemm(tg_tape_numerics(tp), w, q, false, kT, false, 1.0, 0.0);
    fill_masked(w, mask, -INFINITY);
    tg_k_binary_scalar(w, w, d, TG_BIN_DIV, false);
    tg_k_softmax(w, w, n - 1, false);
    tg_tensor *keep = w;
    if (packed) {
        int64_t np = cnt / (T * T) * (T * (T + 1) / 2);
        if (!(keep = tg_empty(tp, q->dtype, 1, &np))) return NULL;
        pack_lower(keep, w, T, true);
    }
    tg_tensor *bits = NULL;
    const tg_tensor *wd = w;
    if (p > 0) {
        if (!(bits = tg_empty(tp, TG_U8, 1, &nbytes))) return NULL;
        tg__dropout_bits(g, p, bits->data, cnt);
        scratch = tg__over(buf + (wscratch ? wbytes : 0), q, n, wshape);
        tg__dropout_mask_mul(&scratch, w, bits->data, 1.0 - p);
        wd = &scratch;
    }
    int64_t oshape[TG_MAX_DIMS];
    memcpy(oshape, q->shape, sizeof(int64_t) * (size_t)n);
    oshape[n - 1] = v->shape[n - 1];
    bool swap = heads_inner && n >= 4;
    if (swap) oshape[n - 3] = q->shape[n - 2], oshape[n - 2] = q->shape[n - 3];
    tg_tensor *out = tg_empty(tp, q->dtype, n, oshape);
    if (!out) return NULL;
    if (swap) { /* the (..., T, h, hd) storage seen as (..., h, T, hd) */
        int64_t t = out->stride[n - 3];
        out->shape[n - 3] = q->shape[n - 3], out->shape[n - 2] = q->shape[n - 2];
        out->stride[n - 3] = out->stride[n - 2], out->stride[n - 2] = t;
    }
    tg_k_gemm(tg_tape_numerics(tp), out, wd, false, v, false, 1.0, 0.0);
    tg_tensor *saved[3] = {keep, (tg_tensor *)mask, bits};
    tg_node *node;
    out = tg__record(tp, TG_OP_ATTENTION, out, 3, in, bits ? 3 : 2, saved, &node);
    if (node) node->darg[0] = d, node->darg[1] = p, node->iarg[0] = packed;
    return out;
}

/* The composed graph's backward, node by node: BmmBackward0 (w @ v): dw =
 * dctx @ v^T, dv = w^T @ dctx; MulBackward0 (dropout): dw *= z;
 * SoftmaxBackward0; DivBackward0: / d; MaskedFillBackward0: 0 where masked;
 * BmmBackward0 (q @ kT): dq = ds @ kT^T, dkT = q^T @ ds. */
int tg__attention_backward(tg_node *nd)
{
    tg_tensor *q = nd->in[0], *kT = nd->in[1], *v = nd->in[2];
    const tg_tensor *w = nd->saved[0], *mask = nd->saved[1], *bits = nd->nsaved > 2 ? nd->saved[2] : NULL;
    double d = nd->darg[0], p = nd->darg[1];
    tg_tape *tp = tg__btape(nd);
    int n = q->ndim;
    if (nd->iarg[0]) { /* the weights again from their lower triangle */
        int64_t wshape[TG_MAX_DIMS];
        weights_shape(q, wshape);
        tg_tensor *full = tg_empty(tp, q->dtype, n, wshape);
        if (!full) return TG_ENOMEM;
        pack_lower((tg_tensor *)w, full, wshape[n - 1], false);
        w = full;
    }
    tg_tensor g = *nd->grad;
    tg__contiguous_strides(n, g.shape, g.stride);
    tg_tensor *dw = tg__new_like(tp, w);
    if (!dw) return TG_ENOMEM;
    tg_k_gemm(nd->numerics, dw, &g, false, v, true, 1.0, 0.0);
    if (tg__needs_grad(v)) {
        const tg_tensor *wd = w;
        tg_tensor *dropped = NULL;
        if (bits) {
            if (!(dropped = tg__new_like(tp, w))) return TG_ENOMEM;
            tg__dropout_mask_mul(dropped, w, bits->data, 1.0 - p);
            wd = dropped;
        }
        tg_tensor *dv = tg_empty(tp, v->dtype, n, v->shape);
        if (!dv) return TG_ENOMEM;
        tg_k_gemm(nd->numerics, dv, wd, true, &g, false, 1.0, 0.0);
        int st = tg__accum_owned(nd, v, dv);
        if (st) return st;
    }
    if (!tg__needs_grad(q) && !tg__needs_grad(kT)) return TG_OK;
    if (bits) tg__dropout_mask_mul(dw, dw, bits->data, 1.0 - p);
    tg_k_softmax_backward(dw, w, dw, n - 1, false);
    tg_k_binary_scalar(dw, dw, d, TG_BIN_DIV, false);
    fill_masked(dw, mask, 0.0);
    if (tg__needs_grad(q)) {
        tg_tensor *dq = tg_empty(tp, q->dtype, n, q->shape);
        if (!dq) return TG_ENOMEM;
        tg_k_gemm(nd->numerics, dq, dw, false, kT, true, 1.0, 0.0);
        int st = tg__accum_owned(nd, q, dq);
        if (st) return st;
    }
    if (tg__needs_grad(kT)) {
        tg_tensor *dk = tg_empty(tp, kT->dtype, n, kT->shape);
        if (!dk) return TG_ENOMEM;
        tg_k_gemm(nd->numerics, dk, q, true, dw, false, 1.0, 0.0);
        return tg__accum_owned(nd, kT, dk);
    }
    return TG_OK;
}
