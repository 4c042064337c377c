/* User functions (tg_function, torch.autograd.Function): a SiLU written as one
 * gradchecked against finite differences and compared with the same formula
 * composed of recorded ops; the node name; grad mode inside forward and
 * backward; what the engine does with the gradients a backward returns
 * (summed down when broadcast, errors for a wrong shape or dtype); a failing
 * backward's status and message; saved tensors and scratch data; argument
 * errors; an identity forward; chains and inputs used twice. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})

/* ---- SiLU: y = x sigmoid(x); dx = dy s (1 + x (1 - s)), s = sigmoid(x) ----------------------------------- */

static tg_tensor *sigmoid(tg_tape *tp, tg_tensor *x)
{
    return tg_pow_scalar(tp, tg_add_scalar(tp, tg_exp(tp, tg_neg(tp, x)), 1.0), -1.0);
}

/* What forward and backward saw of grad mode, and of their arguments. */
static struct {
    int forward_calls, backward_calls;
    bool grad_in_forward, grad_in_backward;
    bool intermediate_recorded;
    bool grad_output_ok;
} seen;

static tg_tensor *silu_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)n;
    seen.forward_calls++;
    seen.grad_in_forward = tg_is_grad_enabled();
    if (tg_fn_save_for_backward(ctx, 1, in) != TG_OK) return NULL;
    tg_tensor *s = sigmoid(tp, in[0]);
    if (s && (s->requires_grad || s->grad_fn)) seen.intermediate_recorded = true;
    return tg_mul(tp, in[0], s);
}

static int silu_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    seen.backward_calls++;
    seen.grad_in_backward = tg_is_grad_enabled();
    tg_tensor *x = tg_fn_saved(ctx, 0);
    seen.grad_output_ok = tg_is_contiguous(gy) && x && gy->dtype == x->dtype;
    tg_tensor *s = sigmoid(tp, x);
    tg_tensor *d = tg_mul(tp, s, tg_add_scalar(tp, tg_mul(tp, x, tg_rsub_scalar(tp, s, 1.0)), 1.0));
    if (d && (d->requires_grad || d->grad_fn)) seen.intermediate_recorded = true;
    gx[0] = tg_mul(tp, (tg_tensor *)gy, d);
    return gx[0] ? TG_OK : TG_ENOMEM;
}

static const tg_function silu_fn = {"SiluBackward0", silu_forward, silu_backward};

static tg_tensor *silu(tg_tape *tp, tg_tensor *x) { return tg_function_apply(tp, &silu_fn, 1, &x); }
static tg_tensor *silu_composed(tg_tape *tp, tg_tensor *x) { return tg_mul(tp, x, sigmoid(tp, x)); }

static tg_tensor *gc_silu(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n, (void)ctx;
    return silu(tp, in[0]);
}

/* silu(silu(x) * w) + silu(x): a chain, and the function used twice */
static tg_tensor *gc_silu_chain(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n, (void)ctx;
    return tg_add(tp, silu(tp, tg_mul(tp, silu(tp, in[0]), in[1])), silu(tp, in[0]));
}

static tg_tensor *gc_composed_chain(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n, (void)ctx;
    return tg_add(tp, silu_composed(tp, tg_mul(tp, silu_composed(tp, in[0]), in[1])), silu_composed(tp, in[0]));
}

static tg_tensor *randn_leaf(tg_tape *tp, int ndim, const int64_t *shape, tg_generator *g)
{
    tg_tensor *t = tg_randn(tp, TG_F64, ndim, shape, g);
    assert_non_null(t);
    assert_int_equal(tg_requires_grad_(t, true), TG_OK);
    return t;
}

