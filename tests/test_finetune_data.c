/* The book's fine-tuning data (src/data/finetune.c): chapter 6's
 * SpamDataset over a CSV file, chapter 7's instruction JSON, format_input,
 * the 85/10/5 split, InstructionDataset and custom_collate_fn.
 *
 * (a) CSV: quoting as pandas.read_csv reads it (commas, doubled quotes,
 *     newlines inside quotes, CRLF, UTF-8, columns in any order), padding to
 *     the longest text and truncation to max_length, batches; every error's
 *     message.
 * (b) instruction JSON: entries, format_input with and without input, the
 *     split (Python's int(n * 0.85) on a double), InstructionDataset's ids,
 *     every error's message.
 * (c) custom_collate_fn: the book's example (chapter 7, section 7.3),
 *     allowed_max_length, padding ids inside an item, errors.
 * (d) the book's instruction data (../shared/data/instruction-data.json next
 *     to the repository, skipped when absent): 1,100 entries split
 *     935/110/55, and the widths of the first train batches after
 *     manual_seed(123), as the book prints them.
 * (e) preference data (the DPO notebook): the reader's members and errors,
 *     PreferenceDataset's prompt, chosen and rejected ids and its mask
 *     start, the collate's padding, masks and cut, and the notebook's own
 *     printed batch of the book's first two entries.
 * Token ids are checked against tg_tokenizer_encode of the same text (the
 * tokenizer itself is checked against tiktoken by test_tokenizer) and, for
 * a few words, against GPT-2's published ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static tg_tokenizer *tok; /* loaded once (tests/../data/gpt2) */
static char g_tmpdir[64];

#define PAD 50256

static const char *data_path(char *buf, size_t size, const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "../../data/%s", file);
    return tu_ref_path(buf, size, rel);
}

/* A file name/ in the test's temporary folder holding len bytes of text
 * (len -1: strlen); its path in buf. */
static const char *write_tmp(char *buf, size_t n, const char *name, const char *text, long len)
{
    if (!g_tmpdir[0]) {
        strcpy(g_tmpdir, "/tmp/tapegrad_test_finetune_XXXXXX");
        if (!mkdtemp(g_tmpdir)) fail_msg("mkdtemp failed");
    }
    snprintf(buf, n, "%s/%s", g_tmpdir, name);
    FILE *f = fopen(buf, "wb");
    if (!f) fail_msg("cannot write %s", buf);
    size_t l = len < 0 ? strlen(text) : (size_t)len;
    if (fwrite(text, 1, l, f) != l) fail_msg("cannot write %s", buf);
    fclose(f);
    return buf;
}

/* The ids of text, in a malloc'd array. */
static int64_t *encode(const char *text, size_t *n)
{
    int64_t *ids = NULL;
    assert_int_equal(tg_tokenizer_encode(tok, text, strlen(text), &ids, n), TG_OK);
    return ids;
}

static void assert_row(const int64_t *got, const int64_t *want, int64_t n, const char *what)
{
    for (int64_t j = 0; j < n; j++)
        if (got[j] != want[j])
            fail_msg("%s: position %lld is %lld, want %lld", what, (long long)j, (long long)got[j], (long long)want[j]);
}

/* ---- (a) classifier CSV -------------------------------------------------------------------------- */

/* The texts of the CSV below, as pandas.read_csv gives them. */
static const char *const g_texts[5] = {
    "Hello, world",
    "She said \"hi\", then \"bye\"",
    "line one\r\nline two\nline three",
    "caf\xc3\xa9 \xe2\x98\x95 na\xc3\xafve \xf0\x9f\x98\x80",
    "  spaces kept ",
};
static const int64_t g_labels[5] = {0, 1, 0, 3, 1};

static const char g_csv[] = "Id,Text,Label,Extra\r\n"
                            "a,\"Hello, world\",0,x\r\n"
                            "b,\"She said \"\"hi\"\", then \"\"bye\"\"\",1,\r\n"
                            "\r\n"
                            "c,\"line one\r\nline two\nline three\",0,\"\"\r\n"
                            "d,caf\xc3\xa9 \xe2\x98\x95 na\xc3\xafve \xf0\x9f\x98\x80,3,y\n"
                            "e,  spaces kept ,1,z";

static void test_csv_padded(void **state)
{
    (void)state;
    char path[256];
    write_tmp(path, sizeof path, "train.csv", g_csv, -1);
    tg_class_dataset *ds = tg_class_dataset_load(path, tok, 0, PAD);
    tu_assert_ok(ds);
    assert_int_equal(tg_class_dataset_len(ds), 5);
    assert_int_equal(tg_class_dataset_num_classes(ds), 4);
    int64_t *enc[5];
    size_t lens[5], longest = 0;
    for (int r = 0; r < 5; r++) {
        enc[r] = encode(g_texts[r], &lens[r]);
        if (lens[r] > longest) longest = lens[r];
    }
    /* GPT-2's ids of "Hello, world" */
    assert_int_equal(lens[0], 3);
    assert_int_equal(enc[0][0], 15496);
    assert_int_equal(enc[0][1], 11);
    assert_int_equal(enc[0][2], 995);
    assert_true(longest > 3);
    assert_int_equal(tg_class_dataset_max_length(ds), (int64_t)longest);
    int64_t row[64], want[64], label;
    assert_true(longest <= 64);
    for (int r = 0; r < 5; r++) {
        assert_int_equal(tg_class_dataset_get(ds, r, row, &label), TG_OK);
        assert_int_equal(label, g_labels[r]);
        for (size_t j = 0; j < longest; j++) want[j] = j < lens[r] ? enc[r][j] : PAD;
        assert_row(row, want, (int64_t)longest, g_texts[r]);
    }
    /* a batch: rows 3 and 0 */
    tg_tape *tp = tg_tape_new();
    const int64_t idx[2] = {3, 0};
    tg_tensor *x, *y;
    assert_int_equal(tg_class_dataset_batch(ds, tp, idx, 2, &x, &y), TG_OK);
    assert_int_equal(x->dtype, TG_I64);
    assert_int_equal(y->dtype, TG_I64);
    assert_int_equal(x->ndim, 2);
    assert_int_equal(x->shape[0], 2);
    assert_int_equal(x->shape[1], (int64_t)longest);
    assert_int_equal(y->ndim, 1);
    assert_int_equal(y->shape[0], 2);
    for (int b = 0; b < 2; b++) {
        int r = (int)idx[b];
        assert_int_equal((int64_t)tg_item_at(y, b), g_labels[r]);
        for (size_t j = 0; j < longest; j++)
            assert_int_equal((int64_t)tg_item_at(x, (int64_t)(b * (int64_t)longest + (int64_t)j)),
                             j < lens[r] ? enc[r][j] : PAD);
    }
    /* errors of get and batch */
    tu_assert_status_error(tg_class_dataset_get(ds, 5, row, &label), "row index 5 out of range (5 rows)");
    tu_assert_status_error(tg_class_dataset_get(ds, -1, row, &label), "row index -1 out of range");
    const int64_t bad[2] = {0, 7};
    tu_assert_status_error(tg_class_dataset_batch(ds, tp, bad, 2, &x, &y), "row index 7 out of range");
    assert_null(x);
    tu_assert_status_error(tg_class_dataset_batch(ds, tp, idx, 0, &x, &y), "empty batch");
    tg_tape_free(tp);
    for (int r = 0; r < 5; r++) free(enc[r]);
    tg_class_dataset_free(ds);
    unlink(path);
}

