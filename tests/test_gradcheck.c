/* Finite-difference gradient checks: one row per differentiable op and shape
 * case, random f64 inputs from a seeded generator (some transposed or sliced,
 * so non-contiguous; some used twice), each through tg_gradcheck_call with
 * PyTorch's default tolerances. Plus: gradcheck catches a deliberately wrong
 * backward (a user function), reports the right worst element on a pass and on
 * a failure, takes any number of inputs, reads NULL or zero options as
 * PyTorch's defaults, gives through its first (deprecated) forms the results
 * it gives through tg_gradcheck_call, and rejects f32 inputs that require
 * grad. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})

/* ---- inputs ------------------------------------------------------------------------------------ */

enum {
    N,  /* normal */
    P,  /* positive, in [0.5, 2) */
    A,  /* |v| in [0.2, 1), random sign: away from 0 (relu) */
    D,  /* distinct values, at least 0.05 apart (max) */
    T,  /* normal, a transposed view of a contiguous base (last two dims) */
    S,  /* normal, a slice of a wider base along the last dim (strided) */
    C,  /* normal constant: does not require grad */
};

typedef struct {
    int kind;
    int ndim;
    int64_t shape[4];
} in_spec;

/* Shared constant tensors the functions read: masks, conditions, targets. */
static struct {
    tg_tensor *mask33;  /* (3,3) bool, causal */
    tg_tensor *cond23;  /* (2,3) bool */
    tg_tensor *mask13;  /* (1,3) bool */
    tg_tensor *target4; /* (4) int64 in [0,5) */
} fx;

static tg_tensor *make_input(tg_tape *tp, const in_spec *s, tg_generator *g)
{
    int64_t shape[4];
    memcpy(shape, s->shape, sizeof shape);
    tg_tensor *x = NULL;
    int nd = s->ndim;
    switch (s->kind) {
    case N:
    case C: x = tg_randn(tp, TG_F64, nd, shape, g); break;
    case P:
        x = tg_empty(tp, TG_F64, nd, shape);
        tg_uniform_(x, 0.5, 2.0, g);
        break;
    case A:
        x = tg_empty(tp, TG_F64, nd, shape);
        tg_uniform_(x, 0.2, 1.0, g);
        for (int64_t i = 0; i < tg_numel(x); i++)
            if (tg_generator_random(g) & 1) ((double *)x->data)[i] *= -1;
        break;
    case D: {
        x = tg_empty(tp, TG_F64, nd, shape);
        int64_t cnt = tg_numel(x);
        double *d = x->data;
        for (int64_t i = 0; i < cnt; i++) d[i] = 0.1 * (double)i - 0.05 * (double)cnt;
        for (int64_t i = cnt - 1; i > 0; i--) { /* shuffle */
            int64_t j = (int64_t)(tg_generator_random(g) % (uint32_t)(i + 1));
            double t = d[i];
            d[i] = d[j];
            d[j] = t;
        }
        break;
    }
    case T: {
        assert_true(nd >= 2);
        int64_t b[4];
        memcpy(b, shape, sizeof b);
        b[nd - 1] = shape[nd - 2];
        b[nd - 2] = shape[nd - 1];
        tg_tensor *base = tg_randn(tp, TG_F64, nd, b, g);
        x = tg_transpose(tp, base, -1, -2);
        assert_false(tg_is_contiguous(x) && shape[nd - 1] > 1 && shape[nd - 2] > 1);
        break;
    }
    case S: {
        int64_t b[4];
        memcpy(b, shape, sizeof b);
        b[nd - 1] = shape[nd - 1] + 3;
        tg_tensor *base = tg_randn(tp, TG_F64, nd, b, g);
        x = tg_narrow(tp, base, nd - 1, 1, shape[nd - 1]);
        break;
    }
    default: fail_msg("bad kind %d", s->kind);
    }
    assert_non_null(x);
    assert_true(tg_is_leaf(x));
    if (s->kind != C) assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    return x;
}

/* ---- the functions ------------------------------------------------------------------------------- */

#define GF(id, expr)                                                                   \
    static tg_tensor *gf_##id(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)     \
    {                                                                                  \
        (void)ctx;                                                                     \
        tg_tensor *a = in[0], *b = n > 1 ? in[1] : NULL, *c = n > 2 ? in[2] : NULL;    \
        (void)a, (void)b, (void)c, (void)tp;                                           \
        return expr;                                                                   \
    }

