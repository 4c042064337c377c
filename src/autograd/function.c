/* User functions (torch.autograd.Function): a forward and a backward written
 * by the user, recorded as one node through the same path as the built-in ops.
 * The engine checks each gradient the backward returns (dtype, and a shape the
 * input broadcasts to, summed down as PyTorch's sum_to) and accumulates it by
 * copy. */
#include "autograd_internal.h"

#include <stdio.h>

struct tg_fn_ctx {
    const tg_function *f;
    tg_tape *tape;     /* where the context, its saved list and data live */
    int nsaved;
    tg_tensor **saved; /* nsaved entries, in tape */
    void *data;        /* tg_fn_data's block, data_size bytes */
    size_t data_size;
};

/* ---- the context ------------------------------------------------------------------------ */

int tg_fn_save_for_backward(tg_fn_ctx *ctx, int n, tg_tensor *const *tensors)
{
    if (!ctx) return tg_error_status(TG_EINVAL, "save_for_backward: NULL context");
    const char *name = ctx->f->name;
    if (n < 0 || (n > 0 && !tensors))
        return tg_error_status(TG_EINVAL, "%s: save_for_backward: bad tensor list (n = %d)", name, n);
    for (int i = 0; i < n; i++)
        if (!tensors[i])
            return tg_error_status(TG_EINVAL, "%s: save_for_backward: NULL tensor at position %d", name, i);
    tg_tensor **s = NULL;
    if (n > 0) {
        s = tg_tape_alloc(ctx->tape, sizeof *s * (size_t)n, false);
        if (!s) return TG_ENOMEM;
        for (int i = 0; i < n; i++) s[i] = tensors[i];
    }
    ctx->saved = s;
    ctx->nsaved = n;
    return TG_OK;
}

tg_tensor *tg_fn_saved(const tg_fn_ctx *ctx, int i)
{
    if (!ctx) return tg_error("saved: NULL context");
    if (i < 0 || i >= ctx->nsaved)
        return tg_error("%s: saved tensor index %d is out of range (%d saved)", ctx->f->name, i, ctx->nsaved);
    return ctx->saved[i];
}

void *tg_fn_data(tg_fn_ctx *ctx, size_t size)
{
    if (!ctx) return tg_error("fn_data: NULL context");
    if (ctx->data) {
        if (size > ctx->data_size)
            return tg_error("%s: fn_data: asked %zu bytes, but the block was made with %zu", ctx->f->name, size,
                            ctx->data_size);
        return ctx->data;
    }
    ctx->data = tg_tape_alloc(ctx->tape, size, true);
    if (ctx->data) ctx->data_size = size;
    return ctx->data;
}

/* ---- apply: forward and recording ---------------------------------------------------------- */

tg_tensor *tg_function_apply(tg_tape *tp, const tg_function *f, int n, tg_tensor *const *inputs)
{
    return tg__function_apply_with(tp, f, n, inputs, NULL, 0);
}

