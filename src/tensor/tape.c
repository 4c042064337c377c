/* The tape: an arena holding tensors, storage and graph nodes.
 *
 * Memory comes in chunks. tg_tape_reset() drops everything; if the last round
 * needed more than one chunk, the chunks are merged into one big enough for the
 * whole round, so a steady-state training loop allocates nothing. */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define TG_ALIGN 64
/* A tape's first chunk is small (a tape for a few tensors, as tg_module_load
 * makes, costs little); later chunks grow by half of what the tape holds, and
 * tg_tape_reset merges them into one, so a step loop reaches a single chunk
 * after its first step whatever this size. */
#define TG_MIN_CHUNK ((size_t)64 << 10)

typedef struct tg_chunk {
    struct tg_chunk *next;
    size_t cap, used;
    char *mem;
} tg_chunk;

/* A block of the backward pool (tg__tape_pool_begin): tensor storage that
 * backward hands out and takes back, so gradients that have been consumed
 * make room for the next ones instead of piling up in the arena. */
typedef struct {
    char *base;
    size_t size;
    int refs;    /* gradient slots pointing into it */
    bool free;   /* on the free list */
    bool recent; /* handed out since tg__tape_pool_begin */
} tg_pool_block;

struct tg_tape {
    tg_chunk *chunks; /* newest first */
    size_t used;      /* bytes handed out since reset */
    size_t reserved;  /* bytes held in chunks */
    size_t limit;     /* 0 = no limit */
    tg_pool_block *pool; /* blocks of the arena in the backward pool (malloc'd) */
    int npool, cappool;
    bool pooling;
    void *scratch; /* tg__tape_scratch (malloc'd) */
    size_t scratch_size;
    tg_numerics numerics; /* tg_tape_set_numerics */
    tg_storage *derived;  /* storages of this tape holding derived copies */
    tg_tape *side;        /* tg__tape_side: made on first use, reset and freed with this tape */
};

/* ---- errors ------------------------------------------------------------------ */

static _Thread_local char tg__errbuf[512];

const char *tg_last_error(void) { return tg__errbuf; }
void tg_clear_error(void) { tg__errbuf[0] = '\0'; }

void *tg_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tg__errbuf, sizeof tg__errbuf, fmt, ap);
    va_end(ap);
    return NULL;
}

void *tg__error_null_input(const char *op)
{
    /* An op handed NULL is most likely downstream of an earlier failure: keep
     * that failure's message, which names the real problem. */
    if (!tg__errbuf[0]) snprintf(tg__errbuf, sizeof tg__errbuf, "%s: NULL input", op);
    return NULL;
}

void tg__error_push(tg__saved_error *e)
{
    memcpy(e->msg, tg__errbuf, sizeof e->msg);
    tg__errbuf[0] = '\0';
}

void tg__error_restore(const tg__saved_error *e) { memcpy(tg__errbuf, e->msg, sizeof e->msg); }

const char *tg_status_str(int status)
{
    switch (status) {
#define TG_STATUS_CASE_(name, value, text) \
    case TG_##name: return text;
        TG_STATUS_MAP(TG_STATUS_CASE_)
#undef TG_STATUS_CASE_
    }
    return "unknown status";
}

int tg_error_status(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tg__errbuf, sizeof tg__errbuf, fmt, ap);
    va_end(ap);
    return status;
}

/* ---- chunks -------------------------------------------------------------------- */

