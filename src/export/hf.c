/* A decoder as a Hugging Face folder, as save_pretrained writes one for the
 * family's class (GPT2LMHeadModel, Qwen3ForCausalLM, LlamaForCausalLM,
 * Gemma3ForCausalLM):
 *
 *   config.json                   the class's fields (json.dumps(indent=2,
 *                                 sort_keys=True) + "\n", as transformers)
 *   generation_config.json        the special ids
 *   model.safetensors             the weights under Hugging Face's names
 *                                 (tg_decoder_hf_state_dict), __metadata__
 *                                 {"format": "pt"}; or, past max_shard_size,
 *   model-0000K-of-0000N.safetensors + model.safetensors.index.json
 *                                 (huggingface_hub's split: tensors in order,
 *                                 a new shard when the next would pass the
 *                                 size, a tensor larger than it alone)
 *   tokenizer.json, tokenizer_config.json  the source's bytes where it has
 *                                 the file, else the objects written out
 *
 * or, for a model with LoRA layers and opt->adapter, PEFT's
 * adapter_config.json and adapter_model.safetensors
 * (tg_decoder_peft_state_dict) with the tokenizer's files. Everything is
 * written into a temporary folder beside dir and renamed into place at the
 * end (atomic.c). */
#include "export_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const OP = "export_hf";

/* save_pretrained's default max_shard_size ("5GB") */
#define DEFAULT_SHARD_SIZE ((int64_t)5000000000)

/* ---- JSON as Python's json.dumps(indent=2) writes it ------------------------------------------- */

/* Python's and serde_json's pretty printing differ from jansson's in the
 * numbers (repr's shortest round trip: 1e-06, 500000.0) and the escapes
 * (lowercase \u00XX); the same writer serves config.json (sorted keys,
 * ASCII), tokenizer_config.json (sorted, UTF-8) and tokenizer.json (in
 * order, UTF-8). */
enum { JS_SORT = 1, JS_ASCII = 2 };

/* repr(v) for a finite double: the shortest digits that read back as v,
 * fixed notation for decimal exponents -4 < decpt <= 16, else d.ddde+XX. */
static void js_real(tg__strbuf *b, double v)
{
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* buf: [-]d[.ddd]e(+|-)XX */
    const char *s = buf;
    if (*s == '-') tg__sb_puts(b, "-"), s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.' && nd < (int)sizeof digits - 1) digits[nd++] = *s;
    int decpt = (*s == 'e' ? atoi(s + 1) : 0) + 1;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char out[64];
    int k = 0;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) { /* 0.000ddd */
            out[k++] = '0', out[k++] = '.';
            for (int i = 0; i < -decpt; i++) out[k++] = '0';
            for (int i = 0; i < nd; i++) out[k++] = digits[i];
        } else if (decpt >= nd) { /* ddd000.0 */
            for (int i = 0; i < decpt; i++) out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.', out[k++] = '0';
        } else { /* dd.ddd */
            for (int i = 0; i < nd; i++) {
                if (i == decpt) out[k++] = '.';
                out[k++] = digits[i];
            }
        }
        out[k] = '\0';
    } else { /* d.ddde+XX */
        snprintf(out, sizeof out, "%c%s%se%+03d", digits[0], nd > 1 ? "." : "", digits + 1, decpt - 1);
    }
    tg__sb_puts(b, out);
}

/* A string as Python's json (ensure_ascii: \uXXXX, surrogate pairs beyond
 * the BMP) or serde_json writes it. */
