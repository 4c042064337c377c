/* Fused scaled-dot-product attention: one node, no T x T tensor kept.
 *
 * For each (batch, head) matrix triple Q, K, V (T x hd) and scale = 1/sqrt(hd):
 *   S = scale Q K^T            (T x T; causal: S[i][j] = -inf for j > i)
 *   P = softmax(S) by rows,    lse[i] = log sum_j exp(S[i][j])
 *   O = (P o Z) V              Z[i][j] in {0, 1/(1-p)}: the dropout mask
 * The forward walks blocks of BR query rows: S_blk = scale Q_blk K[:kmax]^T by
 * BLAS, a row softmax that also records lse, dropout, O_blk = P_blk V[:kmax].
 * With causal masking kmax is the block's last row + 1, so key tiles above
 * the diagonal are never computed. The node keeps q, k, v, the output and
 * lse (..., T) (and the dropout mask's bits when it draws PyTorch's stream);
 * backward recomputes P = exp(S - lse) block by block.
 *
 * Threads: the forward is parallel over (batch*head, query block) and the
 * backward over batch*head (dK, dV of one head collect every query block, and
 * each head's gradient slices are its own). OpenBLAS's OpenMP build runs each
 * GEMM single-threaded inside our parallel regions. */
#include "autograd_internal.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define OP "scaled_dot_product_attention"

/* Query rows per block: S_blk and dP_blk (BR x T) of a thread stay in L2 for
 * GPT-2 sizes (T = 1024: 2 x 256 KiB in float). */
#ifndef BR
#define BR 64
#endif

/* ---- dropout mask --------------------------------------------------------------------
 *
 * Two streams (tensor.h, tg_dropout_stream). PyTorch's: the mask of all
 * BH x T x T weights is drawn at forward time as the book's
 * dropout(softmax(...)) draws it (bernoulli_, row-major, the causal zeros
 * included) and kept as bits for backward. The counter stream: one seed per
 * call, and row i of head bh has its own splitmix64 stream, so both passes
 * recompute the same bits and nothing is stored. */

typedef struct {
    bool on;
    uint64_t seed;
    uint32_t thresh;     /* counter: keep when the 32-bit draw >= thresh = floor(p * 2^32) */
    double keep;         /* 1 / (1 - p) */
    const uint8_t *bits; /* PyTorch's stream: bit (bh T + i) T + j keeps; NULL for the counter stream */
} dropout_t;

/* The key of row i of head bh: output r+1 of splitmix64 seeded with seed,
 * r = bh*T + i, so every row of the call has its own stream. */
static inline uint64_t row_key(const dropout_t *d, int64_t bh, int64_t T, int64_t i)
{
    return tg__mix64(d->seed + TG__GOLDEN * ((uint64_t)bh * (uint64_t)T + (uint64_t)i + 1));
}

static dropout_t make_dropout(double p, uint64_t seed, const uint8_t *bits)
{
    dropout_t d = {p > 0, seed, 0, 1.0, bits};
    if (d.on) {
        d.thresh = tg__dropout_threshold(p);
        /* as PyTorch's noise.div_(1 - p) in the weights' dtype */
        d.keep = 1.0 / (1.0 - p);
    }
    return d;
}

/* ---- float exp for the softmax rows (tg__exp_f32, src/tensor/internal.h) ------------------------ */

static inline double exp_f64(double x) { return exp(x); }

/* ---- per-row work, once per element type ----------------------------------------- */

/* Row helpers for element type T (suffix SUF):
 *
 * mask_SUF(z, n, key, d): z[j] = Z[i][j] (0 or 1/(1-p)) for j < n; column
 *   2c takes the low half and 2c+1 the high half of the stream's output c.
 *
 * fwd_rows_SUF: S (br x kmax, rows r0.. of one head) holds scale Q K^T on
 *   entry and P o Z on exit, zero past the causal limit; lse[i] is set.
 *
 * bwd_rows_SUF: S holds scale Q K^T and dP holds dO V^T (= d(P o Z)) on
 *   entry. With D_i = rowsum(dO_i o O_i) = sum_j dP_ij Z_ij P_ij (as
 *   O = (P o Z) V), on exit S holds P o Z (for dV) and dP holds
 *   dS = P o (dP o Z - D) (for dQ, dK); dP may be NULL when only dV is
 *   wanted. */
