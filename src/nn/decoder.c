/* The decoder's RoPE families, Qwen3 and Llama 3.2, as the book's bonus code
 * builds them (pkg/llms_from_scratch/qwen3.py and llama3.py in the book's
 * repository; tools/reference/decoder.py runs them): RoPE tables, RMSNorm,
 * GroupedQueryAttention with optional QK-norm, the SwiGLU FeedForward and
 * the block that joins them. The model around them (tok_emb, trf_blocks,
 * final_norm, out_head, the KV cache's position) is GPTModel's, in gpt.c:
 * one decoder whose configuration picks these parts or GPT-2's. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tapegrad/gpt.h"

/* ---- RoPE tables ---------------------------------------------------------------------------- */

/* The book's compute_rope_params, every step a float32 tensor op as PyTorch
 * computes it:
 *   inv_freq = 1.0 / (theta_base ** (arange(0, hd, 2).float() / hd))
 *   (Llama 3) wavelen = 2 * pi / inv_freq; inv_freq / factor where the
 *             wavelength exceeds the low-frequency one, the smoothed blend
 *             (1 - s) * (inv_freq / factor) + s * inv_freq in between,
 *             s = (orig_ctx / wavelen - low) / (high - low)
 *   angles = positions[:, None] * inv_freq[None, :], cat([angles, angles])
 *   cos, sin = torch.cos(angles), torch.sin(angles)
 * Python's `a / t` on a tensor is t.reciprocal() * a; scalars are rounded
 * to float32 first. Rows are computed as positions ask for them (each row
 * depends on its position only), so a 131,072-position context costs
 * nothing until it is used. */
static void inv_freq_of(const tg__rope *r, float *inv)
{
    int64_t h2 = r->head_dim / 2;
    for (int64_t i = 0; i < h2; i++) inv[i] = (float)(2 * i) / (float)r->head_dim;
    tg__vrpowf(inv, (float)r->base, inv, h2);
    for (int64_t i = 0; i < h2; i++) inv[i] = 1.0f / inv[i];
    const tg_rope_freq *f = &r->freq;
    if (!(f->factor > 0)) return;
    const float low_wl = (float)((double)f->original_context_length / f->low_freq_factor);
    const float high_wl = (float)((double)f->original_context_length / f->high_freq_factor);
    const float two_pi = (float)(2 * 3.14159265358979323846), orig = (float)f->original_context_length;
    const float low = (float)f->low_freq_factor, span = (float)(f->high_freq_factor - f->low_freq_factor);
    const float factor = (float)f->factor;
    for (int64_t i = 0; i < h2; i++) {
        float wl = (1.0f / inv[i]) * two_pi;
        float scaled = inv[i] / factor;
        float s = ((1.0f / wl) * orig - low) / span;
        float smoothed = (1.0f - s) * scaled + s * inv[i];
        if (wl <= low_wl && wl >= high_wl)
            inv[i] = smoothed;
        else if (wl > low_wl)
            inv[i] = scaled;
    }
}

int tg__rope_need(tg__rope *r, tg_tape *tp, int64_t rows)
{
    if (rows <= r->rows) return TG_OK;
    if (rows > r->context_length)
        return tg_error_status(TG_EINVAL, "RoPE: position %lld is beyond context_length %lld", (long long)rows - 1,
                               (long long)r->context_length);
    int64_t n = r->rows * 2 > rows ? r->rows * 2 : rows;
    if (n < 64) n = 64;
    if (n > r->context_length) n = r->context_length;
    int64_t hd = r->head_dim, h2 = hd / 2, shape[2] = {n, hd};
    tg_tensor *c = tg_empty(tp, TG_F32, 2, shape), *s = c ? tg_empty(tp, TG_F32, 2, shape) : NULL;
    float *inv = tg_tape_alloc(tp, sizeof *inv * (size_t)h2, false);
    if (!c || !s || !inv) return TG_ENOMEM;
    inv_freq_of(r, inv);
    float *cd = tg_data_ptr(c), *sd = tg_data_ptr(s);
#pragma omp parallel for if (n * hd > (1 << 16)) schedule(static)
    for (int64_t p = 0; p < n; p++) {
        float *cr = cd + p * hd, *sr = sd + p * hd;
        for (int64_t i = 0; i < h2; i++) cr[i] = (float)p * inv[i];
        tg__vsinf(sr, cr, h2);
        tg__vcosf(cr, cr, h2);
        memcpy(cr + h2, cr, sizeof *cr * (size_t)h2);
        memcpy(sr + h2, sr, sizeof *sr * (size_t)h2);
    }
    r->cos = c, r->sin = s, r->rows = n;
    return TG_OK;
}

