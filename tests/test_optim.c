/* Optimizers, gradient clipping and the learning-rate schedule
 * (src/optim/, include/tapegrad/optim.h) against PyTorch 1.13.
 *
 * (a) adam/<case>: every "adam" case of tests/ref/pretrain.json
 *     (tools/reference/pretrain.py): Adam / AdamW (amsgrad, weight decay,
 *     float64) step by step on the case's parameters and gradients, and the
 *     final state through tg_optimizer_state_dict.
 * (b) optimizer state files: save, load into a fresh optimizer, continue
 *     bit-identically; the learning rate travels with the state; bad states
 *     (another optimizer's, mis-shaped, out-of-range index, truncated or
 *     missing file, ...) are refused and leave the optimizer unchanged.
 * (c) options, names, parameter lists (tied tensors updated once, parameters
 *     without a gradient skipped), SGD through the generic API and its
 *     momentum state.
 * (d) clip/<case>: clip_grad_norm_ against the "clip_grad_norm" cases, its
 *     errors, and the module and optimizer forms.
 * (e) lr/<case>: the book's warm-up + cosine schedule against the
 *     "lr_schedule" cases, its errors and its ends.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* Adam in float32: PyTorch's single-tensor path, element by element, bit for bit. */
#define ADAM_RTOL_F32 0.0
#define ADAM_ATOL_F32 0.0
#define ADAM_RTOL_F64 1e-15
#define ADAM_ATOL_F64 1e-18
/* clip_grad_norm_: PyTorch reduces in float32, tapegrad in double. */
#define CLIP_RTOL 1e-5
#define CLIP_ATOL 1e-7
/* The schedule: the same double formula as Python's. */
#define LR_RTOL 1e-15

static json_t *g_ref;
static char g_tmpdir[64];

/* Largest relative differences seen, printed at the end of the run. */
static double g_max_rel_adam_f32, g_max_rel_adam_f64, g_max_rel_clip, g_max_rel_lr;

/* ---- helpers ---------------------------------------------------------------------------------- */

static const json_t *jget(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!v) fail_msg("reference: missing key \"%s\"", key);
    return v;
}

static double jnum(const json_t *o, const char *key)
{
    const json_t *v = jget(o, key);
    if (json_is_string(v) && strcmp(json_string_value(v), "inf") == 0) return INFINITY;
    return json_is_real(v) ? json_real_value(v) : (double)json_integer_value(v);
}

static int64_t jint(const json_t *o, const char *key) { return (int64_t)json_integer_value(jget(o, key)); }

static const char *jstr(const json_t *o, const char *key)
{
    const json_t *v = jget(o, key);
    if (!json_is_string(v)) fail_msg("reference: \"%s\" is not a string", key);
    return json_string_value(v);
}

static const json_t *find_case(const char *section, const char *name)
{
    const json_t *cases = jget(jget(g_ref, section), "cases"), *c;
    size_t i;
    json_array_foreach(cases, i, c) if (strcmp(jstr(c, "name"), name) == 0) return c;
    fail_msg("pretrain.json: no %s case \"%s\"", section, name);
    return NULL;
}

static void tmp_path(char *buf, size_t n, const char *name)
{
    if (!g_tmpdir[0]) {
        strcpy(g_tmpdir, "/tmp/tapegrad_test_optim_XXXXXX");
        if (!mkdtemp(g_tmpdir)) fail_msg("mkdtemp failed");
    }
    snprintf(buf, n, "%s/%s", g_tmpdir, name);
}

/* max |got - want| / |want| over the nonzero elements of want */
static double max_rel(const tg_tensor *got, const tg_tensor *want)
{
    double m = 0.0;
    for (int64_t i = 0; i < tg_numel(want); i++) {
        double g = tg_item_at(got, i), w = tg_item_at(want, i);
        if (w != 0.0 && isfinite(w) && fabs(g - w) / fabs(w) > m) m = fabs(g - w) / fabs(w);
    }
    return m;
}

static tg_dtype dtype_of(const json_t *c) { return strcmp(jstr(c, "dtype"), "float64") == 0 ? TG_F64 : TG_F32; }

/* A leaf requiring grad from a reference tensor, in tp. */
static tg_tensor *leaf_from(tg_tape *tp, const json_t *j)
{
    tg_tensor *t = tu_tensor_from_json(tp, j, TG_DTYPE_COUNT);
    assert_int_equal(tg_requires_grad_(t, true), TG_OK);
    return t;
}

/* A new leaf with x's values (same dtype and shape), in tp. */
static tg_tensor *leaf_copy(tg_tape *tp, const tg_tensor *x)
{
    tg_tensor *t = tg_zeros_like(tp, x);
    tu_assert_ok(t);
    assert_int_equal(tg_copy_(t, x), TG_OK);
    assert_int_equal(tg_requires_grad_(t, true), TG_OK);
    return t;
}

/* p.grad = the reference tensor (a gradient kept in p's own tape). */
static void set_grad(tg_tensor *p, tg_tape *scratch, const json_t *j)
{
    if (!p->grad) p->grad = tg_zeros_like(p->tape, p);
    tu_assert_ok(p->grad);
    assert_int_equal(tg_copy_(p->grad, tu_tensor_from_json(scratch, j, p->dtype)), TG_OK);
}

static tg_adam_options adam_options(const json_t *c)
{
    const json_t *b = jget(c, "betas");
    tg_adam_options o = {jnum(c, "lr"),
                         {json_real_value(json_array_get(b, 0)), json_real_value(json_array_get(b, 1))},
                         jnum(c, "eps"),
                         jnum(c, "weight_decay"),
                         json_is_true(jget(c, "amsgrad"))};
    return o;
}

static bool is_adamw(const json_t *c) { return strcmp(jstr(c, "optimizer"), "adamw") == 0; }

static tg_optimizer *adam_for(tg_tape *tp, const json_t *c, int n, tg_tensor *const *ps)
{
    tg_optimizer *o = is_adamw(c) ? tg_adamw_new_params(tp, n, ps, adam_options(c))
                                  : tg_adam_new_params(tp, n, ps, adam_options(c));
    tu_assert_ok(o);
    return o;
}

/* Sets the gradients of step k of case c on ps[0..1] and steps. */
static void adam_step(tg_optimizer *o, tg_tensor **ps, tg_tape *scratch, const json_t *c, size_t k)
{
    const json_t *g = json_array_get(jget(c, "grads"), k);
    for (int i = 0; i < 2; i++) set_grad(ps[i], scratch, json_array_get(g, (size_t)i));
    assert_int_equal(tg_optimizer_step(o), TG_OK);
}

/* An optimizer of case c over its two initial parameters (pa, in mt) after
 * `steps` of the case's steps. */
static tg_optimizer *stepped_adam(tg_tape *mt, tg_tape *tp, const json_t *c, tg_tensor **pa, size_t steps)
{
    const json_t *p0 = jget(c, "params0");
    pa[0] = leaf_from(mt, json_array_get(p0, 0));
    pa[1] = leaf_from(mt, json_array_get(p0, 1));
    tg_optimizer *a = adam_for(mt, c, 2, pa);
    for (size_t k = 0; k < steps; k++) adam_step(a, pa, tp, c, k);
    return a;
}


/* ps[0..1] against the reference parameters after step k. */
static void adam_check(tg_tensor **ps, tg_tape *scratch, const json_t *c, size_t k, const char *who)
{
    const json_t *want = json_array_get(jget(c, "params"), k);
    bool f64 = dtype_of(c) == TG_F64;
    for (int i = 0; i < 2; i++) {
        char what[160];
        snprintf(what, sizeof what, "%s %s: step %zu, param %d", jstr(c, "name"), who, k + 1, i);
        tg_tensor *w = tu_tensor_from_json(scratch, json_array_get(want, (size_t)i), TG_DTYPE_COUNT);
        tu_assert_close(ps[i], w, f64 ? ADAM_RTOL_F64 : ADAM_RTOL_F32, f64 ? ADAM_ATOL_F64 : ADAM_ATOL_F32, what);
        double r = max_rel(ps[i], w);
        double *m = f64 ? &g_max_rel_adam_f64 : &g_max_rel_adam_f32;
        if (r > *m) *m = r;
    }
}

static const tg_tensor *sd_get(const tg_named_list *sd, const char *name)
{
    for (int i = 0; i < sd->n; i++)
        if (strcmp(sd->names[i], name) == 0) return sd->tensors[i];
    return NULL;
}

/* Fails unless the state_dicts of a and b hold the same keys and values. */
static void assert_same_state_(const tg_optimizer *a, const tg_optimizer *b, const char *file, int line)
{
    tg_tape *tp = tg_tape_new();
    tg_named_list la, lb;
    if (tg_optimizer_state_dict(tp, a, &la) != TG_OK || tg_optimizer_state_dict(tp, b, &lb) != TG_OK ||
        la.n != lb.n) {
        print_error("optimizer state_dicts differ in size or could not be listed\n");
        _fail(file, line);
    }
    for (int i = 0; i < la.n; i++) {
        if (strcmp(la.names[i], lb.names[i]) != 0) {
            print_error("state_dict key %d: %s vs %s\n", i, la.names[i], lb.names[i]);
            _fail(file, line);
        }
        tu_assert_close_(la.tensors[i], lb.tensors[i], 0.0, 0.0, la.names[i], file, line);
    }
    tg_tape_free(tp);
}
#define assert_same_state(a, b) assert_same_state_((a), (b), __FILE__, __LINE__)

/* ---- (a) Adam / AdamW against PyTorch ------------------------------------------------------------- */

