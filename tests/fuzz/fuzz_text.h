/* A growing text buffer for the tokenizer targets (fuzz_tokenizer.c,
 * fuzz_tokenizer_json.c), which build the text a tokenizer's ids must decode
 * to: pieces appended as they are or in NFC (utf8proc, as the library's
 * normaliser). Include after fuzz.h. */
#ifndef TAPEGRAD_FUZZ_TEXT_H
#define TAPEGRAD_FUZZ_TEXT_H

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static inline void sb_put(sbuf *b, const void *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->s = realloc(b->s, cap);
        CHECK(b->s);
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static inline void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* The NFC of n bytes of UTF-8, appended. */
static inline void sb_put_nfc(sbuf *b, const char *s, size_t n)
{
    if (!n) return;
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t m =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    CHECK_MSG(m >= 0, utf8proc_errmsg(m));
    sb_put(b, nfc, (size_t)m);
    free(nfc);
}

#endif
