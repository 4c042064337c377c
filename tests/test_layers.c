/* The layer table (autograd.h, tg_layer; src/autograd/layers.c), walked
 * entry by entry: the exact variant against the composed oracle (bit for bit
 * where the entry says so, outputs and every input's gradient), the fast
 * variant within its tolerance, the bf16 variant within bf16's, the
 * dispatch tg_layer_apply makes for each setting, and every variant
 * gradchecked in float64. A new entry needs one row in `examples` below;
 * test_every_entry_has_a_row fails until it has one. */
#include "testutil.h"

#include <stdlib.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- example inputs -------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int nin;
    int ndim[5];
    int64_t shape[5][4];
    bool mask_last;         /* in[nin - 1] is the causal (T, T) bool mask */
    tg_layer_args args;     /* dropout set per case */
    bool targets_last;      /* in[nin - 1] is int64 class targets below in[1]'s rows, one ignored */
} example;

/* the last input is not differentiable (a mask or targets) */
static bool const_last(const example *e) { return e->mask_last || e->targets_last; }

static const example examples[] = {
    {"attention", 4, {4, 4, 4, 2}, {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, {5, 5}}, true, {.scale = 2.0}, false},
    {"layer_norm", 3, {3, 1, 1}, {{2, 3, 6}, {6}, {6}}, false, {.eps = 1e-5}, false},
    {"gelu", 1, {2}, {{3, 7}}, false, {.dropout = 0}, false},
    {"feed_forward", 5, {3, 2, 1, 2, 1}, {{2, 3, 4}, {8, 4}, {8}, {4, 8}, {4}}, false, {.dropout = 0}, false},
    {"rms_norm", 2, {3, 1}, {{2, 3, 6}, {6}}, false, {.eps = 1e-5}, false},
    {"silu", 1, {2}, {{3, 7}}, false, {.dropout = 0}, false},
    {"rope", 3, {4, 2, 2}, {{2, 3, 5, 4}, {5, 4}, {5, 4}}, false, {.dropout = 0}, false},
    {"swiglu", 4, {3, 2, 2, 2}, {{2, 3, 4}, {6, 4}, {6, 4}, {4, 6}}, false, {.dropout = 0}, false},
    {"geglu", 4, {3, 2, 2, 2}, {{2, 3, 4}, {6, 4}, {6, 4}, {4, 6}}, false, {.dropout = 0}, false},
    /* Gemma 3's attention: a sliding window of 3 over 5 positions, the
     * queries scaled before (the scores not divided) */
    {"attention", 4, {4, 4, 4, 2}, {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, {5, 5}}, true,
     {.scale = 1.0, .no_divide = true, .window = 3}, false},
    /* 5 rows in chunks of 2 (the last one short); more rows than features:
     * W's gradient accumulated chunk by chunk */
    {"linear_cross_entropy", 3, {2, 2, 1}, {{5, 4}, {7, 4}, {5}}, false, {.chunk_rows = 2}, true},
};
enum { NEXAMPLES = (int)(sizeof examples / sizeof examples[0]) };

static const example *example_for(const char *name)
{
    for (int i = 0; i < NEXAMPLES; i++)
        if (!strcmp(examples[i].name, name)) return &examples[i];
    return NULL;
}

/* the example's inputs in dt, float ones requiring grad; same seed, same values */
static void make_inputs(tg_tape *tp, const example *e, tg_dtype dt, uint64_t seed, tg_tensor **in)
{
    tg_generator *g = tg_generator_new(seed);
    assert_non_null(g);
    for (int i = 0; i < e->nin; i++) {
        if (e->mask_last && i == e->nin - 1) {
            int64_t T = e->shape[i][0];
            tg_tensor *m = tg_empty(tp, TG_BOOL, 2, e->shape[i]);
            tu_assert_ok(m);
            uint8_t *p = tg_data_ptr(m);
            for (int64_t r = 0; r < T; r++)
                for (int64_t c = 0; c < T; c++) p[r * T + c] = c > r || (e->args.window > 0 && r - c >= e->args.window);
            in[i] = m;
            continue;
        }
        if (e->targets_last && i == e->nin - 1) {
            int64_t N = e->shape[i][0], V = e->shape[1][0];
            tg_tensor *t = tg_empty(tp, TG_I64, 1, &N);
            tu_assert_ok(t);
            int64_t *p = tg_data_ptr(t);
            for (int64_t r = 0; r < N; r++) p[r] = r == 1 ? TG_IGNORE_INDEX : (int64_t)(tg_generator_random64(g) % (uint64_t)V);
            in[i] = t;
            continue;
        }
        tg_tensor *x = tg_randn(tp, TG_F64, e->ndim[i], e->shape[i], g);
        tu_assert_ok(x);
        in[i] = dt == TG_F64 ? x : tg_to_dtype(tp, x, dt);
        tu_assert_ok(in[i]);
        assert_int_equal(tg_requires_grad_(in[i], true), TG_OK);
    }
    tg_generator_free(g);
}

