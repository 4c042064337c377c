/* tapegrad finetune classify|instruct|dpo: the book's chapter 6 (a
 * classifier on GPTModel's last position, train_classifier_simple), chapter
 * 7 (an instruction follower, train_model_simple on custom_collate_fn
 * batches) and chapter 7's DPO notebook (preference tuning against a frozen
 * reference, train_model_dpo_simple), each with or without appendix E's
 * LoRA, printing the book's lines
 * (docs/fine-tuning.md). The command reads the data, builds the model and
 * names the task (its loss, its lines after each epoch and after training);
 * the library's trainer (include/tapegrad/train.h) trains, on one process
 * or, under mpirun, data parallel.
 *
 * Every random draw is PyTorch's, in the book's order (the model, the new
 * head, LoRA's A matrices, the loaders' seeds, dropout), so a seeded run
 * with --precision exact prints what the book's code prints under PyTorch
 * for the same data. */
#include "finetune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *classify_help =
    "usage: tapegrad finetune classify --train T.csv --val V.csv [--test X.csv] [MODEL] [options]\n"
    "\n"
    "The book's chapter 6: GPTModel (random, --init or --hf weights) gets a new\n"
    "out_head Linear(emb, classes); the last transformer block, the final norm\n"
    "and the head are trained (or, with --lora-rank, LoRA adapters on every\n"
    "Linear) on the last position's logits with cross-entropy. CSV files have a\n"
    "header with Label (a class index from 0 to 1048575) and Text columns; the\n"
    "texts are padded with <|endoftext|> to the training set's longest (or cut\n"
    "to --max-length).\n"
    "Prints the book's loss table and accuracies.\n"
    "\n"
    "  --train FILE --val FILE --test FILE   the three sets (--test optional)\n"
    "  --max-length N       pad or cut every text to N ids\n"
    "  --epochs N           (5)\n"
    "  --batch N            (8)\n"
    "  --lr X               AdamW's learning rate (5e-5)\n"
    "  --weight-decay X     (0.1)\n"
    "  --eval-freq N        evaluate every N optimizer steps (50)\n"
    "  --eval-iter N        batches per evaluation and per epoch's accuracy (5)\n";

static const char *instruct_help =
    "usage: tapegrad finetune instruct --data FILE.json [MODEL] [options]\n"
    "\n"
    "The book's chapter 7: the instruction entries (instruction, input, output)\n"
    "are split 85/10/5 into training, test and validation parts, formatted as\n"
    "the Alpaca-style prompt plus \"### Response:\", batched by custom_collate_fn\n"
    "and trained with AdamW; after each epoch a greedy sample of the first\n"
    "validation prompt; then each test entry's response.\n"
    "\n"
    "  --data FILE          a JSON array of {instruction, input, output}\n"
    "  --limit N            keep the first N entries (also --max-entries N)\n"
    "  --allowed-max-length N  cut batches to N positions (1024)\n"
    "  --max-new-tokens N   ids per response (256)\n"
    "  --format F           alpaca (the book's prompt, default) or chat: each entry\n"
    "                       a conversation in the tokenizer's chat format (user: the\n"
    "                       instruction and input, assistant: the output)\n"
    "  --epochs N           (2)\n"
    "  --batch N            (8)\n"
    "  --lr X               AdamW's learning rate (5e-5)\n"
    "  --weight-decay X     (0.1)\n"
    "  --eval-freq N        evaluate every N optimizer steps (5)\n"
    "  --eval-iter N        batches per evaluation (5)\n";

