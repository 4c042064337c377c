/* tapegrad/tensor.h: tapes, tensors, views, generators, printing, safetensors.
 *
 * Ownership: every tensor is allocated in a tg_tape and lives until that tape is
 * reset or freed. No function here frees a single tensor. Functions returning a
 * tensor return NULL on error and record a message readable with tg_last_error();
 * every function given a NULL tensor returns NULL (or an error status).
 */
#ifndef TAPEGRAD_TENSOR_H
#define TAPEGRAD_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Marks the public API. Empty for users; the library's build defines it to
 * export exactly these declarations from the shared library (meson.build). */
#ifndef TG_API
#define TG_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TG_MAX_DIMS 8

typedef enum {
    TG_F32 = 0, /* float, the default */
    TG_F64,     /* double, what gradcheck uses */
    TG_BOOL,    /* one byte per element, 0 or 1: masks */
    TG_U8,
    TG_I64,     /* class indices, argmax results */
    TG_BF16,    /* bfloat16 (float32's top 16 bits): frozen weights' storage.
                 * Stored, converted (tg_to_dtype: from float32 rounded to
                 * nearest even, to float32 exactly), read and written by
                 * element, printed, saved and loaded ("BF16"), and read by
                 * the weight-reading ops (tg_embedding's weight, tg_matmul's
                 * and tg_linear's second operand); other arithmetic refuses
                 * it with an error naming the op, and it cannot require
                 * grad (README.md, "bf16 weights"). */
    TG_Q8,      /* llama.cpp's Q8_0 blocks: each run of 32 values along the
                 * last dim (a multiple of 32) stored as an IEEE half scale
                 * d and 32 int8 q (value q * d), 34 bytes a block, ggml's
                 * rounding (d = max|x| / 127, q = round(x / d), halves
                 * away from zero). Frozen weights' storage, as TG_BF16 is:
                 * made by tg_to_dtype (both ways), tg_empty, tg_zeros,
                 * tg_from_data (the raw blocks) and safetensors files
                 * ("Q8_0"); read by element (tg_get), printed, and read by
                 * the weight-reading ops (tg_embedding's weight, tg_matmul's
                 * and tg_linear's second operand): with grad mode off,
                 * products quantize the activations per block and use int8
                 * dot products as llama.cpp's Q8_0 x Q8_0 does; with grad
                 * mode on, the blocks are widened to float32 and the policy's
                 * product runs (README.md, "Int8 weights"). It cannot require
                 * grad; other ops refuse it. tg_dtype_size gives 0 (a block
                 * is not whole bytes a value): tg_tensor_nbytes tells a
                 * tensor's bytes. */
    TG_DTYPE_COUNT
} tg_dtype;

/* Status codes for functions that do I/O or otherwise return a status:
 * X(name, value, description); the enum below and tg_status_str come from it. */
#define TG_STATUS_MAP(X)                                                          \
    X(OK, 0, "success")                                                           \
    X(EINVAL, -1, "invalid argument (shape, dtype, NULL, value out of range)")     \
    X(ENOMEM, -2, "out of memory (an allocation failed or a tape limit was hit)")  \
    X(EIO, -3, "input/output error (a file could not be opened, read or written)") \
    X(EFORMAT, -4, "malformed file")                                              \
    X(ESTATE, -5, "operation not allowed in the current state")                    \
    X(EDIST, -6, "distributed training: MPI is not available or an MPI call failed") \
    X(EDIVERGED, -7, "training diverged: the loss is not finite")

typedef enum {
#define TG_STATUS_ENUM_(name, value, text) TG_##name = value,
    TG_STATUS_MAP(TG_STATUS_ENUM_)
#undef TG_STATUS_ENUM_
} tg_status;

/* A status code's description ("malformed file"); "unknown status" for any
 * other value. Static storage. The message of the error itself, naming what
 * was wrong, is tg_last_error(). */
TG_API const char *tg_status_str(int status);

