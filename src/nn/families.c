/* The decoder's families: each a name table and presets. What a model
 * computes is read from tg_decoder_config's features (src/nn/decoder.c);
 * a family gives its modules' class names, state_dict keys, construction
 * order, Hugging Face names, tokenizer and the features its configurations
 * turn on by default. Adding a family is an entry here, its presets, and
 * its Hugging Face names (src/nn/decoder_hf.c). */
#include "nn_internal.h"

#include <string.h>

#include "tapegrad/gpt.h"

/* Hugging Face's per-layer names as the book's load_weights_into_qwen,
 * load_weights_into_llama and load_weights_into_gemma map them. */
#define HF_ATTENTION                                                                                                   \
    {"self_attn.q_proj.weight", "att.W_query.weight", false, false, false, -1},                                      \
        {"self_attn.k_proj.weight", "att.W_key.weight", false, false, false, -1},                                    \
        {"self_attn.v_proj.weight", "att.W_value.weight", false, false, false, -1},                                  \
        {"self_attn.o_proj.weight", "att.out_proj.weight", false, false, false, -1},                                 \
        {"self_attn.q_norm.weight", "att.q_norm", true, true, false, -1},                                            \
        {"self_attn.k_norm.weight", "att.k_norm", true, true, false, -1}
#define HF_MLP                                                                                                         \
    {"mlp.gate_proj.weight", "ff.fc1.weight", false, false, false, -1},                                              \
        {"mlp.up_proj.weight", "ff.fc2.weight", false, false, false, -1},                                            \
        {"mlp.down_proj.weight", "ff.fc3.weight", false, false, false, -1}
#define HF_NORM(hf, ours) {hf, ours, true, false, false, -1}

static const tg__hf_part qwen3_llama_parts[TG__HF_MAX_PARTS] = {
    HF_ATTENTION,
    HF_NORM("input_layernorm.weight", "norm1"),
    HF_NORM("post_attention_layernorm.weight", "norm2"),
    HF_MLP,
};
static const tg__hf_part gemma3_parts[TG__HF_MAX_PARTS] = {
    HF_ATTENTION,
    HF_NORM("input_layernorm.weight", "input_layernorm"),
    HF_NORM("post_attention_layernorm.weight", "post_attention_layernorm"),
    HF_NORM("pre_feedforward_layernorm.weight", "pre_feedforward_layernorm"),
    HF_NORM("post_feedforward_layernorm.weight", "post_feedforward_layernorm"),
    HF_MLP,
};
/* Hugging Face's GPT-2 model.safetensors as the book's load_weights_into_gpt
 * maps OpenAI's weights (chapter 5): wte also gives out_head (tied values),
 * the Conv1D weights transposed, c_attn split into the query, key and value */
#define GPT2_PART(hf, ours, t, p) {hf, ours, false, false, t, p}
static const tg__hf_part gpt2_file[] = {
    GPT2_PART("wte.weight", "tok_emb.weight", false, -1),
    GPT2_PART("wte.weight", "out_head.weight", false, -1),
    GPT2_PART("wpe.weight", "pos_emb.weight", false, -1),
    GPT2_PART("ln_f.weight", "final_norm.scale", false, -1),
    GPT2_PART("ln_f.bias", "final_norm.shift", false, -1),
    GPT2_PART(NULL, NULL, false, -1), /* the layers' tensors follow */
    GPT2_PART("ln_1.weight", "norm1.scale", false, -1),
    GPT2_PART("ln_1.bias", "norm1.shift", false, -1),
    GPT2_PART("ln_2.weight", "norm2.scale", false, -1),
    GPT2_PART("ln_2.bias", "norm2.shift", false, -1),
    GPT2_PART("attn.c_attn.weight", "att.W_query.weight", true, 0),
    GPT2_PART("attn.c_attn.bias", "att.W_query.bias", false, 0),
    GPT2_PART("attn.c_attn.weight", "att.W_key.weight", true, 1),
    GPT2_PART("attn.c_attn.bias", "att.W_key.bias", false, 1),
    GPT2_PART("attn.c_attn.weight", "att.W_value.weight", true, 2),
    GPT2_PART("attn.c_attn.bias", "att.W_value.bias", false, 2),
    GPT2_PART("attn.c_proj.weight", "att.out_proj.weight", true, -1),
    GPT2_PART("attn.c_proj.bias", "att.out_proj.bias", false, -1),
    GPT2_PART("mlp.c_fc.weight", "ff.layers.0.weight", true, -1),
    GPT2_PART("mlp.c_fc.bias", "ff.layers.0.bias", false, -1),
    GPT2_PART("mlp.c_proj.weight", "ff.layers.2.weight", true, -1),
    GPT2_PART("mlp.c_proj.bias", "ff.layers.2.bias", false, -1),
    GPT2_PART(NULL, NULL, false, -1),
};

