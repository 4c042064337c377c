/* GGUF export (src/export/gguf.c, tokenizer.c, quant.c): tiny models of the
 * four families written and parsed back by the small GGUF reader below:
 * keys, tensor names, shapes and types (each type for each family, bfloat16
 * weights too), the values (GPT-2's Conv1D weights transposed, Llama's
 * query and key rows permuted, Gemma 3's norms plus one, Llama 3's
 * rope_freqs), heads tied and untied, the tokenizer arrays, special ids and
 * flags; the conversions against tests/ref/q8_0.json
 * (tools/reference/quant.py: gguf-py's Q8_0 and numpy's float16); GPT-2's
 * tokenizer.json built from encoder.json and vocab.bpe read back by
 * tg_tokenizer_load_json; the tokenizer reader's checks of each source file
 * (tokenizer.json, GPT-2's two files, tokenizer_config.json, rank files);
 * and the refusals. That
 * llama.cpp itself loads such files, tokenizes as tapegrad does and
 * generates tapegrad's greedy ids is checked with llama.cpp's binaries by
 * tests/check_llamacpp.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_internal.h"
#include "testutil.h"

/* ---- a small GGUF reader ---------------------------------------------------------------------- */

enum { G_U8, G_I8, G_U16, G_I16, G_U32, G_I32, G_F32, G_BOOL, G_STR, G_ARR, G_U64, G_I64, G_F64 };

typedef struct {
    char *key;
    uint32_t type;
    const uint8_t *val; /* the value (an array: its element type) */
} gkv;

typedef struct {
    char *name;
    uint32_t ndim, type;
    uint64_t ne[4], offset;
} gtensor;

typedef struct {
    uint8_t *file;
    size_t len;
    uint64_t n_kv, n_t;
    gkv *kv;
    gtensor *t;
    const uint8_t *data;
} gguf;

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static size_t scalar_size(uint32_t t)
{
    static const size_t s[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? s[t] : 0;
}

/* The bytes a value of type t at p takes. */
static size_t value_size(uint32_t t, const uint8_t *p)
{
    if (t == G_STR) return 8 + rd64(p);
    if (t != G_ARR) return scalar_size(t);
    uint32_t et = rd32(p);
    uint64_t n = rd64(p + 4);
    size_t off = 12;
    for (uint64_t i = 0; i < n; i++) off += value_size(et, p + off);
    return off;
}

static char *str_at(const uint8_t *p)
{
    uint64_t n = rd64(p);
    char *s = malloc(n + 1);
    memcpy(s, p + 8, n);
    s[n] = '\0';
    return s;
}

static void gguf_open(gguf *g, const char *path)
{
    memset(g, 0, sizeof *g);
    g->file = (uint8_t *)tu_read_file(path, &g->len);
    const uint8_t *p = g->file;
    assert_memory_equal(p, "GGUF", 4);
    assert_int_equal(rd32(p + 4), 3);
    g->n_t = rd64(p + 8), g->n_kv = rd64(p + 16);
    p += 24;
    g->kv = calloc(g->n_kv, sizeof *g->kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        g->kv[i].key = str_at(p);
        p += 8 + rd64(p);
        g->kv[i].type = rd32(p);
        g->kv[i].val = p + 4;
        p += 4 + value_size(g->kv[i].type, p + 4);
    }
    g->t = calloc(g->n_t, sizeof *g->t);
    for (uint64_t i = 0; i < g->n_t; i++) {
        gtensor *t = &g->t[i];
        t->name = str_at(p);
        p += 8 + rd64(p);
        t->ndim = rd32(p);
        p += 4;
        for (uint32_t d = 0; d < t->ndim; d++, p += 8) t->ne[d] = rd64(p);
        t->type = rd32(p);
        t->offset = rd64(p + 4);
        p += 12;
    }
    size_t head = (size_t)(p - g->file);
    g->data = g->file + head + (-head % 32);
    assert_true((size_t)(g->data - g->file) <= g->len);
}

static void gguf_close(gguf *g)
{
    for (uint64_t i = 0; i < g->n_kv; i++) free(g->kv[i].key);
    for (uint64_t i = 0; i < g->n_t; i++) free(g->t[i].name);
    free(g->kv), free(g->t), free(g->file);
}

static const gkv *find_kv(const gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

static const gkv *kv(const gguf *g, const char *key, uint32_t type)
{
    const gkv *k = find_kv(g, key);
    if (!k) fail_msg("GGUF key %s missing", key);
    if (k->type != type) fail_msg("GGUF key %s has type %u, expected %u", key, k->type, type);
    return k;
}

static uint32_t kv_u32(const gguf *g, const char *key) { return rd32(kv(g, key, G_U32)->val); }
static bool kv_bool(const gguf *g, const char *key) { return *kv(g, key, G_BOOL)->val != 0; }
static float kv_f32(const gguf *g, const char *key)
{
    uint32_t u = rd32(kv(g, key, G_F32)->val);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void assert_kv_str(const gguf *g, const char *key, const char *want)
{
    char *s = str_at(kv(g, key, G_STR)->val);
    if (strcmp(s, want)) fail_msg("GGUF %s is \"%s\", expected \"%s\"", key, s, want);
    free(s);
}

/* An array's element type, count and its i-th element's address. */
static uint64_t arr_len(const gguf *g, const char *key, uint32_t elem)
{
    const gkv *k = kv(g, key, G_ARR);
    assert_int_equal(rd32(k->val), elem);
    return rd64(k->val + 4);
}
static const uint8_t *arr_at(const gguf *g, const char *key, uint64_t i)
{
    const gkv *k = kv(g, key, G_ARR);
    uint32_t et = rd32(k->val);
    assert_true(i < rd64(k->val + 4));
    const uint8_t *p = k->val + 12;
    if (et != G_STR) return p + i * scalar_size(et);
    for (uint64_t j = 0; j < i; j++) p += 8 + rd64(p);
    return p;
}
static void assert_arr_str(const gguf *g, const char *key, uint64_t i, const char *want)
{
    char *s = str_at(arr_at(g, key, i));
    if (strcmp(s, want)) fail_msg("GGUF %s[%llu] is \"%s\", expected \"%s\"", key, (unsigned long long)i, s, want);
    free(s);
}
static int32_t arr_i32(const gguf *g, const char *key, uint64_t i) { return (int32_t)rd32(arr_at(g, key, i)); }
static float arr_f32(const gguf *g, const char *key, uint64_t i)
{
    uint32_t u = rd32(arr_at(g, key, i));
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const gtensor *find_t(const gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_t; i++)
        if (!strcmp(g->t[i].name, name)) return &g->t[i];
    return NULL;
}

/* A tensor by name, its type and dims (ne: innermost first; ne1 0 for 1-D). */
static const gtensor *tensor(const gguf *g, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1)
{
    const gtensor *t = find_t(g, name);
    if (!t) fail_msg("GGUF tensor %s missing", name);
    if (t->type != type) fail_msg("GGUF tensor %s has type %u, expected %u", name, t->type, type);
    assert_int_equal(t->ndim, ne1 ? 2 : 1);
    assert_int_equal(t->ne[0], ne0);
    if (ne1) assert_int_equal(t->ne[1], ne1);
    assert_int_equal(t->offset % 32, 0);
    return t;
}

/* Element i of a tensor as float32 (F32, F16, BF16). */
static float t_elem(const gguf *g, const gtensor *t, uint64_t i)
{
    const uint8_t *p = g->data + t->offset;
    if (t->type == 0) {
        uint32_t u = rd32(p + 4 * i);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    if (t->type == 1) return tg__f32_from_f16(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- fixtures ---------------------------------------------------------------------------------- */

static char g_tmp[64];

static const char *tmp(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", g_tmp, name);
    return buf;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void write_json(const char *path, json_t *j)
{
    assert_int_equal(json_dump_file(j, path, JSON_INDENT(1)), 0);
    json_decref(j);
}

static float pval(const tg_module *m, const char *name, int64_t r, int64_t c)
{
    const tg_tensor *t = tg_module_get_parameter(m, name);
    if (!t) fail_msg("no parameter %s", name);
    int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
    return (float)tg_item_at(t, r * cols + c);
}

/* A small decoder of a preset's family, its norms and biases made random
 * (so that a misplaced norm or a missing +1 shows). */
static tg_module *tiny(tg_tape *tp, const char *preset, int64_t vocab, void (*tweak)(tg_decoder_config *))
{
    tg_decoder_config c;
    assert_int_equal(tg_decoder_config_preset(preset, &c), TG_OK);
    c.vocab_size = vocab, c.context_length = 64, c.emb_dim = 64, c.n_layers = 2, c.hidden_dim = 96, c.n_heads = 4;
    if (c.family == TG_GPT_FAMILY_GPT2) c.qkv_bias = true, c.drop_rate = 0;
    else c.n_kv_groups = 2, c.head_dim = 16;
    if (tweak) tweak(&c);
    tg_manual_seed(5);
    tg_module *m = tg_decoder_new(tp, &c);
    tu_assert_ok(m);
    tg_named_list l;
    assert_int_equal(tg_module_named_parameters(tp, m, &l), TG_OK);
    tg_generator *g = tg_generator_new(9);
    for (int i = 0; i < l.n; i++)
        if (l.tensors[i]->ndim == 1) assert_int_equal(tg_uniform_(l.tensors[i], 0.5, 1.5, g), TG_OK);
    tg_generator_free(g);
    return m;
}

static const char QWEN2_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static json_t *added(int id, const char *content, bool special)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", false,
                     "lstrip", false, "rstrip", false, "normalized", false, "special", special);
}

/* A byte-level BPE tokenizer.json: 10 tokens, 4 merges (one with a space
 * inside a pair), the pre-tokenizer Split(regex) + ByteLevel, added tokens
 * from id 10. */
static void byte_level_tokenizer(const char *path, const char *regex, json_t *added_tokens, json_t *post)
{
    json_t *vocab = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "a", 0, "b", 1, "ab", 2,
                              "\xc4\xa0", 3, "\xc4\xa0" "a", 4, "c", 5, "x", 6, "y", 7, "z", 8, "abc", 9);
    json_t *merges = json_pack("[[s, s], [s, s], [s, s], [s, s]]", "a", "b", "\xc4\xa0", "a", "ab", "c", "x y", "z");
    json_t *pre = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                            "pretokenizers", "type", "Split", "pattern", "Regex", regex, "behavior", "Isolated",
                            "invert", false, "type", "ByteLevel", "add_prefix_space", false, "trim_offsets", false,
                            "use_regex", false);
    write_json(path, json_pack("{s:s, s:o, s:{s:s}, s:o, s:o, s:{s:s, s:b}, s:{s:s, s:o, s:o}}", "version", "1.0",
                               "added_tokens", added_tokens, "normalizer", "type", "NFC", "pre_tokenizer", pre,
                               "post_processor", post ? post : json_pack("{s:s}", "type", "ByteLevel"), "decoder",
                               "type", "ByteLevel", "use_regex", false, "model", "type", "BPE", "vocab", vocab,
                               "merges", merges));
}

static int setup(void **state)
{
    (void)state;
    strcpy(g_tmp, "/tmp/tapegrad_test_export_gguf_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- conversions ----------------------------------------------------------------------------------- */

static void test_type_names(void **state)
{
    (void)state;
    static const char *const names[] = {"f32", "f16", "bf16", "q8_0"};
    for (int i = 0; i < 4; i++) {
        tg_export_type t = TG_EXPORT_F32;
        assert_string_equal(tg_export_type_name((tg_export_type)i), names[i]);
        assert_int_equal(tg_export_type_parse(names[i], &t), TG_OK);
        assert_int_equal(t, i);
    }
    tg_export_type t;
    assert_int_equal(tg_export_type_parse("Q8_0", &t), TG_OK);
    assert_int_equal(t, TG_EXPORT_Q8_0);
    assert_null(tg_export_type_name((tg_export_type)4));
    assert_int_equal(tg_export_type_parse("q4_0", &t), -1);
    tu_assert_status_error(-1, "unknown type 'q4_0'", "f32, f16, bf16 or q8_0");
    assert_int_equal(tg_export_type_parse(NULL, &t), -1);
}

/* IEEE half: numpy's rounding of the reference values, every half back and
 * forth, NaN kept a NaN. */
static void test_f16(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("q8_0.json");
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(ref, "f16"), i, e) {
        const json_t *x = json_object_get(e, "x");
        float f = json_is_string(x) ? (json_string_value(x)[0] == '-' ? -INFINITY : INFINITY) : (float)json_real_value(x);
        uint16_t want = (uint16_t)json_integer_value(json_object_get(e, "bits"));
        if (tg__f16_from_f32(f) != want) fail_msg("f16(%.9g) = 0x%04x, numpy 0x%04x", f, tg__f16_from_f32(f), want);
    }
    json_decref(ref);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tg__f32_from_f16((uint16_t)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(f));
            assert_int_equal(tg__f16_from_f32(f) & 0x7e00, 0x7e00);
        } else if (tg__f16_from_f32(f) != h) {
            fail_msg("half 0x%04x -> %.9g -> 0x%04x", h, f, tg__f16_from_f32(f));
        }
    }
    assert_true(tg__f32_from_f16(0x0001) == 0x1p-24f);
    assert_true(tg__f32_from_f16(0x7bff) == 65504.0f);
    assert_true(tg__f32_from_f16(0xfc00) == -INFINITY);
}

static void test_q8_0(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("q8_0.json");
    size_t i, j;
    json_t *row, *v;
    json_array_foreach(json_object_get(ref, "q8_0"), i, row) {
        const json_t *x = json_object_get(row, "x");
        size_t n = json_array_size(x);
        float *f = malloc(n * sizeof *f);
        uint8_t *out = malloc(n / 32 * 34);
        json_array_foreach(x, j, v) f[j] = (float)json_number_value(v);
        tg__q8_0_quantize(f, (int64_t)n, out);
        const char *hex = json_string_value(json_object_get(row, "bytes"));
        assert_int_equal(strlen(hex), n / 32 * 34 * 2);
        for (size_t k = 0; k < n / 32 * 34; k++) {
            unsigned want;
            sscanf(hex + 2 * k, "%2x", &want);
            if (out[k] != want)
                fail_msg("%s: byte %zu is 0x%02x, gguf-py's 0x%02x", json_string_value(json_object_get(row, "name")),
                         k, out[k], want);
        }
        free(f);
        free(out);
    }
    json_decref(ref);
}

/* ---- GPT-2: the installed encoder.json + vocab.bpe, F16 -------------------------------------------- */

static void data_dir(char *buf, size_t n)
{
    char rel[64];
    tu_ref_path(buf, n, strcpy(rel, "../../data"));
}

static void test_gpt2(void **state)
{
    (void)state;
    char data[4096], path[256];
    data_dir(data, sizeof data);
    char *saved = getenv("TAPEGRAD_DATA") ? strdup(getenv("TAPEGRAD_DATA")) : NULL;
    assert_int_equal(setenv("TAPEGRAD_DATA", data, 1), 0);
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "gpt2-small", 50304, NULL); /* 47 ids past the tokenizer's */
    tg_export_options o = {.type = TG_EXPORT_F16};
    assert_int_equal(tg_export_gguf(m, tmp(path, sizeof path, "gpt2.gguf"), &o), TG_OK);
    if (saved) setenv("TAPEGRAD_DATA", saved, 1);
    else unsetenv("TAPEGRAD_DATA");
    free(saved);

    gguf g;
    gguf_open(&g, path);
    assert_kv_str(&g, "general.architecture", "gpt2");
    assert_kv_str(&g, "general.name", "GPT-2");
    assert_int_equal(kv_u32(&g, "general.file_type"), 1);
    assert_int_equal(kv_u32(&g, "gpt2.block_count"), 2);
    assert_int_equal(kv_u32(&g, "gpt2.context_length"), 64);
    assert_int_equal(kv_u32(&g, "gpt2.embedding_length"), 64);
    assert_int_equal(kv_u32(&g, "gpt2.feed_forward_length"), 96);
    assert_int_equal(kv_u32(&g, "gpt2.attention.head_count"), 4);
    assert_true(kv_f32(&g, "gpt2.attention.layer_norm_epsilon") == 1e-5f);
    assert_null(find_kv(&g, "gpt2.attention.head_count_kv"));
    /* tensors: 4 + 12 per layer + the head (the preset's own out_head) */
    assert_int_equal(g.n_t, 4 + 2 * 12 + 1);
    const gtensor *head = tensor(&g, "output.weight", 1, 64, 50304);
    assert_true(t_elem(&g, head, 7 * 64 + 3) == tg__f32_from_f16(tg__f16_from_f32(pval(m, "out_head.weight", 7, 3))));
    tensor(&g, "token_embd.weight", 1, 64, 50304);
    const gtensor *pos = tensor(&g, "position_embd.weight", 0, 64, 64);
    assert_true(t_elem(&g, pos, 3 * 64 + 5) == pval(m, "pos_emb.weight", 3, 5));
    tensor(&g, "output_norm.bias", 0, 64, 0);
    const gtensor *qkv = tensor(&g, "blk.1.attn_qkv.weight", 1, 64, 192);
    const gtensor *qkv_b = tensor(&g, "blk.1.attn_qkv.bias", 0, 192, 0);
    tensor(&g, "blk.0.ffn_up.weight", 1, 64, 96);
    tensor(&g, "blk.0.ffn_down.weight", 1, 96, 64);
    const gtensor *ln = tensor(&g, "blk.1.attn_norm.weight", 0, 64, 0);
    assert_true(t_elem(&g, ln, 7) == pval(m, "trf_blocks.1.norm1.scale", 7, 0));
    /* attn_qkv (out, in): the query, key and value Linear weights stacked */
    static const char *const parts[] = {"W_query", "W_key", "W_value"};
    for (int p = 0; p < 3; p++)
        for (int64_t r = 0; r < 64; r += 9)
            for (int64_t c = 0; c < 64; c += 7) {
                char name[64];
                snprintf(name, sizeof name, "trf_blocks.1.att.%s.weight", parts[p]);
                float want = tg__f32_from_f16(tg__f16_from_f32(pval(m, name, r, c)));
                assert_true(t_elem(&g, qkv, (uint64_t)((p * 64 + r) * 64 + c)) == want);
            }
    assert_true(t_elem(&g, qkv_b, 64 + 3) == pval(m, "trf_blocks.1.att.W_key.bias", 3, 0));
    /* the tokenizer */
    assert_kv_str(&g, "tokenizer.ggml.model", "gpt2");
    assert_kv_str(&g, "tokenizer.ggml.pre", "gpt-2");
    assert_int_equal(arr_len(&g, "tokenizer.ggml.tokens", G_STR), 50304);
    assert_int_equal(arr_len(&g, "tokenizer.ggml.token_type", G_I32), 50304);
    assert_arr_str(&g, "tokenizer.ggml.tokens", 15496, "Hello");
    assert_arr_str(&g, "tokenizer.ggml.tokens", 50256, "<|endoftext|>");
    assert_arr_str(&g, "tokenizer.ggml.tokens", 50303, "[PAD50303]");
    assert_int_equal(arr_i32(&g, "tokenizer.ggml.token_type", 15496), 1);
    assert_int_equal(arr_i32(&g, "tokenizer.ggml.token_type", 50256), 3);
    assert_int_equal(arr_i32(&g, "tokenizer.ggml.token_type", 50257), 5);
    assert_int_equal(arr_len(&g, "tokenizer.ggml.merges", G_STR), 50000);
    assert_arr_str(&g, "tokenizer.ggml.merges", 0, "\xc4\xa0 t");
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.bos_token_id"), 50256);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eos_token_id"), 50256);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eot_token_id"), 50256);
    assert_null(find_kv(&g, "tokenizer.ggml.padding_token_id"));
    assert_false(kv_bool(&g, "tokenizer.ggml.add_bos_token"));
    assert_null(find_kv(&g, "tokenizer.chat_template"));
    gguf_close(&g);
    tg_tape_free(tp);
}

