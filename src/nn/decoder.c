/* The decoder: one configuration of features, one FeedForward, one
 * TransformerBlock and one model for every family (GPT-2, Qwen3, Llama 3,
 * Gemma 3), each built with the public module API in the book's order, so
 * after tg_manual_seed(s) every weight equals the book's model after
 * torch.manual_seed(s). The attention is src/nn/attention.c's, the norms and
 * embeddings src/nn/layers.c's, the RoPE tables src/nn/rope.c's; a family's
 * names and defaults are src/nn/families.c's. Nothing here asks which family
 * a model is: every choice is a feature of the configuration or a name of
 * its family's table. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tapegrad/gpt.h"

/* ---- configuration ---------------------------------------------------------------------------- */

#define LEARNED_MAX_CONTEXT 65536
#define ROPE_MAX_CONTEXT (1 << 24)

/* The family's table (the configuration is checked first: a known family). */
static const tg__family *family_of(const tg_decoder_config *c)
{
    const tg__family *f = tg__family_get(c->family);
    return f ? f : tg__family_get(TG_GPT_FAMILY_GPT2);
}

const char *tg__decoder_class_name(const tg_decoder_config *c) { return family_of(c)->model_class; }

/* c with every default applied (c checked). */
static tg_decoder_config resolve(const tg_decoder_config *c)
{
    const tg__family *f = family_of(c);
    tg_decoder_config r = *c;
    if (!r.norm) r.norm = f->norm;
    if (!r.positions) r.positions = f->positions;
    if (!r.mlp) r.mlp = f->mlp;
    if (!r.head_dim) r.head_dim = c->emb_dim / c->n_heads;
    if (!r.n_kv_groups) r.n_kv_groups = c->n_heads;
    if (!r.hidden_dim) r.hidden_dim = 4 * c->emb_dim;
    if (!(r.norm_eps > 0)) r.norm_eps = f->norm_eps;
    if (r.positions == TG_POSITIONS_ROPE) {
        if (!(r.rope_base > 0)) r.rope_base = 10000.0;
        if (!(r.rope_local_base > 0)) r.rope_local_base = r.rope_base;
    }
    return r;
}

static bool is_sliding(const tg_decoder_config *c, int64_t layer)
{
    return layer < TG_DECODER_MAX_LAYER_TYPES && c->layer_types[layer] == TG_LAYER_SLIDING;
}

/* Counted in double: a configuration too large for int64 must still be
 * refused with a message, not overflow. A tied head counts once. */
static double params_of(const tg_decoder_config *c)
{
    const tg__family *f = family_of(c);
    tg_decoder_config r = resolve(c);
    double V = (double)r.vocab_size, C = (double)r.context_length, d = (double)r.emb_dim, h = (double)r.hidden_dim;
    double hd = (double)r.head_dim, q = (double)r.n_heads * hd, kv = (double)r.n_kv_groups * hd;
    double att = d * q + 2 * d * kv + q * d + (r.qkv_bias ? q + 2 * kv : 0) + (f->bias ? d : 0) + (r.qk_norm ? 2 * hd : 0);
    double ff = r.mlp == TG_MLP_GELU ? 2 * d * h + (f->bias ? h + d : 0) : 3 * d * h;
    double norm = r.norm == TG_NORM_LAYER ? 2 * d : d;
    double block = att + ff + (r.post_norms ? 4 : 2) * norm;
    return V * d + (r.positions == TG_POSITIONS_LEARNED ? C * d : 0) + (double)r.n_layers * block + norm +
           (r.tie_head ? 0 : V * d);
}

/* What is inconsistent in c (its sizes positive, its family known); NULL
 * when nothing. */
