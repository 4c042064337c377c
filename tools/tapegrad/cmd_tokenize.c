/* tapegrad tokenize: a tokenizer from the command line
 * (docs/tokenizers.md). Encodes --text, --file (or standard input with
 * --file -) into ids on stdout and reports the speed on stderr, as plain
 * text or as a chat (--chat, --messages); --decode turns ids back into
 * text. */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tokenize_help =
    "usage: tapegrad tokenize [--tokenizer FILE] [--text STR | --file PATH | --messages FILE]\n"
    "                         [--chat] [--allow-special] [--generation-prompt] [--think]\n"
    "                         [--decode \"ID ID ...\"] [--json]\n"
    "\n"
    "Byte-level BPE: GPT-2's by default (tiktoken's \"gpt2\" encoding;\n"
    "\"<|endoftext|>\" is id 50256), or the one --tokenizer names (Qwen3, Llama 3).\n"
    "Prints the ids of the text, space-separated, on one line, and\n"
    "\"N tokens from B bytes in X ms (Y MB/s)\" on stderr.\n"
    "\n"
    TG_CLI_TOKENIZER_HELP
    "  --text STR          the text to encode\n"
    "  --file PATH         a UTF-8 file to encode ('-' reads standard input)\n"
    "  --allow-special     special tokens in the text (\"<|im_start|>\") are their ids;\n"
    "                      otherwise they are plain text\n"
    "  --chat              the text is one user message, in the tokenizer's chat\n"
    "                      format (Qwen3's <|im_start|>, Llama 3's headers)\n"
    "  --messages FILE     a conversation in the chat format: a JSON array of\n"
    "                      {\"role\": ..., \"content\": ...} ('-' reads standard input)\n"
    "  --generation-prompt (--chat, --messages) end with the assistant's header\n"
    "  --think             (Qwen3) leave the thinking open: no empty <think></think>\n"
    "                      after the generation prompt\n"
    "  --decode IDS        print the text of these ids (separated by spaces or commas)\n"
    "  --json              one JSON object: {\"ids\", \"tokens\", \"bytes\", \"seconds\",\n"
    "                      \"mb_per_s\"}, or {\"ids\", \"text\"} with --decode (text is\n"
    "                      null if the ids end inside a UTF-8 character)\n"
    "\n"
    "GPT-2's vocabulary (gpt2/encoder.json, gpt2/vocab.bpe) is found in $TAPEGRAD_DATA,\n"
    "the installed share/tapegrad/ (pkg-config --variable=datadir tapegrad), or\n"
    "the source tree's data/; Qwen3's tokenizer.json is in data/qwen3/ beside it.\n";

/* "ID ID ..." (spaces, tabs or commas between) -> ids; -1 with a message. */
static int parse_ids(const char *s, int64_t vocab, int64_t **ids, size_t *n)
{
    size_t cap = 16, k = 0;
    int64_t *v = malloc(cap * sizeof *v);
    if (!v) return tg_cli_error("tokenize", "out of memory"), -1;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == ',' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        const char *q = p;
        while (*q && *q != ' ' && *q != '\t' && *q != ',' && *q != '\n' && *q != '\r') q++;
        char tok[32], err[256];
        size_t len = (size_t)(q - p);
        int64_t id;
        if (len >= sizeof tok) {
            free(v);
            return tg_cli_error("tokenize", "--decode: id %zu ('%.40s...') is not an integer in [0, %lld)", k + 1, p,
                                (long long)vocab), -1;
        }
        memcpy(tok, p, len);
        tok[len] = '\0';
        if (tg_cli_parse_i64(tok, 0, vocab - 1, &id, err, sizeof err) != 0) {
            free(v);
            return tg_cli_error("tokenize", "--decode: id %zu: %s", k + 1, err), -1;
        }
        if (k == cap) {
            int64_t *w = realloc(v, 2 * cap * sizeof *v);
            if (!w) {
                free(v);
                return tg_cli_error("tokenize", "out of memory"), -1;
            }
            v = w, cap *= 2;
        }
        v[k++] = id;
        p = q;
    }
    *ids = v, *n = k;
    return 0;
}

static int decode(tg_tokenizer *tok, const char *spec, bool json)
{
    int64_t *ids;
    size_t n;
    if (parse_ids(spec, tg_tokenizer_vocab_size(tok), &ids, &n) != 0) return TG_CLI_USAGE;
    char *text;
    size_t len;
    int rc = TG_CLI_OK;
    if (tg_tokenizer_decode(tok, ids, n, &text, &len) != TG_OK) {
        rc = tg_cli_lib_error("tokenize", "--decode");
    } else if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "ids", tg_cli_json_ids(ids, n));
        json_object_set_new(o, "text", tg_cli_json_text(text, len));
        rc = tg_cli_print_json("tokenize", o, JSON_COMPACT | JSON_ENSURE_ASCII);
    } else {
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout);
    }
    free(text);
    free(ids);
    return rc;
}

