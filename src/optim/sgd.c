/* torch.optim.SGD: weight decay, momentum with dampening, Nesterov.
 *   d = grad + weight_decay * p
 *   buf = d (first step) or momentum * buf + (1 - dampening) * d
 *   d = d + momentum * buf (nesterov) or buf
 *   p -= lr * d */
#include "optim_internal.h"

tg_sgd *tg_sgd_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_sgd_options o)
{
    if (!(o.lr >= 0)) return tg_error("SGD: invalid learning rate: %g", o.lr);
    if (!(o.momentum >= 0)) return tg_error("SGD: invalid momentum value: %g", o.momentum);
    if (!(o.weight_decay >= 0)) return tg_error("SGD: invalid weight_decay value: %g", o.weight_decay);
    if (!(o.dampening >= 0 || o.dampening < 0)) return tg_error("SGD: invalid dampening value");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        return tg_error("SGD: Nesterov momentum requires a momentum and zero dampening");
    tg_optimizer *s = tg__optimizer_new(tp, TG__OPT_SGD, "SGD", n, params);
    if (!s) return NULL;
    s->sgd = o;
    s->lr = o.lr;
    return s;
}

tg_sgd *tg_sgd_new(tg_tape *tp, tg_module *m, tg_sgd_options o)
{
    if (!m) return tg_error("SGD: NULL module");
    tg_named_list l;
    if (tg_module_named_parameters(tp, m, &l) != TG_OK) return NULL;
    return tg_sgd_new_params(tp, l.n, l.tensors, o);
}

void tg_sgd_zero_grad(tg_sgd *s) { tg_optimizer_zero_grad(s); }

int tg_sgd_step(tg_sgd *s) { return tg_optimizer_step(s); }

int tg__sgd_step(tg_optimizer *s)
{
    const tg_sgd_options *o = &s->sgd;
    for (int i = 0; i < s->n; i++) {
        tg_tensor *p = s->params[i], *g = p->grad;
        if (!g) continue;
        tg_tensor *d = g;
        if (o->weight_decay != 0 || (o->momentum != 0 && o->nesterov)) {
            if (!(d = tg__optimizer_slot(s, TG__SCRATCH, i))) return TG_ENOMEM;
            tg_k_copy(d, g);
            if (o->weight_decay != 0) tg_k_axpy(d, p, o->weight_decay);
        }
        if (o->momentum != 0) {
            bool first = !s->slot[TG__MOMENTUM][i];
            tg_tensor *buf = tg__optimizer_slot(s, TG__MOMENTUM, i);
            if (!buf) return TG_ENOMEM;
            if (first) {
                tg_k_copy(buf, d);
            } else {
                tg_k_binary_scalar(buf, buf, o->momentum, TG_BIN_MUL, false);
                tg_k_axpy(buf, d, 1.0 - o->dampening);
            }
            if (o->nesterov)
                tg_k_axpy(d, buf, o->momentum);
            else
                d = buf;
        }
        tg_k_axpy(p, d, -o->lr);
        s->steps[i]++;
    }
    return TG_OK;
}
