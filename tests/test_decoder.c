/* Qwen3, Llama 3.2 and Gemma 3 as configurations of the one decoder,
 * against the book's own code (pkg/llms_from_scratch/qwen3.py, llama3.py
 * and their kv_cache versions; the Gemma 3 notebooks of ch05/12_gemma3) run
 * under PyTorch 1.13 in float32: tests/ref/decoder.json and gemma3.json,
 * written by tools/reference/decoder.py and gemma3.py.
 *
 * EXACT means PyTorch's bits: every logit and gradient is compared to the
 * bit, in full where the file holds the values and through a digest (FNV-1a
 * 64 over the float32 bit patterns) where the real vocabularies make them
 * too large to hold. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static json_t *g_ref, *g_gemma;

static const json_t *jget(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    if (!v) fail_msg("reference: missing key '%s'", k);
    return v;
}
static int64_t jint(const json_t *o, const char *k) { return (int64_t)json_integer_value(jget(o, k)); }
static double jnum(const json_t *o, const char *k) { return json_number_value(jget(o, k)); }

static tg_decoder_config config_of(const json_t *c, const char *family)
{
    tg_decoder_config cfg = {0};
    cfg.family = strncmp(family, "llama3", 6) == 0 ? TG_GPT_FAMILY_LLAMA3 : TG_GPT_FAMILY_QWEN3;
    cfg.vocab_size = jint(c, "vocab_size"), cfg.context_length = jint(c, "context_length");
    cfg.emb_dim = jint(c, "emb_dim"), cfg.n_heads = jint(c, "n_heads"), cfg.n_layers = jint(c, "n_layers");
    cfg.hidden_dim = jint(c, "hidden_dim"), cfg.n_kv_groups = jint(c, "n_kv_groups");
    cfg.rope_base = jnum(c, "rope_base");
    const json_t *hd = json_object_get(c, "head_dim"), *qk = json_object_get(c, "qk_norm");
    cfg.head_dim = json_is_integer(hd) ? (int64_t)json_integer_value(hd) : 0;
    cfg.qk_norm = json_is_true(qk);
    const json_t *f = json_object_get(c, "rope_freq");
    if (json_is_object(f))
        cfg.rope_freq = (tg_rope_freq){jnum(f, "factor"), jnum(f, "low_freq_factor"), jnum(f, "high_freq_factor"),
                                       jint(f, "original_context_length")};
    return cfg;
}

/* FNV-1a 64 over the float32 bit patterns, one uint32 word per element
 * (tools/reference/decoder.py, "fnv1a64-u32"); the sum in double. */
static uint64_t digest(const tg_tensor *t, double *sum)
{
    tg_tape *tp = tg_tape_new();
    tg_tensor *c = tg_contiguous(tp, (tg_tensor *)t);
    tu_assert_ok(c);
    const float *d = tg_data_ptr(c);
    uint64_t h = 0xcbf29ce484222325ULL;
    double s = 0;
    for (int64_t i = 0; i < tg_numel(c); i++) {
        uint32_t w;
        memcpy(&w, &d[i], 4);
        h = (h ^ w) * 0x100000001b3ULL;
        s += d[i];
    }
    tg_tape_free(tp);
    if (sum) *sum = s;
    return h;
}

/* got equals want to the bit: want is a tensor ({"data"}) or a digest. */
/* A difference from PyTorch's bits: the message, then the test fails. */
static void bits_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_error(fmt, ap);
    va_end(ap);
    print_error("\n");
    fail();
}
static void assert_bits(const tg_tensor *got, const json_t *want, const char *what)
{
    tu_assert_ok(got);
    const json_t *shape = jget(want, "shape");
    if ((size_t)got->ndim != json_array_size(shape)) bits_fail("%s: rank %d, PyTorch %zu", what, got->ndim, json_array_size(shape));
    for (int i = 0; i < got->ndim; i++)
        if (got->shape[i] != (int64_t)json_integer_value(json_array_get(shape, (size_t)i)))
            bits_fail("%s: dim %d is %lld, PyTorch %lld", what, i, (long long)got->shape[i],
                     (long long)json_integer_value(json_array_get(shape, (size_t)i)));
    tg_tape *tp = tg_tape_new();
    tg_tensor *g = tg_contiguous(tp, (tg_tensor *)got);
    const float *gd = tg_data_ptr(g);
    if (json_object_get(want, "data")) {
        tg_tensor *w = tu_tensor_from_json(tp, want, TG_F32);
        const float *wd = tg_data_ptr(w);
        int64_t bad = 0, first = -1;
        double worst = 0;
        for (int64_t i = 0; i < tg_numel(g); i++)
            if (memcmp(&gd[i], &wd[i], 4) != 0) {
                if (first < 0) first = i;
                bad++;
                double d = fabs((double)gd[i] - (double)wd[i]);
                if (d > worst || isnan(d)) worst = d;
            }
        if (bad)
            bits_fail("%s: %lld of %lld values differ from PyTorch's bits (first at %lld: %.9g vs %.9g; max |diff| %.3g)",
                     what, (long long)bad, (long long)tg_numel(g), (long long)first, gd[first], wd[first], worst);
    } else {
        double sum;
        uint64_t h = digest(g, &sum);
        char hex[32];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
        if (strcmp(hex, json_string_value(jget(want, "fnv1a64"))) != 0) {
            const json_t *head = jget(want, "head");
            double worst = 0;
            for (size_t i = 0; i < json_array_size(head) && (int64_t)i < tg_numel(g); i++)
                worst = fmax(worst, fabs(gd[i] - json_number_value(json_array_get(head, i))));
            bits_fail("%s: digest %s, PyTorch %s (sum %.9g vs %.9g, first values max |diff| %.3g)", what, hex,
                     json_string_value(jget(want, "fnv1a64")), sum, jnum(want, "sum"), worst);
        }
    }
    tg_tape_free(tp);
}

