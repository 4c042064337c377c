/* The attention modules of chapter 3, forward exactly as the book writes them
 * (tools/reference/book.py holds the PyTorch originals), including the causal
 * mask buffer PyTorch keeps in state_dict. Each is a module type with its own
 * state and registered children, as a user's module is. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

/* What every attention module keeps: its sizes (context_length 0 = no mask)
 * and, for MultiHeadAttention, its KV cache: keys and values of the
 * positions seen so far, (b, num_heads, context_length, head_dim) each,
 * allocated in the module's tape at the first cached forward and kept for
 * the next generation. */
typedef struct {
    int64_t d_in, d_out, context_length, num_heads;
    double dropout;
    tg_tensor *cache_k, *cache_v;
    int64_t pos; /* ptr_current_pos: positions the cache holds */
} attn_state;

static const attn_state *cfg(tg_module *m) { return tg_module_state(m); }
static tg_module *child(tg_module *m, const char *name) { return tg_module_get_submodule(m, name); }

/* The input checks all five share: rank, last dim, dtype, token count. */
static bool check_input(tg_module *m, int n, tg_tensor *const *in, int rank)
{
    if (!tg__check_ninputs(m, n, 1)) return false;
    const attn_state *s = cfg(m);
    const tg_tensor *x = in[0];
    const char *name = tg_module_type_name(m);
    char sh[64];
    if (x->ndim != rank || x->shape[rank - 1] != s->d_in) {
        tg_error("%s: input must be %s with d_in=%lld, got %s", name,
                 rank == 2 ? "(tokens, d_in)" : "(batch, tokens, d_in)", (long long)s->d_in, tg_shape_str(x, sh, 64));
        return false;
    }
    if (!tg__is_float(x->dtype)) {
        tg_error("%s: input must be float32 or float64, got %s", name, tg_dtype_name(x->dtype));
        return false;
    }
    if (s->context_length && x->shape[rank - 2] > s->context_length) {
        tg_error("%s: %lld tokens exceed context_length %lld", name, (long long)x->shape[rank - 2],
                 (long long)s->context_length);
        return false;
    }
    if (x->shape[rank - 2] == 0) {
        tg_error("%s: input has no tokens", name);
        return false;
    }
    return true;
}

/* mask.bool()[row0:row0 + rows, :cols] (the causal modules: [:T, :T]) */
static tg_tensor *mask_bool(tg_tape *tp, tg_module *m, int64_t row0, int64_t rows, int64_t cols)
{
    tg_tensor *mk = tg_module_get_buffer(m, "mask");
    return tg_compare_scalar(tp, tg_narrow(tp, tg_narrow(tp, mk, 0, row0, rows), 1, 0, cols), 0.0, TG_CMP_NE);
}

/* The weights-and-context step of the self-attention modules:
 *   w = softmax(scores / d_k**0.5, dim=-1); return w @ v */
static tg_tensor *attend(tg_tape *tp, tg_tensor *scores, tg_tensor *v, int64_t d_k)
{
    return tg_matmul(tp, tg_softmax(tp, tg_div_scalar(tp, scores, pow((double)d_k, 0.5)), -1), v);
}

/* keys.T: a permute in PyTorch (PermuteBackward0) */
static tg_tensor *keys_T(tg_tape *tp, tg_tensor *k)
{
    static const int perm[2] = {1, 0};
    return tg_permute(tp, k, perm);
}

/* A module of `type` with its sizes checked and stored. */
static tg_module *attention_new(tg_tape *tp, const tg_module_type *type, attn_state s)
{
    const char *name = type->name;
    if (!tg__check_size(name, "d_in", s.d_in) || !tg__check_size(name, "d_out", s.d_out)) return NULL;
    if (s.context_length || s.dropout) {
        if (!tg__check_size(name, "context_length", s.context_length) || !tg__check_dropout(name, s.dropout))
            return NULL;
        if (s.context_length > 65536)
            return tg_error("%s: context_length %lld is too large", name, (long long)s.context_length);
    }
    tg_module *m = tg_module_new(tp, type, sizeof s);
    if (m) *(attn_state *)tg_module_state(m) = s;
    return m;
}

/* W_query, W_key, W_value as Linear(d_in, d_out, bias), in that order. */
static bool qkv_linears(tg_tape *tp, tg_module *m, bool bias)
{
    const attn_state *s = cfg(m);
    static const char *const names[3] = {"W_query", "W_key", "W_value"};
    for (int i = 0; i < 3; i++)
        if (tg_module_add_module(m, names[i], tg_linear_new(tp, s->d_in, s->d_out, bias)) != TG_OK) return false;
    return true;
}

/* self.dropout = nn.Dropout(dropout)
 * self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1)) */
