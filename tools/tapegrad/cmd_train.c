/* tapegrad train: the main job. A teacher-student task: a randomly
 * initialised MultiHeadAttention (seed S) turns random inputs into targets and
 * a second one (seed S+1) learns to reproduce them with SGD on the MSE. The
 * student has the teacher's architecture, so the loss can go to zero; how fast
 * it does is what the defaults below were tuned for (a few seconds, final loss
 * well under 1% of the first). */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tapegrad.h>

#define CMD "train"

/* The toy task's sizes: small enough for seconds on one core. */
enum { D_MODEL = 16, HEADS = 4, TOKENS = 8, BATCH = 8 };

#define DEFAULT_STEPS 1000
#define DEFAULT_LR 0.5
#define DEFAULT_MOMENTUM 0.9

static const char *help =
    "usage: tapegrad train [options]\n"
    "\n"
    "Trains a toy attention layer with SGD on a teacher-student task: a randomly\n"
    "initialised module (seed S) maps random inputs (batch 8, 8 tokens, 16\n"
    "features) to targets; a second module (seed S+1) learns them with the MSE\n"
    "loss. Prints progress about every 10% of the steps and a summary.\n"
    "\n"
    "  --module NAME   mha (MultiHeadAttention, default) or mha-wrapper\n"
    "                  (MultiHeadAttentionWrapper); d_in = d_out = 16, 4 heads\n"
    "  --steps N       SGD steps (1000)\n"
    "  --lr X          learning rate, > 0 (0.5)\n"
    "  --momentum M    momentum in [0, 1) (0.9)\n"
    "  --seed N        teacher seed S; student S+1, inputs S+2 (123)\n"
    "  --plot FILE     write the loss curve (log scale) as an SVG file\n"
    "  --threads N     OpenMP threads (1: the toy's tensors are too small to\n"
    "                  gain from more)\n"
    "  --json          end with one JSON line:\n"
    "                  {\"steps\": N, \"first_loss\": X, \"final_loss\": Y, \"seconds\": S}\n"
    "  --help          this text\n"
    "\n"
    "Exit status: 0 ok, 1 the loss diverged (NaN/inf), 2 bad arguments or a\n"
    "runtime error.\n";

static tg_module *make_module(tg_tape *tp, bool wrapper, uint64_t seed)
{
    tg_manual_seed(seed);
    if (wrapper) /* each head gives d_out / heads features, so both produce 16 */
        return tg_mha_wrapper_new(tp, D_MODEL, D_MODEL / HEADS, TOKENS, 0.0, HEADS, false);
    return tg_mha_new(tp, D_MODEL, D_MODEL, TOKENS, 0.0, HEADS, false);
}

/* A line chart of loss per step with a log10 y axis, hand-written SVG. */
static int write_plot(FILE *f, const double *loss, int64_t n, const char *title)
{
    const double W = 720, H = 440, L = 80, R = 20, T = 40, Bm = 60;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (loss[i] > 0 && isfinite(loss[i])) {
            if (loss[i] < lo) lo = loss[i];
            if (loss[i] > hi) hi = loss[i];
        }
    }
    if (!(lo <= hi)) lo = hi = 1;
    int dlo = (int)floor(log10(lo)), dhi = (int)ceil(log10(hi));
    if (dhi <= dlo) dhi = dlo + 1;
    double pw = W - L - R, ph = H - T - Bm;
#define XP(i) (L + pw * (n > 1 ? (double)(i) / (double)(n - 1) : 0.5))
#define YP(v) (T + ph * (1.0 - (log10(v) - dlo) / (double)(dhi - dlo)))
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">", W / 2);
    tg_cli_svg_escape(f, title);
    fprintf(f, "</text>\n");
    /* decade grid lines and labels */
    for (int d = dlo; d <= dhi; d++) {
        double y = T + ph * (1.0 - (double)(d - dlo) / (double)(dhi - dlo));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, L + pw, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n", L - 6, y + 4, d);
    }
    /* x ticks: 0%, 25%, ..., 100% of the steps */
    for (int k = 0; k <= 4; k++) {
        int64_t s = n > 1 ? (n - 1) * k / 4 : 0;
        double x = XP(s);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", x, T + ph, x, T + ph + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%lld</text>\n", x, T + ph + 18, (long long)s + 1);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", L, T, L, T + ph);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", L, T + ph, L + pw, T + ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", L + pw / 2, H - 16);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">MSE loss "
               "(log scale)</text>\n", T + ph / 2, T + ph / 2);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"");
    for (int64_t i = 0; i < n; i++) {
        double v = loss[i] > 0 && isfinite(loss[i]) ? loss[i] : lo;
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", XP(i), YP(v));
    }
    fprintf(f, "\"/>\n</svg>\n");