/* max_length > 0: truncated to it, or padded to it (the validation and test
 * sets take the train set's length); "<|endoftext|>" is id 50256. */
static void test_csv_max_length(void **state)
{
    (void)state;
    char path[256];
    write_tmp(path, sizeof path, "trunc.csv",
              "Label,Text\n1,Hello, world\n0,\"Hello, world<|endoftext|>\"\n", -1);
    /* row 1's unquoted comma makes three fields */
    tu_assert_null_error(tg_class_dataset_load(path, tok, 0, PAD), path, ": row 1: 3 fields, the header has 2");
    write_tmp(path, sizeof path, "trunc.csv", "Label,Text\n1,\"Hello, world\"\n0,\"Hello, world<|endoftext|>\"\n", -1);
    int64_t row[8], label;
    const int64_t full0[4] = {15496, 11, 995, PAD}, full1[4] = {15496, 11, 995, 50256};

    tg_class_dataset *ds = tg_class_dataset_load(path, tok, 0, PAD);
    tu_assert_ok(ds);
    assert_int_equal(tg_class_dataset_max_length(ds), 4);
    assert_int_equal(tg_class_dataset_num_classes(ds), 2);
    assert_int_equal(tg_class_dataset_get(ds, 0, row, &label), TG_OK);
    assert_int_equal(label, 1);
    assert_row(row, full0, 4, "row 1, padded");
    assert_int_equal(tg_class_dataset_get(ds, 1, row, &label), TG_OK);
    assert_int_equal(label, 0);
    assert_row(row, full1, 4, "row 2, <|endoftext|>");
    tg_class_dataset_free(ds);

    ds = tg_class_dataset_load(path, tok, 2, PAD);
    tu_assert_ok(ds);
    assert_int_equal(tg_class_dataset_max_length(ds), 2);
    row[2] = -7; /* untouched: two ids copied */
    assert_int_equal(tg_class_dataset_get(ds, 1, row, &label), TG_OK);
    assert_row(row, full1, 2, "row 2, truncated");
    assert_int_equal(row[2], -7);
    tg_class_dataset_free(ds);

    ds = tg_class_dataset_load(path, tok, 7, 0);
    tu_assert_ok(ds);
    assert_int_equal(tg_class_dataset_max_length(ds), 7);
    const int64_t want[7] = {15496, 11, 995, 0, 0, 0, 0};
    assert_int_equal(tg_class_dataset_get(ds, 0, row, &label), TG_OK);
    assert_row(row, want, 7, "row 1, padded with 0 to 7");
    tg_class_dataset_free(ds);
    unlink(path);
}

typedef struct {
    const char *name, *text;
    long len;
    const char *msg; /* after "PATH: " */
} csv_error_case;

