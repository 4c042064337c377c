/* Activation recomputation (tg_module_call_recompute, tg_module_set_recompute,
 * tg_gpt_set_recompute): a small GPT-2 with dropout and a small Qwen3 train
 * two steps with and without recomputed blocks under each policy, and the
 * losses, every parameter's gradient and the dropout stream afterwards must
 * be the same bits; the step tape holds less after forward; calls without
 * recording are the plain ones; the errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { B = 2, T = 12, STEPS = 2 };

/* GPT-2's B * T = 24 rows over 16 features: the chunked head accumulates W's
 * gradient per chunk; Qwen3's 24 rows under 32 features: it keeps the
 * logits' gradient (src/autograd/op_nn.c) */
static const tg_decoder_config gpt2_cfg = {.vocab_size = 50, .context_length = 16, .emb_dim = 16, .n_heads = 4,
                                           .n_layers = 2, .drop_rate = 0.1, .family = TG_GPT_FAMILY_GPT2};
static const tg_decoder_config qwen3_cfg = {.vocab_size = 50, .context_length = 16, .emb_dim = 32, .n_heads = 4,
                                            .n_layers = 2, .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 48,
                                            .head_dim = 8, .n_kv_groups = 2, .qk_norm = true, .rope_base = 10000};

/* What one run gives: each step's loss, every parameter's gradient of each
 * step (named_parameters order, float32 bits) and the dropout generator's
 * state at the end. */
typedef struct {
    float loss[STEPS];
    float *grads;
    size_t ngrad;
    uint8_t gen_state[TG_GENERATOR_STATE_BYTES];
    size_t tape_after_forward;
} run_result;

/* recompute 0: none; 1: the blocks; 2: the blocks and, nested in them,
 * their attention and feed-forward. */
static tg_module *build(tg_tape *mt, const tg_decoder_config *cfg, tg_generator *g, bool fused, int recompute)
{
    tg_manual_seed(123);
    tg_module *m = tg_decoder_new(mt, cfg);
    tu_assert_ok(m);
    assert_int_equal(tg_module_set_generator(m, g), TG_OK);
    assert_int_equal(tg_module_set_fused(m, fused), TG_OK);
    assert_int_equal(tg_gpt_set_recompute(m, recompute > 0), TG_OK);
    for (int i = 0; recompute > 1 && i < cfg->n_layers; i++) {
        char name[64];
        snprintf(name, sizeof name, "trf_blocks.%d.att", i);
        assert_int_equal(tg_module_set_recompute(tg_module_get_submodule(m, name), true), TG_OK);
        snprintf(name, sizeof name, "trf_blocks.%d.ff", i);
        assert_int_equal(tg_module_set_recompute(tg_module_get_submodule(m, name), true), TG_OK);
    }
    return m;
}

static tg_tensor *ids_of(tg_tape *tp, int step, int64_t vocab, int shift)
{
    int64_t shape[2] = {B, T}, v[B * T];
    for (int i = 0; i < B * T; i++) v[i] = (int64_t)((i * 7 + step * 13 + shift) % vocab);
    return tg_from_data(tp, TG_I64, 2, shape, v);
}

/* Two SGD steps of next-token training on fixed ids under numerics nm. */
static void train(const tg_decoder_config *cfg, tg_numerics nm, bool fused, int recompute, run_result *r)
{
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(7);
    tg_module *m = build(mt, cfg, g, fused, recompute);
    assert_int_equal(tg_tape_set_numerics(tp, nm), TG_OK);
    tg_named_list ps;
    assert_int_equal(tg_module_named_parameters(mt, m, &ps), TG_OK);
    size_t per_step = 0;
    for (int i = 0; i < ps.n; i++) per_step += (size_t)tg_numel(ps.tensors[i]);
    r->ngrad = per_step * STEPS;
    r->grads = calloc(r->ngrad, sizeof *r->grads);
    assert_non_null(r->grads);
    float *dst = r->grads;
    for (int s = 0; s < STEPS; s++) {
        tg_tensor *ids = ids_of(tp, s, cfg->vocab_size, 0), *targets = ids_of(tp, s, cfg->vocab_size, 1);
        /* the book's loss; under FAST and BF16 (fused) the head in chunks,
         * and with recompute its logits computed again in backward */
        tg_tensor *loss = tg_gpt_lm_loss(tp, m, ids, targets, TG_IGNORE_INDEX);
        tu_assert_ok(loss);
        if (s == 0) r->tape_after_forward = tg_tape_used(tp);
        r->loss[s] = (float)tg_item(loss);
        assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
        bool prev = tg_set_grad_enabled(false);
        for (int i = 0; i < ps.n; i++) {
            tg_tensor *p = ps.tensors[i];
            assert_non_null(p->grad);
            assert_int_equal(tg_copy_to_f32(p->grad, dst), TG_OK);
            dst += tg_numel(p);
            assert_int_equal(tg_add_(p, p->grad, -0.5), TG_OK);
        }
        tg_set_grad_enabled(prev);
        assert_int_equal(tg_module_zero_grad(m), TG_OK);
        tg_tape_reset(tp);
    }
    assert_int_equal(tg_generator_get_state(g, r->gen_state, sizeof r->gen_state), TG_OK);
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* The first element where the two runs' gradients differ, or -1. */
static int64_t first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0) return (int64_t)i;
    return -1;
}

