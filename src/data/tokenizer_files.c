/* The tokenizer's three file formats (include/tapegrad/data.h), read into
 * the one form of tokenizer.c:
 *   - GPT-2's encoder.json (token -> id, in GPT-2's byte alphabet) and
 *     vocab.bpe (the merges, one "a b" per line, in rank order);
 *   - a Hugging Face tokenizer.json: model BPE (vocab, merges as "a b"
 *     strings or ["a", "b"] pairs, ignore_merges), the pre-tokenizer
 *     (ByteLevel with GPT-2's pattern, or Split with a regex then ByteLevel),
 *     the normaliser (NFC or none), added_tokens with their special flag;
 *     or, with model.byte_fallback (Gemma 3), a vocabulary of text with the
 *     normaliser Replace " " -> U+2581, no pre-tokenizer (or a Split on " ",
 *     which finds nothing after that normaliser) and the decoder that undoes
 *     them; and the post-processor's ids (TemplateProcessing's "single");
 *   - tiktoken's rank file (Llama 3's tokenizer.model): a base64 token and
 *     its rank per line, with a pattern and added tokens given by the caller.
 * Every problem is an error naming the file and what is wrong. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer_internal.h"

#define FILE_LIMIT ((size_t)1 << 30)

static const char EOT[] = "<|endoftext|>";

static char *read_whole(const char *path, size_t *len)
{
    int err;
    char *buf = tg__read_file(path, FILE_LIMIT, len, &err);
    if (!buf && err != EIO && err != ENOMEM && err != EFBIG) return tg_error("tokenizer: cannot open %s", path);
    if (!buf) return tg_error("tokenizer: cannot read %s", path);
    return buf;
}

static json_t *load_json(const char *path, int *st)
{
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    *st = TG_OK;
    if (root) return root;
    if (err.line <= 0) *st = tg_error_status(TG_EIO, "tokenizer: cannot read %s: %s", path, err.text);
    else *st = tg_error_status(TG_EFORMAT, "tokenizer: %s line %d: %s", path, err.line, err.text);
    return NULL;
}

static int no_memory(void) { return tg_error_status(TG_ENOMEM, "tokenizer: out of memory"); }

/* A failed load: t freed, NULL, and the message kept on one line: a control
 * character in what it quotes (a token or a type name of the file, the
 * path) is written as \u00XX. */
static tg_tokenizer *load_failed(tg_tokenizer *t)
{
    tg_tokenizer_free(t);
    const char *e = tg_last_error();
    char buf[2048];
    size_t o = 0;
    bool changed = false;
    for (size_t i = 0; e[i] && o + 7 < sizeof buf; i++) {
        unsigned char c = (unsigned char)e[i];
        if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, sizeof buf - o, "\\u%04x", c), changed = true;
        else buf[o++] = (char)c;
    }
    buf[o] = '\0';
    if (changed) tg_error("%s", buf);
    return NULL;
}

/* A vocabulary object {token in GPT-2's alphabet: id} (encoder.json, or
 * tokenizer.json's model.vocab); inv NULL: {token text: id} (byte
 * fallback). */
static int read_vocab(tg_tokenizer *t, json_t *vocab, const int16_t *inv, const char *path, const char *where)
{
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: %s must be a non-empty JSON object of token -> id", path, where);
    const char *key;
    json_t *val;
    char buf[1024];
    json_object_foreach(vocab, key, val) {
        size_t klen = strlen(key);
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= (1 << 24))
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: %s: the id of \"%.60s\" is not an integer in [0, 2^24)",
                                   path, where, key);
        long n = klen > sizeof buf ? -1 : inv ? tg__byte_alphabet_decode(inv, key, klen, buf) : (long)klen;
        if (n <= 0)
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: %s: token \"%.60s\" is empty, too long%s", path, where,
                                   key, inv ? " or not in GPT-2's byte alphabet" : "");
        int st = tg__tok_add_token(t, inv ? buf : key, (size_t)n, json_integer_value(val));
        if (st == TG_ENOMEM) return no_memory();
        if (st != TG_OK)
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: %s: token \"%.60s\" (id %lld) repeats another token or id",
                                   path, where, key, (long long)json_integer_value(val));
    }
    return TG_OK;
}

