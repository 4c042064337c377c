/* libFuzzer target: the classifier's CSV (tg_class_dataset_load, chapter 6's
 * SpamDataset) on arbitrary bytes, with the vocabulary the project ships
 * (data/gpt2/).
 *
 * The input bytes become the contents of a memfd file read by path, twice:
 * padded to the longest text (max_length 0) and truncated to 3 ids.
 * Invariants checked on every input:
 *   - both loads succeed or fail together; a failure is one line that
 *     begins with the file's path;
 *   - a dataset has rows, a length, every id inside the vocabulary, every
 *     label in [0, num_classes) and some row with label num_classes - 1;
 *     num_classes at most TG_CLASS_DATASET_MAX_CLASSES;
 *   - with max_length 3 every row is the first 3 ids of the padded row
 *     (padding after the longest text's length);
 *   - a batch of every row, in reverse order, stacks exactly what get gives.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_NAME "fuzz_csv"
#include "fuzz.h"
#include "fuzz_file.h"

#include <tapegrad.h>

#ifndef TG_FUZZ_VOCAB
#error "TG_FUZZ_VOCAB (the directory with encoder.json and vocab.bpe) must be defined"
#endif

#define PAD 50256
#define SHORT 3

static tg_tokenizer *tok;
static tg_tape *tp;
static int memfd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    tok = tg_tokenizer_load_dir(TG_FUZZ_VOCAB);
    CHECK_MSG(tok, tg_last_error());
    tp = tg_tape_new();
    CHECK(tp);
    memfd = fuzz_file_open("fuzz_csv", path, sizeof path);
    return 0;
}

static void check_error(void)
{
    const char *e = tg_last_error();
    CHECK_MSG(strncmp(e, path, strlen(path)) == 0 && e[strlen(path)] == ':', e);
    CHECK_MSG(!strchr(e, '\n') && !strchr(e, '\r'), e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 16)) return 0;
    fuzz_file_set(memfd, data, size);
    tg_clear_error();
    tg_class_dataset *ds = tg_class_dataset_load(path, tok, 0, PAD);
    char first[512];
    snprintf(first, sizeof first, "%s", tg_last_error());
    tg_clear_error();
    tg_class_dataset *cut = tg_class_dataset_load(path, tok, SHORT, PAD);
    if (!ds) {
        CHECK_MSG(!cut, first);
        check_error();
        CHECK_MSG(strcmp(first, tg_last_error()) == 0, "the two loads fail differently");
        return 0;
    }
    CHECK_MSG(cut, tg_last_error());
    int64_t n = tg_class_dataset_len(ds), L = tg_class_dataset_max_length(ds), classes = tg_class_dataset_num_classes(ds);
    CHECK(n >= 1 && L >= 1 && classes >= 1 && classes <= TG_CLASS_DATASET_MAX_CLASSES);
    CHECK(tg_class_dataset_len(cut) == n && tg_class_dataset_max_length(cut) == SHORT &&
          tg_class_dataset_num_classes(cut) == classes);
    int64_t *row = malloc((size_t)L * sizeof *row), short_row[SHORT], label, short_label;
    CHECK(row);
    bool top = false;
    int64_t vocab = tg_tokenizer_vocab_size(tok);
    for (int64_t i = 0; i < n; i++) {
        CHECK(tg_class_dataset_get(ds, i, row, &label) == TG_OK);
        CHECK(tg_class_dataset_get(cut, i, short_row, &short_label) == TG_OK);
        CHECK(label >= 0 && label < classes && label == short_label);
        top |= label == classes - 1;
        for (int64_t j = 0; j < L; j++) CHECK(row[j] >= 0 && row[j] < vocab);
        for (int64_t j = 0; j < SHORT; j++) CHECK(short_row[j] == (j < L ? row[j] : PAD));
    }
    CHECK(top);
    /* every row, last first */
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    CHECK(idx);
    for (int64_t i = 0; i < n; i++) idx[i] = n - 1 - i;
    tg_tensor *x, *y;
    CHECK_MSG(tg_class_dataset_batch(ds, tp, idx, n, &x, &y) == TG_OK, tg_last_error());
    CHECK(x->ndim == 2 && x->shape[0] == n && x->shape[1] == L && y->ndim == 1 && y->shape[0] == n);
    for (int64_t b = 0; b < n; b++) {
        CHECK(tg_class_dataset_get(ds, idx[b], row, &label) == TG_OK);
        CHECK(((const int64_t *)y->data)[b] == label);
        CHECK(memcmp((const int64_t *)x->data + b * L, row, (size_t)L * sizeof *row) == 0);
    }
    CHECK(tg_class_dataset_get(ds, n, row, &label) != TG_OK);
    free(idx);
    free(row);
    tg_class_dataset_free(ds);
    tg_class_dataset_free(cut);
    tg_tape_reset(tp);
    return 0;
}
