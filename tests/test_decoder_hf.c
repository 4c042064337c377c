/* Hugging Face Qwen3 and Gemma 3 folders in the decoder (tg_decoder_config_from_hf,
 * tg_decoder_load_hf): tests/ref/hf_qwen3_tiny/ (config.json, two BF16
 * shards and their index) and tests/ref/decoder.json's "hf" entry, both
 * written by tools/reference/decoder.py: the book's Qwen3Model loaded from
 * those files by its load_weights_into_qwen gives the logits digest and the
 * generated ids checked here. Then Llama 3's names and config (a model's own
 * weights written under Hugging Face's names and read back), other
 * configurations, and one broken copy of the folder per error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static json_t *g_ref;      /* decoder.json */
static const json_t *g_hf; /* its "hf" */
static char g_dir[1024];   /* tests/ref/hf_qwen3_tiny */

static const char *const FILES[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                    "model-00002-of-00002.safetensors"};
enum { NFILES = 4 };

static const json_t *jget(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!v) fail_msg("reference: missing key \"%s\"", key);
    return v;
}

static int64_t jint(const json_t *o, const char *key) { return (int64_t)json_integer_value(jget(o, key)); }
static double jnum(const json_t *o, const char *key) { return json_number_value(jget(o, key)); }

static int setup(void **state)
{
    (void)state;
    g_ref = tu_load_ref("decoder.json");
    g_hf = json_object_get(g_ref, "hf");
    if (!g_hf) return -1;
    tu_ref_path(g_dir, sizeof g_dir, json_string_value(json_object_get(g_hf, "dir")));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(g_ref);
    return 0;
}


/* ---- files -------------------------------------------------------------------------------- */

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_bytes(path, text, strlen(text));
}

/* name copied from the reference folder into dir. */
static void copy_in(const char *dir, const char *name)
{
    char from[1200], to[1200];
    snprintf(from, sizeof from, "%s/%s", g_dir, name);
    snprintf(to, sizeof to, "%s/%s", dir, name);
    size_t len;
    char *b = tu_read_file(from, &len);
    write_bytes(to, b, len);
    free(b);
}

/* A copy of the reference folder's config, index and shards in a new
 * directory under /tmp (its tokenizer.json is not needed here). */
static char *copy_folder(void)
{
    char tmpl[] = "/tmp/tg_hf_XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    d = strdup(d);
    for (int i = 0; i < NFILES; i++) copy_in(d, FILES[i]);
    return d;
}

static void remove_folder(char *dir, const char *const *extra, int n_extra)
{
    char path[1200];
    for (int i = 0; i < NFILES; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i]);
        unlink(path);
    }
    for (int i = 0; i < n_extra; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, extra[i]);
        unlink(path);
    }
    assert_int_equal(rmdir(dir), 0);
    free(dir);
}

/* The first `from` in b[0, len) (the shards hold NUL bytes), or NULL. */
static char *find(char *b, size_t len, const char *from)
{
    size_t nf = strlen(from);
    for (size_t i = 0; i + nf <= len; i++)
        if (memcmp(b + i, from, nf) == 0) return b + i;
    return NULL;
}

/* dir/name with every `from` replaced by `to`. */
static void edit_file(const char *dir, const char *name, const char *from, const char *to)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t len, nf = strlen(from), nt = strlen(to), count = 0;
    char *b = tu_read_file(path, &len), *end = b + len, *p, *q;
    for (p = b; (q = find(p, (size_t)(end - p), from)) != NULL; p = q + nf) count++;
    if (count == 0) fail_msg("%s holds no '%s'", path, from);
    char *out = malloc(len + count * nt + 1), *o = out;
    assert_non_null(out);
    for (p = b; (q = find(p, (size_t)(end - p), from)) != NULL; p = q + nf) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, nt);
        o += nt;
    }
    memcpy(o, p, (size_t)(end - p));
    o += end - p;
    write_bytes(path, out, (size_t)(o - out));
    free(out);
    free(b);
}

/* dir/name written again by the library's writer (float32): without the
 * tensor `drop`, with a zero (n) tensor `add`, when given. */
static void rewrite_shard(const char *dir, const char *name, const char *drop, const char *add, int64_t n)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tg_tape *tp = tg_tape_new();
    tg_safetensors f;
    if (tg_safetensors_load(tp, path, &f) != TG_OK) fail_msg("%s", tg_last_error());
    tg_named_tensor *list = calloc((size_t)f.n + 1, sizeof *list);
    int k = 0;
    for (int i = 0; i < f.n; i++)
        if (!drop || strcmp(f.names[i], drop) != 0) list[k++] = (tg_named_tensor){f.names[i], f.tensors[i]};
    if (drop) assert_int_equal(k, f.n - 1);
    if (add) list[k++] = (tg_named_tensor){add, tg_zeros(tp, TG_F32, 1, &n)};
    assert_int_equal(tg_safetensors_save(path, list, k), TG_OK);
    free(list);
    tg_tape_free(tp);
}

/* ---- (a) the configuration ------------------------------------------------------------------ */

