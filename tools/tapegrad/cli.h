/* Shared declarations of the tapegrad command-line tool (tools/tapegrad).
 *
 * Every entry point returns an exit status instead of calling exit(), so that
 * a fuzzer can drive the whole argument parser in-process (tg_cli_main). */
#ifndef TAPEGRAD_CLI_H
#define TAPEGRAD_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "args.h"

#include <jansson.h>
#include <tapegrad.h>

/* Exit statuses (README.md, "The command line"). */
enum {
    TG_CLI_OK = 0,
    TG_CLI_FAIL = 1,  /* gradcheck FAIL, training diverged */
    TG_CLI_USAGE = 2  /* bad arguments or a runtime error from the library */
};

/* Check-only mode (tests and the argument fuzzer): each command parses and
 * validates its arguments exactly as usual, then returns TG_CLI_OK before it
 * builds a module, opens a file or computes anything. */
extern bool tg_cli_check_only;
/* Help-check mode (tests/test_cli_help.c): a command's parse checks that
 * its --help text names every option it takes instead of parsing, writes
 * one error line for each one missing (status TG_CLI_USAGE), and returns. */
extern bool tg_cli_help_check;
/* Where tg_cli_error writes its line (NULL: stderr). */
extern FILE *tg_cli_errfile;

/* Under bf16 without bf16 hardware, one line on stderr (once per process)
 * saying the products are emulated. */
void tg_cli_note_bf16(tg_numerics n);
/* "bf16": "native" or "emulated" and "bf16_kernel": the kernels the
 * products ran on (tg_numerics_bf16_kernel), for a bf16 run's JSON. */
void tg_cli_json_bf16(json_t *o, tg_numerics n);

/* The commands of the table in cli.c: how many, and the name of command i. */
int tg_cli_num_commands(void);
const char *tg_cli_command_name(int i);

/* The whole command line (argv[0] is the program name). */
int tg_cli_main(int argc, char **argv);

/* A command's arguments: its name (the error line's "tapegrad NAME: "), its
 * --help text and its option table. */
typedef struct {
    const char *name;
    const char *help;
    const tg_opt *opts;
    int nopts;
    const char *help_more[3]; /* printed after help (NULL: nothing), as
                               * TG_CLI_TRAIN_HELP, TG_CLI_MODEL_HELP */
} tg_cli_command;
#define TG_CLI_NOPTS(opts) ((int)(sizeof(opts) / sizeof((opts)[0])))

/* Parses argv[1..argc) against c->opts. true: the command goes on. false: it
 * is done, with *status TG_CLI_OK after the help text on stdout (--help or
 * -h anywhere) or TG_CLI_USAGE after the one error line on stderr. */
bool tg_cli_parse(const tg_cli_command *c, int argc, char **argv, int *status);

/* Subcommands: argv[0] is the subcommand name, options follow. */
int tg_cmd_attention(int argc, char **argv);
int tg_cmd_train(int argc, char **argv);
int tg_cmd_bench(int argc, char **argv);
int tg_cmd_summary(int argc, char **argv);
int tg_cmd_generate(int argc, char **argv);
int tg_cmd_tokenize(int argc, char **argv);
int tg_cmd_pretrain(int argc, char **argv);
int tg_cmd_finetune(int argc, char **argv);
int tg_cmd_export(int argc, char **argv);

/* The tokenizer of --tokenizer PATH (tg_tokenizer_load_file: a
 * tokenizer.json, a rank file or a folder), or with path NULL GPT-2's from
 * $TAPEGRAD_DATA/gpt2, the installed vocabulary or the source tree's
 * (tools/tapegrad/datadir.c); NULL with a message. The CLI owns it (loaded
 * once per process): callers do not free it. */
tg_tokenizer *tg_cli_tokenizer(const char *path);
/* The model's tokenizer: --tokenizer's file, else a Hugging Face folder's
 * tokenizer.json (hf: the --hf value, NULL or a GPT-2 file otherwise), else
 * the family's own (GPT-2's files, Qwen3's installed tokenizer.json; Llama
 * 3's is not shipped: an error says to give --tokenizer). */