static void js_string(tg__strbuf *b, const char *s, size_t len, bool ascii)
{
    tg__sb_putn(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    char esc[16];
    while (p < end) {
        unsigned c = *p;
        const char *named = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (named) {
            tg__sb_puts(b, named);
            p++;
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            tg__sb_puts(b, esc);
            p++;
        } else if (c < 0x80 || !ascii) {
            tg__sb_putn(b, (const char *)p, 1);
            p++;
        } else {
            /* a UTF-8 sequence (jansson checked it on the way in) */
            int n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
            uint32_t cp = c & (n == 4 ? 0x07u : n == 3 ? 0x0fu : 0x1fu);
            for (int k = 1; k < n && p + k < end; k++) cp = cp << 6 | (p[k] & 0x3fu);
            p += n;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800u + (cp >> 10), 0xdc00u + (cp & 0x3ffu));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            tg__sb_puts(b, esc);
        }
    }
    tg__sb_putn(b, "\"", 1);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static void js_newline(tg__strbuf *b, int depth)
{
    tg__sb_putn(b, "\n", 1);
    tg__sb_spaces(b, 2 * depth);
}

static void js_value(tg__strbuf *b, const json_t *v, int depth, unsigned flags)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v), i = 0;
        if (n == 0) {
            tg__sb_puts(b, "{}");
            return;
        }
        const char **keys = malloc(n * sizeof *keys);
        if (!keys) {
            b->failed = true;
            return;
        }
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) keys[i++] = k;
        /* Python sorts by code point: UTF-8's byte order */
        if (flags & JS_SORT) qsort(keys, n, sizeof *keys, cmp_cstr);
        tg__sb_puts(b, "{");
        for (i = 0; i < n; i++) {
            js_newline(b, depth + 1);
            js_string(b, keys[i], strlen(keys[i]), flags & JS_ASCII);
            tg__sb_puts(b, ": ");
            js_value(b, json_object_get(v, keys[i]), depth + 1, flags);
            if (i + 1 < n) tg__sb_puts(b, ",");
        }
        free(keys);
        js_newline(b, depth);
        tg__sb_puts(b, "}");
        return;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (n == 0) {
            tg__sb_puts(b, "[]");
            return;
        }
        tg__sb_puts(b, "[");
        for (size_t i = 0; i < n; i++) {
            js_newline(b, depth + 1);
            js_value(b, json_array_get(v, i), depth + 1, flags);
            if (i + 1 < n) tg__sb_puts(b, ",");
        }
        js_newline(b, depth);
        tg__sb_puts(b, "]");
        return;
    }
    case JSON_STRING: js_string(b, json_string_value(v), json_string_length(v), flags & JS_ASCII); return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        tg__sb_puts(b, num);
        return;
    case JSON_REAL: js_real(b, json_real_value(v)); return;
    case JSON_TRUE: tg__sb_puts(b, "true"); return;
    case JSON_FALSE: tg__sb_puts(b, "false"); return;
    case JSON_NULL: tg__sb_puts(b, "null"); return;
    }
}

/* ---- files in the folder ------------------------------------------------------------------------- */

/* name in d's folder: n bytes at p, then (when src is given) the rest of
 * the file src's bytes. */
static int write_file(const tg__export_dir *d, const char *name, const void *p, size_t n, const char *src)
{
    char *path = tg__export_dir_path(d, name);
    if (!path) return tg_error_status(TG_ENOMEM, "%s: out of memory", OP);
    tg__export_file o;
    int st = tg__export_file_begin(&o, path, OP);
    free(path);
    if (st != TG_OK) return st;
    FILE *in = NULL;
    if (n > 0 && fwrite(p, 1, n, o.f) != n) {
        /* the reason comes back from commit's checks */
    } else if (src && !(in = fopen(src, "rb"))) {
        st = tg_error_status(TG_EIO, "%s: cannot read '%s': %s", OP, src, strerror(errno));
    } else if (in) {
        char buf[1 << 16];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, got, o.f) != got) break;
        if (ferror(in)) st = tg_error_status(TG_EIO, "%s: cannot read '%s': %s", OP, src, strerror(errno));
        fclose(in);
    }
    if (st != TG_OK) {
        tg__export_file_abort(&o);
        return st;
    }
    return tg__export_file_commit(&o);
}

/* v written as name: Python's json.dumps(v, indent=2, ...) with flags, and a
 * newline after it when newline (transformers adds one, PEFT and
 * tokenizers do not). */
static int write_json(const tg__export_dir *d, const char *name, const json_t *v, unsigned flags, bool newline)
{
    if (!v) return tg_error_status(TG_ENOMEM, "%s: out of memory building %s", OP, name);
    tg__strbuf b = {0};
    js_value(&b, v, 0, flags);
    if (newline) tg__sb_puts(&b, "\n");
    int st = b.failed || !b.s ? tg_error_status(TG_ENOMEM, "%s: out of memory writing %s", OP, name)
                              : write_file(d, name, b.s, b.len, NULL);
    free(b.s);
    return st;
}

/* ---- building JSON objects ----------------------------------------------------------------------- */

/* Fields set one by one; a failed allocation anywhere leaves the object
 * incomplete and ok false. */
typedef struct {
    json_t *o;
    bool ok;
} obj;

