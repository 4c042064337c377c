/* The MODEL options shared by summary, generate, pretrain and bench --model
 * gpt: a preset and per-field overrides (README.md, "The command line"). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#define MODEL_NOPTS 24

void tg_cli_model_defaults(tg_cli_model *m, int64_t context)
{
    *m = (tg_cli_model){.config = "gpt2-small", .seed = 123, .context = context, .precision = "exact"};
}

/* The MODEL option rows into opts; returns their count. */
static int model_opts(tg_cli_model *m, tg_opt *opts)
{
    const tg_opt o[MODEL_NOPTS] = {
        {.name = "--config", .type = TG_OPT_STRING, .dest = &m->config, .seen = &m->config_seen},
        {.name = "--vocab", .type = TG_OPT_INT, .dest = &m->vocab, .imin = 1, .imax = INT32_MAX},
        {.name = "--context", .type = TG_OPT_INT, .dest = &m->context, .imin = 1, .imax = 1 << 24},
        {.name = "--emb", .type = TG_OPT_INT, .dest = &m->emb, .imin = 1, .imax = INT32_MAX},
        {.name = "--heads", .type = TG_OPT_INT, .dest = &m->heads, .imin = 1, .imax = INT32_MAX},
        {.name = "--layers", .type = TG_OPT_INT, .dest = &m->layers, .imin = 1, .imax = 100000},
        {.name = "--dropout", .type = TG_OPT_DOUBLE, .dest = &m->dropout, .dmin = 0.0, .dmax = 1.0, .dmax_open = true,
         .seen = &m->dropout_seen},
        {.name = "--qkv-bias", .type = TG_OPT_FLAG, .dest = &m->qkv_bias},
        {.name = "--hidden", .type = TG_OPT_INT, .dest = &m->hidden, .imin = 1, .imax = INT32_MAX},
        {.name = "--head-dim", .type = TG_OPT_INT, .dest = &m->head_dim, .imin = 1, .imax = 65536},
        {.name = "--kv-groups", .type = TG_OPT_INT, .dest = &m->kv_groups, .imin = 1, .imax = 65536},
        {.name = "--rope-base", .type = TG_OPT_DOUBLE, .dest = &m->rope_base, .dmin = 1e-300, .dmax = 1e300,
         .seen = &m->rope_base_seen},
        {.name = "--qk-norm", .type = TG_OPT_FLAG, .dest = &m->qk_norm},
        {.name = "--no-qk-norm", .type = TG_OPT_FLAG, .dest = &m->no_qk_norm},
        {.name = "--norm", .type = TG_OPT_STRING, .dest = &m->norm},
        {.name = "--mlp", .type = TG_OPT_STRING, .dest = &m->mlp},
        {.name = "--sliding-window", .type = TG_OPT_INT, .dest = &m->sliding_window, .imin = 1, .imax = 1 << 24,
         .seen = &m->sliding_window_seen},
        {.name = "--layer-types", .type = TG_OPT_STRING, .dest = &m->layer_types},
        {.name = "--rope-local-base", .type = TG_OPT_DOUBLE, .dest = &m->rope_local_base, .dmin = 1e-300, .dmax = 1e300},
        {.name = "--query-pre-attn-scalar", .type = TG_OPT_DOUBLE, .dest = &m->query_pre_attn_scalar, .dmin = 1e-300,
         .dmax = 1e300},
        {.name = "--seed", .type = TG_OPT_U64, .dest = &m->seed},
        {.name = "--precision", .type = TG_OPT_STRING, .dest = &m->precision},
        {.name = "--recompute", .type = TG_OPT_FLAG, .dest = &m->recompute},
        {.name = "--weights", .type = TG_OPT_STRING, .dest = &m->weights},
    };
    memcpy(opts, o, sizeof o);
    return MODEL_NOPTS;
}

