/* The autograd engine: the op table, recording nodes on the tape, gradient
 * buffers, and backward() as a walk over the graph in topological order. */
#include "autograd_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

const tg_op_def tg_ops[TG_OP_COUNT] = {
#define TG_OP(id, name, fn) [TG_OP_##id] = {name, fn},
#include "ops.def"
#undef TG_OP
};

static _Thread_local bool grad_disabled;

bool tg_is_grad_enabled(void) { return !grad_disabled; }

bool tg_set_grad_enabled(bool enabled)
{
    bool prev = !grad_disabled;
    grad_disabled = !enabled;
    return prev;
}

const char *tg_grad_fn_name(const tg_tensor *x) { return x ? tg__node_head_name(x->grad_fn) : NULL; }
bool tg_is_leaf(const tg_tensor *x) { return x && !x->grad_fn; }

int tg_requires_grad_(tg_tensor *x, bool requires_grad)
{
    if (!x) return tg_error_status(TG_EINVAL, "requires_grad_: NULL tensor");
    if (x->grad_fn)
        return tg_error_status(TG_EINVAL, "requires_grad_: only leaf tensors can change requires_grad");
    if (requires_grad && (x->dtype == TG_BF16 || x->dtype == TG_Q8))
        return tg_error_status(TG_EINVAL, "requires_grad_: a %s tensor cannot require gradients (%s "
                                          "is the storage of frozen weights; train a float32 tensor)",
                               tg_dtype_name(x->dtype), x->dtype == TG_Q8 ? "q8_0" : "bf16");
    if (requires_grad && !tg__is_float(x->dtype))
        return tg_error_status(TG_EINVAL, "requires_grad_: only floating point tensors can require "
                                          "gradients (got %s)", tg_dtype_name(x->dtype));
    x->requires_grad = requires_grad;
    return TG_OK;
}

int tg_retain_grad(tg_tensor *x)
{
    if (!x) return tg_error_status(TG_EINVAL, "retain_grad: NULL tensor");
    if (!x->requires_grad)
        return tg_error_status(TG_EINVAL, "retain_grad: can't retain_grad on Tensor that has requires_grad=False");
    if (x->grad_fn) x->grad_fn->retained = x; /* a leaf keeps its .grad anyway */
    return TG_OK;
}

tg_tensor *tg_detach(tg_tape *tp, tg_tensor *x)
{
    if (!x) return tg__error_null_input("detach");
    return tg__alias(tp, x);
}

void tg_zero_grad(tg_tensor *x)
{
    if (x && x->grad) tg__bump(x->grad);
    if (x && x->grad) memset(x->grad->data, 0, (size_t)tg_numel(x->grad) * tg_dtype_size(x->grad->dtype));
    if (x && x->grad && x->grad->storage) x->grad->storage->grad_zeroed = true;
}

bool tg__check_float(const char *op, const tg_tensor *x)
{
    if (!tg__is_float(x->dtype)) {
        tg_error("%s: expected a float32 or float64 tensor, got %s%s", op, tg_dtype_name(x->dtype),
                 x->dtype == TG_BF16 || x->dtype == TG_Q8
                     ? " (bfloat16 and q8_0 weights are read by embedding, linear and matmul's second operand)"
                     : "");
        return false;
    }
    return true;
}

bool tg__check_weight_dtype(const char *op, const tg_tensor *x, const tg_tensor *w)
{
    if (w->dtype != TG_BF16 && w->dtype != TG_Q8) return tg__check_same_dtype(op, x, w);
    if (x->dtype != TG_F32) {
        tg_error("%s: a %s weight multiplies float32 inputs, got %s", op, tg_dtype_name(w->dtype),
                 tg_dtype_name(x->dtype));
        return false;
    }
    if (w->dtype == TG_Q8 && w->ndim != 2) {
        tg_error("%s: a q8_0 weight must be 2-D, got %d dims", op, w->ndim);
        return false;
    }
    return true;
}

