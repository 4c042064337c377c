/* The book's chapter-5 text pipeline (src/data/text.c, src/data/utf8.c) and
 * the random streams it depends on, against PyTorch 1.13
 * (tests/ref/pretrain.json, tools/reference/pretrain.py).
 *
 * (a) sampler/<case>: DataLoader replays: a shuffled drop_last train loader
 *     and a sequential val loader over n samples, passes taken whole or left
 *     early, give PyTorch's batches, and leave the default generator where
 *     PyTorch leaves it (torch.rand(3) afterwards).
 * (b) randperm, a loader's own generator, passes running at once, text
 *     loaders, loader errors.
 * (c) cross_entropy/<case>: F.cross_entropy with ignore_index and every
 *     reduction: loss and gradient; the composed nll_loss(log_softmax) path.
 * (d) GPTDatasetV1 windows; the train/validation split (code points, as
 *     Python slices); the-verdict.txt split, tokenized and batched as each
 *     run of pretrain.json; decode with replacement of the runs' samples.
 * (e) bytes.decode("utf-8", "replace") on ill-formed input (expectations
 *     from CPython 3).
 * (f) generator state save/restore; the two dropout streams.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define CE_RTOL 1e-6
#define CE_ATOL 1e-7

static json_t *g_ref;
static tg_tokenizer *g_tok;
static double g_max_ce;

/* ---- helpers ------------------------------------------------------------------------------ */

static const json_t *jget(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!v) fail_msg("reference: missing key \"%s\"", key);
    return v;
}

static int64_t jint(const json_t *o, const char *key) { return (int64_t)json_integer_value(jget(o, key)); }

static double jnum(const json_t *o, const char *key)
{
    const json_t *v = jget(o, key);
    return json_is_real(v) ? json_real_value(v) : (double)json_integer_value(v);
}

static const char *jstr(const json_t *o, const char *key)
{
    const json_t *v = jget(o, key);
    if (!json_is_string(v)) fail_msg("reference: \"%s\" is not a string", key);
    return json_string_value(v);
}

static const char *data_path(char *buf, size_t size, const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "../../data/%s", file);
    return tu_ref_path(buf, size, rel);
}

/* tg_rand(3) from the default generator equals the reference floats exactly. */
static void assert_rand_after(const json_t *want, const char *what)
{
    tg_tape *tp = tg_tape_new();
    int64_t s3[1] = {3};
    tg_tensor *r = tg_rand(tp, TG_F32, 1, s3, NULL);
    tu_assert_ok(r);
    assert_int_equal(json_array_size(want), 3);
    for (int i = 0; i < 3; i++) {
        float w = (float)json_real_value(json_array_get(want, (size_t)i)), g = (float)tg_item_at(r, i);
        if (g != w) fail_msg("%s: rand_after[%d] is %.9g, want %.9g", what, i, (double)g, (double)w);
    }
    tg_tape_free(tp);
}

/* ---- (a) DataLoader replays --------------------------------------------------------------------- */

/* One pass, a fresh iterator (or its first `take` batches, fetching one more as Python's
 * enumerate-and-break does) against the reference batches. */
static void replay_op(tg_loader *l, const json_t *op, int64_t batch, const char *what)
{
    const json_t *jt = jget(op, "take"), *batches = jget(op, "batches");
    int64_t take = json_is_null(jt) ? -1 : (int64_t)json_integer_value(jt);
    tg_loader_iter *it = tg_loader_iter_new(l);
    tu_assert_ok(it);
    int64_t idx[64], count;
    assert_true(batch <= 64);
    size_t got = 0;
    for (int64_t i = 0; i < 1000; i++) {
        if (take >= 0 && i > take) break;
        int r = tg_loader_iter_next_indices(it, idx, &count);
        if (r == 0) {
            assert_int_equal(count, 0);
            /* an exhausted pass stays so */
            assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 0);
            break;
        }
        assert_int_equal(r, 1);
        if (take >= 0 && i == take) break; /* fetched, then left */
        const json_t *want = json_array_get(batches, got);
        if (!want) fail_msg("%s: batch %zu beyond the reference's %zu", what, got, json_array_size(batches));
        if ((size_t)count != json_array_size(want))
            fail_msg("%s: batch %zu has %lld indices, want %zu", what, got, (long long)count, json_array_size(want));
        for (int64_t k = 0; k < count; k++)
            if (idx[k] != json_integer_value(json_array_get(want, (size_t)k)))
                fail_msg("%s: batch %zu index %lld is %lld, want %lld", what, got, (long long)k, (long long)idx[k],
                         (long long)json_integer_value(json_array_get(want, (size_t)k)));
        got++;
    }
    if (got != json_array_size(batches)) fail_msg("%s: %zu batches, want %zu", what, got, json_array_size(batches));
    tg_loader_iter_free(it);
}

static void test_sampler_case(void **state)
{
    const json_t *c = *state;
    int64_t n = jint(c, "n"), batch = jint(c, "batch");
    tg_manual_seed((uint64_t)jint(c, "seed"));
    tg_loader *train = tg_loader_new(n, (tg_loader_options){batch, true, true, NULL});
    tg_loader *val = tg_loader_new(n, (tg_loader_options){batch, false, false, NULL});
    tu_assert_ok(train);
    tu_assert_ok(val);
    assert_int_equal(tg_loader_len(train), jint(c, "train_batches"));
    assert_int_equal(tg_loader_len(val), jint(c, "val_batches"));
    const json_t *ops = jget(c, "ops"), *op;
    size_t i;
    json_array_foreach(ops, i, op) {
        char what[96];
        const char *which = jstr(op, "loader");
        snprintf(what, sizeof what, "op %zu (%s)", i, which);
        replay_op(strcmp(which, "train") == 0 ? train : val, op, batch, what);
    }
    assert_rand_after(jget(c, "rand_after"), "sampler");
    tg_loader_free(train);
    tg_loader_free(val);
}

/* ---- (b) randperm, loaders ------------------------------------------------------------------------ */

