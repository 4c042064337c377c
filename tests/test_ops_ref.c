/* Every op against PyTorch 1.13: tests/ref/ops.json (tools/reference/ops.py).
 *
 * For each case: build the base leaves from the file, apply the case's view
 * (transpose / narrow / expand) to get the op's operands, call the tg_ op
 * through the dispatch table below, and check
 *   - the output values (and max_dim's indices, exactly),
 *   - tg_grad_fn_name(output) against PyTorch's grad_fn name,
 *   - after tg_backward(sum(output * weight)), every base leaf's ->grad against
 *     PyTorch's gradient (so gradients must flow back through the views).
 * One cmocka test per op name; a failing test lists every failing case with
 * its index in ops.json ("case 123"), its dtype, args and operand layout.
 *
 * Tolerances (|got - want| <= atol + rtol * |want|):
 *   float64: values rtol 1e-12 atol 1e-12; gradients rtol 1e-10 atol 1e-10.
 *   float32: values rtol 1e-5 atol 1e-6, except the ops that sum over an
 *            inner dimension (matmul, mm, bmm, linear, softmax, log_softmax,
 *            sum, mean, sum_dims, mean_dims, mse_loss, cross_entropy, up to
 *            48-long inner dims in the file), whose summation order differs
 *            from PyTorch's: rtol 1e-4 atol 1e-5. Gradients rtol 1e-4 atol 1e-5.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef tg_tensor *(*op_fn)(tg_tape *tp, const json_t *args, tg_tensor **in, int n, tg_dtype dt,
                            tg_tensor **indices);

/* ---- argument helpers ------------------------------------------------------ */

static double jnum(const json_t *v) {
    if (json_is_integer(v)) return (double)json_integer_value(v);
    if (json_is_real(v)) return json_real_value(v);
    if (json_is_boolean(v)) return json_is_true(v) ? 1.0 : 0.0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "inf") == 0) return INFINITY;
        if (strcmp(s, "-inf") == 0) return -INFINITY;
        if (strcmp(s, "nan") == 0) return NAN;
    }
    fail_msg("ops.json: expected a number");
    return 0.0;
}

static const json_t *arg(const json_t *args, const char *key) {
    const json_t *v = json_object_get(args, key);
    if (!v) fail_msg("ops.json: case without argument \"%s\"", key);
    return v;
}
static double arg_d(const json_t *args, const char *key) { return jnum(arg(args, key)); }
static int arg_i(const json_t *args, const char *key) { return (int)jnum(arg(args, key)); }
static int64_t arg_i64(const json_t *args, const char *key) { return (int64_t)jnum(arg(args, key)); }
static bool arg_b(const json_t *args, const char *key) { return json_is_true(arg(args, key)); }
/* An integer list into out[TG_MAX_DIMS]; returns its length. */
static int arg_list64(const json_t *args, const char *key, int64_t *out) {
    const json_t *a = arg(args, key);
    int n = (int)json_array_size(a);
    if (n > TG_MAX_DIMS) fail_msg("ops.json: list \"%s\" too long", key);
    for (int i = 0; i < n; i++) out[i] = (int64_t)jnum(json_array_get(a, (size_t)i));
    return n;
}
static int arg_list(const json_t *args, const char *key, int *out) {
    int64_t tmp[TG_MAX_DIMS];
    int n = arg_list64(args, key, tmp);
    for (int i = 0; i < n; i++) out[i] = (int)tmp[i];
    return n;
}
static tg_cmp arg_cmp(const json_t *args) {
    static const char *names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    const char *s = json_string_value(arg(args, "cmp"));
    for (int i = 0; s && i < 6; i++)
        if (strcmp(s, names[i]) == 0) return (tg_cmp)i;
    fail_msg("ops.json: bad cmp");
    return TG_CMP_EQ;
}
static tg_reduction arg_red(const json_t *args) {
    const char *s = json_string_value(arg(args, "reduction"));
    if (s && strcmp(s, "mean") == 0) return TG_REDUCE_MEAN;
    if (s && strcmp(s, "sum") == 0) return TG_REDUCE_SUM;
    if (s && strcmp(s, "none") == 0) return TG_REDUCE_NONE;
    fail_msg("ops.json: bad reduction");
    return TG_REDUCE_MEAN;
}