/* --weights into cfg: as named, else bf16 for a folder storing BF16 when
 * the command follows it, else float32. Compact weights are frozen: a
 * command that trains every weight refuses them. A model with learned
 * positions is built in float32 and converted once its weights are in
 * (m->convert_to). */
static int model_weights(const char *cmd, tg_cli_model *m, const char *hf, tg_decoder_config *cfg)
{
    cfg->weights = TG_F32;
    m->convert_to = TG_F32;
    bool bf16 = m->weights && strcmp(m->weights, "bf16") == 0, q8 = m->weights && strcmp(m->weights, "q8") == 0;
    if (m->weights && !bf16 && !q8 && strcmp(m->weights, "f32") != 0)
        return tg_cli_error(cmd, "--weights: '%.40s' is not one of bf16, q8, f32", m->weights);
    if ((bf16 || q8) && !(m->frozen && *m->frozen))
        return tg_cli_error(cmd, "--weights %s: %s %s (%s weights are a frozen base: generate, or training "
                                 "with --lora-rank)", m->weights, cmd,
                            m->frozen ? "without --lora-rank trains every weight, in float32" : "takes float32 weights",
                            m->weights);
    if (m->weights) cfg->weights = bf16 ? TG_BF16 : q8 ? TG_Q8 : TG_F32;
    else if (hf && m->follow_hf && *m->follow_hf && tg_decoder_hf_weights(hf, &cfg->weights) != TG_OK)
        return tg_cli_error(cmd, "%s: %s", m->hf_opt ? m->hf_opt : "--hf", tg_last_error());
    if (cfg->weights != TG_F32 && (cfg->family == TG_GPT_FAMILY_GPT2 || cfg->positions == TG_POSITIONS_LEARNED)) {
        m->convert_to = cfg->weights;
        cfg->weights = TG_F32;
    }
    return TG_CLI_OK;
}

/* name's index in the NULL-ended list, or -1 */
static int one_of(const char *name, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(name, list[i]) == 0) return i;
    return -1;
}

/* --norm, --mlp, --sliding-window and --layer-types into cfg (the preset's
 * features changed, as any family's). A window without --layer-types on a
 * preset that has no sliding layers makes every layer slide. */
static int model_features(const char *cmd, const tg_cli_model *m, tg_decoder_config *cfg)
{
    static const char *const norms[] = {"layer", "rms", NULL}, *const mlps[] = {"gelu", "swiglu", "geglu", NULL};
    int kn = m->norm ? one_of(m->norm, norms) : -1, km = m->mlp ? one_of(m->mlp, mlps) : -1;
    if (m->norm && kn < 0) return tg_cli_error(cmd, "--norm: '%.40s' is not one of layer, rms", m->norm);
    if (m->norm) cfg->norm = kn == 0 ? TG_NORM_LAYER : TG_NORM_RMS;
    if (m->mlp && km < 0) return tg_cli_error(cmd, "--mlp: '%.40s' is not one of gelu, swiglu, geglu", m->mlp);
    if (m->mlp) cfg->mlp = km == 0 ? TG_MLP_GELU : km == 1 ? TG_MLP_SWIGLU : TG_MLP_GEGLU;
    if (m->sliding_window_seen) {
        bool any = false;
        for (int i = 0; i < TG_DECODER_MAX_LAYER_TYPES; i++) any |= cfg->layer_types[i] == TG_LAYER_SLIDING;
        if (!any && !m->layer_types) tg_decoder_config_layer_pattern(cfg, 0);
        cfg->sliding_window = m->sliding_window;
    }
    if (!m->layer_types) return TG_CLI_OK;
    const char *p = m->layer_types;
    int64_t n = 0;
    while (*p) {
        size_t len = strcspn(p, ",");
        bool sliding = len == 7 && strncmp(p, "sliding", 7) == 0, full = len == 4 && strncmp(p, "full", 4) == 0;
        if (!sliding && !full)
            return tg_cli_error(cmd, "--layer-types: entry %lld '%.*s' is not sliding or full", (long long)n + 1,
                                (int)(len > 40 ? 40 : len), p);
        if (n >= cfg->n_layers)
            return tg_cli_error(cmd, "--layer-types: more entries than the model's %lld layers", (long long)cfg->n_layers);
        if (sliding && n >= TG_DECODER_MAX_LAYER_TYPES)
            return tg_cli_error(cmd, "--layer-types: layer %lld slides; only the first %d layers can", (long long)n + 1,
                                TG_DECODER_MAX_LAYER_TYPES);
        if (n < TG_DECODER_MAX_LAYER_TYPES) cfg->layer_types[n] = sliding ? TG_LAYER_SLIDING : TG_LAYER_FULL;
        n++;
        p += len;
        if (*p == ',' && !*++p) return tg_cli_error(cmd, "--layer-types: the list ends with a comma");
    }
    if (n != cfg->n_layers)
        return tg_cli_error(cmd, "--layer-types: %lld entries for %lld layers (one sliding or full per layer)",
                            (long long)n, (long long)cfg->n_layers);
    for (int64_t i = n; i < TG_DECODER_MAX_LAYER_TYPES; i++) cfg->layer_types[i] = TG_LAYER_FULL;
    return TG_CLI_OK;
}

