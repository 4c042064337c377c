/* tapegrad pretrain: the book's chapter-5 run (train_model_simple) on a text,
 * printing the book's loss table and an epoch's greedy sample
 * (docs/pretraining.md). The command reads the text, builds the model and
 * names the task (the language-model loss, the sample after each epoch);
 * the library's trainer (include/tapegrad/train.h) trains, on one process
 * or, under mpirun, data parallel.
 *
 * Every random draw is PyTorch's, in PyTorch's order: the model is built
 * after manual_seed(seed); the loaders draw when an iteration starts (the
 * train loader again at each evaluation); dropout draws its masks during
 * the forward. So the table equals the one PyTorch prints for the same
 * arguments. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "pretrain"

static const char *help =
    "usage: tapegrad pretrain --text PATH [MODEL] [options]\n"
    "\n"
    "Pretrains the book's GPTModel on a UTF-8 text as chapter 5 does: the text is\n"
    "cut at code point int(ratio * len) into a training and a validation part,\n"
    "each tokenized and cut into windows; AdamW; every --eval-freq steps the mean\n"
    "loss of the first --eval-iter batches of each loader; after each epoch a\n"
    "greedy sample from --start. Prints the book's lines; a progress line on\n"
    "stderr when it is a terminal.\n"
    "\n"
    "  --text PATH          the training text (UTF-8)\n"
    "  --tokenizer FILE     a tokenizer.json, a tiktoken rank file or a folder holding\n"
    "                       one (default: GPT-2's); the model's vocabulary is the\n"
    "                       tokenizer's unless --vocab is given\n"
    "  --batch N            batch size (2)\n"
    "  --epochs N           train until this epoch (10)\n"
    "  --lr X               learning rate; the peak rate with --warmup (4e-4)\n"
    "  --weight-decay X     AdamW's decoupled weight decay (0.1)\n"
    "  --optimizer NAME     adamw (default) or adam\n"
    "  --eval-freq N        evaluate every N optimizer steps (5)\n"
    "  --eval-iter N        batches per evaluation (5)\n"
    "  --train-ratio X      the training part's share of the text (0.9)\n"
    "  --stride N           ids between windows (the context)\n"
    "  --start STR          the sample's start text (\"Every effort moves you\")\n"
    "  --sample-tokens N    ids per sample (50)\n"
    "  --composed           the book's composed layers instead of the fused kernels\n"
    "  --fast-dropout       counter-based dropout masks (not PyTorch's draws, so not its numbers)\n"
    "\n"
    "--json's line: {\"rows\": [...], \"samples\": [...], \"seconds\": S, \"tokens_per_s\": R}\n"
    "\n";
static const char *help_end =
    "\n" TG_CLI_MODEL_HELP "                  (pretrain's --context defaults to 256, as the book's)\n"
    "\n"
    "Exit status: 0 ok, 1 the loss diverged, 2 bad arguments, bad input or a\n"
    "failed write.\n";

typedef struct {
    const char *text, *optimizer, *start, *tokenizer;
    int64_t batch, epochs, eval_freq, eval_iter, stride, sample_tokens;
    double lr, weight_decay, train_ratio;
    bool stride_seen, composed, fast_dropout;
    tg_cli_train t;
} pt_args;

typedef struct {
    const pt_args *a;
    tg_decoder_config cfg;
    uint64_t seed;
    tg_module *gpt;
    tg_optimizer *opt;
    tg_text_dataset *ds[2];
    tg_loader *ld[2];
    tg_tape *model_tape;
    tg_tokenizer *tok;
    int64_t *start_ids;
    size_t n_start;
    uint64_t text_hash, ids_hash;
} pt_run;

/* FNV-1a: a checkpoint remembers which text it was trained on. */
static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* generate_and_print_sample: greedy, newlines shown as spaces; rank 0
 * alone (generation draws nothing, so the ranks stay in step). */
static int sample(tg_trainer *tr, int64_t epoch, void *task)
{
    (void)epoch;
    pt_run *r = task;
    if (!tg_trainer_is_lead(tr)) return TG_OK;
    size_t n = r->n_start + (size_t)r->a->sample_tokens;
    int64_t *ids = malloc(sizeof *ids * n), got = 0;
    char *text = NULL;
    size_t len = 0;
    tg_generate_options o = {.max_new_tokens = r->a->sample_tokens, .eos_id = -1,
                             .numerics = tg_tape_numerics(tg_trainer_tape(tr))};
    int st = !ids ? tg_error_status(TG_ENOMEM, "out of memory")
                  : tg_gpt_generate(r->gpt, r->start_ids, (int64_t)r->n_start, &o, ids, &got);
    if (st == TG_OK) st = tg_tokenizer_decode_skip(r->tok, ids, (size_t)got, &text, &len, NULL);
    for (size_t i = 0; st == TG_OK && i < len; i++)
        if (text[i] == '\n') text[i] = ' ';
    if (st == TG_OK) st = tg_trainer_record_text(tr, "samples", text);
    if (st == TG_OK) st = tg_trainer_printf(tr, "%s", text);
    free(text);
    free(ids);
    return st;
}

