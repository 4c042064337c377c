/* safetensors: files encoded as the reference writer encodes them
 * (tests/ref/safetensors.json, made by tools/reference/safetensors_files.py),
 * byte-exact saving, round trips, and one malformed file per validation rule. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------ */

static uint8_t *from_hex(const char *hex, size_t *len)
{
    size_t n = strlen(hex) / 2;
    uint8_t *b = malloc(n ? n : 1);
    assert_non_null(b);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        b[i] = (uint8_t)v;
    }
    *len = n;
    return b;
}

/* A file image: 8-byte length (header_len, or strlen(header) if negative),
 * the header text, then dlen data bytes (copied from data, or zeros). */
static uint8_t *image(const char *header, long long header_len, const void *data, size_t dlen, size_t *len)
{
    size_t hl = strlen(header);
    uint64_t n = header_len < 0 ? (uint64_t)hl : (uint64_t)header_len;
    *len = 8 + hl + dlen;
    uint8_t *b = calloc(1, *len);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, header, hl);
    if (data) memcpy(b + 8 + hl, data, dlen);
    return b;
}

static int parse_image(const char *header, size_t dlen, tg_safetensors *st)
{
    size_t len;
    uint8_t *b = image(header, -1, NULL, dlen, &len);
    tg_tape *tp = tg_tape_new();
    int rc = tg_safetensors_parse(tp, b, len, st);
    tg_tape_free(tp);
    free(b);
    return rc;
}

static char *make_tempdir(void)
{
    char tmpl[] = "/tmp/tg_st_XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    return n;
}

static tg_dtype dtype_of(const char *s)
{
    if (strcmp(s, "float64") == 0) return TG_F64;
    if (strcmp(s, "bool") == 0) return TG_BOOL;
    if (strcmp(s, "uint8") == 0) return TG_U8;
    if (strcmp(s, "int64") == 0) return TG_I64;
    return TG_F32;
}

/* Every tensor listed in want ({name: {shape, dtype, data}}) is in st, exactly. */
static void assert_matches(tg_tape *tp, const tg_safetensors *st, json_t *want, const char *what)
{
    assert_int_equal(st->n, (int)json_object_size(want));
    const char *name;
    json_t *w;
    json_object_foreach(want, name, w) {
        tg_tensor *got = tg_safetensors_get(st, name);
        if (!got) fail_msg("%s: tensor '%s' missing", what, name);
        assert_int_equal(got->dtype, dtype_of(json_string_value(json_object_get(w, "dtype"))));
        assert_true(tg_is_contiguous(got));
        assert_false(got->requires_grad);
        assert_null(got->grad_fn);
        assert_ptr_equal(got->tape, tp);
        char label[128];
        snprintf(label, sizeof label, "%s: %s", what, name);
        tu_assert_close(got, tu_tensor_from_json(tp, w, TG_DTYPE_COUNT), 0.0, 0.0, label);
    }
}

/* ---- reference files --------------------------------------------------------------- */

static void test_reference_files(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("safetensors.json");
    json_t *files = json_object_get(ref, "files");
    assert_int_equal(json_array_size(files), 3);
    tg_tape *tp = tg_tape_new();
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
        const char *fname = json_string_value(json_object_get(f, "file"));
        size_t len;
        uint8_t *bytes = from_hex(json_string_value(json_object_get(f, "hex")), &len);
        tg_safetensors st;
        int rc = tg_safetensors_parse(tp, bytes, len, &st);
        if (rc != TG_OK) fail_msg("%s: %s", fname, tg_last_error());
        assert_matches(tp, &st, json_object_get(f, "tensors"), fname);
        /* Names come in the order of the data in the file. */
        if (strcmp(fname, "st_mixed.safetensors") == 0) {
            const char *order[8] = {"index", "a.b.c", "bias", "empty", "scalar", "weight", "bytes", "mask"};
            for (int k = 0; k < 8; k++) assert_string_equal(st.names[k], order[k]);
        }

        /* The same bytes through a file on disk. */
        char *dir = make_tempdir();
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, fname);
        FILE *out = fopen(path, "wb");
        assert_non_null(out);
        assert_int_equal(fwrite(bytes, 1, len, out), len);
        fclose(out);
        tg_safetensors st2;
        assert_int_equal(tg_safetensors_load(tp, path, &st2), TG_OK);
        assert_matches(tp, &st2, json_object_get(f, "tensors"), path);
        unlink(path);
        rmdir(dir);
        free(dir);
        free(bytes);
        tg_tape_reset(tp);
    }
    tg_tape_free(tp);
    json_decref(ref);
}

/* tg_safetensors_save writes what the reference writer writes, byte for byte,
 * whatever the order of the input and the strides of the tensors. */