typedef struct tg_tape tg_tape;
typedef struct tg_node tg_node;
typedef struct tg_generator tg_generator;
typedef struct tg_storage tg_storage;

/* A strided view on storage owned by a tape. Fields are public for reading;
 * use the functions below to make new tensors and views. */
typedef struct tg_tensor {
    tg_dtype dtype;
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t stride[TG_MAX_DIMS]; /* in elements */
    int64_t offset;              /* in elements, from data */
    void *data;                  /* storage base, shared by views */
    tg_tape *tape;               /* where this tensor lives */
    struct tg_tensor *grad;      /* accumulated gradient (leaves), or NULL */
    tg_node *grad_fn;            /* node that produced it, NULL for leaves */
    bool requires_grad;
    bool is_param;               /* created by tg_parameter_new */
    tg_storage *storage;         /* data's write count and derived copies, shared
                                  * by views (tg_tensor_version); NULL for a
                                  * header over memory the library did not make */
} tg_tensor;

/* ---- errors ---------------------------------------------------------- */

/* The message of the last error on this thread ("" if none). */
TG_API const char *tg_last_error(void);
TG_API void tg_clear_error(void);
/* Records a printf-style message as the last error; returns NULL for chaining. */
TG_API void *tg_error(const char *fmt, ...);
/* Same, returning the status code given (TG_EINVAL, ...). */
TG_API int tg_error_status(int status, const char *fmt, ...);

/* ---- the BLAS it runs on --------------------------------------------- */

/* The BLAS this process loaded and how it threads, as
 * torch.__config__.show() reports PyTorch's, e.g. "OpenBLAS 0.3.21 ...
 * USE_OPENMP ... (OpenMP build)". The OpenMP build shares one thread pool
 * with the library's own OpenMP regions; a "(pthreads build)" fights them
 * for the cores, several times slower (README.md, "Installing"). */
TG_API const char *tg_blas_info(void);

/* ---- numerics ---------------------------------------------------------- */

/* How a step's arithmetic runs, set on the step's tape
 * (tg_tape_set_numerics below; docs/numerics.md), as PyTorch's autocast is
 * set around a step:
 *   EXACT  PyTorch 1.13's float32 bits: its GEMM calls, shapes and orders
 *          (the default; the book's tables print digit for digit);
 *   FAST   float32 with the library's own call shapes and kernels (all
 *          heads' attention in one threaded kernel, a polynomial tanh in
 *          GELU, gradients accumulated in place): the same results to
 *          float32 rounding, not the same bits;
 *   BF16   every matrix product with bf16 operands (rounded to nearest even
 *          from float32) and float32 accumulation, on oneDNN's bf16 kernels
 *          where the CPU has them (tg_numerics_bf16_native); everything
 *          else float32 as under FAST (float32 master weights, gradients
 *          and optimizer state). Products of float64 tensors stay float64.
 * Dropout masks are a draw, not arithmetic: every policy draws the same
 * masks from the generator's stream. */
typedef enum { TG_NUMERICS_EXACT = 0, TG_NUMERICS_FAST = 1, TG_NUMERICS_BF16 = 2 } tg_numerics;
/* "exact", "fast", "bf16" ("?" for a value outside the enum). */
TG_API const char *tg_numerics_name(tg_numerics n);
/* The policy named s ("exact", "fast" or "bf16"); an error naming s otherwise. */
TG_API int tg_numerics_parse(const char *s, tg_numerics *out);
/* Whether BF16 products run on this CPU's bf16 hardware: oneDNN (built
 * with it) reports AVX512_BF16 or AMX-BF16 for this process (its
 * DNNL_MAX_CPU_ISA setting included), or the environment variable
 * TAPEGRAD_BF16_ONEDNN=1 asks for oneDNN's bf16 matmul on any CPU it runs
 * one on (an AVX-512 CPU without bf16 units: oneDNN widens the operands
 * itself, slowly; to test that path). Without it, BF16 products are
 * emulated: bf16-rounded operands on float32 sgemm, the same numbers to
 * float32 rounding, slower than FAST. */