/* The configuration the options ask for, checked: TG_CLI_OK, or the error
 * line printed for cmd. */
static int model_config(const char *cmd, tg_cli_model *m, tg_decoder_config *cfg)
{
    if (tg_numerics_parse(m->precision, &m->numerics) != TG_OK)
        return tg_cli_error(cmd, "--precision: %s", tg_last_error());
    const char *hf = m->hf && tg_cli_is_dir(*m->hf) ? *m->hf : NULL;
    int st;
    if (hf) { /* a Hugging Face folder: its config.json is the model's; only --context may change it */
        const char *fixed = m->config_seen ? "--config" : m->vocab ? "--vocab" : m->emb ? "--emb" : m->heads ? "--heads" : m->layers ? "--layers"
                            : m->hidden ? "--hidden" : m->head_dim ? "--head-dim" : m->kv_groups ? "--kv-groups"
                            : m->rope_base_seen ? "--rope-base" : m->qk_norm ? "--qk-norm" : m->no_qk_norm ? "--no-qk-norm"
                            : m->dropout_seen && m->dropout != 0 ? "--dropout" : m->qkv_bias ? "--qkv-bias"
                            : m->norm ? "--norm" : m->mlp ? "--mlp" : m->sliding_window_seen ? "--sliding-window"
                            : m->layer_types ? "--layer-types" : m->rope_local_base ? "--rope-local-base"
                            : m->query_pre_attn_scalar ? "--query-pre-attn-scalar" : NULL;
        const char *opt = m->hf_opt ? m->hf_opt : "--hf";
        if (fixed) return tg_cli_error(cmd, "%s: the model's configuration comes from %s/config.json", fixed, hf);
        if (tg_decoder_config_from_hf(hf, cfg) != TG_OK) return tg_cli_error(cmd, "%s: %s", opt, tg_last_error());
        if (m->context) cfg->context_length = m->context;
        if ((st = model_weights(cmd, m, hf, cfg)) != TG_CLI_OK) return st;
        if (tg_decoder_config_check(cfg) != TG_OK) return tg_cli_error(cmd, "%s: %s", opt, tg_last_error());
        return TG_CLI_OK;
    }
    if (tg_decoder_config_preset(m->config, cfg) != TG_OK) return tg_cli_error(cmd, "--config: %s", tg_last_error());
    if (m->vocab) cfg->vocab_size = m->vocab;
    if (m->context) cfg->context_length = m->context;
    if (m->emb) cfg->emb_dim = m->emb;
    if (m->heads) cfg->n_heads = m->heads;
    if (m->layers) cfg->n_layers = m->layers;
    if (m->dropout_seen) cfg->drop_rate = m->dropout;
    if (m->qkv_bias) cfg->qkv_bias = true;
    if (m->qk_norm && m->no_qk_norm) return tg_cli_error(cmd, "--qk-norm and --no-qk-norm are exclusive");
    if (m->hidden) cfg->hidden_dim = m->hidden;
    if (m->head_dim) cfg->head_dim = m->head_dim;
    if (m->kv_groups) cfg->n_kv_groups = m->kv_groups;
    if (m->rope_base_seen) cfg->rope_base = m->rope_base;
    if (m->rope_local_base) cfg->rope_local_base = m->rope_local_base;
    if (m->query_pre_attn_scalar) cfg->query_pre_attn_scalar = m->query_pre_attn_scalar;
    if (m->qk_norm || m->no_qk_norm) cfg->qk_norm = m->qk_norm;
    if ((st = model_features(cmd, m, cfg)) != TG_CLI_OK) return st;
    if ((st = model_weights(cmd, m, NULL, cfg)) != TG_CLI_OK) return st;
    if (tg_decoder_config_check(cfg) != TG_OK) return tg_cli_error(cmd, "%s", tg_last_error());
    return TG_CLI_OK;
}

