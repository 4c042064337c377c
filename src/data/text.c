/* The book's chapter-5 data pipeline: GPTDatasetV1 (windows of token ids)
 * and a DataLoader that draws from the generator exactly as PyTorch's does.
 *
 * PyTorch 1.13's DataLoader, single process: iter(loader) creates an
 * iterator whose constructor draws a base seed (torch.empty((), int64)
 * .random_(): one random64) from the default generator, shuffled or not;
 * a shuffled loader's RandomSampler draws its own seed (another random64,
 * % 2^63) when the first batch is fetched, seeds a fresh mt19937 with it and
 * takes randperm(n) from that; BatchSampler groups the indices, dropping a
 * short last batch with drop_last. */
#include "data_internal.h"

#include <errno.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

struct tg_text_dataset {
    int64_t n_ids, context, stride, n_windows;
    int64_t *ids;
};

tg_text_dataset *tg_text_dataset_new(const int64_t *ids, int64_t n_ids, int64_t context, int64_t stride)
{
    if (n_ids < 0 || (n_ids > 0 && !ids)) return tg_error("text dataset: bad id array");
    if (context < 1) return tg_error("text dataset: context must be >= 1, got %lld", (long long)context);
    if (stride < 1) return tg_error("text dataset: stride must be >= 1, got %lld", (long long)stride);
    tg_text_dataset *d = calloc(1, sizeof *d);
    if (!d) return tg_error("text dataset: out of memory");
    d->n_ids = n_ids, d->context = context, d->stride = stride;
    /* for i in range(0, len(ids) - context, stride) */
    d->n_windows = n_ids > context ? (n_ids - context - 1) / stride + 1 : 0;
    d->ids = malloc(sizeof *d->ids * (size_t)(n_ids ? n_ids : 1));
    if (!d->ids) {
        free(d);
        return tg_error("text dataset: out of memory");
    }
    if (n_ids) memcpy(d->ids, ids, sizeof *ids * (size_t)n_ids);
    return d;
}

void tg_text_dataset_free(tg_text_dataset *d)
{
    if (!d) return;
    free(d->ids);
    free(d);
}

int64_t tg_text_dataset_len(const tg_text_dataset *d) { return d ? d->n_windows : 0; }

int64_t tg_text_dataset_context(const tg_text_dataset *d) { return d ? d->context : 0; }

int tg_text_dataset_get(const tg_text_dataset *d, int64_t i, int64_t *input, int64_t *target)
{
    if (!d || !input || !target) return tg_error_status(TG_EINVAL, "text dataset: NULL argument");
    if (i < 0 || i >= d->n_windows)
        return tg_error_status(TG_EINVAL, "text dataset: window %lld out of range (%lld windows)", (long long)i,
                               (long long)d->n_windows);
    const int64_t *w = d->ids + i * d->stride;
    memcpy(input, w, sizeof *w * (size_t)d->context);
    memcpy(target, w + 1, sizeof *w * (size_t)d->context);
    return TG_OK;
}

int tg_text_dataset_batch(const tg_text_dataset *d, tg_tape *tp, const int64_t *idx, int64_t count, tg_tensor **input,
                          tg_tensor **target)
{
    if (input) *input = NULL;
    if (target) *target = NULL;
    if (!d || !tp || (!idx && count) || !input || !target)
        return tg_error_status(TG_EINVAL, "text dataset batch: NULL argument");
    if (count < 1) return tg_error_status(TG_EINVAL, "text dataset batch: empty batch");
    int64_t shape[2] = {count, d->context};
    tg_tensor *x = tg_empty(tp, TG_I64, 2, shape), *y = tg_empty(tp, TG_I64, 2, shape);
    if (!x || !y) return TG_ENOMEM;
    for (int64_t b = 0; b < count; b++) {
        int st = tg_text_dataset_get(d, idx[b], (int64_t *)x->data + b * d->context, (int64_t *)y->data + b * d->context);
        if (st != TG_OK) return st;
    }
    *input = x, *target = y;
    return TG_OK;
}

/* ---- the loader ---------------------------------------------------------------------- */

struct tg_loader {
    int64_t n;
    tg_loader_options opt;
    const tg_text_dataset *ds; /* NULL: indices only */
};

/* One pass (PyTorch's _SingleProcessDataLoaderIter): its own sample order. */
struct tg_loader_iter {
    const tg_loader *l;
    int64_t *order;
    int64_t pos; /* next sample; -1: the sampler has not drawn yet */
};

tg_loader *tg_loader_new(int64_t n, tg_loader_options opt)
{
    if (n < 0) return tg_error("loader: negative dataset size %lld", (long long)n);
    if (opt.batch_size < 1) return tg_error("loader: batch_size must be >= 1, got %lld", (long long)opt.batch_size);
    tg_loader *l = calloc(1, sizeof *l);
    if (!l) return tg_error("loader: out of memory");
    l->n = n;
    l->opt = opt;
    return l;
}

tg_loader *tg_text_loader_new(const tg_text_dataset *ds, tg_loader_options opt)
{
    if (!ds) return tg_error("loader: NULL dataset");
    tg_loader *l = tg_loader_new(ds->n_windows, opt);
    if (l) l->ds = ds;
    return l;
}

void tg_loader_free(tg_loader *l) { free(l); }