tg_tokenizer *tg_cli_model_tokenizer(const char *path, const char *hf, const tg_decoder_config *cfg);
/* The file (or GPT-2's folder) tg_cli_model_tokenizer reads, in buf when it
 * is made there; NULL with a message. */
const char *tg_cli_model_tokenizer_path(const char *path, const char *hf, const tg_decoder_config *cfg, char *buf,
                                       size_t size);
/* Whether path names a directory (a Hugging Face folder for --hf). */
bool tg_cli_is_dir(const char *path);
/* Whether argv's --hf names a GPT-2 model.safetensors (not a folder): the
 * model then has GPT-2's q/k/v biases. */
bool tg_cli_hf_gpt2_file(int argc, char **argv);
/* The --tokenizer option row and its help line, shared by every command that
 * reads text. */
#define TG_CLI_TOKENIZER_OPT(var) {.name = "--tokenizer", .type = TG_OPT_STRING, .dest = &(var)}
#define TG_CLI_TOKENIZER_HELP                                                                      \
    "  --tokenizer FILE    a tokenizer.json (Qwen3's: data/qwen3/tokenizer.json), a\n"              \
    "                      tiktoken rank file (Llama 3's tokenizer.model) or a folder\n"            \
    "                      holding one (default: GPT-2's encoder.json and vocab.bpe)\n"

/* MODEL options (tools/tapegrad/model_args.c): a preset, then overrides;
 * zero fields keep the preset's value. */
typedef struct {
    const char *config;
    int64_t vocab, context, emb, heads, layers, hidden, head_dim, kv_groups, sliding_window;
    double dropout, rope_base, rope_local_base, query_pre_attn_scalar;
    bool dropout_seen, qkv_bias, rope_base_seen, qk_norm, no_qk_norm, config_seen, sliding_window_seen;
    const char *norm, *mlp, *layer_types; /* --norm layer|rms, --mlp gelu|swiglu|geglu, --layer-types LIST */
    bool recompute; /* --recompute: tg_gpt_set_recompute on the model built */
    uint64_t seed;
    const char *precision; /* --precision: exact (default), fast, bf16 */
    const char *const *hf; /* the command's --hf: a Hugging Face folder builds the model (NULL: none) */
    const char *hf_opt;    /* that option's name in messages (NULL: "--hf") */
    const char *weights;   /* --weights: bf16, q8 or f32 (NULL: f32, or what follow_hf says) */
    const bool *follow_hf; /* the command's: when true (generate; a LoRA run), the weights
                            * default to bf16 for a --hf folder storing BF16 (NULL: never) */
    const bool *frozen;    /* the command's: whether its weights are frozen (generate; a
                            * LoRA run): --weights bf16 or q8 needs it true (NULL: never) */
    tg_dtype convert_to;   /* set by tg_cli_model_parse: compact weights of a model with
                            * learned positions, which tg_cli_model_build converts to
                            * after the weights are in (TG_F32: none) */
    tg_numerics numerics;  /* what it names, set by tg_cli_model_parse */
} tg_cli_model;
/* gpt2-small, seed 123; context 0 keeps the preset's (pretrain passes 256). */
void tg_cli_model_defaults(tg_cli_model *m, int64_t context);
/* tg_cli_parse over the command's own options (c->opts) followed by MODEL's
 * into m, then the checked configuration into cfg (an error is the command's
 * one line, as tg_cli_parse's). */
bool tg_cli_model_parse(const tg_cli_command *c, int argc, char **argv, tg_cli_model *m, tg_decoder_config *cfg,
                        int *status);
