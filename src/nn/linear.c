/* nn.Linear: y = x W^T + b. Written as a user's module is (include/tapegrad/nn.h):
 * a type with a forward and an extra_repr, state it owns, and parameters
 * registered by name. */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

typedef struct {
    int64_t in_features, out_features;
    bool bias;
} linear_state;

/* forward: F.linear(x, self.weight, self.bias) */
static tg_tensor *linear_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *x)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    const linear_state *s = tg_module_state(self);
    tg_tensor *w = tg_module_get_parameter(self, "weight");
    tg_tensor *b = s->bias ? tg_module_get_parameter(self, "bias") : NULL;
    if (!w || (s->bias && !b)) return NULL;
    return tg_linear(tp, x[0], w, b);
}

static int linear_extra_repr(const tg_module *self, char *buf, size_t size)
{
    const linear_state *s = tg_module_state_const(self);
    return snprintf(buf, size, "in_features=%lld, out_features=%lld, bias=%s", (long long)s->in_features,
                    (long long)s->out_features, s->bias ? "True" : "False");
}

static const tg_module_type linear_type = {.name = "Linear", .forward = linear_forward, .extra_repr = linear_extra_repr};

bool tg__is_linear(const tg_module *m) { return m && m->type == &linear_type; }

bool tg__linear_weights(const tg_module *m, tg_tensor **w, tg_tensor **b)
{
    if (!tg__is_linear(m)) return false;
    const linear_state *s = tg_module_state_const(m);
    *w = tg_module_get_parameter(m, "weight");
    *b = s->bias ? tg_module_get_parameter(m, "bias") : NULL;
    return *w && (!s->bias || *b);
}

/* nn.Linear.reset_parameters: kaiming_uniform_(weight, a=sqrt(5)) then bias
 * from uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bound arithmetic is
 * torch/nn/init.py's, in double (src/tensor/init.c), so the bounds are
 * bit-identical. */
static int weight_init(tg_tensor *w, void *ctx)
{
    (void)ctx;
    return tg_init_kaiming_uniform_(w, sqrt(5.0), TG_FAN_IN, "leaky_relu", NULL);
}

tg_module *tg_linear_new(tg_tape *tp, int64_t in_features, int64_t out_features, bool bias)
{
    return tg__linear_new_as(tp, in_features, out_features, bias, TG_F32);
}

tg_module *tg__linear_new_as(tg_tape *tp, int64_t in_features, int64_t out_features, bool bias, tg_dtype dt)
{
    if (!tg__check_size("Linear", "in_features", in_features) ||
        !tg__check_size("Linear", "out_features", out_features))
        return NULL;
    tg_module *m = tg_module_new(tp, &linear_type, sizeof(linear_state));
    if (!m) return NULL;
    *(linear_state *)tg_module_state(m) = (linear_state){in_features, out_features, bias};
    int64_t ws[2] = {out_features, in_features}, bs[1] = {out_features};
    tg_tensor *w = tg__parameter_drawn(tp, dt, 2, ws, weight_init, NULL);
    if (tg_module_register_parameter(m, "weight", w) != TG_OK) return NULL;
    if (bias) {
        tg_tensor *b = tg_parameter_new(tp, TG_F32, 1, bs);
        if (tg_module_register_parameter(m, "bias", b) != TG_OK) return NULL;
        double bb = 1.0 / sqrt((double)in_features);
        if (tg_uniform_(b, -bb, bb, NULL) != TG_OK) return NULL;
    }
    return m;
}

/* The Linear layers' weight copies, made now (tg_module_prepare_numerics). */
int tg_module_prepare_numerics(tg_module *m, tg_numerics numerics)
{
    if (!m) return tg_error_status(TG_EINVAL, "prepare_numerics: NULL module");
    if (!strcmp(tg_numerics_name(numerics), "?")) return tg_error_status(TG_EINVAL, "prepare_numerics: %d is not a policy", (int)numerics);
    if (numerics == TG_NUMERICS_FAST) return TG_OK;
    if (tg__is_linear(m)) {
        tg_tensor *w = tg__entry_get(&m->params, "weight");
        if (w && tg__bf16_prepare(w, numerics) < 0) return TG_ENOMEM;
    }
    for (int i = 0; i < m->children.n; i++) {
        int st = tg_module_prepare_numerics(m->children.items[i].ptr, numerics);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}