/* One merge "a b" (two tokens in GPT-2's alphabet; inv NULL: as text) at
 * the next rank. */
static int read_merge(tg_tokenizer *t, const int16_t *inv, const char *a, size_t la, const char *b, size_t lb,
                      const char *path, const char *where, size_t k)
{
    char x[512], y[512];
    long na = !la || la > sizeof x ? -1 : inv ? tg__byte_alphabet_decode(inv, a, la, x) : (long)la;
    long nb = !lb || lb > sizeof y ? -1 : inv ? tg__byte_alphabet_decode(inv, b, lb, y) : (long)lb;
    int st = na > 0 && nb > 0 ? tg__tok_add_merge(t, inv ? x : a, (size_t)na, inv ? y : b, (size_t)nb) : TG_EFORMAT;
    if (st == TG_ENOMEM) return no_memory();
    if (st != TG_OK)
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: %s %zu: the merge \"%.*s %.*s\" names tokens the vocabulary lacks",
                               path, where, k, (int)(la > 40 ? 40 : la), a, (int)(lb > 40 ? 40 : lb), b);
    return TG_OK;
}

/* The next line of text[0, len) from *pos: its start and length (without
 * "\n" or "\r\n"); false at the end. *lineno counts the lines. */
static bool next_line(char *text, size_t len, size_t *pos, size_t *lineno, char **line, size_t *ll)
{
    if (*pos >= len) return false;
    char *start = text + *pos, *end = memchr(start, '\n', len - *pos);
    if (!end) end = text + len;
    *line = start;
    *ll = (size_t)(end - start);
    if (*ll && start[*ll - 1] == '\r') (*ll)--;
    *pos = (size_t)(end - text) + (end < text + len);
    (*lineno)++;
    return true;
}

/* ---- GPT-2's encoder.json and vocab.bpe ---------------------------------------------------------- */

static int read_vocab_bpe(tg_tokenizer *t, const char *path, const int16_t *inv)
{
    size_t len = 0;
    char *text = read_whole(path, &len);
    if (!text) return TG_EIO;
    int st = TG_OK;
    size_t lineno = 0, pos = 0, ll;
    char *line;
    while (st == TG_OK && next_line(text, len, &pos, &lineno, &line, &ll)) {
        if (ll == 0 || (lineno == 1 && ll >= 8 && memcmp(line, "#version", 8) == 0)) continue;
        char *sp = memchr(line, ' ', ll);
        size_t la = sp ? (size_t)(sp - line) : 0, lb = sp ? ll - la - 1 : 0;
        if (!sp || !la || !lb || memchr(sp + 1, ' ', lb))
            st = tg_error_status(TG_EFORMAT, "tokenizer: %s line %zu: expected two tokens separated by one space", path,
                                 lineno);
        else
            st = read_merge(t, inv, line, la, sp + 1, lb, path, "line", lineno);
    }
    free(text);
    return st;
}

tg_tokenizer *tg_tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path)
{
    if (!encoder_json_path || !vocab_bpe_path) return tg_error("tokenizer: NULL path");
    tg_tokenizer *t = tg__tok_new();
    if (!t) return NULL;
    int16_t inv[512];
    tg__byte_alphabet_inverse(inv);
    int st;
    json_t *root = load_json(encoder_json_path, &st);
    if (root) st = read_vocab(t, root, inv, encoder_json_path, "vocabulary");
    json_decref(root);
    if (st == TG_OK) st = read_vocab_bpe(t, vocab_bpe_path, inv);
    /* "<|endoftext|>" is recognised in any text, as tapegrad always did */
    int64_t eot = tg_tokenizer_token_id(t, EOT);
    if (st == TG_OK && eot >= 0 && tg__tok_add_added(t, EOT, sizeof EOT - 1, eot, false) != TG_OK) st = no_memory();
    if (st == TG_OK) st = tg__tok_finish(t, TG__GPT2_PATTERN, TG__NORM_NONE, true, false, encoder_json_path);
    if (st != TG_OK) return load_failed(t);
    return t;
}