static void test_randperm(void **state)
{
    (void)state;
    /* torch.randperm(10, generator=torch.Generator().manual_seed(0)), then
     * torch.rand(2) from the same generator */
    const int64_t want10[10] = {4, 1, 7, 5, 3, 9, 0, 8, 6, 2};
    const float rand_after[2] = {0.6323062777519226f, 0.3488934636116028f};
    /* torch.randperm(30, generator=torch.Generator().manual_seed(5)) */
    const int64_t want30[30] = {11, 28, 25, 15, 6, 2, 22, 18, 20, 13, 29, 12, 10, 24, 1,
                                7,  27, 17, 0,  23, 3, 16, 4,  21, 26, 19, 8,  5,  9,  14};
    tg_tape *tp = tg_tape_new();
    int64_t s2[1] = {2}, out[30];
    tg_generator *g = tg_generator_new(0), *h = tg_generator_new(0);
    assert_int_equal(tg_randperm(g, 10, out), TG_OK);
    for (int i = 0; i < 10; i++) assert_int_equal(out[i], want10[i]);
    tg_tensor *r = tg_rand(tp, TG_F32, 1, s2, g);
    assert_true((float)tg_item_at(r, 0) == rand_after[0] && (float)tg_item_at(r, 1) == rand_after[1]);
    /* a permutation, the same for the same seed */
    int64_t again[10];
    assert_int_equal(tg_randperm(h, 10, again), TG_OK);
    assert_memory_equal(again, want10, sizeof again);
    bool seen[10] = {false};
    for (int i = 0; i < 10; i++) {
        assert_true(again[i] >= 0 && again[i] < 10 && !seen[again[i]]);
        seen[again[i]] = true;
    }
    /* n - 1 32-bit draws */
    tg_generator_seed(g, 0), tg_generator_seed(h, 0);
    assert_int_equal(tg_randperm(g, 10, out), TG_OK);
    for (int i = 0; i < 9; i++) tg_generator_random(h);
    assert_int_equal(tg_generator_random(g), tg_generator_random(h));
    tg_generator_seed(g, 5);
    assert_int_equal(tg_randperm(g, 30, out), TG_OK);
    assert_memory_equal(out, want30, sizeof want30);
    /* n 1 and 0 draw nothing */
    tg_generator_seed(g, 5), tg_generator_seed(h, 5);
    out[0] = 7;
    assert_int_equal(tg_randperm(g, 1, out), TG_OK);
    assert_int_equal(out[0], 0);
    assert_int_equal(tg_randperm(g, 0, NULL), TG_OK);
    assert_int_equal(tg_generator_random(g), tg_generator_random(h));
    /* errors */
    tu_assert_status_error(tg_randperm(g, -1, out), "randperm", "-1");
    tu_assert_status_error(tg_randperm(g, 3, NULL), "randperm");
    /* the default generator when g is NULL */
    tg_manual_seed(0);
    assert_int_equal(tg_randperm(NULL, 10, out), TG_OK);
    assert_memory_equal(out, want10, sizeof want10);
    tg_generator_free(g);
    tg_generator_free(h);
    tg_tape_free(tp);
}

static void get_state(const tg_generator *g, uint8_t *buf)
{
    assert_int_equal(tg_generator_get_state(g, buf, TG_GENERATOR_STATE_BYTES), TG_OK);
}

/* A loader with its own generator draws from it only; the same seed gives
 * what the default generator gives. */
static void test_loader_generator(void **state)
{
    (void)state;
    const json_t *c = json_array_get(jget(jget(g_ref, "sampler"), "cases"), 0);
    const json_t *op0 = json_array_get(jget(c, "ops"), 0);
    int64_t n = jint(c, "n"), batch = jint(c, "batch");
    tg_generator *g = tg_generator_new((uint64_t)jint(c, "seed"));
    tg_manual_seed(999);
    static uint8_t before[TG_GENERATOR_STATE_BYTES], after[TG_GENERATOR_STATE_BYTES];
    get_state(tg_default_generator(), before);
    tg_loader *l = tg_loader_new(n, (tg_loader_options){batch, true, true, g});
    tu_assert_ok(l);
    replay_op(l, op0, batch, "own generator");
    get_state(tg_default_generator(), after);
    assert_memory_equal(before, after, sizeof before);
    /* the loader drew: its generator moved (2 random64 and randperm's own generator) */
    tg_generator *fresh = tg_generator_new((uint64_t)jint(c, "seed"));
    tg_generator_random64(fresh);
    tg_generator_random64(fresh);
    assert_int_equal(tg_generator_random(g), tg_generator_random(fresh));
    tg_loader_free(l);
    tg_generator_free(g);
    tg_generator_free(fresh);
}

static void test_loader_errors(void **state)
{
    (void)state;
    int64_t idx[4], count = 9;
    tu_assert_null_error(tg_loader_new(-1, (tg_loader_options){2, false, false, NULL}), "negative", "-1");
    tu_assert_null_error(tg_loader_new(4, (tg_loader_options){0, false, false, NULL}), "batch_size");
    tu_assert_null_error(tg_loader_new(4, (tg_loader_options){-3, true, false, NULL}), "batch_size");
    tu_assert_null_error(tg_text_loader_new(NULL, (tg_loader_options){2, false, false, NULL}), "NULL");
    tu_assert_null_error(tg_loader_iter_new(NULL), "NULL");
    tg_loader *l = tg_loader_new(4, (tg_loader_options){3, false, false, NULL});
    tu_assert_ok(l);
    tg_loader_iter *it = tg_loader_iter_new(l);
    tu_assert_ok(it);
    tu_assert_status_error(tg_loader_iter_next_indices(it, NULL, &count), "NULL");
    tu_assert_status_error(tg_loader_iter_next_indices(it, idx, NULL), "NULL");
    int st = tg_loader_iter_next_indices(NULL, idx, &count);
    tu_assert_status_error(st, "NULL");
    assert_int_equal(count, 0);
    assert_int_equal(tg_loader_len(NULL), 0);
    assert_int_equal(tg_loader_len(l), 2);
    /* a loader over indices has no tensors to give */
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = (tg_tensor *)1, *y = (tg_tensor *)1;
    st = tg_loader_iter_next(it, tp, &x, &y);
    assert_int_equal(st, TG_ESTATE);
    tu_assert_status_error(st, "no dataset");
    assert_null(x);
    assert_null(y);
    /* short last batch kept without drop_last; 0 again after the end */
    assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 1);
    assert_int_equal(count, 3);
    assert_int_equal(idx[0], 0);
    assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 1);
    assert_int_equal(count, 1);
    assert_int_equal(idx[0], 3);
    assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 0);
    assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 0);
    tg_loader_iter_free(it);
    /* drop_last: the short batch is dropped */
    tg_loader *ld = tg_loader_new(4, (tg_loader_options){3, false, true, NULL});
    assert_int_equal(tg_loader_len(ld), 1);
    it = tg_loader_iter_new(ld);
    assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 1);
    assert_int_equal(count, 3);
    assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 0);
    assert_int_equal(count, 0);
    tg_loader_iter_free(it);
    tg_loader_free(ld);
    tg_loader_free(l);
    /* an empty dataset: no batches, drop_last or not */
    tg_loader *e = tg_loader_new(0, (tg_loader_options){2, true, false, NULL});
    tu_assert_ok(e);
    assert_int_equal(tg_loader_len(e), 0);
    it = tg_loader_iter_new(e);
    tu_assert_ok(it);
    assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 0);
    tg_loader_iter_free(it);
    tg_loader_free(e);
    tg_loader_free(NULL);
    tg_loader_iter_free(NULL);
    tg_tape_free(tp);
}

/* Passes of one loader running at once, each with its own order, drawing
 * in the order PyTorch's iterators draw (values from torch 1.13:
 * manual_seed(123); DataLoader(range(10), 2, shuffle=True, drop_last=True);
 * it1 = iter; next(it1); it2 = iter, exhausted; it1 finished; it3 = iter
 * (never fetched); it4 = iter, one batch; torch.rand(3)). */
