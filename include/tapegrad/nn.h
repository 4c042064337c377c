/* tapegrad/nn.h: parameters, the open module system, the built-in modules
 * (Linear, Dropout, the attention modules of chapter 3, Sequential,
 * ModuleList) and state_dict files. Optimizers: tapegrad/optim.h.
 *
 * A module is a tg_module_type (PyTorch's class name, a forward, an optional
 * extra_repr) plus state the type owns, and named parameters, buffers and
 * children in registration order. The built-in modules are written with
 * exactly the calls below, so src/nn/linear.c is the example to copy:
 *
 *     typedef struct { int64_t in, out; } scale_state;
 *     static tg_tensor *scale_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *x)
 *     {
 *         if (n != 1) return tg_error("Scale: expected 1 input, got %d", n);
 *         return tg_mul(tp, x[0], tg_module_get_parameter(self, "gain"));
 *     }
 *     static const tg_module_type scale_type = {.name = "Scale", .forward = scale_forward};
 *     ...
 *     tg_module *m = tg_module_new(tp, &scale_type, sizeof(scale_state));
 *     tg_module_register_parameter(m, "gain", tg_parameter_new(tp, TG_F32, 1, shape));
 *
 * Ownership: a module, its name strings, parameters, buffers and gradients,
 * and an optimizer's state all live in the long-lived tape given to their
 * constructor and are freed with it (there is no per-module free). A module
 * borrows the tensors and children registered with it: they must live at
 * least as long as its tape. Constructors draw initial values from the
 * default generator in PyTorch's order, so after tg_manual_seed(s) they equal
 * PyTorch's modules built after torch.manual_seed(s). Functions returning a
 * pointer return NULL with tg_last_error() set on error; functions returning
 * int return TG_OK or an error status with the message.
 */
#ifndef TAPEGRAD_NN_H
#define TAPEGRAD_NN_H

#include "autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A leaf tensor that requires grad, in tp (nn.Parameter), zero-filled. */
TG_API tg_tensor *tg_parameter_new(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape);

/* ---- modules ------------------------------------------------------------------------ */

typedef struct tg_module tg_module; /* opaque */

/* A module type: PyTorch's class name and the forward. Usually a static const. */
typedef struct tg_module_type {
    const char *name; /* "TransformerBlock": the repr's name and error prefix */
    /* Computes the output from n inputs (any dtype) recording into tp; NULL
     * with an error on bad input. NULL for containers without a forward
     * (ModuleList). */
    tg_tensor *(*forward)(tg_tape *tp, tg_module *self, int n, tg_tensor *const *inputs);
    /* The text between the parentheses of the repr ("in_features=3, ..."),
     * written as snprintf writes (returns the full length; negative on
     * error). May be NULL (nothing). */
    int (*extra_repr)(const tg_module *self, char *buf, size_t size);
    /* Empties the module's own KV cache and its position (the book's
     * reset_cache); TG_OK or an error status. May be NULL: the module keeps
     * no cache. Called by tg_module_reset_kv_cache. */
    int (*reset_cache)(tg_module *self);
} tg_module_type;

/* A new module of type in tp, in training mode, with state_size zeroed bytes
 * of state (tg_module_state) owned by it. type must outlive the module. */
TG_API tg_module *tg_module_new(tg_tape *tp, const tg_module_type *type, size_t state_size);
/* The module's state (NULL when state_size was 0), its type, type name and tape. */
TG_API void *tg_module_state(tg_module *m);
TG_API const void *tg_module_state_const(const tg_module *m);
TG_API const tg_module_type *tg_module_get_type(const tg_module *m);
TG_API const char *tg_module_type_name(const tg_module *m);
TG_API tg_tape *tg_module_tape(const tg_module *m);

/* Registration, as PyTorch's register_parameter / register_buffer /
 * add_module. Names are copied; they must be non-empty and hold no '.'. A name
 * already used by another kind of entry is an error; registering the same
 * name again in the same kind replaces the entry in place (attribute
 * assignment in PyTorch: out_head.weight = tok_emb.weight ties weights).
 * A parameter must be a float leaf tensor; a tensor not yet a parameter
 * becomes one (requires_grad on). Non-persistent buffers stay out of the
 * state_dict. A child that would make the tree a cycle is refused. */
TG_API int tg_module_register_parameter(tg_module *m, const char *name, tg_tensor *p);
TG_API int tg_module_register_buffer(tg_module *m, const char *name, tg_tensor *b, bool persistent);
TG_API int tg_module_add_module(tg_module *m, const char *name, tg_module *child);

