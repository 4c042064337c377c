/* tapegrad/gpt.h: the book's GPT (chapter 4) on the module system, and
 * generation (chapter 5's generate(), with a KV cache).
 *
 * Every module here is built with the public module API of tapegrad/nn.h, as
 * a user's own module is; state_dict keys, print(model) text, construction
 * order and initial weights equal PyTorch's (README.md, "GPT-2"). */
#ifndef TAPEGRAD_GPT_H
#define TAPEGRAD_GPT_H

#include "tapegrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The decoder's families. A family is a name table and a preset: its class
 * names, state_dict keys, construction order, Hugging Face names, chat
 * format and tokenizer (src/nn/families.c), and the features its
 * configuration turns on by default. What a model computes is read from
 * tg_decoder_config's feature fields alone, so features mix across
 * families (a qkv bias with RoPE, QK-norm in a Llama-shaped block, GeGLU in
 * a Qwen3-shaped one).
 *   GPT2   the book's GPTModel (chapter 4): learned positions, LayerNorm,
 *          MultiHeadAttention, GELU MLP with biases, dropout;
 *   QWEN3  the book's Qwen3Model (pkg/llms_from_scratch/qwen3.py): RoPE,
 *          its RMSNorm (parameter "scale"), GroupedQueryAttention, SwiGLU;
 *   LLAMA3 the book's Llama3Model (llama3.py): nn.RMSNorm (parameter
 *          "weight"), Llama 3's RoPE smoothing, GroupedQueryAttention, SwiGLU;
 *   GEMMA3 the book's Gemma3Model (ch05/12_gemma3): RMSNorm x * (1 + w),
 *          four norms per block, sliding-window layers with a local RoPE
 *          base, the query scale, GeGLU, embeddings times sqrt(emb_dim). */
typedef enum {
    TG_GPT_FAMILY_GPT2 = 0,
    TG_GPT_FAMILY_QWEN3 = 1,
    TG_GPT_FAMILY_LLAMA3 = 2,
    TG_GPT_FAMILY_GEMMA3 = 3
} tg_gpt_family;

/* The decoder's feature choices; DEFAULT (0) takes the family's. */
typedef enum { TG_NORM_DEFAULT = 0, TG_NORM_LAYER = 1, TG_NORM_RMS = 2 } tg_norm_kind;
typedef enum { TG_POSITIONS_DEFAULT = 0, TG_POSITIONS_LEARNED = 1, TG_POSITIONS_ROPE = 2 } tg_positions_kind;
typedef enum { TG_MLP_DEFAULT = 0, TG_MLP_GELU = 1, TG_MLP_SWIGLU = 2, TG_MLP_GEGLU = 3 } tg_mlp_kind;
/* A layer's attention: over the whole causal context, or its last
 * sliding_window positions (a key j is masked for query i when i - j >= window). */
enum { TG_LAYER_FULL = 0, TG_LAYER_SLIDING = 1 };
#define TG_DECODER_MAX_LAYER_TYPES 256

/* Llama 3's RoPE frequency smoothing (the book's "rope_freq"); factor 0: none. */
typedef struct {
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_context_length;
} tg_rope_freq;

/* The book's GPT configuration dict. GPT_CONFIG_124M is
 * {50257, 1024, 768, 12, 12, 0.1, false}. */
typedef struct {
    int64_t vocab_size, context_length, emb_dim, n_heads, n_layers;
    double drop_rate;
    bool qkv_bias;
} tg_gpt_config;

/* The decoder's configuration: tg_gpt_config's fields, then the features
 * (the book's names). Zero means the default where one is named, so
 * {.vocab_size = 50257, ..., .qkv_bias = false} with nothing else set is
 * GPT-2's configuration. */
