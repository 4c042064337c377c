/* The training loop (train.h): one loop for every task, in the book's
 * order, with the schedule, clipping, accumulation, checkpoints with exact
 * resume and data parallelism over MPI done once here.
 *
 * Built on the public API alone (modules, optimizers, loaders, checkpoints,
 * dist), as a user's own loop would be. What a run has printed and recorded
 * is kept (the transcript, the table, the task's series), so that a
 * checkpoint holds it and a resumed run prints the uninterrupted run's
 * lines. */
#include <tapegrad.h>
#include <tapegrad/train.h>

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOG_KEY "train.log" /* the checkpoint's record of the run (JSON text, uint8) */

typedef struct {
    char *name;
    double *v;
    char **text;
    bool is_text;
    int64_t n, cap;
} series;

struct tg_trainer {
    tg_trainer_options o;
    tg_tape *own_tape, *tp;
    int rank, size;
    bool lead;
    tg_dist_ddp *ddp;
    double peak_lr;
    int64_t nb, steps_per_epoch, total_steps, accumulate;
    /* progress: epochs finished, the last global step, seen; a resumed pass */
    int64_t epoch, step, seen, batch_in_epoch;
    tg_loader_iter *resumed;
    int64_t steps_this_run, seen_this_run;
    /* what was printed and recorded */
    tg_train_row *rows;
    int64_t n_rows, cap_rows;
    char *transcript;
    size_t t_len, t_cap;
    series *sr;
    int n_sr;
    /* timing */
    double t0, seconds;
    double ph[4]; /* forward, backward, sync, optimizer of the last step */
    size_t tape_bytes;
    tg_dist_ddp_stats dist;
    bool progress_shown;
    /* a step in progress */
    double step_loss;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- batches ------------------------------------------------------------------------------ */

int tg_class_batch(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out)
{
    return tg_class_dataset_batch(dataset, tp, idx, count, &out->input, &out->target);
}

int tg_instruction_batch(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out)
{
    const tg_instruction_batches *b = dataset;
    if (!b) return tg_error_status(TG_EINVAL, "instruction_batch: NULL dataset");
    return tg_instruction_dataset_batch(b->dataset, tp, idx, count, b->pad_id, b->ignore_index, b->allowed_max_length,
                                        &out->input, &out->target);
}

tg_tensor *tg_batch_get(const tg_batch *b, const char *name)
{
    if (!b || !name) return tg_error("batch_get: NULL argument");
    if (strcmp(name, "input") == 0 && b->input) return b->input;
    if (strcmp(name, "target") == 0 && b->target) return b->target;
    for (int i = 0; i < b->n && i < TG_BATCH_MAX_TENSORS; i++)
        if (b->names[i] && strcmp(b->names[i], name) == 0) return b->tensors[i];
    return tg_error("batch: no tensor named '%.100s'", name);
}

int tg_batch_set(tg_batch *b, const char *name, tg_tensor *t)
{
    if (!b || !name || !t) return tg_error_status(TG_EINVAL, "batch_set: NULL argument");
    if (b->n < 0 || b->n > TG_BATCH_MAX_TENSORS) return tg_error_status(TG_EINVAL, "batch_set: a batch of %d tensors", b->n);
    for (int i = 0; i < b->n; i++)
        if (b->names[i] && strcmp(b->names[i], name) == 0) {
            b->tensors[i] = t;
            return TG_OK;
        }
    if (b->n == TG_BATCH_MAX_TENSORS)
        return tg_error_status(TG_EINVAL, "batch_set: a batch holds at most %d named tensors", TG_BATCH_MAX_TENSORS);
    b->names[b->n] = name, b->tensors[b->n++] = t;
    return TG_OK;
}

/* The batch's lead tensor (its rows are the batch's); NULL when it has none. */
static tg_tensor *lead(const tg_batch *b)
{
    if (b->input) return b->input;
    return b->n > 0 && b->n <= TG_BATCH_MAX_TENSORS ? b->tensors[0] : NULL;
}

/* Whether every tensor of b has rows (a first dimension) and the lead's count. */
static int check_batch(const tg_batch *b)
{
    tg_tensor *l = lead(b);
    if (!l || l->ndim < 1)
        return tg_error_status(TG_EINVAL, "trainer: a batch needs an input (or a named tensor) whose first dimension "
                                          "counts its rows");
    if (b->n < 0 || b->n > TG_BATCH_MAX_TENSORS)
        return tg_error_status(TG_EINVAL, "trainer: a batch of %d named tensors (at most %d)", b->n, TG_BATCH_MAX_TENSORS);
    for (int i = -1; i < b->n; i++) {
        const tg_tensor *t = i < 0 ? b->target : b->tensors[i];
        if (i >= 0 && (!t || !b->names[i])) return tg_error_status(TG_EINVAL, "trainer: the batch's tensor %d has no name or value", i);
        if (t && (t->ndim < 1 || t->shape[0] != l->shape[0]))
            return tg_error_status(TG_EINVAL, "trainer: the batch's %s has %lld rows, its lead %lld",
                                   i < 0 ? "target" : b->names[i], t->ndim < 1 ? 0LL : (long long)t->shape[0],
                                   (long long)l->shape[0]);
    }
    return TG_OK;
}

int tg_preference_batch(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out)
{
    const tg_preference_batches *p = dataset;
    if (!p || !out) return tg_error_status(TG_EINVAL, "preference_batch: NULL argument");
    static const char *const names[4] = {"chosen", "rejected", "chosen_mask", "rejected_mask"};
    tg_tensor *t[4];
    int st = tg_preference_dataset_batch(p->dataset, tp, idx, count, p->pad_id, p->allowed_max_length, !p->keep_prompt, t);
    *out = (tg_batch){0};
    for (int k = 0; st == TG_OK && k < 4; k++) st = tg_batch_set(out, names[k], t[k]);
    return st;
}

/* The pass's next batch of d in tp: 1, 0 at the end, a negative status. */
static int next_batch(tg_tape *tp, const tg_data *d, tg_loader_iter *it, tg_batch *b)
{
    *b = (tg_batch){0};
    if (!d->batch) return tg_loader_iter_next(it, tp, &b->input, &b->target);
    int64_t count, *idx = tg_tape_alloc(tp, sizeof *idx * (size_t)tg_loader_batch_size(d->loader), false);
    if (!idx) return tg_error_status(TG_ENOMEM, "trainer: out of memory");
    int got = tg_loader_iter_next_indices(it, idx, &count);
    if (got != 1) return got;
    int st = d->batch(tp, d->dataset, count, idx, b);
    if (st == TG_OK && !lead(b)) st = tg_error_status(TG_EINVAL, "trainer: the batch function gave no tensor");
    if (st == TG_OK) st = check_batch(b);
    return st == TG_OK ? 1 : st;
}

/* Rows [start, start + count) of every tensor of the batch (the whole batch
 * alone); the lead NULL when out of memory. */
static tg_batch rows_of(tg_tape *tp, const tg_batch *b, int64_t start, int64_t count)
{
    if (start == 0 && count == lead(b)->shape[0]) return *b;
    tg_batch s = *b;
    bool ok = true;
    for (int i = -2; i < b->n; i++) {
        tg_tensor **t = i == -2 ? &s.input : i == -1 ? &s.target : &s.tensors[i];
        if (*t && !(*t = tg_narrow(tp, *t, 0, start, count))) ok = false;
    }
    if (!ok) s.input = NULL, s.n = 0;
    return s;
}

/* This rank's rows of a global batch of `rows` (uneven when rows does not divide). */
static void rank_rows(const tg_trainer *tr, int64_t rows, int64_t *start, int64_t *count)
{
    int64_t b0 = rows * tr->rank / tr->size, b1 = rows * (tr->rank + 1) / tr->size;
    *start = b0, *count = b1 - b0;
}

/* ---- the book's losses ---------------------------------------------------------------------- */

tg_tensor *tg_loss_lm(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, double *weight)
{
    (void)task;
    if (!b || !b->target) return tg_error("loss_lm: NULL batch");
    tg_tensor *loss;
    if (tg_gpt_is_decoder(model)) { /* the decoder: its head in chunks where it can */
        loss = tg_gpt_lm_loss(tp, model, b->input, b->target, TG_IGNORE_INDEX);
    } else {
        tg_tensor *logits = tg_module_forward(tp, model, b->input);
        if (!logits) return NULL;
        if (logits->ndim != 3)
            return tg_error("loss_lm: the model's output has %d dims, expected (B, T, vocab)", logits->ndim);
        int64_t flat[2] = {-1, logits->shape[2]}, n = -1;
        loss = tg_cross_entropy(tp, tg_view(tp, logits, 2, flat), tg_view(tp, b->target, 1, &n), TG_REDUCE_MEAN);
    }
    if (loss && weight) {
        tg_tensor *t = tg_contiguous(tp, b->target);
        const int64_t *y = t && t->dtype == TG_I64 ? tg_data_ptr(t) : NULL;
        if (!y) return tg_error("loss_lm: the targets are not int64");
        int64_t k = 0, m = tg_numel(t);
        for (int64_t i = 0; i < m; i++) k += y[i] != TG_IGNORE_INDEX;
        *weight = (double)k;
    }
    return loss;
}

tg_tensor *tg_loss_last(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, double *weight)
{
    (void)task, (void)weight;
    if (!b) return tg_error("loss_last: NULL batch");
    return tg_cross_entropy(tp, tg_gpt_forward_last(tp, model, b->input), b->target, TG_REDUCE_MEAN);
}

/* ---- DPO ------------------------------------------------------------------------------------- */

const char *const *tg_dpo_column_names(void)
{
    static const char *const names[2] = {"chosen_reward", "rejected_reward"};
    return names;
}

/* compute_logprobs(model(batch[key]), batch[key], batch[key + "_mask"]) */
static tg_tensor *dpo_logprobs(tg_tape *tp, tg_module *m, const tg_batch *b, const char *key, const char *mask)
{
    tg_tensor *ids = tg_batch_get(b, key), *sel = ids ? tg_batch_get(b, mask) : NULL;
    tg_tensor *logits = sel ? tg_module_forward(tp, m, ids) : NULL;
    return logits ? tg_compute_logprobs(tp, logits, ids, sel) : NULL;
}

tg_tensor *tg_loss_dpo(tg_tape *tp, tg_module *policy, const tg_batch *b, void *task, double *weight)
{
    (void)weight; /* the mean over the batch's rows */
    tg_dpo_task *t = task;
    if (!tp || !policy || !b || !t) return tg_error("loss_dpo: NULL argument (a tg_dpo_task)");
    if (!(t->beta > 0) || !isfinite(t->beta)) return tg_error("loss_dpo: beta must be finite and > 0, got %g", t->beta);
    tg_tensor *pc = dpo_logprobs(tp, policy, b, "chosen", "chosen_mask");
    tg_tensor *pr = pc ? dpo_logprobs(tp, policy, b, "rejected", "rejected_mask") : NULL;
    if (!pr) return NULL;
    /* the reference: eval mode, no graph; without one, the policy without
     * its LoRA adapters (its frozen starting weights) */
    tg_module *ref = t->reference ? t->reference : policy;
    bool training = tg_module_is_training(ref);
    if (!t->reference && tg_lora_set_enabled(policy, false) <= 0)
        return tg_error("loss_dpo: no reference model, and the policy has no LoRA adapters to run without");
    tg_module_train(ref, false);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *rc = dpo_logprobs(tp, ref, b, "chosen", "chosen_mask");
    tg_tensor *rr = rc ? dpo_logprobs(tp, ref, b, "rejected", "rejected_mask") : NULL;
    tg_set_grad_enabled(prev);
    if (!t->reference) {
        tg_lora_set_enabled(policy, true);
        tg_module_train(policy, training);
    }
    tg_tensor *cr = NULL, *rj = NULL;
    tg_tensor *loss = rr ? tg_compute_dpo_loss(tp, pc, pr, rc, rr, t->beta, &cr, &rj) : NULL;
    if (!loss) return NULL;
    t->chosen_reward = tg_item(cr), t->rejected_reward = tg_item(rj);
    return loss;
}

int tg_dpo_columns(void *task, double *values)
{
    const tg_dpo_task *t = task;
    if (!t || !values) return tg_error_status(TG_EINVAL, "dpo_columns: NULL argument");
    values[0] = t->chosen_reward, values[1] = t->rejected_reward;
    return TG_OK;
}

/* ---- output and records ------------------------------------------------------------------------ */

static FILE *out_file(const tg_trainer *tr) { return tr->o.out ? tr->o.out : stdout; }

static void progress_clear(tg_trainer *tr)
{
    if (tr->progress_shown) fputs("\r\033[K", stderr);
    tr->progress_shown = false;
}

static void progress_draw(tg_trainer *tr, int64_t batch)
{
    if (!tr->o.progress || !tr->lead) return;
    double el = now() - tr->t0;
    double rate = el > 0 ? (double)tr->seen_this_run / el : 0;
    double sps = el > 0 && tr->steps_this_run > 0 ? (double)tr->steps_this_run / el : 0;
    double eta = sps > 0 ? (double)(tr->total_steps - tr->step - 1) / sps : 0;
    fprintf(stderr, "\r\033[Kepoch %lld/%lld  batch %lld/%lld  step %lld/%lld  %.0f %s/s  %d:%02d left",
            (long long)tr->epoch + 1, (long long)tr->o.epochs, (long long)batch, (long long)tr->nb,
            (long long)tr->step + 1, (long long)tr->total_steps, rate, tr->o.count_tokens ? "tokens" : "examples",
            (int)(eta / 60), (int)fmod(eta, 60));
    fflush(stderr);
    tr->progress_shown = true;
}

static int transcript_add(tg_trainer *tr, const char *s, size_t n)
{
    if (tr->t_len + n + 1 > tr->t_cap) {
        size_t cap = tr->t_cap ? tr->t_cap : 1024;
        while (cap < tr->t_len + n + 1) cap *= 2;
        char *t = realloc(tr->transcript, cap);
        if (!t) return tg_error_status(TG_ENOMEM, "trainer: out of memory");
        tr->transcript = t, tr->t_cap = cap;
    }
    memcpy(tr->transcript + tr->t_len, s, n);
    tr->t_len += n;
    tr->transcript[tr->t_len] = '\0';
    return TG_OK;
}

/* s (n bytes) printed by rank 0 and kept. */
static int emit(tg_trainer *tr, const char *s, size_t n)
{
    if (!tr->lead) return TG_OK;
    progress_clear(tr);
    FILE *f = out_file(tr);
    fwrite(s, 1, n, f);
    fflush(f);
    return transcript_add(tr, s, n);
}

int tg_trainer_printf(tg_trainer *tr, const char *fmt, ...)
{
    if (!tr || !fmt) return tg_error_status(TG_EINVAL, "trainer_printf: NULL argument");
    if (!tr->lead) return TG_OK;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return tg_error_status(TG_EINVAL, "trainer_printf: bad format");
    char *s = malloc((size_t)n + 2);
    if (!s) return tg_error_status(TG_ENOMEM, "trainer: out of memory");
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    if (n == 0 || s[n - 1] != '\n') s[n++] = '\n', s[n] = '\0';
    int st = emit(tr, s, (size_t)n);
    free(s);
    return st;
}

static series *find_series(const tg_trainer *tr, const char *name)
{
    for (int i = 0; i < tr->n_sr; i++)
        if (strcmp(tr->sr[i].name, name) == 0) return &tr->sr[i];
    return NULL;
}

static series *get_series(tg_trainer *tr, const char *name, bool text)
{
    series *s = find_series(tr, name);
    if (s) {
        if (s->is_text != text)
            return tg_error("trainer: series '%s' holds %s", name, text ? "values, not texts" : "texts, not values");
        return s;
    }
    series *ns = realloc(tr->sr, sizeof *ns * (size_t)(tr->n_sr + 1));
    if (!ns) return tg_error("trainer: out of memory");
    tr->sr = ns;
    s = &tr->sr[tr->n_sr];
    *s = (series){.name = strdup(name), .is_text = text};
    if (!s->name) return tg_error("trainer: out of memory");
    tr->n_sr++;
    return s;
}

static int series_grow(series *s, bool text)
{
    if (s->n < s->cap && (text ? s->text != NULL : s->v != NULL)) return TG_OK;
    int64_t cap = s->cap ? 2 * s->cap : 8;
    if (text) {
        char **t = realloc(s->text, sizeof *t * (size_t)cap);
        if (!t) return tg_error_status(TG_ENOMEM, "trainer: out of memory");
        s->text = t;
    } else {
        double *v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v) return tg_error_status(TG_ENOMEM, "trainer: out of memory");
        s->v = v;
    }
    s->cap = cap;
    return TG_OK;
}

