/* The book's GPT of chapter 4 (tools/reference/gpt_book.py holds the PyTorch
 * original): Embedding, LayerNorm, GELU, FeedForward, TransformerBlock and
 * GPTModel, each a module type written with the public module API, with
 * PyTorch's class names, state_dict keys, construction order and init. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tapegrad/gpt.h"

/* ---- configuration ---------------------------------------------------------------------- */

static const struct {
    const char *name;
    int64_t emb, layers, heads;
} presets[] = {
    {"gpt2-small", 768, 12, 12},
    {"gpt2-medium", 1024, 24, 16},
    {"gpt2-large", 1280, 36, 20},
    {"gpt2-xl", 1600, 48, 25},
};

int tg_gpt_config_preset(const char *name, tg_gpt_config *out)
{
    if (!name || !out) return tg_error_status(TG_EINVAL, "gpt_config_preset: NULL argument");
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(name, presets[i].name) == 0) {
            *out = (tg_gpt_config){50257, 1024, presets[i].emb, presets[i].heads, presets[i].layers, 0.1, false};
            return TG_OK;
        }
    return tg_error_status(TG_EINVAL,
                           "unknown GPT configuration '%.100s' (expected gpt2-small, gpt2-medium, gpt2-large or gpt2-xl)",
                           name);
}

/* Counted in double: a configuration too large for int64 must still be
 * refused with a message, not overflow. */
static double params_of(const tg_gpt_config *c)
{
    double V = (double)c->vocab_size, C = (double)c->context_length, d = (double)c->emb_dim;
    double att = 4 * d * d + d + (c->qkv_bias ? 3 * d : 0);
    double ff = 8 * d * d + 5 * d;
    return V * d + C * d + (double)c->n_layers * (att + ff + 4 * d) + 2 * d + V * d;
}

#define GPT_MAX_CONTEXT 65536

int tg_gpt_config_check(const tg_gpt_config *c)
{
    if (!c) return tg_error_status(TG_EINVAL, "GPTModel: NULL configuration");
    const struct {
        const char *name;
        int64_t v;
    } sizes[] = {{"vocab_size", c->vocab_size}, {"context_length", c->context_length}, {"emb_dim", c->emb_dim},
                 {"n_heads", c->n_heads},       {"n_layers", c->n_layers}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v <= 0)
            return tg_error_status(TG_EINVAL, "GPTModel: %s must be positive, got %lld", sizes[i].name,
                                   (long long)sizes[i].v);
    if (c->emb_dim % c->n_heads != 0)
        return tg_error_status(TG_EINVAL, "GPTModel: emb_dim (%lld) must be divisible by n_heads (%lld)",
                               (long long)c->emb_dim, (long long)c->n_heads);
    if (!(c->drop_rate >= 0 && c->drop_rate < 1))
        return tg_error_status(TG_EINVAL, "GPTModel: drop_rate %g is outside [0, 1)", c->drop_rate);
    if (c->context_length > GPT_MAX_CONTEXT)
        return tg_error_status(TG_EINVAL, "GPTModel: context_length %lld is above %d", (long long)c->context_length,
                               GPT_MAX_CONTEXT);
    if (c->vocab_size > INT32_MAX || c->emb_dim > INT32_MAX || c->n_layers > INT32_MAX)
        return tg_error_status(TG_EINVAL, "GPTModel: sizes above 2^31 are not supported");
    /* float32 weights and every block's (context, context) mask buffer */
    double bytes = 4.0 * params_of(c) + 4.0 * (double)c->n_layers * (double)c->context_length * (double)c->context_length;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 1e18;
    if (bytes > mem)
        return tg_error_status(TG_EINVAL, "GPTModel: the weights alone need %.1f GiB, more than this machine's %.1f GiB",
                               bytes / (1 << 30), mem / (1 << 30));
    return TG_OK;
}

int64_t tg_gpt_config_num_parameters(const tg_gpt_config *c)
{
    if (tg_gpt_config_check(c) != TG_OK) return -1;
    return (int64_t)params_of(c);
}

