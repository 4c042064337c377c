/* Generators: PyTorch's CPU generator (at::mt19937 + CPUGeneratorImpl) and the
 * CPU kernels of rand/uniform_/randn/normal_, reproduced bit for bit.
 *
 * PyTorch runs these kernels from its AVX2 dispatch build, compiled by GCC with
 * -mfma and floating-point contraction on, so several a*b+c expressions there
 * are fused multiply-adds. Every place below that calls fma()/fmaf() does so
 * because the PyTorch binary does; every other product and sum is deliberately
 * a separate statement so that no compiler contracts it (the build uses ISO
 * C11, where GCC does not contract, and clang only contracts within one
 * expression). Checked against torch 1.13 on 10^5-element draws of each kernel.
 */
#include "internal.h"
#include "q8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MT_N 624
#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UMASK 0x80000000u
#define MT_LMASK 0x7fffffffu

/* PyTorch's default_rng_seed_val: the seed of a generator nobody reseeded. */
#define TG_DEFAULT_SEED UINT64_C(67280421310721)

#define TG_PI 3.14159265358979323846

struct tg_generator {
    uint32_t state[MT_N];
    int left;
    uint32_t next;
    /* Box-Muller yields two values; PyTorch's scalar normal path keeps the
     * second for the next call (CPUGeneratorImpl::next_double_normal_sample_). */
    bool has_next_normal;
    double next_normal;
    /* Not part of the stream: how dropout masks are drawn (tensor.h). Kept
     * across reseeding and state loads. */
    tg_dropout_stream dropout_stream;
    /* Not part of the stream either: the part of every dropout mask this
     * generator keeps (tg_generator_set_batch_slice); count 0 or 1 = all. */
    int64_t slice_index, slice_count;
};

void tg_generator_seed(tg_generator *g, uint64_t seed)
{
    if (!g) return;
    /* at::mt19937 keeps the full 64-bit seed for reporting but the state only
     * sees its low 32 bits, so seeds 2^32+7 and 7 give the same stream. */
    g->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < MT_N; j++)
        g->state[j] = 1812433253u * (g->state[j - 1] ^ (g->state[j - 1] >> 30)) + j;
    g->left = 1;
    g->next = 0;
    g->has_next_normal = false;
    g->next_normal = 0.0;
}

tg_generator *tg_generator_new(uint64_t seed)
{
    tg_generator *g = calloc(1, sizeof *g);
    if (!g) return tg_error("generator_new: out of memory");
    tg_generator_seed(g, seed);
    return g;
}

void tg_generator_free(tg_generator *g) { free(g); }

/* Process-wide, like torch's default CPU generator, but without its mutex:
 * draws from several threads at once need generators of their own. */
static tg_generator default_gen;
static bool default_gen_ready;

tg_generator *tg_default_generator(void)
{
    if (!default_gen_ready) {
        tg_generator_seed(&default_gen, TG_DEFAULT_SEED);
        default_gen_ready = true;
    }
    return &default_gen;
}

void tg_manual_seed(uint64_t seed)
{
    tg_generator_seed(&default_gen, seed);
    default_gen_ready = true;
}

static uint32_t twist(uint32_t u, uint32_t v)
{
    return (((u & MT_UMASK) | (v & MT_LMASK)) >> 1) ^ ((v & 1u) ? MT_MATRIX_A : 0u);
}

static void next_state(tg_generator *g)
{
    uint32_t *p = g->state;
    g->left = MT_N;
    g->next = 0;
    for (int j = MT_N - MT_M + 1; --j; p++) *p = p[MT_M] ^ twist(p[0], p[1]);
    for (int j = MT_M; --j; p++) *p = p[MT_M - MT_N] ^ twist(p[0], p[1]);
    *p = p[MT_M - MT_N] ^ twist(p[0], g->state[0]);
}

