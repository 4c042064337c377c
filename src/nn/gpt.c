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

#define GPT2(emb, heads, layers) \
    {50257, 1024, emb, heads, layers, 0.1, false, TG_GPT_FAMILY_GPT2, 0, 0, 0, false, 0, {0, 0, 0, 0}, 0, false, TG_F32}
#define QWEN3(emb, heads, layers, hidden)                                                                  \
    {151936, 40960, emb, heads, layers, 0.0, false, TG_GPT_FAMILY_QWEN3, hidden, 128, 8, true, 1e6, {0, 0, 0, 0}, \
     0, false, TG_F32}
#define LLAMA32(emb, heads, layers)                                                                          \
    {128256, 131072, emb, heads, layers, 0.0, false, TG_GPT_FAMILY_LLAMA3, 8192, 0, 8, false, 500000.0,        \
     {32.0, 1.0, 4.0, 8192}, 0, false, TG_F32}

/* The book's configurations: GPT_CONFIG_124M and chapter 5's sizes; its
 * qwen3.py QWEN_CONFIG_06_B .. QWEN3_CONFIG_8B and llama3.py's
 * LLAMA32_CONFIG_1B and _3B. */
static const struct {
    const char *name;
    tg_decoder_config cfg;
} presets[] = {
    {"gpt2-small", GPT2(768, 12, 12)},
    {"gpt2-medium", GPT2(1024, 16, 24)},
    {"gpt2-large", GPT2(1280, 20, 36)},
    {"gpt2-xl", GPT2(1600, 25, 48)},
    {"qwen3-0.6b", QWEN3(1024, 16, 28, 3072)},
    {"qwen3-1.7b", QWEN3(2048, 16, 28, 6144)},
    {"qwen3-4b", QWEN3(2560, 32, 36, 9728)},
    {"qwen3-8b", QWEN3(4096, 32, 36, 12288)},
    {"llama3.2-1b", LLAMA32(2048, 32, 16)},
    {"llama3.2-3b", LLAMA32(3072, 24, 28)},
};
enum { NPRESETS = (int)(sizeof presets / sizeof presets[0]) };

const char *tg_decoder_config_preset_name(int i) { return i >= 0 && i < NPRESETS ? presets[i].name : NULL; }

tg_decoder_config tg_decoder_config_from_gpt(const tg_gpt_config *g)
{
    tg_decoder_config c = {0};
    if (g)
        c.vocab_size = g->vocab_size, c.context_length = g->context_length, c.emb_dim = g->emb_dim,
        c.n_heads = g->n_heads, c.n_layers = g->n_layers, c.drop_rate = g->drop_rate, c.qkv_bias = g->qkv_bias;
    return c;
}

static tg_gpt_config gpt_of(const tg_decoder_config *c)
{
    return (tg_gpt_config){c->vocab_size, c->context_length, c->emb_dim, c->n_heads, c->n_layers, c->drop_rate,
                           c->qkv_bias};
}

int tg_gpt_config_preset(const char *name, tg_gpt_config *out)
{
    tg_decoder_config c;
    if (!name || !out) return tg_error_status(TG_EINVAL, "gpt_config_preset: NULL argument");
    if (tg_decoder_config_preset(name, &c) != TG_OK) return TG_EINVAL;
    if (c.family != TG_GPT_FAMILY_GPT2)
        return tg_error_status(TG_EINVAL, "'%s' is not a GPT-2 configuration (tg_decoder_config_preset builds it)", name);
    *out = gpt_of(&c);
    return TG_OK;
}

int tg_decoder_config_preset(const char *name, tg_decoder_config *out)
{
    if (!name || !out) return tg_error_status(TG_EINVAL, "decoder_config_preset: NULL argument");
    for (int i = 0; i < NPRESETS; i++)
        if (strcmp(name, presets[i].name) == 0) {
            *out = presets[i].cfg;
            return TG_OK;
        }
    return tg_error_status(TG_EINVAL,
                           "unknown model configuration '%.100s' (expected gpt2-small, gpt2-medium, gpt2-large, "
                           "gpt2-xl, qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, llama3.2-1b or llama3.2-3b)",
                           name);
}

static bool has_rope(const tg_decoder_config *c) { return c->family != TG_GPT_FAMILY_GPT2; }

/* The book's class of each family: print(model)'s first line. */
const char *tg__gpt_class_name(const tg_decoder_config *c)
{
    return c->family == TG_GPT_FAMILY_QWEN3 ? "Qwen3Model" : c->family == TG_GPT_FAMILY_LLAMA3 ? "Llama3Model" : "GPTModel";
}

