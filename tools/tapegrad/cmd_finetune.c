/* tapegrad finetune classify|instruct: the book's chapter 6 (a classifier on
 * GPTModel's last position, train_classifier_simple) and chapter 7 (an
 * instruction follower, train_model_simple on custom_collate_fn batches),
 * each with or without appendix E's LoRA, printing the book's lines
 * (README.md, "Fine-tuning").
 *
 * Every random draw is PyTorch's, in the book's order (the model, the new
 * head, LoRA's A matrices, the loaders' seeds, dropout), so a seeded run
 * with --precision exact prints what the book's code prints under PyTorch
 * for the same data. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define PAD_ID 50256 /* <|endoftext|>: the book's padding and end of a response */

static const char *classify_help =
    "usage: tapegrad finetune classify --train T.csv --val V.csv [--test X.csv] [MODEL] [options]\n"
    "\n"
    "The book's chapter 6: GPTModel (random, --init or --hf weights) gets a new\n"
    "out_head Linear(emb, classes); the last transformer block, the final norm\n"
    "and the head are trained (or, with --lora-rank, LoRA adapters on every\n"
    "Linear) on the last position's logits with cross-entropy. CSV files have a\n"
    "header with Label (an integer) and Text columns; texts are padded with\n"
    "<|endoftext|> to the training set's longest (or cut to --max-length).\n"
    "Prints the book's loss table and accuracies.\n"
    "\n"
    "  --train FILE --val FILE --test FILE   the three sets (--test optional)\n"
    "  --max-length N       pad or cut every text to N ids\n"
    "  --epochs N           (5)\n"
    "  --batch N            (8)\n"
    "  --lr X               AdamW's learning rate (5e-5)\n"
    "  --weight-decay X     (0.1)\n"
    "  --eval-freq N        evaluate every N steps (50)\n"
    "  --eval-iter N        batches per evaluation and per epoch's accuracy (5)\n";

static const char *instruct_help =
    "usage: tapegrad finetune instruct --data FILE.json [MODEL] [options]\n"
    "\n"
    "The book's chapter 7: the instruction entries (instruction, input, output)\n"
    "are split 85/10/5 into training, test and validation parts, formatted as\n"
    "the Alpaca-style prompt plus \"### Response:\", batched by custom_collate_fn\n"
    "and trained with AdamW; after each epoch a greedy sample of the first\n"
    "validation prompt; then each test entry's response.\n"
    "\n"
    "  --data FILE          a JSON array of {instruction, input, output}\n"
    "  --limit N            keep the first N entries\n"
    "  --allowed-max-length N  cut batches to N positions (1024)\n"
    "  --max-new-tokens N   ids per response (256)\n"
    "  --epochs N           (2)\n"
    "  --batch N            (8)\n"
    "  --lr X               AdamW's learning rate (5e-5)\n"
    "  --weight-decay X     (0.1)\n"
    "  --eval-freq N        evaluate every N steps (5)\n"
    "  --eval-iter N        batches per evaluation (5)\n";

static const char *common_help =
    "\n"
    "  --init FILE          start from a state_dict (tapegrad pretrain --save)\n"
    "  --hf FILE            start from Hugging Face GPT-2 weights (sets --qkv-bias)\n"
    "  --lora-rank R        LoRA instead of the book's partial fine-tuning: every\n"
    "  --lora-alpha A       Linear wrapped, only the adapters trained (alpha: R)\n"
    "  --save FILE          the fine-tuned model's state_dict (safetensors; a LoRA\n"
    "                       model keeps PyTorch's .linear / .lora keys: load it with\n"
    "                       generate --load FILE --lora-rank R --lora-alpha A)\n"
    "  --plot FILE          loss against epochs and examples or tokens seen (SVG;\n"
    "                       classify also writes FILE's accuracy plot beside it,\n"
    "                       named with -accuracy before .svg)\n"
    "  --composed           the book's composed layers instead of the fused kernels\n"
    "  --threads N          OpenMP threads (all cores)\n"
    "  --json               end with one JSON line (rows, accuracies or responses,\n"
    "                       trainable_parameters, seconds)\n"
    "\n" TG_CLI_MODEL_HELP "                  (finetune's --dropout defaults to 0, as the book's)\n"
    "\n"
    "Exit status: 0 ok, 1 the loss diverged, 2 bad arguments or bad input.\n";

typedef struct {
    bool instruct;
    const char *cmd;
    const char *train, *val, *test, *data, *init, *hf, *save, *plot;
    int64_t max_length, limit, allowed_max, max_new, epochs, batch, eval_freq, eval_iter, lora_rank, threads;
    double lr, weight_decay, lora_alpha;
    bool max_length_seen, limit_seen, lora_rank_seen, lora_alpha_seen, json, composed;
} ft_args;

typedef struct {
    const ft_args *a;
    const char *cmd;
    tg_gpt_config cfg;
    uint64_t seed;
    tg_tokenizer *tok;
    tg_module *gpt;
    tg_optimizer *opt;
    tg_tape *model_tape, *step_tape;
    /* the sets: classify train, val, test; instruct train, val, test */
    tg_class_dataset *cls[3];
    tg_instruction_data *entries;
    tg_instruction_dataset *ins[3];
    int64_t ins_begin[3];
    tg_loader *ld[3];
    int64_t *idx; /* a batch's sample indices */
    /* what was printed */
    tg_cli_loss_row *rows, *acc; /* acc: one row per epoch, train / val accuracy */
    int64_t n_rows, cap_rows, n_acc;
    double test_acc;
    char **responses;
    int64_t n_responses;
    /* progress */
    int64_t global_step, seen, steps_done, total_steps;
    double t0;
    bool progress;
} ft_run;

enum { TRAIN = 0, VAL = 1, TEST = 2 };