/* ---- tokenizer.json ------------------------------------------------------------------------------ */

/* A member that must be absent, null, false or "" (a feature tapegrad does
 * not implement must not be ignored silently). */
static bool unset(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return !v || json_is_null(v) || json_is_false(v) || (json_is_string(v) && json_string_length(v) == 0);
}

static const char *type_of(json_t *o)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s ? s : "(none)";
}

static const char METASPACE[] = "\xe2\x96\x81"; /* U+2581 */

/* {"String": s} (a Replace's or a Split's pattern) equal to s. */
static bool string_pattern(json_t *pattern, const char *want)
{
    const char *p = json_string_value(json_object_get(pattern, "String"));
    return json_is_object(pattern) && json_object_size(pattern) == 1 && p && strcmp(p, want) == 0;
}

/* A Replace of pattern {"String": from} by to. */
static bool is_replace(json_t *o, const char *from, const char *to)
{
    const char *content = json_string_value(json_object_get(o, "content"));
    return json_is_object(o) && strcmp(type_of(o), "Replace") == 0 && string_pattern(json_object_get(o, "pattern"), from) &&
           content && strcmp(content, to) == 0;
}

/* NFC or none; with byte fallback the Replace of " " by U+2581 or none. */
static int read_normalizer(json_t *n, bool fallback, tg__normalizer *norm, const char *path)
{
    *norm = TG__NORM_NONE;
    if (!n || json_is_null(n)) return TG_OK;
    json_t *one = n, *seq = json_object_get(n, "normalizers");
    if (json_is_object(n) && strcmp(type_of(n), "Sequence") == 0 && json_is_array(seq) && json_array_size(seq) <= 1) {
        one = json_array_get(seq, 0);
        if (!one) return TG_OK;
    }
    bool nfc = json_is_object(one) && strcmp(type_of(one), "NFC") == 0;
    if (nfc && !fallback) return *norm = TG__NORM_NFC, TG_OK;
    if (fallback && is_replace(one, " ", METASPACE)) return *norm = TG__NORM_METASPACE, TG_OK;
    const char *name = json_is_object(one) ? type_of(one) : "?";
    if (fallback)
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: normalizer \"%s\" is not supported with model.byte_fallback "
                                           "(Replace \" \" -> \"\\u2581\", or none)", path, name);
    return tg_error_status(TG_EFORMAT, "tokenizer: %s: normalizer \"%s\" is not supported (NFC or none)", path, name);
}

/* The pattern of the pre-tokenizer: ByteLevel with use_regex (GPT-2's), or
 * Split(Regex, Isolated) followed by ByteLevel without its own regex. The
 * string is in root's JSON tree. With byte fallback: none, or a Split on
 * " " after the normaliser that leaves no space (the text is one piece, as
 * Gemma 3's tokenizer.json makes it). */
