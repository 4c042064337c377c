/* llama.cpp's Q8_0 blocks (q8.h): quantizing, widening and the int8
 * products. */
#include "q8.h"
#include "internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define Q8_X86 1 /* the vector paths: each function compiled for its own ISA (target attributes) */
#else
#define Q8_X86 0
#endif

/* ---- IEEE half ------------------------------------------------------------------------------ */

uint16_t tg__f16_from_f32(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;     /* NaN: a quiet NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;    /* >= 65520 (and inf): infinity */
    uint32_t e = a >> 23;
    if (e < 102) return sign;                        /* below 2^-25: zero */
    if (e < 113) {
        /* a half subnormal: the value in units of 2^-24, rounded to nearest even */
        uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias the exponent, keep 10 mantissa bits, round to nearest even
     * (a carry moves into the exponent, which is the right result) */
    uint32_t h = ((e - 112) << 10) | ((a & 0x7fffffu) >> 13), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

/* ---- Q8_0 ------------------------------------------------------------------------------------- */

/* Block of 32: d = max|x| / 127 (float32, stored as half), id = 1 / d (0 when
 * d is 0), q = roundf(x * id) (halves away from zero), all in float32 as
 * ggml's reference row quantiser computes them. */
void tg__q8_0_quantize(const float *x, int64_t n, uint8_t *out)
{
    /* blocks are independent: a large tensor's on all threads */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n >= TG_PAR_MIN)
#endif
    for (int64_t blk = 0; blk < n / 32; blk++) {
        const float *v = x + blk * 32;
        uint8_t *o = out + blk * 34;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = amax > fabsf(v[j]) ? amax : fabsf(v[j]); /* ggml's MAX */
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = tg__f16_from_f32(d);
        o[0] = (uint8_t)(dh & 0xff);
        o[1] = (uint8_t)(dh >> 8);
        if (amax <= 3.4028235e38f) { /* finite: |x * id| <= 127 (to an ulp) */
            for (int j = 0; j < 32; j++) {
                /* roundf (halves away from zero) as truncation and a step,
                 * branch-free so that the loop vectorises: y - trunc(y) is exact */
                float y = v[j] * id, t = truncf(y);
                t += copysignf(fabsf(y - t) >= 0.5f ? 1.0f : 0.0f, y);
                o[2 + j] = (uint8_t)(int8_t)(t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t);
            }
        } else { /* a NaN or an infinity: NaN products store 0, not an undefined cast */
            for (int j = 0; j < 32; j++) {
                float t = roundf(v[j] * id);
                o[2 + j] = (uint8_t)(int8_t)(t == t ? (t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t) : 0.0f);
            }
        }
    }
}

/* The 32 values of a block widened: q * d, exact for every finite d (8 bits
 * times 11 fit float32's 24). */
void tg__q8_0_dequantize(const uint8_t *in, int64_t n, float *out)
{
    for (int64_t blk = 0; blk < n / TG_Q8_BLOCK; blk++) {
        const uint8_t *b = in + blk * TG_Q8_BYTES;
        float d = tg__f32_from_f16((uint16_t)(b[0] | b[1] << 8));
        for (int j = 0; j < TG_Q8_BLOCK; j++) out[blk * TG_Q8_BLOCK + j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* ---- the activations' quantizer ---------------------------------------------------------------- */

/* llama.cpp's x86 quantize_row_q8_0 (ggml-cpu/arch/x86/quants.c, its AVX
 * path), to the byte, NaN and infinity included:
 *   - amax: |x| reduced with (v)maxps, which returns its second operand
 *     unless the first is greater: eight lanes (lane l: x[l], x[8 + l],
 *     x[16 + l], x[24 + l] in that order), then lanes l and l + 4, then 0
 *     and 2, 1 and 3, then the two left. A NaN survives only where it is the
 *     second operand of every later step (x[27] does, x[0] does not).
 *   - d = amax / 127 stored as half (nearest even), id = 127 / amax, 0 when
 *     amax is 0.
 *   - q = x * id rounded to nearest even (vroundps), converted to int32
 *     (vcvtps2dq: a NaN or a value beyond int32 gives INT32_MIN) and narrowed
 *     with signed saturation (vpackssdw, vpacksswb).
 * So a NaN product stores -128, as do all 32 values of a block whose id
 * overflows to infinity (amax below 127 / FLT_MAX: d is then a half 0, and
 * the block adds 0 to a finite product). */
static float max_ps(float a, float b) { return a > b ? a : b; }

static int8_t q8_act_byte(float y)
{
    float t = rintf(y); /* the default rounding mode: nearest even */
    if (!(t >= -2147483648.0f && t < 2147483648.0f)) return -128;
    return (int8_t)(t > 127.0f ? 127.0f : t < -128.0f ? -128.0f : t);
}

static void quantize_act_scalar(const float *x, int64_t nb, uint8_t *out)
{
    for (int64_t blk = 0; blk < nb; blk++) {
        const float *v = x + blk * TG_Q8_BLOCK;
        uint8_t *o = out + blk * TG_Q8_BYTES;
        float lane[8], m4[4];
        for (int l = 0; l < 8; l++) {
            lane[l] = fabsf(v[l]);
            for (int r = 1; r < 4; r++) lane[l] = max_ps(lane[l], fabsf(v[8 * r + l]));
        }
        for (int l = 0; l < 4; l++) m4[l] = max_ps(lane[4 + l], lane[l]);
        float amax = max_ps(max_ps(m4[0], m4[2]), max_ps(m4[1], m4[3]));
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        uint16_t dh = tg__f16_from_f32(d);
        o[0] = (uint8_t)(dh & 0xff);
        o[1] = (uint8_t)(dh >> 8);
        for (int j = 0; j < TG_Q8_BLOCK; j++) o[2 + j] = (uint8_t)q8_act_byte(v[j] * id);
    }
}

/* ---- the ISA --------------------------------------------------------------------------------- */

static const char *const isa_names[TG_Q8_ISA_COUNT] = {"scalar", "avx2", "avx-vnni", "avx512-vnni"};

const char *tg__q8_isa_name(tg__q8_isa isa)
{
    return (unsigned)isa < TG_Q8_ISA_COUNT ? isa_names[isa] : "unknown";
}

#if Q8_X86
/* The paths this CPU runs, a bit per tg__q8_isa, from cpuid and the
 * registers the OS saves (xgetbv), as libgcc's __builtin_cpu_supports reads
 * them; by hand because clang's builtin knows neither "f16c" nor "avxvnni".
 * Every vector path is AVX2 code with FMA (the products' sums) and F16C (the
 * scales); AVX512_VNNI's 256-bit form needs AVX512VL (and BW, as the
 * instructions' masks do). */
static int cpu_paths(void)
{
    unsigned a, b, c, d, max7;
    if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid(1, &a, &b, &c, &d)) return 1;
    const bool fma = c >> 12 & 1, f16c = c >> 29 & 1, osxsave = c >> 27 & 1;
    if (!osxsave) return 1;
    uint32_t xcr0, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6; /* SSE, AVX (+ opmask, ZMM) state */
    __cpuid_count(7, 0, max7, b, c, d);
    const bool avx2 = ymm && fma && f16c && (b >> 5 & 1);
    const bool avx512vnni = avx2 && zmm && (b >> 16 & 1) && (b >> 30 & 1) && (b >> 31 & 1) && (c >> 11 & 1);
    bool avxvnni = false;
    if (max7 >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        avxvnni = avx2 && (a >> 4 & 1);
    }
    return 1 | avx2 << TG_Q8_AVX2 | avxvnni << TG_Q8_AVXVNNI | avx512vnni << TG_Q8_AVX512VNNI;
}
#endif

bool tg__q8_isa_available(tg__q8_isa isa)
{
    if ((unsigned)isa >= TG_Q8_ISA_COUNT) return false;
#if Q8_X86
    static atomic_int paths = -1; /* -1: not read yet (reading twice is harmless) */
    int p = atomic_load_explicit(&paths, memory_order_relaxed);
    if (p < 0) atomic_store_explicit(&paths, p = cpu_paths(), memory_order_relaxed);
    return p >> isa & 1;
#else
    return isa == TG_Q8_SCALAR;
#endif
}

static tg__q8_isa isa_best(void)
{
    for (int isa = TG_Q8_ISA_COUNT - 1; isa > TG_Q8_SCALAR; isa--)
        if (tg__q8_isa_available((tg__q8_isa)isa)) return (tg__q8_isa)isa;
    return TG_Q8_SCALAR;
}

static atomic_int isa_chosen = -1; /* -1: not chosen yet */

tg__q8_isa tg__q8_isa_now(void)
{
    int isa = atomic_load_explicit(&isa_chosen, memory_order_relaxed);
    if (isa < 0) {
        int unset = -1;
        isa = (int)isa_best();
        /* a tg__q8_isa_force of another thread meanwhile wins */
        if (!atomic_compare_exchange_strong(&isa_chosen, &unset, isa)) isa = unset;
    }
    return (tg__q8_isa)isa;
}

bool tg__q8_isa_force(int isa)
{
    if (isa == -1) {
        atomic_store(&isa_chosen, (int)isa_best());
        return true;
    }
    if (isa < 0 || isa >= TG_Q8_ISA_COUNT || !tg__q8_isa_available((tg__q8_isa)isa)) return false;
    atomic_store(&isa_chosen, isa);
    return true;
}

/* ---- the products ----------------------------------------------------------------------------- */

/* ggml_vec_dot_q8_0_q8_0's arithmetic (ggml-cpu/arch/x86/quants.c, its AVX2
 * path), which every path below repeats to the bit:
 *   - per block, the 32 products w[k] * x[k] summed into 8 int32 lanes,
 *     lane l holding k = 4l .. 4l + 3, formed as ggml forms them: |w| (an
 *     unsigned byte: 128 for -128) times x with w's sign (vpsignb);
 *   - the lanes converted to float and acc = fma(d_w * d_x, lanes, acc), one
 *     float accumulator a lane, blocks in order;
 *   - at the end ggml's hsum_float_8: ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3)).
 * vpsignb negates x in int8: x = -128 against a negative w gives -128, not
 * 128, so such a product has the wrong sign; every path here wraps so, as
 * llama.cpp does. Quantized activations hold -128 only where a NaN or an
 * overflowing scale put it (such a block adds a NaN, an infinity or 0);
 * weights may hold it, and their products are exact. vpmaddubsw never
 * saturates here (|w| <= 128 and x >= -128: a pair lies in [-32768, 32512]),
 * so vpmaddubsw + vpmaddwd and vpdpbusd give the same lanes. The scales are
 * widened with F16C in the vector paths and tg__f32_from_f16 in C: the same
 * floats (a signalling NaN scale comes out quiet in the first, which changes
 * only a NaN's payload). */

/* |w| * (x with w's sign, negated in int8: 128 wraps to -128), branch-free */
static inline int32_t product_scalar(uint8_t wb, uint8_t xb)
{
    int32_t w = (int8_t)wb, x = (int8_t)xb, sign = (w > 0) - (w < 0);
    int32_t sx = ((sign * x + 128) & 255) - 128;
    return (w < 0 ? -w : w) * sx;
}

static float hsum8(const float a[8])
{
    return ((a[4] + a[0]) + (a[6] + a[2])) + ((a[5] + a[1]) + (a[7] + a[3]));
}

static float half_at(const uint8_t *p) { return tg__f32_from_f16((uint16_t)(p[0] | p[1] << 8)); }

static float dot_scalar(const uint8_t *w, const uint8_t *x, int64_t nb)
{
    float acc[8] = {0};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pw = w + b * TG_Q8_BYTES, *px = x + b * TG_Q8_BYTES;
        const float d = half_at(pw) * half_at(px);
        int32_t p[TG_Q8_BLOCK]; /* a loop the compiler vectorises */
        for (int k = 0; k < TG_Q8_BLOCK; k++) p[k] = product_scalar(pw[2 + k], px[2 + k]);
        for (int l = 0; l < 8; l++)
            acc[l] = fmaf(d, (float)(p[4 * l] + p[4 * l + 1] + p[4 * l + 2] + p[4 * l + 3]), acc[l]);
    }
    return hsum8(acc);
}

#if Q8_X86

#define Q8_TARGET_AVX2 "avx2,fma,f16c"
#define Q8_TARGET_AVXVNNI "avxvnni,avx2,fma,f16c"
#define Q8_TARGET_AVX512VNNI "avx512vnni,avx512vl,avx512bw,avx2,fma,f16c"

/* The 8 lanes of one block: aw = |w| (unsigned), sx = x with w's sign. */
__attribute__((target(Q8_TARGET_AVX2), always_inline)) static inline __m256i lanes_avx2(__m256i aw, __m256i sx)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
}
__attribute__((target(Q8_TARGET_AVXVNNI), always_inline)) static inline __m256i lanes_avxvnni(__m256i aw, __m256i sx)
{
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw, sx);
}
__attribute__((target(Q8_TARGET_AVX512VNNI), always_inline)) static inline __m256i lanes_avx512vnni(__m256i aw,
                                                                                                      __m256i sx)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx);
}

