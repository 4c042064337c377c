/* The chat formats of Qwen3 and Llama 3 as the book writes them, and Gemma
 * 3's as its chat template does (include/tapegrad/data.h,
 * tg_tokenizer_encode_chat): the format's own tokens by id, the text between
 * them encoded as the book (Gemma 3: Hugging Face's apply_chat_template)
 * encodes it. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "data_internal.h"

tg_chat_format tg_tokenizer_chat_format(const tg_tokenizer *tok)
{
    if (tg_tokenizer_token_id(tok, "<|im_start|>") >= 0 && tg_tokenizer_token_id(tok, "<|im_end|>") >= 0)
        return TG_CHAT_QWEN;
    if (tg_tokenizer_token_id(tok, "<|start_header_id|>") >= 0 && tg_tokenizer_token_id(tok, "<|end_header_id|>") >= 0 &&
        tg_tokenizer_token_id(tok, "<|eot_id|>") >= 0)
        return TG_CHAT_LLAMA3;
    if (tg_tokenizer_token_id(tok, "<start_of_turn>") >= 0 && tg_tokenizer_token_id(tok, "<end_of_turn>") >= 0 &&
        tg_tokenizer_token_id(tok, "<bos>") >= 0)
        return TG_CHAT_GEMMA3;
    return TG_CHAT_NONE;
}

int64_t tg_tokenizer_chat_end_id(const tg_tokenizer *tok)
{
    switch (tg_tokenizer_chat_format(tok)) {
    case TG_CHAT_QWEN: return tg_tokenizer_token_id(tok, "<|im_end|>");
    case TG_CHAT_LLAMA3: return tg_tokenizer_token_id(tok, "<|eot_id|>");
    case TG_CHAT_GEMMA3: return tg_tokenizer_token_id(tok, "<end_of_turn>");
    case TG_CHAT_NONE: break;
    }
    return -1;
}

const char *tg_chat_format_name(tg_chat_format f)
{
    switch (f) {
    case TG_CHAT_QWEN: return "qwen";
    case TG_CHAT_LLAMA3: return "llama3";
    case TG_CHAT_GEMMA3: return "gemma3";
    case TG_CHAT_NONE: break;
    }
    return "none";
}

typedef struct {
    int64_t *v;
    size_t n, cap;
    int st;
} ids_t;

static void put(ids_t *o, const int64_t *ids, size_t n)
{
    if (o->st != TG_OK || !n) return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 64;
        while (cap < o->n + n) cap *= 2;
        int64_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) {
            o->st = tg_error_status(TG_ENOMEM, "chat: out of memory");
            return;
        }
        o->v = v, o->cap = cap;
    }
    memcpy(o->v + o->n, ids, n * sizeof *ids);
    o->n += n;
}

static void put_id(ids_t *o, int64_t id) { put(o, &id, 1); }

static void put_text(ids_t *o, tg_tokenizer *tok, const char *s, size_t len, bool allow_special)
{
    if (o->st != TG_OK || !len) return;
    int64_t *ids;
    size_t n;
    o->st = tg_tokenizer_encode_special(tok, s, len, allow_special, &ids, &n);
    if (o->st == TG_OK) put(o, ids, n);
    free(ids);
}

/* Python's str.isspace for one code point: bidirectional class WS, B or S,
 * or category Zs. */
