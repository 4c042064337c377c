/* exp, log and tanh of float32 as PyTorch's CPU kernels compute them.
 *
 * On x86-64 machines with AVX2 and FMA, PyTorch's vectorised float kernels
 * (Vectorized<float>::exp, log, tanh) call SLEEF's 1.0-ulp functions; its
 * scalar paths (a loop's tail, strided operands) call the C library's. SLEEF
 * gives the same bits whichever width computes an element, so the one-lane
 * "purecfma" functions stand in for the vector lanes wherever a loop here is
 * not vectorised. Elsewhere (no FMA) both sides use the C library. */
#include "internal.h"

#include <sleef.h>
#include <string.h>
/* sleef.h declares the FMA functions only to code compiled for AVX2; they
 * are called here only after the CPU was checked (tg__vec_math). */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TG_SLEEF_AVX2 1
#else
float Sleef_expf1_u10purecfma(float);
float Sleef_logf1_u10purecfma(float);
float Sleef_tanhf1_u10purecfma(float);
float Sleef_log1pf1_u10purecfma(float);
double Sleef_expd1_u10purecfma(double);
double Sleef_log1pd1_u10purecfma(double);
#endif

static int sleef_state = -1; /* -1 unknown, 0 no FMA, 1 SLEEF */

bool tg__vec_math(void)
{
    int s = __atomic_load_n(&sleef_state, __ATOMIC_RELAXED);
    if (s < 0) {
#if defined(TG_SLEEF_AVX2)
        s = 1;
#elif defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        s = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
        s = 0;
#endif
        __atomic_store_n(&sleef_state, s, __ATOMIC_RELAXED);
    }
    return s == 1;
}

float tg__logf(float x) { return tg__vec_math() ? Sleef_logf1_u10purecfma(x) : logf(x); }
float tg__expf(float x) { return tg__vec_math() ? Sleef_expf1_u10purecfma(x) : expf(x); }
float tg__log1pf(float x) { return tg__vec_math() ? Sleef_log1pf1_u10purecfma(x) : log1pf(x); }
double tg__exp(double x) { return tg__vec_math() ? Sleef_expd1_u10purecfma(x) : exp(x); }
double tg__log1p(double x) { return tg__vec_math() ? Sleef_log1pd1_u10purecfma(x) : log1p(x); }

#if defined(TG_SLEEF_AVX2)
#define VEC_MAP(NAME, V8, S1)                                                            \
    void NAME(float *y, const float *x, int64_t n)                                       \
    {                                                                                    \
        int64_t i = 0;                                                                   \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, V8(_mm256_loadu_ps(x + i)));  \
        for (; i < n; i++) y[i] = S1(x[i]);                                              \
    }
VEC_MAP(tg__vexpf, Sleef_expf8_u10avx2, Sleef_expf1_u10purecfma)
VEC_MAP(tg__vlogf, Sleef_logf8_u10avx2, Sleef_logf1_u10purecfma)
VEC_MAP(tg__vtanhf, Sleef_tanhf8_u10avx2, Sleef_tanhf1_u10purecfma)
#elif defined(__x86_64__) && defined(__GNUC__)
/* A portable build (no -march=native): the same eight-lane functions on a
 * CPU with AVX2 and FMA, chosen at run time, with the same one-lane tail, so
 * the same bits as the native build's; the C library's elsewhere. */
#include <immintrin.h>
__attribute__((target("avx2,fma"))) __m256 Sleef_expf8_u10avx2(__m256);
__attribute__((target("avx2,fma"))) __m256 Sleef_logf8_u10avx2(__m256);
__attribute__((target("avx2,fma"))) __m256 Sleef_tanhf8_u10avx2(__m256);
#define VEC_MAP(NAME, V8, S1, LIBM)                                                          \
    __attribute__((target("avx2,fma"))) static void NAME##_avx2(float *y, const float *x, int64_t n) \
    {                                                                                        \
        int64_t i = 0;                                                                       \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, V8(_mm256_loadu_ps(x + i)));      \
        for (; i < n; i++) y[i] = S1(x[i]);                                                  \
    }                                                                                        \
    void NAME(float *y, const float *x, int64_t n)                                           \
    {                                                                                        \
        if (tg__vec_math())                                                                  \
            NAME##_avx2(y, x, n);                                                            \
        else                                                                                 \
            for (int64_t i = 0; i < n; i++) y[i] = LIBM(x[i]);                               \
    }