int tg_trainer_record(tg_trainer *tr, const char *name, double value)
{
    if (!tr || !name) return tg_error_status(TG_EINVAL, "trainer_record: NULL argument");
    series *s = get_series(tr, name, false);
    if (!s) return TG_EINVAL;
    int st = series_grow(s, false);
    if (st == TG_OK) s->v[s->n++] = value;
    return st;
}

int tg_trainer_record_text(tg_trainer *tr, const char *name, const char *text)
{
    if (!tr || !name || !text) return tg_error_status(TG_EINVAL, "trainer_record_text: NULL argument");
    series *s = get_series(tr, name, true);
    if (!s) return TG_EINVAL;
    int st = series_grow(s, true);
    if (st != TG_OK) return st;
    if (!(s->text[s->n] = strdup(text))) return tg_error_status(TG_ENOMEM, "trainer: out of memory");
    s->n++;
    return TG_OK;
}

const double *tg_trainer_series(const tg_trainer *tr, const char *name, int64_t *n)
{
    const series *s = tr && name ? find_series(tr, name) : NULL;
    if (n) *n = s && !s->is_text ? s->n : 0;
    return s && !s->is_text ? s->v : NULL;
}

const char *const *tg_trainer_texts(const tg_trainer *tr, const char *name, int64_t *n)
{
    const series *s = tr && name ? find_series(tr, name) : NULL;
    if (n) *n = s && s->is_text ? s->n : 0;
    return s && s->is_text ? (const char *const *)s->text : NULL;
}

