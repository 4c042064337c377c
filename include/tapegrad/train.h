/* tapegrad/train.h: the training loop, owned by the library. Every task of
 * tapegrad (pretraining, the classifier, the instruction follower, the
 * benchmark, a user's own) trains through it: a model, an optimizer, a
 * training and a validation source of batches, the task's loss, options and
 * callbacks. What one task gets, every task gets: appendix D's warm-up and
 * cosine schedule, gradient clipping, gradient accumulation, checkpoints
 * with exact resume, data-parallel training under mpirun, the book's loss
 * table, a progress line.
 *
 *     static tg_tensor *my_loss(tg_tape *tp, tg_module *m, const tg_batch *b, void *task, double *weight)
 *     {
 *         return tg_mse_loss(tp, tg_module_forward(tp, m, b->input), b->target, TG_REDUCE_MEAN);
 *     }
 *     ...
 *     tg_trainer *tr = tg_trainer_new(&(tg_trainer_options){
 *         .model = model, .optimizer = opt,
 *         .train = {.loader = train_loader, .batch = my_batch, .dataset = &my_data},
 *         .val = {.loader = val_loader, .batch = my_batch, .dataset = &my_data},
 *         .loss = my_loss, .epochs = 3, .eval_freq = 10, .eval_iter = 2,
 *         .checkpoint = "run.ckpt", .resume = resuming ? "run.ckpt" : NULL});
 *     if (!tr || tg_trainer_fit(tr) != TG_OK) fprintf(stderr, "%s\n", tg_last_error());
 *     tg_trainer_free(tr);
 *
 * The loop, in the book's order (train_model_simple): for each epoch, for
 * each batch of the training loader (its shuffle drawn from the loader's
 * generator when the pass starts, as PyTorch's DataLoader draws): zero the
 * gradients, the loss, backward, (clip), the optimizer step with the
 * schedule's rate; every eval_freq optimizer steps (step 0 included) the
 * mean loss of eval_iter batches of each loader in eval mode under no-grad,
 * printed as the book prints it ("Ep 1 (Step 000000): Train loss 9.781, Val
 * loss 9.933"); after each epoch the task's on_epoch_end; after the last,
 * its on_train_end.
 *
 * Under mpirun (tg_dist_size() > 1) every task is data parallel: each rank
 * runs the same program with the same seed, takes rows [B r / N, B (r + 1)
 * / N) of every global batch of B rows (the training batch must divide by
 * N), the gradients are averaged in buckets during backward
 * (tg_dist_ddp), a loss over a masked count of items (tokens) is weighted
 * so that the gradient is the global batch's, evaluation losses and the
 * sums of tg_trainer_eval are reduced, dropout masks are the rank's slice
 * of the masks one process would draw, and only rank 0 prints and writes.
 * N ranks print the one-process table (to float rounding).
 *
 * Errors: a function returns a status and sets tg_last_error(); a loss that
 * is not finite stops training with TG_EDIVERGED. Under mpirun a rank that
 * fails while the others wait in a collective cannot recover them: the
 * program calls tg_dist_abort. */
#ifndef TAPEGRAD_TRAIN_H
#define TAPEGRAD_TRAIN_H

#include <stdio.h>

#include "tapegrad/data.h"
#include "tapegrad/dist.h"
#include "tapegrad/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One batch: the input and the target, and more tensors by name (DPO's
 * "chosen", "rejected", "chosen_mask", "rejected_mask"), any shapes; the
 * first dimension of each counts the rows that ranks split. A batch may
 * leave input and target NULL when it names its tensors. The batch's lead
 * tensor is input, else the first named one: its rows are the batch's, and
 * its elements the tokens a row of the table counts as seen. A batch
 * starts zeroed (tg_batch b = {0}; a tg_batch_fn receives one so). */
#define TG_BATCH_MAX_TENSORS 8
typedef struct {
    tg_tensor *input, *target;
    int n; /* named tensors */
    const char *names[TG_BATCH_MAX_TENSORS];
    tg_tensor *tensors[TG_BATCH_MAX_TENSORS];
} tg_batch;
/* The tensor named name ("input" and "target" included); NULL with a
 * message when the batch has none. */
TG_API tg_tensor *tg_batch_get(const tg_batch *b, const char *name);
/* Adds (or replaces) the tensor named name. TG_EINVAL when full. */
TG_API int tg_batch_set(tg_batch *b, const char *name, tg_tensor *t);

/* Makes the batch of the samples idx[0..count) of dataset in tp. TG_OK or
 * a status with a message. */
