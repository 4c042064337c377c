/* Fine-tuning's model pieces (README.md, "Fine-tuning"): freezing a tree,
 * trainable counts, optimizers over a partly frozen model, the new head and
 * tg_gpt_out_features, tg_gpt_forward_last, load_state_dict with strict
 * false, and LoRA (src/nn/lora.c): its state_dict keys, its A drawn as
 * PyTorch's kaiming_uniform_(a=sqrt(5)), an unchanged output while B is
 * zero, gradcheck, frozen bases that get no gradient, generation with the
 * KV cache through LoRA-wrapped Linears. The whole runs against PyTorch's
 * printed tables in tests/check_finetune_output.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static const tg_gpt_config small = {50257, 32, 16, 2, 2, 0.0, false};

static tg_module *small_gpt(tg_tape *tp, uint64_t seed)
{
    tg_manual_seed(seed);
    tg_module *g = tg_gpt_new(tp, &small);
    tu_assert_ok(g);
    return g;
}

static tg_tensor *ids_of(tg_tape *tp, int64_t b, int64_t t, uint64_t seed)
{
    int64_t shape[2] = {b, t};
    tg_tensor *x = tg_empty(tp, TG_I64, 2, shape);
    tg_generator *g = tg_generator_new(seed);
    int64_t *p = tg_data_ptr(x);
    for (int64_t i = 0; i < b * t; i++) p[i] = (int64_t)(tg_generator_random64(g) % 50257);
    tg_generator_free(g);
    return x;
}

static bool has_key(const tg_named_list *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0) return true;
    return false;
}

/* The book's chapter 6: a new head, everything frozen, the last block,
 * final norm and head trainable again; AdamW updates exactly those. */
static void test_freeze_and_head(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new(), *step = tg_tape_new();
    tg_module *g = small_gpt(tp, 123);
    assert_int_equal(tg_gpt_out_features(g), 50257);
    int64_t total = tg_module_num_parameters(g);
    assert_int_equal(tg_module_num_trainable_parameters(g), total);
    tg_manual_seed(123);
    assert_int_equal(tg_module_add_module(g, "out_head", tg_linear_new(tp, 16, 2, true)), TG_OK);
    assert_int_equal(tg_gpt_out_features(g), 2);
    tg_gpt_config c;
    assert_int_equal(tg_gpt_get_config(g, &c), TG_OK);
    assert_int_equal(c.vocab_size, 50257); /* the body's vocabulary */
    assert_int_equal(tg_module_requires_grad_(g, false), TG_OK);
    assert_int_equal(tg_module_num_trainable_parameters(g), 0);
    /* nothing to train: PyTorch's error, not a silent no-op */
    tu_assert_null_error(tg_adamw_new(tp, g, tg_adamw_defaults()), "optimizer got an empty parameter list");
    const char *parts[3] = {"trf_blocks.1", "final_norm", "out_head"};
    int64_t want = 0;
    for (int k = 0; k < 3; k++) {
        tg_module *m = tg_module_get_submodule(g, parts[k]);
        assert_int_equal(tg_module_requires_grad_(m, true), TG_OK);
        want += tg_module_num_parameters(m);
    }
    assert_int_equal(tg_module_num_trainable_parameters(g), want);
    assert_int_equal(want, 3232 + 32 + 34); /* one block of emb 16, the norm, Linear(16, 2) */
    tu_assert_status_error(tg_module_requires_grad_(NULL, true), "NULL module");
    assert_true(tg_module_num_trainable_parameters(NULL) < 0);

    /* one step: frozen weights keep their bits, trainable ones move */
    tg_tensor *emb = tg_module_get_parameter(g, "tok_emb.weight");
    tg_tensor *w0 = tg_module_get_parameter(g, "trf_blocks.0.att.W_query.weight");
    tg_tensor *w1 = tg_module_get_parameter(g, "trf_blocks.1.att.W_query.weight");
    tg_tensor *e_before = tg_clone(tp, emb), *w0_before = tg_clone(tp, w0), *w1_before = tg_clone(tp, w1);
    tg_optimizer *opt = tg_adamw_new(tp, g, (tg_adam_options){1e-2, {0.9, 0.999}, 1e-8, 0.1, false});
    tu_assert_ok(opt);
    int64_t nb = 4;
    tg_tensor *x = ids_of(step, 4, 8, 1), *y = tg_zeros(step, TG_I64, 1, &nb);
    tg_tensor *loss = tg_cross_entropy(step, tg_gpt_forward_last(step, g, x), y, TG_REDUCE_MEAN);
    tu_assert_ok(loss);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    assert_null(w0->grad);  /* frozen: no gradient at all */
    assert_non_null(w1->grad);
    assert_int_equal(tg_optimizer_step(opt), TG_OK);
    assert_memory_equal(tg_data_ptr(emb), tg_data_ptr(e_before), sizeof(float) * (size_t)tg_numel(emb));
    assert_memory_equal(tg_data_ptr(w0), tg_data_ptr(w0_before), sizeof(float) * (size_t)tg_numel(w0));
    assert_memory_not_equal(tg_data_ptr(w1), tg_data_ptr(w1_before), sizeof(float) * (size_t)tg_numel(w1));
    tg_tape_free(step);
    tg_tape_free(tp);
}

