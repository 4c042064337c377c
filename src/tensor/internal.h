/* Private helpers shared by src/tensor, src/autograd and src/nn. */
#ifndef TG_TENSOR_INTERNAL_H
#define TG_TENSOR_INTERNAL_H

#include "tapegrad.h"

#include <math.h>
#include <string.h>

#if defined(__GNUC__)
#define TG_UNUSED __attribute__((unused))
#else
#define TG_UNUSED
#endif

/* Elementwise work below this many elements stays on one thread. */
#define TG_PAR_MIN 32768

static inline bool tg__is_float(tg_dtype dt) { return dt == TG_F32 || dt == TG_F64; }
/* An op that moves or reads values one at a time, given a q8_0 tensor:
 * true with the error (its blocks are read by the weight readers, converted
 * by to_dtype and copy_, moved whole by clone, cat and stack). */
static inline bool tg__refuse_q8(const char *op, const tg_tensor *x)
{
    if (!x || x->dtype != TG_Q8) return false;
    tg_error("%s: got a q8_0 tensor (q8_0 weights are read by embedding, linear and matmul's second operand; "
             "tg_to_dtype widens them)", op);
    return true;
}
/* the frozen weights' storages: bfloat16 and q8_0 */
static inline bool tg__is_compact(tg_dtype dt) { return dt == TG_BF16 || dt == TG_Q8; }

#define TG_Q8_BLOCK 32 /* values a TG_Q8 block (src/tensor/q8.h) */
#define TG_Q8_BYTES 34 /* bytes a block */

/* The bytes of n elements of dt (TG_Q8: n / 32 blocks). */
static inline size_t tg__dtype_bytes(tg_dtype dt, int64_t n)
{
    return dt == TG_Q8 ? (size_t)(n / TG_Q8_BLOCK) * TG_Q8_BYTES : (size_t)n * tg_dtype_size(dt);
}

/* Address of the element at flat offset `off` (elements) from x->data. */
static inline void *tg__ptr(const tg_tensor *x, int64_t off)
{
    return (char *)x->data + tg__dtype_bytes(x->dtype, off); /* q8_0: off's block (off a multiple of 32) */
}

