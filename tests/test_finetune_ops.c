/* The ops the fine-tuning chapters add, against PyTorch 1.13:
 * tests/ref/finetune_ops.json (tools/reference/finetune_ops.py).
 *
 *   - tg_gather, tg_index_select: outputs and x's gradient for PyTorch's
 *     grad_output, to the bit in float32 and float64 (repeated indices, so
 *     the backward adds several gradients into one element in PyTorch's
 *     order), grad_fn names, gradcheck in float64;
 *   - tg_sum / tg_sum_dims of bool, uint8 and int64 tensors: int64, exact,
 *     not recorded; mean still refuses them;
 *   - every tg_init_* after tg_manual_seed (or on a generator of the same
 *     seed): PyTorch's draws to the bit;
 *   - tg_retain_grad: the retained gradients of intermediates (a view among
 *     them), after one backward and after a second one (retain_graph);
 *   - every error message.
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
    ref = tu_load_ref("finetune_ops.json");
    return ref ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(ref);
    return 0;
}

static tg_dtype jdtype(const json_t *o) { return strcmp(json_string_value(tu_json_get(o, "dtype")), "float32") ? TG_F64 : TG_F32; }

/* got equals want to the bit: same dtype, shape, values (float32 values are
 * exact in double, so comparing as doubles with no tolerance is bitwise). */
static void assert_same(const tg_tensor *got, const tg_tensor *want, const char *what, int i)
{
    char buf[96];
    snprintf(buf, sizeof buf, "%s (case %d)", what, i);
    if (!got) fail_msg("%s: NULL (%s)", buf, tg_last_error());
    if (got->dtype != want->dtype)
        fail_msg("%s: dtype %s, want %s", buf, tg_dtype_name(got->dtype), tg_dtype_name(want->dtype));
    tu_assert_close(got, want, 0.0, 0.0, buf);
}

/* An int64 tensor equal to want, element for element as int64. */
static void assert_same_i64(const tg_tensor *got, const tg_tensor *want, const char *what, int i)
{
    if (!got) fail_msg("%s (case %d): NULL (%s)", what, i, tg_last_error());
    assert_int_equal(got->dtype, TG_I64);
    assert_true(tg_same_shape(got, want));
    const int64_t *g = tg_data_ptr(got), *w = tg_data_ptr(want);
    for (int64_t k = 0; k < tg_numel(want); k++)
        if (g[k] != w[k])
            fail_msg("%s (case %d): element %lld is %lld, want %lld", what, i, (long long)k, (long long)g[k],
                     (long long)w[k]);
}

/* ---- gather, index_select ------------------------------------------------------------------ */

typedef tg_tensor *(*index_op)(tg_tape *tp, tg_tensor *x, int dim, const tg_tensor *index);

static void check_indexing(const char *key, index_op op, const char *grad_fn)
{
    const json_t *cases = tu_json_get(ref, key);
    assert_true(json_array_size(cases) > 0);
    size_t i;
    const json_t *c;
    int n32 = 0;
    json_array_foreach(cases, i, c) {
        tg_tape *tp = tg_tape_new();
        tg_tensor *base = tu_json_tensor(tp, c, "x"), *index = tu_json_tensor(tp, c, "index");
        assert_int_equal(base->dtype, jdtype(c));
        n32 += base->dtype == TG_F32;
        assert_int_equal(tg_requires_grad_(base, true), TG_OK);
        tg_tensor *x = json_is_true(tu_json_get(c, "transpose")) ? tg_transpose(tp, base, 0, 1) : base;
        int dim = (int)json_integer_value(tu_json_get(c, "dim"));
        tg_tensor *out = op(tp, x, dim, index);
        assert_same(out, tu_json_tensor(tp, c, "output"), key, (int)i);
        assert_string_equal(tg_grad_fn_name(out), json_string_value(tu_json_get(c, "grad_fn")));
        assert_string_equal(tg_grad_fn_name(out), grad_fn);
        assert_int_equal(tg_backward(out, tu_json_tensor(tp, c, "grad_output"), false), TG_OK);
        assert_same(base->grad, tu_json_tensor(tp, c, "grad_x"), "grad", (int)i);
        /* the same op on a tensor that needs no grad: the same values, no node */
        tg_tensor *plain = op(tp, json_is_true(tu_json_get(c, "transpose")) ? tg_transpose(tp, tu_json_tensor(tp, c, "x"), 0, 1)
                                                                    : tu_json_tensor(tp, c, "x"),
                              dim, index);
        assert_same(plain, tu_json_tensor(tp, c, "output"), key, (int)i);
        assert_null(tg_grad_fn_name(plain));
        tg_tape_free(tp);
    }
    assert_true(n32 > 0);
}

