/* Private to src/data: the tokenizer's builder, shared by the readers of
 * its three file formats (tokenizer_files.c) and the core that encodes and
 * decodes (tokenizer.c). A reader makes an empty tokenizer, adds the
 * vocabulary (token bytes -> id), the merges or nothing (a rank file's
 * merges are derived from its ranks), the added tokens, and finishes it with
 * its pre-tokenizer pattern and normaliser.
 *
 * Two kinds of vocabulary: byte-level (GPT-2, Qwen3, Llama 3: a token is
 * its bytes, BPE starts from one token per byte) and byte fallback (Gemma
 * 3's tokenizer.json, tg__tok_set_byte_fallback): a token is UTF-8 text in
 * which U+2581 stands for a space, BPE starts from one token per character,
 * a character that is no token is its bytes as the tokens "<0x00>" ..
 * "<0xFF>", and decoding writes U+2581 as a space and "<0xNN>" as byte NN. */
#ifndef TG_TOKENIZER_INTERNAL_H
#define TG_TOKENIZER_INTERNAL_H

#include "data_internal.h"

/* GPT-2's pattern (the "gpt2" encoding of tiktoken; tokenizer.json's
 * ByteLevel pre-tokenizer with use_regex). */
#define TG__GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* NFC (utf8proc), or tokenizer.json's Replace of " " by U+2581 (Gemma 3). */
typedef enum { TG__NORM_NONE, TG__NORM_NFC, TG__NORM_METASPACE } tg__normalizer;

tg_tokenizer *tg__tok_new(void);
/* A vocabulary entry. TG_EFORMAT (no message) if the bytes or the id are
 * already taken or the id is outside [0, 2^24); TG_ENOMEM. */
int tg__tok_add_token(tg_tokenizer *t, const char *bytes, size_t len, int64_t id);
/* The merge of two vocabulary entries, at the next rank (the order of the
 * calls); a repeated pair keeps its first rank. TG_EFORMAT (no message) if
 * a, b or a+b is not in the vocabulary; TG_ENOMEM. */
int tg__tok_add_merge(tg_tokenizer *t, const char *a, size_t la, const char *b, size_t lb);
/* A token matched in the text before the pattern runs: always when special
 * is false, only when the caller allows special tokens when it is true.
 * TG_EFORMAT (no message) for empty content or an id already given to
 * other bytes; TG_ENOMEM. */
int tg__tok_add_added(tg_tokenizer *t, const char *content, size_t len, int64_t id, bool special);
/* Makes the vocabulary byte fallback (above); before tg__tok_finish. */
void tg__tok_set_byte_fallback(tg_tokenizer *t);
/* The ids a tokenizer.json's post-processor puts before (pre) and after
 * (post) one text, at most 16 in all, checked against the vocabulary by
 * tg__tok_finish; or, with unsupported non-NULL, the post-processor tapegrad
 * does not implement (named by tg_tokenizer_encode_add_special's error).
 * TG_EFORMAT (no message) past 16 ids. */
int tg__tok_set_post(tg_tokenizer *t, const int64_t *pre, size_t n_pre, const int64_t *post, size_t n_post,
                     const char *unsupported);
/* Ends the build: rank-file merges (derive_merges: every split of a token
 * into two tokens merges into it at its id's rank, as tiktoken merges),
 * the 256 byte tokens, the pattern (PCRE2, UTF and Unicode properties;
 * NULL only for a byte-fallback vocabulary: the text between added tokens
 * is one piece).
 * whole_pieces: a piece that is a token itself is that token (tiktoken;
 * tokenizer.json's ignore_merges). what names the file in messages. */
int tg__tok_finish(tg_tokenizer *t, const char *pattern, tg__normalizer norm, bool whole_pieces, bool derive_merges,
                   const char *what);

/* GPT-2's byte alphabet (bytes_to_unicode: printable Latin-1 bytes stand
 * for themselves, the other 68 for U+0100 ...), inverted: code point ->
 * byte, -1 outside. */
void tg__byte_alphabet_inverse(int16_t inv[512]);
/* A string in that alphabet back to bytes (out has room for len bytes); -1
 * when a character is outside the alphabet or the string is not UTF-8. */
long tg__byte_alphabet_decode(const int16_t *inv, const char *s, size_t len, char *out);

#endif
