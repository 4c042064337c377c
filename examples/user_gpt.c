/* A GPT of your own modules, generating with the KV cache.
 *
 * The book's GPTModel with every LayerNorm replaced by an RMSNorm written
 * here and every Linear (the attention's W_query, W_key, W_value and
 * out_proj, the FeedForward's two layers, out_head) wrapped by appendix E's
 * LinearWithLoRA, also written here. tg_gpt_generate runs the model's own
 * forward, so these modules are what generates: with the cache, the
 * built-in MultiHeadAttention keeps its keys and values and GPTModel its
 * position, and the ids equal those of recomputing every window (greedy and
 * sampled, past the context length too). Exit status 0 when they do. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <tapegrad.h>

/* ---- RMSNorm: x / sqrt(mean(x^2, -1) + eps) * weight -------------------------------------- */

typedef struct { double eps; } rms_state;

static tg_tensor *rms_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("RMSNorm: expected 1 input, got %d", n);
    const int last = -1;
    tg_tensor *ms = tg_mean_dims(tp, tg_mul(tp, in[0], in[0]), 1, &last, true);
    tg_tensor *y = tg_div(tp, in[0], tg_sqrt(tp, tg_add_scalar(tp, ms, ((const rms_state *)tg_module_state(self))->eps)));
    return tg_mul(tp, y, tg_module_get_parameter(self, "weight"));
}

static const tg_module_type rms_type = {.name = "RMSNorm", .forward = rms_forward};

static tg_module *rms_new(tg_tape *tp, int64_t dim)
{
    tg_module *m = tg_module_new(tp, &rms_type, sizeof(rms_state));
    if (!m) return NULL;
    ((rms_state *)tg_module_state(m))->eps = 1e-5;
    return tg_module_register_parameter(m, "weight", tg_ones(tp, TG_F32, 1, &dim)) == TG_OK ? m : NULL;
}

/* ---- LoRA (appendix E): linear(x) + alpha * (x @ A @ B) ------------------------------------ */

typedef struct { double alpha; } lora_state;

static tg_tensor *lora_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("LoRALayer: expected 1 input, got %d", n);
    tg_tensor *h = tg_matmul(tp, tg_matmul(tp, in[0], tg_module_get_parameter(self, "A")),
                             tg_module_get_parameter(self, "B"));
    return tg_mul_scalar(tp, h, ((const lora_state *)tg_module_state(self))->alpha);
}

static tg_tensor *with_lora_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("LinearWithLoRA: expected 1 input, got %d", n);
    return tg_add(tp, tg_module_forward(tp, tg_module_get_submodule(self, "linear"), in[0]),
                  tg_module_forward(tp, tg_module_get_submodule(self, "lora"), in[0]));
}

static const tg_module_type lora_type = {.name = "LoRALayer", .forward = lora_forward};
static const tg_module_type with_lora_type = {.name = "LinearWithLoRA", .forward = with_lora_forward};

/* A and B both random here (B is zeros before fine-tuning, which would make
 * the wrapper a no-op and the check weak). */
static tg_module *with_lora_new(tg_tape *tp, tg_module *linear, int64_t rank, double alpha)
{
    const tg_tensor *w = tg_module_get_parameter(linear, "weight"); /* (out, in) */
    int64_t a_shape[2] = {w->shape[1], rank}, b_shape[2] = {rank, w->shape[0]};
    tg_module *lora = tg_module_new(tp, &lora_type, sizeof(lora_state)), *m = tg_module_new(tp, &with_lora_type, 0);
    tg_tensor *A = tg_parameter_new(tp, TG_F32, 2, a_shape), *B = tg_parameter_new(tp, TG_F32, 2, b_shape);
    if (!lora || !m || !A || !B || tg_normal_(A, 0, 0.2, NULL) != TG_OK || tg_normal_(B, 0, 0.2, NULL) != TG_OK)
        return NULL;
    ((lora_state *)tg_module_state(lora))->alpha = alpha;
    if (tg_module_register_parameter(lora, "A", A) != TG_OK || tg_module_register_parameter(lora, "B", B) != TG_OK ||
        tg_module_add_module(m, "linear", linear) != TG_OK || tg_module_add_module(m, "lora", lora) != TG_OK)
        return NULL;
    return m;
}

