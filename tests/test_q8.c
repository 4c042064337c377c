/* The int8 (Q8_0) kernels (src/tensor/q8.c): the activations' quantizer
 * against a plain rintf reference (ties to even, zeros, huge and tiny rows)
 * and llama.cpp's bytes for NaN and infinity; the dot product of every ISA
 * this CPU has against the scalar path's bits and an exact integer-sum
 * reference (weight bytes of -128 too); the matrix product against the dot
 * of each element, to the bit, for several row counts, strides, alpha and
 * beta, on one and two OpenMP threads; widening, and the weights' quantizer
 * read back within half a step. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"
#include "q8.h"

/* ---- random numbers, bytes, ISAs ------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float rng_sym(void) { return (float)((double)(rng_next() >> 11) * 0x1p-52 - 1.0); }

static uint16_t half_bits(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t float_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static void put_half(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* The ISAs this CPU runs, printing a note for each other one. */
static int isas_here(tg__q8_isa *out)
{
    static bool noted;
    int n = 0;
    for (int isa = 0; isa < TG_Q8_ISA_COUNT; isa++) {
        if (tg__q8_isa_available((tg__q8_isa)isa))
            out[n++] = (tg__q8_isa)isa;
        else if (!noted)
            printf("note: this CPU has no %s: its path is not checked here\n", tg__q8_isa_name((tg__q8_isa)isa));
    }
    noted = true;
    return n;
}

static void force(tg__q8_isa isa)
{
    assert_true(tg__q8_isa_force((int)isa));
    assert_int_equal(tg__q8_isa_now(), isa);
}

/* ---- the activations' quantizer ------------------------------------------------------------------- */

/* A block as the brief of quantize_row_q8_0 says, for finite values: d =
 * max|x| / 127 as half, id = 127 / max|x| (0 when 0), q = rint(x * id). */
static void quantize_act_ref(const float *x, uint8_t *out)
{
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    put_half(out, tg__f16_from_f32(amax / 127.0f));
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < 32; j++) out[2 + j] = (uint8_t)(int8_t)rintf(x[j] * id);
}

#define ACT_BLOCKS 64

/* Blocks of finite values: random at many scales, ties, zeros. */
static void finite_rows(float *x)
{
    static const float scales[] = {1.0f, 1e-3f, 1e3f, 3e37f, 1e-30f, 5e-6f, 65504.0f, 1e5f};
    for (int b = 0; b < ACT_BLOCKS; b++) {
        float s = scales[b % 8];
        for (int j = 0; j < 32; j++) x[b * 32 + j] = s * rng_sym();
    }
    /* block 1: amax 127, so id is 1 and x * id is x: halves round to even */
    static const float ties[] = {127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, -126.5f, -127.0f};
    for (int j = 0; j < 32; j++) x[32 + j] = j < 11 ? ties[j] : (float)(j - 16) + 0.5f;
    /* block 2: zeros (and a negative zero) */
    for (int j = 0; j < 32; j++) x[64 + j] = 0.0f;
    x[64 + 7] = -0.0f;
    /* block 3: one value, the rest zero; block 4: all negative */
    for (int j = 0; j < 32; j++) x[96 + j] = j == 31 ? -3.25f : 0.0f;
    for (int j = 0; j < 32; j++) x[128 + j] = -fabsf(rng_sym()) - 1e-3f;
}

static void test_quantize_act(void **state)
{
    (void)state;
    static float x[ACT_BLOCKS * 32];
    static uint8_t got[ACT_BLOCKS * 34], want[ACT_BLOCKS * 34];
    finite_rows(x);
    for (int b = 0; b < ACT_BLOCKS; b++) quantize_act_ref(x + b * 32, want + b * 34);
    /* the ties, spelled out: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 0.5 -> 0, 126.5 -> 126 */
    static const int8_t ties_q[] = {127, 2, 4, -2, -4, 0, 0, 2, 126, -126, -127};
    assert_int_equal(half_bits(want + 34), 0x3c00); /* d = 1 */
    for (int j = 0; j < 11; j++) assert_int_equal((int8_t)want[34 + 2 + j], ties_q[j]);
    for (int j = 0; j < 34; j++) assert_int_equal(want[68 + j], 0); /* zeros: d 0, q 0 */
    assert_int_equal((int8_t)want[102 + 2 + 31], -127);

    tg__q8_isa isas[TG_Q8_ISA_COUNT];
    int n = isas_here(isas);
    for (int k = 0; k < n; k++) {
        force(isas[k]);
        memset(got, 0xa5, sizeof got);
        tg__q8_0_quantize_act(x, ACT_BLOCKS * 32, got);
        for (int i = 0; i < ACT_BLOCKS * 34; i++)
            if (got[i] != want[i])
                fail_msg("%s: block %d byte %d: %d, want %d", tg__q8_isa_name(isas[k]), i / 34, i % 34, got[i],
                         want[i]);
    }
    tg__q8_isa_force(-1);
}