static void test_silu_gradcheck_and_composed(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new(), *step = tg_tape_new();
    tg_generator *g = tg_generator_new(31);
    tg_tensor *x = randn_leaf(tp, 2, SH(3, 4), g), *w = randn_leaf(tp, 2, SH(3, 4), g);
    tg_tensor *in[2] = {x, w};

    double err[2];
    tg_gradcheck_options opts = {.max_err_per_input = err};
    tg_gradcheck_result res;
    assert_int_equal(tg_gradcheck_call(gc_silu, NULL, 1, in, &opts, &res), TG_OK);
    printf("silu: %s\n", res.message);
    assert_true(res.passed);
    assert_true(err[0] < 1e-7);
    assert_int_equal(tg_gradcheck_call(gc_silu_chain, NULL, 2, in, NULL, &res), TG_OK);
    printf("silu chain: %s\n", res.message);
    assert_true(res.passed);

    /* the same values and gradients as the composed ops */
    tg_tensor *y = gc_silu_chain(step, NULL, 2, in);
    tg_tensor *yc = gc_composed_chain(step, NULL, 2, in);
    tu_assert_close(y, yc, 0, 1e-14, "silu chain values");
    assert_int_equal(tg_backward(tg_sum(step, y), NULL, false), TG_OK);
    tg_tensor *gx = tg_clone(step, x->grad), *gw = tg_clone(step, w->grad);
    tg_zero_grad(x);
    tg_zero_grad(w);
    assert_int_equal(tg_backward(tg_sum(step, yc), NULL, false), TG_OK);
    tu_assert_close(gx, x->grad, 0, 1e-13, "silu chain dx");
    tu_assert_close(gw, w->grad, 0, 1e-13, "silu chain dw");

    /* float32 works too */
    tg_tensor *xf = tg_to_dtype(tp, x, TG_F32);
    assert_int_equal(tg_requires_grad_(xf, true), TG_OK);
    tg_tensor *yf = silu(step, xf);
    tu_assert_close(yf, silu_composed(step, xf), 0, 1e-6, "f32 silu");
    assert_int_equal(tg_backward(tg_sum(step, yf), NULL, false), TG_OK);
    assert_int_equal(xf->grad->dtype, TG_F32);
    tg_generator_free(g);
    tg_tape_free(step);
    tg_tape_free(tp);
}

static void test_node_name_and_grad_mode(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_from_f64(tp, 1, SH(3), (const double[]){-1, 0.5, 2});
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    memset(&seen, 0, sizeof seen);
    tg_tensor *y = silu(tp, x);
    tu_assert_ok(y);
    assert_string_equal(tg_grad_fn_name(y), "SiluBackward0");
    assert_true(y->requires_grad);
    assert_false(tg_is_leaf(y));
    char *s = tg_format(y);
    assert_non_null(s);
    assert_non_null(strstr(s, "grad_fn=<SiluBackward0>"));
    free(s);
    /* a node of a user function feeding a built-in one, and the reverse */
    tg_tensor *z = tg_sum(tp, silu(tp, tg_mul_scalar(tp, y, 2)));
    assert_string_equal(tg_grad_fn_name(z), "SumBackward0");
    assert_int_equal(seen.forward_calls, 2);
    assert_true(tg_is_grad_enabled());
    assert_int_equal(tg_backward(z, NULL, false), TG_OK);
    assert_int_equal(seen.backward_calls, 2);
    assert_true(tg_is_grad_enabled()); /* restored */
    /* recording was off inside forward and backward */
    assert_false(seen.grad_in_forward);
    assert_false(seen.grad_in_backward);
    assert_false(seen.intermediate_recorded);
    assert_true(seen.grad_output_ok);

    /* grad mode off: nothing recorded, forward still runs */
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *n = silu(tp, x);
    tg_set_grad_enabled(prev);
    tu_assert_ok(n);
    assert_null(n->grad_fn);
    assert_false(n->requires_grad);
    assert_int_equal(seen.forward_calls, 3);
    /* no input requires grad: nothing recorded */
    tg_tensor *c = tg_from_f64(tp, 1, SH(2), (const double[]){1, 2});
    tg_tensor *nc = silu(tp, c);
    tu_assert_ok(nc);
    assert_null(nc->grad_fn);
    assert_false(nc->requires_grad);
    /* an earlier error message survives a successful apply and backward */
    tg_error("earlier: %s", "kept");
    tg_tensor *k = tg_sum(tp, silu(tp, x));
    tu_assert_ok(k);
    assert_int_equal(tg_backward(k, NULL, false), TG_OK);
    assert_string_equal(tg_last_error(), "earlier: kept");
    tg_clear_error();
    tg_tape_free(tp);
}

/* ---- the gradients a backward returns ------------------------------------------------------------------ */

/* y = x + zeros(2, 3) (x broadcast to (2, 3)); backward returns dy itself,
 * (2, 3): the engine sums it down to x's shape. */
static tg_tensor *bcast_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    return tg_add(tp, in[0], tg_zeros(tp, in[0]->dtype, 2, SH(2, 3)));
}

static int pass_through_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)ctx, (void)tp;
    gx[0] = (tg_tensor *)gy;
    return TG_OK;
}

