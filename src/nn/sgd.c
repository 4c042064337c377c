/* torch.optim.SGD: weight decay, momentum with dampening, Nesterov.
 *   d = grad + weight_decay * p
 *   buf = d (first step) or momentum * buf + (1 - dampening) * d
 *   d = d + momentum * buf (nesterov) or buf
 *   p -= lr * d */
#include "nn_internal.h"

struct tg_sgd {
    tg_tape *tp;
    tg_sgd_options opt;
    int n;
    tg_tensor **params;
    tg_tensor **bufs;    /* momentum buffers, created on first use */
    tg_tensor **scratch; /* per-parameter scratch for the decayed gradient */
};

tg_sgd *tg_sgd_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_sgd_options o)
{
    if (!tp) return tg_error("SGD: NULL tape");
    if (n < 0 || (n > 0 && !params)) return tg_error("SGD: bad parameter list");
    if (!(o.lr >= 0)) return tg_error("SGD: invalid learning rate: %g", o.lr);
    if (!(o.momentum >= 0)) return tg_error("SGD: invalid momentum value: %g", o.momentum);
    if (!(o.weight_decay >= 0)) return tg_error("SGD: invalid weight_decay value: %g", o.weight_decay);
    if (!(o.dampening >= 0 || o.dampening < 0)) return tg_error("SGD: invalid dampening value");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        return tg_error("SGD: Nesterov momentum requires a momentum and zero dampening");
    for (int i = 0; i < n; i++) {
        if (!params[i]) return tg_error("SGD: parameter %d is NULL", i);
        if (!params[i]->requires_grad || params[i]->grad_fn)
            return tg_error("SGD: parameter %d is not a leaf that requires grad", i);
    }
    tg_sgd *s = tg_tape_alloc(tp, sizeof *s, true);
    if (!s) return NULL;
    s->tp = tp;
    s->opt = o;
    s->params = tg_tape_alloc(tp, sizeof *s->params * (size_t)(n ? n : 1), false);
    s->bufs = tg_tape_alloc(tp, sizeof *s->bufs * (size_t)(n ? n : 1), true);
    s->scratch = tg_tape_alloc(tp, sizeof *s->scratch * (size_t)(n ? n : 1), true);
    if (!s->params || !s->bufs || !s->scratch) return NULL;
    /* A tensor listed twice (tied weights) is one parameter: updated once. */
    for (int i = 0; i < n; i++) {
        bool dup = false;
        for (int j = 0; j < s->n && !dup; j++) dup = s->params[j] == params[i];
        if (!dup) s->params[s->n++] = params[i];
    }
    return s;
}

tg_sgd *tg_sgd_new(tg_tape *tp, tg_module *m, tg_sgd_options o)
{
    if (!m) return tg_error("SGD: NULL module");
    tg_named_list l;
    if (tg_module_named_parameters(tp, m, &l) != TG_OK) return NULL;
    return tg_sgd_new_params(tp, l.n, l.tensors, o);
}

void tg_sgd_zero_grad(tg_sgd *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) tg_zero_grad(s->params[i]);
}

int tg_sgd_step(tg_sgd *s)
{
    if (!s) return tg_error_status(TG_EINVAL, "SGD step: NULL optimizer");
    bool prev = tg_set_grad_enabled(false);
    const tg_sgd_options *o = &s->opt;
    int status = TG_OK;
    for (int i = 0; i < s->n; i++) {
        tg_tensor *p = s->params[i], *g = p->grad;
        if (!g) continue;
        tg_tensor *d = g;
        /* The module was converted (tg_module_to_dtype) since the last step:
         * the state follows the parameter's dtype. */
        if (s->bufs[i] && s->bufs[i]->dtype != p->dtype && !(s->bufs[i] = tg_to_dtype(s->tp, s->bufs[i], p->dtype))) {
            status = TG_ENOMEM;
            break;
        }
        if (s->scratch[i] && s->scratch[i]->dtype != g->dtype) s->scratch[i] = NULL;
        if (o->weight_decay != 0 || (o->momentum != 0 && o->nesterov)) {
            if (!s->scratch[i]) s->scratch[i] = tg_empty_like(s->tp, g);
            d = s->scratch[i];
            if (!d) {
                status = TG_ENOMEM;
                break;
            }
            tg_k_copy(d, g);
            if (o->weight_decay != 0) tg_k_axpy(d, p, o->weight_decay);
        }
        if (o->momentum != 0) {
            if (!s->bufs[i]) {
                s->bufs[i] = tg_empty_like(s->tp, d);
                if (!s->bufs[i]) {
                    status = TG_ENOMEM;
                    break;
                }
                tg_k_copy(s->bufs[i], d);
            } else {
                tg_k_binary_scalar(s->bufs[i], s->bufs[i], o->momentum, TG_BIN_MUL, false);
                tg_k_axpy(s->bufs[i], d, 1.0 - o->dampening);
            }
            if (o->nesterov)
                tg_k_axpy(d, s->bufs[i], o->momentum);
            else
                d = s->bufs[i];
        }
        tg_k_axpy(p, d, -o->lr);
    }
    tg_set_grad_enabled(prev);
    return status;
}
