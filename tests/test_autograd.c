/* Autograd semantics: the step tape in a training loop (no growth, no malloc),
 * requires_grad / leaves / accumulation / retain_graph / detach / no-grad /
 * in-place rules, gradients through every view into the base, inputs used
 * twice, broadcasting reduced back, and PyTorch's node names along the book's
 * causal-attention chain. */
#include "testutil.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define DV(...) ((const double[]){__VA_ARGS__})

static void check_vals_(const tg_tensor *t, int ndim, const int64_t *shape, const double *want, double tol,
                        const char *what, const char *file, int line)
{
    if (!t) {
        print_error("%s: got NULL (%s)\n", what, tg_last_error());
        _fail(file, line);
        return;
    }
    if (t->ndim != ndim) {
        print_error("%s: ndim %d, want %d\n", what, t->ndim, ndim);
        _fail(file, line);
        return;
    }
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) {
            print_error("%s: shape[%d] = %lld, want %lld\n", what, d, (long long)t->shape[d], (long long)shape[d]);
            _fail(file, line);
            return;
        }
    for (int64_t i = 0; i < tg_numel(t); i++) {
        double g = tg_item_at(t, i);
        if (!(fabs(g - want[i]) <= tol)) {
            print_error("%s: element %lld: got %.10g, want %.10g\n", what, (long long)i, g, want[i]);
            _fail(file, line);
            return;
        }
    }
}
#define check_vals(t, ndim, shape, want, tol, what) \
    check_vals_((t), (ndim), (shape), (want), (tol), (what), __FILE__, __LINE__)

static void check_name_(const tg_tensor *t, const char *want, const char *file, int line)
{
    const char *got = tg_grad_fn_name(t);
    if (!t || !got || strcmp(got, want) != 0) {
        print_error("grad_fn %s, want %s (%s)\n", got ? got : "NULL", want, t ? "" : tg_last_error());
        _fail(file, line);
    }
}
#define check_name(t, want) check_name_((t), (want), __FILE__, __LINE__)

/* A contiguous f64 tensor with values start, start+step, ... */
static tg_tensor *seq(tg_tape *tp, int ndim, const int64_t *shape, double start, double step)
{
    tg_tensor *t = tg_empty(tp, TG_F64, ndim, shape);
    assert_non_null(t);
    double *d = tg_data_ptr(t);
    for (int64_t i = 0; i < tg_numel(t); i++) d[i] = start + step * (double)i;
    return t;
}

static tg_tensor *leaf(tg_tape *tp, int ndim, const int64_t *shape, double start, double step)
{
    tg_tensor *t = seq(tp, ndim, shape, start, step);
    assert_int_equal(tg_requires_grad_(t, true), TG_OK);
    return t;
}

/* ---- (a) the tape in a training loop -------------------------------------------------------------- */

typedef struct {
    tg_tensor *w1, *b1, *w2, *b2, *wq;
} tiny_model;

static tg_tensor *param(tg_tape *model, int ndim, const int64_t *shape, tg_generator *g)
{
    tg_tensor *p = tg_empty(model, TG_F32, ndim, shape);
    assert_non_null(p);
    assert_int_equal(tg_uniform_(p, -0.5, 0.5, g), TG_OK);
    assert_int_equal(tg_requires_grad_(p, true), TG_OK);
    return p;
}

/* One step: forward, backward, SGD update, zero grad. Returns the loss. */
static double train_step(tg_tape *step, tiny_model *m, tg_generator *g)
{
    tg_tensor *x = tg_rand(step, TG_F32, 3, SH(2, 6, 4), g);
    tg_tensor *target = tg_zeros(step, TG_F32, 3, SH(2, 6, 3));
    tg_tensor *mask = tg_triu(step, tg_ones(step, TG_BOOL, 2, SH(6, 6)), 1);
    /* layer 1: attention-like mixing */
    tg_tensor *h = tg_linear(step, x, m->w1, m->b1);                  /* (2,6,8) */
    tg_tensor *q = tg_matmul(step, h, m->wq);                         /* (2,6,8) */
    tg_tensor *s = tg_matmul(step, q, tg_transpose(step, h, 1, 2));   /* (2,6,6) */
    s = tg_masked_fill(step, s, mask, -INFINITY);
    tg_tensor *p = tg_softmax(step, tg_div_scalar(step, s, sqrt(8.0)), -1);
    tg_tensor *z = tg_relu(step, tg_matmul(step, p, h));              /* (2,6,8) */
    /* layer 2 */
    tg_tensor *y = tg_linear(step, z, m->w2, m->b2);                  /* (2,6,3) */
    tg_tensor *loss = tg_mse_loss(step, y, target, TG_REDUCE_MEAN);
    if (!loss) fail_msg("forward failed: %s", tg_last_error());
    double l = tg_item(loss);
    if (tg_backward(loss, NULL, false) != TG_OK) fail_msg("backward failed: %s", tg_last_error());
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *ps[5] = {m->w1, m->b1, m->w2, m->b2, m->wq};
    for (int i = 0; i < 5; i++) {
        if (!ps[i]->grad) fail_msg("parameter %d has no gradient", i);
        assert_int_equal(tg_add_(ps[i], ps[i]->grad, -0.1), TG_OK);
        tg_zero_grad(ps[i]);
    }
    tg_set_grad_enabled(prev);
    tg_tape_reset(step);
    return l;
}

static void test_tape_steady_state(void **state)
{
    (void)state;
    tg_tape *model = tg_tape_new(), *step = tg_tape_new();
    tg_generator *g = tg_generator_new(1234);
    tiny_model m = {
        param(model, 2, SH(8, 4), g), param(model, 1, SH(8), g), param(model, 2, SH(3, 8), g),
        param(model, 1, SH(3), g),    param(model, 2, SH(8, 8), g),
    };
    double first = train_step(step, &m, g);
    size_t step_res = tg_tape_reserved(step), model_res = tg_tape_reserved(model);
    assert_true(step_res > 0);
    assert_int_equal(tg_tape_used(step), 0);
    double second = train_step(step, &m, g);
    (void)second;
    struct mallinfo2 mi2 = mallinfo2();
    size_t heap2 = mi2.uordblks, mmap2 = mi2.hblkhd; /* small blocks / mmapped blocks (tape chunks) */
    size_t heap_max = heap2, mmap_max = mmap2;
    double last = 0;
    for (int it = 2; it < 1000; it++) {
        last = train_step(step, &m, g);
        if (tg_tape_reserved(step) > step_res)
            fail_msg("step %d: step tape grew from %zu to %zu bytes", it, step_res, tg_tape_reserved(step));
        if (tg_tape_reserved(model) > model_res)
            fail_msg("step %d: model tape grew from %zu to %zu bytes", it, model_res, tg_tape_reserved(model));
        struct mallinfo2 mi = mallinfo2();
        if (mi.uordblks > heap_max) heap_max = mi.uordblks;
        if (mi.hblkhd > mmap_max) mmap_max = mi.hblkhd;
    }
    size_t heap_end = mallinfo2().uordblks;
    printf("tape footprint: step tape %zu bytes reserved, model tape %zu bytes; heap in use after step 2 %zu, "
           "max over steps 3..1000 %zu, at the end %zu (growth %+lld bytes)\n",
           step_res, model_res, heap2, heap_max, heap_end, (long long)heap_max - (long long)heap2);
    printf("mmapped after step 2 %zu, max over steps 3..1000 %zu\n", mmap2, mmap_max);
    printf("loss: step 1 %.6f, step 1000 %.6f\n", first, last);
    if (heap_max > heap2 + 4096)
        fail_msg("heap grew by %zu bytes after the second step", heap_max - heap2);
    if (mmap_max > mmap2 + 4096) fail_msg("mmapped memory grew by %zu bytes after the second step", mmap_max - mmap2);
    assert_true(isfinite(last));
    assert_true(last < first); /* it trains */
    tg_generator_free(g);
    tg_tape_free(step);
    tg_tape_free(model);
}

