/* The book's GPT-2 transformer block (chapter 4) as modules of your own, built
 * only from tapegrad's public API:
 *
 *   LayerNorm(emb_dim)        scale * (x - mean) / sqrt(var + 1e-5) + shift
 *   GELU()                    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *   FeedForward(cfg)          layers = Sequential(Linear(d, 4d), GELU(), Linear(4d, d))
 *   TransformerBlock(cfg)     att, ff, norm1, norm2, drop_shortcut;
 *                             x = drop_shortcut(att(norm1(x))) + x
 *                             x = drop_shortcut(ff(norm2(x))) + x
 *
 * It prints the block as PyTorch's print(model) does, checks every gradient
 * with tg_gradcheck_module_call in float64, trains a float32 block with SGD
 * (tg_sgd_new over the whole tree) to map random inputs to random targets,
 * saves its state_dict, loads it into a fresh block and checks the outputs
 * agree. Exit status 0 when all of that holds.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <tapegrad.h>

enum { EMB = 8, HEADS = 2, CONTEXT = 6, BATCH = 2 };

/* ---- LayerNorm ------------------------------------------------------------------------ */

static tg_tensor *layer_norm_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("LayerNorm: expected 1 input, got %d", n);
    int last = -1;
    tg_tensor *x = in[0];
    tg_tensor *mean = tg_mean_dims(tp, x, 1, &last, true); /* (B, T, 1) */
    tg_tensor *xc = tg_sub(tp, x, mean);
    tg_tensor *var = tg_mean_dims(tp, tg_pow_scalar(tp, xc, 2), 1, &last, true); /* biased */
    tg_tensor *norm = tg_div(tp, xc, tg_sqrt(tp, tg_add_scalar(tp, var, 1e-5)));
    tg_tensor *scale = tg_module_get_parameter(self, "scale"), *shift = tg_module_get_parameter(self, "shift");
    return tg_add(tp, tg_mul(tp, scale, norm), shift);
}

static const tg_module_type layer_norm_type = {.name = "LayerNorm", .forward = layer_norm_forward};

static tg_module *layer_norm_new(tg_tape *tp, int64_t dim)
{
    tg_module *m = tg_module_new(tp, &layer_norm_type, 0);
    tg_tensor *scale = tg_parameter_new(tp, TG_F32, 1, &dim), *shift = tg_parameter_new(tp, TG_F32, 1, &dim);
    if (!m || !scale || !shift) return NULL;
    bool prev = tg_set_grad_enabled(false); /* initialising is not part of any graph */
    int st = tg_fill_(scale, 1.0);
    tg_set_grad_enabled(prev);
    if (st || tg_module_register_parameter(m, "scale", scale) || tg_module_register_parameter(m, "shift", shift))
        return NULL;
    return m;
}

/* ---- GELU, FeedForward ------------------------------------------------------------------------ */

static tg_tensor *gelu_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    (void)self;
    if (n != 1) return tg_error("GELU: expected 1 input, got %d", n);
    tg_tensor *x = in[0]; /* 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) */
    tg_tensor *inner = tg_add(tp, x, tg_mul_scalar(tp, tg_pow_scalar(tp, x, 3), 0.044715));
    tg_tensor *t = tg_tanh(tp, tg_mul_scalar(tp, inner, 0.7978845608028654)); /* sqrt(2 / pi) */
    return tg_mul(tp, tg_mul_scalar(tp, x, 0.5), tg_add_scalar(tp, t, 1.0));
}

static const tg_module_type gelu_type = {.name = "GELU", .forward = gelu_forward};

static tg_tensor *feed_forward_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    return tg_module_call(tp, tg_module_get_submodule(self, "layers"), n, in);
}

static const tg_module_type feed_forward_type = {.name = "FeedForward", .forward = feed_forward_forward};

static tg_module *feed_forward_new(tg_tape *tp, int64_t emb)
{
    tg_module *layers[3] = {tg_linear_new(tp, emb, 4 * emb, true), tg_module_new(tp, &gelu_type, 0),
                            tg_linear_new(tp, 4 * emb, emb, true)};
    tg_module *m = tg_module_new(tp, &feed_forward_type, 0);
    if (!m || tg_module_add_module(m, "layers", tg_sequential_new(tp, 3, layers)) != TG_OK) return NULL;
    return m;
}

/* ---- TransformerBlock ------------------------------------------------------------------------------ */

static tg_tensor *block_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("TransformerBlock: expected 1 input, got %d", n);
    tg_module *drop = tg_module_get_submodule(self, "drop_shortcut");
    tg_tensor *x = in[0]; /* (B, T, emb) */
    tg_tensor *h = tg_module_forward(tp, tg_module_get_submodule(self, "norm1"), x);
    h = tg_module_forward(tp, tg_module_get_submodule(self, "att"), h);
    x = tg_add(tp, tg_module_forward(tp, drop, h), x);
    h = tg_module_forward(tp, tg_module_get_submodule(self, "norm2"), x);
    h = tg_module_forward(tp, tg_module_get_submodule(self, "ff"), h);
    return tg_add(tp, tg_module_forward(tp, drop, h), x);
}

static const tg_module_type block_type = {.name = "TransformerBlock", .forward = block_forward};