static void test_concurrent_passes(void **state)
{
    (void)state;
    static const int64_t want1[5][2] = {{8, 2}, {6, 7}, {0, 3}, {9, 1}, {5, 4}};
    static const int64_t want2[5][2] = {{5, 9}, {2, 7}, {8, 6}, {4, 0}, {1, 3}};
    static const int64_t want4[2] = {7, 5};
    const json_t *rand_after = json_pack("[f, f, f]", 0.31641197204589844, 0.4017401337623596, 0.1185683012008667);
    tg_manual_seed(123);
    tg_loader *l = tg_loader_new(10, (tg_loader_options){2, true, true, NULL});
    tu_assert_ok(l);
    int64_t idx[2], count;
    tg_loader_iter *it1 = tg_loader_iter_new(l);
    assert_int_equal(tg_loader_iter_next_indices(it1, idx, &count), 1);
    assert_memory_equal(idx, want1[0], sizeof idx);
    tg_loader_iter *it2 = tg_loader_iter_new(l);
    for (int b = 0; b < 5; b++) {
        assert_int_equal(tg_loader_iter_next_indices(it2, idx, &count), 1);
        assert_memory_equal(idx, want2[b], sizeof idx);
    }
    assert_int_equal(tg_loader_iter_next_indices(it2, idx, &count), 0);
    for (int b = 1; b < 5; b++) {
        assert_int_equal(tg_loader_iter_next_indices(it1, idx, &count), 1);
        assert_memory_equal(idx, want1[b], sizeof idx);
    }
    assert_int_equal(tg_loader_iter_next_indices(it1, idx, &count), 0);
    tg_loader_iter *it3 = tg_loader_iter_new(l), *it4 = tg_loader_iter_new(l);
    assert_int_equal(tg_loader_iter_next_indices(it4, idx, &count), 1);
    assert_memory_equal(idx, want4, sizeof idx);
    assert_rand_after(rand_after, "concurrent passes");
    tg_loader_iter_free(it1);
    tg_loader_iter_free(it2);
    tg_loader_iter_free(it3);
    tg_loader_iter_free(it4);
    tg_loader_free(l);
    json_decref((json_t *)rand_after);
}

/* ---- (c) cross-entropy ---------------------------------------------------------------------------- */

static tg_reduction reduction_of(const char *s)
{
    if (strcmp(s, "mean") == 0) return TG_REDUCE_MEAN;
    if (strcmp(s, "sum") == 0) return TG_REDUCE_SUM;
    if (strcmp(s, "none") == 0) return TG_REDUCE_NONE;
    fail_msg("unknown reduction %s", s);
    return TG_REDUCE_MEAN;
}

/* the loss and the gradient of its sum, against the reference */
static void check_loss(tg_tape *tp, tg_tensor *x, tg_tensor *loss, tg_reduction r, const json_t *c, const char *what)
{
    char w[128];
    tu_assert_ok(loss);
    tg_tensor *want = tu_tensor_from_json(tp, jget(c, "loss"), TG_DTYPE_COUNT);
    snprintf(w, sizeof w, "%s: loss", what);
    tu_assert_close(loss, want, CE_RTOL, CE_ATOL, w);
    tg_tensor *root = r == TG_REDUCE_NONE ? tg_sum(tp, loss) : loss;
    assert_int_equal(tg_backward(root, NULL, false), TG_OK);
    tg_tensor *gw = tu_tensor_from_json(tp, jget(c, "grad"), TG_DTYPE_COUNT);
    snprintf(w, sizeof w, "%s: grad", what);
    tu_assert_close(x->grad, gw, CE_RTOL, CE_ATOL, w);
    for (int64_t i = 0; i < tg_numel(want); i++) {
        double a = tg_item_at(loss, i), b = tg_item_at(want, i);
        if (b != 0 && isfinite(b) && fabs(a - b) / fabs(b) > g_max_ce) g_max_ce = fabs(a - b) / fabs(b);
    }
    for (int64_t i = 0; i < tg_numel(gw); i++) {
        double a = tg_item_at(x->grad, i), b = tg_item_at(gw, i);
        if (b != 0 && fabs(a - b) / fabs(b) > g_max_ce) g_max_ce = fabs(a - b) / fabs(b);
    }
}

static tg_tensor *leaf(tg_tape *tp, const json_t *j)
{
    tg_tensor *x = tu_tensor_from_json(tp, j, TG_DTYPE_COUNT);
    assert_int_equal(tg_requires_grad_(x, true), TG_OK);
    return x;
}

static void test_cross_entropy_case(void **state)
{
    const json_t *c = *state;
    const char *name = jstr(c, "name");
    tg_tape *tp = tg_tape_new();
    tg_reduction r = reduction_of(jstr(c, "reduction"));
    int64_t ii = jint(c, "ignore_index");
    tg_tensor *t = tu_tensor_from_json(tp, jget(c, "target"), TG_DTYPE_COUNT);
    assert_int_equal(t->dtype, TG_I64);

    tg_tensor *x = leaf(tp, jget(c, "logits"));
    tg_tensor *loss = tg_cross_entropy_ignore(tp, x, t, r, ii);
    tu_assert_ok(loss);
    assert_string_equal(tg_grad_fn_name(loss), "NllLossBackward0");
    check_loss(tp, x, loss, r, c, name);

    /* nll_loss(log_softmax(x)): the same values */
    tg_tensor *x2 = leaf(tp, jget(c, "logits"));
    tg_tensor *l2 = tg_nll_loss_ignore(tp, tg_log_softmax(tp, x2, 1), t, r, ii);
    tu_assert_ok(l2);
    check_loss(tp, x2, l2, r, c, "nll_loss(log_softmax)");

    /* every target ignored: the mean is nan, the gradient zero */
    bool all_ignored = true;
    for (int64_t i = 0; i < tg_numel(t); i++) all_ignored = all_ignored && tg_item_at(t, i) == (double)ii;
    if (all_ignored) {
        if (r == TG_REDUCE_MEAN) assert_true(isnan(tg_item(loss)));
        for (int64_t i = 0; i < tg_numel(x->grad); i++) assert_true(tg_item_at(x->grad, i) == 0.0);
        for (int64_t i = 0; i < tg_numel(x2->grad); i++) assert_true(tg_item_at(x2->grad, i) == 0.0);
    }

    /* the default ignore_index is -100 */
    tg_tensor *x3 = leaf(tp, jget(c, "logits"));
    tg_tensor *l3 = tg_cross_entropy(tp, x3, t, r);
    tg_tensor *x4 = leaf(tp, jget(c, "logits"));
    tg_tensor *l4 = tg_nll_loss(tp, tg_log_softmax(tp, x4, 1), t, r);
    if (ii == TG_IGNORE_INDEX) {
        check_loss(tp, x3, l3, r, c, "cross_entropy, default ignore_index");
        check_loss(tp, x4, l4, r, c, "nll_loss, default ignore_index");
    } else {
        /* the targets equal to ii now count */
        tu_assert_ok(l3);
        tu_assert_ok(l4);
        tg_tensor *want = tu_tensor_from_json(tp, jget(c, "loss"), TG_DTYPE_COUNT);
        assert_true(fabs(tg_item(l3) - tg_item(want)) > 1e-3);
        assert_true(fabs(tg_item(l4) - tg_item(l3)) < 1e-5);
    }
    tg_tape_free(tp);
}