/* ---- (b) requires_grad, leaves, accumulation, errors ------------------------------------------------- */

static void test_requires_grad_and_leaves(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *a = leaf(tp, 1, SH(3), 1, 1); /* 1 2 3 */
    tg_tensor *b = seq(tp, 1, SH(3), 4, 1);  /* 4 5 6, no grad */
    assert_true(a->requires_grad);
    assert_false(b->requires_grad);
    assert_true(tg_is_leaf(a));
    assert_true(tg_is_leaf(b));
    assert_null(tg_grad_fn_name(a));
    tg_tensor *c = tg_mul(tp, a, b);
    assert_true(c->requires_grad);
    assert_false(tg_is_leaf(c));
    check_name(c, "MulBackward0");
    tg_tensor *d = tg_mul(tp, b, b);
    assert_false(d->requires_grad);
    assert_true(tg_is_leaf(d));
    assert_null(d->grad_fn);
    /* propagation through a chain with a non-grad branch */
    tg_tensor *e = tg_add(tp, tg_exp(tp, d), tg_sum(tp, c));
    assert_true(e->requires_grad);
    check_name(e, "AddBackward0");
    /* requires_grad_ rules */
    tu_assert_status_error(tg_requires_grad_(c, false), "requires_grad_", "leaf");
    tu_assert_status_error(tg_requires_grad_(tg_ones(tp, TG_BOOL, 1, SH(2)), true), "requires_grad_", "bool");
    assert_int_equal(tg_requires_grad_(tg_ones(tp, TG_BOOL, 1, SH(2)), false), TG_OK);
    assert_int_equal(tg_requires_grad_(tg_ones(tp, TG_F32, 1, SH(2)), true), TG_OK);
    /* comparisons are never recorded */
    tg_tensor *cmp = tg_compare_scalar(tp, a, 1.5, TG_CMP_GT);
    assert_false(cmp->requires_grad);
    assert_null(cmp->grad_fn);
    check_vals(cmp, 1, SH(3), DV(0, 1, 1), 0, "compare");
    /* the leaf's gradient lives in the leaf's tape, even when the graph is in another */
    tg_tape *step = tg_tape_new();
    tg_tensor *l = tg_sum(step, tg_mul(step, a, a));
    assert_int_equal(tg_backward(l, NULL, false), TG_OK);
    assert_non_null(a->grad);
    assert_ptr_equal(a->grad->tape, tp);
    assert_null(b->grad);
    check_vals(a->grad, 1, SH(3), DV(2, 4, 6), 1e-12, "d sum(a*a)");
    tg_tape_reset(step);
    check_vals(a->grad, 1, SH(3), DV(2, 4, 6), 1e-12, "grad survives the step tape reset");
    tg_tape_free(step);
    tg_tape_free(tp);
}

static void test_accumulation_and_retain(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = leaf(tp, 1, SH(3), 1, 1);
    tg_tensor *y = tg_sum(tp, tg_mul(tp, x, x));
    assert_int_equal(tg_backward(y, NULL, true), TG_OK);
    check_vals(x->grad, 1, SH(3), DV(2, 4, 6), 1e-12, "first backward");
    tg_tensor *g0 = x->grad;
    assert_int_equal(tg_backward(y, NULL, false), TG_OK);
    check_vals(x->grad, 1, SH(3), DV(4, 8, 12), 1e-12, "accumulated");
    assert_ptr_equal(x->grad, g0); /* same buffer */
    tu_assert_status_error(tg_backward(y, NULL, false), "second time");
    tu_assert_status_error(tg_backward(y, NULL, true), "second time");
    check_vals(x->grad, 1, SH(3), DV(4, 8, 12), 1e-12, "unchanged by the failed backward");

    /* zero_grad keeps the buffer */
    tg_zero_grad(x);
    assert_ptr_equal(x->grad, g0);
    check_vals(x->grad, 1, SH(3), DV(0, 0, 0), 0, "zero_grad");
    tg_tensor *y2 = tg_sum(tp, tg_mul_scalar(tp, x, 3));
    assert_int_equal(tg_backward(y2, NULL, false), TG_OK);
    check_vals(x->grad, 1, SH(3), DV(3, 3, 3), 1e-12, "after zero_grad");

    /* a second graph sharing part of a released one: the released part errors */
    tg_tensor *sq = tg_mul(tp, x, x);
    tg_tensor *l1 = tg_sum(tp, sq);
    assert_int_equal(tg_backward(l1, NULL, false), TG_OK);
    tg_tensor *l2 = tg_mean(tp, sq);
    tu_assert_status_error(tg_backward(l2, NULL, false), "second time");

    /* non-scalar root */
    tg_zero_grad(x);
    tg_tensor *v = tg_mul_scalar(tp, x, 2);
    tu_assert_status_error(tg_backward(v, NULL, false), "backward", "scalar");
    tg_tensor *gw = tg_from_f64(tp, 1, SH(3), (double[]){1, 10, 100});
    assert_int_equal(tg_backward(v, gw, false), TG_OK);
    check_vals(x->grad, 1, SH(3), DV(2, 20, 200), 1e-12, "explicit grad");
    tg_tensor *v2 = tg_mul_scalar(tp, x, 2);
    tu_assert_status_error(tg_backward(v2, tg_ones(tp, TG_F64, 1, SH(4)), false), "backward", "(4)", "(3)");
    tu_assert_status_error(tg_backward(v2, tg_ones(tp, TG_F32, 1, SH(3)), false), "backward", "dtype");
    /* a root that does not require grad */
    tu_assert_status_error(tg_backward(tg_sum(tp, seq(tp, 1, SH(2), 0, 1)), NULL, false), "backward",
                           "does not require grad");
    /* a leaf root */
    tg_tensor *s = leaf(tp, 0, NULL, 5, 0);
    assert_int_equal(tg_backward(s, NULL, false), TG_OK);
    assert_true(tg_item(s->grad) == 1.0);
    tg_tape_free(tp);
}