static inline uint32_t temper(uint32_t y)
{
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint32_t tg_generator_random(tg_generator *g)
{
    if (!g) g = tg_default_generator();
    if (--g->left == 0) next_state(g);
    return temper(g->state[g->next++]);
}

uint64_t tg_generator_random64(tg_generator *g)
{
    if (!g) g = tg_default_generator();
    /* The first draw is the high word (detail::make64BitsFrom32Bits). */
    uint64_t hi = tg_generator_random(g);
    uint64_t lo = tg_generator_random(g);
    return hi << 32 | lo;
}

/* ---- state --------------------------------------------------------------------- */

/* Layout (little-endian): "TGMT", 624 state words, left, next (u32 each),
 * has_next_normal (u32, 0 or 1), next_normal (IEEE double bits, u64). */
#define STATE_MAGIC "TGMT"

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int tg_generator_get_state(const tg_generator *g, uint8_t *out, size_t size)
{
    if (!g || !out) return tg_error_status(TG_EINVAL, "generator_get_state: NULL argument");
    if (size < TG_GENERATOR_STATE_BYTES)
        return tg_error_status(TG_EINVAL, "generator_get_state: buffer of %zu bytes, need %d", size,
                               TG_GENERATOR_STATE_BYTES);
    memcpy(out, STATE_MAGIC, 4);
    uint8_t *p = out + 4;
    for (int i = 0; i < MT_N; i++, p += 4) put_u32(p, g->state[i]);
    put_u32(p, (uint32_t)g->left), p += 4;
    put_u32(p, g->next), p += 4;
    put_u32(p, g->has_next_normal), p += 4;
    uint64_t bits;
    memcpy(&bits, &g->next_normal, 8);
    put_u32(p, (uint32_t)bits);
    put_u32(p + 4, (uint32_t)(bits >> 32));
    return TG_OK;
}

int tg_generator_set_state(tg_generator *g, const uint8_t *state, size_t size)
{
    if (!g || !state) return tg_error_status(TG_EINVAL, "generator_set_state: NULL argument");
    if (size != TG_GENERATOR_STATE_BYTES)
        return tg_error_status(TG_EINVAL, "generator_set_state: expected %d bytes of state, got %zu",
                               TG_GENERATOR_STATE_BYTES, size);
    if (memcmp(state, STATE_MAGIC, 4) != 0)
        return tg_error_status(TG_EINVAL, "generator_set_state: not a generator state (bad magic)");
    const uint8_t *p = state + 4 + 4 * MT_N;
    uint32_t left = get_u32(p), next = get_u32(p + 4), has = get_u32(p + 8);
    /* next + left = MT_N + 1 always holds between draws (seed: left 1, next 0
     * is the one exception, before the first twist) */
    bool fresh = left == 1 && next == 0;
    if (left < 1 || left > MT_N || (!fresh && next + left != MT_N + 1) || has > 1)
        return tg_error_status(TG_EINVAL, "generator_set_state: corrupt state (left %u, next %u, normal flag %u)", left,
                               next, has);
    uint64_t bits = (uint64_t)get_u32(p + 12) | (uint64_t)get_u32(p + 16) << 32;
    for (int i = 0; i < MT_N; i++) g->state[i] = get_u32(state + 4 + 4 * i);
    g->left = (int)left;
    g->next = next;
    g->has_next_normal = has != 0;
    memcpy(&g->next_normal, &bits, 8);
    return TG_OK;
}

int tg_generator_set_dropout_stream(tg_generator *g, tg_dropout_stream s)
{
    if (s != TG_DROPOUT_TORCH && s != TG_DROPOUT_COUNTER)
        return tg_error_status(TG_EINVAL, "generator_set_dropout_stream: unknown stream %d", (int)s);
    if (!g) g = tg_default_generator();
    g->dropout_stream = s;
    return TG_OK;
}

tg_dropout_stream tg_generator_dropout_stream(const tg_generator *g)
{
    return g ? g->dropout_stream : tg_default_generator()->dropout_stream;
}

/* ---- uniform: transformation::uniform_real ------------------------------------ */

static float uniform_f32(tg_generator *g, float from, float range)
{
    float x = (float)(tg_generator_random(g) & 0xffffffu) * (1.0f / 16777216.0f);
    return fmaf(x, range, from);
}

static double uniform_f64(tg_generator *g, double from, double range)
{
    uint64_t bits = tg_generator_random64(g) & ((UINT64_C(1) << 53) - 1);
    double x = (double)bits * (1.0 / 9007199254740992.0);
    return fma(x, range, from);
}

static tg_generator *pick(tg_generator *g) { return g ? g : tg_default_generator(); }

/* bf16: uniform_ and normal_ draw a bfloat16 tensor's values as they draw
 * a float32 tensor's and round each (x.to(torch.bfloat16) of that tensor),
 * through a buffer of this many floats: no float32 copy of a weight. A
 * q8_0 tensor's values are drawn the same way and quantized a buffer at a
 * time (tg_to_dtype of the float32 tensor: whole blocks of 32). */
enum { BF16_CHUNK = 4096 /* a multiple of normal's 16 and of a q8_0 block's 32 */ };

/* values [i0, i0 + m) of a bf16 or q8_0 x from buf (i0 and, but for
 * the last, m multiples of 32) */
static void store_chunk(tg_tensor *x, int64_t i0, const float *buf, int64_t m)
{
    if (x->dtype == TG_Q8)
        tg__q8_0_quantize(buf, m, (uint8_t *)x->data + (size_t)((x->offset + i0) / TG_Q8_BLOCK) * TG_Q8_BYTES);
    else
        tg__bf16_from_f32((uint16_t *)tg_data_ptr(x) + i0, buf, m);
}

static int check_fill_target(const char *op, const tg_tensor *x, bool bf16)
{
    if (!x) return tg_error_status(TG_EINVAL, "%s: NULL tensor", op);
    if (!tg__is_float(x->dtype) && !(bf16 && (x->dtype == TG_BF16 || x->dtype == TG_Q8)))
        return tg_error_status(TG_EINVAL, "%s: expected a float32 or float64%s tensor, got %s", op,
                               bf16 ? " (or bfloat16, q8_0)" : "", tg_dtype_name(x->dtype));
    if (!tg_is_contiguous(x))
        return tg_error_status(TG_EINVAL, "%s: tensor must be contiguous", op);
    return TG_OK;
}

int tg_uniform_(tg_tensor *x, double from, double to, tg_generator *g)
{
    int st = check_fill_target("uniform_", x, true);
    if (st != TG_OK) return st;
    if (!(from <= to) || !isfinite(from) || !isfinite(to))
        return tg_error_status(TG_EINVAL, "uniform_: expects a finite range from <= to, got [%g, %g)",
                               from, to);
    tg__bump(x);
    g = pick(g);
    int64_t n = tg_numel(x);
    if (x->dtype != TG_F64) {
        /* PyTorch casts the bounds to the tensor's type before subtracting. */
        float f = (float)from, t = (float)to;
        float range = t - f;
        if (!isfinite(range))
            return tg_error_status(TG_EINVAL, "uniform_: range [%g, %g) overflows float32", from, to);
        if (x->dtype == TG_F32) {
            float *d = tg_data_ptr(x);
            for (int64_t i = 0; i < n; i++) d[i] = uniform_f32(g, f, range);
            return TG_OK;
        }
        float buf[BF16_CHUNK];
        for (int64_t i0 = 0; i0 < n; i0 += BF16_CHUNK) {
            int64_t m = n - i0 < BF16_CHUNK ? n - i0 : BF16_CHUNK;
            for (int64_t j = 0; j < m; j++) buf[j] = uniform_f32(g, f, range);
            store_chunk(x, i0, buf, m);
        }
    } else {
        double range = to - from;
        if (!isfinite(range))
            return tg_error_status(TG_EINVAL, "uniform_: range [%g, %g) overflows float64", from, to);
        double *d = tg_data_ptr(x);
        for (int64_t i = 0; i < n; i++) d[i] = uniform_f64(g, from, range);
    }
    return TG_OK;
}

/* ---- normal: scalar path (at::normal_distribution<double>) ---------------------- */

static double normal_scalar(tg_generator *g, double mean, double std)
{
    double ret;
    if (g->has_next_normal) {
        g->has_next_normal = false;
        ret = g->next_normal;
    } else {
        double u1 = uniform_f64(g, 0.0, 1.0);
        double u2 = uniform_f64(g, 0.0, 1.0);
        double r = sqrt(-2.0 * log(1.0 - u2));
        double theta = 2.0 * TG_PI * u1;
        g->next_normal = r * sin(theta);
        g->has_next_normal = true;
        ret = r * cos(theta);
    }
    return fma(ret, std, mean);
}

/* ---- normal, float32, >= 16 elements: normal_fill_16_AVX2 in scalar form ------- */

/* Bit casts between float and its IEEE representation. */
static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* log256_ps of avx_mathfun.h (Cephes logf), one lane. Only called with
 * x in (0, 1]. */
static float cephes_logf(float x)
{
    if (!(x >= 1.17549435e-38f)) x = 1.17549435e-38f; /* _mm256_max_ps with min_norm_pos */
    uint32_t b = f2u(x);
    int32_t exponent = (int32_t)(b >> 23) - 0x7f;
    x = u2f((b & ~0x7f800000u) | f2u(0.5f));
    float e = (float)exponent;
    e = e + 1.0f;
    bool below = x < 0.707106781186547524f;
    float tmp = below ? x : 0.0f;
    x = x - 1.0f;
    e = e - (below ? 1.0f : 0.0f);
    x = x + tmp;
    float z = x * x;
    float y = 7.0376836292E-2f;
    y = fmaf(y, x, -1.1514610310E-1f);
    y = fmaf(y, x, 1.1676998740E-1f);
    y = fmaf(y, x, -1.2420140846E-1f);
    y = fmaf(y, x, 1.4249322787E-1f);
    y = fmaf(y, x, -1.6668057665E-1f);
    y = fmaf(y, x, 2.0000714765E-1f);
    y = fmaf(y, x, -2.4999993993E-1f);
    y = fmaf(y, x, 3.3333331174E-1f);
    y = y * x;
    float eq1 = e * -2.12194440e-4f;
    y = fmaf(y, z, eq1);
    float half_z = z * 0.5f;
    y = y - half_z;
    x = x + y;
    float eq2 = e * 0.693359375f;
    return x + eq2;
}

/* sincos256_ps of avx_mathfun.h (Cephes sinf/cosf), one lane. */
static void cephes_sincosf(float x, float *s, float *c)
{
    uint32_t sign_sin = f2u(x) & 0x80000000u;
    x = u2f(f2u(x) & 0x7fffffffu);
    float y = x * 1.27323954473516f; /* 4 / pi */
    int32_t j = (int32_t)y;
    j = (j + 1) & ~1;
    y = (float)j;
    uint32_t swap_sin = (uint32_t)(j & 4) << 29;
    bool first_poly = (j & 2) == 0;
    uint32_t sign_cos = (uint32_t)(~(j - 2) & 4) << 29;
    sign_sin ^= swap_sin;

    /* Extended precision modular arithmetic: x - y * pi/4 in three parts. */
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);

    float z = x * x;
    float yc = 2.443315711809948E-005f;
    yc = fmaf(yc, z, -1.388731625493765E-003f);
    yc = fmaf(yc, z, 4.166664568298827E-002f);
    yc = yc * z;
    float half_z = z * 0.5f;
    yc = fmaf(yc, z, -half_z);
    yc = yc + 1.0f;

    float ys = -1.9515295891E-4f;
    ys = fmaf(ys, z, 8.3321608736E-3f);
    ys = fmaf(ys, z, -1.6666654611E-1f);
    ys = ys * z;
    ys = fmaf(ys, x, x);

    /* The vector code picks lanes by masking and subtracting; adding the
     * zero half keeps the same signed zeros. */
    float sin2 = first_poly ? ys : 0.0f, sin1 = first_poly ? 0.0f : yc;
    ys = ys - sin2;
    yc = yc - sin1;
    float rs = sin1 + sin2, rc = yc + ys;
    *s = u2f(f2u(rs) ^ sign_sin);
    *c = u2f(f2u(rc) ^ sign_cos);
}