typedef struct {
    int64_t vocab_size, context_length, emb_dim, n_heads, n_layers;
    double drop_rate;       /* dropout (families with Dropout modules: GPT-2) */
    bool qkv_bias;          /* biases on W_query, W_key, W_value */
    tg_gpt_family family;   /* the names and the defaults below */
    int64_t hidden_dim;     /* feed-forward width; 0: 4 * emb_dim */
    int64_t head_dim;       /* 0: emb_dim / n_heads */
    int64_t n_kv_groups;    /* key-value groups; 0: n_heads (one per head) */
    bool qk_norm;           /* RMSNorm over head_dim of queries and keys, before RoPE */
    double rope_base;       /* RoPE's theta base (full layers); 0: 10000 */
    tg_rope_freq rope_freq; /* Llama 3's smoothing */
    double norm_eps;        /* 0: the family's (GPT-2 1e-5, Qwen3 1e-6, Llama 3 1e-5, Gemma 3 1e-6) */
    bool tie_head;          /* out_head's weight is tok_emb's (a checkpoint without lm_head) */
    tg_dtype weights;       /* the Linear and Embedding weights: TG_F32 (0, the default) or,
                             * with RMSNorm, TG_BF16: frozen, each value drawn as the
                             * float32 model draws it (same generator order) and rounded
                             * as it is made, never a float32 copy (tensor.h, TG_BF16,
                             * tg_uniform_); the norms stay float32 */
    /* ---- features (0: the family's) ---- */
    tg_norm_kind norm;           /* LayerNorm (scale, shift) or RMSNorm, computed in float32 */
    double norm_offset;          /* RMSNorm: x_norm * (norm_offset + w); 0 (x * w, weights start
                                  * at one) or 1 (Gemma 3's x * (1 + w), weights start at zero) */
    bool post_norms;             /* norms after the attention and the feed-forward too, before
                                  * each residual add (Gemma 3's four norms) */
    tg_positions_kind positions; /* learned (pos_emb) or RoPE */
    double rope_local_base;      /* sliding layers' RoPE base; 0: rope_base */
    tg_mlp_kind mlp;             /* GELU MLP, SwiGLU or GeGLU (tanh GELU) */
    double query_pre_attn_scalar; /* > 0: queries times its ** -0.5 after RoPE and the scores not
                                   * divided (Gemma 3); 0: scores / sqrt(head_dim) */
    int64_t sliding_window;      /* the window of TG_LAYER_SLIDING layers; 0: none */
    unsigned char layer_types[TG_DECODER_MAX_LAYER_TYPES]; /* TG_LAYER_FULL (0) or _SLIDING per layer;
                                  * layers past the array are full */
    bool emb_scale;              /* token embeddings times sqrt(emb_dim) (Gemma 3) */
} tg_decoder_config;

/* The family's name ("GPT-2", "Qwen3", "Llama 3", "Gemma 3") and the
 * folder its tokenizer lives in under the data directory ("gpt2", "qwen3",
 * "llama3", "gemma3"); NULL for an unknown family. */
TG_API const char *tg_decoder_family_name(tg_gpt_family family);
TG_API const char *tg_decoder_family_tokenizer(tg_gpt_family family);

/* "gpt2-small" (124M), "gpt2-medium" (355M), "gpt2-large" (774M),
 * "gpt2-xl" (1558M): the sizes of the book's chapter 5, drop_rate 0.1,
 * qkv_bias false. TG_EINVAL for another name (a Qwen3 or Llama 3 preset
 * is a tg_decoder_config_preset). */
TG_API int tg_gpt_config_preset(const char *name, tg_gpt_config *out);
/* TG_OK, or TG_EINVAL naming the first bad field: sizes <= 0, emb_dim not
 * divisible by n_heads, drop_rate outside [0, 1), context_length above
 * 65536, or a model whose parameters alone need more memory than the
 * machine has. */
TG_API int tg_gpt_config_check(const tg_gpt_config *cfg);
/* Parameters of a model of this configuration (out_head included), without
 * building it; -1 on a bad configuration. */
TG_API int64_t tg_gpt_config_num_parameters(const tg_gpt_config *cfg);

/* The GPT-2 presets above, then "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
 * "qwen3-8b", "llama3.2-1b", "llama3.2-3b": the book's QWEN_CONFIG_06_B ..
 * LLAMA32_CONFIG_3B (context 40,960 and 131,072, a separate out_head). */
