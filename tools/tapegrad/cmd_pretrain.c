/* tapegrad pretrain: the book's chapter-5 run (train_model_simple) on a text,
 * printing the book's loss table and an epoch's greedy sample, with
 * checkpoints and resume (the library's tg_checkpoint), a plot (svg.c) and
 * JSON (README.md, "Pretraining").
 *
 * Every random draw is PyTorch's, in PyTorch's order: the model is built
 * after manual_seed(seed); the loaders draw when an iteration starts (the
 * train loader again at each evaluation); dropout draws its masks during
 * the forward. So the table equals the one PyTorch prints for the same
 * arguments.
 *
 * Under mpirun (README.md, "Many processes") every rank runs this same
 * program: the same seed, model and shuffle; each trains on its slice of
 * every global batch (tg_dist_ddp averages the gradients) and evaluates its
 * slice of every evaluation batch; losses are all-reduced, so every rank
 * takes the same decisions. Only rank 0 prints, samples, plots and saves. A
 * rank that fails alone ends the job (tg_dist_abort): the others would
 * otherwise wait in a collective forever. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CMD "pretrain"

static const char *help =
    "usage: tapegrad pretrain --text PATH [MODEL] [options]\n"
    "\n"
    "Pretrains the book's GPTModel on a UTF-8 text as chapter 5 does: the text is\n"
    "cut at code point int(ratio * len) into a training and a validation part,\n"
    "each tokenized and cut into windows; AdamW; every --eval-freq steps the mean\n"
    "loss of the first --eval-iter batches of each loader; after each epoch a\n"
    "greedy sample from --start. Prints the book's lines; a progress line on\n"
    "stderr when it is a terminal.\n"
    "\n"
    "  --text PATH          the training text (UTF-8)\n"
    "  --batch N            batch size (2)\n"
    "  --epochs N           train until this epoch (10)\n"
    "  --lr X               learning rate; the peak rate with --warmup (4e-4)\n"
    "  --weight-decay X     AdamW's decoupled weight decay (0.1)\n"
    "  --optimizer NAME     adamw (default) or adam\n"
    "  --eval-freq N        evaluate every N steps (5)\n"
    "  --eval-iter N        batches per evaluation (5)\n"
    "  --train-ratio X      the training part's share of the text (0.9)\n"
    "  --stride N           ids between windows (the context)\n"
    "  --start STR          the sample's start text (\"Every effort moves you\")\n"
    "  --sample-tokens N    ids per sample (50)\n"
    "  --warmup N           appendix D's schedule: N steps of linear warm-up from\n"
    "                       --initial-lr to --lr, then cosine decay to --min-lr\n"
    "  --initial-lr X       (1e-5 with --warmup)\n"
    "  --min-lr X           (--initial-lr with --warmup)\n"
    "  --clip-grad-norm X   clip the gradients' 2-norm to X (appendix D clips\n"
    "                       after the warm-up)\n"
    "  --save FILE          the trained model's state_dict (safetensors)\n"
    "  --checkpoint FILE    after each epoch: model, optimizer, step, generator\n"
    "                       state and the table so far, written atomically\n"
    "  --resume FILE        continue from a checkpoint (same text and settings)\n"
    "  --plot FILE          train and validation loss against epochs and tokens\n"
    "                       seen (SVG)\n"
    "  --composed           the book's composed layers instead of the fused kernels\n"
    "  --fast-dropout       counter-based dropout masks (not PyTorch's draws, so not its numbers)\n"
    "  --threads N          OpenMP threads (all cores; under mpirun, the cores\n"
    "                       shared among the ranks on the machine)\n"
    "  --dist               train data parallel: start with mpirun -np N, N dividing\n"
    "                       --batch (a job mpirun started is data parallel anyway;\n"
    "                       --dist makes a missing mpirun an error)\n"
    "  --json               end with one JSON line: {\"rows\": [...], \"samples\":\n"
    "                       [...], \"seconds\": S, \"tokens_per_s\": R}\n"
    "\n" TG_CLI_MODEL_HELP "                  (pretrain's --context defaults to 256, as the book's)\n"
    "\n"
    "Exit status: 0 ok, 1 the loss diverged, 2 bad arguments, bad input or a\n"
    "failed write.\n";

typedef struct {
    const char *text, *optimizer, *start, *save, *checkpoint, *resume, *plot;
    int64_t batch, epochs, eval_freq, eval_iter, stride, sample_tokens, warmup, threads;
    double lr, weight_decay, train_ratio, initial_lr, min_lr, clip;
    bool stride_seen, warmup_seen, initial_seen, min_seen, clip_seen;
    bool composed, fast_dropout, json, dist;
} pt_args;

/* What a run has printed so far (kept in checkpoints). */
typedef struct {
    tg_cli_loss_row *rows;
    int64_t n_rows, cap_rows;
    char **samples; /* one per finished epoch */
    int64_t n_samples;
} pt_history;

typedef struct {
    const pt_args *a;
    tg_gpt_config cfg;
    uint64_t seed;
    tg_module *gpt;
    tg_optimizer *opt;
    tg_loader *train, *val;
    tg_tape *model_tape, *step_tape;
    tg_tokenizer *tok;
    int64_t *start_ids;
    size_t n_start;
    uint64_t text_hash;
    /* progress */
    int64_t epoch_done, global_step, tokens_seen;
    pt_history h;
    double t0, trained_seconds;
    int64_t tokens_this_run, steps_this_run, total_steps;
    bool progress;
    /* data parallel: this rank of size (0 of 1 alone); lead: rank 0, the one
     * that prints and writes */
    int rank, size;
    bool lead;
    tg_dist_ddp *ddp;
    tg_dist_ddp_stats dist_stats; /* at the end of the run */
} pt_run;