/* ---- small helpers ------------------------------------------------------------------------ */

static int add_row(tg_cli_loss_row **rows, int64_t *n, int64_t *cap, tg_cli_loss_row r)
{
    if (*n == *cap) {
        int64_t c = *cap ? 2 * *cap : 32;
        tg_cli_loss_row *nr = realloc(*rows, sizeof *nr * (size_t)c);
        if (!nr) return -1;
        *rows = nr, *cap = c;
    }
    (*rows)[(*n)++] = r;
    return 0;
}

static void progress_clear(const ft_run *r)
{
    if (r->progress) fputs("\r\033[K", stderr);
}

static void progress_draw(const ft_run *r, int64_t epoch, int64_t batch, int64_t nbatches)
{
    if (!r->progress) return;
    double el = tg_cli_now() - r->t0, sps = el > 0 && r->steps_done > 0 ? (double)r->steps_done / el : 0;
    double eta = sps > 0 ? (double)(r->total_steps - r->steps_done) / sps : 0;
    fprintf(stderr, "\r\033[Kepoch %lld/%lld  batch %lld/%lld  step %lld/%lld  %.2f steps/s  %d:%02d left",
            (long long)epoch, (long long)r->a->epochs, (long long)batch, (long long)nbatches,
            (long long)r->steps_done, (long long)r->total_steps, sps, (int)(eta / 60), (int)fmod(eta, 60));
    fflush(stderr);
}

/* Python's str.strip(): leading and trailing whitespace (str.isspace: the
 * ASCII spaces, \x1c-\x1f, and the Unicode spaces in UTF-8). Returns the
 * start and sets *len. */
