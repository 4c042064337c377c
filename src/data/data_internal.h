/* Private to src/data: UTF-8 helpers shared by the tokenizer and the text
 * pipeline, and reading a whole file. */
#ifndef TG_DATA_INTERNAL_H
#define TG_DATA_INTERNAL_H

#include "internal.h"
#include "tapegrad/data.h"

/* Length of the valid UTF-8 sequence at s (of at most n bytes, n >= 1) and
 * its code point, or 0 when it is not valid (overlong forms, surrogates and
 * values past U+10FFFF are not). */
size_t tg__utf8_len(const unsigned char *s, size_t n, uint32_t *cp);
/* Offset of the first byte that is not valid UTF-8, or len. */
size_t tg__utf8_check(const char *text, size_t len);

/* The whole of path (at most limit bytes), malloc'd with a NUL after its
 * *len bytes; NULL with *err set (errno of fopen, EIO for a read error,
 * ENOMEM, EFBIG past limit) and no message: callers name the file. */
char *tg__read_file(const char *path, size_t limit, size_t *len, int *err);

#endif