/* The MODEL part of the commands' --help. */
#define TG_CLI_MODEL_HELP                                                                         \
    "model (MODEL) options, applied over the preset:\n"                                    \
    "  --config NAME   gpt2-small (default), gpt2-medium, gpt2-large, gpt2-xl,\n"           \
    "                  qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, llama3.2-1b,\n"      \
    "                  llama3.2-3b, gemma3-270m (the book's configurations)\n"           \
    "  --vocab N --context N --emb N --heads N --layers N\n"                               \
    "  --hidden N      feed-forward width (GPT-2: 4 * emb)\n"                              \
    "  --head-dim N    attention head size (default emb / heads)\n"                       \
    "  --kv-groups N   key-value groups of grouped-query attention (default heads)\n"     \
    "  --norm layer|rms  LayerNorm or RMSNorm (default the family's)\n"                   \
    "  --mlp gelu|swiglu|geglu  the feed-forward (default the family's)\n"                \
    "  --rope-base X   RoPE's theta base (full layers; RoPE families)\n"                   \
    "  --rope-local-base X  RoPE's theta base of sliding layers (Gemma 3: 10000)\n"        \
    "  --sliding-window N  the window of sliding layers (alone: every layer slides)\n"     \
    "  --layer-types L comma list of sliding and full, one per layer\n"                   \
    "  --query-pre-attn-scalar X  queries times X ** -0.5 after RoPE (Gemma 3)\n"          \
    "  --qk-norm, --no-qk-norm  RMSNorm on queries and keys, or not\n"                    \
    "  --dropout P     (GPT-2) drop_rate in [0, 1) (0.1)\n"                                \
    "  --qkv-bias      biases on the query/key/value projections\n"                       \
    "  --seed N        torch.manual_seed before the model is built (123)\n"                \
    "  --precision P   exact (PyTorch's float32 bits, default), fast (float32, own\n"       \
    "                  kernels and call shapes) or bf16 (bf16 products, float32\n"         \
    "                  accumulation; emulated on sgemm) (README.md, \"Numerics\")\n"     \
    "  --recompute     training: each transformer block's activations recomputed in\n"     \
    "                  backward (torch.utils.checkpoint), same dropout masks and\n"       \
    "                  numbers, less memory (docs/training.md, \"Memory\")\n"                   \
    "  --weights W     bf16, q8 (Q8_0, int8 products) or f32: a frozen base's\n"      \
    "                  storage (default f32; bf16 for generate and LoRA from a\n"     \
    "                  --hf folder storing BF16)\n"

/* tg_manual_seed(seed), then the GPTModel, under --precision's numerics. */
tg_module *tg_cli_model_build(tg_tape *tp, const tg_cli_model *m, const tg_decoder_config *cfg);

/* The graph's shape as pretrain and bench --model gpt run it: one node per
 * layer (LayerNorm, GELU, attention, FeedForward) unless composed. */
void tg_cli_gpt_set_layers(tg_module *gpt, bool composed);
int tg_cmd_bench_gpt(int argc, char **argv);
/* bench --model gpt|classify's --help (bench --help prints it too). */
extern const char *const tg_cli_bench_gpt_help;

/* Data parallel under mpirun (tools/tapegrad/dist_cli.c). main: when a
 * launcher started this process, MPI around command; ranks other than 0 keep
 * their error lines until show_errors (so that an error every rank meets
 * prints once). begin: --dist's checks (an MPI build, started by mpirun),
 * --batch divisible by the ranks, and the machine's cores shared among its
 * ranks unless --threads was given. */
int tg_cli_dist_main(int (*command)(int, char **), int argc, char **argv);
int tg_cli_dist_begin(const char *cmd, bool dist, int64_t batch, bool threads_set);
void tg_cli_dist_show_errors(void);
/* TG_CLI_OK when every rank's rc was; otherwise the failing rank shows its
 * lines and every rank returns an error. */
int tg_cli_dist_agree(int rc);

/* ---- the training commands (tools/tapegrad/train_cli.c) ---------------------------------- */

/* The options every training command takes (TG_CLI_TRAIN_OPTS in its
 * option table, TG_CLI_TRAIN_HELP in its --help). */