static size_t space_len(const unsigned char *s, size_t n, bool from_end)
{
    static const char *const wide[] = {"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\xa8", "\xe2\x80\xa9",
                                       "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    if (n == 0) return 0;
    unsigned char c = from_end ? s[n - 1] : s[0];
    if ((c >= 9 && c <= 13) || c == ' ' || (c >= 0x1c && c <= 0x1f)) return 1;
    for (size_t k = 0; k < sizeof wide / sizeof wide[0]; k++) {
        size_t l = strlen(wide[k]);
        if (n >= l && memcmp(from_end ? s + n - l : s, wide[k], l) == 0) return l;
    }
    /* U+2000..U+200A: e2 80 80..8a */
    if (n >= 3) {
        const unsigned char *t = from_end ? s + n - 3 : s;
        if (t[0] == 0xe2 && t[1] == 0x80 && t[2] >= 0x80 && t[2] <= 0x8a) return 3;
    }
    return 0;
}

static char *py_strip(char *s, size_t *len)
{
    size_t n = *len, k;
    while ((k = space_len((unsigned char *)s, n, false)) > 0) s += k, n -= k;
    while ((k = space_len((unsigned char *)s, n, true)) > 0) n -= k;
    *len = n;
    return s;
}

/* text with every "### Response:" removed (str.replace(old, "")), in place. */
static size_t remove_all(char *s, size_t n, const char *what)
{
    size_t w = strlen(what), o = 0;
    for (size_t i = 0; i < n;) {
        if (i + w <= n && memcmp(s + i, what, w) == 0) {
            i += w;
            continue;
        }
        s[o++] = s[i++];
    }
    return o;
}

/* ---- batches and the book's loss functions ----------------------------------------------------- */

/* The next batch of set k from it: (B, L) ids and the targets (labels (B)
 * or shifted ids (B, L)). 1, 0 at the end, -1 on error. */
static int next_batch(ft_run *r, int k, tg_loader_iter *it, tg_tensor **x, tg_tensor **y)
{
    int64_t count;
    int got = tg_loader_iter_next_indices(it, r->idx, &count);
    if (got != 1) return got;
    if (!r->a->instruct) return tg_class_dataset_batch(r->cls[k], r->step_tape, r->idx, count, x, y) == TG_OK ? 1 : -1;
    return tg_instruction_dataset_batch(r->ins[k], r->step_tape, r->idx, count, PAD_ID, TG_IGNORE_INDEX,
                                        r->a->allowed_max, x, y) == TG_OK
               ? 1
               : -1;
}

/* The classifier's logits: model(input_batch)[:, -1, :]. */
static tg_tensor *last_logits(ft_run *r, tg_tensor *x) { return tg_gpt_forward_last(r->step_tape, r->gpt, x); }

/* calc_loss_batch: chapter 6's cross_entropy(logits[:, -1, :], labels);
 * chapter 7's cross_entropy(logits.flatten(0, 1), targets.flatten()) (-100
 * ignored). */
static tg_tensor *loss_batch(ft_run *r, tg_tensor *x, tg_tensor *y)
{
    tg_tape *tp = r->step_tape;
    if (!r->a->instruct) return tg_cross_entropy(tp, last_logits(r, x), y, TG_REDUCE_MEAN);
    tg_tensor *logits = tg_module_forward(tp, r->gpt, x);
    if (!logits) return NULL;
    int64_t flat[2] = {-1, logits->shape[2]}, n = -1;
    return tg_cross_entropy(tp, tg_view(tp, logits, 2, flat), tg_view(tp, y, 1, &n), TG_REDUCE_MEAN);
}

/* calc_loss_loader(loader, model, num_batches) */
static int loss_loader(ft_run *r, int k, int64_t num_batches, double *out)
{
    int64_t len = tg_loader_len(r->ld[k]);
    if (len == 0) return *out = NAN, 0;
    if (num_batches > len) num_batches = len;
    tg_loader_iter *it = tg_loader_iter_new(r->ld[k]);
    if (!it) return -1;
    double total = 0;
    int st = 0;
    for (int64_t i = 0; i < num_batches && !st; i++) {
        tg_tensor *x, *y, *loss;
        if (next_batch(r, k, it, &x, &y) != 1 || !(loss = loss_batch(r, x, y))) st = -1;
        else total += tg_item(loss);
        tg_tape_reset(r->step_tape);
    }
    tg_loader_iter_free(it);
    *out = total / (double)num_batches;
    return st;
}

/* evaluate_model: eval mode, no grad, both loaders, then training mode. */
static int evaluate(ft_run *r, double *train, double *val)
{
    tg_module_train(r->gpt, false);
    bool prev = tg_set_grad_enabled(false);
    int st = loss_loader(r, TRAIN, r->a->eval_iter, train);
    if (!st) st = loss_loader(r, VAL, r->a->eval_iter, val);
    tg_set_grad_enabled(prev);
    tg_module_train(r->gpt, true);
    return st;
}

/* calc_accuracy_loader(loader, model, num_batches): the model stays in eval
 * mode afterwards, as the book's does. num_batches 0: the whole loader. */
static int accuracy_loader(ft_run *r, int k, int64_t num_batches, double *out)
{
    tg_module_train(r->gpt, false);
    int64_t len = tg_loader_len(r->ld[k]), correct = 0, examples = 0;
    if (num_batches == 0 || num_batches > len) num_batches = len;
    tg_loader_iter *it = tg_loader_iter_new(r->ld[k]);
    if (!it) return -1;
    bool prev = tg_set_grad_enabled(false);
    int st = 0;
    for (int64_t i = 0; i < num_batches && !st; i++) {
        tg_tensor *x, *y, *logits, *pred;
        if (next_batch(r, k, it, &x, &y) != 1 || !(logits = last_logits(r, x)) ||
            !(pred = tg_argmax(r->step_tape, logits, -1, false))) {
            st = -1;
        } else {
            const int64_t *p = tg_data_ptr(pred), *l = tg_data_ptr(y);
            for (int64_t j = 0; j < pred->shape[0]; j++) correct += p[j] == l[j];
            examples += pred->shape[0];
        }
        tg_tape_reset(r->step_tape);
    }
    tg_set_grad_enabled(prev);
    tg_loader_iter_free(it);
    *out = examples ? (double)correct / (double)examples : NAN;
    return st;
}

/* ---- generation ---------------------------------------------------------------------------------- */

/* The book's generate(model, idx, max_new_tokens, context_size, eos_id)
 * with the model in the mode it is in. In eval mode, or without dropout,
 * the library's tg_gpt_generate (the KV cache gives the same ids); in
 * training mode with dropout, the book's loop itself, each id from the
 * whole window's forward, so that the dropout masks are drawn as PyTorch
 * draws them. */
static int generate(ft_run *r, const int64_t *prompt, int64_t n_prompt, int64_t max_new, int64_t eos, int64_t *out,
                    int64_t *n_out)
{
    if (!tg_module_is_training(r->gpt) || r->cfg.drop_rate == 0) {
        tg_generate_options o = {.max_new_tokens = max_new, .eos_id = eos};
        return tg_gpt_generate(r->gpt, prompt, n_prompt, &o, out, n_out);
    }
    memmove(out, prompt, sizeof *out * (size_t)n_prompt);
    int64_t len = n_prompt;
    bool prev = tg_set_grad_enabled(false);
    int st = TG_OK;
    for (int64_t i = 0; i < max_new && st == TG_OK; i++) {
        int64_t start = len > r->cfg.context_length ? len - r->cfg.context_length : 0, shape[2] = {1, len - start};
        tg_tensor *ids = tg_from_data(r->step_tape, TG_I64, 2, shape, out + start);
        tg_tensor *logits = ids ? tg_module_forward(r->step_tape, r->gpt, ids) : NULL;
        tg_tensor *last = logits ? tg_select(r->step_tape, tg_select(r->step_tape, logits, 0, 0), 0, shape[1] - 1) : NULL;
        tg_tensor *next = last ? tg_argmax(r->step_tape, last, -1, false) : NULL;
        if (!next) {
            st = TG_EINVAL;
        } else {
            int64_t id = *(const int64_t *)tg_data_ptr(next);
            tg_tape_reset(r->step_tape);
            if (id == eos) break;
            out[len++] = id;
        }
    }
    tg_tape_reset(r->step_tape);
    tg_set_grad_enabled(prev);
    *n_out = len;
    return st;
}

/* The ids of text (<|endoftext|> allowed), checked against the model's
 * vocabulary; malloc'd with room for extra more. */
static int encode(ft_run *r, const char *what, const char *text, int64_t extra, int64_t **ids, int64_t *n)
{
    int64_t *raw = NULL;
    size_t nr = 0;
    if (tg_tokenizer_encode(r->tok, text, strlen(text), &raw, &nr) != TG_OK) return tg_cli_lib_error(r->cmd, what);
    *ids = realloc(raw, sizeof *raw * (nr + (size_t)extra + 1));
    if (!*ids) {
        free(raw);
        return tg_cli_error(r->cmd, "out of memory");
    }
    *n = (int64_t)nr;
    return TG_CLI_OK;
}

/* generate_and_print_sample: eval mode, 50 greedy ids from the first
 * validation entry's prompt, newlines shown as spaces; training mode after. */
static int print_sample(ft_run *r)
{
    const tg_instruction *e = tg_instruction_data_get(r->entries, r->ins_begin[VAL]);
    char *prompt = e ? tg_format_input(e) : NULL, *text = NULL;
    if (!prompt) return tg_cli_lib_error(r->cmd, "sample");
    int64_t *ids = NULL, n = 0, got = 0;
    size_t len = 0;
    int rc = encode(r, "sample", prompt, 50, &ids, &n);
    free(prompt);
    if (rc != TG_CLI_OK) return rc;
    tg_generate_options o = {.max_new_tokens = 50, .eos_id = -1};
    if (tg_gpt_generate(r->gpt, ids, n, &o, ids, &got) != TG_OK ||
        tg_tokenizer_decode_text(r->tok, ids, (size_t)got, &text, &len) != TG_OK) {
        rc = tg_cli_lib_error(r->cmd, "sample");
    } else {
        for (size_t i = 0; i < len; i++)
            if (text[i] == '\n') text[i] = ' ';
        progress_clear(r);
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    tg_module_train(r->gpt, true);
    free(text);
    free(ids);
    return rc;
}

/* For each test entry: the prompt, the expected output and the model's
 * response (the text after the prompt, "### Response:" removed, stripped),
 * as the book prints them. */
static int responses(ft_run *r)
{
    int64_t n = tg_instruction_dataset_len(r->ins[TEST]);
    r->responses = calloc((size_t)(n ? n : 1), sizeof *r->responses);
    if (!r->responses) return tg_cli_error(r->cmd, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        const tg_instruction *e = tg_instruction_data_get(r->entries, r->ins_begin[TEST] + i);
        char *prompt = e ? tg_format_input(e) : NULL, *text = NULL;
        if (!prompt) return tg_cli_lib_error(r->cmd, "response");
        int64_t *ids = NULL, np = 0, got = 0;
        size_t len = 0, plen = strlen(prompt);
        int rc = encode(r, "response", prompt, r->a->max_new, &ids, &np);
        if (rc == TG_CLI_OK && (generate(r, ids, np, r->a->max_new, PAD_ID, ids, &got) != TG_OK ||
                                tg_tokenizer_decode_text(r->tok, ids, (size_t)got, &text, &len) != TG_OK))
            rc = tg_cli_lib_error(r->cmd, "response");
        free(ids);
        if (rc != TG_CLI_OK) {
            free(prompt);
            return rc;
        }
        /* generated_text[len(input_text):]: the prompt decodes to itself */
        size_t rest = len >= plen ? len - plen : 0;
        memmove(text, text + (len - rest), rest);
        rest = remove_all(text, rest, "### Response:");
        char *resp = py_strip(text, &rest);
        char *keep = malloc(rest + 1);
        if (!keep) {
            free(prompt);
            free(text);
            return tg_cli_error(r->cmd, "out of memory");
        }
        memcpy(keep, resp, rest);
        keep[rest] = '\0';
        r->responses[r->n_responses++] = keep;
        progress_clear(r);
        printf("%s\n\nCorrect response:\n>> %s\n\nModel response:\n>> %s\n-------------------------------------\n",
               prompt, e->output, keep);
        fflush(stdout);
        free(prompt);
        free(text);
    }
    return TG_CLI_OK;
}

/* ---- training -------------------------------------------------------------------------------------- */

/* One optimizer step on one batch. */
static int train_step(ft_run *r, tg_tensor *x, tg_tensor *y, double *loss_out)
{
    tg_optimizer_zero_grad(r->opt);
    tg_tensor *loss = loss_batch(r, x, y);
    if (!loss || tg_backward(loss, NULL, false) != TG_OK) return -1;
    *loss_out = tg_item(loss);
    if (tg_optimizer_step(r->opt) != TG_OK) return -1;
    tg_tape_reset(r->step_tape);
    return 0;
}

static void print_row(const tg_cli_loss_row *w)
{
    printf("Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f\n", (long long)w->epoch, (long long)w->step, w->train,
           w->val);
}

static int epoch_loop(ft_run *r, int64_t epoch)
{
    const ft_args *a = r->a;
    int64_t nb = tg_loader_len(r->ld[TRAIN]);
    tg_loader_iter *it = tg_loader_iter_new(r->ld[TRAIN]);
    if (!it) return tg_cli_lib_error(r->cmd, NULL);
    int rc = TG_CLI_OK;
    for (int64_t b = 0; rc == TG_CLI_OK; b++) {
        tg_tensor *x, *y;
        int got = next_batch(r, TRAIN, it, &x, &y);
        if (got <= 0) {
            if (got < 0) rc = tg_cli_lib_error(r->cmd, NULL);
            break;
        }
        /* examples_seen += input_batch.shape[0] / tokens_seen += input_batch.numel() */
        int64_t n = a->instruct ? tg_numel(x) : x->shape[0];
        double loss;
        if (train_step(r, x, y, &loss)) {
            rc = tg_cli_lib_error(r->cmd, "training step");
            break;
        }
        if (!isfinite(loss)) {
            progress_clear(r);
            fflush(stdout);
            tg_cli_error(r->cmd, "the loss diverged to %g at step %lld (try a smaller --lr)", loss,
                         (long long)r->global_step + 1);
            rc = TG_CLI_FAIL;
            break;
        }
        r->seen += n;
        r->global_step++;
        r->steps_done++;
        if (r->global_step % a->eval_freq == 0) {
            tg_cli_loss_row w = {epoch + 1, r->global_step, r->seen, 0, 0};
            if (evaluate(r, &w.train, &w.val)) rc = tg_cli_lib_error(r->cmd, "evaluation");
            else if (add_row(&r->rows, &r->n_rows, &r->cap_rows, w)) rc = tg_cli_error(r->cmd, "out of memory");
            else {
                progress_clear(r);
                print_row(&w);
                fflush(stdout);
            }
        }
        progress_draw(r, epoch + 1, b + 1, nb);
    }
    tg_loader_iter_free(it);
    return rc;
}

/* After an epoch: chapter 6's accuracies over --eval-iter batches, or
 * chapter 7's sample. */
static int end_of_epoch(ft_run *r, int64_t epoch)
{
    if (r->a->instruct) return print_sample(r);
    double tr, va;
    int64_t cap = r->n_acc;
    if (accuracy_loader(r, TRAIN, r->a->eval_iter, &tr) || accuracy_loader(r, VAL, r->a->eval_iter, &va))
        return tg_cli_lib_error(r->cmd, "accuracy");
    if (add_row(&r->acc, &r->n_acc, &cap, (tg_cli_loss_row){epoch + 1, epoch + 1, r->seen, tr, va}))
        return tg_cli_error(r->cmd, "out of memory");
    progress_clear(r);
    printf("Training accuracy: %.2f%% | Validation accuracy: %.2f%%\n", tr * 100, va * 100);
    fflush(stdout);
    return TG_CLI_OK;
}

/* After training: chapter 6's accuracies over the whole loaders, or chapter
 * 7's responses. */
static int after_training(ft_run *r)
{
    if (r->a->instruct) return responses(r);
    double acc[3] = {0, 0, NAN};
    static const char *const label[3] = {"Training", "Validation", "Test"};
    for (int k = 0; k < 3; k++) {
        if (!r->ld[k]) continue;
        if (accuracy_loader(r, k, 0, &acc[k])) return tg_cli_lib_error(r->cmd, "accuracy");
        printf("%s accuracy: %.2f%%\n", label[k], acc[k] * 100);
    }
    r->test_acc = acc[TEST];
    fflush(stdout);
    return TG_CLI_OK;
}

static int train(ft_run *r)
{
    r->total_steps = tg_loader_len(r->ld[TRAIN]) * r->a->epochs;
    r->t0 = tg_cli_now();
    int rc = TG_CLI_OK;
    for (int64_t epoch = 0; epoch < r->a->epochs && rc == TG_CLI_OK; epoch++) {
        tg_module_train(r->gpt, true);
        rc = epoch_loop(r, epoch);
        if (rc == TG_CLI_OK) rc = end_of_epoch(r, epoch);
    }
    if (rc == TG_CLI_OK) rc = after_training(r);
    progress_clear(r);
    return rc;
}

/* ---- data ---------------------------------------------------------------------------------------- */

static int check_ids(ft_run *r, const char *what, const int64_t *ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= r->cfg.vocab_size)
            return tg_cli_error(r->cmd, "%s: id %lld is outside the model's vocabulary (--vocab %lld)", what,
                                (long long)ids[i], (long long)r->cfg.vocab_size);
    return TG_CLI_OK;
}

/* The three CSV sets: the training set's longest text (or --max-length)
 * sets every set's length, which the model's context must hold. */
static int load_classify(ft_run *r)
{
    const ft_args *a = r->a;
    const char *paths[3] = {a->train, a->val, a->test}, *opts[3] = {"--train", "--val", "--test"};
    int64_t len = a->max_length_seen ? a->max_length : 0;
    for (int k = 0; k < 3; k++) {
        if (!paths[k]) continue;
        r->cls[k] = tg_class_dataset_load(paths[k], r->tok, len, PAD_ID);
        if (!r->cls[k]) return tg_cli_lib_error(r->cmd, opts[k]);
        if (k == TRAIN) len = tg_class_dataset_max_length(r->cls[k]);
    }
    if (len > r->cfg.context_length)
        return tg_cli_error(r->cmd,
                            "--train: the longest text has %lld ids, more than the model's context length %lld "
                            "(give --max-length)",
                            (long long)len, (long long)r->cfg.context_length);
    if (tg_class_dataset_len(r->cls[TRAIN]) < a->batch)
        return tg_cli_error(r->cmd, "--train: %lld rows make no batch of --batch %lld (the last short batch is dropped)",
                            (long long)tg_class_dataset_len(r->cls[TRAIN]), (long long)a->batch);
    int64_t *row = malloc(sizeof *row * (size_t)(len ? len : 1));
    if (!row) return tg_cli_error(r->cmd, "out of memory");
    int rc = TG_CLI_OK;
    for (int k = 0; k < 3 && rc == TG_CLI_OK; k++)
        for (int64_t i = 0; r->cls[k] && i < tg_class_dataset_len(r->cls[k]) && rc == TG_CLI_OK; i++) {
            int64_t label;
            if (tg_class_dataset_get(r->cls[k], i, row, &label) != TG_OK) rc = tg_cli_lib_error(r->cmd, opts[k]);
            else rc = check_ids(r, opts[k], row, len);
        }
    free(row);
    return rc;
}

/* The instruction entries, split 85/10/5 (train, test, val) and tokenized;
 * each training and validation sequence must fit the model's context once
 * collated. */
static int load_instruct(ft_run *r)
{
    const ft_args *a = r->a;
    r->entries = tg_instruction_data_load(a->data);
    if (!r->entries) return tg_cli_lib_error(r->cmd, "--data");
    int64_t n = tg_instruction_data_len(r->entries);
    if (a->limit_seen && a->limit < n) n = a->limit;
    int64_t cnt[3], begin[3];
    if (tg_instruction_split(n, &cnt[TRAIN], &cnt[TEST], &cnt[VAL]) != TG_OK) return tg_cli_lib_error(r->cmd, "--data");
    begin[TRAIN] = 0, begin[TEST] = cnt[TRAIN], begin[VAL] = cnt[TRAIN] + cnt[TEST];
    if (cnt[TRAIN] < a->batch || cnt[VAL] < 1)
        return tg_cli_error(r->cmd,
                            "--data: %lld entries give %lld training and %lld validation entries; training needs "
                            "--batch %lld and validation at least 1",
                            (long long)n, (long long)cnt[TRAIN], (long long)cnt[VAL], (long long)a->batch);
    for (int k = 0; k < 3; k++) {
        r->ins_begin[k] = begin[k];
        r->ins[k] = tg_instruction_dataset_new(r->entries, begin[k], begin[k] + cnt[k], r->tok);
        if (!r->ins[k]) return tg_cli_lib_error(r->cmd, "--data");
        for (int64_t i = 0; i < cnt[k]; i++) {
            int64_t len;
            const int64_t *ids = tg_instruction_dataset_ids(r->ins[k], i, &len);
            if (!ids && len) return tg_cli_lib_error(r->cmd, "--data");
            int rc = check_ids(r, "--data", ids, len);
            if (rc != TG_CLI_OK) return rc;
            int64_t need = len + 1 < a->allowed_max ? len + 1 : a->allowed_max;
            if (k != TEST && need - 1 > r->cfg.context_length)
                return tg_cli_error(r->cmd,
                                    "--data: entry %lld has %lld ids, more than the model's context length %lld "
                                    "(give --allowed-max-length)",
                                    (long long)(begin[k] + i), (long long)len, (long long)r->cfg.context_length);
        }
    }
    return TG_CLI_OK;
}

/* ---- the model -------------------------------------------------------------------------------------- */

static int num_classes(ft_run *r)
{
    int64_t c = 2;
    for (int k = 0; k < 3; k++)
        if (r->cls[k] && tg_class_dataset_num_classes(r->cls[k]) > c) c = tg_class_dataset_num_classes(r->cls[k]);
    return (int)c;
}

/* The model in the book's order of draws, and AdamW over its parameters. */
static int build_model(ft_run *r, const tg_cli_model *m)
{
    const ft_args *a = r->a;
    /* torch.manual_seed(s); model = GPTModel(cfg); load the weights */
    if (!(r->gpt = tg_cli_model_build(r->model_tape, m, &r->cfg))) return tg_cli_lib_error(r->cmd, NULL);
    tg_cli_gpt_set_layers(r->gpt, a->composed);
    if (a->init && tg_module_load(r->gpt, a->init) != TG_OK) return tg_cli_lib_error(r->cmd, "--init");
    if (a->hf && tg_gpt_load_hf(r->gpt, a->hf) != TG_OK) return tg_cli_lib_error(r->cmd, "--hf");
    if (!a->instruct) {
        /* torch.manual_seed(s); model.out_head = Linear(emb_dim, num_classes) */
        tg_manual_seed(r->seed);
        tg_module *head = tg_linear_new(r->model_tape, r->cfg.emb_dim, num_classes(r), true);
        if (!head || tg_module_add_module(r->gpt, "out_head", head) != TG_OK) return tg_cli_lib_error(r->cmd, NULL);
    }
    if (a->lora_rank_seen || !a->instruct) {
        if (tg_module_requires_grad_(r->gpt, false) != TG_OK) return tg_cli_lib_error(r->cmd, NULL);
    }
    if (a->lora_rank_seen) {
        if (tg_lora_replace_linear(r->model_tape, r->gpt, a->lora_rank, a->lora_alpha) != TG_OK)
            return tg_cli_lib_error(r->cmd, "--lora-rank");
    } else if (!a->instruct) {
        /* trf_blocks[-1], final_norm and out_head train */
        char last[48];
        snprintf(last, sizeof last, "trf_blocks.%lld", (long long)r->cfg.n_layers - 1);
        const char *parts[3] = {last, "final_norm", "out_head"};
        for (int k = 0; k < 3; k++)
            if (tg_module_requires_grad_(tg_module_get_submodule(r->gpt, parts[k]), true) != TG_OK)
                return tg_cli_lib_error(r->cmd, NULL);
    }
    /* the new modules run under the model's numerics and layers */
    tg_module_set_numerics(r->gpt, m->numerics);
    tg_cli_gpt_set_layers(r->gpt, a->composed);
    /* torch.manual_seed(s) (classify: before AdamW; instruct: after it) */
    if (!a->instruct) tg_manual_seed(r->seed);
    tg_adam_options o = {a->lr, {0.9, 0.999}, 1e-8, a->weight_decay, false};
    r->opt = tg_adamw_new(r->model_tape, r->gpt, o);
    if (!r->opt) return tg_cli_lib_error(r->cmd, NULL);
    if (a->instruct) tg_manual_seed(r->seed);
    return TG_CLI_OK;
}

/* ---- output ----------------------------------------------------------------------------------------- */

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static int json_out(const ft_run *r, double seconds)
{
    json_t *o = json_object(), *rows = json_array();
    for (int64_t i = 0; i < r->n_rows; i++) {
        const tg_cli_loss_row *w = &r->rows[i];
        json_t *row = json_object();
        json_object_set_new(row, "epoch", json_integer(w->epoch));
        json_object_set_new(row, "step", json_integer(w->step));
        json_object_set_new(row, "train_loss", real_or_null(w->train));
        json_object_set_new(row, "val_loss", real_or_null(w->val));
        json_object_set_new(row, r->a->instruct ? "tokens_seen" : "examples_seen", json_integer(w->tokens));
        json_array_append_new(rows, row);
    }
    json_object_set_new(o, "rows", rows);
    if (r->a->instruct) {
        json_t *resp = json_array();
        for (int64_t i = 0; i < r->n_responses; i++) json_array_append_new(resp, json_string(r->responses[i]));
        json_object_set_new(o, "responses", resp);
    } else {
        json_t *tr = json_array(), *va = json_array();
        for (int64_t i = 0; i < r->n_acc; i++) {
            json_array_append_new(tr, real_or_null(r->acc[i].train));
            json_array_append_new(va, real_or_null(r->acc[i].val));
        }
        json_object_set_new(o, "train_accuracy", tr);
        json_object_set_new(o, "val_accuracy", va);
        json_object_set_new(o, "test_accuracy", real_or_null(r->test_acc));
    }
    json_object_set_new(o, "trainable_parameters", json_integer(tg_module_num_trainable_parameters(r->gpt)));
    json_object_set_new(o, "seconds", json_real(seconds));
    json_object_set_new(o, "precision", json_string(tg_numerics_name(tg_module_numerics(r->gpt))));
    tg_cli_json_bf16(o, tg_module_numerics(r->gpt));
    return tg_cli_print_json(r->cmd, o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17));
}

