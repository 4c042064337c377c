/* The book's GPT (src/nn/decoder.c, layers.c, attention.c), generation
 * (src/nn/generate.c) and the Hugging Face loader (src/nn/decoder_hf.c)
 * against PyTorch 1.13.
 *
 * (a) small/<case>: every case of tests/ref/gpt.json (tools/reference/gpt.py):
 *     the model built after tg_manual_seed(seed), in train or eval mode, on the
 *     case's ids: logits, the loss (cross-entropy over (B*T, vocab)), every
 *     parameter's gradient, grad_fn names, parameter names, state_dict keys,
 *     print(model). Training-mode cases check PyTorch's dropout stream.
 *     Eval cases run again with the fused kernels: the same answer.
 * (b) generate: greedy, temperature, top-k, eos and cropping past the
 *     context, with and without the KV cache.
 * (c) the book's figures for GPT_CONFIG_124M (tests/ref/gpt_book.json):
 *     163,009,536 parameters, print(model), the training-mode logits printed
 *     exactly as PyTorch prints them, the greedy and sampled continuations
 *     of "Hello, I am" with and without the cache.
 * (d) loading: a PyTorch state_dict file and a Hugging Face layout file give
 *     PyTorch's logits; bad files and bad models are refused.
 * (e) gradcheck of every GPT module in float64; graph node names of both paths.
 * (f) bad configurations, ids and generation options: a message, no crash.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define ATOL 2e-5
#define RTOL 1e-4

static json_t *g_ref, *g_book;

static const json_t *jget(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!v) fail_msg("reference: missing key \"%s\"", key);
    return v;
}

static int64_t jint(const json_t *o, const char *key)
{
    const json_t *v = jget(o, key);
    if (json_is_integer(v)) return (int64_t)json_integer_value(v);
    if (json_is_real(v)) return (int64_t)json_real_value(v);
    return json_is_true(v) ? 1 : 0;
}

static double jnum(const json_t *o, const char *key)
{
    const json_t *v = jget(o, key);
    return json_is_real(v) ? json_real_value(v) : (double)json_integer_value(v);
}

static tg_gpt_config config_of(const json_t *c)
{
    return (tg_gpt_config){jint(c, "vocab_size"), jint(c, "context_length"), jint(c, "emb_dim"), jint(c, "n_heads"),
                           jint(c, "n_layers"),   jnum(c, "drop_rate"),      json_is_true(jget(c, "qkv_bias"))};
}

static tg_module *build(tg_tape *tp, const tg_gpt_config *cfg, uint64_t seed)
{
    tg_manual_seed(seed);
    tg_module *m = tg_gpt_new(tp, cfg);
    tu_assert_ok(m);
    return m;
}

static void assert_names(const tg_named_list *l, const json_t *want)
{
    assert_int_equal(l->n, (int)json_array_size(want));
    for (int i = 0; i < l->n; i++) assert_string_equal(l->names[i], json_string_value(json_array_get(want, (size_t)i)));
}

static char *repr_of(const tg_module *m)
{
    int n = tg_module_repr(m, NULL, 0);
    assert_true(n > 0);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(tg_module_repr(m, buf, (size_t)n + 1), n);
    return buf;
}

/* logits of a case's model on its ids; loss and gradients when want_grads */
static void run_case(const json_t *c, bool fused)
{
    const char *name = json_string_value(jget(c, "name"));
    tg_gpt_config cfg = config_of(jget(c, "config"));
    bool train = json_is_true(jget(c, "train"));
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_module *m = build(mt, &cfg, (uint64_t)jint(c, "seed"));
    tg_module_train(m, train);
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

    tg_tensor *ids = tu_tensor_from_json(tp, jget(c, "ids"), TG_DTYPE_COUNT);
    tg_tensor *targets = tu_tensor_from_json(tp, jget(c, "targets"), TG_DTYPE_COUNT);
    tg_tensor *logits = tg_module_forward(tp, m, ids);
    tu_assert_ok(logits);
    char what[160];
    snprintf(what, sizeof what, "%s%s logits", name, fused ? " (fused)" : "");
    tu_assert_close(logits, tu_tensor_from_json(tp, jget(c, "logits"), TG_DTYPE_COUNT), RTOL, ATOL, what);
    assert_string_equal(tg_grad_fn_name(logits), json_string_value(jget(c, "logits_grad_fn")));
    int64_t B = logits->shape[0], T = logits->shape[1], V = logits->shape[2];
    int64_t flat[2] = {B * T, V}, tflat[1] = {B * T};
    /* the composed loss (log_softmax, then nll_loss) beside the fused one */
    tg_tensor *lf = tg_view(tp, logits, 2, flat), *tf = tg_view(tp, targets, 1, tflat);
    tg_tensor *loss = fused ? tg_cross_entropy(tp, lf, tf, TG_REDUCE_MEAN)
                            : tg_nll_loss(tp, tg_log_softmax(tp, lf, 1), tf, TG_REDUCE_MEAN);
    tu_assert_ok(loss);
    assert_string_equal(tg_grad_fn_name(loss), json_string_value(jget(c, "loss_grad_fn")));
    if (fabs(tg_item(loss) - jnum(c, "loss")) > 1e-5) fail_msg("%s: loss %.9g, PyTorch %.9g", what, tg_item(loss), jnum(c, "loss"));
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    assert_int_equal(tg_module_named_parameters(tp, m, &l), TG_OK);
    const json_t *grads = jget(c, "grads");
    for (int i = 0; i < l.n; i++) {
        snprintf(what, sizeof what, "%s%s grad %s", name, fused ? " (fused)" : "", l.names[i]);
        tu_assert_ok(l.tensors[i]->grad);
        tu_assert_close(l.tensors[i]->grad, tu_tensor_from_json(tp, jget(grads, l.names[i]), TG_DTYPE_COUNT), RTOL,
                        ATOL, what);
    }
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_small_cases(void **state)
{
    (void)state;
    const json_t *cases = jget(g_ref, "cases"), *c;
    size_t i;
    json_array_foreach(cases, i, c) {
        run_case(c, false);
        /* the fused kernels give the same answer, dropout included: the
         * fused attention draws PyTorch's masks in PyTorch's order too */
        run_case(c, true);
    }
}

/* ---- generation ----------------------------------------------------------------------- */

static void check_generate(tg_module *m, const int64_t *prompt, int64_t np, tg_generate_options o, uint64_t sample_seed,
                           const json_t *want, const char *what)
{
    int64_t out[256], n = 0;
    for (int cache = 0; cache < 2; cache++) {
        o.no_kv_cache = cache == 0;
        tg_manual_seed(sample_seed);
        if (tg_gpt_generate(m, prompt, np, &o, out, &n) != TG_OK) fail_msg("%s: %s", what, tg_last_error());
        if (n != (int64_t)json_array_size(want)) fail_msg("%s (cache %d): %lld ids, PyTorch %zu", what, cache, (long long)n, json_array_size(want));
        for (int64_t i = 0; i < n; i++)
            if (out[i] != json_integer_value(json_array_get(want, (size_t)i)))
                fail_msg("%s (cache %s): id %lld is %lld, PyTorch %lld", what, cache ? "on" : "off", (long long)i,
                         (long long)out[i], (long long)json_integer_value(json_array_get(want, (size_t)i)));
    }
}

static void test_generate(void **state)
{
    (void)state;
    const json_t *gens = jget(g_ref, "generate"), *g;
    size_t i;
    json_array_foreach(gens, i, g) {
        tg_gpt_config cfg = config_of(jget(g, "config"));
        tg_tape *mt = tg_tape_new();
        tg_module *m = build(mt, &cfg, (uint64_t)jint(g, "seed"));
        const json_t *p = jget(g, "prompt");
        int64_t prompt[64], np = (int64_t)json_array_size(p);
        for (int64_t k = 0; k < np; k++) prompt[k] = json_integer_value(json_array_get(p, (size_t)k));
        tg_generate_options o = {.max_new_tokens = jint(g, "max_new_tokens"), .temperature = jnum(g, "temperature"),
                                 .top_k = jint(g, "top_k"), .eos_id = jint(g, "eos_id")};
        assert_true(tg_module_is_training(m));
        check_generate(m, prompt, np, o, (uint64_t)jint(g, "sample_seed"), jget(g, "ids"),
                       json_string_value(jget(g, "name")));
        assert_true(tg_module_is_training(m)); /* the mode is restored */
        tg_tape_free(mt);
    }
}

/* The KV cache through the modules: the logits of a sequence fed in chunks
 * with the cache on equal those of the whole sequence at once (float64, so
 * the only difference is the products' shapes); the position and the
 * cache's errors. */
static void test_kv_cache_modules(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_gpt_config cfg = {.vocab_size = 53, .context_length = 12, .emb_dim = 16, .n_heads = 4, .n_layers = 2,
                         .drop_rate = 0.1, .qkv_bias = true};
    tg_module *m = build(mt, &cfg, 11);
    assert_int_equal(tg_module_to_dtype(mt, m, TG_F64), TG_OK);
    tg_module_train(m, false);
    bool grad = tg_set_grad_enabled(false);
    const int64_t ids[10] = {5, 17, 2, 40, 33, 8, 8, 51, 0, 26}, all[2] = {1, 10};
    tg_tensor *full = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, all, ids));
    tu_assert_ok(full);
    assert_false(tg_module_kv_cache_enabled(m));
    assert_int_equal(tg_module_set_kv_cache(m, true), TG_OK);
    assert_true(tg_module_kv_cache_enabled(tg_module_get_submodule(m, "trf_blocks.1.att")));
    for (int round = 0; round < 2; round++) { /* the second after a reset */
        assert_int_equal(tg_module_reset_kv_cache(m), TG_OK);
        const int64_t cuts[4] = {0, 4, 5, 10}; /* a prompt of 4, one id, then 5 */
        for (int c = 0; c < 3; c++) {
            int64_t shape[2] = {1, cuts[c + 1] - cuts[c]};
            tg_tensor *y = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, shape, ids + cuts[c]));
            tu_assert_ok(y);
            tu_assert_close(y, tg_narrow(tp, full, 1, cuts[c], shape[1]), 1e-12, 1e-12, "cached chunk");
        }
    }
    /* 10 cached + 3 new > context 12 */
    int64_t three[2] = {1, 3};
    tu_assert_null_error(tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, three, ids)), "10 cached", "3 new",
                         "context_length 12", "reset the KV cache");
    /* the attention alone: another batch while it holds positions; grad recorded */
    tg_module *att = tg_module_get_submodule(m, "trf_blocks.0.att");
    int64_t xs[3] = {2, 1, 16};
    tu_assert_null_error(tg_module_forward(tp, att, tg_zeros(tp, TG_F64, 3, xs)), "KV cache holds 10 positions", "batch 2");
    assert_int_equal(tg_module_reset_kv_cache(att), TG_OK);
    tu_assert_ok(tg_module_forward(tp, att, tg_zeros(tp, TG_F64, 3, xs)));
    tg_set_grad_enabled(true);
    assert_int_equal(tg_module_reset_kv_cache(att), TG_OK);
    tu_assert_null_error(tg_module_forward(tp, att, tg_zeros(tp, TG_F64, 3, xs)), "grad recording off");
    tg_set_grad_enabled(false);
    /* off again: the window starts at position 0 whatever the cache held */
    assert_int_equal(tg_module_set_kv_cache(m, false), TG_OK);
    tg_tensor *again = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, all, ids));
    tu_assert_close(again, full, 0.0, 0.0, "no cache after the cache");
    tu_assert_status_error(tg_module_set_kv_cache(NULL, true), "NULL");
    tu_assert_status_error(tg_module_reset_kv_cache(NULL), "NULL");
    assert_false(tg_module_kv_cache_enabled(NULL));
    tg_set_grad_enabled(grad);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- the book's figures ------------------------------------------------------------------ */