/* Look-ups by dotted name ("heads.0.W_query", "out_proj.bias"), as
 * get_submodule / get_parameter / get_buffer. "" is m itself for
 * get_submodule. NULL with an error naming the missing part. */
TG_API tg_module *tg_module_get_submodule(const tg_module *m, const char *dotted_name);
TG_API tg_tensor *tg_module_get_parameter(const tg_module *m, const char *dotted_name);
TG_API tg_tensor *tg_module_get_buffer(const tg_module *m, const char *dotted_name);

/* Direct children in registration order: their count, the i-th child and its
 * name (NULL with an error when i is out of range). */
TG_API int tg_module_num_children(const tg_module *m);
TG_API tg_module *tg_module_child(const tg_module *m, int i);
TG_API const char *tg_module_child_name(const tg_module *m, int i);

/* Runs the module's forward on n inputs, recording into tp. A NULL input or
 * module, or a type without forward, is an error. tg_module_forward is the
 * one-input call. A module marked by tg_module_set_recompute is called
 * through tg_module_call_recompute. */
TG_API tg_tensor *tg_module_call(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs);
TG_API tg_tensor *tg_module_forward(tg_tape *tp, tg_module *m, tg_tensor *x);

/* torch.utils.checkpoint(m, *inputs): the call m(inputs) whose activations
 * tp does not keep. When the call records (grad mode on and an input or a
 * parameter of m's tree requiring grad), the forward runs with recording
 * off in tp's side tape, which is emptied once the output is copied into
 * tp, and one node named CheckpointFunctionBackward is recorded on the
 * output; it keeps the inputs, m's parameters as its inputs, and the state
 * of every generator m's tree draws from (tg_module_set_generator). Its
 * backward puts those generators back to that state, runs the forward
 * again with recording on in the side tape, from the inputs as leaves that
 * require grad where they did, runs backward through it (the parameters'
 * .grad accumulates as after the plain call), and hands the inputs'
 * gradients on; the generators are then where the step had left them. So
 * the replay draws the forward's dropout masks, later draws are unchanged,
 * and losses and gradients are the plain call's bits under every policy
 * (the side tape takes tp's, tg_tape_set_numerics). m's forward must be a
 * function of its inputs, parameters and generators (no state written
 * that the replay would read: a KV cache is refused with recording on).
 * An input written in place before backward is backward's version error.
 * Without recording it is the plain call. The output lives in tp; errors
 * as tg_module_call's, with "module_call_recompute" for a NULL module. */
TG_API tg_tensor *tg_module_call_recompute(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs);
/* Marks m so that tg_module_call (and tg_module_forward, a container's call
 * of its children) runs it through tg_module_call_recompute when the call
 * records; other calls (eval, generation, no_grad) are plain. The mark is
 * m's own, not its tree's (tapegrad/gpt.h, tg_gpt_set_recompute, marks a
 * decoder's blocks). TG_EINVAL for a NULL module, or marking a type without
 * forward. tg_module_recompute: the mark (false for NULL). */
TG_API int tg_module_set_recompute(tg_module *m, bool on);
TG_API bool tg_module_recompute(const tg_module *m);

/* train(true) / eval (train(false)) for the whole tree; what a forward reads. */
TG_API int tg_module_train(tg_module *m, bool training);
TG_API bool tg_module_is_training(const tg_module *m);
/* The graph's shape for the whole tree, never its numbers: the book's
 * composition of recorded ops (the graph shows PyTorch's node names:
 * MaskedFillBackward0, SoftmaxBackward0, ...) or, when set, one node per
 * layer that keeps only what its backward needs (the attention modules'
 * attention, LayerNorm, GELU, FeedForward, RMSNorm, TransformerBlock's
 * residual sums written over their built-in branches' dropout outputs).
 * Under TG_NUMERICS_EXACT both shapes give the same bits. */
TG_API int tg_module_set_fused(tg_module *m, bool fused);
TG_API bool tg_module_is_fused(const tg_module *m);
/* A pin: the whole tree's forwards run under mode whatever the step tape's
 * policy (tensor.h, tg_tape_set_numerics, which is how a step's policy is
 * set, covering modules added later and the loss); a module added after
 * the call is not pinned and follows the tape. tg_module_numerics: the
 * pin, EXACT when there is none. Kept so that older programs compile. */