typedef struct {
    const char *checkpoint, *resume, *plot, *save;
    int64_t warmup, accumulate, checkpoint_every, threads;
    double initial_lr, min_lr, clip;
    bool warmup_seen, initial_seen, min_seen, clip_seen, dist, json;
} tg_cli_train;
#define TG_CLI_TRAIN_OPTS(t)                                                                                       \
    {.name = "--warmup", .type = TG_OPT_INT, .dest = &(t).warmup, .imin = 0, .imax = INT32_MAX,                    \
     .seen = &(t).warmup_seen},                                                                                    \
        {.name = "--initial-lr", .type = TG_OPT_DOUBLE, .dest = &(t).initial_lr, .dmin = 0.0, .dmax = 10.0,        \
         .seen = &(t).initial_seen},                                                                               \
        {.name = "--min-lr", .type = TG_OPT_DOUBLE, .dest = &(t).min_lr, .dmin = 0.0, .dmax = 10.0,                \
         .seen = &(t).min_seen},                                                                                   \
        {.name = "--clip-grad-norm", .type = TG_OPT_DOUBLE, .dest = &(t).clip, .dmin = 1e-12, .dmax = 1e12,        \
         .seen = &(t).clip_seen},                                                                                  \
        {.name = "--accumulate", .type = TG_OPT_INT, .dest = &(t).accumulate, .imin = 1, .imax = 65536},           \
        {.name = "--checkpoint", .type = TG_OPT_STRING, .dest = &(t).checkpoint},                                  \
        {.name = "--checkpoint-every", .type = TG_OPT_INT, .dest = &(t).checkpoint_every, .imin = 1,               \
         .imax = INT32_MAX},                                                                                       \
        {.name = "--resume", .type = TG_OPT_STRING, .dest = &(t).resume},                                          \
        {.name = "--plot", .type = TG_OPT_STRING, .dest = &(t).plot},                                              \
        {.name = "--save", .type = TG_OPT_STRING, .dest = &(t).save},                                              \
        {.name = "--threads", .type = TG_OPT_INT, .dest = &(t).threads, .imin = 1, .imax = 1024},                  \
        {.name = "--dist", .type = TG_OPT_FLAG, .dest = &(t).dist},                                                \
    {                                                                                                              \
        .name = "--json", .type = TG_OPT_FLAG, .dest = &(t).json                                                   \
    }
#define TG_CLI_TRAIN_HELP                                                                           \
    "training options (every training command):\n"                                                   \
    "  --warmup N           appendix D's schedule: N steps of linear warm-up from\n"                 \
    "                       --initial-lr to --lr, then cosine decay to --min-lr\n"                   \
    "  --initial-lr X       (1e-5 with --warmup)\n"                                                  \
    "  --min-lr X           (--initial-lr with --warmup)\n"                                          \
    "  --clip-grad-norm X   clip the gradients' 2-norm to X (after the warm-up,\n"                   \
    "                       as appendix D clips)\n"                                                  \
    "  --accumulate N       N micro-batches of --batch examples per optimizer step,\n"               \
    "                       each loss divided by N (--eval-freq counts optimizer\n"                  \
    "                       steps); with dropout 0 and equal micro-batches, the\n"                   \
    "                       run of --batch N*B to float rounding, except for a\n"                    \
    "                       loss that is a mean over unmasked tokens (instruct):\n"                  \
    "                       there each micro-batch's mean counts equally, as in\n"                   \
    "                       PyTorch\n"                                                               \
    "  --checkpoint FILE    after each epoch (and every --checkpoint-every N\n"                      \
    "                       optimizer steps): the model, optimizer, generator,\n"                    \
    "                       the loader's position and every line printed so far,\n"                  \
    "                       written atomically\n"                                                    \
    "  --resume FILE        continue from a checkpoint of the same run (a changed\n"                 \
    "                       setting is refused); prints the uninterrupted run's\n"                   \
    "                       lines (--epochs N trains until epoch N)\n"                               \
    "  --save FILE          the trained model's state_dict (safetensors)\n"                          \
    "  --plot FILE          the loss against epochs and examples or tokens seen (SVG)\n"             \
    "  --threads N          OpenMP threads (all cores; under mpirun, the cores\n"                    \
    "                       shared among the ranks on the machine)\n"                                \
    "  --dist               data parallel: start with mpirun -np N, N dividing\n"                    \
    "                       --batch (a job mpirun started is data parallel anyway;\n"                \
    "                       --dist makes a missing mpirun an error); the table is\n"                 \
    "                       the one-process table\n"                                                 \
    "  --json               end with one JSON line (the rows and the task's values)\n"