GF(add, tg_add(tp, a, b))
GF(sub, tg_sub(tp, a, b))
GF(mul, tg_mul(tp, a, b))
GF(div, tg_div(tp, a, b))
GF(add_scalar, tg_add_scalar(tp, a, 1.5))
GF(sub_scalar, tg_sub_scalar(tp, a, 0.7))
GF(rsub_scalar, tg_rsub_scalar(tp, a, 2.0))
GF(mul_scalar, tg_mul_scalar(tp, a, -3.0))
GF(div_scalar, tg_div_scalar(tp, a, 4.0))
GF(pow2, tg_pow_scalar(tp, a, 2.0))
GF(pow3, tg_pow_scalar(tp, a, 3.0))
GF(pow05, tg_pow_scalar(tp, a, 0.5))
GF(pow_m15, tg_pow_scalar(tp, a, -1.5))
GF(neg, tg_neg(tp, a))
GF(exp, tg_exp(tp, a))
GF(log, tg_log(tp, a))
GF(sqrt, tg_sqrt(tp, a))
GF(tanh, tg_tanh(tp, a))
GF(relu, tg_relu(tp, a))
GF(gelu, tg_gelu(tp, a))
GF(where, tg_where(tp, fx.cond23, a, b))
GF(where_bcast, tg_where(tp, fx.mask13, a, b))
GF(masked_fill, tg_masked_fill(tp, a, fx.mask33, 5.0))
GF(masked_softmax, tg_softmax(tp, tg_masked_fill(tp, a, fx.mask33, -INFINITY), -1))
GF(sum, tg_sum(tp, a))
GF(mean, tg_mean(tp, a))
GF(sum_02_keep, tg_sum_dims(tp, a, 2, (const int[]){0, 2}, true))
GF(sum_last, tg_sum_dims(tp, a, 1, (const int[]){-1}, false))
GF(sum_all_dims, tg_sum_dims(tp, a, 0, NULL, false))
GF(mean_1_keep, tg_mean_dims(tp, a, 1, (const int[]){1}, true))
GF(mean_0l, tg_mean_dims(tp, a, 2, (const int[]){0, -1}, false))
GF(max_dim1, tg_max_dim(tp, a, 1, false, NULL))
GF(max_dimlast_keep, tg_max_dim(tp, a, -1, true, NULL))
GF(max_dim0, tg_max_dim(tp, a, 0, false, NULL))
GF(max, tg_max(tp, a))
GF(softmax0, tg_softmax(tp, a, 0))
GF(softmax1, tg_softmax(tp, a, 1))
GF(softmaxl, tg_softmax(tp, a, -1))
GF(log_softmax0, tg_log_softmax(tp, a, 0))
GF(log_softmax1, tg_log_softmax(tp, a, 1))
GF(log_softmaxl, tg_log_softmax(tp, a, -1))
GF(matmul, tg_matmul(tp, a, b))
GF(matmul_self, tg_matmul(tp, a, a))
GF(mm, tg_mm(tp, a, b))
GF(bmm, tg_bmm(tp, a, b))
GF(linear, tg_linear(tp, a, b, c))
GF(linear_nobias, tg_linear(tp, a, b, NULL))
GF(view, tg_view(tp, a, 2, SH(6, 4)))
GF(view_infer, tg_view(tp, a, 3, SH(4, -1, 2)))
GF(reshape, tg_reshape(tp, a, 1, SH(-1)))
GF(reshape2, tg_reshape(tp, a, 2, SH(2, 6)))
GF(transpose, tg_transpose(tp, a, 0, 2))
GF(t, tg_t(tp, a))
GF(permute, tg_permute(tp, a, (const int[]){2, 0, 1}))
GF(narrow, tg_narrow(tp, a, 1, 1, 2))
GF(select, tg_select(tp, a, 1, -1))
GF(unsqueeze, tg_unsqueeze(tp, a, 1))
GF(squeeze, tg_squeeze(tp, a, 1))
GF(squeeze_all, tg_squeeze_all(tp, a))
GF(expand, tg_expand(tp, a, 3, SH(2, 3, 4)))
GF(contiguous, tg_contiguous(tp, a))
GF(clone, tg_clone(tp, a))
GF(mse_mean, tg_mse_loss(tp, a, b, TG_REDUCE_MEAN))
GF(mse_sum, tg_mse_loss(tp, a, b, TG_REDUCE_SUM))
GF(mse_none, tg_mse_loss(tp, a, b, TG_REDUCE_NONE))
GF(ce_mean, tg_cross_entropy(tp, a, fx.target4, TG_REDUCE_MEAN))
GF(ce_sum, tg_cross_entropy(tp, a, fx.target4, TG_REDUCE_SUM))
GF(ce_none, tg_cross_entropy(tp, a, fx.target4, TG_REDUCE_NONE))
GF(to_f32, tg_to_dtype(tp, a, TG_F32))
GF(dropout0, tg_dropout(tp, a, 0.0, NULL))
GF(sdpa, tg_scaled_dot_product_attention(tp, a, b, c, false, 0.0, NULL))
GF(sdpa_causal, tg_scaled_dot_product_attention(tp, a, b, c, true, 0.0, NULL))
/* inputs used twice */
GF(square_plus, tg_add(tp, tg_mul(tp, a, a), a))
GF(self_mul, tg_mul(tp, a, a))
GF(reuse_deep, tg_mul(tp, tg_softmax(tp, a, -1), tg_tanh(tp, tg_matmul(tp, a, tg_t(tp, b)))))

static tg_tensor *gf_cat(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx;
    return tg_cat(tp, n, in, 1);
}
static tg_tensor *gf_cat0(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx;
    return tg_cat(tp, n, in, 0);
}
static tg_tensor *gf_stack0(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx;
    return tg_stack(tp, n, in, 0);
}
static tg_tensor *gf_stackl(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx;
    return tg_stack(tp, n, in, -1);
}
/* cat of an input with itself */
static tg_tensor *gf_cat_self(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    tg_tensor *xs[3] = {in[0], in[0], in[0]};
    return tg_cat(tp, 3, xs, -1);
}
/* a fresh generator with a fixed seed on every call: the same mask each time */
static tg_tensor *gf_dropout_half(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    tg_generator *g = tg_generator_new(42);
    tg_tensor *y = tg_dropout(tp, in[0], 0.5, g);
    tg_generator_free(g);
    return y;
}
/* the book's causal attention, composed of recorded ops */
static tg_tensor *gf_attention(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx, (void)n;
    tg_tensor *x = in[0], *wq = in[1], *wk = in[2], *wv = in[3];
    tg_tensor *q = tg_matmul(tp, x, wq), *k = tg_matmul(tp, x, wk), *v = tg_matmul(tp, x, wv);
    tg_tensor *s = tg_matmul(tp, q, tg_transpose(tp, k, 1, 2));
    s = tg_masked_fill(tp, s, fx.mask33, -INFINITY);
    tg_tensor *w = tg_softmax(tp, tg_div_scalar(tp, s, sqrt(2.0)), -1);
    tg_tensor *ctxv = tg_matmul(tp, w, v); /* (2,3,2) */
    tg_tensor *heads[2] = {ctxv, ctxv};
    tg_tensor *cat = tg_cat(tp, 2, heads, -1); /* (2,3,4) */
    tg_tensor *r = tg_view(tp, tg_contiguous(tp, tg_transpose(tp, tg_view(tp, cat, 4, SH(2, 3, 2, 2)), 1, 2)),
                           3, SH(2, 3, 4));
    return tg_mean_dims(tp, r, 1, (const int[]){-1}, false);
}

