/* RMSNorm as one node (RmsNormBackward0): y = x / sqrt(mean(x^2) + eps) * w
 * over the last dim (the Llama models' RMSNorm; its entry in the layer table,
 * src/autograd/layers.c, composes it from recorded ops as the oracle). Sums
 * run in double; the node keeps x, w and 1/rms per row.
 *   forward  r = 1 / sqrt(mean_k x^2 + eps),  n = x r,  y = n w
 *   backward dw = sum_rows dy n,  gn = dy w,  dx = r (gn - n mean_k(gn n)) */
#include "autograd_internal.h"

#include <math.h>

#define OP "rms_norm"

tg_tensor *tg_rms_norm(tg_tape *tp, tg_tensor *x, tg_tensor *weight, double eps)
{
    char sx[64], sw[64];
    if (!x || !weight) return tg__error_null_input(OP);
    if (!tg__check_float(OP, x) || !tg__check_same_dtype(OP, x, weight)) return NULL;
    int64_t D = x->ndim ? x->shape[x->ndim - 1] : 0;
    if (D == 0 || weight->ndim != 1 || weight->shape[0] != D)
        return tg_error(OP ": input %s needs a weight of shape (%lld), got %s", tg_shape_str(x, sx, 64),
                        (long long)D, tg_shape_str(weight, sw, 64));
    if (!(eps >= 0)) return tg_error(OP ": eps must be >= 0, got %g", eps);
    int64_t rows = tg_numel(x) / D;
    const tg_tensor *xd = tg__dense(tp, x), *wd = tg__dense(tp, weight);
    tg_tensor *out = tg__new_like(tp, x), *rstd = tg_empty(tp, TG_F64, 1, &rows);
    if (!xd || !wd || !out || !rstd) return NULL;
    double *rs = rstd->data;
#pragma omp parallel for if (rows * D > TG_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t k = 0; k < D; k++) {
            double v = tg__get_dense(xd, r * D + k);
            ss += v * v;
        }
        double rr = 1.0 / sqrt(ss / (double)D + eps);
        rs[r] = rr;
        for (int64_t k = 0; k < D; k++)
            tg__set_dense(out, r * D + k, tg__get_dense(xd, r * D + k) * rr * tg__get_dense(wd, k));
    }
    tg_tensor *in[2] = {x, weight}, *saved[3] = {(tg_tensor *)xd, (tg_tensor *)wd, rstd};
    return tg__record(tp, TG_OP_RMS_NORM, out, 2, in, 3, saved, NULL);
}

int tg__rms_norm_backward(tg_node *n)
{
    const tg_tensor *x = n->saved[0], *w = n->saved[1];
    const double *rs = n->saved[2]->data;
    int64_t D = x->shape[x->ndim - 1], rows = tg_numel(x) / D;
    tg_tape *bt = tg__btape(n);
    const tg_tensor *g = tg__dense(bt, n->grad);
    if (!g) return TG_ENOMEM;
    if (tg__needs_grad(n->in[0])) {
        tg_tensor *gx = tg__new_like(bt, x);
        if (!gx) return TG_ENOMEM;
#pragma omp parallel for if (rows * D > TG_PAR_MIN) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            double rr = rs[r], dot = 0;
            for (int64_t k = 0; k < D; k++)
                dot += tg__get_dense(g, r * D + k) * tg__get_dense(w, k) * tg__get_dense(x, r * D + k) * rr;
            dot /= (double)D;
            for (int64_t k = 0; k < D; k++) {
                double xn = tg__get_dense(x, r * D + k) * rr;
                tg__set_dense(gx, r * D + k, rr * (tg__get_dense(g, r * D + k) * tg__get_dense(w, k) - xn * dot));
            }
        }
        int st = tg__accum_owned(n, n->in[0], gx);
        if (st) return st;
    }
    if (!tg__needs_grad(n->in[1])) return TG_OK;
    double *acc = tg_tape_alloc(bt, sizeof(double) * (size_t)D, true);
    tg_tensor *gw = tg__new_like(bt, w);
    if (!acc || !gw) return TG_ENOMEM;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < D; k++) acc[k] += tg__get_dense(g, r * D + k) * tg__get_dense(x, r * D + k) * rs[r];
    for (int64_t k = 0; k < D; k++) tg__set_dense(gw, k, acc[k]);
    return tg__accum_owned(n, n->in[1], gw);
}