TG_API int tg_module_set_numerics(tg_module *m, tg_numerics mode);
TG_API tg_numerics tg_module_numerics(const tg_module *m);
/* The book's KV cache (chapter 4's gpt_with_kv_cache), for the whole tree
 * as tg_module_train: while it is on, a forward continues the sequence its
 * cache holds instead of starting one (GPTModel counts positions from
 * current_pos; the built-in MultiHeadAttention appends the new keys and
 * values to its cache and attends to all of them). A user's module takes
 * part by reading tg_module_kv_cache_enabled(self) in its forward and
 * giving its type a reset_cache. Off by default; tg_gpt_generate turns it
 * on. reset_kv_cache empties every cache of the tree (position 0), calling
 * each module's reset_cache, and returns the first error. */
TG_API int tg_module_set_kv_cache(tg_module *m, bool on);
TG_API bool tg_module_kv_cache_enabled(const tg_module *m);
TG_API int tg_module_reset_kv_cache(tg_module *m);
/* The generator that modules drawing random numbers (Dropout, the fused
 * attention's dropout) use, for the whole tree (NULL = default generator). */
TG_API int tg_module_set_generator(tg_module *m, tg_generator *g);
TG_API tg_generator *tg_module_generator(const tg_module *m);

/* Makes now what products under numerics read from the weights of the
 * tree's Linear modules (the output head's weight when it is the embedding's
 * included): under TG_NUMERICS_BF16 each float32 weight's bf16 copy, under
 * EXACT each bfloat16 weight's float32 copy (within the bound
 * tg_numerics_copy_bytes describes), which its first product would
 * otherwise make, so that a model's first forward does not convert the
 * whole model (Qwen3-0.6B: ~0.3 s of its first generated id); nothing under
 * FAST. A copy serves until its weight is written
 * (tg_tensor_version), then the next product makes it again. As PyTorch's
 * model.to(torch.bfloat16) before generating. TG_OK, or an error (out of
 * memory). */
TG_API int tg_module_prepare_numerics(tg_module *m, tg_numerics numerics);

/* Converts every float parameter and buffer (and existing gradients) to dt,
 * in place: the tensors keep their identity (an optimizer holding them keeps
 * working), their new storage lives in tp. Views taken earlier still see the
 * old storage. TG_BF16 converts the weight matrices only (parameters of 2
 * dims or more: Linear and Embedding weights; buffers, biases and norm
 * scales stay), each rounded to nearest even, and only frozen ones: one
 * that requires grad is an error naming it, nothing converted (trainable
 * parameters keep float32 masters; freeze with tg_module_requires_grad_). Linear, Embedding
 * and LoRA's wrapped Linear read bf16 weights (tensor.h, TG_BF16). The old
 * storage stays in its tape until that tape is freed or reset. From bf16,
 * TG_F32 or TG_F64 widens exactly. TG_Q8 converts the same frozen matrices
 * whose last dim is a multiple of 32 (llama.cpp's Q8_0 blocks; the others
 * stay as they are), to float32 widens them (q * d). */
TG_API int tg_module_to_dtype(tg_tape *tp, tg_module *m, tg_dtype dt);

/* PyTorch's print(model): "Linear(in_features=3, out_features=2, bias=False)"
 * and the indented "(name): Child(...)" tree. Written as snprintf writes:
 * returns the full length (call with NULL, 0 to size a buffer); negative
 * status on error. tg_module_print writes it and a newline to f. */
TG_API int tg_module_repr(const tg_module *m, char *buf, size_t size);
TG_API int tg_module_print(FILE *f, const tg_module *m);

/* ---- containers ------------------------------------------------------------------- */

/* nn.Sequential: children "0", "1", ...; forward feeds each child's output
 * to the next (one input). nn.ModuleList: the same children, no forward.
 * n may be 0; tg_module_append adds one more child named by its position. */
TG_API tg_module *tg_sequential_new(tg_tape *tp, int n, tg_module *const *children);
TG_API tg_module *tg_module_list_new(tg_tape *tp, int n, tg_module *const *children);
TG_API int tg_module_append(tg_module *m, tg_module *child);

/* ---- built-in modules ---------------------------------------------------------------- */

/* nn.Linear: weight (out, in), bias (out); y = x W^T + b. */
TG_API tg_module *tg_linear_new(tg_tape *tp, int64_t in_features, int64_t out_features, bool bias);
/* nn.Dropout(p): zeroes with probability p in training mode, identity in eval. */
TG_API tg_module *tg_dropout_new(tg_tape *tp, double p);
/* The five attention modules of chapter 3, forward as the book writes them
 * (src/nn/attention.c quotes each line). */
TG_API tg_module *tg_self_attention_v1_new(tg_tape *tp, int64_t d_in, int64_t d_out);
TG_API tg_module *tg_self_attention_v2_new(tg_tape *tp, int64_t d_in, int64_t d_out, bool qkv_bias);

