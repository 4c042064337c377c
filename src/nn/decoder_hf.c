/* The decoder's one Hugging Face loader, its names a table per model_type
 * (the family's, src/nn/families.c): a GPT-2 model.safetensors (the end of
 * this file), and a Qwen3, Llama 3 or Gemma 3 folder (config.json,
 * model.safetensors or the shards model.safetensors.index.json lists) as the
 * decoder's configuration and weights, named as the book's
 * load_weights_into_qwen (pkg/llms_from_scratch/qwen3.py),
 * load_weights_into_llama (llama3.py) and load_weights_into_gemma (the
 * Gemma 3 notebook) map them:
 *   model.embed_tokens.weight            -> tok_emb.weight
 *   model.layers.N.self_attn.q/k/v_proj  -> trf_blocks.N.att.W_query/W_key/W_value
 *   model.layers.N.self_attn.o_proj      -> trf_blocks.N.att.out_proj
 *   model.layers.N.self_attn.q/k_norm    -> trf_blocks.N.att.q_norm/k_norm.scale (Qwen3)
 *   model.layers.N.input_layernorm       -> trf_blocks.N.norm1 (.scale Qwen3, .weight Llama 3)
 *   model.layers.N.post_attention_layernorm -> trf_blocks.N.norm2
 *   (Gemma 3: blocks.N and its four norms by their Hugging Face names)
 *   model.layers.N.mlp.gate/up/down_proj -> trf_blocks.N.ff.fc1/fc2/fc3
 *   model.norm.weight                    -> final_norm
 *   lm_head.weight                       -> out_head.weight; without it the
 *                                           head takes embed_tokens' values.
 * The files' weights are float32, float16 or bfloat16 (bfloat16 read as it
 * is and widened exactly into float32 parameters, kept into bfloat16 ones;
 * float16 widened exactly, then rounded into bfloat16 parameters; float64
 * is rounded). Every shard's header is checked
 * (names, dtypes, shapes, its layout against its size) before any parameter
 * is written; then one shard at a time is read into a tape of its own,
 * copied into the parameters and freed, so a model of several GB needs its
 * own memory and one shard's. */
#include "nn_internal.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tapegrad/gpt.h"

/* ---- config.json ----------------------------------------------------------------------------- */

typedef struct {
    const char *path; /* dir/config.json */
    json_t *root;
} cfg_src;

/* A JSON value as a short text for a message. */
static const char *json_text(const json_t *v, char *buf, size_t size)
{
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    snprintf(buf, size, "%s", s ? s : "?");
    if (s && strlen(s) >= size && size > 4) memcpy(buf + size - 4, "...", 4);
    free(s);
    return buf;
}

static int missing(const cfg_src *c, const char *key)
{
    return tg_error_status(TG_EFORMAT, "config_from_hf %s: key '%s' is missing", c->path, key);
}

static int wrong(const cfg_src *c, const char *key, const json_t *v, const char *want)
{
    char t[48];
    return tg_error_status(TG_EFORMAT, "config_from_hf %s: '%s' must be %s, got %s", c->path, key, want,
                           json_text(v, t, sizeof t));
}

/* obj[key] as a positive integer (name: how the message calls it). */
static int get_count(const cfg_src *c, const json_t *obj, const char *key, const char *name, int64_t *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return missing(c, name);
    if (!json_is_integer(v) || json_integer_value(v) <= 0) return wrong(c, name, v, "a positive integer");
    *out = (int64_t)json_integer_value(v);
    return TG_OK;
}

/* obj[key] as a finite number > 0 (an integer too: "rope_theta": 1000000). */
static int get_positive(const cfg_src *c, const json_t *obj, const char *key, const char *name, double *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v) return missing(c, name);
    double d = json_number_value(v);
    if (!json_is_number(v) || !(d > 0 && isfinite(d))) return wrong(c, name, v, "a number > 0");
    *out = d;
    return TG_OK;
}

/* An optional true/false; absent: dflt. */
static int get_bool(const cfg_src *c, const char *key, bool dflt, bool *out)
{
    const json_t *v = json_object_get(c->root, key);
    if (!v) {
        *out = dflt;
        return TG_OK;
    }
    if (!json_is_boolean(v)) return wrong(c, key, v, "true or false");
    *out = json_is_true(v);
    return TG_OK;
}

/* rope_scaling: null (or absent) for no smoothing; Llama 3's
 * {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
 *  "original_max_position_embeddings"}. */
static int rope_scaling(const cfg_src *c, tg_decoder_config *cfg)
{
    const json_t *rs = json_object_get(c->root, "rope_scaling");
    if (!rs || json_is_null(rs)) return TG_OK;
    if (cfg->family != TG_GPT_FAMILY_LLAMA3) return wrong(c, "rope_scaling", rs, "null for qwen3");
    if (!json_is_object(rs)) return wrong(c, "rope_scaling", rs, "null or an object");
    /* "type" is the older spelling of "rope_type" */
    const char *tkey = json_object_get(rs, "rope_type") ? "rope_type" : "type";
    const json_t *type = json_object_get(rs, tkey);
    if (!type) return missing(c, "rope_scaling.rope_type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "llama3") != 0) {
        char t[48];
        return tg_error_status(TG_EFORMAT, "config_from_hf %s: rope_scaling.%s %s is not supported (only \"llama3\")",
                               c->path, tkey, json_text(type, t, sizeof t));
    }
    tg_rope_freq *f = &cfg->rope_freq;
    int st = get_positive(c, rs, "factor", "rope_scaling.factor", &f->factor);
    if (st == TG_OK) st = get_positive(c, rs, "low_freq_factor", "rope_scaling.low_freq_factor", &f->low_freq_factor);
    if (st == TG_OK)
        st = get_positive(c, rs, "high_freq_factor", "rope_scaling.high_freq_factor", &f->high_freq_factor);
    if (st == TG_OK)
        st = get_count(c, rs, "original_max_position_embeddings", "rope_scaling.original_max_position_embeddings",
                       &f->original_context_length);
    return st;
}

