/* Generation: chapter 5's generate() (tools/reference/gpt_book.py) for a
 * GPTModel, with a KV cache.
 *
 * Without the cache, each new id runs the model on the whole window (the last
 * context_length ids); only the last position goes through final_norm and
 * out_head, as only its logits are used. With it, the window's keys and values of every block
 * are kept in a tape that lives as long as the generation: the prompt runs
 * once, then each new id runs the model on one position, attending to the
 * cached positions. Once the sequence outgrows the context, the window
 * slides and every position's embedding changes, so the cache is refilled
 * from the new window: the same ids as recomputing, past the context too. */
#include "nn_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/gpt.h"

typedef struct {
    tg_tape *tp;
    tg_tensor **k, **v; /* per block: (context_length, emb_dim) */
    int64_t start, len; /* the window's first id in the sequence, positions cached */
} kv_cache;

static tg_module *sub(tg_module *m, const char *name) { return tg_module_get_submodule(m, name); }

/* The chapter-3 MultiHeadAttention on n new positions p0 .. p0+n-1 of x
 * (1, n, d), its keys and values appended to the block's cache: the
 * composed path's ops with the cached keys and values in place of the
 * window's. */
static tg_tensor *cached_attention(tg_tape *tp, tg_module *att, tg_tensor *x, tg_tensor *kc, tg_tensor *vc, int64_t p0,
                                   int64_t heads)
{
    int64_t n = x->shape[1], d = x->shape[2], P = p0 + n, hd = d / heads;
    tg_tensor *k = tg_module_forward(tp, sub(att, "W_key"), x);
    tg_tensor *q = tg_module_forward(tp, sub(att, "W_query"), x);
    tg_tensor *v = tg_module_forward(tp, sub(att, "W_value"), x);
    if (!k || !q || !v) return NULL;
    int64_t rows[2] = {n, d};
    if (tg_copy_(tg_narrow(tp, kc, 0, p0, n), tg_view(tp, k, 2, rows)) != TG_OK ||
        tg_copy_(tg_narrow(tp, vc, 0, p0, n), tg_view(tp, v, 2, rows)) != TG_OK)
        return NULL;
    int64_t qs[4] = {1, n, heads, hd}, ks[4] = {1, P, heads, hd};
    tg_tensor *qq = tg_transpose(tp, tg_view(tp, q, 4, qs), 1, 2);                         /* (1, h, n, hd) */
    tg_tensor *kk = tg_transpose(tp, tg_view(tp, tg_narrow(tp, kc, 0, 0, P), 4, ks), 1, 2); /* (1, h, P, hd) */
    tg_tensor *vv = tg_transpose(tp, tg_view(tp, tg_narrow(tp, vc, 0, 0, P), 4, ks), 1, 2);
    tg_tensor *s = tg_matmul(tp, qq, tg_transpose(tp, kk, 2, 3)); /* (1, h, n, P) */
    if (n > 1) {                                                   /* mask rows p0 .. P-1 */
        tg_tensor *mk = tg_module_get_buffer(att, "mask");
        mk = tg_narrow(tp, tg_narrow(tp, mk, 0, p0, n), 1, 0, P);
        s = tg_masked_fill(tp, s, tg_compare_scalar(tp, mk, 0.0, TG_CMP_NE), -INFINITY);
    }
    tg_tensor *w = tg_softmax(tp, tg_div_scalar(tp, s, sqrt((double)hd)), -1);
    tg_tensor *ctx = tg_transpose(tp, tg_matmul(tp, w, vv), 1, 2); /* (1, n, h, hd) */
    int64_t merged[3] = {1, n, d};
    ctx = tg_view(tp, tg_contiguous(tp, ctx), 3, merged);
    return ctx ? tg_module_forward(tp, sub(att, "out_proj"), ctx) : NULL;
}

/* GPTModel's forward on ids (1, n) at positions p0 .. p0+n-1 with the cache;
 * the logits of the last position only, (1, 1, vocab). */