/* What else must agree for a checkpoint to continue this run (the
 * trainer adds its own settings). */
#define PT_NIDENTITY (TG_CLI_MODEL_NIDENTITY + 8)
static void identity(const pt_run *r, tg_checkpoint_value *v)
{
    const pt_args *a = r->a;
    int k = tg_cli_model_identity(&r->cfg, r->seed, v);
    const tg_checkpoint_value id[PT_NIDENTITY - TG_CLI_MODEL_NIDENTITY] = {
        {.name = "--stride", .i = a->stride},
        {.name = "--sample-tokens", .i = a->sample_tokens},
        {.name = "--text (its contents)", .i = (int64_t)r->text_hash, .differs = "was trained on another text"},
        {.name = "--tokenizer (the text's ids)", .i = (int64_t)r->ids_hash, .differs = "was trained with another tokenizer"},
        {.name = "--optimizer adam (1) or adamw (0)", .i = strcmp(a->optimizer, "adam") == 0},
        {.name = "--fast-dropout", .i = a->fast_dropout},
        {.name = "--weight-decay", .is_float = true, .f = a->weight_decay},
        {.name = "--train-ratio", .is_float = true, .f = a->train_ratio},
    };
    memcpy(v + k, id, sizeof id);
}

/* Reads, splits and tokenizes the text; builds the loaders. */
static int prepare_data(pt_run *r)
{
    const pt_args *a = r->a;
    size_t len, cut;
    int rc = TG_CLI_OK;
    char *text = tg_cli_read_file(CMD, "--text", a->text, false, &len);
    if (!text) return TG_CLI_USAGE;
    int64_t *ids[2] = {NULL, NULL};
    size_t nid[2] = {0, 0};
    if (len == 0) {
        rc = tg_cli_error(CMD, "--text: '%.300s' is empty", a->text);
    } else if (tg_text_split(text, len, a->train_ratio, &cut) != TG_OK) {
        rc = tg_cli_error(CMD, "--text: '%.300s': %s", a->text, tg_last_error());
    } else {
        r->text_hash = fnv1a(text, len);
        for (int k = 0; k < 2 && rc == TG_CLI_OK; k++)
            if (tg_tokenizer_encode(r->tok, k ? text + cut : text, k ? len - cut : cut, &ids[k], &nid[k]) != TG_OK)
                rc = tg_cli_lib_error(CMD, "--text");
    }
    free(text);
    if (rc == TG_CLI_OK) r->ids_hash = fnv1a((const char *)ids[0], nid[0] * sizeof *ids[0]);
    int64_t ctx = r->cfg.context_length;
    for (int k = 0; k < 2 && rc == TG_CLI_OK; k++) {
        const char *what = k ? "validation" : "training";
        tg_text_dataset *d = r->ds[k] = tg_text_dataset_new(ids[k], (int64_t)nid[k], ctx, a->stride);
        int64_t need = k ? 1 : a->batch;
        if (!d)
            rc = tg_cli_lib_error(CMD, NULL);
        else if (tg_text_dataset_len(d) < need)
            rc = tg_cli_error(CMD,
                              "--text: the %s part of '%.300s' has %zu ids, %lld window%s of %lld; it needs "
                              "at least %lld (a longer text, a smaller --context or --batch, or another "
                              "--train-ratio)",
                              what, a->text, nid[k], (long long)tg_text_dataset_len(d),
                              tg_text_dataset_len(d) == 1 ? "" : "s", (long long)ctx + 1, (long long)need);
    }
    for (int k = 0; k < 2 && rc == TG_CLI_OK; k++)
        rc = tg_cli_check_ids(CMD, "--text", ids[k], (int64_t)nid[k], r->cfg.vocab_size);
    free(ids[0]);
    free(ids[1]);
    for (int k = 0; k < 2 && rc == TG_CLI_OK; k++)
        if (!(r->ld[k] = tg_text_loader_new(r->ds[k], (tg_loader_options){a->batch, !k, !k, NULL})))
            rc = tg_cli_lib_error(CMD, NULL);
    return rc;
}