static void put(obj *j, const char *key, json_t *v)
{
    if (!v || json_object_set_new(j->o, key, v) != 0) j->ok = false;
}
static void put_int(obj *j, const char *key, int64_t v) { put(j, key, json_integer((json_int_t)v)); }
static void put_real(obj *j, const char *key, double v) { put(j, key, json_real(v)); }
static void put_str(obj *j, const char *key, const char *v) { put(j, key, json_string(v)); }
static void put_bool(obj *j, const char *key, bool v) { put(j, key, json_boolean(v)); }
static void put_null(obj *j, const char *key) { put(j, key, json_null()); }
/* an id, or null for none (-1) */
static void put_id(obj *j, const char *key, int64_t id) { put(j, key, id >= 0 ? json_integer(id) : json_null()); }

static obj obj_new(void)
{
    json_t *o = json_object();
    return (obj){o, o != NULL};
}

/* The object, or NULL (freed) when a field could not be set. */
static json_t *obj_done(obj *j)
{
    if (!j->ok) {
        json_decref(j->o);
        return NULL;
    }
    return j->o;
}

static const char *torch_dtype(tg_export_type t)
{
    return t == TG_EXPORT_F16 ? "float16" : t == TG_EXPORT_BF16 ? "bfloat16" : "float32";
}

/* A number as the originals hold it: an int when whole (Gemma 3's
 * query_pre_attn_scalar, PEFT's lora_alpha). */
static json_t *json_number_of(double v)
{
    return v == floor(v) && fabs(v) < 9e15 ? json_integer((json_int_t)v) : json_real(v);
}

/* ---- config.json ----------------------------------------------------------------------------------- */

/* The fields the Qwen3, Llama and Gemma 3 classes share. */
static void decoder_fields(obj *j, const tg_decoder_config *r)
{
    put_bool(j, "attention_bias", false);
    put_real(j, "attention_dropout", 0.0);
    put_int(j, "head_dim", r->head_dim);
    put_int(j, "hidden_size", r->emb_dim);
    put_real(j, "initializer_range", 0.02);
    put_int(j, "intermediate_size", r->hidden_dim);
    put_int(j, "max_position_embeddings", r->context_length);
    put_int(j, "num_attention_heads", r->n_heads);
    put_int(j, "num_hidden_layers", r->n_layers);
    put_int(j, "num_key_value_heads", r->n_kv_groups);
    put_real(j, "rms_norm_eps", r->norm_eps);
    put_real(j, "rope_theta", r->rope_base);
    put_bool(j, "use_cache", true);
}

static bool layer_sliding(const tg_decoder_config *r, int64_t i)
{
    return i < TG_DECODER_MAX_LAYER_TYPES && r->layer_types[i] == TG_LAYER_SLIDING;
}

/* Gemma 3's layer_types, and the older sliding_window_pattern N (every Nth
 * layer full) when the layers follow one: the first full layer's number,
 * every later one at its multiples. 0: no such pattern. */
static int64_t gemma_pattern(const tg_decoder_config *r)
{
    int64_t every = 0;
    for (int64_t i = 0; i < r->n_layers && !every; i++)
        if (!layer_sliding(r, i)) every = i + 1;
    for (int64_t i = 0; every && i < r->n_layers; i++)
        if (layer_sliding(r, i) != ((i + 1) % every != 0)) every = 0;
    return every;
}

/* Each family's fields; the class's name returned. */
static const char *gpt2_fields(obj *j, const tg_decoder_config *r, const tg__export_tokenizer *tok)
{
    (void)tok; /* GPT2Config: openai-community/gpt2's config.json */
    put_str(j, "activation_function", "gelu_new");
    put_real(j, "attn_pdrop", r->drop_rate);
    put_real(j, "embd_pdrop", r->drop_rate);
    put_real(j, "resid_pdrop", r->drop_rate);
    put_real(j, "initializer_range", 0.02);
    put_real(j, "layer_norm_epsilon", r->norm_eps);
    put_str(j, "model_type", "gpt2");
    put_int(j, "n_ctx", r->context_length);
    put_int(j, "n_positions", r->context_length);
    put_int(j, "n_embd", r->emb_dim);
    put_int(j, "n_head", r->n_heads);
    put_int(j, "n_layer", r->n_layers);
    if (r->hidden_dim == 4 * r->emb_dim)
        put_null(j, "n_inner");
    else
        put_int(j, "n_inner", r->hidden_dim);
    put_bool(j, "reorder_and_upcast_attn", false);
    put_bool(j, "scale_attn_by_inverse_layer_idx", false);
    put_bool(j, "scale_attn_weights", true);
    put_bool(j, "use_cache", true);
    return "GPT2LMHeadModel";
}