/* ---- adapters: one per op name ------------------------------------------------ */

#define UNUSED_ADAPTER_ARGS (void)args, (void)n, (void)dt, (void)indices
#define BIN(name)                                                                             \
    static tg_tensor *op_##name(tg_tape *tp, const json_t *args, tg_tensor **in, int n,      \
                                tg_dtype dt, tg_tensor **indices) {                          \
        UNUSED_ADAPTER_ARGS;                                                                  \
        return tg_##name(tp, in[0], in[1]);                                                   \
    }
#define UNARY(name)                                                                           \
    static tg_tensor *op_##name(tg_tape *tp, const json_t *args, tg_tensor **in, int n,      \
                                tg_dtype dt, tg_tensor **indices) {                          \
        UNUSED_ADAPTER_ARGS;                                                                  \
        return tg_##name(tp, in[0]);                                                          \
    }
#define SCALAR(name)                                                                          \
    static tg_tensor *op_##name(tg_tape *tp, const json_t *args, tg_tensor **in, int n,      \
                                tg_dtype dt, tg_tensor **indices) {                          \
        UNUSED_ADAPTER_ARGS;                                                                  \
        return tg_##name(tp, in[0], arg_d(args, "scalar"));                                   \
    }
#define ADAPTER(name)                                                                         \
    static tg_tensor *op_##name(tg_tape *tp, const json_t *args, tg_tensor **in, int n,      \
                                tg_dtype dt, tg_tensor **indices)

BIN(add)
BIN(sub)
BIN(mul)
BIN(div)
BIN(matmul)
BIN(mm)
BIN(bmm)
SCALAR(add_scalar)
SCALAR(sub_scalar)
SCALAR(rsub_scalar)
SCALAR(mul_scalar)
SCALAR(div_scalar)
SCALAR(pow_scalar)
UNARY(neg)
UNARY(exp)
UNARY(log)
UNARY(sqrt)
UNARY(tanh)
UNARY(relu)
UNARY(gelu)
UNARY(sum)
UNARY(mean)
UNARY(max)
UNARY(t)
UNARY(squeeze_all)
UNARY(contiguous)
UNARY(clone)

