/* nn.Dropout(p): in training mode each element is zeroed with probability p
 * and survivors are scaled by 1/(1-p); in eval mode (or p = 0) the input
 * itself is returned. Draws from the module's generator (tg_module_set_generator). */
#include "nn_internal.h"

#include <stdio.h>

typedef struct {
    double p;
} dropout_state;

static tg_tensor *dropout_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *x)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    double p = ((const dropout_state *)tg_module_state(self))->p;
    if (!tg_module_is_training(self) || p == 0) return x[0];
    return tg_dropout(tp, x[0], p, tg_module_generator(self));
}

static int dropout_extra_repr(const tg_module *self, char *buf, size_t size)
{
    char p[32];
    tg__py_float(p, sizeof p, ((const dropout_state *)tg_module_state_const(self))->p);
    return snprintf(buf, size, "p=%s, inplace=False", p);
}

static const tg_module_type dropout_type = {.name = "Dropout", .forward = dropout_forward, .extra_repr = dropout_extra_repr};

bool tg__is_dropout(const tg_module *m) { return m && m->type == &dropout_type; }

bool tg__dropout_draws(const tg_module *m)
{
    return tg__is_dropout(m) && m->training && ((const dropout_state *)m->state)->p > 0;
}

tg_tensor *tg__dropout_forward_over(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    double p = ((const dropout_state *)tg_module_state(m))->p;
    if (!tg_module_is_training(m) || p == 0) return x;
    return tg__dropout_over(tp, x, p, tg_module_generator(m));
}

tg_module *tg_dropout_new(tg_tape *tp, double p)
{
    if (!tg__check_dropout("Dropout", p)) return NULL;
    tg_module *m = tg_module_new(tp, &dropout_type, sizeof(dropout_state));
    if (m) ((dropout_state *)tg_module_state(m))->p = p;
    return m;
}