const tg_train_row *tg_trainer_rows(const tg_trainer *tr, int64_t *n)
{
    if (n) *n = tr ? tr->n_rows : 0;
    return tr ? tr->rows : NULL;
}

static int add_row(tg_trainer *tr, tg_train_row r)
{
    if (tr->n_rows == tr->cap_rows) {
        int64_t cap = tr->cap_rows ? 2 * tr->cap_rows : 64;
        tg_train_row *n = realloc(tr->rows, sizeof *n * (size_t)cap);
        if (!n) return tg_error_status(TG_ENOMEM, "trainer: out of memory");
        tr->rows = n, tr->cap_rows = cap;
    }
    tr->rows[tr->n_rows++] = r;
    return TG_OK;
}

/* ---- evaluation ----------------------------------------------------------------------------- */

/* A pass over num_batches of d, each rank on its rows: each(tr, slice,
 * batch index, ctx). Eval mode, no grad; the mode is put back. */
typedef int (*pass_fn)(tg_trainer *tr, const tg_batch *b, int64_t i, void *ctx);

static int eval_pass(tg_trainer *tr, const tg_data *d, int64_t num_batches, pass_fn each, void *ctx)
{
    int64_t len = tg_loader_len(d->loader);
    if (num_batches == 0 || num_batches > len) num_batches = len;
    tg_loader_iter *it = tg_loader_iter_new(d->loader);
    if (!it) return TG_ENOMEM;
    bool training = tg_module_is_training(tr->o.model);
    tg_module_train(tr->o.model, false);
    bool prev = tg_set_grad_enabled(false);
    int st = TG_OK;
    for (int64_t i = 0; i < num_batches && st == TG_OK; i++) {
        tg_batch b;
        int got = next_batch(tr->tp, d, it, &b);
        if (got != 1) {
            st = got < 0 ? got : tg_error_status(TG_ESTATE, "trainer: the loader ended after %lld of %lld batches",
                                                 (long long)i, (long long)num_batches);
        } else {
            int64_t start, count;
            rank_rows(tr, lead(&b)->shape[0], &start, &count);
            if (count > 0) { /* a short batch may leave a rank no row */
                tg_batch s = rows_of(tr->tp, &b, start, count);
                st = lead(&s) ? each(tr, &s, i, ctx) : TG_ENOMEM;
            }
        }
        tg_tape_reset(tr->tp);
    }
    tg_set_grad_enabled(prev);
    tg_module_train(tr->o.model, training);
    tg_loader_iter_free(it);
    return st;
}

/* The loss and the task's columns of a slice: alone, their values summed
 * over the batches; with ranks, each batch's weighted shares (num) and
 * weight (den), one value after another. */
#define NV (1 + TG_TRAIN_MAX_COLUMNS)
typedef struct {
    double total[NV], *num, *den;
} loss_ctx;