TG_API int tg_decoder_config_preset(const char *name, tg_decoder_config *out);
/* The preset names in order, NULL after the last (i >= 0). */
TG_API const char *tg_decoder_config_preset_name(int i);
/* tg_gpt_config's fields as a decoder configuration (family GPT-2). */
TG_API tg_decoder_config tg_decoder_config_from_gpt(const tg_gpt_config *cfg);
/* TG_OK, or TG_EINVAL naming the first bad field: sizes <= 0, an unknown
 * family or feature value, emb_dim not divisible by n_heads where head_dim
 * derives from it, n_heads not divisible by n_kv_groups, an odd head_dim
 * under RoPE, RoPE settings with learned positions, drop_rate outside
 * [0, 1) (and not 0 for a family without Dropout modules: Qwen3, Llama 3,
 * Gemma 3), a norm_offset with LayerNorm, a sliding layer without a
 * sliding_window, context_length above 65536 with learned positions (the
 * position table and the mask buffers) or 2^24 with RoPE, or a model whose
 * parameters alone need more memory than the machine has. Features mix
 * freely otherwise: a qkv bias with RoPE, QK-norm on any attention, any
 * feed-forward, post norms, sliding layers in any family. */
TG_API int tg_decoder_config_check(const tg_decoder_config *cfg);
/* cfg checked, with every default applied in *out: the family's norm,
 * positions and feed-forward, head_dim, n_kv_groups, hidden_dim, norm_eps,
 * the RoPE bases (rope_local_base: rope_base's when 0). */
TG_API int tg_decoder_config_resolve(const tg_decoder_config *cfg, tg_decoder_config *out);
/* Sets cfg->layer_types to the book's Gemma 3 pattern: every full_every-th
 * layer (counting from 1) full, the others sliding (full_every 0: all
 * sliding). TG_EINVAL for a NULL cfg or a negative full_every. */
TG_API int tg_decoder_config_layer_pattern(tg_decoder_config *cfg, int64_t full_every);
/* Parameters of a model of this configuration (out_head included, a tied
 * one once), without building it; -1 on a bad configuration. */
TG_API int64_t tg_decoder_config_num_parameters(const tg_decoder_config *cfg);

/* The book's compute_rope_params(head_dim, theta_base, context_length,
 * freq_config): *cos and *sin (context_length, head_dim) float32 in tp, with
 * PyTorch's bits (each step a float32 op as PyTorch computes it). freq NULL
 * or factor 0: no Llama 3 smoothing. TG_EINVAL for an odd or non-positive
 * head_dim, theta_base <= 0, a bad freq or context_length outside
 * [1, 2^24]. */
TG_API int tg_rope_params(tg_tape *tp, int64_t head_dim, double theta_base, int64_t context_length,
                          const tg_rope_freq *freq, tg_tensor **cos, tg_tensor **sin);
/* The book's apply_rope(x, cos, sin): x (..., T, hd) with hd even, cos and
 * sin (>= T, hd), their first T rows used: x * cos + cat(-x2, x1) * sin
 * (x1, x2 the halves of the last dim), recorded as the book's ops
 * (SliceBackward0, NegBackward0, CatBackward0, MulBackward0, AddBackward0). */
TG_API tg_tensor *tg_apply_rope(tg_tape *tp, tg_tensor *x, tg_tensor *cos, tg_tensor *sin);

/* nn.Embedding(num, dim): weight (num, dim) initialised normal_(0, 1) from
 * the default generator; forward takes int64 ids of any shape. */
TG_API tg_module *tg_embedding_new(tg_tape *tp, int64_t num_embeddings, int64_t embedding_dim);
/* The book's LayerNorm(emb_dim): scale = ones, shift = zeros, eps 1e-5, over
 * the last dim. Composed (MeanBackward1, VarBackward0, SqrtBackward0, ...) or
 * fused (one NativeLayerNormBackward0 node) as tg_module_set_fused selects. */