static bool dropout_and_mask(tg_tape *tp, tg_module *m)
{
    const attn_state *s = cfg(m);
    if (tg_module_add_module(m, "dropout", tg_dropout_new(tp, s->dropout)) != TG_OK) return false;
    int64_t shape[2] = {s->context_length, s->context_length};
    tg_tensor *ones = tg_ones(tp, TG_F32, 2, shape);
    return ones && tg_module_register_buffer(m, "mask", tg_triu(tp, ones, 1), true) == TG_OK;
}

/* ---- SelfAttention_v1 ------------------------------------------------------------------------ */

static tg_tensor *sa_v1_forward(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in)
{
    if (!check_input(m, n, in, 2)) return NULL;
    tg_tensor *x = in[0];
    tg_tensor *k = tg_matmul(tp, x, tg_module_get_parameter(m, "W_key")); /* keys = x @ self.W_key */
    tg_tensor *q = tg_matmul(tp, x, tg_module_get_parameter(m, "W_query"));
    tg_tensor *v = tg_matmul(tp, x, tg_module_get_parameter(m, "W_value"));
    tg_tensor *s = tg_matmul(tp, q, keys_T(tp, k)); /* attn_scores = queries @ keys.T */
    return attend(tp, s, v, cfg(m)->d_out);
}

static const tg_module_type sa_v1_type = {.name = "SelfAttention_v1", .forward = sa_v1_forward};

tg_module *tg_self_attention_v1_new(tg_tape *tp, int64_t d_in, int64_t d_out)
{
    tg_module *m = attention_new(tp, &sa_v1_type, (attn_state){.d_in = d_in, .d_out = d_out});
    if (!m) return NULL;
    int64_t shape[2] = {d_in, d_out};
    static const char *const names[3] = {"W_query", "W_key", "W_value"};
    for (int i = 0; i < 3; i++) {
        /* nn.Parameter(torch.rand(d_in, d_out)) */
        tg_tensor *w = tg_parameter_new(tp, TG_F32, 2, shape);
        if (!w || tg_uniform_(w, 0.0, 1.0, NULL) != TG_OK || tg_module_register_parameter(m, names[i], w) != TG_OK)
            return NULL;
    }
    return m;
}

/* ---- SelfAttention_v2 ------------------------------------------------------------------------- */

static tg_tensor *sa_v2_forward(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in)
{
    if (!check_input(m, n, in, 2)) return NULL;
    tg_tensor *x = in[0];
    tg_tensor *k = tg_module_forward(tp, child(m, "W_key"), x); /* keys = self.W_key(x) */
    tg_tensor *q = tg_module_forward(tp, child(m, "W_query"), x);
    tg_tensor *v = tg_module_forward(tp, child(m, "W_value"), x);
    tg_tensor *s = tg_matmul(tp, q, keys_T(tp, k));
    return attend(tp, s, v, cfg(m)->d_out);
}

static const tg_module_type sa_v2_type = {.name = "SelfAttention_v2", .forward = sa_v2_forward};

tg_module *tg_self_attention_v2_new(tg_tape *tp, int64_t d_in, int64_t d_out, bool qkv_bias)
{
    tg_module *m = attention_new(tp, &sa_v2_type, (attn_state){.d_in = d_in, .d_out = d_out});
    return m && qkv_linears(tp, m, qkv_bias) ? m : NULL;
}

/* ---- CausalAttention -------------------------------------------------------------------------------- */

/* The attention step of CausalAttention and MultiHeadAttention from the
 * scores to the context, through the layer table (autograd.h, tg_layer):
 * the book's ops, or one node as the module's numerics choose. */
static tg_tensor *attention_step(tg_tape *tp, tg_module *m, tg_tensor *q, tg_tensor *k, tg_tensor *v, int64_t d_k)
{
    const tg_layer *layer = tg_layer_find("attention");
    if (!layer) return NULL;
    tg_layer_args a = {.dropout = tg_module_is_training(m) ? cfg(m)->dropout : 0.0,
                       .scale = pow((double)d_k, 0.5),
                       .gen = tg_module_generator(m),
                       .heads_inner = q && q->ndim == 4};
    tg_tensor *in[4] = {q, k, v, q ? mask_bool(tp, m, 0, q->shape[q->ndim - 2], q->shape[q->ndim - 2]) : NULL};
    return tg_layer_apply(tp, layer, tg_module_is_fused(m), tg_tape_numerics(tp), 4, in, &a);
}

static tg_tensor *causal_forward(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in)
{
    if (!check_input(m, n, in, 3)) return NULL;
    tg_tensor *x = in[0];
    tg_tensor *k = tg_module_forward(tp, child(m, "W_key"), x); /* (b, T, d_out) */
    tg_tensor *q = tg_module_forward(tp, child(m, "W_query"), x);
    tg_tensor *v = tg_module_forward(tp, child(m, "W_value"), x);
    return attention_step(tp, m, q, k, v, cfg(m)->d_out);
}

