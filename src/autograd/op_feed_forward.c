/* The book's FeedForward as one node, with PyTorch's bits:
 *
 *   h = x @ W1^T + b1;  a = gelu(h);  y = a @ W2^T + b2
 *
 * (GELU the tanh form of the book's class.) Each product is the call the
 * Linear layers make (src/autograd/op_matmul.c) and GELU rounds as the fused
 * GELU op, so the output and every gradient equal the three modules' bit for
 * bit. What differs is memory: the node keeps x and h; a, the size of h,
 * lives in the tape's scratch buffer during the forward and is computed
 * again there in backward, where the composed graph keeps it for the second
 * layer's weight gradient; a's gradient becomes h's in place. */
#include "autograd_internal.h"

#include <string.h>

#define OP "feed_forward"

/* x's (R, cols) rows; x contiguous */
static tg_tensor rows_of(const tg_tensor *x)
{
    int64_t cols = x->shape[x->ndim - 1], shape[2] = {cols ? tg_numel(x) / cols : 0, cols};
    tg_tensor r = *x;
    r.ndim = 2, r.shape[0] = shape[0], r.shape[1] = shape[1];
    tg__contiguous_strides(2, r.shape, r.stride);
    return r;
}

static bool is_vec(const tg_tensor *b, int64_t n) { return b->ndim == 1 && b->shape[0] == n; }

tg_tensor *tg__feed_forward(tg_tape *tp, tg_tensor *x, tg_tensor *w1, tg_tensor *b1, tg_tensor *w2, tg_tensor *b2)
{
    char sx[64], s1[64], s2[64];
    if (!x || !w1 || !b1 || !w2 || !b2) return tg__error_null_input(OP);
    if (!tg__check_float(OP, x) || !tg__check_same_dtype(OP, x, w1) || !tg__check_same_dtype(OP, x, b1) ||
        !tg__check_same_dtype(OP, x, w2) || !tg__check_same_dtype(OP, x, b2))
        return NULL;
    bool ok = x->ndim >= 1 && tg_is_contiguous(x) && w1->ndim == 2 && w2->ndim == 2;
    int64_t D = ok ? x->shape[x->ndim - 1] : 0, H = ok ? w1->shape[0] : 0, O = ok ? w2->shape[0] : 0;
    ok = ok && w1->shape[1] == D && w2->shape[1] == H && is_vec(b1, H) && is_vec(b2, O);
    if (!ok)
        return tg_error("%s: expects a contiguous x (..., d), W1 (h, d), b1 (h), W2 (o, h), b2 (o), got %s, %s and %s",
                        OP, tg_shape_str(x, sx, 64), tg_shape_str(w1, s1, 64), tg_shape_str(w2, s2, 64));
    int64_t shape[TG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = H;
    tg_tensor *h = tg_empty(tp, x->dtype, x->ndim, shape);
    shape[x->ndim - 1] = O;
    tg_tensor *out = h ? tg_empty(tp, x->dtype, x->ndim, shape) : NULL;
    if (!out) return NULL;
    tg_tensor x2 = rows_of(x), h2 = rows_of(h), o2 = rows_of(out);
    tg_numerics nm = tg_tape_numerics(tp);
    tg__linear_rows(nm, &h2, &x2, w1, b1);
    void *buf = tg__tape_scratch(tp, (size_t)tg_numel(h) * tg_dtype_size(h->dtype));
    if (!buf) return NULL;
    tg_tensor a = tg__over(buf, &h2, 2, h2.shape);
    tg_k_unary(nm, &a, &h2, TG_UN_GELU);
    tg__linear_rows(nm, &o2, &a, w2, b2);
    tg_tensor *in[5] = {x, w1, b1, w2, b2}, *saved[2] = {x, h};
    return tg__record(tp, TG_OP_FEED_FORWARD, out, 5, in, 2, saved, NULL);
}

/* The composed graph's backward, node by node: the second Linear (da = g W2,
 * dW2, db2), GeluBackward0, the first Linear (dx, dW1, db1). */
int tg__feed_forward_backward(tg_node *n)
{
    tg_tensor *x = n->in[0], *w1 = n->in[1], *b1 = n->in[2], *w2 = n->in[3], *b2 = n->in[4];
    tg_tape *bt = tg__btape(n);
    tg_tensor x2 = rows_of(n->saved[0]), h2 = rows_of(n->saved[1]), g2 = rows_of(n->grad);
    /* a in the tape's scratch, as in forward; da becomes dh in place */
    void *buf = tg__tape_scratch(bt, (size_t)tg_numel(&h2) * tg_dtype_size(h2.dtype));
    tg_tensor *da = buf ? tg__new_like(bt, &h2) : NULL;
    if (!da) return TG_ENOMEM;
    tg_tensor a = tg__over(buf, &h2, 2, h2.shape);
    tg_k_unary(n->numerics, &a, &h2, TG_UN_GELU);
    bool first = tg__needs_grad(x) || tg__needs_grad(w1) || tg__needs_grad(b1);
    int st = tg__linear_grads(n, NULL, &a, w2, b2, &g2, first ? da : NULL);
    if (st || !first) return st;
    tg_tensor *dh = tg__gelu_grad(bt, n->numerics, &h2, da, true);
    return dh ? tg__linear_grads(n, x, &x2, w1, b1, dh, NULL) : TG_ENOMEM;
}