static const tg_function bcast_fn = {"BcastBackward0", bcast_forward, pass_through_backward};

/* y = m * c; backward returns the saved c itself as m's gradient (right when dy is 1) */
static tg_tensor *saved_as_grad_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)n;
    if (tg_fn_save_for_backward(ctx, 1, in + 1) != TG_OK) return NULL;
    return tg_mul(tp, in[0], in[1]);
}

static int saved_as_grad_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)tp, (void)gy;
    gx[0] = tg_fn_saved(ctx, 0);
    return TG_OK;
}

static const tg_function saved_as_grad_fn = {"SavedAsGradBackward0", saved_as_grad_forward, saved_as_grad_backward};

/* y = x * 1 of shape (3, 2); backward returns a (2, 3) gradient, or a float32 one */
static tg_tensor *same_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    return tg_mul_scalar(tp, in[0], 1.0);
}

static int wrong_shape_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)ctx;
    gx[0] = tg_ones(tp, gy->dtype, 2, SH(2, 3));
    return TG_OK;
}

static int wrong_dtype_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)ctx;
    gx[0] = tg_to_dtype(tp, gy, TG_F32);
    return TG_OK;
}

/* a gradient of more dims than the input, not one it broadcasts to */
static int wrong_rank_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)ctx;
    gx[0] = tg_ones(tp, gy->dtype, 3, SH(4, 3, 3));
    return TG_OK;
}

static const tg_function wrong_shape_fn = {"SiluBackward0", same_forward, wrong_shape_backward};
static const tg_function wrong_dtype_fn = {"SiluBackward0", same_forward, wrong_dtype_backward};
static const tg_function wrong_rank_fn = {"RankBackward0", same_forward, wrong_rank_backward};

static void test_returned_gradients(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    /* broadcast: (3) and (1, 3) inputs get (2, 3) gradients, summed down */
    tg_tensor *a = tg_from_f64(tp, 1, SH(3), (const double[]){1, 2, 3});
    tg_tensor *b = tg_from_f64(tp, 2, SH(1, 3), (const double[]){1, 2, 3});
    assert_int_equal(tg_requires_grad_(a, true), TG_OK);
    assert_int_equal(tg_requires_grad_(b, true), TG_OK);
    tg_tensor *w = tg_from_f64(tp, 2, SH(2, 3), (const double[]){1, 2, 3, 10, 20, 30});
    for (int k = 0; k < 2; k++) {
        tg_tensor *x = k ? b : a;
        tg_tensor *y = tg_function_apply(tp, &bcast_fn, 1, &x);
        tu_assert_ok(y);
        assert_int_equal(y->ndim, 2);
        assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, y, w)), NULL, false), TG_OK);
        tg_tensor *want = tg_from_f64(tp, x->ndim, x->shape, (const double[]){11, 22, 33});
        tu_assert_close(x->grad, want, 0, 0, "summed-down gradient");
    }
    /* a returned gradient is copied, never adopted as a buffer: here it is a
     * saved input c, and the non-leaf m gets a second gradient (from m * 3)
     * added after it; c must not change */
    tg_tensor *m = tg_mul_scalar(tp, a, 2);
    tg_tensor *c = tg_from_f64(tp, 1, SH(3), (const double[]){5, 6, 7});
    tg_tensor *mc[2] = {m, c};
    tg_tensor *ym = tg_function_apply(tp, &saved_as_grad_fn, 2, mc);
    tg_tensor *lm = tg_add(tp, tg_sum(tp, tg_mul_scalar(tp, m, 3)), tg_sum(tp, ym));
    tg_zero_grad(a);
    assert_int_equal(tg_backward(lm, NULL, false), TG_OK);
    tu_assert_close(c, tg_from_f64(tp, 1, SH(3), (const double[]){5, 6, 7}), 0, 0, "saved input untouched");
    tu_assert_close(a->grad, tg_from_f64(tp, 1, SH(3), (const double[]){16, 18, 20}), 0, 0, "2 (3 + c)");

    /* a wrong shape: PyTorch's message */
    tg_tensor *x = tg_ones(tp, TG_F64, 2, SH(3, 2));
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    tg_tensor *y = tg_function_apply(tp, &wrong_shape_fn, 1, &x);
    tu_assert_ok(y);
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_EINVAL);
    assert_string_equal(tg_last_error(), "SiluBackward0 returned an invalid gradient at index 0 - got [2, 3] but "
                                         "expected shape compatible with [3, 2]");
    assert_null(x->grad);
    y = tg_function_apply(tp, &wrong_rank_fn, 1, &x);
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_EINVAL);
    assert_string_equal(tg_last_error(), "RankBackward0 returned an invalid gradient at index 0 - got [4, 3, 3] but "
                                         "expected shape compatible with [3, 2]");
    /* a wrong dtype */
    y = tg_function_apply(tp, &wrong_dtype_fn, 1, &x);
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_EINVAL);
    assert_non_null(strstr(tg_last_error(), "SiluBackward0 returned an invalid gradient at index 0"));
    assert_non_null(strstr(tg_last_error(), "expected dtype float64 but got float32"));
    assert_null(x->grad);
    tg_tape_free(tp);
}