/* ---- Embedding ---------------------------------------------------------------------------- */

typedef struct {
    int64_t num, dim;
} embedding_state;

/* forward: F.embedding(ids, self.weight) */
static tg_tensor *embedding_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *x)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    return tg_embedding(tp, tg_module_get_parameter(self, "weight"), x[0]);
}

static int embedding_extra_repr(const tg_module *self, char *buf, size_t size)
{
    const embedding_state *s = tg_module_state_const(self);
    return snprintf(buf, size, "%lld, %lld", (long long)s->num, (long long)s->dim);
}

static const tg_module_type embedding_type = {.name = "Embedding", .forward = embedding_forward, .extra_repr = embedding_extra_repr};

/* nn.Embedding.reset_parameters: init.normal_(self.weight) */
tg_module *tg_embedding_new(tg_tape *tp, int64_t num, int64_t dim)
{
    if (!tg__check_size("Embedding", "num_embeddings", num) || !tg__check_size("Embedding", "embedding_dim", dim))
        return NULL;
    tg_module *m = tg_module_new(tp, &embedding_type, sizeof(embedding_state));
    if (!m) return NULL;
    *(embedding_state *)tg_module_state(m) = (embedding_state){num, dim};
    int64_t shape[2] = {num, dim};
    tg_tensor *w = tg_parameter_new(tp, TG_F32, 2, shape);
    if (!w || tg_normal_(w, 0.0, 1.0, NULL) != TG_OK || tg_module_register_parameter(m, "weight", w) != TG_OK)
        return NULL;
    return m;
}

/* ---- LayerNorm (the book's) ------------------------------------------------------------------ */

typedef struct {
    int64_t dim;
    double eps;
} layer_norm_state;

static bool check_last_dim(tg_module *m, const tg_tensor *x, int64_t dim)
{
    char sh[64];
    if (x->ndim < 1 || x->shape[x->ndim - 1] != dim) {
        tg_error("%s: input's last dim must be %lld, got %s", tg_module_type_name(m), (long long)dim,
                 tg_shape_str(x, sh, sizeof sh));
        return false;
    }
    return true;
}

/* The layer table's entry `name` (autograd.h, tg_layer) as self's settings choose. */
static tg_tensor *apply_layer(tg_tape *tp, tg_module *self, const char *name, int n, tg_tensor *const *in, double eps)
{
    const tg_layer *layer = tg_layer_find(name);
    tg_layer_args a = {.eps = eps, .gen = tg_module_generator(self)};
    return layer ? tg_layer_apply(tp, layer, tg_module_is_fused(self), tg_tape_numerics(tp), n, in, &a) : NULL;
}

static tg_tensor *layer_norm_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    const layer_norm_state *s = tg_module_state(self);
    tg_tensor *x = in[0];
    if (!check_last_dim(self, x, s->dim)) return NULL;
    tg_tensor *in3[3] = {x, tg_module_get_parameter(self, "scale"), tg_module_get_parameter(self, "shift")};
    return apply_layer(tp, self, "layer_norm", 3, in3, s->eps);
}

static const tg_module_type layer_norm_type = {.name = "LayerNorm", .forward = layer_norm_forward};

tg_module *tg_layer_norm_new(tg_tape *tp, int64_t dim)
{
    if (!tg__check_size("LayerNorm", "emb_dim", dim)) return NULL;
    tg_module *m = tg_module_new(tp, &layer_norm_type, sizeof(layer_norm_state));
    if (!m) return NULL;
    *(layer_norm_state *)tg_module_state(m) = (layer_norm_state){dim, 1e-5};
    int64_t shape[1] = {dim};
    tg_tensor *scale = tg_parameter_new(tp, TG_F32, 1, shape), *shift = tg_parameter_new(tp, TG_F32, 1, shape);
    if (!scale || !shift) return NULL;
    tg_k_fill(scale, 1.0); /* torch.ones(emb_dim) */
    if (tg_module_register_parameter(m, "scale", scale) != TG_OK ||
        tg_module_register_parameter(m, "shift", shift) != TG_OK)
        return NULL;
    return m;
}

