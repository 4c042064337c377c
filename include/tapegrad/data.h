/* tapegrad/data.h: the byte-level BPE tokenizers of GPT-2 (equal to
 * tiktoken's "gpt2" encoding), Qwen3 and Llama 3, and Gemma 3's BPE with
 * byte fallback (each equal to its tokenizer.json run by Hugging Face's
 * tokenizers), and their chat formats
 * (docs/tokenizers.md), and the book's chapter-5 text pipeline: the
 * train/validation split, windows of ids, and loaders that shuffle exactly
 * as PyTorch's DataLoader; the fine-tuning data of chapters 6 and 7: the
 * classifier's CSV (SpamDataset), the instruction JSON, format_input, the
 * 85/10/5 split, InstructionDataset and custom_collate_fn.
 *
 * A tokenizer is read once from a Hugging Face tokenizer.json, from
 * tiktoken's rank file (Llama 3's tokenizer.model) or from GPT-2's
 * encoder.json and vocab.bpe (the project ships GPT-2's and Qwen3's:
 * data/gpt2/, data/qwen3/, installed to share/tapegrad/). Encoding finds the
 * added tokens in the text (special ones only where the caller allows
 * them), normalises the rest (NFC, when the file asks for it), cuts it with
 * the file's pattern (PCRE2), maps each piece's bytes through the
 * byte-level alphabet and merges pairs by lowest rank; decoding gives back
 * the exact bytes. Gemma 3's file writes spaces as U+2581 and starts BPE
 * from characters, a character that is no token being its bytes' "<0xNN>"
 * tokens (docs/tokenizers.md). Invalid UTF-8 and malformed files are errors
 * with a message, never a crash. */
#ifndef TAPEGRAD_DATA_H
#define TAPEGRAD_DATA_H

#include "tapegrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_tokenizer tg_tokenizer;

/* A token matched in the text before the pattern cuts it (tokenizer.json's
 * added_tokens). A special one (special true: "<|im_start|>",
 * "<|eot_id|>") is matched only where the caller allows special tokens and
 * is plain text elsewhere; one that is not special (Qwen3's "<think>",
 * GPT-2's "<|endoftext|>") is matched in any text. */
typedef struct {
    const char *content;
    int64_t id;
    bool special;
} tg_added_token;

/* Llama 3's pre-tokenizer pattern (digits in threes). */
#define TG_LLAMA3_PATTERN                                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Any tokenizer file: a tokenizer.json (tg_tokenizer_load_json), a rank file
 * such as Llama 3's tokenizer.model (read with TG_LLAMA3_PATTERN and Llama
 * 3's 256 special tokens, as the book's Llama3Tokenizer reads it), or a
 * folder holding tokenizer.json, encoder.json + vocab.bpe, or
 * tokenizer.model (tried in that order). path NULL: GPT-2's installed files
 * (tg_tokenizer_load_dir(NULL)). NULL and a message naming the file and the
 * problem on error. */
TG_API tg_tokenizer *tg_tokenizer_load_file(const char *path);
/* A Hugging Face tokenizer.json: model BPE (vocab; merges as "a b" strings
 * or ["a", "b"] pairs; ignore_merges: a piece found whole in the vocabulary
 * is one id), normalizer NFC or none, pre_tokenizer ByteLevel or Split
 * (Regex, Isolated) then ByteLevel, added_tokens with their special flag;
 * or, with model byte_fallback (Gemma 3's), a vocabulary of text, the
 * normalizer Replace " " -> U+2581 or none, no pre_tokenizer (or a Split on
 * " " after that normalizer), and the decoder Replace U+2581 -> " ",
 * ByteFallback, Fuse. Anything else (another model, a normaliser or
 * pre-tokenizer tapegrad does not implement, lstrip/rstrip/single_word added
 * tokens) is an error that names it, never ignored. The post-processor is
 * not applied by the encode functions (Hugging Face's encode(text,
 * add_special_tokens=False)); tg_tokenizer_encode_add_special applies it. */
TG_API tg_tokenizer *tg_tokenizer_load_json(const char *path);
/* tiktoken's rank file (a base64 token, a space and its rank per line; the
 * rank is the id), cut by pattern (PCRE2 syntax), with n_added added tokens.
 * BPE merges the adjacent pair whose bytes together have the lowest rank,
 * and a piece found whole is one id, as tiktoken does. */