static const char *qwen3_fields(obj *j, const tg_decoder_config *r, const tg__export_tokenizer *tok)
{
    (void)tok; /* Qwen/Qwen3-0.6B's */
    decoder_fields(j, r);
    put_str(j, "hidden_act", "silu");
    put_int(j, "max_window_layers", r->n_layers);
    put_str(j, "model_type", "qwen3");
    put_null(j, "rope_scaling");
    put_null(j, "sliding_window");
    put_bool(j, "use_sliding_window", false);
    return "Qwen3ForCausalLM";
}

static const char *llama_fields(obj *j, const tg_decoder_config *r, const tg__export_tokenizer *tok)
{
    (void)tok; /* meta-llama/Llama-3.2-1B's */
    decoder_fields(j, r);
    put_str(j, "hidden_act", "silu");
    put_bool(j, "mlp_bias", false);
    put_str(j, "model_type", "llama");
    put_int(j, "pretraining_tp", 1);
    if (r->rope_freq.factor > 0) {
        obj rs = obj_new();
        put_real(&rs, "factor", r->rope_freq.factor);
        put_real(&rs, "high_freq_factor", r->rope_freq.high_freq_factor);
        put_real(&rs, "low_freq_factor", r->rope_freq.low_freq_factor);
        put_int(&rs, "original_max_position_embeddings", r->rope_freq.original_context_length);
        put_str(&rs, "rope_type", "llama3");
        put(j, "rope_scaling", rs.o ? obj_done(&rs) : NULL);
    } else {
        put_null(j, "rope_scaling");
    }
    return "LlamaForCausalLM";
}

static const char *gemma3_fields(obj *j, const tg_decoder_config *r, const tg__export_tokenizer *tok)
{
    decoder_fields(j, r); /* google/gemma-3-270m's */
    put_null(j, "attn_logit_softcapping");
    put_null(j, "final_logit_softcapping");
    put_str(j, "hidden_activation", "gelu_pytorch_tanh");
    json_t *lt = json_array();
    for (int64_t i = 0; lt && i < r->n_layers; i++)
        if (json_array_append_new(lt, json_string(layer_sliding(r, i) ? "sliding_attention" : "full_attention")))
            j->ok = false;
    put(j, "layer_types", lt);
    int64_t every = gemma_pattern(r);
    if (every > 0) put_int(j, "_sliding_window_pattern", every);
    put_str(j, "model_type", "gemma3_text");
    put_id(j, "pad_token_id", tok->pad);
    put(j, "query_pre_attn_scalar", json_number_of(r->query_pre_attn_scalar));
    put_real(j, "rope_local_base_freq", r->rope_local_base);
    put_null(j, "rope_scaling");
    put_int(j, "sliding_window", r->sliding_window);
    put_bool(j, "use_bidirectional_attention", false);
    return "Gemma3ForCausalLM";
}

static json_t *config_json(const tg_decoder_config *r, bool tied, const tg__export_tokenizer *tok, tg_export_type type)
{
    static const char *(*const fields[])(obj *, const tg_decoder_config *, const tg__export_tokenizer *) = {
        [TG_GPT_FAMILY_GPT2] = gpt2_fields,
        [TG_GPT_FAMILY_QWEN3] = qwen3_fields,
        [TG_GPT_FAMILY_LLAMA3] = llama_fields,
        [TG_GPT_FAMILY_GEMMA3] = gemma3_fields,
    };
    obj j = obj_new();
    if (!j.o) return NULL;
    const char *arch = fields[r->family](&j, r, tok);
    json_t *archs = json_array();
    if (!archs || json_array_append_new(archs, json_string(arch)) != 0) j.ok = false;
    put(&j, "architectures", archs);
    put_id(&j, "bos_token_id", tok->bos);
    put_id(&j, "eos_token_id", tok->eos);
    put_bool(&j, "tie_word_embeddings", tied);
    put_str(&j, "torch_dtype", torch_dtype(type));
    put_int(&j, "vocab_size", r->vocab_size);
    return obj_done(&j);
}

/* generation_config.json: the ids generation starts, stops and pads with
 * (the family's originals list the end of turn after the end of text). */
