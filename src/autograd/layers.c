/* The layer table: every layer with more than one way to compute it, its
 * variants side by side (autograd.h, tg_layer; README.md, "Numerics").
 *
 *   composed  the book's forward as recorded ops: the oracle, and the graph
 *             the unfused modules record (PyTorch's node names);
 *   exact     one node with the composed graph's bits (EXACT numerics);
 *   fast      one node free of PyTorch's call shapes (FAST numerics);
 *   bf16      the slot for bf16 kernels; NULL runs the fast op (else the
 *             exact one) with its products under the bf16 GEMM backend
 *             (src/tensor/gemm.c, src/tensor/bf16.c).
 *
 * A new layer is one entry here, its op (op_<name>.c, one row of ops.def)
 * and its row in tests/test_layers.c, which checks every entry: exact
 * bit-equal to composed (or within tol where the entry says its exact op
 * follows PyTorch's own formulas instead), fast within tol, each variant
 * gradchecked in float64. */
#include "autograd_internal.h"

#include <math.h>
#include <string.h>

/* ---- attention: q, k, v (..., T, hd), mask (T, T) bool ------------------------------------------- */

/* s = q @ k.transpose(-2, -1); s.masked_fill_(mask, -inf);
 * w = softmax(s / scale, dim=-1) (no_divide: softmax(s)); w = dropout(w); return w @ v */
static tg_tensor *attention_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n;
    int nd = in[1]->ndim;
    tg_tensor *s = tg_matmul(tp, in[0], tg_transpose(tp, in[1], nd - 2, nd - 1));
    s = tg_masked_fill(tp, s, in[3], -INFINITY);
    tg_tensor *w = tg_softmax(tp, a->no_divide ? s : tg_div_scalar(tp, s, a->scale), -1);
    if (a->dropout > 0) w = tg_dropout(tp, w, a->dropout, a->gen);
    return tg_matmul(tp, w, in[2]);
}

static tg_tensor *attention_exact(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n;
    int nd = in[1]->ndim;
    if (nd < 3) return attention_composed(tp, n, in, a);
    tg_tensor *kT = tg_transpose(tp, in[1], nd - 2, nd - 1);
    /* x / 1 is x, in forward and backward: the undivided scores' bits */
    return tg__attention(tp, in[0], kT, in[2], in[3], a->no_divide ? 1.0 : a->scale, a->dropout, a->gen,
                         a->heads_inner);
}

/* the flash-style kernel: all heads in one threaded node, no (T, T) tensor
 * kept; it takes the causal mask, with or without a sliding window */
static tg_tensor *attention_fast(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    const tg_tensor *q = in[0], *mask = in[3];
    bool ok = q && mask && mask->dtype == TG_BOOL && mask->ndim == 2 && q->ndim >= 2 && in[1] && in[2] &&
              tg_same_shape(q, in[1]) && tg_same_shape(q, in[2]) && mask->shape[0] == q->shape[q->ndim - 2] &&
              mask->shape[1] == mask->shape[0] && (a->no_divide || a->scale > 0) && a->window >= 0 &&
              tg__mask_is_causal(mask, a->window);
    if (!ok) return attention_exact(tp, n, in, a);
    return tg__sdpa(tp, in[0], in[1], in[2], true, a->window, a->no_divide ? 1.0 : 1.0 / a->scale, a->dropout, a->gen);
}

/* ---- LayerNorm: x (..., D), scale (D), shift (D) -------------------------------------------------- */

/* mean = x.mean(dim=-1, keepdim=True); var = x.var(dim=-1, keepdim=True, unbiased=False)
 * norm_x = (x - mean) / torch.sqrt(var + self.eps); return self.scale * norm_x + self.shift
 * (the nodes made in Python's order: backward's schedule follows it) */
static tg_tensor *layer_norm_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n;
    static const int last[1] = {-1};
    tg_tensor *x = in[0];
    tg_tensor *mean = tg_mean_dims(tp, x, 1, last, true);
    tg_tensor *var = tg_var(tp, x, -1, false, true);
    tg_tensor *centered = tg_sub(tp, x, mean);
    tg_tensor *norm = tg_div(tp, centered, tg_sqrt(tp, tg_add_scalar(tp, var, a->eps)));
    return tg_add(tp, tg_mul(tp, in[1], norm), in[2]);
}

