/* The BF16 numerics' matrix products (tensor.h, tg_numerics; README.md,
 * "Numerics"): float32 operands rounded to bf16 (nearest even), products
 * accumulated in float32.
 *
 * Where the CPU multiplies bf16 in hardware (oneDNN reports AVX512_BF16 or
 * AMX for this process), the rounded operands go to oneDNN's matmul
 * primitives: one primitive per call shape (sizes, strides, alpha, beta),
 * created on first use and kept, run on the OpenMP threads OpenBLAS shares.
 * Without it, up to sixteen rows times a parameter (a Linear in generation:
 * the prompt, then each new id) run on this file's AVX2 kernels, which read
 * the parameter's bf16 copy without expanding it; everything else gemm.c
 * emulates with the same numbers on sgemm (tg_k_gemm).
 *
 * A parameter's bf16 copy (tg_parameter_new's tensors, as a Linear's weight)
 * is kept with its storage (internal.h, tg_storage) for one version of it
 * (tg_tensor_version): every write through the library bumps the version,
 * so the next product makes the copy again; nothing has to say that weights
 * changed. The copies go with the storage's tape (its reset or free).
 *
 * A bfloat16 tensor (a frozen weight) under the other policies: FAST runs up
 * to sixteen rows against it on the same row kernels, its activations not
 * rounded (tg__bf16_rows); EXACT and FAST's other products read it widened
 * to float32 (tg__bf16_widen), under EXACT into a float32 copy kept as the
 * bf16 copies are, within half the machine's memory. */
#define _DEFAULT_SOURCE /* madvise's MADV_HUGEPAGE (Linux), sysconf's _SC_PHYS_PAGES */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif
#if TG_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#if TG_HAVE_DNNL && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TG_BF16_DOT 1
#else
#define TG_BF16_DOT 0
#endif

/* ---- rounding ---------------------------------------------------------------------------------- */

#define bf16_bits tg__bf16_bits

void tg_numerics_weights_changed(void) {} /* deprecated: versions say it (tensor.h) */

/* ---- the CPU ------------------------------------------------------------------------------------ */

static atomic_bool force_emulated;

void tg_numerics_bf16_set_emulated(bool on) { atomic_store(&force_emulated, on); }

#if TG_HAVE_DNNL
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static bool dnnl_ok;
static bool bf16_units; /* AVX512_BF16 or AMX: the row kernel's vdpbf16ps runs */

/* TAPEGRAD_BF16_ONEDNN=1 runs BF16 products on oneDNN even on a CPU
 * without bf16 units (oneDNN then widens the operands itself: slower than
 * the emulation here): the tests of the oneDNN path run on any AVX-512 CPU
 * (tests/meson.build, test_bf16_onednn). */
