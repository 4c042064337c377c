/* tg_export_gguf (include/tapegrad/export.h): a decoder as the GGUF version 3
 * file llama.cpp reads, written as llama.cpp's convert_hf_to_gguf.py writes
 * the family's Hugging Face checkpoint.
 *
 * The file (ggml's docs/gguf.md): "GGUF", version 3, the tensor and
 * key-value counts, the key-values (a string key, a value type, the value),
 * the tensor infos (name, dims innermost first, ggml type, offset in the
 * data), zero padding to 32 bytes, then each tensor's data at a multiple of
 * 32. Little-endian throughout.
 *
 * The weights come from tg_decoder_hf_state_dict (Hugging Face's names and
 * layouts) and are changed as the converter changes them: GPT-2's Conv1D
 * weights transposed back to (out, in), Llama's query and key rows permuted
 * (LlamaModel.permute: llama.cpp's Llama rotates interleaved pairs where
 * Hugging Face rotates halves), Gemma 3's norm weights plus one (llama.cpp's
 * RMSNorm computes x * w, Gemma's x * (1 + w)), Llama 3's RoPE smoothing as
 * the rope_freqs tensor. Types as the converter picks them: 1-D tensors,
 * norms, biases and GPT-2's position table F32; the matrices the type asked
 * for, Q8_0 only for rows of a multiple of 32 values (else F16).
 *
 * The tokenizer: byte-level BPE tokenizers (GPT-2, Qwen3, Llama 3) as
 * tokenizer.ggml.model "gpt2" with the pre-tokenizer's name, tokens padded
 * to the embedding's rows, token types and merges; Gemma 3's byte-fallback
 * BPE as the SentencePiece form llama.cpp reads Gemma in (model "llama",
 * scores, byte tokens), with each token's score minus the rank of the first
 * merge that makes it: llama.cpp's SentencePiece merges the adjacent pair
 * whose joined text is the best-scored token, which is the pair of lowest
 * merge rank when, as in Gemma's tokenizer.json, the merges are every split
 * of every token into two tokens, grouped by the token they make. Its added
 * tokens that are not special ("\n\n", "▁▁", "<div>") keep their text and,
 * when merges make them, their merge's score: Hugging Face matches them in
 * the raw text before its normaliser turns spaces into "▁", and so does
 * llama.cpp with a user-defined token, which leaves the spaces to the merges
 * as Hugging Face does. (The converter, from a tokenizer.model, writes them
 * with spaces for "▁", so that a text holding "▁" itself tokenizes apart.) */
#include "export_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OP "export_gguf"
#define ALIGN 32

enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9 };
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_Q8_0 = 8, GGML_BF16 = 30 };
/* llama.cpp's token types */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };

/* ---- the header, built in memory ----------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    bool oom;
    uint64_t n_kv;
} buf;

static void put(buf *b, const void *data, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u32(buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(buf *b, uint64_t v)
{
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_f32(buf *b, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    put_u32(b, u);
}

static void put_strn(buf *b, const char *s, size_t n)
{
    put_u64(b, n);
    put(b, s, n);
}

static void put_str(buf *b, const char *s) { put_strn(b, s, strlen(s)); }

static void key(buf *b, const char *k, uint32_t type)
{
    put_str(b, k);
    put_u32(b, type);
    b->n_kv++;
}

/* "{arch}.{name}" as a key */
static void arch_key(buf *b, const char *arch, const char *name, uint32_t type)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, name);
    key(b, k, type);
}

static void kv_str(buf *b, const char *k, const char *v)
{
    key(b, k, GGUF_STRING);
    put_str(b, v);
}

static void kv_u32(buf *b, const char *k, uint32_t v)
{
    key(b, k, GGUF_U32);
    put_u32(b, v);
}

static void kv_bool(buf *b, const char *k, bool v)
{
    key(b, k, GGUF_BOOL);
    put(b, &(uint8_t){v}, 1);
}

static void arch_u32(buf *b, const char *arch, const char *name, int64_t v)
{
    arch_key(b, arch, name, GGUF_U32);
    put_u32(b, (uint32_t)v);
}

static void arch_f32(buf *b, const char *arch, const char *name, double v)
{
    arch_key(b, arch, name, GGUF_F32);
    put_f32(b, (float)v);
}

static void array_head(buf *b, const char *k, uint32_t elem, uint64_t n)
{
    key(b, k, GGUF_ARRAY);
    put_u32(b, elem);
    put_u64(b, n);
}

/* ---- the model ------------------------------------------------------------------------------------ */

typedef struct {
    const char *arch;
    tg_decoder_config cfg; /* resolved */
    tg_export_type type;
    const char *name;
} model_info;

static const char *arch_name(tg_gpt_family f)
{
    switch (f) {
    case TG_GPT_FAMILY_GPT2: return "gpt2";
    case TG_GPT_FAMILY_QWEN3: return "qwen3";
    case TG_GPT_FAMILY_LLAMA3: return "llama";
    case TG_GPT_FAMILY_GEMMA3: return "gemma3";
    }
    return NULL;
}

/* LLAMA_FTYPE_ALL_F32, MOSTLY_F16, MOSTLY_BF16, MOSTLY_Q8_0 */
static uint32_t file_type(tg_export_type t)
{
    static const uint32_t ft[] = {0, 1, 32, 7};
    return ft[t];
}