static void test_config(void **state)
{
    (void)state;
    tg_decoder_config c;
    memset(&c, 0xab, sizeof c);
    if (tg_decoder_config_from_hf(g_dir, &c) != TG_OK) fail_msg("%s", tg_last_error());
    const json_t *want = jget(g_hf, "config");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)want, key, v) {
        int64_t got = 0;
        if (strcmp(key, "vocab_size") == 0)
            got = c.vocab_size;
        else if (strcmp(key, "context_length") == 0)
            got = c.context_length;
        else if (strcmp(key, "emb_dim") == 0)
            got = c.emb_dim;
        else if (strcmp(key, "n_heads") == 0)
            got = c.n_heads;
        else if (strcmp(key, "n_layers") == 0)
            got = c.n_layers;
        else if (strcmp(key, "hidden_dim") == 0)
            got = c.hidden_dim;
        else if (strcmp(key, "head_dim") == 0)
            got = c.head_dim;
        else if (strcmp(key, "n_kv_groups") == 0)
            got = c.n_kv_groups;
        else if (strcmp(key, "qk_norm") == 0) {
            assert_true(c.qk_norm == json_is_true(v));
            continue;
        } else if (strcmp(key, "rope_base") == 0) {
            assert_true(c.rope_base == json_number_value(v));
            continue;
        } else
            fail_msg("hf.config has a key this test does not know: %s", key);
        if (got != json_integer_value(v))
            fail_msg("%s: %lld, the reference's %lld", key, (long long)got, (long long)json_integer_value(v));
    }
    assert_int_equal(c.family, TG_GPT_FAMILY_QWEN3);
    assert_true(c.tie_head);
    assert_true(c.qk_norm);
    assert_true(c.drop_rate == 0.0);
    assert_false(c.qkv_bias);
    assert_true(c.norm_eps == 1e-6);
    assert_true(c.rope_freq.factor == 0 && c.rope_freq.original_context_length == 0);
    assert_int_equal(tg_decoder_config_check(&c), TG_OK);
}

/* Real checkpoints' config.json (Qwen3-0.6B, Llama-3.2-1B, as published)
 * give the book's presets, tied. */
static const char QWEN3_06B[] =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
    " \"hidden_size\": 1024, \"initializer_range\": 0.02, \"intermediate_size\": 3072,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
    " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
    " \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";
static const char LLAMA32_1B[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 128000, \"eos_token_id\": 128001, \"head_dim\": 64, \"hidden_act\": \"silu\","
    " \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 8192,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"pretraining_tp\": 1,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
    " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";

static void assert_same_config(const tg_decoder_config *a, const tg_decoder_config *b)
{
    assert_int_equal(a->family, b->family);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->context_length, b->context_length);
    assert_int_equal(a->emb_dim, b->emb_dim);
    assert_int_equal(a->n_heads, b->n_heads);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->hidden_dim, b->hidden_dim);
    assert_int_equal(a->head_dim ? a->head_dim : a->emb_dim / a->n_heads,
                     b->head_dim ? b->head_dim : b->emb_dim / b->n_heads);
    assert_int_equal(a->n_kv_groups, b->n_kv_groups);
    assert_true(a->qk_norm == b->qk_norm);
    assert_true(a->rope_base == b->rope_base);
    assert_true(a->rope_freq.factor == b->rope_freq.factor);
    assert_true(a->rope_freq.low_freq_factor == b->rope_freq.low_freq_factor);
    assert_true(a->rope_freq.high_freq_factor == b->rope_freq.high_freq_factor);
    assert_int_equal(a->rope_freq.original_context_length, b->rope_freq.original_context_length);
    assert_true(a->drop_rate == b->drop_rate && a->qkv_bias == b->qkv_bias && a->tie_head == b->tie_head);
}