static void assert_names(const tg_named_list *l, const json_t *want)
{
    assert_int_equal((size_t)l->n, json_array_size(want));
    for (int i = 0; i < l->n; i++) assert_string_equal(l->names[i], json_string_value(json_array_get(want, (size_t)i)));
}

static tg_module *build(tg_tape *mt, const tg_decoder_config *cfg, uint64_t seed)
{
    tg_manual_seed(seed);
    tg_module *m = tg_decoder_new(mt, cfg);
    tu_assert_ok(m);
    return m;
}

/* ---- the digest itself ------------------------------------------------------------------ */

static void test_digest(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    const json_t *hc = jget(g_ref, "hash_check");
    tg_tensor *t = tu_tensor_from_json(tp, jget(hc, "tensor"), TG_F32);
    assert_bits(t, jget(hc, "digest"), "hash_check");
    tg_tape_free(tp);
}

/* ---- compute_rope_params ------------------------------------------------------------------ */

static void test_rope_tables(void **state)
{
    (void)state;
    const json_t *r;
    size_t i;
    for (int f = 0; f < 2; f++)
    json_array_foreach(jget(f ? g_gemma : g_ref, "rope"), i, r) {
        tg_tape *tp = tg_tape_new();
        const json_t *f = jget(r, "freq_config");
        tg_rope_freq freq = {0};
        if (json_is_object(f))
            freq = (tg_rope_freq){jnum(f, "factor"), jnum(f, "low_freq_factor"), jnum(f, "high_freq_factor"),
                                  jint(f, "original_context_length")};
        tg_tensor *cos = NULL, *sin = NULL;
        assert_int_equal(tg_rope_params(tp, jint(r, "head_dim"), jnum(r, "theta_base"), jint(r, "context_length"),
                                        &freq, &cos, &sin),
                         TG_OK);
        char what[96];
        snprintf(what, sizeof what, "%s rope hd %lld ctx %lld cos", json_string_value(jget(r, "family")),
                 (long long)jint(r, "head_dim"), (long long)jint(r, "context_length"));
        assert_bits(cos, jget(r, "cos"), what);
        memcpy(what + strlen(what) - 3, "sin", 3);
        assert_bits(sin, jget(r, "sin"), what);
        tg_tape_free(tp);
    }
}

/* ---- forward and backward ------------------------------------------------------------------ */

static char *repr_of(const tg_module *m)
{
    int n = tg_module_repr(m, NULL, 0);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(tg_module_repr(m, buf, (size_t)n + 1), n);
    return buf;
}

/* A case's model m (cfg) against the reference c: its repr, names, keys and
 * parameter count, then in train mode the logits, the loss and every
 * gradient to the bit. */
static void check_case(const json_t *c, tg_module *m, const tg_decoder_config *cfg, bool fused)
{
    const char *name = json_string_value(jget(c, "name"));
    tg_tape *tp = tg_tape_new();
    tg_module_train(m, true);
    tg_module_set_fused(m, fused);
    char *r = repr_of(m);
    assert_string_equal(r, json_string_value(jget(c, "repr")));
    free(r);
    tg_named_list l;
    assert_int_equal(tg_module_named_parameters(tp, m, &l), TG_OK);
    assert_names(&l, jget(c, "parameter_names"));
    assert_int_equal(tg_module_state_dict(tp, m, &l), TG_OK);
    assert_names(&l, jget(c, "state_dict_keys"));
    assert_int_equal(tg_module_num_parameters(m), jint(c, "num_parameters"));
    assert_int_equal(tg_decoder_config_num_parameters(cfg), jint(c, "num_parameters"));

    tg_tensor *ids = tu_tensor_from_json(tp, jget(c, "ids"), TG_DTYPE_COUNT);
    tg_tensor *targets = tu_tensor_from_json(tp, jget(c, "targets"), TG_DTYPE_COUNT);
    tg_tensor *logits = tg_module_forward(tp, m, ids);
    tu_assert_ok(logits);
    char what[160];
    snprintf(what, sizeof what, "%s%s logits", name, fused ? " (fused)" : "");
    assert_bits(logits, jget(c, "logits"), what);
    assert_string_equal(tg_grad_fn_name(logits), json_string_value(jget(c, "logits_grad_fn")));
    int64_t B = logits->shape[0], T = logits->shape[1], V = logits->shape[2];
    int64_t flat[2] = {B * T, V}, tflat[1] = {B * T};
    tg_tensor *loss = tg_cross_entropy(tp, tg_view(tp, logits, 2, flat), tg_view(tp, targets, 1, tflat), TG_REDUCE_MEAN);
    tu_assert_ok(loss);
    if ((float)tg_item(loss) != (float)jnum(c, "loss"))
        fail_msg("%s: loss %.9g, PyTorch %.9g", what, tg_item(loss), jnum(c, "loss"));
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    assert_int_equal(tg_module_named_parameters(tp, m, &l), TG_OK);
    const json_t *grads = jget(c, "grads");
    for (int i = 0; i < l.n; i++) {
        snprintf(what, sizeof what, "%s%s grad %s", name, fused ? " (fused)" : "", l.names[i]);
        assert_bits(l.tensors[i]->grad, jget(grads, l.names[i]), what);
    }
    tg_tape_free(tp);
}