/* --plot FILE: the loss plot; the classifier's accuracy plot beside it. */
static int write_plots(const ft_run *r, const char *path)
{
    const char *top = r->a->instruct ? "Tokens seen" : "Examples seen";
    char title[64];
    snprintf(title, sizeof title, "tapegrad %s", r->cmd);
    int st = tg_cli_svg_values_plot(path, title, "Loss", top, (double)r->a->epochs, r->n_rows, r->rows), e = errno;
    if (st == 0 && !r->a->instruct) {
        size_t n = strlen(path);
        char *acc = malloc(n + 16);
        if (!acc) return tg_cli_error(r->cmd, "out of memory");
        size_t stem = n >= 4 && strcmp(path + n - 4, ".svg") == 0 ? n - 4 : n;
        snprintf(acc, n + 16, "%.*s-accuracy.svg", (int)stem, path);
        st = tg_cli_svg_values_plot(acc, title, "Accuracy", top, (double)r->a->epochs, r->n_acc, r->acc), e = errno;
        free(acc);
    }
    if (st == -1) return tg_cli_error(r->cmd, "--plot: cannot open '%.300s' for writing: %s", path, strerror(e));
    if (st != 0) return tg_cli_error(r->cmd, "--plot: cannot write '%.300s': %s", path, strerror(e));
    return TG_CLI_OK;
}