static int loss_each(tg_trainer *tr, const tg_batch *b, int64_t i, void *ctx)
{
    loss_ctx *c = ctx;
    double w = (double)lead(b)->shape[0], v[NV] = {0};
    tg_tensor *loss = tr->o.loss(tr->tp, tr->o.model, b, tr->o.task, &w);
    if (!loss) return TG_EINVAL;
    v[0] = tg_item(loss);
    int k = tr->o.n_columns, st = k > 0 ? tr->o.column_values(tr->o.task, v + 1) : TG_OK;
    if (st != TG_OK) return st;
    for (int j = 0; j <= k; j++) {
        if (tr->size == 1) {
            c->total[j] += v[j];
        } else {
            c->num[i * NV + j] = w > 0 ? v[j] * w : 0;
            c->den[i] = w;
        }
    }
    return TG_OK;
}

/* The mean loss (out[0]) and columns (out[1..]) over num_batches of d. */
static int loss_pass(tg_trainer *tr, const tg_data *d, int64_t num_batches, double out[NV])
{
    for (int j = 0; j < NV; j++) out[j] = NAN;
    int64_t len = tg_loader_len(d->loader);
    if (len == 0) return TG_OK;
    if (num_batches == 0 || num_batches > len) num_batches = len;
    loss_ctx c = {{0}, NULL, NULL};
    if (tr->size > 1) {
        c.num = calloc((size_t)num_batches * (NV + 1), sizeof *c.num);
        if (!c.num) return tg_error_status(TG_ENOMEM, "trainer: out of memory");
        c.den = c.num + num_batches * NV;
    }
    int st = eval_pass(tr, d, num_batches, loss_each, &c);
    if (st == TG_OK && tr->size > 1) {
        st = tg_dist_all_reduce_f64(c.num, (NV + 1) * num_batches, TG_DIST_SUM);
        for (int64_t i = 0; i < num_batches; i++)
            for (int j = 0; j < NV; j++) c.total[j] += c.num[i * NV + j] / c.den[i];
    }
    free(c.num);
    for (int j = 0; j <= tr->o.n_columns; j++) out[j] = c.total[j] / (double)num_batches;
    return st;
}

int tg_trainer_loss(tg_trainer *tr, const tg_data *d, int64_t num_batches, double *out)
{
    if (!tr || !d || !out) return tg_error_status(TG_EINVAL, "trainer_loss: NULL argument");
    double v[NV];
    int st = loss_pass(tr, d, num_batches, v);
    *out = v[0];
    return st;
}

typedef struct {
    tg_eval_fn fn;
    void *task;
    int n;
    double *sums;
} sums_ctx;

static int sums_each(tg_trainer *tr, const tg_batch *b, int64_t i, void *ctx)
{
    (void)i;
    sums_ctx *c = ctx;
    return c->fn(tr->tp, tr->o.model, b, c->task, c->n, c->sums);
}

int tg_trainer_eval(tg_trainer *tr, const tg_data *d, int64_t num_batches, tg_eval_fn fn, void *task, int n,
                    double *sums)
{
    if (!tr || !d || !fn || n < 0 || (n > 0 && !sums)) return tg_error_status(TG_EINVAL, "trainer_eval: bad argument");
    sums_ctx c = {fn, task, n, sums};
    int st = eval_pass(tr, d, num_batches, sums_each, &c);
    if (st == TG_OK && tr->size > 1 && n > 0) st = tg_dist_all_reduce_f64(sums, n, TG_DIST_SUM);
    return st;
}

/* correct predictions and examples of a classifier's slice */
static int accuracy_each(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, int n, double *sums)
{
    (void)task, (void)n;
    tg_tensor *logits = tg_gpt_forward_last(tp, model, b->input);
    tg_tensor *pred = logits ? tg_argmax(tp, logits, -1, false) : NULL, *y = tg_contiguous(tp, b->target);
    if (!pred || !y) return TG_EINVAL;
    const int64_t *p = tg_data_ptr(pred), *l = tg_data_ptr(y);
    if (!p || !l || y->dtype != TG_I64 || tg_numel(y) != pred->shape[0])
        return tg_error_status(TG_EINVAL, "accuracy: the labels are not one int64 per row");
    int64_t correct = 0;
    for (int64_t j = 0; j < pred->shape[0]; j++) correct += p[j] == l[j];
    sums[0] += (double)correct;
    sums[1] += (double)pred->shape[0];
    return TG_OK;
}

int tg_trainer_accuracy(tg_trainer *tr, const tg_data *d, int64_t num_batches, double *accuracy)
{
    if (!tr || !d || !accuracy) return tg_error_status(TG_EINVAL, "trainer_accuracy: NULL argument");
    double s[2] = {0, 0};
    int st = tg_trainer_eval(tr, d, num_batches, accuracy_each, NULL, 2, s);
    tg_module_train(tr->o.model, false); /* as calc_accuracy_loader leaves it */
    *accuracy = s[1] > 0 ? s[0] / s[1] : NAN;
    return st;
}

/* evaluate_model: both loaders, eval mode, no grad; the row's losses and
 * columns. */
static int evaluate(tg_trainer *tr, tg_train_row *r)
{
    double v[NV];
    tg_module_train(tr->o.model, false);
    int st = loss_pass(tr, &tr->o.train, tr->o.eval_iter, v);
    r->train_loss = v[0];
    for (int j = 0; j < tr->o.n_columns; j++) r->train_columns[j] = v[j + 1];
    for (int j = 0; j < NV; j++) v[j] = NAN;
    if (st == TG_OK && tr->o.val.loader) st = loss_pass(tr, &tr->o.val, tr->o.eval_iter, v);
    r->val_loss = v[0];
    for (int j = 0; j < tr->o.n_columns; j++) r->val_columns[j] = v[j + 1];
    tg_module_train(tr->o.model, true);
    return st;
}

int tg_trainer_evaluate(tg_trainer *tr, tg_train_row *row)
{
    if (!tr || !row) return tg_error_status(TG_EINVAL, "trainer_evaluate: NULL argument");
    if (!tr->o.train.loader) return tg_error_status(TG_EINVAL, "trainer_evaluate: no training loader");
    *row = (tg_train_row){tr->epoch + 1, tr->step, tr->seen, NAN, NAN, {0}, {0}};
    return evaluate(tr, row);
}

/* ---- one optimizer step ----------------------------------------------------------------------- */

static void step_begin(tg_trainer *tr)
{
    if (tr->o.schedule) {
        tg_lr_schedule s = {tr->o.initial_lr, tr->peak_lr, tr->o.min_lr, tr->o.warmup, tr->total_steps};
        tg_optimizer_set_lr(tr->o.optimizer, tg_lr_schedule_at(&s, tr->step + 1));
    }
    tg_optimizer_zero_grad(tr->o.optimizer);
    tr->step_loss = 0;
    memset(tr->ph, 0, sizeof tr->ph);
}

/* One micro-batch of n: forward and backward on this rank's rows of b, its
 * loss divided by n (and weighted by its share of the items under
 * mpirun), the gradients averaged over the ranks. */