/* ---- GELU (the book's) ------------------------------------------------------------------------ */

/* forward: 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) *
 *                                    (x + 0.044715 * torch.pow(x, 3))))
 * (src/autograd/layers.c, "gelu") */
static tg_tensor *gelu_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    return apply_layer(tp, self, "gelu", 1, in, 0.0);
}

static const tg_module_type gelu_type = {.name = "GELU", .forward = gelu_forward};

tg_module *tg_gelu_new(tg_tape *tp) { return tg_module_new(tp, &gelu_type, 0); }

/* ---- RMSNorm and SiLU (Llama's; not in the book's GPT-2) ------------------------------------------- */

static tg_tensor *rms_norm_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    const layer_norm_state *s = tg_module_state(self);
    if (!check_last_dim(self, in[0], s->dim)) return NULL;
    tg_tensor *in2[2] = {in[0], tg_module_get_parameter(self, "weight")};
    return apply_layer(tp, self, "rms_norm", 2, in2, s->eps);
}

static int rms_norm_extra_repr(const tg_module *self, char *buf, size_t size)
{
    const layer_norm_state *s = tg_module_state_const(self);
    return snprintf(buf, size, "(%lld,), eps=%g", (long long)s->dim, s->eps);
}

static const tg_module_type rms_norm_type = {.name = "RMSNorm", .forward = rms_norm_forward, .extra_repr = rms_norm_extra_repr};

tg_module *tg_rms_norm_new(tg_tape *tp, int64_t dim, double eps)
{
    if (!tg__check_size("RMSNorm", "dim", dim)) return NULL;
    if (!(eps >= 0)) return tg_error("RMSNorm: eps must be >= 0, got %g", eps);
    tg_module *m = tg_module_new(tp, &rms_norm_type, sizeof(layer_norm_state));
    if (!m) return NULL;
    *(layer_norm_state *)tg_module_state(m) = (layer_norm_state){dim, eps};
    int64_t shape[1] = {dim};
    tg_tensor *w = tg_parameter_new(tp, TG_F32, 1, shape);
    if (!w) return NULL;
    tg_k_fill(w, 1.0); /* torch.ones(dim) */
    return tg_module_register_parameter(m, "weight", w) == TG_OK ? m : NULL;
}

static tg_tensor *silu_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    return apply_layer(tp, self, "silu", 1, in, 0.0);
}

static const tg_module_type silu_type = {.name = "SiLU", .forward = silu_forward};

tg_module *tg_silu_new(tg_tape *tp) { return tg_module_new(tp, &silu_type, 0); }

/* ---- FeedForward ------------------------------------------------------------------------------ */

/* The three layers' tensors when they are the built-in Linear (with bias),
 * GELU, Linear that tg_feed_forward_new makes, else false. */
static bool standard_layers(const tg_module *layers, tg_tensor *t[4])
{
    if (!layers || layers->children.n != 3) return false;
    const tg_module *up = layers->children.items[0].ptr, *act = layers->children.items[1].ptr,
                    *down = layers->children.items[2].ptr;
    if (!tg__is_linear(up) || act->type != &gelu_type || !tg__is_linear(down)) return false;
    t[0] = tg__entry_get(&up->params, "weight"), t[1] = tg__entry_get(&up->params, "bias");
    t[2] = tg__entry_get(&down->params, "weight"), t[3] = tg__entry_get(&down->params, "bias");
    return t[0] && t[1] && t[2] && t[3];
}

/* forward: self.layers(x). Fused, with the built-in layers: one node that
 * computes the GELU output again in backward instead of keeping it. */
static tg_tensor *feed_forward_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    tg_module *layers = tg_module_get_submodule(self, "layers");
    tg_tensor *t[4], *x = in[0];
    if (tg_module_is_fused(self) && x && tg_is_contiguous(x) && standard_layers(layers, t)) {
        tg_tensor *in5[5] = {x, t[0], t[1], t[2], t[3]};
        return apply_layer(tp, self, "feed_forward", 5, in5, 0.0);
    }
    return tg_module_forward(tp, layers, x);
}

