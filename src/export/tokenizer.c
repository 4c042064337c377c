/* A model's tokenizer as the exported files carry it (export_internal.h):
 * Hugging Face's tokenizer.json object and tokenizer_config.json object.
 *
 * The sources: a tokenizer.json (Qwen3's, Llama 3's, Gemma 3's), or GPT-2's
 * encoder.json + vocab.bpe, from which the object Hugging Face's gpt2
 * tokenizer.json holds is built (a BPE model with GPT-2's byte-level vocabulary
 * and merges, the ByteLevel pre-tokenizer, post-processor and decoder,
 * <|endoftext|> an added special token). A tokenizer_config.json beside the
 * source is carried over as it is; without one, one is written for the chat
 * format the tokenizer's special tokens speak (src/data/chat.c): its special
 * tokens and a chat template that renders what tapegrad's chat encoder
 * encodes. tiktoken rank files (Llama 3's tokenizer.model) carry no merges in
 * the form the exported files need, and are refused. */
#include "export_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- paths ------------------------------------------------------------------------------------ */

/* dir + "/" + name, malloc'd (NULL with a message when out of memory). */
static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return tg_error("export: out of memory");
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static char *dup_str(const char *s)
{
    char *p = malloc(strlen(s) + 1);
    if (!p) return tg_error("export: out of memory");
    return strcpy(p, s);
}

/* The folder a file is in ("." for a bare name), malloc'd. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return dup_str(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *p = malloc(n + 1);
    if (!p) return tg_error("export: out of memory");
    memcpy(p, path, n);
    p[n] = '\0';
    return p;
}

static bool is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Where the tokenizer is: a tokenizer.json, or GPT-2's two files; and the
 * folder a tokenizer_config.json would be in. All malloc'd. */
typedef struct {
    char *json, *encoder, *merges, *dir;
} source;

static void source_free(source *s)
{
    free(s->json);
    free(s->encoder);
    free(s->merges);
    free(s->dir);
}

/* A tiktoken rank file: "<base64> <rank>" lines, not JSON. */
static bool looks_like_rank_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    size_t i = 0;
    while (i < n && strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", buf[i])) i++;
    if (i == 0 || i >= n || buf[i] != ' ') return false;
    size_t d = ++i;
    while (i < n && buf[i] >= '0' && buf[i] <= '9') i++;
    return i > d && (i == n || buf[i] == '\n' || buf[i] == '\r');
}

static int refuse_rank_file(const char *path)
{
    return tg_error_status(TG_EINVAL, "export: %s is a tiktoken rank file (Llama 3's tokenizer.model), which holds "
                                      "no merges: give Llama 3's tokenizer.json instead",
                           path);
}

/* The family's installed tokenizer: GPT-2's folder (tg_tokenizer_default_dir)
 * or the family's folder beside it. */
static int locate_installed(tg_gpt_family family, source *s)
{
    const char *folder = tg_decoder_family_tokenizer(family), *name = tg_decoder_family_name(family);
    if (!folder) return tg_error_status(TG_EINVAL, "export: unknown family %d", (int)family);
    const char *gpt2 = tg_tokenizer_default_dir();
    if (!gpt2) {
        char why[300];
        snprintf(why, sizeof why, "%s", tg_last_error());
        return tg_error_status(TG_EINVAL, "export: %s's tokenizer: %s; or give the tokenizer's files", name, why);
    }
    if (family == TG_GPT_FAMILY_GPT2) {
        s->dir = dup_str(gpt2);
    } else {
        char *data = dir_of(gpt2);
        s->dir = data ? join(data, folder) : NULL;
        free(data);
    }
    if (!s->dir) return TG_ENOMEM;
    if (family == TG_GPT_FAMILY_GPT2) {
        s->encoder = join(s->dir, "encoder.json");
        s->merges = join(s->dir, "vocab.bpe");
        return s->encoder && s->merges ? TG_OK : TG_ENOMEM;
    }
    s->json = join(s->dir, "tokenizer.json");
    if (!s->json) return TG_ENOMEM;
    if (!is_file(s->json))
        return tg_error_status(TG_EINVAL, "export: %s's tokenizer is not installed (its owner's terms): give its "
                                          "tokenizer.json (--tokenizer FILE)",
                               name);
    return TG_OK;
}