static void dnnl_init(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    bool bf16 = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 ||
                (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
    const char *force = getenv("TAPEGRAD_BF16_ONEDNN");
    if (!bf16 && !(force && !strcmp(force, "1"))) return;
    bf16_units = bf16 && (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return;
    if (dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(engine);
        return;
    }
    dnnl_ok = true;
}

static bool hardware(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, dnnl_init);
    return dnnl_ok;
}
#else
static bool hardware(void) { return false; }
#endif

bool tg_numerics_bf16_native(void) { return hardware(); }

bool tg__bf16_native_now(void) { return hardware() && !atomic_load(&force_emulated); }

/* The kernels the products ran on so far, as oneDNN names them. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char kernels[160];
static bool emulated_ran;

static TG_UNUSED void note_kernel(const char *name)
{
    if (!name || strstr(kernels, name)) return;
    size_t n = strlen(kernels);
    snprintf(kernels + n, sizeof kernels - n, "%s%s", n ? ", " : "", name);
}

void tg__bf16_note_emulated(void)
{
    if (emulated_ran) return;
    pthread_mutex_lock(&lock);
    emulated_ran = true;
    pthread_mutex_unlock(&lock);
}

const char *tg_numerics_bf16_kernel(void)
{
    static _Thread_local char out[sizeof kernels + 64];
    pthread_mutex_lock(&lock);
    snprintf(out, sizeof out, "%s%s%s", kernels, *kernels && emulated_ran ? ", " : "",
             emulated_ran ? "emulated (sgemm on bf16-rounded operands)" : "");
    pthread_mutex_unlock(&lock);
    return out;
}

/* ---- operands ----------------------------------------------------------------------------------- */

/* A bf16 copy of a float32 tensor x, compact, its matrices (last two dims)
 * in x's own orientation: element (r, c) of matrix i at i * R * C + r * C + c,
 * or, when x stores its matrices transposed (col), + c * R + r. */
typedef struct {
    uint16_t *data;
    bool col;
    int64_t bstride[TG_MAX_DIMS]; /* matrices, per batch dim (0: broadcast) */
} bf16_mat;


static int64_t nbatch(const tg_tensor *x)
{
    int64_t nb = 1;
    for (int d = 0; d < x->ndim - 2; d++) nb *= x->shape[d];
    return nb;
}

/* Fills dst (numel(x) bf16) from x; false with an error if out of memory. */
static bool convert(uint16_t *dst, const tg_tensor *x, bool *col_out)
{
    int n = x->ndim;
    int64_t rows = x->shape[n - 2], cols = x->shape[n - 1], nb = nbatch(x), ld;
    bool col;
    float *tmp = NULL;
    const tg_tensor *src = x;
    tg_tensor c;
    if (!tg__matrix_layout(x, &col, &ld)) {
        /* any other layout: a contiguous float32 copy first */
        tmp = malloc(sizeof(float) * (size_t)(nb * rows * cols));
        if (!tmp) {
            tg_error("gemm: out of memory rounding an operand to bf16");
            return false;
        }
        c = *x;
        c.dtype = TG_F32; /* a bfloat16 x widened exactly: rounding it back is the identity */
        c.data = tmp;
        c.offset = 0;
        c.grad_fn = NULL;
        c.storage = NULL;
        tg__contiguous_strides(n, c.shape, c.stride);
        tg_k_copy(&c, x);
        src = &c;
        col = false;
        ld = cols;
    }
    int64_t inner = col ? rows : cols, outer = col ? cols : rows, total = nb * outer;
#pragma omp parallel for if (nb * rows * cols > TG_PAR_MIN) schedule(static)
    for (int64_t t = 0; t < total; t++) {
        int64_t bi = t / outer, o = t % outer, off = src->offset, r = bi;
        for (int d = n - 3; d >= 0; d--) {
            off += (r % src->shape[d]) * src->stride[d];
            r /= src->shape[d];
        }
        uint16_t *q = dst + t * inner;
        if (src->dtype == TG_BF16) { /* already bf16: its bits */
            memcpy(q, (const uint16_t *)src->data + off + o * ld, sizeof *q * (size_t)inner);
            continue;
        }
        const float *s = (const float *)src->data + off + o * ld;
        for (int64_t i = 0; i < inner; i++) q[i] = bf16_bits(s[i]);
    }
    free(tmp);
    *col_out = col;
    return true;
}

static TG_UNUSED void fill_bstrides(bf16_mat *m, const tg_tensor *x)
{
    int n = x->ndim;
    int64_t s = x->shape[n - 2] * x->shape[n - 1];
    for (int d = n - 3; d >= 0; d--) {
        m->bstride[d] = x->shape[d] == 1 ? 0 : s;
        s *= x->shape[d];
    }
}

/* ---- kept copies ------------------------------------------------------------------------------- */

/* Which tensor a copy was made from: its storage, offset, shape and strides. */
typedef struct {
    const void *data;
    int64_t offset;
    int ndim;
    int64_t shape[TG_MAX_DIMS], stride[TG_MAX_DIMS];
} operand_key;

static void key_set(operand_key *k, const tg_tensor *x)
{
    memset(k, 0, sizeof *k);
    k->data = x->data;
    k->offset = x->offset;
    k->ndim = x->ndim;
    memcpy(k->shape, x->shape, sizeof k->shape);
    memcpy(k->stride, x->stride, sizeof k->stride);
}

static bool key_is(const operand_key *k, const tg_tensor *x)
{
    if (k->data != x->data || k->offset != x->offset || k->ndim != x->ndim) return false;
    for (int d = 0; d < x->ndim; d++)
        if (k->shape[d] != x->shape[d] || k->stride[d] != x->stride[d]) return false;
    return true;
}

/* A copy kept with a storage: of one view of it (the key's offset, shape
 * and strides: a weight is read as W and as W^T), in one dtype (a float32
 * parameter's bf16 copy, a bfloat16 weight's float32 one), at one version. */
struct tg__derived {
    tg__derived *next;
    operand_key key;
    tg_dtype dtype;
    int64_t version;
    void *copy;
    size_t bytes; /* allocated */
    bool col;
};

/* the bytes of every copy alive (tg_numerics_copy_bytes) */
static size_t copy_bytes;

size_t tg_numerics_copy_bytes(void)
{
    pthread_mutex_lock(&lock);
    size_t b = copy_bytes;
    pthread_mutex_unlock(&lock);
    return b;
}

void tg__derived_free(tg__derived *d)
{
    pthread_mutex_lock(&lock);
    for (const tg__derived *p = d; p; p = p->next) copy_bytes -= p->bytes;
    pthread_mutex_unlock(&lock);
    while (d) {
        tg__derived *next = d->next;
        free(d->copy);
        free(d);
        d = next;
    }
}

void tg__derived_drop(const tg_tensor *x)
{
    tg_storage *st = x ? x->storage : NULL;
    if (!st || !st->derived) return;
    pthread_mutex_lock(&lock);
    tg__derived *d = st->derived;
    st->derived = NULL;
    pthread_mutex_unlock(&lock);
    tg__derived_free(d);
}

/* Memory for a copy of `bytes`. A large copy (a model's is its size in
 * bf16) is aligned to 2 MiB and asked to live on transparent huge pages
 * where Linux offers them: its first writes then fault a page per 2 MiB, not
 * per 4 KiB (Qwen3-0.6B's first token in generation: 0.64 -> 0.29 s, docs/performance.md).
 * free() releases it. */
static void *copy_alloc(size_t bytes)
{
    if (!bytes) bytes = 1;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    enum { HUGE = 2 << 20 };
    if (bytes >= HUGE) {
        size_t rounded = (bytes + HUGE - 1) / HUGE * HUGE;
        void *p = aligned_alloc(HUGE, rounded);
        if (p) (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: refused, the copy works as before */
        return p;
    }
#endif
    return malloc(bytes);
}

/* x's copy in dtype dt kept with its storage, added (empty, no version)
 * when missing; NULL if out of memory. Called under lock. */
static tg__derived *derived_of(const tg_tensor *x, tg_dtype dt)
{
    tg_storage *st = x->storage;
    tg__derived *p = st->derived;
    while (p && !(p->dtype == dt && key_is(&p->key, x))) p = p->next;
    if (p) return p;
    p = calloc(1, sizeof *p);
    if (!p) return NULL;
    key_set(&p->key, x);
    p->dtype = dt;
    p->version = -1;
    p->next = st->derived;
    st->derived = p;
    tg__tape_keep_derived(st);
    return p;
}

/* Room for `bytes` in p's copy (the old contents are not kept): false if
 * out of memory. Called under lock. */
static bool derived_reserve(tg__derived *p, size_t bytes)
{
    p->version = -1; /* not valid until made */
    if (p->bytes >= bytes) return true;
    void *c = copy_alloc(bytes);
    if (!c) return false;
    free(p->copy);
    copy_bytes += bytes - p->bytes;
    p->copy = c;
    p->bytes = bytes;
    return true;
}

/* The bf16 copy of parameter x at its storage's version, made when missing
 * or stale; NULL with an error if out of memory. Called under lock. */
static const uint16_t *param_bf16(const tg_tensor *x, bool *col)
{
    tg__derived *p = derived_of(x, TG_BF16);
    if (p && p->version == x->storage->version) {
        *col = p->col;
        return p->copy;
    }
    if (!p || !derived_reserve(p, sizeof(uint16_t) * (size_t)tg_numel(x))) {
        tg_error("gemm: out of memory for a parameter's bf16 copy");
        return NULL;
    }
    if (!convert(p->copy, x, &p->col)) return NULL;
    p->version = x->storage->version;
    *col = p->col;
    return p->copy;
}

/* ---- bfloat16 weights widened (EXACT and FAST) -------------------------------------------------- */

/* The float32 layout a bfloat16 x is widened into for a product: its
 * matrices in x's orientation (row- or column-major: sgemm is then called
 * with the flags and shapes x itself would get, so the product has the bits
 * of the same product of a float32 tensor holding these values), compact, a
 * broadcast batch dim kept broadcast. out: x's header as float32 with those
 * strides, its data not set; returns the floats it spans. */
static int64_t widened_layout(const tg_tensor *x, tg_tensor *out)
{
    int n = x->ndim;
    bool col = false;
    int64_t ld;
    if (n >= 2 && !tg__matrix_layout(x, &col, &ld)) col = false;
    /* dims from the fastest: the matrix's inner one first */
    int order[TG_MAX_DIMS], k = 0;
    if (n >= 2) {
        order[k++] = col ? n - 2 : n - 1;
        order[k++] = col ? n - 1 : n - 2;
    }
    for (int d = (n >= 2 ? n - 3 : n - 1); d >= 0; d--) order[k++] = d;
    *out = *x;
    int64_t size = 1;
    for (int i = 0; i < n; i++) {
        int d = order[i];
        bool broadcast = d < n - 2 && x->stride[d] == 0;
        out->stride[d] = broadcast ? 0 : size;
        if (!broadcast) size *= x->shape[d] > 0 ? x->shape[d] : 1;
    }
    out->dtype = TG_F32;
    out->data = NULL;
    out->offset = 0;
    out->storage = NULL;
    out->is_param = false;
    return size;
}

/* x's values, exactly, into out (widened_layout's, over `size` floats). */
static void widen_into(const tg_tensor *out, const tg_tensor *x, int64_t size)
{
    int n = x->ndim;
    tg_tensor src = *x, dst = *out; /* each value once: broadcast dims as size 1 */
    bool same = true; /* x laid out as out: one flat loop, on all threads */
    for (int d = 0; d < n; d++) {
        if (out->stride[d] == 0) src.shape[d] = dst.shape[d] = 1;
        same &= x->shape[d] == 1 || x->stride[d] == out->stride[d];
    }
    if (!same) {
        tg_k_copy(&dst, &src);
        return;
    }
    enum { CHUNK = 1 << 16 };
    const uint16_t *s = (const uint16_t *)x->data + x->offset;
    float *d = out->data;
#pragma omp parallel for if (size > TG_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < size; i += CHUNK) tg__bf16_to_f32_n(d + i, s + i, size - i < CHUNK ? size - i : CHUNK);
}

/* The most bytes the kept copies may hold for a new float32 copy to be
 * made (tensor.h, tg_numerics_copy_bytes): half the machine's physical
 * memory, no bound where the system does not say it. */
static size_t copy_limit(void)
{
    static size_t limit;
    if (!limit) { /* under lock */
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        limit = pages > 0 && page > 0 ? (size_t)pages / 2 * (size_t)page : SIZE_MAX;
    }
    return limit;
}

/* The float32 copy of bfloat16 x kept with its storage at its version, in
 * out's layout (`size` floats), made when missing or stale; NULL when it
 * would take the kept copies past copy_limit() or memory is short. Called
 * under lock. */
static float *widened_kept(const tg_tensor *x, const tg_tensor *out, int64_t size)
{
    size_t bytes = sizeof(float) * (size_t)size;
    tg__derived *p = derived_of(x, TG_F32);
    if (!p) return NULL;
    if (p->version == x->storage->version) return p->copy;
    if (p->bytes < bytes && copy_bytes + (bytes - p->bytes) > copy_limit()) return NULL;
    if (!derived_reserve(p, bytes)) return NULL;
    tg_tensor dst = *out;
    dst.data = p->copy;
    widen_into(&dst, x, size);
    p->version = x->storage->version;
    return p->copy;
}

bool tg__bf16_widen(const tg_tensor *x, bool keep, tg_tensor *out, float **buf)
{
    *out = *x;
    *buf = NULL;
    if (x->dtype != TG_BF16) return true;
    int64_t size = widened_layout(x, out);
    if (keep && x->storage) {
        pthread_mutex_lock(&lock);
        float *kept = widened_kept(x, out, size);
        pthread_mutex_unlock(&lock);
        if (kept) {
            out->data = kept;
            return true;
        }
    }
    *buf = malloc(sizeof(float) * (size_t)size);
    if (!*buf) {
        tg_error("gemm: out of memory widening a bfloat16 operand (%lld elements)", (long long)size);
        return false;
    }
    out->data = *buf;
    widen_into(out, x, size);
    return true;
}

#define bf16_f32 tg__bf16_to_f32

int tg__bf16_prepare(const tg_tensor *w, tg_numerics nm)
{
    if (nm == TG_NUMERICS_EXACT && w->dtype == TG_BF16 && w->storage) {
        tg_tensor out;
        int64_t size = widened_layout(w, &out);
        pthread_mutex_lock(&lock);
        (void)widened_kept(w, &out, size); /* NULL: left to the products, each widening for itself */
        pthread_mutex_unlock(&lock);
        return 0;
    }
    if (nm != TG_NUMERICS_BF16 || !w->is_param || !w->storage || w->dtype != TG_F32 || w->ndim != 2) return 1;
    pthread_mutex_lock(&lock);
    bool col = false;
    const uint16_t *c = param_bf16(w, &col);
    pthread_mutex_unlock(&lock);
    return c ? 0 : -1;
}

/* ---- a few rows against bf16 weights ----------------------------------------------------------- */

enum { ROW_BLOCK = 16, ROW_MAX_M = 16 /* rows of a read by the row kernels */ };

/* y[j] = sum_k w[j][k] a[k] for the rows j of a bf16 matrix (a parameter's
 * copy, a bfloat16 weight): w widened exactly, a float32, multiply-adds and
 * accumulation in float32, in an order of the kernel's. Under BF16 a is
 * rounded to bf16 first, so each product is exact in float32 (bf16's
 * tolerance, docs/numerics.md); under FAST it is not (float32 activations
 * times the weight's values: float32's product to float32 rounding, as
 * llama.cpp multiplies BF16 weights on CPUs without bf16 units). The AVX2
 * kernel reads a row in blocks of sixteen: a 256-bit load holds sixteen
 * bf16 values, the even ones become float32 by a shift, the odd ones by a
 * mask, and `a` is stored once with each block's even elements before its
 * odd ones (ae) to meet them. Two blocks per step, four chains of
 * multiply-adds: one row at a time streams the weight at the machine's read
 * bandwidth (several rows at once, or prefetches, measured slower on two
 * cores). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ROW_AVX2 1
/* row w against ae (K rounded down to sixteen) and a (the tail) */
__attribute__((target("avx2,fma"))) static float row_bf16_avx2(const uint16_t *w, const float *ae, const float *a,
                                                               int64_t K)
{
    const __m256i odd = _mm256_set1_epi32((int)0xffff0000u);
    __m256 e0 = _mm256_setzero_ps(), o0 = e0, e1 = e0, o1 = e0;
    int64_t k = 0;
    for (; k + 2 * ROW_BLOCK <= K; k += 2 * ROW_BLOCK) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + k));
        __m256i u = _mm256_loadu_si256((const __m256i *)(w + k + ROW_BLOCK));
        e0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), _mm256_loadu_ps(ae + k), e0);
        o0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, odd)), _mm256_loadu_ps(ae + k + 8), o0);
        e1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(u, 16)), _mm256_loadu_ps(ae + k + 16), e1);
        o1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(u, odd)), _mm256_loadu_ps(ae + k + 24), o1);
    }
    if (k + ROW_BLOCK <= K) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + k));
        e0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), _mm256_loadu_ps(ae + k), e0);
        o0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, odd)), _mm256_loadu_ps(ae + k + 8), o0);
        k += ROW_BLOCK;
    }
    __m256 t = _mm256_add_ps(_mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    float s = _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
    for (; k < K; k++) s += bf16_f32(w[k]) * a[k];
    return s;
}