static void test_book_124m(void **state)
{
    (void)state;
    tg_gpt_config cfg;
    assert_int_equal(tg_gpt_config_preset("gpt2-small", &cfg), TG_OK);
    assert_int_equal(tg_gpt_config_num_parameters(&cfg), jint(g_book, "num_parameters"));
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_module *m = build(mt, &cfg, 123);
    assert_int_equal(tg_module_num_parameters(m), 163009536);
    assert_int_equal(tg_module_num_parameters(m), jint(g_book, "num_parameters"));
    assert_int_equal(163009536 - tg_numel(tg_module_get_parameter(m, "out_head.weight")),
                     jint(g_book, "num_parameters_tied"));
    char *r = repr_of(m);
    assert_string_equal(r, json_string_value(jget(g_book, "repr")));
    free(r);

    /* training mode, as the book runs it: dropout from PyTorch's stream */
    const int64_t batch[8] = {6109, 3626, 6100, 345, 6109, 1110, 6622, 257}, shape[2] = {2, 4};
    tg_tensor *logits = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, shape, batch));
    tu_assert_ok(logits);
    char *text = tg_format(logits);
    assert_non_null(text);
    assert_string_equal(text, json_string_value(jget(g_book, "logits_print")));
    free(text);
    tu_assert_close(tg_narrow(tp, tg_select(tp, tg_select(tp, logits, 0, 0), 0, 0), 0, 0, 8),
                    tu_tensor_from_json(tp, jget(g_book, "logits_first"), TG_DTYPE_COUNT), RTOL, ATOL, "logits[0,0,:8]");
    tu_assert_close(tg_narrow(tp, tg_select(tp, tg_select(tp, logits, 0, 1), 0, 3), 0, 50257 - 8, 8),
                    tu_tensor_from_json(tp, jget(g_book, "logits_last"), TG_DTYPE_COUNT), RTOL, ATOL, "logits[1,3,-8:]");

    /* eval mode, greedy and sampled from "Hello, I am" */
    tg_module_train(m, false);
    const int64_t hello[4] = {15496, 11, 314, 716};
    tg_generate_options o = {.max_new_tokens = 10, .eos_id = -1};
    check_generate(m, hello, 4, o, 123, jget(g_book, "greedy_ids"), "greedy 124M");
    const json_t *s = jget(g_book, "sampled");
    o.temperature = jnum(s, "temperature");
    o.top_k = jint(s, "top_k");
    check_generate(m, hello, 4, o, (uint64_t)jint(s, "sample_seed"), jget(s, "ids"), "sampled 124M");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- loading --------------------------------------------------------------------------------- */

