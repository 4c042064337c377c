/* GPT-2's tokenizer (src/data/tokenizer.c) against tests/ref/tokenizer.json
 * (tools/reference/tokenizer.py: GPT-2's published encoder, checked against
 * npm tiktoken's "gpt2" encoding), the byte round trip, and the documented
 * errors for invalid UTF-8, bad ids and malformed vocabulary files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static tg_tokenizer *tok; /* loaded once (tests/../data/gpt2) */

static const char *data_path(char *buf, size_t size, const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "../../data/%s", file);
    return tu_ref_path(buf, size, rel);
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
    return 0;
}

/* Encodes text and checks the ids and the exact round trip. */
static void check_ids(const char *name, const char *text, size_t len, const json_t *want)
{
    int64_t *ids;
    size_t n;
    if (tg_tokenizer_encode(tok, text, len, &ids, &n) != TG_OK) fail_msg("%s: %s", name, tg_last_error());
    if (n != json_array_size(want)) fail_msg("%s: %zu ids, want %zu", name, n, json_array_size(want));
    for (size_t i = 0; i < n; i++)
        if (ids[i] != json_integer_value(json_array_get(want, i)))
            fail_msg("%s: id %zu is %lld, want %lld", name, i, (long long)ids[i],
                     (long long)json_integer_value(json_array_get(want, i)));
    char *back;
    size_t blen;
    assert_int_equal(tg_tokenizer_decode(tok, ids, n, &back, &blen), TG_OK);
    if (blen != len || memcmp(back, text, len) != 0) fail_msg("%s: decode(encode(text)) != text", name);
    free(back);
    free(ids);
}

static void test_reference_ids(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("tokenizer.json");
    const json_t *cases = json_object_get(ref, "cases");
    assert_true(json_array_size(cases) >= 20);
    size_t i;
    const json_t *c;
    bool verdict = false;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *text = json_object_get(c, "text"), *ids = json_object_get(c, "ids");
        if (json_is_string(text)) {
            check_ids(name, json_string_value(text), json_string_length(text), ids);
        } else {
            char path[4096];
            size_t len;
            char *t = tu_read_file(data_path(path, sizeof path, json_string_value(json_object_get(text, "file"))), &len);
            check_ids(name, t, len, ids);
            check_ids(name, t, len, ids); /* again, from the word cache */
            verdict = json_array_size(ids) == 5145;
            free(t);
        }
    }
    assert_true(verdict); /* the book's figure: the-verdict.txt is 5,145 ids */
    json_decref(ref);
}

static void test_basics(void **state)
{
    (void)state;
    assert_int_equal(tg_tokenizer_vocab_size(tok), 50257);
    assert_int_equal(tg_tokenizer_eot(tok), 50256);
    tg_tape *tp = tg_tape_new();
    const char *s = "Hello, world<|endoftext|>";
    tg_tensor *x = tg_tokenizer_encode_tensor(tp, tok, s, strlen(s));
    tu_assert_ok(x);
    assert_int_equal(x->dtype, TG_I64);
    assert_int_equal(x->ndim, 1);
    assert_int_equal(x->shape[0], 4);
    const int64_t want[] = {15496, 11, 995, 50256};
    for (int i = 0; i < 4; i++) assert_int_equal(((const int64_t *)tg_data_ptr(x))[i], want[i]);
    /* the empty text: no ids, no allocation */
    int64_t *ids = (int64_t *)1;
    size_t n = 7;
    assert_int_equal(tg_tokenizer_encode(tok, "", 0, &ids, &n), TG_OK);
    assert_null(ids);
    assert_int_equal(n, 0);
    tg_tensor *e = tg_tokenizer_encode_tensor(tp, tok, "", 0);
    tu_assert_ok(e);
    assert_int_equal(tg_numel(e), 0);
    tg_tape_free(tp);
}

/* The ids of text, after checking that they decode to it byte for byte. */
static int64_t *round_trip(const char *text, size_t len, size_t *n)
{
    int64_t *ids;
    assert_int_equal(tg_tokenizer_encode(tok, text, len, &ids, n), TG_OK);
    char *back;
    size_t blen;
    assert_int_equal(tg_tokenizer_decode(tok, ids, *n, &back, &blen), TG_OK);
    assert_int_equal(blen, len);
    assert_memory_equal(back, text, len);
    free(back);
    return ids;
}

/* Random valid UTF-8 (ASCII, 2-, 3- and 4-byte characters, spaces and
 * "<|endoftext|>" pieces) survives encode then decode byte for byte. */
