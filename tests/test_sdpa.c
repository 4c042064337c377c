/* The fused scaled-dot-product-attention op: values and gradients against the
 * composed path (matmul, masked_fill, div, softmax, matmul), gradcheck in
 * float64 with and without causal masking and dropout, dropout statistics,
 * gradient accumulation when q, k, v are one tensor, and argument errors. */
#include "testutil.h"

#include <math.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------------------- */

/* A leaf of the given shape, uniform in [-1, 1), requiring grad. */
static tg_tensor *leaf(tg_tape *tp, tg_dtype dt, int nd, const int64_t *shape, tg_generator *g)
{
    tg_tensor *x = tg_empty(tp, dt, nd, shape);
    tu_assert_ok(x);
    assert_int_equal(tg_uniform_(x, -1.0, 1.0, g), TG_OK);
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    return x;
}

/* A second leaf holding x's values (its own .grad). */
static tg_tensor *twin(tg_tape *tp, const tg_tensor *x)
{
    tg_tensor *y = tg_empty(tp, x->dtype, x->ndim, x->shape);
    tu_assert_ok(y);
    assert_int_equal(tg_copy_(y, x), TG_OK);
    assert_int_equal(tg_requires_grad_(y, true), TG_OK);
    return y;
}

/* The book's path: softmax(masked_fill(q k^T, triu mask, -inf) / sqrt(hd)) [* z] @ v.
 * z (may be NULL) is an explicit dropout mask already holding 0 or 1/(1-p). */
static tg_tensor *composed(tg_tape *tp, tg_tensor *q, tg_tensor *k, tg_tensor *v, bool causal, tg_tensor *z)
{
    int nd = q->ndim;
    int64_t T = q->shape[nd - 2], hd = q->shape[nd - 1];
    tg_tensor *s = tg_matmul(tp, q, tg_transpose(tp, k, -2, -1));
    if (causal) {
        int64_t tt[2] = {T, T};
        tg_tensor *mask = tg_compare_scalar(tp, tg_triu(tp, tg_ones(tp, TG_F32, 2, tt), 1), 0.0, TG_CMP_GT);
        s = tg_masked_fill(tp, s, mask, -INFINITY);
    }
    tg_tensor *w = tg_softmax(tp, tg_div_scalar(tp, s, sqrt((double)hd)), -1);
    if (z) w = tg_mul(tp, w, z);
    tg_tensor *out = tg_matmul(tp, w, v);
    tu_assert_ok(out);
    return out;
}

/* q, k, v made from three (b, T, h*hd) leaves as MultiHeadAttention makes
 * them: view(b, T, h, hd).transpose(1, 2), non-contiguous (b, h, T, hd). */
static tg_tensor *heads(tg_tape *tp, tg_tensor *x, int64_t h)
{
    int64_t b = x->shape[0], T = x->shape[1], hd = x->shape[2] / h;
    int64_t s4[4] = {b, T, h, hd};
    tg_tensor *y = tg_transpose(tp, tg_view(tp, x, 4, s4), 1, 2);
    tu_assert_ok(y);
    return y;
}

/* Ways of building q, k, v from leaf inputs for the comparison test. */
typedef enum {
    LAYOUT_PLAIN,     /* the leaves themselves */
    LAYOUT_HEADS,     /* (b, T, h*hd) leaves split into heads: (b, h, T, hd) views */
    LAYOUT_TRANSPOSED /* (..., hd, T) leaves transposed: hd not unit stride (copied) */
} layout_t;

static tg_tensor *make_input(tg_tape *tp, tg_tensor *x, layout_t lay, int64_t h)
{
    if (lay == LAYOUT_HEADS) return heads(tp, x, h);
    if (lay == LAYOUT_TRANSPOSED) return tg_transpose(tp, x, -2, -1);
    return x;
}

/* Fused and composed agree on the output and on every leaf gradient for a
 * random upstream gradient. */