/* ---- the SwiGLU FeedForward ------------------------------------------------------------------ */

static tg_module *child(tg_module *m, const char *name) { return tg_module_get_submodule(m, name); }

/* forward: x_fc1 = self.fc1(x); x_fc2 = self.fc2(x)
 *          x = nn.functional.silu(x_fc1) * x_fc2; return self.fc3(x)
 * through the layer table's "swiglu" when fc1, fc2, fc3 are the built-in
 * Linear layers (LoRA wraps them: then each child's own forward). */
static tg_tensor *swiglu_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    tg_module *f1 = child(self, "fc1"), *f2 = child(self, "fc2"), *f3 = child(self, "fc3");
    const tg_layer *layer = tg_layer_find("swiglu");
    if (layer && tg__is_linear(f1) && tg__is_linear(f2) && tg__is_linear(f3) && !tg__entry_get(&f1->params, "bias") &&
        !tg__entry_get(&f2->params, "bias") && !tg__entry_get(&f3->params, "bias")) {
        tg_tensor *in4[4] = {in[0], tg__entry_get(&f1->params, "weight"), tg__entry_get(&f2->params, "weight"),
                             tg__entry_get(&f3->params, "weight")};
        tg_layer_args a = {0};
        return tg_layer_apply(tp, layer, tg_module_is_fused(self), tg_tape_numerics(tp), 4, in4, &a);
    }
    tg_tensor *a = tg_module_forward(tp, f1, in[0]);
    tg_tensor *b = a ? tg_module_forward(tp, f2, in[0]) : NULL;
    return b ? tg_module_forward(tp, f3, tg_mul(tp, tg_silu(tp, a), b)) : NULL;
}

static const tg_module_type swiglu_type = {.name = "FeedForward", .forward = swiglu_forward};

static tg_module *swiglu_new(tg_tape *tp, int64_t d, int64_t hidden, tg_dtype dt)
{
    tg_module *m = tg_module_new(tp, &swiglu_type, 0);
    if (!m || tg_module_add_module(m, "fc1", tg__linear_new_as(tp, d, hidden, false, dt)) != TG_OK ||
        tg_module_add_module(m, "fc2", tg__linear_new_as(tp, d, hidden, false, dt)) != TG_OK ||
        tg_module_add_module(m, "fc3", tg__linear_new_as(tp, hidden, d, false, dt)) != TG_OK)
        return NULL;
    return m;
}

/* ---- GroupedQueryAttention ------------------------------------------------------------------- */

/* Sizes, and the KV cache: keys and values after RoPE of the positions seen
 * so far, (b, n_kv_groups, cap, head_dim): the groups, not the repeated
 * heads; grown by doubling up to context_length. */
typedef struct {
    int64_t d_in, num_heads, num_kv_groups, head_dim, context_length;
    tg_tensor *cache_k, *cache_v;
    int64_t pos;
} gqa_state;

/* (b, T, n * hd) -> (b, n, T, hd): .view(b, T, n, hd).transpose(1, 2) */
static tg_tensor *split_heads(tg_tape *tp, tg_tensor *t, int64_t n, int64_t hd)
{
    if (!t) return NULL;
    int64_t split[4] = {t->shape[0], t->shape[1], n, hd};
    return tg_transpose(tp, tg_view(tp, t, 4, split), 1, 2);
}

/* x.repeat_interleave(g, dim=1) of (b, G, P, hd): head h reads group h / g */
static tg_tensor *repeat_groups(tg_tape *tp, tg_tensor *x, int64_t g)
{
    if (!x || g == 1) return x;
    int64_t b = x->shape[0], G = x->shape[1], P = x->shape[2], hd = x->shape[3];
    int64_t e5[5] = {b, G, g, P, hd}, out[4] = {b, G * g, P, hd};
    tg_tensor *u = tg_unsqueeze(tp, x, 2);
    return tg_reshape(tp, tg_expand(tp, u, 5, e5), 4, out);
}

/* The causal mask's rows p0 .. p0+T-1 over P positions: true above the
 * diagonal, torch.triu(ones(P, P), diagonal=1)[p0:p0 + T, :P]. */