static const tg_module_type feed_forward_type = {.name = "FeedForward", .forward = feed_forward_forward};

static bool check_cfg(const tg_gpt_config *cfg) { return tg_gpt_config_check(cfg) == TG_OK; }

tg_module *tg_feed_forward_new(tg_tape *tp, const tg_gpt_config *cfg)
{
    if (!check_cfg(cfg)) return NULL;
    int64_t d = cfg->emb_dim;
    tg_module *m = tg_module_new(tp, &feed_forward_type, 0);
    if (!m) return NULL;
    tg_module *up = tg_linear_new(tp, d, 4 * d, true);
    tg_module *act = up ? tg_gelu_new(tp) : NULL;
    tg_module *down = act ? tg_linear_new(tp, 4 * d, d, true) : NULL;
    if (!down) return NULL;
    tg_module *layers[3] = {up, act, down};
    return tg_module_add_module(m, "layers", tg_sequential_new(tp, 3, layers)) == TG_OK ? m : NULL;
}

/* ---- TransformerBlock ------------------------------------------------------------------------- */

/* Whether branch (the block's att or ff) is built-in and returns a fresh
 * tensor nothing else reads: a Linear layer's output or the fused
 * FeedForward node's. */
static bool owns_output(const tg_module *branch)
{
    tg_tensor *t[4];
    if (branch && branch->type == &feed_forward_type)
        return standard_layers(tg_module_get_submodule(branch, "layers"), t);
    return tg__is_mha_owning_output(branch);
}

/* drop(y) + shortcut, y = branch(...). Fused, with the built-in Dropout in
 * training (p > 0), the sum is written over the dropout's output, and when
 * the branch is built-in the dropout's product over y: backward keeps the
 * mask only and nothing else reads either, so one (B, T, d) tensor per
 * residual instead of three. Same bits either way. */
static tg_tensor *residual(tg_tape *tp, tg_module *self, tg_module *drop, const tg_module *branch, tg_tensor *y,
                           tg_tensor *shortcut)
{
    bool fused = tg_module_is_fused(self) && tg__is_dropout(drop);
    tg_tensor *d = !y ? NULL
                   : fused && owns_output(branch) ? tg__dropout_forward_over(tp, drop, y)
                                                  : tg_module_forward(tp, drop, y);
    if (d && shortcut && d != y && fused && tg_is_contiguous(d) && tg_same_shape(d, shortcut) &&
        d->dtype == shortcut->dtype)
        return tg__add_into(tp, d, shortcut);
    return tg_add(tp, d, shortcut); /* x = x + shortcut */
}

/* The block's forward, or with last_only its last position only, (b, 1, d):
 * the attention's keys and values still see every position of x (b, T, d);
 * the query, the residuals, norm2 and the feed-forward only the last
 * (last_position_block says when that applies). */
static tg_tensor *block_run(tg_tape *tp, tg_module *self, tg_tensor *x, bool last_only)
{
    tg_module *drop = tg_module_get_submodule(self, "drop_shortcut");
    tg_tensor *shortcut = last_only ? tg_narrow(tp, x, 1, x->shape[1] - 1, 1) : x;
    tg_module *att = tg_module_get_submodule(self, "att"), *ff = tg_module_get_submodule(self, "ff");
    x = tg_module_forward(tp, tg_module_get_submodule(self, "norm1"), x);
    x = !x ? NULL : last_only ? tg__mha_forward_last_position(tp, att, x) : tg_module_forward(tp, att, x);
    x = residual(tp, self, drop, att, x, shortcut);
    shortcut = x;
    x = x ? tg_module_forward(tp, tg_module_get_submodule(self, "norm2"), x) : NULL;
    x = x ? tg_module_forward(tp, ff, x) : NULL;
    return residual(tp, self, drop, ff, x, shortcut);
}

static tg_tensor *block_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    return tg__check_ninputs(self, n, 1) ? block_run(tp, self, in[0], false) : NULL;
}

static const tg_module_type block_type = {.name = "TransformerBlock", .forward = block_forward};

