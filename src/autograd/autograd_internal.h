/* Private to src/autograd (and src/nn for the fused paths): nodes, recording,
 * gradient accumulation. */
#ifndef TG_AUTOGRAD_INTERNAL_H
#define TG_AUTOGRAD_INTERNAL_H

#include "internal.h"

typedef enum {
#define TG_OP(id, name, fn) TG_OP_##id,
#include "ops.def"
#undef TG_OP
    TG_OP_COUNT
} tg_op_id;

/* Backward: n->grad holds d(root)/d(n->out); add into the inputs' gradients. */
typedef void (*tg_backward_fn)(tg_node *n);

typedef struct {
    const char *name;
    tg_backward_fn backward;
} tg_op_def;

extern const tg_op_def tg_ops[TG_OP_COUNT];

#define TG_NODE_MAX_SAVED 4
#define TG_NODE_MAX_IARGS (2 * TG_MAX_DIMS + 4)

struct tg_node {
    tg_node_head head; /* first: the tensor layer reads the name through it */
    tg_op_id op;
    tg_tape *tape;
    tg_tensor *out;  /* header of the output (shape, dtype) */
    tg_tensor *grad; /* d(root)/d(out), filled during backward */
    tg_tensor **in;  /* inputs (backward skips those that need no grad) */
    int nin;
    tg_tensor *saved[TG_NODE_MAX_SAVED];
    int64_t iarg[TG_NODE_MAX_IARGS];
    double darg[4];
    tg_generator *gen;
    tg_node *prev; /* previous node recorded in the same tape */
    bool released;
};

/* Declarations of every backward function named in ops.def. */
#define TG_OP(id, name, fn) void fn(tg_node *n);
#include "ops.def"
#undef TG_OP

/* True if t takes part in autograd (requires grad). */
static inline bool tg__needs_grad(const tg_tensor *t) { return t && t->requires_grad; }

/* Records a node for out if grad mode is on and any input needs grad; marks out
 * as requiring grad.  Returns the
 * node (to fill saved/iarg), or NULL if nothing was recorded (not an error);
 * *err is set on allocation failure. */
tg_node *tg__record(tg_tape *tp, tg_op_id op, tg_tensor *out, int nin, tg_tensor *const *in,
                    bool *err);

/* The gradient buffer of t (contiguous, t's shape): a leaf's .grad in the
 * leaf's tape or the producing node's grad. *fresh is set when the buffer was
 * just created and holds garbage (kernels then overwrite instead of add);
 * with zero=true a fresh buffer is zeroed and *fresh is false. NULL if t needs
 * no grad or on allocation failure. */
tg_tensor *tg__grad_buf(tg_tensor *t, bool *fresh, bool zero);
/* Adds g into t's gradient, summing over broadcast dims when g's shape is
 * t's broadcast to more dims. No-op if t needs no grad. */
void tg__accum(tg_tensor *t, const tg_tensor *g);
/* Same, when g is owned by the caller and dead afterwards (a temporary, or a
 * finished node's gradient): a non-leaf may adopt g without a copy. */
void tg__accum_owned(tg_node *n, tg_tensor *t, const tg_tensor *g);
/* Tape in which backward temporaries of n are made. */
static inline tg_tape *tg__btape(const tg_node *n) { return n->tape; }
/* A result tensor header of shape like x with dtype dt in tp. */
tg_tensor *tg__new_like(tg_tape *tp, const tg_tensor *x);

/* Argument checks shared by ops: set an error and return false. */
bool tg__check_float(const char *op, const tg_tensor *x);
bool tg__check_same_dtype(const char *op, const tg_tensor *a, const tg_tensor *b);

#endif