static json_t *generation_json(const tg__export_tokenizer *tok)
{
    obj j = obj_new();
    if (!j.o) return NULL;
    if (tok->bos >= 0) put_int(&j, "bos_token_id", tok->bos);
    if (tok->eos >= 0 && tok->eot >= 0 && tok->eot != tok->eos) {
        json_t *e = json_array();
        if (!e || json_array_append_new(e, json_integer(tok->eos)) || json_array_append_new(e, json_integer(tok->eot)))
            j.ok = false;
        put(&j, "eos_token_id", e);
    } else if (tok->eos >= 0 || tok->eot >= 0) {
        put_int(&j, "eos_token_id", tok->eos >= 0 ? tok->eos : tok->eot);
    }
    if (tok->pad >= 0) put_int(&j, "pad_token_id", tok->pad);
    return obj_done(&j);
}

/* ---- the weights ------------------------------------------------------------------------------------ */

/* Element conversions into the file's dtype (safetensors.c's writer calls
 * them on staged runs of contiguous elements). */
static void f32_to_f16(void *dst, const void *src, int64_t n)
{
    const float *s = src;
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = tg__f16_from_f32(s[i]);
}
static void f32_to_bf16(void *dst, const void *src, int64_t n) { tg__bf16_from_f32(dst, src, n); }
static void bf16_to_f32(void *dst, const void *src, int64_t n) { tg__bf16_to_f32_n(dst, src, n); }
static void bf16_to_f16(void *dst, const void *src, int64_t n)
{
    const uint16_t *s = src;
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = tg__f16_from_f32(tg__bf16_to_f32(s[i])); /* widened exactly first */
}

/* How tensor t is written as type: the file's dtype and the conversion
 * (NULL: its own bytes). */
static int item_of(const char *name, const tg_tensor *t, tg_export_type type, tg__safetensors_item *it)
{
    static const char *const names[] = {"F32", "F16", "BF16"};
    tg__safetensors_convert conv = NULL;
    if (t->dtype == TG_F32)
        conv = type == TG_EXPORT_F16 ? f32_to_f16 : type == TG_EXPORT_BF16 ? f32_to_bf16 : NULL;
    else if (t->dtype == TG_BF16)
        conv = type == TG_EXPORT_F32 ? bf16_to_f32 : type == TG_EXPORT_F16 ? bf16_to_f16 : NULL;
    else
        return tg_error_status(TG_EINVAL, "%s: tensor '%s' is %s, not float32 or bfloat16", OP, name,
                               tg_dtype_name(t->dtype));
    *it = (tg__safetensors_item){name, t, names[type], conv};
    return TG_OK;
}

static const char *const ST_META[] = {"format", "pt"};

/* The list as one safetensors file name in d's folder. */
static int write_safetensors(const tg__export_dir *d, const char *name, int n, const tg__safetensors_item *items)
{
    char *path = tg__export_dir_path(d, name);
    if (!path) return tg_error_status(TG_ENOMEM, "%s: out of memory", OP);
    int st = tg__safetensors_write(path, n, items, 1, ST_META);
    free(path);
    return st;
}

/* huggingface_hub's split_torch_state_dict_into_shards: each tensor, in
 * order, to a shard (shard[i]), a new one when the next tensor would take
 * the one being filled past max bytes, a tensor larger than max alone.
 * Shards are numbered (number[k], from 0) in the order they are closed: a
 * large tensor's at once, before the one being filled. Returns the count
 * (0 without tensors); closed has room for n + 1. */
static int plan_shards(int n, const int64_t *size, int64_t max, int *shard, int *number, int *closed)
{
    int n_shards = 0, current = -1, n_closed = 0;
    int64_t filled = 0;
    for (int i = 0; i < n; i++) {
        if (size[i] > max) {
            shard[i] = n_shards++;
            closed[n_closed++] = shard[i];
            continue;
        }
        if (current >= 0 && filled + size[i] > max) closed[n_closed++] = current, current = -1;
        if (current < 0) current = n_shards++, filled = 0;
        shard[i] = current;
        filled += size[i];
    }
    if (current >= 0) closed[n_closed++] = current;
    for (int k = 0; k < n_closed; k++) number[closed[k]] = k;
    return n_shards;
}

/* The shards model-0000K-of-0000N.safetensors and
 * model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}). */