#define SDPA_ROWS(T, SUF, EXP)                                                                         \
    static void mask_##SUF(T *z, int64_t n, const dropout_t *d, int64_t bh, int64_t Tlen, int64_t i)   \
    {                                                                                                  \
        const T ks = (T)d->keep;                                                                       \
        if (d->bits) {                                                                                 \
            uint64_t b0 = ((uint64_t)bh * (uint64_t)Tlen + (uint64_t)i) * (uint64_t)Tlen;              \
            for (int64_t j = 0; j < n; j++) {                                                          \
                uint64_t b = b0 + (uint64_t)j;                                                         \
                z[j] = (d->bits[b >> 3] >> (b & 7)) & 1u ? ks : (T)0;                                  \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        uint64_t key = row_key(d, bh, Tlen, i);                                                        \
        const uint32_t th = d->thresh;                                                                 \
        int64_t half = n / 2;                                                                          \
        _Pragma("omp simd") for (int64_t c = 0; c < half; c++)                                         \
        {                                                                                              \
            uint64_t h = tg__mix64(key + TG__GOLDEN * (uint64_t)(c + 1));                              \
            z[2 * c] = (uint32_t)h >= th ? ks : (T)0;                                                  \
            z[2 * c + 1] = (uint32_t)(h >> 32) >= th ? ks : (T)0;                                      \
        }                                                                                              \
        if (n & 1) z[n - 1] = (uint32_t)tg__mix64(key + TG__GOLDEN * (uint64_t)(half + 1)) >= th ? ks : (T)0; \
    }                                                                                                  \
                                                                                                       \
    static void fwd_rows_##SUF(T *S, int64_t br, int64_t kmax, int64_t r0, bool causal, int64_t win, T *lse, \
                               const dropout_t *d, int64_t bh, int64_t Tlen, T *z)                   \
    {                                                                                                  \
        for (int64_t i = 0; i < br; i++) {                                                             \
            T *s = S + i * kmax;                                                                       \
            int64_t nv = causal ? r0 + i + 1 : kmax, lo = win > 0 && r0 + i - win + 1 > 0 ? r0 + i - win + 1 : 0; \
            T m = s[lo];                                                                               \
            _Pragma("omp simd reduction(max : m)") for (int64_t j = lo + 1; j < nv; j++) m = s[j] > m ? s[j] : m; \
            T sum = 0;                                                                                 \
            for (int64_t j = 0; j < lo; j++) s[j] = 0;                                                 \
            _Pragma("omp simd reduction(+ : sum)") for (int64_t j = lo; j < nv; j++)                   \
            {                                                                                          \
                s[j] = EXP(s[j] - m);                                                                  \
                sum += s[j];                                                                           \
            }                                                                                          \
            lse[i] = m + (T)log((double)sum);                                                          \
            T f = (T)1 / sum;                                                                          \
            if (d->on) {                                                                               \
                mask_##SUF(z, nv, d, bh, Tlen, r0 + i);                                    \
                _Pragma("omp simd") for (int64_t j = lo; j < nv; j++) s[j] = s[j] * f * z[j];                 \
            } else {                                                                                   \
                _Pragma("omp simd") for (int64_t j = lo; j < nv; j++) s[j] *= f;                        \
            }                                                                                          \
            for (int64_t j = nv; j < kmax; j++) s[j] = 0;                                              \
        }                                                                                              \
    }                                                                                                  \
                                                                                                       \
    static void bwd_rows_##SUF(T *S, T *dP, int64_t br, int64_t kmax, int64_t r0, bool causal, int64_t win, \
                               const T *lse, const T *dO, int64_t ldo_g, const T *O, int64_t ldo,    \
                               int64_t hd, const dropout_t *d,                                          \
                               int64_t bh, int64_t Tlen, T *z)                                         \
    {                                                                                                  \
        for (int64_t i = 0; i < br; i++) {                                                             \
            T *s = S + i * kmax, *dp = dP ? dP + i * kmax : NULL;                                      \
            int64_t nv = causal ? r0 + i + 1 : kmax, lo = win > 0 && r0 + i - win + 1 > 0 ? r0 + i - win + 1 : 0; \
            for (int64_t j = 0; j < lo; j++) s[j] = 0;                                                 \
            if (dp)                                                                                    \
                for (int64_t j = 0; j < lo; j++) dp[j] = 0;                                            \
            T l = lse[i];                                                                              \
            if (d->on) mask_##SUF(z, nv, d, bh, Tlen, r0 + i);                             \
            if (dp) {                                                                                  \
                T D = 0;                                                                               \
                const T *go = dO + i * ldo_g, *o = O + i * ldo;                                        \
                _Pragma("omp simd reduction(+ : D)") for (int64_t c = 0; c < hd; c++) D += go[c] * o[c]; \
                if (d->on) {                                                                           \
                    _Pragma("omp simd") for (int64_t j = lo; j < nv; j++)                               \
                    {                                                                                  \
                        T p = EXP(s[j] - l);                                                           \
                        dp[j] = p * (dp[j] * z[j] - D);                                                \
                        s[j] = p * z[j];                                                               \
                    }                                                                                  \
                } else {                                                                               \
                    _Pragma("omp simd") for (int64_t j = lo; j < nv; j++)                               \
                    {                                                                                  \
                        T p = EXP(s[j] - l);                                                           \
                        dp[j] = p * (dp[j] - D);                                                       \
                        s[j] = p;                                                                      \
                    }                                                                                  \
                }                                                                                      \
                for (int64_t j = nv; j < kmax; j++) dp[j] = 0;                                         \
            } else if (d->on) {                                                                        \
                _Pragma("omp simd") for (int64_t j = lo; j < nv; j++) s[j] = EXP(s[j] - l) * z[j];      \
            } else {                                                                                   \
                _Pragma("omp simd") for (int64_t j = lo; j < nv; j++) s[j] = EXP(s[j] - l);             \
            }                                                                                          \
            for (int64_t j = nv; j < kmax; j++) s[j] = 0;                                              \
        }                                                                                              \
    }

