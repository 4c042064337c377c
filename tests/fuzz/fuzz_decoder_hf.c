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
 *     values;
 *   - what export writes is read back (include/tapegrad/export.h): a
 *     configuration read from the input (any family, kept small) builds a
 *     model whose Hugging Face folder (tg_export_hf) reads back as the same
 *     configuration and loads into a model computing the same logits, bit
 *     for bit; its GGUF file (tg_export_gguf, with a small byte-level BPE
 *     tokenizer.json written at start) is written, or refused with a
 *     message. */
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
static char dir[64], config_path[96], weights_path[96], out_dir[96], gguf_path[96], tok_path[96];
static double before[MAXVALS], after[MAXVALS];

static void remove_tree(const char *path)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_decoder_hf: could not remove %s\n", path);
}

static void remove_dir(void) { remove_tree(dir); }

/* A byte-level BPE tokenizer.json of 256 byte tokens, 2 merges and one
 * special token (ids 0..258): the GGUF export's tokenizer. */
static void write_tokenizer(const char *path)
{
    FILE *f = fopen(path, "wb");
    CHECK(f);
    fputs("{\"version\":\"1.0\",\"added_tokens\":[{\"id\":258,\"content\":\"<|endoftext|>\",\"single_word\":false,"
          "\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":null,"
          "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
          "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"dropout\":null,"
          "\"unk_token\":null,\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\",\"fuse_unk\":false,"
          "\"vocab\":{",
          f);
    /* GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the others for U+0100 + k */
    int k = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)k++;
        char u[4];
        int n = cp < 0x80 ? (u[0] = (char)cp, 1) : (u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), 2);
        if (cp == '"' || cp == '\\') fputc('\\', f);
        fprintf(f, "%s\"%.*s\":%d", b ? "," : "", n, u, b);
    }
    fputs(",\"ab\":256,\"abc\":257},\"merges\":[\"a b\",\"ab c\"]}}", f);
    CHECK(fclose(f) == 0);
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
    snprintf(out_dir, sizeof out_dir, "%s/export", dir);
    snprintf(gguf_path, sizeof gguf_path, "%s/model.gguf", dir);
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", dir);
    atexit(remove_dir);
    write_tokenizer(tok_path);
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

/* The export round trip of a configuration read from the input (small ones). */
static void export_round_trip(const tg_decoder_config *read)
{
    tg_decoder_config c = *read, r, back;
    c.context_length = c.context_length < 16 ? c.context_length : 16;
    CHECK(tg_decoder_config_resolve(&c, &r) == TG_OK);
    if (r.vocab_size > 300 || r.emb_dim > 32 || r.n_layers > 3 || r.hidden_dim > 64 || r.n_heads > 8 ||
        r.head_dim > 16 || r.n_heads * r.head_dim > 64)
        return;
    if (r.vocab_size < 259) c.vocab_size = 259; /* the tokenizer's ids */
    tg_tape *tp = tg_tape_new();
    CHECK(tp);
    tg_manual_seed(2);
    tg_module *m = tg_decoder_new(tp, &c);
    CHECK(m);
    tg_module_train(m, false);
    tg_export_options o = {.tokenizer = tok_path, .force = true};
    tg_clear_error();
    if (tg_export_hf(m, out_dir, &o) != TG_OK) {
        /* only what the family's class cannot hold, named */
        const char *e = tg_last_error();
        CHECK(e && *e);
    } else {
        CHECK(tg_decoder_config_from_hf(out_dir, &back) == TG_OK);
        back.context_length = c.context_length;
        tg_decoder_config rb;
        CHECK(tg_decoder_config_resolve(&back, &rb) == TG_OK);
        tg_decoder_config_resolve(&c, &r);
        CHECK(rb.family == r.family && rb.vocab_size == r.vocab_size && rb.emb_dim == r.emb_dim &&
              rb.n_layers == r.n_layers && rb.hidden_dim == r.hidden_dim && rb.head_dim == r.head_dim &&
              rb.n_kv_groups == r.n_kv_groups && rb.norm_eps == r.norm_eps && rb.tie_head == r.tie_head);
        tg_manual_seed(3);
        tg_module *m2 = tg_decoder_new(tp, &back);
        CHECK(m2);
        tg_module_train(m2, false);
        CHECK(tg_decoder_load_hf(m2, out_dir) == TG_OK);
        const int64_t ids[3] = {0, 258, 7}, shape[2] = {1, 3};
        tg_tensor *x = tg_from_data(tp, TG_I64, 2, shape, ids);
        tg_tensor *y1 = tg_module_forward(tp, m, x), *y2 = tg_module_forward(tp, m2, x);
        CHECK(y1 && y2 && tg_numel(y1) == tg_numel(y2));
        CHECK(memcmp(tg_data_ptr(y1), tg_data_ptr(y2), sizeof(float) * (size_t)tg_numel(y1)) == 0);
    }
    for (int t = 0; t < 4; t++) {
        o.type = (tg_export_type)t;
        tg_clear_error();
        if (tg_export_gguf(m, gguf_path, &o) != TG_OK) {
            const char *e = tg_last_error();
            CHECK(e && *e);
        }
    }
    tg_tape_free(tp);
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
        export_round_trip(&c);
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