VEC_MAP(tg__vexpf, Sleef_expf8_u10avx2, Sleef_expf1_u10purecfma, expf)
VEC_MAP(tg__vlogf, Sleef_logf8_u10avx2, Sleef_logf1_u10purecfma, logf)
VEC_MAP(tg__vtanhf, Sleef_tanhf8_u10avx2, Sleef_tanhf1_u10purecfma, tanhf)
#else
#define VEC_MAP(NAME, S1, LIBM)                                                          \
    void NAME(float *y, const float *x, int64_t n)                                       \
    {                                                                                    \
        if (tg__vec_math())                                                              \
            for (int64_t i = 0; i < n; i++) y[i] = S1(x[i]);                             \
        else                                                                             \
            for (int64_t i = 0; i < n; i++) y[i] = LIBM(x[i]);                           \
    }
VEC_MAP(tg__vexpf, Sleef_expf1_u10purecfma, expf)
VEC_MAP(tg__vlogf, Sleef_logf1_u10purecfma, logf)
VEC_MAP(tg__vtanhf, Sleef_tanhf1_u10purecfma, tanhf)
#endif

/* cos and sin: SLEEF's one-lane and eight-lane functions differ in a few
 * last bits for large arguments, so these take the eight-lane AVX2 ones
 * PyTorch's vec::map takes, for every element: a tail is loaded into a
 * zeroed vector as Vectorized<float>::loadu(ptr, count) loads it. Chosen
 * at run time, so a build for any x86-64 gives the same bits. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* declared for AVX2 callers (clang checks a vector argument's ABI against
 * the callee's target too) */
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#if !defined(TG_SLEEF_AVX2)
AVX2_TARGET __m256 Sleef_cosf8_u10avx2(__m256);
AVX2_TARGET __m256 Sleef_sinf8_u10avx2(__m256);
AVX2_TARGET __m256 Sleef_powf8_u10avx2(__m256, __m256);
#endif
#define AVX2_MAP(NAME, V8)                                                              \
    AVX2_TARGET static void NAME(float *y, const float *x, int64_t n)                   \
    {                                                                                   \
        int64_t i = 0;                                                                  \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, V8(_mm256_loadu_ps(x + i))); \
        if (i < n) {                                                                    \
            float b[8] = {0};                                                           \
            memcpy(b, x + i, sizeof *b * (size_t)(n - i));                              \
            _mm256_storeu_ps(b, V8(_mm256_loadu_ps(b)));                                \
            memcpy(y + i, b, sizeof *b * (size_t)(n - i));                              \
        }                                                                               \
    }
AVX2_MAP(cos8_map, Sleef_cosf8_u10avx2)
AVX2_MAP(sin8_map, Sleef_sinf8_u10avx2)
AVX2_TARGET static void rpow8(float *y, float base, const float *e, int64_t n)
{
    for (int64_t i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, Sleef_powf8_u10avx2(_mm256_set1_ps(base), _mm256_loadu_ps(e + i)));
}
#define HAVE_AVX2_MAP 1
#endif

/* torch.tensor(base) ** e for contiguous float32 e, as PyTorch's binary
 * kernel loop runs it: pairs of 8-lane vectors through SLEEF's powf, the
 * tail (n mod 16) through the C library's. */
void tg__vrpowf(float *y, float base, const float *e, int64_t n)
{
    int64_t i = 0;
#if defined(HAVE_AVX2_MAP)
    if (tg__vec_math()) {
        i = n - n % 16;
        rpow8(y, base, e, i);
    }
#endif
    for (; i < n; i++) y[i] = powf(base, e[i]);
}

#if defined(HAVE_AVX2_MAP)
#define TRIG(NAME, MAP8, LIBM)                                 \
    void NAME(float *y, const float *x, int64_t n)             \
    {                                                          \
        if (tg__vec_math()) {                                  \
            MAP8(y, x, n);                                     \
            return;                                            \
        }                                                      \
        for (int64_t i = 0; i < n; i++) y[i] = LIBM(x[i]);     \
    }
#else
#define TRIG(NAME, MAP8, LIBM)                                 \
    void NAME(float *y, const float *x, int64_t n)             \
    {                                                          \
        for (int64_t i = 0; i < n; i++) y[i] = LIBM(x[i]);     \
    }
