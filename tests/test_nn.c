/* Modules, SGD, gradcheck, dropout, configuration errors and state_dict files.
 *
 * (a) modules/<case>: every case of tests/ref/modules.json
 *     (tools/reference/modules.py): the module is built with tg_*_new (the
 *     attention modules from a tg_attention_config) after tg_manual_seed(seed), put in eval mode and run on the case's input;
 *     named_parameters names and state_dict keys (in order), the output, its
 *     grad_fn name and the gradients of output.sum() for every parameter and
 *     the input must match PyTorch 1.13. Random inputs are also redrawn with
 *     tg_rand from a generator seeded with the case's input_seed and must
 *     equal PyTorch's bit for bit.
 * (b) sgd/<run>: tests/ref/sgd.json (tools/reference/sgd.py): 20 SGD steps of
 *     Linear(4,3) / a tiny MultiHeadAttention for each option set; losses and
 *     every parameter after every step.
 * (c) gradcheck of the five modules and Linear with and without bias, in
 *     float64, every parameter and the input.
 * (d) dropout statistics, eval-mode identity, training-mode difference.
 * (e) bad configurations: NULL/status with a message naming the problem.
 * (f) state_dict save/load round trips, PyTorch-written files, load errors,
 *     train/eval propagation.
 * (g) the attention constructors' two forms: a tg_attention_config and the
 *     positional arguments build the same module (weights, repr, output) and
 *     refuse the same bad settings with the same message.
 *
 * Tolerances (|got - want| <= atol + rtol * |want|): float32 outputs against
 * PyTorch: rtol 0, atol 1e-5 (a plain max abs error of 1e-5); gradients:
 * rtol 1e-4, atol 1e-5 (see GRAD_RTOL); SGD trajectories: rtol 0, atol 1e-5
 * on parameters and losses.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define REF_RTOL 0.0
#define REF_ATOL 1e-5
/* Gradients of output.sum() reach ~15 for the 8x8 SelfAttention_v1 cases
 * (weights in [0, 1) give peaked softmaxes); float32 summation order alone
 * then moves them by ~1e-5, so gradients also get a relative 1e-4. */
#define GRAD_RTOL 1e-4
#define GRAD_ATOL 1e-5

static json_t *g_modules, *g_sgd;

/* ---- JSON helpers -------------------------------------------------------------------- */

static const json_t *jget(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    if (!v) fail_msg("reference: missing key \"%s\"", key);
    return v;
}

static const char *jstr(const json_t *o, const char *key) {
    const json_t *v = jget(o, key);
    if (!json_is_string(v)) fail_msg("reference: \"%s\" is not a string", key);
    return json_string_value(v);
}

static double jnum(const json_t *o, const char *key) {
    const json_t *v = jget(o, key);
    if (json_is_integer(v)) return (double)json_integer_value(v);
    if (json_is_real(v)) return json_real_value(v);
    fail_msg("reference: \"%s\" is not a number", key);
    return 0.0;
}

static int64_t jint(const json_t *o, const char *key) { return (int64_t)jnum(o, key); }

static bool jbool(const json_t *o, const char *key) { return json_is_true(jget(o, key)); }

/* ---- module helpers ------------------------------------------------------------------ */

/* The tensor named name in l, or NULL. */
static tg_tensor *named(const tg_named_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0) return l->tensors[i];
    return NULL;
}

/* Fails unless l's names are exactly the JSON array want, in order. */
static void assert_names_(const tg_named_list *l, const json_t *want, const char *what, const char *file,
                          int line) {
    size_t n = json_array_size(want);
    bool ok = (size_t)l->n == n;
    for (size_t i = 0; ok && i < n; i++)
        ok = strcmp(l->names[i], json_string_value(json_array_get(want, i))) == 0;
    if (ok) return;
    print_error("%s: got %d names, want %zu\n", what, l->n, n);
    for (size_t i = 0; i < n || i < (size_t)l->n; i++)
        print_error("  [%zu] got %-24s want %s\n", i, i < (size_t)l->n ? l->names[i] : "-",
                    i < n ? json_string_value(json_array_get(want, i)) : "-");
    _fail(file, line);
}
#define assert_names(l, want, what) assert_names_((l), (want), (what), __FILE__, __LINE__)

/* The module a modules.json case describes, built after tg_manual_seed(seed). */
static tg_module *build_case(tg_tape *tp, const json_t *c) {
    const char *kind = jstr(c, "module");
    /* num_heads is 0 in a CausalAttention case: one head */
    tg_attention_config cfg = {.d_in = jint(c, "d_in"), .d_out = jint(c, "d_out"),
                               .context_length = jint(c, "context_length"), .num_heads = jint(c, "num_heads"),
                               .dropout = jnum(c, "dropout"), .qkv_bias = jbool(c, "qkv_bias")};
    tg_manual_seed((uint64_t)jint(c, "seed"));
    if (strcmp(kind, "sa_v1") == 0) return tg_self_attention_v1_new(tp, cfg.d_in, cfg.d_out);
    if (strcmp(kind, "sa_v2") == 0) return tg_self_attention_v2_new(tp, cfg.d_in, cfg.d_out, cfg.qkv_bias);
    if (strcmp(kind, "causal") == 0) return tg_causal_attention_new_config(tp, cfg);
    if (strcmp(kind, "mha_wrapper") == 0) return tg_mha_wrapper_new_config(tp, cfg);
    if (strcmp(kind, "mha") == 0) return tg_mha_new_config(tp, cfg);
    fail_msg("modules.json: unknown module %s", kind);
    return NULL;
}

/* ---- (a) modules.json ---------------------------------------------------------------- */

static void test_module_case(void **state) {
    const json_t *c = *state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    assert_non_null(model);
    assert_non_null(tp);

    tg_module *m = build_case(model, c);
    tu_assert_ok(m);
    tg_module_train(m, false);

    tg_named_list params, sd;
    assert_int_equal(tg_module_named_parameters(tp, m, &params), TG_OK);
    assert_int_equal(tg_module_state_dict(tp, m, &sd), TG_OK);
    assert_names(&params, jget(c, "parameter_names"), "named_parameters");
    assert_names(&sd, jget(c, "state_dict_keys"), "state_dict keys");

    tg_tensor *x = tu_tensor_from_json(model, jget(c, "input"), TG_DTYPE_COUNT);
    if (strcmp(jstr(c, "input_kind"), "rand") == 0) {
        /* torch.rand(shape, generator=torch.Generator().manual_seed(input_seed)) */
        tg_generator *g = tg_generator_new((uint64_t)jint(c, "input_seed"));
        assert_non_null(g);
        tg_tensor *redrawn = tg_rand(tp, TG_F32, x->ndim, x->shape, g);
        tg_generator_free(g);
        tu_assert_close(redrawn, x, 0.0, 0.0, "input redrawn with tg_rand");
    }
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);

    tg_tensor *y = tg_module_forward(tp, m, x);
    tu_assert_ok(y);
    tu_assert_close(y, tu_tensor_from_json(tp, jget(c, "output"), TG_DTYPE_COUNT), REF_RTOL, REF_ATOL, "output");
    const char *fn = tg_grad_fn_name(y);
    if (!fn || strcmp(fn, jstr(c, "grad_fn")) != 0)
        fail_msg("output grad_fn: got %s, want %s", fn ? fn : "(none)", jstr(c, "grad_fn"));

    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_OK);
    const json_t *grads = jget(c, "grads");
    const char *key;
    const json_t *want;
    int checked = 0;
    json_object_foreach((json_t *)grads, key, want) {
        char what[160];
        tg_tensor *t = strcmp(key, "input") == 0 ? x : named(&params, key);
        snprintf(what, sizeof what, "grad of %s", key);
        if (!t) fail_msg("%s: no such parameter", what);
        tu_assert_close(t->grad, tu_tensor_from_json(tp, want, TG_DTYPE_COUNT), GRAD_RTOL, GRAD_ATOL, what);
        checked++;
    }
    assert_int_equal(checked, params.n + 1);
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* ---- (b) SGD trajectories ------------------------------------------------------------ */