static tg_tensor *block_forward_last_position(tg_tape *tp, tg_module *self, tg_tensor *x)
{
    tg_numerics prev = tg__module_enter(tp, self); /* as tg_module_call would */
    x = block_run(tp, self, x, true);
    tg__tape_leave(tp, prev);
    return x;
}

tg_module *tg_transformer_block_new(tg_tape *tp, const tg_gpt_config *cfg)
{
    if (!check_cfg(cfg)) return NULL;
    tg_module *m = tg_module_new(tp, &block_type, 0);
    if (!m) return NULL;
    int64_t d = cfg->emb_dim;
    tg_attention_config att = {.d_in = d, .d_out = d, .context_length = cfg->context_length,
                               .num_heads = cfg->n_heads, .dropout = cfg->drop_rate, .qkv_bias = cfg->qkv_bias};
    if (tg_module_add_module(m, "att", tg_mha_new_config(tp, att)) != TG_OK ||
        tg_module_add_module(m, "ff", tg_feed_forward_new(tp, cfg)) != TG_OK ||
        tg_module_add_module(m, "norm1", tg_layer_norm_new(tp, d)) != TG_OK ||
        tg_module_add_module(m, "norm2", tg_layer_norm_new(tp, d)) != TG_OK ||
        tg_module_add_module(m, "drop_shortcut", tg_dropout_new(tp, cfg->drop_rate)) != TG_OK)
        return NULL;
    return m;
}

/* ---- GPTModel --------------------------------------------------------------------------------- */

/* GPTModel's state: its configuration, the KV cache's position (the book's
 * current_pos) and, set by tg_gpt_generate and tg_gpt_forward_last, whether
 * final_norm and out_head see the last position alone (the only logits they
 * read; under FAST and BF16 the last block too, last_position_block). */
typedef struct {
    tg_gpt_config cfg;
    int64_t current_pos;
    bool last_logits_only;
} gpt_state;

/* The last of the model's blocks when only the last position's logits are
 * wanted and the block can compute that position alone: numerics other than
 * EXACT (whose bits are the full forward's), the built-in Sequential of
 * built-in TransformerBlocks, the last with the built-in LayerNorms,
 * FeedForward and MultiHeadAttention (no KV cache) and no dropout to draw
 * (the draws would not be the full forward's). Else NULL. */
static tg_module *last_position_block(tg_tape *tp, tg_module *gpt)
{
    tg_numerics nm = tg__module_policy(gpt, tp);
    if (nm == TG_NUMERICS_EXACT) return NULL;
    tg_module *blocks = tg__entry_get(&gpt->children, "trf_blocks");
    int nb = blocks && tg__is_sequential(blocks) ? tg_module_num_children(blocks) : 0;
    tg_module *b = nb > 0 ? tg_module_child(blocks, nb - 1) : NULL;
    if (!b || b->type != &block_type || tg__module_pin_or(b, nm) == TG_NUMERICS_EXACT) return NULL;
    const tg_module *n1 = tg__entry_get(&b->children, "norm1"), *n2 = tg__entry_get(&b->children, "norm2"),
                    *ff = tg__entry_get(&b->children, "ff"), *drop = tg__entry_get(&b->children, "drop_shortcut");
    bool ok = n1 && n1->type == &layer_norm_type && n2 && n2->type == &layer_norm_type && ff &&
              ff->type == &feed_forward_type && tg__is_dropout(drop) && !tg__dropout_draws(drop) &&
              tg__mha_last_position_ok(tg__entry_get(&b->children, "att"), tg__module_pin_or(b, nm));
    return ok ? b : NULL;
}