TG_API tg_tokenizer *tg_tokenizer_load_tiktoken(const char *path, const char *pattern, const tg_added_token *added,
                                                size_t n_added);
/* GPT-2's encoder.json (with jansson) and vocab.bpe; NULL and a message
 * naming the file and the problem if either is missing or malformed.
 * "<|endoftext|>" is an added token that is not special (it is id 50256 in
 * any text). */
TG_API tg_tokenizer *tg_tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path);
/* dir/encoder.json and dir/vocab.bpe. dir NULL: the folder
 * tg_tokenizer_default_dir() names. */
TG_API tg_tokenizer *tg_tokenizer_load_dir(const char *dir);
/* The folder of GPT-2's vocabulary: $TAPEGRAD_DATA/gpt2 when the
 * environment variable TAPEGRAD_DATA is set (a data folder as installed:
 * gpt2/, qwen3/ and the-verdict.txt), else the installed one,
 * <prefix>/share/tapegrad/gpt2 (`pkg-config --variable=datadir tapegrad`).
 * NULL with a message if that folder holds no encoder.json. The string
 * stays valid until the next call on the same thread. */
TG_API const char *tg_tokenizer_default_dir(void);
TG_API void tg_tokenizer_free(tg_tokenizer *tok);
/* Number of ids: one more than the largest id of the vocabulary and the
 * added tokens (GPT-2 50257, Qwen3 151669, Llama 3 128256). */
TG_API int64_t tg_tokenizer_vocab_size(const tg_tokenizer *tok);
/* The id of "<|endoftext|>" (GPT-2 50256, Qwen3 151643), else of
 * "<|end_of_text|>" (Llama 3 128001), else of "<eos>" (Gemma 3 1), or -1. */
TG_API int64_t tg_tokenizer_eot(const tg_tokenizer *tok);
/* The id of a token given as its exact text (an added token, or a
 * vocabulary entry's bytes), or -1. */
TG_API int64_t tg_tokenizer_token_id(const tg_tokenizer *tok, const char *token);
/* Whether id is a special added token. */
TG_API bool tg_tokenizer_is_special(const tg_tokenizer *tok, int64_t id);
/* The ids of len bytes of UTF-8 text, in a malloc'd array the caller frees
 * (NULL when there are none). Special tokens are plain text (tiktoken's
 * encode with nothing allowed and nothing disallowed); added tokens that are
 * not special are matched. TG_EINVAL "invalid UTF-8 at byte N" for text that
 * is not UTF-8. Not thread-safe per tokenizer (it caches words). */
TG_API int tg_tokenizer_encode(tg_tokenizer *tok, const char *text, size_t len, int64_t **ids, size_t *n_ids);
/* The same, with the special tokens matched too when allow_special is true
 * (tiktoken's allowed_special="all"; Hugging Face's encode). */
TG_API int tg_tokenizer_encode_special(tg_tokenizer *tok, const char *text, size_t len, bool allow_special,
                                       int64_t **ids, size_t *n_ids);
/* Hugging Face's encode(text, add_special_tokens=True): the ids of
 * tg_tokenizer_encode_special with those the tokenizer.json's post-processor
 * puts around one text (TemplateProcessing's "single": Gemma 3's <bos>,
 * id 2, first). Qwen3's and Llama 3's tokenizer.json (a ByteLevel
 * post-processor), GPT-2's files and rank files add none. TG_EFORMAT naming
 * the post-processor where the file's is one tapegrad does not implement
 * (RobertaProcessing, ...). */
TG_API int tg_tokenizer_encode_add_special(tg_tokenizer *tok, const char *text, size_t len, bool allow_special,
                                           int64_t **ids, size_t *n_ids);
/* tg_tokenizer_encode's ids as a 1-D TG_I64 tensor in tp (NULL with a
 * message on error). */
TG_API tg_tensor *tg_tokenizer_encode_tensor(tg_tape *tp, tg_tokenizer *tok, const char *text, size_t len);
/* The bytes of n ids, malloc'd and NUL-terminated (*len excludes the NUL);
 * TG_EINVAL naming an id outside the vocabulary and its position. */