static const tg_module_type causal_type = {.name = "CausalAttention", .forward = causal_forward};

tg_module *tg_causal_attention_new_config(tg_tape *tp, tg_attention_config c)
{
    attn_state s = {.d_in = c.d_in, .d_out = c.d_out, .context_length = c.context_length, .dropout = c.dropout};
    if (!tg__check_size(causal_type.name, "context_length", c.context_length)) return NULL;
    if (c.num_heads != 0 && c.num_heads != 1)
        return tg_error("%s: num_heads must be 0 or 1 (one head), got %lld", causal_type.name, (long long)c.num_heads);
    tg_module *m = attention_new(tp, &causal_type, s);
    return m && qkv_linears(tp, m, c.qkv_bias) && dropout_and_mask(tp, m) ? m : NULL;
}

tg_module *tg_causal_attention_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length,
                                   double dropout, bool qkv_bias)
{
    return tg_causal_attention_new_config(tp, (tg_attention_config){d_in, d_out, context_length, 1, dropout, qkv_bias});
}

/* ---- MultiHeadAttentionWrapper -------------------------------------------------------------------------- */

/* forward: torch.cat([head(x) for head in self.heads], dim=-1) */
static tg_tensor *wrapper_forward(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in)
{
    if (!check_input(m, n, in, 3)) return NULL;
    tg_module *heads = child(m, "heads");
    int h = tg_module_num_children(heads);
    tg_tensor **outs = tg_tape_alloc(tp, sizeof *outs * (size_t)h, false);
    if (!outs) return NULL;
    for (int i = 0; i < h; i++) outs[i] = tg_module_forward(tp, tg_module_child(heads, i), in[0]);
    return tg_cat(tp, h, outs, -1); /* (b, T, num_heads * d_out) */
}

static const tg_module_type wrapper_type = {.name = "MultiHeadAttentionWrapper", .forward = wrapper_forward};

/* One module per head: more than this is a mistake, not a model. */
#define MAX_WRAPPER_HEADS 4096

tg_module *tg_mha_wrapper_new_config(tg_tape *tp, tg_attention_config c)
{
    const char *name = wrapper_type.name;
    if (!tg__check_size(name, "context_length", c.context_length) || !tg__check_size(name, "num_heads", c.num_heads))
        return NULL;
    if (c.num_heads > MAX_WRAPPER_HEADS)
        return tg_error("%s: %lld heads (one module each) is more than %d", name, (long long)c.num_heads,
                        MAX_WRAPPER_HEADS);
    attn_state s = {.d_in = c.d_in, .d_out = c.d_out, .context_length = c.context_length, .num_heads = c.num_heads,
                    .dropout = c.dropout};
    tg_module *m = attention_new(tp, &wrapper_type, s);
    tg_module *heads = m ? tg_module_list_new(tp, 0, NULL) : NULL;
    if (!heads || tg_module_add_module(m, "heads", heads) != TG_OK) return NULL;
    tg_attention_config head = c;
    head.num_heads = 1;
    for (int64_t h = 0; h < c.num_heads; h++)
        if (tg_module_append(heads, tg_causal_attention_new_config(tp, head)) != TG_OK) return NULL;
    return m;
}

tg_module *tg_mha_wrapper_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                              int64_t num_heads, bool qkv_bias)
{
    tg_attention_config c = {d_in, d_out, context_length, num_heads, dropout, qkv_bias};
    return tg_mha_wrapper_new_config(tp, c);
}

/* ---- the decoder's attention: MultiHeadAttention and GroupedQueryAttention ---------------------- */

/* One module for every family: the book's MultiHeadAttention (chapter 3,
 * GPT-2's) and GroupedQueryAttention (Qwen3, Llama 3, Gemma 3) are this
 * module with other features (tg__attention_spec, nn_internal.h). Its KV
 * cache holds keys and values after RoPE, one per key-value group, of the
 * positions start .. pos-1: every position on a full layer, the last
 * `window` ones on a sliding layer; grown by doubling up to what the layer
 * can need. */
typedef struct {
    tg__attention_spec spec;
    tg_tensor *cache_k, *cache_v; /* (b, G, cap, hd) */
    int64_t pos;   /* positions seen (the book's ptr_current_pos) */
    int64_t start; /* the first position the cache holds */
} gqa_state;

static const gqa_state *gqa(const tg_module *m) { return m->state; }

