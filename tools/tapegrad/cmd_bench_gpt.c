/* tapegrad bench --model gpt: one GPT training step as the book's loop runs
 * it (forward, cross-entropy, backward, AdamW step) on random ids: one warm-up
 * step, then --steps timed steps; medians of each phase, tokens/s, GFLOP/s by
 * the dense FLOP count of README.md ("Performance"), and peak RSS. The model
 * runs as `tapegrad pretrain` runs it (same layers, same dropout stream).
 * Under mpirun it runs as pretrain does there: each rank its slice of the
 * global batch, gradients all-reduced in buckets during backward; it then
 * also times the wait after backward, the same all-reduces alone, and the
 * share of them that backward hid (README.md, "Many processes").
 * --model classify and --model dpo time the book's fine-tuning steps
 * (chapter 6's classifier, chapter 7's DPO notebook) the same way. */
#include "cli.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#define CMD "bench"

const char *const tg_cli_bench_gpt_help =
    "usage: tapegrad bench --model gpt|classify|dpo [MODEL] [options]\n"
    "\n"
    "Times one training step of the book's GPTModel (forward, cross-entropy on\n"
    "random ids, backward, AdamW lr 4e-4 weight decay 0.1) in training mode, as\n"
    "pretrain runs it: a warm-up step, then --steps timed steps; prints the\n"
    "median forward, backward, optimizer and step times, tokens/s, GFLOP/s and\n"
    "peak memory. Under mpirun -np N (N dividing --batch) each rank takes its\n"
    "slice of the batch, gradients averaged as pretrain does; it prints the wait\n"
    "for the all-reduce after backward, the all-reduces alone, the share hidden.\n"
    "\n"
    "classify: chapter 6's step: a new out_head Linear(emb, 2), the last block,\n"
    "final norm and head trainable (or LoRA on every Linear: --lora-rank R\n"
    "--lora-alpha A), the loss on the last position against random labels.\n"
    "dpo: the DPO notebook's step: the policy (LoRA as in classify) and a frozen\n"
    "reference (the same weights) score random chosen and rejected rows, masks\n"
    "true from --tokens / 2; tg_loss_dpo beta 0.1, AdamW lr 5e-6 weight decay\n"
    "0.01; by default --qkv-bias (GPT-2), --dropout 0, the preset's context.\n"
    "\n"
    "  --batch N       batch size (2; dpo 8); the global batch under mpirun\n"
    "  --tokens N      tokens per row (256; dpo 79: the notebook's median batch\n"
    "                  length); the context too unless --context is given\n"
    "  --steps N       timed steps (5)\n"
    "  --threads N     OpenMP threads (default: OpenMP's; under mpirun the\n"
    "                  machine's cores shared among its ranks)\n"
    "  --dist          data parallel: start with mpirun -np N (a missing mpirun\n"
    "                  is then an error)\n"
    "  --memory        also where the peak memory is (--json: \"memory\")\n"
    "  --json          one JSON object: step_ms, fwd_ms, bwd_ms, opt_ms,\n"
    "                  tokens_per_s, gflops, peak_rss_mib and the configuration;\n"
    "                  under mpirun also ranks, buckets, grad_mib, wait_ms,\n"
    "                  allreduce_ms, overlap, started_in_backward, bucket_bytes\n"
    "  --help          this text\n"
    "\n" TG_CLI_MODEL_HELP
    "\n"
    "FLOPs = 6 * (weights of every Linear, out_head included) * B * T\n"
    "      + 12 * n_layers * B * T^2 * n_heads * head_dim;\n"
    "dpo: 16 and 32 (two policy steps, two reference forwards).\n";

typedef struct {
    const char *model;
    int64_t batch, tokens, steps, threads, lora_rank;
    double lora_alpha;
    bool threads_set, json, dist, classify, dpo, lora_rank_seen, lora_alpha_seen, memory;
} gpt_bench_args;

/* The DPO notebook's step (--model dpo): beta, AdamW's rate and weight decay. */
#define DPO_BETA 0.1
#define DPO_LR 5e-6
#define DPO_WEIGHT_DECAY 0.01