#endif
TRIG(tg__vcosf, cos8_map, cosf)
TRIG(tg__vsinf, sin8_map, sinf)

#if defined(HAVE_AVX2_MAP)
AVX2_TARGET static void sub2_8(float *y, const float *x, float a, float b, int64_t n)
{
    __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (int64_t i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), va), vb));
}
AVX2_TARGET static void scale8(float *x, float s, int64_t n)
{
    __m256 vs = _mm256_set1_ps(s);
    for (int64_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
}
#endif

void tg__vsub2f(float *y, const float *x, float a, float b, int64_t n)
{
    int64_t i = 0;
#if defined(HAVE_AVX2_MAP)
    if (tg__vec_math()) {
        i = n - n % 8;
        sub2_8(y, x, a, b, i);
    }
#endif
    for (; i < n; i++) y[i] = (x[i] - a) - b;
}

void tg__vscalef(float *x, float s, int64_t n)
{
    int64_t i = 0;
#if defined(HAVE_AVX2_MAP)
    if (tg__vec_math()) {
        i = n - n % 8;
        scale8(x, s, i);
    }
#endif
    for (; i < n; i++) x[i] *= s;
}

/* The lanes of PyTorch's vec::reduce_all (internal.h). PyTorch's build fuses
 * the multiply-add of map2_reduce_all (acc + x * y); so does tg__sum8_fma. */
#if defined(HAVE_AVX2_MAP)
/* the whole groups of 8 in one register: the same lane-wise adds and fused
 * multiply-adds */
AVX2_TARGET static void lanes_add8(float *a, const float *x, int64_t groups)
{
    __m256 acc = _mm256_loadu_ps(a);
    for (int64_t g = 0; g < groups; g++) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + 8 * g));
    _mm256_storeu_ps(a, acc);
}
AVX2_TARGET static void lanes_fma8(float *a, const float *x, const float *y, int64_t groups)
{
    __m256 acc = _mm256_loadu_ps(a);
    for (int64_t g = 0; g < groups; g++)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8 * g), _mm256_loadu_ps(y + 8 * g), acc);
    _mm256_storeu_ps(a, acc);
}
#endif

void tg__sum8_add(tg__sum8 *s, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i < n && s->n < 8; i++) s->a[s->n++] = x[i];
    for (int l = (int)(s->n & 7); i < n && l != 0; i++, l = (l + 1) & 7, s->n++) s->a[l] += x[i];
#if defined(HAVE_AVX2_MAP)
    if (tg__vec_math() && n - i >= 8) {
        int64_t groups = (n - i) / 8;
        lanes_add8(s->a, x + i, groups);
        i += 8 * groups, s->n += 8 * groups;
    }
#endif
    for (; i + 8 <= n; i += 8, s->n += 8)
        for (int l = 0; l < 8; l++) s->a[l] += x[i + l];
    for (int l = 0; i < n; i++, l++, s->n++) s->a[l] += x[i];
}

void tg__sum8_fma(tg__sum8 *s, const float *x, const float *y, int64_t n)
{
    int64_t i = 0;
    for (; i < n && s->n < 8; i++) s->a[s->n++] = x[i] * y[i];
    for (int l = (int)(s->n & 7); i < n && l != 0; i++, l = (l + 1) & 7, s->n++) s->a[l] = fmaf(x[i], y[i], s->a[l]);
#if defined(HAVE_AVX2_MAP)
    if (tg__vec_math() && n - i >= 8) {
        int64_t groups = (n - i) / 8;
        lanes_fma8(s->a, x + i, y + i, groups);
        i += 8 * groups, s->n += 8 * groups;
    }
#endif
    for (; i + 8 <= n; i += 8, s->n += 8)
        for (int l = 0; l < 8; l++) s->a[l] = fmaf(x[i + l], y[i + l], s->a[l]);
    for (int l = 0; i < n; i++, l++, s->n++) s->a[l] = fmaf(x[i], y[i], s->a[l]);
}

float tg__sum8_get(const tg__sum8 *s)
{
    const float *a = s->a;
    if (s->n < 8) {
        float r = s->n > 0 ? a[0] : 0.0f;
        for (int64_t i = 1; i < s->n; i++) r += a[i];
        return r;
    }
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}
