/* Strict argument parsing for the tapegrad CLI: numbers must be consumed
 * whole, be finite and lie in range; every problem is reported as one line. */
#ifndef TAPEGRAD_ARGS_H
#define TAPEGRAD_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --input: the book's 6x3 sentence or a random tensor. */
typedef struct {
    bool is_rand;
    uint64_t seed;
    int batched;      /* rand: 1 for rand:SEED:B:T, 0 for rand:SEED:T */
    int64_t batch, tokens;
} tg_cli_input;

/* Largest batch/token count an input spec may ask for. */
#define TG_CLI_MAX_TOKENS 65536
#define TG_CLI_MAX_BATCH 65536

/* Parses "book", "rand:SEED:T" or "rand:SEED:B:T" (SEED a non-negative
 * integer < 2^64, B and T positive integers). Returns 0 and fills *out, or -1
 * with a one-line message in err (never NULL-dereferences, never reads past
 * the string's end). */
int tg_cli_parse_input_spec(const char *s, tg_cli_input *out, char *err, size_t errlen);

/* Integers in [min, max], base 10, no spaces, the whole string. */
int tg_cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, char *err, size_t errlen);
/* Seeds: any integer in [0, 2^64), as torch.manual_seed takes. */
int tg_cli_parse_u64(const char *s, uint64_t *out, char *err, size_t errlen);
/* Finite doubles in [min, max] (or [min, max) when max_open). */
int tg_cli_parse_f64(const char *s, double min, double max, bool max_open, double *out, char *err, size_t errlen);

/* One option of a subcommand, written with designated initialisers; the
 * fields its type does not use stay zero:
 *   {.name = "--heads", .type = TG_OPT_INT, .dest = &a.heads, .imin = 1, .imax = 64} */
typedef enum { TG_OPT_FLAG, TG_OPT_INT, TG_OPT_U64, TG_OPT_DOUBLE, TG_OPT_STRING } tg_opt_type;

typedef struct {
    const char *name;  /* "--heads" */
    tg_opt_type type;
    void *dest;        /* bool*, int64_t*, uint64_t*, double*, const char** */
    int64_t imin, imax;
    double dmin, dmax;
    bool dmax_open;
    bool *seen;        /* optional: set when the option is given */
} tg_opt;

typedef enum { TG_ARGS_OK = 0, TG_ARGS_HELP = 1, TG_ARGS_ERROR = -1 } tg_args_status;

/* Parses argv[1..argc) against opts ("--name value" or "--name=value").
 * --help / -h anywhere gives TG_ARGS_HELP. On error writes a one-line message
 * (without the "tapegrad cmd: " prefix) into err. */
tg_args_status tg_cli_parse_options(int argc, char **argv, const tg_opt *opts, int nopts, char *err, size_t errlen);

#endif