/* ---- the run ---------------------------------------------------------------------------------------- */

static int run(ft_run *r, const tg_cli_model *m)
{
    const ft_args *a = r->a;
    const char *outs[2] = {a->save, a->plot}, *names[2] = {"--save", "--plot"};
    for (int k = 0; k < 2; k++)
        if (outs[k] && !tg_cli_writable(outs[k]))
            return tg_cli_error(r->cmd, "%s: cannot write '%.300s': %s", names[k], outs[k], strerror(errno));
    r->tok = tg_cli_tokenizer();
    if (!r->tok) return tg_cli_lib_error(r->cmd, NULL);
    int rc = a->instruct ? load_instruct(r) : load_classify(r);
    if (rc != TG_CLI_OK) return rc;
    tg_loader_options ot = {.batch_size = a->batch, .shuffle = true, .drop_last = true};
    tg_loader_options ov = {.batch_size = a->batch, .shuffle = false, .drop_last = false};
    for (int k = 0; k < 3; k++) {
        int64_t n = a->instruct ? tg_instruction_dataset_len(r->ins[k]) : r->cls[k] ? tg_class_dataset_len(r->cls[k]) : -1;
        if (n < 0) continue;
        if (!(r->ld[k] = tg_loader_new(n, k == TRAIN ? ot : ov))) return tg_cli_lib_error(r->cmd, NULL);
    }
    r->idx = malloc(sizeof *r->idx * (size_t)a->batch);
    if (!r->idx) return tg_cli_error(r->cmd, "out of memory");
    if ((rc = build_model(r, m)) != TG_CLI_OK) return rc;
    double t0 = tg_cli_now();
    rc = train(r);
    double seconds = tg_cli_now() - t0;
    if (rc == TG_CLI_OK && a->save && tg_module_save(r->gpt, a->save) != TG_OK) rc = tg_cli_lib_error(r->cmd, "--save");
    if (rc == TG_CLI_OK && a->plot) rc = write_plots(r, a->plot);
    if (rc == TG_CLI_OK && a->json) rc = json_out(r, seconds);
    if (rc == TG_CLI_OK && !a->json)
        fprintf(stderr, "%lld steps in %.1f s, %lld trainable parameters\n", (long long)r->steps_done, seconds,
                (long long)tg_module_num_trainable_parameters(r->gpt));
    return rc;
}