/* A feature the decoder does not have: refused when the key is true. */
static int refuse_true(const cfg_src *c, const char *key, const char *why)
{
    bool on = false;
    int st = get_bool(c, key, false, &on);
    if (st == TG_OK && on) st = tg_error_status(TG_EFORMAT, "config_from_hf %s: '%s' is true: %s", c->path, key, why);
    return st;
}

/* Gemma 3's attention pattern: layer_types (a list of "sliding_attention"
 * and "full_attention", one per layer), or the older sliding_window_pattern
 * N (every Nth layer full). */
static int layer_types(const cfg_src *c, tg_decoder_config *cfg)
{
    const json_t *lt = json_object_get(c->root, "layer_types");
    if (!lt || json_is_null(lt)) {
        int64_t every;
        int st = get_count(c, c->root, "sliding_window_pattern", "layer_types", &every);
        return st == TG_OK ? tg_decoder_config_layer_pattern(cfg, every) : st;
    }
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != cfg->n_layers)
        return wrong(c, "layer_types", lt, "a list with one entry per layer");
    size_t i;
    const json_t *v;
    json_array_foreach(lt, i, v)
    {
        const char *t = json_is_string(v) ? json_string_value(v) : "";
        bool sliding = strcmp(t, "sliding_attention") == 0;
        if (!sliding && strcmp(t, "full_attention") != 0)
            return wrong(c, "layer_types", v, "\"sliding_attention\" or \"full_attention\"");
        if (sliding && i >= TG_DECODER_MAX_LAYER_TYPES)
            return tg_error_status(TG_EFORMAT, "config_from_hf %s: layer %zu slides; only the first %d layers can",
                                   c->path, i, TG_DECODER_MAX_LAYER_TYPES);
        if (i < TG_DECODER_MAX_LAYER_TYPES) cfg->layer_types[i] = sliding ? TG_LAYER_SLIDING : TG_LAYER_FULL;
    }
    return TG_OK;
}

/* A key that must be null or absent (a feature the decoder does not have). */
static int refuse_set(const cfg_src *c, const char *key, const char *why)
{
    const json_t *v = json_object_get(c->root, key);
    if (!v || json_is_null(v)) return TG_OK;
    char t[48];
    return tg_error_status(TG_EFORMAT, "config_from_hf %s: '%s' is %s: %s", c->path, key, json_text(v, t, sizeof t), why);
}

/* hidden_act (or Gemma's hidden_activation), when given, must be the feed-forward's. */
static int check_activation(const cfg_src *c, const char *key, const char *want, const char *mlp)
{
    const json_t *act = json_object_get(c->root, key);
    if (!act || (json_is_string(act) && strcmp(json_string_value(act), want) == 0)) return TG_OK;
    char t[48];
    return tg_error_status(TG_EFORMAT, "config_from_hf %s: %s %s is not supported (the %s feed-forward is \"%s\")",
                           c->path, key, json_text(act, t, sizeof t), mlp, want);
}

/* GPT-2's config.json (GPT2Config): n_embd, n_head, n_layer, n_positions,
 * vocab_size required; n_inner (null: 4 n_embd), layer_norm_epsilon
 * (1e-5), activation_function "gelu_new" (the book's tanh GELU; absent:
 * GPT2Config's default, which is it), tie_word_embeddings (absent: true);
 * its attention always has query/key/value biases. */
static int read_gpt2_config(const cfg_src *c, tg_decoder_config *cfg)
{
    const json_t *root = c->root;
    *cfg = (tg_decoder_config){.family = TG_GPT_FAMILY_GPT2, .qkv_bias = true};
    const struct {
        const char *key;
        int64_t *field;
    } counts[] = {{"vocab_size", &cfg->vocab_size}, {"n_positions", &cfg->context_length},
                  {"n_embd", &cfg->emb_dim},        {"n_head", &cfg->n_heads},
                  {"n_layer", &cfg->n_layers}};
    int st = TG_OK;
    for (size_t i = 0; st == TG_OK && i < sizeof counts / sizeof counts[0]; i++)
        st = get_count(c, root, counts[i].key, counts[i].key, counts[i].field);
    const json_t *inner = json_object_get(root, "n_inner");
    if (st == TG_OK && inner && !json_is_null(inner)) st = get_count(c, root, "n_inner", "n_inner", &cfg->hidden_dim);
    cfg->norm_eps = 1e-5;
    if (st == TG_OK && json_object_get(root, "layer_norm_epsilon"))
        st = get_positive(c, root, "layer_norm_epsilon", "layer_norm_epsilon", &cfg->norm_eps);
    const json_t *act = json_object_get(root, "activation_function");
    if (st == TG_OK && act && !(json_is_string(act) && (strcmp(json_string_value(act), "gelu_new") == 0 ||
                                                        strcmp(json_string_value(act), "gelu_pytorch_tanh") == 0))) {
        char t[48];
        st = tg_error_status(TG_EFORMAT,
                             "config_from_hf %s: activation_function %s is not supported (the book's GELU is "
                             "\"gelu_new\")",
                             c->path, json_text(act, t, sizeof t));
    }
    if (st == TG_OK) st = get_bool(c, "tie_word_embeddings", true, &cfg->tie_head);
    return st;
}