/* One variant's output and gradients (of sum(y * w), w fixed) as float64
 * copies: out[0] the output, out[1 + i] input i's gradient (NULL if none). */
typedef struct {
    tg_tensor *t[6];
    uint8_t raw[6][4096]; /* the float32 bits, for the exact comparison */
    size_t rawn[6];
} result;

static tg_tape *results_tape; /* the float64 copies of results, freed after each test */

static void run_variant(tg_layer_fn fn, bool use_apply, bool fused, tg_numerics nm, const example *e, tg_dtype dt,
                        double p, tg_dropout_stream stream, result *r)
{
    const tg_layer *layer = tg_layer_find(e->name);
    tg_tape *tp = tg_tape_new();
    tg_tensor *in[5];
    make_inputs(tp, e, dt, 7, in);
    tg_layer_args a = e->args;
    a.dropout = p;
    tg_generator *g = tg_generator_new(99);
    assert_int_equal(tg_generator_set_dropout_stream(g, stream), TG_OK);
    a.gen = g;
    tg_tensor *y = use_apply ? tg_layer_apply(tp, layer, fused, nm, e->nin, in, &a) : fn(tp, e->nin, in, &a);
    tu_assert_ok(y);
    tg_generator *wg = tg_generator_new(5);
    tg_tensor *w = tg_randn(tp, y->dtype, y->ndim, y->shape, wg);
    tu_assert_ok(w);
    tg_tensor *loss = tg_sum(tp, tg_mul(tp, y, w));
    tu_assert_ok(loss);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    tg_tensor *outs[6] = {y};
    for (int i = 0; i < e->nin; i++) outs[1 + i] = (const_last(e) && i == e->nin - 1) ? NULL : in[i]->grad;
    for (int i = 0; i < 6; i++) {
        r->t[i] = NULL;
        r->rawn[i] = 0;
        if (i > e->nin || !outs[i]) continue;
        tg_tensor *c = tg_contiguous(tp, outs[i]);
        tu_assert_ok(c);
        r->rawn[i] = (size_t)tg_numel(c) * tg_dtype_size(c->dtype);
        assert_true(r->rawn[i] <= sizeof r->raw[i]);
        memcpy(r->raw[i], tg_data_ptr(c), r->rawn[i]);
        r->t[i] = tg_to_dtype(results_tape, c, TG_F64); /* outlives tp */
        tu_assert_ok(r->t[i]);
    }
    tg_generator_free(g);
    tg_generator_free(wg);
    tg_tape_free(tp);
}

/* max |a - b| / (1 + |b|) over every tensor of the two results */
static double max_rel(const result *a, const result *b, int n)
{
    double worst = 0;
    for (int i = 0; i <= n; i++) {
        assert_true((a->t[i] == NULL) == (b->t[i] == NULL));
        if (!a->t[i]) continue;
        const double *x = tg_data_ptr(a->t[i]), *y = tg_data_ptr(b->t[i]);
        for (int64_t k = 0; k < tg_numel(a->t[i]); k++) {
            double d = fabs(x[k] - y[k]) / (1.0 + fabs(y[k]));
            if (!(d <= worst)) worst = d; /* NaN propagates */
        }
    }
    return worst;
}

static bool same_bits(const result *a, const result *b, int n)
{
    for (int i = 0; i <= n; i++)
        if (a->rawn[i] != b->rawn[i] || memcmp(a->raw[i], b->raw[i], a->rawn[i])) return false;
    return true;
}

/* ---- gradcheck of one variant in float64 --------------------------------------------------------- */

typedef struct {
    tg_layer_fn fn;
    const example *e;
    tg_tensor *mask;
} gc_ctx;

static tg_tensor *gc_fn(tg_tape *tp, void *vctx, int n, tg_tensor *const *inputs)
{
    const gc_ctx *c = vctx;
    tg_tensor *in[5];
    for (int i = 0; i < n; i++) in[i] = inputs[i];
    if (c->mask) in[n] = c->mask;
    tg_layer_args a = c->e->args; /* no dropout: a function of its inputs */
    return c->fn(tp, c->e->nin, in, &a);
}

static void gradcheck_variant(const char *what, tg_layer_fn fn, const example *e)
{
    tg_tape *tp = tg_tape_new();
    tg_tensor *in[5];
    make_inputs(tp, e, TG_F64, 3, in);
    gc_ctx c = {fn, e, const_last(e) ? in[e->nin - 1] : NULL};
    tg_gradcheck_result res;
    int nf = const_last(e) ? e->nin - 1 : e->nin;
    assert_int_equal(tg_gradcheck_call(gc_fn, &c, nf, in, NULL, &res), TG_OK);
    if (!res.passed) fail_msg("%s %s: gradcheck: %s", e->name, what, res.message);
    tg_tape_free(tp);
}