static void test_adam_case(void **state)
{
    const json_t *c = *state;
    const char *name = jstr(c, "name");
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    const json_t *p0 = jget(c, "params0");
    assert_int_equal(json_array_size(p0), 2);
    tg_tensor *ps[2] = {leaf_from(mt, json_array_get(p0, 0)), leaf_from(mt, json_array_get(p0, 1))};
    assert_int_equal(ps[0]->dtype, dtype_of(c));
    tg_optimizer *o = adam_for(mt, c, 2, ps);
    assert_string_equal(tg_optimizer_name(o), is_adamw(c) ? "AdamW" : "Adam");
    assert_true(tg_optimizer_lr(o) == jnum(c, "lr"));

    /* no state before the first step: only the learning rate */
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(tp, o, &sd), TG_OK);
    assert_int_equal(sd.n, 1);
    assert_string_equal(sd.names[0], "param_groups.0.lr");

    size_t steps = (size_t)jint(c, "steps");
    assert_int_equal(json_array_size(jget(c, "params")), steps);
    for (size_t k = 0; k < steps; k++) {
        tg_tape_reset(tp);
        adam_step(o, ps, tp, c, k);
        adam_check(ps, tp, c, k, "");
    }

    /* the final state */
    tg_tape_reset(tp);
    bool ams = json_is_true(jget(c, "amsgrad"));
    assert_int_equal(tg_optimizer_state_dict(tp, o, &sd), TG_OK);
    assert_int_equal(sd.n, 1 + 2 * (ams ? 4 : 3));
    const tg_tensor *lr = sd_get(&sd, "param_groups.0.lr");
    assert_non_null(lr);
    assert_int_equal(lr->dtype, TG_F64);
    assert_int_equal(lr->ndim, 0);
    assert_true(tg_item(lr) == jnum(c, "lr"));
    /* the optimizer's own tensors, not copies */
    tg_named_list sd2;
    assert_int_equal(tg_optimizer_state_dict(tp, o, &sd2), TG_OK);
    assert_ptr_equal(sd_get(&sd, "state.1.exp_avg"), sd_get(&sd2, "state.1.exp_avg"));
    assert_ptr_equal(sd_get(&sd, "state.0.exp_avg_sq"), sd_get(&sd2, "state.0.exp_avg_sq"));
    const json_t *st = jget(c, "state");
    bool f64 = dtype_of(c) == TG_F64;
    for (int i = 0; i < 2; i++) {
        const json_t *s = json_array_get(st, (size_t)i);
        char key[64], what[160];
        snprintf(key, sizeof key, "state.%d.step", i);
        const tg_tensor *step = sd_get(&sd, key);
        if (!step) fail_msg("%s: no %s", name, key);
        assert_int_equal(step->dtype, TG_F32);
        assert_int_equal(step->ndim, 0);
        assert_true(tg_item(step) == (double)jint(s, "step"));
        const char *moments[3] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
        for (int k = 0; k < 3; k++) {
            snprintf(key, sizeof key, "state.%d.%s", i, moments[k]);
            const tg_tensor *got = sd_get(&sd, key);
            const json_t *want = json_object_get(s, moments[k]);
            if (!want || json_is_null(want)) {
                if (got) fail_msg("%s: %s present without amsgrad", name, key);
                continue;
            }
            if (!got) fail_msg("%s: no %s", name, key);
            snprintf(what, sizeof what, "%s %s", name, key);
            tg_tensor *w = tu_tensor_from_json(tp, want, TG_DTYPE_COUNT);
            tu_assert_close(got, w, f64 ? ADAM_RTOL_F64 : ADAM_RTOL_F32, f64 ? ADAM_ATOL_F64 : 1e-12, what);
            double r = max_rel(got, w);
            double *m = f64 ? &g_max_rel_adam_f64 : &g_max_rel_adam_f32;
            if (r > *m) *m = r;
        }
    }
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- (b) state files ----------------------------------------------------------------------------- */

/* Save after 3 steps, load into a fresh optimizer over copies of the
 * parameters, 3 more steps on both: bit-identical, and PyTorch's. */
static void test_state_round_trip(void **state)
{
    (void)state;
    const json_t *c = find_case("adam", "adamw_amsgrad");
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_tensor *pa[2];
    tg_optimizer *a = stepped_adam(mt, tp, c, pa, 3);
    char path[256];
    tmp_path(path, sizeof path, "adamw.safetensors");
    assert_int_equal(tg_optimizer_save(a, path), TG_OK);

    /* the file holds the state_dict's keys */
    tg_safetensors f;
    assert_int_equal(tg_safetensors_load(tp, path, &f), TG_OK);
    assert_int_equal(f.n, 1 + 2 * 4);
    assert_non_null(tg_safetensors_get(&f, "state.1.max_exp_avg_sq"));
    assert_true(tg_item(tg_safetensors_get(&f, "state.0.step")) == 3.0);

    tg_tensor *pb[2] = {leaf_copy(mt, pa[0]), leaf_copy(mt, pa[1])};
    tg_optimizer *b = adam_for(mt, c, 2, pb);
    assert_int_equal(tg_optimizer_load(b, path), TG_OK);
    assert_same_state(a, b);
    for (size_t k = 3; k < 6; k++) {
        tg_tape_reset(tp);
        adam_step(a, pa, tp, c, k);
        adam_step(b, pb, tp, c, k);
        for (int i = 0; i < 2; i++) tu_assert_close(pb[i], pa[i], 0.0, 0.0, "loaded vs original");
        adam_check(pb, tp, c, k, "(loaded)");
    }
    assert_same_state(a, b);

    /* without the loaded state, the fresh optimizer would not match */
    tg_tensor *pc[2] = {leaf_from(mt, json_array_get(json_array_get(jget(c, "params"), 2), 0)),
                        leaf_from(mt, json_array_get(json_array_get(jget(c, "params"), 2), 1))};
    tg_optimizer *cc = adam_for(mt, c, 2, pc);
    adam_step(cc, pc, tp, c, 3);
    tg_tensor *want = tu_tensor_from_json(tp, json_array_get(json_array_get(jget(c, "params"), 3), 0), TG_F32);
    assert_true(max_rel(pc[0], want) > 1e-4);

    /* the learning rate is part of the state */
    assert_int_equal(tg_optimizer_set_lr(a, 2.5e-4), TG_OK);
    assert_true(tg_optimizer_lr(a) == 2.5e-4);
    assert_int_equal(tg_optimizer_save(a, path), TG_OK);
    tg_optimizer *d = adam_for(mt, c, 2, pb);
    assert_true(tg_optimizer_lr(d) == 1e-3);
    assert_int_equal(tg_optimizer_load(d, path), TG_OK);
    assert_true(tg_optimizer_lr(d) == 2.5e-4);
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(tp, d, &sd), TG_OK);
    assert_true(tg_item(sd_get(&sd, "param_groups.0.lr")) == 2.5e-4);
    assert_true(tg_item(sd_get(&sd, "state.1.step")) == 6.0);
    /* a file that cannot be written */
    char nodir[300];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/opt.safetensors", g_tmpdir);
    assert_true(tg_optimizer_save(a, nodir) != TG_OK);
    assert_int_equal(access(nodir, F_OK), -1);
    unlink(path);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* A copy of sd's entries (in tp) with entry `name` replaced by t (t NULL:
 * dropped) and, if extra_name, one more entry. */
static tg_named_list sd_edit(tg_tape *tp, const tg_named_list *sd, const char *name, const tg_tensor *t,
                             const char *extra_name, const tg_tensor *extra)
{
    tg_named_list out;
    out.names = tg_tape_alloc(tp, sizeof *out.names * (size_t)(sd->n + 1), false);
    out.tensors = tg_tape_alloc(tp, sizeof *out.tensors * (size_t)(sd->n + 1), false);
    assert_non_null(out.names);
    assert_non_null(out.tensors);
    out.n = 0;
    for (int i = 0; i < sd->n; i++) {
        bool hit = name && strcmp(sd->names[i], name) == 0;
        if (hit && !t) continue;
        out.names[out.n] = sd->names[i];
        out.tensors[out.n++] = hit ? (tg_tensor *)t : sd->tensors[i];
    }
    if (extra_name) {
        out.names[out.n] = extra_name;
        out.tensors[out.n++] = (tg_tensor *)extra;
    }
    return out;
}

/* Without the entries whose names contain `part`. */
static tg_named_list sd_drop(tg_tape *tp, const tg_named_list *sd, const char *part)
{
    tg_named_list out = sd_edit(tp, sd, NULL, NULL, NULL, NULL);
    int k = 0;
    for (int i = 0; i < out.n; i++)
        if (!strstr(out.names[i], part)) out.names[k] = out.names[i], out.tensors[k++] = out.tensors[i];
    out.n = k;
    return out;
}

static void save_list(const char *path, const tg_named_list *l)
{
    tg_named_tensor items[32];
    assert_true(l->n <= 32);
    for (int i = 0; i < l->n; i++) items[i] = (tg_named_tensor){l->names[i], l->tensors[i]};
    assert_int_equal(tg_safetensors_save(path, items, l->n), TG_OK);
}

/* Every refused state leaves the optimizer as it was: its next steps are
 * still PyTorch's. */