/* GPT-2's files as Hugging Face's tokenizer.json: read back by tapegrad's
 * own loader, it encodes as the two files do. */
static void test_gpt2_tokenizer_json(void **state)
{
    (void)state;
    char data[4096], dir[4200], enc[4300], bpe[4300], path[256];
    data_dir(data, sizeof data);
    snprintf(dir, sizeof dir, "%s/gpt2", data);
    tg__export_tokenizer t;
    assert_int_equal(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_GPT2, &t), TG_OK);
    json_t *model = json_object_get(t.tokenizer, "model");
    assert_string_equal(json_string_value(json_object_get(model, "type")), "BPE");
    assert_int_equal(json_object_size(json_object_get(model, "vocab")), 50257);
    assert_string_equal(json_string_value(json_object_get(json_object_get(t.tokenizer, "pre_tokenizer"), "type")),
                        "ByteLevel");
    json_t *a = json_array_get(json_object_get(t.tokenizer, "added_tokens"), 0);
    assert_int_equal(json_integer_value(json_object_get(a, "id")), 50256);
    assert_true(json_is_true(json_object_get(a, "special")));
    assert_int_equal(t.bos, 50256);
    assert_int_equal(t.eos, 50256);
    assert_int_equal(t.eot, 50256);
    assert_int_equal(t.pad, -1);
    assert_int_equal(t.n_vocab, 50257);
    assert_null(t.chat_template);
    assert_int_equal(json_dump_file(t.tokenizer, tmp(path, sizeof path, "gpt2_tokenizer.json"), 0), 0);
    tg__export_tokenizer_free(&t);

    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    tg_tokenizer *files = tg_tokenizer_load(enc, bpe), *json = tg_tokenizer_load_json(path);
    tu_assert_ok(files);
    tu_assert_ok(json);
    static const char *const texts[] = {
        "Hello, world! It's 2024 and I've    got 12345 tokens.\n\n\tTabs too",
        "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x9a\x80 <|endoftext|> 'RE 'll",
        "   leading and trailing   ",
    };
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        int64_t *x, *y;
        size_t nx, ny;
        assert_int_equal(tg_tokenizer_encode_special(files, texts[k], strlen(texts[k]), true, &x, &nx), TG_OK);
        assert_int_equal(tg_tokenizer_encode_special(json, texts[k], strlen(texts[k]), true, &y, &ny), TG_OK);
        assert_int_equal(nx, ny);
        assert_memory_equal(x, y, nx * sizeof *x);
        free(x), free(y);
    }
    assert_int_equal(tg_tokenizer_vocab_size(json), 50257);
    assert_true(tg_tokenizer_is_special(json, 50256));
    tg_tokenizer_free(files);
    tg_tokenizer_free(json);
}

/* ---- Qwen3: a tokenizer.json without a config beside it, Q8_0 --------------------------------------- */

static void qwen_tokens(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    byte_level_tokenizer(path, QWEN2_REGEX,
                         json_pack("[o, o, o, o, o]", added(10, "<|endoftext|>", true), added(11, "<|im_start|>", true),
                                   added(12, "<|im_end|>", true), added(13, "<think>", false),
                                   added(14, "<|fim_prefix|>", false)),
                         NULL);
}