static void run_case(const json_t *c, bool fused)
{
    tg_decoder_config cfg = config_of(jget(c, "config"), json_string_value(jget(c, "family")));
    tg_tape *mt = tg_tape_new();
    check_case(c, build(mt, &cfg, (uint64_t)jint(c, "seed")), &cfg, fused);
    tg_tape_free(mt);
}

static void test_cases(void **state)
{
    (void)state;
    const json_t *c;
    size_t i;
    json_array_foreach(jget(g_ref, "cases"), i, c) {
        run_case(c, false);
        run_case(c, true);
    }
}

/* ---- generation ------------------------------------------------------------------------------- */

/* m generates the reference entry g's ids (ch05's generate, or the
 * kv_cache model's, after manual_seed(sample_seed)). */
static void check_generate(tg_module *m, const json_t *g)
{
    const char *name = json_string_value(jget(g, "name"));
    const json_t *prompt = jget(g, "prompt"), *want = jget(g, "ids");
    int64_t np = (int64_t)json_array_size(prompt), p[64], out[128], n = 0;
    for (int64_t k = 0; k < np; k++) p[k] = (int64_t)json_integer_value(json_array_get(prompt, (size_t)k));
    tg_generate_options o = {.max_new_tokens = jint(g, "max_new_tokens"), .temperature = jnum(g, "temperature"),
                             .top_k = jint(g, "top_k"), .eos_id = -1, .no_kv_cache = !json_is_true(jget(g, "cache"))};
    tg_manual_seed((uint64_t)jint(g, "sample_seed"));
    if (tg_gpt_generate(m, p, np, &o, out, &n) != TG_OK) fail_msg("%s: %s", name, tg_last_error());
    if (n != (int64_t)json_array_size(want)) fail_msg("%s: %lld ids, PyTorch %zu", name, (long long)n, json_array_size(want));
    for (int64_t k = 0; k < n; k++)
        if (out[k] != (int64_t)json_integer_value(json_array_get(want, (size_t)k)))
            fail_msg("%s: id %lld is %lld, PyTorch %lld", name, (long long)k, (long long)out[k],
                     (long long)json_integer_value(json_array_get(want, (size_t)k)));
}

static void test_generate(void **state)
{
    (void)state;
    const json_t *g;
    size_t i;
    json_array_foreach(jget(g_ref, "generate"), i, g) {
        tg_decoder_config cfg = config_of(jget(g, "config"), json_string_value(jget(g, "case")));
        tg_tape *mt = tg_tape_new();
        check_generate(build(mt, &cfg, (uint64_t)jint(g, "seed")), g);
        tg_tape_free(mt);
    }
}

/* ---- Gemma 3 ------------------------------------------------------------------------------ */

/* The book's Gemma 3 config dict as the decoder's: the gemma3-270m preset's
 * features with the dict's sizes, bases, window and layer types. */
static tg_decoder_config gemma_config_of(const json_t *c)
{
    tg_decoder_config cfg;
    assert_int_equal(tg_decoder_config_preset("gemma3-270m", &cfg), TG_OK);
    cfg.vocab_size = jint(c, "vocab_size"), cfg.context_length = jint(c, "context_length");
    cfg.emb_dim = jint(c, "emb_dim"), cfg.n_heads = jint(c, "n_heads"), cfg.n_layers = jint(c, "n_layers");
    cfg.hidden_dim = jint(c, "hidden_dim"), cfg.n_kv_groups = jint(c, "n_kv_groups"), cfg.head_dim = jint(c, "head_dim");
    cfg.qk_norm = json_is_true(jget(c, "qk_norm"));
    cfg.rope_base = jnum(c, "rope_base"), cfg.rope_local_base = jnum(c, "rope_local_base");
    cfg.sliding_window = jint(c, "sliding_window"), cfg.query_pre_attn_scalar = jnum(c, "query_pre_attn_scalar");
    const json_t *lt = jget(c, "layer_types"), *v;
    size_t i;
    memset(cfg.layer_types, 0, sizeof cfg.layer_types);
    json_array_foreach(lt, i, v) cfg.layer_types[i] = strcmp(json_string_value(v), "sliding_attention") == 0;
    assert_int_equal(tg_decoder_config_check(&cfg), TG_OK);
    return cfg;
}

/* A case's model: built after manual_seed(seed) as the book builds it (its
 * state_dict then equals the reference's, which a digest-only case checks
 * here), and with "norms": "random" given the reference's state_dict, whose
 * norms are no longer zero. */