static int locate(const char *path, tg_gpt_family family, source *s)
{
    if (!path) return locate_installed(family, s);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return tg_error_status(TG_EIO, "export: cannot open the tokenizer %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        if (!(s->dir = dup_str(path)) || !(s->json = join(path, "tokenizer.json"))) return TG_ENOMEM;
        if (is_file(s->json)) return TG_OK;
        free(s->json);
        s->json = NULL;
        if (!(s->encoder = join(path, "encoder.json")) || !(s->merges = join(path, "vocab.bpe"))) return TG_ENOMEM;
        if (is_file(s->encoder) && is_file(s->merges)) return TG_OK;
        char *model = join(path, "tokenizer.model");
        int st = model && is_file(model) && looks_like_rank_file(model) ? refuse_rank_file(model)
                 : tg_error_status(TG_EINVAL, "export: %s holds no tokenizer.json, nor GPT-2's encoder.json and "
                                              "vocab.bpe",
                                   path);
        free(model);
        return st;
    }
    if (!(s->dir = dir_of(path))) return TG_ENOMEM;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (strcmp(base, "encoder.json") == 0) {
        if (!(s->merges = join(s->dir, "vocab.bpe"))) return TG_ENOMEM;
        if (is_file(s->merges)) return (s->encoder = dup_str(path)) ? TG_OK : TG_ENOMEM;
        free(s->merges);
        s->merges = NULL;
    }
    if (looks_like_rank_file(path)) return refuse_rank_file(path);
    return (s->json = dup_str(path)) ? TG_OK : TG_ENOMEM;
}

/* ---- reading and checking --------------------------------------------------------------------- */

static json_t *load_json(const char *path, int *st)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    /* an integer beyond 64 bits (Llama 3's model_max_length, 1e30) as a real */
    if (!root && strstr(err.text, "too big integer")) root = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
    if (!root) {
        if (err.line <= 0) *st = tg_error_status(TG_EIO, "export: cannot read %s: %s", path, err.text);
        else *st = tg_error_status(TG_EFORMAT, "export: %s line %d: %s", path, err.line, err.text);
    } else if (!json_is_object(root)) {
        json_decref(root);
        root = NULL;
        *st = tg_error_status(TG_EFORMAT, "export: %s is not a JSON object", path);
    }
    return root;
}

static int bad(const char *path, const char *what)
{
    return tg_error_status(TG_EFORMAT, "export: %s: %s", path, what);
}

/* A vocabulary object {token: id >= 0}. */
static int check_vocab(const json_t *vocab, const char *path, const char *where)
{
    char msg[128];
    snprintf(msg, sizeof msg, "%s must be a non-empty object of token -> id", where);
    if (!json_is_object(vocab) || json_object_size(vocab) == 0) return bad(path, msg);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24)) {
            snprintf(msg, sizeof msg, "%s: the id of \"%.40s\" is not an integer in [0, 2^24)", where, key);
            return bad(path, msg);
        }
    }
    return TG_OK;
}

/* Hugging Face's tokenizer.json: a BPE model with a vocabulary and merges
 * ("a b" strings or ["a", "b"] pairs), added tokens with ids and contents. */
static int check_tokenizer_json(const json_t *root, const char *path)
{
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return bad(path, "no \"model\" object (not a Hugging Face tokenizer.json?)");
    const json_t *type = json_object_get(model, "type");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0)) {
        char msg[128];
        snprintf(msg, sizeof msg, "model type %.40s: only BPE tokenizers are written",
                 json_is_string(type) ? json_string_value(type) : "?");
        return bad(path, msg);
    }
    int st = check_vocab(json_object_get(model, "vocab"), path, "model.vocab");
    if (st != TG_OK) return st;
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges)) return bad(path, "model.merges must be an array");
    size_t i;
    const json_t *m;
    json_array_foreach(merges, i, m) {
        bool ok = json_is_string(m) ? strchr(json_string_value(m), ' ') != NULL
                                    : json_is_array(m) && json_array_size(m) == 2 &&
                                          json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1));
        if (!ok) {
            char msg[96];
            snprintf(msg, sizeof msg, "model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
            return bad(path, msg);
        }
    }
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) return bad(path, "added_tokens must be an array");
    json_array_foreach(added, i, m) {
        const json_t *id = json_object_get(m, "id"), *content = json_object_get(m, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24) ||
            !json_is_string(content) || !*json_string_value(content)) {
            char msg[96];
            snprintf(msg, sizeof msg, "added_tokens[%zu] needs an \"id\" in [0, 2^24) and a non-empty \"content\"", i);
            return bad(path, msg);
        }
    }
    return TG_OK;
}

