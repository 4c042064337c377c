/* The book's attention computations, step by step, against PyTorch 1.13:
 * tests/ref/autograd.json (tools/reference/autograd.py).
 *
 * Each chain names its leaves (the book input x, W_query/W_key/W_value drawn
 * with torch.manual_seed(123) + torch.rand, a causal mask, ...) and a list of
 * steps ("scores = matmul(queries, keysT)"). The test replays every step with
 * the matching tg_ call and checks the step's grad_fn name (MmBackward0,
 * TransposeBackward0, MaskedFillBackward0, DivBackward0, SoftmaxBackward0, ...)
 * and values, then runs tg_backward on the root (sum of the output) and checks
 * every leaf's gradient. One cmocka test per chain and dtype; a failing test
 * lists every failing step.
 *
 * Tolerances (|got - want| <= atol + rtol * |want|): float32 values rtol 1e-5
 * atol 1e-6, gradients rtol 1e-4 atol 1e-5; float64 values 1e-12/1e-12,
 * gradients 1e-10/1e-10.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MAX_NAMED 64
#define MAX_CHAINS 32

static json_t *g_ref;

typedef struct {
    const char *name[MAX_NAMED];
    tg_tensor *t[MAX_NAMED];
    int n;
} env;

static tg_tensor *lookup(env *e, const char *name) {
    for (int i = e->n - 1; i >= 0; i--)
        if (strcmp(e->name[i], name) == 0) return e->t[i];
    return NULL;
}

static void bind(env *e, const char *name, tg_tensor *t) {
    if (e->n >= MAX_NAMED) fail_msg("autograd.json: too many named tensors");
    e->name[e->n] = name;
    e->t[e->n] = t;
    e->n++;
}

static double jnum(const json_t *v) {
    if (json_is_integer(v)) return (double)json_integer_value(v);
    if (json_is_real(v)) return json_real_value(v);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "inf") == 0) return INFINITY;
        if (strcmp(s, "-inf") == 0) return -INFINITY;
        if (strcmp(s, "nan") == 0) return NAN;
    }
    fail_msg("autograd.json: expected a number");
    return 0.0;
}

static double arg_d(const json_t *args, const char *key) {
    const json_t *v = json_object_get(args, key);
    if (!v) fail_msg("autograd.json: missing argument %s", key);
    return jnum(v);
}

/* Replays one step; returns its output (NULL on a library error). */
static tg_tensor *run_step(tg_tape *tp, const char *op, tg_tensor **in, int n, const json_t *args) {
    if (strcmp(op, "matmul") == 0) return tg_matmul(tp, in[0], in[1]);
    if (strcmp(op, "t") == 0) return tg_t(tp, in[0]);
    if (strcmp(op, "transpose") == 0)
        return tg_transpose(tp, in[0], (int)arg_d(args, "d0"), (int)arg_d(args, "d1"));
    if (strcmp(op, "masked_fill") == 0) return tg_masked_fill(tp, in[0], in[1], arg_d(args, "value"));
    if (strcmp(op, "div_scalar") == 0) return tg_div_scalar(tp, in[0], arg_d(args, "scalar"));
    if (strcmp(op, "mul_scalar") == 0) return tg_mul_scalar(tp, in[0], arg_d(args, "scalar"));
    if (strcmp(op, "add") == 0) return tg_add(tp, in[0], in[1]);
    if (strcmp(op, "softmax") == 0) return tg_softmax(tp, in[0], (int)arg_d(args, "dim"));
    if (strcmp(op, "sum") == 0) return tg_sum(tp, in[0]);
    if (strcmp(op, "stack") == 0) return tg_stack(tp, n, in, (int)arg_d(args, "dim"));
    if (strcmp(op, "cat") == 0) return tg_cat(tp, n, in, (int)arg_d(args, "dim"));
    if (strcmp(op, "contiguous") == 0) return tg_contiguous(tp, in[0]);
    if (strcmp(op, "narrow") == 0)
        return tg_narrow(tp, in[0], (int)arg_d(args, "dim"), (int64_t)arg_d(args, "start"),
                         (int64_t)arg_d(args, "length"));
    if (strcmp(op, "linear") == 0) return tg_linear(tp, in[0], in[1], n > 2 ? in[2] : NULL);
    if (strcmp(op, "view") == 0) {
        const json_t *js = json_object_get(args, "shape");
        int64_t shape[TG_MAX_DIMS];
        int nd = (int)json_array_size(js);
        if (nd > TG_MAX_DIMS) fail_msg("autograd.json: shape too long");
        for (int i = 0; i < nd; i++) shape[i] = (int64_t)jnum(json_array_get(js, (size_t)i));
        return tg_view(tp, in[0], nd, shape);
    }
    fail_msg("autograd.json: step op %s has no adapter in test_autograd_ref.c", op);
    return NULL;
}

/* Non-fatal comparison: prints the worst element and returns false on mismatch. */
static bool check_close(const char *chain, const char *what, const tg_tensor *got,
                        const tg_tensor *want, double rtol, double atol) {
    char sg[96], sw[96];
    if (!got) {
        print_error("  %s: %s: got NULL\n", chain, what);
        return false;
    }
    if (!tg_same_shape(got, want)) {
        print_error("  %s: %s: shape %s, want %s\n", chain, what, tg_shape_str(got, sg, sizeof sg),
                    tg_shape_str(want, sw, sizeof sw));
        return false;
    }
    int64_t n = tg_numel(want), bad = 0, worst = -1;
    double worst_excess = -1.0;
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
    print_error("  %s: %s: %lld/%lld elements off (rtol %g atol %g); worst flat index %lld: got "
                "%.9g want %.9g (|diff| %.3g)\n",
                chain, what, (long long)bad, (long long)n, rtol, atol, (long long)worst, g, w,
                fabs(g - w));
    return false;
}

