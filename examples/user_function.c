/* A differentiable function with a hand-written backward: SiLU, y = x * sigmoid(x). */
#include <stdio.h>
#include <tapegrad.h>

static tg_tensor *sigmoid(tg_tape *tp, tg_tensor *x) /* 0.5 * (1 + tanh(x / 2)) */
{
    return tg_mul_scalar(tp, tg_add_scalar(tp, tg_tanh(tp, tg_mul_scalar(tp, x, 0.5)), 1.0), 0.5);
}

static tg_tensor *silu_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("silu: expected 1 input, got %d", n);
    if (tg_fn_save_for_backward(ctx, 1, in) != TG_OK) return NULL;
    return tg_mul(tp, in[0], sigmoid(tp, in[0]));
}

/* forward: y = x s, s = sigmoid(x); so dx = dy s (1 + x (1 - s)) */
static int silu_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *dy, tg_tensor **dx)
{
    tg_tensor *x = tg_fn_saved(ctx, 0), *s = sigmoid(tp, x);
    tg_tensor *t = tg_add_scalar(tp, tg_mul(tp, x, tg_rsub_scalar(tp, s, 1.0)), 1.0);
    dx[0] = tg_mul(tp, (tg_tensor *)dy, tg_mul(tp, s, t));
    return dx[0] ? TG_OK : TG_EINVAL;
}

static const tg_function silu = {"SiluBackward0", silu_forward, silu_backward};

static tg_tensor *apply_silu(tg_tape *tp, void *ctx, int n, tg_tensor *const *in)
{
    (void)ctx;
    return tg_function_apply(tp, &silu, n, in);
}

int main(void)
{
    tg_tape *tp = tg_tape_new();
    int64_t shape[2] = {3, 4};
    tg_tensor *x = tg_randn(tp, TG_F64, 2, shape, NULL);
    tg_requires_grad_(x, true);
    tg_tensor *y = tg_function_apply(tp, &silu, 1, &x);
    tg_print(stdout, tg_sum(tp, y)); /* tensor(..., dtype=torch.float64, grad_fn=<SumBackward0>) */
    printf("y.grad_fn: %s\n", tg_grad_fn_name(y)); /* SiluBackward0 */
    tg_gradcheck_result res;
    if (tg_gradcheck_call(apply_silu, NULL, 1, &x, NULL, &res) != TG_OK) {
        fprintf(stderr, "%s\n", tg_last_error());
        return 1;
    }
    printf("%s\n", res.message);
    tg_tape_free(tp);
    return res.passed ? 0 : 1;
}