static tg_tensor *causal_rows(tg_tape *tp, int64_t p0, int64_t T, int64_t P)
{
    int64_t shape[2] = {T, P};
    tg_tensor *m = tg_empty(tp, TG_BOOL, 2, shape);
    if (!m) return NULL;
    uint8_t *d = tg_data_ptr(m);
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < P; j++) d[i * P + j] = j > p0 + i;
    return m;
}

/* apply_rope(x, cos, sin): x (b, n, T, hd), cos and sin (T, hd) the rows of
 * x's positions; x * cos + cat(-x2, x1) * sin through the layer table. */
static tg_tensor *rope(tg_tape *tp, tg_module *m, tg_tensor *x, tg_tensor *cos, tg_tensor *sin)
{
    const tg_layer *layer = tg_layer_find("rope");
    tg_tensor *in[3] = {x, cos, sin};
    tg_layer_args a = {0};
    return layer && x ? tg_layer_apply(tp, layer, tg_module_is_fused(m), tg_tape_numerics(tp), 3, in, &a) : NULL;
}

/* The cache after the new keys and values (b, G, T, hd) at position pos:
 * the first pos + T positions of each, or NULL with an error. */
static bool cache_append(tg_module *m, tg_tape *tp, tg_tensor *k, tg_tensor *v, tg_tensor **keys, tg_tensor **values)
{
    gqa_state *c = tg_module_state(m);
    const char *name = tg_module_type_name(m);
    int64_t b = k->shape[0], T = k->shape[2], p0 = c->pos, P = p0 + T;
    if (tg_is_grad_enabled() && (k->requires_grad || v->requires_grad)) {
        tg_error("%s: the KV cache keeps values, not graph: run it with grad recording off", name);
        return false;
    }
    if (P > c->context_length) {
        tg_error("%s: %lld cached and %lld new positions exceed context_length %lld (reset the KV cache)", name,
                 (long long)p0, (long long)T, (long long)c->context_length);
        return false;
    }
    tg_tensor *ck = c->cache_k;
    if (ck && (ck->shape[0] != b || ck->dtype != k->dtype)) {
        if (p0 > 0) {
            tg_error("%s: the KV cache holds %lld positions of batch %lld, got batch %lld", name, (long long)p0,
                     (long long)ck->shape[0], (long long)b);
            return false;
        }
        c->cache_k = c->cache_v = ck = NULL;
    }
    if (!ck || ck->shape[2] < P) { /* grow: double, at least 64, at most the context */
        int64_t cap = ck ? ck->shape[2] * 2 : 64;
        if (cap < P) cap = P;
        if (cap > c->context_length) cap = c->context_length;
        int64_t shape[4] = {b, c->num_kv_groups, cap, c->head_dim};
        tg_tensor *nk = tg_empty(m->tape, k->dtype, 4, shape), *nv = nk ? tg_empty(m->tape, k->dtype, 4, shape) : NULL;
        if (!nv) return false;
        if (p0 > 0 && (tg_copy_(tg_narrow(tp, nk, 2, 0, p0), tg_narrow(tp, c->cache_k, 2, 0, p0)) != TG_OK ||
                       tg_copy_(tg_narrow(tp, nv, 2, 0, p0), tg_narrow(tp, c->cache_v, 2, 0, p0)) != TG_OK))
            return false;
        c->cache_k = nk, c->cache_v = nv;
    }
    if (tg_copy_(tg_narrow(tp, c->cache_k, 2, p0, T), k) != TG_OK ||
        tg_copy_(tg_narrow(tp, c->cache_v, 2, p0, T), v) != TG_OK)
        return false;
    *keys = tg_narrow(tp, c->cache_k, 2, 0, P);
    *values = tg_narrow(tp, c->cache_v, 2, 0, P);
    return *keys && *values;
}

/* forward(x, cos, sin): the book's GroupedQueryAttention.forward, cos and
 * sin the table rows of x's positions. */
