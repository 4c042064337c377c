/* Chapter 3 of "Build a Large Language Model (From Scratch)", cell by cell, in
 * C: the same numbers as the notebook prints them (dropout masks aside, which
 * come from tapegrad's own generator).
 *
 *   build/examples/chapter3
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <tapegrad.h>

/* Stops at the first failed step: every op returns NULL on error, so one
 * check per printed tensor is enough to report where it went wrong. */
static void show(const char *label, const tg_tensor *t)
{
    if (!t) {
        fprintf(stderr, "chapter3: %s: %s\n", label, tg_last_error());
        exit(1);
    }
    if (label && *label) printf("%s\n", label);
    tg_print(stdout, t);
}

static void show_shape(const char *label, const tg_tensor *t)
{
    if (!t) show(label, t);
    printf("%storch.Size([", label);
    for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
    printf("])\n");
}

static const float book[6 * 3] = {
    0.43f, 0.15f, 0.89f, /* Your     (x^1) */
    0.55f, 0.87f, 0.66f, /* journey  (x^2) */
    0.57f, 0.85f, 0.64f, /* starts   (x^3) */
    0.22f, 0.58f, 0.33f, /* with     (x^4) */
    0.77f, 0.25f, 0.10f, /* one      (x^5) */
    0.05f, 0.80f, 0.55f, /* step     (x^6) */
};

