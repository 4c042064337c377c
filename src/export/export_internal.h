/* Private to src/export: the pieces tg_export_hf (hf.c) and tg_export_gguf
 * (gguf.c) share. src/export sits above src/nn and src/data
 * (DESIGN.md): it reads a model through the public API
 * (tg_decoder_get_config, tg_decoder_hf_state_dict) and a tokenizer's
 * files as JSON. */
#ifndef TG_EXPORT_INTERNAL_H
#define TG_EXPORT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "internal.h"
#include "tapegrad/data.h"
#include "tapegrad/export.h"

/* ---- the tokenizer's files (tokenizer.c) ------------------------------------------------ */

/* A model's tokenizer as the exported files carry it. */
typedef struct {
    json_t *tokenizer;         /* tokenizer.json's object: the file's own, or built
                                * from GPT-2's encoder.json + vocab.bpe (a BPE
                                * model, ByteLevel pre-tokenizer and decoder,
                                * <|endoftext|> an added special token) */
    json_t *config;            /* tokenizer_config.json's object: the file beside the
                                * source's, else one written for the family (its
                                * special tokens and chat template) */
    const char *chat_template; /* config's "chat_template" (NULL: none), borrowed */
    int64_t bos, eos, eot, pad; /* special ids as the family's files name them; -1: none */
    int64_t n_vocab;           /* ids the tokenizer knows (vocab and added tokens) */
} tg__export_tokenizer;

/* Reads the tokenizer of path (a tokenizer.json, a folder holding one or
 * GPT-2's encoder.json + vocab.bpe; NULL: the family's installed files) for
 * a model of family. A rank file (Llama 3's tokenizer.model) is refused:
 * one line naming what to give instead. TG_OK or an error status. */
int tg__export_tokenizer_load(const char *path, tg_gpt_family family, tg__export_tokenizer *out);
void tg__export_tokenizer_free(tg__export_tokenizer *t);

/* ---- conversions (quant.c) ---------------------------------------------------------------- */

/* float32 -> IEEE half, round to nearest even (torch's .half(), ggml's
 * GGML_FP32_TO_FP16), overflow to infinity, NaN kept a NaN. */
uint16_t tg__f16_from_f32(float x);
float tg__f32_from_f16(uint16_t h);
/* ggml's quantize_row_q8_0 (the reference rounding of ggml-quants.c): n a
 * multiple of 32; out receives n / 32 blocks of 34 bytes (the f16 scale
 * d = max|x| / 127, then 32 int8 values round(x / d)). */
void tg__q8_0_quantize(const float *x, int64_t n, uint8_t *out);

/* ---- atomic output (atomic.c) ------------------------------------------------------------- */

/* A folder written in a temporary folder beside it, then renamed into place. */
typedef struct {
    char *dir;  /* the target */
    char *tmp;  /* the temporary folder being written */
    char *old;  /* where an existing target is moved during the swap */
} tg__export_dir;
/* Checks dir (a path that exists and is not a folder; a folder holding files
 * other than an export's unless force; an unwritable parent: one line,
 * TG_EIO or TG_EINVAL) and makes the temporary folder. */
int tg__export_dir_begin(tg__export_dir *d, const char *dir, bool force, const char *what);
/* The path of name inside the temporary folder (malloc'd; NULL: no memory). */
char *tg__export_dir_path(const tg__export_dir *d, const char *name);
/* Renames the temporary folder into place (replacing the old one). */
int tg__export_dir_commit(tg__export_dir *d);
/* Removes the temporary folder and what it holds; frees d's strings. */
void tg__export_dir_abort(tg__export_dir *d);

/* A file written beside path under a temporary name, then renamed. */
typedef struct {
    char *path, *tmp;
    FILE *f;
} tg__export_file;
int tg__export_file_begin(tg__export_file *o, const char *path, const char *what);
/* Flushes, fsyncs, closes and renames; on any failure removes the temporary
 * file and reports (a full disk: TG_EIO naming the path). */
int tg__export_file_commit(tg__export_file *o);
void tg__export_file_abort(tg__export_file *o);

#endif
