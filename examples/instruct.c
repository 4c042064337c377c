/* The book's chapter 7 from C: instruction fine-tuning. The entries are
 * split 85/10/5, formatted as format_input + "### Response:", batched by
 * custom_collate_fn and trained with train_model_simple; a greedy sample of
 * the first validation prompt after each epoch, then each test entry's
 * response. With the settings of the committed PyTorch run "instruct"
 * (tests/ref/finetune.json) it prints what the book's code prints for them.
 *   instruct DATA_DIR DATA.json   (DATA_DIR holds gpt2/) */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

static const tg_gpt_config cfg = {50257, 256, 32, 2, 2, 0.0, false}; /* vocab, context, emb, heads, layers */
static const int64_t limit = 40, epochs = 2, eval_freq = 2, eval_iter = 2, batch = 8, allowed = 256, seed = 123;
static tg_instruction_dataset *ds[3]; /* train, test, val */
static tg_loader *loader[3];
static tg_tape *step;

/* calc_loss_batch: cross_entropy(logits.flatten(0, 1), targets.flatten()), -100 ignored */
static tg_tensor *loss_batch(tg_module *model, int k, const int64_t *idx, int64_t count)
{
    tg_tensor *x, *y;
    if (tg_instruction_dataset_batch(ds[k], step, idx, count, 50256, TG_IGNORE_INDEX, allowed, &x, &y) != TG_OK)
        return NULL;
    tg_tensor *logits = tg_module_forward(step, model, x);
    int64_t flat[2] = {-1, cfg.vocab_size}, n = -1;
    return tg_cross_entropy(step, tg_view(step, logits, 2, flat), tg_view(step, y, 1, &n), TG_REDUCE_MEAN);
}

/* calc_loss_loader over the first eval_iter batches */
static double loss_loader(tg_module *model, int k)
{
    int64_t idx[8], count, n = tg_loader_len(loader[k]) < eval_iter ? tg_loader_len(loader[k]) : eval_iter;
    tg_loader_iter *it = tg_loader_iter_new(loader[k]);
    double total = 0;
    for (int64_t i = 0; i < n && tg_loader_iter_next_indices(it, idx, &count) == 1; i++) {
        total += tg_item(loss_batch(model, k, idx, count));
        tg_tape_reset(step);
    }
    tg_loader_iter_free(it);
    return total / (double)n;
}

/* The greedy continuation of entry e's prompt (eos: stop at <|endoftext|>), decoded. */
static char *respond(tg_module *model, tg_tokenizer *tok, const tg_instruction *e, int64_t max_new, int64_t eos,
                     size_t *prompt_len)
{
    char *prompt = tg_format_input(e), *text = NULL;
    int64_t *ids = NULL, out[1024], n_out = 0;
    size_t n = 0, len;
    tg_generate_options o = {.max_new_tokens = max_new, .eos_id = eos};
    if (prompt && tg_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n) == TG_OK && n + max_new <= 1024)
        if (tg_gpt_generate(model, ids, (int64_t)n, &o, out, &n_out) == TG_OK)
            tg_tokenizer_decode_text(tok, out, (size_t)n_out, &text, &len);
    *prompt_len = prompt ? strlen(prompt) : 0;
    free(prompt);
    free(ids);
    return text;
}

