/* libFuzzer target: the book's instruction data (chapter 7) on arbitrary
 * bytes: tg_instruction_data_load, format_input, the 85/10/5 split,
 * InstructionDataset and custom_collate_fn, with the vocabulary the project
 * ships (data/gpt2/).
 *
 * The input bytes become the contents of a memfd file read by path.
 * Invariants checked on every input:
 *   - a failure is one line that begins with the file's path;
 *   - loaded data has entries; format_input is the book's preamble, the
 *     instruction and, exactly when the input is non-empty, the input's
 *     section;
 *   - the split's parts add up to the entries; a dataset over each part
 *     (empty ones included) builds, and each entry's ids are the encoding
 *     of format_input + "\n\n### Response:\n" + output;
 *   - a batch of the dataset's entries (at most 8, with an
 *     allowed_max_length drawn from the input) equals custom_collate_fn
 *     computed here from the ids: shape, inputs, targets;
 *   - the same bytes as preference data (tg_preference_data_load): a
 *     failure is one line beginning with the path; loaded entries have
 *     chosen and rejected; PreferenceDataset's answers start with its prompt
 *     and its batch equals the DPO notebook's collate computed here: one
 *     length, the pad id after each sequence, the masks.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_instruction_json"
#include "fuzz.h"
#include "fuzz_file.h"

#include <tapegrad.h>

#ifndef TG_FUZZ_VOCAB
#error "TG_FUZZ_VOCAB (the directory with encoder.json and vocab.bpe) must be defined"
#endif

#define PAD 50256
#define IGNORE (-100)
#define MAXB 8

static tg_tokenizer *tok;
static tg_tape *tp;
static int memfd = -1;
static char path[64];

static const char PREAMBLE[] = "Below is an instruction that describes a task. Write a response that appropriately "
                               "completes the request.\n\n### Instruction:\n";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = tg_tokenizer_load_dir(TG_FUZZ_VOCAB);
    CHECK_MSG(tok, tg_last_error());
    tp = tg_tape_new();
    CHECK(tp);
    memfd = fuzz_file_open("fuzz_instruction_json", path, sizeof path);
    return 0;
}

static void check_format(const tg_instruction *e, const char *s)
{
    size_t lp = sizeof PREAMBLE - 1, li = strlen(e->instruction), ln = strlen(e->input);
    CHECK(strncmp(s, PREAMBLE, lp) == 0 && strncmp(s + lp, e->instruction, li) == 0);
    if (ln) CHECK(strncmp(s + lp + li, "\n\n### Input:\n", 13) == 0 && strcmp(s + lp + li + 13, e->input) == 0);
    else CHECK(s[lp + li] == '\0');
}

/* custom_collate_fn here, against the library's. */
static void check_batch(const tg_instruction_dataset *ds, const int64_t *idx, int count, int64_t allowed)
{
    tg_tensor *x, *y;
    CHECK_MSG(tg_instruction_dataset_batch(ds, tp, idx, count, PAD, IGNORE, allowed, &x, &y) == TG_OK, tg_last_error());
    const int64_t *seq[MAXB];
    int64_t lens[MAXB], batch_max = 0;
    for (int b = 0; b < count; b++) {
        seq[b] = tg_instruction_dataset_ids(ds, idx[b], &lens[b]);
        CHECK(seq[b]);
        if (lens[b] + 1 > batch_max) batch_max = lens[b] + 1;
    }
    int64_t L = batch_max - 1;
    if (allowed > 0 && allowed < L) L = allowed;
    CHECK(x->ndim == 2 && y->ndim == 2 && x->shape[0] == count && y->shape[0] == count && x->shape[1] == L &&
          y->shape[1] == L && x->dtype == TG_I64 && y->dtype == TG_I64);
    int64_t *padded = malloc((size_t)batch_max * sizeof *padded);
    CHECK(padded);
    for (int b = 0; b < count; b++) {
        for (int64_t j = 0; j < batch_max; j++) padded[j] = j < lens[b] ? seq[b][j] : PAD;
        const int64_t *xi = (const int64_t *)x->data + b * L, *yi = (const int64_t *)y->data + b * L;
        int64_t first = -1;
        for (int64_t j = 0; j + 1 < batch_max; j++) {
            int64_t t = padded[j + 1];
            if (t == PAD) {
                if (first >= 0) t = IGNORE;
                else first = j;
            }
            if (j < L) CHECK(xi[j] == padded[j] && yi[j] == t);
        }
    }
    free(padded);
}

/* The DPO notebook's collate here, against the library's. */
static void check_preference_batch(const tg_preference_dataset *ds, const int64_t *idx, int count, int64_t allowed)
{
    tg_tensor *t[4];
    CHECK_MSG(tg_preference_dataset_batch(ds, tp, idx, count, PAD, allowed, true, t) == TG_OK, tg_last_error());
    tg_preference_ids e[MAXB];
    int64_t L = 0;
    for (int b = 0; b < count; b++) {
        CHECK(tg_preference_dataset_get(ds, idx[b], &e[b]) == TG_OK);
        int64_t m = (e[b].n_chosen > e[b].n_rejected ? e[b].n_chosen : e[b].n_rejected) + 1;
        if (m > L) L = m;
    }
    if (allowed > 0 && allowed < L) L = allowed;
    for (int k = 0; k < 4; k++) CHECK(t[k]->ndim == 2 && t[k]->shape[0] == count && t[k]->shape[1] == L);
    for (int b = 0; b < count; b++)
        for (int k = 0; k < 2; k++) {
            const int64_t *seq = k ? e[b].rejected : e[b].chosen, len = k ? e[b].n_rejected : e[b].n_chosen;
            const int64_t *x = (const int64_t *)t[k]->data + b * L;
            const uint8_t *m = (const uint8_t *)t[k + 2]->data + b * L;
            for (int64_t j = 0; j < L; j++)
                CHECK(x[j] == (j < len ? seq[j] : PAD) && m[j] == (j < len && j >= e[b].mask_from));
        }
}

