/* The book's chapter 6 from C: a GPTModel becomes a two-class classifier
 * (a new out_head; the last block, final norm and head trainable) trained
 * with train_classifier_simple on a "Label,Text" CSV set. With the settings
 * of the committed PyTorch run "classify" (tests/ref/finetune.json), it
 * prints what the book's code prints for them under PyTorch 1.13.
 *   classify DATA_DIR TRAIN.csv VAL.csv TEST.csv   (DATA_DIR holds gpt2/) */
#include <stdio.h>
#include <tapegrad.h>

static const tg_gpt_config cfg = {50257, 128, 32, 2, 2, 0.0, false}; /* vocab, context, emb, heads, layers */
static const int64_t epochs = 3, eval_freq = 2, eval_iter = 2, batch = 8, seed = 123;
static tg_class_dataset *ds[3];             /* train, val, test */
static tg_loader *loader[3];
static tg_tape *step;                       /* one batch's activations */

/* One pass over up to n batches of set k (n 0: all): the mean loss, or with
 * acc the share of rows whose argmax of logits[:, -1, :] is the label. */
static double pass(tg_module *model, int k, int64_t n, int acc)
{
    int64_t idx[8], count, len = tg_loader_len(loader[k]), correct = 0, rows = 0;
    if (n == 0 || n > len) n = len;
    tg_loader_iter *it = tg_loader_iter_new(loader[k]); /* draws as iter(DataLoader) */
    double total = 0;
    for (int64_t i = 0; i < n && tg_loader_iter_next_indices(it, idx, &count) == 1; i++) {
        tg_tensor *x, *y;
        tg_class_dataset_batch(ds[k], step, idx, count, &x, &y);
        tg_tensor *logits = tg_gpt_forward_last(step, model, x); /* model(x)[:, -1, :] */
        if (acc) {
            const int64_t *p = tg_data_ptr(tg_argmax(step, logits, -1, false)), *l = tg_data_ptr(y);
            for (int64_t j = 0; j < count; j++) correct += p[j] == l[j];
            rows += count;
        } else {
            total += tg_item(tg_cross_entropy(step, logits, y, TG_REDUCE_MEAN));
        }
        tg_tape_reset(step);
    }
    tg_loader_iter_free(it);
    return acc ? (double)correct / (double)rows : total / (double)n;
}

/* calc_accuracy_loader: eval mode (left so, as the book's), no grad */
static double accuracy(tg_module *model, int k, int64_t n)
{
    tg_module_train(model, false);
    bool grad = tg_set_grad_enabled(false);
    double a = pass(model, k, n, 1);
    tg_set_grad_enabled(grad);
    return a;
}

int main(int argc, char **argv)
{
    if (argc < 5) return fprintf(stderr, "usage: classify DATA_DIR TRAIN.csv VAL.csv TEST.csv\n"), 2;
    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s/gpt2", argv[1]);
    tg_tokenizer *tok = tg_tokenizer_load_dir(vocab);
    tg_tape *tp = tg_tape_new();
    step = tg_tape_new();
    /* SpamDataset: the training set's longest text sets every set's length */
    int64_t max_length = 0;
    for (int k = 0; tok && k < 3; k++) {
        if (!(ds[k] = tg_class_dataset_load(argv[2 + k], tok, max_length, 50256))) break;
        max_length = tg_class_dataset_max_length(ds[0]);
        loader[k] = tg_loader_new(tg_class_dataset_len(ds[k]), (tg_loader_options){batch, k == 0, k == 0, NULL});
    }
    /* manual_seed; GPTModel; manual_seed; out_head = Linear(emb, 2); freeze;
     * trf_blocks[-1], final_norm and out_head trainable; manual_seed; AdamW */
    tg_manual_seed(seed);
    tg_module *model = ds[2] ? tg_gpt_new(tp, &cfg) : NULL;
    tg_manual_seed(seed);
    if (!model || tg_module_add_module(model, "out_head", tg_linear_new(tp, cfg.emb_dim, 2, true)) != TG_OK ||
        tg_module_requires_grad_(model, false) != TG_OK ||
        tg_module_requires_grad_(tg_module_get_submodule(model, "trf_blocks.1"), true) != TG_OK ||
        tg_module_requires_grad_(tg_module_get_submodule(model, "final_norm"), true) != TG_OK ||
        tg_module_requires_grad_(tg_module_get_submodule(model, "out_head"), true) != TG_OK) {
        fprintf(stderr, "classify: %s\n", tg_last_error());
        return 1;
    }
    tg_manual_seed(seed);
    tg_optimizer *opt = tg_adamw_new(tp, model, (tg_adam_options){5e-4, {0.9, 0.999}, 1e-8, 0.1, false});

    int64_t examples_seen = 0, global_step = -1, idx[8], count;
    for (int64_t epoch = 0; opt && epoch < epochs; epoch++) { /* train_classifier_simple */
        tg_module_train(model, true);
        tg_loader_iter *it = tg_loader_iter_new(loader[0]);
        while (tg_loader_iter_next_indices(it, idx, &count) == 1) {
            tg_tensor *x, *y;
            tg_optimizer_zero_grad(opt);
            tg_class_dataset_batch(ds[0], step, idx, count, &x, &y);
            tg_backward(tg_cross_entropy(step, tg_gpt_forward_last(step, model, x), y, TG_REDUCE_MEAN), NULL, false);
            tg_optimizer_step(opt);
            tg_tape_reset(step);
            examples_seen += count;
            if (++global_step % eval_freq == 0) { /* evaluate_model */
                tg_module_train(model, false);
                bool grad = tg_set_grad_enabled(false);
                double train_loss = pass(model, 0, eval_iter, 0), val_loss = pass(model, 1, eval_iter, 0);
                tg_set_grad_enabled(grad);
                tg_module_train(model, true);
                printf("Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f\n", (long long)epoch + 1,
                       (long long)global_step, train_loss, val_loss);
            }
        }
        tg_loader_iter_free(it);
        double train_acc = accuracy(model, 0, eval_iter), val_acc = accuracy(model, 1, eval_iter);
        printf("Training accuracy: %.2f%% | Validation accuracy: %.2f%%\n", train_acc * 100, val_acc * 100);
    }
    printf("Training accuracy: %.2f%%\n", accuracy(model, 0, 0) * 100);
    printf("Validation accuracy: %.2f%%\n", accuracy(model, 1, 0) * 100);
    printf("Test accuracy: %.2f%%\n", accuracy(model, 2, 0) * 100);
    fprintf(stderr, "%lld examples seen, %lld trainable parameters\n", (long long)examples_seen,
            (long long)tg_module_num_trainable_parameters(model));
    for (int k = 0; k < 3; k++) tg_loader_free(loader[k]), tg_class_dataset_free(ds[k]);
    tg_tokenizer_free(tok);
    tg_tape_free(step);
    tg_tape_free(tp);
    return opt ? 0 : 1;
}