/* Whether llama.cpp's Gemma 3 with the pattern period p has the model's
 * layers: it makes layer il sliding when il % p < p - 1 (p 0: all sliding;
 * llama_hparams::set_swa_pattern). */
static bool period_fits(const tg_decoder_config *c, int64_t p)
{
    for (int64_t l = 0; l < c->n_layers; l++) {
        bool sliding = l < TG_DECODER_MAX_LAYER_TYPES && c->layer_types[l] == TG_LAYER_SLIDING;
        if (sliding != (p == 0 || l % p < p - 1)) return false;
    }
    return true;
}

/* A model without sliding layers: written as llama.cpp's default pattern
 * whose sliding layers see the whole context with the full layers' RoPE
 * base (llama.cpp's gemma3 needs a sliding layer). */
static bool gemma3_all_full(const tg_decoder_config *c) { return period_fits(c, 1); }

/* The period of the model's layers: 6, llama.cpp's own, or the one the
 * file's attention.sliding_window_pattern then names; -1 when none fits. */
static int64_t gemma3_period(const tg_decoder_config *c)
{
    if (period_fits(c, 6) || gemma3_all_full(c)) return 6;
    for (int64_t p = 0; p <= c->n_layers + 1; p++)
        if (period_fits(c, p)) return p;
    return -1;
}

/* llama.cpp's Gemma 3 query scale: 1 / sqrt(head_dim), 1 / sqrt(emb_dim /
 * n_heads) for 62 layers (Gemma 3 27B); the model's is
 * query_pre_attn_scalar ** -0.5, folded into the query norm's weight. */
static double gemma3_query_factor(const tg_decoder_config *c)
{
    double want = c->n_layers == 62 ? (double)(c->emb_dim / c->n_heads) : (double)c->head_dim;
    double have = c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar : (double)c->head_dim;
    return have == want ? 1.0 : sqrt(want / have);
}

/* What llama.cpp cannot express of the model: one line, or TG_OK. */
static int check_llama_cpp(const model_info *m)
{
    const tg_decoder_config *c = &m->cfg;
    if (c->family != TG_GPT_FAMILY_GEMMA3) return TG_OK;
    if (gemma3_period(c) < 0)
        return tg_error_status(TG_EINVAL, OP ": llama.cpp's gemma3 makes every P-th layer full and the others "
                                          "sliding; the model's layers follow no such period");
    if (!c->qk_norm)
        return tg_error_status(TG_EINVAL, OP ": llama.cpp's gemma3 needs the query and key norms");
    return TG_OK;
}

static void model_kv(buf *b, const model_info *m)
{
    const tg_decoder_config *c = &m->cfg;
    const char *a = m->arch;
    kv_str(b, "general.architecture", a);
    kv_str(b, "general.type", "model");
    kv_str(b, "general.name", m->name);
    kv_u32(b, "general.file_type", file_type(m->type));
    kv_u32(b, "general.quantization_version", 2);
    arch_u32(b, a, "block_count", c->n_layers);
    arch_u32(b, a, "context_length", c->context_length);
    arch_u32(b, a, "embedding_length", c->emb_dim);
    arch_u32(b, a, "feed_forward_length", c->hidden_dim);
    arch_u32(b, a, "attention.head_count", c->n_heads);
    if (c->family == TG_GPT_FAMILY_GPT2) { /* GPT2Model.set_gguf_parameters */
        arch_f32(b, a, "attention.layer_norm_epsilon", c->norm_eps);
        return;
    }
    /* TextModel.set_gguf_parameters, then the family's own */
    arch_u32(b, a, "attention.head_count_kv", c->n_kv_groups);
    arch_f32(b, a, "rope.freq_base", c->rope_base);
    if (c->family == TG_GPT_FAMILY_GEMMA3)
        arch_f32(b, a, "rope.freq_base_swa", gemma3_all_full(c) ? c->rope_base : c->rope_local_base);
    arch_f32(b, a, "attention.layer_norm_rms_epsilon", c->norm_eps);
    arch_u32(b, a, "attention.key_length", c->head_dim);
    arch_u32(b, a, "attention.value_length", c->head_dim);
    if (c->family == TG_GPT_FAMILY_LLAMA3) { /* LlamaModel */
        arch_u32(b, a, "vocab_size", c->vocab_size);
        arch_u32(b, a, "rope.dimension_count", c->head_dim);
    }
    if (c->family == TG_GPT_FAMILY_GEMMA3) {
        arch_u32(b, a, "attention.sliding_window", gemma3_all_full(c) ? c->context_length : c->sliding_window);
        int64_t p = gemma3_period(c);
        if (p != 6) arch_u32(b, a, "attention.sliding_window_pattern", p);
    }
}

/* ---- the tensors ---------------------------------------------------------------------------------- */

typedef enum { T_NONE, T_TRANSPOSE, T_PERMUTE, T_ADD_ONE } transform;

typedef struct {
    char name[64];
    const tg_tensor *src; /* NULL: data (rope_freqs) */
    const float *data;
    transform how;
    int64_t heads;        /* T_PERMUTE: the heads the rows hold */
    float scale;          /* T_ADD_ONE: (w + 1) * scale (Gemma 3's query norm), else 1 */
    int ndim;
    int64_t rows, cols;   /* the GGUF matrix: rows of cols values (1-D: one row) */
    uint32_t type;
    uint64_t offset, nbytes;
} entry;