/* ---- GPT-2's files as a tokenizer.json ---------------------------------------------------------- */

static json_t *byte_level(bool add_prefix_space, bool trim_offsets)
{
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", add_prefix_space,
                     "trim_offsets", trim_offsets, "use_regex", true);
}

static json_t *added_token(json_int_t id, const char *content, bool normalized, bool special)
{
    return json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", false,
                     "lstrip", false, "rstrip", false, "normalized", normalized, "special", special);
}

/* vocab.bpe's merges ("a b" per line after the "#version" line) as strings. */
static int read_merges(const char *path, json_t *merges)
{
    FILE *f = fopen(path, "rb");
    if (!f) return tg_error_status(TG_EIO, "export: cannot open %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int st = TG_OK;
    while (st == TG_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0 || (lineno == 1 && strncmp(line, "#version", 8) == 0)) continue;
        char *sp = strchr(line, ' ');
        if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' '))
            st = tg_error_status(TG_EFORMAT, "export: %s line %zu: expected two tokens separated by one space", path,
                                 lineno);
        else if (json_array_append_new(merges, json_stringn(line, (size_t)len)) != 0)
            st = tg_error_status(TG_EFORMAT, "export: %s line %zu: not UTF-8", path, lineno);
    }
    if (st == TG_OK && ferror(f)) st = tg_error_status(TG_EIO, "export: cannot read %s", path);
    free(line);
    fclose(f);
    if (st == TG_OK && json_array_size(merges) == 0) st = bad(path, "no merges");
    return st;
}

/* The object of Hugging Face's gpt2 tokenizer.json, from encoder.json and vocab.bpe. */
static int gpt2_tokenizer(const source *s, json_t **out)
{
    int st = TG_OK;
    json_t *vocab = load_json(s->encoder, &st);
    if (!vocab) return st;
    if ((st = check_vocab(vocab, s->encoder, "the vocabulary")) != TG_OK) {
        json_decref(vocab);
        return st;
    }
    const json_t *eot = json_object_get(vocab, "<|endoftext|>");
    if (!eot) {
        json_decref(vocab);
        return bad(s->encoder, "no \"<|endoftext|>\" token");
    }
    json_int_t eot_id = json_integer_value(eot);
    json_t *merges = json_array();
    if (!merges) st = tg_error_status(TG_ENOMEM, "export: out of memory");
    if (st == TG_OK) st = read_merges(s->merges, merges);
    if (st != TG_OK) {
        json_decref(vocab);
        json_decref(merges);
        return st;
    }
    /* Hugging Face's gpt2 tokenizer.json, key for key */
    json_t *model = json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout", "unk_token",
                              "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", false,
                              "byte_fallback", false, "vocab", vocab, "merges", merges);
    json_t *root = model ? json_pack("{s:s, s:n, s:n, s:[o], s:n, s:o, s:o, s:o, s:o}", "version", "1.0", "truncation",
                                     "padding", "added_tokens", added_token(eot_id, "<|endoftext|>", true, true),
                                     "normalizer", "pre_tokenizer", byte_level(false, true), "post_processor",
                                     byte_level(true, false), "decoder", byte_level(true, true), "model", model)
                         : NULL;
    if (!root) return tg_error_status(TG_ENOMEM, "export: out of memory");
    *out = root;
    return TG_OK;
}

/* ---- token ids ------------------------------------------------------------------------------------ */

/* The id of a token given as its text: an added token's content, else a
 * vocabulary entry; -1 if none. */
static int64_t token_id(const json_t *tok, const char *content)
{
    size_t i;
    const json_t *a;
    json_array_foreach(json_object_get(tok, "added_tokens"), i, a) {
        if (strcmp(json_string_value(json_object_get(a, "content")), content) == 0)
            return (int64_t)json_integer_value(json_object_get(a, "id"));
    }
    const json_t *v = json_object_get(json_object_get(json_object_get(tok, "model"), "vocab"), content);
    return v ? (int64_t)json_integer_value(v) : -1;
}