static void test_save_matches_reference_bytes(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("safetensors.json");
    json_t *mixed = json_array_get(json_object_get(ref, "files"), 0);
    assert_string_equal(json_string_value(json_object_get(mixed, "file")), "st_mixed.safetensors");
    json_t *tensors = json_object_get(mixed, "tensors");
    tg_tape *tp = tg_tape_new();

    tg_named_tensor list[8];
    int n = 0;
    const char *name;
    json_t *w;
    json_object_foreach(tensors, name, w) {
        tg_tensor *t = tu_tensor_from_json(tp, w, TG_DTYPE_COUNT);
        if (strcmp(name, "weight") == 0) {
            /* Rebuild weight (2, 3) as the transpose of a (3, 2) tensor. */
            tg_tensor *tt = tg_empty(tp, TG_F32, 2, (int64_t[]){3, 2});
            for (int64_t r = 0; r < 2; r++)
                for (int64_t c = 0; c < 3; c++) tg_set(tt, (int64_t[]){c, r}, tg_get(t, (int64_t[]){r, c}));
            tg_tensor *view = tg_empty(tp, TG_F32, 0, NULL);
            *view = *tt;
            view->shape[0] = 2;
            view->shape[1] = 3;
            view->stride[0] = 1;
            view->stride[1] = 2;
            assert_false(tg_is_contiguous(view));
            t = view;
        }
        list[n++] = (tg_named_tensor){name, t};
    }
    assert_int_equal(n, 8);

    char *dir = make_tempdir();
    char path[256];
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    assert_int_equal(tg_safetensors_save(path, list, n), TG_OK);
    assert_int_equal(count_entries(dir), 1); /* no temporary file left */
    size_t len, want_len;
    uint8_t *got = (uint8_t *)tu_read_file(path, &len);
    uint8_t *want = from_hex(json_string_value(json_object_get(mixed, "hex")), &want_len);
    assert_int_equal(len, want_len);
    assert_memory_equal(got, want, len);

    /* And it reads back. */
    tg_safetensors st;
    assert_int_equal(tg_safetensors_load(tp, path, &st), TG_OK);
    assert_matches(tp, &st, tensors, "saved mixed");

    /* Saving again replaces the file. */
    assert_int_equal(tg_safetensors_save(path, list, 1), TG_OK);
    assert_int_equal(tg_safetensors_load(tp, path, &st), TG_OK);
    assert_int_equal(st.n, 1);
    assert_int_equal(count_entries(dir), 1);

    unlink(path);
    rmdir(dir);
    free(dir);
    free(got);
    free(want);
    tg_tape_free(tp);
    json_decref(ref);
}

static void test_round_trip_all_dtypes(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    const float f32[6] = {1.5f, -2.25f, 3e-8f, 4e30f, -0.0f, 6.0f};
    const double f64[3] = {0.1, -1e300, 5e-324};
    const int64_t i64[4] = {INT64_MIN, -1, 0, INT64_MAX};
    const uint8_t u8[3] = {0, 128, 255};
    const uint8_t b[5] = {1, 0, 0, 1, 1};
    tg_named_tensor list[] = {
        {"f32", tg_from_data(tp, TG_F32, 2, (int64_t[]){2, 3}, f32)},
        {"f64", tg_from_data(tp, TG_F64, 1, (int64_t[]){3}, f64)},
        {"i64", tg_from_data(tp, TG_I64, 2, (int64_t[]){2, 2}, i64)},
        {"u8", tg_from_data(tp, TG_U8, 1, (int64_t[]){3}, u8)},
        {"bool", tg_from_data(tp, TG_BOOL, 1, (int64_t[]){5}, b)},
        {"scalar", tg_scalar(tp, TG_F64, -7.5)},
        {"empty", tg_empty(tp, TG_I64, 3, (int64_t[]){2, 0, 4})},
        {"n\xc3\xa4me with \"quotes\"", tg_scalar(tp, TG_F32, 1.0)},
    };
    int n = (int)(sizeof list / sizeof list[0]);
    char *dir = make_tempdir();
    char path[256];
    snprintf(path, sizeof path, "%s/all.safetensors", dir);
    assert_int_equal(tg_safetensors_save(path, list, n), TG_OK);

    tg_tape *tp2 = tg_tape_new();
    tg_safetensors st;
    assert_int_equal(tg_safetensors_load(tp2, path, &st), TG_OK);
    assert_int_equal(st.n, n);
    for (int i = 0; i < n; i++) {
        tg_tensor *got = tg_safetensors_get(&st, list[i].name);
        tu_assert_ok(got);
        assert_int_equal(got->dtype, list[i].tensor->dtype);
        assert_ptr_equal(got->tape, tp2);
        assert_false(got->requires_grad);
        assert_true(tg_same_shape(got, list[i].tensor));
        size_t nbytes = (size_t)tg_numel(got) * tg_dtype_size(got->dtype);
        if (nbytes) assert_memory_equal(tg_data_ptr(got), tg_data_ptr(list[i].tensor), nbytes);
    }
    /* Header length is a multiple of 8, padded with spaces. */
    size_t len;
    uint8_t *bytes = (uint8_t *)tu_read_file(path, &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | bytes[i];
    assert_int_equal(hl % 8, 0);
    assert_true(bytes[8] == '{');
    free(bytes);
    unlink(path);
    rmdir(dir);
    free(dir);
    tg_tape_free(tp2);
    tg_tape_free(tp);
}

static void test_empty_file(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    char *dir = make_tempdir();
    char path[256];
    snprintf(path, sizeof path, "%s/none.safetensors", dir);
    assert_int_equal(tg_safetensors_save(path, NULL, 0), TG_OK);
    size_t len;
    uint8_t *bytes = (uint8_t *)tu_read_file(path, &len);
    /* The reference writer's bytes for no tensors: "{}" and six spaces. */
    const uint8_t want[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    assert_int_equal(len, 16);
    assert_memory_equal(bytes, want, 16);
    tg_safetensors st;
    assert_int_equal(tg_safetensors_parse(tp, bytes, len, &st), TG_OK);
    assert_int_equal(st.n, 0);
    free(bytes);
    unlink(path);
    rmdir(dir);
    free(dir);
    tg_tape_free(tp);
}

/* ---- save and load errors ----------------------------------------------------------- */

static void test_save_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_scalar(tp, TG_F32, 1.0);
    char *dir = make_tempdir();
    char path[256];
    snprintf(path, sizeof path, "%s/x.safetensors", dir);

    tg_named_tensor dup[2] = {{"a", x}, {"a", x}};
    tu_assert_status_error(tg_safetensors_save(path, dup, 2), "safetensors_save", "duplicate tensor name 'a'");
    tg_named_tensor meta[1] = {{"__metadata__", x}};
    tu_assert_status_error(tg_safetensors_save(path, meta, 1), "reserved");
    tg_named_tensor null_tensor[1] = {{"a", NULL}};
    tu_assert_status_error(tg_safetensors_save(path, null_tensor, 1), "'a' is NULL");
    tg_named_tensor null_name[1] = {{NULL, x}};
    tu_assert_status_error(tg_safetensors_save(path, null_name, 1), "NULL name");
    tu_assert_status_error(tg_safetensors_save(NULL, dup, 1), "NULL path");
    tu_assert_status_error(tg_safetensors_save(path, dup, -1), "negative");
    tg_named_tensor bad_utf8[1] = {{"\xff\xfe", x}};
    tu_assert_status_error(tg_safetensors_save(path, bad_utf8, 1), "UTF-8");
    assert_int_equal(count_entries(dir), 0);

    /* A directory in the way: refused before a temporary file is made. */
    char sub[256], inner[300];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(inner, sizeof inner, "%s/keep", sub);
    FILE *keep = fopen(inner, "w");
    assert_non_null(keep);
    fclose(keep);
    tg_named_tensor one[1] = {{"a", x}};
    int rc = tg_safetensors_save(sub, one, 1);
    assert_int_equal(rc, TG_EIO);
    tu_assert_status_error(rc, "safetensors_save", "exists and is a directory, not a regular file");
    assert_int_equal(count_entries(dir), 1); /* only sub/ */

    /* Nor is anything else that is not a regular file replaced by the
     * rename (a FIFO here: a device such as /dev/null is refused alike),
     * whether named directly or through a symbolic link. */
    char fifo[256], link[256];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink(fifo, link), 0);
    const char *named[2] = {fifo, link};
    for (int k = 0; k < 2; k++) {
        rc = tg_safetensors_save(named[k], one, 1);
        assert_int_equal(rc, TG_EIO);
        tu_assert_status_error(rc, "safetensors_save", "exists and is a FIFO, not a regular file");
        struct stat sb;
        assert_int_equal(lstat(fifo, &sb), 0);
        assert_true(S_ISFIFO(sb.st_mode));
        assert_int_equal(lstat(link, &sb), 0);
        assert_true(S_ISLNK(sb.st_mode));
        assert_int_equal(count_entries(dir), 3); /* sub/, fifo, link: no temporary file left */
    }
    unlink(link);
    unlink(fifo);

    snprintf(path, sizeof path, "%s/no/such/dir/x.safetensors", dir);
    rc = tg_safetensors_save(path, one, 1);
    assert_int_equal(rc, TG_EIO);
    tu_assert_status_error(rc, "temporary file");

    tg_safetensors st;
    rc = tg_safetensors_load(tp, path, &st);
    assert_int_equal(rc, TG_EIO);
    tu_assert_status_error(rc, "cannot open");
    tu_assert_status_error(tg_safetensors_load(tp, sub, &st), "not a regular file");
    tu_assert_status_error(tg_safetensors_load(tp, NULL, &st), "NULL path");

    unlink(inner);
    rmdir(sub);
    rmdir(dir);
    free(dir);
    tg_tape_free(tp);
}