tg_module *tg_cli_model_build(tg_tape *tp, const tg_cli_model *m, const tg_decoder_config *cfg)
{
    tg_manual_seed(m->seed); /* torch.manual_seed(seed); model = GPTModel(cfg) */
    tg_module *gpt = tg_decoder_new(tp, cfg);
    tg_cli_note_bf16(m->numerics); /* the policy goes on the step's tape, not the model */
    if (gpt && tg_gpt_set_recompute(gpt, m->recompute) != TG_OK) return NULL;
    const char *hf = m->hf && tg_cli_is_dir(*m->hf) ? *m->hf : NULL;
    if (gpt && hf && tg_decoder_load_hf(gpt, hf) != TG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s: %s", m->hf_opt ? m->hf_opt : "--hf", tg_last_error());
        return tg_error("%s", msg);
    }
    /* learned positions: the float32 model's frozen matrices converted */
    if (gpt && m->convert_to != TG_F32 &&
        (tg_module_requires_grad_(gpt, false) != TG_OK || tg_module_to_dtype(tp, gpt, m->convert_to) != TG_OK))
        return NULL;
    return gpt;
}

bool tg_cli_model_parse(const tg_cli_command *c, int argc, char **argv, tg_cli_model *m, tg_decoder_config *cfg,
                        int *status)
{
    tg_opt opts[64];
    if (c->nopts < 0 || c->nopts + MODEL_NOPTS > 64) {
        *status = tg_cli_error(c->name, "internal error: too many options");
        return false;
    }
    if (c->nopts) memcpy(opts, c->opts, sizeof *opts * (size_t)c->nopts);
    int n = c->nopts + model_opts(m, opts + c->nopts);
    tg_cli_command all = {.name = c->name, .help = c->help, .opts = opts, .nopts = n,
                          .help_more = {c->help_more[0], c->help_more[1], c->help_more[2]}};
    if (!tg_cli_parse(&all, argc, argv, status)) return false;
    *status = model_config(c->name, m, cfg);
    return *status == TG_CLI_OK;
}

void tg_cli_gpt_set_layers(tg_module *gpt, bool composed)
{
    /* the graph's shape only: under --precision exact both give PyTorch's
     * bits (src/autograd/layers.c) */
    tg_module_set_fused(gpt, !composed);
}

bool tg_cli_hf_gpt2_file(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *v = !argv[i] ? NULL : strcmp(argv[i], "--hf") == 0 ? (i + 1 < argc ? argv[i + 1] : NULL)
                                   : strncmp(argv[i], "--hf=", 5) == 0 ? argv[i] + 5
                                                                       : NULL;
        if (v) return !tg_cli_is_dir(v);
        if (argv[i] && strcmp(argv[i], "--hf") == 0) return true; /* its missing value is the parser's error */
    }
    return false;
}