SDPA_ROWS(float, f32, tg__exp_f32)
SDPA_ROWS(double, f64, exp_f64)

/* ---- one GEMM on raw row-major matrices, either dtype -------------------------------- */

/* Under BF16 numerics (tensor.h) both operands of a float32 product are
 * rounded to bf16 first, into this thread's two buffers of the node's
 * scratch (NULL: not rounded), and multiplied by sgemm: the block products
 * run on the node's threads at once, and oneDNN's kernels share one
 * scratchpad between concurrent calls in Debian's build (src/tensor/bf16.c
 * runs them one at a time). */
typedef struct {
    float *a, *b;
} bf16_bufs;

/* x (rows x cols, ld) rounded to bf16 into out, compact */
static const float *round_bf16(float *out, const float *x, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) out[r * cols + c] = tg__bf16_round(x[r * ld + c]);
    return out;
}

/* c (M x N, ldc) = alpha op(a) op(b) + beta c, op(x) = x^T if t. */
static void gemm(bool f64, const bf16_bufs *rb, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                 const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    tg__blas_threads();
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if (rb && !f64) {
        int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        a = round_bf16(rb->a, a, ar, ac, lda);
        b = round_bf16(rb->b, b, br, bc, ldb);
        lda = ac;
        ldb = bc;
    }
    if (f64)
        cblas_dgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, alpha, a, (int)lda, b, (int)ldb, beta, c,
                    (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, (float)alpha, a, (int)lda, b, (int)ldb,
                    (float)beta, c, (int)ldc);
}

/* ---- operand layout -------------------------------------------------------------------- */

/* A (..., T, hd) tensor seen as BH row-major T x hd matrices: matrix bh starts
 * at base + off(bh) elements, rows ld apart. */
typedef struct {
    char *base;
    int nb;                         /* batch dims */
    int64_t shape[TG_MAX_DIMS];     /* batch shape */
    int64_t stride[TG_MAX_DIMS];    /* batch strides (0 for expanded dims) */
    int64_t ld;
    size_t es;
} mats_t;

