/* The BPE tokenizer (include/tapegrad/data.h): GPT-2's, Qwen3's and Llama
 * 3's (byte-level) and Gemma 3's (byte fallback, tokenizer_internal.h),
 * read by tokenizer_files.c into one form.
 *
 *   encode: find the added tokens in the text (leftmost, longest first; a
 *           special one only where the caller allows special tokens); for
 *           the text between them: the normaliser (NFC with utf8proc, the
 *           spaces as U+2581, or none), then the pre-tokenizer pattern
 *           (PCRE2, JIT, Unicode properties: \s is Unicode's White_Space,
 *           as in Hugging Face's Oniguruma and tiktoken's Rust regex; the
 *           text between two matches is a piece too, as tokenizer.json's
 *           Split "Isolated" makes it; none with byte fallback: the text is
 *           one piece); for each piece, the
 *           word cache, or the whole piece when it is a token and the file
 *           says so, or BPE: start from one token per byte (byte fallback:
 *           per character, or its bytes' "<0xNN>" tokens when the character
 *           is no token) and repeatedly merge the adjacent pair of lowest
 *           rank, leftmost first, with a heap of candidate pairs (n log n on
 *           a long word).
 *   decode: the tokens' bytes back to back.
 * Tokens are kept as raw bytes; a byte-fallback vocabulary keeps its
 * tokens' text for encoding and their bytes (U+2581 a space, "<0xNN>" byte
 * NN) for decoding. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_internal.h"

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
#define MAX_ID (1 << 24)

typedef struct {
    uint32_t off, len; /* content bytes in added_bytes */
    int32_t id;
    bool special;
} added_tok;

struct tg_tokenizer {
    int64_t vocab_size, eot;
    const char **tok_ptr; /* per id: its bytes (NULL: no such id) */
    uint32_t *tok_len;
    bmap enc; /* token bytes -> id (the vocabulary, without the added tokens) */
    int32_t byte_id[256];
    mslot *merges;
    size_t mcap, n_merges;
    int32_t next_rank;
    added_tok *added; /* longest first */
    size_t n_added, added_cap;
    char *added_bytes;
    size_t added_len, added_bcap;
    uint8_t added_first[256]; /* 1: some added token starts with this byte */
    bmap added_map;           /* content -> index into added (after the sort) */
    uint32_t added_lens[64];  /* the added tokens' distinct lengths, longest first */
    size_t n_lens;            /* 0 with more than 64 lengths: find_added compares each token */
    bool whole_pieces;
    tg__normalizer norm;
    bool fallback;     /* byte fallback (tokenizer_internal.h) */
    uint8_t *byte_tok; /* byte fallback: per id, 1 for a "<0xNN>" token (decoded as that byte) */
    char *dec_arena;   /* byte fallback: the tokens' bytes, where tok_ptr points */
    int32_t post[16];  /* the post-processor's ids: n_pre before the text, n_post after */
    uint8_t n_pre, n_post;
    char post_unsupported[96]; /* non-empty: the post-processor tapegrad does not implement */
    /* word cache: piece bytes -> (offset << 20 | count) into cache_ids */
    bmap cache;
    int32_t *cache_ids;
    size_t cache_n, cache_cap;
    pcre2_code *re;
    pcre2_match_data *md;
};

static const mslot *merge_find(const tg_tokenizer *t, int32_t l, int32_t r)
{
    if (!t->mcap) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    size_t j = mix(key) & (t->mcap - 1);
    while (t->merges[j].key) {
        if (t->merges[j].key == key) return &t->merges[j];
        j = (j + 1) & (t->mcap - 1);
    }
    return NULL;
}

void tg__byte_alphabet_inverse(int16_t inv[512])
{
    int n = 0;
    for (int i = 0; i < 512; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        inv[printable ? b : 256 + n++] = (int16_t)b;
    }
}

long tg__byte_alphabet_decode(const int16_t *inv, const char *s, size_t len, char *out)
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

