/* The book's chapter-5 pretraining from C: the-verdict.txt split 90/10,
 * windows of 256 ids, GPT_CONFIG_124M (context 256), AdamW, ten epochs of
 * train_model_simple. Prints the book's loss table and samples, equal to
 * PyTorch's for seed 123 (tapegrad pretrain is the same run with options).
 *   pretrain DATA_DIR [small [EPOCHS]]   (DATA_DIR holds the-verdict.txt and
 *                                         gpt2/; small: a 2-layer model for 2
 *                                         epochs, or EPOCHS)
 * Data parallel, the same table: mpirun -np 2 pretrain DATA_DIR. Every rank
 * runs this program; tg_dist_ddp averages the gradients of the ranks'
 * slices of each batch, rank 0 prints (include/tapegrad/dist.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

static tg_tokenizer *tok;
static int64_t start[64], n_start, sample_tokens;

/* generate_and_print_sample after each epoch: greedy, in eval mode,
 * newlines as spaces; rank 0 alone (generation draws nothing) */
static int sample(tg_trainer *tr, int64_t epoch, void *model)
{
    (void)epoch;
    if (!tg_trainer_is_lead(tr)) return TG_OK;
    int64_t out[64 + 50], n_out;
    char *text;
    size_t len;
    tg_generate_options g = {.max_new_tokens = sample_tokens, .eos_id = -1};
    if (tg_gpt_generate(model, start, n_start, &g, out, &n_out) != TG_OK ||
        tg_tokenizer_decode_text(tok, out, (size_t)n_out, &text, &len) != TG_OK)
        return TG_EINVAL;
    for (size_t i = 0; i < len; i++) text[i] = text[i] == '\n' ? ' ' : text[i];
    int st = tg_trainer_printf(tr, "%s", text);
    free(text);
    return st;
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
    const char *dir = argc > 1 ? argv[1] : "data";
    int small = argc > 2 && strcmp(argv[2], "small") == 0;
    int64_t epochs = small ? 2 : 10, batch = 2;
    if (small && argc > 3) {
        char *end;
        epochs = strtoll(argv[3], &end, 10);
        if (*end || epochs < 1) {
            fprintf(stderr, "pretrain: EPOCHS must be a positive integer, not '%s'\n", argv[3]);
            return 2;
        }
    }
    sample_tokens = small ? 20 : 50;
    tg_gpt_config cfg;
    tg_gpt_config_preset("gpt2-small", &cfg);
    cfg.context_length = 256;
    if (small) cfg.context_length = 64, cfg.emb_dim = 32, cfg.n_heads = 2, cfg.n_layers = 2;

    char vocab[4096];
    snprintf(vocab, sizeof vocab, "%s/gpt2", dir);
    tok = tg_tokenizer_load_dir(vocab);
    size_t len, cut, n[2] = {0, 0};
    char *text = tok ? read_file(dir, "the-verdict.txt", &len) : NULL;
    int64_t *ids[2] = {NULL, NULL};
    tg_text_dataset *ds[2] = {NULL, NULL};
    tg_loader *loader[2] = {NULL, NULL};
    tg_tape *model_tape = tg_tape_new();
    tg_trainer *tr = NULL;
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
    int64_t *s;
    size_t ns;
    const char *start_text = "Every effort moves you";
    if (tg_tokenizer_encode(tok, start_text, strlen(start_text), &s, &ns) != TG_OK) goto done;
    n_start = (int64_t)(ns < 64 ? ns : 64);
    memcpy(start, s, sizeof *s * (size_t)n_start);
    free(s);

    tg_manual_seed(123);
    tg_module *model = tg_gpt_new(model_tape, &cfg);
    if (!model || tg_module_set_fused(model, true) != TG_OK) goto done;
    tg_optimizer *opt = tg_adamw_new(model_tape, model, (tg_adam_options){4e-4, {0.9, 0.999}, 1e-8, 0.1, false});
    /* train_model_simple: calc_loss_batch is the language-model loss (tg_loss_lm); a
     * collective under mpirun: every rank makes its trainer */
    if (!opt || !(tr = tg_trainer_new(&(tg_trainer_options){
                      .model = model, .optimizer = opt, .train = {.loader = loader[0]}, .val = {.loader = loader[1]},
                      .loss = tg_loss_lm, .task = model, .epochs = epochs, .eval_freq = 5, .eval_iter = 5,
                      .count_tokens = true, .on_epoch_end = sample})))
        goto done;
    ok = tg_trainer_fit(tr) == TG_OK;
done:
    if (!ok && *tg_last_error()) fprintf(stderr, "pretrain (rank %d): %s\n", tg_dist_rank(), tg_last_error());
    if (!ok && tg_dist_size() > 1) tg_dist_abort(1); /* the other ranks may be waiting in a collective */
    tg_trainer_free(tr);
    for (int k = 0; k < 2; k++) tg_loader_free(loader[k]), tg_text_dataset_free(ds[k]), free(ids[k]);
    free(text);
    tg_tokenizer_free(tok);
    tg_tape_free(model_tape);
    tg_dist_finalize();
    return ok ? 0 : 1;
}
