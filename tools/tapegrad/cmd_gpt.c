/* tapegrad summary and tapegrad generate: the book's GPTModel (chapter 4),
 * printed as PyTorch prints it with the book's three figures, and chapter 5's
 * generate() from a prompt (README.md, "GPT-2"). */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *summary_help =
    "usage: tapegrad summary [MODEL]\n"
    "\n"
    "Builds the book's GPTModel and prints it as PyTorch's print(model) does,\n"
    "then its parameter count, the count with out_head tied to tok_emb, and its\n"
    "float32 size.\n"
    "\n" TG_CLI_MODEL_HELP;

static const char *generate_help =
    "usage: tapegrad generate [MODEL] [options]\n"
    "\n"
    "Generates text with the book's GPTModel (chapter 5's generate()): the model\n"
    "is built after manual_seed(--seed), optionally loaded, put in eval mode;\n"
    "the generator is reseeded with --sample-seed right before generating.\n"
    "Prints the prompt and its continuation, and the speed on stderr.\n"
    "\n"
    "  --load FILE         a state_dict or checkpoint (over a --hf folder's weights)\n"
    "  --hf PATH           a Hugging Face GPT-2 model.safetensors (sets --qkv-bias),\n"
    "                      or a folder (GPT-2, Qwen3, Llama 3, Gemma 3): its\n"
    "                      config.json builds the model, its safetensors (F32, F16,\n"
    "                      BF16; shards) load, its tokenizer.json is the tokenizer\n"
    "  --lora-rank R       the model has LoRA adapters (finetune --lora-rank R\n"
    "  --lora-alpha A      --lora-alpha A --save): every Linear wrapped before --load\n"
    "  --prompt STR        the start text (\"Hello, I am\")\n"
    TG_CLI_TOKENIZER_HELP
    "  --chat              the prompt is one user message in the tokenizer's chat\n"
    "                      format, with the assistant's header after it; --eos\n"
    "                      defaults to the end of a turn (<|im_end|>, <|eot_id|>,\n"
    "                      <end_of_turn>)\n"
    "                      and the reply alone is printed (--json: its \"text\")\n"
    "  --think             (Qwen3, --chat) leave the thinking open\n"
    "  --max-new-tokens N  ids to generate (10)\n"
    "  --temperature T     0 = greedy (default); > 0 samples softmax(logits / T)\n"
    "  --top-k K           keep the K largest logits (0 = all)\n"
    "  --eos ID            stop when this id comes next\n"
    "  --sample-seed S     manual_seed before generating (default: --seed)\n"
    "  --no-kv-cache       recompute the window for every new id\n"
    "  --json              one JSON object: {\"input_ids\", \"ids\", \"text\", \"tokens_per_s\"}\n"
    "                      (text is null if the ids end inside a UTF-8 character)\n"
    "\n" TG_CLI_MODEL_HELP;