static const tg__family families[] = {
    /* the book's GPTModel (chapter 4; tools/reference/gpt_book.py) */
    {.family = TG_GPT_FAMILY_GPT2, .name = "GPT-2", .model_class = "GPTModel", .attention_class = "MultiHeadAttention",
     .blocks = "trf_blocks", .blocks_sequential = true, .norm_names = {"norm1", "post_att_norm", "norm2", "post_ff_norm"},
     .norm_book = true, .keys_first = true, .merge_view = true, .dropout = true, .bias = true, .norm_eps = 1e-5,
     .norm = TG_NORM_LAYER, .positions = TG_POSITIONS_LEARNED, .mlp = TG_MLP_GELU, .hf_model_type = "gpt2",
     .hf_file = gpt2_file, .tokenizer = "gpt2"},
    /* pkg/llms_from_scratch/qwen3.py */
    {.family = TG_GPT_FAMILY_QWEN3, .name = "Qwen3", .model_class = "Qwen3Model", .attention_class = "GroupedQueryAttention",
     .blocks = "trf_blocks", .norm_names = {"norm1", "post_att_norm", "norm2", "post_ff_norm"}, .norm_book = true,
     .norm_eps = 1e-6, .norm = TG_NORM_RMS, .positions = TG_POSITIONS_ROPE, .mlp = TG_MLP_SWIGLU,
     .hf_model_type = "qwen3", .hf_parts = qwen3_llama_parts, .tokenizer = "qwen3"},
    /* pkg/llms_from_scratch/llama3.py: nn.RMSNorm, W_key, W_value, W_query */
    {.family = TG_GPT_FAMILY_LLAMA3, .name = "Llama 3", .model_class = "Llama3Model",
     .attention_class = "GroupedQueryAttention", .blocks = "trf_blocks",
     .norm_names = {"norm1", "post_att_norm", "norm2", "post_ff_norm"}, .kvq_init = true, .norm_eps = 1e-5,
     .norm = TG_NORM_RMS, .positions = TG_POSITIONS_ROPE, .mlp = TG_MLP_SWIGLU, .hf_model_type = "llama",
     .hf_parts = qwen3_llama_parts, .tokenizer = "llama3"},
    /* ch05/12_gemma3/standalone-gemma3.ipynb */
    {.family = TG_GPT_FAMILY_GEMMA3, .name = "Gemma 3", .model_class = "Gemma3Model",
     .attention_class = "GroupedQueryAttention", .blocks = "blocks",
     .norm_names = {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                    "post_feedforward_layernorm"},
     .norm_book = true, .norm_eps = 1e-6, .norm = TG_NORM_RMS, .positions = TG_POSITIONS_ROPE, .mlp = TG_MLP_GEGLU,
     .hf_model_type = "gemma3_text", .hf_parts = gemma3_parts, .tokenizer = "gemma3"},
};
enum { NFAMILIES = (int)(sizeof families / sizeof families[0]) };

const tg__family *tg__family_get(tg_gpt_family f)
{
    for (int i = 0; i < NFAMILIES; i++)
        if (families[i].family == f) return &families[i];
    return NULL;
}

const tg__family *tg__family_of_hf(const char *model_type)
{
    for (int i = 0; model_type && i < NFAMILIES; i++)
        if (strcmp(families[i].hf_model_type, model_type) == 0) return &families[i];
    return NULL;
}

const char *tg_decoder_family_tokenizer(tg_gpt_family family)
{
    const tg__family *f = tg__family_get(family);
    return f ? f->tokenizer : NULL;
}

const char *tg_decoder_family_name(tg_gpt_family family)
{
    const tg__family *f = tg__family_get(family);
    return f ? f->name : NULL;
}

/* ---- presets ---------------------------------------------------------------------------------- */

#define GPT2(emb, heads, layers)                                                                                      \
    {.vocab_size = 50257, .context_length = 1024, .emb_dim = emb, .n_heads = heads, .n_layers = layers,              \
     .drop_rate = 0.1, .family = TG_GPT_FAMILY_GPT2}
