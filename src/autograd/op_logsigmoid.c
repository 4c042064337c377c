/* F.logsigmoid: y = log(1 / (1 + exp(-x))), one node (LogSigmoidBackward0),
 * with PyTorch 1.13's CPU kernels (log_sigmoid_forward, which also returns
 * the buffer the backward reads, and log_sigmoid_backward):
 *   forward  b = exp(-|x|),  y = min(x, 0) - log1p(b)
 *   backward dx = (m - s * (b / (1 + b))) * dy,  m = x < 0 ? 1 : 0, s = x < 0 ? 1 : -1
 * The forward's loop and its tail both run on Vectorized<T>, so on an AVX2
 * and FMA machine every element takes SLEEF's 1.0-ulp exp and log1p (the
 * one-lane functions of src/tensor/vmath.c: the same bits, checked on 8 million float32 and
 * float64 arguments against PyTorch's); elsewhere PyTorch maps the C
 * library's. The backward has no transcendental function: its vector and
 * scalar paths agree, and s * q is exact, so no contraction can change it. */
#include "autograd_internal.h"

#include <math.h>

#define OP "logsigmoid"

tg_tensor *tg_logsigmoid(tg_tape *tp, tg_tensor *x)
{
    if (!x) return tg__error_null_input(OP);
    if (!tg__check_float(OP, x)) return NULL;
    bool record = tg__will_record(1, &x);
    const tg_tensor *xd = tg__dense(tp, x);
    tg_tensor *out = xd ? tg__new_like(tp, x) : NULL;
    /* the buffer exp(-|x|), kept for backward as PyTorch keeps it */
    tg_tensor *buf = out && record ? tg__new_like(tp, x) : NULL;
    if (!out || (record && !buf)) return NULL;
    int64_t n = tg_numel(x);
    if (x->dtype == TG_F32) {
        const float *a = tg__ptr(xd, xd->offset);
        float *y = tg__ptr(out, out->offset), *b = buf ? tg__ptr(buf, buf->offset) : NULL;
#pragma omp parallel for if (n > TG_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float e = tg__expf(-fabsf(a[i]));
            y[i] = (a[i] < 0 ? a[i] : 0.0f) - tg__log1pf(e);
            if (b) b[i] = e;
        }
    } else {
        const double *a = tg__ptr(xd, xd->offset);
        double *y = tg__ptr(out, out->offset), *b = buf ? tg__ptr(buf, buf->offset) : NULL;
#pragma omp parallel for if (n > TG_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            double e = tg__exp(-fabs(a[i]));
            y[i] = (a[i] < 0 ? a[i] : 0.0) - tg__log1p(e);
            if (b) b[i] = e;
        }
    }
    tg_tensor *saved[2] = {(tg_tensor *)xd, buf};
    return tg__record(tp, TG_OP_LOG_SIGMOID, out, 1, &x, 2, saved, NULL);
}

/* forward: b = exp(-|x|), y = min(x, 0) - log1p(b);
 * so dx = dy * (x < 0 ? 1 - b / (1 + b) : b / (1 + b)), as PyTorch writes it */
int tg__logsigmoid_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    if (!tg__needs_grad(x)) return TG_OK;
    tg_tape *bt = tg__btape(n);
    const tg_tensor *xd = n->saved[0], *bd = n->saved[1], *g = tg__dense(bt, n->grad);
    tg_tensor *dx = g ? tg__new_like(bt, x) : NULL;
    if (!dx) return TG_ENOMEM;
    int64_t cnt = tg_numel(x);
    if (x->dtype == TG_F32) {
        const float *a = tg__ptr(xd, xd->offset), *b = tg__ptr(bd, bd->offset), *dy = tg__ptr(g, g->offset);
        float *o = tg__ptr(dx, dx->offset);
#pragma omp parallel for if (cnt > TG_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < cnt; i++) {
            bool neg = a[i] < 0;
            float m = neg ? 1.0f : 0.0f, s = neg ? 1.0f : -1.0f;
            o[i] = (m - s * (b[i] / (1.0f + b[i]))) * dy[i];
        }
    } else {
        const double *a = tg__ptr(xd, xd->offset), *b = tg__ptr(bd, bd->offset), *dy = tg__ptr(g, g->offset);
        double *o = tg__ptr(dx, dx->offset);
#pragma omp parallel for if (cnt > TG_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < cnt; i++) {
            bool neg = a[i] < 0;
            double m = neg ? 1.0 : 0.0, s = neg ? 1.0 : -1.0;
            o[i] = (m - s * (b[i] / (1.0 + b[i]))) * dy[i];
        }
    }
    return tg__accum_owned(n, x, dx);
}