int main(void)
{
    tg_tape *tp = tg_tape_new();
    if (!tp) return 1;
    int64_t s63[2] = {6, 3}, s66[2] = {6, 6};
    tg_tensor *inputs = tg_from_f32(tp, 2, s63, book);

    /* ---- 3.3.1 A simple self-attention mechanism without trainable weights */
    printf("== 3.3.1 simplified self-attention, query x^2 ==\n");
    tg_tensor *query = tg_select(tp, inputs, 0, 1);
    tg_tensor *attn_scores_2 = tg_matmul(tp, inputs, query); /* dot(x_i, query) for every i */
    show("", attn_scores_2);
    tg_tensor *attn_weights_2_tmp = tg_div(tp, attn_scores_2, tg_sum(tp, attn_scores_2));
    show("Attention weights:", attn_weights_2_tmp);
    printf("Sum: ");
    show("", tg_sum(tp, attn_weights_2_tmp));
    /* softmax_naive: exp(x) / exp(x).sum() */
    tg_tensor *e = tg_exp(tp, attn_scores_2);
    tg_tensor *attn_weights_2_naive = tg_div(tp, e, tg_sum(tp, e));
    show("Attention weights:", attn_weights_2_naive);
    tg_tensor *attn_weights_2 = tg_softmax(tp, attn_scores_2, 0);
    show("Attention weights:", attn_weights_2);
    printf("Sum: ");
    show("", tg_sum(tp, attn_weights_2));
    tg_tensor *context_vec_2 = tg_matmul(tp, attn_weights_2, inputs); /* sum_i a_i x_i */
    show("", context_vec_2);

    /* ---- 3.3.2 Computing attention weights for all input tokens */
    printf("\n== 3.3.2 all tokens ==\n");
    tg_tensor *attn_scores = tg_matmul(tp, inputs, tg_t(tp, inputs));
    show("", attn_scores);
    tg_tensor *attn_weights = tg_softmax(tp, attn_scores, -1);
    show("", attn_weights);
    int last = -1;
    printf("All row sums: ");
    show("", tg_sum_dims(tp, attn_weights, 1, &last, false));
    tg_tensor *all_context_vecs = tg_matmul(tp, attn_weights, inputs);
    show("", all_context_vecs);
    printf("Previous 2nd context vector: ");
    show("", context_vec_2);

    /* ---- 3.4.1 Computing the attention weights step by step */
    printf("\n== 3.4.1 trainable weights, step by step ==\n");
    tg_tensor *x_2 = tg_select(tp, inputs, 0, 1);
    int64_t d_in = 3, d_out = 2, s32[2] = {3, 2};
    tg_manual_seed(123);
    /* torch.nn.Parameter(torch.rand(d_in, d_out), requires_grad=False), in this order */
    tg_tensor *W_query = tg_rand(tp, TG_F32, 2, s32, NULL);
    tg_tensor *W_key = tg_rand(tp, TG_F32, 2, s32, NULL);
    tg_tensor *W_value = tg_rand(tp, TG_F32, 2, s32, NULL);
    tg_tensor *query_2 = tg_matmul(tp, x_2, W_query);
    show("", query_2);
    tg_tensor *keys = tg_matmul(tp, inputs, W_key);
    tg_tensor *values = tg_matmul(tp, inputs, W_value);
    show_shape("keys.shape: ", keys);
    show_shape("values.shape: ", values);
    tg_tensor *keys_2 = tg_select(tp, keys, 0, 1);
    show("", tg_matmul(tp, query_2, keys_2)); /* attn_score_22 */
    attn_scores_2 = tg_matmul(tp, query_2, tg_t(tp, keys));
    show("", attn_scores_2);
    double d_k = (double)keys->shape[1];
    attn_weights_2 = tg_softmax(tp, tg_div_scalar(tp, attn_scores_2, sqrt(d_k)), -1);
    show("", attn_weights_2);
    show("", tg_matmul(tp, attn_weights_2, values));

    /* ---- 3.4.2 A compact self-attention Python class */
    printf("\n== 3.4.2 SelfAttention_v1 (seed 123), SelfAttention_v2 (seed 789) ==\n");
    tg_manual_seed(123);
    tg_module *sa_v1 = tg_self_attention_v1_new(tp, d_in, d_out);
    show("", sa_v1 ? tg_module_forward(tp, sa_v1, inputs) : NULL);
    tg_manual_seed(789);
    tg_module *sa_v2 = tg_self_attention_v2_new(tp, d_in, d_out, false);
    show("", sa_v2 ? tg_module_forward(tp, sa_v2, inputs) : NULL);

    /* ---- 3.5.1 Applying a causal attention mask */
    printf("\n== 3.5.1 causal mask ==\n");
    tg_tensor *queries = tg_module_forward(tp, tg_module_get_submodule(sa_v2, "W_query"), inputs); /* W_query */
    keys = tg_module_forward(tp, tg_module_get_submodule(sa_v2, "W_key"), inputs);
    attn_scores = tg_matmul(tp, queries, tg_t(tp, keys));
    attn_weights = tg_softmax(tp, tg_div_scalar(tp, attn_scores, sqrt((double)keys->shape[1])), -1);
    show("", attn_weights);
    int64_t context_length = attn_scores->shape[0];
    int64_t sctx[2] = {context_length, context_length};
    tg_tensor *mask_simple = tg_tril(tp, tg_ones(tp, TG_F32, 2, sctx), 0);
    show("", mask_simple);
    tg_tensor *masked_simple = tg_mul(tp, attn_weights, mask_simple);
    show("", masked_simple);
    int dim1 = -1;
    tg_tensor *row_sums = tg_sum_dims(tp, masked_simple, 1, &dim1, true);
    show("", tg_div(tp, masked_simple, row_sums));
    /* the efficient way: -inf above the diagonal, then softmax. masked_fill
     * returns a new tensor; the result must be used (a notebook bug drops it). */
    tg_tensor *mask = tg_triu(tp, tg_ones(tp, TG_F32, 2, sctx), 1);
    tg_tensor *masked = tg_masked_fill(tp, attn_scores, tg_compare_scalar(tp, mask, 0.0, TG_CMP_NE), -INFINITY);
    show("", masked);
    attn_weights = tg_softmax(tp, tg_div_scalar(tp, masked, sqrt((double)keys->shape[1])), -1);
    show("", attn_weights);

    /* ---- 3.5.2 Masking additional attention weights with dropout */
    printf("\n== 3.5.2 dropout 0.5 (masks from tapegrad's generator) ==\n");
    tg_manual_seed(123);
    show("", tg_dropout(tp, tg_ones(tp, TG_F32, 2, s66), 0.5, NULL));
    tg_manual_seed(123);
    show("", tg_dropout(tp, attn_weights, 0.5, NULL));

    /* ---- 3.5.3 Implementing a compact causal self-attention class */
    printf("\n== 3.5.3 batching, CausalAttention (seed 123) ==\n");
    tg_tensor *pair[2] = {inputs, inputs};
    tg_tensor *batch = tg_stack(tp, 2, pair, 0);
    show_shape("", batch);
    tg_manual_seed(123);
    context_length = batch ? batch->shape[1] : 0;
    tg_module *ca = tg_causal_attention_new_config(
        tp, (tg_attention_config){.d_in = d_in, .d_out = d_out, .context_length = context_length});
    tg_tensor *context_vecs = ca ? tg_module_forward(tp, ca, batch) : NULL;
    show("", context_vecs);
    show_shape("context_vecs.shape: ", context_vecs);

    /* ---- 3.6.1 Stacking multiple single-head attention layers */
    printf("\n== 3.6.1 MultiHeadAttentionWrapper (seed 123, 2 heads) ==\n");
    tg_manual_seed(123);
    tg_module *mhaw = tg_mha_wrapper_new_config(
        tp, (tg_attention_config){.d_in = d_in, .d_out = 2, .context_length = context_length, .num_heads = 2});
    context_vecs = mhaw ? tg_module_forward(tp, mhaw, batch) : NULL;
    show("", context_vecs);
    show_shape("context_vecs.shape: ", context_vecs);

    /* ---- 3.6.2 Implementing multi-head attention with weight splits */
    printf("\n== 3.6.2 MultiHeadAttention (seed 123, 2 heads) ==\n");
    tg_manual_seed(123);
    tg_module *mha = tg_mha_new_config(
        tp, (tg_attention_config){.d_in = d_in, .d_out = 2, .context_length = context_length, .num_heads = 2});
    context_vecs = mha ? tg_module_forward(tp, mha, batch) : NULL;
    show("", context_vecs);
    show_shape("context_vecs.shape: ", context_vecs);

    tg_tape_free(tp);
    return 0;
}