/* ---- small helpers ------------------------------------------------------------------ */

/* FNV-1a: a checkpoint remembers which text it was trained on. */
static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int history_add_row(pt_history *h, tg_cli_loss_row r)
{
    if (h->n_rows == h->cap_rows) {
        int64_t cap = h->cap_rows ? h->cap_rows * 2 : 64;
        tg_cli_loss_row *nr = realloc(h->rows, sizeof *nr * (size_t)cap);
        if (!nr) return -1;
        h->rows = nr, h->cap_rows = cap;
    }
    h->rows[h->n_rows++] = r;
    return 0;
}

static int history_add_sample(pt_history *h, char *s)
{
    char **ns = realloc(h->samples, sizeof *ns * (size_t)(h->n_samples + 1));
    if (!ns) return -1;
    h->samples = ns;
    h->samples[h->n_samples++] = s;
    return 0;
}

static void history_free(pt_history *h)
{
    free(h->rows);
    for (int64_t i = 0; i < h->n_samples; i++) free(h->samples[i]);
    free(h->samples);
    memset(h, 0, sizeof *h);
}

static void print_row(const tg_cli_loss_row *r)
{
    printf("Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f\n", (long long)r->epoch, (long long)r->step, r->train,
           r->val);
}

/* ---- the progress line (stderr, when it is a terminal) ---------------------------------- */

static void progress_clear(const pt_run *r)
{
    if (r->progress) fputs("\r\033[K", stderr);
}

static void progress_draw(const pt_run *r, int64_t epoch, int64_t batch, int64_t nbatches)
{
    if (!r->progress) return;
    double el = tg_cli_now() - r->t0;
    double tps = el > 0 ? (double)r->tokens_this_run / el : 0;
    int64_t left = r->total_steps - r->global_step - 1;
    double sps = el > 0 && r->steps_this_run > 0 ? (double)r->steps_this_run / el : 0;
    double eta = sps > 0 ? (double)left / sps : 0;
    fprintf(stderr, "\r\033[Kepoch %lld/%lld  batch %lld/%lld  step %lld/%lld  %.0f tokens/s  %d:%02d left",
            (long long)epoch, (long long)r->a->epochs, (long long)batch, (long long)nbatches,
            (long long)r->global_step + 1, (long long)r->total_steps, tps, (int)(eta / 60), (int)fmod(eta, 60));
    fflush(stderr);
}

/* ---- the book's functions ----------------------------------------------------------------- */

/* calc_loss_batch: cross_entropy(logits.flatten(0, 1), target.flatten()). */
static tg_tensor *loss_batch(pt_run *r, tg_tensor *x, tg_tensor *y)
{
    tg_tape *tp = r->step_tape;
    tg_tensor *logits = tg_module_forward(tp, r->gpt, x);
    if (!logits) return NULL;
    int64_t flat[2] = {-1, logits->shape[2]}, n = -1;
    return tg_cross_entropy(tp, tg_view(tp, logits, 2, flat), tg_view(tp, y, 1, &n), TG_REDUCE_MEAN);
}

/* calc_loss_loader(loader, model, num_batches): starting the iteration draws
 * as PyTorch's does; the mean of the first num_batches batch losses. With
 * several ranks each takes rows [B rank / N, B (rank + 1) / N) of a batch
 * of B (a short last batch too) and the batch's loss is the rows' weighted
 * sum of the ranks' mean losses. */
static int loss_loader(pt_run *r, tg_loader *l, int64_t num_batches, double *out)
{
    int64_t len = tg_loader_len(l);
    if (len == 0) return *out = NAN, 0;
    if (num_batches > len) num_batches = len;
    tg_loader_iter *it = tg_loader_iter_new(l);
    if (!it) return -1;
    double total = 0;
    int st = 0;
    for (int64_t i = 0; i < num_batches && !st; i++) {
        tg_tensor *x, *y, *loss;
        if (tg_loader_iter_next(it, r->step_tape, &x, &y) != 1) {
            st = -1;
        } else {
            int64_t rows = x->shape[0], b0 = rows * r->rank / r->size, b1 = rows * (r->rank + 1) / r->size;
            if (b1 > b0) { /* a short batch may leave a rank no row */
                if (r->size > 1)
                    x = tg_narrow(r->step_tape, x, 0, b0, b1 - b0), y = tg_narrow(r->step_tape, y, 0, b0, b1 - b0);
                if ((loss = loss_batch(r, x, y)))
                    total += tg_item(loss) * (double)(b1 - b0) / (double)rows;
                else
                    st = -1;
            }
        }
        tg_tape_reset(r->step_tape);
    }
    tg_loader_iter_free(it);
    if (!st && tg_dist_all_reduce_f64(&total, 1, TG_DIST_SUM) != TG_OK) st = -1;
    *out = total / (double)num_batches;
    return st;
}

/* evaluate_model: eval mode, no grad, both loaders. */
static int evaluate(pt_run *r, double *train, double *val)
{
    tg_module_train(r->gpt, false);
    bool prev = tg_set_grad_enabled(false);
    int st = loss_loader(r, r->train, r->a->eval_iter, train);
    if (!st) st = loss_loader(r, r->val, r->a->eval_iter, val);
    tg_set_grad_enabled(prev);
    tg_module_train(r->gpt, true);
    return st;
}