/* rows ae[0..m) (stride K) against the row w, m <= 4: w's blocks read and
 * widened once for the m rows */
__attribute__((target("avx2,fma"))) static void rows_bf16_avx2(const uint16_t *w, const float *ae, const float *a,
                                                               int64_t K, int m, float *out)
{
    const __m256i odd = _mm256_set1_epi32((int)0xffff0000u);
    __m256 e[4], o[4];
    for (int i = 0; i < 4; i++) e[i] = o[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + ROW_BLOCK <= K; k += ROW_BLOCK) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + k));
        __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), wo = _mm256_castsi256_ps(_mm256_and_si256(v, odd));
        for (int i = 0; i < m; i++) {
            e[i] = _mm256_fmadd_ps(we, _mm256_loadu_ps(ae + i * K + k), e[i]);
            o[i] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(ae + i * K + k + 8), o[i]);
        }
    }
    __m256 s01 = _mm256_hadd_ps(_mm256_add_ps(e[0], o[0]), _mm256_add_ps(e[1], o[1]));
    __m256 s23 = _mm256_hadd_ps(_mm256_add_ps(e[2], o[2]), _mm256_add_ps(e[3], o[3]));
    __m256 t = _mm256_hadd_ps(s01, s23);
    float lanes[4];
    _mm_storeu_ps(lanes, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
    for (int i = 0; i < m; i++) {
        float si = lanes[i];
        for (int64_t j = k; j < K; j++) si += bf16_f32(w[j]) * a[i * K + j];
        out[i] = si;
    }
}
#endif