static void test_detach_no_grad_inplace(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = leaf(tp, 1, SH(3), 1, 1);
    tg_tensor *d = tg_detach(tp, x);
    assert_non_null(d);
    assert_false(d->requires_grad);
    assert_null(d->grad_fn);
    assert_true(tg_is_leaf(d));
    assert_ptr_equal(d->data, x->data);
    /* y = sum(detach(x) * x): dy/dx = detach(x), not 2x */
    tg_tensor *y = tg_sum(tp, tg_mul(tp, d, x));
    assert_int_equal(tg_backward(y, NULL, false), TG_OK);
    check_vals(x->grad, 1, SH(3), DV(1, 2, 3), 1e-12, "through detach");
    /* detach of a non-leaf cuts there */
    tg_zero_grad(x);
    tg_tensor *h = tg_mul(tp, x, x);
    tg_tensor *y2 = tg_sum(tp, tg_add(tp, tg_detach(tp, h), x));
    assert_int_equal(tg_backward(y2, NULL, false), TG_OK);
    check_vals(x->grad, 1, SH(3), DV(1, 1, 1), 1e-12, "detached branch contributes nothing");

    /* no-grad mode */
    assert_true(tg_is_grad_enabled());
    bool prev = tg_set_grad_enabled(false);
    assert_true(prev);
    assert_false(tg_is_grad_enabled());
    tg_tensor *n1 = tg_mul(tp, x, x);
    tg_tensor *n2 = tg_matmul(tp, tg_view(tp, x, 2, SH(1, 3)), tg_view(tp, x, 2, SH(3, 1)));
    tg_tensor *n3 = tg_transpose(tp, tg_unsqueeze(tp, x, 0), 0, 1);
    tg_tensor *n4 = tg_softmax(tp, x, 0);
    tg_tensor *mlist[4] = {n1, n2, n3, n4};
    for (int i = 0; i < 4; i++) {
        assert_non_null(mlist[i]);
        assert_null(mlist[i]->grad_fn);
        assert_false(mlist[i]->requires_grad);
    }
    check_vals(n2, 2, SH(1, 1), DV(14), 1e-12, "no-grad values");
    /* in-place on a requires-grad leaf is fine in no-grad mode */
    assert_int_equal(tg_mul_scalar_(x, 2), TG_OK);
    check_vals(x, 1, SH(3), DV(2, 4, 6), 0, "mul_ in no-grad");
    assert_false(tg_set_grad_enabled(prev));
    assert_true(tg_is_grad_enabled());
    tu_assert_status_error(tg_backward(tg_sum(tp, n1), NULL, false), "backward", "does not require grad");

    /* in-place on a requires-grad leaf in grad mode: errors, value unchanged */
    tu_assert_status_error(tg_fill_(x, 0), "fill_", "in-place");
    tu_assert_status_error(tg_copy_(x, seq(tp, 1, SH(3), 0, 0)), "copy_", "in-place");
    tu_assert_status_error(tg_add_(x, seq(tp, 1, SH(3), 1, 0), 1.0), "add_", "in-place");
    tu_assert_status_error(tg_mul_scalar_(x, 3), "mul_", "in-place");
    /* a view of it that requires grad too */
    tu_assert_status_error(tg_fill_(tg_narrow(tp, x, 0, 0, 1), 0), "fill_", "in-place");
    check_vals(x, 1, SH(3), DV(2, 4, 6), 0, "unchanged");
    /* in-place on a tensor that needs no grad is fine in grad mode */
    tg_tensor *plain = seq(tp, 1, SH(3), 0, 1);
    assert_int_equal(tg_add_(plain, seq(tp, 1, SH(3), 1, 0), 2.0), TG_OK);
    check_vals(plain, 1, SH(3), DV(2, 3, 4), 0, "add_");
    /* shapes: copy_ broadcasts the source, add_ needs the same shape */
    tg_tensor *m23 = seq(tp, 2, SH(2, 3), 0, 0);
    assert_int_equal(tg_copy_(m23, plain), TG_OK);
    check_vals(m23, 2, SH(2, 3), DV(2, 3, 4, 2, 3, 4), 0, "copy_ broadcast");
    tu_assert_status_error(tg_copy_(plain, m23), "copy_", "(2,3)", "does not broadcast to", "(3)");
    tu_assert_status_error(tg_add_(m23, plain, 1.0), "add_", "(2,3)", "(3)", "differ");
    tu_assert_status_error(tg_copy_(plain, seq(tp, 1, SH(4), 0, 0)), "copy_", "size 3 vs 4");
    tg_tape_free(tp);
}

/* ---- (c) gradients through views, reuse, broadcasting --------------------------------------------------- */

/* Expected d sum(y * w) / d x for a view y of the contiguous leaf x: every
 * element of y adds its weight into the x element it aliases. */
static void expected_view_grad(const tg_tensor *x, const tg_tensor *y, const tg_tensor *w, double *out)
{
    int64_t nx = tg_numel(x), ny = tg_numel(y);
    for (int64_t i = 0; i < nx; i++) out[i] = 0;
    for (int64_t k = 0; k < ny; k++) {
        int64_t r = k, off = y->offset;
        for (int d = y->ndim - 1; d >= 0; d--) {
            off += (r % y->shape[d]) * y->stride[d];
            r /= y->shape[d];
        }
        out[off - x->offset] += tg_item_at(w, k);
    }
}