/* generate_and_print_sample: greedy, newlines shown as spaces. */
static char *sample(pt_run *r)
{
    size_t n = r->n_start + (size_t)r->a->sample_tokens;
    int64_t *ids = malloc(sizeof *ids * n), got = 0;
    char *text = NULL;
    size_t len = 0;
    tg_generate_options o = {.max_new_tokens = r->a->sample_tokens, .eos_id = -1};
    if (ids && tg_gpt_generate(r->gpt, r->start_ids, (int64_t)r->n_start, &o, ids, &got) == TG_OK &&
        tg_tokenizer_decode_text(r->tok, ids, (size_t)got, &text, &len) == TG_OK) {
        for (size_t i = 0; i < len; i++)
            if (text[i] == '\n') text[i] = ' ';
    } else if (!ids) {
        tg_error("out of memory");
    }
    free(ids);
    return text;
}

/* ---- checkpoints (the library's tg_checkpoint) ----------------------------------------------- */

/* What must agree for a checkpoint to continue this run (and for the ranks of
 * one run): the integers, then the floats, as the file keeps them. */
#define PT_NIDENTITY 23
static void identity(const pt_run *r, tg_checkpoint_value *v)
{
    const pt_args *a = r->a;
    const tg_gpt_config *c = &r->cfg;
    const tg_checkpoint_value id[PT_NIDENTITY] = {
        {.name = "--vocab", .i = c->vocab_size},
        {.name = "--context", .i = c->context_length},
        {.name = "--emb", .i = c->emb_dim},
        {.name = "--heads", .i = c->n_heads},
        {.name = "--layers", .i = c->n_layers},
        {.name = "--qkv-bias", .i = c->qkv_bias},
        {.name = "--seed", .i = (int64_t)r->seed},
        {.name = "--batch", .i = a->batch},
        {.name = "--stride", .i = a->stride},
        {.name = "--eval-freq", .i = a->eval_freq},
        {.name = "--eval-iter", .i = a->eval_iter},
        {.name = "--sample-tokens", .i = a->sample_tokens},
        {.name = "--text (its contents)", .i = (int64_t)r->text_hash, .differs = "was trained on another text"},
        {.name = "--warmup", .i = a->warmup_seen ? a->warmup : -1},
        {.name = "--optimizer adam (1) or adamw (0)", .i = strcmp(a->optimizer, "adam") == 0},
        {.name = "--fast-dropout", .i = a->fast_dropout},
        {.name = "--dropout", .is_float = true, .f = c->drop_rate},
        {.name = "--lr", .is_float = true, .f = a->lr},
        {.name = "--weight-decay", .is_float = true, .f = a->weight_decay},
        {.name = "--train-ratio", .is_float = true, .f = a->train_ratio},
        {.name = "--initial-lr", .is_float = true, .f = a->initial_lr},
        {.name = "--min-lr", .is_float = true, .f = a->min_lr},
        {.name = "--clip-grad-norm", .is_float = true, .f = a->clip_seen ? a->clip : -1},
    };
    memcpy(v, id, sizeof id);
}

/* The table and the samples so far, kept in a checkpoint as "train.rows"
 * (float64 (rows, 5): epoch, step, train loss, val loss, tokens seen) and
 * "train.samples" (uint8: each sample and its NUL). */
static const char *history_names[2] = {"train.rows", "train.samples"};

static tg_checkpoint run_checkpoint(pt_run *r, tg_checkpoint_value *id, tg_tensor **history)
{
    identity(r, id);
    return (tg_checkpoint){.model = r->gpt, .optimizer = r->opt, .generator = tg_default_generator(),
                           .epoch = r->epoch_done, .step = r->global_step, .tokens_seen = r->tokens_seen,
                           .n_values = PT_NIDENTITY, .values = id,
                           .tensors = {.n = 2, .names = history_names, .tensors = history}};
}

static int history_to_tensors(tg_tape *tp, const pt_history *h, tg_tensor **history)
{
    int64_t shape[2] = {h->n_rows, 5}, bytes = 0;
    for (int64_t i = 0; i < h->n_samples; i++) bytes += (int64_t)strlen(h->samples[i]) + 1;
    if (!(history[0] = tg_empty(tp, TG_F64, 2, shape)) || !(history[1] = tg_empty(tp, TG_U8, 1, &bytes))) return -1;
    double *rows = history[0]->data;
    for (int64_t i = 0; i < h->n_rows; i++) {
        const tg_cli_loss_row *w = &h->rows[i];
        double v[5] = {(double)w->epoch, (double)w->step, w->train, w->val, (double)w->tokens};
        memcpy(rows + 5 * i, v, sizeof v);
    }
    char *sp = history[1]->data;
    for (int64_t i = 0; i < h->n_samples; i++) {
        size_t l = strlen(h->samples[i]) + 1;
        memcpy(sp, h->samples[i], l);
        sp += l;
    }
    return 0;
}

/* The history read back: a row of five floats each, one NUL-terminated
 * sample per finished epoch. */
