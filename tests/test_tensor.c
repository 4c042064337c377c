/* Tensor semantics: creation, dtypes, views and storage sharing, view rules,
 * argument errors (messages name the op and the shapes), NULL inputs for every
 * public op, numerically extreme softmax/cross-entropy, the OpenMP paths
 * against serial loops, and the tape memory limit. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------- */

/* Fails unless t is non-NULL, has the given shape and its row-major values
 * equal want[] within tol. */
static void check_vals_(const tg_tensor *t, int ndim, const int64_t *shape, const double *want, double tol,
                        const char *file, int line)
{
    if (!t) {
        print_error("got NULL (%s)\n", tg_last_error());
        _fail(file, line);
        return;
    }
    if (t->ndim != ndim) {
        print_error("ndim %d, want %d\n", t->ndim, ndim);
        _fail(file, line);
        return;
    }
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) {
            print_error("shape[%d] = %lld, want %lld\n", d, (long long)t->shape[d], (long long)shape[d]);
            _fail(file, line);
            return;
        }
    int64_t n = tg_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double g = tg_item_at(t, i);
        if (!(fabs(g - want[i]) <= tol) && !(isnan(g) && isnan(want[i])) && g != want[i]) {
            print_error("element %lld: got %.10g, want %.10g\n", (long long)i, g, want[i]);
            _fail(file, line);
            return;
        }
    }
}
#define check_vals(t, ndim, shape, want, tol) check_vals_((t), (ndim), (shape), (want), (tol), __FILE__, __LINE__)
#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define DV(...) ((const double[]){__VA_ARGS__})

/* arange(0, n) as f32 viewed to shape. */
static tg_tensor *iota(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_empty(tp, dt, ndim, shape);
    assert_non_null(t);
    for (int64_t i = 0; i < tg_numel(t); i++) {
        int64_t idx[TG_MAX_DIMS], r = i;
        for (int d = ndim - 1; d >= 0; d--) {
            idx[d] = r % shape[d];
            r /= shape[d];
        }
        tg_set(t, idx, (double)i);
    }
    return t;
}

/* ---- creation ---------------------------------------------------------------------- */

static void test_creation(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *z = tg_zeros(tp, TG_F32, 2, SH(2, 3));
    check_vals(z, 2, SH(2, 3), DV(0, 0, 0, 0, 0, 0), 0);
    assert_true(tg_is_contiguous(z));
    assert_int_equal(z->dtype, TG_F32);
    tg_tensor *o = tg_ones(tp, TG_F64, 1, SH(3));
    check_vals(o, 1, SH(3), DV(1, 1, 1), 0);
    assert_int_equal(o->dtype, TG_F64);
    tg_tensor *f = tg_full(tp, TG_F32, 2, SH(1, 2), -2.5);
    check_vals(f, 2, SH(1, 2), DV(-2.5, -2.5), 0);
    tg_tensor *fb = tg_full(tp, TG_BOOL, 1, SH(2), 3.0);
    check_vals(fb, 1, SH(2), DV(1, 1), 0);
    tg_tensor *s = tg_scalar(tp, TG_F64, 4.25);
    assert_non_null(s);
    assert_int_equal(s->ndim, 0);
    assert_int_equal(tg_numel(s), 1);
    assert_true(tg_item(s) == 4.25);
    int64_t empty_shape[1] = {0};
    tg_tensor *e = tg_zeros(tp, TG_F32, 1, empty_shape);
    assert_non_null(e);
    assert_int_equal(tg_numel(e), 0);
    /* an empty tensor is contiguous whatever its strides (as PyTorch) */
    tg_tensor *e2 = tg_zeros(tp, TG_F32, 2, SH(2, 0));
    assert_non_null(e2);
    assert_true(tg_is_contiguous(e2));
    tg_tensor *e2t = tg_transpose(tp, e2, 0, 1);
    assert_non_null(e2t);
    assert_true(tg_is_contiguous(e2t));
    /* a zero size does not hide a product of the other sizes that overflows the strides */
    tu_assert_null_error(tg_zeros(tp, TG_F32, 3, SH(0, 1LL << 32, 1LL << 32)), "empty", "too large");
    tu_assert_null_error(tg_view(tp, e2, 3, SH(0, 1LL << 32, 1LL << 32)), "view", "too large");
    tu_assert_null_error(tg_expand(tp, tg_zeros(tp, TG_F32, 2, SH(1, 1)), 2, SH(1LL << 32, 1LL << 32)),
                         "expand", "too large");

    const float src[6] = {1, 2, 3, 4, 5, 6};
    tg_tensor *fd = tg_from_f32(tp, 2, SH(3, 2), src);
    check_vals(fd, 2, SH(3, 2), DV(1, 2, 3, 4, 5, 6), 0);
    const int64_t isrc[3] = {7, -1, 1LL << 40};
    tg_tensor *fi = tg_from_data(tp, TG_I64, 1, SH(3), isrc);
    check_vals(fi, 1, SH(3), DV(7, -1, (double)(1LL << 40)), 0);
    const double dsrc[2] = {0.1, -0.2};
    tg_tensor *f64 = tg_from_f64(tp, 1, SH(2), dsrc);
    check_vals(f64, 1, SH(2), DV(0.1, -0.2), 0);
    /* from_data copies: changing the source afterwards does not change the tensor */
    float src2[2] = {1, 2};
    tg_tensor *cp = tg_from_f32(tp, 1, SH(2), src2);
    src2[0] = 99;
    check_vals(cp, 1, SH(2), DV(1, 2), 0);

    /* bad shapes */
    tu_assert_null_error(tg_zeros(tp, TG_F32, 2, SH(2, -1)), "negative size");
    tu_assert_null_error(tg_empty(tp, TG_F32, TG_MAX_DIMS + 1, SH(1, 1, 1, 1, 1, 1, 1, 1, 1)), "dims");
    tu_assert_null_error(tg_empty(tp, (tg_dtype)99, 1, SH(1)), "dtype");

    /* arange */
    check_vals(tg_arange(tp, TG_F32, 0, 5, 1), 1, SH(5), DV(0, 1, 2, 3, 4), 0);
    check_vals(tg_arange(tp, TG_F64, 1, 2, 0.25), 1, SH(4), DV(1, 1.25, 1.5, 1.75), 0);
    check_vals(tg_arange(tp, TG_F32, 5, 0, -2), 1, SH(3), DV(5, 3, 1), 0);
    check_vals(tg_arange(tp, TG_I64, 0, 3, 1), 1, SH(3), DV(0, 1, 2), 0);
    tg_tensor *ar0 = tg_arange(tp, TG_F32, 3, 3, 1);
    assert_non_null(ar0);
    assert_int_equal(tg_numel(ar0), 0);
    tu_assert_null_error(tg_arange(tp, TG_F32, 0, 5, 0), "arange");

    /* eye */
    check_vals(tg_eye(tp, TG_F32, 3, 3), 2, SH(3, 3), DV(1, 0, 0, 0, 1, 0, 0, 0, 1), 0);
    check_vals(tg_eye(tp, TG_F64, 2, 3), 2, SH(2, 3), DV(1, 0, 0, 0, 1, 0), 0);
    check_vals(tg_eye(tp, TG_F32, 3, 2), 2, SH(3, 2), DV(1, 0, 0, 1, 0, 0), 0);
    check_vals(tg_eye(tp, TG_F32, 2, -1), 2, SH(2, 2), DV(1, 0, 0, 1), 0);

    /* triu / tril, incl. negative diagonals and batches */
    tg_tensor *m = iota(tp, TG_F32, 2, SH(3, 3)); /* 0..8 */
    for (int i = 0; i < 9; i++) tg_set(m, SH(i / 3, i % 3), i + 1.0); /* 1..9 */
    check_vals(tg_triu(tp, m, 0), 2, SH(3, 3), DV(1, 2, 3, 0, 5, 6, 0, 0, 9), 0);
    check_vals(tg_triu(tp, m, 1), 2, SH(3, 3), DV(0, 2, 3, 0, 0, 6, 0, 0, 0), 0);
    check_vals(tg_triu(tp, m, -1), 2, SH(3, 3), DV(1, 2, 3, 4, 5, 6, 0, 8, 9), 0);
    check_vals(tg_triu(tp, m, -5), 2, SH(3, 3), DV(1, 2, 3, 4, 5, 6, 7, 8, 9), 0);
    check_vals(tg_tril(tp, m, 0), 2, SH(3, 3), DV(1, 0, 0, 4, 5, 0, 7, 8, 9), 0);
    check_vals(tg_tril(tp, m, -1), 2, SH(3, 3), DV(0, 0, 0, 4, 0, 0, 7, 8, 0), 0);
    check_vals(tg_tril(tp, m, -2), 2, SH(3, 3), DV(0, 0, 0, 0, 0, 0, 7, 0, 0), 0);
    check_vals(tg_tril(tp, m, 1), 2, SH(3, 3), DV(1, 2, 0, 4, 5, 6, 7, 8, 9), 0);
    /* the input is untouched */
    check_vals(m, 2, SH(3, 3), DV(1, 2, 3, 4, 5, 6, 7, 8, 9), 0);
    /* non-square */
    tg_tensor *r = tg_ones(tp, TG_F64, 2, SH(2, 4));
    check_vals(tg_triu(tp, r, 1), 2, SH(2, 4), DV(0, 1, 1, 1, 0, 0, 1, 1), 0);
    check_vals(tg_tril(tp, r, -1), 2, SH(2, 4), DV(0, 0, 0, 0, 1, 0, 0, 0), 0);
    /* batched (2,2,3) */
    tg_tensor *b = tg_full(tp, TG_F32, 3, SH(2, 2, 3), 2.0);
    check_vals(tg_triu(tp, b, 0), 3, SH(2, 2, 3), DV(2, 2, 2, 0, 2, 2, 2, 2, 2, 0, 2, 2), 0);
    check_vals(tg_tril(tp, b, -1), 3, SH(2, 2, 3), DV(0, 0, 0, 2, 0, 0, 0, 0, 0, 2, 0, 0), 0);
    /* triu of a transposed (non-contiguous) input */
    tg_tensor *mt = tg_transpose(tp, m, 0, 1);
    check_vals(tg_triu(tp, mt, 0), 2, SH(3, 3), DV(1, 4, 7, 0, 5, 8, 0, 0, 9), 0);
    /* bool mask, the causal mask of the book */
    tg_tensor *mask = tg_triu(tp, tg_ones(tp, TG_BOOL, 2, SH(3, 3)), 1);
    check_vals(mask, 2, SH(3, 3), DV(0, 1, 1, 0, 0, 1, 0, 0, 0), 0);
    assert_int_equal(mask->dtype, TG_BOOL);
    tu_assert_null_error(tg_triu(tp, tg_ones(tp, TG_F32, 1, SH(3)), 0), "triu", "2 dims");
    tu_assert_null_error(tg_tril(tp, tg_ones(tp, TG_F32, 1, SH(3)), 0), "tril", "2 dims");

    /* like, to_dtype */
    tg_tensor *zl = tg_zeros_like(tp, m);
    check_vals(zl, 2, SH(3, 3), DV(0, 0, 0, 0, 0, 0, 0, 0, 0), 0);
    assert_int_equal(zl->dtype, TG_F32);
    tg_tensor *el = tg_empty_like(tp, b);
    assert_non_null(el);
    assert_true(tg_same_shape(el, b));
    tg_tensor *d = tg_to_dtype(tp, mt, TG_F64);
    check_vals(d, 2, SH(3, 3), DV(1, 4, 7, 2, 5, 8, 3, 6, 9), 0);
    assert_int_equal(d->dtype, TG_F64);
    assert_true(tg_is_contiguous(d));
    tg_tensor *di = tg_to_dtype(tp, tg_from_f64(tp, 1, SH(3), (double[]){1.9, -1.9, 0.0}), TG_I64);
    check_vals(di, 1, SH(3), DV(1, -1, 0), 0);
    tg_tape_free(tp);
}