static int read_pre_tokenizer(json_t *p, bool fallback, tg__normalizer norm, const char **pattern, const char *path)
{
    const char *bad = NULL;
    *pattern = NULL;
    if (fallback) {
        if (!p || json_is_null(p)) return TG_OK;
        const char *behavior = json_string_value(json_object_get(p, "behavior"));
        if (json_is_object(p) && strcmp(type_of(p), "Split") == 0 && string_pattern(json_object_get(p, "pattern"), " ") &&
            norm == TG__NORM_METASPACE && behavior && unset(p, "invert"))
            return TG_OK;
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: pre_tokenizer %s is not supported with model.byte_fallback "
                                           "(none, or Split on \" \" after the normalizer Replace \" \" -> \"\\u2581\")",
                               path, json_is_object(p) ? type_of(p) : "?");
    }
    if (json_is_object(p) && strcmp(type_of(p), "ByteLevel") == 0) {
        if (!unset(p, "add_prefix_space")) bad = "ByteLevel with add_prefix_space";
        else if (json_is_false(json_object_get(p, "use_regex"))) bad = "ByteLevel without a pattern";
        else *pattern = TG__GPT2_PATTERN;
    } else if (json_is_object(p) && strcmp(type_of(p), "Sequence") == 0) {
        json_t *seq = json_object_get(p, "pretokenizers"), *split = json_array_get(seq, 0), *bl = json_array_get(seq, 1);
        const char *re = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
        const char *behavior = json_string_value(json_object_get(split, "behavior"));
        if (json_array_size(seq) != 2 || strcmp(type_of(split), "Split") != 0 || strcmp(type_of(bl), "ByteLevel") != 0)
            bad = "a Sequence other than [Split, ByteLevel]";
        else if (!re)
            bad = "Split without a \"Regex\" pattern";
        else if (!behavior || strcmp(behavior, "Isolated") != 0 || !unset(split, "invert"))
            bad = "Split with a behavior other than Isolated";
        else if (!unset(bl, "add_prefix_space") || !unset(bl, "use_regex"))
            bad = "ByteLevel with add_prefix_space or use_regex after Split";
        else
            *pattern = re;
    } else {
        bad = json_is_object(p) ? type_of(p) : "none";
    }
    if (bad)
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: pre_tokenizer %s is not supported (ByteLevel, or Split then ByteLevel)",
                               path, bad);
    return TG_OK;
}

/* model BPE; *fallback: model.byte_fallback (the vocabulary is text, and
 * every byte has its "<0xNN>" token: the unk_token is never needed). */
static int read_model(tg_tokenizer *t, json_t *m, const int16_t *inv, const char *path, bool *whole_pieces,
                      bool *fallback)
{
    if (!json_is_object(m) || (json_object_get(m, "type") && strcmp(type_of(m), "BPE") != 0))
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: model \"%s\" is not supported (BPE)", path,
                               json_is_object(m) ? type_of(m) : "none");
    json_t *bf = json_object_get(m, "byte_fallback");
    *fallback = json_is_true(bf);
    if (!*fallback && !unset(m, "byte_fallback"))
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: model.byte_fallback must be true or false", path);
    static const char *const unsupported[] = {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++) {
        bool unk_name = strcmp(unsupported[i], "unk_token") == 0 && json_is_string(json_object_get(m, "unk_token"));
        if (!unset(m, unsupported[i]) && !(*fallback && unk_name))
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: model.%s is not supported", path, unsupported[i]);
    }
    if (*fallback) tg__tok_set_byte_fallback(t), inv = NULL;
    int st = read_vocab(t, json_object_get(m, "vocab"), inv, path, "model.vocab");
    json_t *merges = json_object_get(m, "merges");
    if (st == TG_OK && !json_is_array(merges))
        st = tg_error_status(TG_EFORMAT, "tokenizer: %s: model.merges must be an array", path);
    size_t k;
    json_t *v;
    if (st == TG_OK)
        json_array_foreach(merges, k, v) {
            const char *a = NULL, *b = NULL;
            size_t la = 0, lb = 0;
            if (json_is_string(v)) { /* "a b" */
                a = json_string_value(v);
                const char *sp = strchr(a, ' ');
                if (sp && !strchr(sp + 1, ' ')) la = (size_t)(sp - a), b = sp + 1, lb = strlen(b);
            } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                       json_is_string(json_array_get(v, 1))) { /* ["a", "b"] */
                a = json_string_value(json_array_get(v, 0)), la = json_string_length(json_array_get(v, 0));
                b = json_string_value(json_array_get(v, 1)), lb = json_string_length(json_array_get(v, 1));
            }
            if (!la || !lb) {
                st = tg_error_status(TG_EFORMAT, "tokenizer: %s: model.merges[%zu] is not \"a b\" or [\"a\", \"b\"]", path, k);
                break;
            }
            if ((st = read_merge(t, inv, a, la, b, lb, path, "model.merges", k)) != TG_OK) break;
        }
    json_t *im = json_object_get(m, "ignore_merges");
    *whole_pieces = json_is_true(im);
    return st;
}

