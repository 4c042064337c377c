/* Hugging Face folders (tg_export_hf): tiny decoders of each family
 * exported and read back by the loaders (tg_decoder_config_from_hf,
 * tg_decoder_load_hf) give the same configuration and, in float32, the same
 * logits bit for bit; float16 and bfloat16 folders hold the weights rounded
 * to nearest even; a small max_shard_size gives shards and their index; the
 * JSON files are written as transformers, tokenizers and PEFT write them;
 * LoRA adapters as PEFT's files, and merged into the weights
 * (tg_lora_merge); each feature a family's class cannot hold is refused
 * (tg_decoder_hf_state_dict); and every bad path or full disk leaves
 * nothing behind, for the folder and for the single file the GGUF writer
 * uses (src/export/atomic.c, compiled into this test: private to the
 * library).
 *
 * The models have a vocabulary of V ids and small tokenizers of their own
 * (written by setup), except where the installed GPT-2 and Qwen3 files are
 * the point: GPT-2's tokenizer.json built from encoder.json and vocab.bpe,
 * and Qwen3's files written byte for byte. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "export_internal.h" /* the atomic file (atomic.c is compiled into this test) */
#include "testutil.h"

static char g_data[1024];      /* the source tree's data/ */
static char g_qwen_tok[1100];  /* data/qwen3/tokenizer.json (a tokenizer_config.json beside it) */
static char g_gpt2_tok[1100];  /* data/gpt2 (encoder.json, vocab.bpe) */
static char g_fix[64];         /* setup's folder of small tokenizers */
static char g_small_tok[128];  /* g_fix/qwen: a tokenizer.json of 40 BPE ids and Qwen's three special tokens */
static char g_small_gpt2[128]; /* g_fix/gpt2: GPT-2's encoder.json + vocab.bpe of the same 40 ids + <|endoftext|> */

/* The tiny models' vocabulary: the small tokenizers' 43 ids, padded. */
#define V 48

/* The small tokenizers' BPE vocabulary (ids 0..39, "\xc4\xa0" GPT-2's byte-level space) and merges. */
static const char *const SMALL_VOCAB[40] = {
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s", "t",
    "u", "v", "w", "x", "y", "z", "\xc4\xa0", "th", "the", "\xc4\xa0t", "\xc4\xa0the", "an", "in", "er", "on", "re",
    "at", "en", "or", "\xc4\xa0" "a"};
static const char *const SMALL_MERGES[] = {"t h", "th e", "\xc4\xa0 t", "\xc4\xa0t he", "a n", "i n", "e r",
                                           "o n", "r e", "a t", "e n", "o r", "\xc4\xa0 a"};

static json_t *small_vocab(void)
{
    json_t *v = json_object();
    for (int i = 0; i < 40; i++) json_object_set_new(v, SMALL_VOCAB[i], json_integer(i));
    return v;
}

static json_t *added_token(int id, const char *content)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", false,
                     "lstrip", false, "rstrip", false, "normalized", false, "special", true);
}

/* g_fix/qwen/tokenizer.json (Qwen2's pre-tokenizer, no tokenizer_config.json:
 * the exporter writes Qwen's) and g_fix/gpt2's two files. */
static int write_small_tokenizers(void)
{
    char path[256];
    snprintf(g_small_tok, sizeof g_small_tok, "%s/qwen", g_fix);
    snprintf(g_small_gpt2, sizeof g_small_gpt2, "%s/gpt2", g_fix);
    if (mkdir(g_small_tok, 0755) != 0 || mkdir(g_small_gpt2, 0755) != 0) return -1;
    json_t *merges = json_array();
    for (size_t i = 0; i < sizeof SMALL_MERGES / sizeof *SMALL_MERGES; i++)
        json_array_append_new(merges, json_string(SMALL_MERGES[i]));
    static const char regex[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    json_t *tok = json_pack(
        "{s:s, s:n, s:n, s:[o, o, o], s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}, "
        "s:{s:s}, s:{s:s}, s:{s:s, s:o, s:o}}",
        "version", "1.0", "truncation", "padding", "added_tokens", added_token(40, "<|endoftext|>"),
        added_token(41, "<|im_start|>"), added_token(42, "<|im_end|>"), "normalizer", "type", "NFC", "pre_tokenizer",
        "type", "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", regex, "behavior", "Isolated",
        "invert", false, "type", "ByteLevel", "add_prefix_space", false, "trim_offsets", false, "use_regex", false,
        "post_processor", "type", "ByteLevel", "decoder", "type", "ByteLevel", "model", "type", "BPE", "vocab",
        small_vocab(), "merges", merges);
    snprintf(path, sizeof path, "%s/tokenizer.json", g_small_tok);
    int st = tok && json_dump_file(tok, path, JSON_INDENT(2)) == 0 ? 0 : -1;
    json_decref(tok);
    json_t *enc = small_vocab();
    json_object_set_new(enc, "<|endoftext|>", json_integer(40));
    snprintf(path, sizeof path, "%s/encoder.json", g_small_gpt2);
    if (json_dump_file(enc, path, 0) != 0) st = -1;
    json_decref(enc);
    snprintf(path, sizeof path, "%s/vocab.bpe", g_small_gpt2);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs("#version: 0.2\n", f);
    for (size_t i = 0; i < sizeof SMALL_MERGES / sizeof *SMALL_MERGES; i++) fprintf(f, "%s\n", SMALL_MERGES[i]);
    return fclose(f) == 0 ? st : -1;
}

static int setup(void **state)
{
    (void)state;
    tu_ref_path(g_data, sizeof g_data, "../../data");
    snprintf(g_qwen_tok, sizeof g_qwen_tok, "%s/qwen3/tokenizer.json", g_data);
    snprintf(g_gpt2_tok, sizeof g_gpt2_tok, "%s/gpt2", g_data);
    /* the families' installed tokenizers (tokenizer NULL): the source tree's */
    setenv("TAPEGRAD_DATA", g_data, 1);
    strcpy(g_fix, "/tmp/tg_export_tok_XXXXXX");
    if (!mkdtemp(g_fix)) return -1;
    return write_small_tokenizers();
}

static void remove_tree(const char *path);

static int teardown(void **state)
{
    (void)state;
    remove_tree(g_fix);
    return 0;
}


/* ---- folders --------------------------------------------------------------------------------------- */

/* A new empty folder under /tmp (malloc'd). */
static char *new_folder(void)
{
    char tmpl[] = "/tmp/tg_export_XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static char *path_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char *sub = path_in(path, e->d_name);
            remove_tree(sub);
            free(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* The entries of dir (not . and ..), sorted, joined by spaces (malloc'd). */
static char *listing(const char *dir)
{
    char *names[256];
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 256)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names[n++] = strdup(e->d_name);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1], names[j - 1] = t;
        }
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(names[i]) + 1;
    char *s = calloc(1, len);
    for (int i = 0; i < n; i++) {
        if (i) strcat(s, " ");
        strcat(s, names[i]);
        free(names[i]);
    }
    return s;
}

static void assert_listing(const char *dir, const char *want)
{
    char *got = listing(dir);
    if (strcmp(got, want) != 0) fail_msg("%s holds \"%s\", expected \"%s\"", dir, got, want);
    free(got);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static char *read_in(const char *dir, const char *name, size_t *len)
{
    char *p = path_in(dir, name);
    size_t n;
    char *b = tu_read_file(p, len ? len : &n);
    free(p);
    return b;
}

static json_t *json_in(const char *dir, const char *name)
{
    char *p = path_in(dir, name);
    json_error_t err;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &err);
    if (!j) fail_msg("%s: %s", p, err.text);
    free(p);
    return j;
}

/* {"format": "pt"}: the __metadata__ save_pretrained and PEFT write */
static bool is_pt_metadata(const json_t *v)
{
    json_t *pt = json_pack("{s:s}", "format", "pt");
    bool same = json_equal(v, pt);
    json_decref(pt);
    return same;
}

static void assert_same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    char *x = tu_read_file(a, &na), *y = tu_read_file(b, &nb);
    if (na != nb || memcmp(x, y, na) != 0) fail_msg("%s (%zu bytes) differs from %s (%zu bytes)", a, na, b, nb);
    free(x), free(y);
}