static void test_cross_entropy_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s23[2] = {2, 3}, s2[1] = {2}, s3[1] = {3};
    tg_tensor *x = tg_zeros(tp, TG_F32, 2, s23);
    const int64_t oob[2] = {0, 3}, neg[2] = {-100, 1}, ign[2] = {-1, -1};
    tg_tensor *t_oob = tg_from_data(tp, TG_I64, 1, s2, oob), *t_neg = tg_from_data(tp, TG_I64, 1, s2, neg);
    tu_assert_null_error(tg_cross_entropy(tp, x, t_oob, TG_REDUCE_MEAN), "target 3", "position 1", "out of bounds");
    tu_assert_null_error(tg_nll_loss(tp, x, t_oob, TG_REDUCE_SUM), "target 3", "out of bounds");
    /* -100 is an ordinary (bad) target under another ignore_index */
    tu_assert_null_error(tg_cross_entropy_ignore(tp, x, t_neg, TG_REDUCE_MEAN, 2), "target -100", "out of bounds");
    tu_assert_ok(tg_cross_entropy(tp, x, t_neg, TG_REDUCE_MEAN));
    /* ignore_index -1 */
    tg_tensor *l = tg_cross_entropy_ignore(tp, x, tg_from_data(tp, TG_I64, 1, s2, ign), TG_REDUCE_SUM, -1);
    tu_assert_ok(l);
    assert_true(tg_item(l) == 0.0);
    tu_assert_null_error(tg_cross_entropy(tp, x, tg_zeros(tp, TG_F32, 1, s2), TG_REDUCE_MEAN), "int64");
    tu_assert_null_error(tg_cross_entropy(tp, x, tg_zeros(tp, TG_I64, 1, s3), TG_REDUCE_MEAN), "(2)");
    tu_assert_null_error(tg_cross_entropy(tp, tg_zeros(tp, TG_F32, 1, s3), t_neg, TG_REDUCE_MEAN), "(N, C)");
    /* a NULL input names the op (when no earlier error explains it) */
    tg_clear_error();
    tu_assert_null_error(tg_cross_entropy(tp, NULL, t_neg, TG_REDUCE_MEAN), "cross_entropy", "NULL");
    tg_clear_error();
    tu_assert_null_error(tg_nll_loss_ignore(tp, x, NULL, TG_REDUCE_MEAN, 0), "nll_loss", "NULL");
    tg_tape_free(tp);
}

/* ---- (d) windows, split, the-verdict.txt, decoding ----------------------------------------------------- */

static void test_text_dataset(void **state)
{
    (void)state;
    static const int64_t combos[][3] = {
        /* n, context, stride */
        {10, 4, 4}, {10, 4, 1}, {10, 4, 3}, {9, 4, 5}, {5, 4, 1}, {5, 4, 7}, {4, 4, 1},
        {3, 4, 1},  {0, 4, 1},  {1, 1, 1},  {2, 1, 1}, {100, 8, 8}, {101, 8, 8}, {100, 1, 100},
    };
    int64_t ids[101];
    for (int i = 0; i < 101; i++) ids[i] = 1000 + i;
    tg_tape *tp = tg_tape_new();
    for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++) {
        int64_t n = combos[c][0], ctx = combos[c][1], stride = combos[c][2];
        tg_text_dataset *d = tg_text_dataset_new(ids, n, ctx, stride);
        tu_assert_ok(d);
        /* for i in range(0, n - context, stride) */
        int64_t starts[128], nw = 0;
        for (int64_t i = 0; i < n - ctx; i += stride) starts[nw++] = i;
        if (tg_text_dataset_len(d) != nw)
            fail_msg("n %lld, context %lld, stride %lld: %lld windows, want %lld", (long long)n, (long long)ctx,
                     (long long)stride, (long long)tg_text_dataset_len(d), (long long)nw);
        assert_int_equal(tg_text_dataset_context(d), ctx);
        int64_t in[16], tg[16];
        for (int64_t w = 0; w < nw; w++) {
            assert_int_equal(tg_text_dataset_get(d, w, in, tg), TG_OK);
            for (int64_t j = 0; j < ctx; j++) {
                assert_int_equal(in[j], 1000 + starts[w] + j);
                assert_int_equal(tg[j], 1000 + starts[w] + j + 1);
            }
        }
        tu_assert_status_error(tg_text_dataset_get(d, nw, in, tg), "out of range");
        tu_assert_status_error(tg_text_dataset_get(d, -1, in, tg), "out of range");
        if (nw >= 2) {
            /* a batch of windows, in the given order */
            int64_t order[2] = {nw - 1, 0};
            tg_tensor *x, *y;
            assert_int_equal(tg_text_dataset_batch(d, tp, order, 2, &x, &y), TG_OK);
            assert_int_equal(x->dtype, TG_I64);
            assert_int_equal(x->ndim, 2);
            assert_int_equal(x->shape[0], 2);
            assert_int_equal(x->shape[1], ctx);
            assert_true(tg_same_shape(x, y));
            for (int64_t j = 0; j < ctx; j++) {
                assert_int_equal((int64_t)tg_item_at(x, j), 1000 + starts[nw - 1] + j);
                assert_int_equal((int64_t)tg_item_at(y, j), 1000 + starts[nw - 1] + j + 1);
                assert_int_equal((int64_t)tg_item_at(x, ctx + j), 1000 + j);
                assert_int_equal((int64_t)tg_item_at(y, ctx + j), 1001 + j);
            }
        }
        tg_text_dataset_free(d);
    }
    /* the ids are copied */
    int64_t mine[6] = {1, 2, 3, 4, 5, 6}, in[2], tg[2];
    tg_text_dataset *d = tg_text_dataset_new(mine, 6, 2, 2);
    mine[0] = 99;
    assert_int_equal(tg_text_dataset_get(d, 0, in, tg), TG_OK);
    assert_int_equal(in[0], 1);
    /* errors */
    tu_assert_null_error(tg_text_dataset_new(ids, 10, 0, 1), "context");
    tu_assert_null_error(tg_text_dataset_new(ids, 10, -4, 1), "context");
    tu_assert_null_error(tg_text_dataset_new(ids, 10, 4, 0), "stride");
    tu_assert_null_error(tg_text_dataset_new(ids, -1, 4, 1), "id array");
    tu_assert_null_error(tg_text_dataset_new(NULL, 3, 1, 1), "id array");
    tu_assert_ok(d);
    tg_tensor *x = (tg_tensor *)1, *y = (tg_tensor *)1;
    int64_t order[2] = {0, 2};
    tu_assert_status_error(tg_text_dataset_batch(d, tp, order, 2, &x, &y), "out of range");
    tu_assert_status_error(tg_text_dataset_batch(d, tp, order, 0, &x, &y), "empty");
    tu_assert_status_error(tg_text_dataset_batch(d, NULL, order, 1, &x, &y), "NULL");
    tu_assert_status_error(tg_text_dataset_batch(d, tp, NULL, 1, &x, &y), "NULL");
    tu_assert_status_error(tg_text_dataset_batch(NULL, tp, order, 1, &x, &y), "NULL");
    tu_assert_status_error(tg_text_dataset_batch(d, tp, order, 1, NULL, &y), "NULL");
    assert_null(y);
    tu_assert_status_error(tg_text_dataset_get(NULL, 0, in, tg), "NULL");
    tu_assert_status_error(tg_text_dataset_get(d, 0, NULL, tg), "NULL");
    assert_int_equal(tg_text_dataset_len(NULL), 0);
    assert_int_equal(tg_text_dataset_context(NULL), 0);
    tg_text_dataset_free(d);
    tg_text_dataset_free(NULL);
    /* an empty id array is a dataset without windows */
    d = tg_text_dataset_new(NULL, 0, 4, 1);
    tu_assert_ok(d);
    assert_int_equal(tg_text_dataset_len(d), 0);
    tg_text_dataset_free(d);
    tg_tape_free(tp);
}

