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
 *     (utf8proc, computed here), as it is otherwise, byte for byte (with
 *     model.byte_fallback, Gemma 3's kind, the added tokens as decoding
 *     writes a token's text: "<0xNN>" as byte NN, U+2581 as a space); a
 *     second encoding gives the same ids; the ids with the
 *     post-processor's added around them (tg_tokenizer_encode_add_special)
 *     hold the ids, unless the post-processor is refused by name;
 *   - every added token's text is found by tg_tokenizer_token_id and its id
 *     decodes to that text (byte fallback: as decoding writes it);
 *   - a tokenizer with a chat format (its <|im_start|> and <|im_end|>,
 *     Llama 3's header and <|eot_id|> tokens, or Gemma 3's <bos>,
 *     <start_of_turn> and <end_of_turn>) encodes a short conversation,
 *     every id inside the vocabulary.
 * The normalizer, the model's byte_fallback and the added tokens of a
 * tokenizer.json that loaded are read here again from the input (jansson),
 * the way the reader takes them: "NFC", or a "Sequence" of one "NFC";
 * byte_fallback true; "content" and "special". */
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

/* What a reader made of the file: the normalizer, byte fallback and the
 * added tokens. */
typedef struct {
    bool nfc, fallback;
    size_t n_added;
    const char **added;
    size_t *added_len;
    bool *special;
} reading;

/* ---- what the ids of a text must decode to ------------------------------------------------------- */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A byte-fallback token's text as decoding writes it: "<0xNN>" is byte NN,
 * U+2581 a space. */
static void sb_put_fallback(sbuf *b, const char *s, size_t n)
{
    if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0) {
        char c = (char)(hex_digit(s[3]) << 4 | hex_digit(s[4]));
        sb_put(b, &c, 1);
        return;
    }
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) sb_put(b, " ", 1), i += 3;
        else sb_put(b, s + i, 1), i++;
    }
}

/* The text between added tokens as decoding gives it back: its NFC, or as
 * it is (with byte fallback too: a space the normaliser wrote as U+2581 is
 * decoded as a space, and the fixed texts hold no U+2581 or "<0x"). */
static void sb_put_text(sbuf *b, const char *s, size_t n, const reading *r)
{
    if (r->nfc) sb_put_nfc(b, s, n);
    else sb_put(b, s, n);
}

/* An added token as decoding writes it. */
static void sb_put_added(sbuf *b, const char *s, size_t n, const reading *r)
{
    if (r->fallback) sb_put_fallback(b, s, n);
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
        sb_put_text(b, s + from, i - from, r);
        sb_put_added(b, s + i, best, r);
        i += best;
        from = i;
    }
    sb_put_text(b, s + from, n - from, r);
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
        sbuf want = {0};
        sb_put_added(&want, r->added[k], r->added_len[k], r);
        CHECK_MSG(len == want.n && (len == 0 || memcmp(back, want.s, len) == 0), name);
        free(want.s);
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
            free(again);
            again = NULL;
            st = tg_tokenizer_encode_add_special(tok, texts[t].s, texts[t].len, allow, &again, &n2);
            if (st == TG_OK) { /* the ids, inside the post-processor's */
                CHECK(n2 >= n);
                check_ids(tok, again, n2);
                bool inside = false;
                for (size_t off = 0; off + n <= n2 && !inside; off++)
                    inside = n == 0 || memcmp(again + off, ids, n * sizeof *ids) == 0;
                CHECK(inside);
            } else if (strncmp(tg_last_error(), "tokenizer: the post-processor ", 30) != 0) {
                check_encode_failure(again, n2);
            } else {
                CHECK(!again && n2 == 0);
            }
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
    r->fallback = json_is_true(json_object_get(json_object_get(*root, "model"), "byte_fallback"));
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
        reading r = {false, false, n_added, added, added_len, special};
        check_tokenizer(tok, &r);
        tg_tokenizer_free(tok);
    }
    return 0;
}
