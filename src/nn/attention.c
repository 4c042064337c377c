/* The attention modules of chapter 3, forward exactly as the book writes them
 * (SPEC.md), including the causal mask buffer PyTorch keeps in state_dict. */
#include "nn_internal.h"

#include <math.h>

static tg_module *linear_child(tg_tape *tp, tg_module *m, const char *name, int64_t in, int64_t out, bool bias)
{
    tg_module *c = tg_linear_new(tp, in, out, bias);
    return tg__module_add_child(m, name, c) ? c : NULL;
}

/* W_query, W_key, W_value as Linear(d_in, d_out, bias), in that order. */
static bool qkv_linears(tg_tape *tp, tg_module *m, bool bias)
{
    return linear_child(tp, m, "W_query", m->d_in, m->d_out, bias) &&
           linear_child(tp, m, "W_key", m->d_in, m->d_out, bias) &&
           linear_child(tp, m, "W_value", m->d_in, m->d_out, bias);
}

static tg_module *attention_new(tg_tape *tp, tg_module_kind kind, const char *name, int64_t d_in, int64_t d_out)
{
    if (!tg__check_size(name, "d_in", d_in) || !tg__check_size(name, "d_out", d_out)) return NULL;
    tg_module *m = tg__module_new(tp, kind, name);
    if (!m) return NULL;
    m->d_in = d_in;
    m->d_out = d_out;
    return m;
}

tg_module *tg_self_attention_v1_new(tg_tape *tp, int64_t d_in, int64_t d_out)
{
    tg_module *m = attention_new(tp, TG_MODULE_SA_V1, "SelfAttention_v1", d_in, d_out);
    if (!m) return NULL;
    int64_t shape[2] = {d_in, d_out};
    static const char *names[3] = {"W_query", "W_key", "W_value"};
    for (int i = 0; i < 3; i++) {
        /* nn.Parameter(torch.rand(d_in, d_out)) */
        tg_tensor *w = tg_parameter_new(tp, TG_F32, 2, shape);
        if (!w || tg_uniform_(w, 0.0, 1.0, NULL) != TG_OK || !tg__module_add_param(m, names[i], w)) return NULL;
    }
    return m;
}

tg_module *tg_self_attention_v2_new(tg_tape *tp, int64_t d_in, int64_t d_out, bool qkv_bias)
{
    tg_module *m = attention_new(tp, TG_MODULE_SA_V2, "SelfAttention_v2", d_in, d_out);
    if (!m) return NULL;
    m->qkv_bias = qkv_bias;
    return qkv_linears(tp, m, qkv_bias) ? m : NULL;
}

/* register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1)) */
static bool causal_mask(tg_tape *tp, tg_module *m)
{
    int64_t s[2] = {m->context_length, m->context_length};
    tg_tensor *ones = tg_ones(tp, TG_F32, 2, s);
    return ones && tg__module_add_buffer(m, "mask", tg_triu(tp, ones, 1));
}

static bool check_common(const char *name, int64_t context_length, double dropout)
{
    return tg__check_size(name, "context_length", context_length) && tg__check_dropout(name, dropout);
}

tg_module *tg_causal_attention_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length,
                                   double dropout, bool qkv_bias)
{
    if (!check_common("CausalAttention", context_length, dropout)) return NULL;
    if (context_length > 65536) return tg_error("CausalAttention: context_length %lld is too large", (long long)context_length);
    tg_module *m = attention_new(tp, TG_MODULE_CAUSAL, "CausalAttention", d_in, d_out);
    if (!m) return NULL;
    m->context_length = context_length;
    m->dropout = dropout;
    m->qkv_bias = qkv_bias;
    if (!qkv_linears(tp, m, qkv_bias)) return NULL;
    if (!tg__module_add_child(m, "dropout", tg_dropout_new(tp, dropout))) return NULL;
    return causal_mask(tp, m) ? m : NULL;
}

static const char *index_name(tg_tape *tp, int64_t i)
{
    char *s = tg_tape_alloc(tp, 24, false);
    if (s) snprintf(s, 24, "%lld", (long long)i);
    return s;
}