typedef tg_tensor *(*view_fn)(tg_tape *tp, tg_tensor *x);
static tg_tensor *v_view(tg_tape *tp, tg_tensor *x) { return tg_view(tp, x, 2, SH(6, 4)); }
static tg_tensor *v_view_flat(tg_tape *tp, tg_tensor *x) { return tg_view(tp, x, 1, SH(-1)); }
static tg_tensor *v_reshape(tg_tape *tp, tg_tensor *x) { return tg_reshape(tp, x, 3, SH(4, 3, 2)); }
static tg_tensor *v_transpose(tg_tape *tp, tg_tensor *x) { return tg_transpose(tp, x, 0, 2); }
static tg_tensor *v_permute(tg_tape *tp, tg_tensor *x) { return tg_permute(tp, x, (const int[]){2, 0, 1}); }
static tg_tensor *v_narrow(tg_tape *tp, tg_tensor *x) { return tg_narrow(tp, x, 1, 1, 2); }
static tg_tensor *v_narrow_last(tg_tape *tp, tg_tensor *x) { return tg_narrow(tp, x, -1, 1, 3); }
static tg_tensor *v_select(tg_tape *tp, tg_tensor *x) { return tg_select(tp, x, 2, -1); }
static tg_tensor *v_select0(tg_tape *tp, tg_tensor *x) { return tg_select(tp, x, 0, 1); }
static tg_tensor *v_expand(tg_tape *tp, tg_tensor *x) { return tg_expand(tp, tg_unsqueeze(tp, x, 0), 4, SH(3, 2, 3, 4)); }
static tg_tensor *v_expand_mid(tg_tape *tp, tg_tensor *x)
{
    return tg_expand(tp, tg_narrow(tp, x, 1, 2, 1), 3, SH(2, 5, 4)); /* (2,1,4) -> (2,5,4) */
}
static tg_tensor *v_unsqueeze(tg_tape *tp, tg_tensor *x) { return tg_unsqueeze(tp, x, 1); }
static tg_tensor *v_squeeze(tg_tape *tp, tg_tensor *x) { return tg_squeeze(tp, tg_view(tp, x, 4, SH(2, 1, 3, 4)), 1); }
static tg_tensor *v_squeeze_all(tg_tape *tp, tg_tensor *x)
{
    return tg_squeeze_all(tp, tg_narrow(tp, tg_narrow(tp, x, 0, 1, 1), 1, 0, 1)); /* (4) */
}
static tg_tensor *v_t_select(tg_tape *tp, tg_tensor *x) { return tg_t(tp, tg_select(tp, x, 0, 1)); }
static tg_tensor *v_chain(tg_tape *tp, tg_tensor *x)
{
    tg_tensor *p = tg_permute(tp, x, (const int[]){1, 2, 0}); /* (3,4,2) */
    tg_tensor *n = tg_narrow(tp, p, 1, 1, 2);                  /* (3,2,2) */
    tg_tensor *s = tg_select(tp, n, 2, 0);                     /* (3,2) */
    tg_tensor *u = tg_unsqueeze(tp, tg_transpose(tp, s, 0, 1), 0); /* (1,2,3) */
    return tg_expand(tp, u, 3, SH(2, 2, 3));
}
static tg_tensor *v_view_of_view(tg_tape *tp, tg_tensor *x)
{
    return tg_view(tp, tg_narrow(tp, tg_view(tp, x, 2, SH(6, 4)), 0, 2, 3), 2, SH(4, 3)); /* contiguous rows */
}

static void test_grad_through_views(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        view_fn fn;
        const char *node;
    } rows[] = {
        {"view", v_view, "ViewBackward0"},
        {"view -1", v_view_flat, "ViewBackward0"},
        {"reshape (viewable)", v_reshape, "ReshapeAliasBackward0"},
        {"transpose", v_transpose, "TransposeBackward0"},
        {"permute", v_permute, "PermuteBackward0"},
        {"narrow", v_narrow, "SliceBackward0"},
        {"narrow last dim", v_narrow_last, "SliceBackward0"},
        {"select", v_select, "SelectBackward0"},
        {"select dim 0", v_select0, "SelectBackward0"},
        {"expand", v_expand, "ExpandBackward0"},
        {"expand a narrowed dim", v_expand_mid, "ExpandBackward0"},
        {"unsqueeze", v_unsqueeze, "UnsqueezeBackward0"},
        {"squeeze", v_squeeze, "SqueezeBackward1"},
        {"squeeze all", v_squeeze_all, "SqueezeBackward0"},
        {"t of select", v_t_select, "TBackward0"},
        {"chain", v_chain, "ExpandBackward0"},
        {"view of narrow of view", v_view_of_view, "ViewBackward0"},
    };
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = leaf(tp, 3, SH(2, 3, 4), 0.5, 0.25);
    double want[24];
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        tg_tensor *y = rows[r].fn(tp, x);
        if (!y) fail_msg("%s: %s", rows[r].name, tg_last_error());
        assert_ptr_equal(y->data, x->data); /* really a view */
        if (strcmp(tg_grad_fn_name(y), rows[r].node) != 0)
            fail_msg("%s: node %s, want %s", rows[r].name, tg_grad_fn_name(y), rows[r].node);
        tg_tensor *w = seq(tp, y->ndim, y->shape, 1, 1);
        tg_tensor *l = tg_sum(tp, tg_mul(tp, y, w));
        tg_zero_grad(x);
        if (tg_backward(l, NULL, false) != TG_OK) fail_msg("%s: backward: %s", rows[r].name, tg_last_error());
        expected_view_grad(x, y, w, want);
        check_vals(x->grad, 3, SH(2, 3, 4), want, 1e-12, rows[r].name);
    }

    /* the same by hand on small shapes */
    tg_tensor *a = leaf(tp, 2, SH(2, 3), 1, 1);
    struct {
        const char *name;
        tg_tensor *y;
        double want[6];
    } hand[] = {
        {"transpose", tg_transpose(tp, a, 0, 1), {1, 3, 5, 2, 4, 6}},
        {"t", tg_t(tp, a), {1, 3, 5, 2, 4, 6}},
        {"narrow", tg_narrow(tp, a, 1, 1, 2), {0, 1, 2, 0, 3, 4}},
        {"select", tg_select(tp, a, 0, 1), {0, 0, 0, 1, 2, 3}},
        {"select col", tg_select(tp, a, 1, 0), {1, 0, 0, 2, 0, 0}},
        {"view", tg_view(tp, a, 2, SH(3, 2)), {1, 2, 3, 4, 5, 6}},
        {"expand", tg_expand(tp, tg_unsqueeze(tp, a, 0), 3, SH(2, 2, 3)), {8, 10, 12, 14, 16, 18}},
        {"reshape copy", tg_reshape(tp, tg_transpose(tp, a, 0, 1), 1, SH(6)), {1, 3, 5, 2, 4, 6}},
        {"contiguous", tg_contiguous(tp, tg_transpose(tp, a, 0, 1)), {1, 3, 5, 2, 4, 6}},
    };
    for (size_t r = 0; r < sizeof hand / sizeof hand[0]; r++) {
        tg_tensor *y = hand[r].y;
        if (!y) fail_msg("%s: %s", hand[r].name, tg_last_error());
        tg_tensor *w = seq(tp, y->ndim, y->shape, 1, 1);
        tg_zero_grad(a);
        assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, y, w)), NULL, false), TG_OK);
        check_vals(a->grad, 2, SH(2, 3), hand[r].want, 1e-12, hand[r].name);
    }
    /* expand of a (3,1) column */
    tg_tensor *c = leaf(tp, 2, SH(3, 1), 1, 1);
    tg_tensor *e = tg_expand(tp, c, 2, SH(3, 4));
    assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, e, seq(tp, 2, SH(3, 4), 1, 1))), NULL, false), TG_OK);
    check_vals(c->grad, 2, SH(3, 1), DV(10, 26, 42), 1e-12, "expand (3,1)->(3,4)");
    /* two views of the same base in one graph */
    tg_zero_grad(a);
    tg_tensor *l = tg_add(tp, tg_sum(tp, tg_select(tp, a, 0, 0)), tg_sum(tp, tg_mul_scalar(tp, tg_narrow(tp, a, 1, 2, 1), 10)));
    assert_int_equal(tg_backward(l, NULL, false), TG_OK);
    check_vals(a->grad, 2, SH(2, 3), DV(1, 1, 11, 0, 0, 10), 1e-12, "two views");
    tg_tape_free(tp);
}