/* ---- the walk ---------------------------------------------------------------------------------- */

static void test_every_entry_has_a_row(void **state)
{
    (void)state;
    assert_true(tg_layer_count() >= 6);
    for (int i = 0; i < tg_layer_count(); i++) {
        const tg_layer *l = tg_layer_get(i);
        tu_assert_ok(l);
        const example *e = example_for(l->name);
        if (!e) fail_msg("layer '%s' has no row in tests/test_layers.c", l->name);
        assert_int_equal(e->nin, l->nin);
        assert_non_null(l->composed);
        assert_ptr_equal(tg_layer_find(l->name), l);
    }
}

static void check_entry(const tg_layer *l, const example *e)
{
    tg_layer_fn exact = l->exact ? l->exact : l->composed;
    double ps[2] = {0.0, e->mask_last ? 0.3 : 0.0};
    for (int k = 0; k < (ps[1] > 0 ? 2 : 1); k++) {
        for (int s = 0; s < 2; s++) {
            tg_dropout_stream stream = s ? TG_DROPOUT_COUNTER : TG_DROPOUT_TORCH;
            if (s && ps[k] == 0) continue;
            result rc, re, rf, rb, ra;
            run_variant(l->composed, false, false, TG_NUMERICS_EXACT, e, TG_F32, ps[k], stream, &rc);
            run_variant(exact, false, false, TG_NUMERICS_EXACT, e, TG_F32, ps[k], stream, &re);
            /* exact: the composed graph's bits, or (PyTorch's own formulas) its tolerance */
            if (l->exact_bits) {
                if (!same_bits(&re, &rc, e->nin))
                    fail_msg("%s (p=%g, stream %d): exact differs from composed by %g", l->name, ps[k], s,
                             max_rel(&re, &rc, e->nin));
            } else if (max_rel(&re, &rc, e->nin) > l->fast_tol) {
                fail_msg("%s: exact %g from composed, tolerance %g", l->name, max_rel(&re, &rc, e->nin), l->fast_tol);
            }
            /* the dispatch: unfused = composed, fused EXACT = exact, in bits */
            run_variant(NULL, true, false, TG_NUMERICS_FAST, e, TG_F32, ps[k], stream, &ra);
            assert_true(same_bits(&ra, &rc, e->nin));
            run_variant(NULL, true, true, TG_NUMERICS_EXACT, e, TG_F32, ps[k], stream, &ra);
            assert_true(same_bits(&ra, &re, e->nin));
            /* fast: within its tolerance (the counter stream's masks are the
             * fast kernel's own, so only PyTorch's stream compares) */
            if (!s) {
                run_variant(NULL, true, true, TG_NUMERICS_FAST, e, TG_F32, ps[k], stream, &rf);
                double d = max_rel(&rf, &rc, e->nin);
                if (d > (l->fast ? l->fast_tol : 0) && !(l->fast == NULL && !l->exact_bits && d <= l->fast_tol))
                    fail_msg("%s (p=%g): fast %g from composed, tolerance %g", l->name, ps[k], d, l->fast_tol);
                /* bf16: products on bf16-rounded operands (8 bits of
                 * mantissa): within a few bf16 roundings of float32 */
                run_variant(NULL, true, true, TG_NUMERICS_BF16, e, TG_F32, ps[k], stream, &rb);
                double db = max_rel(&rb, &rc, e->nin);
                if (db > 0.05) fail_msg("%s (p=%g): bf16 %g from composed", l->name, ps[k], db);
            }
        }
    }
    gradcheck_variant("composed", l->composed, e);
    if (l->exact) gradcheck_variant("exact", l->exact, e);
    if (l->fast) gradcheck_variant("fast", l->fast, e);
    if (l->bf16) gradcheck_variant("bf16", l->bf16, e);
}

static void test_walk_every_entry(void **state)
{
    (void)state;
    for (int i = 0; i < tg_layer_count(); i++)
        for (int k = 0; k < NEXAMPLES; k++) /* every row of the entry */
            if (!strcmp(examples[k].name, tg_layer_get(i)->name)) {
                results_tape = tg_tape_new();
                check_entry(tg_layer_get(i), &examples[k]);
                tg_tape_free(results_tape);
            }
}


/* Under BF16 a product's operands are rounded to bf16 and accumulated in
 * float32: a Linear's output equals float64 products of the rounded
 * operands to float32 rounding, and differs from the float32 product. A
 * float64 module's products stay float64. */