/* printf into a string in tp; NULL when out of memory (no message). */
char *tg__tape_printf(tg_tape *tp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A tensor header in tp sharing x's storage (a view), with no autograd state. */
tg_tensor *tg__alias(tg_tape *tp, const tg_tensor *x);

/* The backward pool (src/tensor/tape.c). Between begin and end, tensor
 * storage of 16 KiB and more on tp comes from blocks that collect hands back
 * for reuse: the engine counts the gradient slots pointing into each block
 * (ref), and after a node's backward, collect frees every block handed out
 * during it, and the block of the node's own gradient (dropped), that no
 * slot points into. Storage outside the pool is ignored by ref and collect. */
void tg__tape_pool_begin(tg_tape *tp);
void tg__tape_pool_end(tg_tape *tp);
void *tg__tape_alloc_data(tg_tape *tp, size_t nbytes);
void tg__tape_pool_ref(tg_tape *tp, const void *p, int delta);
void tg__tape_pool_collect(tg_tape *tp, const void *dropped);
/* A scratch buffer of at least nbytes owned by tp (kept across resets, freed
 * with the tape): for temporaries an op drops before it returns. One at a
 * time: the next call may move it. NULL with a message if out of memory. */
void *tg__tape_scratch(tg_tape *tp, size_t nbytes);
/* Frees tp's scratch buffer when it holds more than nbytes (an op that
 * grew it for a large temporary, not needed again in this step). */
void tg__tape_scratch_trim(tg_tape *tp, size_t nbytes);
/* tp's side tape, emptied, with tp's policy and limit: where tg_module_call_recompute
 * (src/nn/module.c) runs a module whose activations tp does not keep.
 * One per tape, made on first use (NULL with a message if out of memory),
 * kept across resets, emptied by tp's reset, freed with tp; tp's used and
 * reserved bytes count it. What it holds lives until its next use. */
tg_tape *tg__tape_side(tg_tape *tp);
/* tg_function_apply (src/autograd/function.c) whose context's tg_fn_data
 * block starts as a copy of size bytes of data: what the function's forward
 * and backward need besides tensors (a module to run). */
tg_tensor *tg__function_apply_with(tg_tape *tp, const tg_function *f, int n, tg_tensor *const *inputs,
                                   const void *data, size_t size);

/* The book's attention from the scores to the context as one node with the
 * composed ops' bits (src/autograd/op_attention.c): q, v (..., T, hd), kT
 * (..., hd, T), mask bool (T, T) (true: -inf), d the scores' divisor, p the
 * dropout drawn from g's PyTorch stream. heads_inner (q 4-D or more): the
 * (..., h, T, hd) context is a view of (..., T, h, hd) storage, which
 * transpose(-3, -2) makes contiguous. */
/* Whether a bool (T, T) mask is the book's causal one (j > i masked), with
 * window > 0 also i - j >= window (a sliding layer's). */
bool tg__mask_is_causal(const tg_tensor *mask, int64_t window);
/* tg_scaled_dot_product_attention with the scores times scale and, causal
 * with window > 0, keys further back than the window masked. */
tg_tensor *tg__sdpa(tg_tape *tp, tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal, int64_t window, double scale,
                    double dropout_p, tg_generator *g);
tg_tensor *tg__attention(tg_tape *tp, tg_tensor *q, tg_tensor *kT, tg_tensor *v, const tg_tensor *mask, double d,
                         double p, tg_generator *g, bool heads_inner);
/* The book's FeedForward, Linear (W1, b1), GELU (tanh), Linear (W2, b2), as
 * one node with the three modules' bits that keeps x and the first layer's
 * output only (src/autograd/op_feed_forward.c); x contiguous. */
tg_tensor *tg__feed_forward(tg_tape *tp, tg_tensor *x, tg_tensor *w1, tg_tensor *b1, tg_tensor *w2, tg_tensor *b2);
/* tg_linear_cross_entropy with a low-rank term added to the logits (u (N,
 * r) @ bm (r, V): a LoRA-wrapped head's (alpha / rank) * (x A) and B; both
 * NULL for none), chunk_rows rows per chunk (0: the library's choice) and,
 * with replay, nothing but the rows' log-sum-exp kept: backward computes
 * the logits again (src/autograd/op_nn.c). A frozen bf16 weight is read as
 * the products read it. */
tg_tensor *tg__linear_cross_entropy(tg_tape *tp, tg_tensor *x, tg_tensor *w, tg_tensor *b, tg_tensor *u, tg_tensor *bm,
                                    const tg_tensor *target, tg_reduction r, int64_t ignore_index, int64_t chunk_rows,
                                    bool replay);
/* tg_dropout, with PyTorch's stream on a contiguous x written over x (its
 * backward keeps the mask only): for a tensor nothing else reads, as a
 * Linear layer's fresh output; otherwise tg_dropout. Same draws and bits. */
tg_tensor *tg__dropout_over(tg_tape *tp, tg_tensor *x, double p, tg_generator *g);
/* a + b written over a (AddBackward0; a contiguous, b of a's shape and
 * dtype): for a residual sum whose branch tensor nothing else reads, as the
 * output of a dropout whose backward keeps only the mask. The caller vouches
 * for that; the bits are tg_add's. */
tg_tensor *tg__add_into(tg_tape *tp, tg_tensor *a, tg_tensor *b);
/* Checks ndim and shape values and computes numel; error message prefixed by op. */
bool tg__check_shape(const char *op, int ndim, const int64_t *shape, int64_t *numel);

/* The public error functions, with the compiler's printf format checks. */
#if defined(__GNUC__)
void *tg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int tg_error_status(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif
/* "<op>: NULL input", unless an error is already recorded: an op handed NULL
 * is most likely downstream of an earlier failure, whose message names the
 * real problem. Returns NULL. */
void *tg__error_null_input(const char *op);
/* Keeps the current error message aside while a user callback runs (a
 * module's forward, a function's forward or backward): the callback starts
 * with none, so the caller can tell whether it recorded one, and one that
 * succeeds leaves the earlier message as it was. */
typedef struct {
    char msg[512];
} tg__saved_error;
void tg__error_push(tg__saved_error *e);
void tg__error_restore(const tg__saved_error *e);
void tg__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
/* Normalises a possibly negative dim; -1 and an error if out of range. */
int tg__wrap_dim(const char *op, int dim, int ndim);
/* Broadcast shape of a and b into out (returns ndim, or -1 with an error). */
int tg__broadcast_shape(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                        int64_t *out);
/* Strides of x seen as shape (ndim) by broadcasting (0 for broadcast dims). */
void tg__broadcast_strides(const tg_tensor *x, int ndim, const int64_t *shape, int64_t *stride);
/* Gives the view attrs (shape, stride) for viewing x as shape, or false. */
bool tg__view_strides(const tg_tensor *x, int ndim, const int64_t *shape, int64_t *stride);
/* Resolves a single -1 in shape against numel; false with error if impossible. */
bool tg__infer_shape(const char *op, int64_t numel, int ndim, const int64_t *in, int64_t *out);

/* ---- kernels (src/tensor/kernels.c): outputs first, inputs const ------------ */

typedef enum {
    TG_BIN_ADD, TG_BIN_SUB, TG_BIN_MUL, TG_BIN_DIV, TG_BIN_POW /* scalar exponent only */
} tg_binop;
typedef enum {
    TG_UN_NEG, TG_UN_EXP, TG_UN_LOG, TG_UN_SQRT, TG_UN_TANH, TG_UN_RELU, TG_UN_GELU,
    TG_UN_ABS, TG_UN_SQUARE, TG_UN_RECIP, TG_UN_RSQRT,
    TG_UN_GELU_TANH /* F.gelu(x, approximate="tanh"): PyTorch's kernel, not the book's ops */
} tg_unop;

/* out = a op b with broadcasting (add, sub, mul, div); out has the broadcast shape, same dtype. */
void tg_k_binary(tg_tensor *out, const tg_tensor *a, const tg_tensor *b, tg_binop op);
/* out = a op s (scalar). rev: s op a (TG_BIN_SUB only). */
void tg_k_binary_scalar(tg_tensor *out, const tg_tensor *a, double s, tg_binop op, bool rev);
/* nm: the policy (EXACT: PyTorch's exp, log, tanh; FAST and BF16: the
 * library's polynomial tanh in GELU). */
void tg_k_unary(tg_numerics nm, tg_tensor *out, const tg_tensor *a, tg_unop op);
/* dx of tg_k_unary's float32 TG_UN_GELU (pytorch false: the book's ops'
 * gradient) or TG_UN_GELU_TANH (true: GeluBackward0's kernel) for n
 * contiguous elements (kernels.c). */
void tg_k_gelu_backward_f32(tg_numerics nm, bool pytorch, float *dx, const float *x, const float *dy, int64_t n);
/* out = src broadcast (any dtype conversion between float types, bool, u8, i64). */
void tg_k_copy(tg_tensor *out, const tg_tensor *src);
void tg_k_fill(tg_tensor *out, double v);
/* out += alpha * a (a broadcast to out). */
void tg_k_axpy(tg_tensor *out, const tg_tensor *a, double alpha);
/* out (bool) = a cmp b. */
void tg_k_compare(tg_tensor *out, const tg_tensor *a, const tg_tensor *b, int cmp);
/* out = cond ? a : b. */
void tg_k_where(tg_tensor *out, const tg_tensor *cond, const tg_tensor *a, const tg_tensor *b);
/* out = sum of x over the dims where out's shape is 1 and x's is not (same ndim,
 * out has keepdim shape). Accumulates in double. */
void tg_k_sum_to(tg_tensor *out, const tg_tensor *x);
/* One tensor of a safetensors file's header. */
typedef struct {
    const char *name;
    const char *file_dtype; /* as the file names it: "BF16", "F32", ... */
    tg_dtype dtype;         /* as tg_safetensors_load reads it (F16 and BF16: TG_F32) */
    int ndim;
    int64_t shape[TG_MAX_DIMS];
} tg__safetensors_entry;
/* The header of the safetensors file at path, validated as
 * tg_safetensors_load validates it (its layout against the file's size: a
 * truncated file fails here) without reading the data (BOOL values
 * unchecked): *n entries in tp, in the order of their data. */
int tg__safetensors_header(tg_tape *tp, const char *path, int *n, tg__safetensors_entry **entries);
/* n elements of a tensor's dtype at src, contiguous, to a file dtype's at dst. */
typedef void (*tg__safetensors_convert)(void *dst, const void *src, int64_t n);
/* One tensor as tg__safetensors_write stores it: tensor's elements in
 * row-major order, as dtype ("F32", "F16", "BF16", ...; NULL: the tensor's
 * own), converted by convert (NULL: the tensor's bytes, which must then be
 * of the file dtype's size). */
typedef struct {
    const char *name;
    const tg_tensor *tensor;
    const char *dtype;
    tg__safetensors_convert convert;
} tg__safetensors_item;
/* tg_safetensors_save's file (the same order, header and atomic write) of
 * items that may change dtype on the way, with n_meta __metadata__
 * key/value pairs (meta[2i], meta[2i + 1]) first in the header. */
int tg__safetensors_write(const char *path, int n, const tg__safetensors_item *tensors, int n_meta,
                          const char *const *meta);
/* Names and tensors saved as one safetensors file (src/nn/state_dict.c),
 * as module and optimizer state_dicts are. */
int tg__save_named_list(const char *path, const tg_named_list *l);
/* PyTorch's float32 sums, add for add (kernels.c): of n contiguous floats
 * (sum(dim=-1)), and of the rows of a (rows, cols) matrix (sum(dim=0)). */
float tg__torch_sum_f32(const float *x, int64_t n);
void tg__torch_sum_rows_f32(float *out, const float *x, int64_t rows, int64_t cols, int64_t ld);
/* float32 exp, log, tanh as PyTorch's CPU kernels compute them (vmath.c):
 * SLEEF's 1.0-ulp functions where PyTorch vectorises (AVX2 + FMA machines),
 * the C library's elsewhere. tg__vec_math() tells which. The array forms
 * map n contiguous floats (y may be x); tg__logf is one element. */
bool tg__vec_math(void);
/* Before a BLAS or oneDNN call: OpenMP's thread count kept within
 * OMP_THREAD_LIMIT, which OpenBLAS does not read (gemm.c). */
void tg__blas_threads(void);
/* A portable x86-64 build (no -march with AVX2 and FMA): a hot loop is
 * compiled a second time for AVX2 + FMA (TG_AVX2_FN) and called where
 * tg__vec_math() says the CPU has both. The bits are the same: contraction
 * is off (meson.build), so every fused multiply-add is an explicit fmaf. */
#if defined(__x86_64__) && defined(__GNUC__) && !(defined(__AVX2__) && defined(__FMA__))
#define TG_AVX2_DISPATCH 1
#define TG_AVX2_FN __attribute__((target("avx2,fma")))
#endif
float tg__logf(float x);
float tg__expf(float x);
/* log1pf, and exp and log1p in double, as PyTorch's Vectorized<T> computes
 * them (SLEEF's 1.0-ulp functions where tg__vec_math(), the C library's
 * elsewhere) */
float tg__log1pf(float x);
double tg__exp(double x);
double tg__log1p(double x);
void tg__vexpf(float *y, const float *x, int64_t n);
void tg__vlogf(float *y, const float *x, int64_t n);
void tg__vtanhf(float *y, const float *x, int64_t n);
void tg__vcosf(float *y, const float *x, int64_t n);
void tg__vsinf(float *y, const float *x, int64_t n);
void tg__vrpowf(float *y, float base, const float *e, int64_t n);
/* y[i] = (x[i] - a) - b (y may be x) and x[i] *= s, eight at a time where
 * the CPU has AVX2 (a portable build's hot loops; the same bits) */
void tg__vsub2f(float *y, const float *x, float a, float b, int64_t n);
void tg__vscalef(float *x, float s, int64_t n);
/* softmax of n contiguous floats as tg_k_softmax computes a float32 row
 * (PyTorch's _vec_softmax_lastdim; y may be x) */
void tg__softmax_row_f32(float *y, const float *x, int64_t n);
/* PyTorch's vec::reduce_all of a float row with 8 lanes: element i adds into
 * lane i % 8 (the first 8 start the lanes), then
 * ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); under 8 elements add in
 * order. A row may arrive in pieces: start with {{0}, 0}, append with
 * tg__sum8_add (x[i]) or tg__sum8_fma (x[i] * y[i], fused into the lane as
 * PyTorch's map2_reduce_all is), read with tg__sum8_get. */
typedef struct {
    float a[8];
    int64_t n;
} tg__sum8;
void tg__sum8_add(tg__sum8 *s, const float *x, int64_t n);
void tg__sum8_fma(tg__sum8 *s, const float *x, const float *y, int64_t n);
float tg__sum8_get(const tg__sum8 *s);
/* Max over dim (out, idx keepdim shape; idx may be NULL). */
void tg_k_max_dim(tg_tensor *out, tg_tensor *idx, const tg_tensor *x, int dim);
/* out = softmax / log_softmax of x along dim (same shape). */
void tg_k_softmax(tg_tensor *out, const tg_tensor *x, int dim, bool log);
/* Per row of a dense (rows, n) x: stats (rows, 2) = (max, log(sum(exp(x -
 * max)))), rounded as tg_k_softmax's log_softmax rounds them, so that
 * (x - max) - lse is its output bit for bit. */
void tg_k_log_softmax_stats(tg_tensor *stats, const tg_tensor *x);
/* dx = y * (dy - sum(dy * y)) along dim; log: dx = dy - exp(y) * sum(dy). */
void tg_k_softmax_backward(tg_tensor *dx, const tg_tensor *y, const tg_tensor *dy, int dim, bool log);
/* exp(x) = 2^n exp(r), n = round(x log2 e), |r| <= ln2/2, exp(r) by its degree-7
 * Taylor polynomial (relative error < 1e-8, below float's rounding). Written
 * so the compiler vectorises it (glibc's expf is a call per element). For
 * x in [-87, 88] (the softmax rows' S - max <= 0, tg__tanh_fast_f32's 2x in
 * [-18, 18]); below -87 the result is under FLT_MIN and is returned as 0. */
static inline float tg__exp_f32(float x)
{
    float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float t = xc * 1.44269504f + 12582912.0f; /* 1.5*2^23: rounds to an integer */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693145752f - n * 1.42860677e-6f; /* ln 2 = hi + lo */
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        int32_t i;
        float f;
    } s = {.i = ((int32_t)n + 127) * (1 << 23)};
    return x < -87.0f ? 0.0f : p * s.f;
}

/* tanh(x) = (e - 1) / (e + 1), e = exp(2x) by tg__exp_f32: vectorisable,
 * within 2e-7 of tanh absolutely (FAST numerics' GELU). */
static inline float tg__tanh_fast_f32(float x)
{
    float xc = x < -9.0f ? -9.0f : (x > 9.0f ? 9.0f : x);
    float e = tg__exp_f32(2.0f * xc);
    return (e - 1.0f) / (e + 1.0f);
}

/* A storage's bookkeeping (tensor.h, tg_storage): made with the storage by
 * tg_empty in the same tape, shared by every view. version is
 * tg_tensor_version; derived holds copies made from one version of the data
 * (a parameter's bf16 copy, src/tensor/bf16.c), freed with the tape or at
 * its reset, which keeps such storages on a list (next). */
typedef struct tg__derived tg__derived;
struct tg_storage {
    int64_t version;
    /* a gradient buffer tg_zero_grad zeroed that no backward wrote since
     * (tg__grad_buf clears it): adding to it is writing it, bit for bit */
    bool grad_zeroed;
    tg_tape *tape;
    tg__derived *derived;
    tg_storage *next;
};
/* The library is about to write x's storage: its version goes up by one
 * (a no-op for NULL or a header without storage). */
static inline void tg__bump(const tg_tensor *x)
{
    if (x && x->storage) x->storage->version++;
}
/* For the ops recorded between the two calls, tp's policy is n: a layer
 * pinned to a variant (src/autograd/layers.c), a module pinned by
 * tg_module_set_numerics. enter returns the policy for leave to put back. */
tg_numerics tg__tape_enter(tg_tape *tp, tg_numerics n);
void tg__tape_leave(tg_tape *tp, tg_numerics prev);
/* Puts s on its tape's list of storages holding derived copies (once). */
void tg__tape_keep_derived(tg_storage *s);
/* Frees a storage's derived copies (src/tensor/bf16.c). */
void tg__derived_free(tg__derived *d);
/* Frees the copies derived from x's storage now (an optimizer's update of a
 * trainable parameter: its copies would be stale, and a training step holds
 * none, src/tensor/bf16.c). */
void tg__derived_drop(const tg_tensor *x);
/* The bf16 nearest x (ties to even), as its 16 bits (a NaN stays a quiet
 * NaN); branch-free, so that loops over it vectorise. */
static inline uint16_t tg__bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}
/* The float32 a bf16 value's 16 bits stand for (exact). */
/* IEEE half (1, 5, 10 bits) to float32, exactly: infinities and NaN payloads
 * kept, subnormals scaled (safetensors' F16, GGUF's f16). */