typedef struct {
    const char *hf, *gguf;
} name_pair;

/* Hugging Face's names -> llama.cpp's (gguf-py's tensor_mapping.py), per layer. */
static const name_pair decoder_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {NULL, NULL},
};
/* Gemma 3's four norms: its post_attention_layernorm is after the attention */
static const name_pair gemma3_layer[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {NULL, NULL},
};
static const name_pair gpt2_layer[] = {
    {"ln_1.weight", "attn_norm.weight"},       {"ln_1.bias", "attn_norm.bias"},
    {"attn.c_attn.weight", "attn_qkv.weight"}, {"attn.c_attn.bias", "attn_qkv.bias"},
    {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
    {"ln_2.weight", "ffn_norm.weight"},        {"ln_2.bias", "ffn_norm.bias"},
    {"mlp.c_fc.weight", "ffn_up.weight"},      {"mlp.c_fc.bias", "ffn_up.bias"},
    {"mlp.c_proj.weight", "ffn_down.weight"},  {"mlp.c_proj.bias", "ffn_down.bias"},
    {NULL, NULL},
};
static const name_pair top[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"transformer.wte.weight", "token_embd.weight"},
    {"transformer.wpe.weight", "position_embd.weight"},
    {"transformer.ln_f.weight", "output_norm.weight"},
    {"transformer.ln_f.bias", "output_norm.bias"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};

static const char *lookup(const name_pair *t, const char *hf)
{
    for (; t->hf; t++)
        if (strcmp(t->hf, hf) == 0) return t->gguf;
    return NULL;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The llama.cpp name of a Hugging Face tensor in e->name, and how its values change. */
static int map_name(const model_info *m, const char *hf, entry *e)
{
    tg_gpt_family fam = m->cfg.family;
    const char *g = lookup(top, hf);
    if (g) {
        snprintf(e->name, sizeof e->name, "%s", g);
    } else {
        const char *prefix = fam == TG_GPT_FAMILY_GPT2 ? "transformer.h." : "model.layers.";
        size_t np = strlen(prefix);
        char *end;
        long long l = strncmp(hf, prefix, np) == 0 ? strtoll(hf + np, &end, 10) : -1;
        if (l >= 0 && *end == '.') {
            const char *rest = end + 1;
            g = fam == TG_GPT_FAMILY_GPT2 ? lookup(gpt2_layer, rest) : NULL;
            if (!g && fam == TG_GPT_FAMILY_GEMMA3) g = lookup(gemma3_layer, rest);
            if (!g && fam != TG_GPT_FAMILY_GPT2) g = lookup(decoder_layer, rest);
            if (g) snprintf(e->name, sizeof e->name, "blk.%lld.%s", l, g);
        }
    }
    if (!g) return tg_error_status(TG_EINVAL, OP ": the tensor '%s' has no llama.cpp name for %s", hf, m->arch);
    e->how = T_NONE;
    if (fam == TG_GPT_FAMILY_GPT2 && e->src->ndim == 2 && ends_with(hf, ".weight") && strstr(hf, ".c_"))
        e->how = T_TRANSPOSE; /* Conv1D (in, out) -> (out, in) */
    if (fam == TG_GPT_FAMILY_LLAMA3 && ends_with(hf, "self_attn.q_proj.weight"))
        e->how = T_PERMUTE, e->heads = m->cfg.n_heads;
    if (fam == TG_GPT_FAMILY_LLAMA3 && ends_with(hf, "self_attn.k_proj.weight"))
        e->how = T_PERMUTE, e->heads = m->cfg.n_kv_groups;
    if (fam == TG_GPT_FAMILY_GEMMA3 && ends_with(hf, "norm.weight")) {
        e->how = T_ADD_ONE;
        e->scale = ends_with(hf, "self_attn.q_norm.weight") ? (float)gemma3_query_factor(&m->cfg) : 1.0f;
    }
    return TG_OK;
}

/* convert_hf_to_gguf's choice of a tensor's type (ModelBase.prepare_tensors). */
static uint32_t tensor_type(const entry *e, tg_export_type t)
{
    if (e->ndim <= 1 || ends_with(e->name, "_norm.weight") || !ends_with(e->name, ".weight") ||
        strcmp(e->name, "position_embd.weight") == 0)
        return GGML_F32;
    switch (t) {
    case TG_EXPORT_F32: return GGML_F32;
    case TG_EXPORT_F16: return GGML_F16;
    case TG_EXPORT_BF16: return GGML_BF16;
    case TG_EXPORT_Q8_0: return e->cols % 32 == 0 ? GGML_Q8_0 : GGML_F16; /* the converter's fallback */
    }
    return GGML_F32;
}

static uint64_t type_bytes(uint32_t type, int64_t rows, int64_t cols)
{
    uint64_t n = (uint64_t)rows * (uint64_t)cols;
    switch (type) {
    case GGML_F16:
    case GGML_BF16: return 2 * n;
    case GGML_Q8_0: return n / 32 * 34;
    default: return 4 * n;
    }
}

/* Llama 3's RoPE smoothing as the factors llama.cpp divides each frequency
 * by (LlamaModel.generate_extra_tensors, in its float32 arithmetic). */
static float *rope_factors(const tg_decoder_config *c)
{
    int64_t half = c->head_dim / 2;
    float *f = malloc(sizeof *f * (size_t)half);
    if (!f) return NULL;
    const tg_rope_freq *r = &c->rope_freq;
    float old = (float)r->original_context_length;
    float low_wavelen = old / (float)r->low_freq_factor, high_wavelen = old / (float)r->high_freq_factor;
    for (int64_t i = 0; i < half; i++) {
        float freq = 1.0f / powf((float)c->rope_base, (float)(2 * i) / (float)c->head_dim);
        float wavelen = (float)(2 * 3.14159265358979323846) / freq;
        if (wavelen < high_wavelen) {
            f[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            f[i] = (float)r->factor;
        } else {
            float smooth = (old / wavelen - (float)r->low_freq_factor) /
                           (float)(r->high_freq_factor - r->low_freq_factor);
            f[i] = 1.0f / ((1.0f - smooth) / (float)r->factor + smooth);
        }
    }
    return f;
}

/* ---- the tensors' data ---------------------------------------------------------------------------- */

/* n values of src from element off, as float32. */
static void load(const tg_tensor *src, int64_t off, int64_t n, float *dst)
{
    if (src->dtype == TG_Q8) { /* q * d (contiguous: element offsets are the blocks') */
        for (int64_t i = 0; i < n; i++) dst[i] = tg__q8_load(src, src->offset + off + i);
        return;
    }
    const char *p = (const char *)src->data + (size_t)(src->offset + off) * tg_dtype_size(src->dtype);
    if (src->dtype == TG_F32) memcpy(dst, p, sizeof *dst * (size_t)n);
    else if (src->dtype == TG_BF16) tg__bf16_to_f32_n(dst, (const uint16_t *)p, n);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = (float)tg__load_elem(src->dtype, p + (size_t)i * tg_dtype_size(src->dtype));
}

/* Rows [r0, r0 + nr) of the GGUF matrix, float32, into dst (nr * cols). */
static void gguf_rows(const entry *e, int64_t r0, int64_t nr, float *dst, float *scratch)
{
    if (!e->src) {
        memcpy(dst, e->data + r0 * e->cols, sizeof *dst * (size_t)(nr * e->cols));
        return;
    }
    switch (e->how) {
    case T_TRANSPOSE: /* src (cols, rows): GGUF row r is src's column r */
        for (int64_t c = 0; c < e->cols; c++) {
            load(e->src, c * e->rows + r0, nr, scratch);
            for (int64_t r = 0; r < nr; r++) dst[r * e->cols + c] = scratch[r];
        }
        break;
    case T_PERMUTE: { /* per head of hd rows: GGUF row 2i + j is src row j * hd / 2 + i */
        int64_t hd = e->rows / e->heads;
        for (int64_t r = r0; r < r0 + nr; r++) {
            int64_t h = r / hd, k = r % hd, from = h * hd + (k % 2) * (hd / 2) + k / 2;
            load(e->src, from * e->cols, e->cols, dst + (r - r0) * e->cols);
        }
        break;
    }
    case T_NONE:
    case T_ADD_ONE:
        load(e->src, r0 * e->cols, nr * e->cols, dst);
        if (e->how == T_ADD_ONE)
            for (int64_t i = 0; i < nr * e->cols; i++) dst[i] += 1.0f;
        if (e->how == T_ADD_ONE && e->scale != 1.0f)
            for (int64_t i = 0; i < nr * e->cols; i++) dst[i] *= e->scale;
        break;
    }
}

static void encode(uint32_t type, const float *x, int64_t n, uint8_t *out)
{
    switch (type) {
    case GGML_F32: memcpy(out, x, sizeof *x * (size_t)n); break;
    case GGML_F16:
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n >= TG_PAR_MIN)
#endif
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = tg__f16_from_f32(x[i]);
            memcpy(out + 2 * i, &h, 2);
        }
        break;
    case GGML_BF16: tg__bf16_from_f32((uint16_t *)(void *)out, x, n); break;
    case GGML_Q8_0: tg__q8_0_quantize(x, n, out); break;
    }
}

/* A q8_0 tensor written as Q8_0 (rows kept or permuted, nothing added):
 * its own blocks, row by row, so llama.cpp runs the weights tapegrad holds. */
static bool own_blocks(const entry *e) { return e->src && e->src->dtype == TG_Q8 && e->type == GGML_Q8_0 &&
                                                (e->how == T_NONE || e->how == T_PERMUTE); }

static int write_blocks(const entry *e, FILE *f)
{
    size_t row = (size_t)(e->cols / 32) * 34;
    const uint8_t *base = (const uint8_t *)e->src->data + (size_t)(e->src->offset / 32) * 34;
    int64_t hd = e->how == T_PERMUTE ? e->rows / e->heads : 1;
    for (int64_t r = 0; r < e->rows; r++) {
        int64_t from = r;
        if (e->how == T_PERMUTE) {
            int64_t h = r / hd, k = r % hd;
            from = h * hd + (k % 2) * (hd / 2) + k / 2;
        }
        if (fwrite(base + (size_t)from * row, 1, row, f) != row) return TG_EIO;
    }
    static const uint8_t zeros[ALIGN];
    size_t pad = (size_t)(-e->nbytes % ALIGN);
    return pad && fwrite(zeros, 1, pad, f) != pad ? TG_EIO : TG_OK;
}

static int write_entry(const entry *e, FILE *f)
{
    if (own_blocks(e)) return write_blocks(e, f);
    /* about 4M values a chunk; a transposed tensor whole (its columns are read once) */
    int64_t chunk = e->how == T_TRANSPOSE ? e->rows : (4 << 20) / e->cols + 1;
    if (chunk > e->rows) chunk = e->rows;
    float *x = malloc(sizeof *x * (size_t)(chunk * e->cols));
    float *scratch = malloc(sizeof *scratch * (size_t)(e->how == T_TRANSPOSE ? e->rows : 1));
    uint8_t *out = malloc((size_t)type_bytes(e->type, chunk, e->cols));
    int st = x && scratch && out ? TG_OK : tg_error_status(TG_ENOMEM, OP ": out of memory");
    for (int64_t r = 0; st == TG_OK && r < e->rows; r += chunk) {
        int64_t nr = e->rows - r < chunk ? e->rows - r : chunk;
        gguf_rows(e, r, nr, x, scratch);
        encode(e->type, x, nr * e->cols, out);
        size_t bytes = (size_t)type_bytes(e->type, nr, e->cols);
        if (fwrite(out, 1, bytes, f) != bytes) st = TG_EIO; /* the commit names the cause */
    }
    static const uint8_t zeros[ALIGN];
    size_t pad = (size_t)(-e->nbytes % ALIGN);
    if (st == TG_OK && pad && fwrite(zeros, 1, pad, f) != pad) st = TG_EIO;
    free(x);
    free(scratch);
    free(out);
    return st;
}

/* ---- the tokenizer -------------------------------------------------------------------------------- */

static const char QWEN2_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

/* tokenizer.ggml.pre: llama.cpp's name for the tokenizer.json's pre-tokenizer. */
static const char *pre_name(const json_t *tok)
{
    const json_t *pre = json_object_get(tok, "pre_tokenizer");
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (type && strcmp(type, "ByteLevel") == 0 && !json_is_false(json_object_get(pre, "use_regex"))) return "gpt-2";
    if (!type || strcmp(type, "Sequence") != 0) return NULL;
    const json_t *list = json_object_get(pre, "pretokenizers"), *split = json_array_get(list, 0);
    const char *regex = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
    const char *second = json_string_value(json_object_get(json_array_get(list, 1), "type"));
    if (json_array_size(list) != 2 || !regex || !second || strcmp(second, "ByteLevel") != 0) return NULL;
    if (strcmp(regex, QWEN2_PATTERN) == 0) return "qwen2";
    if (strcmp(regex, TG_LLAMA3_PATTERN) == 0) return "llama-bpe";
    return NULL;
}

/* does_token_look_special of convert_hf_to_gguf.py */
static bool looks_special(const char *t)
{
    size_t n = strlen(t);
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]")) return true;
    if (n >= 4 && !strncmp(t, "<|", 2) && !strcmp(t + n - 2, "|>")) return true;
    if (n >= 8 && !strncmp(t, "<\xef\xbd\x9c", 4) && !strcmp(t + n - 4, "\xef\xbd\x9c>")) return true;
    return n >= 8 && !strncmp(t, "<unused", 7) && t[n - 1] == '>';
}