static void test_dtypes(void **state)
{
    (void)state;
    assert_int_equal(tg_dtype_size(TG_F32), 4);
    assert_int_equal(tg_dtype_size(TG_F64), 8);
    assert_int_equal(tg_dtype_size(TG_BOOL), 1);
    assert_int_equal(tg_dtype_size(TG_U8), 1);
    assert_int_equal(tg_dtype_size(TG_I64), 8);
    assert_int_equal(tg_dtype_size(TG_DTYPE_COUNT), 0);
    assert_string_equal(tg_dtype_name(TG_F32), "float32");
    assert_string_equal(tg_dtype_name(TG_F64), "float64");
    assert_string_equal(tg_dtype_name(TG_BOOL), "bool");
    assert_string_equal(tg_dtype_name(TG_U8), "uint8");
    assert_string_equal(tg_dtype_name(TG_I64), "int64");
    const char *bad = tg_dtype_name(TG_DTYPE_COUNT);
    assert_non_null(bad); /* something printable, not a crash */

    tg_tape *tp = tg_tape_new();
    tg_tensor *u = tg_full(tp, TG_U8, 1, SH(2), 200);
    check_vals(u, 1, SH(2), DV(200, 200), 0);
    char buf[64];
    assert_string_equal(tg_shape_str(u, buf, sizeof buf), "(2)");
    assert_string_equal(tg_shape_str(tg_scalar(tp, TG_F32, 1), buf, sizeof buf), "()");
    assert_string_equal(tg_shape_str(tg_zeros(tp, TG_F32, 3, SH(2, 6, 3)), buf, sizeof buf), "(2,6,3)");
    tg_tape_free(tp);
}

/* ---- views share storage ----------------------------------------------------------------- */

static void test_views_share_storage(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *base = iota(tp, TG_F32, 2, SH(3, 4)); /* 0..11 */

    tg_tensor *nr = tg_narrow(tp, base, 1, 1, 2);
    assert_non_null(nr);
    assert_ptr_equal(nr->data, base->data);
    assert_false(tg_is_contiguous(nr));
    assert_int_equal(tg_fill_(nr, 7), TG_OK);
    check_vals(base, 2, SH(3, 4), DV(0, 7, 7, 3, 4, 7, 7, 7, 8, 7, 7, 11), 0);

    tg_tensor *base2 = iota(tp, TG_F32, 2, SH(3, 4));
    tg_tensor *tr = tg_transpose(tp, base2, 0, 1); /* (4,3) */
    assert_non_null(tr);
    assert_ptr_equal(tr->data, base2->data);
    assert_int_equal(tr->shape[0], 4);
    assert_int_equal(tr->stride[0], 1);
    assert_int_equal(tr->stride[1], 4);
    tg_tensor *src = iota(tp, TG_F32, 2, SH(4, 3)); /* src[i][j] = 3i + j */
    assert_int_equal(tg_copy_(tr, src), TG_OK);
    /* base2[j][i] = tr[i][j] = 3i + j */
    check_vals(base2, 2, SH(3, 4), DV(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11), 0);

    tg_tensor *base3 = iota(tp, TG_F64, 2, SH(3, 4));
    tg_tensor *sel = tg_select(tp, base3, 0, 2);
    check_vals(sel, 1, SH(4), DV(8, 9, 10, 11), 0);
    assert_int_equal(tg_fill_(sel, -1), TG_OK);
    check_vals(base3, 2, SH(3, 4), DV(0, 1, 2, 3, 4, 5, 6, 7, -1, -1, -1, -1), 0);
    tg_tensor *selc = tg_select(tp, base3, 1, -1); /* last column */
    check_vals(selc, 1, SH(3), DV(3, 7, -1), 0);
    /* broadcasting copy into a column view */
    assert_int_equal(tg_copy_(selc, tg_scalar(tp, TG_F64, 5)), TG_OK);
    check_vals(base3, 2, SH(3, 4), DV(0, 1, 2, 5, 4, 5, 6, 5, -1, -1, -1, 5), 0);
    tu_assert_status_error(tg_copy_(selc, tg_zeros(tp, TG_F64, 1, SH(4))), "copy_");

    /* chains of views: view -> permute -> narrow -> unsqueeze, writes seen by the base */
    tg_tensor *base4 = iota(tp, TG_F32, 1, SH(24));
    tg_tensor *v3 = tg_view(tp, base4, 3, SH(2, 3, 4));
    tg_tensor *pm = tg_permute(tp, v3, (const int[]){2, 0, 1}); /* (4,2,3) */
    tg_tensor *n2 = tg_narrow(tp, pm, 0, 3, 1);                  /* (1,2,3): base[i*12+j*4+3] */
    tg_tensor *u = tg_unsqueeze(tp, tg_squeeze(tp, n2, 0), 0);
    assert_non_null(u);
    assert_ptr_equal(u->data, base4->data);
    check_vals(u, 3, SH(1, 2, 3), DV(3, 7, 11, 15, 19, 23), 0);
    assert_int_equal(tg_fill_(u, 100), TG_OK);
    for (int i = 0; i < 24; i++) assert_true(tg_item_at(base4, i) == (i % 4 == 3 ? 100.0 : i));

    /* reshape that can view shares storage */
    tg_tensor *rs = tg_reshape(tp, base4, 2, SH(4, 6));
    assert_ptr_equal(rs->data, base4->data);
    tg_set(rs, SH(0, 0), -5);
    assert_true(tg_item_at(base4, 0) == -5);
    tg_tape_free(tp);
}

/* ---- view rules ---------------------------------------------------------------------------- */