static int read_config(const cfg_src *c, tg_decoder_config *cfg)
{
    const json_t *root = c->root, *mt = json_object_get(root, "model_type");
    if (!mt) return missing(c, "model_type");
    if (!json_is_string(mt)) return wrong(c, "model_type", mt, "a string");
    const tg__family *f = tg__family_of_hf(json_string_value(mt));
    if (!f) {
        char t[48];
        return tg_error_status(TG_EFORMAT,
                               "config_from_hf %s: model_type %s is not supported (\"gpt2\", \"qwen3\", \"llama\" "
                               "or \"gemma3_text\")",
                               c->path, json_text(mt, t, sizeof t));
    }
    if (f->family == TG_GPT_FAMILY_GPT2) return read_gpt2_config(c, cfg);
    bool gemma = f->family == TG_GPT_FAMILY_GEMMA3, qwen = f->family == TG_GPT_FAMILY_QWEN3;
    if (gemma) {
        /* the preset's features: four norms x * (1 + w), the embeddings' scale, QK-norm */
        if (tg_decoder_config_preset("gemma3-270m", cfg) != TG_OK) return TG_EINVAL;
        memset(cfg->layer_types, 0, sizeof cfg->layer_types);
    }
    cfg->family = f->family;
    cfg->qk_norm = qwen || gemma;
    const struct {
        const char *key;
        int64_t *field;
    } counts[] = {{"vocab_size", &cfg->vocab_size},
                  {"max_position_embeddings", &cfg->context_length},
                  {"hidden_size", &cfg->emb_dim},
                  {"num_attention_heads", &cfg->n_heads},
                  {"num_hidden_layers", &cfg->n_layers},
                  {"intermediate_size", &cfg->hidden_dim},
                  {"num_key_value_heads", &cfg->n_kv_groups}};
    int st = TG_OK;
    for (size_t i = 0; st == TG_OK && i < sizeof counts / sizeof counts[0]; i++)
        st = get_count(c, root, counts[i].key, counts[i].key, counts[i].field);
    if (st == TG_OK) st = get_positive(c, root, "rms_norm_eps", "rms_norm_eps", &cfg->norm_eps);
    if (st == TG_OK) st = get_positive(c, root, "rope_theta", "rope_theta", &cfg->rope_base);
    if (st != TG_OK) return st;
    /* Qwen3 and Gemma 3 name their head_dim (it need not be hidden_size /
     * heads); Llama 3 derives it, and a head_dim given must be that */
    if (qwen || gemma) {
        if ((st = get_count(c, root, "head_dim", "head_dim", &cfg->head_dim)) != TG_OK) return st;
    } else if (json_object_get(root, "head_dim")) {
        int64_t hd;
        if ((st = get_count(c, root, "head_dim", "head_dim", &hd)) != TG_OK) return st;
        if (hd * cfg->n_heads != cfg->emb_dim)
            return tg_error_status(TG_EFORMAT,
                                   "config_from_hf %s: head_dim %lld is not hidden_size / num_attention_heads "
                                   "(%lld / %lld); Llama 3's attention derives it",
                                   c->path, (long long)hd, (long long)cfg->emb_dim, (long long)cfg->n_heads);
    }
    if (gemma) {
        if ((st = get_count(c, root, "sliding_window", "sliding_window", &cfg->sliding_window)) != TG_OK ||
            (st = get_positive(c, root, "rope_local_base_freq", "rope_local_base_freq", &cfg->rope_local_base)) != TG_OK ||
            (st = get_positive(c, root, "query_pre_attn_scalar", "query_pre_attn_scalar",
                               &cfg->query_pre_attn_scalar)) != TG_OK ||
            (st = layer_types(c, cfg)) != TG_OK ||
            (st = check_activation(c, "hidden_activation", "gelu_pytorch_tanh", "GeGLU")) != TG_OK ||
            (st = check_activation(c, "hidden_act", "gelu_pytorch_tanh", "GeGLU")) != TG_OK ||
            (st = refuse_set(c, "final_logit_softcapping", "the decoder's logits are not capped")) != TG_OK ||
            (st = refuse_set(c, "attn_logit_softcapping", "the decoder's scores are not capped")) != TG_OK ||
            (st = refuse_set(c, "rope_scaling", "Gemma 3's RoPE is not scaled here")) != TG_OK ||
            (st = get_bool(c, "tie_word_embeddings", true, &cfg->tie_head)) != TG_OK)
            return st;
    } else if ((st = check_activation(c, "hidden_act", "silu", "SwiGLU")) != TG_OK ||
               (st = refuse_true(c, "use_sliding_window", "the decoder attends over the whole context")) != TG_OK ||
               (st = get_bool(c, "tie_word_embeddings", false, &cfg->tie_head)) != TG_OK ||
               (st = rope_scaling(c, cfg)) != TG_OK)
        return st;
    if ((st = refuse_true(c, "attention_bias", "the decoder's attention projections have no bias")) != TG_OK ||
        (st = refuse_true(c, "mlp_bias", "the decoder's feed-forward has no bias")) != TG_OK)
        return st;
    return TG_OK;
}

int tg_decoder_config_from_hf(const char *dir, tg_decoder_config *out)
{
    if (!dir || !out) return tg_error_status(TG_EINVAL, "config_from_hf: NULL argument");
    size_t len = strlen(dir) + sizeof "/config.json";
    char *path = malloc(len);
    if (!path) return tg_error_status(TG_ENOMEM, "config_from_hf: out of memory");
    snprintf(path, len, "%s/config.json", dir);
    cfg_src c = {path, NULL};
    int st = TG_OK;
    struct stat sb;
    json_error_t jerr;
    if (stat(path, &sb) != 0)
        st = tg_error_status(TG_EIO, "config_from_hf: cannot read %s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = tg_error_status(TG_EIO, "config_from_hf: %s is not a regular file", path);
    else if (!(c.root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr)))
        st = tg_error_status(TG_EFORMAT, "config_from_hf %s: invalid JSON: %s (line %d)", path, jerr.text, jerr.line);
    else if (!json_is_object(c.root))
        st = tg_error_status(TG_EFORMAT, "config_from_hf %s: not a JSON object", path);
    tg_decoder_config cfg = {0};
    if (st == TG_OK) st = read_config(&c, &cfg);
    if (st == TG_OK && tg_decoder_config_check(&cfg) != TG_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", tg_last_error());
        st = tg_error_status(TG_EFORMAT, "config_from_hf %s: %s", path, why);
    }
    if (st == TG_OK) *out = cfg;
    json_decref(c.root);
    free(path);
    return st;
}

/* ---- the weights' names ---------------------------------------------------------------------- */

/* The per-layer tensors: Hugging Face's name after "model.layers.N.", ours
 * after "<blocks>.N." (a norm's: its module, then the family's parameter
 * name, "scale" or "weight"): the family's table (src/nn/families.c). */
#define NPARTS TG__HF_MAX_PARTS
enum { SLOT_EMBED = 0, SLOT_NORM, SLOT_HEAD, SLOT_LAYERS };

