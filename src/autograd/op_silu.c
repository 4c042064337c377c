/* SiLU (torch.nn.functional.silu): y = x * sigmoid(x), one node
 * (SiluBackward0), with PyTorch's formulas:
 *   forward  y = x / (1 + exp(-x))
 *   backward dx = dy * s * (1 + x * (1 - s)),  s = 1 / (1 + exp(-x))
 * Its entry in the layer table (src/autograd/layers.c) composes
 * x * sigmoid(x) from recorded ops as the oracle. float32 as PyTorch's
 * binary-kernel loop computes it: exp through SLEEF for the pairs of 8-lane
 * vectors, the C library's for the tail (n mod 16; vmath.c), and backward's
 * 1 + x (1 - s) one fused multiply-add, as PyTorch's build contracts it. */
#include "autograd_internal.h"

#include <math.h>

#define OP "silu"

/* exp of element i of n as PyTorch's vectorised loop takes it */
static inline float exp_at(int64_t i, int64_t n, float x) { return i < n - n % 16 ? tg__expf(x) : expf(x); }

tg_tensor *tg_silu(tg_tape *tp, tg_tensor *x)
{
    if (!x) return tg__error_null_input(OP);
    if (!tg__check_float(OP, x)) return NULL;
    const tg_tensor *xd = tg__dense(tp, x);
    tg_tensor *out = xd ? tg__new_like(tp, x) : NULL;
    if (!out) return NULL;
    int64_t n = tg_numel(x);
    if (x->dtype == TG_F32) {
        const float *a = tg__ptr(xd, xd->offset);
        float *y = tg__ptr(out, out->offset);
#pragma omp parallel for if (n > TG_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = a[i] / (1.0f + exp_at(i, n, -a[i]));
    } else {
        const double *a = tg__ptr(xd, xd->offset);
        double *y = tg__ptr(out, out->offset);
#pragma omp parallel for if (n > TG_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] = a[i] / (1.0 + exp(-a[i]));
    }
    tg_tensor *saved = (tg_tensor *)xd;
    return tg__record(tp, TG_OP_SILU, out, 1, &x, 1, &saved, NULL);
}

int tg__silu_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    if (!tg__needs_grad(x)) return TG_OK;
    tg_tape *bt = tg__btape(n);
    const tg_tensor *xd = n->saved[0], *g = tg__dense(bt, n->grad);
    tg_tensor *dx = g ? tg__new_like(bt, x) : NULL;
    if (!dx) return TG_ENOMEM;
    int64_t cnt = tg_numel(x);
    if (x->dtype == TG_F32) {
        const float *a = tg__ptr(xd, xd->offset), *dy = tg__ptr(g, g->offset);
        float *o = tg__ptr(dx, dx->offset);
#pragma omp parallel for if (cnt > TG_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < cnt; i++) {
            float s = 1.0f / (1.0f + exp_at(i, cnt, -a[i]));
            o[i] = dy[i] * s * fmaf(a[i], 1.0f - s, 1.0f);
        }
    } else {
        const double *a = tg__ptr(xd, xd->offset), *dy = tg__ptr(g, g->offset);
        double *o = tg__ptr(dx, dx->offset);
#pragma omp parallel for if (cnt > TG_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < cnt; i++) {
            double s = 1.0 / (1.0 + exp(-a[i]));
            o[i] = dy[i] * s * (1.0 + a[i] * (1.0 - s));
        }
    }
    return tg__accum_owned(n, x, dx);
}