static void test_view_rules(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = iota(tp, TG_F32, 2, SH(3, 4));
    tg_tensor *xt = tg_transpose(tp, x, 0, 1); /* (4,3), not contiguous */
    tu_assert_null_error(tg_view(tp, xt, 1, SH(12)), "view", "use reshape");
    tu_assert_null_error(tg_view(tp, xt, 2, SH(2, 6)), "view", "reshape");
    /* a view that keeps the transposed dims separate is fine */
    tg_tensor *ok = tg_view(tp, xt, 3, SH(4, 1, 3));
    assert_non_null(ok);
    assert_ptr_equal(ok->data, x->data);

    tg_tensor *r = tg_reshape(tp, xt, 1, SH(12));
    check_vals(r, 1, SH(12), DV(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11), 0);
    assert_true(tg_is_contiguous(r));
    assert_ptr_not_equal(tg_data_ptr(r), tg_data_ptr(x)); /* a copy */
    tg_set(r, SH(0), 42);
    assert_true(tg_item_at(x, 0) == 0); /* the copy is independent */
    tg_tensor *r2 = tg_reshape(tp, xt, 2, SH(-1, 6));
    check_vals(r2, 2, SH(2, 6), DV(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11), 0);

    /* -1 inference */
    tg_tensor *v = tg_view(tp, x, 2, SH(-1, 6));
    check_vals(v, 2, SH(2, 6), DV(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 0);
    v = tg_view(tp, x, 3, SH(2, -1, 3));
    assert_non_null(v);
    assert_int_equal(v->shape[1], 2);
    v = tg_view(tp, x, 1, SH(-1));
    assert_non_null(v);
    assert_int_equal(v->shape[0], 12);
    tg_tensor *one = tg_ones(tp, TG_F32, 1, SH(1));
    tg_tensor *sc = tg_view(tp, one, 0, NULL);
    assert_non_null(sc);
    assert_int_equal(sc->ndim, 0);

    /* invalid shapes */
    tu_assert_null_error(tg_view(tp, x, 2, SH(5, -1)), "view", "invalid for input of size 12");
    tu_assert_null_error(tg_view(tp, x, 2, SH(5, 3)), "view", "12");
    tu_assert_null_error(tg_view(tp, x, 2, SH(-1, -1)), "view", "only one dimension can be inferred");
    tu_assert_null_error(tg_view(tp, x, 2, SH(-2, 6)), "view", "invalid shape dimension");
    tu_assert_null_error(tg_reshape(tp, x, 2, SH(7, -1)), "reshape", "12");
    tu_assert_null_error(tg_view(tp, x, 1, NULL), "view");

    /* contiguous: same pointer when already contiguous, else a copy */
    assert_ptr_equal(tg_contiguous(tp, x), x);
    tg_tensor *c = tg_contiguous(tp, xt);
    assert_non_null(c);
    assert_ptr_not_equal(c, xt);
    assert_true(tg_is_contiguous(c));
    assert_ptr_not_equal(c->data, x->data);
    check_vals(c, 2, SH(4, 3), DV(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11), 0);
    /* size-1 dims with odd strides are still contiguous */
    tg_tensor *u = tg_unsqueeze(tp, x, 1);
    assert_true(tg_is_contiguous(u));
    assert_ptr_equal(tg_contiguous(tp, u), u);
    /* clone always copies */
    tg_tensor *cl = tg_clone(tp, x);
    assert_ptr_not_equal(cl->data, x->data);
    check_vals(cl, 2, SH(3, 4), DV(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 0);

    /* t */
    tg_tensor *tt = tg_t(tp, x);
    check_vals(tt, 2, SH(4, 3), DV(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11), 0);
    tg_tensor *t1 = tg_t(tp, tg_ones(tp, TG_F32, 1, SH(3)));
    assert_non_null(t1);
    assert_int_equal(t1->ndim, 1);
    tu_assert_null_error(tg_t(tp, tg_ones(tp, TG_F32, 3, SH(1, 2, 3))), "t:", "3D");
    tg_tape_free(tp);
}

static void test_expand(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *c = tg_from_f32(tp, 2, SH(3, 1), (float[]){1, 2, 3});
    tg_tensor *e = tg_expand(tp, c, 2, SH(3, 4));
    check_vals(e, 2, SH(3, 4), DV(1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), 0);
    assert_int_equal(e->stride[1], 0);
    assert_ptr_equal(e->data, c->data);
    /* -1 keeps a dim, new leading dims get stride 0 */
    tg_tensor *e2 = tg_expand(tp, c, 3, SH(2, -1, 2));
    check_vals(e2, 3, SH(2, 3, 2), DV(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3), 0);
    assert_int_equal(e2->stride[0], 0);
    assert_int_equal(e2->stride[2], 0);
    /* writing through the base is seen by every expanded element */
    tg_set(c, SH(1, 0), 9);
    assert_true(tg_get(e, SH(1, 3)) == 9);
    assert_true(tg_get(e2, SH(1, 1, 0)) == 9);
    /* ops on an expanded tensor read it correctly */
    tg_tensor *s = tg_sum_dims(tp, e, 1, (const int[]){1}, false);
    check_vals(s, 1, SH(3), DV(4, 36, 12), 0);
    tg_tensor *ec = tg_contiguous(tp, e);
    check_vals(ec, 2, SH(3, 4), DV(1, 1, 1, 1, 9, 9, 9, 9, 3, 3, 3, 3), 0);
    assert_int_equal(ec->stride[1], 1);

    tu_assert_null_error(tg_expand(tp, c, 2, SH(3, -2)), "expand");
    tu_assert_null_error(tg_expand(tp, c, 2, SH(2, 4)), "expand", "non-singleton");
    tu_assert_null_error(tg_expand(tp, c, 1, SH(3)), "expand", "number of sizes");
    tu_assert_null_error(tg_expand(tp, c, 3, SH(-1, 3, 4)), "expand", "-1");
    tg_tape_free(tp);
}

/* ---- argument errors ------------------------------------------------------------------------- */

static void test_dim_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_zeros(tp, TG_F32, 3, SH(2, 3, 4));
    tu_assert_null_error(tg_unsqueeze(tp, x, 4), "unsqueeze", "out of range");
    tu_assert_null_error(tg_unsqueeze(tp, x, -5), "unsqueeze", "out of range");
    tg_tensor *u = tg_unsqueeze(tp, x, -1);
    assert_non_null(u);
    assert_int_equal(u->ndim, 4);
    assert_int_equal(u->shape[3], 1);
    u = tg_unsqueeze(tp, x, 3);
    assert_int_equal(u->shape[3], 1);
    tu_assert_null_error(tg_squeeze(tp, x, 3), "squeeze", "out of range");
    tu_assert_null_error(tg_squeeze(tp, x, -4), "squeeze", "out of range");
    /* squeezing a dim that is not 1 is a no-op, as in PyTorch */
    tg_tensor *sq = tg_squeeze(tp, x, 0);
    assert_non_null(sq);
    assert_int_equal(sq->ndim, 3);
    tg_tensor *y = tg_zeros(tp, TG_F32, 4, SH(1, 3, 1, 2));
    sq = tg_squeeze(tp, y, -2);
    assert_int_equal(sq->ndim, 3);
    assert_int_equal(sq->shape[2], 2);
    sq = tg_squeeze_all(tp, y);
    assert_int_equal(sq->ndim, 2);
    assert_int_equal(sq->shape[0], 3);
    assert_int_equal(sq->shape[1], 2);
    tu_assert_null_error(tg_permute(tp, x, (const int[]){0, 1, 3}), "permute", "out of range");
    tu_assert_null_error(tg_permute(tp, x, (const int[]){0, 1, 1}), "permute", "repeated");
    tu_assert_null_error(tg_permute(tp, x, (const int[]){0, 1, -2}), "permute", "repeated");
    tu_assert_null_error(tg_transpose(tp, x, 0, 3), "transpose", "out of range");
    tu_assert_null_error(tg_transpose(tp, x, -4, 0), "transpose", "out of range");
    tu_assert_null_error(tg_select(tp, x, 1, 3), "select", "index 3 out of range");
    tu_assert_null_error(tg_select(tp, x, 1, -4), "select", "out of range");
    tu_assert_null_error(tg_select(tp, x, 3, 0), "select", "out of range");
    tu_assert_null_error(tg_select(tp, tg_scalar(tp, TG_F32, 1), 0, 0), "select", "0-dim");
    tu_assert_null_error(tg_narrow(tp, x, 2, 3, 2), "narrow", "exceeds");
    tu_assert_null_error(tg_narrow(tp, x, 2, 0, 5), "narrow", "exceeds");
    tu_assert_null_error(tg_narrow(tp, x, 2, 0, -1), "narrow");
    tu_assert_null_error(tg_narrow(tp, x, -4, 0, 1), "narrow", "out of range");
    tu_assert_null_error(tg_narrow(tp, tg_scalar(tp, TG_F32, 1), 0, 0, 1), "narrow", "0-dim");
    tg_tensor *nr = tg_narrow(tp, x, -1, -2, 2); /* negative start wraps */
    assert_non_null(nr);
    assert_int_equal(nr->offset, 2);
    assert_int_equal(nr->shape[2], 2);
    tu_assert_null_error(tg_softmax(tp, x, 3), "softmax", "out of range");
    tu_assert_null_error(tg_log_softmax(tp, x, -4), "log_softmax", "out of range");
    tu_assert_null_error(tg_sum_dims(tp, x, 1, (const int[]){5}, false), "sum", "out of range");
    tu_assert_null_error(tg_sum_dims(tp, x, 2, (const int[]){1, -2}, false), "sum", "multiple times");
    tu_assert_null_error(tg_mean_dims(tp, x, 1, (const int[]){-4}, true), "mean", "out of range");
    tu_assert_null_error(tg_max_dim(tp, x, 3, false, NULL), "max", "out of range");
    tg_tensor *cats[2] = {x, tg_zeros(tp, TG_F32, 3, SH(2, 4, 4))};
    tu_assert_null_error(tg_cat(tp, 2, cats, 0), "cat", "sizes of tensors must match");
    tg_tensor *okcat = tg_cat(tp, 2, cats, 1);
    assert_non_null(okcat);
    assert_int_equal(okcat->shape[1], 7);
    tu_assert_null_error(tg_cat(tp, 2, cats, 3), "cat", "out of range");
    tu_assert_null_error(tg_stack(tp, 2, cats, 0), "stack");
    tu_assert_null_error(tg_cat(tp, 0, cats, 0), "cat", "non-empty");
    tg_tensor *zd[1] = {tg_scalar(tp, TG_F32, 1)};
    tu_assert_null_error(tg_cat(tp, 1, zd, 0), "cat", "zero-dimensional");
    tu_assert_null_error(tg_dropout(tp, x, 1.0, NULL), "dropout", "probability");
    tu_assert_null_error(tg_dropout(tp, x, -0.1, NULL), "dropout", "probability");
    tg_tape_free(tp);
}

static void test_broadcast_and_matmul_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *a = tg_zeros(tp, TG_F32, 2, SH(2, 3)), *b = tg_zeros(tp, TG_F32, 2, SH(4, 3));
    tu_assert_null_error(tg_add(tp, a, b), "add", "(2,3)", "(4,3)");
    tu_assert_null_error(tg_sub(tp, a, b), "sub", "(2,3)", "(4,3)");
    tu_assert_null_error(tg_mul(tp, b, a), "mul", "(4,3)", "(2,3)");
    tu_assert_null_error(tg_div(tp, a, b), "div", "(2,3)", "(4,3)");
    tg_tensor *c = tg_zeros(tp, TG_F32, 3, SH(5, 2, 4));
    tu_assert_null_error(tg_add(tp, a, c), "add", "(2,3)", "(5,2,4)");
    tg_tensor *m = tg_zeros(tp, TG_BOOL, 2, SH(4, 3));
    tu_assert_null_error(tg_where(tp, m, a, a), "where", "(4,3)", "(2,3)");
    tu_assert_null_error(tg_masked_fill(tp, a, m, 0), "masked_fill", "(4,3)", "(2,3)");
    /* a mask that broadcasts the wrong way (would grow x) */
    tg_tensor *mbig = tg_zeros(tp, TG_BOOL, 3, SH(2, 2, 3));
    tu_assert_null_error(tg_masked_fill(tp, a, mbig, 0), "masked_fill", "(2,2,3)", "(2,3)");
    tu_assert_null_error(tg_compare(tp, a, b, TG_CMP_LT), "compare", "(2,3)", "(4,3)");
    tu_assert_null_error(tg_mse_loss(tp, a, b, TG_REDUCE_MEAN), "mse_loss", "(2,3)", "(4,3)");
    /* broadcasting that works: (2,3) + (3) and (2,1) */
    tg_tensor *r = tg_add(tp, tg_ones(tp, TG_F32, 2, SH(2, 1)), tg_arange(tp, TG_F32, 0, 3, 1));
    check_vals(r, 2, SH(2, 3), DV(1, 2, 3, 1, 2, 3), 0);

    /* matmul */
    tg_tensor *x = tg_zeros(tp, TG_F32, 3, SH(2, 6, 3)), *w = tg_zeros(tp, TG_F32, 2, SH(2, 2));
    tu_assert_null_error(tg_matmul(tp, x, w), "matmul", "(2,6,3)", "(2,2)", "inner dims 3 != 2");
    tu_assert_null_error(tg_matmul(tp, tg_zeros(tp, TG_F32, 1, SH(3)), tg_zeros(tp, TG_F32, 1, SH(4))), "matmul",
                         "(3)", "(4)");
    tu_assert_null_error(tg_matmul(tp, tg_scalar(tp, TG_F32, 1), w), "matmul", "at least 1 dimension");
    tu_assert_null_error(tg_matmul(tp, tg_zeros(tp, TG_F32, 3, SH(2, 2, 3)), tg_zeros(tp, TG_F32, 3, SH(3, 3, 2))),
                         "matmul", "(2,2,3)", "(3,3,2)", "batch");
    tu_assert_null_error(tg_mm(tp, x, w), "mm", "2-D");
    tu_assert_null_error(tg_mm(tp, a, a), "mm", "(2,3)");
    tu_assert_null_error(tg_bmm(tp, x, tg_zeros(tp, TG_F32, 3, SH(3, 3, 2))), "bmm", "(2,6,3)", "(3,3,2)");
    tu_assert_null_error(tg_bmm(tp, x, x), "bmm", "inner dims");
    tu_assert_null_error(tg_linear(tp, x, w, NULL), "linear", "(2,6,3)", "(2,2)");
    tu_assert_null_error(tg_linear(tp, x, tg_zeros(tp, TG_F32, 2, SH(4, 3)), tg_zeros(tp, TG_F32, 1, SH(3))),
                         "linear", "bias", "(3)");
    tu_assert_null_error(tg_linear(tp, x, tg_zeros(tp, TG_F32, 1, SH(3)), NULL), "linear", "2-D");
    tg_tape_free(tp);
}