static void check_logits(tg_module *m, const json_t *ref, const char *what)
{
    tg_tape *tp = tg_tape_new();
    tg_module_train(m, false);
    tg_tensor *y = tg_module_forward(tp, m, tu_tensor_from_json(tp, jget(ref, "ids"), TG_DTYPE_COUNT));
    tu_assert_ok(y);
    tu_assert_close(y, tu_tensor_from_json(tp, jget(ref, "logits"), TG_DTYPE_COUNT), RTOL, ATOL, what);
    tg_tape_free(tp);
}

static void test_load_state_dict(void **state)
{
    (void)state;
    const json_t *ref = jget(g_ref, "state");
    tg_gpt_config cfg = config_of(jget(ref, "config"));
    char path[1024], tmp[] = "/tmp/tg_gpt_XXXXXX";
    tu_ref_path(path, sizeof path, "gpt_state.safetensors");
    tg_tape *mt = tg_tape_new();
    tg_module *m = build(mt, &cfg, 1); /* another seed: every weight comes from the file */
    assert_int_equal(tg_module_load(m, path), TG_OK);
    check_logits(m, ref, "state_dict from PyTorch");
    /* and back: saved by tapegrad, loaded into a third model */
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tg_module_save(m, tmp), TG_OK);
    tg_module *m2 = build(mt, &cfg, 2);
    assert_int_equal(tg_module_load(m2, tmp), TG_OK);
    check_logits(m2, ref, "state_dict saved and loaded");
    unlink(tmp);
    /* a state_dict of another shape is refused, the model unchanged */
    tg_gpt_config other = cfg;
    other.emb_dim = 6;
    tg_module *m3 = build(mt, &other, 3);
    tu_assert_status_error(tg_module_load(m3, path), "size mismatch", "tok_emb.weight");
    tg_tape_free(mt);
}