static inline float tg__f32_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13;
    } else if (exp != 0) {
        bits = sign | (exp + 112) << 23 | man << 13;
    } else {
        float f = (float)man * 0x1p-24f; /* zero or subnormal: man * 2^-24, exact in float32 */
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    }
    float y;
    memcpy(&y, &bits, sizeof y);
    return y;
}

/* The value of a TG_Q8 tensor's element at flat offset off (elements from
 * x->data): its block's q * d. */
static inline float tg__q8_load(const tg_tensor *x, int64_t off)
{
    const uint8_t *b = (const uint8_t *)x->data + (size_t)(off / TG_Q8_BLOCK) * TG_Q8_BYTES;
    return (float)(int8_t)b[2 + off % TG_Q8_BLOCK] * tg__f32_from_f16((uint16_t)(b[0] | b[1] << 8));
}
static inline float tg__bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
}
/* n contiguous values each way: bf16 to float32 exactly, float32 to bf16
 * rounded (loops the compiler vectorises). */
static inline void tg__bf16_to_f32_n(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = tg__bf16_to_f32(src[i]);
}
static inline void tg__bf16_from_f32(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = tg__bf16_bits(src[i]);
}
/* x rounded to the nearest bf16 (ties to even), as a float (NaN stays NaN). */
static inline float tg__bf16_round(float x) { return tg__bf16_to_f32(tg__bf16_bits(x)); }
/* The element of dtype dt at p as a double (exact for every dtype but
 * int64 beyond 2^53), and v stored there in dt: float32 and bf16 round
 * (bf16 through float32, as PyTorch converts a double), bool is v != 0,
 * the integers truncate (callers check the range). */