static int write_shards(const tg__export_dir *d, const tg_named_list *list, const tg__safetensors_item *items,
                        const int *shard, const int *number, int n_shards, int64_t total)
{
    int n = list->n, st = TG_OK;
    tg__safetensors_item *sub = malloc(sizeof *sub * (size_t)(n ? n : 1));
    json_t *map = json_object();
    if (!sub || !map) st = tg_error_status(TG_ENOMEM, "%s: out of memory", OP);
    for (int k = 0; st == TG_OK && k < n_shards; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", number[k] + 1, n_shards);
        int m = 0;
        for (int i = 0; st == TG_OK && i < n; i++)
            if (shard[i] == k) {
                sub[m++] = items[i];
                if (json_object_set_new(map, list->names[i], json_string(name)) != 0)
                    st = tg_error_status(TG_ENOMEM, "%s: out of memory", OP);
            }
        if (st == TG_OK) st = write_safetensors(d, name, m, sub);
    }
    free(sub);
    if (st != TG_OK) {
        json_decref(map);
        return st;
    }
    obj idx = obj_new(), meta = obj_new();
    put_int(&meta, "total_size", total);
    put(&idx, "metadata", meta.o ? obj_done(&meta) : NULL);
    put(&idx, "weight_map", map);
    json_t *v = idx.o ? obj_done(&idx) : NULL;
    st = write_json(d, "model.safetensors.index.json", v, JS_SORT | JS_ASCII, true);
    json_decref(v);
    return st;
}

/* The weights in type: model.safetensors, or shards and their index when
 * they pass max_shard bytes. */
static int write_weights(const tg__export_dir *d, const tg_named_list *list, tg_export_type type, int64_t max_shard)
{
    int n = list->n, st = TG_OK;
    size_t slots = (size_t)n + 1;
    tg__safetensors_item *items = malloc(sizeof *items * slots);
    int64_t *size = malloc(sizeof *size * slots), total = 0;
    int *shard = malloc(sizeof *shard * slots), *number = malloc(sizeof *number * slots),
        *closed = malloc(sizeof *closed * slots);
    if (!items || !size || !shard || !number || !closed) st = tg_error_status(TG_ENOMEM, "%s: out of memory", OP);
    for (int i = 0; st == TG_OK && i < n; i++) {
        st = item_of(list->names[i], list->tensors[i], type, &items[i]);
        size[i] = tg_numel(list->tensors[i]) * (type == TG_EXPORT_F32 ? 4 : 2);
        total += size[i];
    }
    int n_shards = st == TG_OK ? plan_shards(n, size, max_shard, shard, number, closed) : 0;
    if (st == TG_OK && n_shards <= 1)
        st = write_safetensors(d, "model.safetensors", n, items);
    else if (st == TG_OK)
        st = write_shards(d, list, items, shard, number, n_shards, total);
    free(items), free(size), free(shard), free(number), free(closed);
    return st;
}

/* ---- PEFT's adapter --------------------------------------------------------------------------------- */

static json_t *adapter_json(const tg_peft_info *info, const char *base)
{
    obj j = obj_new();
    if (!j.o) return NULL;
    obj rank = obj_new(), alpha = obj_new();
    if (info->fused) { /* GPT-2's c_attn: three adapters in one, of rank 3 r, scale alpha / r */
        put_int(&rank, info->fused, 3 * info->rank);
        put(&alpha, info->fused, json_number_of(3 * info->alpha));
    }
    put(&j, "alpha_pattern", alpha.o ? obj_done(&alpha) : NULL);
    put_null(&j, "auto_mapping");
    put(&j, "base_model_name_or_path", base ? json_string(base) : json_null());
    put_str(&j, "bias", "none");
    put_bool(&j, "fan_in_fan_out", info->fan_in_fan_out);
    put_bool(&j, "inference_mode", true);
    put_bool(&j, "init_lora_weights", true);
    put_null(&j, "layers_pattern");
    put_null(&j, "layers_to_transform");
    put(&j, "lora_alpha", json_number_of(info->alpha));
    put_real(&j, "lora_dropout", 0.0);
    put_null(&j, "modules_to_save");
    put_str(&j, "peft_type", "LORA");
    put_int(&j, "r", info->rank);
    put(&j, "rank_pattern", rank.o ? obj_done(&rank) : NULL);
    put_null(&j, "revision");
    /* target_modules: a set in PEFT, written sorted */
    const char **t = malloc(sizeof *t * (size_t)(info->n_targets ? info->n_targets : 1));
    json_t *targets = json_array();
    if (!t || !targets) j.ok = false;
    for (int i = 0; t && i < info->n_targets; i++) t[i] = info->targets[i];
    if (t) qsort(t, (size_t)info->n_targets, sizeof *t, cmp_cstr);
    for (int i = 0; t && targets && i < info->n_targets; i++)
        if (json_array_append_new(targets, json_string(t[i])) != 0) j.ok = false;
    free(t);
    put(&j, "target_modules", targets);
    put_str(&j, "task_type", "CAUSAL_LM");
    put_bool(&j, "use_dora", false);
    put_bool(&j, "use_rslora", false);
    return obj_done(&j);
}

