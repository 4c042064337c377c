/* Private to src/nn. */
#ifndef TG_NN_INTERNAL_H
#define TG_NN_INTERNAL_H

#include "internal.h"

tg_module *tg__module_new(tg_tape *tp, tg_module_kind kind, const char *type_name);
bool tg__module_add_param(tg_module *m, const char *name, tg_tensor *p);
bool tg__module_add_buffer(tg_module *m, const char *name, tg_tensor *b);
bool tg__module_add_child(tg_module *m, const char *name, tg_module *c);
/* Configuration checks: record an error naming op and return false. */
bool tg__check_size(const char *op, const char *what, int64_t v);
bool tg__check_dropout(const char *op, double p);

tg_tensor *tg__linear_forward(tg_tape *tp, tg_module *m, tg_tensor *x);
tg_tensor *tg__dropout_forward(tg_tape *tp, tg_module *m, tg_tensor *x);
/* The five attention modules (src/nn/attention.c). */
tg_tensor *tg__attention_forward(tg_tape *tp, tg_module *m, tg_tensor *x);

#endif
