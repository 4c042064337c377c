/* tapegrad/export.h: a decoder (GPT-2, Qwen3, Llama 3, Gemma 3) written out
 * for the tools models are served with (docs/export.md):
 *
 *   - a Hugging Face folder (tg_export_hf): config.json with the family's
 *     model_type and fields, model.safetensors or shards listed in
 *     model.safetensors.index.json under Hugging Face's tensor names
 *     (lm_head.weight left out when the head is tied), generation_config.json,
 *     tokenizer.json and tokenizer_config.json (the family's chat template);
 *     or, for a model with LoRA layers, PEFT's adapter files;
 *   - a GGUF version 3 file as llama.cpp reads it (tg_export_gguf), written
 *     as llama.cpp's convert_hf_to_gguf.py writes each family, with the
 *     model's tokenizer and chat template, in F32, F16, BF16 or Q8_0.
 *
 * Both write atomically: a temporary folder or file beside the target,
 * renamed into place, so a failure (a full disk, an unwritable path) leaves
 * nothing half-written. Errors are one line (tg_last_error). */
#ifndef TAPEGRAD_EXPORT_H
#define TAPEGRAD_EXPORT_H

#include "tapegrad/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the weights are stored. Hugging Face folders take F32, F16 and BF16;
 * GGUF files the four (Q8_0: llama.cpp's blocks of 32 int8 values with an
 * f16 scale for the matrices; the norms and biases stay F32). */
typedef enum { TG_EXPORT_F32 = 0, TG_EXPORT_F16, TG_EXPORT_BF16, TG_EXPORT_Q8_0 } tg_export_type;

/* "f32", "f16", "bf16", "q8_0"; NULL for a value outside the enum. */
TG_API const char *tg_export_type_name(tg_export_type t);
/* The type a name gives; -1 with an error for an unknown name. */
TG_API int tg_export_type_parse(const char *name, tg_export_type *out);

typedef struct {
    tg_export_type type;     /* the weights' storage (default F32) */
    bool adapter;            /* tg_export_hf: PEFT's adapter_config.json and
                              * adapter_model.safetensors from the model's LoRA
                              * layers instead of the model */
    int64_t max_shard_size;  /* tg_export_hf: bytes of tensor data per shard
                              * (0: 5,000,000,000, save_pretrained's default);
                              * a model larger than this is written as
                              * model-00001-of-0000N.safetensors with an index */
    const char *tokenizer;   /* the model's tokenizer: a tokenizer.json, GPT-2's
                              * encoder.json + vocab.bpe folder, or a folder
                              * holding either (NULL: the family's installed
                              * files, tg_decoder_family_tokenizer); a
                              * tokenizer_config.json beside it is carried over */
    const char *name;        /* the model's name in the files (NULL: the family's) */
    bool force;              /* replace a folder that holds other files */
} tg_export_options;

/* Writes model as a Hugging Face folder dir (created; an existing dir must
 * be empty, hold only what an export writes, or opt->force is needed). A
 * model with LoRA layers is refused unless opt->adapter (merge it first:
 * tg_lora_merge); opt->adapter with a model without LoRA layers is refused.
 * A configuration the family's Hugging Face class cannot express (GPT-2
 * with RMSNorm, say) is refused, naming the feature. */
TG_API int tg_export_hf(tg_module *model, const char *dir, const tg_export_options *opt);

/* Writes model as the GGUF file path (replaced atomically when it exists
 * and is a regular file). Refused as tg_export_hf refuses, and for LoRA
 * layers always. */
TG_API int tg_export_gguf(tg_module *model, const char *path, const tg_export_options *opt);

/* The model's weights under the names and in the layouts of the family's
 * Hugging Face class (what save_pretrained writes: GPT-2's Conv1D weights
 * transposed and c_attn fused, "transformer." before its names), in
 * Hugging Face's order, sharing storage with the model where the layout
 * is the same and copied into tp where it is not. *tied: the head is the
 * token embedding (lm_head.weight is not listed). Refused for a model with
 * LoRA layers and for a configuration the class cannot express. */
TG_API int tg_decoder_hf_state_dict(tg_tape *tp, const tg_module *model, tg_named_list *out, bool *tied);

/* What PEFT's adapter_config.json says of the adapters
 * tg_decoder_peft_state_dict lists. */
typedef struct {
    int64_t rank;           /* r */
    double alpha;           /* lora_alpha */
    int n_targets;          /* target_modules: the wrapped modules' last names, each once */
    const char **targets;   /* ("q_proj", "k_proj", ..., "lm_head"), in tp */
    bool fan_in_fan_out;    /* GPT-2: its Conv1D weights are stored (in, out) */
    const char *fused;      /* GPT-2: "c_attn", whose adapter has rank 3 r and alpha 3 alpha
                             * (rank_pattern, alpha_pattern); NULL otherwise */
} tg_peft_info;

/* The model's LoRA adapters as PEFT saves them (adapter_model.safetensors):
 * for each LinearWithLoRA, "base_model.model.<module>.lora_A.weight"
 * (rank, in) = A^T and ".lora_B.weight" (out, rank) = B^T, <module> its
 * Hugging Face name ("model.layers.0.self_attn.q_proj", "lm_head"); GPT-2's
 * query, key and value adapters become c_attn's one, of rank 3 r (the A's
 * stacked, the B's block-diagonal: the same product). Every adapter must
 * have the same rank and alpha. Refused (one line) for a model without LoRA
 * layers, an adapter on a module Hugging Face's class has not, and what
 * tg_decoder_hf_state_dict refuses besides LoRA. */
TG_API int tg_decoder_peft_state_dict(tg_tape *tp, const tg_module *model, tg_named_list *out, tg_peft_info *info);

#ifdef __cplusplus
}
#endif

#endif