TG_API int tg_tokenizer_decode(const tg_tokenizer *tok, const int64_t *ids, size_t n, char **text, size_t *len);
/* The same as text (tiktoken's decode): bytes that are not UTF-8 (ids may
 * end inside a character) become U+FFFD as Python's
 * bytes.decode("utf-8", errors="replace") makes them. Gemma 3's byte tokens
 * as Hugging Face's ByteFallback decoder makes them: a run of "<0xNN>"
 * tokens that is not UTF-8 is one U+FFFD per token. */
TG_API int tg_tokenizer_decode_text(const tg_tokenizer *tok, const int64_t *ids, size_t n, char **text, size_t *len);
/* Hugging Face's decode: as tg_tokenizer_decode_text, but ids without a
 * token are skipped instead of refused (a model's embedding may have rows
 * beyond its tokenizer's vocabulary: Qwen3's 151,936 against 151,669
 * tokens); *skipped (may be NULL) counts them. */
TG_API int tg_tokenizer_decode_skip(const tg_tokenizer *tok, const int64_t *ids, size_t n, char **text, size_t *len,
                                    size_t *skipped);

/* ---- chat formats ------------------------------------------------------------------------ */

/* The chat format a tokenizer speaks, found from its special tokens. */
typedef enum {
    TG_CHAT_NONE,   /* GPT-2: no chat tokens */
    TG_CHAT_QWEN,   /* "<|im_start|>" .. "<|im_end|>" (Qwen3, ChatML) */
    TG_CHAT_LLAMA3, /* "<|start_header_id|>" .. "<|eot_id|>" */
    TG_CHAT_GEMMA3, /* "<bos>", "<start_of_turn>" .. "<end_of_turn>" */
} tg_chat_format;

typedef struct {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} tg_chat_message;

typedef struct {
    bool add_generation_prompt; /* end with the assistant's header, for generation */
    bool thinking;              /* Qwen3: leave the thinking open (no empty "<think>\n\n</think>\n\n") */
    bool bos;                   /* Llama 3: "<|begin_of_text|>" first (Meta's dialog prompt; the book adds none);
                                   Gemma 3 always writes "<bos>" first, as its template does */
    bool allow_special;         /* special tokens inside the contents are matched (else plain text) */
} tg_chat_options;

TG_API tg_chat_format tg_tokenizer_chat_format(const tg_tokenizer *tok);
TG_API const char *tg_chat_format_name(tg_chat_format format); /* "none", "qwen", "llama3", "gemma3" */
/* The id that ends a turn in the tokenizer's chat format, where generation
 * stops: "<|im_end|>" (Qwen3), "<|eot_id|>" (Llama 3), "<end_of_turn>"
 * (Gemma 3, id 106); -1 without a chat format. */
TG_API int64_t tg_tokenizer_chat_end_id(const tg_tokenizer *tok);
/* The ids of n messages as the book formats them (options NULL: all false):
 *   Qwen3 (Qwen3Tokenizer.format_qwen_chat, the whole string encoded):
 *     "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then with
 *     add_generation_prompt "<|im_start|>assistant\n" and, unless
 *     thinking, "<think>\n\n</think>\n\n";
 *   Llama 3 (llama3.py's ChatFormat, per message): <|start_header_id|>,
 *     role, <|end_header_id|>, "\n\n", the content stripped of white space
 *     at both ends, <|eot_id|>; with add_generation_prompt the assistant's
 *     header and "\n\n".
 *   Gemma 3 (the chat template of its tokenizer_config.json, as Hugging
 *     Face's apply_chat_template renders and encodes it): "<bos>", then per
 *     message "<start_of_turn>{role}\n{content}<end_of_turn>\n" with the
 *     role "assistant" written "model" and the content stripped of white
 *     space at both ends (Python's str.strip); a first message of role
 *     "system" is no turn: its content as it is and "\n\n" go before the
 *     first turn's content (with no turn after it, it is dropped, as the
 *     template drops it); then with add_generation_prompt
 *     "<start_of_turn>model\n". After the system message the turns must
 *     alternate, user first (turn k is "user" exactly when k is even), and
 *     there must be a message, as the template requires; else TG_EINVAL.
 * The format's own tokens are always special ids; the contents are encoded
 * with special tokens as text unless allow_special. TG_EINVAL for a
 * tokenizer without a chat format, a NULL or empty role or a NULL content. */