static void test_csv_errors(void **state)
{
    (void)state;
    static const csv_error_case cases[] = {
        {"empty", "", 0, "empty file"},
        {"blank", "\n\r\n\n", -1, "no header row"},
        {"no_label", "label,Text\n1,a\n", -1, "the header (the first row) has no \"Label\" column"},
        {"no_text", "Label,text\n1,a\n", -1, "the header (the first row) has no \"Text\" column"},
        {"fields", "Label,Text\n1,a\n0,b,c\n", -1, "row 2: 3 fields, the header has 2"},
        {"fields_few", "Text,Label\r\n\"a,b\",1\r\n\r\n\"x\"\r\n", -1, "row 2: 1 field, the header has 2"},
        {"unterminated", "Label,Text\n1,a\n0,\"b\n\nc,d\n", -1, "row 2: unterminated quoted field"},
        {"unterminated_header", "Label,\"Text\n", -1, "the header: unterminated quoted field"},
        {"spam", "Label,Text\n0,a\n1,b\n0,c\n1,d\n0,e\n1,f\nspam,g\n0,h\n", -1, "row 7: label 'spam' is not an integer"},
        {"space", "Label,Text\n 1,a\n", -1, "row 1: label ' 1' is not an integer"},
        {"space_after", "Label,Text\n0,a\n1 ,a\n", -1, "row 2: label '1 ' is not an integer"},
        {"plus", "Label,Text\n+1,a\n", -1, "row 1: label '+1' is not an integer"},
        {"float", "Label,Text\n1.0,a\n", -1, "row 1: label '1.0' is not an integer"},
        {"empty_label", "Label,Text\n,a\n", -1, "row 1: label '' is not an integer"},
        {"newline_label", "Label,Text\n\"1\n2\",a\n", -1, "row 1: label '1\\x0a2' is not an integer"},
        {"negative", "Label,Text\n-1,a\n", -1, "row 1: label -1 is negative"},
        {"too_large", "Label,Text\n99999999999999999999,a\n", -1, "row 1: label 99999999999999999999 is too large"},
        {"int64_max", "Label,Text\n0,a\n9223372036854775807,a\n", -1, "row 2: label 9223372036854775807 is too large"},
        /* a label is a class index: at most 2^20 classes, whatever an int or
         * an int64_t would hold (2^32 + 1 is 1 as a 32-bit int, 2^31 - 1 and
         * 2^63 - 2 overflow the count of classes) */
        {"int32_wrap", "Label,Text\n0,a\n4294967297,b\n", -1,
         "row 2: label 4294967297 is too large (class indices go up to 1048575: at most 1048576 classes)"},
        {"int32_max", "Label,Text\n2147483647,a\n", -1, "row 1: label 2147483647 is too large (class indices go up to 1048575"},
        {"int64_max_minus_1", "Label,Text\n9223372036854775806,a\n", -1, "row 1: label 9223372036854775806 is too large"},
        {"max_classes", "Label,Text\n1048576,a\n", -1, "row 1: label 1048576 is too large"},
        {"empty_text", "Label,Text\n0,a\n1,\n", -1, "row 2: empty text"},
        {"quote_inside", "Label,Text\n0,a\n1,ab\"c\n", -1, "row 2: a quote inside an unquoted field or text after a closing quote (line 3, column 5)"},
        {"after_quote", "Label,Text\n1,\"ab\"c\n", -1, "row 1: a quote inside an unquoted field or text after a closing quote (line 2, column 7)"},
        {"utf8", "Label,Text\n0,ok\n1,caf\xe9\n", -1, "row 2: invalid UTF-8 at byte 21 (line 3, column 6)"},
        {"utf8_header", "Label,Te\xffxt\n", -1, "the header: invalid UTF-8 at byte 8"},
        {"no_rows", "Label,Text\r\n", -1, "no data rows (only the header)"},
        {"no_rows_nl", "Text,Label", -1, "no data rows (only the header)"},
        {"label_first_error", "Label,Text\n0,a\nx,b,c\n", -1, "row 2: 3 fields, the header has 2"},
    };
    char path[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const csv_error_case *c = &cases[i];
        char name[64];
        snprintf(name, sizeof name, "%s.csv", c->name);
        write_tmp(path, sizeof path, name, c->text, c->len);
        tg_clear_error();
        tg_class_dataset *ds = tg_class_dataset_load(path, tok, 0, PAD);
        char want[512];
        snprintf(want, sizeof want, "%s: %s", path, c->msg);
        if (ds || !strstr(tg_last_error(), want))
            fail_msg("%s: got %s \"%s\", want \"%s\"", c->name, ds ? "a dataset" : "NULL", tg_last_error(), want);
        if (strchr(tg_last_error(), '\n')) fail_msg("%s: the message is more than one line", c->name);
        unlink(path);
    }
    tu_assert_null_error(tg_class_dataset_load("/nonexistent/x.csv", tok, 0, PAD), "/nonexistent/x.csv: cannot open");
    write_tmp(path, sizeof path, "ok.csv", "Label,Text\n1,a\n", -1);
    tu_assert_null_error(tg_class_dataset_load(path, tok, -1, PAD), "max_length must be >= 0");
    tu_assert_null_error(tg_class_dataset_load(path, tok, 0, 50257), "pad id 50257 is outside the vocabulary [0, 50257)");
    tu_assert_null_error(tg_class_dataset_load(path, tok, 0, -1), "pad id -1 is outside the vocabulary");
    tu_assert_null_error(tg_class_dataset_load(path, NULL, 0, PAD), "NULL argument");
    tu_assert_null_error(tg_class_dataset_load(g_tmpdir, tok, 0, PAD), "cannot read the file");
    /* a byte order mark before the header is not part of "Label" */
    write_tmp(path, sizeof path, "bom.csv", "\xef\xbb\xbfLabel,Text\n2,a\n", -1);
    tg_class_dataset *ds = tg_class_dataset_load(path, tok, 0, PAD);
    tu_assert_ok(ds);
    assert_int_equal(tg_class_dataset_num_classes(ds), 3);
    tg_class_dataset_free(ds);
    /* the largest label: TG_CLASS_DATASET_MAX_CLASSES classes */
    write_tmp(path, sizeof path, "max_label.csv", "Label,Text\n1048575,a\n", -1);
    ds = tg_class_dataset_load(path, tok, 0, PAD);
    tu_assert_ok(ds);
    assert_true(tg_class_dataset_num_classes(ds) == TG_CLASS_DATASET_MAX_CLASSES);
    assert_true(TG_CLASS_DATASET_MAX_CLASSES == 1048576);
    tg_class_dataset_free(ds);
    unlink(path);
}

/* ---- (b) instruction data ---------------------------------------------------------------------------- */

static const char g_json[] =
    "[\n"
    "  {\"instruction\": \"Evaluate the following phrase by transforming it into the spelling given.\",\n"
    "   \"input\": \"freind --> friend\",\n"
    "   \"output\": \"The spelling of the given phrase \\\"freind\\\" is incorrect, the correct spelling is \\\"friend\\\".\"},\n"
    "  {\"output\": \"45 kilometers is 45000 meters.\", \"input\": \"\", \"id\": 7,\n"
    "   \"instruction\": \"Convert 45 kilometers to meters.\"},\n"
    "  {\"instruction\": \"Say caf\\u00e9.\", \"input\": \"\\u2615\", \"output\": \"caf\xc3\xa9\\n<|endoftext|>\"}\n"
    "]\n";

static const char PROMPT[] = "Below is an instruction that describes a task. Write a response that appropriately "
                             "completes the request.\n\n### Instruction:\n";

