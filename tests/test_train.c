/* The training loop (tg_trainer, include/tapegrad/train.h) on a task of a
 * user's own: points through a batch function, a small MLP with dropout,
 * MSE.
 *
 * (a) the options' errors, and a loss that is not finite (TG_EDIVERGED);
 * (b) the table: rows at every eval_freq optimizer steps, printed in the
 *     book's format and kept; the step's loss; evaluation over whole loaders;
 * (b2) batches of named tensors, the task's columns (means over the
 *     evaluation's batches, as the loss's), its rows' line and its lines
 *     before training, kept through a checkpoint and not run again on resume;
 * (c) accumulation: 2 micro-batches of 4 give the rows of batches of 8
 *     (no dropout), each micro-batch's loss divided by 2;
 * (d) checkpoints: a run that fails in the middle of an epoch, resumed from
 *     its last checkpoint (every 5 steps), prints and records what the
 *     uninterrupted run does, bit for bit; series and texts come back;
 * (e) a checkpoint of another run (--lr) and a corrupt record are refused;
 * (f) the series API, tg_trainer_eval's sums, an empty loader's NaN loss,
 *     and the loader's pass resumed only from a permutation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

enum { N = 48, D = 3 };
typedef struct {
    float x[N][D], y[N];
} points;
static points data;

/* the task: fail on call `fail_at` of the loss (0: never); NaN on `nan_at` */
typedef struct {
    int64_t calls, fail_at, nan_at;
} task;

static int points_batch(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out)
{
    const points *p = dataset;
    int64_t xs[2] = {count, D}, ys[2] = {count, 1};
    out->input = tg_empty(tp, TG_F32, 2, xs);
    out->target = tg_empty(tp, TG_F32, 2, ys);
    if (!out->input || !out->target) return TG_ENOMEM;
    float *x = tg_data_ptr(out->input), *y = tg_data_ptr(out->target);
    for (int64_t i = 0; i < count; i++) memcpy(x + i * D, p->x[idx[i]], sizeof p->x[0]), y[i] = p->y[idx[i]];
    return TG_OK;
}

static tg_tensor *mse(tg_tape *tp, tg_module *model, const tg_batch *b, void *ud, double *weight)
{
    (void)weight;
    task *t = ud;
    if (t && tg_is_grad_enabled() && ++t->calls == t->fail_at) return tg_error("the machine went down");
    tg_tensor *l = tg_mse_loss(tp, tg_module_forward(tp, model, b->input), b->target, TG_REDUCE_MEAN);
    return t && t->calls == t->nan_at ? tg_mul_scalar(tp, l, NAN) : l;
}

static void make_data(void)
{
    tg_generator *g = tg_generator_new(3);
    for (int i = 0; i < N; i++) {
        double y = 0;
        for (int k = 0; k < D; k++) y += sin(3.0 * (data.x[i][k] = (float)(tg_generator_random(g) / 4294967296.0)));
        data.y[i] = (float)y;
    }
    tg_generator_free(g);
}

/* A fresh run: model (dropout p), AdamW, loaders of batch b. */
typedef struct {
    tg_tape *tp;
    tg_module *model;
    tg_optimizer *opt;
    tg_loader *tl, *vl;
    tg_trainer_options o;
} run;

static void run_new(run *r, double p, int64_t batch, double lr)
{
    memset(r, 0, sizeof *r);
    r->tp = tg_tape_new();
    tg_manual_seed(11);
    tg_module *layers[3] = {tg_linear_new(r->tp, D, 16, true), tg_dropout_new(r->tp, p),
                            tg_linear_new(r->tp, 16, 1, true)};
    r->model = tg_sequential_new(r->tp, 3, layers);
    r->opt = tg_adamw_new(r->tp, r->model, (tg_adam_options){lr, {0.9, 0.999}, 1e-8, 0.01, false});
    r->tl = tg_loader_new(N, (tg_loader_options){.batch_size = batch, .shuffle = true, .drop_last = true});
    r->vl = tg_loader_new(N, (tg_loader_options){.batch_size = batch});
    tu_assert_ok(r->opt);
    r->o = (tg_trainer_options){.model = r->model, .optimizer = r->opt, .train = {r->tl, points_batch, &data},
                                .val = {r->vl, points_batch, &data}, .loss = mse, .epochs = 3, .eval_freq = 4,
                                .eval_iter = 2, .quiet = true};
}