tg_tokenizer *tg__tok_new(void)
{
    tg_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return tg_error("tokenizer: out of memory");
    t->eot = -1;
    return t;
}

void tg_tokenizer_free(tg_tokenizer *t)
{
    if (!t) return;
    free(t->tok_ptr);
    free(t->tok_len);
    bmap_free(&t->enc);
    bmap_free(&t->cache);
    free(t->merges);
    free(t->cache_ids);
    free(t->added);
    free(t->added_bytes);
    free(t->byte_tok);
    free(t->dec_arena);
    bmap_free(&t->added_map);
    if (t->md) pcre2_match_data_free(t->md);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

int tg__tok_add_token(tg_tokenizer *t, const char *bytes, size_t len, int64_t id)
{
    int64_t old;
    if (!len || id < 0 || id >= MAX_ID || bmap_get(&t->enc, bytes, len, &old)) return TG_EFORMAT;
    if (!bmap_put(&t->enc, bytes, len, id)) return TG_ENOMEM;
    if (id >= t->vocab_size) t->vocab_size = id + 1;
    return TG_OK;
}

static bool merges_reserve(tg_tokenizer *t, size_t more)
{
    if ((t->n_merges + more) * 2 <= t->mcap) return true;
    size_t cap = t->mcap ? t->mcap : 1024;
    while ((t->n_merges + more) * 2 > cap) cap *= 2;
    mslot *m = calloc(cap, sizeof *m);
    if (!m) return false;
    for (size_t i = 0; i < t->mcap; i++) {
        if (!t->merges[i].key) continue;
        size_t j = mix(t->merges[i].key) & (cap - 1);
        while (m[j].key) j = (j + 1) & (cap - 1);
        m[j] = t->merges[i];
    }
    free(t->merges);
    t->merges = m, t->mcap = cap;
    return true;
}

/* (l, r) -> merged at rank, unless the pair is there already. */
static int merge_put(tg_tokenizer *t, int32_t l, int32_t r, int32_t rank, int32_t merged)
{
    if (!merges_reserve(t, 1)) return TG_ENOMEM;
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    size_t j = mix(key) & (t->mcap - 1);
    while (t->merges[j].key && t->merges[j].key != key) j = (j + 1) & (t->mcap - 1);
    if (!t->merges[j].key) t->merges[j] = (mslot){key, rank, merged}, t->n_merges++;
    return TG_OK;
}

int tg__tok_add_merge(tg_tokenizer *t, const char *a, size_t la, const char *b, size_t lb)
{
    char buf[1024];
    int64_t ia, ib, iab;
    if (la + lb > sizeof buf || !bmap_get(&t->enc, a, la, &ia) || !bmap_get(&t->enc, b, lb, &ib)) return TG_EFORMAT;
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    if (!bmap_get(&t->enc, buf, la + lb, &iab)) return TG_EFORMAT;
    return merge_put(t, (int32_t)ia, (int32_t)ib, t->next_rank++, (int32_t)iab);
}

int tg__tok_add_added(tg_tokenizer *t, const char *content, size_t len, int64_t id, bool special)
{
    if (!len || len > 4096 || id < 0 || id >= MAX_ID) return TG_EFORMAT;
    for (size_t i = 0; i < t->n_added; i++) /* the same token listed twice: one entry */
        if (t->added[i].id == id) {
            if (t->added[i].len != len || memcmp(t->added_bytes + t->added[i].off, content, len)) return TG_EFORMAT;
            return TG_OK;
        }
    if (t->n_added == t->added_cap) {
        size_t cap = t->added_cap ? 2 * t->added_cap : 32;
        added_tok *a = realloc(t->added, cap * sizeof *a);
        if (!a) return TG_ENOMEM;
        t->added = a, t->added_cap = cap;
    }
    if (t->added_len + len > t->added_bcap) {
        size_t cap = t->added_bcap ? t->added_bcap : 1024;
        while (cap < t->added_len + len) cap *= 2;
        char *b = realloc(t->added_bytes, cap);
        if (!b) return TG_ENOMEM;
        t->added_bytes = b, t->added_bcap = cap;
    }
    memcpy(t->added_bytes + t->added_len, content, len);
    t->added[t->n_added++] = (added_tok){(uint32_t)t->added_len, (uint32_t)len, (int32_t)id, special};
    t->added_len += len;
    t->added_first[(unsigned char)content[0]] = 1;
    if (id >= t->vocab_size) t->vocab_size = id + 1;
    return TG_OK;
}

void tg__tok_set_byte_fallback(tg_tokenizer *t) { t->fallback = true; }

int tg__tok_set_post(tg_tokenizer *t, const int64_t *pre, size_t n_pre, const int64_t *post, size_t n_post,
                     const char *unsupported)
{
    t->n_pre = t->n_post = 0;
    t->post_unsupported[0] = '\0';
    if (unsupported) { /* kept for a one-line message: control characters as '?' */
        snprintf(t->post_unsupported, sizeof t->post_unsupported, "%s", unsupported[0] ? unsupported : "?");
        for (char *c = t->post_unsupported; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        return TG_OK;
    }
    if (n_pre + n_post > sizeof t->post / sizeof *t->post) return TG_EFORMAT;
    for (size_t i = 0; i < n_pre + n_post; i++) {
        int64_t id = i < n_pre ? pre[i] : post[i - n_pre];
        if (id < 0 || id >= MAX_ID) return TG_EFORMAT;
        t->post[i] = (int32_t)id;
    }
    t->n_pre = (uint8_t)n_pre, t->n_post = (uint8_t)n_post;
    return TG_OK;
}

static int added_longest_first(const void *a, const void *b)
{
    const added_tok *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* A rank file's merges: every split of a token into two tokens, at the
 * token's rank (tiktoken merges the adjacent pair whose bytes together have
 * the lowest rank). */
static int derive_merges(tg_tokenizer *t)
{
    if (!merges_reserve(t, t->enc.n * 4)) return TG_ENOMEM;
    for (size_t i = 0; i < t->enc.cap; i++) {
        const bslot *s = &t->enc.slots[i];
        if (!s->used || s->len < 2) continue;
        const char *w = t->enc.arena + s->off;
        for (uint32_t k = 1; k < s->len; k++) {
            int64_t a, b;
            if (!bmap_get(&t->enc, w, k, &a) || !bmap_get(&t->enc, w + k, s->len - k, &b)) continue;
            int st = merge_put(t, (int32_t)a, (int32_t)b, (int32_t)s->val, (int32_t)s->val);
            if (st != TG_OK) return st;
        }
    }
    return TG_OK;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xNN>" (either case, as Hugging Face's ByteFallback decoder reads it):
 * the byte, else -1. */
static int fallback_byte(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi << 4 | lo;
}

static const char METASPACE[] = "\xe2\x96\x81"; /* U+2581, a space in a byte-fallback vocabulary */

/* Byte fallback: each token's bytes as decoding writes them (tokenizer.json's
 * decoder Replace U+2581 -> " ", ByteFallback), tok_ptr pointing at them. */
static int fallback_bytes(tg_tokenizer *t)
{
    size_t total = 0;
    for (int64_t id = 0; id < t->vocab_size; id++) total += t->tok_ptr[id] ? t->tok_len[id] : 0;
    t->dec_arena = malloc(total ? total : 1);
    t->byte_tok = calloc((size_t)t->vocab_size, 1);
    if (!t->dec_arena || !t->byte_tok) return TG_ENOMEM;
    size_t o = 0;
    for (int64_t id = 0; id < t->vocab_size; id++) {
        const char *p = t->tok_ptr[id];
        size_t len = t->tok_len[id], start = o;
        if (!p) continue;
        int b = fallback_byte(p, len);
        if (b >= 0) {
            t->dec_arena[o++] = (char)b;
            t->byte_tok[id] = 1;
        } else {
            for (size_t i = 0; i < len;) {
                if (i + 3 <= len && memcmp(p + i, METASPACE, 3) == 0) t->dec_arena[o++] = ' ', i += 3;
                else t->dec_arena[o++] = p[i++];
            }
        }
        t->tok_ptr[id] = t->dec_arena + start, t->tok_len[id] = (uint32_t)(o - start);
    }
    return TG_OK;
}

int tg__tok_finish(tg_tokenizer *t, const char *pattern, tg__normalizer norm, bool whole_pieces, bool derive,
                   const char *what)
{
    if (!t->enc.n) return tg_error_status(TG_EFORMAT, "tokenizer: %s has an empty vocabulary", what);
    int st = derive ? derive_merges(t) : TG_OK;
    if (st != TG_OK) return tg_error_status(st, "tokenizer: out of memory");
    t->whole_pieces = whole_pieces;
    t->norm = norm;
    t->tok_ptr = calloc((size_t)t->vocab_size, sizeof *t->tok_ptr);
    t->tok_len = calloc((size_t)t->vocab_size, sizeof *t->tok_len);
    if (!t->tok_ptr || !t->tok_len) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < t->enc.cap; i++) {
        const bslot *s = &t->enc.slots[i];
        if (!s->used) continue;
        if (t->tok_ptr[s->val])
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: id %lld is given to two tokens", what, (long long)s->val);
        t->tok_ptr[s->val] = t->enc.arena + s->off, t->tok_len[s->val] = s->len;
    }
    for (size_t i = 0; i < t->n_added; i++) {
        const added_tok *a = &t->added[i];
        const char *p = t->added_bytes + a->off;
        if (t->tok_ptr[a->id] && (t->tok_len[a->id] != a->len || memcmp(t->tok_ptr[a->id], p, a->len)))
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: id %d is given to two tokens", what, (int)a->id);
        t->tok_ptr[a->id] = p, t->tok_len[a->id] = a->len;
    }
    if (t->n_added) qsort(t->added, t->n_added, sizeof *t->added, added_longest_first); /* none: added is NULL */
    for (size_t i = 0; i < t->n_added; i++) {
        const added_tok *a = &t->added[i];
        if (!bmap_put(&t->added_map, t->added_bytes + a->off, a->len, (int64_t)i))
            return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
        if (t->n_lens <= 64 && (!t->n_lens || t->added_lens[t->n_lens - 1] != a->len)) {
            if (t->n_lens < 64) t->added_lens[t->n_lens] = a->len;
            t->n_lens++;
        }
    }
    if (t->n_lens > 64) t->n_lens = 0;
    for (int b = 0; b < 256; b++) {
        char c[8];
        int64_t id;
        if (t->fallback) snprintf(c, sizeof c, "<0x%02X>", b); /* Hugging Face's byte tokens */
        else c[0] = (char)b;
        if (!bmap_get(&t->enc, c, t->fallback ? 6 : 1, &id)) {
            if (t->fallback)
                return tg_error_status(TG_EFORMAT, "tokenizer: %s has no byte token \"%s\" (model.byte_fallback)", what, c);
            return tg_error_status(TG_EFORMAT, "tokenizer: %s has no token for byte 0x%02x", what, b);
        }
        t->byte_id[b] = (int32_t)id;
    }
    for (size_t i = 0; i < (size_t)t->n_pre + t->n_post; i++)
        if (t->post[i] >= t->vocab_size || !t->tok_ptr[t->post[i]])
            return tg_error_status(TG_EFORMAT, "tokenizer: %s: the post-processor adds id %d, which no token has", what,
                                   (int)t->post[i]);
    if (t->fallback && fallback_bytes(t) != TG_OK) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    t->eot = tg_tokenizer_token_id(t, "<|endoftext|>");
    if (t->eot < 0) t->eot = tg_tokenizer_token_id(t, "<|end_of_text|>");
    if (t->eot < 0) t->eot = tg_tokenizer_token_id(t, "<eos>");
    if (!pattern) {
        if (t->fallback) return TG_OK;
        return tg_error_status(TG_EFORMAT, "tokenizer: %s has no pre-tokenizer pattern", what);
    }
    int code;
    PCRE2_SIZE off;
    t->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return tg_error_status(TG_EFORMAT, "tokenizer: %s: the pre-tokenizer pattern does not compile at offset %zu: %s",
                               what, (size_t)off, (const char *)msg);
    }
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!t->md) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* the interpreter serves if JIT is unavailable */
    return TG_OK;
}

