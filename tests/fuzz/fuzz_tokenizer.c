/* libFuzzer target: GPT-2's tokenizer (tg_tokenizer_encode/decode) and
 * Qwen3's (tokenizer.json: NFC, added tokens, chat format) on arbitrary
 * bytes, with the files the project ships (data/gpt2/, data/qwen3/).
 *
 * Invariants checked on every input, GPT-2:
 *   - well-formed UTF-8 (checked here by Unicode's table of well-formed byte
 *     sequences, independently of the library) encodes; every id is inside
 *     the vocabulary, decoding gives back the input byte for byte, and a
 *     second encoding (through the word cache) gives the same ids;
 *   - ill-formed input fails with "invalid UTF-8 at byte N", N the offset of
 *     the first ill-formed sequence, and no ids;
 *   - the input read as 16-bit ids decodes to the concatenation of their
 *     tokens, or fails naming the first id outside the vocabulary.
 * Qwen3, special tokens allowed when the input's length is odd:
 *   - well-formed UTF-8 encodes; every id is inside the vocabulary; decoding
 *     gives the input with its added tokens found here (leftmost, longest;
 *     special ones only when allowed) and the text between them in NFC
 *     (utf8proc, computed here on each stretch: the added tokens are
 *     matched before the normaliser, as Hugging Face's tokenizers match
 *     them), byte for byte; exactly those added tokens' ids appear (plain
 *     text never becomes an added token's id); a second encoding gives the
 *     same ids;
 *   - ill-formed input fails as for GPT-2, with no ids;
 *   - the input cut in two halves, a "user" and an "assistant" message (each
 *     up to its first NUL byte), with a generation prompt when bit 1 of the
 *     length is set: tg_tokenizer_encode_chat succeeds when both are UTF-8,
 *     its ids start with <|im_start|> (151644) and decode to the ChatML text
 *     (normalised as above); otherwise it fails naming the first message
 *     and byte that are not UTF-8, with no ids. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_tokenizer"
#include "fuzz.h"
#include "fuzz_text.h"

#include <tapegrad.h>
#include <utf8proc.h>

#ifndef TG_FUZZ_VOCAB
#error "TG_FUZZ_VOCAB (the directory with encoder.json and vocab.bpe) must be defined"
#endif
#ifndef TG_FUZZ_QWEN3
#error "TG_FUZZ_QWEN3 (Qwen3's tokenizer.json) must be defined"
#endif

#define QWEN_IM_START 151644
#define QWEN_MAX_ADDED 64

static tg_tokenizer *tok, *qwen;

/* Qwen3's added tokens: the ids after its BPE vocabulary, from
 * <|endoftext|> (151643) to the last id; their text is their decoding. */
static struct {
    char *text;
    size_t len;
    bool special;
} qadded[QWEN_MAX_ADDED];
static size_t n_qadded;
static int64_t qwen_first_added;
/* The bytes they start with (Qwen3's: only '<'). */
static unsigned char qfirst[QWEN_MAX_ADDED];
static size_t n_qfirst;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = tg_tokenizer_load_dir(TG_FUZZ_VOCAB);
    CHECK_MSG(tok, tg_last_error());
    qwen = tg_tokenizer_load_json(TG_FUZZ_QWEN3);
    CHECK_MSG(qwen, tg_last_error());
    qwen_first_added = tg_tokenizer_eot(qwen);
    CHECK(qwen_first_added == 151643 && tg_tokenizer_vocab_size(qwen) - qwen_first_added <= QWEN_MAX_ADDED);
    CHECK(tg_tokenizer_token_id(qwen, "<|im_start|>") == QWEN_IM_START);
    for (int64_t id = qwen_first_added; id < tg_tokenizer_vocab_size(qwen); id++) {
        CHECK(tg_tokenizer_decode(qwen, &id, 1, &qadded[n_qadded].text, &qadded[n_qadded].len) == TG_OK);
        qadded[n_qadded].special = tg_tokenizer_is_special(qwen, id);
        unsigned char c = (unsigned char)qadded[n_qadded++].text[0];
        if (!memchr(qfirst, c, n_qfirst)) qfirst[n_qfirst++] = c;
    }
    return 0;
}