static void test_get(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    size_t len;
    uint8_t *b = image(h, -1, "\x05\x06", 2, &len);
    tg_safetensors st;
    assert_int_equal(tg_safetensors_parse(tp, b, len, &st), TG_OK);
    tg_tensor *a = tg_safetensors_get(&st, "a");
    tu_assert_ok(a);
    assert_int_equal((int)tg_item_at(a, 1), 6);
    tu_assert_null_error(tg_safetensors_get(&st, "b"), "no tensor named 'b'");
    tu_assert_null_error(tg_safetensors_get(NULL, "a"), "NULL");
    free(b);
    tg_tape_free(tp);
}

/* ---- malformed files: one per rule ------------------------------------------------- */

#define T(name, dtype, shape, offs) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

static void test_malformed_sizes(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_safetensors st;
    const uint8_t five[5] = {1, 2, 3, 4, 5};
    tu_assert_status_error(tg_safetensors_parse(tp, five, 5, &st), "safetensors_parse", "shorter than the 8-byte");
    int rc = tg_safetensors_parse(tp, five, 5, &st);
    assert_int_equal(rc, TG_EFORMAT);

    size_t len;
    uint8_t *b = image("{}", 100000001LL, NULL, 8, &len);
    tu_assert_status_error(tg_safetensors_parse(tp, b, len, &st), "header length 100000001 is too large");
    free(b);
    b = image("{}", INT64_MAX, NULL, 0, &len);
    tu_assert_status_error(tg_safetensors_parse(tp, b, len, &st), "too large");
    free(b);
    b = image("{}      ", 100, NULL, 0, &len);
    tu_assert_status_error(tg_safetensors_parse(tp, b, len, &st), "header length 100 runs past the end");
    free(b);
    tu_assert_status_error(tg_safetensors_parse(tp, NULL, 0, &st), "NULL");
    tu_assert_status_error(tg_safetensors_parse(NULL, five, 5, &st), "NULL");
    tg_tape_free(tp);
}