static void test_bf16_products(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(1);
    tg_module *lin = tg_linear_new(tp, 64, 8, true);
    tu_assert_ok(lin);
    tg_tensor *x = tg_randn(tp, TG_F32, 2, (int64_t[]){5, 64}, NULL);
    tu_assert_ok(x);
    tg_tensor *y32 = tg_module_forward(tp, lin, x);
    assert_int_equal(tg_module_set_numerics(lin, TG_NUMERICS_BF16), TG_OK);
    assert_int_equal(tg_module_numerics(lin), TG_NUMERICS_BF16);
    tg_tensor *y = tg_module_forward(tp, lin, x);
    tu_assert_ok(y32);
    tu_assert_ok(y);
    const float *xs = tg_data_ptr(x), *w = tg_data_ptr(tg_module_get_parameter(lin, "weight")),
                *b = tg_data_ptr(tg_module_get_parameter(lin, "bias")), *yb = tg_data_ptr(y), *yf = tg_data_ptr(y32);
    double worst = 0, apart = 0;
    for (int r = 0; r < 5; r++)
        for (int o = 0; o < 8; o++) {
            double acc = b[o];
            for (int k = 0; k < 64; k++) acc += tu_bf16(xs[r * 64 + k]) * tu_bf16(w[o * 64 + k]);
            worst = fmax(worst, fabs(yb[r * 8 + o] - acc) / (1 + fabs(acc)));
            apart = fmax(apart, fabs(yf[r * 8 + o] - acc));
        }
    if (worst > 1e-5) fail_msg("bf16 product %g from the float64 product of rounded operands", worst);
    assert_true(apart > 1e-3); /* the float32 product is another number */
    /* float64: unchanged by the policy */
    assert_int_equal(tg_module_to_dtype(tp, lin, TG_F64), TG_OK);
    tg_tensor *x64 = tg_to_dtype(tp, x, TG_F64);
    tg_tensor *ya = tg_module_forward(tp, lin, x64);
    assert_int_equal(tg_module_set_numerics(lin, TG_NUMERICS_EXACT), TG_OK);
    tg_tensor *yb64 = tg_module_forward(tp, lin, x64);
    tu_assert_ok(ya);
    tu_assert_ok(yb64);
    assert_memory_equal(tg_data_ptr(ya), tg_data_ptr(yb64), sizeof(double) * 40);
    tu_assert_status_error(tg_module_set_numerics(lin, (tg_numerics)9), "not a tg_numerics value");
    tu_assert_status_error(tg_module_set_numerics(NULL, TG_NUMERICS_FAST), "NULL module");
    tg_tape_free(tp);
}

/* The modules over the new entries: RMSNorm (weight ones, eps) and SiLU,
 * composed unfused and under EXACT, one node fused under FAST. */
static void test_rms_norm_silu_modules(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_module *rn = tg_rms_norm_new(tp, 6, 1e-5), *si = tg_silu_new(tp);
    tu_assert_ok(rn);
    tu_assert_ok(si);
    char buf[128];
    tg_module_repr(rn, buf, sizeof buf);
    assert_string_equal(buf, "RMSNorm((6,), eps=1e-05, elementwise_affine=True)");
    tg_module_repr(si, buf, sizeof buf);
    assert_string_equal(buf, "SiLU()");
    tg_named_list sd;
    assert_int_equal(tg_module_state_dict(tp, rn, &sd), TG_OK);
    assert_int_equal(sd.n, 1);
    assert_string_equal(sd.names[0], "weight");
    tg_tensor *x = tg_randn(tp, TG_F32, 3, (int64_t[]){2, 3, 6}, NULL);
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    tg_tensor *ys[2][3]; /* [module][unfused, fused exact, fused fast] */
    tg_module *ms[2] = {rn, si};
    for (int k = 0; k < 2; k++) {
        tg_module_set_fused(ms[k], false);
        ys[k][0] = tg_module_forward(tp, ms[k], x);
        tg_module_set_fused(ms[k], true);
        ys[k][1] = tg_module_forward(tp, ms[k], x);
        tg_module_set_numerics(ms[k], TG_NUMERICS_FAST);
        ys[k][2] = tg_module_forward(tp, ms[k], x);
        for (int v = 0; v < 3; v++) tu_assert_ok(ys[k][v]);
        tu_assert_close(ys[k][2], ys[k][0], 1e-5, 1e-6, "fast module");
    }
    assert_string_equal(tg_grad_fn_name(ys[0][0]), "MulBackward0");
    assert_string_equal(tg_grad_fn_name(ys[0][1]), "MulBackward0"); /* EXACT: the composed ops */
    assert_string_equal(tg_grad_fn_name(ys[0][2]), "RmsNormBackward0");
    assert_string_equal(tg_grad_fn_name(ys[1][0]), "DivBackward0");
    assert_string_equal(tg_grad_fn_name(ys[1][1]), "SiluBackward0");
    assert_memory_equal(tg_data_ptr(ys[0][0]), tg_data_ptr(ys[0][1]), sizeof(float) * 36);
    tu_assert_null_error(tg_rms_norm_new(tp, 0, 1e-5), "RMSNorm", "dim");
    tu_assert_null_error(tg_rms_norm_new(tp, 4, -1), "RMSNorm", "eps");
    tu_assert_null_error(tg_module_forward(tp, rn, tg_zeros(tp, TG_F32, 2, (int64_t[]){2, 5})), "RMSNorm",
                         "last dim must be 6");
    tu_assert_null_error(tg_rms_norm(tp, x, tg_zeros(tp, TG_F32, 1, (int64_t[]){5}), 1e-5), "rms_norm", "(6)");
    tg_clear_error();
    tu_assert_null_error(tg_silu(tp, NULL), "silu");
    tg_tape_free(tp);
}