static void normal_fill_16_f32(float *d, float mean, float std)
{
    const float two_pi = (float)(2.0 * TG_PI);
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j];
        float u2 = d[j + 8];
        float l = cephes_logf(u1);
        float radius = sqrtf(-2.0f * l);
        float theta = two_pi * u2;
        float s, c;
        cephes_sincosf(theta, &s, &c);
        float n1 = radius * c, n2 = radius * s;
        d[j] = fmaf(n1, std, mean);
        d[j + 8] = fmaf(n2, std, mean);
    }
}

/* normal_fill<double>: libm's log/cos/sin, the sum fused as PyTorch's build does. */
static void normal_fill_16_f64(double *d, double mean, double std)
{
    for (int j = 0; j < 8; j++) {
        double u1 = 1.0 - d[j];
        double u2 = d[j + 8];
        double radius = sqrt(-2.0 * log(u1));
        double theta = 2.0 * TG_PI * u2;
        double n1 = radius * cos(theta), n2 = radius * sin(theta);
        d[j] = fma(n1, std, mean);
        d[j + 8] = fma(n2, std, mean);
    }
}

/* normal_ of a float32 tensor as below, each value rounded to bf16 as it
 * is made: the uniforms of a chunk, its whole blocks of 16 transformed; the
 * values past the last whole block, kept as uniforms in the first pass, are
 * overwritten by the ragged tail's fresh 16, as in float32. */