static const char *mismatch(const tg_decoder_config *c, char *buf, size_t size)
{
    const tg__family *f = family_of(c);
    tg_decoder_config r = resolve(c);
    bool rope = r.positions == TG_POSITIONS_ROPE;
    if (c->head_dim == 0 && c->emb_dim % c->n_heads != 0)
        snprintf(buf, size, "emb_dim (%lld) must be divisible by n_heads (%lld)", (long long)c->emb_dim,
                 (long long)c->n_heads);
    else if (c->head_dim < 0 || c->n_kv_groups < 0 || c->hidden_dim < 0 || c->sliding_window < 0)
        snprintf(buf, size, "head_dim, n_kv_groups, hidden_dim and sliding_window must be >= 0 (0: the default)");
    else if (c->n_heads % r.n_kv_groups != 0)
        snprintf(buf, size, "n_heads (%lld) must be divisible by n_kv_groups (%lld)", (long long)c->n_heads,
                 (long long)r.n_kv_groups);
    else if (!(c->norm_eps >= 0 && isfinite(c->norm_eps)))
        snprintf(buf, size, "norm_eps must be >= 0 (0: the family's), got %g", c->norm_eps);
    else if ((unsigned)c->norm > TG_NORM_RMS || (unsigned)c->positions > TG_POSITIONS_ROPE || (unsigned)c->mlp > TG_MLP_GEGLU)
        snprintf(buf, size, "unknown norm %d, positions %d or mlp %d", (int)c->norm, (int)c->positions, (int)c->mlp);
    else if (!isfinite(c->norm_offset) || (c->norm_offset != 0 && r.norm != TG_NORM_RMS))
        snprintf(buf, size, "norm_offset (%g) is RMSNorm's and must be finite", c->norm_offset);
    else if (c->drop_rate != 0 && !f->dropout)
        snprintf(buf, size, "%s has no dropout (drop_rate must be 0, got %g)", f->name, c->drop_rate);
    else if (!rope && (c->rope_base != 0 || c->rope_local_base != 0 || c->rope_freq.factor != 0))
        snprintf(buf, size, "learned positions take no RoPE settings (rope_base, rope_local_base and rope_freq must be 0)");
    else if (rope && r.head_dim % 2 != 0)
        snprintf(buf, size, "RoPE needs an even head_dim, got %lld", (long long)r.head_dim);
    else if (rope && !(c->rope_base >= 0 && isfinite(c->rope_base) && c->rope_local_base >= 0 && isfinite(c->rope_local_base)))
        snprintf(buf, size, "rope_base and rope_local_base must be > 0 (0: the default), got %g and %g", c->rope_base,
                 c->rope_local_base);
    else if (c->rope_freq.factor != 0 &&
             !(c->rope_freq.factor > 0 && c->rope_freq.low_freq_factor > 0 &&
               c->rope_freq.high_freq_factor > c->rope_freq.low_freq_factor &&
               c->rope_freq.original_context_length > 0 && isfinite(c->rope_freq.factor) &&
               isfinite(c->rope_freq.high_freq_factor)))
        snprintf(buf, size, "rope_freq needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                            "original_context_length > 0");
    else if (!(c->query_pre_attn_scalar >= 0 && isfinite(c->query_pre_attn_scalar)))
        snprintf(buf, size, "query_pre_attn_scalar must be > 0 (0: none), got %g", c->query_pre_attn_scalar);
    else {
        for (int64_t i = 0; i < TG_DECODER_MAX_LAYER_TYPES; i++) {
            if (c->layer_types[i] > TG_LAYER_SLIDING) {
                snprintf(buf, size, "layer_types[%lld] is %d (0 full, 1 sliding)", (long long)i, (int)c->layer_types[i]);
                return buf;
            }
            if (i < c->n_layers && c->layer_types[i] == TG_LAYER_SLIDING && c->sliding_window == 0) {
                snprintf(buf, size, "layer %lld is a sliding layer and sliding_window is 0", (long long)i);
                return buf;
            }
        }
        return NULL;
    }
    return buf;
}

int tg_gpt_config_preset(const char *name, tg_gpt_config *out)
{
    tg_decoder_config c;
    if (!name || !out) return tg_error_status(TG_EINVAL, "gpt_config_preset: NULL argument");
    if (tg_decoder_config_preset(name, &c) != TG_OK) return TG_EINVAL;
    if (c.family != TG_GPT_FAMILY_GPT2)
        return tg_error_status(TG_EINVAL, "'%s' is not a GPT-2 configuration (tg_decoder_config_preset builds it)", name);
    *out = (tg_gpt_config){c.vocab_size, c.context_length, c.emb_dim, c.n_heads, c.n_layers, c.drop_rate, c.qkv_bias};
    return TG_OK;
}

tg_decoder_config tg_decoder_config_from_gpt(const tg_gpt_config *g)
{
    tg_decoder_config c = {0};
    if (g)
        c.vocab_size = g->vocab_size, c.context_length = g->context_length, c.emb_dim = g->emb_dim,
        c.n_heads = g->n_heads, c.n_layers = g->n_layers, c.drop_rate = g->drop_rate, c.qkv_bias = g->qkv_bias;
    return c;
}

int tg_gpt_config_check(const tg_gpt_config *g)
{
    if (!g) return tg_error_status(TG_EINVAL, "GPTModel: NULL configuration");
    tg_decoder_config c = tg_decoder_config_from_gpt(g);
    return tg_decoder_config_check(&c);
}

int64_t tg_gpt_config_num_parameters(const tg_gpt_config *g)
{
    tg_decoder_config c = tg_decoder_config_from_gpt(g);
    return g ? tg_decoder_config_num_parameters(&c) : -1;
}

int tg_decoder_config_check(const tg_decoder_config *c)
{
    if (!c) return tg_error_status(TG_EINVAL, "GPTModel: NULL configuration");
    if (!tg__family_get(c->family)) return tg_error_status(TG_EINVAL, "GPTModel: unknown family %d", (int)c->family);
    const char *cls = tg__decoder_class_name(c);
    const struct {
        const char *name;
        int64_t v;
    } sizes[] = {{"vocab_size", c->vocab_size}, {"context_length", c->context_length}, {"emb_dim", c->emb_dim},
                 {"n_heads", c->n_heads},       {"n_layers", c->n_layers}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v <= 0)
            return tg_error_status(TG_EINVAL, "%s: %s must be positive, got %lld", cls, sizes[i].name,
                                   (long long)sizes[i].v);
    if (c->weights != TG_F32 && c->weights != TG_BF16 && c->weights != TG_Q8)
        return tg_error_status(TG_EINVAL, "%s: weights must be float32, bfloat16 or q8_0, got %s", cls,
                               tg_dtype_name(c->weights));
    if (!(c->drop_rate >= 0 && c->drop_rate < 1))
        return tg_error_status(TG_EINVAL, "%s: drop_rate %g is outside [0, 1)", cls, c->drop_rate);
    char why[200];
    if (mismatch(c, why, sizeof why)) return tg_error_status(TG_EINVAL, "%s: %s", cls, why);
    tg_decoder_config r = resolve(c);
    bool learned = r.positions == TG_POSITIONS_LEARNED;
    if (c->weights != TG_F32 && learned)
        return tg_error_status(TG_EINVAL, "%s: %s weights are built for RoPE models (a model with learned "
                                          "positions converts its frozen weights with tg_module_to_dtype)", cls,
                               tg_dtype_name(c->weights));
    int64_t max_ctx = learned ? LEARNED_MAX_CONTEXT : ROPE_MAX_CONTEXT;
    if (c->context_length > max_ctx)
        return tg_error_status(TG_EINVAL, "%s: context_length %lld is above %lld", cls, (long long)c->context_length,
                               (long long)max_ctx);
    /* the weights (float32 or bf16) and the (context, context) mask buffers */
    double masks = family_of(c)->dropout ? (double)c->n_layers * (double)c->context_length * (double)c->context_length : 0;
    double bytes = (c->weights == TG_Q8 ? 34.0 / 32.0 : (double)tg_dtype_size(c->weights)) * params_of(c) + 4.0 * masks;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 1e18;
    if (bytes > mem)
        return tg_error_status(TG_EINVAL, "%s: the weights alone need %.1f GiB, more than this machine's %.1f GiB", cls,
                               bytes / (1 << 30), mem / (1 << 30));
    if (c->vocab_size > INT32_MAX || c->emb_dim > INT32_MAX || c->n_layers > INT32_MAX || r.hidden_dim > INT32_MAX ||
        r.head_dim > INT32_MAX || c->n_heads > 65536)
        return tg_error_status(TG_EINVAL, "%s: sizes above 2^31 (or 65536 heads) are not supported", cls);
    /* q8_0 blocks run along each matrix's input dim (and the embeddings' rows) */
    const struct {
        const char *name;
        int64_t v;
    } ins[] = {{"emb_dim", c->emb_dim}, {"hidden_dim", r.hidden_dim}, {"n_heads * head_dim", c->n_heads * r.head_dim}};
    for (size_t i = 0; c->weights == TG_Q8 && i < sizeof ins / sizeof ins[0]; i++)
        if (ins[i].v % 32)
            return tg_error_status(TG_EINVAL, "%s: q8_0 weights hold blocks of 32 along each matrix's input, and "
                                              "%s is %lld", cls, ins[i].name, (long long)ins[i].v);
    return TG_OK;
}

int tg_decoder_config_resolve(const tg_decoder_config *c, tg_decoder_config *out)
{
    if (!out) return tg_error_status(TG_EINVAL, "decoder_config_resolve: NULL argument");
    int st = tg_decoder_config_check(c);
    if (st == TG_OK) *out = resolve(c);
    return st;
}

int64_t tg_decoder_config_num_parameters(const tg_decoder_config *c)
{
    if (tg_decoder_config_check(c) != TG_OK) return -1;
    return (int64_t)params_of(c);
}

/* ---- FeedForward -------------------------------------------------------------------------------- */

/* The MLP of each kind (tg_mlp_kind):
 *   GELU    layers = Sequential(Linear(d, h), GELU(), Linear(h, d))  (GPT-2)
 *   SwiGLU  fc3(silu(fc1(x)) * fc2(x))                            (Qwen3, Llama 3)
 *   GeGLU   fc3(gelu(fc1(x), approximate="tanh") * fc2(x))        (Gemma 3) */
typedef struct {
    tg_mlp_kind kind;
} ff_state;

static tg_module *child(tg_module *m, const char *name) { return tg_module_get_submodule(m, name); }

/* The GELU MLP's tensors when its layers are the built-in Linear (with
 * bias), GELU, Linear, else false. */
static bool standard_layers(const tg_module *layers, tg_tensor *t[4])
{
    if (!layers || layers->children.n != 3) return false;
    const tg_module *up = layers->children.items[0].ptr, *down = layers->children.items[2].ptr;
    if (!tg__is_linear(up) || !tg__is_linear(down) || strcmp(tg_module_type_name(layers->children.items[1].ptr), "GELU"))
        return false;
    t[0] = tg__entry_get(&up->params, "weight"), t[1] = tg__entry_get(&up->params, "bias");
    t[2] = tg__entry_get(&down->params, "weight"), t[3] = tg__entry_get(&down->params, "bias");
    return t[0] && t[1] && t[2] && t[3];
}

/* The gated MLP's weights when fc1, fc2, fc3 are built-in Linear layers
 * without bias (LoRA wraps them: then each child's own forward). */
static bool gated_layers(tg_module *self, tg_tensor *w[3])
{
    static const char *const names[3] = {"fc1", "fc2", "fc3"};
    for (int i = 0; i < 3; i++) {
        tg_module *f = tg__entry_get(&self->children, names[i]);
        if (!tg__is_linear(f) || tg__entry_get(&f->params, "bias")) return false;
        w[i] = tg__entry_get(&f->params, "weight");
    }
    return true;
}

static tg_tensor *feed_forward_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    const ff_state *s = tg_module_state(self);
    tg_tensor *x = in[0], *t[4];
    if (s->kind == TG_MLP_GELU) {
        /* fused, with the built-in layers: one node that computes the GELU
         * output again in backward instead of keeping it */
        tg_module *layers = child(self, "layers");
        const tg_layer *layer = tg_layer_find("feed_forward");
        if (layer && tg_module_is_fused(self) && x && tg_is_contiguous(x) && standard_layers(layers, t)) {
            tg_tensor *in5[5] = {x, t[0], t[1], t[2], t[3]};
            tg_layer_args a = {0};
            return tg_layer_apply(tp, layer, true, tg_tape_numerics(tp), 5, in5, &a);
        }
        return tg_module_forward(tp, layers, x);
    }
    bool swiglu = s->kind == TG_MLP_SWIGLU;
    const tg_layer *layer = tg_layer_find(swiglu ? "swiglu" : "geglu");
    if (layer && gated_layers(self, t)) {
        tg_tensor *in4[4] = {x, t[0], t[1], t[2]};
        tg_layer_args a = {0};
        return tg_layer_apply(tp, layer, tg_module_is_fused(self), tg_tape_numerics(tp), 4, in4, &a);
    }
    tg_tensor *a = tg_module_forward(tp, child(self, "fc1"), x);
    tg_tensor *b = a ? tg_module_forward(tp, child(self, "fc2"), x) : NULL;
    tg_tensor *act = !b ? NULL : swiglu ? tg_silu(tp, a) : tg_gelu_tanh(tp, a);
    return act ? tg_module_forward(tp, child(self, "fc3"), tg_mul(tp, act, b)) : NULL;
}

