/* libFuzzer target: a Hugging Face Qwen3 / Llama 3 folder
 * (tg_decoder_config_from_hf, tg_decoder_load_hf) into a small Qwen3Model.
 *
 * The input is one folder: its first two bytes (little-endian) are the
 * length L of config.json, the next L bytes config.json, the rest
 * model.safetensors; the target writes them into a folder of its own. The
 * model: vocab 40, context 8, emb 8, 2 heads of head_dim 4, 1 kv group, 1
 * layer, hidden 8, QK-norm (the seed corpus: tests/fuzz/corpus/
 * fuzz_decoder_hf/, written by tests/fuzz/make_decoder_hf_seeds.py).
 * Invariants checked on every input:
 *   - reading the configuration either succeeds with a configuration that
 *     passes tg_decoder_config_check, or fails with a message;
 *   - a failed load leaves every weight unchanged and sets a message;
 *   - after a successful load a forward in eval mode and generation of a
 *     few ids with and without the KV cache never crash, whatever the
 *     values. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_decoder_hf"
#include "fuzz.h"
#include "fuzz_file.h"

#include <tapegrad.h>

#define MAXVALS 8192

static tg_tape *model_tp, *work_tp;
static tg_module *model;
static char dir[64], config_path[96], weights_path[96];
static double before[MAXVALS], after[MAXVALS];

static void remove_dir(void)
{
    unlink(config_path);
    unlink(weights_path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    model_tp = tg_tape_new();
    work_tp = tg_tape_new();
    CHECK(model_tp && work_tp);
    tg_decoder_config cfg = {.vocab_size = 40, .context_length = 8, .emb_dim = 8, .n_heads = 2, .n_layers = 1,
                             .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 8, .head_dim = 4, .n_kv_groups = 1,
                             .qk_norm = true, .rope_base = 1e6};
    tg_manual_seed(1);
    model = tg_decoder_new(model_tp, &cfg);
    CHECK(model);
    tg_module_train(model, false);
    snprintf(dir, sizeof dir, "/tmp/fuzz_decoder_hf.XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(config_path, sizeof config_path, "%s/config.json", dir);
    snprintf(weights_path, sizeof weights_path, "%s/model.safetensors", dir);
    atexit(remove_dir);
    return 0;
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    CHECK(f);
    CHECK(size == 0 || fwrite(data, 1, size, f) == size);
    CHECK(fclose(f) == 0);
}

static int snapshot(double *vals)
{
    tg_named_list ps;
    CHECK(tg_module_named_parameters(work_tp, model, &ps) == TG_OK);
    return fuzz_snapshot(&ps, vals, MAXVALS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > (1u << 20)) return 0;
    size_t len = (size_t)data[0] | (size_t)data[1] << 8;
    if (len > size - 2) len = size - 2;
    write_file(config_path, data + 2, len);
    write_file(weights_path, data + 2 + len, size - 2 - len);

    tg_decoder_config c;
    tg_clear_error();
    if (tg_decoder_config_from_hf(dir, &c) == TG_OK) {
        CHECK(tg_decoder_config_check(&c) == TG_OK);
    } else {
        const char *e = tg_last_error();
        CHECK(e && *e);
    }

    int nv = snapshot(before);
    tg_clear_error();
    if (tg_decoder_load_hf(model, dir) != TG_OK) {
        const char *e = tg_last_error();
        CHECK(e && *e);
        CHECK(snapshot(after) == nv);
        for (int k = 0; k < nv; k++) CHECK(fuzz_same_value(before[k], after[k]));
    } else {
        const int64_t ids[4] = {0, 39, 7, 3}, shape[2] = {1, 4};
        (void)tg_module_forward(work_tp, model, tg_from_data(work_tp, TG_I64, 2, shape, ids));
        int64_t out[8], n;
        for (int cache = 0; cache < 2; cache++) {
            tg_generate_options o = {.max_new_tokens = 3, .temperature = cache ? 1.0 : 0.0, .top_k = 3,
                                     .eos_id = -1, .no_kv_cache = cache == 0};
            (void)tg_gpt_generate(model, ids, 4, &o, out, &n);
        }
    }
    tg_tape_reset(work_tp);
    return 0;
}
