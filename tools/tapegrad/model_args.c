/* The MODEL options shared by summary, generate, pretrain and bench --model
 * gpt: a preset and per-field overrides (README.md, "The command line"). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

void tg_cli_model_defaults(tg_cli_model *m, int64_t context)
{
    *m = (tg_cli_model){.config = "gpt2-small", .seed = 123, .context = context, .precision = "exact"};
}

int tg_cli_model_opts(tg_cli_model *m, tg_opt *opts)
{
    const tg_opt o[TG_CLI_MODEL_NOPTS] = {
        {"--config", TG_OPT_STRING, &m->config, 0, 0, 0, 0, false, NULL},
        {"--vocab", TG_OPT_INT, &m->vocab, 1, INT32_MAX, 0, 0, false, NULL},
        {"--context", TG_OPT_INT, &m->context, 1, 65536, 0, 0, false, NULL},
        {"--emb", TG_OPT_INT, &m->emb, 1, INT32_MAX, 0, 0, false, NULL},
        {"--heads", TG_OPT_INT, &m->heads, 1, INT32_MAX, 0, 0, false, NULL},
        {"--layers", TG_OPT_INT, &m->layers, 1, 100000, 0, 0, false, NULL},
        {"--dropout", TG_OPT_DOUBLE, &m->dropout, 0, 0, 0.0, 1.0, true, &m->dropout_seen},
        {"--qkv-bias", TG_OPT_FLAG, &m->qkv_bias, 0, 0, 0, 0, false, NULL},
        {"--seed", TG_OPT_U64, &m->seed, 0, 0, 0, 0, false, NULL},
        {"--precision", TG_OPT_STRING, &m->precision, 0, 0, 0, 0, false, NULL},
    };
    memcpy(opts, o, sizeof o);
    return TG_CLI_MODEL_NOPTS;
}

int tg_cli_model_config(tg_cli_model *m, tg_gpt_config *cfg, char *err, size_t errlen)
{
    if (tg_numerics_parse(m->precision, &m->numerics) != TG_OK) {
        snprintf(err, errlen, "--precision: '%.40s' is not one of exact, fast, bf16", m->precision);
        return -1;
    }
    if (tg_gpt_config_preset(m->config, cfg) != TG_OK) {
        snprintf(err, errlen, "--config: %s", tg_last_error());
        return -1;
    }
    if (m->vocab) cfg->vocab_size = m->vocab;
    if (m->context) cfg->context_length = m->context;
    if (m->emb) cfg->emb_dim = m->emb;
    if (m->heads) cfg->n_heads = m->heads;
    if (m->layers) cfg->n_layers = m->layers;
    if (m->dropout_seen) cfg->drop_rate = m->dropout;
    if (m->qkv_bias) cfg->qkv_bias = true;
    if (tg_gpt_config_check(cfg) != TG_OK) {
        snprintf(err, errlen, "%s", tg_last_error());
        return -1;
    }
    return 0;
}

tg_module *tg_cli_model_build(tg_tape *tp, const tg_cli_model *m, const tg_gpt_config *cfg)
{
    tg_manual_seed(m->seed); /* torch.manual_seed(seed); model = GPTModel(cfg) */
    tg_module *gpt = tg_gpt_new(tp, cfg);
    if (gpt && tg_module_set_numerics(gpt, m->numerics) != TG_OK) return NULL;
    return gpt;
}

/* Parses the command's own options followed by MODEL's. */
tg_args_status tg_cli_model_parse(const char *cmd, int argc, char **argv, const tg_opt *own, int nown, tg_cli_model *m,
                            tg_gpt_config *cfg, const char *help)
{
    tg_opt opts[64];
    if (nown < 0 || nown + TG_CLI_MODEL_NOPTS > 64) {
        tg_cli_error(cmd, "internal error: too many options");
        return TG_ARGS_ERROR;
    }
    if (nown) memcpy(opts, own, sizeof *own * (size_t)nown);
    int n = nown + tg_cli_model_opts(m, opts + nown);
    char err[512];
    tg_args_status st = tg_cli_parse_options(argc, argv, opts, n, err, sizeof err);
    if (st == TG_ARGS_HELP) {
        fputs(help, stdout);
        return st;
    }
    if (st == TG_ARGS_OK && tg_cli_model_config(m, cfg, err, sizeof err) != 0) st = TG_ARGS_ERROR;
    if (st != TG_ARGS_OK) tg_cli_error(cmd, "%s", err);
    return st;
}

void tg_cli_gpt_set_layers(tg_module *gpt, bool composed)
{
    /* the graph's shape only: under --precision exact both give PyTorch's
     * bits (src/autograd/layers.c) */
    tg_module_set_fused(gpt, !composed);
}