/* One tensor the model takes. */
typedef struct {
    const char *hf;   /* NULL: no such tensor in this model (QK-norm off) */
    const char *ours; /* the model's parameter, dotted */
    tg_tensor *dst;
    int shard; /* the shard holding it; -1: none seen */
} slot;

/* The slot of a Hugging Face name, or -1: "model.layers.N.<part>" with N a
 * plain decimal below n_layers and <part> one of the family's, or one of the
 * three outside the layers. */
static int slot_of(const char *name, int64_t n_layers, const slot *slots, const tg__family *f)
{
    int k = -1;
    if (strcmp(name, "model.embed_tokens.weight") == 0)
        k = SLOT_EMBED;
    else if (strcmp(name, "model.norm.weight") == 0)
        k = SLOT_NORM;
    else if (strcmp(name, "lm_head.weight") == 0)
        k = SLOT_HEAD;
    else if (strncmp(name, "model.layers.", 13) == 0) {
        const char *p = name + 13;
        int64_t l = 0;
        if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return -1;
        for (; *p >= '0' && *p <= '9'; p++)
            if ((l = l * 10 + (*p - '0')) >= n_layers) return -1;
        if (*p++ != '.') return -1;
        for (int i = 0; i < NPARTS && f->hf_parts[i].hf; i++)
            if (strcmp(p, f->hf_parts[i].hf) == 0) k = SLOT_LAYERS + (int)l * NPARTS + i;
    }
    return k >= 0 && slots[k].hf ? k : -1;
}

/* Not a weight: the RoPE table some older Llama checkpoints carry
 * ("model.layers.N.self_attn.rotary_emb.inv_freq"); the decoder computes its own. */
static bool skipped(const char *name)
{
    size_t n = strlen(name), s = strlen(".self_attn.rotary_emb.inv_freq");
    return strncmp(name, "model.layers.", 13) == 0 && n > s &&
           strcmp(name + n - s, ".self_attn.rotary_emb.inv_freq") == 0;
}

/* Every tensor of the model's family and configuration, with its parameter. */
static int make_slots(tg_tape *tp, tg_module *model, const tg_decoder_config *cfg, const tg__family *f, slot **out)
{
    const char *norm = f->norm_book ? "scale" : "weight";
    int64_t n = SLOT_LAYERS + cfg->n_layers * NPARTS;
    slot *s = tg_tape_alloc(tp, sizeof *s * (size_t)n, true);
    if (!s) return TG_ENOMEM;
    s[SLOT_EMBED] = (slot){"model.embed_tokens.weight", "tok_emb.weight", NULL, -1};
    s[SLOT_NORM] = (slot){"model.norm.weight", tg__tape_printf(tp, "final_norm.%s", norm), NULL, -1};
    s[SLOT_HEAD] = (slot){"lm_head.weight", "out_head.weight", NULL, -1};
    if (!s[SLOT_NORM].ours) return TG_ENOMEM;
    for (int64_t l = 0; l < cfg->n_layers; l++)
        for (int i = 0; i < NPARTS && f->hf_parts[i].hf; i++) {
            const tg__hf_part *part = &f->hf_parts[i];
            if (part->qk_norm && !cfg->qk_norm) continue;
            slot *t = &s[SLOT_LAYERS + l * NPARTS + i];
            *t = (slot){tg__tape_printf(tp, "model.layers.%lld.%s", (long long)l, part->hf),
                        tg__tape_printf(tp, "%s.%lld.%s%s%s", f->blocks, (long long)l, part->ours, part->norm ? "." : "",
                                    part->norm ? norm : ""),
                        NULL, -1};
            if (!t->hf || !t->ours) return TG_ENOMEM;
        }
    for (int64_t k = 0; k < n; k++) {
        if (!s[k].hf) continue;
        s[k].dst = tg_module_get_parameter(model, s[k].ours);
        if (!s[k].dst)
            return tg_error_status(TG_EINVAL, "load_hf: the %s has no parameter '%s' (not as tg_decoder_new built it?)",
                                   f->model_class, s[k].ours);
    }
    *out = s;
    return TG_OK;
}

/* ---- the shards ------------------------------------------------------------------------------ */

typedef struct {
    const char *dir;
    const tg__family *fam; /* the model's: its tensor names */
    tg_tape *tp;           /* the check's memory: names, slots, headers */
    int n_shards;
    const char **file; /* the shards' names in dir */
    const char **path; /* and their paths */
} folder;

static const char *join(tg_tape *tp, const char *dir, const char *name) { return tg__tape_printf(tp, "%s/%s", dir, name); }

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The shard files: model.safetensors, or the distinct files of the index's
 * weight_map, each a plain name in dir. */
static int list_shards(folder *f)
{
    struct stat sb;
    const char *single = join(f->tp, f->dir, "model.safetensors"),
               *index = join(f->tp, f->dir, "model.safetensors.index.json");
    if (!single || !index) return TG_ENOMEM;
    if (stat(single, &sb) == 0) {
        f->n_shards = 1;
        f->file = tg_tape_alloc(f->tp, sizeof *f->file, false);
        f->path = tg_tape_alloc(f->tp, sizeof *f->path, false);
        if (!f->file || !f->path) return TG_ENOMEM;
        f->file[0] = "model.safetensors", f->path[0] = single;
        return TG_OK;
    }
    if (stat(index, &sb) != 0)
        return tg_error_status(TG_EIO, "load_hf %s: no model.safetensors and no model.safetensors.index.json", f->dir);
    json_error_t jerr;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return tg_error_status(TG_EFORMAT, "load_hf %s: invalid JSON: %s (line %d)", index, jerr.text, jerr.line);
    const json_t *map = json_object_get(root, "weight_map");
    int st = TG_OK;
    if (!json_is_object(map))
        st = tg_error_status(TG_EFORMAT, "load_hf %s: 'weight_map' is missing or not an object", index);
    size_t n = st == TG_OK ? json_object_size(map) : 0;
    const char **names = st == TG_OK ? tg_tape_alloc(f->tp, sizeof *names * (n ? n : 1), false) : NULL;
    if (st == TG_OK && !names) st = TG_ENOMEM;
    const char *key;
    const json_t *v;
    size_t k = 0;
    if (st == TG_OK)
        json_object_foreach((json_t *)map, key, v) {
            const char *s = json_is_string(v) ? json_string_value(v) : NULL;
            char t[48];
            if (!s || strlen(s) != json_string_length(v) || !*s || strchr(s, '/') || strcmp(s, ".") == 0 ||
                strcmp(s, "..") == 0) {
                st = tg_error_status(TG_EFORMAT, "load_hf %s: weight_map['%s'] is %s, not a file name in the folder",
                                     index, key, json_text(v, t, sizeof t));
                break;
            }
            names[k++] = s;
        }
    if (st == TG_OK) { /* distinct names, sorted */
        qsort(names, k, sizeof *names, cmp_str);
        f->file = tg_tape_alloc(f->tp, sizeof *f->file * (k ? k : 1), false);
        f->path = tg_tape_alloc(f->tp, sizeof *f->path * (k ? k : 1), false);
        if (!f->file || !f->path) st = TG_ENOMEM;
        for (size_t i = 0; st == TG_OK && i < k; i++) {
            if (f->n_shards > 0 && strcmp(names[i], f->file[f->n_shards - 1]) == 0) continue;
            const char *file = tg__tape_printf(f->tp, "%s", names[i]), *path = join(f->tp, f->dir, names[i]);
            if (!file || !path)
                st = TG_ENOMEM;
            else
                f->file[f->n_shards] = file, f->path[f->n_shards++] = path;
        }
    }
    json_decref(root);
    return st;
}