static void run_free(run *r)
{
    tg_loader_free(r->tl);
    tg_loader_free(r->vl);
    tg_tape_free(r->tp);
}

static char g_dir[64];
static const char *tmp_path(char *buf, size_t n, const char *name)
{
    if (!g_dir[0]) {
        strcpy(g_dir, "/tmp/tapegrad_test_train_XXXXXX");
        if (!mkdtemp(g_dir)) fail_msg("mkdtemp failed");
    }
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

/* ---- (a) errors ------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    run r;
    run_new(&r, 0.0, 8, 1e-2);
    tu_assert_null_error(tg_trainer_new(NULL), "NULL options");
    tg_trainer_options o = r.o;
    o.loss = NULL;
    tu_assert_null_error(tg_trainer_new(&o), "a model, an optimizer and a loss are required");
    o = r.o, o.epochs = 0;
    tu_assert_null_error(tg_trainer_new(&o), "epochs must be >= 1");
    o = r.o, o.clip_grad_norm = -1;
    tu_assert_null_error(tg_trainer_new(&o), "clip_grad_norm");
    o = r.o, o.schedule = true, o.warmup = 1000;
    tu_assert_null_error(tg_trainer_new(&o), "--warmup 1000: the run has 18 steps");
    o = r.o, o.train.loader = NULL;
    tg_trainer *tr = tg_trainer_new(&o);
    tu_assert_ok(tr);
    tu_assert_status_error(tg_trainer_fit(tr), "no training loader");
    tg_trainer_free(tr);
    /* the step's policy: on the trainer's own tape; a given tape keeps its own,
     * which the option must equal or leave EXACT */
    o = r.o, o.numerics = TG_NUMERICS_BF16;
    tr = tg_trainer_new(&o);
    tu_assert_ok(tr);
    assert_int_equal(tg_tape_numerics(tg_trainer_tape(tr)), TG_NUMERICS_BF16);
    tg_trainer_free(tr);
    tg_tape *own = tg_tape_new();
    assert_int_equal(tg_tape_set_numerics(own, TG_NUMERICS_FAST), TG_OK);
    o = r.o, o.step_tape = own;
    tr = tg_trainer_new(&o);
    tu_assert_ok(tr);
    assert_int_equal(tg_tape_numerics(tg_trainer_tape(tr)), TG_NUMERICS_FAST);
    tg_trainer_free(tr);
    o.numerics = TG_NUMERICS_BF16;
    tu_assert_null_error(tg_trainer_new(&o), "trainer: numerics bf16 differs from the step tape's fast");
    tg_tape_free(own);
    /* a loss that is not finite stops training: TG_EDIVERGED at that step */
    task t = {.nan_at = 3};
    o = r.o, o.task = &t;
    tr = tg_trainer_new(&o);
    int st = tg_trainer_fit(tr);
    assert_int_equal(st, TG_EDIVERGED);
    tu_assert_status_error(st, "the loss diverged to nan at step 2");
    tg_trainer_free(tr);
    /* a loss that fails stops training with its message */
    run_free(&r);
    run_new(&r, 0.0, 8, 1e-2);
    t = (task){.fail_at = 2};
    o = r.o, o.task = &t;
    tr = tg_trainer_new(&o);
    tu_assert_status_error(tg_trainer_fit(tr), "the machine went down");
    tg_trainer_free(tr);
    run_free(&r);
}

/* ---- (b) the table ------------------------------------------------------------------------------ */

