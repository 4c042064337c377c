/* torch.optim.Adam and AdamW, as PyTorch 1.13's single-tensor path computes
 * them (torch/optim/adam.py, adamw.py), element by element in the
 * parameter's dtype with the Python scalars rounded to it:
 *
 *   AdamW: p = p * (1 - lr wd)            Adam: g = g + wd p   (wd != 0)
 *   m = m b1 + (1 - b1) g                 v = v b2 + (1 - b2) g g
 *   amsgrad: vmax = max(vmax, v), used as v below
 *   denom = sqrt(v) / sqrt(1 - b2^t) + eps
 *   p = p - lr / (1 - b1^t) * (m / denom)
 *
 * where t counts this parameter's steps. One fused pass per parameter reads
 * p, g and the moments once (threads over the elements of large tensors). */
#include "optim_internal.h"

#include <math.h>

tg_adam_options tg_adam_defaults(void) { return (tg_adam_options){1e-3, {0.9, 0.999}, 1e-8, 0.0, false}; }

tg_adam_options tg_adamw_defaults(void) { return (tg_adam_options){1e-3, {0.9, 0.999}, 1e-8, 1e-2, false}; }

static tg_optimizer *adam_new(tg_tape *tp, tg__opt_kind kind, int n, tg_tensor *const *params, tg_adam_options o)
{
    const char *who = kind == TG__OPT_ADAMW ? "AdamW" : "Adam";
    if (!(o.lr >= 0) || isinf(o.lr)) return tg_error("%s: invalid learning rate: %g", who, o.lr);
    if (!(o.eps >= 0) || isinf(o.eps)) return tg_error("%s: invalid epsilon value: %g", who, o.eps);
    if (!(o.betas[0] >= 0 && o.betas[0] < 1)) return tg_error("%s: invalid beta parameter at index 0: %g", who, o.betas[0]);
    if (!(o.betas[1] >= 0 && o.betas[1] < 1)) return tg_error("%s: invalid beta parameter at index 1: %g", who, o.betas[1]);
    if (!(o.weight_decay >= 0) || isinf(o.weight_decay))
        return tg_error("%s: invalid weight_decay value: %g", who, o.weight_decay);
    tg_optimizer *a = tg__optimizer_new(tp, kind, who, n, params);
    if (!a) return NULL;
    a->adam = o;
    a->lr = o.lr;
    return a;
}

tg_optimizer *tg_adam_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_adam_options o)
{
    return adam_new(tp, TG__OPT_ADAM, n, params, o);
}

tg_optimizer *tg_adamw_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_adam_options o)
{
    return adam_new(tp, TG__OPT_ADAMW, n, params, o);
}

static tg_optimizer *from_module(tg_tape *tp, tg__opt_kind kind, tg_module *m, tg_adam_options o)
{
    if (!m) return tg_error("%s: NULL module", kind == TG__OPT_ADAMW ? "AdamW" : "Adam");
    tg_named_list l;
    if (tg_module_named_parameters(tp, m, &l) != TG_OK) return NULL;
    return adam_new(tp, kind, l.n, l.tensors, o);
}

tg_optimizer *tg_adam_new(tg_tape *tp, tg_module *m, tg_adam_options o) { return from_module(tp, TG__OPT_ADAM, m, o); }

tg_optimizer *tg_adamw_new(tg_tape *tp, tg_module *m, tg_adam_options o) { return from_module(tp, TG__OPT_ADAMW, m, o); }

/* The scalars of one update, computed in double as Python computes them. */
typedef struct {
    double decay;     /* AdamW: 1 - lr wd */
    double wd;        /* Adam: wd */
    double b1, c1;    /* beta1, 1 - beta1 */
    double b2, c2;    /* beta2, 1 - beta2 */
    double bc2_sqrt;  /* sqrt(1 - beta2^t) */
    double eps;
    double neg_step;  /* -lr / (1 - beta1^t) */
    bool adamw, ams;
} coef_t;

/* PyTorch's vectorised add_(g, alpha) and addcmul_ are fused multiply-adds
 * in its AVX2 build (fma/fmaf reproduce them); addcdiv_ is
 * p + (value * m) / denom, the division last, so nothing fuses. */