int tg__bf16_rows(tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha, double beta,
                  bool round_a)
{
    int n = c->ndim;
    /* a bfloat16 matrix (a frozen weight) in place when it is stored
     * row-major, a float32 parameter through its bf16 copy (BF16 only) */
    bool direct = b->dtype == TG_BF16 && b->ndim == 2 && tg_is_contiguous(b);
    if (ta || !tb || !(direct || (round_a && b->is_param && b->storage && b->dtype == TG_F32)) || b->ndim != 2 ||
        a->dtype != TG_F32 || c->dtype != TG_F32 || a->ndim != n)
        return 1;
    int64_t N = b->shape[0], K = b->shape[1], M = a->shape[n - 2];
    if (M < 1 || M > ROW_MAX_M || c->shape[n - 1] != N || a->shape[n - 1] != K || tg_numel(a) != M * K ||
        tg_numel(c) != M * N)
        return 1;
    float *ar = malloc(sizeof *ar * (size_t)(2 * M * K + 1)), *ae = ar + M * K;
    if (!ar) return tg_error("gemm: out of memory for the rows of a product with bf16 weights"), -1;
    const float *ad = (const float *)a->data + a->offset;
    int64_t as = a->stride[n - 1], am = a->stride[n - 2], cs = c->stride[n - 1], cm = c->stride[n - 2];
    int64_t kb = K / ROW_BLOCK * ROW_BLOCK;
    for (int64_t i = 0; i < M; i++) {
        float *ri = ar + i * K, *ei = ae + i * K;
        for (int64_t k = 0; k < K; k++) ri[k] = round_a ? tg__bf16_round(ad[i * am + k * as]) : ad[i * am + k * as];
        for (int64_t k = 0; k < kb; k++) { /* each block's even elements, then its odd ones */
            int64_t r = k % ROW_BLOCK;
            ei[k] = ri[k - r + (r < ROW_BLOCK / 2 ? 2 * r : 2 * r - ROW_BLOCK + 1)];
        }
    }
    if (!direct) pthread_mutex_lock(&lock); /* the copy is not remade while it is read */
    bool col = false;
    const uint16_t *w = direct ? (const uint16_t *)b->data + b->offset : param_bf16(b, &col);
    int st = !w ? -1 : col ? 1 : 0;
    if (st == 0) {
        float *y = (float *)c->data + c->offset, fa = (float)alpha, fb = (float)beta;
        bool vec = tg__vec_math();
        /* rows dealt out in chunks of ~128 KiB of the copy as threads come
         * free: on a shared machine one thread is often held up, and equal
         * halves then wait for it (measured: steps of Qwen3-0.6B's
         * generation ~5% faster than schedule(static)) */
        int64_t chunk = (128 << 10) / (2 * K) > 8 ? (128 << 10) / (2 * K) : 8;
#pragma omp parallel for if (M * N * K > TG_PAR_MIN) schedule(dynamic, chunk)
        for (int64_t j = 0; j < N; j++) {
            const uint16_t *wj = w + j * K;
            float s[ROW_MAX_M];
            for (int64_t i0 = 0; i0 < M; i0 += 4) {
                int m = (int)(M - i0 < 4 ? M - i0 : 4);
#if defined(ROW_AVX2)
                if (vec && M == 1)
                    s[0] = row_bf16_avx2(wj, ae, ar, K);
                else if (vec)
                    rows_bf16_avx2(wj, ae + i0 * K, ar + i0 * K, K, m, s + i0);
                else
#endif
                    for (int i = 0; i < m; i++) {
                        float si = 0;
                        for (int64_t k = 0; k < K; k++) si += bf16_f32(wj[k]) * ar[(i0 + i) * K + k];
                        s[i0 + i] = si;
                    }
            }
            for (int64_t i = 0; i < M; i++) {
                float *yij = y + i * cm + j * cs;
                *yij = fb == 0 ? fa * s[i] : fa * s[i] + fb * *yij;
            }
        }
        (void)vec;
    }
    if (!direct) pthread_mutex_unlock(&lock);
    free(ar);
    return st;
}

