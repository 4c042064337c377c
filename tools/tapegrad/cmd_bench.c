/* tapegrad bench: median time of one training step (forward, MSE against
 * zeros, backward) of an attention module, GFLOP/s by the FLOP count that
 * README.md ("Performance") gives, and peak RSS. Medians, because a single
 * slow step (page faults, another process) should not move the figure. */
#include "cli.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <jansson.h>
#include <tapegrad.h>

#define CMD "bench"

static const char *help =
    "usage: tapegrad bench [options]  (an attention module; --model gpt|classify|dpo:\n"
    "       the GPTModel's training step, with the options after this part)\n"
    "\n"
    "Times one training step (forward, MSE loss against zeros, backward) of an\n"
    "attention module in training mode: one warm-up step, then --steps timed\n"
    "steps; prints the median forward, backward and step milliseconds, GFLOP/s\n"
    "and peak memory.\n"
    "\n"
    "  --module NAME   mha (MultiHeadAttention, default) or mha-wrapper\n"
    "                  (CausalAttention heads of d_out/heads features each)\n"
    "  --batch N       batch size (2)\n"
    "  --tokens N      tokens = context_length (1024)\n"
    "  --d N           d_in = d_out (768)\n"
    "  --d-in N        override d_in\n"
    "  --d-out N       override d_out (must be divisible by --heads)\n"
    "  --heads N       heads (12)\n"
    "  --dropout P     dropout in [0, 1) (0.1)\n"
    "  --steps N       timed steps (5)\n"
    "  --threads N     OpenMP threads (default: OpenMP's default)\n"
    "  --composed      the book's composition of ops (masked_fill, softmax, ...)\n"
    "                  instead of one attention node (the default)\n"
    "  --precision P   fast (default here: the flash-style attention kernel),\n"
    "                  exact (PyTorch's call shapes and bits) or bf16\n"
    "                  (README.md, \"Numerics\")\n"
    "  --torch-dropout the fused op draws PyTorch's dropout masks (bernoulli_,\n"
    "                  element by element, as pretrain does) instead of the\n"
    "                  counter-based stream it uses here by default\n"
    "  --json          one JSON object: fwd_ms, bwd_ms, step_ms, gflops,\n"
    "                  peak_rss_mib and the configuration\n"
    "  --help          this text\n"
    "\n"
    "FLOPs: forward = 2*B*T*3*d_in*d_out + 2*B*T*d_out^2 + 4*B*T^2*d_out,\n"
    "step = 3 * forward. The book's toy: --batch 2 --tokens 6 --d-in 3 --d-out 2\n"
    "--heads 2.\n";

typedef struct {
    const char *module;
    int64_t batch, tokens, d, d_in, d_out, heads, steps, threads;
    double dropout;
    bool d_in_set, d_out_set, threads_set, composed, torch_dropout, json;
    const char *precision;
    tg_numerics numerics;
} bench_args;