static void test_instruction_data(void **state)
{
    (void)state;
    char path[256];
    write_tmp(path, sizeof path, "instr.json", g_json, -1);
    tg_instruction_data *d = tg_instruction_data_load(path);
    tu_assert_ok(d);
    assert_int_equal(tg_instruction_data_len(d), 3);
    const tg_instruction *e0 = tg_instruction_data_get(d, 0), *e1 = tg_instruction_data_get(d, 1),
                         *e2 = tg_instruction_data_get(d, 2);
    tu_assert_ok(e0);
    tu_assert_ok(e1);
    tu_assert_ok(e2);
    assert_string_equal(e0->input, "freind --> friend");
    assert_string_equal(e0->output, "The spelling of the given phrase \"freind\" is incorrect, the correct spelling is \"friend\".");
    assert_string_equal(e1->instruction, "Convert 45 kilometers to meters.");
    assert_string_equal(e1->input, "");
    assert_string_equal(e2->instruction, "Say caf\xc3\xa9.");
    assert_string_equal(e2->input, "\xe2\x98\x95");
    assert_string_equal(e2->output, "caf\xc3\xa9\n<|endoftext|>");
    tu_assert_null_error(tg_instruction_data_get(d, 3), "entry 3 out of range (3 entries)");
    tu_assert_null_error(tg_instruction_data_get(d, -1), "entry -1 out of range");

    /* format_input: the input's section only when it is non-empty */
    char want[1024];
    char *got = tg_format_input(e0);
    snprintf(want, sizeof want, "%s%s\n\n### Input:\n%s", PROMPT, e0->instruction, e0->input);
    assert_string_equal(got, want);
    assert_string_equal(got, "Below is an instruction that describes a task. Write a response that appropriately completes "
                             "the request.\n\n### Instruction:\nEvaluate the following phrase by transforming it into the "
                             "spelling given.\n\n### Input:\nfreind --> friend");
    free(got);
    got = tg_format_input(e1);
    snprintf(want, sizeof want, "%sConvert 45 kilometers to meters.", PROMPT);
    assert_string_equal(got, want);
    free(got);
    tu_assert_null_error(tg_format_input(NULL), "format_input: NULL entry");

    /* InstructionDataset over entries [1, 3): format_input + response */
    tg_instruction_dataset *ds = tg_instruction_dataset_new(d, 1, 3, tok);
    tu_assert_ok(ds);
    assert_int_equal(tg_instruction_dataset_len(ds), 2);
    const int64_t *seq[2];
    int64_t lens[2];
    for (int i = 0; i < 2; i++) {
        const tg_instruction *e = tg_instruction_data_get(d, i + 1);
        char *p = tg_format_input(e);
        snprintf(want, sizeof want, "%s\n\n### Response:\n%s", p, e->output);
        free(p);
        size_t n;
        int64_t *ids = encode(want, &n);
        seq[i] = tg_instruction_dataset_ids(ds, i, &lens[i]);
        tu_assert_ok(seq[i]);
        assert_int_equal(lens[i], (int64_t)n);
        assert_row(seq[i], ids, lens[i], "instruction dataset entry");
        free(ids);
    }
    /* "<|endoftext|>" in the output is id 50256 (tiktoken's encode would refuse it) */
    assert_int_equal(seq[1][lens[1] - 1], 50256);
    assert_int_not_equal(lens[0], lens[1]);
    int64_t n;
    tu_assert_null_error(tg_instruction_dataset_ids(ds, 2, &n), "entry 2 out of range (2 entries)");
    assert_int_equal(n, 0);

    /* a batch is custom_collate_fn on the entries */
    tg_tape *tp = tg_tape_new();
    const int64_t idx[2] = {1, 0};
    const int64_t *swapped[2] = {seq[1], seq[0]};
    const int64_t swapped_lens[2] = {lens[1], lens[0]};
    tg_tensor *x, *y, *wx, *wy;
    assert_int_equal(tg_instruction_dataset_batch(ds, tp, idx, 2, PAD, -100, 0, &x, &y), TG_OK);
    assert_int_equal(tg_collate_pad(tp, 2, swapped, swapped_lens, PAD, -100, 0, &wx, &wy), TG_OK);
    int64_t L = lens[0] > lens[1] ? lens[0] : lens[1];
    assert_int_equal(x->shape[0], 2);
    assert_int_equal(x->shape[1], L);
    for (int64_t k = 0; k < 2 * L; k++) {
        assert_int_equal((int64_t)tg_item_at(x, k), (int64_t)tg_item_at(wx, k));
        assert_int_equal((int64_t)tg_item_at(y, k), (int64_t)tg_item_at(wy, k));
    }
    assert_int_equal(tg_instruction_dataset_batch(ds, tp, idx, 2, PAD, -100, 5, &x, &y), TG_OK);
    assert_int_equal(x->shape[1], 5);
    const int64_t bad[1] = {2};
    tu_assert_status_error(tg_instruction_dataset_batch(ds, tp, bad, 1, PAD, -100, 0, &x, &y), "entry 2 out of range");
    assert_null(x);
    tu_assert_status_error(tg_instruction_dataset_batch(ds, tp, idx, 0, PAD, -100, 0, &x, &y), "batch of 0 entries");
    tg_tape_free(tp);
    tg_instruction_dataset_free(ds);

    /* an empty range is a dataset of no entries (a split part may be empty) */
    ds = tg_instruction_dataset_new(d, 3, 3, tok);
    tu_assert_ok(ds);
    assert_int_equal(tg_instruction_dataset_len(ds), 0);
    tg_instruction_dataset_free(ds);
    tu_assert_null_error(tg_instruction_dataset_new(d, 2, 4, tok), "entries [2, 4) are not a range of the 3 entries");
    tu_assert_null_error(tg_instruction_dataset_new(d, 2, 1, tok), "entries [2, 1) are not a range");
    tu_assert_null_error(tg_instruction_dataset_new(d, -1, 1, tok), "entries [-1, 1) are not a range");

    /* the dataset keeps its own ids: the data may go first */
    ds = tg_instruction_dataset_new(d, 0, 1, tok);
    tu_assert_ok(ds);
    tg_instruction_data_free(d);
    const int64_t *s0 = tg_instruction_dataset_ids(ds, 0, &n);
    tu_assert_ok(s0);
    assert_true(n > 40);
    assert_int_equal(s0[0], 21106); /* "Below" */
    tg_instruction_dataset_free(ds);
    unlink(path);
}

static void test_instruction_split(void **state)
{
    (void)state;
    static const int64_t cases[][4] = {
        {0, 0, 0, 0},       {1, 0, 0, 1},          {7, 5, 0, 2},          {20, 17, 2, 1},
        {1100, 935, 110, 55}, {10, 8, 1, 1},
        /* the double product rounds up to the next integer where the exact one would not */
        {4254708203116707, 3616501972649201, 425470820311670, 212735410155836},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t tr = -1, te = -1, va = -1;
        assert_int_equal(tg_instruction_split(cases[i][0], &tr, &te, &va), TG_OK);
        if (tr != cases[i][1] || te != cases[i][2] || va != cases[i][3])
            fail_msg("split(%lld) = %lld/%lld/%lld, want %lld/%lld/%lld", (long long)cases[i][0], (long long)tr,
                     (long long)te, (long long)va, (long long)cases[i][1], (long long)cases[i][2], (long long)cases[i][3]);
    }
    int64_t a, b, c;
    tu_assert_status_error(tg_instruction_split(-1, &a, &b, &c), "negative entry count -1");
    tu_assert_status_error(tg_instruction_split(5, NULL, &b, &c), "NULL argument");
}

typedef struct {
    const char *name, *text;
    long len;
    const char *msg;
} json_error_case;