static void test_sgd_run(void **state) {
    const json_t *r = *state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    assert_non_null(model);
    assert_non_null(tp);
    const char *kind = jstr(r, "model");
    tg_module *m;
    if (strcmp(kind, "linear") == 0) {
        tg_manual_seed(0);
        m = tg_linear_new(model, 4, 3, true);
    } else {
        tg_manual_seed(3);
        m = tg_mha_new(model, 3, 4, 5, 0.0, 2, true);
    }
    tu_assert_ok(m);
    tg_module_train(m, false);

    const json_t *o = jget(r, "options");
    tg_sgd_options opt = {jnum(o, "lr"), jnum(o, "momentum"), jnum(o, "dampening"), jnum(o, "weight_decay"),
                          jbool(o, "nesterov")};
    tg_sgd *sgd = tg_sgd_new(model, m, opt);
    tu_assert_ok(sgd);

    tg_named_list params;
    assert_int_equal(tg_module_named_parameters(model, m, &params), TG_OK);
    assert_names(&params, jget(r, "parameter_names"), "named_parameters");
    for (int i = 0; i < params.n; i++)
        tu_assert_close(params.tensors[i],
                        tu_tensor_from_json(tp, jget(jget(r, "initial"), params.names[i]), TG_DTYPE_COUNT), 0.0, 0.0,
                        params.names[i]);

    tg_tensor *X = tu_tensor_from_json(model, jget(r, "X"), TG_DTYPE_COUNT);
    tg_tensor *Y = tu_tensor_from_json(model, jget(r, "Y"), TG_DTYPE_COUNT);
    const json_t *losses = jget(r, "losses"), *steps = jget(r, "params");
    size_t nsteps = json_array_size(losses);
    assert_int_equal(nsteps, 20);
    for (size_t s = 0; s < nsteps; s++) {
        char what[160];
        tg_tape_reset(tp);
        tg_sgd_zero_grad(sgd);
        tg_tensor *loss = tg_mse_loss(tp, tg_module_forward(tp, m, X), Y, TG_REDUCE_MEAN);
        tu_assert_ok(loss);
        assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
        assert_int_equal(tg_sgd_step(sgd), TG_OK);
        double want = json_real_value(json_array_get(losses, s));
        if (fabs(tg_item(loss) - want) > REF_ATOL)
            fail_msg("step %zu: loss %.9g, want %.9g", s + 1, tg_item(loss), want);
        const json_t *ps = json_array_get(steps, s);
        for (int i = 0; i < params.n; i++) {
            snprintf(what, sizeof what, "step %zu: %s", s + 1, params.names[i]);
            tu_assert_close(params.tensors[i], tu_tensor_from_json(tp, jget(ps, params.names[i]), TG_DTYPE_COUNT),
                            0.0, REF_ATOL, what);
        }
    }
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* ---- (c) gradcheck ------------------------------------------------------------------- */

/* Gradchecks m (converted to float64, eval) on a float64 input of the given
 * shape drawn from a fixed generator: every parameter and the input. */
static void gradcheck_module_(tg_tape *model, tg_module *m, int ndim, const int64_t *shape, const char *what,
                              const char *file, int line) {
    tu_assert_ok_(m, file, line);
    tg_module_train(m, false);
    if (tg_module_to_dtype(model, m, TG_F64) != TG_OK) {
        print_error("%s: to_dtype: %s\n", what, tg_last_error());
        _fail(file, line);
    }
    tg_named_list params;
    assert_int_equal(tg_module_named_parameters(model, m, &params), TG_OK);
    if (params.n + 1 > 16) fail_msg("%s: too many parameters (%d)", what, params.n);
    for (int i = 0; i < params.n; i++) {
        const tg_tensor *p = params.tensors[i];
        if (p->dtype != TG_F64 || !p->requires_grad) {
            print_error("%s: parameter %s is %s, requires_grad %d after to_dtype\n", what, params.names[i],
                        tg_dtype_name(p->dtype), p->requires_grad);
            _fail(file, line);
        }
    }
    tg_generator *g = tg_generator_new(99);
    tg_tensor *x = tg_rand(model, TG_F64, ndim, shape, g);
    tg_generator_free(g);
    tu_assert_ok(x);
    double max_err[16]; /* the input's, then each parameter's */
    tg_gradcheck_result res;
    int st = tg_gradcheck_module_call(m, 1, &x, &(tg_gradcheck_options){.max_err_per_input = max_err}, &res);
    if (st != TG_OK) {
        print_error("%s: gradcheck error: %s\n", what, tg_last_error());
        _fail(file, line);
    }
    if (!res.passed) {
        print_error("%s: %s\n", what, res.message);
        for (int i = 0; i <= params.n; i++)
            print_error("  %-20s max |err| %.3g\n", i ? params.names[i - 1] : "input", max_err[i]);
        _fail(file, line);
    }
    /* every input was checked: analytic gradients exist for each */
    for (int i = 0; i <= params.n; i++)
        if (!(max_err[i] < 1e-6)) {
            print_error("%s: input %d max error %.3g\n", what, i, max_err[i]);
            _fail(file, line);
        }
}
#define gradcheck_module(model, m, ndim, shape, what) \
    gradcheck_module_((model), (m), (ndim), (shape), (what), __FILE__, __LINE__)

static void test_gradcheck_linear(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new();
    int64_t s2[2] = {5, 3}, s3[3] = {2, 4, 3};
    tg_manual_seed(123);
    gradcheck_module(model, tg_linear_new(model, 3, 2, true), 2, s2, "Linear(3,2) bias, 2-D input");
    gradcheck_module(model, tg_linear_new(model, 3, 4, false), 2, s2, "Linear(3,4) no bias, 2-D input");
    gradcheck_module(model, tg_linear_new(model, 3, 2, true), 3, s3, "Linear(3,2) bias, 3-D input");
    gradcheck_module(model, tg_linear_new(model, 3, 4, false), 3, s3, "Linear(3,4) no bias, 3-D input");
    tg_tape_free(model);
}

static void test_gradcheck_sa_v1(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new();
    int64_t s[2] = {6, 3};
    tg_manual_seed(123);
    gradcheck_module(model, tg_self_attention_v1_new(model, 3, 2), 2, s, "SelfAttention_v1(3,2)");
    tg_tape_free(model);
}

static void test_gradcheck_sa_v2(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new();
    int64_t s[2] = {6, 3};
    tg_manual_seed(123);
    gradcheck_module(model, tg_self_attention_v2_new(model, 3, 2, false), 2, s, "SelfAttention_v2(3,2)");
    gradcheck_module(model, tg_self_attention_v2_new(model, 3, 4, true), 2, s, "SelfAttention_v2(3,4,bias)");
    tg_tape_free(model);
}

static void test_gradcheck_causal(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new();
    int64_t s[3] = {2, 5, 3};
    tg_manual_seed(42);
    gradcheck_module(model, tg_causal_attention_new(model, 3, 2, 6, 0.0, false), 3, s, "CausalAttention");
    gradcheck_module(model, tg_causal_attention_new(model, 3, 4, 5, 0.0, true), 3, s, "CausalAttention bias");
    tg_tape_free(model);
}

static void test_gradcheck_mha_wrapper(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new();
    int64_t s[3] = {2, 5, 3};
    tg_manual_seed(42);
    gradcheck_module(model, tg_mha_wrapper_new(model, 3, 2, 6, 0.0, 2, true), 3, s,
                     "MultiHeadAttentionWrapper");
    tg_tape_free(model);
}

static void test_gradcheck_mha(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new();
    int64_t s[3] = {2, 5, 3};
    tg_manual_seed(42);
    gradcheck_module(model, tg_mha_new(model, 3, 4, 6, 0.0, 2, true), 3, s, "MultiHeadAttention bias");
    gradcheck_module(model, tg_mha_new(model, 3, 2, 5, 0.0, 1, false), 3, s, "MultiHeadAttention 1 head");
    tg_tape_free(model);
}

/* ---- (d) dropout ---------------------------------------------------------------------- */

static void test_dropout_statistics(void **state) {
    (void)state;
    tg_tape *tp = tg_tape_new();
    const int64_t n = 1000000;
    tg_tensor *x = tg_ones(tp, TG_F32, 1, &n);
    tu_assert_ok(x);
    tg_generator *g = tg_generator_new(2024);
    static const double ps[3] = {0.1, 0.5, 0.9};
    for (int k = 0; k < 3; k++) {
        double p = ps[k];
        tg_tensor *y = tg_dropout(tp, x, p, g);
        tu_assert_ok(y);
        const float *d = tg_data_ptr(y);
        assert_non_null(d);
        float keep = (float)(1.0 / (1.0 - p));
        int64_t zeros = 0, bad = 0, first_bad = -1;
        for (int64_t i = 0; i < n; i++) {
            if (d[i] == 0.0f)
                zeros++;
            else if (d[i] != keep && bad++ == 0)
                first_bad = i;
        }
        double frac = (double)zeros / (double)n, sigma = sqrt(p * (1 - p) / (double)n);
        if (fabs(frac - p) > 4 * sigma)
            fail_msg("dropout p=%g: zero fraction %.6f, more than 4 sigma (%.6f) from p", p, frac, 4 * sigma);
        if (bad)
            fail_msg("dropout p=%g: %lld survivors are not 1/(1-p) = %.9g (first at %lld: %.9g)", p,
                     (long long)bad, (double)keep, (long long)first_bad, (double)d[first_bad]);
    }
    tg_generator_free(g);

    /* p = 0: the input's values */
    int64_t s[2] = {3, 4};
    tg_tensor *r = tg_rand(tp, TG_F32, 2, s, NULL);
    tg_tensor *y0 = tg_dropout(tp, r, 0.0, NULL);
    tu_assert_close(y0, r, 0.0, 0.0, "dropout p=0");
    tg_tape_free(tp);
}

/* MultiHeadAttention (p = 0.5) in eval mode equals the same module with p = 0;
 * in training mode it differs. */
static void test_dropout_mha_modes(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    int64_t s[3] = {2, 6, 3};
    tg_generator *gin = tg_generator_new(5);
    tg_tensor *x = tg_rand(model, TG_F32, 3, s, gin);
    tg_generator_free(gin);
    tg_manual_seed(42);
    tg_module *m0 = tg_mha_new(model, 3, 4, 6, 0.0, 2, true);
    tg_manual_seed(42);
    tg_module *m5 = tg_mha_new(model, 3, 4, 6, 0.5, 2, true);
    tu_assert_ok(m0);
    tu_assert_ok(m5);
    tg_generator *g = tg_generator_new(11);
    tg_module_set_generator(m5, g);
    tg_module_train(m0, false);
    tg_module_train(m5, false);
    tg_tensor *y0 = tg_module_forward(tp, m0, x);
    tg_tensor *y5 = tg_module_forward(tp, m5, x);
    tu_assert_close(y5, y0, 0.0, 0.0, "MHA p=0.5 eval vs p=0");

    tg_module_train(m5, true);
    tg_tensor *yt = tg_module_forward(tp, m5, x);
    tu_assert_ok(yt);
    int64_t differ = 0;
    for (int64_t i = 0; i < tg_numel(yt); i++) differ += tg_item_at(yt, i) != tg_item_at(y0, i);
    if (differ == 0) fail_msg("MHA p=0.5 in training mode equals the p=0 output");

    /* back to eval: identical again */
    tg_module_train(m5, false);
    tu_assert_close(tg_module_forward(tp, m5, x), y0, 0.0, 0.0, "MHA p=0.5 eval after train");
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* Fused with PyTorch's dropout stream, MultiHeadAttention runs the scores
 * to the context as one MaskedAttentionBackward0 node with the composed
 * ops' bits: output, input and parameter gradients equal the composed
 * module's exactly (float32 and float64, dropout on and off, a batch of
 * one and several), and it keeps less on the tape. */
static void check_attention_exact(tg_dtype dt, int64_t B, int64_t T, double p, bool causal) {
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    int64_t s[3] = {B, T, 24};
    tg_generator *gin = tg_generator_new(5);
    tg_tensor *x[2];
    tg_module *m[2];
    tg_tensor *y[2];
    size_t used[2];
    for (int k = 0; k < 2; k++) {
        tg_generator_seed(gin, 5);
        x[k] = tg_rand(model, TG_F64, 3, s, gin);
        if (dt == TG_F32) x[k] = tg_to_dtype(model, x[k], TG_F32);
        tu_assert_ok(x[k]);
        assert_int_equal(tg_requires_grad_(x[k], true), TG_OK);
        tg_manual_seed(42);
        m[k] = tg_mha_new(model, 24, 24, T, p, 4, false);
        tu_assert_ok(m[k]);
        if (dt == TG_F64) assert_int_equal(tg_module_to_dtype(model, m[k], TG_F64), TG_OK);
        /* a mask loaded from a state_dict may be any: here none at all */
        if (!causal) assert_int_equal(tg_fill_(tg_module_get_buffer(m[k], "mask"), 0.0), TG_OK);
        assert_int_equal(tg_module_set_fused(m[k], k == 1), TG_OK);
        tg_module_train(m[k], true);
        tg_manual_seed(7); /* the same dropout draws */
        size_t before = tg_tape_used(tp);
        y[k] = tg_module_forward(tp, m[k], x[k]);
        tu_assert_ok(y[k]);
        used[k] = tg_tape_used(tp) - before;
        assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, y[k], y[k])), NULL, false), TG_OK);
    }
    tu_assert_close(y[1], y[0], 0.0, 0.0, "fused attention output");
    tu_assert_close(x[1]->grad, x[0]->grad, 0.0, 0.0, "fused attention dx");
    tg_named_list pa, pb;
    assert_int_equal(tg_module_named_parameters(tp, m[0], &pa), TG_OK);
    assert_int_equal(tg_module_named_parameters(tp, m[1], &pb), TG_OK);
    for (int i = 0; i < pa.n; i++) tu_assert_close(pb.tensors[i]->grad, pa.tensors[i]->grad, 0.0, 0.0, pa.names[i]);
    /* the node is there, and the (B, h, T, T) intermediates are not */
    const tg_tensor *ctx = y[1];
    assert_non_null(ctx->grad_fn);
    if (T >= 16) assert_true(used[1] < used[0]);
    tg_tape_free(tp);
    tg_tape_free(model);
    tg_generator_free(gin);
}

