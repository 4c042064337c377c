/* tapegrad export: a model trained or fine-tuned here written as a Hugging
 * Face folder or a GGUF file (docs/export.md; include/tapegrad/export.h). */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *export_help =
    "usage: tapegrad export [MODEL] [--from DIR] [--load FILE] [--lora-rank R --lora-alpha A]\n"
    "                       (--hf DIR [--dtype f32|f16|bf16] [--merge | --adapter]\n"
    "                        [--max-shard-size SIZE] | --gguf FILE [--type f32|f16|bf16|q8_0])\n"
    "                       [--tokenizer FILE] [--name NAME] [--force]\n"
    "\n"
    "Writes the model for the tools models are served with: a Hugging Face\n"
    "folder (transformers, PEFT) or a GGUF file (llama.cpp, Ollama). The model is\n"
    "MODEL's configuration (or --from's config.json) with the weights of --load\n"
    "(or --from's).\n"
    "\n"
    "  --from DIR          a Hugging Face folder: its config.json is the model's,\n"
    "                      its weights the starting point, its tokenizer.json the\n"
    "                      tokenizer (a model fine-tuned with finetune --hf DIR)\n"
    "  --load FILE         the weights: a state_dict (--save) or a trainer\n"
    "                      checkpoint (--checkpoint)\n"
    "  --lora-rank R       the weights have LoRA adapters (finetune --lora-rank R\n"
    "  --lora-alpha A      --lora-alpha A; alpha defaults to R): every Linear is\n"
    "                      wrapped before --load\n"
    "  --hf DIR            write a Hugging Face folder: config.json, model.safetensors\n"
    "                      (or shards and model.safetensors.index.json),\n"
    "                      generation_config.json, tokenizer.json, tokenizer_config.json\n"
    "  --dtype T           (--hf) the weights' dtype: f32 (default), f16, bf16\n"
    "  --merge             (--hf, with LoRA; the default) W + (alpha / rank) (A B)^T\n"
    "  --adapter           (--hf, with LoRA) PEFT's adapter_config.json and\n"
    "                      adapter_model.safetensors instead of the model\n"
    "  --max-shard-size S  (--hf) tensor bytes per file: 5GB (default), 500MB, 2GiB,\n"
    "                      or a number of bytes\n"
    "  --gguf FILE         write a GGUF version 3 file (LoRA merged)\n"
    "  --type T            (--gguf) f32 (default), f16, bf16, q8_0\n"
    TG_CLI_TOKENIZER_HELP
    "  --name NAME         the model's name in the files (default the family's)\n"
    "  --force             replace a folder that holds other files\n";

typedef struct {
    const char *from, *load, *hf, *gguf, *dtype, *type, *shard, *tokenizer, *name;
    int64_t lora_rank;
    double lora_alpha;
    bool lora_rank_seen, lora_alpha_seen, merge, adapter, force;
} export_args;

/* "5GB", "500MB", "2GiB", "1000": bytes (SI and binary suffixes, as
 * save_pretrained's max_shard_size); -1 when it is none of these. */
static int64_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0) || isspace((unsigned char)*s)) return -1;
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
                 {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].suffix) == 0) {
            double b = v * units[i].scale;
            return b >= 1 && b < 9e18 ? (int64_t)b : -1;
        }
    return -1;
}

