/* Hugging Face folders written by `tapegrad export --hf` read by the book's
 * own loaders: tests/ref/export.json, written by tools/reference/export.py.
 * For a tiny GPT-2 (with and without a query/key/value bias), Qwen3, Llama
 * 3.2 and Gemma 3, that script built the model tapegrad's MODEL options
 * build (preset, sizes, seed) with its norms drawn again ("varied"), had
 * `tapegrad export --hf` write it as a float32 folder, built the book's
 * model from the folder's config.json and loaded the folder with the
 * book's loader (chapter 5's load_weights_into_gpt, load_weights_into_qwen,
 * load_weights_into_llama, the Gemma 3 notebook's load_weights_into_gemma)
 * under PyTorch 1.13, and recorded its logits for fixed ids.
 *
 * Here the same model is built as the command line builds it
 * (tg_decoder_config_preset, the overrides, tg_manual_seed(seed),
 * tg_decoder_new), the varied values set, and its eval logits must be the
 * book's within the file's tolerance (1e-5): what tapegrad writes, the
 * book's loaders read as tapegrad's own model. Then the model is written
 * with tg_export_hf and read back (tg_decoder_config_from_hf,
 * tg_decoder_new, tg_decoder_load_hf): the same logits, bit for bit. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static json_t *g_ref;       /* export.json */
static char g_dir[1024];    /* a temporary folder for the test's files */
static char g_tok[1100];    /* the reference's tokenizer.json, written into it */

static const json_t *jget(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!v) fail_msg("reference: missing key \"%s\"", key);
    return v;
}

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(jget(o, key));
    if (!s) fail_msg("reference: \"%s\" is not a string", key);
    return s;
}

/* Every file of dir, then dir (the folders here hold no subfolders). */
static void remove_folder(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1600];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) fail_msg("cannot remove %s", path);
    }
    closedir(d);
    if (rmdir(dir) != 0) fail_msg("cannot remove %s", dir);
}

static int setup(void **state)
{
    (void)state;
    g_ref = tu_load_ref("export.json");
    char tmpl[] = "/tmp/tg_export_ref_XXXXXX";
    const char *d = mkdtemp(tmpl);
    if (!d) return -1;
    snprintf(g_dir, sizeof g_dir, "%s", d);
    snprintf(g_tok, sizeof g_tok, "%s/tokenizer.json", g_dir);
    const json_t *tok = json_object_get(g_ref, "tokenizer");
    return tok && json_dump_file(tok, g_tok, JSON_COMPACT) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_tok);
    rmdir(g_dir);
    json_decref(g_ref);
    return 0;
}

/* ---- the model the command line builds ----------------------------------------------------- */

/* The case's preset with its overrides, as tools/tapegrad/model_args.c sets
 * the MODEL options' fields (--sliding-window without --layer-types on a
 * preset without sliding layers makes every layer slide). */