static const tg_module_type feed_forward_type = {.name = "FeedForward", .forward = feed_forward_forward};

static tg_module *feed_forward_new(tg_tape *tp, const tg_decoder_config *r, const tg__family *f)
{
    int64_t d = r->emb_dim, h = r->hidden_dim;
    tg_module *m = tg_module_new(tp, &feed_forward_type, sizeof(ff_state));
    if (!m) return NULL;
    ((ff_state *)tg_module_state(m))->kind = r->mlp;
    if (r->mlp == TG_MLP_GELU) {
        tg_module *up = tg__linear_new_as(tp, d, h, f->bias, r->weights);
        tg_module *act = up ? tg_gelu_new(tp) : NULL;
        tg_module *down = act ? tg__linear_new_as(tp, h, d, f->bias, r->weights) : NULL;
        if (!down) return NULL;
        tg_module *layers[3] = {up, act, down};
        return tg_module_add_module(m, "layers", tg_sequential_new(tp, 3, layers)) == TG_OK ? m : NULL;
    }
    if (tg_module_add_module(m, "fc1", tg__linear_new_as(tp, d, h, false, r->weights)) != TG_OK ||
        tg_module_add_module(m, "fc2", tg__linear_new_as(tp, d, h, false, r->weights)) != TG_OK ||
        tg_module_add_module(m, "fc3", tg__linear_new_as(tp, h, d, false, r->weights)) != TG_OK)
        return NULL;
    return m;
}