int64_t tg__gpt_head_dim(const tg_decoder_config *c) { return c->head_dim ? c->head_dim : c->emb_dim / c->n_heads; }
int64_t tg__gpt_kv_groups(const tg_decoder_config *c) { return c->n_kv_groups ? c->n_kv_groups : c->n_heads; }
int64_t tg__gpt_hidden_dim(const tg_decoder_config *c) { return c->hidden_dim ? c->hidden_dim : 4 * c->emb_dim; }
double tg__gpt_norm_eps(const tg_decoder_config *c)
{
    return c->norm_eps > 0 ? c->norm_eps : c->family == TG_GPT_FAMILY_QWEN3 ? 1e-6 : 1e-5;
}

/* Counted in double: a configuration too large for int64 must still be
 * refused with a message, not overflow. A tied head counts once. */
static double params_of(const tg_decoder_config *c)
{
    double V = (double)c->vocab_size, C = (double)c->context_length, d = (double)c->emb_dim;
    double h = (double)tg__gpt_hidden_dim(c), head = c->tie_head ? 0 : V * d;
    if (has_rope(c)) {
        double hd = (double)tg__gpt_head_dim(c), q = (double)c->n_heads * hd, kv = (double)tg__gpt_kv_groups(c) * hd;
        double att = d * q + 2 * d * kv + q * d + (c->qk_norm ? 2 * hd : 0);
        return V * d + (double)c->n_layers * (att + 3 * d * h + 2 * d) + d + head;
    }
    double att = 4 * d * d + d + (c->qkv_bias ? 3 * d : 0);
    double ff = 2 * d * h + h + d;
    return V * d + C * d + (double)c->n_layers * (att + ff + 4 * d) + 2 * d + head;
}

#define GPT_MAX_CONTEXT 65536
#define ROPE_MAX_CONTEXT (1 << 24)

/* The settings a family does not have, and RoPE's own checks; NULL when the
 * configuration is consistent, else what is wrong. */
