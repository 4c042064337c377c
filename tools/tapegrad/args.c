/* Strict parsing of the tapegrad command line. Numbers go through strtoll /
 * strtod and must consume the whole argument, because "3x" or " 3" silently
 * read as 3 is how a typo turns into a wrong experiment. */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* strtoll accepts leading spaces and a sign; we want digits only (optionally
 * one leading '-' so that "-3" reports as out of range, not as garbage). */
static bool plain_integer(const char *s)
{
    if (*s == '-' || *s == '+') s++;
    if (!*s) return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return false;
    return true;
}

int tg_cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, char *err, size_t errlen)
{
    const char *what = min > 0 ? "a positive integer" : min == 0 ? "a non-negative integer" : "an integer";
    if (!s || !plain_integer(s)) return fail(err, errlen, "expected %s, got '%s'", what, s ? s : "");
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || *end || v < min || v > max)
        return fail(err, errlen, "expected %s in [%" PRId64 ", %" PRId64 "], got '%s'", what, min, max, s);
    *out = (int64_t)v;
    return 0;
}

int tg_cli_parse_f64(const char *s, double min, double max, bool max_open, double *out, char *err, size_t errlen)
{
    if (!s || !*s || isspace((unsigned char)*s)) return fail(err, errlen, "expected a number, got '%s'", s ? s : "");
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end) return fail(err, errlen, "expected a number, got '%s'", s);
    if (!isfinite(v) || errno == ERANGE) return fail(err, errlen, "expected a finite number, got '%s'", s);
    if (min > 0 && min < 1e-200 && (v < min || v > max))
        return fail(err, errlen, "expected a positive number up to %g, got '%s'", max, s);
    if (v < min || v > max || (max_open && v >= max))
        return fail(err, errlen, "expected a number in [%g, %g%s, got '%s'", min, max, max_open ? ")" : "]", s);
    *out = v;
    return 0;
}

/* Non-negative integer < 2^64 for seeds (torch.manual_seed takes any uint64). */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int tg_cli_parse_u64(const char *s, uint64_t *out, char *err, size_t errlen)
{
    if (!s || parse_u64(s, strlen(s), out) != 0)
        return fail(err, errlen, "expected an integer in [0, 18446744073709551615], got '%s'", s ? s : "");
    return 0;
}

static int parse_count(const char *s, size_t len, int64_t max, int64_t *out)
{
    uint64_t v;
    if (parse_u64(s, len, &v) != 0 || v == 0 || v > (uint64_t)max) return -1;
    *out = (int64_t)v;
    return 0;
}

int tg_cli_parse_input_spec(const char *s, tg_cli_input *out, char *err, size_t errlen)
{
    if (!s || !out) return fail(err, errlen, "--input: missing value");
    memset(out, 0, sizeof *out);
    if (strcmp(s, "book") == 0) return 0;
    if (strncmp(s, "rand:", 5) != 0)
        return fail(err, errlen, "--input: expected 'book', 'rand:SEED:T' or 'rand:SEED:B:T', got '%s'", s);
    /* split the rest on ':' into at most 3 fields; a 4th is an error */
    const char *field[4];
    size_t flen[4];
    int nf = 0;
    const char *p = s + 5;
    for (;;) {
        const char *c = strchr(p, ':');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (nf == 3) {
            nf = 4;
            break;
        }
        field[nf] = p;
        flen[nf] = len;
        nf++;
        if (!c) break;
        p = c + 1;
    }
    if (nf < 2 || nf > 3)
        return fail(err, errlen, "--input: expected 'rand:SEED:T' or 'rand:SEED:B:T', got '%s'", s);
    if (parse_u64(field[0], flen[0], &out->seed) != 0)
        return fail(err, errlen, "--input: SEED must be a non-negative integer below 2^64, in '%s'", s);
    if (nf == 2) {
        if (parse_count(field[1], flen[1], TG_CLI_MAX_TOKENS, &out->tokens) != 0)
            return fail(err, errlen, "--input: T must be an integer in [1, %d], in '%s'", TG_CLI_MAX_TOKENS, s);
        out->batch = 1;
    } else {
        if (parse_count(field[1], flen[1], TG_CLI_MAX_BATCH, &out->batch) != 0)
            return fail(err, errlen, "--input: B must be an integer in [1, %d], in '%s'", TG_CLI_MAX_BATCH, s);
        if (parse_count(field[2], flen[2], TG_CLI_MAX_TOKENS, &out->tokens) != 0)
            return fail(err, errlen, "--input: T must be an integer in [1, %d], in '%s'", TG_CLI_MAX_TOKENS, s);
        out->batched = 1;
    }
    out->is_rand = true;
    return 0;
}

static const tg_opt *find_opt(const tg_opt *opts, int nopts, const char *name, size_t len)
{
    for (int i = 0; i < nopts; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0) return &opts[i];
    return NULL;
}

tg_args_status tg_cli_parse_options(int argc, char **argv, const tg_opt *opts, int nopts, char *err, size_t errlen)
{
    /* --help wins over any error elsewhere on the line, as users expect */
    for (int i = 1; i < argc; i++)
        if (argv[i] && (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) return TG_ARGS_HELP;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!a) break;
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            fail(err, errlen, "unexpected argument '%s' (options start with --)", a);
            return TG_ARGS_ERROR;
        }
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const tg_opt *o = find_opt(opts, nopts, a, nlen);
        if (!o) {
            fail(err, errlen, "unknown option '%.*s' (see --help)", (int)(nlen > 200 ? 200 : nlen), a);
            return TG_ARGS_ERROR;
        }
        if (o->seen) *o->seen = true;
        if (o->type == TG_OPT_FLAG) {
            if (eq) {
                fail(err, errlen, "%s: takes no value", o->name);
                return TG_ARGS_ERROR;
            }
            *(bool *)o->dest = true;
            continue;
        }
        const char *val;
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc || !argv[i + 1]) {
                fail(err, errlen, "%s: missing value", o->name);
                return TG_ARGS_ERROR;
            }
            val = argv[++i];
        }
        char sub[400];
        int rc = 0;
        switch (o->type) {
        case TG_OPT_INT: rc = tg_cli_parse_i64(val, o->imin, o->imax, (int64_t *)o->dest, sub, sizeof sub); break;
        case TG_OPT_U64: rc = tg_cli_parse_u64(val, (uint64_t *)o->dest, sub, sizeof sub); break;
        case TG_OPT_DOUBLE:
            rc = tg_cli_parse_f64(val, o->dmin, o->dmax, o->dmax_open, (double *)o->dest, sub, sizeof sub);
            break;
        case TG_OPT_STRING:
            if (!*val) {
                snprintf(sub, sizeof sub, "empty value");
                rc = -1;
            } else {
                *(const char **)o->dest = val;
            }
            break;
        case TG_OPT_FLAG: break;
        }
        if (rc != 0) {
            fail(err, errlen, "%s: %s", o->name, sub);
            return TG_ARGS_ERROR;
        }
    }
    return TG_ARGS_OK;
}