static tg_decoder_config case_config(const json_t *c)
{
    tg_decoder_config cfg;
    const char *preset = jstr(c, "preset");
    if (tg_decoder_config_preset(preset, &cfg) != TG_OK) fail_msg("%s: %s", preset, tg_last_error());
    const json_t *ov = jget(c, "overrides"), *v;
    const char *key;
    struct {
        const char *key;
        int64_t *field;
    } counts[] = {{"vocab_size", &cfg.vocab_size}, {"context_length", &cfg.context_length},
                  {"emb_dim", &cfg.emb_dim},       {"n_heads", &cfg.n_heads},
                  {"n_layers", &cfg.n_layers},     {"hidden_dim", &cfg.hidden_dim},
                  {"head_dim", &cfg.head_dim},     {"n_kv_groups", &cfg.n_kv_groups},
                  {"sliding_window", &cfg.sliding_window}};
    json_object_foreach((json_t *)ov, key, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
            if (strcmp(key, counts[i].key) == 0) {
                if (!json_is_integer(v)) fail_msg("reference: overrides.%s is not an integer", key);
                *counts[i].field = (int64_t)json_integer_value(v);
                known = true;
            }
        if (known || strcmp(key, "layer_types") == 0) continue;
        if (strcmp(key, "qkv_bias") == 0) cfg.qkv_bias = json_is_true(v);
        else if (strcmp(key, "query_pre_attn_scalar") == 0) cfg.query_pre_attn_scalar = json_number_value(v);
        else fail_msg("reference: overrides.%s is not a MODEL option's field", key);
    }
    const json_t *types = json_object_get(ov, "layer_types");
    if (types) {
        size_t n = json_array_size(types);
        if ((int64_t)n != cfg.n_layers || n > TG_DECODER_MAX_LAYER_TYPES)
            fail_msg("reference: %zu layer types for %lld layers", n, (long long)cfg.n_layers);
        for (size_t i = 0; i < TG_DECODER_MAX_LAYER_TYPES; i++) cfg.layer_types[i] = TG_LAYER_FULL;
        for (size_t i = 0; i < n; i++) {
            const char *t = json_string_value(json_array_get(types, i));
            if (!t || (strcmp(t, "sliding") != 0 && strcmp(t, "full") != 0))
                fail_msg("reference: layer type %zu is not sliding or full", i);
            cfg.layer_types[i] = strcmp(t, "sliding") == 0 ? TG_LAYER_SLIDING : TG_LAYER_FULL;
        }
    } else if (json_object_get(ov, "sliding_window")) {
        bool any = false;
        for (int i = 0; i < TG_DECODER_MAX_LAYER_TYPES; i++) any |= cfg.layer_types[i] == TG_LAYER_SLIDING;
        if (!any) assert_int_equal(tg_decoder_config_layer_pattern(&cfg, 0), TG_OK);
    }
    if (tg_decoder_config_check(&cfg) != TG_OK) fail_msg("%s: %s", jstr(c, "name"), tg_last_error());
    return cfg;
}

/* tg_manual_seed(seed), tg_decoder_new, then the varied parameters' values. */
static tg_module *build_case(tg_tape *mt, const json_t *c)
{
    tg_decoder_config cfg = case_config(c);
    tg_manual_seed((uint64_t)json_integer_value(jget(c, "seed")));
    tg_module *m = tg_decoder_new(mt, &cfg);
    tu_assert_ok(m);
    tg_tape *tp = tg_tape_new();
    const json_t *varied = jget(c, "varied"), *v;
    const char *name;
    json_object_foreach((json_t *)varied, name, v) {
        tg_tensor *p = tg_module_get_parameter(m, name);
        if (!p) fail_msg("%s: the model has no parameter %s", jstr(c, "name"), name);
        tg_tensor *want = tu_tensor_from_json(tp, v, TG_F32);
        assert_int_equal(p->dtype, TG_F32);
        assert_int_equal(p->ndim, want->ndim);
        for (int d = 0; d < p->ndim; d++) assert_int_equal(p->shape[d], want->shape[d]);
        assert_true(tg_is_contiguous(p));
        memcpy(tg_data_ptr(p), tg_data_ptr(want), sizeof(float) * (size_t)tg_numel(p));
    }
    tg_tape_free(tp);
    return m;
}

/* The model's eval logits for the case's ids, in tp. */
static tg_tensor *logits_of(tg_tape *tp, tg_module *m, const json_t *c)
{
    tg_tensor *ids = tu_tensor_from_json(tp, jget(c, "ids"), TG_DTYPE_COUNT);
    assert_int_equal(ids->dtype, TG_I64);
    assert_int_equal(tg_module_train(m, false), TG_OK);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *y = tg_module_forward(tp, m, ids);
    tg_set_grad_enabled(prev);
    if (!y) fail_msg("%s: forward: %s", jstr(c, "name"), tg_last_error());
    y = tg_contiguous(tp, y);
    tu_assert_ok(y);
    assert_int_equal(y->dtype, TG_F32);
    return y;
}

/* ---- against the book's loaders ------------------------------------------------------------- */