static void test_dtype_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *f = tg_ones(tp, TG_F32, 2, SH(2, 2)), *d = tg_ones(tp, TG_F64, 2, SH(2, 2));
    tg_tensor *bo = tg_ones(tp, TG_BOOL, 2, SH(2, 2)), *i = tg_ones(tp, TG_I64, 1, SH(2));
    tu_assert_null_error(tg_add(tp, f, d), "add", "float32", "float64");
    tu_assert_null_error(tg_mul(tp, d, f), "mul", "float64", "float32");
    tu_assert_null_error(tg_matmul(tp, f, d), "matmul", "dtype");
    tu_assert_null_error(tg_mm(tp, f, d), "mm", "dtype");
    tu_assert_null_error(tg_linear(tp, f, d, NULL), "linear", "dtype");
    tu_assert_null_error(tg_add(tp, bo, bo), "add", "bool");
    tu_assert_null_error(tg_exp(tp, i), "exp", "int64");
    tu_assert_null_error(tg_softmax(tp, bo, 0), "softmax", "bool");
    tu_assert_null_error(tg_mean(tp, i), "mean", "int64");
    /* sum takes it: int64, as torch.sum (tests/test_finetune_ops.c) */
    tg_tensor *si = tg_sum(tp, i);
    assert_non_null(si);
    assert_int_equal(si->dtype, TG_I64);
    assert_true(tg_item(si) == 2);
    tu_assert_null_error(tg_masked_fill(tp, f, f, 0), "masked_fill", "bool", "float32");
    tu_assert_null_error(tg_where(tp, f, f, f), "where", "bool", "float32");
    tu_assert_null_error(tg_where(tp, bo, f, d), "where", "dtype");
    tu_assert_null_error(tg_mse_loss(tp, f, d, TG_REDUCE_MEAN), "mse_loss", "dtype");
    tu_assert_null_error(tg_cross_entropy(tp, f, tg_ones(tp, TG_F32, 1, SH(2)), TG_REDUCE_MEAN), "cross_entropy",
                         "int64");
    tu_assert_null_error(tg_cross_entropy(tp, f, tg_full(tp, TG_I64, 1, SH(2), 2), TG_REDUCE_MEAN),
                         "cross_entropy", "out of bounds");
    tu_assert_null_error(tg_cross_entropy(tp, f, i, (tg_reduction)9), "cross_entropy", "reduction");
    tg_tensor *cats[2] = {f, d};
    tu_assert_null_error(tg_cat(tp, 2, cats, 0), "cat", "dtype");
    tu_assert_status_error(tg_add_(f, d, 1.0), "add_", "dtype");
    tu_assert_status_error(tg_requires_grad_(i, true), "requires_grad_", "int64");
    tu_assert_status_error(tg_uniform_(i, 0, 1, NULL), "uniform");
    tg_tape_free(tp);
}

/* ---- NULL inputs: every public op ---------------------------------------------------------------- */

enum { K_F, K_F3, K_B, K_I, K_W, K_V }; /* (3,3) f32, (2,3,3) f32, (3,3) bool, (3) i64, (3,3) weight, (3) bias */

typedef tg_tensor *(*adapter_fn)(tg_tape *tp, tg_tensor **in);

typedef struct {
    const char *name; /* substring the error message must contain */
    adapter_fn fn;
    int nin;
    int kinds[3];
    bool tape_null_ok; /* may return non-NULL given a NULL tape (returns its input) */
} null_row;

#define A1(id, call)                                  \
    static tg_tensor *ad_##id(tg_tape *tp, tg_tensor **in) \
    {                                                 \
        (void)tp;                                     \
        tg_tensor *a = in[0];                         \
        return call;                                  \
    }
#define A2(id, call)                                  \
    static tg_tensor *ad_##id(tg_tape *tp, tg_tensor **in) \
    {                                                 \
        tg_tensor *a = in[0], *b = in[1];             \
        return call;                                  \
    }
#define A3(id, call)                                  \
    static tg_tensor *ad_##id(tg_tape *tp, tg_tensor **in) \
    {                                                 \
        tg_tensor *a = in[0], *b = in[1], *c = in[2]; \
        return call;                                  \
    }

A2(add, tg_add(tp, a, b))
A2(sub, tg_sub(tp, a, b))
A2(mul, tg_mul(tp, a, b))
A2(div, tg_div(tp, a, b))
A1(add_scalar, tg_add_scalar(tp, a, 1))
A1(sub_scalar, tg_sub_scalar(tp, a, 1))
A1(rsub_scalar, tg_rsub_scalar(tp, a, 1))
A1(mul_scalar, tg_mul_scalar(tp, a, 2))
A1(div_scalar, tg_div_scalar(tp, a, 2))
A1(pow_scalar, tg_pow_scalar(tp, a, 2))
A1(neg, tg_neg(tp, a))
A1(exp, tg_exp(tp, a))
A1(log, tg_log(tp, a))
A1(sqrt, tg_sqrt(tp, a))
A1(tanh, tg_tanh(tp, a))
A1(relu, tg_relu(tp, a))
A1(gelu, tg_gelu(tp, a))
A2(compare, tg_compare(tp, a, b, TG_CMP_LT))
A1(compare_scalar, tg_compare_scalar(tp, a, 0.5, TG_CMP_GT))
A3(where, tg_where(tp, a, b, c))
A2(masked_fill, tg_masked_fill(tp, a, b, 0))
A1(sum, tg_sum(tp, a))
A1(mean, tg_mean(tp, a))
A1(sum_dims, tg_sum_dims(tp, a, 1, (const int[]){0}, false))
A1(mean_dims, tg_mean_dims(tp, a, 1, (const int[]){0}, true))
A1(max_dim, tg_max_dim(tp, a, 0, false, NULL))
A1(max, tg_max(tp, a))
A1(softmax, tg_softmax(tp, a, -1))
A1(log_softmax, tg_log_softmax(tp, a, -1))
A2(matmul, tg_matmul(tp, a, b))
A2(mm, tg_mm(tp, a, b))
A2(bmm, tg_bmm(tp, a, b))
A2(linear, tg_linear(tp, a, b, tg_zeros(tp, TG_F32, 1, SH(3))))
A2(linear_nobias, tg_linear(tp, a, b, NULL))
A1(view, tg_view(tp, a, 1, SH(9)))
A1(reshape, tg_reshape(tp, a, 1, SH(9)))
A1(transpose, tg_transpose(tp, a, 0, 1))
A1(t, tg_t(tp, a))
A1(permute, tg_permute(tp, a, (const int[]){1, 0}))
A1(narrow, tg_narrow(tp, a, 0, 0, 2))
A1(select, tg_select(tp, a, 0, 1))
A1(unsqueeze, tg_unsqueeze(tp, a, 0))
A1(squeeze, tg_squeeze(tp, a, 0))
A1(squeeze_all, tg_squeeze_all(tp, a))
A1(expand, tg_expand(tp, a, 3, SH(2, 3, 3)))
A1(contiguous, tg_contiguous(tp, a))
A1(clone, tg_clone(tp, a))
static tg_tensor *ad_cat(tg_tape *tp, tg_tensor **in)
{
    tg_tensor *xs[2] = {in[0], in[1]};
    return tg_cat(tp, 2, xs, 0);
}
static tg_tensor *ad_stack(tg_tape *tp, tg_tensor **in)
{
    tg_tensor *xs[2] = {in[0], in[1]};
    return tg_stack(tp, 2, xs, 0);
}
A2(mse_loss, tg_mse_loss(tp, a, b, TG_REDUCE_MEAN))
A2(cross_entropy, tg_cross_entropy(tp, a, b, TG_REDUCE_MEAN))
A1(dropout, tg_dropout(tp, a, 0.5, NULL))
A3(sdpa, tg_scaled_dot_product_attention(tp, a, b, c, true, 0.0, NULL))
A1(detach, tg_detach(tp, a))
/* tensor.h functions taking tensors */
A1(triu, tg_triu(tp, a, 0))
A1(tril, tg_tril(tp, a, 0))
A1(empty_like, tg_empty_like(tp, a))
A1(zeros_like, tg_zeros_like(tp, a))
A1(to_dtype, tg_to_dtype(tp, a, TG_F64))