int64_t tg_tokenizer_vocab_size(const tg_tokenizer *t) { return t ? t->vocab_size : -1; }
int64_t tg_tokenizer_eot(const tg_tokenizer *t) { return t ? t->eot : -1; }

int64_t tg_tokenizer_token_id(const tg_tokenizer *t, const char *token)
{
    if (!t || !token) return -1;
    size_t len = strlen(token);
    int64_t id;
    if (len && bmap_get(&t->added_map, token, len, &id)) return t->added[id].id;
    for (size_t i = 0; i < t->n_added && !t->added_map.n; i++) /* before tg__tok_finish */
        if (t->added[i].len == len && memcmp(t->added_bytes + t->added[i].off, token, len) == 0) return t->added[i].id;
    return len && bmap_get(&t->enc, token, len, &id) ? id : -1;
}

bool tg_tokenizer_is_special(const tg_tokenizer *t, int64_t id)
{
    if (!t) return false;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id == id) return t->added[i].special;
    return false;
}

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

/* BPE of one piece of n >= 1 bytes into out: from one token per byte, or
 * with byte fallback per character (its bytes' tokens when it is no token,
 * as Hugging Face's BPE with byte_fallback starts a word; the text is UTF-8,
 * checked before). */
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
    size_t hn = 0, nsym = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = t->fallback && s[i] >= 0x80 ? tg__utf8_len(s + i, n - i, &cp) : 1;
        int64_t v;
        if (!k) k = 1;
        if (t->fallback && bmap_get(&t->enc, (const char *)s + i, k, &v)) id[nsym++] = (int32_t)v;
        else
            for (size_t j = 0; j < k; j++) id[nsym++] = t->byte_id[s[i + j]];
        i += k;
    }
    for (size_t i = 0; i < nsym; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < nsym ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < nsym; i++) {
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
    if (n == 1 && !t->fallback) return push_id(out, t->byte_id[(unsigned char)s[0]]);
    int64_t v;
    if (bmap_get(&t->cache, s, n, &v)) {
        size_t off = (size_t)(v >> 20), cnt = (size_t)(v & 0xFFFFF);
        for (size_t i = 0; i < cnt; i++)
            if (!push_id(out, t->cache_ids[off + i])) return false;
        return true;
    }
    size_t start = out->n;
    int64_t whole;
    if (t->whole_pieces && bmap_get(&t->enc, s, n, &whole)) { /* the piece is a token itself */
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

/* Text without added tokens, cut by the pattern; the text between two
 * matches (none with the patterns of GPT-2, Qwen3 and Llama 3, which match
 * every character) is a piece too. Without a pattern (byte fallback) the
 * text is one piece. */
static int encode_pieces(tg_tokenizer *t, const char *s, size_t n, idvec *out)
{
    if (!t->re) return n && !encode_piece(t, s, n, out) ? tg_error_status(TG_ENOMEM, "tokenizer: out of memory") : TG_OK;
    size_t off = 0;
    while (off < n) {
        int rc = pcre2_match(t->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, t->md, NULL);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
            return tg_error_status(TG_EINVAL, "tokenizer: pattern matching failed (PCRE2 error %d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        size_t m0 = rc < 0 ? n : ov[0], m1 = rc < 0 ? n : ov[1];
        if (m0 > off && !encode_piece(t, s + off, m0 - off, out)) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
        if (m1 > m0 && !encode_piece(t, s + m0, m1 - m0, out)) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
        if (m1 > m0) {
            off = m1;
        } else if (m0 < n) { /* an empty match: step over one character, which joins the next gap */
            size_t k = m0 + 1;
            while (k < n && ((unsigned char)s[k] & 0xC0) == 0x80) k++;
            if (!encode_piece(t, s + m0, k - m0, out)) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
            off = k;
        } else {
            off = n;
        }
    }
    return TG_OK;
}

/* The normaliser, then the pieces. NFC changes nothing in text whose code
 * points are all below U+0300 (no byte >= 0xCC): every character that NFC
 * rewrites or composes with what precedes it lies at U+0300 or above. */
static int encode_text(tg_tokenizer *t, const char *s, size_t n, idvec *out)
{
    if (t->norm == TG__NORM_METASPACE && memchr(s, ' ', n)) { /* each space as U+2581 */
        size_t spaces = 0;
        for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
        char *m = malloc(n + 2 * spaces);
        if (!m) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') memcpy(m + o, METASPACE, 3), o += 3;
            else m[o++] = s[i];
        }
        int st = encode_pieces(t, m, o, out);
        free(m);
        return st;
    }
    if (t->norm == TG__NORM_NFC) {
        bool plain = true;
        for (size_t i = 0; i < n && plain; i++) plain = (unsigned char)s[i] < 0xCC;
        if (!plain) {
            utf8proc_uint8_t *nfc = NULL;
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m < 0) {
                free(nfc);
                return tg_error_status(m == UTF8PROC_ERROR_NOMEM ? TG_ENOMEM : TG_EINVAL, "tokenizer: NFC: %s",
                                       utf8proc_errmsg(m));
            }
            int st = encode_pieces(t, (const char *)nfc, (size_t)m, out);
            free(nfc);
            return st;
        }
    }
    return encode_pieces(t, s, n, out);
}

/* The leftmost added token in s[0, n) that may match (special ones only when
 * allowed), the longest at that place; NULL if none. Where a token may start,
 * one hash lookup per distinct length of the added tokens (Llama 3's 256
 * special tokens have a few lengths). */
static const added_tok *find_added(const tg_tokenizer *t, const char *s, size_t n, bool allow_special, size_t *at)
{
    if (!t->n_added) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (!t->added_first[(unsigned char)s[i]]) continue;
        if (t->n_lens) {
            for (size_t k = 0; k < t->n_lens; k++) {
                int64_t idx;
                if (t->added_lens[k] > n - i || !bmap_get(&t->added_map, s + i, t->added_lens[k], &idx)) continue;
                if (t->added[idx].special && !allow_special) continue;
                *at = i;
                return &t->added[idx];
            }
            continue;
        }
        for (size_t k = 0; k < t->n_added; k++) {
            const added_tok *a = &t->added[k];
            if ((a->special && !allow_special) || a->len > n - i || t->added_bytes[a->off] != s[i] ||
                memcmp(t->added_bytes + a->off, s + i, a->len) != 0)
                continue;
            *at = i;
            return a;
        }
    }
    return NULL;
}