/* The Hugging Face repository of the preset the model has the sizes of
 * (its base model's name); NULL for none. */
static const char *hub_name(const tg_decoder_config *r)
{
    static const char *const hub[][2] = {
        {"gpt2-small", "openai-community/gpt2"},   {"gpt2-medium", "openai-community/gpt2-medium"},
        {"gpt2-large", "openai-community/gpt2-large"}, {"gpt2-xl", "openai-community/gpt2-xl"},
        {"qwen3-0.6b", "Qwen/Qwen3-0.6B"},         {"qwen3-1.7b", "Qwen/Qwen3-1.7B"},
        {"qwen3-4b", "Qwen/Qwen3-4B"},             {"qwen3-8b", "Qwen/Qwen3-8B"},
        {"llama3.2-1b", "meta-llama/Llama-3.2-1B"}, {"llama3.2-3b", "meta-llama/Llama-3.2-3B"},
        {"gemma3-270m", "google/gemma-3-270m"},
    };
    for (size_t i = 0; i < sizeof hub / sizeof hub[0]; i++) {
        tg_decoder_config p;
        if (tg_decoder_config_preset(hub[i][0], &p) != TG_OK || tg_decoder_config_resolve(&p, &p) != TG_OK) continue;
        if (p.family == r->family && p.vocab_size == r->vocab_size && p.emb_dim == r->emb_dim &&
            p.n_heads == r->n_heads && p.n_layers == r->n_layers && p.hidden_dim == r->hidden_dim &&
            p.n_kv_groups == r->n_kv_groups && p.head_dim == r->head_dim)
            return hub[i][1];
    }
    return NULL;
}

/* ---- the tokenizer ------------------------------------------------------------------------------------ */

/* tokenizer.json and tokenizer_config.json: the files the tokenizer was
 * read from, byte for byte (a tokenizer_config.json only when it holds
 * what tok->config holds), else tok's objects as the tokenizers library
 * (in order) and transformers (sorted keys, a newline after) write them. */
static int write_tokenizer(const tg__export_dir *d, const tg__export_tokenizer *tok)
{
    int st = tok->json_path ? write_file(d, "tokenizer.json", NULL, 0, tok->json_path)
                            : write_json(d, "tokenizer.json", tok->tokenizer, 0, false);
    if (st != TG_OK) return st;
    /* read as the tokenizer's reader reads it: an integer past 64 bits
     * (Llama 3's model_max_length) as a real, so that such a file is still
     * copied as it is, its other integers integers */
    json_t *beside = NULL;
    if (tok->config_path) {
        json_error_t err;
        beside = json_load_file(tok->config_path, 0, &err);
        if (!beside && strstr(err.text, "too big integer"))
            beside = json_load_file(tok->config_path, JSON_DECODE_INT_AS_REAL, NULL);
    }
    if (beside && json_equal(beside, tok->config))
        st = write_file(d, "tokenizer_config.json", NULL, 0, tok->config_path);
    else
        st = write_json(d, "tokenizer_config.json", tok->config, JS_SORT, true);
    json_decref(beside);
    return st;
}

/* ---- the folder ---------------------------------------------------------------------------------------- */

/* The options checked, defaults applied. */
static int check_options(const tg_export_options *opt, tg_export_options *o)
{
    *o = opt ? *opt : (tg_export_options){0};
    if (o->type == TG_EXPORT_Q8_0)
        return tg_error_status(TG_EINVAL,
                               "%s: q8_0 is a GGUF type (tg_export_gguf); a Hugging Face folder holds f32, f16 or "
                               "bf16 weights",
                               OP);
    if (o->type != TG_EXPORT_F32 && o->type != TG_EXPORT_F16 && o->type != TG_EXPORT_BF16)
        return tg_error_status(TG_EINVAL, "%s: unknown weight type %d (f32, f16 or bf16)", OP, (int)o->type);
    if (o->max_shard_size < 0)
        return tg_error_status(TG_EINVAL, "%s: max_shard_size must be > 0 (0: 5 GB), got %lld", OP,
                               (long long)o->max_shard_size);
    if (o->max_shard_size == 0) o->max_shard_size = DEFAULT_SHARD_SIZE;
    return TG_OK;
}

