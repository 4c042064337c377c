/* Elementwise, copy, reduction and softmax kernels on strided tensors.
 *
 * Kernels are plain functions: outputs first, inputs const, sizes taken from
 * the tensors. Callers (src/autograd) have checked shapes and dtypes. */
#include "internal.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the strided iterator ------------------------------------------------------
 * Up to four operands seen with out's shape (inputs broadcast with stride 0),
 * byte strides, adjacent dims merged where every operand allows it. Work is
 * split by rows (all dims but the last) across threads for large tensors. */

typedef struct {
    int ndim, nops;
    int64_t shape[TG_MAX_DIMS];
    int64_t stride[4][TG_MAX_DIMS]; /* bytes */
    char *base[4];
    int64_t numel;
} tg_iter;

static void iter_simplify(tg_iter *it)
{
    int nops = it->nops;
    /* Drop size-1 dims, then merge dim d into d+1 when contiguous for all. */
    int n = 0;
    for (int d = 0; d < it->ndim; d++) {
        if (it->shape[d] == 1) continue;
        it->shape[n] = it->shape[d];
        for (int k = 0; k < nops; k++) it->stride[k][n] = it->stride[k][d];
        n++;
    }
    if (n == 0) {
        it->shape[0] = 1;
        for (int k = 0; k < nops; k++) it->stride[k][0] = 0;
        n = 1;
    }
    int m = 0;
    for (int d = 1; d < n; d++) {
        bool merge = true;
        for (int k = 0; k < nops; k++)
            if (it->stride[k][m] != it->stride[k][d] * it->shape[d]) merge = false;
        if (merge) {
            it->shape[m] *= it->shape[d];
            for (int k = 0; k < nops; k++) it->stride[k][m] = it->stride[k][d];
        } else {
            m++;
            it->shape[m] = it->shape[d];
            for (int k = 0; k < nops; k++) it->stride[k][m] = it->stride[k][d];
        }
    }
    it->ndim = m + 1;
}

static void iter_init(tg_iter *it, int nops, const tg_tensor *const *ops)
{
    const tg_tensor *out = ops[0];
    it->nops = nops;
    it->ndim = out->ndim;
    it->numel = tg_numel(out);
    for (int d = 0; d < out->ndim; d++) it->shape[d] = out->shape[d];
    for (int k = 0; k < nops; k++) {
        int64_t st[TG_MAX_DIMS];
        tg__broadcast_strides(ops[k], out->ndim, out->shape, st);
        size_t es = tg_dtype_size(ops[k]->dtype);
        for (int d = 0; d < out->ndim; d++) it->stride[k][d] = st[d] * (int64_t)es;
        it->base[k] = (char *)ops[k]->data + ops[k]->offset * (int64_t)es;
    }
    iter_simplify(it);
}

/* Calls fn for every innermost row: n elements, pointers and byte strides. */
typedef void (*tg_row_fn)(void *ctx, int64_t n, char *const *p, const int64_t *s);