static void test_attention_exact(void **state) {
    (void)state;
    check_attention_exact(TG_F32, 2, 16, 0.1, true);
    check_attention_exact(TG_F32, 1, 16, 0.0, true);
    check_attention_exact(TG_F64, 3, 5, 0.3, true);
    check_attention_exact(TG_F32, 2, 3, 0.5, true); /* tiny products: bmm's plain loop */
    check_attention_exact(TG_F32, 2, 16, 0.1, false);
    check_attention_exact(TG_F64, 2, 7, 0.0, false);
}

/* ---- (e) bad configurations ------------------------------------------------------------- */

#define EXPECT_NULL(call, ...)               \
    do {                                     \
        tg_clear_error();                    \
        tu_assert_null_error((call), __VA_ARGS__); \
    } while (0)

static void test_bad_constructors(void **state) {
    (void)state;
    tg_tape *tp = tg_tape_new();
    /* d_out % num_heads != 0 */
    EXPECT_NULL(tg_mha_new(tp, 3, 3, 6, 0.0, 2, false), "divisible");
    EXPECT_NULL(tg_mha_new(tp, 4, 6, 6, 0.0, 4, true), "divisible");
    /* dropout outside [0, 1) */
    static const double badp[2] = {1.0, -0.1};
    for (int i = 0; i < 2; i++) {
        EXPECT_NULL(tg_causal_attention_new(tp, 3, 2, 6, badp[i], false), "dropout");
        EXPECT_NULL(tg_mha_wrapper_new(tp, 3, 2, 6, badp[i], 2, false), "dropout");
        EXPECT_NULL(tg_mha_new(tp, 3, 2, 6, badp[i], 2, false), "dropout");
        EXPECT_NULL(tg_dropout_new(tp, badp[i]), "dropout");
    }
    EXPECT_NULL(tg_mha_new(tp, 3, 2, 6, NAN, 2, false), "dropout");
    /* sizes <= 0, every constructor */
    static const int64_t bad[2] = {0, -1};
    for (int i = 0; i < 2; i++) {
        int64_t b = bad[i];
        EXPECT_NULL(tg_linear_new(tp, b, 2, true), "in_features");
        EXPECT_NULL(tg_linear_new(tp, 3, b, true), "out_features");
        EXPECT_NULL(tg_self_attention_v1_new(tp, b, 2), "d_in");
        EXPECT_NULL(tg_self_attention_v1_new(tp, 3, b), "d_out");
        EXPECT_NULL(tg_self_attention_v2_new(tp, b, 2, false), "d_in");
        EXPECT_NULL(tg_self_attention_v2_new(tp, 3, b, true), "d_out");
        EXPECT_NULL(tg_causal_attention_new(tp, b, 2, 6, 0.0, false), "d_in");
        EXPECT_NULL(tg_causal_attention_new(tp, 3, b, 6, 0.0, false), "d_out");
        EXPECT_NULL(tg_causal_attention_new(tp, 3, 2, b, 0.0, false), "context_length");
        EXPECT_NULL(tg_mha_wrapper_new(tp, b, 2, 6, 0.0, 2, false), "d_in");
        EXPECT_NULL(tg_mha_wrapper_new(tp, 3, b, 6, 0.0, 2, false), "d_out");
        EXPECT_NULL(tg_mha_wrapper_new(tp, 3, 2, b, 0.0, 2, false), "context_length");
        EXPECT_NULL(tg_mha_wrapper_new(tp, 3, 2, 6, 0.0, b, false), "num_heads");
        EXPECT_NULL(tg_mha_new(tp, b, 2, 6, 0.0, 2, false), "d_in");
        EXPECT_NULL(tg_mha_new(tp, 3, b, 6, 0.0, 2, false), "d_out");
        EXPECT_NULL(tg_mha_new(tp, 3, 2, b, 0.0, 2, false), "context_length");
        EXPECT_NULL(tg_mha_new(tp, 3, 2, 6, 0.0, b, false), "num_heads");
    }
    tg_tape_free(tp);
}