/* Phases of a step, each a median over the timed steps. */
enum { T_FWD, T_BWD, T_WAIT, T_OPT, T_STEP, T_ALONE, T_N };

/* Where the memory is (bench --memory), in bytes. */
enum { M_PARAMS, M_GRADS, M_OPT, M_COPIES, M_TAPE, M_N };
static const char *const memory_keys[M_N] = {"parameters", "gradients", "optimizer_state", "weight_copies",
                                             "step_tape"};

typedef struct {
    double ms[T_N];
    double tape_mib;
    double first_loss; /* the warm-up step's (DPO: ln 2, the policy being the reference) */
    double mem[M_N];
    tg_dist_ddp_stats dist;
    int64_t trainable;
    json_t *buckets; /* each bucket's bytes, in all-reduce order */
    int ranks;
} gpt_bench_result;

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

/* The DPO notebook's batch (B, T) of named tensors: random "chosen" and
 * "rejected" ids below vocab, their masks true from T / 2 (a prompt's
 * length: the cost does not depend on it) to the end. */
static int dpo_batch(tg_tape *tp, int64_t B, int64_t T, int64_t vocab, tg_generator *g, tg_batch *b)
{
    static const char *const keys[2] = {"chosen", "rejected"}, *const masks[2] = {"chosen_mask", "rejected_mask"};
    int64_t shape[2] = {B, T};
    for (int k = 0; k < 2; k++) {
        tg_tensor *ids = random_ids(tp, B, T, vocab, g), *mask = ids ? tg_empty(tp, TG_BOOL, 2, shape) : NULL;
        if (!mask) return TG_ENOMEM;
        unsigned char *m = tg_data_ptr(mask);
        for (int64_t i = 0; i < B * T; i++) m[i] = i % T >= T / 2;
        if (tg_batch_set(b, keys[k], ids) != TG_OK || tg_batch_set(b, masks[k], mask) != TG_OK) return TG_EINVAL;
    }
    return TG_OK;
}

/* The book's chapter-6 classifier on gpt (tg_gpt_prepare_finetune): a
 * new out_head Linear(emb, 2), then LoRA adapters on every Linear or the
 * last block, final norm and head trainable. */
static int make_classifier(tg_tape *tp, tg_module *gpt, const gpt_bench_args *a, const tg_cli_model *mo)
{
    int st = tg_gpt_prepare_finetune(tp, gpt, 2, mo->seed, a->lora_rank_seen ? a->lora_rank : 0, a->lora_alpha);
    if (st != TG_OK) return st;
    tg_cli_gpt_set_layers(gpt, false);
    return TG_OK;
}

/* A failure of this rank while the others may wait in a collective ends
 * the job; in one process it is an error like any other. */
static int step_failed(void)
{
    int rc = tg_cli_lib_error(CMD, NULL);
    if (tg_dist_size() > 1) {
        tg_cli_dist_show_errors();
        tg_dist_abort(rc);
    }
    return rc;
}

/* The ddp's all-reduces alone, bucket by bucket after a barrier, reps
 * times: what the wait after backward would be if backward hid none. */
static int time_all_reduce_alone(tg_tape *tp, const tg_dist_ddp *ddp, int64_t reps, double *ms)
{
    tg_dist_ddp_stats st;
    if (tg_dist_ddp_get_stats(ddp, &st) != TG_OK) return step_failed();
    int64_t first, count, most = 0;
    size_t bytes;
    for (int64_t k = 0; k < st.buckets; k++) {
        if (tg_dist_ddp_bucket(ddp, k, &first, &count, &bytes) != TG_OK) return step_failed();
        if ((int64_t)(bytes / sizeof(float)) > most) most = (int64_t)(bytes / sizeof(float));
    }
    tg_tensor *buf = tg_zeros(tp, TG_F32, 1, &most); /* the bench's model is float32 */
    if (!buf) return step_failed();
    for (int64_t r = 0; r < reps; r++) {
        if (tg_dist_barrier() != TG_OK) return step_failed();
        double t0 = tg_cli_now();
        for (int64_t k = 0; k < st.buckets; k++) {
            tg_dist_ddp_bucket(ddp, k, &first, &count, &bytes);
            tg_tensor *part = tg_narrow(tp, buf, 0, 0, (int64_t)(bytes / sizeof(float)));
            if (!part || tg_dist_all_reduce(part, TG_DIST_SUM) != TG_OK) return step_failed();
        }
        ms[r] = 1e3 * (tg_cli_now() - t0);
    }
    return TG_CLI_OK;
}

