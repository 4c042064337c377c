/* tapegrad: the command-line tool (README.md, "The command line"):
 * dispatch to the subcommands and the shared error line. main() is in
 * tapegrad.c and only forwards to tg_cli_main, so that a fuzzer or a test can
 * run the whole command line in-process and get the exit status back. */
#include "cli.h"

#include <errno.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <tapegrad.h>

/* The commands: a new one is its own file and a row here. Those that
 * train run data parallel under mpirun; the others would run once per
 * process, each alone. */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    bool data_parallel;
    const char *summary; /* the --help line(s) */
} commands[] = {
    {"attention", tg_cmd_attention, false,
     "build one attention module, run it, print output / gradients /\n"
     "              gradcheck, save or load its state_dict (safetensors)"},
    {"train", tg_cmd_train, false, "train a toy attention layer with SGD (teacher-student task)"},
    {"bench", tg_cmd_bench, true,
     "time one training step of an attention module, or of the GPTModel\n"
     "              (--model gpt) or its classifier (--model classify)"},
    {"tokenize", tg_cmd_tokenize, false, "a tokenizer (GPT-2, Qwen3, Llama 3): text or a chat to ids, ids to text"},
    {"summary", tg_cmd_summary, false, "print the book's GPTModel as PyTorch does, with its size"},
    {"generate", tg_cmd_generate, false, "generate text with the book's GPTModel (KV cache)"},
    {"pretrain", tg_cmd_pretrain, true, "pretrain the GPTModel on a text as the book's chapter 5 does"},
    {"finetune", tg_cmd_finetune, true,
     "fine-tune it as chapters 6 (classify) and 7 (instruct) do, with\n"
     "              or without LoRA (appendix E)"},
    {"export", tg_cmd_export, false,
     "write a model as a Hugging Face folder or a GGUF file (LoRA merged\n"
     "              or as PEFT's adapter)"},
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void print_usage(void)
{
    fputs("usage: tapegrad <command> [options]\n"
          "\n"
          "Tensors, autograd, the attention modules and the GPT of \"Build a Large\n"
          "Language Model (From Scratch)\", in C, equal to PyTorch 1.13.\n"
          "\n"
          "commands:\n",
          stdout);
    for (int i = 0; i < N_COMMANDS; i++) printf("  %-11s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "Run 'tapegrad <command> --help' for a command's options. The training\n"
          "commands (pretrain, finetune, bench --model) run data parallel under\n"
          "mpirun -np N.\n"
          "Exit status: 0 success, 1 gradcheck FAIL or training diverged, 2 bad\n"
          "arguments or a runtime error (one line on stderr).\n",
          stdout);
}

int tg_cli_num_commands(void) { return N_COMMANDS; }
const char *tg_cli_command_name(int i) { return i >= 0 && i < N_COMMANDS ? commands[i].name : NULL; }

/* "attention, train, ... or finetune" */
static const char *command_names(void)
{
    static char names[256];
    size_t n = 0;
    for (int i = 0; i < N_COMMANDS && n < sizeof names; i++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i == 0 ? "" : i == N_COMMANDS - 1 ? " or " : ", ",
                              commands[i].name);
    return names;
}

bool tg_cli_check_only = false;
FILE *tg_cli_errfile = NULL;
static bool error_said; /* tg_cli_error printed this command line's line */
static int stdout_errno; /* why a flush of standard output failed (0: unknown) */

void tg_cli_note_bf16(tg_numerics n)
{
    static bool said;
    if (n != TG_NUMERICS_BF16 || said || tg_numerics_bf16_native()) return;
    said = true;
    FILE *f = tg_cli_errfile ? tg_cli_errfile : stderr;
    fprintf(f, "tapegrad: bf16: this CPU has no bf16 hardware (AVX512_BF16 or AMX) for oneDNN; the products are "
               "emulated on sgemm (the same numbers, slower than --precision fast)\n");
    fflush(f);
}

void tg_cli_json_bf16(json_t *o, tg_numerics n)
{
    if (n != TG_NUMERICS_BF16) return;
    json_object_set_new(o, "bf16", json_string(tg_numerics_bf16_native() ? "native" : "emulated"));
    json_object_set_new(o, "bf16_kernel", json_string(tg_numerics_bf16_kernel()));
}

int tg_cli_error(const char *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* exactly one line, whatever the message (or a user's argument) holds */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    FILE *f = tg_cli_errfile ? tg_cli_errfile : stderr;
    fprintf(f, "tapegrad%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", msg);
    fflush(f);
    error_said = true;
    return TG_CLI_USAGE;
}

bool tg_cli_flush_stdout(void)
{
    errno = 0;
    if (fflush(stdout) != 0 && !stdout_errno) stdout_errno = errno;
    return !ferror(stdout);
}

int tg_cli_stdout_error(int err)
{
    if (!stdout_errno) stdout_errno = err;
    /* one line per command line: a command that failed has said why */
    if (!error_said)
        tg_cli_error(NULL, "writing standard output: %s", stdout_errno ? strerror(stdout_errno) : "write error");
    return TG_CLI_USAGE;
}

int tg_cli_print_error(const char *cmd)
{
    int err = errno;
    return ferror(stdout) ? tg_cli_stdout_error(err) : tg_cli_lib_error(cmd, NULL);
}

bool tg_cli_help_check = false;

/* Whether the help text of c names option `name` ("--lr" followed by
 * neither a letter, a digit nor '-'). */
static bool help_names(const tg_cli_command *c, const char *name)
{
    const char *texts[4] = {c->help, c->help_more[0], c->help_more[1], c->help_more[2]};
    size_t n = strlen(name);
    for (int k = 0; k < 4; k++)
        for (const char *p = texts[k]; p && (p = strstr(p, name)); p += n) {
            char after = p[n];
            if (!(after == '-' || (after >= 'a' && after <= 'z') || (after >= '0' && after <= '9'))) return true;
        }
    return false;
}

bool tg_cli_parse(const tg_cli_command *c, int argc, char **argv, int *status)
{
    if (tg_cli_help_check) { /* every option this parse takes is in --help */
        int missing = 0;
        for (int i = 0; i < c->nopts; i++)
            if (!help_names(c, c->opts[i].name))
                missing++, tg_cli_error(c->name, "--help does not name %s", c->opts[i].name);
        *status = missing ? TG_CLI_USAGE : TG_CLI_OK;
        return false;
    }
    char err[512];
    tg_args_status st = tg_cli_parse_options(argc, argv, c->opts, c->nopts, err, sizeof err);
    if (st == TG_ARGS_HELP) {
        bool ok = fputs(c->help, stdout) != EOF;
        for (int k = 0; ok && k < 3 && c->help_more[k]; k++) ok = fputs(c->help_more[k], stdout) != EOF;
        *status = ok ? TG_CLI_OK : tg_cli_stdout_error(errno);
    } else if (st != TG_ARGS_OK) {
        *status = tg_cli_error(c->name, "%s", err);
    }
    return st == TG_ARGS_OK;
}

double tg_cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tg_cli_warn_blas(const char *cmd)
{
    const char *info = tg_blas_info();
    if (strstr(info, "(pthreads build)"))
        fprintf(stderr, "tapegrad %s: warning: the BLAS loaded is OpenBLAS's pthreads build, whose threads fight "
                        "OpenMP's for the cores (several times slower); install libopenblas-openmp-dev and "
                        "rebuild, or see README.md, \"Installing\"\n", cmd);
}

int tg_cli_print_json(const char *cmd, json_t *o, size_t flags)
{
    char *text = o ? json_dumps(o, flags) : NULL;
    json_decref(o);
    if (!text) return tg_cli_error(cmd, "--json: out of memory");
    puts(text);
    free(text);
    return TG_CLI_OK;
}

json_t *tg_cli_json_ids(const int64_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

json_t *tg_cli_json_text(const char *text, size_t len)
{
    json_t *s = json_stringn(text, len);
    return s ? s : json_null();
}

int tg_cli_lib_error(const char *cmd, const char *what)
{
    const char *e = tg_last_error();
    if (!e || !*e) e = "unknown error";
    if (what) return tg_cli_error(cmd, "%s: %s", what, e);
    return tg_cli_error(cmd, "%s", e);
}

double tg_cli_estimate_bytes(int64_t batch, int64_t tokens, int64_t d_in, int64_t d_out, int64_t heads, bool fused)
{
    double B = (double)batch, T = (double)tokens, di = (double)d_in, dd = (double)d_out, h = (double)heads;
    /* composed: a handful of (B, h, T, T) score-sized tensors and their
     * gradients; fused: only the (T, T) mask buffer (per head for the
     * wrapper). Then the (B, T, d) activations, and the weights with gradient
     * and momentum. */
    double scores = fused ? 2.0 * h * T * T : 12.0 * B * h * T * T;
    double elems = scores + 40.0 * B * T * (di + dd) * (h > 1 ? 2.0 : 1.0) + 8.0 * (di + dd) * dd * h;
    return 8.0 * elems;
}

int tg_cli_main(int argc, char **argv)
{
    error_said = false;
    if (argc < 2 || !argv || !argv[1])
        return tg_cli_error(NULL, "missing command (%s; see tapegrad --help)", command_names());
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        print_usage();
        return TG_CLI_OK;
    }
    if (strcmp(cmd, "--version") == 0) {
        puts("tapegrad 0.1.0");
        return TG_CLI_OK;
    }
    tg_clear_error();
    for (int i = 0; i < N_COMMANDS; i++) {
        if (strcmp(cmd, commands[i].name) != 0) continue;
        if (tg_dist_launched() > 1 && !commands[i].data_parallel)
            return tg_cli_error(NULL, "mpirun started %d processes, but only the training commands (pretrain, "
                                      "finetune, bench) run data parallel; run '%.100s' without mpirun",
                                tg_dist_launched(), cmd);
        return commands[i].run(argc - 1, argv + 1);
    }
    return tg_cli_error(NULL, "unknown command '%.200s' (expected %s; see tapegrad --help)", cmd, command_names());
}

char *tg_cli_read_file(const char *cmd, const char *opt, const char *path, bool allow_stdin, size_t *len)
{
    bool is_stdin = allow_stdin && strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        tg_cli_error(cmd, "%s %.300s: %s", opt, path, strerror(errno));
        return NULL;
    }
    /* cap bytes of content and one more for the NUL that ends them */
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b = cap >= ((size_t)1 << 32) ? NULL : realloc(buf, 2 * cap + 1);
        if (!b) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = b, cap *= 2;
    }
    int err = ferror(f) ? errno : 0;
    if (!is_stdin) fclose(f);
    if (!buf || err) {
        tg_cli_error(cmd, "%s %.300s: %s", opt, path, buf ? strerror(err) : "too large to hold in memory");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

int tg_cli_check_no_nul(const char *cmd, const char *opt, const char *path, const char *text, size_t len,
                        const char *why)
{
    const char *z = memchr(text, '\0', len);
    if (!z) return TG_CLI_OK;
    return tg_cli_error(cmd, "%s %.300s: NUL byte at offset %zu (%s)", opt, path, (size_t)(z - text), why);
}

/* Can path be written: created, or replaced as an atomic save replaces it
 * (nothing is changed)? errno says why not. A new path is probed as the
 * save makes it, with a temporary file beside it: path itself never appears
 * (something waiting for the file would otherwise see an empty one come and
 * go). */
static bool writable(const char *path)
{
    if (access(path, F_OK) == 0) {
        FILE *f = fopen(path, "r+b"); /* opens without changing it */
        if (!f) return false;
        fclose(f);
        return true;
    }
    size_t n = strlen(path);
    char *tmp = malloc(n + sizeof ".tmp.XXXXXX");
    if (!tmp) return errno = ENOMEM, false;
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkstemp(tmp);
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    free(tmp);
    return fd >= 0;
}

int tg_cli_check_output(const char *cmd, const char *opt, const char *path)
{
    /* a save renames over path and a plot would write into it: a device, a
     * FIFO (which would block) or a directory is refused before any work */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        mode_t m = sb.st_mode;
        const char *kind = S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
                         : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "a special file";
        return tg_cli_error(cmd, "%s: '%.300s' exists and is %s, not a regular file", opt, path, kind);
    }
    if (!writable(path)) return tg_cli_error(cmd, "%s: cannot write '%.300s': %s", opt, path, strerror(errno));
    return TG_CLI_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tg_cli_median(double *v, int64_t n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