typedef int (*tg_batch_fn)(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out);

/* A source of batches: a loader (order, shuffling, batch size; borrowed)
 * and the function that makes its batches. batch NULL: the loader's own
 * text windows (tg_text_loader_new). */
typedef struct {
    tg_loader *loader;
    tg_batch_fn batch;
    void *dataset;
} tg_data;

/* The library's datasets as batch functions. dataset: a tg_class_dataset
 * (chapter 6: padded ids and labels), or a tg_instruction_batches (chapter
 * 7: custom_collate_fn). */
TG_API int tg_class_batch(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out);
typedef struct {
    const tg_instruction_dataset *dataset;
    int64_t pad_id, ignore_index, allowed_max_length; /* as tg_collate_pad */
} tg_instruction_batches;
TG_API int tg_instruction_batch(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out);
/* The DPO notebook's batches of a tg_preference_dataset (data.h): the named
 * tensors "chosen", "rejected", "chosen_mask", "rejected_mask"
 * (tg_preference_dataset_batch with mask_prompt_tokens). */
typedef struct {
    const tg_preference_dataset *dataset;
    int64_t pad_id, allowed_max_length;
    bool keep_prompt; /* mask_prompt_tokens=False */
} tg_preference_batches;
TG_API int tg_preference_batch(tg_tape *tp, void *dataset, int64_t count, const int64_t *idx, tg_batch *out);

/* The task's loss of one batch (under mpirun, this rank's slice of it): a
 * scalar, the mean over *weight items. *weight comes in as the batch's rows;
 * a loss that averages over another count (the unmasked tokens) sets it, so
 * that ranks and evaluation weigh it right. NULL with a message on error. */
typedef tg_tensor *(*tg_loss_fn)(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, double *weight);

/* The book's losses. tg_loss_lm: calc_loss_batch of chapters 5 and 7,
 * cross_entropy(model(input).flatten(0, 1), target.flatten()) with
 * ignore_index -100; weight: the targets that are not -100. tg_loss_last:
 * chapter 6's cross_entropy(model(input)[:, -1, :], labels)
 * (tg_gpt_forward_last). task is unused. */
TG_API tg_tensor *tg_loss_lm(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, double *weight);
TG_API tg_tensor *tg_loss_last(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, double *weight);

/* Direct Preference Optimization (the book's DPO notebook): the policy
 * (the trained model) and a frozen reference, each on the batch's chosen
 * and rejected sequences (tg_preference_batch), compute_logprobs of each
 * (tg_compute_logprobs), compute_dpo_loss (tg_compute_dpo_loss) with beta.
 * The forwards in the notebook's order: the policy on chosen, then on
 * rejected, then the reference on both in eval mode under no-grad. task: a
 * tg_dpo_task, where the batch's rewards are left for the table's columns
 * (tg_dpo_columns: "chosen_reward", "rejected_reward"). A NULL reference is
 * the policy itself with its LoRA adapters off (tg_lora_set_enabled), its
 * frozen starting weights, as PEFT's disable_adapter() serves TRL's DPO: the
 * same numbers as a copy, without a second model in memory; a policy without
 * adapters then is an error. */
typedef struct {
    tg_module *reference; /* borrowed (NULL: the policy without its adapters); put in eval mode by the loss */
    double beta;
    double chosen_reward, rejected_reward; /* the last batch's (set by the loss) */
} tg_dpo_task;
TG_API tg_tensor *tg_loss_dpo(tg_tape *tp, tg_module *policy, const tg_batch *b, void *task, double *weight);
TG_API int tg_dpo_columns(void *task, double *values);
/* The two columns' names, for tg_trainer_options.columns. */
TG_API const char *const *tg_dpo_column_names(void);

typedef struct tg_trainer tg_trainer;

/* One row of the book's table, and the task's own columns (the means of
 * the values its loss gave over the same batches, as the loss's). */
#define TG_TRAIN_MAX_COLUMNS 4
typedef struct {
    int64_t epoch, step, seen; /* epoch from 1; global step from 0; examples or tokens seen */
    double train_loss, val_loss;
    double train_columns[TG_TRAIN_MAX_COLUMNS], val_columns[TG_TRAIN_MAX_COLUMNS];
} tg_train_row;

