/* SiLU (torch.nn.functional.silu): y = x * sigmoid(x), one node
 * (SiluBackward0), with PyTorch's formulas:
 *   forward  y = x / (1 + exp(-x))
 *   backward dx = dy * s * (1 + x * (1 - s)),  s = 1 / (1 + exp(-x))
 * Its entry in the layer table (src/autograd/layers.c) composes
 * x * sigmoid(x) from recorded ops as the oracle. */
#include "autograd_internal.h"

#include <math.h>

#define OP "silu"

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
        for (int64_t i = 0; i < n; i++) y[i] = a[i] / (1.0f + expf(-a[i]));
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
            float s = 1.0f / (1.0f + expf(-a[i]));
            o[i] = dy[i] * s * (1.0f + a[i] * (1.0f - s));
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
