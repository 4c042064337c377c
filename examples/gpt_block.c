/* A GPT-2-style transformer block (chapter 4 of the book) built on tapegrad:
 * LayerNorm composed of mean, sub, pow, sqrt and div; MultiHeadAttention; a
 * GELU feed-forward network; dropout on both residual branches.
 *
 *   x = x + dropout(attention(norm1(x)))
 *   x = x + dropout(fc2(gelu(fc1(norm2(x)))))
 *
 * It first checks the whole block's gradients with tg_gradcheck in float64
 * (every parameter and the input), then trains a float32 block with SGD to map
 * random inputs to random targets, and compares the eval-mode loss before and
 * after. Exit status 0 when gradcheck passes and the loss has at least halved.
 */
#include <stdio.h>
#include <tapegrad.h>

enum { D = 8, HEADS = 2, CONTEXT = 6, BATCH = 2, HIDDEN = 4 * D };

typedef struct {
    tg_tensor *scale, *shift; /* (D) */
} layer_norm;

typedef struct {
    layer_norm norm1, norm2;
    tg_module *att, *fc1, *fc2;
    double drop;
    bool training;
} block;

/* scale = 1, shift = 0, as nn.LayerNorm starts */
static int layer_norm_init(tg_tape *tp, layer_norm *ln, tg_dtype dt)
{
    int64_t d = D;
    ln->scale = tg_parameter_new(tp, dt, 1, &d);
    ln->shift = tg_parameter_new(tp, dt, 1, &d);
    if (!ln->scale || !ln->shift) return TG_ENOMEM;
    bool prev = tg_set_grad_enabled(false); /* initialising a parameter is not part of the graph */
    int st = tg_fill_(ln->scale, 1.0);
    tg_set_grad_enabled(prev);
    return st;
}

/* x is (B, T, D): normalise over the last dim (biased variance, eps 1e-5) */
static tg_tensor *layer_norm_forward(tg_tape *tp, const layer_norm *ln, tg_tensor *x)
{
    int last = -1;
    tg_tensor *mean = tg_mean_dims(tp, x, 1, &last, true);     /* (B, T, 1) */
    tg_tensor *xc = tg_sub(tp, x, mean);                        /* (B, T, D) */
    tg_tensor *var = tg_mean_dims(tp, tg_pow_scalar(tp, xc, 2), 1, &last, true);
    tg_tensor *norm = tg_div(tp, xc, tg_sqrt(tp, tg_add_scalar(tp, var, 1e-5)));
    return tg_add(tp, tg_mul(tp, norm, ln->scale), ln->shift);
}

static int block_init(tg_tape *tp, block *b, tg_dtype dt, double drop)
{
    b->att = tg_mha_new(tp, D, D, CONTEXT, drop, HEADS, false);
    b->fc1 = tg_linear_new(tp, D, HIDDEN, true);
    b->fc2 = tg_linear_new(tp, HIDDEN, D, true);
    if (!b->att || !b->fc1 || !b->fc2) return TG_EINVAL;
    b->drop = drop;
    b->training = true;
    if (dt != TG_F32) {
        int st = tg_module_to_dtype(tp, b->att, dt);
        if (st == TG_OK) st = tg_module_to_dtype(tp, b->fc1, dt);
        if (st == TG_OK) st = tg_module_to_dtype(tp, b->fc2, dt);
        if (st != TG_OK) return st;
    }
    int st = layer_norm_init(tp, &b->norm1, dt);
    return st == TG_OK ? layer_norm_init(tp, &b->norm2, dt) : st;
}

static void block_train(block *b, bool training)
{
    b->training = training;
    tg_module_train(b->att, training);
}

/* x is (B, T, D); so is the result */
static tg_tensor *block_forward(tg_tape *tp, const block *b, tg_tensor *x)
{
    double p = b->training ? b->drop : 0.0;
    tg_tensor *h = tg_module_forward(tp, b->att, layer_norm_forward(tp, &b->norm1, x));
    x = tg_add(tp, x, tg_dropout(tp, h, p, NULL));
    tg_tensor *f = tg_module_forward(tp, b->fc1, layer_norm_forward(tp, &b->norm2, x)); /* (B, T, 4D) */
    f = tg_module_forward(tp, b->fc2, tg_gelu(tp, f));
    return tg_add(tp, x, tg_dropout(tp, f, p, NULL));
}