/* (b, T, n * hd) -> (b, n, T, hd): .view(b, T, n, hd).transpose(1, 2) */
static tg_tensor *split_heads(tg_tape *tp, tg_tensor *t, int64_t n, int64_t hd)
{
    if (!t) return NULL;
    int64_t split[4] = {t->shape[0], t->shape[1], n, hd};
    return tg_transpose(tp, tg_view(tp, t, 4, split), 1, 2);
}

/* x.repeat_interleave(g, dim=1) of (b, G, P, hd): head h reads group h / g.
 * PyTorch makes it x.index_select(1, [0] * g + [1] * g + ...), and so does
 * this: its backward (IndexSelectBackward0) adds the g heads' gradients of
 * a group one after another, as PyTorch's index_add_ does. */
static tg_tensor *repeat_groups(tg_tape *tp, tg_tensor *x, int64_t g)
{
    if (!x || g == 1) return x;
    int64_t G = x->shape[1], n = G * g;
    tg_tensor *idx = tg_empty(tp, TG_I64, 1, &n);
    if (!idx) return NULL;
    int64_t *d = tg_data_ptr(idx);
    for (int64_t h = 0; h < n; h++) d[h] = h / g;
    return tg_index_select(tp, x, 1, idx);
}

/* The mask's rows of query positions q0 .. q0+T-1 over the keys of
 * positions k0 .. k0+P-1: true where the key is in the future, j > i, or,
 * with a window W, too far back, i - j >= W (the book's
 * triu(ones, 1) | triu(ones, W).T). MultiHeadAttention reads the same rows
 * of its "mask" buffer, as the book does. */
static tg_tensor *mask_rows(tg_tape *tp, tg_module *m, int64_t q0, int64_t T, int64_t k0, int64_t P)
{
    const tg__attention_spec *s = &gqa(m)->spec;
    if (s->mask_buffer && s->window == 0 && k0 == 0) {
        tg_tensor *mk = tg_module_get_buffer(m, "mask"); /* mask.bool()[q0:q0 + T, :P] */
        return tg_compare_scalar(tp, tg_narrow(tp, tg_narrow(tp, mk, 0, q0, T), 1, 0, P), 0.0, TG_CMP_NE);
    }
    int64_t shape[2] = {T, P};
    tg_tensor *mask = tg_empty(tp, TG_BOOL, 2, shape);
    if (!mask) return NULL;
    uint8_t *d = tg_data_ptr(mask);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < P; j++) {
            int64_t qi = q0 + i, kj = k0 + j;
            d[i * P + j] = kj > qi || (s->window > 0 && qi - kj >= s->window);
        }
    return mask;
}

/* Whether the mask has any true entry: a single query at the last position
 * of a full layer masks nothing, and the book's cached forward applies none. */
static bool masks_any(const tg__attention_spec *s, int64_t q0, int64_t T, int64_t k0, int64_t P)
{
    return T > 1 || (s->window > 0 && q0 - k0 >= s->window) || k0 + P - 1 > q0;
}

/* The composed attention of queries q (b, H, T, hd) at positions q0.. over
 * keys and values (b, H, P, hd) at k0..: the book's cached forward
 *   attn_scores = queries @ keys.transpose(2, 3); masked_fill(mask, -inf)
 *   softmax(attn_scores / head_dim**0.5) (or the scores as they are after
 *   Gemma 3's query scale), dropout in training; @ values */
static tg_tensor *attend_rows(tg_tape *tp, tg_module *m, tg_tensor *q, tg_tensor *keys, tg_tensor *values,
                              int64_t q0, int64_t k0)
{
    const tg__attention_spec *sp = &gqa(m)->spec;
    if (!q || !keys || !values) return NULL;
    int64_t T = q->shape[2], P = keys->shape[2], hd = q->shape[3];
    tg_tensor *s = tg_matmul(tp, q, tg_transpose(tp, keys, 2, 3)); /* (b, H, T, P) */
    if (masks_any(sp, q0, T, k0, P)) s = tg_masked_fill(tp, s, mask_rows(tp, m, q0, T, k0, P), -INFINITY);
    if (!(sp->q_scale > 0)) s = tg_div_scalar(tp, s, pow((double)hd, 0.5));
    tg_tensor *w = tg_softmax(tp, s, -1);
    if (w && tg_module_is_training(m) && sp->dropout > 0) w = tg_dropout(tp, w, sp->dropout, tg_module_generator(m));
    return tg_matmul(tp, w, values); /* (b, H, T, hd) */
}