static void test_malformed_json(void **state)
{
    (void)state;
    tg_safetensors st;
    tu_assert_status_error(parse_image("{\"a\":", 0, &st), "invalid JSON header");
    tu_assert_status_error(parse_image("{} x", 0, &st), "invalid JSON header");
    tu_assert_status_error(parse_image("{\"\xff\":1}", 0, &st), "invalid JSON header");
    tu_assert_status_error(parse_image("[1, 2]", 0, &st), "header is not a JSON object");
    tu_assert_status_error(parse_image("\"str\"", 0, &st), "invalid JSON header"); /* jansson rejects bare values */
    tu_assert_status_error(parse_image("{" T("a", "U8", "[1]", "[0,1]") "," T("a", "U8", "[1]", "[1,2]") "}", 2, &st),
                           "duplicate name");
    tu_assert_status_error(parse_image("{\"a\":5}", 0, &st), "entry 'a' is not an object");
    tu_assert_status_error(parse_image("{\"__metadata__\":{\"format\":\"pt\",\"k\":1}}", 0, &st),
                           "__metadata__ value for key 'k' is not a string");
    tu_assert_status_error(parse_image("{\"__metadata__\":[\"pt\"]}", 0, &st), "__metadata__ is not an object");
    /* Valid metadata and trailing padding are fine. */
    assert_int_equal(parse_image("{\"__metadata__\":{\"format\":\"pt\"}}    ", 0, &st), TG_OK);
}

