/* GPT-2's byte-level BPE (include/tapegrad/data.h), equal to tiktoken's
 * "gpt2" encoding.
 *
 *   encode: split at "<|endoftext|>"; cut each part with GPT-2's pattern
 *           (PCRE2, JIT, Unicode properties); for each piece, the word cache
 *           or BPE: start from one token per byte and repeatedly merge the
 *           adjacent pair of lowest rank (vocab.bpe's line order), leftmost
 *           first, with a heap of candidate pairs (n log n on a long word).
 *   decode: the tokens' bytes back to back.
 * Tokens are kept as raw bytes: encoder.json's keys are mapped back through
 * GPT-2's byte alphabet (bytes_to_unicode: printable Latin-1 bytes stand for
 * themselves, the other 68 bytes for U+0100 ...). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_internal.h"

static const char PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char EOT[] = "<|endoftext|>";
#define EOT_LEN (sizeof EOT - 1)

/* ---- a hash map from byte strings (kept in an arena) to a value ---------------------------- */

typedef struct {
    uint64_t hash;
    uint32_t off, len; /* key bytes in the arena */
    int64_t val;
    bool used;
} bslot;

typedef struct {
    bslot *slots;
    size_t cap, n; /* cap a power of two */
    char *arena;
    size_t arena_len, arena_cap;
} bmap;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* Eight bytes at a time (words are short; this is most of a cache lookup). */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n, w;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 31;
    }
    w = 0;
    memcpy(&w, s, n);
    return mix(h ^ w);
}

static void bmap_free(bmap *m)
{
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

static bool bmap_grow(bmap *m)
{
    size_t cap = m->cap ? 2 * m->cap : 1024;
    bslot *s = calloc(cap, sizeof *s);
    if (!s) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used) continue;
        size_t j = m->slots[i].hash & (cap - 1);
        while (s[j].used) j = (j + 1) & (cap - 1);
        s[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = s, m->cap = cap;
    return true;
}

/* The slot of key (found, or the empty one where it would go). */
static bslot *bmap_slot(const bmap *m, const char *key, size_t len, uint64_t h)
{
    size_t j = h & (m->cap - 1);
    while (m->slots[j].used) {
        bslot *s = &m->slots[j];
        if (s->hash == h && s->len == len && memcmp(m->arena + s->off, key, len) == 0) return s;
        j = (j + 1) & (m->cap - 1);
    }
    return &m->slots[j];
}

static bool bmap_get(const bmap *m, const char *key, size_t len, int64_t *val)
{
    if (!m->cap) return false;
    bslot *s = bmap_slot(m, key, len, hash_bytes(key, len));
    if (!s->used) return false;
    *val = s->val;
    return true;
}

/* Inserts or overwrites; false when out of memory. */
static bool bmap_put(bmap *m, const char *key, size_t len, int64_t val)
{
    if ((m->n + 1) * 2 > m->cap && !bmap_grow(m)) return false;
    uint64_t h = hash_bytes(key, len);
    bslot *s = bmap_slot(m, key, len, h);
    if (s->used) {
        s->val = val;
        return true;
    }
    if (m->arena_len + len > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 4096;
        while (cap < m->arena_len + len) cap *= 2;
        char *a = realloc(m->arena, cap);
        if (!a) return false;
        m->arena = a, m->arena_cap = cap;
    }
    memcpy(m->arena + m->arena_len, key, len);
    *s = (bslot){h, (uint32_t)m->arena_len, (uint32_t)len, val, true};
    m->arena_len += len;
    m->n++;
    return true;
}

/* ---- merges: (left id, right id) -> (rank, merged id) --------------------------------------------- */

typedef struct {
    uint64_t key; /* left << 32 | right, + 1 so that 0 is empty */
    int32_t rank, merged;
} mslot;

/* ---- the tokenizer ------------------------------------------------------------------------------- */

#define CACHE_MAX_WORDS (1u << 18)
#define CACHE_MAX_IDS (1u << 22)

struct tg_tokenizer {
    int64_t vocab_size, eot;
    uint32_t *tok_off, *tok_len; /* per id: its bytes in enc's arena (len 0: no such id) */
    bmap enc;                    /* token bytes -> id */
    int32_t byte_id[256];
    mslot *merges;
    size_t mcap;
    /* word cache: piece bytes -> (offset << 20 | count) into cache_ids */
    bmap cache;
    int32_t *cache_ids;
    size_t cache_n, cache_cap;
    pcre2_code *re;
    pcre2_match_data *md;
};

static const mslot *merge_find(const tg_tokenizer *t, int32_t l, int32_t r)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    size_t j = mix(key) & (t->mcap - 1);
    while (t->merges[j].key) {
        if (t->merges[j].key == key) return &t->merges[j];
        j = (j + 1) & (t->mcap - 1);
    }
    return NULL;
}