tg_module *tg_mha_wrapper_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                              int64_t num_heads, bool qkv_bias)
{
    const char *name = "MultiHeadAttentionWrapper";
    if (!check_common(name, context_length, dropout) || !tg__check_size(name, "num_heads", num_heads)) return NULL;
    if (num_heads > TG_MODULE_MAX_CHILDREN)
        return tg_error("%s: at most %d heads, got %lld", name, TG_MODULE_MAX_CHILDREN, (long long)num_heads);
    tg_module *m = attention_new(tp, TG_MODULE_MHA_WRAPPER, name, d_in, d_out);
    tg_module *list = m ? tg__module_new(tp, TG_MODULE_LIST, "ModuleList") : NULL;
    if (!list || !tg__module_add_child(m, "heads", list)) return NULL;
    m->context_length = context_length;
    m->dropout = dropout;
    m->num_heads = num_heads;
    m->qkv_bias = qkv_bias;
    for (int64_t h = 0; h < num_heads; h++) {
        tg_module *head = tg_causal_attention_new(tp, d_in, d_out, context_length, dropout, qkv_bias);
        if (!tg__module_add_child(list, index_name(tp, h), head)) return NULL;
    }
    return m;
}

tg_module *tg_mha_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                      int64_t num_heads, bool qkv_bias)
{
    const char *name = "MultiHeadAttention";
    if (!check_common(name, context_length, dropout) || !tg__check_size(name, "num_heads", num_heads)) return NULL;
    if (!tg__check_size(name, "d_out", d_out)) return NULL;
    if (d_out % num_heads != 0)
        return tg_error("%s: d_out (%lld) must be divisible by num_heads (%lld)", name, (long long)d_out,
                        (long long)num_heads);
    if (context_length > 65536) return tg_error("%s: context_length %lld is too large", name, (long long)context_length);
    tg_module *m = attention_new(tp, TG_MODULE_MHA, name, d_in, d_out);
    if (!m) return NULL;
    m->context_length = context_length;
    m->dropout = dropout;
    m->num_heads = num_heads;
    m->qkv_bias = qkv_bias;
    if (!qkv_linears(tp, m, qkv_bias)) return NULL;
    if (!linear_child(tp, m, "out_proj", d_out, d_out, true)) return NULL;
    if (!tg__module_add_child(m, "dropout", tg_dropout_new(tp, dropout))) return NULL;
    return causal_mask(tp, m) ? m : NULL;
}

/* ---- forward ---------------------------------------------------------------------------------- */

static bool check_input(const tg_module *m, const tg_tensor *x, int rank)
{
    char s[64];
    if (x->ndim != rank || x->shape[rank - 1] != m->d_in) {
        tg_error("%s: input must be %s with d_in=%lld, got %s", m->type_name,
                 rank == 2 ? "(tokens, d_in)" : "(batch, tokens, d_in)", (long long)m->d_in, tg_shape_str(x, s, 64));
        return false;
    }
    if (!tg__is_float(x->dtype)) {
        tg_error("%s: input must be float32 or float64, got %s", m->type_name, tg_dtype_name(x->dtype));
        return false;
    }
    if (m->context_length && x->shape[rank - 2] > m->context_length) {
        tg_error("%s: %lld tokens exceed context_length %lld", m->type_name, (long long)x->shape[rank - 2],
                 (long long)m->context_length);
        return false;
    }
    if (x->shape[rank - 2] == 0) {
        tg_error("%s: input has no tokens", m->type_name);
        return false;
    }
    return true;
}

/* mask.bool()[:T, :T] */
static tg_tensor *mask_bool(tg_tape *tp, tg_module *m, int64_t T)
{
    tg_tensor *mk = m->buffers[0];
    return tg_compare_scalar(tp, tg_narrow(tp, tg_narrow(tp, mk, 0, 0, T), 1, 0, T), 0.0, TG_CMP_NE);
}

/* The weights-and-context step every module shares:
 *   w = softmax(scores / d_k**0.5, dim=-1); w = dropout(w); return w @ v */
static tg_tensor *attend(tg_tape *tp, tg_module *dropout, tg_tensor *scores, tg_tensor *v, int64_t d_k)
{
    tg_tensor *w = tg_softmax(tp, tg_div_scalar(tp, scores, pow((double)d_k, 0.5)), -1);
    if (dropout) w = w ? tg_module_forward(tp, dropout, w) : NULL;
    return tg_matmul(tp, w, v);
}

/* keys.T: a permute in PyTorch (PermuteBackward0) */
static tg_tensor *keys_T(tg_tape *tp, tg_tensor *k)
{
    static const int perm[2] = {1, 0};
    return tg_permute(tp, k, perm);
}