/* ---- TransformerBlock --------------------------------------------------------------------------- */

/* Its family's norm names and whether its layer slides (which RoPE table
 * the model passes). */
typedef struct {
    const tg__family *family;
    bool rope, sliding; /* forward(x, cos, sin); cos and sin of the local table */
} block_state;

static bool is_feed_forward(const tg_module *m) { return m && m->type == &feed_forward_type; }

/* Whether branch (the last module before a residual) is built-in and
 * returns a fresh tensor nothing else reads: the attention's out_proj
 * output, the FeedForward's (its fused node or its last Linear), a norm's. */
static bool owns_output(tg_module *branch)
{
    tg_tensor *t[4];
    if (is_feed_forward(branch)) {
        const ff_state *s = tg_module_state(branch);
        return s->kind == TG_MLP_GELU ? standard_layers(child(branch, "layers"), t) : gated_layers(branch, t);
    }
    return tg__attention_owns_output(branch) || tg__is_norm(branch);
}

/* drop(y) + shortcut, y = branch(...). Fused, the sum is written over y
 * when the branch owns it, or (with the built-in Dropout in training, p >
 * 0) over the dropout's output, and the dropout's product over y: backward
 * keeps the mask only and nothing else reads either, so one (B, T, d)
 * tensor per residual instead of three. Same bits either way. */
static tg_tensor *residual(tg_tape *tp, tg_module *self, tg_module *drop, tg_module *branch, tg_tensor *y,
                           tg_tensor *shortcut)
{
    bool fused = tg_module_is_fused(self) && (!drop || tg__is_dropout(drop));
    bool owned = fused && owns_output(branch);
    tg_tensor *d = !y ? NULL : !drop ? y : owned ? tg__dropout_forward_over(tp, drop, y) : tg_module_forward(tp, drop, y);
    if (d && shortcut && fused && (d != y || owned) && tg_is_contiguous(d) && tg_same_shape(d, shortcut) &&
        d->dtype == shortcut->dtype)
        return tg__add_into(tp, d, shortcut);
    return tg_add(tp, d, shortcut); /* x = x + shortcut */
}

/* forward(x) or, with RoPE, forward(x, cos, sin); last_only: its last
 * position only, (b, 1, d): the attention's keys and values still see every
 * position of x (b, T, d), the query, the residuals, the norms and the
 * feed-forward only the last (last_position_block says when that applies).
 *   shortcut = x; x = norm1(x); x = att(x[, cos, sin]); [x = post_att_norm(x)]
 *   x = drop_shortcut(x) + shortcut
 *   shortcut = x; x = norm2(x); x = ff(x); [x = post_ff_norm(x)]
 *   x = drop_shortcut(x) + shortcut */
