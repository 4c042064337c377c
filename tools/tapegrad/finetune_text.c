/* The instruction follower's text work (finetune instruct): the book's
 * generate in the model's own mode, and a response cut out of the
 * generated text as the book cuts it. */
#include "cli.h"

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
int tg_cli_generate_in_mode(tg_tape *tp, tg_module *gpt, const tg_gpt_config *cfg, const int64_t *prompt,
                            int64_t n_prompt, int64_t max_new, int64_t eos, int64_t *out, int64_t *n_out)
{
    if (!tg_module_is_training(gpt) || cfg->drop_rate == 0) {
        tg_generate_options o = {.max_new_tokens = max_new, .eos_id = eos};
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

char *tg_cli_response_text(char *text, size_t len, size_t prompt_len)
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
