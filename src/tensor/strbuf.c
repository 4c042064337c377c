/* A growing string: appends never fail loudly, they set `failed`, so a long
 * formatting routine checks once at its end. */
#include "internal.h"

#include <stdlib.h>

void tg__sb_putn(tg__strbuf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void tg__sb_puts(tg__strbuf *b, const char *s) { tg__sb_putn(b, s, strlen(s)); }

void tg__sb_spaces(tg__strbuf *b, int n)
{
    for (int i = 0; i < n; i++) tg__sb_putn(b, " ", 1);
}