static void test_gather_ref(void **state)
{
    (void)state;
    check_indexing("gather", tg_gather, "GatherBackward0");
}

static void test_index_select_ref(void **state)
{
    (void)state;
    check_indexing("index_select", tg_index_select, "IndexSelectBackward0");
}

/* A second consumer of x: the gather's gradient (scatter-added into zeros
 * first, as PyTorch's) joins the other gradient in x's buffer. */
static void test_gather_accumulates(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_from_f32(tp, 2, SH(2, 3), (const float[]){1, 2, 3, 4, 5, 6});
    tg_requires_grad_(x, true);
    tg_tensor *idx = tg_from_data(tp, TG_I64, 2, SH(2, 4), (const int64_t[]){0, 2, 2, 2, 1, 1, 0, 1});
    tg_tensor *y = tg_gather(tp, x, 1, idx);
    const float want_y[] = {1, 3, 3, 3, 5, 5, 4, 5};
    for (int k = 0; k < 8; k++) assert_true(tg_item_at(y, k) == want_y[k]);
    tg_tensor *loss = tg_add(tp, tg_sum(tp, y), tg_sum(tp, tg_mul_scalar(tp, x, 10)));
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    const float want_g[] = {11, 10, 13, 11, 13, 10};
    for (int k = 0; k < 6; k++) assert_true(tg_item_at(x->grad, k) == want_g[k]);
    /* a 0-dim x and index */
    tg_tensor *s = tg_scalar(tp, TG_F64, 2.5);
    tg_tensor *z = tg_gather(tp, s, -1, tg_scalar(tp, TG_I64, 0));
    assert_non_null(z);
    assert_int_equal(z->ndim, 0);
    assert_true(tg_item(z) == 2.5);
    /* integer tensors gather too (never recorded) */
    tg_tensor *xi = tg_from_data(tp, TG_I64, 1, SH(3), (const int64_t[]){7, 8, 9});
    tg_tensor *zi = tg_index_select(tp, xi, 0, tg_from_data(tp, TG_I64, 1, SH(2), (const int64_t[]){2, 2}));
    assert_int_equal(zi->dtype, TG_I64);
    assert_true(tg_item_at(zi, 0) == 9 && tg_item_at(zi, 1) == 9);
    tg_tape_free(tp);
}

/* ---- gradcheck (float64) ------------------------------------------------------------------- */

typedef struct {
    index_op op;
    int dim;
    bool transpose;
    const tg_tensor *index;
} gc_ctx;

static tg_tensor *gc_fn(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n;
    const gc_ctx *c = ctx;
    tg_tensor *x = c->transpose ? tg_transpose(tp, in[0], 0, 1) : in[0];
    return tg_tanh(tp, c->op(tp, x, c->dim, c->index)); /* something nonlinear after it */
}

static void run_gradcheck(tg_tape *tp, index_op op, int nd, const int64_t *shape, bool transpose, int dim,
                          const tg_tensor *index, tg_generator *g)
{
    tg_tensor *x = tg_randn(tp, TG_F64, nd, shape, g);
    tg_requires_grad_(x, true);
    gc_ctx c = {op, dim, transpose, index};
    tg_gradcheck_result res;
    if (tg_gradcheck_call(gc_fn, &c, 1, &x, NULL, &res) != TG_OK) fail_msg("gradcheck: %s", tg_last_error());
    if (!res.passed) fail_msg("gradcheck: %s", res.message);
}