/* ---- the table -------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    tg_gradcheck_forward fn;
    int n;
    in_spec in[4];
} gc_row;

#define I1(k, a) {k, 1, {a}}
#define I2(k, a, b) {k, 2, {a, b}}
#define I3(k, a, b, c) {k, 3, {a, b, c}}
#define I4(k, a, b, c, d) {k, 4, {a, b, c, d}}
#define I0(k) {k, 0, {0}}

static const gc_row rows[] = {
    /* elementwise binary, incl. broadcasting */
    {"add", gf_add, 2, {I2(N, 2, 3), I2(N, 2, 3)}},
    {"add (2,3)+(3)", gf_add, 2, {I2(N, 2, 3), I1(N, 3)}},
    {"add (2,1)+(1,3)", gf_add, 2, {I2(N, 2, 1), I2(N, 1, 3)}},
    {"add (2,3)+() 0-dim", gf_add, 2, {I2(N, 2, 3), I0(N)}},
    {"add transposed+sliced", gf_add, 2, {I2(T, 3, 4), I2(S, 3, 4)}},
    {"add const", gf_add, 2, {I2(N, 2, 3), I2(C, 2, 3)}},
    {"sub (2,3)-(3)", gf_sub, 2, {I2(N, 2, 3), I1(N, 3)}},
    {"sub (3,1)-(1,4)", gf_sub, 2, {I2(N, 3, 1), I2(N, 1, 4)}},
    {"sub transposed", gf_sub, 2, {I2(T, 2, 3), I2(N, 2, 3)}},
    {"mul", gf_mul, 2, {I2(N, 2, 3), I2(N, 2, 3)}},
    {"mul (2,1,3)*(4,1)", gf_mul, 2, {I3(N, 2, 1, 3), I2(N, 4, 1)}},
    {"mul transposed*(3,1) ", gf_mul, 2, {I2(T, 3, 4), I2(N, 3, 1)}},
    {"div", gf_div, 2, {I2(N, 2, 3), I2(P, 2, 3)}},
    {"div (2,3)/(3)", gf_div, 2, {I2(N, 2, 3), I1(P, 3)}},
    {"div (2,1)/(2,3) sliced", gf_div, 2, {I2(N, 2, 1), I2(P, 2, 3)}},
    {"div by const", gf_div, 2, {I2(N, 2, 3), I2(C, 2, 3)}},
    /* scalar variants and unary */
    {"add_scalar", gf_add_scalar, 1, {I2(N, 2, 3)}},
    {"sub_scalar", gf_sub_scalar, 1, {I2(T, 2, 3)}},
    {"rsub_scalar", gf_rsub_scalar, 1, {I2(N, 2, 3)}},
    {"mul_scalar", gf_mul_scalar, 1, {I2(S, 2, 3)}},
    {"div_scalar", gf_div_scalar, 1, {I2(N, 2, 3)}},
    {"pow 2", gf_pow2, 1, {I2(N, 2, 3)}},
    {"pow 3", gf_pow3, 1, {I2(T, 2, 3)}},
    {"pow 0.5", gf_pow05, 1, {I2(P, 2, 3)}},
    {"pow -1.5", gf_pow_m15, 1, {I2(P, 2, 3)}},
    {"neg", gf_neg, 1, {I2(N, 2, 3)}},
    {"exp", gf_exp, 1, {I2(N, 2, 3)}},
    {"exp sliced", gf_exp, 1, {I3(S, 2, 2, 3)}},
    {"log", gf_log, 1, {I2(P, 2, 3)}},
    {"sqrt", gf_sqrt, 1, {I2(P, 2, 3)}},
    {"tanh", gf_tanh, 1, {I2(N, 2, 3)}},
    {"relu", gf_relu, 1, {I2(A, 3, 4)}},
    {"gelu", gf_gelu, 1, {I2(N, 3, 4)}},
    {"gelu transposed", gf_gelu, 1, {I2(T, 3, 4)}},
    {"where", gf_where, 2, {I2(N, 2, 3), I1(N, 3)}},
    {"where broadcast cond", gf_where, 2, {I2(T, 2, 3), I2(N, 2, 3)}},
    {"where (1,3) cond", gf_where_bcast, 2, {I2(N, 2, 3), I2(N, 2, 1)}},
    {"masked_fill", gf_masked_fill, 1, {I3(N, 2, 3, 3)}},
    {"masked_fill transposed", gf_masked_fill, 1, {I2(T, 3, 3)}},
    {"masked_fill -inf + softmax", gf_masked_softmax, 1, {I3(N, 2, 3, 3)}},
    /* reductions */
    {"sum", gf_sum, 1, {I3(N, 2, 3, 4)}},
    {"sum transposed", gf_sum, 1, {I2(T, 3, 4)}},
    {"mean", gf_mean, 1, {I3(N, 2, 3, 4)}},
    {"mean sliced", gf_mean, 1, {I2(S, 3, 4)}},
    {"sum_dims {0,2} keepdim", gf_sum_02_keep, 1, {I3(N, 2, 3, 4)}},
    {"sum_dims {-1}", gf_sum_last, 1, {I3(T, 2, 3, 4)}},
    {"sum_dims all", gf_sum_all_dims, 1, {I2(N, 2, 3)}},
    {"mean_dims {1} keepdim", gf_mean_1_keep, 1, {I3(N, 2, 3, 4)}},
    {"mean_dims {0,-1}", gf_mean_0l, 1, {I3(S, 2, 3, 4)}},
    {"max_dim 1", gf_max_dim1, 1, {I3(D, 2, 3, 4)}},
    {"max_dim -1 keepdim", gf_max_dimlast_keep, 1, {I3(D, 2, 3, 4)}},
    {"max_dim 0", gf_max_dim0, 1, {I2(D, 4, 3)}},
    {"max", gf_max, 1, {I2(D, 3, 4)}},
    /* softmax */
    {"softmax 0", gf_softmax0, 1, {I3(N, 2, 3, 4)}},
    {"softmax 1", gf_softmax1, 1, {I3(N, 2, 3, 4)}},
    {"softmax -1", gf_softmaxl, 1, {I3(N, 2, 3, 4)}},
    {"softmax -1 transposed", gf_softmaxl, 1, {I2(T, 3, 4)}},
    {"softmax 1 sliced", gf_softmax1, 1, {I2(S, 3, 4)}},
    {"log_softmax 0", gf_log_softmax0, 1, {I3(N, 2, 3, 4)}},
    {"log_softmax 1", gf_log_softmax1, 1, {I3(N, 2, 3, 4)}},
    {"log_softmax -1", gf_log_softmaxl, 1, {I3(N, 2, 3, 4)}},
    {"log_softmax 0 transposed", gf_log_softmax0, 1, {I2(T, 3, 4)}},
    /* matrix products */
    {"matmul (3)@(3)", gf_matmul, 2, {I1(N, 3), I1(N, 3)}},
    {"matmul (2,3)@(3)", gf_matmul, 2, {I2(N, 2, 3), I1(N, 3)}},
    {"matmul (3)@(3,4)", gf_matmul, 2, {I1(N, 3), I2(N, 3, 4)}},
    {"matmul (2,3)@(3,4)", gf_matmul, 2, {I2(N, 2, 3), I2(N, 3, 4)}},
    {"matmul T@T", gf_matmul, 2, {I2(T, 2, 3), I2(T, 3, 4)}},
    {"matmul sliced@sliced", gf_matmul, 2, {I2(S, 2, 3), I2(S, 3, 4)}},
    {"matmul (2,2,3)@(3,4)", gf_matmul, 2, {I3(N, 2, 2, 3), I2(N, 3, 4)}},
    {"matmul (2,2,3)T@(3,4)T", gf_matmul, 2, {I3(T, 2, 2, 3), I2(T, 3, 4)}},
    {"matmul (2,1,2,3)@(3,3,4)", gf_matmul, 2, {I4(N, 2, 1, 2, 3), I3(N, 3, 3, 4)}},
    {"matmul (2,2,3)@(2,3,4)", gf_matmul, 2, {I3(N, 2, 2, 3), I3(N, 2, 3, 4)}},
    {"matmul (2,2,3)@(1,3,4)", gf_matmul, 2, {I3(N, 2, 2, 3), I3(N, 1, 3, 4)}},
    {"matmul (2,3)@(2,3,4)", gf_matmul, 2, {I2(N, 2, 3), I3(N, 2, 3, 4)}},
    {"matmul (2,3)T@(2,3,4)", gf_matmul, 2, {I2(T, 2, 3), I3(T, 2, 3, 4)}},
    {"matmul (3)@(2,3,4)", gf_matmul, 2, {I1(N, 3), I3(N, 2, 3, 4)}},
    {"matmul (2,2,3)@(3)", gf_matmul, 2, {I3(N, 2, 2, 3), I1(N, 3)}},
    {"matmul const@(3,4)", gf_matmul, 2, {I3(C, 2, 2, 3), I2(N, 3, 4)}},
    {"matmul a@a", gf_matmul_self, 1, {I2(N, 3, 3)}},
    {"matmul a@a transposed", gf_matmul_self, 1, {I2(T, 3, 3)}},
    {"mm", gf_mm, 2, {I2(N, 2, 3), I2(N, 3, 4)}},
    {"mm T@S", gf_mm, 2, {I2(T, 2, 3), I2(S, 3, 4)}},
    {"bmm", gf_bmm, 2, {I3(N, 2, 2, 3), I3(N, 2, 3, 4)}},
    {"bmm T@T", gf_bmm, 2, {I3(T, 2, 2, 3), I3(T, 2, 3, 4)}},
    {"linear 2-D", gf_linear, 3, {I2(N, 4, 3), I2(N, 2, 3), I1(N, 2)}},
    {"linear 2-D no bias", gf_linear_nobias, 2, {I2(N, 4, 3), I2(N, 2, 3)}},
    {"linear 3-D", gf_linear, 3, {I3(N, 2, 4, 3), I2(N, 2, 3), I1(N, 2)}},
    {"linear 3-D no bias", gf_linear_nobias, 2, {I3(N, 2, 4, 3), I2(N, 2, 3)}},
    {"linear 3-D transposed x, weight", gf_linear, 3, {I3(T, 2, 4, 3), I2(T, 2, 3), I1(N, 2)}},
    {"linear 2-D sliced x", gf_linear, 3, {I2(S, 4, 3), I2(N, 2, 3), I1(C, 2)}},
    {"linear 1-D", gf_linear, 3, {I1(N, 3), I2(N, 2, 3), I1(N, 2)}},
    {"linear 4-D", gf_linear_nobias, 2, {I4(N, 2, 1, 2, 3), I2(N, 2, 3)}},
    /* shape and views */
    {"view", gf_view, 1, {I3(N, 2, 3, 4)}},
    {"view -1", gf_view_infer, 1, {I3(N, 2, 3, 4)}},
    {"reshape (viewable)", gf_reshape, 1, {I3(N, 2, 3, 4)}},
    {"reshape (non-viewable)", gf_reshape, 1, {I2(T, 3, 4)}},
    {"reshape sliced", gf_reshape2, 1, {I2(S, 3, 4)}},
    {"transpose", gf_transpose, 1, {I3(N, 2, 3, 4)}},
    {"t", gf_t, 1, {I2(N, 2, 3)}},
    {"t transposed", gf_t, 1, {I2(T, 2, 3)}},
    {"permute", gf_permute, 1, {I3(N, 2, 3, 4)}},
    {"permute transposed", gf_permute, 1, {I3(T, 2, 3, 4)}},
    {"narrow", gf_narrow, 1, {I3(N, 2, 3, 4)}},
    {"narrow sliced", gf_narrow, 1, {I2(S, 2, 4)}},
    {"select", gf_select, 1, {I3(N, 2, 3, 4)}},
    {"select transposed", gf_select, 1, {I2(T, 3, 4)}},
    {"unsqueeze", gf_unsqueeze, 1, {I2(N, 2, 3)}},
    {"squeeze", gf_squeeze, 1, {I3(N, 2, 1, 3)}},
    {"squeeze_all", gf_squeeze_all, 1, {I4(N, 1, 2, 1, 3)}},
    {"expand (3,1)", gf_expand, 1, {I2(N, 3, 1)}},
    {"expand (4)", gf_expand, 1, {I1(N, 4)}},
    {"expand (1,3,1) sliced", gf_expand, 1, {I3(S, 1, 3, 1)}},
    {"contiguous", gf_contiguous, 1, {I2(N, 3, 4)}},
    {"contiguous transposed", gf_contiguous, 1, {I2(T, 3, 4)}},
    {"clone", gf_clone, 1, {I2(S, 3, 4)}},
    {"cat dim 1", gf_cat, 3, {I2(N, 2, 1), I2(T, 2, 3), I2(S, 2, 2)}},
    {"cat dim 0", gf_cat0, 2, {I2(N, 1, 3), I2(N, 2, 3)}},
    {"cat with const", gf_cat, 2, {I2(C, 2, 2), I2(N, 2, 3)}},
    {"cat self", gf_cat_self, 1, {I2(N, 2, 3)}},
    {"stack 0", gf_stack0, 3, {I2(N, 2, 3), I2(T, 2, 3), I2(S, 2, 3)}},
    {"stack -1", gf_stackl, 2, {I2(N, 2, 3), I2(N, 2, 3)}},
    /* losses */
    {"mse mean", gf_mse_mean, 2, {I2(N, 3, 4), I2(N, 3, 4)}},
    {"mse sum", gf_mse_sum, 2, {I2(T, 3, 4), I2(N, 3, 4)}},
    {"mse none", gf_mse_none, 2, {I2(N, 3, 4), I2(S, 3, 4)}},
    {"mse const target", gf_mse_mean, 2, {I2(N, 3, 4), I2(C, 3, 4)}},
    {"cross_entropy mean", gf_ce_mean, 1, {I2(N, 4, 5)}},
    {"cross_entropy sum", gf_ce_sum, 1, {I2(T, 4, 5)}},
    {"cross_entropy none", gf_ce_none, 1, {I2(S, 4, 5)}},
    /* dropout */
    {"dropout p=0", gf_dropout0, 1, {I2(N, 3, 4)}},
    {"dropout p=0.5 fixed seed", gf_dropout_half, 1, {I2(N, 4, 5)}},
    {"dropout p=0.5 transposed", gf_dropout_half, 1, {I2(T, 4, 5)}},
    /* fused attention */
    {"sdpa", gf_sdpa, 3, {I3(N, 2, 3, 4), I3(N, 2, 3, 4), I3(N, 2, 3, 4)}},
    {"sdpa causal", gf_sdpa_causal, 3, {I3(N, 2, 3, 4), I3(T, 2, 3, 4), I3(S, 2, 3, 4)}},
    /* inputs used twice, compositions */
    {"x*x + x", gf_square_plus, 1, {I2(N, 2, 3)}},
    {"x*x transposed", gf_self_mul, 1, {I2(T, 2, 3)}},
    {"softmax(a) * tanh(a @ b^T)", gf_reuse_deep, 2, {I2(N, 3, 4), I2(N, 4, 4)}},
    {"causal attention chain", gf_attention, 4, {I3(N, 2, 3, 3), I2(N, 3, 2), I2(T, 3, 2), I2(N, 3, 2)}},
};

