/* libFuzzer target: the tokenizer's file readers on arbitrary bytes. The
 * input becomes the contents of a memfd file, read once as a Hugging Face
 * tokenizer.json (tg_tokenizer_load_json) and once as tiktoken's rank file
 * (tg_tokenizer_load_tiktoken, with GPT-2's pattern and three added tokens
 * of this file: "<|endoftext|>" not special, "<|im_start|>" and
 * "<|im_end|>" special).
 *
 * Invariants checked on every input and reader:
 *   - the reader returns a tokenizer, or NULL with a one-line message (no
 *     newline) that starts with "tokenizer:";
 *   - a loaded tokenizer encodes each of a few fixed texts (ASCII, accents
 *     composed and not, conjoining jamo, CJK, emoji, NUL and control bytes,
 *     added and special tokens), with special tokens allowed and not; the
 *     only failure accepted is the pattern's match limit (a pattern of the
 *     file may backtrack without end). Every id is inside the vocabulary;
 *     decoding gives the text with the added tokens found in it here
 *     (leftmost, longest; special ones only when allowed) as they are and
 *     the text between them in NFC when the file's normalizer is NFC
 *     (utf8proc, computed here), as it is otherwise, byte for byte; a
 *     second encoding gives the same ids;
 *   - every added token's text is found by tg_tokenizer_token_id and its id
 *     decodes to that text;
 *   - a tokenizer with a chat format (its <|im_start|> and <|im_end|>, or
 *     Llama 3's header and <|eot_id|> tokens) encodes a short conversation,
 *     every id inside the vocabulary.
 * The normalizer and the added tokens of a tokenizer.json that loaded are
 * read here again from the input (jansson), the way the reader takes them:
 * "NFC", or a "Sequence" of one "NFC"; "content" and "special". */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define FUZZ_NAME "fuzz_tokenizer_json"
#include "fuzz.h"
#include "fuzz_text.h"
#include "fuzz_file.h"

#include <tapegrad.h>

/* GPT-2's pattern (tiktoken's "gpt2" encoding). */
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static const tg_added_token tiktoken_added[] = {
    {"<|endoftext|>", 1000, false},
    {"<|im_start|>", 1001, true},
    {"<|im_end|>", 1002, true},
};

typedef struct {
    const char *s;
    size_t len;
} fixed_text;

#define T(lit) {lit, sizeof lit - 1}
static const fixed_text texts[] = {
    T(""),
    T("Hello, world! It's 2024: 3.14 apples."),
    T("caf\xc3\xa9 na\xc3\xafve \xc3\x85ngstr\xc3\xb6m"),                   /* composed accents */
    T("cafe\xcc\x81 A\xcc\x8a\xcc\xa3 \xe2\x84\xab x<\xcc\xb8"),              /* to be composed: NFC changes them */
    T("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 \xea\xb0\x80"),                   /* conjoining jamo, a syllable */
    T("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87\xe7\xab\xa0\xe3\x80\x82"), /* CJK */
    T("\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 \xf0\x9f\x98\x80!"),     /* emoji, ZWJ */
    T("<|endoftext|>a<|im_start|>user\n<think>x</think><|im_end|>\xcc\xb8"), /* added and special tokens */
    T("  \t\r\n\n  a\0b\x01\x7f  "),                                           /* white space, NUL, control */
};
#undef T
#define N_TEXTS (sizeof texts / sizeof *texts)

static int memfd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    memfd = fuzz_file_open("fuzz_tokenizer_json", path, sizeof path);
    return 0;
}

/* What a reader made of the file: the normalizer and the added tokens. */
typedef struct {
    bool nfc;
    size_t n_added;
    const char **added;
    size_t *added_len;
    bool *special;
} reading;

/* ---- what the ids of a text must decode to ------------------------------------------------------- */

static void sb_put_text(sbuf *b, const char *s, size_t n, bool nfc)
{
    if (nfc) sb_put_nfc(b, s, n);
    else sb_put(b, s, n);
}

/* The added tokens that may match (leftmost, the longest at that place) as
 * they are; the text between them normalised. */
static void expected(sbuf *b, const reading *r, const char *s, size_t n, bool allow_special)
{
    size_t from = 0;
    for (size_t i = 0; i < n;) {
        size_t best = 0;
        for (size_t k = 0; k < r->n_added; k++)
            if ((!r->special[k] || allow_special) && r->added_len[k] > best && r->added_len[k] <= n - i &&
                memcmp(s + i, r->added[k], r->added_len[k]) == 0)
                best = r->added_len[k];
        if (!best) {
            i++;
            continue;
        }
        sb_put_text(b, s + from, i - from, r->nfc);
        sb_put(b, s + i, best);
        i += best;
        from = i;
    }
    sb_put_text(b, s + from, n - from, r->nfc);
}

/* A failed encoding: only at the pattern's match limit, with no ids. */
static void check_encode_failure(const int64_t *ids, size_t n)
{
    const char *e = tg_last_error();
    CHECK_MSG(strncmp(e, "tokenizer: pattern matching failed", 34) == 0, e);
    CHECK(!ids && n == 0);
}

static void check_ids(const tg_tokenizer *tok, const int64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < tg_tokenizer_vocab_size(tok));
}

