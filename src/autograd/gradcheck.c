/* Finite-difference gradient checking in float64.
 *
 * The output is projected on a fixed random weighting w: L = sum(out * w).
 * backward() gives dL/dx for every input element; central differences
 * (L(x + eps) - L(x - eps)) / (2 eps) give the numeric value of the same
 * derivative. A wrong backward formula changes dL/dx for almost every w, so
 * one projection catches it while costing two forward passes per element. */
#include "autograd_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static tg_tensor *projected(tg_tape *tp, tg_gradcheck_forward fn, void *ctx, int n, tg_tensor *const *inputs,
                            tg_tensor *w_src, tg_tensor **w_out)
{
    tg_tensor *out = fn(tp, ctx, n, inputs);
    if (!out) return NULL;
    if (out->dtype != TG_F64) return tg_error("gradcheck: function output must be float64, got %s", tg_dtype_name(out->dtype));
    tg_tensor *w = w_src;
    if (!w) {
        tg_generator *g = tg_generator_new(20240917);
        if (!g) return tg_error("gradcheck: out of memory");
        w = tg_empty(tp, TG_F64, out->ndim, out->shape);
        if (w) tg_uniform_(w, 0.5, 1.5, g);
        tg_generator_free(g);
        if (!w) return NULL;
        *w_out = w;
    }
    return tg_sum(tp, tg_mul(tp, out, w));
}

/* The flat row-major index j of x as a multi-index. */
static void unravel(const tg_tensor *x, int64_t j, int64_t *idx)
{
    for (int d = x->ndim - 1; d >= 0; d--) {
        idx[d] = j % x->shape[d];
        j /= x->shape[d];
    }
}