/* Can x go to BLAS as it is: unit stride along hd and rows at least hd apart
 * (BLAS needs ld >= hd)? Expanded batch dims are fine. */
static bool blas_ready(const tg_tensor *x)
{
    int n = x->ndim;
    int64_t T = x->shape[n - 2], hd = x->shape[n - 1];
    bool unit = hd <= 1 || x->stride[n - 1] == 1;
    bool rows = T <= 1 || x->stride[n - 2] >= (hd > 1 ? hd : 1);
    return unit && rows;
}

static mats_t describe(const tg_tensor *x)
{
    mats_t m;
    int n = x->ndim;
    m.es = tg_dtype_size(x->dtype);
    m.base = (char *)x->data + (size_t)x->offset * m.es;
    m.nb = n - 2;
    for (int d = 0; d < m.nb; d++) {
        m.shape[d] = x->shape[d];
        m.stride[d] = x->stride[d];
    }
    int64_t T = x->shape[n - 2], hd = x->shape[n - 1];
    m.ld = T <= 1 ? (hd > 1 ? hd : 1) : x->stride[n - 2];
    return m;
}

/* First element of matrix bh (row-major over the batch dims). */
static inline char *mat_at(const mats_t *m, int64_t bh)
{
    int64_t off = 0;
    for (int d = m->nb - 1; d >= 0; d--) {
        off += (bh % m->shape[d]) * m->stride[d];
        bh /= m->shape[d];
    }
    return m->base + (size_t)off * m->es;
}

/* x itself if BLAS takes its layout, else a contiguous copy in tp. */
static tg_tensor *blas_operand(tg_tape *tp, tg_tensor *x)
{
    if (blas_ready(x)) return x;
    tg_tensor *c = tg_empty(tp, x->dtype, x->ndim, x->shape);
    if (c) tg_k_copy(c, x);
    return c;
}

/* Threads for a loop of `items` independent items totalling `work`
 * multiply-adds: no more than there are items, so per-thread scratch never
 * exceeds what the work needs, and one for small work, where starting a
 * parallel region costs more than the arithmetic. */
static int threads_for(int64_t items, int64_t work)
{
#ifdef _OPENMP
    int64_t n = work < ((int64_t)1 << 20) ? 1 : omp_get_max_threads();
    return (int)(items < n ? (items > 0 ? items : 1) : n);
#else
    (void)items, (void)work;
    return 1;
#endif
}

static int thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Elements of one bf16-rounded operand of this node's products under BF16
 * numerics nm (the largest: a BR x T block or a T x hd matrix), else 0. */
static int64_t bf16_operand_size(tg_numerics nm, const tg_tensor *q, int64_t T, int64_t hd)
{
    if (q->dtype != TG_F32 || nm != TG_NUMERICS_BF16) return 0;
    return BR * T > T * hd ? BR * T : T * hd;
}

/* ---- forward ----------------------------------------------------------------------------- */

/* out (BH x T x hd, rows unit-strided), lse (BH x T) from q, k, v; scratch from tp.
 * False if out of memory. */
