/* Version counters (tg_tensor_version, PyTorch's x._version) and the check
 * tg_backward makes with them: a tensor saved for backward and written
 * afterwards fails backward with PyTorch 1.13's message, before any
 * gradient is written.
 *
 * Every case below was run in PyTorch 1.13 (Debian's python3-torch,
 * /usr/bin/python3) with the same values, and asserts what PyTorch did:
 * whether backward raises, its message (PyTorch's text without the trailing
 * " Hint: enable anomaly detection ..." sentence) and the gradients when it
 * succeeds. Where tapegrad is deliberately stricter than PyTorch the case
 * says so.
 *
 * (1) Counting writes (test_version_*):
 *     - 0 when made (tg_from_f32, zeros, empty, scalar; NULL gives 0);
 *       +1 for each of copy_, fill_, add_, mul_scalar_, tg_set; the source
 *       of copy_ / add_ is not bumped. torch: x.copy_/fill_/add_/mul_/
 *       x[1] = v each +1.
 *     - +1 for init functions (kaiming_uniform_, zeros_) and random fills
 *       (uniform_, normal_, bernoulli_). torch: nn.init.kaiming_uniform_(w,
 *       a=5**0.5) and nn.init.zeros_ +1 each, w.uniform_/normal_/bernoulli_
 *       +1 each.
 *     - optimizer steps: SGD +1 per step on a parameter with a gradient, 0 on
 *       one without (skipped); Adam +1 per step; AdamW at least +1 (torch
 *       1.13's AdamW writes twice per step, mul_ then addcdiv_: +2);
 *       tg_backward does not bump the parameter. torch: SGD([p]).step() +1,
 *       Adam +1, a parameter without .grad +0.
 *     - module state dict loads (+1 per tensor), non-strict (only the keys
 *       given), from a file (tg_module_load), checkpoint loads (model tensors
 *       and a given user tensor +1). torch: lin.load_state_dict(sd) +1 each,
 *       strict=False with only 'weight': weight +1, bias +0.
 *     - all-reduce (tg_dist_all_reduce) and tg_dist_broadcast_module in one
 *       process without mpirun: +1 each tensor (the library's rule: every
 *       write through it counts; torch 1.13's c10d all_reduce/broadcast on a
 *       gloo group of one leave _version at 0, DDP's construction broadcast
 *       gives +1). tg_dist_broadcast takes raw memory, not a tensor: there
 *       is no version to check. The 2-rank collectives need mpirun and are
 *       not exercised here.
 *     - views (view, reshape as a view, transpose, permute, narrow, select,
 *       unsqueeze, squeeze, expand, detach, a view of a view) share their
 *       base's counter, whichever side is written; a reshape that copies, a
 *       contiguous copy and a clone have their own. torch: every one of
 *       these views reads the base's _version; b.t().reshape(6) is a copy.
 *     - a failed write does not bump: copy_ / add_ with a bad shape, tg_set
 *       out of range, fill_ of a leaf requiring grad in grad mode, uniform_
 *       of an int64 tensor, a load_state_dict refused for a bad shape
 *       (tapegrad leaves the module unchanged; torch 1.13 copies the keys
 *       that fit before raising: bias 2 -> 3).
 *     - results of ops start at 0 whatever their inputs' versions (torch:
 *       (b + 1)._version, b.clone()._version, b.t().contiguous()._version
 *       all 0).
 * (2) The two motivating snippets: y = x * w then x.fill_(5) (a saved input),
 *     and e = a.exp() then e.mul_(0) under no_grad (a saved output); also a
 *     0-d output. TG_ESTATE, the exact message, a .grad that held values
 *     keeps them bit for bit and a .grad that was NULL stays NULL. (In the
 *     first, torch 1.13 has already accumulated b.grad = [1, 1, 1] for
 *     y = x * w + b when MulBackward0 raises; tapegrad checks every node
 *     first, so b.grad stays NULL.)
 * (3) test_autograd.py's in-place cases that apply (in-place ops are never
 *     recorded in tapegrad, so the parts of test_inplace that differentiate
 *     through add_ / exp_ do not):
 *     - test_inplace, first part: z = x * y; q = z + y; w = z * y;
 *       z.add_(2): q.backward succeeds (AddBackward0 saves nothing; x.grad
 *       4, y.grad 2), w.backward fails (output 0 of MulBackward0).
 *     - test_inplace, last part: x = leaf.clone(); x.add_(10); (x + 2)
 *       backward gives leaf.grad 1; z = x * y; x.add_(2): fails with
 *       "output 0 of CloneBackward0, is at version 2; expected version 1".
 *     - test_no_grad_modifies_version: x *= 2 under no_grad fails z's
 *       backward.
 *     - writes through a view of a saved tensor (narrow, transpose, tg_set
 *       through select) fail; a saved view (x.t()) written through its base
 *       fails with the view's shape.
 *     - retain_graph: backward, write, backward again fails; the gradients
 *       of the first stay.
 *     - writes PyTorch allows: an input no node saved (y = x + w; x.fill_(5):
 *       w.grad = 2 y = [10, 14, 18] for sum(y * y); exp's input: a.grad =
 *       exp(a) of the values before the write; the w of x * w when x does
 *       not require grad: w.grad = x), a write after the graph's backward
 *       (no second backward; a new graph on the written values works), a
 *       write to a clone or a contiguous copy of a detached output; a write
 *       to tg_detach(e) itself fails.
 *     - a user function (tg_function_apply) whose tg_fn_save_for_backward'd
 *       input is written: a leaf input and a MulBackward0 output.
 * (4) float64 (torch.DoubleTensor), 2-D shapes ([2, 3], [5, 5], [3, 2]), a
 *     0-d shape ([]) and a tensor written twice (is at version 2).
 *
 * The messages were produced by, e.g.:
 *   /usr/bin/python3 -c "import torch; x = torch.tensor([1.,2.,3.]);
 *     w = torch.tensor([4.,5.,6.], requires_grad=True); y = x * w;
 *     x.fill_(5.0); y.sum().backward()"
 *   /usr/bin/python3 -c "import torch; a = torch.tensor([0.5,1.,2.],
 *     requires_grad=True); e = a.exp();
 *     with torch.no_grad(): e.mul_(0.0)
 *     e.sum().backward()"
 * and the same for each case below (the torch line is quoted at each).
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define FV(...) ((const float[]){__VA_ARGS__})
#define DV(...) ((const double[]){__VA_ARGS__})

#define VER(x) tg_tensor_version(x)

/* PyTorch 1.13's message up to the tensor's description. */
#define MODIFIED "one of the variables needed for gradient computation has been modified by an inplace operation: "

/* ---- helpers ----------------------------------------------------------------------------------------- */

static tg_tensor *f32(tg_tape *tp, int ndim, const int64_t *shape, const float *v)
{
    tg_tensor *t = tg_from_f32(tp, ndim, shape, v);
    assert_non_null(t);
    return t;
}

static tg_tensor *leaf32(tg_tape *tp, int ndim, const int64_t *shape, const float *v)
{
    tg_tensor *t = f32(tp, ndim, shape, v);
    assert_int_equal(tg_requires_grad_(t, true), TG_OK);
    return t;
}

