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

/* ---- MultiHeadAttention --------------------------------------------------------------------------------- */

/* (b, T, h * hd) -> (b, h, T, hd): .view(b, T, h, hd).transpose(1, 2) */
static tg_tensor *split_heads(tg_tape *tp, tg_tensor *t, int64_t h)
{
    if (!t) return NULL;
    int64_t split[4] = {t->shape[0], t->shape[1], h, t->shape[2] / h};
    return tg_transpose(tp, tg_view(tp, t, 4, split), 1, 2);
}

/* The queries q (b, h, T, hd) of positions p0 .. p0+T-1 against keys and
 * values (b, h, P, hd) of positions 0 .. P-1: the causal mask's rows p0 ..
 * p0+T-1 (a single query, the last position, masks nothing), softmax of the
 * scaled scores, dropout in training; (b, h, T, hd). */
static tg_tensor *attend_rows(tg_tape *tp, tg_module *m, tg_tensor *q, tg_tensor *keys, tg_tensor *values, int64_t p0)
{
    const attn_state *c = cfg(m);
    if (!q || !keys || !values) return NULL;
    int64_t T = q->shape[2], P = keys->shape[2], hd = q->shape[3];
    tg_tensor *s = tg_matmul(tp, q, tg_transpose(tp, keys, 2, 3)); /* (b, h, T, P) */
    if (T > 1) s = tg_masked_fill(tp, s, mask_bool(tp, m, p0, T, P), -INFINITY); /* mask.bool()[pos:pos + T, :P] */
    tg_tensor *w = tg_softmax(tp, tg_div_scalar(tp, s, pow((double)hd, 0.5)), -1);
    if (w && tg_module_is_training(m) && c->dropout > 0) w = tg_dropout(tp, w, c->dropout, tg_module_generator(m));
    return tg_matmul(tp, w, values); /* (b, h, T, hd) */
}

tg_tensor *tg__attend_cache_in_place(tg_tape *tp, tg_tensor *q, tg_tensor *keys, tg_tensor *values, int64_t p0,
                                     bool *done)
{
    *done = false;
    if (!q || !keys || !values || q->dtype != TG_F32 || tg_tape_numerics(tp) == TG_NUMERICS_EXACT ||
        (tg_is_grad_enabled() && (q->requires_grad || keys->requires_grad || values->requires_grad)))
        return NULL;
    int64_t shape[4] = {q->shape[0], q->shape[2], q->shape[1], q->shape[3]};
    tg_tensor *out = tg_empty(tp, TG_F32, 4, shape);
    if (!out) return *done = true, NULL;
    int st = tg__attend_cached(out, tg_tape_numerics(tp), q, keys, values, p0, pow((double)q->shape[3], 0.5));
    *done = st <= 0;
    return st == 0 ? tg_transpose(tp, out, 1, 2) : NULL;
}

/* The book's KV-cache forward (gpt_with_kv_cache's MultiHeadAttention) from
 * the new positions' q, k, v (b, h, T, hd): k and v go into the cache after
 * the pos positions it holds, the queries attend to all pos + T of them,
 * the causal mask's rows pos .. pos+T-1 (a single new position masks
 * nothing). The cache holds values, not graph: refused while grad is
 * recorded for the keys, whose gradient would otherwise be lost. */
static tg_tensor *mha_cached(tg_tape *tp, tg_module *m, tg_tensor *q, tg_tensor *k, tg_tensor *v)
{
    attn_state *c = tg_module_state(m);
    const char *name = tg_module_type_name(m);
    if (!q || !k || !v) return NULL;
    if (tg_is_grad_enabled() && (k->requires_grad || v->requires_grad || q->requires_grad))
        return tg_error("%s: the KV cache keeps values, not graph: run it with grad recording off", name);
    int64_t b = q->shape[0], T = q->shape[2], hd = q->shape[3], p0 = c->pos, P = p0 + T;
    if (P > c->context_length)
        return tg_error("%s: %lld cached and %lld new positions exceed context_length %lld (reset the KV cache)", name,
                        (long long)p0, (long long)T, (long long)c->context_length);
    if (c->cache_k && (c->cache_k->shape[0] != b || c->cache_k->dtype != q->dtype)) {
        if (p0 > 0)
            return tg_error("%s: the KV cache holds %lld positions of batch %lld, got batch %lld %s", name, (long long)p0,
                            (long long)c->cache_k->shape[0], (long long)b, tg_dtype_name(q->dtype));
        c->cache_k = c->cache_v = NULL;
    }
    if (!c->cache_k) {
        int64_t shape[4] = {b, c->num_heads, c->context_length, hd};
        c->cache_k = tg_empty(m->tape, q->dtype, 4, shape);
        c->cache_v = tg_empty(m->tape, q->dtype, 4, shape);
        if (!c->cache_k || !c->cache_v) return c->cache_k = c->cache_v = NULL;
    }
    if (tg_copy_(tg_narrow(tp, c->cache_k, 2, p0, T), k) != TG_OK ||
        tg_copy_(tg_narrow(tp, c->cache_v, 2, p0, T), v) != TG_OK)
        return NULL;
    tg_tensor *keys = tg_narrow(tp, c->cache_k, 2, 0, P), *values = tg_narrow(tp, c->cache_v, 2, 0, P), *ctx = NULL;
    bool done = false;
    if (!(tg_module_is_training(m) && c->dropout > 0)) ctx = tg__attend_cache_in_place(tp, q, keys, values, p0, &done);
    if (!done) ctx = attend_rows(tp, m, q, keys, values, p0);
    if (ctx) c->pos = P;
    return ctx;
}