int tg_tokenizer_encode_special(tg_tokenizer *t, const char *text, size_t len, bool allow_special, int64_t **ids,
                                size_t *n_ids)
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
        size_t at = 0;
        const added_tok *a = find_added(t, s, (size_t)(end - s), allow_special, &at);
        st = encode_text(t, s, a ? at : (size_t)(end - s), &out);
        if (st == TG_OK && a && !push_id(&out, a->id)) st = tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
        s = a ? s + at + a->len : end;
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

int tg_tokenizer_encode(tg_tokenizer *t, const char *text, size_t len, int64_t **ids, size_t *n_ids)
{
    return tg_tokenizer_encode_special(t, text, len, false, ids, n_ids);
}

int tg_tokenizer_encode_add_special(tg_tokenizer *t, const char *text, size_t len, bool allow_special, int64_t **ids,
                                    size_t *n_ids)
{
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || (!text && len) || !ids || !n_ids) return tg_error_status(TG_EINVAL, "tokenizer: NULL argument");
    if (t->post_unsupported[0])
        return tg_error_status(TG_EFORMAT, "tokenizer: the post-processor %s is not supported (TemplateProcessing, ByteLevel)",
                               t->post_unsupported);
    int64_t *body;
    size_t nb;
    int st = tg_tokenizer_encode_special(t, text, len, allow_special, &body, &nb);
    if (st != TG_OK) return st;
    size_t n = t->n_pre + nb + t->n_post;
    if (n == nb) { /* nothing added */
        *ids = body, *n_ids = nb;
        return TG_OK;
    }
    int64_t *r = malloc(n * sizeof *r);
    if (!r) {
        free(body);
        return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    }
    for (size_t i = 0; i < t->n_pre; i++) r[i] = t->post[i];
    if (nb) memcpy(r + t->n_pre, body, nb * sizeof *r);
    for (size_t i = 0; i < t->n_post; i++) r[t->n_pre + nb + i] = t->post[t->n_pre + i];
    free(body);
    *ids = r, *n_ids = n;
    return TG_OK;
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
        if (ids[i] < 0 || ids[i] >= t->vocab_size || !t->tok_ptr[ids[i]])
            return tg_error_status(TG_EINVAL, "tokenizer: id %lld at position %zu is not in the vocabulary (%lld ids)",
                                   (long long)ids[i], i, (long long)t->vocab_size);
        total += t->tok_len[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(s + o, t->tok_ptr[ids[i]], t->tok_len[ids[i]]);
        o += t->tok_len[ids[i]];
    }
    s[o] = '\0';
    *text = s, *len = o;
    return TG_OK;
}