/* The ids separated by sep, streamed to stdout through one buffer: no JSON
 * tree, no printf (ids are in [0, 2^31): no sign; a million print in
 * milliseconds). */
static void write_ids(const int64_t *ids, size_t n, char sep)
{
    char buf[1 << 16];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (o > sizeof buf - 24) fwrite(buf, 1, o, stdout), o = 0;
        if (i) buf[o++] = sep;
        char d[20];
        int k = 0;
        uint64_t v = (uint64_t)ids[i];
        do d[k++] = (char)('0' + v % 10), v /= 10;
        while (v);
        while (k) buf[o++] = d[--k];
    }
    fwrite(buf, 1, o, stdout);
}

/* --json: {"ids": [...], "tokens", "bytes", "seconds", "mb_per_s"} on one
 * line. The ids are streamed; the rest is one small jansson object whose
 * text follows them. */
static int print_encode_json(const int64_t *ids, size_t n, size_t len, double seconds, double mbps)
{
    json_t *o = json_object();
    json_object_set_new(o, "tokens", json_integer((json_int_t)n));
    json_object_set_new(o, "bytes", json_integer((json_int_t)len));
    json_object_set_new(o, "seconds", json_real(seconds));
    json_object_set_new(o, "mb_per_s", json_real(mbps));
    char *rest = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(o);
    if (!rest || rest[0] != '{') {
        free(rest);
        return tg_cli_error("tokenize", "--json: out of memory");
    }
    fputs("{\"ids\":[", stdout);
    write_ids(ids, n, ',');
    printf("],%s\n", rest + 1);
    free(rest);
    return TG_CLI_OK;
}

typedef struct {
    bool json, allow_special, chat;
    const tg_chat_message *messages; /* --messages: the conversation, else NULL */
    size_t n_messages;
    tg_chat_options chat_opt;
} encode_args;

/* text: len bytes and a NUL after them (a --text argument, or
 * tg_cli_read_file's buffer); with --chat, a C string whole (a file's
 * content is checked for NUL bytes before). With --messages text is not
 * read and len counts the contents' bytes for the speed line. */
static int encode(tg_tokenizer *tok, const char *text, size_t len, const encode_args *e)
{
    int64_t *ids;
    size_t n;
    bool json = e->json;
    double t0 = tg_cli_now();
    int st;
    if (e->messages) {
        st = tg_tokenizer_encode_chat(tok, e->messages, e->n_messages, &e->chat_opt, &ids, &n);
    } else if (e->chat) {
        tg_chat_message m = {"user", text};
        st = tg_tokenizer_encode_chat(tok, &m, 1, &e->chat_opt, &ids, &n);
    } else {
        st = tg_tokenizer_encode_special(tok, text, len, e->allow_special, &ids, &n);
    }
    if (st != TG_OK) return tg_cli_lib_error("tokenize", NULL);
    double seconds = tg_cli_now() - t0;
    double mbps = seconds > 0 ? (double)len / 1e6 / seconds : 0.0;
    int rc = TG_CLI_OK;
    if (json) {
        rc = print_encode_json(ids, n, len, seconds, mbps);
    } else {
        write_ids(ids, n, ' ');
        putchar('\n');
        if (!tg_cli_flush_stdout())
            rc = tg_cli_stdout_error(0);
        else
            fprintf(stderr, "%zu tokens from %zu bytes in %.3f ms (%.1f MB/s)\n", n, len, seconds * 1e3, mbps);
    }
    free(ids);
    return rc;
}

/* --messages: a JSON array of {"role", "content"} strings. NULL after the
 * error line. The strings live in *root (the caller frees it). */