static bool py_space(uint32_t cp)
{
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

/* Python's str.strip(): [*start, *end) without white space at either end
 * (the text is valid UTF-8: checked before). */
static void strip(const char *s, size_t len, size_t *start, size_t *end)
{
    size_t a = 0, b = len;
    uint32_t cp;
    while (a < b) {
        size_t k = tg__utf8_len((const unsigned char *)s + a, b - a, &cp);
        if (!k || !py_space(cp)) break;
        a += k;
    }
    while (b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        if (!tg__utf8_len((const unsigned char *)s + k, b - k, &cp) || !py_space(cp)) break;
        b = k;
    }
    *start = a, *end = b;
}

/* Qwen3: "<|im_start|>{role}\n{content}<|im_end|>\n" per message. */
static void qwen(ids_t *o, tg_tokenizer *tok, const tg_chat_message *m, size_t n, const tg_chat_options *opt)
{
    int64_t start = tg_tokenizer_token_id(tok, "<|im_start|>"), end = tg_tokenizer_token_id(tok, "<|im_end|>");
    for (size_t i = 0; i < n && o->st == TG_OK; i++) {
        size_t lr = strlen(m[i].role), lc = strlen(m[i].content);
        char *s = malloc(lr + lc + 2);
        if (!s) {
            o->st = tg_error_status(TG_ENOMEM, "chat: out of memory");
            return;
        }
        memcpy(s, m[i].role, lr);
        s[lr] = '\n';
        memcpy(s + lr + 1, m[i].content, lc);
        put_id(o, start);
        put_text(o, tok, s, lr + 1 + lc, opt->allow_special);
        put_id(o, end);
        put_text(o, tok, "\n", 1, false);
        free(s);
    }
    if (opt->add_generation_prompt) {
        static const char open[] = "assistant\n", closed[] = "assistant\n<think>\n\n</think>\n\n";
        put_id(o, start);
        if (opt->thinking) put_text(o, tok, open, sizeof open - 1, false);
        else put_text(o, tok, closed, sizeof closed - 1, false);
    }
}

/* Llama 3: header, "\n\n", the stripped content, <|eot_id|> per message. */
static void llama3(ids_t *o, tg_tokenizer *tok, const tg_chat_message *m, size_t n, const tg_chat_options *opt)
{
    int64_t sh = tg_tokenizer_token_id(tok, "<|start_header_id|>"), eh = tg_tokenizer_token_id(tok, "<|end_header_id|>");
    int64_t eot = tg_tokenizer_token_id(tok, "<|eot_id|>"), bos = tg_tokenizer_token_id(tok, "<|begin_of_text|>");
    if (opt->bos) {
        if (bos < 0) o->st = tg_error_status(TG_EINVAL, "chat: the tokenizer has no <|begin_of_text|>");
        put_id(o, bos);
    }
    for (size_t i = 0; i <= n && o->st == TG_OK; i++) {
        if (i == n && !opt->add_generation_prompt) break;
        const char *role = i < n ? m[i].role : "assistant";
        put_id(o, sh);
        put_text(o, tok, role, strlen(role), false);
        put_id(o, eh);
        put_text(o, tok, "\n\n", 2, false);
        if (i == n) break;
        size_t a, b;
        strip(m[i].content, strlen(m[i].content), &a, &b);
        put_text(o, tok, m[i].content + a, b - a, opt->allow_special);
        put_id(o, eot);
    }
}

/* Gemma 3's chat template: "<bos>", an optional first system message
 * ahead of the first turn's content, the turns alternating user/model, each
 * content stripped, then the generation prompt. Each text between the
 * format's tokens is encoded whole, as the rendered string is. */
static void gemma3(ids_t *o, tg_tokenizer *tok, const tg_chat_message *m, size_t n, const tg_chat_options *opt)
{
    int64_t bos = tg_tokenizer_token_id(tok, "<bos>"), sot = tg_tokenizer_token_id(tok, "<start_of_turn>");
    int64_t eot = tg_tokenizer_token_id(tok, "<end_of_turn>");
    if (n == 0) {
        o->st = tg_error_status(TG_EINVAL, "chat: Gemma 3's format needs a message");
        return;
    }
    size_t first = strcmp(m[0].role, "system") == 0; /* the first turn */
    for (size_t i = first; i < n; i++)
        if ((strcmp(m[i].role, "user") == 0) != ((i - first) % 2 == 0)) {
            o->st = tg_error_status(TG_EINVAL, "chat: Gemma 3's turns must alternate user/assistant/user/... "
                                               "(after a first system message); message %zu %s \"user\"",
                                    i, (i - first) % 2 ? "is" : "is not");
            return;
        }
    put_id(o, bos);
    for (size_t i = first; i < n && o->st == TG_OK; i++) {
        const char *role = strcmp(m[i].role, "assistant") == 0 ? "model" : m[i].role;
        bool prefixed = i == first && first; /* the system message's content and "\n\n" first */
        size_t lr = strlen(role), lp = prefixed ? strlen(m[0].content) : 0, a, b;
        strip(m[i].content, strlen(m[i].content), &a, &b);
        size_t len = lr + 1 + (prefixed ? lp + 2 : 0) + (b - a);
        char *s = malloc(len + 1);
        if (!s) {
            o->st = tg_error_status(TG_ENOMEM, "chat: out of memory");
            return;
        }
        size_t k = 0;
        memcpy(s, role, lr), k += lr;
        s[k++] = '\n';
        if (prefixed) memcpy(s + k, m[0].content, lp), k += lp, s[k++] = '\n', s[k++] = '\n';
        memcpy(s + k, m[i].content + a, b - a);
        put_id(o, sot);
        put_text(o, tok, s, len, opt->allow_special);
        put_id(o, eot);
        put_text(o, tok, "\n", 1, false);
        free(s);
    }
    if (opt->add_generation_prompt) {
        put_id(o, sot);
        put_text(o, tok, "model\n", 6, false);
    }
}

int tg_tokenizer_encode_chat(tg_tokenizer *tok, const tg_chat_message *messages, size_t n,
                             const tg_chat_options *options, int64_t **ids, size_t *n_ids)
{
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!tok || (!messages && n) || !ids || !n_ids) return tg_error_status(TG_EINVAL, "chat: NULL argument");
    tg_chat_format f = tg_tokenizer_chat_format(tok);
    if (f == TG_CHAT_NONE)
        return tg_error_status(TG_EINVAL, "chat: this tokenizer has no chat format (no <|im_start|>, "
                                          "<|start_header_id|> or <start_of_turn> token)");
    for (size_t i = 0; i < n; i++) {
        if (!messages[i].role || !messages[i].role[0] || !messages[i].content)
            return tg_error_status(TG_EINVAL, "chat: message %zu needs a non-empty role and a content", i);
        size_t lr = strlen(messages[i].role), lc = strlen(messages[i].content);
        size_t br = tg__utf8_check(messages[i].role, lr), bc = tg__utf8_check(messages[i].content, lc);
        if (br < lr || bc < lc)
            return tg_error_status(TG_EINVAL, "chat: message %zu: invalid UTF-8 at byte %zu of its %s", i,
                                   br < lr ? br : bc, br < lr ? "role" : "content");
    }
    tg_chat_options none = {0};
    const tg_chat_options *opt = options ? options : &none;
    ids_t o = {0};
    if (f == TG_CHAT_QWEN) qwen(&o, tok, messages, n, opt);
    else if (f == TG_CHAT_LLAMA3) llama3(&o, tok, messages, n, opt);
    else gemma3(&o, tok, messages, n, opt);
    if (o.st != TG_OK) {
        free(o.v);
        return o.st;
    }
    *ids = o.v, *n_ids = o.n;
    return TG_OK;
}
