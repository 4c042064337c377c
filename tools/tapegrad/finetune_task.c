/* tapegrad finetune's task: the book's lines after each epoch and after
 * training (chapter 6's accuracies; chapter 7's sample and responses, with
 * the book's generate in the model's own mode and the response cut out of
 * the generated text as the book cuts it). */
#include "finetune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The book's generate(model, idx, max_new_tokens, context_size, eos_id)
 * with the model in the mode it is in. In eval mode, or without dropout,
 * the library's tg_gpt_generate (the KV cache gives the same ids); in
 * training mode with dropout, the book's loop itself, each id from the
 * whole window's forward, so that the dropout masks are drawn as PyTorch
 * draws them. */
static int generate_in_mode(tg_tape *tp, tg_module *gpt, const tg_decoder_config *cfg, const int64_t *prompt,
                            int64_t n_prompt, int64_t max_new, int64_t eos, int64_t *out, int64_t *n_out)
{
    if (!tg_module_is_training(gpt) || cfg->drop_rate == 0) {
        tg_generate_options o = {.max_new_tokens = max_new, .eos_id = eos, .numerics = tg_tape_numerics(tp)};
        return tg_gpt_generate(gpt, prompt, n_prompt, &o, out, n_out);
    }
    memmove(out, prompt, sizeof *out * (size_t)n_prompt);
    int64_t len = n_prompt;
    bool prev = tg_set_grad_enabled(false);
    int st = TG_OK;
    for (int64_t i = 0; i < max_new && st == TG_OK; i++) {
        int64_t start = len > cfg->context_length ? len - cfg->context_length : 0, shape[2] = {1, len - start};
        tg_tensor *ids = tg_from_data(tp, TG_I64, 2, shape, out + start);
        tg_tensor *logits = ids ? tg_module_forward(tp, gpt, ids) : NULL;
        tg_tensor *last = logits ? tg_select(tp, tg_select(tp, logits, 0, 0), 0, shape[1] - 1) : NULL;
        tg_tensor *next = last ? tg_argmax(tp, last, -1, false) : NULL;
        if (!next) {
            st = TG_EINVAL;
        } else {
            int64_t id = *(const int64_t *)tg_data_ptr(next);
            tg_tape_reset(tp);
            if (id == eos) break;
            out[len++] = id;
        }
    }
    tg_tape_reset(tp);
    tg_set_grad_enabled(prev);
    *n_out = len;
    return st;
}

static char *response_text(char *text, size_t len, size_t prompt_len)
{
    /* generated_text[len(input_text):]: the prompt decodes to itself */
    size_t rest = len >= prompt_len ? len - prompt_len : 0;
    memmove(text, text + (len - rest), rest);
    rest = remove_all(text, rest, "### Response:");
    char *resp = py_strip(text, &rest);
    char *keep = malloc(rest + 1);
    if (!keep) return NULL;
    memcpy(keep, resp, rest);
    keep[rest] = '\0';
    return keep;
}

/* ---- the task's lines ------------------------------------------------------------------------ */

/* The ids of text (<|endoftext|> allowed), malloc'd with room for extra more. */
static int encode(ft_run *r, const char *text, int64_t extra, int64_t **ids, int64_t *n)
{
    int64_t *raw = NULL;
    size_t nr = 0;
    if (tg_tokenizer_encode(r->tok, text, strlen(text), &raw, &nr) != TG_OK) return TG_EINVAL;
    *ids = realloc(raw, sizeof *raw * (nr + (size_t)extra + 1));
    if (!*ids) {
        free(raw);
        return tg_error_status(TG_ENOMEM, "out of memory");
    }
    *n = (int64_t)nr;
    return TG_OK;
}

/* The entry's prompt continued by the model in its mode: the prompt text
 * (format_input(entry), or with --format chat the user's message), the
 * decoded ids (malloc'd) and the length of the prompt's part of them. With
 * --format chat the prompt is the conversation up to the assistant's header
 * (thinking left open: the training conversations have no think block). */