static void test_table(void **state)
{
    (void)state;
    run r;
    run_new(&r, 0.1, 8, 1e-2);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    r.o.quiet = false, r.o.out = f;
    tg_trainer *tr = tg_trainer_new(&r.o);
    tu_assert_ok(tr);
    assert_int_equal(tg_trainer_fit(tr), TG_OK);
    fclose(f);
    int64_t n;
    const tg_train_row *rows = tg_trainer_rows(tr, &n);
    /* 6 steps per epoch, 3 epochs: rows at steps 0, 4, 8, 12, 16 */
    assert_int_equal(n, 5);
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(rows[i].step, 4 * i);
        assert_int_equal(rows[i].epoch, 4 * i / 6 + 1);
        assert_int_equal(rows[i].seen, 8 * (4 * i + 1));
        assert_true(isfinite(rows[i].train_loss) && isfinite(rows[i].val_loss));
    }
    assert_true(rows[4].val_loss < rows[0].val_loss);
    char first[128];
    snprintf(first, sizeof first, "Ep 1 (Step 000000): Train loss %.3f, Val loss %.3f\n", rows[0].train_loss,
             rows[0].val_loss);
    assert_true(strncmp(out, first, strlen(first)) == 0);
    tg_trainer_stats s;
    assert_int_equal(tg_trainer_get_stats(tr, &s), TG_OK);
    assert_int_equal(s.epoch, 3);
    assert_int_equal(s.step, 17);
    assert_int_equal(s.seen, 144);
    assert_int_equal(s.size, 1);
    free(out);
    /* the step's loss is the mean of its micro-batches' losses */
    tg_tape *tp = tg_trainer_tape(tr);
    tg_module_train(r.model, false);
    int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    tg_batch b[2] = {0};
    assert_int_equal(points_batch(tp, &data, 4, idx, &b[0]), TG_OK);
    assert_int_equal(points_batch(tp, &data, 4, idx + 4, &b[1]), TG_OK);
    double want = 0;
    for (int k = 0; k < 2; k++) want += tg_item(mse(tp, r.model, &b[k], NULL, NULL)) / 2;
    double got;
    assert_int_equal(tg_trainer_step(tr, 2, b, &got), TG_OK);
    assert_true(fabs(got - want) <= 1e-7 * fabs(want));
    tg_batch none = {0};
    tu_assert_status_error(tg_trainer_step(tr, 1, &none, &got), "a batch needs an input");
    tu_assert_status_error(tg_trainer_step(tr, 0, b, &got), "trainer_step: bad argument");
    tg_trainer_free(tr);
    run_free(&r);
}

/* ---- (c) accumulation ----------------------------------------------------------------------------- */

static void test_accumulate(void **state)
{
    (void)state;
    run a, b;
    run_new(&a, 0.0, 8, 1e-2);
    run_new(&b, 0.0, 4, 1e-2);
    a.o.eval_iter = b.o.eval_iter = 0; /* whole loaders: the same examples either way */
    /* SGD: linear in the gradients (Adam's first steps are sign(g) * lr, so a
     * gradient at rounding level would flip a whole step) */
    a.o.optimizer = tg_sgd_new(a.tp, a.model, (tg_sgd_options){.lr = 0.05, .momentum = 0.9});
    b.o.optimizer = tg_sgd_new(b.tp, b.model, (tg_sgd_options){.lr = 0.05, .momentum = 0.9});
    b.o.accumulate = 2;
    tg_trainer *ta = tg_trainer_new(&a.o), *tb = tg_trainer_new(&b.o);
    tg_manual_seed(5); /* the same shuffles for both */
    assert_int_equal(tg_trainer_fit(ta), TG_OK);
    tg_manual_seed(5);
    assert_int_equal(tg_trainer_fit(tb), TG_OK);
    int64_t na, nb;
    const tg_train_row *ra = tg_trainer_rows(ta, &na), *rb = tg_trainer_rows(tb, &nb);
    assert_int_equal(na, nb);
    for (int64_t i = 0; i < na; i++) {
        assert_int_equal(ra[i].step, rb[i].step);
        assert_int_equal(ra[i].seen, rb[i].seen);
        assert_true(fabs(ra[i].train_loss - rb[i].train_loss) <= 1e-5 * ra[i].train_loss);
        assert_true(fabs(ra[i].val_loss - rb[i].val_loss) <= 1e-5 * ra[i].val_loss);
    }
    assert_true(ra[na - 1].val_loss < 0.5 * ra[0].val_loss);
    tg_trainer_free(ta);
    tg_trainer_free(tb);
    run_free(&a);
    run_free(&b);
}

/* ---- (b2) named tensors and the task's columns ------------------------------------------------------ */

/* the points as named tensors "x" and "y" (no input or target) */
static int named_batch(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out)
{
    tg_batch b = {0};
    int st = points_batch(tp, dataset, count, idx, &b);
    if (st == TG_OK) st = tg_batch_set(out, "x", b.input);
    if (st == TG_OK) st = tg_batch_set(out, "y", b.target);
    return st;
}

/* MSE on the named tensors; the columns: the loss itself, and the rows */
typedef struct {
    double last[2];
    int begun, rows_printed;
} col_task;

