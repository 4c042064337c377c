/* The book's chapter-5 pretraining from C: the-verdict.txt split 90/10,
 * windows of 256 ids, GPT_CONFIG_124M (context 256), AdamW, ten epochs of
 * train_model_simple. Prints the book's loss table and samples, equal to
 * PyTorch's for seed 123 (tapegrad pretrain is the same run with options).
 *   pretrain DATA_DIR [small]   (DATA_DIR holds the-verdict.txt and gpt2/;
 *                                small: a 2-layer model for 2 epochs)
 * Data parallel, the same table: mpirun -np 2 pretrain DATA_DIR. Every rank
 * runs this program; tg_dist_ddp averages the gradients of the ranks'
 * slices of each batch, rank 0 prints (include/tapegrad/dist.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

static tg_tape *step; /* one batch's activations, reset after each */
static int rank, size;

/* calc_loss_batch: cross_entropy(logits.flatten(0, 1), targets.flatten()) */
static tg_tensor *loss_batch(tg_module *model, tg_tensor *x, tg_tensor *y)
{
    tg_tensor *logits = tg_module_forward(step, model, x);
    if (!logits) return NULL;
    int64_t flat[2] = {-1, logits->shape[2]}, n = -1;
    return tg_cross_entropy(step, tg_view(step, logits, 2, flat), tg_view(step, y, 1, &n), TG_REDUCE_MEAN);
}

/* calc_loss_loader: the mean loss of the first num_batches batches, each
 * rank taking its slice of every batch (the validation batch of 2 too) */
static double loss_loader(tg_module *model, const tg_loader *loader, int64_t num_batches)
{
    if (num_batches > tg_loader_len(loader)) num_batches = tg_loader_len(loader);
    tg_loader_iter *it = tg_loader_iter_new(loader); /* draws as iter(DataLoader) */
    double total = 0;
    tg_tensor *x, *y;
    for (int64_t i = 0; i < num_batches; i++) {
        if (tg_loader_iter_next(it, step, &x, &y) != 1) total = NAN;
        else total += tg_item(loss_batch(model, tg_dist_batch_slice(step, x), tg_dist_batch_slice(step, y))) / size;
        tg_tape_reset(step);
    }
    tg_loader_iter_free(it);
    tg_dist_all_reduce_f64(&total, 1, TG_DIST_SUM);
    return total / (double)num_batches;
}