static void test_load_hf(void **state)
{
    (void)state;
    const json_t *ref = jget(g_ref, "hf");
    tg_gpt_config cfg = config_of(jget(ref, "config"));
    char path[1024];
    tu_ref_path(path, sizeof path, "gpt_hf.safetensors");
    tg_tape *mt = tg_tape_new();
    tg_module *m = build(mt, &cfg, 5);
    assert_int_equal(tg_gpt_load_hf(m, path), TG_OK);
    check_logits(m, ref, "Hugging Face layout");
    /* out_head is tied to wte's values */
    tg_tape *tp = tg_tape_new();
    tu_assert_close(tg_module_get_parameter(m, "out_head.weight"), tg_module_get_parameter(m, "tok_emb.weight"), 0, 0,
                    "out_head = wte");
    tg_tape_free(tp);

    tg_gpt_config nobias = cfg;
    nobias.qkv_bias = false;
    tu_assert_status_error(tg_gpt_load_hf(build(mt, &nobias, 1), path), "qkv_bias");
    tg_gpt_config more = cfg;
    more.n_layers = 2;
    tu_assert_status_error(tg_gpt_load_hf(build(mt, &more, 1), path), "missing key", "h.1.");
    tg_gpt_config wide = cfg;
    wide.emb_dim = 8;
    tg_module *mw = build(mt, &wide, 1);
    tg_tensor *before = tg_clone(mt, tg_module_get_parameter(mw, "tok_emb.weight"));
    tu_assert_status_error(tg_gpt_load_hf(mw, path), "size mismatch", "wte.weight");
    tu_assert_close(tg_module_get_parameter(mw, "tok_emb.weight"), before, 0, 0, "unchanged after a failed load");
    tu_assert_status_error(tg_gpt_load_hf(m, "/nonexistent/model.safetensors"), "nonexistent");
    tu_assert_status_error(tg_gpt_load_hf(tg_linear_new(mt, 2, 2, false), path), "not a GPTModel");
    /* a truncated file */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char buf[4096];
    size_t got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char tmp[] = "/tmp/tg_hf_XXXXXX";
    int fd = mkstemp(tmp);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, got / 2), (ssize_t)(got / 2));
    close(fd);
    tu_assert_status_error(tg_gpt_load_hf(m, tmp), tmp);
    unlink(tmp);
    check_logits(m, ref, "unchanged after failed loads");
    tg_tape_free(mt);
}

/* ---- gradcheck and node names ---------------------------------------------------------------------- */