static tg_tensor *gqa_forward(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(m, n, 3)) return NULL;
    gqa_state *c = tg_module_state(m);
    tg_tensor *x = in[0];
    char sh[64];
    if (x->ndim != 3 || x->shape[2] != c->d_in || !tg__is_float(x->dtype))
        return tg_error("%s: input must be float (batch, tokens, d_in=%lld), got %s %s", tg_module_type_name(m),
                        (long long)c->d_in, tg_dtype_name(x->dtype), tg_shape_str(x, sh, sizeof sh));
    int64_t b = x->shape[0], T = x->shape[1], H = c->num_heads, G = c->num_kv_groups, hd = c->head_dim;
    if (in[1]->ndim != 2 || in[1]->shape[0] != T || in[1]->shape[1] != hd || !tg_same_shape(in[1], in[2]))
        return tg_error("%s: cos and sin must be (%lld, %lld), got %s", tg_module_type_name(m), (long long)T,
                        (long long)hd, tg_shape_str(in[1], sh, sizeof sh));
    tg_tensor *q = split_heads(tp, tg_module_forward(tp, child(m, "W_query"), x), H, hd);
    tg_tensor *k = split_heads(tp, tg_module_forward(tp, child(m, "W_key"), x), G, hd);
    tg_tensor *v = split_heads(tp, tg_module_forward(tp, child(m, "W_value"), x), G, hd);
    tg_module *qn = tg__entry_get(&m->children, "q_norm"), *kn = tg__entry_get(&m->children, "k_norm");
    if (qn && q) q = tg_module_forward(tp, qn, q);
    if (kn && k) k = tg_module_forward(tp, kn, k);
    q = rope(tp, m, q, in[1], in[2]);
    k = rope(tp, m, k, in[1], in[2]);
    if (!q || !k || !v) return NULL;
    int64_t p0 = 0;
    tg_tensor *keys = k, *values = v;
    bool cached = tg_module_kv_cache_enabled(m);
    if (cached) {
        p0 = c->pos;
        if (!cache_append(m, tp, k, v, &keys, &values)) return NULL;
    }
    int64_t P = p0 + T, merged[3] = {b, T, H * hd};
    const tg_layer *layer = tg_layer_find("attention");
    tg_tensor *ctx = NULL;
    bool done = false;
    if (cached) ctx = tg__attend_cache_in_place(tp, q, keys, values, p0, &done); /* the groups read in place */
    if (!done) {
        keys = repeat_groups(tp, keys, H / G);
        values = repeat_groups(tp, values, H / G);
        if (!cached && layer) {
            tg_layer_args a = {.scale = pow((double)hd, 0.5), .gen = tg_module_generator(m), .heads_inner = true};
            tg_tensor *in4[4] = {q, keys, values, causal_rows(tp, 0, T, T)};
            ctx = tg_layer_apply(tp, layer, tg_module_is_fused(m), tg_tape_numerics(tp), 4, in4, &a);
        } else {
            /* attn_scores = queries @ keys.transpose(2, 3); masked_fill(mask, -inf)
             * softmax(attn_scores / self.head_dim**0.5, dim=-1) @ values */
            tg_tensor *s = tg_matmul(tp, q, tg_transpose(tp, keys, 2, 3));
            if (T > 1) s = tg_masked_fill(tp, s, causal_rows(tp, p0, T, P), -INFINITY);
            ctx = tg_matmul(tp, tg_softmax(tp, tg_div_scalar(tp, s, pow((double)hd, 0.5)), -1), values);
        }
    }
    if (!ctx) return NULL;
    if (cached) c->pos = P;
    /* context = (attn_weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out) */
    ctx = tg_reshape(tp, tg_transpose(tp, ctx, 1, 2), 3, merged);
    return tg_module_forward(tp, child(m, "out_proj"), ctx);
}

static int gqa_reset_cache(tg_module *m)
{
    ((gqa_state *)tg_module_state(m))->pos = 0;
    return TG_OK;
}

static const tg_module_type gqa_type = {.name = "GroupedQueryAttention", .forward = gqa_forward, .reset_cache = gqa_reset_cache};

/* The norm of the family: Qwen3's book RMSNorm ("scale") or Llama's nn.RMSNorm ("weight"). */
static tg_module *norm_new(tg_tape *tp, const tg_decoder_config *cfg, int64_t dim, double eps)
{
    return cfg->family == TG_GPT_FAMILY_QWEN3 ? tg__rms_norm_scale_new(tp, dim, eps) : tg_rms_norm_new(tp, dim, eps);
}

/* Construction order as the book's __init__: Qwen3 W_query, W_key, W_value,
 * out_proj, q_norm, k_norm; Llama 3 W_key, W_value, W_query, out_proj. */