static tg_tensor *block_run(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in, bool last_only)
{
    const block_state *s = tg_module_state(self);
    const char *const *names = s->family->norm_names;
    tg_module *att = child(self, "att"), *ff = child(self, "ff"), *drop = tg__entry_get(&self->children, "drop_shortcut");
    tg_module *post_att = tg__entry_get(&self->children, names[1]), *post_ff = tg__entry_get(&self->children, names[3]);
    tg_tensor *x = in[0];
    tg_tensor *shortcut = last_only ? tg_narrow(tp, x, 1, x->shape[1] - 1, 1) : x;
    tg_tensor *att_in[3] = {tg_module_forward(tp, child(self, names[0]), x), n == 3 ? in[1] : NULL, n == 3 ? in[2] : NULL};
    x = !att_in[0] ? NULL : last_only ? tg__attention_last_position(tp, att, n, att_in) : tg_module_call(tp, att, n, att_in);
    tg_module *branch = att;
    if (post_att && x) x = tg_module_forward(tp, post_att, x), branch = post_att;
    x = residual(tp, self, drop, branch, x, shortcut);
    shortcut = x;
    x = x ? tg_module_forward(tp, child(self, names[2]), x) : NULL;
    x = x ? tg_module_forward(tp, ff, x) : NULL;
    branch = ff;
    if (post_ff && x) x = tg_module_forward(tp, post_ff, x), branch = post_ff;
    return residual(tp, self, drop, branch, x, shortcut);
}

static tg_tensor *block_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    const block_state *s = tg_module_state(self);
    return tg__check_ninputs(self, n, s->rope ? 3 : 1) ? block_run(tp, self, n, in, false) : NULL;
}

static const tg_module_type block_type = {.name = "TransformerBlock", .forward = block_forward};

static tg_module *norm_new(tg_tape *tp, const tg_decoder_config *r, const tg__family *f, int64_t dim)
{
    return r->norm == TG_NORM_LAYER ? tg__layer_norm_new_eps(tp, dim, r->norm_eps)
                                    : tg__rms_norm_new_ex(tp, dim, r->norm_eps, r->norm_offset, f->norm_book);
}

/* The attention of layer i as the configuration describes it. */
static tg__attention_spec attention_spec(const tg_decoder_config *r, const tg__family *f, int64_t layer)
{
    return (tg__attention_spec){.class_name = f->attention_class,
                                .d_in = r->emb_dim,
                                .d_out = r->emb_dim,
                                .context_length = r->context_length,
                                .num_heads = r->n_heads,
                                .num_kv_groups = r->n_kv_groups,
                                .head_dim = r->head_dim,
                                .dropout = r->drop_rate,
                                .qkv_bias = r->qkv_bias,
                                .out_bias = f->bias,
                                .qk_norm = r->qk_norm,
                                .norm_eps = r->norm_eps,
                                .norm_offset = r->norm_offset,
                                .norm_book = f->norm_book,
                                .rope = r->positions == TG_POSITIONS_ROPE,
                                .q_scale = r->query_pre_attn_scalar > 0 ? pow(r->query_pre_attn_scalar, -0.5) : 0.0,
                                .window = is_sliding(r, layer) ? r->sliding_window : 0,
                                .mask_buffer = f->dropout,
                                .kvq_init = f->kvq_init,
                                .keys_first = f->keys_first,
                                .merge_view = f->merge_view};
}

/* __init__'s order: att, ff, the norms, drop_shortcut */
static tg_module *block_new(tg_tape *tp, const tg_decoder_config *r, int64_t layer)
{
    const tg__family *f = family_of(r);
    tg_module *m = tg_module_new(tp, &block_type, sizeof(block_state));
    if (!m) return NULL;
    *(block_state *)tg_module_state(m) = (block_state){f, r->positions == TG_POSITIONS_ROPE, is_sliding(r, layer)};
    tg__attention_spec spec = attention_spec(r, f, layer);
    if (tg_module_add_module(m, "att", tg__attention_new(tp, &spec, r->weights)) != TG_OK ||
        tg_module_add_module(m, "ff", feed_forward_new(tp, r, f)) != TG_OK)
        return NULL;
    for (int k = 0; k < 4; k++)
        if ((k % 2 == 0 || r->post_norms) &&
            tg_module_add_module(m, f->norm_names[k], norm_new(tp, r, f, r->emb_dim)) != TG_OK)
            return NULL;
    if (f->dropout && tg_module_add_module(m, "drop_shortcut", tg_dropout_new(tp, r->drop_rate)) != TG_OK) return NULL;
    return m;
}

tg_module *tg_feed_forward_new(tg_tape *tp, const tg_gpt_config *gpt)
{
    tg_decoder_config cfg = tg_decoder_config_from_gpt(gpt);
    if (!gpt || tg_decoder_config_check(&cfg) != TG_OK) return NULL;
    tg_decoder_config r = resolve(&cfg);
    return feed_forward_new(tp, &r, family_of(&r));
}

tg_module *tg_transformer_block_new(tg_tape *tp, const tg_gpt_config *gpt)
{
    tg_decoder_config cfg = tg_decoder_config_from_gpt(gpt);
    if (!gpt || tg_decoder_config_check(&cfg) != TG_OK) return NULL;
    tg_decoder_config r = resolve(&cfg);
    return block_new(tp, &r, 0);
}

/* ---- the model -------------------------------------------------------------------------------- */

/* The model's state: its configuration as given and resolved, the KV
 * cache's position (the book's current_pos), the RoPE tables (full layers',
 * sliding layers') and the settings of tg_gpt_generate, tg_gpt_forward_last
 * and tg_gpt_lm_loss. */