static void test_state_load_errors(void **state)
{
    (void)state;
    const json_t *c = find_case("adam", "adamw_amsgrad");
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_tensor *pa[2];
    tg_optimizer *a = stepped_adam(mt, tp, c, pa, 3);
    char good[256], bad[256], sgdf[256], missing[256];
    tmp_path(good, sizeof good, "good.safetensors");
    tmp_path(bad, sizeof bad, "bad.safetensors");
    tmp_path(sgdf, sizeof sgdf, "sgd.safetensors");
    tmp_path(missing, sizeof missing, "missing.safetensors");
    assert_int_equal(tg_optimizer_save(a, good), TG_OK);
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(mt, a, &sd), TG_OK);

    /* b: loaded at step 3; a fresh optimizer f (never stepped) beside it */
    tg_tensor *pb[2] = {leaf_copy(mt, pa[0]), leaf_copy(mt, pa[1])};
    tg_optimizer *b = adam_for(mt, c, 2, pb);
    assert_int_equal(tg_optimizer_load(b, good), TG_OK);
    const json_t *p0 = jget(c, "params0");
    tg_tensor *pf[2] = {leaf_from(mt, json_array_get(p0, 0)), leaf_from(mt, json_array_get(p0, 1))};
    tg_optimizer *f = adam_for(mt, c, 2, pf);

    /* SGD's state (momentum buffers, its own lr) into Adam */
    int64_t s34[2] = {3, 4}, s5[1] = {5}, s4[1] = {4};
    tg_tensor *ps[2] = {tg_parameter_new(mt, TG_F32, 2, s34), tg_parameter_new(mt, TG_F32, 1, s5)};
    tg_sgd *sgd = tg_sgd_new_params(mt, 2, ps, (tg_sgd_options){0.5, 0.9, 0, 0, false});
    tu_assert_ok(sgd);
    for (int i = 0; i < 2; i++) set_grad(ps[i], tp, json_array_get(json_array_get(jget(c, "grads"), 0), (size_t)i));
    assert_int_equal(tg_sgd_step(sgd), TG_OK);
    assert_int_equal(tg_optimizer_save(sgd, sgdf), TG_OK);
    tu_assert_status_error(tg_optimizer_load(b, sgdf), "AdamW", "momentum_buffer", "another optimizer");
    tu_assert_status_error(tg_optimizer_load(f, sgdf), "momentum_buffer");
    assert_true(tg_optimizer_lr(b) == 1e-3);
    assert_true(tg_optimizer_lr(f) == 1e-3);

    /* Adam's state into SGD with momentum: refused, SGD unchanged */
    tg_tensor *ps2[2] = {leaf_copy(mt, ps[0]), leaf_copy(mt, ps[1])};
    tg_sgd *sgd2 = tg_sgd_new_params(mt, 2, ps2, (tg_sgd_options){0.5, 0.9, 0, 0, false});
    tu_assert_ok(sgd2);
    assert_int_equal(tg_optimizer_load(sgd2, sgdf), TG_OK);
    tu_assert_status_error(tg_optimizer_load(sgd, good), "SGD", "unexpected key");
    tu_assert_status_error(tg_optimizer_load_state_dict(sgd, &sd), "SGD", "unexpected key");
    assert_true(tg_optimizer_lr(sgd) == 0.5);
    for (int i = 0; i < 2; i++) {
        set_grad(ps[i], tp, json_array_get(json_array_get(jget(c, "grads"), 1), (size_t)i));
        set_grad(ps2[i], tp, json_array_get(json_array_get(jget(c, "grads"), 1), (size_t)i));
    }
    assert_int_equal(tg_sgd_step(sgd), TG_OK);
    assert_int_equal(tg_sgd_step(sgd2), TG_OK);
    for (int i = 0; i < 2; i++) tu_assert_close(ps[i], ps2[i], 0.0, 0.0, "SGD after a refused Adam state");

    /* a state whose shape is not the parameter's */
    tg_tensor *wrong = tg_zeros(tp, TG_F32, 1, s4);
    tg_named_list l = sd_edit(tp, &sd, "state.1.exp_avg", wrong, NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "size mismatch", "state.1.exp_avg", "(4)", "(5)");
    save_list(bad, &l);
    tu_assert_status_error(tg_optimizer_load(b, bad), "size mismatch", "state.1.exp_avg");
    tu_assert_status_error(tg_optimizer_load(f, bad), "size mismatch");
    int64_t s43[2] = {4, 3};
    l = sd_edit(tp, &sd, "state.0.exp_avg_sq", tg_zeros(tp, TG_F32, 2, s43), NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "size mismatch", "state.0.exp_avg_sq");

    /* an index beyond the parameters */
    l = sd_edit(tp, &sd, NULL, NULL, "state.2.exp_avg", tg_zeros(tp, TG_F32, 1, s5));
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "state.2.exp_avg", "parameter 2 of 2");
    save_list(bad, &l);
    tu_assert_status_error(tg_optimizer_load(b, bad), "parameter 2 of 2");

    /* an unknown key, a non-float moment, a step that is no count, an
     * incomplete state, a bad learning rate */
    l = sd_edit(tp, &sd, NULL, NULL, "momentum", tg_zeros(tp, TG_F32, 1, s5));
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "unexpected key 'momentum'");
    l = sd_edit(tp, &sd, "state.1.exp_avg", tg_zeros(tp, TG_I64, 1, s5), NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "state.1.exp_avg", "int64");
    l = sd_edit(tp, &sd, "state.0.step", tg_scalar(tp, TG_F32, 0.0), NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "state.0.step", "not a step count");
    l = sd_edit(tp, &sd, "state.0.step", tg_scalar(tp, TG_F32, 2.5), NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "not a step count");
    l = sd_edit(tp, &sd, "state.1.exp_avg_sq", NULL, NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "parameter 1", "incomplete");
    l = sd_drop(tp, &sd, "max_exp_avg_sq"); /* a state without amsgrad, into an amsgrad optimizer */
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "incomplete");
    l = sd_edit(tp, &sd, "param_groups.0.lr", tg_scalar(tp, TG_F64, -1.0), NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "learning rate");
    l = sd_edit(tp, &sd, "param_groups.0.lr", tg_scalar(tp, TG_F64, NAN), NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "learning rate");
    tu_assert_status_error(tg_optimizer_load_state_dict(b, NULL), "NULL");
    tu_assert_status_error(tg_optimizer_load_state_dict(NULL, &sd), "NULL");

    /* an amsgrad state into an optimizer without amsgrad */
    tg_adam_options plain = adam_options(c);
    plain.amsgrad = false;
    tg_tensor *pn[2] = {leaf_copy(mt, pa[0]), leaf_copy(mt, pa[1])};
    tg_optimizer *n = tg_adamw_new_params(mt, 2, pn, plain);
    tu_assert_ok(n);
    tu_assert_status_error(tg_optimizer_load(n, good), "max_exp_avg_sq");
    l = sd_drop(tp, &sd, "max_exp_avg_sq");
    assert_int_equal(tg_optimizer_load_state_dict(n, &l), TG_OK);

    /* a truncated file, a missing file */
    size_t len;
    char *bytes = tu_read_file(good, &len);
    FILE *fp = fopen(bad, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(bytes, 1, len / 2, fp), len / 2);
    fclose(fp);
    free(bytes);
    int st = tg_optimizer_load(b, bad);
    tu_assert_status_error(st, "bad.safetensors");
    assert_int_equal(st, TG_EFORMAT);
    unlink(missing);
    st = tg_optimizer_load(b, missing);
    tu_assert_status_error(st, "missing.safetensors");
    assert_int_equal(st, TG_EIO);
    tu_assert_status_error(tg_optimizer_load(b, NULL), "NULL");
    tu_assert_status_error(tg_optimizer_load(NULL, good), "NULL");
    tu_assert_status_error(tg_optimizer_save(NULL, bad), "NULL");
    tu_assert_status_error(tg_optimizer_save(b, NULL), "NULL");
    tu_assert_status_error(tg_optimizer_state_dict(tp, NULL, &l), "NULL");

    /* after all that, b is still at PyTorch's step 3 and f has no state */
    assert_true(tg_optimizer_lr(b) == 1e-3);
    assert_same_state(a, b);
    tg_tape_reset(tp);
    assert_int_equal(tg_optimizer_state_dict(tp, f, &l), TG_OK);
    assert_int_equal(l.n, 1);
    for (size_t k = 3; k < 6; k++) {
        tg_tape_reset(tp);
        adam_step(b, pb, tp, c, k);
        adam_check(pb, tp, c, k, "(after refused loads)");
    }
    for (size_t k = 0; k < 6; k++) {
        tg_tape_reset(tp);
        adam_step(f, pf, tp, c, k);
        adam_check(pf, tp, c, k, "(fresh, after refused loads)");
    }
    unlink(good);
    unlink(bad);
    unlink(sgdf);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* As PyTorch's load_state_dict: the loaded state replaces the old one, so a
 * parameter without state in it starts afresh (step count and moments). */
static void test_state_partial(void **state)
{
    (void)state;
    const json_t *c = find_case("adam", "adamw_amsgrad");
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_tensor *pa[2];
    tg_optimizer *a = stepped_adam(mt, tp, c, pa, 3);
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(mt, a, &sd), TG_OK);
    tg_named_list part = sd_drop(mt, &sd, "state.1.");
    assert_int_equal(part.n, 1 + 4);
    /* b has state for both (a full load), then takes the partial one */
    tg_tensor *pb[2] = {leaf_copy(mt, pa[0]), leaf_copy(mt, pa[1])};
    tg_optimizer *b = adam_for(mt, c, 2, pb);
    assert_int_equal(tg_optimizer_load_state_dict(b, &sd), TG_OK);
    assert_int_equal(tg_optimizer_load_state_dict(b, &part), TG_OK);
    tg_named_list got;
    assert_int_equal(tg_optimizer_state_dict(tp, b, &got), TG_OK);
    assert_int_equal(got.n, 1 + 4);
    assert_null(sd_get(&got, "state.1.step"));
    /* fresh: an optimizer over a copy of parameter 1 alone */
    tg_tensor *pf = leaf_copy(mt, pa[1]);
    tg_optimizer *f = adam_for(mt, c, 1, &pf);
    const json_t *g3 = json_array_get(jget(c, "grads"), 3);
    set_grad(pb[0], tp, json_array_get(g3, 0));
    set_grad(pb[1], tp, json_array_get(g3, 1));
    set_grad(pf, tp, json_array_get(g3, 1));
    assert_int_equal(tg_optimizer_step(b), TG_OK);
    assert_int_equal(tg_optimizer_step(f), TG_OK);
    tu_assert_close(pb[1], pf, 0.0, 0.0, "parameter without loaded state: a first step");
    tu_assert_close(pb[0], tu_tensor_from_json(tp, json_array_get(json_array_get(jget(c, "params"), 3), 0), TG_F32),
                    ADAM_RTOL_F32, ADAM_ATOL_F32, "parameter with loaded state: PyTorch's step 4");

    /* SGD: a momentum buffer missing from the state: the next step starts it
     * from the gradient (buf = d) */
    int64_t s3[1] = {3};
    const float v0[3] = {1, -2, 0.5f}, g[3] = {0.25f, -1, 2};
    tg_tensor *sa[2] = {leaf_copy(mt, tg_from_f32(tp, 1, s3, v0)), leaf_copy(mt, tg_from_f32(tp, 1, s3, v0))};
    tg_sgd_options o = {0.1, 0.9, 0.5, 0.0, false};
    tg_sgd *s = tg_sgd_new_params(mt, 2, sa, o);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 2; i++) sa[i]->grad = tg_from_f32(mt, 1, s3, g);
        assert_int_equal(tg_sgd_step(s), TG_OK);
    }
    assert_int_equal(tg_optimizer_state_dict(mt, s, &sd), TG_OK);
    assert_int_equal(sd.n, 3);
    part = sd_drop(mt, &sd, "state.1.");
    tg_tensor *sb[2] = {leaf_copy(mt, sa[0]), leaf_copy(mt, sa[1])};
    tg_sgd *t = tg_sgd_new_params(mt, 2, sb, o);
    assert_int_equal(tg_optimizer_load_state_dict(t, &sd), TG_OK);
    assert_int_equal(tg_optimizer_load_state_dict(t, &part), TG_OK);
    for (int i = 0; i < 2; i++) sb[i]->grad = tg_from_f32(mt, 1, s3, g);
    assert_int_equal(tg_sgd_step(t), TG_OK);
    for (int i = 0; i < 3; i++) {
        /* parameter 1: p - lr g (buf = g, not 0.5 g); parameter 0:
         * p - lr buf, buf = 0.9 (0.9 g + 0.5 g) + 0.5 g */
        float p1 = (float)tg_item_at(sa[1], i) - 0.1f * g[i];
        assert_true(fabs(tg_item_at(sb[1], i) - p1) < 1e-6);
        double buf = 0.9 * (0.9 * g[i] + 0.5 * g[i]) + 0.5 * g[i];
        assert_true(fabs(tg_item_at(sb[0], i) - (tg_item_at(sa[0], i) - 0.1 * buf)) < 1e-6);
    }
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* A state_dict naming one entry twice and leaving another out (possible in
 * memory, where nothing makes the names unique) is incomplete: refused,
 * the optimizer unchanged. */
static void test_state_duplicate_key(void **state)
{
    (void)state;
    const json_t *c = find_case("adam", "adamw_amsgrad");
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_tensor *pa[2];
    tg_optimizer *a = stepped_adam(mt, tp, c, pa, 3);
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(mt, a, &sd), TG_OK);
    /* state.0.exp_avg_sq dropped, state.0.exp_avg listed twice: as many
     * entries for parameter 0 as a complete state has */
    tg_named_list l = sd_edit(mt, &sd, "state.0.exp_avg_sq", NULL, "state.0.exp_avg", sd_get(&sd, "state.0.exp_avg"));
    assert_int_equal(l.n, sd.n);
    tg_tensor *pb[2] = {leaf_copy(mt, pa[0]), leaf_copy(mt, pa[1])};
    tg_optimizer *b = adam_for(mt, c, 2, pb);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "state.0.exp_avg");
    tg_named_list got;
    assert_int_equal(tg_optimizer_state_dict(tp, b, &got), TG_OK);
    assert_int_equal(got.n, 1); /* unchanged: still no state */
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- (c) options, names, parameter lists ------------------------------------------------------------ */