static const char *dpo_help =
    "usage: tapegrad finetune dpo --data FILE.json [MODEL] [options]\n"
    "\n"
    "The book's DPO notebook (chapter 7): preference entries (instruction, input,\n"
    "chosen, rejected; output optional) are split 85/10/5 into training, test and\n"
    "validation parts; each becomes the prompt and the prompt plus\n"
    "\"\\n\\n### Response:\\n\" plus the chosen and the rejected answer. The policy (the\n"
    "model being trained) and a frozen reference (the starting weights, or\n"
    "--reference) score both answers with the mean log-probability of their ids;\n"
    "the loss is -logsigmoid(beta * ((policy chosen - policy rejected) -\n"
    "(reference chosen - reference rejected))). Prints the losses and reward\n"
    "margins before training, the notebook's rows, a sample after each epoch and\n"
    "the reference's and the policy's responses to the first validation entries.\n"
    "\n"
    "  --data FILE          a JSON array of {instruction, input, chosen, rejected}\n"
    "  --beta B             the DPO temperature, > 0 (0.1)\n"
    "  --reference FILE     the reference model's weights (default: the policy's\n"
    "                       starting weights, from --load or --hf or the seed)\n"
    "  --max-entries N      keep the first N entries (also --limit N)\n"
    "  --allowed-max-length N  the longest sequence, in ids (1024)\n"
    "  --max-new-tokens N   ids per response (256)\n"
    "  --format F           alpaca (the book's prompt, default) or chat: the prompt is\n"
    "                       the user's turn in the tokenizer's chat format and each\n"
    "                       answer the assistant's\n"
    "  --epochs N           (1)\n"
    "  --batch N            (8)\n"
    "  --lr X               AdamW's learning rate (5e-6)\n"
    "  --weight-decay X     (0.01)\n"
    "  --eval-freq N        evaluate every N optimizer steps (5)\n"
    "  --eval-iter N        batches per evaluation (5)\n";

static const char *common_help =
    "\n"
    "  --init FILE          start from a state_dict (tapegrad pretrain --save, finetune\n"
    "                       --save) or a trainer checkpoint (also --load FILE)\n"
    "  --hf PATH            start from Hugging Face weights: GPT-2's model.safetensors\n"
    "                       (sets --qkv-bias) or a Qwen3 / Llama 3 folder\n"
    "                       (config.json, safetensors, tokenizer.json)\n"
    "  --tokenizer FILE     a tokenizer.json, a tiktoken rank file or a folder holding\n"
    "                       one (default: GPT-2's); its <|endoftext|> pads\n"
    "  --lora-rank R        LoRA instead of the book's partial fine-tuning: every\n"
    "  --lora-alpha A       Linear wrapped, only the adapters trained (alpha: R)\n"
    "  --composed           the book's composed layers instead of the fused kernels\n"
    "  (--save: a LoRA model keeps PyTorch's .linear / .lora keys: load it with\n"
    "  generate --load FILE --lora-rank R --lora-alpha A; --plot: classify also\n"
    "  writes FILE's accuracy plot beside it, named with -accuracy before .svg;\n"
    "  --json: rows, accuracies or responses, trainable_parameters, seconds)\n"
    "\n";

static const char *end_help =
    "\n" TG_CLI_MODEL_HELP "                  (finetune's --dropout defaults to 0, as the book's)\n"
    "\n"
    "Exit status: 0 ok, 1 the loss diverged, 2 bad arguments or bad input.\n";

static uint64_t fnv1a(uint64_t h, const int64_t *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint64_t)v[i]) * 1099511628211ull;
    return h;
}

/* ---- data ---------------------------------------------------------------------------------------- */

/* The three CSV sets: the training set's longest text (or --max-length)
 * sets every set's length, which the model's context must hold. */
static int load_classify(ft_run *r)
{
    const ft_args *a = r->a;
    const char *paths[3] = {a->train, a->val, a->test}, *opts[3] = {"--train", "--val", "--test"};
    int64_t len = a->max_length_seen ? a->max_length : 0;
    for (int k = 0; k < 3; k++) {
        if (!paths[k]) continue;
        r->cls[k] = tg_class_dataset_load(paths[k], r->tok, len, r->pad_id);
        if (!r->cls[k]) return tg_cli_lib_error(r->cmd, opts[k]);
        if (k == TRAIN) len = tg_class_dataset_max_length(r->cls[k]);
    }
    if (len > r->cfg.context_length)
        return tg_cli_error(r->cmd,
                            "--train: the longest text has %lld ids, more than the model's context length %lld "
                            "(give --max-length)",
                            (long long)len, (long long)r->cfg.context_length);
    if (tg_class_dataset_len(r->cls[TRAIN]) < a->batch)
        return tg_cli_error(r->cmd, "--train: %lld rows make no batch of --batch %lld (the last short batch is dropped)",
                            (long long)tg_class_dataset_len(r->cls[TRAIN]), (long long)a->batch);
    int64_t *row = malloc(sizeof *row * (size_t)(len ? len : 1));
    if (!row) return tg_cli_error(r->cmd, "out of memory");
    int rc = TG_CLI_OK;
    for (int k = 0; k < 3 && rc == TG_CLI_OK; k++)
        for (int64_t i = 0; r->cls[k] && i < tg_class_dataset_len(r->cls[k]) && rc == TG_CLI_OK; i++) {
            int64_t label;
            if (tg_class_dataset_get(r->cls[k], i, row, &label) != TG_OK) rc = tg_cli_lib_error(r->cmd, opts[k]);
            else rc = tg_cli_check_ids(r->cmd, opts[k], row, len, r->cfg.vocab_size);
        }
    free(row);
    return rc;
}