/* With byte fallback, the decoder must undo the normaliser and the byte
 * tokens: a Sequence of Replace U+2581 -> " ", ByteFallback and Fuse (Fuse
 * may be left out: decoding joins the tokens). Byte-level files: their
 * ByteLevel decoder is what decoding does, and it is not read. */
static int read_decoder(json_t *d, bool fallback, const char *path)
{
    if (!fallback) return TG_OK;
    json_t *seq = json_object_get(d, "decoders");
    size_t n = json_array_size(seq);
    bool ok = json_is_object(d) && strcmp(type_of(d), "Sequence") == 0 && (n == 2 || n == 3) &&
              is_replace(json_array_get(seq, 0), METASPACE, " ") &&
              strcmp(type_of(json_array_get(seq, 1)), "ByteFallback") == 0 &&
              (n == 2 || strcmp(type_of(json_array_get(seq, 2)), "Fuse") == 0);
    if (!ok)
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: decoder %s is not supported with model.byte_fallback "
                                           "(a Sequence of Replace \"\\u2581\" -> \" \", ByteFallback, Fuse)",
                               path, json_is_object(d) ? type_of(d) : "none");
    return TG_OK;
}

/* TemplateProcessing's "single": the ids of its special tokens before and
 * after the sequence "A" (Gemma 3's <bos>). */
static int read_template(json_t *p, int64_t *ids, size_t *n_pre, size_t *n_post, const char *path)
{
    json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
    if (!json_is_array(single))
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: post_processor TemplateProcessing: \"single\" must be an array",
                               path);
    bool seen = false;
    size_t k, n = 0;
    json_t *item;
    json_array_foreach(single, k, item) {
        json_t *tok = json_object_get(item, "SpecialToken"), *seq = json_object_get(item, "Sequence");
        const char *name = json_string_value(json_object_get(tok ? tok : seq, "id"));
        if (json_is_object(seq) && !tok && name && strcmp(name, "A") == 0 && !seen) {
            seen = true;
            continue;
        }
        json_t *entry_ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!json_is_object(tok) || seq || !name || !json_is_array(entry_ids) || json_array_size(entry_ids) == 0)
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: post_processor TemplateProcessing: single[%zu] is not the "
                                               "sequence A once or a SpecialToken with ids in special_tokens", path, k);
        size_t j;
        json_t *id;
        json_array_foreach(entry_ids, j, id) {
            if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24) || n == 16)
                return tg_error_status(TG_EFORMAT, "tokenizer: %s: post_processor TemplateProcessing: the ids of \"%.40s\" "
                                                   "are not at most 16 integers in [0, 2^24)", path, name);
            ids[n++] = json_integer_value(id);
            *(seen ? n_post : n_pre) += 1;
        }
    }
    if (!seen)
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: post_processor TemplateProcessing: single has no sequence A",
                               path);
    return TG_OK;
}

/* The ids the post-processor adds (tg_tokenizer_encode_add_special): none
 * (null, ByteLevel), TemplateProcessing, or a Sequence of those; another
 * one is kept as unsupported, named when the ids are asked for. */