static tg_module *gemma_model(tg_tape *mt, const json_t *c)
{
    tg_decoder_config cfg = gemma_config_of(jget(c, "config"));
    tg_module *m = build(mt, &cfg, (uint64_t)jint(c, "seed"));
    tg_tape *tp = tg_tape_new();
    const json_t *sd = jget(c, "state_dict"), *v;
    const char *k;
    tg_named_list l = {0};
    l.names = calloc(json_object_size(sd), sizeof *l.names);
    l.tensors = calloc(json_object_size(sd), sizeof *l.tensors);
    bool full = true;
    json_object_foreach((json_t *)sd, k, v) {
        if (!json_object_get(v, "data")) {
            full = false;
            char what[160];
            snprintf(what, sizeof what, "%s as built: %s", json_string_value(jget(c, "name")), k);
            assert_bits(tg_module_get_parameter(m, k), v, what);
            continue;
        }
        l.names[l.n] = k, l.tensors[l.n++] = tu_tensor_from_json(tp, v, TG_F32);
    }
    if (full && tg_module_load_state_dict(m, &l) != TG_OK) fail_msg("load_state_dict: %s", tg_last_error());
    free(l.names);
    free(l.tensors);
    tg_tape_free(tp);
    return m;
}

static const json_t *gemma_case(const char *name)
{
    const json_t *c;
    size_t i;
    json_array_foreach(jget(g_gemma, "cases"), i, c) if (strcmp(json_string_value(jget(c, "name")), name) == 0) return c;
    fail_msg("gemma3.json: no case %s", name);
    return NULL;
}

/* logits, loss and every gradient to the bit, composed and fused; the
 * repr, names, keys and parameter count as the book's */
static void test_gemma3_cases(void **state)
{
    (void)state;
    const json_t *c;
    size_t i;
    json_array_foreach(jget(g_gemma, "cases"), i, c) for (int fused = 0; fused < 2; fused++)
    {
        tg_decoder_config cfg = gemma_config_of(jget(c, "config"));
        tg_tape *mt = tg_tape_new();
        check_case(c, gemma_model(mt, c), &cfg, fused);
        tg_tape_free(mt);
    }
}

/* greedy and sampled ids with and without the KV cache (sliding layers
 * keep their window), past the window */
static void test_gemma3_generate(void **state)
{
    (void)state;
    const json_t *g;
    size_t i;
    json_array_foreach(jget(g_gemma, "generate"), i, g) {
        tg_tape *mt = tg_tape_new();
        check_generate(gemma_model(mt, gemma_case(json_string_value(jget(g, "case")))), g);
        tg_tape_free(mt);
    }
}

/* GEMMA3_CONFIG_270M: 435,870,336 parameters with its separate head,
 * 268,098,176 tied, the book's state_dict keys */
static void test_gemma3_preset(void **state)
{
    (void)state;
    const json_t *p = jget(g_gemma, "preset");
    tg_decoder_config c;
    assert_int_equal(tg_decoder_config_preset("gemma3-270m", &c), TG_OK);
    tg_decoder_config want = gemma_config_of(jget(p, "config"));
    /* the preset's pattern goes on past its 18 layers (a larger --layers keeps it) */
    for (int64_t i = c.n_layers; i < TG_DECODER_MAX_LAYER_TYPES; i++) want.layer_types[i] = c.layer_types[i];
    assert_memory_equal(&c, &want, sizeof c);
    assert_int_equal(tg_decoder_config_num_parameters(&c), jint(p, "num_parameters"));
    c.tie_head = true;
    assert_int_equal(tg_decoder_config_num_parameters(&c), jint(p, "num_parameters_tied"));
    /* its state_dict keys: the preset's layers and names at small widths */
    c.tie_head = false, c.vocab_size = 64, c.emb_dim = 16, c.hidden_dim = 16, c.head_dim = 8;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_module *m = build(mt, &c, 123);
    tg_named_list l;
    assert_int_equal(tg_module_state_dict(tp, m, &l), TG_OK);
    assert_names(&l, jget(p, "state_dict_keys"));
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- configurations ------------------------------------------------------------------------ */

static void test_presets(void **state)
{
    (void)state;
    tg_decoder_config c;
    assert_int_equal(tg_decoder_config_preset("qwen3-0.6b", &c), TG_OK);
    assert_int_equal(c.family, TG_GPT_FAMILY_QWEN3);
    assert_int_equal(c.vocab_size, 151936);
    assert_int_equal(c.context_length, 40960);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.n_kv_groups, 8);
    assert_true(c.qk_norm);
    /* the book's figure for Qwen3-0.6B with its separate head: 751,632,384 */
    assert_int_equal(tg_decoder_config_num_parameters(&c), 751632384);
    assert_int_equal(tg_decoder_config_preset("llama3.2-1b", &c), TG_OK);
    assert_int_equal(c.context_length, 131072);
    assert_int_equal(c.rope_freq.original_context_length, 8192);
    /* Llama 3.2 1B with a separate head: 1,498,482,688 */
    assert_int_equal(tg_decoder_config_num_parameters(&c), 1498482688);
    int n = 0;
    while (tg_decoder_config_preset_name(n)) n++;
    assert_int_equal(n, 11);
    tg_gpt_config g;
    tu_assert_status_error(tg_gpt_config_preset("qwen3-0.6b", &g), "not a GPT-2 configuration");
    tu_assert_status_error(tg_decoder_config_preset("qwen4", &c), "unknown model configuration 'qwen4'");
}

