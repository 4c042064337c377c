/* torch.nn.init: in-place initialisations of a parameter, drawn from a
 * generator as PyTorch 1.13's torch/nn/init.py draws them (uniform_ and
 * normal_ with the bounds and standard deviations it computes, in its
 * order of double operations), never recorded. */
#include "internal.h"

#include <math.h>
#include <string.h>

/* NULL, non-float and (for the random fills) non-contiguous targets. */
static int check_target(const char *op, const tg_tensor *x, bool random)
{
    if (!x) return tg_error_status(TG_EINVAL, "%s: NULL tensor", op);
    /* bf16 and q8_0: drawn as float32, rounded or quantized (rng.c) */
    if (random && !tg__is_float(x->dtype) && x->dtype != TG_BF16 && x->dtype != TG_Q8)
        return tg_error_status(TG_EINVAL, "%s: expected a float32, float64, bfloat16 or q8_0 tensor, got %s", op,
                               tg_dtype_name(x->dtype));
    if (random && !tg_is_contiguous(x)) return tg_error_status(TG_EINVAL, "%s: tensor must be contiguous", op);
    return TG_OK;
}

static bool has_zero_size(const tg_tensor *x)
{
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] == 0) return true;
    return false;
}

/* _calculate_fan_in_and_fan_out: fan_in = size(1) * receptive field,
 * fan_out = size(0) * receptive field (the product of the sizes past dim 1). */
static int fans(const char *op, const tg_tensor *x, int64_t *fan_in, int64_t *fan_out)
{
    if (x->ndim < 2)
        return tg_error_status(TG_EINVAL, "%s: Fan in and fan out can not be computed for tensor with fewer "
                                          "than 2 dimensions (got %d)", op, x->ndim);
    int64_t rf = 1;
    for (int d = 2; d < x->ndim; d++) rf *= x->shape[d];
    *fan_in = x->shape[1] * rf;
    *fan_out = x->shape[0] * rf;
    return TG_OK;
}

/* calculate_gain; param NAN stands for PyTorch's None (leaky_relu's default
 * slope 0.01) when none_is_nan, else it is the slope (kaiming's a). */
static int gain_of(const char *op, const char *nonlinearity, double param, bool none_is_nan, double *gain)
{
    static const char *const linear[] = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                                         "conv_transpose2d", "conv_transpose3d", "sigmoid"};
    if (!nonlinearity) nonlinearity = "leaky_relu";
    for (size_t i = 0; i < sizeof linear / sizeof linear[0]; i++)
        if (strcmp(nonlinearity, linear[i]) == 0) {
            *gain = 1.0;
            return TG_OK;
        }
    if (strcmp(nonlinearity, "tanh") == 0) {
        *gain = 5.0 / 3;
    } else if (strcmp(nonlinearity, "relu") == 0) {
        *gain = sqrt(2.0);
    } else if (strcmp(nonlinearity, "leaky_relu") == 0) {
        double slope = none_is_nan && isnan(param) ? 0.01 : param;
        *gain = sqrt(2.0 / (1 + pow(slope, 2.0)));
    } else if (strcmp(nonlinearity, "selu") == 0) {
        *gain = 3.0 / 4;
    } else {
        return tg_error_status(TG_EINVAL, "%s: unsupported nonlinearity '%s' (linear, conv1d, conv2d, conv3d, "
                                          "conv_transpose1d, conv_transpose2d, conv_transpose3d, sigmoid, tanh, "
                                          "relu, leaky_relu, selu)", op, nonlinearity);
    }
    return TG_OK;
}

int tg_init_calculate_gain(const char *nonlinearity, double param, double *gain)
{
    if (!gain) return tg_error_status(TG_EINVAL, "calculate_gain: NULL result pointer");
    return gain_of("calculate_gain", nonlinearity, param, true, gain);
}