static int history_from_tensors(pt_history *h, const char *path, tg_tensor *const *history, int64_t epochs)
{
    const tg_tensor *rows = history[0], *samples = history[1];
    for (int k = 0; k < 2; k++)
        if (history[k]->dtype != (k ? TG_U8 : TG_F64) || history[k]->ndim != 2 - k || (!k && rows->shape[1] != 5))
            return tg_cli_error(CMD, "--resume: '%.300s': '%s' has the wrong type or size", path, history_names[k]);
    const char *sp = samples->data;
    int64_t sl = tg_numel(samples), nsamp = 0;
    for (int64_t i = 0; i < sl; i++) nsamp += sp[i] == '\0';
    if (nsamp != epochs || (sl > 0 && sp[sl - 1] != '\0'))
        return tg_cli_error(CMD, "--resume: '%.300s': corrupt sample record", path);
    const double *rv = rows->data;
    for (int64_t i = 0; i < rows->shape[0]; i++) {
        tg_cli_loss_row w = {(int64_t)rv[5 * i], (int64_t)rv[5 * i + 1], (int64_t)rv[5 * i + 4], rv[5 * i + 2],
                             rv[5 * i + 3]};
        if (history_add_row(h, w)) return tg_cli_error(CMD, "out of memory");
    }
    for (int64_t i = 0, off = 0; i < nsamp; i++) {
        char *s = strdup(sp + off);
        off += (int64_t)strlen(sp + off) + 1;
        if (!s || history_add_sample(h, s)) {
            free(s);
            return tg_cli_error(CMD, "out of memory");
        }
    }
    return TG_CLI_OK;
}

/* Model, optimizer, the default generator, progress, settings and the table
 * so far, written atomically. */
static int save_checkpoint(pt_run *r, const char *path)
{
    tg_tape *tp = tg_tape_new();
    tg_tensor *history[2] = {NULL, NULL};
    tg_checkpoint_value id[PT_NIDENTITY];
    tg_checkpoint ck = run_checkpoint(r, id, history);
    if (!tp || history_to_tensors(tp, &r->h, history) != 0) {
        tg_tape_free(tp);
        return tg_cli_error(CMD, "--checkpoint: out of memory");
    }
    int rc = tg_checkpoint_save(&ck, path) == TG_OK ? TG_CLI_OK : tg_cli_lib_error(CMD, "--checkpoint");
    tg_tape_free(tp);
    return rc;
}

/* The library checks the checkpoint against this run before it changes the
 * model, optimizer or generator; then the table so far. */
static int load_checkpoint(pt_run *r, const char *path)
{
    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_cli_error(CMD, "--resume: out of memory");
    tg_tensor *history[2] = {NULL, NULL};
    tg_checkpoint_value id[PT_NIDENTITY];
    tg_checkpoint ck = run_checkpoint(r, id, history);
    int rc = tg_checkpoint_load(tp, &ck, path) != TG_OK
                 ? tg_cli_lib_error(CMD, "--resume")
                 : history_from_tensors(&r->h, path, ck.tensors.tensors, ck.epoch);
    if (rc == TG_CLI_OK) r->epoch_done = ck.epoch, r->global_step = ck.step, r->tokens_seen = ck.tokens_seen;
    tg_tape_free(tp);
    return rc;
}

/* --plot: the book's plot_losses, titled with the text's file name. */
static int write_plot(const pt_run *r, const char *path)
{
    const char *base = strrchr(r->a->text, '/');
    base = base ? base + 1 : r->a->text;
    char *title = malloc(strlen(base) + 20);
    if (!title) return tg_cli_error(CMD, "out of memory");
    sprintf(title, "tapegrad pretrain: %s", base);
    int st = tg_cli_svg_loss_plot(path, title, (double)r->a->epochs, r->h.n_rows, r->h.rows), e = errno;
    free(title);
    if (st == -1) return tg_cli_error(CMD, "--plot: cannot open '%.300s' for writing: %s", path, strerror(e));
    if (st != 0) return tg_cli_error(CMD, "--plot: cannot write '%.300s': %s", path, strerror(e));
    return TG_CLI_OK;
}

/* ---- the run ---------------------------------------------------------------------------------- */

static void json_out(const pt_run *r, double seconds)
{
    json_t *o = json_object(), *rows = json_array(), *samples = json_array();
    for (int64_t i = 0; i < r->h.n_rows; i++) {
        const tg_cli_loss_row *w = &r->h.rows[i];
        json_t *row = json_object();
        json_object_set_new(row, "epoch", json_integer(w->epoch));
        json_object_set_new(row, "step", json_integer(w->step));
        json_object_set_new(row, "train_loss", isfinite(w->train) ? json_real(w->train) : json_null());
        json_object_set_new(row, "val_loss", isfinite(w->val) ? json_real(w->val) : json_null());
        json_object_set_new(row, "tokens_seen", json_integer(w->tokens));
        json_array_append_new(rows, row);
    }
    for (int64_t i = 0; i < r->h.n_samples; i++)
        json_array_append_new(samples, json_string(r->h.samples[i]));
    json_object_set_new(o, "rows", rows);
    json_object_set_new(o, "samples", samples);
    json_object_set_new(o, "seconds", json_real(seconds));
    json_object_set_new(o, "precision", json_string(tg_numerics_name(tg_module_numerics(r->gpt))));
    tg_cli_json_bf16(o, tg_module_numerics(r->gpt));
    json_object_set_new(o, "tokens_per_s", json_real(seconds > 0 ? (double)r->tokens_this_run / seconds : 0.0));
    if (r->size > 1) { /* data parallel: how long a step waited for the gradients' all-reduce */
        const tg_dist_ddp_stats *d = &r->dist_stats;
        json_object_set_new(o, "ranks", json_integer(r->size));
        json_object_set_new(o, "buckets", json_integer(d->buckets));
        json_object_set_new(o, "mpi_wait_per_step_s", json_real(d->syncs ? d->total_wait_seconds / (double)d->syncs : 0.0));
    }
    tg_cli_print_json(CMD, o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17));
}