static void test_malformed_entries(void **state)
{
    (void)state;
    tg_safetensors st;
    tu_assert_status_error(parse_image("{" T("w", "I32", "[2]", "[0,8]") "}", 8, &st),
                           "tensor 'w'", "unknown dtype 'I32' (supported: BOOL, U8, F16, BF16, F32, F64, I64, Q8_0)");
    tu_assert_status_error(parse_image("{" T("w", "F8_E4M3", "[2]", "[0,2]") "}", 2, &st), "unknown dtype 'F8_E4M3'");
    tu_assert_status_error(parse_image("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, &st),
                           "dtype missing");
    tu_assert_status_error(parse_image("{" T("w", "F32", "3", "[0,12]") "}", 12, &st),
                           "shape is not an array of non-negative integers");
    tu_assert_status_error(parse_image("{" T("w", "F32", "[-1]", "[0,0]") "}", 0, &st),
                           "shape is not an array of non-negative integers");
    tu_assert_status_error(parse_image("{" T("w", "F32", "[1.5]", "[0,4]") "}", 4, &st),
                           "shape is not an array of non-negative integers");
    tu_assert_status_error(parse_image("{" T("w", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4, &st),
                           "9 dims, more than 8");
    tu_assert_status_error(
        parse_image("{" T("w", "F64", "[4294967296,4294967296,4294967296]", "[0,8]") "}", 8, &st),
        "shape overflows");
    tu_assert_status_error(parse_image("{" T("w", "U8", "[4]", "[0]") "}", 4, &st),
                           "data_offsets is not two non-negative integers");
    tu_assert_status_error(parse_image("{" T("w", "U8", "[4]", "[0,4,8]") "}", 4, &st),
                           "data_offsets is not two non-negative integers");
    tu_assert_status_error(parse_image("{" T("w", "U8", "[4]", "[0,\"4\"]") "}", 4, &st),
                           "data_offsets is not two non-negative integers");
    tu_assert_status_error(parse_image("{" T("w", "U8", "[4]", "[-4,0]") "}", 4, &st),
                           "data_offsets is not two non-negative integers");
    tu_assert_status_error(parse_image("{\"w\":{\"dtype\":\"U8\",\"shape\":[4]}}", 4, &st),
                           "data_offsets is not two non-negative integers");
    tu_assert_status_error(parse_image("{" T("w", "U8", "[0]", "[8,4]") "}", 8, &st), "begin 8 > end 4");
    tu_assert_status_error(parse_image("{" T("w", "F32", "[2]", "[0,4]") "}", 4, &st),
                           "byte length 4 does not match shape and dtype (8 bytes)");
}

static void test_malformed_layout(void **state)
{
    (void)state;
    tg_safetensors st;
    tu_assert_status_error(parse_image("{" T("w", "F32", "[1]", "[4,8]") "}", 8, &st),
                           "'w'", "not contiguous: starts at 4, expected 0");
    tu_assert_status_error(
        parse_image("{" T("a", "F32", "[2]", "[0,8]") "," T("b", "F32", "[2]", "[4,12]") "}", 12, &st),
        "'b'", "overlap");
    tu_assert_status_error(
        parse_image("{" T("a", "F32", "[1]", "[0,4]") "," T("b", "F32", "[1]", "[8,12]") "}", 12, &st),
        "'b'", "gap");
    tu_assert_status_error(parse_image("{" T("w", "F32", "[2]", "[0,8]") "}", 4, &st),
                           "'w'", "beyond the data buffer");
    tu_assert_status_error(parse_image("{" T("w", "F32", "[1]", "[0,4]") "}", 8, &st),
                           "4 trailing bytes");
    tu_assert_status_error(parse_image("{}", 3, &st), "3 trailing bytes");

    /* Header order need not be data order. */
    assert_int_equal(
        parse_image("{" T("b", "F32", "[1]", "[4,8]") "," T("a", "F32", "[1]", "[0,4]") "}", 8, &st), TG_OK);

    /* BOOL bytes must be 0 or 1. */
    size_t len;
    uint8_t *b = image("{" T("m", "BOOL", "[2]", "[0,2]") "}", -1, "\x01\x02", 2, &len);
    tg_tape *tp = tg_tape_new();
    tu_assert_status_error(tg_safetensors_parse(tp, b, len, &st), "'m'", "not 0 or 1");
    free(b);
    tg_tape_free(tp);
}

/* ---- F16 and BF16: read widened to float32 ------------------------------------------ */

/* 16-bit patterns and the float32 bits they widen to, exactly. */
static const struct {
    uint16_t h;
    uint32_t f;
} bf16_cases[] = {
    {0x3f80, 0x3f800000}, /* 1 */
    {0xc020, 0xc0200000}, /* -2.5 */
    {0x8000, 0x80000000}, /* -0 */
    {0x7f80, 0x7f800000}, /* inf */
    {0xff80, 0xff800000}, /* -inf */
    {0x7fc1, 0x7fc10000}, /* NaN, payload kept */
    {0x0001, 0x00010000}, /* the smallest subnormal */
    {0x7f7f, 0x7f7f0000}, /* the largest finite */
    {0x3eab, 0x3eab0000}, /* 0.333984375 */
}, f16_cases[] = {
    {0x3c00, 0x3f800000}, /* 1 */
    {0xc000, 0xc0000000}, /* -2 */
    {0x3555, 0x3eaaa000}, /* 0.333251953125 */
    {0x7bff, 0x477fe000}, /* 65504, the largest finite */
    {0x0001, 0x33800000}, /* 2^-24, the smallest subnormal */
    {0x03ff, 0x387fc000}, /* the largest subnormal */
    {0x0400, 0x38800000}, /* 2^-14, the smallest normal */
    {0x8001, 0xb3800000}, /* -2^-24 */
    {0x8000, 0x80000000}, /* -0 */
    {0x7c00, 0x7f800000}, /* inf */
    {0xfc00, 0xff800000}, /* -inf */
    {0x7e00, 0x7fc00000}, /* NaN */
    {0x7c01, 0x7f802000}, /* a signalling NaN's payload kept */
};
#define NBF16 (sizeof bf16_cases / sizeof bf16_cases[0])
#define NF16 (sizeof f16_cases / sizeof f16_cases[0])

static void assert_widened(const tg_safetensors *st, const char *name, bool bf16, const char *what)
{
    tg_tensor *t = tg_safetensors_get(st, name);
    if (!t) fail_msg("%s: no '%s'", what, name);
    assert_int_equal(t->dtype, TG_F32);
    assert_true(tg_is_contiguous(t));
    size_t n = bf16 ? NBF16 : NF16;
    assert_int_equal(tg_numel(t), (int64_t)n);
    const float *d = tg_data_ptr(t);
    for (size_t i = 0; i < n; i++) {
        uint32_t got, want = bf16 ? bf16_cases[i].f : f16_cases[i].f;
        memcpy(&got, d + i, sizeof got);
        if (got != want)
            fail_msg("%s: %s[%zu] (0x%04x) widened to 0x%08x, expected 0x%08x", what, name, i,
                     (unsigned)(bf16 ? bf16_cases[i].h : f16_cases[i].h), (unsigned)got, (unsigned)want);
    }
}

static void test_widened_16bit(void **state)
{
    (void)state;
    /* data: "a" F32 (2), "h" F16 (13), "b" BF16 (9, as (3, 3)), "e" BF16 (0), "z" U8 (1) */
    uint8_t data[8 + 2 * NF16 + 2 * NBF16 + 1];
    const float a[2] = {1.5f, -3.0f};
    memcpy(data, a, 8); /* the hosts this runs on are little-endian, as the file is */
    size_t k = 8;
    for (size_t i = 0; i < NF16; i++, k += 2)
        data[k] = (uint8_t)f16_cases[i].h, data[k + 1] = (uint8_t)(f16_cases[i].h >> 8);
    for (size_t i = 0; i < NBF16; i++, k += 2)
        data[k] = (uint8_t)bf16_cases[i].h, data[k + 1] = (uint8_t)(bf16_cases[i].h >> 8);
    data[k++] = 7;
    assert_int_equal(k, sizeof data);
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    T("z", "U8", "[1]", "[52,53]") "," T("b", "BF16", "[3,3]", "[34,52]") ","
                    T("e", "BF16", "[2,0]", "[52,52]") "," T("h", "F16", "[13]", "[8,34]") ","
                    T("a", "F32", "[2]", "[0,8]") "}";
    size_t len;
    uint8_t *img = image(h, -1, data, sizeof data, &len);
    tg_tape *tp = tg_tape_new();
    char *dir = make_tempdir(), path[256];
    snprintf(path, sizeof path, "%s/half.safetensors", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, len, f), len);
    fclose(f);
    for (int from_file = 0; from_file < 2; from_file++) {
        const char *what = from_file ? "load" : "parse";
        tg_safetensors st;
        int rc = from_file ? tg_safetensors_load(tp, path, &st) : tg_safetensors_parse(tp, img, len, &st);
        if (rc != TG_OK) fail_msg("%s: %s", what, tg_last_error());
        assert_int_equal(st.n, 5);
        const char *order[5] = {"a", "h", "b", "e", "z"}; /* data order */
        for (int i = 0; i < 5; i++) assert_string_equal(st.names[i], order[i]);
        assert_widened(&st, "h", false, what);
        assert_widened(&st, "b", true, what);
        tg_tensor *b = tg_safetensors_get(&st, "b"), *e = tg_safetensors_get(&st, "e");
        assert_int_equal(b->ndim, 2);
        assert_int_equal(b->shape[0], 3);
        assert_int_equal(e->dtype, TG_F32);
        assert_int_equal(tg_numel(e), 0);
        assert_true(tg_item_at(tg_safetensors_get(&st, "a"), 1) == -3.0);
        assert_int_equal((int)tg_item_at(tg_safetensors_get(&st, "z"), 0), 7);
        assert_int_equal(tg_safetensors_get(&st, "z")->dtype, TG_U8);

        /* saved again, a widened tensor is an F32 one: the writer has no 16-bit dtype */
        char out[300];
        snprintf(out, sizeof out, "%s/out.safetensors", dir);
        tg_named_tensor list[1] = {{"b", b}};
        assert_int_equal(tg_safetensors_save(out, list, 1), TG_OK);
        size_t olen;
        char *bytes = tu_read_file(out, &olen);
        assert_non_null(strstr(bytes + 8, "\"dtype\":\"F32\""));
        assert_int_equal(olen, 8 + (size_t)((uint8_t)bytes[0]) + 9 * 4);
        free(bytes);
        unlink(out);
        tg_tape_reset(tp);
    }

    /* truncated: the header's BF16 entry runs past the data, in memory and on disk */
    tg_safetensors st;
    uint8_t *cut = image("{" T("b", "BF16", "[3]", "[0,6]") "}", -1, "\x80\x3f\x80\x3f", 4, &len);
    tu_assert_status_error(tg_safetensors_parse(tp, cut, len, &st), "'b'", "beyond the data buffer (4 bytes)");
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(cut, 1, len, f), len);
    fclose(f);
    int rc = tg_safetensors_load(tp, path, &st);
    assert_int_equal(rc, TG_EFORMAT);
    tu_assert_status_error(rc, path, "'b'", "beyond the data buffer (4 bytes)");
    free(cut);
    /* a file cut short inside its data: the layout no longer covers it */
    f = fopen(path, "wb");
    assert_non_null(f);
    size_t img_len = 8 + strlen(h) + sizeof data;
    assert_int_equal(fwrite(img, 1, img_len - 5, f), img_len - 5);
    fclose(f);
    tu_assert_status_error(tg_safetensors_load(tp, path, &st), "'b'", "end 52 is beyond the data buffer (48 bytes)");
    /* a byte length that is not two per element */
    tu_assert_status_error(parse_image("{" T("b", "BF16", "[3]", "[0,4]") "}", 4, &st),
                           "byte length 4 does not match shape and dtype (6 bytes)");
    tu_assert_status_error(parse_image("{" T("h", "F16", "[2,2]", "[0,16]") "}", 16, &st),
                           "byte length 16 does not match shape and dtype (8 bytes)");
    unlink(path);
    rmdir(dir);
    free(dir);
    free(img);
    tg_tape_free(tp);
}