static int micro_step(tg_trainer *tr, const tg_batch *b, int64_t n)
{
    double t0 = now();
    tg_tape *tp = tr->tp;
    tg_batch s = *b;
    int st = check_batch(b);
    if (st != TG_OK) return st;
    if (tr->size > 1) {
        for (int i = -2; i < b->n; i++) {
            tg_tensor **t = i == -2 ? &s.input : i == -1 ? &s.target : &s.tensors[i];
            if (*t && !(*t = tg_dist_batch_slice(tp, *t))) return TG_EINVAL;
        }
    }
    double w = (double)lead(&s)->shape[0], all;
    tg_tensor *loss = tr->o.loss(tp, tr->o.model, &s, tr->o.task, &w);
    if (!loss) return TG_EINVAL;
    if (loss->ndim != 0 && tg_numel(loss) != 1)
        return tg_error_status(TG_EINVAL, "trainer: the task's loss is not a scalar");
    all = w;
    if (tr->size > 1 && (st = tg_dist_all_reduce_f64(&all, 1, TG_DIST_SUM)) != TG_OK) return st;
    /* the global batch's gradient: the ranks' mean, each slice weighted by
     * its share of the items (1 when they are equal), over n micro-batches */
    double scale = (tr->size > 1 && all > 0 ? w * tr->size / all : 1.0) / (double)n;
    tg_tensor *back = scale == 1.0 ? loss : tg_mul_scalar(tp, loss, scale);
    double t1 = now();
    if (!back || (st = tg_backward(back, NULL, false)) != TG_OK) return back ? st : TG_EINVAL;
    double t2 = now();
    double l = tg_item(loss);
    if (tr->ddp) {
        if ((st = tg_dist_ddp_sync(tr->ddp)) != TG_OK) return st;
        l = all > 0 ? l * (w / all) : 0;
        if ((st = tg_dist_all_reduce_f64(&l, 1, TG_DIST_SUM)) != TG_OK) return st;
    }
    double t3 = now();
    tr->step_loss += n == 1 ? l : l / (double)n;
    tr->ph[0] += t1 - t0, tr->ph[1] += t2 - t1, tr->ph[2] += t3 - t2;
    return TG_OK;
}

static int step_end(tg_trainer *tr)
{
    double t0 = now();
    const tg_trainer_options *o = &tr->o;
    int st = TG_OK;
    /* appendix D: clipping once the warm-up is over */
    if (o->clip_grad_norm > 0 && (!o->schedule || tr->step + 1 > o->warmup))
        st = tg_optimizer_clip_grad_norm_(o->optimizer, o->clip_grad_norm, 2.0, NULL);
    if (st == TG_OK) st = tg_optimizer_step(o->optimizer);
    tr->ph[3] = now() - t0;
    return st;
}

int tg_trainer_step(tg_trainer *tr, int n, const tg_batch *batches, double *loss)
{
    if (!tr || n < 1 || !batches) return tg_error_status(TG_EINVAL, "trainer_step: bad argument");
    step_begin(tr);
    int st = TG_OK;
    for (int i = 0; i < n && st == TG_OK; i++) st = micro_step(tr, &batches[i], n);
    if (st == TG_OK) st = step_end(tr);
    tr->tape_bytes = tg_tape_used(tr->tp);
    tg_tape_reset(tr->tp);
    if (st != TG_OK) return st;
    tr->step++;
    tr->steps_this_run++;
    if (loss) *loss = tr->step_loss;
    return TG_OK;
}

/* ---- checkpoints ------------------------------------------------------------------------------ */

/* The trainer's own settings, then the task's: what a checkpoint must share
 * with the run that resumes it, and every rank with rank 0. */
#define OWN_VALUES 11
static tg_checkpoint_value *identity(const tg_trainer *tr, int *n)
{
    const tg_trainer_options *o = &tr->o;
    *n = OWN_VALUES + o->n_identity;
    tg_checkpoint_value *v = malloc(sizeof *v * (size_t)*n);
    if (!v) return tg_error("trainer: out of memory");
    const tg_checkpoint_value own[OWN_VALUES] = {
        {.name = "--batch", .i = tg_loader_batch_size(o->train.loader)},
        {.name = "training samples", .i = tg_loader_num_samples(o->train.loader)},
        {.name = "--eval-freq", .i = o->eval_freq},
        {.name = "--eval-iter", .i = o->eval_iter},
        {.name = "--accumulate", .i = tr->accumulate},
        {.name = "--warmup", .i = o->schedule ? o->warmup : -1},
        {.name = "counts tokens (1) or examples (0)", .i = o->count_tokens},
        {.name = "--lr", .is_float = true, .f = tr->peak_lr},
        {.name = "--initial-lr", .is_float = true, .f = o->schedule ? o->initial_lr : -1},
        {.name = "--min-lr", .is_float = true, .f = o->schedule ? o->min_lr : -1},
        {.name = "--clip-grad-norm", .is_float = true, .f = o->clip_grad_norm},
    };
    memcpy(v, own, sizeof own);
    if (o->n_identity) memcpy(v + OWN_VALUES, o->identity, sizeof *v * (size_t)o->n_identity);
    return v;
}

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The run's record as JSON text: the table, the transcript, the series and
 * the pass in progress (its order and position). */
static char *log_dump(const tg_trainer *tr, const tg_loader_iter *pass)
{
    json_t *o = json_object(), *rows = json_array(), *sr = json_object();
    bool bad = false; /* a text that is not UTF-8, or no memory */
    for (int64_t i = 0; i < tr->n_rows; i++) {
        const tg_train_row *r = &tr->rows[i];
        json_t *row = json_pack("[IIIoo]", (json_int_t)r->epoch, (json_int_t)r->step, (json_int_t)r->seen,
                                real_or_null(r->train_loss), real_or_null(r->val_loss));
        if (tr->o.n_columns > 0) { /* the task's columns: train's, then val's */
            json_t *cols = json_array();
            for (int j = 0; j < tr->o.n_columns; j++) json_array_append_new(cols, real_or_null(r->train_columns[j]));
            for (int j = 0; j < tr->o.n_columns; j++) json_array_append_new(cols, real_or_null(r->val_columns[j]));
            json_array_append_new(row, cols);
        }
        json_array_append_new(rows, row);
    }
    for (int i = 0; i < tr->n_sr; i++) {
        const series *s = &tr->sr[i];
        json_t *a = json_array();
        for (int64_t k = 0; k < s->n; k++)
            if (json_array_append_new(a, s->is_text ? json_string(s->text[k]) : real_or_null(s->v[k])))
                bad = true;
        if (json_object_set_new(sr, s->name, json_pack("{s:b,s:o}", "text", s->is_text, "values", a))) bad = true;
    }
    json_object_set_new(o, "rows", rows);
    json_object_set_new(o, "series", sr);
    if (json_object_set_new(o, "transcript", json_stringn(tr->transcript ? tr->transcript : "", tr->t_len))) bad = true;
    const int64_t *order = NULL;
    int64_t pos = pass ? tg_loader_iter_position(pass, &order) : -1;
    if (pass && order) {
        json_t *ord = json_array();
        int64_t n = tg_loader_num_samples(tr->o.train.loader);
        for (int64_t i = 0; i < n; i++) json_array_append_new(ord, json_integer((json_int_t)order[i]));
        json_object_set_new(o, "pass", json_pack("{s:I,s:I,s:o}", "batch", (json_int_t)tr->batch_in_epoch, "pos",
                                                 (json_int_t)pos, "order", ord));
    }
    char *s = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    if (!s) tg_error("trainer: cannot record the run for its checkpoint (a printed line or text that is not UTF-8, "
                     "or out of memory)");
    return s;
}