/* GPT-2's bytes_to_unicode: byte -> code point. */
static void byte_alphabet(uint32_t cp[256])
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* A key of encoder.json / a half of a vocab.bpe line, in GPT-2's byte
 * alphabet, back to bytes (out has room for len bytes). -1 if a character
 * is outside the alphabet or the text is not UTF-8. */
static long alphabet_to_bytes(const int16_t *inv, const char *s, size_t len, char *out)
{
    size_t i = 0, o = 0;
    uint32_t cp;
    while (i < len) {
        size_t k = tg__utf8_len((const unsigned char *)s + i, len - i, &cp);
        if (!k || cp >= 512 || inv[cp] < 0) return -1;
        out[o++] = (char)inv[cp];
        i += k;
    }
    return (long)o;
}

void tg_tokenizer_free(tg_tokenizer *t)
{
    if (!t) return;
    free(t->tok_off);
    free(t->tok_len);
    bmap_free(&t->enc);
    bmap_free(&t->cache);
    free(t->merges);
    free(t->cache_ids);
    if (t->md) pcre2_match_data_free(t->md);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

static int load_encoder(tg_tokenizer *t, const char *path, const int16_t *inv)
{
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        if (err.line <= 0) return tg_error_status(TG_EIO, "tokenizer: cannot read %s: %s", path, err.text);
        return tg_error_status(TG_EFORMAT, "tokenizer: %s line %d: %s", path, err.line, err.text);
    }
    int st = TG_OK;
    if (!json_is_object(root) || json_object_size(root) == 0)
        st = tg_error_status(TG_EFORMAT, "tokenizer: %s must be a non-empty JSON object of token -> id", path);
    const char *key;
    json_t *val;
    int64_t max_id = -1;
    char buf[1024];
    if (st == TG_OK)
        json_object_foreach(root, key, val) {
            size_t klen = strlen(key);
            if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= INT32_MAX) {
                st = tg_error_status(TG_EFORMAT, "tokenizer: %s: the id of \"%.60s\" is not an integer in [0, 2^31)",
                                     path, key);
                break;
            }
            long n = klen <= sizeof buf ? alphabet_to_bytes(inv, key, klen, buf) : -1;
            if (n <= 0) {
                st = tg_error_status(TG_EFORMAT, "tokenizer: %s: token \"%.60s\" is empty, too long or not in GPT-2's byte alphabet",
                                     path, key);
                break;
            }
            int64_t id = json_integer_value(val); /* keys are distinct (JSON_REJECT_DUPLICATES), so are their bytes */
            if (!bmap_put(&t->enc, buf, (size_t)n, id)) {
                st = tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
                break;
            }
            if (id > max_id) max_id = id;
        }
    json_decref(root);
    if (st != TG_OK) return st;
    if (max_id >= 1 << 24)
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: id %lld is implausibly large", path, (long long)max_id);
    t->vocab_size = max_id + 1;
    t->tok_off = calloc((size_t)t->vocab_size, sizeof *t->tok_off);
    t->tok_len = calloc((size_t)t->vocab_size, sizeof *t->tok_len);
    if (!t->tok_off || !t->tok_len) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < t->enc.cap; i++) {
        const bslot *s = &t->enc.slots[i];
        if (!s->used) continue;
        if (t->tok_len[s->val])
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: id %lld is given to two tokens", path, (long long)s->val);
        t->tok_off[s->val] = s->off, t->tok_len[s->val] = s->len;
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int64_t id;
        if (!bmap_get(&t->enc, &c, 1, &id))
            return tg_error_status(TG_EFORMAT, "tokenizer: %s has no token for byte 0x%02x", path, b);
        t->byte_id[b] = (int32_t)id;
    }
    int64_t eot;
    t->eot = bmap_get(&t->enc, EOT, EOT_LEN, &eot) ? eot : -1;
    return TG_OK;
}

static char *read_file(const char *path, size_t *len)
{
    int err;
    char *buf = tg__read_file(path, (size_t)1 << 30, len, &err);
    if (!buf && err != EIO && err != ENOMEM && err != EFBIG) return tg_error("tokenizer: cannot open %s", path);
    if (!buf) return tg_error("tokenizer: cannot read %s", path);
    return buf;
}