#undef XP
#undef YP
    return ferror(f) ? -1 : 0;
}

typedef struct {
    const char *module, *plot;
    int64_t steps, threads;
    uint64_t seed;
    double lr, momentum;
    bool json;
} train_args;

/* The task: the student's MSE against the teacher's output, which only
 * makes targets (no grad). */
static tg_tensor *toy_loss(tg_tape *tp, tg_module *student, const tg_batch *b, void *teacher, double *weight)
{
    (void)weight;
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *target = tg_module_forward(tp, teacher, b->input);
    tg_set_grad_enabled(prev);
    return tg_mse_loss(tp, tg_module_forward(tp, student, b->input), target, TG_REDUCE_MEAN);
}

static int run(tg_tape *model, tg_tape *step, double *losses, FILE *plot, const train_args *a)
{
    bool wrapper = strcmp(a->module, "mha-wrapper") == 0;
    uint64_t seed = (uint64_t)a->seed;
    tg_module *teacher = make_module(model, wrapper, seed);
    tg_module *student = teacher ? make_module(model, wrapper, seed + 1) : NULL;
    if (!student) return tg_cli_lib_error(CMD, NULL);
    tg_sgd *opt = tg_sgd_new(model, student, (tg_sgd_options){.lr = a->lr, .momentum = a->momentum});
    if (!opt) return tg_cli_lib_error(CMD, NULL);
    /* each step is the library's trainer's (zero_grad, loss, backward, SGD) */
    tg_trainer *tr = tg_trainer_new(&(tg_trainer_options){
        .model = student, .optimizer = opt, .loss = toy_loss, .task = teacher, .epochs = 1, .step_tape = step});
    if (!tr) return tg_cli_lib_error(CMD, NULL);
    tg_generator *g = tg_generator_new(seed + 2);
    if (!g) {
        tg_trainer_free(tr);
        return tg_cli_error(CMD, "out of memory");
    }

    const int64_t shape[3] = {BATCH, TOKENS, D_MODEL};
    int64_t every = a->steps >= 10 ? a->steps / 10 : 1;
    int rc = TG_CLI_OK;
    double t0 = tg_cli_now();
    printf("training %s (d_in=d_out=%d, %d heads, %d tokens, batch %d) for %lld steps, lr %g, momentum %g\n",
           wrapper ? "MultiHeadAttentionWrapper" : "MultiHeadAttention", D_MODEL, HEADS, TOKENS, BATCH,
           (long long)a->steps, a->lr, a->momentum);
    for (int64_t it = 0; it < a->steps; it++) {
        tg_batch b = {.input = tg_rand(step, TG_F32, 3, shape, g)};
        double l;
        if (!b.input || tg_trainer_step(tr, 1, &b, &l) != TG_OK) {
            rc = tg_cli_lib_error(CMD, NULL);
            break;
        }
        losses[it] = l;
        if (!isfinite(l)) {
            tg_cli_flush_stdout();
            tg_cli_error(CMD, "loss diverged to %s at step %lld (try a smaller --lr)", isnan(l) ? "nan" : "inf",
                         (long long)it + 1);
            rc = TG_CLI_FAIL;
            break;
        }
        if ((it + 1) % every == 0 || it == 0 || it + 1 == a->steps) {
            double el = tg_cli_now() - t0;
            printf("step %6lld/%lld  loss %.6e  %8.1f steps/s\n", (long long)it + 1, (long long)a->steps, l,
                   el > 0 ? (double)(it + 1) / el : 0.0);
            tg_cli_flush_stdout();
        }
    }
    tg_trainer_free(tr);
    double seconds = tg_cli_now() - t0;
    tg_generator_free(g);
    if (rc != TG_CLI_OK) return rc;

    double first = losses[0], final = losses[a->steps - 1];
    printf("done: %lld steps in %.3f s, loss %.6e -> %.6e (%.4g%% of the first)\n", (long long)a->steps, seconds,
           first, final, 100.0 * final / first);
    if (plot) {
        char title[160];
        snprintf(title, sizeof title, "tapegrad train: %s teacher-student, SGD lr %g momentum %g",
                 wrapper ? "MultiHeadAttentionWrapper" : "MultiHeadAttention", a->lr, a->momentum);
        if (write_plot(plot, losses, a->steps, title) != 0) return tg_cli_error(CMD, "--plot: write error on '%s'", a->plot);
        printf("loss curve written to %s\n", a->plot);
    }
    if (a->json)
        printf("{\"steps\": %lld, \"first_loss\": %.9g, \"final_loss\": %.9g, \"seconds\": %.6g}\n",
               (long long)a->steps, first, final, seconds);
    return TG_CLI_OK;
}