static const char *family_mismatch(const tg_decoder_config *c, char *buf, size_t size)
{
    const char *fam = c->family == TG_GPT_FAMILY_QWEN3 ? "Qwen3" : c->family == TG_GPT_FAMILY_LLAMA3 ? "Llama 3" : "GPT-2";
    int64_t derived = c->emb_dim / c->n_heads;
    bool derives_head = c->family != TG_GPT_FAMILY_QWEN3 || c->head_dim == 0;
    if (derives_head && c->emb_dim % c->n_heads != 0)
        snprintf(buf, size, "emb_dim (%lld) must be divisible by n_heads (%lld)", (long long)c->emb_dim,
                 (long long)c->n_heads);
    else if (c->family != TG_GPT_FAMILY_QWEN3 && c->head_dim != 0 && c->head_dim != derived)
        snprintf(buf, size, "%s's head_dim is emb_dim / n_heads = %lld, got %lld", fam, (long long)derived,
                 (long long)c->head_dim);
    else if (c->head_dim < 0 || c->n_kv_groups < 0 || c->hidden_dim < 0)
        snprintf(buf, size, "head_dim, n_kv_groups and hidden_dim must be >= 0 (0: the default)");
    else if (c->n_heads % tg__gpt_kv_groups(c) != 0)
        snprintf(buf, size, "n_heads (%lld) must be divisible by n_kv_groups (%lld)", (long long)c->n_heads,
                 (long long)tg__gpt_kv_groups(c));
    else if (!(c->norm_eps >= 0 && isfinite(c->norm_eps)))
        snprintf(buf, size, "norm_eps must be >= 0 (0: the family's), got %g", c->norm_eps);
    else if (c->qk_norm && c->family != TG_GPT_FAMILY_QWEN3)
        snprintf(buf, size, "%s has no QK-norm", fam);
    else if (!has_rope(c) && c->n_kv_groups != 0 && c->n_kv_groups != c->n_heads)
        snprintf(buf, size, "GPT-2 has one key-value group per head (n_kv_groups %lld, n_heads %lld)",
                 (long long)c->n_kv_groups, (long long)c->n_heads);
    else if (!has_rope(c) && (c->rope_base != 0 || c->rope_freq.factor != 0))
        snprintf(buf, size, "GPT-2 has learned positions, not RoPE (rope_base and rope_freq must be 0)");
    else if (!has_rope(c) && c->norm_eps != 0 && c->norm_eps != 1e-5)
        snprintf(buf, size, "GPT-2's LayerNorm eps is 1e-5 (norm_eps 0 or 1e-5), got %g", c->norm_eps);
    else if (has_rope(c) && c->drop_rate != 0)
        snprintf(buf, size, "%s has no dropout (drop_rate must be 0, got %g)", fam, c->drop_rate);
    else if (has_rope(c) && c->qkv_bias)
        snprintf(buf, size, "%s has no qkv bias", fam);
    else if (has_rope(c) && tg__gpt_head_dim(c) % 2 != 0)
        snprintf(buf, size, "RoPE needs an even head_dim, got %lld", (long long)tg__gpt_head_dim(c));
    else if (has_rope(c) && !(c->rope_base >= 0 && isfinite(c->rope_base)))
        snprintf(buf, size, "rope_base must be > 0 (0: 10000), got %g", c->rope_base);
    else if (c->rope_freq.factor != 0 &&
             !(c->rope_freq.factor > 0 && c->rope_freq.low_freq_factor > 0 &&
               c->rope_freq.high_freq_factor > c->rope_freq.low_freq_factor &&
               c->rope_freq.original_context_length > 0 && isfinite(c->rope_freq.factor) &&
               isfinite(c->rope_freq.high_freq_factor)))
        snprintf(buf, size, "rope_freq needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                            "original_context_length > 0");
    else
        return NULL;
    return buf;
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
    const struct {
        const char *name;
        int64_t v;
    } sizes[] = {{"vocab_size", c->vocab_size}, {"context_length", c->context_length}, {"emb_dim", c->emb_dim},
                 {"n_heads", c->n_heads},       {"n_layers", c->n_layers}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].v <= 0)
            return tg_error_status(TG_EINVAL, "GPTModel: %s must be positive, got %lld", sizes[i].name,
                                   (long long)sizes[i].v);
    if ((unsigned)c->family > TG_GPT_FAMILY_LLAMA3)
        return tg_error_status(TG_EINVAL, "GPTModel: unknown family %d", (int)c->family);
    if (c->weights != TG_F32 && c->weights != TG_BF16)
        return tg_error_status(TG_EINVAL, "%s: weights must be float32 or bfloat16, got %s", tg__gpt_class_name(c),
                               tg_dtype_name(c->weights));
    if (c->weights == TG_BF16 && !has_rope(c))
        return tg_error_status(TG_EINVAL, "GPTModel: bfloat16 weights are built for Qwen3 and Llama 3 (a GPT-2 "
                                          "converts its frozen weights with tg_module_to_dtype)");
    if (!(c->drop_rate >= 0 && c->drop_rate < 1))
        return tg_error_status(TG_EINVAL, "GPTModel: drop_rate %g is outside [0, 1)", c->drop_rate);
    char why[160];
    if (family_mismatch(c, why, sizeof why)) return tg_error_status(TG_EINVAL, "%s: %s", tg__gpt_class_name(c), why);
    int64_t max_ctx = has_rope(c) ? ROPE_MAX_CONTEXT : GPT_MAX_CONTEXT;
    if (c->context_length > max_ctx)
        return tg_error_status(TG_EINVAL, "%s: context_length %lld is above %lld", tg__gpt_class_name(c),
                               (long long)c->context_length, (long long)max_ctx);
    /* the weights (float32 or bf16) and, for GPT-2, every block's (context, context) mask buffer */
    double masks = has_rope(c) ? 0 : (double)c->n_layers * (double)c->context_length * (double)c->context_length;
    double bytes = (double)tg_dtype_size(c->weights) * params_of(c) + 4.0 * masks;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 1e18;
    if (bytes > mem)
        return tg_error_status(TG_EINVAL, "%s: the weights alone need %.1f GiB, more than this machine's %.1f GiB", tg__gpt_class_name(c),
                               bytes / (1 << 30), mem / (1 << 30));
    if (c->vocab_size > INT32_MAX || c->emb_dim > INT32_MAX || c->n_layers > INT32_MAX ||
        tg__gpt_hidden_dim(c) > INT32_MAX || tg__gpt_head_dim(c) > INT32_MAX || c->n_heads > 65536)
        return tg_error_status(TG_EINVAL, "%s: sizes above 2^31 (or 65536 heads) are not supported", tg__gpt_class_name(c));
    return TG_OK;
}