static int read_post_processor(tg_tokenizer *t, json_t *p, const char *path)
{
    int64_t ids[16];
    size_t n_pre = 0, n_post = 0, n = 1, templates = 0;
    json_t *seq = json_object_get(p, "processors");
    bool is_seq = json_is_object(p) && strcmp(type_of(p), "Sequence") == 0 && json_is_array(seq);
    if (is_seq) n = json_array_size(seq);
    if (!p || json_is_null(p)) n = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *one = is_seq ? json_array_get(seq, i) : p;
        const char *type = json_is_object(one) ? type_of(one) : "?";
        if (strcmp(type, "ByteLevel") == 0) continue;
        if (strcmp(type, "TemplateProcessing") != 0 || templates++) {
            char what[96];
            snprintf(what, sizeof what, "%.60s%s", type, templates > 1 ? " (a second TemplateProcessing)" : "");
            tg__tok_set_post(t, NULL, 0, NULL, 0, what);
            return TG_OK;
        }
        int st = read_template(one, ids, &n_pre, &n_post, path);
        if (st != TG_OK) return st;
    }
    if (tg__tok_set_post(t, ids, n_pre, ids + n_pre, n_post, NULL) != TG_OK) /* more than 16 in all */
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: post_processor: more than 16 ids", path);
    return TG_OK;
}

static int read_added(tg_tokenizer *t, json_t *added, const char *path)
{
    if (!added || json_is_null(added)) return TG_OK;
    if (!json_is_array(added)) return tg_error_status(TG_EFORMAT, "tokenizer: %s: added_tokens must be an array", path);
    size_t k;
    json_t *a;
    json_array_foreach(added, k, a) {
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || !json_is_string(content) || json_string_length(content) == 0)
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: added_tokens[%zu] needs an integer id and a non-empty content",
                                   path, k);
        static const char *const unsupported[] = {"lstrip", "rstrip", "single_word"};
        for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
            if (!unset(a, unsupported[i]))
                return tg_error_status(TG_EFORMAT, "tokenizer: %s: added_tokens[%zu] (\"%.40s\") uses %s, which is not supported",
                                       path, k, json_string_value(content), unsupported[i]);
        const char *c = json_string_value(content);
        size_t len = json_string_length(content);
        if (len > 4096)
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: added_tokens[%zu] is %zu bytes long (at most 4096)", path,
                                   k, len);
        if (memchr(c, '\0', len) || tg__utf8_check(c, len) < len)
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: added_tokens[%zu]: content is not UTF-8 text", path, k);
        int st = tg__tok_add_added(t, c, len, json_integer_value(id), json_is_true(json_object_get(a, "special")));
        if (st == TG_ENOMEM) return no_memory();
        if (st != TG_OK)
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: added_tokens[%zu] (\"%.40s\", id %lld): an id in [0, 2^24) given to no other token",
                                   path, k, c, (long long)json_integer_value(id));
    }
    return TG_OK;
}

tg_tokenizer *tg_tokenizer_load_json(const char *path)
{
    if (!path) return tg_error("tokenizer: NULL path");
    int st;
    json_t *root = load_json(path, &st);
    if (!root) return load_failed(NULL);
    tg_tokenizer *t = tg__tok_new();
    int16_t inv[512];
    tg__byte_alphabet_inverse(inv);
    tg__normalizer norm = TG__NORM_NONE;
    const char *pattern = NULL;
    bool whole = false, fallback = false;
    if (!t) st = TG_ENOMEM;
    else if (!json_is_object(root) || !json_object_get(root, "model"))
        st = tg_error_status(TG_EFORMAT, "tokenizer: %s is not a tokenizer.json (no \"model\")", path);
    if (st == TG_OK) st = read_model(t, json_object_get(root, "model"), inv, path, &whole, &fallback);
    if (st == TG_OK) st = read_normalizer(json_object_get(root, "normalizer"), fallback, &norm, path);
    if (st == TG_OK) st = read_pre_tokenizer(json_object_get(root, "pre_tokenizer"), fallback, norm, &pattern, path);
    if (st == TG_OK) st = read_decoder(json_object_get(root, "decoder"), fallback, path);
    if (st == TG_OK) st = read_added(t, json_object_get(root, "added_tokens"), path);
    if (st == TG_OK) st = read_post_processor(t, json_object_get(root, "post_processor"), path);
    if (st == TG_OK) st = tg__tok_finish(t, pattern, norm, whole, false, path);
    json_decref(root);
    if (st != TG_OK) return load_failed(t);
    return t;
}