bool tg__check_same_dtype(const char *op, const tg_tensor *a, const tg_tensor *b)
{
    if (!tg__check_float(op, a) || !tg__check_float(op, b)) return false;
    if (a->dtype != b->dtype) {
        tg_error("%s: dtype mismatch: %s and %s", op, tg_dtype_name(a->dtype), tg_dtype_name(b->dtype));
        return false;
    }
    return true;
}

tg_tensor *tg__new_like(tg_tape *tp, const tg_tensor *x) { return tg_empty(tp, x->dtype, x->ndim, x->shape); }

const tg_tensor *tg__dense(tg_tape *tp, const tg_tensor *x)
{
    if (tg_is_contiguous(x)) return x;
    tg_tensor *c = tg__new_like(tp, x);
    if (c) tg_k_copy(c, x);
    return c;
}

/* ---- recording ------------------------------------------------------------------ */

/* Nodes are numbered as they are created (PyTorch's sequence_nr). */
static atomic_uint_fast64_t node_seq;

bool tg__will_record(int nin, tg_tensor *const *in)
{
    if (grad_disabled) return false;
    bool any = false;
    for (int i = 0; i < nin; i++) any |= tg__needs_grad(in[i]);
    return any;
}

tg_tensor *tg__record(tg_tape *tp, tg_op_id op, tg_tensor *out, int nin, tg_tensor *const *in, int nsaved,
                      tg_tensor *const *saved, tg_node **node)
{
    if (node) *node = NULL;
    if (!out) return NULL;
    if (!tg__will_record(nin, in)) return out;
    /* One block: the node, its saved tensors' versions, its inputs, its
     * saved tensors. */
    size_t size = sizeof(tg_node) + sizeof(int64_t) * (size_t)nsaved +
                  sizeof(tg_tensor *) * ((size_t)nin + (size_t)nsaved);
    tg_node *n = tg_tape_alloc(tp, size, true);
    if (!n) return NULL;
    n->saved_version = (int64_t *)(void *)(n + 1);
    n->in = (tg_tensor **)(void *)(n->saved_version + nsaved);
    n->saved = n->in + nin;
    for (int i = 0; i < nin; i++) n->in[i] = in[i];
    for (int i = 0; i < nsaved; i++) {
        n->saved[i] = saved[i];
        n->saved_version[i] = tg_tensor_version(saved[i]);
    }
    n->head.name = tg_ops[op].name;
    n->seq = (uint64_t)atomic_fetch_add(&node_seq, 1);
    n->op = op;
    n->numerics = tg_tape_numerics(tp);
    n->tape = tp;
    n->out = out;
    n->nin = nin;
    n->nsaved = nsaved;
    out->grad_fn = n;
    out->requires_grad = true;
    if (node) *node = n;
    return out;
}

/* ---- gradient buffers ------------------------------------------------------------ */

bool tg__grad_held(const tg_tensor *t)
{
    const tg_tensor *g = t->grad_fn ? t->grad_fn->grad : t->grad;
    return g && !(g->storage && g->storage->grad_zeroed);
}

tg_tensor *tg__grad_buf(tg_tensor *t, bool *fresh, bool zero)
{
    if (!tg__needs_grad(t)) return NULL;
    tg_tensor **slot = t->grad_fn ? &t->grad_fn->grad : &t->grad;
    *fresh = false;
    if (*slot && (*slot)->storage) (*slot)->storage->grad_zeroed = false; /* about to be written */
    if (!*slot) {
        /* A leaf's gradient outlives the step: it lives in the leaf's tape. */
        tg_tape *tp = t->grad_fn ? t->grad_fn->tape : t->tape;
        tg_tensor *g = tg_empty(tp, t->dtype, t->ndim, t->shape);
        if (!g) return NULL;
        if (zero)
            memset(g->data, 0, (size_t)tg_numel(g) * tg_dtype_size(g->dtype));
        else
            *fresh = true;
        *slot = g;
    }
    return *slot;
}