typedef struct {
    /* required: the model (trained in place) and its optimizer (its lr is
     * the peak of the schedule) */
    tg_module *model;
    tg_optimizer *optimizer;
    /* the training loader (required by fit; tg_trainer_step alone needs
     * none) and the validation one (optional: without it the table's val
     * loss is NaN) */
    tg_data train, val;
    /* the task: its loss (required), the pointer its callbacks receive */
    tg_loss_fn loss;
    void *task;
    /* the task's own columns of the table (at most TG_TRAIN_MAX_COLUMNS;
     * DPO's rewards): their names, and the values of the batch whose loss
     * was just computed, read after each evaluation loss (the loss leaves
     * them in the task) */
    int n_columns;
    const char *const *columns;
    int (*column_values)(void *task, double *values);
    /* epochs to train until (required, >= 1); evaluation every eval_freq
     * optimizer steps (0: never) over eval_iter batches of each loader (0:
     * the whole loader) */
    int64_t epochs, eval_freq, eval_iter;
    /* the table's "seen" counts the input's elements (tokens) instead of
     * its rows (examples) */
    bool count_tokens;
    /* appendix D's schedule (tg_lr_schedule) when schedule is set: warmup
     * steps of linear warm-up from initial_lr to the optimizer's lr, then
     * cosine decay to min_lr over the run's optimizer steps */
    bool schedule;
    int64_t warmup;
    double initial_lr, min_lr;
    /* clip the gradients' 2-norm to this (0: never); with the schedule,
     * only after the warm-up, as appendix D clips */
    double clip_grad_norm;
    /* N micro-batches of the loader's batch size per optimizer step, each
     * loss divided by N before backward (0 or 1: none); an epoch's last
     * group of fewer still steps */
    int64_t accumulate;
    /* checkpoint: written atomically (tg_checkpoint) after each epoch, and
     * every checkpoint_every optimizer steps when > 0; it holds the model,
     * optimizer, default generator, the loader's position, the table and
     * everything printed or recorded so far. resume: read before training
     * (a file of another run is refused: identity values below, and the
     * trainer's own settings) so that the run prints the uninterrupted
     * run's lines. */
    const char *checkpoint, *resume;
    int64_t checkpoint_every;
    /* what else names the run (the task's settings, a digest of its data) */
    int n_identity;
    const tg_checkpoint_value *identity;
    /* callbacks on every rank (they may run collectives such as
     * tg_trainer_eval; they print with tg_trainer_printf); a status other
     * than TG_OK stops training with it. epoch counts from 1. */
    int (*on_epoch_end)(tg_trainer *tr, int64_t epoch, void *task);
    int (*on_train_end)(tg_trainer *tr, void *task);
    /* before the first step of a run that starts afresh (not of a resumed
     * one: what it printed and recorded is in the checkpoint), in training
     * mode: DPO's losses and margins before training */
    int (*on_train_begin)(tg_trainer *tr, void *task);
    /* a row's line (NULL: the book's "Ep 1 (Step 000000): Train loss
     * 9.781, Val loss 9.933"), printed with tg_trainer_printf */
    int (*print_row)(tg_trainer *tr, const tg_train_row *row, void *task);
    /* output: rows not printed (quiet); where lines go (NULL: stdout); a
     * progress line on stderr (when it is a terminal, say) */
    bool quiet, progress;
    FILE *out;
    /* the tape each step records into (NULL: the trainer's own) */
    tg_tape *step_tape;
    /* the numerics policy of every step and evaluation (tensor.h,
     * tg_tape_set_numerics): set on the trainer's own step tape; a given
     * step_tape keeps its own policy, which this must then equal or leave
     * EXACT */
    tg_numerics numerics;
} tg_trainer_options;

/* A trainer for o (borrowed: the model, optimizer, loaders and datasets
 * must outlive it). Checks the options, reads o->resume (the model,
 * optimizer and generator as the file has them; a message about it starts
 * "--resume: ", one about writing a checkpoint "--checkpoint: "), and
 * under mpirun agrees with the other ranks (every rank's settings must be
 * rank 0's: "this rank's run differs from rank 0's: --lr 0.001, rank 0
 * 0.0004") and wraps the model in a tg_dist_ddp (a collective: every rank
 * calls it). NULL with a message; under mpirun only the lowest failing
 * rank has one, the others an empty tg_last_error(). */
TG_API tg_trainer *tg_trainer_new(const tg_trainer_options *o);
/* Frees the trainer (and its ddp: the parameters' .grad become NULL). */
TG_API void tg_trainer_free(tg_trainer *tr);
/* Trains until o->epochs (from where a resumed checkpoint left off; the
 * lines printed before it are printed again first). TG_OK, TG_EDIVERGED
 * for a loss that is not finite, or another status with a message. */