/* The model's part of a training run's identity (tg_checkpoint_value):
 * its sizes, biases, seed and dropout into v[0..TG_CLI_MODEL_NIDENTITY). */
#define TG_CLI_MODEL_NIDENTITY 26
int tg_cli_model_identity(const tg_decoder_config *c, uint64_t seed, tg_checkpoint_value *v);
/* TG_CLI_OK when every id of ids[0..n) is below vocab; else the line
 * "what: id N is outside the model's vocabulary (--vocab V)". */
int tg_cli_check_ids(const char *cmd, const char *what, const int64_t *ids, int64_t n, int64_t vocab);
/* Checks the options (the schedule's, --checkpoint-every) and fills their
 * defaults. */
int tg_cli_train_check(const char *cmd, tg_cli_train *t);
/* Threads, mpirun's checks (tg_cli_dist_begin; batch: the global batch),
 * the BLAS warning, and the output paths writable. */
int tg_cli_train_begin(const char *cmd, const tg_cli_train *t, int64_t batch);
/* The schedule, clipping, accumulation, checkpoints and progress line into o. */
void tg_cli_train_options(const tg_cli_train *t, tg_trainer_options *o);
/* The ranks agree on rc (the command's set-up), then the trainer (*out,
 * freed by the caller) trains. A diverged loss is TG_CLI_FAIL; a rank that
 * fails alone ends the job. */
int tg_cli_train_run(const char *cmd, int rc, const tg_trainer_options *o, tg_trainer **out);
/* {"rows": [...], "seconds": S (and ranks, buckets, mpi_wait_per_step_s
 * under mpirun)}: the rows with seen named `seen`. */
json_t *tg_cli_train_json(const tg_trainer *tr, const char *seen);
/* A series of the trainer's as a JSON array; a double or null. */
json_t *tg_cli_json_series(const tg_trainer *tr, const char *series);
json_t *tg_cli_json_real(double v);
/* "N steps in S s (R unit/s)" on stderr (and the ranks' wait). */
void tg_cli_train_summary(const tg_trainer *tr, const char *unit);
/* The loss plot of the trainer's rows (top: the top axis's name; NULL:
 * the book's plot_losses with tokens seen). */
int tg_cli_train_plot(const char *cmd, const char *path, const tg_trainer *tr, const char *title, const char *top,
                      double epochs);

/* Prints "tapegrad <cmd>: <message>" as exactly one line on stderr (newlines in
 * the message become spaces) and returns TG_CLI_USAGE. */
int tg_cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Same for the library's last error, prefixed with what failed. */
int tg_cli_lib_error(const char *cmd, const char *what);
/* Standard output (a full disk, a closed pipe): fflush(stdout), keeping
 * the errno of a failure; false when it or any earlier write failed. */
bool tg_cli_flush_stdout(void);
/* The line "tapegrad: writing standard output: REASON" (err, or the errno
 * a flush kept; 0: unknown), unless this command line has printed its
 * error line already; TG_CLI_USAGE. */
int tg_cli_stdout_error(int err);
/* A library call printing to stdout (tg_print, tg_module_print) failed:
 * tg_cli_stdout_error when the write failed, else tg_cli_lib_error. */
int tg_cli_print_error(const char *cmd);
/* The whole of the file named by option opt (standard input for "-" when
 * allow_stdin), malloc'd with one byte more than its *len bytes: a NUL
 * always follows the content (buf[*len] == '\0'), so the buffer is a C
 * string where the content holds no NUL byte itself (tg_cli_check_no_nul
 * says whether it does). NULL with the error line printed for cmd. */
