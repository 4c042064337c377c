/* libFuzzer target: the whole tapegrad command line, in-process.
 *
 * The input is split on NUL bytes into argument strings (an empty trailing
 * piece is dropped) and run as `tapegrad <args...>` through tg_cli_main.
 * tg_cli_main must return 0, 1 or 2 and never crash, leak or hit UB.
 *
 * Guards, so a fuzzing run stays fast and harmless:
 *   - No files: an input with any fuzzed argument starting with --save,
 *     --load, --plot, --hf, --file, --text, --checkpoint or --resume is
 *     skipped (those read or write files, or standard input). The process
 *     works in a fresh private temporary directory, which holds the one
 *     file `pretrain` reads (a short text of its own), in case another
 *     option ever writes.
 *   - Small work only: an input is skipped when a size option (--d-in, --d-out,
 *     --d, --heads, --context, --tokens, --batch, and --input rand:SEED[:B]:T)
 *     asks for more than MAX_SIZE (B*T > MAX_SIZE for --input), --steps /
 *     --threads more than MAX_STEPS / MAX_THREADS, or --stride less than
 *     MAX_SIZE (more windows of pretrain's text, each step evaluated). The check is conservative:
 *     every argument that could be read as such an option's value is checked.
 *   - `train` and `bench` get small defaults put before the fuzzed options
 *     (--steps 1 for train; --batch 1 --tokens 4 --d 4 --heads 2 --steps 1
 *     --threads 1 for bench); `summary` and `generate` a small GPT
 *     (--vocab 8 --context 8 --emb 8 --heads 2 --layers 1, over any preset)
 *     and `generate` --max-new-tokens 2; `pretrain` trains a 1-layer GPT
 *     (context 8, emb 8) on that short text for one epoch with one-batch
 *     evaluations and 2-token samples; later options override them as
 *     usual, within the bounds above (--vocab, --emb, --layers,
 *     --max-new-tokens, --epochs, --eval-iter and --sample-tokens too).
 *   - At most MAX_ARGS arguments of at most MAX_ARG_LEN bytes.
 * Use absolute paths for the corpus, artifacts and, for -merge/-fork/-jobs,
 * the fuzzer binary itself: the target chdir()s away.
 * Standard output goes to /dev/null; the CLI's one-line errors stay on stderr
 * (run with -close_fd_mask=2 to hide them, as tools/fuzz.sh does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_cli"
#include "fuzz.h"

#include "args.h"
#include "cli.h"

#define MAX_ARGS 32
#define MAX_ARG_LEN 256
#define MAX_SIZE 8
#define MAX_STEPS 3
#define MAX_THREADS 2

static char workdir[] = "/tmp/tapegrad-fuzz-cli.XXXXXX";
#define TEXT_FILE "text.txt"
static char text_path[sizeof workdir + sizeof TEXT_FILE + 1];

static void remove_workdir(void)
{
    (void)unlink(text_path);
    if (chdir("/") == 0) (void)rmdir(workdir); /* empty unless something wrote a file */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (!mkdtemp(workdir) || chdir(workdir) != 0) {
        perror("fuzz_cli: private temporary directory");
        abort();
    }
    atexit(remove_workdir);
    /* pretrain's text: about 80 ids, a few windows of 9 in each part */
    snprintf(text_path, sizeof text_path, "%s/%s", workdir, TEXT_FILE);
    FILE *t = fopen(text_path, "w");
    if (!t || fputs("I HAD always thought Jack Gisburn rather a cheap genius--though a good fellow enough--so it "
                    "was no great surprise to me to hear that, in the height of his glory, he had dropped his "
                    "painting, married a rich widow, and established himself in a villa on the Riviera. "
                    "The height of his glory--that was what the women called it.\n",
                    t) < 0 || fclose(t) != 0) {
        perror("fuzz_cli: the pretrain text");
        abort();
    }
    if (!freopen("/dev/null", "w", stdout)) {
        perror("fuzz_cli: /dev/null");
        abort();
    }
    return 0;
}

static bool has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Lenient integer read of an option value: a value the CLI would reject is
 * harmless, so only values strtoll reads as a number matter. */
static bool value_too_big(const char *v, long long max)
{
    errno = 0;
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (end == v) return false;
    return errno == ERANGE || x > max;
}

static bool input_too_big(const char *v)
{
    tg_cli_input in;
    if (tg_cli_parse_input_spec(v, &in, NULL, 0) != 0) return false;
    return in.is_rand && in.batch * in.tokens > MAX_SIZE;
}

typedef struct {
    const char *name;
    long long max; /* -1: an --input spec */
    long long min; /* a smaller value is more work (--stride: more windows) */
} bounded_opt;