#if TG_HAVE_DNNL

/* ---- the other operands ----------------------------------------------------------------------- */

/* Two buffers for the operands that are not parameters. Inside one node's
 * backward (tg__bf16_scope_begin, src/autograd/engine.c) a tensor's copy
 * serves every product of the node: a Linear's output gradient is rounded
 * once for its input's and its weight's gradient. Nothing the node reads
 * changes or is freed while it runs. */
typedef struct {
    operand_key key;
    uint64_t scope; /* 0: made outside a node's backward, never reused */
    uint16_t *buf;
    size_t cap;
    bool col;
} operand_buf;

static operand_buf operands[2];
static _Thread_local uint64_t node_scope;
static atomic_uint_fast64_t next_scope = 1;

uint64_t tg__bf16_scope_begin(bool on)
{
    uint64_t prev = node_scope;
    node_scope = on ? (uint64_t)atomic_fetch_add(&next_scope, 1) : 0;
    return prev;
}

void tg__bf16_scope_end(uint64_t prev) { node_scope = prev; }

/* x's bf16 copy in one of the buffers, not buffer `keep` (the other
 * operand's, or -1); *used: the buffer. NULL with an error if out of memory. */
static const uint16_t *operand_bf16(const tg_tensor *x, int keep, int *used, bool *col)
{
    for (int i = 0; node_scope && i < 2; i++)
        if (operands[i].scope == node_scope && key_is(&operands[i].key, x)) {
            *used = i;
            *col = operands[i].col;
            return operands[i].buf;
        }
    int i = keep == 0 ? 1 : 0;
    operand_buf *o = &operands[i];
    size_t n = (size_t)tg_numel(x);
    if (o->cap < n) {
        uint16_t *p = realloc(o->buf, sizeof(uint16_t) * n);
        if (!p) {
            tg_error("gemm: out of memory rounding an operand to bf16");
            return NULL;
        }
        o->buf = p;
        o->cap = n;
    }
    o->scope = 0;
    if (!convert(o->buf, x, &o->col)) return NULL;
    key_set(&o->key, x);
    o->scope = node_scope;
    *used = i;
    *col = o->col;
    return o->buf;
}