static int load_merges(tg_tokenizer *t, const char *path, const int16_t *inv)
{
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text) return TG_EIO;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    t->mcap = 1024;
    while (t->mcap < 2 * lines) t->mcap *= 2;
    t->merges = calloc(t->mcap, sizeof *t->merges);
    int st = t->merges ? TG_OK : tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    char a[512], b[512], ab[1024];
    int32_t rank = 0;
    size_t lineno = 0;
    for (char *line = text; st == TG_OK && line < text + len;) {
        char *end = memchr(line, '\n', (size_t)(text + len - line));
        if (!end) end = text + len;
        size_t ll = (size_t)(end - line);
        if (ll && line[ll - 1] == '\r') ll--;
        lineno++;
        char *next = end + (end < text + len);
        if (ll == 0 || (lineno == 1 && ll >= 8 && memcmp(line, "#version", 8) == 0)) {
            line = next;
            continue;
        }
        char *sp = memchr(line, ' ', ll);
        size_t la = sp ? (size_t)(sp - line) : 0, lb = sp ? ll - la - 1 : 0;
        if (!sp || !la || !lb || memchr(sp + 1, ' ', lb) || la > sizeof a || lb > sizeof b) {
            st = tg_error_status(TG_EFORMAT, "tokenizer: %s line %zu: expected two tokens separated by one space", path,
                                 lineno);
            break;
        }
        long na = alphabet_to_bytes(inv, line, la, a), nb = alphabet_to_bytes(inv, sp + 1, lb, b);
        int64_t ia, ib, iab;
        if (na > 0 && nb > 0) memcpy(ab, a, (size_t)na), memcpy(ab + na, b, (size_t)nb);
        if (na <= 0 || nb <= 0 || !bmap_get(&t->enc, a, (size_t)na, &ia) || !bmap_get(&t->enc, b, (size_t)nb, &ib) ||
            !bmap_get(&t->enc, ab, (size_t)(na + nb), &iab)) {
            st = tg_error_status(TG_EFORMAT, "tokenizer: %s line %zu: the merge \"%.*s\" names tokens that encoder.json lacks",
                                 path, lineno, (int)(ll > 80 ? 80 : ll), line);
            break;
        }
        uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1;
        size_t j = mix(key) & (t->mcap - 1);
        while (t->merges[j].key && t->merges[j].key != key) j = (j + 1) & (t->mcap - 1);
        if (!t->merges[j].key) t->merges[j] = (mslot){key, rank++, (int32_t)iab}; /* a repeated merge keeps its first rank */
        line = next;
    }
    free(text);
    return st;
}

tg_tokenizer *tg_tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path)
{
    if (!encoder_json_path || !vocab_bpe_path) return tg_error("tokenizer: NULL path");
    tg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return tg_error("tokenizer: out of memory");
    uint32_t cp[256];
    int16_t inv[512];
    byte_alphabet(cp);
    for (int i = 0; i < 512; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[cp[b]] = (int16_t)b;
    int st = load_encoder(t, encoder_json_path, inv);
    if (st == TG_OK) st = load_merges(t, vocab_bpe_path, inv);
    if (st == TG_OK) {
        int code;
        PCRE2_SIZE off;
        t->re = pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
        t->md = t->re ? pcre2_match_data_create_from_pattern(t->re, NULL) : NULL;
        if (!t->md) st = tg_error_status(TG_ENOMEM, "tokenizer: cannot compile the pre-tokenizer pattern");
        else (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* the interpreter serves if JIT is unavailable */
    }
    if (st != TG_OK) {
        tg_tokenizer_free(t);
        return NULL;
    }
    return t;
}

#ifndef TG_DATA_INSTALLED
#define TG_DATA_INSTALLED ""
#endif

/* dir + "/" + name in buf; false (with a message naming what) if too long. */
static bool join_path(char *buf, size_t size, const char *dir, const char *name, const char *what)
{
    int n = snprintf(buf, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size) {
        tg_error("tokenizer: %s is too long (%zu bytes)", what, strlen(dir));
        return false;
    }
    return true;
}

const char *tg_tokenizer_default_dir(void)
{
    static _Thread_local char dir[4096];
    char probe[4096 + 16];
    const char *env = getenv("TAPEGRAD_DATA");
    bool from_env = env && *env;
    if (!join_path(dir, sizeof dir, from_env ? env : TG_DATA_INSTALLED, "gpt2",
                   from_env ? "TAPEGRAD_DATA" : "the installed data folder") ||
        !join_path(probe, sizeof probe, dir, "encoder.json", "the vocabulary's path"))
        return NULL;
    if (access(probe, R_OK) == 0) return dir;
    if (from_env) return tg_error("TAPEGRAD_DATA=%.300s has no gpt2/encoder.json", env);
    return tg_error("GPT-2's vocabulary is not installed (%.300s/encoder.json: not readable); "
                    "set TAPEGRAD_DATA to the folder that holds gpt2/", dir);
}

tg_tokenizer *tg_tokenizer_load_dir(const char *dir)
{
    if (!dir && !(dir = tg_tokenizer_default_dir())) return NULL;
    size_t n = strlen(dir) + 16;
    char *a = malloc(n), *b = malloc(n);
    tg_tokenizer *t = NULL;
    if (a && b) {
        snprintf(a, n, "%s/encoder.json", dir);
        snprintf(b, n, "%s/vocab.bpe", dir);
        t = tg_tokenizer_load(a, b);
    } else {
        tg_error("tokenizer: out of memory");
    }
    free(a);
    free(b);
    return t;
}

int64_t tg_tokenizer_vocab_size(const tg_tokenizer *t) { return t ? t->vocab_size : -1; }
int64_t tg_tokenizer_eot(const tg_tokenizer *t) { return t ? t->eot : -1; }

/* ---- encoding ------------------------------------------------------------------------------------- */

typedef struct {
    int32_t *v;
    size_t n, cap;
} idvec;

static bool push_id(idvec *o, int32_t id)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 256;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return false;
        o->v = v, o->cap = cap;
    }
    o->v[o->n++] = id;
    return true;
}