static int save_checkpoint(tg_trainer *tr, const tg_loader_iter *pass)
{
    if (!tr->lead) return TG_OK;
    int n;
    tg_checkpoint_value *v = identity(tr, &n);
    char *log = v ? log_dump(tr, pass) : NULL;
    tg_tape *tp = log ? tg_tape_new() : NULL;
    int64_t len = log ? (int64_t)strlen(log) : 0;
    tg_tensor *t = tp ? tg_from_data(tp, TG_U8, 1, &len, log) : NULL;
    int st = log ? TG_ENOMEM : TG_EINVAL;
    if (t) {
        const char *names[1] = {LOG_KEY};
        tg_checkpoint ck = {.model = tr->o.model, .optimizer = tr->o.optimizer, .generator = tg_default_generator(),
                            .epoch = tr->epoch, .step = tr->step, .tokens_seen = tr->seen, .n_values = n,
                            .values = v, .tensors = {.n = 1, .names = names, .tensors = &t}};
        if ((st = tg_checkpoint_save(&ck, tr->o.checkpoint)) != TG_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", tg_last_error());
            tg_error_status(st, "--checkpoint: %s", msg);
        }
    } else if (log) {
        tg_error("trainer: out of memory");
    }
    tg_tape_free(tp);
    free(log);
    free(v);
    return st;
}

static int corrupt(const char *path, const char *what)
{
    return tg_error_status(TG_EFORMAT, "'%s': corrupt training record (%s)", path, what);
}

static double real_of(const json_t *j) { return json_is_number(j) ? json_number_value(j) : NAN; }

/* The record read back into the trainer (nothing kept on error). */
static int log_load(tg_trainer *tr, const char *path, const tg_tensor *t)
{
    json_error_t e;
    json_t *o = json_loadb(t->data, (size_t)tg_numel(t), 0, &e);
    json_t *rows = json_object_get(o, "rows"), *sr = json_object_get(o, "series"),
           *tx = json_object_get(o, "transcript"), *pass = json_object_get(o, "pass");
    int st = TG_OK;
    if (!json_is_array(rows) || !json_is_object(sr) || !json_is_string(tx) || (pass && !json_is_object(pass)))
        st = corrupt(path, o ? "missing parts" : e.text);
    size_t i;
    json_t *r;
    json_array_foreach(st == TG_OK ? rows : NULL, i, r)
    {
        json_int_t a, b, c;
        json_t *l1, *l2, *cols = NULL;
        int k = tr->o.n_columns;
        if ((k ? json_unpack(r, "[IIIooo!]", &a, &b, &c, &l1, &l2, &cols)
               : json_unpack(r, "[IIIoo!]", &a, &b, &c, &l1, &l2)) != 0 ||
            a < 1 || b < 0 || c < 0 || (k && (!json_is_array(cols) || json_array_size(cols) != 2 * (size_t)k))) {
            st = corrupt(path, "a row");
            break;
        }
        tg_train_row w = {a, b, c, real_of(l1), real_of(l2), {0}, {0}};
        for (int j = 0; j < k; j++) {
            w.train_columns[j] = real_of(json_array_get(cols, (size_t)j));
            w.val_columns[j] = real_of(json_array_get(cols, (size_t)(k + j)));
        }
        if ((st = add_row(tr, w)) != TG_OK) break;
    }
    const char *key;
    json_t *s;
    json_object_foreach(st == TG_OK ? sr : NULL, key, s)
    {
        int text;
        json_t *vals, *x;
        if (json_unpack(s, "{s:b,s:o}", "text", &text, "values", &vals) != 0 || !json_is_array(vals)) {
            st = corrupt(path, "a series");
            break;
        }
        json_array_foreach(vals, i, x)
        {
            if (text && !json_is_string(x)) st = corrupt(path, "a text series");
            else if (!text && !json_is_number(x) && !json_is_null(x)) st = corrupt(path, "a series");
            else st = text ? tg_trainer_record_text(tr, key, json_string_value(x)) : tg_trainer_record(tr, key, real_of(x));
            if (st != TG_OK) break;
        }
        if (st == TG_OK && !json_array_size(vals) && !get_series(tr, key, text)) st = TG_ENOMEM;
        if (st != TG_OK) break;
    }
    if (st == TG_OK) st = transcript_add(tr, json_string_value(tx), json_string_length(tx));
    if (st == TG_OK && pass) {
        json_int_t batch, pos;
        json_t *ord;
        int64_t n = tg_loader_num_samples(tr->o.train.loader);
        if (json_unpack(pass, "{s:I,s:I,s:o}", "batch", &batch, "pos", &pos, "order", &ord) != 0 ||
            !json_is_array(ord) || (int64_t)json_array_size(ord) != n || batch < 0 || batch > tr->nb) {
            st = corrupt(path, "the loader's position");
        } else {
            int64_t *order = malloc(sizeof *order * (size_t)(n ? n : 1));
            if (!order) st = tg_error_status(TG_ENOMEM, "trainer: out of memory");
            for (int64_t k = 0; order && k < n; k++) {
                json_t *x = json_array_get(ord, (size_t)k);
                order[k] = json_is_integer(x) ? (int64_t)json_integer_value(x) : -1;
            }
            if (order && !(tr->resumed = tg_loader_iter_resume(tr->o.train.loader, pos, order)))
                st = corrupt(path, tg_last_error());
            free(order);
            tr->batch_in_epoch = batch;
        }
    }
    json_decref(o);
    return st;
}

static int load_checkpoint(tg_trainer *tr)
{
    int n;
    tg_checkpoint_value *v = identity(tr, &n);
    tg_tape *tp = v ? tg_tape_new() : NULL;
    if (!tp) {
        free(v);
        return tg_error_status(TG_ENOMEM, "trainer: out of memory");
    }
    const char *names[1] = {LOG_KEY};
    tg_tensor *t = NULL;
    tg_checkpoint ck = {.model = tr->o.model, .optimizer = tr->o.optimizer, .generator = tg_default_generator(),
                        .n_values = n, .values = v, .tensors = {.n = 1, .names = names, .tensors = &t}};
    int st = tg_checkpoint_load(tp, &ck, tr->o.resume);
    if (st == TG_OK && (t->dtype != TG_U8 || t->ndim != 1)) st = corrupt(tr->o.resume, "its type");
    if (st == TG_OK) st = log_load(tr, tr->o.resume, t);
    if (st == TG_OK) tr->epoch = ck.epoch, tr->step = ck.step, tr->seen = ck.tokens_seen;
    tg_tape_free(tp);
    free(v);
    return st;
}

/* ---- many processes ----------------------------------------------------------------------------- */