/* The first --limit entries split 85/10/5 (train, test, val): counts and
 * first entries; training needs a batch and validation an entry. */
static int split_entries(ft_run *r, int64_t cnt[3], int64_t begin[3])
{
    const ft_args *a = r->a;
    int64_t n = tg_instruction_data_len(r->entries);
    if (a->limit_seen && a->limit < n) n = a->limit;
    if (tg_instruction_split(n, &cnt[TRAIN], &cnt[TEST], &cnt[VAL]) != TG_OK) return tg_cli_lib_error(r->cmd, "--data");
    begin[TRAIN] = 0, begin[TEST] = cnt[TRAIN], begin[VAL] = cnt[TRAIN] + cnt[TEST];
    for (int k = 0; k < 3; k++) r->ins_begin[k] = begin[k];
    if (cnt[TRAIN] < a->batch || cnt[VAL] < 1)
        return tg_cli_error(r->cmd,
                            "--data: %lld entries give %lld training and %lld validation entries; training needs "
                            "--batch %lld and validation at least 1",
                            (long long)n, (long long)cnt[TRAIN], (long long)cnt[VAL], (long long)a->batch);
    return TG_CLI_OK;
}

/* The instruction entries, split 85/10/5 (train, test, val) and tokenized;
 * each training and validation sequence must fit the model's context once
 * collated. */
static int load_instruct(ft_run *r)
{
    const ft_args *a = r->a;
    r->entries = tg_instruction_data_load(a->data);
    if (!r->entries) return tg_cli_lib_error(r->cmd, "--data");
    int64_t cnt[3], begin[3];
    int rc0 = split_entries(r, cnt, begin);
    if (rc0 != TG_CLI_OK) return rc0;
    for (int k = 0; k < 3; k++) {
        r->ins[k] = tg_instruction_dataset_new_format(r->entries, begin[k], begin[k] + cnt[k], r->tok,
                                                      a->chat ? TG_INSTRUCTION_CHAT : TG_INSTRUCTION_ALPACA);
        if (!r->ins[k]) return tg_cli_lib_error(r->cmd, "--data");
        for (int64_t i = 0; i < cnt[k]; i++) {
            int64_t len;
            const int64_t *ids = tg_instruction_dataset_ids(r->ins[k], i, &len);
            if (!ids && len) return tg_cli_lib_error(r->cmd, "--data");
            int rc = tg_cli_check_ids(r->cmd, "--data", ids, len, r->cfg.vocab_size);
            if (rc != TG_CLI_OK) return rc;
            int64_t need = len + 1 < a->allowed_max ? len + 1 : a->allowed_max;
            if (k != TEST && need - 1 > r->cfg.context_length)
                return tg_cli_error(r->cmd,
                                    "--data: entry %lld has %lld ids, more than the model's context length %lld "
                                    "(give --allowed-max-length)",
                                    (long long)(begin[k] + i), (long long)len, (long long)r->cfg.context_length);
        }
    }
    return TG_CLI_OK;
}

/* The preference entries, split as the instruction entries; every training
 * and validation answer must fit --allowed-max-length and the model's
 * context. */