tg_tensor *tg__attend_cache_in_place(tg_tape *tp, tg_tensor *q, tg_tensor *keys, tg_tensor *values, int64_t p0,
                                     double scale, int64_t window, bool *done)
{
    *done = false;
    if (!q || !keys || !values || q->dtype != TG_F32 || tg_tape_numerics(tp) == TG_NUMERICS_EXACT ||
        (tg_is_grad_enabled() && (q->requires_grad || keys->requires_grad || values->requires_grad)))
        return NULL;
    int64_t shape[4] = {q->shape[0], q->shape[2], q->shape[1], q->shape[3]};
    tg_tensor *out = tg_empty(tp, TG_F32, 4, shape);
    if (!out) return *done = true, NULL;
    int st = tg__attend_cached(out, tg_tape_numerics(tp), q, keys, values, p0, scale, window);
    *done = st <= 0;
    return st == 0 ? tg_transpose(tp, out, 1, 2) : NULL;
}

/* The cache after the new keys and values k, v (b, G, T, hd) at position
 * pos: *keys and *values the positions *k0 .. pos+T-1 the new queries can
 * see (all of them on a full layer; on a sliding one from the first new
 * query's window on), or false with an error. The cache keeps values, not
 * graph: refused while grad is recorded for them. */
static bool cache_append(tg_module *m, tg_tape *tp, tg_tensor *k, tg_tensor *v, tg_tensor **keys, tg_tensor **values,
                         int64_t *k0)
{
    gqa_state *c = tg_module_state(m);
    const tg__attention_spec *s = &c->spec;
    const char *name = tg_module_type_name(m);
    int64_t b = k->shape[0], T = k->shape[2], p0 = c->pos, P = p0 + T;
    if (tg_is_grad_enabled() && (k->requires_grad || v->requires_grad)) {
        tg_error("%s: the KV cache keeps values, not graph: run it with grad recording off", name);
        return false;
    }
    if (P > s->context_length) {
        tg_error("%s: %lld cached and %lld new positions exceed context_length %lld (reset the KV cache)", name,
                 (long long)p0, (long long)T, (long long)s->context_length);
        return false;
    }
    tg_tensor *ck = c->cache_k;
    if (ck && (ck->shape[0] != b || ck->dtype != k->dtype)) {
        if (p0 > 0) {
            tg_error("%s: the KV cache holds %lld positions of batch %lld, got batch %lld %s", name, (long long)p0,
                     (long long)ck->shape[0], (long long)b, tg_dtype_name(k->dtype));
            return false;
        }
        c->cache_k = c->cache_v = ck = NULL;
    }
    if (p0 == 0) c->start = 0;
    /* a sliding layer drops what no query will see again: the first new
     * query (position p0) sees p0 - window + 1 on; the buffer holds
     * positions start .. p0-1 in its first slots and is compacted only when
     * the new ones do not fit after them (every ~window steps) */
    int64_t keep0 = s->window > 0 && p0 - s->window + 1 > c->start ? p0 - s->window + 1 : c->start;
    if (!ck || p0 - c->start + T > ck->shape[2]) {
        int64_t held = p0 - keep0, need = held + T, cap = ck ? ck->shape[2] : 0;
        if (cap < need) { /* grow: double, at least 64, at most the context (a sliding layer: 2 windows) */
            cap = cap ? cap * 2 : 64;
            if (s->window > 0 && cap > 2 * s->window) cap = 2 * s->window;
            if (cap < need) cap = need;
            if (cap > s->context_length) cap = s->context_length;
        }
        int64_t shape[4] = {b, s->num_kv_groups, cap, s->head_dim};
        bool same = ck && ck->shape[2] == cap;
        tg_tensor *nk = same ? ck : tg_empty(m->tape, k->dtype, 4, shape);
        tg_tensor *nv = same ? c->cache_v : nk ? tg_empty(m->tape, k->dtype, 4, shape) : NULL;
        if (!nv) return false;
        if (held > 0) { /* positions keep0 .. p0-1 to the front (through a copy when in place) */
            int64_t off = keep0 - c->start;
            tg_tensor *sk = tg_narrow(tp, c->cache_k, 2, off, held), *sv = tg_narrow(tp, c->cache_v, 2, off, held);
            if (same && off > 0) sk = tg_clone(tp, sk), sv = tg_clone(tp, sv);
            if (tg_copy_(tg_narrow(tp, nk, 2, 0, held), sk) != TG_OK || tg_copy_(tg_narrow(tp, nv, 2, 0, held), sv) != TG_OK)
                return false;
        }
        c->cache_k = nk, c->cache_v = nv, c->start = keep0;
    }
    int64_t at = p0 - c->start, from = keep0 - c->start, need = p0 + T - keep0;
    if (tg_copy_(tg_narrow(tp, c->cache_k, 2, at, T), k) != TG_OK ||
        tg_copy_(tg_narrow(tp, c->cache_v, 2, at, T), v) != TG_OK)
        return false;
    *keys = tg_narrow(tp, c->cache_k, 2, from, need);
    *values = tg_narrow(tp, c->cache_v, 2, from, need);
    *k0 = keep0;
    return *keys && *values;
}