static void iter_rows(const tg_iter *it, int64_t lo, int64_t hi, tg_row_fn fn, void *ctx)
{
    int nd = it->ndim;
    int64_t inner = it->shape[nd - 1];
    int64_t s[4];
    for (int k = 0; k < it->nops; k++) s[k] = it->stride[k][nd - 1];
    int64_t idx[TG_MAX_DIMS];
    int64_t r = lo;
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = r % it->shape[d];
        r /= it->shape[d];
    }
    for (int64_t row = lo; row < hi; row++) {
        char *p[4];
        for (int k = 0; k < it->nops; k++) {
            char *q = it->base[k];
            for (int d = 0; d < nd - 1; d++) q += idx[d] * it->stride[k][d];
            p[k] = q;
        }
        fn(ctx, inner, p, s);
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < it->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static void iter_run(const tg_iter *it, tg_row_fn fn, void *ctx)
{
    if (it->numel == 0) return;
    int64_t rows = it->numel / it->shape[it->ndim - 1];
#ifdef _OPENMP
    if (it->numel >= TG_PAR_MIN && rows > 1 && !omp_in_parallel()) {
#pragma omp parallel
        {
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
            iter_rows(it, lo, hi, fn, ctx);
        }
        return;
    }
#endif
    iter_rows(it, 0, rows, fn, ctx);
}

static void iter_apply(int nops, const tg_tensor *const *ops, tg_row_fn fn, void *ctx)
{
    tg_iter it;
    iter_init(&it, nops, ops);
    iter_run(&it, fn, ctx);
}

/* ---- scalar loads/stores for the generic (mixed dtype) rows ---------------------- */

#define ld tg__load_elem
#define st tg__store_elem

/* ---- binary -------------------------------------------------------------------------- */

typedef struct {
    tg_binop op;
    double s;
    bool rev;
} bin_ctx;

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */

/* One row per (dtype, op): the switch is outside the element loop so the
 * compiler vectorises the unit-stride case. */
#define BIN_ROW(T, NAME, EXPR)                                                            \
    static void NAME(void *ctx, int64_t n, char *const *p, const int64_t *s)              \
    {                                                                                     \
        (void)ctx;                                                                        \
        T *o = (T *)p[0];                                                                 \
        const T *x = (const T *)p[1], *y = (const T *)p[2];                               \
        if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {                \
            for (int64_t i = 0; i < n; i++) {                                             \
                T a = x[i], b = y[i];                                                     \
                o[i] = (EXPR);                                                            \
            }                                                                             \
        } else {                                                                          \
            int64_t so = s[0] / (int64_t)sizeof(T), sa = s[1] / (int64_t)sizeof(T),       \
                    sb = s[2] / (int64_t)sizeof(T);                                       \
            for (int64_t i = 0; i < n; i++) {                                             \
                T a = x[i * sa], b = y[i * sb];                                           \
                o[i * so] = (EXPR);                                                       \
            }                                                                             \
        }                                                                                 \
    }

BIN_ROW(float, add_f32, a + b)
BIN_ROW(float, sub_f32, a - b)
BIN_ROW(float, mul_f32, a *b)
BIN_ROW(float, div_f32, a / b)
BIN_ROW(double, add_f64, a + b)
BIN_ROW(double, sub_f64, a - b)
BIN_ROW(double, mul_f64, a *b)
BIN_ROW(double, div_f64, a / b)

/* tensor (op) tensor: add, sub, mul, div (TG_BIN_POW is scalar-only) */
static const tg_row_fn bin_rows[2][TG_BIN_POW] = {
    {add_f32, sub_f32, mul_f32, div_f32},
    {add_f64, sub_f64, mul_f64, div_f64},
};

void tg_k_binary(tg_tensor *out, const tg_tensor *a, const tg_tensor *b, tg_binop op)
{
    assert(op < TG_BIN_POW); /* the table has no tensor-tensor pow */
    const tg_tensor *ops[3] = {out, a, b};
    iter_apply(3, ops, bin_rows[out->dtype == TG_F64][op], NULL);
}

#define BINS_ROW(T, NAME, POWF)                                                           \
    static void NAME(void *vctx, int64_t n, char *const *p, const int64_t *s)             \
    {                                                                                     \
        const bin_ctx *c = vctx;                                                          \
        T *o = (T *)p[0];                                                                 \
        const T *x = (const T *)p[1];                                                     \
        int64_t so = s[0] / (int64_t)sizeof(T), sa = s[1] / (int64_t)sizeof(T);           \
        T k = (T)c->s;                                                                    \
        switch (c->op) {                                                                  \
        case TG_BIN_ADD:                                                                  \
            for (int64_t i = 0; i < n; i++) o[i * so] = x[i * sa] + k;                    \
            return;                                                                       \
        case TG_BIN_SUB:                                                                  \
            if (c->rev)                                                                   \
                for (int64_t i = 0; i < n; i++) o[i * so] = k - x[i * sa];                \
            else                                                                          \
                for (int64_t i = 0; i < n; i++) o[i * so] = x[i * sa] - k;                \
            return;                                                                       \
        case TG_BIN_MUL:                                                                  \
            for (int64_t i = 0; i < n; i++) o[i * so] = x[i * sa] * k;                    \
            return;                                                                       \
        case TG_BIN_DIV:                                                                  \
            for (int64_t i = 0; i < n; i++) o[i * so] = x[i * sa] / k;                    \
            return;                                                                       \
        case TG_BIN_POW:                                                                  \
            if (c->s == 2.0) /* PyTorch's pow kernel multiplies for 2 and 3 */            \
                for (int64_t i = 0; i < n; i++) o[i * so] = x[i * sa] * x[i * sa];        \
            else if (c->s == 3.0)                                                         \
                for (int64_t i = 0; i < n; i++) o[i * so] = x[i * sa] * x[i * sa] * x[i * sa]; \
            else                                                                          \
                for (int64_t i = 0; i < n; i++) o[i * so] = POWF(x[i * sa], k);           \
            return;                                                                       \
        }                                                                                 \
    }

BINS_ROW(float, bins_f32, powf)
BINS_ROW(double, bins_f64, pow)

void tg_k_binary_scalar(tg_tensor *out, const tg_tensor *a, double s, tg_binop op, bool rev)
{
    bin_ctx c = {op, s, rev};
    const tg_tensor *ops[2] = {out, a};
    iter_apply(2, ops, out->dtype == TG_F64 ? bins_f64 : bins_f32, &c);
}

/* ---- unary ------------------------------------------------------------------------------ */

#define UN_ROW(T, NAME, EXPF, LOGF, SQRTF, TANHF)                                        \
    static void NAME(void *vctx, int64_t n, char *const *p, const int64_t *s)             \
    {                                                                                     \
        tg_unop op = *(const tg_unop *)vctx;                                              \
        T *o = (T *)p[0];                                                                 \
        const T *x = (const T *)p[1];                                                     \
        int64_t so = s[0] / (int64_t)sizeof(T), sa = s[1] / (int64_t)sizeof(T);           \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T a = x[i * sa], r;                                                           \
            switch (op) {                                                                 \
            case TG_UN_NEG: r = -a; break;                                                \
            case TG_UN_EXP: r = EXPF(a); break;                                           \
            case TG_UN_LOG: r = LOGF(a); break;                                           \
            case TG_UN_SQRT: r = SQRTF(a); break;                                         \
            case TG_UN_TANH: r = TANHF(a); break;                                         \
            case TG_UN_RELU: r = a > 0 ? a : (isnan(a) ? a : 0); break;                   \
            case TG_UN_GELU:                                                              \
            case TG_UN_GELU_TANH:                                                         \
                r = (T)0.5 * a * ((T)1 + TANHF((T)GELU_K * (a + (T)0.044715 * a * a * a))); \
                break;                                                                    \
            case TG_UN_ABS: r = a < 0 ? -a : a; break;                                    \
            case TG_UN_SQUARE: r = a * a; break;                                          \
            case TG_UN_RECIP: r = (T)1 / a; break;                                        \
            case TG_UN_RSQRT: r = (T)1 / SQRTF(a); break;                                 \
            default: r = a;                                                               \
            }                                                                             \
            o[i * so] = r;                                                                \
        }                                                                                 \
    }

UN_ROW(float, un_basic_f32, expf, logf, sqrtf, tanhf)
UN_ROW(double, un_f64, exp, log, sqrt, tanh)

/* The book's GELU as its ops compute it, one tensor op after another:
 * 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), with sqrt(2/pi)
 * a float32 tensor. TANH is the tanh of the element's position (below). */
static inline float gelu_f32(float x, float t) { return 0.5f * x * (1.0f + t); }
static inline float gelu_inner_f32(float x)
{
    const float k = sqrtf((float)(2.0 / 3.14159265358979323846)), c = 0.044715f;
    return k * (x + c * (x * x * x));
}

/* F.gelu(x, approximate="tanh") as PyTorch's CPU kernel computes it
 * (GeluKernelImpl, its vector and scalar paths alike): kBeta =
 * M_SQRT2 * M_2_SQRTPI * 0.5 rounded to float32 (one ulp above the book's
 * sqrt of float32 2/pi) and x + kKappa * x^3 as one fused multiply-add, as
 * the compiler contracts it there; then 0.5 x (1 + tanh(inner)). */