/* One training step of an attention module (dropout 0.2, PyTorch's stream)
 * fused or not under a policy: the output and the input's gradient. */
static void attention_step(tg_tape *tp, bool mha, bool fused, tg_numerics nm, tg_dropout_stream stream,
                           tg_tensor **y, tg_tensor **dx)
{
    tg_manual_seed(5);
    tg_module *m = mha ? tg_mha_new(tp, 6, 8, 7, 0.2, 2, false) : tg_causal_attention_new(tp, 6, 8, 7, 0.2, false);
    tu_assert_ok(m);
    tg_generator *g = tg_generator_new(21);
    assert_int_equal(tg_generator_set_dropout_stream(g, stream), TG_OK);
    tg_module_set_generator(m, g);
    tg_module_set_fused(m, fused);
    assert_int_equal(tg_module_set_numerics(m, nm), TG_OK);
    tg_tensor *x = tg_randn(tp, TG_F32, 3, (int64_t[]){3, 7, 6}, g);
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    *y = tg_module_forward(tp, m, x);
    tu_assert_ok(*y);
    tg_tensor *w = tg_randn(tp, TG_F32, 3, (*y)->shape, g);
    assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, *y, w)), NULL, false), TG_OK);
    *dx = x->grad;
    tu_assert_ok(*dx);
    tg_module_set_generator(m, NULL);
    tg_generator_free(g);
}

/* CausalAttention's fused path is the exact node too: under EXACT both
 * modules' fused steps equal their composed steps bit for bit, with dropout
 * in either stream; under FAST (the flash-style kernel) within float32
 * rounding with PyTorch's stream (the same masks). */
static void test_attention_modules(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    for (int mha = 0; mha < 2; mha++)
        for (int s = 0; s < 2; s++) {
            tg_dropout_stream st = s ? TG_DROPOUT_COUNTER : TG_DROPOUT_TORCH;
            tg_tensor *yc, *dc, *yf, *df;
            attention_step(tp, mha, false, TG_NUMERICS_EXACT, st, &yc, &dc);
            attention_step(tp, mha, true, TG_NUMERICS_EXACT, st, &yf, &df);
            assert_string_equal(tg_grad_fn_name(yf), mha ? "ViewBackward0" : "MaskedAttentionBackward0");
            tg_tensor *a = tg_contiguous(tp, yf), *b = tg_contiguous(tp, yc);
            assert_memory_equal(tg_data_ptr(a), tg_data_ptr(b), sizeof(float) * (size_t)tg_numel(a));
            assert_memory_equal(tg_data_ptr(df), tg_data_ptr(dc), sizeof(float) * (size_t)tg_numel(dc));
            if (s) continue;
            attention_step(tp, mha, true, TG_NUMERICS_FAST, st, &yf, &df);
            tu_assert_close(yf, yc, 1e-5, 1e-6, "FAST attention output");
            tu_assert_close(df, dc, 1e-5, 1e-6, "FAST attention input gradient");
        }
    tg_tape_free(tp);
}

/* ---- the output head with its loss: every mode of the fused node ---------------------------------- */

typedef struct {
    tg_numerics nm;
    tg_reduction r;
    int64_t chunk;
    tg_tensor *target;
} head_case;

/* loss * 2.5 (an incoming gradient other than 1) of x (N, d), W, b */
static tg_tensor *head_loss(tg_tape *tp, void *vctx, int n, tg_tensor *const *in)
{
    (void)n;
    const head_case *c = vctx;
    tg_numerics prev = tg_tape_numerics(tp);
    tg_tape_set_numerics(tp, c->nm);
    tg_tensor *l = c->chunk < 0 ? tg_cross_entropy(tp, tg_linear(tp, in[0], in[1], in[2]), c->target, c->r)
                                : tg_linear_cross_entropy(tp, in[0], in[1], in[2], c->target, c->r, TG_IGNORE_INDEX);
    tg_tape_set_numerics(tp, prev);
    return tg_mul_scalar(tp, l, 2.5);
}