static int run(tg_tape *model, tg_tape *step, const bench_args *a, double *t_fwd, double *t_bwd, double *t_step)
{
    bool wrapper = strcmp(a->module, "mha-wrapper") == 0;
    if (!wrapper && strcmp(a->module, "mha") != 0)
        return tg_cli_error(CMD, "--module: expected mha or mha-wrapper, got '%.200s'", a->module);
    int64_t d_in = a->d_in_set ? a->d_in : a->d, d_out = a->d_out_set ? a->d_out : a->d;
    int64_t B = a->batch, T = a->tokens, H = a->heads;
    if (d_out % H != 0)
        return tg_cli_error(CMD, "d_out (%lld) must be divisible by --heads (%lld)", (long long)d_out, (long long)H);
    /* only the flash-style kernel keeps no (T, T) tensor */
    bool flash = !a->composed && a->numerics == TG_NUMERICS_FAST;
    if (tg_cli_estimate_bytes(B, T, d_in, d_out, H, flash) > TG_CLI_MEMORY_BUDGET)
        return tg_cli_error(CMD, "configuration too large: batch %lld, tokens %lld, d_in %lld, d_out %lld, heads %lld "
                                 "would need more than %.0f GiB",
                            (long long)B, (long long)T, (long long)d_in, (long long)d_out, (long long)H,
                            TG_CLI_MEMORY_BUDGET / (1024.0 * 1024 * 1024));
    if (tg_cli_check_only) return TG_CLI_OK;
    tg_cli_note_bf16(a->numerics);
    tg_cli_warn_blas(CMD);
    if (a->threads_set) omp_set_num_threads((int)a->threads);

    tg_manual_seed(123);
    tg_module *m = wrapper ? tg_mha_wrapper_new(model, d_in, d_out / H, T, a->dropout, H, false)
                           : tg_mha_new(model, d_in, d_out, T, a->dropout, H, false);
    if (!m) return tg_cli_lib_error(CMD, NULL);
    tg_module_set_fused(m, !a->composed); /* the wrapper's CausalAttention heads too */
    tg_tape_set_numerics(step, a->numerics); /* parsed: cannot fail */
    tg_module_train(m, true);
    tg_generator *g = tg_generator_new(7);
    if (!g) return tg_cli_error(CMD, "out of memory");
    tg_module_set_generator(m, g);
    /* timing only: the fused op's masks need not be PyTorch's (the composed
     * path's dropout draws PyTorch's stream either way) */
    if (!a->composed && !a->torch_dropout) tg_generator_set_dropout_stream(g, TG_DROPOUT_COUNTER);
    int64_t shape[3] = {B, T, d_in};
    /* the input lives in the model tape so that only activations are reset */
    tg_tensor *x = tg_rand(model, TG_F32, 3, shape, g);
    if (!x) {
        tg_generator_free(g);
        return tg_cli_lib_error(CMD, NULL);
    }
    int rc = TG_CLI_OK;
    for (int64_t s = -1; s < a->steps; s++) { /* s = -1: the warm-up step */
        tg_module_zero_grad(m);
        double t0 = 1e3 * tg_cli_now();
        tg_tensor *y = tg_module_forward(step, m, x);
        double t1 = 1e3 * tg_cli_now();
        tg_tensor *loss = y ? tg_mse_loss(step, y, tg_zeros_like(step, y), TG_REDUCE_MEAN) : NULL;
        if (!loss || tg_backward(loss, NULL, false) != TG_OK) {
            rc = tg_cli_lib_error(CMD, NULL);
            break;
        }
        double t2 = 1e3 * tg_cli_now();
        if (s >= 0) {
            t_fwd[s] = t1 - t0;
            t_bwd[s] = t2 - t1;
            t_step[s] = t2 - t0;
        }
        tg_tape_reset(step);
    }
    tg_generator_free(g);
    return rc;
}