static char *read_file(const char *dir, const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc(1 << 20) : NULL; /* the-verdict.txt is 20 KB */
    *len = buf ? fread(buf, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    if (!buf) tg_error("cannot read %s", path);
    return buf;
}

int main(int argc, char **argv)
{
    if (tg_dist_init(&argc, &argv) != TG_OK) {
        fprintf(stderr, "pretrain: %s\n", tg_last_error());
        return 1;
    }
    rank = tg_dist_rank(), size = tg_dist_size();
    const char *dir = argc > 1 ? argv[1] : "data";
    int small = argc > 2 && strcmp(argv[2], "small") == 0;
    int64_t epochs = small ? 2 : 10, eval_freq = 5, eval_iter = 5, batch = 2, sample_tokens = small ? 20 : 50;
    tg_gpt_config cfg;
    tg_gpt_config_preset("gpt2-small", &cfg);
    cfg.context_length = 256;
    if (small) cfg.context_length = 64, cfg.emb_dim = 32, cfg.n_heads = 2, cfg.n_layers = 2;

    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s/gpt2", dir);
    tg_tokenizer *tok = tg_tokenizer_load_dir(vocab);
    size_t len, cut, n[2] = {0, 0};
    char *text = tok ? read_file(dir, "the-verdict.txt", &len) : NULL;
    int64_t *ids[2] = {NULL, NULL};
    tg_text_dataset *ds[2] = {NULL, NULL};
    tg_loader *loader[2] = {NULL, NULL};
    tg_tape *model_tape = tg_tape_new();
    tg_dist_ddp *ddp = NULL;
    step = tg_tape_new();
    int ok = 0;
    /* train_data = text[:split_idx]; val_data = text[split_idx:]; each cut into windows */
    if (!text || tg_text_split(text, len, 0.9, &cut) != TG_OK) goto done;
    for (int k = 0; k < 2; k++) {
        if (tg_tokenizer_encode(tok, k ? text + cut : text, k ? len - cut : cut, &ids[k], &n[k]) != TG_OK) goto done;
        ds[k] = tg_text_dataset_new(ids[k], (int64_t)n[k], cfg.context_length, cfg.context_length);
        /* the train loader shuffles and drops a short last batch; validation keeps order */
        loader[k] = tg_text_loader_new(ds[k], (tg_loader_options){batch, !k, !k, NULL});
        if (!loader[k]) goto done;
    }

    tg_manual_seed(123);
    tg_module *model = tg_gpt_new(model_tape, &cfg);
    if (!model || tg_module_set_fused(model, true) != TG_OK) goto done;
    tg_optimizer *opt = tg_adamw_new(model_tape, model, (tg_adam_options){4e-4, {0.9, 0.999}, 1e-8, 0.1, false});
    if (!opt || !(ddp = tg_dist_ddp_new(model, (tg_dist_ddp_options){0}))) goto done;
    int64_t start[64], out[64 + 50], n_out, global_step = -1;
    size_t n_start;
    int64_t *s;
    const char *start_text = "Every effort moves you";
    if (tg_tokenizer_encode(tok, start_text, strlen(start_text), &s, &n_start) != TG_OK) goto done;
    memcpy(start, s, sizeof *s * (n_start < 64 ? n_start : 64));
    free(s);

    for (int64_t epoch = 0; epoch < epochs; epoch++) {
        tg_module_train(model, true);
        tg_loader_iter *it = tg_loader_iter_new(loader[0]); /* for input_batch, target_batch in train_loader */
        tg_tensor *x, *y;
        int got;
        while ((got = tg_loader_iter_next(it, step, &x, &y)) == 1) {
            tg_optimizer_zero_grad(opt);
            tg_tensor *loss = loss_batch(model, tg_dist_batch_slice(step, x), tg_dist_batch_slice(step, y));
            if (!loss || tg_backward(loss, NULL, false) != TG_OK || tg_dist_ddp_sync(ddp) != TG_OK ||
                tg_optimizer_step(opt) != TG_OK)
                got = -1;
            tg_tape_reset(step);
            if (got < 0) break;
            if (++global_step % eval_freq == 0) { /* evaluate_model */
                tg_module_train(model, false);
                int grad = tg_set_grad_enabled(false);
                double train_loss = loss_loader(model, loader[0], eval_iter);
                double val_loss = loss_loader(model, loader[1], eval_iter);
                tg_set_grad_enabled(grad);
                tg_module_train(model, true);
                if (rank == 0)
                    printf("Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f\n", (long long)epoch + 1,
                           (long long)global_step, train_loss, val_loss);
            }
        }
        tg_loader_iter_free(it);
        if (got < 0) goto done;
        if (rank != 0) continue;
        /* generate_and_print_sample: greedy, in eval mode, newlines as spaces */
        tg_generate_options g = {.max_new_tokens = sample_tokens, .eos_id = -1};
        char *sample;
        size_t slen;
        if (tg_gpt_generate(model, start, (int64_t)n_start, &g, out, &n_out) != TG_OK ||
            tg_tokenizer_decode_text(tok, out, (size_t)n_out, &sample, &slen) != TG_OK)
            goto done;
        for (size_t i = 0; i < slen; i++) sample[i] = sample[i] == '\n' ? ' ' : sample[i];
        printf("%s\n", sample);
        free(sample);
        fflush(stdout);
    }
    ok = 1;
done:
    if (!ok) fprintf(stderr, "pretrain (rank %d): %s\n", rank, tg_last_error());
    if (!ok && size > 1) tg_dist_abort(1); /* the other ranks may be waiting in a collective */
    tg_dist_ddp_free(ddp);
    for (int k = 0; k < 2; k++) tg_loader_free(loader[k]), tg_text_dataset_free(ds[k]), free(ids[k]);
    free(text);
    tg_tokenizer_free(tok);
    tg_tape_free(step);
    tg_tape_free(model_tape);
    tg_dist_finalize();
    return ok ? 0 : 1;
}