static int continue_prompt(ft_run *r, tg_trainer *tr, tg_module *model, const tg_instruction *e, int64_t max_new,
                           int64_t eos, char **prompt, char **text, size_t *len, size_t *prompt_len)
{
    int64_t *ids = NULL, n = 0, got = 0;
    *text = NULL;
    int st;
    if (r->a->chat) {
        if (!(*prompt = tg_format_chat_user(e))) return TG_ENOMEM;
        const tg_chat_message m = {"user", *prompt};
        const tg_chat_options o = {.add_generation_prompt = true, .thinking = true};
        size_t nc = 0;
        int64_t *chat = NULL;
        st = tg_tokenizer_encode_chat(r->tok, &m, 1, &o, &chat, &nc);
        if (st == TG_OK && !(ids = realloc(chat, sizeof *ids * (nc + (size_t)max_new + 1)))) {
            free(chat);
            st = tg_error_status(TG_ENOMEM, "out of memory");
        }
        n = (int64_t)nc;
    } else {
        if (!(*prompt = tg_format_input(e))) return TG_ENOMEM;
        st = encode(r, *prompt, max_new, &ids, &n);
    }
    char *head = NULL;
    if (st == TG_OK) st = tg_tokenizer_decode_text(r->tok, ids, (size_t)n, &head, prompt_len);
    free(head);
    if (st == TG_OK)
        st = generate_in_mode(tg_trainer_tape(tr), model, &r->cfg, ids, n, max_new, eos, ids, &got);
    if (st == TG_OK) st = tg_tokenizer_decode_skip(r->tok, ids, (size_t)got, text, len, NULL);
    free(ids);
    return st;
}

/* generate_and_print_sample: eval mode, 50 greedy ids from the prompt of
 * validation entry i, newlines shown as spaces; training mode after. */
static int print_sample(ft_run *r, tg_trainer *tr, int64_t i)
{
    int st = TG_OK;
    if (tg_trainer_is_lead(tr)) {
        const tg_instruction *e = tg_instruction_data_get(r->entries, r->ins_begin[VAL] + i);
        char *prompt = NULL, *text = NULL;
        size_t len = 0;
        tg_module_train(r->gpt, false);
        size_t plen;
        st = e ? continue_prompt(r, tr, r->gpt, e, 50, -1, &prompt, &text, &len, &plen) : TG_EINVAL;
        for (size_t i = 0; st == TG_OK && i < len; i++)
            if (text[i] == '\n') text[i] = ' ';
        if (st == TG_OK) st = tg_trainer_printf(tr, "%s", text);
        free(prompt);
        free(text);
    }
    tg_module_train(r->gpt, true);
    return st;
}

/* chapter 7: the first validation entry's */
int tg_ft_instruct_epoch_end(tg_trainer *tr, int64_t epoch, void *task)
{
    (void)epoch;
    return print_sample(task, tr, 0);
}

/* For each test entry: the prompt, the expected output and the model's
 * response (in the mode the book leaves the model: training), as the book
 * prints them. */
int tg_ft_instruct_end(tg_trainer *tr, void *task)
{
    ft_run *r = task;
    int64_t n = tg_instruction_dataset_len(r->ins[TEST]);
    int st = TG_OK;
    for (int64_t i = 0; i < n && st == TG_OK && tg_trainer_is_lead(tr); i++) {
        const tg_instruction *e = tg_instruction_data_get(r->entries, r->ins_begin[TEST] + i);
        char *prompt = NULL, *text = NULL, *resp = NULL;
        size_t len = 0;
        size_t plen = 0;
        st = e ? continue_prompt(r, tr, r->gpt, e, r->a->max_new, r->end_id, &prompt, &text, &len, &plen) : TG_EINVAL;
        if (st == TG_OK && !(resp = response_text(text, len, plen)))
            st = tg_error_status(TG_ENOMEM, "out of memory");
        if (st == TG_OK) st = tg_trainer_record_text(tr, "responses", resp);
        if (st == TG_OK)
            st = tg_trainer_printf(tr, "%s\n\nCorrect response:\n>> %s\n\nModel response:\n>> %s\n"
                                       "-------------------------------------",
                                   prompt, e->output, resp);
        free(prompt);
        free(text);
        free(resp);
    }
    return st;
}

/* Chapter 6's accuracies over --eval-iter batches after each epoch. */
int tg_ft_classify_epoch_end(tg_trainer *tr, int64_t epoch, void *task)
{
    (void)epoch;
    ft_run *r = task;
    double acc[2];
    int st = TG_OK;
    for (int k = 0; k < 2 && st == TG_OK; k++) st = tg_trainer_accuracy(tr, &r->set[k], r->a->eval_iter, &acc[k]);
    tg_trainer_stats s;
    tg_trainer_get_stats(tr, &s);
    if (st == TG_OK) st = tg_trainer_record(tr, "train_accuracy", acc[0]);
    if (st == TG_OK) st = tg_trainer_record(tr, "val_accuracy", acc[1]);
    if (st == TG_OK) st = tg_trainer_record(tr, "accuracy_seen", (double)s.seen);
    if (st == TG_OK)
        st = tg_trainer_printf(tr, "Training accuracy: %.2f%% | Validation accuracy: %.2f%%", acc[0] * 100,
                               acc[1] * 100);
    return st;
}