ADAPTER(compare) {
    UNUSED_ADAPTER_ARGS;
    return tg_compare(tp, in[0], in[1], arg_cmp(args));
}
ADAPTER(compare_scalar) {
    UNUSED_ADAPTER_ARGS;
    return tg_compare_scalar(tp, in[0], arg_d(args, "scalar"), arg_cmp(args));
}
ADAPTER(where) {
    UNUSED_ADAPTER_ARGS;
    return tg_where(tp, in[0], in[1], in[2]);
}
ADAPTER(masked_fill) {
    UNUSED_ADAPTER_ARGS;
    return tg_masked_fill(tp, in[0], in[1], arg_d(args, "value"));
}
ADAPTER(sum_dims) {
    UNUSED_ADAPTER_ARGS;
    int dims[TG_MAX_DIMS];
    int nd = arg_list(args, "dims", dims);
    return tg_sum_dims(tp, in[0], nd, dims, arg_b(args, "keepdim"));
}
ADAPTER(mean_dims) {
    UNUSED_ADAPTER_ARGS;
    int dims[TG_MAX_DIMS];
    int nd = arg_list(args, "dims", dims);
    return tg_mean_dims(tp, in[0], nd, dims, arg_b(args, "keepdim"));
}
ADAPTER(max_dim) {
    UNUSED_ADAPTER_ARGS;
    return tg_max_dim(tp, in[0], arg_i(args, "dim"), arg_b(args, "keepdim"), indices);
}
ADAPTER(softmax) {
    UNUSED_ADAPTER_ARGS;
    return tg_softmax(tp, in[0], arg_i(args, "dim"));
}
ADAPTER(log_softmax) {
    UNUSED_ADAPTER_ARGS;
    return tg_log_softmax(tp, in[0], arg_i(args, "dim"));
}
ADAPTER(linear) {
    UNUSED_ADAPTER_ARGS;
    return tg_linear(tp, in[0], in[1], n > 2 ? in[2] : NULL);
}
ADAPTER(view) {
    UNUSED_ADAPTER_ARGS;
    int64_t shape[TG_MAX_DIMS];
    int nd = arg_list64(args, "shape", shape);
    return tg_view(tp, in[0], nd, shape);
}
ADAPTER(reshape) {
    UNUSED_ADAPTER_ARGS;
    int64_t shape[TG_MAX_DIMS];
    int nd = arg_list64(args, "shape", shape);
    return tg_reshape(tp, in[0], nd, shape);
}
ADAPTER(expand) {
    UNUSED_ADAPTER_ARGS;
    int64_t shape[TG_MAX_DIMS];
    int nd = arg_list64(args, "shape", shape);
    return tg_expand(tp, in[0], nd, shape);
}
ADAPTER(transpose) {
    UNUSED_ADAPTER_ARGS;
    return tg_transpose(tp, in[0], arg_i(args, "d0"), arg_i(args, "d1"));
}
ADAPTER(permute) {
    UNUSED_ADAPTER_ARGS;
    int perm[TG_MAX_DIMS];
    arg_list(args, "perm", perm);
    return tg_permute(tp, in[0], perm);
}
ADAPTER(narrow) {
    UNUSED_ADAPTER_ARGS;
    return tg_narrow(tp, in[0], arg_i(args, "dim"), arg_i64(args, "start"), arg_i64(args, "length"));
}
ADAPTER(select) {
    UNUSED_ADAPTER_ARGS;
    return tg_select(tp, in[0], arg_i(args, "dim"), arg_i64(args, "index"));
}
ADAPTER(unsqueeze) {
    UNUSED_ADAPTER_ARGS;
    return tg_unsqueeze(tp, in[0], arg_i(args, "dim"));
}
ADAPTER(squeeze) {
    UNUSED_ADAPTER_ARGS;
    return tg_squeeze(tp, in[0], arg_i(args, "dim"));
}
ADAPTER(cat) {
    UNUSED_ADAPTER_ARGS;
    return tg_cat(tp, n, in, arg_i(args, "dim"));
}
ADAPTER(stack) {
    UNUSED_ADAPTER_ARGS;
    return tg_stack(tp, n, in, arg_i(args, "dim"));
}
ADAPTER(mse_loss) {
    UNUSED_ADAPTER_ARGS;
    return tg_mse_loss(tp, in[0], in[1], arg_red(args));
}
ADAPTER(cross_entropy) {
    UNUSED_ADAPTER_ARGS;
    return tg_cross_entropy(tp, in[0], in[1], arg_red(args));
}
ADAPTER(triu) {
    UNUSED_ADAPTER_ARGS;
    return tg_triu(tp, in[0], arg_i64(args, "diagonal"));
}
ADAPTER(tril) {
    UNUSED_ADAPTER_ARGS;
    return tg_tril(tp, in[0], arg_i64(args, "diagonal"));
}
ADAPTER(arange) {
    UNUSED_ADAPTER_ARGS;
    (void)in;
    return tg_arange(tp, dt, arg_d(args, "start"), arg_d(args, "end"), arg_d(args, "step"));
}
ADAPTER(eye) {
    UNUSED_ADAPTER_ARGS;
    (void)in;
    return tg_eye(tp, dt, arg_i64(args, "n"), arg_i64(args, "m"));
}

/* loose: float32 values compared with rtol 1e-4 / atol 1e-5 (see the top). */
typedef struct {
    const char *name;
    op_fn fn;
    bool loose;
} op_entry;