static void test_invalid_options(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new();
    int64_t s3[1] = {3};
    tg_tensor *p = tg_parameter_new(mt, TG_F32, 1, s3);
    tg_tensor *ps[1] = {p};

    tg_adam_options d = tg_adam_defaults(), w = tg_adamw_defaults();
    assert_true(d.lr == 1e-3 && d.betas[0] == 0.9 && d.betas[1] == 0.999 && d.eps == 1e-8);
    assert_true(d.weight_decay == 0.0 && !d.amsgrad);
    assert_true(w.lr == 1e-3 && w.betas[0] == 0.9 && w.betas[1] == 0.999 && w.eps == 1e-8);
    assert_true(w.weight_decay == 1e-2 && !w.amsgrad);

    tg_adam_options o;
    for (int kind = 0; kind < 2; kind++) {
        tg_optimizer *(*make)(tg_tape *, int, tg_tensor *const *, tg_adam_options) =
            kind ? tg_adamw_new_params : tg_adam_new_params;
        const char *who = kind ? "AdamW:" : "Adam:";
        o = d, o.lr = -1e-3;
        tu_assert_null_error(make(mt, 1, ps, o), who, "learning rate");
        o = d, o.lr = NAN;
        tu_assert_null_error(make(mt, 1, ps, o), who, "learning rate");
        o = d, o.lr = INFINITY;
        tu_assert_null_error(make(mt, 1, ps, o), who, "learning rate");
        o = d, o.betas[0] = 1.0;
        tu_assert_null_error(make(mt, 1, ps, o), who, "beta", "index 0");
        o = d, o.betas[0] = -0.1;
        tu_assert_null_error(make(mt, 1, ps, o), who, "beta", "index 0");
        o = d, o.betas[1] = 1.0;
        tu_assert_null_error(make(mt, 1, ps, o), who, "beta", "index 1");
        o = d, o.betas[1] = NAN;
        tu_assert_null_error(make(mt, 1, ps, o), who, "beta", "index 1");
        o = d, o.eps = -1e-8;
        tu_assert_null_error(make(mt, 1, ps, o), who, "epsilon");
        o = d, o.weight_decay = -0.1;
        tu_assert_null_error(make(mt, 1, ps, o), who, "weight_decay");
        o = d, o.weight_decay = NAN;
        tu_assert_null_error(make(mt, 1, ps, o), who, "weight_decay");
        /* the edges of the valid range */
        o = d, o.lr = 0.0, o.eps = 0.0, o.betas[0] = 0.0, o.betas[1] = 0.0;
        tu_assert_ok(make(mt, 1, ps, o));
        o = d, o.betas[0] = 0.999999, o.betas[1] = 0.999999;
        tu_assert_ok(make(mt, 1, ps, o));
    }

    /* a tensor that does not require grad is kept (its index counts, as in
     * PyTorch) and skipped; a non-leaf is refused; a list where nothing
     * requires grad is PyTorch's "empty parameter list" */
    tg_tensor *plain = tg_zeros(mt, TG_F32, 1, s3);
    tg_tensor *nonleaf = tg_mul_scalar(mt, p, 2.0);
    tg_tensor *l1[2] = {p, plain}, *l2[1] = {nonleaf}, *l3[2] = {p, NULL}, *l4[1] = {plain};
    tg_optimizer *kept = tg_adam_new_params(mt, 2, l1, d);
    tu_assert_ok(kept);
    assert_int_equal(tg_optimizer_num_params(kept), 2);
    assert_ptr_equal(tg_optimizer_param(kept, 1), plain);
    tu_assert_null_error(tg_adamw_new_params(mt, 1, l2, w), "parameter 0", "non-leaf");
    tu_assert_null_error(tg_adamw_new_params(mt, 2, l3, w), "parameter 1", "NULL");
    tu_assert_null_error(tg_adam_new_params(mt, 1, l4, d), "Adam", "empty parameter list");
    tu_assert_null_error(tg_adamw_new_params(mt, -1, ps, w), "parameter list");
    tu_assert_null_error(tg_adamw_new_params(NULL, 1, ps, w), "NULL");
    tu_assert_null_error(tg_adam_new(mt, NULL, d), "NULL module");
    tu_assert_null_error(tg_adamw_new(mt, NULL, w), "NULL module");

    /* set_lr */
    tg_optimizer *a = tg_adamw_new_params(mt, 1, ps, w);
    tu_assert_ok(a);
    tu_assert_status_error(tg_optimizer_set_lr(a, -1e-4), "AdamW", "learning rate");
    tu_assert_status_error(tg_optimizer_set_lr(a, NAN), "learning rate");
    tu_assert_status_error(tg_optimizer_set_lr(a, INFINITY), "learning rate");
    tu_assert_status_error(tg_optimizer_set_lr(a, -INFINITY), "learning rate");
    assert_true(tg_optimizer_lr(a) == 1e-3);
    assert_int_equal(tg_optimizer_set_lr(a, 0.0), TG_OK);
    assert_true(tg_optimizer_lr(a) == 0.0);
    assert_int_equal(tg_optimizer_set_lr(a, 3e-4), TG_OK);
    assert_true(tg_optimizer_lr(a) == 3e-4);
    tu_assert_status_error(tg_optimizer_set_lr(NULL, 1e-3), "NULL");
    assert_true(isnan(tg_optimizer_lr(NULL)));
    tu_assert_status_error(tg_optimizer_step(NULL), "NULL");

    tg_sgd *s = tg_sgd_new_params(mt, 1, ps, (tg_sgd_options){0.1, 0, 0, 0, false});
    tu_assert_ok(s);
    tu_assert_status_error(tg_optimizer_set_lr(s, -0.1), "SGD", "learning rate");
    assert_true(tg_optimizer_lr(s) == 0.1);
    tu_assert_null_error(tg_sgd_new_params(mt, 1, ps, (tg_sgd_options){-0.1, 0, 0, 0, false}), "learning rate");
    tu_assert_null_error(tg_sgd_new_params(mt, 1, ps, (tg_sgd_options){0.1, -0.9, 0, 0, false}), "momentum");
    tu_assert_null_error(tg_sgd_new_params(mt, 1, ps, (tg_sgd_options){0.1, 0, 0, -1, false}), "weight_decay");
    tu_assert_null_error(tg_sgd_new_params(mt, 1, ps, (tg_sgd_options){0.1, 0, 0, 0, true}), "Nesterov");
    tu_assert_null_error(tg_sgd_new_params(mt, 1, ps, (tg_sgd_options){0.1, 0.9, 0.5, 0, true}), "Nesterov");
    tg_tape_free(mt);
}

static void test_names_and_params(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new();
    int64_t s3[1] = {3}, s22[2] = {2, 2};
    tg_tensor *p = tg_parameter_new(mt, TG_F32, 1, s3), *q = tg_parameter_new(mt, TG_F64, 2, s22);
    tg_tensor *ps[2] = {p, q};
    tg_optimizer *a = tg_adam_new_params(mt, 2, ps, tg_adam_defaults());
    tg_optimizer *w = tg_adamw_new_params(mt, 2, ps, tg_adamw_defaults());
    tg_sgd *s = tg_sgd_new_params(mt, 1, ps + 1, (tg_sgd_options){0.1, 0, 0, 0, false});
    tu_assert_ok(a);
    tu_assert_ok(w);
    tu_assert_ok(s);
    assert_string_equal(tg_optimizer_name(a), "Adam");
    assert_string_equal(tg_optimizer_name(w), "AdamW");
    assert_string_equal(tg_optimizer_name(s), "SGD");
    assert_null(tg_optimizer_name(NULL));
    assert_int_equal(tg_optimizer_num_params(a), 2);
    assert_int_equal(tg_optimizer_num_params(s), 1);
    assert_int_equal(tg_optimizer_num_params(NULL), 0);
    assert_ptr_equal(tg_optimizer_param(a, 0), p);
    assert_ptr_equal(tg_optimizer_param(a, 1), q);
    assert_ptr_equal(tg_optimizer_param(s, 0), q);
    tu_assert_null_error(tg_optimizer_param(a, 2), "index 2 out of range", "2 parameters");
    tu_assert_null_error(tg_optimizer_param(a, -1), "out of range");
    tu_assert_null_error(tg_optimizer_param(s, 1), "out of range");
    tu_assert_null_error(tg_optimizer_param(NULL, 0), "NULL");

    /* an empty list is an error, not an optimizer that silently does nothing */
    tu_assert_null_error(tg_adam_new_params(mt, 0, NULL, tg_adam_defaults()), "empty parameter list");
    tu_assert_null_error(tg_sgd_new_params(mt, 0, NULL, (tg_sgd_options){.lr = 0.1}), "SGD", "empty parameter list");

    /* from a module: named_parameters order; a child registered twice
     * (shared weights) gives its parameters once */
    tg_manual_seed(0);
    tg_module *lin = tg_linear_new(mt, 3, 3, true);
    tg_module *kids[2] = {lin, lin};
    tg_module *seq = tg_sequential_new(mt, 2, kids);
    tu_assert_ok(seq);
    tg_optimizer *m = tg_adamw_new(mt, seq, tg_adamw_defaults());
    tu_assert_ok(m);
    assert_int_equal(tg_optimizer_num_params(m), 2);
    assert_ptr_equal(tg_optimizer_param(m, 0), tg_module_get_parameter(lin, "weight"));
    assert_ptr_equal(tg_optimizer_param(m, 1), tg_module_get_parameter(lin, "bias"));
    tg_optimizer *ma = tg_adam_new(mt, lin, tg_adam_defaults());
    tu_assert_ok(ma);
    assert_int_equal(tg_optimizer_num_params(ma), 2);
    tg_sgd *ms = tg_sgd_new(mt, seq, (tg_sgd_options){0.1, 0, 0, 0, false});
    tu_assert_ok(ms);
    assert_int_equal(tg_optimizer_num_params(ms), 2);

    /* zero_grad keeps the gradients allocated, zeroed */
    p->grad = tg_full(mt, TG_F32, 1, s3, 2.0);
    tg_tensor *g = p->grad;
    tg_optimizer_zero_grad(a);
    assert_ptr_equal(p->grad, g);
    for (int i = 0; i < 3; i++) assert_true(tg_item_at(p->grad, i) == 0.0);
    assert_null(q->grad);
    p->grad = tg_full(mt, TG_F32, 1, s3, 2.0);
    tg_sgd_zero_grad(s); /* s holds q only */
    assert_true(tg_item_at(p->grad, 0) == 2.0);
    tg_optimizer_zero_grad(NULL);
    tg_tape_free(mt);
}