static void test_gradcheck_table(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    fx.mask33 = tg_triu(tp, tg_ones(tp, TG_BOOL, 2, SH(3, 3)), 1);
    fx.cond23 = tg_from_data(tp, TG_BOOL, 2, SH(2, 3), (const uint8_t[]){1, 0, 1, 0, 0, 1});
    fx.mask13 = tg_from_data(tp, TG_BOOL, 2, SH(1, 3), (const uint8_t[]){0, 1, 1});
    fx.target4 = tg_from_data(tp, TG_I64, 1, SH(4), (const int64_t[]){0, 4, 2, 2});
    assert_non_null(fx.mask33);
    assert_non_null(fx.cond23);
    assert_non_null(fx.mask13);
    assert_non_null(fx.target4);
    tg_generator *g = tg_generator_new(2024);
    size_t nrows = sizeof rows / sizeof rows[0];
    int failures = 0;
    for (size_t r = 0; r < nrows; r++) {
        const gc_row *row = &rows[r];
        tg_tensor *in[4];
        for (int i = 0; i < row->n; i++) in[i] = make_input(tp, &row->in[i], g);
        tg_gradcheck_result res;
        memset(&res, 0, sizeof res);
        tg_clear_error();
        int st = tg_gradcheck_call(row->fn, NULL, row->n, in, NULL, &res);
        if (st != TG_OK) {
            print_error("%-36s ERROR %d: %s\n", row->name, st, tg_last_error());
            failures++;
            continue;
        }
        if (!res.passed || res.worst_input < 0) {
            print_error("%-36s FAILED: %s\n", row->name, res.message);
            failures++;
            continue;
        }
        /* the inputs' own .grad is left as it was (none) */
        for (int i = 0; i < row->n; i++)
            if (in[i]->grad) {
                print_error("%-36s input %d: gradcheck left a .grad behind\n", row->name, i);
                failures++;
            }
    }
    printf("gradcheck: %zu rows, %d failed\n", nrows, failures);
    tg_generator_free(g);
    tg_tape_free(tp);
    if (failures) fail_msg("%d of %zu gradcheck rows failed (see above)", failures, nrows);
}