/* A safetensors file's header (the JSON after the 8-byte length). */
static json_t *st_header(const char *dir, const char *name)
{
    size_t len;
    char *b = read_in(dir, name, &len);
    assert_true(len >= 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | (uint8_t)b[i];
    assert_true(n % 8 == 0 && 8 + n <= len);
    json_t *h = json_loadb(b + 8, n, 0, NULL);
    assert_non_null(h);
    free(b);
    return h;
}

/* ---- tiny decoders ------------------------------------------------------------------------------------ */

/* The family's preset, shrunk: two or three layers of width 16, a
 * vocabulary of V ids (the small tokenizers'). */
static tg_decoder_config tiny(tg_gpt_family family)
{
    tg_decoder_config c;
    static const char *const preset[] = {"gpt2-small", "qwen3-0.6b", "llama3.2-1b", "gemma3-270m"};
    assert_int_equal(tg_decoder_config_preset(preset[family], &c), TG_OK);
    c.emb_dim = 16, c.n_layers = 2, c.context_length = 32, c.vocab_size = V;
    switch (family) {
    case TG_GPT_FAMILY_GPT2:
        c.n_heads = 2, c.drop_rate = 0.0, c.qkv_bias = true;
        break;
    case TG_GPT_FAMILY_QWEN3:
        c.n_heads = 2, c.n_kv_groups = 1, c.head_dim = 8, c.hidden_dim = 24, c.tie_head = true;
        break;
    case TG_GPT_FAMILY_LLAMA3:
        c.n_heads = 4, c.n_kv_groups = 2, c.hidden_dim = 24;
        break;
    case TG_GPT_FAMILY_GEMMA3:
        c.n_heads = 2, c.n_kv_groups = 1, c.head_dim = 8, c.hidden_dim = 24, c.n_layers = 3;
        c.sliding_window = 4, c.query_pre_attn_scalar = 8, c.tie_head = true;
        assert_int_equal(tg_decoder_config_layer_pattern(&c, 2), TG_OK);
        break;
    }
    return c;
}

static const char *tokenizer_of(tg_gpt_family family)
{
    return family == TG_GPT_FAMILY_GPT2 ? g_small_gpt2 : g_small_tok;
}

static tg_module *build(tg_tape *tp, const tg_decoder_config *c, uint64_t seed)
{
    tg_manual_seed(seed);
    tg_module *m = tg_decoder_new(tp, c);
    tu_assert_ok(m);
    tg_module_train(m, false);
    return m;
}

/* Every float32 parameter set to values of its own (RMSNorm weights start
 * at one or zero, LoRA's B at zero: this makes every tensor count). */
static void randomize(tg_tape *tp, tg_module *m, uint64_t seed)
{
    tg_named_list ps;
    assert_int_equal(tg_module_named_parameters(tp, m, &ps), TG_OK);
    for (int i = 0; i < ps.n; i++)
        if (ps.tensors[i]->dtype == TG_F32) {
            float *x = tg_data_ptr(ps.tensors[i]);
            for (int64_t k = 0; k < tg_numel(ps.tensors[i]); k++)
                x[k] = (float)(0.5 * sin(1.7 * (double)k + (double)i + (double)seed));
        }
}

static tg_tensor *logits_of(tg_tape *tp, tg_module *m)
{
    tg_decoder_config c;
    assert_int_equal(tg_decoder_get_config(m, &c), TG_OK);
    int64_t ids[] = {1, 5, 100, 2000, 7, 42, 50256, 3};
    for (int i = 0; i < 8; i++) ids[i] %= c.vocab_size;
    tg_tensor *x = tg_from_data(tp, TG_I64, 2, (int64_t[]){1, 8}, ids);
    bool grad = tg_set_grad_enabled(false);
    tg_tensor *y = tg_module_forward(tp, m, x);
    tg_set_grad_enabled(grad);
    tu_assert_ok(y);
    return y;
}

static void assert_same_config(const tg_decoder_config *given, const tg_decoder_config *read)
{
    tg_decoder_config a, b;
    assert_int_equal(tg_decoder_config_resolve(given, &a), TG_OK);
    assert_int_equal(tg_decoder_config_resolve(read, &b), TG_OK);
#define SAME(f) if (a.f != b.f) fail_msg("config: %s is %g, read back %g", #f, (double)a.f, (double)b.f)
    SAME(vocab_size); SAME(context_length); SAME(emb_dim); SAME(n_heads); SAME(n_layers); SAME(drop_rate);
    SAME(qkv_bias); SAME(family); SAME(hidden_dim); SAME(head_dim); SAME(n_kv_groups); SAME(qk_norm);
    SAME(rope_base); SAME(rope_freq.factor); SAME(rope_freq.low_freq_factor); SAME(rope_freq.high_freq_factor);
    SAME(rope_freq.original_context_length); SAME(norm_eps); SAME(tie_head); SAME(norm); SAME(norm_offset);
    SAME(post_norms); SAME(positions); SAME(rope_local_base); SAME(mlp); SAME(query_pre_attn_scalar);
    SAME(sliding_window); SAME(emb_scale);
#undef SAME
    for (int64_t i = 0; i < a.n_layers; i++)
        if (a.layer_types[i] != b.layer_types[i]) fail_msg("config: layer %lld's type differs", (long long)i);
}

/* The folder read back: config.json gives the configuration, the model
 * built from it loads the weights. */
static tg_module *load_back(tg_tape *tp, const char *dir, const tg_decoder_config *given)
{
    tg_decoder_config c;
    if (tg_decoder_config_from_hf(dir, &c) != TG_OK) fail_msg("config_from_hf: %s", tg_last_error());
    assert_same_config(given, &c);
    tg_module *m = build(tp, &c, 99);
    if (tg_decoder_load_hf(m, dir) != TG_OK) fail_msg("load_hf: %s", tg_last_error());
    return m;
}

static void export_ok(tg_module *m, const char *dir, const tg_export_options *o)
{
    if (tg_export_hf(m, dir, o) != TG_OK) fail_msg("export_hf %s: %s", dir, tg_last_error());
}

/* ---- (a) each family in float32: the same configuration and logits ------------------------------------- */

static void round_trip(tg_gpt_family family, const char *files)
{
    char *parent = new_folder(), *dir = path_in(parent, "model");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(family);
    tg_module *a = build(tp, &c, 1);
    randomize(tp, a, 1);
    export_ok(a, dir, &(tg_export_options){.tokenizer = tokenizer_of(family)});
    assert_listing(parent, "model"); /* no temporary folder left beside it */
    assert_listing(dir, files);
    tg_module *b = load_back(tp, dir, &c);
    tu_assert_close(logits_of(tp, b), logits_of(tp, a), 0, 0, "logits read back");

    /* the weights in the file: __metadata__ {"format": "pt"}, F32 */
    json_t *h = st_header(dir, "model.safetensors");
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v) {
        if (strcmp(k, "__metadata__") == 0)
            assert_true(is_pt_metadata(v));
        else
            assert_string_equal(json_string_value(json_object_get(v, "dtype")), "F32");
    }
    json_decref(h);
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

static const char MODEL_FILES[] =
    "config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json";

static void test_gpt2(void **state)
{
    (void)state;
    round_trip(TG_GPT_FAMILY_GPT2, MODEL_FILES);
    /* GPT-2's installed files (no options: the family's tokenizer, float32):
     * the tokenizer.json built from encoder.json and vocab.bpe reads back as
     * a tokenizer that encodes as GPT-2's; config.json names <|endoftext|> */
    char *parent = new_folder(), *dir = path_in(parent, "g");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
    c.vocab_size = 50257;
    export_ok(build(tp, &c, 2), dir, NULL);
    json_t *cfg = json_in(dir, "config.json");
    assert_int_equal(json_integer_value(json_object_get(cfg, "bos_token_id")), 50256);
    assert_int_equal(json_integer_value(json_object_get(cfg, "eos_token_id")), 50256);
    assert_int_equal(json_integer_value(json_object_get(cfg, "vocab_size")), 50257);
    assert_string_equal(json_string_value(json_object_get(cfg, "torch_dtype")), "float32");
    json_decref(cfg);
    char *path = path_in(dir, "tokenizer.json");
    tg_tokenizer *got = tg_tokenizer_load_json(path), *want = tg_tokenizer_load_dir(g_gpt2_tok);
    tu_assert_ok(got), tu_assert_ok(want);
    static const char text[] = "Hello, world! It's 2024 caf\xc3\xa9 \xe2\x80\x94 done.";
    int64_t *a, *b;
    size_t na, nb;
    assert_int_equal(tg_tokenizer_encode(got, text, strlen(text), &a, &na), TG_OK);
    assert_int_equal(tg_tokenizer_encode(want, text, strlen(text), &b, &nb), TG_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(a), free(b), free(path);
    tg_tokenizer_free(got), tg_tokenizer_free(want);

    /* the book's GPT-2 without query/key/value biases (GPT_CONFIG_124M):
     * GPT2LMHeadModel's c_attn has one, written as zeros; read back with
     * qkv_bias, the same logits */
    c = tiny(TG_GPT_FAMILY_GPT2);
    c.qkv_bias = false;
    tg_module *m = build(tp, &c, 3);
    randomize(tp, m, 3);
    export_ok(m, dir, &(tg_export_options){.tokenizer = g_small_gpt2});
    tg_decoder_config read;
    assert_int_equal(tg_decoder_config_from_hf(dir, &read), TG_OK);
    assert_true(read.qkv_bias);
    c.qkv_bias = true;
    tg_module *back = load_back(tp, dir, &c);
    tu_assert_close(logits_of(tp, back), logits_of(tp, m), 0, 0, "GPT-2 without qkv bias");
    tu_assert_close(tg_module_get_parameter(back, "trf_blocks.1.att.W_value.bias"),
                    tg_zeros(tp, TG_F32, 1, (int64_t[]){16}), 0, 0, "zero bias");
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}
static void test_qwen3(void **state)
{
    (void)state;
    round_trip(TG_GPT_FAMILY_QWEN3, MODEL_FILES);
}
static void test_llama3(void **state)
{
    (void)state;
    round_trip(TG_GPT_FAMILY_LLAMA3, MODEL_FILES);
}
static void test_gemma3(void **state)
{
    (void)state;
    round_trip(TG_GPT_FAMILY_GEMMA3, MODEL_FILES);
}

/* ---- (b) config.json as transformers writes it ------------------------------------------------------ */

static const char QWEN3_CONFIG[] =
    "{\n"
    "  \"architectures\": [\n"
    "    \"Qwen3ForCausalLM\"\n"
    "  ],\n"
    "  \"attention_bias\": false,\n"
    "  \"attention_dropout\": 0.0,\n"
    "  \"bos_token_id\": null,\n"
    "  \"eos_token_id\": 151645,\n"
    "  \"head_dim\": 8,\n"
    "  \"hidden_act\": \"silu\",\n"
    "  \"hidden_size\": 16,\n"
    "  \"initializer_range\": 0.02,\n"
    "  \"intermediate_size\": 24,\n"
    "  \"max_position_embeddings\": 32,\n"
    "  \"max_window_layers\": 2,\n"
    "  \"model_type\": \"qwen3\",\n"
    "  \"num_attention_heads\": 2,\n"
    "  \"num_hidden_layers\": 2,\n"
    "  \"num_key_value_heads\": 1,\n"
    "  \"rms_norm_eps\": 1e-06,\n"
    "  \"rope_scaling\": null,\n"
    "  \"rope_theta\": 1000000.0,\n"
    "  \"sliding_window\": null,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"torch_dtype\": \"bfloat16\",\n"
    "  \"use_cache\": true,\n"
    "  \"use_sliding_window\": false,\n"
    "  \"vocab_size\": 151936\n"
    "}\n";

static void test_config_files(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "q");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_QWEN3);
    c.vocab_size = 151936;
    tg_module *m = build(tp, &c, 3);
    /* the family's installed tokenizer (data/qwen3): tokenizer.json written
     * from its object is the file, byte for byte (the tokenizers library's
     * pretty printing); tokenizer_config.json is copied */
    export_ok(m, dir, &(tg_export_options){.type = TG_EXPORT_BF16});
    size_t len;
    char *text = read_in(dir, "config.json", &len);
    assert_string_equal(text, QWEN3_CONFIG);
    free(text);
    text = read_in(dir, "generation_config.json", &len);
    assert_string_equal(text, "{\n  \"eos_token_id\": 151645,\n  \"pad_token_id\": 151643\n}\n");
    free(text);
    char *tok = path_in(dir, "tokenizer.json"), *tcfg = path_in(dir, "tokenizer_config.json"), src_cfg[1200];
    assert_same_bytes(tok, g_qwen_tok);
    snprintf(src_cfg, sizeof src_cfg, "%s/qwen3/tokenizer_config.json", g_data);
    assert_same_bytes(tcfg, src_cfg);
    free(tok), free(tcfg);

    /* Llama 3's rope_scaling and untied head; GPT-2's names; Gemma 3's pattern */
    struct {
        tg_gpt_family family;
        const char *key, *want;
    } cases[] = {
        {TG_GPT_FAMILY_LLAMA3, "rope_scaling",
         "{\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
         "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}"},
        {TG_GPT_FAMILY_LLAMA3, "tie_word_embeddings", "false"},
        {TG_GPT_FAMILY_LLAMA3, "architectures", "[\"LlamaForCausalLM\"]"},
        {TG_GPT_FAMILY_LLAMA3, "head_dim", "4"},
        {TG_GPT_FAMILY_GPT2, "activation_function", "\"gelu_new\""},
        {TG_GPT_FAMILY_GPT2, "n_embd", "16"},
        {TG_GPT_FAMILY_GPT2, "n_head", "2"},
        {TG_GPT_FAMILY_GPT2, "n_layer", "2"},
        {TG_GPT_FAMILY_GPT2, "n_positions", "32"},
        {TG_GPT_FAMILY_GPT2, "n_ctx", "32"},
        {TG_GPT_FAMILY_GPT2, "layer_norm_epsilon", "1e-05"},
        {TG_GPT_FAMILY_GPT2, "bos_token_id", "40"}, /* the small GPT-2 files' <|endoftext|> */
        {TG_GPT_FAMILY_GPT2, "eos_token_id", "40"},
        {TG_GPT_FAMILY_GPT2, "model_type", "\"gpt2\""},
        {TG_GPT_FAMILY_GPT2, "architectures", "[\"GPT2LMHeadModel\"]"},
        {TG_GPT_FAMILY_GPT2, "torch_dtype", "\"float32\""},
        {TG_GPT_FAMILY_GEMMA3, "model_type", "\"gemma3_text\""},
        {TG_GPT_FAMILY_GEMMA3, "layer_types", "[\"sliding_attention\", \"full_attention\", \"sliding_attention\"]"},
        {TG_GPT_FAMILY_GEMMA3, "_sliding_window_pattern", "2"},
        {TG_GPT_FAMILY_GEMMA3, "sliding_window", "4"},
        {TG_GPT_FAMILY_GEMMA3, "rope_local_base_freq", "10000.0"},
        {TG_GPT_FAMILY_GEMMA3, "query_pre_attn_scalar", "8"},
        {TG_GPT_FAMILY_GEMMA3, "hidden_activation", "\"gelu_pytorch_tanh\""},
        {TG_GPT_FAMILY_GEMMA3, "final_logit_softcapping", "null"},
    };
    tg_gpt_family done = TG_GPT_FAMILY_QWEN3;
    json_t *cfg = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].family != done) {
            json_decref(cfg);
            remove_tree(dir);
            c = tiny(cases[i].family);
            export_ok(build(tp, &c, 4), dir, &(tg_export_options){.tokenizer = tokenizer_of(cases[i].family)});
            cfg = json_in(dir, "config.json");
            done = cases[i].family;
        }
        json_t *want = json_loads(cases[i].want, JSON_DECODE_ANY, NULL);
        assert_non_null(want);
        if (!json_equal(json_object_get(cfg, cases[i].key), want)) {
            char *got = json_dumps(json_object_get(cfg, cases[i].key), JSON_ENCODE_ANY);
            fail_msg("%s's %s is %s, expected %s", tg_decoder_family_name(done), cases[i].key, got ? got : "absent",
                     cases[i].want);
        }
        json_decref(want);
    }
    json_decref(cfg);
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* ---- (c) float16 and bfloat16 ------------------------------------------------------------------------ */

/* x rounded to the nearest IEEE half (ties to even; overflow: infinity),
 * as a float: 11 significant bits, down to 2^-24. */
static float f16_round(float x)
{
    double a = fabs((double)x);
    if (isnan(x) || isinf(x)) return x;
    double q;
    if (a < 0x1p-14) {
        q = nearbyint(a * 0x1p24) * 0x1p-24;
    } else {
        int e;
        double m = frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
        q = ldexp(nearbyint(ldexp(m, 11)), e - 11);
    }
    if (q > 65504) q = INFINITY;
    return (float)(x < 0 ? -q : q);
}