/* The same tensor listed twice is updated once: equal to the list holding
 * it once, and to PyTorch's. */
static void test_tied_params(void **state)
{
    (void)state;
    const json_t *c = find_case("adam", "adamw_defaults");
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    const json_t *p0 = jget(c, "params0");
    tg_tensor *pa[2] = {leaf_from(mt, json_array_get(p0, 0)), leaf_from(mt, json_array_get(p0, 1))};
    tg_tensor *pb[2] = {leaf_from(mt, json_array_get(p0, 0)), leaf_from(mt, json_array_get(p0, 1))};
    tg_tensor *tied[4] = {pa[0], pa[1], pa[0], pa[1]};
    tg_optimizer *a = adam_for(mt, c, 4, tied);
    tg_optimizer *b = adam_for(mt, c, 2, pb);
    assert_int_equal(tg_optimizer_num_params(a), 2);
    assert_ptr_equal(tg_optimizer_param(a, 0), pa[0]);
    assert_ptr_equal(tg_optimizer_param(a, 1), pa[1]);
    for (size_t k = 0; k < 6; k++) {
        tg_tape_reset(tp);
        adam_step(a, pa, tp, c, k);
        adam_step(b, pb, tp, c, k);
        for (int i = 0; i < 2; i++) tu_assert_close(pa[i], pb[i], 0.0, 0.0, "tied vs once");
        adam_check(pa, tp, c, k, "(tied)");
    }
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(tp, a, &sd), TG_OK);
    assert_int_equal(sd.n, 1 + 2 * 3);
    assert_true(tg_item(sd_get(&sd, "state.0.step")) == 6.0);

    /* SGD too */
    tg_tensor *sp[2] = {leaf_from(mt, json_array_get(p0, 0)), leaf_from(mt, json_array_get(p0, 0))};
    tg_tensor *stied[3] = {sp[0], sp[0], sp[0]};
    tg_sgd *s1 = tg_sgd_new_params(mt, 3, stied, (tg_sgd_options){0.1, 0.9, 0, 0, false});
    tg_sgd *s2 = tg_sgd_new_params(mt, 1, sp + 1, (tg_sgd_options){0.1, 0.9, 0, 0, false});
    assert_int_equal(tg_optimizer_num_params(s1), 1);
    for (size_t k = 0; k < 3; k++) {
        set_grad(sp[0], tp, json_array_get(json_array_get(jget(c, "grads"), k), 0));
        set_grad(sp[1], tp, json_array_get(json_array_get(jget(c, "grads"), k), 0));
        assert_int_equal(tg_sgd_step(s1), TG_OK);
        assert_int_equal(tg_sgd_step(s2), TG_OK);
    }
    tu_assert_close(sp[0], sp[1], 0.0, 0.0, "SGD tied vs once");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* A parameter without a gradient is skipped: unchanged, no state, and its
 * step count does not advance. */
static void test_params_without_grad(void **state)
{
    (void)state;
    const json_t *c = find_case("adam", "adam_defaults");
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    const json_t *p0 = jget(c, "params0"), *grads = jget(c, "grads");
    tg_tensor *pa[2] = {leaf_from(mt, json_array_get(p0, 0)), leaf_from(mt, json_array_get(p0, 1))};
    tg_optimizer *a = adam_for(mt, c, 2, pa);
    tg_tensor *before = tg_clone(tp, pa[1]);
    set_grad(pa[0], tp, json_array_get(json_array_get(grads, 0), 0));
    assert_int_equal(tg_optimizer_step(a), TG_OK);
    tu_assert_close(pa[1], before, 0.0, 0.0, "parameter without grad");
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(tp, a, &sd), TG_OK);
    assert_int_equal(sd.n, 1 + 3);
    assert_non_null(sd_get(&sd, "state.0.exp_avg"));
    assert_null(sd_get(&sd, "state.1.step"));
    assert_null(sd_get(&sd, "state.1.exp_avg"));
    /* parameter 0 took PyTorch's first step */
    tu_assert_close(pa[0], tu_tensor_from_json(tp, json_array_get(json_array_get(jget(c, "params"), 0), 0), TG_F32),
                    ADAM_RTOL_F32, ADAM_ATOL_F32, "first step of parameter 0");
    /* now parameter 1 gets step 0's gradient: its first step, PyTorch's */
    set_grad(pa[1], tp, json_array_get(json_array_get(grads, 0), 1));
    set_grad(pa[0], tp, json_array_get(json_array_get(grads, 1), 0));
    assert_int_equal(tg_optimizer_step(a), TG_OK);
    tu_assert_close(pa[1], tu_tensor_from_json(tp, json_array_get(json_array_get(jget(c, "params"), 0), 1), TG_F32),
                    ADAM_RTOL_F32, ADAM_ATOL_F32, "first step of parameter 1, one step late");
    tu_assert_close(pa[0], tu_tensor_from_json(tp, json_array_get(json_array_get(jget(c, "params"), 1), 0), TG_F32),
                    ADAM_RTOL_F32, ADAM_ATOL_F32, "second step of parameter 0");
    assert_int_equal(tg_optimizer_state_dict(tp, a, &sd), TG_OK);
    assert_true(tg_item(sd_get(&sd, "state.0.step")) == 2.0);
    assert_true(tg_item(sd_get(&sd, "state.1.step")) == 1.0);

    /* a gradient of another dtype is refused */
    pa[0]->grad = tg_zeros(mt, TG_F64, pa[0]->ndim, pa[0]->shape);
    tu_assert_status_error(tg_optimizer_step(a), "parameter 0", "float32");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* AdamW over a module whose weight is frozen: the weight keeps its index
 * (state_dict indices are PyTorch's), gets no gradient, no state and no
 * update (weight decay would move it); the bias takes its first step
 * exactly as in the same model with nothing frozen. A module with nothing trainable is
 * PyTorch's "empty parameter list". */
static void test_frozen_module(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_module *lin[2];
    tg_optimizer *opt[2];
    for (int k = 0; k < 2; k++) {
        tg_manual_seed(5);
        lin[k] = tg_linear_new(mt, 3, 2, true);
        tu_assert_ok(lin[k]);
    }
    tg_tensor *w = tg_module_get_parameter(lin[1], "weight");
    w->requires_grad = false;
    tg_tensor *x = tg_from_f32(mt, 2, (int64_t[]){2, 3}, (float[]){1, -2, 3, 0.5f, 4, -1});
    tg_adam_options o = tg_adamw_defaults();
    o.lr = 0.1, o.weight_decay = 0.5;
    for (int k = 0; k < 2; k++) tu_assert_ok(opt[k] = tg_adamw_new(mt, lin[k], o));
    assert_int_equal(tg_optimizer_num_params(opt[1]), 2);
    tg_tensor *w0 = tg_clone(mt, w);
    for (int step = 0; step < 3; step++)
        for (int k = 0; k < 2; k++) {
            tg_optimizer_zero_grad(opt[k]);
            tg_tensor *y = tg_module_forward(tp, lin[k], x);
            assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, y, y)), NULL, false), TG_OK);
            assert_int_equal(tg_optimizer_step(opt[k]), TG_OK);
            tg_tape_reset(tp);
            /* the first step's bias gradient does not depend on the weight's update */
            if (step == 0 && k == 1)
                tu_assert_close(tg_module_get_parameter(lin[1], "bias"), tg_module_get_parameter(lin[0], "bias"), 0.0,
                                0.0, "the bias beside a frozen weight");
        }
    assert_null(w->grad);
    tu_assert_close(w, w0, 0.0, 0.0, "the frozen weight");
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(tp, opt[1], &sd), TG_OK);
    assert_int_equal(sd.n, 1 + 3);
    assert_null(sd_get(&sd, "state.0.step"));
    assert_true(tg_item(sd_get(&sd, "state.1.step")) == 3.0);
    assert_int_equal(tg_optimizer_step_count(opt[1]), 3);

    tg_tensor *b = tg_module_get_parameter(lin[1], "bias");
    b->requires_grad = false;
    tu_assert_null_error(tg_adamw_new(mt, lin[1], o), "AdamW", "empty parameter list");
    tu_assert_null_error(tg_sgd_new(mt, lin[1], (tg_sgd_options){.lr = 0.1}), "SGD", "empty parameter list");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* A user's optimizer type through the public API: state created zeroed at
 * a parameter's first step, the step count PyTorch keeps, the options copy,
 * the learning rate read at each step, state_dict under the type's names,
 * a failing step stopping the loop, bad types refused. */
typedef struct {
    double k;
    int fail_at;
} acc_options;

static tg_tensor *leaf2(tg_tape *tp, float a, float b)
{
    tg_tensor *t = tg_from_f32(tp, 1, (int64_t[]){2}, (float[]){a, b});
    t->requires_grad = true;
    return t;
}

static int acc_step(tg_optimizer *opt, tg_tensor *p, const tg_tensor *g, tg_tensor *const *st)
{
    const acc_options *o = tg_optimizer_options(opt);
    if (tg_optimizer_step_count(opt) == o->fail_at) return tg_error_status(TG_EINVAL, "Acc: refused step %d", o->fail_at);
    float *w = tg_data_ptr(p), *acc = tg_data_ptr(st[0]), *n = tg_data_ptr(st[1]);
    const float *d = tg_data_ptr(g);
    for (int64_t i = 0; i < tg_numel(p); i++) {
        acc[i] += d[i];
        n[i] = (float)tg_optimizer_step_count(opt);
        w[i] -= (float)(tg_optimizer_lr(opt) * o->k) * acc[i];
    }
    return TG_OK;
}