static inline double tg__load_elem(tg_dtype dt, const void *p)
{
    switch (dt) {
    case TG_F32: return *(const float *)p;
    case TG_F64: return *(const double *)p;
    case TG_I64: return (double)*(const int64_t *)p;
    case TG_BF16: return tg__bf16_to_f32(*(const uint16_t *)p);
    case TG_BOOL:
    case TG_U8: return *(const uint8_t *)p;
    default: return NAN;
    }
}
static inline void tg__store_elem(tg_dtype dt, void *p, double v)
{
    switch (dt) {
    case TG_F32: *(float *)p = (float)v; break;
    case TG_F64: *(double *)p = v; break;
    case TG_I64: *(int64_t *)p = (int64_t)v; break;
    case TG_BF16: *(uint16_t *)p = tg__bf16_bits((float)v); break;
    case TG_BOOL: *(uint8_t *)p = v != 0; break;
    case TG_U8: *(uint8_t *)p = (uint8_t)v; break;
    default: break;
    }
}
/* Attention of the queries q (b, H, T, hd) of positions p0 .. p0+T-1 over
 * the keys and values k, v (b, G, p0 + T, hd) of a KV cache, each with a
 * unit last stride: softmax(q k^T / scale) v under the causal mask (with
 * window > 0 also keys i - j >= window masked), head h
 * reading group h / (H / G), written to out (b, T, H, hd) contiguous (the
 * heads already side by side). FAST and BF16 only (src/tensor/attend.c):
 * 0 done, 1 not this kernel's case (EXACT, not float32, other shapes;
 * nothing written), -1 failed with an error. */
