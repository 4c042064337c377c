/* tapegrad bench --model gpt: one GPT training step as the book's loop runs
 * it (forward, cross-entropy, backward, AdamW step) on random ids: one warm-up
 * step, then --steps timed steps; medians of each phase, tokens/s, GFLOP/s by
 * the dense FLOP count of README.md ("Performance"), and peak RSS. The model
 * runs as `tapegrad pretrain` runs it (same layers, same dropout stream). */
#include "cli.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define CMD "bench"

static const char *help =
    "usage: tapegrad bench --model gpt [MODEL] [options]\n"
    "\n"
    "Times one training step of the book's GPTModel (forward, cross-entropy on\n"
    "random target ids, backward, AdamW lr 4e-4 weight decay 0.1) in training\n"
    "mode, as tapegrad pretrain runs it: one warm-up step, then --steps timed\n"
    "steps; prints the median forward, backward, optimizer and step times,\n"
    "tokens/s, GFLOP/s and peak memory.\n"
    "\n"
    "  --batch N       batch size (2)\n"
    "  --tokens N      tokens per row (256); the context length too unless\n"
    "                  --context is given\n"
    "  --steps N       timed steps (5)\n"
    "  --threads N     OpenMP threads (default: OpenMP's default)\n"
    "  --json          one JSON object: step_ms, fwd_ms, bwd_ms, opt_ms,\n"
    "                  tokens_per_s, gflops, peak_rss_mib and the configuration\n"
    "  --help          this text\n"
    "\n" TG_CLI_MODEL_HELP
    "\n"
    "FLOPs = 6 * (weights of every Linear, out_head included) * B * T\n"
    "      + 12 * n_layers * B * T^2 * emb_dim.\n";

typedef struct {
    const char *model;
    int64_t batch, tokens, steps, threads;
    bool threads_set, json;
} gpt_bench_args;

/* Random ids (B, T) below vocab, drawn from g. */
static tg_tensor *random_ids(tg_tape *tp, int64_t B, int64_t T, int64_t vocab, tg_generator *g)
{
    int64_t shape[2] = {B, T};
    tg_tensor *t = tg_empty(tp, TG_I64, 2, shape);
    if (!t) return NULL;
    int64_t *p = tg_data_ptr(t);
    for (int64_t i = 0; i < B * T; i++) p[i] = (int64_t)(tg_generator_random64(g) % (uint64_t)vocab);
    return t;
}

/* t[phase][s]: forward (with the loss), backward, optimizer, whole step. */
static int run(const gpt_bench_args *a, const tg_cli_model *mo, const tg_gpt_config *cfg, double *t[4],
               double *tape_mib)
{
    tg_tape *model_tape = tg_tape_new(), *step = tg_tape_new();
    tg_generator *g = tg_generator_new(7);
    int rc = TG_CLI_OK;
    tg_module *gpt = model_tape && step && g ? tg_cli_model_build(model_tape, mo, cfg) : NULL;
    tg_optimizer *opt = NULL;
    tg_tensor *x = NULL, *y = NULL;
    if (gpt) {
        tg_cli_gpt_set_layers(gpt, false);
        tg_adam_options o = {4e-4, {0.9, 0.999}, 1e-8, 0.1, false};
        opt = tg_adamw_new(model_tape, gpt, o);
        x = opt ? random_ids(model_tape, a->batch, a->tokens, cfg->vocab_size, g) : NULL;
        y = x ? random_ids(model_tape, a->batch, a->tokens, cfg->vocab_size, g) : NULL;
    }
    if (!y) rc = g ? tg_cli_lib_error(CMD, NULL) : tg_cli_error(CMD, "out of memory");
    if (rc == TG_CLI_OK) tg_module_train(gpt, true);
    int64_t flat[2] = {-1, cfg->vocab_size}, n = -1;
    for (int64_t s = -1; rc == TG_CLI_OK && s < a->steps; s++) { /* s = -1: the warm-up step */
        double t0 = tg_cli_now();
        tg_optimizer_zero_grad(opt);
        tg_tensor *logits = tg_module_forward(step, gpt, x);
        tg_tensor *loss = logits ? tg_cross_entropy(step, tg_view(step, logits, 2, flat), tg_view(step, y, 1, &n),
                                                    TG_REDUCE_MEAN)
                                 : NULL;
        double t1 = tg_cli_now();
        if (!loss || tg_backward(loss, NULL, false) != TG_OK) {
            rc = tg_cli_lib_error(CMD, NULL);
            break;
        }
        double t2 = tg_cli_now();
        if (tg_optimizer_step(opt) != TG_OK) {
            rc = tg_cli_lib_error(CMD, NULL);
            break;
        }
        *tape_mib = (double)tg_tape_used(step) / (1024.0 * 1024.0);
        tg_tape_reset(step);
        double t3 = tg_cli_now();
        if (s >= 0) {
            t[0][s] = 1e3 * (t1 - t0);
            t[1][s] = 1e3 * (t2 - t1);
            t[2][s] = 1e3 * (t3 - t2);
            t[3][s] = 1e3 * (t3 - t0);
        }
    }
    tg_generator_free(g);
    tg_tape_free(step);
    tg_tape_free(model_tape);
    return rc;
}

