/* Batched GEMM on strided operands, through cblas_sgemm / cblas_dgemm: the
 * one GEMM backend every product of the library goes through, and the
 * numerics policy it runs under (tensor.h, tg_numerics).
 *
 * A matrix whose last two dims have a unit stride in either order goes to BLAS
 * as it is: row-major with ld = stride[-2], or as the transpose of a row-major
 * matrix with ld = stride[-1]. Anything else is copied once to a contiguous
 * scratch in the output's tape. */
#include "internal.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const char *base; /* first element of batch 0 */
    int64_t bstride[TG_MAX_DIMS]; /* elements, per batch dim */
    bool trans;                   /* pass CblasTrans */
    int64_t ld;
} mat_desc;

bool tg__matrix_layout(const tg_tensor *x, bool *col, int64_t *ld)
{
    int n = x->ndim;
    int64_t rows = x->shape[n - 2], cols = x->shape[n - 1];
    int64_t sr = x->stride[n - 2], sc = x->stride[n - 1];
    if (cols == 1) sc = 1;
    if (rows == 1) sr = cols;
    if (sc == 1 && sr >= (cols > 1 ? cols : 1)) {
        *col = false;
        *ld = sr;
    } else if (sr == 1 && sc >= (rows > 1 ? rows : 1)) {
        *col = true;
        *ld = sc;
    } else {
        return false;
    }
    return true;
}

/* Describes x (rows x cols in its last two dims, op(x) = x^T if t) for BLAS.
 * False if the layout needs a copy. */
static bool describe(const tg_tensor *x, bool t, mat_desc *m)
{
    int n = x->ndim;
    bool col;
    if (!tg__matrix_layout(x, &col, &m->ld)) return false;
    m->trans = col ? !t : t;
    m->base = (const char *)x->data + (size_t)x->offset * tg_dtype_size(x->dtype);
    for (int d = 0; d < n - 2; d++) m->bstride[d] = x->shape[d] == 1 ? 0 : x->stride[d];
    return true;
}

/* Small products: a plain triple loop beats the BLAS call overhead. */
#define SMALL_GEMM(T, NAME)                                                                  \
    static void NAME(int64_t M, int64_t N, int64_t K, T alpha, const T *a, int64_t ars,      \
                     int64_t acs, const T *b, int64_t brs, int64_t bcs, T beta, T *c,         \
                     int64_t ldc)                                                             \
    {                                                                                         \
        for (int64_t i = 0; i < M; i++)                                                       \
            for (int64_t j = 0; j < N; j++) {                                                 \
                T acc = 0;                                                                    \
                for (int64_t k = 0; k < K; k++) acc += a[i * ars + k * acs] * b[k * brs + j * bcs]; \
                T *o = c + i * ldc + j;                                                       \
                *o = beta == 0 ? alpha * acc : alpha * acc + beta * *o;                       \
            }                                                                                 \
    }

SMALL_GEMM(float, small_sgemm)
SMALL_GEMM(double, small_dgemm)

typedef struct {
    const tg_tensor *c;
    mat_desc da, db;
    int64_t M, N, K, ldc;
    double alpha, beta;
    bool small, f64;
    size_t es;
} gemm_job;