/* ---- a failing backward ----------------------------------------------------------------------------------- */

static int failing_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)ctx, (void)tp, (void)gy, (void)gx;
    return tg_error_status(TG_EINVAL, "failing: the gradient is undefined here");
}

static int silent_failing_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)ctx, (void)tp, (void)gy;
    gx[0] = NULL;
    return TG_ESTATE;
}

static const tg_function failing_fn = {"FailingBackward0", same_forward, failing_backward};
static const tg_function silent_fn = {"SilentBackward0", same_forward, silent_failing_backward};

static void test_failing_backward(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_ones(tp, TG_F64, 1, SH(3));
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    /* x -> failing -> exp -> sum, and x -> sum directly: backward stops at the failing node */
    tg_tensor *y = tg_function_apply(tp, &failing_fn, 1, &x);
    tg_tensor *l = tg_add(tp, tg_sum(tp, tg_exp(tp, y)), tg_sum(tp, tg_mul(tp, x, x)));
    tu_assert_ok(l);
    tg_error("earlier failure");
    assert_int_equal(tg_backward(l, NULL, false), TG_EINVAL);
    assert_string_equal(tg_last_error(), "failing: the gradient is undefined here");
    /* one that sets no message gets one naming it and its status */
    y = tg_function_apply(tp, &silent_fn, 1, &x);
    tg_clear_error();
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_ESTATE);
    char want[256];
    snprintf(want, sizeof want, "SilentBackward0: backward returned %s", tg_status_str(TG_ESTATE));
    assert_string_equal(tg_last_error(), want);
    tg_tape_free(tp);
}

/* ---- saved tensors and scratch data ------------------------------------------------------------------------ */

enum { NSAVE = 20 };

typedef struct {
    double scale;
    int calls;
} fn_state;

static struct {
    bool out_of_range_null, negative_null, data_same, data_too_big_null, save_null_fails, save_neg_fails;
    char range_msg[256];
} chk;

/* y = scale * sum of the 20 saved copies of x (so 20 * scale * x); saves 20 tensors */
static tg_tensor *many_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)n;
    tg_tensor *list[NSAVE];
    for (int i = 0; i < NSAVE; i++) list[i] = tg_mul_scalar(tp, in[0], 1.0);
    tg_tensor *with_null[2] = {in[0], NULL};
    chk.save_null_fails = tg_fn_save_for_backward(ctx, 2, with_null) == TG_EINVAL;
    chk.save_neg_fails = tg_fn_save_for_backward(ctx, -1, list) == TG_EINVAL;
    if (tg_fn_save_for_backward(ctx, NSAVE, list) != TG_OK) return NULL;
    fn_state *st = tg_fn_data(ctx, sizeof *st);
    if (!st || st->scale != 0 || st->calls != 0) return NULL; /* zeroed */
    st->scale = 0.5;
    st->calls = 1;
    chk.data_same = tg_fn_data(ctx, sizeof *st) == st && tg_fn_data(ctx, 1) == st;
    chk.data_too_big_null = tg_fn_data(ctx, sizeof *st + 1) == NULL;
    tg_tensor *acc = list[0];
    for (int i = 1; i < NSAVE; i++) acc = tg_add(tp, acc, list[i]);
    return tg_mul_scalar(tp, acc, st->scale);
}