static void test_gradcheck(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(5);
    tg_tensor *i47 = tg_from_data(tp, TG_I64, 2, SH(4, 7),
                                  (const int64_t[]){0, 4, 4, 1, 2, 4, 0, 3, 3, 3, 3, 1, 0, 2, 1, 1, 4, 4, 4, 0,
                                                    2, 2, 0, 1, 3, 3, 4, 4});
    run_gradcheck(tp, tg_gather, 2, SH(4, 5), false, 1, i47, g);
    run_gradcheck(tp, tg_gather, 2, SH(5, 4), true, -1, i47, g);
    tg_tensor *i32 = tg_from_data(tp, TG_I64, 3, SH(3, 2, 2),
                                  (const int64_t[]){1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1});
    run_gradcheck(tp, tg_gather, 3, SH(3, 2, 4), false, 1, tg_narrow(tp, i32, 2, 0, 2), g);
    run_gradcheck(tp, tg_gather, 3, SH(4, 3, 2), false, 0, tg_narrow(tp, i32, 1, 0, 2), g);
    tg_tensor *iv = tg_from_data(tp, TG_I64, 1, SH(6), (const int64_t[]){3, 0, 3, 2, 3, 1});
    run_gradcheck(tp, tg_index_select, 2, SH(4, 3), false, 0, iv, g);
    run_gradcheck(tp, tg_index_select, 3, SH(2, 4, 3), false, 1, iv, g);
    run_gradcheck(tp, tg_index_select, 2, SH(4, 3), true, -1, iv, g);
    run_gradcheck(tp, tg_index_select, 1, SH(4), false, 0, iv, g);
    tg_generator_free(g);
    tg_tape_free(tp);
}

static void test_indexing_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_zeros(tp, TG_F32, 2, SH(3, 5));
    tg_tensor *bad = tg_from_data(tp, TG_I64, 2, SH(2, 3), (const int64_t[]){0, 1, 2, 4, 7, 0});
    tu_assert_null_error(tg_gather(tp, x, 1, bad), "gather: index 7 is out of bounds for dimension 1 with size 5",
                         "[1, 1]");
    tg_tensor *neg = tg_from_data(tp, TG_I64, 2, SH(1, 2), (const int64_t[]){0, -1});
    tu_assert_null_error(tg_gather(tp, x, -1, neg), "gather: index -1 is out of bounds for dimension 1 with size 5",
                         "[0, 1]");
    tu_assert_null_error(tg_gather(tp, x, 0, bad), "gather: index 4 is out of bounds for dimension 0 with size 3",
                         "[1, 0]");
    tu_assert_null_error(tg_gather(tp, x, 2, bad), "gather: dim 2 out of range for a 2-dim tensor");
    tu_assert_null_error(tg_gather(tp, x, 1, tg_zeros(tp, TG_F32, 2, SH(2, 3))),
                         "gather: index must be int64, got float32");
    tu_assert_null_error(tg_gather(tp, x, 1, tg_zeros(tp, TG_I64, 1, SH(3))),
                         "gather: index (3) must have the same number of dimensions as input (3,5)");
    tu_assert_null_error(tg_gather(tp, x, 1, tg_zeros(tp, TG_I64, 2, SH(4, 2))),
                         "gather: size does not match at dimension 0: expected index (4,2) to be no larger than "
                         "input (3,5) apart from dimension 1");
    tg_clear_error();
    tu_assert_null_error(tg_gather(tp, NULL, 1, bad), "gather: NULL input");
    tg_clear_error();
    tu_assert_null_error(tg_gather(tp, x, 1, NULL), "gather: NULL input");
    /* an empty index: an empty result, nothing checked against x's sizes */
    tg_tensor *e = tg_gather(tp, x, 1, tg_zeros(tp, TG_I64, 2, SH(7, 0)));
    assert_non_null(e);
    assert_int_equal(tg_numel(e), 0);

    tg_tensor *v = tg_from_data(tp, TG_I64, 1, SH(3), (const int64_t[]){0, 5, 1});
    tu_assert_null_error(tg_index_select(tp, x, 1, v),
                         "index_select: index 5 is out of bounds for dimension 1 with size 5", "[1]");
    tu_assert_null_error(tg_index_select(tp, x, 0, tg_from_data(tp, TG_I64, 1, SH(1), (const int64_t[]){-1})),
                         "index_select: index -1 is out of bounds for dimension 0 with size 3");
    tu_assert_null_error(tg_index_select(tp, x, 0, tg_zeros(tp, TG_I64, 2, SH(1, 1))),
                         "index_select: index must be a vector (1-D), got shape (1,1)");
    tu_assert_null_error(tg_index_select(tp, x, 0, tg_zeros(tp, TG_BOOL, 1, SH(1))),
                         "index_select: index must be int64, got bool");
    tu_assert_null_error(tg_index_select(tp, x, -3, v), "index_select: dim -3 out of range for a 2-dim tensor");
    tu_assert_null_error(tg_index_select(tp, tg_scalar(tp, TG_F32, 1), 0, tg_zeros(tp, TG_I64, 1, SH(2))),
                         "index_select: index of a 0-dim tensor must have exactly one element, got 2");
    tg_clear_error();
    tu_assert_null_error(tg_index_select(tp, NULL, 0, v), "index_select: NULL input");
    tg_tape_free(tp);
}

