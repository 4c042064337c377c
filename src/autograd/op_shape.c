/* Movement ops: views that share storage with their input, plus contiguous,
 * clone, cat and stack. A view's backward is the reverse movement of the
 * gradient (view <-> view back, permute <-> inverse permute, narrow <-> pad,
 * expand <-> sum). */
#include "autograd_internal.h"

static tg_tensor *make_view(tg_tape *tp, const tg_tensor *x, int ndim, const int64_t *shape,
                            const int64_t *stride, int64_t offset)
{
    tg_tensor *v = tg__alias(tp, x);
    if (!v) return NULL;
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        v->shape[d] = shape[d];
        v->stride[d] = stride[d];
    }
    v->offset = offset;
    return v;
}

/* The node's gradient seen with shape like the input (both contiguous). */
static tg_tensor grad_as_input_shape(const tg_node *n, const tg_tensor *x)
{
    tg_tensor g = *n->grad;
    g.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) g.shape[d] = x->shape[d];
    tg__contiguous_strides(g.ndim, g.shape, g.stride);
    return g;
}

/* ---- view, reshape, unsqueeze, squeeze ----------------------------------------------------- */

tg_tensor *tg_view(tg_tape *tp, tg_tensor *x, int ndim, const int64_t *shape)
{
    if (!x) return tg__error_null_input("view");
    if (ndim > 0 && !shape) return tg_error("view: NULL shape");
    int64_t s[TG_MAX_DIMS], st[TG_MAX_DIMS];
    if (!tg__infer_shape("view", tg_numel(x), ndim, shape, s)) return NULL;
    if (!tg__view_strides(x, ndim, s, st))
        return tg_error("view: size is not compatible with input tensor's size and stride (at least one "
                        "dimension spans across two contiguous subspaces); use reshape instead");
    return tg__record(tp, TG_OP_VIEW, make_view(tp, x, ndim, s, st, x->offset), 1, &x, 0, NULL, NULL);
}

tg_tensor *tg_reshape(tg_tape *tp, tg_tensor *x, int ndim, const int64_t *shape)
{
    if (!x) return tg__error_null_input("reshape");
    if (ndim > 0 && !shape) return tg_error("reshape: NULL shape");
    int64_t s[TG_MAX_DIMS], st[TG_MAX_DIMS];
    if (!tg__infer_shape("reshape", tg_numel(x), ndim, shape, s)) return NULL;
    if (tg__view_strides(x, ndim, s, st))
        return tg__record(tp, TG_OP_RESHAPE_ALIAS, make_view(tp, x, ndim, s, st, x->offset), 1, &x, 0, NULL, NULL);
    /* Not viewable: copy, then view the copy (clone + _unsafe_view in PyTorch). */
    tg_tensor *c = tg__new_like(tp, x);
    if (!c) return NULL;
    tg_k_copy(c, x);
    c->ndim = ndim;
    for (int d = 0; d < ndim; d++) c->shape[d] = s[d];
    tg__contiguous_strides(ndim, s, c->stride);
    return tg__record(tp, TG_OP_UNSAFE_VIEW, c, 1, &x, 0, NULL, NULL);
}

/* forward: y = view(x, shape); so dx = view(dy, x.shape) */
int tg__view_backward(tg_node *n)
{
    tg_tensor g = grad_as_input_shape(n, n->in[0]);
    return tg__accum_owned(n, n->in[0], &g);
}

tg_tensor *tg_unsqueeze(tg_tape *tp, tg_tensor *x, int dim)
{
    if (!x) return tg__error_null_input("unsqueeze");
    if (x->ndim >= TG_MAX_DIMS) return tg_error("unsqueeze: tensor already has %d dims", x->ndim);
    int d = tg__wrap_dim("unsqueeze", dim, x->ndim + 1);
    if (d < 0) return NULL;
    int64_t s[TG_MAX_DIMS], st[TG_MAX_DIMS];
    for (int i = 0, j = 0; i <= x->ndim; i++) {
        if (i == d) {
            s[i] = 1;
            st[i] = d < x->ndim ? x->stride[d] * x->shape[d] : 1;
        } else {
            s[i] = x->shape[j];
            st[i] = x->stride[j];
            j++;
        }
    }
    return tg__record(tp, TG_OP_UNSQUEEZE, make_view(tp, x, x->ndim + 1, s, st, x->offset), 1, &x, 0, NULL, NULL);
}