static tg_tensor *full32(tg_tape *tp, int ndim, const int64_t *shape, double v, bool requires_grad)
{
    tg_tensor *t = tg_full(tp, TG_F32, ndim, shape, v);
    assert_non_null(t);
    if (requires_grad) assert_int_equal(tg_requires_grad_(t, true), TG_OK);
    return t;
}

static void check_vals_(const tg_tensor *t, int64_t n, const double *want, double tol, const char *what,
                        const char *file, int line)
{
    if (!t) {
        print_error("%s: got NULL (%s)\n", what, tg_last_error());
        _fail(file, line);
        return;
    }
    if (tg_numel(t) != n) {
        print_error("%s: %lld elements, want %lld\n", what, (long long)tg_numel(t), (long long)n);
        _fail(file, line);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double g = tg_item_at(t, i);
        if (!(fabs(g - want[i]) <= tol)) {
            print_error("%s: element %lld: got %.10g, want %.10g\n", what, (long long)i, g, want[i]);
            _fail(file, line);
            return;
        }
    }
}
#define check_vals(t, n, want, tol, what) check_vals_((t), (n), (want), (tol), (what), __FILE__, __LINE__)

/* Every element equal to v. */
static void check_all_(const tg_tensor *t, double v, const char *what, const char *file, int line)
{
    if (!t) {
        print_error("%s: got NULL\n", what);
        _fail(file, line);
        return;
    }
    for (int64_t i = 0; i < tg_numel(t); i++)
        if (tg_item_at(t, i) != v) {
            print_error("%s: element %lld: got %.10g, want %.10g\n", what, (long long)i, tg_item_at(t, i), v);
            _fail(file, line);
            return;
        }
}
#define check_all(t, v, what) check_all_((t), (v), (what), __FILE__, __LINE__)

static void check_version_(const tg_tensor *t, int64_t want, const char *what, const char *file, int line)
{
    int64_t got = tg_tensor_version(t);
    if (got != want) {
        print_error("%s: version %lld, want %lld\n", what, (long long)got, (long long)want);
        _fail(file, line);
    }
}
#define check_version(t, want, what) check_version_((t), (want), (what), __FILE__, __LINE__)

/* backward's status is TG_ESTATE and tg_last_error() is exactly want. */
static void expect_modified_(int st, const char *want, const char *file, int line)
{
    if (st != TG_ESTATE) {
        print_error("backward returned %d (%s), want TG_ESTATE (%d) with\n  '%s'\n", st,
                    st == TG_OK ? "success" : tg_last_error(), TG_ESTATE, want);
        _fail(file, line);
        return;
    }
    if (strcmp(tg_last_error(), want) != 0) {
        print_error("backward's message:\n  got  '%s'\n  want '%s'\n", tg_last_error(), want);
        _fail(file, line);
    }
}
#define expect_modified(st, want) expect_modified_((st), (want), __FILE__, __LINE__)

static void expect_ok_(int st, const char *what, const char *file, int line)
{
    if (st != TG_OK) {
        print_error("%s: status %d: %s\n", what, st, tg_last_error());
        _fail(file, line);
    }
}
#define expect_ok(st, what) expect_ok_((st), (what), __FILE__, __LINE__)

/* A leaf's .grad as it was: the tensor (or NULL) and its values' bits. */
#define SNAP_MAX 64
typedef struct {
    const tg_tensor *grad;
    int64_t n;
    double v[SNAP_MAX];
} grad_snap;

static grad_snap snap_grad(const tg_tensor *t)
{
    grad_snap s;
    memset(&s, 0, sizeof s);
    s.grad = t->grad;
    if (t->grad) {
        s.n = tg_numel(t->grad);
        assert_true(s.n <= SNAP_MAX);
        assert_int_equal(tg_copy_to_f64(t->grad, s.v), TG_OK);
    }
    return s;
}

static void assert_grad_kept_(const tg_tensor *t, const grad_snap *s, const char *what, const char *file, int line)
{
    if (!s->grad) {
        if (t->grad) {
            print_error("%s: .grad was NULL, backward set it (first element %g)\n", what, tg_item_at(t->grad, 0));
            _fail(file, line);
        }
        return;
    }
    if (t->grad != s->grad) {
        print_error("%s: .grad was replaced (%p, was %p)\n", what, (const void *)t->grad, (const void *)s->grad);
        _fail(file, line);
        return;
    }
    double now[SNAP_MAX];
    if (tg_numel(t->grad) != s->n || tg_copy_to_f64(t->grad, now) != TG_OK) {
        print_error("%s: .grad changed size\n", what);
        _fail(file, line);
        return;
    }
    if (memcmp(now, s->v, sizeof(double) * (size_t)s->n) != 0) {
        for (int64_t i = 0; i < s->n; i++)
            if (memcmp(&now[i], &s->v[i], sizeof(double)) != 0) {
                print_error("%s: .grad element %lld changed from %.10g to %.10g\n", what, (long long)i, s->v[i],
                            now[i]);
                break;
            }
        _fail(file, line);
    }
}
#define assert_grad_kept(t, s, what) assert_grad_kept_((t), &(s), (what), __FILE__, __LINE__)

static char g_tmpdir[64];

static const char *tmp_path(char *buf, size_t n, const char *name)
{
    if (!g_tmpdir[0]) {
        strcpy(g_tmpdir, "/tmp/tapegrad_test_version_XXXXXX");
        if (!mkdtemp(g_tmpdir)) fail_msg("mkdtemp failed");
    }
    snprintf(buf, n, "%s/%s", g_tmpdir, name);
    return buf;
}

/* ---- (1) counting writes ----------------------------------------------------------------------------- */

/* torch: x = torch.zeros(3); x.copy_(torch.ones(3)); x.fill_(2);
 * x.add_(torch.ones(3), alpha=2); x.mul_(3); x[1] = 5.0; nn.init.zeros_(x)
 * -> _version 1, 2, 3, 4, 5, 6; the sources stay at 0. */