int tg__attend_cached(tg_tensor *out, tg_numerics nm, const tg_tensor *q, const tg_tensor *k, const tg_tensor *v,
                      int64_t p0, double scale, int64_t window);
/* BF16 products on the CPU's bf16 hardware (src/tensor/bf16.c): whether they
 * run there now (tg_numerics_bf16_native and not forced to emulate); one
 * product as tg_k_gemm takes it (float32): 0 done, 1 nothing written (the
 * caller emulates), -1 failed with an error. */
bool tg__bf16_native_now(void);
int tg__bf16_gemm(tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha,
                  double beta);
/* Makes the copy a product under nm reads of w taken as it is (a Linear's
 * weight), if missing or stale: under BF16 a float32 matrix parameter's bf16
 * copy, under EXACT a bfloat16 weight's float32 one (tg__bf16_widen; none
 * past its limit). 0 made, current or left to the products, 1 nothing to
 * make, -1 out of memory (error set). */
int tg__bf16_prepare(const tg_tensor *w, tg_numerics nm);
/* Views of c's columns [j0, j0 + w) and of the part of b that makes them
 * (b's dim holding them narrowed), for products run in column blocks. */
static inline void tg__gemm_columns(const tg_tensor *c, const tg_tensor *b, bool tb, int64_t j0, int64_t w,
                                    tg_tensor *cb, tg_tensor *bb)
{
    int bd = tb ? b->ndim - 2 : b->ndim - 1;
    *cb = *c;
    *bb = *b;
    cb->shape[c->ndim - 1] = w;
    cb->offset += j0 * c->stride[c->ndim - 1];
    bb->shape[bd] = w;
    bb->offset += j0 * b->stride[bd];
}
/* tg_k_copy with a TG_Q8 side (src/tensor/q8_ops.c): false with an error
 * when a TG_Q8 destination does not hold whole blocks along its last dim. */
