/* A module of your own: y = x + scale * gain * relu(fc(x)), checked with gradcheck. */
#include <stdio.h>
#include <tapegrad.h>

typedef struct { double scale; } residual_state;

static tg_tensor *residual_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("Residual: expected 1 input, got %d", n);
    const residual_state *s = tg_module_state(self);
    tg_tensor *h = tg_relu(tp, tg_module_forward(tp, tg_module_get_submodule(self, "fc"), in[0]));
    h = tg_mul(tp, tg_mul_scalar(tp, h, s->scale), tg_module_get_parameter(self, "gain"));
    return tg_add(tp, in[0], h);
}

static int residual_extra_repr(const tg_module *self, char *buf, size_t size)
{
    return snprintf(buf, size, "scale=%g", ((const residual_state *)tg_module_state_const(self))->scale);
}

static const tg_module_type residual_type = {.name = "Residual", .forward = residual_forward, .extra_repr = residual_extra_repr};

static tg_module *residual_new(tg_tape *tp, int64_t dim, double scale)
{
    tg_module *m = tg_module_new(tp, &residual_type, sizeof(residual_state));
    if (!m) return NULL;
    ((residual_state *)tg_module_state(m))->scale = scale;
    if (tg_module_add_module(m, "fc", tg_linear_new(tp, dim, dim, true)) != TG_OK ||
        tg_module_register_parameter(m, "gain", tg_ones(tp, TG_F32, 1, &dim)) != TG_OK)
        return NULL;
    return m;
}

int main(void)
{
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(123);
    tg_module *m = residual_new(tp, 4, 0.5);
    tg_module_print(stdout, m); /* Residual(\n  scale=0.5\n  (fc): Linear(...)\n) */
    int64_t shape[2] = {3, 4};
    tg_tensor *x = tg_randn(tp, TG_F64, 2, shape, NULL);
    tg_gradcheck_result res;
    if (tg_module_to_dtype(tp, m, TG_F64) != TG_OK || tg_gradcheck_module_call(m, 1, &x, NULL, &res) != TG_OK) {
        fprintf(stderr, "%s\n", tg_last_error());
        return 1;
    }
    printf("%s\n", res.message); /* gradcheck_module Residual passed: worst element ... */
    tg_tape_free(tp);
    return res.passed ? 0 : 1;
}