int tg_cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (argv[i] && (strcmp(argv[i], "--model") == 0 || strncmp(argv[i], "--model=", 8) == 0))
            return tg_cli_dist_main(tg_cmd_bench_gpt, argc, argv);
    if (tg_dist_launched() > 1)
        return tg_cli_error(CMD, "mpirun started %d processes, but an attention module's bench runs alone; "
                                 "data parallel: tapegrad bench --model gpt", tg_dist_launched());
    bench_args a = {.module = "mha", .batch = 2, .tokens = 1024, .d = 768, .heads = 12, .dropout = 0.1, .steps = 5,
                    .precision = "fast"};
    const int64_t big = 1 << 20;
    const tg_opt opts[] = {
        {.name = "--module", .type = TG_OPT_STRING, .dest = &a.module},
        {.name = "--batch", .type = TG_OPT_INT, .dest = &a.batch, .imin = 1, .imax = big},
        {.name = "--tokens", .type = TG_OPT_INT, .dest = &a.tokens, .imin = 1, .imax = TG_CLI_MAX_TOKENS},
        {.name = "--d", .type = TG_OPT_INT, .dest = &a.d, .imin = 1, .imax = big},
        {.name = "--d-in", .type = TG_OPT_INT, .dest = &a.d_in, .imin = 1, .imax = big, .seen = &a.d_in_set},
        {.name = "--d-out", .type = TG_OPT_INT, .dest = &a.d_out, .imin = 1, .imax = big, .seen = &a.d_out_set},
        {.name = "--heads", .type = TG_OPT_INT, .dest = &a.heads, .imin = 1, .imax = 4096},
        {.name = "--dropout", .type = TG_OPT_DOUBLE, .dest = &a.dropout, .dmin = 0.0, .dmax = 1.0, .dmax_open = true},
        {.name = "--steps", .type = TG_OPT_INT, .dest = &a.steps, .imin = 1, .imax = 100000},
        {.name = "--threads", .type = TG_OPT_INT, .dest = &a.threads, .imin = 1, .imax = 1024, .seen = &a.threads_set},
        {.name = "--composed", .type = TG_OPT_FLAG, .dest = &a.composed},
        {.name = "--torch-dropout", .type = TG_OPT_FLAG, .dest = &a.torch_dropout},
        {.name = "--precision", .type = TG_OPT_STRING, .dest = &a.precision},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &a.json},
    };
    int rc;
    tg_cli_command c = {.name = CMD, .help = help, .opts = opts, .nopts = TG_CLI_NOPTS(opts),
                        .help_more = {"\n", tg_cli_bench_gpt_help}};
    if (!tg_cli_parse(&c, argc, argv, &rc)) return rc;
    if (tg_numerics_parse(a.precision, &a.numerics) != TG_OK)
        return tg_cli_error(CMD, "--precision: %s", tg_last_error());

    double *t = malloc(sizeof(double) * 3 * (size_t)a.steps);
    tg_tape *model = tg_tape_new(), *step = tg_tape_new();
    if (!t || !model || !step)
        rc = tg_cli_error(CMD, "out of memory");
    else
        rc = run(model, step, &a, t, t + a.steps, t + 2 * a.steps);
    if (rc == TG_CLI_OK) {
        int64_t d_in = a.d_in_set ? a.d_in : a.d, d_out = a.d_out_set ? a.d_out : a.d;
        double B = (double)a.batch, T = (double)a.tokens, di = (double)d_in, dd = (double)d_out;
        double fwd_flops = 2 * B * T * 3 * di * dd + 2 * B * T * dd * dd + 4 * B * T * T * dd;
        double fwd = tg_cli_median(t, a.steps), bwd = tg_cli_median(t + a.steps, a.steps);
        double stp = tg_cli_median(t + 2 * a.steps, a.steps);
        double gflops = stp > 0 ? 3 * fwd_flops / (stp * 1e-3) / 1e9 : 0.0;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double rss = (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
        bool fused = !a.composed;
        int threads = omp_get_max_threads();
        if (a.json) {
            json_t *o = json_object();
            json_object_set_new(o, "module", json_string(a.module));
            json_object_set_new(o, "fused", json_boolean(fused));
            json_object_set_new(o, "precision", json_string(tg_numerics_name(a.numerics)));
            tg_cli_json_bf16(o, a.numerics);
            json_object_set_new(o, "batch", json_integer(a.batch));
            json_object_set_new(o, "tokens", json_integer(a.tokens));
            json_object_set_new(o, "d_in", json_integer(d_in));
            json_object_set_new(o, "d_out", json_integer(d_out));
            json_object_set_new(o, "heads", json_integer(a.heads));
            json_object_set_new(o, "dropout", json_real(a.dropout));
            json_object_set_new(o, "steps", json_integer(a.steps));
            json_object_set_new(o, "threads", json_integer(threads));
            json_object_set_new(o, "blas", json_string(tg_blas_info()));
            json_object_set_new(o, "fwd_ms", json_real(fwd));
            json_object_set_new(o, "bwd_ms", json_real(bwd));
            json_object_set_new(o, "step_ms", json_real(stp));
            json_object_set_new(o, "gflops", json_real(gflops));
            json_object_set_new(o, "peak_rss_mib", json_real(rss));
            rc = tg_cli_print_json(CMD, o, JSON_REAL_PRECISION(9) | JSON_PRESERVE_ORDER);
        } else {
            printf("tapegrad bench: %s%s, precision %s, batch %lld, tokens %lld, d_in %lld, d_out %lld, heads %lld, "
                   "dropout %g, %d threads, median of %lld steps\n",
                   strcmp(a.module, "mha") == 0 ? "MultiHeadAttention" : "MultiHeadAttentionWrapper",
                   fused ? " (fused)" : " (composed)", tg_numerics_name(a.numerics), (long long)a.batch,
                   (long long)a.tokens, (long long)d_in, (long long)d_out, (long long)a.heads, a.dropout, threads,
                   (long long)a.steps);
            printf("  %-10s %12.3f ms\n", "forward", fwd);
            printf("  %-10s %12.3f ms\n", "backward", bwd);
            printf("  %-10s %12.3f ms\n", "step", stp);
            printf("  %-10s %12.2f GFLOP/s\n", "speed", gflops);
            printf("  %-10s %12.1f MiB\n", "peak RSS", rss);
            printf("  %-10s %s\n", "BLAS", tg_blas_info());
        }
    }
    free(t);
    tg_tape_free(step);
    tg_tape_free(model);
    tg_cli_flush_stdout();
    return rc;
}