int64_t tg__export_tokenizer_id(const tg__export_tokenizer *t, const char *content)
{
    return t && t->tokenizer && content ? token_id(t->tokenizer, content) : -1;
}

/* One past the largest id of the BPE vocabulary. */
static int64_t base_size(const json_t *tok)
{
    int64_t n = 0;
    const char *key;
    const json_t *v;
    json_object_foreach(json_object_get(json_object_get(tok, "model"), "vocab"), key, v) {
        if (json_integer_value(v) + 1 > n) n = json_integer_value(v) + 1;
    }
    return n;
}

/* ... and of the added tokens too. */
static int64_t vocab_size(const json_t *tok)
{
    int64_t n = base_size(tok);
    const json_t *v;
    size_t i;
    json_array_foreach(json_object_get(tok, "added_tokens"), i, v) {
        if (json_integer_value(json_object_get(v, "id")) + 1 > n) n = json_integer_value(json_object_get(v, "id")) + 1;
    }
    return n;
}

/* ---- tokenizer_config.json written for a chat format ---------------------------------------------- */

typedef enum { FORMAT_NONE, FORMAT_QWEN, FORMAT_LLAMA3, FORMAT_GEMMA3 } chat_format;

/* The chat format the tokenizer's special tokens speak, as src/data/chat.c finds it. */
static chat_format find_format(const json_t *tok)
{
    if (token_id(tok, "<|im_start|>") >= 0 && token_id(tok, "<|im_end|>") >= 0) return FORMAT_QWEN;
    if (token_id(tok, "<|start_header_id|>") >= 0 && token_id(tok, "<|end_header_id|>") >= 0 &&
        token_id(tok, "<|eot_id|>") >= 0)
        return FORMAT_LLAMA3;
    if (token_id(tok, "<start_of_turn>") >= 0 && token_id(tok, "<end_of_turn>") >= 0 && token_id(tok, "<bos>") >= 0)
        return FORMAT_GEMMA3;
    return FORMAT_NONE;
}

/* Jinja chat templates that render what tg_tokenizer_encode_chat encodes
 * (include/tapegrad/data.h): Qwen3's ChatML with the empty thinking block
 * unless enable_thinking, Llama 3's headers (begin_of_text first, the
 * contents trimmed), Gemma 3's turns (its own template's text part). */
static const char QWEN_TEMPLATE[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is not defined or not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}";
static const char LLAMA3_TEMPLATE[] =
    "{%- for message in messages %}"
    "{%- set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' %}"
    "{%- if loop.index0 == 0 %}{%- set content = bos_token + content %}{%- endif %}"
    "{{- content }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
static const char GEMMA3_TEMPLATE[] =
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set first_user_prefix = '' %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') + message['content'] | trim"
    " + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}";

/* The first of the tokens the tokenizer has, as a JSON string; null when none. */
static json_t *first_token(const json_t *tok, const char *a, const char *b)
{
    if (a && token_id(tok, a) >= 0) return json_string(a);
    if (b && token_id(tok, b) >= 0) return json_string(b);
    return json_null();
}

/* added_tokens_decoder: {"id": {content, lstrip, normalized, rstrip, single_word, special}}. */
static json_t *added_decoder(const json_t *tok)
{
    json_t *out = json_object();
    size_t i;
    const json_t *a;
    json_array_foreach(json_object_get(tok, "added_tokens"), i, a) {
        char id[24];
        snprintf(id, sizeof id, "%lld", (long long)json_integer_value(json_object_get(a, "id")));
        json_t *e = json_object();
        static const char *const keys[] = {"content", "lstrip", "normalized", "rstrip", "single_word", "special"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            json_t *v = json_object_get(a, keys[k]);
            json_object_set_new(e, keys[k], v ? json_incref(v) : json_false());
        }
        json_object_set_new(out, id, e);
    }
    return out;
}

/* The tokenizer_config.json Hugging Face ships with the format's tokenizer:
 * its special tokens (those the tokenizer has) and the chat template. */