/* The checks of the input x (b, T, d_in) and, with RoPE, cos and sin (T, hd). */
static bool check_gqa_input(tg_module *m, int n, tg_tensor *const *in)
{
    const tg__attention_spec *s = &gqa(m)->spec;
    if (!tg__check_ninputs(m, n, s->rope ? 3 : 1)) return false;
    const tg_tensor *x = in[0];
    const char *name = tg_module_type_name(m);
    char sh[64];
    if (x->ndim != 3 || x->shape[2] != s->d_in) {
        tg_error("%s: input must be (batch, tokens, d_in) with d_in=%lld, got %s", name, (long long)s->d_in,
                 tg_shape_str(x, sh, 64));
        return false;
    }
    if (!tg__is_float(x->dtype)) {
        tg_error("%s: input must be float32 or float64, got %s", name, tg_dtype_name(x->dtype));
        return false;
    }
    if (x->shape[1] == 0) {
        tg_error("%s: input has no tokens", name);
        return false;
    }
    if (!m->kv_cache && x->shape[1] > s->context_length) {
        tg_error("%s: %lld tokens exceed context_length %lld", name, (long long)x->shape[1], (long long)s->context_length);
        return false;
    }
    if (s->rope && (in[1]->ndim != 2 || in[1]->shape[0] != x->shape[1] || in[1]->shape[1] != s->head_dim ||
                    !tg_same_shape(in[1], in[2]))) {
        tg_error("%s: cos and sin must be (%lld, %lld), got %s", name, (long long)x->shape[1], (long long)s->head_dim,
                 tg_shape_str(in[1], sh, sizeof sh));
        return false;
    }
    return true;
}

/* apply_rope(x, cos, sin) through the layer table: x * cos + cat(-x2, x1) * sin */
static tg_tensor *rope(tg_tape *tp, tg_module *m, tg_tensor *x, tg_tensor *cos, tg_tensor *sin)
{
    const tg_layer *layer = tg_layer_find("rope");
    tg_tensor *in[3] = {x, cos, sin};
    tg_layer_args a = {0};
    return layer && x ? tg_layer_apply(tp, layer, tg_module_is_fused(m), tg_tape_numerics(tp), 3, in, &a) : NULL;
}

/* The projections of x into heads: q from xq (x, or its last position),
 * k and v from x, in the book's order of the family (MultiHeadAttention
 * computes the keys first), QK-norm, RoPE with cos and sin (rows of x's
 * positions; NULL without RoPE), then Gemma 3's query scale. */
static void project(tg_tape *tp, tg_module *m, tg_tensor *x, tg_tensor *xq, tg_tensor *cos, tg_tensor *sin,
                    tg_tensor **q, tg_tensor **k, tg_tensor **v)
{
    const tg__attention_spec *s = &gqa(m)->spec;
    int64_t H = s->num_heads, G = s->num_kv_groups, hd = s->head_dim;
    if (s->keys_first) *k = split_heads(tp, tg_module_forward(tp, child(m, "W_key"), x), G, hd);
    *q = split_heads(tp, tg_module_forward(tp, child(m, "W_query"), xq), H, hd);
    if (!s->keys_first) *k = split_heads(tp, tg_module_forward(tp, child(m, "W_key"), x), G, hd);
    *v = split_heads(tp, tg_module_forward(tp, child(m, "W_value"), x), G, hd);
    tg_module *qn = tg__entry_get(&m->children, "q_norm"), *kn = tg__entry_get(&m->children, "k_norm");
    if (qn && *q) *q = tg_module_forward(tp, qn, *q);
    if (kn && *k) *k = tg_module_forward(tp, kn, *k);
    if (s->rope) {
        int64_t T = x->shape[1], Tq = xq->shape[1];
        *q = rope(tp, m, *q, Tq == T ? cos : tg_narrow(tp, cos, 0, T - Tq, Tq), Tq == T ? sin : tg_narrow(tp, sin, 0, T - Tq, Tq));
        *k = rope(tp, m, *k, cos, sin);
    }
    if (s->q_scale > 0 && *q) *q = tg_mul_scalar(tp, *q, s->q_scale); /* queries = queries * self.scaling */
}

/* context (b, H, T, hd) -> (b, T, H * hd) -> out_proj: the book's
 * .transpose(1, 2).contiguous().view(...) (MultiHeadAttention) or
 * .transpose(1, 2).reshape(...) (GroupedQueryAttention) */