TG_API tg_module *tg_layer_norm_new(tg_tape *tp, int64_t emb_dim);
/* The book's GELU (tanh approximation); fused: one GeluBackward0 node. */
TG_API tg_module *tg_gelu_new(tg_tape *tp);
/* RMSNorm(dim, eps) (Llama's: x / sqrt(mean(x^2) + eps) * weight, weight
 * ones): the composed ops, or fused under TG_NUMERICS_FAST one
 * RmsNormBackward0 node. SiLU (x * sigmoid(x)): the composed ops, or fused
 * one SiluBackward0 node (PyTorch's formulas). Entries of the layer table
 * (autograd.h, tg_layer). */
TG_API tg_module *tg_rms_norm_new(tg_tape *tp, int64_t dim, double eps);
TG_API tg_module *tg_silu_new(tg_tape *tp);
/* FeedForward(cfg): layers = Sequential(Linear(d, 4d), GELU(), Linear(4d, d)). */
TG_API tg_module *tg_feed_forward_new(tg_tape *tp, const tg_gpt_config *cfg);
/* TransformerBlock(cfg): att, ff, norm1, norm2, drop_shortcut (in this order);
 * x = drop_shortcut(att(norm1(x))) + x; x = drop_shortcut(ff(norm2(x))) + x. */
TG_API tg_module *tg_transformer_block_new(tg_tape *tp, const tg_gpt_config *cfg);
/* GPTModel(cfg): tok_emb, pos_emb, drop_emb, trf_blocks, final_norm, out_head.
 * Forward on int64 ids (B, T), T <= context_length: logits (B, T, vocab).
 * Built after tg_manual_seed(s), every weight equals PyTorch's after
 * torch.manual_seed(s). */
TG_API tg_module *tg_gpt_new(tg_tape *tp, const tg_gpt_config *cfg);
/* The configuration a GPTModel was built with (TG_EINVAL for another module). */
TG_API int tg_gpt_get_config(const tg_module *gpt, tg_gpt_config *out);
/* The decoder of any family: GPTModel (as tg_gpt_new), Qwen3Model,
 * Llama3Model or Gemma3Model, built in the book's order (Embedding
 * normal(0, 1), Linear kaiming-uniform, norms ones, Gemma 3's zeros), so
 * after tg_manual_seed(s) every weight equals the book's model after
 * torch.manual_seed(s). Its forward takes ids (B, T) and gives logits
 * (B, T, vocab); the KV cache (tg_module_set_kv_cache) holds each block's
 * keys and values after RoPE, one per key-value group, a sliding layer's
 * only for its window. tg_gpt_get_config on such a model gives its sizes;
 * tg_decoder_get_config gives all, as it was built (defaults as zeros). */
TG_API tg_module *tg_decoder_new(tg_tape *tp, const tg_decoder_config *cfg);
TG_API int tg_decoder_get_config(const tg_module *model, tg_decoder_config *out);

/* Activation recomputation for the decoder's blocks (README.md, "Memory"):
 * tg_module_set_recompute (nn.h) on each of trf_blocks' TransformerBlocks,
 * so a training step keeps each block's input and one block's activations
 * at a time; and tg_gpt_lm_loss's head in chunks (FAST, BF16) keeps each
 * row's log-sum-exp only, computing the logits again in backward. Losses
 * and gradients are bit-identical under every policy.
 * Eval, generation and tg_gpt_forward_last's last block at its last
 * position (FAST, BF16) run as without. TG_EINVAL for a module that is not
 * a decoder (GPTModel, Qwen3Model, Llama3Model). */
TG_API int tg_gpt_set_recompute(tg_module *model, bool on);

/* The output size of the model's out_head (its weight's rows: vocab_size as
 * built, 2 after the book's chapter 6 replaces it with Linear(emb_dim, 2));
 * -1 with an error when out_head has no 2-D "weight". tg_gpt_get_config
 * keeps describing the body (vocab_size: the token embedding's rows). */
TG_API int64_t tg_gpt_out_features(const tg_module *gpt);
/* The book's fine-tuning surgery on a GPTModel. num_classes > 0 (chapter
 * 6): after manual_seed(seed) out_head becomes a new Linear(emb_dim,
 * num_classes), and the whole model is frozen. lora_rank > 0 (appendix E):
 * the model frozen and every Linear, out_head included, wrapped in LoRA
 * (tg_lora_replace_linear with rank and alpha); otherwise a classifier's
 * last transformer block, final_norm and out_head train again. Both 0:
 * nothing changes. New modules live in tp; they take the numerics and
 * layers set on the model afterwards. TG_EINVAL for a module that is not a
 * GPTModel or negative counts. */