static void tie(tg_decoder_config *c) { c->tie_head = true; }

static void test_qwen3(void **state)
{
    (void)state;
    char dir[128], path[256];
    tmp(dir, sizeof dir, "qwen");
    assert_int_equal(mkdir(dir, 0755), 0);
    qwen_tokens(dir);
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "qwen3-0.6b", 32, tie);
    tg_export_options o = {.type = TG_EXPORT_Q8_0, .tokenizer = dir, .name = "tiny qwen"};
    assert_int_equal(tg_export_gguf(m, tmp(path, sizeof path, "qwen.gguf"), &o), TG_OK);
    gguf g;
    gguf_open(&g, path);
    assert_kv_str(&g, "general.architecture", "qwen3");
    assert_kv_str(&g, "general.name", "tiny qwen");
    assert_int_equal(kv_u32(&g, "general.file_type"), 7);
    assert_int_equal(kv_u32(&g, "qwen3.attention.head_count_kv"), 2);
    assert_int_equal(kv_u32(&g, "qwen3.attention.key_length"), 16);
    assert_int_equal(kv_u32(&g, "qwen3.attention.value_length"), 16);
    assert_int_equal(kv_u32(&g, "qwen3.feed_forward_length"), 96);
    assert_true(kv_f32(&g, "qwen3.rope.freq_base") == 1e6f);
    assert_true(kv_f32(&g, "qwen3.attention.layer_norm_rms_epsilon") == 1e-6f);
    assert_null(find_kv(&g, "qwen3.vocab_size"));
    /* 2 + 11 per layer; tied: no output.weight */
    assert_int_equal(g.n_t, 2 + 2 * 11);
    assert_null(find_t(&g, "output.weight"));
    tensor(&g, "token_embd.weight", 8, 64, 32);
    tensor(&g, "blk.0.attn_q_norm.weight", 0, 16, 0);
    tensor(&g, "blk.0.attn_norm.weight", 0, 64, 0);
    tensor(&g, "blk.1.ffn_gate.weight", 8, 64, 96);
    tensor(&g, "blk.1.ffn_down.weight", 8, 96, 64);
    tensor(&g, "blk.1.attn_k.weight", 8, 64, 32);
    /* Q8_0 of the query weight: the blocks of its rows */
    const gtensor *q = tensor(&g, "blk.1.attn_q.weight", 8, 64, 64);
    float w[64 * 64];
    for (int64_t r = 0; r < 64; r++)
        for (int64_t c = 0; c < 64; c++) w[r * 64 + c] = pval(m, "trf_blocks.1.att.W_query.weight", r, c);
    uint8_t want[64 * 64 / 32 * 34];
    tg__q8_0_quantize(w, 64 * 64, want);
    assert_memory_equal(g.data + q->offset, want, sizeof want);
    const gtensor *qn = find_t(&g, "blk.1.attn_q_norm.weight");
    assert_true(t_elem(&g, qn, 5) == pval(m, "trf_blocks.1.att.q_norm.scale", 5, 0));
    /* the tokenizer: 15 ids padded to 32 rows; a special-looking added token is a control one */
    assert_kv_str(&g, "tokenizer.ggml.model", "gpt2");
    assert_kv_str(&g, "tokenizer.ggml.pre", "qwen2");
    assert_int_equal(arr_len(&g, "tokenizer.ggml.tokens", G_STR), 32);
    assert_arr_str(&g, "tokenizer.ggml.tokens", 4, "\xc4\xa0" "a");
    assert_arr_str(&g, "tokenizer.ggml.tokens", 12, "<|im_end|>");
    assert_arr_str(&g, "tokenizer.ggml.tokens", 15, "[PAD15]");
    static const int32_t types[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 4, 3, 5};
    for (int i = 0; i < 16; i++) assert_int_equal(arr_i32(&g, "tokenizer.ggml.token_type", (uint64_t)i), types[i]);
    assert_int_equal(arr_len(&g, "tokenizer.ggml.merges", G_STR), 4);
    assert_arr_str(&g, "tokenizer.ggml.merges", 1, "\xc4\xa0 a");
    assert_arr_str(&g, "tokenizer.ggml.merges", 3, "x\xc4\xa0y z");
    assert_null(find_kv(&g, "tokenizer.ggml.scores"));
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.bos_token_id"), 10); /* <|endoftext|>, as Qwen3's config.json */
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eos_token_id"), 12);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.padding_token_id"), 10);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eot_token_id"), 12);
    assert_false(kv_bool(&g, "tokenizer.ggml.add_bos_token"));
    char *tmpl = str_at(kv(&g, "tokenizer.chat_template", G_STR)->val);
    assert_non_null(strstr(tmpl, "'<|im_start|>' + message['role']"));
    assert_non_null(strstr(tmpl, "<think>\\n\\n</think>\\n\\n"));
    free(tmpl);
    gguf_close(&g);
    tg_tape_free(tp);
}

/* Q8_0 of rows that are not a multiple of 32: F16, the converter's fallback. */
static void width_80(tg_decoder_config *c)
{
    c->emb_dim = 80, c->head_dim = 20;
}

static void test_q8_0_fallback(void **state)
{
    (void)state;
    char dir[128], path[256];
    tmp(dir, sizeof dir, "qwen_80");
    assert_int_equal(mkdir(dir, 0755), 0);
    qwen_tokens(dir);
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "qwen3-0.6b", 32, width_80);
    tg_export_options o = {.type = TG_EXPORT_Q8_0, .tokenizer = dir};
    assert_int_equal(tg_export_gguf(m, tmp(path, sizeof path, "qwen80.gguf"), &o), TG_OK);
    gguf g;
    gguf_open(&g, path);
    /* rows of 80 values: F16; the feed-forward's down projection (rows of 96): Q8_0 */
    tensor(&g, "token_embd.weight", 1, 80, 32);
    tensor(&g, "blk.0.attn_q.weight", 1, 80, 80);
    tensor(&g, "blk.0.attn_output.weight", 1, 80, 80);
    tensor(&g, "blk.0.ffn_up.weight", 1, 80, 96);
    const gtensor *down = tensor(&g, "blk.0.ffn_down.weight", 8, 96, 80);
    float w[96];
    uint8_t want[3 * 34];
    for (int c = 0; c < 96; c++) w[c] = pval(m, "trf_blocks.0.ff.fc3.weight", 7, c);
    tg__q8_0_quantize(w, 96, want);
    assert_memory_equal(g.data + down->offset + 7 * 3 * 34, want, sizeof want);
    gguf_close(&g);
    tg_tape_free(tp);
}

/* ---- Llama 3: a config beside its tokenizer.json, F32 ------------------------------------------------ */

static void llama_tweak(tg_decoder_config *c) { c->tie_head = false; }

static void test_llama3(void **state)
{
    (void)state;
    char dir[128], path[256];
    tmp(dir, sizeof dir, "llama");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *post = json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}]}", "type", "TemplateProcessing", "single",
                             "SpecialToken", "id", "<|begin_of_text|>", "type_id", 0, "Sequence", "id", "A", "type_id", 0);
    byte_level_tokenizer(path, TG_LLAMA3_PATTERN,
                         json_pack("[o, o, o, o, o]", added(10, "<|begin_of_text|>", true),
                                   added(11, "<|end_of_text|>", true), added(12, "<|start_header_id|>", true),
                                   added(13, "<|end_header_id|>", true), added(14, "<|eot_id|>", true)),
                         post);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_text(path, "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": {\"content\": \"<|end_of_text|>\"}, "
                     "\"chat_template\": \"{{ messages }}\", \"model_max_length\": 1000000000000000019884624838656}");
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "llama3.2-1b", 16, llama_tweak);
    tg_export_options o = {.tokenizer = dir};
    assert_int_equal(tg_export_gguf(m, tmp(path, sizeof path, "llama.gguf"), &o), TG_OK);
    gguf g;
    gguf_open(&g, path);
    assert_kv_str(&g, "general.architecture", "llama");
    assert_int_equal(kv_u32(&g, "general.file_type"), 0);
    assert_int_equal(kv_u32(&g, "llama.vocab_size"), 16);
    assert_int_equal(kv_u32(&g, "llama.rope.dimension_count"), 16);
    assert_int_equal(kv_u32(&g, "llama.attention.head_count"), 4);
    assert_int_equal(kv_u32(&g, "llama.attention.head_count_kv"), 2);
    assert_true(kv_f32(&g, "llama.rope.freq_base") == 500000.0f);
    assert_true(kv_f32(&g, "llama.attention.layer_norm_rms_epsilon") == 1e-5f);
    /* rope_freqs + 2 + 9 per layer + output */
    assert_int_equal(g.n_t, 1 + 2 + 2 * 9 + 1);
    assert_string_equal(g.t[0].name, "rope_freqs.weight");
    tensor(&g, "output.weight", 0, 64, 16);
    tensor(&g, "blk.0.attn_output.weight", 0, 64, 64);
    /* the query's and the key's rows, per head of 16: 2i + j <- j * 8 + i */
    const gtensor *q = tensor(&g, "blk.1.attn_q.weight", 0, 64, 64), *k = tensor(&g, "blk.1.attn_k.weight", 0, 64, 32);
    for (int64_t r = 0; r < 64; r++) {
        int64_t from = r / 16 * 16 + (r % 2) * 8 + (r % 16) / 2;
        for (int64_t c = 0; c < 64; c += 5) {
            assert_true(t_elem(&g, q, (uint64_t)(r * 64 + c)) == pval(m, "trf_blocks.1.att.W_query.weight", from, c));
            if (r < 32)
                assert_true(t_elem(&g, k, (uint64_t)(r * 64 + c)) == pval(m, "trf_blocks.1.att.W_key.weight", from, c));
        }
    }
    const gtensor *v = tensor(&g, "blk.1.attn_v.weight", 0, 64, 32);
    assert_true(t_elem(&g, v, 3 * 64 + 1) == pval(m, "trf_blocks.1.att.W_value.weight", 3, 1));
    /* rope_freqs: Llama 3's smoothing (factor 32, low 1, high 4, original 8192) as divisors */
    const gtensor *rf = tensor(&g, "rope_freqs.weight", 0, 8, 0);
    for (int i = 0; i < 8; i++) {
        double freq = pow(500000.0, -2.0 * i / 16), wavelen = 2 * 3.14159265358979323846 / freq, want;
        if (wavelen < 8192.0 / 4) want = 1;
        else if (wavelen > 8192.0) want = 32;
        else {
            double s = (8192.0 / wavelen - 1) / 3;
            want = 1 / ((1 - s) / 32 + s);
        }
        assert_float_equal(t_elem(&g, rf, (uint64_t)i), want, 1e-5 * want);
    }
    assert_true(t_elem(&g, rf, 0) == 1.0f && t_elem(&g, rf, 7) == 32.0f);
    assert_true(t_elem(&g, rf, 4) > 1.0f && t_elem(&g, rf, 4) < 32.0f);
    /* the config's tokens and template; BOS added (the post-processor's template) */
    assert_kv_str(&g, "tokenizer.ggml.pre", "llama-bpe");
    assert_int_equal(arr_len(&g, "tokenizer.ggml.tokens", G_STR), 16);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.bos_token_id"), 10);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eos_token_id"), 11);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eot_token_id"), 14);
    assert_true(kv_bool(&g, "tokenizer.ggml.add_bos_token"));
    assert_kv_str(&g, "tokenizer.chat_template", "{{ messages }}");
    gguf_close(&g);
    /* q8_0: the file written from the float32 weights holds the blocks
     * tapegrad holds for them (TG_Q8): byte for byte the file written from
     * the model converted to q8_0 (its own blocks, the query's and the key's
     * rows permuted) */
    char pa[256], pb[256];
    o.type = TG_EXPORT_Q8_0;
    assert_int_equal(tg_export_gguf(m, tmp(pa, sizeof pa, "llama_q8_from_f32.gguf"), &o), TG_OK);
    assert_int_equal(tg_module_requires_grad_(m, false), TG_OK);
    assert_int_equal(tg_module_to_dtype(tp, m, TG_Q8), TG_OK);
    assert_int_equal(tg_module_get_parameter(m, "trf_blocks.1.att.W_query.weight")->dtype, TG_Q8);
    assert_int_equal(tg_export_gguf(m, tmp(pb, sizeof pb, "llama_q8_own.gguf"), &o), TG_OK);
    size_t la, lb;
    char *fa = tu_read_file(pa, &la), *fb = tu_read_file(pb, &lb);
    assert_non_null(fa);
    assert_non_null(fb);
    assert_int_equal(la, lb);
    assert_memory_equal(fa, fb, la);
    free(fa);
    free(fb);
    tg_tape_free(tp);
}