/* ---- gradcheck catches a wrong backward ---------------------------------------------------------- */

/* y = x * x with a backward that is off by a factor of 2: dx = dy * x. */
static tg_tensor *wrong_square_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)n;
    if (tg_fn_save_for_backward(ctx, 1, in) != TG_OK) return NULL;
    return tg_mul(tp, in[0], in[0]);
}

static int wrong_square_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    gx[0] = tg_mul(tp, (tg_tensor *)gy, tg_fn_saved(ctx, 0));
    return gx[0] ? TG_OK : TG_ENOMEM;
}

static const tg_function wrong_square = {"WrongBackward0", wrong_square_forward, wrong_square_backward};

static tg_tensor *tg_wrong_square(tg_tape *tp, tg_tensor *x) { return tg_function_apply(tp, &wrong_square, 1, &x); }

static tg_tensor *gf_wrong(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)n, (void)ctx;
    return tg_wrong_square(tp, in[0]);
}

static void test_wrong_backward_is_caught(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(5);
    in_spec spec = I2(P, 3, 4);
    tg_tensor *x = make_input(tp, &spec, g);
    /* the forward itself is right */
    tg_tensor *y = tg_wrong_square(tp, x);
    assert_non_null(y);
    for (int64_t i = 0; i < 12; i++) assert_true(tg_item_at(y, i) == tg_item_at(x, i) * tg_item_at(x, i));
    assert_string_equal(tg_grad_fn_name(y), "WrongBackward0");

    double per_input[1] = {-1};
    tg_gradcheck_options opts = {.max_err_per_input = per_input};
    tg_gradcheck_result res;
    assert_int_equal(tg_gradcheck_call(gf_wrong, NULL, 1, &x, &opts, &res), TG_OK);
    printf("wrong backward: %s\n", res.message);
    assert_false(res.passed);
    assert_int_equal(res.worst_input, 0);
    assert_true(res.worst_index >= 0 && res.worst_index < 12);
    assert_true(fabs(res.numeric) > 0.5);
    assert_true(fabs(res.analytic - res.numeric / 2) <= 1e-6 * fabs(res.numeric));
    assert_true(fabs(res.max_abs_err - fabs(res.numeric / 2)) <= 1e-6 * fabs(res.numeric));
    assert_true(per_input[0] >= res.max_abs_err);
    assert_non_null(strstr(res.message, "fail"));
    /* numeric = 2 x w at the worst element, w in [0.5, 1.5) */
    double xv = tg_item_at(x, res.worst_index);
    assert_true(res.numeric >= 2 * xv * 0.5 - 1e-6 && res.numeric <= 2 * xv * 1.5 + 1e-6);
    /* the right op, x*x through mul, passes on the same input */
    assert_int_equal(tg_gradcheck_call(gf_self_mul, NULL, 1, &x, &opts, &res), TG_OK);
    assert_true(res.passed);
    assert_true(per_input[0] < 1e-6);
    /* so does the wrong one with a tolerance loose enough to hide it */
    assert_int_equal(tg_gradcheck_call(gf_wrong, NULL, 1, &x, &(tg_gradcheck_options){.atol = 10.0}, &res), TG_OK);
    assert_true(res.passed);
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- the worst element reported ---------------------------------------------------------------- */

/* y = x * c (c, e: constants of x's shape) with a backward that adds e to the
 * true gradient: at element i, analytic - numeric = e[i] exactly, so the test
 * chooses each element's error and tolerance (atol + rtol |w[i] c[i]|). */
static tg_tensor *offset_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)n;
    if (tg_fn_save_for_backward(ctx, 2, in + 1) != TG_OK) return NULL;
    return tg_mul(tp, in[0], in[1]);
}