#define OP(name, loose) {#name, op_##name, loose}
static const op_entry OPS[] = {
    OP(add, false),         OP(sub, false),         OP(mul, false),
    OP(div, false),         OP(add_scalar, false),  OP(sub_scalar, false),
    OP(rsub_scalar, false), OP(mul_scalar, false),  OP(div_scalar, false),
    OP(pow_scalar, false),  OP(neg, false),         OP(exp, false),
    OP(log, false),         OP(sqrt, false),        OP(tanh, false),
    OP(relu, false),        OP(gelu, false),        OP(compare, false),
    OP(compare_scalar, false), OP(where, false),    OP(masked_fill, false),
    OP(sum, true),          OP(mean, true),         OP(sum_dims, true),
    OP(mean_dims, true),    OP(max, false),         OP(max_dim, false),
    OP(softmax, true),      OP(log_softmax, true),  OP(matmul, true),
    OP(mm, true),           OP(bmm, true),          OP(linear, true),
    OP(view, false),        OP(reshape, false),     OP(transpose, false),
    OP(t, false),           OP(permute, false),     OP(narrow, false),
    OP(select, false),      OP(unsqueeze, false),   OP(squeeze, false),
    OP(squeeze_all, false), OP(expand, false),      OP(contiguous, false),
    OP(clone, false),       OP(cat, false),         OP(stack, false),
    OP(mse_loss, true),     OP(cross_entropy, true), OP(triu, false),
    OP(tril, false),        OP(arange, false),      OP(eye, false),
};
#define N_OPS ((int)(sizeof OPS / sizeof OPS[0]))

static json_t *g_ref;   /* the parsed ops.json */
static json_t *g_cases; /* its "cases" array */

/* ---- non-fatal comparison ------------------------------------------------------ */

/* true if close; otherwise writes a one-line description of the worst element. */
static bool close_enough(const tg_tensor *got, const tg_tensor *want, double rtol, double atol,
                         char *msg, size_t len) {
    char sg[96], sw[96];
    if (!got) {
        snprintf(msg, len, "got NULL");
        return false;
    }
    if (!tg_same_shape(got, want)) {
        snprintf(msg, len, "shape %s, want %s", tg_shape_str(got, sg, sizeof sg),
                 tg_shape_str(want, sw, sizeof sw));
        return false;
    }
    if (got->dtype != want->dtype) {
        snprintf(msg, len, "dtype %s, want %s", tg_dtype_name(got->dtype),
                 tg_dtype_name(want->dtype));
        return false;
    }
    int64_t n = tg_numel(want), bad = 0, worst = -1;
    double worst_excess = -1.0, max_abs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = tg_item_at(got, i), w = tg_item_at(want, i), err;
        bool ok;
        if (isnan(w) || isnan(g)) {
            ok = isnan(w) && isnan(g);
            err = ok ? 0.0 : INFINITY;
        } else if (isinf(w) || isinf(g)) {
            ok = g == w;
            err = ok ? 0.0 : INFINITY;
        } else {
            err = fabs(g - w);
            ok = err <= atol + rtol * fabs(w);
        }
        if (err > max_abs) max_abs = err;
        if (!ok) {
            double excess = isinf(err) ? INFINITY : err - (atol + rtol * fabs(w));
            if (worst < 0 || excess > worst_excess) {
                worst = i;
                worst_excess = excess;
            }
            bad++;
        }
    }
    if (!bad) return true;
    double g = tg_item_at(got, worst), w = tg_item_at(want, worst);
    snprintf(msg, len,
             "%lld/%lld elements off (rtol %g atol %g); worst flat index %lld: got %.9g want "
             "%.9g (|diff| %.3g); max |diff| %.3g",
             (long long)bad, (long long)n, rtol, atol, (long long)worst, g, w, fabs(g - w),
             max_abs);
    return false;
}

/* ---- one case --------------------------------------------------------------------- */

static tg_tensor *apply_view(tg_tape *tp, tg_tensor *base, const json_t *view) {
    if (!view || json_is_null(view)) return base;
    const char *op = json_string_value(json_object_get(view, "op"));
    if (!op) fail_msg("ops.json: view without op");
    if (strcmp(op, "transpose") == 0)
        return tg_transpose(tp, base, arg_i(view, "d0"), arg_i(view, "d1"));
    if (strcmp(op, "narrow") == 0)
        return tg_narrow(tp, base, arg_i(view, "dim"), arg_i64(view, "start"),
                         arg_i64(view, "length"));
    if (strcmp(op, "expand") == 0) {
        int64_t shape[TG_MAX_DIMS];
        int nd = arg_list64(view, "shape", shape);
        return tg_expand(tp, base, nd, shape);
    }
    fail_msg("ops.json: unknown view op %s", op);
    return NULL;
}

