/* Loading a Hugging Face GPT-2 model.safetensors into the book's GPTModel,
 * mapped as the book's load_weights_into_gpt (chapter 5) maps OpenAI's
 * weights (tools/reference/gpt_book.py, hf_state_dict, is the inverse):
 *   wte -> tok_emb and out_head (tied), wpe -> pos_emb,
 *   h.N.ln_1 / ln_2 -> norm1 / norm2 (weight -> scale, bias -> shift),
 *   h.N.attn.c_attn (Conv1D, (d, 3d)) -> W_query | W_key | W_value, transposed,
 *   h.N.attn.c_proj -> att.out_proj, h.N.mlp.c_fc / c_proj -> ff.layers.0 / 2,
 *   ln_f -> final_norm.
 * Conv1D weights are stored (in, out); Linear's are (out, in). The attn.bias /
 * attn.masked_bias buffers some files carry are not weights and are skipped. */
#include "nn_internal.h"

#include <stdio.h>
#include <string.h>

#include "tapegrad/gpt.h"

typedef struct {
    const char *path, *prefix;
    const tg_safetensors *file;
    tg_module *gpt;
    bool *used;  /* per file entry */
    bool apply;  /* false: check only */
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
    if (!tg__is_float(src.dtype) && src.dtype != TG_BF16) /* bf16 widens (or stays) as it is copied */
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

static bool skipped(const char *name)
{
    size_t n = strlen(name);
    return (n >= 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n >= 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

static int map_all(hf_ctx *c, const tg_decoder_config *cfg)
{
    int st = TG_OK;
#define MAP(h, o, t, p) \
    if (st == TG_OK) st = map(c, h, o, t, p)
    MAP("wte.weight", "tok_emb.weight", false, -1);
    MAP("wte.weight", "out_head.weight", false, -1);
    MAP("wpe.weight", "pos_emb.weight", false, -1);
    MAP("ln_f.weight", "final_norm.scale", false, -1);
    MAP("ln_f.bias", "final_norm.shift", false, -1);
    static const char *const qkv[3] = {"W_query", "W_key", "W_value"};
    for (int64_t l = 0; st == TG_OK && l < cfg->n_layers; l++) {
        char h[128], o[128];
#define BLOCK(hs, os, t, p)                                                  \
    snprintf(h, sizeof h, "h.%lld.%s", (long long)l, hs);                    \
    snprintf(o, sizeof o, "trf_blocks.%lld.%s", (long long)l, os);           \
    MAP(h, o, t, p)
        BLOCK("ln_1.weight", "norm1.scale", false, -1);
        BLOCK("ln_1.bias", "norm1.shift", false, -1);
        BLOCK("ln_2.weight", "norm2.scale", false, -1);
        BLOCK("ln_2.bias", "norm2.shift", false, -1);
        for (int p = 0; p < 3; p++) {
            char ow[64], ob[64];
            snprintf(ow, sizeof ow, "att.%s.weight", qkv[p]);
            snprintf(ob, sizeof ob, "att.%s.bias", qkv[p]);
            BLOCK("attn.c_attn.weight", ow, true, p);
            BLOCK("attn.c_attn.bias", ob, false, p);
        }
        BLOCK("attn.c_proj.weight", "att.out_proj.weight", true, -1);
        BLOCK("attn.c_proj.bias", "att.out_proj.bias", false, -1);
        BLOCK("mlp.c_fc.weight", "ff.layers.0.weight", true, -1);
        BLOCK("mlp.c_fc.bias", "ff.layers.0.bias", false, -1);
        BLOCK("mlp.c_proj.weight", "ff.layers.2.weight", true, -1);
        BLOCK("mlp.c_proj.bias", "ff.layers.2.bias", false, -1);
#undef BLOCK
    }
#undef MAP
    return st;
}

int tg_gpt_load_hf(tg_module *gpt, const char *path)
{
    tg_decoder_config cfg;
    if (!path) return tg_error_status(TG_EINVAL, "load_hf: NULL path");
    int st = tg_decoder_get_config(gpt, &cfg);
    if (st != TG_OK) return st;
    if (cfg.family != TG_GPT_FAMILY_GPT2)
        return tg_error_status(TG_EINVAL, "load_hf: %s is a GPT-2 model.safetensors; a %s loads from its Hugging Face "
                                          "folder", path, tg__decoder_class_name(&cfg));
    if (!cfg.qkv_bias)
        return tg_error_status(TG_EINVAL, "load_hf: GPT-2's weights have query/key/value biases: build the model "
                                          "with qkv_bias (--qkv-bias)");
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    tg_safetensors file;
    st = tg_safetensors_load_ex(tp, path, &(tg_safetensors_options){.keep_bf16 = true}, &file);
    bool *used = st == TG_OK ? tg_tape_alloc(tp, sizeof(bool) * (size_t)(file.n + 1), true) : NULL;
    if (st == TG_OK && !used) st = TG_ENOMEM;
    hf_ctx c = {path, "", &file, gpt, used, false};
    if (st == TG_OK && !tg_safetensors_get(&file, "wte.weight") && tg_safetensors_get(&file, "transformer.wte.weight"))
        c.prefix = "transformer.";
    if (st == TG_OK) st = map_all(&c, &cfg); /* everything checked before anything changes */
    for (int i = 0; st == TG_OK && i < file.n; i++)
        if (!used[i] && !skipped(file.names[i]))
            st = tg_error_status(TG_EFORMAT, "load_hf %s: unexpected key '%s' (a model with more layers?)", path,
                                 file.names[i]);
    if (st == TG_OK) {
        c.apply = true;
        st = map_all(&c, &cfg);
    }
    tg_tape_free(tp);
    return st;
}