/* A min-heap of candidate merges, ordered by (rank, position). */
typedef struct {
    int32_t rank, pos;
} cand;

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (h[p].rank < c.rank || (h[p].rank == c.rank && h[p].pos <= c.pos)) break;
        h[i] = h[p], i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && (h[c + 1].rank < h[c].rank || (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos))) c++;
        if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos <= h[c].pos)) break;
        h[i] = h[c], i = c;
    }
    h[i] = last;
    return top;
}

/* BPE of one piece of n >= 2 bytes into out. */
static bool bpe(const tg_tokenizer *t, const unsigned char *s, size_t n, idvec *out)
{
    int32_t *id = malloc(n * 3 * sizeof(int32_t));
    cand *heap = malloc(n * 3 * sizeof(cand));
    if (!id || !heap) {
        free(id);
        free(heap);
        return false;
    }
    int32_t *prev = id + n, *next = id + 2 * n; /* next == -2: merged away */
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_id[s[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const mslot *m = merge_find(t, id[i], id[i + 1]);
        if (m) heap_push(heap, &hn, (cand){m->rank, (int32_t)i});
    }
    while (hn) {
        cand c = heap_pop(heap, &hn);
        int32_t i = c.pos, j = next[i];
        if (j < 0) continue; /* merged away, or the last symbol */
        const mslot *m = merge_find(t, id[i], id[j]);
        if (!m || m->rank != c.rank) continue; /* a stale candidate */
        id[i] = m->merged;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        next[j] = -2;
        if (prev[i] >= 0 && (m = merge_find(t, id[prev[i]], id[i]))) heap_push(heap, &hn, (cand){m->rank, prev[i]});
        if (next[i] >= 0 && (m = merge_find(t, id[i], id[next[i]]))) heap_push(heap, &hn, (cand){m->rank, i});
    }
    bool ok = true;
    for (int32_t i = 0; i >= 0 && ok; i = next[i]) ok = push_id(out, id[i]);
    free(id);
    free(heap);
    return ok;
}

static bool encode_piece(tg_tokenizer *t, const char *s, size_t n, idvec *out)
{
    if (n == 1) return push_id(out, t->byte_id[(unsigned char)s[0]]);
    int64_t v;
    if (bmap_get(&t->cache, s, n, &v)) {
        size_t off = (size_t)(v >> 20), cnt = (size_t)(v & 0xFFFFF);
        for (size_t i = 0; i < cnt; i++)
            if (!push_id(out, t->cache_ids[off + i])) return false;
        return true;
    }
    size_t start = out->n;
    int64_t whole;
    if (bmap_get(&t->enc, s, n, &whole)) { /* the piece is a token itself */
        if (!push_id(out, (int32_t)whole)) return false;
    } else if (!bpe(t, (const unsigned char *)s, n, out)) {
        return false;
    }
    size_t cnt = out->n - start;
    if (n > 256 || cnt >= (1u << 20)) return true; /* long pieces are rare: not worth caching */
    if (t->cache.n >= CACHE_MAX_WORDS || t->cache_n + cnt > CACHE_MAX_IDS) { /* start over, bounded memory */
        bmap_free(&t->cache);
        t->cache_n = 0;
    }
    if (t->cache_n + cnt > t->cache_cap) {
        size_t cap = t->cache_cap ? t->cache_cap : 4096;
        while (cap < t->cache_n + cnt) cap *= 2;
        int32_t *c = realloc(t->cache_ids, cap * sizeof *c);
        if (!c) return true; /* no cache, still a correct answer */
        t->cache_ids = c, t->cache_cap = cap;
    }
    memcpy(t->cache_ids + t->cache_n, out->v + start, cnt * sizeof(int32_t));
    if (bmap_put(&t->cache, s, n, (int64_t)t->cache_n << 20 | (int64_t)cnt)) t->cache_n += cnt;
    return true;
}

/* Pieces of text without "<|endoftext|>", by GPT-2's pattern. */
static int encode_part(tg_tokenizer *t, const char *s, size_t n, idvec *out)
{
    size_t off = 0;
    while (off < n) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, t->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return tg_error_status(TG_EINVAL, "tokenizer: pattern matching failed (PCRE2 error %d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        if (ov[1] <= off) { /* cannot happen with GPT-2's pattern: every alternative consumes */
            off++;
            continue;
        }
        if (!encode_piece(t, s + ov[0], ov[1] - ov[0], out)) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
        off = ov[1];
    }
    return TG_OK;
}