char *tg_cli_read_file(const char *cmd, const char *opt, const char *path, bool allow_stdin, size_t *len);
/* TG_CLI_OK when the len bytes read from option opt's file path hold no NUL
 * byte, so that text is read whole as a C string; otherwise the one error
 * line naming the file, the first NUL's byte offset and why the text must
 * hold none ("--file notes.txt: NUL byte at offset 57 (--chat takes text
 * without NUL bytes)"), and TG_CLI_USAGE. */
int tg_cli_check_no_nul(const char *cmd, const char *opt, const char *path, const char *text, size_t len,
                        const char *why);
/* TG_CLI_OK when the output file of option opt can be written: path is a
 * regular file or nothing yet, and can be created or replaced as an atomic
 * save replaces it (nothing is changed). Otherwise the one error line
 * ("--save: '/dev/full' exists and is a character device, not a regular
 * file") and TG_CLI_USAGE. */
int tg_cli_check_output(const char *cmd, const char *opt, const char *path);
/* The median of v[0..n) (n >= 1; sorts v): benchmarks quote medians, so
 * that one slow step does not move the figure. */
double tg_cli_median(double *v, int64_t n);
/* Seconds on the monotonic clock. */
double tg_cli_now(void);
/* One warning line on stderr for cmd when the BLAS loaded is not one that
 * shares OpenMP's threads (tg_blas_info: OpenBLAS's pthreads build, several
 * times slower here); commands that train or time call it before they
 * start. */
void tg_cli_warn_blas(const char *cmd);
/* --json output: prints o (dumped with jansson's flags) as one line on
 * stdout and releases it; TG_CLI_OK, or TG_CLI_USAGE with a message. */
int tg_cli_print_json(const char *cmd, json_t *o, size_t flags);
/* A JSON array of n ids. */
json_t *tg_cli_json_ids(const int64_t *ids, size_t n);
/* Decoded text as a JSON string, or null when the bytes are not UTF-8 (ids
 * may end inside a character). */
json_t *tg_cli_json_text(const char *text, size_t len);

/* SVG plots (tools/tapegrad/svg.c): open writes the header and a white
 * background (NULL with errno if the file cannot be opened); close ends the
 * document and returns -1 if any write failed. */
typedef struct tg_cli_svg tg_cli_svg;
tg_cli_svg *tg_cli_svg_open(const char *path, double width, double height);
FILE *tg_cli_svg_file(tg_cli_svg *s);
int tg_cli_svg_close(tg_cli_svg *s);
/* Text with <, >, & and " escaped. */
void tg_cli_svg_escape(FILE *f, const char *s);
/* A tick step of 1, 2 or 5 times a power of ten near raw. */
double tg_cli_nice_step(double raw);

/* One evaluation of a training run: a row of the book's table. */
typedef struct {
    int64_t epoch, step, tokens;
    double train, val;
} tg_cli_loss_row;
/* The book's plot_losses as an SVG file: training (solid) and validation
 * (dash-dot) loss of the n rows against epochs (row i at epoch
 * linspace(0, epochs, n)[i]), tokens seen on a second axis at the top,
 * non-finite losses left out. 0, or -1 when path cannot be opened and -2
 * when a write failed, with errno. */
int tg_cli_svg_loss_plot(const char *path, const char *title, double epochs, int64_t n, const tg_cli_loss_row *rows);
/* The same for another quantity (the book's plot_values): what names the
 * y axis ("Accuracy"; the legend says "Training accuracy"), top the axis of
 * rows[].tokens ("Examples seen"). */
int tg_cli_svg_values_plot(const char *path, const char *title, const char *what, const char *top, double epochs,
                           int64_t n, const tg_cli_loss_row *rows);

/* A rough upper bound of the bytes a forward+backward of an attention module
 * needs (composed or fused attention); commands refuse configurations above a fixed budget so that a huge
 * size on the command line becomes an error message, not an OOM kill. */
double tg_cli_estimate_bytes(int64_t batch, int64_t tokens, int64_t d_in, int64_t d_out, int64_t heads, bool fused);
#define TG_CLI_MEMORY_BUDGET (8.0 * 1024 * 1024 * 1024)

#endif
