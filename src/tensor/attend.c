/* Attention of new positions over a KV cache, the cache read where it lies
 * (tg__attend_cached, internal.h): for each head h, query row i (position
 * p0 + i) and the keys and values of positions 0 .. p0 + i of the head's
 * group g = h / (H / G),
 *
 *   s_j = q . k_j;  w = softmax(s / scale);  ctx = sum_j w_j v_j
 *
 * the composed ops' order (scores, division, softmax, product) without what
 * they make on the way: the keys and values repeated per head
 * (repeat_interleave), the (b, H, T, P) scores and, under BF16, rounded
 * copies of the cache at every step. Under BF16 every operand of the two
 * products (q, k, w, v) is rounded to bf16 as tg_k_gemm rounds them, so each
 * product is exact in float32 and the sums are float32's; under FAST all is
 * float32. The sums run in this kernel's order: the policies' tolerance
 * (docs/numerics.md), never EXACT, which keeps PyTorch's calls. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTEND_AVX2 1

/* the eight floats rounded to bf16 (ties to even; a NaN stays a quiet NaN),
 * tg__bf16_round's arithmetic */
__attribute__((target("avx2,fma"))) static inline __m256 round8(__m256 x)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i y = _mm256_blendv_epi8(r, q, nan);
    return _mm256_castsi256_ps(_mm256_and_si256(y, _mm256_set1_epi32((int)0xffff0000u)));
}

/* q . k over n floats, k rounded to bf16 first if rnd (q already is) */
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *q, const float *k, int64_t n, bool rnd)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 k0 = _mm256_loadu_ps(k + i), k1 = _mm256_loadu_ps(k + i + 8);
        if (rnd) k0 = round8(k0), k1 = round8(k1);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), k0, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), k1, a1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 k0 = _mm256_loadu_ps(k + i);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), rnd ? round8(k0) : k0, a0);
    }
    __m256 t = _mm256_add_ps(a0, a1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    float s = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    for (; i < n; i++) s += q[i] * (rnd ? tg__bf16_round(k[i]) : k[i]);
    return s;
}

/* acc += w * v over n floats, v rounded to bf16 first if rnd */
__attribute__((target("avx2,fma"))) static void axpy_avx2(float *acc, float w, const float *v, int64_t n, bool rnd)
{
    __m256 w8 = _mm256_set1_ps(w);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v0 = _mm256_loadu_ps(v + i);
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(w8, rnd ? round8(v0) : v0, _mm256_loadu_ps(acc + i)));
    }
    for (; i < n; i++) acc[i] += w * (rnd ? tg__bf16_round(v[i]) : v[i]);
}
#endif

static float dot(const float *q, const float *k, int64_t n, bool rnd, bool vec)
{
#if defined(ATTEND_AVX2)
    if (vec) return dot_avx2(q, k, n, rnd);
#endif
    (void)vec;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += q[i] * (rnd ? tg__bf16_round(k[i]) : k[i]);
    return s;
}

static void axpy(float *acc, float w, const float *v, int64_t n, bool rnd, bool vec)
{
#if defined(ATTEND_AVX2)
    if (vec) {
        axpy_avx2(acc, w, v, n, rnd);
        return;
    }
#endif
    (void)vec;
    for (int64_t i = 0; i < n; i++) acc[i] += w * (rnd ? tg__bf16_round(v[i]) : v[i]);
}

int tg__attend_cached(tg_tensor *out, tg_numerics nm, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                      int64_t p0, double scale)
{
    if (nm == TG_NUMERICS_EXACT || q->dtype != TG_F32 || k->dtype != TG_F32 || v->dtype != TG_F32 ||
        out->dtype != TG_F32 || q->ndim != 4 || k->ndim != 4 || !tg_same_shape(k, v) || !tg_is_contiguous(out))
        return 1;
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], hd = q->shape[3];
    int64_t G = k->shape[1], P = k->shape[2];
    if (k->shape[0] != B || k->shape[3] != hd || G < 1 || H % G != 0 || P != p0 + T || k->stride[3] != 1 ||
        v->stride[3] != 1 || out->ndim != 4 || out->shape[0] != B || out->shape[1] != T || out->shape[2] != H ||
        out->shape[3] != hd)
        return 1;
    bool rnd = nm == TG_NUMERICS_BF16, vec = tg__vec_math(), failed = false;
    int64_t g = H / G, tasks = B * H * T;
    float inv = (float)scale; /* the scores divided by scale, as tg_div_scalar divides in float32 */
    const float *qd = (const float *)q->data + q->offset, *kd = (const float *)k->data + k->offset,
                *vd = (const float *)v->data + v->offset;
    float *od = (float *)out->data + out->offset;
#pragma omp parallel if (tasks * P * hd > TG_PAR_MIN)
    {
        float *buf = malloc(sizeof(float) * (size_t)(hd + P));
        if (!buf) {
#pragma omp atomic write
            failed = true;
        }
        /* rows of unequal length under the causal mask: dealt out in turn */
#pragma omp for schedule(static, 1)
        for (int64_t t = 0; t < tasks; t++) {
            if (!buf) continue;
            int64_t bi = t / (H * T), h = t / T % H, i = t % T, n = p0 + i + 1;
            float *qr = buf, *s = buf + hd, *o = od + ((bi * T + i) * H + h) * hd;
            const float *qrow = qd + bi * q->stride[0] + h * q->stride[1] + i * q->stride[2];
            const float *kg = kd + bi * k->stride[0] + h / g * k->stride[1];
            const float *vg = vd + bi * v->stride[0] + h / g * v->stride[1];
            for (int64_t e = 0; e < hd; e++) qr[e] = rnd ? tg__bf16_round(qrow[e * q->stride[3]]) : qrow[e * q->stride[3]];
            for (int64_t j = 0; j < n; j++) s[j] = dot(qr, kg + j * k->stride[2], hd, rnd, vec) / inv;
            tg__softmax_row_f32(s, s, n);
            memset(o, 0, sizeof(float) * (size_t)hd);
            for (int64_t j = 0; j < n; j++)
                axpy(o, rnd ? tg__bf16_round(s[j]) : s[j], vg + j * v->stride[2], hd, rnd, vec);
        }
        free(buf);
    }
    if (failed) return tg_error("attention: out of memory for a row's scores"), -1;
    return 0;
}