static tg_chat_message *read_messages(const char *path, json_t **root, size_t *n)
{
    size_t len = 0;
    char *buf = tg_cli_read_file("tokenize", "--messages", path, true, &len);
    if (!buf) return NULL;
    if (tg_cli_check_no_nul("tokenize", "--messages", path, buf, len, "JSON text holds no NUL byte") != TG_CLI_OK) {
        free(buf);
        return NULL;
    }
    json_error_t err;
    *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
    free(buf);
    if (!*root) return tg_cli_error("tokenize", "--messages: %s line %d: %s", path, err.line, err.text), NULL;
    if (!json_is_array(*root))
        return tg_cli_error("tokenize", "--messages: %s must be a JSON array of {\"role\", \"content\"}", path), NULL;
    *n = json_array_size(*root);
    tg_chat_message *m = calloc(*n ? *n : 1, sizeof *m);
    if (!m) return tg_cli_error("tokenize", "out of memory"), NULL;
    for (size_t i = 0; i < *n; i++) {
        json_t *o = json_array_get(*root, i), *r = json_object_get(o, "role"), *c = json_object_get(o, "content");
        if (!json_is_string(r) || !json_is_string(c) || strlen(json_string_value(r)) != json_string_length(r) ||
            strlen(json_string_value(c)) != json_string_length(c)) {
            free(m);
            return tg_cli_error("tokenize", "--messages: %s: message %zu needs \"role\" and \"content\" strings (without NUL)",
                                path, i), NULL;
        }
        m[i] = (tg_chat_message){json_string_value(r), json_string_value(c)};
    }
    return m;
}

int tg_cmd_tokenize(int argc, char **argv)
{
    const char *cmd = "tokenize";
    const char *text = NULL, *file = NULL, *ids = NULL, *tokenizer = NULL, *messages = NULL;
    encode_args e = {0};
    const tg_opt opts[] = {
        TG_CLI_TOKENIZER_OPT(tokenizer),
        {.name = "--text", .type = TG_OPT_STRING, .dest = &text},
        {.name = "--file", .type = TG_OPT_STRING, .dest = &file},
        {.name = "--messages", .type = TG_OPT_STRING, .dest = &messages},
        {.name = "--chat", .type = TG_OPT_FLAG, .dest = &e.chat},
        {.name = "--allow-special", .type = TG_OPT_FLAG, .dest = &e.allow_special},
        {.name = "--generation-prompt", .type = TG_OPT_FLAG, .dest = &e.chat_opt.add_generation_prompt},
        {.name = "--think", .type = TG_OPT_FLAG, .dest = &e.chat_opt.thinking},
        {.name = "--decode", .type = TG_OPT_STRING, .dest = &ids},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &e.json},
    };
    int rc;
    tg_cli_command c = {.name = cmd, .help = tokenize_help, .opts = opts, .nopts = TG_CLI_NOPTS(opts)};
    if (!tg_cli_parse(&c, argc, argv, &rc)) return rc;
    int given = (text != NULL) + (file != NULL) + (ids != NULL) + (messages != NULL);
    if (given == 0) return tg_cli_error(cmd, "nothing to do: give --text, --file, --messages or --decode");
    if (given > 1) return tg_cli_error(cmd, "--text, --file, --messages and --decode are exclusive");
    if (messages && e.chat) return tg_cli_error(cmd, "--chat and --messages are exclusive (--messages is a chat)");
    if ((e.chat_opt.add_generation_prompt || e.chat_opt.thinking) && !e.chat && !messages)
        return tg_cli_error(cmd, "--generation-prompt and --think need --chat or --messages");
    if (ids && (e.chat || e.allow_special)) return tg_cli_error(cmd, "--decode takes no --chat or --allow-special");
    e.chat_opt.allow_special = e.allow_special;
    if (tg_cli_check_only) return TG_CLI_OK;

    tg_tokenizer *tok = tg_cli_tokenizer(tokenizer);
    if (!tok) return tg_cli_lib_error(cmd, tokenizer ? "--tokenizer" : NULL);
    if ((e.chat || messages) && tg_tokenizer_chat_format(tok) == TG_CHAT_NONE)
        return tg_cli_error(cmd, "%s: this tokenizer has no chat format (Qwen3's, Llama 3's and Gemma 3's have one; give --tokenizer)",
                            e.chat ? "--chat" : "--messages");
    if (ids) {
        rc = decode(tok, ids, e.json);
    } else if (text) {
        rc = encode(tok, text, strlen(text), &e);
    } else if (messages) {
        json_t *root = NULL;
        e.messages = read_messages(messages, &root, &e.n_messages);
        size_t bytes = 0; /* the speed line counts the contents' bytes */
        for (size_t i = 0; e.messages && i < e.n_messages; i++) bytes += strlen(e.messages[i].content);
        rc = e.messages ? encode(tok, NULL, bytes, &e) : TG_CLI_USAGE;
        free((void *)e.messages);
        json_decref(root);
    } else {
        size_t len = 0;
        char *buf = tg_cli_read_file(cmd, "--file", file, true, &len);
        rc = !buf   ? TG_CLI_USAGE
           : e.chat ? tg_cli_check_no_nul(cmd, "--file", file, buf, len, "--chat takes text without NUL bytes")
                    : TG_CLI_OK;
        if (rc == TG_CLI_OK) rc = encode(tok, buf, len, &e);
        free(buf);
    }
    return rc;
}