static void test_round_trip_random(void **state)
{
    (void)state;
    uint64_t s = 12345;
    char buf[4096];
    for (int iter = 0; iter < 200; iter++) {
        size_t len = 0;
        while (len + 16 < sizeof buf) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t r = (uint32_t)(s >> 33), kind = r % 8;
            uint32_t cp = kind < 3 ? 0x20 + r % 95 : kind == 3 ? (uint32_t)" \t\n\r"[r % 4] : kind == 4 ? 0x80 + r % 0x780
                        : kind == 5 ? 0x800 + r % 0xF800 : kind == 6 ? 0x10000 + r % 0x100000 : 0;
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
            if (kind == 7) {
                if (r % 16 == 0) memcpy(buf + len, "<|endoftext|>", 13), len += 13;
                continue;
            }
            if (cp < 0x80) {
                buf[len++] = (char)cp;
            } else if (cp < 0x800) {
                buf[len++] = (char)(0xC0 | cp >> 6), buf[len++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                buf[len++] = (char)(0xE0 | cp >> 12), buf[len++] = (char)(0x80 | (cp >> 6 & 0x3F));
                buf[len++] = (char)(0x80 | (cp & 0x3F));
            } else {
                buf[len++] = (char)(0xF0 | cp >> 18), buf[len++] = (char)(0x80 | (cp >> 12 & 0x3F));
                buf[len++] = (char)(0x80 | (cp >> 6 & 0x3F)), buf[len++] = (char)(0x80 | (cp & 0x3F));
            }
            if (r % 64 == 0) break;
        }
        size_t n;
        free(round_trip(buf, len, &n));
    }
}

/* More distinct words than the word cache holds (it starts over): the same
 * ids on a second pass, and the exact round trip. */