static void test_bad_forward(void **state) {
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(1);
    tg_module *v1 = tg_self_attention_v1_new(tp, 3, 2);
    tg_module *v2 = tg_self_attention_v2_new(tp, 3, 2, false);
    tg_module *ca = tg_causal_attention_new(tp, 3, 2, 4, 0.0, false);
    tg_module *wr = tg_mha_wrapper_new(tp, 3, 2, 4, 0.0, 2, false);
    tg_module *mh = tg_mha_new(tp, 3, 2, 4, 0.0, 2, false);
    tu_assert_ok(v1);
    tu_assert_ok(v2);
    tu_assert_ok(ca);
    tu_assert_ok(wr);
    tu_assert_ok(mh);
    int64_t s2[2] = {4, 3}, s3[3] = {1, 4, 3}, s2w[2] = {4, 5}, s3w[3] = {1, 4, 2}, s1[1] = {3};
    int64_t s3long[3] = {2, 5, 3}, s4[4] = {1, 1, 4, 3};
    tg_tensor *x2 = tg_ones(tp, TG_F32, 2, s2), *x3 = tg_ones(tp, TG_F32, 3, s3);
    tg_tensor *x2w = tg_ones(tp, TG_F32, 2, s2w), *x3w = tg_ones(tp, TG_F32, 3, s3w);
    tg_tensor *x1 = tg_ones(tp, TG_F32, 1, s1), *x4 = tg_ones(tp, TG_F32, 4, s4);
    tg_tensor *xlong = tg_ones(tp, TG_F32, 3, s3long);
    /* the valid inputs work */
    tu_assert_ok(tg_module_forward(tp, v1, x2));
    tu_assert_ok(tg_module_forward(tp, v2, x2));
    tu_assert_ok(tg_module_forward(tp, ca, x3));
    tu_assert_ok(tg_module_forward(tp, wr, x3));
    tu_assert_ok(tg_module_forward(tp, mh, x3));
    /* wrong rank */
    EXPECT_NULL(tg_module_forward(tp, v1, x3), "SelfAttention_v1", "input");
    EXPECT_NULL(tg_module_forward(tp, v1, x1), "SelfAttention_v1", "input");
    EXPECT_NULL(tg_module_forward(tp, v2, x3), "SelfAttention_v2", "input");
    EXPECT_NULL(tg_module_forward(tp, ca, x2), "CausalAttention", "input");
    EXPECT_NULL(tg_module_forward(tp, wr, x2), "MultiHeadAttentionWrapper", "input");
    EXPECT_NULL(tg_module_forward(tp, mh, x2), "MultiHeadAttention", "input");
    EXPECT_NULL(tg_module_forward(tp, mh, x4), "MultiHeadAttention", "input");
    /* wrong last dim */
    EXPECT_NULL(tg_module_forward(tp, v1, x2w), "d_in");
    EXPECT_NULL(tg_module_forward(tp, v2, x2w), "d_in");
    EXPECT_NULL(tg_module_forward(tp, ca, x3w), "d_in");
    EXPECT_NULL(tg_module_forward(tp, wr, x3w), "d_in");
    EXPECT_NULL(tg_module_forward(tp, mh, x3w), "d_in");
    /* T > context_length */
    EXPECT_NULL(tg_module_forward(tp, ca, xlong), "context_length");
    EXPECT_NULL(tg_module_forward(tp, wr, xlong), "context_length");
    EXPECT_NULL(tg_module_forward(tp, mh, xlong), "context_length");
    /* NULL input */
    EXPECT_NULL(tg_module_forward(tp, mh, NULL), "NULL");
    /* dropout op */
    EXPECT_NULL(tg_dropout(tp, x2, 1.0, NULL), "dropout");
    EXPECT_NULL(tg_dropout(tp, x2, -0.1, NULL), "dropout");
    tg_tape_free(tp);
}