__attribute__((target(Q8_TARGET_AVX2), always_inline)) static inline float hsum8_avx2(__m256 a)
{
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

/* a block's scale (x86 is little-endian, as the format) */
static inline uint16_t half16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

/* A tile: out[i][j] = dot(w row j, x row i) for mr rows of x and nr rows of
 * w (each at most 4), rows t->row bytes apart, t->nb blocks. The w rows'
 * blocks are read once for the mr rows; each (i, j) keeps its own
 * accumulator, so its bits are those of the 1 x 1 tile (tg__q8_0_dot).
 * t->pf, when not NULL, is the next tile's w rows, prefetched as this one
 * goes (nr * 34 bytes a block): at one row of x the product streams w from
 * memory, and rows of a KiB or two are too short for the hardware prefetcher
 * to follow each row's stream in time (without it, a product with one row of
 * x read w at half the speed of a plain read). NAME##_tile_ is inlined with
 * constant mr and nr (NAME##_tile's switch) so that the accumulators live in
 * registers. */
typedef struct {
    const uint8_t *w, *x, *pf;
    size_t row;
    int64_t nb;
} q8_tile;

#define Q8_TILE_KERNEL(NAME, TARGET)                                                                                  \
    __attribute__((target(TARGET), always_inline)) static inline void NAME##_tile_(const q8_tile *t, int mr, int nr, \
                                                                                     float (*out)[4])                 \
    {                                                                                                                  \
        const uint8_t *w = t->w, *x = t->x, *pf = t->pf;                                                              \
        const size_t row = t->row;                                                                                    \
        __m256 acc[4][4];                                                                                             \
        _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++)    \
            acc[i][j] = _mm256_setzero_ps();                                                                           \
        for (int64_t b = 0; b < t->nb; b++) {                                                                         \
            const size_t o = (size_t)b * TG_Q8_BYTES;                                                                 \
            if (pf) {                                                                                                  \
                const char *p = (const char *)pf + (size_t)b * nr * TG_Q8_BYTES;                                      \
                _mm_prefetch(p, _MM_HINT_T0);                                                                          \
                _mm_prefetch(p + 64, _MM_HINT_T0);                                                                     \
                if (nr * TG_Q8_BYTES > 128) _mm_prefetch(p + 128, _MM_HINT_T0);                                        \
            }                                                                                                          \
            /* the w rows: raw, |w|, and their scales widened together */                                            \
            __m256i wv[4], aw[4];                                                                                     \
            uint16_t hw[4] = {0};                                                                                      \
            _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++)                                                     \
            {                                                                                                          \
                wv[j] = _mm256_loadu_si256((const __m256i *)(w + j * row + o + 2));                                   \
                aw[j] = _mm256_sign_epi8(wv[j], wv[j]);                                                               \
                hw[j] = half16(w + j * row + o);                                                                      \
            }                                                                                                          \
            const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16((short)hw[0], (short)hw[1], (short)hw[2], (short)hw[3], 0, \
                                                          0, 0, 0));                                                   \
            _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++)                                                     \
            {                                                                                                          \
                const __m256i xv = _mm256_loadu_si256((const __m256i *)(x + i * row + o + 2));                        \
                float d[4]; /* d_w * d_x, each a float product */                                                     \
                _mm_storeu_ps(d, _mm_mul_ps(dw, _mm_set1_ps(_cvtsh_ss(half16(x + i * row + o)))));                   \
                _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++)                                                 \
                {                                                                                                      \
                    __m256 q = _mm256_cvtepi32_ps(lanes_##NAME(aw[j], _mm256_sign_epi8(xv, wv[j])));                  \
                    acc[i][j] = _mm256_fmadd_ps(_mm256_broadcast_ss(d + j), q, acc[i][j]);                            \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
        _Pragma("GCC unroll 4") for (int i = 0; i < mr; i++) _Pragma("GCC unroll 4") for (int j = 0; j < nr; j++)    \
            out[i][j] = hsum8_avx2(acc[i][j]);                                                                        \
    }                                                                                                                  \
    __attribute__((target(TARGET))) static void NAME##_tile(const q8_tile *t, int mr, int nr, float (*out)[4])       \
    {                                                                                                                  \
        switch (mr * 8 + nr) {                                                                                         \
        case 1 * 8 + 1: NAME##_tile_(t, 1, 1, out); break;                                                            \
        case 1 * 8 + 4: NAME##_tile_(t, 1, 4, out); break;                                                            \
        case 1 * 8 + 2: NAME##_tile_(t, 1, 2, out); break;                                                            \
        case 2 * 8 + 2: NAME##_tile_(t, 2, 2, out); break;                                                            \
        case 3 * 8 + 2: NAME##_tile_(t, 3, 2, out); break;                                                            \
        case 4 * 8 + 2: NAME##_tile_(t, 4, 2, out); break;                                                            \
        default: /* a row of w at a time */                                                                            \
            for (int j = 0; j < nr; j++)                                                                               \
                for (int i = 0; i < mr; i++) {                                                                         \
                    q8_tile one = {t->w + j * t->row, t->x + i * t->row, NULL, t->row, t->nb};                        \
                    float s[1][4];                                                                                     \
                    NAME##_tile_(&one, 1, 1, s);                                                                       \
                    out[i][j] = s[0][0];                                                                               \
                }                                                                                                      \
        }                                                                                                              \
    }

Q8_TILE_KERNEL(avx2, Q8_TARGET_AVX2)
Q8_TILE_KERNEL(avxvnni, Q8_TARGET_AVXVNNI)
Q8_TILE_KERNEL(avx512vnni, Q8_TARGET_AVX512VNNI)

/* quantize_row_q8_0's AVX2 code itself (see quantize_act_scalar, which
 * gives the same bytes) */
__attribute__((target(Q8_TARGET_AVX2))) static void quantize_act_avx2(const float *x, int64_t nb, uint8_t *out)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t blk = 0; blk < nb; blk++) {
        const float *v = x + blk * TG_Q8_BLOCK;
        uint8_t *o = out + blk * TG_Q8_BYTES;
        __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8), v2 = _mm256_loadu_ps(v + 16),
               v3 = _mm256_loadu_ps(v + 24);
        __m256 m = _mm256_andnot_ps(sign, v0);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v1));
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v2));
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v3));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        uint16_t dh = tg__f16_from_f32(amax / 127.0f);
        o[0] = (uint8_t)(dh & 0xff);
        o[1] = (uint8_t)(dh >> 8);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), _MM_FROUND_TO_NEAREST_INT));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), _MM_FROUND_TO_NEAREST_INT));
        __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(o + 2), _mm256_permutevar8x32_epi32(q, perm));
    }
}