typedef struct {
    tg_decoder_config cfg, r;
    int64_t current_pos;
    bool last_logits_only; /* final_norm and out_head see the last position alone
                            * (under FAST and BF16 the last block too, last_position_block) */
    bool hidden_only;      /* the output stops before out_head */
    bool recompute_head;   /* the chunked head's logits computed again in backward */
    tg__rope rope, rope_local;
} decoder_state;

static tg_tensor *decoder_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in);

static int decoder_reset_cache(tg_module *self)
{
    ((decoder_state *)tg_module_state(self))->current_pos = 0;
    return TG_OK;
}

static const tg_module_type decoder_type = {.name = "GPTModel", .forward = decoder_forward, .reset_cache = decoder_reset_cache};

static bool is_decoder(const tg_module *m) { return m && m->type == &decoder_type; }

static tg_module *blocks_of(tg_module *m)
{
    const decoder_state *s = tg_module_state(m);
    return tg__entry_get(&m->children, family_of(&s->cfg)->blocks);
}

/* The last of the model's blocks when only the last position's logits are
 * wanted and the block can compute that position alone: numerics other than
 * EXACT (whose bits are the full forward's), the built-in blocks, the last
 * with the built-in norms, FeedForward and attention (no KV cache) and no
 * dropout to draw (the draws would not be the full forward's). Else NULL. */
static tg_module *last_position_block(tg_tape *tp, tg_module *model)
{
    tg_numerics nm = tg__module_policy(model, tp);
    if (nm == TG_NUMERICS_EXACT) return NULL;
    tg_module *blocks = blocks_of(model);
    int nb = blocks ? tg_module_num_children(blocks) : 0;
    tg_module *b = nb > 0 ? tg_module_child(blocks, nb - 1) : NULL;
    if (!b || b->type != &block_type || tg__module_pin_or(b, nm) == TG_NUMERICS_EXACT) return NULL;
    const block_state *s = b->state;
    for (int k = 0; k < 4; k++) {
        const tg_module *norm = tg__entry_get(&b->children, s->family->norm_names[k]);
        if (norm ? !tg__is_norm(norm) : k % 2 == 0) return NULL;
    }
    const tg_module *drop = tg__entry_get(&b->children, "drop_shortcut");
    bool ok = is_feed_forward(tg__entry_get(&b->children, "ff")) && (!drop || (tg__is_dropout(drop) && !tg__dropout_draws(drop))) &&
              tg__attention_last_position_ok(tg__entry_get(&b->children, "att"), tg__module_pin_or(b, nm));
    return ok ? b : NULL;
}

/* The rows p0 .. p0+T-1 of table r in dtype dt (a model converted to
 * float64 widens the float32 tables, as .to() converts buffers). */
static bool rope_rows(tg_tape *tp, tg_module *self, tg__rope *r, int64_t p0, int64_t T, tg_dtype dt, tg_tensor **cos,
                      tg_tensor **sin)
{
    if (tg__rope_need(r, self->tape, p0 + T) != TG_OK) return false;
    *cos = tg_narrow(tp, r->cos, 0, p0, T), *sin = tg_narrow(tp, r->sin, 0, p0, T);
    if (dt != TG_F32) *cos = tg_to_dtype(tp, *cos, dt), *sin = tg_to_dtype(tp, *sin, dt);
    return *cos && *sin;
}

/* tok_emb [* sqrt(emb_dim)] [+ pos_emb] [drop_emb], the blocks (a sliding
 * layer with the local RoPE table), final_norm, out_head. */