/* The bytes as preference data. */
static void preference(size_t size)
{
    tg_clear_error();
    tg_instruction_data *d = tg_preference_data_load(path);
    if (!d) {
        const char *e = tg_last_error();
        CHECK_MSG(strncmp(e, path, strlen(path)) == 0 && e[strlen(path)] == ':', e);
        CHECK_MSG(!strchr(e, '\n') && !strchr(e, '\r'), e);
        return;
    }
    int64_t n = tg_instruction_data_len(d);
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const tg_instruction *e = tg_instruction_data_get(d, i);
        CHECK(e && e->instruction && e->input && e->chosen && e->rejected);
        total += strlen(e->instruction) + strlen(e->input) + strlen(e->chosen) + strlen(e->rejected);
    }
    tg_preference_dataset *ds = total <= (1u << 17) ? tg_preference_dataset_new(d, 0, n, tok, TG_INSTRUCTION_ALPACA) : NULL;
    if (total <= (1u << 17)) CHECK_MSG(ds || !strchr(tg_last_error(), '\n'), tg_last_error());
    for (int64_t i = 0; ds && i < n; i++) {
        tg_preference_ids e;
        CHECK(tg_preference_dataset_get(ds, i, &e) == TG_OK);
        CHECK(e.mask_from == e.n_prompt + 2 && e.n_chosen > e.mask_from && e.n_rejected > e.mask_from);
    }
    if (ds) {
        int64_t idx[MAXB];
        int count = n < MAXB ? (int)n : MAXB;
        for (int b = 0; b < count; b++) idx[b] = (b * 5 + (int64_t)size) % n;
        check_preference_batch(ds, idx, count, 0);
        check_preference_batch(ds, idx, count, 1 + (int64_t)(size % 89));
    }
    tg_preference_dataset_free(ds);
    tg_instruction_data_free(d);
    tg_tape_reset(tp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 16)) return 0;
    fuzz_file_set(memfd, data, size);
    preference(size);
    tg_clear_error();
    tg_instruction_data *d = tg_instruction_data_load(path);
    if (!d) {
        const char *e = tg_last_error();
        CHECK_MSG(strncmp(e, path, strlen(path)) == 0 && e[strlen(path)] == ':', e);
        CHECK_MSG(!strchr(e, '\n') && !strchr(e, '\r'), e);
        return 0;
    }
    int64_t n = tg_instruction_data_len(d);
    CHECK(n >= 1);
    CHECK(!tg_instruction_data_get(d, n) && !tg_instruction_data_get(d, -1));
    size_t total = 0; /* bytes to encode: kept small so that a run stays fast */
    for (int64_t i = 0; i < n; i++) {
        const tg_instruction *e = tg_instruction_data_get(d, i);
        CHECK(e && e->instruction && e->input && e->output);
        char *s = tg_format_input(e);
        CHECK(s);
        check_format(e, s);
        total += strlen(s) + strlen(e->output);
        free(s);
    }
    int64_t parts[3];
    CHECK(tg_instruction_split(n, &parts[0], &parts[1], &parts[2]) == TG_OK);
    CHECK(parts[0] >= 0 && parts[1] >= 0 && parts[2] >= 0 && parts[0] + parts[1] + parts[2] == n);
    if (total > (1u << 18)) {
        tg_instruction_data_free(d);
        return 0;
    }
    int64_t begin = 0;
    for (int p = 0; p < 3; p++) {
        tg_instruction_dataset *ds = tg_instruction_dataset_new(d, begin, begin + parts[p], tok);
        CHECK_MSG(ds, tg_last_error());
        CHECK(tg_instruction_dataset_len(ds) == parts[p]);
        for (int64_t i = 0; i < parts[p]; i++) {
            const tg_instruction *e = tg_instruction_data_get(d, begin + i);
            char *s = tg_format_input(e);
            CHECK(s);
            size_t ls = strlen(s), lo = strlen(e->output);
            char *full = malloc(ls + 16 + lo + 1);
            CHECK(full);
            memcpy(full, s, ls);
            memcpy(full + ls, "\n\n### Response:\n", 16);
            memcpy(full + ls + 16, e->output, lo + 1);
            int64_t *ids = NULL, nids;
            size_t n_ids = 0;
            CHECK_MSG(tg_tokenizer_encode(tok, full, ls + 16 + lo, &ids, &n_ids) == TG_OK, tg_last_error());
            const int64_t *got = tg_instruction_dataset_ids(ds, i, &nids);
            CHECK(got && nids == (int64_t)n_ids && memcmp(got, ids, n_ids * sizeof *ids) == 0);
            free(ids);
            free(full);
            free(s);
        }
        if (parts[p] > 0) {
            int64_t idx[MAXB];
            int count = parts[p] < MAXB ? (int)parts[p] : MAXB;
            for (int b = 0; b < count; b++) idx[b] = (b * 7 + (int64_t)size) % parts[p];
            check_batch(ds, idx, count, 0);
            check_batch(ds, idx, count, 1 + (int64_t)(size % 97));
        }
        tg_instruction_dataset_free(ds);
        begin += parts[p];
    }
    tg_instruction_data_free(d);
    tg_tape_reset(tp);
    return 0;
}