static void compare_paths_grad(int nd, const int64_t *shape, layout_t lay, int64_t h, bool causal, const char *what,
                               bool grad_as_out);

static void compare_paths(int nd, const int64_t *shape, layout_t lay, int64_t h, bool causal, const char *what)
{
    compare_paths_grad(nd, shape, lay, h, causal, what, false);
}

/* ... with the upstream gradient laid out as the output (as the model's
 * transpose and view hand it back) when grad_as_out, else contiguous */
static void compare_paths_grad(int nd, const int64_t *shape, layout_t lay, int64_t h, bool causal, const char *what,
                               bool grad_as_out)
{
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(1234);
    tg_tensor *x[3], *y[3], *a[3], *b[3];
    for (int i = 0; i < 3; i++) {
        x[i] = leaf(tp, TG_F32, nd, shape, g);
        y[i] = twin(tp, x[i]);
        a[i] = make_input(tp, x[i], lay, h);
        b[i] = make_input(tp, y[i], lay, h);
    }
    tg_tensor *fused = tg_scaled_dot_product_attention(tp, a[0], a[1], a[2], causal, 0.0, NULL);
    tu_assert_ok(fused);
    assert_string_equal(tg_grad_fn_name(fused), "ScaledDotProductAttentionBackward0");
    /* laid out as q: the heads' output transposes back to a contiguous (b, T, h, hd) */
    if (lay == LAYOUT_HEADS) {
        assert_false(tg_is_contiguous(fused));
        for (int d = 0; d < fused->ndim; d++) assert_int_equal(fused->stride[d], a[0]->stride[d]);
        assert_true(tg_is_contiguous(tg_transpose(tp, fused, 1, 2)));
    } else {
        assert_true(tg_is_contiguous(fused));
    }
    tg_tensor *ref = composed(tp, b[0], b[1], b[2], causal, NULL);
    tu_assert_close(fused, ref, 1e-5, 1e-5, what);

    tg_tensor *gout = tg_empty(tp, TG_F32, ref->ndim, ref->shape);
    tu_assert_ok(gout);
    assert_int_equal(tg_uniform_(gout, -1.0, 1.0, g), TG_OK);
    tg_tensor *gf = gout;
    if (grad_as_out) {
        gf = tg_transpose(tp, tg_contiguous(tp, tg_transpose(tp, gout, 1, 2)), 1, 2);
        tu_assert_ok(gf);
        for (int d = 0; d < gf->ndim; d++) assert_int_equal(gf->stride[d], fused->stride[d]);
    }
    assert_int_equal(tg_backward(fused, gf, false), TG_OK);
    assert_int_equal(tg_backward(ref, gout, false), TG_OK);
    const char *names[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s: %s", what, names[i]);
        tu_assert_close(x[i]->grad, y[i]->grad, 1e-5, 1e-5, msg);
    }
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- (1) equal to the composed path at p = 0 --------------------------------------------------- */

static void test_matches_composed(void **state)
{
    (void)state;
    const int64_t s2[2] = {6, 3}, s3[3] = {2, 5, 4}, sbig[3] = {2, 130, 16};
    for (int c = 0; c < 2; c++) {
        bool causal = c == 1;
        compare_paths(2, s2, LAYOUT_PLAIN, 1, causal, causal ? "2-D causal" : "2-D");
        compare_paths(3, s3, LAYOUT_PLAIN, 1, causal, causal ? "3-D causal" : "3-D");
        /* T = 130 spans three query blocks, the last one partial */
        compare_paths(3, sbig, LAYOUT_PLAIN, 1, causal, causal ? "T=130 causal" : "T=130");
    }
}

static void test_matches_composed_heads(void **state)
{
    (void)state;
    const int64_t book[3] = {2, 6, 4}, mid[3] = {2, 70, 24};
    const int64_t tr[4] = {2, 3, 5, 9}; /* (b, h, hd, T) */
    for (int c = 0; c < 2; c++) {
        bool causal = c == 1;
        compare_paths(3, book, LAYOUT_HEADS, 2, causal, causal ? "heads (2,2,6,2) causal" : "heads (2,2,6,2)");
        compare_paths(3, mid, LAYOUT_HEADS, 3, causal, causal ? "heads (2,3,70,8) causal" : "heads (2,3,70,8)");
        compare_paths_grad(3, mid, LAYOUT_HEADS, 3, causal, causal ? "heads, strided grad, causal" : "heads, strided grad",
                           true);
        compare_paths(4, tr, LAYOUT_TRANSPOSED, 1, causal, causal ? "transposed causal" : "transposed");
    }
}

/* Expanded (stride 0) batch dims are read in place; their gradient sums. */
static void test_expanded_batch(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(7);
    int64_t s[3] = {1, 9, 4}, e[3] = {3, 9, 4};
    tg_tensor *x[3], *y[3], *a[3], *b[3];
    for (int i = 0; i < 3; i++) {
        x[i] = leaf(tp, TG_F32, 3, s, g);
        y[i] = twin(tp, x[i]);
        a[i] = tg_expand(tp, x[i], 3, e);
        b[i] = tg_expand(tp, y[i], 3, e);
    }
    tg_tensor *fused = tg_scaled_dot_product_attention(tp, a[0], a[1], a[2], true, 0.0, NULL);
    tg_tensor *ref = composed(tp, b[0], b[1], b[2], true, NULL);
    tu_assert_close(fused, ref, 1e-5, 1e-5, "expanded");
    assert_int_equal(tg_backward(tg_sum(tp, fused), NULL, false), TG_OK);
    assert_int_equal(tg_backward(tg_sum(tp, ref), NULL, false), TG_OK);
    for (int i = 0; i < 3; i++) tu_assert_close(x[i]->grad, y[i]->grad, 1e-5, 1e-5, "expanded grad");
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- (2) gradcheck in float64 -------------------------------------------------------------------------- */

typedef struct {
    bool causal;
    double p;
    int mode; /* 0: q, k, v = inputs 0..2; 1: q = k = v = input 0; 2: q, k, v narrowed from input 0 */
    int64_t h;
} gc_ctx;

static tg_tensor *gc_fn(tg_tape *tp, void *vctx, int n, tg_tensor *const *in)
{
    (void)n;
    const gc_ctx *c = vctx;
    /* the same seed every call, so every call draws the same dropout mask */
    tg_generator *g = tg_generator_new(99);
    tg_tensor *q, *k, *v;
    if (c->mode == 1) {
        q = k = v = in[0];
    } else if (c->mode == 2) {
        int64_t d = in[0]->shape[in[0]->ndim - 1] / 3;
        q = tg_narrow(tp, in[0], -1, 0, d);
        k = tg_narrow(tp, in[0], -1, d, d);
        v = tg_narrow(tp, in[0], -1, 2 * d, d);
    } else {
        q = in[0], k = in[1], v = in[2];
    }
    if (c->h > 1) {
        q = heads(tp, q, c->h);
        k = heads(tp, k, c->h);
        v = heads(tp, v, c->h);
    }
    tg_tensor *out = tg_scaled_dot_product_attention(tp, q, k, v, c->causal, c->p, g);
    tg_generator_free(g);
    return out;
}

static void run_gradcheck(int nd, const int64_t *shape, int nin, gc_ctx ctx, const char *what)
{
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(5);
    tg_tensor *in[3];
    for (int i = 0; i < nin; i++) in[i] = leaf(tp, TG_F64, nd, shape, g);
    tg_gradcheck_result r;
    assert_int_equal(tg_gradcheck_call(gc_fn, &ctx, nin, in, NULL, &r), TG_OK);
    if (!r.passed) fail_msg("%s: %s", what, r.message);
    tg_generator_free(g);
    tg_tape_free(tp);
}

static void test_gradcheck(void **state)
{
    (void)state;
    const int64_t s3[3] = {2, 5, 3}, s4[4] = {1, 2, 4, 3}, h[3] = {2, 4, 6};
    for (int c = 0; c < 2; c++) {
        for (int d = 0; d < 2; d++) {
            gc_ctx ctx = {c == 1, d == 1 ? 0.3 : 0.0, 0, 1};
            run_gradcheck(3, s3, 3, ctx, "3-D");
            run_gradcheck(4, s4, 3, ctx, "4-D");
            gc_ctx hc = ctx;
            hc.h = 2;
            run_gradcheck(3, h, 3, hc, "heads");
        }
    }
}

/* T = 70 crosses a query-block boundary: causal tiles and the partial block. */
static void test_gradcheck_blocks(void **state)
{
    (void)state;
    const int64_t s[2] = {70, 2};
    gc_ctx ctx = {true, 0.3, 0, 1};
    run_gradcheck(2, s, 3, ctx, "T=70 causal dropout");
}

/* q, k, v the same tensor or views of one tensor: the three gradients add up. */
static void test_gradcheck_shared(void **state)
{
    (void)state;
    const int64_t s[3] = {2, 5, 3}, s9[3] = {2, 5, 9};
    for (int c = 0; c < 2; c++) {
        gc_ctx same = {c == 1, 0.0, 1, 1};
        run_gradcheck(3, s, 1, same, "q = k = v");
        same.p = 0.3;
        run_gradcheck(3, s, 1, same, "q = k = v, dropout");
        gc_ctx views = {c == 1, 0.0, 2, 1};
        run_gradcheck(3, s9, 1, views, "narrowed views");
    }
}

/* A second graph's backward adds into leaf gradients that already hold values. */
static void test_accumulates(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(3);
    int64_t s[3] = {2, 8, 4};
    tg_tensor *q = leaf(tp, TG_F32, 3, s, g), *k = leaf(tp, TG_F32, 3, s, g), *v = leaf(tp, TG_F32, 3, s, g);
    tg_tensor *o1 = tg_scaled_dot_product_attention(tp, q, k, v, true, 0.0, NULL);
    assert_int_equal(tg_backward(tg_sum(tp, o1), NULL, false), TG_OK);
    tg_tensor *once[3], *qkv[3] = {q, k, v};
    for (int i = 0; i < 3; i++) {
        once[i] = tg_mul_scalar(tp, qkv[i]->grad, 2.0);
        tu_assert_ok(once[i]);
    }
    tg_tensor *o2 = tg_scaled_dot_product_attention(tp, q, k, v, true, 0.0, NULL);
    assert_int_equal(tg_backward(tg_sum(tp, o2), NULL, false), TG_OK);
    for (int i = 0; i < 3; i++) tu_assert_close(qkv[i]->grad, once[i], 1e-6, 1e-6, "accumulated grad");
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- (3) dropout ------------------------------------------------------------------------------------------ */

/* q = k = 0 makes every weight 1/T; v = I (hd = T) makes out = (P o Z) itself,
 * so out * T is the dropout mask Z (0 or 1/(1-p)) of heads (b, h). */
static tg_tensor *dropout_mask_stream(tg_tape *tp, int64_t b, int64_t h, int64_t T, double p, uint64_t seed,
                                      tg_dropout_stream stream)
{
    int64_t s[4] = {b, h, T, T};
    tg_tensor *zero = tg_zeros(tp, TG_F32, 4, s);
    tg_tensor *eye = tg_expand(tp, tg_eye(tp, TG_F32, T, T), 4, s);
    tg_generator *g = tg_generator_new(seed);
    assert_int_equal(tg_generator_set_dropout_stream(g, stream), TG_OK);
    tg_tensor *out = tg_scaled_dot_product_attention(tp, zero, zero, eye, false, p, g);
    tg_generator_free(g);
    tu_assert_ok(out);
    tg_tensor *z = tg_mul_scalar(tp, out, (double)T);
    tu_assert_ok(z);
    return z;
}

static tg_tensor *dropout_mask(tg_tape *tp, int64_t b, int64_t h, int64_t T, double p, uint64_t seed)
{
    return dropout_mask_stream(tp, b, h, T, p, seed, TG_DROPOUT_COUNTER);
}

static void test_dropout_statistics(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    const double ps[3] = {0.1, 0.3, 0.5};
    for (int pi = 0; pi < 3; pi++) {
        double p = ps[pi], keep = 1.0 / (1.0 - p);
        int64_t b = 2, h = 2, T = 256;
        tg_tensor *z = dropout_mask(tp, b, h, T, p, 42);
        int64_t n = tg_numel(z), zeros = 0, same01 = 0;
        double sum = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = tg_item_at(z, i);
            sum += v;
            if (v == 0) {
                zeros++;
            } else if (fabs(v - keep) > 1e-5 * keep) {
                fail_msg("p=%g: kept weight %.9g * T, want %.9g", p, v, keep);
            }
            /* head 0 against head 1 of batch 0: independent masks */
            if (i < T * T && (v == 0) == (tg_item_at(z, i + T * T) == 0)) same01++;
        }
        double frac = (double)zeros / (double)n;
        /* n = 262144 draws: the fraction's standard deviation is < 0.001 */
        if (fabs(frac - p) > 0.006) fail_msg("p=%g: fraction of zeroed weights %.5f", p, frac);
        /* the expected weight is kept: E[Z] = 1 */
        if (fabs(sum / (double)n - 1.0) > 0.01) fail_msg("p=%g: mean of Z %.5f, want 1", p, sum / (double)n);
        double agree = (double)same01 / (double)(T * T), want = p * p + (1 - p) * (1 - p);
        if (fabs(agree - want) > 0.02) fail_msg("p=%g: heads agree on %.4f of the mask, want %.4f", p, agree, want);
    }
    /* the same seed gives the same mask; another seed another one */
    tg_tensor *z1 = dropout_mask(tp, 1, 1, 32, 0.3, 7), *z2 = dropout_mask(tp, 1, 1, 32, 0.3, 7);
    tg_tensor *z3 = dropout_mask(tp, 1, 1, 32, 0.3, 8);
    tu_assert_close(z1, z2, 0, 0, "same seed");
    int64_t differ = 0;
    for (int64_t i = 0; i < tg_numel(z1); i++) differ += tg_item_at(z1, i) != tg_item_at(z3, i);
    assert_true(differ > 100);
    tg_tape_free(tp);
}

/* p = 0 is the identity on the weights (eval) and draws nothing. */
static void test_dropout_zero_is_eval(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *init = tg_generator_new(5);
    tg_generator *g = tg_generator_new(11), *g2 = tg_generator_new(11);
    int64_t s[3] = {2, 7, 5};
    tg_tensor *q = leaf(tp, TG_F32, 3, s, init), *k = leaf(tp, TG_F32, 3, s, init);
    tg_tensor *v = leaf(tp, TG_F32, 3, s, init);
    tg_tensor *a = tg_scaled_dot_product_attention(tp, q, k, v, true, 0.0, g);
    tg_tensor *ref = composed(tp, q, k, v, true, NULL);
    tu_assert_close(a, ref, 1e-5, 1e-5, "p = 0");
    assert_true(tg_generator_random(g) == tg_generator_random(g2));
    /* p > 0 with the counter stream draws one 64-bit seed per call */
    assert_int_equal(tg_generator_set_dropout_stream(g, TG_DROPOUT_COUNTER), TG_OK);
    assert_int_equal(tg_generator_dropout_stream(g), TG_DROPOUT_COUNTER);
    tu_assert_ok(tg_scaled_dot_product_attention(tp, q, k, v, true, 0.5, g));
    tg_generator_random64(g2);
    assert_true(tg_generator_random(g) == tg_generator_random(g2));
    /* PyTorch's stream: one float64 uniform (two 32-bit draws) per weight of
     * the (2, 7, 7) softmax, the causal zeros included, as dropout(softmax) */
    assert_int_equal(tg_generator_set_dropout_stream(g, TG_DROPOUT_TORCH), TG_OK);
    tu_assert_ok(tg_scaled_dot_product_attention(tp, q, k, v, true, 0.5, g));
    for (int i = 0; i < 2 * 7 * 7; i++) tg_generator_random64(g2);
    assert_true(tg_generator_random(g) == tg_generator_random(g2));
    assert_int_equal(tg_generator_set_dropout_stream(g, (tg_dropout_stream)7), TG_EINVAL);
    tg_clear_error();
    tg_generator_free(init);
    tg_generator_free(g);
    tg_generator_free(g2);
    tg_tape_free(tp);
}

/* With dropout, values and gradients equal the composed path that multiplies
 * the softmax by the same mask Z (recovered from a run with the same seed:
 * the mask depends only on seed, head, row and column). */
static void test_dropout_matches_composed(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t b = 2, h = 3, T = 70, hd = 8;
    double p = 0.2;
    for (int c = 0; c < 4; c++) {
        bool causal = c & 1;
        tg_dropout_stream stream = c < 2 ? TG_DROPOUT_COUNTER : TG_DROPOUT_TORCH;
        tg_tensor *z = dropout_mask_stream(tp, b, h, T, p, 2024, stream);
        tg_generator *g = tg_generator_new(17);
        int64_t s[3] = {b, T, h * hd};
        tg_tensor *x[3], *y[3], *qa[3], *qb[3];
        for (int i = 0; i < 3; i++) {
            x[i] = leaf(tp, TG_F32, 3, s, g);
            y[i] = twin(tp, x[i]);
            qa[i] = heads(tp, x[i], h);
            qb[i] = heads(tp, y[i], h);
        }
        tg_generator *gs = tg_generator_new(2024);
        tg_generator_set_dropout_stream(gs, stream);
        tg_tensor *fused = tg_scaled_dot_product_attention(tp, qa[0], qa[1], qa[2], causal, p, gs);
        tg_generator_free(gs);
        tg_tensor *ref = composed(tp, qb[0], qb[1], qb[2], causal, z);
        tu_assert_close(fused, ref, 1e-5, 1e-5, "dropout output");
        tg_tensor *gout = tg_empty(tp, TG_F32, ref->ndim, ref->shape);
        tu_assert_ok(gout);
        assert_int_equal(tg_uniform_(gout, -1.0, 1.0, g), TG_OK);
        /* the upstream gradient laid out as the output, as the model hands it back */
        tg_tensor *gf = tg_transpose(tp, tg_contiguous(tp, tg_transpose(tp, gout, 1, 2)), 1, 2);
        tu_assert_ok(gf);
        for (int d = 0; d < gf->ndim; d++) assert_int_equal(gf->stride[d], fused->stride[d]);
        assert_int_equal(tg_backward(fused, gf, false), TG_OK);
        assert_int_equal(tg_backward(ref, gout, false), TG_OK);
        for (int i = 0; i < 3; i++) tu_assert_close(x[i]->grad, y[i]->grad, 1e-5, 1e-5, "dropout grad");
        tg_generator_free(g);
    }
    tg_tape_free(tp);
}

/* ---- misc: grad mode, empty inputs ---------------------------------------------------------------------------- */

static void test_no_grad_and_empty(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s[2] = {4, 3};
    tg_tensor *q = leaf(tp, TG_F32, 2, s, NULL);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *o = tg_scaled_dot_product_attention(tp, q, q, q, false, 0.0, NULL);
    tg_set_grad_enabled(prev);
    tu_assert_ok(o);
    assert_null(tg_grad_fn_name(o));
    assert_false(o->requires_grad);

    int64_t e[3] = {2, 0, 3};
    tg_tensor *z = tg_zeros(tp, TG_F32, 3, e);
    assert_int_equal(tg_requires_grad_(z, true), TG_OK);
    tg_tensor *oz = tg_scaled_dot_product_attention(tp, z, z, z, true, 0.1, NULL);
    tu_assert_ok(oz);
    assert_int_equal(tg_numel(oz), 0);
    assert_int_equal(tg_backward(tg_sum(tp, oz), NULL, false), TG_OK);
    tg_tape_free(tp);
}

/* The forward keeps O(T) per row, not the T x T weights: recording a
 * T = 1024 head takes far less tape than one T x T float matrix. */
static void test_no_square_saved(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new(), *leaves = tg_tape_new();
    int64_t T = 1024, s[2] = {T, 16};
    tg_tensor *q = leaf(leaves, TG_F32, 2, s, NULL), *k = leaf(leaves, TG_F32, 2, s, NULL);
    tg_tensor *v = leaf(leaves, TG_F32, 2, s, NULL);
    tg_tensor *o = tg_scaled_dot_product_attention(tp, q, k, v, true, 0.1, NULL);
    tu_assert_ok(o);
    size_t used = tg_tape_used(tp);
    if (used >= (size_t)(T * T) * sizeof(float) / 2)
        fail_msg("forward recorded %zu bytes, a T x T float matrix is %zu", used, (size_t)(T * T) * sizeof(float));
    assert_int_equal(tg_backward(tg_sum(tp, o), NULL, false), TG_OK);
    tg_tape_free(tp);
    tg_tape_free(leaves);
}

/* ---- (4) errors ------------------------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s[3] = {2, 4, 3}, s2[3] = {2, 5, 3}, s1[1] = {3};
    tg_tensor *a = tg_zeros(tp, TG_F32, 3, s), *b = tg_zeros(tp, TG_F32, 3, s2);
    tg_tensor *d = tg_zeros(tp, TG_F64, 3, s), *v1 = tg_zeros(tp, TG_F32, 1, s1);
    tg_tensor *i64 = tg_zeros(tp, TG_I64, 3, s);
    const char *op = "scaled_dot_product_attention";
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, NULL, a, a, false, 0.0, NULL), op, "NULL");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, a, NULL, a, false, 0.0, NULL), op, "NULL");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, a, a, NULL, false, 0.0, NULL), op, "NULL");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, a, b, a, false, 0.0, NULL), op, "(2,4,3)",
                         "(2,5,3)");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, a, a, b, true, 0.0, NULL), op, "(2,5,3)");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, a, d, a, false, 0.0, NULL), op, "float32",
                         "float64");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, i64, i64, i64, false, 0.0, NULL), op, "int64");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, v1, v1, v1, false, 0.0, NULL), op, "(3");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, a, a, a, false, 1.0, NULL), op, "[0, 1)");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, a, a, a, false, -0.1, NULL), op, "[0, 1)");
    tu_assert_null_error(tg_scaled_dot_product_attention(tp, a, a, a, false, NAN, NULL), op, "[0, 1)");
    tg_tape_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_composed),
        cmocka_unit_test(test_matches_composed_heads),
        cmocka_unit_test(test_expanded_batch),
        cmocka_unit_test(test_gradcheck),
        cmocka_unit_test(test_gradcheck_blocks),
        cmocka_unit_test(test_gradcheck_shared),
        cmocka_unit_test(test_accumulates),
        cmocka_unit_test(test_dropout_statistics),
        cmocka_unit_test(test_dropout_zero_is_eval),
        cmocka_unit_test(test_dropout_matches_composed),
        cmocka_unit_test(test_no_grad_and_empty),
        cmocka_unit_test(test_no_square_saved),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