/* A text loader gives the windows its index loader would. */
static void test_text_loader(void **state)
{
    (void)state;
    int64_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = i;
    tg_text_dataset *d = tg_text_dataset_new(ids, 100, 8, 8);
    tu_assert_ok(d);
    assert_int_equal(tg_text_dataset_len(d), 12); /* range(0, 92, 8) */
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(11), *h = tg_generator_new(11);
    tg_loader *tl = tg_text_loader_new(d, (tg_loader_options){5, true, false, g});
    tg_loader *il = tg_loader_new(12, (tg_loader_options){5, true, false, h});
    tu_assert_ok(tl);
    tu_assert_ok(il);
    assert_int_equal(tg_loader_len(tl), 3);
    for (int pass = 0; pass < 2; pass++) {
        tg_loader_iter *ti = tg_loader_iter_new(tl), *ii = tg_loader_iter_new(il);
        tu_assert_ok(ti);
        tu_assert_ok(ii);
        int64_t idx[5], count, total = 0;
        bool seen[12] = {false};
        for (;;) {
            tg_tensor *x, *y;
            int r = tg_loader_iter_next(ti, tp, &x, &y);
            assert_int_equal(r, tg_loader_iter_next_indices(ii, idx, &count));
            if (r == 0) break;
            assert_int_equal(r, 1);
            assert_int_equal(x->shape[0], count);
            assert_int_equal(x->shape[1], 8);
            for (int64_t b = 0; b < count; b++) {
                assert_false(seen[idx[b]]);
                seen[idx[b]] = true;
                for (int64_t j = 0; j < 8; j++) {
                    assert_int_equal((int64_t)tg_item_at(x, b * 8 + j), idx[b] * 8 + j);
                    assert_int_equal((int64_t)tg_item_at(y, b * 8 + j), idx[b] * 8 + j + 1);
                }
            }
            total += count;
        }
        assert_int_equal(total, 12);
        tg_tensor *x, *y;
        tu_assert_status_error(tg_loader_iter_next(ti, NULL, &x, &y), "NULL");
        tu_assert_status_error(tg_loader_iter_next(ti, tp, NULL, &y), "NULL");
        tu_assert_status_error(tg_loader_iter_next(NULL, tp, &x, &y), "NULL");
        tg_loader_iter_free(ti);
        tg_loader_iter_free(ii);
    }
    tg_loader_free(tl);
    tg_loader_free(il);
    tg_generator_free(g);
    tg_generator_free(h);
    tg_text_dataset_free(d);
    tg_tape_free(tp);
}

static void test_text_split(void **state)
{
    (void)state;
    size_t split = 99;
    const char *ascii = "hello world"; /* 11 code points: int(0.5 * 11) = 5 */
    assert_int_equal(tg_text_split(ascii, 11, 0.5, &split), TG_OK);
    assert_int_equal(split, 5);
    assert_int_equal(tg_text_split(ascii, 11, 0.0, &split), TG_OK);
    assert_int_equal(split, 0);
    assert_int_equal(tg_text_split(ascii, 11, 1.0, &split), TG_OK);
    assert_int_equal(split, 11);
    assert_int_equal(tg_text_split(ascii, 11, 0.9, &split), TG_OK); /* int(9.9) */
    assert_int_equal(split, 9);

    /* "héllo wörld ✓ 𝄞": 15 code points in 22 bytes; Python:
     * len(t[:int(r * 15)].encode()) */
    const char *u = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xf0\x9d\x84\x9e";
    size_t ulen = strlen(u);
    assert_int_equal(ulen, 22);
    static const struct {
        double ratio;
        size_t bytes;
    } cuts[] = {{0.5, 8}, {0.1, 1}, {0.3, 5}, {0.7, 12}, {0.9, 17}, {0.95, 18}, {0.0, 0}, {1.0, 22}, {0.99, 18}};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        assert_int_equal(tg_text_split(u, ulen, cuts[i].ratio, &split), TG_OK);
        if (split != cuts[i].bytes)
            fail_msg("ratio %g: split at byte %zu, want %zu", cuts[i].ratio, split, cuts[i].bytes);
    }
    /* the empty text */
    assert_int_equal(tg_text_split("", 0, 0.9, &split), TG_OK);
    assert_int_equal(split, 0);
    assert_int_equal(tg_text_split(NULL, 0, 0.5, &split), TG_OK);
    assert_int_equal(split, 0);
    /* errors, *split untouched */
    split = 77;
    tu_assert_status_error(tg_text_split("ab\xff" "cd", 5, 0.5, &split), "invalid UTF-8 at byte 2");
    tu_assert_status_error(tg_text_split("h\xc3\xa9\xe2\x9c", 5, 0.5, &split), "invalid UTF-8 at byte 3");
    tu_assert_status_error(tg_text_split("\xed\xa0\x80", 3, 0.5, &split), "invalid UTF-8 at byte 0");
    tu_assert_status_error(tg_text_split(ascii, 11, -0.1, &split), "ratio");
    tu_assert_status_error(tg_text_split(ascii, 11, 1.1, &split), "ratio");
    tu_assert_status_error(tg_text_split(ascii, 11, NAN, &split), "ratio");
    tu_assert_status_error(tg_text_split(ascii, 11, 0.5, NULL), "NULL");
    tu_assert_status_error(tg_text_split(NULL, 3, 0.5, &split), "NULL");
    assert_int_equal(split, 77);
}

/* Every run of pretrain.json: the-verdict.txt split at train_ratio,
 * tokenized, windowed and batched as the book's loaders. */