/* After training: the accuracies over the whole loaders. */
int tg_ft_classify_end(tg_trainer *tr, void *task)
{
    ft_run *r = task;
    static const char *const label[3] = {"Training", "Validation", "Test"};
    int st = TG_OK;
    for (int k = 0; k < 3 && st == TG_OK; k++) {
        double acc;
        if (!r->set[k].loader) continue;
        if ((st = tg_trainer_accuracy(tr, &r->set[k], 0, &acc)) == TG_OK)
            st = tg_trainer_printf(tr, "%s accuracy: %.2f%%", label[k], acc * 100);
        if (st == TG_OK && k == TEST) st = tg_trainer_record(tr, "test_accuracy", acc);
    }
    return st;
}

/* ---- DPO --------------------------------------------------------------------------------------- */

tg_tensor *tg_ft_dpo_loss(tg_tape *tp, tg_module *model, const tg_batch *b, void *task, double *weight)
{
    return tg_loss_dpo(tp, model, b, &((ft_run *)task)->dpo, weight);
}

int tg_ft_dpo_columns(void *task, double *values) { return tg_dpo_columns(&((ft_run *)task)->dpo, values); }

/* Python's repr of a float (what print(x) shows): the shortest digits that
 * read back as v, fixed notation for decimal exponents from -4 to 15,
 * scientific otherwise ("1e-05", "1.5e+16"). */
static const char *py_repr(double v, char *out, size_t cap)
{
    if (isnan(v)) return "nan";
    if (isinf(v)) return v > 0 ? "inf" : "-inf";
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    char digits[24];
    size_t nd = 0, i = 0;
    bool neg = e[0] == '-';
    if (neg) i++;
    for (; e[i] && e[i] != 'e'; i++)
        if (e[i] != '.') digits[nd++] = e[i];
    digits[nd] = '\0';
    int x = atoi(e + i + 1);
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (x < -4 || x >= 16) {
        o += (size_t)snprintf(out + o, cap - o, "%c%s%s%se%c%02d", digits[0], nd > 1 ? "." : "", digits + 1, "",
                              x < 0 ? '-' : '+', x < 0 ? -x : x);
    } else if (x < 0) {
        o += (size_t)snprintf(out + o, cap - o, "0.%.*s%s", -x - 1, "0000", digits);
    } else {
        for (int k = 0; k <= x; k++) out[o++] = (size_t)k < nd ? digits[k] : '0';
        out[o++] = '.';
        if ((size_t)x + 1 < nd) o += (size_t)snprintf(out + o, cap - o, "%s", digits + x + 1);
        else out[o++] = '0';
    }
    out[o < cap ? o : cap - 1] = '\0';
    return out;
}

/* The notebook's evaluation before training (after torch.manual_seed): its
 * four lines, kept as the "before" series; the seed again for training. */
int tg_ft_dpo_begin(tg_trainer *tr, void *task)
{
    ft_run *r = task;
    tg_manual_seed(r->seed);
    tg_train_row w;
    int st = tg_trainer_evaluate(tr, &w);
    double v[4] = {w.train_loss, w.val_loss, w.train_columns[0] - w.train_columns[1],
                   w.val_columns[0] - w.val_columns[1]};
    static const char *const label[4] = {"Training loss:", "Validation loss:", "Train reward margin:",
                                         "Val reward margin:"};
    for (int k = 0; k < 4 && st == TG_OK; k++) {
        char buf[48];
        st = tg_trainer_printf(tr, "%s %s", label[k], py_repr(v[k], buf, sizeof buf));
        if (st == TG_OK) st = tg_trainer_record(tr, "before", v[k]);
    }
    tg_manual_seed(r->seed);
    return st;
}

int tg_ft_dpo_row(tg_trainer *tr, const tg_train_row *w, void *task)
{
    (void)task;
    return tg_trainer_printf(tr,
                             "Ep %lld (Step %06lld): Train loss %.3f, Val loss %.3f, Train reward margins %.3f, "
                             "Val reward margins %.3f",
                             (long long)w->epoch, (long long)w->step, w->train_loss, w->val_loss,
                             w->train_columns[0] - w->train_columns[1], w->val_columns[0] - w->val_columns[1]);
}

