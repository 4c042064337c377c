/* The ops of the book's DPO notebook, against PyTorch 1.13:
 * tests/ref/dpo_ops.json (tools/reference/dpo_ops.py).
 *
 *   - tg_logsigmoid: outputs and x's gradient for PyTorch's grad_output, to
 *     the bit (signed zeros included; any NaN for NaN) in float32 and
 *     float64, sizes 1 to 100, 0, -0, +-30, +-100, +-inf, nan, a transposed
 *     x; LogSigmoidBackward0; no node without grad;
 *   - tg_compute_logprobs: the notebook's compute_logprobs with a prompt and
 *     padding mask and without, its value and d/dlogits to the bit, the top
 *     node's name (DivBackward0, MeanBackward1), a reference model's call
 *     under no grad; labels[:, 0] never read;
 *   - tg_compute_dpo_loss: loss, both rewards (0-dim, outside the graph) and
 *     the four inputs' gradients to the bit, beta 0.1 and 0.5, margins where
 *     logsigmoid's gradient underflows to -0; MeanBackward0;
 *   - the notebook's compute_dpo_loss_batch from four models' logits: the
 *     loss, rewards and the policy logits' gradients;
 *   - gradcheck in float64 of all three;
 *   - every error: one line each.
 * On a CPU without AVX2 and FMA PyTorch and the library both take the C
 * library's exp and log1p instead of SLEEF's, so the comparisons there
 * allow float rounding (a few ulps) instead of asking for the bits.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})

static json_t *ref;

static int setup(void **state)
{
    (void)state;
    ref = tu_load_ref("dpo_ops.json");
    return ref ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(ref);
    return 0;
}

/* A leaf requiring grad, from the file. */
static tg_tensor *jleaf(tg_tape *tp, const json_t *o, const char *key)
{
    tg_tensor *t = tu_json_tensor(tp, o, key);
    assert_int_equal(tg_requires_grad_(t, true), TG_OK);
    return t;
}

/* got equals want: the same dtype, shape and bits (NaN matches any NaN;
 * -0 only -0), where the CPU runs PyTorch's SLEEF functions as the
 * references did; within float rounding elsewhere. */
static void assert_same(const tg_tensor *got, const tg_tensor *want, const char *what, int i)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s (case %d)", what, i);
    if (!got) fail_msg("%s: NULL (%s)", buf, tg_last_error());
    if (got->dtype != want->dtype)
        fail_msg("%s: dtype %s, want %s", buf, tg_dtype_name(got->dtype), tg_dtype_name(want->dtype));
    if (!tg_same_shape(got, want)) fail_msg("%s: shape differs", buf);
    if (!tu_cpu_avx2_fma()) {
        tu_assert_close(got, want, got->dtype == TG_F32 ? 1e-5 : 1e-13, 1e-30, buf);
        return;
    }
    tg_tape *tp = tg_tape_new();
    const tg_tensor *g = tg_contiguous(tp, (tg_tensor *)got);
    tu_assert_ok(g);
    const unsigned char *a = tg_data_ptr(g), *b = tg_data_ptr(want);
    size_t size = got->dtype == TG_F32 ? sizeof(float) : sizeof(double);
    for (int64_t k = 0; k < tg_numel(want); k++) {
        double ga = tg_item_at(g, k), wa = tg_item_at(want, k);
        if (isnan(ga) && isnan(wa)) continue;
        if (memcmp(a + (size_t)k * size, b + (size_t)k * size, size))
            fail_msg("%s: element %lld is %a, want %a", buf, (long long)k, ga, wa);
    }
    tg_tape_free(tp);
}

/* ---- logsigmoid ------------------------------------------------------------------------------ */