static bool byte_token(const char *t)
{
    static const char hex[] = "0123456789ABCDEFabcdef";
    return strlen(t) == 6 && !strncmp(t, "<0x", 3) && t[5] == '>' && strchr(hex, t[3]) && strchr(hex, t[4]);
}

typedef struct {
    const char **text; /* per id: the token (NULL: none) */
    char **owned;      /* per id: a "[PAD{id}]" to free */
    int32_t *type;
    float *score;
} vocab_table;

static void vocab_free(vocab_table *v, int64_t n)
{
    if (v->owned)
        for (int64_t i = 0; i < n; i++) free(v->owned[i]);
    free(v->text), free(v->owned), free(v->type), free(v->score);
}

/* A merge (string "a b" or pair) as its two halves' joined text, malloc'd. */
static char *merge_joined(const json_t *m)
{
    const char *a, *b;
    size_t la, lb;
    if (json_is_string(m)) {
        a = json_string_value(m);
        const char *sp = strchr(a, ' ');
        la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
    } else {
        a = json_string_value(json_array_get(m, 0)), b = json_string_value(json_array_get(m, 1));
        la = strlen(a), lb = strlen(b);
    }
    char *s = malloc(la + lb + 1);
    if (s) memcpy(s, a, la), memcpy(s + la, b, lb), s[la + lb] = '\0';
    return s;
}