static tg_module *block_new(tg_tape *tp, double drop_rate)
{
    tg_module *m = tg_module_new(tp, &block_type, 0);
    if (!m) return NULL;
    const char *names[5] = {"att", "ff", "norm1", "norm2", "drop_shortcut"};
    tg_attention_config att = {
        .d_in = EMB, .d_out = EMB, .context_length = CONTEXT, .num_heads = HEADS, .dropout = drop_rate};
    tg_module *kids[5] = {tg_mha_new_config(tp, att), feed_forward_new(tp, EMB), layer_norm_new(tp, EMB),
                          layer_norm_new(tp, EMB), tg_dropout_new(tp, drop_rate)};
    for (int i = 0; i < 5; i++)
        if (tg_module_add_module(m, names[i], kids[i]) != TG_OK) return NULL;
    return m;
}

/* ---- the checks ------------------------------------------------------------------------------------ */

static int check_gradients(void)
{
    tg_tape *model = tg_tape_new();
    tg_manual_seed(123);
    tg_module *b = model ? block_new(model, 0.1) : NULL;
    int64_t shape[3] = {BATCH, CONTEXT, EMB};
    tg_tensor *x = tg_rand(model, TG_F64, 3, shape, NULL);
    tg_gradcheck_result res;
    int ok = 0;
    /* gradcheck compares float64 derivatives of a deterministic forward: eval mode */
    if (b && x && tg_module_to_dtype(model, b, TG_F64) == TG_OK && tg_module_train(b, false) == TG_OK &&
        tg_gradcheck_module_call(b, 1, &x, NULL, &res) == TG_OK) {
        printf("%s\n", res.message);
        ok = res.passed;
    }
    if (!ok && tg_last_error()[0]) fprintf(stderr, "gpt_block: %s\n", tg_last_error());
    tg_tape_free(model);
    return ok;
}

/* mean squared error of the block on (x, y) in eval mode */
static double eval_loss(tg_tape *step, tg_module *b, tg_tensor *x, tg_tensor *y)
{
    tg_module_train(b, false);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *loss = tg_mse_loss(step, tg_module_forward(step, b, x), y, TG_REDUCE_MEAN);
    double v = loss ? tg_item(loss) : -1.0;
    tg_set_grad_enabled(prev);
    tg_module_train(b, true);
    tg_tape_reset(step);
    return v;
}

/* Saves b's state_dict, loads it into a block built from another seed and
 * checks that both give the same eval-mode output. */
static int check_save_load(tg_tape *model, tg_tape *step, tg_module *b, tg_tensor *x)
{
    char path[] = "gpt_block_example.safetensors";
    tg_manual_seed(999);
    tg_module *fresh = block_new(model, 0.1);
    int ok = fresh && tg_module_save(b, path) == TG_OK && tg_module_load(fresh, path) == TG_OK;
    remove(path);
    tg_module_train(b, false);
    tg_module_train(fresh, false);
    tg_tensor *ya = ok ? tg_module_forward(step, b, x) : NULL, *yb = ok ? tg_module_forward(step, fresh, x) : NULL;
    double worst = 0;
    for (int64_t i = 0; ya && yb && i < tg_numel(ya); i++) worst = fmax(worst, fabs(tg_item_at(ya, i) - tg_item_at(yb, i)));
    ok = ya && yb && worst == 0;
    printf("state_dict saved and loaded into a fresh block: outputs %s\n", ok ? "identical" : "DIFFER");
    tg_tape_reset(step);
    return ok;
}

static int train(void)
{
    tg_tape *model = tg_tape_new(), *step = tg_tape_new();
    if (!model || !step) return 0;
    tg_manual_seed(123);
    tg_module *b = block_new(model, 0.1);
    tg_sgd *opt = b ? tg_sgd_new(model, b, (tg_sgd_options){.lr = 0.05, .momentum = 0.9}) : NULL;
    int64_t shape[3] = {BATCH, CONTEXT, EMB};
    tg_generator *g = tg_generator_new(7);
    tg_tensor *x = g ? tg_rand(model, TG_F32, 3, shape, g) : NULL;
    tg_tensor *y = x ? tg_rand(model, TG_F32, 3, shape, g) : NULL;
    int ok = 0;
    if (opt && y) {
        tg_module_print(stdout, b);
        double first = eval_loss(step, b, x, y), last = -1;
        int steps = 300;
        for (int it = 1; it <= steps; it++) {
            tg_tensor *loss = tg_mse_loss(step, tg_module_forward(step, b, x), y, TG_REDUCE_MEAN);
            if (!loss) break;
            tg_sgd_zero_grad(opt);
            if (tg_backward(loss, NULL, false) != TG_OK || tg_sgd_step(opt) != TG_OK) break;
            if (it % 100 == 0) printf("step %3d  training loss %.6f\n", it, tg_item(loss));
            tg_tape_reset(step);
            if (it == steps) last = eval_loss(step, b, x, y);
        }
        printf("eval-mode loss: %.6f before training, %.6f after %d SGD steps\n", first, last, steps);
        ok = last >= 0 && last < 0.5 * first && check_save_load(model, step, b, x);
    }
    if (!ok && tg_last_error()[0]) fprintf(stderr, "gpt_block: %s\n", tg_last_error());
    tg_generator_free(g);
    tg_tape_free(step);
    tg_tape_free(model);
    return ok;
}

int main(void)
{
    int ok = check_gradients();
    ok = train() && ok;
    return ok ? 0 : 1;
}