static void test_logsigmoid_ref(void **state)
{
    (void)state;
    const json_t *cases = tu_json_get(ref, "logsigmoid");
    size_t i;
    const json_t *c;
    int n32 = 0, nspecial = 0;
    json_array_foreach(cases, i, c) {
        tg_tape *tp = tg_tape_new();
        tg_tensor *base = jleaf(tp, c, "x");
        n32 += base->dtype == TG_F32;
        for (int64_t k = 0; k < tg_numel(base); k++) nspecial += !isfinite(tg_item_at(base, k));
        bool tr = json_is_true(tu_json_get(c, "transpose"));
        tg_tensor *x = tr ? tg_transpose(tp, base, 0, 1) : base;
        tg_tensor *y = tg_logsigmoid(tp, x);
        assert_same(y, tu_json_tensor(tp, c, "output"), "logsigmoid", (int)i);
        assert_string_equal(tg_grad_fn_name(y), json_string_value(tu_json_get(c, "grad_fn")));
        assert_string_equal(tg_grad_fn_name(y), "LogSigmoidBackward0");
        assert_int_equal(tg_backward(y, tu_json_tensor(tp, c, "grad_output"), false), TG_OK);
        assert_same(base->grad, tu_json_tensor(tp, c, "grad_x"), "logsigmoid grad", (int)i);
        /* without grad: the same values and no node */
        tg_tensor *plain = tu_json_tensor(tp, c, "x");
        tg_tensor *yp = tg_logsigmoid(tp, tr ? tg_transpose(tp, plain, 0, 1) : plain);
        assert_same(yp, tu_json_tensor(tp, c, "output"), "logsigmoid without grad", (int)i);
        assert_null(tg_grad_fn_name(yp));
        assert_false(yp->requires_grad);
        tg_tape_free(tp);
    }
    assert_true(n32 > 0 && n32 < (int)json_array_size(cases));
    assert_true(nspecial >= 6); /* inf, -inf and nan in both dtypes */
}

/* ---- compute_logprobs ------------------------------------------------------------------------ */

static void test_logprobs_ref(void **state)
{
    (void)state;
    const json_t *cases = tu_json_get(ref, "logprobs");
    size_t i;
    const json_t *c;
    int nmask = 0;
    json_array_foreach(cases, i, c) {
        tg_tape *tp = tg_tape_new();
        tg_tensor *logits = jleaf(tp, c, "logits"), *labels = tu_json_tensor(tp, c, "labels");
        tg_tensor *mask = json_is_null(tu_json_get(c, "mask")) ? NULL : tu_json_tensor(tp, c, "mask");
        nmask += mask != NULL;
        tg_tensor *out = tg_compute_logprobs(tp, logits, labels, mask);
        assert_same(out, tu_json_tensor(tp, c, "output"), "logprobs", (int)i);
        assert_string_equal(tg_grad_fn_name(out), json_string_value(tu_json_get(c, "grad_fn")));
        assert_string_equal(tg_grad_fn_name(out), mask ? "DivBackward0" : "MeanBackward1");
        assert_int_equal(tg_backward(out, tu_json_tensor(tp, c, "grad_output"), false), TG_OK);
        if (logits->dtype == TG_F32) {
            assert_same(logits->grad, tu_json_tensor(tp, c, "grad_logits"), "logprobs grad", (int)i);
        } else {
            /* the library's float64 log_softmax backward adds a row in order
             * and takes the C library's exp, where PyTorch's vectorised
             * kernel adds in lanes and takes SLEEF's: to rounding there */
            tu_assert_close(logits->grad, tu_json_tensor(tp, c, "grad_logits"), 1e-13, 1e-300, "logprobs grad (float64)");
        }
        /* the reference model's call: under no grad, the same values, no node */
        bool prev = tg_set_grad_enabled(false);
        tg_tensor *plain = tg_compute_logprobs(tp, logits, labels, mask);
        tg_set_grad_enabled(prev);
        assert_same(plain, tu_json_tensor(tp, c, "output"), "logprobs under no grad", (int)i);
        assert_null(tg_grad_fn_name(plain));
        /* labels[:, 0] is never read: any value there gives the same result */
        tg_tensor *lab2 = tu_json_tensor(tp, c, "labels");
        for (int64_t b = 0; b < lab2->shape[0]; b++) ((int64_t *)tg_data_ptr(lab2))[b * lab2->shape[1]] = -7;
        assert_same(tg_compute_logprobs(tp, tu_json_tensor(tp, c, "logits"), lab2, mask), tu_json_tensor(tp, c, "output"),
                    "logprobs, labels[:, 0] = -7", (int)i);
        tg_tape_free(tp);
    }
    assert_true(nmask > 0 && nmask < (int)json_array_size(cases));
}