static const null_row null_rows[] = {
    {"add", ad_add, 2, {K_F, K_F}, false},
    {"sub", ad_sub, 2, {K_F, K_F}, false},
    {"mul", ad_mul, 2, {K_F, K_F}, false},
    {"div", ad_div, 2, {K_F, K_F}, false},
    {"add", ad_add_scalar, 1, {K_F}, false},
    {"sub", ad_sub_scalar, 1, {K_F}, false},
    {"rsub", ad_rsub_scalar, 1, {K_F}, false},
    {"mul", ad_mul_scalar, 1, {K_F}, false},
    {"div", ad_div_scalar, 1, {K_F}, false},
    {"pow", ad_pow_scalar, 1, {K_F}, false},
    {"neg", ad_neg, 1, {K_F}, false},
    {"exp", ad_exp, 1, {K_F}, false},
    {"log", ad_log, 1, {K_F}, false},
    {"sqrt", ad_sqrt, 1, {K_F}, false},
    {"tanh", ad_tanh, 1, {K_F}, false},
    {"relu", ad_relu, 1, {K_F}, false},
    {"gelu", ad_gelu, 1, {K_F}, false},
    {"compare", ad_compare, 2, {K_F, K_F}, false},
    {"compare", ad_compare_scalar, 1, {K_F}, false},
    {"where", ad_where, 3, {K_B, K_F, K_F}, false},
    {"masked_fill", ad_masked_fill, 2, {K_F, K_B}, false},
    {"sum", ad_sum, 1, {K_F}, false},
    {"mean", ad_mean, 1, {K_F}, false},
    {"sum", ad_sum_dims, 1, {K_F}, false},
    {"mean", ad_mean_dims, 1, {K_F}, false},
    {"max", ad_max_dim, 1, {K_F}, false},
    {"max", ad_max, 1, {K_F}, false},
    {"softmax", ad_softmax, 1, {K_F}, false},
    {"log_softmax", ad_log_softmax, 1, {K_F}, false},
    {"matmul", ad_matmul, 2, {K_F, K_F}, false},
    {"mm", ad_mm, 2, {K_F, K_F}, false},
    {"bmm", ad_bmm, 2, {K_F3, K_F3}, false},
    {"linear", ad_linear, 2, {K_F, K_W}, false},
    {"linear", ad_linear_nobias, 2, {K_F, K_W}, false},
    {"view", ad_view, 1, {K_F}, false},
    {"reshape", ad_reshape, 1, {K_F}, false},
    {"transpose", ad_transpose, 1, {K_F}, false},
    {"t", ad_t, 1, {K_F}, false},
    {"permute", ad_permute, 1, {K_F}, false},
    {"narrow", ad_narrow, 1, {K_F}, false},
    {"select", ad_select, 1, {K_F}, false},
    {"unsqueeze", ad_unsqueeze, 1, {K_F}, false},
    {"squeeze", ad_squeeze, 1, {K_F}, false},
    {"squeeze", ad_squeeze_all, 1, {K_F}, false},
    {"expand", ad_expand, 1, {K_F}, false},
    {"contiguous", ad_contiguous, 1, {K_F}, true},
    {"clone", ad_clone, 1, {K_F}, false},
    {"cat", ad_cat, 2, {K_F, K_F}, false},
    {"stack", ad_stack, 2, {K_F, K_F}, false},
    {"mse_loss", ad_mse_loss, 2, {K_F, K_F}, false},
    {"cross_entropy", ad_cross_entropy, 2, {K_F, K_I}, false},
    {"dropout", ad_dropout, 1, {K_F}, false},
    {"attention", ad_sdpa, 3, {K_F3, K_F3, K_F3}, false},
    {"detach", ad_detach, 1, {K_F}, false},
    {"triu", ad_triu, 1, {K_F}, false},
    {"tril", ad_tril, 1, {K_F}, false},
    {"empty_like", ad_empty_like, 1, {K_F}, false},
    {"zeros_like", ad_zeros_like, 1, {K_F}, false},
    {"to_dtype", ad_to_dtype, 1, {K_F}, false},
};

static tg_tensor *good_input(tg_tape *tp, int kind)
{
    switch (kind) {
    case K_F: return tg_full(tp, TG_F32, 2, SH(3, 3), 0.5);
    case K_F3: return tg_full(tp, TG_F32, 3, SH(2, 3, 3), 0.5);
    case K_B: return tg_triu(tp, tg_ones(tp, TG_BOOL, 2, SH(3, 3)), 1);
    case K_I: return tg_zeros(tp, TG_I64, 1, SH(3));
    case K_W: return tg_full(tp, TG_F32, 2, SH(3, 3), 0.25);
    case K_V: return tg_zeros(tp, TG_F32, 1, SH(3));
    default: return NULL;
    }
}

static void test_null_inputs(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    size_t nrows = sizeof null_rows / sizeof null_rows[0];
    int failures = 0;
    for (size_t r = 0; r < nrows; r++) {
        const null_row *row = &null_rows[r];
        tg_tensor *good[3] = {NULL, NULL, NULL};
        for (int k = 0; k < row->nin; k++) good[k] = good_input(tp, row->kinds[k]);
        /* the row is valid with good inputs */
        tg_tensor *in[3];
        memcpy(in, good, sizeof in);
        tg_clear_error();
        if (!row->fn(tp, in)) {
            print_error("row %zu (%s): fails on valid inputs: %s\n", r, row->name, tg_last_error());
            failures++;
        }
        for (int k = 0; k < row->nin; k++) {
            memcpy(in, good, sizeof in);
            in[k] = NULL;
            tg_clear_error();
            tg_tensor *out = row->fn(tp, in);
            const char *msg = tg_last_error();
            if (out || !msg[0] || !strstr(msg, row->name)) {
                print_error("row %zu (%s) with input %d NULL: returned %p, message \"%s\"\n", r, row->name, k,
                            (void *)out, msg);
                failures++;
            }
        }
        /* a NULL tape: NULL with a message, never a crash */
        memcpy(in, good, sizeof in);
        tg_clear_error();
        tg_tensor *out = row->fn(NULL, in);
        if (!row->tape_null_ok && (out || !tg_last_error()[0])) {
            print_error("row %zu (%s) with a NULL tape: returned %p, message \"%s\"\n", r, row->name, (void *)out,
                        tg_last_error());
            failures++;
        }
    }
    /* creation functions */
    tg_clear_error();
    struct {
        const char *what;
        tg_tensor *t;
    } cr[] = {
        {"empty", tg_empty(NULL, TG_F32, 1, SH(2))},
        {"zeros", tg_zeros(NULL, TG_F32, 1, SH(2))},
        {"ones", tg_ones(NULL, TG_F32, 1, SH(2))},
        {"full", tg_full(NULL, TG_F32, 1, SH(2), 1)},
        {"from_data null tape", tg_from_data(NULL, TG_F32, 1, SH(1), (float[]){1})},
        {"from_data null src", tg_from_data(tp, TG_F32, 1, SH(1), NULL)},
        {"from_f32", tg_from_f32(tp, 1, SH(1), NULL)},
        {"from_f64", tg_from_f64(tp, 1, SH(1), NULL)},
        {"scalar", tg_scalar(NULL, TG_F32, 1)},
        {"arange", tg_arange(NULL, TG_F32, 0, 3, 1)},
        {"eye", tg_eye(NULL, TG_F32, 2, 2)},
        {"rand", tg_rand(NULL, TG_F32, 1, SH(2), NULL)},
        {"randn", tg_randn(NULL, TG_F32, 1, SH(2), NULL)},
        {"empty null shape", tg_empty(tp, TG_F32, 2, NULL)},
    };
    for (size_t i = 0; i < sizeof cr / sizeof cr[0]; i++) {
        if (cr[i].t) {
            print_error("creation %s: returned non-NULL\n", cr[i].what);
            failures++;
        }
    }
    /* each creation call sets a message: check one by one */
    tg_clear_error();
    assert_null(tg_zeros(NULL, TG_F32, 1, SH(2)));
    assert_true(strstr(tg_last_error(), "NULL") != NULL);
    tg_clear_error();
    assert_null(tg_from_f32(tp, 1, SH(1), NULL));
    assert_true(strstr(tg_last_error(), "from_data") != NULL);
    tg_clear_error();
    assert_null(tg_arange(NULL, TG_F32, 0, 3, 1));
    assert_true(tg_last_error()[0] != '\0');

    /* status-returning functions */
    tg_tensor *f = good_input(tp, K_F);
    tu_assert_status_error(tg_copy_(NULL, f), "copy_");
    tu_assert_status_error(tg_copy_(f, NULL), "copy_");
    tu_assert_status_error(tg_fill_(NULL, 1), "fill_");
    tu_assert_status_error(tg_add_(NULL, f, 1), "add_");
    tu_assert_status_error(tg_add_(f, NULL, 1), "add_");
    tu_assert_status_error(tg_mul_scalar_(NULL, 2), "mul_");
    tu_assert_status_error(tg_backward(NULL, NULL, false), "backward");
    tu_assert_status_error(tg_requires_grad_(NULL, true), "requires_grad_");
    tu_assert_status_error(tg_uniform_(NULL, 0, 1, NULL), "");
    tu_assert_status_error(tg_normal_(NULL, 0, 1, NULL), "");
    tu_assert_status_error(tg_copy_to_f32(NULL, (float[1]){0}), "copy_to_f32");
    tu_assert_status_error(tg_copy_to_f64(NULL, (double[1]){0}), "copy_to_f64");
    assert_null(tg_format(NULL));
    assert_int_not_equal(tg_print(stderr, NULL), TG_OK);
    assert_null(tg_grad_fn_name(NULL));
    assert_false(tg_is_leaf(NULL));
    assert_int_equal(tg_numel(NULL), 0);
    assert_false(tg_is_contiguous(NULL));
    assert_null(tg_data_ptr(NULL));
    assert_true(isnan(tg_item(NULL)));
    tg_zero_grad(NULL); /* no crash */
    tg_tape_free(tp);
    if (failures) fail_msg("%d NULL-input checks failed (see above)", failures);
}

static tg_tensor *gc_sum(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n;
    (void)ctx;
    return tg_sum(tp, in[0]);
}

/* Edge cases and argument errors of views, reductions, element access, GEMM
 * and gradcheck. */
