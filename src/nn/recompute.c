/* Activation recomputation (torch.utils.checkpoint, its reentrant variant):
 * a module call whose activations the step tape does not keep. The forward
 * runs with recording off in the step tape's side tape (src/tensor/tape.c),
 * which is emptied once the output is copied out, and one node,
 * CheckpointFunctionBackward, is recorded as a user function
 * (src/autograd/function.c). Its backward puts the generators back where the
 * forward found them, runs the forward again with recording on from the
 * saved inputs, runs backward through that graph (the parameters' .grad
 * accumulates as without recomputation; the engine runs a backward nested in
 * a node's, src/autograd/engine.c), hands the inputs' gradients back and
 * leaves the generators where the step had taken them: the same dropout
 * masks, and the stream afterwards as if nothing had been replayed. */
#include "nn_internal.h"

/* What the node keeps besides tensors (tg_fn_data): the module, the policy
 * around the call and the generators' states before its forward. The node's
 * inputs are the call's nin inputs, then the tree's parameters (so that
 * backward reaches the call whenever a parameter needs a gradient, and a
 * gradient watch sees the parameters fed by this node). */
typedef struct {
    tg_module *m;
    int nin;
    tg_numerics numerics;
    int ngen;
    tg_generator **gens;
    uint8_t *states; /* ngen * TG_GENERATOR_STATE_BYTES */
} recompute;

/* Every distinct generator the tree's modules draw from (NULL is the
 * default generator) into gens (room for one per module); returns the count. */
static int tree_generators(const tg_module *m, tg_generator **gens, int n)
{
    tg_generator *g = m->gen ? m->gen : tg_default_generator();
    bool seen = false;
    for (int i = 0; i < n && !seen; i++) seen = gens[i] == g;
    if (!seen) gens[n++] = g;
    for (int i = 0; i < m->children.n; i++) n = tree_generators(m->children.items[i].ptr, gens, n);
    return n;
}

static int tree_size(const tg_module *m)
{
    int n = 1;
    for (int i = 0; i < m->children.n; i++) n += tree_size(m->children.items[i].ptr);
    return n;
}

/* The generators' states into states, or (set) out of it. */
static int generators_state(const recompute *c, uint8_t *states, bool set)
{
    for (int i = 0; i < c->ngen; i++) {
        uint8_t *s = states + (size_t)i * TG_GENERATOR_STATE_BYTES;
        int st = set ? tg_generator_set_state(c->gens[i], s, TG_GENERATOR_STATE_BYTES)
                     : tg_generator_get_state(c->gens[i], s, TG_GENERATOR_STATE_BYTES);
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

/* forward: out = m(inputs), computed in the side tape, copied into tp */
static tg_tensor *recompute_forward(tg_fn_ctx *ctx, tg_tape *tp, int n, tg_tensor *const *in)
{
    recompute *c = tg_fn_data(ctx, sizeof *c);
    if (!c || tg_fn_save_for_backward(ctx, n, in) != TG_OK) return NULL;
    tg_tape *side = tg__tape_side(tp);
    tg_tensor *y = side ? tg__module_run(side, c->m, c->nin, in) : NULL;
    tg_tensor *out = y ? tg_empty(tp, y->dtype, y->ndim, y->shape) : NULL;
    if (out) tg_k_copy(out, y);
    tg_tape_reset(side);
    return out;
}

/* The forward again, from the saved inputs as leaves that require grad where
 * the originals did, with the generators as the forward found them; then
 * backward from its output with dy. The inputs' gradients live in the side
 * tape until its next use, after the engine has added them up. */
static int recompute_backward(tg_fn_ctx *ctx, tg_tape *tp, const tg_tensor *dy, tg_tensor **dx)
{
    recompute *c = tg_fn_data(ctx, sizeof *c);
    tg_tape *side = c ? tg__tape_side(tp) : NULL;
    uint8_t *now = side ? tg_tape_alloc(side, (size_t)c->ngen * TG_GENERATOR_STATE_BYTES + 1, false) : NULL;
    tg_tensor **x = now ? tg_tape_alloc(side, sizeof *x * (size_t)(c->nin + 1), false) : NULL;
    if (!x) return TG_ENOMEM;
    tg_tape_set_numerics(side, c->numerics);
    for (int i = 0; i < c->nin; i++) {
        tg_tensor *saved = tg_fn_saved(ctx, i);
        if (!saved || !(x[i] = tg_detach(side, saved))) return TG_ENOMEM;
        x[i]->requires_grad = saved->requires_grad;
    }
    int st = generators_state(c, now, false);
    if (st == TG_OK) st = generators_state(c, c->states, true);
    if (st != TG_OK) return st;
    bool prev = tg_set_grad_enabled(true);
    tg_tensor *y = tg__module_run(side, c->m, c->nin, x);
    tg_set_grad_enabled(prev);
    st = generators_state(c, now, true);
    if (!y) return TG_EINVAL;
    if (st == TG_OK && y->requires_grad) st = tg_backward(y, dy, false);
    for (int i = 0; i < c->nin; i++) dx[i] = x[i]->requires_grad ? x[i]->grad : NULL;
    return st;
}

static const tg_function recompute_fn = {
    .name = "CheckpointFunctionBackward", .forward = recompute_forward, .backward = recompute_backward};

tg_tensor *tg__recompute_call(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs)
{
    if (!tp) return tg_error("%s: module_call_recompute: NULL tape", tg_module_type_name(m));
    tg_named_list ps;
    if (tg__module_parameters(tp, m, &ps) != TG_OK) return NULL;
    recompute c = {.m = m, .nin = n, .numerics = tg_tape_numerics(tp)};
    c.gens = tg_tape_alloc(tp, sizeof *c.gens * (size_t)tree_size(m), false);
    c.ngen = c.gens ? tree_generators(m, c.gens, 0) : 0;
    c.states = c.gens ? tg_tape_alloc(tp, (size_t)c.ngen * TG_GENERATOR_STATE_BYTES, false) : NULL;
    tg_tensor **all = c.states ? tg_tape_alloc(tp, sizeof *all * (size_t)(n + ps.n + 1), false) : NULL;
    if (!all || generators_state(&c, c.states, false) != TG_OK) return NULL;
    for (int i = 0; i < n; i++) all[i] = inputs[i];
    for (int i = 0; i < ps.n; i++) all[n + i] = ps.tensors[i];
    return tg__function_apply_with(tp, &recompute_fn, n + ps.n, all, &c, sizeof c);
}

tg_tensor *tg_module_call_recompute(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs)
{
    if (!tg__module_check_call("module_call_recompute", m, n, inputs)) return NULL;
    if (!tg__module_call_records(m, n, inputs)) return tg__module_run(tp, m, n, inputs);
    return tg__recompute_call(tp, m, n, inputs);
}