/* Strided labels and mask (views of wider tensors) read as their values. */
static void test_logprobs_views(void **state)
{
    (void)state;
    const json_t *c = json_array_get(tu_json_get(ref, "logprobs"), 0);
    tg_tape *tp = tg_tape_new();
    tg_tensor *labels = tu_json_tensor(tp, c, "labels"), *mask = tu_json_tensor(tp, c, "mask");
    int64_t B = labels->shape[0], T = labels->shape[1];
    /* (T, B) tensors transposed */
    tg_tensor *lt = tg_contiguous(tp, tg_transpose(tp, labels, 0, 1));
    tg_tensor *mt = tg_contiguous(tp, tg_transpose(tp, mask, 0, 1));
    tg_tensor *lv = tg_transpose(tp, lt, 0, 1), *mv = tg_transpose(tp, mt, 0, 1);
    assert_false(tg_is_contiguous(lv));
    assert_true(lv->shape[0] == B && lv->shape[1] == T);
    assert_same(tg_compute_logprobs(tp, tu_json_tensor(tp, c, "logits"), lv, mv), tu_json_tensor(tp, c, "output"), "strided labels", 0);
    tg_tape_free(tp);
}

/* ---- compute_dpo_loss ------------------------------------------------------------------------ */

static const char *const dpo_inputs[4] = {"policy_chosen", "policy_rejected", "reference_chosen",
                                          "reference_rejected"};

static void test_dpo_loss_ref(void **state)
{
    (void)state;
    const json_t *cases = tu_json_get(ref, "dpo_loss");
    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        tg_tape *tp = tg_tape_new();
        tg_tensor *in[4];
        for (int k = 0; k < 4; k++) in[k] = jleaf(tp, c, dpo_inputs[k]);
        double beta = json_real_value(tu_json_get(c, "beta"));
        tg_tensor *cr = NULL, *rr = NULL;
        tg_tensor *loss = tg_compute_dpo_loss(tp, in[0], in[1], in[2], in[3], beta, &cr, &rr);
        assert_same(loss, tu_json_tensor(tp, c, "loss"), "dpo loss", (int)i);
        assert_int_equal(loss->ndim, 0);
        assert_string_equal(tg_grad_fn_name(loss), json_string_value(tu_json_get(c, "grad_fn")));
        assert_string_equal(tg_grad_fn_name(loss), "MeanBackward0");
        assert_same(cr, tu_json_tensor(tp, c, "chosen_reward"), "chosen reward", (int)i);
        assert_same(rr, tu_json_tensor(tp, c, "rejected_reward"), "rejected reward", (int)i);
        assert_int_equal(cr->ndim, 0);
        assert_int_equal(rr->ndim, 0);
        assert_false(cr->requires_grad || rr->requires_grad);
        assert_null(tg_grad_fn_name(cr));
        assert_null(tg_grad_fn_name(rr));
        assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
        for (int k = 0; k < 4; k++) {
            char key[64];
            snprintf(key, sizeof key, "grad_%s", dpo_inputs[k]);
            assert_same(in[k]->grad, tu_json_tensor(tp, c, key), key, (int)i);
        }
        /* the rewards are optional */
        tg_tensor *l2 = tg_compute_dpo_loss(tp, in[0], in[1], in[2], in[3], beta, NULL, NULL);
        assert_same(l2, tu_json_tensor(tp, c, "loss"), "dpo loss without rewards", (int)i);
        tg_tape_free(tp);
    }
}