static void run_free(ft_run *r)
{
    for (int k = 0; k < 3; k++) {
        tg_loader_free(r->ld[k]);
        tg_class_dataset_free(r->cls[k]);
        tg_instruction_dataset_free(r->ins[k]);
    }
    tg_instruction_data_free(r->entries);
    for (int64_t i = 0; i < r->n_responses; i++) free(r->responses[i]);
    free(r->responses);
    free(r->rows);
    free(r->acc);
    free(r->idx);
    tg_tape_free(r->step_tape);
    tg_tape_free(r->model_tape);
}

int tg_cmd_finetune(int argc, char **argv)
{
    const char *kind = argc > 1 && argv[1] ? argv[1] : NULL;
    if (kind && (strcmp(kind, "--help") == 0 || strcmp(kind, "-h") == 0)) {
        fputs("usage: tapegrad finetune classify|instruct [options] (see tapegrad finetune classify --help)\n", stdout);
        return TG_CLI_OK;
    }
    ft_args a = {.batch = 8, .lr = 5e-5, .weight_decay = 0.1, .eval_iter = 5, .allowed_max = 1024, .max_new = 256};
    if (kind && strcmp(kind, "classify") == 0) {
        a.cmd = "finetune classify", a.epochs = 5, a.eval_freq = 50;
    } else if (kind && strcmp(kind, "instruct") == 0) {
        a.cmd = "finetune instruct", a.epochs = 2, a.eval_freq = 5, a.instruct = true;
    } else {
        return tg_cli_error("finetune", "expected classify or instruct, got '%.100s'", kind ? kind : "");
    }
    const tg_opt own[] = {
        {.name = "--train", .type = TG_OPT_STRING, .dest = &a.train},
        {.name = "--val", .type = TG_OPT_STRING, .dest = &a.val},
        {.name = "--test", .type = TG_OPT_STRING, .dest = &a.test},
        {.name = "--max-length", .type = TG_OPT_INT, .dest = &a.max_length, .imin = 1, .imax = 65536,
         .seen = &a.max_length_seen},
        {.name = "--data", .type = TG_OPT_STRING, .dest = &a.data},
        {.name = "--limit", .type = TG_OPT_INT, .dest = &a.limit, .imin = 1, .imax = INT32_MAX, .seen = &a.limit_seen},
        {.name = "--allowed-max-length", .type = TG_OPT_INT, .dest = &a.allowed_max, .imin = 1, .imax = 65536},
        {.name = "--max-new-tokens", .type = TG_OPT_INT, .dest = &a.max_new, .imin = 0, .imax = 100000},
        {.name = "--init", .type = TG_OPT_STRING, .dest = &a.init},
        {.name = "--hf", .type = TG_OPT_STRING, .dest = &a.hf},
        {.name = "--epochs", .type = TG_OPT_INT, .dest = &a.epochs, .imin = 1, .imax = 1000000},
        {.name = "--batch", .type = TG_OPT_INT, .dest = &a.batch, .imin = 1, .imax = 65536},
        {.name = "--lr", .type = TG_OPT_DOUBLE, .dest = &a.lr, .dmin = 0.0, .dmax = 10.0},
        {.name = "--weight-decay", .type = TG_OPT_DOUBLE, .dest = &a.weight_decay, .dmin = 0.0, .dmax = 1e6},
        {.name = "--eval-freq", .type = TG_OPT_INT, .dest = &a.eval_freq, .imin = 1, .imax = INT32_MAX},
        {.name = "--eval-iter", .type = TG_OPT_INT, .dest = &a.eval_iter, .imin = 1, .imax = INT32_MAX},
        {.name = "--lora-rank", .type = TG_OPT_INT, .dest = &a.lora_rank, .imin = 1, .imax = 65536,
         .seen = &a.lora_rank_seen},
        {.name = "--lora-alpha", .type = TG_OPT_DOUBLE, .dest = &a.lora_alpha, .dmin = -1e6, .dmax = 1e6,
         .seen = &a.lora_alpha_seen},
        {.name = "--save", .type = TG_OPT_STRING, .dest = &a.save},
        {.name = "--plot", .type = TG_OPT_STRING, .dest = &a.plot},
        {.name = "--composed", .type = TG_OPT_FLAG, .dest = &a.composed},
        {.name = "--threads", .type = TG_OPT_INT, .dest = &a.threads, .imin = 1, .imax = 1024},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &a.json},
    };
    size_t hl = strlen(a.instruct ? instruct_help : classify_help) + strlen(common_help) + 1;
    char *help = malloc(hl);
    if (!help) return tg_cli_error(a.cmd, "out of memory");
    snprintf(help, hl, "%s%s", a.instruct ? instruct_help : classify_help, common_help);
    tg_cli_model m;
    ft_run r = {.a = &a, .cmd = a.cmd, .global_step = -1, .test_acc = NAN};
    tg_cli_model_defaults(&m, 0);
    m.dropout_seen = true; /* the book fine-tunes with drop_rate 0.0 */
    for (int i = 1; i < argc; i++) /* GPT-2's released weights have q/k/v biases */
        if (argv[i] && (strcmp(argv[i], "--hf") == 0 || strncmp(argv[i], "--hf=", 5) == 0)) m.qkv_bias = true;
    int rc;
    tg_cli_command c = {.name = a.cmd, .help = help, .opts = own, .nopts = TG_CLI_NOPTS(own)};
    bool go = tg_cli_model_parse(&c, argc - 1, argv + 1, &m, &r.cfg, &rc);
    free(help);
    if (!go) return rc;
    if (a.instruct && (a.train || a.val || a.test || a.max_length_seen))
        return tg_cli_error(a.cmd, "--train, --val, --test and --max-length are classify's; instruct reads --data");
    if (!a.instruct && (a.data || a.limit_seen))
        return tg_cli_error(a.cmd, "--data and --limit are instruct's; classify reads --train, --val and --test");
    if (a.instruct && !a.data) return tg_cli_error(a.cmd, "--data FILE.json is required");
    if (!a.instruct && (!a.train || !a.val)) return tg_cli_error(a.cmd, "--train and --val are required");
    if (a.init && a.hf) return tg_cli_error(a.cmd, "--init and --hf are exclusive");
    if (a.lora_alpha_seen && !a.lora_rank_seen) return tg_cli_error(a.cmd, "--lora-alpha needs --lora-rank");
    if (a.lora_rank_seen && !a.lora_alpha_seen) a.lora_alpha = (double)a.lora_rank;
    if (r.cfg.vocab_size <= PAD_ID)
        return tg_cli_error(a.cmd, "--vocab %lld: the padding id %d needs a vocabulary of at least %d",
                            (long long)r.cfg.vocab_size, PAD_ID, PAD_ID + 1);
    r.seed = m.seed;
    if (tg_cli_check_only) return TG_CLI_OK;
#ifdef _OPENMP
    if (a.threads) omp_set_num_threads((int)a.threads);
#endif
    tg_cli_warn_blas(a.cmd);
    r.progress = isatty(STDERR_FILENO) && !a.json;
    r.model_tape = tg_tape_new();
    r.step_tape = tg_tape_new();
    rc = r.model_tape && r.step_tape ? run(&r, &m) : tg_cli_error(a.cmd, "out of memory");
    run_free(&r);
    fflush(stdout);
    return rc;
}