/* ---- Gemma 3: a byte-fallback tokenizer as the SentencePiece form, BF16 ---------------------------- */

static void gemma_tweak(tg_decoder_config *c)
{
    c->n_layers = 4;
    c->sliding_window = 8;
    c->query_pre_attn_scalar = 64; /* not head_dim: folded into the query norm */
    c->rope_local_base = 20000;
    tg_decoder_config_layer_pattern(c, 2);
}

static void gemma_tokens(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    const char *u = "\xe2\x96\x81"; /* ▁ */
    char ua[8], uab[12], uu[8];
    snprintf(ua, sizeof ua, "%sa", u), snprintf(uab, sizeof uab, "%sab", u), snprintf(uu, sizeof uu, "%s%s", u, u);
    json_t *vocab = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "<pad>", 0,
                              "<eos>", 1, "<bos>", 2, "<unk>", 3, "<0x41>", 4, u, 5, "a", 6, "b", 7, ua, 8, "ab", 9,
                              uab, 10, "<start_of_turn>", 11, "<end_of_turn>", 12, uu, 13, "<mask>", 14);
    json_t *merges = json_pack("[[s, s], [s, s], [s, s], [s, s], [s, s]]", u, "a", "a", "b", ua, "b", u, "ab", u, u);
    json_t *add = json_pack("[o, o, o, o, o, o, o, o]", added(0, "<pad>", true), added(1, "<eos>", true),
                            added(2, "<bos>", true), added(3, "<unk>", true), added(11, "<start_of_turn>", true),
                            added(12, "<end_of_turn>", true), added(13, uu, false), added(14, "<mask>", false));
    json_t *post = json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}]}", "type", "TemplateProcessing", "single",
                             "SpecialToken", "id", "<bos>", "type_id", 0, "Sequence", "id", "A", "type_id", 0);
    write_json(path, json_pack("{s:s, s:o, s:{s:s, s:{s:s}, s:s}, s:n, s:o, s:{s:s}, s:{s:s, s:s, s:b, s:b, s:o, s:o}}",
                               "version", "1.0", "added_tokens", add, "normalizer", "type", "Replace", "pattern",
                               "String", " ", "content", u, "pre_tokenizer", "post_processor", post, "decoder", "type",
                               "Sequence", "model", "type", "BPE", "unk_token", "<unk>", "byte_fallback", true,
                               "ignore_merges", false, "vocab", vocab, "merges", merges));
}

static void test_gemma3(void **state)
{
    (void)state;
    char dir[128], path[256];
    tmp(dir, sizeof dir, "gemma");
    assert_int_equal(mkdir(dir, 0755), 0);
    gemma_tokens(dir);
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "gemma3-270m", 20, gemma_tweak);
    tg_export_options o = {.type = TG_EXPORT_BF16, .tokenizer = dir};
    assert_int_equal(tg_export_gguf(m, tmp(path, sizeof path, "gemma.gguf"), &o), TG_OK);
    gguf g;
    gguf_open(&g, path);
    assert_kv_str(&g, "general.architecture", "gemma3");
    assert_int_equal(kv_u32(&g, "general.file_type"), 32);
    assert_int_equal(kv_u32(&g, "gemma3.attention.sliding_window"), 8);
    assert_int_equal(kv_u32(&g, "gemma3.attention.sliding_window_pattern"), 2);
    assert_true(kv_f32(&g, "gemma3.rope.freq_base") == 1e6f);
    assert_true(kv_f32(&g, "gemma3.rope.freq_base_swa") == 20000.0f);
    assert_int_equal(kv_u32(&g, "gemma3.attention.key_length"), 16);
    /* 2 + 13 per layer; the four norms and the query/key norms + 1, F32 */
    assert_int_equal(g.n_t, 2 + 4 * 13 + (find_t(&g, "output.weight") ? 1 : 0));
    tensor(&g, "token_embd.weight", 30, 64, 20);
    tensor(&g, "blk.3.ffn_gate.weight", 30, 64, 96);
    static const char *const norms[][2] = {{"attn_norm", "input_layernorm"},
                                           {"post_attention_norm", "post_attention_layernorm"},
                                           {"ffn_norm", "pre_feedforward_layernorm"},
                                           {"post_ffw_norm", "post_feedforward_layernorm"}};
    for (int i = 0; i < 4; i++) {
        char gn[64], ours[80];
        snprintf(gn, sizeof gn, "blk.2.%s.weight", norms[i][0]);
        snprintf(ours, sizeof ours, "blocks.2.%s.scale", norms[i][1]);
        const gtensor *t = tensor(&g, gn, 0, 64, 0);
        for (int j = 0; j < 64; j += 13) assert_true(t_elem(&g, t, (uint64_t)j) == pval(m, ours, j, 0) + 1.0f);
    }
    const gtensor *kn = tensor(&g, "blk.0.attn_k_norm.weight", 0, 16, 0), *qn = tensor(&g, "blk.0.attn_q_norm.weight", 0, 16, 0);
    const gtensor *on = tensor(&g, "output_norm.weight", 0, 64, 0);
    float s = sqrtf(16.0f / 64.0f); /* llama.cpp's 1/sqrt(head_dim) made the model's 1/sqrt(64) */
    for (int j = 0; j < 16; j++) {
        assert_true(t_elem(&g, kn, (uint64_t)j) == pval(m, "blocks.0.att.k_norm.scale", j, 0) + 1.0f);
        assert_true(t_elem(&g, qn, (uint64_t)j) == (pval(m, "blocks.0.att.q_norm.scale", j, 0) + 1.0f) * s);
    }
    assert_true(t_elem(&g, on, 9) == pval(m, "final_norm.scale", 9, 0) + 1.0f);
    const gtensor *up = tensor(&g, "blk.0.ffn_up.weight", 30, 64, 96);
    assert_true(t_elem(&g, up, 5 * 64 + 2) == (float)tu_bf16(pval(m, "blocks.0.ff.fc2.weight", 5, 2)));
    /* the SentencePiece form: scores minus the first merge's rank, byte and user-defined tokens */
    assert_kv_str(&g, "tokenizer.ggml.model", "llama");
    assert_kv_str(&g, "tokenizer.ggml.pre", "default");
    assert_null(find_kv(&g, "tokenizer.ggml.merges"));
    assert_int_equal(arr_len(&g, "tokenizer.ggml.scores", G_F32), 20);
    static const int32_t types[] = {3, 3, 3, 3, 6, 1, 1, 1, 1, 1, 1, 3, 3, 4, 3, 5};
    static const float scores[] = {-1000, -1000, -1000, -1000, 0, 0, 0, 0, -1, -2, -3, -1000, -1000, -5, -1000, -10000};
    for (int i = 0; i < 16; i++) {
        assert_int_equal(arr_i32(&g, "tokenizer.ggml.token_type", (uint64_t)i), types[i]);
        assert_true(arr_f32(&g, "tokenizer.ggml.scores", (uint64_t)i) == scores[i]);
    }
    assert_arr_str(&g, "tokenizer.ggml.tokens", 13, "\xe2\x96\x81\xe2\x96\x81");
    assert_arr_str(&g, "tokenizer.ggml.tokens", 19, "[PAD19]");
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.bos_token_id"), 2);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eos_token_id"), 1);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eot_token_id"), 12);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.padding_token_id"), 0);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.unknown_token_id"), 3);
    assert_true(kv_bool(&g, "tokenizer.ggml.add_bos_token"));
    assert_false(kv_bool(&g, "tokenizer.ggml.add_eos_token"));
    assert_false(kv_bool(&g, "tokenizer.ggml.add_space_prefix"));
    char *tmpl = str_at(kv(&g, "tokenizer.chat_template", G_STR)->val);
    assert_non_null(strstr(tmpl, "<start_of_turn>"));
    free(tmpl);
    gguf_close(&g);
    tg_tape_free(tp);
}

/* ---- refusals ----------------------------------------------------------------------------------------- */

static void pattern_3(tg_decoder_config *c)
{
    c->n_layers = 4;
    c->sliding_window = 8;
    c->layer_types[0] = TG_LAYER_FULL, c->layer_types[1] = TG_LAYER_SLIDING;
    c->layer_types[2] = TG_LAYER_SLIDING, c->layer_types[3] = TG_LAYER_FULL;
}

static void test_refusals(void **state)
{
    (void)state;
    char dir[128], path[256], other[256];
    tmp(dir, sizeof dir, "qwen_bad");
    assert_int_equal(mkdir(dir, 0755), 0);
    qwen_tokens(dir);
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "qwen3-0.6b", 32, NULL);
    tg_export_options o = {.tokenizer = dir};
    tmp(path, sizeof path, "bad.gguf");
    /* a type outside the enum, a path that cannot be written, a NULL */
    o.type = (tg_export_type)7;
    tu_assert_status_error(tg_export_gguf(m, path, &o), "export_gguf", "unknown type 7");
    o.type = TG_EXPORT_F16;
    tu_assert_status_error(tg_export_gguf(m, "/nonexistent/dir/x.gguf", &o), "cannot write", "/nonexistent/dir/x.gguf");
    tu_assert_status_error(tg_export_gguf(m, dir, &o), "not a regular file");
    tu_assert_status_error(tg_export_gguf(NULL, path, &o), "NULL model");
    /* a model smaller than the tokenizer's vocabulary */
    tg_module *small = tiny(tp, "qwen3-0.6b", 8, NULL);
    tu_assert_status_error(tg_export_gguf(small, path, &o), "vocabulary has 10 ids", "8 rows");
    /* LoRA layers */
    assert_int_equal(tg_lora_replace_linear(tp, m, 2, 4.0), TG_OK);
    tu_assert_status_error(tg_export_gguf(m, path, &o), "LoRA layers", "tg_lora_merge");
    assert_int_equal(tg_lora_merge(m), TG_OK);
    assert_int_equal(tg_export_gguf(m, path, &o), TG_OK);
    /* an existing file is replaced; a failed export leaves it as it was */
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    o.tokenizer = tmp(other, sizeof other, "nowhere");
    tu_assert_status_error(tg_export_gguf(m, path, &o), "nowhere");
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(before.st_size, after.st_size);
    /* a Gemma 3 layer pattern llama.cpp has no period for */
    tg_module *gm = tiny(tp, "gemma3-270m", 32, pattern_3);
    o.tokenizer = dir;
    tu_assert_status_error(tg_export_gguf(gm, path, &o), "every P-th layer full");
    /* a family whose tokenizer is not installed */
    char data[4096];
    data_dir(data, sizeof data);
    char *saved = getenv("TAPEGRAD_DATA") ? strdup(getenv("TAPEGRAD_DATA")) : NULL;
    assert_int_equal(setenv("TAPEGRAD_DATA", data, 1), 0);
    o.tokenizer = NULL;
    tg_module *lm = tiny(tp, "llama3.2-1b", 32, NULL);
    tu_assert_status_error(tg_export_gguf(lm, path, &o), "Llama 3's tokenizer is not installed", "tokenizer.json");
    if (saved) setenv("TAPEGRAD_DATA", saved, 1);
    else unsetenv("TAPEGRAD_DATA");
    free(saved);
    tg_tape_free(tp);
}