static int normal_bf16(tg_tensor *x, double mean, double std, tg_generator *g)
{
    int64_t n = tg_numel(x), whole = n / 16 * 16;
    float m = (float)mean, s = (float)std, buf[BF16_CHUNK];
    if (n < 16) { /* bf16 only: a q8_0 tensor has whole blocks of 32 */
        uint16_t *o = tg_data_ptr(x);
        for (int64_t i = 0; i < n; i++) o[i] = tg__bf16_bits((float)normal_scalar(g, mean, std));
        return TG_OK;
    }
    for (int64_t i0 = 0; i0 < n; i0 += BF16_CHUNK) {
        int64_t c = n - i0 < BF16_CHUNK ? n - i0 : BF16_CHUNK;
        for (int64_t j = 0; j < c; j++) buf[j] = uniform_f32(g, 0.0f, 1.0f);
        for (int64_t j = 0; j + 16 <= c && i0 + j + 16 <= whole; j += 16) normal_fill_16_f32(buf + j, m, s);
        store_chunk(x, i0, buf, c);
    }
    if (n % 16 != 0) {
        for (int i = 0; i < 16; i++) buf[i] = uniform_f32(g, 0.0f, 1.0f);
        normal_fill_16_f32(buf, m, s);
        store_chunk(x, n - 16, buf, 16);
    }
    return TG_OK;
}