/* NaN and infinity: the bytes llama.cpp's x86 build stores (q8.c). */
static void test_quantize_act_nonfinite(void **state)
{
    (void)state;
    float x[5 * 32];
    for (int j = 0; j < 5 * 32; j++) x[j] = 0.25f * (float)((j % 32) - 16); /* amax 4 (x[0]) */
    x[5] = INFINITY;        /* block 0: amax inf, d inf, id 0: finite values 0, the inf -128 */
    x[32 + 0] = NAN;        /* block 1: the first max's first operand: dropped, amax 3.75 */
    x[64 + 27] = NAN;       /* block 2: the last operand of every max: amax NaN, all -128 */
    for (int j = 0; j < 32; j++) x[96 + j] = j % 3 ? 1e-38f : 0.0f; /* block 3: 127 / amax overflows */
    x[128 + 9] = -INFINITY; /* block 4: as block 0 */
    tg__q8_isa isas[TG_Q8_ISA_COUNT];
    int n = isas_here(isas);
    for (int k = 0; k < n; k++) {
        force(isas[k]);
        uint8_t q[5 * 34];
        tg__q8_0_quantize_act(x, 5 * 32, q);
        const char *name = tg__q8_isa_name(isas[k]);
        for (int b = 0; b < 5; b += 4) {
            assert_int_equal(half_bits(q + b * 34), 0x7c00);
            for (int j = 0; j < 32; j++) {
                int want = (b == 0 && j == 5) || (b == 4 && j == 9) ? -128 : 0;
                if ((int8_t)q[b * 34 + 2 + j] != want)
                    fail_msg("%s: block %d value %d: %d", name, b, j, (int8_t)q[b * 34 + 2 + j]);
            }
        }
        assert_int_equal(half_bits(q + 34), tg__f16_from_f32(3.75f / 127.0f));
        assert_int_equal((int8_t)q[34 + 2], -128);
        for (int j = 1; j < 32; j++)
            assert_int_equal((int8_t)q[34 + 2 + j], (int)rintf(x[32 + j] * (127.0f / 3.75f)));
        assert_int_equal(half_bits(q + 68), 0x7e00);
        assert_int_equal(half_bits(q + 102), 0x0000);
        for (int j = 0; j < 32; j++) {
            if ((int8_t)q[68 + 2 + j] != -128) fail_msg("%s: NaN block value %d: %d", name, j, (int8_t)q[70 + j]);
            if ((int8_t)q[102 + 2 + j] != -128) fail_msg("%s: tiny block value %d: %d", name, j, (int8_t)q[104 + j]);
        }
    }
    tg__q8_isa_force(-1);
}

/* ---- widening ------------------------------------------------------------------------------------- */

static void test_dequantize(void **state)
{
    (void)state;
    enum { NB = 40 };
    uint8_t blocks[NB * 34];
    float out[NB * 32];
    for (int b = 0; b < NB; b++) {
        /* finite halves of every exponent, subnormals included (0x0001 .. 0x7bff) */
        put_half(blocks + b * 34, (uint16_t)(1 + rng_next() % 0x7bff) | (b % 2 ? 0x8000 : 0));
        for (int j = 0; j < 32; j++) blocks[b * 34 + 2 + j] = (uint8_t)rng_next();
    }
    blocks[2] = 0x80; /* -128 */
    tg__q8_0_dequantize(blocks, NB * 32, out);
    for (int b = 0; b < NB; b++) {
        double d = tg__f32_from_f16(half_bits(blocks + b * 34));
        for (int j = 0; j < 32; j++) {
            double want = (double)(int8_t)blocks[b * 34 + 2 + j] * d; /* exact: 8 bits times 11 */
            if ((double)out[b * 32 + j] != want)
                fail_msg("block %d value %d: %.9g, want %.9g", b, j, out[b * 32 + j], want);
        }
    }

    /* the weights' quantizer read back: within half a step of the float
     * scale, plus 127 times the scale's own rounding to half */
    float x[NB * 32];
    for (int b = 0; b < NB; b++) {
        float s = b % 4 == 0 ? 1e-4f : b % 4 == 1 ? 1.0f : b % 4 == 2 ? 300.0f : 0.02f;
        for (int j = 0; j < 32; j++) x[b * 32 + j] = s * rng_sym();
    }
    tg__q8_0_quantize(x, NB * 32, blocks);
    tg__q8_0_dequantize(blocks, NB * 32, out);
    for (int b = 0; b < NB; b++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        double df = amax / 127.0f, dh = tg__f32_from_f16(half_bits(blocks + b * 34));
        double bound = 0.5 * df * (1 + 1e-6) + 127 * fabs(df - dh) + 1e-30;
        assert_true(dh > 0);
        for (int j = 0; j < 32; j++) {
            double e = fabs((double)out[b * 32 + j] - x[b * 32 + j]);
            if (e > bound)
                fail_msg("block %d value %d: %.9g read back %.9g (bound %.3g)", b, j, x[b * 32 + j], out[b * 32 + j],
                         bound);
        }
    }
}