/* ---- Q8_0: TG_Q8 blocks (a half scale, then 32 int8), 34 bytes a block ---------------- */

/* A file at dir/name holding len bytes of b; the path in path. */
static void write_file(const char *dir, const char *name, const void *b, size_t len, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* nb blocks: block k's scale the half h (little-endian), its values
 * (k + i) % 64 - 32 for i = 0..31. */
static void make_blocks(uint8_t *b, size_t nb, uint16_t h)
{
    for (size_t k = 0; k < nb; k++) {
        uint8_t *p = b + k * 34;
        p[0] = (uint8_t)h;
        p[1] = (uint8_t)(h >> 8);
        for (int i = 0; i < 32; i++) p[2 + i] = (uint8_t)(int8_t)((int)((k + (size_t)i) % 64) - 32);
    }
}

/* A (3, 64) float32 tensor quantized (tg_to_dtype), saved beside a float32
 * and a uint8 tensor, read back: the same blocks, the same values. */
static void test_q8_round_trip(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    float xs[3 * 64];
    for (int i = 0; i < 3 * 64; i++) xs[i] = (float)((i * 37) % 101 - 50) / 7.0f;
    for (int i = 64; i < 96; i++) xs[i] = 0.0f; /* a block of zeros: scale 0 */
    tg_tensor *x = tg_from_data(tp, TG_F32, 2, (int64_t[]){3, 64}, xs);
    tg_tensor *q = tg_to_dtype(tp, x, TG_Q8);
    tu_assert_ok(q);
    assert_int_equal(q->dtype, TG_Q8);
    assert_int_equal(tg_tensor_nbytes(q), 6 * 34);
    const float bias[4] = {0.5f, -1.0f, 2.0f, 1e-3f};
    const uint8_t u8[3] = {7, 0, 255};
    tg_named_tensor list[] = {
        {"u8", tg_from_data(tp, TG_U8, 1, (int64_t[]){3}, u8)},
        {"w", q},
        {"bias", tg_from_data(tp, TG_F32, 1, (int64_t[]){4}, bias)},
        {"none", tg_empty(tp, TG_Q8, 2, (int64_t[]){0, 32})},
    };
    char *dir = make_tempdir(), path[256];
    snprintf(path, sizeof path, "%s/q8.safetensors", dir);
    assert_int_equal(tg_safetensors_save(path, list, 4), TG_OK);

    /* The header: "Q8_0", the logical shape, the blocks' bytes after the
     * float32 entry and before the uint8 one (sorted where I8 would be). */
    size_t len;
    uint8_t *bytes = (uint8_t *)tu_read_file(path, &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | bytes[i];
    assert_int_equal(len, 8 + hl + 16 + 204 + 3);
    json_error_t jerr;
    json_t *hdr = json_loadb((const char *)bytes + 8, (size_t)hl, 0, &jerr);
    assert_non_null(hdr);
    json_t *w = json_object_get(hdr, "w");
    assert_string_equal(json_string_value(json_object_get(w, "dtype")), "Q8_0");
    json_t *shape = json_object_get(w, "shape"), *offs = json_object_get(w, "data_offsets");
    assert_int_equal(json_array_size(shape), 2);
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), 3);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 64);
    assert_int_equal(json_integer_value(json_array_get(offs, 0)), 16);
    assert_int_equal(json_integer_value(json_array_get(offs, 1)), 16 + 204);
    json_t *none = json_object_get(hdr, "none");
    assert_string_equal(json_string_value(json_object_get(none, "dtype")), "Q8_0");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(none, "data_offsets"), 0)),
                     json_integer_value(json_array_get(json_object_get(none, "data_offsets"), 1)));
    assert_string_equal(json_string_value(json_object_get(json_object_get(hdr, "u8"), "dtype")), "U8");
    assert_memory_equal(bytes + 8 + hl + 16, tg_data_ptr(q), 204); /* the blocks as they are */
    json_decref(hdr);

    tg_tape *tp2 = tg_tape_new();
    for (int how = 0; how < 3; how++) { /* load, load_ex keeping bf16, parse from memory */
        tg_safetensors st;
        int rc = how == 0   ? tg_safetensors_load(tp2, path, &st)
                 : how == 1 ? tg_safetensors_load_ex(tp2, path, &(tg_safetensors_options){.keep_bf16 = true}, &st)
                            : tg_safetensors_parse(tp2, bytes, len, &st);
        if (rc != TG_OK) fail_msg("way %d: %s", how, tg_last_error());
        assert_int_equal(st.n, 4);
        assert_string_equal(st.names[0], "bias"); /* data order */
        assert_string_equal(st.names[3], "u8");
        tg_tensor *got = tg_safetensors_get(&st, "w");
        tu_assert_ok(got);
        assert_int_equal(got->dtype, TG_Q8);
        assert_ptr_equal(got->tape, tp2);
        assert_false(got->requires_grad);
        assert_true(tg_same_shape(got, q));
        assert_int_equal(tg_tensor_nbytes(got), 204);
        assert_memory_equal(tg_data_ptr(got), tg_data_ptr(q), 204);
        for (int64_t r = 0; r < 3; r++)
            for (int64_t c = 0; c < 64; c++) {
                int64_t idx[2] = {r, c};
                double v = tg_get(got, idx), want = tg_get(q, idx), xv = xs[r * 64 + c];
                if (v != want) fail_msg("way %d: w[%lld][%lld] = %.9g, expected %.9g", how, (long long)r,
                                        (long long)c, v, want);
                /* and the blocks stand for x: within a step of the block's scale */
                if (fabs(v - xv) > 50.0 / 7.0 / 127.0) fail_msg("w[%lld][%lld] = %.9g, x %.9g", (long long)r,
                                                               (long long)c, v, xv);
            }
        assert_true(tg_get(got, (int64_t[]){1, 5}) == 0.0); /* the zero block */
        tg_tensor *e = tg_safetensors_get(&st, "none");
        assert_int_equal(e->dtype, TG_Q8);
        assert_int_equal(tg_numel(e), 0);
        assert_int_equal(e->shape[1], 32);
        tg_tensor *b = tg_safetensors_get(&st, "bias");
        assert_int_equal(b->dtype, TG_F32);
        assert_memory_equal(tg_data_ptr(b), bias, sizeof bias);
        assert_memory_equal(tg_data_ptr(tg_safetensors_get(&st, "u8")), u8, 3);
        tg_tape_reset(tp2);
    }

    /* A view whose blocks are not back to back is refused, nothing written. */
    tg_tensor *view = tg_empty(tp, TG_F32, 0, NULL);
    *view = *q;
    view->shape[0] = 64;
    view->shape[1] = 3;
    view->stride[0] = 1;
    view->stride[1] = 64;
    tg_named_tensor bad[1] = {{"wt", view}};
    char other[300];
    snprintf(other, sizeof other, "%s/view.safetensors", dir);
    tu_assert_one_line_error(tg_safetensors_save(other, bad, 1), "'wt'", "q8_0 view");
    assert_int_equal(count_entries(dir), 1);

    free(bytes);
    unlink(path);
    rmdir(dir);
    free(dir);
    tg_tape_free(tp2);
    tg_tape_free(tp);
}