static void test_bad_sgd(void **state) {
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(0);
    tg_module *m = tg_linear_new(tp, 4, 3, true);
    tu_assert_ok(m);
    EXPECT_NULL(tg_sgd_new(tp, m, (tg_sgd_options){-0.1, 0, 0, 0, false}), "learning rate");
    EXPECT_NULL(tg_sgd_new(tp, m, (tg_sgd_options){0.1, 0, 0, 0, true}), "Nesterov");
    EXPECT_NULL(tg_sgd_new(tp, m, (tg_sgd_options){0.1, 0.9, 0.1, 0, true}), "Nesterov");
    EXPECT_NULL(tg_sgd_new(tp, m, (tg_sgd_options){0.1, -0.5, 0, 0, false}), "momentum");
    EXPECT_NULL(tg_sgd_new(tp, m, (tg_sgd_options){0.1, 0, 0, -0.01, false}), "weight_decay");
    EXPECT_NULL(tg_sgd_new(tp, m, (tg_sgd_options){NAN, 0, 0, 0, false}), "learning rate");
    EXPECT_NULL(tg_sgd_new(tp, NULL, (tg_sgd_options){0.1, 0, 0, 0, false}), "NULL");
    tu_assert_ok(tg_sgd_new(tp, m, (tg_sgd_options){0.1, 0.9, 0, 0.01, true}));
    /* parameters must be leaves; at least one must require grad */
    tg_tensor *plain = tg_zeros(tp, TG_F32, 1, (int64_t[]){3});
    tg_tensor *w = tg_module_get_parameter(m, "weight");
    tg_tensor *nonleaf = tg_mul_scalar(tp, w, 2.0);
    tg_tensor *ps[2] = {w, nonleaf};
    EXPECT_NULL(tg_sgd_new_params(tp, 2, ps, (tg_sgd_options){0.1, 0, 0, 0, false}), "parameter 1", "non-leaf");
    EXPECT_NULL(tg_sgd_new_params(tp, 1, &plain, (tg_sgd_options){0.1, 0, 0, 0, false}), "empty parameter list");
    tg_tape_free(tp);
}

/* Bad module inputs and configurations: NULL and a message, never a crash. */
static void test_bad_module_inputs(void **state) {
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(1);
    tg_module *mha = tg_mha_new(tp, 3, 4, 6, 0.0, 2, false);
    tu_assert_ok(mha);
    /* an integer input */
    tg_tensor *xi = tg_zeros(tp, TG_I64, 3, (int64_t[]){1, 6, 3});
    EXPECT_NULL(tg_module_forward(tp, mha, xi), "MultiHeadAttention", "float32 or float64", "int64");
    /* no tokens */
    tg_tensor *x0 = tg_zeros(tp, TG_F32, 3, (int64_t[]){1, 0, 3});
    EXPECT_NULL(tg_module_forward(tp, mha, x0), "MultiHeadAttention", "no tokens");
    /* one module per head: an absurd head count is refused before allocating */
    EXPECT_NULL(tg_mha_wrapper_new(tp, 3, 1, 6, 0.0, 100000, false), "100000 heads");
    /* a container has no forward of its own: the wrapper's "heads" list */
    tg_module *w = tg_mha_wrapper_new(tp, 3, 2, 6, 0.0, 2, false);
    tu_assert_ok(w);
    tg_tensor *x = tg_zeros(tp, TG_F32, 3, (int64_t[]){1, 6, 3});
    EXPECT_NULL(tg_module_forward(tp, tg_module_get_submodule(w, "heads"), x), "ModuleList", "no forward");
    /* sizes whose weights cannot exist */
    EXPECT_NULL(tg_linear_new(tp, (int64_t)1 << 40, (int64_t)1 << 40, false), "too large");
    tg_tape_free(tp);
}

/* ---- (f) state_dict files, train/eval ---------------------------------------------------- */

static char g_tmpdir[64];

static void tmp_path(char *buf, size_t n, const char *name) {
    if (!g_tmpdir[0]) {
        strcpy(g_tmpdir, "/tmp/tapegrad_test_nn_XXXXXX");
        if (!mkdtemp(g_tmpdir)) fail_msg("mkdtemp failed");
    }
    snprintf(buf, n, "%s/%s", g_tmpdir, name);
}

/* Fails unless every state_dict entry of a equals b's exactly. */
static void assert_same_state_(tg_tape *tp, const tg_module *a, const tg_module *b, const char *file, int line) {
    tg_named_list la, lb;
    if (tg_module_state_dict(tp, a, &la) != TG_OK || tg_module_state_dict(tp, b, &lb) != TG_OK || la.n != lb.n) {
        print_error("state_dicts differ in size or could not be listed\n");
        _fail(file, line);
    }
    for (int i = 0; i < la.n; i++) {
        if (strcmp(la.names[i], lb.names[i]) != 0) {
            print_error("state_dict key %d: %s vs %s\n", i, la.names[i], lb.names[i]);
            _fail(file, line);
        }
        tu_assert_close_(la.tensors[i], lb.tensors[i], 0.0, 0.0, la.names[i], file, line);
    }
}
#define assert_same_state(tp, a, b) assert_same_state_((tp), (a), (b), __FILE__, __LINE__)

static tg_module *build_kind(tg_tape *tp, int kind, uint64_t seed) {
    tg_manual_seed(seed);
    switch (kind) {
    case 0: return tg_linear_new(tp, 3, 2, true);
    case 1: return tg_self_attention_v1_new(tp, 3, 2);
    case 2: return tg_self_attention_v2_new(tp, 3, 2, true);
    case 3: return tg_causal_attention_new(tp, 3, 2, 6, 0.0, false);
    case 4: return tg_mha_wrapper_new(tp, 3, 2, 6, 0.0, 2, true);
    default: return tg_mha_new(tp, 3, 4, 6, 0.0, 2, true);
    }
}