static bool sdpa_forward(tg_tape *tp, tg_tensor *out, tg_tensor *lse, const tg_tensor *q, const tg_tensor *k,
                         const tg_tensor *v, bool causal, int64_t win, double scale, const dropout_t *d)
{
    int n = q->ndim;
    int64_t T = q->shape[n - 2], hd = q->shape[n - 1];
    int64_t BH = tg_numel(q) / (T * hd);
    bool f64 = q->dtype == TG_F64;
    size_t es = tg_dtype_size(q->dtype);
    mats_t mq = describe(q), mk = describe(k), mv = describe(v), mo = describe(out);
    int64_t nblk = (T + BR - 1) / BR;
    /* per thread: S_blk (BR x T) and a mask row (T); under BF16 two
     * operands' bf16 copies (rbn each) */
    int64_t rbn = bf16_operand_size(tg_tape_numerics(tp), q, T, hd), per = BR * T + T + 2 * rbn;
    int nth = threads_for(BH * nblk, BH * T * T * hd);
    /* the tape's scratch: one buffer for every node of a step, kept across steps */
    char *scratch = tg__tape_scratch(tp, (size_t)nth * (size_t)per * es);
    if (!scratch) return false;
    char *lbase = lse->data;

#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) if (nth > 1)
    for (int64_t it = 0; it < BH * nblk; it++) {
        /* causal: heavy (late) blocks first, for the dynamic schedule */
        int64_t bh = it / nblk, blk = causal ? nblk - 1 - it % nblk : it % nblk;
        int64_t r0 = blk * BR, br = T - r0 < BR ? T - r0 : BR;
        int64_t kmax = causal ? r0 + br : T;
        char *S = scratch + (size_t)thread_num() * (size_t)per * es;
        char *z = S + (size_t)(BR * T) * es;
        bf16_bufs rbt = {(float *)(void *)(z + (size_t)T * es), (float *)(void *)(z + (size_t)(T + rbn) * es)};
        const bf16_bufs *rb = rbn ? &rbt : NULL;
        const char *qb = mat_at(&mq, bh) + (size_t)(r0 * mq.ld) * es;
        const char *kb = mat_at(&mk, bh), *vb = mat_at(&mv, bh);
        char *ob = mat_at(&mo, bh) + (size_t)(r0 * mo.ld) * es;
        char *lb = lbase + (size_t)(bh * T + r0) * es;
        /* S (br x kmax) = scale Q_blk (br x hd) K[:kmax]^T (hd x kmax) */
        gemm(f64, rb, false, true, br, kmax, hd, scale, qb, mq.ld, kb, mk.ld, 0.0, S, kmax);
        if (f64)
            fwd_rows_f64((double *)S, br, kmax, r0, causal, win, (double *)lb, d, bh, T, (double *)z);
        else
            fwd_rows_f32((float *)S, br, kmax, r0, causal, win, (float *)lb, d, bh, T, (float *)z);
        /* O_blk (br x hd) = (P o Z) (br x kmax) V[:kmax] (kmax x hd) */
        gemm(f64, rb, false, false, br, hd, kmax, 1.0, S, kmax, vb, mv.ld, 0.0, ob, mo.ld);
    }
    return true;
}

/* The output, laid out as q when q's elements are dense in some order of its
 * dims with head_dim innermost (as PyTorch's flash kernel lays its output
 * out): the book's q, a (b, T, h, hd) tensor seen as (b, h, T, hd), gives
 * an output whose transpose back is contiguous, so the heads' context
 * reaches out_proj without a copy. Otherwise contiguous. */