static tg_tensor *squeeze(tg_tape *tp, tg_tensor *x, int dim, bool all)
{
    if (!x) return tg__error_null_input("squeeze");
    int d = all ? -1 : tg__wrap_dim("squeeze", dim, x->ndim);
    if (!all && d < 0) return NULL;
    int64_t s[TG_MAX_DIMS], st[TG_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        bool drop = x->shape[i] == 1 && (all || i == d);
        if (drop) continue;
        s[nd] = x->shape[i];
        st[nd] = x->stride[i];
        nd++;
    }
    return tg__record(tp, all ? TG_OP_SQUEEZE_ALL : TG_OP_SQUEEZE_DIM, make_view(tp, x, nd, s, st, x->offset), 1,
                      &x, 0, NULL, NULL);
}

tg_tensor *tg_squeeze(tg_tape *tp, tg_tensor *x, int dim) { return squeeze(tp, x, dim, false); }
tg_tensor *tg_squeeze_all(tg_tape *tp, tg_tensor *x) { return squeeze(tp, x, 0, true); }

/* ---- transpose, permute ----------------------------------------------------------------------- */

static tg_tensor *permute(tg_tape *tp, const char *op, tg_op_id id, tg_tensor *x, const int *perm)
{
    int64_t s[TG_MAX_DIMS], st[TG_MAX_DIMS];
    bool seen[TG_MAX_DIMS] = {false};
    int p[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        p[i] = tg__wrap_dim(op, perm[i], x->ndim);
        if (p[i] < 0) return NULL;
        if (seen[p[i]]) return tg_error("%s: repeated dim %d in permutation", op, p[i]);
        seen[p[i]] = true;
        s[i] = x->shape[p[i]];
        st[i] = x->stride[p[i]];
    }
    tg_node *n;
    tg_tensor *out = tg__record(tp, id, make_view(tp, x, x->ndim, s, st, x->offset), 1, &x, 0, NULL, &n);
    if (n)
        for (int i = 0; i < x->ndim; i++) n->iarg[i] = p[i];
    return out;
}

tg_tensor *tg_permute(tg_tape *tp, tg_tensor *x, const int *perm)
{
    if (!x) return tg__error_null_input("permute");
    if (x->ndim > 0 && !perm) return tg_error("permute: NULL permutation");
    return permute(tp, "permute", TG_OP_PERMUTE, x, perm);
}

tg_tensor *tg_transpose(tg_tape *tp, tg_tensor *x, int d0, int d1)
{
    if (!x) return tg__error_null_input("transpose");
    int a = tg__wrap_dim("transpose", d0, x->ndim), b = a < 0 ? -1 : tg__wrap_dim("transpose", d1, x->ndim);
    if (a < 0 || b < 0) return NULL;
    int perm[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    if (x->ndim > 0) {
        perm[a] = b;
        perm[b] = a;
    }
    return permute(tp, "transpose", TG_OP_TRANSPOSE, x, perm);
}

tg_tensor *tg_t(tg_tape *tp, tg_tensor *x)
{
    if (!x) return tg__error_null_input("t");
    if (x->ndim > 2) return tg_error("t: expects a tensor with <= 2 dimensions, but self is %dD", x->ndim);
    int perm[2] = {1, 0};
    if (x->ndim < 2) perm[0] = 0;
    return permute(tp, "t", TG_OP_T, x, perm);
}

/* forward: y = permute(x, p); so dx = permute(dy, inverse(p)) */
int tg__permute_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    tg_tensor g = *n->grad;
    for (int i = 0; i < x->ndim; i++) {
        int p = (int)n->iarg[i];
        g.shape[p] = n->grad->shape[i];
        g.stride[p] = n->grad->stride[i];
    }
    return tg__accum(x, &g);
}

/* ---- narrow, select ---------------------------------------------------------------------------- */

tg_tensor *tg_narrow(tg_tape *tp, tg_tensor *x, int dim, int64_t start, int64_t length)
{
    if (!x) return tg__error_null_input("narrow");
    if (x->ndim == 0) return tg_error("narrow: cannot be applied to a 0-dim tensor");
    int d = tg__wrap_dim("narrow", dim, x->ndim);
    if (d < 0) return NULL;
    if (start < 0) start += x->shape[d];
    if (start < 0 || length < 0 || start > x->shape[d] || length > x->shape[d] - start)
        return tg_error("narrow: start %lld + length %lld exceeds dimension size %lld", (long long)start,
                        (long long)length, (long long)x->shape[d]);
    int64_t s[TG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
    s[d] = length;
    tg_node *n;
    tg_tensor *v = make_view(tp, x, x->ndim, s, x->stride, x->offset + start * x->stride[d]);
    tg_tensor *out = tg__record(tp, TG_OP_NARROW, v, 1, &x, 0, NULL, &n);
    if (n) {
        n->iarg[0] = d;
        n->iarg[1] = start;
        n->iarg[2] = length;
    }
    return out;
}

/* forward: y = x[.., start:start+len, ..]; so dx = zeros; dx[.., start:start+len, ..] += dy */
int tg__narrow_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    bool fresh;
    tg_tensor *buf = tg__grad_buf(x, &fresh, true);
    if (!buf) return TG_ENOMEM;
    int d = (int)n->iarg[0];
    tg_tensor v = *buf;
    v.shape[d] = n->iarg[2];
    v.offset = buf->offset + n->iarg[1] * buf->stride[d];
    tg_k_axpy(&v, n->grad, 1.0);
    return TG_OK;
}