/* replace_linear_with_lora: every Linear below m wrapped, in place. */
static int replace_linear_with_lora(tg_tape *tp, tg_module *m, int64_t rank, double alpha)
{
    for (int i = 0; i < tg_module_num_children(m); i++) {
        tg_module *c = tg_module_child(m, i);
        int st = strcmp(tg_module_type_name(c), "Linear") == 0
                     ? tg_module_add_module(m, tg_module_child_name(m, i), with_lora_new(tp, c, rank, alpha))
                     : replace_linear_with_lora(tp, c, rank, alpha);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

/* ---- the model and the check --------------------------------------------------------------- */

static tg_module *user_gpt(tg_tape *tp, const tg_gpt_config *cfg)
{
    tg_module *gpt = tg_gpt_new(tp, cfg);
    if (!gpt) return NULL;
    tg_module *blocks = tg_module_get_submodule(gpt, "trf_blocks");
    for (int i = 0; i < tg_module_num_children(blocks); i++) {
        tg_module *b = tg_module_child(blocks, i);
        if (tg_module_add_module(b, "norm1", rms_new(tp, cfg->emb_dim)) != TG_OK ||
            tg_module_add_module(b, "norm2", rms_new(tp, cfg->emb_dim)) != TG_OK)
            return NULL;
    }
    if (tg_module_add_module(gpt, "final_norm", rms_new(tp, cfg->emb_dim)) != TG_OK ||
        replace_linear_with_lora(tp, gpt, 4, 0.5) != TG_OK)
        return NULL;
    return gpt;
}

/* The ids with and without the cache; 0 when they are the same. */
static int same_ids(tg_module *gpt, tg_generate_options o, const int64_t *prompt, int64_t np, const char *what)
{
    int64_t ids[2][64], n[2];
    for (int cache = 0; cache < 2; cache++) {
        o.no_kv_cache = !cache;
        tg_manual_seed(7); /* the sampler's draws */
        if (tg_gpt_generate(gpt, prompt, np, &o, ids[cache], &n[cache]) != TG_OK) {
            fprintf(stderr, "%s\n", tg_last_error());
            return 1;
        }
    }
    int same = n[0] == n[1] && memcmp(ids[0], ids[1], sizeof ids[0][0] * (size_t)n[0]) == 0;
    printf("%s, %lld ids:", what, (long long)n[1]);
    for (int64_t i = 0; i < n[1]; i++) printf(" %lld", (long long)ids[1][i]);
    printf(" (KV cache %s recomputing)\n", same ? "equals" : "DIFFERS from");
    return !same;
}

int main(void)
{
    tg_tape *tp = tg_tape_new();
    tg_gpt_config cfg = {.vocab_size = 97, .context_length = 16, .emb_dim = 32, .n_heads = 4, .n_layers = 2,
                         .drop_rate = 0.1, .qkv_bias = false};
    tg_manual_seed(123);
    tg_module *gpt = user_gpt(tp, &cfg);
    if (!gpt) {
        fprintf(stderr, "%s\n", tg_last_error());
        return 1;
    }
    tg_module_print(stdout, tg_module_get_submodule(gpt, "trf_blocks.0"));
    const int64_t prompt[5] = {3, 14, 15, 92, 65};
    /* 40 new ids: the window slides past context_length 16 */
    int bad = same_ids(gpt, (tg_generate_options){.max_new_tokens = 40, .eos_id = -1}, prompt, 5, "greedy");
    bad |= same_ids(gpt, (tg_generate_options){.max_new_tokens = 40, .temperature = 1.5, .top_k = 20, .eos_id = -1},
                    prompt, 5, "sampled");
    tg_tape_free(tp);
    return bad;
}
