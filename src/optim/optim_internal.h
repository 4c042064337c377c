/* Private to src/optim: the optimizer struct behind the opaque tg_optimizer. */
#ifndef TG_OPTIM_INTERNAL_H
#define TG_OPTIM_INTERNAL_H

#include "internal.h"

typedef enum { TG__OPT_SGD, TG__OPT_ADAM, TG__OPT_ADAMW } tg__opt_kind;

/* Per-parameter state slots: SGD uses MOMENTUM (its buffer) and SCRATCH (the
 * decayed gradient); Adam uses EXP_AVG, EXP_AVG_SQ and MAX_EXP_AVG_SQ. */
enum { TG__SLOT_0, TG__SLOT_1, TG__SLOT_2, TG__NSLOTS };
#define TG__MOMENTUM TG__SLOT_0
#define TG__SCRATCH TG__SLOT_1
#define TG__EXP_AVG TG__SLOT_0
#define TG__EXP_AVG_SQ TG__SLOT_1
#define TG__MAX_EXP_AVG_SQ TG__SLOT_2

struct tg_optimizer {
    tg__opt_kind kind;
    tg_tape *tp;
    double lr;
    tg_sgd_options sgd;
    tg_adam_options adam;
    int n;
    tg_tensor **params;
    tg_tensor **slot[TG__NSLOTS]; /* n entries each, created on a parameter's first step */
    int64_t *steps;               /* steps taken per parameter */
};

/* A new optimizer of kind over the n params (duplicates dropped), checked to
 * be leaves that require grad; NULL with an error naming who. */
tg_optimizer *tg__optimizer_new(tg_tape *tp, tg__opt_kind kind, const char *who, int n, tg_tensor *const *params);
/* opt->slot[s][i], created (zeros, the parameter's dtype and shape) or
 * converted to the parameter's dtype when needed; NULL if out of memory. */
tg_tensor *tg__optimizer_slot(tg_optimizer *opt, int s, int i);

int tg__sgd_step(tg_optimizer *opt);
int tg__adam_step(tg_optimizer *opt);

#endif
