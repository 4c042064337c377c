/* tg_gradcheck_module_call: finite differences over a whole module, every
 * parameter and every float input, through the generic tg_gradcheck_call. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

typedef struct {
    tg_module *m;
    int n; /* the module's own inputs come first in the checked list */
} module_fn;

static tg_tensor *call_module(tg_tape *tp, void *ctx, int n, tg_tensor *const *inputs)
{
    (void)n;
    const module_fn *f = ctx;
    return tg_module_call(tp, f->m, f->n, inputs);
}

/* Two forwards on the same inputs give the same bits (no dropout drawing). */
static int check_deterministic(tg_module *m, int n, tg_tensor *const *inputs)
{
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *a = tg_module_call(tp, m, n, inputs);
    tg_tensor *b = a ? tg_module_call(tp, m, n, inputs) : NULL;
    tg_set_grad_enabled(prev);
    int st = TG_OK;
    if (!a || !b) {
        st = TG_EINVAL;
    } else if (a->dtype != TG_F64) {
        st = tg_error_status(TG_EINVAL, "gradcheck_module: %s's output is %s; convert the module with "
                             "tg_module_to_dtype(tp, m, TG_F64)", tg_module_type_name(m), tg_dtype_name(a->dtype));
    } else {
        bool same = tg_same_shape(a, b);
        for (int64_t i = 0; same && i < tg_numel(a); i++) {
            double x = tg_item_at(a, i), y = tg_item_at(b, i);
            same = x == y || (isnan(x) && isnan(y));
        }
        if (!same)
            st = tg_error_status(TG_EINVAL, "gradcheck_module: two forwards of %s on the same inputs differ: it "
                                 "draws random numbers (dropout in training mode?); call tg_module_train(m, false)",
                                 tg_module_type_name(m));
    }
    tg_tape_free(tp);
    return st;
}

int tg_gradcheck_module_call(tg_module *m, int n, tg_tensor *const *inputs, const tg_gradcheck_options *opt,
                             tg_gradcheck_result *res)
{
    if (!m || !res) return tg_error_status(TG_EINVAL, "gradcheck_module: NULL module or result");
    if (n < 0 || (n > 0 && !inputs)) return tg_error_status(TG_EINVAL, "gradcheck_module: bad input list");
    for (int i = 0; i < n; i++) {
        const tg_tensor *x = inputs[i];
        if (!x) return tg_error_status(TG_EINVAL, "gradcheck_module: input %d is NULL", i);
        if (tg__is_float(x->dtype) && (x->dtype != TG_F64 || x->grad_fn))
            return tg_error_status(TG_EINVAL, "gradcheck_module: input %d must be a float64 leaf, got %s%s", i,
                                   tg_dtype_name(x->dtype), x->grad_fn ? " with a grad_fn" : "");
    }
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    tg_named_list params;
    int st = tg_module_named_parameters(tp, m, &params);
    for (int i = 0; st == TG_OK && i < params.n; i++)
        if (params.tensors[i]->requires_grad && params.tensors[i]->dtype != TG_F64)
            st = tg_error_status(TG_EINVAL, "gradcheck_module: parameter '%s' is %s; convert the module with "
                                 "tg_module_to_dtype(tp, m, TG_F64)", params.names[i],
                                 tg_dtype_name(params.tensors[i]->dtype));
    int total = n + (st == TG_OK ? params.n : 0);
    tg_tensor **all = st == TG_OK ? tg_tape_alloc(tp, sizeof *all * (size_t)(total ? total : 1), false) : NULL;
    bool *was = all ? tg_tape_alloc(tp, sizeof *was * (size_t)(n ? n : 1), false) : NULL;
    if (st == TG_OK && !was) st = TG_ENOMEM;
    if (st == TG_OK) st = check_deterministic(m, n, inputs);
    if (st != TG_OK) {
        tg_tape_free(tp);
        return st;
    }
    for (int i = 0; i < n; i++) {
        all[i] = inputs[i];
        was[i] = inputs[i]->requires_grad;
        if (tg__is_float(inputs[i]->dtype)) inputs[i]->requires_grad = true;
    }
    for (int i = 0; i < params.n; i++) all[n + i] = params.tensors[i];
    module_fn f = {m, n};
    st = tg_gradcheck_call(call_module, &f, total, all, opt, res);
    for (int i = 0; i < n; i++) inputs[i]->requires_grad = was[i];
    if (st == TG_OK && res->worst_input >= 0) {
        char name[160];
        if (res->worst_input < n)
            snprintf(name, sizeof name, "input %d", res->worst_input);
        else
            snprintf(name, sizeof name, "%s", params.names[res->worst_input - n]);
        /* a long name may be cut: the message stays one line */
        int len = snprintf(res->message, sizeof res->message,
                 "gradcheck_module %s %s: worst element %s[%lld]: analytic %.10g numeric %.10g (|diff| %.3g)",
                 tg_module_type_name(m), res->passed ? "passed" : "failed", name, (long long)res->worst_index,
                 res->analytic, res->numeric, res->max_abs_err);
        if (len < 0) res->message[0] = '\0';
    }
    tg_tape_free(tp);
    return st;
}

/* The first form (deprecated). */
int tg_gradcheck_module(tg_module *m, int n, tg_tensor *const *inputs, double eps, double atol, double rtol,
                        tg_gradcheck_result *res)
{
    return tg_gradcheck_module_call(m, n, inputs, &(tg_gradcheck_options){eps, atol, rtol, NULL}, res);
}