static void test_instruction_errors(void **state)
{
    (void)state;
    static const json_error_case cases[] = {
        {"missing", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"},\n {\"instruction\": \"a\", \"input\": \"\"}]",
         -1, "entry 1: \"output\" is missing"},
        {"not_string", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}, {}, 3]", -1,
         "entry 1: \"instruction\" is missing"},
        {"number", "[{\"instruction\": \"a\", \"input\": 5, \"output\": \"b\"}]", -1, "entry 0: \"input\" is not a string"},
        {"null", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": null}]", -1, "entry 0: \"output\" is not a string"},
        {"not_object", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}, [1]]", -1,
         "entry 1: not a JSON object"},
        {"object", "{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}", -1, "not a JSON array"},
        {"scalar", "\"text\"", -1, "not a JSON array"},
        {"empty_array", " [ ]\n", -1, "the array has no entries"},
        {"empty", "", 0, "empty file"},
        {"syntax", "[\n  {\"instruction\": \"a\",\n   \"input\" \"\"}]", -1, "JSON syntax error at line 3:"},
        {"trailing", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\"}] x", -1, "JSON syntax error at line 1:"},
        {"control", "[{\"instruction\": \"a\nb\", \"input\": \"\", \"output\": \"b\"}]", -1, "JSON syntax error at line 1:"},
        {"utf8", "[{\"instruction\": \"a\",\n \"input\": \"caf\xe9\", \"output\": \"b\"}]", -1,
         "invalid UTF-8 at byte 36 (line 2:15)"},
        {"nul", "[{\"instruction\": \"a\", \"input\": \"x\\u0000y\", \"output\": \"b\"}]", -1,
         "entry 0: \"input\" contains a NUL character"},
    };
    char path[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const json_error_case *c = &cases[i];
        char name[64];
        snprintf(name, sizeof name, "%s.json", c->name);
        write_tmp(path, sizeof path, name, c->text, c->len);
        tg_clear_error();
        tg_instruction_data *d = tg_instruction_data_load(path);
        char want[512];
        snprintf(want, sizeof want, "%s: %s", path, c->msg);
        if (d || !strstr(tg_last_error(), want))
            fail_msg("%s: got %s \"%s\", want \"%s\"", c->name, d ? "data" : "NULL", tg_last_error(), want);
        if (strchr(tg_last_error(), '\n')) fail_msg("%s: the message is more than one line", c->name);
        unlink(path);
    }
    tu_assert_null_error(tg_instruction_data_load("/nonexistent/i.json"), "/nonexistent/i.json: cannot open");
    tu_assert_null_error(tg_instruction_data_load(NULL), "NULL path");
    /* a repeated key keeps its last value, as Python's json.load */
    write_tmp(path, sizeof path, "dup.json", "[{\"instruction\": \"a\", \"input\": \"\", \"output\": \"b\", \"output\": \"c\"}]", -1);
    tg_instruction_data *d = tg_instruction_data_load(path);
    tu_assert_ok(d);
    assert_string_equal(tg_instruction_data_get(d, 0)->output, "c");
    tg_instruction_data_free(d);
    unlink(path);
}

/* ---- (c) custom_collate_fn --------------------------------------------------------------------------- */

static void assert_matrix(const tg_tensor *t, int64_t rows, int64_t cols, const int64_t *want, const char *what)
{
    assert_int_equal(t->dtype, TG_I64);
    assert_int_equal(t->ndim, 2);
    if (t->shape[0] != rows || t->shape[1] != cols)
        fail_msg("%s: shape (%lld, %lld), want (%lld, %lld)", what, (long long)t->shape[0], (long long)t->shape[1],
                 (long long)rows, (long long)cols);
    for (int64_t k = 0; k < rows * cols; k++)
        if ((int64_t)tg_item_at(t, k) != want[k])
            fail_msg("%s: [%lld, %lld] is %lld, want %lld", what, (long long)(k / cols), (long long)(k % cols),
                     (long long)tg_item_at(t, k), (long long)want[k]);
}

static void test_collate(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    /* the book's example: inputs_1 = [0, 1, 2, 3, 4], inputs_2 = [5, 6], inputs_3 = [7, 8, 9] */
    const int64_t a[5] = {0, 1, 2, 3, 4}, b[2] = {5, 6}, c[3] = {7, 8, 9};
    const int64_t *items[3] = {a, b, c};
    const int64_t lens[3] = {5, 2, 3};
    tg_tensor *x, *y;
    assert_int_equal(tg_collate_pad(tp, 3, items, lens, PAD, -100, 0, &x, &y), TG_OK);
    const int64_t want_x[15] = {0, 1, 2, 3, 4, 5, 6, PAD, PAD, PAD, 7, 8, 9, PAD, PAD};
    const int64_t want_y[15] = {1, 2, 3, 4, PAD, 6, PAD, -100, -100, -100, 8, 9, PAD, -100, -100};
    assert_matrix(x, 3, 5, want_x, "inputs");
    assert_matrix(y, 3, 5, want_y, "targets");

    /* allowed_max_length cuts both after the masking */
    assert_int_equal(tg_collate_pad(tp, 3, items, lens, PAD, -100, 3, &x, &y), TG_OK);
    const int64_t cut_x[9] = {0, 1, 2, 5, 6, PAD, 7, 8, 9}, cut_y[9] = {1, 2, 3, 6, PAD, -100, 8, 9, PAD};
    assert_matrix(x, 3, 3, cut_x, "inputs, allowed_max_length 3");
    assert_matrix(y, 3, 3, cut_y, "targets, allowed_max_length 3");
    /* longer than the batch: no effect */
    assert_int_equal(tg_collate_pad(tp, 3, items, lens, PAD, -100, 1024, &x, &y), TG_OK);
    assert_matrix(x, 3, 5, want_x, "inputs, allowed_max_length 1024");
    assert_matrix(y, 3, 5, want_y, "targets, allowed_max_length 1024");

    /* the book's mask compares values: a padding id inside an item counts,
     * and an item's first id is never a target */
    const int64_t d[4] = {PAD, 3, PAD, 4}, e[1] = {9};
    const int64_t *items2[2] = {d, e};
    const int64_t lens2[2] = {4, 1};
    assert_int_equal(tg_collate_pad(tp, 2, items2, lens2, PAD, -7, 0, &x, &y), TG_OK);
    const int64_t want2_x[8] = {PAD, 3, PAD, 4, 9, PAD, PAD, PAD};
    const int64_t want2_y[8] = {3, PAD, 4, -7, PAD, -7, -7, -7};
    assert_matrix(x, 2, 4, want2_x, "inputs with padding ids inside");
    assert_matrix(y, 2, 4, want2_y, "targets with padding ids inside");

    /* another padding id */
    assert_int_equal(tg_collate_pad(tp, 3, items, lens, 0, -100, 0, &x, &y), TG_OK);
    const int64_t want3_x[15] = {0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 7, 8, 9, 0, 0};
    const int64_t want3_y[15] = {1, 2, 3, 4, 0, 6, 0, -100, -100, -100, 8, 9, 0, -100, -100};
    assert_matrix(x, 3, 5, want3_x, "inputs, pad 0");
    assert_matrix(y, 3, 5, want3_y, "targets, pad 0");

    tu_assert_status_error(tg_collate_pad(tp, 0, items, lens, PAD, -100, 0, &x, &y), "collate: empty batch");
    assert_null(x);
    assert_null(y);
    const int64_t neg[3] = {5, -1, 3};
    tu_assert_status_error(tg_collate_pad(tp, 3, items, neg, PAD, -100, 0, &x, &y), "sequence 1 has length -1");
    tu_assert_status_error(tg_collate_pad(tp, 3, items, lens, PAD, -100, -1, &x, &y), "allowed_max_length must be >= 0");
    const int64_t *holes[3] = {a, NULL, c};
    tu_assert_status_error(tg_collate_pad(tp, 3, holes, lens, PAD, -100, 0, &x, &y), "sequence 1 is NULL");
    tu_assert_status_error(tg_collate_pad(tp, 3, NULL, lens, PAD, -100, 0, &x, &y), "NULL argument");
    tg_tape_free(tp);
}