/* Product bi of the batch. */
static void gemm_one(const gemm_job *j, int64_t bi)
{
    const tg_tensor *c = j->c;
    int n = c->ndim;
    int64_t oa = 0, ob = 0, oc = c->offset, r = bi;
    for (int d = n - 3; d >= 0; d--) {
        int64_t idx = r % c->shape[d];
        r /= c->shape[d];
        oa += idx * j->da.bstride[d];
        ob += idx * j->db.bstride[d];
        oc += idx * c->stride[d];
    }
    const char *pa = j->da.base + (size_t)oa * j->es, *pb = j->db.base + (size_t)ob * j->es;
    char *pc = (char *)c->data + (size_t)oc * j->es;
    int64_t M = j->M, N = j->N, K = j->K, ldc = j->ldc;
    const mat_desc *da = &j->da, *db = &j->db;
    /* op(A) element (i,k): row-major A -> a[i*ld + k]; trans -> a[k*ld + i]. */
    int64_t ars = da->trans ? 1 : da->ld, acs = da->trans ? da->ld : 1;
    int64_t brs = db->trans ? 1 : db->ld, bcs = db->trans ? db->ld : 1;
    if (j->small) {
        if (j->f64)
            small_dgemm(M, N, K, j->alpha, (const double *)pa, ars, acs, (const double *)pb, brs, bcs, j->beta,
                        (double *)pc, ldc);
        else
            small_sgemm(M, N, K, (float)j->alpha, (const float *)pa, ars, acs, (const float *)pb, brs, bcs,
                        (float)j->beta, (float *)pc, ldc);
    } else if (M == 1) {
        /* a row times a matrix (a linear layer on one position, as generation
         * with a KV cache runs it): gemv reads op(B) once, where gemm would
         * first pack all of it. op(B) is K x N: B stored K x N (y = B^T a) or,
         * transposed, N x K (y = B a). */
        CBLAS_TRANSPOSE t = db->trans ? CblasNoTrans : CblasTrans;
        int rows = (int)(db->trans ? N : K), cols = (int)(db->trans ? K : N);
        if (j->beta == 0) memset(pc, 0, (size_t)N * j->es); /* never 0 * (uninitialised) */
        if (j->f64)
            cblas_dgemv(CblasRowMajor, t, rows, cols, j->alpha, (const double *)pb, (int)db->ld, (const double *)pa,
                        (int)acs, j->beta, (double *)pc, 1);
        else
            cblas_sgemv(CblasRowMajor, t, rows, cols, (float)j->alpha, (const float *)pb, (int)db->ld,
                        (const float *)pa, (int)acs, (float)j->beta, (float *)pc, 1);
    } else if (j->f64) {
        cblas_dgemm(CblasRowMajor, da->trans ? CblasTrans : CblasNoTrans, db->trans ? CblasTrans : CblasNoTrans,
                    (int)M, (int)N, (int)K, j->alpha, (const double *)pa, (int)da->ld, (const double *)pb,
                    (int)db->ld, j->beta, (double *)pc, (int)ldc);
    } else {
        /* As PyTorch's addmm calls sgemm for a row-major result: the
         * column-major product C^T = op(B)^T op(A)^T. OpenBLAS's results
         * depend on the call's shape, so the same call gives the same bits. */
        cblas_sgemm(CblasColMajor, db->trans ? CblasTrans : CblasNoTrans, da->trans ? CblasTrans : CblasNoTrans,
                    (int)N, (int)M, (int)K, (float)j->alpha, (const float *)pb, (int)db->ld, (const float *)pa,
                    (int)da->ld, (float)j->beta, (float *)pc, (int)ldc);
    }
}

/* ---- the numerics policy ------------------------------------------------------------------------ */

const char *tg_numerics_name(tg_numerics n)
{
    switch (n) {
    case TG_NUMERICS_EXACT: return "exact";
    case TG_NUMERICS_FAST: return "fast";
    case TG_NUMERICS_BF16: return "bf16";
    }
    return "?";
}

/* The policies are the values 0, 1, ... that tg_numerics_name names: a new
 * one is its enum value and its name above. */