static void test_user_type(void **state)
{
    (void)state;
    static const char *const names[] = {"acc", "count"};
    static const tg_optimizer_type acc = {.name = "Acc", .nstate = 2, .state_names = names, .step = acc_step};
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_tensor *p = leaf2(mt, 1, 2);
    acc_options o = {.k = 2.0, .fail_at = 0};
    tg_optimizer *opt = tg_optimizer_new_params(mt, &acc, 1, &p, 0.5, &o, sizeof o);
    tu_assert_ok(opt);
    o.k = 100; /* the optimizer holds a copy */
    assert_string_equal(tg_optimizer_name(opt), "Acc");
    assert_ptr_equal(tg_optimizer_get_type(opt), &acc);
    assert_true(((const acc_options *)tg_optimizer_options(opt))->k == 2.0);
    assert_int_equal(tg_optimizer_step(opt), TG_OK); /* no gradient: skipped, no state */
    assert_int_equal(tg_optimizer_step_count(opt), 0);
    p->grad = tg_from_f32(mt, 1, (int64_t[]){2}, (float[]){1, -1});
    assert_int_equal(tg_optimizer_step(opt), TG_OK); /* acc = g: p -= 0.5 * 2 * g */
    assert_int_equal(tg_optimizer_set_lr(opt, 0.25), TG_OK);
    assert_int_equal(tg_optimizer_step(opt), TG_OK); /* acc = 2g: p -= 0.25 * 2 * 2g */
    const float *w = tg_data_ptr(p);
    assert_true(w[0] == 1 - 1 - 1 && w[1] == 2 + 1 + 1);
    assert_int_equal(tg_optimizer_step_count(opt), 2);
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(tp, opt, &sd), TG_OK);
    assert_int_equal(sd.n, 4);
    assert_true(tg_item(sd_get(&sd, "state.0.step")) == 2.0);
    assert_true(((const float *)tg_data_ptr(sd_get(&sd, "state.0.acc")))[1] == -2.0f);
    assert_true(((const float *)tg_data_ptr(sd_get(&sd, "state.0.count")))[0] == 2.0f);
    assert_true(tg_item(sd_get(&sd, "param_groups.0.lr")) == 0.25);

    /* into a fresh optimizer over a copy: the next step is the same */
    const float *pw = tg_data_ptr(p);
    tg_tensor *q = leaf2(mt, pw[0], pw[1]);
    q->grad = tg_clone(mt, p->grad);
    tg_optimizer *o2 = tg_optimizer_new_params(mt, &acc, 1, &q, 9.0, &(acc_options){.k = 2.0}, sizeof o);
    tu_assert_ok(o2);
    assert_int_equal(tg_optimizer_load_state_dict(o2, &sd), TG_OK);
    assert_true(tg_optimizer_lr(o2) == 0.25);
    assert_int_equal(tg_optimizer_step(opt), TG_OK);
    assert_int_equal(tg_optimizer_step(o2), TG_OK);
    tu_assert_close(q, p, 0.0, 0.0, "a step after load_state_dict");
    assert_int_equal(tg_optimizer_step_count(o2), 3);

    /* without steps in the state_dict (as SGD's): none saved, none taken,
     * and a loaded parameter continues at count 2 */
    assert_int_equal(tg_optimizer_set_step_in_state_dict(o2, false), TG_OK);
    tg_named_list nostep;
    assert_int_equal(tg_optimizer_state_dict(tp, o2, &nostep), TG_OK);
    assert_int_equal(nostep.n, 3);
    assert_null(sd_get(&nostep, "state.0.step"));
    tu_assert_status_error(tg_optimizer_load_state_dict(o2, &sd), "unexpected key 'state.0.step'");
    assert_int_equal(tg_optimizer_load_state_dict(o2, &nostep), TG_OK);
    assert_int_equal(tg_optimizer_step_count(o2), 1);
    assert_int_equal(tg_optimizer_step(o2), TG_OK);
    assert_int_equal(tg_optimizer_step_count(o2), 2);
    tu_assert_status_error(tg_optimizer_set_step_in_state_dict(NULL, true), "NULL");

    /* a step function's error stops the step with its message */
    tg_optimizer *bad = tg_optimizer_new_params(mt, &acc, 1, &q, 1.0, &(acc_options){.k = 1, .fail_at = 1}, sizeof o);
    tu_assert_ok(bad);
    tg_tensor *q0 = tg_detach(mt, tg_clone(mt, q));
    tu_assert_status_error(tg_optimizer_step(bad), "Acc: refused step 1");
    tu_assert_close(q, q0, 0.0, 0.0, "a refused step");
    assert_int_equal(tg_optimizer_step_count(bad), 0);

    /* bad types */
    tg_optimizer_type t = acc;
    t.name = NULL;
    tu_assert_null_error(tg_optimizer_new_params(mt, &t, 1, &p, 0.1, NULL, 0), "type");
    t = acc, t.step = NULL;
    tu_assert_null_error(tg_optimizer_new_params(mt, &t, 1, &p, 0.1, NULL, 0), "Acc", "no step function");
    t = acc, t.state_names = NULL;
    tu_assert_null_error(tg_optimizer_new_params(mt, &t, 1, &p, 0.1, NULL, 0), "Acc", "state");
    static const char *const dup[] = {"acc", "acc"}, *const step[] = {"acc", "step"};
    t = acc, t.state_names = dup;
    tu_assert_null_error(tg_optimizer_new_params(mt, &t, 1, &p, 0.1, NULL, 0), "'acc' given twice");
    t = acc, t.state_names = step;
    tu_assert_null_error(tg_optimizer_new_params(mt, &t, 1, &p, 0.1, NULL, 0), "not 'step'");
    tu_assert_null_error(tg_optimizer_new_params(mt, &acc, 1, &p, -1.0, NULL, 0), "Acc", "learning rate");
    tu_assert_null_error(tg_optimizer_new_params(mt, &acc, 1, &p, 0.1, NULL, 8), "Acc", "NULL options");
    tu_assert_null_error(tg_optimizer_new(mt, &acc, NULL, 0.1, NULL, 0), "Acc", "NULL");
    tu_assert_null_error(tg_optimizer_new(mt, NULL, NULL, 0.1, NULL, 0), "type");
    assert_null(tg_optimizer_options(NULL));
    assert_int_equal(tg_optimizer_step_count(NULL), 0);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* Non-finite gradients are applied as PyTorch applies them (values from
 * torch 1.13: Adam / AdamW(lr=0.1) on ones(4), then clip_grad_norm_). */
static void test_nonfinite(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new();
    int64_t s4[1] = {4}, s3[1] = {3};
    const float g1[4] = {INFINITY, NAN, 1.0f, -INFINITY}, ones[4] = {1, 1, 1, 1};
    /* after step 1 and step 2 (gradient ones); NAN marks nan */
    const double want[2][2][4] = {
        {{NAN, NAN, 0.9000000357627869, NAN}, {NAN, NAN, 0.800000011920929, NAN}},   /* Adam */
        {{NAN, NAN, 0.8990000486373901, NAN}, {NAN, NAN, 0.798101007938385, NAN}}, /* AdamW */
    };
    for (int kind = 0; kind < 2; kind++) {
        tg_tensor *p = tg_parameter_new(mt, TG_F32, 1, s4);
        bool prev = tg_set_grad_enabled(false);
        assert_int_equal(tg_fill_(p, 1.0), TG_OK);
        tg_set_grad_enabled(prev);
        tg_adam_options o = kind ? tg_adamw_defaults() : tg_adam_defaults();
        o.lr = 0.1;
        tg_optimizer *a = kind ? tg_adamw_new_params(mt, 1, &p, o) : tg_adam_new_params(mt, 1, &p, o);
        tu_assert_ok(a);
        p->grad = tg_from_f32(mt, 1, s4, g1);
        assert_int_equal(tg_optimizer_step(a), TG_OK);
        tu_assert_close(p, tg_from_f64(mt, 1, s4, want[kind][0]), 1e-7, 0, "non-finite gradient, step 1");
        tg_named_list sd;
        assert_int_equal(tg_optimizer_state_dict(mt, a, &sd), TG_OK);
        const double m[4] = {INFINITY, NAN, 0.10000000149011612, -INFINITY};
        const double v[4] = {INFINITY, NAN, 0.0010000000474974513, INFINITY};
        tu_assert_close(sd_get(&sd, "state.0.exp_avg"), tg_from_f64(mt, 1, s4, m), 1e-7, 0, "exp_avg");
        tu_assert_close(sd_get(&sd, "state.0.exp_avg_sq"), tg_from_f64(mt, 1, s4, v), 1e-7, 0, "exp_avg_sq");
        p->grad = tg_from_f32(mt, 1, s4, ones);
        assert_int_equal(tg_optimizer_step(a), TG_OK);
        tu_assert_close(p, tg_from_f64(mt, 1, s4, want[kind][1]), 1e-7, 0, "non-finite gradient, step 2");
    }
    /* clip_grad_norm_: an infinite norm scales by 0 (inf * 0 = nan); a nan
     * norm makes every gradient nan, for the inf norm too */
    const float ginf[3] = {INFINITY, 1, 2}, gnan[3] = {NAN, 1, 2};
    const double cinf[3] = {NAN, 0, 0}, cnan[3] = {NAN, NAN, NAN};
    tg_tensor *q = tg_parameter_new(mt, TG_F32, 1, s3);
    double total = 0;
    q->grad = tg_from_f32(mt, 1, s3, ginf);
    assert_int_equal(tg_clip_grad_norm_(1, &q, 1.0, 2.0, &total), TG_OK);
    assert_true(isinf(total) && total > 0);
    tu_assert_close(q->grad, tg_from_f64(mt, 1, s3, cinf), 0, 0, "clip, inf gradient");
    for (int k = 0; k < 2; k++) {
        q->grad = tg_from_f32(mt, 1, s3, gnan);
        assert_int_equal(tg_clip_grad_norm_(1, &q, 1.0, k ? INFINITY : 2.0, &total), TG_OK);
        assert_true(isnan(total));
        tu_assert_close(q->grad, tg_from_f64(mt, 1, s3, cnan), 0, 0, "clip, nan gradient");
    }
    tg_tape_free(mt);
}

/* ---- SGD through the generic API ------------------------------------------------------------------- */

/* torch.optim.SGD's update in double, for k steps of the gradients g[k]. */
static void sgd_by_hand(double *p, double *buf, const double *g, int n, bool first, tg_sgd_options o)
{
    for (int i = 0; i < n; i++) {
        double d = g[i] + o.weight_decay * p[i];
        if (o.momentum != 0) {
            buf[i] = first ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
            d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
        }
        p[i] -= o.lr * d;
    }
}