static tg_tensor *named_mse(tg_tape *tp, tg_module *model, const tg_batch *b, void *ud, double *weight)
{
    (void)weight;
    col_task *t = ud;
    tg_tensor *x = tg_batch_get(b, "x"), *y = tg_batch_get(b, "y");
    if (!x || !y) return NULL;
    tg_tensor *l = tg_mse_loss(tp, tg_module_forward(tp, model, x), y, TG_REDUCE_MEAN);
    t->last[0] = l ? tg_item(l) : NAN, t->last[1] = (double)x->shape[0];
    return l;
}

static int col_values(void *ud, double *v)
{
    col_task *t = ud;
    v[0] = t->last[0], v[1] = t->last[1];
    return TG_OK;
}

static int col_begin(tg_trainer *tr, void *ud)
{
    col_task *t = ud;
    t->begun++;
    tg_train_row w;
    int st = tg_trainer_evaluate(tr, &w);
    if (st == TG_OK && (w.train_columns[0] != w.train_loss || w.val_columns[0] != w.val_loss))
        return tg_error_status(TG_EINVAL, "the loss column is not the loss");
    return st == TG_OK ? tg_trainer_printf(tr, "before: %.6f %.6f", w.train_loss, w.val_loss) : st;
}

static int col_row(tg_trainer *tr, const tg_train_row *w, void *ud)
{
    col_task *t = ud;
    t->rows_printed++;
    return tg_trainer_printf(tr, "step %lld: %.6f (%.6f) rows %g", (long long)w->step, w->train_loss, w->train_columns[0],
                             w->train_columns[1]);
}

