/* Hugging Face folders (tg_export_hf): tiny decoders of each family
 * exported and read back by the loaders (tg_decoder_config_from_hf,
 * tg_decoder_load_hf) give the same configuration and, in float32, the same
 * logits bit for bit; float16 and bfloat16 folders hold the weights rounded
 * to nearest even; a small max_shard_size gives shards and their index; the
 * JSON files are written as transformers, tokenizers and PEFT write them;
 * LoRA adapters as PEFT's files; and every bad path or full disk leaves
 * nothing behind, for the folder and for the single file the GGUF writer
 * uses (src/export/atomic.c, compiled into this test: private to the
 * library). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "export_internal.h" /* the atomic file (atomic.c is compiled into this test) */
#include "testutil.h"

static char g_data[1024];      /* the source tree's data/ */
static char g_qwen_tok[1100];  /* data/qwen3/tokenizer.json (a tokenizer_config.json beside it) */
static char g_gpt2_tok[1100];  /* data/gpt2 (encoder.json, vocab.bpe) */

static int setup(void **state)
{
    (void)state;
    tu_ref_path(g_data, sizeof g_data, "../../data");
    snprintf(g_qwen_tok, sizeof g_qwen_tok, "%s/qwen3/tokenizer.json", g_data);
    snprintf(g_gpt2_tok, sizeof g_gpt2_tok, "%s/gpt2", g_data);
    /* the families' installed tokenizers (tokenizer NULL): the source tree's */
    setenv("TAPEGRAD_DATA", g_data, 1);
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

/* The family's preset, shrunk: two or three layers of width 16, the
 * vocabulary of the tokenizer the test gives it. */
static tg_decoder_config tiny(tg_gpt_family family)
{
    tg_decoder_config c;
    static const char *const preset[] = {"gpt2-small", "qwen3-0.6b", "llama3.2-1b", "gemma3-270m"};
    assert_int_equal(tg_decoder_config_preset(preset[family], &c), TG_OK);
    c.emb_dim = 16, c.n_layers = 2, c.context_length = 32;
    switch (family) {
    case TG_GPT_FAMILY_GPT2:
        c.n_heads = 2, c.drop_rate = 0.0, c.qkv_bias = true;
        break;
    case TG_GPT_FAMILY_QWEN3:
        c.n_heads = 2, c.n_kv_groups = 1, c.head_dim = 8, c.hidden_dim = 24, c.tie_head = true;
        break;
    case TG_GPT_FAMILY_LLAMA3: /* Qwen3's tokenizer: its vocabulary */
        c.n_heads = 4, c.n_kv_groups = 2, c.hidden_dim = 24, c.vocab_size = 151936;
        break;
    case TG_GPT_FAMILY_GEMMA3:
        c.n_heads = 2, c.n_kv_groups = 1, c.head_dim = 8, c.hidden_dim = 24, c.n_layers = 3, c.vocab_size = 151936;
        c.sliding_window = 4, c.query_pre_attn_scalar = 8, c.tie_head = true;
        assert_int_equal(tg_decoder_config_layer_pattern(&c, 2), TG_OK);
        break;
    }
    return c;
}

static const char *tokenizer_of(tg_gpt_family family) { return family == TG_GPT_FAMILY_GPT2 ? g_gpt2_tok : g_qwen_tok; }

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
    static const int64_t ids[] = {1, 5, 100, 2000, 7, 42, 50256, 3};
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
    /* the tokenizer.json built from encoder.json and vocab.bpe reads back
     * as a tokenizer that encodes as GPT-2's */
    char *parent = new_folder(), *dir = path_in(parent, "g");
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
    export_ok(build(tp, &c, 2), dir, &(tg_export_options){.tokenizer = g_gpt2_tok});
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
    c.qkv_bias = false;
    tg_module *m = build(tp, &c, 3);
    randomize(tp, m, 3);
    export_ok(m, dir, &(tg_export_options){.tokenizer = g_gpt2_tok});
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
        {TG_GPT_FAMILY_GPT2, "bos_token_id", "50256"},
        {TG_GPT_FAMILY_GPT2, "eos_token_id", "50256"},
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
        export_ok(a, dir, &(tg_export_options){.type = type, .tokenizer = g_qwen_tok});
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
    export_ok(mb, dir, &(tg_export_options){.type = TG_EXPORT_F32, .tokenizer = g_qwen_tok});
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
    /* 2 KB: the embedding and the head (9.7 MB each) alone, the layers'
     * weights (16 x 16 and 24 x 16 floats) two or three to a shard */
    const int64_t max = 2048;
    export_ok(a, dir, &(tg_export_options){.max_shard_size = max, .tokenizer = g_qwen_tok});
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
    export_ok(a, dir, &(tg_export_options){.max_shard_size = 1 << 30, .tokenizer = g_qwen_tok});
    assert_listing(dir, MODEL_FILES);
    tu_assert_one_line_error(tg_export_hf(a, dir, &(tg_export_options){.max_shard_size = -1}), "max_shard_size");

    /* GPT-2 from shards too */
    c = tiny(TG_GPT_FAMILY_GPT2);
    a = build(tp, &c, 8);
    randomize(tp, a, 8);
    export_ok(a, dir, &(tg_export_options){.max_shard_size = 4096, .tokenizer = g_gpt2_tok});
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
    tu_assert_one_line_error(tg_export_hf(m, dir, &(tg_export_options){.adapter = true, .tokenizer = g_qwen_tok}),
                          "no LoRA layers");
    assert_int_equal(tg_lora_replace_linear(tp, m, 2, 4.0), TG_OK);
    randomize(tp, m, 9);
    tu_assert_one_line_error(tg_export_hf(m, dir, &(tg_export_options){.tokenizer = g_qwen_tok}), "LoRA",
                          "tg_lora_merge");
    assert_listing(parent, "");

    export_ok(m, dir, &(tg_export_options){.adapter = true, .tokenizer = g_qwen_tok});
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
    export_ok(g, dir, &(tg_export_options){.adapter = true, .tokenizer = g_gpt2_tok, .name = "my-base"});
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
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_gpt2_tok}),
                          "GPT-2", "RMSNorm");
    c = tiny(TG_GPT_FAMILY_GPT2);
    c.positions = TG_POSITIONS_ROPE, c.head_dim = 8;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_gpt2_tok}),
                          "GPT-2", "RoPE");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.qkv_bias = true;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_qwen_tok}),
                          "Qwen3", "bias");
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.qk_norm = false;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_qwen_tok}),
                          "Qwen3", "QK-norm");
    c = tiny(TG_GPT_FAMILY_LLAMA3);
    c.mlp = TG_MLP_GEGLU;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_qwen_tok}),
                          "Llama 3", "GeGLU");
    /* a tokenizer with more ids than the model's vocabulary */
    c = tiny(TG_GPT_FAMILY_QWEN3);
    c.vocab_size = 1000;
    tu_assert_one_line_error(tg_export_hf(build(tp, &c, 1), dir, &(tg_export_options){.tokenizer = g_qwen_tok}),
                          "151643", "1000");
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
    tg_export_options o = {.tokenizer = g_gpt2_tok};

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

