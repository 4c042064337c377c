/* Private to src/optim: the optimizer struct behind the opaque tg_optimizer. */
#ifndef TG_OPTIM_INTERNAL_H
#define TG_OPTIM_INTERNAL_H

#include "internal.h"

struct tg_optimizer {
    const tg_optimizer_type *type;
    tg_tape *tp;
    double lr;       /* param_groups[0]["lr"]: the one copy step functions read */
    void *options;   /* a copy of the caller's options */
    int n;
    tg_tensor **params;
    tg_tensor **state; /* n * type->nstate, a parameter's created at its first step */
    int64_t *steps;    /* steps taken per parameter (PyTorch's state["step"]) */
    int current;       /* the parameter being stepped, or -1 */
    bool no_step_entry; /* state_dict holds no "step" */
};

#endif