/* Every parameter of the block, in a fixed order; returns the count. */
static int block_parameters(tg_tape *tp, const block *b, tg_tensor **out, int max)
{
    int n = 0;
    const tg_module *mods[3] = {b->att, b->fc1, b->fc2};
    tg_tensor *ln[4] = {b->norm1.scale, b->norm1.shift, b->norm2.scale, b->norm2.shift};
    for (int i = 0; i < 4 && n < max; i++) out[n++] = ln[i];
    for (int m = 0; m < 3; m++) {
        tg_named_list np;
        if (tg_module_named_parameters(tp, mods[m], &np) != TG_OK) return -1;
        for (int i = 0; i < np.n && n < max; i++) out[n++] = np.tensors[i];
    }
    return n;
}

static tg_tensor *gc_block(tg_tape *tp, tg_tensor *const *inputs, int n, void *ctx)
{
    (void)n; /* inputs[1..] are the block's own parameters */
    return block_forward(tp, ctx, inputs[0]);
}

static int check_gradients(void)
{
    tg_tape *model = tg_tape_new();
    block b;
    tg_manual_seed(123);
    int ok = 0;
    if (model && block_init(model, &b, TG_F64, 0.0) == TG_OK) {
        int64_t shape[3] = {BATCH, CONTEXT, D};
        tg_tensor *in[16];
        in[0] = tg_rand(model, TG_F64, 3, shape, NULL);
        int np = in[0] && tg_requires_grad_(in[0], true) == TG_OK ? block_parameters(model, &b, in + 1, 15) : -1;
        tg_gradcheck_result res = {0}; /* max_err_per_input: NULL */
        if (np > 0 && tg_gradcheck(gc_block, in, np + 1, &b, 0, 0, 0, &res) == TG_OK) {
            printf("gradcheck of the block (input and %d parameters, float64): %s\n  %s\n", np,
                   res.passed ? "PASS" : "FAIL", res.message);
            ok = res.passed;
        }
    }
    if (!ok && tg_last_error()[0]) fprintf(stderr, "gpt_block: %s\n", tg_last_error());
    tg_tape_free(model);
    return ok;
}

/* mean squared error of the block on (x, y) in eval mode */
static double eval_loss(tg_tape *step, block *b, tg_tensor *x, tg_tensor *y)
{
    block_train(b, false);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *loss = tg_mse_loss(step, block_forward(step, b, x), y, TG_REDUCE_MEAN);
    double v = loss ? tg_item(loss) : -1.0;
    tg_set_grad_enabled(prev);
    block_train(b, true);
    tg_tape_reset(step);
    return v;
}

static int train(void)
{
    tg_tape *model = tg_tape_new(), *step = tg_tape_new();
    if (!model || !step) return 0;
    block b;
    tg_manual_seed(123);
    int ok = 0;
    tg_tensor *params[16];
    int np = block_init(model, &b, TG_F32, 0.1) == TG_OK ? block_parameters(model, &b, params, 16) : -1;
    tg_sgd *opt = np > 0 ? tg_sgd_new_params(model, np, params, (tg_sgd_options){.lr = 0.05, .momentum = 0.9})
                         : NULL;
    int64_t shape[3] = {BATCH, CONTEXT, D};
    tg_generator *g = tg_generator_new(7);
    tg_tensor *x = g ? tg_rand(model, TG_F32, 3, shape, g) : NULL;
    tg_tensor *y = x ? tg_rand(model, TG_F32, 3, shape, g) : NULL;
    if (opt && y) {
        double first = eval_loss(step, &b, x, y), last = first;
        int steps = 300;
        for (int it = 1; it <= steps; it++) {
            tg_tensor *loss = tg_mse_loss(step, block_forward(step, &b, x), y, TG_REDUCE_MEAN);
            if (!loss) break;
            tg_sgd_zero_grad(opt);
            if (tg_backward(loss, NULL, false) != TG_OK || tg_sgd_step(opt) != TG_OK) break;
            if (it % 100 == 0) printf("step %3d  training loss %.6f\n", it, tg_item(loss));
            tg_tape_reset(step);
            if (it == steps) {
                last = eval_loss(step, &b, x, y);
                ok = last >= 0 && last < 0.5 * first;
            }
        }
        printf("eval-mode loss: %.6f before training, %.6f after %d SGD steps\n", first, last, steps);
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