static void test_cache_overflow(void **state)
{
    (void)state;
    size_t words = 300000, cap = words * 8, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (size_t w = 0; w < words; w++) {
        text[len++] = ' ';
        for (size_t v = w + 1; v; v /= 26) text[len++] = (char)('a' + v % 26);
    }
    size_t na, nb;
    int64_t *a = round_trip(text, len, &na), *b = round_trip(text, len, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(a);
    free(b);
    free(text);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *bytes;
        size_t len;
        const char *where;
    } bad[] = {
        {"\xff", 1, "at byte 0"},
        {"abc\x80", 4, "at byte 3"},             /* a lone continuation byte */
        {"ab\xc0\x80", 4, "at byte 2"},          /* an overlong NUL */
        {"x\xe0\x80\xaf", 4, "at byte 1"},       /* an overlong '/' */
        {"\xed\xa0\x80", 3, "at byte 0"},        /* a UTF-16 surrogate */
        {"hi \xf4\x90\x80\x80", 7, "at byte 3"}, /* beyond U+10FFFF */
        {"abc\xe6\x97", 5, "at byte 3"},         /* truncated at the end */
        {"\xe6\x97" "a", 3, "at byte 0"},        /* a continuation missing */
        {"ok<|endoftext|>\xfe", 16, "at byte 15"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t *ids = (int64_t *)1;
        size_t n = 7;
        tu_assert_status_error(tg_tokenizer_encode(tok, bad[i].bytes, bad[i].len, &ids, &n), "invalid UTF-8",
                               bad[i].where);
        assert_null(ids);
        assert_int_equal(n, 0);
        tg_tape *tp = tg_tape_new();
        tu_assert_null_error(tg_tokenizer_encode_tensor(tp, tok, bad[i].bytes, bad[i].len), "invalid UTF-8");
        tg_tape_free(tp);
    }
}

static void test_decode(void **state)
{
    (void)state;
    char *text = (char *)1;
    size_t len = 7;
    const int64_t big[] = {15496, 50257};
    tu_assert_status_error(tg_tokenizer_decode(tok, big, 2, &text, &len), "id 50257", "position 1", "50257 ids");
    assert_null(text);
    assert_int_equal(len, 0);
    const int64_t neg[] = {-1};
    tu_assert_status_error(tg_tokenizer_decode(tok, neg, 1, &text, &len), "id -1", "position 0");
    /* ids may split a character: decoding gives the raw bytes (here 0xE6 0x97) */
    const int64_t part[] = {162, 245};
    assert_int_equal(tg_tokenizer_decode(tok, part, 2, &text, &len), TG_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(text, "\xe6\x97", 2);
    free(text);
    assert_int_equal(tg_tokenizer_decode(tok, NULL, 0, &text, &len), TG_OK);
    assert_int_equal(len, 0);
    assert_string_equal(text, "");
    free(text);
}

static void test_null_arguments(void **state)
{
    (void)state;
    int64_t *ids;
    size_t n;
    char *text;
    size_t len;
    tu_assert_status_error(tg_tokenizer_encode(NULL, "a", 1, &ids, &n), "NULL");
    tu_assert_status_error(tg_tokenizer_encode(tok, NULL, 1, &ids, &n), "NULL");
    tu_assert_status_error(tg_tokenizer_encode(tok, "a", 1, NULL, &n), "NULL");
    tu_assert_status_error(tg_tokenizer_decode(NULL, NULL, 0, &text, &len), "NULL");
    tu_assert_status_error(tg_tokenizer_decode(tok, NULL, 1, &text, &len), "NULL");
    tu_assert_null_error(tg_tokenizer_load(NULL, "x"), "NULL");
    assert_int_equal(tg_tokenizer_vocab_size(NULL), -1);
    tg_tokenizer_free(NULL);
}

/* tg_tokenizer_load_dir(NULL): $TAPEGRAD_DATA/gpt2, else the installed
 * vocabulary (a build tree's prefix may or may not hold one). */
static void test_default_dir(void **state)
{
    (void)state;
    char *saved = getenv("TAPEGRAD_DATA") ? strdup(getenv("TAPEGRAD_DATA")) : NULL;
    char data[4096], want[4096 + 8];
    data_path(data, sizeof data, "");
    snprintf(want, sizeof want, "%s/gpt2", data);

    assert_int_equal(setenv("TAPEGRAD_DATA", data, 1), 0);
    const char *dir = tg_tokenizer_default_dir();
    assert_non_null(dir);
    assert_string_equal(dir, want);
    tg_tokenizer *t = tg_tokenizer_load_dir(NULL);
    assert_non_null(t);
    int64_t *ids;
    size_t n;
    assert_int_equal(tg_tokenizer_encode(t, "Hello", 5, &ids, &n), TG_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 15496);
    free(ids);
    tg_tokenizer_free(t);

    assert_int_equal(setenv("TAPEGRAD_DATA", "/nonexistent/tapegrad-data", 1), 0);
    tu_assert_null_error(tg_tokenizer_default_dir(), "TAPEGRAD_DATA=/nonexistent/tapegrad-data has no gpt2/encoder.json");
    tu_assert_null_error(tg_tokenizer_load_dir(NULL), "has no gpt2/encoder.json");
    char *longdir = malloc(5000);
    assert_non_null(longdir);
    memset(longdir, 'a', 4999);
    longdir[4999] = '\0';
    assert_int_equal(setenv("TAPEGRAD_DATA", longdir, 1), 0);
    tu_assert_null_error(tg_tokenizer_load_dir(NULL), "TAPEGRAD_DATA is too long");
    free(longdir);

    /* unset: the installed folder, or an error that says it is not installed */
    assert_int_equal(unsetenv("TAPEGRAD_DATA"), 0);
    dir = tg_tokenizer_default_dir();
    if (dir) {
        char path[4096 + 16];
        snprintf(path, sizeof path, "%s/encoder.json", dir);
        assert_int_equal(access(path, R_OK), 0);
    } else {
        assert_non_null(strstr(tg_last_error(), "not installed"));
    }
    if (saved) setenv("TAPEGRAD_DATA", saved, 1);
    free(saved);
}

/* ---- malformed vocabulary files ---------------------------------------------------------------- */

static char tmpdir[64];

static const char *write_tmp(const char *name, const char *content, size_t len)
{
    static char path[2][160];
    static int k;
    char *p = path[k++ % 2];
    snprintf(p, sizeof path[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(content, 1, len, f), len);
    fclose(f);
    return p;
}

/* encoder.json with the 256 byte tokens, "ab" and "<|endoftext|>", plus extra */
static char *small_encoder(const char *extra)
{
    size_t cap = 16384, n = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    n += (size_t)snprintf(s + n, cap - n, "{");
    int shifted = 0;
    for (int b = 0; b < 256; b++) { /* byte b is id b */
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)shifted++;
        char key[8];
        if (cp == '"' || cp == '\\') snprintf(key, sizeof key, "\\%c", (char)cp);
        else if (cp < 0x80) snprintf(key, sizeof key, "%c", (char)cp);
        else snprintf(key, sizeof key, "%c%c", (char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F)));
        n += (size_t)snprintf(s + n, cap - n, "\"%s\": %d, ", key, b);
    }
    n += (size_t)snprintf(s + n, cap - n, "\"ab\": 256, \"<|endoftext|>\": 257%s}", extra);
    return s;
}

static void expect_load_error(const char *enc, size_t enc_len, const char *bpe, const char *what1, const char *what2)
{
    char e[160], b[160];
    snprintf(e, sizeof e, "%s", write_tmp("encoder.json", enc, enc_len));
    snprintf(b, sizeof b, "%s", write_tmp("vocab.bpe", bpe, strlen(bpe)));
    tu_assert_null_error(tg_tokenizer_load(e, b), what1, what2);
}

static void test_malformed_vocabulary(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tg_tok_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));

    /* a well-formed small vocabulary loads and merges */
    char *good = small_encoder("");
    const char *bpe = "#version: 0.2\na b\n";
    char e[160], b[160];
    snprintf(e, sizeof e, "%s", write_tmp("encoder.json", good, strlen(good)));
    snprintf(b, sizeof b, "%s", write_tmp("vocab.bpe", bpe, strlen(bpe)));
    tg_tokenizer *t = tg_tokenizer_load(e, b);
    tu_assert_ok(t);
    assert_int_equal(tg_tokenizer_vocab_size(t), 258);
    assert_int_equal(tg_tokenizer_eot(t), 257);
    int64_t *ids;
    size_t n;
    assert_int_equal(tg_tokenizer_encode(t, "abc", 3, &ids, &n), TG_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 256);
    assert_int_equal(ids[1], 'c');
    free(ids);
    tg_tokenizer_free(t);

    /* missing files */
    char missing[200];
    snprintf(missing, sizeof missing, "%s/none.json", tmpdir);
    tu_assert_null_error(tg_tokenizer_load(missing, b), "none.json");
    tu_assert_null_error(tg_tokenizer_load(e, missing), "cannot open", "none.json");
    tu_assert_null_error(tg_tokenizer_load_dir(tmpdir + 4 /* "tg_tok_...", relative: absent */), "encoder.json");

    /* encoder.json */
    expect_load_error(good, strlen(good) / 2, bpe, "encoder.json", "line"); /* truncated */
    expect_load_error("[1, 2]", 6, bpe, "encoder.json", "JSON object");
    expect_load_error("{}", 2, bpe, "encoder.json", "non-empty");
    char *ext = small_encoder(", \"x y\": \"7\"");
    expect_load_error(ext, strlen(ext), bpe, "\"x y\"", "not an integer");
    free(ext);
    ext = small_encoder(", \"zz\": -3");
    expect_load_error(ext, strlen(ext), bpe, "\"zz\"", "not an integer");
    free(ext);
    ext = small_encoder(", \"\\u00e9\": 300"); /* U+00E9 stands for byte 0xE9, already a token */
    expect_load_error(ext, strlen(ext), bpe, "encoder.json", "duplicate object key");
    free(ext);
    ext = small_encoder(", \"\\u4e2d\": 300"); /* U+4E2D is outside GPT-2's byte alphabet */
    expect_load_error(ext, strlen(ext), bpe, "byte alphabet", NULL);
    free(ext);
    ext = small_encoder(", \"\": 300");
    expect_load_error(ext, strlen(ext), bpe, "empty", NULL);
    free(ext);
    ext = small_encoder(", \"cd\": 256");
    expect_load_error(ext, strlen(ext), bpe, "id 256", "two tokens");
    free(ext);
    ext = small_encoder(", \"cd\": 99999999");
    expect_load_error(ext, strlen(ext), bpe, "\"cd\"", "[0, 2^24)");
    free(ext);
    const char *no_bytes = "{\"a\": 0, \"b\": 1}";
    expect_load_error(no_bytes, strlen(no_bytes), "#version: 0.2\n", "no token for byte 0x00", NULL);

    /* vocab.bpe */
    expect_load_error(good, strlen(good), "#version: 0.2\nab\n", "vocab.bpe line 2", "two tokens");
    expect_load_error(good, strlen(good), "#version: 0.2\na b c\n", "vocab.bpe line 2", "two tokens");
    expect_load_error(good, strlen(good), "a b\nc d\n", "line 2", "the vocabulary lacks");
    expect_load_error(good, strlen(good), "a \xe4\xb8\xad\n", "line 1", "the vocabulary lacks");
    expect_load_error(good, strlen(good), "a \xff\n", "line 1", "the vocabulary lacks");
    free(good);

    char path[200];
    snprintf(path, sizeof path, "%s/encoder.json", tmpdir);
    unlink(path);
    snprintf(path, sizeof path, "%s/vocab.bpe", tmpdir);
    unlink(path);
    rmdir(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_ids),     cmocka_unit_test(test_basics),
        cmocka_unit_test(test_round_trip_random), cmocka_unit_test(test_cache_overflow),
        cmocka_unit_test(test_invalid_utf8),      cmocka_unit_test(test_decode),
        cmocka_unit_test(test_null_arguments),    cmocka_unit_test(test_malformed_vocabulary),
        cmocka_unit_test(test_default_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