/* ---- sums of bool and integer tensors ------------------------------------------------------ */

static void test_int_sums_ref(void **state)
{
    (void)state;
    const json_t *cases = tu_json_get(ref, "sum");
    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        tg_tape *tp = tg_tape_new();
        tg_tensor *x = tu_json_tensor(tp, c, "x");
        assert_true(x->dtype == TG_BOOL || x->dtype == TG_I64);
        if (json_is_true(tu_json_get(c, "transpose"))) x = tg_transpose(tp, x, 0, 1);
        const json_t *jd = tu_json_get(c, "dims");
        tg_tensor *out;
        if (json_is_null(jd)) {
            out = tg_sum(tp, x);
        } else {
            int dims[TG_MAX_DIMS], nd = (int)json_array_size(jd);
            for (int k = 0; k < nd; k++) dims[k] = (int)json_integer_value(json_array_get(jd, (size_t)k));
            out = tg_sum_dims(tp, x, nd, dims, json_is_true(tu_json_get(c, "keepdim")));
        }
        assert_same_i64(out, tu_json_tensor(tp, c, "output"), "sum", (int)i);
        assert_null(out->grad_fn);
        assert_false(out->requires_grad);
        tg_tape_free(tp);
    }
}

static void test_int_sums(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    /* uint8, with values past 127 */
    tg_tensor *u = tg_from_data(tp, TG_U8, 2, SH(2, 3), (const uint8_t[]){200, 100, 1, 255, 0, 7});
    tg_tensor *s = tg_sum(tp, u);
    assert_int_equal(s->dtype, TG_I64);
    assert_int_equal(s->ndim, 0);
    assert_true(tg_item(s) == 563);
    tg_tensor *s1 = tg_sum_dims(tp, u, 1, (const int[]){0}, false);
    assert_true(tg_item_at(s1, 0) == 455 && tg_item_at(s1, 1) == 100 && tg_item_at(s1, 2) == 8);
    /* a comparison's mask, in grad mode, from a tensor that requires grad */
    tg_tensor *x = tg_from_f32(tp, 1, SH(5), (const float[]){-1, 2, 0, 3, -4});
    tg_requires_grad_(x, true);
    tg_tensor *m = tg_compare_scalar(tp, x, 0, TG_CMP_GT);
    tg_tensor *cnt = tg_sum(tp, m);
    assert_int_equal(cnt->dtype, TG_I64);
    assert_true(tg_item(cnt) == 2);
    assert_null(tg_grad_fn_name(cnt));
    /* mean still takes float tensors only; dims are checked */
    tu_assert_null_error(tg_mean(tp, m), "mean: expected a float32 or float64 tensor, got bool");
    tu_assert_null_error(tg_mean_dims(tp, u, 1, (const int[]){0}, false), "mean: expected a float32 or float64",
                         "uint8");
    tu_assert_null_error(tg_sum_dims(tp, m, 1, (const int[]){1}, false), "sum: dim 1 out of range for a 1-dim tensor");
    tu_assert_null_error(tg_sum_dims(tp, u, 2, (const int[]){0, -2}, false),
                         "sum: dim 0 appears multiple times in the list of dims");
    tg_tape_free(tp);
}

/* ---- torch.nn.init ------------------------------------------------------------------------- */