int tg__accum(tg_tensor *t, const tg_tensor *g)
{
    if (!tg__needs_grad(t) || !g) return TG_OK;
    bool fresh;
    bool same = tg_same_shape(t, g);
    tg_tensor *buf = tg__grad_buf(t, &fresh, !same);
    if (!buf) return TG_ENOMEM;
    if (same) {
        if (fresh)
            tg_k_copy(buf, g);
        else
            tg_k_axpy(buf, g, 1.0);
        return TG_OK;
    }
    /* g has t's shape broadcast: sum the extra leading dims and the dims where
     * t has size 1, viewing buf with g's rank. */
    tg_tensor view = *buf;
    view.ndim = g->ndim;
    int lead = g->ndim - t->ndim;
    for (int d = 0; d < g->ndim; d++) {
        view.shape[d] = d < lead ? 1 : t->shape[d - lead];
    }
    tg__contiguous_strides(view.ndim, view.shape, view.stride);
    tg_tensor *tmp = tg_empty(g->tape ? g->tape : buf->tape, buf->dtype, view.ndim, view.shape);
    if (!tmp) return TG_ENOMEM;
    tg_k_sum_to(tmp, g);
    tg_k_axpy(&view, tmp, 1.0);
    return TG_OK;
}

int tg__accum_owned(tg_node *n, tg_tensor *t, const tg_tensor *g)
{
    if (!tg__needs_grad(t) || !g) return TG_OK;
    /* A non-leaf's first gradient can simply be g: nothing else reads or
     * writes g after this, so adopt it instead of copying. Leaves keep their
     * own buffer (it must outlive the step tape). */
    if (t->grad_fn && !t->grad_fn->grad && tg_same_shape(t, g) && t->dtype == g->dtype && tg_is_contiguous(g)) {
        tg_tensor *h = tg__alias(n->tape, g);
        if (!h) return TG_ENOMEM;
        t->grad_fn->grad = h;
        return TG_OK;
    }
    return tg__accum(t, g);
}

/* ---- backward ---------------------------------------------------------------------- */

static tg_tensor **grad_slot(tg_tensor *t) { return t->grad_fn ? &t->grad_fn->grad : &t->grad; }

/* One node's backward. Its gradient is dropped afterwards (nothing reads it
 * again); storage that backward handed out from the tape's pool and that no
 * gradient slot points into goes back to the pool, with the dropped
 * gradient's own block: consumed gradients make room for the next ones
 * (src/tensor/tape.c). A user function's node runs outside the pool, and
 * its gradient is never handed back: its backward may keep what it got. */
enum { POOL_MAX_IN = 16 };

static int run_node(tg_node *n)
{
    tg_tape *tp = n->tape;
    bool pool = n->op != TG_OP_FUNCTION && n->nin <= POOL_MAX_IN;
    bool was_set[POOL_MAX_IN];
    for (int i = 0; pool && i < n->nin; i++) was_set[i] = tg__needs_grad(n->in[i]) && *grad_slot(n->in[i]);
    if (pool) tg__tape_pool_begin(tp);
    uint64_t scope = tg__bf16_scope_begin(n->op != TG_OP_FUNCTION); /* a user's backward may write anything */
    int status = tg_ops[n->op].backward(n);
    tg__bf16_scope_end(scope);
    if (pool) {
        tg__tape_pool_end(tp);
        /* each slot that backward filled holds a reference (a tensor given
         * twice as an input counts once) */
        for (int i = 0; i < n->nin; i++) {
            if (was_set[i] || !tg__needs_grad(n->in[i])) continue;
            tg_tensor **slot = grad_slot(n->in[i]);
            bool dup = false;
            for (int j = 0; j < i && !dup; j++) dup = tg__needs_grad(n->in[j]) && grad_slot(n->in[j]) == slot;
            if (*slot && !dup) tg__tape_pool_ref(tp, (*slot)->data, 1);
        }
        const void *dropped = n->grad ? n->grad->data : NULL;
        tg__tape_pool_ref(tp, dropped, -1);
        tg__tape_pool_collect(tp, dropped);
    }
    n->grad = NULL;
    return status;
}