static void test_edges(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *a = tg_arange(tp, TG_F32, 0, 6, 1);
    tu_assert_null_error(tg_view(tp, a, TG_MAX_DIMS + 1, SH(1, 1, 1, 1, 1, 1, 1, 1, 6)), "view", "dims");
    tu_assert_null_error(tg_view(tp, a, 3, SH(6, 1LL << 40, 1LL << 40)), "view", "too large");
    char buf[32];
    assert_string_equal(tg_shape_str(NULL, buf, sizeof buf), "(null)");

    /* element access: bool stores 0/1; copies out of strided and f64 tensors */
    tg_tensor *b = tg_zeros(tp, TG_BOOL, 1, SH(2));
    tg_set(b, SH(1), 5.0);
    check_vals(b, 1, SH(2), DV(0, 1), 0);
    tg_tensor *m = tg_view(tp, a, 2, SH(2, 3));
    float f[6];
    assert_int_equal(tg_copy_to_f32(tg_t(tp, m), f), TG_OK);
    const float ft[6] = {0, 3, 1, 4, 2, 5};
    assert_memory_equal(f, ft, sizeof f);
    assert_int_equal(tg_copy_to_f32(tg_to_dtype(tp, m, TG_F64), f), TG_OK);
    assert_true(f[5] == 5.0f);

    /* reductions */
    tu_assert_null_error(tg_sum_dims(tp, m, 1, NULL, false), "sum", "bad dims list");
    tu_assert_null_error(tg_max_dim(tp, tg_zeros(tp, TG_F32, 2, SH(2, 0)), 1, false, NULL), "max", "zero-size");
    tg_tensor *idx = NULL;
    tg_tensor *s = tg_max_dim(tp, tg_scalar(tp, TG_F32, 2.5), 0, false, &idx);
    assert_non_null(s);
    assert_true(tg_item(s) == 2.5 && tg_item(idx) == 0);

    /* GEMM: float64 batches big enough for BLAS, and an empty inner dim */
    tg_tensor *x = tg_rand(tp, TG_F64, 3, SH(2, 40, 40), NULL);
    tg_tensor *eye = tg_eye(tp, TG_F64, 40, 40);
    tg_tensor *y = tg_matmul(tp, x, eye);
    assert_non_null(y);
    for (int64_t i = 0; i < tg_numel(x); i++) assert_true(tg_item_at(y, i) == tg_item_at(x, i));
    tg_tensor *z = tg_matmul(tp, tg_zeros(tp, TG_F32, 2, SH(2, 0)), tg_ones(tp, TG_F32, 2, SH(0, 3)));
    check_vals(z, 2, SH(2, 3), DV(0, 0, 0, 0, 0, 0), 0);

    /* gradcheck needs an input that requires grad */
    tg_tensor *in[1] = {tg_ones(tp, TG_F64, 1, SH(3))};
    tg_gradcheck_result res = {0};
    assert_int_not_equal(tg_gradcheck_call(gc_sum, NULL, 1, in, NULL, &res), TG_OK);
    assert_non_null(strstr(res.message, "no input requires grad"));
    tg_tape_free(tp);
}

/* A chain of ops checked once at its end reports the first failure, not the
 * "NULL input" of the ops downstream of it. */
static void test_error_chain(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_clear_error();
    tg_tensor *a = tg_ones(tp, TG_F32, 2, SH(2, 3)), *b = tg_ones(tp, TG_F32, 2, SH(4, 5));
    tg_tensor *y = tg_sum(tp, tg_softmax(tp, tg_exp(tp, tg_matmul(tp, a, b)), -1));
    assert_null(y);
    const char *msg = tg_last_error();
    if (!strstr(msg, "matmul") || !strstr(msg, "3 != 4") || strstr(msg, "NULL input"))
        fail_msg("expected the matmul failure, got '%s'", msg);
    /* with no earlier error, a NULL input is named as such */
    tg_clear_error();
    assert_null(tg_exp(tp, NULL));
    assert_string_equal(tg_last_error(), "exp: NULL input");
    /* status codes have descriptions */
    assert_string_equal(tg_status_str(TG_OK), "success");
    assert_string_equal(tg_status_str(TG_EFORMAT), "malformed file");
    assert_non_null(strstr(tg_status_str(TG_ENOMEM), "out of memory"));
    assert_string_equal(tg_status_str(42), "unknown status");
    /* and a fresh error replaces an old one */
    tu_assert_null_error(tg_matmul(tp, a, b), "matmul");
    tu_assert_null_error(tg_view(tp, a, 1, SH(7)), "view", "shape [7] is invalid for input of size 6");
    tg_tape_free(tp);
}

/* ---- numerics at the extremes ------------------------------------------------------------------ */

static void test_softmax_extremes(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    for (int dt = TG_F32; dt <= TG_F64; dt++) {
        tg_tensor *x = tg_from_f64(tp, 2, SH(2, 3), (double[]){-INFINITY, -INFINITY, -INFINITY, 1e4, -1e4, 0});
        if (dt == TG_F32) x = tg_to_dtype(tp, x, TG_F32);
        tg_tensor *s = tg_softmax(tp, x, 1);
        assert_non_null(s);
        for (int j = 0; j < 3; j++) assert_true(isnan(tg_get(s, SH(0, j))));
        check_vals(tg_narrow(tp, s, 0, 1, 1), 2, SH(1, 3), DV(1, 0, 0), 1e-7);
        tg_tensor *ls = tg_log_softmax(tp, x, -1);
        assert_non_null(ls);
        for (int j = 0; j < 3; j++) assert_true(isnan(tg_get(ls, SH(0, j))));
        check_vals(tg_narrow(tp, ls, 0, 1, 1), 2, SH(1, 3), DV(0, -2e4, -1e4), 1e-3);
        /* large logits along dim 0 */
        tg_tensor *y = tg_from_f64(tp, 2, SH(2, 2), (double[]){1e4, -1e4, -1e4, 1e4});
        if (dt == TG_F32) y = tg_to_dtype(tp, y, TG_F32);
        check_vals(tg_softmax(tp, y, 0), 2, SH(2, 2), DV(1, 0, 0, 1), 1e-7);
        /* a masked causal row keeps finite values */
        tg_tensor *z = tg_from_f64(tp, 1, SH(3), (double[]){0, -INFINITY, 0});
        if (dt == TG_F32) z = tg_to_dtype(tp, z, TG_F32);
        check_vals(tg_softmax(tp, z, 0), 1, SH(3), DV(0.5, 0, 0.5), 1e-7);

        /* cross-entropy with +-1e4 logits stays finite */
        tg_tensor *lg = tg_from_f64(tp, 2, SH(2, 2), (double[]){1e4, -1e4, -1e4, 1e4});
        if (dt == TG_F32) lg = tg_to_dtype(tp, lg, TG_F32);
        tg_tensor *tgt = tg_from_data(tp, TG_I64, 1, SH(2), (int64_t[]){1, 1});
        tg_tensor *ce = tg_cross_entropy(tp, lg, tgt, TG_REDUCE_MEAN);
        assert_non_null(ce);
        assert_true(isfinite(tg_item(ce)));
        assert_true(fabs(tg_item(ce) - 1e4) <= 1e-3);
        tg_tensor *ces = tg_cross_entropy(tp, lg, tgt, TG_REDUCE_SUM);
        assert_true(fabs(tg_item(ces) - 2e4) <= 2e-3);
        tg_tensor *cen = tg_cross_entropy(tp, lg, tgt, TG_REDUCE_NONE);
        check_vals(cen, 1, SH(2), DV(2e4, 0), 2e-3);
    }
    tg_tape_free(tp);
}

/* Float rows along a contiguous dim (the max found eight lanes at a time
 * where the CPU has AVX2, src/tensor/kernels.c) against the same rows along a
 * strided dim (one element at a time), bit for bit: NaN (of both signs, so
 * that which NaN is the max shows), -inf and +inf rows,
 * a zero max given as -0 then +0 and as +0 then -0, the max in the first
 * lanes, the middle and the tail. The fused cross-entropy's rows equal
 * -log_softmax at the target, bit for bit. */