int tg_numerics_parse(const char *s, tg_numerics *out)
{
    char names[128] = "";
    size_t len = 0;
    for (int v = 0; strcmp(tg_numerics_name((tg_numerics)v), "?") != 0; v++) {
        if (s && out && !strcmp(s, tg_numerics_name((tg_numerics)v))) {
            *out = (tg_numerics)v;
            return TG_OK;
        }
        if (len < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", v ? ", " : "", tg_numerics_name((tg_numerics)v));
    }
    return tg_error_status(TG_EINVAL, "'%.40s' is not one of %s", s ? s : "(null)", names);
}

/* x (float32) rounded to bf16 into buf (numel floats) as a contiguous
 * tensor */
static tg_tensor bf16_operand(float *buf, const tg_tensor *x)
{
    tg_tensor t = *x;
    t.dtype = TG_F32; /* from a bfloat16 x: widened, its rounding below the identity */
    t.data = buf;
    t.offset = 0;
    t.grad_fn = NULL;
    t.storage = NULL;
    tg__contiguous_strides(t.ndim, t.shape, t.stride);
    tg_k_copy(&t, x);
    int64_t n = tg_numel(&t);
#pragma omp parallel for if (n > TG_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) buf[i] = tg__bf16_round(buf[i]);
    return t;
}

/* elements [s, s + len) of x's dim d, as a view header */
static tg_tensor narrowed(const tg_tensor *x, int d, int64_t s, int64_t len)
{
    tg_tensor v = *x;
    v.offset += s * x->stride[d];
    v.shape[d] = len;
    return v;
}

/* An emulated bf16 product: both operands rounded to bf16 into scratch
 * memory (outside any tape: a leaf's gradient lives in the model's), then
 * float32 sgemm. The larger operand is rounded a block of its stored rows
 * at a time (about 8 MiB each), so a product reading a model's output head
 * holds no float32 copy of the whole weight: blocks of c's rows (a stored
 * as op(a)), of c's columns (b stored transposed), or of the inner
 * dimension (the operand stored along it; the blocks' products added). */
static void gemm_emulated(tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha,
                          double beta)
{
    enum { BLOCK = 2 << 20 }; /* floats of the blocked operand's slice */
    int n = c->ndim;
    int64_t M = c->shape[n - 2], N = c->shape[n - 1], K = ta ? a->shape[n - 2] : a->shape[n - 1];
    if (M == 0 || N == 0 || K == 0) { /* no products: beta * c */
        tg_k_gemm(TG_NUMERICS_FAST, c, a, ta, b, tb, alpha, beta);
        return;
    }
    bool big_a = tg_numel(a) >= tg_numel(b);
    /* 0: c's rows, 1: c's columns, 2: the inner dimension */
    int how = big_a ? (ta ? 2 : 0) : (tb ? 1 : 2);
    int64_t total = how == 0 ? M : how == 1 ? N : K;
    int64_t per = tg_numel(big_a ? a : b) / total;
    int64_t step = per > 0 && BLOCK / per > 0 ? BLOCK / per : 1;
    if (step > total) step = total;
    const tg_tensor *small = big_a ? b : a;
    /* the smaller operand whole (or its slice of the inner dimension), then the block */
    size_t nw = how == 2 ? (size_t)(tg_numel(small) / K * step) : (size_t)tg_numel(small);
    size_t ns = (size_t)(step * per);
    float *buf = malloc(sizeof(float) * (nw + ns + 1));
    if (!buf) {
        tg_error("gemm: out of memory rounding the operands to bf16");
        return;
    }
    tg_tensor rw = how == 2 ? *small : bf16_operand(buf, small);
    for (int64_t s0 = 0; s0 < total; s0 += step) {
        int64_t len = total - s0 < step ? total - s0 : step;
        if (how == 0) { /* c's rows s0.. from a's rows */
            tg_tensor as = narrowed(a, n - 2, s0, len), cs = narrowed(c, n - 2, s0, len);
            tg_tensor ra = bf16_operand(buf + nw, &as);
            tg_k_gemm(TG_NUMERICS_FAST, &cs, &ra, ta, &rw, tb, alpha, beta);
        } else if (how == 1) { /* c's columns s0.. from b's rows (b stored transposed) */
            tg_tensor bs = narrowed(b, n - 2, s0, len), cs = narrowed(c, n - 1, s0, len);
            tg_tensor rb = bf16_operand(buf + nw, &bs);
            tg_k_gemm(TG_NUMERICS_FAST, &cs, &rw, ta, &rb, tb, alpha, beta);
        } else { /* inner indices s0..: both operands' slices, the products added into c */
            tg_tensor as = narrowed(a, ta ? n - 2 : n - 1, s0, len), bs = narrowed(b, tb ? n - 1 : n - 2, s0, len);
            tg_tensor rs = bf16_operand(buf, big_a ? &bs : &as), rbig = bf16_operand(buf + nw, big_a ? &as : &bs);
            tg_k_gemm(TG_NUMERICS_FAST, c, big_a ? &rbig : &rs, ta, big_a ? &rs : &rbig, tb, alpha, s0 ? 1.0 : beta);
        }
    }
    free(buf);
}

/* A product with a bfloat16 operand (a frozen weight) under EXACT or FAST
 * (FAST's few rows aside: tg__bf16_rows) and float32's product of it
 * widened: under EXACT into the float32 copy kept with the weight (made
 * once per version of it; the same bits, PyTorch's for these values), under
 * FAST for this product only (a model's weights are never all widened). */
static void gemm_widened(tg_numerics nm, tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb,
                         double alpha, double beta)
{
    bool keep = nm == TG_NUMERICS_EXACT;
    tg_tensor wa, wb;
    float *ba = NULL, *bb = NULL;
    if (tg__bf16_widen(a, keep, &wa, &ba) && tg__bf16_widen(b, keep, &wb, &bb))
        tg_k_gemm(nm, c, &wa, ta, &wb, tb, alpha, beta);
    free(ba);
    free(bb);
}

/* A bfloat16 weight widened whole for one product is float32's size of it
 * (Qwen3-4B's output head: 1.5 GiB). Under FAST a product whose widened b
 * would pass this many bytes runs in blocks of c's columns, each widening
 * its own columns of op(b) only: every element of c is the same dot product
 * over K. EXACT keeps PyTorch's one call (its bits); emulated BF16 rounds
 * its operands in blocks already (gemm_emulated). */
#define WIDEN_BLOCK_BYTES ((int64_t)64 << 20)

static bool gemm_in_blocks(tg_numerics nm, tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb,
                           double alpha, double beta)
{
    int n = c->ndim;
    int64_t N = c->shape[n - 1], bytes = (int64_t)sizeof(float) * tg_numel(b);
    if (b->dtype != TG_BF16 || c->dtype != TG_F32 || nm != TG_NUMERICS_FAST || bytes <= WIDEN_BLOCK_BYTES || N < 2)
        return false;
    int64_t nblocks = (bytes + WIDEN_BLOCK_BYTES - 1) / WIDEN_BLOCK_BYTES, jb = (N + nblocks - 1) / nblocks;
    jb = (jb + 63) / 64 * 64;
    for (int64_t j0 = 0; j0 < N; j0 += jb) {
        tg_tensor cb, bb;
        tg__gemm_columns(c, b, tb, j0, N - j0 < jb ? N - j0 : jb, &cb, &bb);
        tg_k_gemm(nm, &cb, a, ta, &bb, tb, alpha, beta);
    }
    return true;
}

/* OpenBLAS's OpenMP build (and oneDNN's) starts as many threads as
 * omp_get_max_threads() says and waits for every one of them; under
 * OMP_THREAD_LIMIT below that count the team is smaller and OpenBLAS waits
 * forever. Keep the calling thread's count within the limit: nothing else
 * changes, since the limit caps every team anyway. */
void tg__blas_threads(void)
{
    int limit = omp_get_thread_limit();
    if (!omp_in_parallel() && omp_get_max_threads() > limit) omp_set_num_threads(limit);
}

void tg_k_gemm(tg_numerics nm, tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb,
               double alpha, double beta)
{
    tg__blas_threads();
    if (a->dtype == TG_Q8 || b->dtype == TG_Q8) { /* int8 weights: src/tensor/q8_ops.c */
        tg__gemm_q8(nm, c, a, ta, b, tb, alpha, beta);
        return;
    }
    /* FAST: a few rows (generation's) read a bf16 weight in place */
    if (nm == TG_NUMERICS_FAST && b->dtype == TG_BF16 && tg__bf16_rows(c, a, ta, b, tb, alpha, beta, false) <= 0)
        return;
    if (gemm_in_blocks(nm, c, a, ta, b, tb, alpha, beta)) return;
    if ((a->dtype == TG_BF16 || b->dtype == TG_BF16) && (nm != TG_NUMERICS_BF16 || c->dtype != TG_F32)) {
        gemm_widened(nm, c, a, ta, b, tb, alpha, beta);
        return;
    }
    if (nm == TG_NUMERICS_BF16 && c->dtype == TG_F32) {
        int n = c->ndim;
        int64_t K = ta ? a->shape[n - 2] : a->shape[n - 1];
        if (tg_numel(c) > 0 && K > 0 && tg__bf16_native_now()) {
            tg__saved_error e;
            tg__error_push(&e);
            int st = tg__bf16_gemm(c, a, ta, b, tb, alpha, beta);
            if (st >= 0) tg__error_restore(&e); /* done, or emulated below */
            if (st <= 0) return;
        }
        tg__bf16_note_emulated();
        int row = tg__bf16_rows(c, a, ta, b, tb, alpha, beta, true);
        if (row <= 0) return;
        gemm_emulated(c, a, ta, b, tb, alpha, beta);
        return;
    }
    int n = c->ndim;
    int64_t M = c->shape[n - 2], N = c->shape[n - 1];
    int64_t K = ta ? a->shape[n - 2] : a->shape[n - 1];
    bool f64 = c->dtype == TG_F64;
    size_t es = tg_dtype_size(c->dtype);
    int64_t nb = 1;
    for (int d = 0; d < n - 2; d++) nb *= c->shape[d];
    if (M == 0 || N == 0 || nb == 0) return;

    tg_tensor ac = *a, bc = *b;
    mat_desc da, db;
    if (!describe(&ac, ta, &da)) {
        tg_tensor *t = tg_empty(c->tape, a->dtype, a->ndim, a->shape);
        if (!t) return;
        tg_k_copy(t, a);
        ac = *t;
        describe(&ac, ta, &da);
    }
    if (!describe(&bc, tb, &db)) {
        tg_tensor *t = tg_empty(c->tape, b->dtype, b->ndim, b->shape);
        if (!t) return;
        tg_k_copy(t, b);
        bc = *t;
        describe(&bc, tb, &db);
    }
    int64_t ldc = c->stride[n - 2];
    if (M == 1) ldc = N;
    /* PyTorch's choices, whose rounding differs: a plain loop for a batch of
     * tiny products (bmm: fewer than 400 multiply-adds each), else BLAS, one
     * product at a time with BLAS's own threads (OpenBLAS's bits depend on
     * how many threads share a product). */
    bool small = nb > 1 && M * N * K < 400;
    bool par_batches = false;
#ifdef _OPENMP
    par_batches = small && nb >= 64 && !omp_in_parallel();
    /* FAST: a batch of mid-sized products (the attention's per-head ones)
     * one product per thread, each single-threaded, instead of one after
     * another on BLAS's threads (fewer, larger parallel regions) */
    if (nm == TG_NUMERICS_FAST && nb >= 2 * omp_get_max_threads() && M * N * K <= (1 << 22) &&
        !omp_in_parallel())
        par_batches = true;
#endif
    if (K == 0) {
        /* alpha * 0 + beta * c */
        tg_tensor cv = *c;
        if (beta == 0)
            tg_k_fill(&cv, 0.0);
        else if (beta != 1)
            tg_k_binary_scalar(&cv, &cv, beta, TG_BIN_MUL, false);
        return;
    }
    gemm_job job = {c, da, db, M, N, K, ldc, alpha, beta, small, f64, es};
    /* Not inside a (one-thread) parallel region unless batches are split:
     * BLAS then runs its own threads on each product. */
    if (par_batches) {
#pragma omp parallel for schedule(static)
        for (int64_t bi = 0; bi < nb; bi++) gemm_one(&job, bi);
    } else {
        for (int64_t bi = 0; bi < nb; bi++) gemm_one(&job, bi);
    }
}

/* ---- the BLAS this process runs on --------------------------------------------------------------- */

#if TG_HAVE_OPENBLAS_INFO
static char blas_info[320];

static void blas_info_init(void)
{
    int par = openblas_get_parallel();
    const char *kind = par == 2 ? "OpenMP build" : par == 1 ? "pthreads build" : "sequential build";
    const char *cfg = openblas_get_config();
    snprintf(blas_info, sizeof blas_info, "%.250s (%s)", cfg ? cfg : "OpenBLAS", kind);
}
#endif

const char *tg_blas_info(void)
{
#if TG_HAVE_OPENBLAS_INFO
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, blas_info_init);
    return blas_info;
#else
    return "a CBLAS without OpenBLAS's build queries (threading unknown)";
#endif
}