/* ---- tiktoken's rank file ------------------------------------------------------------------------ */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 (with '=' padding) into out; -1 if malformed. */
static long b64_decode(const char *s, size_t n, unsigned char *out, size_t cap)
{
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0, pad++;
                continue;
            }
            if (pad || (v[k] = b64_value((unsigned char)s[i + k])) < 0) return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        unsigned char b[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
        if (o + 3 - (size_t)pad > cap) return -1;
        for (int k = 0; k < 3 - pad; k++) out[o++] = b[k];
    }
    return (long)o;
}

tg_tokenizer *tg_tokenizer_load_tiktoken(const char *path, const char *pattern, const tg_added_token *added,
                                         size_t n_added)
{
    if (!path || !pattern || (!added && n_added)) return tg_error("tokenizer: NULL argument");
    size_t len = 0;
    char *text = read_whole(path, &len);
    if (!text) return load_failed(NULL);
    tg_tokenizer *t = tg__tok_new();
    int st = t ? TG_OK : TG_ENOMEM;
    size_t lineno = 0, pos = 0, ll;
    char *line;
    while (st == TG_OK && next_line(text, len, &pos, &lineno, &line, &ll)) {
        if (ll == 0) continue;
        char *sp = memchr(line, ' ', ll);
        unsigned char tok[1024];
        long n = sp ? b64_decode(line, (size_t)(sp - line), tok, sizeof tok) : -1;
        char num[24];
        size_t lr = sp ? ll - (size_t)(sp - line) - 1 : 0;
        int64_t rank = -1;
        if (n > 0 && lr > 0 && lr < sizeof num) {
            memcpy(num, sp + 1, lr);
            num[lr] = '\0';
            char *e;
            errno = 0;
            long long r = strtoll(num, &e, 10);
            if (!errno && *e == '\0' && num[0] >= '0' && num[0] <= '9') rank = r;
        }
        if (n <= 0 || rank < 0)
            st = tg_error_status(TG_EFORMAT, "tokenizer: %s line %zu: expected a base64 token, one space and a rank", path,
                                 lineno);
        else if (rank >= (1 << 24))
            st = tg_error_status(TG_EFORMAT, "tokenizer: %s line %zu: rank %lld is outside [0, 2^24)", path, lineno,
                                 (long long)rank);
        else if ((st = tg__tok_add_token(t, (const char *)tok, (size_t)n, rank)) == TG_ENOMEM)
            st = no_memory();
        else if (st != TG_OK)
            st = tg_error_status(TG_EFORMAT, "tokenizer: %s line %zu: the token repeats an earlier line (rank %lld)",
                                 path, lineno, (long long)rank);
    }
    free(text);
    for (size_t i = 0; st == TG_OK && i < n_added; i++) {
        const tg_added_token *a = &added[i];
        size_t l = a->content ? strlen(a->content) : 0;
        st = l && tg__utf8_check(a->content, l) == l ? tg__tok_add_added(t, a->content, l, a->id, a->special) : TG_EFORMAT;
        if (st == TG_ENOMEM) st = no_memory();
        else if (st != TG_OK)
            st = tg_error_status(TG_EINVAL, "tokenizer: added token %zu (\"%.40s\", id %lld) is empty, not UTF-8, or its id is taken",
                                 i, a->content ? a->content : "", (long long)a->id);
    }
    if (st == TG_OK) st = tg__tok_finish(t, pattern, TG__NORM_NONE, true, true, path);
    if (st != TG_OK) return load_failed(t);
    return t;
}

/* Llama 3's special tokens as its tokenizer.model is read (the book's
 * Llama3Tokenizer): ids 128000.. after the 128,000 ranks, the reserved ones
 * filling the gaps. */