/* The settings of CausalAttention, MultiHeadAttentionWrapper and
 * MultiHeadAttention (the book's constructor arguments), named:
 *     tg_mha_new_config(tp, (tg_attention_config){.d_in = 768, .d_out = 768,
 *                       .context_length = 1024, .num_heads = 12, .dropout = 0.1});
 * d_in, d_out and context_length are required (positive). num_heads is
 * required by the two multi-head modules; CausalAttention is one head and
 * takes num_heads 0 or 1. dropout 0 is no dropout, qkv_bias false the book's
 * default. The wrapper's d_out is each head's (its output has
 * num_heads * d_out features); MultiHeadAttention's is the total, split over
 * the heads. */
typedef struct {
    int64_t d_in, d_out, context_length, num_heads;
    double dropout;
    bool qkv_bias;
} tg_attention_config;
/* Each returns a module in tp, or NULL with an error naming the module and
 * the setting: a size that is not positive ("d_out must be positive, got
 * 0") or too large, dropout outside [0, 1), num_heads other than 0 or 1 for
 * CausalAttention, more than 4096 heads for the wrapper, or a d_out that
 * num_heads does not divide for MultiHeadAttention ("d_out (6) must be
 * divisible by num_heads (4)"). */
TG_API tg_module *tg_causal_attention_new_config(tg_tape *tp, tg_attention_config cfg);
TG_API tg_module *tg_mha_wrapper_new_config(tg_tape *tp, tg_attention_config cfg);
TG_API tg_module *tg_mha_new_config(tg_tape *tp, tg_attention_config cfg);
/* The positional forms: the same modules and errors as the config forms. */
TG_API tg_module *tg_causal_attention_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length,
                                          double dropout, bool qkv_bias);
TG_API tg_module *tg_mha_wrapper_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length,
                                     double dropout, int64_t num_heads, bool qkv_bias);
TG_API tg_module *tg_mha_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                             int64_t num_heads, bool qkv_bias);

/* ---- LoRA (the book's appendix E) ------------------------------------------------------- */

/* LoRALayer(in_dim, out_dim, rank, alpha): A (in_dim, rank) drawn by
 * kaiming_uniform_(a=sqrt(5)) from the default generator, B (rank, out_dim)
 * zeros; forward (alpha / rank) * (x @ A @ B). LinearWithLoRA(linear, rank,
 * alpha): children "linear" (the given Linear, borrowed) and "lora"
 * (LoRALayer(in_features, out_features, rank, alpha)); forward linear(x) +
 * lora(x); it takes the Linear's training mode, layers and numerics.
 * tg_lora_replace_linear: the book's replace_linear_with_lora: every
 * built-in Linear among model's children becomes LinearWithLoRA under the
 * same name, other children are searched in turn, in named_children order
 * (the order A is drawn in). Freezing is the caller's, as in the book:
 * tg_module_requires_grad_(model, false) before the replacement leaves A and
 * B the only trainable parameters. */
TG_API tg_module *tg_lora_layer_new(tg_tape *tp, int64_t in_dim, int64_t out_dim, int64_t rank, double alpha);
TG_API tg_module *tg_linear_with_lora_new(tg_tape *tp, tg_module *linear, int64_t rank, double alpha);
TG_API int tg_lora_replace_linear(tg_tape *tp, tg_module *model, int64_t rank, double alpha);
/* PEFT's disable_adapter(): with enabled false every LinearWithLoRA of the
 * tree gives its Linear's output alone (linear(x), not linear(x) + 0), so a
 * LoRA model runs as its frozen base; true puts the adapters back. Returns
 * the number of LoRA layers switched (0: the model has none), or a negative
 * status for a NULL model. */
TG_API int64_t tg_lora_set_enabled(tg_module *model, bool enabled);
/* Merges every LinearWithLoRA of model into its Linear, which takes the
 * wrapper's place: weight <- weight + (alpha / rank) * (A @ B)^T (appendix
 * E's x @ A @ B * alpha / rank in the Linear's (out, in) layout), computed
 * in float32 and stored in the weight's dtype (float32, or bf16 rounded
 * once). A weight the tree holds elsewhere too (a head tied to the token
 * embedding) gets a new tensor: what shares it keeps its values. The
 * adapters are dropped; a model without LoRA layers is left as it is. */
TG_API int tg_lora_merge(tg_module *model);

/* ---- walking the tree ------------------------------------------------------------------- */