/* ---- (d) the book's data --------------------------------------------------------------------------------- */

/* --format chat: each entry is the conversation (user: instruction and
 * input, assistant: output) in the tokenizer's chat format; GPT-2's
 * tokenizer has none. */
static void test_instruction_chat(void **state)
{
    (void)state;
    char path[4096];
    tg_tokenizer *qwen = tg_tokenizer_load_file(data_path(path, sizeof path, "qwen3/tokenizer.json"));
    tu_assert_ok(qwen);
    const char *json = "[{\"instruction\": \"Add.\", \"input\": \"2 and 3\", \"output\": \"5\"},"
                       " {\"instruction\": \"Say hi.\", \"input\": \"\", \"output\": \"Hi!\"}]";
    snprintf(path, sizeof path, "/tmp/tg_chat_%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    tg_instruction_data *d = tg_instruction_data_load(path);
    unlink(path);
    tu_assert_ok(d);
    char *user = tg_format_chat_user(tg_instruction_data_get(d, 0));
    assert_string_equal(user, "Add.\n\n2 and 3");
    free(user);
    user = tg_format_chat_user(tg_instruction_data_get(d, 1));
    assert_string_equal(user, "Say hi.");
    free(user);
    tg_instruction_dataset *ds = tg_instruction_dataset_new_format(d, 0, 2, qwen, TG_INSTRUCTION_CHAT);
    tu_assert_ok(ds);
    /* <|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\nHi!<|im_end|>\n */
    static const int64_t want[] = {151644, 872, 198, 45764, 15588, 13, 151645, 198, 151644, 77091, 198, 13048, 0, 151645, 198};
    int64_t n;
    const int64_t *ids = tg_instruction_dataset_ids(ds, 1, &n);
    assert_int_equal(n, sizeof want / sizeof *want);
    for (int64_t i = 0; i < n; i++) assert_int_equal(ids[i], want[i]);
    tg_instruction_dataset_free(ds);
    tu_assert_null_error(tg_instruction_dataset_new_format(d, 0, 2, tok, TG_INSTRUCTION_CHAT), "chat format");
    tu_assert_null_error(tg_instruction_dataset_new_format(d, 0, 2, qwen, (tg_instruction_format)7), "format 7");
    tg_instruction_data_free(d);
    tg_tokenizer_free(qwen);
}

static void test_book_instruction_data(void **state)
{
    (void)state;
    char path[4096];
    tu_ref_path(path, sizeof path, "../../../shared/data/instruction-data.json");
    if (access(path, R_OK) != 0) {
        printf("skipped: %s is not here\n", path);
        skip();
    }
    tg_instruction_data *d = tg_instruction_data_load(path);
    tu_assert_ok(d);
    assert_int_equal(tg_instruction_data_len(d), 1100);
    int64_t n_train, n_test, n_val;
    assert_int_equal(tg_instruction_split(1100, &n_train, &n_test, &n_val), TG_OK);
    tg_instruction_dataset *ds = tg_instruction_dataset_new(d, 0, n_train, tok);
    tu_assert_ok(ds);
    assert_int_equal(tg_instruction_dataset_len(ds), 935);
    /* torch.manual_seed(123); DataLoader(train, batch_size=8, shuffle=True,
     * drop_last=True, collate_fn=custom_collate_fn with allowed_max_length
     * 1024): "torch.Size([8, 61])", then 76, 73, 68, 65, 72, 80, 67 */
    static const int64_t widths[8] = {61, 76, 73, 68, 65, 72, 80, 67};
    tg_manual_seed(123);
    tg_loader *l = tg_loader_new(935, (tg_loader_options){.batch_size = 8, .shuffle = true, .drop_last = true});
    tu_assert_ok(l);
    assert_int_equal(tg_loader_len(l), 116);
    tg_loader_iter *it = tg_loader_iter_new(l);
    tu_assert_ok(it);
    tg_tape *tp = tg_tape_new();
    int64_t idx[8], count;
    for (int k = 0; k < 8; k++) {
        assert_int_equal(tg_loader_iter_next_indices(it, idx, &count), 1);
        assert_int_equal(count, 8);
        tg_tensor *x, *y;
        assert_int_equal(tg_instruction_dataset_batch(ds, tp, idx, count, PAD, -100, 1024, &x, &y), TG_OK);
        if (x->shape[1] != widths[k] || y->shape[1] != widths[k])
            fail_msg("batch %d: width %lld, the book's %lld", k, (long long)x->shape[1], (long long)widths[k]);
    }
    tg_tape_free(tp);
    tg_loader_iter_free(it);
    tg_loader_free(l);
    tg_instruction_dataset_free(ds);
    tg_instruction_data_free(d);
}

/* ---- (e) preference data (the DPO notebook) ----------------------------------------------------------- */

static const char g_pref_json[] =
    "[{\"instruction\": \"Rewrite.\", \"input\": \"It is hot.\", \"chosen\": \"It is warm.\", \"rejected\": \"Hot!\", "
    "\"output\": \"It's hot.\"},\n"
    " {\"instruction\": \"Say caf\\u00e9.\", \"input\": \"\", \"chosen\": \"Caf\\u00e9, please.\", \"rejected\": \"No.\"}]";

/* The ids of a and b concatenated as text. */
static int64_t *encode2(const char *a, const char *b, const char *c, size_t *n)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%s%s", a, b, c);
    return encode(buf, n);
}