TG_API int tg_gpt_prepare_finetune(tg_tape *tp, tg_module *gpt, int64_t num_classes, uint64_t seed, int64_t lora_rank,
                                   double lora_alpha);
/* model(ids)[:, -1, :]: the logits of the last position (B, out_features),
 * what chapter 6's classifier reads. Under TG_NUMERICS_EXACT computed as the
 * book does (every position's logits, then the select: PyTorch's bits);
 * under FAST and BF16 final_norm and out_head run on the last position
 * alone, and so does the last block when it is the built-in one and draws no
 * dropout (eval mode or p = 0): its keys and values see every position, its
 * query, feed-forward and residuals only the last. The same values and
 * gradients within those policies' tolerances, less work. */
TG_API tg_tensor *tg_gpt_forward_last(tg_tape *tp, tg_module *gpt, tg_tensor *ids);
/* Whether m is the decoder tg_decoder_new / tg_gpt_new make (GPTModel,
 * Qwen3Model, Llama3Model). */
TG_API bool tg_gpt_is_decoder(const tg_module *m);
/* The book's calc_loss_batch: F.cross_entropy(model(ids).flatten(0, 1),
 * targets.flatten(), ignore_index=i), ids and targets (B, T). Under EXACT
 * exactly that (PyTorch's calls); under FAST and BF16, with the modules
 * fused and out_head a Linear, the model stops at final_norm and the head
 * runs with the loss in row chunks (tg_linear_cross_entropy): the (B * T,
 * vocab) logits and their gradient are never held whole, in training and
 * in evaluation. */
TG_API tg_tensor *tg_gpt_lm_loss(tg_tape *tp, tg_module *gpt, tg_tensor *ids, const tg_tensor *targets,
                                 int64_t ignore_index);

/* Loads a Hugging Face GPT-2 model.safetensors (wte, wpe, h.N.ln_1, attn.c_attn
 * with q/k/v fused and Conv1D weights stored (in, out), attn.c_proj, ln_2,
 * mlp.c_fc, mlp.c_proj, ln_f; an optional "transformer." prefix; attn.bias
 * buffers ignored) into gpt as the book's load_weights_into_gpt does: out_head
 * takes wte's values. The model must have qkv_bias and the file's sizes;
 * every key and shape is checked first, and on error the model is unchanged. */
TG_API int tg_gpt_load_hf(tg_module *gpt, const char *path);

/* The configuration of a Hugging Face Qwen3, Llama 3 or Gemma 3 folder, from
 * dir/config.json: model_type "qwen3" (family QWEN3, qk_norm), "llama"
 * (LLAMA3) or "gemma3_text" (GEMMA3: the gemma3-270m preset's features;
 * head_dim, sliding_window, layer_types (or sliding_window_pattern),
 * rope_local_base_freq -> rope_local_base, query_pre_attn_scalar required,
 * hidden_activation "gelu_pytorch_tanh", tie_word_embeddings absent: true,
 * final_logit_softcapping, attn_logit_softcapping and rope_scaling null);
 * hidden_size -> emb_dim, num_attention_heads -> n_heads,
 * num_key_value_heads -> n_kv_groups, head_dim (Qwen3's; Llama 3's, if
 * given, must be hidden_size / num_attention_heads), intermediate_size ->
 * hidden_dim, num_hidden_layers -> n_layers, rms_norm_eps -> norm_eps,
 * rope_theta -> rope_base, vocab_size, max_position_embeddings ->
 * context_length, all required; rope_scaling null (or absent), or for
 * Llama 3 {"rope_type": "llama3", factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings} -> rope_freq;
 * tie_word_embeddings -> tie_head (absent: false, transformers' default).
 * attention_bias, mlp_bias or use_sliding_window true, or a hidden_act
 * other than "silu", are refused. drop_rate 0, qkv_bias false. A missing,
 * mistyped or unknown-valued key is a TG_EFORMAT naming the file and the
 * key; the result passes tg_decoder_config_check (its message, prefixed
 * with the file, otherwise). *out is written on success only. */