int tg_cmd_export(int argc, char **argv)
{
    const char *cmd = "export";
    export_args a = {0};
    const tg_opt own[] = {
        {.name = "--from", .type = TG_OPT_STRING, .dest = &a.from},
        {.name = "--load", .type = TG_OPT_STRING, .dest = &a.load},
        {.name = "--lora-rank", .type = TG_OPT_INT, .dest = &a.lora_rank, .imin = 1, .imax = 65536,
         .seen = &a.lora_rank_seen},
        {.name = "--lora-alpha", .type = TG_OPT_DOUBLE, .dest = &a.lora_alpha, .dmin = -1e6, .dmax = 1e6,
         .seen = &a.lora_alpha_seen},
        {.name = "--hf", .type = TG_OPT_STRING, .dest = &a.hf},
        {.name = "--dtype", .type = TG_OPT_STRING, .dest = &a.dtype},
        {.name = "--merge", .type = TG_OPT_FLAG, .dest = &a.merge},
        {.name = "--adapter", .type = TG_OPT_FLAG, .dest = &a.adapter},
        {.name = "--max-shard-size", .type = TG_OPT_STRING, .dest = &a.shard},
        {.name = "--gguf", .type = TG_OPT_STRING, .dest = &a.gguf},
        {.name = "--type", .type = TG_OPT_STRING, .dest = &a.type},
        TG_CLI_TOKENIZER_OPT(a.tokenizer),
        {.name = "--name", .type = TG_OPT_STRING, .dest = &a.name},
        {.name = "--force", .type = TG_OPT_FLAG, .dest = &a.force},
    };
    tg_cli_model m;
    tg_decoder_config cfg;
    tg_cli_model_defaults(&m, 0);
    m.hf = &a.from;
    m.hf_opt = "--from";
    int rc;
    tg_cli_command c = {.name = cmd, .help = export_help, .opts = own, .nopts = TG_CLI_NOPTS(own),
                        .help_more = {TG_CLI_MODEL_HELP}};
    if (!tg_cli_model_parse(&c, argc, argv, &m, &cfg, &rc)) return rc;
    if (a.from && !tg_cli_is_dir(a.from)) return tg_cli_error(cmd, "--from: %s is not a folder", a.from);
    if (!a.hf == !a.gguf) return tg_cli_error(cmd, "give one of --hf DIR and --gguf FILE");
    if (a.lora_alpha_seen && !a.lora_rank_seen) return tg_cli_error(cmd, "--lora-alpha needs --lora-rank");
    if (a.lora_rank_seen && !a.lora_alpha_seen) a.lora_alpha = (double)a.lora_rank;
    if (a.merge && a.adapter) return tg_cli_error(cmd, "--merge and --adapter are exclusive");
    if ((a.merge || a.adapter) && !a.lora_rank_seen)
        return tg_cli_error(cmd, "%s needs a model with LoRA adapters (--lora-rank)", a.merge ? "--merge" : "--adapter");
    if (a.lora_rank_seen && !a.load) return tg_cli_error(cmd, "--lora-rank needs --load (the trained adapters)");
    tg_export_options opt = {.name = a.name, .force = a.force, .adapter = a.adapter};
    if (a.hf) {
        if (a.type) return tg_cli_error(cmd, "--type is --gguf's (--hf takes --dtype)");
        if (a.dtype && (tg_export_type_parse(a.dtype, &opt.type) != TG_OK || opt.type == TG_EXPORT_Q8_0))
            return tg_cli_error(cmd, "--dtype: '%.40s' is not one of f32, f16, bf16", a.dtype);
        if (a.shard && (opt.max_shard_size = parse_size(a.shard)) < 0)
            return tg_cli_error(cmd, "--max-shard-size: '%.40s' is not a size (5GB, 500MB, 2GiB or bytes)", a.shard);
    } else {
        if (a.dtype) return tg_cli_error(cmd, "--dtype is --hf's (--gguf takes --type)");
        if (a.shard) return tg_cli_error(cmd, "--max-shard-size is --hf's");
        if (a.adapter) return tg_cli_error(cmd, "--adapter is --hf's (a GGUF file holds the merged model)");
        if (a.type && tg_export_type_parse(a.type, &opt.type) != TG_OK)
            return tg_cli_error(cmd, "--type: '%.40s' is not one of f32, f16, bf16, q8_0", a.type);
    }
    if (tg_cli_check_only) return TG_CLI_OK;
    /* the tokenizer: --tokenizer, else --from's tokenizer.json, else the family's own */
    char tok_path[4096];
    if (!(opt.tokenizer = tg_cli_model_tokenizer_path(a.tokenizer, a.from, &cfg, tok_path, sizeof tok_path)))
        return tg_cli_lib_error(cmd, a.tokenizer ? "--tokenizer" : NULL);

    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_cli_error(cmd, "out of memory");
    tg_module *model = tg_cli_model_build(tp, &m, &cfg);
    rc = TG_CLI_OK;
    if (!model) rc = tg_cli_lib_error(cmd, NULL);
    else if (a.lora_rank_seen && tg_lora_replace_linear(tp, model, a.lora_rank, a.lora_alpha) != TG_OK)
        rc = tg_cli_lib_error(cmd, "--lora-rank");
    else if (a.load && tg_checkpoint_load_model(model, a.load) != TG_OK)
        rc = tg_cli_lib_error(cmd, "--load");
    else if (a.lora_rank_seen && !a.adapter && tg_lora_merge(model) != TG_OK)
        rc = tg_cli_lib_error(cmd, "--merge");
    if (rc == TG_CLI_OK) {
        int st = a.hf ? tg_export_hf(model, a.hf, &opt) : tg_export_gguf(model, a.gguf, &opt);
        if (st != TG_OK) rc = tg_cli_lib_error(cmd, a.hf ? "--hf" : "--gguf");
        else
            fprintf(stderr, "tapegrad export: wrote %s (%s%s)\n", a.hf ? a.hf : a.gguf,
                    a.adapter ? "PEFT adapter, " : "", tg_export_type_name(opt.type));
    }
    tg_tape_free(tp);
    return rc;
}