static int many_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    fn_state *st = tg_fn_data(ctx, sizeof *st);
    if (!st || st->calls != 1) return tg_error_status(TG_ESTATE, "many: state lost");
    for (int i = 0; i < NSAVE; i++)
        if (!tg_fn_saved(ctx, i)) return TG_EINVAL;
    tg_clear_error();
    chk.out_of_range_null = tg_fn_saved(ctx, NSAVE) == NULL;
    snprintf(chk.range_msg, sizeof chk.range_msg, "%s", tg_last_error());
    chk.negative_null = tg_fn_saved(ctx, -1) == NULL;
    gx[0] = tg_mul_scalar(tp, (tg_tensor *)gy, NSAVE * st->scale);
    return gx[0] ? TG_OK : TG_ENOMEM;
}

static const tg_function many_fn = {"ManyBackward0", many_forward, many_backward};

static void test_saved_and_data(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_from_f64(tp, 1, SH(2), (const double[]){1, -2});
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    memset(&chk, 0, sizeof chk);
    tg_tensor *y = tg_function_apply(tp, &many_fn, 1, &x);
    tu_assert_ok(y);
    tu_assert_close(y, tg_from_f64(tp, 1, SH(2), (const double[]){10, -20}), 0, 1e-12, "many forward");
    assert_true(chk.save_null_fails);
    assert_true(chk.save_neg_fails);
    assert_true(chk.data_same);
    assert_true(chk.data_too_big_null);
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_OK);
    tu_assert_close(x->grad, tg_from_f64(tp, 1, SH(2), (const double[]){10, 10}), 0, 1e-12, "many backward");
    assert_true(chk.out_of_range_null);
    assert_true(chk.negative_null);
    assert_non_null(strstr(chk.range_msg, "ManyBackward0"));
    assert_non_null(strstr(chk.range_msg, "index 20"));
    assert_non_null(strstr(chk.range_msg, "out of range"));
    /* NULL contexts */
    tu_assert_null_error(tg_fn_saved(NULL, 0), "saved");
    tu_assert_null_error(tg_fn_data(NULL, 8), "fn_data");
    tu_assert_status_error(tg_fn_save_for_backward(NULL, 0, NULL), "save_for_backward");
    tg_tape_free(tp);
}

/* ---- argument errors, forward failures ------------------------------------------------------------------------ */

static tg_tensor *null_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)ctx, (void)tp, (void)n, (void)in;
    return NULL;
}

static tg_tensor *failing_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    return tg_matmul(tp, in[0], in[0]); /* (3) @ (3) is fine; (2,3) @ (2,3) is not */
}

static void test_argument_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_ones(tp, TG_F64, 2, SH(2, 3));
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    tg_function f = silu_fn;
    tu_assert_null_error(tg_function_apply(tp, NULL, 1, &x), "function_apply", "NULL function");
    f.name = NULL;
    tu_assert_null_error(tg_function_apply(tp, &f, 1, &x), "function_apply", "no name");
    f = silu_fn, f.forward = NULL;
    tu_assert_null_error(tg_function_apply(tp, &f, 1, &x), "SiluBackward0", "NULL forward");
    f = silu_fn, f.backward = NULL;
    tu_assert_null_error(tg_function_apply(tp, &f, 1, &x), "SiluBackward0", "NULL backward");
    tu_assert_null_error(tg_function_apply(NULL, &silu_fn, 1, &x), "SiluBackward0", "NULL tape");
    tu_assert_null_error(tg_function_apply(tp, &silu_fn, -1, &x), "SiluBackward0", "n = -1");
    tu_assert_null_error(tg_function_apply(tp, &silu_fn, 1, NULL), "SiluBackward0", "input list");
    /* a NULL input: the usual rule (an earlier failure's message is kept) */
    tg_tensor *none[1] = {NULL};
    tg_clear_error();
    tu_assert_null_error(tg_function_apply(tp, &silu_fn, 1, none), "SiluBackward0: NULL input");
    tg_error("view: the real problem");
    tu_assert_null_error(tg_function_apply(tp, &silu_fn, 1, none), "view: the real problem");
    /* forward returning NULL: its message, or one saying so */
    f = silu_fn, f.forward = null_forward;
    tg_error("unrelated earlier message");
    tu_assert_null_error(tg_function_apply(tp, &f, 1, &x), "SiluBackward0: forward returned NULL");
    f.forward = failing_forward;
    tu_assert_null_error(tg_function_apply(tp, &f, 1, &x), "matmul", "inner dims");
    assert_true(tg_is_grad_enabled());
    /* zero inputs: nothing requires grad, nothing recorded */
    f.forward = null_forward;
    tu_assert_null_error(tg_function_apply(tp, &f, 0, NULL), "forward returned NULL");
    tg_tape_free(tp);
}

