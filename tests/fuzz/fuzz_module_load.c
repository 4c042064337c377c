/* libFuzzer target: loading a state_dict into the chapter-3 modules.
 *
 * The input bytes become the contents of a memfd file, and the real
 * tg_module_load reads it (through /proc/self/fd/N, no file on disk) into each
 * of six modules built as `tapegrad attention --qkv-bias` builds them (d_in 3,
 * d_out 2, 2 heads, context 6; one MultiHeadAttention converted to float64).
 * (A file that does not parse is tried on one module only.)
 * Invariants checked on every input:
 *   - a failed load leaves the module's state unchanged, with a message;
 *   - a successful load puts exactly the file's values (as the module's dtype)
 *     into every state_dict entry, and tg_safetensors_parse followed by a
 *     lookup of every key agrees with it (the in-memory equivalent);
 *   - a forward + backward on the book's input after a load never crashes
 *     (whatever numbers, NaN and mask values the file holds).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz_module_load"
#include "fuzz.h"
#include "fuzz_file.h"

#include <tapegrad.h>

#define NMOD 6
#define MAXVALS 4096

static tg_tape *model_tp, *work_tp;
static tg_module *mods[NMOD];
static bool batched[NMOD] = {false, false, true, true, true, true};
static int memfd = -1;
static char path[64];
static double before[MAXVALS];

static const float book[18] = {0.43f, 0.15f, 0.89f, 0.55f, 0.87f, 0.66f, 0.57f, 0.85f, 0.64f,
                               0.22f, 0.58f, 0.33f, 0.77f, 0.25f, 0.10f, 0.05f, 0.80f, 0.55f};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    model_tp = tg_tape_new();
    work_tp = tg_tape_new();
    CHECK(model_tp && work_tp);
    tg_manual_seed(123);
    mods[0] = tg_self_attention_v1_new(model_tp, 3, 2);
    mods[1] = tg_self_attention_v2_new(model_tp, 3, 2, true);
    mods[2] = tg_causal_attention_new(model_tp, 3, 2, 6, 0.0, true);
    mods[3] = tg_mha_wrapper_new(model_tp, 3, 2, 6, 0.0, 2, true);
    mods[4] = tg_mha_new(model_tp, 3, 2, 6, 0.0, 2, true);
    mods[5] = tg_mha_new(model_tp, 3, 2, 6, 0.0, 2, true);
    for (int i = 0; i < NMOD; i++) CHECK(mods[i]);
    CHECK(tg_module_to_dtype(model_tp, mods[5], TG_F64) == TG_OK);
    tg_module_set_fused(mods[5], false); /* the book's composition of ops */
    memfd = fuzz_file_open("fuzz_module_load", path, sizeof path);
    return 0;
}

static void forward_backward(tg_module *m, bool is_batched)
{
    const int64_t shape[2] = {6, 3};
    tg_tensor *x = tg_from_f32(work_tp, 2, shape, book);
    if (is_batched) {
        tg_tensor *xs[2] = {x, x};
        x = tg_stack(work_tp, 2, xs, 0);
    }
    tg_named_list params;
    if (tg_module_named_parameters(work_tp, m, &params) == TG_OK && params.n && params.tensors[0]->dtype == TG_F64)
        x = tg_to_dtype(work_tp, x, TG_F64);
    CHECK(x);
    tg_module_zero_grad(m);
    tg_tensor *y = tg_module_forward(work_tp, m, x);
    tg_tensor *s = tg_sum(work_tp, y);
    if (s) (void)tg_backward(s, NULL, false);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20)) return 0;
    fuzz_file_set(memfd, data, size);

    /* the in-memory equivalent first: parse once, then look keys up per module */
    tg_safetensors st;
    bool parsed = tg_safetensors_parse(work_tp, data, size, &st) == TG_OK;

    /* A file that does not even parse fails the same way for every module
     * (each tg_module_load costs a fresh 1 MiB tape), so one module is enough. */
    int first = parsed ? 0 : (int)(size % NMOD), last = parsed ? NMOD - 1 : first;
    for (int mi = first; mi <= last; mi++) {
        tg_module *m = mods[mi];
        tg_named_list sd;
        CHECK(tg_module_state_dict(work_tp, m, &sd) == TG_OK);
        int nv = fuzz_snapshot(&sd, before, MAXVALS);

        bool loadable = parsed;
        for (int i = 0; loadable && i < sd.n; i++) {
            tg_tensor *src = tg_safetensors_get(&st, sd.names[i]);
            loadable = src && tg_same_shape(src, sd.tensors[i]) && (src->dtype == TG_F32 || src->dtype == TG_F64);
        }
        if (loadable) loadable = st.n == sd.n; /* no unexpected keys (names are unique) */

        tg_clear_error();
        int rc = tg_module_load(m, path);
        CHECK((rc == TG_OK) == loadable);
        if (rc != TG_OK) {
            const char *e = tg_last_error();
            CHECK(e && *e);
            double after[MAXVALS];
            CHECK(fuzz_snapshot(&sd, after, MAXVALS) == nv);
            for (int k = 0; k < nv; k++) CHECK(fuzz_same_value(before[k], after[k])); /* module unchanged */
        } else {
            for (int i = 0; i < sd.n; i++) {
                tg_tensor *src = tg_safetensors_get(&st, sd.names[i]);
                tg_tensor *want = tg_to_dtype(work_tp, src, sd.tensors[i]->dtype);
                CHECK(want);
                int64_t n = tg_numel(want);
                for (int64_t k = 0; k < n; k++)
                    CHECK(fuzz_same_value(tg_item_at(want, k), tg_item_at(sd.tensors[i], k)));
            }
            forward_backward(m, batched[mi]);
        }
    }
    tg_tape_reset(work_tp);
    return 0;
}