static int load_dpo(ft_run *r)
{
    const ft_args *a = r->a;
    r->entries = tg_preference_data_load(a->data);
    if (!r->entries) return tg_cli_lib_error(r->cmd, "--data");
    int64_t cnt[3], begin[3];
    int rc0 = split_entries(r, cnt, begin);
    if (rc0 != TG_CLI_OK) return rc0;
    for (int k = 0; k < 3; k++) {
        r->pref[k] = tg_preference_dataset_new(r->entries, begin[k], begin[k] + cnt[k], r->tok,
                                               a->chat ? TG_INSTRUCTION_CHAT : TG_INSTRUCTION_ALPACA);
        if (!r->pref[k]) return tg_cli_lib_error(r->cmd, "--data");
        for (int64_t i = 0; i < cnt[k]; i++) {
            tg_preference_ids e;
            if (tg_preference_dataset_get(r->pref[k], i, &e) != TG_OK) return tg_cli_lib_error(r->cmd, "--data");
            const int64_t *seq[3] = {e.prompt, e.chosen, e.rejected}, len[3] = {e.n_prompt, e.n_chosen, e.n_rejected};
            static const char *const what[3] = {"prompt", "chosen answer", "rejected answer"};
            for (int p = 0; p < 3; p++) {
                int rc = tg_cli_check_ids(r->cmd, "--data", seq[p], len[p], r->cfg.vocab_size);
                if (rc != TG_CLI_OK) return rc;
                /* the collated sequence, len + 1 cut to allowed_max_length, is the
                 * model's input; the notebook would cut a longer entry silently */
                if (p == 0 || k == TEST) continue;
                if (len[p] > a->allowed_max)
                    return tg_cli_error(r->cmd,
                                        "--data: entry %lld's %s has %lld ids, more than --allowed-max-length %lld "
                                        "(give a larger one, or leave the entry out)",
                                        (long long)(begin[k] + i), what[p], (long long)len[p], (long long)a->allowed_max);
                if ((len[p] + 1 < a->allowed_max ? len[p] + 1 : a->allowed_max) > r->cfg.context_length)
                    return tg_cli_error(r->cmd,
                                        "--data: entry %lld's %s has %lld ids, which with its padding id are more than "
                                        "the model's context length %lld (give a larger --context)",
                                        (long long)(begin[k] + i), what[p], (long long)len[p],
                                        (long long)r->cfg.context_length);
            }
        }
    }
    return TG_CLI_OK;
}

/* ---- the model -------------------------------------------------------------------------------------- */

/* At least the book's 2; the loader caps it (TG_CLASS_DATASET_MAX_CLASSES). */
static int64_t num_classes(ft_run *r)
{
    int64_t c = 2;
    for (int k = 0; k < 3; k++)
        if (r->cls[k] && tg_class_dataset_num_classes(r->cls[k]) > c) c = tg_class_dataset_num_classes(r->cls[k]);
    return c;
}

/* The model in the book's order of draws, and AdamW over its parameters. */
static int build_model(ft_run *r, const tg_cli_model *m)
{
    const ft_args *a = r->a;
    /* torch.manual_seed(s); model = GPTModel(cfg); load the weights */
    if (!(r->gpt = tg_cli_model_build(r->model_tape, m, &r->cfg))) return tg_cli_lib_error(r->cmd, NULL);
    tg_cli_gpt_set_layers(r->gpt, a->composed);
    if (a->init && tg_checkpoint_load_model(r->gpt, a->init) != TG_OK) return tg_cli_lib_error(r->cmd, "--init");
    if (a->hf && !tg_cli_is_dir(a->hf) && tg_gpt_load_hf(r->gpt, a->hf) != TG_OK) return tg_cli_lib_error(r->cmd, "--hf");
    /* classify: torch.manual_seed(s); model.out_head = Linear(emb_dim,
     * num_classes); freezing; LoRA or the last block trainable */
    if (tg_gpt_prepare_finetune(r->model_tape, r->gpt, a->instruct || a->dpo ? 0 : num_classes(r), r->seed,
                                a->lora_rank_seen ? a->lora_rank : 0, a->lora_alpha) != TG_OK)
        return tg_cli_lib_error(r->cmd, a->lora_rank_seen ? "--lora-rank" : NULL);
    /* the new modules take the model's layers (the step tape's policy
     * covers them as any module) */
    tg_cli_gpt_set_layers(r->gpt, a->composed);
    /* torch.manual_seed(s) (classify: before AdamW; instruct: after it) */
    if (!a->instruct && !a->dpo) tg_manual_seed(r->seed);
    tg_adam_options o = {a->lr, {0.9, 0.999}, 1e-8, a->weight_decay, false};
    r->opt = tg_adamw_new(r->model_tape, r->gpt, o);
    if (!r->opt) return tg_cli_lib_error(r->cmd, NULL);
    /* the reference: the same weights, frozen, in eval mode; with LoRA the
     * policy without its adapters is that model (no second copy) */
    if (a->dpo) r->dpo = (tg_dpo_task){.reference = NULL, .beta = a->beta};
    if (a->dpo && (a->reference || !a->lora_rank_seen)) {
        tg_manual_seed(r->seed);
        if (!(r->ref = tg_cli_model_build(r->model_tape, m, &r->cfg))) return tg_cli_lib_error(r->cmd, NULL);
        tg_cli_gpt_set_layers(r->ref, a->composed);
        const char *from = a->reference ? a->reference : a->init, *opt = a->reference ? "--reference" : "--init";
        if (from && tg_checkpoint_load_model(r->ref, from) != TG_OK) return tg_cli_lib_error(r->cmd, opt);
        if (!a->reference && a->hf && !tg_cli_is_dir(a->hf) && tg_gpt_load_hf(r->ref, a->hf) != TG_OK)
            return tg_cli_lib_error(r->cmd, "--hf");
        tg_module_requires_grad_(r->ref, false);
        tg_module_train(r->ref, false);
        r->dpo.reference = r->ref;
    }
    if (a->instruct || a->dpo) tg_manual_seed(r->seed);
    return TG_CLI_OK;
}