#define GELU_PT_BETA ((float)(1.4142135623730951 * 1.1283791670955126 * 0.5))
static inline float gelu_pt_inner_f32(float x) { return GELU_PT_BETA * fmaf(0.044715f, (x * x) * x, x); }

/* GELU's tanh in place: PyTorch's vector tanh (SLEEF), or under FAST
 * numerics a polynomial one the compiler vectorises (tg__tanh_fast_f32). */
static void gelu_tanh(float *t, int64_t m, bool fast)
{
    if (fast)
        for (int64_t i = 0; i < m; i++) t[i] = tg__tanh_fast_f32(t[i]);
    else
        tg__vtanhf(t, t, m);
}

/* exp, log, tanh and GELU of float32 elements as PyTorch's cpu_kernel_vec
 * runs them on one chunk: the first n - n % 16 elements of a contiguous row
 * (two vectors a step) by the vector functions, the rest and strided rows by
 * the C library (vmath.c). */
static void un_math_f32(tg_unop op, bool fast, int64_t n, float *o, int64_t so, const float *x, int64_t sa)
{
    int64_t nv = so == 1 && sa == 1 && tg__vec_math() ? n - n % 16 : 0;
    enum { CH = 256 };
    float buf[CH];
    for (int64_t i0 = 0; i0 < nv; i0 += CH) {
        int64_t m = nv - i0 < CH ? nv - i0 : CH;
        switch (op) {
        case TG_UN_EXP: tg__vexpf(o + i0, x + i0, m); break;
        case TG_UN_LOG: tg__vlogf(o + i0, x + i0, m); break;
        case TG_UN_TANH: tg__vtanhf(o + i0, x + i0, m); break;
        default: /* TG_UN_GELU, TG_UN_GELU_TANH */
            for (int64_t i = 0; i < m; i++)
                buf[i] = op == TG_UN_GELU ? gelu_inner_f32(x[i0 + i]) : gelu_pt_inner_f32(x[i0 + i]);
            gelu_tanh(buf, m, fast);
            for (int64_t i = 0; i < m; i++) o[i0 + i] = gelu_f32(x[i0 + i], buf[i]);
        }
    }
    for (int64_t i = nv; i < n; i++) {
        float a = x[i * sa], r;
        switch (op) {
        case TG_UN_EXP: r = expf(a); break;
        case TG_UN_LOG: r = logf(a); break;
        case TG_UN_TANH: r = tanhf(a); break;
        default: {
            float u = op == TG_UN_GELU ? gelu_inner_f32(a) : gelu_pt_inner_f32(a);
            r = gelu_f32(a, fast ? tg__tanh_fast_f32(u) : tanhf(u));
        }
        }
        o[i * so] = r;
    }
}

/* The gradient of the book's GELU as PyTorch's autograd computes it through
 * the ops above (tanh recomputed with the forward's rule): with h = 0.5 x,
 * t = tanh(u), u = k (x + c x^3),
 *   g3 = (dy * h) * (1 - t * t)     (TanhBackward0: one rounding for 1 - t t)
 *   g2 = g3 * k
 *   dx = (g2 + (g2 * c) * (3 * (x * x))) + (dy * (1 + t)) * 0.5,
 * the three terms added in the order backward's schedule delivers them
 * (x + ..., pow, 0.5 * x). */
static inline float gelu_grad_f32(float x, float t, float dy)
{
    const float k = sqrtf((float)(2.0 / 3.14159265358979323846)), c = 0.044715f;
    float g3 = (dy * (0.5f * x)) * fmaf(-t, t, 1.0f);
    float g2 = g3 * k;
    return (g2 + (g2 * c) * (3.0f * (x * x))) + (dy * (1.0f + t)) * 0.5f;
}

/* GeluBackward0's kernel (GeluBackwardKernelImpl, tanh), contracted as
 * compiled there: with t = tanh(inner),
 *   dx = dy * (0.5 (1 + t) + ((0.5 x) fma(-t, t, 1)) (kBeta fma(3 kKappa, x^2, 1))) */
static inline float gelu_pt_grad_f32(float x, float t, float dy)
{
    const float c3 = 3.0f * 0.044715f;
    float left_d = 0.5f * (1.0f + t);
    float right_d = ((0.5f * x) * fmaf(-t, t, 1.0f)) * (GELU_PT_BETA * fmaf(c3, x * x, 1.0f));
    return dy * (left_d + right_d);
}

void tg_k_gelu_backward_f32(tg_numerics nm, bool pytorch, float *dx, const float *x, const float *dy, int64_t n)
{
    int64_t nv = tg__vec_math() ? n - n % 16 : 0;
    bool fast = nm != TG_NUMERICS_EXACT; /* FAST and BF16 */
    enum { CH = 256 };
#pragma omp parallel for if (n > TG_PAR_MIN) schedule(static)
    for (int64_t i0 = 0; i0 < nv; i0 += CH) {
        float t[CH];
        int64_t m = nv - i0 < CH ? nv - i0 : CH;
        for (int64_t i = 0; i < m; i++) t[i] = pytorch ? gelu_pt_inner_f32(x[i0 + i]) : gelu_inner_f32(x[i0 + i]);
        gelu_tanh(t, m, fast);
        for (int64_t i = 0; i < m; i++)
            dx[i0 + i] = pytorch ? gelu_pt_grad_f32(x[i0 + i], t[i], dy[i0 + i]) : gelu_grad_f32(x[i0 + i], t[i], dy[i0 + i]);
    }
    for (int64_t i = nv; i < n; i++) {
        float u = pytorch ? gelu_pt_inner_f32(x[i]) : gelu_inner_f32(x[i]), t = fast ? tg__tanh_fast_f32(u) : tanhf(u);
        dx[i] = pytorch ? gelu_pt_grad_f32(x[i], t, dy[i]) : gelu_grad_f32(x[i], t, dy[i]);
    }
}

/* the op first: un_basic_f32 and un_f64 read it through the same pointer */
typedef struct {
    tg_unop op;
    bool fast;
} un_ctx;

