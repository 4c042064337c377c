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

enum { HEADS_AT_ONCE = 8 /* heads of a group read one key or value row together */ };

/* s[e] = q_e . k over n floats for the m <= HEADS_AT_ONCE rows q_e (stride
 * n), k read (and rounded to bf16 if rnd; the q_e already are) once for all */
__attribute__((target("avx2,fma"))) static void dots_avx2(float *s, const float *q, int m, const float *k, int64_t n,
                                                          bool rnd)
{
    __m256 acc[HEADS_AT_ONCE];
    for (int e = 0; e < m; e++) acc[e] = _mm256_setzero_ps();
    int64_t i = 0;
    if (m <= HEADS_AT_ONCE / 2) { /* a second chain of multiply-adds per head while the registers allow */
        __m256 acc2[HEADS_AT_ONCE / 2];
        for (int e = 0; e < m; e++) acc2[e] = _mm256_setzero_ps();
        for (; i + 16 <= n; i += 16) {
            __m256 k0 = _mm256_loadu_ps(k + i), k1 = _mm256_loadu_ps(k + i + 8);
            if (rnd) k0 = round8(k0), k1 = round8(k1);
            for (int e = 0; e < m; e++) {
                acc[e] = _mm256_fmadd_ps(_mm256_loadu_ps(q + e * n + i), k0, acc[e]);
                acc2[e] = _mm256_fmadd_ps(_mm256_loadu_ps(q + e * n + i + 8), k1, acc2[e]);
            }
        }
        for (int e = 0; e < m; e++) acc[e] = _mm256_add_ps(acc[e], acc2[e]);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 k8 = _mm256_loadu_ps(k + i);
        if (rnd) k8 = round8(k8);
        for (int e = 0; e < m; e++) acc[e] = _mm256_fmadd_ps(_mm256_loadu_ps(q + e * n + i), k8, acc[e]);
    }
    for (int e = 0; e < m; e++) {
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[e]), _mm256_extractf128_ps(acc[e], 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        s[e] = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    }
    for (; i < n; i++) {
        float ki = rnd ? tg__bf16_round(k[i]) : k[i];
        for (int e = 0; e < m; e++) s[e] += q[e * n + i] * ki;
    }
}

/* o_e += w[e] * v over n floats for the m <= HEADS_AT_ONCE rows o_e (stride
 * n), v read (and rounded to bf16 if rnd) once for all */
__attribute__((target("avx2,fma"))) static void axpys_avx2(float *o, const float *w, int m, const float *v, int64_t n,
                                                           bool rnd)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v8 = _mm256_loadu_ps(v + i);
        if (rnd) v8 = round8(v8);
        for (int e = 0; e < m; e++)
            _mm256_storeu_ps(o + e * n + i, _mm256_fmadd_ps(_mm256_set1_ps(w[e]), v8, _mm256_loadu_ps(o + e * n + i)));
    }
    for (; i < n; i++) {
        float vi = rnd ? tg__bf16_round(v[i]) : v[i];
        for (int e = 0; e < m; e++) o[e * n + i] += w[e] * vi;
    }
}
#endif

static void dots(float *s, const float *q, int m, const float *k, int64_t n, bool rnd, bool vec)
{
#if defined(ATTEND_AVX2)
    if (vec) {
        dots_avx2(s, q, m, k, n, rnd);
        return;
    }
#endif
    (void)vec;
    for (int e = 0; e < m; e++) {
        float acc = 0;
        for (int64_t i = 0; i < n; i++) acc += q[e * n + i] * (rnd ? tg__bf16_round(k[i]) : k[i]);
        s[e] = acc;
    }
}

static void axpys(float *o, const float *w, int m, const float *v, int64_t n, bool rnd, bool vec)
{
#if defined(ATTEND_AVX2)
    if (vec) {
        axpys_avx2(o, w, m, v, n, rnd);
        return;
    }
#endif
    (void)vec;
    for (int64_t i = 0; i < n; i++) {
        float vi = rnd ? tg__bf16_round(v[i]) : v[i];
        for (int e = 0; e < m; e++) o[e * n + i] += w[e] * vi;
    }
}

int tg__attend_cached(tg_tensor *out, tg_numerics nm, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                      int64_t p0, double scale, int64_t window)
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
    /* a task: one query position of up to HEADS_AT_ONCE heads of one group */
    int64_t g = H / G, per = g < HEADS_AT_ONCE ? g : HEADS_AT_ONCE, chunks = (g + per - 1) / per;
    int64_t tasks = B * G * chunks * T;
    float div = (float)scale; /* the scores divided by it in float32, as tg_div_scalar divides them */
    const float *qd = (const float *)q->data + q->offset, *kd = (const float *)k->data + k->offset,
                *vd = (const float *)v->data + v->offset;
    float *od = (float *)out->data + out->offset;
#pragma omp parallel if (tasks * per * P * hd > TG_PAR_MIN)
    {
        /* the heads' rounded queries, their scores (head by head, then
         * position by position) and one position's weights */
        float *buf = malloc(sizeof(float) * (size_t)(per * (hd + 2 * P) + per));
        if (!buf) {
#pragma omp atomic write
            failed = true;
        }
        /* rows of unequal length under the causal mask: dealt out in turn */
#pragma omp for schedule(static, 1)
        for (int64_t t = 0; t < tasks; t++) {
            if (!buf) continue;
            int64_t i = t % T, c = t / T % chunks, grp = t / (T * chunks) % G, bi = t / (T * chunks * G);
            int64_t h0 = grp * g + c * per, lo = window > 0 && p0 + i - window + 1 > 0 ? p0 + i - window + 1 : 0;
            int64_t n = p0 + i + 1 - lo; /* keys lo .. p0 + i */
            int m = (int)(g - c * per < per ? g - c * per : per);
            float *qr = buf, *sj = qr + per * hd, *s = sj + per * P, *w = s + per * P;
            float *o = od + ((bi * T + i) * H + h0) * hd; /* the m heads' outputs, side by side */
            const float *kg = kd + bi * k->stride[0] + grp * k->stride[1];
            const float *vg = vd + bi * v->stride[0] + grp * v->stride[1];
            for (int e = 0; e < m; e++) {
                const float *qrow = qd + bi * q->stride[0] + (h0 + e) * q->stride[1] + i * q->stride[2];
                for (int64_t x = 0; x < hd; x++) {
                    float qx = qrow[x * q->stride[3]];
                    qr[e * hd + x] = rnd ? tg__bf16_round(qx) : qx;
                }
            }
            kg += lo * k->stride[2], vg += lo * v->stride[2];
            for (int64_t j = 0; j < n; j++) dots(sj + j * per, qr, m, kg + j * k->stride[2], hd, rnd, vec);
            for (int e = 0; e < m; e++) {
                float *se = s + e * n;
                for (int64_t j = 0; j < n; j++) se[j] = sj[j * per + e] / div;
                tg__softmax_row_f32(se, se, n);
            }
            memset(o, 0, sizeof(float) * (size_t)(m * hd));
            for (int64_t j = 0; j < n; j++) {
                for (int e = 0; e < m; e++) w[e] = rnd ? tg__bf16_round(s[e * n + j]) : s[e * n + j];
                axpys(o, w, m, vg + j * v->stride[2], hd, rnd, vec);
            }
        }
        free(buf);
    }
    if (failed) return tg_error("attention: out of memory for a row's scores"), -1;
    return 0;
}
