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
#include "q8.h"
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
    int64_t n_base;            /* ids of its BPE vocabulary (added tokens past it, such as
                                * Gemma 3's <image_soft_token>, may pass the embedding's rows) */
    char *json_path;           /* the tokenizer.json read (NULL: built from GPT-2's files) */
    char *config_path;         /* the tokenizer_config.json read (NULL: written for the family) */
} tg__export_tokenizer;

/* Reads the tokenizer of path (a tokenizer.json, a folder holding one or
 * GPT-2's encoder.json + vocab.bpe; NULL: the family's installed files) for
 * a model of family. A rank file (Llama 3's tokenizer.model) is refused:
 * one line naming what to give instead. TG_OK or an error status. */
int tg__export_tokenizer_load(const char *path, tg_gpt_family family, tg__export_tokenizer *out);
void tg__export_tokenizer_free(tg__export_tokenizer *t);
/* A model of vocab_size ids can take the tokenizer: its BPE vocabulary fits;
 * TG_EINVAL naming both sizes otherwise (op prefixes the message). */
int tg__export_tokenizer_fits(const tg__export_tokenizer *t, int64_t vocab_size, const char *op);
/* The id of a token given as its text (an added token's content, else a
 * vocabulary entry, as tokenizer.json spells it); -1 if none. */
int64_t tg__export_tokenizer_id(const tg__export_tokenizer *t, const char *content);

/* ---- conversions (quant.c) ---------------------------------------------------------------- */

/* IEEE half and Q8_0 blocks: src/tensor/q8.h */

/* ---- atomic output (atomic.c) ------------------------------------------------------------- */

/* A folder written in a temporary folder beside it, then renamed into place. */
typedef struct {
    char *dir;  /* the target */
    char *tmp;  /* the temporary folder being written (parent/.name.tmp-XXXXXX) */
    char *old;  /* where an existing target is moved during the swap */
} tg__export_dir;
/* Checks dir and makes the temporary folder beside it (what: the caller's
 * name for messages). One line: TG_EINVAL for a path that exists and is not
 * a folder (or is a symbolic link to one), a folder holding anything other
 * than an export's files (config.json, model*.safetensors, tokenizer.json,
 * adapter_config.json, ...) unless force, no name ("", "/", ".", ".."); TG_EIO
 * for a missing or unwritable parent, naming it. Nothing is created on
 * failure, and d is then empty. */
int tg__export_dir_begin(tg__export_dir *d, const char *dir, bool force, const char *what);
/* The path of name inside the temporary folder (malloc'd; NULL: no memory). */
char *tg__export_dir_path(const tg__export_dir *d, const char *name);
/* Renames the temporary folder into place: an existing target is moved
 * aside, the new one renamed in, the old one removed (moved back if the
 * rename fails). Always ends d: on failure the temporary folder is removed;
 * a later abort does nothing. */
int tg__export_dir_commit(tg__export_dir *d);
/* Removes the temporary folder and what it holds; frees d's strings (an
 * empty or ended d: nothing). */
void tg__export_dir_abort(tg__export_dir *d);

/* A file written beside path under a temporary name (parent/.name.tmp-XXXXXX,
 * o->f open for writing), then renamed. begin: TG_EINVAL for a path that
 * exists and is not a regular file or that names no file (empty, ending in
 * '/'), TG_EIO when the temporary file cannot be made (naming the path). A
 * symbolic link is replaced by the file, what it points to left as it is. */
typedef struct {
    char *path, *tmp;
    FILE *f;
} tg__export_file;
int tg__export_file_begin(tg__export_file *o, const char *path, const char *what);
/* Checks every step (a write that failed earlier, fflush, fsync, fclose)
 * and renames; on any failure removes the temporary file and reports (a full
 * disk or a file size limit: TG_EIO naming the path and the reason). Always
 * ends o; a later abort does nothing. */
int tg__export_file_commit(tg__export_file *o);
void tg__export_file_abort(tg__export_file *o);

#endif