static void test_half_types(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "h");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_LLAMA3);
    tg_module *a = build(tp, &c, 5);
    randomize(tp, a, 5);
    tg_named_list pa;
    assert_int_equal(tg_module_named_parameters(tp, a, &pa), TG_OK);
    for (int t = 0; t < 2; t++) {
        tg_export_type type = t == 0 ? TG_EXPORT_F16 : TG_EXPORT_BF16;
        remove_tree(dir);
        export_ok(a, dir, &(tg_export_options){.type = type, .tokenizer = g_small_tok});
        json_t *h = st_header(dir, "model.safetensors"), *cfg = json_in(dir, "config.json");
        assert_string_equal(json_string_value(json_object_get(cfg, "torch_dtype")), t == 0 ? "float16" : "bfloat16");
        const char *k;
        json_t *v;
        json_object_foreach(h, k, v) {
            if (strcmp(k, "__metadata__") != 0)
                assert_string_equal(json_string_value(json_object_get(v, "dtype")), t == 0 ? "F16" : "BF16");
        }
        json_decref(h), json_decref(cfg);
        /* every parameter read back is the float32 one rounded to nearest even */
        tg_module *b = load_back(tp, dir, &c);
        for (int i = 0; i < pa.n; i++) {
            const tg_tensor *x = pa.tensors[i], *y = tg_module_get_parameter(b, pa.names[i]);
            tu_assert_ok(y);
            const float *xs = tg_data_ptr(x), *ys = tg_data_ptr(y);
            for (int64_t e = 0; e < tg_numel(x); e++) {
                float want = t == 0 ? f16_round(xs[e]) : (float)tu_bf16(xs[e]);
                if (memcmp(&want, &ys[e], sizeof want) != 0)
                    fail_msg("%s %s[%lld]: %.9g read back %.9g, expected %.9g", t == 0 ? "F16" : "BF16", pa.names[i],
                             (long long)e, (double)xs[e], (double)ys[e], (double)want);
            }
        }
        /* and the logits within the rounding */
        tu_assert_close(logits_of(tp, b), logits_of(tp, a), 0.05, 0.05, t == 0 ? "F16 logits" : "BF16 logits");
    }
    /* a bfloat16 model's weights, exported as they are and widened exactly */
    tg_decoder_config cb = c;
    cb.weights = TG_BF16;
    tg_module *mb = build(tp, &cb, 6);
    remove_tree(dir);
    export_ok(mb, dir, &(tg_export_options){.type = TG_EXPORT_F32, .tokenizer = g_small_tok});
    tg_module *back = load_back(tp, dir, &c);
    tg_tensor *w = tg_module_get_parameter(mb, "trf_blocks.1.att.W_key.weight"),
              *wb = tg_module_get_parameter(back, "trf_blocks.1.att.W_key.weight");
    assert_int_equal(w->dtype, TG_BF16);
    tu_assert_close(wb, tg_to_dtype(tp, w, TG_F32), 0, 0, "bf16 weights widened");

    /* Q8_0 is GGUF's only */
    remove_tree(dir);
    tu_assert_one_line_error(tg_export_hf(a, dir, &(tg_export_options){.type = TG_EXPORT_Q8_0}), "q8_0", "GGUF");
    assert_listing(parent, "");
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* ---- (d) shards ---------------------------------------------------------------------------------------- */

static void test_shards(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "s");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_LLAMA3);
    tg_module *a = build(tp, &c, 7);
    randomize(tp, a, 7);
    /* 2 KB: the embedding and the head (3 KB each) alone, the layers'
     * weights (16 x 16 and 24 x 16 floats) two or three to a shard */
    const int64_t max = 2048;
    export_ok(a, dir, &(tg_export_options){.max_shard_size = max, .tokenizer = g_small_tok});
    json_t *index = json_in(dir, "model.safetensors.index.json");
    json_t *map = json_object_get(index, "weight_map");
    assert_int_equal(json_object_size(map), 3 + 2 * 9);
    /* the index names every shard file, each holding its tensors, none over
     * the size unless alone; total_size their bytes */
    char *files = listing(dir);
    assert_null(strstr(files, "model.safetensors "));
    int n_shards = 0;
    for (char *p = files; (p = strstr(p, "model-")) != NULL; p++) n_shards++;
    assert_true(n_shards > 3);
    int64_t total = 0;
    for (int k = 1; k <= n_shards; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k, n_shards);
        json_t *h = st_header(dir, name);
        int64_t bytes = 0;
        int count = 0;
        const char *key;
        json_t *v;
        json_object_foreach(h, key, v) {
            if (strcmp(key, "__metadata__") == 0) continue;
            assert_string_equal(json_string_value(json_object_get(map, key)), name);
            json_t *offs = json_object_get(v, "data_offsets");
            bytes += json_integer_value(json_array_get(offs, 1)) - json_integer_value(json_array_get(offs, 0));
            count++;
        }
        assert_true(count >= 1);
        assert_true(bytes <= max || count == 1);
        total += bytes;
        json_decref(h);
    }
    assert_int_equal(json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size")), total);
    /* numbered as huggingface_hub's split closes them: the embedding (too
     * large) first; the head (too large) closed before the shard being
     * filled, which holds the final norm and comes last */
    char want[64];
    snprintf(want, sizeof want, "model-%05d-of-%05d.safetensors", 1, n_shards);
    assert_string_equal(json_string_value(json_object_get(map, "model.embed_tokens.weight")), want);
    snprintf(want, sizeof want, "model-%05d-of-%05d.safetensors", n_shards - 1, n_shards);
    assert_string_equal(json_string_value(json_object_get(map, "lm_head.weight")), want);
    snprintf(want, sizeof want, "model-%05d-of-%05d.safetensors", n_shards, n_shards);
    assert_string_equal(json_string_value(json_object_get(map, "model.norm.weight")), want);
    /* the index's text: sorted, two spaces, a newline at the end */
    size_t len;
    char *text = read_in(dir, "model.safetensors.index.json", &len);
    assert_memory_equal(text, "{\n  \"metadata\": {\n    \"total_size\": ", 36);
    assert_true(strstr(text, "\n  \"weight_map\": {\n    \"lm_head.weight\": \"model-") != NULL);
    assert_int_equal(text[len - 1], '\n');
    free(text);
    free(files);
    json_decref(index);
    /* the loader reads them */
    tg_module *b = load_back(tp, dir, &c);
    tu_assert_close(logits_of(tp, b), logits_of(tp, a), 0, 0, "logits from shards");

    /* a larger size: one file again, replacing the sharded folder (an
     * export's files only: no force needed) */
    export_ok(a, dir, &(tg_export_options){.max_shard_size = 1 << 30, .tokenizer = g_small_tok});
    assert_listing(dir, MODEL_FILES);
    tu_assert_one_line_error(tg_export_hf(a, dir, &(tg_export_options){.max_shard_size = -1}), "max_shard_size");

    /* GPT-2 from shards too */
    c = tiny(TG_GPT_FAMILY_GPT2);
    a = build(tp, &c, 8);
    randomize(tp, a, 8);
    export_ok(a, dir, &(tg_export_options){.max_shard_size = 4096, .tokenizer = g_small_gpt2});
    b = load_back(tp, dir, &c);
    tu_assert_close(logits_of(tp, b), logits_of(tp, a), 0, 0, "GPT-2 logits from shards");
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* ---- (e) LoRA adapters as PEFT's files ------------------------------------------------------------------ */

static void test_adapter(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "a");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_QWEN3);
    tg_module *m = build(tp, &c, 9);
    /* without LoRA layers there is no adapter; with them, no plain export */
    tu_assert_one_line_error(tg_export_hf(m, dir, &(tg_export_options){.adapter = true, .tokenizer = g_small_tok}),
                          "no LoRA layers");
    assert_int_equal(tg_lora_replace_linear(tp, m, 2, 4.0), TG_OK);
    randomize(tp, m, 9);
    tu_assert_one_line_error(tg_export_hf(m, dir, &(tg_export_options){.tokenizer = g_small_tok}), "LoRA",
                          "tg_lora_merge");
    assert_listing(parent, "");

    export_ok(m, dir, &(tg_export_options){.adapter = true, .tokenizer = g_small_tok});
    assert_listing(dir, "adapter_config.json adapter_model.safetensors tokenizer.json tokenizer_config.json");
    json_t *ac = json_in(dir, "adapter_config.json");
    json_t *want = json_pack("{s:s, s:s, s:i, s:i, s:s, s:b, s:b, s:f, s:[ssssssss], s:n, s:{}, s:{}}",
                             "peft_type", "LORA", "task_type", "CAUSAL_LM", "r", 2, "lora_alpha", 4, "bias", "none",
                             "fan_in_fan_out", 0, "inference_mode", 1, "lora_dropout", 0.0, "target_modules",
                             "down_proj", "gate_proj", "k_proj", "lm_head", "o_proj", "q_proj", "up_proj", "v_proj",
                             "base_model_name_or_path", "rank_pattern", "alpha_pattern");
    assert_non_null(want);
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v) {
        if (!json_equal(json_object_get(ac, k), v)) {
            char *got = json_dumps(json_object_get(ac, k), JSON_ENCODE_ANY);
            fail_msg("adapter_config.json's %s is %s", k, got ? got : "absent");
        }
    }
    json_decref(want), json_decref(ac);
    /* PEFT's names and layouts: lora_A.weight (r, in) = A^T, lora_B.weight (out, r) = B^T */
    char *path = path_in(dir, "adapter_model.safetensors");
    tg_safetensors st;
    assert_int_equal(tg_safetensors_load(tp, path, &st), TG_OK);
    assert_int_equal(st.n, 2 * (2 * 7 + 1));
    tg_tensor *la = tg_safetensors_get(&st, "base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight"),
              *lb = tg_safetensors_get(&st, "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"),
              *hb = tg_safetensors_get(&st, "base_model.model.lm_head.lora_B.weight");
    tu_assert_ok(la), tu_assert_ok(lb), tu_assert_ok(hb);
    tu_assert_close(la, tg_transpose(tp, tg_module_get_parameter(m, "trf_blocks.1.att.W_key.lora.A"), 0, 1), 0, 0,
                    "lora_A");
    tu_assert_close(lb, tg_transpose(tp, tg_module_get_parameter(m, "trf_blocks.1.att.W_key.lora.B"), 0, 1), 0, 0,
                    "lora_B");
    assert_int_equal(hb->shape[0], c.vocab_size);
    json_t *h = st_header(dir, "adapter_model.safetensors");
    assert_true(is_pt_metadata(json_object_get(h, "__metadata__")));
    json_decref(h);
    free(path);

    /* GPT-2: Conv1D (fan_in_fan_out), its q, k, v adapters one c_attn adapter of rank 3 r */
    remove_tree(dir);
    c = tiny(TG_GPT_FAMILY_GPT2);
    tg_module *g = build(tp, &c, 10);
    assert_int_equal(tg_lora_replace_linear(tp, g, 2, 3.0), TG_OK);
    randomize(tp, g, 10);
    export_ok(g, dir, &(tg_export_options){.adapter = true, .tokenizer = g_small_gpt2, .name = "my-base"});
    ac = json_in(dir, "adapter_config.json");
    want = json_pack("{s:b, s:i, s:i, s:{s:i}, s:{s:i}, s:[ssss], s:s}", "fan_in_fan_out", 1, "r", 2, "lora_alpha", 3,
                     "rank_pattern", "c_attn", 6, "alpha_pattern", "c_attn", 9, "target_modules", "c_attn", "c_fc",
                     "c_proj", "lm_head", "base_model_name_or_path", "my-base");
    json_object_foreach(want, k, v) {
        if (!json_equal(json_object_get(ac, k), v)) {
            char *got = json_dumps(json_object_get(ac, k), JSON_ENCODE_ANY);
            fail_msg("GPT-2's adapter_config.json's %s is %s", k, got ? got : "absent");
        }
    }
    json_decref(want), json_decref(ac);
    path = path_in(dir, "adapter_model.safetensors");
    assert_int_equal(tg_safetensors_load(tp, path, &st), TG_OK);
    la = tg_safetensors_get(&st, "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight");
    lb = tg_safetensors_get(&st, "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight");
    tu_assert_ok(la), tu_assert_ok(lb);
    assert_int_equal(la->shape[0], 6), assert_int_equal(la->shape[1], 16);
    assert_int_equal(lb->shape[0], 48), assert_int_equal(lb->shape[1], 6);
    /* the same delta: B^T A^T of the three stacked */
    tg_tensor *delta = tg_matmul(tp, lb, la);
    const char *qkv[] = {"W_query", "W_key", "W_value"};
    for (int p = 0; p < 3; p++) {
        char an[96], bn[96];
        snprintf(an, sizeof an, "trf_blocks.0.att.%s.lora.A", qkv[p]);
        snprintf(bn, sizeof bn, "trf_blocks.0.att.%s.lora.B", qkv[p]);
        tg_tensor *ab = tg_matmul(tp, tg_module_get_parameter(g, an), tg_module_get_parameter(g, bn));
        tg_tensor *d = tg_transpose(tp, ab, 0, 1);
        tg_tensor *part = tg_narrow(tp, delta, 0, 16 * p, 16);
        tu_assert_close(part, d, 1e-6, 1e-7, qkv[p]);
    }
    free(path);
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* ---- (f) what the classes cannot hold ------------------------------------------------------------------- */