/* The tokens, types and (sentencepiece) scores of ids [0, n). */
static int vocab_build(const tg__export_tokenizer *tk, int64_t n, bool spm, vocab_table *v)
{
    v->text = calloc((size_t)n, sizeof *v->text);
    v->owned = calloc((size_t)n, sizeof *v->owned);
    v->type = malloc(sizeof *v->type * (size_t)n);
    v->score = spm ? malloc(sizeof *v->score * (size_t)n) : NULL;
    if (!v->text || !v->owned || !v->type || (spm && !v->score)) return tg_error_status(TG_ENOMEM, OP ": out of memory");
    const json_t *model = json_object_get(tk->tokenizer, "model"), *vocab = json_object_get(model, "vocab");
    const char *t;
    const json_t *id;
    for (int64_t i = 0; i < n; i++) {
        v->type[i] = TOK_UNUSED;
        if (spm) v->score[i] = 0.0f;
    }
    json_object_foreach((json_t *)vocab, t, id) {
        int64_t i = json_integer_value(id);
        v->text[i] = t, v->type[i] = spm && byte_token(t) ? TOK_BYTE : TOK_NORMAL;
    }
    if (spm) { /* a token's score: minus the rank of the first merge that makes it */
        size_t r;
        const json_t *m;
        json_array_foreach(json_object_get(model, "merges"), r, m) {
            char *joined = merge_joined(m);
            if (!joined) return tg_error_status(TG_ENOMEM, OP ": out of memory");
            const json_t *tid = json_object_get(vocab, joined);
            free(joined);
            int64_t i = tid ? json_integer_value(tid) : -1;
            if (i >= 0 && v->score[i] == 0.0f && v->type[i] == TOK_NORMAL) v->score[i] = -(float)r - 1.0f;
        }
    }
    size_t k;
    const json_t *a;
    json_array_foreach(json_object_get(tk->tokenizer, "added_tokens"), k, a) {
        int64_t i = json_integer_value(json_object_get(a, "id"));
        const char *c = json_string_value(json_object_get(a, "content"));
        if (i >= n) continue;
        bool special = json_is_true(json_object_get(a, "special")) || looks_special(c);
        v->text[i] = c, v->type[i] = special ? TOK_CONTROL : TOK_USER_DEFINED;
        if (spm && (special || v->score[i] == 0.0f)) v->score[i] = -1000.0f; /* the converter's for added tokens */
    }
    for (int64_t i = 0; i < n; i++) {
        if (v->text[i]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%lld]", (long long)i);
        if (!(v->owned[i] = malloc(strlen(pad) + 1))) return tg_error_status(TG_ENOMEM, OP ": out of memory");
        v->text[i] = strcpy(v->owned[i], pad);
        if (spm) v->score[i] = -10000.0f;
    }
    return TG_OK;
}