#define ADAM_KERNEL(T, SUF, SQRT, FMA)                                                                      \
    static inline void elem_##SUF(T *restrict p, const T *restrict g, T *restrict m, T *restrict v,         \
                                  T *restrict vmax, int64_t i, const coef_t *c, bool adamw, bool l2, bool ams) \
    {                                                                                                       \
        const T decay = (T)c->decay, wd = (T)c->wd, b1 = (T)c->b1, c1 = (T)c->c1, b2 = (T)c->b2;           \
        const T c2 = (T)c->c2, bc2 = (T)c->bc2_sqrt, eps = (T)c->eps, ns = (T)c->neg_step;                 \
        T pi = p[i], gi = g[i];                                                                             \
        if (adamw) pi = pi * decay;                                                                         \
        if (l2) gi = FMA(pi, wd, gi);                                                                       \
        T mi = FMA(gi, c1, m[i] * b1);                                                                      \
        T vi = FMA(c2 * gi, gi, v[i] * b2);                                                                 \
        m[i] = mi;                                                                                          \
        v[i] = vi;                                                                                          \
        if (ams) {                                                                                          \
            T w = vmax[i];                                                                                  \
            w = vi > w || vi != vi ? vi : w;                                                                \
            vmax[i] = w;                                                                                    \
            vi = w;                                                                                         \
        }                                                                                                   \
        T denom = SQRT(vi) / bc2 + eps;                                                                     \
        p[i] = pi + (ns * mi) / denom;                                                                      \
    }                                                                                                       \
    /* one loop per common case, so that each vectorises */                                                \
    static void update_##SUF(T *restrict p, const T *restrict g, T *restrict m, T *restrict v,               \
                             T *restrict vmax, int64_t n, const coef_t *c)                                  \
    {                                                                                                       \
        const bool adamw = c->adamw, ams = c->ams, l2 = !c->adamw && c->wd != 0;                            \
        if (adamw && !ams) {                                                                                \
            _Pragma("omp parallel for simd if (n > 65536)") for (int64_t i = 0; i < n; i++)                 \
                elem_##SUF(p, g, m, v, vmax, i, c, true, false, false);                                     \
        } else if (!adamw && !ams) {                                                                        \
            _Pragma("omp parallel for simd if (n > 65536)") for (int64_t i = 0; i < n; i++)                 \
                elem_##SUF(p, g, m, v, vmax, i, c, false, l2, false);                                       \
        } else {                                                                                            \
            _Pragma("omp parallel for if (n > 65536)") for (int64_t i = 0; i < n; i++)                      \
                elem_##SUF(p, g, m, v, vmax, i, c, adamw, l2, true);                                        \
        }                                                                                                   \
    }

ADAM_KERNEL(float, f32, sqrtf, fmaf)
ADAM_KERNEL(double, f64, sqrt, fma)

int tg__adam_step(tg_optimizer *a)
{
    const tg_adam_options *o = &a->adam;
    for (int i = 0; i < a->n; i++) {
        tg_tensor *p = a->params[i], *g = p->grad;
        if (!g) continue;
        if (!tg_is_contiguous(g) || g->dtype != p->dtype)
            return tg_error_status(TG_EINVAL, "%s step: the gradient of parameter %d is not a contiguous %s tensor",
                                   tg_optimizer_name(a), i, tg_dtype_name(p->dtype));
        tg_tensor *m = tg__optimizer_slot(a, TG__EXP_AVG, i), *v = tg__optimizer_slot(a, TG__EXP_AVG_SQ, i);
        tg_tensor *vm = o->amsgrad ? tg__optimizer_slot(a, TG__MAX_EXP_AVG_SQ, i) : NULL;
        if (!m || !v || (o->amsgrad && !vm)) return TG_ENOMEM;
        double t = (double)++a->steps[i];
        coef_t c = {
            .decay = 1.0 - o->lr * o->weight_decay,
            .wd = o->weight_decay,
            .b1 = o->betas[0],
            .c1 = 1.0 - o->betas[0],
            .b2 = o->betas[1],
            .c2 = 1.0 - o->betas[1],
            .bc2_sqrt = sqrt(1.0 - pow(o->betas[1], t)),
            .eps = o->eps,
            .neg_step = -(o->lr / (1.0 - pow(o->betas[0], t))),
            .adamw = a->kind == TG__OPT_ADAMW,
            .ams = o->amsgrad,
        };
        int64_t n = tg_numel(p);
        if (p->dtype == TG_F32)
            update_f32(tg_data_ptr(p), tg_data_ptr(g), m->data, v->data, vm ? vm->data : NULL, n, &c);
        else
            update_f64(tg_data_ptr(p), tg_data_ptr(g), m->data, v->data, vm ? vm->data : NULL, n, &c);
    }
    return TG_OK;
}