static tg_tensor *sa_v1_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    /* keys = x @ W_key; queries = x @ W_query; values = x @ W_value */
    tg_tensor *k = tg_matmul(tp, x, m->params[1]);
    tg_tensor *q = tg_matmul(tp, x, m->params[0]);
    tg_tensor *v = tg_matmul(tp, x, m->params[2]);
    tg_tensor *s = tg_matmul(tp, q, keys_T(tp, k)); /* attn_scores = queries @ keys.T */
    return attend(tp, NULL, s, v, m->d_out);
}

static tg_tensor *sa_v2_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    tg_tensor *k = tg_module_forward(tp, m->children[1], x);
    tg_tensor *q = tg_module_forward(tp, m->children[0], x);
    tg_tensor *v = tg_module_forward(tp, m->children[2], x);
    tg_tensor *s = tg_matmul(tp, q, keys_T(tp, k));
    return attend(tp, NULL, s, v, m->d_out);
}

static tg_tensor *causal_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    int64_t T = x->shape[1];
    tg_tensor *k = tg_module_forward(tp, m->children[1], x); /* (b, T, d_out) */
    tg_tensor *q = tg_module_forward(tp, m->children[0], x);
    tg_tensor *v = tg_module_forward(tp, m->children[2], x);
    if (m->fused) /* one node, no (b, T, T) tensor kept for backward */
        return tg_scaled_dot_product_attention(tp, q, k, v, true, m->training ? m->dropout : 0.0, m->gen);
    tg_tensor *s = tg_matmul(tp, q, tg_transpose(tp, k, 1, 2)); /* (b, T, T) */
    s = tg_masked_fill(tp, s, mask_bool(tp, m, T), -INFINITY);
    return attend(tp, m->children[3], s, v, m->d_out);
}

static tg_tensor *wrapper_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    tg_module *heads = m->children[0];
    tg_tensor *outs[TG_MODULE_MAX_CHILDREN];
    for (int h = 0; h < heads->nchildren; h++) outs[h] = causal_forward(tp, heads->children[h], x);
    return tg_cat(tp, heads->nchildren, outs, -1); /* (b, T, num_heads * d_out) */
}

static tg_tensor *mha_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    int64_t b = x->shape[0], T = x->shape[1], h = m->num_heads, hd = m->d_out / m->num_heads;
    int64_t split[4] = {b, T, h, hd}, merged[3] = {b, T, m->d_out};
    tg_tensor *k = tg_module_forward(tp, m->children[1], x); /* (b, T, d_out) */
    tg_tensor *q = tg_module_forward(tp, m->children[0], x);
    tg_tensor *v = tg_module_forward(tp, m->children[2], x);
    k = tg_transpose(tp, tg_view(tp, k, 4, split), 1, 2); /* (b, h, T, hd) */
    q = tg_transpose(tp, tg_view(tp, q, 4, split), 1, 2);
    v = tg_transpose(tp, tg_view(tp, v, 4, split), 1, 2);
    tg_tensor *ctx;
    if (m->fused) {
        double p = m->training ? m->dropout : 0.0;
        ctx = tg_scaled_dot_product_attention(tp, q, k, v, true, p, m->gen);
    } else {
        tg_tensor *s = tg_matmul(tp, q, tg_transpose(tp, k, 2, 3)); /* (b, h, T, T) */
        s = tg_masked_fill(tp, s, mask_bool(tp, m, T), -INFINITY);
        ctx = attend(tp, m->children[4], s, v, hd);
    }
    ctx = tg_transpose(tp, ctx, 1, 2); /* (b, T, h, hd) */
    ctx = tg_view(tp, tg_contiguous(tp, ctx), 3, merged);
    return tg_module_forward(tp, m->children[3], ctx); /* out_proj */
}

tg_tensor *tg__attention_forward(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    switch (m->kind) {
    case TG_MODULE_SA_V1: return check_input(m, x, 2) ? sa_v1_forward(tp, m, x) : NULL;
    case TG_MODULE_SA_V2: return check_input(m, x, 2) ? sa_v2_forward(tp, m, x) : NULL;
    case TG_MODULE_CAUSAL: return check_input(m, x, 3) ? causal_forward(tp, m, x) : NULL;
    case TG_MODULE_MHA_WRAPPER: return check_input(m, x, 3) ? wrapper_forward(tp, m, x) : NULL;
    case TG_MODULE_MHA: return check_input(m, x, 3) ? mha_forward(tp, m, x) : NULL;
    default: return tg_error("%s: a container module has no forward", m->type_name);
    }
}