static const bounded_opt bounded[] = {
    {"--d-in", MAX_SIZE, 0},   {"--d-out", MAX_SIZE, 0},    {"--d", MAX_SIZE, 0},         {"--heads", MAX_SIZE, 0},
    {"--context", MAX_SIZE, 0}, {"--tokens", MAX_SIZE, 0},  {"--batch", MAX_SIZE, 0},     {"--steps", MAX_STEPS, 0},
    {"--threads", MAX_THREADS, 0}, {"--input", -1, 0},    {"--vocab", MAX_SIZE, 0},     {"--emb", MAX_SIZE, 0},
    {"--layers", MAX_STEPS, 0},  {"--max-new-tokens", MAX_STEPS, 0}, {"--epochs", MAX_STEPS, 0},
    {"--eval-iter", MAX_STEPS, 0}, {"--sample-tokens", MAX_STEPS, 0}, {"--stride", LLONG_MAX, MAX_SIZE},
};

static bool value_too_small(const char *v, long long min)
{
    errno = 0;
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    return end != v && errno != ERANGE && x < min;
}

static bool check_value(const bounded_opt *b, const char *v)
{
    if (b->max < 0) return input_too_big(v);
    return value_too_big(v, b->max) || (b->min > 0 && value_too_small(v, b->min));
}

/* true: run it; false: skip the input. Arguments from `fuzzed` on come from
 * the input (the ones before are the command and its defaults). */
static bool acceptable(int argc, char **argv, int fuzzed)
{
    static const char *const files[] = {"--save", "--load", "--plot", "--hf", "--file", "--text", "--checkpoint",
                                        "--resume"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        for (size_t k = 0; i >= fuzzed && k < sizeof files / sizeof files[0]; k++)
            if (has_prefix(a, files[k])) return false;
        for (size_t k = 0; k < sizeof bounded / sizeof bounded[0]; k++) {
            const bounded_opt *b = &bounded[k];
            size_t n = strlen(b->name);
            if (strncmp(a, b->name, n) != 0) continue;
            if (a[n] == '=' && check_value(b, a + n + 1)) return false;
            if (a[n] == '\0' && i + 1 < argc && check_value(b, argv[i + 1])) return false;
        }
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *train_defaults[] = {"--steps", "1"};
    static const char *bench_defaults[] = {"--batch", "1", "--tokens", "4", "--d", "4", "--heads", "2",
                                           "--steps", "1", "--threads", "1"};
    static const char *gpt_defaults[] = {"--vocab", "8", "--context", "8", "--emb", "8", "--heads", "2",
                                         "--layers", "1", "--max-new-tokens", "2"};
    const char *pretrain_defaults[] = {"--text", text_path, "--context", "8", "--emb", "8", "--heads", "2",
                                       "--layers", "1", "--epochs", "1", "--eval-iter", "1", "--sample-tokens", "2",
                                       "--threads", "1"};
    if (size > MAX_ARGS * (MAX_ARG_LEN + 1)) return 0;

    /* split on NUL into at most MAX_ARGS pieces */
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *pieces[MAX_ARGS];
    int np = 0;
    for (size_t pos = 0; pos < size;) {
        size_t len = strlen(buf + pos);
        if (np == MAX_ARGS || len > MAX_ARG_LEN) {
            free(buf);
            return 0;
        }
        pieces[np++] = buf + pos;
        pos += len + 1;
    }

    char *argv[1 + 1 + 18 + MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "tapegrad";
    if (np > 0) argv[argc++] = pieces[0];
    const char **defaults = NULL;
    int ndefaults = 0;
    if (np > 0 && strcmp(pieces[0], "train") == 0) {
        defaults = train_defaults;
        ndefaults = (int)(sizeof train_defaults / sizeof *train_defaults);
    } else if (np > 0 && strcmp(pieces[0], "bench") == 0) {
        defaults = bench_defaults;
        ndefaults = (int)(sizeof bench_defaults / sizeof *bench_defaults);
    } else if (np > 0 && (strcmp(pieces[0], "summary") == 0 || strcmp(pieces[0], "generate") == 0)) {
        defaults = gpt_defaults;
        ndefaults = (int)(sizeof gpt_defaults / sizeof *gpt_defaults) - (strcmp(pieces[0], "summary") == 0 ? 2 : 0);
    } else if (np > 0 && strcmp(pieces[0], "pretrain") == 0) {
        defaults = pretrain_defaults;
        ndefaults = (int)(sizeof pretrain_defaults / sizeof *pretrain_defaults);
    }
    for (int i = 0; i < ndefaults; i++) argv[argc++] = (char *)defaults[i];
    int fuzzed = argc;
    for (int i = 1; i < np; i++) argv[argc++] = pieces[i];
    argv[argc] = NULL;

    if (acceptable(argc, argv, fuzzed)) {
        int rc = tg_cli_main(argc, argv);
        if (rc != 0 && rc != 1 && rc != 2) {
            fprintf(stderr, "fuzz_cli: tg_cli_main returned %d (expected 0, 1 or 2)\n", rc);
            abort();
        }
    }
    free(buf);
    return 0;
}