/* the notebook's sample: the third validation entry's prompt (the last
 * one's when there are fewer) */
int tg_ft_dpo_epoch_end(tg_trainer *tr, int64_t epoch, void *task)
{
    (void)epoch;
    ft_run *r = task;
    int64_t n = tg_preference_dataset_len(r->pref[VAL]);
    return print_sample(r, tr, n > 2 ? 2 : n - 1);
}

/* After training (torch.manual_seed(s)): for the first three validation
 * entries, the reference's response and the policy's (in the mode training
 * left it), printed as the notebook prints them. */
int tg_ft_dpo_end(tg_trainer *tr, void *task)
{
    ft_run *r = task;
    int64_t n = tg_preference_dataset_len(r->pref[VAL]);
    if (n > 3) n = 3;
    tg_manual_seed(r->seed);
    int st = TG_OK;
    for (int64_t i = 0; i < n && st == TG_OK && tg_trainer_is_lead(tr); i++) {
        const tg_instruction *e = tg_instruction_data_get(r->entries, r->ins_begin[VAL] + i);
        char *resp[2] = {NULL, NULL}, *prompt = NULL;
        for (int k = 0; k < 2 && st == TG_OK; k++) {
            char *text = NULL;
            size_t len = 0, plen = 0;
            free(prompt);
            prompt = NULL;
            /* the reference: its own model, or the policy without its
             * adapters in eval mode */
            bool training = tg_module_is_training(r->gpt), own = k == 1 || r->ref;
            if (!own) tg_lora_set_enabled(r->gpt, false), tg_module_train(r->gpt, false);
            st = e ? continue_prompt(r, tr, own && k == 0 ? r->ref : r->gpt, e, r->a->max_new, r->end_id, &prompt,
                                     &text, &len, &plen)
                   : TG_EINVAL;
            if (!own) tg_lora_set_enabled(r->gpt, true), tg_module_train(r->gpt, training);
            if (st == TG_OK && !(resp[k] = response_text(text, len, plen)))
                st = tg_error_status(TG_ENOMEM, "out of memory");
            if (st == TG_OK) st = tg_trainer_record_text(tr, k == 0 ? "reference_responses" : "policy_responses", resp[k]);
            free(text);
        }
        if (st == TG_OK)
            st = tg_trainer_printf(tr,
                                   "%s\n\nCorrect response:\n>> %s\n\nReference model response:\n>> %s\n\nPolicy "
                                   "model response:\n>> %s\n\n-------------------------------------\n\n",
                                   prompt, e->output ? e->output : e->chosen, resp[0], resp[1]);
        free(prompt);
        free(resp[0]);
        free(resp[1]);
    }
    return st;
}

/* ---- the task's JSON line and plots ----------------------------------------------------------------------------------------- */

/* DPO's rows, columns included, its values before training and its responses. */
static void dpo_json(json_t *o, const tg_trainer *tr)
{
    int64_t n;
    const tg_train_row *w = tg_trainer_rows(tr, &n);
    json_t *rows = json_object_get(o, "rows");
    for (int64_t i = 0; i < n; i++) {
        json_t *row = json_array_get(rows, (size_t)i);
        json_object_set_new(row, "train_reward_margin", tg_cli_json_real(w[i].train_columns[0] - w[i].train_columns[1]));
        json_object_set_new(row, "val_reward_margin", tg_cli_json_real(w[i].val_columns[0] - w[i].val_columns[1]));
        json_object_set_new(row, "train_chosen_reward", tg_cli_json_real(w[i].train_columns[0]));
        json_object_set_new(row, "train_rejected_reward", tg_cli_json_real(w[i].train_columns[1]));
        json_object_set_new(row, "val_chosen_reward", tg_cli_json_real(w[i].val_columns[0]));
        json_object_set_new(row, "val_rejected_reward", tg_cli_json_real(w[i].val_columns[1]));
    }
    const double *b = tg_trainer_series(tr, "before", &n);
    if (b && n == 4)
        json_object_set_new(o, "before", json_pack("{s:o,s:o,s:o,s:o}", "train_loss", tg_cli_json_real(b[0]),
                                                   "val_loss", tg_cli_json_real(b[1]), "train_reward_margin",
                                                   tg_cli_json_real(b[2]), "val_reward_margin", tg_cli_json_real(b[3])));
    int64_t k;
    const char *const *ref = tg_trainer_texts(tr, "reference_responses", &n), *const *pol =
                                                                               tg_trainer_texts(tr, "policy_responses", &k);
    json_t *resp = json_array();
    for (int64_t i = 0; i < n && i < k; i++)
        json_array_append_new(resp, json_pack("{s:s,s:s}", "reference", ref[i], "policy", pol[i]));
    json_object_set_new(o, "responses", resp);
}