/* ---- compute_dpo_loss_batch ------------------------------------------------------------------ */

static void test_batch_ref(void **state)
{
    (void)state;
    const json_t *c = tu_json_get(ref, "batch");
    tg_tape *tp = tg_tape_new();
    tg_tensor *chosen = tu_json_tensor(tp, c, "chosen"), *rejected = tu_json_tensor(tp, c, "rejected");
    tg_tensor *cmask = tu_json_tensor(tp, c, "chosen_mask"), *rmask = tu_json_tensor(tp, c, "rejected_mask");
    tg_tensor *pol_c = jleaf(tp, c, "policy_chosen_logits"), *pol_r = jleaf(tp, c, "policy_rejected_logits");
    tg_tensor *pc = tg_compute_logprobs(tp, pol_c, chosen, cmask);
    tg_tensor *pr = tg_compute_logprobs(tp, pol_r, rejected, rmask);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *rc = tg_compute_logprobs(tp, tu_json_tensor(tp, c, "reference_chosen_logits"), chosen, cmask);
    tg_tensor *rr = tg_compute_logprobs(tp, tu_json_tensor(tp, c, "reference_rejected_logits"), rejected, rmask);
    tg_set_grad_enabled(prev);
    tg_tensor *cr, *rj;
    tg_tensor *loss = tg_compute_dpo_loss(tp, pc, pr, rc, rr, json_real_value(tu_json_get(c, "beta")), &cr, &rj);
    assert_same(loss, tu_json_tensor(tp, c, "loss"), "batch loss", 0);
    assert_same(cr, tu_json_tensor(tp, c, "chosen_reward"), "batch chosen reward", 0);
    assert_same(rj, tu_json_tensor(tp, c, "rejected_reward"), "batch rejected reward", 0);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    assert_same(pol_c->grad, tu_json_tensor(tp, c, "grad_policy_chosen_logits"), "batch grad chosen", 0);
    assert_same(pol_r->grad, tu_json_tensor(tp, c, "grad_policy_rejected_logits"), "batch grad rejected", 0);
    tg_tape_free(tp);
}

/* ---- gradcheck (float64) --------------------------------------------------------------------- */

static void assert_gradcheck(tg_gradcheck_forward fn, void *ctx, int n, tg_tensor *const *in)
{
    tg_gradcheck_result res;
    if (tg_gradcheck_call(fn, ctx, n, in, NULL, &res) != TG_OK) fail_msg("gradcheck: %s", tg_last_error());
    if (!res.passed) fail_msg("gradcheck: %s", res.message);
}

static tg_tensor *gc_logsigmoid(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    return tg_logsigmoid(tp, in[0]);
}

static tg_tensor *gc_dpo(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n;
    return tg_compute_dpo_loss(tp, in[0], in[1], in[2], in[3], *(const double *)ctx, NULL, NULL);
}

typedef struct {
    const tg_tensor *labels, *mask;
} lp_ctx;

static tg_tensor *gc_logprobs(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n;
    const lp_ctx *c = ctx;
    return tg_compute_logprobs(tp, in[0], c->labels, c->mask);
}