static int offset_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    gx[0] = tg_add(tp, tg_mul(tp, (tg_tensor *)gy, tg_fn_saved(ctx, 0)), tg_fn_saved(ctx, 1));
    return gx[0] ? TG_OK : TG_ENOMEM;
}

static const tg_function offset_fn = {"OffsetBackward0", offset_forward, offset_backward};

static tg_tensor *gf_offset(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx;
    return tg_function_apply(tp, &offset_fn, n, in);
}

/* gf_offset's inputs: x = (1, 2, 3), requiring grad, and the constants c and e. */
static void offset_inputs(tg_tape *tp, tg_tensor **in, const double *c, const double *e)
{
    in[0] = tg_from_f64(tp, 1, SH(3), (const double[]){1, 2, 3});
    assert_int_equal(tg_requires_grad_(in[0], true), TG_OK);
    in[1] = tg_from_f64(tp, 1, SH(3), c);
    in[2] = e ? tg_from_f64(tp, 1, SH(3), e) : NULL;
}

static void test_worst_element(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *in[3];
    offset_inputs(tp, in, (const double[]){1000, 0, 1}, NULL);
    double per_input[3] = {-1, -1, -1};
    tg_gradcheck_options opts = {.max_err_per_input = per_input};
    tg_gradcheck_result res;

    /* A pass: element 0 has the largest error (1e-4, far inside its tolerance
     * of about 1); element 1 is closer to its own (5e-6 of 1e-5) but smaller.
     * The report names element 0. */
    in[2] = tg_from_f64(tp, 1, SH(3), (const double[]){1e-4, 5e-6, 0});
    assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &opts, &res), TG_OK);
    printf("pass: %s\n", res.message);
    assert_true(res.passed);
    assert_int_equal(res.worst_input, 0);
    assert_int_equal(res.worst_index, 0);
    assert_true(fabs(res.max_abs_err - 1e-4) < 1e-6);
    assert_true(fabs(res.analytic - res.numeric - 1e-4) < 1e-6);
    assert_true(fabs(per_input[0] - 1e-4) < 1e-6);
    assert_true(per_input[1] == 0 && per_input[2] == 0); /* no grad: written as 0 */
    assert_non_null(strstr(res.message, "passed"));
    assert_non_null(strstr(res.message, "index 0"));

    /* A failure: element 0 still has the largest error (0.5, inside its
     * tolerance), element 1 a smaller one (1e-3) a hundred times its tolerance
     * of 1e-5. The report names element 1, the one that fails. */
    in[2] = tg_from_f64(tp, 1, SH(3), (const double[]){0.5, 1e-3, 0});
    assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &opts, &res), TG_OK);
    printf("fail: %s\n", res.message);
    assert_false(res.passed);
    assert_int_equal(res.worst_input, 0);
    assert_int_equal(res.worst_index, 1);
    assert_true(fabs(res.max_abs_err - 1e-3) < 1e-6);
    assert_true(fabs(res.numeric) < 1e-6);
    assert_true(fabs(per_input[0] - 0.5) < 1e-6); /* the input's largest error all the same */
    assert_non_null(strstr(res.message, "failed"));

    /* Ties: the first element wins. */
    in[2] = tg_from_f64(tp, 1, SH(3), (const double[]){0, 2e-3, 2e-3});
    tg_tensor *c = in[1];
    in[1] = tg_from_f64(tp, 1, SH(3), (const double[]){0, 0, 0});
    assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &opts, &res), TG_OK);
    assert_false(res.passed);
    assert_int_equal(res.worst_index, 1);
    assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &(tg_gradcheck_options){.atol = 1.0}, &res), TG_OK);
    assert_true(res.passed);
    assert_int_equal(res.worst_index, 1);
    in[1] = c;
    tg_tape_free(tp);
}