int tg_cmd_bench_gpt(int argc, char **argv)
{
    gpt_bench_args a = {.model = "gpt", .batch = 2, .tokens = 256, .steps = 5};
    const tg_opt own[] = {
        {"--model", TG_OPT_STRING, &a.model, 0, 0, 0, 0, false, NULL},
        {"--batch", TG_OPT_INT, &a.batch, 1, 1 << 20, 0, 0, false, NULL},
        {"--tokens", TG_OPT_INT, &a.tokens, 1, 65536, 0, 0, false, NULL},
        {"--steps", TG_OPT_INT, &a.steps, 1, 100000, 0, 0, false, NULL},
        {"--threads", TG_OPT_INT, &a.threads, 1, 1024, 0, 0, false, &a.threads_set},
        {"--json", TG_OPT_FLAG, &a.json, 0, 0, 0, 0, false, NULL},
    };
    /* the context defaults to --tokens, so MODEL is parsed after --tokens is known */
    tg_cli_model mo;
    tg_cli_model_defaults(&mo, 0);
    tg_gpt_config cfg;
    tg_args_status st = tg_cli_model_parse(CMD, argc, argv, own, (int)(sizeof own / sizeof own[0]), &mo, &cfg, help);
    if (st == TG_ARGS_HELP) return TG_CLI_OK;
    if (st != TG_ARGS_OK) return TG_CLI_USAGE;
    if (strcmp(a.model, "gpt") != 0) return tg_cli_error(CMD, "--model: expected gpt, got '%.200s'", a.model);
    if (!mo.context) cfg.context_length = a.tokens;
    if (a.tokens > cfg.context_length)
        return tg_cli_error(CMD, "--tokens %lld exceeds the model's context length %lld", (long long)a.tokens,
                            (long long)cfg.context_length);
    if (tg_gpt_config_check(&cfg) != TG_OK) return tg_cli_lib_error(CMD, NULL);
    /* parameters, gradients, AdamW's two moments, the logits with their
     * gradient, and a generous bound on each block's activations */
    double bytes = 16.0 * (double)tg_gpt_config_num_parameters(&cfg) +
                   12.0 * (double)a.batch * (double)a.tokens * (double)cfg.vocab_size +
                   4.0 * (double)cfg.n_layers * (double)a.batch * (double)a.tokens *
                       (64.0 * (double)cfg.emb_dim + 12.0 * (double)cfg.n_heads * (double)a.tokens);
    if (bytes > TG_CLI_MEMORY_BUDGET)
        return tg_cli_error(CMD, "configuration too large: batch %lld, tokens %lld with this model would need more than %.0f GiB",
                            (long long)a.batch, (long long)a.tokens, TG_CLI_MEMORY_BUDGET / (1024.0 * 1024 * 1024));
    if (tg_cli_check_only) return TG_CLI_OK;
    if (a.threads_set) omp_set_num_threads((int)a.threads);

    double *t[4];
    double *buf = malloc(sizeof(double) * 4 * (size_t)a.steps);
    if (!buf) return tg_cli_error(CMD, "out of memory");
    for (int i = 0; i < 4; i++) t[i] = buf + i * a.steps;
    double tape_mib = 0;
    int rc = run(&a, &mo, &cfg, t, &tape_mib);
    if (rc == TG_CLI_OK) {
        double B = (double)a.batch, T = (double)a.tokens, d = (double)cfg.emb_dim, L = (double)cfg.n_layers;
        double V = (double)cfg.vocab_size;
        double linear = L * (4 * d * d + 8 * d * d) + d * V; /* W_query, W_key, W_value, out_proj, ff, out_head */
        double flops = 6 * linear * B * T + 12 * L * B * T * T * d;
        double fwd = tg_cli_median(t[0], a.steps), bwd = tg_cli_median(t[1], a.steps), opt = tg_cli_median(t[2], a.steps);
        double stp = tg_cli_median(t[3], a.steps);
        double gflops = stp > 0 ? flops / (stp * 1e-3) / 1e9 : 0.0;
        double tps = stp > 0 ? B * T / (stp * 1e-3) : 0.0;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double rss = (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
        int threads = omp_get_max_threads();
        if (a.json) {
            json_t *o = json_object();
            json_object_set_new(o, "model", json_string("gpt"));
            json_object_set_new(o, "config", json_string(mo.config));
            json_object_set_new(o, "batch", json_integer(a.batch));
            json_object_set_new(o, "tokens", json_integer(a.tokens));
            json_object_set_new(o, "emb_dim", json_integer(cfg.emb_dim));
            json_object_set_new(o, "n_layers", json_integer(cfg.n_layers));
            json_object_set_new(o, "n_heads", json_integer(cfg.n_heads));
            json_object_set_new(o, "vocab_size", json_integer(cfg.vocab_size));
            json_object_set_new(o, "dropout", json_real(cfg.drop_rate));
            json_object_set_new(o, "steps", json_integer(a.steps));
            json_object_set_new(o, "threads", json_integer(threads));
            json_object_set_new(o, "fwd_ms", json_real(fwd));
            json_object_set_new(o, "bwd_ms", json_real(bwd));
            json_object_set_new(o, "opt_ms", json_real(opt));
            json_object_set_new(o, "step_ms", json_real(stp));
            json_object_set_new(o, "tokens_per_s", json_real(tps));
            json_object_set_new(o, "gflop", json_real(flops / 1e9));
            json_object_set_new(o, "gflops", json_real(gflops));
            json_object_set_new(o, "peak_rss_mib", json_real(rss));
            json_object_set_new(o, "step_tape_mib", json_real(tape_mib));
            rc = tg_cli_print_json(CMD, o, JSON_REAL_PRECISION(9) | JSON_PRESERVE_ORDER);
        } else {
            printf("tapegrad bench: GPTModel %s (emb %lld, %lld layers, %lld heads, vocab %lld, dropout %g), "
                   "batch %lld, tokens %lld, %d threads, median of %lld steps\n",
                   mo.config, (long long)cfg.emb_dim, (long long)cfg.n_layers, (long long)cfg.n_heads,
                   (long long)cfg.vocab_size, cfg.drop_rate, (long long)a.batch, (long long)a.tokens, threads,
                   (long long)a.steps);
            printf("  %-10s %12.1f ms\n", "forward", fwd);
            printf("  %-10s %12.1f ms\n", "backward", bwd);
            printf("  %-10s %12.1f ms\n", "AdamW", opt);
            printf("  %-10s %12.1f ms\n", "step", stp);
            printf("  %-10s %12.1f tokens/s\n", "speed", tps);
            printf("  %-10s %12.2f GFLOP/s (%.1f GFLOP per step)\n", "", gflops, flops / 1e9);
            printf("  %-10s %12.1f MiB\n", "peak RSS", rss);
            printf("  %-10s %12.1f MiB (activations and gradients of one step)\n", "step tape", tape_mib);
        }
    }
    free(buf);
    fflush(stdout);
    return rc;
}