/* Broken tokenizer files: one line naming the file. */
static void test_tokenizer_errors(void **state)
{
    (void)state;
    char path[256], dir[128];
    tg__export_tokenizer t;
    tmp(path, sizeof path, "broken.json");
    write_text(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}");
    tu_assert_status_error(tg__export_tokenizer_load(path, TG_GPT_FAMILY_QWEN3, &t), "broken.json line", "");
    assert_int_equal(tg__export_tokenizer_load(path, TG_GPT_FAMILY_QWEN3, &t), TG_EFORMAT);
    assert_null(t.tokenizer);
    write_text(path, "{\"added_tokens\": []}");
    tu_assert_status_error(tg__export_tokenizer_load(path, TG_GPT_FAMILY_QWEN3, &t), "broken.json", "no \"model\"");
    write_text(path, "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    tu_assert_status_error(tg__export_tokenizer_load(path, TG_GPT_FAMILY_QWEN3, &t), "model type Unigram");
    write_text(path, "{\"model\": {\"type\": \"BPE\", \"merges\": []}}");
    tu_assert_status_error(tg__export_tokenizer_load(path, TG_GPT_FAMILY_QWEN3, &t), "model.vocab must be");
    write_text(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"ab\"]}}");
    tu_assert_status_error(tg__export_tokenizer_load(path, TG_GPT_FAMILY_QWEN3, &t), "model.merges[0]");
    write_text(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                     "\"added_tokens\": [{\"id\": -3, \"content\": \"x\"}]}");
    tu_assert_status_error(tg__export_tokenizer_load(path, TG_GPT_FAMILY_QWEN3, &t), "added_tokens[0]");
    /* a rank file, by name or in a folder */
    tmp(path, sizeof path, "tokenizer.model");
    write_text(path, "IQ== 0\nIg== 1\nIw== 2\n");
    tu_assert_status_error(tg__export_tokenizer_load(path, TG_GPT_FAMILY_LLAMA3, &t), "tiktoken rank file",
                           "give Llama 3's tokenizer.json");
    tu_assert_status_error(tg__export_tokenizer_load(g_tmp, TG_GPT_FAMILY_LLAMA3, &t), "tokenizer.model",
                           "tiktoken rank file");
    /* an empty folder, a missing path, a config naming a token the tokenizer lacks */
    tmp(dir, sizeof dir, "empty");
    assert_int_equal(mkdir(dir, 0755), 0);
    tu_assert_status_error(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_QWEN3, &t), "holds no tokenizer.json");
    tu_assert_status_error(tg__export_tokenizer_load("/nonexistent/tok.json", TG_GPT_FAMILY_QWEN3, &t),
                           "cannot open the tokenizer /nonexistent/tok.json");
    tmp(dir, sizeof dir, "qwen_cfg");
    assert_int_equal(mkdir(dir, 0755), 0);
    qwen_tokens(dir);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_text(path, "{\"eos_token\": \"<|nope|>\"}");
    tu_assert_status_error(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_QWEN3, &t), "tokenizer_config.json",
                           "eos_token \"<|nope|>\" is not a token");
    write_text(path, "{\"eos_token\": \"<|im_end|>\", \"chat_template\": 3");
    tu_assert_status_error(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_QWEN3, &t), "tokenizer_config.json line");
    /* GPT-2's vocab.bpe with a bad line */
    tmp(dir, sizeof dir, "gpt2_bad");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    write_text(path, "{\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 3}");
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    write_text(path, "#version: 0.2\na b\nab\n");
    tu_assert_status_error(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_GPT2, &t), "vocab.bpe line 3",
                           "two tokens separated by one space");
    write_text(path, "#version: 0.2\na b\n");
    assert_int_equal(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_GPT2, &t), TG_OK);
    assert_int_equal(t.eos, 3);
    assert_int_equal(t.n_vocab, 4);
    assert_int_equal(json_array_size(json_object_get(json_object_get(t.tokenizer, "model"), "merges")), 1);
    tg__export_tokenizer_free(&t);
}

/* ---- each type for each family ---------------------------------------------------------------------- */

/* A small GPT-2 folder: encoder.json of 10 byte-level tokens and <|endoftext|> (id 10), vocab.bpe. */
static void gpt2_files(const char *dir)
{
    char path[256];
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    write_json(path, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "a", 0, "b", 1, "ab", 2,
                               "\xc4\xa0", 3, "\xc4\xa0" "a", 4, "c", 5, "x", 6, "y", 7, "z", 8, "abc", 9,
                               "<|endoftext|>", 10));
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    write_text(path, "#version: 0.2\r\na b\r\n\r\n\xc4\xa0 a\nab c\n");
}

/* Bytes of a GGML tensor of n values. */
static uint64_t ggml_bytes(uint32_t type, uint64_t n) { return type == 8 ? n / 32 * 34 : type == 0 ? 4 * n : 2 * n; }

/* Every tensor lies inside the file, after the one before it. */
static void assert_layout(const gguf *g)
{
    uint64_t end = 0;
    for (uint64_t i = 0; i < g->n_t; i++) {
        const gtensor *t = &g->t[i];
        uint64_t n = t->ne[0] * (t->ndim == 2 ? t->ne[1] : 1);
        assert_true(t->offset >= end);
        end = t->offset + ggml_bytes(t->type, n);
    }
    assert_true((size_t)(g->data - g->file) + end <= g->len);
}

static void test_types(void **state)
{
    (void)state;
    char qdir[128], gdir[128], mdir[128], path[256];
    tmp(qdir, sizeof qdir, "types_qwen");
    assert_int_equal(mkdir(qdir, 0755), 0);
    qwen_tokens(qdir);
    tmp(gdir, sizeof gdir, "types_gpt2");
    gpt2_files(gdir);
    tmp(mdir, sizeof mdir, "types_gemma");
    assert_int_equal(mkdir(mdir, 0755), 0);
    gemma_tokens(mdir);
    const struct {
        const char *preset, *tokenizer, *down, *arch;
        void (*tweak)(tg_decoder_config *);
    } fam[] = {
        {"gpt2-small", gdir, "trf_blocks.0.ff.layers.2.weight", "gpt2", NULL},
        {"qwen3-0.6b", qdir, "trf_blocks.0.ff.fc3.weight", "qwen3", NULL},
        {"llama3.2-1b", qdir, "trf_blocks.0.ff.fc3.weight", "llama", NULL},
        {"gemma3-270m", mdir, "blocks.0.ff.fc3.weight", "gemma3", gemma_tweak},
    };
    static const uint32_t ggml[] = {0, 1, 30, 8}, ftype[] = {0, 1, 32, 7};
    tg_tape *tp = tg_tape_new();
    for (int f = 0; f < 4; f++) {
        tg_module *m = tiny(tp, fam[f].preset, 32, fam[f].tweak);
        for (int t = 0; t < 4; t++) {
            tg_export_options o = {.type = (tg_export_type)t, .tokenizer = fam[f].tokenizer};
            snprintf(path, sizeof path, "%s/%s_%d.gguf", g_tmp, fam[f].arch, t);
            if (tg_export_gguf(m, path, &o) != TG_OK) fail_msg("%s %d: %s", fam[f].arch, t, tg_last_error());
            gguf g;
            gguf_open(&g, path);
            assert_kv_str(&g, "general.architecture", fam[f].arch);
            assert_int_equal(kv_u32(&g, "general.file_type"), ftype[t]);
            assert_layout(&g);
            /* the matrices in the type; 1-D tensors and norms F32 */
            tensor(&g, "token_embd.weight", ggml[t], 64, 32);
            tensor(&g, "blk.1.attn_norm.weight", 0, 64, 0);
            const gtensor *down = tensor(&g, "blk.0.ffn_down.weight", ggml[t], 96, 64);
            if (f == 0) tensor(&g, "position_embd.weight", 0, 64, 64);
            /* row 5 of the feed-forward's down projection */
            float row[96];
            for (int c = 0; c < 96; c++) row[c] = pval(m, fam[f].down, 5, c);
            if (t == 3) {
                uint8_t want[3 * 34];
                tg__q8_0_quantize(row, 96, want);
                assert_memory_equal(g.data + down->offset + 5 * 3 * 34, want, sizeof want);
            } else {
                for (int c = 0; c < 96; c += 7) {
                    float want = t == 0 ? row[c] : t == 1 ? tg__f32_from_f16(tg__f16_from_f32(row[c]))
                                                          : (float)tu_bf16(row[c]);
                    if (t_elem(&g, down, (uint64_t)(5 * 96 + c)) != want)
                        fail_msg("%s %s: ffn_down[5, %d] is %.9g, expected %.9g", fam[f].arch,
                                 tg_export_type_name(o.type), c, (double)t_elem(&g, down, (uint64_t)(5 * 96 + c)),
                                 (double)want);
                }
            }
            gguf_close(&g);
        }
    }
    tg_tape_free(tp);
}

/* ---- bfloat16 weights ------------------------------------------------------------------------------- */

static void bf16_weights(tg_decoder_config *c) { c->weights = TG_BF16; }