/* ---- checking and loading -------------------------------------------------------------------- */

static const char *shape_of(int ndim, const int64_t *shape, char *buf, size_t size)
{
    tg_tensor t = {.ndim = ndim};
    memcpy(t.shape, shape, sizeof t.shape);
    return tg_shape_str(&t, buf, size);
}

/* config.json, when the folder has one, describes the model: every setting
 * the shapes do not show (family, norm eps, RoPE) and the sizes. The
 * context length may differ, and so may tie_head (either loads). */
static int check_config(tg_tape *tp, const char *dir, const tg_decoder_config *given)
{
    const char *path = join(tp, dir, "config.json");
    struct stat sb;
    if (!path) return TG_ENOMEM;
    if (stat(path, &sb) != 0) return TG_OK;
    tg_decoder_config h, m;
    int st = tg_decoder_config_from_hf(dir, &h);
    if (st != TG_OK) return st;
    if (h.family != given->family)
        return tg_error_status(TG_EINVAL, "load_hf %s: it describes a %s, the model is a %s", path,
                               tg__decoder_class_name(&h), tg__decoder_class_name(given));
    if (tg_decoder_config_resolve(&h, &h) != TG_OK || tg_decoder_config_resolve(given, &m) != TG_OK) return TG_EINVAL;
    int64_t diff_layer = -1;
    for (int64_t i = 0; i < m.n_layers && i < TG_DECODER_MAX_LAYER_TYPES && diff_layer < 0; i++)
        if (h.layer_types[i] != m.layer_types[i]) diff_layer = i;
    /* every value compared as a double: the sizes are below 2^31, exact */
    const struct {
        const char *name;
        double file, model;
    } fields[] = {
        {"vocab_size", (double)h.vocab_size, (double)m.vocab_size},
        {"emb_dim", (double)h.emb_dim, (double)m.emb_dim},
        {"n_heads", (double)h.n_heads, (double)m.n_heads},
        {"n_kv_groups", (double)h.n_kv_groups, (double)m.n_kv_groups},
        {"head_dim", (double)h.head_dim, (double)m.head_dim},
        {"hidden_dim", (double)h.hidden_dim, (double)m.hidden_dim},
        {"n_layers", (double)h.n_layers, (double)m.n_layers},
        {"qk_norm", h.qk_norm, m.qk_norm},
        {"norm_eps", h.norm_eps, m.norm_eps},
        {"rope_base", h.rope_base, m.rope_base},
        {"rope_local_base", h.rope_local_base, m.rope_local_base},
        {"rope_freq.factor", h.rope_freq.factor, m.rope_freq.factor},
        {"rope_freq.low_freq_factor", h.rope_freq.low_freq_factor, m.rope_freq.low_freq_factor},
        {"rope_freq.high_freq_factor", h.rope_freq.high_freq_factor, m.rope_freq.high_freq_factor},
        {"rope_freq.original_context_length", (double)h.rope_freq.original_context_length,
         (double)m.rope_freq.original_context_length},
        {"sliding_window", (double)h.sliding_window, (double)m.sliding_window},
        {"query_pre_attn_scalar", h.query_pre_attn_scalar, m.query_pre_attn_scalar},
        {"norm_offset", h.norm_offset, m.norm_offset},
        {"post_norms", h.post_norms, m.post_norms},
        {"emb_scale", h.emb_scale, m.emb_scale},
        {"norm", (double)h.norm, (double)m.norm},
        {"mlp", (double)h.mlp, (double)m.mlp},
        {"qkv_bias", h.qkv_bias, m.qkv_bias},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i].file != fields[i].model)
            return tg_error_status(TG_EINVAL,
                                   "load_hf %s: its %s is %.9g, the model's %.9g (build the model from "
                                   "tg_decoder_config_from_hf)",
                                   path, fields[i].name, fields[i].file, fields[i].model);
    if (diff_layer >= 0)
        return tg_error_status(TG_EINVAL, "load_hf %s: its layer %lld is %s, the model's %s", path, (long long)diff_layer,
                               h.layer_types[diff_layer] ? "sliding" : "full", m.layer_types[diff_layer] ? "sliding" : "full");
    return TG_OK;
}

/* Every shard's header against the slots: each tensor mapped once, float,
 * of its parameter's shape; then nothing missing or left over. */
