/* The book's chapter 6 from C: a GPTModel becomes a two-class classifier
 * (a new out_head; the last block, final norm and head trainable) trained
 * by the library's trainer on a "Label,Text" CSV set, as
 * train_classifier_simple trains it. With the settings of the committed
 * PyTorch run "classify" (tests/ref/finetune.json), it prints what the
 * book's code prints for them under PyTorch 1.13.
 *   classify DATA_DIR TRAIN.csv VAL.csv TEST.csv   (DATA_DIR holds gpt2/) */
#include <stdio.h>
#include <tapegrad.h>

static const tg_gpt_config cfg = {50257, 128, 32, 2, 2, 0.0, false}; /* vocab, context, emb, heads, layers */
static const int64_t epochs = 3, eval_freq = 2, eval_iter = 2, batch = 8, seed = 123;
static tg_data set[3]; /* train, val, test: a loader and the CSV rows it batches */

/* After each epoch: the accuracy of eval_iter batches of each loader. */
static int epoch_end(tg_trainer *tr, int64_t epoch, void *task)
{
    (void)epoch, (void)task;
    double train, val;
    if (tg_trainer_accuracy(tr, &set[0], eval_iter, &train) || tg_trainer_accuracy(tr, &set[1], eval_iter, &val))
        return TG_EINVAL;
    return tg_trainer_printf(tr, "Training accuracy: %.2f%% | Validation accuracy: %.2f%%", train * 100, val * 100);
}

/* After training: the accuracy of the whole loaders. */
static int train_end(tg_trainer *tr, void *task)
{
    (void)task;
    const char *name[3] = {"Training", "Validation", "Test"};
    double acc;
    for (int k = 0; k < 3; k++)
        if (tg_trainer_accuracy(tr, &set[k], 0, &acc) || tg_trainer_printf(tr, "%s accuracy: %.2f%%", name[k], acc * 100))
            return TG_EINVAL;
    return TG_OK;
}

int main(int argc, char **argv)
{
    if (argc < 5) return fprintf(stderr, "usage: classify DATA_DIR TRAIN.csv VAL.csv TEST.csv\n"), 2;
    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s/gpt2", argv[1]);
    tg_tokenizer *tok = tg_tokenizer_load_dir(vocab);
    tg_tape *tp = tg_tape_new();
    tg_class_dataset *ds[3] = {NULL, NULL, NULL};
    /* SpamDataset: the training set's longest text sets every set's length */
    int64_t max_length = 0;
    for (int k = 0; tok && k < 3; k++) {
        if (!(ds[k] = tg_class_dataset_load(argv[2 + k], tok, max_length, 50256))) break;
        max_length = tg_class_dataset_max_length(ds[0]);
        tg_loader *l = tg_loader_new(tg_class_dataset_len(ds[k]), (tg_loader_options){batch, k == 0, k == 0, NULL});
        set[k] = (tg_data){l, tg_class_batch, ds[k]};
    }
    /* manual_seed; GPTModel; manual_seed; out_head = Linear(emb, 2); freeze;
     * trf_blocks[-1], final_norm and out_head trainable; manual_seed; AdamW */
    tg_manual_seed(seed);
    tg_module *model = ds[2] ? tg_gpt_new(tp, &cfg) : NULL;
    tg_optimizer *opt = NULL;
    if (model && tg_gpt_prepare_finetune(tp, model, 2, seed, 0, 0) == TG_OK) {
        tg_manual_seed(seed);
        opt = tg_adamw_new(tp, model, (tg_adam_options){5e-4, {0.9, 0.999}, 1e-8, 0.1, false});
    }
    /* train_classifier_simple: the loss of logits[:, -1, :] (tg_loss_last) */
    tg_trainer *tr = !opt ? NULL
                          : tg_trainer_new(&(tg_trainer_options){
                                .model = model, .optimizer = opt, .train = set[0], .val = set[1],
                                .loss = tg_loss_last, .epochs = epochs, .eval_freq = eval_freq,
                                .eval_iter = eval_iter, .on_epoch_end = epoch_end, .on_train_end = train_end});
    int ok = tr && tg_trainer_fit(tr) == TG_OK;
    if (!ok) fprintf(stderr, "classify: %s\n", tg_last_error());
    else fprintf(stderr, "%lld trainable parameters\n", (long long)tg_module_num_trainable_parameters(model));
    tg_trainer_free(tr);
    for (int k = 0; k < 3; k++) tg_loader_free(set[k].loader), tg_class_dataset_free(ds[k]);
    tg_tokenizer_free(tok);
    tg_tape_free(tp);
    return ok ? 0 : 1;
}
