/* torch.optim.SGD: weight decay, momentum with dampening, Nesterov.
 *   d = grad + weight_decay * p
 *   buf = d (first step) or momentum * buf + (1 - dampening) * d
 *   d = d + momentum * buf (nesterov) or buf
 *   p -= lr * d
 * element by element in the parameter's dtype, each scalar rounded to it,
 * the products and sums rounded one by one as PyTorch's add_(x, alpha) and
 * mul_ are. Written through the public optimizer type (tapegrad/optim.h),
 * as a user's optimizer is. */
#include "tapegrad/optim.h"

#define SGD_KERNEL(T, SUF)                                                                             \
    static void sgd_##SUF(T *restrict p, const T *restrict g, T *restrict buf, int64_t n,              \
                          const tg_sgd_options *o, double lr, bool first)                              \
    {                                                                                                  \
        const T wd = (T)o->weight_decay, mom = (T)o->momentum, damp = (T)(1.0 - o->dampening);        \
        const T neg_lr = (T)-lr;                                                                       \
        const bool decay = o->weight_decay != 0, nesterov = o->nesterov;                               \
        for (int64_t i = 0; i < n; i++) {                                                              \
            T d = g[i];                                                                                \
            if (decay) d = d + wd * p[i];                                                              \
            if (buf) {                                                                                 \
                T b = first ? d : buf[i] * mom + damp * d;                                             \
                buf[i] = b;                                                                            \
                d = nesterov ? d + mom * b : b;                                                        \
            }                                                                                          \
            p[i] = p[i] + neg_lr * d;                                                                  \
        }                                                                                              \
    }

SGD_KERNEL(float, f32)
SGD_KERNEL(double, f64)

static int sgd_step(tg_optimizer *s, tg_tensor *p, const tg_tensor *g, tg_tensor *const *state)
{
    const tg_sgd_options *o = tg_optimizer_options(s);
    const double lr = tg_optimizer_lr(s);
    void *buf = o->momentum != 0 ? tg_data_ptr(state[0]) : NULL;
    bool first = tg_optimizer_step_count(s) == 1;
    if (p->dtype == TG_F32)
        sgd_f32(tg_data_ptr(p), tg_data_ptr(g), buf, tg_numel(p), o, lr, first);
    else
        sgd_f64(tg_data_ptr(p), tg_data_ptr(g), buf, tg_numel(p), o, lr, first);
    return TG_OK;
}

static const char *const sgd_state[] = {"momentum_buffer"};
/* momentum keeps a buffer per parameter */
static const tg_optimizer_type sgd_type[2] = {{"SGD", 0, sgd_state, sgd_step}, {"SGD", 1, sgd_state, sgd_step}};

tg_sgd *tg_sgd_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_sgd_options o)
{
    if (!(o.lr >= 0)) return tg_error("SGD: invalid learning rate: %g", o.lr);
    if (!(o.momentum >= 0)) return tg_error("SGD: invalid momentum value: %g", o.momentum);
    if (!(o.weight_decay >= 0)) return tg_error("SGD: invalid weight_decay value: %g", o.weight_decay);
    if (!(o.dampening >= 0 || o.dampening < 0)) return tg_error("SGD: invalid dampening value");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        return tg_error("SGD: Nesterov momentum requires a momentum and zero dampening");
    tg_sgd *s = tg_optimizer_new_params(tp, &sgd_type[o.momentum != 0], n, params, o.lr, &o, sizeof o);
    if (s) tg_optimizer_set_step_in_state_dict(s, false); /* PyTorch's SGD saves no step */
    return s;
}

tg_sgd *tg_sgd_new(tg_tape *tp, tg_module *m, tg_sgd_options o)
{
    if (!m) return tg_error("SGD: NULL module");
    tg_named_list l;
    if (!tp) return tg_error("SGD: NULL tape");
    if (tg_module_named_parameters(tp, m, &l) != TG_OK) return NULL;
    return tg_sgd_new_params(tp, l.n, l.tensors, o);
}

void tg_sgd_zero_grad(tg_sgd *s) { tg_optimizer_zero_grad(s); }

int tg_sgd_step(tg_sgd *s) { return tg_optimizer_step(s); }