static tg_tensor *gpt_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    gpt_state *s = tg_module_state(self);
    const tg_gpt_config *c = &s->cfg;
    const tg_tensor *ids = in[0];
    char sh[64];
    if (ids->ndim != 2 || ids->dtype != TG_I64)
        return tg_error("GPTModel: input must be int64 ids of shape (batch, tokens), got %s %s",
                        tg_dtype_name(ids->dtype), tg_shape_str(ids, sh, sizeof sh));
    int64_t T = ids->shape[1];
    if (T == 0 || ids->shape[0] == 0) return tg_error("GPTModel: input %s has no tokens", tg_shape_str(ids, sh, sizeof sh));
    /* pos_ids = torch.arange(self.current_pos, self.current_pos + seq_len) with the cache */
    int64_t p0 = tg_module_kv_cache_enabled(self) ? s->current_pos : 0;
    if (p0 + T > c->context_length) {
        if (p0 > 0)
            return tg_error("GPTModel: %lld cached and %lld new tokens exceed context_length %lld (reset the KV cache)",
                            (long long)p0, (long long)T, (long long)c->context_length);
        return tg_error("GPTModel: %lld tokens exceed context_length %lld", (long long)T, (long long)c->context_length);
    }
    tg_tensor *tok = tg_module_forward(tp, tg_module_get_submodule(self, "tok_emb"), in[0]);
    tg_tensor *pos = tok ? tg_module_forward(tp, tg_module_get_submodule(self, "pos_emb"),
                                             tg_arange(tp, TG_I64, (double)p0, (double)(p0 + T), 1))
                         : NULL;
    tg_tensor *x = tg_add(tp, tok, pos); /* x = tok_embeds + pos_embeds */
    static const char *const chain[] = {"drop_emb", "trf_blocks", "final_norm", "out_head"};
    tg_module *last_block = s->last_logits_only ? last_position_block(tp, self) : NULL;
    for (size_t i = 0; x && i < sizeof chain / sizeof chain[0]; i++) {
        if (i == 1 && last_block) { /* the blocks, the last one at its last position only */
            tg_module *blocks = tg_module_get_submodule(self, "trf_blocks");
            int nb = tg_module_num_children(blocks);
            for (int j = 0; x && j < nb - 1; j++) x = tg_module_forward(tp, tg_module_child(blocks, j), x);
            x = x ? block_forward_last_position(tp, last_block, x) : NULL;
            continue;
        }
        if (i == 2 && s->last_logits_only && !last_block) x = tg_narrow(tp, x, 1, T - 1, 1);
        x = tg_module_forward(tp, tg_module_get_submodule(self, chain[i]), x);
    }
    if (x && tg_module_kv_cache_enabled(self)) s->current_pos = p0 + T;
    return x;
}

static int gpt_reset_cache(tg_module *self)
{
    ((gpt_state *)tg_module_state(self))->current_pos = 0;
    return TG_OK;
}

static const tg_module_type gpt_type = {.name = "GPTModel", .forward = gpt_forward, .reset_cache = gpt_reset_cache};

tg_module *tg_gpt_new(tg_tape *tp, const tg_gpt_config *cfg)
{
    if (!check_cfg(cfg)) return NULL;
    tg_module *m = tg_module_new(tp, &gpt_type, sizeof(gpt_state));
    if (!m) return NULL;
    ((gpt_state *)tg_module_state(m))->cfg = *cfg;
    const int64_t d = cfg->emb_dim;
    if (tg_module_add_module(m, "tok_emb", tg_embedding_new(tp, cfg->vocab_size, d)) != TG_OK ||
        tg_module_add_module(m, "pos_emb", tg_embedding_new(tp, cfg->context_length, d)) != TG_OK ||
        tg_module_add_module(m, "drop_emb", tg_dropout_new(tp, cfg->drop_rate)) != TG_OK)
        return NULL;
    tg_module *blocks = tg_sequential_new(tp, 0, NULL);
    if (tg_module_add_module(m, "trf_blocks", blocks) != TG_OK) return NULL;
    for (int64_t i = 0; i < cfg->n_layers; i++)
        if (tg_module_append(blocks, tg_transformer_block_new(tp, cfg)) != TG_OK) return NULL;
    if (tg_module_add_module(m, "final_norm", tg_layer_norm_new(tp, d)) != TG_OK ||
        tg_module_add_module(m, "out_head", tg_linear_new(tp, d, cfg->vocab_size, false)) != TG_OK)
        return NULL;
    return m;
}