static json_t *make_config(const json_t *tok)
{
    json_t *c = json_object();
    if (!c) return NULL;
    switch (find_format(tok)) {
    case FORMAT_QWEN:
        json_object_set_new(c, "add_bos_token", json_false());
        json_object_set_new(c, "add_prefix_space", json_false());
        json_object_set_new(c, "added_tokens_decoder", added_decoder(tok));
        json_object_set_new(c, "bos_token", json_null());
        json_object_set_new(c, "chat_template", json_string(QWEN_TEMPLATE));
        json_object_set_new(c, "clean_up_tokenization_spaces", json_false());
        json_object_set_new(c, "eos_token", json_string("<|im_end|>"));
        json_object_set_new(c, "errors", json_string("replace"));
        json_object_set_new(c, "pad_token", first_token(tok, "<|endoftext|>", NULL));
        json_object_set_new(c, "split_special_tokens", json_false());
        json_object_set_new(c, "tokenizer_class", json_string("Qwen2Tokenizer"));
        json_object_set_new(c, "unk_token", json_null());
        break;
    case FORMAT_LLAMA3:
        json_object_set_new(c, "add_bos_token", json_true());
        json_object_set_new(c, "added_tokens_decoder", added_decoder(tok));
        json_object_set_new(c, "bos_token", first_token(tok, "<|begin_of_text|>", NULL));
        json_object_set_new(c, "chat_template", json_string(LLAMA3_TEMPLATE));
        json_object_set_new(c, "clean_up_tokenization_spaces", json_true());
        json_object_set_new(c, "eos_token", json_string("<|eot_id|>"));
        json_object_set_new(c, "model_input_names", json_pack("[s, s]", "input_ids", "attention_mask"));
        json_object_set_new(c, "tokenizer_class", json_string("PreTrainedTokenizerFast"));
        break;
    case FORMAT_GEMMA3:
        json_object_set_new(c, "add_bos_token", json_true());
        json_object_set_new(c, "add_eos_token", json_false());
        json_object_set_new(c, "added_tokens_decoder", added_decoder(tok));
        json_object_set_new(c, "bos_token", json_string("<bos>"));
        json_object_set_new(c, "chat_template", json_string(GEMMA3_TEMPLATE));
        json_object_set_new(c, "clean_up_tokenization_spaces", json_false());
        json_object_set_new(c, "eos_token", first_token(tok, "<eos>", "<end_of_turn>"));
        json_object_set_new(c, "pad_token", first_token(tok, "<pad>", NULL));
        json_object_set_new(c, "padding_side", json_string("left"));
        json_object_set_new(c, "spaces_between_special_tokens", json_false());
        json_object_set_new(c, "tokenizer_class", json_string("GemmaTokenizer"));
        json_object_set_new(c, "unk_token", first_token(tok, "<unk>", NULL));
        json_object_set_new(c, "use_default_system_prompt", json_false());
        break;
    case FORMAT_NONE: /* GPT-2's: <|endoftext|> for all, no chat template */
        json_object_set_new(c, "add_bos_token", json_false());
        json_object_set_new(c, "add_prefix_space", json_false());
        json_object_set_new(c, "added_tokens_decoder", added_decoder(tok));
        json_object_set_new(c, "bos_token", first_token(tok, "<|endoftext|>", NULL));
        json_object_set_new(c, "clean_up_tokenization_spaces", json_false());
        json_object_set_new(c, "eos_token", first_token(tok, "<|endoftext|>", NULL));
        json_object_set_new(c, "errors", json_string("replace"));
        json_object_set_new(c, "pad_token", json_null());
        json_object_set_new(c, "tokenizer_class", json_string("GPT2Tokenizer"));
        json_object_set_new(c, "unk_token", first_token(tok, "<|endoftext|>", NULL));
        break;
    }
    return c;
}

/* config[key] (a token's text, or an AddedToken object with "content") as
 * the tokenizer's id in *id; -1 when unset or null. */
static int config_token(const json_t *config, const json_t *tok, const char *key, const char *path, int64_t *id)
{
    const json_t *v = json_object_get(config, key);
    *id = -1;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!v || json_is_null(v)) return TG_OK;
    if (!json_is_string(v)) {
        char msg[96];
        snprintf(msg, sizeof msg, "\"%s\" must be a token's text, an object with \"content\" or null", key);
        return bad(path, msg);
    }
    *id = token_id(tok, json_string_value(v));
    if (*id < 0)
        return tg_error_status(TG_EFORMAT, "export: %s: %s \"%.60s\" is not a token of the tokenizer", path, key,
                               json_string_value(v));
    return TG_OK;
}