/* ---- any number of inputs --------------------------------------------------------------------- */

/* sum over i of (i + 1) * x_i * x_i, every x_i of shape (2) */
static tg_tensor *gf_many(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx;
    tg_tensor *acc = NULL;
    for (int i = 0; i < n; i++) {
        tg_tensor *t = tg_mul_scalar(tp, tg_mul(tp, in[i], in[i]), i + 1.0);
        acc = acc ? tg_add(tp, acc, t) : t;
    }
    return acc;
}

static tg_tensor *gf_many_wrong(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx;
    /* input 17 goes through the wrong square */
    return tg_add(tp, gf_many(tp, NULL, n, in), tg_wrong_square(tp, in[17]));
}

static void test_many_inputs(void **state)
{
    (void)state;
    enum { NIN = 20 };
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(77);
    tg_tensor *in[NIN];
    for (int i = 0; i < NIN; i++) {
        in[i] = tg_randn(tp, TG_F64, 1, SH(2), g);
        assert_non_null(in[i]);
        if (i != 3) assert_int_equal(tg_requires_grad_(in[i], true), TG_OK); /* input 3: a constant */
    }
    double per_input[NIN];
    for (int i = 0; i < NIN; i++) per_input[i] = -1;
    tg_gradcheck_options opts = {.max_err_per_input = per_input};
    tg_gradcheck_result res;
    assert_int_equal(tg_gradcheck_call(gf_many, NULL, NIN, in, &opts, &res), TG_OK);
    printf("20 inputs: %s\n", res.message);
    assert_true(res.passed);
    for (int i = 0; i < NIN; i++) assert_true(per_input[i] >= 0 && per_input[i] < 1e-6);
    assert_true(per_input[3] == 0);
    for (int i = 0; i < NIN; i++) assert_null(in[i]->grad);
    /* a wrong backward on input 17 is found there */
    assert_int_equal(tg_gradcheck_call(gf_many_wrong, NULL, NIN, in, &opts, &res), TG_OK);
    assert_false(res.passed);
    assert_int_equal(res.worst_input, 17);
    for (int i = 0; i < NIN; i++) assert_true(i == 17 ? per_input[i] > 0.1 : per_input[i] < 1e-6);
    /* without the per-input array, from a result struct full of garbage */
    tg_gradcheck_result res2;
    memset(&res2, 0xA5, sizeof res2);
    assert_int_equal(tg_gradcheck_call(gf_many, NULL, NIN, in, NULL, &res2), TG_OK);
    assert_true(res2.passed);
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- options: NULL and zero fields are PyTorch's defaults ----------------------------------------- */

static void test_null_options_are_defaults(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    /* gf_offset with c = 0: numeric 0, analytic = e, so element 0's error is
     * e[0] against a tolerance of atol alone */
    tg_tensor *in[3];
    offset_inputs(tp, in, (const double[]){0, 0, 0}, NULL);
    const tg_gradcheck_options pytorch = {.eps = 1e-6, .atol = 1e-5, .rtol = 1e-3}, zeros = {0};
    tg_gradcheck_result by_null, by_zeros, by_pytorch;
    const double errs[2] = {5e-6, 2e-5}; /* inside and outside atol 1e-5 */
    for (int k = 0; k < 2; k++) {
        in[2] = tg_from_f64(tp, 1, SH(3), (const double[]){errs[k], 0, 0});
        assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, NULL, &by_null), TG_OK);
        assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &zeros, &by_zeros), TG_OK);
        assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &pytorch, &by_pytorch), TG_OK);
        printf("error %g, NULL options: %s\n", errs[k], by_null.message);
        assert_int_equal(by_null.passed, k == 0);
        assert_int_equal(by_null.worst_index, 0);
        assert_true(fabs(by_null.max_abs_err - errs[k]) < 1e-9);
        tu_assert_same_gradcheck(&by_null, &by_zeros);
        tu_assert_same_gradcheck(&by_null, &by_pytorch);
    }
    /* each field set on its own changes only its own default */
    tg_gradcheck_result res;
    assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &(tg_gradcheck_options){.atol = 1e-4}, &res), TG_OK);
    assert_true(res.passed);
    in[2] = tg_from_f64(tp, 1, SH(3), (const double[]){errs[0], 0, 0});
    assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &(tg_gradcheck_options){.atol = 1e-6}, &res), TG_OK);
    assert_false(res.passed);
    /* rtol: c = 1000 makes numeric about 1000 w (w in [0.5, 1.5)): an error
     * of 0.1 is inside 1e-3 |numeric| and outside 1e-5 |numeric| */
    in[1] = tg_from_f64(tp, 1, SH(3), (const double[]){1000, 1000, 1000});
    in[2] = tg_from_f64(tp, 1, SH(3), (const double[]){0.1, 0, 0});
    assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, NULL, &res), TG_OK);
    assert_true(res.passed);
    assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &(tg_gradcheck_options){.rtol = 1e-5}, &res), TG_OK);
    assert_false(res.passed);
    assert_int_equal(res.worst_index, 0);
    tg_tape_free(tp);
}

/* ---- the first forms (deprecated) give tg_gradcheck_call's results ---------------------------- */