int tg_normal_(tg_tensor *x, double mean, double std, tg_generator *g)
{
    int st = check_fill_target("normal_", x, true);
    if (st != TG_OK) return st;
    if (!(std >= 0.0) || !isfinite(std) || !isfinite(mean))
        return tg_error_status(TG_EINVAL, "normal_: expects finite mean and std >= 0, got mean %g std %g",
                               mean, std);
    tg__bump(x);
    g = pick(g);
    int64_t n = tg_numel(x);
    if (x->dtype == TG_BF16 || x->dtype == TG_Q8) return normal_bf16(x, mean, std, g);
    if (n < 16) {
        /* Below 16 elements PyTorch draws one value at a time in double. */
        if (x->dtype == TG_F32) {
            float *d = tg_data_ptr(x);
            for (int64_t i = 0; i < n; i++) d[i] = (float)normal_scalar(g, mean, std);
        } else {
            double *d = tg_data_ptr(x);
            for (int64_t i = 0; i < n; i++) d[i] = normal_scalar(g, mean, std);
        }
        return TG_OK;
    }
    /* Uniforms for every element first, transformed 16 at a time; a ragged
     * tail redraws 16 fresh uniforms for the last 16 elements. */
    if (x->dtype == TG_F32) {
        float *d = tg_data_ptr(x);
        float m = (float)mean, s = (float)std;
        for (int64_t i = 0; i < n; i++) d[i] = uniform_f32(g, 0.0f, 1.0f);
        for (int64_t i = 0; i + 16 <= n; i += 16) normal_fill_16_f32(d + i, m, s);
        if (n % 16 != 0) {
            float *tail = d + n - 16;
            for (int i = 0; i < 16; i++) tail[i] = uniform_f32(g, 0.0f, 1.0f);
            normal_fill_16_f32(tail, m, s);
        }
    } else {
        double *d = tg_data_ptr(x);
        for (int64_t i = 0; i < n; i++) d[i] = uniform_f64(g, 0.0, 1.0);
        for (int64_t i = 0; i + 16 <= n; i += 16) normal_fill_16_f64(d + i, mean, std);
        if (n % 16 != 0) {
            double *tail = d + n - 16;
            for (int i = 0; i < 16; i++) tail[i] = uniform_f64(g, 0.0, 1.0);
            normal_fill_16_f64(tail, mean, std);
        }
    }
    return TG_OK;
}