static void test_config_presets(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/tg_hf_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    const struct {
        const char *json, *preset;
        double eps;
    } cases[] = {{QWEN3_06B, "qwen3-0.6b", 1e-6}, {LLAMA32_1B, "llama3.2-1b", 1e-5}};
    for (int i = 0; i < 2; i++) {
        write_text(dir, "config.json", cases[i].json);
        tg_decoder_config got, want;
        if (tg_decoder_config_from_hf(dir, &got) != TG_OK) fail_msg("%s: %s", cases[i].preset, tg_last_error());
        assert_int_equal(tg_decoder_config_preset(cases[i].preset, &want), TG_OK);
        want.tie_head = true;
        assert_true(got.norm_eps == cases[i].eps);
        assert_same_config(&got, &want);
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

/* One line naming the file and the key, for each way a key can be wrong;
 * *out untouched. */
static void test_config_errors(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/tg_hf_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    const struct {
        const char *base, *from, *to, *expect1, *expect2;
    } cases[] = {
        {QWEN3_06B, "\"model_type\": \"qwen3\"", "\"model_type\": \"bert\"", "model_type \"bert\" is not supported",
         NULL},
        {QWEN3_06B, "\"model_type\": \"qwen3\",", "", "key 'model_type' is missing", NULL},
        {QWEN3_06B, "\"hidden_size\": 1024", "\"hidden_size\": \"1024\"", "'hidden_size' must be a positive integer",
         "got \"1024\""},
        {QWEN3_06B, "\"hidden_size\": 1024", "\"hidden_size\": 0", "'hidden_size' must be a positive integer", "got 0"},
        {QWEN3_06B, "\"num_key_value_heads\": 8,", "", "key 'num_key_value_heads' is missing", NULL},
        {QWEN3_06B, "\"head_dim\": 128,", "", "key 'head_dim' is missing", NULL},
        {QWEN3_06B, "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": -1", "'rms_norm_eps' must be a number > 0", NULL},
        {QWEN3_06B, "\"rope_theta\": 1000000", "\"rope_theta\": null", "'rope_theta' must be a number > 0", NULL},
        {QWEN3_06B, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act \"gelu\" is not supported",
         NULL},
        {QWEN3_06B, "\"attention_bias\": false", "\"attention_bias\": true", "'attention_bias' is true", NULL},
        {QWEN3_06B, "\"attention_bias\": false", "\"attention_bias\": 0", "'attention_bias' must be true or false",
         NULL},
        {QWEN3_06B, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": \"yes\"",
         "'tie_word_embeddings' must be true or false", NULL},
        {QWEN3_06B, "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
         "'rope_scaling' must be null for qwen3", NULL},
        {QWEN3_06B, "\"num_key_value_heads\": 8", "\"num_key_value_heads\": 3",
         "n_heads (16) must be divisible by n_kv_groups (3)", NULL},
        {LLAMA32_1B, "\"head_dim\": 64", "\"head_dim\": 128", "head_dim 128 is not hidden_size / num_attention_heads",
         NULL},
        {LLAMA32_1B, "\"rope_type\": \"llama3\"", "\"rope_type\": \"linear\"",
         "rope_scaling.rope_type \"linear\" is not supported", NULL},
        {LLAMA32_1B, "\"factor\": 32.0, ", "", "key 'rope_scaling.factor' is missing", NULL},
        {LLAMA32_1B, "\"original_max_position_embeddings\": 8192", "\"original_max_position_embeddings\": 8192.5",
         "'rope_scaling.original_max_position_embeddings' must be a positive integer", NULL},
        {LLAMA32_1B, "\"high_freq_factor\": 4.0", "\"high_freq_factor\": 0.5", "rope_freq needs", NULL},
        {LLAMA32_1B, "\"mlp_bias\": false", "\"mlp_bias\": true", "'mlp_bias' is true", NULL},
        {LLAMA32_1B, "{", "[", "invalid JSON", NULL},
    };
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *at = strstr(cases[i].base, cases[i].from);
        if (!at) fail_msg("case %zu: no '%s'", i, cases[i].from);
        char text[4096];
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - cases[i].base), cases[i].base, cases[i].to,
                 at + strlen(cases[i].from));
        write_text(dir, "config.json", text);
        tg_decoder_config c;
        memset(&c, 0x5a, sizeof c);
        int st = tg_decoder_config_from_hf(dir, &c);
        assert_int_equal(st, TG_EFORMAT);
        if (cases[i].expect2)
            tu_assert_one_line_error(st, path, cases[i].expect1, cases[i].expect2);
        else
            tu_assert_one_line_error(st, path, cases[i].expect1);
        for (size_t k = 0; k < sizeof c; k++) assert_int_equal(((unsigned char *)&c)[k], 0x5a);
    }
    unlink(path);
    tg_decoder_config c;
    int st = tg_decoder_config_from_hf(dir, &c);
    assert_int_equal(st, TG_EIO);
    tu_assert_one_line_error(st, "config.json", "No such file");
    assert_int_equal(tg_decoder_config_from_hf(NULL, &c), TG_EINVAL);
    assert_int_equal(tg_decoder_config_from_hf(dir, NULL), TG_EINVAL);
    rmdir(dir);
}

/* ---- (b) logits ------------------------------------------------------------------------------ */

/* FNV-1a 64 over the float32 bit patterns as uint32 words. */
static uint64_t fnv1a64_u32(const float *x, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w;
        memcpy(&w, x + i, sizeof w);
        h ^= w;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The check against the digest's own check value: the hash as decoder.json computes it. */
static void test_digest_check(void **state)
{
    (void)state;
    const json_t *hc = jget(g_ref, "hash_check"), *d = jget(hc, "digest");
    tg_tape *tp = tg_tape_new();
    tg_tensor *t = tu_tensor_from_json(tp, jget(hc, "tensor"), TG_F32);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64_u32(tg_data_ptr(t), tg_numel(t)));
    assert_string_equal(hex, json_string_value(jget(d, "fnv1a64")));
    tg_tape_free(tp);
}

static tg_module *load_model(tg_tape *mt, const tg_decoder_config *cfg, const char *dir)
{
    tg_manual_seed((uint64_t)jint(g_hf, "seed"));
    tg_module *m = tg_decoder_new(mt, cfg);
    tu_assert_ok(m);
    if (tg_decoder_load_hf(m, dir) != TG_OK) fail_msg("load_hf: %s", tg_last_error());
    return m;
}