/* A bfloat16 x whose matrices are compact in one orientation, back to back
 * (a frozen weight): its own data, read as a copy would be; NULL otherwise
 * (the caller copies it). */
static const uint16_t *bf16_in_place(const tg_tensor *x, bool *col)
{
    int n = x->ndim;
    int64_t ld, R = x->shape[n - 2], C = x->shape[n - 1];
    if (x->dtype != TG_BF16 || !tg__matrix_layout(x, col, &ld) || ld != (*col ? R : C)) return NULL;
    int64_t s = R * C;
    for (int d = n - 3; d >= 0; d--) {
        if (x->shape[d] != 1 && x->stride[d] != s) return NULL;
        s *= x->shape[d];
    }
    return (const uint16_t *)x->data + x->offset;
}

/* ---- primitives --------------------------------------------------------------------------------- */

typedef struct {
    int64_t M, N, K;
    int64_t sa[2], sb[2], sc[2];
    float alpha, beta;
} prim_key;

typedef struct {
    prim_key key;
    dnnl_primitive_t prim; /* NULL: oneDNN refused the shape (the caller emulates) */
    dnnl_memory_desc_t da, db, dc;
    dnnl_memory_t ma, mb, mc;
    uint64_t used;
} prim_entry;

/* The primitives, run under lock; when full, the least recently used goes.
 * (oneDNN's kernels share one scratchpad between calls in Debian's build:
 * two may not run at once.) */
typedef struct {
    prim_entry *e;
    int n, cap;
} prim_cache;

static prim_entry whole_entries[96];
static prim_cache whole = {whole_entries, 0, 96};
static uint64_t prim_clock;

static void prim_destroy(prim_entry *e)
{
    if (e->ma) dnnl_memory_destroy(e->ma);
    if (e->mb) dnnl_memory_destroy(e->mb);
    if (e->mc) dnnl_memory_destroy(e->mc);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    e->ma = e->mb = e->mc = NULL;
    e->prim = NULL;
}

/* The entry for k in cache c, created on first use; NULL if oneDNN refuses
 * the shape (now or before). Called under lock. */
static prim_entry *prim_get(prim_cache *c, const prim_key *k)
{
    for (int i = 0; i < c->n; i++)
        if (!memcmp(&c->e[i].key, k, sizeof *k)) {
            c->e[i].used = ++prim_clock;
            return c->e[i].prim ? &c->e[i] : NULL;
        }
    dnnl_dims_t ad = {k->M, k->K}, bd = {k->K, k->N}, cd = {k->M, k->N};
    dnnl_dims_t as = {k->sa[0], k->sa[1]}, bs = {k->sb[0], k->sb[1]}, cs = {k->sc[0], k->sc[1]};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    prim_entry e;
    memset(&e, 0, sizeof e);
    e.key = *k;
    e.used = ++prim_clock;
    bool ok = dnnl_memory_desc_init_by_strides(&e.da, 2, ad, dnnl_bf16, as) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&e.db, 2, bd, dnnl_bf16, bs) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&e.dc, 2, cd, dnnl_f32, cs) == dnnl_success &&
              dnnl_matmul_desc_init(&md, &e.da, &e.db, NULL, &e.dc) == dnnl_success &&
              dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && k->alpha != 1.0f) ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success;
    if (ok && k->beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, k->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) == dnnl_success &&
         dnnl_primitive_create(&e.prim, pd) == dnnl_success &&
         dnnl_memory_create(&e.ma, &e.da, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&e.mb, &e.db, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&e.mc, &e.dc, engine, DNNL_MEMORY_NONE) == dnnl_success;
    /* oneDNN's reference kernels ("ref:any", for layouts its fast ones do
     * not take) are far slower than the emulation: refused */
    const char *impl = NULL;
    ok = ok && dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
         strncmp(impl, "ref", 3) != 0;
    if (ok) note_kernel(impl);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) prim_destroy(&e); /* kept as refused */
    if (c->n == c->cap) { /* the least recently used goes */
        int lru = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[lru].used) lru = i;
        prim_destroy(&c->e[lru]);
        c->e[lru] = c->e[--c->n];
    }
    c->e[c->n] = e;
    return ok ? &c->e[c->n++] : (c->n++, NULL);
}

/* strides of op(x) (rows, cols of the product's operand) for a compact
 * matrix of R x C in orientation col, op = transpose if t */
static void op_strides(int64_t R, int64_t C, bool col, bool t, int64_t s[2])
{
    int64_t sr = col ? 1 : C, sc = col ? R : 1; /* of x itself */
    /* a single row or column: either stride serves; keep them distinct */
    if (R == 1 && col) sr = C;
    if (C == 1 && !col) sc = R;
    s[0] = t ? sc : sr;
    s[1] = t ? sr : sc;
}

/* ---- one row times a matrix -------------------------------------------------------------------- */

#if TG_BF16_DOT
/* y[j] = alpha sum_k a[k] op(B)[k][j] (+ beta y[j]) for j in [j0, j1), a
 * (K) and op(B) bf16, float32 accumulation. kc: column j of op(B) is K
 * contiguous values at w + j ld, a dot product (vdpbf16ps takes 32 pairs
 * per instruction); else row k of op(B) is N contiguous values at
 * w + k ld, added 16 columns at a time (a product of two bf16 values is
 * exact in float32, so a fused multiply-add rounds as the sum does). */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void
