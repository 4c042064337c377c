/* An optimizer of your own: Lion (Chen et al. 2023, "Symbolic Discovery of
 * Optimization Algorithms"), written through the same public type as the
 * built-in SGD, Adam and AdamW. Per parameter, with its momentum m:
 *
 *   p = p * (1 - lr * wd)
 *   p = p - lr * sign(beta1 * m + (1 - beta1) * g)
 *   m = beta2 * m + (1 - beta2) * g
 *
 * The program trains a Linear layer one step and checks every weight
 * against the formula, saves the optimizer's state, loads it into a second
 * optimizer over a copy of the model, and checks that both take the same
 * next step. Exit status 0 when all of it holds. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <tapegrad.h>

typedef struct {
    double betas[2], weight_decay;
} lion_options;

/* One parameter's update: float32 as the parameter, scalars in double. */
static int lion_step(tg_optimizer *opt, tg_tensor *param, const tg_tensor *grad, tg_tensor *const *state)
{
    if (param->dtype != TG_F32) return tg_error_status(TG_EINVAL, "Lion: float32 parameters only");
    const lion_options *o = tg_optimizer_options(opt);
    const double lr = tg_optimizer_lr(opt), b1 = o->betas[0], b2 = o->betas[1];
    float *p = tg_data_ptr(param), *m = tg_data_ptr(state[0]);
    const float *g = tg_data_ptr(grad);
    for (int64_t i = 0; i < tg_numel(param); i++) {
        double c = b1 * m[i] + (1 - b1) * g[i];
        double update = (c > 0) - (c < 0);
        p[i] = (float)(p[i] * (1 - lr * o->weight_decay) - lr * update);
        m[i] = (float)(b2 * m[i] + (1 - b2) * g[i]);
    }
    return TG_OK;
}

static const char *const lion_state[] = {"exp_avg"};
static const tg_optimizer_type lion = {"Lion", 1, lion_state, lion_step};

static tg_optimizer *lion_new(tg_tape *tp, tg_module *model, double lr, lion_options o)
{
    if (!(o.betas[0] >= 0 && o.betas[0] < 1 && o.betas[1] >= 0 && o.betas[1] < 1))
        return tg_error("Lion: betas must lie in [0, 1)");
    if (!(o.weight_decay >= 0)) return tg_error("Lion: invalid weight_decay value: %g", o.weight_decay);
    return tg_optimizer_new(tp, &lion, model, lr, &o, sizeof o);
}

/* One step: loss = sum(model(x)^2), backward, the optimizer's update. */
static int train_step(tg_tape *tp, tg_module *model, tg_optimizer *opt, tg_tensor *x)
{
    tg_optimizer_zero_grad(opt);
    tg_tensor *y = tg_module_forward(tp, model, x);
    int st = tg_backward(tg_sum(tp, tg_mul(tp, y, y)), NULL, false);
    return st == TG_OK ? tg_optimizer_step(opt) : st;
}

static int fail(const char *what)
{
    fprintf(stderr, "user_optimizer: %s: %s\n", what, tg_last_error());
    return 1;
}

int main(void)
{
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_manual_seed(123);
    tg_module *model = tg_linear_new(mt, 4, 3, true), *copy = tg_linear_new(mt, 4, 3, true);
    int64_t shape[2] = {5, 4};
    tg_tensor *x = tg_randn(mt, TG_F32, 2, shape, NULL);
    lion_options o = {.betas = {0.9, 0.99}, .weight_decay = 0.1};
    tg_optimizer *opt = lion_new(mt, model, 1e-2, o);
    if (!model || !copy || !x || !opt) return fail("setup");

    /* step 1 against the formula, for every parameter (m starts at zero) */
    float before[2][12];
    const char *names[2] = {"weight", "bias"};
    for (int k = 0; k < 2; k++) tg_copy_to_f32(tg_module_get_parameter(model, names[k]), before[k]);
    if (train_step(tp, model, opt, x) != TG_OK) return fail("step 1");
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        const tg_tensor *p = tg_module_get_parameter(model, names[k]);
        const float *now = tg_data_ptr(p), *g = tg_data_ptr(p->grad);
        for (int64_t i = 0; i < tg_numel(p); i++) {
            double c = (1 - 0.9) * g[i], want = before[k][i] * (1 - 1e-2 * 0.1) - 1e-2 * ((c > 0) - (c < 0));
            worst = fmax(worst, fabs(now[i] - want));
        }
    }
    printf("Lion step 1: |parameter - formula| <= %.3g, step count %lld\n", worst,
           (long long)tg_optimizer_step_count(opt));

    /* save the state, load it into an optimizer over a copy of the model */
    char path[] = "/tmp/lion-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return fail("mkstemp");
    close(fd);
    tg_optimizer *opt2 = NULL;
    if (tg_module_save(model, path) != TG_OK || tg_module_load(copy, path) != TG_OK) return fail("model save/load");
    if (tg_optimizer_save(opt, path) != TG_OK || !(opt2 = lion_new(mt, copy, 0.5, o)) ||
        tg_optimizer_load(opt2, path) != TG_OK)
        return fail("optimizer save/load");
    remove(path);
    tg_tape_reset(tp);
    if (train_step(tp, model, opt, x) != TG_OK || train_step(tp, copy, opt2, x) != TG_OK) return fail("step 2");
    int same = 1;
    for (int k = 0; k < 2; k++) {
        const tg_tensor *a = tg_module_get_parameter(model, names[k]), *b = tg_module_get_parameter(copy, names[k]);
        same &= memcmp(tg_data_ptr(a), tg_data_ptr(b), sizeof(float) * (size_t)tg_numel(a)) == 0;
    }
    /* and the momentum: state.0.exp_avg, state.1.exp_avg */
    tg_named_list s1, s2;
    if (tg_optimizer_state_dict(tp, opt, &s1) != TG_OK || tg_optimizer_state_dict(tp, opt2, &s2) != TG_OK)
        return fail("state_dict");
    same &= s1.n == s2.n && tg_optimizer_step_count(opt2) == 2;
    for (int i = 0; same && i < s1.n; i++)
        same &= strcmp(s1.names[i], s2.names[i]) == 0 &&
                memcmp(tg_data_ptr(s1.tensors[i]), tg_data_ptr(s2.tensors[i]),
                       tg_dtype_size(s1.tensors[i]->dtype) * (size_t)tg_numel(s1.tensors[i])) == 0;
    printf("after save and load: lr %g, step 2 and state %s (%d entries)\n", tg_optimizer_lr(opt2),
           same ? "identical" : "DIFFER", s1.n);
    tg_tape_free(tp);
    tg_tape_free(mt);
    return worst <= 1e-6 && same ? 0 : 1;
}