int tg_ft_json(const ft_run *r, const tg_trainer *tr)
{
    json_t *o = tg_cli_train_json(tr, r->a->instruct || r->a->dpo ? "tokens_seen" : "examples_seen");
    if (r->a->dpo) {
        dpo_json(o, tr);
    } else if (r->a->instruct) {
        json_object_set_new(o, "responses", tg_cli_json_series(tr, "responses"));
    } else {
        int64_t n;
        const double *test = tg_trainer_series(tr, "test_accuracy", &n);
        json_object_set_new(o, "train_accuracy", tg_cli_json_series(tr, "train_accuracy"));
        json_object_set_new(o, "val_accuracy", tg_cli_json_series(tr, "val_accuracy"));
        json_object_set_new(o, "test_accuracy", tg_cli_json_real(n ? test[0] : NAN));
    }
    json_object_set_new(o, "trainable_parameters", json_integer(tg_module_num_trainable_parameters(r->gpt)));
    tg_numerics nm = tg_tape_numerics(tg_trainer_tape(tr));
    json_object_set_new(o, "precision", json_string(tg_numerics_name(nm)));
    tg_cli_json_bf16(o, nm);
    return tg_cli_print_json(r->cmd, o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17));
}

char *tg_ft_accuracy_plot_path(const char *path, const char *suffix)
{
    size_t len = strlen(path), stem = len >= 4 && strcmp(path + len - 4, ".svg") == 0 ? len - 4 : len;
    size_t cap = len + strlen(suffix) + 8;
    char *acc = malloc(cap);
    if (acc) snprintf(acc, cap, "%.*s%s.svg", (int)stem, path, suffix);
    return acc;
}

/* --plot FILE: the loss plot; the classifier's accuracy plot beside it. */
/* --plot FILE: the loss plot; the classifier's accuracy plot or DPO's
 * reward margins plot beside it. */
int tg_ft_write_plots(const ft_run *r, const tg_trainer *tr, const char *path)
{
    const char *top = r->a->instruct || r->a->dpo ? "Tokens seen" : "Examples seen";
    char title[64];
    snprintf(title, sizeof title, "tapegrad %s", r->cmd);
    int rc = tg_cli_train_plot(r->cmd, path, tr, title, top, (double)r->a->epochs);
    if (rc != TG_CLI_OK || r->a->instruct) return rc;
    int64_t n, k;
    const tg_train_row *w = tg_trainer_rows(tr, &n);
    const double *tra = NULL, *va = NULL, *seen = NULL;
    if (!r->a->dpo) {
        tra = tg_trainer_series(tr, "train_accuracy", &n), va = tg_trainer_series(tr, "val_accuracy", &k);
        seen = tg_trainer_series(tr, "accuracy_seen", &k);
    }
    char *second = tg_ft_accuracy_plot_path(path, r->a->dpo ? "-reward-margins" : "-accuracy");
    tg_cli_loss_row *rows = malloc(sizeof *rows * (size_t)(n ? n : 1));
    if (second && rows) {
        for (int64_t i = 0; i < n; i++)
            rows[i] = r->a->dpo ? (tg_cli_loss_row){w[i].epoch, w[i].step, w[i].seen,
                                                    w[i].train_columns[0] - w[i].train_columns[1],
                                                    w[i].val_columns[0] - w[i].val_columns[1]}
                                : (tg_cli_loss_row){i + 1, i + 1, (int64_t)seen[i], tra[i], va[i]};
        int st = tg_cli_svg_values_plot(second, title, r->a->dpo ? "Reward margins" : "Accuracy", top,
                                        (double)r->a->epochs, n, rows);
        rc = st == 0 ? TG_CLI_OK : tg_cli_error(r->cmd, "--plot: cannot write '%.300s'", second);
    } else {
        rc = tg_cli_error(r->cmd, "out of memory");
    }
    free(rows);
    free(second);
    return rc;
}
