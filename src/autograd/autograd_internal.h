/* Private to src/autograd: nodes, recording, gradient accumulation. */
#ifndef TG_AUTOGRAD_INTERNAL_H
#define TG_AUTOGRAD_INTERNAL_H

#include "internal.h"

typedef enum {
#define TG_OP(id, name, fn) TG_OP_##id,
#include "ops.def"
#undef TG_OP
    TG_OP_COUNT
} tg_op_id;

/* Backward: n->grad holds d(root)/d(n->out); add into the inputs' gradients.
 * Returns TG_OK, or an error status with its message recorded (TG_ENOMEM when
 * an allocation failed: the tape's message says which). */
typedef int (*tg_backward_fn)(tg_node *n);

typedef struct {
    const char *name;
    tg_backward_fn backward;
} tg_op_def;

extern const tg_op_def tg_ops[TG_OP_COUNT];

#define TG_NODE_MAX_IARGS (2 * TG_MAX_DIMS + 4)

struct tg_node {
    tg_node_head head; /* first: the tensor layer reads the name through it */
    tg_op_id op;
    int nin, nsaved;
    tg_tape *tape;
    tg_tensor *out;     /* header of the output (shape, dtype) */
    tg_tensor *grad;    /* d(root)/d(out), filled during backward */
    tg_tensor **in;     /* inputs (backward skips those that need no grad) */
    tg_tensor **saved;  /* what backward reads (nsaved entries) */
    int64_t *saved_version; /* their tg_tensor_version when recorded (backward checks) */
    int64_t iarg[TG_NODE_MAX_IARGS];
    double darg[4];
    tg_fn_ctx *fn;      /* user functions (TG_OP_FUNCTION): the context */
    uint64_t epoch;     /* the backward pass that last reached this node */
    uint64_t seq;       /* creation order: backward runs the latest ready node first */
    int64_t pending;    /* during backward: consumers that have not yet sent their gradient */
    bool released;
    tg_tensor *retained; /* tg_retain_grad: the output whose .grad receives grad when the node runs */
    tg_numerics numerics; /* its tape's policy when recorded; its backward runs under it */
};

/* Declarations of every backward function named in ops.def. */
#define TG_OP(id, name, fn) int fn(tg_node *n);
#include "ops.def"
#undef TG_OP

/* The linear layer on rows (src/autograd/op_matmul.c): y2 = x2 W^T + b
 * (x2 (R, in), y2 (R, out) contiguous; b may be NULL), and its backward:
 * dx = g2 W into x's gradient, or written to dx2 (R, in) when dx2 is not
 * NULL (an intermediate of a fused node); dW += g2^T x2; db += rows' sum. */
void tg__linear_rows(tg_numerics nm, tg_tensor *y2, const tg_tensor *x2, const tg_tensor *w, const tg_tensor *b);
int tg__linear_grads(tg_node *n, tg_tensor *x, const tg_tensor *x2, tg_tensor *w, tg_tensor *b, const tg_tensor *g2,
                     tg_tensor *dx2);
/* GELU's (tanh) input gradient for input a and output gradient dy, in tp,
 * under policy nm (src/autograd/op_elementwise.c): into dy itself when
 * in_place (dy a dense buffer the caller owns), else a new tensor. NULL if
 * out of memory. */
tg_tensor *tg__gelu_grad(tg_tape *tp, tg_numerics nm, const tg_tensor *a, tg_tensor *dy, bool in_place);

/* A contiguous tensor of `shape` over `data` (scratch memory, not a
 * tape's), with like's dtype, outside the graph. */
static inline tg_tensor tg__over(void *data, const tg_tensor *like, int ndim, const int64_t *shape)
{
    tg_tensor t = *like;
    t.data = data, t.offset = 0, t.ndim = ndim, t.grad = NULL, t.grad_fn = NULL, t.requires_grad = false;
    t.storage = NULL;
    for (int d = 0; d < ndim; d++) t.shape[d] = shape[d];
    tg__contiguous_strides(ndim, t.shape, t.stride);
    return t;
}

/* True if t takes part in autograd (requires grad). */
static inline bool tg__needs_grad(const tg_tensor *t) { return t && t->requires_grad; }