TG_API int tg_tokenizer_encode_chat(tg_tokenizer *tok, const tg_chat_message *messages, size_t n,
                                    const tg_chat_options *options, int64_t **ids, size_t *n_ids);

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

/* The loader's batch size and number of samples. */
TG_API int64_t tg_loader_batch_size(const tg_loader *l);
TG_API int64_t tg_loader_num_samples(const tg_loader *l);
/* Where a pass is: the next sample's position in its order (-1 before the
 * first next, when the order is not drawn yet) and the order (n sample
 * indices; NULL before the first next). resume: a pass of l at pos in
 * order (copied; a permutation of l's samples, else NULL with a message),
 * drawing nothing: a checkpoint's pass continued where it stopped. */
TG_API int64_t tg_loader_iter_position(const tg_loader_iter *it, const int64_t **order);
TG_API tg_loader_iter *tg_loader_iter_resume(const tg_loader *l, int64_t pos, const int64_t *order);

/* ---- fine-tuning data (the book's chapters 6 and 7) ---------------------------------------- */

/* ---- classifier CSV (chapter 6's SpamDataset) ---- */
typedef struct tg_class_dataset tg_class_dataset;
/* The most classes a dataset may name (2^20): a label is a row of the
 * classifier head, Linear(emb, classes), so a larger one is a typo or a
 * corrupt file, not a class count (a label of 2^31 - 1 would ask for a
 * head of 2^31 rows). */
#define TG_CLASS_DATASET_MAX_CLASSES ((int64_t)1 << 20)
/* Reads csv_path: RFC 4180 CSV (libcsv, strict) with a header row holding
 * (at least) the columns "Label" and "Text" in any order (other columns
 * ignored; a repeated name: its first column, as pandas.read_csv takes it).
 * Labels are class indices in [0, TG_CLASS_DATASET_MAX_CLASSES) (decimal
 * digits only: no sign, no surrounding spaces), text UTF-8. Quoted fields keep their embedded
 * newlines, commas and quotes (a doubled quote is one), as pandas.read_csv
 * keeps them; rows may end in LF, CRLF or CR; blank lines are skipped;
 * unquoted fields keep their spaces; a leading UTF-8 byte order mark is
 * dropped.
 * Each text is encoded with tok (tg_tokenizer_encode: unlike tiktoken's
 * encode, which refuses it, "<|endoftext|>" in a text becomes its id,
 * 50256), then, as the book's SpamDataset: max_length 0 -> padded to the
 * longest encoded text; max_length > 0 -> truncated to max_length ids and
 * padded to it; padding id pad_id (0 <= pad_id < vocabulary size).
 * NULL and one line naming the file, and the row when there is one:
 * missing or unreadable file, empty file, no header, a header without
 * "Label" or "Text", a row with a different number of fields than the
 * header, an unterminated quoted field, a quote inside an unquoted field or
 * text after a closing quote, a bad label ("FILE: row 7: label 'spam' is not
 * an integer", "FILE: row 2: label 4294967297 is too large (class indices
 * go up to 1048575 ...)"), an empty text (pandas reads it as a missing value, which the
 * book's encode refuses), invalid UTF-8, no data rows. Rows are numbered
 * as data rows from 1: the header is not counted, and a row is one record
 * however many lines its quoted fields span. */
TG_API tg_class_dataset *tg_class_dataset_load(const char *csv_path, tg_tokenizer *tok, int64_t max_length,
                                               int64_t pad_id);
TG_API void tg_class_dataset_free(tg_class_dataset *ds);
/* The number of rows. */
TG_API int64_t tg_class_dataset_len(const tg_class_dataset *ds);
/* The padded length of every row. */
TG_API int64_t tg_class_dataset_max_length(const tg_class_dataset *ds);
/* The largest label + 1 (at most TG_CLASS_DATASET_MAX_CLASSES). */
TG_API int64_t tg_class_dataset_num_classes(const tg_class_dataset *ds);
/* Row i: its label and its (padded) ids (max_length entries copied into ids). */
TG_API int tg_class_dataset_get(const tg_class_dataset *ds, int64_t i, int64_t *ids, int64_t *label);
/* Rows idx[0..count) stacked: input (count, max_length) TG_I64 and labels
 * (count) TG_I64 in tp. */