TG_API bool tg_numerics_bf16_native(void);
/* Runs BF16 products emulated even where the hardware could (on: true), or
 * back on the hardware (false): to compare the two. Process-wide. */
TG_API void tg_numerics_bf16_set_emulated(bool on);
/* The kernels BF16 products ran on so far in this process, comma-separated:
 * oneDNN's implementation names ("brg:avx512_core_amx_bf16"), the library's
 * own row kernel of generation, "emulated (sgemm on bf16-rounded operands)";
 * "" before the first. */
TG_API const char *tg_numerics_bf16_kernel(void);
/* Bytes the kept weight copies hold now: the parameters' bf16 copies
 * (under BF16 a float32 weight generation's few rows read is copied once
 * per version of its storage and kept with it, until an optimizer updates
 * it; training and evaluation products round a weight into scratch, so a
 * step keeps no copy of it) and the bfloat16 weights'
 * float32 copies (under EXACT, the same way: the products then read the
 * copy, not a widening of their own). A float32 copy that would take these
 * bytes past half the machine's physical memory (sysconf) is not made: that
 * product widens the weight into a buffer of its own, freed after it.
 * Freed with the weight's tape: the "weight copies" of tapegrad bench
 * --memory. */
TG_API size_t tg_numerics_copy_bytes(void);
/* Deprecated, does nothing: under BF16 a parameter's bf16 copy is made for
 * one version of its storage (tg_tensor_version) and made again after any
 * write through the library. Kept so that older programs compile. */
TG_API void tg_numerics_weights_changed(void);

/* ---- tapes ----------------------------------------------------------- */

/* A new empty tape; NULL if out of memory. Free with tg_tape_free. */
TG_API tg_tape *tg_tape_new(void);
TG_API void tg_tape_free(tg_tape *tp);
/* Drops every tensor and node in the tape at once and keeps its memory: after
 * a reset, recording the same computation again allocates nothing. */
TG_API void tg_tape_reset(tg_tape *tp);
/* Bytes handed out since the last reset / bytes held from the system. */
TG_API size_t tg_tape_used(const tg_tape *tp);
TG_API size_t tg_tape_reserved(const tg_tape *tp);
/* Caps the memory a tape may hold (0 = no cap). Allocations past it fail with
 * an error, as out of memory does. */
TG_API void tg_tape_set_limit(tg_tape *tp, size_t max_bytes);
/* Raw 64-byte aligned memory that lives as long as the tape's contents; NULL on
 * failure (with an error recorded). Zeroed if zero is true. */
TG_API void *tg_tape_alloc(tg_tape *tp, size_t nbytes, bool zero);
/* The numerics policy of everything recorded into tp (tg_numerics above):
 * every op reads it from the tape it records into and every node keeps it,
 * so backward runs under the policy its forward ran under. A new tape is
 * EXACT; a reset keeps the policy. Set it where the step is set up:
 *     tg_tape_set_numerics(step, TG_NUMERICS_BF16);
 * covers the model, any module added later and the loss. EINVAL for NULL
 * or a value outside the enum. */
TG_API int tg_tape_set_numerics(tg_tape *tp, tg_numerics numerics);
TG_API tg_numerics tg_tape_numerics(const tg_tape *tp);

/* ---- dtypes ---------------------------------------------------------- */

TG_API size_t tg_dtype_size(tg_dtype dt);
TG_API const char *tg_dtype_name(tg_dtype dt); /* "float32", "float64", "bool", ..., "bfloat16" */

/* ---- creation (results live in tp, contiguous) ------------------------ */