static tg_tensor *merge_and_project(tg_tape *tp, tg_module *m, tg_tensor *ctx)
{
    const tg__attention_spec *s = &gqa(m)->spec;
    if (!ctx) return NULL;
    int64_t merged[3] = {ctx->shape[0], ctx->shape[2], s->num_heads * s->head_dim};
    ctx = tg_transpose(tp, ctx, 1, 2);
    ctx = s->merge_view ? tg_view(tp, tg_contiguous(tp, ctx), 3, merged) : tg_reshape(tp, ctx, 3, merged);
    return tg_module_forward(tp, child(m, "out_proj"), ctx);
}

/* The scores' divisor the kernels take: head_dim ** 0.5, or with Gemma 3's
 * query scale (already applied to the queries) 1. */
static double score_divisor(const tg__attention_spec *s) { return s->q_scale > 0 ? 1.0 : pow((double)s->head_dim, 0.5); }

static tg_tensor *gqa_forward(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in)
{
    if (!check_gqa_input(m, n, in)) return NULL;
    gqa_state *c = tg_module_state(m);
    const tg__attention_spec *s = &c->spec;
    tg_tensor *x = in[0], *q, *k, *v;
    int64_t T = x->shape[1], H = s->num_heads, G = s->num_kv_groups;
    project(tp, m, x, x, s->rope ? in[1] : NULL, s->rope ? in[2] : NULL, &q, &k, &v);
    if (!q || !k || !v) return NULL;
    bool training_drop = tg_module_is_training(m) && s->dropout > 0;
    tg_tensor *ctx = NULL;
    if (tg_module_kv_cache_enabled(m)) {
        tg_tensor *keys, *values;
        int64_t p0 = c->pos, k0;
        if (!cache_append(m, tp, k, v, &keys, &values, &k0)) return NULL;
        bool done = false;
        if (!training_drop) /* the groups read in place */
            ctx = tg__attend_cache_in_place(tp, q, keys, values, p0 - k0, score_divisor(s), s->window, &done);
        if (!done) ctx = attend_rows(tp, m, q, repeat_groups(tp, keys, H / G), repeat_groups(tp, values, H / G), p0, k0);
        if (!ctx) return NULL;
        c->pos = p0 + T;
    } else {
        const tg_layer *layer = tg_layer_find("attention");
        if (!layer) return NULL;
        tg_layer_args a = {.dropout = training_drop ? s->dropout : 0.0, .scale = score_divisor(s),
                           .no_divide = s->q_scale > 0, .window = s->window, .gen = tg_module_generator(m),
                           .heads_inner = true};
        tg_tensor *in4[4] = {q, repeat_groups(tp, k, H / G), repeat_groups(tp, v, H / G), mask_rows(tp, m, 0, T, 0, T)};
        ctx = tg_layer_apply(tp, layer, tg_module_is_fused(m), tg_tape_numerics(tp), 4, in4, &a);
    }
    return merge_and_project(tp, m, ctx);
}

static int gqa_reset_cache(tg_module *m)
{
    gqa_state *c = tg_module_state(m);
    c->pos = c->start = 0;
    return TG_OK;
}

static const tg_module_type gqa_type = {.name = "MultiHeadAttention", .forward = gqa_forward, .reset_cache = gqa_reset_cache};

bool tg__is_attention(const tg_module *m) { return m && m->type == &gqa_type; }

bool tg__attention_owns_output(const tg_module *m)
{
    return tg__is_attention(m) && tg__is_linear(tg__entry_get(&m->children, "out_proj"));
}

bool tg__attention_last_position_ok(const tg_module *m, tg_numerics nm)
{
    return tg__is_attention(m) && tg__module_pin_or(m, nm) != TG_NUMERICS_EXACT && !m->kv_cache &&
           !(m->training && gqa(m)->spec.dropout > 0);
}

tg_tensor *tg__attention_last_position(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in)
{
    if (!check_gqa_input(m, n, in)) return NULL;
    const tg__attention_spec *s = &gqa(m)->spec;
    tg_tensor *x = in[0], *q, *k, *v;
    int64_t T = x->shape[1], H = s->num_heads, G = s->num_kv_groups;
    tg_numerics prev = tg__module_enter(tp, m); /* as tg_module_call would */
    project(tp, m, x, tg_narrow(tp, x, 1, T - 1, 1), s->rope ? in[1] : NULL, s->rope ? in[2] : NULL, &q, &k, &v);
    tg_tensor *ctx = q && k && v ? attend_rows(tp, m, q, repeat_groups(tp, k, H / G), repeat_groups(tp, v, H / G), T - 1, 0)
                                 : NULL;
    tg__tape_leave(tp, prev);
    return merge_and_project(tp, m, ctx);
}