/* Parameters / state_dict entries with PyTorch's dotted names
 * ("heads.1.W_key.weight"), in PyTorch's order. Arrays and names live in tp.
 * named_parameters lists a tensor registered twice (tied weights, a shared
 * child) once, under its first name, as PyTorch does; state_dict lists every
 * key, as PyTorch's does (a tied tensor under each of its names). */
typedef struct {
    int n;
    const char **names;
    tg_tensor **tensors;
} tg_named_list;
TG_API int tg_module_named_parameters(tg_tape *tp, const tg_module *m, tg_named_list *out);
TG_API int tg_module_state_dict(tg_tape *tp, const tg_module *m, tg_named_list *out);
/* Sets every parameter's .grad to zeros (kept allocated). */
TG_API int tg_module_zero_grad(tg_module *m);
/* module.requires_grad_(flag): every parameter of the tree (freezing a model
 * or a part of it: tg_module_requires_grad_(tg_module_get_submodule(gpt,
 * "trf_blocks.11"), true)). Optimizers skip parameters without a gradient. */
TG_API int tg_module_requires_grad_(tg_module *m, bool requires_grad);
/* Every parameter's element count, each tensor once (sum(p.numel() for p in
 * model.parameters())), and the same over those that require grad (the
 * book's "trainable parameters"); -1 with an error for a NULL module. */
TG_API int64_t tg_module_num_parameters(const tg_module *m);
TG_API int64_t tg_module_num_trainable_parameters(const tg_module *m);

/* state_dict in safetensors, interchangeable with PyTorch's keys. Save is
 * atomic (temporary file + rename). Load checks every key, dtype and shape
 * and names the first mismatch (missing, unexpected, or mis-shaped key);
 * on error the module is unchanged. */
TG_API int tg_module_save(const tg_module *m, const char *path);
TG_API int tg_module_load(tg_module *m, const char *path);
/* load_state_dict(sd) (strict), from names and tensors in memory (a part of
 * a larger file, such as a training checkpoint): every key of the module's
 * state_dict must be present with its shape and a float dtype, and no other
 * key; on error the module is unchanged. */
TG_API int tg_module_load_state_dict(tg_module *m, const tg_named_list *sd);
/* load_state_dict(sd, strict): with strict false, keys of the module that sd
 * lacks keep their values and keys sd has that the module lacks are skipped
 * (a pretrained body into a model with a new head, or adapters alone);
 * every key both have must still match in shape and be float, or nothing
 * changes (PyTorch's size-mismatch error). keys, if not NULL, receives
 * PyTorch's _IncompatibleKeys (missing and unexpected, names copied into tp,
 * which must then be given). With strict true it is tg_module_load_state_dict
 * (its first missing or unexpected key is the error). tg_module_load_ex is
 * the same from a safetensors file. */
typedef struct {
    int n_missing, n_unexpected;
    const char **missing, **unexpected;
} tg_incompatible_keys;
TG_API int tg_module_load_state_dict_ex(tg_module *m, const tg_named_list *sd, bool strict, tg_tape *tp,
                                        tg_incompatible_keys *keys);
TG_API int tg_module_load_ex(tg_module *m, const char *path, bool strict, tg_tape *tp, tg_incompatible_keys *keys);

/* Finite differences on every parameter of m that requires grad and every
 * float input (they must be float64: convert the module with
 * tg_module_to_dtype(tp, m, TG_F64)); the output is m's forward on the n
 * inputs, the call tg_module_call(tp, m, n, inputs) makes. Integer inputs
 * (ids) are passed through. The forward must be a function of its inputs: a
 * forward that draws random numbers (dropout in training mode) is refused.
 * res->message names the worst element by its parameter name
 * ("W_query.weight[4]") or "input i"; res->worst_input counts the n inputs
 * first, then the parameters in tg_module_named_parameters order. opt as
 * tg_gradcheck_call's (NULL: PyTorch's defaults); its max_err_per_input, if
 * set, holds a double for each of those: n + the number of parameters. */
TG_API int tg_gradcheck_module_call(tg_module *m, int n, tg_tensor *const *inputs, const tg_gradcheck_options *opt,
                                    tg_gradcheck_result *res);
/* Deprecated: use tg_gradcheck_module_call. tg_gradcheck_module(m, n, inputs,
 * eps, atol, rtol, &res) is tg_gradcheck_module_call with {eps, atol, rtol}. */
TG_API int tg_gradcheck_module(tg_module *m, int n, tg_tensor *const *inputs, double eps, double atol, double rtol,
                               tg_gradcheck_result *res);

#ifdef __cplusplus
}
#endif
#endif
