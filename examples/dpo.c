/* The book's DPO notebook (chapter 7's preference tuning) from C. The
 * preference entries are split 85/10/5, each becomes its prompt and the
 * prompt followed by "### Response:" and the chosen or the rejected answer,
 * the notebook's collate pads and masks them, and the library's trainer runs
 * train_model_dpo_simple: the policy (the model trained) and a frozen
 * reference (a copy of the starting weights) score both answers, the loss is
 * compute_dpo_loss's, and the table's rows carry the reward margins. Before
 * training the notebook's evaluation, after each epoch a greedy sample, and
 * after training the reference's and the policy's responses to the first
 * validation entries. With the settings of the committed PyTorch run "dpo"
 * (tests/ref/dpo.json) it prints what the notebook's code prints for them.
 *   dpo DATA_DIR   (DATA_DIR holds gpt2/ and preference/) */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

static const tg_gpt_config cfg = {50257, 256, 32, 2, 2, 0.0, false}; /* vocab, context, emb, heads, layers */
static const int64_t limit = 14, epochs = 2, eval_freq = 2, eval_iter = 1, batch = 4, allowed = 256, seed = 123;
static const int64_t max_new = 8;
static const double beta = 0.1, lr = 5e-4;
static tg_instruction_data *data;
static tg_tokenizer *tok;
static int64_t cnt[3], begin[3]; /* train, test, val */
static tg_module *policy, *reference;
static tg_dpo_task dpo;

/* Python's print(x) of the values printed here: the shortest digits that
 * read back as x (losses and margins print in fixed notation or as 1e-05). */
static const char *py_float(double x, char *buf, size_t n)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".en")) strncat(buf, ".0", n - strlen(buf) - 1);
    return buf;
}

/* The greedy continuation of entry e's prompt (eos: stop there), decoded,
 * and the prompt's length in it. */
static char *respond(tg_module *model, const tg_instruction *e, int64_t max_new_ids, int64_t eos, size_t *prompt_len)
{
    char *prompt = tg_format_input(e), *text = NULL;
    int64_t *ids = NULL, out[1024], n_out = 0;
    size_t n = 0, len;
    tg_generate_options o = {.max_new_tokens = max_new_ids, .eos_id = eos};
    if (prompt && tg_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n) == TG_OK && n + max_new_ids <= 1024)
        if (tg_gpt_generate(model, ids, (int64_t)n, &o, out, &n_out) == TG_OK)
            tg_tokenizer_decode_text(tok, out, (size_t)n_out, &text, &len);
    *prompt_len = prompt ? strlen(prompt) : 0;
    free(prompt);
    free(ids);
    return text;
}

/* generated_text[len(input_text):].replace("### Response:", "").strip(), in place */
static char *cut_response(char *text, size_t prompt_len)
{
    char *r = text + prompt_len, *w = r;
    for (char *c = r; *c;)
        if (strncmp(c, "### Response:", 13) == 0) c += 13;
        else *w++ = *c++;
    *w = '\0';
    while (isspace((unsigned char)*r)) r++;
    while (w > r && isspace((unsigned char)w[-1])) *--w = '\0';
    return r;
}

/* torch.manual_seed(123); evaluate_dpo_loss_loader; its four lines;
 * torch.manual_seed(123) again before training */
static int before(tg_trainer *tr, void *task)
{
    (void)task;
    tg_manual_seed(seed);
    tg_train_row w;
    int st = tg_trainer_evaluate(tr, &w);
    char a[4][40];
    if (st == TG_OK)
        st = tg_trainer_printf(tr, "Training loss: %s\nValidation loss: %s\nTrain reward margin: %s\n"
                                   "Val reward margin: %s",
                               py_float(w.train_loss, a[0], 40), py_float(w.val_loss, a[1], 40),
                               py_float(w.train_columns[0] - w.train_columns[1], a[2], 40),
                               py_float(w.val_columns[0] - w.val_columns[1], a[3], 40));
    tg_manual_seed(seed);
    return st;
}

static int row(tg_trainer *tr, const tg_train_row *w, void *task)
{
    (void)task;
    return tg_trainer_printf(tr,
                             "Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f, Train reward margins %.3f, "
                             "Val reward margins %.3f",
                             (long long)w->epoch, (long long)w->step, w->train_loss, w->val_loss,
                             w->train_columns[0] - w->train_columns[1], w->val_columns[0] - w->val_columns[1]);
}

/* generate_and_print_sample of the third validation entry's prompt (the
 * last one's when there are fewer): 50 greedy ids, newlines as spaces */