/* In a child process limited to `limit` bytes per file (SIGXFSZ ignored,
 * so a write past it fails with EFBIG as on a full disk): the export
 * fails with one line naming the file, and parent holds what it held. */
static void full_disk(const char *parent, const char *dir, rlim_t limit, const char *before, const char *want)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {limit, limit};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
        tg_tape *tp = tg_tape_new();
        tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
        tg_module *m = build(tp, &c, 12);
        int st = tg_export_hf(m, dir, &(tg_export_options){.tokenizer = g_gpt2_tok}), code = 0;
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
        _exit(code);
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
    char *parent = new_folder(), *dir = path_in(parent, "out");
    /* the weights (3 MB) pass the limit: safetensors' write fails */
    full_disk(parent, dir, 1 << 20, "", "model.safetensors");
    /* config.json's 700 bytes pass it: the file's checked flush fails */
    full_disk(parent, dir, 256, "", "config.json");
    /* an existing export stays as it was */
    tg_tape *tp = tg_tape_new();
    tg_decoder_config c = tiny(TG_GPT_FAMILY_GPT2);
    export_ok(build(tp, &c, 13), dir, &(tg_export_options){.tokenizer = g_gpt2_tok});
    char *cfg = path_in(dir, "config.json"), *st = path_in(dir, "model.safetensors");
    size_t n0, n1;
    char *c0 = tu_read_file(cfg, &n0), *s0 = tu_read_file(st, &n1);
    full_disk(parent, dir, 1 << 20, "out", "model.safetensors");
    assert_listing(dir, MODEL_FILES);
    size_t m0, m1;
    char *c1 = tu_read_file(cfg, &m0), *s1 = tu_read_file(st, &m1);
    assert_true(n0 == m0 && memcmp(c0, c1, n0) == 0);
    assert_true(n1 == m1 && memcmp(s0, s1, n1) == 0);
    free(c0), free(c1), free(s0), free(s1), free(cfg), free(st);
    tg_tape_free(tp);
    remove_tree(parent);
    free(dir), free(parent);
}

/* ---- (h) the atomic file of export_internal.h (atomic.c, compiled in) ------------------------------------ */

static void test_atomic_file(void **state)
{
    (void)state;
    char *parent = new_folder(), *path = path_in(parent, "out.gguf");
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
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {4096, 4096};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
        static char big[100000];
        int code = 0;
        if (tg__export_file_begin(&o, path, "export_gguf") != TG_OK) _exit(11);
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
        _exit(code);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_listing(parent, "out.gguf");
    text = tu_read_file(path, &(size_t){0});
    assert_string_equal(text, "new");
    free(text);
    remove_tree(parent);
    free(path), free(parent);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),         cmocka_unit_test(test_qwen3),      cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_gemma3),       cmocka_unit_test(test_config_files), cmocka_unit_test(test_half_types),
        cmocka_unit_test(test_shards),       cmocka_unit_test(test_adapter),    cmocka_unit_test(test_refused),
        cmocka_unit_test(test_bad_paths),    cmocka_unit_test(test_full_disk),  cmocka_unit_test(test_atomic_file),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