tg_tensor *tg_select(tg_tape *tp, tg_tensor *x, int dim, int64_t index)
{
    if (!x) return tg__error_null_input("select");
    if (x->ndim == 0) return tg_error("select: cannot be applied to a 0-dim tensor");
    int d = tg__wrap_dim("select", dim, x->ndim);
    if (d < 0) return NULL;
    int64_t size = x->shape[d];
    if (index < -size || index >= size)
        return tg_error("select: index %lld out of range for dimension %d of size %lld", (long long)index, d,
                        (long long)size);
    if (index < 0) index += size;
    int64_t s[TG_MAX_DIMS], st[TG_MAX_DIMS];
    for (int i = 0, j = 0; i < x->ndim; i++) {
        if (i == d) continue;
        s[j] = x->shape[i];
        st[j] = x->stride[i];
        j++;
    }
    tg_node *n;
    tg_tensor *v = make_view(tp, x, x->ndim - 1, s, st, x->offset + index * x->stride[d]);
    tg_tensor *out = tg__record(tp, TG_OP_SELECT, v, 1, &x, 0, NULL, &n);
    if (n) {
        n->iarg[0] = d;
        n->iarg[1] = index;
    }
    return out;
}

/* forward: y = x[.., i, ..]; so dx = zeros; dx[.., i, ..] += dy */
int tg__select_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    bool fresh;
    tg_tensor *buf = tg__grad_buf(x, &fresh, true);
    if (!buf) return TG_ENOMEM;
    int d = (int)n->iarg[0];
    tg_tensor v = *buf;
    v.offset = buf->offset + n->iarg[1] * buf->stride[d];
    for (int i = d; i < buf->ndim - 1; i++) {
        v.shape[i] = buf->shape[i + 1];
        v.stride[i] = buf->stride[i + 1];
    }
    v.ndim = buf->ndim - 1;
    tg_k_axpy(&v, n->grad, 1.0);
    return TG_OK;
}

/* ---- expand ---------------------------------------------------------------------------------------- */

tg_tensor *tg_expand(tg_tape *tp, tg_tensor *x, int ndim, const int64_t *shape)
{
    if (!x) return tg__error_null_input("expand");
    if (ndim < x->ndim || ndim > TG_MAX_DIMS || (ndim > 0 && !shape))
        return tg_error("expand: the number of sizes provided (%d) must be at least the tensor's %d dims", ndim,
                        x->ndim);
    int64_t s[TG_MAX_DIMS], st[TG_MAX_DIMS];
    int lead = ndim - x->ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - lead;
        if (j < 0) {
            if (shape[i] < 0) return tg_error("expand: -1 is not allowed in a new leading dimension");
            s[i] = shape[i];
            st[i] = 0;
        } else if (shape[i] == -1 || shape[i] == x->shape[j]) {
            s[i] = x->shape[j];
            st[i] = x->stride[j];
        } else if (x->shape[j] == 1 && shape[i] >= 0) {
            s[i] = shape[i];
            st[i] = 0;
        } else {
            return tg_error("expand: the expanded size %lld must match the existing size %lld at "
                            "non-singleton dimension %d", (long long)shape[i], (long long)x->shape[j], i);
        }
    }
    if (!tg__check_shape("expand", ndim, s, NULL)) return NULL;
    return tg__record(tp, TG_OP_EXPAND, make_view(tp, x, ndim, s, st, x->offset), 1, &x, 0, NULL, NULL);
}

/* forward: y = expand(x, shape); so dx = sum of dy over the expanded dims */
int tg__expand_backward(tg_node *n) { return tg__accum(n->in[0], n->grad); }

/* ---- contiguous, clone ------------------------------------------------------------------------------ */

tg_tensor *tg_clone(tg_tape *tp, tg_tensor *x)
{
    if (!x) return tg__error_null_input("clone");
    tg_tensor *out = tg__new_like(tp, x);
    if (!out) return NULL;
    tg_k_copy(out, x);
    return tg__record(tp, TG_OP_CLONE, out, 1, &x, 0, NULL, NULL);
}

