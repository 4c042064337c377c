/* The decoder's layers that are not attention: the book's Embedding,
 * LayerNorm and GELU (chapter 4; tools/reference/gpt_book.py holds the
 * PyTorch originals), RMSNorm (the book's of qwen3.py and gemma3, and
 * nn.RMSNorm) and SiLU, each a module type written with the public module
 * API, with PyTorch's class names, parameter names, repr and init. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tapegrad/gpt.h"

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

tg_module *tg_layer_norm_new(tg_tape *tp, int64_t dim) { return tg__layer_norm_new_eps(tp, dim, 1e-5); }

tg_module *tg__layer_norm_new_eps(tg_tape *tp, int64_t dim, double eps)
{
    if (!tg__check_size("LayerNorm", "emb_dim", dim)) return NULL;
    if (!(eps >= 0)) return tg_error("LayerNorm: eps must be >= 0, got %g", eps);
    tg_module *m = tg_module_new(tp, &layer_norm_type, sizeof(layer_norm_state));
    if (!m) return NULL;
    *(layer_norm_state *)tg_module_state(m) = (layer_norm_state){dim, eps};
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

/* ---- RMSNorm and SiLU ------------------------------------------------------------------------ */

/* nn.RMSNorm (parameter "weight"), the book's RMSNorm of qwen3.py ("scale")
 * and of its Gemma 3 notebook ("scale", x_norm * (1 + scale), the scale
 * starting at zero): x * rsqrt(mean(x^2) + eps) * (offset + w) in float32. */
typedef struct {
    int64_t dim;
    double eps, offset;
    bool book; /* the parameter is "scale" and print(model) shows RMSNorm() */
} rms_norm_state;

static tg_tensor *rms_norm_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    const rms_norm_state *s = tg_module_state(self);
    if (!check_last_dim(self, in[0], s->dim)) return NULL;
    tg_tensor *w = tg_module_get_parameter(self, s->book ? "scale" : "weight");
    /* Gemma 3: (1.0 + self.scale.float()), one float32 op on the parameter */
    if (s->offset != 0) w = tg_add_scalar(tp, w, s->offset);
    tg_tensor *in2[2] = {in[0], w};
    return w ? apply_layer(tp, self, "rms_norm", 2, in2, s->eps) : NULL;
}

static int rms_norm_extra_repr(const tg_module *self, char *buf, size_t size)
{
    const rms_norm_state *s = tg_module_state_const(self);
    if (s->book) return size ? (buf[0] = 0) : 0;
    return snprintf(buf, size, "(%lld,), eps=%g, elementwise_affine=True", (long long)s->dim, s->eps);
}

static const tg_module_type rms_norm_type = {.name = "RMSNorm", .forward = rms_norm_forward, .extra_repr = rms_norm_extra_repr};

tg_module *tg__rms_norm_new_ex(tg_tape *tp, int64_t dim, double eps, double offset, bool book)
{
    if (!tg__check_size("RMSNorm", "dim", dim)) return NULL;
    if (!(eps >= 0)) return tg_error("RMSNorm: eps must be >= 0, got %g", eps);
    if (!isfinite(offset)) return tg_error("RMSNorm: the weight offset must be finite, got %g", offset);
    tg_module *m = tg_module_new(tp, &rms_norm_type, sizeof(rms_norm_state));
    if (!m) return NULL;
    *(rms_norm_state *)tg_module_state(m) = (rms_norm_state){dim, eps, offset, book};
    int64_t shape[1] = {dim};
    tg_tensor *w = tg_parameter_new(tp, TG_F32, 1, shape);
    if (!w) return NULL;
    tg_k_fill(w, 1.0 - offset); /* torch.ones(dim); Gemma 3's torch.zeros(emb_dim) */
    return tg_module_register_parameter(m, book ? "scale" : "weight", w) == TG_OK ? m : NULL;
}

tg_module *tg_rms_norm_new(tg_tape *tp, int64_t dim, double eps) { return tg__rms_norm_new_ex(tp, dim, eps, 0.0, false); }

bool tg__is_norm(const tg_module *m) { return m && (m->type == &rms_norm_type || m->type == &layer_norm_type); }

static tg_tensor *silu_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    return apply_layer(tp, self, "silu", 1, in, 0.0);
}

static const tg_module_type silu_type = {.name = "SiLU", .forward = silu_forward};

tg_module *tg_silu_new(tg_tape *tp) { return tg_module_new(tp, &silu_type, 0); }