static void test_bad_configs(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new();
    tg_decoder_config ok = {.vocab_size = 50, .context_length = 8, .emb_dim = 16, .n_heads = 4, .n_layers = 1,
                            .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 24, .head_dim = 8, .n_kv_groups = 2,
                            .qk_norm = true, .rope_base = 1e6};
    tu_assert_ok(tg_decoder_new(mt, &ok));
    tg_decoder_config c = ok;
    c.n_kv_groups = 3;
    tu_assert_null_error(tg_decoder_new(mt, &c), "Qwen3Model", "n_heads (4) must be divisible by n_kv_groups (3)");
    c = ok, c.head_dim = 7;
    tu_assert_null_error(tg_decoder_new(mt, &c), "even head_dim");
    c = ok, c.drop_rate = 0.1;
    tu_assert_null_error(tg_decoder_new(mt, &c), "no dropout");
    /* features mix across families: a qkv bias with RoPE, Llama 3 with a
     * free head_dim and QK-norm (test_mixing checks what they compute) */
    c = ok, c.qkv_bias = true;
    tu_assert_ok(tg_decoder_new(mt, &c));
    c = ok, c.family = TG_GPT_FAMILY_LLAMA3;
    tu_assert_ok(tg_decoder_new(mt, &c));
    c.rope_freq = (tg_rope_freq){32, 4, 1, 8192};
    tu_assert_null_error(tg_decoder_new(mt, &c), "low_freq_factor < high_freq_factor");
    c = ok, c.family = TG_GPT_FAMILY_GPT2, c.positions = TG_POSITIONS_LEARNED;
    tu_assert_null_error(tg_decoder_new(mt, &c), "learned positions take no RoPE settings");
    c = ok, c.sliding_window = 0, c.layer_types[0] = TG_LAYER_SLIDING;
    tu_assert_null_error(tg_decoder_new(mt, &c), "layer 0 is a sliding layer and sliding_window is 0");
    c.layer_types[0] = 2;
    tu_assert_null_error(tg_decoder_new(mt, &c), "layer_types[0] is 2");
    c = ok, c.norm_offset = 1, c.norm = TG_NORM_LAYER;
    tu_assert_null_error(tg_decoder_new(mt, &c), "norm_offset (1) is RMSNorm's");
    c = ok, c.query_pre_attn_scalar = -1;
    tu_assert_null_error(tg_decoder_new(mt, &c), "query_pre_attn_scalar must be > 0");
    c = ok, c.mlp = (tg_mlp_kind)9;
    tu_assert_null_error(tg_decoder_new(mt, &c), "unknown norm 0, positions 0 or mlp 9");
    c = ok, c.family = (tg_gpt_family)7;
    tu_assert_null_error(tg_decoder_new(mt, &c), "unknown family 7");
    c = ok, c.context_length = (1 << 24) + 1;
    tu_assert_null_error(tg_decoder_new(mt, &c), "context_length 16777217 is above 16777216");

    /* the model refuses positions beyond its context, with the cache too */
    tg_tape *tp = tg_tape_new();
    tg_module *m = tg_decoder_new(mt, &ok);
    int64_t shape[2] = {1, 9}, ids[9] = {0};
    tu_assert_null_error(tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, shape, ids)), "exceed context_length");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- the new layers under float64 gradcheck ----------------------------------------------- */

static tg_tensor *rope_fn(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    return tg_apply_rope(tp, in[0], in[1], in[2]);
}