static tg_tokenizer *load_llama3_model(const char *path)
{
    static const char *const named[] = {"<|begin_of_text|>", "<|end_of_text|>", NULL, NULL, NULL, NULL,
                                        "<|start_header_id|>", "<|end_header_id|>", NULL, "<|eot_id|>"};
    tg_added_token sp[256];
    char names[256][40];
    int reserved = 0;
    for (int i = 0; i < 256; i++) {
        const char *n = i < 10 ? named[i] : NULL;
        if (!n) {
            snprintf(names[i], sizeof names[i], "<|reserved_special_token_%d|>", reserved++);
            n = names[i];
        }
        sp[i] = (tg_added_token){n, 128000 + i, true};
    }
    return tg_tokenizer_load_tiktoken(path, TG_LLAMA3_PATTERN, sp, 256);
}

/* ---- GPT-2's installed files ------------------------------------------------------------------ */

#ifndef TG_DATA_INSTALLED
#define TG_DATA_INSTALLED ""
#endif

/* dir + "/" + name in buf; false (with a message naming what) if too long. */
static bool join_path(char *buf, size_t size, const char *dir, const char *name, const char *what)
{
    int n = snprintf(buf, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size) {
        tg_error("tokenizer: %s is too long (%zu bytes)", what, strlen(dir));
        return false;
    }
    return true;
}

const char *tg_tokenizer_default_dir(void)
{
    static _Thread_local char dir[4096];
    char probe[4096 + 16];
    const char *env = getenv("TAPEGRAD_DATA");
    bool from_env = env && *env;
    if (!join_path(dir, sizeof dir, from_env ? env : TG_DATA_INSTALLED, "gpt2",
                   from_env ? "TAPEGRAD_DATA" : "the installed data folder") ||
        !join_path(probe, sizeof probe, dir, "encoder.json", "the vocabulary's path"))
        return NULL;
    if (access(probe, R_OK) == 0) return dir;
    if (from_env) return tg_error("TAPEGRAD_DATA=%.300s has no gpt2/encoder.json", env);
    return tg_error("GPT-2's vocabulary is not installed (%.300s/encoder.json: not readable); "
                    "set TAPEGRAD_DATA to the folder that holds gpt2/", dir);
}

tg_tokenizer *tg_tokenizer_load_dir(const char *dir)
{
    if (!dir && !(dir = tg_tokenizer_default_dir())) return NULL;
    size_t n = strlen(dir) + 16;
    char *a = malloc(n), *b = malloc(n);
    tg_tokenizer *t = NULL;
    if (a && b) {
        snprintf(a, n, "%s/encoder.json", dir);
        snprintf(b, n, "%s/vocab.bpe", dir);
        t = tg_tokenizer_load(a, b);
    } else {
        tg_error("tokenizer: out of memory");
    }
    free(a);
    free(b);
    return t;
}

/* ---- one entry point ----------------------------------------------------------------------------- */

static bool readable(const char *dir, const char *name, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/%s", dir, name);
    return n > 0 && (size_t)n < size && access(buf, R_OK) == 0;
}

tg_tokenizer *tg_tokenizer_load_file(const char *path)
{
    if (!path) return tg_tokenizer_load_dir(NULL);
    struct stat sb;
    if (stat(path, &sb) != 0) return tg_error("tokenizer: cannot open %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        char buf[4096];
        if (readable(path, "tokenizer.json", buf, sizeof buf)) return tg_tokenizer_load_json(buf);
        if (readable(path, "encoder.json", buf, sizeof buf)) return tg_tokenizer_load_dir(path);
        if (readable(path, "tokenizer.model", buf, sizeof buf)) return load_llama3_model(buf);
        return tg_error("tokenizer: %s holds no tokenizer.json, encoder.json or tokenizer.model", path);
    }
    FILE *f = fopen(path, "rb");
    if (!f) return tg_error("tokenizer: cannot open %s: %s", path, strerror(errno));
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    fclose(f);
    if (c == EOF) return tg_error("tokenizer: %s is empty", path);
    return c == '{' ? tg_tokenizer_load_json(path) : load_llama3_model(path);
}