TG_API int tg_trainer_fit(tg_trainer *tr);
/* One optimizer step on n micro-batches (the global ones: under mpirun the
 * trainer slices them), as fit takes it: the schedule's rate, zero_grad,
 * each loss / n backward, the ranks' gradients averaged, clipping, the
 * step; the step tape reset. *loss (may be NULL): the step's loss (the
 * global batch's, every rank the same). Counts as one global step. */
TG_API int tg_trainer_step(tg_trainer *tr, int n, const tg_batch *batches, double *loss);

/* A line of the task's output (no newline needed: one is added when
 * missing). Rank 0 prints it (after clearing the progress line) and keeps it,
 * so that a resumed run prints it again; other ranks do nothing. */
TG_API int tg_trainer_printf(tg_trainer *tr, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A value or a text of the task (an accuracy, a sample) appended to the
 * named series; kept in checkpoints. get: the series so far (NULL and 0
 * when there is none); the pointers stay valid until the next append. */
TG_API int tg_trainer_record(tg_trainer *tr, const char *series, double value);
TG_API int tg_trainer_record_text(tg_trainer *tr, const char *series, const char *text);
TG_API const double *tg_trainer_series(const tg_trainer *tr, const char *series, int64_t *n);
TG_API const char *const *tg_trainer_texts(const tg_trainer *tr, const char *series, int64_t *n);
/* The table so far. */
TG_API const tg_train_row *tg_trainer_rows(const tg_trainer *tr, int64_t *n);

/* A pass over num_batches (0: all) batches of d in eval mode under no-grad
 * (the model's mode is restored), each rank on its slice of each batch:
 * fn adds its numbers for the slice to sums[0..n) (a count of correct
 * labels and of examples, say); the sums are then added over the ranks.
 * Starting the pass draws as iterating the loader does. fn returns TG_OK or
 * a status. */
typedef int (*tg_eval_fn)(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, int n, double *sums);
TG_API int tg_trainer_eval(tg_trainer *tr, const tg_data *d, int64_t num_batches, tg_eval_fn fn, void *task, int n,
                           double *sums);
/* The book's calc_loss_loader: the mean of the task's loss over
 * num_batches batches (0: all) of d, in eval mode under no-grad; NaN for
 * an empty loader. */
TG_API int tg_trainer_loss(tg_trainer *tr, const tg_data *d, int64_t num_batches, double *loss);
/* The table's evaluation as a row would have it: the mean loss and
 * columns of eval_iter batches of the training loader, then of the
 * validation loader (NaN without one), in eval mode under no-grad (the
 * model is left in training mode, as the book's evaluate_model leaves it).
 * row's epoch, step and seen are the trainer's so far. */
TG_API int tg_trainer_evaluate(tg_trainer *tr, tg_train_row *row);
/* The book's calc_accuracy_loader for a classifier: argmax of
 * tg_gpt_forward_last against the labels over num_batches (0: all) of d;
 * the model is left in eval mode, as the book's code leaves it. */
TG_API int tg_trainer_accuracy(tg_trainer *tr, const tg_data *d, int64_t num_batches, double *accuracy);

typedef struct {
    int64_t epoch;          /* epochs finished */
    int64_t step;           /* the last global optimizer step (-1 before the first) */
    int64_t seen;           /* examples or tokens seen */
    int64_t steps_this_run, seen_this_run; /* since this process started (not resumed ones) */
    double seconds;         /* spent in fit so far */
    /* the last step's phases, in seconds: forward (the loss), backward,
     * waiting for the ranks' gradients, clipping and the optimizer */
    double forward_s, backward_s, sync_s, optimizer_s;
    size_t step_tape_bytes; /* the last step's tape before it was reset */
    int rank, size;         /* this process's rank of size (0 of 1 alone) */
    tg_dist_ddp_stats dist; /* under mpirun */
} tg_trainer_stats;
TG_API int tg_trainer_get_stats(const tg_trainer *tr, tg_trainer_stats *out);
/* Whether this process prints and writes (rank 0). */
TG_API bool tg_trainer_is_lead(const tg_trainer *tr);
/* The tape steps record into (reset after each). */
TG_API tg_tape *tg_trainer_tape(const tg_trainer *tr);
/* The trainer's ddp under mpirun (NULL alone). */
TG_API tg_dist_ddp *tg_trainer_ddp(const tg_trainer *tr);

#ifdef __cplusplus
}
#endif
#endif