static void check_same_at(const tg_decoder_config *cfg, tg_numerics nm, bool fused, int recompute)
{
    run_result plain = {0}, re = {0};
    train(cfg, nm, fused, 0, &plain);
    train(cfg, nm, fused, recompute, &re);
    const char *what = cfg->family == TG_GPT_FAMILY_GPT2 ? "GPT-2" : "Qwen3";
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&plain.loss[s], &re.loss[s], sizeof(float)) != 0)
            fail_msg("%s %s%s step %d: loss %.9g with recompute, %.9g without", what, tg_numerics_name(nm),
                     fused ? " fused" : "", s + 1, re.loss[s], plain.loss[s]);
    assert_int_equal(plain.ngrad, re.ngrad);
    int64_t k = first_diff(plain.grads, re.grads, plain.ngrad);
    if (k >= 0)
        fail_msg("%s %s%s: gradient element %lld of %zu is %.9g with recompute, %.9g without", what,
                 tg_numerics_name(nm), fused ? " fused" : "", (long long)k, plain.ngrad, re.grads[k], plain.grads[k]);
    if (memcmp(plain.gen_state, re.gen_state, sizeof plain.gen_state) != 0)
        fail_msg("%s %s: the dropout generator is not where the plain run left it", what, tg_numerics_name(nm));
    /* the blocks' activations were not kept */
    assert_true(re.tape_after_forward < plain.tape_after_forward);
    free(plain.grads);
    free(re.grads);
}

static void check_same(const tg_decoder_config *cfg, tg_numerics nm, bool fused) { check_same_at(cfg, nm, fused, 1); }

static void test_gpt2_exact(void **state)
{
    (void)state;
    check_same(&gpt2_cfg, TG_NUMERICS_EXACT, false);
    check_same(&gpt2_cfg, TG_NUMERICS_EXACT, true);
}

static void test_gpt2_fast_bf16(void **state)
{
    (void)state;
    check_same(&gpt2_cfg, TG_NUMERICS_FAST, true);
    check_same(&gpt2_cfg, TG_NUMERICS_BF16, true);
}

static void test_qwen3(void **state)
{
    (void)state;
    check_same(&qwen3_cfg, TG_NUMERICS_EXACT, false);
    check_same(&qwen3_cfg, TG_NUMERICS_FAST, true);
    check_same(&qwen3_cfg, TG_NUMERICS_BF16, true);
}

/* Recomputed modules inside recomputed blocks: the attention and the
 * feed-forward replayed inside each block's replay, the same bits. */
static void test_nested(void **state)
{
    (void)state;
    check_same_at(&gpt2_cfg, TG_NUMERICS_EXACT, false, 2);
    check_same_at(&qwen3_cfg, TG_NUMERICS_BF16, true, 2);
}

/* backward twice through one graph (retain_graph): each pass replays the
 * block with the forward's masks, so the gradients are twice the plain
 * call's, to the bit. */