/* the loss and the gradients of x, W and b as float64 */
static void head_run(const head_case *c, tg_dtype dt, int64_t N, double *out, size_t *nout)
{
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(11);
    int64_t d = 6, V = 9, sx[2] = {N, d}, sw[2] = {V, d};
    tg_tensor *in[3] = {tg_randn(tp, TG_F64, 2, sx, g), tg_randn(tp, TG_F64, 2, sw, g), tg_randn(tp, TG_F64, 1, &V, g)};
    for (int i = 0; i < 3; i++) in[i] = tg_to_dtype(tp, in[i], dt); /* the same values in either dtype */
    head_case cc = *c;
    cc.target = tg_empty(tp, TG_I64, 1, &N);
    tu_assert_ok(cc.target);
    int64_t *t = tg_data_ptr(cc.target);
    for (int64_t i = 0; i < N; i++) t[i] = i == 1 ? TG_IGNORE_INDEX : (int64_t)(tg_generator_random64(g) % (uint64_t)V);
    for (int i = 0; i < 3; i++) assert_int_equal(tg_requires_grad_(in[i], true), TG_OK);
    tg_tensor *l = head_loss(tp, &cc, 3, in);
    tu_assert_ok(l);
    assert_int_equal(tg_backward(l, NULL, false), TG_OK);
    size_t k = 0;
    out[k++] = tg_item(l);
    for (int i = 0; i < 3; i++)
        for (int64_t j = 0; j < tg_numel(in[i]); j++) out[k++] = tg_item_at(tg_contiguous(tp, in[i]->grad), j);
    *nout = k;
    if (dt == TG_F64 && c->chunk >= 0) { /* the fused node in float64, by finite differences */
        tg_gradcheck_result res;
        assert_int_equal(tg_gradcheck_call(head_loss, &cc, 3, in, NULL, &res), TG_OK);
        if (!res.passed) fail_msg("linear_cross_entropy gradcheck (N %lld): %s", (long long)N, res.message);
    }
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* The fused head under FAST and BF16 against the two calls: fewer rows
 * than features (the logits' gradient kept for W's), more (W's gradient
 * accumulated per chunk), a bias, an ignored row, sum and mean, an
 * incoming gradient of 2.5; gradcheck in float64 of both modes. */
static void test_linear_cross_entropy_modes(void **state)
{
    (void)state;
    static const int64_t rows[2] = {4, 40};
    for (int ri = 0; ri < 2; ri++)
        for (int red = 0; red < 2; red++) {
            tg_reduction r = red ? TG_REDUCE_SUM : TG_REDUCE_MEAN;
            double ref[512], got[512];
            size_t nref, ngot;
            head_case composed = {TG_NUMERICS_EXACT, r, -1, NULL};
            head_run(&composed, TG_F32, rows[ri], ref, &nref);
            head_case fused[3] = {{TG_NUMERICS_FAST, r, 0, NULL}, {TG_NUMERICS_BF16, r, 0, NULL},
                                  {TG_NUMERICS_FAST, r, 0, NULL}};
            for (int f = 0; f < 3; f++) {
                head_run(&fused[f], f == 2 ? TG_F64 : TG_F32, rows[ri], got, &ngot);
                assert_int_equal(ngot, nref);
                double worst = 0;
                for (size_t i = 0; i < nref; i++) {
                    double e = fabs(got[i] - ref[i]) / (1.0 + fabs(ref[i]));
                    if (!(e <= worst)) worst = e;
                }
                double tol = f == 1 ? 0.05 : f == 2 ? 1e-6 : 2e-6;
                if (!(worst <= tol))
                    fail_msg("linear_cross_entropy rows %lld %s %s: %g from the two calls (tolerance %g)",
                             (long long)rows[ri], red ? "sum" : "mean", f == 1 ? "BF16" : f == 2 ? "FAST f64" : "FAST",
                             worst, tol);
            }
        }
}

/* ---- the decoder's loss: the head in chunks against the two calls ------------------------------- */

typedef struct {
    double loss;
    float *g; /* every parameter's gradient, in named_parameters order */
    size_t n;
} lm_run;

/* One tg_gpt_lm_loss and its gradients for a small Qwen3 (24 rows, one
 * ignored; fewer rows than features: the logits' gradient kept) with or
 * without LoRA on every Linear (B drawn, so the adapters' gradients are not
 * zero), its modules fused (the head in chunks under FAST and BF16) or not
 * (the two calls). */
static void lm_run_once(bool lora, bool fused, bool recompute, tg_numerics nm, lm_run *r)
{
    tg_decoder_config c = {.vocab_size = 300, .context_length = 16, .emb_dim = 32, .n_heads = 4, .n_layers = 1,
                           .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 48, .head_dim = 8, .n_kv_groups = 2,
                           .qk_norm = true, .rope_base = 10000.0};
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_manual_seed(5);
    tg_module *m = tg_decoder_new(mt, &c);
    tu_assert_ok(m);
    if (lora) {
        assert_int_equal(tg_lora_replace_linear(mt, m, 4, 8.0), TG_OK);
        assert_int_equal(tg_normal_(tg_module_get_parameter(m, "out_head.lora.B"), 0.0, 0.5, NULL), TG_OK);
    }
    assert_int_equal(tg_module_set_fused(m, fused), TG_OK);
    assert_int_equal(tg_gpt_set_recompute(m, recompute), TG_OK);
    assert_int_equal(tg_tape_set_numerics(tp, nm), TG_OK);
    int64_t shape[2] = {2, 12}, ids[24], tg[24];
    for (int i = 0; i < 24; i++) ids[i] = (i * 37 + 11) % 300, tg[i] = i == 5 ? TG_IGNORE_INDEX : (i * 53 + 7) % 300;
    tg_tensor *x = tg_from_data(tp, TG_I64, 2, shape, ids), *t = tg_from_data(tp, TG_I64, 2, shape, tg);
    tg_tensor *loss = tg_gpt_lm_loss(tp, m, x, t, TG_IGNORE_INDEX);
    tu_assert_ok(loss);
    r->loss = tg_item(loss);
    assert_int_equal(tg_backward(tg_mul_scalar(tp, loss, 0.5), NULL, false), TG_OK);
    tg_named_list ps;
    assert_int_equal(tg_module_named_parameters(mt, m, &ps), TG_OK);
    r->n = 0;
    for (int i = 0; i < ps.n; i++) r->n += (size_t)tg_numel(ps.tensors[i]);
    r->g = calloc(r->n, sizeof *r->g);
    assert_non_null(r->g);
    float *dst = r->g;
    for (int i = 0; i < ps.n; i++) {
        if (ps.tensors[i]->grad) assert_int_equal(tg_copy_to_f32(ps.tensors[i]->grad, dst), TG_OK);
        dst += tg_numel(ps.tensors[i]);
    }
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* tg_gpt_lm_loss under FAST and BF16: the head in chunks (a plain Linear,
 * and a LoRA-wrapped one: the node adds (alpha / rank) (x A) B) within 2e-5
 * (BF16: 1e-2) of the unfused model's two calls, loss and every gradient (an
 * incoming 0.5); with --recompute's replay the same bits as without (under
 * BF16 the kept logits' gradient is held in bf16 without, and the replay
 * makes it again in float32: the same bits). */