/* Describes the case's operands: "args {..}; inputs (2,3)^T (4,)". */
static void describe(const json_t *c, char *buf, size_t len) {
    char *args = json_dumps(json_object_get(c, "args"), JSON_COMPACT | JSON_SORT_KEYS);
    size_t k = (size_t)snprintf(buf, len, "args %s; inputs", args ? args : "?");
    free(args);
    const json_t *ins = json_object_get(c, "inputs");
    for (size_t i = 0; i < json_array_size(ins) && k < len; i++) {
        const json_t *in = json_array_get(ins, i);
        const json_t *shape = json_object_get(json_object_get(in, "tensor"), "shape");
        k += (size_t)snprintf(buf + k, len - k, " (");
        for (size_t d = 0; d < json_array_size(shape) && k < len; d++)
            k += (size_t)snprintf(buf + k, len - k, d ? ",%lld" : "%lld",
                                  (long long)json_integer_value(json_array_get(shape, d)));
        if (k < len) k += (size_t)snprintf(buf + k, len - k, ")");
        const json_t *view = json_object_get(in, "view");
        if (view && !json_is_null(view) && k < len) {
            char *v = json_dumps(view, JSON_COMPACT);
            k += (size_t)snprintf(buf + k, len - k, "+%s", v ? v : "?");
            free(v);
        }
        if (json_is_true(json_object_get(in, "requires_grad")) && k < len)
            k += (size_t)snprintf(buf + k, len - k, "[rg]");
    }
}

#define MAX_INPUTS 8