static void test_gradcheck_layers(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(5);
    int64_t xs[4] = {2, 3, 4, 6}, cs[2] = {5, 6};
    tg_tensor *in[3] = {tg_randn(tp, TG_F64, 4, xs, g), tg_randn(tp, TG_F64, 2, cs, g), tg_randn(tp, TG_F64, 2, cs, g)};
    for (int i = 0; i < 3; i++) assert_int_equal(tg_requires_grad_(in[i], true), TG_OK);
    tg_gradcheck_result r;
    assert_int_equal(tg_gradcheck_call(rope_fn, NULL, 3, in, NULL, &r), TG_OK);
    if (!r.passed) fail_msg("apply_rope gradcheck: %s", r.message);
    /* a Qwen3 block and a Llama 3 block of float64 modules, every parameter and input */
    for (int fam = 0; fam < 2; fam++) {
        tg_tape *mt = tg_tape_new();
        tg_decoder_config c = {.vocab_size = 11, .context_length = 8, .emb_dim = 8, .n_heads = 4, .n_layers = 1,
                               .family = fam ? TG_GPT_FAMILY_LLAMA3 : TG_GPT_FAMILY_QWEN3, .hidden_dim = 6,
                               .head_dim = fam ? 0 : 4, .n_kv_groups = 2, .qk_norm = !fam, .rope_base = 1e4,
                               .rope_freq = fam ? (tg_rope_freq){8, 1, 4, 4} : (tg_rope_freq){0, 0, 0, 0}};
        tg_manual_seed(3);
        tg_module *m = tg_decoder_new(mt, &c);
        tu_assert_ok(m);
        assert_int_equal(tg_module_to_dtype(mt, m, TG_F64), TG_OK);
        tg_module *block = tg_module_get_submodule(m, "trf_blocks.0");
        tu_assert_ok(block);
        tg_tensor *cos = NULL, *sin = NULL;
        assert_int_equal(tg_rope_params(tp, fam ? 2 : 4, 1e4, 8, fam ? &c.rope_freq : NULL, &cos, &sin), TG_OK);
        int64_t bs[3] = {2, 3, 8};
        tg_tensor *bin[3] = {tg_randn(tp, TG_F64, 3, bs, g), tg_to_dtype(tp, tg_narrow(tp, cos, 0, 0, 3), TG_F64),
                             tg_to_dtype(tp, tg_narrow(tp, sin, 0, 0, 3), TG_F64)};
        assert_int_equal(tg_requires_grad_(bin[0], true), TG_OK);
        tg_gradcheck_result rb;
        assert_int_equal(tg_gradcheck_module_call(block, 3, bin, NULL, &rb), TG_OK);
        if (!rb.passed) fail_msg("%s block gradcheck: %s", fam ? "Llama 3" : "Qwen3", rb.message);
        /* the whole model in float64 (its RoPE tables widened as .to() widens buffers), on ids */
        int64_t is[2] = {1, 4}, idv[4] = {1, 5, 10, 2};
        tg_tensor *ids = tg_from_data(tp, TG_I64, 2, is, idv);
        tg_gradcheck_result rm;
        assert_int_equal(tg_gradcheck_module_call(m, 1, &ids, NULL, &rm), TG_OK);
        if (!rm.passed) fail_msg("%s model gradcheck: %s", fam ? "Llama 3" : "Qwen3", rm.message);
        tg_tape_free(mt);
    }
    /* a Gemma 3 model: a sliding layer (its local table) and a full one,
     * four norms x * (1 + w), QK-norm, the query scale, GeGLU, the
     * embeddings' scale; its sliding block on its own */
    tg_tape *mt = tg_tape_new();
    tg_decoder_config c = {.vocab_size = 11, .context_length = 8, .emb_dim = 8, .n_heads = 2, .n_layers = 2,
                           .family = TG_GPT_FAMILY_GEMMA3, .hidden_dim = 6, .head_dim = 4, .n_kv_groups = 1,
                           .qk_norm = true, .rope_base = 1e6, .norm_offset = 1, .post_norms = true,
                           .rope_local_base = 1e4, .query_pre_attn_scalar = 3, .sliding_window = 2,
                           .layer_types = {1, 0}, .emb_scale = true};
    tg_manual_seed(3);
    tg_module *m = tg_decoder_new(mt, &c);
    tu_assert_ok(m);
    assert_int_equal(tg_module_to_dtype(mt, m, TG_F64), TG_OK);
    tg_named_list ps; /* norms away from their zero start */
    assert_int_equal(tg_module_named_parameters(tp, m, &ps), TG_OK);
    for (int i = 0; i < ps.n; i++)
        if (ps.tensors[i]->ndim == 1) assert_int_equal(tg_uniform_(ps.tensors[i], -0.5, 0.5, NULL), TG_OK);
    tg_tensor *cos = NULL, *sin = NULL;
    assert_int_equal(tg_rope_params(tp, 4, 1e4, 8, NULL, &cos, &sin), TG_OK);
    int64_t bs[3] = {2, 5, 8};
    tg_tensor *bin[3] = {tg_randn(tp, TG_F64, 3, bs, g), tg_to_dtype(tp, tg_narrow(tp, cos, 0, 0, 5), TG_F64),
                         tg_to_dtype(tp, tg_narrow(tp, sin, 0, 0, 5), TG_F64)};
    assert_int_equal(tg_requires_grad_(bin[0], true), TG_OK);
    tg_gradcheck_result rb;
    assert_int_equal(tg_gradcheck_module_call(tg_module_get_submodule(m, "blocks.0"), 3, bin, NULL, &rb), TG_OK);
    if (!rb.passed) fail_msg("Gemma 3 sliding block gradcheck: %s", rb.message);
    int64_t is[2] = {1, 5}, idv[5] = {1, 5, 10, 2, 7};
    tg_tensor *ids = tg_from_data(tp, TG_I64, 2, is, idv);
    tg_gradcheck_result rm;
    assert_int_equal(tg_gradcheck_module_call(m, 1, &ids, NULL, &rm), TG_OK);
    if (!rm.passed) fail_msg("Gemma 3 model gradcheck: %s", rm.message);
    tg_tape_free(mt);
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- features mixed across families ------------------------------------------------------------- */

/* What no family of the book has, built from the same features: RoPE with
 * a qkv bias (Qwen2.5's block), QK-norm on a Llama-shaped block, GeGLU in a
 * Qwen3-shaped block, a GPT-2 with RMSNorm and SwiGLU. Each has the modules
 * its features name, the parameter count tg_decoder_config_num_parameters
 * predicts, float64 gradients that pass gradcheck, and its KV cache gives
 * the logits of the whole sequence. */
static void test_mixing(void **state)
{
    (void)state;
    tg_decoder_config q = {.vocab_size = 13, .context_length = 8, .emb_dim = 8, .n_heads = 2, .n_layers = 2,
                           .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 6, .head_dim = 4, .n_kv_groups = 1,
                           .qk_norm = true, .rope_base = 1e4};
    tg_decoder_config l = q;
    l.family = TG_GPT_FAMILY_LLAMA3, l.head_dim = 0, l.qk_norm = false;
    tg_decoder_config mixes[4] = {q, l, q, {.vocab_size = 13, .context_length = 8, .emb_dim = 8, .n_heads = 2, .n_layers = 2}};
    mixes[0].qkv_bias = true;
    mixes[1].qk_norm = true;
    mixes[2].mlp = TG_MLP_GEGLU;
    mixes[3].norm = TG_NORM_RMS, mixes[3].mlp = TG_MLP_SWIGLU;
    const char *names[4] = {"qkv bias with RoPE", "QK-norm on Llama 3", "GeGLU in Qwen3", "GPT-2 with RMSNorm, SwiGLU"};
    const char *keys[4] = {"trf_blocks.1.att.W_value.bias", "trf_blocks.0.att.k_norm.weight", "trf_blocks.1.ff.fc3.weight",
                           "trf_blocks.0.ff.fc2.weight"};
    for (int i = 0; i < 4; i++) {
        tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
        tg_module *m = build(mt, &mixes[i], 11);
        if (!tg_module_get_parameter(m, keys[i])) fail_msg("%s: no parameter %s", names[i], keys[i]);
        assert_int_equal(tg_module_num_parameters(m), tg_decoder_config_num_parameters(&mixes[i]));
        tg_module_train(m, false);
        bool grad = tg_set_grad_enabled(false);
        int64_t all[2] = {1, 6}, one[2] = {1, 1};
        const int64_t idv[6] = {1, 5, 12, 2, 7, 3};
        tg_tensor *full = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, all, idv));
        tu_assert_ok(full);
        assert_int_equal(tg_module_set_kv_cache(m, true), TG_OK);
        for (int64_t j = 0; j < 6; j++) {
            tg_tensor *y = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, one, idv + j));
            tu_assert_close(y, tg_narrow(tp, full, 1, j, 1), 2e-6, 2e-6, names[i]);
        }
        assert_int_equal(tg_module_set_kv_cache(m, false), TG_OK);
        tg_set_grad_enabled(grad);
        assert_int_equal(tg_module_to_dtype(mt, m, TG_F64), TG_OK);
        tg_tensor *ids = tg_from_data(tp, TG_I64, 2, all, idv);
        tg_gradcheck_result r;
        assert_int_equal(tg_gradcheck_module_call(m, 1, &ids, NULL, &r), TG_OK);
        if (!r.passed) fail_msg("%s: gradcheck: %s", names[i], r.message);
        tg_tape_free(tp);
        tg_tape_free(mt);
    }
}

