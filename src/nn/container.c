/* Containers: nn.Sequential (children "0", "1", ... run in order) and
 * nn.ModuleList (the same children, no forward of its own). */
#include "nn_internal.h"

#include <stdio.h>

/* forward: for module in self: input = module(input) */
static tg_tensor *sequential_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *x)
{
    if (!tg__check_ninputs(self, n, 1)) return NULL;
    tg_tensor *y = x[0];
    for (int i = 0; y && i < tg_module_num_children(self); i++) y = tg_module_forward(tp, tg_module_child(self, i), y);
    return y;
}

static const tg_module_type sequential_type = {.name = "Sequential", .forward = sequential_forward};
static const tg_module_type module_list_type = {.name = "ModuleList"};

bool tg__is_sequential(const tg_module *m) { return m && m->type == &sequential_type; }

int tg_module_append(tg_module *m, tg_module *child)
{
    if (!m) return tg_error_status(TG_EINVAL, "append: NULL module");
    char name[24];
    snprintf(name, sizeof name, "%d", tg_module_num_children(m));
    return tg_module_add_module(m, name, child);
}

static tg_module *container_new(tg_tape *tp, const tg_module_type *type, int n, tg_module *const *children)
{
    if (n < 0 || (n > 0 && !children)) return tg_error("%s: bad list of %d children", type->name, n);
    tg_module *m = tg_module_new(tp, type, 0);
    for (int i = 0; m && i < n; i++)
        if (tg_module_append(m, children[i]) != TG_OK) return NULL;
    return m;
}

tg_module *tg_sequential_new(tg_tape *tp, int n, tg_module *const *children)
{
    return container_new(tp, &sequential_type, n, children);
}

tg_module *tg_module_list_new(tg_tape *tp, int n, tg_module *const *children)
{
    return container_new(tp, &module_list_type, n, children);
}