/* Every rank's settings are rank 0's (the integers, then the floats). */
static int same_as_rank0(const tg_trainer *tr)
{
    int n;
    tg_checkpoint_value *v = identity(tr, &n), *v1 = v ? realloc(v, sizeof *v * (size_t)(n + 2)) : NULL;
    if (v1) {
        v = v1;
        v[n++] = (tg_checkpoint_value){.name = "--epochs", .i = tr->o.epochs};
        v[n++] = (tg_checkpoint_value){.name = "numerics", .i = tg_tape_numerics(tr->tp)};
    } else {
        free(v), v = NULL;
    }
    int64_t *bits = v ? malloc(sizeof *bits * 2 * (size_t)n) : NULL;
    if (!bits) {
        free(v);
        return tg_error_status(TG_ENOMEM, "trainer: out of memory");
    }
    int64_t *bits0 = bits + n;
    for (int k = 0; k < n; k++) {
        if (v[k].is_float) memcpy(&bits[k], &v[k].f, sizeof v[k].f);
        else bits[k] = v[k].i;
    }
    memcpy(bits0, bits, sizeof *bits * (size_t)n);
    int st = tg_dist_broadcast(bits0, sizeof *bits * (size_t)n, 0);
    for (int pass = 0; pass < 2 && st == TG_OK; pass++)
        for (int k = 0; k < n && st == TG_OK; k++) {
            double f0;
            memcpy(&f0, &bits0[k], sizeof f0);
            if (v[k].is_float != pass || (pass ? v[k].f == f0 : bits[k] == bits0[k])) continue;
            const char *what = "this rank's run differs from rank 0's";
            st = pass ? tg_error_status(TG_EINVAL, "%s: %s %g, rank 0 %g", what, v[k].name, v[k].f, f0)
                      : tg_error_status(TG_EINVAL, "%s: %s %lld, rank 0 %lld", what, v[k].name, (long long)bits[k],
                                        (long long)bits0[k]);
        }
    free(bits);
    free(v);
    return st;
}

/* Whether every rank got here with TG_OK. Otherwise the lowest failing
 * rank keeps its message and the others have none (an empty
 * tg_last_error()), so that a job says what failed once. */
static int agree(int st)
{
    int failed = -1;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tg_last_error());
    if (tg_dist_agree(st, &failed) == TG_OK) return TG_OK;
    if (failed == tg_dist_rank()) return tg_error_status(st, "%s", msg);
    return tg_error_status(st != TG_OK ? st : TG_EDIST, "%s", "");
}

/* ---- the trainer ------------------------------------------------------------------------------ */

static int check_options(const tg_trainer_options *o)
{
    if (!o) return tg_error_status(TG_EINVAL, "trainer: NULL options");
    if (!o->model || !o->optimizer || !o->loss)
        return tg_error_status(TG_EINVAL, "trainer: a model, an optimizer and a loss are required");
    if (o->epochs < 1) return tg_error_status(TG_EINVAL, "trainer: epochs must be >= 1, got %lld", (long long)o->epochs);
    if (o->eval_freq < 0 || o->eval_iter < 0 || o->accumulate < 0 || o->checkpoint_every < 0 || o->warmup < 0)
        return tg_error_status(TG_EINVAL, "trainer: eval_freq, eval_iter, accumulate, checkpoint_every and warmup "
                                          "must be >= 0");
    if (!(o->clip_grad_norm >= 0) || !isfinite(o->clip_grad_norm))
        return tg_error_status(TG_EINVAL, "trainer: clip_grad_norm must be finite and >= 0, got %g", o->clip_grad_norm);
    if (o->n_columns < 0 || o->n_columns > TG_TRAIN_MAX_COLUMNS || (o->n_columns > 0 && (!o->columns || !o->column_values)))
        return tg_error_status(TG_EINVAL, "trainer: %d columns (at most %d, each named, with column_values)", o->n_columns,
                               TG_TRAIN_MAX_COLUMNS);
    if (o->n_identity < 0 || (o->n_identity > 0 && !o->identity))
        return tg_error_status(TG_EINVAL, "trainer: %d identity values without an array", o->n_identity);
    return TG_OK;
}

tg_trainer *tg_trainer_new(const tg_trainer_options *o)
{
    if (check_options(o) != TG_OK) return NULL;
    tg_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return tg_error("trainer: out of memory");
    tr->o = *o;
    tr->rank = tg_dist_rank(), tr->size = tg_dist_size(), tr->lead = tr->rank == 0;
    tr->step = -1;
    tr->peak_lr = tg_optimizer_lr(o->optimizer);
    tr->accumulate = o->accumulate > 1 ? o->accumulate : 1;
    tr->nb = tg_loader_len(o->train.loader);
    tr->steps_per_epoch = (tr->nb + tr->accumulate - 1) / tr->accumulate;
    tr->total_steps = tr->steps_per_epoch * o->epochs;
    tr->tp = o->step_tape ? o->step_tape : (tr->own_tape = tg_tape_new());
    int st = tr->tp ? TG_OK : tg_error_status(TG_ENOMEM, "trainer: out of memory");
    /* the step's policy: on the trainer's tape, or the given tape's own */
    tg_numerics tape_nm = tg_tape_numerics(tr->tp);
    if (st == TG_OK && o->step_tape && o->numerics != TG_NUMERICS_EXACT && o->numerics != tape_nm)
        st = tg_error_status(TG_EINVAL, "trainer: numerics %s differs from the step tape's %s (set one of them)",
                             tg_numerics_name(o->numerics), tg_numerics_name(tape_nm));
    if (st == TG_OK && !o->step_tape) st = tg_tape_set_numerics(tr->tp, o->numerics);
    int64_t b = tg_loader_batch_size(o->train.loader);
    if (st == TG_OK && tr->size > 1 && b % tr->size != 0)
        st = tg_error_status(TG_EINVAL, "trainer: the batch of %lld rows does not divide among %d ranks", (long long)b,
                             tr->size);
    if (st == TG_OK && o->schedule) {
        tg_lr_schedule s = {o->initial_lr, tr->peak_lr, o->min_lr, o->warmup, tr->total_steps};
        if (tg_lr_schedule_check(&s) != TG_OK)
            st = tg_error_status(TG_EINVAL, "--warmup %lld: the run has %lld steps (%lld per epoch x %lld epochs); %s",
                                 (long long)o->warmup, (long long)tr->total_steps, (long long)tr->steps_per_epoch,
                                 (long long)o->epochs, tg_last_error());
    }
    if (st == TG_OK && o->resume && (st = load_checkpoint(tr)) != TG_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tg_last_error());
        tg_error_status(st, "--resume: %s", msg);
    }
    if (tr->size > 1) {
        st = agree(st);
        if (st == TG_OK) st = agree(same_as_rank0(tr));
        if (st == TG_OK) {
            tr->ddp = tg_dist_ddp_new(o->model, (tg_dist_ddp_options){0});
            st = agree(tr->ddp ? TG_OK : TG_EDIST);
        }
    }
    if (st != TG_OK) {
        tg_trainer_free(tr);
        return NULL;
    }
    return tr;
}