static void test_gradcheck_modules(void **state)
{
    (void)state;
    tg_gpt_config cfg = {7, 4, 4, 2, 1, 0.0, true};
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    for (int fused = 0; fused < 2; fused++) {
        tg_module *m = build(mt, &cfg, 11);
        tg_module_set_fused(m, fused);
        assert_int_equal(tg_module_to_dtype(mt, m, TG_F64), TG_OK);
        /* non-trivial scale/shift so that their gradients are checked at a generic point */
        tg_named_list l;
        assert_int_equal(tg_module_named_parameters(tp, m, &l), TG_OK);
        for (int i = 0; i < l.n; i++)
            if (strstr(l.names[i], "scale") || strstr(l.names[i], "shift"))
                assert_int_equal(tg_uniform_(l.tensors[i], 0.5, 1.5, NULL), TG_OK);
        const int64_t ids_v[6] = {1, 6, 0, 3, 3, 5}, shape[2] = {2, 3};
        tg_tensor *ids = tg_from_data(tp, TG_I64, 2, shape, ids_v);
        tg_gradcheck_result res;
        int st = tg_gradcheck_module_call(m, 1, &ids, NULL, &res);
        if (st != TG_OK || !res.passed) fail_msg("GPTModel gradcheck (fused %d): %s", fused, res.message);
        /* each piece on its own, with a float input */
        int64_t xs[3] = {2, 3, 4};
        tg_tensor *x = tg_rand(tp, TG_F64, 3, xs, NULL);
        tg_module *parts[4] = {tg_layer_norm_new(mt, 4), tg_gelu_new(mt), tg_feed_forward_new(mt, &cfg),
                               tg_transformer_block_new(mt, &cfg)};
        for (int i = 0; i < 4; i++) {
            tg_module_set_fused(parts[i], fused);
            assert_int_equal(tg_module_to_dtype(mt, parts[i], TG_F64), TG_OK);
            tg_module_train(parts[i], false);
            st = tg_gradcheck_module_call(parts[i], 1, &x, NULL, &res);
            if (st != TG_OK || !res.passed)
                fail_msg("%s gradcheck (fused %d): %s", tg_module_type_name(parts[i]), fused, res.message);
        }
    }
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_node_names(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    int64_t xs[2] = {3, 8};
    tg_tensor *x = tg_rand(tp, TG_F32, 2, xs, NULL);
    tg_requires_grad_(x, true);
    tg_module *ln = tg_layer_norm_new(mt, 8), *gelu = tg_gelu_new(mt), *emb = tg_embedding_new(mt, 10, 4);
    assert_string_equal(tg_grad_fn_name(tg_module_forward(tp, ln, x)), "AddBackward0");
    assert_string_equal(tg_grad_fn_name(tg_module_forward(tp, gelu, x)), "MulBackward0");
    tg_module_set_fused(ln, true);
    tg_module_set_fused(gelu, true);
    assert_string_equal(tg_grad_fn_name(tg_module_forward(tp, ln, x)), "NativeLayerNormBackward0");
    assert_string_equal(tg_grad_fn_name(tg_module_forward(tp, gelu, x)), "GeluBackward0");
    tg_gpt_config cfg = {10, 4, 8, 2, 1, 0.0, false};
    tg_module *ff = tg_feed_forward_new(mt, &cfg);
    assert_string_equal(tg_grad_fn_name(tg_module_forward(tp, ff, x)), "AddmmBackward0");
    tg_module_set_fused(ff, true);
    assert_string_equal(tg_grad_fn_name(tg_module_forward(tp, ff, x)), "FeedForwardBackward0");
    const int64_t idv[3] = {0, 9, 4}, is[1] = {3};
    assert_string_equal(tg_grad_fn_name(tg_module_forward(tp, emb, tg_from_data(tp, TG_I64, 1, is, idv))),
                        "EmbeddingBackward0");
    char *r = repr_of(emb);
    assert_string_equal(r, "Embedding(10, 4)");
    free(r);
    r = repr_of(ln);
    assert_string_equal(r, "LayerNorm()");
    free(r);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- the ops on their own ------------------------------------------------------------------------- */

static void assert_ids_equal(const tg_tensor *got, const tg_tensor *want, const char *what)
{
    tu_assert_ok(got);
    if (!tg_same_shape(got, want)) fail_msg("%s: shapes differ", what);
    for (int64_t i = 0; i < tg_numel(want); i++)
        if (tg_item_at(got, i) != tg_item_at(want, i))
            fail_msg("%s: element %lld is %g, PyTorch %g", what, (long long)i, tg_item_at(got, i), tg_item_at(want, i));
}

static void test_ops_against_pytorch(void **state)
{
    (void)state;
    const json_t *ops = jget(g_ref, "ops"), *c;
    tg_tape *tp = tg_tape_new();
    size_t i;
    /* multinomial: PyTorch's draws, bit for bit */
    tg_tensor *rows = tu_tensor_from_json(tp, jget(ops, "multinomial_rows"), TG_DTYPE_COUNT);
    int64_t V = 50257;
    tg_generator *g = tg_generator_new(1);
    tg_tensor *big = tg_softmax(tp, tg_mul_scalar(tp, tg_randn(tp, TG_F32, 1, &V, g), 3.0), -1);
    tg_generator_free(g);
    json_array_foreach(jget(ops, "multinomial"), i, c) {
        bool is_big = strcmp(json_string_value(jget(c, "probs")), "big") == 0;
        tg_tensor *p = is_big ? big : rows;
        if (strcmp(json_string_value(jget(c, "dtype")), "float64") == 0) p = tg_to_dtype(tp, p, TG_F64);
        tg_manual_seed((uint64_t)jint(c, "seed"));
        char what[64];
        snprintf(what, sizeof what, "multinomial %zu", i);
        assert_ids_equal(tg_multinomial(tp, p, jint(c, "num_samples"), false, NULL),
                         tu_tensor_from_json(tp, jget(c, "samples"), TG_DTYPE_COUNT), what);
    }
    /* training-mode dropout: PyTorch's bernoulli_ stream and scaling, bit for bit */
    json_array_foreach(jget(ops, "dropout"), i, c) {
        tg_manual_seed((uint64_t)jint(c, "seed"));
        tg_tensor *y = tg_dropout(tp, tu_tensor_from_json(tp, jget(c, "x"), TG_DTYPE_COUNT), jnum(c, "p"), NULL);
        tu_assert_close(y, tu_tensor_from_json(tp, jget(c, "y"), TG_DTYPE_COUNT), 0, 0, "dropout");
    }
    json_array_foreach(jget(ops, "var"), i, c) {
        tg_tensor *y = tg_var(tp, tu_tensor_from_json(tp, jget(c, "x"), TG_DTYPE_COUNT), (int)jint(c, "dim"),
                              json_is_true(jget(c, "unbiased")), json_is_true(jget(c, "keepdim")));
        tu_assert_close(y, tu_tensor_from_json(tp, jget(c, "y"), TG_DTYPE_COUNT), 1e-12, 1e-14, "var");
    }
    json_array_foreach(jget(ops, "topk"), i, c) {
        tg_tensor *v, *ix;
        assert_int_equal(tg_topk(tp, tu_tensor_from_json(tp, jget(c, "x"), TG_DTYPE_COUNT), jint(c, "k"),
                                 (int)jint(c, "dim"), json_is_true(jget(c, "largest")), true, &v, &ix),
                         TG_OK);
        tu_assert_close(v, tu_tensor_from_json(tp, jget(c, "values"), TG_DTYPE_COUNT), 0, 0, "topk values");
        assert_ids_equal(ix, tu_tensor_from_json(tp, jget(c, "indices"), TG_DTYPE_COUNT), "topk indices");
    }
    json_array_foreach(jget(ops, "argmax"), i, c) {
        assert_ids_equal(tg_argmax(tp, tu_tensor_from_json(tp, jget(c, "x"), TG_DTYPE_COUNT), (int)jint(c, "dim"), false),
                         tu_tensor_from_json(tp, jget(c, "y"), TG_DTYPE_COUNT), "argmax");
    }
    tg_tape_free(tp);
}

/* gradcheck callbacks: each op of one float64 input (and fixed extras in ctx) */
static tg_tensor *f_var(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n;
    return tg_var(tp, in[0], *(const int *)ctx, *(const int *)ctx == 0, true);
}
static tg_tensor *f_topk(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n, (void)ctx;
    tg_tensor *v = NULL, *ix;
    tg_topk(tp, in[0], 3, -1, true, true, &v, &ix);
    return v;
}
static tg_tensor *f_embedding(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n;
    return tg_embedding(tp, in[0], ctx);
}
static tg_tensor *f_layer_norm(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n, (void)ctx;
    return tg_layer_norm(tp, in[0], in[1], in[2], 1e-5);
}
static tg_tensor *f_nll(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n;
    return tg_nll_loss(tp, tg_log_softmax(tp, in[0], 1), ctx, TG_REDUCE_MEAN);
}

static void gradcheck_or_fail(tg_gradcheck_forward fn, void *ctx, int n, tg_tensor *const *in, const char *what)
{
    tg_gradcheck_result res;
    int st = tg_gradcheck_call(fn, ctx, n, in, NULL, &res);
    if (st != TG_OK || !res.passed) fail_msg("%s gradcheck: %s %s", what, res.message, st ? tg_last_error() : "");
}

static void test_ops_gradcheck(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(3);
    int64_t s34[2] = {3, 4}, s5[1] = {5}, s25[3] = {2, 3, 5};
    tg_tensor *x = tg_randn(tp, TG_F64, 2, s34, g);
    tg_requires_grad_(x, true);
    for (int dim = 0; dim < 2; dim++) gradcheck_or_fail(f_var, &dim, 1, &x, "var");
    gradcheck_or_fail(f_topk, NULL, 1, &x, "topk");
    tg_tensor *w = tg_randn(tp, TG_F64, 2, (int64_t[]){6, 3}, g);
    tg_requires_grad_(w, true);
    const int64_t idv[4] = {5, 0, 5, 2}, is[2] = {2, 2};
    gradcheck_or_fail(f_embedding, tg_from_data(tp, TG_I64, 2, is, idv), 1, &w, "embedding (repeated ids)");
    tg_tensor *ln[3] = {tg_randn(tp, TG_F64, 3, s25, g), tg_randn(tp, TG_F64, 1, s5, g), tg_randn(tp, TG_F64, 1, s5, g)};
    for (int i = 0; i < 3; i++) tg_requires_grad_(ln[i], true);
    gradcheck_or_fail(f_layer_norm, NULL, 3, ln, "layer_norm");
    const int64_t tv[3] = {3, 0, 1};
    gradcheck_or_fail(f_nll, tg_from_data(tp, TG_I64, 1, (int64_t[]){3}, tv), 1, &x, "nll_loss(log_softmax)");
    tg_generator_free(g);
    tg_tape_free(tp);
}

static void test_ops_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s34[2] = {3, 4}, s3[1] = {3};
    tg_tensor *x = tg_rand(tp, TG_F32, 2, s34, NULL), *v, *ix;
    tu_assert_null_error(tg_var(tp, x, 2, false, false), "var", "dim");
    tu_assert_null_error(tg_var(tp, tg_zeros(tp, TG_I64, 1, s3), 0, false, false), "var");
    tu_assert_null_error(tg_argmax(tp, x, -3, false), "argmax");
    tu_assert_status_error(tg_topk(tp, x, 5, -1, true, true, &v, &ix), "topk: k (5) is out of range");
    tu_assert_status_error(tg_topk(tp, x, -1, -1, true, true, &v, &ix), "topk");
    const int64_t bad[3] = {0, 3, 4};
    tu_assert_null_error(tg_embedding(tp, x, tg_from_data(tp, TG_I64, 1, s3, bad)),
                         "embedding: id 3 at position 1 is out of range for 3 embeddings");
    tu_assert_null_error(tg_embedding(tp, x, x), "ids must be int64");
    tu_assert_null_error(tg_embedding(tp, tg_rand(tp, TG_F32, 1, s3, NULL), tg_zeros(tp, TG_I64, 1, s3)), "weight must be");
    tu_assert_null_error(tg_layer_norm(tp, x, tg_ones(tp, TG_F32, 1, s3), tg_ones(tp, TG_F32, 1, s3), 1e-5),
                         "layer_norm", "(4)");
    const float neg[3] = {0.5f, -0.1f, 0.6f}, zero[3] = {0, 0, 0}, nanv[3] = {0.5f, NAN, 0.5f};
    tu_assert_null_error(tg_multinomial(tp, tg_from_f32(tp, 1, s3, neg), 1, false, NULL), "element < 0");
    tu_assert_null_error(tg_multinomial(tp, tg_from_f32(tp, 1, s3, nanv), 1, false, NULL), "nan");
    tu_assert_null_error(tg_multinomial(tp, tg_from_f32(tp, 1, s3, zero), 1, false, NULL), "sum of probabilities");
    tu_assert_null_error(tg_multinomial(tp, x, 5, false, NULL), "without replacement");
    tu_assert_null_error(tg_multinomial(tp, x, 2, true, NULL), "not supported");
    tu_assert_null_error(tg_multinomial(tp, x, 0, false, NULL), "num_samples");
    tu_assert_null_error(tg_nll_loss(tp, x, tg_from_data(tp, TG_I64, 1, s3, bad), TG_REDUCE_MEAN),
                         "target 4 at position 2 is out of bounds for 4 classes");
    tu_assert_status_error(tg_bernoulli_(x, 1.5, NULL), "bernoulli_");
    tg_tape_free(tp);
}

/* ---- bad input -------------------------------------------------------------------------------------- */

static void test_bad_configs(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new();
    tg_gpt_config ok = {50, 8, 12, 3, 2, 0.1, false}, c;
    c = ok, c.n_heads = 5;
    tu_assert_null_error(tg_gpt_new(mt, &c), "emb_dim (12) must be divisible by n_heads (5)");
    c = ok, c.vocab_size = 0;
    tu_assert_null_error(tg_gpt_new(mt, &c), "vocab_size must be positive");
    c = ok, c.n_layers = -1;
    tu_assert_null_error(tg_gpt_new(mt, &c), "n_layers must be positive");
    c = ok, c.drop_rate = 1.0;
    tu_assert_null_error(tg_gpt_new(mt, &c), "drop_rate");
    c = ok, c.context_length = 1 << 20;
    tu_assert_null_error(tg_gpt_new(mt, &c), "context_length");
    c = ok, c.vocab_size = 2000000000, c.emb_dim = 2000000000, c.n_heads = 1;
    tu_assert_null_error(tg_gpt_new(mt, &c), "GiB");
    assert_int_equal(tg_gpt_config_num_parameters(&c), -1);
    tu_assert_null_error(tg_gpt_new(mt, NULL), "NULL");
    tu_assert_status_error(tg_gpt_config_preset("gpt5", &c), "unknown model configuration 'gpt5'");

    tg_tape *tp = tg_tape_new();
    tg_module *m = build(mt, &ok, 1);
    const int64_t bad[3] = {1, 50, 2}, s13[2] = {1, 3}, s19[2] = {1, 9};
    tu_assert_null_error(tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, s13, bad)), "50", "out of range");
    const int64_t neg[3] = {1, -1, 2};
    tu_assert_null_error(tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, s13, neg)), "-1");
    tu_assert_null_error(tg_module_forward(tp, m, tg_zeros(tp, TG_I64, 2, s19)), "9 tokens exceed context_length 8");
    tu_assert_null_error(tg_module_forward(tp, m, tg_zeros(tp, TG_F32, 2, s13)), "int64");
    tu_assert_null_error(tg_module_forward(tp, m, tg_zeros(tp, TG_I64, 1, s13 + 1)), "(batch, tokens)");

    int64_t out[32], n;
    const int64_t prompt[2] = {1, 2};
    tg_generate_options o = {.max_new_tokens = 3, .eos_id = -1};
    o.top_k = 51;
    tu_assert_status_error(tg_gpt_generate(m, prompt, 2, &o, out, &n), "top_k");
    o.top_k = 0, o.temperature = -1;
    tu_assert_status_error(tg_gpt_generate(m, prompt, 2, &o, out, &n), "temperature");
    o.temperature = NAN;
    tu_assert_status_error(tg_gpt_generate(m, prompt, 2, &o, out, &n), "temperature");
    o.temperature = 0, o.eos_id = 50;
    tu_assert_status_error(tg_gpt_generate(m, prompt, 2, &o, out, &n), "eos_id");
    o.eos_id = -1;
    tu_assert_status_error(tg_gpt_generate(m, prompt, 0, &o, out, &n), "no ids");
    const int64_t badp[2] = {1, 77};
    tu_assert_status_error(tg_gpt_generate(m, badp, 2, &o, out, &n), "77", "position 1");
    tu_assert_status_error(tg_gpt_generate(tg_linear_new(mt, 2, 2, false), prompt, 2, &o, out, &n), "not a GPTModel");
    o.max_new_tokens = -1;
    tu_assert_status_error(tg_gpt_generate(m, prompt, 2, &o, out, &n), "max_new_tokens");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- dropout in training mode (tests/ref/pretrain.json, "dropout_forward") ------------------ */