/* The first forms' functions take (tp, inputs, n, ctx). */
static tg_tensor *first_form_offset(tg_tape *tp, tg_tensor *const *in, int n, void *ctx)
{
    return gf_offset(tp, ctx, n, in);
}

/* the wrong square times *ctx: ctx reaches the function */
static tg_tensor *first_form_scaled_wrong(tg_tape *tp, tg_tensor *const *in, int n, void *ctx)
{
    (void)n;
    return tg_mul_scalar(tp, tg_wrong_square(tp, in[0]), *(const double *)ctx);
}

static tg_tensor *gf_scaled_wrong(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    return first_form_scaled_wrong(tp, in, n, ctx);
}

static void test_first_forms_match(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *in[3];
    offset_inputs(tp, in, (const double[]){1000, 0, 1}, (const double[]){0.5, 1e-3, 0});
    tg_gradcheck_result old_res, new_res;
    /* tg_gradcheck: tolerances as arguments, 0 for a default; element 1
     * (error 1e-3, numeric 0) fails the default atol, element 0 (error 0.5,
     * numeric 500 to 1500) an rtol of 1e-5 */
    const double tols[3][3] = {{0, 0, 0}, {1e-7, 2e-3, 0}, {0, 0, 1e-5}};
    const bool passes[3] = {false, true, false};
    const int64_t worst[3] = {1, 0, 0};
    for (int k = 0; k < 3; k++) {
        const tg_gradcheck_options opt = {tols[k][0], tols[k][1], tols[k][2], NULL};
        assert_int_equal(tg_gradcheck(first_form_offset, in, 3, NULL, opt.eps, opt.atol, opt.rtol, &old_res), TG_OK);
        assert_int_equal(tg_gradcheck_call(gf_offset, NULL, 3, in, &opt, &new_res), TG_OK);
        printf("tg_gradcheck, tolerances %d: %s\n", k, old_res.message);
        tu_assert_same_gradcheck(&old_res, &new_res);
        assert_int_equal(old_res.passed, passes[k]);
        assert_int_equal(old_res.worst_index, worst[k]);
    }

    /* tg_gradcheck_ex: the options struct and its per-input errors, ctx passed through */
    double scale = 3.0, old_err[1] = {-1}, new_err[1] = {-2};
    tg_tensor *x = in[0];
    assert_int_equal(tg_gradcheck_ex(first_form_scaled_wrong, &x, 1, &scale,
                                     &(tg_gradcheck_options){.max_err_per_input = old_err}, &old_res), TG_OK);
    assert_int_equal(tg_gradcheck_call(gf_scaled_wrong, &scale, 1, &x,
                                       &(tg_gradcheck_options){.max_err_per_input = new_err}, &new_res), TG_OK);
    printf("tg_gradcheck_ex: %s\n", old_res.message);
    assert_false(old_res.passed);
    tu_assert_same_gradcheck(&old_res, &new_res);
    assert_true(old_err[0] == new_err[0] && old_err[0] == old_res.max_abs_err);
    /* analytic = 3 * x * w, numeric = 3 * 2 x w: half of it */
    assert_true(fabs(old_res.analytic - old_res.numeric / 2) <= 1e-6 * fabs(old_res.numeric));
    /* tg_gradcheck_ex refuses NULL options, as it always has */
    tu_assert_status_error(tg_gradcheck_ex(first_form_offset, in, 3, NULL, NULL, &old_res), "gradcheck", "options");
    tu_assert_status_error(tg_gradcheck(NULL, in, 3, NULL, 0, 0, 0, &old_res), "gradcheck", "NULL function");
    tg_tape_free(tp);
}

/* ---- argument errors -------------------------------------------------------------------------- */

static void test_gradcheck_rejects_bad_inputs(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *f = tg_ones(tp, TG_F32, 2, SH(2, 3));
    assert_int_equal(tg_requires_grad_(f, true), TG_OK);
    tg_gradcheck_result res = {0};
    tu_assert_status_error(tg_gradcheck_call(gf_exp, NULL, 1, &f, NULL, &res), "gradcheck", "float32", "float64");
    tg_tensor *d = tg_ones(tp, TG_F64, 2, SH(2, 3));
    assert_int_equal(tg_requires_grad_(d, true), TG_OK);
    /* a non-leaf input */
    tg_tensor *nl = tg_mul_scalar(tp, d, 2);
    tu_assert_status_error(tg_gradcheck_call(gf_exp, NULL, 1, &nl, NULL, &res), "gradcheck", "leaf");
    /* NULLs */
    tg_tensor *none[1] = {NULL};
    tu_assert_status_error(tg_gradcheck_call(gf_exp, NULL, 1, none, NULL, &res), "gradcheck", "NULL");
    tu_assert_status_error(tg_gradcheck_call(NULL, NULL, 1, &d, NULL, &res), "gradcheck");
    tu_assert_status_error(tg_gradcheck_call(gf_exp, NULL, 1, &d, NULL, NULL), "gradcheck");
    tu_assert_status_error(tg_gradcheck_call(gf_exp, NULL, 0, &d, NULL, &res), "gradcheck");
    /* a function that fails reports an error, not a pass */
    tg_tensor *pair[2] = {d, tg_ones(tp, TG_F64, 2, SH(4, 3))};
    assert_int_not_equal(tg_gradcheck_call(gf_add, NULL, 2, pair, NULL, &res), TG_OK);
    assert_false(res.passed);
    /* an f32 output is rejected */
    tu_assert_status_error(tg_gradcheck_call(gf_to_f32, NULL, 1, &d, NULL, &res), "gradcheck", "float64");
    tg_tape_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_table),
        cmocka_unit_test(test_wrong_backward_is_caught),
        cmocka_unit_test(test_worst_element),
        cmocka_unit_test(test_many_inputs),
        cmocka_unit_test(test_null_options_are_defaults),
        cmocka_unit_test(test_first_forms_match),
        cmocka_unit_test(test_gradcheck_rejects_bad_inputs),
    };
    return cmocka_run_group_tests_name("gradcheck", tests, NULL, NULL);
}