static tg_tensor *cached_forward(tg_tape *tp, tg_module *gpt, const tg_gpt_config *c, kv_cache *kv, tg_tensor *ids,
                                 int64_t p0)
{
    int64_t n = ids->shape[1];
    tg_tensor *x = tg_add(tp, tg_module_forward(tp, sub(gpt, "tok_emb"), ids),
                          tg_module_forward(tp, sub(gpt, "pos_emb"), tg_arange(tp, TG_I64, (double)p0, (double)(p0 + n), 1)));
    tg_module *blocks = sub(gpt, "trf_blocks");
    for (int64_t l = 0; x && l < c->n_layers; l++) {
        tg_module *b = tg_module_child(blocks, (int)l);
        tg_tensor *h = tg_module_forward(tp, sub(b, "norm1"), x);
        h = h ? cached_attention(tp, sub(b, "att"), h, kv->k[l], kv->v[l], p0, c->n_heads) : NULL;
        x = tg_add(tp, h, x);
        h = x ? tg_module_forward(tp, sub(b, "norm2"), x) : NULL;
        h = h ? tg_module_forward(tp, sub(b, "ff"), h) : NULL;
        x = tg_add(tp, h, x);
    }
    x = x ? tg_narrow(tp, x, 1, n - 1, 1) : NULL;
    x = x ? tg_module_forward(tp, sub(gpt, "final_norm"), x) : NULL;
    return x ? tg_module_forward(tp, sub(gpt, "out_head"), x) : NULL;
}

static int cache_init(kv_cache *kv, const tg_gpt_config *c, tg_dtype dt)
{
    kv->tp = tg_tape_new();
    if (!kv->tp) return TG_ENOMEM;
    kv->k = tg_tape_alloc(kv->tp, sizeof(tg_tensor *) * (size_t)c->n_layers, true);
    kv->v = tg_tape_alloc(kv->tp, sizeof(tg_tensor *) * (size_t)c->n_layers, true);
    if (!kv->k || !kv->v) return TG_ENOMEM;
    int64_t shape[2] = {c->context_length, c->emb_dim};
    for (int64_t l = 0; l < c->n_layers; l++) {
        kv->k[l] = tg_empty(kv->tp, dt, 2, shape);
        kv->v[l] = tg_empty(kv->tp, dt, 2, shape);
        if (!kv->k[l] || !kv->v[l]) return TG_ENOMEM;
    }
    kv->start = kv->len = 0;
    return TG_OK;
}

/* The next id from the last position's logits (1, vocab), as generate() picks it. */
static int next_id(tg_tape *tp, tg_tensor *logits, const tg_generate_options *o, int64_t *next)
{
    if (o->top_k > 0) {
        /* top_logits, _ = torch.topk(logits, top_k); min_val = top_logits[:, -1]
         * logits = torch.where(logits < min_val, -inf, logits) */
        tg_tensor *top = NULL, *idx = NULL;
        if (tg_topk(tp, logits, o->top_k, -1, true, true, &top, &idx) != TG_OK) return TG_EINVAL;
        tg_tensor *min_val = tg_narrow(tp, top, 1, o->top_k - 1, 1);
        logits = tg_masked_fill(tp, logits, tg_compare(tp, logits, min_val, TG_CMP_LT), -INFINITY);
    }
    tg_tensor *pick;
    if (o->temperature > 0) {
        /* probs = torch.softmax(logits / temperature, dim=-1); torch.multinomial(probs, num_samples=1) */
        tg_tensor *probs = tg_softmax(tp, tg_div_scalar(tp, logits, o->temperature), -1);
        pick = tg_multinomial(tp, probs, 1, false, o->generator);
    } else {
        pick = tg_argmax(tp, logits, -1, true); /* torch.argmax(logits, dim=-1, keepdim=True) */
    }
    if (!pick) return TG_EINVAL;
    *next = (int64_t)tg_item_at(pick, 0);
    return TG_OK;
}