static void test_refused(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "r");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
    c.norm = TG_NORM_RMS;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_small_gpt2}),
                          "GPT-2", "RMSNorm");
    c = tiny(TG_GPT_FAMILY_GPT2);
    c.positions = TG_POSITIONS_ROPE, c.head_dim = 8;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_small_gpt2}),
                          "GPT-2", "RoPE");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.qkv_bias = true;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_small_tok}),
                          "Qwen3", "bias");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.qk_norm = false;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_small_tok}),
                          "Qwen3", "QK-norm");
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    c.mlp = TG_MLP_GEGLU;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_small_tok}),
                          "Llama 3", "GeGLU");
    /* a tokenizer with more ids than the model's vocabulary */
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.vocab_size = 30;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_small_tok}),
                          "vocabulary has 40 ids", "30 rows");
    /* not a decoder */
    tu_assert_one_line_error(tg_export_hf(tg_linear_new(tp, 2, 2, false), dir, NULL), "not a decoder");
    tu_assert_one_line_error(tg_export_hf(NULL, dir, NULL), "NULL");
    assert_listing(parent, "");
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* ---- (g) bad paths and full disks leave nothing behind ------------------------------------------------------ */

static void test_bad_paths(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "out");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
    tg_module *m = build(tp, &c, 11);
    tg_export_options o = {.tokenizer = g_small_gpt2};

    /* a file in the way: refused, the file as it was */
    write_text(dir, "not a folder");
    tu_assert_one_line_error(tg_export_hf(m, dir, &o), dir, "is a file, not a folder");
    assert_listing(parent, "out");
    char *text = tu_read_file(dir, &(size_t){0});
    assert_string_equal(text, "not a folder");
    free(text);
    unlink(dir);

    /* a folder holding other files: refused without force, replaced with it */
    assert_int_equal(mkdir(dir, 0755), 0);
    char *notes = path_in(dir, "notes.txt");
    write_text(notes, "mine");
    tu_assert_one_line_error(tg_export_hf(m, dir, &o), dir, "notes.txt", "force");
    assert_listing(parent, "out");
    assert_listing(dir, "notes.txt");
    o.force = true;
    export_ok(m, dir, &o);
    o.force = false;
    assert_listing(parent, "out");
    assert_listing(dir, MODEL_FILES);
    /* an export's own folder is replaced without force */
    export_ok(m, dir, &o);
    assert_listing(dir, MODEL_FILES);
    free(notes);

    /* a parent that is not a folder, or cannot be written */
    char *under_file = path_in(parent, "out/config.json/x");
    tu_assert_one_line_error(tg_export_hf(m, under_file, &o), under_file, "parent");
    free(under_file);
    char *nowhere = path_in(parent, "missing/x");
    tu_assert_one_line_error(tg_export_hf(m, nowhere, &o), nowhere, "parent");
    free(nowhere);
    if (geteuid() != 0) {
        char *ro = path_in(parent, "ro"), *target = path_in(parent, "ro/x");
        assert_int_equal(mkdir(ro, 0555), 0);
        tu_assert_one_line_error(tg_export_hf(m, target, &o), target);
        assert_listing(ro, "");
        rmdir(ro);
        free(ro), free(target);
    }
    /* (as root too: /proc takes no new folder) */
    tu_assert_one_line_error(tg_export_hf(m, "/proc/tg_export_test", &o), "/proc/tg_export_test");
    tu_assert_one_line_error(tg_export_hf(m, "", &o), "no folder");
    tu_assert_one_line_error(tg_export_hf(m, "/", &o), "/");
    assert_listing(parent, "out");
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* A child process's file size limit: limit bytes (SIGXFSZ ignored, so a
 * write past it fails with EFBIG as on a full disk); the hard limit is
 * kept, for child_exit to lift it. */
static bool limit_file_size(rlim_t limit)
{
    struct rlimit rl;
    signal(SIGXFSZ, SIG_IGN);
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < limit)) return false;
    rl.rlim_cur = limit;
    return setrlimit(RLIMIT_FSIZE, &rl) == 0;
}

/* A child's end: exit, with the file size limit lifted, so that its
 * coverage counters are written and the leak check sees its error paths
 * (the objects it shares with the parent are the parent's: the parent's
 * frames hold them). */
static void child_exit(int code)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_FSIZE, &rl);
    }
    exit(code);
}

/* In a child process limited to `limit` bytes per file: the export fails
 * with one line naming the file, and parent holds what it held. */
static void full_disk(const char *parent, const char *dir, rlim_t limit, const char *before, const char *want)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!limit_file_size(limit)) child_exit(10);
        tg_tape *tp = tg_tape_new();
        tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
        tg_module *m = build(tp, &c, 12);
        int st = tg_export_hf(m, dir, &(tg_export_options){.tokenizer = g_small_gpt2}), code = 0;
        const char *err = tg_last_error();
        char target[1200];
        snprintf(target, sizeof target, "'%s/%s'", dir, want); /* the file's final path */
        if (st == TG_OK) {
            code = 11;
        } else if (!strstr(err, "File too large") || !strstr(err, target) || strchr(err, '\n')) {
            fprintf(stderr, "full disk: %s\n", err);
            code = 12;
        }
        tg_tape_free(tp);
        child_exit(code);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_listing(parent, before);
}

static void test_full_disk(void **state)
{
    (void)state;
    /* on the stack: the forked children hold no heap blocks of the parent's that their leak check
     * could report */
    char parent[64] = "/tmp/tg_export_XXXXXX", dir[80];
    assert_non_null(mkdtemp(parent));
    snprintf(dir, sizeof dir, "%s/out", parent);
    /* the weights (35 KB) pass the limit: safetensors' write fails */
    full_disk(parent, dir, 8192, "", "model.safetensors");
    /* config.json's 700 bytes pass it: the file's checked flush fails */
    full_disk(parent, dir, 256, "", "config.json");
    /* an existing export stays as it was */
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
    export_ok(build(tp, &c, 13), dir, &(tg_export_options){.tokenizer = g_small_gpt2});
    char *cfg = path_in(dir, "config.json"), *st = path_in(dir, "model.safetensors");
    size_t n0, n1;
    char *c0 = tu_read_file(cfg, &n0), *s0 = tu_read_file(st, &n1);
    full_disk(parent, dir, 8192, "out", "model.safetensors");
    assert_listing(dir, MODEL_FILES);
    size_t m0, m1;
    char *c1 = tu_read_file(cfg, &m0), *s1 = tu_read_file(st, &m1);
    assert_true(n0 == m0 && memcmp(c0, c1, n0) == 0);
    assert_true(n1 == m1 && memcmp(s0, s1, n1) == 0);
    free(c0), free(c1), free(s0), free(s1), free(cfg), free(st);
    tg_tape_free(tp);
    remove_tree(parent);
}

/* ---- (h) the atomic file of export_internal.h (atomic.c, compiled in) ------------------------------------ */

/* In a child process limited to 4 KB per file: writes past the limit
 * (failed in fwrite, or in the flush at commit) are reported at commit,
 * naming the file and the reason. */
static void file_full_disk(const char *path)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (!limit_file_size(4096)) child_exit(10);
        static char big[100000];
        tg__export_file o;
        int code = 0;
        if (tg__export_file_begin(&o, path, "export_gguf") != TG_OK) child_exit(11);
        (void)fwrite(big, 1, sizeof big, o.f);
        if (tg__export_file_commit(&o) == TG_OK) code = 12;
        else if (!strstr(tg_last_error(), path) || !strstr(tg_last_error(), "File too large")) code = 13;
        if (code) fprintf(stderr, "full disk: %s\n", tg_last_error());
        /* a buffer flushed at commit: the limit shows there */
        if (!code && tg__export_file_begin(&o, path, "export_gguf") != TG_OK) code = 14;
        if (!code) (void)fwrite(big, 1, 3000, o.f), (void)fwrite(big, 1, 3000, o.f);
        if (!code && tg__export_file_commit(&o) == TG_OK) code = 15;
        if (!code && !strstr(tg_last_error(), "File too large")) {
            fprintf(stderr, "full disk: %s\n", tg_last_error());
            code = 16;
        }
        child_exit(code);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_atomic_file(void **state)
{
    (void)state;
    char parent[64] = "/tmp/tg_export_XXXXXX", path[80]; /* on the stack: as test_full_disk's */
    assert_non_null(mkdtemp(parent));
    snprintf(path, sizeof path, "%s/out.gguf", parent);
    tg__export_file o;
    /* not a regular file in the way: refused */
    assert_int_equal(mkdir(path, 0755), 0);
    tu_assert_one_line_error(tg__export_file_begin(&o, path, "export_gguf"), "export_gguf", path, "a folder");
    rmdir(path);
    assert_int_equal(mkfifo(path, 0644), 0);
    tu_assert_one_line_error(tg__export_file_begin(&o, path, "export_gguf"), path, "a FIFO");
    unlink(path);
    char *nowhere = path_in(parent, "missing/out.gguf");
    tu_assert_one_line_error(tg__export_file_begin(&o, nowhere, "export_gguf"), nowhere);
    free(nowhere);
    assert_listing(parent, "");

    /* written, it replaces the file and keeps its permissions; aborted, the
     * old file stays */
    write_text(path, "old");
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(tg__export_file_begin(&o, path, "export_gguf"), TG_OK);
    assert_int_equal(fputs("new", o.f) >= 0, 1);
    assert_int_equal(tg__export_file_commit(&o), TG_OK);
    tg__export_file_abort(&o); /* after commit: nothing */
    char *text = tu_read_file(path, &(size_t){0});
    assert_string_equal(text, "new");
    free(text);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(tg__export_file_begin(&o, path, "export_gguf"), TG_OK);
    fputs("half", o.f);
    tg__export_file_abort(&o);
    text = tu_read_file(path, &(size_t){0});
    assert_string_equal(text, "new");
    free(text);
    assert_listing(parent, "out.gguf");

    /* a full disk: the writes that fail are reported at commit, the old
     * file stays */
    file_full_disk(path);
    assert_listing(parent, "out.gguf");
    text = tu_read_file(path, &(size_t){0});
    assert_string_equal(text, "new");
    free(text);
    remove_tree(parent);
}

/* ---- (i) the atomic folder of export_internal.h ------------------------------------------------------- */