TG_API tg_tensor *tg_empty(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_zeros(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_ones(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_full(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape, double value);
/* Copies numel elements of type dt from src (row-major). */
TG_API tg_tensor *tg_from_data(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape, const void *src);
/* Convenience: from float / double arrays. */
TG_API tg_tensor *tg_from_f32(tg_tape *tp, int ndim, const int64_t *shape, const float *src);
TG_API tg_tensor *tg_from_f64(tg_tape *tp, int ndim, const int64_t *shape, const double *src);
TG_API tg_tensor *tg_scalar(tg_tape *tp, tg_dtype dt, double value); /* 0-dim */
/* [start, end) by step, 1-D. */
TG_API tg_tensor *tg_arange(tg_tape *tp, tg_dtype dt, double start, double end, double step);
TG_API tg_tensor *tg_eye(tg_tape *tp, tg_dtype dt, int64_t n, int64_t m);
/* Upper/lower triangle of a 2-D (or batched) tensor, as torch.triu/tril. */
TG_API tg_tensor *tg_triu(tg_tape *tp, const tg_tensor *x, int64_t diagonal);
TG_API tg_tensor *tg_tril(tg_tape *tp, const tg_tensor *x, int64_t diagonal);
/* Same shape and dtype as x, uninitialised / zeros. */
TG_API tg_tensor *tg_empty_like(tg_tape *tp, const tg_tensor *x);
TG_API tg_tensor *tg_zeros_like(tg_tape *tp, const tg_tensor *x);
/* Contiguous copy with a new dtype (never recorded on the tape as an op).
 * To TG_BF16: each value rounded to the nearest bfloat16, ties to even (a
 * NaN stays a quiet NaN, infinities and signed zeros kept; float64 rounds
 * to float32 first, as PyTorch converts). From TG_BF16: exact. */
TG_API tg_tensor *tg_to_dtype(tg_tape *tp, const tg_tensor *x, tg_dtype dt);

/* ---- inspection ------------------------------------------------------ */

TG_API int64_t tg_numel(const tg_tensor *x);
/* The bytes x's elements take in its dtype (numel times the element size;
 * a TG_Q8 tensor's blocks: numel / 32 * 34). 0 for NULL. */
TG_API size_t tg_tensor_nbytes(const tg_tensor *x);
/* PyTorch's x._version: how many times the library wrote x's storage (0 when
 * made; in-place ops, fills, tg_set, inits, random fills, optimizer steps,
 * state_dict and checkpoint loads, all-reduce and broadcast each add 1). A
 * view shares its base's count. A node keeps the versions of the tensors it
 * saves, and tg_backward refuses a graph one of them changed in (TG_ESTATE,
 * PyTorch's message, no gradient written). 0 for NULL. */
TG_API int64_t tg_tensor_version(const tg_tensor *x);
TG_API bool tg_is_contiguous(const tg_tensor *x);
TG_API bool tg_same_shape(const tg_tensor *a, const tg_tensor *b);
/* "(2,6,3)" into buf; returns buf. */
TG_API char *tg_shape_str(const tg_tensor *x, char *buf, size_t n);
/* Element at a multi-index (ndim entries, each in [0, shape[d]); NULL for
 * 0-dim) as double; NAN with an error naming the index and the shape if x or
 * idx is NULL or an index is out of range. */
TG_API double tg_get(const tg_tensor *x, const int64_t *idx);
/* Stores v (converted to x's dtype) at a multi-index, checked as tg_get.
 * Returns TG_OK, or TG_EINVAL with an error (nothing written); for integer and
 * bool dtypes also when v is NaN or outside the dtype's range. */
TG_API int tg_set(tg_tensor *x, const int64_t *idx, double v);
/* Element at a flat row-major position (0 <= i < numel) as double; NAN with
 * an error if out of range. */
TG_API double tg_item_at(const tg_tensor *x, int64_t i);
/* The single value of a 1-element tensor. */
TG_API double tg_item(const tg_tensor *x);
/* Copies all elements in row-major order into dst as float/double. */
TG_API int tg_copy_to_f32(const tg_tensor *x, float *dst);
TG_API int tg_copy_to_f64(const tg_tensor *x, double *dst);
/* Pointer to the first element, for contiguous tensors (NULL otherwise). */
TG_API void *tg_data_ptr(const tg_tensor *x);

/* ---- generators (torch.Generator compatible) ------------------------- */

/* A Mersenne Twister seeded as torch.manual_seed(seed) seeds it. */
TG_API tg_generator *tg_generator_new(uint64_t seed);
TG_API void tg_generator_free(tg_generator *g);
TG_API void tg_generator_seed(tg_generator *g, uint64_t seed);
/* The process-wide default generator (torch's default CPU generator). */
TG_API tg_generator *tg_default_generator(void);
/* torch.manual_seed(seed): reseeds the default generator. */
TG_API void tg_manual_seed(uint64_t seed);
TG_API uint32_t tg_generator_random(tg_generator *g);   /* one 32-bit draw */
TG_API uint64_t tg_generator_random64(tg_generator *g); /* one 64-bit draw (two 32-bit) */

/* The generator's whole state (torch.get_rng_state / set_rng_state, in
 * tapegrad's own layout of TG_GENERATOR_STATE_BYTES bytes), to checkpoint a
 * run and continue it with the same draws. set_state checks the size and the
 * layout and leaves g unchanged on error. */
#define TG_GENERATOR_STATE_BYTES 2520
TG_API int tg_generator_get_state(const tg_generator *g, uint8_t *out, size_t size);
TG_API int tg_generator_set_state(tg_generator *g, const uint8_t *state, size_t size);

/* How dropout (tg_dropout, the fused attention's dropout) draws its masks
 * from a generator. TG_DROPOUT_TORCH, the default: PyTorch's bernoulli_
 * stream, element by element in PyTorch's order, so seeded training equals
 * PyTorch's. TG_DROPOUT_COUNTER: one 64-bit seed from the generator per
 * mask and a counter-based hash for the elements; faster (no serial draws,
 * nothing stored for backward) but not PyTorch's masks. g NULL = default
 * generator; the setting survives reseeding. */
typedef enum { TG_DROPOUT_TORCH = 0, TG_DROPOUT_COUNTER = 1 } tg_dropout_stream;
TG_API int tg_generator_set_dropout_stream(tg_generator *g, tg_dropout_stream s);
TG_API tg_dropout_stream tg_generator_dropout_stream(const tg_generator *g);
/* Data parallel dropout: with a batch slice (index, count), every dropout
 * mask g draws (tg_dropout, the fused attention's) is part index of count
 * equal parts of the mask one process would draw for count times the
 * tensor along its first dimension: the tensor is this process's share of
 * a global batch, and g advances as the whole mask's draws would, so all
 * the parts' generators stay in step and the masks do not depend on count.
 * tg_dist_ddp_new (dist.h) sets it; (0, 1) = whole masks, the default.
 * Kept across reseeding and state loads; not part of the state. */
TG_API int tg_generator_set_batch_slice(tg_generator *g, int64_t index, int64_t count);
TG_API void tg_generator_batch_slice(const tg_generator *g, int64_t *index, int64_t *count);

/* torch.randperm(n, generator=g) into out (n int64): a permutation of 0..n-1
 * drawn as PyTorch's CPU kernel draws it. */
TG_API int tg_randperm(tg_generator *g, int64_t n, int64_t *out);

/* In-place fills drawing exactly as PyTorch's CPU kernels do (g NULL = default).
 * x must be contiguous f32 or f64; uniform_ and normal_ also take bf16, drawn
 * as a float32 tensor is and each value rounded (x.to(torch.bfloat16) of
 * the float32 draw), with no float32 copy. Return TG_OK or an error status. */
TG_API int tg_uniform_(tg_tensor *x, double from, double to, tg_generator *g);
TG_API int tg_normal_(tg_tensor *x, double mean, double std, tg_generator *g);
/* x.bernoulli_(p): 1 where a float64 uniform is < p, else 0. */
TG_API int tg_bernoulli_(tg_tensor *x, double p, tg_generator *g);
/* torch.multinomial(probs, num_samples, replacement) on 1-D or 2-D
 * probabilities (not necessarily normalised): TG_I64 (.., num_samples),
 * drawn as PyTorch's CPU kernel draws (exponential_ then the largest
 * probs / q), so a seeded draw equals PyTorch's. More than one sample with
 * replacement is refused. */
TG_API tg_tensor *tg_multinomial(tg_tape *tp, const tg_tensor *probs, int64_t num_samples, bool replacement,
                                 tg_generator *g);
/* torch.rand / torch.randn. */
TG_API tg_tensor *tg_rand(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape, tg_generator *g);
TG_API tg_tensor *tg_randn(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape, tg_generator *g);

/* ---- torch.nn.init -------------------------------------------------------- */

/* In-place initialisations of a (parameter) tensor, drawing from g (NULL =
 * default generator) exactly as PyTorch 1.13's torch.nn.init does after the
 * same seed: each is one tg_uniform_ or tg_normal_ with the bound or standard
 * deviation init.py computes. Never recorded, allowed on tensors that require
 * grad (init runs under no_grad). The random ones take contiguous float32,
 * float64 or bfloat16 tensors (bf16: the float32 draw rounded, as
 * tg_uniform_); zeros_ and ones_ any tensor. Return TG_OK or an error
 * status with a message.
 *
 * Fans (_calculate_fan_in_and_fan_out; tensors of 2 dims or more):
 * fan_in = size(1) * receptive field, fan_out = size(0) * receptive field,
 * the receptive field being the product of the sizes past dim 1. A Linear
 * weight (out, in) has fan_in = in; LoRA's A (in, rank) has fan_in = rank, so
 * tg_init_kaiming_uniform_(A, sqrt(5), TG_FAN_IN, NULL, g) draws from
 * U(-1/sqrt(rank), 1/sqrt(rank)). */
typedef enum { TG_FAN_IN = 0, TG_FAN_OUT = 1 } tg_fan_mode;

/* init.calculate_gain(nonlinearity, param): 1 for "linear", "conv1d",
 * "conv2d", "conv3d", "conv_transpose1d/2d/3d", "sigmoid"; 5/3 "tanh";
 * sqrt(2) "relu"; sqrt(2 / (1 + param^2)) "leaky_relu" (param the negative
 * slope, NAN for PyTorch's default 0.01; NULL nonlinearity = "leaky_relu");
 * 3/4 "selu". An error for any other name. */
TG_API int tg_init_calculate_gain(const char *nonlinearity, double param, double *gain);
/* init.uniform_(x, a, b), init.normal_(x, mean, std). */
TG_API int tg_init_uniform_(tg_tensor *x, double a, double b, tg_generator *g);
TG_API int tg_init_normal_(tg_tensor *x, double mean, double std, tg_generator *g);
/* init.zeros_(x), init.ones_(x). */
TG_API int tg_init_zeros_(tg_tensor *x);
TG_API int tg_init_ones_(tg_tensor *x);
/* init.kaiming_uniform_(x, a, mode, nonlinearity): std = gain / sqrt(fan)
 * with gain = calculate_gain(nonlinearity, a) and fan = fan_in or fan_out
 * by mode; x from U(-sqrt(3) * std, sqrt(3) * std). nonlinearity NULL =
 * "leaky_relu" (PyTorch's default, a = 0 its default slope). A tensor with a
 * zero size is left as it is, as PyTorch does. */
TG_API int tg_init_kaiming_uniform_(tg_tensor *x, double a, tg_fan_mode mode, const char *nonlinearity,
                                    tg_generator *g);
/* init.kaiming_normal_: the same std, x from N(0, std). */
TG_API int tg_init_kaiming_normal_(tg_tensor *x, double a, tg_fan_mode mode, const char *nonlinearity,
                                   tg_generator *g);
/* init.xavier_uniform_(x, gain): std = gain * sqrt(2 / (fan_in + fan_out)),
 * x from U(-sqrt(3) * std, sqrt(3) * std); init.xavier_normal_: N(0, std).
 * PyTorch's default gain is 1. */
TG_API int tg_init_xavier_uniform_(tg_tensor *x, double gain, tg_generator *g);
TG_API int tg_init_xavier_normal_(tg_tensor *x, double gain, tg_generator *g);

/* ---- printing ---------------------------------------------------------- */

/* Formats x exactly as PyTorch's default print does ("tensor([...])",
 * with ", grad_fn=<Name>" or ", requires_grad=True" as PyTorch adds them).
 * Returns a malloc'd string the caller frees, or NULL on error. */
TG_API char *tg_format(const tg_tensor *x);
/* Writes tg_format(x) and a newline to f. Returns TG_OK or an error status. */
TG_API int tg_print(FILE *f, const tg_tensor *x);

/* ---- safetensors --------------------------------------------------------- */

typedef struct {
    const char *name;
    const tg_tensor *tensor;
} tg_named_tensor;

/* Writes n tensors to path in the safetensors format (names must be unique;
 * TG_BF16 tensors as "BF16", TG_Q8 ones as "Q8_0": the logical shape and
 * the blocks' bytes, numel / 32 * 34, a dtype of tapegrad's that the
 * reference reader does not know; the others under their own dtype).
 * Writes to a temporary file and renames it, so a failed save leaves no broken
 * file. Returns TG_OK or an error status with a message; TG_EINVAL for a
 * TG_Q8 view whose blocks are not whole and back to back; TG_EIO, nothing
 * written, when path exists and is not a regular file (a directory, a device
 * such as /dev/null, a FIFO or a socket: the rename would replace it). */
TG_API int tg_safetensors_save(const char *path, const tg_named_tensor *tensors, int n);

/* A loaded file: names and tensors in file order, all living in the tape given
 * to tg_safetensors_load. */
typedef struct {
    int n;
    char **names;
    tg_tensor **tensors;
} tg_safetensors;

/* Reads and strictly validates a safetensors file (header length bound, JSON,
 * duplicate names, dtypes, shapes, offsets contiguous and in bounds, byte
 * lengths). On success fills *out (memory in tp) and returns TG_OK; otherwise
 * an error status whose message names the problem. Dtypes BOOL, U8, F32,
 * F64 and I64 are read as they are; F16 and BF16 (Hugging Face checkpoints)
 * are widened to float32 tensors, exactly (tg_safetensors_save writes BF16
 * from TG_BF16 tensors, F16 never). Q8_0 entries are TG_Q8 tensors holding
 * the file's blocks; TG_EFORMAT for one with no dims, a last dim that is not
 * a multiple of 32, a byte range that is not numel / 32 * 34, or a block
 * whose scale is NaN or infinite. Each tensor is read from the file into
 * its own storage: the tape holds the tensors (twice a 16-bit entry's
 * bytes), not a copy of the file. */
TG_API int tg_safetensors_load(tg_tape *tp, const char *path, tg_safetensors *out);
/* How tg_safetensors_load_ex reads a file; zero (or NULL) is
 * tg_safetensors_load's way. keep_bf16: BF16 entries become TG_BF16
 * tensors holding the file's bits (half the memory of widening them; a
 * copy into a float32 tensor, tg_copy_ or a state_dict load, widens them
 * exactly then). */
typedef struct {
    bool keep_bf16;
} tg_safetensors_options;
TG_API int tg_safetensors_load_ex(tg_tape *tp, const char *path, const tg_safetensors_options *opt,
                                  tg_safetensors *out);
/* Same, from a memory buffer. */
TG_API int tg_safetensors_parse(tg_tape *tp, const uint8_t *buf, size_t len, tg_safetensors *out);
/* The tensor named name, or NULL. */
TG_API tg_tensor *tg_safetensors_get(const tg_safetensors *st, const char *name);

#ifdef __cplusplus
}
#endif
#endif