bool tg__q8_copy(tg_tensor *out, const tg_tensor *src);
/* tg_k_gemm with a TG_Q8 operand (src/tensor/q8_ops.c). */
void tg__gemm_q8(tg_numerics nm, tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha,
                 double beta);
/* A product of up to sixteen rows against bf16 weights (a Linear's forward
 * in generation, the prompt's and each new id's: c (M, N) = a (M, K) @ W^T,
 * W (N, K)): a bfloat16 W read in place, or (round_a only) a float32
 * parameter's bf16 copy, neither expanded; a float32, rounded to bf16 first
 * if round_a (BF16; FAST: not). 0 done, 1 not this case (nothing written),
 * -1 failed with an error. */
int tg__bf16_rows(tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha, double beta,
                  bool round_a);
/* x widened to float32 for a product (x itself if not TG_BF16): out has x's
 * matrices in x's orientation, compact (a broadcast batch dim kept), so a
 * product of out has the bits of the same product of a float32 tensor
 * holding x's values. keep: out reads the float32 copy kept with x's
 * storage for its version (tg_numerics_copy_bytes), made if missing or
 * stale, unless it would take the kept copies past half the machine's
 * memory; otherwise out reads *buf, malloc'd for the caller to free (NULL
 * when not needed). false with an error if out of memory. */