/* model(x)[:, -1, :]: EXACT gives the full forward's bits; FAST the same
 * values within its tolerance. */
static void test_forward_last(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_module *g = small_gpt(tp, 7);
    tg_module_train(g, false);
    tg_tensor *x = ids_of(tp, 3, 9, 2);
    tg_tensor *full = tg_module_forward(tp, g, x);
    tg_tensor *want = tg_contiguous(tp, tg_select(tp, full, 1, 8));
    tg_tensor *got = tg_contiguous(tp, tg_gpt_forward_last(tp, g, x));
    tu_assert_ok(got);
    assert_int_equal(got->ndim, 2);
    assert_int_equal(got->shape[1], 50257);
    assert_memory_equal(tg_data_ptr(got), tg_data_ptr(want), sizeof(float) * (size_t)tg_numel(want));
    tg_module_set_numerics(g, TG_NUMERICS_FAST);
    tu_assert_close(tg_gpt_forward_last(tp, g, x), want, 1e-4, 1e-4, "forward_last under FAST");
    tu_assert_null_error(tg_gpt_forward_last(tp, tg_linear_new(tp, 2, 2, false), x), "not a GPTModel");
    tg_clear_error();
    tu_assert_null_error(tg_gpt_forward_last(tp, g, NULL), "gpt_forward_last", "NULL");
    tg_tape_free(tp);
}

/* One classifier step's loss and the gradients of the trainable parameters
 * (clones in out, named_parameters order): the book's chapter 6 (new head,
 * last block and final norm trainable) or LoRA rank 2 everywhere, under nm,
 * in training mode with the given dropout. */