static void test_sgd_generic(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    const tg_sgd_options opts[3] = {
        {0.1, 0.9, 0.1, 0.01, false},
        {0.05, 0.8, 0.0, 0.0, true},
        {0.2, 0.0, 0.0, 0.1, false},
    };
    int64_t s6[1] = {6};
    for (int c = 0; c < 3; c++) {
        tg_generator *gen = tg_generator_new(40 + (uint64_t)c);
        tg_tensor *init = tg_randn(tp, TG_F64, 1, s6, gen);
        tg_tensor *a = leaf_copy(mt, init), *b = leaf_copy(mt, init);
        tg_optimizer *oa = tg_sgd_new_params(mt, 1, &a, opts[c]);
        tg_sgd *ob = tg_sgd_new_params(mt, 1, &b, opts[c]);
        tu_assert_ok(oa);
        tu_assert_ok(ob);
        double p[6], buf[6] = {0}, g[6];
        assert_int_equal(tg_copy_to_f64(init, p), TG_OK);
        for (int k = 0; k < 4; k++) {
            tg_tensor *gt = tg_randn(tp, TG_F64, 1, s6, gen);
            assert_int_equal(tg_copy_to_f64(gt, g), TG_OK);
            if (!a->grad) a->grad = tg_zeros_like(mt, a), b->grad = tg_zeros_like(mt, b);
            tg_copy_(a->grad, gt);
            tg_copy_(b->grad, gt);
            assert_int_equal(tg_optimizer_step(oa), TG_OK);
            assert_int_equal(tg_sgd_step(ob), TG_OK);
            sgd_by_hand(p, buf, g, 6, k == 0, opts[c]);
            tu_assert_close(a, b, 0.0, 0.0, "tg_optimizer_step vs tg_sgd_step");
            tu_assert_close(a, tg_from_f64(tp, 1, s6, p), 1e-14, 1e-15, "SGD by hand");
        }
        tg_named_list sd;
        assert_int_equal(tg_optimizer_state_dict(tp, oa, &sd), TG_OK);
        if (opts[c].momentum != 0) {
            assert_int_equal(sd.n, 2);
            assert_string_equal(sd.names[1], "state.0.momentum_buffer");
            tu_assert_close(sd.tensors[1], tg_from_f64(tp, 1, s6, buf), 1e-14, 1e-15, "momentum_buffer");
        } else {
            assert_int_equal(sd.n, 1); /* plain SGD has no state */
        }
        assert_string_equal(sd.names[0], "param_groups.0.lr");
        assert_true(tg_item(sd.tensors[0]) == opts[c].lr);
        tg_generator_free(gen);
    }
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* SGD's momentum buffers through a file: the loaded optimizer continues as
 * the original does (without them, its next step would differ). */
static void test_sgd_state_round_trip(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    int64_t s23[2] = {2, 3}, s4[1] = {4};
    tg_generator *gen = tg_generator_new(7);
    tg_tensor *pa[2] = {leaf_copy(mt, tg_randn(tp, TG_F32, 2, s23, gen)),
                        leaf_copy(mt, tg_randn(tp, TG_F32, 1, s4, gen))};
    tg_sgd_options o = {0.1, 0.9, 0.0, 0.01, true};
    tg_sgd *a = tg_sgd_new_params(mt, 2, pa, o);
    tu_assert_ok(a);
    tg_tensor *grads[4][2];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++) grads[k][i] = tg_randn(mt, TG_F32, pa[i]->ndim, pa[i]->shape, gen);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 2; i++) pa[i]->grad = tg_clone(mt, grads[k][i]);
        assert_int_equal(tg_sgd_step(a), TG_OK);
    }
    char path[256];
    tmp_path(path, sizeof path, "sgd_state.safetensors");
    assert_int_equal(tg_optimizer_save(a, path), TG_OK);
    tg_tensor *pb[2] = {leaf_copy(mt, pa[0]), leaf_copy(mt, pa[1])};
    tg_tensor *pc[2] = {leaf_copy(mt, pa[0]), leaf_copy(mt, pa[1])};
    tg_sgd *b = tg_sgd_new_params(mt, 2, pb, (tg_sgd_options){0.3, 0.9, 0.0, 0.01, true});
    tg_sgd *c = tg_sgd_new_params(mt, 2, pc, o); /* no state loaded */
    tu_assert_ok(b);
    tu_assert_ok(c);
    assert_int_equal(tg_optimizer_load(b, path), TG_OK);
    assert_true(tg_optimizer_lr(b) == 0.1);
    assert_same_state(a, b);
    for (int k = 2; k < 4; k++) {
        for (int i = 0; i < 2; i++) {
            pa[i]->grad = tg_clone(mt, grads[k][i]);
            pb[i]->grad = tg_clone(mt, grads[k][i]);
            pc[i]->grad = tg_clone(mt, grads[k][i]);
        }
        assert_int_equal(tg_optimizer_step(a), TG_OK);
        assert_int_equal(tg_optimizer_step(b), TG_OK);
        assert_int_equal(tg_optimizer_step(c), TG_OK);
        for (int i = 0; i < 2; i++) tu_assert_close(pb[i], pa[i], 0.0, 0.0, "SGD loaded vs original");
    }
    assert_true(max_rel(pc[0], pa[0]) > 1e-3);

    /* a momentum buffer of the wrong shape; SGD without momentum has no state to take */
    tg_named_list sd;
    assert_int_equal(tg_optimizer_state_dict(tp, a, &sd), TG_OK);
    assert_int_equal(sd.n, 3);
    tg_named_list l = sd_edit(tp, &sd, "state.0.momentum_buffer", tg_zeros(tp, TG_F32, 1, s4), NULL, NULL);
    tu_assert_status_error(tg_optimizer_load_state_dict(b, &l), "SGD", "size mismatch", "state.0.momentum_buffer");
    tg_sgd *plain = tg_sgd_new_params(mt, 2, pc, (tg_sgd_options){0.1, 0, 0, 0, false});
    tu_assert_status_error(tg_optimizer_load(plain, path), "momentum_buffer");
    assert_same_state(a, b);
    unlink(path);
    tg_generator_free(gen);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- (d) clip_grad_norm_ ---------------------------------------------------------------------------------- */