bool tg__bf16_widen(const tg_tensor *x, bool keep, tg_tensor *out, float **buf);
/* Records that a product ran emulated (tg_numerics_bf16_kernel). */
void tg__bf16_note_emulated(void);
/* One node's backward (on: a built-in op): the products inside it share
 * their operands' bf16 copies. Returns the previous scope for end. */
uint64_t tg__bf16_scope_begin(bool on);
void tg__bf16_scope_end(uint64_t prev);
/* Batched GEMM: c = alpha * op(a) @ op(b) + beta * c over identical batch dims
 * (a, b, c all have the same ndim >= 2 and equal (possibly broadcast, stride 0)
 * batch shape). Strided operands whose last two dims have a unit stride are
 * passed to BLAS without copying. The one GEMM backend: sgemm as PyTorch
 * calls it under EXACT and FAST (FAST differs in the shapes its callers
 * ask for), bf16-rounded operands under BF16. */
void tg_k_gemm(tg_numerics nm, tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb,
               double alpha, double beta);
/* Whether x's last two dims can be read with one unit stride: by rows
 * (element (r, c) at r * ld + c) or, *col, by columns (at c * ld + r). */
bool tg__matrix_layout(const tg_tensor *x, bool *col, int64_t *ld);

/* ---- graph nodes, as the tensor layer sees them ------------------------------- */
/* The head of every graph node: the part the tensor layer may read (to print
 * grad_fn=<...>). src/autograd's struct tg_node begins with it, so a node
 * pointer converts to a pointer to its head (C11 6.7.2.1p15). */
typedef struct {
    const char *name; /* PyTorch's node name, "MmBackward0" */
} tg_node_head;

static inline const char *tg__node_head_name(const tg_node *n)
{
    return n ? ((const tg_node_head *)(const void *)n)->name : NULL;
}