/* One optimizer step on one batch (the book's inner loop body). */
static int train_step(pt_run *r, tg_tensor *x, tg_tensor *y, double *loss_out)
{
    const pt_args *a = r->a;
    if (a->warmup_seen) {
        tg_lr_schedule s = {a->initial_lr, a->lr, a->min_lr, a->warmup, r->total_steps};
        tg_optimizer_set_lr(r->opt, tg_lr_schedule_at(&s, r->global_step + 1));
    }
    tg_optimizer_zero_grad(r->opt);
    tg_tensor *xs = tg_dist_batch_slice(r->step_tape, x), *ys = xs ? tg_dist_batch_slice(r->step_tape, y) : NULL;
    tg_tensor *loss = ys ? loss_batch(r, xs, ys) : NULL;
    if (!loss || tg_backward(loss, NULL, false) != TG_OK) return -1;
    /* the mean of the ranks' means: the global batch's loss, the same on every rank */
    double l = tg_item(loss);
    if (r->ddp && (tg_dist_ddp_sync(r->ddp) != TG_OK || tg_dist_all_reduce_f64(&l, 1, TG_DIST_SUM) != TG_OK)) return -1;
    *loss_out = l / r->size;
    /* appendix D: clipping once the warm-up is over */
    if (a->clip_seen && (!a->warmup_seen || r->global_step + 1 > a->warmup) &&
        tg_optimizer_clip_grad_norm_(r->opt, a->clip, 2.0, NULL) != TG_OK)
        return -1;
    if (tg_optimizer_step(r->opt) != TG_OK) return -1;
    tg_tape_reset(r->step_tape);
    return 0;
}

/* One epoch: for input_batch, target_batch in train_loader: ... */
static int epoch_loop(pt_run *r, tg_loader_iter *it, int64_t epoch, int64_t nb)
{
    const pt_args *a = r->a;
    for (int64_t b = 0;; b++) {
        tg_tensor *x, *y;
        int got = tg_loader_iter_next(it, r->step_tape, &x, &y);
        if (got < 0) return tg_cli_lib_error(CMD, NULL);
        if (got == 0) return TG_CLI_OK;
        double loss;
        int64_t ntok = tg_numel(x); /* x lives in the step tape, reset by the step */
        if (train_step(r, x, y, &loss)) return tg_cli_lib_error(CMD, "training step");
        if (!isfinite(loss)) {
            progress_clear(r);
            fflush(stdout);
            tg_cli_error(CMD, "the loss diverged to %g at step %lld (try a smaller --lr)", loss,
                         (long long)r->global_step + 1);
            return TG_CLI_FAIL;
        }
        r->tokens_seen += ntok;
        r->tokens_this_run += ntok;
        r->global_step++;
        r->steps_this_run++;
        if (r->global_step % a->eval_freq == 0) {
            tg_cli_loss_row w = {epoch + 1, r->global_step, r->tokens_seen, 0, 0};
            if (evaluate(r, &w.train, &w.val)) return tg_cli_lib_error(CMD, "evaluation");
            if (history_add_row(&r->h, w)) return tg_cli_error(CMD, "out of memory");
            progress_clear(r);
            if (r->lead) print_row(&w);
            fflush(stdout);
        }
        progress_draw(r, epoch + 1, b + 1, nb);
    }
}

static int train(pt_run *r)
{
    const pt_args *a = r->a;
    int64_t nb = tg_loader_len(r->train);
    r->total_steps = nb * a->epochs;
    if (a->warmup_seen) {
        tg_lr_schedule s = {a->initial_lr, a->lr, a->min_lr, a->warmup, r->total_steps};
        if (tg_lr_schedule_check(&s) != TG_OK)
            return tg_cli_error(CMD, "--warmup %lld: the run has %lld steps (%lld batches x %lld epochs); %s",
                                (long long)a->warmup, (long long)r->total_steps, (long long)nb, (long long)a->epochs,
                                tg_last_error());
    }
    /* a resumed run prints the table so far first, so its output equals an
     * uninterrupted run's */
    for (int64_t e = 1, i = 0; r->lead && e <= r->epoch_done; e++) {
        for (; i < r->h.n_rows && r->h.rows[i].epoch == e; i++) print_row(&r->h.rows[i]);
        puts(r->h.samples[e - 1]);
    }
    fflush(stdout);
    if (r->epoch_done >= a->epochs) {
        if (!r->lead) return TG_CLI_OK;
        fprintf(stderr, "tapegrad pretrain: the checkpoint is at epoch %lld of %lld: nothing to train\n",
                (long long)r->epoch_done, (long long)a->epochs);
        return TG_CLI_OK;
    }
    r->t0 = tg_cli_now();
    int rc = TG_CLI_OK;
    for (int64_t epoch = r->epoch_done; epoch < a->epochs && rc == TG_CLI_OK; epoch++) {
        tg_module_train(r->gpt, true);
        tg_loader_iter *it = tg_loader_iter_new(r->train);
        if (!it) return tg_cli_lib_error(CMD, NULL);
        rc = epoch_loop(r, it, epoch, nb);
        tg_loader_iter_free(it);
        if (rc != TG_CLI_OK) return rc;
        r->trained_seconds = tg_cli_now() - r->t0;
        r->epoch_done = epoch + 1;
        if (!r->lead) continue; /* generation draws nothing: the ranks stay in step */
        char *s = sample(r);
        if (!s) return tg_cli_lib_error(CMD, "sample");
        if (history_add_sample(&r->h, s)) {
            free(s);
            return tg_cli_error(CMD, "out of memory");
        }
        progress_clear(r);
        puts(s);
        fflush(stdout);
        if (a->checkpoint) rc = save_checkpoint(r, a->checkpoint);
    }
    progress_clear(r);
    return rc;
}