/* bf16 value i of a bf16 parameter, widened */
static float bf16_at(const tg_module *m, const char *name, int64_t i)
{
    const tg_tensor *t = tg_module_get_parameter(m, name);
    if (!t || t->dtype != TG_BF16) fail_msg("no bf16 parameter %s", name);
    uint32_t u = (uint32_t)((const uint16_t *)tg_data_ptr(t))[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16_weights(void **state)
{
    (void)state;
    char dir[128], path[256];
    tmp(dir, sizeof dir, "bf16_qwen");
    assert_int_equal(mkdir(dir, 0755), 0);
    qwen_tokens(dir);
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "llama3.2-1b", 32, bf16_weights);
    tmp(path, sizeof path, "bf16.gguf");
    for (int t = 0; t < 4; t++) {
        if (t == 1) continue;
        tg_export_options o = {.type = (tg_export_type)t, .tokenizer = dir};
        assert_int_equal(tg_export_gguf(m, path, &o), TG_OK);
        gguf g;
        gguf_open(&g, path);
        /* the query's rows permuted from the bf16 weight, widened exactly */
        const gtensor *q = tensor(&g, "blk.1.attn_q.weight", t == 0 ? 0 : t == 2 ? 30 : 8, 64, 64);
        if (t == 3) {
            float row[64];
            int64_t from = 5 / 16 * 16 + (5 % 2) * 8 + (5 % 16) / 2; /* GGUF row 5 */
            for (int c = 0; c < 64; c++) row[c] = bf16_at(m, "trf_blocks.1.att.W_query.weight", from * 64 + c);
            uint8_t want[2 * 34];
            tg__q8_0_quantize(row, 64, want);
            assert_memory_equal(g.data + q->offset + 5 * 2 * 34, want, sizeof want);
        } else {
            for (int64_t r = 0; r < 64; r += 3) {
                int64_t from = r / 16 * 16 + (r % 2) * 8 + (r % 16) / 2;
                for (int64_t c = 0; c < 64; c += 11)
                    assert_true(t_elem(&g, q, (uint64_t)(r * 64 + c)) ==
                                bf16_at(m, "trf_blocks.1.att.W_query.weight", from * 64 + c));
            }
            const gtensor *e = tensor(&g, "token_embd.weight", t == 0 ? 0 : 30, 64, 32);
            assert_true(t_elem(&g, e, 7 * 64 + 9) == bf16_at(m, "tok_emb.weight", 7 * 64 + 9));
        }
        /* the norms: float32 parameters, F32 */
        const gtensor *n = tensor(&g, "blk.0.ffn_norm.weight", 0, 64, 0);
        assert_true(t_elem(&g, n, 3) == pval(m, "trf_blocks.0.norm2.weight", 3, 0));
        gguf_close(&g);
    }
    tg_tape_free(tp);
}

/* ---- heads: untied written, tied left out --------------------------------------------------------- */

static void test_heads(void **state)
{
    (void)state;
    char dir[128], gdir[128], path[256];
    tmp(dir, sizeof dir, "heads_qwen");
    assert_int_equal(mkdir(dir, 0755), 0);
    qwen_tokens(dir);
    tg_tape *tp = tg_tape_new();
    /* Qwen3 untied: output.weight, the head's values */
    tg_module *m = tiny(tp, "qwen3-0.6b", 32, NULL);
    assert_int_equal(tg_export_gguf(m, tmp(path, sizeof path, "untied.gguf"), &(tg_export_options){.tokenizer = dir}),
                     TG_OK);
    gguf g;
    gguf_open(&g, path);
    assert_int_equal(g.n_t, 2 + 2 * 11 + 1);
    const gtensor *out = tensor(&g, "output.weight", 0, 64, 32);
    assert_true(t_elem(&g, out, 9 * 64 + 4) == pval(m, "out_head.weight", 9, 4));
    assert_true(t_elem(&g, out, 9 * 64 + 4) != pval(m, "tok_emb.weight", 9, 4));
    gguf_close(&g);
    /* GPT-2 whose head holds the embedding's values: tied, no output.weight */
    tmp(gdir, sizeof gdir, "heads_gpt2");
    gpt2_files(gdir);
    tg_module *gm = tiny(tp, "gpt2-small", 32, NULL);
    tg_tensor *emb = tg_module_get_parameter(gm, "tok_emb.weight");
    tg_tensor *head = tg_module_get_parameter(gm, "out_head.weight");
    memcpy(tg_data_ptr(head), tg_data_ptr(emb), 32 * 64 * sizeof(float));
    assert_int_equal(tg_export_gguf(gm, tmp(path, sizeof path, "tied.gguf"), &(tg_export_options){.tokenizer = gdir}),
                     TG_OK);
    gguf_open(&g, path);
    assert_int_equal(g.n_t, 4 + 2 * 12);
    assert_null(find_t(&g, "output.weight"));
    /* GPT-2's tokenizer from its two files: merges as strings ("\r\n" lines, a blank line skipped) */
    assert_kv_str(&g, "tokenizer.ggml.pre", "gpt-2");
    assert_int_equal(arr_len(&g, "tokenizer.ggml.merges", G_STR), 3);
    assert_arr_str(&g, "tokenizer.ggml.merges", 0, "a b");
    assert_arr_str(&g, "tokenizer.ggml.merges", 1, "\xc4\xa0 a");
    assert_arr_str(&g, "tokenizer.ggml.tokens", 10, "<|endoftext|>");
    assert_int_equal(arr_i32(&g, "tokenizer.ggml.token_type", 10), 3);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eos_token_id"), 10);
    gguf_close(&g);
    tg_tape_free(tp);
}

/* ---- the pre-tokenizer, the special tokens, the flags ------------------------------------------------ */

/* A Qwen-like tokenizer.json in dir with the given pre-tokenizer (stolen). */
static void tokenizer_with_pre(const char *dir, json_t *pre)
{
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    qwen_tokens(dir);
    json_t *j = json_load_file(path, 0, NULL);
    assert_non_null(j);
    json_object_set_new(j, "pre_tokenizer", pre);
    write_json(path, j);
}

static void test_pretokenizers(void **state)
{
    (void)state;
    char dir[128], path[256];
    tmp(dir, sizeof dir, "pre");
    assert_int_equal(mkdir(dir, 0755), 0);
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "qwen3-0.6b", 32, NULL);
    tmp(path, sizeof path, "pre.gguf");
    json_t *refused[] = {
        json_pack("{s:s}", "type", "Whitespace"),
        json_null(),
        json_pack("{s:s, s:b}", "type", "ByteLevel", "use_regex", false),
        json_pack("{s:s, s:[{s:s, s:{s:s}}, {s:s}]}", "type", "Sequence", "pretokenizers", "type", "Split", "pattern",
                  "Regex", "\\s+", "type", "ByteLevel"),
        json_pack("{s:s, s:[{s:s, s:{s:s}}, {s:s}, {s:s}]}", "type", "Sequence", "pretokenizers", "type", "Split",
                  "pattern", "Regex", QWEN2_REGEX, "type", "ByteLevel", "type", "Digits"),
        json_pack("{s:s, s:[{s:s, s:{s:s}}, {s:s}]}", "type", "Sequence", "pretokenizers", "type", "Split", "pattern",
                  "Regex", QWEN2_REGEX, "type", "Metaspace"),
        json_pack("{s:s, s:[{s:s, s:{s:s}}, {s:s}]}", "type", "Sequence", "pretokenizers", "type", "Split", "pattern",
                  "String", " ", "type", "ByteLevel"),
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        assert_non_null(refused[i]);
        tokenizer_with_pre(dir, refused[i]);
        tu_assert_one_line_error(tg_export_gguf(m, path, &(tg_export_options){.tokenizer = dir}), "export_gguf",
                                 "pre-tokenizer is none llama.cpp names");
    }
    assert_int_equal(access(path, F_OK), -1);
    /* GPT-2's ByteLevel with its regex: "gpt-2"; Llama 3's pattern: "llama-bpe";
     * with a config that does not say, llama.cpp's default BOS for each */
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    write_text(cfg, "{\"eos_token\": \"<|im_end|>\"}");
    tokenizer_with_pre(dir, json_pack("{s:s, s:b}", "type", "ByteLevel", "add_prefix_space", false));
    assert_int_equal(tg_export_gguf(m, path, &(tg_export_options){.tokenizer = dir}), TG_OK);
    gguf g;
    gguf_open(&g, path);
    assert_kv_str(&g, "tokenizer.ggml.pre", "gpt-2");
    assert_false(kv_bool(&g, "tokenizer.ggml.add_bos_token"));
    gguf_close(&g);
    tokenizer_with_pre(dir, json_pack("{s:s, s:[{s:s, s:{s:s}}, {s:s}]}", "type", "Sequence", "pretokenizers", "type",
                                      "Split", "pattern", "Regex", TG_LLAMA3_PATTERN, "type", "ByteLevel"));
    assert_int_equal(tg_export_gguf(m, path, &(tg_export_options){.tokenizer = dir}), TG_OK);
    gguf_open(&g, path);
    assert_kv_str(&g, "tokenizer.ggml.pre", "llama-bpe");
    assert_true(kv_bool(&g, "tokenizer.ggml.add_bos_token")); /* llama.cpp's default for llama-bpe */
    gguf_close(&g);
    tg_tape_free(tp);
}

static void test_specials(void **state)
{
    (void)state;
    char dir[128], path[256], cfg[256];
    tmp(dir, sizeof dir, "specials");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    /* a post-processor Sequence whose template puts <|endoftext|> first; an
     * added token past the model's 32 rows; merges in both spellings */
    json_t *post = json_pack("{s:s, s:[{s:s}, {s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}]}]}", "type", "Sequence",
                             "processors", "type", "ByteLevel", "type", "TemplateProcessing", "single", "SpecialToken",
                             "id", "<|endoftext|>", "type_id", 0, "Sequence", "id", "A", "type_id", 0);
    byte_level_tokenizer(path, QWEN2_REGEX,
                         json_pack("[o, o, o, o, o, o, o, o, o, o]", added(10, "<|endoftext|>", true),
                                   added(11, "<|im_start|>", true), added(12, "<|im_end|>", true),
                                   added(40, "<|extra|>", true), added(13, "<unused7>", false),
                                   added(14, "<\xef\xbd\x9c" "begin\xef\xbd\x9c>", false), added(15, "[@BOS@]", false),
                                   added(16, "<unused7", false), added(17, "<|>", false), added(18, "<2mass>", false)),
                         post);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *merges = json_object_get(json_object_get(j, "model"), "merges");
    json_array_set_new(merges, 2, json_string("ab c"));
    write_json(path, j);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    write_text(cfg, "{\"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|extra|>\", \"add_eos_token\": true, "
                    "\"chat_template\": [{\"name\": \"rag\", \"template\": \"r\"}, {\"name\": \"default\", "
                    "\"template\": \"{{ default }}\"}]}");
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "qwen3-0.6b", 32, NULL);
    char out[256];
    assert_int_equal(tg_export_gguf(m, tmp(out, sizeof out, "specials.gguf"), &(tg_export_options){.tokenizer = dir}),
                     TG_OK);
    gguf g;
    gguf_open(&g, out);
    assert_int_equal(arr_len(&g, "tokenizer.ggml.tokens", G_STR), 32);
    assert_arr_str(&g, "tokenizer.ggml.tokens", 31, "[PAD31]");
    assert_null(find_kv(&g, "tokenizer.ggml.padding_token_id")); /* id 40: past the rows */
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.bos_token_id"), 10);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eos_token_id"), 12);
    assert_true(kv_bool(&g, "tokenizer.ggml.add_bos_token"));
    assert_true(kv_bool(&g, "tokenizer.ggml.add_eos_token"));
    assert_kv_str(&g, "tokenizer.chat_template", "{{ default }}");
    assert_arr_str(&g, "tokenizer.ggml.merges", 1, "\xc4\xa0 a");
    assert_arr_str(&g, "tokenizer.ggml.merges", 2, "ab c");
    assert_arr_str(&g, "tokenizer.ggml.merges", 3, "x\xc4\xa0y z");
    /* added tokens that are not special but look it (the converter's
     * does_token_look_special): control tokens; the others user-defined */
    static const int32_t types[] = {3, 3, 3, 3, 3, 3, 4, 4, 3};
    for (int i = 0; i < 9; i++)
        assert_int_equal(arr_i32(&g, "tokenizer.ggml.token_type", (uint64_t)(10 + i)), types[i]);
    gguf_close(&g);
    /* a template of the text alone adds no BOS; the config's add_bos_token wins over it */
    post = json_pack("{s:s, s:[{s:{s:s, s:i}}]}", "type", "TemplateProcessing", "single", "Sequence", "id", "A",
                     "type_id", 0);
    byte_level_tokenizer(path, QWEN2_REGEX, json_pack("[o, o, o]", added(10, "<|endoftext|>", true),
                                                      added(11, "<|im_start|>", true), added(12, "<|im_end|>", true)),
                         post);
    write_text(cfg, "{\"eos_token\": \"<|im_end|>\"}");
    assert_int_equal(tg_export_gguf(m, out, &(tg_export_options){.tokenizer = dir}), TG_OK);
    gguf_open(&g, out);
    assert_false(kv_bool(&g, "tokenizer.ggml.add_bos_token"));
    assert_null(find_kv(&g, "tokenizer.ggml.add_eos_token"));
    assert_null(find_kv(&g, "tokenizer.chat_template"));
    gguf_close(&g);
    write_text(cfg, "{\"eos_token\": \"<|im_end|>\", \"add_bos_token\": true, \"chat_template\": null}");
    assert_int_equal(tg_export_gguf(m, out, &(tg_export_options){.tokenizer = dir}), TG_OK);
    gguf_open(&g, out);
    assert_true(kv_bool(&g, "tokenizer.ggml.add_bos_token"));
    gguf_close(&g);

    /* Gemma 3's SentencePiece form: the unknown token given as an object;
     * a merge that makes no token of the vocabulary changes no score */
    tmp(dir, sizeof dir, "specials_gemma");
    assert_int_equal(mkdir(dir, 0755), 0);
    gemma_tokens(dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    j = json_load_file(path, 0, NULL);
    /* merges in both spellings, one making no token; tokens that only look like bytes */
    json_t *gm_merges = json_object_get(json_object_get(j, "model"), "merges");
    json_array_set_new(gm_merges, 1, json_string("a b"));
    json_array_append_new(gm_merges, json_string("b a"));
    json_t *gv = json_object_get(json_object_get(j, "model"), "vocab");
    json_object_set_new(gv, "<0xG1>", json_integer(15));
    json_object_set_new(gv, "<0x4>", json_integer(16));
    json_object_set_new(gv, "<0x41]", json_integer(17));
    json_object_set_new(gv, "<0x4A>", json_integer(18));
    write_json(path, j);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    write_text(cfg, "{\"bos_token\": \"<bos>\", \"eos_token\": {\"content\": \"<end_of_turn>\"}, \"unk_token\": "
                    "{\"content\": \"<unk>\"}, \"pad_token\": null}");
    tg_module *gm = tiny(tp, "gemma3-270m", 20, gemma_tweak);
    assert_int_equal(tg_export_gguf(gm, out, &(tg_export_options){.tokenizer = dir}), TG_OK);
    gguf_open(&g, out);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.unknown_token_id"), 3);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eos_token_id"), 12);
    assert_int_equal(kv_u32(&g, "tokenizer.ggml.eot_token_id"), 12);
    assert_null(find_kv(&g, "tokenizer.ggml.padding_token_id"));
    assert_true(kv_bool(&g, "tokenizer.ggml.add_bos_token")); /* SentencePiece's default */
    static const float scores[] = {-1000, -1000, -1000, -1000, 0, 0, 0, 0, -1, -2, -3, -1000, -1000, -5, -1000};
    for (int i = 0; i < 15; i++) assert_true(arr_f32(&g, "tokenizer.ggml.scores", (uint64_t)i) == scores[i]);
    static const int32_t byte_types[] = {1, 1, 1, 6};
    for (int i = 0; i < 4; i++)
        assert_int_equal(arr_i32(&g, "tokenizer.ggml.token_type", (uint64_t)(15 + i)), byte_types[i]);
    gguf_close(&g);
    tg_tape_free(tp);
}

