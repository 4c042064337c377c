/* tapegrad tokenize: GPT-2's tokenizer from the command line (README.md,
 * "Tokenizer"). Encodes --text, --file (or standard input with --file -)
 * into ids on stdout and reports the speed on stderr; --decode turns ids back
 * into text. */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tokenize_help =
    "usage: tapegrad tokenize [--text STR | --file PATH] [--decode \"ID ID ...\"] [--json]\n"
    "\n"
    "GPT-2's byte-level BPE (tiktoken's \"gpt2\" encoding; \"<|endoftext|>\" is\n"
    "id 50256). Prints the ids of the text, space-separated, on one line, and\n"
    "\"N tokens from B bytes in X ms (Y MB/s)\" on stderr.\n"
    "\n"
    "  --text STR        the text to encode\n"
    "  --file PATH       a UTF-8 file to encode ('-' reads standard input)\n"
    "  --decode IDS      print the text of these ids (separated by spaces or commas)\n"
    "  --json            one JSON object: {\"ids\", \"tokens\", \"bytes\", \"seconds\",\n"
    "                    \"mb_per_s\"}, or {\"ids\", \"text\"} with --decode (text is\n"
    "                    null if the ids end inside a UTF-8 character)\n"
    "\n"
    "The vocabulary (gpt2/encoder.json, gpt2/vocab.bpe) is found in $TAPEGRAD_DATA,\n"
    "the installed share/tapegrad/ (pkg-config --variable=datadir tapegrad), or\n"
    "the source tree's data/.\n";

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

static int encode(tg_tokenizer *tok, const char *text, size_t len, bool json)
{
    int64_t *ids;
    size_t n;
    double t0 = tg_cli_now();
    if (tg_tokenizer_encode(tok, text, len, &ids, &n) != TG_OK) return tg_cli_lib_error("tokenize", NULL);
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

int tg_cmd_tokenize(int argc, char **argv)
{
    const char *cmd = "tokenize";
    const char *text = NULL, *file = NULL, *ids = NULL;
    bool json = false;
    const tg_opt opts[] = {
        {.name = "--text", .type = TG_OPT_STRING, .dest = &text},
        {.name = "--file", .type = TG_OPT_STRING, .dest = &file},
        {.name = "--decode", .type = TG_OPT_STRING, .dest = &ids},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &json},
    };
    int rc;
    tg_cli_command c = {.name = cmd, .help = tokenize_help, .opts = opts, .nopts = TG_CLI_NOPTS(opts)};
    if (!tg_cli_parse(&c, argc, argv, &rc)) return rc;
    int given = (text != NULL) + (file != NULL) + (ids != NULL);
    if (given == 0) return tg_cli_error(cmd, "nothing to do: give --text, --file or --decode");
    if (given > 1) return tg_cli_error(cmd, "--text, --file and --decode are exclusive");
    if (tg_cli_check_only) return TG_CLI_OK;

    tg_tokenizer *tok = tg_cli_tokenizer();
    if (!tok) return tg_cli_lib_error(cmd, NULL);
    if (ids) {
        rc = decode(tok, ids, json);
    } else if (text) {
        rc = encode(tok, text, strlen(text), json);
    } else {
        size_t len = 0;
        char *buf = tg_cli_read_file("tokenize", "--file", file, true, &len);
        rc = buf ? encode(tok, buf, len, json) : TG_CLI_USAGE;
        free(buf);
    }
    return rc;
}
