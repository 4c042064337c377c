/* tapegrad/data.h: GPT-2's byte-level BPE tokenizer, equal to tiktoken's
 * "gpt2" encoding (README.md, "Tokenizer"), and the book's chapter-5 text
 * pipeline: the train/validation split, windows of ids, and loaders that
 * shuffle exactly as PyTorch's DataLoader.
 *
 * A tokenizer reads GPT-2's encoder.json and vocab.bpe once (the project
 * ships them: data/gpt2/, installed to share/tapegrad/gpt2/, found by
 * tg_tokenizer_load_dir(NULL)). Encoding
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
/* dir/encoder.json and dir/vocab.bpe. dir NULL: the folder
 * tg_tokenizer_default_dir() names. */
TG_API tg_tokenizer *tg_tokenizer_load_dir(const char *dir);
/* The folder of GPT-2's vocabulary: $TAPEGRAD_DATA/gpt2 when the
 * environment variable TAPEGRAD_DATA is set (a data folder as installed:
 * gpt2/ and the-verdict.txt), else the installed one,
 * <prefix>/share/tapegrad/gpt2 (`pkg-config --variable=datadir tapegrad`).
 * NULL with a message if that folder holds no encoder.json. The string
 * stays valid until the next call on the same thread. */
TG_API const char *tg_tokenizer_default_dir(void);
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
/* The same as text (tiktoken's decode): bytes that are not UTF-8 (ids may
 * end inside a character) become U+FFFD as Python's
 * bytes.decode("utf-8", errors="replace") makes them. */
TG_API int tg_tokenizer_decode_text(const tg_tokenizer *tok, const int64_t *ids, size_t n, char **text, size_t *len);

/* ---- UTF-8 text -------------------------------------------------------------------------- */

/* bytes.decode("utf-8", errors="replace"): a malloc'd, NUL-terminated copy
 * in which each maximal ill-formed subsequence is one U+FFFD. */
TG_API int tg_utf8_replace_invalid(const char *bytes, size_t len, char **text, size_t *out_len);
/* The byte offset of code point int(ratio * n) of len bytes of UTF-8 text
 * (n = its code points, Python's len): text[:split] and text[split:] are the
 * book's train and validation parts (ratio 0.9). TG_EINVAL "invalid UTF-8
 * at byte N", or for a ratio outside [0, 1]. */
TG_API int tg_text_split(const char *text, size_t len, double ratio, size_t *split);

/* ---- GPTDatasetV1: windows of ids ---------------------------------------------------------- */

typedef struct tg_text_dataset tg_text_dataset;
/* Windows of `context` ids every `stride` ids (for i in range(0, n_ids -
 * context, stride)), each with its target window shifted by one. Copies the
 * ids. Free with tg_text_dataset_free. */
TG_API tg_text_dataset *tg_text_dataset_new(const int64_t *ids, int64_t n_ids, int64_t context, int64_t stride);
TG_API void tg_text_dataset_free(tg_text_dataset *ds);
/* The number of windows (len(dataset)) and their length. */
TG_API int64_t tg_text_dataset_len(const tg_text_dataset *ds);
TG_API int64_t tg_text_dataset_context(const tg_text_dataset *ds);
/* Window i into input and target (context ids each). */
TG_API int tg_text_dataset_get(const tg_text_dataset *ds, int64_t i, int64_t *input, int64_t *target);
/* The windows idx[0..count) stacked: (count, context) TG_I64 tensors in tp. */
TG_API int tg_text_dataset_batch(const tg_text_dataset *ds, tg_tape *tp, const int64_t *idx, int64_t count,
                                 tg_tensor **input, tg_tensor **target);

/* ---- DataLoader ------------------------------------------------------------------------------ */

typedef struct {
    int64_t batch_size;      /* >= 1 */
    bool shuffle, drop_last;
    tg_generator *generator; /* what iteration draws from; NULL: the default generator */
} tg_loader_options;

typedef struct tg_loader tg_loader;
/* A loader over n samples (indices 0..n-1), or over a dataset's windows
 * (borrowed: it must outlive the loader). Free with tg_loader_free. */
TG_API tg_loader *tg_loader_new(int64_t n, tg_loader_options opt);
TG_API tg_loader *tg_text_loader_new(const tg_text_dataset *ds, tg_loader_options opt);
TG_API void tg_loader_free(tg_loader *l);
/* len(loader): batches per pass. */
TG_API int64_t tg_loader_len(const tg_loader *l);
/* iter(loader): a pass over the loader, with its own order; several may
 * run at once (an evaluation iterating the train loader while an epoch is
 * iterating it too). It draws as PyTorch's DataLoader iterator draws: one
 * 64-bit base seed from the generator now, and, when shuffling, the
 * sampler's seed (another 64-bit draw) at the pass's first next, from which
 * a fresh generator takes randperm(n). Free with tg_loader_iter_free (a pass
 * may be left early). The loader must outlive its passes. */
typedef struct tg_loader_iter tg_loader_iter;
TG_API tg_loader_iter *tg_loader_iter_new(const tg_loader *l);
TG_API void tg_loader_iter_free(tg_loader_iter *it);
/* next(it): 1 with the batch's sample indices in idx (room for batch_size)
 * and their count; 0 at the end of the pass (a short last batch is dropped
 * with drop_last), and 0 again after that; a negative status on error. */
TG_API int tg_loader_iter_next_indices(tg_loader_iter *it, int64_t *idx, int64_t *count);
/* The same for a loader over a dataset: the batch's (B, context) input and
 * target ids in tp. */
TG_API int tg_loader_iter_next(tg_loader_iter *it, tg_tape *tp, tg_tensor **input, tg_tensor **target);

#ifdef __cplusplus
}
#endif
#endif