/* The merges as "a b"; a pair's spaces written as U+0120 (gguf-py's SpecialVocab). */
static int merges_kv(buf *b, const json_t *merges)
{
    size_t i;
    const json_t *mg;
    array_head(b, "tokenizer.ggml.merges", GGUF_STRING, json_array_size(merges));
    json_array_foreach(merges, i, mg) {
        if (json_is_string(mg)) {
            put_str(b, json_string_value(mg));
            continue;
        }
        char *joined = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&joined, &len);
        for (int p = 0; mem && p < 2; p++) {
            if (p) fputc(' ', mem);
            for (const char *c = json_string_value(json_array_get(mg, p)); *c; c++)
                if (*c == ' ') fputs("\xc4\xa0", mem);
                else fputc(*c, mem);
        }
        if (!mem || fclose(mem) != 0) {
            free(joined);
            return tg_error_status(TG_ENOMEM, OP ": out of memory");
        }
        put_strn(b, joined, len);
        free(joined);
    }
    return TG_OK;
}

/* add_bos_token: tokenizer_config.json's, else the post-processor's template
 * (a special token before the text, as SpecialVocab reads it), else
 * llama.cpp's own default (Llama 3's "llama-bpe" and SentencePiece add one). */
static bool add_bos(const tg__export_tokenizer *tk, bool bos_default)
{
    const json_t *flag = json_object_get(tk->config, "add_bos_token");
    if (json_is_boolean(flag)) return json_is_true(flag);
    const json_t *pp = json_object_get(tk->tokenizer, "post_processor");
    const json_t *procs = json_object_get(pp, "processors");
    for (size_t i = 0; pp && i < (procs ? json_array_size(procs) : 1); i++) {
        const json_t *p = procs ? json_array_get(procs, i) : pp;
        const char *type = json_string_value(json_object_get(p, "type"));
        if (type && !strcmp(type, "TemplateProcessing")) {
            const json_t *single = json_object_get(p, "single");
            return json_array_size(single) > 1 && json_object_get(json_array_get(single, 0), "SpecialToken");
        }
    }
    return bos_default;
}

/* The special ids (an id past the embedding left out, as SpecialVocab leaves
 * it), the add_* flags and the chat template. */