tg_tensor *tg_contiguous(tg_tape *tp, tg_tensor *x)
{
    if (!x) return tg__error_null_input("contiguous");
    return tg_is_contiguous(x) ? x : tg_clone(tp, x);
}

/* forward: y = clone(x); so dx = dy */
int tg__clone_backward(tg_node *n) { return tg__accum_owned(n, n->in[0], n->grad); }

/* ---- cat, stack -------------------------------------------------------------------------------------- */

static tg_tensor *cat(tg_tape *tp, const char *op, int n, tg_tensor *const *xs, int dim, bool stack)
{
    if (n <= 0 || !xs) return tg_error("%s: expected a non-empty list of tensors", op);
    for (int i = 0; i < n; i++)
        if (!xs[i]) return tg_error("%s: NULL tensor at position %d", op, i);
    const tg_tensor *x0 = xs[0];
    int nd = x0->ndim + (stack ? 1 : 0);
    if (nd == 0) return tg_error("%s: zero-dimensional tensor cannot be concatenated", op);
    if (nd > TG_MAX_DIMS) return tg_error("%s: result would have too many dims", op);
    int d = tg__wrap_dim(op, dim, nd);
    if (d < 0) return NULL;
    int64_t s[TG_MAX_DIMS];
    char s0[64], si[64];
    for (int i = 0; i < n; i++) {
        if (xs[i]->dtype != x0->dtype)
            return tg_error("%s: dtype mismatch at position %d: %s vs %s", op, i, tg_dtype_name(xs[i]->dtype),
                            tg_dtype_name(x0->dtype));
        bool ok = xs[i]->ndim == x0->ndim;
        for (int k = 0; ok && k < x0->ndim; k++)
            ok = xs[i]->shape[k] == x0->shape[k] || (!stack && k == d);
        if (!ok)
            return tg_error("%s: sizes of tensors must match except in dimension %d: %s at position 0 vs %s "
                            "at position %d", op, d, tg_shape_str(x0, s0, 64), tg_shape_str(xs[i], si, 64), i);
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += stack ? 1 : xs[i]->shape[d];
    for (int k = 0, j = 0; k < nd; k++) {
        if (stack && k == d) {
            s[k] = n;
            continue;
        }
        s[k] = x0->shape[j++];
    }
    if (!stack) s[d] = total;
    tg_tensor *out = tg_empty(tp, x0->dtype, nd, s);
    if (!out) return NULL;
    int64_t pos = 0;
    for (int i = 0; i < n; i++) {
        tg_tensor v = *out;
        int64_t len = stack ? 1 : xs[i]->shape[d];
        v.offset = out->offset + pos * out->stride[d];
        if (stack) {
            for (int k = d; k < nd - 1; k++) {
                v.shape[k] = out->shape[k + 1];
                v.stride[k] = out->stride[k + 1];
            }
            v.ndim = nd - 1;
        } else {
            v.shape[d] = len;
        }
        tg_k_copy(&v, xs[i]);
        pos += len;
    }
    tg_node *node;
    out = tg__record(tp, stack ? TG_OP_STACK : TG_OP_CAT, out, n, xs, 0, NULL, &node);
    if (node) node->iarg[0] = d;
    return out;
}

tg_tensor *tg_cat(tg_tape *tp, int n, tg_tensor *const *xs, int dim) { return cat(tp, "cat", n, xs, dim, false); }
tg_tensor *tg_stack(tg_tape *tp, int n, tg_tensor *const *xs, int dim) { return cat(tp, "stack", n, xs, dim, true); }

/* forward: y = cat(xs, d); so dxs[i] = dy narrowed to xs[i]'s span along d
 * forward: y = stack(xs, d); so dxs[i] = dy selected at i along d */
int tg__cat_backward(tg_node *n)
{
    int d = (int)n->iarg[0];
    bool stack = n->op == TG_OP_STACK;
    const tg_tensor *g = n->grad;
    int64_t pos = 0;
    for (int i = 0; i < n->nin; i++) {
        tg_tensor v = *g;
        int64_t len;
        if (stack) {
            len = 1;
            v.offset = g->offset + pos * g->stride[d];
            for (int k = d; k < g->ndim - 1; k++) {
                v.shape[k] = g->shape[k + 1];
                v.stride[k] = g->stride[k + 1];
            }
            v.ndim = g->ndim - 1;
        } else {
            len = n->in[i]->shape[d];
            v.shape[d] = len;
            v.offset = g->offset + pos * g->stride[d];
        }
        int st = tg__accum(n->in[i], &v);
        if (st) return st;
        pos += len;
    }
    return TG_OK;
}