static void test_clip_case(void **state)
{
    const json_t *c = *state;
    const char *name = jstr(c, "name");
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    const json_t *grads = jget(c, "grads"), *clipped = jget(c, "clipped");
    tg_dtype dt = dtype_of(c);
    tg_tensor *ps[2];
    for (int i = 0; i < 2; i++) {
        tg_tensor *g = tu_tensor_from_json(mt, json_array_get(grads, (size_t)i), TG_DTYPE_COUNT);
        assert_int_equal(g->dtype, dt);
        ps[i] = tg_parameter_new(mt, dt, g->ndim, g->shape);
        ps[i]->grad = g;
    }
    double norm_type = jnum(c, "norm_type"), total = -1;
    if (strcmp(name, "inf") == 0) assert_true(isinf(norm_type));
    assert_int_equal(tg_clip_grad_norm_(2, ps, jnum(c, "max_norm"), norm_type, &total), TG_OK);
    double want = jnum(c, "total_norm");
    if (fabs(total - want) > CLIP_RTOL * fabs(want)) fail_msg("%s: total norm %.9g, want %.9g", name, total, want);
    if (fabs(total - want) / want > g_max_rel_clip) g_max_rel_clip = fabs(total - want) / want;
    bool scaled = false;
    for (int i = 0; i < 2; i++) {
        char what[128];
        snprintf(what, sizeof what, "%s: clipped grad %d", name, i);
        tg_tensor *w = tu_tensor_from_json(tp, json_array_get(clipped, (size_t)i), TG_DTYPE_COUNT);
        tu_assert_close(ps[i]->grad, w, CLIP_RTOL, CLIP_ATOL, what);
        double r = max_rel(ps[i]->grad, w);
        if (r > g_max_rel_clip) g_max_rel_clip = r;
        tg_tensor *orig = tu_tensor_from_json(tp, json_array_get(grads, (size_t)i), TG_DTYPE_COUNT);
        scaled = scaled || max_rel(w, orig) > 0;
    }
    /* PyTorch scaled exactly when max_norm < total */
    assert_true(scaled == (jnum(c, "max_norm") < want));

    /* the same through an optimizer, and with total_norm NULL */
    for (int i = 0; i < 2; i++) ps[i]->grad = tu_tensor_from_json(mt, json_array_get(grads, (size_t)i), TG_DTYPE_COUNT);
    tg_sgd *s = tg_sgd_new_params(mt, 2, ps, (tg_sgd_options){0.1, 0, 0, 0, false});
    double t2 = -1;
    assert_int_equal(tg_optimizer_clip_grad_norm_(s, jnum(c, "max_norm"), norm_type, &t2), TG_OK);
    assert_true(t2 == total);
    for (int i = 0; i < 2; i++) ps[i]->grad = tu_tensor_from_json(mt, json_array_get(grads, (size_t)i), TG_DTYPE_COUNT);
    assert_int_equal(tg_clip_grad_norm_(2, ps, jnum(c, "max_norm"), norm_type, NULL), TG_OK);
    for (int i = 0; i < 2; i++)
        tu_assert_close(ps[i]->grad, tu_tensor_from_json(tp, json_array_get(clipped, (size_t)i), TG_DTYPE_COUNT),
                        CLIP_RTOL, CLIP_ATOL, "clipped (total_norm NULL)");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_clip_errors_and_skips(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new();
    int64_t s2[1] = {2}, s3[1] = {3};
    tg_tensor *a = tg_parameter_new(mt, TG_F32, 1, s2), *b = tg_parameter_new(mt, TG_F32, 1, s3);
    tg_tensor *c = tg_parameter_new(mt, TG_F64, 1, s2);
    const float ga[2] = {3, 4};
    const double gc[2] = {12, 0};
    a->grad = tg_from_f32(mt, 1, s2, ga);
    c->grad = tg_from_f64(mt, 1, s2, gc);
    tg_tensor *ps[3] = {a, b, c}; /* b has no gradient: skipped */
    double total = -1;
    assert_int_equal(tg_clip_grad_norm_(3, ps, 100.0, 2.0, &total), TG_OK);
    assert_true(fabs(total - 13.0) < 1e-12);
    assert_null(b->grad);
    assert_true(tg_item_at(a->grad, 0) == 3.0f); /* not clipped: 100 > 13 */
    assert_int_equal(tg_clip_grad_norm_(3, ps, 100.0, 1.0, &total), TG_OK);
    assert_true(total == 19.0);
    assert_int_equal(tg_clip_grad_norm_(3, ps, 100.0, INFINITY, &total), TG_OK);
    assert_true(total == 12.0);
    /* clipped to 6.5: every gradient halved (6.5 / (13 + 1e-6)) */
    assert_int_equal(tg_clip_grad_norm_(3, ps, 6.5, 2.0, &total), TG_OK);
    assert_true(fabs(tg_item_at(a->grad, 1) - 2.0) < 1e-6);
    assert_true(fabs(tg_item_at(c->grad, 0) - 6.0) < 1e-6);
    assert_true(tg_item_at(a->grad, 1) < 2.0f); /* the 1e-6 */

    /* errors, gradients unchanged */
    float before = (float)tg_item_at(a->grad, 0);
    total = -1;
    tu_assert_status_error(tg_clip_grad_norm_(3, ps, 1.0, 0.0, &total), "norm_type");
    tu_assert_status_error(tg_clip_grad_norm_(3, ps, 1.0, -2.0, &total), "norm_type");
    tu_assert_status_error(tg_clip_grad_norm_(3, ps, 1.0, NAN, &total), "norm_type");
    tu_assert_status_error(tg_clip_grad_norm_(3, ps, -1.0, 2.0, &total), "max_norm");
    tu_assert_status_error(tg_clip_grad_norm_(3, ps, NAN, 2.0, &total), "max_norm");
    tu_assert_status_error(tg_clip_grad_norm_(-1, ps, 1.0, 2.0, &total), "parameter list");
    tu_assert_status_error(tg_clip_grad_norm_(2, NULL, 1.0, 2.0, &total), "parameter list");
    tg_tensor *withnull[2] = {a, NULL};
    tu_assert_status_error(tg_clip_grad_norm_(2, withnull, 0.1, 2.0, &total), "parameter 1");
    tu_assert_status_error(tg_module_clip_grad_norm_(NULL, 1.0, 2.0, &total), "NULL");
    tu_assert_status_error(tg_optimizer_clip_grad_norm_(NULL, 1.0, 2.0, &total), "NULL");
    assert_true(total == -1);
    assert_true((float)tg_item_at(a->grad, 0) == before);

    /* no gradients at all: the norm is 0 */
    tg_tensor *none[1] = {b};
    assert_int_equal(tg_clip_grad_norm_(1, none, 1.0, 2.0, &total), TG_OK);
    assert_true(total == 0.0);
    assert_int_equal(tg_clip_grad_norm_(0, NULL, 1.0, 2.0, &total), TG_OK);
    assert_true(total == 0.0);
    /* max_norm 0 zeroes the gradients */
    assert_int_equal(tg_clip_grad_norm_(1, ps, 0.0, 2.0, &total), TG_OK);
    assert_true(tg_item_at(a->grad, 0) == 0.0 && tg_item_at(a->grad, 1) == 0.0);

    /* over a module's parameters */
    tg_manual_seed(1);
    tg_module *lin = tg_linear_new(mt, 3, 2, true);
    tu_assert_ok(lin);
    tg_tensor *w = tg_module_get_parameter(lin, "weight"), *bias = tg_module_get_parameter(lin, "bias");
    const float gw[6] = {1, -2, 2, 0, 0, 0}, gb[2] = {0, 4};
    int64_t s23[2] = {2, 3};
    w->grad = tg_from_f32(mt, 2, s23, gw);
    bias->grad = tg_from_f32(mt, 1, s2, gb);
    assert_int_equal(tg_module_clip_grad_norm_(lin, 2.5, 2.0, &total), TG_OK);
    assert_true(fabs(total - 5.0) < 1e-12); /* sqrt(1 + 4 + 4 + 16) */
    assert_true(fabs(tg_item_at(w->grad, 0) - 0.5) < 1e-6);
    assert_true(fabs(tg_item_at(bias->grad, 1) - 2.0) < 1e-6);
    assert_true(tg_item_at(bias->grad, 0) == 0.0);
    tg_tape_free(mt);
}

/* ---- (e) the learning-rate schedule ------------------------------------------------------------------------- */

static void test_lr_case(void **state)
{
    const json_t *c = *state;
    tg_lr_schedule s = {jnum(c, "initial_lr"), jnum(c, "peak_lr"), jnum(c, "min_lr"), jint(c, "warmup_steps"),
                        jint(c, "total_steps")};
    assert_int_equal(tg_lr_schedule_check(&s), TG_OK);
    const json_t *lrs = jget(c, "lrs");
    assert_int_equal((int64_t)json_array_size(lrs), s.total_steps);
    for (int64_t k = 0; k < s.total_steps; k++) {
        double want = json_real_value(json_array_get(lrs, (size_t)k)), got = tg_lr_schedule_at(&s, k);
        double rel = want != 0 ? fabs(got - want) / fabs(want) : fabs(got);
        if (rel > LR_RTOL) fail_msg("step %lld: lr %.17g, want %.17g", (long long)k, got, want);
        if (rel > g_max_rel_lr) g_max_rel_lr = rel;
    }
    assert_true(tg_lr_schedule_at(&s, 0) == s.initial_lr);
    /* past the end: min_lr */
    assert_true(tg_lr_schedule_at(&s, s.total_steps) == s.min_lr);
    assert_true(tg_lr_schedule_at(&s, s.total_steps + 1) == s.min_lr);
    assert_true(tg_lr_schedule_at(&s, s.total_steps * 100) == s.min_lr);
    assert_true(tg_lr_schedule_at(&s, INT64_MAX) == s.min_lr);
    /* the decay is monotonic */
    for (int64_t k = s.warmup_steps + 1; k <= s.total_steps; k++)
        assert_true(tg_lr_schedule_at(&s, k) <= tg_lr_schedule_at(&s, k - 1));
}

static void test_lr_errors_and_ends(void **state)
{
    (void)state;
    const tg_lr_schedule ok = {1e-4, 1e-3, 1e-5, 4, 20};
    tg_lr_schedule s;
    assert_int_equal(tg_lr_schedule_check(&ok), TG_OK);

    s = ok, s.total_steps = 4;
    assert_int_equal(tg_lr_schedule_check(&s), TG_EINVAL);
    tu_assert_status_error(tg_lr_schedule_check(&s), "total_steps", "warmup_steps");
    tg_clear_error();
    assert_true(isnan(tg_lr_schedule_at(&s, 0)));
    tu_assert_status_error(TG_EINVAL, "total_steps");
    s = ok, s.total_steps = 2;
    assert_true(isnan(tg_lr_schedule_at(&s, 0)));
    tu_assert_status_error(TG_EINVAL, "total_steps");
    s = ok, s.warmup_steps = 0, s.total_steps = 0;
    assert_true(isnan(tg_lr_schedule_at(&s, 0)));
    s = ok, s.warmup_steps = -1;
    assert_true(isnan(tg_lr_schedule_at(&s, 0)));
    tu_assert_status_error(TG_EINVAL, "warmup_steps");

    const char *fields[3] = {"initial_lr", "peak_lr", "min_lr"};
    const double bad[3] = {-1e-4, NAN, INFINITY};
    for (int f = 0; f < 3; f++)
        for (int b = 0; b < 3; b++) {
            s = ok;
            double *r = f == 0 ? &s.initial_lr : f == 1 ? &s.peak_lr : &s.min_lr;
            *r = bad[b];
            tu_assert_status_error(tg_lr_schedule_check(&s), fields[f]);
            tg_clear_error();
            assert_true(isnan(tg_lr_schedule_at(&s, 5)));
            tu_assert_status_error(TG_EINVAL, fields[f]);
        }
    tu_assert_status_error(tg_lr_schedule_check(NULL), "NULL");
    assert_true(isnan(tg_lr_schedule_at(NULL, 0)));

    tg_clear_error();
    assert_true(isnan(tg_lr_schedule_at(&ok, -1)));
    tu_assert_status_error(TG_EINVAL, "negative step");
    tg_clear_error();
    assert_true(isnan(tg_lr_schedule_at(&ok, INT64_MIN)));
    tu_assert_status_error(TG_EINVAL, "negative step");

    /* warmup 0 starts at the peak; one step of decay ends at min_lr */
    s = (tg_lr_schedule){0.0, 5e-4, 5e-5, 0, 10};
    assert_int_equal(tg_lr_schedule_check(&s), TG_OK);
    assert_true(tg_lr_schedule_at(&s, 0) == 5e-4);
    assert_true(tg_lr_schedule_at(&s, 5) == 5e-5 + (5e-4 - 5e-5) * 0.5 * (1 + cos(3.14159265358979323846 * 0.5)));
    assert_true(tg_lr_schedule_at(&s, 10) == 5e-5);
    s = (tg_lr_schedule){1e-3, 1e-3, 1e-3, 0, 1};
    assert_true(tg_lr_schedule_at(&s, 0) == 1e-3);
    assert_true(tg_lr_schedule_at(&s, 7) == 1e-3);
    /* a rising "decay" (min above peak) is allowed: the formula as written */
    s = (tg_lr_schedule){0.0, 1e-4, 1e-3, 2, 4};
    assert_int_equal(tg_lr_schedule_check(&s), TG_OK);
    assert_true(tg_lr_schedule_at(&s, 1) == 5e-5);
    assert_true(tg_lr_schedule_at(&s, 9) == 1e-3);
}

/* ---- main ------------------------------------------------------------------------------------------------------ */

static int teardown(void **state)
{
    (void)state;
    json_decref(g_ref);
    if (g_tmpdir[0]) rmdir(g_tmpdir);
    printf("largest relative differences: Adam float32 %.3g, Adam float64 %.3g, clip_grad_norm_ %.3g, "
           "lr schedule %.3g\n",
           g_max_rel_adam_f32, g_max_rel_adam_f64, g_max_rel_clip, g_max_rel_lr);
    return 0;
}

/* Adds one test per case of pretrain.json's section, named prefix/<name>. */
static size_t add_cases(struct CMUnitTest *tests, char (*names)[128], size_t k, const char *section, const char *prefix,
                        CMUnitTestFunction fn)
{
    const json_t *cases = json_object_get(json_object_get(g_ref, section), "cases"), *c;
    size_t i;
    json_array_foreach(cases, i, c) {
        const json_t *nm = json_object_get(c, "name");
        if (nm)
            snprintf(names[k], sizeof names[k], "%s/%s", prefix, json_string_value(nm));
        else
            snprintf(names[k], sizeof names[k], "%s/%zu", prefix, i);
        tests[k].name = names[k];
        tests[k].test_func = fn;
        tests[k].initial_state = (void *)c;
        k++;
    }
    return k;
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_state_round_trip),   cmocka_unit_test(test_state_load_errors),
        cmocka_unit_test(test_state_partial),      cmocka_unit_test(test_state_duplicate_key),
        cmocka_unit_test(test_invalid_options),    cmocka_unit_test(test_names_and_params),
        cmocka_unit_test(test_tied_params),        cmocka_unit_test(test_params_without_grad),
        cmocka_unit_test(test_nonfinite),          cmocka_unit_test(test_frozen_module),
        cmocka_unit_test(test_user_type),
        cmocka_unit_test(test_sgd_generic),        cmocka_unit_test(test_sgd_state_round_trip),
        cmocka_unit_test(test_clip_errors_and_skips), cmocka_unit_test(test_lr_errors_and_ends),
    };
    const size_t nfixed = sizeof fixed / sizeof fixed[0];
    g_ref = tu_load_ref("pretrain.json");
    size_t na = json_array_size(json_object_get(json_object_get(g_ref, "adam"), "cases"));
    size_t nc = json_array_size(json_object_get(json_object_get(g_ref, "clip_grad_norm"), "cases"));
    size_t nl = json_array_size(json_object_get(json_object_get(g_ref, "lr_schedule"), "cases"));
    if (na < 6 || nc < 6 || nl < 2) {
        fprintf(stderr, "pretrain.json: too few cases (adam %zu, clip %zu, lr %zu)\n", na, nc, nl);
        return 1;
    }
    size_t n = na + nc + nl + nfixed;
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    char(*names)[128] = calloc(na + nc + nl, sizeof *names);
    if (!tests || !names) return 1;
    size_t k = 0;
    k = add_cases(tests, names, k, "adam", "adam", test_adam_case);
    k = add_cases(tests, names, k, "clip_grad_norm", "clip", test_clip_case);
    k = add_cases(tests, names, k, "lr_schedule", "lr", test_lr_case);
    for (size_t i = 0; i < nfixed; i++, k++) tests[k] = fixed[i];
    int rc = _cmocka_run_group_tests("optim", tests, n, NULL, teardown);
    free(tests);
    free(names);
    return rc;
}