#endif /* Q8_X86 */

void tg__q8_0_quantize_act(const float *x, int64_t n, uint8_t *out)
{
#if Q8_X86
    if (tg__q8_isa_now() != TG_Q8_SCALAR) {
        quantize_act_avx2(x, n / TG_Q8_BLOCK, out);
        return;
    }
#endif
    quantize_act_scalar(x, n / TG_Q8_BLOCK, out);
}

/* out[i][j] = dot(w row j, x row i), i < mr, j < nr, on isa */
static void tile(tg__q8_isa isa, const q8_tile *t, int mr, int nr, float (*out)[4])
{
    switch (isa) {
#if Q8_X86
    case TG_Q8_AVX2: avx2_tile(t, mr, nr, out); return;
    case TG_Q8_AVXVNNI: avxvnni_tile(t, mr, nr, out); return;
    case TG_Q8_AVX512VNNI: avx512vnni_tile(t, mr, nr, out); return;
#endif
    default:
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) out[i][j] = dot_scalar(t->w + j * t->row, t->x + i * t->row, t->nb);
    }
}

float tg__q8_0_dot(const uint8_t *w, const uint8_t *x, int64_t nb)
{
    float s[1][4];
    tile(tg__q8_isa_now(), &(q8_tile){.w = w, .x = x, .nb = nb}, 1, 1, s);
    return s[0][0];
}