static tg_tensor *out_like(tg_tape *tp, const tg_tensor *q)
{
    tg_tensor *out = tg__new_like(tp, q);
    int nd = q->ndim, order[TG_MAX_DIMS];
    if (!out || nd < 3 || tg_is_contiguous(q)) return out;
    for (int i = 0; i < nd; i++) {
        if (q->shape[i] < 2) return out; /* a size-1 dim's stride says nothing */
        order[i] = i;
    }
    /* dims from the outermost, by stride (insertion sort: a few dims) */
    for (int i = 1; i < nd; i++)
        for (int j = i; j > 0 && q->stride[order[j]] > q->stride[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    if (order[nd - 1] != nd - 1) return out;
    int64_t size = 1;
    for (int i = nd - 1; i >= 0; i--) {
        if (q->stride[order[i]] != size) return out;
        size *= q->shape[order[i]];
    }
    for (int i = 0; i < nd; i++) out->stride[i] = q->stride[i];
    return out;
}

static void shapes_str(const tg_tensor *q, const tg_tensor *k, const tg_tensor *v, char *buf, size_t n)
{
    char a[64], b[64], c[64];
    snprintf(buf, n, "q %s, k %s, v %s", tg_shape_str(q, a, 64), tg_shape_str(k, b, 64), tg_shape_str(v, c, 64));
}

tg_tensor *tg_scaled_dot_product_attention(tg_tape *tp, tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal,
                                           double dropout_p, tg_generator *g)
{
    int64_t hd = q && q->ndim >= 1 ? q->shape[q->ndim - 1] : 1;
    return tg__sdpa(tp, q, k, v, causal, 0, 1.0 / sqrt((double)(hd > 0 ? hd : 1)), dropout_p, g);
}

tg_tensor *tg__sdpa(tg_tape *tp, tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal, int64_t window, double scale,
                    double dropout_p, tg_generator *g)
{
    if (!tp) return tg_error(OP ": NULL tape");
    if (!q || !k || !v) return tg__error_null_input(OP);
    char sh[240];
    shapes_str(q, k, v, sh, sizeof sh);
    if (!(dropout_p >= 0 && dropout_p < 1))
        return tg_error(OP ": dropout probability %g is outside [0, 1)", dropout_p);
    if (!tg__is_float(q->dtype) || !tg__is_float(k->dtype) || !tg__is_float(v->dtype))
        return tg_error(OP ": expected float32 or float64 tensors, got q %s, k %s, v %s", tg_dtype_name(q->dtype),
                        tg_dtype_name(k->dtype), tg_dtype_name(v->dtype));
    if (q->dtype != k->dtype || q->dtype != v->dtype)
        return tg_error(OP ": dtype mismatch: q %s, k %s, v %s", tg_dtype_name(q->dtype), tg_dtype_name(k->dtype),
                        tg_dtype_name(v->dtype));
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return tg_error(OP ": expected (..., T, head_dim) inputs with at least 2 dims, got %s", sh);
    if (!tg_same_shape(q, k) || !tg_same_shape(q, v))
        return tg_error(OP ": q, k and v must have the same shape (..., T, head_dim), got %s", sh);
    int nd = q->ndim;
    int64_t T = q->shape[nd - 2], hd = q->shape[nd - 1];
    if (T > INT_MAX / BR || hd > INT_MAX) return tg_error(OP ": sizes too large for BLAS, got %s", sh);

    /* The mask is drawn whether or not grad is recorded, as dropout draws it. */
    uint64_t seed = 0;
    tg_tensor *bits = NULL;
    if (dropout_p > 0) {
        tg_generator *gen = g ? g : tg_default_generator();
        if (tg_generator_dropout_stream(gen) == TG_DROPOUT_COUNTER) {
            /* a batch slice's rows follow the rows of the parts before it:
             * row r's key is the whole mask's row before_rows + r's */
            int64_t before, after;
            tg__mask_slice(gen, tg_numel(q) / hd, &before, &after);
            seed = tg_generator_random64(gen) + TG__GOLDEN * (uint64_t)before;
        } else {
            int64_t n = tg_numel(q) / hd * T;
            int64_t nbytes = (n + 7) / 8;
            if (!(bits = tg_empty(tp, TG_U8, 1, &nbytes))) return NULL;
            tg__bernoulli_bits(gen, 1.0 - dropout_p, bits->data, n);
        }
    }
    dropout_t d = make_dropout(dropout_p, seed, bits ? bits->data : NULL);

    tg_tensor *out = out_like(tp, q);
    tg_tensor *lse = tg_empty(tp, q->dtype, nd - 1, q->shape);
    if (!out || !lse) return NULL;
    tg_tensor *qq = q, *kk = k, *vv = v;
    if (tg_numel(out) > 0) {
        qq = blas_operand(tp, q);
        kk = k == q ? qq : blas_operand(tp, k);
        vv = v == q ? qq : v == k ? kk : blas_operand(tp, v);
        if (!qq || !kk || !vv) return NULL;
        if (!sdpa_forward(tp, out, lse, qq, kk, vv, causal, causal ? window : 0, scale, &d))
            return tg_error(OP ": out of memory");
    }
    /* the output itself is n->out */
    tg_tensor *in[3] = {q, k, v}, *saved[5] = {qq, kk, vv, lse, bits};
    tg_node *n;
    out = tg__record(tp, TG_OP_SDPA, out, 3, in, bits ? 5 : 4, saved, &n);
    if (n) {
        n->iarg[0] = causal;
        memcpy(&n->iarg[1], &seed, sizeof seed);
        n->iarg[2] = causal ? window : 0;
        n->darg[0] = dropout_p;
        n->darg[1] = scale;
    }
    return out;
}

/* ---- backward -------------------------------------------------------------------------------- */

/* Where one input's gradient goes: a contiguous (..., T, hd) buffer, written
 * with beta (0 = overwrite a fresh buffer, 1 = add), and then accumulated
 * into the input's gradient by tg__accum when it is a temporary. */
typedef struct {
    tg_tensor *buf; /* NULL: not wanted */
    bool tmp;
    double beta;
} gdest_t;

/* Do a and b accumulate into the same gradient buffer? */
static bool same_grad_slot(const tg_tensor *a, const tg_tensor *b)
{
    return a->grad_fn ? a->grad_fn == b->grad_fn : a == b;
}

static int grad_dest(tg_node *n, int i, gdest_t *g)
{
    g->buf = NULL;
    g->tmp = false;
    g->beta = 1.0;
    tg_tensor *t = n->in[i];
    if (!tg__needs_grad(t)) return TG_OK;
    /* q, k, v being one tensor (one gradient slot: the same leaf, or outputs
     * of the same node): only its first use writes straight into the slot;
     * the others go through temporaries, added afterwards, because the
     * kernel writes dQ rows while dK, dV are still collecting. */
    bool dup = false;
    for (int j = 0; j < i; j++) dup |= same_grad_slot(n->in[j], t);
    if (dup) {
        g->buf = tg_empty(tg__btape(n), t->dtype, t->ndim, t->shape);
        g->tmp = true;
        g->beta = 0.0;
        return g->buf ? TG_OK : TG_ENOMEM;
    }
    bool fresh;
    g->buf = tg__grad_buf(t, &fresh, false);
    g->beta = fresh ? 0.0 : 1.0;
    return g->buf ? TG_OK : TG_ENOMEM;
}

/* forward: O = (P o Z) V, P = softmax(scale Q K^T [+ causal mask]);
 * so with dP = dO V^T and D = rowsum(dO o O):
 *   dV = (P o Z)^T dO,  dS = P o (dP o Z - D),
 *   dQ = scale dS K,    dK = scale dS^T Q. */
int tg__sdpa_backward(tg_node *n)
{
    const tg_tensor *q = n->saved[0], *k = n->saved[1], *v = n->saved[2], *lse = n->saved[3];
    const tg_tensor *o = n->out;
    const tg_tensor *go = n->grad;
    bool causal = n->iarg[0] != 0;
    uint64_t seed;
    memcpy(&seed, &n->iarg[1], sizeof seed);
    dropout_t d = make_dropout(n->darg[0], seed, n->nsaved > 4 ? n->saved[4]->data : NULL);

    gdest_t gq, gk, gv;
    int st = grad_dest(n, 0, &gq);
    if (!st) st = grad_dest(n, 1, &gk);
    if (!st) st = grad_dest(n, 2, &gv);
    if (st) return st;
    int nd = q->ndim;
    int64_t T = q->shape[nd - 2], hd = q->shape[nd - 1];
    int64_t numel = tg_numel(q);
    if (numel == 0) {
        /* nothing to compute; the gradients exist, empty */
        return TG_OK;
    }
    if (!blas_ready(go) && !(go = tg__dense(tg__btape(n), go))) return TG_ENOMEM;
    int64_t BH = numel / (T * hd);
    bool f64 = q->dtype == TG_F64;
    size_t es = tg_dtype_size(q->dtype);
    double scale = n->darg[1];
    int64_t win = n->iarg[2];
    mats_t mq = describe(q), mk = describe(k), mv = describe(v), mo = describe(o), mg = describe(go);
    int64_t nblk = (T + BR - 1) / BR;
    bool need_ds = gq.buf || gk.buf;
    /* per thread: S_blk, dP_blk (BR x T each) and a mask row (T); under
     * BF16 two operands' bf16 copies (rbn each) */
    int64_t rbn = bf16_operand_size(n->numerics, q, T, hd), per = 2 * BR * T + T + 2 * rbn;
    int nth = threads_for(BH, BH * T * T * hd);
    char *scratch = tg__tape_scratch(tg__btape(n), (size_t)nth * (size_t)per * es);
    if (!scratch) return TG_ENOMEM; /* the tape's message says how much */
    const char *lbase = lse->data;
    char *dqb = gq.buf ? gq.buf->data : NULL, *dkb = gk.buf ? gk.buf->data : NULL;
    char *dvb = gv.buf ? gv.buf->data : NULL;
    size_t mat = (size_t)(T * hd) * es;

    /* With one head, BLAS is left to use the threads itself. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nth) if (nth > 1)
    for (int64_t bh = 0; bh < BH; bh++) {
        char *S = scratch + (size_t)thread_num() * (size_t)per * es;
        char *dP = S + (size_t)(BR * T) * es;
        char *z = dP + (size_t)(BR * T) * es;
        bf16_bufs rbt = {(float *)(void *)(z + (size_t)T * es), (float *)(void *)(z + (size_t)(T + rbn) * es)};
        const bf16_bufs *rb = rbn ? &rbt : NULL;
        const char *qm = mat_at(&mq, bh), *km = mat_at(&mk, bh), *vm = mat_at(&mv, bh);
        const char *om = mat_at(&mo, bh), *gom = mat_at(&mg, bh);
        char *dq = dqb ? dqb + bh * mat : NULL, *dk = dkb ? dkb + bh * mat : NULL;
        char *dv = dvb ? dvb + bh * mat : NULL;
        /* The last block reaches every key (kmax = T), so going backwards the
         * first block sets all of dK, dV (beta as given) and later ones add. */
        double bk = gk.beta, bv = gv.beta;
        for (int64_t blk = nblk - 1; blk >= 0; blk--) {
            int64_t r0 = blk * BR, br = T - r0 < BR ? T - r0 : BR;
            int64_t kmax = causal ? r0 + br : T;
            const char *qb = qm + (size_t)(r0 * mq.ld) * es;
            const char *gob = gom + (size_t)(r0 * mg.ld) * es, *ob = om + (size_t)(r0 * mo.ld) * es;
            const char *lb = lbase + (size_t)(bh * T + r0) * es;
            /* S (br x kmax) = scale Q_blk K[:kmax]^T; dP (br x kmax) = dO_blk V[:kmax]^T */
            gemm(f64, rb, false, true, br, kmax, hd, scale, qb, mq.ld, km, mk.ld, 0.0, S, kmax);
            if (need_ds) gemm(f64, rb, false, true, br, kmax, hd, 1.0, gob, mg.ld, vm, mv.ld, 0.0, dP, kmax);
            if (f64)
                bwd_rows_f64((double *)S, need_ds ? (double *)dP : NULL, br, kmax, r0, causal, win, (const double *)lb,
                             (const double *)gob, mg.ld, (const double *)ob, mo.ld, hd, &d, bh, T, (double *)z);
            else
                bwd_rows_f32((float *)S, need_ds ? (float *)dP : NULL, br, kmax, r0, causal, win, (const float *)lb,
                             (const float *)gob, mg.ld, (const float *)ob, mo.ld, hd, &d, bh, T, (float *)z);
            /* dV[:kmax] (kmax x hd) += (P o Z)^T (kmax x br) dO_blk (br x hd) */
            if (dv) gemm(f64, rb, true, false, kmax, hd, br, 1.0, S, kmax, gob, mg.ld, bv, dv, hd);
            /* dQ_blk (br x hd) = scale dS (br x kmax) K[:kmax] (kmax x hd) */
            if (dq)
                gemm(f64, rb, false, false, br, hd, kmax, scale, dP, kmax, km, mk.ld, gq.beta, dq + (size_t)(r0 * hd) * es,
                     hd);
            /* dK[:kmax] (kmax x hd) += scale dS^T (kmax x br) Q_blk (br x hd) */
            if (dk) gemm(f64, rb, true, false, kmax, hd, br, scale, dP, kmax, qb, mq.ld, bk, dk, hd);
            bk = bv = 1.0;
        }
    }
    if (gq.tmp) st = tg__accum(n->in[0], gq.buf);
    if (!st && gk.tmp) st = tg__accum(n->in[1], gk.buf);
    if (!st && gv.tmp) st = tg__accum(n->in[2], gv.buf);
    return st;
}