/* A node whose output retains its gradient (tg_retain_grad): the gradient
 * it is about to run with, complete, added into the output's .grad (made in
 * the output's own tape on first use, as a leaf's is), before backward hands
 * the node's buffer back to the pool. */
static int retain(const tg_node *n)
{
    tg_tensor *x = n->retained;
    if (x->grad) {
        tg_k_axpy(x->grad, n->grad, 1.0);
        return TG_OK;
    }
    tg_tensor *g = tg_empty(x->tape, x->dtype, x->ndim, x->shape);
    if (!g) return TG_ENOMEM;
    tg_k_copy(g, n->grad);
    x->grad = g;
    return TG_OK;
}

/* Each backward pass takes a new number; a node reached by the pass carries it,
 * so "visited" needs no pass over old nodes to clear marks. */
static atomic_uint_fast64_t backward_epoch;

typedef struct {
    tg_node *n;
    int next; /* the next input of n to look at */
} dfs_frame;

/* Grows a scratch array in tp to twice its capacity (the old block stays in
 * the tape until it is reset). NULL on failure, with the tape's message. */
static void *grow(tg_tape *tp, void *old, size_t *cap, size_t elem)
{
    size_t nc = *cap ? *cap * 2 : 256;
    if (nc > SIZE_MAX / 2 / elem) return tg_error("backward: graph too large");
    void *p = tg_tape_alloc(tp, nc * elem, false);
    if (!p) return NULL;
    if (old) memcpy(p, old, *cap * elem);
    *cap = nc;
    return p;
}

/* The nodes reachable from rn through inputs that require grad, whatever tape
 * each was recorded in (an iterative depth-first search: graphs may be far
 * deeper than the C stack), each with its count of consumers in the graph
 * (pending) and its gradient reset (a previous backward's is stale). Scratch
 * lives in rn's tape, so a step loop that resets that tape allocates nothing
 * after its first step. */
static int collect(tg_node *rn, tg_node ***order_out, size_t *count)
{
    tg_tape *tp = rn->tape;
    uint64_t e = (uint64_t)atomic_fetch_add(&backward_epoch, 1) + 1;
    size_t scap = 0, ocap = 0, sp = 0, no = 0;
    dfs_frame *stack = grow(tp, NULL, &scap, sizeof *stack);
    tg_node **order = stack ? grow(tp, NULL, &ocap, sizeof *order) : NULL;
    if (!order) return TG_ENOMEM;
    rn->epoch = e;
    rn->grad = NULL;
    rn->pending = 0;
    stack[sp++] = (dfs_frame){rn, 0};
    while (sp > 0) {
        dfs_frame *f = &stack[sp - 1];
        tg_node *n = f->n;
        if (f->next < n->nin) {
            tg_tensor *t = n->in[f->next++];
            tg_node *c = tg__needs_grad(t) ? t->grad_fn : NULL;
            if (!c) continue;
            if (c->epoch == e) {
                c->pending++;
                continue;
            }
            c->epoch = e;
            c->grad = NULL;
            c->pending = 1;
            if (sp == scap && !(stack = grow(tp, stack, &scap, sizeof *stack))) return TG_ENOMEM;
            stack[sp++] = (dfs_frame){c, 0};
        } else {
            sp--;
            if (no == ocap && !(order = grow(tp, order, &ocap, sizeof *order))) return TG_ENOMEM;
            order[no++] = n;
        }
    }
    *order_out = order;
    *count = no;
    return TG_OK;
}

static void heap_push(tg_node **h, size_t *n, tg_node *x)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2]->seq < x->seq) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static void heap_pop(tg_node **h, size_t *n)
{
    tg_node *x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1]->seq > h[c]->seq) c++;
        if (h[c]->seq <= x->seq) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = x;
}