/* Offset of the first ill-formed sequence (Unicode 15, table 3-7), or n. */
static size_t first_invalid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c <= 0x7F) k = 1;
        else if (c >= 0xC2 && c <= 0xDF) k = 2;
        else if (c == 0xE0) k = 3, lo = 0xA0;
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) k = 3;
        else if (c == 0xED) k = 3, hi = 0x9F;
        else if (c == 0xF0) k = 4, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) k = 4;
        else if (c == 0xF4) k = 4, hi = 0x8F;
        else return i;
        if (i + k > n) return i;
        for (size_t j = 1; j < k; j++) {
            uint8_t lo_j = j == 1 ? lo : 0x80, hi_j = j == 1 ? hi : 0xBF;
            if (s[i + j] < lo_j || s[i + j] > hi_j) return i;
        }
        i += k;
    }
    return n;
}

static void check_decode_ids(const uint8_t *data, size_t size)
{
    size_t n = size / 2;
    int64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    CHECK(ids);
    int64_t vocab = tg_tokenizer_vocab_size(tok), bad = -1;
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int64_t)data[2 * i] | (int64_t)data[2 * i + 1] << 8;
        if (bad < 0 && ids[i] >= vocab) bad = (int64_t)i;
    }
    char *text = NULL;
    size_t len = 0;
    int st = tg_tokenizer_decode(tok, ids, n, &text, &len);
    if (bad >= 0) {
        char want[64];
        snprintf(want, sizeof want, "position %lld ", (long long)bad);
        CHECK(st != TG_OK && !text && strstr(tg_last_error(), want));
    } else {
        CHECK(st == TG_OK && text && text[len] == '\0');
        size_t off = 0; /* each id's bytes, one at a time */
        for (size_t i = 0; i < n; i++) {
            char *one;
            size_t l1;
            CHECK(tg_tokenizer_decode(tok, &ids[i], 1, &one, &l1) == TG_OK);
            CHECK(l1 > 0 && off + l1 <= len && memcmp(text + off, one, l1) == 0);
            off += l1;
            free(one);
        }
        CHECK(off == len);
    }
    free(text);
    free(ids);
}

/* ---- Qwen3 ---------------------------------------------------------------------------------- */

/* The first place at or after i where an added token may start, or n
 * (memchr: a loop here over every byte, instrumented, would slow the
 * target down several times). */
static size_t next_start(const char *s, size_t n, size_t i)
{
    size_t next = n;
    for (size_t k = 0; k < n_qfirst && i < next; k++) {
        const char *p = memchr(s + i, qfirst[k], next - i);
        if (p) next = (size_t)(p - s);
    }
    return next;
}

/* What Qwen3's ids of the UTF-8 text s[0, n) decode to, appended: the added
 * tokens that may match (leftmost, the longest at that place) as they are,
 * the text between them in NFC. Returns the number of added tokens. */
static size_t qwen_expected(sbuf *b, const char *s, size_t n, bool allow_special)
{
    size_t count = 0, from = 0;
    for (size_t i = next_start(s, n, 0); i < n; i = next_start(s, n, i)) {
        size_t best = 0;
        for (size_t k = 0; k < n_qadded; k++)
            if ((!qadded[k].special || allow_special) && qadded[k].len > best && qadded[k].len <= n - i &&
                memcmp(s + i, qadded[k].text, qadded[k].len) == 0)
                best = qadded[k].len;
        if (!best) {
            i++;
            continue;
        }
        sb_put_nfc(b, s + from, i - from);
        sb_put(b, s + i, best);
        count++;
        i += best;
        from = i;
    }
    sb_put_nfc(b, s + from, n - from);
    return count;
}

/* ids decode to want, and want's count of added tokens are among them. */
static void check_qwen_ids(const int64_t *ids, size_t n, const sbuf *want, size_t n_added)
{
    size_t added = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(ids[i] >= 0 && ids[i] < tg_tokenizer_vocab_size(qwen));
        added += ids[i] >= qwen_first_added;
    }
    CHECK_MSG(added == n_added, "added tokens other than those of the text");
    char *back = NULL;
    size_t len = 0;
    CHECK(tg_tokenizer_decode(qwen, ids, n, &back, &len) == TG_OK);
    CHECK_MSG(len == want->n && (len == 0 || memcmp(back, want->s, len) == 0),
              "decode(encode(text)) != the text in NFC");
    free(back);
}