static void test_atomic_dir(void **state)
{
    (void)state;
    char *parent = new_folder();
    tg__export_dir d;
    /* no name to write */
    tu_assert_one_line_error(tg__export_dir_begin(&d, NULL, false, "export_hf"), "export_hf", "no folder given");
    assert_null(d.tmp), assert_null(d.dir);
    static const char *const no_name[] = {"/", "//", ".", "..", "a/.", "a/..", "/tmp/..", "a/./"};
    for (size_t i = 0; i < sizeof no_name / sizeof *no_name; i++) {
        tu_assert_one_line_error(tg__export_dir_begin(&d, no_name[i], true, "export_hf"), no_name[i],
                                 "does not name a folder");
        assert_null(d.tmp);
    }

    /* symbolic links: to a folder refused (force or not), to a file a file,
     * a loop unreachable */
    char *real = path_in(parent, "real"), *link = path_in(parent, "link");
    assert_int_equal(mkdir(real, 0755), 0);
    assert_int_equal(symlink(real, link), 0);
    tu_assert_one_line_error(tg__export_dir_begin(&d, link, false, "export_hf"), link, "symbolic link to a folder");
    tu_assert_one_line_error(tg__export_dir_begin(&d, link, true, "export_hf"), link, "symbolic link to a folder");
    unlink(link), rmdir(real);
    write_text(real, "x");
    assert_int_equal(symlink(real, link), 0);
    tu_assert_one_line_error(tg__export_dir_begin(&d, link, true, "export_hf"), link, "exists and is a file");
    unlink(link), unlink(real);
    assert_int_equal(symlink(link, link), 0);
    tu_assert_one_line_error(tg__export_dir_begin(&d, link, false, "export_hf"), "cannot reach", link,
                             strerror(ELOOP));
    unlink(link);
    free(real), free(link);
    assert_listing(parent, "");

    tu_assert_one_line_error(tg__export_dir_begin(&d, "/dev/null", true, "export_hf"),
                             "'/dev/null' exists and is a character device, not a folder");
    /* a name too long for a temporary name beside it: the reason, not a retry */
    char longname[256];
    memset(longname, 'n', 250), longname[250] = '\0';
    char *too_long = path_in(parent, longname);
    tu_assert_one_line_error(tg__export_dir_begin(&d, too_long, false, "export_hf"), "cannot create a folder in",
                             strerror(ENAMETOOLONG));
    free(too_long);
    assert_listing(parent, "");

    /* begun: a temporary folder beside the target; aborted: nothing left */
    char *dir = path_in(parent, "out");
    assert_int_equal(tg__export_dir_begin(&d, dir, false, "export_hf"), TG_OK);
    char *listed = listing(parent);
    assert_int_equal(strncmp(listed, ".out.tmp-", 9), 0);
    free(listed);
    char *file = tg__export_dir_path(&d, "config.json");
    assert_non_null(file);
    write_text(file, "{}");
    free(file);
    assert_null(tg__export_dir_path(&d, NULL));
    assert_null(tg__export_dir_path(NULL, "x"));
    tg__export_dir_abort(&d);
    assert_null(d.tmp), assert_null(d.dir);
    assert_null(tg__export_dir_path(&d, "x"));
    tg__export_dir_abort(&d); /* ended: nothing */
    tg__export_dir_abort(NULL);
    assert_listing(parent, "");
    tu_assert_one_line_error(tg__export_dir_commit(&d), "no folder being written");
    tu_assert_one_line_error(tg__export_dir_commit(NULL), "no folder being written");

    /* the temporary folder gone before the rename: the rename's error, nothing left */
    assert_int_equal(tg__export_dir_begin(&d, dir, false, "export_hf"), TG_OK);
    remove_tree(d.tmp);
    tu_assert_one_line_error(tg__export_dir_commit(&d), "cannot rename the new folder to", dir, strerror(ENOENT));
    assert_null(d.tmp), assert_null(d.dir);
    assert_listing(parent, "");

    /* a trailing slash: the folder itself */
    char *slash = path_in(parent, "out/");
    assert_int_equal(tg__export_dir_begin(&d, slash, false, "export_hf"), TG_OK);
    file = tg__export_dir_path(&d, "config.json");
    write_text(file, "{\"a\": 1}");
    free(file);
    assert_int_equal(tg__export_dir_commit(&d), TG_OK);
    assert_null(d.tmp);
    tg__export_dir_abort(&d); /* after commit: nothing */
    assert_listing(parent, "out");
    assert_listing(dir, "config.json");
    free(slash);

    /* an existing export's folder replaced: its permissions kept, its old
     * files gone, nothing left beside it */
    assert_int_equal(chmod(dir, 0700), 0);
    assert_int_equal(tg__export_dir_begin(&d, dir, false, "export_hf"), TG_OK);
    file = tg__export_dir_path(&d, "tokenizer.json");
    write_text(file, "{}");
    free(file);
    assert_int_equal(tg__export_dir_commit(&d), TG_OK);
    assert_listing(parent, "out");
    assert_listing(dir, "tokenizer.json");
    struct stat sb;
    assert_int_equal(stat(dir, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);

    /* ... and when the new one cannot be renamed in, the old one is moved back */
    assert_int_equal(tg__export_dir_begin(&d, dir, false, "export_hf"), TG_OK);
    remove_tree(d.tmp);
    tu_assert_one_line_error(tg__export_dir_commit(&d), "cannot rename the new folder to", dir);
    assert_null(strstr(tg_last_error(), "the old one is now"));
    assert_listing(parent, "out");
    assert_listing(dir, "tokenizer.json");

    /* what an export writes, save_pretrained's shards among them, is
     * replaced without force; anything else is named */
    static const char *const ours[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                       "README.md", "merges.txt", "vocab.json", "special_tokens_map.json",
                                       "added_tokens.json", "chat_template.jinja", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof ours / sizeof *ours; i++) {
        char *p = path_in(dir, ours[i]);
        write_text(p, "x");
        free(p);
    }
    assert_int_equal(tg__export_dir_begin(&d, dir, false, "export_hf"), TG_OK);
    tg__export_dir_abort(&d);
    static const char *const foreign[] = {"model-1-of-2.safetensors", "model-00001-of-00002.bin",
                                          "model-00001.safetensors", "model-00001-of-2.safetensors", "weights.bin"};
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
        char *p = path_in(dir, foreign[i]);
        write_text(p, "x");
        tu_assert_one_line_error(tg__export_dir_begin(&d, dir, false, "export_hf"), dir, foreign[i], "force");
        assert_null(strstr(tg_last_error(), "and other files"));
        unlink(p);
        free(p);
    }
    /* a folder under an export's file name is not an export's file; two: "and other files" */
    char *sub = path_in(dir, "config.json"), *other = path_in(dir, "notes.txt");
    assert_int_equal(mkdir(sub, 0755), 0);
    tu_assert_one_line_error(tg__export_dir_begin(&d, dir, false, "export_hf"), "'config.json'", "force");
    write_text(other, "x");
    tu_assert_one_line_error(tg__export_dir_begin(&d, dir, false, "export_hf"), "and other files", "force");
    if (geteuid() != 0) { /* a folder that cannot be read (root reads it) */
        assert_int_equal(chmod(dir, 0300), 0);
        tu_assert_one_line_error(tg__export_dir_begin(&d, dir, false, "export_hf"), "cannot read the folder", dir);
        assert_int_equal(chmod(dir, 0700), 0);
    }
    /* force: everything in it removed, a symbolic link's target left as it was */
    char *deep = path_in(sub, "deeper"), *outside = path_in(parent, "outside.txt"), *to_outside = path_in(sub, "link");
    assert_int_equal(mkdir(deep, 0755), 0);
    write_text(outside, "mine");
    assert_int_equal(symlink(outside, to_outside), 0);
    char *deep_file = path_in(deep, "w.bin");
    write_text(deep_file, "w");
    assert_int_equal(tg__export_dir_begin(&d, dir, true, "export_hf"), TG_OK);
    assert_int_equal(tg__export_dir_commit(&d), TG_OK);
    assert_listing(dir, "");
    assert_listing(parent, "out outside.txt");
    char *kept = tu_read_file(outside, &(size_t){0});
    assert_string_equal(kept, "mine");
    free(kept), free(deep), free(outside), free(to_outside), free(deep_file);
    free(sub), free(other);
    remove_tree(parent);
    free(dir), free(parent);
}

/* More of the atomic file: no name, what is in the way, a symbolic link,
 * a name too long, the calls after the end. */
static void test_atomic_file_paths(void **state)
{
    (void)state;
    char *parent = new_folder();
    tg__export_file o;
    tu_assert_one_line_error(tg__export_file_begin(&o, NULL, "export_gguf"), "export_gguf", "no file given");
    tu_assert_one_line_error(tg__export_file_begin(&o, "", "export_gguf"), "no file given");
    assert_null(o.f), assert_null(o.tmp);
    tu_assert_one_line_error(tg__export_file_begin(&o, "/", "export_gguf"), "'/'", "does not name a file");
    /* a trailing slash names no file: refused before anything is written */
    char *slash = path_in(parent, "new.gguf/");
    tu_assert_one_line_error(tg__export_file_begin(&o, slash, "export_gguf"), slash, "does not name a file");
    free(slash);
    tu_assert_one_line_error(tg__export_file_begin(&o, "/dev/null", "export_gguf"),
                             "'/dev/null' exists and is a character device, not a regular file");
    /* a socket in the way */
    char *sock = path_in(parent, "sock");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    tu_assert_one_line_error(tg__export_file_begin(&o, sock, "export_gguf"), sock, "is a socket");
    close(fd), unlink(sock);
    free(sock);
    assert_listing(parent, "");
    /* under a file: the path's own error */
    char *file = path_in(parent, "f"), *under = path_in(parent, "f/x.gguf");
    write_text(file, "x");
    tu_assert_one_line_error(tg__export_file_begin(&o, under, "export_gguf"), "cannot write", under,
                             strerror(ENOTDIR));
    free(under);
    /* a symbolic link to a regular file: the rename replaces the link by
     * the new file; the file it pointed to stays as it was */
    char *link = path_in(parent, "link.gguf");
    assert_int_equal(symlink(file, link), 0);
    assert_int_equal(tg__export_file_begin(&o, link, "export_gguf"), TG_OK);
    fputs("new", o.f);
    assert_int_equal(tg__export_file_commit(&o), TG_OK);
    struct stat sb;
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    char *text = tu_read_file(link, &(size_t){0});
    assert_string_equal(text, "new");
    free(text);
    text = tu_read_file(file, &(size_t){0});
    assert_string_equal(text, "x");
    free(text);
    /* a dangling link is a missing file: the same */
    unlink(link);
    char *gone = path_in(parent, "gone");
    assert_int_equal(symlink(gone, link), 0);
    assert_int_equal(tg__export_file_begin(&o, link, "export_gguf"), TG_OK);
    fputs("made", o.f);
    assert_int_equal(tg__export_file_commit(&o), TG_OK);
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0644);
    assert_int_equal(lstat(gone, &sb), -1);
    free(gone), free(link), free(file);
    /* a name too long for the temporary name */
    char longname[256];
    memset(longname, 'g', 250), longname[250] = '\0';
    char *too_long = path_in(parent, longname);
    tu_assert_one_line_error(tg__export_file_begin(&o, too_long, "export_gguf"), "cannot create a file in",
                             strerror(ENAMETOOLONG));
    free(too_long);
    /* the temporary file gone before the rename: the rename's error, the old file kept */
    char *kept = path_in(parent, "f");
    assert_int_equal(tg__export_file_begin(&o, kept, "export_gguf"), TG_OK);
    fputs("lost", o.f);
    assert_int_equal(unlink(o.tmp), 0);
    tu_assert_one_line_error(tg__export_file_commit(&o), "cannot rename the new file to", kept, strerror(ENOENT));
    assert_null(o.f), assert_null(o.tmp);
    text = tu_read_file(kept, &(size_t){0});
    assert_string_equal(text, "x");
    free(text), free(kept);
    /* after the end */
    tu_assert_one_line_error(tg__export_file_commit(&o), "no file being written");
    tu_assert_one_line_error(tg__export_file_commit(NULL), "no file being written");
    tg__export_file_abort(&o);
    tg__export_file_abort(NULL);
    assert_listing(parent, "f link.gguf");
    remove_tree(parent);
    free(parent);
}

/* ---- (j) each feature a family's class cannot hold ---------------------------------------------------- */

static void assert_refused(tg_tape *tp, const tg_decoder_config *c, const char *family, const char *why)
{
    tg_module *m = build(tp, c, 1);
    tg_named_list l;
    bool tied;
    tu_assert_one_line_error(tg_decoder_hf_state_dict(tp, m, &l, &tied), "hf_state_dict", family,
                             "Hugging Face class", why);
    tg_peft_info info;
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, m, &l, &info), "peft_state_dict", family, why);
}