static void test_book_loaders(void **state)
{
    (void)state;
    const double tol = json_number_value(jget(g_ref, "tolerance"));
    assert_true(tol > 0 && tol <= 1e-5);
    const json_t *cases = jget(g_ref, "cases"), *c;
    size_t i;
    assert_true(json_array_size(cases) >= 4);
    json_array_foreach(cases, i, c) {
        tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
        tg_module *m = build_case(mt, c);
        tg_tensor *got = logits_of(tp, m, c), *want = tu_tensor_from_json(tp, jget(c, "logits"), TG_F32);
        assert_int_equal(got->ndim, want->ndim);
        for (int d = 0; d < got->ndim; d++) assert_int_equal(got->shape[d], want->shape[d]);
        const float *g = tg_data_ptr(got), *w = tg_data_ptr(want);
        double worst = 0;
        for (int64_t k = 0; k < tg_numel(got); k++) worst = fmax(worst, fabs((double)g[k] - (double)w[k]));
        print_message("%-14s (%s) max |tapegrad - book's loader| = %.3g over %lld logits\n", jstr(c, "name"),
                      jstr(c, "family"), worst, (long long)tg_numel(got));
        tu_assert_close(got, want, 0.0, tol, jstr(c, "name"));
        tg_tape_free(tp);
        tg_tape_free(mt);
    }
}

/* ---- written and read back ------------------------------------------------------------------ */

static void test_round_trip(void **state)
{
    (void)state;
    const json_t *cases = jget(g_ref, "cases"), *c;
    size_t i;
    json_array_foreach(cases, i, c) {
        const char *name = jstr(c, "name");
        tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
        tg_module *m = build_case(mt, c);
        tg_tensor *want = logits_of(tp, m, c);

        char dir[1200];
        snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
        tg_export_options opt = {.type = TG_EXPORT_F32, .tokenizer = g_tok};
        if (tg_export_hf(m, dir, &opt) != TG_OK) fail_msg("%s: export_hf: %s", name, tg_last_error());

        tg_decoder_config a = case_config(c), b, ra, rb;
        if (tg_decoder_config_from_hf(dir, &b) != TG_OK) fail_msg("%s: config_from_hf: %s", name, tg_last_error());
        assert_int_equal(tg_decoder_config_resolve(&a, &ra), TG_OK);
        assert_int_equal(tg_decoder_config_resolve(&b, &rb), TG_OK);
        assert_int_equal(rb.family, ra.family);
        assert_int_equal(rb.vocab_size, ra.vocab_size);
        assert_int_equal(rb.context_length, ra.context_length);
        assert_int_equal(rb.emb_dim, ra.emb_dim);
        assert_int_equal(rb.n_heads, ra.n_heads);
        assert_int_equal(rb.n_layers, ra.n_layers);
        assert_int_equal(rb.hidden_dim, ra.hidden_dim);
        assert_int_equal(rb.head_dim, ra.head_dim);
        assert_int_equal(rb.n_kv_groups, ra.n_kv_groups);
        assert_int_equal(rb.norm, ra.norm);
        assert_int_equal(rb.mlp, ra.mlp);
        assert_int_equal(rb.positions, ra.positions);
        assert_int_equal(rb.qk_norm, ra.qk_norm);
        assert_int_equal(rb.sliding_window, ra.sliding_window);
        assert_memory_equal(rb.layer_types, ra.layer_types, sizeof ra.layer_types);
        assert_true(rb.rope_base == ra.rope_base && rb.rope_local_base == ra.rope_local_base);
        assert_true(rb.norm_eps == ra.norm_eps && rb.query_pre_attn_scalar == ra.query_pre_attn_scalar);
        assert_true(rb.rope_freq.factor == ra.rope_freq.factor);
        assert_false(rb.tie_head); /* built with its own head: lm_head.weight is written */

        tg_tape *mt2 = tg_tape_new();
        tg_manual_seed(0); /* every weight is the folder's */
        tg_module *back = tg_decoder_new(mt2, &b);
        tu_assert_ok(back);
        if (tg_decoder_load_hf(back, dir) != TG_OK) fail_msg("%s: load_hf: %s", name, tg_last_error());
        tg_tensor *got = logits_of(tp, back, c);
        assert_int_equal(tg_numel(got), tg_numel(want));
        const float *g = tg_data_ptr(got), *w = tg_data_ptr(want);
        for (int64_t k = 0; k < tg_numel(got); k++)
            if (memcmp(&g[k], &w[k], sizeof(float)) != 0)
                fail_msg("%s: logit %lld read back is %.9g, the model's %.9g", name, (long long)k, g[k], w[k]);
        remove_folder(dir);
        tg_tape_free(mt2);
        tg_tape_free(tp);
        tg_tape_free(mt);
    }
}