static tg_tensor *decoder_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    decoder_state *s = tg_module_state(self);
    const tg_decoder_config *c = &s->r;
    const char *cls = tg_module_type_name(self);
    const tg_tensor *ids = in[0];
    char sh[64];
    if (ids->ndim != 2 || ids->dtype != TG_I64)
        return tg_error("%s: input must be int64 ids of shape (batch, tokens), got %s %s", cls, tg_dtype_name(ids->dtype),
                        tg_shape_str(ids, sh, sizeof sh));
    int64_t T = ids->shape[1];
    if (T == 0 || ids->shape[0] == 0) return tg_error("%s: input %s has no tokens", cls, tg_shape_str(ids, sh, sizeof sh));
    /* pos_ids = torch.arange(self.current_pos, self.current_pos + seq_len) with the cache */
    int64_t p0 = tg_module_kv_cache_enabled(self) ? s->current_pos : 0;
    if (p0 + T > c->context_length) {
        if (p0 > 0)
            return tg_error("%s: %lld cached and %lld new tokens exceed context_length %lld (reset the KV cache)", cls,
                            (long long)p0, (long long)T, (long long)c->context_length);
        return tg_error("%s: %lld tokens exceed context_length %lld", cls, (long long)T, (long long)c->context_length);
    }
    tg_tensor *x = tg_module_forward(tp, child(self, "tok_emb"), in[0]);
    if (x && c->emb_scale) x = tg_mul_scalar(tp, x, pow((double)c->emb_dim, 0.5)); /* * (emb_dim ** 0.5) */
    tg_module *pos_emb = tg__entry_get(&self->children, "pos_emb"), *drop = tg__entry_get(&self->children, "drop_emb");
    if (x && pos_emb) /* x = tok_embeds + pos_embeds */
        x = tg_add(tp, x, tg_module_forward(tp, pos_emb, tg_arange(tp, TG_I64, (double)p0, (double)(p0 + T), 1)));
    if (x && drop) x = tg_module_forward(tp, drop, x);
    if (!x) return NULL;
    tg_tensor *cos = NULL, *sin = NULL, *cos_l = NULL, *sin_l = NULL;
    bool rope = c->positions == TG_POSITIONS_ROPE;
    if (rope && (!rope_rows(tp, self, &s->rope, p0, T, x->dtype, &cos, &sin) ||
                 (s->rope_local.head_dim && !rope_rows(tp, self, &s->rope_local, p0, T, x->dtype, &cos_l, &sin_l))))
        return NULL;
    tg_module *blocks = blocks_of(self);
    if (!blocks) return tg_error("%s: the model has no %s", cls, family_of(c)->blocks);
    tg_module *last_block = s->last_logits_only ? last_position_block(tp, self) : NULL;
    int nb = blocks ? tg_module_num_children(blocks) : 0;
    tg_numerics was = tg__module_enter(tp, blocks);
    for (int j = 0; x && j < nb; j++) {
        tg_module *b = tg_module_child(blocks, j);
        bool local = b && b->type == &block_type && ((const block_state *)b->state)->sliding && cos_l;
        tg_tensor *bin[3] = {x, local ? cos_l : cos, local ? sin_l : sin};
        if (b == last_block) {
            tg_numerics prev = tg__module_enter(tp, b); /* as tg_module_call would */
            x = block_run(tp, b, rope ? 3 : 1, bin, true);
            tg__tape_leave(tp, prev);
        } else
            x = tg_module_call(tp, b, rope ? 3 : 1, bin);
    }
    tg__tape_leave(tp, was);
    if (x && s->last_logits_only && !last_block) x = tg_narrow(tp, x, 1, T - 1, 1);
    x = x ? tg_module_forward(tp, child(self, "final_norm"), x) : NULL;
    if (!s->hidden_only) x = x ? tg_module_forward(tp, child(self, "out_head"), x) : NULL;
    if (x && tg_module_kv_cache_enabled(self)) s->current_pos = p0 + T;
    return x;
}

/* out_head.weight = tok_emb.weight, as a checkpoint without lm_head ties them */
static int tie_head(tg_module *m)
{
    tg_module *head = tg_module_get_submodule(m, "out_head");
    tg_tensor *w = tg_module_get_parameter(tg_module_get_submodule(m, "tok_emb"), "weight");
    return head && w ? tg_module_register_parameter(head, "weight", w) : TG_ENOMEM;
}

tg_module *tg_gpt_new(tg_tape *tp, const tg_gpt_config *gpt)
{
    if (!gpt) return tg_error("GPTModel: NULL configuration");
    tg_decoder_config cfg = tg_decoder_config_from_gpt(gpt);
    return tg_decoder_new(tp, &cfg);
}

/* __init__'s order: tok_emb, pos_emb, drop_emb, the blocks, final_norm, out_head */
tg_module *tg_decoder_new(tg_tape *tp, const tg_decoder_config *cfg)
{
    if (tg_decoder_config_check(cfg) != TG_OK) return NULL;
    const tg__family *f = family_of(cfg);
    tg_decoder_config r = resolve(cfg);
    tg_module *m = tg_module_new(tp, &decoder_type, sizeof(decoder_state));
    if (!m) return NULL;
    tg__module_set_class(m, f->model_class);
    decoder_state *s = tg_module_state(m);
    s->cfg = *cfg, s->r = r;
    const int64_t d = r.emb_dim;
    if (tg_module_add_module(m, "tok_emb", tg__embedding_new_as(tp, r.vocab_size, d, r.weights)) != TG_OK) return NULL;
    if (r.positions == TG_POSITIONS_LEARNED &&
        tg_module_add_module(m, "pos_emb", tg__embedding_new_as(tp, r.context_length, d, r.weights)) != TG_OK)
        return NULL;
    if (f->dropout && tg_module_add_module(m, "drop_emb", tg_dropout_new(tp, r.drop_rate)) != TG_OK) return NULL;
    tg_module *blocks = f->blocks_sequential ? tg_sequential_new(tp, 0, NULL) : tg_module_list_new(tp, 0, NULL);
    if (tg_module_add_module(m, f->blocks, blocks) != TG_OK) return NULL;
    bool any_sliding = false;
    for (int64_t i = 0; i < r.n_layers; i++) {
        if (tg_module_append(blocks, block_new(tp, &r, i)) != TG_OK) return NULL;
        any_sliding |= is_sliding(&r, i);
    }
    if (tg_module_add_module(m, "final_norm", norm_new(tp, &r, f, d)) != TG_OK ||
        tg_module_add_module(m, "out_head", tg__linear_new_as(tp, d, r.vocab_size, false, r.weights)) != TG_OK)
        return NULL;
    if (r.positions == TG_POSITIONS_ROPE) {
        s->rope = (tg__rope){.head_dim = r.head_dim, .context_length = r.context_length, .base = r.rope_base,
                             .freq = r.rope_freq};
        if (any_sliding && r.rope_local_base != r.rope_base)
            s->rope_local = (tg__rope){.head_dim = r.head_dim, .context_length = r.context_length,
                                       .base = r.rope_local_base, .freq = r.rope_freq};
    }
    return r.tie_head && tie_head(m) != TG_OK ? NULL : m;
}