tg_module *tg__attention_new(tg_tape *tp, const tg__attention_spec *spec, tg_dtype weights)
{
    tg__attention_spec s = *spec;
    const char *name = s.class_name ? s.class_name : gqa_type.name;
    if (!tg__check_size(name, "d_in", s.d_in) || !tg__check_size(name, "context_length", s.context_length) ||
        !tg__check_size(name, "num_heads", s.num_heads) || !tg__check_size(name, "head_dim", s.head_dim) ||
        !tg__check_size(name, "num_kv_groups", s.num_kv_groups) || !tg__check_size(name, "d_out", s.d_out) ||
        !tg__check_dropout(name, s.dropout))
        return NULL;
    if (s.num_heads % s.num_kv_groups != 0)
        return tg_error("%s: num_heads (%lld) must be divisible by num_kv_groups (%lld)", name, (long long)s.num_heads,
                        (long long)s.num_kv_groups);
    if (s.mask_buffer && s.context_length > 65536)
        return tg_error("%s: context_length %lld is too large", name, (long long)s.context_length);
    tg_module *m = tg_module_new(tp, &gqa_type, sizeof(gqa_state));
    if (!m) return NULL;
    if (s.class_name) tg__module_set_class(m, s.class_name);
    ((gqa_state *)tg_module_state(m))->spec = s;
    int64_t d = s.d_in, q_out = s.num_heads * s.head_dim, kv_out = s.num_kv_groups * s.head_dim;
    /* __init__'s order: W_query, W_key, W_value (Llama 3: W_key, W_value, W_query), out_proj */
    const struct {
        const char *name;
        int64_t out;
    } qkv[3] = {{"W_query", q_out}, {"W_key", kv_out}, {"W_value", kv_out}};
    for (int i = 0; i < 3; i++) {
        int j = s.kvq_init ? (i + 1) % 3 : i;
        if (tg_module_add_module(m, qkv[j].name, tg__linear_new_as(tp, d, qkv[j].out, s.qkv_bias, weights)) != TG_OK)
            return NULL;
    }
    if (tg_module_add_module(m, "out_proj", tg__linear_new_as(tp, q_out, s.d_out, s.out_bias, weights)) != TG_OK)
        return NULL;
    if (s.qk_norm && (tg_module_add_module(m, "q_norm", tg__rms_norm_new_ex(tp, s.head_dim, s.norm_eps, s.norm_offset,
                                                                            s.norm_book)) != TG_OK ||
                      tg_module_add_module(m, "k_norm", tg__rms_norm_new_ex(tp, s.head_dim, s.norm_eps, s.norm_offset,
                                                                            s.norm_book)) != TG_OK))
        return NULL;
    if (s.mask_buffer) {
        /* self.dropout = nn.Dropout(dropout); self.register_buffer('mask',
         * torch.triu(torch.ones(context_length, context_length), diagonal=1)) */
        if (tg_module_add_module(m, "dropout", tg_dropout_new(tp, s.dropout)) != TG_OK) return NULL;
        int64_t shape[2] = {s.context_length, s.context_length};
        tg_tensor *ones = tg_ones(tp, TG_F32, 2, shape);
        if (!ones || tg_module_register_buffer(m, "mask", tg_triu(tp, ones, 1), true) != TG_OK) return NULL;
    }
    return m;
}

tg_module *tg_mha_new_config(tg_tape *tp, tg_attention_config c)
{
    const char *name = "MultiHeadAttention";
    if (!tg__check_size(name, "context_length", c.context_length) || !tg__check_dropout(name, c.dropout) ||
        !tg__check_size(name, "num_heads", c.num_heads) || !tg__check_size(name, "d_out", c.d_out) ||
        !tg__check_size(name, "d_in", c.d_in))
        return NULL;
    if (c.d_out % c.num_heads != 0)
        return tg_error("%s: d_out (%lld) must be divisible by num_heads (%lld)", name, (long long)c.d_out,
                        (long long)c.num_heads);
    /* the book's MultiHeadAttention: W_query, W_key, W_value (d_in, d_out),
     * out_proj Linear(d_out, d_out) with its bias, dropout and the mask buffer;
     * forward computes the keys first and merges the heads with .contiguous().view() */
    tg__attention_spec s = {.class_name = name, .d_in = c.d_in, .d_out = c.d_out, .context_length = c.context_length,
                            .num_heads = c.num_heads, .num_kv_groups = c.num_heads, .head_dim = c.d_out / c.num_heads,
                            .dropout = c.dropout, .qkv_bias = c.qkv_bias, .out_bias = true, .mask_buffer = true,
                            .keys_first = true, .merge_view = true};
    return tg__attention_new(tp, &s, TG_F32);
}

tg_module *tg_mha_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                      int64_t num_heads, bool qkv_bias)
{
    return tg_mha_new_config(tp, (tg_attention_config){d_in, d_out, context_length, num_heads, dropout, qkv_bias});
}