/* Runs case idx; returns true if it passed, else prints why. */
static bool run_case(const op_entry *op, size_t idx, const json_t *c) {
    char msg[512], desc[512], det[400];
    const char *dts = json_string_value(json_object_get(c, "dtype"));
    bool f64 = dts && strcmp(dts, "float64") == 0;
    tg_dtype dt = f64 ? TG_F64 : TG_F32;
    double vrtol = f64 ? 1e-12 : (op->loose ? 1e-4 : 1e-5);
    double vatol = f64 ? 1e-12 : (op->loose ? 1e-5 : 1e-6);
    double grtol = f64 ? 1e-10 : 1e-4;
    double gatol = f64 ? 1e-10 : 1e-5;
    bool ok = true;
    describe(c, desc, sizeof desc);
#define CASE_FAIL(...)                                                                       \
    do {                                                                                     \
        snprintf(msg, sizeof msg, __VA_ARGS__);                                              \
        print_error("  %s case %zu (%s; %s): %s\n", op->name, idx, dts ? dts : "?", desc, msg); \
        ok = false;                                                                          \
    } while (0)

    tg_tape *tp = tg_tape_new();
    assert_non_null(tp);
    tg_clear_error();

    const json_t *jins = json_object_get(c, "inputs");
    int n = (int)json_array_size(jins);
    if (n > MAX_INPUTS) fail_msg("too many inputs");
    tg_tensor *base[MAX_INPUTS] = {0}, *in[MAX_INPUTS] = {0};
    bool rg[MAX_INPUTS] = {0};
    for (int i = 0; i < n; i++) {
        const json_t *ji = json_array_get(jins, (size_t)i);
        base[i] = tu_tensor_from_json(tp, json_object_get(ji, "tensor"), TG_DTYPE_COUNT);
        rg[i] = json_is_true(json_object_get(ji, "requires_grad"));
        if (rg[i] && tg_requires_grad_(base[i], true) != TG_OK) {
            CASE_FAIL("tg_requires_grad_ on input %d failed: %s", i, tg_last_error());
            goto done;
        }
        in[i] = apply_view(tp, base[i], json_object_get(ji, "view"));
        if (!in[i]) {
            CASE_FAIL("applying the view to input %d failed: %s", i, tg_last_error());
            goto done;
        }
    }

    tg_tensor *indices = NULL;
    const json_t *jidx = json_object_get(c, "indices");
    tg_tensor *out = op->fn(tp, json_object_get(c, "args"), in, n, dt, jidx ? &indices : NULL);
    if (!out) {
        CASE_FAIL("returned NULL: %s", tg_last_error());
        goto done;
    }
    tg_tensor *want = tu_tensor_from_json(tp, json_object_get(c, "output"), TG_DTYPE_COUNT);
    if (!close_enough(out, want, vrtol, vatol, det, sizeof det)) {
        CASE_FAIL("output: %s", det);
    }
    if (jidx) {
        tg_tensor *wi = tu_tensor_from_json(tp, jidx, TG_DTYPE_COUNT);
        if (!close_enough(indices, wi, 0.0, 0.0, det, sizeof det)) {
            CASE_FAIL("indices: %s", det);
        }
    }
    const json_t *jfn = json_object_get(c, "grad_fn");
    const char *want_fn = json_is_string(jfn) ? json_string_value(jfn) : NULL;
    const char *got_fn = tg_grad_fn_name(out);
    if ((want_fn == NULL) != (got_fn == NULL) || (want_fn && strcmp(want_fn, got_fn) != 0))
        CASE_FAIL("grad_fn %s, want %s", got_fn ? got_fn : "NULL (leaf)",
                  want_fn ? want_fn : "NULL (leaf)");

    const json_t *jw = json_object_get(c, "weight");
    if (jw && !json_is_null(jw)) {
        tg_tensor *w = tu_tensor_from_json(tp, jw, TG_DTYPE_COUNT);
        tg_tensor *loss = tg_sum(tp, tg_mul(tp, out, w));
        if (!loss) {
            CASE_FAIL("sum(output * weight) failed: %s", tg_last_error());
            goto done;
        }
        if (tg_backward(loss, NULL, false) != TG_OK) {
            CASE_FAIL("tg_backward failed: %s", tg_last_error());
            goto done;
        }
        const json_t *jgrads = json_object_get(c, "grads");
        for (int i = 0; i < n; i++) {
            const json_t *jg = json_array_get(jgrads, (size_t)i);
            if (!jg || json_is_null(jg)) continue;
            tg_tensor *wg = tu_tensor_from_json(tp, jg, TG_DTYPE_COUNT);
            if (!base[i]->grad) {
                CASE_FAIL("input %d: no gradient accumulated", i);
                continue;
            }
            if (!close_enough(base[i]->grad, wg, grtol, gatol, det, sizeof det)) {
                CASE_FAIL("grad of input %d: %s", i, det);
            }
        }
    }
done:
    tg_tape_free(tp);
    return ok;
#undef CASE_FAIL
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_op(void **state) {
    const op_entry *op = (const op_entry *)*state;
    size_t ncases = 0, nfail = 0;
    for (size_t i = 0; i < json_array_size(g_cases); i++) {
        const json_t *c = json_array_get(g_cases, i);
        const char *name = json_string_value(json_object_get(c, "op"));
        if (!name || strcmp(name, op->name) != 0) continue;
        ncases++;
        if (!run_case(op, i, c)) nfail++;
    }
    if (ncases == 0) fail_msg("no cases for op %s in ops.json", op->name);
    if (nfail) fail_msg("%s: %zu of %zu cases failed (case numbers index ops.json \"cases\")",
                        op->name, nfail, ncases);
}

/* Every op named in ops.json has an adapter here. */
static void test_all_ops_known(void **state) {
    (void)state;
    size_t unknown = 0;
    for (size_t i = 0; i < json_array_size(g_cases); i++) {
        const char *name = json_string_value(json_object_get(json_array_get(g_cases, i), "op"));
        bool found = false;
        for (int k = 0; name && k < N_OPS; k++) found = found || strcmp(OPS[k].name, name) == 0;
        if (!found) {
            print_error("case %zu: op %s has no adapter in test_ops_ref.c\n", i,
                        name ? name : "(none)");
            unknown++;
        }
    }
    assert_int_equal(unknown, 0);
}

static int setup(void **state) {
    (void)state;
    g_ref = tu_load_ref("ops.json");
    g_cases = json_object_get(g_ref, "cases");
    return json_is_array(g_cases) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    json_decref(g_ref);
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    struct CMUnitTest tests[N_OPS + 1];
    memset(tests, 0, sizeof tests);
    tests[0].name = "all_ops_known";
    tests[0].test_func = test_all_ops_known;
    for (int i = 0; i < N_OPS; i++) {
        tests[i + 1].name = OPS[i].name;
        tests[i + 1].test_func = test_op;
        tests[i + 1].initial_state = (void *)&OPS[i];
    }
    return _cmocka_run_group_tests("ops_ref", tests, (size_t)(N_OPS + 1), setup, teardown);
}