int tg_gpt_set_recompute(tg_module *model, bool on)
{
    tg_decoder_config cfg;
    int st = tg_decoder_get_config(model, &cfg);
    tg_module *blocks = st == TG_OK ? blocks_of(model) : NULL;
    if (st == TG_OK && !blocks) st = tg_error_status(TG_EINVAL, "gpt_set_recompute: the model has no blocks");
    for (int i = 0; st == TG_OK && i < tg_module_num_children(blocks); i++)
        st = tg_module_set_recompute(tg_module_child(blocks, i), on);
    if (st == TG_OK) ((decoder_state *)tg_module_state(model))->recompute_head = on;
    return st;
}

bool tg__gpt_set_last_logits_only(tg_module *gpt, bool on)
{
    decoder_state *s = tg_module_state(gpt);
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

bool tg_gpt_is_decoder(const tg_module *m) { return is_decoder(m); }

/* The fused head's operands when the loss can take them: numerics other
 * than EXACT, the model's modules fused, out_head the built-in Linear (its
 * weight float32, or bf16 and frozen) or a LinearWithLoRA over one (its A,
 * B and alpha / rank in *a, *bm, *scale; else NULL). */
typedef struct {
    tg_tensor *w, *b, *a, *bm;
    double scale;
} head_parts;

static bool chunked_head(tg_tape *tp, tg_module *gpt, head_parts *h)
{
    tg_module *head = tg__entry_get(&gpt->children, "out_head"), *lin = head;
    if (!head || !tg_module_is_fused(gpt) || tg__module_policy(head, tp) == TG_NUMERICS_EXACT) return false;
    if (!tg__lora_parts(head, &lin, &h->a, &h->bm, &h->scale)) h->a = h->bm = NULL;
    return tg__linear_weights(lin, &h->w, &h->b) &&
           (h->w->dtype == TG_F32 || (tg__is_compact(h->w->dtype) && !h->w->requires_grad));
}

tg_tensor *tg_gpt_lm_loss(tg_tape *tp, tg_module *gpt, tg_tensor *ids, const tg_tensor *targets, int64_t ignore_index)
{
    if (!is_decoder(gpt)) return tg_error("gpt_lm_loss: the model is not a decoder (tg_decoder_new)");
    if (!tp) return tg_error("gpt_lm_loss: NULL tape");
    if (!ids || !targets) return tg__error_null_input("gpt_lm_loss");
    decoder_state *s = tg_module_state(gpt);
    head_parts h = {0};
    bool chunked = chunked_head(tp, gpt, &h);
    bool prev = s->hidden_only;
    s->hidden_only = chunked;
    tg_tensor *y = tg_module_forward(tp, gpt, ids);
    s->hidden_only = prev;
    if (!y) return NULL;
    int64_t flat[2] = {-1, y->shape[y->ndim - 1]}, n = -1;
    tg_tensor *rows = tg_view(tp, y, 2, flat), *t = tg_view(tp, (tg_tensor *)targets, 1, &n);
    if (!chunked) return tg_cross_entropy_ignore(tp, rows, t, TG_REDUCE_MEAN, ignore_index);
    tg_module *head = tg_module_get_submodule(gpt, "out_head");
    tg_numerics was = tg__module_enter(tp, head);
    /* LoRA: (alpha / rank) * (x @ A), which the node multiplies by B chunk by chunk */
    tg_tensor *u = h.a ? tg_mul_scalar(tp, tg_matmul(tp, rows, h.a), h.scale) : NULL;
    tg_tensor *loss = h.a && !u ? NULL
                                : tg__linear_cross_entropy(tp, rows, h.w, h.b, u, h.bm, t, TG_REDUCE_MEAN, ignore_index, 0,
                                                           s->recompute_head);
    tg__tape_leave(tp, was);
    return loss;
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
        tg_error("%s: out_head has no 2-D weight to tell its output size", tg_module_type_name(gpt));
        return -1;
    }
    return w->shape[0];
}

int tg_gpt_get_config(const tg_module *gpt, tg_gpt_config *out)
{
    tg_decoder_config c;
    int st = out ? tg_decoder_get_config(gpt, &c) : tg_error_status(TG_EINVAL, "gpt_get_config: NULL argument");
    if (st == TG_OK)
        *out = (tg_gpt_config){c.vocab_size, c.context_length, c.emb_dim, c.n_heads, c.n_layers, c.drop_rate, c.qkv_bias};
    return st;
}

int tg_decoder_get_config(const tg_module *gpt, tg_decoder_config *out)
{
    if (!gpt || !out) return tg_error_status(TG_EINVAL, "gpt_get_config: NULL argument");
    if (!is_decoder(gpt))
        return tg_error_status(TG_EINVAL,
                               "gpt_get_config: module is a %s, not a GPTModel, Qwen3Model, Llama3Model or Gemma3Model",
                               tg_module_type_name(gpt));
    *out = ((const decoder_state *)tg_module_state_const(gpt))->cfg;
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
    const decoder_state *s = tg_module_state(gpt);
    char last[64];
    snprintf(last, sizeof last, "%s.%lld", family_of(&s->cfg)->blocks, (long long)cfg.n_layers - 1);
    const char *parts[3] = {last, "final_norm", "out_head"};
    for (int k = 0; k < 3; k++)
        if ((st = tg_module_requires_grad_(tg_module_get_submodule(gpt, parts[k]), true)) != TG_OK) return st;
    return TG_OK;
}