/* ---- Gemma 3's layouts ------------------------------------------------------------------------------- */

static void all_full(tg_decoder_config *c)
{
    gemma_tweak(c);
    tg_decoder_config_layer_pattern(c, 1);
}

static void no_qk_norm(tg_decoder_config *c)
{
    gemma_tweak(c);
    c->qk_norm = false;
}

/* 62 layers (Gemma 3 27B's count): llama.cpp scales queries by
 * 1 / sqrt(emb_dim / n_heads), not 1 / sqrt(head_dim) */
static void layers_62(tg_decoder_config *c)
{
    c->n_layers = 62, c->head_dim = 32, c->hidden_dim = 32, c->sliding_window = 8, c->query_pre_attn_scalar = 32;
    tg_decoder_config_layer_pattern(c, 6);
}

static void test_gemma3_layouts(void **state)
{
    (void)state;
    char dir[128], path[256];
    tmp(dir, sizeof dir, "gemma_layouts");
    assert_int_equal(mkdir(dir, 0755), 0);
    gemma_tokens(dir);
    tg_tape *tp = tg_tape_new();
    tmp(path, sizeof path, "gemma_layouts.gguf");
    tg_export_options o = {.type = TG_EXPORT_F16, .tokenizer = dir};
    /* no sliding layer: llama.cpp's period of 6 whose sliding layers see the
     * whole context with the full layers' base */
    tg_module *m = tiny(tp, "gemma3-270m", 20, all_full);
    assert_int_equal(tg_export_gguf(m, path, &o), TG_OK);
    gguf g;
    gguf_open(&g, path);
    assert_int_equal(kv_u32(&g, "gemma3.attention.sliding_window"), 64);
    assert_true(kv_f32(&g, "gemma3.rope.freq_base_swa") == 1e6f);
    assert_null(find_kv(&g, "gemma3.attention.sliding_window_pattern"));
    gguf_close(&g);
    /* without query and key norms: refused */
    tu_assert_one_line_error(tg_export_gguf(tiny(tp, "gemma3-270m", 20, no_qk_norm), path, &o), "export_gguf",
                             "needs the query and key norms");
    /* 62 layers: the query norm folds sqrt((64 / 4) / 32) */
    m = tiny(tp, "gemma3-270m", 20, layers_62);
    assert_int_equal(tg_export_gguf(m, path, &o), TG_OK);
    gguf_open(&g, path);
    assert_int_equal(kv_u32(&g, "gemma3.block_count"), 62);
    assert_null(find_kv(&g, "gemma3.attention.sliding_window_pattern"));
    const gtensor *qn = tensor(&g, "blk.61.attn_q_norm.weight", 0, 32, 0);
    const gtensor *kn = tensor(&g, "blk.61.attn_k_norm.weight", 0, 32, 0);
    for (int j = 0; j < 32; j += 5) {
        assert_true(t_elem(&g, qn, (uint64_t)j) == (pval(m, "blocks.61.att.q_norm.scale", j, 0) + 1.0f) * sqrtf(0.5f));
        assert_true(t_elem(&g, kn, (uint64_t)j) == pval(m, "blocks.61.att.k_norm.scale", j, 0) + 1.0f);
    }
    gguf_close(&g);
    tg_tape_free(tp);
}

/* ---- arguments ----------------------------------------------------------------------------------------- */

static void test_arguments(void **state)
{
    (void)state;
    char path[256], data[4096];
    tg_tape *tp = tg_tape_new();
    tg_module *m = tiny(tp, "llama3.2-1b", 32, NULL);
    tmp(path, sizeof path, "args.gguf");
    tu_assert_one_line_error(tg_export_gguf(m, NULL, NULL), "export_gguf", "NULL path");
    tu_assert_one_line_error(tg_export_gguf(tg_linear_new(tp, 2, 2, false), path, NULL), "export_gguf",
                             "is a Linear, not a decoder");
    /* no options: float32 and the family's installed tokenizer, which Llama 3 has not */
    data_dir(data, sizeof data);
    char *saved = getenv("TAPEGRAD_DATA") ? strdup(getenv("TAPEGRAD_DATA")) : NULL;
    assert_int_equal(setenv("TAPEGRAD_DATA", data, 1), 0);
    tu_assert_one_line_error(tg_export_gguf(m, path, NULL), "Llama 3's tokenizer is not installed");
    /* a data folder without GPT-2's files: the reason, and what to give instead */
    assert_int_equal(setenv("TAPEGRAD_DATA", g_tmp, 1), 0);
    tu_assert_one_line_error(tg_export_gguf(m, path, NULL), "Llama 3's tokenizer", "has no gpt2/encoder.json",
                             "give the tokenizer's files");
    if (saved) setenv("TAPEGRAD_DATA", saved, 1);
    else unsetenv("TAPEGRAD_DATA");
    free(saved);
    assert_int_equal(access(path, F_OK), -1);
    tg_tape_free(tp);
}

/* ---- tokenizer sources ------------------------------------------------------------------------------- */

/* tg__export_tokenizer_load of text written to name in g_tmp: fails with each of the substrings. */
#define assert_tokenizer_refused(name, text, family, ...)                                                        \
    do {                                                                                                         \
        char p_[256];                                                                                            \
        tg__export_tokenizer t_;                                                                                 \
        write_text(tmp(p_, sizeof p_, name), text);                                                              \
        tu_assert_one_line_error(tg__export_tokenizer_load(p_, family, &t_), __VA_ARGS__);                       \
        assert_null(t_.tokenizer), assert_null(t_.config);                                                       \
    } while (0)

