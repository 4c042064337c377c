/* A task of your own, trained by the library's trainer: your dataset (given
 * to the trainer through a batch function), your model and your loss, with
 * evaluation, a schedule, clipping, a checkpoint and exact resume. It trains
 * 4 epochs in one go; then again with a checkpoint after each epoch,
 * interrupted in epoch 3; then a fresh model resumed from the checkpoint
 * trains to epoch 4. It exits 0 when the resumed table equals the
 * uninterrupted one.
 *   user_task [CHECKPOINT_PATH]   (default: user_task.ckpt) */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <tapegrad.h>

enum { N = 96, D = 4 };
typedef struct { float x[N][D], y[N]; } points; /* your data: y = sum(sin(3 x)) */

/* The rows idx[0..count) as a batch: input (count, D), target (count, 1). */
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

/* Your loss: the mean squared error of the model's prediction. */
static tg_tensor *mse(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, double *weight)
{
    (void)task, (void)weight;
    return tg_mse_loss(tp, tg_module_forward(tp, model, b->input), b->target, TG_REDUCE_MEAN);
}

/* After each epoch: a run told to stop after `*stop` epochs fails there, as
 * if the machine went down (the epoch's checkpoint is not written). */
static int interrupt(tg_trainer *tr, int64_t epoch, void *stop)
{
    (void)tr;
    return stop && epoch == *(int64_t *)stop ? tg_error_status(TG_ESTATE, "interrupted in epoch %lld", (long long)epoch)
                                             : TG_OK;
}

/* One run of 4 epochs (resuming from `resume` when given, stopping in epoch
 * `stop` when not NULL); its table into rows. */
static int train(points *train_set, points *val_set, int64_t *stop, const char *checkpoint, const char *resume,
                 bool quiet, tg_train_row *rows, int64_t *n_rows)
{
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(7);
    tg_module *layers[3] = {tg_linear_new(tp, D, 32, true), tg_dropout_new(tp, 0.1), tg_linear_new(tp, 32, 1, true)};
    tg_module *model = tg_sequential_new(tp, 3, layers);
    tg_optimizer *opt = tg_adamw_new(tp, model, (tg_adam_options){1e-2, {0.9, 0.999}, 1e-8, 0.01, false});
    tg_loader *tl = tg_loader_new(N, (tg_loader_options){.batch_size = 8, .shuffle = true, .drop_last = true});
    tg_loader *vl = tg_loader_new(N, (tg_loader_options){.batch_size = 8});
    tg_trainer *tr = !opt || !tl || !vl ? NULL
                                        : tg_trainer_new(&(tg_trainer_options){
                                              .model = model, .optimizer = opt,
                                              .train = {tl, points_batch, train_set}, .val = {vl, points_batch, val_set},
                                              .loss = mse, .task = stop, .epochs = 4, .eval_freq = 6,
                                              .schedule = true, .warmup = 4, .initial_lr = 1e-3, .min_lr = 1e-3,
                                              .clip_grad_norm = 1.0, .checkpoint = checkpoint, .resume = resume,
                                              .on_epoch_end = interrupt, .quiet = quiet});
    int st = tr ? tg_trainer_fit(tr) : TG_EINVAL;
    if (st == TG_OK || stop) {
        const tg_train_row *r = tg_trainer_rows(tr, n_rows);
        memcpy(rows, r, sizeof *r * (size_t)*n_rows);
    }
    if (st != TG_OK) fprintf(stderr, "user_task: %s\n", tg_last_error());
    tg_trainer_free(tr);
    tg_loader_free(tl);
    tg_loader_free(vl);
    tg_tape_free(tp);
    return st;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "user_task.ckpt";
    static points set[2]; /* training and validation points */
    tg_generator *g = tg_generator_new(42);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < N; i++) {
            double y = 0;
            for (int k = 0; k < D; k++) y += sin(3.0 * (set[s].x[i][k] = (float)(2 * (tg_generator_random(g) / 4294967296.0) - 1)));
            set[s].y[i] = (float)y;
        }
    tg_generator_free(g);
    tg_train_row full[64], resumed[64];
    int64_t n_full = 0, n_resumed = 0, stop = 3;
    if (train(&set[0], &set[1], NULL, NULL, NULL, false, full, &n_full) != TG_OK ||
        train(&set[0], &set[1], &stop, path, NULL, true, resumed, &n_resumed) != TG_ESTATE ||
        train(&set[0], &set[1], NULL, path, path, true, resumed, &n_resumed) != TG_OK)
        return 1;
    bool same = n_full == n_resumed;
    for (int64_t i = 0; same && i < n_full; i++)
        same = full[i].step == resumed[i].step && full[i].train_loss == resumed[i].train_loss &&
               full[i].val_loss == resumed[i].val_loss;
    printf("interrupted in epoch 3, resumed after epoch 2: %s (%lld rows; val loss %.4f -> %.4f)\n", same ? "the same table" : "DIFFERENT",
           (long long)n_resumed, full[0].val_loss, full[n_full - 1].val_loss);
    remove(path);
    return same && full[n_full - 1].val_loss < 0.5 * full[0].val_loss ? 0 : 1;
}