/* ---- a tied head --------------------------------------------------------------------------- */

/* Each case's model with its head tied to the embedding: config.json says
 * tie_word_embeddings, no lm_head.weight is written (GPT-2's included),
 * and the folder reads back to the same logits bit for bit. */
static void test_tied_round_trip(void **state)
{
    (void)state;
    const json_t *cases = jget(g_ref, "cases"), *c;
    size_t i;
    json_array_foreach(cases, i, c) {
        const char *name = jstr(c, "name");
        tg_tape *mt = tg_tape_new(), *tp = tg_tape_new(), *mt2 = tg_tape_new();
        tg_decoder_config cfg = case_config(c), b;
        cfg.tie_head = true;
        tg_manual_seed((uint64_t)json_integer_value(jget(c, "seed")));
        tg_module *m = tg_decoder_new(mt, &cfg);
        tu_assert_ok(m);
        tg_tensor *want = logits_of(tp, m, c);
        char dir[1200], file[1300];
        snprintf(dir, sizeof dir, "%s/%s-tied", g_dir, name);
        tg_export_options opt = {.tokenizer = g_tok};
        if (tg_export_hf(m, dir, &opt) != TG_OK) fail_msg("%s: export_hf: %s", name, tg_last_error());
        if (tg_decoder_config_from_hf(dir, &b) != TG_OK) fail_msg("%s: %s", name, tg_last_error());
        assert_true(b.tie_head);
        snprintf(file, sizeof file, "%s/model.safetensors", dir);
        tg_safetensors st;
        assert_int_equal(tg_safetensors_load(tp, file, &st), TG_OK);
        assert_null(tg_safetensors_get(&st, "lm_head.weight"));
        tg_module *back = tg_decoder_new(mt2, &b);
        tu_assert_ok(back);
        if (tg_decoder_load_hf(back, dir) != TG_OK) fail_msg("%s: load_hf: %s", name, tg_last_error());
        assert_ptr_equal(tg_module_get_parameter(back, "out_head.weight"), tg_module_get_parameter(back, "tok_emb.weight"));
        tg_tensor *got = logits_of(tp, back, c);
        assert_memory_equal(tg_data_ptr(got), tg_data_ptr(want), sizeof(float) * (size_t)tg_numel(want));
        remove_folder(dir);
        tg_tape_free(mt2);
        tg_tape_free(tp);
        tg_tape_free(mt);
    }
}

/* ---- a LoRA model merged ------------------------------------------------------------------ */

/* Each case's model with every Linear wrapped (rank 2, alpha 4; B given
 * values, as after training), then tg_lora_merge: the merged model's
 * logits are the LoRA model's within 1e-5 (float32), the wrappers are gone,
 * a tied head keeps the embedding as it was, and the merged model written
 * with tg_export_hf reads back to its own logits bit for bit. */
