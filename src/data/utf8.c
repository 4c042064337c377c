/* UTF-8: validation, code point offsets, and decoding with replacement as
 * Python's bytes.decode("utf-8", errors="replace") does it. */
#include "data_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t tg__utf8_len(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) return *cp = c, 1;
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!len || c > 0xF4 || len > n) return 0;
    uint32_t v = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    return *cp = v, len;
}

size_t tg__utf8_check(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    uint32_t cp;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = tg__utf8_len(s + i, len - i, &cp);
        if (!k) return i;
        i += k;
    }
    return len;
}

int tg_text_split(const char *text, size_t len, double ratio, size_t *split)
{
    if ((!text && len) || !split) return tg_error_status(TG_EINVAL, "text split: NULL argument");
    if (!(ratio >= 0 && ratio <= 1)) return tg_error_status(TG_EINVAL, "text split: ratio %g is outside [0, 1]", ratio);
    size_t bad = tg__utf8_check(text, len);
    if (bad < len) return tg_error_status(TG_EINVAL, "text split: invalid UTF-8 at byte %zu", bad);
    /* n = len(text) in code points: every byte that is not a continuation */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)text[i] & 0xC0) != 0x80;
    /* int(ratio * n): Python's float product, truncated */
    size_t cut = (size_t)floor(ratio * (double)n), seen = 0, i = 0;
    while (i < len && seen < cut) { /* past code point number `seen` */
        i++;
        while (i < len && ((unsigned char)text[i] & 0xC0) == 0x80) i++;
        seen++;
    }
    *split = i;
    return TG_OK;
}

/* The length of the maximal subpart of an ill-formed sequence at s (Unicode
 * 3.9, table 3-7; what Python replaces by one U+FFFD): the lead byte and the
 * continuation bytes that could still have made a valid sequence. */
static size_t maximal_subpart(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    if (!need) return 1;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    size_t k = 1;
    if (k < n && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < need && k < n && (s[k] & 0xC0) == 0x80) k++;
    }
    return k;
}

int tg_utf8_replace_invalid(const char *bytes, size_t len, char **text, size_t *out_len)
{
    if (text) *text = NULL;
    if (out_len) *out_len = 0;
    if ((!bytes && len) || !text || !out_len) return tg_error_status(TG_EINVAL, "utf8_replace_invalid: NULL argument");
    const unsigned char *s = (const unsigned char *)bytes;
    /* each bad byte becomes at most 3 bytes (EF BF BD) */
    if (len > (SIZE_MAX - 1) / 3) return tg_error_status(TG_ENOMEM, "utf8_replace_invalid: text too large");
    char *out = malloc(len * 3 + 1);
    if (!out) return tg_error_status(TG_ENOMEM, "utf8_replace_invalid: out of memory");
    size_t i = 0, o = 0;
    uint32_t cp;
    while (i < len) {
        size_t k = s[i] < 0x80 ? 1 : tg__utf8_len(s + i, len - i, &cp);
        if (k) {
            memcpy(out + o, s + i, k);
            o += k, i += k;
            continue;
        }
        out[o++] = (char)0xEF, out[o++] = (char)0xBF, out[o++] = (char)0xBD;
        i += maximal_subpart(s + i, len - i);
    }
    out[o] = '\0';
    *text = out, *out_len = o;
    return TG_OK;
}