/* ---- the gradient watch (internal.h) ---------------------------------------------------- */

static _Thread_local tg__grad_watch *watch;
/* Backward passes running on this thread: a node's backward may run one of
 * its own (tg_module_call_recompute's replay, src/nn/module.c). The
 * watch belongs to the outermost: a nested pass's leaves count as fed by
 * the outer node that runs it, so they are ready when that node has run. */
static _Thread_local int depth;

static size_t leaf_hash(const tg_tensor *t, size_t mask)
{
    return (size_t)(((uint64_t)(uintptr_t)t >> 4) * UINT64_C(0x9E3779B97F4A7C15) >> 20) & mask;
}

static int64_t watch_find(const tg__grad_watch *w, const tg_tensor *t)
{
    for (size_t h = leaf_hash(t, w->mask);; h = (h + 1) & w->mask) {
        int64_t i = w->index[h];
        if (i < 0 || w->leaves[i] == t) return i;
    }
}

int tg__grad_watch_set(tg__grad_watch *w)
{
    if (watch) return tg_error_status(TG_ESTATE, "backward: another gradient watch is already set on this thread");
    if (!w || w->n < 0 || (w->n > 0 && !w->leaves) || !w->ready)
        return tg_error_status(TG_EINVAL, "backward: bad gradient watch");
    size_t cap = 16;
    while (cap < 2 * (size_t)w->n) cap *= 2;
    w->mask = cap - 1;
    w->index = malloc(sizeof *w->index * cap);
    w->pending = calloc((size_t)w->n + 1, sizeof *w->pending);
    if (!w->index || !w->pending) {
        free(w->index), free(w->pending);
        w->index = w->pending = NULL;
        return tg_error_status(TG_ENOMEM, "backward: out of memory for the gradient watch");
    }
    for (size_t h = 0; h < cap; h++) w->index[h] = -1;
    for (int64_t i = 0; i < w->n; i++) {
        if (watch_find(w, w->leaves[i]) >= 0) continue; /* listed twice: the first */
        size_t h = leaf_hash(w->leaves[i], w->mask);
        while (w->index[h] >= 0) h = (h + 1) & w->mask;
        w->index[h] = i;
    }
    watch = w;
    return TG_OK;
}

void tg__grad_watch_clear(tg__grad_watch *w)
{
    if (!w) return;
    if (watch == w) watch = NULL;
    free(w->index), free(w->pending);
    w->index = w->pending = NULL;
}

static bool watched_leaf(const tg_tensor *t, int64_t *i)
{
    if (!t || t->grad_fn || !t->requires_grad) return false;
    *i = watch_find(watch, t);
    return *i >= 0;
}

/* Before the walk: each watched leaf's count of edges from the graph's nodes. */
static void watch_count(tg_node *const *nodes, size_t count)
{
    memset(watch->pending, 0, sizeof *watch->pending * (size_t)watch->n);
    for (size_t k = 0; k < count; k++)
        for (int j = 0; j < nodes[k]->nin; j++) {
            int64_t i;
            if (watched_leaf(nodes[k]->in[j], &i)) watch->pending[i]++;
        }
}

/* After node n: the leaves it fed for the last time are ready. */
static int watch_after(const tg_node *n)
{
    for (int j = 0; j < n->nin; j++) {
        int64_t i;
        if (watched_leaf(n->in[j], &i) && --watch->pending[i] == 0) {
            int st = watch->ready(watch->ctx, i);
            if (st != TG_OK) return st;
        }
    }
    return watch->progress ? watch->progress(watch->ctx) : TG_OK;
}