/* ---- identity forward, non-float outputs, views ---------------------------------------------------------------- */

static tg_tensor *identity_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)ctx, (void)tp, (void)n;
    return in[0];
}

static const tg_function identity_fn = {"IdentityBackward0", identity_forward, pass_through_backward};

static tg_tensor *mask_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    return tg_compare_scalar(tp, in[0], 0.0, TG_CMP_GT);
}

static const tg_function mask_fn = {"MaskBackward0", mask_forward, pass_through_backward};

/* returns a tensor of another, longer-lived tape (no gradient flows to x) */
static tg_tensor *other_tape_constant;

static tg_tensor *constant_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)ctx, (void)tp, (void)n, (void)in;
    return other_tape_constant;
}

static int no_grad_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)ctx, (void)tp, (void)gy, (void)gx;
    return TG_OK;
}

static const tg_function constant_fn = {"ConstantBackward0", constant_forward, no_grad_backward};

/* a transposed view of the input: a non-contiguous output */
static tg_tensor *transpose_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    return tg_t(tp, in[0]);
}

static int transpose_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    (void)ctx;
    if (!tg_is_contiguous(gy) || gy->ndim != 2 || gy->shape[0] != 3 || gy->shape[1] != 2)
        return tg_error_status(TG_EINVAL, "transpose: grad_output is not a contiguous (3, 2) tensor");
    gx[0] = tg_contiguous(tp, tg_t(tp, (tg_tensor *)gy));
    return gx[0] ? TG_OK : TG_ENOMEM;
}

static const tg_function transpose_fn = {"TransposeFnBackward0", transpose_forward, transpose_backward};

static void test_identity_and_outputs(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_from_f64(tp, 2, SH(2, 3), (const double[]){-1, 2, -3, 4, -5, 6});
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    /* identity on a leaf: the node goes on a new view; x stays a leaf */
    tg_tensor *y = tg_function_apply(tp, &identity_fn, 1, &x);
    tu_assert_ok(y);
    assert_ptr_not_equal(y, x);
    assert_ptr_equal(tg_data_ptr(y), tg_data_ptr(x)); /* a view: same storage */
    assert_true(tg_is_leaf(x));
    assert_null(x->grad_fn);
    assert_string_equal(tg_grad_fn_name(y), "IdentityBackward0");
    assert_int_equal(tg_backward(tg_sum(tp, tg_mul_scalar(tp, y, 3)), NULL, false), TG_OK);
    tu_assert_close(x->grad, tg_full(tp, TG_F64, 2, SH(2, 3), 3.0), 0, 0, "identity dx");
    /* identity on a non-leaf: its grad_fn is left alone */
    tg_tensor *m = tg_mul_scalar(tp, x, 2);
    tg_tensor *ym = tg_function_apply(tp, &identity_fn, 1, &m);
    assert_ptr_not_equal(ym, m);
    assert_string_equal(tg_grad_fn_name(m), "MulBackward0");
    assert_string_equal(tg_grad_fn_name(ym), "IdentityBackward0");
    tg_zero_grad(x);
    assert_int_equal(tg_backward(tg_sum(tp, ym), NULL, false), TG_OK);
    tu_assert_close(x->grad, tg_full(tp, TG_F64, 2, SH(2, 3), 2.0), 0, 0, "identity of 2x: dx");
    /* identity with grad mode off: the input itself, nothing recorded */
    bool prev = tg_set_grad_enabled(false);
    assert_ptr_equal(tg_function_apply(tp, &identity_fn, 1, &x), x);
    tg_set_grad_enabled(prev);
    assert_null(x->grad_fn);
    /* a non-float output gets no node */
    tg_tensor *mask = tg_function_apply(tp, &mask_fn, 1, &x);
    tu_assert_ok(mask);
    assert_int_equal(mask->dtype, TG_BOOL);
    assert_null(mask->grad_fn);
    assert_false(mask->requires_grad);
    /* an output from another tape: the node goes on a view in this tape, the
     * other tape's tensor is left as it was */
    tg_tape *model = tg_tape_new();
    other_tape_constant = tg_full(model, TG_F64, 1, SH(2), 4.0);
    tg_tensor *k = tg_function_apply(tp, &constant_fn, 1, &x);
    tu_assert_ok(k);
    assert_ptr_not_equal(k, other_tape_constant);
    assert_ptr_equal(k->tape, tp);
    assert_string_equal(tg_grad_fn_name(k), "ConstantBackward0");
    assert_null(other_tape_constant->grad_fn);
    assert_false(other_tape_constant->requires_grad);
    tg_zero_grad(x);
    assert_int_equal(tg_backward(tg_sum(tp, k), NULL, false), TG_OK);
    tu_assert_close(x->grad, tg_zeros(tp, TG_F64, 2, SH(2, 3)), 0, 0, "no gradient returned");
    tg_tape_free(model);
    /* a non-contiguous output: backward still gets a contiguous gradient of its shape */
    tg_tensor *t = tg_function_apply(tp, &transpose_fn, 1, &x);
    tu_assert_ok(t);
    assert_false(tg_is_contiguous(t));
    tg_tensor *w = tg_from_f64(tp, 2, SH(3, 2), (const double[]){1, 2, 3, 4, 5, 6});
    tg_zero_grad(x);
    assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, t, w)), NULL, false), TG_OK);
    tu_assert_close(x->grad, tg_from_f64(tp, 2, SH(2, 3), (const double[]){1, 3, 5, 2, 4, 6}), 0, 0,
                    "transposed dx");
    tg_tape_free(tp);
}