static void test_backward_twice(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_gpt_config c = {50, 16, 24, 4, 1, 0.1, false};
    tg_generator *g = tg_generator_new(9);
    tg_manual_seed(5);
    tg_module *blk = tg_transformer_block_new(mt, &c);
    tu_assert_ok(blk);
    assert_int_equal(tg_module_set_generator(blk, g), TG_OK);
    int64_t shape[3] = {B, T, 24};
    tg_tensor *x = tg_randn(mt, TG_F32, 3, shape, NULL);
    tg_tensor *w = tg_module_get_parameter(blk, "att.W_query.weight");
    tg_tensor *grads[2];
    for (int re = 0; re < 2; re++) {
        tg_generator_seed(g, 9);
        assert_int_equal(tg_module_set_recompute(blk, re), TG_OK);
        assert_int_equal(tg_module_zero_grad(blk), TG_OK);
        tg_tensor *loss = tg_sum(tp, tg_module_forward(tp, blk, x));
        tu_assert_ok(loss);
        assert_int_equal(tg_backward(loss, NULL, true), TG_OK);
        assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
        grads[re] = tg_clone(mt, w->grad);
        tg_tape_reset(tp);
    }
    tu_assert_close(grads[1], grads[0], 0, 0, "W_query's gradient after two backward passes");
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* One block called directly: the node's name, the step tape's bytes, and a
 * call without recording (no_grad, eval) is the plain call: same bits, same
 * bytes, no node. */
static void test_block_call(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_gpt_config c = {50, 16, 24, 4, 2, 0.1, false};
    tg_manual_seed(5);
    tg_module *blk = tg_transformer_block_new(mt, &c);
    tu_assert_ok(blk);
    int64_t shape[3] = {B, T, 24};
    tg_tensor *x = tg_randn(mt, TG_F32, 3, shape, NULL);
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);

    assert_false(tg_module_recompute(blk));
    tg_tensor *y = tg_module_forward(tp, blk, x);
    tu_assert_ok(y);
    size_t plain = tg_tape_used(tp);
    tg_tape_reset(tp);
    assert_int_equal(tg_module_set_recompute(blk, true), TG_OK);
    assert_true(tg_module_recompute(blk));
    y = tg_module_forward(tp, blk, x);
    tu_assert_ok(y);
    assert_string_equal(tg_grad_fn_name(y), "CheckpointFunctionBackward");
    assert_true(tg_tape_used(tp) < plain / 2);
    tg_tape_reset(tp);

    /* without recording: the plain call */
    assert_int_equal(tg_module_train(blk, false), TG_OK);
    bool prev = tg_set_grad_enabled(false);
    assert_int_equal(tg_module_set_recompute(blk, false), TG_OK);
    tg_tensor *a = tg_module_forward(tp, blk, x);
    size_t bytes = tg_tape_used(tp);
    assert_int_equal(tg_module_set_recompute(blk, true), TG_OK);
    tg_tensor *b = tg_module_forward(tp, blk, x);
    tu_assert_ok(b);
    assert_int_equal(tg_tape_used(tp) - bytes, bytes);
    assert_null(tg_grad_fn_name(b));
    tu_assert_close(b, a, 0, 0, "block without recording");
    tg_set_grad_enabled(prev);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* An input written in place between forward and backward is backward's
 * error, as any saved tensor's. */
static void test_input_written(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_manual_seed(3);
    tg_module *lin = tg_linear_new(mt, 4, 3, true);
    int64_t shape[2] = {2, 4};
    tg_tensor *x = tg_randn(tp, TG_F32, 2, shape, NULL);
    tg_tensor *y = tg_module_call_recompute(tp, lin, 1, &x);
    tu_assert_ok(y);
    assert_string_equal(tg_grad_fn_name(y), "CheckpointFunctionBackward");
    assert_int_equal(tg_fill_(x, 1.0), TG_OK);
    tu_assert_status_error(tg_backward(tg_sum(tp, y), NULL, false), "modified by an inplace operation");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_errors(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new();
    int64_t shape[1] = {4};
    tg_tensor *x = tg_zeros(mt, TG_F32, 1, shape);
    tu_assert_null_error(tg_module_call_recompute(mt, NULL, 1, &x), "module_call_recompute: NULL module");
    tg_module *lin = tg_linear_new(mt, 4, 3, false);
    tu_assert_null_error(tg_module_call_recompute(mt, lin, 1, NULL), "Linear: bad input list");
    tg_tensor *none[1] = {NULL};
    tg_clear_error();
    tu_assert_null_error(tg_module_call_recompute(mt, lin, 1, none), "NULL input");
    tu_assert_null_error(tg_module_call_recompute(NULL, lin, 1, &x), "NULL tape");
    tu_assert_status_error(tg_module_set_recompute(NULL, true), "set_recompute: NULL module");
    assert_false(tg_module_recompute(NULL));
    tu_assert_status_error(tg_module_set_recompute(tg_module_list_new(mt, 0, NULL), true), "ModuleList",
                           "no forward");
    tu_assert_status_error(tg_gpt_set_recompute(lin, true), "not a GPTModel");
    tg_tape_free(mt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_exact),  cmocka_unit_test(test_gpt2_fast_bf16), cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_nested),      cmocka_unit_test(test_backward_twice),
        cmocka_unit_test(test_block_call),  cmocka_unit_test(test_input_written),  cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