/* ---- the entry point ------------------------------------------------------------------------------ */

static int fill(tg__export_tokenizer *t, const char *config_path)
{
    int st = config_token(t->config, t->tokenizer, "bos_token", config_path, &t->bos);
    if (st == TG_OK) st = config_token(t->config, t->tokenizer, "eos_token", config_path, &t->eos);
    if (st == TG_OK) st = config_token(t->config, t->tokenizer, "pad_token", config_path, &t->pad);
    if (st != TG_OK) return st;
    /* the end of a turn: the chat format's own token, else the end of the text */
    static const char *const ends[] = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>"};
    chat_format f = find_format(t->tokenizer);
    t->eot = f == FORMAT_NONE ? t->eos : token_id(t->tokenizer, ends[f - 1]);
    t->n_vocab = vocab_size(t->tokenizer);
    t->n_base = base_size(t->tokenizer);
    const json_t *tmpl = json_object_get(t->config, "chat_template");
    if (json_is_string(tmpl)) {
        t->chat_template = json_string_value(tmpl);
    } else if (json_is_array(tmpl)) { /* [{"name", "template"}]: the "default" one */
        size_t i;
        const json_t *e;
        json_array_foreach(tmpl, i, e) {
            if (json_is_string(json_object_get(e, "name")) &&
                strcmp(json_string_value(json_object_get(e, "name")), "default") == 0 &&
                json_is_string(json_object_get(e, "template")))
                t->chat_template = json_string_value(json_object_get(e, "template"));
        }
    } else if (tmpl && !json_is_null(tmpl)) {
        return bad(config_path, "\"chat_template\" must be a string, a list of named templates or null");
    }
    return TG_OK;
}

int tg__export_tokenizer_load(const char *path, tg_gpt_family family, tg__export_tokenizer *out)
{
    if (!out) return tg_error_status(TG_EINVAL, "export: NULL tokenizer");
    *out = (tg__export_tokenizer){.bos = -1, .eos = -1, .eot = -1, .pad = -1};
    source s = {0};
    int st = locate(path, family, &s);
    if (st == TG_OK && s.json) {
        out->tokenizer = load_json(s.json, &st);
        if (st == TG_OK) st = check_tokenizer_json(out->tokenizer, s.json);
    } else if (st == TG_OK) {
        st = gpt2_tokenizer(&s, &out->tokenizer);
    }
    char *config_path = st == TG_OK ? join(s.dir, "tokenizer_config.json") : NULL;
    if (st == TG_OK && !config_path) st = TG_ENOMEM;
    if (st == TG_OK && is_file(config_path)) {
        out->config = load_json(config_path, &st);
        out->config_path = config_path;
        config_path = NULL;
    } else if (st == TG_OK) {
        out->config = make_config(out->tokenizer);
        if (!out->config) st = tg_error_status(TG_ENOMEM, "export: out of memory");
    }
    if (st == TG_OK) st = fill(out, out->config_path ? out->config_path : config_path);
    if (st == TG_OK && s.json) {
        out->json_path = s.json;
        s.json = NULL;
    }
    free(config_path);
    source_free(&s);
    if (st != TG_OK) tg__export_tokenizer_free(out);
    return st;
}

void tg__export_tokenizer_free(tg__export_tokenizer *t)
{
    if (!t) return;
    json_decref(t->tokenizer);
    json_decref(t->config);
    free(t->json_path);
    free(t->config_path);
    *t = (tg__export_tokenizer){.bos = -1, .eos = -1, .eot = -1, .pad = -1};
}

int tg__export_tokenizer_fits(const tg__export_tokenizer *t, int64_t vocab_size, const char *op)
{
    if (t->n_base <= vocab_size) return TG_OK;
    return tg_error_status(TG_EINVAL, "%s: the tokenizer's vocabulary has %lld ids, the model's token embedding %lld rows: "
                                      "give the tokenizer the model was trained with",
                           op, (long long)t->n_base, (long long)vocab_size);
}