static tg_tensor *layer_norm_exact(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n;
    return tg_layer_norm(tp, in[0], in[1], in[2], a->eps);
}

/* ---- GELU (the book's tanh form): x ----------------------------------------------------------------- */

/* 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))
 * torch.tensor(2.0 / torch.pi) is float32, and so is its sqrt, whatever x's dtype. */
static tg_tensor *gelu_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    tg_tensor *x = in[0];
    const double c = (double)sqrtf((float)(2.0 / 3.141592653589793));
    tg_tensor *half = tg_mul_scalar(tp, x, 0.5); /* Python makes 0.5 * x first */
    tg_tensor *inner = tg_add(tp, x, tg_mul_scalar(tp, tg_pow_scalar(tp, x, 3.0), 0.044715));
    tg_tensor *t = tg_add_scalar(tp, tg_tanh(tp, tg_mul_scalar(tp, inner, c)), 1.0);
    return tg_mul(tp, half, t);
}

static tg_tensor *gelu_exact(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    return tg_gelu(tp, in[0]);
}

/* An exact op run under FAST: the kernels it calls choose their FAST form
 * (under BF16 too, which keeps its bf16 products). */
static tg_tensor *under_fast(tg_layer_fn exact, tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    tg_numerics cur = tg_tape_numerics(tp);
    tg_numerics prev = tg__tape_enter(tp, cur == TG_NUMERICS_BF16 ? cur : TG_NUMERICS_FAST);
    tg_tensor *y = exact(tp, n, in, a);
    tg__tape_leave(tp, prev);
    return y;
}

/* the same op; under FAST its float32 kernels take a polynomial tanh
 * (src/tensor/kernels.c, gelu_tanh) where PyTorch's takes SLEEF's */
static tg_tensor *gelu_fast(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    return under_fast(gelu_exact, tp, n, in, a);
}

/* ---- FeedForward: x (..., d), W1 (h, d), b1 (h), W2 (d, h), b2 (d) ----------------------------------- */

/* nn.Sequential(Linear(d, h), GELU(), Linear(h, d)) */
static tg_tensor *feed_forward_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    tg_tensor *h = tg_linear(tp, in[0], in[1], in[2]);
    h = h ? gelu_composed(tp, n, &h, a) : NULL;
    return tg_linear(tp, h, in[3], in[4]);
}

static tg_tensor *feed_forward_exact(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    bool bf16 = false; /* frozen bf16 or q8_0 weights: the composed Linear layers read them */
    for (int i = 1; i < n; i++) bf16 |= in[i] && tg__is_compact(in[i]->dtype);
    if (!in[0] || !tg_is_contiguous(in[0]) || bf16) return feed_forward_composed(tp, n, in, a);
    return tg__feed_forward(tp, in[0], in[1], in[2], in[3], in[4]);
}

/* the same node under FAST: GELU's polynomial tanh */
static tg_tensor *feed_forward_fast(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    return under_fast(feed_forward_exact, tp, n, in, a);
}

/* ---- RMSNorm: x (..., D), weight (D) ------------------------------------------------------------ */

/* The book's RMSNorm (qwen3.py; nn.RMSNorm computes the same ops):
 *   variance = x.pow(2).mean(dim=-1, keepdim=True)
 *   norm_x = x * torch.rsqrt(variance + self.eps); return norm_x * self.scale */
static tg_tensor *rms_norm_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n;
    static const int last[1] = {-1};
    tg_tensor *variance = tg_mean_dims(tp, tg_pow_scalar(tp, in[0], 2.0), 1, last, true);
    tg_tensor *normed = tg_mul(tp, in[0], tg_rsqrt(tp, tg_add_scalar(tp, variance, a->eps)));
    return tg_mul(tp, normed, in[1]);
}

static tg_tensor *rms_norm_fast(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n;
    return tg_rms_norm(tp, in[0], in[1], a->eps);
}

/* ---- SiLU: x ------------------------------------------------------------------------------------ */