static void test_lora_merge(void **state)
{
    (void)state;
    const json_t *cases = jget(g_ref, "cases"), *c;
    size_t i;
    json_array_foreach(cases, i, c) {
        const char *name = jstr(c, "name");
        for (int tied = 0; tied < 2; tied++) {
            tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
            tg_decoder_config cfg = case_config(c);
            cfg.tie_head = tied;
            tg_manual_seed((uint64_t)json_integer_value(jget(c, "seed")));
            tg_module *m = tg_decoder_new(mt, &cfg);
            tu_assert_ok(m);
            tg_tensor *emb = tg_module_get_parameter(m, "tok_emb.weight");
            tg_tensor *emb_before = tg_contiguous(tp, emb);
            emb_before = tg_from_data(tp, TG_F32, emb->ndim, emb->shape, tg_data_ptr(emb_before));
            assert_int_equal(tg_lora_replace_linear(mt, m, 2, 4.0), TG_OK);
            tg_named_list sd;
            assert_int_equal(tg_module_state_dict(tp, m, &sd), TG_OK);
            int n_lora = 0;
            for (int k = 0; k < sd.n; k++) {
                size_t len = strlen(sd.names[k]);
                if (len < 7 || strcmp(sd.names[k] + len - 7, ".lora.B") != 0) continue;
                float *b = tg_data_ptr(sd.tensors[k]);
                for (int64_t e = 0; e < tg_numel(sd.tensors[k]); e++) b[e] = 0.01f * (float)((e * 7 + k) % 11 - 5);
                n_lora++;
            }
            assert_true(n_lora >= 5);
            tg_tensor *unmerged = logits_of(tp, m, c);
            assert_int_equal(tg_lora_merge(m), TG_OK);
            tg_named_list after;
            assert_int_equal(tg_module_state_dict(tp, m, &after), TG_OK);
            for (int k = 0; k < after.n; k++)
                if (strstr(after.names[k], ".lora.") || strstr(after.names[k], ".linear."))
                    fail_msg("%s: '%s' left after the merge", name, after.names[k]);
            tg_tensor *merged = logits_of(tp, m, c);
            const float *u = tg_data_ptr(unmerged), *g = tg_data_ptr(merged);
            /* within 1e-5, and 1e-6 of the logit past 10 (torch.allclose's
             * atol 1e-5, rtol 1e-6): both are float32 sums of the same
             * products in other orders */
            double worst = 0, moved = 0, biggest = 0;
            for (int64_t k = 0; k < tg_numel(merged); k++) {
                double d = fabs((double)u[k] - (double)g[k]);
                worst = fmax(worst, d);
                biggest = fmax(biggest, fabs((double)u[k]));
                if (!(d <= 1e-5 + 1e-6 * fabs((double)u[k])))
                    fail_msg("%s: merged logit %lld is %.9g, the LoRA model's %.9g", name, (long long)k, g[k], u[k]);
            }
            tg_tensor *plain = NULL;
            {
                tg_tape *pt = tg_tape_new();
                tg_manual_seed((uint64_t)json_integer_value(jget(c, "seed")));
                tg_module *base = tg_decoder_new(pt, &cfg);
                tg_tensor *y = logits_of(tp, base, c);
                plain = y;
                tg_tape_free(pt);
            }
            for (int64_t k = 0; k < tg_numel(merged); k++) moved = fmax(moved, fabs((double)g[k] - ((float *)tg_data_ptr(plain))[k]));
            print_message("%-14s %s: merged against LoRA max |diff| %.3g, logits up to %.3g (the adapters move them "
                          "by %.3g)\n",
                          name, tied ? "tied head" : "own head ", worst, biggest, moved);
            assert_true(moved > 1e-3); /* the adapters do change the model */
            /* a tied embedding keeps its values: the merged head has its own tensor */
            assert_memory_equal(tg_data_ptr(tg_contiguous(tp, tg_module_get_parameter(m, "tok_emb.weight"))),
                                tg_data_ptr(emb_before), sizeof(float) * (size_t)tg_numel(emb_before));
            if (tied)
                assert_ptr_not_equal(tg_module_get_parameter(m, "out_head.weight"),
                                     tg_module_get_parameter(m, "tok_emb.weight"));

            char dir[1200];
            snprintf(dir, sizeof dir, "%s/%s-merged", g_dir, name);
            tg_export_options opt = {.tokenizer = g_tok};
            if (tg_export_hf(m, dir, &opt) != TG_OK) fail_msg("%s: export_hf: %s", name, tg_last_error());
            tg_decoder_config b;
            if (tg_decoder_config_from_hf(dir, &b) != TG_OK) fail_msg("%s: %s", name, tg_last_error());
            assert_false(b.tie_head); /* the merged head is not the embedding */
            tg_tape *mt2 = tg_tape_new();
            tg_module *back = tg_decoder_new(mt2, &b);
            tu_assert_ok(back);
            if (tg_decoder_load_hf(back, dir) != TG_OK) fail_msg("%s: load_hf: %s", name, tg_last_error());
            tg_tensor *got = logits_of(tp, back, c);
            assert_memory_equal(tg_data_ptr(got), g, sizeof(float) * (size_t)tg_numel(merged));
            remove_folder(dir);
            tg_tape_free(mt2);
            tg_tape_free(tp);
            tg_tape_free(mt);
        }
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_book_loaders),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_tied_round_trip),
        cmocka_unit_test(test_lora_merge),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
