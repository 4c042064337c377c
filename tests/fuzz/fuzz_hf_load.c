/* libFuzzer target: loading a Hugging Face GPT-2 model.safetensors
 * (tg_gpt_load_hf) into a small GPTModel.
 *
 * The input bytes become the contents of a memfd file that the real loader
 * reads through /proc/self/fd/N. The model: vocab 40, context 6, emb 16,
 * 4 heads, 1 layer, qkv_bias (the layout of tests/ref/gpt_hf.safetensors,
 * the seed corpus). Invariants checked on every input:
 *   - a failed load leaves every weight unchanged and sets a message;
 *   - after a successful load out_head equals tok_emb (tied, as the book
 *     loads GPT-2), and a forward in eval mode plus generation of two ids
 *     with and without the KV cache never crash, whatever the values. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_hf_load"
#include "fuzz.h"
#include "fuzz_file.h"

#include <tapegrad.h>

#define MAXVALS 8192

static tg_tape *model_tp, *work_tp;
static tg_module *gpt;
static int memfd = -1;
static char path[64];
static double before[MAXVALS], after[MAXVALS];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    model_tp = tg_tape_new();
    work_tp = tg_tape_new();
    CHECK(model_tp && work_tp);
    tg_gpt_config cfg = {40, 6, 16, 4, 1, 0.0, true};
    tg_manual_seed(1);
    gpt = tg_gpt_new(model_tp, &cfg);
    CHECK(gpt);
    tg_module_train(gpt, false);
    memfd = fuzz_file_open("fuzz_hf_load", path, sizeof path);
    return 0;
}

static int snapshot(double *vals)
{
    tg_named_list ps;
    CHECK(tg_module_named_parameters(work_tp, gpt, &ps) == TG_OK);
    return fuzz_snapshot(&ps, vals, MAXVALS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20)) return 0;
    fuzz_file_set(memfd, data, size);
    int nv = snapshot(before);
    tg_clear_error();
    int rc = tg_gpt_load_hf(gpt, path);
    if (rc != TG_OK) {
        const char *e = tg_last_error();
        CHECK(e && *e);
        CHECK(snapshot(after) == nv);
        for (int k = 0; k < nv; k++) CHECK(fuzz_same_value(before[k], after[k]));
    } else {
        tg_tensor *head = tg_module_get_parameter(gpt, "out_head.weight");
        tg_tensor *wte = tg_module_get_parameter(gpt, "tok_emb.weight");
        for (int64_t k = 0; k < tg_numel(head); k++) CHECK(fuzz_same_value(tg_item_at(head, k), tg_item_at(wte, k)));
        const int64_t ids[4] = {0, 39, 7, 3}, shape[2] = {1, 4};
        (void)tg_module_forward(work_tp, gpt, tg_from_data(work_tp, TG_I64, 2, shape, ids));
        int64_t out[8], n;
        for (int cache = 0; cache < 2; cache++) {
            tg_generate_options o = {.max_new_tokens = 4, .temperature = cache ? 1.0 : 0.0, .top_k = 3,
                                     .eos_id = -1, .no_kv_cache = cache == 0};
            (void)tg_gpt_generate(gpt, ids, 4, &o, out, &n);
        }
    }
    tg_tape_reset(work_tp);
    return 0;
}