/* ---- the run ---------------------------------------------------------------------------------------- */

/* The datasets, their loaders and batches, and a digest of the ids. */
static int load_data(ft_run *r)
{
    const ft_args *a = r->a;
    r->tok = tg_cli_model_tokenizer(a->tokenizer, a->hf, &r->cfg);
    if (!r->tok) return tg_cli_lib_error(r->cmd, a->tokenizer ? "--tokenizer" : NULL);
    r->pad_id = tg_tokenizer_eot(r->tok);
    if (r->pad_id < 0)
        return tg_cli_error(r->cmd, "--tokenizer: the tokenizer has no <|endoftext|> or <|end_of_text|> to pad with");
    r->end_id = r->pad_id;
    if (a->chat) {
        tg_chat_format f = tg_tokenizer_chat_format(r->tok);
        if (f == TG_CHAT_NONE)
            return tg_cli_error(r->cmd, "--format chat: the tokenizer has no chat format (Qwen3's, Llama 3's and Gemma 3's have one; give --tokenizer)");
        r->end_id = tg_tokenizer_chat_end_id(r->tok);
    }
    if (r->cfg.vocab_size <= r->pad_id)
        return tg_cli_error(r->cmd, "--vocab %lld: the padding id %lld needs a vocabulary of at least %lld",
                            (long long)r->cfg.vocab_size, (long long)r->pad_id, (long long)r->pad_id + 1);
    int rc = a->dpo ? load_dpo(r) : a->instruct ? load_instruct(r) : load_classify(r);
    if (rc != TG_CLI_OK) return rc;
    r->digest = 1469598103934665603ull;
    for (int k = 0; k < 3; k++) {
        int64_t n = a->dpo        ? tg_preference_dataset_len(r->pref[k])
                    : a->instruct ? tg_instruction_dataset_len(r->ins[k])
                    : r->cls[k]   ? tg_class_dataset_len(r->cls[k])
                                  : -1;
        if (n < 0) continue;
        r->ib[k] = (tg_instruction_batches){r->ins[k], r->pad_id, TG_IGNORE_INDEX, a->allowed_max};
        r->pb[k] = (tg_preference_batches){r->pref[k], r->pad_id, a->allowed_max, false};
        tg_loader_options lo = {.batch_size = a->batch, .shuffle = k == TRAIN, .drop_last = k == TRAIN};
        r->set[k] = a->dpo        ? (tg_data){tg_loader_new(n, lo), tg_preference_batch, &r->pb[k]}
                    : a->instruct ? (tg_data){tg_loader_new(n, lo), tg_instruction_batch, &r->ib[k]}
                                  : (tg_data){tg_loader_new(n, lo), tg_class_batch, r->cls[k]};
        if (!r->set[k].loader) return tg_cli_lib_error(r->cmd, NULL);
        if (a->dpo) { /* each entry's three sequences */
            for (int64_t i = 0; i < n; i++) {
                tg_preference_ids e;
                tg_preference_dataset_get(r->pref[k], i, &e);
                r->digest = fnv1a(fnv1a(fnv1a(r->digest, e.prompt, e.n_prompt), e.chosen, e.n_chosen), e.rejected,
                                  e.n_rejected);
            }
            continue;
        }
        int64_t len = a->instruct ? 0 : tg_class_dataset_max_length(r->cls[k]), label;
        int64_t *row = malloc(sizeof *row * (size_t)(len + 1));
        for (int64_t i = 0; row && i < n; i++) {
            const int64_t *ids = a->instruct ? tg_instruction_dataset_ids(r->ins[k], i, &len) : row;
            if (!a->instruct && tg_class_dataset_get(r->cls[k], i, row, &label) == TG_OK) row[len] = label;
            r->digest = fnv1a(r->digest, ids, a->instruct ? len : len + 1);
        }
        free(row);
    }
    return TG_CLI_OK;
}