/* 163009536 -> "163,009,536" */
static void with_commas(char *buf, size_t size, int64_t v)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%lld", (long long)v), o = 0;
    for (int i = 0; i < n && (size_t)o + 2 < size; i++) {
        if (i > 0 && (n - i) % 3 == 0 && digits[i - 1] != '-') buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

/* The book's Qwen3 and Llama 3 notebooks' figures: the parameters, those
 * without tok_emb (the head tied to it), and model_memory_size(): the
 * parameters, their gradients and the buffers (RoPE's cos and sin tables of
 * the whole context) at 4 and 2 bytes per element, in GB of 1024^3 bytes. */
static int print_rope_summary(tg_module *model)
{
    tg_decoder_config c;
    if (tg_decoder_get_config(model, &c) != TG_OK) return tg_cli_lib_error("summary", NULL);
    int64_t total = tg_module_num_parameters(model);
    int64_t emb = tg_numel(tg_module_get_parameter(model, "tok_emb.weight"));
    int64_t hd = c.head_dim ? c.head_dim : c.emb_dim / c.n_heads;
    /* the book's calc_model_memory_size: parameters, their gradients and the
     * RoPE buffers (cos and sin; Gemma 3's local and global pairs) */
    double tables = c.sliding_window > 0 ? 4.0 : 2.0;
    double elems = 2.0 * (double)total + tables * (double)c.context_length * (double)hd;
    char a[40], b[40];
    with_commas(a, sizeof a, total);
    with_commas(b, sizeof b, total - emb);
    printf("Total number of parameters: %s\n\nTotal number of unique parameters: %s\n", a, b);
    printf("float32 (PyTorch default): %.2f GB\nbfloat16: %.2f GB\n", elems * 4 / (1024.0 * 1024.0 * 1024.0),
           elems * 2 / (1024.0 * 1024.0 * 1024.0));
    return tg_cli_flush_stdout() ? TG_CLI_OK : tg_cli_stdout_error(0);
}

int tg_cmd_summary(int argc, char **argv)
{
    tg_cli_model m;
    tg_decoder_config cfg;
    tg_cli_model_defaults(&m, 0);
    static const bool any = true; /* a summary of any storage */
    m.frozen = &any;
    int rc;
    if (!tg_cli_model_parse(&(tg_cli_command){.name = "summary", .help = summary_help}, argc, argv, &m, &cfg, &rc))
        return rc;
    if (tg_cli_check_only) return TG_CLI_OK;
    tg_tape *tp = tg_tape_new();
    tg_module *gpt = tp ? tg_cli_model_build(tp, &m, &cfg) : NULL;
    rc = TG_CLI_OK;
    if (!gpt) {
        rc = tg_cli_lib_error("summary", NULL);
    } else if (tg_module_print(stdout, gpt) != TG_OK) {
        rc = tg_cli_print_error("summary");
    } else if (tg_decoder_config_resolve(&cfg, &cfg) == TG_OK && cfg.positions == TG_POSITIONS_ROPE) {
        rc = print_rope_summary(gpt);
    } else {
        int64_t total = tg_module_num_parameters(gpt);
        int64_t head = tg_numel(tg_module_get_parameter(gpt, "out_head.weight"));
        char a[40], b[40];
        with_commas(a, sizeof a, total);
        with_commas(b, sizeof b, total - head);
        printf("Total number of parameters: %s\n", a);
        printf("Number of trainable parameters considering weight tying: %s\n", b);
        printf("Total size of the model: %.2f MB\n", (double)total * 4 / (1024.0 * 1024.0));
    }
    tg_tape_free(tp);
    return rc;
}

typedef struct {
    const char *load, *hf, *prompt, *tokenizer;
    int64_t max_new, top_k, eos, lora_rank;
    double temperature, lora_alpha;
    bool lora_rank_seen, lora_alpha_seen;
    uint64_t sample_seed;
    bool sample_seed_seen, no_cache, json, chat, think;
} gen_args;

static int print_json(const int64_t *ids, int64_t n_prompt, int64_t n, const char *text, size_t text_len, double tps)
{
    json_t *o = json_object();
    json_object_set_new(o, "input_ids", tg_cli_json_ids(ids, (size_t)n_prompt));
    json_object_set_new(o, "ids", tg_cli_json_ids(ids + n_prompt, (size_t)(n - n_prompt)));
    json_object_set_new(o, "text", tg_cli_json_text(text, text_len));
    json_object_set_new(o, "tokens_per_s", json_real(tps));
    return tg_cli_print_json("generate", o, JSON_COMPACT | JSON_ENSURE_ASCII);
}

/* After a failed --load: whether the file holds LoRA adapters (a key ending
 * in ".lora.A", its second dimension the rank) against whether --lora-rank
 * asked for them, as a hint for the error line; "" when they agree or the
 * file does not read. */
static void lora_hint(const char *path, bool asked, int64_t rank, char *buf, size_t size)
{
    buf[0] = '\0';
    tg_tape *tp = tg_tape_new();
    tg_safetensors st;
    if (!tp || tg_safetensors_load(tp, path, &st) != TG_OK) {
        tg_tape_free(tp);
        return;
    }
    int64_t found = -1;
    for (int i = 0; i < st.n && found < 0; i++) {
        size_t len = strlen(st.names[i]);
        if (len >= 7 && strcmp(st.names[i] + len - 7, ".lora.A") == 0 && st.tensors[i]->ndim == 2)
            found = st.tensors[i]->shape[1];
    }
    tg_tape_free(tp);
    if (found >= 0 && !asked)
        snprintf(buf, size, " (the file holds LoRA adapters of rank %lld: pass --lora-rank %lld and the "
                 "--lora-alpha it was trained with)", (long long)found, (long long)found);
    else if (found >= 0 && found != rank)
        snprintf(buf, size, " (the file's LoRA adapters have rank %lld, not --lora-rank %lld)", (long long)found,
                 (long long)rank);
    else if (found < 0 && asked)
        snprintf(buf, size, " (the file holds no LoRA adapters: leave out --lora-rank)");
}

static int run_generate(tg_tape *tp, tg_tokenizer *tok, const tg_cli_model *m, tg_decoder_config *cfg, const gen_args *a)
{
    const char *cmd = "generate";
    int64_t *prompt = NULL, *ids = NULL;
    size_t n_prompt = 0;
    char *text = NULL;
    size_t text_len = 0;
    int rc = TG_CLI_OK;
    int64_t eos = a->eos;
    if (a->chat) {
        tg_chat_message msg = {"user", a->prompt};
        tg_chat_options co = {.add_generation_prompt = true, .thinking = a->think};
        if (tg_tokenizer_encode_chat(tok, &msg, 1, &co, &prompt, &n_prompt) != TG_OK)
            return tg_cli_lib_error(cmd, "--prompt");
        if (eos < 0) eos = tg_tokenizer_chat_end_id(tok);
    } else if (tg_tokenizer_encode_add_special(tok, a->prompt, strlen(a->prompt), false, &prompt, &n_prompt) != TG_OK) {
        /* the tokenizer's own tokens around the text (Gemma 3's <bos>), as
         * Hugging Face's tokenizer(prompt) adds them */
        return tg_cli_lib_error(cmd, "--prompt");
    }
    if (n_prompt == 0) {
        free(prompt);
        return tg_cli_error(cmd, "--prompt: the prompt is empty");
    }
    if (tg_cli_check_ids(cmd, "--prompt", prompt, (int64_t)n_prompt, cfg->vocab_size) != TG_CLI_OK) {
        free(prompt);
        return TG_CLI_USAGE;
    }
    if (eos >= cfg->vocab_size) eos = -1; /* a chat's end id the model cannot produce */
    tg_module *gpt = tg_cli_model_build(tp, m, cfg);
    if (!gpt) rc = tg_cli_lib_error(cmd, NULL);
    else if (a->lora_rank_seen && tg_lora_replace_linear(tp, gpt, a->lora_rank, a->lora_alpha) != TG_OK)
        rc = tg_cli_lib_error(cmd, "--lora-rank");
    else if (a->load && tg_checkpoint_load_model(gpt, a->load) != TG_OK) {
        char err[512], hint[160];
        snprintf(err, sizeof err, "%s", tg_last_error());
        lora_hint(a->load, a->lora_rank_seen, a->lora_rank, hint, sizeof hint);
        rc = tg_cli_error(cmd, "--load: %s%s", err, hint);
    }
    else if (a->hf && !tg_cli_is_dir(a->hf) && tg_gpt_load_hf(gpt, a->hf) != TG_OK) rc = tg_cli_lib_error(cmd, "--hf");
    /* the weights' bf16 copies made with the model, not in the first id's
     * time (tokens_per_s times generation, as a load is not timed) */
    if (rc == TG_CLI_OK && tg_module_prepare_numerics(gpt, m->numerics) != TG_OK) rc = tg_cli_lib_error(cmd, NULL);
    ids = malloc(sizeof *ids * (n_prompt + (size_t)a->max_new));
    if (rc == TG_CLI_OK && !ids) rc = tg_cli_error(cmd, "out of memory");
    int64_t n = 0;
    double seconds = 0;
    if (rc == TG_CLI_OK) {
        tg_generate_options o = {.max_new_tokens = a->max_new, .temperature = a->temperature, .top_k = a->top_k,
                                 .eos_id = eos, .no_kv_cache = a->no_cache, .numerics = m->numerics};
        tg_manual_seed(a->sample_seed_seen ? a->sample_seed : m->seed); /* torch.manual_seed before generate() */
        double t0 = tg_cli_now();
        if (tg_gpt_generate(gpt, prompt, (int64_t)n_prompt, &o, ids, &n) != TG_OK) rc = tg_cli_lib_error(cmd, NULL);
        seconds = tg_cli_now() - t0;
    }
    /* a chat prints the reply alone: the new ids, up to the end of the turn */
    size_t from = a->chat ? n_prompt : 0;
    if (rc == TG_CLI_OK && tg_tokenizer_decode_skip(tok, ids + from, (size_t)n - from, &text, &text_len, NULL) != TG_OK)
        rc = tg_cli_lib_error(cmd, "decode");
    if (rc == TG_CLI_OK) {
        int64_t new_ids = n - (int64_t)n_prompt;
        double tps = seconds > 0 ? (double)new_ids / seconds : 0.0;
        if (a->json) {
            rc = print_json(ids, (int64_t)n_prompt, n, text, text_len, tps);
        } else {
            fwrite(text, 1, text_len, stdout);
            fputc('\n', stdout);
            if (!tg_cli_flush_stdout())
                rc = tg_cli_stdout_error(0);
            else
                fprintf(stderr, "%lld new tokens in %.3f s (%.1f tokens/s, KV cache %s)\n", (long long)new_ids,
                        seconds, tps, a->no_cache ? "off" : "on");
        }
    }
    free(text);
    free(ids);
    free(prompt);
    return rc;
}

int tg_cmd_generate(int argc, char **argv)
{
    const char *cmd = "generate";
    gen_args a = {.prompt = "Hello, I am", .max_new = 10, .eos = -1};
    const tg_opt own[] = {
        {.name = "--load", .type = TG_OPT_STRING, .dest = &a.load},
        {.name = "--hf", .type = TG_OPT_STRING, .dest = &a.hf},
        {.name = "--prompt", .type = TG_OPT_STRING, .dest = &a.prompt},
        TG_CLI_TOKENIZER_OPT(a.tokenizer),
        {.name = "--chat", .type = TG_OPT_FLAG, .dest = &a.chat},
        {.name = "--think", .type = TG_OPT_FLAG, .dest = &a.think},
        {.name = "--max-new-tokens", .type = TG_OPT_INT, .dest = &a.max_new, .imin = 0, .imax = 1000000},
        {.name = "--temperature", .type = TG_OPT_DOUBLE, .dest = &a.temperature, .dmin = 0.0, .dmax = 1e6},
        {.name = "--top-k", .type = TG_OPT_INT, .dest = &a.top_k, .imin = 0, .imax = INT32_MAX},
        {.name = "--eos", .type = TG_OPT_INT, .dest = &a.eos, .imin = 0, .imax = INT32_MAX},
        {.name = "--sample-seed", .type = TG_OPT_U64, .dest = &a.sample_seed, .seen = &a.sample_seed_seen},
        {.name = "--no-kv-cache", .type = TG_OPT_FLAG, .dest = &a.no_cache},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &a.json},
        {.name = "--lora-rank", .type = TG_OPT_INT, .dest = &a.lora_rank, .imin = 1, .imax = 65536,
         .seen = &a.lora_rank_seen},
        {.name = "--lora-alpha", .type = TG_OPT_DOUBLE, .dest = &a.lora_alpha, .dmin = -1e6, .dmax = 1e6,
         .seen = &a.lora_alpha_seen},
    };
    tg_cli_model m;
    tg_decoder_config cfg;
    tg_cli_model_defaults(&m, 0);
    /* GPT-2's released weights have q/k/v biases (the book's NEW_CONFIG); a
     * folder is a Qwen3 or Llama 3 model whose config.json builds it */
    m.qkv_bias = tg_cli_hf_gpt2_file(argc, argv);
    m.hf = &a.hf;
    static const bool follow = true; /* a BF16 folder generates from bf16 weights */
    m.follow_hf = &follow;
    m.frozen = &follow; /* generation trains nothing */
    int rc;
    tg_cli_command c = {.name = cmd, .help = generate_help, .opts = own, .nopts = TG_CLI_NOPTS(own)};
    if (!tg_cli_model_parse(&c, argc, argv, &m, &cfg, &rc)) return rc;
    if (a.load && a.hf && !tg_cli_is_dir(a.hf))
        return tg_cli_error(cmd, "--load and a --hf file are exclusive (a --hf folder gives the configuration, --load the weights)");
    if (a.lora_alpha_seen && !a.lora_rank_seen) return tg_cli_error(cmd, "--lora-alpha needs --lora-rank");
    if (a.lora_rank_seen && !a.lora_alpha_seen) a.lora_alpha = (double)a.lora_rank;
    if (a.top_k > cfg.vocab_size)
        return tg_cli_error(cmd, "--top-k %lld exceeds the vocabulary (%lld)", (long long)a.top_k,
                            (long long)cfg.vocab_size);
    if (a.eos >= cfg.vocab_size)
        return tg_cli_error(cmd, "--eos %lld is outside the vocabulary (%lld ids)", (long long)a.eos,
                            (long long)cfg.vocab_size);
    if (a.think && !a.chat) return tg_cli_error(cmd, "--think needs --chat");
    if (tg_cli_check_only) return TG_CLI_OK;

    tg_tokenizer *tok = tg_cli_model_tokenizer(a.tokenizer, a.hf, &cfg);
    if (!tok) return tg_cli_lib_error(cmd, a.tokenizer ? "--tokenizer" : NULL);
    if (a.chat && tg_tokenizer_chat_format(tok) == TG_CHAT_NONE)
        return tg_cli_error(cmd, "--chat: this tokenizer has no chat format (Qwen3's, Llama 3's and Gemma 3's have one; give --tokenizer)");
    tg_tape *tp = tg_tape_new();
    rc = tp ? run_generate(tp, tok, &m, &cfg, &a) : tg_cli_error(cmd, "out of memory");
    tg_tape_free(tp);
    return rc;
}