/* x * torch.sigmoid(x) written x / (1 + torch.exp(-x)) */
static tg_tensor *silu_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    return tg_div(tp, in[0], tg_add_scalar(tp, tg_exp(tp, tg_neg(tp, in[0])), 1.0));
}

static tg_tensor *silu_exact(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    return tg_silu(tp, in[0]);
}

/* ---- RoPE: x (..., T, hd), cos (T, hd), sin (T, hd) ------------------------------------------------- */

/* The book's apply_rope: x1 = x[..., :hd // 2]; x2 = x[..., hd // 2:]
 * rotated = torch.cat((-x2, x1), dim=-1); return (x * cos) + (rotated * sin) */
static tg_tensor *rope_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    tg_tensor *x = in[0];
    int64_t h2 = x->shape[x->ndim - 1] / 2;
    tg_tensor *x1 = tg_narrow(tp, x, x->ndim - 1, 0, h2), *x2 = tg_narrow(tp, x, x->ndim - 1, h2, h2);
    tg_tensor *parts[2] = {tg_neg(tp, x2), x1};
    tg_tensor *rotated = tg_cat(tp, 2, parts, -1);
    tg_tensor *xc = tg_mul(tp, x, in[1]);
    return tg_add(tp, xc, tg_mul(tp, rotated, in[2]));
}

static tg_tensor *rope_exact(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    return tg__rope(tp, in[0], in[1], in[2]);
}

/* ---- SwiGLU: x (..., d), W1 (h, d), W2 (h, d), W3 (d, h) ------------------------------------------- */

/* The book's FeedForward of qwen3.py / llama3.py (no biases):
 *   x_fc1 = self.fc1(x); x_fc2 = self.fc2(x)
 *   x = nn.functional.silu(x_fc1) * x_fc2; return self.fc3(x)
 * F.silu is one PyTorch op (SiluBackward0), so it is tg_silu here too. */
static tg_tensor *swiglu_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    tg_tensor *h1 = tg_linear(tp, in[0], in[1], NULL), *h2 = h1 ? tg_linear(tp, in[0], in[2], NULL) : NULL;
    return h2 ? tg_linear(tp, tg_mul(tp, tg_silu(tp, h1), h2), in[3], NULL) : NULL;
}

/* ---- GeGLU: x (..., d), W1 (h, d), W2 (h, d), W3 (d, h) -------------------------------------------- */

/* Gemma 3's FeedForward (the book's notebook; no biases):
 *   x = nn.functional.gelu(self.fc1(x), approximate="tanh") * self.fc2(x); return self.fc3(x)
 * F.gelu is one PyTorch op (GeluBackward0), tg_gelu_tanh here, with PyTorch's
 * tanh (EXACT) or the polynomial one (FAST). */
static tg_tensor *geglu_ops(tg_tape *tp, tg_tensor *const *in, tg_numerics gelu_nm)
{
    tg_tensor *h1 = tg_linear(tp, in[0], in[1], NULL), *h2 = h1 ? tg_linear(tp, in[0], in[2], NULL) : NULL;
    tg_numerics prev = tg__tape_enter(tp, gelu_nm);
    tg_tensor *g = h2 ? tg_gelu_tanh(tp, h1) : NULL;
    tg__tape_leave(tp, prev);
    return g ? tg_linear(tp, tg_mul(tp, g, h2), in[3], NULL) : NULL;
}

static tg_tensor *geglu_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    return geglu_ops(tp, in, TG_NUMERICS_EXACT);
}

/* the same ops, GELU's tanh the polynomial one */
static tg_tensor *geglu_fast(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    return geglu_ops(tp, in, TG_NUMERICS_FAST);
}

/* ---- the output head with its loss: x (N, d), W (V, d), target (N) int64 ------------------------------- */

/* F.cross_entropy(x @ W.T, target) as the book's calc_loss_batch (on the
 * flattened logits) */
static tg_tensor *head_loss_composed(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n, (void)a;
    return tg_cross_entropy(tp, tg_linear(tp, in[0], in[1], NULL), in[2], TG_REDUCE_MEAN);
}

static tg_tensor *head_loss_chunked(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    (void)n;
    return tg__linear_cross_entropy(tp, in[0], in[1], NULL, NULL, NULL, in[2], TG_REDUCE_MEAN, TG_IGNORE_INDEX,
                                    a->chunk_rows, false);
}