/* ---- the dot product ------------------------------------------------------------------------------ */

/* sum over blocks of d_w * d_x * (exact integer sum), in double; *scale: the
 * sum of |d_w d_x| * sum |products| (the size of the rounding errors) */
static double dot_exact(const uint8_t *w, const uint8_t *x, int nb, double *scale)
{
    double s = 0, m = 0;
    for (int b = 0; b < nb; b++) {
        double d = (double)tg__f32_from_f16(half_bits(w + b * 34)) * tg__f32_from_f16(half_bits(x + b * 34));
        int64_t sumi = 0, suma = 0;
        for (int k = 0; k < 32; k++) {
            int p = (int8_t)w[b * 34 + 2 + k] * (int8_t)x[b * 34 + 2 + k];
            sumi += p;
            suma += p < 0 ? -p : p;
        }
        s += d * (double)sumi;
        m += fabs(d) * (double)suma;
    }
    *scale = m;
    return s;
}

/* w: random bytes, -128 among them; x: a quantized random row */
static void random_operands(uint8_t *w, uint8_t *x, int nb)
{
    for (int b = 0; b < nb; b++) {
        put_half(w + b * 34, tg__f16_from_f32(0.001f + 0.05f * fabsf(rng_sym())));
        for (int k = 0; k < 32; k++) w[b * 34 + 2 + k] = (uint8_t)(k % 7 == 3 ? 0x80 : rng_next());
    }
    float *f = malloc(sizeof(float) * 32 * (size_t)nb);
    assert_non_null(f);
    for (int j = 0; j < 32 * nb; j++) f[j] = (j % 32 < 16 ? 3.0f : 0.01f) * rng_sym();
    tg__q8_0_quantize_act(f, 32 * nb, x);
    free(f);
}

static void test_dot(void **state)
{
    (void)state;
    tg__q8_isa isas[TG_Q8_ISA_COUNT];
    int n = isas_here(isas);
    static const int nbs[] = {1, 3, 33, 2, 8};
    for (int t = 0; t < 5; t++)
        for (int rep = 0; rep < 20; rep++) {
            int nb = nbs[t];
            uint8_t w[33 * 34], x[33 * 34];
            random_operands(w, x, nb);
            double scale, want = dot_exact(w, x, nb, &scale);
            force(TG_Q8_SCALAR);
            float ref = tg__q8_0_dot(w, x, nb);
            /* one rounding per fma and per product of scales, three in the sum of lanes */
            double tol = 2.0 * (nb + 4) * 0x1p-24 * scale;
            if (fabs(ref - want) > tol) fail_msg("nb %d: scalar %.9g, exact %.9g (tol %.3g)", nb, ref, want, tol);
            for (int k = 0; k < n; k++) {
                force(isas[k]);
                float got = tg__q8_0_dot(w, x, nb);
                if (float_bits(got) != float_bits(ref))
                    fail_msg("nb %d: %s %.9g (%08x), scalar %.9g (%08x)", nb, tg__q8_isa_name(isas[k]), got,
                             float_bits(got), ref, float_bits(ref));
            }
        }

    /* -128 weights: exact products; and llama.cpp's vpsignb against an
     * activation byte of -128 (never a quantized activation's), the same on
     * every path */
    uint8_t w[34], x[34];
    put_half(w, 0x3c00);
    put_half(x, 0x3c00);
    struct {
        int8_t w, x;
        float want;
    } cases[] = {{-128, 127, -128.0f * 127 * 32}, {-128, -127, 128.0f * 127 * 32}, {-128, 0, 0.0f},
                 {127, -128, -127.0f * 128 * 32}, {-3, -128, -3.0f * 128 * 32}, {-128, -128, -128.0f * 128 * 32}};
    for (int c = 0; c < 6; c++) {
        memset(w + 2, (uint8_t)cases[c].w, 32);
        memset(x + 2, (uint8_t)cases[c].x, 32);
        for (int k = 0; k < n; k++) {
            force(isas[k]);
            float got = tg__q8_0_dot(w, x, 1);
            if (got != cases[c].want)
                fail_msg("%s: w %d, x %d: %.9g, want %.9g", tg__q8_isa_name(isas[k]), cases[c].w, cases[c].x, got,
                         cases[c].want);
        }
    }
    /* arbitrary bytes on both sides: every path the scalar one's bits */
    for (int rep = 0; rep < 200; rep++) {
        uint8_t wr[3 * 34], xr[3 * 34];
        for (int i = 0; i < 3 * 34; i++) {
            wr[i] = (uint8_t)rng_next();
            xr[i] = (uint8_t)rng_next();
        }
        for (int b = 0; b < 3; b++) {
            put_half(wr + b * 34, tg__f16_from_f32(rng_sym()));
            put_half(xr + b * 34, tg__f16_from_f32(rng_sym()));
        }
        force(TG_Q8_SCALAR);
        float ref = tg__q8_0_dot(wr, xr, 3);
        for (int k = 0; k < n; k++) {
            force(isas[k]);
            float got = tg__q8_0_dot(wr, xr, 3);
            if (float_bits(got) != float_bits(ref))
                fail_msg("raw bytes: %s %.9g, scalar %.9g", tg__q8_isa_name(isas[k]), got, ref);
        }
    }
    tg__q8_isa_force(-1);
}

