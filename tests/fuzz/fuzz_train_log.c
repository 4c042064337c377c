/* libFuzzer target: the training loop's record in a checkpoint
 * ("train.log": the table, the task's series, the printed lines and the
 * loader's pass, as JSON text; src/train/train.c).
 *
 * A small run writes a real checkpoint once; each input replaces its
 * record, and tg_trainer_new resumes from the file, then the run trains to
 * its end. Invariants checked on every input:
 *   - a record that does not parse or does not fit (a row of another shape,
 *     a series of mixed kinds, a pass that is not a permutation of the
 *     samples or lies past the epoch) is refused with a message, no
 *     trainer;
 *   - an accepted one trains to its end (or stops with a message, such as
 *     a pass whose position and batch disagree) without a crash or a leak.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_train_log"
#include "fuzz.h"

#include <tapegrad.h>

enum { N = 16, D = 2 };
static float xs[N][D], ys[N];
static tg_tape *keep;
static tg_safetensors saved; /* the real checkpoint's tensors */
static char dir[64], path[96];
static FILE *devnull;

static int batch_fn(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out)
{
    (void)dataset;
    int64_t s[2] = {count, D}, t[2] = {count, 1};
    out->input = tg_empty(tp, TG_F32, 2, s);
    out->target = tg_empty(tp, TG_F32, 2, t);
    if (!out->input || !out->target) return TG_ENOMEM;
    float *x = tg_data_ptr(out->input), *y = tg_data_ptr(out->target);
    for (int64_t i = 0; i < count; i++) memcpy(x + i * D, xs[idx[i]], sizeof xs[0]), y[i] = ys[idx[i]];
    return TG_OK;
}

static tg_tensor *loss_fn(tg_tape *tp, tg_module *m, const tg_batch *b, void *task, double *w)
{
    (void)task, (void)w;
    return tg_mse_loss(tp, tg_module_forward(tp, m, b->input), b->target, TG_REDUCE_MEAN);
}

/* A fresh run: resumed from `resume`, checkpointing to `ck`; the trainer's
 * status after fit (or its construction's), the rows in *rows. */
static int run(const char *ck, const char *resume, int64_t *rows)
{
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(5);
    tg_module *m = tg_linear_new(tp, D, 1, true);
    tg_optimizer *opt = tg_adamw_new(tp, m, (tg_adam_options){1e-2, {0.9, 0.999}, 1e-8, 0.0, false});
    tg_loader *l = tg_loader_new(N, (tg_loader_options){.batch_size = 4, .shuffle = true, .drop_last = true});
    CHECK(opt && l);
    tg_trainer *tr = tg_trainer_new(&(tg_trainer_options){
        .model = m, .optimizer = opt, .train = {l, batch_fn, NULL}, .val = {l, batch_fn, NULL}, .loss = loss_fn,
        .epochs = 2, .eval_freq = 3, .eval_iter = 1, .checkpoint = ck, .checkpoint_every = 2, .resume = resume,
        .out = devnull});
    int st = tr ? tg_trainer_fit(tr) : TG_EINVAL;
    if (!tr) CHECK(*tg_last_error());
    tg_trainer_rows(tr, rows);
    tg_trainer_free(tr);
    tg_loader_free(l);
    tg_tape_free(tp);
    return st;
}

static void cleanup(void)
{
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    for (int i = 0; i < N; i++) xs[i][0] = (float)i / N, xs[i][1] = (float)(i % 3), ys[i] = (float)(i % 5);
    devnull = fopen("/dev/null", "w");
    strcpy(dir, "/tmp/tapegrad_fuzz_train_XXXXXX");
    CHECK(devnull && mkdtemp(dir));
    snprintf(path, sizeof path, "%s/run.ckpt", dir);
    atexit(cleanup);
    int64_t rows;
    CHECK(run(path, NULL, &rows) == TG_OK && rows > 0);
    keep = tg_tape_new();
    CHECK(keep && tg_safetensors_load(keep, path, &saved) == TG_OK);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tg_tape *tp = tg_tape_new();
    tg_named_tensor *items = tg_tape_alloc(tp, sizeof *items * (size_t)saved.n, false);
    int64_t n = (int64_t)size;
    tg_tensor *log = tg_from_data(tp, TG_U8, 1, &n, data);
    CHECK(items && log);
    for (int i = 0; i < saved.n; i++)
        items[i] = (tg_named_tensor){saved.names[i], strcmp(saved.names[i], "train.log") ? saved.tensors[i] : log};
    CHECK(tg_safetensors_save(path, items, saved.n) == TG_OK);
    int64_t rows = 0;
    int st = run(NULL, path, &rows);
    (void)st; /* refused with a message (checked in run), or trained to its end */
    tg_tape_free(tp);
    return 0;
}