/* The book's GPT in training mode with drop_rate 0.3 after
 * torch.manual_seed(123): logits, loss and gradients equal PyTorch's, and the
 * default generator ends where PyTorch's does (torch.rand(3) afterwards), on
 * the composed path and on the fused one: both draw PyTorch's dropout stream
 * in PyTorch's order. */
/* Fused, a TransformerBlock in training (PyTorch's dropout stream) equals
 * the composed block bit for bit in float32 (output, input and parameter
 * gradients; in float64 the fused LayerNorm and GELU round differently from
 * the composed ones, whose GELU constant is float32: close, not equal), and
 * keeps what its backward needs and little else:
 * per (B, T, d) unit U, the norms' outputs 2U, q, k, v 3U, the context U,
 * the projection U (its dropout's product and then the residual sum are
 * written over it), the first FeedForward layer's output 4U and the
 * second's U (the same): 12U, plus the attention weights' lower triangle.
 * Each saving undone breaks the bound: the GELU output (4U), a dropout
 * output or a residual sum of its own (U), the context's head merge copy
 * (U), the weights' upper triangle. */
static void check_block_exact(tg_dtype dt, int64_t B, int64_t T)
{
    const int64_t D = 128, H = 4;
    tg_gpt_config cfg = {50, T, D, H, 1, 0.1, false};
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_generator *gin = tg_generator_new(3);
    int64_t xs[3] = {B, T, D};
    tg_tensor *x[2], *y[2];
    tg_module *m[2];
    size_t used[2];
    for (int k = 0; k < 2; k++) {
        tg_generator_seed(gin, 3);
        x[k] = tg_rand(mt, dt, 3, xs, gin);
        tu_assert_ok(x[k]);
        assert_int_equal(tg_requires_grad_(x[k], true), TG_OK);
        tg_manual_seed(17);
        m[k] = tg_transformer_block_new(mt, &cfg);
        tu_assert_ok(m[k]);
        if (dt == TG_F64) assert_int_equal(tg_module_to_dtype(mt, m[k], TG_F64), TG_OK);
        assert_int_equal(tg_module_set_fused(m[k], k == 1), TG_OK);
        assert_int_equal(tg_module_train(m[k], true), TG_OK);
        tg_manual_seed(23); /* the same dropout draws */
        size_t before = tg_tape_used(tp);
        y[k] = tg_module_forward(tp, m[k], x[k]);
        tu_assert_ok(y[k]);
        used[k] = tg_tape_used(tp) - before;
        assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, y[k], y[k])), NULL, false), TG_OK);
    }
    double tol = dt == TG_F32 ? 0.0 : 1e-6;
    tu_assert_close(y[1], y[0], tol, tol, "fused block output");
    tu_assert_close(x[1]->grad, x[0]->grad, tol, tol, "fused block dx");
    tg_named_list pa, pb;
    assert_int_equal(tg_module_named_parameters(tp, m[0], &pa), TG_OK);
    assert_int_equal(tg_module_named_parameters(tp, m[1], &pb), TG_OK);
    assert_int_equal(pa.n, pb.n);
    for (int i = 0; i < pa.n; i++) tu_assert_close(pb.tensors[i]->grad, pa.tensors[i]->grad, tol, tol, pa.names[i]);
    assert_string_equal(tg_grad_fn_name(y[1]), "AddBackward0");
    size_t es = dt == TG_F32 ? 4 : 8, U = (size_t)(B * T * D) * es, tri = (size_t)(B * H * T * (T + 1) / 2) * es;
    size_t bound = 12 * U + tri + U / 2; /* U / 2: masks, statistics, tensor and node headers */
    printf("fused block (%s, B %lld, T %lld): forward keeps %zu bytes (composed %zu), bound %zu\n",
           tg_dtype_name(dt), (long long)B, (long long)T, used[1], used[0], bound);
    assert_true(used[1] <= bound);
    tg_generator_free(gin);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_fused_block_exact(void **state)
{
    (void)state;
    check_block_exact(TG_F32, 4, 48);
    check_block_exact(TG_F64, 3, 40);
}