static void test_verdict_runs(void **state)
{
    (void)state;
    char path[4096];
    size_t len;
    char *text = tu_read_file(data_path(path, sizeof path, "the-verdict.txt"), &len);
    const json_t *runs = jget(g_ref, "runs"), *run;
    size_t r;
    assert_true(json_array_size(runs) >= 3);
    json_array_foreach(runs, r, run) {
        const char *name = jstr(run, "name");
        const json_t *cfg = jget(run, "config");
        size_t split;
        assert_int_equal(tg_text_split(text, len, jnum(run, "train_ratio"), &split), TG_OK);
        int64_t *tr, *va;
        size_t ntr, nva;
        assert_int_equal(tg_tokenizer_encode(g_tok, text, split, &tr, &ntr), TG_OK);
        assert_int_equal(tg_tokenizer_encode(g_tok, text + split, len - split, &va, &nva), TG_OK);
        if ((int64_t)ntr != jint(run, "train_tokens") || (int64_t)nva != jint(run, "val_tokens"))
            fail_msg("%s: %zu + %zu tokens, want %lld + %lld", name, ntr, nva, (long long)jint(run, "train_tokens"),
                     (long long)jint(run, "val_tokens"));
        int64_t ctx = jint(cfg, "context_length"), stride = jint(run, "stride"), batch = jint(run, "batch");
        tg_text_dataset *dt = tg_text_dataset_new(tr, (int64_t)ntr, ctx, stride);
        tg_text_dataset *dv = tg_text_dataset_new(va, (int64_t)nva, ctx, stride);
        tu_assert_ok(dt);
        tu_assert_ok(dv);
        tg_loader *lt = tg_text_loader_new(dt, (tg_loader_options){batch, true, true, NULL});
        tg_loader *lv = tg_text_loader_new(dv, (tg_loader_options){batch, false, false, NULL});
        tu_assert_ok(lt);
        tu_assert_ok(lv);
        assert_int_equal(tg_loader_len(lt), jint(run, "train_batches"));
        assert_int_equal(tg_loader_len(lv), jint(run, "val_batches"));
        if (strcmp(name, "ctx64_p0") == 0) {
            /* 4612 ids: range(0, 4548, 64) is 72 windows, 36 batches of 2 */
            assert_int_equal(tg_text_dataset_len(dt), jint(run, "train_batches") * 2);
            assert_int_equal(tg_text_dataset_len(dt), 72);
        }
        tg_loader_free(lt);
        tg_loader_free(lv);
        tg_text_dataset_free(dt);
        tg_text_dataset_free(dv);
        free(tr);
        free(va);
    }
    free(text);
}

/* The runs' generated samples decode (with replacement) to PyTorch's text. */
static void test_decode_samples(void **state)
{
    (void)state;
    const json_t *runs = jget(g_ref, "runs"), *run;
    size_t r, checked = 0;
    json_array_foreach(runs, r, run) {
        const json_t *samples = jget(run, "samples"), *s;
        size_t k;
        json_array_foreach(samples, k, s) {
            const json_t *jids = jget(s, "ids");
            size_t n = json_array_size(jids);
            int64_t *ids = malloc(sizeof *ids * n);
            assert_non_null(ids);
            for (size_t i = 0; i < n; i++) ids[i] = json_integer_value(json_array_get(jids, i));
            char *text;
            size_t len;
            assert_int_equal(tg_tokenizer_decode_text(g_tok, ids, n, &text, &len), TG_OK);
            const char *want = jstr(s, "text");
            size_t wlen = json_string_length(jget(s, "text"));
            if (len != wlen || memcmp(text, want, len) != 0)
                fail_msg("%s sample %zu: \"%s\", want \"%s\"", jstr(run, "name"), k, text, want);
            assert_int_equal(text[len], '\0');
            if (r == 0 && k == 0) {
                /* it ends inside a character: U+FFFD, which decode keeps as bytes */
                assert_true(len >= 3 && memcmp(text + len - 3, "\xef\xbf\xbd", 3) == 0);
                char *raw;
                size_t rlen;
                assert_int_equal(tg_tokenizer_decode(g_tok, ids, n, &raw, &rlen), TG_OK);
                assert_true(rlen != len || memcmp(raw, text, len) != 0);
                free(raw);
            }
            free(text);
            free(ids);
            checked++;
        }
    }
    assert_true(checked >= 5);
    /* errors */
    const int64_t bad[3] = {15496, 50257, 11};
    char *text = (char *)1;
    size_t len = 5;
    tu_assert_status_error(tg_tokenizer_decode_text(g_tok, bad, 3, &text, &len), "50257", "1");
    assert_null(text);
    assert_int_equal(len, 0);
}

/* ---- (e) decoding with replacement -------------------------------------------------------------------- */