/* ---- the matrix product --------------------------------------------------------------------------- */

static void set_threads(int n)
{
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* c (M, N) with strides against the dot of each element */
static void check_matmul(int64_t M, int64_t N, int64_t K, float alpha, float beta)
{
    const int64_t lda = K + 5, ldc = N + 3, nb = K / 32;
    float *a = malloc(sizeof(float) * (size_t)(M * lda)), *c0 = malloc(sizeof(float) * (size_t)(M * ldc));
    float *c = malloc(sizeof(float) * (size_t)(M * ldc)), *c1 = malloc(sizeof(float) * (size_t)(M * ldc));
    uint8_t *w = malloc((size_t)(N * nb * 34) + 1), *xq = malloc((size_t)(M * nb * 34) + 1);
    float *want = malloc(sizeof(float) * (size_t)(M * N));
    assert_true(a && c0 && c && c1 && w && xq && want);
    for (int64_t i = 0; i < M * lda; i++) a[i] = 2.0f * rng_sym();
    for (int64_t i = 0; i < M * ldc; i++) c0[i] = beta == 0.0f ? NAN : rng_sym(); /* beta 0: never read */
    for (int64_t j = 0; j < N * nb; j++) {
        put_half(w + j * 34, tg__f16_from_f32(0.002f + 0.02f * fabsf(rng_sym())));
        for (int k = 0; k < 32; k++) w[j * 34 + 2 + k] = (uint8_t)(k == 5 ? 0x80 : rng_next());
    }
    tg__q8_isa isas[TG_Q8_ISA_COUNT];
    int n = isas_here(isas);
    for (int k = 0; k < n; k++) {
        force(isas[k]);
        for (int64_t i = 0; i < M; i++) tg__q8_0_quantize_act(a + i * lda, K, xq + i * nb * 34);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float s = tg__q8_0_dot(w + j * nb * 34, xq + i * nb * 34, nb);
                want[i * N + j] = beta == 0.0f ? alpha * s : alpha * s + beta * c0[i * ldc + j];
            }
        for (int threads = 1; threads <= 2; threads++) {
            set_threads(threads);
            memcpy(c, c0, sizeof(float) * (size_t)(M * ldc));
            assert_int_equal(tg__q8_0_matmul(c, ldc, a, lda, w, M, N, K, alpha, beta), 0);
            for (int64_t i = 0; i < M; i++) {
                for (int64_t j = 0; j < N; j++)
                    if (float_bits(c[i * ldc + j]) != float_bits(want[i * N + j]))
                        fail_msg("%s, %d thread(s), M %lld N %lld K %lld: c[%lld][%lld] = %.9g, dot %.9g",
                                 tg__q8_isa_name(isas[k]), threads, (long long)M, (long long)N, (long long)K,
                                 (long long)i, (long long)j, c[i * ldc + j], want[i * N + j]);
                for (int64_t j = N; j < ldc; j++) /* the padding untouched */
                    assert_int_equal(float_bits(c[i * ldc + j]), float_bits(c0[i * ldc + j]));
            }
            if (threads == 1) memcpy(c1, c, sizeof(float) * (size_t)(M * ldc));
            else assert_memory_equal(c, c1, sizeof(float) * (size_t)(M * ldc));
        }
    }
    set_threads(2);
    tg__q8_isa_force(-1);
    free(a);
    free(c0);
    free(c);
    free(c1);
    free(w);
    free(xq);
    free(want);
}