static void test_features(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
    c.mlp = TG_MLP_SWIGLU;
    assert_refused(tp, &c, "GPT-2", "SwiGLU feed-forward (the class has GELU MLP)");
    c = tiny(TG_GPT_FAMILY_GPT2);
    c.qk_norm = true;
    assert_refused(tp, &c, "GPT-2", "cannot hold the model's QK-norm");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.positions = TG_POSITIONS_LEARNED, c.rope_base = 0, c.rope_local_base = 0;
    assert_refused(tp, &c, "Qwen3", "learned positions (the class has RoPE)");
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    c.qkv_bias = true;
    assert_refused(tp, &c, "Llama 3", "query/key/value bias");
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    c.qk_norm = true;
    assert_refused(tp, &c, "Llama 3", "cannot hold the model's QK-norm");
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.qk_norm = false;
    assert_refused(tp, &c, "Gemma 3", "attention without QK-norm");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.post_norms = true;
    assert_refused(tp, &c, "Qwen3", "norms after the attention and the feed-forward");
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.post_norms = false;
    assert_refused(tp, &c, "Gemma 3", "two norms per block (the class has four)");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.norm_offset = 1;
    assert_refused(tp, &c, "Qwen3", "RMSNorm x * (1 + w)");
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.norm_offset = 0;
    assert_refused(tp, &c, "Gemma 3", "RMSNorm x * w (the class computes x * (1 + w))");
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    c.emb_scale = true;
    assert_refused(tp, &c, "Llama 3", "embeddings scaled by sqrt(emb_dim)");
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.emb_scale = false;
    assert_refused(tp, &c, "Gemma 3", "unscaled embeddings");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.sliding_window = 4;
    assert_refused(tp, &c, "Qwen3", "sliding-window layers");
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.sliding_window = 0;
    assert_int_equal(tg_decoder_config_layer_pattern(&c, 1), TG_OK); /* every layer full */
    assert_refused(tp, &c, "Gemma 3", "attention without a sliding window");
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    c.query_pre_attn_scalar = 8;
    assert_refused(tp, &c, "Llama 3", "query scale");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.rope_local_base = 5000;
    assert_refused(tp, &c, "Qwen3", "local RoPE base");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.rope_freq = (tg_rope_freq){8, 1, 4, 64};
    assert_refused(tp, &c, "Qwen3", "Llama 3's RoPE smoothing");
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.rope_freq = (tg_rope_freq){8, 1, 4, 64};
    assert_refused(tp, &c, "Gemma 3", "Llama 3's RoPE smoothing");
    /* and the model_type each names */
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.mlp = TG_MLP_SWIGLU;
    assert_refused(tp, &c, "model_type \"gemma3_text\"", "SwiGLU feed-forward (the class has GeGLU)");

    /* what each class holds passes: a Gemma 3 with a local RoPE base, a Llama 3 without smoothing */
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.rope_local_base = 20000;
    tg_named_list l;
    bool tied;
    assert_int_equal(tg_decoder_hf_state_dict(tp, build(tp, &c, 1), &l, &tied), TG_OK);
    assert_true(tied);
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    c.rope_freq = (tg_rope_freq){0};
    assert_int_equal(tg_decoder_hf_state_dict(tp, build(tp, &c, 1), &l, &tied), TG_OK);
    assert_false(tied);
    assert_string_equal(l.names[l.n - 1], "lm_head.weight");
    tg_tape_free(tp);
}

/* The state_dict functions' arguments. */
static void test_state_dict_args(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_QWEN3);
    tg_module *m = build(tp, &c, 1);
    tg_named_list l;
    bool tied;
    tg_peft_info info;
    tu_assert_one_line_error(tg_decoder_hf_state_dict(NULL, m, &l, &tied), "hf_state_dict", "NULL argument");
    tu_assert_one_line_error(tg_decoder_hf_state_dict(tp, m, NULL, &tied), "hf_state_dict", "NULL argument");
    tu_assert_one_line_error(tg_decoder_hf_state_dict(tp, m, &l, NULL), "hf_state_dict", "NULL argument");
    tu_assert_one_line_error(tg_decoder_hf_state_dict(tp, NULL, &l, &tied), "hf_state_dict", "NULL model");
    tu_assert_one_line_error(tg_decoder_hf_state_dict(tp, tg_linear_new(tp, 2, 2, false), &l, &tied),
                             "hf_state_dict", "is a Linear, not a decoder");
    tu_assert_one_line_error(tg_decoder_peft_state_dict(NULL, m, &l, &info), "peft_state_dict", "NULL argument");
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, m, NULL, &info), "peft_state_dict", "NULL argument");
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, m, &l, NULL), "peft_state_dict", "NULL argument");
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, NULL, &l, &info), "peft_state_dict", "NULL model");
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, m, &l, &info), "peft_state_dict", "no LoRA layers");
    /* Qwen3's names, tied: no lm_head.weight, the embedding's own tensor */
    assert_int_equal(tg_decoder_hf_state_dict(tp, m, &l, &tied), TG_OK);
    assert_true(tied);
    assert_int_equal(l.n, 1 + 2 * 11 + 1);
    assert_string_equal(l.names[0], "model.embed_tokens.weight");
    assert_ptr_equal(l.tensors[0], tg_module_get_parameter(m, "tok_emb.weight"));
    assert_string_equal(l.names[5], "model.layers.0.self_attn.q_norm.weight");
    assert_string_equal(l.names[l.n - 1], "model.norm.weight");
    /* with LoRA layers: the first named */
    assert_int_equal(tg_lora_replace_linear(tp, m, 2, 4.0), TG_OK);
    tu_assert_one_line_error(tg_decoder_hf_state_dict(tp, m, &l, &tied), "LoRA layers ('trf_blocks.0.att.W_query')",
                             "tg_lora_merge");
    tg_tape_free(tp);
}

/* ---- (k) tg_lora_merge ------------------------------------------------------------------------------------ */

/* weight + scale (A @ B)^T in float32, as the merge computes it. */
static tg_tensor *merged(tg_tape *tp, const tg_module *m, const char *module, double scale)
{
    char name[128];
    snprintf(name, sizeof name, "%s.lora.A", module);
    tg_tensor *a = tg_module_get_parameter(m, name);
    snprintf(name, sizeof name, "%s.lora.B", module);
    tg_tensor *b = tg_module_get_parameter(m, name);
    snprintf(name, sizeof name, "%s.linear.weight", module);
    tg_tensor *w = tg_module_get_parameter(m, name);
    tu_assert_ok(a), tu_assert_ok(b), tu_assert_ok(w);
    bool grad = tg_set_grad_enabled(false);
    tg_tensor *delta = tg_contiguous(tp, tg_transpose(tp, tg_matmul(tp, a, b), 0, 1));
    tg_tensor *sum = tg_add(tp, tg_to_dtype(tp, w, TG_F32), tg_mul_scalar(tp, delta, scale));
    tg_set_grad_enabled(grad);
    tu_assert_ok(sum);
    return sum;
}

static float *copy_values(const tg_tensor *t)
{
    size_t n = (size_t)tg_numel(t) * sizeof(float);
    float *c = malloc(n);
    memcpy(c, tg_data_ptr(t), n);
    return c;
}