/* Reads, splits and tokenizes the text; builds the loaders. */
static int prepare_data(pt_run *r, tg_text_dataset **dtrain, tg_text_dataset **dval)
{
    const pt_args *a = r->a;
    size_t len, cut;
    int rc = TG_CLI_OK;
    char *text = tg_cli_read_file(CMD, "--text", a->text, false, &len);
    if (!text) return TG_CLI_USAGE;
    int64_t *ids[2] = {NULL, NULL};
    size_t nid[2] = {0, 0};
    if (len == 0) {
        rc = tg_cli_error(CMD, "--text: '%.300s' is empty", a->text);
    } else if (tg_text_split(text, len, a->train_ratio, &cut) != TG_OK) {
        rc = tg_cli_error(CMD, "--text: '%.300s': %s", a->text, tg_last_error());
    } else {
        r->text_hash = fnv1a(text, len);
        for (int k = 0; k < 2 && rc == TG_CLI_OK; k++)
            if (tg_tokenizer_encode(r->tok, k ? text + cut : text, k ? len - cut : cut, &ids[k], &nid[k]) != TG_OK)
                rc = tg_cli_lib_error(CMD, "--text");
    }
    free(text);
    int64_t ctx = r->cfg.context_length;
    for (int k = 0; k < 2 && rc == TG_CLI_OK; k++) {
        const char *what = k ? "validation" : "training";
        tg_text_dataset *d = tg_text_dataset_new(ids[k], (int64_t)nid[k], ctx, a->stride);
        if (!d) {
            rc = tg_cli_lib_error(CMD, NULL);
            break;
        }
        *(k ? dval : dtrain) = d;
        int64_t need = k ? 1 : a->batch;
        if (tg_text_dataset_len(d) < need)
            rc = tg_cli_error(CMD,
                              "--text: the %s part of '%.300s' has %zu ids, %lld window%s of %lld; it needs "
                              "at least %lld (a longer text, a smaller --context or --batch, or another "
                              "--train-ratio)",
                              what, a->text, nid[k], (long long)tg_text_dataset_len(d),
                              tg_text_dataset_len(d) == 1 ? "" : "s", (long long)ctx + 1, (long long)need);
    }
    for (int k = 0; k < 2 && rc == TG_CLI_OK; k++) {
        for (size_t i = 0; i < nid[k]; i++)
            if (ids[k][i] >= r->cfg.vocab_size) {
                rc = tg_cli_error(CMD, "--text: id %lld is outside the model's vocabulary (--vocab %lld)",
                                  (long long)ids[k][i], (long long)r->cfg.vocab_size);
                break;
            }
    }
    free(ids[0]);
    free(ids[1]);
    if (rc != TG_CLI_OK) return rc;
    tg_loader_options ot = {.batch_size = a->batch, .shuffle = true, .drop_last = true};
    tg_loader_options ov = {.batch_size = a->batch, .shuffle = false, .drop_last = false};
    r->train = tg_text_loader_new(*dtrain, ot);
    r->val = r->train ? tg_text_loader_new(*dval, ov) : NULL;
    return r->val ? TG_CLI_OK : tg_cli_lib_error(CMD, NULL);
}

/* ---- many processes ---------------------------------------------------------------------- */

/* A failure of this rank alone, while the others run on: ends the job. */
static int rank_failed(const pt_run *r, int rc)
{
    if (r->size > 1 && rc == TG_CLI_USAGE) {
        progress_clear(r);
        tg_cli_dist_show_errors();
        tg_dist_abort(rc);
    }
    return rc;
}

/* Every rank has set up (or failed to): they agree on it, rank 0's
 * settings must be everyone's (the integers first, then the floats), then the
 * ddp (a broadcast of rank 0's model). */
static int dist_join(pt_run *r, int rc)
{
    tg_checkpoint_value v[PT_NIDENTITY + 1];
    int64_t bits[PT_NIDENTITY + 1], bits0[PT_NIDENTITY + 1];
    if (rc == TG_CLI_OK) {
        identity(r, v);
        v[PT_NIDENTITY] = (tg_checkpoint_value){.name = "--epochs", .i = r->a->epochs};
        for (int k = 0; k <= PT_NIDENTITY; k++)
            if (v[k].is_float)
                memcpy(&bits[k], &v[k].f, sizeof v[k].f);
            else
                bits[k] = v[k].i;
        memcpy(bits0, bits, sizeof bits);
        if (tg_dist_broadcast(bits0, sizeof bits0, 0) != TG_OK) rc = tg_cli_lib_error(CMD, NULL);
    }
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; rc == TG_CLI_OK && k <= PT_NIDENTITY; k++) {
            double f0;
            memcpy(&f0, &bits0[k], sizeof f0);
            if (v[k].is_float != pass || (pass ? v[k].f == f0 : bits[k] == bits0[k])) continue;
            const char *what = "this rank's run differs from rank 0's";
            rc = pass ? tg_cli_error(CMD, "%s: %s %g, rank 0 %g", what, v[k].name, v[k].f, f0)
                      : tg_cli_error(CMD, "%s: %s %lld, rank 0 %lld", what, v[k].name, (long long)bits[k],
                                     (long long)bits0[k]);
        }
    return tg_cli_dist_ddp(CMD, rc, r->gpt, &r->ddp);
}