static void test_version_in_place_ops(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    assert_int_equal(tg_tensor_version(NULL), 0);
    tg_tensor *x = f32(tp, 1, SH(3), FV(1, 2, 3));
    check_version(x, 0, "tg_from_f32");
    check_version(tg_zeros(tp, TG_F32, 2, SH(2, 3)), 0, "tg_zeros");
    check_version(tg_empty(tp, TG_F64, 1, SH(4)), 0, "tg_empty");
    check_version(tg_scalar(tp, TG_F32, 2.5), 0, "tg_scalar");
    check_version(tg_arange(tp, TG_F32, 0, 5, 1), 0, "tg_arange");

    tg_tensor *src = f32(tp, 1, SH(3), FV(7, 8, 9));
    expect_ok(tg_copy_(x, src), "copy_");
    check_version(x, 1, "after copy_");
    check_version(src, 0, "copy_'s source");
    check_vals(x, 3, DV(7, 8, 9), 0, "copy_ wrote");

    expect_ok(tg_fill_(x, 2.0), "fill_");
    check_version(x, 2, "after fill_");

    expect_ok(tg_add_(x, src, 2.0), "add_");
    check_version(x, 3, "after add_");
    check_version(src, 0, "add_'s addend");
    check_vals(x, 3, DV(16, 18, 20), 0, "add_ wrote");

    expect_ok(tg_mul_scalar_(x, 3.0), "mul_scalar_");
    check_version(x, 4, "after mul_scalar_");

    expect_ok(tg_set(x, SH(1), 5.0), "tg_set");
    check_version(x, 5, "after tg_set");
    check_vals(x, 3, DV(48, 5, 60), 0, "tg_set wrote");

    expect_ok(tg_init_zeros_(x), "init zeros_");
    check_version(x, 6, "after tg_init_zeros_");

    /* a copy of a broadcast source counts once */
    tg_tensor *row = tg_zeros(tp, TG_F32, 2, SH(2, 3));
    expect_ok(tg_copy_(row, src), "broadcasting copy_");
    check_version(row, 1, "after a broadcasting copy_");
    tg_tape_free(tp);
}

/* torch: w = torch.empty(3, 4); nn.init.kaiming_uniform_(w, a=5**0.5) -> 1;
 * nn.init.uniform_(w, -1, 1) -> 2; w.uniform_() -> 3; w.normal_() -> 4;
 * w.bernoulli_(0.5) -> 5. */