static void test_softmax_rows_vector_scalar(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(11);
    static const int64_t sizes[] = {8, 19, 37};
    for (int k = 0; k < 3; k++) {
        const int64_t n = sizes[k];
        enum { R = 9 };
        float *v = malloc(sizeof(float) * (size_t)(R * n));
        assert_non_null(v);
        tg_tensor *r = tg_randn(tp, TG_F32, 2, SH(R, n), g);
        memcpy(v, tg_data_ptr(r), sizeof(float) * (size_t)(R * n));
        v[1 * n + n - 1] = 9.0f;                    /* max in the tail */
        v[2 * n + 0] = 9.0f;                        /* max in lane 0 */
        v[3 * n + 1] = -NAN, v[3 * n + n / 2] = NAN; /* NaNs of both signs: the last one is the max */
        for (int64_t j = 0; j < n; j++) v[4 * n + j] = -INFINITY;
        for (int64_t j = 0; j < n; j++) v[5 * n + j] = -fabsf(v[5 * n + j]) - 1.0f;
        v[5 * n + 2] = -0.0f, v[5 * n + n - 3] = 0.0f; /* zero max: -0 first */
        for (int64_t j = 0; j < n; j++) v[6 * n + j] = -fabsf(v[6 * n + j]) - 1.0f;
        v[6 * n + 2] = 0.0f, v[6 * n + n - 3] = -0.0f; /* zero max: +0 first */
        v[7 * n + 5] = INFINITY;                    /* +inf */
        v[8 * n + 3] = 7.0f, v[8 * n + n - 2] = 7.0f; /* the max twice */
        tg_tensor *x = tg_from_f32(tp, 2, SH(R, n), v);
        tg_tensor *xt = tg_contiguous(tp, tg_transpose(tp, x, 0, 1)); /* (n, R): rows strided */
        assert_non_null(xt);
        for (int lg = 0; lg < 2; lg++) {
            tg_tensor *a = lg ? tg_log_softmax(tp, x, 1) : tg_softmax(tp, x, 1);
            tg_tensor *b = lg ? tg_log_softmax(tp, xt, 0) : tg_softmax(tp, xt, 0);
            tg_tensor *bt = tg_contiguous(tp, tg_transpose(tp, b, 0, 1));
            assert_non_null(a);
            assert_non_null(bt);
            const float *pa = tg_data_ptr(a), *pb = tg_data_ptr(bt);
            for (int64_t i = 0; i < R * n; i++)
                if (memcmp(&pa[i], &pb[i], sizeof(float)) != 0)
                    fail_msg("%s n=%lld row %lld col %lld: contiguous %a, strided %a", lg ? "log_softmax" : "softmax",
                             (long long)n, (long long)(i / n), (long long)(i % n), (double)pa[i], (double)pb[i]);
        }
        int64_t t[R];
        for (int i = 0; i < R; i++) t[i] = (i * 5 + 1) % n;
        tg_tensor *tgt = tg_from_data(tp, TG_I64, 1, SH(R), t);
        tg_tensor *ce = tg_cross_entropy(tp, x, tgt, TG_REDUCE_NONE), *ls = tg_log_softmax(tp, x, 1);
        assert_non_null(ce);
        assert_non_null(ls);
        for (int i = 0; i < R; i++) {
            float want = -(float)tg_get(ls, SH(i, t[i])), got = (float)tg_get(ce, SH(i));
            if (memcmp(&want, &got, sizeof want) != 0 && !(isnan(want) && isnan(got)))
                fail_msg("cross_entropy n=%lld row %d: %a, -log_softmax %a", (long long)n, i, (double)got, (double)want);
        }
        free(v);
    }
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- the OpenMP paths against serial loops --------------------------------------------------- */

static void test_parallel_paths(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    const int64_t N = 300;
    assert_true(N * N > 32768); /* TG_PAR_MIN in src/tensor/internal.h */
    tg_generator *g = tg_generator_new(7);
    for (int dt = TG_F32; dt <= TG_F64; dt++) {
        tg_tensor *a = tg_randn(tp, (tg_dtype)dt, 2, SH(N, N), g);
        tg_tensor *b = tg_randn(tp, (tg_dtype)dt, 2, SH(N, N), g);
        tg_tensor *bt = tg_transpose(tp, b, 0, 1); /* strided operand */
        tg_tensor *row = tg_randn(tp, (tg_dtype)dt, 1, SH(N), g);
        tg_tensor *sum = tg_add(tp, a, b), *sumt = tg_add(tp, a, bt), *sumr = tg_add(tp, a, row);
        tg_tensor *prod = tg_mul(tp, bt, a);
        assert_non_null(sum);
        assert_non_null(sumt);
        assert_non_null(sumr);
        assert_non_null(prod);
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < N; j++) {
                double av = tg_get(a, SH(i, j)), bv = tg_get(b, SH(i, j)), btv = tg_get(b, SH(j, i));
                double want = dt == TG_F32 ? (double)((float)av + (float)bv) : av + bv;
                double wantt = dt == TG_F32 ? (double)((float)av + (float)btv) : av + btv;
                double wantr = dt == TG_F32 ? (double)((float)av + (float)tg_get(row, SH(j))) : av + tg_get(row, SH(j));
                double wantp = dt == TG_F32 ? (double)((float)btv * (float)av) : btv * av;
                if (tg_get(sum, SH(i, j)) != want || tg_get(sumt, SH(i, j)) != wantt ||
                    tg_get(sumr, SH(i, j)) != wantr || tg_get(prod, SH(i, j)) != wantp)
                    fail_msg("dtype %d element (%lld,%lld): add %g/%g, add^T %g/%g, add row %g/%g, mul %g/%g", dt,
                             (long long)i, (long long)j, tg_get(sum, SH(i, j)), want, tg_get(sumt, SH(i, j)), wantt,
                             tg_get(sumr, SH(i, j)), wantr, tg_get(prod, SH(i, j)), wantp);
            }
        /* softmax over each dim, on contiguous and transposed inputs */
        double tol = dt == TG_F32 ? 1e-6 : 1e-13;
        for (int dim = 0; dim < 2; dim++)
            for (int tr = 0; tr < 2; tr++) {
                tg_tensor *x = tr ? bt : a;
                tg_tensor *s = tg_softmax(tp, x, dim);
                tg_tensor *ls = tg_log_softmax(tp, x, dim);
                assert_non_null(s);
                assert_non_null(ls);
                for (int64_t r = 0; r < N; r++) {
                    double mx = -INFINITY, tot = 0;
                    for (int64_t k = 0; k < N; k++) {
                        double v = tg_get(x, dim ? SH(r, k) : SH(k, r));
                        if (v > mx) mx = v;
                    }
                    for (int64_t k = 0; k < N; k++) tot += exp(tg_get(x, dim ? SH(r, k) : SH(k, r)) - mx);
                    for (int64_t k = 0; k < N; k++) {
                        const int64_t *ix = dim ? SH(r, k) : SH(k, r);
                        double want = exp(tg_get(x, ix) - mx) / tot;
                        double wantl = tg_get(x, ix) - mx - log(tot);
                        if (fabs(tg_get(s, ix) - want) > tol || fabs(tg_get(ls, ix) - wantl) > tol * 10)
                            fail_msg("softmax dtype %d dim %d transposed %d at (%lld,%lld): %.9g vs %.9g, log %.9g vs "
                                     "%.9g",
                                     dt, dim, tr, (long long)ix[0], (long long)ix[1], tg_get(s, ix), want,
                                     tg_get(ls, ix), wantl);
                    }
                }
            }
        /* sums: all, per dim */
        double total = 0, rows[300] = {0}, cols[300] = {0};
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < N; j++) {
                double v = tg_get(a, SH(i, j));
                total += v;
                rows[i] += v;
                cols[j] += v;
            }
        double stol = dt == TG_F32 ? 2e-3 : 1e-9;
        tg_tensor *st = tg_sum(tp, a);
        assert_true(fabs(tg_item(st) - total) <= stol);
        tg_tensor *mn = tg_mean(tp, a);
        assert_true(fabs(tg_item(mn) - total / (double)(N * N)) <= stol / (double)N);
        tg_tensor *s1 = tg_sum_dims(tp, a, 1, (const int[]){1}, false);
        tg_tensor *s0 = tg_sum_dims(tp, a, 1, (const int[]){0}, true);
        tg_tensor *s0t = tg_sum_dims(tp, tg_transpose(tp, a, 0, 1), 1, (const int[]){1}, false);
        assert_int_equal(s0->ndim, 2);
        assert_int_equal(s0->shape[0], 1);
        double rtol = dt == TG_F32 ? 1e-4 : 1e-11;
        for (int64_t i = 0; i < N; i++) {
            if (fabs(tg_get(s1, SH(i)) - rows[i]) > rtol || fabs(tg_get(s0, SH(0, i)) - cols[i]) > rtol ||
                fabs(tg_get(s0t, SH(i)) - cols[i]) > rtol)
                fail_msg("dtype %d sum at %lld: rows %g/%g cols %g/%g cols^T %g/%g", dt, (long long)i,
                         tg_get(s1, SH(i)), rows[i], tg_get(s0, SH(0, i)), cols[i], tg_get(s0t, SH(i)), cols[i]);
        }
        tg_tape_reset(tp);
    }
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- tape limit, reset, reuse --------------------------------------------------------------------- */

/* tg_get / tg_set / tg_item_at check every index: out of range or negative
 * gives NAN or TG_EINVAL with a message naming the op, the index and the
 * shape, and writes nothing (a neighbouring tensor keeps its data; under ASan
 * any stray access would also be reported). */
static void test_element_access_checks(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_zeros(tp, TG_F32, 2, SH(2, 3));
    tg_tensor *nb = tg_full(tp, TG_F32, 2, SH(2, 3), 7.0); /* the next tensor in the tape */
    assert_non_null(x);
    assert_non_null(nb);
    const double sevens[6] = {7, 7, 7, 7, 7, 7};

    /* in range */
    assert_int_equal(tg_set(x, SH(1, 2), 4.5), TG_OK);
    assert_true(tg_get(x, SH(1, 2)) == 4.5);
    assert_true(tg_item_at(x, 5) == 4.5);

    /* get */
    tg_clear_error();
    assert_true(isnan(tg_get(x, SH(0, 5))));
    assert_string_equal(tg_last_error(), "get: index 5 is out of bounds for dimension 1 with size 3 (shape (2,3))");
    assert_true(isnan(tg_get(x, SH(2, 0))));
    assert_non_null(strstr(tg_last_error(), "index 2 is out of bounds for dimension 0 with size 2"));
    assert_true(isnan(tg_get(x, SH(-1, 0))));
    assert_non_null(strstr(tg_last_error(), "get: index -1 is out of bounds for dimension 0"));
    assert_true(isnan(tg_get(x, SH(1, 3)))); /* flat offset 6: the neighbour's first element */
    assert_true(isnan(tg_get(x, NULL)));
    assert_non_null(strstr(tg_last_error(), "get: NULL index"));
    tg_clear_error();
    assert_true(isnan(tg_get(NULL, SH(0))));
    assert_non_null(strstr(tg_last_error(), "get"));

    /* set: nothing is written anywhere */
    tu_assert_status_error(tg_set(x, SH(1, 3), 99), "set: index 3 is out of bounds for dimension 1 with size 3",
                           "(2,3)");
    tu_assert_status_error(tg_set(x, SH(2, 0), 99), "set", "index 2", "dimension 0");
    tu_assert_status_error(tg_set(x, SH(5, 5), 99), "set", "index 5");
    tu_assert_status_error(tg_set(x, SH(0, -1), 99), "set", "index -1", "dimension 1");
    tu_assert_status_error(tg_set(x, SH(-1, 0), 99), "set", "index -1");
    tu_assert_status_error(tg_set(x, SH(0, 1LL << 40), 99), "set", "out of bounds");
    tu_assert_status_error(tg_set(x, NULL, 99), "set", "NULL index");
    tu_assert_status_error(tg_set(NULL, SH(0), 99), "set");
    check_vals(nb, 2, SH(2, 3), sevens, 0);
    check_vals(x, 2, SH(2, 3), DV(0, 0, 0, 0, 0, 4.5), 0);

    /* item_at */
    tg_clear_error();
    assert_true(isnan(tg_item_at(x, 6)));
    assert_string_equal(tg_last_error(), "item_at: index 6 is out of bounds for 6 elements (shape (2,3))");
    assert_true(isnan(tg_item_at(x, -1)));
    assert_non_null(strstr(tg_last_error(), "item_at: index -1"));
    assert_true(isnan(tg_item_at(NULL, 0)));

    /* views: the index is checked against the view's shape, not the storage */
    tg_tensor *row = tg_select(tp, x, 0, 0); /* (3), storage of 6 */
    assert_true(isnan(tg_get(row, SH(3))));
    tu_assert_status_error(tg_set(row, SH(4), 1), "set", "index 4", "size 3");
    assert_true(isnan(tg_item_at(tg_t(tp, x), 6)));
    check_vals(x, 2, SH(2, 3), DV(0, 0, 0, 0, 0, 4.5), 0);

    /* 0-dim: no index needed; an empty tensor has no element */
    tg_tensor *s = tg_scalar(tp, TG_F64, 3.0);
    assert_true(tg_get(s, NULL) == 3.0);
    assert_int_equal(tg_set(s, NULL, 4.0), TG_OK);
    assert_true(tg_item_at(s, 0) == 4.0);
    assert_true(isnan(tg_item_at(s, 1)));
    tg_tensor *e = tg_zeros(tp, TG_F32, 2, SH(2, 0));
    assert_true(isnan(tg_get(e, SH(0, 0))));
    assert_non_null(strstr(tg_last_error(), "size 0"));
    assert_true(isnan(tg_item_at(e, 0)));

    /* integer dtypes: values they cannot hold are refused, not converted */
    tg_tensor *u = tg_zeros(tp, TG_U8, 1, SH(2));
    tg_tensor *i64 = tg_zeros(tp, TG_I64, 1, SH(2));
    assert_int_equal(tg_set(u, SH(0), 255), TG_OK);
    tu_assert_status_error(tg_set(u, SH(1), 256), "set", "uint8");
    tu_assert_status_error(tg_set(u, SH(1), NAN), "set");
    tu_assert_status_error(tg_set(i64, SH(1), 1e19), "set", "int64");
    tu_assert_status_error(tg_set(i64, SH(1), NAN), "set");
    check_vals(u, 1, SH(2), DV(255, 0), 0);
    check_vals(i64, 1, SH(2), DV(0, 0), 0);
    tu_assert_null_error(tg_arange(tp, TG_U8, -3, 3, 1), "set", "-3");
    check_vals(nb, 2, SH(2, 3), sevens, 0);
    tg_tape_free(tp);
}

