/* RoPE (the book's apply_rope) as one node, RopeBackward0, with the bits of
 * the composed ops (src/autograd/layers.c, rope_composed):
 *   forward  y = x * cos + rot(x) * sin,  rot(x) = cat(-x2, x1) over the
 *            halves of the last dim; x (..., T, hd), cos and sin (T, hd)
 *            broadcast over the leading dims; each product rounded, then
 *            their sum, as the composed ops round
 *   backward dx = g * cos + rot^T(g * sin) (rot^T(u) = cat(u2, -u1)), each
 *            element one product plus one other nonzero term, so the sum
 *            of the composed graph's three contributions rounds once here
 *            too; dcos = g * x and dsin = g * rot(x), reduced over the
 *            broadcast dims by the engine's accumulation.
 * The node keeps x (dense), cos and sin: no rotated copy, no products. */
#include "autograd_internal.h"

#define OP "apply_rope"

#define ROPE_ROWS(T, NAME)                                                                                      \
    static void NAME(T *y, const T *x, const T *c, const T *s, int64_t rows, int64_t T_, int64_t hd, bool back) \
    {                                                                                                           \
        int64_t h2 = hd / 2;                                                                                    \
        _Pragma("omp parallel for if (rows * hd > TG_PAR_MIN) schedule(static)")                               \
        for (int64_t r = 0; r < rows; r++) {                                                                    \
            const T *xr = x + r * hd, *cr = c + (r % T_) * hd, *sr = s + (r % T_) * hd;                         \
            T *yr = y + r * hd;                                                                                 \
            for (int64_t j = 0; j < h2; j++) {                                                                  \
                if (back) {                                                                                     \
                    T a = xr[j] * cr[j], b = xr[j + h2] * sr[j + h2];                                           \
                    T a2 = xr[j + h2] * cr[j + h2], b2 = -(xr[j] * sr[j]);                                      \
                    yr[j] = a + b, yr[j + h2] = a2 + b2;                                                        \
                } else {                                                                                        \
                    T a = xr[j] * cr[j], b = -xr[j + h2] * sr[j];                                               \
                    T a2 = xr[j + h2] * cr[j + h2], b2 = xr[j] * sr[j + h2];                                    \
                    yr[j] = a + b, yr[j + h2] = a2 + b2;                                                        \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }
ROPE_ROWS(float, rope_f32)
ROPE_ROWS(double, rope_f64)

/* y (dense, x's shape) from dense x, cos, sin; back: the gradient form */
static void rope_apply(tg_tensor *y, const tg_tensor *x, const tg_tensor *c, const tg_tensor *s, bool back)
{
    int64_t hd = x->shape[x->ndim - 1], T = x->shape[x->ndim - 2], rows = tg_numel(x) / hd;
    if (x->dtype == TG_F32)
        rope_f32(tg__ptr(y, y->offset), tg__ptr(x, x->offset), tg__ptr(c, c->offset), tg__ptr(s, s->offset), rows, T,
                 hd, back);
    else
        rope_f64(tg__ptr(y, y->offset), tg__ptr(x, x->offset), tg__ptr(c, c->offset), tg__ptr(s, s->offset), rows, T,
                 hd, back);
}

tg_tensor *tg__rope(tg_tape *tp, tg_tensor *x, tg_tensor *cos, tg_tensor *sin)
{
    char a[64], b[64];
    if (!x || !cos || !sin) return tg__error_null_input(OP);
    if (!tg__check_float(OP, x) || !tg__check_same_dtype(OP, x, cos) || !tg__check_same_dtype(OP, x, sin)) return NULL;
    int64_t hd = x->ndim >= 2 ? x->shape[x->ndim - 1] : 0, T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 0;
    if (hd == 0 || hd % 2 || cos->ndim != 2 || cos->shape[0] != T || cos->shape[1] != hd || !tg_same_shape(cos, sin))
        return tg_error(OP ": x %s needs cos and sin of shape (%lld, %lld), got %s", tg_shape_str(x, a, 64),
                        (long long)T, (long long)hd, tg_shape_str(cos, b, 64));
    const tg_tensor *xd = tg__dense(tp, x), *cd = tg__dense(tp, cos), *sd = tg__dense(tp, sin);
    tg_tensor *out = xd && cd && sd ? tg__new_like(tp, x) : NULL;
    if (!out) return NULL;
    rope_apply(out, xd, cd, sd, false);
    tg_tensor *in[3] = {x, cos, sin}, *saved[3] = {(tg_tensor *)xd, (tg_tensor *)cd, (tg_tensor *)sd};
    return tg__record(tp, TG_OP_ROPE, out, 3, in, 3, saved, NULL);
}

int tg__rope_backward(tg_node *n)
{
    tg_tape *bt = tg__btape(n);
    const tg_tensor *x = n->saved[0], *c = n->saved[1], *s = n->saved[2], *g = tg__dense(bt, n->grad);
    if (!g) return TG_ENOMEM;
    int st = TG_OK;
    if (tg__needs_grad(n->in[0])) {
        tg_tensor *dx = tg__new_like(bt, n->in[0]);
        if (!dx) return TG_ENOMEM;
        rope_apply(dx, g, c, s, true);
        st = tg__accum_owned(n, n->in[0], dx);
    }
    if (st == TG_OK && (tg__needs_grad(n->in[1]) || tg__needs_grad(n->in[2]))) {
        /* dcos = g * x, dsin = g * rot(x): rot(x) from the forward with cos 0, sin 1 */
        tg_tensor *t = tg__new_like(bt, x), *one = tg__new_like(bt, c), *zero = tg__new_like(bt, c);
        if (!t || !one || !zero) return TG_ENOMEM;
        tg_k_fill(one, 1.0), tg_k_fill(zero, 0.0);
        if (tg__needs_grad(n->in[1])) {
            tg_k_binary(t, g, x, TG_BIN_MUL);
            if ((st = tg__accum(n->in[1], t)) != TG_OK) return st;
        }
        if (tg__needs_grad(n->in[2])) {
            tg_tensor *rot = tg__new_like(bt, x);
            if (!rot) return TG_ENOMEM;
            rope_apply(rot, x, zero, one, false);
            tg_k_binary(t, g, rot, TG_BIN_MUL);
            st = tg__accum(n->in[2], t);
        }
    }
    return st;
}