TG_API int tg_class_dataset_batch(const tg_class_dataset *ds, tg_tape *tp, const int64_t *idx, int64_t count,
                                  tg_tensor **input, tg_tensor **labels);

/* ---- instruction data (chapter 7) ---- */
typedef struct {
    const char *instruction, *input, *output;
    /* preference data (tg_preference_data_load): the preferred and the
     * dispreferred answer; NULL in instruction data */
    const char *chosen, *rejected;
} tg_instruction;
typedef struct tg_instruction_data tg_instruction_data;
/* Reads a JSON array of objects with string members "instruction", "input"
 * and "output" (jansson; other members ignored; a repeated key keeps its
 * last value, as Python's json.load). Entries are numbered from 0, as the
 * array's indices (data[3] in Python). NULL and one line naming the file:
 * "FILE: entry 3: \"output\" is missing" / "is not a string" / "contains a
 * NUL character", "FILE: entry 3: not a JSON object", "FILE: not a JSON
 * array", "FILE: the array has no entries", "FILE: empty file", JSON
 * syntax errors with line:column, invalid UTF-8 (with its byte and
 * line:column). */
TG_API tg_instruction_data *tg_instruction_data_load(const char *json_path);
TG_API void tg_instruction_data_free(tg_instruction_data *d);
TG_API int64_t tg_instruction_data_len(const tg_instruction_data *d);
/* Entry i (borrowed: valid until tg_instruction_data_free); NULL and a
 * message when i is out of range. */
TG_API const tg_instruction *tg_instruction_data_get(const tg_instruction_data *d, int64_t i);
/* The book's format_input(entry) (malloc'd, NUL-terminated, caller frees):
 * "Below is an instruction that describes a task. Write a response that
 * appropriately completes the request.\n\n### Instruction:\n{instruction}"
 * and, when input is non-empty, "\n\n### Input:\n{input}". */
TG_API char *tg_format_input(const tg_instruction *e);
/* The book's split of n entries: train = int(n * 0.85), test =
 * int(n * 0.1), val = the rest; train is [0, train), test [train, train +
 * test), val after. int(n * 0.85) as Python computes it: the double product
 * truncated (n = 1100 gives 935, 110 and 55). TG_EINVAL for n < 0. */
TG_API int tg_instruction_split(int64_t n, int64_t *n_train, int64_t *n_test, int64_t *n_val);
/* The book's InstructionDataset over entries [begin, end) of d (0 <= begin
 * <= end <= len; an empty range is a dataset of no entries): each entry
 * encoded as format_input(e) + "\n\n### Response:\n" + output (with
 * tg_tokenizer_encode: "<|endoftext|>" in the text becomes id 50256, where
 * tiktoken's encode would refuse it). The ids are copied: d may be freed
 * first. */
typedef struct tg_instruction_dataset tg_instruction_dataset;
TG_API tg_instruction_dataset *tg_instruction_dataset_new(const tg_instruction_data *d, int64_t begin, int64_t end,
                                                          tg_tokenizer *tok);
/* How an entry becomes text: the book's Alpaca prompt (above), or a
 * conversation in the tokenizer's chat format (tg_tokenizer_encode_chat,
 * no generation prompt): user tg_format_chat_user(e), assistant the
 * output. */
typedef enum { TG_INSTRUCTION_ALPACA, TG_INSTRUCTION_CHAT } tg_instruction_format;
TG_API tg_instruction_dataset *tg_instruction_dataset_new_format(const tg_instruction_data *d, int64_t begin,
                                                                 int64_t end, tg_tokenizer *tok,
                                                                 tg_instruction_format format);
/* A chat's user message for an entry: the instruction, then "\n\n" and the
 * input when there is one; malloc'd. */
TG_API char *tg_format_chat_user(const tg_instruction *e);
TG_API void tg_instruction_dataset_free(tg_instruction_dataset *ds);
TG_API int64_t tg_instruction_dataset_len(const tg_instruction_dataset *ds);
/* Entry i's ids (borrowed) and their count in *n; NULL and a message when i
 * is out of range. */