bool tg__gpt_set_last_logits_only(tg_module *gpt, bool on)
{
    gpt_state *s = tg_module_state(gpt);
    bool prev = s->last_logits_only;
    s->last_logits_only = on;
    return prev;
}

tg_tensor *tg_gpt_forward_last(tg_tape *tp, tg_module *gpt, tg_tensor *ids)
{
    tg_gpt_config c;
    if (tg_gpt_get_config(gpt, &c) != TG_OK) return NULL;
    if (!ids) return tg__error_null_input("gpt_forward_last");
    bool exact = tg__module_policy(gpt, tp) == TG_NUMERICS_EXACT;
    /* under EXACT the book's model(ids)[:, -1, :], so the bits are PyTorch's;
     * otherwise final_norm and out_head see the last position only */
    bool prev = exact ? false : tg__gpt_set_last_logits_only(gpt, true);
    tg_tensor *logits = tg_module_forward(tp, gpt, ids);
    if (!exact) tg__gpt_set_last_logits_only(gpt, prev);
    return logits ? tg_select(tp, logits, 1, logits->shape[1] - 1) : NULL;
}

int64_t tg_gpt_out_features(const tg_module *gpt)
{
    tg_gpt_config c;
    if (tg_gpt_get_config(gpt, &c) != TG_OK) return -1;
    const tg_module *head = tg__entry_get(&gpt->children, "out_head");
    const tg_tensor *w = head ? tg__entry_get(&head->params, "weight") : NULL;
    if (!w && head) { /* a wrapped head (LinearWithLoRA): its inner Linear */
        const tg_module *inner = tg__entry_get(&head->children, "linear");
        w = inner ? tg__entry_get(&inner->params, "weight") : NULL;
    }
    if (!w || w->ndim != 2) {
        tg_error("GPTModel: out_head has no 2-D weight to tell its output size");
        return -1;
    }
    return w->shape[0];
}

int tg_gpt_get_config(const tg_module *gpt, tg_gpt_config *out)
{
    if (!gpt || !out) return tg_error_status(TG_EINVAL, "gpt_get_config: NULL argument");
    if (tg_module_get_type(gpt) != &gpt_type)
        return tg_error_status(TG_EINVAL, "gpt_get_config: module is a %s, not a GPTModel", tg_module_type_name(gpt));
    *out = ((const gpt_state *)tg_module_state_const(gpt))->cfg;
    return TG_OK;
}

int tg_gpt_prepare_finetune(tg_tape *tp, tg_module *gpt, int64_t num_classes, uint64_t seed, int64_t lora_rank,
                            double lora_alpha)
{
    tg_gpt_config cfg;
    int st = tg_gpt_get_config(gpt, &cfg);
    if (st != TG_OK) return st;
    if (num_classes < 0 || lora_rank < 0)
        return tg_error_status(TG_EINVAL, "gpt_prepare_finetune: num_classes %lld and lora_rank %lld must be >= 0",
                               (long long)num_classes, (long long)lora_rank);
    if (num_classes > 0) {
        /* torch.manual_seed(s); model.out_head = Linear(emb_dim, num_classes) */
        tg_manual_seed(seed);
        tg_module *head = tg_linear_new(tp, cfg.emb_dim, num_classes, true);
        if (!head || (st = tg_module_add_module(gpt, "out_head", head)) != TG_OK) return head ? st : TG_ENOMEM;
    }
    if ((num_classes > 0 || lora_rank > 0) && (st = tg_module_requires_grad_(gpt, false)) != TG_OK) return st;
    if (lora_rank > 0) return tg_lora_replace_linear(tp, gpt, lora_rank, lora_alpha);
    if (num_classes == 0) return TG_OK;
    /* trf_blocks[-1], final_norm and out_head train */
    char last[48];
    snprintf(last, sizeof last, "trf_blocks.%lld", (long long)cfg.n_layers - 1);
    const char *parts[3] = {last, "final_norm", "out_head"};
    for (int k = 0; k < 3; k++)
        if ((st = tg_module_requires_grad_(tg_module_get_submodule(gpt, parts[k]), true)) != TG_OK) return st;
    return TG_OK;
}