static void test_columns(void **state)
{
    (void)state;
    static const char *const names[2] = {"loss", "rows"};
    char ck[128], *full = NULL, *resumed = NULL;
    tmp_path(ck, sizeof ck, "cols.ckpt");
    run a, c;
    col_task ta = {0}, tc = {0};
    run_new(&a, 0.1, 8, 1e-2);
    a.o.train.batch = a.o.val.batch = named_batch, a.o.loss = named_mse;
    a.o.n_columns = 2, a.o.columns = names, a.o.column_values = col_values;
    a.o.on_train_begin = col_begin, a.o.print_row = col_row;
    size_t len;
    FILE *f = open_memstream(&full, &len);
    a.o.quiet = false, a.o.out = f, a.o.task = &ta;
    tg_trainer *tr = tg_trainer_new(&a.o);
    tu_assert_ok(tr);
    assert_int_equal(tg_trainer_fit(tr), TG_OK);
    fclose(f);
    assert_int_equal(ta.begun, 1);
    int64_t n;
    const tg_train_row *rows = tg_trainer_rows(tr, &n);
    assert_int_equal(n, 5);
    assert_int_equal(ta.rows_printed, 5);
    for (int64_t i = 0; i < n; i++) { /* the same batches, the same means */
        assert_true(rows[i].train_columns[0] == rows[i].train_loss);
        assert_true(rows[i].val_columns[0] == rows[i].val_loss);
        assert_true(rows[i].train_columns[1] == 8.0 && rows[i].val_columns[1] == 8.0);
        assert_true(rows[i].train_columns[2] == 0.0 && rows[i].val_columns[3] == 0.0); /* unused: zero */
    }
    assert_non_null(strstr(full, "before: "));
    assert_non_null(strstr(full, "step 000000") == NULL ? strstr(full, "step 0: ") : NULL);
    /* a checkpoint after epoch 1, resumed: the same lines and rows, columns
     * included; the task's first lines come from the checkpoint */
    run_new(&c, 0.1, 8, 1e-2);
    c.o = a.o;
    c.o.train.loader = c.tl, c.o.val.loader = c.vl, c.o.model = c.model, c.o.optimizer = c.opt;
    c.o.epochs = 1, c.o.checkpoint = ck, c.o.task = &tc, c.o.out = f = open_memstream(&resumed, &len);
    tg_trainer *t1 = tg_trainer_new(&c.o);
    assert_int_equal(tg_trainer_fit(t1), TG_OK);
    tg_trainer_free(t1);
    fclose(f);
    free(resumed);
    run_free(&c);
    run_new(&c, 0.1, 8, 1e-2);
    tc = (col_task){0};
    c.o = a.o;
    c.o.train.loader = c.tl, c.o.val.loader = c.vl, c.o.model = c.model, c.o.optimizer = c.opt;
    c.o.resume = ck, c.o.task = &tc, c.o.out = f = open_memstream(&resumed, &len);
    t1 = tg_trainer_new(&c.o);
    tu_assert_ok(t1);
    assert_int_equal(tg_trainer_fit(t1), TG_OK);
    fclose(f);
    assert_int_equal(tc.begun, 0);
    assert_string_equal(resumed, full);
    int64_t nc;
    const tg_train_row *rc = tg_trainer_rows(t1, &nc);
    assert_int_equal(nc, n);
    assert_memory_equal(rc, rows, sizeof *rows * (size_t)n);
    tg_trainer_free(t1);
    /* the options' errors */
    tg_trainer_options o = a.o;
    o.n_columns = TG_TRAIN_MAX_COLUMNS + 1;
    tu_assert_null_error(tg_trainer_new(&o), "trainer: 5 columns (at most 4");
    o.n_columns = 1, o.column_values = NULL;
    tu_assert_null_error(tg_trainer_new(&o), "each named, with column_values");
    /* tg_batch_get / tg_batch_set */
    tg_batch b = {0};
    tg_tensor *x = tg_zeros(a.tp, TG_F32, 1, (int64_t[]){2});
    tu_assert_null_error(tg_batch_get(&b, "x"), "batch: no tensor named 'x'");
    tu_assert_null_error(tg_batch_get(&b, "input"), "batch: no tensor named 'input'");
    static const char *const eight[TG_BATCH_MAX_TENSORS] = {"loss", "rows", "a", "b", "c", "d", "e", "f"};
    for (int i = 0; i < TG_BATCH_MAX_TENSORS; i++) assert_int_equal(tg_batch_set(&b, eight[i], x), TG_OK);
    tu_assert_status_error(tg_batch_set(&b, "more", x), "a batch holds at most 8 named tensors");
    assert_int_equal(tg_batch_set(&b, "loss", x), TG_OK); /* replaces */
    assert_ptr_equal(tg_batch_get(&b, "rows"), x);
    tu_assert_status_error(tg_batch_set(&b, "z", NULL), "batch_set: NULL argument");
    /* a batch whose tensors disagree on their rows is refused */
    tg_batch bad = {0};
    tg_batch_set(&bad, "x", tg_zeros(a.tp, TG_F32, 2, (int64_t[]){4, 3}));
    tg_batch_set(&bad, "y", tg_zeros(a.tp, TG_F32, 2, (int64_t[]){3, 1}));
    tu_assert_status_error(tg_trainer_step(tr, 1, &bad, NULL), "the batch's y has 3 rows, its lead 4");
    tg_trainer_free(tr);
    free(full);
    free(resumed);
    run_free(&c);
    run_free(&a);
}

/* ---- (d) checkpoints and resume ------------------------------------------------------------------------ */

static int record(tg_trainer *tr, int64_t epoch, void *ud)
{
    (void)ud;
    char text[32];
    snprintf(text, sizeof text, "epoch %lld", (long long)epoch);
    int st = tg_trainer_record(tr, "epochs", (double)epoch);
    if (st == TG_OK) st = tg_trainer_record_text(tr, "texts", text);
    return st == TG_OK ? tg_trainer_printf(tr, "%s", text) : st;
}

/* fit with output into *out; the trainer is returned (not freed) */
static tg_trainer *fit(run *r, task *t, const char *ck, int64_t every, const char *resume, char **out, int *st)
{
    size_t len;
    FILE *f = open_memstream(out, &len);
    r->o.quiet = false, r->o.out = f, r->o.task = t, r->o.on_epoch_end = record;
    r->o.checkpoint = ck, r->o.checkpoint_every = every, r->o.resume = resume;
    tg_trainer *tr = tg_trainer_new(&r->o);
    *st = tr ? tg_trainer_fit(tr) : TG_EINVAL;
    fclose(f);
    return tr;
}