/* ---- the KV cache read in place under FAST and BF16 --------------------------------------------- */

/* Under FAST and BF16 the cached attention reads the cache's kv groups in
 * place (src/tensor/attend.c) instead of the composed ops: a sequence fed
 * in chunks with the cache (a prompt, one id, several ids after cached
 * positions, one id) gives the logits of the whole sequence run without
 * the cache under the same policy, on multi-head GPT-2 (head_dim 9: a
 * vector block and a tail), grouped-query Qwen3 (two heads per group,
 * head_dim 24; ten per group, read eight at a time, head_dim 6) and Llama 3
 * (four heads on one group). The tolerances are
 * float32's sums in another order, and under BF16 a softmax weight that
 * lands on the other side of a bf16 rounding step (the measured gaps are
 * far below them). */
static void test_kv_cache_policies(void **state)
{
    (void)state;
    const tg_decoder_config cfgs[5] = {
        {.vocab_size = 61, .context_length = 16, .emb_dim = 36, .n_heads = 4, .n_layers = 2, .drop_rate = 0.1,
         .qkv_bias = true},
        {.vocab_size = 61, .context_length = 16, .emb_dim = 32, .n_heads = 4, .n_layers = 2,
         .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 40, .head_dim = 24, .n_kv_groups = 2, .qk_norm = true,
         .rope_base = 1e6, .tie_head = true},
        {.vocab_size = 61, .context_length = 16, .emb_dim = 64, .n_heads = 4, .n_layers = 2,
         .family = TG_GPT_FAMILY_LLAMA3, .hidden_dim = 48, .n_kv_groups = 1, .rope_base = 5e5},
        {.vocab_size = 61, .context_length = 16, .emb_dim = 32, .n_heads = 20, .n_layers = 1,
         .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 40, .head_dim = 6, .n_kv_groups = 2, .rope_base = 1e6},
        /* Gemma 3: sliding layers of window 3 (the cache keeps their last
         * positions only) around a full one, the query scale */
        {.vocab_size = 61, .context_length = 16, .emb_dim = 32, .n_heads = 4, .n_layers = 3,
         .family = TG_GPT_FAMILY_GEMMA3, .hidden_dim = 40, .head_dim = 16, .n_kv_groups = 2, .qk_norm = true,
         .rope_base = 1e6, .norm_offset = 1, .post_norms = true, .rope_local_base = 1e4, .query_pre_attn_scalar = 12,
         .sliding_window = 3, .layer_types = {1, 0, 1}, .emb_scale = true},
    };
    const tg_numerics pol[3] = {TG_NUMERICS_FAST, TG_NUMERICS_BF16, TG_NUMERICS_EXACT};
    const double tol[3] = {5e-5, 2e-3, 5e-5};
    const int64_t ids[12] = {5, 17, 2, 40, 33, 8, 8, 51, 0, 26, 60, 3}, cuts[5] = {0, 4, 5, 11, 12}, all[2] = {1, 12};
    bool grad = tg_set_grad_enabled(false);
    for (int ci = 0; ci < 5; ci++)
        for (int pi = 0; pi < (ci == 4 ? 3 : 2); pi++) { /* Gemma 3's composed cached ops too */
            tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
            tg_module *m = build(mt, &cfgs[ci], 7 + (uint64_t)ci);
            /* weights of the size a trained model's have, so that attention is far from uniform */
            tg_named_list ps;
            assert_int_equal(tg_module_named_parameters(tp, m, &ps), TG_OK);
            for (int i = 0; i < ps.n; i++)
                if (ps.tensors[i]->ndim == 2) assert_int_equal(tg_normal_(ps.tensors[i], 0.0, 0.3, NULL), TG_OK);
            tg_module_train(m, false);
            assert_int_equal(tg_tape_set_numerics(tp, pol[pi]), TG_OK);
            tg_tensor *full = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, all, ids));
            tu_assert_ok(full);
            assert_int_equal(tg_module_set_kv_cache(m, true), TG_OK);
            assert_int_equal(tg_module_reset_kv_cache(m), TG_OK);
            for (int c = 0; c < 4; c++) {
                int64_t shape[2] = {1, cuts[c + 1] - cuts[c]};
                tg_tensor *y = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, shape, ids + cuts[c]));
                tu_assert_ok(y);
                char what[96];
                snprintf(what, sizeof what, "config %d %s: cached ids %lld..%lld", ci, tg_numerics_name(pol[pi]),
                         (long long)cuts[c], (long long)cuts[c + 1] - 1);
                tu_assert_close(y, tg_narrow(tp, full, 1, cuts[c], shape[1]), tol[pi], tol[pi], what);
            }
            tg_tape_free(tp);
            tg_tape_free(mt);
        }
    tg_set_grad_enabled(grad);
}