static void test_dropout_forward(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("pretrain.json");
    const json_t *c = jget(ref, "dropout_forward");
    tg_gpt_config cfg = config_of(jget(c, "config"));
    assert_true(cfg.drop_rate > 0);
    assert_int_equal(tg_generator_dropout_stream(NULL), TG_DROPOUT_TORCH);
    for (int fused = 0; fused < 2; fused++) {
        const char *path = fused ? "fused" : "composed";
        char what[160];
        tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
        tg_module *m = build(mt, &cfg, (uint64_t)jint(c, "seed"));
        assert_int_equal(tg_module_train(m, true), TG_OK);
        assert_int_equal(tg_module_set_fused(m, fused), TG_OK);
        tg_tensor *ids = tu_tensor_from_json(tp, jget(c, "ids"), TG_DTYPE_COUNT);
        tg_tensor *targets = tu_tensor_from_json(tp, jget(c, "targets"), TG_DTYPE_COUNT);
        tg_tensor *logits = tg_module_forward(tp, m, ids);
        tu_assert_ok(logits);
        snprintf(what, sizeof what, "dropout_forward (%s): logits", path);
        tu_assert_close(logits, tu_tensor_from_json(tp, jget(c, "logits"), TG_DTYPE_COUNT), 1e-4, 1e-6, what);
        int64_t B = logits->shape[0], T = logits->shape[1], V = logits->shape[2];
        int64_t flat[2] = {B * T, V}, tflat[1] = {B * T};
        tg_tensor *loss = tg_cross_entropy(tp, tg_reshape(tp, logits, 2, flat), tg_view(tp, targets, 1, tflat),
                                           TG_REDUCE_MEAN);
        tu_assert_ok(loss);
        if (fabs(tg_item(loss) - jnum(c, "loss")) > 1e-6 + 1e-4 * fabs(jnum(c, "loss")))
            fail_msg("dropout_forward (%s): loss %.9g, PyTorch %.9g", path, tg_item(loss), jnum(c, "loss"));
        assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
        const json_t *grads = jget(c, "grads"), *g;
        const char *name;
        size_t checked = 0;
        json_object_foreach((json_t *)grads, name, g) {
            tg_tensor *p = tg_module_get_parameter(m, name);
            tu_assert_ok(p);
            tu_assert_ok(p->grad);
            snprintf(what, sizeof what, "dropout_forward (%s): grad %s", path, name);
            tu_assert_close(p->grad, tu_tensor_from_json(tp, g, TG_DTYPE_COUNT), 1e-4, 1e-6, what);
            checked++;
        }
        assert_int_equal(checked, 3);
        /* the generator drew exactly what PyTorch's did */
        int64_t s3[1] = {3};
        tg_tensor *r = tg_rand(tp, TG_F32, 1, s3, NULL);
        const json_t *want = jget(c, "rand_after");
        for (int i = 0; i < 3; i++)
            if ((float)tg_item_at(r, i) != (float)json_real_value(json_array_get(want, (size_t)i)))
                fail_msg("dropout_forward (%s): rand_after[%d] %.9g, PyTorch %.9g", path, i, tg_item_at(r, i),
                         json_real_value(json_array_get(want, (size_t)i)));
        tg_tape_free(tp);
        tg_tape_free(mt);
    }
    json_decref(ref);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    g_ref = tu_load_ref("gpt.json");
    g_book = tu_load_ref("gpt_book.json");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_cases),
        cmocka_unit_test(test_generate),
        cmocka_unit_test(test_kv_cache_modules),
        cmocka_unit_test(test_load_state_dict),
        cmocka_unit_test(test_load_hf),
        cmocka_unit_test(test_gradcheck_modules),
        cmocka_unit_test(test_node_names),
        cmocka_unit_test(test_ops_against_pytorch),
        cmocka_unit_test(test_ops_gradcheck),
        cmocka_unit_test(test_ops_errors),
        cmocka_unit_test(test_bad_configs),
        cmocka_unit_test(test_book_124m),
        cmocka_unit_test(test_dropout_forward),
        cmocka_unit_test(test_fused_block_exact),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_ref);
    json_decref(g_book);
    return rc;
}
