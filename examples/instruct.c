/* The book's chapter 7 from C: instruction fine-tuning. The entries are
 * split 85/10/5, formatted as format_input + "### Response:", batched by
 * custom_collate_fn and trained by the library's trainer as train_model_simple
 * trains; a greedy sample of the first validation prompt after each epoch,
 * then each test entry's response. With the settings of the committed PyTorch run "instruct"
 * (tests/ref/finetune.json) it prints what the book's code prints for them.
 *   instruct DATA_DIR DATA.json   (DATA_DIR holds gpt2/) */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

static const tg_gpt_config cfg = {50257, 256, 32, 2, 2, 0.0, false}; /* vocab, context, emb, heads, layers */
static const int64_t limit = 40, epochs = 2, eval_freq = 2, eval_iter = 2, batch = 8, allowed = 256, seed = 123;
static tg_instruction_data *data;
static tg_tokenizer *tok;
static int64_t cnt[3], begin[3]; /* train, test, val */

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

/* generate_and_print_sample after each epoch: 50 greedy ids, newlines as spaces */
static int epoch_end(tg_trainer *tr, int64_t epoch, void *model)
{
    (void)epoch;
    size_t plen;
    char *sample = respond(model, tok, tg_instruction_data_get(data, begin[2]), 50, -1, &plen);
    for (char *c = sample; c && *c; c++)
        if (*c == '\n') *c = ' ';
    int st = sample ? tg_trainer_printf(tr, "%s", sample) : TG_EINVAL;
    free(sample);
    return st;
}

/* After training: the test entries' responses */
static int train_end(tg_trainer *tr, void *model)
{
    for (int64_t i = 0; i < cnt[1]; i++) {
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
        int st = tg_trainer_printf(tr, "%s\n\nCorrect response:\n>> %s\n\nModel response:\n>> %s\n"
                                       "-------------------------------------",
                                   prompt, e->output, r ? r : "");
        free(text);
        free(prompt);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

int main(int argc, char **argv)
{
    if (argc < 3) return fprintf(stderr, "usage: instruct DATA_DIR DATA.json\n"), 2;
    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s/gpt2", argv[1]);
    tok = tg_tokenizer_load_dir(vocab);
    data = tok ? tg_instruction_data_load(argv[2]) : NULL;
    int64_t n = data ? tg_instruction_data_len(data) : 0;
    if (n > limit) n = limit;
    if (!data || tg_instruction_split(n, &cnt[0], &cnt[1], &cnt[2]) != TG_OK) {
        fprintf(stderr, "instruct: %s\n", tg_last_error());
        return 1;
    }
    begin[0] = 0, begin[1] = cnt[0], begin[2] = cnt[0] + cnt[1];
    /* InstructionDataset, custom_collate_fn (pad 50256, -100, allowed_max_length) and a loader for each part */
    tg_instruction_dataset *ds[3];
    tg_instruction_batches collate[3];
    tg_data set[3];
    for (int k = 0; k < 3; k++) {
        ds[k] = tg_instruction_dataset_new(data, begin[k], begin[k] + cnt[k], tok);
        collate[k] = (tg_instruction_batches){ds[k], 50256, TG_IGNORE_INDEX, allowed};
        set[k] = (tg_data){tg_loader_new(cnt[k], (tg_loader_options){batch, k == 0, k == 0, NULL}),
                           tg_instruction_batch, &collate[k]};
    }
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(seed); /* model = GPTModel(cfg); optimizer = AdamW(...); manual_seed */
    tg_module *model = tg_gpt_new(tp, &cfg);
    tg_optimizer *opt = model ? tg_adamw_new(tp, model, (tg_adam_options){5e-4, {0.9, 0.999}, 1e-8, 0.1, false}) : NULL;
    tg_manual_seed(seed);
    /* train_model_simple: calc_loss_batch is the language-model loss (tg_loss_lm) */
    tg_trainer *tr = !opt ? NULL
                          : tg_trainer_new(&(tg_trainer_options){
                                .model = model, .optimizer = opt, .train = set[0], .val = set[2],
                                .loss = tg_loss_lm, .task = model, .epochs = epochs, .eval_freq = eval_freq,
                                .eval_iter = eval_iter, .count_tokens = true, .on_epoch_end = epoch_end,
                                .on_train_end = train_end});
    int ok = tr && tg_trainer_fit(tr) == TG_OK;
    if (!ok) fprintf(stderr, "instruct: %s\n", tg_last_error());
    tg_trainer_free(tr);
    for (int k = 0; k < 3; k++) tg_loader_free(set[k].loader), tg_instruction_dataset_free(ds[k]);
    tg_instruction_data_free(data);
    tg_tokenizer_free(tok);
    tg_tape_free(tp);
    return ok ? 0 : 1;
}