/* What goes in the folder: the model's or the adapter's files, then the tokenizer's. */
static int write_folder(const tg__export_dir *d, const tg_export_options *o, const tg_decoder_config *r,
                        const tg_named_list *list, bool tied, const tg_peft_info *peft,
                        const tg__export_tokenizer *tok)
{
    int st;
    if (o->adapter) {
        json_t *ac = adapter_json(peft, o->name ? o->name : hub_name(r));
        st = write_json(d, "adapter_config.json", ac, JS_SORT | JS_ASCII, false);
        json_decref(ac);
        tg__safetensors_item *items = malloc(sizeof *items * (size_t)(list->n ? list->n : 1));
        if (st == TG_OK && !items) st = tg_error_status(TG_ENOMEM, "%s: out of memory", OP);
        for (int i = 0; st == TG_OK && i < list->n; i++)
            st = item_of(list->names[i], list->tensors[i], o->type, &items[i]);
        if (st == TG_OK) st = write_safetensors(d, "adapter_model.safetensors", list->n, items);
        free(items);
    } else {
        json_t *cfg = config_json(r, tied, tok, o->type), *gen = generation_json(tok);
        st = write_json(d, "config.json", cfg, JS_SORT | JS_ASCII, true);
        if (st == TG_OK) st = write_json(d, "generation_config.json", gen, JS_SORT | JS_ASCII, true);
        json_decref(cfg), json_decref(gen);
        if (st == TG_OK) st = write_weights(d, list, o->type, o->max_shard_size);
    }
    if (st == TG_OK) st = write_tokenizer(d, tok);
    return st;
}

/* The last error (status st) naming the folder's files by their final
 * paths, not by the temporary folder's they were written under. */
static int name_target(const tg__export_dir *d, int st)
{
    const char *msg = tg_last_error(), *at = msg && d->tmp ? strstr(msg, d->tmp) : NULL;
    if (!at) return st;
    char buf[1024];
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - msg), msg, d->dir, at + strlen(d->tmp));
    return tg_error_status(st, "%s", buf);
}

int tg_export_hf(tg_module *model, const char *dir, const tg_export_options *opt)
{
    if (!model || !dir) return tg_error_status(TG_EINVAL, "%s: NULL %s", OP, model ? "folder" : "model");
    tg_export_options o;
    int st = check_options(opt, &o);
    if (st != TG_OK) return st;
    tg_decoder_config cfg, r;
    if (tg_decoder_get_config(model, &cfg) != TG_OK)
        return tg_error_status(TG_EINVAL, "%s: the model is a %s, not a decoder (tg_decoder_new)", OP,
                               tg_module_type_name(model));
    if (tg_decoder_config_resolve(&cfg, &r) != TG_OK) return TG_EINVAL;

    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_error_status(TG_ENOMEM, "%s: out of memory", OP);
    /* the weights under Hugging Face's names: every refusal of what the
     * family's class cannot hold comes from here, before anything is written */
    tg_named_list list = {0};
    bool tied = false;
    tg_peft_info peft = {0};
    st = o.adapter ? tg_decoder_peft_state_dict(tp, model, &list, &peft)
                   : tg_decoder_hf_state_dict(tp, model, &list, &tied);
    if (st != TG_OK) {
        tg_tape_free(tp);
        return st;
    }
    tg__export_tokenizer tok = {0};
    st = tg__export_tokenizer_load(o.tokenizer, r.family, &tok);
    if (st == TG_OK) st = tg__export_tokenizer_fits(&tok, r.vocab_size, OP);
    tg__export_dir d;
    if (st == TG_OK) st = tg__export_dir_begin(&d, dir, o.force, OP);
    if (st == TG_OK) {
        st = write_folder(&d, &o, &r, &list, tied, &peft, &tok);
        if (st == TG_OK) {
            st = tg__export_dir_commit(&d);
        } else {
            st = name_target(&d, st);
            tg__export_dir_abort(&d);
        }
    }
    tg__export_tokenizer_free(&tok);
    tg_tape_free(tp);
    return st;
}