#define FT_NIDENTITY (TG_CLI_MODEL_NIDENTITY + 8)
static int run(ft_run *r, const tg_cli_model *m)
{
    const ft_args *a = r->a;
    int rc = load_data(r);
    if (rc == TG_CLI_OK) rc = build_model(r, m);
    tg_checkpoint_value id[FT_NIDENTITY];
    int k = tg_cli_model_identity(&r->cfg, r->seed, id);
    const tg_checkpoint_value own[FT_NIDENTITY - TG_CLI_MODEL_NIDENTITY] = {
        {.name = "--lora-rank", .i = a->lora_rank_seen ? a->lora_rank : 0},
        {.name = "--allowed-max-length", .i = a->allowed_max},
        {.name = "the data", .i = (int64_t)r->digest, .differs = "was trained on other data"},
        {.name = "--init or --hf (1)", .i = a->init || a->hf},
        {.name = "--weight-decay", .is_float = true, .f = a->weight_decay},
        {.name = "--lora-alpha", .is_float = true, .f = a->lora_rank_seen ? a->lora_alpha : 0},
        {.name = "--beta", .is_float = true, .f = a->dpo ? a->beta : 0},
        {.name = "--reference (1)", .i = a->reference != NULL},
    };
    memcpy(id + k, own, sizeof own);
    tg_trainer_options o = {.model = r->gpt, .optimizer = r->opt, .train = r->set[TRAIN], .val = r->set[VAL],
                            .loss = a->instruct ? tg_loss_lm : tg_loss_last, .task = r, .epochs = a->epochs,
                            .eval_freq = a->eval_freq, .eval_iter = a->eval_iter, .count_tokens = a->instruct,
                            .n_identity = FT_NIDENTITY, .identity = id,
                            .on_epoch_end = a->instruct ? tg_ft_instruct_epoch_end : tg_ft_classify_epoch_end,
                            .on_train_end = a->instruct ? tg_ft_instruct_end : tg_ft_classify_end,
                            .numerics = m->numerics};
    if (a->dpo) {
        o.loss = tg_ft_dpo_loss, o.count_tokens = true;
        o.n_columns = 2, o.columns = tg_dpo_column_names(), o.column_values = tg_ft_dpo_columns;
        o.on_train_begin = tg_ft_dpo_begin, o.print_row = tg_ft_dpo_row;
        o.on_epoch_end = tg_ft_dpo_epoch_end, o.on_train_end = tg_ft_dpo_end;
    }
    tg_cli_train_options(&a->t, &o);
    tg_trainer *tr;
    rc = tg_cli_train_run(r->cmd, rc, &o, &tr);
    if (rc == TG_CLI_OK && tg_trainer_is_lead(tr)) {
        if (a->t.save && tg_module_save(r->gpt, a->t.save) != TG_OK) rc = tg_cli_lib_error(r->cmd, "--save");
        if (rc == TG_CLI_OK && a->t.plot) rc = tg_ft_write_plots(r, tr, a->t.plot);
        if (rc == TG_CLI_OK && a->t.json) rc = tg_ft_json(r, tr);
        if (rc == TG_CLI_OK && !a->t.json && !tg_cli_flush_stdout()) rc = tg_cli_stdout_error(0);
        if (rc == TG_CLI_OK && !a->t.json) { /* the speed, unless the table was lost */
            tg_cli_train_summary(tr, a->instruct || a->dpo ? "tokens" : "examples");
            fprintf(stderr, "%lld trainable parameters\n", (long long)tg_module_num_trainable_parameters(r->gpt));
        }
    }
    tg_trainer_free(tr);
    return rc;
}

static void run_free(ft_run *r)
{
    for (int k = 0; k < 3; k++) {
        tg_loader_free(r->set[k].loader);
        tg_class_dataset_free(r->cls[k]);
        tg_instruction_dataset_free(r->ins[k]);
        tg_preference_dataset_free(r->pref[k]);
    }
    tg_instruction_data_free(r->entries);
    tg_tape_free(r->model_tape);
}