static void test_lm_loss_heads(void **state)
{
    (void)state;
    for (int k = 0; k < 4; k++) {
        bool lora = k & 1;
        tg_numerics nm = k < 2 ? TG_NUMERICS_FAST : TG_NUMERICS_BF16;
        lm_run comp, chunk, re;
        lm_run_once(lora, false, false, nm, &comp);
        lm_run_once(lora, true, false, nm, &chunk);
        lm_run_once(lora, true, true, nm, &re);
        assert_int_equal(comp.n, chunk.n);
        double worst = fabs(comp.loss - chunk.loss);
        for (size_t i = 0; i < comp.n; i++) {
            double e = fabs((double)comp.g[i] - chunk.g[i]) / (1.0 + fabs(comp.g[i]));
            if (!(e <= worst)) worst = e;
        }
        double tol = nm == TG_NUMERICS_BF16 ? 1e-2 : 2e-5;
        if (!(worst <= tol))
            fail_msg("lm loss%s %s: the head in chunks %g from the two calls", lora ? " (LoRA)" : "",
                     tg_numerics_name(nm), worst);
        assert_true(memcmp(&chunk.loss, &re.loss, sizeof re.loss) == 0);
        assert_true(memcmp(chunk.g, re.g, chunk.n * sizeof *re.g) == 0);
        free(comp.g), free(chunk.g), free(re.g);
    }
}