static tg_tensor *classifier_grads(tg_tape *out, tg_numerics nm, bool lora, double drop, tg_tensor **grads, int *n)
{
    tg_tape *tp = tg_tape_new(), *step = tg_tape_new();
    tg_gpt_config c = small;
    c.drop_rate = drop;
    tg_manual_seed(5);
    tg_module *g = tg_gpt_new(tp, &c);
    tu_assert_ok(g);
    tg_manual_seed(6);
    assert_int_equal(tg_module_add_module(g, "out_head", tg_linear_new(tp, 16, 2, true)), TG_OK);
    assert_int_equal(tg_module_requires_grad_(g, false), TG_OK);
    if (lora) {
        assert_int_equal(tg_lora_replace_linear(tp, g, 2, 4.0), TG_OK);
        /* B is zero at first: make the adapters' product count */
        tg_named_list ps;
        assert_int_equal(tg_module_named_parameters(tp, g, &ps), TG_OK);
        for (int i = 0; i < ps.n; i++)
            if (strstr(ps.names[i], "lora.B")) assert_int_equal(tg_init_uniform_(ps.tensors[i], -0.5, 0.5, NULL), TG_OK);
    } else {
        const char *parts[3] = {"trf_blocks.1", "final_norm", "out_head"};
        for (int k = 0; k < 3; k++) assert_int_equal(tg_module_requires_grad_(tg_module_get_submodule(g, parts[k]), true), TG_OK);
    }
    assert_int_equal(tg_module_set_numerics(g, nm), TG_OK);
    tg_module_train(g, true);
    tg_manual_seed(7);
    int64_t nb = 3, ys[3] = {0, 1, 1};
    tg_tensor *x = ids_of(step, 3, 11, 4), *y = tg_from_data(step, TG_I64, 1, &nb, ys);
    tg_tensor *loss = tg_cross_entropy(step, tg_gpt_forward_last(step, g, x), y, TG_REDUCE_MEAN);
    tu_assert_ok(loss);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    tg_named_list ps;
    assert_int_equal(tg_module_named_parameters(tp, g, &ps), TG_OK);
    *n = 0;
    for (int i = 0; i < ps.n; i++)
        if (ps.tensors[i]->requires_grad) {
            tu_assert_ok(ps.tensors[i]->grad);
            grads[(*n)++] = tg_clone(out, ps.tensors[i]->grad);
        }
    tg_tensor *l = tg_clone(out, loss);
    tg_tape_free(step);
    tg_tape_free(tp);
    return l;
}

/* Under FAST and BF16, model(x)[:, -1, :] runs the last block at its last
 * position only (its keys and values over all); the loss and every trainable
 * gradient are the full forward's under EXACT within the policy's tolerance:
 * chapter 6's trainable last block, LoRA, and with dropout (drawn as the full
 * forward draws it, so the model runs whole). */