int tg_gradcheck_call(tg_gradcheck_forward fn, void *ctx, int n, tg_tensor *const *inputs,
                      const tg_gradcheck_options *opt, tg_gradcheck_result *res)
{
    if (!fn || !inputs || !res || n <= 0)
        return tg_error_status(TG_EINVAL, "gradcheck: NULL function, inputs or result, or no inputs (n = %d)", n);
    static const tg_gradcheck_options defaults;
    if (!opt) opt = &defaults;
    double eps = opt->eps > 0 ? opt->eps : 1e-6;
    double atol = opt->atol > 0 ? opt->atol : 1e-5;
    double rtol = opt->rtol > 0 ? opt->rtol : 1e-3;
    double *per_input = opt->max_err_per_input;
    memset(res, 0, sizeof *res);
    res->worst_input = -1;
    if (per_input)
        for (int i = 0; i < n; i++) per_input[i] = 0;
    for (int i = 0; i < n; i++) {
        if (!inputs[i]) return tg_error_status(TG_EINVAL, "gradcheck: input %d is NULL", i);
        if (inputs[i]->requires_grad && inputs[i]->dtype != TG_F64)
            return tg_error_status(TG_EINVAL, "gradcheck: input %d requires grad but is %s; use float64", i,
                                   tg_dtype_name(inputs[i]->dtype));
        if (inputs[i]->grad_fn) return tg_error_status(TG_EINVAL, "gradcheck: input %d is not a leaf", i);
    }
    bool any = false;
    for (int i = 0; i < n; i++) any = any || inputs[i]->requires_grad;
    if (!any) {
        snprintf(res->message, sizeof res->message, "gradcheck: no input requires grad");
        return tg_error_status(TG_EINVAL, "%s", res->message);
    }
    /* per input: its own .grad, kept aside, and the analytic gradient */
    tg_tensor **saved_grad = calloc((size_t)n * 2, sizeof *saved_grad);
    tg_tape *tp = tg_tape_new(), *wtp = tg_tape_new();
    if (!saved_grad || !tp || !wtp) {
        free(saved_grad);
        tg_tape_free(tp);
        tg_tape_free(wtp);
        return tg_error_status(TG_ENOMEM, "gradcheck: out of memory");
    }
    tg_tensor **analytic = saved_grad + n;
    int status = TG_OK;
    for (int i = 0; i < n; i++) {
        saved_grad[i] = inputs[i]->grad;
        inputs[i]->grad = NULL;
    }
    /* analytic: gradients land in a scratch .grad in the inputs' tapes */
    tg_tensor *w = NULL;
    bool prev = tg_set_grad_enabled(true);
    tg_tensor *loss = projected(tp, fn, ctx, n, inputs, NULL, &w);
    if (!loss) {
        status = TG_EINVAL;
        goto done;
    }
    status = tg_backward(loss, NULL, false);
    if (status != TG_OK) goto done;
    /* w must survive tape resets during the numeric pass: copy it out */
    tg_tensor *wk = tg_empty(wtp, TG_F64, w->ndim, w->shape);
    if (!wk) {
        status = TG_ENOMEM;
        goto done;
    }
    tg_k_copy(wk, w);
    for (int i = 0; i < n; i++) analytic[i] = inputs[i]->grad;

    tg_set_grad_enabled(false);
    /* The element reported: on a pass the largest |analytic - numeric|, on a
     * failure the one furthest past atol + rtol |numeric| (first on ties). */
    struct worst {
        int input;
        int64_t index;
        double analytic, numeric, err, key;
    } by_err = {-1, 0, 0, 0, 0, -INFINITY}, by_excess = by_err;
    for (int i = 0; i < n && status == TG_OK; i++) {
        tg_tensor *x = inputs[i];
        if (!x->requires_grad) continue;
        int64_t cnt = tg_numel(x);
        double worst_i = 0;
        for (int64_t j = 0; j < cnt; j++) {
            int64_t idx[TG_MAX_DIMS];
            unravel(x, j, idx);
            double orig = tg_get(x, idx);
            tg_set(x, idx, orig + eps);
            tg_tape_reset(tp);
            tg_tensor *lp = projected(tp, fn, ctx, n, inputs, wk, NULL);
            double fp = lp ? tg_item(lp) : NAN;
            tg_set(x, idx, orig - eps);
            tg_tape_reset(tp);
            tg_tensor *lm = projected(tp, fn, ctx, n, inputs, wk, NULL);
            double fm = lm ? tg_item(lm) : NAN;
            tg_set(x, idx, orig);
            if (!lp || !lm) {
                status = TG_EINVAL;
                break;
            }
            double num = (fp - fm) / (2 * eps);
            double ana = analytic[i] ? tg_item_at(analytic[i], j) : 0.0;
            double err = fabs(ana - num), excess;
            if (isnan(ana) && isnan(num))
                err = 0, excess = -atol; /* they agree */
            else if (!isfinite(err))
                err = excess = INFINITY; /* one is NaN or infinite and the other not the same */
            else
                excess = err - (atol + rtol * fabs(num));
            if (err > worst_i) worst_i = err;
            struct worst here = {i, j, ana, num, err, err};
            if (by_err.input < 0 || err > by_err.key) by_err = here;
            here.key = excess;
            if (by_excess.input < 0 || excess > by_excess.key) by_excess = here;
        }
        if (per_input) per_input[i] = worst_i;
    }
    res->passed = status == TG_OK && !(by_excess.key > 0);
    const struct worst *rep = res->passed ? &by_err : &by_excess;
    res->worst_input = rep->input;
    res->worst_index = rep->index;
    res->analytic = rep->analytic;
    res->numeric = rep->numeric;
    res->max_abs_err = rep->err;
    if (status == TG_OK)
        snprintf(res->message, sizeof res->message,
                 "gradcheck %s: worst element input %d index %lld: analytic %.10g numeric %.10g (|diff| %.3g)",
                 res->passed ? "passed" : "failed", res->worst_input, (long long)res->worst_index, res->analytic,
                 res->numeric, res->max_abs_err);
done:
    tg_set_grad_enabled(prev);
    for (int i = 0; i < n; i++) inputs[i]->grad = saved_grad[i];
    free(saved_grad);
    tg_tape_free(wtp);
    tg_tape_free(tp);
    return status;
}

/* ---- the first forms (deprecated) ------------------------------------------------------------- */

/* A tg_gradcheck_fn, whose arguments come in the order (inputs, n, ctx), called
 * as a tg_gradcheck_forward. */
typedef struct {
    tg_gradcheck_fn fn;
    void *ctx;
} first_form;

static tg_tensor *call_first_form(tg_tape *tp, void *ctx, int n, tg_tensor *const *inputs)
{
    const first_form *f = ctx;
    return f->fn(tp, inputs, n, f->ctx);
}

int tg_gradcheck(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n, void *ctx, double eps, double atol,
                 double rtol, tg_gradcheck_result *res)
{
    return tg_gradcheck_ex(fn, inputs, n, ctx, &(tg_gradcheck_options){eps, atol, rtol, NULL}, res);
}

int tg_gradcheck_ex(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n, void *ctx, const tg_gradcheck_options *opt,
                    tg_gradcheck_result *res)
{
    if (!opt) return tg_error_status(TG_EINVAL, "gradcheck: NULL function, inputs, options or result");
    return tg_gradcheck_call(fn ? call_first_form : NULL, &(first_form){fn, ctx}, n, inputs, opt, res);
}