static int check_shards(folder *f, slot *slots, int n_slots, int64_t n_layers)
{
    const char *unexpected = NULL, *unexpected_in = NULL;
    char ushape[64] = "", a[64], b[64];
    int n_unexpected = 0;
    for (int s = 0; s < f->n_shards; s++) {
        int n;
        tg__safetensors_entry *e;
        int st = tg__safetensors_header(f->tp, f->path[s], &n, &e);
        if (st != TG_OK) return st;
        for (int i = 0; i < n; i++) {
            int k = slot_of(e[i].name, n_layers, slots, f->fam);
            if (k < 0 && skipped(e[i].name)) continue;
            if (k < 0) {
                if (n_unexpected++ == 0)
                    unexpected = e[i].name, unexpected_in = f->file[s],
                    shape_of(e[i].ndim, e[i].shape, ushape, sizeof ushape);
                continue;
            }
            slot *t = &slots[k];
            if (t->shard >= 0)
                return tg_error_status(TG_EFORMAT, "load_hf %s: '%s' is in both %s and %s", f->dir, t->hf,
                                       f->file[t->shard], f->file[s]);
            if (!tg__is_float(e[i].dtype))
                return tg_error_status(TG_EFORMAT,
                                       "load_hf %s: '%s' in %s has dtype %s, expected F32, F16, BF16 or F64", f->dir,
                                       t->hf, f->file[s], e[i].file_dtype);
            if (e[i].ndim != t->dst->ndim ||
                memcmp(e[i].shape, t->dst->shape, sizeof(int64_t) * (size_t)e[i].ndim) != 0)
                return tg_error_status(TG_EFORMAT,
                                       "load_hf %s: size mismatch for '%s' in %s: the file's %s, the model's "
                                       "'%s' %s",
                                       f->dir, t->hf, f->file[s], shape_of(e[i].ndim, e[i].shape, a, sizeof a), t->ours,
                                       tg_shape_str(t->dst, b, sizeof b));
            t->shard = s;
        }
    }
    int n_missing = 0, first_missing = -1;
    for (int k = 0; k < n_slots; k++)
        if (slots[k].hf && k != SLOT_HEAD && slots[k].shard < 0 && n_missing++ == 0) first_missing = k;
    char more[64] = "";
    if (n_unexpected > 1 || n_missing > 1)
        snprintf(more, sizeof more, " (%d unexpected, %d missing in all)", n_unexpected, n_missing);
    if (n_unexpected && n_missing)
        return tg_error_status(TG_EFORMAT, "load_hf %s: unexpected tensor '%s' %s in %s, and '%s' %s is missing%s",
                               f->dir, unexpected, ushape, unexpected_in, slots[first_missing].hf,
                               tg_shape_str(slots[first_missing].dst, b, sizeof b), more);
    if (n_unexpected)
        return tg_error_status(TG_EFORMAT, "load_hf %s: unexpected tensor '%s' %s in %s (not a tensor of this %s)%s",
                               f->dir, unexpected, ushape, unexpected_in, "model", more);
    if (n_missing)
        return tg_error_status(TG_EFORMAT, "load_hf %s: missing tensor '%s' %s (the model's '%s')%s", f->dir,
                               slots[first_missing].hf, tg_shape_str(slots[first_missing].dst, b, sizeof b),
                               slots[first_missing].ours, more);
    const tg_tensor *head = slots[SLOT_HEAD].dst, *emb = slots[SLOT_EMBED].dst;
    if (slots[SLOT_HEAD].shard < 0 && !tg_same_shape(head, emb))
        return tg_error_status(TG_EFORMAT,
                               "load_hf %s: no lm_head.weight, and out_head.weight %s cannot take "
                               "embed_tokens' values %s",
                               f->dir, tg_shape_str(head, a, sizeof a), tg_shape_str(emb, b, sizeof b));
    return TG_OK;
}

/* One shard read into a tape of its own, copied into the parameters, freed. */
static int apply_shard(folder *f, int s, slot *slots, int64_t n_layers, bool tied)
{
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    tg_safetensors file;
    int st = tg_safetensors_load_ex(tp, f->path[s], &(tg_safetensors_options){.keep_bf16 = true}, &file);
    for (int i = 0; st == TG_OK && i < file.n; i++) {
        int k = slot_of(file.names[i], n_layers, slots, f->fam);
        const tg_tensor *src = file.tensors[i];
        if (k < 0 && skipped(file.names[i])) continue;
        bool is_float = tg__is_float(src->dtype) || tg__is_compact(src->dtype); /* widens (or stays) as it is copied */
        if (k < 0 || slots[k].shard != s || !tg_same_shape(src, slots[k].dst) || !is_float) {
            st = tg_error_status(TG_EIO, "load_hf %s: %s changed while it was read ('%s')", f->dir, f->file[s],
                                 file.names[i]);
            break;
        }
        if (k == SLOT_HEAD && tied) continue; /* the head is tok_emb's weight */
        tg_k_copy(slots[k].dst, src);
        tg__bump(slots[k].dst);
    }
    tg_tape_free(tp);
    return st;
}

static int gpt2_load_folder(tg_module *gpt, const char *dir); /* the end of this file */

int tg_decoder_hf_weights(const char *dir, tg_dtype *out)
{
    if (!dir || !out) return tg_error_status(TG_EINVAL, "hf_weights: NULL argument");
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    folder f = {dir, NULL, tp, 0, NULL, NULL};
    int st = list_shards(&f), n_bf16 = 0, n_other = 0;
    for (int s = 0; st == TG_OK && s < f.n_shards; s++) {
        int n;
        tg__safetensors_entry *e;
        st = tg__safetensors_header(tp, f.path[s], &n, &e);
        for (int i = 0; st == TG_OK && i < n; i++)
            if (!skipped(e[i].name)) strcmp(e[i].file_dtype, "BF16") == 0 ? n_bf16++ : n_other++;
    }
    if (st == TG_OK) *out = n_bf16 > 0 && n_other == 0 ? TG_BF16 : TG_F32;
    tg_tape_free(tp);
    return st;
}