int64_t tg_loader_len(const tg_loader *l)
{
    if (!l) return 0;
    int64_t b = l->opt.batch_size;
    return l->opt.drop_last ? l->n / b : (l->n + b - 1) / b;
}

tg_loader_iter *tg_loader_iter_new(const tg_loader *l)
{
    if (!l) return tg_error("loader: NULL loader");
    tg_loader_iter *it = calloc(1, sizeof *it);
    if (!it || !(it->order = malloc(sizeof *it->order * (size_t)(l->n ? l->n : 1)))) {
        free(it);
        return tg_error("loader: out of memory");
    }
    it->l = l;
    it->pos = -1;
    tg_generator *g = l->opt.generator ? l->opt.generator : tg_default_generator();
    tg_generator_random64(g); /* _BaseDataLoaderIter's base seed */
    return it;
}

void tg_loader_iter_free(tg_loader_iter *it)
{
    if (!it) return;
    free(it->order);
    free(it);
}

int tg_loader_iter_next_indices(tg_loader_iter *it, int64_t *idx, int64_t *count)
{
    if (count) *count = 0;
    if (!it || !idx || !count) return tg_error_status(TG_EINVAL, "loader: NULL argument");
    const tg_loader *l = it->l;
    if (it->pos < 0) {
        /* the sampler's first step */
        if (l->opt.shuffle) {
            tg_generator *g = l->opt.generator ? l->opt.generator : tg_default_generator();
            uint64_t seed = tg_generator_random64(g) % (UINT64_C(1) << 63);
            tg_generator *perm = tg_generator_new(seed);
            if (!perm) return TG_ENOMEM;
            int st = tg_randperm(perm, l->n, it->order);
            tg_generator_free(perm);
            if (st != TG_OK) return st;
        } else {
            for (int64_t i = 0; i < l->n; i++) it->order[i] = i;
        }
        it->pos = 0;
    }
    int64_t b = l->opt.batch_size, left = l->n - it->pos;
    if (left <= 0 || (l->opt.drop_last && left < b)) {
        it->pos = l->n; /* exhausted: stays so */
        return 0;
    }
    int64_t c = left < b ? left : b;
    memcpy(idx, it->order + it->pos, sizeof *idx * (size_t)c);
    it->pos += c;
    *count = c;
    return 1;
}

int64_t tg_loader_batch_size(const tg_loader *l) { return l ? l->opt.batch_size : 0; }
int64_t tg_loader_num_samples(const tg_loader *l) { return l ? l->n : 0; }

int64_t tg_loader_iter_position(const tg_loader_iter *it, const int64_t **order)
{
    if (order) *order = it && it->pos >= 0 ? it->order : NULL;
    return it ? it->pos : -1;
}

tg_loader_iter *tg_loader_iter_resume(const tg_loader *l, int64_t pos, const int64_t *order)
{
    if (!l) return tg_error("loader: NULL loader");
    if (pos < 0 || pos > l->n || (!order && l->n > 0))
        return tg_error("loader: cannot resume a pass at sample %lld of %lld", (long long)pos, (long long)l->n);
    /* a permutation of 0..n-1: every index once */
    unsigned char *hit = calloc((size_t)(l->n ? l->n : 1), 1);
    if (!hit) return tg_error("loader: out of memory");
    for (int64_t i = 0; i < l->n; i++) {
        if (order[i] < 0 || order[i] >= l->n || hit[order[i]]) {
            free(hit);
            return tg_error("loader: the resumed order is not a permutation of the %lld samples", (long long)l->n);
        }
        hit[order[i]] = 1;
    }
    free(hit);
    tg_loader_iter *it = calloc(1, sizeof *it);
    if (!it || !(it->order = malloc(sizeof *it->order * (size_t)(l->n ? l->n : 1)))) {
        free(it);
        return tg_error("loader: out of memory");
    }
    if (l->n) memcpy(it->order, order, sizeof *order * (size_t)l->n);
    it->l = l;
    it->pos = pos;
    return it;
}

int tg_loader_iter_next(tg_loader_iter *it, tg_tape *tp, tg_tensor **input, tg_tensor **target)
{
    if (input) *input = NULL;
    if (target) *target = NULL;
    if (!it || !tp || !input || !target) return tg_error_status(TG_EINVAL, "loader: NULL argument");
    if (!it->l->ds)
        return tg_error_status(TG_ESTATE, "loader: no dataset (made by tg_loader_new: use tg_loader_iter_next_indices)");
    int64_t *idx = tg_tape_alloc(tp, sizeof *idx * (size_t)it->l->opt.batch_size, false), count;
    if (!idx) return TG_ENOMEM;
    int r = tg_loader_iter_next_indices(it, idx, &count);
    if (r != 1) return r;
    int st = tg_text_dataset_batch(it->l->ds, tp, idx, count, input, target);
    return st == TG_OK ? 1 : st;
}

char *tg__read_file(const char *path, size_t limit, size_t *len, int *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *err = errno;
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    *err = buf ? 0 : ENOMEM;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *b = cap > limit ? NULL : realloc(buf, 2 * cap + 1);
        if (!b) {
            *err = cap > limit ? EFBIG : ENOMEM;
            free(buf);
            buf = NULL;
            break;
        }
        buf = b, cap *= 2;
    }
    if (buf && ferror(f)) {
        *err = EIO;
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}