/* Tokenizer, start ids, data, model and optimizer, in PyTorch's order. */
static int setup(pt_run *r, const tg_cli_model *m)
{
    const pt_args *a = r->a;
    r->tok = tg_cli_model_tokenizer(a->tokenizer, NULL, &r->cfg);
    if (!r->tok) return tg_cli_lib_error(CMD, a->tokenizer ? "--tokenizer" : NULL);
    if (a->tokenizer && !m->vocab && r->cfg.family == TG_GPT_FAMILY_GPT2) r->cfg.vocab_size = tg_tokenizer_vocab_size(r->tok);
    if (tg_tokenizer_encode(r->tok, a->start, strlen(a->start), &r->start_ids, &r->n_start) != TG_OK)
        return tg_cli_lib_error(CMD, "--start");
    if (r->n_start == 0) return tg_cli_error(CMD, "--start: the start text is empty");
    int rc = tg_cli_check_ids(CMD, "--start", r->start_ids, (int64_t)r->n_start, r->cfg.vocab_size);
    if (rc != TG_CLI_OK) return rc;
    if (a->fast_dropout) tg_generator_set_dropout_stream(NULL, TG_DROPOUT_COUNTER);
    /* torch.manual_seed(123); train_loader = ...; val_loader = ... */
    tg_manual_seed(r->seed);
    if ((rc = prepare_data(r)) != TG_CLI_OK) return rc;
    /* torch.manual_seed(123); model = GPTModel(cfg); optimizer = AdamW(...) */
    if (!(r->gpt = tg_cli_model_build(r->model_tape, m, &r->cfg))) return tg_cli_lib_error(CMD, NULL);
    tg_cli_gpt_set_layers(r->gpt, a->composed);
    tg_adam_options o = {a->lr, {0.9, 0.999}, 1e-8, a->weight_decay, false};
    bool adam = strcmp(a->optimizer, "adam") == 0;
    r->opt = adam ? tg_adam_new(r->model_tape, r->gpt, o) : tg_adamw_new(r->model_tape, r->gpt, o);
    return r->opt ? TG_CLI_OK : tg_cli_lib_error(CMD, NULL);
}

static int finish(pt_run *r, const tg_trainer *tr)
{
    const pt_args *a = r->a;
    if (!tg_trainer_is_lead(tr)) return TG_CLI_OK;
    if (a->t.save && tg_module_save(r->gpt, a->t.save) != TG_OK) return tg_cli_lib_error(CMD, "--save");
    if (a->t.plot) {
        const char *base = strrchr(a->text, '/');
        base = base ? base + 1 : a->text;
        char title[256];
        snprintf(title, sizeof title, "tapegrad pretrain: %.200s", base);
        int rc = tg_cli_train_plot(CMD, a->t.plot, tr, title, NULL, (double)a->epochs);
        if (rc != TG_CLI_OK) return rc;
    }
    if (!a->t.json) { /* the speed, unless the table was lost */
        if (!tg_cli_flush_stdout()) return tg_cli_stdout_error(0);
        return tg_cli_train_summary(tr, "tokens"), TG_CLI_OK;
    }
    json_t *o = tg_cli_train_json(tr, "tokens_seen");
    tg_trainer_stats s;
    tg_trainer_get_stats(tr, &s);
    json_object_set_new(o, "samples", tg_cli_json_series(tr, "samples"));
    tg_numerics nm = tg_tape_numerics(tg_trainer_tape(tr));
    json_object_set_new(o, "precision", json_string(tg_numerics_name(nm)));
    tg_cli_json_bf16(o, nm);
    json_object_set_new(o, "tokens_per_s", json_real(s.seconds > 0 ? (double)s.seen_this_run / s.seconds : 0.0));
    return tg_cli_print_json(CMD, o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17));
}

static int run(pt_run *r, const tg_cli_model *m)
{
    const pt_args *a = r->a;
    int rc = setup(r, m);
    tg_checkpoint_value id[PT_NIDENTITY];
    identity(r, id);
    tg_trainer_options o = {.model = r->gpt, .optimizer = r->opt, .train = {.loader = r->ld[0]},
                            .val = {.loader = r->ld[1]}, .loss = tg_loss_lm, .task = r, .epochs = a->epochs,
                            .eval_freq = a->eval_freq, .eval_iter = a->eval_iter, .count_tokens = true,
                            .n_identity = PT_NIDENTITY, .identity = id, .on_epoch_end = sample,
                            .numerics = m->numerics};
    tg_cli_train_options(&a->t, &o);
    tg_trainer *tr;
    rc = tg_cli_train_run(CMD, rc, &o, &tr);
    if (rc == TG_CLI_OK) rc = finish(r, tr);
    tg_trainer_free(tr);
    for (int k = 0; k < 2; k++) tg_loader_free(r->ld[k]), tg_text_dataset_free(r->ds[k]);
    return rc;
}