static tg_module *gqa_new(tg_tape *tp, const tg_decoder_config *cfg)
{
    int64_t d = cfg->emb_dim, H = cfg->n_heads, hd = tg__gpt_head_dim(cfg), G = tg__gpt_kv_groups(cfg);
    tg_module *m = tg_module_new(tp, &gqa_type, sizeof(gqa_state));
    if (!m) return NULL;
    *(gqa_state *)tg_module_state(m) = (gqa_state){d, H, G, hd, cfg->context_length, NULL, NULL, 0};
    struct {
        const char *name;
        int64_t in, out;
    } qwen[4] = {{"W_query", d, H * hd}, {"W_key", d, G * hd}, {"W_value", d, G * hd}, {"out_proj", H * hd, d}},
      llama[4] = {{"W_key", d, G * hd}, {"W_value", d, G * hd}, {"W_query", d, H * hd}, {"out_proj", H * hd, d}};
    bool is_llama = cfg->family == TG_GPT_FAMILY_LLAMA3;
    for (int i = 0; i < 4; i++) {
        const char *name = is_llama ? llama[i].name : qwen[i].name;
        int64_t fi = is_llama ? llama[i].in : qwen[i].in, fo = is_llama ? llama[i].out : qwen[i].out;
        if (tg_module_add_module(m, name, tg__linear_new_as(tp, fi, fo, false, cfg->weights)) != TG_OK) return NULL;
    }
    if (cfg->qk_norm && (tg_module_add_module(m, "q_norm", norm_new(tp, cfg, hd, tg__gpt_norm_eps(cfg))) != TG_OK ||
                         tg_module_add_module(m, "k_norm", norm_new(tp, cfg, hd, tg__gpt_norm_eps(cfg))) != TG_OK))
        return NULL;
    return m;
}

/* ---- TransformerBlock ------------------------------------------------------------------------ */

/* forward(x, cos, sin):
 *   shortcut = x; x = self.norm1(x); x = self.att(x, mask, cos, sin); x = x + shortcut
 *   shortcut = x; x = self.norm2(x); x = self.ff(x); x = x + shortcut */
static tg_tensor *block_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 3)) return NULL;
    tg_tensor *shortcut = in[0];
    tg_tensor *x = tg_module_forward(tp, child(self, "norm1"), in[0]);
    tg_tensor *att_in[3] = {x, in[1], in[2]};
    x = x ? tg_module_call(tp, child(self, "att"), 3, att_in) : NULL;
    x = tg_add(tp, x, shortcut);
    shortcut = x;
    x = x ? tg_module_forward(tp, child(self, "norm2"), x) : NULL;
    x = x ? tg_module_forward(tp, child(self, "ff"), x) : NULL;
    return tg_add(tp, x, shortcut);
}

static const tg_module_type block_type = {.name = "TransformerBlock", .forward = block_forward};

static tg_module *block_new(tg_tape *tp, const tg_decoder_config *cfg)
{
    tg_module *m = tg_module_new(tp, &block_type, 0);
    int64_t d = cfg->emb_dim;
    double eps = tg__gpt_norm_eps(cfg);
    if (!m || tg_module_add_module(m, "att", gqa_new(tp, cfg)) != TG_OK ||
        tg_module_add_module(m, "ff", swiglu_new(tp, d, tg__gpt_hidden_dim(cfg), cfg->weights)) != TG_OK ||
        tg_module_add_module(m, "norm1", norm_new(tp, cfg, d, eps)) != TG_OK ||
        tg_module_add_module(m, "norm2", norm_new(tp, cfg, d, eps)) != TG_OK)
        return NULL;
    return m;
}

/* ---- the model's parts ----------------------------------------------------------------------- */

int tg__rope_decoder_build(tg_tape *tp, tg_module *m, const tg_decoder_config *cfg)
{
    const int64_t d = cfg->emb_dim;
    int st = tg_module_add_module(m, "tok_emb", tg__embedding_new_as(tp, cfg->vocab_size, d, cfg->weights));
    tg_module *blocks = st == TG_OK ? tg_module_list_new(tp, 0, NULL) : NULL;
    if (st != TG_OK || (st = tg_module_add_module(m, "trf_blocks", blocks)) != TG_OK) return st ? st : TG_ENOMEM;
    for (int64_t i = 0; i < cfg->n_layers; i++)
        if ((st = tg_module_append(blocks, block_new(tp, cfg))) != TG_OK) return st;
    if ((st = tg_module_add_module(m, "final_norm", norm_new(tp, cfg, d, tg__gpt_norm_eps(cfg)))) != TG_OK ||
        (st = tg_module_add_module(m, "out_head", tg__linear_new_as(tp, d, cfg->vocab_size, false, cfg->weights))) != TG_OK)
        return st;
    return TG_OK;
}