/* ---- the run ------------------------------------------------------------------------------- */

/* Tokenizer, start ids, data, model, optimizer, and the checkpoint resumed. */
static int setup(pt_run *r, const tg_cli_model *m, tg_text_dataset **dtrain, tg_text_dataset **dval)
{
    const pt_args *a = r->a;
    int rc = TG_CLI_OK;
    r->tok = tg_cli_tokenizer();
    if (!r->tok) return tg_cli_lib_error(CMD, NULL);
    if (tg_tokenizer_encode(r->tok, a->start, strlen(a->start), &r->start_ids, &r->n_start) != TG_OK)
        return tg_cli_lib_error(CMD, "--start");
    if (r->n_start == 0) return tg_cli_error(CMD, "--start: the start text is empty");
    for (size_t i = 0; i < r->n_start; i++)
        if (r->start_ids[i] >= r->cfg.vocab_size)
            return tg_cli_error(CMD, "--start: id %lld is outside the model's vocabulary (--vocab %lld)",
                                (long long)r->start_ids[i], (long long)r->cfg.vocab_size);
    /* the outputs are written at the end of an epoch or of the run: a bad
     * path fails now, not after hours of training */
    const char *outs[3] = {a->plot, a->checkpoint, a->save}, *names[3] = {"--plot", "--checkpoint", "--save"};
    for (int k = 0; r->lead && k < 3; k++)
        if (outs[k] && !tg_cli_writable(outs[k]))
            return tg_cli_error(CMD, "%s: cannot write '%.300s': %s", names[k], outs[k], strerror(errno));
    if (a->fast_dropout) tg_generator_set_dropout_stream(NULL, TG_DROPOUT_COUNTER);

    /* torch.manual_seed(123); train_loader = ...; val_loader = ... */
    tg_manual_seed(r->seed);
    rc = prepare_data(r, dtrain, dval);
    /* torch.manual_seed(123); model = GPTModel(cfg); optimizer = AdamW(...) */
    if (rc == TG_CLI_OK && !(r->gpt = tg_cli_model_build(r->model_tape, m, &r->cfg))) rc = tg_cli_lib_error(CMD, NULL);
    if (rc == TG_CLI_OK) {
        tg_cli_gpt_set_layers(r->gpt, a->composed);
        tg_adam_options o = {a->lr, {0.9, 0.999}, 1e-8, a->weight_decay, false};
        bool adam = strcmp(a->optimizer, "adam") == 0;
        r->opt = adam ? tg_adam_new(r->model_tape, r->gpt, o) : tg_adamw_new(r->model_tape, r->gpt, o);
        if (!r->opt) rc = tg_cli_lib_error(CMD, NULL);
    }
    if (rc == TG_CLI_OK && a->resume) rc = load_checkpoint(r, a->resume);
    return rc;
}

static int run(pt_run *r, const tg_cli_model *m)
{
    const pt_args *a = r->a;
    tg_text_dataset *dtrain = NULL, *dval = NULL;
    int rc = setup(r, m, &dtrain, &dval);
    if (r->size > 1) rc = dist_join(r, rc);
    double t0 = tg_cli_now();
    if (rc == TG_CLI_OK) rc = rank_failed(r, train(r));
    double seconds = tg_cli_now() - t0;
    if (r->ddp) tg_dist_ddp_get_stats(r->ddp, &r->dist_stats);
    tg_dist_ddp_free(r->ddp);
    if (rc == TG_CLI_OK && r->lead && a->save && tg_module_save(r->gpt, a->save) != TG_OK) rc = tg_cli_lib_error(CMD, "--save");
    if (rc == TG_CLI_OK && r->lead && a->plot) rc = write_plot(r, a->plot);
    if (rc == TG_CLI_OK && r->lead && a->json) json_out(r, seconds);
    if (rc == TG_CLI_OK && r->lead && !a->json && r->steps_this_run > 0)
        fprintf(stderr, "%lld steps in %.1f s (%.0f tokens/s)\n", (long long)r->steps_this_run, seconds,
                seconds > 0 ? (double)r->tokens_this_run / seconds : 0.0);
    if (rc == TG_CLI_OK && r->lead && !a->json && r->size > 1 && r->dist_stats.syncs)
        fprintf(stderr, "%d ranks: %.1f ms per step waiting for the gradients' all-reduce (%lld buckets)\n", r->size,
                1e3 * r->dist_stats.total_wait_seconds / (double)r->dist_stats.syncs, (long long)r->dist_stats.buckets);
    tg_loader_free(r->train);
    tg_loader_free(r->val);
    tg_text_dataset_free(dtrain);
    tg_text_dataset_free(dval);
    return rc;
}