row_part(float *y, const uint16_t *a, const uint16_t *w, int64_t ld, bool kc, int64_t j0, int64_t j1, int64_t K,
         float alpha, float beta)
{
    if (kc) {
        for (int64_t j = j0; j < j1; j++) {
            const uint16_t *r = w + j * ld;
            __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
            int64_t k = 0;
            for (; k + 64 <= K; k += 64) {
                acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(r + k), (__m512bh)_mm512_loadu_si512(a + k));
                acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(r + k + 32),
                                        (__m512bh)_mm512_loadu_si512(a + k + 32));
            }
            for (; k + 32 <= K; k += 32)
                acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(r + k), (__m512bh)_mm512_loadu_si512(a + k));
            if (k < K) {
                __mmask32 m = (__mmask32)((1ull << (K - k)) - 1);
                acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_maskz_loadu_epi16(m, r + k),
                                        (__m512bh)_mm512_maskz_loadu_epi16(m, a + k));
            }
            float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
            y[j] = beta == 0 ? alpha * s : alpha * s + beta * y[j];
        }
        return;
    }
    for (int64_t j = j0; j < j1; j += 16) {
        __mmask16 m = (__mmask16)(j1 - j >= 16 ? 0xffff : (1u << (j1 - j)) - 1);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t k = 0; k < K; k++) {
            __m512i v = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, w + k * ld + j)), 16);
            __m512 ak = _mm512_castsi512_ps(_mm512_set1_epi32((int)((uint32_t)a[k] << 16)));
            acc = _mm512_fmadd_ps(_mm512_castsi512_ps(v), ak, acc);
        }
        __m512 out = _mm512_mul_ps(acc, _mm512_set1_ps(alpha));
        if (beta != 0) out = _mm512_add_ps(out, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + j), _mm512_set1_ps(beta)));
        _mm512_mask_storeu_ps(y + j, m, out);
    }
}
#endif

/* Where product bi of the batch finds its operands' copies and its output. */
static void batch_offsets(const tg_tensor *c, const bf16_mat *ma, const bf16_mat *mb, int64_t bi, int64_t *oa,
                          int64_t *ob, int64_t *oc)
{
    *oa = *ob = 0;
    *oc = c->offset;
    for (int d = c->ndim - 3; d >= 0; d--) {
        int64_t idx = bi % c->shape[d];
        bi /= c->shape[d];
        *oa += idx * ma->bstride[d];
        *ob += idx * mb->bstride[d];
        *oc += idx * c->stride[d];
    }
}

/* ---- the product -------------------------------------------------------------------------------- */

/* Whether float32 parameter x keeps its bf16 copy (param_bf16) in a
 * product of M rows: in generation's few rows (each id reads every weight).
 * Training and evaluation products round a weight into the operand buffers
 * each time (a large one in blocks, tg__bf16_gemm), frozen ones included
 * (a LoRA base), so that a step holds no copy of the weights: the block
 * just rounded is read from cache, and the weight from memory once as
 * float32, where a kept copy is read once as bf16. */
static bool kept_param(const tg_tensor *x, int64_t M)
{
    return x->is_param && x->storage && x->dtype == TG_F32 && M <= ROW_MAX_M;
}

static int onednn_gemm(tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha,
                       double beta)
{
    int n = c->ndim;
    int64_t M = c->shape[n - 2], N = c->shape[n - 1], K = ta ? a->shape[n - 2] : a->shape[n - 1];
    int64_t nb = nbatch(c);
    pthread_mutex_lock(&lock);
    bf16_mat ma = {0}, mb = {0};
    const uint16_t *pa = NULL, *pb = NULL;
    int ia = -1, ib = -1;
    if ((pa = bf16_in_place(a, &ma.col)) == NULL)
        pa = kept_param(a, M) ? param_bf16(a, &ma.col) : operand_bf16(a, -1, &ia, &ma.col);
    if (pa && (pb = bf16_in_place(b, &mb.col)) == NULL)
        pb = kept_param(b, M) ? param_bf16(b, &mb.col) : operand_bf16(b, ia, &ib, &mb.col);
    bool ok = pa && pb;
    if (ok) {
        fill_bstrides(&ma, a);
        fill_bstrides(&mb, b);
        ma.data = (uint16_t *)pa;
        mb.data = (uint16_t *)pb;
    }
    int64_t ar = a->shape[n - 2], ac = a->shape[n - 1], br = b->shape[n - 2], bc = b->shape[n - 1];
    (void)br;
#if TG_BF16_DOT
    /* a row times matrices (generation with the KV cache: each weight, each
     * head's keys and values): the library's row kernel, which reads each
     * matrix once, over (batch, column block) tasks */
    bool kc = tb ? !mb.col : mb.col, nc = tb ? mb.col : !mb.col;
    if (ok && bf16_units && M == 1 && c->stride[n - 1] == 1 && (kc || nc)) {
        int64_t jc = kc ? 256 : 64, nj = (N + jc - 1) / jc, ld = kc ? K : N;
#pragma omp parallel for if (nb * N * K > TG_PAR_MIN) schedule(static)
        for (int64_t t = 0; t < nb * nj; t++) {
            int64_t bi = t / nj, j0 = t % nj * jc, j1 = j0 + jc < N ? j0 + jc : N;
            int64_t oa, ob, oc;
            batch_offsets(c, &ma, &mb, bi, &oa, &ob, &oc);
            row_part((float *)c->data + oc, pa + oa, pb + ob, ld, kc, j0, j1, K, (float)alpha, (float)beta);
        }
        note_kernel("tapegrad row:avx512_bf16");
        pthread_mutex_unlock(&lock);
        return 0;
    }
#endif
    /* Tall products (the output head's weight gradient, 50257 rows) run
     * faster on oneDNN's kernels in slices of ROWS rows: one primitive for
     * the slices, one for the remainder. */
    enum { ROWS = 8192 };
    int64_t mc = M > ROWS ? ROWS : M, mr = M % mc;
    prim_key k;
    memset(&k, 0, sizeof k);
    k.N = N;
    k.K = K;
    op_strides(ar, ac, ma.col, ta, k.sa);
    op_strides(br, bc, mb.col, tb, k.sb);
    k.sc[0] = c->stride[n - 2];
    k.sc[1] = c->stride[n - 1];
    if (M == 1) k.sc[0] = N * k.sc[1];
    if (N == 1) k.sc[1] = M * k.sc[0];
    k.alpha = (float)alpha;
    k.beta = (float)beta;
    prim_entry *e[2] = {NULL, NULL};
    if (ok) {
        k.M = mc;
        ok = (e[0] = prim_get(&whole, &k)) != NULL;
    }
    if (ok && mr) {
        k.M = mr;
        ok = (e[1] = prim_get(&whole, &k)) != NULL;
    }
    if (!ok) {
        pthread_mutex_unlock(&lock);
        return 1; /* nothing written: emulate */
    }
    for (int64_t bi = 0; ok && bi < nb; bi++) {
        int64_t oa, ob, oc;
        batch_offsets(c, &ma, &mb, bi, &oa, &ob, &oc);
        for (int64_t i0 = 0; ok && i0 < M; i0 += mc) {
            prim_entry *pe = M - i0 >= mc ? e[0] : e[1];
            dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, pe->ma}, {DNNL_ARG_WEIGHTS, pe->mb}, {DNNL_ARG_DST, pe->mc}};
            ok = dnnl_memory_set_data_handle(pe->ma, (void *)(pa + oa + i0 * k.sa[0])) == dnnl_success &&
                 dnnl_memory_set_data_handle(pe->mb, (void *)(pb + ob)) == dnnl_success &&
                 dnnl_memory_set_data_handle(pe->mc, (float *)c->data + oc + i0 * k.sc[0]) == dnnl_success &&
                 dnnl_primitive_execute(pe->prim, stream, 3, args) == dnnl_success &&
                 dnnl_stream_wait(stream) == dnnl_success;
        }
        if (!ok)
            tg_error("gemm: oneDNN failed running a bf16 matmul of %lld x %lld x %lld", (long long)M, (long long)N,
                     (long long)K);
    }
    pthread_mutex_unlock(&lock);
    return ok ? 0 : -1;
}