static void test_gradcheck(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(53);
    /* both branches (x < 0 and x >= 0), out to |x| = 12 */
    tg_tensor *x = tg_mul_scalar(tp, tg_randn(tp, TG_F64, 2, SH(5, 7), g), 4.0);
    tg_requires_grad_(x, true);
    assert_gradcheck(gc_logsigmoid, NULL, 1, &x);
    tg_tensor *in[4];
    for (int k = 0; k < 4; k++) {
        in[k] = tg_randn(tp, TG_F64, 1, SH(6), g);
        tg_requires_grad_(in[k], true);
    }
    double betas[] = {0.1, 0.5, 3.0};
    for (int b = 0; b < 3; b++) assert_gradcheck(gc_dpo, &betas[b], 4, in);
    tg_tensor *logits = tg_randn(tp, TG_F64, 3, SH(2, 5, 4), g);
    tg_requires_grad_(logits, true);
    lp_ctx c = {tg_from_data(tp, TG_I64, 2, SH(2, 5), (const int64_t[]){0, 3, 1, 1, 2, 3, 0, 0, 2, 3}),
                tg_from_data(tp, TG_BOOL, 2, SH(2, 5), (const bool[]){0, 0, 1, 1, 0, 0, 1, 1, 1, 1})};
    assert_gradcheck(gc_logprobs, &c, 1, &logits);
    c.mask = NULL;
    assert_gradcheck(gc_logprobs, &c, 1, &logits);
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_zeros(tp, TG_F32, 1, SH(4));
    tg_clear_error();
    tu_assert_one_line_error(tg_logsigmoid(tp, NULL) ? TG_OK : TG_EINVAL, "logsigmoid: NULL input");
    tu_assert_one_line_error(tg_logsigmoid(tp, tg_zeros(tp, TG_I64, 1, SH(2))) ? TG_OK : TG_EINVAL,
                             "logsigmoid: expected a float32 or float64 tensor, got int64");

    tg_tensor *logits = tg_zeros(tp, TG_F32, 3, SH(2, 4, 5));
    tg_tensor *labels = tg_zeros(tp, TG_I64, 2, SH(2, 4));
    tg_tensor *mask = tg_zeros(tp, TG_BOOL, 2, SH(2, 4));
#define LP_ERR(call, ...) tu_assert_one_line_error((call) ? TG_OK : TG_EINVAL, __VA_ARGS__)
    tg_clear_error();
    LP_ERR(tg_compute_logprobs(tp, NULL, labels, mask), "compute_logprobs: NULL input");
    tg_clear_error();
    LP_ERR(tg_compute_logprobs(tp, logits, NULL, mask), "compute_logprobs: NULL input");
    LP_ERR(tg_compute_logprobs(tp, tg_zeros(tp, TG_F32, 2, SH(4, 5)), labels, mask),
           "compute_logprobs: logits must be (B, T, V), got (4,5)");
    LP_ERR(tg_compute_logprobs(tp, tg_zeros(tp, TG_I64, 3, SH(2, 4, 5)), labels, mask),
           "compute_logprobs: expected a float32 or float64 tensor, got int64");
    LP_ERR(tg_compute_logprobs(tp, logits, tg_zeros(tp, TG_F32, 2, SH(2, 4)), mask),
           "compute_logprobs: labels must be int64 of shape (2,4) as logits (2,4,5), got float32 (2,4)");
    LP_ERR(tg_compute_logprobs(tp, logits, tg_zeros(tp, TG_I64, 2, SH(2, 3)), mask),
           "compute_logprobs: labels must be int64 of shape (2,4) as logits (2,4,5), got int64 (2,3)");
    LP_ERR(tg_compute_logprobs(tp, logits, tg_zeros(tp, TG_I64, 1, SH(8)), mask),
           "compute_logprobs: labels must be int64 of shape (2,4)", "got int64 (8)");
    LP_ERR(tg_compute_logprobs(tp, logits, labels, tg_zeros(tp, TG_F32, 2, SH(2, 4))),
           "compute_logprobs: selection mask must be bool of shape (2,4) as labels, got float32 (2,4)");
    LP_ERR(tg_compute_logprobs(tp, logits, labels, tg_zeros(tp, TG_BOOL, 2, SH(4, 2))),
           "compute_logprobs: selection mask must be bool of shape (2,4) as labels, got bool (4,2)");
    LP_ERR(tg_compute_logprobs(tp, tg_zeros(tp, TG_F32, 3, SH(2, 1, 5)), tg_zeros(tp, TG_I64, 2, SH(2, 1)), NULL),
           "compute_logprobs: needs at least 2 tokens per sequence, got 1");
    tg_tensor *bad = tg_from_data(tp, TG_I64, 2, SH(2, 4), (const int64_t[]){0, 1, 2, 3, 4, 0, 5, 1});
    LP_ERR(tg_compute_logprobs(tp, logits, bad, mask),
           "compute_logprobs: label 5 at (1, 2) is out of range for 5 classes");
    bad = tg_from_data(tp, TG_I64, 2, SH(2, 4), (const int64_t[]){0, 1, -1, 3, 4, 0, 1, 1});
    LP_ERR(tg_compute_logprobs(tp, logits, bad, NULL),
           "compute_logprobs: label -1 at (0, 2) is out of range for 5 classes");
    /* column 0 is not a prediction: any value there is accepted */
    bad = tg_from_data(tp, TG_I64, 2, SH(2, 4), (const int64_t[]){50256, 1, 2, 3, -100, 0, 1, 1});
    assert_non_null(tg_compute_logprobs(tp, logits, bad, mask));

    tg_tensor *v = tg_zeros(tp, TG_F32, 1, SH(3));
    tg_tensor *cr = x, *rr = x;
#define DPO_ERR(a, b, c, d, beta, ...)                                                                     \
    do {                                                                                                  \
        cr = rr = x;                                                                                      \
        LP_ERR(tg_compute_dpo_loss(tp, a, b, c, d, beta, &cr, &rr), __VA_ARGS__);                         \
        assert_null(cr);                                                                                  \
        assert_null(rr);                                                                                  \
    } while (0)
    for (int k = 0; k < 4; k++) {
        tg_tensor *in[4] = {v, v, v, v};
        in[k] = NULL;
        tg_clear_error();
        DPO_ERR(in[0], in[1], in[2], in[3], 0.1, "compute_dpo_loss: NULL input");
    }
    DPO_ERR(tg_zeros(tp, TG_I64, 1, SH(3)), v, v, v, 0.1,
            "compute_dpo_loss: expected a float32 or float64 tensor, got int64");
    DPO_ERR(v, v, tg_zeros(tp, TG_F32, 2, SH(3, 1)), v, 0.1,
            "compute_dpo_loss: reference_chosen must be 1-D (batch), got (3,1)");
    DPO_ERR(v, v, v, tg_zeros(tp, TG_F32, 1, SH(4)), 0.1,
            "compute_dpo_loss: reference_rejected float32 (4) does not match policy_chosen float32 (3)");
    DPO_ERR(v, tg_zeros(tp, TG_F64, 1, SH(3)), v, v, 0.1,
            "compute_dpo_loss: policy_rejected float64 (3) does not match policy_chosen float32 (3)");
    DPO_ERR(v, v, v, v, INFINITY, "compute_dpo_loss: beta must be finite, got inf");
    DPO_ERR(v, v, v, v, NAN, "compute_dpo_loss: beta must be finite, got nan");
    /* valid: beta 0 and an empty batch (PyTorch's nan mean) */
    tg_tensor *l0 = tg_compute_dpo_loss(tp, v, v, v, v, 0.0, &cr, &rr);
    assert_non_null(l0);
    assert_true(fabs(tg_item(l0) - log(2.0)) < 1e-7); /* -logsigmoid(0) */
    tg_tensor *e = tg_zeros(tp, TG_F32, 1, SH(0));
    tg_tensor *le = tg_compute_dpo_loss(tp, e, e, e, e, 0.1, &cr, &rr);
    assert_non_null(le);
    assert_true(isnan(tg_item(le)) && isnan(tg_item(cr)) && isnan(tg_item(rr)));
    tg_tape_free(tp);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logsigmoid_ref),
        cmocka_unit_test(test_logprobs_ref),
        cmocka_unit_test(test_logprobs_views),
        cmocka_unit_test(test_dpo_loss_ref),
        cmocka_unit_test(test_batch_ref),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("dpo_ops", tests, setup, teardown);
}