static void test_forward_last_gradients(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    static const struct {
        tg_numerics nm;
        bool lora;
        double drop, tol;
    } cases[] = {{TG_NUMERICS_FAST, false, 0.0, 1e-4}, {TG_NUMERICS_FAST, true, 0.0, 1e-4},
                 {TG_NUMERICS_FAST, false, 0.1, 1e-4}, {TG_NUMERICS_BF16, false, 0.0, 3e-2},
                 {TG_NUMERICS_BF16, true, 0.0, 3e-2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tg_tensor *want[64], *got[64];
        int nw = 0, ng = 0;
        tg_tensor *lw = classifier_grads(tp, TG_NUMERICS_EXACT, cases[k].lora, cases[k].drop, want, &nw);
        tg_tensor *lg = classifier_grads(tp, cases[k].nm, cases[k].lora, cases[k].drop, got, &ng);
        assert_int_equal(ng, nw);
        assert_true(nw > 4);
        tu_assert_close(lg, lw, cases[k].tol, cases[k].tol, "the loss");
        for (int i = 0; i < nw; i++) tu_assert_close(got[i], want[i], cases[k].tol, cases[k].tol, "a gradient");
    }
    tg_tape_free(tp);
}

/* load_state_dict(strict=False): a pretrained body into a model with a new
 * head; the incompatible keys as PyTorch lists them. */
static void test_load_non_strict(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_module *src = small_gpt(tp, 1), *dst = small_gpt(tp, 2);
    tg_manual_seed(3);
    tg_module_add_module(dst, "out_head", tg_linear_new(tp, 16, 2, true));
    tg_named_list sd;
    assert_int_equal(tg_module_state_dict(tp, src, &sd), TG_OK);
    /* strict: the head's shape differs, the message says so (in memory: TG_EINVAL) */
    int st = tg_module_load_state_dict(dst, &sd);
    assert_int_equal(st, TG_EINVAL);
    tu_assert_status_error(st, "load_state_dict", "out_head.weight", "size mismatch");
    /* without the head's keys: strict names the first missing key */
    tg_named_list body = sd;
    body.n = 0;
    const char *names[64];
    tg_tensor *ts[64];
    for (int i = 0; i < sd.n; i++)
        if (strncmp(sd.names[i], "out_head", 8) != 0) names[body.n] = sd.names[i], ts[body.n++] = sd.tensors[i];
    body.names = names, body.tensors = ts;
    tu_assert_status_error(tg_module_load_state_dict(dst, &body), "missing key 'out_head.weight'");
    tg_tensor *head = tg_module_get_parameter(dst, "out_head.weight"), *head0 = tg_clone(tp, head);
    tg_incompatible_keys k;
    assert_int_equal(tg_module_load_state_dict_ex(dst, &body, false, tp, &k), TG_OK);
    assert_int_equal(k.n_missing, 2);
    assert_string_equal(k.missing[0], "out_head.weight");
    assert_string_equal(k.missing[1], "out_head.bias");
    assert_int_equal(k.n_unexpected, 0);
    assert_memory_equal(tg_data_ptr(head), tg_data_ptr(head0), sizeof(float) * 32); /* kept */
    tg_tensor *a = tg_module_get_parameter(src, "trf_blocks.1.ff.layers.0.weight");
    tg_tensor *b = tg_module_get_parameter(dst, "trf_blocks.1.ff.layers.0.weight");
    assert_memory_equal(tg_data_ptr(a), tg_data_ptr(b), sizeof(float) * (size_t)tg_numel(a));
    /* an extra key: unexpected; a size mismatch stays an error even non-strict */
    names[body.n] = "extra.weight", ts[body.n++] = head0;
    assert_int_equal(tg_module_load_state_dict_ex(dst, &body, false, tp, &k), TG_OK);
    assert_int_equal(k.n_unexpected, 1);
    assert_string_equal(k.unexpected[0], "extra.weight");
    tu_assert_status_error(tg_module_load_state_dict_ex(dst, &sd, false, tp, &k), "size mismatch for 'out_head.weight'");
    tu_assert_status_error(tg_module_load_state_dict_ex(dst, &sd, false, NULL, &k), "without a tape");
    /* a file too: tg_module_load_ex */
    char path[] = "/tmp/tg_finetune_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tg_module_save(src, path), TG_OK);
    st = tg_module_load(dst, path);
    assert_int_equal(st, TG_EFORMAT);
    assert_int_equal(tg_module_load_ex(dst, path, false, tp, &k), TG_EFORMAT); /* the head's size */
    assert_int_equal(tg_module_load_ex(src, path, false, tp, &k), TG_OK);
    assert_int_equal(k.n_missing + k.n_unexpected, 0);
    remove(path);
    tg_tape_free(tp);
}

/* LoRA on the whole GPT: keys, draws, output, trainable count, gradients. */
static void test_lora_gpt(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new(), *step = tg_tape_new();
    tg_module *g = small_gpt(tp, 123);
    tg_module_train(g, false);
    tg_tensor *x = ids_of(tp, 2, 6, 3);
    tg_tensor *before = tg_module_forward(tp, g, x);
    assert_int_equal(tg_module_requires_grad_(g, false), TG_OK);
    /* the draws: A of the first wrapped Linear (W_query of block 0) is
     * PyTorch's kaiming_uniform_(a=sqrt(5)) on (16, 4): uniform_(-1/2, 1/2)
     * right after the replacement starts */
    tg_generator *copy = tg_generator_new(0);
    uint8_t gs[TG_GENERATOR_STATE_BYTES];
    assert_int_equal(tg_generator_get_state(tg_default_generator(), gs, sizeof gs), TG_OK);
    assert_int_equal(tg_generator_set_state(copy, gs, sizeof gs), TG_OK);
    assert_int_equal(tg_lora_replace_linear(tp, g, 4, 8.0), TG_OK);
    int64_t as[2] = {16, 4};
    tg_tensor *want = tg_empty(tp, TG_F32, 2, as);
    assert_int_equal(tg_uniform_(want, -0.5, 0.5, copy), TG_OK);
    tg_generator_free(copy);
    tg_tensor *a0 = tg_module_get_parameter(g, "trf_blocks.0.att.W_query.lora.A");
    tu_assert_ok(a0);
    assert_memory_equal(tg_data_ptr(a0), tg_data_ptr(want), sizeof(float) * 64);
    tg_named_list sd;
    assert_int_equal(tg_module_state_dict(tp, g, &sd), TG_OK);
    const char *keys[] = {"trf_blocks.0.att.W_query.linear.weight", "trf_blocks.0.att.W_query.lora.A",
                          "trf_blocks.0.att.W_query.lora.B", "trf_blocks.1.ff.layers.2.linear.bias",
                          "trf_blocks.1.att.out_proj.lora.B", "out_head.linear.weight", "out_head.lora.A"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) assert_true(has_key(&sd, keys[i]));
    assert_false(has_key(&sd, "trf_blocks.0.att.W_query.weight"));
    /* 6 Linears per block (W_query, W_key, W_value, out_proj, two of ff) and
     * out_head: (in + out) * rank trainable each */
    int64_t per_block = (16 + 16) * 4 * 4 + (16 + 64) * 4 * 2, head = (16 + 50257) * 4;
    assert_int_equal(tg_module_num_trainable_parameters(g), 2 * per_block + head);
    assert_int_equal(tg_gpt_out_features(g), 50257);
    char repr[8192];
    assert_true(tg_module_repr(tg_module_get_submodule(g, "trf_blocks.0.att"), repr, sizeof repr) > 0);
    assert_non_null(strstr(repr, "(W_query): LinearWithLoRA(\n    (linear): Linear(in_features=16, out_features=16, "
                                 "bias=False)\n    (lora): LoRALayer()\n  )"));
    /* B is zero: the same output as before */
    tu_assert_close(tg_module_forward(tp, g, x), before, 0, 0, "LoRA output with B = 0");
    /* a backward reaches A and B only (B's gradient is what moves first) */
    tg_module_train(g, true);
    tg_tensor *logits = tg_module_forward(step, g, x);
    int64_t flat[2] = {-1, 50257}, n = -1;
    tg_tensor *loss = tg_cross_entropy(step, tg_view(step, logits, 2, flat), tg_view(step, ids_of(step, 2, 6, 4), 1, &n),
                                       TG_REDUCE_MEAN);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    assert_null(tg_module_get_parameter(g, "trf_blocks.0.att.W_query.linear.weight")->grad);
    assert_null(tg_module_get_parameter(g, "tok_emb.weight")->grad);
    tg_tensor *gb = tg_module_get_parameter(g, "trf_blocks.0.att.W_query.lora.B")->grad;
    assert_non_null(gb);
    double s = 0;
    for (int64_t i = 0; i < tg_numel(gb); i++) s += fabs(((float *)tg_data_ptr(gb))[i]);
    assert_true(s > 0);
    /* generation through the wrapped Linears: the KV cache gives the ids
     * recomputing gives */
    tg_module_train(g, false);
    tg_named_list ps;
    tg_module_named_parameters(tp, g, &ps);
    for (int i = 0; i < ps.n; i++)
        if (strstr(ps.names[i], "lora.B")) tg_uniform_(ps.tensors[i], -0.05, 0.05, NULL);
    tg_numerics_weights_changed();
    int64_t prompt[3] = {464, 3290, 318}, out[2][23], nout[2];
    for (int k = 0; k < 2; k++) {
        tg_generate_options o = {.max_new_tokens = 20, .eos_id = -1, .no_kv_cache = k == 1};
        assert_int_equal(tg_gpt_generate(g, prompt, 3, &o, out[k], &nout[k]), TG_OK);
    }
    assert_int_equal(nout[0], 23);
    assert_memory_equal(out[0], out[1], sizeof out[0]);
    /* the adapters off (PEFT's disable_adapter): the frozen base's output to
     * the bit, with B no longer zero; on again: the LoRA model's */
    tg_tensor *with = tg_module_forward(tp, g, x);
    assert_int_equal(tg_lora_set_enabled(g, false), 2 * 6 + 1);
    tu_assert_close(tg_module_forward(tp, g, x), before, 0, 0, "LoRA model with its adapters off");
    assert_int_equal(tg_lora_set_enabled(g, true), 13);
    tu_assert_close(tg_module_forward(tp, g, x), with, 0, 0, "LoRA model with its adapters on again");
    assert_int_equal(tg_lora_set_enabled(tg_module_get_submodule(g, "trf_blocks.0.norm1"), false), 0);
    tu_assert_status_error((int)tg_lora_set_enabled(NULL, false), "lora_set_enabled: NULL model");
    tg_tape_free(step);
    tg_tape_free(tp);
}

typedef struct {
    tg_module *m;
} lora_ctx;

/* LinearWithLoRA and LoRALayer in float64 against finite differences. */
static void test_lora_gradcheck(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(5);
    tg_module *lin = tg_linear_new(tp, 5, 3, true);
    tg_module *m = tg_linear_with_lora_new(tp, lin, 2, 6.0);
    tu_assert_ok(m);
    assert_int_equal(tg_module_to_dtype(tp, m, TG_F64), TG_OK);
    tg_uniform_(tg_module_get_parameter(m, "lora.B"), -1, 1, NULL);
    int64_t xs[3] = {2, 4, 5};
    tg_tensor *x = tg_rand(tp, TG_F64, 3, xs, NULL);
    tg_requires_grad_(x, true);
    tg_gradcheck_result r;
    assert_int_equal(tg_gradcheck_module_call(m, 1, &x, NULL, &r), TG_OK);
    assert_true(r.passed);
    /* a wrong scale would be caught: the output is linear(x) + 3 * x A B */
    tg_tensor *y = tg_module_forward(tp, m, x);
    tg_tensor *base = tg_module_forward(tp, lin, x);
    tg_tensor *xa = tg_matmul(tp, tg_matmul(tp, x, tg_module_get_parameter(m, "lora.A")),
                              tg_module_get_parameter(m, "lora.B"));
    tu_assert_close(y, tg_add(tp, base, tg_mul_scalar(tp, xa, 3.0)), 1e-12, 1e-12, "linear(x) + alpha/rank x A B");
    /* bad arguments */
    tu_assert_null_error(tg_lora_layer_new(tp, 5, 3, 0, 1.0), "rank must be positive");
    tu_assert_null_error(tg_lora_layer_new(tp, 5, 3, 2, NAN), "alpha must be finite");
    tu_assert_null_error(tg_linear_with_lora_new(tp, NULL, 2, 1.0), "NULL linear");
    tu_assert_null_error(tg_linear_with_lora_new(tp, tg_gelu_new(tp), 2, 1.0), "no 2-D weight");
    tu_assert_status_error(tg_lora_replace_linear(tp, NULL, 2, 1.0), "NULL module");
    tu_assert_status_error(tg_lora_replace_linear(tp, m, -1, 1.0), "rank must be positive");
    tg_clear_error();
    tu_assert_null_error(tg_module_forward(tp, m, NULL), "NULL");
    tg_tape_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_freeze_and_head),   cmocka_unit_test(test_forward_last),
        cmocka_unit_test(test_forward_last_gradients),
        cmocka_unit_test(test_load_non_strict),   cmocka_unit_test(test_lora_gpt),
        cmocka_unit_test(test_lora_gradcheck),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