static void test_preference_data(void **state)
{
    (void)state;
    char path[256];
    write_tmp(path, sizeof path, "pref.json", g_pref_json, -1);
    tg_instruction_data *d = tg_preference_data_load(path);
    tu_assert_ok(d);
    assert_int_equal(tg_instruction_data_len(d), 2);
    const tg_instruction *e0 = tg_instruction_data_get(d, 0), *e1 = tg_instruction_data_get(d, 1);
    assert_string_equal(e0->chosen, "It is warm.");
    assert_string_equal(e0->rejected, "Hot!");
    assert_string_equal(e0->output, "It's hot.");
    assert_string_equal(e1->chosen, "Caf\xc3\xa9, please.");
    assert_null(e1->output); /* optional in preference data */
    /* the instruction reader wants output, and keeps no answers */
    tu_assert_null_error(tg_instruction_data_load(path), ": entry 1: \"output\" is missing");

    /* PreferenceDataset: prompt, prompt + response header + answer; the
     * mask from the prompt's end + 2 */
    tg_preference_dataset *ds = tg_preference_dataset_new(d, 0, 2, tok, TG_INSTRUCTION_ALPACA);
    tu_assert_ok(ds);
    assert_int_equal(tg_preference_dataset_len(ds), 2);
    int64_t L = 0;
    for (int i = 0; i < 2; i++) {
        const tg_instruction *e = i ? e1 : e0;
        tg_preference_ids got;
        assert_int_equal(tg_preference_dataset_get(ds, i, &got), TG_OK);
        char *prompt = tg_format_input(e);
        size_t np, nc, nr;
        int64_t *p = encode(prompt, &np), *c = encode2(prompt, "\n\n### Response:\n", e->chosen, &nc),
                *r = encode2(prompt, "\n\n### Response:\n", e->rejected, &nr);
        assert_int_equal(got.n_prompt, (int64_t)np);
        assert_int_equal(got.n_chosen, (int64_t)nc);
        assert_int_equal(got.n_rejected, (int64_t)nr);
        assert_int_equal(got.mask_from, (int64_t)np + 2);
        assert_row(got.prompt, p, got.n_prompt, "prompt");
        assert_row(got.chosen, c, got.n_chosen, "chosen");
        assert_row(got.rejected, r, got.n_rejected, "rejected");
        int64_t m = (int64_t)(nc > nr ? nc : nr) + 1;
        if (m > L) L = m;
        free(prompt), free(p), free(c), free(r);
    }
    tu_assert_status_error(tg_preference_dataset_get(ds, 2, &(tg_preference_ids){0}), "entry 2 out of range (2 entries)");

    /* the collate: one length, pad ids, masks; cut to allowed_max_length */
    tg_tape *tp = tg_tape_new();
    int64_t idx[2] = {1, 0};
    for (int cut = 0; cut < 3; cut++) {
        int64_t allowed = cut == 0 ? 0 : cut == 1 ? L - 3 : L + 5, want_L = allowed && allowed < L ? allowed : L;
        for (int keep = 0; keep < 2; keep++) {
            tg_tensor *t[4];
            assert_int_equal(tg_preference_dataset_batch(ds, tp, idx, 2, PAD, allowed, keep == 0, t), TG_OK);
            for (int k = 0; k < 4; k++) {
                assert_int_equal(t[k]->ndim, 2);
                assert_int_equal(t[k]->shape[0], 2);
                assert_int_equal(t[k]->shape[1], want_L);
                assert_int_equal(t[k]->dtype, k < 2 ? TG_I64 : TG_BOOL);
            }
            for (int b = 0; b < 2; b++) {
                tg_preference_ids e;
                tg_preference_dataset_get(ds, idx[b], &e);
                for (int k = 0; k < 2; k++) {
                    const int64_t *seq = k ? e.rejected : e.chosen, len = k ? e.n_rejected : e.n_chosen;
                    const int64_t *x = (const int64_t *)tg_data_ptr(t[k]) + b * want_L;
                    const uint8_t *mk = (const uint8_t *)tg_data_ptr(t[k + 2]) + b * want_L;
                    for (int64_t j = 0; j < want_L; j++) {
                        assert_int_equal(x[j], j < len ? seq[j] : PAD);
                        assert_int_equal(mk[j], j < len && (keep || j >= e.mask_from));
                    }
                }
            }
        }
    }
    tu_assert_status_error(tg_preference_dataset_batch(ds, tp, idx, 0, PAD, 0, true, (tg_tensor *[4]){0}),
                           "batch of 0 entries");
    tu_assert_status_error(tg_preference_dataset_batch(ds, tp, (int64_t[]){5}, 1, PAD, 0, true, (tg_tensor *[4]){0}),
                           "entry 5 out of range");
    tu_assert_status_error(tg_preference_dataset_batch(ds, tp, idx, 2, PAD, -1, true, (tg_tensor *[4]){0}),
                           "allowed_max_length must be >= 0");
    tg_tape_free(tp);
    tg_preference_dataset_free(ds);
    tu_assert_null_error(tg_preference_dataset_new(d, 1, 3, tok, TG_INSTRUCTION_ALPACA),
                         "entries [1, 3) are not a range of the 2 entries");
    tu_assert_null_error(tg_preference_dataset_new(d, 0, 2, tok, TG_INSTRUCTION_CHAT), "needs a tokenizer with one");
    tg_instruction_data_free(d);

    /* instruction data has no answers to prefer */
    write_tmp(path, sizeof path, "instr2.json", g_json, -1);
    d = tg_instruction_data_load(path);
    tu_assert_ok(d);
    tu_assert_null_error(tg_preference_dataset_new(d, 0, 1, tok, TG_INSTRUCTION_ALPACA),
                         "entry 0 has no \"chosen\" (read the file with tg_preference_data_load)");
    tg_instruction_data_free(d);
}