static void test_lora_merge(void **state)
{
    (void)state;
    tu_assert_one_line_error(tg_lora_merge(NULL), "lora_merge", "NULL module");
    tg_tape *tp = tg_tape_new();

    /* without LoRA layers: the same tensors, the same values */
    tg_decoder_config c = tiny(TG_GPT_FAMILY_LLAMA3);
    tg_module *plain = build(tp, &c, 20);
    tg_named_list before, after;
    assert_int_equal(tg_module_named_parameters(tp, plain, &before), TG_OK);
    float *q0 = copy_values(tg_module_get_parameter(plain, "trf_blocks.0.att.W_query.weight"));
    assert_int_equal(tg_lora_merge(plain), TG_OK);
    assert_int_equal(tg_module_named_parameters(tp, plain, &after), TG_OK);
    assert_int_equal(after.n, before.n);
    for (int i = 0; i < before.n; i++) {
        assert_string_equal(after.names[i], before.names[i]);
        assert_ptr_equal(after.tensors[i], before.tensors[i]);
    }
    assert_memory_equal(tg_data_ptr(tg_module_get_parameter(plain, "trf_blocks.0.att.W_query.weight")), q0,
                        16 * 16 * sizeof(float));
    free(q0);

    /* Qwen3 with its head tied: the head gets a tensor of its own, the
     * embedding keeps its values; every weight is W + (alpha / r) (A B)^T */
    c = tiny(TG_GPT_FAMILY_QWEN3);
    tg_module *m = build(tp, &c, 21);
    assert_int_equal(tg_lora_replace_linear(tp, m, 2, 3.0), TG_OK);
    randomize(tp, m, 21);
    tg_tensor *emb = tg_module_get_parameter(m, "tok_emb.weight"),
              *wq = tg_module_get_parameter(m, "trf_blocks.1.att.W_query.linear.weight");
    assert_ptr_equal(tg_module_get_parameter(m, "out_head.linear.weight"), emb);
    float *emb0 = copy_values(emb);
    tg_tensor *want_head = merged(tp, m, "out_head", 1.5), *want_q = merged(tp, m, "trf_blocks.1.att.W_query", 1.5);
    tg_tensor *logits = logits_of(tp, m);
    assert_int_equal(tg_lora_merge(m), TG_OK);
    tg_tensor *head = tg_module_get_parameter(m, "out_head.weight");
    tu_assert_ok(head);
    assert_ptr_not_equal(head, emb);
    assert_ptr_equal(tg_module_get_parameter(m, "tok_emb.weight"), emb);
    assert_memory_equal(tg_data_ptr(emb), emb0, (size_t)V * 16 * sizeof(float));
    free(emb0);
    assert_true(head->is_param);
    tu_assert_close(head, want_head, 0, 0, "merged head");
    assert_ptr_equal(tg_module_get_parameter(m, "trf_blocks.1.att.W_query.weight"), wq); /* in place */
    tu_assert_close(wq, want_q, 0, 0, "merged query");
    assert_null(tg_module_get_parameter(m, "trf_blocks.1.att.W_query.lora.A"));
    assert_string_equal(tg_module_type_name(tg_module_get_submodule(m, "out_head")), "Linear");
    tu_assert_close(logits_of(tp, m), logits, 1e-5, 1e-5, "logits after the merge");
    /* exported: an untied head now */
    char *parent = new_folder(), *dir = path_in(parent, "merged");
    export_ok(m, dir, &(tg_export_options){.tokenizer = g_small_tok});
    json_t *cfg = json_in(dir, "config.json");
    assert_true(json_is_false(json_object_get(cfg, "tie_word_embeddings")));
    json_decref(cfg);
    json_t *h = st_header(dir, "model.safetensors");
    assert_non_null(json_object_get(h, "lm_head.weight"));
    json_decref(h);

    /* bfloat16 weights: the float32 sum rounded once */
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.weights = TG_BF16;
    tg_module *mb = build(tp, &c, 22);
    assert_int_equal(tg_lora_replace_linear(tp, mb, 2, 3.0), TG_OK);
    randomize(tp, mb, 22); /* A and B (float32) */
    tg_tensor *embb = tg_module_get_parameter(mb, "tok_emb.weight");
    tg_tensor *emb_before = tg_to_dtype(tp, embb, TG_F32);
    static const char *const modules[] = {"out_head", "trf_blocks.0.ff.fc2", "trf_blocks.1.att.W_value"};
    tg_tensor *want[3];
    for (int k = 0; k < 3; k++) want[k] = merged(tp, mb, modules[k], 1.5);
    assert_int_equal(tg_lora_merge(mb), TG_OK);
    for (int k = 0; k < 3; k++) {
        char name[96];
        snprintf(name, sizeof name, "%s.weight", modules[k]);
        tg_tensor *w = tg_module_get_parameter(mb, name);
        tu_assert_ok(w);
        assert_int_equal(w->dtype, TG_BF16);
        const float *x = tg_data_ptr(want[k]);
        int rounded = 0;
        for (int64_t i = 0; i < tg_numel(w); i++) {
            if (tg_item_at(w, i) != tu_bf16(x[i]))
                fail_msg("%s[%lld] is %.9g, the float32 sum %.9g rounded once %.9g", name, (long long)i,
                         tg_item_at(w, i), (double)x[i], tu_bf16(x[i]));
            rounded += (double)x[i] != tu_bf16(x[i]);
        }
        assert_true(rounded > 0); /* the sums were not bfloat16 values already */
    }
    tu_assert_close(tg_to_dtype(tp, embb, TG_F32), emb_before, 0, 0, "bf16 embedding kept");
    assert_ptr_not_equal(tg_module_get_parameter(mb, "out_head.weight"), embb);

    /* A and B that do not fit the Linear: refused */
    c = tiny(TG_GPT_FAMILY_QWEN3);
    tg_module *bad = build(tp, &c, 23);
    assert_int_equal(tg_lora_replace_linear(tp, bad, 2, 3.0), TG_OK);
    assert_int_equal(tg_module_register_parameter(tg_module_get_submodule(bad, "trf_blocks.0.att.W_query.lora"), "A",
                                                  tg_parameter_new(tp, TG_F32, 2, (int64_t[]){3, 2})),
                     TG_OK);
    tu_assert_one_line_error(tg_lora_merge(bad), "lora_merge", "do not fit");
    /* a B of the wrong width, an A and B of different ranks */
    static const int64_t shapes[][4] = {{16, 2, 2, 15}, {16, 3, 2, 24}, {16, 2, 2, 24}};
    for (int k = 0; k < 3; k++) {
        bad = build(tp, &c, 23);
        assert_int_equal(tg_lora_replace_linear(tp, bad, 2, 3.0), TG_OK);
        tg_module *lo = tg_module_get_submodule(bad, "trf_blocks.1.ff.fc1.lora");
        /* fc1: Linear(16, 24): A (16, r), B (r, 24) */
        int64_t sa[2] = {shapes[k][0], shapes[k][1]}, sb[2] = {shapes[k][2], shapes[k][3]};
        assert_int_equal(tg_module_register_parameter(lo, "A", tg_parameter_new(tp, TG_F32, 2, sa)), TG_OK);
        assert_int_equal(tg_module_register_parameter(lo, "B", tg_parameter_new(tp, TG_F32, k == 2 ? 1 : 2, sb)),
                         TG_OK);
        tu_assert_one_line_error(tg_lora_merge(bad), "lora_merge", "do not fit");
    }
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* ---- (l) adapters PEFT's files cannot hold ------------------------------------------------------------- */

static void test_adapter_refused(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "a");
    tg_tape *tp = tg_tape_new();
    tg_named_list l;
    tg_peft_info info;
    tg_export_options o = {.adapter = true, .tokenizer = g_small_tok};
    /* an adapter of another rank, or the same rank and another alpha */
    tg_decoder_config c = tiny(TG_GPT_FAMILY_QWEN3);
    tg_module *m = build(tp, &c, 30);
    assert_int_equal(tg_lora_replace_linear(tp, m, 2, 4.0), TG_OK);
    tg_module *att = tg_module_get_submodule(m, "trf_blocks.1.att"),
              *key = tg_module_get_submodule(m, "trf_blocks.1.att.W_key.linear");
    assert_int_equal(tg_module_add_module(att, "W_key", tg_linear_with_lora_new(tp, key, 3, 6.0)), TG_OK);
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, m, &l, &info), "'trf_blocks.1.att.W_key' has rank 3",
                             "the first adapter 2 and 4", "one rank and alpha");
    tu_assert_one_line_error(tg_export_hf(m, dir, &o), "rank 3");
    assert_int_equal(tg_module_add_module(att, "W_key", tg_linear_with_lora_new(tp, key, 2, 5.0)), TG_OK);
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, m, &l, &info), "has rank 2 and alpha 5");
    /* the same rank and alpha again: accepted */
    assert_int_equal(tg_module_add_module(att, "W_key", tg_linear_with_lora_new(tp, key, 2, 4.0)), TG_OK);
    assert_int_equal(tg_decoder_peft_state_dict(tp, m, &l, &info), TG_OK);
    assert_int_equal(info.rank, 2);
    assert_true(info.alpha == 4.0);
    assert_int_equal(l.n, 2 * (2 * 7 + 1));
    /* an adapter on a module the class has not */
    assert_int_equal(
        tg_module_add_module(m, "extra", tg_linear_with_lora_new(tp, tg_linear_new(tp, 16, 16, false), 2, 4.0)),
        TG_OK);
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, m, &l, &info), "'extra' has an adapter",
                             "Qwen3's Hugging Face class has no such module");

    /* adapters elsewhere in the tree: none a module of the class */
    static const struct {
        const char *parent, *name, *ours;
    } places[] = {
        {"trf_blocks", "x", "trf_blocks.x"},              /* no layer number */
        {"trf_blocks", "1", "trf_blocks.1"},              /* the block itself */
        {"trf_blocks.0", "extra", "trf_blocks.0.extra"},  /* no such module in a layer */
        {"trf_blocks.0.att", "W_gate", "trf_blocks.0.att.W_gate"},
    };
    for (size_t i = 0; i < sizeof places / sizeof *places; i++) {
        tg_module *p = build(tp, &c, 33);
        tg_module *lora = tg_linear_with_lora_new(tp, tg_linear_new(tp, 16, 16, false), 2, 4.0);
        tg_module *parent_module = tg_module_get_submodule(p, places[i].parent);
        assert_int_equal(tg_module_add_module(parent_module, places[i].name, lora), TG_OK);
        char want[96];
        snprintf(want, sizeof want, "'%s' has an adapter", places[i].ours);
        tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, p, &l, &info), want, "no such module");
    }
    /* a LoRALayer that wraps nothing ("lora.A", "trf_blocks.0.lora.A") is no adapter */
    tg_module *p = build(tp, &c, 34);
    assert_int_equal(tg_module_add_module(p, "lora", tg_lora_layer_new(tp, 16, 16, 2, 4.0)), TG_OK);
    assert_int_equal(
        tg_module_add_module(tg_module_get_submodule(p, "trf_blocks.0"), "lora", tg_lora_layer_new(tp, 16, 16, 2, 4.0)),
        TG_OK);
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, p, &l, &info), "no LoRA layers");
    tg_module *att0 = tg_module_get_submodule(p, "trf_blocks.0.att"), *value = tg_module_get_submodule(att0, "W_value");
    assert_int_equal(tg_module_add_module(att0, "W_value", tg_linear_with_lora_new(tp, value, 2, 4.0)), TG_OK);
    assert_int_equal(tg_decoder_peft_state_dict(tp, p, &l, &info), TG_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.names[1], "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight");

    /* GPT-2: the query and key wrapped, not the value: c_attn takes all three or none */
    c = tiny(TG_GPT_FAMILY_GPT2);
    tg_module *g = build(tp, &c, 31);
    att = tg_module_get_submodule(g, "trf_blocks.0.att");
    static const char *const qk[] = {"W_query", "W_key"};
    for (int i = 0; i < 2; i++)
        assert_int_equal(
            tg_module_add_module(att, qk[i], tg_linear_with_lora_new(tp, tg_module_get_submodule(att, qk[i]), 2, 4.0)),
            TG_OK);
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, g, &l, &info), "transformer.h.0.attn.c_attn",
                             "some of the query, key and value");
    tu_assert_one_line_error(tg_export_hf(g, dir, &(tg_export_options){.adapter = true, .tokenizer = g_small_gpt2}),
                             "c_attn");
    assert_listing(parent, "");
    /* ... or the value alone */
    g = build(tp, &c, 35);
    att = tg_module_get_submodule(g, "trf_blocks.1.att");
    value = tg_module_get_submodule(att, "W_value");
    assert_int_equal(tg_module_add_module(att, "W_value", tg_linear_with_lora_new(tp, value, 2, 4.0)), TG_OK);
    tu_assert_one_line_error(tg_decoder_peft_state_dict(tp, g, &l, &info), "transformer.h.1.attn.c_attn",
                             "some of the query, key and value");
    /* GPT-2 with c_fc's adapter alone: one Conv1D target, nothing fused */
    g = build(tp, &c, 32);
    tg_module *ff = tg_module_get_submodule(g, "trf_blocks.1.ff.layers");
    tg_module *fc = tg_module_get_submodule(ff, "0");
    assert_int_equal(tg_module_add_module(ff, "0", tg_linear_with_lora_new(tp, fc, 2, 4.0)), TG_OK);
    assert_int_equal(tg_decoder_peft_state_dict(tp, g, &l, &info), TG_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.names[0], "base_model.model.transformer.h.1.mlp.c_fc.lora_A.weight");
    assert_int_equal(info.n_targets, 1);
    assert_string_equal(info.targets[0], "c_fc");
    assert_true(info.fan_in_fan_out);
    assert_null(info.fused);
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* ---- (m) options and fields ----------------------------------------------------------------------------- */

/* A copy of a small tokenizer's folder with a tokenizer_config.json of text (NULL: none). */
static void tokenizer_folder(const char *dir, const char *from, const char *config)
{
    assert_int_equal(mkdir(dir, 0755), 0);
    static const char *const files[] = {"tokenizer.json", "encoder.json", "vocab.bpe"};
    for (int i = 0; i < 3; i++) {
        char *src = path_in(from, files[i]);
        struct stat sb;
        if (stat(src, &sb) == 0) {
            char *dst = path_in(dir, files[i]);
            char *text = tu_read_file(src, &(size_t){0});
            write_text(dst, text);
            free(text), free(dst);
        }
        free(src);
    }
    if (config) {
        char *p = path_in(dir, "tokenizer_config.json");
        write_text(p, config);
        free(p);
    }
}

static void assert_text_in(const char *dir, const char *name, const char *want)
{
    char *text = read_in(dir, name, NULL);
    if (strcmp(text, want) != 0) fail_msg("%s/%s is\n%s\nexpected\n%s", dir, name, text, want);
    free(text);
}