static void un_f32(void *vctx, int64_t n, char *const *p, const int64_t *s)
{
    const un_ctx *c = vctx;
    if (c->op == TG_UN_EXP || c->op == TG_UN_LOG || c->op == TG_UN_TANH || c->op == TG_UN_GELU ||
        c->op == TG_UN_GELU_TANH)
        un_math_f32(c->op, c->fast, n, (float *)p[0], s[0] / (int64_t)sizeof(float), (const float *)p[1],
                    s[1] / (int64_t)sizeof(float));
    else
        un_basic_f32(vctx, n, p, s);
}

void tg_k_unary(tg_numerics nm, tg_tensor *out, const tg_tensor *a, tg_unop op)
{
    const tg_tensor *ops[2] = {out, a};
    un_ctx c = {op, nm != TG_NUMERICS_EXACT}; /* FAST and BF16 */
    iter_apply(2, ops, out->dtype == TG_F64 ? un_f64 : un_f32, &c);
}

/* ---- copy, fill, axpy ------------------------------------------------------------------- */

typedef struct {
    tg_dtype dout, din;
} copy_ctx;

static void copy_row(void *vctx, int64_t n, char *const *p, const int64_t *s)
{
    const copy_ctx *c = vctx;
    size_t es = tg_dtype_size(c->dout);
    if (c->dout == c->din) {
        if (s[0] == (int64_t)es && s[1] == (int64_t)es) {
            memcpy(p[0], p[1], (size_t)n * es);
        } else if (es == 2) {
            for (int64_t i = 0; i < n; i++) *(uint16_t *)(p[0] + i * s[0]) = *(const uint16_t *)(p[1] + i * s[1]);
        } else if (es == 4) {
            for (int64_t i = 0; i < n; i++) *(uint32_t *)(p[0] + i * s[0]) = *(const uint32_t *)(p[1] + i * s[1]);
        } else if (es == 8) {
            for (int64_t i = 0; i < n; i++) *(uint64_t *)(p[0] + i * s[0]) = *(const uint64_t *)(p[1] + i * s[1]);
        } else {
            for (int64_t i = 0; i < n; i++) p[0][i * s[0]] = p[1][i * s[1]];
        }
        return;
    }
    if (c->dout == TG_BF16 && c->din == TG_F32) { /* rounding a weight: not through double */
        if (s[0] == 2 && s[1] == 4) /* unit strides: a loop the compiler vectorises */
            tg__bf16_from_f32((uint16_t *)(void *)p[0], (const float *)(const void *)p[1], n);
        else
            for (int64_t i = 0; i < n; i++)
                *(uint16_t *)(p[0] + i * s[0]) = tg__bf16_bits(*(const float *)(p[1] + i * s[1]));
        return;
    }
    if (c->dout == TG_F32 && c->din == TG_BF16) {
        if (s[0] == 4 && s[1] == 2)
            tg__bf16_to_f32_n((float *)(void *)p[0], (const uint16_t *)(const void *)p[1], n);
        else
            for (int64_t i = 0; i < n; i++)
                *(float *)(p[0] + i * s[0]) = tg__bf16_to_f32(*(const uint16_t *)(p[1] + i * s[1]));
        return;
    }
    for (int64_t i = 0; i < n; i++) st(c->dout, p[0] + i * s[0], ld(c->din, p[1] + i * s[1]));
}

void tg_k_copy(tg_tensor *out, const tg_tensor *src)
{
    if (out->dtype == TG_Q8 || src->dtype == TG_Q8) { /* blocks: src/tensor/q8_ops.c */
        tg__q8_copy(out, src);
        return;
    }
    copy_ctx c = {out->dtype, src->dtype};
    const tg_tensor *ops[2] = {out, src};
    iter_apply(2, ops, copy_row, &c);
}

typedef struct {
    tg_dtype dt;
    double v;
} fill_ctx;

static void fill_row(void *vctx, int64_t n, char *const *p, const int64_t *s)
{
    const fill_ctx *c = vctx;
    if (c->dt == TG_F32) {
        float v = (float)c->v;
        for (int64_t i = 0; i < n; i++) *(float *)(p[0] + i * s[0]) = v;
    } else {
        for (int64_t i = 0; i < n; i++) st(c->dt, p[0] + i * s[0], c->v);
    }
}

void tg_k_fill(tg_tensor *out, double v)
{
    fill_ctx c = {out->dtype, v};
    const tg_tensor *ops[1] = {out};
    iter_apply(1, ops, fill_row, &c);
}

#define AXPY_ROW(T, NAME)                                                                 \
    static void NAME(void *vctx, int64_t n, char *const *p, const int64_t *s)             \
    {                                                                                     \
        T alpha = (T)*(const double *)vctx;                                               \
        T *o = (T *)p[0];                                                                 \
        const T *x = (const T *)p[1];                                                     \
        int64_t so = s[0] / (int64_t)sizeof(T), sa = s[1] / (int64_t)sizeof(T);           \
        if (so == 1 && sa == 1) {                                                         \
            if (alpha == (T)1)                                                            \
                for (int64_t i = 0; i < n; i++) o[i] += x[i];                             \
            else                                                                          \
                for (int64_t i = 0; i < n; i++) o[i] += alpha * x[i];                     \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++) o[i * so] += alpha * x[i * sa];               \
        }                                                                                 \
    }

AXPY_ROW(float, axpy_f32)
AXPY_ROW(double, axpy_f64)

void tg_k_axpy(tg_tensor *out, const tg_tensor *a, double alpha)
{
    const tg_tensor *ops[2] = {out, a};
    iter_apply(2, ops, out->dtype == TG_F64 ? axpy_f64 : axpy_f32, &alpha);
}

/* ---- compare, where ------------------------------------------------------------------------ */

typedef struct {
    tg_dtype da, db;
    int cmp;
} cmp_ctx;

static void cmp_row(void *vctx, int64_t n, char *const *p, const int64_t *s)
{
    const cmp_ctx *c = vctx;
    for (int64_t i = 0; i < n; i++) {
        double a = ld(c->da, p[1] + i * s[1]), b = ld(c->db, p[2] + i * s[2]);
        bool r;
        switch (c->cmp) {
        case TG_CMP_EQ: r = a == b; break;
        case TG_CMP_NE: r = a != b; break;
        case TG_CMP_LT: r = a < b; break;
        case TG_CMP_LE: r = a <= b; break;
        case TG_CMP_GT: r = a > b; break;
        default: r = a >= b; break;
        }
        *(uint8_t *)(p[0] + i * s[0]) = r;
    }
}