tg_tensor *tg__function_apply_with(tg_tape *tp, const tg_function *f, int n, tg_tensor *const *inputs,
                                   const void *data, size_t size)
{
    if (!f) return tg_error("function_apply: NULL function");
    if (!f->name) return tg_error("function_apply: the function has no name");
    if (!f->forward || !f->backward)
        return tg_error("%s: function_apply: NULL %s", f->name, f->forward ? "backward" : "forward");
    if (!tp) return tg_error("%s: function_apply: NULL tape", f->name);
    if (n < 0 || (n > 0 && !inputs)) return tg_error("%s: function_apply: bad input list (n = %d)", f->name, n);
    for (int i = 0; i < n; i++)
        if (!inputs[i]) return tg__error_null_input(f->name);
    tg_fn_ctx *ctx = tg_tape_alloc(tp, sizeof *ctx, true);
    if (!ctx) return NULL;
    ctx->f = f;
    ctx->tape = tp;
    if (size) {
        if (!(ctx->data = tg_tape_alloc(tp, size, false))) return NULL;
        memcpy(ctx->data, data, size);
        ctx->data_size = size;
    }

    tg__saved_error before;
    tg__error_push(&before);
    bool grad_mode = tg_set_grad_enabled(false);
    tg_tensor *out = f->forward(ctx, tp, n, inputs);
    tg_set_grad_enabled(grad_mode);
    if (!out) {
        if (!tg_last_error()[0]) tg_error("%s: forward returned NULL", f->name);
        return NULL;
    }
    tg__error_restore(&before);

    bool any = false;
    for (int i = 0; i < n; i++) any |= tg__needs_grad(inputs[i]);
    if (!grad_mode || !any || !tg__is_float(out->dtype)) return out;
    /* The node must not replace the grad_fn of a tensor that has a history of
     * its own (an input returned as is, a leaf, another op's output), nor
     * outlive a tensor of another tape: it goes on a new view of it in tp. */
    bool alias = out->grad_fn || out->requires_grad || out->tape != tp;
    for (int i = 0; i < n && !alias; i++) alias = out == inputs[i];
    if (alias && !(out = tg__alias(tp, out))) return NULL;
    tg_node *node;
    out = tg__record(tp, TG_OP_FUNCTION, out, n, inputs, ctx->nsaved, ctx->saved, &node);
    if (node) {
        node->head.name = f->name;
        node->fn = ctx;
    }
    return out;
}

/* ---- backward: call the user's, check and accumulate what it returns ------------------------------ */

/* "[2, 3]", as PyTorch prints sizes in its messages. */
static const char *sizes_str(const tg_tensor *t, char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* PyTorch's is_expandable_to(shape, desired): can x's shape broadcast to g's? */
static bool expandable_to(const tg_tensor *x, const tg_tensor *g)
{
    if (x->ndim > g->ndim) return false;
    for (int i = 0; i < x->ndim; i++) {
        int64_t size = x->shape[x->ndim - 1 - i], target = g->shape[g->ndim - 1 - i];
        if (size != target && size != 1) return false;
    }
    return true;
}

/* forward: y = f->forward(inputs); so dinputs = f->backward(dy), each checked
 * and summed down to its input's shape (tg__accum copies, never adopts: the
 * user's tensor may be a saved input) */
int tg__function_backward(tg_node *n)
{
    tg_fn_ctx *ctx = n->fn;
    const tg_function *f = ctx->f;
    tg_tensor **gi = tg_tape_alloc(n->tape, sizeof *gi * (size_t)(n->nin > 0 ? n->nin : 1), true);
    if (!gi) return TG_ENOMEM;
    tg__saved_error before;
    tg__error_push(&before);
    int st = f->backward(ctx, n->tape, n->grad, gi);
    if (st != TG_OK) {
        if (!tg_last_error()[0]) tg_error("%s: backward returned %s", f->name, tg_status_str(st));
        return st;
    }
    tg__error_restore(&before);
    for (int i = 0; i < n->nin; i++) {
        tg_tensor *x = n->in[i], *g = gi[i];
        if (!g || !tg__needs_grad(x)) continue;
        if (g->dtype != x->dtype)
            return tg_error_status(TG_EINVAL,
                                   "%s returned an invalid gradient at index %d - expected dtype %s but got %s",
                                   f->name, i, tg_dtype_name(x->dtype), tg_dtype_name(g->dtype));
        if (!expandable_to(x, g)) {
            char gs[160], xs[160];
            return tg_error_status(TG_EINVAL,
                                   "%s returned an invalid gradient at index %d - got %s but expected shape "
                                   "compatible with %s",
                                   f->name, i, sizes_str(g, gs, sizeof gs), sizes_str(x, xs, sizeof xs));
        }
        st = tg__accum(x, g);
        if (st) return st;
    }
    return TG_OK;
}