static tg_tensor *random_tensor(const char *op, tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape,
                                tg_generator *g, bool normal)
{
    if (!tg__is_float(dt))
        return tg_error("%s: expected dtype float32 or float64, got %s", op, tg_dtype_name(dt));
    tg_tensor *t = tg_empty(tp, dt, ndim, shape);
    if (!t) return NULL;
    int st = normal ? tg_normal_(t, 0.0, 1.0, g) : tg_uniform_(t, 0.0, 1.0, g);
    if (st != TG_OK) return NULL;
    t->storage->version = 0; /* made, not written */
    return t;
}

tg_tensor *tg_rand(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape, tg_generator *g)
{
    return random_tensor("rand", tp, dt, ndim, shape, g, false);
}

tg_tensor *tg_randn(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape, tg_generator *g)
{
    return random_tensor("randn", tp, dt, ndim, shape, g, true);
}

/* ---- bernoulli_ and multinomial --------------------------------------------------------- */

/* x.bernoulli_(p): templates::cpu::bernoulli_kernel, serially, one float64
 * uniform (random64, 53 bits) per element: 1 when u < p. */
int tg_bernoulli_(tg_tensor *x, double p, tg_generator *g)
{
    int st = check_fill_target("bernoulli_", x, false);
    if (st != TG_OK) return st;
    if (!(p >= 0 && p <= 1)) return tg_error_status(TG_EINVAL, "bernoulli_: p must be in [0, 1], got %g", p);
    tg__bump(x);
    g = pick(g);
    int64_t n = tg_numel(x);
    if (x->dtype == TG_F32) {
        float *d = tg_data_ptr(x);
        for (int64_t i = 0; i < n; i++) d[i] = uniform_f64(g, 0.0, 1.0) < p ? 1.0f : 0.0f;
    } else {
        double *d = tg_data_ptr(x);
        for (int64_t i = 0; i < n; i++) d[i] = uniform_f64(g, 0.0, 1.0) < p ? 1.0 : 0.0;
    }
    return TG_OK;
}

/* bernoulli_(q) into a bit mask: bit i (bits[i / 8] >> i % 8) is 1 when the
 * float64 uniform of draw i is < q, drawn exactly as tg_bernoulli_ draws;
 * with a batch slice, the draws of the other parts are skipped around it. */