static void test_chain(void **state) {
    const json_t *ch = (const json_t *)*state;
    const char *cname = json_string_value(json_object_get(ch, "name"));
    const char *dts = json_string_value(json_object_get(ch, "dtype"));
    bool f64 = dts && strcmp(dts, "float64") == 0;
    double vrtol = f64 ? 1e-12 : 1e-5, vatol = f64 ? 1e-12 : 1e-6;
    double grtol = f64 ? 1e-10 : 1e-4, gatol = f64 ? 1e-10 : 1e-5;
    char what[256];
    int failures = 0;
    bool broken = false; /* a step could not be computed: no backward */
    env e = {.n = 0};

    tg_tape *tp = tg_tape_new();
    assert_non_null(tp);

    /* leaves */
    const char *key;
    json_t *leaf;
    json_object_foreach((json_t *)json_object_get(ch, "leaves"), key, leaf) {
        tg_tensor *t = tu_tensor_from_json(tp, json_object_get(leaf, "tensor"), TG_DTYPE_COUNT);
        if (json_is_true(json_object_get(leaf, "requires_grad")) &&
            tg_requires_grad_(t, true) != TG_OK)
            fail_msg("%s: tg_requires_grad_(%s) failed: %s", cname, key, tg_last_error());
        bind(&e, key, t);
    }

    /* steps */
    const json_t *steps = json_object_get(ch, "steps");
    for (size_t s = 0; s < json_array_size(steps); s++) {
        const json_t *st = json_array_get(steps, s);
        const char *sname = json_string_value(json_object_get(st, "name"));
        const char *op = json_string_value(json_object_get(st, "op"));
        const json_t *jin = json_object_get(st, "inputs");
        tg_tensor *in[8];
        int n = (int)json_array_size(jin);
        if (n > 8) fail_msg("too many step inputs");
        bool missing = false;
        for (int i = 0; i < n; i++) {
            in[i] = lookup(&e, json_string_value(json_array_get(jin, (size_t)i)));
            missing = missing || !in[i];
        }
        if (missing) {
            print_error("  %s/%s: step %zu %s = %s(...): an input failed earlier; stopping\n", cname,
                        dts, s, sname, op);
            failures++;
            broken = true;
            break;
        }
        tg_clear_error();
        tg_tensor *out = run_step(tp, op, in, n, json_object_get(st, "args"));
        if (!out) {
            print_error("  %s/%s: step %zu %s = %s(...) returned NULL: %s\n", cname, dts, s, sname,
                        op, tg_last_error());
            failures++;
            broken = true;
            break;
        }
        bind(&e, sname, out);
        const json_t *jfn = json_object_get(st, "grad_fn");
        const char *want_fn = json_is_string(jfn) ? json_string_value(jfn) : NULL;
        const char *got_fn = tg_grad_fn_name(out);
        if ((want_fn == NULL) != (got_fn == NULL) || (want_fn && strcmp(want_fn, got_fn) != 0)) {
            print_error("  %s/%s: step %zu %s = %s(...): grad_fn %s, want %s\n", cname, dts, s,
                        sname, op, got_fn ? got_fn : "NULL", want_fn ? want_fn : "NULL");
            failures++;
        }
        snprintf(what, sizeof what, "%s/step %zu %s = %s(...) values", dts, s, sname, op);
        tg_tensor *want = tu_tensor_from_json(tp, json_object_get(st, "output"), TG_DTYPE_COUNT);
        if (!check_close(cname, what, out, want, vrtol, vatol)) failures++;
    }

    /* backward from the root, then the leaves' gradients */
    tg_tensor *root = lookup(&e, json_string_value(json_object_get(ch, "root")));
    if (root && !broken) {
        if (tg_backward(root, NULL, false) != TG_OK) {
            print_error("  %s/%s: tg_backward failed: %s\n", cname, dts, tg_last_error());
            failures++;
        } else {
            json_t *jg;
            json_object_foreach((json_t *)json_object_get(ch, "grads"), key, jg) {
                tg_tensor *t = lookup(&e, key);
                tg_tensor *want = tu_tensor_from_json(tp, jg, TG_DTYPE_COUNT);
                snprintf(what, sizeof what, "%s/grad of %s", dts, key);
                if (!t || !t->grad) {
                    print_error("  %s: %s: no gradient\n", cname, what);
                    failures++;
                } else if (!check_close(cname, what, t->grad, want, grtol, gatol)) {
                    failures++;
                }
            }
        }
    } else {
        print_error("  %s/%s: root not computed: gradients not checked\n", cname, dts);
        failures++;
    }
    tg_tape_free(tp);
    if (failures) fail_msg("%s (%s): %d check(s) failed", cname, dts, failures);
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
    static char names[MAX_CHAINS][96];
    struct CMUnitTest tests[MAX_CHAINS];
    memset(tests, 0, sizeof tests);
    g_ref = tu_load_ref("autograd.json");
    const json_t *chains = json_object_get(g_ref, "chains");
    size_t n = json_array_size(chains);
    if (n == 0 || n > MAX_CHAINS) {
        fprintf(stderr, "autograd.json: %zu chains (expected 1..%d)\n", n, MAX_CHAINS);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *ch = json_array_get(chains, i);
        snprintf(names[i], sizeof names[i], "%s_%s", json_string_value(json_object_get(ch, "name")),
                 json_string_value(json_object_get(ch, "dtype")));
        tests[i].name = names[i];
        tests[i].test_func = test_chain;
        tests[i].initial_state = (void *)ch;
    }
    return _cmocka_run_group_tests("autograd_ref", tests, n, NULL, teardown);
}