int tg_decoder_load_hf(tg_module *model, const char *dir)
{
    if (!model || !dir) return tg_error_status(TG_EINVAL, "load_hf: NULL argument");
    tg_decoder_config cfg;
    if (tg_decoder_get_config(model, &cfg) != TG_OK)
        return tg_error_status(TG_EINVAL,
                               "load_hf: the model is a %s, not a Qwen3Model, Llama3Model or Gemma3Model (tg_decoder_new)",
                               tg_module_type_name(model));
    const tg__family *fam = tg__family_get(cfg.family);
    if (fam && fam->hf_file) return gpt2_load_folder(model, dir);
    if (!fam || !fam->hf_parts)
        return tg_error_status(TG_EINVAL, "load_hf: %s: the model is a %s", dir, tg_module_type_name(model));
    if (cfg.n_layers > (INT32_MAX - SLOT_LAYERS) / NPARTS)
        return tg_error_status(TG_EINVAL, "load_hf: %lld layers are more than this loader counts",
                               (long long)cfg.n_layers);
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    folder f = {dir, fam, tp, 0, NULL, NULL};
    slot *slots = NULL;
    int n_slots = (int)(SLOT_LAYERS + cfg.n_layers * NPARTS);
    int st = check_config(tp, dir, &cfg);
    if (st == TG_OK) st = make_slots(tp, model, &cfg, fam, &slots);
    if (st == TG_OK) st = list_shards(&f);
    if (st == TG_OK) st = check_shards(&f, slots, n_slots, cfg.n_layers); /* before anything changes */
    bool tied = st == TG_OK && slots[SLOT_HEAD].dst == slots[SLOT_EMBED].dst;
    for (int s = 0; st == TG_OK && s < f.n_shards; s++) st = apply_shard(&f, s, slots, cfg.n_layers, tied);
    if (st == TG_OK && slots[SLOT_HEAD].shard < 0 && !tied) { /* no lm_head: the head is embed_tokens' values */
        tg_k_copy(slots[SLOT_HEAD].dst, slots[SLOT_EMBED].dst);
        tg__bump(slots[SLOT_HEAD].dst);
    }
    tg_tape_free(tp);
    return st;
}

/* ---- a GPT-2 model.safetensors ------------------------------------------------------------------ */

/* Loading a Hugging Face GPT-2 model.safetensors into the book's GPTModel,
 * as the book's load_weights_into_gpt (chapter 5) maps OpenAI's weights
 * (tools/reference/gpt_book.py, hf_state_dict, is the inverse), by GPT-2's
 * file table: an optional "transformer." prefix; Conv1D weights are stored
 * (in, out), Linear's (out, in); the attn.bias / attn.masked_bias buffers
 * some files carry are not weights and are skipped. */
typedef struct {
    const char *path, *prefix;
    const tg_safetensors *file;
    tg_module *gpt;
    bool *used;  /* per file entry */
    bool apply;  /* false: check only */
    bool tied;   /* the model's head is tok_emb's weight */
    int lm_head; /* the file's lm_head.weight entry (-1: none) */
} hf_ctx;

/* dst <- src, or dst <- part `part` (of 3) of src's last dim, transposed when
 * `transpose` (a 2-D Conv1D weight). */
static int map(hf_ctx *c, const char *hf_key, const char *our_key, bool transpose, int part)
{
    char key[256], a[64], b[64];
    snprintf(key, sizeof key, "%s%s", c->prefix, hf_key);
    int idx = -1;
    for (int i = 0; i < c->file->n && idx < 0; i++)
        if (strcmp(c->file->names[i], key) == 0) idx = i;
    if (idx < 0) return tg_error_status(TG_EFORMAT, "load_hf %s: missing key '%s'", c->path, key);
    tg_tensor *dst = tg_module_get_parameter(c->gpt, our_key);
    if (!dst) return tg_error_status(TG_EINVAL, "load_hf: the model has no parameter '%s'", our_key);
    tg_tensor src = *c->file->tensors[idx];
    if (!tg__is_float(src.dtype) && !tg__is_compact(src.dtype)) /* widens (or stays) as it is copied */
        return tg_error_status(TG_EFORMAT, "load_hf %s: '%s' has dtype %s, expected a float type", c->path, key,
                               tg_dtype_name(src.dtype));
    if (part >= 0) { /* q, k or v: a third of the last dim */
        int64_t n = src.ndim >= 1 ? src.shape[src.ndim - 1] : 0;
        if (n == 0 || n % 3 != 0)
            return tg_error_status(TG_EFORMAT, "load_hf %s: '%s' of shape %s does not split into q, k, v", c->path, key,
                                   tg_shape_str(&src, a, sizeof a));
        src.shape[src.ndim - 1] = n / 3;
        src.offset += part * (n / 3) * src.stride[src.ndim - 1];
    }
    if (transpose && src.ndim == 2) {
        int64_t s0 = src.shape[0], st0 = src.stride[0];
        src.shape[0] = src.shape[1], src.stride[0] = src.stride[1];
        src.shape[1] = s0, src.stride[1] = st0;
    }
    if (!tg_same_shape(&src, dst))
        return tg_error_status(TG_EFORMAT, "load_hf %s: size mismatch for '%s'%s: file gives %s, the model's '%s' is %s",
                               c->path, key, transpose ? " (transposed)" : "", tg_shape_str(&src, a, sizeof a),
                               our_key, tg_shape_str(dst, b, sizeof b));
    c->used[idx] = true;
    if (c->apply) {
        tg_k_copy(dst, &src);
        tg__bump(dst);
    }
    return TG_OK;
}