static void test_reuse_and_broadcast(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = leaf(tp, 1, SH(4), -1, 1); /* -1 0 1 2 */
    tg_tensor *y = tg_add(tp, tg_mul(tp, x, x), x);
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_OK);
    check_vals(x->grad, 1, SH(4), DV(-1, 1, 3, 5), 1e-12, "x*x + x");
    tg_zero_grad(x);
    assert_int_equal(tg_backward(tg_sum(tp, tg_add(tp, x, x)), NULL, false), TG_OK);
    check_vals(x->grad, 1, SH(4), DV(2, 2, 2, 2), 1e-12, "x + x");
    tg_zero_grad(x);
    /* reuse across a deeper graph: z = x * exp(x) * x */
    tg_tensor *z = tg_mul(tp, tg_mul(tp, x, tg_exp(tp, x)), x);
    assert_int_equal(tg_backward(tg_sum(tp, z), NULL, false), TG_OK);
    double want[4];
    for (int i = 0; i < 4; i++) {
        double v = i - 1.0;
        want[i] = exp(v) * (2 * v + v * v);
    }
    check_vals(x->grad, 1, SH(4), want, 1e-12, "x * exp(x) * x");
    tg_zero_grad(x);
    /* a non-leaf used twice */
    tg_tensor *h = tg_mul_scalar(tp, x, 3);
    assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, h, h)), NULL, false), TG_OK);
    check_vals(x->grad, 1, SH(4), DV(-18, 0, 18, 36), 1e-12, "(3x)^2");

    /* broadcasting reduced back to the input's shape */
    tg_tensor *a = leaf(tp, 2, SH(2, 3), 1, 1);
    tg_tensor *b = leaf(tp, 1, SH(3), 10, 10);
    tg_tensor *c = leaf(tp, 2, SH(2, 1), 1, 1);
    tg_tensor *s = leaf(tp, 0, NULL, 2, 0);
    tg_tensor *d = leaf(tp, 3, SH(1, 1, 3), 1, 0);
    tg_tensor *out = tg_add(tp, tg_mul(tp, tg_mul(tp, a, b), s), tg_mul(tp, c, d)); /* (1,2,3) */
    assert_non_null(out);
    assert_int_equal(out->ndim, 3);
    assert_int_equal(tg_backward(tg_sum(tp, out), NULL, false), TG_OK);
    check_vals(a->grad, 2, SH(2, 3), DV(20, 40, 60, 20, 40, 60), 1e-12, "a");
    check_vals(b->grad, 1, SH(3), DV(10, 14, 18), 1e-12, "b");
    check_vals(c->grad, 2, SH(2, 1), DV(3, 3), 1e-12, "c");
    check_vals(s->grad, 0, NULL, DV(1 * 10 + 2 * 20 + 3 * 30 + 4 * 10 + 5 * 20 + 6 * 30), 1e-9, "scalar");
    check_vals(d->grad, 3, SH(1, 1, 3), DV(3, 3, 3), 1e-12, "d");
    /* sub / div broadcasting */
    tg_zero_grad(a);
    tg_zero_grad(b);
    tg_tensor *q = tg_sub(tp, tg_div(tp, a, b), b); /* a/b - b */
    assert_int_equal(tg_backward(tg_sum(tp, q), NULL, false), TG_OK);
    check_vals(a->grad, 2, SH(2, 3), DV(0.1, 0.05, 1.0 / 30, 0.1, 0.05, 1.0 / 30), 1e-12, "d(a/b)/da");
    /* d/db = -(a1 + a2)/b^2 - 2 */
    check_vals(b->grad, 1, SH(3), DV(-5.0 / 100 - 2, -7.0 / 400 - 2, -9.0 / 900 - 2), 1e-12, "d(a/b - b)/db");
    /* matmul broadcast batch: (2,2,3) @ (3,2) -> weight grad summed over the batch */
    tg_tensor *m = leaf(tp, 2, SH(3, 2), 1, 0);
    tg_tensor *xb = seq(tp, 3, SH(2, 2, 3), 1, 1);
    assert_int_equal(tg_backward(tg_sum(tp, tg_matmul(tp, xb, m)), NULL, false), TG_OK);
    /* d/dm[k][n] = sum over batch and rows of x[..][k] */
    check_vals(m->grad, 2, SH(3, 2), DV(1 + 4 + 7 + 10, 22, 2 + 5 + 8 + 11, 26, 3 + 6 + 9 + 12, 30), 1e-12,
               "matmul weight");
    tg_tape_free(tp);
}

/* ---- (d) node names along the book's causal-attention chain --------------------------------------------- */

static void check_printed(const tg_tensor *t, const char *name)
{
    char *s = tg_format(t);
    assert_non_null(s);
    char want[96];
    snprintf(want, sizeof want, "grad_fn=<%s>", name);
    if (!strstr(s, want)) {
        fail_msg("tg_format does not show %s:\n%s", want, s);
    }
    free(s);
}