static void test_tokenizer_sources(void **state)
{
    (void)state;
    const tg_gpt_family Q = TG_GPT_FAMILY_QWEN3;
    tu_assert_one_line_error(tg__export_tokenizer_load(NULL, Q, NULL), "NULL tokenizer");
    /* tokenizer.json's checks */
    assert_tokenizer_refused("t.json", "[1, 2]", Q, "t.json is not a JSON object");
    assert_tokenizer_refused("t.json", "", Q, "t.json line");
    assert_tokenizer_refused("t.json", "{\"model\": {\"type\": 3, \"vocab\": {\"a\": 0}, \"merges\": []}}", Q,
                             "model type ?: only BPE");
    assert_tokenizer_refused("t.json", "{\"model\": \"BPE\"}", Q, "no \"model\" object");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [[1, \"a\"]]}}", Q,
                             "model.merges[0]");
    assert_tokenizer_refused("t.json",
                             "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": "
                             "16777216, \"content\": \"b\"}]}",
                             Q, "added_tokens[0]");
    assert_tokenizer_refused("t.json",
                             "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 1, "
                             "\"content\": 2}]}",
                             Q, "added_tokens[0]");
    assert_tokenizer_refused("t.json",
                             "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": -1, "
                             "\"content\": \"b\"}]}",
                             Q, "added_tokens[0]");
    assert_tokenizer_refused("t.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": [\"a\"], \"merges\": []}}", Q,
                             "model.vocab must be a non-empty object");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {}, \"merges\": []}}", Q,
                             "model.vocab must be a non-empty object");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": 0, \"b\": -1}, \"merges\": []}}", Q,
                             "the id of \"b\" is not an integer in [0, 2^24)");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": \"0\"}, \"merges\": []}}", Q,
                             "the id of \"a\"");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": 16777216}, \"merges\": []}}", Q, "the id of");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": {}}}", Q,
                             "model.merges must be an array");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": 0}}}", Q, "model.merges must be an array");
    assert_tokenizer_refused("t.json",
                             "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [\"a a\", [\"a\", \"a\", \"a\"]]}}", Q,
                             "model.merges[1]");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [[\"a\", 1]]}}", Q,
                             "model.merges[0]");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": [3]}}", Q, "model.merges[0]");
    assert_tokenizer_refused("t.json", "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": {}}", Q,
                             "added_tokens must be an array");
    assert_tokenizer_refused("t.json",
                             "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": 1, "
                             "\"content\": \"b\"}, {\"id\": 2, \"content\": \"\"}]}",
                             Q, "added_tokens[1]");
    assert_tokenizer_refused("t.json",
                             "{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"added_tokens\": [{\"id\": \"1\", "
                             "\"content\": \"b\"}]}",
                             Q, "added_tokens[0]");
    if (geteuid() != 0) { /* a file that cannot be read (root reads it) */
        char p[256];
        write_text(tmp(p, sizeof p, "unreadable.json"), "{}");
        assert_int_equal(chmod(p, 0), 0);
        tg__export_tokenizer u;
        tu_assert_one_line_error(tg__export_tokenizer_load(p, Q, &u), "cannot read", "unreadable.json");
    }
    /* merges in both spellings, an untyped model: read */
    char path[256], dir[128], cfg[256];
    tg__export_tokenizer t;
    write_text(tmp(path, sizeof path, "both.json"),
               "{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"abb\": 5}, "
               "\"merges\": [\"a b\", [\"ab\", \"b\"]]}, "
               "\"added_tokens\": [{\"id\": 7, \"content\": \"<|endoftext|>\"}]}");
    assert_int_equal(tg__export_tokenizer_load(path, TG_GPT_FAMILY_GPT2, &t), TG_OK);
    assert_int_equal(t.n_base, 6);
    assert_int_equal(t.n_vocab, 8);
    assert_int_equal(t.eos, 7); /* GPT-2's config written for it: <|endoftext|> for all */
    assert_int_equal(t.bos, 7);
    assert_int_equal(t.eot, 7);
    assert_int_equal(t.pad, -1);
    assert_null(t.chat_template);
    assert_null(t.config_path);
    assert_string_equal(t.json_path, path);
    assert_int_equal(tg__export_tokenizer_id(&t, "abb"), 5);
    assert_int_equal(tg__export_tokenizer_id(&t, "<|endoftext|>"), 7);
    assert_int_equal(tg__export_tokenizer_id(&t, "ba"), -1);
    assert_int_equal(tg__export_tokenizer_id(&t, NULL), -1);
    assert_int_equal(tg__export_tokenizer_id(NULL, "a"), -1);
    assert_int_equal(tg__export_tokenizer_fits(&t, 6, "export_gguf"), TG_OK);
    tu_assert_one_line_error(tg__export_tokenizer_fits(&t, 5, "export_gguf"), "export_gguf", "has 6 ids", "5 rows");
    tg__export_tokenizer_free(&t);
    assert_int_equal(tg__export_tokenizer_id(&t, "a"), -1);
    tg__export_tokenizer_free(&t); /* freed: nothing */
    tg__export_tokenizer_free(NULL);

    /* what is a tiktoken rank file and what is not */
    tmp(dir, sizeof dir, "ranks");
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_tokenizer_refused("ranks/r1.txt", "QQ== 0", TG_GPT_FAMILY_LLAMA3, "r1.txt is a tiktoken rank file");
    assert_tokenizer_refused("ranks/r2.txt", "QQ== 0\r\nQg== 1\r\n", TG_GPT_FAMILY_LLAMA3, "tiktoken rank file");
    assert_tokenizer_refused("ranks/n1.txt", "QQ==0\n", TG_GPT_FAMILY_LLAMA3, "n1.txt line");
    assert_tokenizer_refused("ranks/n2.txt", "QQ== x\n", TG_GPT_FAMILY_LLAMA3, "n2.txt line");
    assert_tokenizer_refused("ranks/n3.txt", "QQ== 12 3\n", TG_GPT_FAMILY_LLAMA3, "n3.txt line");
    assert_tokenizer_refused("ranks/n4.txt", " 0\n", TG_GPT_FAMILY_LLAMA3, "n4.txt line");
    assert_tokenizer_refused("ranks/n5.txt", "QQ==", TG_GPT_FAMILY_LLAMA3, "n5.txt line");
    /* a folder's tokenizer.model that is not one: no tokenizer */
    write_text(tmp(path, sizeof path, "ranks/tokenizer.model"), "\x0a\x0b<unk>");
    tu_assert_one_line_error(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_LLAMA3, &t), dir,
                             "holds no tokenizer.json, nor GPT-2's encoder.json and vocab.bpe");
    write_text(path, "QQ== 0\n");
    tu_assert_one_line_error(tg__export_tokenizer_load(dir, Q, &t), "ranks/tokenizer.model is a tiktoken rank file");

    /* GPT-2's files: given by folder or by encoder.json; each file's checks */
    tmp(dir, sizeof dir, "g2");
    assert_int_equal(mkdir(dir, 0755), 0);
    char enc[256], bpe[256];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    write_text(enc, "{\"a\": 0, \"b\": 1, \"ab\": 2, \"<|endoftext|>\": 3}");
    /* encoder.json alone is no tokenizer.json */
    tu_assert_one_line_error(tg__export_tokenizer_load(enc, TG_GPT_FAMILY_GPT2, &t), "encoder.json", "no \"model\"");
    tu_assert_one_line_error(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_GPT2, &t), "holds no tokenizer.json");
    write_text(bpe, "#version: 0.2\na b\n");
    assert_int_equal(tg__export_tokenizer_load(enc, TG_GPT_FAMILY_GPT2, &t), TG_OK);
    assert_null(t.json_path);
    assert_int_equal(t.n_vocab, 4);
    assert_string_equal(json_string_value(json_object_get(t.config, "tokenizer_class")), "GPT2Tokenizer");
    tg__export_tokenizer_free(&t);
    static const struct {
        const char *encoder, *merges, *want;
    } bad[] = {
        {"[0]", "#version: 0.2\na b\n", "encoder.json is not a JSON object"},
        {"{\"a\": 0, \"<|endoftext|>\": -3}", "a b\n", "the vocabulary: the id of \"<|endoftext|>\""},
        {"{\"a\": 0, \"b\": 1}", "a b\n", "encoder.json: no \"<|endoftext|>\" token"},
        {"{\"a\": 0, \"<|endoftext|>\": 1}", "#version: 0.2\n", "vocab.bpe: no merges"},
        {"{\"a\": 0, \"<|endoftext|>\": 1}", "", "vocab.bpe: no merges"},
        {"{\"a\": 0, \"<|endoftext|>\": 1}", "a b\n\xff b\n", "vocab.bpe line 2: not UTF-8"},
        {"{\"a\": 0, \"<|endoftext|>\": 1}", "#version: 0.2\n a\n", "vocab.bpe line 2: expected two tokens"},
        {"{\"a\": 0, \"<|endoftext|>\": 1}", "a \n", "vocab.bpe line 1: expected two tokens"},
        {"{\"a\": 0, \"<|endoftext|>\": 1}", "a b\nab\n", "vocab.bpe line 2"},
        {"{\"a\": 0, \"<|endoftext|>\": 1}", "a b\na b c\n", "vocab.bpe line 2"},
        {"{\"a\": 0, \"<|endoftext|>\": 1}", "a b\na  b\n", "vocab.bpe line 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_text(enc, bad[i].encoder);
        write_text(bpe, bad[i].merges);
        if (tg__export_tokenizer_load(dir, TG_GPT_FAMILY_GPT2, &t) == TG_OK) fail_msg("case %zu read", i);
        tu_assert_one_line_error(TG_EINVAL, bad[i].want);
        assert_null(t.tokenizer);
    }

    /* tokenizer_config.json's checks */
    tmp(dir, sizeof dir, "cfgs");
    assert_int_equal(mkdir(dir, 0755), 0);
    qwen_tokens(dir);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    static const struct {
        const char *config, *want;
    } cfgs[] = {
        {"[]", "tokenizer_config.json is not a JSON object"},
        {"{\"bos_token\": 3}", "\"bos_token\" must be a token's text, an object with \"content\" or null"},
        {"{\"bos_token\": \"<s>\"}", "bos_token \"<s>\" is not a token of the tokenizer"},
        {"{\"pad_token\": {\"content\": \"<pad>\"}}", "pad_token \"<pad>\" is not a token"},
        {"{\"eos_token\": [\"<|im_end|>\"]}", "\"eos_token\" must be"},
        {"{\"chat_template\": 3}", "\"chat_template\" must be a string, a list of named templates or null"},
        {"{\"chat_template\": {\"default\": \"x\"}}", "\"chat_template\" must be"},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        write_text(cfg, cfgs[i].config);
        tu_assert_one_line_error(tg__export_tokenizer_load(dir, Q, &t), "tokenizer_config.json", cfgs[i].want);
        assert_null(t.tokenizer);
    }
    /* a list of templates without a "default": none; tokens given as objects or null */
    write_text(cfg, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"t\"}, {\"name\": \"default\"}, 3], "
                    "\"bos_token\": {\"content\": \"<|endoftext|>\"}, \"eos_token\": null, \"pad_token\": {}}");
    assert_int_equal(tg__export_tokenizer_load(dir, Q, &t), TG_OK);
    assert_null(t.chat_template);
    assert_int_equal(t.bos, 10);
    assert_int_equal(t.eos, -1);
    assert_int_equal(t.pad, -1);
    assert_int_equal(t.eot, 12); /* Qwen's chat tokens: <|im_end|> */
    assert_non_null(t.config_path);
    tg__export_tokenizer_free(&t);

    /* configs written for each chat format's tokens */
    unlink(cfg);
    assert_int_equal(tg__export_tokenizer_load(dir, Q, &t), TG_OK);
    assert_string_equal(json_string_value(json_object_get(t.config, "tokenizer_class")), "Qwen2Tokenizer");
    assert_int_equal(t.eos, 12), assert_int_equal(t.pad, 10), assert_int_equal(t.bos, -1);
    assert_non_null(strstr(t.chat_template, "enable_thinking"));
    tg__export_tokenizer_free(&t);
    tmp(dir, sizeof dir, "gemma_eot");
    assert_int_equal(mkdir(dir, 0755), 0);
    gemma_tokens(dir);
    assert_int_equal(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_GEMMA3, &t), TG_OK);
    assert_string_equal(json_string_value(json_object_get(t.config, "tokenizer_class")), "GemmaTokenizer");
    assert_int_equal(t.bos, 2), assert_int_equal(t.eos, 1), assert_int_equal(t.pad, 0), assert_int_equal(t.eot, 12);
    assert_string_equal(json_string_value(json_object_get(t.config, "unk_token")), "<unk>");
    tg__export_tokenizer_free(&t);
    /* Gemma's tokens without <eos>, <pad> and <unk>: the end of a turn ends the text */
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *vocab = json_object_get(json_object_get(j, "model"), "vocab");
    json_object_del(vocab, "<eos>"), json_object_del(vocab, "<pad>"), json_object_del(vocab, "<unk>");
    json_t *add = json_array();
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(j, "added_tokens"), i, a) {
        const char *c = json_string_value(json_object_get(a, "content"));
        if (strcmp(c, "<eos>") && strcmp(c, "<pad>") && strcmp(c, "<unk>")) json_array_append(add, a);
    }
    json_object_set_new(j, "added_tokens", add);
    json_object_del(json_object_get(j, "model"), "unk_token");
    write_json(path, j);
    assert_int_equal(tg__export_tokenizer_load(dir, TG_GPT_FAMILY_GEMMA3, &t), TG_OK);
    assert_int_equal(t.eos, 12), assert_int_equal(t.pad, -1);
    assert_string_equal(json_string_value(json_object_get(t.config, "eos_token")), "<end_of_turn>");
    assert_true(json_is_null(json_object_get(t.config, "unk_token")));
    tg__export_tokenizer_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_names),     cmocka_unit_test(test_f16),
        cmocka_unit_test(test_q8_0),           cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_gpt2_tokenizer_json), cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_q8_0_fallback),  cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_refusals),       cmocka_unit_test(test_tokenizer_errors),
        cmocka_unit_test(test_types),          cmocka_unit_test(test_heads),
        cmocka_unit_test(test_pretokenizers),  cmocka_unit_test(test_specials),
        cmocka_unit_test(test_gemma3_layouts), cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_tokenizer_sources), cmocka_unit_test(test_bf16_weights),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