static void test_preference_errors(void **state)
{
    (void)state;
    static const struct {
        const char *json, *msg;
    } cases[] = {
        {"[{\"instruction\": \"a\", \"input\": \"\", \"rejected\": \"b\"}]", ": entry 0: \"chosen\" is missing"},
        {"[{\"instruction\": \"a\", \"input\": \"\", \"chosen\": \"b\", \"rejected\": \"c\"}, {\"instruction\": \"a\", "
         "\"input\": \"\", \"chosen\": \"b\"}]",
         ": entry 1: \"rejected\" is missing"},
        {"[{\"instruction\": \"a\", \"input\": \"\", \"chosen\": [], \"rejected\": \"c\"}]", ": entry 0: \"chosen\" is not a string"},
        {"[{\"instruction\": \"a\", \"input\": \"\", \"chosen\": \"b\", \"rejected\": \"c\", \"output\": 1}]",
         ": entry 0: \"output\" is not a string"},
        {"[{\"instruction\": \"a\", \"input\": \"\", \"chosen\": \"b\\u0000\", \"rejected\": \"c\"}]",
         ": entry 0: \"chosen\" contains a NUL character"},
        {"[{\"instruction\": \"a\", \"chosen\": \"b\", \"rejected\": \"c\"}]", ": entry 0: \"input\" is missing"},
        {"[3]", ": entry 0: not a JSON object (each entry has \"instruction\", \"input\", \"chosen\" and \"rejected\")"},
        {"[]", ": the array has no entries"},
        {"{}", ": not a JSON array"},
        {"[{\"instruction\": \"a\",", ": JSON syntax error at line 1:"},
    };
    char path[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_tmp(path, sizeof path, "bad_pref.json", cases[i].json, -1);
        tu_assert_null_error(tg_preference_data_load(path), cases[i].msg);
    }
    /* an empty answer still scores the response header's ids after the mask */
    write_tmp(path, sizeof path, "empty_pref.json", "[{\"instruction\": \"a\", \"input\": \"\", \"chosen\": \"\", "
                                                    "\"rejected\": \"\"}]", -1);
    tg_instruction_data *d = tg_preference_data_load(path);
    tu_assert_ok(d);
    tg_preference_dataset *ds = tg_preference_dataset_new(d, 0, 1, tok, TG_INSTRUCTION_ALPACA);
    tu_assert_ok(ds);
    tg_preference_ids e;
    assert_int_equal(tg_preference_dataset_get(ds, 0, &e), TG_OK);
    assert_int_equal(e.n_chosen, e.mask_from + 4); /* "###", " Response", ":", "\n" */
    tg_preference_dataset_free(ds);
    tg_instruction_data_free(d);
}

/* The notebook's own batch (its cells 43-57): the book's first two
 * preference entries collated with allowed_max_length 1024; the chosen ids
 * and the first row's mask as the notebook prints them. */
static void test_preference_book_batch(void **state)
{
    (void)state;
    char path[4096];
    tg_instruction_data *d = tg_preference_data_load(data_path(path, sizeof path, "preference/instruction-data-with-preference.json"));
    tu_assert_ok(d);
    assert_int_equal(tg_instruction_data_len(d), 1100);
    tg_preference_dataset *ds = tg_preference_dataset_new(d, 0, 2, tok, TG_INSTRUCTION_ALPACA);
    tu_assert_ok(ds);
    static const int64_t chosen0[74] = {
        21106, 318,   281,   12064, 326,   8477,  257,   4876,  13,    19430, 257,   2882,  326,   20431, 32543,
        262,   2581,  13,    198,   198,   21017, 46486, 25,    198,   36,    2100,  4985,  262,   1708,  9546,
        416,   25449, 340,   656,   262,   24993, 1813,  13,    198,   198,   21017, 23412, 25,    198,   19503,
        521,   14610, 1545,  198,   198,   21017, 18261, 25,    198,   464,   24993, 286,   262,   1813,  9546,
        366,   19503, 521,   1,     318,   11491, 11,    262,   3376,  24993, 318,   366,   6726,  1911};
    static const int64_t chosen1[59] = {
        21106, 318,   281,   12064, 326,  8477, 257,   4876,  13,  19430, 257,   2882,  326,   20431, 32543,
        262,   2581,  13,    198,   198,  21017, 46486, 25,    198, 18378, 262,   1708,  6827,  329,   23491,
        13,    198,   198,   21017, 23412, 25,  198,   1544,  467, 284,   262,   3952,  790,   1110,  13,
        198,   198,   21017, 18261, 25,   198,  1544,  2925,  284, 262,   3952,  790,   1110,  13};
    tg_tape *tp = tg_tape_new();
    tg_tensor *t[4];
    assert_int_equal(tg_preference_dataset_batch(ds, tp, (int64_t[]){0, 1}, 2, PAD, 1024, true, t), TG_OK);
    assert_int_equal(t[0]->shape[1], 81); /* "chosen inputs: torch.Size([81])" */
    const int64_t *x = tg_data_ptr(t[0]);
    const uint8_t *m = tg_data_ptr(t[2]);
    for (int64_t j = 0; j < 81; j++) {
        assert_int_equal(x[j], j < 74 ? chosen0[j] : PAD);
        assert_int_equal(x[81 + j], j < 59 ? chosen1[j] : PAD);
        assert_int_equal(m[j], j >= 50 && j < 74); /* 50 False, 24 True, 7 False */
    }
    tg_tape_free(tp);
    tg_preference_dataset_free(ds);
    tg_instruction_data_free(d);
}

static int setup(void **state)
{
    (void)state;
    char dir[4096];
    tok = tg_tokenizer_load_dir(data_path(dir, sizeof dir, "gpt2"));
    if (!tok) fprintf(stderr, "cannot load the tokenizer: %s\n", tg_last_error());
    return tok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tg_tokenizer_free(tok);
    if (g_tmpdir[0]) rmdir(g_tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_padded),        cmocka_unit_test(test_csv_max_length),
        cmocka_unit_test(test_csv_errors),        cmocka_unit_test(test_instruction_data),
        cmocka_unit_test(test_instruction_split), cmocka_unit_test(test_instruction_errors),
        cmocka_unit_test(test_collate),           cmocka_unit_test(test_book_instruction_data),
        cmocka_unit_test(test_instruction_chat),  cmocka_unit_test(test_preference_data),
        cmocka_unit_test(test_preference_errors), cmocka_unit_test(test_preference_book_batch),
    };
    return cmocka_run_group_tests_name("finetune_data", tests, setup, teardown);
}
