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
 * p, g and the moments once (threads over the elements of large tensors).
 * Written through the public optimizer type (tapegrad/optim.h), as a
 * user's optimizer is. */
#include "tapegrad/optim.h"

#include "internal.h"
#include <math.h>
#include <omp.h>
#if defined(TG_AVX2_DISPATCH)
#include <immintrin.h>
#endif

tg_adam_options tg_adam_defaults(void) { return (tg_adam_options){1e-3, {0.9, 0.999}, 1e-8, 0.0, false}; }

tg_adam_options tg_adamw_defaults(void) { return (tg_adam_options){1e-3, {0.9, 0.999}, 1e-8, 1e-2, false}; }

static int adam_step(tg_optimizer *opt, tg_tensor *p, const tg_tensor *g, tg_tensor *const *state);
static int adamw_step(tg_optimizer *opt, tg_tensor *p, const tg_tensor *g, tg_tensor *const *state);

static const char *const adam_state[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
/* amsgrad keeps a third state: the type with two or three names */
static const tg_optimizer_type adam_type[2] = {{"Adam", 2, adam_state, adam_step}, {"Adam", 3, adam_state, adam_step}};
static const tg_optimizer_type adamw_type[2] = {{"AdamW", 2, adam_state, adamw_step},
                                                {"AdamW", 3, adam_state, adamw_step}};

static bool adam_options_ok(const char *who, const tg_adam_options *o)
{
    if (!(o->lr >= 0) || isinf(o->lr)) return tg_error("%s: invalid learning rate: %g", who, o->lr), false;
    if (!(o->eps >= 0) || isinf(o->eps)) return tg_error("%s: invalid epsilon value: %g", who, o->eps), false;
    for (int k = 0; k < 2; k++)
        if (!(o->betas[k] >= 0 && o->betas[k] < 1))
            return tg_error("%s: invalid beta parameter at index %d: %g", who, k, o->betas[k]), false;
    if (!(o->weight_decay >= 0) || isinf(o->weight_decay))
        return tg_error("%s: invalid weight_decay value: %g", who, o->weight_decay), false;
    return true;
}

static tg_optimizer *adam_new(tg_tape *tp, const tg_optimizer_type *types, tg_module *m, int n,
                              tg_tensor *const *params, tg_adam_options o)
{
    const tg_optimizer_type *t = &types[o.amsgrad];
    if (!adam_options_ok(t->name, &o)) return NULL;
    if (m) return tg_optimizer_new(tp, t, m, o.lr, &o, sizeof o);
    return tg_optimizer_new_params(tp, t, n, params, o.lr, &o, sizeof o);
}

tg_optimizer *tg_adam_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_adam_options o)
{
    return adam_new(tp, adam_type, NULL, n, params, o);
}

tg_optimizer *tg_adamw_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_adam_options o)
{
    return adam_new(tp, adamw_type, NULL, n, params, o);
}

tg_optimizer *tg_adam_new(tg_tape *tp, tg_module *m, tg_adam_options o)
{
    if (!m) return tg_error("Adam: NULL module");
    return adam_new(tp, adam_type, m, 0, NULL, o);
}

tg_optimizer *tg_adamw_new(tg_tape *tp, tg_module *m, tg_adam_options o)
{
    if (!m) return tg_error("AdamW: NULL module");
    return adam_new(tp, adamw_type, m, 0, NULL, o);
}

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
    __attribute__((always_inline)) static inline void elem_##SUF(T *restrict p, const T *restrict g,     \
        T *restrict m, T *restrict v, T *restrict vmax, int64_t i, const coef_t *c, bool adamw, bool l2, bool ams) \
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
    static void range_##SUF(T *restrict p, const T *restrict g, T *restrict m, T *restrict v,                \
                            T *restrict vmax, int64_t i0, int64_t i1, const coef_t *c)                     \
    {                                                                                                       \
        const bool adamw = c->adamw, ams = c->ams, l2 = !c->adamw && c->wd != 0;                            \
        if (adamw && !ams) {                                                                                \
            _Pragma("omp simd") for (int64_t i = i0; i < i1; i++)                                          \
                elem_##SUF(p, g, m, v, vmax, i, c, true, false, false);                                     \
        } else if (!adamw && !ams) {                                                                        \
            _Pragma("omp simd") for (int64_t i = i0; i < i1; i++)                                          \
                elem_##SUF(p, g, m, v, vmax, i, c, false, l2, false);                                       \
        } else {                                                                                            \
            for (int64_t i = i0; i < i1; i++) elem_##SUF(p, g, m, v, vmax, i, c, adamw, l2, true);          \
        }                                                                                                   \
    }                                                                                                       \
    UPDATE(T, SUF, range_##SUF)

/* threads over large tensors, each on its own range of elements */
#define UPDATE(T, SUF, RANGE)                                                                               \
    static void update_##SUF(T *restrict p, const T *restrict g, T *restrict m, T *restrict v,               \
                             T *restrict vmax, int64_t n, const coef_t *c)                                  \
    {                                                                                                       \
        _Pragma("omp parallel if (n > 65536)")                                                              \
        {                                                                                                   \
            int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();                                   \
            RANGE(p, g, m, v, vmax, n * t / nt, n * (t + 1) / nt, c);                                       \
        }                                                                                                   \
    }