static void test_utf8_replace_invalid(void **state)
{
    (void)state;
#define FFFD "\xef\xbf\xbd"
    /* bytes -> bytes.decode("utf-8", "replace").encode(), from CPython 3 */
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } cases[] = {
        {"abc", 3, "abc"},
        {"h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9d\x84\x9e", 15, "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9d\x84\x9e"},
        {"\xed\x9f\xbf", 3, "\xed\x9f\xbf"},         /* U+D7FF, below the surrogates */
        {"\xf4\x8f\xbf\xbf", 4, "\xf4\x8f\xbf\xbf"}, /* U+10FFFF */
        {"\xef\xbf\xbd", 3, FFFD},                   /* U+FFFD itself */
        {"\xc3", 1, FFFD},                           /* truncated 2-byte */
        {"\xe2\x82", 2, FFFD},                       /* truncated 3-byte */
        {"\xf0\x9f\x98", 3, FFFD},                   /* truncated 4-byte */
        {"a\xc3" "b", 3, "a" FFFD "b"},
        {"\xe2\x82" "A", 3, FFFD "A"},
        {"\x80", 1, FFFD}, /* lone continuation bytes: one each */
        {"\x80\xbf\x80", 3, FFFD FFFD FFFD},
        {"\xe0\x80\x80", 3, FFFD FFFD FFFD},         /* overlong: E0 wants A0..BF */
        {"\xed\xa0\x80", 3, FFFD FFFD FFFD},         /* a surrogate: ED wants 80..9F */
        {"\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD}, /* beyond U+10FFFF: F4 wants 80..8F */
        {"\xf0\x80\x80\x80", 4, FFFD FFFD FFFD FFFD}, /* overlong: F0 wants 90..BF */
        {"\xf0\x90\x80", 3, FFFD},                   /* a valid start, truncated */
        {"\xc0", 1, FFFD},
        {"\xc1", 1, FFFD},
        {"\xc0\xaf", 2, FFFD FFFD},
        {"\xf5", 1, FFFD},
        {"\xf8\x88\x80\x80\x80", 5, FFFD FFFD FFFD FFFD FFFD},
        {"\xff", 1, FFFD},
        {"\xfe\xff", 2, FFFD FFFD},
        {"x\xf1\x80\x80\xe1\x80\xc2y", 8, "x" FFFD FFFD FFFD "y"},
        {"", 0, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        size_t len;
        size_t wlen = strlen(cases[i].out);
        assert_int_equal(tg_utf8_replace_invalid(cases[i].in, cases[i].len, &out, &len), TG_OK);
        if (len != wlen || memcmp(out, cases[i].out, wlen) != 0)
            fail_msg("case %zu: %zu bytes, want %zu (or other bytes)", i, len, wlen);
        assert_int_equal(out[len], '\0');
        free(out);
    }
#undef FFFD
    /* NUL bytes are text */
    char *out = (char *)1;
    size_t len = 4;
    assert_int_equal(tg_utf8_replace_invalid("\0a\0\x80", 4, &out, &len), TG_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(out, "\0a\0\xef\xbf\xbd", 7);
    free(out);
    assert_int_equal(tg_utf8_replace_invalid(NULL, 0, &out, &len), TG_OK);
    assert_int_equal(len, 0);
    assert_non_null(out);
    assert_int_equal(out[0], '\0');
    free(out);
    tu_assert_status_error(tg_utf8_replace_invalid(NULL, 2, &out, &len), "NULL");
    assert_null(out);
    tu_assert_status_error(tg_utf8_replace_invalid("ab", 2, NULL, &len), "NULL");
    tu_assert_status_error(tg_utf8_replace_invalid("ab", 2, &out, NULL), "NULL");
}

/* ---- (f) generator state, dropout streams ------------------------------------------------------------------ */

static void test_generator_state(void **state)
{
    (void)state;
    static uint8_t s[TG_GENERATOR_STATE_BYTES + 8], t[TG_GENERATOR_STATE_BYTES], u[TG_GENERATOR_STATE_BYTES];
    static uint32_t a[1000], b[1000];
    tg_generator *g = tg_generator_new(42), *h = tg_generator_new(1);
    for (int i = 0; i < 5; i++) tg_generator_random(g);
    get_state(g, s);
    for (int i = 0; i < 1000; i++) a[i] = tg_generator_random(g);
    assert_int_equal(tg_generator_set_state(g, s, TG_GENERATOR_STATE_BYTES), TG_OK);
    for (int i = 0; i < 1000; i++) b[i] = tg_generator_random(g);
    assert_memory_equal(a, b, sizeof a);
    /* into another generator */
    assert_int_equal(tg_generator_set_state(h, s, TG_GENERATOR_STATE_BYTES), TG_OK);
    for (int i = 0; i < 1000; i++) assert_int_equal(tg_generator_random(h), a[i]);

    /* errors leave the generator as it was */
    get_state(g, t);
    tu_assert_status_error(tg_generator_get_state(g, u, TG_GENERATOR_STATE_BYTES - 1), "2520");
    tu_assert_status_error(tg_generator_get_state(NULL, u, TG_GENERATOR_STATE_BYTES), "NULL");
    tu_assert_status_error(tg_generator_get_state(g, NULL, TG_GENERATOR_STATE_BYTES), "NULL");
    tu_assert_status_error(tg_generator_set_state(g, s, TG_GENERATOR_STATE_BYTES - 1), "2520", "2519");
    tu_assert_status_error(tg_generator_set_state(g, s, TG_GENERATOR_STATE_BYTES + 1), "2520");
    tu_assert_status_error(tg_generator_set_state(g, NULL, TG_GENERATOR_STATE_BYTES), "NULL");
    tu_assert_status_error(tg_generator_set_state(NULL, s, TG_GENERATOR_STATE_BYTES), "NULL");
    const size_t off_left = 4 + 4 * 624, off_next = off_left + 4, off_flag = off_left + 8;
    memcpy(u, s, sizeof u);
    u[0] = 'X';
    tu_assert_status_error(tg_generator_set_state(g, u, sizeof u), "magic");
    const struct {
        size_t off;
        uint32_t v;
    } bad[] = {{off_left, 0}, {off_left, 625}, {off_left, 0xFFFFFFFFu}, {off_next, 700}, {off_next, 3}, {off_flag, 2}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(u, s, sizeof u);
        for (int k = 0; k < 4; k++) u[bad[i].off + (size_t)k] = (uint8_t)(bad[i].v >> (8 * k));
        tu_assert_status_error(tg_generator_set_state(g, u, sizeof u), "corrupt");
    }
    get_state(g, u);
    assert_memory_equal(t, u, sizeof t);
    tg_generator *copy = tg_generator_new(0);
    assert_int_equal(tg_generator_set_state(copy, t, sizeof t), TG_OK);
    for (int i = 0; i < 700; i++) assert_int_equal(tg_generator_random(g), tg_generator_random(copy));

    /* right after seeding, before the first draw */
    tg_generator_seed(g, 7);
    get_state(g, s);
    assert_int_equal(tg_generator_set_state(h, s, TG_GENERATOR_STATE_BYTES), TG_OK);
    tg_generator *ref = tg_generator_new(7);
    for (int i = 0; i < 1000; i++) {
        uint32_t w = tg_generator_random(ref);
        assert_int_equal(tg_generator_random(h), w);
        assert_int_equal(tg_generator_random(g), w);
    }

    /* the cached second normal of the scalar path travels with the state */
    tg_tape *tp = tg_tape_new();
    int64_t s1[1] = {1}, s5[1] = {5};
    tg_generator_seed(g, 3);
    tu_assert_ok(tg_randn(tp, TG_F64, 1, s1, g));
    get_state(g, s);
    tg_tensor *x = tg_randn(tp, TG_F64, 1, s5, g);
    assert_int_equal(tg_generator_set_state(g, s, TG_GENERATOR_STATE_BYTES), TG_OK);
    tg_tensor *y = tg_randn(tp, TG_F64, 1, s5, g);
    tu_assert_close(y, x, 0.0, 0.0, "randn after restoring the state");
    tg_generator_seed(h, 3); /* the same words without the cache: another stream */
    for (int i = 0; i < 2; i++) tg_generator_random64(h);
    assert_int_equal(tg_generator_set_state(h, s, TG_GENERATOR_STATE_BYTES), TG_OK);
    tu_assert_close(tg_randn(tp, TG_F64, 1, s5, h), x, 0.0, 0.0, "randn in another generator");

    /* the default generator */
    tg_manual_seed(5);
    get_state(tg_default_generator(), s);
    float r1 = (float)tg_item(tg_rand(tp, TG_F32, 1, s1, NULL));
    assert_int_equal(tg_generator_set_state(tg_default_generator(), s, TG_GENERATOR_STATE_BYTES), TG_OK);
    assert_true((float)tg_item(tg_rand(tp, TG_F32, 1, s1, NULL)) == r1);
    assert_true(r1 == 0.8302518725395203f); /* torch.manual_seed(5); torch.rand(1) */

    tg_generator_free(g);
    tg_generator_free(h);
    tg_generator_free(copy);
    tg_generator_free(ref);
    tg_tape_free(tp);
}

/* The next 32-bit draws of a and b agree. */
static void assert_same_stream(tg_generator *a, tg_generator *b, const char *what)
{
    for (int i = 0; i < 8; i++)
        if (tg_generator_random(a) != tg_generator_random(b)) fail_msg("%s: the streams differ at draw %d", what, i);
}

static void test_dropout_streams(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t n = 1000, s[1] = {1000}, s10[1] = {10};
    tg_tensor *x = tg_ones(tp, TG_F32, 1, s);
    const double p = 0.3;
    const float keep = 1.0f / (float)(1.0 - p);

    /* PyTorch's stream, the default: bernoulli_(1 - p), one random64 per element */
    tg_generator *g = tg_generator_new(5), *h = tg_generator_new(5), *k = tg_generator_new(5);
    assert_int_equal(tg_generator_dropout_stream(g), TG_DROPOUT_TORCH);
    tg_tensor *y = tg_dropout(tp, x, p, g);
    tu_assert_ok(y);
    tg_tensor *mask = tg_empty(tp, TG_F32, 1, s);
    assert_int_equal(tg_bernoulli_(mask, 1.0 - p, h), TG_OK);
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; i++) {
        double m = tg_item_at(mask, i), v = tg_item_at(y, i);
        if (m == 1.0 ? v != (double)keep : v != 0.0)
            fail_msg("torch stream: element %lld: %g, mask %g", (long long)i, v, m);
        zeros += m == 0.0;
    }
    assert_true(zeros > 200 && zeros < 400);
    assert_same_stream(g, h, "dropout vs bernoulli_");
    for (int64_t i = 0; i < n; i++) tg_generator_random64(k);
    for (int i = 0; i < 8; i++) tg_generator_random(k);
    assert_same_stream(g, k, "torch stream vs n random64");

    /* the counter stream: one random64 per call, whatever the size */
    tg_generator_seed(g, 5), tg_generator_seed(k, 5);
    assert_int_equal(tg_generator_set_dropout_stream(g, TG_DROPOUT_COUNTER), TG_OK);
    assert_int_equal(tg_generator_dropout_stream(g), TG_DROPOUT_COUNTER);
    tg_tensor *yc = tg_dropout(tp, x, p, g);
    tu_assert_ok(yc);
    tg_generator_random64(k);
    assert_same_stream(g, k, "counter stream, 1000 elements");
    tu_assert_ok(tg_dropout(tp, tg_ones(tp, TG_F64, 1, s10), 0.5, g));
    tg_generator_random64(k);
    assert_same_stream(g, k, "counter stream, 10 elements");
    zeros = 0;
    bool differs = false;
    for (int64_t i = 0; i < n; i++) {
        double v = tg_item_at(yc, i);
        assert_true(v == 0.0 || v == (double)keep);
        zeros += v == 0.0;
        differs = differs || v != tg_item_at(y, i);
    }
    assert_true(zeros > 200 && zeros < 400);
    assert_true(differs); /* not PyTorch's mask */
    /* the same seed, the same mask; the setting survives reseeding */
    tg_generator_seed(g, 5);
    assert_int_equal(tg_generator_dropout_stream(g), TG_DROPOUT_COUNTER);
    tu_assert_close(tg_dropout(tp, x, p, g), yc, 0.0, 0.0, "counter stream, same seed");

    /* an unknown stream is refused, the setting kept */
    tu_assert_status_error(tg_generator_set_dropout_stream(g, (tg_dropout_stream)2), "unknown stream", "2");
    tu_assert_status_error(tg_generator_set_dropout_stream(g, (tg_dropout_stream)-1), "unknown stream");
    assert_int_equal(tg_generator_dropout_stream(g), TG_DROPOUT_COUNTER);
    assert_int_equal(tg_generator_set_dropout_stream(g, TG_DROPOUT_TORCH), TG_OK);
    tg_generator_seed(g, 5);
    tu_assert_close(tg_dropout(tp, x, p, g), y, 0.0, 0.0, "back to the torch stream");

    /* NULL: the default generator (restored to PyTorch's stream after) */
    assert_int_equal(tg_generator_set_dropout_stream(NULL, TG_DROPOUT_COUNTER), TG_OK);
    assert_int_equal(tg_generator_dropout_stream(tg_default_generator()), TG_DROPOUT_COUNTER);
    tg_manual_seed(5);
    assert_int_equal(tg_generator_dropout_stream(NULL), TG_DROPOUT_COUNTER);
    tu_assert_close(tg_dropout(tp, x, p, NULL), yc, 0.0, 0.0, "counter stream of the default generator");
    assert_int_equal(tg_generator_set_dropout_stream(NULL, TG_DROPOUT_TORCH), TG_OK);
    tg_manual_seed(5);
    tu_assert_close(tg_dropout(tp, x, p, NULL), y, 0.0, 0.0, "torch stream of the default generator");

    tg_generator_free(g);
    tg_generator_free(h);
    tg_generator_free(k);
    tg_tape_free(tp);
}

/* ---- main ----------------------------------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    char dir[4096];
    g_tok = tg_tokenizer_load_dir(data_path(dir, sizeof dir, "gpt2"));
    if (!g_tok) fprintf(stderr, "cannot load the tokenizer: %s\n", tg_last_error());
    return g_tok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tg_tokenizer_free(g_tok);
    json_decref(g_ref);
    printf("cross_entropy: largest relative difference %.3g\n", g_max_ce);
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_randperm),          cmocka_unit_test(test_loader_generator),
        cmocka_unit_test(test_loader_errors),     cmocka_unit_test(test_concurrent_passes),
        cmocka_unit_test(test_cross_entropy_errors),
        cmocka_unit_test(test_text_dataset),      cmocka_unit_test(test_text_loader),
        cmocka_unit_test(test_text_split),        cmocka_unit_test(test_verdict_runs),
        cmocka_unit_test(test_decode_samples),    cmocka_unit_test(test_utf8_replace_invalid),
        cmocka_unit_test(test_generator_state),   cmocka_unit_test(test_dropout_streams),
    };
    const size_t nfixed = sizeof fixed / sizeof fixed[0];
    g_ref = tu_load_ref("pretrain.json");
    const json_t *sc = json_object_get(json_object_get(g_ref, "sampler"), "cases");
    const json_t *cc = json_object_get(json_object_get(g_ref, "cross_entropy"), "cases");
    size_t ns = json_array_size(sc), nc = json_array_size(cc);
    if (ns < 3 || nc < 8) {
        fprintf(stderr, "pretrain.json: too few cases (sampler %zu, cross_entropy %zu)\n", ns, nc);
        return 1;
    }
    size_t n = ns + nc + nfixed;
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    char(*names)[128] = calloc(ns + nc, sizeof *names);
    if (!tests || !names) return 1;
    size_t k = 0;
    for (size_t i = 0; i < ns; i++, k++) {
        const json_t *c = json_array_get(sc, i);
        snprintf(names[k], sizeof names[k], "sampler/seed%lld_n%lld_b%lld",
                 (long long)json_integer_value(json_object_get(c, "seed")),
                 (long long)json_integer_value(json_object_get(c, "n")),
                 (long long)json_integer_value(json_object_get(c, "batch")));
        tests[k] = (struct CMUnitTest){names[k], test_sampler_case, NULL, NULL, (void *)c};
    }
    for (size_t i = 0; i < nc; i++, k++) {
        const json_t *c = json_array_get(cc, i);
        snprintf(names[k], sizeof names[k], "cross_entropy/%s", json_string_value(json_object_get(c, "name")));
        tests[k] = (struct CMUnitTest){names[k], test_cross_entropy_case, NULL, NULL, (void *)c};
    }
    for (size_t i = 0; i < nfixed; i++, k++) tests[k] = fixed[i];
    int rc = _cmocka_run_group_tests("data", tests, n, setup, teardown);
    free(tests);
    free(names);
    return rc;
}