int tg_init_uniform_(tg_tensor *x, double a, double b, tg_generator *g)
{
    int st = check_target("init.uniform_", x, true);
    return st != TG_OK ? st : tg_uniform_(x, a, b, g);
}

int tg_init_normal_(tg_tensor *x, double mean, double std, tg_generator *g)
{
    int st = check_target("init.normal_", x, true);
    return st != TG_OK ? st : tg_normal_(x, mean, std, g);
}

static int fill(const char *op, tg_tensor *x, double v)
{
    int st = check_target(op, x, false);
    if (st != TG_OK) return st;
    if (tg__refuse_q8(op, x)) return TG_EINVAL;
    tg__bump(x);
    tg_k_fill(x, v);
    return TG_OK;
}

int tg_init_zeros_(tg_tensor *x) { return fill("init.zeros_", x, 0.0); }
int tg_init_ones_(tg_tensor *x) { return fill("init.ones_", x, 1.0); }

/* kaiming_uniform_ / kaiming_normal_: std = gain / sqrt(fan); uniform in
 * +-sqrt(3) * std, or normal(0, std). A tensor with a zero size is left as
 * it is (PyTorch warns and returns). */
static int kaiming(const char *op, tg_tensor *x, double a, tg_fan_mode mode, const char *nonlinearity,
                   tg_generator *g, bool normal)
{
    int st = check_target(op, x, true);
    if (st != TG_OK) return st;
    if (mode != TG_FAN_IN && mode != TG_FAN_OUT)
        return tg_error_status(TG_EINVAL, "%s: mode %d not supported, use TG_FAN_IN or TG_FAN_OUT", op, (int)mode);
    double gain;
    if ((st = gain_of(op, nonlinearity, a, false, &gain)) != TG_OK) return st;
    if (has_zero_size(x)) return TG_OK;
    int64_t fan_in = 0, fan_out = 0;
    if ((st = fans(op, x, &fan_in, &fan_out)) != TG_OK) return st;
    double std = gain / sqrt((double)(mode == TG_FAN_IN ? fan_in : fan_out));
    if (normal) return tg_normal_(x, 0.0, std, g);
    double bound = sqrt(3.0) * std;
    return tg_uniform_(x, -bound, bound, g);
}

int tg_init_kaiming_uniform_(tg_tensor *x, double a, tg_fan_mode mode, const char *nonlinearity, tg_generator *g)
{
    return kaiming("kaiming_uniform_", x, a, mode, nonlinearity, g, false);
}

int tg_init_kaiming_normal_(tg_tensor *x, double a, tg_fan_mode mode, const char *nonlinearity, tg_generator *g)
{
    return kaiming("kaiming_normal_", x, a, mode, nonlinearity, g, true);
}

/* xavier_uniform_ / xavier_normal_: std = gain * sqrt(2 / (fan_in + fan_out));
 * uniform in +-sqrt(3) * std, or normal(0, std). */
static int xavier(const char *op, tg_tensor *x, double gain, tg_generator *g, bool normal)
{
    int st = check_target(op, x, true);
    if (st != TG_OK) return st;
    int64_t fan_in = 0, fan_out = 0;
    if ((st = fans(op, x, &fan_in, &fan_out)) != TG_OK) return st;
    if (fan_in + fan_out == 0)
        return tg_error_status(TG_EINVAL, "%s: fan_in + fan_out is 0 (zero sizes)", op);
    double std = gain * sqrt(2.0 / (double)(fan_in + fan_out));
    if (normal) return tg_normal_(x, 0.0, std, g);
    double a = sqrt(3.0) * std;
    return tg_uniform_(x, -a, a, g);
}

int tg_init_xavier_uniform_(tg_tensor *x, double gain, tg_generator *g)
{
    return xavier("xavier_uniform_", x, gain, g, false);
}

int tg_init_xavier_normal_(tg_tensor *x, double gain, tg_generator *g)
{
    return xavier("xavier_normal_", x, gain, g, true);
}