void tg_k_compare(tg_tensor *out, const tg_tensor *a, const tg_tensor *b, int cmp)
{
    cmp_ctx c = {a->dtype, b->dtype, cmp};
    const tg_tensor *ops[3] = {out, a, b};
    iter_apply(3, ops, cmp_row, &c);
}

/* out = cond ? a : b, one pass; rows specialised by element size. */
static void where_row(void *vctx, int64_t n, char *const *p, const int64_t *s)
{
    size_t es = *(const size_t *)vctx;
    if (es == 4) {
        for (int64_t i = 0; i < n; i++)
            *(uint32_t *)(p[0] + i * s[0]) =
                p[1][i * s[1]] ? *(const uint32_t *)(p[2] + i * s[2]) : *(const uint32_t *)(p[3] + i * s[3]);
    } else if (es == 8) {
        for (int64_t i = 0; i < n; i++)
            *(uint64_t *)(p[0] + i * s[0]) =
                p[1][i * s[1]] ? *(const uint64_t *)(p[2] + i * s[2]) : *(const uint64_t *)(p[3] + i * s[3]);
    } else {
        for (int64_t i = 0; i < n; i++)
            memcpy(p[0] + i * s[0], p[1][i * s[1]] ? p[2] + i * s[2] : p[3] + i * s[3], es);
    }
}

void tg_k_where(tg_tensor *out, const tg_tensor *cond, const tg_tensor *a, const tg_tensor *b)
{
    size_t es = tg_dtype_size(out->dtype);
    const tg_tensor *ops[4] = {out, cond, a, b};
    iter_apply(4, ops, where_row, &es);
}

/* ---- reductions ----------------------------------------------------------------------------- */

typedef struct {
    tg_dtype din;
    bool acc_f64; /* the accumulator is the output itself (f64) */
} sum_ctx;

static void sum_row(void *vctx, int64_t n, char *const *p, const int64_t *s)
{
    const sum_ctx *c = vctx;
    double *acc = (double *)p[0];
    int64_t sa = s[0] / 8;
    if (sa == 0) {
        double t = 0;
        if (c->din == TG_F32)
            for (int64_t i = 0; i < n; i++) t += *(const float *)(p[1] + i * s[1]);
        else
            for (int64_t i = 0; i < n; i++) t += *(const double *)(p[1] + i * s[1]);
        *acc += t;
    } else {
        if (c->din == TG_F32)
            for (int64_t i = 0; i < n; i++) acc[i * sa] += *(const float *)(p[1] + i * s[1]);
        else
            for (int64_t i = 0; i < n; i++) acc[i * sa] += *(const double *)(p[1] + i * s[1]);
    }
}

/* ---- PyTorch's float32 sum (aten/src/ATen/native/cpu/SumKernel.cpp, 1.13,
 * AVX2: 8-lane vectors), reproduced add for add so that sums, means and
 * whatever follows them equal PyTorch's bit for bit. ---------------------- */

/* ceil(log2(x)), 1 for x <= 2 (aten's utils::CeilLog2) */
static int64_t ceil_log2(int64_t x)
{
    if (x <= 2) return 1;
    int64_t b = 0;
    for (uint64_t v = (uint64_t)(x - 1); v; v >>= 1) b++;
    return b;
}

/* acc[k * w + l] += row[k * gs + l]: one row of 4 groups of w lanes */
static inline void add_row(float *acc, const float *row, int64_t gs, int w)
{
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < w; l++) acc[k * w + l] += row[k * gs + l];
}

/* multi_row_sum: `size` rows, row i holding 4 groups of w lanes at
 * x + i * rs (group k at + k * gs, its lanes contiguous); four levels
 * of partial sums, each level folded into the next every 2^p rows. res gets
 * 4 * w sums (group-major). */
static void multi_row_sum_f32(const float *x, int64_t rs, int64_t gs, int64_t size, int w, float *res)
{
    enum { LEVELS = 4 };
    float acc[LEVELS][4 * 8];
    int n = 4 * w;
    memset(acc, 0, sizeof acc);
    int64_t p = ceil_log2(size) / LEVELS;
    if (p < 4) p = 4;
    int64_t step = (int64_t)1 << p, mask = step - 1, i = 0;
    while (i + step <= size) {
        for (int64_t j = 0; j < step; j++, i++) add_row(acc[0], x + i * rs, gs, w);
        for (int j = 1; j < LEVELS; j++) {
            for (int e = 0; e < n; e++) {
                acc[j][e] += acc[j - 1][e];
                acc[j - 1][e] = 0;
            }
            if ((i & (mask << (j * p))) != 0) break;
        }
    }
    for (; i < size; i++) add_row(acc[0], x + i * rs, gs, w);
    for (int j = 1; j < LEVELS; j++)
        for (int e = 0; e < n; e++) acc[0][e] += acc[j][e];
    memcpy(res, acc[0], sizeof(float) * (size_t)n);
}

/* row_sum: n elements of w lanes each, element i at x + i * es; the lanes
 * summed separately into res (w values). */
static void row_sum_f32(const float *x, int64_t es, int64_t n, int w, float *res)
{
    float part[4 * 8];
    int64_t n4 = n / 4;
    multi_row_sum_f32(x, 4 * es, es, n4, w, part);
    for (int64_t i = n4 * 4; i < n; i++)
        for (int l = 0; l < w; l++) part[l] += x[i * es + l];
    for (int k = 1; k < 4; k++)
        for (int l = 0; l < w; l++) part[l] += part[k * w + l];
    memcpy(res, part, sizeof(float) * (size_t)w);
}

/* The sum of n contiguous floats as sum(dim=-1) gives it. */
float tg__torch_sum_f32(const float *x, int64_t n)
{
    float r[8];
    if (n < 8) { /* scalar_inner_sum */
        row_sum_f32(x, 1, n, 1, r);
        return 0.0f + r[0];
    }
    /* vectorized_inner_sum: 8-lane vectors, then the tail, then the lanes */
    int64_t nv = n / 8;
    row_sum_f32(x, 8, nv, 8, r);
    float acc = 0;
    for (int64_t k = nv * 8; k < n; k++) acc += x[k];
    for (int l = 0; l < 8; l++) acc += r[l];
    return 0.0f + acc;
}