/* The parts of the memory after the timed steps: the model's parameters
 * and their gradients (each tensor once), the optimizer's state, the
 * weights' bf16 copies; the step tape is the largest a step used. */
static void measure_memory(tg_tape *tp, const tg_module *gpt, const tg_module *ref, const tg_optimizer *opt,
                           gpt_bench_result *res)
{
    const tg_module *models[2] = {gpt, ref}; /* DPO's reference: parameters without gradients */
    for (int k = 0; k < 2 && models[k]; k++) {
        tg_named_list ps;
        if (tg_module_named_parameters(tp, models[k], &ps) != TG_OK) return;
        for (int i = 0; i < ps.n; i++) {
            const tg_tensor *p = ps.tensors[i];
            res->mem[M_PARAMS] += (double)tg_tensor_nbytes(p);
            if (p->grad) res->mem[M_GRADS] += (double)tg_numel(p->grad) * (double)tg_dtype_size(p->grad->dtype);
        }
    }
    res->mem[M_OPT] = (double)tg_optimizer_state_bytes(opt);
    res->mem[M_COPIES] = (double)tg_numerics_copy_bytes();
}

/* t[phase][s] (ms): forward with the loss, backward, waiting for the
 * gradients' all-reduce, optimizer, whole step (the library's trainer's
 * step, as pretrain and finetune take it); then the all-reduces alone.
 * dist: under mpirun (the trainer slices the global batch, a ddp). DPO:
 * the reference is built as the policy (tg_cli_model_build seeds it the
 * same), frozen and in eval mode; with LoRA it is the policy without its
 * adapters (no second model). */
