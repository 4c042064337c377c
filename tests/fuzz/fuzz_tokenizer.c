/* libFuzzer target: GPT-2's tokenizer (tg_tokenizer_encode/decode) on
 * arbitrary bytes, with the vocabulary the project ships (data/gpt2/).
 *
 * Invariants checked on every input:
 *   - well-formed UTF-8 (checked here by Unicode's table of well-formed byte
 *     sequences, independently of the library) encodes; every id is inside
 *     the vocabulary, decoding gives back the input byte for byte, and a
 *     second encoding (through the word cache) gives the same ids;
 *   - ill-formed input fails with "invalid UTF-8 at byte N", N the offset of
 *     the first ill-formed sequence, and no ids;
 *   - the input read as 16-bit ids decodes to the concatenation of their
 *     tokens, or fails naming the first id outside the vocabulary. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_tokenizer"
#include "fuzz.h"

#include <tapegrad.h>

#ifndef TG_FUZZ_VOCAB
#error "TG_FUZZ_VOCAB (the directory with encoder.json and vocab.bpe) must be defined"
#endif

static tg_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = tg_tokenizer_load_dir(TG_FUZZ_VOCAB);
    CHECK_MSG(tok, tg_last_error());
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
    return 0;
}
