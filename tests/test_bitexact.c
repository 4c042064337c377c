/* Float32 results equal to PyTorch's bit for bit (tests/ref/bitexact.json,
 * written by tools/reference/bitexact.py): exp, log, tanh, softmax and
 * log_softmax forward and backward, cross-entropy with ignored rows, and a
 * training step of the book's GPT with dropout, composed and with the fused
 * LayerNorm and GELU. Zero tolerance: any difference in the order of an
 * addition fails. One thread, as the references were made (OpenBLAS's sums
 * depend on how many threads share a product).
 *
 * The references hold on machines like the one that made them: exp, log and
 * tanh need AVX2 and FMA (PyTorch's vector kernels; elsewhere both sides
 * use the C library, whose results vary), and the GPT step the same OpenBLAS
 * kernel family (the file's blas_core), which main() pins where the CPU can
 * run it (tu_reference_kernels). Elsewhere those cases are skipped, saying
 * why. */
#ifdef _OPENMP
#include <omp.h>
#endif
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static json_t *g_ref;

static void require_vector_math(void)
{
    if (!tu_cpu_avx2_fma()) {
        print_message("skipped: this CPU lacks AVX2 + FMA, where PyTorch's references used them\n");
        skip();
    }
}

static tg_tensor *ref_tensor(tg_tape *tp, const json_t *obj, const char *key)
{
    tg_tensor *t = tu_tensor_from_json(tp, json_object_get(obj, key), TG_DTYPE_COUNT);
    tu_assert_ok(t);
    return t;
}

static void test_unary(void **state)
{
    (void)state;
    require_vector_math();
    tg_tape *tp = tg_tape_new();
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g_ref, "unary"), i, c)
    {
        const char *op = json_string_value(json_object_get(c, "op"));
        tg_tensor *x = ref_tensor(tp, c, "x"), *want = ref_tensor(tp, c, "y");
        tg_tensor *y = strcmp(op, "exp") == 0 ? tg_exp(tp, x) : strcmp(op, "log") == 0 ? tg_log(tp, x) : tg_tanh(tp, x);
        tu_assert_ok(y);
        tu_assert_close(y, want, 0.0, 0.0, op);
    }
    tg_tape_free(tp);
}

static void test_softmax(void **state)
{
    (void)state;
    require_vector_math();
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g_ref, "softmax"), i, c)
    {
        for (int lg = 0; lg < 2; lg++) {
            tg_tape *tp = tg_tape_new();
            const char *key = lg ? "log_softmax" : "softmax";
            json_t *w = json_object_get(c, key);
            tg_tensor *x = ref_tensor(tp, c, "x"), *gy = ref_tensor(tp, c, "gy");
            tg_requires_grad_(x, true);
            tg_tensor *y = lg ? tg_log_softmax(tp, x, -1) : tg_softmax(tp, x, -1);
            tu_assert_ok(y);
            tu_assert_close(y, ref_tensor(tp, w, "y"), 0.0, 0.0, key);
            assert_int_equal(tg_backward(y, gy, false), TG_OK);
            char what[64];
            snprintf(what, sizeof what, "%s backward, case %zu", key, i);
            tu_assert_close(x->grad, ref_tensor(tp, w, "dx"), 0.0, 0.0, what);
            tg_tape_free(tp);
        }
    }
}

static void test_cross_entropy(void **state)
{
    (void)state;
    require_vector_math();
    tg_tape *tp = tg_tape_new();
    json_t *c = json_object_get(g_ref, "cross_entropy");
    tg_tensor *x = ref_tensor(tp, c, "x"), *t = ref_tensor(tp, c, "target");
    tg_requires_grad_(x, true);
    tg_tensor *loss = tg_cross_entropy(tp, x, t, TG_REDUCE_MEAN);
    tu_assert_ok(loss);
    assert_true((float)tg_item(loss) == (float)json_real_value(json_object_get(c, "loss")));
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    tu_assert_close(x->grad, ref_tensor(tp, c, "dx"), 0.0, 0.0, "cross_entropy backward");
    tg_tape_free(tp);
}

/* torch.manual_seed(123); model = GPTModel(cfg); model.train(); one forward
 * (dropout masks from the default generator) and backward. */
static void gpt_step(bool fused)
{
    require_vector_math();
    const char *want = json_string_value(json_object_get(g_ref, "blas_core")), *have = tu_blas_kernels();
    if (!want || !have || strcmp(want, have) != 0) {
        print_message("skipped: OpenBLAS runs %s kernels here, the references' GEMMs ran %s\n", have ? have : "(not OpenBLAS)",
                      want ? want : "(unknown)");
        skip();
    }
    json_t *c = json_object_get(g_ref, "gpt"), *jc = json_object_get(c, "config");
    tg_gpt_config cfg = {
        json_integer_value(json_object_get(jc, "vocab_size")), json_integer_value(json_object_get(jc, "context_length")),
        json_integer_value(json_object_get(jc, "emb_dim")),    json_integer_value(json_object_get(jc, "n_heads")),
        json_integer_value(json_object_get(jc, "n_layers")),   json_number_value(json_object_get(jc, "drop_rate")),
        json_is_true(json_object_get(jc, "qkv_bias")),
    };
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_manual_seed(123);
    tg_module *m = tg_gpt_new(mt, &cfg);
    tu_assert_ok(m);
    /* fused: LayerNorm, GELU and the attention (PyTorch's dropout stream:
     * the exact attention node), as tapegrad pretrain runs them */
    assert_int_equal(tg_module_set_fused(m, fused), TG_OK);
    assert_int_equal(tg_module_train(m, true), TG_OK);
    tg_tensor *x = ref_tensor(tp, c, "x"), *y = ref_tensor(tp, c, "y");
    tg_tensor *logits = tg_module_forward(tp, m, x);
    tu_assert_ok(logits);
    tu_assert_close(logits, ref_tensor(tp, c, "logits"), 0.0, 0.0, fused ? "logits (fused)" : "logits");
    int64_t flat[2] = {-1, cfg.vocab_size}, all = -1;
    tg_tensor *loss = tg_cross_entropy(tp, tg_view(tp, logits, 2, flat), tg_view(tp, y, 1, &all), TG_REDUCE_MEAN);
    tu_assert_ok(loss);
    assert_true((float)tg_item(loss) == (float)json_real_value(json_object_get(c, "loss")));
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    tg_named_list ps;
    assert_int_equal(tg_module_named_parameters(tp, m, &ps), TG_OK);
    json_t *grads = json_object_get(c, "grads");
    assert_int_equal(ps.n, (int)json_object_size(grads));
    for (int i = 0; i < ps.n; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s.grad%s", ps.names[i], fused ? " (fused)" : "");
        tu_assert_ok(ps.tensors[i]->grad);
        tu_assert_close(ps.tensors[i]->grad, ref_tensor(tp, grads, ps.names[i]), 0.0, 0.0, what);
    }
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_gpt_composed(void **state)
{
    (void)state;
    gpt_step(false);
}

static void test_gpt_fused(void **state)
{
    (void)state;
    gpt_step(true);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    g_ref = tu_load_ref("bitexact.json");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_gpt_composed),
        cmocka_unit_test(test_gpt_fused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_ref);
    return rc;
}
