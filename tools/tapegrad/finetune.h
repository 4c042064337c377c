/* tapegrad finetune's task (tools/tapegrad/cmd_finetune.c wires it to the
 * library's trainer): the run's settings and data, and the book's lines
 * after each epoch and after training (tools/tapegrad/finetune_task.c). */
#ifndef TAPEGRAD_FINETUNE_H
#define TAPEGRAD_FINETUNE_H

#include "cli.h"

typedef struct {
    bool instruct, dpo; /* finetune instruct, finetune dpo (else classify) */
    const char *cmd;
    const char *train, *val, *test, *data, *init, *hf, *tokenizer, *format, *reference;
    int64_t max_length, limit, allowed_max, max_new, epochs, batch, eval_freq, eval_iter, lora_rank;
    double lr, weight_decay, lora_alpha, beta;
    bool max_length_seen, limit_seen, lora_rank_seen, lora_alpha_seen, composed;
    bool chat; /* --format chat */
    tg_cli_train t;
} ft_args;

typedef struct {
    const ft_args *a;
    const char *cmd;
    tg_decoder_config cfg;
    uint64_t seed;
    tg_tokenizer *tok;
    int64_t pad_id; /* the tokenizer's <|endoftext|> (GPT-2's 50256, the book's): padding */
    int64_t end_id; /* the end of a response: pad_id, or with --format chat the end of a turn */
    tg_module *gpt;
    tg_optimizer *opt;
    tg_tape *model_tape;
    /* the sets: classify train, val, test; instruct train, val, test */
    tg_class_dataset *cls[3];
    tg_instruction_data *entries;
    tg_instruction_dataset *ins[3];
    tg_instruction_batches ib[3];
    /* dpo: the preference sets, their batches, the frozen reference model */
    tg_preference_dataset *pref[3];
    tg_preference_batches pb[3];
    tg_module *ref;
    tg_dpo_task dpo;
    int64_t ins_begin[3];
    tg_data set[3];
    uint64_t digest; /* of every set's ids: a checkpoint's data */
} ft_run;

enum { TRAIN = 0, VAL = 1, TEST = 2 };

/* The trainer's callbacks (task: the ft_run): chapter 7's sample after
 * each epoch and the test entries' responses; chapter 6's accuracies after
 * each epoch and over the whole sets after training. */
int tg_ft_instruct_epoch_end(tg_trainer *tr, int64_t epoch, void *task);
int tg_ft_instruct_end(tg_trainer *tr, void *task);
int tg_ft_classify_epoch_end(tg_trainer *tr, int64_t epoch, void *task);
int tg_ft_classify_end(tg_trainer *tr, void *task);
/* DPO (task: the ft_run): the losses and reward margins before training,
 * the notebook's rows, the sample after each epoch (the third validation
 * entry's prompt), and the reference's and the policy's responses to the
 * first three validation entries; the reward columns (tg_dpo_columns on
 * the run's tg_dpo_task). */
int tg_ft_dpo_begin(tg_trainer *tr, void *task);
int tg_ft_dpo_row(tg_trainer *tr, const tg_train_row *row, void *task);
int tg_ft_dpo_epoch_end(tg_trainer *tr, int64_t epoch, void *task);
int tg_ft_dpo_end(tg_trainer *tr, void *task);
int tg_ft_dpo_columns(void *task, double *values);
tg_tensor *tg_ft_dpo_loss(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, double *weight);
/* --json's line; --plot's loss plot and the classifier's accuracy plot. */
int tg_ft_json(const ft_run *r, const tg_trainer *tr);
int tg_ft_write_plots(const ft_run *r, const tg_trainer *tr, const char *path);
/* The second plot's path for --plot path and a suffix ("loss.svg" and
 * "-accuracy" -> "loss-accuracy.svg"), malloc'd; NULL when out of memory. */
char *tg_ft_accuracy_plot_path(const char *path, const char *suffix);

#endif