/* Bytes of bf16 one block of a trainable weight is rounded into. */
enum { PARAM_BLOCK_BYTES = 8 << 20 };

int tg__bf16_gemm(tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha,
                  double beta)
{
    int n = c->ndim;
    int64_t M = c->shape[n - 2];
    bool col = false;
    int64_t ld;
    /* A large trainable 2-D weight b (an output head: 50,257 or 151,936
     * rows) is rounded a block of its stored rows at a time, each block
     * into the operand buffers, so that no product holds a bf16 copy of the
     * whole of it: blocks of c's columns when its stored rows are op(b)'s
     * columns (c = x W^T), else of the inner dimension, the blocks'
     * products added into c (dx = dy W). The blocks share one scope: a's
     * copy is made once for all of them. */
    if (b->ndim != 2 || n != 2 || a->ndim != 2 || !b->is_param || b->dtype != TG_F32 || kept_param(b, M) ||
        (int64_t)sizeof(uint16_t) * tg_numel(b) <= PARAM_BLOCK_BYTES || !tg__matrix_layout(b, &col, &ld))
        return onednn_gemm(c, a, ta, b, tb, alpha, beta);
    int bd = col ? 1 : 0; /* b's dim whose elements are stored rows */
    int64_t R = b->shape[bd], per = b->shape[1 - bd];
    int64_t step = PARAM_BLOCK_BYTES / ((int64_t)sizeof(uint16_t) * per);
    if (step < 1) step = 1;
    int64_t nblocks = (R + step - 1) / step;
    step = (R + nblocks - 1) / nblocks; /* equal blocks but the last */
    bool columns = (bd == 0) == tb;     /* b's rows are op(b)'s columns, c's columns */
    uint64_t prev = node_scope;
    if (!node_scope) node_scope = (uint64_t)atomic_fetch_add(&next_scope, 1);
    int st = 0;
    for (int64_t s0 = 0; st == 0 && s0 < R; s0 += step) {
        int64_t len = R - s0 < step ? R - s0 : step;
        tg_tensor bb = *b, cb, ab = *a;
        if (columns) {
            tg__gemm_columns(c, b, tb, s0, len, &cb, &bb);
            st = onednn_gemm(&cb, a, ta, &bb, tb, alpha, beta);
        } else {
            int ad = ta ? 0 : 1; /* a's inner dimension */
            bb.shape[bd] = len;
            bb.offset += s0 * b->stride[bd];
            ab.shape[ad] = len;
            ab.offset += s0 * a->stride[ad];
            st = onednn_gemm(c, &ab, ta, &bb, tb, alpha, s0 ? 1.0 : beta);
        }
        /* a refusal after a first block has written c: the remaining blocks
         * cannot be emulated one by one from here */
        if (st > 0 && s0 > 0) {
            tg_error("gemm: oneDNN refused a block of a bf16 product of %lld rows", (long long)M);
            st = -1;
        }
    }
    node_scope = prev;
    return st;
}

#else

uint64_t tg__bf16_scope_begin(bool on)
{
    (void)on;
    return 0;
}

void tg__bf16_scope_end(uint64_t prev) { (void)prev; }

int tg__bf16_gemm(tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha,
                  double beta)
{
    (void)c, (void)a, (void)ta, (void)b, (void)tb, (void)alpha, (void)beta;
    return 1;
}

#endif