static void prompt_of(int64_t *ids, int64_t *n)
{
    const json_t *p = jget(g_hf, "prompt");
    *n = (int64_t)json_array_size(p);
    for (int64_t i = 0; i < *n; i++) ids[i] = (int64_t)json_integer_value(json_array_get(p, (size_t)i));
}

/* The eval logits of the prompt against hf.logits' digest. */
static void check_logits(tg_module *m, const char *what)
{
    tg_tape *tp = tg_tape_new();
    int64_t ids[64], T;
    prompt_of(ids, &T);
    assert_int_equal(tg_module_train(m, false), TG_OK);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *x = tg_from_data(tp, TG_I64, 2, (int64_t[]){1, T}, ids);
    tg_tensor *logits = tg_module_forward(tp, m, x);
    tg_set_grad_enabled(prev);
    if (!logits) fail_msg("%s: forward: %s", what, tg_last_error());
    const json_t *want = jget(g_hf, "logits"), *shape = jget(want, "shape"), *head = jget(want, "head");
    assert_int_equal(logits->dtype, TG_F32);
    assert_true(tg_is_contiguous(logits));
    assert_int_equal(logits->ndim, (int)json_array_size(shape));
    for (int d = 0; d < logits->ndim; d++)
        assert_int_equal(logits->shape[d], json_integer_value(json_array_get(shape, (size_t)d)));
    const float *v = tg_data_ptr(logits);
    int64_t n = tg_numel(logits);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64_u32(v, n));
    double sum = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) sum += v[i];
    for (size_t i = 0; i < json_array_size(head); i++)
        worst = fmax(worst, fabs(v[i] - json_number_value(json_array_get(head, i))));
    const char *want_hex = json_string_value(jget(want, "fnv1a64"));
    if (strcmp(hex, want_hex) != 0)
        fail_msg("%s: logits digest %s, PyTorch %s (max |diff| of the first %zu values %.3g; sum %.10g, PyTorch %.10g)",
                 what, hex, want_hex, json_array_size(head), worst, sum, jnum(want, "sum"));
    assert_true(worst == 0);
    tg_tape_free(tp);
}

static void test_logits(void **state)
{
    (void)state;
    tg_decoder_config cfg;
    assert_int_equal(tg_decoder_config_from_hf(g_dir, &cfg), TG_OK);
    tg_tape *mt = tg_tape_new();
    tg_module *m = load_model(mt, &cfg, g_dir);
    /* the tied head is tok_emb's weight itself, and the dotted names reach
     * into the ModuleList's blocks */
    assert_ptr_equal(tg_module_get_parameter(m, "out_head.weight"), tg_module_get_parameter(m, "tok_emb.weight"));
    tu_assert_ok(tg_module_get_parameter(m, "trf_blocks.1.att.W_query.weight"));
    tu_assert_ok(tg_module_get_parameter(m, "trf_blocks.0.att.q_norm.scale"));
    check_logits(m, "tied");
    tg_tape_free(mt);

    /* built untied, the head takes embed_tokens' values: the same logits */
    cfg.tie_head = false;
    mt = tg_tape_new();
    m = load_model(mt, &cfg, g_dir);
    tg_tensor *head = tg_module_get_parameter(m, "out_head.weight"),
              *emb = tg_module_get_parameter(m, "tok_emb.weight");
    assert_ptr_not_equal(head, emb);
    assert_memory_equal(tg_data_ptr(head), tg_data_ptr(emb), sizeof(float) * (size_t)tg_numel(emb));
    check_logits(m, "untied");
    tg_tape_free(mt);
}

/* ---- (c) generation -------------------------------------------------------------------------- */

static void check_ids(const int64_t *got, int64_t n, const json_t *want, const char *what)
{
    if (n != (int64_t)json_array_size(want))
        fail_msg("%s: %lld ids, PyTorch %zu", what, (long long)n, json_array_size(want));
    for (int64_t i = 0; i < n; i++)
        if (got[i] != json_integer_value(json_array_get(want, (size_t)i)))
            fail_msg("%s: id %lld is %lld, PyTorch %lld", what, (long long)i, (long long)got[i],
                     (long long)json_integer_value(json_array_get(want, (size_t)i)));
}

/* greedy and sampled ids, with and without the KV cache, as g_hf's */
static void generate_runs(tg_module *m)
{
    int64_t prompt[64], np, out[128], n = 0;
    prompt_of(prompt, &np);
    const struct {
        bool sampled, cache;
        const char *key;
    } runs[] = {{false, false, "greedy"},
                {false, true, "greedy_cache"},
                {true, false, "sampled"},
                {true, true, "sampled_cache"}};
    for (int r = 0; r < 4; r++) {
        tg_generate_options o = {
            .max_new_tokens = jint(g_hf, "max_new_tokens"), .eos_id = -1, .no_kv_cache = !runs[r].cache};
        if (runs[r].sampled) o.temperature = jnum(g_hf, "temperature"), o.top_k = jint(g_hf, "top_k");
        tg_manual_seed((uint64_t)jint(g_hf, "sample_seed"));
        if (tg_gpt_generate(m, prompt, np, &o, out, &n) != TG_OK) fail_msg("%s: %s", runs[r].key, tg_last_error());
        check_ids(out, n, jget(g_hf, runs[r].key), runs[r].key);
    }
}