static int pretrain(int argc, char **argv)
{
    pt_args a = {.optimizer = "adamw", .start = "Every effort moves you", .batch = 2, .epochs = 10, .eval_freq = 5,
                 .eval_iter = 5, .sample_tokens = 50, .lr = 4e-4, .weight_decay = 0.1, .train_ratio = 0.9,
                 .initial_lr = 1e-5};
    const tg_opt own[] = {
        {.name = "--text", .type = TG_OPT_STRING, .dest = &a.text},
        {.name = "--batch", .type = TG_OPT_INT, .dest = &a.batch, .imin = 1, .imax = 65536},
        {.name = "--epochs", .type = TG_OPT_INT, .dest = &a.epochs, .imin = 1, .imax = 1000000},
        {.name = "--lr", .type = TG_OPT_DOUBLE, .dest = &a.lr, .dmin = 0.0, .dmax = 10.0},
        {.name = "--weight-decay", .type = TG_OPT_DOUBLE, .dest = &a.weight_decay, .dmin = 0.0, .dmax = 1e6},
        {.name = "--optimizer", .type = TG_OPT_STRING, .dest = &a.optimizer},
        {.name = "--eval-freq", .type = TG_OPT_INT, .dest = &a.eval_freq, .imin = 1, .imax = INT32_MAX},
        {.name = "--eval-iter", .type = TG_OPT_INT, .dest = &a.eval_iter, .imin = 1, .imax = INT32_MAX},
        {.name = "--train-ratio", .type = TG_OPT_DOUBLE, .dest = &a.train_ratio, .dmin = 0.0, .dmax = 1.0,
         .dmax_open = true},
        {.name = "--stride", .type = TG_OPT_INT, .dest = &a.stride, .imin = 1, .imax = INT32_MAX,
         .seen = &a.stride_seen},
        {.name = "--start", .type = TG_OPT_STRING, .dest = &a.start},
        {.name = "--sample-tokens", .type = TG_OPT_INT, .dest = &a.sample_tokens, .imin = 0, .imax = 100000},
        {.name = "--warmup", .type = TG_OPT_INT, .dest = &a.warmup, .imin = 0, .imax = INT32_MAX,
         .seen = &a.warmup_seen},
        {.name = "--initial-lr", .type = TG_OPT_DOUBLE, .dest = &a.initial_lr, .dmin = 0.0, .dmax = 10.0,
         .seen = &a.initial_seen},
        {.name = "--min-lr", .type = TG_OPT_DOUBLE, .dest = &a.min_lr, .dmin = 0.0, .dmax = 10.0, .seen = &a.min_seen},
        {.name = "--clip-grad-norm", .type = TG_OPT_DOUBLE, .dest = &a.clip, .dmin = 1e-12, .dmax = 1e12,
         .seen = &a.clip_seen},
        {.name = "--save", .type = TG_OPT_STRING, .dest = &a.save},
        {.name = "--checkpoint", .type = TG_OPT_STRING, .dest = &a.checkpoint},
        {.name = "--resume", .type = TG_OPT_STRING, .dest = &a.resume},
        {.name = "--plot", .type = TG_OPT_STRING, .dest = &a.plot},
        {.name = "--composed", .type = TG_OPT_FLAG, .dest = &a.composed},
        {.name = "--fast-dropout", .type = TG_OPT_FLAG, .dest = &a.fast_dropout},
        {.name = "--threads", .type = TG_OPT_INT, .dest = &a.threads, .imin = 1, .imax = 1024},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &a.json},
        {.name = "--dist", .type = TG_OPT_FLAG, .dest = &a.dist},
    };
    tg_cli_model m;
    pt_run r = {.a = &a, .global_step = -1, .size = 1, .lead = true};
    tg_cli_model_defaults(&m, 256);
    int rc;
    tg_cli_command c = {.name = CMD, .help = help, .opts = own, .nopts = TG_CLI_NOPTS(own)};
    if (!tg_cli_model_parse(&c, argc, argv, &m, &r.cfg, &rc)) return rc;
    if (!a.text) return tg_cli_error(CMD, "--text PATH is required");
    if (strcmp(a.optimizer, "adamw") != 0 && strcmp(a.optimizer, "adam") != 0)
        return tg_cli_error(CMD, "--optimizer: expected adamw or adam, got '%.200s'", a.optimizer);
    if (a.train_ratio <= 0) return tg_cli_error(CMD, "--train-ratio must be above 0, got %g", a.train_ratio);
    if (!a.warmup_seen && (a.initial_seen || a.min_seen))
        return tg_cli_error(CMD, "--initial-lr and --min-lr set the --warmup schedule: give --warmup too");
    if (!a.min_seen) a.min_lr = a.initial_lr;
    if (!a.stride_seen) a.stride = r.cfg.context_length;
    r.seed = m.seed;
    if (tg_cli_check_only) return TG_CLI_OK;
#ifdef _OPENMP
    if (a.threads) omp_set_num_threads((int)a.threads);
#endif
    rc = tg_cli_dist_begin(CMD, a.dist, a.batch, a.threads != 0);
    if (rc != TG_CLI_OK) return rc;
    r.rank = tg_dist_rank(), r.size = tg_dist_size(), r.lead = r.rank == 0;
    if (r.lead) tg_cli_warn_blas(CMD);
    r.progress = isatty(STDERR_FILENO) && !a.json && r.lead;
    r.model_tape = tg_tape_new();
    r.step_tape = tg_tape_new();
    rc = r.model_tape && r.step_tape ? run(&r, &m) : tg_cli_error(CMD, "out of memory");
    history_free(&r.h);
    free(r.start_ids);
    tg_tape_free(r.step_tape);
    tg_tape_free(r.model_tape);
    fflush(stdout);
    return rc;
}

/* Under mpirun every rank starts MPI first, so that only rank 0 shows the
 * errors all ranks meet alike (a bad argument); MPI ends on every path. */
int tg_cmd_pretrain(int argc, char **argv)
{
    return tg_cli_dist_main(pretrain, argc, argv);
}