static int run_init(const json_t *c, tg_tensor *t, tg_generator *g)
{
    const char *fn = json_string_value(tu_json_get(c, "fn"));
    const json_t *a = tu_json_get(c, "args");
    if (!strcmp(fn, "uniform_"))
        return tg_init_uniform_(t, json_number_value(tu_json_get(a, "a")), json_number_value(tu_json_get(a, "b")), g);
    if (!strcmp(fn, "normal_"))
        return tg_init_normal_(t, json_number_value(tu_json_get(a, "mean")), json_number_value(tu_json_get(a, "std")), g);
    if (!strcmp(fn, "zeros_")) return tg_init_zeros_(t);
    if (!strcmp(fn, "ones_")) return tg_init_ones_(t);
    if (!strncmp(fn, "kaiming_", 8)) {
        tg_fan_mode mode = strcmp(json_string_value(tu_json_get(a, "mode")), "fan_in") ? TG_FAN_OUT : TG_FAN_IN;
        const char *nl = json_string_value(tu_json_get(a, "nonlinearity"));
        double slope = json_number_value(tu_json_get(a, "a"));
        return !strcmp(fn, "kaiming_uniform_") ? tg_init_kaiming_uniform_(t, slope, mode, nl, g)
                                               : tg_init_kaiming_normal_(t, slope, mode, nl, g);
    }
    double gain = json_number_value(tu_json_get(a, "gain"));
    if (!strcmp(fn, "xavier_uniform_")) return tg_init_xavier_uniform_(t, gain, g);
    if (!strcmp(fn, "xavier_normal_")) return tg_init_xavier_normal_(t, gain, g);
    fail_msg("finetune_ops.json: unknown init %s", fn);
    return TG_EINVAL;
}

static tg_tensor *init_target(tg_tape *tp, const json_t *c)
{
    const json_t *js = tu_json_get(c, "shape");
    int64_t shape[TG_MAX_DIMS];
    int nd = (int)json_array_size(js);
    for (int k = 0; k < nd; k++) shape[k] = json_integer_value(json_array_get(js, (size_t)k));
    tg_tensor *t = tg_full(tp, jdtype(c), nd, shape, -99.0);
    /* a parameter requiring grad, as the chapters' are: init runs under no_grad */
    tg_requires_grad_(t, true);
    return t;
}

static void test_init_ref(void **state)
{
    (void)state;
    const json_t *cases = tu_json_get(ref, "init");
    size_t i;
    const json_t *c;
    bool lora = false;
    json_array_foreach(cases, i, c) {
        tg_tape *tp = tg_tape_new();
        uint64_t seed = (uint64_t)json_integer_value(tu_json_get(c, "seed"));
        tg_tensor *want = tu_json_tensor(tp, c, "output");
        /* the default generator after manual_seed */
        tg_manual_seed(seed);
        tg_tensor *t = init_target(tp, c);
        assert_int_equal(run_init(c, t, NULL), TG_OK);
        assert_same(t, want, json_string_value(tu_json_get(c, "fn")), (int)i);
        assert_null(t->grad_fn);
        /* a generator of its own with the same seed */
        tg_generator *g = tg_generator_new(seed);
        tg_tensor *t2 = init_target(tp, c);
        assert_int_equal(run_init(c, t2, g), TG_OK);
        assert_same(t2, want, json_string_value(tu_json_get(c, "fn")), (int)i);
        tg_generator_free(g);
        lora |= !strcmp(json_string_value(tu_json_get(c, "fn")), "kaiming_uniform_") && t->shape[0] == 768 &&
                t->shape[1] == 16;
        tg_tape_free(tp);
    }
    assert_true(lora);
}

static void test_init_sequence_ref(void **state)
{
    (void)state;
    const json_t *seq = tu_json_get(ref, "init_sequence");
    const json_t *outs = tu_json_get(seq, "outputs");
    tg_tape *tp = tg_tape_new();
    tg_manual_seed((uint64_t)json_integer_value(tu_json_get(seq, "seed")));
    tg_tensor *w = tg_empty(tp, TG_F32, 2, SH(8, 12)), *a = tg_empty(tp, TG_F32, 2, SH(12, 4));
    tg_tensor *b = tg_empty(tp, TG_F32, 2, SH(4, 8)), *n = tg_empty(tp, TG_F32, 2, SH(6, 5));
    assert_int_equal(tg_init_kaiming_uniform_(w, sqrt(5.0), TG_FAN_IN, NULL, NULL), TG_OK);
    assert_int_equal(tg_init_kaiming_uniform_(a, sqrt(5.0), TG_FAN_IN, "leaky_relu", NULL), TG_OK);
    assert_int_equal(tg_init_zeros_(b), TG_OK);
    assert_int_equal(tg_init_xavier_normal_(n, 1.0, NULL), TG_OK);
    tg_tensor *got[4] = {w, a, b, n};
    for (int k = 0; k < 4; k++)
        assert_same(got[k], tu_tensor_from_json(tp, json_array_get(outs, (size_t)k), TG_DTYPE_COUNT), "sequence", k);
    /* LoRA's A (in, rank): fan_in = rank, every value within 1/sqrt(rank) */
    for (int64_t k = 0; k < tg_numel(a); k++) assert_true(fabs(tg_item_at(a, k)) <= 1.0 / sqrt(4.0));
    tg_tape_free(tp);
}