TG_API int tg_decoder_config_from_hf(const char *dir, tg_decoder_config *out);
/* Loads a Hugging Face Qwen3, Llama 3 or Gemma 3 folder's weights into a
 * Qwen3Model, Llama3Model or Gemma3Model (Gemma 3: blocks.N and its four
 * norms by their Hugging Face names, the same tensors otherwise):
 * dir/model.safetensors or, when there is none, the shards
 * named by dir/model.safetensors.index.json's weight_map (plain file names
 * in dir). Tensors are F32, F16 or BF16, copied into the model's dtype
 * (tg_decoder_config's weights: BF16 kept into bf16 weights, widened into
 * float32 ones; F16 widened, then rounded into bf16; F64 rounded), named
 * as the book's load_weights_into_qwen /
 * load_weights_into_llama map them:
 * model.embed_tokens -> tok_emb, model.layers.N.self_attn.{q,k,v,o}_proj ->
 * trf_blocks.N.att.{W_query,W_key,W_value,out_proj}, self_attn.{q,k}_norm
 * -> att.{q,k}_norm (Qwen3), input_layernorm / post_attention_layernorm ->
 * norm1 / norm2, mlp.{gate,up,down}_proj -> ff.{fc1,fc2,fc3}, model.norm ->
 * final_norm, lm_head -> out_head (the RoPE tables some checkpoints
 * carry, self_attn.rotary_emb.inv_freq, are skipped). Without
 * lm_head.weight the head takes embed_tokens' values; a model built with
 * tie_head keeps its head as
 * tok_emb's weight (as transformers ties it: a lm_head.weight there is
 * checked for its shape only). When dir has a config.json it must describe
 * the model (tg_decoder_config_from_hf; context_length and tie_head may
 * differ). Every shard's header is checked first: a missing, unexpected
 * or mis-shaped tensor, a truncated shard, a bad index is one line naming
 * it, and the model is unchanged; then shards are read one at a time (the
 * memory of the model and of one shard's tensors, a BF16 shard at its own
 * size). Only a shard
 * that changes between the check and its reading, or memory running out
 * then, can leave earlier shards' tensors written. */
TG_API int tg_decoder_load_hf(tg_module *model, const char *dir);
/* How a Hugging Face folder stores its weights: *out TG_BF16 when every
 * tensor of its shards is BF16 (a model built with .weights = TG_BF16
 * then holds them as they are, in half float32's memory), else TG_F32.
 * Reads the shards' headers only; an error names a missing or broken one. */
TG_API int tg_decoder_hf_weights(const char *dir, tg_dtype *out);

/* ---- generation (chapter 5's generate()) ---------------------------------------- */

typedef struct {
    int64_t max_new_tokens;
    double temperature;  /* 0: greedy (argmax); > 0: softmax(logits / T), multinomial */
    int64_t top_k;       /* 0: off; else logits below the k-th largest become -inf */
    int64_t eos_id;      /* stop before appending this id; -1: none */
    bool no_kv_cache;    /* false (the default): one position per new token */
    tg_generator *generator; /* multinomial's draws; NULL: the default generator */
    tg_numerics numerics;    /* the policy of its forwards (tg_tape_set_numerics); EXACT by default */
} tg_generate_options;

/* Runs gpt in eval mode without recording (its mode is restored afterwards),
 * from the prompt ids (n_prompt >= 1); out receives the prompt followed by
 * the new ids (room for n_prompt + max_new_tokens) and *n_out their count.
 * The window is cropped to the last context_length ids as the book crops it;
 * the KV cache gives the same ids as recomputing, past the context too. */
TG_API int tg_gpt_generate(tg_module *gpt, const int64_t *prompt, int64_t n_prompt, const tg_generate_options *opt,
                           int64_t *out, int64_t *n_out);

#ifdef __cplusplus
}
#endif
#endif