static int finetune(int argc, char **argv)
{
    const char *kind = argc > 1 && argv[1] ? argv[1] : NULL;
    if (kind && (strcmp(kind, "--help") == 0 || strcmp(kind, "-h") == 0)) {
        fputs("usage: tapegrad finetune classify|instruct|dpo [options] (see tapegrad finetune classify --help)\n",
              stdout);
        return TG_CLI_OK;
    }
    ft_args a = {.batch = 8, .lr = 5e-5, .weight_decay = 0.1, .eval_iter = 5, .allowed_max = 1024, .max_new = 256,
                 .beta = 0.1};
    if (kind && strcmp(kind, "classify") == 0) {
        a.cmd = "finetune classify", a.epochs = 5, a.eval_freq = 50;
    } else if (kind && strcmp(kind, "instruct") == 0) {
        a.cmd = "finetune instruct", a.epochs = 2, a.eval_freq = 5, a.instruct = true;
    } else if (kind && strcmp(kind, "dpo") == 0) { /* the notebook's settings */
        a.cmd = "finetune dpo", a.epochs = 1, a.eval_freq = 5, a.dpo = true, a.lr = 5e-6, a.weight_decay = 0.01;
    } else {
        return tg_cli_error("finetune", "expected classify, instruct or dpo, got '%.100s'", kind ? kind : "");
    }
    /* each kind's own options, then the common ones */
    const tg_opt classify_opts[] = {
        {.name = "--train", .type = TG_OPT_STRING, .dest = &a.train},
        {.name = "--val", .type = TG_OPT_STRING, .dest = &a.val},
        {.name = "--test", .type = TG_OPT_STRING, .dest = &a.test},
        {.name = "--max-length", .type = TG_OPT_INT, .dest = &a.max_length, .imin = 1, .imax = 65536,
         .seen = &a.max_length_seen},
    };
    const tg_opt instruct_opts[] = {
        {.name = "--data", .type = TG_OPT_STRING, .dest = &a.data},
        {.name = "--limit", .type = TG_OPT_INT, .dest = &a.limit, .imin = 1, .imax = INT32_MAX, .seen = &a.limit_seen},
        {.name = "--allowed-max-length", .type = TG_OPT_INT, .dest = &a.allowed_max, .imin = 1, .imax = 65536},
        {.name = "--max-new-tokens", .type = TG_OPT_INT, .dest = &a.max_new, .imin = 0, .imax = 100000},
        {.name = "--format", .type = TG_OPT_STRING, .dest = &a.format},
        {.name = "--max-entries", .type = TG_OPT_INT, .dest = &a.limit, .imin = 1, .imax = INT32_MAX,
         .seen = &a.limit_seen},
    };
    const tg_opt dpo_opts[] = {
        {.name = "--beta", .type = TG_OPT_DOUBLE, .dest = &a.beta, .dmin = -1e9, .dmax = 1e9},
        {.name = "--reference", .type = TG_OPT_STRING, .dest = &a.reference},
    };
    const tg_opt common[] = {
        {.name = "--init", .type = TG_OPT_STRING, .dest = &a.init},
        {.name = "--load", .type = TG_OPT_STRING, .dest = &a.init},
        {.name = "--hf", .type = TG_OPT_STRING, .dest = &a.hf},
        TG_CLI_TOKENIZER_OPT(a.tokenizer),
        {.name = "--epochs", .type = TG_OPT_INT, .dest = &a.epochs, .imin = 1, .imax = 1000000},
        {.name = "--batch", .type = TG_OPT_INT, .dest = &a.batch, .imin = 1, .imax = 65536},
        {.name = "--lr", .type = TG_OPT_DOUBLE, .dest = &a.lr, .dmin = 0.0, .dmax = 10.0},
        {.name = "--weight-decay", .type = TG_OPT_DOUBLE, .dest = &a.weight_decay, .dmin = 0.0, .dmax = 1e6},
        {.name = "--eval-freq", .type = TG_OPT_INT, .dest = &a.eval_freq, .imin = 1, .imax = INT32_MAX},
        {.name = "--eval-iter", .type = TG_OPT_INT, .dest = &a.eval_iter, .imin = 1, .imax = INT32_MAX},
        {.name = "--lora-rank", .type = TG_OPT_INT, .dest = &a.lora_rank, .imin = 1, .imax = 65536,
         .seen = &a.lora_rank_seen},
        {.name = "--lora-alpha", .type = TG_OPT_DOUBLE, .dest = &a.lora_alpha, .dmin = -1e6, .dmax = 1e6,
         .seen = &a.lora_alpha_seen},
        {.name = "--composed", .type = TG_OPT_FLAG, .dest = &a.composed},
        TG_CLI_TRAIN_OPTS(a.t),
    };
    _Static_assert(sizeof classify_opts <= sizeof instruct_opts, "instruct has the most options of its own");
    tg_opt own[TG_CLI_NOPTS(common) + TG_CLI_NOPTS(instruct_opts) + TG_CLI_NOPTS(dpo_opts)];
    int n_own = a.instruct || a.dpo ? TG_CLI_NOPTS(instruct_opts) : TG_CLI_NOPTS(classify_opts);
    memcpy(own, a.instruct || a.dpo ? instruct_opts : classify_opts, sizeof *own * (size_t)n_own);
    if (a.dpo) {
        memcpy(own + n_own, dpo_opts, sizeof dpo_opts);
        n_own += TG_CLI_NOPTS(dpo_opts);
    }
    memcpy(own + n_own, common, sizeof common);
    n_own += TG_CLI_NOPTS(common);
    tg_cli_model m;
    ft_run r = {.a = &a, .cmd = a.cmd};
    tg_cli_model_defaults(&m, 0);
    m.dropout_seen = true; /* the book fine-tunes with drop_rate 0.0 */
    m.qkv_bias = tg_cli_hf_gpt2_file(argc, argv); /* GPT-2's released weights have q/k/v biases */
    m.hf = &a.hf;
    m.follow_hf = &a.lora_rank_seen; /* a LoRA run keeps a BF16 folder's frozen base in bf16 */
    m.frozen = &a.lora_rank_seen;    /* and its base may be bf16 or q8 */
    int rc;
    tg_cli_command c = {.name = a.cmd, .help = a.dpo ? dpo_help : a.instruct ? instruct_help : classify_help, .opts = own,
                        .nopts = n_own, .help_more = {common_help, TG_CLI_TRAIN_HELP, end_help}};
    if (!tg_cli_model_parse(&c, argc - 1, argv + 1, &m, &r.cfg, &rc)) return rc;
    if ((a.instruct || a.dpo) && !a.data) return tg_cli_error(a.cmd, "--data FILE.json is required");
    if (a.dpo && (!(a.beta > 0) || !isfinite(a.beta)))
        return tg_cli_error(a.cmd, "--beta: must be a finite number above 0, got %g", a.beta);
    if (a.format && strcmp(a.format, "alpaca") != 0 && strcmp(a.format, "chat") != 0)
        return tg_cli_error(a.cmd, "--format: expected alpaca or chat, got '%.200s'", a.format);
    a.chat = a.format && strcmp(a.format, "chat") == 0;
    if (!a.instruct && !a.dpo && (!a.train || !a.val)) return tg_cli_error(a.cmd, "--train and --val are required");
    if (a.init && a.hf) return tg_cli_error(a.cmd, "--init and --hf are exclusive");
    if (a.lora_alpha_seen && !a.lora_rank_seen) return tg_cli_error(a.cmd, "--lora-alpha needs --lora-rank");
    if (a.lora_rank_seen && !a.lora_alpha_seen) a.lora_alpha = (double)a.lora_rank;
    if ((rc = tg_cli_train_check(a.cmd, &a.t)) != TG_CLI_OK) return rc;
    r.seed = m.seed;
    if (tg_cli_check_only) return TG_CLI_OK;
    if ((rc = tg_cli_train_begin(a.cmd, &a.t, a.batch)) != TG_CLI_OK) return rc;
    if (!a.instruct && a.t.plot && tg_dist_rank() == 0) { /* the accuracy or margins plot beside --plot's */
        char *acc = tg_ft_accuracy_plot_path(a.t.plot, a.dpo ? "-reward-margins" : "-accuracy");
        rc = acc ? tg_cli_check_output(a.cmd, "--plot", acc) : tg_cli_error(a.cmd, "out of memory");
        free(acc);
        if (rc != TG_CLI_OK) return rc;
    }
    r.model_tape = tg_tape_new();
    rc = r.model_tape ? run(&r, &m) : tg_cli_error(a.cmd, "out of memory");
    run_free(&r);
    tg_cli_flush_stdout();
    return rc;
}

/* Under mpirun every rank starts MPI first (tools/tapegrad/dist_cli.c). */
int tg_cmd_finetune(int argc, char **argv)
{
    return tg_cli_dist_main(finetune, argc, argv);
}