static void test_init_misc(void **state)
{
    (void)state;
    double gain;
    assert_int_equal(tg_init_calculate_gain("relu", 0, &gain), TG_OK);
    assert_true(gain == sqrt(2.0));
    assert_int_equal(tg_init_calculate_gain("tanh", 0, &gain), TG_OK);
    assert_true(gain == 5.0 / 3);
    assert_int_equal(tg_init_calculate_gain("selu", 0, &gain), TG_OK);
    assert_true(gain == 0.75);
    assert_int_equal(tg_init_calculate_gain("conv2d", 0, &gain), TG_OK);
    assert_true(gain == 1.0);
    assert_int_equal(tg_init_calculate_gain(NULL, NAN, &gain), TG_OK); /* leaky_relu, slope 0.01 */
    assert_true(gain == sqrt(2.0 / (1 + pow(0.01, 2.0))));
    assert_int_equal(tg_init_calculate_gain("leaky_relu", sqrt(5.0), &gain), TG_OK);
    assert_true(gain == sqrt(2.0 / (1 + pow(sqrt(5.0), 2.0))));

    tg_tape *tp = tg_tape_new();
    /* zeros_ and ones_ take any dtype and layout */
    tg_tensor *i = tg_full(tp, TG_I64, 2, SH(2, 3), 5);
    assert_int_equal(tg_init_ones_(tg_transpose(tp, i, 0, 1)), TG_OK);
    for (int k = 0; k < 6; k++) assert_true(tg_item_at(i, k) == 1);
    assert_int_equal(tg_init_zeros_(i), TG_OK);
    for (int k = 0; k < 6; k++) assert_true(tg_item_at(i, k) == 0);
    /* a tensor with a zero size: kaiming leaves it (and the generator) alone */
    tg_generator *g = tg_generator_new(3), *h = tg_generator_new(3);
    assert_int_equal(tg_init_kaiming_uniform_(tg_empty(tp, TG_F32, 2, SH(0, 4)), 0, TG_FAN_IN, NULL, g), TG_OK);
    assert_int_equal(tg_init_kaiming_normal_(tg_empty(tp, TG_F32, 1, SH(0)), 0, TG_FAN_IN, NULL, g), TG_OK);
    assert_true(tg_generator_random(g) == tg_generator_random(h));
    tg_generator_free(g), tg_generator_free(h);
    tg_tape_free(tp);
}