static void test_generate(void **state)
{
    (void)state;
    tg_decoder_config cfg;
    assert_int_equal(tg_decoder_config_from_hf(g_dir, &cfg), TG_OK);
    tg_tape *mt = tg_tape_new();
    generate_runs(load_model(mt, &cfg, g_dir));
    tg_tape_free(mt);
}

/* ---- Gemma 3: a gemma3_text folder ------------------------------------------------------------ */

/* tests/ref/hf_gemma3_tiny/ and gemma3.json's "hf" (tools/reference/gemma3.py):
 * the notebook's Gemma3Model loaded by its load_weights_into_gemma from two
 * BF16 shards without lm_head.weight; its config.json read into the
 * decoder's features, the logits' digest and the generated ids, with the
 * weights widened to float32 and kept in bf16. */
static void test_gemma3_folder(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("gemma3.json");
    const json_t *saved = g_hf;
    char saved_dir[sizeof g_dir];
    memcpy(saved_dir, g_dir, sizeof g_dir);
    g_hf = jget(ref, "hf");
    tu_ref_path(g_dir, sizeof g_dir, json_string_value(jget(g_hf, "dir")));
    tg_decoder_config cfg, want;
    assert_int_equal(tg_decoder_config_from_hf(g_dir, &cfg), TG_OK);
    assert_int_equal(tg_decoder_config_preset("gemma3-270m", &want), TG_OK);
    const json_t *c = jget(g_hf, "config"), *lt = jget(c, "layer_types"), *v;
    assert_int_equal(cfg.family, TG_GPT_FAMILY_GEMMA3);
    assert_int_equal(cfg.sliding_window, jint(c, "sliding_window"));
    assert_true(cfg.query_pre_attn_scalar == jnum(c, "query_pre_attn_scalar"));
    assert_true(cfg.rope_local_base == jnum(c, "rope_local_base") && cfg.rope_base == jnum(c, "rope_base"));
    assert_true(cfg.tie_head && cfg.qk_norm && cfg.post_norms && cfg.emb_scale && cfg.norm_offset == 1);
    assert_int_equal(cfg.head_dim, jint(c, "head_dim"));
    size_t i;
    json_array_foreach(lt, i, v)
        assert_int_equal(cfg.layer_types[i], strcmp(json_string_value(v), "sliding_attention") == 0);
    tg_dtype stored;
    assert_int_equal(tg_decoder_hf_weights(g_dir, &stored), TG_OK);
    assert_int_equal(stored, TG_BF16);
    for (int w = 0; w < 2; w++) {
        cfg.weights = w ? TG_BF16 : TG_F32;
        tg_tape *mt = tg_tape_new();
        tg_module *m = load_model(mt, &cfg, g_dir);
        assert_ptr_equal(tg_module_get_parameter(m, "out_head.weight"), tg_module_get_parameter(m, "tok_emb.weight"));
        tu_assert_ok(tg_module_get_parameter(m, "blocks.3.pre_feedforward_layernorm.scale"));
        if (!w) check_logits(m, "gemma3_text");
        generate_runs(m);
        tg_tape_free(mt);
    }
    /* the folder's config describes the model: another window is refused */
    tg_tape *mt = tg_tape_new();
    cfg.weights = TG_F32, cfg.sliding_window += 1;
    tg_manual_seed(1);
    tg_module *m = tg_decoder_new(mt, &cfg);
    tu_assert_ok(m);
    tu_assert_one_line_error(tg_decoder_load_hf(m, g_dir), "its sliding_window is 4, the model's 5");
    tg_tape_free(mt);
    g_hf = saved;
    memcpy(g_dir, saved_dir, sizeof g_dir);
    json_decref(ref);
}

/* ---- Llama 3: its names, a single model.safetensors, a separate lm_head ---------------------- */