static void test_resume(void **state)
{
    (void)state;
    char ck[128], *full = NULL, *part = NULL, *resumed = NULL;
    tmp_path(ck, sizeof ck, "run.ckpt");
    run a, b, c;
    int st;
    task t = {0};
    run_new(&a, 0.2, 8, 1e-2);
    tg_trainer *ta = fit(&a, &t, NULL, 0, NULL, &full, &st);
    assert_int_equal(st, TG_OK);
    for (int every = 0; every <= 5; every += 5) {
        /* fails in the loss of step 14 (epoch 3): the last checkpoint is the
         * one after epoch 2 or after step 9 */
        task fail = {.fail_at = 15};
        unlink(ck);
        run_new(&b, 0.2, 8, 1e-2);
        tg_trainer *tb = fit(&b, &fail, ck, every, NULL, &part, &st);
        tu_assert_status_error(st, "the machine went down");
        tg_trainer_free(tb);
        run_free(&b);
        tg_manual_seed(999); /* the generator comes back from the checkpoint */
        run_new(&c, 0.2, 8, 1e-2);
        task t2 = {0};
        tg_trainer *tc = fit(&c, &t2, ck, every, ck, &resumed, &st);
        assert_int_equal(st, TG_OK);
        assert_string_equal(resumed, full);
        int64_t na, nc;
        const tg_train_row *ra = tg_trainer_rows(ta, &na), *rc = tg_trainer_rows(tc, &nc);
        assert_int_equal(na, nc);
        assert_memory_equal(ra, rc, sizeof *ra * (size_t)na);
        int64_t ne, nt;
        const double *e = tg_trainer_series(tc, "epochs", &ne);
        const char *const *tx = tg_trainer_texts(tc, "texts", &nt);
        assert_int_equal(ne, 3);
        assert_int_equal(nt, 3);
        assert_true(e[2] == 3.0);
        assert_string_equal(tx[1], "epoch 2");
        /* the parameters too, to the bit */
        tg_named_list pa, pc;
        assert_int_equal(tg_module_named_parameters(a.tp, a.model, &pa), TG_OK);
        assert_int_equal(tg_module_named_parameters(c.tp, c.model, &pc), TG_OK);
        for (int i = 0; i < pa.n; i++)
            assert_memory_equal(tg_data_ptr(pa.tensors[i]), tg_data_ptr(pc.tensors[i]),
                                sizeof(float) * (size_t)tg_numel(pa.tensors[i]));
        tg_trainer_free(tc);
        run_free(&c);
        free(part), free(resumed);
        part = resumed = NULL;
    }
    /* a checkpoint at the last epoch: nothing to train, the same lines */
    run_new(&c, 0.2, 8, 1e-2);
    tg_trainer *tc = fit(&c, &t, ck, 0, ck, &resumed, &st);
    assert_int_equal(st, TG_OK);
    assert_string_equal(resumed, full);
    tg_trainer_stats s;
    tg_trainer_get_stats(tc, &s);
    assert_int_equal(s.steps_this_run, 0);
    tg_trainer_free(tc);
    run_free(&c);
    free(resumed);
    tg_trainer_free(ta);
    run_free(&a);
    free(full);
}

/* ---- (e) a checkpoint of another run, a corrupt record --------------------------------------------------- */

static void test_resume_refused(void **state)
{
    (void)state;
    char ck[128], bad[128];
    tmp_path(ck, sizeof ck, "other.ckpt");
    tmp_path(bad, sizeof bad, "bad.ckpt");
    run a;
    run_new(&a, 0.0, 8, 1e-2);
    a.o.epochs = 1, a.o.checkpoint = ck;
    tg_trainer *tr = tg_trainer_new(&a.o);
    assert_int_equal(tg_trainer_fit(tr), TG_OK);
    tg_trainer_free(tr);
    run_free(&a);
    /* another learning rate */
    run_new(&a, 0.0, 8, 2e-2);
    a.o.resume = ck;
    tu_assert_null_error(tg_trainer_new(&a.o), "--resume: ", "belongs to another run", "--lr");
    /* another batch size, and the task's own identity */
    run_free(&a);
    run_new(&a, 0.0, 4, 1e-2);
    a.o.resume = ck;
    tu_assert_null_error(tg_trainer_new(&a.o), "--batch 8, this run 4");
    run_free(&a);
    tg_checkpoint_value v = {.name = "--my-setting", .i = 3};
    run_new(&a, 0.0, 8, 1e-2);
    a.o.resume = ck, a.o.n_identity = 1, a.o.identity = &v;
    tu_assert_null_error(tg_trainer_new(&a.o), "identity values");
    /* the run's own checkpoint with a record that is not the trainer's */
    tg_safetensors f;
    assert_int_equal(tg_safetensors_load(a.tp, ck, &f), TG_OK);
    tg_named_tensor *items = tg_tape_alloc(a.tp, sizeof *items * (size_t)f.n, false);
    int64_t n = 5;
    for (int i = 0; i < f.n; i++) {
        items[i] = (tg_named_tensor){f.names[i], f.tensors[i]};
        if (strcmp(f.names[i], "train.log") == 0) items[i].tensor = tg_from_data(a.tp, TG_U8, 1, &n, "{\"ro\"");
    }
    assert_int_equal(tg_safetensors_save(bad, items, f.n), TG_OK);
    a.o.resume = bad, a.o.n_identity = 0;
    tu_assert_null_error(tg_trainer_new(&a.o), "--resume: ", "corrupt training record");
    run_free(&a);
}