static void test_version_init_and_random(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(42);
    tg_tensor *w = tg_empty(tp, TG_F32, 2, SH(3, 4));
    check_version(w, 0, "empty");
    expect_ok(tg_init_kaiming_uniform_(w, sqrt(5.0), TG_FAN_IN, NULL, g), "kaiming_uniform_");
    check_version(w, 1, "after tg_init_kaiming_uniform_");
    expect_ok(tg_init_uniform_(w, -1, 1, g), "init uniform_");
    check_version(w, 2, "after tg_init_uniform_");
    expect_ok(tg_uniform_(w, 0, 1, g), "uniform_");
    check_version(w, 3, "after tg_uniform_");
    expect_ok(tg_normal_(w, 0, 1, g), "normal_");
    check_version(w, 4, "after tg_normal_");
    expect_ok(tg_bernoulli_(w, 0.5, g), "bernoulli_");
    check_version(w, 5, "after tg_bernoulli_");
    /* a random tensor made by an op is new: 0 */
    check_version(tg_rand(tp, TG_F32, 1, SH(5), g), 0, "tg_rand");
    check_version(tg_randn(tp, TG_F64, 1, SH(5), g), 0, "tg_randn");
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* torch: p = nn.Parameter(torch.ones(3)); p.grad = torch.ones(3);
 * torch.optim.SGD([p], lr=0.1).step() -> 1; a parameter without .grad in
 * the same optimizer stays at its version; Adam +1 per step; AdamW +2 per
 * step (mul_ then addcdiv_). */
static void test_version_optimizer(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *step = tg_tape_new();
    tg_tensor *p = tg_parameter_new(mt, TG_F32, 1, SH(3));
    tg_tensor *q = tg_parameter_new(mt, TG_F32, 1, SH(3)); /* never reached: no gradient */
    tg_tensor *c = f32(step, 1, SH(3), FV(1, 2, 3));
    check_version(p, 0, "tg_parameter_new");
    expect_ok(tg_backward(tg_sum(step, tg_mul(step, p, c)), NULL, false), "backward");
    check_version(p, 0, "after backward (it writes .grad, not p)");
    assert_non_null(p->grad);
    assert_null(q->grad);

    tg_tensor *ps[2] = {p, q};
    tg_sgd *sgd = tg_sgd_new_params(mt, 2, ps, (tg_sgd_options){.lr = 0.1});
    tu_assert_ok(sgd);
    expect_ok(tg_sgd_step(sgd), "SGD step");
    check_version(p, 1, "after one SGD step");
    check_version(q, 0, "a parameter the step skipped (no gradient)");
    check_vals(p, 3, DV(-0.1, -0.2, -0.3), 1e-7, "SGD wrote");
    expect_ok(tg_optimizer_step(sgd), "SGD step 2");
    check_version(p, 2, "after two SGD steps");

    tg_tensor *p2 = tg_parameter_new(mt, TG_F32, 1, SH(3));
    expect_ok(tg_backward(tg_sum(step, tg_mul(step, p2, c)), NULL, false), "backward p2");
    tg_optimizer *adam = tg_adam_new_params(mt, 1, &p2, tg_adam_defaults());
    tu_assert_ok(adam);
    expect_ok(tg_optimizer_step(adam), "Adam step");
    check_version(p2, 1, "after one Adam step");

    tg_tensor *p3 = tg_parameter_new(mt, TG_F32, 1, SH(3));
    expect_ok(tg_backward(tg_sum(step, tg_mul(step, p3, c)), NULL, false), "backward p3");
    tg_optimizer *adamw = tg_adamw_new_params(mt, 1, &p3, tg_adamw_defaults());
    tu_assert_ok(adamw);
    expect_ok(tg_optimizer_step(adamw), "AdamW step");
    if (tg_tensor_version(p3) < 1) fail_msg("AdamW step: version %lld, want >= 1", (long long)tg_tensor_version(p3));
    tg_tape_free(step);
    tg_tape_free(mt);
}

/* torch: lin.load_state_dict(sd) -> weight and bias +1 each;
 * lin.load_state_dict({'weight': w}, strict=False) -> weight +1, bias +0. */
static void test_version_loads(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_module *a = tg_linear_new(mt, 3, 2, true), *b = tg_linear_new(mt, 3, 2, true);
    tu_assert_ok(a);
    tu_assert_ok(b);
    tg_tensor *aw = tg_module_get_parameter(a, "weight"), *ab = tg_module_get_parameter(a, "bias");
    tg_tensor *bw = tg_module_get_parameter(b, "weight"), *bb = tg_module_get_parameter(b, "bias");
    int64_t vw = VER(aw), vb = VER(ab), sw = VER(bw), sb = VER(bb);

    tg_named_list sd;
    expect_ok(tg_module_state_dict(tp, b, &sd), "state_dict");
    expect_ok(tg_module_load_state_dict(a, &sd), "load_state_dict");
    check_version(aw, vw + 1, "weight after load_state_dict");
    check_version(ab, vb + 1, "bias after load_state_dict");
    check_version(bw, sw, "the source module's weight (read, not written)");
    check_version(bb, sb, "the source module's bias");
    vw++, vb++;

    /* refused (weight of the wrong shape): nothing written, nothing bumped.
     * torch 1.13 copies the keys that fit before raising (bias +1); tapegrad
     * leaves the module unchanged. */
    const char *names[2] = {"weight", "bias"};
    tg_tensor *bad[2] = {tg_zeros(tp, TG_F32, 2, SH(3, 3)), tg_zeros(tp, TG_F32, 1, SH(2))};
    tg_named_list badsd = {2, names, bad};
    assert_int_not_equal(tg_module_load_state_dict(a, &badsd), TG_OK);
    check_version(aw, vw, "weight after a refused load");
    check_version(ab, vb, "bias after a refused load");

    /* non-strict with only the weight */
    tg_tensor *only[1] = {tg_ones(tp, TG_F32, 2, SH(2, 3))};
    tg_named_list part = {1, names, only};
    expect_ok(tg_module_load_state_dict_ex(a, &part, false, tp, NULL), "non-strict load");
    check_version(aw, vw + 1, "weight after a non-strict load that has it");
    check_version(ab, vb, "bias after a non-strict load without it");
    vw++;

    /* from a file */
    char path[128];
    tmp_path(path, sizeof path, "lin.safetensors");
    expect_ok(tg_module_save(b, path), "module save");
    expect_ok(tg_module_load(a, path), "module load");
    check_version(aw, vw + 1, "weight after tg_module_load");
    check_version(ab, vb + 1, "bias after tg_module_load");
    vw++, vb++;
    unlink(path);

    /* a checkpoint: the model's tensors and a given user tensor */
    tmp_path(path, sizeof path, "run.ckpt");
    const char *unames[1] = {"history"};
    tg_tensor *hist = f32(tp, 1, SH(2), FV(1.5, 2.5));
    tg_checkpoint ck = {.model = b, .epoch = 1, .tensors = {1, unames, &hist}};
    expect_ok(tg_checkpoint_save(&ck, path), "checkpoint save");
    check_version(hist, 0, "a user tensor saved (read)");
    tg_tensor *into = tg_zeros(tp, TG_F32, 1, SH(2));
    tg_checkpoint in = {.model = a, .tensors = {1, unames, &into}};
    expect_ok(tg_checkpoint_load(NULL, &in, path), "checkpoint load");
    check_version(aw, vw + 1, "weight after tg_checkpoint_load");
    check_version(ab, vb + 1, "bias after tg_checkpoint_load");
    check_version(into, 1, "the user tensor loaded into");
    check_vals(into, 2, DV(1.5, 2.5), 0, "the user tensor's values");
    unlink(path);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* One process, no mpirun: the collectives leave the values as they are but
 * are writes through the library (the spec's rule). torch 1.13's c10d
 * all_reduce on a gloo group of one does not bump _version; DDP's
 * construction broadcast gives +1. */
static void test_version_dist(void **state)
{
    (void)state;
    if (tg_dist_size() != 1) {
        print_message("test_version_dist: %d ranks; the counts below are for one process\n", tg_dist_size());
        return;
    }
    tg_tape *tp = tg_tape_new();
    tg_tensor *t = f32(tp, 1, SH(3), FV(1, 2, 3));
    expect_ok(tg_dist_all_reduce(t, TG_DIST_SUM), "all_reduce");
    check_version(t, 1, "after tg_dist_all_reduce");
    check_vals(t, 3, DV(1, 2, 3), 0, "all_reduce of one rank");
    tg_module *lin = tg_linear_new(tp, 3, 2, true);
    tu_assert_ok(lin);
    tg_tensor *w = tg_module_get_parameter(lin, "weight"), *b = tg_module_get_parameter(lin, "bias");
    int64_t vw = VER(w), vb = VER(b);
    expect_ok(tg_dist_broadcast_module(lin), "broadcast_module");
    check_version(w, vw + 1, "weight after tg_dist_broadcast_module");
    check_version(b, vb + 1, "bias after tg_dist_broadcast_module");
    tg_tape_free(tp);
}

/* torch: b = torch.zeros(2, 3); views b.view(6), b.t(), b.permute(1, 0),
 * b.narrow(1, 0, 2), b.select(0, 1), b.unsqueeze(0), ...expand(4, 2, 3),
 * b.detach(), b.reshape(3, 2); b.fill_(1) -> all 1; b.narrow(..).fill_(3)
 * -> base and b.t() 2; b.t().reshape(6) is a copy (0; its write leaves b). */
static void test_version_views(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *b = tg_zeros(tp, TG_F32, 2, SH(2, 3));
    const int perm[2] = {1, 0};
    tg_tensor *v[] = {
        tg_view(tp, b, 1, SH(6)),
        tg_reshape(tp, b, 2, SH(3, 2)), /* contiguous: a view */
        tg_transpose(tp, b, 0, 1),
        tg_t(tp, b),
        tg_permute(tp, b, perm),
        tg_narrow(tp, b, 1, 0, 2),
        tg_select(tp, b, 0, 1),
        tg_unsqueeze(tp, b, 0),
        tg_squeeze(tp, tg_unsqueeze(tp, b, 0), 0),
        tg_expand(tp, tg_unsqueeze(tp, b, 0), 3, SH(4, 2, 3)),
        tg_detach(tp, b),
        tg_narrow(tp, tg_t(tp, b), 0, 1, 2), /* a view of a view */
    };
    const char *vn[] = {"view", "reshape (view)", "transpose", "t", "permute", "narrow", "select", "unsqueeze",
                        "squeeze", "expand", "detach", "narrow of t"};
    size_t nv = sizeof v / sizeof v[0];
    for (size_t i = 0; i < nv; i++) {
        tu_assert_ok(v[i]);
        check_version(v[i], 0, vn[i]);
    }

    expect_ok(tg_fill_(b, 1.0), "fill_ base");
    check_version(b, 1, "base after its write");
    for (size_t i = 0; i < nv; i++) check_version(v[i], 1, vn[i]);

    expect_ok(tg_fill_(v[5], 3.0), "fill_ through narrow");
    check_version(b, 2, "base after a write through narrow");
    for (size_t i = 0; i < nv; i++) check_version(v[i], 2, vn[i]);

    expect_ok(tg_set(v[6], SH(2), 7.0), "tg_set through select");
    check_version(b, 3, "base after tg_set through select");
    check_version(v[3], 3, "t after tg_set through select");
    assert_true(tg_get(b, SH(1, 2)) == 7.0);

    expect_ok(tg_mul_scalar_(v[10], 2.0), "mul_ through detach");
    check_version(b, 4, "base after a write through detach");
    expect_ok(tg_add_(v[2], v[3], 1.0), "add_ through transpose");
    check_version(b, 5, "base after a write through transpose");
    check_version(v[11], 5, "a view of a view");

    /* copies have their own counter */
    tg_tensor *rc = tg_reshape(tp, tg_t(tp, b), 1, SH(6)); /* not viewable: a copy */
    tg_tensor *cc = tg_contiguous(tp, tg_t(tp, b));
    tg_tensor *cl = tg_clone(tp, b);
    check_version(rc, 0, "reshape that copies");
    check_version(cc, 0, "contiguous copy");
    check_version(cl, 0, "clone");
    expect_ok(tg_fill_(rc, 0.0), "fill_ reshape copy");
    expect_ok(tg_fill_(cc, 0.0), "fill_ contiguous copy");
    expect_ok(tg_fill_(cl, 0.0), "fill_ clone");
    check_version(rc, 1, "reshape copy after its write");
    check_version(b, 5, "base after writes to its copies");
    /* tg_contiguous of a contiguous tensor is the tensor itself */
    assert_ptr_equal(tg_contiguous(tp, b), b);
    tg_tape_free(tp);
}

/* torch: b.copy_(torch.ones(4)) raises and b._version stays; results of
 * ops start at 0: (b + 1)._version, b.clone()._version,
 * b.t().contiguous()._version are 0. */
static void test_version_failed_writes_and_new_results(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = f32(tp, 1, SH(3), FV(1, 2, 3));
    expect_ok(tg_fill_(x, 4.0), "fill_");
    check_version(x, 1, "after fill_");

    assert_int_not_equal(tg_copy_(x, tg_ones(tp, TG_F32, 1, SH(4))), TG_OK);
    check_version(x, 1, "after a refused copy_ (shape)");
    assert_int_not_equal(tg_add_(x, tg_ones(tp, TG_F32, 1, SH(2)), 1.0), TG_OK);
    check_version(x, 1, "after a refused add_ (shape)");
    assert_int_not_equal(tg_set(x, SH(3), 1.0), TG_OK);
    check_version(x, 1, "after tg_set out of range");
    check_vals(x, 3, DV(4, 4, 4), 0, "nothing written");
    tg_tensor *ints = tg_zeros(tp, TG_I64, 1, SH(3));
    assert_int_not_equal(tg_uniform_(ints, 0, 1, NULL), TG_OK);
    check_version(ints, 0, "after a refused uniform_ (int64)");

    /* a leaf requiring grad cannot be written in grad mode */
    tg_tensor *l = leaf32(tp, 1, SH(3), FV(1, 2, 3));
    assert_true(tg_is_grad_enabled());
    assert_int_not_equal(tg_fill_(l, 0.0), TG_OK);
    check_version(l, 0, "after a refused fill_ of a leaf requiring grad");
    bool prev = tg_set_grad_enabled(false);
    expect_ok(tg_fill_(l, 0.5), "fill_ under no-grad");
    tg_set_grad_enabled(prev);
    check_version(l, 1, "after fill_ under no-grad");

    /* results of ops are new storage */
    check_version(tg_add(tp, x, x), 0, "add");
    check_version(tg_mul_scalar(tp, x, 2.0), 0, "mul_scalar");
    check_version(tg_exp(tp, l), 0, "exp");
    check_version(tg_sum(tp, x), 0, "sum");
    check_version(tg_clone(tp, x), 0, "clone");
    check_version(tg_to_dtype(tp, x, TG_F64), 0, "to_dtype");
    check_version(tg_cat(tp, 2, (tg_tensor *const[]){x, x}, 0), 0, "cat");
    tg_tape_free(tp);
}

/* ---- (2) the motivating snippets -------------------------------------------------------------------- */

/* torch: x = torch.tensor([1.,2.,3.]); w = torch.tensor([4.,5.,6.],
 * requires_grad=True); (x * w).sum().backward(); y = x * w; x.fill_(5.0);
 * y.sum().backward() -> "... [torch.FloatTensor [3]] is at version 1;
 * expected version 0 instead."; w.grad stays [1, 2, 3]. */
static void test_snippet_saved_input(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *x = f32(t, 1, SH(3), FV(1, 2, 3));
    tg_tensor *w = leaf32(t, 1, SH(3), FV(4, 5, 6));
    tg_tensor *b = leaf32(t, 1, SH(3), FV(0.5, 0.5, 0.5));
    expect_ok(tg_backward(tg_sum(t, tg_mul(t, x, w)), NULL, false), "first backward");
    check_vals(w->grad, 3, DV(1, 2, 3), 0, "w.grad after the first backward");
    grad_snap sw = snap_grad(w), sb = snap_grad(b);

    /* the snippet itself */
    tg_tensor *y = tg_mul(t, x, w); /* MulBackward0 saves x */
    expect_ok(tg_fill_(x, 5.0), "fill_ x");
    check_version(x, 1, "x after fill_");
    expect_modified(tg_backward(tg_sum(t, y), NULL, false),
                    MODIFIED "[torch.FloatTensor [3]] is at version 1; expected version 0 instead.");
    assert_grad_kept(w, sw, "w");
    assert_grad_kept(b, sb, "b (not in this graph)");

    /* y = x * w + b: b's gradient would come straight from the sum. torch
     * 1.13 has accumulated b.grad = [1, 1, 1] when MulBackward0 raises;
     * tapegrad checks every saved tensor first: b.grad stays NULL. */
    x = f32(t, 1, SH(3), FV(1, 2, 3));
    y = tg_add(t, tg_mul(t, x, w), b);
    expect_ok(tg_fill_(x, 5.0), "fill_ x");
    expect_modified(tg_backward(tg_sum(t, y), NULL, false),
                    MODIFIED "[torch.FloatTensor [3]] is at version 1; expected version 0 instead.");
    assert_grad_kept(w, sw, "w");
    assert_grad_kept(b, sb, "b");
    assert_null(b->grad);
    tg_tape_free(t);
}

/* torch: a = torch.tensor([0.5,1.,2.], requires_grad=True); e = a.exp();
 * with torch.no_grad(): e.mul_(0.0); e.sum().backward() -> "...
 * [torch.FloatTensor [3]], which is output 0 of ExpBackward0, is at version
 * 1; expected version 0 instead."; 0-d: a = torch.tensor(1.5, ...) ->
 * "[torch.FloatTensor []], which is output 0 of ExpBackward0, ...". */
static void test_snippet_saved_output(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *a = leaf32(t, 1, SH(3), FV(0.5, 1, 2));
    expect_ok(tg_backward(tg_sum(t, tg_exp(t, a)), NULL, false), "first backward");
    check_vals(a->grad, 3, DV(exp(0.5), exp(1.0), exp(2.0)), 1e-6, "a.grad after the first backward");
    grad_snap sa = snap_grad(a);

    /* the snippet itself */
    tg_tensor *e = tg_exp(t, a); /* ExpBackward0 saves its result */
    tg_set_grad_enabled(false);
    expect_ok(tg_mul_scalar_(e, 0.0), "mul_scalar_ e");
    tg_set_grad_enabled(true);
    check_version(e, 1, "e after mul_scalar_");
    expect_modified(tg_backward(tg_sum(t, e), NULL, false),
                    MODIFIED "[torch.FloatTensor [3]], which is output 0 of ExpBackward0, is at version 1; expected "
                             "version 0 instead.");
    assert_grad_kept(a, sa, "a");

    /* 0-d */
    tg_tensor *a0 = tg_scalar(t, TG_F32, 1.5);
    assert_int_equal(tg_requires_grad_(a0, true), TG_OK);
    tg_tensor *e0 = tg_exp(t, a0);
    tg_set_grad_enabled(false);
    expect_ok(tg_mul_scalar_(e0, 0.0), "mul_scalar_ e0");
    tg_set_grad_enabled(true);
    grad_snap s0 = snap_grad(a0);
    expect_modified(tg_backward(e0, NULL, false),
                    MODIFIED "[torch.FloatTensor []], which is output 0 of ExpBackward0, is at version 1; expected "
                             "version 0 instead.");
    assert_grad_kept(a0, s0, "a0");
    assert_null(a0->grad);
    tg_tape_free(t);
}

/* ---- (3) PyTorch's test_autograd.py ----------------------------------------------------------------- */

/* test_inplace, first part, as torch 1.13 runs it with z.add_(2) under
 * no_grad: q.backward(ones, retain_graph=True) succeeds with x.grad 4 and
 * y.grad 2 everywhere; w.backward(ones) raises "[torch.FloatTensor [5, 5]],
 * which is output 0 of MulBackward0, is at version 1; expected version 0
 * instead." and the gradients stay. */
static void test_torch_inplace_saved_output(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *x = full32(t, 2, SH(5, 5), 1.0, true);
    tg_tensor *y = full32(t, 2, SH(5, 5), 4.0, true);
    tg_tensor *z = tg_mul(t, x, y);
    tg_tensor *q = tg_add(t, z, y);
    tg_tensor *w = tg_mul(t, z, y);
    tg_set_grad_enabled(false);
    expect_ok(tg_add_(z, full32(t, 2, SH(5, 5), 2.0, false), 1.0), "z.add_(2)");
    tg_set_grad_enabled(true);
    check_version(z, 1, "z after add_");
    tg_tensor *ones = full32(t, 2, SH(5, 5), 1.0, false);
    /* AddBackward0 saves nothing: it does not care that z changed */
    expect_ok(tg_backward(q, ones, true), "q.backward");
    check_all(x->grad, 4.0, "x.grad");
    check_all(y->grad, 2.0, "y.grad");
    grad_snap sx = snap_grad(x), sy = snap_grad(y);
    expect_modified(tg_backward(w, ones, false),
                    MODIFIED "[torch.FloatTensor [5, 5]], which is output 0 of MulBackward0, is at version 1; expected "
                             "version 0 instead.");
    assert_grad_kept(x, sx, "x");
    assert_grad_kept(y, sy, "y");
    tg_tape_free(t);
}

/* test_inplace, last part: leaf = ones(5, 5, requires_grad); x =
 * leaf.clone(); x.add_(10) (no_grad here); (x + 2).backward(ones) (with
 * retain_graph=True here, the same in torch) ->
 * leaf.grad 1; z = x * y; x.add_(2); z.backward(ones) raises
 * "[torch.FloatTensor [5, 5]], which is output 0 of CloneBackward0, is at
 * version 2; expected version 1 instead." */
static void test_torch_inplace_clone(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *lf = full32(t, 2, SH(5, 5), 1.0, true);
    tg_tensor *x = tg_clone(t, lf);
    tg_set_grad_enabled(false);
    expect_ok(tg_add_(x, full32(t, 2, SH(5, 5), 10.0, false), 1.0), "x.add_(10)");
    tg_set_grad_enabled(true);
    check_all(x, 11.0, "x");
    check_version(x, 1, "x after add_");
    check_version(lf, 0, "the leaf it was cloned from");
    tg_tensor *ones = full32(t, 2, SH(5, 5), 1.0, false);
    tg_tensor *y = tg_add_scalar(t, x, 2.0);
    /* retain_graph: tapegrad releases every node a backward ran (torch only
     * frees saved tensors, and x + 2 and clone keep none), and z's backward
     * goes through y's nodes again; torch gives the same with or without it */
    expect_ok(tg_backward(y, ones, true), "y.backward");
    check_all(lf->grad, 1.0, "leaf.grad");
    grad_snap sl = snap_grad(lf);
    tg_tensor *z = tg_mul(t, x, y); /* saves x at version 1 */
    tg_set_grad_enabled(false);
    expect_ok(tg_add_(x, full32(t, 2, SH(5, 5), 2.0, false), 1.0), "x.add_(2)");
    tg_set_grad_enabled(true);
    expect_modified(tg_backward(z, ones, false),
                    MODIFIED "[torch.FloatTensor [5, 5]], which is output 0 of CloneBackward0, is at version 2; "
                             "expected version 1 instead.");
    assert_grad_kept(lf, sl, "leaf");
    tg_tape_free(t);
}

/* test_no_grad_modifies_version: z = (x * y).sum(); with no_grad: x *= 2;
 * z.backward() raises "[torch.FloatTensor [5]] is at version 1; expected
 * version 0 instead." (x, a leaf with no grad_fn: no "output of" part). */
static void test_torch_no_grad_modifies_version(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *x = leaf32(t, 1, SH(5), FV(1, 2, 3, 4, 5));
    tg_tensor *y = leaf32(t, 1, SH(5), FV(2, 2, 2, 2, 2));
    tg_tensor *z = tg_sum(t, tg_mul(t, x, y));
    bool prev = tg_set_grad_enabled(false);
    expect_ok(tg_mul_scalar_(x, 2.0), "x *= 2");
    tg_set_grad_enabled(prev);
    expect_modified(tg_backward(z, NULL, false),
                    MODIFIED "[torch.FloatTensor [5]] is at version 1; expected version 0 instead.");
    assert_null(x->grad);
    assert_null(y->grad);
    tg_tape_free(t);
}

/* Writes through views of a saved tensor. torch: x = [[1,2,3],[4,5,6]];
 * w = ones(2, 3, requires_grad); y = x * w; then x.narrow(1, 0, 2).fill_(0)
 * / x.t().mul_(2) / x[1, 2] = 7 -> "[torch.FloatTensor [2, 3]] is at
 * version 1; expected version 0 instead."; m = x.t() * w (w (3, 2)), x.mul_(2)
 * -> "[torch.FloatTensor [3, 2]] is at version 1; ...". */
static void test_write_through_view(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    const char *want = MODIFIED "[torch.FloatTensor [2, 3]] is at version 1; expected version 0 instead.";
    for (int how = 0; how < 3; how++) {
        tg_tensor *x = f32(t, 2, SH(2, 3), FV(1, 2, 3, 4, 5, 6));
        tg_tensor *w = full32(t, 2, SH(2, 3), 1.0, true);
        tg_tensor *y = tg_mul(t, x, w);
        if (how == 0) expect_ok(tg_fill_(tg_narrow(t, x, 1, 0, 2), 0.0), "narrow fill_");
        if (how == 1) expect_ok(tg_mul_scalar_(tg_transpose(t, x, 0, 1), 2.0), "transpose mul_");
        if (how == 2) expect_ok(tg_set(tg_select(t, x, 0, 1), SH(2), 7.0), "select set");
        check_version(x, 1, "x after a write through a view");
        expect_modified(tg_backward(tg_sum(t, y), NULL, false), want);
        assert_null(w->grad);
    }
    /* the saved tensor is a view (x.t()); the write goes to its base */
    tg_tensor *x = f32(t, 2, SH(2, 3), FV(1, 2, 3, 4, 5, 6));
    tg_tensor *w = full32(t, 2, SH(3, 2), 1.0, true);
    tg_tensor *m = tg_mul(t, tg_t(t, x), w);
    expect_ok(tg_mul_scalar_(x, 2.0), "x.mul_(2)");
    expect_modified(tg_backward(tg_sum(t, m), NULL, false),
                    MODIFIED "[torch.FloatTensor [3, 2]] is at version 1; expected version 0 instead.");
    assert_null(w->grad);
    tg_tape_free(t);
}

/* torch: y = (x * w).sum(); y.backward(retain_graph=True) -> w.grad [1, 2, 3];
 * x.fill_(5.0); y.backward() raises "[torch.FloatTensor [3]] is at version
 * 1; expected version 0 instead."; w.grad stays [1, 2, 3]. */
static void test_retain_graph_then_write(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *x = f32(t, 1, SH(3), FV(1, 2, 3));
    tg_tensor *w = leaf32(t, 1, SH(3), FV(4, 5, 6));
    tg_tensor *y = tg_sum(t, tg_mul(t, x, w));
    expect_ok(tg_backward(y, NULL, true), "first backward");
    check_vals(w->grad, 3, DV(1, 2, 3), 0, "w.grad");
    grad_snap sw = snap_grad(w);
    expect_ok(tg_fill_(x, 5.0), "fill_ x");
    expect_modified(tg_backward(y, NULL, false),
                    MODIFIED "[torch.FloatTensor [3]] is at version 1; expected version 0 instead.");
    assert_grad_kept(w, sw, "w");
    tg_tape_free(t);
}

/* Writes PyTorch allows. torch:
 *   y = x + w; x.fill_(5.0); (y * y).sum().backward() -> w.grad [10, 14, 18]
 *   e = a.exp(); with no_grad: a.fill_(5); e.sum().backward() -> a.grad
 *     [1, 2.7183, 7.3891] (exp saves its result, not a)
 *   y = x * w (x without grad); with no_grad: w.mul_(2); y.sum().backward()
 *     -> w.grad [1, 2, 3] (MulBackward0 saves x only: w's gradient needs x)
 *   (x * w).sum().backward(); x.fill_(5.0) -> fine, x._version 1, w.grad
 *     [1, 2, 3]; a new (x * w).sum().backward() -> w.grad [6, 7, 8]. */
static void test_allowed_write_unsaved_add_input(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *x = f32(t, 1, SH(3), FV(1, 2, 3));
    tg_tensor *w = leaf32(t, 1, SH(3), FV(4, 5, 6));
    tg_tensor *y = tg_add(t, x, w); /* AddBackward0 saves nothing */
    expect_ok(tg_fill_(x, 5.0), "fill_ x");
    expect_ok(tg_backward(tg_sum(t, tg_mul(t, y, y)), NULL, false), "backward after writing an unsaved input");
    check_vals(w->grad, 3, DV(10, 14, 18), 0, "w.grad");
    tg_tape_free(t);
}

static void test_allowed_write_exp_input(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *a = leaf32(t, 1, SH(3), FV(0, 1, 2));
    tg_tensor *e = tg_exp(t, a); /* ExpBackward0 saves its result only */
    bool prev = tg_set_grad_enabled(false);
    expect_ok(tg_fill_(a, 5.0), "fill_ a");
    tg_set_grad_enabled(prev);
    expect_ok(tg_backward(tg_sum(t, e), NULL, false), "backward after writing exp's input");
    check_vals(a->grad, 3, DV(1, exp(1.0), exp(2.0)), 1e-6, "a.grad");
    tg_tape_free(t);
}

static void test_allowed_write_mul_operand_not_needed(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    /* x * w with x not requiring grad: only w's gradient is computed, and it
     * needs x, not w */
    tg_tensor *x = f32(t, 1, SH(3), FV(1, 2, 3));
    tg_tensor *w = leaf32(t, 1, SH(3), FV(4, 5, 6));
    tg_tensor *y = tg_mul(t, x, w);
    bool prev = tg_set_grad_enabled(false);
    expect_ok(tg_mul_scalar_(w, 2.0), "w.mul_(2)");
    tg_set_grad_enabled(prev);
    expect_ok(tg_backward(tg_sum(t, y), NULL, false), "backward after writing w (x * w, x without grad)");
    check_vals(w->grad, 3, DV(1, 2, 3), 0, "w.grad");
    tg_tape_free(t);
}

static void test_allowed_write_after_backward(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *x = f32(t, 1, SH(3), FV(1, 2, 3));
    tg_tensor *w = leaf32(t, 1, SH(3), FV(4, 5, 6));
    expect_ok(tg_backward(tg_sum(t, tg_mul(t, x, w)), NULL, false), "backward");
    expect_ok(tg_fill_(x, 5.0), "fill_ after backward");
    check_version(x, 1, "x");
    check_vals(w->grad, 3, DV(1, 2, 3), 0, "w.grad after the write");
    expect_ok(tg_backward(tg_sum(t, tg_mul(t, x, w)), NULL, false), "a new graph on the written x");
    check_vals(w->grad, 3, DV(6, 7, 8), 0, "w.grad");
    tg_tape_free(t);
}

/* torch: a = zeros(2, 3, requires_grad); e = a.exp();
 * e.detach().clone().fill_(9); e.detach().t().contiguous().fill_(9) ->
 * e._version 0; e.sum().backward(retain_graph=True) -> a.grad ones;
 * e.detach().fill_(9) -> e._version 1; e.sum().backward() raises
 * "[torch.FloatTensor [2, 3]], which is output 0 of ExpBackward0, is at
 * version 1; expected version 0 instead."; a.grad stays ones. */
static void test_detach_versus_copies(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *a = full32(t, 2, SH(2, 3), 0.0, true);
    tg_tensor *e = tg_exp(t, a);
    tg_tensor *c = tg_clone(t, tg_detach(t, e));
    tg_tensor *ct = tg_contiguous(t, tg_t(t, tg_detach(t, e)));
    expect_ok(tg_fill_(c, 9.0), "fill_ clone");
    expect_ok(tg_fill_(ct, 9.0), "fill_ contiguous copy");
    check_version(e, 0, "e after writes to its copies");
    check_version(c, 1, "clone");
    check_version(ct, 1, "contiguous copy");
    expect_ok(tg_backward(tg_sum(t, e), NULL, true), "backward after writing copies");
    check_all(a->grad, 1.0, "a.grad");
    grad_snap sa = snap_grad(a);
    tg_tensor *d = tg_detach(t, e);
    assert_false(d->requires_grad);
    expect_ok(tg_fill_(d, 9.0), "fill_ detach (grad mode on: it does not require grad)");
    check_version(e, 1, "e after a write through detach");
    expect_modified(tg_backward(tg_sum(t, e), NULL, false),
                    MODIFIED "[torch.FloatTensor [2, 3]], which is output 0 of ExpBackward0, is at version 1; expected "
                             "version 0 instead.");
    assert_grad_kept(a, sa, "a");
    tg_tape_free(t);
}

/* ---- a user function: y = x * x, saving x ----------------------------------------------------------- */

static tg_tensor *square_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    (void)n;
    if (tg_fn_save_for_backward(ctx, 1, in) != TG_OK) return NULL;
    return tg_mul(tp, in[0], in[0]);
}

static int square_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *gy, tg_tensor **gx)
{
    tg_tensor *x = tg_fn_saved(ctx, 0);
    gx[0] = tg_mul(tp, tg_mul_scalar(tp, x, 2.0), (tg_tensor *)gy);
    return gx[0] ? TG_OK : TG_ENOMEM;
}

static const tg_function square_fn = {"SquareBackward", square_forward, square_backward};

/* torch: class F(Function): forward saves x, returns x * x; backward 2 x g.
 * F.apply(a).sum().backward() -> a.grad [2, 4, 6]; a.fill_(0) under no_grad
 * after F.apply(a) -> "[torch.FloatTensor [3]] is at version 1; expected
 * version 0 instead."; m = a * 2; F.apply(m); m.fill_(0) ->
 * "[torch.FloatTensor [3]], which is output 0 of MulBackward0, is at version
 * 1; expected version 0 instead." */
static void test_user_function(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *a = leaf32(t, 1, SH(3), FV(1, 2, 3));
    expect_ok(tg_backward(tg_sum(t, tg_function_apply(t, &square_fn, 1, &a)), NULL, false), "backward");
    check_vals(a->grad, 3, DV(2, 4, 6), 0, "a.grad");
    grad_snap sa = snap_grad(a);

    tg_tensor *y = tg_function_apply(t, &square_fn, 1, &a);
    tu_assert_ok(y);
    bool prev = tg_set_grad_enabled(false);
    expect_ok(tg_fill_(a, 0.0), "fill_ a");
    tg_set_grad_enabled(prev);
    expect_modified(tg_backward(tg_sum(t, y), NULL, false),
                    MODIFIED "[torch.FloatTensor [3]] is at version 1; expected version 0 instead.");
    assert_grad_kept(a, sa, "a");

    tg_tensor *b = leaf32(t, 1, SH(3), FV(1, 2, 3));
    tg_tensor *m = tg_mul_scalar(t, b, 2.0);
    tg_tensor *ym = tg_function_apply(t, &square_fn, 1, &m);
    tu_assert_ok(ym);
    prev = tg_set_grad_enabled(false);
    expect_ok(tg_fill_(m, 0.0), "fill_ m");
    tg_set_grad_enabled(prev);
    expect_modified(tg_backward(tg_sum(t, ym), NULL, false),
                    MODIFIED "[torch.FloatTensor [3]], which is output 0 of MulBackward0, is at version 1; expected "
                             "version 0 instead.");
    assert_null(b->grad);
    tg_tape_free(t);
}

/* ---- (4) float64, 2-D, written twice ----------------------------------------------------------------- */

/* torch: x = torch.tensor([[1.,2.,3.],[4.,5.,6.]], dtype=torch.float64);
 * w = torch.ones(2, 3, dtype=torch.float64, requires_grad=True); y = x * w;
 * x.fill_(5.0); y.sum().backward() -> "[torch.DoubleTensor [2, 3]] is at
 * version 1; expected version 0 instead."; e = a.exp() (float64 (2, 3)),
 * e.add_(e) under no_grad -> "[torch.DoubleTensor [2, 3]], which is output 0
 * of ExpBackward0, is at version 1; ..."; two writes (x.fill_(5);
 * x.fill_(6)) -> "[torch.FloatTensor [3]] is at version 2; expected version
 * 0 instead." */
static void test_messages_f64_2d(void **state)
{
    (void)state;
    tg_tape *t = tg_tape_new();
    tg_tensor *x = tg_from_f64(t, 2, SH(2, 3), DV(1, 2, 3, 4, 5, 6));
    tg_tensor *w = tg_ones(t, TG_F64, 2, SH(2, 3));
    assert_int_equal(tg_requires_grad_(w, true), TG_OK);
    tg_tensor *y = tg_mul(t, x, w);
    expect_ok(tg_fill_(x, 5.0), "fill_ x");
    expect_modified(tg_backward(tg_sum(t, y), NULL, false),
                    MODIFIED "[torch.DoubleTensor [2, 3]] is at version 1; expected version 0 instead.");
    assert_null(w->grad);

    tg_tensor *a = tg_zeros(t, TG_F64, 2, SH(2, 3));
    assert_int_equal(tg_requires_grad_(a, true), TG_OK);
    tg_tensor *e = tg_exp(t, a);
    bool prev = tg_set_grad_enabled(false);
    expect_ok(tg_add_(e, e, 1.0), "e.add_(e)");
    tg_set_grad_enabled(prev);
    check_all(e, 2.0, "e");
    expect_modified(tg_backward(tg_sum(t, e), NULL, false),
                    MODIFIED "[torch.DoubleTensor [2, 3]], which is output 0 of ExpBackward0, is at version 1; "
                             "expected version 0 instead.");
    assert_null(a->grad);

    tg_tensor *x1 = f32(t, 1, SH(3), FV(1, 2, 3));
    tg_tensor *w1 = leaf32(t, 1, SH(3), FV(4, 5, 6));
    tg_tensor *y1 = tg_mul(t, x1, w1);
    expect_ok(tg_fill_(x1, 5.0), "fill_ 5");
    expect_ok(tg_fill_(x1, 6.0), "fill_ 6");
    expect_modified(tg_backward(tg_sum(t, y1), NULL, false),
                    MODIFIED "[torch.FloatTensor [3]] is at version 2; expected version 0 instead.");
    assert_null(w1->grad);
    tg_tape_free(t);
}

static int teardown(void **state)
{
    (void)state;
    if (g_tmpdir[0]) rmdir(g_tmpdir);
    return 0;
}

int main(int argc, char **argv)
{
    /* one rank of one without mpirun (dist.h) */
    if (tg_dist_init(&argc, &argv) != TG_OK) {
        fprintf(stderr, "test_version: %s\n", tg_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_in_place_ops),
        cmocka_unit_test(test_version_init_and_random),
        cmocka_unit_test(test_version_optimizer),
        cmocka_unit_test(test_version_loads),
        cmocka_unit_test(test_version_dist),
        cmocka_unit_test(test_version_views),
        cmocka_unit_test(test_version_failed_writes_and_new_results),
        cmocka_unit_test(test_snippet_saved_input),
        cmocka_unit_test(test_snippet_saved_output),
        cmocka_unit_test(test_torch_inplace_saved_output),
        cmocka_unit_test(test_torch_inplace_clone),
        cmocka_unit_test(test_torch_no_grad_modifies_version),
        cmocka_unit_test(test_write_through_view),
        cmocka_unit_test(test_retain_graph_then_write),
        cmocka_unit_test(test_allowed_write_unsaved_add_input),
        cmocka_unit_test(test_allowed_write_exp_input),
        cmocka_unit_test(test_allowed_write_mul_operand_not_needed),
        cmocka_unit_test(test_allowed_write_after_backward),
        cmocka_unit_test(test_detach_versus_copies),
        cmocka_unit_test(test_user_function),
        cmocka_unit_test(test_messages_f64_2d),
    };
    int failed = cmocka_run_group_tests(tests, NULL, teardown);
    tg_dist_finalize();
    return failed;
}