/* PyTorch's name of a tensor type, as its messages print it. */
static const char *torch_type(tg_dtype dt)
{
    switch (dt) {
    case TG_F32: return "torch.FloatTensor";
    case TG_F64: return "torch.DoubleTensor";
    case TG_BOOL: return "torch.BoolTensor";
    case TG_U8: return "torch.ByteTensor";
    case TG_I64: return "torch.LongTensor";
    case TG_BF16: return "torch.BFloat16Tensor";
    default: return "torch.Tensor";
    }
}

/* Before any gradient is written: every tensor a node of the graph saved is
 * still at the version it was saved at (PyTorch's SavedVariable::unpack,
 * checked for the whole graph up front, so a refused backward leaves every
 * .grad as it was). A released node is skipped: backward refuses it anyway. */
static int check_versions(tg_node *const *nodes, size_t count)
{
    for (size_t k = 0; k < count; k++) {
        const tg_node *n = nodes[k];
        for (int i = 0; !n->released && i < n->nsaved; i++) {
            const tg_tensor *t = n->saved[i];
            int64_t v = tg_tensor_version(t);
            if (!t || v == n->saved_version[i] || n->saved_version[i] < 0) continue;
            char shape[160] = "[", of[96] = "";
            size_t len = 1;
            for (int d = 0; d < t->ndim && len < sizeof shape - 24; d++)
                len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", d ? ", " : "",
                                        (long long)t->shape[d]);
            snprintf(shape + len, sizeof shape - len, "]");
            if (t->grad_fn) snprintf(of, sizeof of, ", which is output 0 of %s,", tg_grad_fn_name(t));
            return tg_error_status(TG_ESTATE, "one of the variables needed for gradient computation has been "
                                              "modified by an inplace operation: [%s %s]%s is at version %lld; "
                                              "expected version %lld instead.",
                                   torch_type(t->dtype), shape, of, (long long)v, (long long)n->saved_version[i]);
        }
    }
    return TG_OK;
}

int tg_backward(tg_tensor *root, const tg_tensor *grad, bool retain_graph)
{
    if (!root) return tg_error_status(TG_EINVAL, "backward: NULL tensor");
    if (!root->requires_grad)
        return tg_error_status(TG_EINVAL, "backward: element 0 of tensors does not require grad and "
                                          "does not have a grad_fn");
    if (!grad && tg_numel(root) != 1)
        return tg_error_status(TG_EINVAL, "backward: grad can be implicitly created only for scalar "
                                          "outputs (got shape %s)",
                               tg_shape_str(root, (char[64]){0}, 64));
    if (grad && !tg_same_shape(grad, root))
        return tg_error_status(TG_EINVAL, "backward: grad shape %s does not match output shape %s",
                               tg_shape_str(grad, (char[64]){0}, 64), tg_shape_str(root, (char[64]){0}, 64));
    if (grad && grad->dtype != root->dtype)
        return tg_error_status(TG_EINVAL, "backward: grad dtype %s does not match output dtype %s",
                               tg_dtype_name(grad->dtype), tg_dtype_name(root->dtype));
    tg_node *rn = root->grad_fn;
    tg_tape *tp = rn ? rn->tape : root->tape;
    tg_tensor *seed = grad ? (tg_tensor *)grad : tg_ones(tp, root->dtype, root->ndim, root->shape);
    if (!seed) return TG_ENOMEM;
    if (!rn) return tg__accum(root, seed);
    if (rn->released)
        return tg_error_status(TG_ESTATE, "backward: trying to backward through the graph a second "
                                          "time; pass retain_graph=true the first time");
    tg_node **order;
    size_t count;
    int status = collect(rn, &order, &count);
    if (status != TG_OK) return status;
    if ((status = check_versions(order, count)) != TG_OK) return status;
    /* PyTorch's schedule: of the nodes whose consumers have all sent their
     * gradient, the one created last runs first (a max-heap on seq). The
     * order decides how gradients reaching one tensor from several
     * consumers are added up, so float32 sums round as PyTorch's. The heap
     * reuses the array collect filled. */
    tg__grad_watch *w = depth == 0 ? watch : NULL;
    if (w) watch_count(order, count);
    tg_node **heap = order;
    size_t hn = 0;
    heap[hn++] = rn;
    bool prev = tg_set_grad_enabled(false);
    depth++;
    status = tg__accum(root, seed);
    while (hn > 0 && status == TG_OK) {
        tg_node *n = heap[0];
        heap_pop(heap, &hn);
        if (n->grad) {
            if (n->released) {
                status = tg_error_status(TG_ESTATE, "backward: trying to backward through the graph a "
                                                    "second time (node %s); pass retain_graph=true the "
                                                    "first time", n->head.name);
                break;
            }
            if (n->retained && (status = retain(n)) != TG_OK) break;
            status = run_node(n);
            if (status != TG_OK) break;
            if (!retain_graph) n->released = true;
        }
        for (int i = 0; i < n->nin; i++) {
            tg_tensor *t = n->in[i];
            tg_node *c = tg__needs_grad(t) ? t->grad_fn : NULL;
            if (c && --c->pending == 0) heap_push(heap, &hn, c);
        }
        if (w && status == TG_OK) status = watch_after(n);
    }
    depth--;
    tg_set_grad_enabled(prev);
    return status;
}