static bool gpt2_skipped(const char *name)
{
    size_t n = strlen(name);
    return (n >= 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n >= 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

/* Every tensor of the family's file table: those outside the layers, then
 * each layer's ("h.N." and "<blocks>.N."). */
static int map_all(hf_ctx *c, const tg_decoder_config *cfg, const tg__family *f)
{
    int st = TG_OK, k = 0;
    for (; st == TG_OK && f->hf_file[k].hf; k++) {
        const tg__hf_part *row = &f->hf_file[k];
        if (strcmp(row->ours, "out_head.weight") == 0 && tg_safetensors_get(c->file, "lm_head.weight")) {
            /* a head of its own (save_pretrained of an untied GPT2LMHeadModel) */
            const char *prefix = c->prefix;
            c->prefix = "";
            st = c->tied ? (c->used[c->lm_head] = true, TG_OK) : map(c, "lm_head.weight", row->ours, false, -1);
            c->prefix = prefix;
        } else if (strcmp(row->ours, "out_head.weight") != 0 || !c->tied) {
            st = map(c, row->hf, row->ours, row->transpose, row->part);
        }
    }
    const tg__hf_part *layer = &f->hf_file[k + 1];
    for (int64_t l = 0; st == TG_OK && l < cfg->n_layers; l++)
        for (int i = 0; st == TG_OK && layer[i].hf; i++) {
            char h[128], o[128];
            snprintf(h, sizeof h, "h.%lld.%s", (long long)l, layer[i].hf);
            snprintf(o, sizeof o, "%s.%lld.%s", f->blocks, (long long)l, layer[i].ours);
            st = map(c, h, o, layer[i].transpose, layer[i].part);
        }
    return st;
}

/* GPT-2's tensors of file (what names it: a file or a folder) into gpt,
 * every key and shape checked before anything changes. */
static int gpt2_load(tg_module *gpt, const char *what, const tg_safetensors *file, tg_tape *tp,
                     const tg_decoder_config *cfg, const tg__family *fam)
{
    bool *used = tg_tape_alloc(tp, sizeof(bool) * (size_t)(file->n + 1), true);
    if (!used) return TG_ENOMEM;
    tg_tensor *emb = tg_module_get_parameter(gpt, "tok_emb.weight"), *head = tg_module_get_parameter(gpt, "out_head.weight");
    hf_ctx c = {what, "", file, gpt, used, false, emb && emb == head, -1};
    for (int i = 0; i < file->n; i++)
        if (strcmp(file->names[i], "lm_head.weight") == 0) c.lm_head = i;
    if (!tg_safetensors_get(file, "wte.weight") && tg_safetensors_get(file, "transformer.wte.weight"))
        c.prefix = "transformer.";
    int st = map_all(&c, cfg, fam); /* everything checked before anything changes */
    if (st == TG_OK && c.tied && c.lm_head >= 0) {
        const tg_tensor *lm = file->tensors[c.lm_head];
        char a[64], b[64];
        if (!tg_same_shape(lm, head))
            st = tg_error_status(TG_EFORMAT, "load_hf %s: lm_head.weight %s does not fit the tied head %s", what,
                                 tg_shape_str(lm, a, sizeof a), tg_shape_str(head, b, sizeof b));
    }
    for (int i = 0; st == TG_OK && i < file->n; i++)
        if (!used[i] && !gpt2_skipped(file->names[i]))
            st = tg_error_status(TG_EFORMAT, "load_hf %s: unexpected key '%s' (a model with more layers?)", what,
                                 file->names[i]);
    if (st == TG_OK) {
        c.apply = true;
        st = map_all(&c, cfg, fam);
    }
    return st;
}

/* The GPT-2 model's configuration and family, checked for its file table. */
static int gpt2_model(const tg_module *gpt, const char *path, tg_decoder_config *cfg, const tg__family **fam)
{
    int st = tg_decoder_get_config(gpt, cfg);
    if (st != TG_OK) return st;
    *fam = tg__family_get(cfg->family);
    if (!*fam || !(*fam)->hf_file)
        return tg_error_status(TG_EINVAL, "load_hf: %s is a GPT-2 model.safetensors; a %s loads from its Hugging Face "
                                          "folder", path, tg__decoder_class_name(cfg));
    if (!cfg->qkv_bias)
        return tg_error_status(TG_EINVAL, "load_hf: GPT-2's weights have query/key/value biases: build the model "
                                          "with qkv_bias (--qkv-bias)");
    return TG_OK;
}

int tg_gpt_load_hf(tg_module *gpt, const char *path)
{
    tg_decoder_config cfg;
    const tg__family *fam = NULL;
    if (!path) return tg_error_status(TG_EINVAL, "load_hf: NULL path");
    int st = gpt2_model(gpt, path, &cfg, &fam);
    if (st != TG_OK) return st;
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    tg_safetensors file;
    st = tg_safetensors_load_ex(tp, path, &(tg_safetensors_options){.keep_bf16 = true}, &file);
    if (st == TG_OK) st = gpt2_load(gpt, path, &file, tp, &cfg, fam);
    tg_tape_free(tp);
    return st;
}

/* A GPT-2 folder (config.json, model.safetensors or shards): its shards read
 * whole, together (GPT-2's sizes), then loaded as one file. */
static int gpt2_load_folder(tg_module *gpt, const char *dir)
{
    tg_decoder_config cfg;
    const tg__family *fam = NULL;
    int st = gpt2_model(gpt, dir, &cfg, &fam);
    if (st != TG_OK) return st;
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    folder f = {dir, fam, tp, 0, NULL, NULL};
    tg_safetensors all = {0, NULL, NULL};
    st = check_config(tp, dir, &cfg);
    if (st == TG_OK) st = list_shards(&f);
    tg_safetensors *shard = st == TG_OK ? tg_tape_alloc(tp, sizeof *shard * (size_t)f.n_shards, false) : NULL;
    if (st == TG_OK && !shard) st = TG_ENOMEM;
    for (int s = 0; st == TG_OK && s < f.n_shards; s++) {
        st = tg_safetensors_load_ex(tp, f.path[s], &(tg_safetensors_options){.keep_bf16 = true}, &shard[s]);
        if (st == TG_OK) all.n += shard[s].n;
    }
    if (st == TG_OK) {
        all.names = tg_tape_alloc(tp, sizeof *all.names * (size_t)(all.n + 1), false);
        all.tensors = tg_tape_alloc(tp, sizeof *all.tensors * (size_t)(all.n + 1), false);
        if (!all.names || !all.tensors) st = TG_ENOMEM;
    }
    for (int s = 0, k = 0; st == TG_OK && s < f.n_shards; s++)
        for (int i = 0; i < shard[s].n; i++, k++) {
            for (int j = 0; j < k && st == TG_OK; j++)
                if (strcmp(all.names[j], shard[s].names[i]) == 0)
                    st = tg_error_status(TG_EFORMAT, "load_hf %s: '%s' is in two shards", dir, shard[s].names[i]);
            all.names[k] = shard[s].names[i], all.tensors[k] = shard[s].tensors[i];
        }
    if (st == TG_OK) st = gpt2_load(gpt, dir, &all, tp, &cfg, fam);
    tg_tape_free(tp);
    return st;
}