static void test_node_names(void **state)
{
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(123);
    tg_tensor *inputs = tg_rand(tp, TG_F32, 2, SH(6, 3), g);
    tg_tensor *stack[2] = {inputs, inputs};
    tg_tensor *batch = tg_stack(tp, 2, stack, 0); /* (2,6,3), no grad */
    assert_null(batch->grad_fn);
    tg_tensor *wq = tg_rand(model, TG_F32, 2, SH(3, 2), g), *wk = tg_rand(model, TG_F32, 2, SH(3, 2), g),
              *wv = tg_rand(model, TG_F32, 2, SH(3, 2), g);
    tg_requires_grad_(wq, true);
    tg_requires_grad_(wk, true);
    tg_requires_grad_(wv, true);

    /* 2-D: x @ W */
    tg_tensor *q2 = tg_matmul(tp, inputs, wq);
    check_name(q2, "MmBackward0");
    check_printed(q2, "MmBackward0");
    tg_tensor *k2 = tg_matmul(tp, inputs, wk);
    tg_tensor *s2 = tg_matmul(tp, q2, tg_t(tp, k2));
    check_name(tg_t(tp, k2), "TBackward0");
    check_name(s2, "MmBackward0");
    /* 3-D @ 2-D */
    tg_tensor *queries = tg_matmul(tp, batch, wq), *keys = tg_matmul(tp, batch, wk), *values = tg_matmul(tp, batch, wv);
    check_name(queries, "UnsafeViewBackward0");
    check_printed(queries, "UnsafeViewBackward0");
    tg_tensor *kt = tg_transpose(tp, keys, 1, 2);
    check_name(kt, "TransposeBackward0");
    check_printed(kt, "TransposeBackward0");
    tg_tensor *scores = tg_matmul(tp, queries, kt);
    check_name(scores, "UnsafeViewBackward0");
    tg_tensor *mask = tg_triu(tp, tg_ones(tp, TG_BOOL, 2, SH(6, 6)), 1);
    tg_tensor *masked = tg_masked_fill(tp, scores, mask, -INFINITY);
    check_name(masked, "MaskedFillBackward0");
    check_printed(masked, "MaskedFillBackward0");
    tg_tensor *scaled = tg_div_scalar(tp, masked, sqrt(2.0));
    check_name(scaled, "DivBackward0");
    check_printed(scaled, "DivBackward0");
    tg_tensor *weights = tg_softmax(tp, scaled, -1);
    check_name(weights, "SoftmaxBackward0");
    check_printed(weights, "SoftmaxBackward0");
    /* causal rows: first row attends only to itself */
    assert_true(fabs(tg_get(weights, SH(0, 0, 0)) - 1.0) < 1e-6);
    assert_true(tg_get(weights, SH(0, 0, 1)) == 0.0);
    tg_tensor *dropped = tg_dropout(tp, weights, 0.5, g);
    check_name(dropped, "MulBackward0");
    tg_tensor *ctx = tg_matmul(tp, weights, values); /* (2,6,2) */
    check_name(ctx, "UnsafeViewBackward0");
    /* multi-head wrapper: cat of the heads */
    tg_tensor *heads[2] = {ctx, ctx};
    tg_tensor *cat = tg_cat(tp, 2, heads, -1); /* (2,6,4) */
    check_name(cat, "CatBackward0");
    check_printed(cat, "CatBackward0");
    /* efficient MHA: view into heads, transpose, back with contiguous + view */
    tg_tensor *v4 = tg_view(tp, cat, 4, SH(2, 6, 2, 2));
    check_name(v4, "ViewBackward0");
    check_printed(v4, "ViewBackward0");
    tg_tensor *tr = tg_transpose(tp, v4, 1, 2);
    tg_tensor *ct = tg_contiguous(tp, tr);
    check_name(ct, "CloneBackward0");
    check_printed(ct, "CloneBackward0");
    tg_tensor *back = tg_view(tp, ct, 3, SH(2, 6, 4));
    check_name(back, "ViewBackward0");
    /* output projection: linear 3-D with bias */
    tg_tensor *wo = tg_rand(model, TG_F32, 2, SH(4, 4), g), *bo = tg_zeros(model, TG_F32, 1, SH(4));
    tg_requires_grad_(wo, true);
    tg_requires_grad_(bo, true);
    tg_tensor *out = tg_linear(tp, back, wo, bo);
    check_name(out, "ViewBackward0");
    check_printed(out, "ViewBackward0");
    check_name(tg_linear(tp, tg_select(tp, back, 0, 0), wo, bo), "AddmmBackward0");
    tg_tensor *sum = tg_sum(tp, out);
    check_name(sum, "SumBackward0");
    check_printed(sum, "SumBackward0");
    tg_tensor *mean = tg_mean(tp, out);
    check_name(mean, "MeanBackward0");
    check_printed(mean, "MeanBackward0");
    /* a leaf prints requires_grad=True, a no-grad tensor neither */
    char *s = tg_format(wq);
    assert_non_null(s);
    assert_non_null(strstr(s, "requires_grad=True"));
    assert_null(strstr(s, "grad_fn"));
    free(s);
    s = tg_format(batch);
    assert_null(strstr(s, "grad_fn"));
    assert_null(strstr(s, "requires_grad"));
    free(s);
    /* the whole chain backpropagates into the weights */
    assert_int_equal(tg_backward(mean, NULL, false), TG_OK);
    assert_non_null(wq->grad);
    assert_non_null(wk->grad);
    assert_non_null(wv->grad);
    assert_non_null(bo->grad);
    check_vals(bo->grad, 1, SH(4), DV(0.25, 0.25, 0.25, 0.25), 1e-6, "bias grad of mean");
    double nrm = 0;
    for (int i = 0; i < 6; i++) nrm += fabs(tg_item_at(wq->grad, i));
    assert_true(nrm > 0 && isfinite(nrm));
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* ---- (e) backward follows the graph across tapes ---------------------------------------------------- */

/* The same leaves' gradients, element by element. */
static void check_same_grad_(const tg_tensor *got, const tg_tensor *want, const char *what, const char *file,
                             int line)
{
    if (!got || !want) {
        print_error("%s: gradient %s is NULL\n", what, got ? "wanted" : "got");
        _fail(file, line);
        return;
    }
    tu_assert_close_(got, want, 0, 1e-12, what, file, line);
}
#define check_same_grad(got, want, what) check_same_grad_((got), (want), (what), __FILE__, __LINE__)

/* y = tanh(x @ w) recorded in tb; z = sum(y * exp(y)) + sum(w) in tc. */
static tg_tensor *chain_graph(tg_tape *tb, tg_tape *tc, tg_tensor *x, tg_tensor *w, tg_tensor **y_out)
{
    tg_tensor *y = tg_tanh(tb, tg_matmul(tb, x, w));
    if (y_out) *y_out = y;
    return tg_add(tc, tg_sum(tc, tg_mul(tc, y, tg_exp(tc, y))), tg_sum(tc, w));
}

static void test_backward_across_tapes(void **state)
{
    (void)state;
    tg_tape *ta = tg_tape_new(), *tb = tg_tape_new(), *tc = tg_tape_new(), *one = tg_tape_new();
    tg_tensor *x = leaf(ta, 2, SH(2, 3), -0.5, 0.2), *w = leaf(ta, 2, SH(3, 2), 0.3, -0.1);
    tg_tensor *x1 = leaf(one, 2, SH(2, 3), -0.5, 0.2), *w1 = leaf(one, 2, SH(3, 2), 0.3, -0.1);

    /* reference: the whole graph in one tape */
    assert_int_equal(tg_backward(chain_graph(one, one, x1, w1, NULL), NULL, false), TG_OK);
    /* x in A, y = f(x) in B, z = g(y) in C */
    tg_tensor *y;
    tg_tensor *z = chain_graph(tb, tc, x, w, &y);
    tu_assert_ok(z);
    assert_int_equal(tg_backward(z, NULL, true), TG_OK);
    check_same_grad(x->grad, x1->grad, "two tapes: dx");
    check_same_grad(w->grad, w1->grad, "two tapes: dw");
    /* retained: a second backward through the same nodes starts from zero and the leaves accumulate */
    assert_int_equal(tg_backward(z, NULL, false), TG_OK);
    assert_int_equal(tg_backward(chain_graph(one, one, x1, w1, NULL), NULL, false), TG_OK);
    check_same_grad(x->grad, x1->grad, "two tapes, twice: dx");
    /* released across tapes: z again, or a new graph in another tape reusing y (in B), errors */
    tu_assert_status_error(tg_backward(z, NULL, false), "second time");
    tg_tensor *z2 = tg_sum(ta, tg_exp(ta, y));
    tu_assert_status_error(tg_backward(z2, NULL, false), "second time", "TanhBackward0");
    check_same_grad(x->grad, x1->grad, "dx unchanged by the failed backwards");

    /* three tapes, each op in the next one: t = x @ w (B), u = tanh(t) (C), v = sum(u * u) (A) */
    tg_zero_grad(x), tg_zero_grad(w), tg_zero_grad(x1), tg_zero_grad(w1);
    tg_tensor *t = tg_matmul(tb, x, w);
    tg_tensor *u = tg_tanh(tc, t);
    tg_tensor *v = tg_sum(ta, tg_mul(ta, u, u));
    tg_tensor *u1 = tg_tanh(one, tg_matmul(one, x1, w1));
    tg_tensor *v1 = tg_sum(one, tg_mul(one, u1, u1));
    assert_int_equal(tg_backward(v, NULL, false), TG_OK);
    assert_int_equal(tg_backward(v1, NULL, false), TG_OK);
    check_same_grad(x->grad, x1->grad, "three tapes: dx");
    check_same_grad(w->grad, w1->grad, "three tapes: dw");

    /* a diamond across tapes, recorded out of topological order within a tape:
     * a = exp(x) (B), b = 2 a (C), c = tanh(a) + b (B, after b), d = sum(b * c) (C) */
    tg_zero_grad(x), tg_zero_grad(x1);
    tg_tensor *a = tg_exp(tb, x);
    tg_tensor *b = tg_mul_scalar(tc, a, 2);
    tg_tensor *c = tg_add(tb, tg_tanh(tb, a), b);
    tg_tensor *d = tg_sum(tc, tg_mul(tc, b, c));
    tg_tensor *a1 = tg_exp(one, x1), *b1 = tg_mul_scalar(one, a1, 2);
    tg_tensor *d1 = tg_sum(one, tg_mul(one, b1, tg_add(one, tg_tanh(one, a1), b1)));
    assert_int_equal(tg_backward(d, NULL, false), TG_OK);
    assert_int_equal(tg_backward(d1, NULL, false), TG_OK);
    check_same_grad(x->grad, x1->grad, "diamond across tapes: dx");
    /* by hand: d = sum(2a (tanh a + 2a)); dd/da = 2 tanh a + 2a (1 - tanh^2 a) + 8a; da/dx = a */
    for (int64_t i = 0; i < 6; i++) {
        double av = exp(tg_item_at(x, i)), th = tanh(av);
        double want = (2 * th + 2 * av * (1 - th * th) + 8 * av) * av;
        assert_true(fabs(tg_item_at(x->grad, i) - want) < 1e-12 * fabs(want) + 1e-12);
    }
    /* the scratch of the traversal went in the root's tape, and nothing else changed tapes */
    tg_tape_free(one);
    tg_tape_free(tc);
    tg_tape_free(tb);
    tg_tape_free(ta);
}

/* A chain far deeper than the C stack would allow a recursive walk. */
static void test_deep_chain(void **state)
{
    (void)state;
    enum { DEPTH = 200000 };
    tg_tape *tp = tg_tape_new(), *step = tg_tape_new();
    tg_tensor *x = leaf(tp, 0, NULL, 0.5, 0);
    tg_tensor *y = x;
    for (int i = 0; i < DEPTH; i++) y = tg_add(step, y, x);
    tu_assert_ok(y);
    assert_int_equal(tg_backward(y, NULL, false), TG_OK);
    assert_true(tg_item(x->grad) == DEPTH + 1);
    printf("deep chain: %d adds, step tape %zu MiB\n", DEPTH, tg_tape_reserved(step) >> 20);
    tg_tape_free(step);
    tg_tape_free(tp);
}

/* Backward hands consumed gradients back to the tape's pool: through a deep
 * network, backward's memory stays that of a few layers, and the gradients
 * equal those of the same network run layer by layer by hand. */
static void test_backward_pool(void **state)
{
    (void)state;
    enum { DEPTH = 40, R = 32, C = 128 };
    tg_tape *model = tg_tape_new(), *step = tg_tape_new();
    tg_generator *g = tg_generator_new(5);
    tg_tensor *w[DEPTH];
    for (int i = 0; i < DEPTH; i++) {
        w[i] = tg_parameter_new(model, TG_F64, 2, SH(C, C));
        assert_int_equal(tg_uniform_(w[i], -0.15, 0.15, g), TG_OK);
    }
    tg_tensor *x = tg_rand(step, TG_F64, 2, SH(R, C), g);
    tg_tensor *h[DEPTH + 1];
    h[0] = x;
    /* each layer: h = tanh(h @ w) + h (a residual: a gradient reaching one
     * tensor from two consumers) */
    for (int i = 0; i < DEPTH; i++) h[i + 1] = tg_add(step, tg_tanh(step, tg_matmul(step, h[i], w[i])), h[i]);
    tg_tensor *loss = tg_sum(step, tg_mul(step, h[DEPTH], h[DEPTH]));
    tu_assert_ok(loss);
    size_t fwd = tg_tape_used(step), layer = (size_t)R * C * sizeof(double);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    size_t bwd = tg_tape_used(step) - fwd;
    printf("backward pool: forward %zu KiB, backward %zu KiB (one layer's gradient: %zu KiB)\n", fwd >> 10,
           bwd >> 10, layer >> 10);
    /* without the pool each layer leaves four (R, C) gradients behind */
    assert_true(bwd < 8 * layer);
    /* the same gradients by hand, every temporary kept: dh = dh + (dh * (1 - t^2)) @ w^T */
    bool prev = tg_set_grad_enabled(false);
    tg_tape *ref = tg_tape_new();
    tg_tensor *dh = tg_mul_scalar(ref, h[DEPTH], 2.0);
    for (int i = DEPTH - 1; i >= 0; i--) {
        tg_tensor *t = tg_tanh(ref, tg_matmul(ref, h[i], w[i]));
        tg_tensor *du = tg_mul(ref, dh, tg_rsub_scalar(ref, tg_mul(ref, t, t), 1.0));
        tg_tensor *dw = tg_matmul(ref, tg_t(ref, h[i]), du);
        tu_assert_ok(dw);
        tu_assert_close(w[i]->grad, dw, 1e-10, 1e-12, "dw");
        dh = tg_add(ref, dh, tg_matmul(ref, du, tg_t(ref, w[i])));
    }
    tg_set_grad_enabled(prev);
    tg_tape_free(ref);

    /* a big first gradient (as the logits' is) is split once consumed: the
     * layers' gradients after it fit in its blocks and take nothing new */
    tg_tape_reset(step);
    for (int i = 0; i < DEPTH; i++) tg_zero_grad(w[i]);
    tg_tensor *wide = tg_parameter_new(model, TG_F64, 2, SH(C, 16 * C));
    assert_int_equal(tg_uniform_(wide, -0.1, 0.1, g), TG_OK);
    h[0] = tg_rand(step, TG_F64, 2, SH(R, C), g);
    for (int i = 0; i < DEPTH; i++) h[i + 1] = tg_add(step, tg_tanh(step, tg_matmul(step, h[i], w[i])), h[i]);
    tg_tensor *y = tg_matmul(step, h[DEPTH], wide);
    loss = tg_sum(step, tg_mul_scalar(step, tg_exp(step, y), 0.5));
    tu_assert_ok(loss);
    fwd = tg_tape_used(step);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    bwd = tg_tape_used(step) - fwd;
    printf("backward pool, wide head: backward %zu KiB (the head's gradient: %zu KiB)\n", bwd >> 10, (16 * layer) >> 10);
    /* two head-sized gradients live at once (exp's and the scaling's); the
     * layers' own would add 5 layers' worth (see above) without the split */
    assert_true(bwd < 2 * 16 * layer + 2 * layer);
    tg_generator_free(g);
    tg_tape_free(step);
    tg_tape_free(model);
}

/* ---- (f) backward's status and the error message ---------------------------------------------------- */

/* A weight two products use in one backward (as DPO's chosen and rejected
 * forwards use each weight) gets, under EXACT, each product's gradient
 * rounded whole and then added, as PyTorch adds them: a + b, not the second
 * product accumulated into the first (which rounds otherwise once a product
 * spans several of the BLAS's K blocks). The same after zero_grad and across
 * two backwards (gradient accumulation). */
static void test_grad_sum_of_products(void **state)
{
    (void)state;
    enum { K = 1500, IN = 96, OUT = 64 };
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(9);
    tg_tensor *w = tg_parameter_new(tp, TG_F32, 2, SH(IN, OUT));
    assert_int_equal(tg_uniform_(w, -1, 1, g), TG_OK);
    tg_tensor *x1 = tg_rand(tp, TG_F32, 2, SH(K, IN), g), *x2 = tg_rand(tp, TG_F32, 2, SH(K, IN), g);
    tg_tensor *g1 = tg_rand(tp, TG_F32, 2, SH(K, OUT), g), *g2 = tg_rand(tp, TG_F32, 2, SH(K, OUT), g);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *a = tg_matmul(tp, tg_t(tp, x1), g1), *b = tg_matmul(tp, tg_t(tp, x2), g2);
    tg_tensor *want = tg_add(tp, a, b), *want3 = tg_add(tp, want, a);
    tg_set_grad_enabled(prev);
    for (int round = 0; round < 2; round++) { /* round 1: after zero_grad (zeros held) */
        tg_tensor *l = tg_add(tp, tg_sum(tp, tg_mul(tp, tg_matmul(tp, x1, w), g1)),
                              tg_sum(tp, tg_mul(tp, tg_matmul(tp, x2, w), g2)));
        assert_int_equal(tg_backward(l, NULL, false), TG_OK);
        tu_assert_close(w->grad, want, 0, 0, "a weight's gradient from two products");
        tg_zero_grad(w);
    }
    /* accumulated over two backwards: (a + b) + a */
    tg_tensor *l = tg_add(tp, tg_sum(tp, tg_mul(tp, tg_matmul(tp, x1, w), g1)),
                          tg_sum(tp, tg_mul(tp, tg_matmul(tp, x2, w), g2)));
    assert_int_equal(tg_backward(l, NULL, false), TG_OK);
    assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, tg_matmul(tp, x1, w), g1)), NULL, false), TG_OK);
    tu_assert_close(w->grad, want3, 0, 0, "a gradient accumulated over two backwards");
    tg_generator_free(g);
    tg_tape_free(tp);
}

