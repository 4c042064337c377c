/* tapegrad/data.h: GPT-2's byte-level BPE tokenizer, equal to tiktoken's
 * "gpt2" encoding (README.md, "Tokenizer").
 *
 * A tokenizer reads GPT-2's encoder.json and vocab.bpe once (the project
 * ships them: data/gpt2/, installed to share/tapegrad/gpt2/). Encoding
 * splits the text at "<|endoftext|>" (which becomes its id, 50256), cuts the
 * rest with GPT-2's pattern (PCRE2), maps each piece's bytes through the
 * byte-level alphabet and merges pairs by lowest rank; decoding gives back
 * the exact bytes. Invalid UTF-8 and malformed vocabulary files are errors
 * with a message, never a crash. */
#ifndef TAPEGRAD_DATA_H
#define TAPEGRAD_DATA_H

#include "tapegrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_tokenizer tg_tokenizer;

/* Reads encoder.json (with jansson) and vocab.bpe; NULL and a message naming
 * the file and the problem if either is missing or malformed. */
TG_API tg_tokenizer *tg_tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path);
/* dir/encoder.json and dir/vocab.bpe. */
TG_API tg_tokenizer *tg_tokenizer_load_dir(const char *dir);
TG_API void tg_tokenizer_free(tg_tokenizer *tok);
/* Number of ids (50257 for GPT-2: one more than the largest id). */
TG_API int64_t tg_tokenizer_vocab_size(const tg_tokenizer *tok);
/* The id of "<|endoftext|>" (50256), or -1 if the vocabulary has none. */
TG_API int64_t tg_tokenizer_eot(const tg_tokenizer *tok);
/* The ids of len bytes of UTF-8 text, in a malloc'd array the caller frees
 * (NULL when there are none). TG_EINVAL "invalid UTF-8 at byte N" for text
 * that is not UTF-8. Not thread-safe per tokenizer (it caches words). */
TG_API int tg_tokenizer_encode(tg_tokenizer *tok, const char *text, size_t len, int64_t **ids, size_t *n_ids);
/* The same ids as a 1-D TG_I64 tensor in tp (NULL with a message on error). */
TG_API tg_tensor *tg_tokenizer_encode_tensor(tg_tape *tp, tg_tokenizer *tok, const char *text, size_t len);
/* The bytes of n ids, malloc'd and NUL-terminated (*len excludes the NUL);
 * TG_EINVAL naming an id outside the vocabulary and its position. */
TG_API int tg_tokenizer_decode(const tg_tokenizer *tok, const int64_t *ids, size_t n, char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