/* the logits a chunk of rows at a time, their gradient made in forward */
static tg_tensor *head_loss_fast(tg_tape *tp, int n, tg_tensor *const *in, const tg_layer_args *a)
{
    return under_fast(head_loss_chunked, tp, n, in, a);
}

/* ---- the table -------------------------------------------------------------------------------- */

static const tg_layer layers[] = {
    {"attention", "q, k, v (..., T, hd), mask (T, T) bool (true = masked)", 4, attention_composed,
     attention_exact, attention_fast, NULL, 2e-5, true},
    {"layer_norm", "x (..., D), scale (D), shift (D)", 3, layer_norm_composed, layer_norm_exact, NULL, NULL, 0,
     true},
    {"gelu", "x", 1, gelu_composed, gelu_exact, gelu_fast, NULL, 1e-6, true},
    {"feed_forward", "x (..., d), W1 (h, d), b1 (h), W2 (d, h), b2 (d)", 5, feed_forward_composed,
     feed_forward_exact, feed_forward_fast, NULL, 2e-6, true},
    {"rms_norm", "x (..., D), weight (D)", 2, rms_norm_composed, NULL, rms_norm_fast, NULL, 2e-6, true},
    {"silu", "x", 1, silu_composed, silu_exact, NULL, NULL, 2e-6, false},
    {"rope", "x (..., T, hd), cos (T, hd), sin (T, hd)", 3, rope_composed, rope_exact, NULL, NULL, 0, true},
    {"swiglu", "x (..., d), W1 (h, d), W2 (h, d), W3 (d, h)", 4, swiglu_composed, NULL, NULL, NULL, 0, true},
    {"geglu", "x (..., d), W1 (h, d), W2 (h, d), W3 (d, h)", 4, geglu_composed, NULL, geglu_fast, NULL, 1e-6, true},
    {"linear_cross_entropy", "x (N, d), W (V, d), target (N) int64", 3, head_loss_composed, NULL, head_loss_fast,
     NULL, 2e-6, true},
};
enum { NLAYERS = (int)(sizeof layers / sizeof layers[0]) };

int tg_layer_count(void) { return NLAYERS; }

const tg_layer *tg_layer_get(int i)
{
    if (i < 0 || i >= NLAYERS) return tg_error("layer_get: index %d outside [0, %d)", i, NLAYERS);
    return &layers[i];
}

const tg_layer *tg_layer_find(const char *name)
{
    for (int i = 0; name && i < NLAYERS; i++)
        if (!strcmp(layers[i].name, name)) return &layers[i];
    return tg_error("layer_find: no layer named '%.60s'", name ? name : "(null)");
}

tg_tensor *tg_layer_apply(tg_tape *tp, const tg_layer *layer, bool fused, tg_numerics numerics, int n,
                          tg_tensor *const *in, const tg_layer_args *a)
{
    if (!layer) return tg_error("layer_apply: NULL layer");
    const char *name = layer->name;
    if (!tp) return tg_error("%s: NULL tape", name);
    if (!a) return tg_error("%s: NULL arguments", name);
    if (n != layer->nin || !in) return tg_error("%s: expected %d inputs (%s), got %d", name, layer->nin, layer->inputs, n);
    for (int i = 0; i < n; i++)
        if (!in[i]) return tg__error_null_input(name);
    if (!strcmp(tg_numerics_name(numerics), "?"))
        return tg_error("%s: %d is not a tg_numerics value", name, (int)numerics);
    tg_layer_fn fn = layer->composed;
    if (fused) {
        tg_layer_fn exact = layer->exact ? layer->exact : layer->composed;
        fn = numerics == TG_NUMERICS_FAST ? (layer->fast ? layer->fast : exact)
             : numerics == TG_NUMERICS_BF16 ? (layer->bf16 ? layer->bf16 : layer->fast ? layer->fast : exact)
                                           : exact;
    }
    tg_numerics prev = tg__tape_enter(tp, numerics);
    tg_tensor *y = fn(tp, n, in, a);
    tg__tape_leave(tp, prev);
    return y;
}