/* ---- in-place, unrecorded ------------------------------------------------------------ */

static int check_inplace(const char *op, const tg_tensor *x)
{
    if (!x) return tg_error_status(TG_EINVAL, "%s: NULL tensor", op);
    if (strcmp(op, "copy_") != 0 && tg__refuse_q8(op, x)) return TG_EINVAL; /* copy_ quantizes */
    if (x->requires_grad && tg_is_grad_enabled())
        return tg_error_status(TG_EINVAL, "%s: a tensor that requires grad is being used in an "
                                          "in-place operation (use no-grad mode)", op);
    return TG_OK;
}

int tg_copy_(tg_tensor *dst, const tg_tensor *src)
{
    int s = check_inplace("copy_", dst);
    if (s) return s;
    if (!src) return tg_error_status(TG_EINVAL, "copy_: NULL source");
    int64_t shape[TG_MAX_DIMS];
    int nd = tg__broadcast_shape("copy_", dst->ndim, dst->shape, src->ndim, src->shape, shape);
    if (nd < 0) return TG_EINVAL;
    bool ok = nd == dst->ndim;
    for (int d = 0; ok && d < nd; d++) ok = shape[d] == dst->shape[d];
    if (!ok)
        return tg_error_status(TG_EINVAL, "copy_: source %s does not broadcast to %s",
                               tg_shape_str(src, (char[64]){0}, 64), tg_shape_str(dst, (char[64]){0}, 64));
    tg__bump(dst);
    tg_k_copy(dst, src);
    return TG_OK;
}

int tg_fill_(tg_tensor *x, double value)
{
    int s = check_inplace("fill_", x);
    if (s) return s;
    tg__bump(x);
    tg_k_fill(x, value);
    return TG_OK;
}

int tg_add_(tg_tensor *x, const tg_tensor *y, double alpha)
{
    int s = check_inplace("add_", x);
    if (s) return s;
    if (!y) return tg_error_status(TG_EINVAL, "add_: NULL operand");
    if (!tg_same_shape(x, y))
        return tg_error_status(TG_EINVAL, "add_: shapes %s and %s differ", tg_shape_str(x, (char[64]){0}, 64),
                               tg_shape_str(y, (char[64]){0}, 64));
    if (!tg__check_same_dtype("add_", x, y)) return TG_EINVAL;
    tg__bump(x);
    tg_k_axpy(x, y, alpha);
    return TG_OK;
}

int tg_mul_scalar_(tg_tensor *x, double s)
{
    int st = check_inplace("mul_", x);
    if (st) return st;
    if (!tg__check_float("mul_", x)) return TG_EINVAL;
    tg__bump(x);
    tg_k_binary_scalar(x, x, s, TG_BIN_MUL, false);
    return TG_OK;
}