static int run(const gpt_bench_args *a, const tg_cli_model *mo, const tg_decoder_config *cfg, bool dist, double *t[T_N],
               gpt_bench_result *res)
{
    tg_tape *model_tape = tg_tape_new();
    tg_generator *g = tg_generator_new(7);
    int rc = TG_CLI_OK;
    tg_module *gpt = model_tape && g ? tg_cli_model_build(model_tape, mo, cfg) : NULL;
    /* with LoRA the reference is the policy without its adapters, as finetune dpo runs it */
    tg_module *ref = gpt && a->dpo && !a->lora_rank_seen ? tg_cli_model_build(model_tape, mo, cfg) : NULL;
    tg_optimizer *opt = NULL;
    tg_trainer *tr = NULL;
    tg_batch b = {0};
    tg_dpo_task dpo = {.reference = ref, .beta = DPO_BETA};
    if (a->dpo && ref) {
        tg_cli_gpt_set_layers(ref, false);
        if (tg_module_requires_grad_(ref, false) != TG_OK) gpt = NULL;
        tg_module_train(ref, false);
    } else if (a->dpo && !a->lora_rank_seen) {
        gpt = NULL;
    }
    if (gpt && a->classify && make_classifier(model_tape, gpt, a, mo) != TG_OK) gpt = NULL;
    /* a LoRA fine-tuning step (appendix E): the base frozen, every Linear wrapped */
    if (gpt && !a->classify && a->lora_rank_seen &&
        tg_gpt_prepare_finetune(model_tape, gpt, 0, mo->seed, a->lora_rank, a->lora_alpha) != TG_OK)
        gpt = NULL;
    if (gpt) {
        res->trainable = tg_module_num_trainable_parameters(gpt);
        tg_cli_gpt_set_layers(gpt, false);
        tg_adam_options o = a->dpo ? (tg_adam_options){DPO_LR, {0.9, 0.999}, 1e-8, DPO_WEIGHT_DECAY, false}
                                   : (tg_adam_options){4e-4, {0.9, 0.999}, 1e-8, 0.1, false};
        opt = tg_adamw_new(model_tape, gpt, o);
        /* the same global batch on every rank */
        if (a->dpo && opt && dpo_batch(model_tape, a->batch, a->tokens, cfg->vocab_size, g, &b) != TG_OK) opt = NULL;
        b.input = opt && !a->dpo ? random_ids(model_tape, a->batch, a->tokens, cfg->vocab_size, g) : NULL;
        b.target = !b.input ? NULL
                   : a->classify ? random_ids(model_tape, 1, a->batch, 2, g)
                                 : random_ids(model_tape, a->batch, a->tokens, cfg->vocab_size, g);
        int64_t nb = a->batch;
        if (a->classify && b.target) b.target = tg_view(model_tape, b.target, 1, &nb); /* labels (B) */
    }
    if (a->dpo ? b.n < 4 : !b.target) rc = g ? tg_cli_lib_error(CMD, NULL) : tg_cli_error(CMD, "out of memory");
    if (dist) rc = tg_cli_dist_agree(rc);
    if (rc == TG_CLI_OK) {
        tg_trainer_options o = {.model = gpt, .optimizer = opt,
                                .loss = a->dpo ? tg_loss_dpo : a->classify ? tg_loss_last : tg_loss_lm,
                                .task = a->dpo ? &dpo : NULL, .epochs = 1, .quiet = true, .numerics = mo->numerics};
        if (!(tr = tg_trainer_new(&o))) rc = *tg_last_error() ? step_failed() : TG_CLI_USAGE;
    }
    if (rc == TG_CLI_OK) tg_module_train(gpt, true);
    for (int64_t s = -1; rc == TG_CLI_OK && s < a->steps; s++) { /* s = -1: the warm-up step */
        double t0 = tg_cli_now();
        double loss;
        if (tg_trainer_step(tr, 1, &b, &loss) != TG_OK) {
            rc = step_failed();
            break;
        }
        double t1 = tg_cli_now();
        if (s < 0) res->first_loss = loss;
        tg_trainer_stats st;
        tg_trainer_get_stats(tr, &st);
        res->tape_mib = (double)st.step_tape_bytes / (1024.0 * 1024.0);
        if ((double)st.step_tape_bytes > res->mem[M_TAPE]) res->mem[M_TAPE] = (double)st.step_tape_bytes;
        if (s >= 0) {
            double ph[T_STEP] = {st.forward_s, st.backward_s, st.sync_s, st.optimizer_s};
            for (int k = 0; k < T_STEP; k++) t[k][s] = 1e3 * ph[k];
            t[T_STEP][s] = 1e3 * (t1 - t0);
        }
    }
    if (rc == TG_CLI_OK) measure_memory(model_tape, gpt, ref, opt, res);
    const tg_dist_ddp *ddp = tg_trainer_ddp(tr);
    if (rc == TG_CLI_OK && ddp) {
        tg_dist_ddp_get_stats(ddp, &res->dist);
        res->buckets = json_array();
        for (int64_t k = 0; k < res->dist.buckets; k++) {
            int64_t first, count;
            size_t bytes;
            tg_dist_ddp_bucket(ddp, k, &first, &count, &bytes);
            json_array_append_new(res->buckets, json_integer((json_int_t)bytes));
        }
        rc = time_all_reduce_alone(tg_trainer_tape(tr), ddp, a->steps, t[T_ALONE]);
    }
    tg_trainer_free(tr);
    tg_generator_free(g);
    tg_tape_free(model_tape);
    return rc;
}

/* Whether argv asks for --model dpo (the last --model wins, as the parse's):
 * its defaults differ, and MODEL's are set before the parse. */
static bool wants_dpo(int argc, char **argv)
{
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (!argv[i]) continue;
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) model = argv[++i];
        else if (strncmp(argv[i], "--model=", 8) == 0) model = argv[i] + 8;
    }
    return model && strcmp(model, "dpo") == 0;
}