/* ---- a growing string (src/tensor/strbuf.c): printing and module reprs ---- */
typedef struct {
    char *s; /* malloc'd, NUL-terminated; the owner frees it */
    size_t len, cap;
    bool failed; /* an allocation failed: later appends do nothing */
} tg__strbuf;
void tg__sb_putn(tg__strbuf *b, const char *s, size_t n);
void tg__sb_puts(tg__strbuf *b, const char *s);
void tg__sb_spaces(tg__strbuf *b, int n);

/* a > b in PyTorch's order for max-style ops: NaN above everything. */
static inline bool tg__greater(double a, double b) { return (isnan(a) && !isnan(b)) || a > b; }

/* A value and its index, for ranking (topk, multinomial's draws). */
typedef struct {
    double v;
    int64_t i;
} tg__ranked;
/* Sorts r[0..n) largest first (or smallest first), NaN counted the largest as
 * PyTorch's max-style ops count it, equal values by increasing index. */
void tg__rank(tg__ranked *r, size_t n, bool largest);

/* Gradient readiness during backward (src/autograd/engine.c), for the
 * data-parallel reducer (src/dist/dist.c). While a watch is set on this
 * thread, each tg_backward counts the graph's edges into each of the n
 * watched leaves; ready(ctx, i) runs when the last node feeding leaves[i]
 * has run (its .grad is final for this backward), progress(ctx) after every
 * node. A status other than TG_OK stops backward with it. Set builds the
 * engine's index of the leaves (malloc'd; TG_ENOMEM) and fails when another
 * watch is set on the thread; clear frees it. */
typedef struct tg__grad_watch {
    int (*ready)(void *ctx, int64_t i);
    int (*progress)(void *ctx);
    void *ctx;
    int64_t n;
    tg_tensor *const *leaves;
    /* the engine's: */
    int64_t *index, *pending;
    size_t mask;
} tg__grad_watch;
int tg__grad_watch_set(tg__grad_watch *w);
void tg__grad_watch_clear(tg__grad_watch *w);

/* Dropout masks (rng.c). tg__bernoulli_bits: n draws of bernoulli_(q) as
 * bits, in PyTorch's stream. The counter stream: element i of the mask with
 * seed s keeps when the 32-bit half of tg__mix64(s + GOLDEN (i/2 + 1)) for
 * i's parity is >= floor(p 2^32). */
void tg__bernoulli_bits(tg_generator *g, double q, uint8_t *bits, int64_t n);
/* A mask of n elements drawn from g is one part of the whole mask under a
 * batch slice (tg_generator_set_batch_slice): *before / *after elements of
 * the whole mask come before / after it (0 and 0 without a slice). */
void tg__mask_slice(const tg_generator *g, int64_t n, int64_t *before, int64_t *after);
/* Advances g as n float64 uniform draws (bernoulli_'s) would. */
void tg__skip_uniform(tg_generator *g, int64_t n);
/* out = x * z with z = 1/q in x's dtype where bit i is set, else 0
 * (PyTorch's dropout: noise.div_(1 - p), then x * noise); x, out dense
 * (src/autograd/op_elementwise.c). */
void tg__dropout_mask_mul(tg_tensor *out, const tg_tensor *x, const uint8_t *bits, double q);
#define TG__GOLDEN 0x9E3779B97F4A7C15ull
/* The counter stream's threshold for dropout probability p: keep a 32-bit
 * draw when it is >= floor(p 2^32). */
static inline uint32_t tg__dropout_threshold(double p)
{
    double t = floor(p * 4294967296.0);
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}
/* splitmix64's output function: a bijection on 64 bits with full avalanche. */
static inline uint64_t tg__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* The counter stream's element e of the mask with seed s: kept? */
static inline bool tg__counter_keep(uint64_t seed, uint64_t e, uint32_t thresh)
{
    uint64_t h = tg__mix64(seed + TG__GOLDEN * (e / 2 + 1));
    return ((e & 1) ? (uint32_t)(h >> 32) : (uint32_t)h) >= thresh;
}
/* The dropout mask (probability p) of n elements as bits, from g's stream
 * (tensor.h, tg_dropout_stream): PyTorch's bernoulli_ draws, or the counter
 * stream with one seed drawn from g, as tg_dropout draws either. */
void tg__dropout_bits(tg_generator *g, double p, uint8_t *bits, int64_t n);

#endif
