/* The training commands' common part (pretrain, finetune classify,
 * finetune instruct): their shared options, the run through the library's
 * trainer (include/tapegrad/train.h) on one process or many, and the JSON
 * line and plots made from the trainer's table. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

int tg_cli_train_check(const char *cmd, tg_cli_train *t)
{
    if (!t->warmup_seen && (t->initial_seen || t->min_seen))
        return tg_cli_error(cmd, "--initial-lr and --min-lr set the --warmup schedule: give --warmup too");
    if (!t->initial_seen) t->initial_lr = 1e-5;
    if (!t->min_seen) t->min_lr = t->initial_lr;
    if (t->checkpoint_every && !t->checkpoint) return tg_cli_error(cmd, "--checkpoint-every needs --checkpoint FILE");
    return TG_CLI_OK;
}

int tg_cli_train_begin(const char *cmd, const tg_cli_train *t, int64_t batch)
{
#ifdef _OPENMP
    if (t->threads) omp_set_num_threads((int)t->threads);
#endif
    int rc = tg_cli_dist_begin(cmd, t->dist, batch, t->threads != 0);
    if (rc != TG_CLI_OK) return rc;
    if (tg_dist_rank() == 0) tg_cli_warn_blas(cmd);
    /* the outputs are written at the end of an epoch or of the run: a bad
     * path fails now, not after hours of training */
    const char *outs[3] = {t->plot, t->checkpoint, t->save}, *names[3] = {"--plot", "--checkpoint", "--save"};
    for (int k = 0; tg_dist_rank() == 0 && k < 3; k++)
        if (outs[k] && (rc = tg_cli_check_output(cmd, names[k], outs[k])) != TG_CLI_OK) return rc;
    return TG_CLI_OK;
}

void tg_cli_train_options(const tg_cli_train *t, tg_trainer_options *o)
{
    o->schedule = t->warmup_seen;
    o->warmup = t->warmup;
    o->initial_lr = t->initial_lr;
    o->min_lr = t->min_lr;
    o->clip_grad_norm = t->clip_seen ? t->clip : 0;
    o->accumulate = t->accumulate;
    o->checkpoint = t->checkpoint;
    o->checkpoint_every = t->checkpoint_every;
    o->resume = t->resume;
    o->progress = isatty(STDERR_FILENO) && !t->json && tg_dist_rank() == 0;
}

/* The layers' types as one number (FNV-1a over the first n_layers, at most
 * the array's), kept below 2^62 so the checkpoint's JSON integer holds it. */
static uint64_t layer_types_hash(const tg_decoder_config *c)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t i = 0; i < c->n_layers && i < TG_DECODER_MAX_LAYER_TYPES; i++)
        h = (h ^ c->layer_types[i]) * 0x100000001b3ULL;
    return h >> 2;
}

/* A rank that failed alone while the others wait in a collective ends the
 * job; every rank failing alike returns as one process does. */
static int fail(const char *cmd, int st)
{
    int rc = st == TG_EDIVERGED ? (tg_cli_error(cmd, "%s", tg_last_error()), TG_CLI_FAIL) : tg_cli_lib_error(cmd, NULL);
    if (tg_dist_size() > 1) {
        tg_cli_dist_show_errors();
        tg_dist_abort(rc);
    }
    return rc;
}

int tg_cli_train_run(const char *cmd, int rc, const tg_trainer_options *o, tg_trainer **out)
{
    *out = NULL;
    if (tg_dist_size() > 1) rc = tg_cli_dist_agree(rc);
    if (rc != TG_CLI_OK) return rc;
    tg_trainer *tr = tg_trainer_new(o);
    if (!tr) { /* under mpirun, the rank that failed says why */
        if (!*tg_last_error()) return TG_CLI_USAGE;
        rc = tg_cli_lib_error(cmd, NULL);
        if (tg_dist_size() > 1) tg_cli_dist_show_errors();
        return rc;
    }
    *out = tr;
    int st = tg_trainer_fit(tr);
    if (st != TG_OK) return fail(cmd, st);
    tg_trainer_stats s;
    tg_trainer_get_stats(tr, &s);
    if (s.steps_this_run == 0 && s.epoch >= o->epochs && tg_trainer_is_lead(tr))
        fprintf(stderr, "tapegrad %s: the checkpoint is at epoch %lld of %lld: nothing to train\n", cmd,
                (long long)s.epoch, (long long)o->epochs);
    return TG_CLI_OK;
}

json_t *tg_cli_train_json(const tg_trainer *tr, const char *seen)
{
    int64_t n;
    const tg_train_row *r = tg_trainer_rows(tr, &n);
    json_t *o = json_object(), *rows = json_array();
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(rows, json_pack("{s:I,s:I,s:o,s:o,s:I}", "epoch", (json_int_t)r[i].epoch, "step",
                                              (json_int_t)r[i].step, "train_loss", tg_cli_json_real(r[i].train_loss),
                                              "val_loss", tg_cli_json_real(r[i].val_loss), seen,
                                              (json_int_t)r[i].seen));
    json_object_set_new(o, "rows", rows);
    tg_trainer_stats s;
    tg_trainer_get_stats(tr, &s);
    json_object_set_new(o, "seconds", json_real(s.seconds));
    if (s.size > 1) { /* data parallel: how long a step waited for the gradients' all-reduce */
        json_object_set_new(o, "ranks", json_integer(s.size));
        json_object_set_new(o, "buckets", json_integer(s.dist.buckets));
        json_object_set_new(o, "mpi_wait_per_step_s",
                            json_real(s.dist.syncs ? s.dist.total_wait_seconds / (double)s.dist.syncs : 0.0));
    }
    return o;
}