static void check_qwen(const uint8_t *data, size_t size, size_t bad)
{
    const char *text = (const char *)data;
    bool allow = size & 1;
    int64_t *ids = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    int st = tg_tokenizer_encode_special(qwen, text, size, allow, &ids, &n);
    if (bad < size) {
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", bad);
        CHECK_MSG(st != TG_OK && !ids && n == 0, "ill-formed input accepted");
        CHECK_MSG(strstr(tg_last_error(), want), tg_last_error());
    } else {
        CHECK_MSG(st == TG_OK, tg_last_error());
        CHECK(size == 0 || n > 0);
        sbuf want = {0};
        size_t n_added = qwen_expected(&want, text, size, allow);
        check_qwen_ids(ids, n, &want, n_added);
        free(want.s);
        CHECK(tg_tokenizer_encode_special(qwen, text, size, allow, &again, &n2) == TG_OK);
        CHECK(n2 == n && (n == 0 || memcmp(ids, again, n * sizeof *ids) == 0));
    }
    free(ids);
    free(again);

    /* the chat: two halves as messages, each up to its first NUL byte */
    size_t half = size / 2;
    char *content[2];
    size_t clen[2];
    for (int m = 0; m < 2; m++) {
        const uint8_t *p = data + (m ? half : 0);
        size_t len = m ? size - half : half;
        const uint8_t *nul = memchr(p, 0, len);
        clen[m] = nul ? (size_t)(nul - p) : len;
        content[m] = malloc(clen[m] + 1);
        CHECK(content[m]);
        if (clen[m]) memcpy(content[m], p, clen[m]);
        content[m][clen[m]] = '\0';
    }
    tg_chat_message msgs[2] = {{"user", content[0]}, {"assistant", content[1]}};
    tg_chat_options opt = {.add_generation_prompt = (size >> 1) & 1, .allow_special = allow};
    st = tg_tokenizer_encode_chat(qwen, msgs, 2, &opt, &ids, &n);
    size_t bad0 = first_invalid((const uint8_t *)content[0], clen[0]);
    size_t bad1 = first_invalid((const uint8_t *)content[1], clen[1]);
    if (bad0 < clen[0] || bad1 < clen[1]) {
        char want[96];
        snprintf(want, sizeof want, "message %d: invalid UTF-8 at byte %zu of its content", bad0 < clen[0] ? 0 : 1,
                 bad0 < clen[0] ? bad0 : bad1);
        CHECK_MSG(st != TG_OK && !ids && n == 0, "ill-formed message accepted");
        CHECK_MSG(strstr(tg_last_error(), want), tg_last_error());
    } else {
        CHECK_MSG(st == TG_OK, tg_last_error());
        CHECK(n > 0 && ids[0] == QWEN_IM_START);
        sbuf want = {0}, msg = {0};
        size_t n_added = 0;
        for (int m = 0; m < 2; m++) {
            msg.n = 0;
            sb_puts(&msg, msgs[m].role);
            sb_puts(&msg, "\n");
            sb_put(&msg, content[m], clen[m]);
            sb_puts(&want, "<|im_start|>");
            n_added += 2 + qwen_expected(&want, msg.s, msg.n, allow);
            sb_puts(&want, "<|im_end|>\n");
        }
        if (opt.add_generation_prompt) {
            sb_puts(&want, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
            n_added += 3;
        }
        check_qwen_ids(ids, n, &want, n_added);
        free(want.s);
        free(msg.s);
    }
    free(ids);
    free(content[0]);
    free(content[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16) return 0;
    const char *text = (const char *)data;
    size_t bad = first_invalid(data, size);
    int64_t *ids = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    int st = tg_tokenizer_encode(tok, text, size, &ids, &n);
    if (bad < size) {
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", bad);
        CHECK_MSG(st != TG_OK && !ids && n == 0, "ill-formed input accepted");
        CHECK_MSG(strstr(tg_last_error(), want), tg_last_error());
    } else {
        CHECK_MSG(st == TG_OK, tg_last_error());
        CHECK(size == 0 || n > 0);
        for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < tg_tokenizer_vocab_size(tok));
        char *back = NULL;
        size_t len = 0;
        CHECK(tg_tokenizer_decode(tok, ids, n, &back, &len) == TG_OK);
        CHECK_MSG(len == size && memcmp(back, text, size) == 0, "decode(encode(text)) != text");
        free(back);
        CHECK(tg_tokenizer_encode(tok, text, size, &again, &n2) == TG_OK);
        CHECK(n2 == n && (n == 0 || memcmp(ids, again, n * sizeof *ids) == 0));
    }
    free(ids);
    free(again);
    check_decode_ids(data, size);
    check_qwen(data, size, bad);
    return 0;
}