int main(int argc, char **argv)
{
    if (argc < 3) return fprintf(stderr, "usage: instruct DATA_DIR DATA.json\n"), 2;
    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s/gpt2", argv[1]);
    tg_tokenizer *tok = tg_tokenizer_load_dir(vocab);
    tg_instruction_data *data = tok ? tg_instruction_data_load(argv[2]) : NULL;
    int64_t n = data ? tg_instruction_data_len(data) : 0, cnt[3], begin[3];
    if (n > limit) n = limit;
    if (!data || tg_instruction_split(n, &cnt[0], &cnt[1], &cnt[2]) != TG_OK) {
        fprintf(stderr, "instruct: %s\n", tg_last_error());
        return 1;
    }
    begin[0] = 0, begin[1] = cnt[0], begin[2] = cnt[0] + cnt[1];
    for (int k = 0; k < 3; k++) {
        ds[k] = tg_instruction_dataset_new(data, begin[k], begin[k] + cnt[k], tok);
        loader[k] = tg_loader_new(cnt[k], (tg_loader_options){batch, k == 0, k == 0, NULL});
    }
    tg_tape *tp = tg_tape_new();
    step = tg_tape_new();
    tg_manual_seed(seed); /* model = GPTModel(cfg); optimizer = AdamW(...); manual_seed */
    tg_module *model = tg_gpt_new(tp, &cfg);
    tg_optimizer *opt = model ? tg_adamw_new(tp, model, (tg_adam_options){5e-4, {0.9, 0.999}, 1e-8, 0.1, false}) : NULL;
    tg_manual_seed(seed);
    if (!opt) return fprintf(stderr, "instruct: %s\n", tg_last_error()), 1;

    int64_t global_step = -1, idx[8], count;
    for (int64_t epoch = 0; epoch < epochs; epoch++) { /* train_model_simple */
        tg_module_train(model, true);
        tg_loader_iter *it = tg_loader_iter_new(loader[0]);
        while (tg_loader_iter_next_indices(it, idx, &count) == 1) {
            tg_optimizer_zero_grad(opt);
            tg_tensor *loss = loss_batch(model, 0, idx, count);
            if (!loss || tg_backward(loss, NULL, false) != TG_OK || tg_optimizer_step(opt) != TG_OK)
                return fprintf(stderr, "instruct: %s\n", tg_last_error()), 1;
            tg_tape_reset(step);
            if (++global_step % eval_freq == 0) { /* evaluate_model */
                tg_module_train(model, false);
                bool grad = tg_set_grad_enabled(false);
                double train_loss = loss_loader(model, 0), val_loss = loss_loader(model, 2);
                tg_set_grad_enabled(grad);
                tg_module_train(model, true);
                printf("Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f\n", (long long)epoch + 1,
                       (long long)global_step, train_loss, val_loss);
            }
        }
        tg_loader_iter_free(it);
        size_t plen; /* generate_and_print_sample: 50 greedy ids, newlines as spaces */
        char *sample = respond(model, tok, tg_instruction_data_get(data, begin[2]), 50, -1, &plen);
        for (char *c = sample; c && *c; c++)
            if (*c == '\n') *c = ' ';
        printf("%s\n", sample ? sample : "");
        free(sample);
    }
    for (int64_t i = 0; i < cnt[1]; i++) { /* the test entries' responses */
        const tg_instruction *e = tg_instruction_data_get(data, begin[1] + i);
        size_t plen;
        char *text = respond(model, tok, e, 20, 50256, &plen), *prompt = tg_format_input(e);
        /* generated_text[len(input_text):].replace("### Response:", "").strip() */
        char *r = text ? text + plen : NULL, *w = r;
        for (char *c = r; c && *c;)
            if (strncmp(c, "### Response:", 13) == 0) c += 13;
            else *w++ = *c++;
        if (w) *w = '\0';
        while (r && isspace((unsigned char)*r)) r++;
        while (w && w > r && isspace((unsigned char)w[-1])) *--w = '\0';
        printf("%s\n\nCorrect response:\n>> %s\n\nModel response:\n>> %s\n-------------------------------------\n",
               prompt, e->output, r ? r : "");
        free(text);
        free(prompt);
    }
    for (int k = 0; k < 3; k++) tg_loader_free(loader[k]), tg_instruction_dataset_free(ds[k]);
    tg_instruction_data_free(data);
    tg_tokenizer_free(tok);
    tg_tape_free(step);
    tg_tape_free(tp);
    return 0;
}