static const char LLAMA_TINY[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 32, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 8, \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"rms_norm_eps\": 1e-05,"
    " \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
    " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"tie_word_embeddings\": false, \"vocab_size\": 64, \"max_position_embeddings\": 16,"
    " \"hidden_act\": \"silu\", \"attention_bias\": false}";

/* The Hugging Face name of one of a Llama3Model's parameters. */
static void hf_name_of(const char *ours, char *out, size_t size)
{
    static const char *const map[][2] = {
        {"att.W_query.weight", "self_attn.q_proj.weight"}, {"att.W_key.weight", "self_attn.k_proj.weight"},
        {"att.W_value.weight", "self_attn.v_proj.weight"}, {"att.out_proj.weight", "self_attn.o_proj.weight"},
        {"norm1.weight", "input_layernorm.weight"},        {"norm2.weight", "post_attention_layernorm.weight"},
        {"ff.fc1.weight", "mlp.gate_proj.weight"},         {"ff.fc2.weight", "mlp.up_proj.weight"},
        {"ff.fc3.weight", "mlp.down_proj.weight"}};
    int layer, len = 0;
    if (strcmp(ours, "tok_emb.weight") == 0)
        snprintf(out, size, "model.embed_tokens.weight");
    else if (strcmp(ours, "final_norm.weight") == 0)
        snprintf(out, size, "model.norm.weight");
    else if (strcmp(ours, "out_head.weight") == 0)
        snprintf(out, size, "lm_head.weight");
    else if (sscanf(ours, "trf_blocks.%d.%n", &layer, &len) == 1 && len > 0) {
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (strcmp(ours + len, map[i][0]) == 0) {
                snprintf(out, size, "model.layers.%d.%s", layer, map[i][1]);
                return;
            }
        fail_msg("no Hugging Face name for %s", ours);
    } else
        fail_msg("no Hugging Face name for %s", ours);
}

static void test_llama_round_trip(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/tg_hf_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    write_text(dir, "config.json", LLAMA_TINY);
    tg_decoder_config cfg;
    if (tg_decoder_config_from_hf(dir, &cfg) != TG_OK) fail_msg("%s", tg_last_error());
    assert_int_equal(cfg.family, TG_GPT_FAMILY_LLAMA3);
    assert_false(cfg.tie_head);
    assert_false(cfg.qk_norm);

    /* model a's weights under Hugging Face's names, in one file */
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(1);
    tg_module *a = tg_decoder_new(tp, &cfg);
    tu_assert_ok(a);
    tg_named_list sd;
    assert_int_equal(tg_module_named_parameters(tp, a, &sd), TG_OK);
    assert_int_equal(sd.n, 3 + 2 * 9);
    tg_named_tensor *list = calloc((size_t)sd.n, sizeof *list);
    char(*names)[96] = calloc((size_t)sd.n, sizeof *names);
    for (int i = 0; i < sd.n; i++) {
        hf_name_of(sd.names[i], names[i], sizeof names[i]);
        list[i] = (tg_named_tensor){names[i], sd.tensors[i]};
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(tg_safetensors_save(path, list, sd.n), TG_OK);

    /* into model b, built from another seed: every parameter a's */
    tg_manual_seed(2);
    tg_module *b = tg_decoder_new(tp, &cfg);
    tu_assert_ok(b);
    if (tg_decoder_load_hf(b, dir) != TG_OK) fail_msg("%s", tg_last_error());
    for (int i = 0; i < sd.n; i++) {
        tg_tensor *got = tg_module_get_parameter(b, sd.names[i]);
        tu_assert_ok(got);
        tu_assert_close(got, sd.tensors[i], 0, 0, sd.names[i]);
    }
    tu_assert_ok(tg_module_get_parameter(b, "trf_blocks.1.norm1.weight")); /* nn.RMSNorm's "weight" */

    /* built tied, the model keeps its head as tok_emb's weight (as
     * transformers ties it): the file's lm_head is checked, not copied */
    tg_decoder_config tied = cfg;
    tied.tie_head = true;
    tg_module *t = tg_decoder_new(tp, &tied);
    tu_assert_ok(t);
    if (tg_decoder_load_hf(t, dir) != TG_OK) fail_msg("tied: %s", tg_last_error());
    assert_ptr_equal(tg_module_get_parameter(t, "out_head.weight"), tg_module_get_parameter(t, "tok_emb.weight"));
    tu_assert_close(tg_module_get_parameter(t, "out_head.weight"), tg_module_get_parameter(a, "tok_emb.weight"), 0, 0,
                    "tied head");

    /* a config.json that does not describe the model: refused, b unchanged */
    write_text(dir, "config.json",
               "{\"model_type\": \"llama\", \"hidden_size\": 32, \"num_attention_heads\": 4,"
               " \"num_key_value_heads\": 2, \"intermediate_size\": 48, \"num_hidden_layers\": 2,"
               " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"vocab_size\": 64,"
               " \"max_position_embeddings\": 16}");
    tg_manual_seed(3);
    tg_module *c = tg_decoder_new(tp, &cfg);
    tg_tensor *w = tg_module_get_parameter(c, "trf_blocks.0.att.W_key.weight"), *w0 = tg_clone(tp, w);
    int st = tg_decoder_load_hf(c, dir);
    tu_assert_one_line_error(st, "config.json", "rope_base is 10000, the model's 500000");
    tu_assert_close(w, w0, 0, 0, "unchanged");
    /* a Qwen3 model of the same sizes reads the same names, but config.json says llama */
    tg_decoder_config q = cfg;
    q.family = TG_GPT_FAMILY_QWEN3, q.rope_freq = (tg_rope_freq){0};
    tg_module *qm = tg_decoder_new(tp, &q);
    tu_assert_ok(qm);
    write_text(dir, "config.json", LLAMA_TINY);
    tu_assert_one_line_error(tg_decoder_load_hf(qm, dir), "config.json",
                          "it describes a Llama3Model, the model is a Qwen3Model");
    /* and a GPTModel is not this loader's */
    tg_gpt_config g = {64, 16, 32, 4, 2, 0.0, true};
    tg_module *gpt = tg_gpt_new(tp, &g);
    tu_assert_one_line_error(tg_decoder_load_hf(gpt, dir), "it describes a Llama3Model, the model is a GPTModel");
    tu_assert_one_line_error(tg_decoder_load_hf(tg_module_get_submodule(b, "trf_blocks"), dir),
                          "not a Qwen3Model, Llama3Model or Gemma3Model");

    free(list);
    free(names);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    tg_tape_free(tp);
}

/* ---- (d) errors: a broken copy of the folder each, the model unchanged ----------------------- */

typedef struct {
    tg_tensor *p[2]; /* tok_emb (shard 1), a block-1 weight (shard 2) */
    tg_tensor *copy[2];
} snapshot;

static snapshot take(tg_tape *tp, tg_module *m)
{
    snapshot s;
    s.p[0] = tg_module_get_parameter(m, "tok_emb.weight");
    s.p[1] = tg_module_get_parameter(m, "trf_blocks.1.att.W_query.weight");
    for (int i = 0; i < 2; i++) {
        tu_assert_ok(s.p[i]);
        s.copy[i] = tg_clone(tp, s.p[i]);
        tu_assert_ok(s.copy[i]);
    }
    return s;
}

static void assert_unchanged(const snapshot *s, const char *what)
{
    for (int i = 0; i < 2; i++)
        if (memcmp(tg_data_ptr(s->p[i]), tg_data_ptr(s->copy[i]), sizeof(float) * (size_t)tg_numel(s->p[i])) != 0)
            fail_msg("%s: the model's weights changed", what);
}

static void test_errors(void **state)
{
    (void)state;
    tg_decoder_config cfg;
    assert_int_equal(tg_decoder_config_from_hf(g_dir, &cfg), TG_OK);
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_manual_seed(7);
    tg_module *m = tg_decoder_new(mt, &cfg);
    tu_assert_ok(m);
    snapshot snap = take(tp, m);
    char *dir = copy_folder();
    const char *s1 = "model-00001-of-00002.safetensors", *s2 = "model-00002-of-00002.safetensors";
    const char *index = "model.safetensors.index.json";
    char path[1200];
    int st;

    /* the copy loads (into another model: m keeps its own weights) */
    {
        tg_tape *t2 = tg_tape_new();
        tg_module *m2 = tg_decoder_new(t2, &cfg);
        if (tg_decoder_load_hf(m2, dir) != TG_OK) fail_msg("copy: %s", tg_last_error());
        tg_tape_free(t2);
    }

    /* a shard missing */
    snprintf(path, sizeof path, "%s/%s", dir, s2);
    assert_int_equal(unlink(path), 0);
    st = tg_decoder_load_hf(m, dir);
    assert_int_equal(st, TG_EIO);
    tu_assert_one_line_error(st, "cannot open", s2, "No such file");
    assert_unchanged(&snap, "shard missing");
    copy_in(dir, s2);

    /* a tensor renamed: unexpected, and the one it was missing */
    edit_file(dir, s2, "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.q_prox.weight");
    st = tg_decoder_load_hf(m, dir);
    assert_int_equal(st, TG_EFORMAT);
    tu_assert_one_line_error(st, "unexpected tensor 'model.layers.1.self_attn.q_prox.weight' (64,16) in", s2,
                          "'model.layers.1.self_attn.q_proj.weight' (64,16) is missing");
    assert_unchanged(&snap, "renamed");
    copy_in(dir, s2);
    /* only missing, only unexpected (a layer the model does not have; another
     * part of a layer), in both shards: one line each */
    rewrite_shard(dir, s2, "model.norm.weight", NULL, 0);
    st = tg_decoder_load_hf(m, dir);
    assert_int_equal(st, TG_EFORMAT);
    tu_assert_one_line_error(st, "missing tensor 'model.norm.weight' (16) (the model's 'final_norm.scale')");
    assert_unchanged(&snap, "missing");
    copy_in(dir, s2);
    rewrite_shard(dir, s2, NULL, "model.layers.2.mlp.gate_proj.weight", 16);
    tu_assert_one_line_error(tg_decoder_load_hf(m, dir), "unexpected tensor 'model.layers.2.mlp.gate_proj.weight' (16) in",
                          s2, "(not a tensor of this model)");
    assert_unchanged(&snap, "unexpected");
    rewrite_shard(dir, s1, NULL, "model.layers.1.mlp.bias", 16);
    tu_assert_one_line_error(tg_decoder_load_hf(m, dir), "unexpected tensor 'model.layers.1.mlp.bias' (16) in", s1,
                          "(2 unexpected, 0 missing in all)");
    assert_unchanged(&snap, "unexpected");
    copy_in(dir, s1);
    copy_in(dir, s2);
    rewrite_shard(dir, s1, NULL, "model.norm.weight", 16);
    tu_assert_one_line_error(tg_decoder_load_hf(m, dir), "'model.norm.weight' is in both", s1, s2);
    assert_unchanged(&snap, "twice");
    copy_in(dir, s1);
    /* a RoPE table some checkpoints carry is not a weight; a float32 shard
     * next to a BF16 one loads the same values */
    rewrite_shard(dir, s2, NULL, "model.layers.1.self_attn.rotary_emb.inv_freq", 16);
    {
        tg_tape *t2 = tg_tape_new();
        tg_module *m2 = tg_decoder_new(t2, &cfg);
        if (tg_decoder_load_hf(m2, dir) != TG_OK) fail_msg("float32 shard: %s", tg_last_error());
        check_logits(m2, "float32 shard");
        tg_tape_free(t2);
    }
    copy_in(dir, s2);

    /* config.json with a wrong head_dim: the model built from it does not fit the weights */
    edit_file(dir, "config.json", "\"head_dim\": 32", "\"head_dim\": 16");
    {
        tg_decoder_config bad;
        assert_int_equal(tg_decoder_config_from_hf(dir, &bad), TG_OK);
        assert_int_equal(bad.head_dim, 16);
        tg_tape *t2 = tg_tape_new();
        tg_module *m2 = tg_decoder_new(t2, &bad);
        tu_assert_ok(m2);
        tg_tensor *k = tg_module_get_parameter(m2, "trf_blocks.0.att.W_key.weight"), *k0 = tg_clone(t2, k);
        st = tg_decoder_load_hf(m2, dir);
        assert_int_equal(st, TG_EFORMAT);
        tu_assert_one_line_error(st, "size mismatch for 'model.layers.0.self_attn.k_norm.weight'", s1, "the file's (32)",
                              "the model's 'trf_blocks.0.att.k_norm.scale' (16)");
        tu_assert_close(k, k0, 0, 0, "wrong head_dim: unchanged");
        tg_tape_free(t2);
        /* and the model of the right sizes is told that config.json is not its own */
        st = tg_decoder_load_hf(m, dir);
        tu_assert_one_line_error(st, "config.json", "head_dim is 16, the model's 32");
        assert_unchanged(&snap, "wrong head_dim");
    }
    copy_in(dir, "config.json");

    /* the index pointing outside the folder */
    edit_file(dir, index, s2, "../x");
    st = tg_decoder_load_hf(m, dir);
    assert_int_equal(st, TG_EFORMAT);
    tu_assert_one_line_error(st, index, "is \"../x\", not a file name in the folder");
    assert_unchanged(&snap, "index ../x");
    copy_in(dir, index);
    edit_file(dir, index, "\"weight_map\"", "\"weights\"");
    tu_assert_one_line_error(tg_decoder_load_hf(m, dir), index, "'weight_map' is missing or not an object");
    copy_in(dir, index);

    /* a truncated shard (the second: the first would load if the check came later) */
    {
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, s2);
        char *b = tu_read_file(path, &len);
        write_bytes(path, b, len - 100);
        free(b);
        st = tg_decoder_load_hf(m, dir);
        assert_int_equal(st, TG_EFORMAT);
        tu_assert_one_line_error(st, s2, "beyond the data buffer");
        assert_unchanged(&snap, "truncated");
        copy_in(dir, s2);
    }

    /* model_type gpt2 with Qwen3's keys: GPT2Config's keys are missing (a
     * GPT-2 folder reads: tests/test_export.c), and the model is unchanged */
    edit_file(dir, "config.json", "\"model_type\": \"qwen3\"", "\"model_type\": \"gpt2\"");
    {
        tg_decoder_config c;
        st = tg_decoder_config_from_hf(dir, &c);
        assert_int_equal(st, TG_EFORMAT);
        tu_assert_one_line_error(st, "config.json", "key 'n_positions' is missing");
        st = tg_decoder_load_hf(m, dir);
        tu_assert_one_line_error(st, "config.json", "key 'n_positions' is missing");
        assert_unchanged(&snap, "gpt2");
    }
    copy_in(dir, "config.json");

    /* no weights at all */
    snprintf(path, sizeof path, "%s/%s", dir, index);
    unlink(path);
    tu_assert_one_line_error(tg_decoder_load_hf(m, dir), "no model.safetensors and no model.safetensors.index.json");
    assert_unchanged(&snap, "no weights");
    copy_in(dir, index);

    /* after all that, the copy still loads */
    if (tg_decoder_load_hf(m, dir) != TG_OK) fail_msg("restored copy: %s", tg_last_error());
    check_logits(m, "restored copy");

    tu_assert_one_line_error(tg_decoder_load_hf(NULL, dir), "NULL");
    tu_assert_one_line_error(tg_decoder_load_hf(m, NULL), "NULL");
    remove_folder(dir, NULL, 0);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),           cmocka_unit_test(test_config_presets),
        cmocka_unit_test(test_config_errors),    cmocka_unit_test(test_digest_check),
        cmocka_unit_test(test_logits),           cmocka_unit_test(test_generate),
        cmocka_unit_test(test_llama_round_trip), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_gemma3_folder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