static void test_state_dict_round_trip(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    int64_t s2[2] = {6, 3}, s3[3] = {2, 6, 3};
    tg_generator *g = tg_generator_new(3);
    tg_tensor *x2 = tg_rand(model, TG_F32, 2, s2, g), *x3 = tg_rand(model, TG_F32, 3, s3, g);
    tg_generator_free(g);
    for (int kind = 0; kind < 6; kind++) {
        char path[256], name[32];
        snprintf(name, sizeof name, "m%d.safetensors", kind);
        tmp_path(path, sizeof path, name);
        tg_module *a = build_kind(model, kind, 123), *b = build_kind(model, kind, 7);
        tu_assert_ok(a);
        tu_assert_ok(b);
        tg_module_train(a, false);
        tg_module_train(b, false);
        tg_tensor *x = (kind == 1 || kind == 2) ? x2 : x3;
        tg_tensor *ya = tg_module_forward(tp, a, x);
        tu_assert_ok(ya);
        if (tg_module_save(a, path) != TG_OK) fail_msg("save %s: %s", path, tg_last_error());
        if (tg_module_load(b, path) != TG_OK) fail_msg("load %s: %s", path, tg_last_error());
        assert_same_state(tp, a, b);
        tu_assert_close(tg_module_forward(tp, b, x), ya, 0.0, 0.0, "output after load");
        /* the file holds PyTorch's state_dict keys, in a safetensors file we can read back */
        tg_safetensors st;
        tg_named_list sd;
        assert_int_equal(tg_safetensors_load(tp, path, &st), TG_OK);
        assert_int_equal(tg_module_state_dict(tp, a, &sd), TG_OK);
        assert_int_equal(st.n, sd.n);
        for (int i = 0; i < sd.n; i++) {
            tg_tensor *t = tg_safetensors_get(&st, sd.names[i]);
            if (!t) fail_msg("saved file lacks key %s", sd.names[i]);
            tu_assert_close(t, sd.tensors[i], 0.0, 0.0, sd.names[i]);
        }
        unlink(path);
    }
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* Writes the bytes of a committed PyTorch-written reference file to the temp
 * dir: tests/ref/safetensors.json holds each st_*.safetensors file's bytes in
 * hex (tools/reference/safetensors_files.py), so no path to tests/ref is
 * needed at run time. */
static void write_ref_file(const char *fname, char *path, size_t n) {
    json_t *ref = tu_load_ref("safetensors.json");
    const json_t *files = json_object_get(ref, "files");
    const char *hex = NULL;
    for (size_t i = 0; i < json_array_size(files); i++) {
        const json_t *f = json_array_get(files, i);
        if (strcmp(json_string_value(json_object_get(f, "file")), fname) == 0)
            hex = json_string_value(json_object_get(f, "hex"));
    }
    if (!hex) fail_msg("safetensors.json has no %s", fname);
    tmp_path(path, n, fname);
    FILE *fp = fopen(path, "wb");
    if (!fp) fail_msg("cannot write %s", path);
    for (size_t i = 0; hex[2 * i] && hex[2 * i + 1]; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) fail_msg("bad hex in safetensors.json");
        fputc((int)v, fp);
    }
    fclose(fp);
    json_decref(ref);
}

/* st_linear.safetensors: PyTorch's Linear(3, 2) after torch.manual_seed(123)
 * (tools/reference/safetensors_files.py), with metadata {"format": "pt"}. */