#define QWEN3(emb, heads, layers, hidden)                                                                             \
    {.vocab_size = 151936, .context_length = 40960, .emb_dim = emb, .n_heads = heads, .n_layers = layers,           \
     .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = hidden, .head_dim = 128, .n_kv_groups = 8, .qk_norm = true,        \
     .rope_base = 1e6}
#define LLAMA32(emb, heads, layers)                                                                                   \
    {.vocab_size = 128256, .context_length = 131072, .emb_dim = emb, .n_heads = heads, .n_layers = layers,          \
     .family = TG_GPT_FAMILY_LLAMA3, .hidden_dim = 8192, .n_kv_groups = 8, .rope_base = 500000.0,                    \
     .rope_freq = {32.0, 1.0, 4.0, 8192}}
/* GEMMA3_CONFIG_270M: full attention on every sixth layer (layer_types below) */
#define GEMMA3_270M                                                                                                    \
    {.vocab_size = 262144, .context_length = 32768, .emb_dim = 640, .n_heads = 4, .n_layers = 18,                    \
     .family = TG_GPT_FAMILY_GEMMA3, .hidden_dim = 2048, .head_dim = 256, .n_kv_groups = 1, .qk_norm = true,         \
     .rope_base = 1e6, .norm_offset = 1.0, .post_norms = true, .rope_local_base = 1e4, .query_pre_attn_scalar = 256,  \
     .sliding_window = 512, .emb_scale = true}

/* The book's configurations: GPT_CONFIG_124M and chapter 5's sizes; its
 * qwen3.py QWEN_CONFIG_06_B .. QWEN3_CONFIG_8B, llama3.py's LLAMA32_CONFIG_1B
 * and _3B, and the Gemma 3 notebook's GEMMA3_CONFIG_270M. */
static const struct {
    const char *name;
    tg_decoder_config cfg;
} presets[] = {
    {"gpt2-small", GPT2(768, 12, 12)},
    {"gpt2-medium", GPT2(1024, 16, 24)},
    {"gpt2-large", GPT2(1280, 20, 36)},
    {"gpt2-xl", GPT2(1600, 25, 48)},
    {"qwen3-0.6b", QWEN3(1024, 16, 28, 3072)},
    {"qwen3-1.7b", QWEN3(2048, 16, 28, 6144)},
    {"qwen3-4b", QWEN3(2560, 32, 36, 9728)},
    {"qwen3-8b", QWEN3(4096, 32, 36, 12288)},
    {"llama3.2-1b", LLAMA32(2048, 32, 16)},
    {"llama3.2-3b", LLAMA32(3072, 24, 28)},
    {"gemma3-270m", GEMMA3_270M},
};
enum { NPRESETS = (int)(sizeof presets / sizeof presets[0]) };

const char *tg_decoder_config_preset_name(int i) { return i >= 0 && i < NPRESETS ? presets[i].name : NULL; }

int tg_decoder_config_layer_pattern(tg_decoder_config *cfg, int64_t full_every)
{
    if (!cfg) return tg_error_status(TG_EINVAL, "decoder_config_layer_pattern: NULL configuration");
    if (full_every < 0)
        return tg_error_status(TG_EINVAL, "decoder_config_layer_pattern: full_every must be >= 0, got %lld",
                               (long long)full_every);
    for (int64_t i = 0; i < TG_DECODER_MAX_LAYER_TYPES; i++)
        cfg->layer_types[i] = full_every > 0 && (i + 1) % full_every == 0 ? TG_LAYER_FULL : TG_LAYER_SLIDING;
    return TG_OK;
}

int tg_decoder_config_preset(const char *name, tg_decoder_config *out)
{
    if (!name || !out) return tg_error_status(TG_EINVAL, "decoder_config_preset: NULL argument");
    for (int i = 0; i < NPRESETS; i++)
        if (strcmp(name, presets[i].name) == 0) {
            *out = presets[i].cfg;
            /* Gemma 3: five sliding layers, then a full one */
            return out->sliding_window > 0 ? tg_decoder_config_layer_pattern(out, 6) : TG_OK;
        }
    char names[512] = "";
    for (int i = 0; i < NPRESETS; i++) {
        strcat(names, i == 0 ? "" : i == NPRESETS - 1 ? " or " : ", ");
        strcat(names, presets[i].name);
    }
    return tg_error_status(TG_EINVAL, "unknown model configuration '%.100s' (expected %s)", name, names);
}