static void test_tape_limit(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    assert_non_null(tp);
    assert_int_equal(tg_tape_used(tp), 0);
    tg_tape_set_limit(tp, 1 << 20);
    tg_tensor *small = tg_ones(tp, TG_F32, 1, SH(1000));
    assert_non_null(small);
    assert_true(tg_tape_used(tp) >= 4000);
    assert_true(tg_tape_reserved(tp) <= (size_t)1 << 20);
    /* 2M floats = 8 MB > 1 MB */
    tu_assert_null_error(tg_zeros(tp, TG_F32, 1, SH(2 << 20)), "memory limit");
    /* an op whose result is too large fails the same way, without a crash */
    tg_tensor *ex = tg_expand(tp, tg_ones(tp, TG_F32, 2, SH(1, 1)), 2, SH(1024, 512)); /* a view: no memory */
    assert_non_null(ex);
    tu_assert_null_error(tg_contiguous(tp, ex), "memory limit");
    tu_assert_null_error(tg_matmul(tp, tg_ones(tp, TG_F32, 2, SH(600, 1)), tg_ones(tp, TG_F32, 2, SH(1, 600))),
                         "memory limit");
    assert_true(tg_tape_reserved(tp) <= (size_t)1 << 20);
    /* earlier tensors are intact, smaller allocations still work */
    check_vals(tg_narrow(tp, small, 0, 0, 3), 1, SH(3), DV(1, 1, 1), 0);
    tg_tensor *ok = tg_full(tp, TG_F32, 1, SH(100), 3);
    check_vals(tg_narrow(tp, ok, 0, 98, 2), 1, SH(2), DV(3, 3), 0);
    tu_assert_ok(tg_tape_alloc(tp, 1000, true));
    tu_assert_null_error(tg_tape_alloc(tp, (size_t)4 << 20, false), "memory limit");
    tu_assert_null_error(tg_tape_alloc(tp, SIZE_MAX - 8, false), "tape");

    /* reset, then reuse with the same limit */
    size_t reserved = tg_tape_reserved(tp);
    tg_tape_reset(tp);
    assert_int_equal(tg_tape_used(tp), 0);
    assert_true(tg_tape_reserved(tp) <= reserved);
    tg_tensor *again = tg_full(tp, TG_F64, 2, SH(10, 10), 2);
    tg_tensor *s = tg_sum(tp, again);
    assert_true(tg_item(s) == 200);
    tu_assert_null_error(tg_zeros(tp, TG_F64, 1, SH(1 << 20)), "memory limit");
    /* lifting the limit */
    tg_tape_set_limit(tp, 0);
    tg_tensor *big = tg_zeros(tp, TG_F32, 1, SH(2 << 20));
    assert_non_null(big);
    assert_true(tg_item_at(big, (2 << 20) - 1) == 0);
    assert_true(tg_tape_reserved(tp) >= (size_t)8 << 20);
    /* memory from tg_tape_alloc is 64-byte aligned and zeroed when asked */
    unsigned char *p = tg_tape_alloc(tp, 100, true);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    for (int i = 0; i < 100; i++) assert_int_equal(p[i], 0);
    tg_tape_reset(tp);
    /* the same computation after a reset needs no new memory */
    size_t r1 = tg_tape_reserved(tp);
    for (int k = 0; k < 3; k++) {
        tg_tensor *x = tg_ones(tp, TG_F32, 2, SH(64, 64));
        tg_tensor *y = tg_softmax(tp, tg_matmul(tp, x, x), -1);
        assert_non_null(y);
        assert_true(fabs(tg_get(y, SH(0, 0)) - 1.0 / 64) < 1e-7);
        if (k > 0) assert_true(tg_tape_reserved(tp) == r1);
        r1 = tg_tape_reserved(tp);
        tg_tape_reset(tp);
    }
    tg_tape_free(tp);
    tg_tape_free(NULL); /* no-op */
    tg_tape_reset(NULL);
    assert_int_equal(tg_tape_used(NULL), 0);
}

/* Float32 sums equal PyTorch's bit for bit (its cascade of partial sums in
 * 8-lane vectors), over rows (sum(dim=-1), the book's LayerNorm mean) and
 * over the rows of a matrix (sum(dim=0), a bias gradient); the mean is that
 * sum divided by the count, as PyTorch's. */
static void test_sum_bits_equal_pytorch(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("sums.json");
    const json_t *cases = json_object_get(ref, "cases"), *c;
    size_t i;
    tg_tape *tp = tg_tape_new();
    json_array_foreach(cases, i, c) {
        tg_tensor *x = tu_tensor_from_json(tp, json_object_get(c, "x"), TG_F32);
        tg_tensor *want = tu_tensor_from_json(tp, json_object_get(c, "sum"), TG_F32);
        int dim = (int)json_integer_value(json_object_get(c, "dim"));
        tg_tensor *got = tg_sum_dims(tp, x, 1, &dim, true);
        tu_assert_ok(got);
        char what[64];
        snprintf(what, sizeof what, "sum case %zu (dim %d)", i, dim);
        tu_assert_close(got, want, 0.0, 0.0, what);
        tg_tensor *mean = tg_mean_dims(tp, x, 1, &dim, true);
        tg_tensor *want_mean = tg_div_scalar(tp, want, (double)x->shape[dim < 0 ? dim + x->ndim : dim]);
        tu_assert_close(mean, want_mean, 0.0, 0.0, what);
    }
    tg_tape_free(tp);
    json_decref(ref);
}

/* A QK-norm's weight gradient equals PyTorch's bit for bit: the composed
 * RMSNorm over head_dim of queries that are a transposed view
 * (x.view(b, T, H, hd).transpose(1, 2)), out = normed * (1 + scale); the
 * engine sums grad * normed over (b, H, T) down to (hd,) in PyTorch's order,
 * head_dim below 8 included (4 columns at a time, then one). */
static void test_qk_norm_weight_grad_bits_equal_pytorch(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("sums.json");
    const json_t *cases = json_object_get(ref, "qk_norm"), *c;
    assert_true(json_array_size(cases) > 0);
    size_t i;
    json_array_foreach(cases, i, c) {
        tg_tape *tp = tg_tape_new();
        int64_t b = json_integer_value(json_object_get(c, "b")), T = json_integer_value(json_object_get(c, "T"));
        int64_t H = json_integer_value(json_object_get(c, "H")), hd = json_integer_value(json_object_get(c, "hd"));
        double eps = json_real_value(json_object_get(c, "eps"));
        tg_tensor *x = tu_tensor_from_json(tp, json_object_get(c, "x"), TG_F32);
        tg_tensor *scale = tu_tensor_from_json(tp, json_object_get(c, "scale"), TG_F32);
        tg_tensor *grad = tu_tensor_from_json(tp, json_object_get(c, "grad"), TG_F32);
        assert_int_equal(tg_requires_grad_(x, true), TG_OK);
        assert_int_equal(tg_requires_grad_(scale, true), TG_OK);
        int last = -1;
        tg_tensor *q = tg_transpose(tp, tg_view(tp, x, 4, (int64_t[]){b, T, H, hd}), 1, 2);
        tg_tensor *w = tg_add_scalar(tp, scale, 1.0);
        tg_tensor *var = tg_mean_dims(tp, tg_pow_scalar(tp, q, 2.0), 1, &last, true);
        tg_tensor *normed = tg_mul(tp, q, tg_rsqrt(tp, tg_add_scalar(tp, var, eps)));
        tg_tensor *out = tg_mul(tp, normed, w);
        tu_assert_ok(out);
        assert_int_equal(tg_backward(out, grad, false), TG_OK);
        char what[96];
        snprintf(what, sizeof what, "qk_norm case %zu (hd %lld): scale's gradient", i, (long long)hd);
        tu_assert_close(scale->grad, tu_tensor_from_json(tp, json_object_get(c, "scale_grad"), TG_F32), 0.0, 0.0, what);
        snprintf(what, sizeof what, "qk_norm case %zu (hd %lld): x's gradient", i, (long long)hd);
        tu_assert_close(x->grad, tu_tensor_from_json(tp, json_object_get(c, "x_grad"), TG_F32), 0.0, 0.0, what);
        tg_tape_free(tp);
    }
    json_decref(ref);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sum_bits_equal_pytorch),
        cmocka_unit_test(test_qk_norm_weight_grad_bits_equal_pytorch),
        cmocka_unit_test(test_creation),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_views_share_storage),
        cmocka_unit_test(test_view_rules),
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_dim_errors),
        cmocka_unit_test(test_broadcast_and_matmul_errors),
        cmocka_unit_test(test_dtype_errors),
        cmocka_unit_test(test_null_inputs),
        cmocka_unit_test(test_error_chain),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_softmax_extremes),
        cmocka_unit_test(test_softmax_rows_vector_scalar),
        cmocka_unit_test(test_parallel_paths),
        cmocka_unit_test(test_tape_limit),
        cmocka_unit_test(test_element_access_checks),
    };
    return cmocka_run_group_tests_name("tensor", tests, NULL, NULL);
}