/* out[j] = sum over i < rows of x[i * ld + j] for j < cols, as sum(dim=0)
 * gives it for a row-major (rows, cols) float tensor: vectorized_outer_sum
 * (32 columns at a time, then 8, then one) from 8 columns up; below a
 * vector's width scalar_outer_sum (4 columns at a time, each row's 4 added
 * at once into the levels of partial sums, then one). */
void tg__torch_sum_rows_f32(float *out, const float *x, int64_t rows, int64_t cols, int64_t ld)
{
    float r[32];
    int64_t j = 0;
    if (cols < 8)
        for (; j + 4 <= cols; j += 4) {
            multi_row_sum_f32(x + j, ld, 1, rows, 1, r);
            for (int e = 0; e < 4; e++) out[j + e] = 0.0f + r[e];
        }
    for (; j + 32 <= cols; j += 32) {
        multi_row_sum_f32(x + j, ld, 8, rows, 8, r);
        for (int e = 0; e < 32; e++) out[j + e] = 0.0f + r[e];
    }
    for (; j + 8 <= cols; j += 8) {
        row_sum_f32(x + j, ld, rows, 8, r);
        for (int e = 0; e < 8; e++) out[j + e] = 0.0f + r[e];
    }
    for (; j < cols; j++) {
        row_sum_f32(x + j, ld, rows, 1, r);
        out[j] = 0.0f + r[0];
    }
}

void tg_k_sum_to(tg_tensor *out, const tg_tensor *x)
{
    /* float32, contiguous, one dense block of reduced dims at either end:
     * PyTorch's own order of additions */
    if (x->dtype == TG_F32 && out->dtype == TG_F32 && tg_is_contiguous(x) && tg_is_contiguous(out) &&
        out->ndim == x->ndim && x->ndim > 0 && tg_numel(x) > 0) {
        int nd = x->ndim, lead = 0, trail = 0;
        while (lead < nd && out->shape[lead] == 1) lead++;
        while (trail < nd && out->shape[nd - 1 - trail] == 1) trail++;
        bool inner = trail > 0, ok = true;
        int first = inner ? nd - trail : 0, last = inner ? nd : lead; /* reduced dims [first, last) */
        for (int d = 0; d < nd; d++)
            if ((d >= first && d < last) ? false : out->shape[d] != x->shape[d]) ok = false;
        int64_t red = 1;
        for (int d = first; d < last; d++) red *= x->shape[d];
        if (ok && last > first) {
            int64_t keep = tg_numel(x) / red;
            const float *xp = (const float *)x->data + x->offset;
            float *op = (float *)out->data + out->offset;
            if (inner)
                for (int64_t r = 0; r < keep; r++) op[r] = tg__torch_sum_f32(xp + r * red, red);
            else
                tg__torch_sum_rows_f32(op, xp, red, keep, keep);
            return;
        }
    }
    /* Accumulate in double, in a contiguous scratch of out's shape (out itself
     * when it is a contiguous f64 tensor). Serial: the iterator would race. */
    int64_t n = tg_numel(out);
    double stackbuf[256];
    tg_tensor acc = *out;
    acc.dtype = TG_F64;
    acc.offset = 0;
    tg__contiguous_strides(out->ndim, out->shape, acc.stride);
    bool direct = out->dtype == TG_F64 && tg_is_contiguous(out);
    if (direct) {
        acc.data = tg__ptr(out, out->offset);
    } else {
        acc.data = n <= 256 ? stackbuf : malloc((size_t)n * sizeof(double));
        if (!acc.data) return;
    }
    memset(acc.data, 0, (size_t)n * sizeof(double));
    /* Iterate over x's shape; acc is seen with stride 0 on the reduced dims. */
    tg_iter it;
    int64_t bst[TG_MAX_DIMS];
    tg__broadcast_strides(&acc, x->ndim, x->shape, bst);
    it.nops = 2;
    it.ndim = x->ndim;
    it.numel = tg_numel(x);
    for (int d = 0; d < x->ndim; d++) {
        it.shape[d] = x->shape[d];
        it.stride[0][d] = bst[d] * 8;
        it.stride[1][d] = x->stride[d] * (int64_t)tg_dtype_size(x->dtype);
    }
    it.base[0] = acc.data;
    it.base[1] = (char *)tg__ptr(x, x->offset);
    iter_simplify(&it);
    sum_ctx c = {x->dtype, true};
    if (it.numel > 0) iter_rows(&it, 0, it.numel / it.shape[it.ndim - 1], sum_row, &c);
    if (!direct) {
        tg_k_copy(out, &acc);
        if (acc.data != stackbuf) free(acc.data);
    }
}

void tg_k_max_dim(tg_tensor *out, tg_tensor *idx, const tg_tensor *x, int dim)
{
    /* out/idx have keepdim shape; walk every output position. */
    int64_t n = tg_numel(out);
    int64_t len = x->shape[dim];
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i, xoff = x->offset, ooff = out->offset, ioff = idx ? idx->offset : 0;
        for (int d = out->ndim - 1; d >= 0; d--) {
            int64_t c = r % out->shape[d];
            r /= out->shape[d];
            xoff += c * x->stride[d];
            ooff += c * out->stride[d];
            if (idx) ioff += c * idx->stride[d];
        }
        double best = ld(x->dtype, tg__ptr(x, xoff));
        int64_t bi = 0;
        for (int64_t j = 1; j < len && !isnan(best); j++) {
            double v = ld(x->dtype, tg__ptr(x, xoff + j * x->stride[dim]));
            if (v > best || isnan(v)) {
                best = v;
                bi = j;
            }
        }
        st(out->dtype, tg__ptr(out, ooff), best);
        if (idx) st(TG_I64, tg__ptr(idx, ioff), (double)bi);
    }
}

/* ---- softmax ---------------------------------------------------------------------------------- */