static int pretrain(int argc, char **argv)
{
    pt_args a = {.optimizer = "adamw", .start = "Every effort moves you", .batch = 2, .epochs = 10, .eval_freq = 5,
                 .eval_iter = 5, .sample_tokens = 50, .lr = 4e-4, .weight_decay = 0.1, .train_ratio = 0.9};
    const tg_opt own[] = {
        {.name = "--text", .type = TG_OPT_STRING, .dest = &a.text},
        TG_CLI_TOKENIZER_OPT(a.tokenizer),
        {.name = "--batch", .type = TG_OPT_INT, .dest = &a.batch, .imin = 1, .imax = 65536},
        {.name = "--epochs", .type = TG_OPT_INT, .dest = &a.epochs, .imin = 1, .imax = 1000000},
        {.name = "--lr", .type = TG_OPT_DOUBLE, .dest = &a.lr, .dmin = 0.0, .dmax = 10.0},
        {.name = "--weight-decay", .type = TG_OPT_DOUBLE, .dest = &a.weight_decay, .dmin = 0.0, .dmax = 1e6},
        {.name = "--optimizer", .type = TG_OPT_STRING, .dest = &a.optimizer},
        {.name = "--eval-freq", .type = TG_OPT_INT, .dest = &a.eval_freq, .imin = 1, .imax = INT32_MAX},
        {.name = "--eval-iter", .type = TG_OPT_INT, .dest = &a.eval_iter, .imin = 1, .imax = INT32_MAX},
        {.name = "--train-ratio", .type = TG_OPT_DOUBLE, .dest = &a.train_ratio, .dmin = 0.0, .dmax = 1.0,
         .dmax_open = true},
        {.name = "--stride", .type = TG_OPT_INT, .dest = &a.stride, .imin = 1, .imax = INT32_MAX,
         .seen = &a.stride_seen},
        {.name = "--start", .type = TG_OPT_STRING, .dest = &a.start},
        {.name = "--sample-tokens", .type = TG_OPT_INT, .dest = &a.sample_tokens, .imin = 0, .imax = 100000},
        {.name = "--composed", .type = TG_OPT_FLAG, .dest = &a.composed},
        {.name = "--fast-dropout", .type = TG_OPT_FLAG, .dest = &a.fast_dropout},
        TG_CLI_TRAIN_OPTS(a.t),
    };
    tg_cli_model m;
    pt_run r = {.a = &a};
    tg_cli_model_defaults(&m, 256);
    int rc;
    tg_cli_command c = {.name = CMD, .help = help, .opts = own, .nopts = TG_CLI_NOPTS(own),
                        .help_more = {TG_CLI_TRAIN_HELP, help_end}};
    if (!tg_cli_model_parse(&c, argc, argv, &m, &r.cfg, &rc)) return rc;
    if (!a.text) return tg_cli_error(CMD, "--text PATH is required");
    if (strcmp(a.optimizer, "adamw") != 0 && strcmp(a.optimizer, "adam") != 0)
        return tg_cli_error(CMD, "--optimizer: expected adamw or adam, got '%.200s'", a.optimizer);
    if (a.train_ratio <= 0) return tg_cli_error(CMD, "--train-ratio must be above 0, got %g", a.train_ratio);
    if ((rc = tg_cli_train_check(CMD, &a.t)) != TG_CLI_OK) return rc;
    if (!a.stride_seen) a.stride = r.cfg.context_length;
    r.seed = m.seed;
    if (tg_cli_check_only) return TG_CLI_OK;
    if ((rc = tg_cli_train_begin(CMD, &a.t, a.batch)) != TG_CLI_OK) return rc;
    r.model_tape = tg_tape_new();
    rc = r.model_tape ? run(&r, &m) : tg_cli_error(CMD, "out of memory");
    free(r.start_ids);
    tg_tape_free(r.model_tape);
    tg_cli_flush_stdout();
    return rc;
}

/* Under mpirun every rank starts MPI first, so that only rank 0 shows the
 * errors all ranks meet alike (a bad argument); MPI ends on every path. */
int tg_cmd_pretrain(int argc, char **argv)
{
    return tg_cli_dist_main(pretrain, argc, argv);
}