static void test_init_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *v = tg_zeros(tp, TG_F32, 1, SH(4)), *w = tg_zeros(tp, TG_F32, 2, SH(4, 3));
    const char *fan = "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions";
    tu_assert_status_error(tg_init_kaiming_uniform_(v, 0, TG_FAN_IN, NULL, NULL), "kaiming_uniform_: ", fan);
    tu_assert_status_error(tg_init_kaiming_normal_(tg_scalar(tp, TG_F32, 0), 0, TG_FAN_IN, NULL, NULL),
                           "kaiming_normal_: ", fan);
    tu_assert_status_error(tg_init_xavier_uniform_(v, 1, NULL), "xavier_uniform_: ", fan);
    tu_assert_status_error(tg_init_xavier_normal_(v, 1, NULL), "xavier_normal_: ", fan);
    tu_assert_status_error(tg_init_kaiming_uniform_(w, 0, TG_FAN_IN, "softplus", NULL),
                           "kaiming_uniform_: unsupported nonlinearity 'softplus'");
    tu_assert_status_error(tg_init_kaiming_normal_(w, 0, TG_FAN_OUT, "Relu", NULL),
                           "kaiming_normal_: unsupported nonlinearity 'Relu'");
    tu_assert_status_error(tg_init_calculate_gain("gelu", 0, &(double){0}),
                           "calculate_gain: unsupported nonlinearity 'gelu'");
    tu_assert_status_error(tg_init_calculate_gain("relu", 0, NULL), "calculate_gain: NULL result pointer");
    tu_assert_status_error(tg_init_kaiming_uniform_(w, NAN, TG_FAN_IN, NULL, NULL),
                           "uniform_: expects a finite range from <= to");
    tu_assert_status_error(tg_init_kaiming_uniform_(w, 0, (tg_fan_mode)7, NULL, NULL),
                           "kaiming_uniform_: mode 7 not supported, use TG_FAN_IN or TG_FAN_OUT");
    tg_tensor *iw = tg_zeros(tp, TG_I64, 2, SH(4, 3));
    const char *nf = "expected a float32, float64, bfloat16 or q8_0 tensor, got int64";
    tu_assert_status_error(tg_init_kaiming_uniform_(iw, 0, TG_FAN_IN, NULL, NULL), "kaiming_uniform_: ", nf);
    tu_assert_status_error(tg_init_kaiming_normal_(iw, 0, TG_FAN_IN, NULL, NULL), "kaiming_normal_: ", nf);
    tu_assert_status_error(tg_init_xavier_uniform_(iw, 1, NULL), "xavier_uniform_: ", nf);
    tu_assert_status_error(tg_init_xavier_normal_(iw, 1, NULL), "xavier_normal_: ", nf);
    tu_assert_status_error(tg_init_uniform_(iw, 0, 1, NULL), "init.uniform_: ", nf);
    tu_assert_status_error(tg_init_normal_(iw, 0, 1, NULL), "init.normal_: ", nf);
    tg_tensor *wt = tg_transpose(tp, w, 0, 1);
    tu_assert_status_error(tg_init_xavier_uniform_(wt, 1, NULL), "xavier_uniform_: tensor must be contiguous");
    tu_assert_status_error(tg_init_kaiming_uniform_(wt, 0, TG_FAN_IN, NULL, NULL),
                           "kaiming_uniform_: tensor must be contiguous");
    tu_assert_status_error(tg_init_xavier_normal_(tg_zeros(tp, TG_F32, 2, SH(0, 0)), 1, NULL),
                           "xavier_normal_: fan_in + fan_out is 0");
    tu_assert_status_error(tg_init_normal_(w, 0, -1, NULL), "normal_: expects finite mean and std >= 0");
    tu_assert_status_error(tg_init_uniform_(w, 1, 0, NULL), "uniform_: expects a finite range from <= to");
    tu_assert_status_error(tg_init_zeros_(NULL), "init.zeros_: NULL tensor");
    tu_assert_status_error(tg_init_ones_(NULL), "init.ones_: NULL tensor");
    tu_assert_status_error(tg_init_kaiming_uniform_(NULL, 0, TG_FAN_IN, NULL, NULL), "kaiming_uniform_: NULL tensor");
    tu_assert_status_error(tg_init_xavier_normal_(NULL, 1, NULL), "xavier_normal_: NULL tensor");
    tg_tape_free(tp);
}

/* ---- retain_grad --------------------------------------------------------------------------- */

static void check_retained(tg_tape *tp, const json_t *want, tg_tensor *h, tg_tensor *hv, tg_tensor *x,
                           tg_tensor *loss, int pass)
{
    assert_same(h->grad, tu_json_tensor(tp, want, "h"), "h.grad", pass);
    assert_same(hv->grad, tu_json_tensor(tp, want, "hv"), "hv.grad", pass);
    assert_same(x->grad, tu_json_tensor(tp, want, "x"), "x.grad", pass);
    assert_same(loss->grad, tu_json_tensor(tp, want, "loss"), "loss.grad", pass);
}