static int epoch_end(tg_trainer *tr, int64_t epoch, void *task)
{
    (void)epoch, (void)task;
    size_t plen;
    char *sample = respond(policy, tg_instruction_data_get(data, begin[2] + (cnt[2] > 2 ? 2 : cnt[2] - 1)), 50, -1, &plen);
    for (char *c = sample; c && *c; c++)
        if (*c == '\n') *c = ' ';
    int st = sample ? tg_trainer_printf(tr, "%s", sample) : TG_EINVAL;
    free(sample);
    return st;
}

/* torch.manual_seed(123); the reference's and the policy's responses to
 * the first three validation entries */
static int train_end(tg_trainer *tr, void *task)
{
    (void)task;
    tg_manual_seed(seed);
    for (int64_t i = 0; i < cnt[2] && i < 3; i++) {
        const tg_instruction *e = tg_instruction_data_get(data, begin[2] + i);
        size_t plen;
        char *ref = respond(reference, e, max_new, 50256, &plen), *pol = respond(policy, e, max_new, 50256, &plen);
        char *prompt = tg_format_input(e);
        int st = ref && pol && prompt
                     ? tg_trainer_printf(tr,
                                         "%s\n\nCorrect response:\n>> %s\n\nReference model response:\n>> %s\n\n"
                                         "Policy model response:\n>> %s\n\n-------------------------------------\n\n",
                                         prompt, e->output, cut_response(ref, plen), cut_response(pol, plen))
                     : TG_EINVAL;
        free(ref), free(pol), free(prompt);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) return fprintf(stderr, "usage: dpo DATA_DIR\n"), 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/gpt2", argv[1]);
    tok = tg_tokenizer_load_dir(path);
    snprintf(path, sizeof path, "%s/preference/instruction-data-with-preference.json", argv[1]);
    data = tok ? tg_preference_data_load(path) : NULL;
    int64_t n = data ? tg_instruction_data_len(data) : 0;
    if (n > limit) n = limit;
    if (!data || tg_instruction_split(n, &cnt[0], &cnt[1], &cnt[2]) != TG_OK) {
        fprintf(stderr, "dpo: %s\n", tg_last_error());
        return 1;
    }
    begin[0] = 0, begin[1] = cnt[0], begin[2] = cnt[0] + cnt[1];
    /* PreferenceDataset and the notebook's collate (pad 50256, the prompt
     * masked, allowed_max_length) for the training and validation parts */
    tg_preference_dataset *ds[3] = {NULL, NULL, NULL};
    tg_preference_batches collate[3];
    tg_data set[3];
    for (int k = 0; k < 3; k++) {
        ds[k] = tg_preference_dataset_new(data, begin[k], begin[k] + cnt[k], tok, TG_INSTRUCTION_ALPACA);
        collate[k] = (tg_preference_batches){ds[k], 50256, allowed, false};
        set[k] = (tg_data){tg_loader_new(cnt[k], (tg_loader_options){batch, k == 0, k == 0, NULL}),
                           tg_preference_batch, &collate[k]};
    }
    tg_tape *tp = tg_tape_new();
    /* torch.manual_seed(123); policy = GPTModel(cfg); the reference: the
     * same weights (built again from the same seed), frozen, in eval mode */
    tg_manual_seed(seed);
    policy = tg_gpt_new(tp, &cfg);
    tg_manual_seed(seed);
    reference = tg_gpt_new(tp, &cfg);
    if (reference) tg_module_requires_grad_(reference, false), tg_module_train(reference, false);
    tg_optimizer *opt = policy ? tg_adamw_new(tp, policy, (tg_adam_options){lr, {0.9, 0.999}, 1e-8, 0.01, false}) : NULL;
    dpo = (tg_dpo_task){.reference = reference, .beta = beta};
    /* train_model_dpo_simple: the loss is compute_dpo_loss_batch's, the
     * table's columns its chosen and rejected rewards */
    tg_trainer *tr = !opt || !reference ? NULL
                                        : tg_trainer_new(&(tg_trainer_options){
                                              .model = policy, .optimizer = opt, .train = set[0], .val = set[2],
                                              .loss = tg_loss_dpo, .task = &dpo, .n_columns = 2,
                                              .columns = tg_dpo_column_names(), .column_values = tg_dpo_columns,
                                              .epochs = epochs, .eval_freq = eval_freq, .eval_iter = eval_iter,
                                              .count_tokens = true, .on_train_begin = before, .print_row = row,
                                              .on_epoch_end = epoch_end, .on_train_end = train_end});
    int ok = tr && tg_trainer_fit(tr) == TG_OK;
    if (!ok) fprintf(stderr, "dpo: %s\n", tg_last_error());
    tg_trainer_free(tr);
    for (int k = 0; k < 3; k++) tg_loader_free(set[k].loader), tg_preference_dataset_free(ds[k]);
    tg_instruction_data_free(data);
    tg_tokenizer_free(tok);
    tg_tape_free(tp);
    return ok ? 0 : 1;
}