static void test_linear_cross_entropy_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tape_set_numerics(tp, TG_NUMERICS_FAST);
    int64_t sx[2] = {3, 4}, sw[2] = {5, 4}, sw2[2] = {5, 3}, n3 = 3, n2 = 2, v4 = 4;
    tg_tensor *x = tg_zeros(tp, TG_F32, 2, sx), *w = tg_zeros(tp, TG_F32, 2, sw), *w2 = tg_zeros(tp, TG_F32, 2, sw2);
    tg_tensor *t = tg_zeros(tp, TG_I64, 1, &n3), *t2 = tg_zeros(tp, TG_I64, 1, &n2), *b4 = tg_zeros(tp, TG_F32, 1, &v4);
    tg_tensor *bad = tg_full(tp, TG_I64, 1, &n3, 5.0), *wd = tg_zeros(tp, TG_F64, 2, sw);
    tu_assert_null_error(tg_linear_cross_entropy(tp, x, w2, NULL, t, TG_REDUCE_MEAN, TG_IGNORE_INDEX),
                         "linear_cross_entropy", "(3,4)", "(5,3)");
    tu_assert_null_error(tg_linear_cross_entropy(tp, x, w, b4, t, TG_REDUCE_MEAN, TG_IGNORE_INDEX), "bias (4)",
                         "5 classes");
    tu_assert_null_error(tg_linear_cross_entropy(tp, x, w, NULL, t2, TG_REDUCE_MEAN, TG_IGNORE_INDEX), "target",
                         "shape (3)");
    tu_assert_null_error(tg_linear_cross_entropy(tp, x, w, NULL, bad, TG_REDUCE_MEAN, TG_IGNORE_INDEX),
                         "target 5 at position 0 is out of bounds for 5 classes");
    tu_assert_null_error(tg_linear_cross_entropy(tp, x, wd, NULL, t, TG_REDUCE_MEAN, TG_IGNORE_INDEX), "float64");
    tg_clear_error();
    tu_assert_null_error(tg_linear_cross_entropy(tp, NULL, w, NULL, t, TG_REDUCE_MEAN, TG_IGNORE_INDEX),
                         "linear_cross_entropy: NULL input");
    tu_assert_null_error(tg_linear_cross_entropy(NULL, x, w, NULL, t, TG_REDUCE_MEAN, TG_IGNORE_INDEX), "NULL tape");
    tg_tape_free(tp);
}

static void test_errors(void **state)
{
    (void)state;
    tu_assert_null_error(tg_layer_find("nope"), "no layer named 'nope'");
    tu_assert_null_error(tg_layer_get(-1), "outside");
    tu_assert_null_error(tg_layer_get(tg_layer_count()), "outside");
    tg_tape *tp = tg_tape_new();
    tg_layer_args a = {0};
    const tg_layer *g = tg_layer_find("gelu");
    tu_assert_null_error(tg_layer_apply(tp, g, true, TG_NUMERICS_EXACT, 2, NULL, &a), "gelu", "expected 1 inputs");
    tg_tensor *x = tg_zeros(tp, TG_F32, 1, (int64_t[]){3});
    tu_assert_null_error(tg_layer_apply(tp, g, true, (tg_numerics)7, 1, &x, &a), "not a tg_numerics value");
    tu_assert_null_error(tg_layer_apply(tp, NULL, true, TG_NUMERICS_EXACT, 1, &x, &a), "NULL layer");
    tg_numerics nm;
    tu_assert_status_error(tg_numerics_parse("fp16", &nm), "'fp16' is not one of exact, fast, bf16");
    assert_int_equal(tg_numerics_parse("bf16", &nm), TG_OK);
    assert_int_equal(nm, TG_NUMERICS_BF16);
    assert_string_equal(tg_numerics_name(TG_NUMERICS_FAST), "fast");
    assert_string_equal(tg_numerics_name((tg_numerics)5), "?");
    tu_assert_status_error(tg_numerics_parse(NULL, &nm), "(null)");
    /* the hardware query agrees with the kernel's view of the CPU */
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[4096];
        bool bf16 = false, avx512f = false;
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "flags", 5)) {
                bf16 = strstr(line, " avx512_bf16") || strstr(line, " amx_bf16");
                avx512f = strstr(line, " avx512f") != NULL;
                break;
            }
        fclose(f);
        /* native: oneDNN (in this build, TG_TEST_HAVE_DNNL) sees the bf16
         * instructions, unless its ISA was capped for the process */
        if (getenv("DNNL_MAX_CPU_ISA") || getenv("ONEDNN_MAX_CPU_ISA"))
            assert_true(!tg_numerics_bf16_native() || (bf16 && avx512f));
        else
            assert_int_equal(tg_numerics_bf16_native(), TG_TEST_HAVE_DNNL && bf16 && avx512f);
    }
    tg_tape_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_entry_has_a_row),
        cmocka_unit_test(test_walk_every_entry),
        cmocka_unit_test(test_bf16_products),
        cmocka_unit_test(test_rms_norm_silu_modules),
        cmocka_unit_test(test_attention_modules),
        cmocka_unit_test(test_linear_cross_entropy_modes),
        cmocka_unit_test(test_linear_cross_entropy_errors),
        cmocka_unit_test(test_lm_loss_heads),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