/* ---- (f) series, eval sums, an empty loader, a pass resumed ----------------------------------------------- */

static int count_rows(tg_tape *tp, tg_module *model, const tg_batch *b, void *ud, int n, double *sums)
{
    (void)tp, (void)model, (void)ud;
    assert_int_equal(n, 2);
    sums[0] += (double)b->input->shape[0];
    sums[1] += 1;
    return TG_OK;
}

static void test_helpers(void **state)
{
    (void)state;
    run r;
    run_new(&r, 0.0, 8, 1e-2);
    tg_trainer *tr = tg_trainer_new(&r.o);
    assert_int_equal(tg_trainer_record(tr, "a", 1.5), TG_OK);
    tu_assert_status_error(tg_trainer_record_text(tr, "a", "x"), "series 'a' holds values, not texts");
    assert_int_equal(tg_trainer_record_text(tr, "t", "x"), TG_OK);
    tu_assert_status_error(tg_trainer_record(tr, "t", 2), "series 't' holds texts, not values");
    int64_t n;
    assert_null(tg_trainer_series(tr, "t", &n));
    assert_int_equal(n, 0);
    assert_null(tg_trainer_texts(tr, "missing", &n));
    /* 48 validation rows in batches of 8: 6 batches; 2 of them */
    double sums[2] = {0, 0};
    assert_int_equal(tg_trainer_eval(tr, &r.o.val, 0, count_rows, NULL, 2, sums), TG_OK);
    assert_true(sums[0] == 48 && sums[1] == 6);
    sums[0] = sums[1] = 0;
    assert_int_equal(tg_trainer_eval(tr, &r.o.val, 2, count_rows, NULL, 2, sums), TG_OK);
    assert_true(sums[0] == 16 && sums[1] == 2);
    tg_loader *empty = tg_loader_new(0, (tg_loader_options){.batch_size = 8});
    tg_data d = {empty, points_batch, &data};
    double loss = 0;
    assert_int_equal(tg_trainer_loss(tr, &d, 0, &loss), TG_OK);
    assert_true(isnan(loss));
    /* a pass resumed: from a permutation only */
    int64_t order[N];
    for (int i = 0; i < N; i++) order[i] = N - 1 - i;
    tg_loader_iter *it = tg_loader_iter_resume(r.tl, 8, order);
    tu_assert_ok(it);
    int64_t idx[8], count;
    const int64_t *o;
    assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 1);
    assert_int_equal(idx[0], N - 1 - 8);
    assert_int_equal(tg_loader_iter_position(it, &o), 16);
    tg_loader_iter_free(it);
    order[3] = order[4];
    tu_assert_null_error(tg_loader_iter_resume(r.tl, 8, order), "not a permutation");
    tu_assert_null_error(tg_loader_iter_resume(r.tl, N + 1, order), "cannot resume a pass at sample 49");
    tg_loader_free(empty);
    tg_trainer_free(tr);
    run_free(&r);
}

static int teardown(void **state)
{
    (void)state;
    if (g_dir[0]) {
        char p[128];
        const char *names[3] = {"run.ckpt", "other.ckpt", "bad.ckpt"};
        for (int i = 0; i < 3; i++) unlink(tmp_path(p, sizeof p, names[i]));
        rmdir(g_dir);
    }
    return 0;
}

int main(void)
{
    make_data();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),         cmocka_unit_test(test_table),
        cmocka_unit_test(test_accumulate),     cmocka_unit_test(test_resume),
        cmocka_unit_test(test_columns),
        cmocka_unit_test(test_resume_refused), cmocka_unit_test(test_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