TG_API const int64_t *tg_instruction_dataset_ids(const tg_instruction_dataset *ds, int64_t i, int64_t *n);
/* The book's custom_collate_fn on n >= 1 sequences ids[i] of lens[i] ids:
 * batch_max = max(len + 1); each item + [pad] then padded with pad to
 * batch_max; inputs = padded[:-1], targets = padded[1:]; in targets every
 * position equal to pad (ids of the items themselves included, as the
 * book's mask compares values) except the first such position becomes
 * ignore_index; then both cut to allowed_max_length when it is > 0 (0:
 * the book's None). Outputs (n, L) TG_I64 in tp, L = batch_max - 1 or
 * allowed_max_length if smaller. */
TG_API int tg_collate_pad(tg_tape *tp, int n, const int64_t *const *ids, const int64_t *lens, int64_t pad_id,
                          int64_t ignore_index, int64_t allowed_max_length, tg_tensor **inputs, tg_tensor **targets);
/* The same on dataset entries idx[0..count). */
TG_API int tg_instruction_dataset_batch(const tg_instruction_dataset *ds, tg_tape *tp, const int64_t *idx,
                                        int64_t count, int64_t pad_id, int64_t ignore_index,
                                        int64_t allowed_max_length, tg_tensor **inputs, tg_tensor **targets);

/* ---- preference data (chapter 7's DPO notebook) ---- */
/* Reads a JSON array of objects with string members "instruction", "input",
 * "chosen" and "rejected" ("output", the answer of instruction tuning, kept
 * when present, NULL otherwise), as the book's
 * instruction-data-with-preference.json; the errors of
 * tg_instruction_data_load, naming the member ("FILE: entry 3: \"chosen\" is
 * missing"). Free with tg_instruction_data_free. */
TG_API tg_instruction_data *tg_preference_data_load(const char *json_path);
/* The notebook's PreferenceDataset over entries [begin, end) of d: each
 * entry's prompt (format_input(e)), chosen (format_input(e) +
 * "\n\n### Response:\n" + chosen) and rejected ids, no end-of-text appended;
 * or with TG_INSTRUCTION_CHAT the conversations (user tg_format_chat_user(e),
 * assistant the answer) and, as the prompt, the user's turn with the
 * generation prompt (thinking left open). The prompt mask covers the prompt
 * and, in the Alpaca format, the 2 ids after it (the notebook's +2, "\n\n"
 * of the response header). NULL and one line naming the entry for an entry
 * without chosen or rejected, or an answer with no id after the mask. */
typedef struct tg_preference_dataset tg_preference_dataset;
TG_API tg_preference_dataset *tg_preference_dataset_new(const tg_instruction_data *d, int64_t begin, int64_t end,
                                                        tg_tokenizer *tok, tg_instruction_format format);
TG_API void tg_preference_dataset_free(tg_preference_dataset *ds);
TG_API int64_t tg_preference_dataset_len(const tg_preference_dataset *ds);
/* Entry i's ids (borrowed) and the first position its mask keeps. */
typedef struct {
    const int64_t *prompt, *chosen, *rejected;
    int64_t n_prompt, n_chosen, n_rejected, mask_from;
} tg_preference_ids;
TG_API int tg_preference_dataset_get(const tg_preference_dataset *ds, int64_t i, tg_preference_ids *out);
/* The notebook's custom_collate_fn on entries idx[0..count): one length L =
 * max(len + 1) over their chosen and rejected ids, each padded with pad_id
 * to L; masks true on the sequence's own ids (the padding, the first pad
 * included, false) and, with mask_prompt_tokens, false before mask_from;
 * then all cut to allowed_max_length when it is > 0. out: chosen, rejected
 * (count, L) TG_I64, chosen_mask, rejected_mask (count, L) TG_BOOL, in tp. */
TG_API int tg_preference_dataset_batch(const tg_preference_dataset *ds, tg_tape *tp, const int64_t *idx, int64_t count,
                                       int64_t pad_id, int64_t allowed_max_length, bool mask_prompt_tokens,
                                       tg_tensor *out[4]);

#ifdef __cplusplus
}
#endif
#endif