static void test_matmul(void **state)
{
    (void)state;
    static const int64_t Ms[] = {1, 2, 5, 17};
    for (int m = 0; m < 4; m++) {
        check_matmul(Ms[m], 37, 96, 1.0f, 0.0f);
        check_matmul(Ms[m], 19, 32, 0.5f, 1.0f);
        check_matmul(Ms[m], 9, 64, -2.0f, 0.25f);
        /* past the size at which the rows of w go to the threads */
        check_matmul(Ms[m], 257, 1280, 1.0f, 0.0f);
    }
}

static void test_matmul_edges(void **state)
{
    (void)state;
    float c[6] = {1, 2, 3, 4, 5, 6}, a[2] = {0};
    uint8_t w[1] = {0};
    /* K = 0: dots of nothing are 0 */
    assert_int_equal(tg__q8_0_matmul(c, 3, a, 0, w, 2, 3, 0, 1.0f, 0.5f), 0);
    for (int i = 0; i < 6; i++) assert_true(c[i] == 0.5f * (float)(i + 1));
    assert_int_equal(tg__q8_0_matmul(c, 3, a, 0, w, 2, 3, 0, 1.0f, 0.0f), 0);
    for (int i = 0; i < 6; i++) assert_true(c[i] == 0.0f);
    /* bad sizes: one line, nothing written */
    c[0] = 7.0f;
    int st = tg__q8_0_matmul(c, 3, a, 33, w, 1, 1, 33, 1.0f, 0.0f);
    tu_assert_error_(st != 0, __FILE__, __LINE__, "q8 matmul", "K 33", "multiple of 32", (const char *)NULL);
    assert_null(strchr(tg_last_error(), '\n'));
    assert_true(c[0] == 7.0f);
}

static void test_isa(void **state)
{
    (void)state;
    assert_string_equal(tg__q8_isa_name(TG_Q8_SCALAR), "scalar");
    assert_string_equal(tg__q8_isa_name(TG_Q8_AVX2), "avx2");
    assert_string_equal(tg__q8_isa_name(TG_Q8_AVXVNNI), "avx-vnni");
    assert_string_equal(tg__q8_isa_name(TG_Q8_AVX512VNNI), "avx512-vnni");
    assert_true(tg__q8_isa_available(TG_Q8_SCALAR));
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    /* q8.c's reading of cpuid against libgcc's */
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    assert_int_equal(tg__q8_isa_available(TG_Q8_AVX2), avx2);
    assert_int_equal(tg__q8_isa_available(TG_Q8_AVXVNNI), avx2 && __builtin_cpu_supports("avxvnni"));
    assert_int_equal(tg__q8_isa_available(TG_Q8_AVX512VNNI), avx2 && __builtin_cpu_supports("avx512vnni") &&
                                                                 __builtin_cpu_supports("avx512vl") &&
                                                                 __builtin_cpu_supports("avx512bw"));
#endif
    assert_false(tg__q8_isa_available(TG_Q8_ISA_COUNT));
    assert_true(tg__q8_isa_force(-1));
    tg__q8_isa best = tg__q8_isa_now();
    for (int isa = best + 1; isa < TG_Q8_ISA_COUNT; isa++) assert_false(tg__q8_isa_available((tg__q8_isa)isa));
    assert_true(tg__q8_isa_available(best));
    printf("the int8 products run on %s\n", tg__q8_isa_name(best));
    for (int isa = 0; isa < TG_Q8_ISA_COUNT; isa++) {
        bool ok = tg__q8_isa_force(isa);
        assert_int_equal(ok, tg__q8_isa_available((tg__q8_isa)isa));
        if (ok) assert_int_equal(tg__q8_isa_now(), isa);
    }
    /* refused: the ISA stays */
    force(TG_Q8_SCALAR);
    assert_false(tg__q8_isa_force(TG_Q8_ISA_COUNT));
    assert_false(tg__q8_isa_force(-2));
    assert_int_equal(tg__q8_isa_now(), TG_Q8_SCALAR);
    assert_true(tg__q8_isa_force(-1));
    assert_int_equal(tg__q8_isa_now(), best);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa),        cmocka_unit_test(test_quantize_act),
        cmocka_unit_test(test_quantize_act_nonfinite), cmocka_unit_test(test_dequantize),
        cmocka_unit_test(test_dot),        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
