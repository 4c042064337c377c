/* The MODEL options shared by summary, generate, pretrain and bench --model
 * gpt: a preset and per-field overrides (README.md, "The command line"). */
#include "cli.h"

#include <string.h>

void tg_cli_model_defaults(tg_cli_model *m, int64_t context)
{
    *m = (tg_cli_model){.config = "gpt2-small", .seed = 123, .context = context};
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
    };
    memcpy(opts, o, sizeof o);
    return TG_CLI_MODEL_NOPTS;
}

int tg_cli_model_config(const tg_cli_model *m, tg_gpt_config *cfg, char *err, size_t errlen)
{
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
    return tg_gpt_new(tp, cfg);
}
