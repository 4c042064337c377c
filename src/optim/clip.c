/* torch.nn.utils.clip_grad_norm_ and the book's learning-rate schedule
 * (appendix D: linear warm-up, then cosine decay). */
#include "optim_internal.h"

#include <math.h>

/* |x|^q summed over a dense gradient (or the largest |x| when q is inf), in
 * double. */
static double grad_norm_part(const tg_tensor *g, double q)
{
    int64_t n = tg_numel(g);
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double a = fabs(g->dtype == TG_F32 ? (double)((const float *)g->data)[i] : ((const double *)g->data)[i]);
        if (isinf(q))
            acc = a > acc || isnan(a) ? a : acc;
        else if (q == 2)
            acc += a * a;
        else if (q == 1)
            acc += a;
        else
            acc += pow(a, q);
    }
    return acc;
}

int tg_clip_grad_norm_(int n, tg_tensor *const *params, double max_norm, double norm_type, double *total_norm)
{
    if (n < 0 || (n > 0 && !params)) return tg_error_status(TG_EINVAL, "clip_grad_norm_: bad parameter list");
    if (!(norm_type > 0)) return tg_error_status(TG_EINVAL, "clip_grad_norm_: norm_type must be > 0, got %g", norm_type);
    if (!(max_norm >= 0)) return tg_error_status(TG_EINVAL, "clip_grad_norm_: max_norm must be >= 0, got %g", max_norm);
    for (int i = 0; i < n; i++) {
        if (!params[i]) return tg_error_status(TG_EINVAL, "clip_grad_norm_: parameter %d is NULL", i);
        const tg_tensor *g = params[i]->grad;
        if (g && (!tg_is_contiguous(g) || !tg__is_float(g->dtype)))
            return tg_error_status(TG_EINVAL, "clip_grad_norm_: the gradient of parameter %d is not a dense float tensor", i);
    }
    /* total = (sum_p ||g_p||_q^q)^(1/q): the norm of the per-tensor norms */
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        const tg_tensor *g = params[i]->grad;
        if (!g) continue;
        /* a tensor listed twice (tied weights) counts once, as PyTorch's
         * parameters() lists it once */
        bool dup = false;
        for (int j = 0; j < i && !dup; j++) dup = params[j] == params[i];
        if (dup) continue;
        double part = grad_norm_part(g, norm_type);
        acc = isinf(norm_type) ? (part > acc || isnan(part) ? part : acc) : acc + part;
    }
    double total = isinf(norm_type) ? acc : norm_type == 2 ? sqrt(acc) : norm_type == 1 ? acc : pow(acc, 1.0 / norm_type);
    if (total_norm) *total_norm = total;
    double coef = max_norm / (total + 1e-6);
    if (coef >= 1.0) return TG_OK; /* PyTorch multiplies by the clamped 1.0: no change */
    for (int i = 0; i < n; i++) {
        tg_tensor *g = params[i]->grad;
        bool dup = false;
        for (int j = 0; j < i && !dup; j++) dup = params[j] == params[i];
        if (!g || dup) continue;
        tg_k_binary_scalar(g, g, g->dtype == TG_F32 ? (double)(float)coef : coef, TG_BIN_MUL, false);
    }
    return TG_OK;
}

int tg_module_clip_grad_norm_(tg_module *m, double max_norm, double norm_type, double *total_norm)
{
    if (!m) return tg_error_status(TG_EINVAL, "clip_grad_norm_: NULL module");
    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_error_status(TG_ENOMEM, "clip_grad_norm_: out of memory");
    tg_named_list l;
    int st = tg_module_named_parameters(tp, m, &l);
    if (st == TG_OK) st = tg_clip_grad_norm_(l.n, l.tensors, max_norm, norm_type, total_norm);
    tg_tape_free(tp);
    return st;
}

int tg_optimizer_clip_grad_norm_(tg_optimizer *o, double max_norm, double norm_type, double *total_norm)
{
    if (!o) return tg_error_status(TG_EINVAL, "clip_grad_norm_: NULL optimizer");
    return tg_clip_grad_norm_(o->n, o->params, max_norm, norm_type, total_norm);
}

/* ---- schedule ------------------------------------------------------------------------------ */

int tg_lr_schedule_check(const tg_lr_schedule *s)
{
    if (!s) return tg_error_status(TG_EINVAL, "lr schedule: NULL schedule");
    const double r[3] = {s->initial_lr, s->peak_lr, s->min_lr};
    const char *names[3] = {"initial_lr", "peak_lr", "min_lr"};
    for (int i = 0; i < 3; i++)
        if (!(r[i] >= 0) || isinf(r[i]))
            return tg_error_status(TG_EINVAL, "lr schedule: %s must be a finite rate >= 0, got %g", names[i], r[i]);
    if (s->warmup_steps < 0)
        return tg_error_status(TG_EINVAL, "lr schedule: warmup_steps must be >= 0, got %lld", (long long)s->warmup_steps);
    if (s->total_steps <= s->warmup_steps)
        return tg_error_status(TG_EINVAL, "lr schedule: total_steps (%lld) must be above warmup_steps (%lld)",
                               (long long)s->total_steps, (long long)s->warmup_steps);
    return TG_OK;
}

double tg_lr_schedule_at(const tg_lr_schedule *s, int64_t step)
{
    if (tg_lr_schedule_check(s) != TG_OK) return NAN;
    if (step < 0) return tg_error("lr schedule: negative step %lld", (long long)step), NAN;
    if (step < s->warmup_steps)
        return s->initial_lr + (double)step * ((s->peak_lr - s->initial_lr) / (double)s->warmup_steps);
    if (step >= s->total_steps) return s->min_lr;
    double progress = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    return s->min_lr + (s->peak_lr - s->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
}