/* Rows along `dim`: row r's first element offset and the stride along dim. */
static int64_t row_offset(const tg_tensor *x, int dim, int64_t r)
{
    int64_t off = x->offset;
    for (int d = x->ndim - 1; d >= 0; d--) {
        if (d == dim) continue;
        off += (r % x->shape[d]) * x->stride[d];
        r /= x->shape[d];
    }
    return off;
}

#define SOFTMAX_ROW(T, NAME, EXPF, LOGF)                                                      \
    static void NAME(T *y, int64_t sy, const T *x, int64_t sx, int64_t n, bool want_log)       \
    {                                                                                          \
        T m = -INFINITY;                                                                       \
        for (int64_t i = 0; i < n; i++) m = x[i * sx] > m ? x[i * sx] : m;                     \
        for (int64_t i = 0; i < n; i++)                                                        \
            if (x[i * sx] != x[i * sx]) m = x[i * sx];                                         \
        T sum = 0;                                                                             \
        if (want_log) {                                                                        \
            for (int64_t i = 0; i < n; i++) sum += EXPF(x[i * sx] - m);                        \
            T lse = LOGF(sum);                                                                 \
            for (int64_t i = 0; i < n; i++) y[i * sy] = (x[i * sx] - m) - lse;                 \
        } else {                                                                               \
            for (int64_t i = 0; i < n; i++) {                                                  \
                T e = EXPF(x[i * sx] - m);                                                     \
                y[i * sy] = e;                                                                 \
                sum += e;                                                                      \
            }                                                                                  \
            T inv = (T)1 / sum;                                                                \
            for (int64_t i = 0; i < n; i++) y[i * sy] *= inv;                                  \
        }                                                                                      \
    }

SOFTMAX_ROW(double, softmax_row_f64, exp, log)

/* A float row as PyTorch's _vec_softmax_lastdim and _vec_log_softmax_lastdim
 * compute it: every exp and log by the vector functions, the sums by 8 lanes
 * (tg__sum8), y = (x - max) - log(sum) for log_softmax and
 * exp(x - max) * (1 / sum) for softmax. */
enum { SM_CHUNK = 256 };

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_ROW8 1
/* The max of n >= 8 contiguous floats in eight lanes, where it must equal
 * row_max_f32's loop: false (run that loop) when a NaN is present (the loop
 * keeps the last one) or the max is zero (the loop keeps the first of -0 and
 * +0); any other max has one representation, whichever order finds it. */
__attribute__((target("avx2,fma"))) static bool row_max8(const float *x, int64_t n, float *out)
{
    __m256 m = _mm256_loadu_ps(x), nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
    int64_t i = 8;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        m = _mm256_max_ps(m, v);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    if (_mm256_movemask_ps(nan)) return false;
    float l[8], r;
    _mm256_storeu_ps(l, m);
    r = l[0];
    for (int k = 1; k < 8; k++) r = l[k] > r ? l[k] : r;
    for (; i < n; i++) {
        if (x[i] != x[i]) return false;
        r = x[i] > r ? x[i] : r;
    }
    if (r == 0.0f) return false;
    *out = r;
    return true;
}
#endif

static float row_max_f32(const float *x, int64_t sx, int64_t n)
{
    float m = -INFINITY;
#if defined(HAVE_ROW8)
    if (sx == 1 && n >= 8 && tg__vec_math() && row_max8(x, n, &m)) return m;
#endif
    for (int64_t i = 0; i < n; i++) m = x[i * sx] > m ? x[i * sx] : m;
    for (int64_t i = 0; i < n; i++)
        if (x[i * sx] != x[i * sx]) m = x[i * sx];
    return m;
}

static void softmax_row_f32(float *y, int64_t sy, const float *x, int64_t sx, int64_t n, bool want_log)
{
    float m = row_max_f32(x, sx, n);
    float e[SM_CHUNK];
    tg__sum8 acc = {{0}, 0};
    for (int64_t i0 = 0; i0 < n; i0 += SM_CHUNK) {
        int64_t c = n - i0 < SM_CHUNK ? n - i0 : SM_CHUNK;
        for (int64_t i = 0; i < c; i++) e[i] = x[(i0 + i) * sx] - m;
        tg__vexpf(e, e, c);
        tg__sum8_add(&acc, e, c);
        if (!want_log)
            for (int64_t i = 0; i < c; i++) y[(i0 + i) * sy] = e[i];
    }
    float sum = tg__sum8_get(&acc);
    if (want_log) {
        float lse = tg__logf(sum);
        for (int64_t i = 0; i < n; i++) y[i * sy] = (x[i * sx] - m) - lse;
    } else {
        float inv = 1.0f / sum;
        for (int64_t i = 0; i < n; i++) y[i * sy] *= inv;
    }
}

void tg__softmax_row_f32(float *y, const float *x, int64_t n)
{
    softmax_row_f32(y, 1, x, 1, n, false);
}

/* log(sum(exp(x - m))) of a float row, m its max, as softmax_row_f32 sums it */
static float row_lse_f32(const float *x, int64_t n, float m)
{
    float e[SM_CHUNK];
    tg__sum8 acc = {{0}, 0};
    for (int64_t i0 = 0; i0 < n; i0 += SM_CHUNK) {
        int64_t c = n - i0 < SM_CHUNK ? n - i0 : SM_CHUNK;
        tg__vsub2f(e, x + i0, m, 0.0f, c);
        tg__vexpf(e, e, c);
        tg__sum8_add(&acc, e, c);
    }
    return tg__logf(tg__sum8_get(&acc));
}

void tg_k_log_softmax_stats(tg_tensor *stats, const tg_tensor *x)
{
    int64_t rows = x->shape[0], n = x->shape[1];
    bool f64 = x->dtype == TG_F64;
#pragma omp parallel for schedule(static) if (rows * n >= TG_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        if (f64) {
            const double *xr = (const double *)x->data + x->offset + r * n;
            double *st = (double *)stats->data + 2 * r, m = -INFINITY, sum = 0;
            for (int64_t i = 0; i < n; i++) m = xr[i] > m ? xr[i] : m;
            for (int64_t i = 0; i < n; i++)
                if (xr[i] != xr[i]) m = xr[i];
            for (int64_t i = 0; i < n; i++) sum += exp(xr[i] - m);
            st[0] = m, st[1] = log(sum);
        } else {
            const float *xr = (const float *)x->data + x->offset + r * n;
            float *st = (float *)stats->data + 2 * r;
            st[0] = row_max_f32(xr, 1, n);
            st[1] = row_lse_f32(xr, n, st[0]);
        }
    }
}