static void specials_kv(buf *b, const tg__export_tokenizer *tk, int64_t n_rows, bool spm, bool bos_default)
{
    /* without a BOS in the files (Qwen3's tokenizer), the <|endoftext|>
     * Qwen3's config.json names, where the converter reads it */
    int64_t bos = tk->bos >= 0 ? tk->bos : tg__export_tokenizer_id(tk, "<|endoftext|>");
    const json_t *unk = json_object_get(tk->config, "unk_token");
    if (json_is_object(unk)) unk = json_object_get(unk, "content");
    int64_t unk_id = spm && json_is_string(unk) ? tg__export_tokenizer_id(tk, json_string_value(unk)) : -1;
    const struct {
        const char *key;
        int64_t id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", bos},
        {"tokenizer.ggml.eos_token_id", tk->eos},
        /* the end of a turn, named (llama.cpp guesses it from the tokens' texts otherwise) */
        {"tokenizer.ggml.eot_token_id", tk->eot},
        {"tokenizer.ggml.unknown_token_id", unk_id},
        {"tokenizer.ggml.padding_token_id", tk->pad},
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        if (ids[i].id >= 0 && ids[i].id < n_rows) kv_u32(b, ids[i].key, (uint32_t)ids[i].id);
    kv_bool(b, "tokenizer.ggml.add_bos_token", add_bos(tk, bos_default));
    const json_t *add_eos = json_object_get(tk->config, "add_eos_token");
    if (json_is_boolean(add_eos)) kv_bool(b, "tokenizer.ggml.add_eos_token", json_is_true(add_eos));
    if (spm) kv_bool(b, "tokenizer.ggml.add_space_prefix", false);
    if (tk->chat_template) kv_str(b, "tokenizer.chat_template", tk->chat_template);
}

/* tokenizer.ggml.*: the tokenizer as the converter writes it, for n_rows ids. */
static int tokenizer_kv(buf *b, const tg__export_tokenizer *tk, int64_t n_rows)
{
    const json_t *model = json_object_get(tk->tokenizer, "model");
    bool spm = json_is_true(json_object_get(model, "byte_fallback"));
    const char *pre = spm ? "default" : pre_name(tk->tokenizer);
    if (!pre)
        return tg_error_status(TG_EINVAL, OP ": the tokenizer's pre-tokenizer is none llama.cpp names (GPT-2's "
                                          "ByteLevel, Qwen2's or Llama 3's Split pattern)");
    /* the vocabulary must fit the embedding; added tokens past it are left
     * out, as the converter leaves them (Gemma 3's <image_soft_token>, id
     * 262144, of its multimodal models) */
    int st = tg__export_tokenizer_fits(tk, n_rows, OP);
    if (st != TG_OK) return st;
    vocab_table v = {0};
    st = vocab_build(tk, n_rows, spm, &v);
    if (st == TG_OK) {
        kv_str(b, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
        kv_str(b, "tokenizer.ggml.pre", pre);
        array_head(b, "tokenizer.ggml.tokens", GGUF_STRING, (uint64_t)n_rows);
        for (int64_t i = 0; i < n_rows; i++) put_str(b, v.text[i]);
        if (spm) {
            array_head(b, "tokenizer.ggml.scores", GGUF_F32, (uint64_t)n_rows);
            for (int64_t i = 0; i < n_rows; i++) put_f32(b, v.score[i]);
        }
        array_head(b, "tokenizer.ggml.token_type", GGUF_I32, (uint64_t)n_rows);
        for (int64_t i = 0; i < n_rows; i++) put_u32(b, (uint32_t)v.type[i]);
    }
    vocab_free(&v, n_rows);
    if (st == TG_OK && !spm) st = merges_kv(b, json_object_get(model, "merges"));
    if (st == TG_OK) specials_kv(b, tk, n_rows, spm, spm || !strcmp(pre, "llama-bpe"));
    return st;
}

/* ---- the file ------------------------------------------------------------------------------------- */

/* Refuses a model with LoRA layers: their A and B are in its state_dict. */
static int refuse_lora(tg_tape *tp, const tg_module *model)
{
    tg_named_list sd;
    int st = tg_module_state_dict(tp, model, &sd);
    for (int i = 0; st == TG_OK && i < sd.n; i++)
        if (ends_with(sd.names[i], ".lora.A"))
            return tg_error_status(TG_EINVAL, OP ": the model has LoRA layers ('%.*s'): merge them first "
                                              "(tg_lora_merge)",
                                   (int)(strlen(sd.names[i]) - 7), sd.names[i]);
    return st;
}

typedef struct {
    tg_tape *tp;
    entry *e;
    int n;
    float *rope;
    tg__export_tokenizer tok;
    buf head;
} job;

static int plan(job *j, const model_info *m, const tg_module *model, int64_t *n_rows)
{
    tg_named_list sd;
    bool tied;
    int st = tg_decoder_hf_state_dict(j->tp, model, &sd, &tied);
    if (st != TG_OK) return st;
    j->e = calloc((size_t)sd.n + 1, sizeof *j->e);
    if (!j->e) return tg_error_status(TG_ENOMEM, OP ": out of memory");
    if (m->cfg.family == TG_GPT_FAMILY_LLAMA3 && m->cfg.rope_freq.factor > 0) {
        if (!(j->rope = rope_factors(&m->cfg))) return tg_error_status(TG_ENOMEM, OP ": out of memory");
        entry *e = &j->e[j->n++];
        snprintf(e->name, sizeof e->name, "rope_freqs.weight");
        e->data = j->rope, e->ndim = 1, e->rows = 1, e->cols = m->cfg.head_dim / 2;
    }
    *n_rows = 0;
    for (int i = 0; i < sd.n; i++) {
        entry *e = &j->e[j->n++];
        const tg_tensor *t = sd.tensors[i];
        e->src = t;
        if ((st = map_name(m, sd.names[i], e)) != TG_OK) return st;
        if (!tg_is_contiguous(t) || t->ndim < 1 || t->ndim > 2 ||
            (t->dtype != TG_F32 && t->dtype != TG_BF16 && t->dtype != TG_F64 && t->dtype != TG_Q8))
            return tg_error_status(TG_EINVAL, OP ": '%s' is not a contiguous float tensor of 1 or 2 dims",
                                   sd.names[i]);
        e->ndim = t->ndim;
        e->rows = t->ndim == 2 ? t->shape[e->how == T_TRANSPOSE ? 1 : 0] : 1;
        e->cols = t->ndim == 2 ? t->shape[e->how == T_TRANSPOSE ? 0 : 1] : t->shape[0];
        if (e->how == T_PERMUTE && (e->rows % e->heads || (e->rows / e->heads) % 2))
            return tg_error_status(TG_EINVAL, OP ": '%s' has %lld rows, not %lld heads of an even size", sd.names[i],
                                   (long long)e->rows, (long long)e->heads);
        if (!strcmp(e->name, "token_embd.weight")) *n_rows = e->rows;
    }
    uint64_t offset = 0;
    for (int i = 0; i < j->n; i++) {
        entry *e = &j->e[i];
        e->type = tensor_type(e, m->type);
        e->nbytes = type_bytes(e->type, e->rows, e->cols);
        e->offset = offset;
        offset += e->nbytes + (-e->nbytes % ALIGN);
    }
    return TG_OK;
}

static void tensor_infos(buf *b, const job *j)
{
    for (int i = 0; i < j->n; i++) {
        const entry *e = &j->e[i];
        put_str(b, e->name);
        put_u32(b, (uint32_t)e->ndim);
        put_u64(b, (uint64_t)e->cols); /* ne[0]: the row length */
        if (e->ndim == 2) put_u64(b, (uint64_t)e->rows);
        put_u32(b, e->type);
        put_u64(b, e->offset);
    }
}

static int build(job *j, tg_module *model, const tg_export_options *opt)
{
    model_info m = {.type = opt->type};
    tg_decoder_config cfg;
    if (!tg_export_type_name(opt->type))
        return tg_error_status(TG_EINVAL, OP ": unknown type %d (f32, f16, bf16 or q8_0)", (int)opt->type);
    if (tg_decoder_get_config(model, &cfg) != TG_OK)
        return tg_error_status(TG_EINVAL, OP ": the model is a %s, not a decoder (tg_decoder_new)",
                               tg_module_type_name(model));
    int st = tg_decoder_config_resolve(&cfg, &m.cfg);
    if (st != TG_OK) return st;
    m.arch = arch_name(m.cfg.family);
    if (!m.arch) return tg_error_status(TG_EINVAL, OP ": unknown family %d", (int)m.cfg.family);
    m.name = opt->name ? opt->name : tg_decoder_family_name(m.cfg.family);
    if ((st = refuse_lora(j->tp, model)) != TG_OK || (st = check_llama_cpp(&m)) != TG_OK) return st;
    int64_t n_rows = 0;
    if ((st = plan(j, &m, model, &n_rows)) != TG_OK) return st;
    if ((st = tg__export_tokenizer_load(opt->tokenizer, m.cfg.family, &j->tok)) != TG_OK) return st;
    /* the header: kv pairs (counted as written), then the tensor infos */
    buf kv = {0};
    model_kv(&kv, &m);
    st = tokenizer_kv(&kv, &j->tok, n_rows);
    if (st == TG_OK) {
        put(&j->head, "GGUF", 4);
        put_u32(&j->head, 3);
        put_u64(&j->head, (uint64_t)j->n);
        put_u64(&j->head, kv.n_kv);
        put(&j->head, kv.p, kv.n);
        tensor_infos(&j->head, j);
        static const uint8_t zeros[ALIGN];
        put(&j->head, zeros, (size_t)(-j->head.n % ALIGN));
        if (kv.oom || j->head.oom) st = tg_error_status(TG_ENOMEM, OP ": out of memory");
    }
    free(kv.p);
    return st;
}

int tg_export_gguf(tg_module *model, const char *path, const tg_export_options *opt)
{
    static const tg_export_options defaults = {0};
    if (!opt) opt = &defaults;
    if (!model || !path) return tg_error_status(TG_EINVAL, OP ": NULL %s", model ? "path" : "model");
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1)
        return tg_error_status(TG_EINVAL, OP ": GGUF files are little-endian; this machine is not");
    job j = {.tp = tg_tape_new()};
    if (!j.tp) return tg_error_status(TG_ENOMEM, OP ": out of memory");
    int st = build(&j, model, opt);
    tg__export_file out;
    if (st == TG_OK) st = tg__export_file_begin(&out, path, OP);
    if (st == TG_OK) {
        if (fwrite(j.head.p, 1, j.head.n, out.f) != j.head.n) st = TG_EIO;
        for (int i = 0; st == TG_OK && i < j.n; i++) st = write_entry(&j.e[i], out.f);
        if (st == TG_EIO) st = TG_OK; /* a failed write: the commit checks and names it */
        if (st == TG_OK) st = tg__export_file_commit(&out);
        else tg__export_file_abort(&out);
    }
    free(j.head.p);
    free(j.e);
    free(j.rope);
    tg__export_tokenizer_free(&j.tok);
    tg_tape_free(j.tp);
    return st;
}