/* Rows of w a task: at one row of a, 4 (a tile, four streams of w
 * interleaved); at more, groups of 16, taken in tiles of 2 against 4 rows of
 * a at a time, so that a's 4 rows stay in L1 over the group and the group in
 * L2 over all of a. */
#define Q8_GROUP_M1 4
#define Q8_GROUP 16
/* products (weights times rows of a) below which one thread does all */
#define Q8_PAR_MIN (1 << 18)

/* c's rows i0 .. i0 + mr, columns j0 .. j0 + nr from the tile's s */
static void put(float *c, int64_t ldc, int64_t i0, int64_t j0, int mr, int nr, float (*s)[4], float alpha, float beta)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float *cij = c + (i0 + i) * ldc + j0 + j;
            *cij = beta == 0.0f ? alpha * s[i][j] : alpha * s[i][j] + beta * *cij;
        }
}

int tg__q8_0_matmul(float *c, int64_t ldc, const float *a, int64_t lda, const uint8_t *w, int64_t M, int64_t N,
                    int64_t K, float alpha, float beta)
{
    if (M < 0 || N < 0 || K < 0 || K % TG_Q8_BLOCK) {
        tg_error("q8 matmul: bad sizes M %lld, N %lld, K %lld (K a multiple of 32)", (long long)M, (long long)N,
                 (long long)K);
        return -1;
    }
    if (M == 0 || N == 0) return 0;
    const int64_t nb = K / TG_Q8_BLOCK;
    const size_t row = (size_t)nb * TG_Q8_BYTES;
    uint8_t *xq = malloc(row * (size_t)M + 1);
    if (!xq) {
        tg_error("q8 matmul: out of memory quantizing a (%lld x %lld)", (long long)M, (long long)K);
        return -1;
    }
    for (int64_t i = 0; i < M; i++) tg__q8_0_quantize_act(a + i * lda, K, xq + (size_t)i * row);
    const tg__q8_isa isa = tg__q8_isa_now();
    const int64_t group = M == 1 ? Q8_GROUP_M1 : Q8_GROUP, tasks = (N + group - 1) / group;
    const int nr_max = M == 1 ? 4 : 2;
    const bool par = (double)M * (double)N * (double)K >= Q8_PAR_MIN;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (par)
#endif
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t j0 = t * group, jn = N - j0 < group ? N - j0 : group;
        for (int64_t i0 = 0; i0 < M; i0 += 4) {
            const int mr = M - i0 < 4 ? (int)(M - i0) : 4;
            for (int64_t j1 = 0; j1 < jn; j1 += nr_max) {
                const int nr = jn - j1 < nr_max ? (int)(jn - j1) : nr_max;
                const int64_t jp = j0 + group + j1; /* these rows in the next group: prefetched once */
                q8_tile tl = {.w = w + (size_t)(j0 + j1) * row,
                              .x = xq + (size_t)i0 * row,
                              .pf = i0 == 0 && jp + nr <= N ? w + (size_t)jp * row : NULL,
                              .row = row,
                              .nb = nb};
                float s[4][4];
                tile(isa, &tl, mr, nr, s);
                put(c, ldc, i0, j0 + j1, mr, nr, s, alpha, beta);
            }
        }
    }
    (void)par;
    free(xq);
    return 0;
}