static void check_tokenizer(tg_tokenizer *tok, const reading *r)
{
    int64_t vocab = tg_tokenizer_vocab_size(tok);
    CHECK(vocab > 0 && vocab <= (int64_t)1 << 24);
    int64_t eot = tg_tokenizer_eot(tok);
    CHECK(eot >= -1 && eot < vocab);
    for (size_t k = 0; k < r->n_added; k++) {
        char *name = malloc(r->added_len[k] + 1);
        CHECK(name);
        memcpy(name, r->added[k], r->added_len[k]);
        name[r->added_len[k]] = '\0';
        int64_t id = tg_tokenizer_token_id(tok, name);
        CHECK_MSG(id >= 0 && id < vocab, name);
        char *back = NULL;
        size_t len = 0;
        CHECK(tg_tokenizer_decode(tok, &id, 1, &back, &len) == TG_OK);
        CHECK_MSG(len == r->added_len[k] && memcmp(back, name, len) == 0, name);
        free(back);
        free(name);
    }
    for (size_t t = 0; t < N_TEXTS; t++) {
        for (int allow = 0; allow < 2; allow++) {
            int64_t *ids = NULL, *again = NULL;
            size_t n = 0, n2 = 0;
            int st = tg_tokenizer_encode_special(tok, texts[t].s, texts[t].len, allow, &ids, &n);
            if (st != TG_OK) {
                check_encode_failure(ids, n);
                continue;
            }
            CHECK(texts[t].len == 0 || n > 0);
            check_ids(tok, ids, n);
            char *back = NULL;
            size_t len = 0;
            CHECK(tg_tokenizer_decode(tok, ids, n, &back, &len) == TG_OK);
            sbuf want = {0};
            expected(&want, r, texts[t].s, texts[t].len, allow);
            CHECK_MSG(len == want.n && (len == 0 || memcmp(back, want.s, len) == 0),
                      "decode(encode(text)) is not the text (normalised)");
            free(want.s);
            free(back);
            st = tg_tokenizer_encode_special(tok, texts[t].s, texts[t].len, allow, &again, &n2);
            if (st != TG_OK) check_encode_failure(again, n2);
            else CHECK(n2 == n && (n == 0 || memcmp(ids, again, n * sizeof *ids) == 0));
            free(ids);
            free(again);
        }
    }
    if (tg_tokenizer_chat_format(tok) != TG_CHAT_NONE) {
        const tg_chat_message msgs[] = {{"system", "Be brief."}, {"user", " caf\xc3\xa9 <|im_end|> \n"}};
        for (int allow = 0; allow < 2; allow++) {
            tg_chat_options opt = {.add_generation_prompt = true, .thinking = allow, .allow_special = allow};
            int64_t *ids = NULL;
            size_t n = 0;
            int st = tg_tokenizer_encode_chat(tok, msgs, 2, &opt, &ids, &n);
            if (st != TG_OK) check_encode_failure(ids, n);
            else check_ids(tok, ids, n);
            free(ids);
        }
    }
}

/* A failed load: NULL with one line that names the tokenizer. */
static void check_error(void)
{
    const char *e = tg_last_error();
    CHECK_MSG(strncmp(e, "tokenizer:", 10) == 0 && e[10] != '\0', e);
    CHECK_MSG(!strchr(e, '\n'), e);
}

/* The normalizer and added tokens of a tokenizer.json that loaded. */
static void read_json(const uint8_t *data, size_t size, reading *r, json_t **root)
{
    json_error_t err;
    *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &err);
    CHECK_MSG(*root, err.text);
    json_t *norm = json_object_get(*root, "normalizer");
    const char *type = json_string_value(json_object_get(norm, "type"));
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *seq = json_object_get(norm, "normalizers");
        type = json_array_size(seq) == 1 ? json_string_value(json_object_get(json_array_get(seq, 0), "type")) : NULL;
    }
    r->nfc = type && strcmp(type, "NFC") == 0;
    json_t *added = json_object_get(*root, "added_tokens");
    r->n_added = json_array_size(added);
    r->added = calloc(r->n_added + 1, sizeof *r->added);
    r->added_len = calloc(r->n_added + 1, sizeof *r->added_len);
    r->special = calloc(r->n_added + 1, sizeof *r->special);
    CHECK(r->added && r->added_len && r->special);
    for (size_t k = 0; k < r->n_added; k++) {
        json_t *a = json_array_get(added, k), *content = json_object_get(a, "content");
        r->added[k] = json_string_value(content);
        r->added_len[k] = json_string_length(content);
        r->special[k] = json_is_true(json_object_get(a, "special"));
        CHECK(r->added[k] && r->added_len[k] > 0);
    }
}

static void free_reading(reading *r)
{
    free(r->added);
    free(r->added_len);
    free(r->special);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20)) return 0;
    fuzz_file_set(memfd, data, size);

    tg_clear_error();
    tg_tokenizer *tok = tg_tokenizer_load_json(path);
    if (!tok) {
        check_error();
    } else {
        reading r = {0};
        json_t *root = NULL;
        read_json(data, size, &r, &root);
        check_tokenizer(tok, &r);
        free_reading(&r);
        json_decref(root);
        tg_tokenizer_free(tok);
    }

    tg_clear_error();
    size_t n_added = sizeof tiktoken_added / sizeof *tiktoken_added;
    tok = tg_tokenizer_load_tiktoken(path, GPT2_PATTERN, tiktoken_added, n_added);
    if (!tok) {
        check_error();
    } else {
        const char *added[sizeof tiktoken_added / sizeof *tiktoken_added];
        size_t added_len[sizeof added / sizeof *added];
        bool special[sizeof added / sizeof *added];
        for (size_t k = 0; k < n_added; k++) {
            added[k] = tiktoken_added[k].content;
            added_len[k] = strlen(added[k]);
            special[k] = tiktoken_added[k].special;
        }
        reading r = {false, n_added, added, added_len, special};
        check_tokenizer(tok, &r);
        tg_tokenizer_free(tok);
    }
    return 0;
}