json_t *tg_cli_json_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

json_t *tg_cli_json_series(const tg_trainer *tr, const char *series)
{
    int64_t n;
    const double *v = tg_trainer_series(tr, series, &n);
    const char *const *t = v ? NULL : tg_trainer_texts(tr, series, &n);
    json_t *a = json_array();
    for (int64_t i = 0; i < n; i++) json_array_append_new(a, v ? tg_cli_json_real(v[i]) : json_string(t[i]));
    return a;
}

void tg_cli_train_summary(const tg_trainer *tr, const char *unit)
{
    tg_trainer_stats s;
    tg_trainer_get_stats(tr, &s);
    if (s.steps_this_run == 0) return;
    fprintf(stderr, "%lld steps in %.1f s (%.0f %s/s)\n", (long long)s.steps_this_run, s.seconds,
            s.seconds > 0 ? (double)s.seen_this_run / s.seconds : 0.0, unit);
    if (s.size > 1 && s.dist.syncs)
        fprintf(stderr, "%d ranks: %.1f ms per step waiting for the gradients' all-reduce (%lld buckets)\n", s.size,
                1e3 * s.dist.total_wait_seconds / (double)s.dist.syncs, (long long)s.dist.buckets);
}

int tg_cli_train_plot(const char *cmd, const char *path, const tg_trainer *tr, const char *title, const char *top,
                      double epochs)
{
    int64_t n;
    const tg_train_row *r = tg_trainer_rows(tr, &n);
    tg_cli_loss_row *rows = malloc(sizeof *rows * (size_t)(n ? n : 1));
    if (!rows) return tg_cli_error(cmd, "out of memory");
    for (int64_t i = 0; i < n; i++) rows[i] = (tg_cli_loss_row){r[i].epoch, r[i].step, r[i].seen, r[i].train_loss, r[i].val_loss};
    int st = top ? tg_cli_svg_values_plot(path, title, "Loss", top, epochs, n, rows)
                 : tg_cli_svg_loss_plot(path, title, epochs, n, rows);
    int e = errno;
    free(rows);
    if (st == -1) return tg_cli_error(cmd, "--plot: cannot open '%.300s' for writing: %s", path, strerror(e));
    if (st != 0) return tg_cli_error(cmd, "--plot: cannot write '%.300s': %s", path, strerror(e));
    return TG_CLI_OK;
}

int tg_cli_check_ids(const char *cmd, const char *what, const int64_t *ids, int64_t n, int64_t vocab)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= vocab)
            return tg_cli_error(cmd, "%s: id %lld is outside the model's vocabulary (--vocab %lld)", what,
                                (long long)ids[i], (long long)vocab);
    return TG_CLI_OK;
}

int tg_cli_model_identity(const tg_decoder_config *c, uint64_t seed, tg_checkpoint_value *v)
{
    const tg_checkpoint_value id[TG_CLI_MODEL_NIDENTITY] = {
        {.name = "--vocab", .i = c->vocab_size},
        {.name = "--context", .i = c->context_length},
        {.name = "--emb", .i = c->emb_dim},
        {.name = "--heads", .i = c->n_heads},
        {.name = "--layers", .i = c->n_layers},
        {.name = "--qkv-bias", .i = c->qkv_bias},
        {.name = "--seed", .i = (int64_t)seed},
        {.name = "--dropout", .is_float = true, .f = c->drop_rate},
        {.name = "--config (the model's family)", .i = (int64_t)c->family},
        {.name = "--hidden", .i = c->hidden_dim},
        {.name = "--head-dim", .i = c->head_dim},
        {.name = "--kv-groups", .i = c->n_kv_groups},
        {.name = "--qk-norm", .i = c->qk_norm},
        {.name = "the tied head", .i = c->tie_head},
        {.name = "--rope-base", .is_float = true, .f = c->rope_base},
        {.name = "the RoPE frequency smoothing", .is_float = true, .f = c->rope_freq.factor},
        {.name = "the norms' eps", .is_float = true, .f = c->norm_eps},
        {.name = "--norm", .i = (int64_t)c->norm},
        {.name = "--mlp", .i = (int64_t)c->mlp},
        {.name = "--sliding-window", .i = c->sliding_window},
        {.name = "--layer-types", .i = (int64_t)layer_types_hash(c)},
        {.name = "--rope-local-base", .is_float = true, .f = c->rope_local_base},
        {.name = "--query-pre-attn-scalar", .is_float = true, .f = c->query_pre_attn_scalar},
        {.name = "the norms' weight offset", .is_float = true, .f = c->norm_offset},
        {.name = "the norms after each sublayer", .i = c->post_norms},
        {.name = "the embeddings' scale", .i = c->emb_scale},
    };
    memcpy(v, id, sizeof id);
    return TG_CLI_MODEL_NIDENTITY;
}