static void test_options(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "o");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_LLAMA3);
    tg_module *m = build(tp, &c, 40);
    tu_assert_one_line_error(tg_export_hf(m, dir, &(tg_export_options){.type = (tg_export_type)7}), "export_hf",
                             "unknown weight type 7");
    tu_assert_one_line_error(tg_export_hf(m, NULL, NULL), "export_hf", "NULL folder");
    assert_listing(parent, "");

    /* a max_shard_size below every tensor's size: each tensor a shard, numbered in order */
    randomize(tp, m, 40);
    export_ok(m, dir, &(tg_export_options){.max_shard_size = 1, .tokenizer = g_small_tok});
    tg_named_list l;
    bool tied;
    assert_int_equal(tg_decoder_hf_state_dict(tp, m, &l, &tied), TG_OK);
    assert_int_equal(l.n, 3 + 2 * 9);
    json_t *index = json_in(dir, "model.safetensors.index.json"), *map = json_object_get(index, "weight_map");
    assert_int_equal(json_object_size(map), l.n);
    for (int i = 0; i < l.n; i++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, l.n);
        assert_string_equal(json_string_value(json_object_get(map, l.names[i])), name);
        json_t *h = st_header(dir, name);
        assert_int_equal(json_object_size(h), 2); /* the tensor and __metadata__ */
        assert_non_null(json_object_get(h, l.names[i]));
        json_decref(h);
    }
    json_decref(index);
    tu_assert_close(logits_of(tp, load_back(tp, dir, &c)), logits_of(tp, m), 0, 0, "logits from one-tensor shards");

    /* bfloat16 weights written as bfloat16 (their own bits) and as float16 (widened, then rounded) */
    tg_decoder_config cb = c;
    cb.weights = TG_BF16;
    tg_module *mb = build(tp, &cb, 41);
    tg_tensor *wk = tg_module_get_parameter(mb, "trf_blocks.1.ff.fc3.weight");
    const uint16_t *bits = tg_data_ptr(wk);
    for (int t = 0; t < 2; t++) {
        remove_tree(dir);
        export_ok(mb, dir, &(tg_export_options){.type = t ? TG_EXPORT_F16 : TG_EXPORT_BF16, .tokenizer = g_small_tok});
        json_t *h = st_header(dir, "model.safetensors");
        assert_string_equal(json_string_value(json_object_get(json_object_get(h, "model.layers.1.mlp.down_proj.weight"),
                                                              "dtype")),
                            t ? "F16" : "BF16");
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(h, "model.norm.weight"), "dtype")), t ? "F16" : "BF16");
        json_decref(h);
        tg_module *back = load_back(tp, dir, &c);
        const float *got = tg_data_ptr(tg_module_get_parameter(back, "trf_blocks.1.ff.fc3.weight"));
        for (int64_t i = 0; i < tg_numel(wk); i++) {
            uint32_t u = (uint32_t)bits[i] << 16;
            float x;
            memcpy(&x, &u, 4);
            float want = t ? f16_round(x) : x;
            if (memcmp(&want, &got[i], 4) != 0)
                fail_msg("%s: element %lld read back %.9g, expected %.9g", t ? "F16" : "BF16", (long long)i,
                         (double)got[i], (double)want);
        }
    }

    /* a head with the embedding's values (a tied checkpoint loaded into an
     * untied model) is written tied */
    tg_module *tw = build(tp, &c, 42);
    tg_tensor *emb = tg_module_get_parameter(tw, "tok_emb.weight");
    tg_tensor *head = tg_module_get_parameter(tw, "out_head.weight");
    memcpy(tg_data_ptr(head), tg_data_ptr(emb), (size_t)V * 16 * sizeof(float));
    remove_tree(dir);
    export_ok(tw, dir, &(tg_export_options){.tokenizer = g_small_tok});
    json_t *h = st_header(dir, "model.safetensors");
    assert_null(json_object_get(h, "lm_head.weight"));
    json_decref(h);
    tg_decoder_config ct = c;
    ct.tie_head = true;
    tu_assert_close(logits_of(tp, load_back(tp, dir, &ct)), logits_of(tp, tw), 0, 0, "logits of the tied head");

    /* config.json's optional fields: GPT-2's n_inner, Llama 3 without
     * rope_scaling, Gemma 3's layers without a period */
    c = tiny(TG_GPT_FAMILY_GPT2);
    c.hidden_dim = 24;
    remove_tree(dir);
    tg_module *g = build(tp, &c, 43);
    export_ok(g, dir, &(tg_export_options){.tokenizer = g_small_gpt2});
    json_t *cfg = json_in(dir, "config.json");
    assert_int_equal(json_integer_value(json_object_get(cfg, "n_inner")), 24);
    json_decref(cfg);
    tu_assert_close(logits_of(tp, load_back(tp, dir, &c)), logits_of(tp, g), 0, 0, "GPT-2 with n_inner");
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    c.rope_freq = (tg_rope_freq){0};
    c.rope_base = 2.5e20, c.norm_eps = 1.5e-7; /* numbers as Python's repr writes them */
    remove_tree(dir);
    export_ok(build(tp, &c, 44), dir, &(tg_export_options){.tokenizer = g_small_tok});
    cfg = json_in(dir, "config.json");
    assert_true(json_is_null(json_object_get(cfg, "rope_scaling")));
    json_decref(cfg);
    char *text = read_in(dir, "config.json", NULL);
    assert_non_null(strstr(text, "\n  \"rope_theta\": 2.5e+20,\n"));
    assert_non_null(strstr(text, "\n  \"rms_norm_eps\": 1.5e-07,\n"));
    assert_non_null(strstr(text, "\n  \"initializer_range\": 0.02,\n"));
    free(text);
    load_back(tp, dir, &c);
    c.rope_base = 123456.5, c.norm_eps = 1e-4;
    remove_tree(dir);
    export_ok(build(tp, &c, 44), dir, &(tg_export_options){.tokenizer = g_small_tok});
    text = read_in(dir, "config.json", NULL);
    assert_non_null(strstr(text, "\n  \"rope_theta\": 123456.5,\n"));
    assert_non_null(strstr(text, "\n  \"rms_norm_eps\": 0.0001,\n"));
    free(text);
    load_back(tp, dir, &c);
    c = tiny(TG_GPT_FAMILY_GEMMA3);
    c.layer_types[0] = TG_LAYER_FULL, c.layer_types[1] = TG_LAYER_SLIDING, c.layer_types[2] = TG_LAYER_SLIDING;
    remove_tree(dir);
    tg_module *gm = build(tp, &c, 45);
    randomize(tp, gm, 45);
    export_ok(gm, dir, &(tg_export_options){.tokenizer = g_small_tok});
    cfg = json_in(dir, "config.json");
    assert_null(json_object_get(cfg, "_sliding_window_pattern"));
    json_t *want = json_pack("[sss]", "full_attention", "sliding_attention", "sliding_attention");
    assert_true(json_equal(json_object_get(cfg, "layer_types"), want));
    assert_int_equal(json_integer_value(json_object_get(cfg, "pad_token_id")), 40);
    json_decref(want), json_decref(cfg);
    tu_assert_close(logits_of(tp, load_back(tp, dir, &c)), logits_of(tp, gm), 0, 0, "Gemma 3 without a period");
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* tokenizer_config.json and generation_config.json from each kind of source. */
static void test_tokenizer_files(void **state)
{
    (void)state;
    char *parent = new_folder(), *dir = path_in(parent, "t");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_QWEN3);
    tg_module *q = build(tp, &c, 50);

    /* no config beside the tokenizer: Qwen's written for its chat tokens */
    export_ok(q, dir, &(tg_export_options){.tokenizer = g_small_tok});
    assert_text_in(dir, "generation_config.json", "{\n  \"eos_token_id\": 42,\n  \"pad_token_id\": 40\n}\n");
    char *src = path_in(g_small_tok, "tokenizer.json"), *out = path_in(dir, "tokenizer.json");
    assert_same_bytes(src, out);
    free(src), free(out);
    json_t *tc = json_in(dir, "tokenizer_config.json");
    assert_string_equal(json_string_value(json_object_get(tc, "tokenizer_class")), "Qwen2Tokenizer");
    assert_string_equal(json_string_value(json_object_get(tc, "eos_token")), "<|im_end|>");
    assert_true(json_is_null(json_object_get(tc, "bos_token")));
    assert_non_null(strstr(json_string_value(json_object_get(tc, "chat_template")), "<|im_start|>"));
    json_t *decoder41 = json_object_get(json_object_get(tc, "added_tokens_decoder"), "41");
    assert_string_equal(json_string_value(json_object_get(decoder41, "content")), "<|im_start|>");
    json_decref(tc);
    char *text = read_in(dir, "tokenizer_config.json", NULL);
    static const char head[] = "{\n  \"add_bos_token\": false,\n  \"add_prefix_space\": false,\n";
    assert_true(strncmp(text, head, strlen(head)) == 0);
    free(text);

    /* a config naming no end of text: the end of a turn */
    char *src_dir = path_in(parent, "no_eos");
    tokenizer_folder(src_dir, g_small_tok, "{\"eos_token\": null, \"pad_token\": {\"content\": null}}");
    export_ok(q, dir, &(tg_export_options){.tokenizer = src_dir});
    assert_text_in(dir, "generation_config.json", "{\n  \"eos_token_id\": 42\n}\n");
    json_t *cfg = json_in(dir, "config.json");
    assert_true(json_is_null(json_object_get(cfg, "eos_token_id")));
    json_decref(cfg);
    assert_text_in(dir, "tokenizer_config.json", "{\"eos_token\": null, \"pad_token\": {\"content\": null}}");
    remove_tree(src_dir), free(src_dir);

    /* GPT-2's files without special tokens in the config: no ids at all */
    src_dir = path_in(parent, "gpt2_none");
    tokenizer_folder(src_dir, g_small_gpt2, "{\"bos_token\": null, \"eos_token\": null}");
    c = tiny(TG_GPT_FAMILY_GPT2);
    tg_module *g = build(tp, &c, 51);
    export_ok(g, dir, &(tg_export_options){.tokenizer = src_dir});
    assert_text_in(dir, "generation_config.json", "{}\n");
    remove_tree(src_dir), free(src_dir);
    /* ... and with GPT-2's own: <|endoftext|> for all */
    export_ok(g, dir, &(tg_export_options){.tokenizer = g_small_gpt2});
    assert_text_in(dir, "generation_config.json", "{\n  \"bos_token_id\": 40,\n  \"eos_token_id\": 40\n}\n");
    tc = json_in(dir, "tokenizer_config.json");
    assert_string_equal(json_string_value(json_object_get(tc, "tokenizer_class")), "GPT2Tokenizer");
    assert_string_equal(json_string_value(json_object_get(tc, "unk_token")), "<|endoftext|>");
    assert_null(json_object_get(tc, "chat_template"));
    json_decref(tc);
    /* the tokenizer.json built from the two files: in order, UTF-8, no newline after */
    text = read_in(dir, "tokenizer.json", NULL);
    assert_true(strncmp(text, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n", 44) == 0);
    assert_non_null(strstr(text, "\n      \"\xc4\xa0the\": 30,\n"));
    assert_non_null(strstr(text, "\n      \"\xc4\xa0 a\"\n    ]\n  }\n}"));
    assert_int_equal(text[strlen(text) - 1], '}');
    free(text);

    /* Llama 3's chat tokens with a config of its own: an end of text and an
     * end of turn, a list of templates, an integer past 64 bits (read as a
     * real: the file is still copied as it is) */
    src_dir = path_in(parent, "llama");
    assert_int_equal(mkdir(src_dir, 0755), 0);
    char *small_json = path_in(g_small_tok, "tokenizer.json");
    json_t *tok = json_load_file(small_json, 0, NULL);
    free(small_json);
    assert_non_null(tok);
    static const char *const llama_tokens[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                               "<|end_header_id|>", "<|eot_id|>"};
    json_t *add = json_array();
    for (int i = 0; i < 5; i++) json_array_append_new(add, added_token(40 + i, llama_tokens[i]));
    json_object_set_new(tok, "added_tokens", add);
    char *tok_path = path_in(src_dir, "tokenizer.json");
    assert_int_equal(json_dump_file(tok, tok_path, JSON_INDENT(2)), 0);
    json_decref(tok);
    char *cfg_path = path_in(src_dir, "tokenizer_config.json");
    write_text(cfg_path, "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": {\"content\": \"<|end_of_text|>\"}, "
                         "\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"t\"}, {\"name\": \"default\", "
                         "\"template\": \"{{ messages }}\"}], \"model_max_length\": 1000000000000000019884624838656, "
                         "\"clean_up_tokenization_spaces\": true, \"numbers\": [-0.25, 1.5e-07, 2.5e+20, 123456.5, "
                         "0.001, 1e16, 1e15, 100.0, 0.1, -3], \"none\": [], \"empty\": {}}");
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    tg_module *lm = build(tp, &c, 52);
    export_ok(lm, dir, &(tg_export_options){.tokenizer = src_dir});
    assert_text_in(dir, "generation_config.json",
                   "{\n  \"bos_token_id\": 40,\n  \"eos_token_id\": [\n    41,\n    44\n  ]\n}\n");
    cfg = json_in(dir, "config.json");
    assert_int_equal(json_integer_value(json_object_get(cfg, "bos_token_id")), 40);
    assert_int_equal(json_integer_value(json_object_get(cfg, "eos_token_id")), 41);
    json_decref(cfg);
    out = path_in(dir, "tokenizer_config.json");
    assert_same_bytes(cfg_path, out); /* its integers integers, 1e30 among them */
    free(out);
    out = path_in(dir, "tokenizer.json");
    assert_same_bytes(tok_path, out);
    free(out);
    /* without the config: Llama's written for its chat tokens */
    unlink(cfg_path);
    export_ok(lm, dir, &(tg_export_options){.tokenizer = tok_path});
    assert_text_in(dir, "generation_config.json", "{\n  \"bos_token_id\": 40,\n  \"eos_token_id\": 44\n}\n");
    tc = json_in(dir, "tokenizer_config.json");
    assert_string_equal(json_string_value(json_object_get(tc, "tokenizer_class")), "PreTrainedTokenizerFast");
    assert_string_equal(json_string_value(json_object_get(tc, "bos_token")), "<|begin_of_text|>");
    assert_non_null(strstr(json_string_value(json_object_get(tc, "chat_template")), "<|start_header_id|>"));
    json_decref(tc);
    free(tok_path), free(cfg_path);
    remove_tree(src_dir), free(src_dir);

    /* PEFT's adapter_config.json: the name as Python's json writes it
     * (ASCII: \u escapes, a surrogate pair past the BMP), or null */
    assert_int_equal(tg_lora_replace_linear(tp, q, 2, 4.0), TG_OK);
    static const char name[] = "mod\xc3\xa8le \xf0\x9f\x9a\x80\t\"q\"\\\x01/\xe2\x82\xac\r\b\f\n";
    export_ok(q, dir, &(tg_export_options){.adapter = true, .tokenizer = g_small_tok, .name = name});
    text = read_in(dir, "adapter_config.json", NULL);
    if (!strstr(text, "\n  \"base_model_name_or_path\": \"mod\\u00e8le \\ud83d\\ude80\\t\\\"q\\\"\\\\\\u0001/\\u20ac"
                      "\\r\\b\\f\\n\",\n"))
        fail_msg("adapter_config.json:\n%s", text);
    assert_int_equal(text[strlen(text) - 1], '}'); /* PEFT writes no newline after */
    free(text);
    json_t *ac = json_in(dir, "adapter_config.json");
    assert_string_equal(json_string_value(json_object_get(ac, "base_model_name_or_path")), name);
    assert_int_equal(json_integer_value(json_object_get(ac, "lora_alpha")), 4);
    json_decref(ac);
    assert_int_equal(tg_lora_replace_linear(tp, g, 2, 1.5), TG_OK);
    export_ok(g, dir, &(tg_export_options){.adapter = true, .tokenizer = g_small_gpt2});
    ac = json_in(dir, "adapter_config.json");
    assert_true(json_is_null(json_object_get(ac, "base_model_name_or_path")));
    assert_true(json_real_value(json_object_get(ac, "lora_alpha")) == 1.5);
    assert_true(json_real_value(json_object_get(json_object_get(ac, "alpha_pattern"), "c_attn")) == 4.5);
    json_decref(ac);
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),         cmocka_unit_test(test_qwen3),      cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_gemma3),       cmocka_unit_test(test_config_files), cmocka_unit_test(test_half_types),
        cmocka_unit_test(test_shards),       cmocka_unit_test(test_adapter),    cmocka_unit_test(test_refused),
        cmocka_unit_test(test_bad_paths),    cmocka_unit_test(test_full_disk),  cmocka_unit_test(test_atomic_file),
        cmocka_unit_test(test_atomic_dir),   cmocka_unit_test(test_atomic_file_paths),
        cmocka_unit_test(test_features),     cmocka_unit_test(test_state_dict_args),
        cmocka_unit_test(test_lora_merge),   cmocka_unit_test(test_adapter_refused),
        cmocka_unit_test(test_options),      cmocka_unit_test(test_tokenizer_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