static void test_retain_grad_ref(void **state)
{
    (void)state;
    const json_t *c = tu_json_get(ref, "retain_grad");
    tg_tape *leaves = tg_tape_new(), *tp = tg_tape_new();
    tg_tensor *x = tu_json_tensor(leaves, c, "x");
    tg_requires_grad_(x, true);
    tg_tensor *w = tu_json_tensor(leaves, c, "w"), *cc = tu_json_tensor(leaves, c, "c");
    tg_tensor *h = tg_mul(tp, x, w);
    assert_int_equal(tg_retain_grad(h), TG_OK);
    tg_tensor *hv = tg_transpose(tp, h, 0, 1);
    assert_int_equal(tg_retain_grad(hv), TG_OK);
    assert_int_equal(tg_retain_grad(hv), TG_OK); /* twice: still once */
    tg_tensor *loss = tg_add(tp, tg_sum(tp, tg_mul(tp, hv, cc)), tg_sum(tp, tg_mul(tp, h, h)));
    /* (PyTorch sums hv * c, laid out as hv, in another order: the loss to
     * float32 rounding; the gradients below to the bit) */
    tu_assert_close(loss, tu_json_tensor(tp, c, "loss"), 1e-6, 0.0, "loss");
    assert_int_equal(tg_retain_grad(loss), TG_OK);
    assert_int_equal(tg_retain_grad(x), TG_OK); /* a leaf: nothing to do */
    assert_null(h->grad);
    assert_int_equal(tg_backward(loss, NULL, true), TG_OK);
    check_retained(tp, tu_json_get(c, "first"), h, hv, x, loss, 1);
    /* the retained gradients live in the tensors' own tape */
    assert_ptr_equal(h->grad->tape, tp);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    check_retained(tp, tu_json_get(c, "second"), h, hv, x, loss, 2);
    /* the graph was released: a third backward fails and leaves them as they were */
    assert_int_not_equal(tg_backward(loss, NULL, false), TG_OK);
    check_retained(tp, tu_json_get(c, "second"), h, hv, x, loss, 2);
    /* zero_grad clears a retained gradient */
    tg_zero_grad(h);
    for (int k = 0; k < 12; k++) assert_true(tg_item_at(h->grad, k) == 0);
    tg_tape_free(tp);
    tg_tape_free(leaves);
}

/* A retained gradient does not change anything else: the leaf's gradient
 * and the backward's bits are those without it; a tensor the backward does
 * not reach keeps no gradient. */
static void test_retain_grad_misc(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(9);
    tg_tensor *x = tg_randn(tp, TG_F32, 2, SH(4, 6), g);
    tg_requires_grad_(x, true);
    tg_tensor *grads[2];
    for (int pass = 0; pass < 2; pass++) {
        tg_tensor *a = tg_tanh(tp, x);
        tg_tensor *v = tg_view(tp, a, 2, SH(6, 4));
        tg_tensor *nr = tg_exp(tp, x); /* not on the path to the root */
        if (pass) {
            tg_retain_grad(a), tg_retain_grad(v), tg_retain_grad(nr);
        }
        tg_tensor *loss = tg_sum(tp, tg_mul(tp, v, tg_narrow(tp, tg_reshape(tp, a, 2, SH(6, 4)), 0, 0, 6)));
        x->grad = NULL;
        assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
        grads[pass] = x->grad;
        if (pass) {
            assert_non_null(a->grad);
            assert_non_null(v->grad);
            assert_null(nr->grad);
            /* v's gradient is a viewed as (6, 4): a's gradient has it as one of its parts */
            assert_int_equal(v->grad->shape[0], 6);
            assert_int_equal(a->grad->shape[0], 4);
        } else {
            assert_null(a->grad);
        }
    }
    tu_assert_close(grads[1], grads[0], 0.0, 0.0, "x.grad with retained intermediates");

    tu_assert_status_error(tg_retain_grad(tg_zeros(tp, TG_F32, 1, SH(2))),
                           "retain_grad: can't retain_grad on Tensor that has requires_grad=False");
    bool prev = tg_set_grad_enabled(false);
    tu_assert_status_error(tg_retain_grad(tg_mul_scalar(tp, x, 2)),
                           "can't retain_grad on Tensor that has requires_grad=False");
    tg_set_grad_enabled(prev);
    tu_assert_status_error(tg_retain_grad(NULL), "retain_grad: NULL tensor");
    tg_generator_free(g);
    tg_tape_free(tp);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gather_ref),
        cmocka_unit_test(test_index_select_ref),
        cmocka_unit_test(test_gather_accumulates),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_indexing_errors),
        cmocka_unit_test(test_int_sums_ref),
        cmocka_unit_test(test_int_sums),
        cmocka_unit_test(test_init_ref),
        cmocka_unit_test(test_init_sequence_ref),
        cmocka_unit_test(test_init_misc),
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_retain_grad_ref),
        cmocka_unit_test(test_retain_grad_misc),
    };
    return cmocka_run_group_tests_name("finetune_ops", tests, setup, teardown);
}