/* ---- inputs used twice, chains ----------------------------------------------------------------------------------- */

/* y = a * b (two inputs; the same tensor may be passed twice) */
static tg_tensor *mul2_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)n;
    if (tg_fn_save_for_backward(ctx, 2, in) != TG_OK) return NULL;
    return tg_mul(tp, in[0], in[1]);
}

static int mul2_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    gx[0] = tg_mul(tp, (tg_tensor *)gy, tg_fn_saved(ctx, 1));
    gx[1] = tg_mul(tp, (tg_tensor *)gy, tg_fn_saved(ctx, 0));
    return gx[0] && gx[1] ? TG_OK : TG_ENOMEM;
}

static const tg_function mul2_fn = {"Mul2Backward0", mul2_forward, mul2_backward};

static void test_used_twice_and_chains(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_from_f64(tp, 1, SH(3), (const double[]){1, -2, 0.5});
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    /* the same tensor as both inputs: d(x*x)/dx = 2x, the two gradients add */
    tg_tensor *pair[2] = {x, x};
    tg_tensor *y = tg_function_apply(tp, &mul2_fn, 2, pair);
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_OK);
    tu_assert_close(x->grad, tg_from_f64(tp, 1, SH(3), (const double[]){2, -4, 1}), 0, 0, "x*x through one node");
    /* the function's output used twice, and a chain of the function through itself */
    tg_zero_grad(x);
    tg_tensor *s = tg_function_apply(tp, &mul2_fn, 2, pair);    /* x^2 */
    tg_tensor *pair2[2] = {s, s};
    tg_tensor *q = tg_function_apply(tp, &mul2_fn, 2, pair2);   /* x^4 */
    tg_tensor *l = tg_add(tp, tg_sum(tp, q), tg_sum(tp, s));    /* x^4 + x^2 */
    assert_int_equal(tg_backward(l, NULL, false), TG_OK);
    /* 4x^3 + 2x */
    tu_assert_close(x->grad, tg_from_f64(tp, 1, SH(3), (const double[]){6, -36, 1.5}), 0, 1e-12, "x^4 + x^2");
    /* one input requiring grad, one not: the other's gradient is ignored */
    tg_zero_grad(x);
    tg_tensor *c = tg_from_f64(tp, 1, SH(3), (const double[]){3, 3, 3});
    tg_tensor *mixed[2] = {x, c};
    y = tg_function_apply(tp, &mul2_fn, 2, mixed);
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_OK);
    tu_assert_close(x->grad, c, 0, 0, "x*c");
    assert_null(c->grad);
    tg_tape_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_silu_gradcheck_and_composed),
        cmocka_unit_test(test_node_name_and_grad_mode),
        cmocka_unit_test(test_returned_gradients),
        cmocka_unit_test(test_failing_backward),
        cmocka_unit_test(test_saved_and_data),
        cmocka_unit_test(test_argument_errors),
        cmocka_unit_test(test_identity_and_outputs),
        cmocka_unit_test(test_used_twice_and_chains),
    };
    return cmocka_run_group_tests_name("function", tests, NULL, NULL);
}