/* The one recording path of every op. If grad mode is on and any of the nin
 * inputs requires grad, records a node of kind op in tp for out (marking out
 * as requiring grad, with the node as its grad_fn) that keeps the inputs and
 * the nsaved tensors in saved for backward. Returns out, or NULL if out is
 * NULL (an earlier failure, its message kept) or the node could not be
 * allocated (message recorded). If node is not NULL, *node receives the node
 * (to store integer/double arguments in iarg/darg), or NULL when nothing was
 * recorded. */
tg_tensor *tg__record(tg_tape *tp, tg_op_id op, tg_tensor *out, int nin, tg_tensor *const *in, int nsaved,
                      tg_tensor *const *saved, tg_node **node);
/* Saved entry i of n (recorded, may be NULL) is kept for its shape, not its
 * values: backward does not read them (PyTorch saves less: AddBackward0
 * nothing, MulBackward0 one factor per input that requires grad), so a
 * write to it is allowed, as PyTorch allows it. */
static inline void tg__saved_shape_only(tg_node *n, int i)
{
    if (n && i < n->nsaved) n->saved_version[i] = -1;
}
/* Whether tg__record with these inputs records a node (grad mode on, an
 * input requiring grad): an op whose saved tensors cost work may skip them. */
bool tg__will_record(int nin, tg_tensor *const *in);

/* The gradient buffer of t (contiguous, t's shape): a leaf's .grad in the
 * leaf's tape or the producing node's grad. *fresh is set when the buffer was
 * just created and holds garbage (kernels then overwrite instead of add);
 * with zero=true a fresh buffer is zeroed and *fresh is false. NULL if t needs
 * no grad or on allocation failure (callers check tg__needs_grad first, so
 * NULL means TG_ENOMEM). */
tg_tensor *tg__grad_buf(tg_tensor *t, bool *fresh, bool zero);
/* Whether t's gradient buffer holds a gradient already: one this backward
 * or an earlier one wrote, not the zeros tg_zero_grad left (adding to those
 * is writing, bit for bit). */
bool tg__grad_held(const tg_tensor *t);
/* Adds g into t's gradient, summing over broadcast dims when g's shape is
 * t's broadcast to more dims. No-op if t needs no grad. TG_OK or TG_ENOMEM. */
int tg__accum(tg_tensor *t, const tg_tensor *g);
/* Same, when g is owned by the caller and dead afterwards (a temporary, or a
 * finished node's gradient): a non-leaf may adopt g without a copy. */
int tg__accum_owned(tg_node *n, tg_tensor *t, const tg_tensor *g);
/* Tape in which backward temporaries of n are made. */
static inline tg_tape *tg__btape(const tg_node *n) { return n->tape; }
/* A result tensor header of shape like x with dtype dt in tp. */
tg_tensor *tg__new_like(tg_tape *tp, const tg_tensor *x);
/* x itself when contiguous, else a contiguous copy in tp (NULL when out of
 * memory): for kernels that walk the data row-major. */
const tg_tensor *tg__dense(tg_tape *tp, const tg_tensor *x);
/* RoPE as one node (op_rope.c): x (..., T, hd), cos and sin (T, hd). */
tg_tensor *tg__rope(tg_tape *tp, tg_tensor *x, tg_tensor *cos, tg_tensor *sin);

/* Element k (row-major, from the offset) of a contiguous float tensor. */
static inline double tg__get_dense(const tg_tensor *t, int64_t k)
{
    return t->dtype == TG_F32 ? (double)((const float *)t->data)[t->offset + k] : ((const double *)t->data)[t->offset + k];
}
static inline void tg__set_dense(tg_tensor *t, int64_t k, double v)
{
    if (t->dtype == TG_F32)
        ((float *)t->data)[t->offset + k] = (float)v;
    else
        ((double *)t->data)[t->offset + k] = v;
}

/* Argument checks shared by ops: set an error and return false. */
bool tg__check_float(const char *op, const tg_tensor *x);
bool tg__check_same_dtype(const char *op, const tg_tensor *a, const tg_tensor *b);
/* w read as a weight by x (linear's W and bias, matmul's second operand):
 * of x's float dtype, or bfloat16 with a float32 x (a frozen weight, read
 * widened under EXACT and FAST, as it is under BF16). False with an error
 * naming op otherwise. */
bool tg__check_weight_dtype(const char *op, const tg_tensor *x, const tg_tensor *w);

#endif