/* Blocks written by hand, read from memory: the values are q * d exactly. */
static void test_q8_parse_memory(void **state)
{
    (void)state;
    uint8_t data[3 * 34 + 2];
    make_blocks(data, 3, 0x3800); /* d = 0.5 */
    data[34] = 0x00, data[35] = 0xc0; /* block 1: d = -2 */
    data[102] = 9, data[103] = 1;     /* "u": U8 (2) after the blocks */
    size_t len;
    uint8_t *img = image("{" T("u", "U8", "[2]", "[102,104]") "," T("w", "Q8_0", "[1,96]", "[0,102]") "}", -1, data,
                         sizeof data, &len);
    tg_tape *tp = tg_tape_new();
    tg_safetensors st;
    int rc = tg_safetensors_parse(tp, img, len, &st);
    if (rc != TG_OK) fail_msg("%s", tg_last_error());
    assert_int_equal(st.n, 2);
    tg_tensor *w = tg_safetensors_get(&st, "w");
    assert_int_equal(w->dtype, TG_Q8);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->shape[1], 96);
    assert_true(tg_is_contiguous(w));
    assert_memory_equal(tg_data_ptr(w), data, 102);
    assert_ptr_not_equal(tg_data_ptr(w), img + len - sizeof data); /* its own storage, not the buffer */
    for (int64_t c = 0; c < 96; c++) {
        int k = (int)(c / 32), i = (int)(c % 32);
        double want = (double)(((k + i) % 64) - 32) * (k == 1 ? -2.0 : 0.5);
        double got = tg_get(w, (int64_t[]){0, c});
        if (got != want) fail_msg("w[0][%lld] = %.9g, expected %.9g", (long long)c, got, want);
    }
    assert_int_equal((int)tg_item_at(tg_safetensors_get(&st, "u"), 1), 1);
    free(img);
    tg_tape_free(tp);
}