/* tg_module_prepare_numerics makes the weights' bf16 copies when called: a
 * weight changed behind the library's back afterwards (no new version) is
 * not seen by the next BF16 forward, which reads the copy made before (the
 * logits of an untouched twin model); a write through the library (a new
 * version) is. Nothing to make under EXACT and FAST; errors for a NULL
 * module and a value that is no policy. */
static void test_prepare_numerics(void **state)
{
    (void)state;
    tg_decoder_config cfg = {.vocab_size = 50, .context_length = 8, .emb_dim = 16, .n_heads = 4, .n_layers = 1,
                             .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 24, .head_dim = 8, .n_kv_groups = 2,
                             .qk_norm = true, .rope_base = 1e6};
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_module *m = build(mt, &cfg, 3), *twin = build(mt, &cfg, 3);
    bool grad = tg_set_grad_enabled(false);
    assert_int_equal(tg_tape_set_numerics(tp, TG_NUMERICS_BF16), TG_OK);
    const int64_t ids[5] = {1, 9, 44, 3, 20}, shape[2] = {1, 5};
    assert_int_equal(tg_module_prepare_numerics(m, TG_NUMERICS_EXACT), TG_OK);
    assert_int_equal(tg_module_prepare_numerics(m, TG_NUMERICS_FAST), TG_OK);
    assert_int_equal(tg_module_prepare_numerics(m, TG_NUMERICS_BF16), TG_OK);
    tg_tensor *w = tg_module_get_parameter(m, "trf_blocks.0.ff.fc1.weight");
    tu_assert_ok(w);
    float *wd = tg_data_ptr(w);
    int64_t n = tg_numel(w), version = tg_tensor_version(w);
    for (int64_t i = 0; i < n; i++) wd[i] *= 3.0f; /* behind the library's back */
    assert_int_equal(tg_tensor_version(w), version);
    tg_tensor *want = tg_module_forward(tp, twin, tg_from_data(tp, TG_I64, 2, shape, ids));
    tg_tensor *stale = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, shape, ids));
    tu_assert_close(stale, want, 0.0, 0.0, "a forward after prepare reads the copy made by prepare");
    assert_int_equal(tg_mul_scalar_(w, 1.0), TG_OK); /* a write through the library: a new version */
    tg_tensor *fresh = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, shape, ids));
    tu_assert_ok(fresh);
    const float *a = tg_data_ptr(fresh), *b = tg_data_ptr(want);
    double gap = 0;
    for (int64_t i = 0; i < tg_numel(fresh); i++) gap = fmax(gap, fabs((double)a[i] - b[i]));
    assert_true(gap > 1e-3); /* the tripled weight is read */
    tu_assert_status_error(tg_module_prepare_numerics(NULL, TG_NUMERICS_BF16), "NULL module");
    tu_assert_status_error(tg_module_prepare_numerics(m, (tg_numerics)9), "9 is not a policy");
    tg_set_grad_enabled(grad);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    g_ref = tu_load_ref("decoder.json");
    g_gemma = tu_load_ref("gemma3.json");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digest),       cmocka_unit_test(test_rope_tables),  cmocka_unit_test(test_presets),
        cmocka_unit_test(test_bad_configs),  cmocka_unit_test(test_gradcheck_layers), cmocka_unit_test(test_cases),
        cmocka_unit_test(test_generate),     cmocka_unit_test(test_kv_cache_policies),
        cmocka_unit_test(test_prepare_numerics), cmocka_unit_test(test_mixing),
        cmocka_unit_test(test_gemma3_cases), cmocka_unit_test(test_gemma3_generate),
        cmocka_unit_test(test_gemma3_preset),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_ref);
    json_decref(g_gemma);
    return rc;
}