static int mha_reset_cache(tg_module *m)
{
    ((attn_state *)tg_module_state(m))->pos = 0;
    return TG_OK;
}

static tg_tensor *mha_forward(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in)
{
    if (!check_input(m, n, in, 3)) return NULL;
    const attn_state *c = cfg(m);
    tg_tensor *x = in[0];
    int64_t b = x->shape[0], T = x->shape[1], h = c->num_heads, hd = c->d_out / c->num_heads;
    int64_t merged[3] = {b, T, c->d_out};
    tg_tensor *k = split_heads(tp, tg_module_forward(tp, child(m, "W_key"), x), h); /* (b, h, T, hd) */
    tg_tensor *q = split_heads(tp, tg_module_forward(tp, child(m, "W_query"), x), h);
    tg_tensor *v = split_heads(tp, tg_module_forward(tp, child(m, "W_value"), x), h);
    tg_tensor *ctx = tg_module_kv_cache_enabled(m) ? mha_cached(tp, m, q, k, v) : attention_step(tp, m, q, k, v, hd);
    ctx = tg_transpose(tp, ctx, 1, 2); /* (b, T, h, hd) */
    ctx = tg_view(tp, tg_contiguous(tp, ctx), 3, merged);
    return tg_module_forward(tp, child(m, "out_proj"), ctx);
}

static const tg_module_type mha_type = {.name = "MultiHeadAttention", .forward = mha_forward, .reset_cache = mha_reset_cache};

bool tg__is_mha_owning_output(const tg_module *m)
{
    return m && m->type == &mha_type && tg__is_linear(tg__entry_get(&m->children, "out_proj"));
}

bool tg__mha_last_position_ok(const tg_module *m, tg_numerics nm)
{
    return m && m->type == &mha_type && tg__module_pin_or(m, nm) != TG_NUMERICS_EXACT && !m->kv_cache &&
           !(m->training && ((const attn_state *)m->state)->dropout > 0);
}

tg_tensor *tg__mha_forward_last_position(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    if (!x) return tg__error_null_input("MultiHeadAttention");
    if (!check_input(m, 1, &x, 3)) return NULL;
    const attn_state *c = cfg(m);
    int64_t b = x->shape[0], T = x->shape[1], h = c->num_heads;
    int64_t merged[3] = {b, 1, c->d_out};
    tg_tensor *k = split_heads(tp, tg_module_forward(tp, child(m, "W_key"), x), h); /* (b, h, T, hd) */
    tg_tensor *v = split_heads(tp, tg_module_forward(tp, child(m, "W_value"), x), h);
    tg_tensor *q = split_heads(tp, tg_module_forward(tp, child(m, "W_query"), tg_narrow(tp, x, 1, T - 1, 1)), h);
    tg_numerics prev = tg__module_enter(tp, m); /* as tg_module_call would */
    tg_tensor *ctx = tg_transpose(tp, attend_rows(tp, m, q, k, v, T - 1), 1, 2); /* (b, 1, h, hd) */
    tg__tape_leave(tp, prev);
    return tg_module_forward(tp, child(m, "out_proj"), tg_view(tp, tg_contiguous(tp, ctx), 3, merged));
}

tg_module *tg_mha_new_config(tg_tape *tp, tg_attention_config c)
{
    const char *name = mha_type.name;
    if (!tg__check_size(name, "context_length", c.context_length) || !tg__check_dropout(name, c.dropout) ||
        !tg__check_size(name, "num_heads", c.num_heads) || !tg__check_size(name, "d_out", c.d_out))
        return NULL;
    if (c.d_out % c.num_heads != 0)
        return tg_error("%s: d_out (%lld) must be divisible by num_heads (%lld)", name, (long long)c.d_out,
                        (long long)c.num_heads);
    attn_state s = {.d_in = c.d_in, .d_out = c.d_out, .context_length = c.context_length, .num_heads = c.num_heads,
                    .dropout = c.dropout};
    tg_module *m = attention_new(tp, &mha_type, s);
    if (!m || !qkv_linears(tp, m, c.qkv_bias)) return NULL;
    if (tg_module_add_module(m, "out_proj", tg_linear_new(tp, c.d_out, c.d_out, true)) != TG_OK) return NULL;
    return dropout_and_mask(tp, m) ? m : NULL;
}

tg_module *tg_mha_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                      int64_t num_heads, bool qkv_bias)
{
    return tg_mha_new_config(tp, (tg_attention_config){d_in, d_out, context_length, num_heads, dropout, qkv_bias});
}