void tg_k_softmax(tg_tensor *out, const tg_tensor *x, int dim, bool log)
{
    int64_t n = x->ndim ? x->shape[dim] : 1;
    int64_t numel = tg_numel(x);
    if (numel == 0) return;
    int64_t rows = numel / n;
    int64_t sx = x->ndim ? x->stride[dim] : 1, sy = out->ndim ? out->stride[dim] : 1;
    int d = x->ndim ? dim : -1;
    bool f64 = x->dtype == TG_F64;
#pragma omp parallel for schedule(static) if (numel >= TG_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t xo = d >= 0 ? row_offset(x, d, r) : x->offset;
        int64_t yo = d >= 0 ? row_offset(out, d, r) : out->offset;
        if (f64)
            softmax_row_f64((double *)out->data + yo, sy, (const double *)x->data + xo, sx, n, log);
        else
            softmax_row_f32((float *)out->data + yo, sy, (const float *)x->data + xo, sx, n, log);
    }
}

#define SOFTMAX_BWD_ROW(T, NAME, EXPF)                                                        \
    static void NAME(T *dx, int64_t sdx, const T *y, int64_t sy, const T *dy, int64_t sdy,    \
                     int64_t n, bool want_log)                                                    \
    {                                                                                          \
        T acc = 0;                                                                             \
        if (want_log) {                                                                        \
            for (int64_t i = 0; i < n; i++) acc += dy[i * sdy];                                \
            for (int64_t i = 0; i < n; i++) dx[i * sdx] = dy[i * sdy] - EXPF(y[i * sy]) * acc; \
        } else {                                                                               \
            for (int64_t i = 0; i < n; i++) acc += dy[i * sdy] * y[i * sy];                    \
            for (int64_t i = 0; i < n; i++) dx[i * sdx] = y[i * sy] * (dy[i * sdy] - acc);     \
        }                                                                                      \
    }

SOFTMAX_BWD_ROW(double, softmax_bwd_f64, exp)

/* A float row as PyTorch's vectorised backward kernels compute it (their
 * multiply-adds fused, as its build compiles them): softmax
 * s = sum8(dy * y), dx = (dy - s) * y; log_softmax s = sum8(dy),
 * dx = dy - exp(y) * s with one rounding. */
static void softmax_bwd_f32(float *dx, int64_t sdx, const float *y, int64_t sy, const float *dy, int64_t sdy,
                            int64_t n, bool want_log)
{
    float a[SM_CHUNK], b[SM_CHUNK];
    tg__sum8 acc = {{0}, 0};
    for (int64_t i0 = 0; i0 < n; i0 += SM_CHUNK) {
        int64_t c = n - i0 < SM_CHUNK ? n - i0 : SM_CHUNK;
        for (int64_t i = 0; i < c; i++) a[i] = dy[(i0 + i) * sdy];
        if (want_log) {
            tg__sum8_add(&acc, a, c);
        } else {
            for (int64_t i = 0; i < c; i++) b[i] = y[(i0 + i) * sy];
            tg__sum8_fma(&acc, a, b, c);
        }
    }
    float s = tg__sum8_get(&acc);
    for (int64_t i0 = 0; i0 < n; i0 += SM_CHUNK) {
        int64_t c = n - i0 < SM_CHUNK ? n - i0 : SM_CHUNK;
        for (int64_t i = 0; i < c; i++) b[i] = y[(i0 + i) * sy];
        if (want_log) {
            tg__vexpf(b, b, c);
            for (int64_t i = 0; i < c; i++) dx[(i0 + i) * sdx] = fmaf(-b[i], s, dy[(i0 + i) * sdy]);
        } else {
            for (int64_t i = 0; i < c; i++) dx[(i0 + i) * sdx] = (dy[(i0 + i) * sdy] - s) * b[i];
        }
    }
}

void tg_k_softmax_backward(tg_tensor *dx, const tg_tensor *y, const tg_tensor *dy, int dim, bool log)
{
    int64_t n = y->ndim ? y->shape[dim] : 1;
    int64_t numel = tg_numel(y);
    if (numel == 0) return;
    int64_t rows = numel / n;
    int d = y->ndim ? dim : -1;
    int64_t sdx = d >= 0 ? dx->stride[d] : 1, sy = d >= 0 ? y->stride[d] : 1,
            sdy = d >= 0 ? dy->stride[d] : 1;
    bool f64 = y->dtype == TG_F64;
#pragma omp parallel for schedule(static) if (numel >= TG_PAR_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t o0 = d >= 0 ? row_offset(dx, d, r) : dx->offset;
        int64_t o1 = d >= 0 ? row_offset(y, d, r) : y->offset;
        int64_t o2 = d >= 0 ? row_offset(dy, d, r) : dy->offset;
        if (f64)
            softmax_bwd_f64((double *)dx->data + o0, sdx, (const double *)y->data + o1, sy,
                            (const double *)dy->data + o2, sdy, n, log);
        else
            softmax_bwd_f32((float *)dx->data + o0, sdx, (const float *)y->data + o1, sy,
                            (const float *)dy->data + o2, sdy, n, log);
    }
}

/* ---- ranking ---------------------------------------------------------------------------------- */

static int rank_desc(const void *pa, const void *pb)
{
    const tg__ranked *a = pa, *b = pb;
    if (tg__greater(a->v, b->v)) return -1;
    if (tg__greater(b->v, a->v)) return 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int rank_asc(const void *pa, const void *pb)
{
    const tg__ranked *a = pa, *b = pb;
    if (tg__greater(b->v, a->v)) return -1;
    if (tg__greater(a->v, b->v)) return 1;
    return (a->i > b->i) - (a->i < b->i);
}

void tg__rank(tg__ranked *r, size_t n, bool largest) { qsort(r, n, sizeof *r, largest ? rank_desc : rank_asc); }