ADAM_KERNEL(float, f32, sqrtf, fmaf)
ADAM_KERNEL(double, f64, sqrt, fma)

#if defined(TG_AVX2_DISPATCH)
/* A portable build's float loop on a CPU with AVX2 + FMA (internal.h): eight
 * elements at a time, each operation of elem_f32 in its order (the same
 * bits); amsgrad and the tail by range_f32. */
TG_AVX2_FN static void range_f32_avx2(float *restrict p, const float *restrict g, float *restrict m,
                                      float *restrict v, float *restrict vmax, int64_t i0, int64_t i1,
                                      const coef_t *c)
{
    int64_t i = i0;
    if (!c->ams) {
        const bool adamw = c->adamw, l2 = !c->adamw && c->wd != 0;
        const __m256 decay = _mm256_set1_ps((float)c->decay), wd = _mm256_set1_ps((float)c->wd);
        const __m256 b1 = _mm256_set1_ps((float)c->b1), c1 = _mm256_set1_ps((float)c->c1);
        const __m256 b2 = _mm256_set1_ps((float)c->b2), c2 = _mm256_set1_ps((float)c->c2);
        const __m256 bc2 = _mm256_set1_ps((float)c->bc2_sqrt), eps = _mm256_set1_ps((float)c->eps);
        const __m256 ns = _mm256_set1_ps((float)c->neg_step);
        for (; i + 8 <= i1; i += 8) {
            __m256 pi = _mm256_loadu_ps(p + i), gi = _mm256_loadu_ps(g + i);
            if (adamw) pi = _mm256_mul_ps(pi, decay);
            if (l2) gi = _mm256_fmadd_ps(pi, wd, gi);
            __m256 mi = _mm256_fmadd_ps(gi, c1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
            __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(c2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
            _mm256_storeu_ps(m + i, mi);
            _mm256_storeu_ps(v + i, vi);
            __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2), eps);
            _mm256_storeu_ps(p + i, _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(ns, mi), denom)));
        }
    }
    range_f32(p, g, m, v, vmax, i, i1, c);
}
UPDATE(float, f32_avx2, range_f32_avx2)
#endif

static int update(tg_optimizer *a, tg_tensor *p, const tg_tensor *g, tg_tensor *const *state, bool adamw)
{
    const tg_adam_options *o = tg_optimizer_options(a);
    const double lr = tg_optimizer_lr(a), t = (double)tg_optimizer_step_count(a);
    coef_t c = {
        .decay = 1.0 - lr * o->weight_decay,
        .wd = o->weight_decay,
        .b1 = o->betas[0],
        .c1 = 1.0 - o->betas[0],
        .b2 = o->betas[1],
        .c2 = 1.0 - o->betas[1],
        .bc2_sqrt = sqrt(1.0 - pow(o->betas[1], t)),
        .eps = o->eps,
        .neg_step = -(lr / (1.0 - pow(o->betas[0], t))),
        .adamw = adamw,
        .ams = o->amsgrad,
    };
    int64_t n = tg_numel(p);
    void *vm = o->amsgrad ? tg_data_ptr(state[2]) : NULL;
#if defined(TG_AVX2_DISPATCH)
    if (p->dtype == TG_F32 && tg__vec_math()) {
        update_f32_avx2(tg_data_ptr(p), tg_data_ptr(g), tg_data_ptr(state[0]), tg_data_ptr(state[1]), vm, n, &c);
        return TG_OK;
    }
#endif
    if (p->dtype == TG_F32)
        update_f32(tg_data_ptr(p), tg_data_ptr(g), tg_data_ptr(state[0]), tg_data_ptr(state[1]), vm, n, &c);
    else
        update_f64(tg_data_ptr(p), tg_data_ptr(g), tg_data_ptr(state[0]), tg_data_ptr(state[1]), vm, n, &c);
    return TG_OK;
}

static int adam_step(tg_optimizer *a, tg_tensor *p, const tg_tensor *g, tg_tensor *const *state)
{
    return update(a, p, g, state, false);
}

static int adamw_step(tg_optimizer *a, tg_tensor *p, const tg_tensor *g, tg_tensor *const *state)
{
    return update(a, p, g, state, true);
}
