/* tapegrad/autograd.h: differentiable operations, backward(), gradcheck.
 *
 * Every op takes the tape its result (and its backward node) is recorded in,
 * and returns a new tensor in that tape, or NULL with tg_last_error() set. An op
 * given a NULL input returns NULL, so a forward pass may be checked once at its
 * end. When grad mode is on and an input requires grad, the op records a node
 * named as PyTorch 1.13 names it (MmBackward0, SoftmaxBackward0, ...).
 *
 * View ops (view, reshape when possible, transpose, permute, narrow, select,
 * unsqueeze, squeeze, expand) share storage with their input: writing through
 * them is seen by the base. Gradients through views flow back into the base.
 */
#ifndef TAPEGRAD_AUTOGRAD_H
#define TAPEGRAD_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- grad mode, leaves ------------------------------------------------- */

TG_API bool tg_is_grad_enabled(void);
/* Sets grad mode on this thread; returns the previous mode (torch.no_grad). */
TG_API bool tg_set_grad_enabled(bool enabled);
/* Marks a leaf as requiring grad; error for non-float dtypes or non-leaves. */
TG_API int tg_requires_grad_(tg_tensor *x, bool requires_grad);
/* A view of x sharing storage, cut from the graph. */
TG_API tg_tensor *tg_detach(tg_tape *tp, tg_tensor *x);
/* x->grad = zeros (kept allocated), as optimizer.zero_grad(set_to_none=False). */
TG_API void tg_zero_grad(tg_tensor *x);
/* The node name of x's grad_fn ("MmBackward0"), or NULL for leaves. */
TG_API const char *tg_grad_fn_name(const tg_tensor *x);
/* A leaf x is one with no grad_fn. */
TG_API bool tg_is_leaf(const tg_tensor *x);
/* Tensor.retain_grad(): a non-leaf x (one with a grad_fn) gets its .grad,
 * in x's own tape, filled with d(root)/d(x) by every later backward that
 * reaches it (accumulated, as a leaf's; tg_zero_grad clears it). A leaf
 * requiring grad keeps its .grad anyway: TG_OK, nothing to do. An error
 * for a tensor that does not require grad. */
TG_API int tg_retain_grad(tg_tensor *x);

/* Reverse-mode backward from root. grad may be NULL for a 1-element root (the
 * gradient is 1); otherwise it must have root's shape. Follows the graph from
 * root through every node's inputs, whatever tape each node was recorded in,
 * in topological order. Gradients accumulate (+=) into the .grad of leaves
 * that require grad; leaf gradients live in the leaf's own tape. Unless
 * retain_graph is true, the graph's saved tensors are released and a second
 * backward through it is an error. Returns TG_OK, or the status of the first
 * node whose backward failed (TG_ENOMEM when an allocation failed, or what a
 * user function's backward returned) with its message in tg_last_error();
 * a successful backward leaves tg_last_error() as it was. */
TG_API int tg_backward(tg_tensor *root, const tg_tensor *grad, bool retain_graph);

/* ---- user functions (torch.autograd.Function) --------------------------- */

/* A function with its own forward and backward, recorded as one node. The
 * context carries what forward saves for backward; it lives in the tape given
 * to tg_function_apply. */
typedef struct tg_fn_ctx tg_fn_ctx;
typedef struct tg_function {
    const char *name;                                   /* its grad_fn name: "SiluBackward0" */
    /* The output from n inputs, computed in tp with grad recording off; NULL
     * (with tg_error) on failure. */
    tg_tensor *(*forward)(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *inputs);
    /* From grad_output (contiguous, the output's shape), sets grad_inputs[i]
     * (n entries, NULL on entry; NULL = no gradient) to d(root)/d(inputs[i]),
     * of the input's dtype and shape or a shape the input broadcasts to (it is
     * then summed down). Temporaries go in tp. Runs with grad recording off.
     * Returns TG_OK or an error status (which stops tg_backward). */
    int (*backward)(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *grad_output, tg_tensor **grad_inputs);
} tg_function;

/* Runs f->forward on the inputs and, if grad mode is on and an input requires
 * grad, records one node named f->name for the (float) output. If forward
 * returns an input, or any tensor that already has a grad_fn or requires
 * grad, the node goes on a new view of it. NULL with an error if f, its name,
 * forward or backward, n < 0 or an input is NULL, or if forward fails. */