static int check_options(const tg_gpt_config *c, const int64_t *prompt, int64_t n_prompt,
                         const tg_generate_options *o, const int64_t *out, const int64_t *n_out)
{
    if (!prompt || !o || !out || !n_out) return tg_error_status(TG_EINVAL, "generate: NULL argument");
    if (n_prompt < 1) return tg_error_status(TG_EINVAL, "generate: the prompt has no ids");
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size)
            return tg_error_status(TG_EINVAL, "generate: prompt id %lld at position %lld is out of range for vocab_size %lld",
                                   (long long)prompt[i], (long long)i, (long long)c->vocab_size);
    if (o->max_new_tokens < 0 || o->max_new_tokens > INT64_MAX / 2 - n_prompt)
        return tg_error_status(TG_EINVAL, "generate: max_new_tokens must be >= 0, got %lld", (long long)o->max_new_tokens);
    if (!(o->temperature >= 0) || !isfinite(o->temperature))
        return tg_error_status(TG_EINVAL, "generate: temperature must be finite and >= 0, got %g", o->temperature);
    if (o->top_k < 0 || o->top_k > c->vocab_size)
        return tg_error_status(TG_EINVAL, "generate: top_k must be in [0, vocab_size %lld], got %lld",
                               (long long)c->vocab_size, (long long)o->top_k);
    if (o->eos_id < -1 || o->eos_id >= c->vocab_size)
        return tg_error_status(TG_EINVAL, "generate: eos_id must be -1 or in [0, vocab_size %lld), got %lld",
                               (long long)c->vocab_size, (long long)o->eos_id);
    return TG_OK;
}

int tg_gpt_generate(tg_module *gpt, const int64_t *prompt, int64_t n_prompt, const tg_generate_options *o,
                    int64_t *out, int64_t *n_out)
{
    tg_gpt_config c;
    int st = tg_gpt_get_config(gpt, &c);
    if (st == TG_OK) st = check_options(&c, prompt, n_prompt, o, out, n_out);
    if (st != TG_OK) return st;
    memmove(out, prompt, sizeof *out * (size_t)n_prompt);
    int64_t len = n_prompt;
    *n_out = len;

    bool was_training = tg_module_is_training(gpt), grad = tg_set_grad_enabled(false);
    tg_module_train(gpt, false);
    /* the ops below run under the model's numerics, as its forward would */
    tg_numerics prev_numerics = tg__numerics_enter(tg_module_numerics(gpt));
    tg_tape *tp = tg_tape_new();
    kv_cache kv = {0};
    tg_dtype dt = tg_module_get_parameter(gpt, "tok_emb.weight")->dtype;
    if (!tp) st = TG_ENOMEM;
    else st = cache_init(&kv, &c, dt);

    for (int64_t step = 0; st == TG_OK && step < o->max_new_tokens; step++) {
        tg_tape_reset(tp);
        int64_t start = len > c.context_length ? len - c.context_length : 0; /* idx[:, -context_size:] */
        /* without the cache, or when the window has slid, the whole window is
         * computed again; with it, only the ids not yet in the cache */
        if (o->no_kv_cache || kv.len == 0 || start != kv.start) kv.start = start, kv.len = 0;
        int64_t p0 = kv.len, shape[2] = {1, len - start - p0};
        tg_tensor *ids = tg_from_data(tp, TG_I64, 2, shape, out + start + p0);
        tg_tensor *logits = ids ? cached_forward(tp, gpt, &c, &kv, ids, p0) : NULL;
        kv.len = len - start;
        int64_t vs[2] = {1, c.vocab_size}, next = 0;
        logits = logits ? tg_view(tp, tg_contiguous(tp, logits), 2, vs) : NULL;
        if (!logits || next_id(tp, logits, o, &next) != TG_OK) {
            st = TG_EINVAL;
            break;
        }
        if (next == o->eos_id) break; /* if idx_next == eos_id: break */
        out[len++] = next;
        *n_out = len;
    }
    tg_tape_free(kv.tp);
    tg_tape_free(tp);
    tg__numerics_leave(prev_numerics);
    tg_module_train(gpt, was_training);
    tg_set_grad_enabled(grad);
    const char *e = tg_last_error();
    if (st != TG_OK && (!e || !*e)) tg_error("generate: out of memory");
    return st;
}