tg_tensor *tg__rope_decoder_blocks(tg_tape *tp, tg_module *m, tg__rope *r, tg_tensor *x, int64_t p0)
{
    int64_t T = x->shape[1];
    if (tg__rope_need(r, m->tape, p0 + T) != TG_OK) return NULL;
    tg_tensor *cos = tg_narrow(tp, r->cos, 0, p0, T), *sin = tg_narrow(tp, r->sin, 0, p0, T);
    if (x->dtype != TG_F32) /* a model converted to float64: the float32 tables widened, as .to() converts buffers */
        cos = tg_to_dtype(tp, cos, x->dtype), sin = tg_to_dtype(tp, sin, x->dtype);
    tg_module *blocks = child(m, "trf_blocks");
    int nb = blocks ? tg_module_num_children(blocks) : 0;
    for (int i = 0; x && i < nb; i++) {
        tg_tensor *in[3] = {x, cos, sin};
        x = tg_module_call(tp, tg_module_child(blocks, i), 3, in);
    }
    return x;
}

/* ---- the public RoPE functions --------------------------------------------------------------- */

int tg_rope_params(tg_tape *tp, int64_t head_dim, double theta_base, int64_t context_length, const tg_rope_freq *freq,
                   tg_tensor **cos, tg_tensor **sin)
{
    if (!tp || !cos || !sin) return tg_error_status(TG_EINVAL, "rope_params: NULL argument");
    *cos = *sin = NULL;
    tg_rope_freq f = freq ? *freq : (tg_rope_freq){0};
    if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > INT32_MAX)
        return tg_error_status(TG_EINVAL, "rope_params: head_dim must be even and positive, got %lld", (long long)head_dim);
    if (!(theta_base > 0 && isfinite(theta_base)))
        return tg_error_status(TG_EINVAL, "rope_params: theta_base must be > 0, got %g", theta_base);
    if (context_length < 1 || context_length > (1 << 24))
        return tg_error_status(TG_EINVAL, "rope_params: context_length must be in [1, 2^24], got %lld",
                               (long long)context_length);
    if (f.factor != 0 && !(f.factor > 0 && f.low_freq_factor > 0 && f.high_freq_factor > f.low_freq_factor &&
                           f.original_context_length > 0 && isfinite(f.factor) && isfinite(f.high_freq_factor)))
        return tg_error_status(TG_EINVAL, "rope_params: freq needs factor > 0, 0 < low_freq_factor < "
                                          "high_freq_factor and original_context_length > 0");
    tg__rope r = {.head_dim = head_dim, .context_length = context_length, .base = theta_base, .freq = f};
    int st = tg__rope_need(&r, tp, context_length);
    if (st != TG_OK) return st;
    *cos = r.cos, *sin = r.sin;
    return TG_OK;
}

tg_tensor *tg_apply_rope(tg_tape *tp, tg_tensor *x, tg_tensor *cos, tg_tensor *sin)
{
    char a[64], b[64];
    if (!x || !cos || !sin) return tg__error_null_input("apply_rope");
    int64_t hd = x->ndim >= 2 ? x->shape[x->ndim - 1] : 0, T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 0;
    if (hd == 0 || hd % 2 != 0)
        return tg_error("apply_rope: x must be (..., T, head_dim) with an even head_dim, got %s", tg_shape_str(x, a, 64));
    if (cos->ndim != 2 || cos->shape[1] != hd || cos->shape[0] < T || !tg_same_shape(cos, sin))
        return tg_error("apply_rope: cos and sin must be (>= %lld, %lld) of one shape, got %s and %s", (long long)T,
                        (long long)hd, tg_shape_str(cos, a, 64), tg_shape_str(sin, b, 64));
    if (cos->dtype != x->dtype || sin->dtype != x->dtype)
        return tg_error("apply_rope: cos and sin must have x's dtype %s", tg_dtype_name(x->dtype));
    const tg_layer *layer = tg_layer_find("rope");
    tg_tensor *in[3] = {x, tg_narrow(tp, cos, 0, 0, T), tg_narrow(tp, sin, 0, 0, T)};
    tg_layer_args args = {0};
    return layer ? tg_layer_apply(tp, layer, false, tg_tape_numerics(tp), 3, in, &args) : NULL;
}