static void test_backward_status(void **state)
{
    (void)state;
    tg_tape *model = tg_tape_new(), *step = tg_tape_new();
    tg_tensor *x = leaf(model, 1, SH(3), 1, 1);

    /* an error recorded before a successful backward stays readable */
    tg_error("an earlier failure: %d", 42);
    tg_tensor *l = tg_sum(step, tg_mul(step, x, x));
    assert_int_equal(tg_backward(l, NULL, false), TG_OK);
    assert_string_equal(tg_last_error(), "an earlier failure: 42");
    tg_clear_error();
    assert_int_equal(tg_backward(tg_sum(step, tg_exp(step, x)), NULL, false), TG_OK);
    assert_string_equal(tg_last_error(), "");

    /* an allocation that fails during backward: TG_ENOMEM with the tape's message */
    tg_tape_reset(step);
    tg_tensor *big = leaf(model, 1, SH(100000), 0, 1e-5);
    tg_tensor *y = tg_exp(step, big);
    tg_tensor *s = tg_sum(step, y);
    tu_assert_ok(s);
    tg_tape_set_limit(step, tg_tape_reserved(step));
    int st = tg_backward(s, NULL, false);
    printf("backward over the limit: %s\n", tg_last_error());
    assert_int_equal(st, TG_ENOMEM);
    assert_non_null(strstr(tg_last_error(), "memory limit"));
    assert_null(big->grad);
    tg_tape_free(step);
    tg_tape_free(model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tape_steady_state),
        cmocka_unit_test(test_requires_grad_and_leaves),
        cmocka_unit_test(test_accumulation_and_retain),
        cmocka_unit_test(test_detach_no_grad_inplace),
        cmocka_unit_test(test_grad_through_views),
        cmocka_unit_test(test_reuse_and_broadcast),
        cmocka_unit_test(test_node_names),
        cmocka_unit_test(test_backward_across_tapes),
        cmocka_unit_test(test_deep_chain),
        cmocka_unit_test(test_backward_pool),
        cmocka_unit_test(test_grad_sum_of_products),
        cmocka_unit_test(test_backward_status),
    };
    return cmocka_run_group_tests_name("autograd", tests, NULL, NULL);
}