void tg__bernoulli_bits(tg_generator *g, double q, uint8_t *bits, int64_t n)
{
    g = pick(g);
    int64_t before, after;
    tg__mask_slice(g, n, &before, &after);
    tg__skip_uniform(g, before);
    memset(bits, 0, (size_t)((n + 7) / 8));
    /* u = b 2^-53 < q (b the draw's low 53 bits) <=> b < ceil(q 2^53): the
     * same test in integers, on the state's untwisted words in blocks the
     * compiler vectorises (tempering, combining, comparing) */
    double qs = ceil(q * 9007199254740992.0);
    uint64_t thresh = qs <= 0 ? 0 : qs >= 9007199254740992.0 ? UINT64_C(1) << 53 : (uint64_t)qs;
    enum { BLK = 256 };
    uint8_t keep[BLK];
    int64_t i = 0;
    while (i < n) {
        int64_t avail = ((int64_t)g->left - 1) / 2; /* whole draws before the next twist */
        if (avail == 0) { /* a draw that starts or straddles a twist */
            if (uniform_f64(g, 0.0, 1.0) < q) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
            i++;
            continue;
        }
        int64_t k = avail < n - i ? avail : n - i;
        if (k > BLK) k = BLK;
        const uint32_t *w = g->state + g->next;
        for (int64_t j = 0; j < k; j++) {
            uint64_t hi = temper(w[2 * j]), lo = temper(w[2 * j + 1]);
            keep[j] = ((hi << 32 | lo) & ((UINT64_C(1) << 53) - 1)) < thresh;
        }
        g->next += (uint32_t)(2 * k);
        g->left -= (int)(2 * k);
        for (int64_t j = 0; j < k; j++) bits[(i + j) >> 3] |= (uint8_t)(keep[j] << ((i + j) & 7));
        i += k;
    }
    tg__skip_uniform(g, after);
}

int tg_generator_set_batch_slice(tg_generator *g, int64_t index, int64_t count)
{
    if (count < 1 || index < 0 || index >= count)
        return tg_error_status(TG_EINVAL, "generator_set_batch_slice: part %lld of %lld does not exist", (long long)index,
                               (long long)count);
    g = pick(g);
    g->slice_index = index;
    g->slice_count = count;
    return TG_OK;
}

void tg_generator_batch_slice(const tg_generator *g, int64_t *index, int64_t *count)
{
    if (!g) g = tg_default_generator();
    *index = g->slice_count > 1 ? g->slice_index : 0;
    *count = g->slice_count > 1 ? g->slice_count : 1;
}

void tg__dropout_bits(tg_generator *g, double p, uint8_t *bits, int64_t n)
{
    g = pick(g);
    if (tg_generator_dropout_stream(g) != TG_DROPOUT_COUNTER) {
        tg__bernoulli_bits(g, 1.0 - p, bits, n);
        return;
    }
    int64_t before, after;
    tg__mask_slice(g, n, &before, &after);
    uint64_t seed = tg_generator_random64(g);
    uint32_t th = tg__dropout_threshold(p);
    int64_t nbytes = (n + 7) / 8;
#pragma omp parallel for if (n > 65536) schedule(static)
    for (int64_t k = 0; k < nbytes; k++) {
        uint8_t byte = 0;
        for (int64_t i = k * 8; i < n && i < k * 8 + 8; i++)
            if (tg__counter_keep(seed, (uint64_t)(before + i), th)) byte |= (uint8_t)(1u << (i & 7));
        bits[k] = byte;
    }
}

void tg__mask_slice(const tg_generator *g, int64_t n, int64_t *before, int64_t *after)
{
    int64_t index, count;
    tg_generator_batch_slice(g, &index, &count);
    *before = index * n;
    *after = (count - 1 - index) * n;
}

/* As n float64 uniform draws would (two 32-bit outputs each), without
 * tempering or converting them: only the state's twists. */
void tg__skip_uniform(tg_generator *g, int64_t n)
{
    g = pick(g);
    uint64_t k = 2 * (uint64_t)(n > 0 ? n : 0);
    while (k > 0) {
        uint64_t avail = (uint64_t)g->left - 1; /* draws before the next twist */
        if (k <= avail) {
            g->left -= (int)k;
            g->next += (uint32_t)k;
            return;
        }
        k -= avail + 1; /* up to the twist, and the draw that makes it */
        next_state(g);
        g->next = 1;
    }
}

int tg_randperm(tg_generator *g, int64_t n, int64_t *out)
{
    if (n < 0 || (n > 0 && !out)) return tg_error_status(TG_EINVAL, "randperm: bad arguments (n %lld)", (long long)n);
    /* randperm_cpu: for i < n - 1, z = random() % (n - i), swap i and i + z.
     * (PyTorch 1.13 draws 32 bits for any n below 2^32.) */
    if (n >= ((int64_t)1 << 32)) return tg_error_status(TG_EINVAL, "randperm: n %lld is too large", (long long)n);
    g = pick(g);
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = 0; i + 1 < n; i++) {
        int64_t z = (int64_t)(tg_generator_random(g) % (uint64_t)(n - i));
        int64_t t = out[i];
        out[i] = out[i + z];
        out[i + z] = t;
    }
    return TG_OK;
}