int tg_tokenizer_decode_skip(const tg_tokenizer *t, const int64_t *ids, size_t n, char **text, size_t *len,
                             size_t *skipped)
{
    if (skipped) *skipped = 0;
    if (!t || (!ids && n) || !text || !len) return tg_error_status(TG_EINVAL, "tokenizer: NULL argument");
    int64_t *kept = malloc(sizeof *kept * (n ? n : 1));
    if (!kept) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->vocab_size && t->tok_ptr[ids[i]]) kept[k++] = ids[i];
    if (skipped) *skipped = n - k;
    int st = tg_tokenizer_decode_text(t, kept, k, text, len);
    free(kept);
    return st;
}

/* Hugging Face's ByteFallback decoder: each run of "<0xNN>" tokens is its
 * bytes when they are UTF-8, else one U+FFFD per token; the other tokens
 * are their text. */
static int decode_fallback_text(const tg_tokenizer *t, const int64_t *ids, size_t n, char **text, size_t *len)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size || !t->tok_ptr[ids[i]])
            return tg_error_status(TG_EINVAL, "tokenizer: id %lld at position %zu is not in the vocabulary (%lld ids)",
                                   (long long)ids[i], i, (long long)t->vocab_size);
        cap += t->byte_tok[ids[i]] ? 3 : t->tok_len[ids[i]];
    }
    char *s = malloc(cap);
    if (!s) return tg_error_status(TG_ENOMEM, "tokenizer: out of memory");
    size_t o = 0, run = 0; /* the current run of byte tokens starts at run */
    for (size_t i = 0; i <= n; i++) {
        bool byte = i < n && t->byte_tok[ids[i]];
        if (!byte && o > run && tg__utf8_check(s + run, o - run) < o - run) { /* the run is not UTF-8 */
            size_t k = o - run;
            o = run;
            for (size_t j = 0; j < k; j++) memcpy(s + o, "\xef\xbf\xbd", 3), o += 3;
        }
        if (i == n) break;
        memcpy(s + o, t->tok_ptr[ids[i]], t->tok_len[ids[i]]);
        o += t->tok_len[ids[i]];
        if (!byte) run = o;
    }
    s[o] = '\0';
    *text = s, *len = o;
    return TG_OK;
}

int tg_tokenizer_decode_text(const tg_tokenizer *t, const int64_t *ids, size_t n, char **text, size_t *len)
{
    if (text) *text = NULL;
    if (len) *len = 0;
    if (t && t->fallback && (ids || !n) && text && len) return decode_fallback_text(t, ids, n, text, len);
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