void tg_trainer_free(tg_trainer *tr)
{
    if (!tr) return;
    tg_dist_ddp_free(tr->ddp);
    tg_loader_iter_free(tr->resumed);
    tg_tape_free(tr->own_tape);
    free(tr->rows);
    free(tr->transcript);
    for (int i = 0; i < tr->n_sr; i++) {
        for (int64_t k = 0; tr->sr[i].text && k < tr->sr[i].n; k++) free(tr->sr[i].text[k]);
        free(tr->sr[i].text);
        free(tr->sr[i].v);
        free(tr->sr[i].name);
    }
    free(tr->sr);
    free(tr);
}

static int diverged(tg_trainer *tr, double loss)
{
    progress_clear(tr);
    fflush(out_file(tr));
    return tg_error_status(TG_EDIVERGED, "the loss diverged to %g at step %lld (try a smaller --lr)", loss,
                           (long long)tr->step);
}

/* After an optimizer step: the table's row every eval_freq steps, a
 * checkpoint every checkpoint_every. */
static int after_step(tg_trainer *tr, int64_t epoch, const tg_loader_iter *pass)
{
    const tg_trainer_options *o = &tr->o;
    int st = TG_OK;
    if (o->eval_freq > 0 && tr->step % o->eval_freq == 0) {
        tg_train_row w = {epoch + 1, tr->step, tr->seen, NAN, NAN, {0}, {0}};
        if ((st = evaluate(tr, &w)) != TG_OK || (st = add_row(tr, w)) != TG_OK) return st;
        if (!o->quiet && o->print_row) st = o->print_row(tr, &w, o->task);
        else if (!o->quiet)
            st = tg_trainer_printf(tr, "Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f", (long long)w.epoch,
                                   (long long)w.step, w.train_loss, w.val_loss);
    }
    if (st == TG_OK && o->checkpoint && o->checkpoint_every > 0 && (tr->step + 1) % o->checkpoint_every == 0 &&
        tr->batch_in_epoch < tr->nb)
        st = save_checkpoint(tr, pass);
    return st;
}

/* One epoch: for input_batch, target_batch in train_loader (groups of
 * `accumulate` micro-batches per optimizer step). */
static int epoch_loop(tg_trainer *tr, int64_t epoch, tg_loader_iter *it)
{
    tg_tape *tp = tr->tp;
    int st = TG_OK;
    while (st == TG_OK && tr->batch_in_epoch < tr->nb) {
        int64_t n = tr->nb - tr->batch_in_epoch < tr->accumulate ? tr->nb - tr->batch_in_epoch : tr->accumulate;
        step_begin(tr);
        for (int64_t k = 0; k < n && st == TG_OK; k++) {
            tg_batch b;
            int got = next_batch(tp, &tr->o.train, it, &b);
            if (got != 1) {
                st = got < 0 ? got : tg_error_status(TG_ESTATE, "trainer: the training loader ended early");
                break;
            }
            /* examples_seen += input_batch.shape[0] / tokens_seen += input_batch.numel() */
            int64_t seen = tr->o.count_tokens ? tg_numel(lead(&b)) : lead(&b)->shape[0];
            st = micro_step(tr, &b, n);
            tr->tape_bytes = tg_tape_used(tp);
            tg_tape_reset(tp);
            tr->seen += seen, tr->seen_this_run += seen;
            tr->batch_in_epoch++;
        }
        if (st == TG_OK) st = step_end(tr);
        if (st != TG_OK) return st;
        tr->step++;
        tr->steps_this_run++;
        if (!isfinite(tr->step_loss)) return diverged(tr, tr->step_loss);
        st = after_step(tr, epoch, it);
        progress_draw(tr, tr->batch_in_epoch);
    }
    return st;
}

int tg_trainer_fit(tg_trainer *tr)
{
    if (!tr) return tg_error_status(TG_EINVAL, "trainer_fit: NULL trainer");
    const tg_trainer_options *o = &tr->o;
    if (!o->train.loader) return tg_error_status(TG_EINVAL, "trainer_fit: no training loader");
    /* a resumed run prints what was printed before, so that its output
     * equals an uninterrupted run's */
    if (tr->lead && tr->t_len) {
        fwrite(tr->transcript, 1, tr->t_len, out_file(tr));
        fflush(out_file(tr));
    }
    tr->t0 = now();
    int st = TG_OK;
    /* a run that starts afresh: the task's lines before training */
    if (o->on_train_begin && tr->step < 0 && tr->epoch == 0 && !tr->resumed && !tr->t_len) {
        tg_module_train(o->model, true);
        if ((st = o->on_train_begin(tr, o->task)) != TG_OK) return st;
    }
    for (; tr->epoch < o->epochs && st == TG_OK; tr->epoch++) {
        tg_module_train(o->model, true);
        tg_loader_iter *it = tr->resumed ? tr->resumed : tg_loader_iter_new(o->train.loader);
        tr->resumed = NULL;
        if (!it) return TG_ENOMEM;
        st = epoch_loop(tr, tr->epoch, it);
        tg_loader_iter_free(it);
        tr->seconds = now() - tr->t0;
        if (st != TG_OK) break;
        tr->batch_in_epoch = 0;
        if (o->on_epoch_end) st = o->on_epoch_end(tr, tr->epoch + 1, o->task);
        if (st == TG_OK && o->checkpoint) {
            tr->epoch++; /* the checkpoint is at the end of this epoch */
            st = save_checkpoint(tr, NULL);
            tr->epoch--;
        }
    }
    progress_clear(tr);
    tr->seconds = now() - tr->t0;
    if (tr->ddp) tg_dist_ddp_get_stats(tr->ddp, &tr->dist);
    /* the task's last lines run as one process would (a generation in
     * training mode draws whole dropout masks) */
    tg_dist_ddp_free(tr->ddp);
    tr->ddp = NULL;
    if (st == TG_OK && o->on_train_end) st = o->on_train_end(tr, o->task);
    progress_clear(tr);
    return st;
}

int tg_trainer_get_stats(const tg_trainer *tr, tg_trainer_stats *out)
{
    if (!tr || !out) return tg_error_status(TG_EINVAL, "trainer_get_stats: NULL argument");
    *out = (tg_trainer_stats){.epoch = tr->epoch, .step = tr->step, .seen = tr->seen,
                              .steps_this_run = tr->steps_this_run, .seen_this_run = tr->seen_this_run,
                              .seconds = tr->seconds, .forward_s = tr->ph[0], .backward_s = tr->ph[1],
                              .sync_s = tr->ph[2], .optimizer_s = tr->ph[3], .step_tape_bytes = tr->tape_bytes,
                              .rank = tr->rank, .size = tr->size, .dist = tr->dist};
    if (tr->ddp) tg_dist_ddp_get_stats(tr->ddp, &out->dist);
    return TG_OK;
}

bool tg_trainer_is_lead(const tg_trainer *tr) { return tr && tr->lead; }
tg_tape *tg_trainer_tape(const tg_trainer *tr) { return tr ? tr->tp : NULL; }
tg_dist_ddp *tg_trainer_ddp(const tg_trainer *tr) { return tr ? tr->ddp : NULL; }