static const char *find_eot(const char *s, size_t n)
{
    for (const char *p = s; (size_t)(p - s) + EOT_LEN <= n; p++) {
        p = memchr(p, '<', n - (size_t)(p - s));
        if (!p || (size_t)(p - s) + EOT_LEN > n) return NULL;
        if (memcmp(p, EOT, EOT_LEN) == 0) return p;
    }
    return NULL;
}

int tg_tokenizer_encode(tg_tokenizer *t, const char *text, size_t len, int64_t **ids, size_t *n_ids)
{
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || (!text && len) || !ids || !n_ids) return tg_error_status(TG_EINVAL, "tokenizer: NULL argument");
    size_t bad = tg__utf8_check(text, len);
    if (bad < len) return tg_error_status(TG_EINVAL, "tokenizer: invalid UTF-8 at byte %zu", bad);
    idvec out = {0};
    int st = TG_OK;
    const char *s = text, *end = text + len;
    while (st == TG_OK && s < end) {
        const char *e = t->eot >= 0 ? find_eot(s, (size_t)(end - s)) : NULL;
        st = encode_part(t, s, (size_t)((e ? e : end) - s), &out);
        if (st == TG_OK && e && !push_id(&out, (int32_t)t->eot)) st = tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
        s = e ? e + EOT_LEN : end;
    }
    int64_t *r = st == TG_OK && out.n ? malloc(out.n * sizeof *r) : NULL;
    if (st == TG_OK && out.n && !r) st = tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    if (st == TG_OK) {
        for (size_t i = 0; i < out.n; i++) r[i] = out.v[i];
        *ids = r, *n_ids = out.n;
    }
    free(out.v);
    return st;
}

tg_tensor *tg_tokenizer_encode_tensor(tg_tape *tp, tg_tokenizer *t, const char *text, size_t len)
{
    int64_t *ids;
    size_t n;
    if (tg_tokenizer_encode(t, text, len, &ids, &n) != TG_OK) return NULL;
    int64_t shape[1] = {(int64_t)n};
    tg_tensor *x = tg_empty(tp, TG_I64, 1, shape);
    if (x && n) memcpy(x->data, ids, n * sizeof *ids);
    free(ids);
    return x;
}

int tg_tokenizer_decode(const tg_tokenizer *t, const int64_t *ids, size_t n, char **text, size_t *len)
{
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!t || (!ids && n) || !text || !len) return tg_error_status(TG_EINVAL, "tokenizer: NULL argument");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size || !t->tok_len[ids[i]])
            return tg_error_status(TG_EINVAL, "tokenizer: id %lld at position %zu is not in the vocabulary (%lld ids)",
                                   (long long)ids[i], i, (long long)t->vocab_size);
        total += t->tok_len[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + o, t->enc.arena + t->tok_off[ids[i]], t->tok_len[ids[i]]);
        o += t->tok_len[ids[i]];
    }
    s[o] = '\0';
    *text = s, *len = o;
    return TG_OK;
}

int tg_tokenizer_decode_text(const tg_tokenizer *t, const int64_t *ids, size_t n, char **text, size_t *len)
{
    char *raw;
    size_t rlen;
    int st = tg_tokenizer_decode(t, ids, n, &raw, &rlen);
    if (st != TG_OK) {
        if (text) *text = NULL;
        if (len) *len = 0;
        return st;
    }
    st = tg_utf8_replace_invalid(raw, rlen, text, len);
    free(raw);
    return st;
}