/* Malformed Q8_0 entries: one line each, naming the entry. */
static void test_q8_malformed(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_safetensors st;
    char *dir = make_tempdir(), path[256];

    /* shapes */
    int rc = parse_image("{" T("w", "Q8_0", "[2,48]", "[0,102]") "}", 102, &st);
    assert_int_equal(rc, TG_EFORMAT);
    tu_assert_one_line_error(rc, "safetensors_parse", "'w'", "Q8_0 last dim 48 is not a multiple of 32");
    rc = parse_image("{" T("w", "Q8_0", "[]", "[0,34]") "}", 34, &st);
    assert_int_equal(rc, TG_EFORMAT);
    tu_assert_one_line_error(rc, "'w'", "Q8_0 with a 0-dim shape");
    tu_assert_one_line_error(parse_image("{" T("w", "Q8_0", "[64,16]", "[0,1088]") "}", 1088, &st), "'w'",
                             "last dim 16 is not a multiple of 32");

    /* a byte count that is not numel / 32 * 34 */
    rc = parse_image("{" T("w", "Q8_0", "[2,32]", "[0,64]") "}", 64, &st);
    assert_int_equal(rc, TG_EFORMAT);
    tu_assert_one_line_error(rc, "'w'", "Q8_0 needs 68 bytes (2 blocks of 34), the offsets give 64");
    tu_assert_one_line_error(parse_image("{" T("w", "Q8_0", "[64]", "[0,256]") "}", 256, &st), "'w'",
                             "needs 68 bytes (2 blocks of 34), the offsets give 256");

    /* truncated inside the blocks, in memory and on disk */
    uint8_t blocks[18 * 34];
    make_blocks(blocks, 18, 0x3c00);
    size_t len;
    uint8_t *cut = image("{" T("w", "Q8_0", "[2,32]", "[0,68]") "}", -1, blocks, 50, &len);
    rc = tg_safetensors_parse(tp, cut, len, &st);
    assert_int_equal(rc, TG_EFORMAT);
    tu_assert_one_line_error(rc, "'w'", "end 68 is beyond the data buffer (50 bytes)");
    write_file(dir, "cut.safetensors", cut, len, path, sizeof path);
    rc = tg_safetensors_load(tp, path, &st);
    assert_int_equal(rc, TG_EFORMAT);
    tu_assert_one_line_error(rc, path, "'w'", "end 68 is beyond the data buffer (50 bytes)");
    free(cut);
    unlink(path);

    /* a scale that is NaN or infinite, in any block (18 of them here) */
    const struct {
        size_t block;
        uint16_t h;
        const char *msg;
    } bad[] = {
        {17, 0x7e00, "'w': block 17's scale is NaN"},
        {9, 0xfc01, "'w': block 9's scale is NaN"},
        {0, 0x7c00, "'w': block 0's scale is +inf"},
        {5, 0xfc00, "'w': block 5's scale is -inf"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        uint8_t b[18 * 34];
        memcpy(b, blocks, sizeof b);
        b[bad[k].block * 34] = (uint8_t)bad[k].h;
        b[bad[k].block * 34 + 1] = (uint8_t)(bad[k].h >> 8);
        uint8_t *img = image("{" T("w", "Q8_0", "[3,192]", "[0,612]") "}", -1, b, sizeof b, &len);
        rc = tg_safetensors_parse(tp, img, len, &st);
        assert_int_equal(rc, TG_EFORMAT);
        tu_assert_one_line_error(rc, "safetensors_parse", bad[k].msg);
        write_file(dir, "bad.safetensors", img, len, path, sizeof path);
        rc = tg_safetensors_load(tp, path, &st);
        assert_int_equal(rc, TG_EFORMAT);
        tu_assert_one_line_error(rc, path, bad[k].msg);
        assert_int_equal(st.n, 0);
        unlink(path);
        free(img);
        tg_tape_reset(tp);
    }
    /* the largest finite scales and subnormal ones are fine */
    blocks[0] = 0xff, blocks[1] = 0x7b;   /* 65504 */
    blocks[34] = 0x01, blocks[35] = 0x80; /* -2^-24 */
    uint8_t *img = image("{" T("w", "Q8_0", "[3,192]", "[0,612]") "}", -1, blocks, sizeof blocks, &len);
    rc = tg_safetensors_parse(tp, img, len, &st);
    if (rc != TG_OK) fail_msg("%s", tg_last_error());
    assert_true(tg_get(st.tensors[0], (int64_t[]){0, 1}) == 65504.0 * -31);
    free(img);

    rmdir(dir);
    free(dir);
    tg_tape_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_files),
        cmocka_unit_test(test_save_matches_reference_bytes),
        cmocka_unit_test(test_round_trip_all_dtypes),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_malformed_sizes),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_malformed_entries),
        cmocka_unit_test(test_malformed_layout),
        cmocka_unit_test(test_widened_16bit),
        cmocka_unit_test(test_q8_round_trip),
        cmocka_unit_test(test_q8_parse_memory),
        cmocka_unit_test(test_q8_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