static tg_chunk *chunk_new(size_t cap)
{
    tg_chunk *c = malloc(sizeof *c);
    if (!c) return NULL;
    cap = (cap + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN;
    c->mem = aligned_alloc(TG_ALIGN, cap);
    if (!c->mem) {
        free(c);
        return NULL;
    }
    c->cap = cap;
    c->used = 0;
    c->next = NULL;
    return c;
}

static void chunks_free(tg_chunk *c)
{
    while (c) {
        tg_chunk *n = c->next;
        free(c->mem);
        free(c);
        c = n;
    }
}

tg_tape *tg_tape_new(void)
{
    tg_tape *tp = calloc(1, sizeof *tp);
    if (!tp) return tg_error("tape: out of memory");
    return tp;
}

void tg__tape_keep_derived(tg_storage *s)
{
    if (!s || !s->tape || s->next || s->tape->derived == s) return; /* on the list already */
    s->next = s->tape->derived;
    s->tape->derived = s;
}

/* The storages' derived copies go with the storage. */
static void drop_derived(tg_tape *tp)
{
    for (tg_storage *s = tp->derived, *next; s; s = next) {
        next = s->next;
        tg__derived_free(s->derived);
        s->derived = NULL;
        s->next = NULL;
    }
    tp->derived = NULL;
}

int tg_tape_set_numerics(tg_tape *tp, tg_numerics numerics)
{
    if (!tp) return tg_error_status(TG_EINVAL, "tape_set_numerics: NULL tape");
    if (!strcmp(tg_numerics_name(numerics), "?"))
        return tg_error_status(TG_EINVAL, "tape_set_numerics: %d is not a tg_numerics value", (int)numerics);
    tp->numerics = numerics;
    return TG_OK;
}

tg_numerics tg_tape_numerics(const tg_tape *tp) { return tp ? tp->numerics : TG_NUMERICS_EXACT; }

tg_numerics tg__tape_enter(tg_tape *tp, tg_numerics n)
{
    tg_numerics prev = tp->numerics;
    tp->numerics = n;
    return prev;
}

void tg__tape_leave(tg_tape *tp, tg_numerics prev) { tp->numerics = prev; }

void tg_tape_free(tg_tape *tp)
{
    if (!tp) return;
    tg_tape_free(tp->side);
    drop_derived(tp);
    chunks_free(tp->chunks);
    free(tp->pool);
    free(tp->scratch);
    free(tp);
}

void tg_tape_reset(tg_tape *tp)
{
    if (!tp) return;
    tg_tape_reset(tp->side);
    drop_derived(tp);
    tp->used = 0;
    tp->npool = 0; /* the pool's blocks are arena memory, dropped with it */
    tp->pooling = false;
    if (tp->chunks && tp->chunks->next) {
        /* Merge: one chunk holding what the last round needed. */
        size_t total = tp->reserved;
        chunks_free(tp->chunks);
        tp->chunks = chunk_new(total);
        tp->reserved = tp->chunks ? tp->chunks->cap : 0;
    }
    if (tp->chunks) tp->chunks->used = 0;
}

size_t tg_tape_used(const tg_tape *tp) { return tp ? tp->used + tg_tape_used(tp->side) : 0; }
size_t tg_tape_reserved(const tg_tape *tp) { return tp ? tp->reserved + tg_tape_reserved(tp->side) : 0; }

tg_tape *tg__tape_side(tg_tape *tp)
{
    if (!tp->side && !(tp->side = tg_tape_new())) return NULL;
    tg_tape_reset(tp->side);
    tp->side->limit = tp->limit;
    tp->side->numerics = tp->numerics;
    return tp->side;
}
void tg_tape_set_limit(tg_tape *tp, size_t max_bytes)
{
    if (tp) tp->limit = max_bytes;
}

void *tg_tape_alloc(tg_tape *tp, size_t nbytes, bool zero)
{
    if (!tp) return tg_error("tape: NULL tape");
    size_t need = (nbytes + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN;
    if (need < nbytes) return tg_error("tape: allocation of %zu bytes overflows", nbytes);
    if (need == 0) need = TG_ALIGN;
    tg_chunk *c = tp->chunks;
    if (!c || c->cap - c->used < need) {
        /* Earlier chunks may still have room for a small request. */
        for (tg_chunk *o = c ? c->next : NULL; o; o = o->next) {
            if (o->cap - o->used >= need) {
                c = o;
                goto have;
            }
        }
        size_t cap = need > TG_MIN_CHUNK ? need : TG_MIN_CHUNK;
        if (tp->reserved / 2 > cap && need < tp->reserved / 2) cap = tp->reserved / 2;
        if (tp->limit && tp->reserved + cap > tp->limit) {
            cap = need;
            if (tp->reserved + cap > tp->limit)
                return tg_error("tape: memory limit of %zu bytes reached (asked %zu more)", tp->limit,
                                nbytes);
        }
        tg_chunk *nc = chunk_new(cap);
        if (!nc) return tg_error("tape: out of memory allocating %zu bytes", nbytes);
        nc->next = tp->chunks;
        tp->chunks = nc;
        tp->reserved += nc->cap;
        c = nc;
    }
have:;
    void *p = c->mem + c->used;
    c->used += need;
    tp->used += need;
    if (zero) memset(p, 0, nbytes);
    return p;
}

/* ---- the backward pool ------------------------------------------------------------ */

/* Below this a tensor's storage comes from the arena even while pooling:
 * small gradients cost little, and a short pool stays cheap to search. */
#define TG_POOL_MIN ((size_t)16 << 10)

void tg__tape_pool_begin(tg_tape *tp)
{
    tp->pooling = true;
    for (int i = 0; i < tp->npool; i++) tp->pool[i].recent = false;
}

void tg__tape_pool_end(tg_tape *tp) { tp->pooling = false; }

void *tg__tape_alloc_data(tg_tape *tp, size_t nbytes)
{
    if (!tp->pooling || nbytes < TG_POOL_MIN) return tg_tape_alloc(tp, nbytes, false);
    size_t need = (nbytes + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN;
    /* the smallest free block that fits; a bigger one is split, its rest
     * staying free (the logits' gradient, the biggest, is consumed first and
     * then serves the smaller gradients after it) */
    int best = -1;
    for (int i = 0; i < tp->npool; i++) {
        const tg_pool_block *b = &tp->pool[i];
        if (b->free && b->size >= need && (best < 0 || b->size < tp->pool[best].size)) best = i;
    }
    if (tp->npool == tp->cappool) {
        int nc = tp->cappool ? 2 * tp->cappool : 64;
        tg_pool_block *np = realloc(tp->pool, sizeof *np * (size_t)nc);
        if (!np) return tg_error("tape: out of memory");
        tp->pool = np, tp->cappool = nc;
    }
    if (best >= 0) {
        tg_pool_block *b = &tp->pool[best];
        if (b->size - need >= TG_POOL_MIN) {
            tp->pool[tp->npool++] = (tg_pool_block){b->base + need, b->size - need, 0, true, false};
            b->size = need;
        }
        b->free = false, b->recent = true, b->refs = 0;
        return b->base;
    }
    char *p = tg_tape_alloc(tp, need, false);
    if (!p) return NULL;
    tp->pool[tp->npool++] = (tg_pool_block){p, need, 0, false, true};
    return p;
}

static tg_pool_block *pool_find(tg_tape *tp, const void *p)
{
    const char *c = p;
    for (int i = 0; i < tp->npool; i++) {
        tg_pool_block *b = &tp->pool[i];
        if (!b->free && c >= b->base && c < b->base + b->size) return b;
    }
    return NULL;
}

void tg__tape_pool_ref(tg_tape *tp, const void *p, int delta)
{
    tg_pool_block *b = p ? pool_find(tp, p) : NULL;
    if (b) b->refs += delta;
}

void tg__tape_pool_collect(tg_tape *tp, const void *dropped)
{
    tg_pool_block *d = dropped ? pool_find(tp, dropped) : NULL;
    for (int i = 0; i < tp->npool; i++) {
        tg_pool_block *b = &tp->pool[i];
        if (!b->free && (b->recent || b == d) && b->refs <= 0) b->free = true;
        b->recent = false;
    }
}

void *tg__tape_scratch(tg_tape *tp, size_t nbytes)
{
    if (nbytes > tp->scratch_size) {
        void *p = aligned_alloc(TG_ALIGN, (nbytes + TG_ALIGN - 1) / TG_ALIGN * TG_ALIGN);
        if (!p) return tg_error("tape: out of memory allocating a scratch of %zu bytes", nbytes);
        free(tp->scratch);
        tp->scratch = p, tp->scratch_size = nbytes;
    }
    return tp->scratch;
}

void tg__tape_scratch_trim(tg_tape *tp, size_t nbytes)
{
    if (tp && tp->scratch_size > nbytes) {
        free(tp->scratch);
        tp->scratch = NULL, tp->scratch_size = 0;
    }
}

char *tg__tape_printf(tg_tape *tp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = len >= 0 ? tg_tape_alloc(tp, (size_t)len + 1, false) : NULL;
    if (s) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)len + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}