/* torch.multinomial(probs, n, replacement) for the path PyTorch takes without
 * replacement or for one sample (aten's multinomial, "the algorithm is from
 * gumbel softmax"): q = empty_like(probs).exponential_(1), one draw per
 * element in row-major order, q_i = (float)(-log(1 - u_i)) with u_i the
 * float64 uniform; the samples are the indices of the largest probs / q
 * (the first index of the maximum for one sample). */
tg_tensor *tg_multinomial(tg_tape *tp, const tg_tensor *probs, int64_t num_samples, bool replacement, tg_generator *g)
{
    char sh[64];
    if (!probs) return tg__error_null_input("multinomial");
    if (!tg__is_float(probs->dtype))
        return tg_error("multinomial: probabilities must be float32 or float64, got %s", tg_dtype_name(probs->dtype));
    if (probs->ndim != 1 && probs->ndim != 2)
        return tg_error("multinomial: probabilities must be 1-D or 2-D, got %s", tg_shape_str(probs, sh, sizeof sh));
    int64_t rows = probs->ndim == 2 ? probs->shape[0] : 1, n = probs->shape[probs->ndim - 1];
    if (n == 0) return tg_error("multinomial: no categories");
    if (num_samples <= 0) return tg_error("multinomial: num_samples must be positive, got %lld", (long long)num_samples);
    if (!replacement && num_samples > n)
        return tg_error("multinomial: cannot take %lld samples from %lld categories without replacement",
                        (long long)num_samples, (long long)n);
    if (replacement && num_samples > 1)
        return tg_error("multinomial: more than one sample with replacement is not supported");
    for (int64_t r = 0; r < rows; r++) {
        double sum = 0;
        for (int64_t i = 0; i < n; i++) {
            double p = tg_item_at(probs, r * n + i);
            if (!(p >= 0) || isinf(p))
                return tg_error("multinomial: probability tensor contains either inf, nan or element < 0");
            sum += p;
        }
        if (sum == 0) return tg_error("multinomial: invalid distribution (sum of probabilities <= 0) in row %lld", (long long)r);
    }
    int64_t oshape[2] = {rows, num_samples};
    tg_tensor *out = tg_empty(tp, TG_I64, probs->ndim, probs->ndim == 2 ? oshape : oshape + 1);
    double *ratio = out ? tg_tape_alloc(tp, sizeof(double) * (size_t)(rows * n), false) : NULL;
    if (!ratio) return NULL;
    g = pick(g);
    bool f32 = probs->dtype == TG_F32;
    for (int64_t k = 0; k < rows * n; k++) {
        double q = -log(1.0 - uniform_f64(g, 0.0, 1.0));
        double p = tg_item_at(probs, k);
        ratio[k] = f32 ? (double)((float)p / (float)q) : p / q; /* at::div_out(q, self, q) */
    }
    int64_t *o = (int64_t *)out->data;
    tg__ranked *order = num_samples > 1 ? tg_tape_alloc(tp, sizeof *order * (size_t)n, false) : NULL;
    if (num_samples > 1 && !order) return NULL;
    for (int64_t r = 0; r < rows; r++) {
        const double *row = ratio + r * n;
        if (num_samples == 1) { /* argmax: the first index of the maximum */
            int64_t best = 0;
            for (int64_t i = 1; i < n; i++)
                if (row[i] > row[best]) best = i;
            o[r] = best;
            continue;
        }
        /* topk(probs / q, num_samples): largest first, ties by index */
        for (int64_t i = 0; i < n; i++) order[i] = (tg__ranked){row[i], i};
        tg__rank(order, (size_t)n, true);
        for (int64_t i = 0; i < num_samples; i++) o[r * num_samples + i] = order[i].i;
    }
    return out;
}