int tg_cmd_train(int argc, char **argv)
{
    train_args a = {.module = "mha", .steps = DEFAULT_STEPS, .seed = 123, .lr = DEFAULT_LR,
                    .momentum = DEFAULT_MOMENTUM, .threads = 1};
    const tg_opt opts[] = {
        {.name = "--module", .type = TG_OPT_STRING, .dest = &a.module},
        {.name = "--steps", .type = TG_OPT_INT, .dest = &a.steps, .imin = 1, .imax = 10000000},
        {.name = "--lr", .type = TG_OPT_DOUBLE, .dest = &a.lr, .dmin = 1e-300, .dmax = 1e6},
        {.name = "--momentum", .type = TG_OPT_DOUBLE, .dest = &a.momentum, .dmin = 0.0, .dmax = 1.0, .dmax_open = true},
        {.name = "--seed", .type = TG_OPT_U64, .dest = &a.seed},
        {.name = "--plot", .type = TG_OPT_STRING, .dest = &a.plot},
        {.name = "--threads", .type = TG_OPT_INT, .dest = &a.threads, .imin = 1, .imax = 1024},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &a.json},
    };
    int rc;
    tg_cli_command c = {.name = CMD, .help = help, .opts = opts, .nopts = TG_CLI_NOPTS(opts)};
    if (!tg_cli_parse(&c, argc, argv, &rc)) return rc;
    if (strcmp(a.module, "mha") != 0 && strcmp(a.module, "mha-wrapper") != 0)
        return tg_cli_error(CMD, "--module: expected mha or mha-wrapper, got '%.200s'", a.module);
    if (tg_cli_check_only) return TG_CLI_OK;

    /* One thread by default: every tensor here has a few hundred elements, so
     * a parallel region costs more than it saves, and on a busy machine
     * OpenMP's barrier waits made the run 40x slower (7 s instead of 0.2 s). */
    omp_set_num_threads((int)a.threads);

    /* open the plot file first: a bad path should fail before the training */
    FILE *plot = NULL;
    if (a.plot) {
        if ((rc = tg_cli_check_output(CMD, "--plot", a.plot)) != TG_CLI_OK) return rc;
        plot = fopen(a.plot, "w");
        if (!plot) return tg_cli_error(CMD, "--plot: cannot open '%.300s' for writing: %s", a.plot, strerror(errno));
    }
    double *losses = malloc(sizeof(double) * (size_t)a.steps);
    tg_tape *model = tg_tape_new(), *step = tg_tape_new();
    if (!losses || !model || !step)
        rc = tg_cli_error(CMD, "out of memory");
    else
        rc = run(model, step, losses, plot, &a);
    if (plot && fclose(plot) != 0 && rc == TG_CLI_OK) rc = tg_cli_error(CMD, "--plot: cannot write '%.300s'", a.plot);
    free(losses);
    tg_tape_free(step);
    tg_tape_free(model);
    tg_cli_flush_stdout();
    return rc;
}