static void test_state_dict_pytorch_file(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    char path[256];
    write_ref_file("st_linear.safetensors", path, sizeof path);
    tg_module *want = build_kind(model, 0, 123), *m = build_kind(model, 0, 0);
    tu_assert_ok(want);
    tu_assert_ok(m);
    if (tg_module_load(m, path) != TG_OK) fail_msg("load st_linear.safetensors: %s", tg_last_error());
    assert_same_state(tp, m, want);
    /* and PyTorch 1.13's figures for seed 123, Linear(3,2) */
    static const float w[6] = {-0.23542964f, 0.01912448f, -0.28674594f, 0.21772662f, -0.49193421f, 0.42322308f};
    static const float b[2] = {-0.41964141f, -0.45901766f};
    int64_t ws[2] = {2, 3}, bs[1] = {2};
    tu_assert_close(tg_module_get_parameter(m, "weight"), tg_from_f32(tp, 2, ws, w), 0.0, 1e-8, "weight");
    tu_assert_close(tg_module_get_parameter(m, "bias"), tg_from_f32(tp, 1, bs, b), 0.0, 1e-8, "bias");
    /* modules of another shape refuse it, naming the key */
    tg_module *wide = tg_linear_new(model, 4, 2, true);
    tg_clear_error();
    tu_assert_status_error(tg_module_load(wide, path), "weight");
    tg_module *nobias = tg_linear_new(model, 3, 2, false);
    tg_clear_error();
    tu_assert_status_error(tg_module_load(nobias, path), "unexpected", "bias");
    unlink(path);
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* Loads path into m expecting failure with a message containing key and
 * what; m must be unchanged. */
static void expect_load_error_(tg_tape *model, tg_tape *tp, tg_module *m, int kind, const char *path,
                               const char *what, const char *key, const char *file, int line) {
    /* an untouched twin to compare with: same seed as m was built with */
    tg_module *twin = build_kind(model, kind, 7);
    tg_clear_error();
    int st = tg_module_load(m, path);
    tu_assert_error_(st != TG_OK, file, line, what, key, (const char *)NULL);
    assert_same_state_(tp, m, twin, file, line);
}
#define expect_load_error(model, tp, m, kind, path, what, key) \
    expect_load_error_((model), (tp), (m), (kind), (path), (what), (key), __FILE__, __LINE__)

static void test_state_dict_load_errors(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    char p_nobias[256], p_bias[256], p_wide[256], p_mha_nobias[256], p_mha_wide[256];
    tmp_path(p_nobias, sizeof p_nobias, "linear_nobias.safetensors");
    tmp_path(p_bias, sizeof p_bias, "linear_bias.safetensors");
    tmp_path(p_wide, sizeof p_wide, "linear_wide.safetensors");
    tmp_path(p_mha_nobias, sizeof p_mha_nobias, "mha_nobias.safetensors");
    tmp_path(p_mha_wide, sizeof p_mha_wide, "mha_wide.safetensors");
    tg_manual_seed(1);
    assert_int_equal(tg_module_save(tg_linear_new(model, 3, 2, false), p_nobias), TG_OK);
    assert_int_equal(tg_module_save(tg_linear_new(model, 3, 2, true), p_bias), TG_OK);
    assert_int_equal(tg_module_save(tg_linear_new(model, 4, 2, true), p_wide), TG_OK);
    assert_int_equal(tg_module_save(tg_mha_new(model, 3, 4, 6, 0.0, 2, false), p_mha_nobias), TG_OK);
    assert_int_equal(tg_module_save(tg_mha_new(model, 5, 4, 6, 0.0, 2, true), p_mha_wide), TG_OK);

    /* kind 0: Linear(3,2,bias); kind 5: MHA(3,4,6,0,2,bias), both seed 7 */
    tg_module *lin = build_kind(model, 0, 7), *mha = build_kind(model, 5, 7);
    tu_assert_ok(lin);
    tu_assert_ok(mha);
    expect_load_error(model, tp, lin, 0, p_nobias, "missing", "bias");
    expect_load_error(model, tp, lin, 0, p_wide, "weight", "(2,4)");
    expect_load_error(model, tp, mha, 5, p_mha_nobias, "missing", "W_query.bias");
    expect_load_error(model, tp, mha, 5, p_mha_wide, "size", "W_query.weight");
    tg_module *lin_nb = tg_linear_new(model, 3, 2, false);
    tg_clear_error();
    tu_assert_status_error(tg_module_load(lin_nb, p_bias), "unexpected", "bias");
    /* a causal module's file lacks the MHA's out_proj */
    char p_causal[256];
    tmp_path(p_causal, sizeof p_causal, "causal.safetensors");
    assert_int_equal(tg_module_save(tg_causal_attention_new(model, 3, 4, 6, 0.0, true), p_causal), TG_OK);
    expect_load_error(model, tp, mha, 5, p_causal, "missing", "out_proj.weight");
    tg_module *ca = tg_causal_attention_new(model, 3, 4, 6, 0.0, false);
    tu_assert_ok(ca);
    tg_clear_error();
    tu_assert_status_error(tg_module_load(ca, p_mha_nobias), "unexpected", "out_proj."); /* .weight or .bias: file order */
    /* missing file */
    tmp_path(p_causal, sizeof p_causal, "does_not_exist.safetensors");
    tg_clear_error();
    tu_assert_status_error(tg_module_load(ca, p_causal), "does_not_exist");
    unlink(p_nobias);
    unlink(p_bias);
    unlink(p_wide);
    unlink(p_mha_nobias);
    unlink(p_mha_wide);
    tmp_path(p_causal, sizeof p_causal, "causal.safetensors");
    unlink(p_causal);
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* Every module in the tree has training == want; prints the path of the first that does not. */
static bool all_training(const tg_module *m, bool want, const char *path, char *bad, size_t n) {
    if (tg_module_is_training(m) != want) {
        snprintf(bad, n, "%s (%s)", path[0] ? path : "<root>", tg_module_type_name(m));
        return false;
    }
    for (int i = 0; i < tg_module_num_children(m); i++) {
        char sub[256];
        int len = snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", tg_module_child_name(m, i));
        if (len < 0 || (size_t)len >= sizeof sub) fail_msg("module path too long");
        if (!all_training(tg_module_child(m, i), want, sub, bad, n)) return false;
    }
    return true;
}

static void test_train_eval_propagation(void **state) {
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    char bad[300];
    tg_manual_seed(42);
    tg_module *w = tg_mha_wrapper_new(model, 3, 2, 6, 0.5, 3, true);
    tu_assert_ok(w);
    if (!all_training(w, true, "", bad, sizeof bad)) fail_msg("new module: %s is not in training mode", bad);
    tg_module_train(w, false);
    if (!all_training(w, false, "", bad, sizeof bad)) fail_msg("after eval: %s is still training", bad);
    /* heads.2.dropout specifically */
    tg_module *heads = tg_module_child(w, 0);
    assert_string_equal(tg_module_child_name(w, 0), "heads");
    assert_int_equal(tg_module_num_children(heads), 3);
    const tg_module *d2 = tg_module_get_submodule(w, "heads.2.dropout");
    assert_non_null(d2);
    assert_false(tg_module_is_training(d2));
    tg_module_train(w, true);
    if (!all_training(w, true, "", bad, sizeof bad)) fail_msg("after train: %s is not training", bad);

    /* behaviour follows the flags: eval output equals the p=0 twin's */
    tg_manual_seed(42);
    tg_module *w0 = tg_mha_wrapper_new(model, 3, 2, 6, 0.0, 3, true);
    int64_t s[3] = {2, 6, 3};
    tg_tensor *x = tg_rand(model, TG_F32, 3, s, NULL);
    tg_generator *g = tg_generator_new(8);
    tg_module_set_generator(w, g);
    tg_tensor *y0 = tg_module_forward(tp, w0, x);
    tg_tensor *yt = tg_module_forward(tp, w, x);
    tu_assert_ok(yt);
    int64_t differ = 0;
    for (int64_t i = 0; i < tg_numel(yt); i++) differ += tg_item_at(yt, i) != tg_item_at(y0, i);
    if (!differ) fail_msg("wrapper p=0.5 in training mode equals the p=0 output");
    tg_module_train(w, false);
    tu_assert_close(tg_module_forward(tp, w, x), y0, 0.0, 0.0, "wrapper eval vs p=0");
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* ---- (g) the attention constructors: config and positional forms ------------------------------- */

enum { CAUSAL, WRAPPER, MHA };

/* The attention module of kind from c, through the config constructor or the positional one. */
static tg_module *attention_from(tg_tape *tp, int kind, tg_attention_config c, bool positional) {
    if (!positional) {
        if (kind == CAUSAL) return tg_causal_attention_new_config(tp, c);
        return kind == WRAPPER ? tg_mha_wrapper_new_config(tp, c) : tg_mha_new_config(tp, c);
    }
    if (kind == CAUSAL) return tg_causal_attention_new(tp, c.d_in, c.d_out, c.context_length, c.dropout, c.qkv_bias);
    if (kind == WRAPPER)
        return tg_mha_wrapper_new(tp, c.d_in, c.d_out, c.context_length, c.dropout, c.num_heads, c.qkv_bias);
    return tg_mha_new(tp, c.d_in, c.d_out, c.context_length, c.dropout, c.num_heads, c.qkv_bias);
}

/* Both forms after the same seed: the same weights, repr and (training-mode,
 * same dropout draws) output. */
static void assert_same_module_(tg_tape *tp, int kind, tg_attention_config config, tg_attention_config positional,
                                const tg_tensor *x, const char *file, int line) {
    tg_module *m[2];
    tg_tensor *y[2];
    char repr[2][2048];
    const tg_attention_config c[2] = {config, positional};
    for (int k = 0; k < 2; k++) {
        tg_manual_seed(5);
        m[k] = attention_from(tp, kind, c[k], k == 1);
        tu_assert_ok_(m[k], file, line);
        assert_true(tg_module_repr(m[k], repr[k], sizeof repr[k]) < (int)sizeof repr[k]);
        tg_manual_seed(9);
        y[k] = tg_module_forward(tp, m[k], (tg_tensor *)x);
        tu_assert_ok_(y[k], file, line);
    }
    assert_string_equal(repr[0], repr[1]);
    assert_same_state_(tp, m[0], m[1], file, line);
    tu_assert_close_(y[0], y[1], 0.0, 0.0, repr[0], file, line);
}
#define assert_same_module(tp, kind, config, positional, x) \
    assert_same_module_((tp), (kind), (config), (positional), (x), __FILE__, __LINE__)

static void test_attention_config_same_modules(void **state) {
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(3);
    tg_tensor *x = tg_rand(tp, TG_F32, 3, (const int64_t[]){2, 5, 3}, g);
    tg_generator_free(g);
    const tg_attention_config c = {
        .d_in = 3, .d_out = 4, .context_length = 6, .num_heads = 2, .dropout = 0.25, .qkv_bias = true};
    assert_same_module(tp, WRAPPER, c, c, x);
    assert_same_module(tp, MHA, c, c, x);
    /* CausalAttention is one head: num_heads 0 or 1 in its config */
    tg_attention_config one = c, none = c;
    one.num_heads = 1;
    none.num_heads = 0;
    assert_same_module(tp, CAUSAL, one, one, x);
    assert_same_module(tp, CAUSAL, none, one, x);
    /* the defaults: no dropout, no qkv bias */
    tg_module *m = tg_mha_new_config(tp, (tg_attention_config){.d_in = 3, .d_out = 4, .context_length = 6,
                                                                .num_heads = 2});
    tu_assert_ok(m);
    char buf[512];
    tg_module_repr(tg_module_get_submodule(m, "dropout"), buf, sizeof buf);
    assert_string_equal(buf, "Dropout(p=0.0, inplace=False)");
    assert_null(tg_module_get_parameter(m, "W_query.bias"));
    tg_tape_free(tp);
}

/* Each bad setting: both forms refuse it, with one message. */
static void test_attention_config_errors(void **state) {
    (void)state;
    tg_tape *tp = tg_tape_new();
    const tg_attention_config ok = {.d_in = 3, .d_out = 4, .context_length = 6, .num_heads = 2};
    static const struct {
        int kind;
        const char *field; /* the field set to value */
        double value;
        const char *want;
    } bad[] = {
        {MHA, "d_out", 3, "MultiHeadAttention: d_out (3) must be divisible by num_heads (2)"},
        {MHA, "num_heads", 3, "MultiHeadAttention: d_out (4) must be divisible by num_heads (3)"},
        {CAUSAL, "dropout", -0.1, "CausalAttention: dropout probability -0.1 is outside [0, 1)"},
        {WRAPPER, "dropout", -0.1, "MultiHeadAttentionWrapper: dropout probability -0.1 is outside [0, 1)"},
        {MHA, "dropout", -0.1, "MultiHeadAttention: dropout probability -0.1 is outside [0, 1)"},
        {MHA, "dropout", 1.0, "dropout probability 1 is outside [0, 1)"},
        {MHA, "dropout", NAN, "dropout probability nan is outside [0, 1)"},
        {CAUSAL, "d_in", 0, "CausalAttention: d_in must be positive, got 0"},
        {WRAPPER, "d_in", -1, "MultiHeadAttentionWrapper: d_in must be positive, got -1"},
        {MHA, "d_in", 0, "MultiHeadAttention: d_in must be positive, got 0"},
        {CAUSAL, "d_out", 0, "CausalAttention: d_out must be positive, got 0"},
        {WRAPPER, "d_out", 0, "MultiHeadAttentionWrapper: d_out must be positive, got 0"},
        {MHA, "d_out", -1, "MultiHeadAttention: d_out must be positive, got -1"},
        {CAUSAL, "context_length", 0, "CausalAttention: context_length must be positive, got 0"},
        {WRAPPER, "context_length", 0, "MultiHeadAttentionWrapper: context_length must be positive, got 0"},
        {MHA, "context_length", -1, "MultiHeadAttention: context_length must be positive, got -1"},
        {MHA, "context_length", 70000, "MultiHeadAttention: context_length 70000 is too large"},
        {WRAPPER, "num_heads", 0, "MultiHeadAttentionWrapper: num_heads must be positive, got 0"},
        {MHA, "num_heads", 0, "MultiHeadAttention: num_heads must be positive, got 0"},
        {WRAPPER, "num_heads", 100000, "MultiHeadAttentionWrapper: 100000 heads (one module each) is more than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tg_attention_config c = ok;
        if (bad[i].kind == CAUSAL) c.num_heads = 1;
        const char *f = bad[i].field;
        double v = bad[i].value;
        if (!strcmp(f, "d_in")) c.d_in = (int64_t)v;
        if (!strcmp(f, "d_out")) c.d_out = (int64_t)v;
        if (!strcmp(f, "context_length")) c.context_length = (int64_t)v;
        if (!strcmp(f, "num_heads")) c.num_heads = (int64_t)v;
        if (!strcmp(f, "dropout")) c.dropout = v;
        char positional[256];
        EXPECT_NULL(attention_from(tp, bad[i].kind, c, true), bad[i].want);
        snprintf(positional, sizeof positional, "%s", tg_last_error());
        EXPECT_NULL(attention_from(tp, bad[i].kind, c, false), bad[i].want);
        assert_string_equal(tg_last_error(), positional);
    }
    /* CausalAttention's config: one head, so num_heads 0 or 1 */
    tg_attention_config two = ok;
    EXPECT_NULL(tg_causal_attention_new_config(tp, two), "CausalAttention: num_heads must be 0 or 1 (one head), got 2");
    two.num_heads = -1;
    EXPECT_NULL(tg_causal_attention_new_config(tp, two), "num_heads must be 0 or 1", "got -1");
    tg_tape_free(tp);
}

/* ---- main ----------------------------------------------------------------------------------- */

static int teardown(void **state) {
    (void)state;
    json_decref(g_modules);
    json_decref(g_sgd);
    if (g_tmpdir[0]) rmdir(g_tmpdir);
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_gradcheck_linear),
        cmocka_unit_test(test_gradcheck_sa_v1),
        cmocka_unit_test(test_gradcheck_sa_v2),
        cmocka_unit_test(test_gradcheck_causal),
        cmocka_unit_test(test_gradcheck_mha_wrapper),
        cmocka_unit_test(test_gradcheck_mha),
        cmocka_unit_test(test_dropout_statistics),
        cmocka_unit_test(test_dropout_mha_modes),
        cmocka_unit_test(test_attention_exact),
        cmocka_unit_test(test_bad_constructors),
        cmocka_unit_test(test_bad_forward),
        cmocka_unit_test(test_bad_sgd),
        cmocka_unit_test(test_bad_module_inputs),
        cmocka_unit_test(test_state_dict_round_trip),
        cmocka_unit_test(test_state_dict_pytorch_file),
        cmocka_unit_test(test_state_dict_load_errors),
        cmocka_unit_test(test_train_eval_propagation),
        cmocka_unit_test(test_attention_config_same_modules),
        cmocka_unit_test(test_attention_config_errors),
    };
    const size_t nfixed = sizeof fixed / sizeof fixed[0];
    g_modules = tu_load_ref("modules.json");
    g_sgd = tu_load_ref("sgd.json");
    const json_t *cases = json_object_get(g_modules, "cases"), *runs = json_object_get(g_sgd, "runs");
    size_t nc = json_array_size(cases), nr = json_array_size(runs);
    if (nc == 0 || nr == 0) {
        fprintf(stderr, "modules.json / sgd.json: no cases (%zu, %zu)\n", nc, nr);
        return 1;
    }
    size_t n = nc + nr + nfixed;
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    char (*names)[128] = calloc(nc + nr, sizeof *names);
    if (!tests || !names) return 1;
    size_t k = 0;
    for (size_t i = 0; i < nc; i++, k++) {
        const json_t *c = json_array_get(cases, i);
        snprintf(names[k], sizeof names[k], "modules/%s", json_string_value(json_object_get(c, "name")));
        tests[k].name = names[k];
        tests[k].test_func = test_module_case;
        tests[k].initial_state = (void *)c;
    }
    for (size_t i = 0; i < nr; i++, k++) {
        const json_t *r = json_array_get(runs, i);
        snprintf(names[k], sizeof names[k], "sgd/%s", json_string_value(json_object_get(r, "name")));
        tests[k].name = names[k];
        tests[k].test_func = test_sgd_run;
        tests[k].initial_state = (void *)r;
    }
    for (size_t i = 0; i < nfixed; i++, k++) tests[k] = fixed[i];
    int rc = _cmocka_run_group_tests("nn", tests, n, NULL, teardown);
    free(tests);
    free(names);
    return rc;
}