int tg_cmd_bench_gpt(int argc, char **argv)
{
    bool dpo_asked = wants_dpo(argc, argv);
    /* DPO: the notebook's batch of 8 and median padded length (79 ids) */
    gpt_bench_args a = {.model = "gpt", .batch = dpo_asked ? 8 : 2, .tokens = dpo_asked ? 79 : 256, .steps = 5};
    const tg_opt own[] = {
        {.name = "--model", .type = TG_OPT_STRING, .dest = &a.model},
        {.name = "--batch", .type = TG_OPT_INT, .dest = &a.batch, .imin = 1, .imax = 1 << 20},
        {.name = "--tokens", .type = TG_OPT_INT, .dest = &a.tokens, .imin = 1, .imax = 65536},
        {.name = "--steps", .type = TG_OPT_INT, .dest = &a.steps, .imin = 1, .imax = 100000},
        {.name = "--threads", .type = TG_OPT_INT, .dest = &a.threads, .imin = 1, .imax = 1024, .seen = &a.threads_set},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &a.json},
        {.name = "--dist", .type = TG_OPT_FLAG, .dest = &a.dist},
        {.name = "--memory", .type = TG_OPT_FLAG, .dest = &a.memory},
        {.name = "--lora-rank", .type = TG_OPT_INT, .dest = &a.lora_rank, .imin = 1, .imax = 65536,
         .seen = &a.lora_rank_seen},
        {.name = "--lora-alpha", .type = TG_OPT_DOUBLE, .dest = &a.lora_alpha, .dmin = -1e6, .dmax = 1e6,
         .seen = &a.lora_alpha_seen},
    };
    /* the context defaults to --tokens, so MODEL is parsed after --tokens is known */
    tg_cli_model mo;
    tg_cli_model_defaults(&mo, 0);
    mo.dropout_seen = dpo_asked; /* the notebook's drop_rate 0.0 (0 unless --dropout) */
    mo.frozen = &a.lora_rank_seen; /* bf16 or q8 weights: LoRA's frozen base */
    tg_decoder_config cfg;
    int rc;
    tg_cli_command c = {.name = CMD, .help = tg_cli_bench_gpt_help, .opts = own, .nopts = TG_CLI_NOPTS(own)};
    if (!tg_cli_model_parse(&c, argc, argv, &mo, &cfg, &rc)) return rc;
    a.classify = strcmp(a.model, "classify") == 0;
    a.dpo = strcmp(a.model, "dpo") == 0;
    if (strcmp(a.model, "gpt") != 0 && !a.classify && !a.dpo)
        return tg_cli_error(CMD, "--model: expected gpt, classify or dpo, got '%.200s'", a.model);
    if (a.dpo && a.tokens < 2)
        return tg_cli_error(CMD, "--tokens: --model dpo needs at least 2 (token t + 1 is scored at t), got %lld",
                            (long long)a.tokens);
    /* the notebook's GPT-2 has q/k/v biases, and keeps its context length */
    if (a.dpo && cfg.family == TG_GPT_FAMILY_GPT2) cfg.qkv_bias = true;
    if (a.lora_alpha_seen && !a.lora_rank_seen) return tg_cli_error(CMD, "--lora-alpha needs --lora-rank");
    if (a.lora_rank_seen && !a.lora_alpha_seen) a.lora_alpha = (double)a.lora_rank;
    if (!mo.context && !a.dpo) cfg.context_length = a.tokens;
    if (a.tokens > cfg.context_length)
        return tg_cli_error(CMD, "--tokens %lld exceeds the model's context length %lld", (long long)a.tokens,
                            (long long)cfg.context_length);
    if (tg_decoder_config_check(&cfg) != TG_OK) return tg_cli_lib_error(CMD, NULL);
    /* parameters, gradients, AdamW's two moments (under LoRA or frozen in
     * bf16 the weights alone, in their dtype, and the adapters': rank *
     * (in + out) of each Linear's in * out, about 2 * rank / emb of them,
     * 16 bytes each), the head's logits (whole with their gradient under
     * EXACT; in chunks otherwise: the smaller of its gradient's and the
     * weight's size), each block's activations (a bound: 16 rows of emb
     * and 3 of the feed-forward per token, and the attention's scores
     * under EXACT); with --recompute each block's input and one block's
     * activations. DPO: the reference's weights too, the policy's two
     * forwards' activations, and whole logits (compute_logprobs): the
     * policy's two with their log-softmax and gradients, the reference's */
    double seqs = a.dpo ? 2.0 : 1.0; /* sequences per row the policy keeps for backward */
    double rows = seqs * (double)a.batch * (double)a.tokens, emb = (double)cfg.emb_dim, vocab = (double)cfg.vocab_size;
    double hid = (double)(cfg.hidden_dim ? cfg.hidden_dim : 4 * cfg.emb_dim);
    bool exact = mo.numerics == TG_NUMERICS_EXACT;
    bool frozen = a.lora_rank_seen;
    double adapters = a.lora_rank_seen ? 2.0 * (double)a.lora_rank / emb : 0.0;
    double wbytes = cfg.weights == TG_Q8 ? 34.0 / 32.0 : (double)tg_dtype_size(cfg.weights);
    double per_param = frozen ? wbytes + 16.0 * (adapters < 1.0 ? adapters : 1.0) : 16.0;
    double head = a.dpo ? 4.0 * 4.0 * rows * vocab
                  : exact ? 12.0 * rows * vocab
                          : 4.0 * (rows < emb ? rows : emb) * vocab + (64 << 20);
    if (a.dpo) per_param += wbytes;
    double block = 4.0 * rows * (16.0 * emb + 3.0 * hid + (exact ? 3.0 * (double)cfg.n_heads * (double)a.tokens : 0.0));
    double layers = (double)cfg.n_layers;
    double bytes = per_param * (double)tg_decoder_config_num_parameters(&cfg) + head +
                   (mo.recompute ? block + layers * 4.0 * rows * emb : layers * block);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double budget = pages > 0 && page > 0 ? 0.8 * (double)pages * (double)page : TG_CLI_MEMORY_BUDGET;
    if (budget < TG_CLI_MEMORY_BUDGET) budget = TG_CLI_MEMORY_BUDGET;
    if (bytes > budget)
        return tg_cli_error(CMD, "configuration too large: batch %lld, tokens %lld with this model would need more than %.0f GiB",
                            (long long)a.batch, (long long)a.tokens, budget / (1024.0 * 1024 * 1024));
    if (tg_cli_check_only) return TG_CLI_OK;
    if (a.threads_set) omp_set_num_threads((int)a.threads);
    rc = tg_cli_dist_begin(CMD, a.dist, a.batch, a.threads_set);
    if (rc != TG_CLI_OK) return rc;
    bool dist = a.dist || tg_dist_launched() > 0;
    if (tg_dist_rank() == 0) tg_cli_warn_blas(CMD);

    double *t[T_N];
    double *buf = calloc((size_t)T_N * (size_t)a.steps, sizeof(double));
    if (!buf) return tg_cli_error(CMD, "out of memory");
    for (int i = 0; i < T_N; i++) t[i] = buf + i * a.steps;
    gpt_bench_result res = {.ranks = tg_dist_size()};
    rc = run(&a, &mo, &cfg, dist, t, &res);
    if (rc == TG_CLI_OK && tg_dist_rank() == 0 && tg_decoder_config_resolve(&cfg, &cfg) == TG_OK) {
        double B = (double)a.batch, T = (double)a.tokens, d = (double)cfg.emb_dim, L = (double)cfg.n_layers;
        double V = (double)cfg.vocab_size;
        double hd = (double)(cfg.head_dim ? cfg.head_dim : cfg.emb_dim / cfg.n_heads), H = (double)cfg.n_heads;
        double G = (double)(cfg.n_kv_groups ? cfg.n_kv_groups : cfg.n_heads);
        double h = (double)(cfg.hidden_dim ? cfg.hidden_dim : 4 * cfg.emb_dim);
        /* W_query, W_key, W_value, out_proj, the feed-forward's two (GELU) or three (SwiGLU) and out_head */
        double att = 2 * d * H * hd + 2 * d * G * hd, ff = (cfg.mlp == TG_MLP_GELU ? 2 : 3) * d * h;
        double linear = L * (att + ff) + d * V;
        /* DPO: the policy's step on chosen and on rejected (6 and 12 each),
         * the reference's two forwards (2 and 4 each) */
        double flops = (a.dpo ? 16 : 6) * linear * B * T + (a.dpo ? 32 : 12) * L * B * T * T * H * hd;
        for (int k = 0; k < T_N; k++) res.ms[k] = tg_cli_median(t[k], a.steps);
        double fwd = res.ms[T_FWD], bwd = res.ms[T_BWD], opt = res.ms[T_OPT], stp = res.ms[T_STEP];
        double wait = res.ms[T_WAIT], alone = res.ms[T_ALONE];
        /* the share of the all-reduces' time that backward hid */
        double overlap = alone > 0 ? 1.0 - wait / alone : 0.0;
        overlap = overlap < 0 ? 0.0 : overlap;
        double grad_mib = (double)res.dist.bytes / (1024.0 * 1024.0);
        double gflops = stp > 0 ? flops / (stp * 1e-3) / 1e9 : 0.0;
        double tps = stp > 0 ? B * T / (stp * 1e-3) : 0.0;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double rss = (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
        int threads = omp_get_max_threads();
        if (a.json) {
            json_t *o = json_object();
            json_object_set_new(o, "model", json_string(a.model));
            json_object_set_new(o, "trainable_parameters", json_integer(res.trainable));
            if (a.lora_rank_seen) {
                json_object_set_new(o, "lora_rank", json_integer(a.lora_rank));
                json_object_set_new(o, "lora_alpha", json_real(a.lora_alpha));
            }
            json_object_set_new(o, "config", json_string(mo.config));
            json_object_set_new(o, "batch", json_integer(a.batch));
            json_object_set_new(o, "tokens", json_integer(a.tokens));
            json_object_set_new(o, "emb_dim", json_integer(cfg.emb_dim));
            json_object_set_new(o, "n_layers", json_integer(cfg.n_layers));
            json_object_set_new(o, "n_heads", json_integer(cfg.n_heads));
            json_object_set_new(o, "vocab_size", json_integer(cfg.vocab_size));
            json_object_set_new(o, "dropout", json_real(cfg.drop_rate));
            json_object_set_new(o, "context", json_integer(cfg.context_length));
            json_object_set_new(o, "qkv_bias", json_boolean(cfg.qkv_bias));
            if (a.dpo) json_object_set_new(o, "beta", json_real(DPO_BETA));
            json_object_set_new(o, "steps", json_integer(a.steps));
            json_object_set_new(o, "threads", json_integer(threads));
            json_object_set_new(o, "blas", json_string(tg_blas_info()));
            json_object_set_new(o, "precision", json_string(tg_numerics_name(mo.numerics)));
            tg_cli_json_bf16(o, mo.numerics);
            json_object_set_new(o, "weights", json_string(tg_dtype_name(mo.convert_to != TG_F32 ? mo.convert_to : cfg.weights)));
            json_object_set_new(o, "fwd_ms", json_real(fwd));
            json_object_set_new(o, "bwd_ms", json_real(bwd));
            json_object_set_new(o, "opt_ms", json_real(opt));
            json_object_set_new(o, "step_ms", json_real(stp));
            json_object_set_new(o, "tokens_per_s", json_real(tps));
            json_object_set_new(o, "gflop", json_real(flops / 1e9));
            json_object_set_new(o, "gflops", json_real(gflops));
            json_object_set_new(o, "peak_rss_mib", json_real(rss));
            json_object_set_new(o, "step_tape_mib", json_real(res.tape_mib));
            json_object_set_new(o, "first_loss", json_real(res.first_loss));
            if (a.memory) {
                json_t *m = json_object();
                double known = 0;
                for (int k = 0; k < M_N; k++) {
                    char key[64];
                    snprintf(key, sizeof key, "%s_mib", memory_keys[k]);
                    json_object_set_new(m, key, json_real(res.mem[k] / (1024.0 * 1024.0)));
                    known += res.mem[k];
                }
                json_object_set_new(m, "other_mib", json_real(rss - known / (1024.0 * 1024.0)));
                json_object_set_new(o, "memory", m);
            }
            if (dist) {
                json_object_set_new(o, "ranks", json_integer(res.ranks));
                json_object_set_new(o, "buckets", json_integer(res.dist.buckets));
                json_object_set_new(o, "grad_mib", json_real(grad_mib));
                json_object_set_new(o, "wait_ms", json_real(wait));
                json_object_set_new(o, "allreduce_ms", json_real(alone));
                json_object_set_new(o, "overlap", json_real(overlap));
                json_object_set_new(o, "started_in_backward", json_integer(res.dist.started_in_backward));
                json_object_set_new(o, "bucket_bytes", res.buckets);
                res.buckets = NULL;
            }
            rc = tg_cli_print_json(CMD, o, JSON_REAL_PRECISION(9) | JSON_PRESERVE_ORDER);
        } else {
            printf("tapegrad bench: GPTModel %s (emb %lld, %lld layers, %lld heads, vocab %lld, dropout %g), "
                   "batch %lld, tokens %lld, %d threads%s, precision %s%s, median of %lld steps\n",
                   mo.config, (long long)cfg.emb_dim, (long long)cfg.n_layers, (long long)cfg.n_heads,
                   (long long)cfg.vocab_size, cfg.drop_rate, (long long)a.batch, (long long)a.tokens, threads,
                   dist ? " per rank" : "", tg_numerics_name(mo.numerics),
                   mo.numerics != TG_NUMERICS_BF16 ? ""
                   : tg_numerics_bf16_native()   ? " (oneDNN)"
                                                 : " (emulated)",
                   (long long)a.steps);
            printf("  %-10s %12.1f ms\n", "forward", fwd);
            printf("  %-10s %12.1f ms\n", "backward", bwd);
            printf("  %-10s %12.1f ms\n", "AdamW", opt);
            printf("  %-10s %12.1f ms\n", "step", stp);
            printf("  %-10s %12.1f tokens/s\n", "speed", tps);
            printf("  %-10s %12.2f GFLOP/s (%.1f GFLOP per step)\n", "", gflops, flops / 1e9);
            printf("  %-10s %12.1f MiB\n", "peak RSS", rss);
            printf("  %-10s %12.1f MiB (activations and gradients of one step)\n", "step tape", res.tape_mib);
            if (a.memory) {
                static const char *const what[M_N] = {"parameters", "gradients", "optimizer state (AdamW's moments)",
                                                      "weight copies (bf16)", "step tape (the largest step)"};
                double known = 0;
                for (int k = 0; k < M_N; k++) {
                    printf("  %-10s %12.1f MiB %s\n", k ? "" : "memory", res.mem[k] / (1024.0 * 1024.0), what[k]);
                    known += res.mem[k];
                }
                printf("  %-10s %12.1f MiB other (libraries, BLAS buffers, a product's temporaries): peak RSS less the parts\n",
                       "", rss - known / (1024.0 * 1024.0));
            }
            printf("  %-10s %s\n", "BLAS", tg_blas_info());
            if (a.classify)
                printf("  %-10s %12lld trainable parameters (%s; GFLOP/s counts a full step)\n", "classify",
                       (long long)res.trainable, a.lora_rank_seen ? "LoRA adapters" : "last block, final norm, head");
            if (a.dpo)
                printf("  %-10s %12lld trainable parameters (%s), beta %g; forward: two policy and two reference "
                       "forwards; tokens/s counts the chosen rows\n",
                       "dpo", (long long)res.trainable, a.lora_rank_seen ? "LoRA adapters" : "the whole policy",
                       DPO_BETA);
            if (dist) {
                printf("  %-10s %12.1f ms waiting after backward: %d ranks, %.1f MiB of gradients in %lld buckets, "
                       "%lld started during backward\n",
                       "all-reduce", wait, res.ranks, grad_mib, (long long)res.dist.buckets,
                       (long long)res.dist.started_in_backward);
                printf("  %-10s %12.1f ms the same all-reduces alone; backward hid %.0f%% of them\n", "", alone,
                       100.0 * overlap);
            }
        }
    }
    json_decref(res.buckets);
    free(buf);
    tg_cli_flush_stdout();
    return rc;
}