int64_t tg_decoder_config_num_parameters(const tg_decoder_config *c)
{
    if (tg_decoder_config_check(c) != TG_OK) return -1;
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
static int embedding_init(tg_tensor *w, void *ctx)
{
    (void)ctx;
    return tg_normal_(w, 0.0, 1.0, NULL);
}

tg_module *tg_embedding_new(tg_tape *tp, int64_t num, int64_t dim) { return tg__embedding_new_as(tp, num, dim, TG_F32); }

tg_module *tg__embedding_new_as(tg_tape *tp, int64_t num, int64_t dim, tg_dtype dt)
{
    if (!tg__check_size("Embedding", "num_embeddings", num) || !tg__check_size("Embedding", "embedding_dim", dim))
        return NULL;
    tg_module *m = tg_module_new(tp, &embedding_type, sizeof(embedding_state));
    if (!m) return NULL;
    *(embedding_state *)tg_module_state(m) = (embedding_state){num, dim};
    int64_t shape[2] = {num, dim};
    tg_tensor *w = tg__parameter_drawn(tp, dt, 2, shape, embedding_init, NULL);
    if (!w || tg_module_register_parameter(m, "weight", w) != TG_OK) return NULL;
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

/* nn.RMSNorm (parameter "weight") or the book's qwen3.py RMSNorm ("scale"):
 * the same computation, x * rsqrt(mean(x^2) + eps) * weight. */
typedef struct {
    int64_t dim;
    double eps;
    bool book; /* the parameter is "scale" and print(model) shows RMSNorm() */
} rms_norm_state;

static tg_tensor *rms_norm_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    const rms_norm_state *s = tg_module_state(self);
    if (!check_last_dim(self, in[0], s->dim)) return NULL;
    tg_tensor *in2[2] = {in[0], tg_module_get_parameter(self, s->book ? "scale" : "weight")};
    return apply_layer(tp, self, "rms_norm", 2, in2, s->eps);
}

static int rms_norm_extra_repr(const tg_module *self, char *buf, size_t size)
{
    const rms_norm_state *s = tg_module_state_const(self);
    if (s->book) return size ? (buf[0] = 0) : 0;
    return snprintf(buf, size, "(%lld,), eps=%g, elementwise_affine=True", (long long)s->dim, s->eps);
}

static const tg_module_type rms_norm_type = {.name = "RMSNorm", .forward = rms_norm_forward, .extra_repr = rms_norm_extra_repr};

static tg_module *rms_norm_new(tg_tape *tp, int64_t dim, double eps, bool book)
{
    if (!tg__check_size("RMSNorm", "dim", dim)) return NULL;
    if (!(eps >= 0)) return tg_error("RMSNorm: eps must be >= 0, got %g", eps);
    tg_module *m = tg_module_new(tp, &rms_norm_type, sizeof(rms_norm_state));
    if (!m) return NULL;
    *(rms_norm_state *)tg_module_state(m) = (rms_norm_state){dim, eps, book};
    int64_t shape[1] = {dim};
    tg_tensor *w = tg_parameter_new(tp, TG_F32, 1, shape);
    if (!w) return NULL;
    tg_k_fill(w, 1.0); /* torch.ones(dim) */
    return tg_module_register_parameter(m, book ? "scale" : "weight", w) == TG_OK ? m : NULL;
}

tg_module *tg_rms_norm_new(tg_tape *tp, int64_t dim, double eps) { return rms_norm_new(tp, dim, eps, false); }
tg_module *tg__rms_norm_scale_new(tg_tape *tp, int64_t dim, double eps) { return rms_norm_new(tp, dim, eps, true); }

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

static bool check_cfg(const tg_decoder_config *cfg) { return tg_decoder_config_check(cfg) == TG_OK; }

static tg_module *feed_forward_new(tg_tape *tp, const tg_decoder_config *cfg)
{
    int64_t d = cfg->emb_dim, h = tg__gpt_hidden_dim(cfg);
    tg_module *m = tg_module_new(tp, &feed_forward_type, 0);
    if (!m) return NULL;
    tg_module *up = tg_linear_new(tp, d, h, true);
    tg_module *act = up ? tg_gelu_new(tp) : NULL;
    tg_module *down = act ? tg_linear_new(tp, h, d, true) : NULL;
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

tg_module *tg_feed_forward_new(tg_tape *tp, const tg_gpt_config *gpt)
{
    tg_decoder_config cfg = tg_decoder_config_from_gpt(gpt);
    return gpt && check_cfg(&cfg) ? feed_forward_new(tp, &cfg) : NULL;
}

static tg_module *transformer_block_new(tg_tape *tp, const tg_decoder_config *cfg)
{
    tg_module *m = tg_module_new(tp, &block_type, 0);
    if (!m) return NULL;
    int64_t d = cfg->emb_dim;
    tg_attention_config att = {.d_in = d, .d_out = d, .context_length = cfg->context_length,
                               .num_heads = cfg->n_heads, .dropout = cfg->drop_rate, .qkv_bias = cfg->qkv_bias};
    if (tg_module_add_module(m, "att", tg_mha_new_config(tp, att)) != TG_OK ||
        tg_module_add_module(m, "ff", feed_forward_new(tp, cfg)) != TG_OK ||
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
    tg_decoder_config cfg;
    int64_t current_pos;
    bool last_logits_only;
    bool hidden_only; /* set by tg_gpt_lm_loss: the output stops before out_head */
    bool recompute_head; /* tg_gpt_set_recompute: the chunked head's logits computed again in backward */
    tg__rope rope; /* Qwen3 and Llama 3: the cos and sin tables */
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
    const tg_decoder_config *c = &s->cfg;
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
    if (has_rope(c)) { /* tok_emb, the blocks with the cos and sin of their positions, final_norm, out_head */
        tg_tensor *x = tg_module_forward(tp, tg_module_get_submodule(self, "tok_emb"), in[0]);
        x = x ? tg__rope_decoder_blocks(tp, self, &s->rope, x, p0) : NULL;
        if (x && s->last_logits_only) x = tg_narrow(tp, x, 1, T - 1, 1);
        x = x ? tg_module_forward(tp, tg_module_get_submodule(self, "final_norm"), x) : NULL;
        if (!s->hidden_only) x = x ? tg_module_forward(tp, tg_module_get_submodule(self, "out_head"), x) : NULL;
        if (x && tg_module_kv_cache_enabled(self)) s->current_pos = p0 + T;
        return x;
    }
    tg_tensor *tok = tg_module_forward(tp, tg_module_get_submodule(self, "tok_emb"), in[0]);
    tg_tensor *pos = tok ? tg_module_forward(tp, tg_module_get_submodule(self, "pos_emb"),
                                             tg_arange(tp, TG_I64, (double)p0, (double)(p0 + T), 1))
                         : NULL;
    tg_tensor *x = tg_add(tp, tok, pos); /* x = tok_embeds + pos_embeds */
    static const char *const chain[] = {"drop_emb", "trf_blocks", "final_norm", "out_head"};
    tg_module *last_block = s->last_logits_only ? last_position_block(tp, self) : NULL;
    size_t nchain = sizeof chain / sizeof chain[0] - (s->hidden_only ? 1 : 0);
    for (size_t i = 0; x && i < nchain; i++) {
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

/* One decoder, three names: the book's classes print as they are called. */
static const tg_module_type gpt_type = {.name = "GPTModel", .forward = gpt_forward, .reset_cache = gpt_reset_cache};
static const tg_module_type qwen3_type = {.name = "Qwen3Model", .forward = gpt_forward, .reset_cache = gpt_reset_cache};
static const tg_module_type llama3_type = {.name = "Llama3Model", .forward = gpt_forward, .reset_cache = gpt_reset_cache};

static bool is_decoder(const tg_module *m)
{
    const tg_module_type *t = m ? tg_module_get_type(m) : NULL;
    return t == &gpt_type || t == &qwen3_type || t == &llama3_type;
}

/* out_head.weight = tok_emb.weight, as a checkpoint without lm_head ties them */
static int tie_head(tg_module *m)
{
    tg_module *head = tg_module_get_submodule(m, "out_head");
    tg_tensor *w = tg_module_get_parameter(tg_module_get_submodule(m, "tok_emb"), "weight");
    return head && w ? tg_module_register_parameter(head, "weight", w) : TG_ENOMEM;
}

tg_module *tg_transformer_block_new(tg_tape *tp, const tg_gpt_config *gpt)
{
    tg_decoder_config cfg = tg_decoder_config_from_gpt(gpt);
    return gpt && check_cfg(&cfg) ? transformer_block_new(tp, &cfg) : NULL;
}

tg_module *tg_gpt_new(tg_tape *tp, const tg_gpt_config *gpt)
{
    if (!gpt) return tg_error("GPTModel: NULL configuration");
    tg_decoder_config cfg = tg_decoder_config_from_gpt(gpt);
    return tg_decoder_new(tp, &cfg);
}

tg_module *tg_decoder_new(tg_tape *tp, const tg_decoder_config *cfg)
{
    if (!check_cfg(cfg)) return NULL;
    const tg_module_type *type = cfg->family == TG_GPT_FAMILY_QWEN3    ? &qwen3_type
                                 : cfg->family == TG_GPT_FAMILY_LLAMA3 ? &llama3_type
                                                                       : &gpt_type;
    tg_module *m = tg_module_new(tp, type, sizeof(gpt_state));
    if (!m) return NULL;
    gpt_state *s = tg_module_state(m);
    s->cfg = *cfg;
    if (has_rope(cfg)) {
        s->rope = (tg__rope){.head_dim = tg__gpt_head_dim(cfg), .context_length = cfg->context_length,
                             .base = cfg->rope_base > 0 ? cfg->rope_base : 10000.0, .freq = cfg->rope_freq};
        if (tg__rope_decoder_build(tp, m, cfg) != TG_OK) return NULL;
        return cfg->tie_head && tie_head(m) != TG_OK ? NULL : m;
    }
    const int64_t d = cfg->emb_dim;
    if (tg_module_add_module(m, "tok_emb", tg_embedding_new(tp, cfg->vocab_size, d)) != TG_OK ||
        tg_module_add_module(m, "pos_emb", tg_embedding_new(tp, cfg->context_length, d)) != TG_OK ||
        tg_module_add_module(m, "drop_emb", tg_dropout_new(tp, cfg->drop_rate)) != TG_OK)
        return NULL;
    tg_module *blocks = tg_sequential_new(tp, 0, NULL);
    if (tg_module_add_module(m, "trf_blocks", blocks) != TG_OK) return NULL;
    for (int64_t i = 0; i < cfg->n_layers; i++)
        if (tg_module_append(blocks, transformer_block_new(tp, cfg)) != TG_OK) return NULL;
    if (tg_module_add_module(m, "final_norm", tg_layer_norm_new(tp, d)) != TG_OK ||
        tg_module_add_module(m, "out_head", tg_linear_new(tp, d, cfg->vocab_size, false)) != TG_OK)
        return NULL;
    return cfg->tie_head && tie_head(m) != TG_OK ? NULL : m;
}

int tg_gpt_set_recompute(tg_module *model, bool on)
{
    tg_decoder_config cfg;
    int st = tg_decoder_get_config(model, &cfg);
    tg_module *blocks = st == TG_OK ? tg__entry_get(&model->children, "trf_blocks") : NULL;
    if (st == TG_OK && !blocks) st = tg_error_status(TG_EINVAL, "gpt_set_recompute: the model has no trf_blocks");
    for (int i = 0; st == TG_OK && i < tg_module_num_children(blocks); i++)
        st = tg_module_set_recompute(tg_module_child(blocks, i), on);
    if (st == TG_OK) ((gpt_state *)tg_module_state(model))->recompute_head = on;
    return st;
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
           (h->w->dtype == TG_F32 || (h->w->dtype == TG_BF16 && !h->w->requires_grad));
}

tg_tensor *tg_gpt_lm_loss(tg_tape *tp, tg_module *gpt, tg_tensor *ids, const tg_tensor *targets, int64_t ignore_index)
{
    if (!is_decoder(gpt)) return tg_error("gpt_lm_loss: the model is not a GPTModel, Qwen3Model or Llama3Model");
    if (!tp) return tg_error("gpt_lm_loss: NULL tape");
    if (!ids || !targets) return tg__error_null_input("gpt_lm_loss");
    gpt_state *s = tg_module_state(gpt);
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
        tg_error("GPTModel: out_head has no 2-D weight to tell its output size");
        return -1;
    }
    return w->shape[0];
}

int tg_gpt_get_config(const tg_module *gpt, tg_gpt_config *out)
{
    tg_decoder_config c;
    int st = out ? tg_decoder_get_config(gpt, &c) : tg_error_status(TG_EINVAL, "gpt_get_config: NULL argument");
    if (st == TG_OK) *out = gpt_of(&c);
    return st;
}

int tg_decoder_get_config(const tg_module *gpt, tg_decoder_config *out)
{
    if (!gpt || !out) return tg_error_status(TG_EINVAL, "gpt_get_config: NULL argument");
    if (!is_decoder(gpt))
        return tg_error_status(TG_EINVAL, "gpt_get_config: module is a %s, not a GPTModel, Qwen3Model or Llama3Model",
                               tg_module_type_name(gpt));
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