TG_API tg_tensor *tg_function_apply(tg_tape *tp, const tg_function *f, int n, tg_tensor *const *inputs);
/* In forward: keeps n tensors for backward (replacing any saved before). */
TG_API int tg_fn_save_for_backward(tg_fn_ctx *ctx, int n, tg_tensor *const *tensors);
/* In backward: the i-th saved tensor; NULL with an error if i is out of range. */
TG_API tg_tensor *tg_fn_saved(const tg_fn_ctx *ctx, int i);
TG_API void *tg_fn_data(tg_fn_ctx *ctx, size_t size);  /* scratch for non-tensor state, zeroed */

/* ---- elementwise (PyTorch broadcasting; same float dtype) --------------- */

TG_API tg_tensor *tg_add(tg_tape *tp, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_sub(tg_tape *tp, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_mul(tg_tape *tp, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_div(tg_tape *tp, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_add_scalar(tg_tape *tp, tg_tensor *a, double s);
TG_API tg_tensor *tg_sub_scalar(tg_tape *tp, tg_tensor *a, double s);
TG_API tg_tensor *tg_rsub_scalar(tg_tape *tp, tg_tensor *a, double s); /* s - a */
TG_API tg_tensor *tg_mul_scalar(tg_tape *tp, tg_tensor *a, double s);
TG_API tg_tensor *tg_div_scalar(tg_tape *tp, tg_tensor *a, double s);
TG_API tg_tensor *tg_pow_scalar(tg_tape *tp, tg_tensor *a, double exponent);
TG_API tg_tensor *tg_neg(tg_tape *tp, tg_tensor *a);
TG_API tg_tensor *tg_exp(tg_tape *tp, tg_tensor *a);
TG_API tg_tensor *tg_log(tg_tape *tp, tg_tensor *a);
TG_API tg_tensor *tg_sqrt(tg_tape *tp, tg_tensor *a);
TG_API tg_tensor *tg_rsqrt(tg_tape *tp, tg_tensor *a); /* 1 / sqrt(a): RsqrtBackward0 */
TG_API tg_tensor *tg_tanh(tg_tape *tp, tg_tensor *a);
TG_API tg_tensor *tg_relu(tg_tape *tp, tg_tensor *a);
TG_API tg_tensor *tg_gelu(tg_tape *tp, tg_tensor *a); /* tanh approximation, as the book's GELU module's ops round */
/* F.gelu(a, approximate="tanh") with PyTorch's kernel's bits (GeluBackward0):
 * Gemma 3's feed-forward. The same function as tg_gelu, rounded otherwise. */
TG_API tg_tensor *tg_gelu_tanh(tg_tape *tp, tg_tensor *a);

/* Comparisons give TG_BOOL masks (never recorded). */
typedef enum { TG_CMP_EQ, TG_CMP_NE, TG_CMP_LT, TG_CMP_LE, TG_CMP_GT, TG_CMP_GE } tg_cmp;
TG_API tg_tensor *tg_compare(tg_tape *tp, const tg_tensor *a, const tg_tensor *b, tg_cmp op);
TG_API tg_tensor *tg_compare_scalar(tg_tape *tp, const tg_tensor *a, double s, tg_cmp op);
/* cond ? a : b with broadcasting; cond is TG_BOOL. */
TG_API tg_tensor *tg_where(tg_tape *tp, const tg_tensor *cond, tg_tensor *a, tg_tensor *b);
/* x with value where mask (TG_BOOL, broadcastable to x) is true. */
TG_API tg_tensor *tg_masked_fill(tg_tape *tp, tg_tensor *x, const tg_tensor *mask, double value);

/* ---- reductions (dims may be negative; ndims 0 = all dims) -------------- */

/* tg_sum and tg_sum_dims also take TG_BOOL, TG_U8 and TG_I64 tensors: the
 * result is then TG_I64, the exact sum (the count of true elements of a
 * mask), as torch.sum gives int64; not recorded. The others take float
 * tensors only. */

TG_API tg_tensor *tg_sum(tg_tape *tp, tg_tensor *x);  /* all elements: SumBackward0 */
TG_API tg_tensor *tg_mean(tg_tape *tp, tg_tensor *x); /* MeanBackward0 */
TG_API tg_tensor *tg_sum_dims(tg_tape *tp, tg_tensor *x, int ndims, const int *dims, bool keepdim);
TG_API tg_tensor *tg_mean_dims(tg_tape *tp, tg_tensor *x, int ndims, const int *dims, bool keepdim);
/* Max over one dim: values (recorded, MaxBackward0) and, if indices is not
 * NULL, TG_I64 indices. */
TG_API tg_tensor *tg_max_dim(tg_tape *tp, tg_tensor *x, int dim, bool keepdim, tg_tensor **indices);
TG_API tg_tensor *tg_max(tg_tape *tp, tg_tensor *x); /* all elements: MaxBackward1 */
/* x.var(dim, unbiased, keepdim) (VarBackward0): biased divides by N, unbiased
 * by N - 1 (nan when that is 0, as PyTorch). */
TG_API tg_tensor *tg_var(tg_tape *tp, tg_tensor *x, int dim, bool unbiased, bool keepdim);
/* torch.argmax(x, dim, keepdim): TG_I64, the first index of the maximum (NaN
 * counts as the maximum); not differentiable. */
TG_API tg_tensor *tg_argmax(tg_tape *tp, const tg_tensor *x, int dim, bool keepdim);
/* torch.topk(x, k, dim, largest, sorted): *values (TopkBackward0) and TG_I64
 * *indices, sorted (largest first when largest), ties by index. 0 <= k <= size. */
TG_API int tg_topk(tg_tape *tp, tg_tensor *x, int64_t k, int dim, bool largest, bool sorted, tg_tensor **values,
                   tg_tensor **indices);

/* ---- softmax ------------------------------------------------------------- */

TG_API tg_tensor *tg_softmax(tg_tape *tp, tg_tensor *x, int dim);
TG_API tg_tensor *tg_log_softmax(tg_tape *tp, tg_tensor *x, int dim);

/* ---- matrix products ----------------------------------------------------- */

/* torch.matmul: 1-D, 2-D and batched N-D with broadcast batch dims. */
TG_API tg_tensor *tg_matmul(tg_tape *tp, tg_tensor *a, tg_tensor *b);
TG_API tg_tensor *tg_mm(tg_tape *tp, tg_tensor *a, tg_tensor *b);  /* 2-D only */
TG_API tg_tensor *tg_bmm(tg_tape *tp, tg_tensor *a, tg_tensor *b); /* 3-D only, same batch */
/* F.linear: x (..., in) @ w(out, in)^T + b(out) (b may be NULL). */
TG_API tg_tensor *tg_linear(tg_tape *tp, tg_tensor *x, tg_tensor *w, tg_tensor *b);

/* ---- shape and views ------------------------------------------------------ */

/* A -1 in shape is inferred. view errors if the layout cannot be viewed. */
TG_API tg_tensor *tg_view(tg_tape *tp, tg_tensor *x, int ndim, const int64_t *shape);
/* A view when possible, else a copy (as torch.reshape). */
TG_API tg_tensor *tg_reshape(tg_tape *tp, tg_tensor *x, int ndim, const int64_t *shape);
TG_API tg_tensor *tg_transpose(tg_tape *tp, tg_tensor *x, int d0, int d1);
TG_API tg_tensor *tg_t(tg_tape *tp, tg_tensor *x); /* 2-D transpose, TBackward0 */
TG_API tg_tensor *tg_permute(tg_tape *tp, tg_tensor *x, const int *perm);
/* x[..., start:start+length, ...] along dim (torch.narrow). */
TG_API tg_tensor *tg_narrow(tg_tape *tp, tg_tensor *x, int dim, int64_t start, int64_t length);
/* x[..., index, ...] (dim removed). */
TG_API tg_tensor *tg_select(tg_tape *tp, tg_tensor *x, int dim, int64_t index);
TG_API tg_tensor *tg_unsqueeze(tg_tape *tp, tg_tensor *x, int dim);
TG_API tg_tensor *tg_squeeze(tg_tape *tp, tg_tensor *x, int dim); /* dim < -ndim.. : see docs */
TG_API tg_tensor *tg_squeeze_all(tg_tape *tp, tg_tensor *x);
/* Broadcast view to shape (-1 keeps a dim). */
TG_API tg_tensor *tg_expand(tg_tape *tp, tg_tensor *x, int ndim, const int64_t *shape);
/* x itself if contiguous, else a contiguous copy (CloneBackward0). */
TG_API tg_tensor *tg_contiguous(tg_tape *tp, tg_tensor *x);
TG_API tg_tensor *tg_clone(tg_tape *tp, tg_tensor *x);
TG_API tg_tensor *tg_cat(tg_tape *tp, int n, tg_tensor *const *xs, int dim);
TG_API tg_tensor *tg_stack(tg_tape *tp, int n, tg_tensor *const *xs, int dim);

/* ---- indexing by an int64 index tensor (copies, not views) ---------------- */

/* torch.gather(x, dim, index): index TG_I64 with x's number of dims and
 * index.size(d) <= x.size(d) for every d != dim; the result has index's
 * shape, out[i][j][k] = x[index[i][j][k]][j][k] (dim 0), and so on. An index
 * value outside [0, x.size(dim)) is an error naming it and its position.
 * GatherBackward0: the gradient scatter-added into zeros of x's shape. */
TG_API tg_tensor *tg_gather(tg_tape *tp, tg_tensor *x, int dim, const tg_tensor *index);
/* torch.index_select(x, dim, index): index TG_I64, 1-D (or 0-dim); the
 * result is x with dim taking index's numel, out[.., j, ..] = x[.., index[j], ..].
 * IndexSelectBackward0: the gradient index-added into zeros of x's shape. */
TG_API tg_tensor *tg_index_select(tg_tape *tp, tg_tensor *x, int dim, const tg_tensor *index);

/* ---- in-place, never recorded (error if x requires grad in grad mode) ---- */

TG_API int tg_copy_(tg_tensor *dst, const tg_tensor *src); /* broadcasting copy */
TG_API int tg_fill_(tg_tensor *x, double value);
/* x += alpha * y (same shape). */
TG_API int tg_add_(tg_tensor *x, const tg_tensor *y, double alpha);
TG_API int tg_mul_scalar_(tg_tensor *x, double s);

/* ---- losses -------------------------------------------------------------- */

typedef enum { TG_REDUCE_MEAN, TG_REDUCE_SUM, TG_REDUCE_NONE } tg_reduction;
TG_API tg_tensor *tg_mse_loss(tg_tape *tp, tg_tensor *input, tg_tensor *target, tg_reduction r);
/* F.cross_entropy: logits (N, C), target TG_I64 class indices (N), in one
 * fused node (NllLossBackward0) that keeps the log-softmax. Targets equal to
 * TG_IGNORE_INDEX (-100, PyTorch's default ignore_index) add no loss and no
 * gradient; the mean divides by the targets not ignored (nan when all are). */
#define TG_IGNORE_INDEX (-100)
TG_API tg_tensor *tg_cross_entropy(tg_tape *tp, tg_tensor *logits, const tg_tensor *target, tg_reduction r);
/* The same with another ignore_index (F.cross_entropy(..., ignore_index=i)). */
TG_API tg_tensor *tg_cross_entropy_ignore(tg_tape *tp, tg_tensor *logits, const tg_tensor *target, tg_reduction r,
                                          int64_t ignore_index);
/* F.nll_loss on log-probabilities (N, C) (NllLossBackward0): with
 * tg_log_softmax, the composed path of cross-entropy, as PyTorch's graph
 * shows it (NllLossBackward0 -> LogSoftmaxBackward0). ignore_index as above. */
TG_API tg_tensor *tg_nll_loss(tg_tape *tp, tg_tensor *logp, const tg_tensor *target, tg_reduction r);
TG_API tg_tensor *tg_nll_loss_ignore(tg_tape *tp, tg_tensor *logp, const tg_tensor *target, tg_reduction r,
                                     int64_t ignore_index);
/* F.cross_entropy(F.linear(x, weight, bias), target, ignore_index=i): a
 * model's output head and its loss. x (N, d), weight (V, d), bias (V) or
 * NULL, target TG_I64 (N). Under EXACT (and for the NONE reduction) the two
 * calls as PyTorch makes them (AddmmBackward0/MmBackward0 and
 * NllLossBackward0). Under FAST and BF16 one node
 * (LinearCrossEntropyBackward0) computes the logits a chunk of rows at a
 * time (about 16 MiB of them), turns each chunk into its gradient at once
 * and makes x's gradient from it, so the (N, V) logits and their gradient
 * are never held whole: what it keeps for backward is x's gradient (N, d)
 * and the smaller of W's gradient (V, d) and the logits' gradient (N, V)
 * (docs/memory.md). Results equal the two calls' to float32 rounding. */
TG_API tg_tensor *tg_linear_cross_entropy(tg_tape *tp, tg_tensor *x, tg_tensor *weight, tg_tensor *bias,
                                          const tg_tensor *target, tg_reduction r, int64_t ignore_index);
/* F.logsigmoid(x) = log(1 / (1 + exp(-x))) elementwise, in one node
 * (LogSigmoidBackward0) with PyTorch 1.13's CPU formulas and bits:
 * min(x, 0) - log1p(exp(-|x|)), and the backward from the kept exp(-|x|).
 * Float32 or float64 of any shape; an error for other dtypes. */
TG_API tg_tensor *tg_logsigmoid(tg_tape *tp, tg_tensor *x);
/* Preference tuning (DPO), the book's compute_logprobs: the mean
 * log-probability a model gives each sequence's next tokens. logits (B, T, V)
 * float32 or float64, labels TG_I64 (B, T) (the sequences themselves: token
 * t + 1 is predicted at t), mask TG_BOOL (B, T) or NULL. Takes labels[:, 1:],
 * log_softmax(logits[:, :-1, :], -1) and gathers the labels' entries:
 * selected (B, T-1). With a mask, (selected * mask[:, 1:]).sum(-1) /
 * mask[:, 1:].sum(-1) (the mask read as 0/1 of the logits' dtype, the count
 * converted: nan for a row with no true entry after its first), else
 * selected.mean(-1). Returns (B) of the logits' dtype in tp, recorded as
 * PyTorch records the notebook's graph (DivBackward0 or MeanBackward1 on
 * top, SliceBackward0 at the logits), with PyTorch's bits in float32 (in
 * float64 the logits' gradient to rounding: tg_log_softmax's float64
 * backward is not PyTorch's vectorised kernel). NULL with an error for a
 * NULL logits or labels, wrong dims or dtypes, shapes that disagree, T < 2,
 * or a label in labels[:, 1:] outside [0, V). */
TG_API tg_tensor *tg_compute_logprobs(tg_tape *tp, tg_tensor *logits, const tg_tensor *labels, const tg_tensor *mask);
/* The book's compute_dpo_loss from the four (B) log-probabilities (the
 * policy's and the reference model's, on the chosen and on the rejected
 * responses; float32 or float64, all one dtype and shape):
 * losses = -logsigmoid(beta * ((policy_chosen - policy_rejected) -
 * (reference_chosen - reference_rejected))); returns losses.mean() (0-dim,
 * MeanBackward0, differentiable w.r.t. every input that requires grad).
 * *chosen_reward = (policy_chosen - reference_chosen).mean() and
 * *rejected_reward = (policy_rejected - reference_rejected).mean() are 0-dim
 * tensors in tp outside the graph (the notebook detaches them); either
 * pointer may be NULL. NULL with an error (the rewards then NULL too) for a
 * NULL input, inputs not 1-D or differing in shape or dtype, or a beta
 * that is not finite. */
TG_API tg_tensor *tg_compute_dpo_loss(tg_tape *tp, tg_tensor *policy_chosen, tg_tensor *policy_rejected,
                                      tg_tensor *reference_chosen, tg_tensor *reference_rejected, double beta,
                                      tg_tensor **chosen_reward, tg_tensor **rejected_reward);

/* ---- GPT building blocks ----------------------------------------------------- */

/* F.embedding(ids, weight): weight (num, dim), ids TG_I64 of any shape ->
 * ids.shape + (dim) (EmbeddingBackward0: a scatter-add into weight). */
TG_API tg_tensor *tg_embedding(tg_tape *tp, tg_tensor *weight, const tg_tensor *ids);
/* The book's LayerNorm over the last dim in one node (NativeLayerNormBackward0):
 * scale * (x - mean) / sqrt(var_biased + eps) + shift; scale, shift (D). */
TG_API tg_tensor *tg_layer_norm(tg_tape *tp, tg_tensor *x, tg_tensor *scale, tg_tensor *shift, double eps);
/* RMSNorm over the last dim in one node (RmsNormBackward0): x / sqrt(mean(x^2)
 * + eps) * weight; weight (D). Sums in double: FAST numerics (its composed
 * form is in the layer table below). */
TG_API tg_tensor *tg_rms_norm(tg_tape *tp, tg_tensor *x, tg_tensor *weight, double eps);
/* F.silu: x * sigmoid(x) in one node (SiluBackward0), PyTorch's formulas. */
TG_API tg_tensor *tg_silu(tg_tape *tp, tg_tensor *x);

/* ---- dropout --------------------------------------------------------------- */

/* Training-mode dropout as PyTorch draws it: mask = bernoulli_(1 - p) from g
 * (tg_bernoulli_), then x * (mask / (1 - p)) (MulBackward0). p = 0 returns x.
 * g NULL = default generator. */
TG_API tg_tensor *tg_dropout(tg_tape *tp, tg_tensor *x, double p, tg_generator *g);

/* ---- fused attention -------------------------------------------------------- */

/* softmax(q k^T / sqrt(hd) [+ causal mask]) v, dropout p on the weights, in
 * one node (ScaledDotProductAttentionBackward0) that keeps only the per-row
 * log-sum-exp. q, k, v: (..., T, hd) of the same shape. The FAST numerics'
 * attention (tg_layer "attention"): float32 products under every policy,
 * its own summation order (not PyTorch's bits). The output is laid out as q
 * when q's elements are dense with hd innermost (as PyTorch's flash kernel
 * does: for q = x.view(b, T, h, hd).transpose(1, 2) the output's
 * transpose(1, 2) is contiguous), else contiguous. */
TG_API tg_tensor *tg_scaled_dot_product_attention(tg_tape *tp, tg_tensor *q, tg_tensor *k, tg_tensor *v,
                                           bool causal, double dropout_p, tg_generator *g);

/* ---- layers and their numerics (README.md, "Numerics") --------------------- */

/* Every layer with more than one way to compute it is one entry of one
 * table: the book's composition of recorded ops (the oracle, and the graph
 * the unfused modules record), its exact op (one node with the composed
 * graph's bits, forward and backward), its fast op (float32, the library's
 * own kernel and call shapes, within fast_tol of the oracle), and the bf16
 * slot. tg_layer_apply picks the variant for a module's settings; the test
 * harness (tests/test_layers.c) walks every entry. */
typedef struct {
    double dropout;   /* attention: dropout on the weights (0 in eval) */
    double scale;     /* attention: the scores' divisor (the book's keys.shape[-1] ** 0.5) */
    bool no_divide;   /* attention: the scores are not divided (Gemma 3 scales the queries) */
    int64_t window;   /* attention: > 0 when the mask is causal with a sliding window (i - j >= window masked) */
    double eps;       /* LayerNorm, RMSNorm */
    tg_generator *gen; /* the dropout's generator (NULL: the default) */
    bool heads_inner; /* attention: the exact op may write (..., T, h, hd) storage viewed as (..., h, T, hd) */
    int64_t chunk_rows; /* linear_cross_entropy: rows per chunk (0: the library's choice) */
} tg_layer_args;
typedef tg_tensor *(*tg_layer_fn)(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a);
typedef struct {
    const char *name;    /* "attention", "layer_norm", "gelu", "feed_forward", "rms_norm", "silu", ... */
    const char *inputs;  /* what in[] holds, e.g. "q, k, v (..., T, hd), mask (T, T) bool" */
    int nin;
    tg_layer_fn composed; /* the oracle */
    tg_layer_fn exact;    /* NULL: the composed graph is the exact variant */
    tg_layer_fn fast;     /* NULL: the exact op is also the fast one */
    tg_layer_fn bf16;     /* NULL: the fast op (else exact), its products in bf16 */
    double fast_tol;      /* max |fast - composed| / (1 + |composed|) in float32, outputs and gradients */
    bool exact_bits;      /* exact reproduces composed's bits (else: exact_tol, PyTorch's own formulas) */
} tg_layer;
/* The table: its size, its i-th entry, the entry named name (NULL with an error). */
TG_API int tg_layer_count(void);
TG_API const tg_layer *tg_layer_get(int i);
TG_API const tg_layer *tg_layer_find(const char *name);
/* The variant for a module's settings: composed when !fused, else by
 * numerics (EXACT: exact; FAST: fast; BF16: bf16), falling back as the
 * entry says. The ops it records run under numerics. */
TG_API tg_tensor *tg_layer_apply(tg_tape *tp, const tg_layer *layer, bool fused, tg_numerics numerics, int n,
                                 tg_tensor *const *in, const tg_layer_args *a);

/* ---- gradcheck ----------------------------------------------------------------- */

/* What gradcheck differentiates: an output computed from the n inputs in tape
 * tp, called many times. ctx is the caller's, passed through. The arguments
 * come in a module forward's order: the tape, the object, then n and inputs. */
typedef tg_tensor *(*tg_gradcheck_forward)(tg_tape *tp, void *ctx, int n, tg_tensor *const *inputs);

typedef struct {
    bool passed;
    int worst_input;          /* index of the input holding the worst element */
    int64_t worst_index;      /* flat index in that input */
    double analytic, numeric; /* the two derivatives at the worst element */
    double max_abs_err;       /* |analytic - numeric| at the worst element */
    char message[256];
} tg_gradcheck_result;

/* The settings, with designated initialisers; a NULL options pointer, or a
 * field left 0, takes PyTorch's default:
 *     tg_gradcheck_call(fn, ctx, n, inputs, &(tg_gradcheck_options){.atol = 1e-6}, &res);
 * eps, atol, rtol: the step and tolerances (<= 0: 1e-6, 1e-5, 1e-3); a pair
 * fails when |analytic - numeric| > atol + rtol * |numeric|.
 * max_err_per_input: NULL, or one double per input, where each input's
 * largest |analytic - numeric| is written (0 for an input without grad). */
typedef struct {
    double eps, atol, rtol;
    double *max_err_per_input;
} tg_gradcheck_options;

/* What torch.autograd.gradcheck checks, with its tolerances: central
 * differences in float64 over every element of every input requiring grad
 * (inputs must be TG_F64 leaves; any number of them), against backward.
 * Compares d(sum(out * w))/d(input) for a fixed random weighting w. The worst
 * element reported is, on a pass, the one with the largest |a - n|, and on a
 * failure the one furthest past atol + rtol * |n| (the first on ties). opt
 * may be NULL (the defaults); res is output only. Returns TG_OK (see
 * res->passed) or an error status: a NULL fn, inputs or res, n < 1, an input
 * that is NULL, not a leaf, or requires grad without being float64, no input
 * requiring grad, an output that is not float64, or fn failing (its message
 * stays in tg_last_error()). The inputs' own .grad is left as it was. */
TG_API int tg_gradcheck_call(tg_gradcheck_forward fn, void *ctx, int n, tg_tensor *const *inputs,
                             const tg_gradcheck_options *opt, tg_gradcheck_result *res);

/* Deprecated: use tg_gradcheck_call. The first forms, whose function takes
 * (tp, inputs, n, ctx); each gives tg_gradcheck_call's result.
 * tg_gradcheck(fn, inputs, n, ctx, eps, atol, rtol, &res) is
 * tg_gradcheck_call with {eps, atol, rtol}; tg_gradcheck_ex(fn, inputs, n,
 * ctx, &opt, &res) with opt, which must not be NULL here. */
typedef tg_tensor *(*tg_gradcheck_fn)(tg_tape *tp, tg_tensor *const *inputs, int n, void *ctx);
TG_API int tg_gradcheck(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n, void *ctx, double eps,
                 double atol, double rtol, tg_gradcheck_result *res);
TG_API int tg_gradcheck_ex(tg_gradcheck_fn fn, tg_tensor *const *inputs, int n, void *ctx, const tg_gradcheck_options *opt,
                    tg_gradcheck_result *res);

#ifdef __cplusplus
}
#endif
#endif
