/* Matrix products: mm, bmm, torch.matmul's broadcasting rules, and F.linear.
 * One node per product whichever case it is; the node name is the one
 * PyTorch 1.13 shows at the top of the same expression. */
#include "autograd_internal.h"

/* x seen as a batch of matrices with batch shape bshape (nb dims): a 1-D x
 * becomes (1, K) if it is the left operand and (K, 1) if it is the right. */
static void as_batched(const tg_tensor *x, bool left, int nb, const int64_t *bshape, tg_tensor *xp)
{
    *xp = *x;
    int64_t r, c, sr, sc;
    if (x->ndim == 1) {
        if (left) {
            r = 1, c = x->shape[0], sr = x->shape[0], sc = x->stride[0];
        } else {
            r = x->shape[0], c = 1, sr = x->stride[0], sc = 1;
        }
    } else {
        r = x->shape[x->ndim - 2], c = x->shape[x->ndim - 1];
        sr = x->stride[x->ndim - 2], sc = x->stride[x->ndim - 1];
    }
    int xb = x->ndim - 2; /* batch dims of x (may be <= 0) */
    for (int d = 0; d < nb; d++) {
        int j = xb - nb + d;
        xp->shape[d] = bshape[d];
        xp->stride[d] = (j >= 0 && x->shape[j] == bshape[d]) ? x->stride[j] : 0;
    }
    xp->shape[nb] = r, xp->shape[nb + 1] = c;
    xp->stride[nb] = sr, xp->stride[nb + 1] = sc;
    xp->ndim = nb + 2;
}

/* Does x's batch shape equal bshape (so x's gradient can be written in place)? */
static bool batch_exact(const tg_tensor *x, int nb, const int64_t *bshape)
{
    int xb = x->ndim - 2;
    if (x->ndim == 1) return nb == 0;
    if (xb != nb) return false;
    for (int d = 0; d < nb; d++)
        if (x->shape[d] != bshape[d]) return false;
    return true;
}

/* x (.., M, K) seen as one (R, K) matrix without copying, if its layout allows. */
static bool fold_rows(const tg_tensor *x, tg_tensor *out)
{
    int64_t shape[2] = {tg_numel(x) / (x->shape[x->ndim - 1] ? x->shape[x->ndim - 1] : 1), x->shape[x->ndim - 1]};
    int64_t st[2];
    if (!tg__view_strides(x, 2, shape, st)) return false;
    *out = *x;
    out->ndim = 2;
    out->shape[0] = shape[0], out->shape[1] = shape[1];
    out->stride[0] = st[0], out->stride[1] = st[1];
    return true;
}

/* The product's node data: iarg[0] = nb, iarg[1..nb] = batch shape. */
static tg_tensor *product(tg_tape *tp, const char *op, tg_op_id id, tg_tensor *a, tg_tensor *b)
{
    if (!a || !b) return tg__error_null_input(op);
    if (!tg__check_weight_dtype(op, a, b)) return NULL;
    char sa[64], sb[64];
    if (a->ndim == 0 || b->ndim == 0)
        return tg_error("%s: both arguments need at least 1 dimension, got %s and %s", op, tg_shape_str(a, sa, 64),
                        tg_shape_str(b, sb, 64));
    int64_t K = a->shape[a->ndim - 1];
    int64_t Kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    if (K != Kb)
        return tg_error("%s: %s @ %s: inner dims %lld != %lld", op, tg_shape_str(a, sa, 64), tg_shape_str(b, sb, 64),
                        (long long)K, (long long)Kb);
    int ab = a->ndim > 2 ? a->ndim - 2 : 0, bb = b->ndim > 2 ? b->ndim - 2 : 0;
    int64_t bshape[TG_MAX_DIMS];
    int nb = tg__broadcast_shape(op, ab, a->shape, bb, b->shape, bshape);
    if (nb < 0)
        return tg_error("%s: %s @ %s: batch dims are not broadcastable", op, tg_shape_str(a, sa, 64),
                        tg_shape_str(b, sb, 64));
    int64_t M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
    int64_t N = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    int64_t oshape[TG_MAX_DIMS];
    int on = 0;
    for (int d = 0; d < nb; d++) oshape[on++] = bshape[d];
    if (a->ndim > 1) oshape[on++] = M;
    if (b->ndim > 1) oshape[on++] = N;
    tg_tensor *out = tg_empty(tp, a->dtype, on, oshape);
    if (!out) return NULL;
    tg_tensor ap, bp, cp = *out;
    as_batched(a, true, nb, bshape, &ap);
    as_batched(b, false, nb, bshape, &bp);
    cp.ndim = nb + 2;
    for (int d = 0; d < nb; d++) cp.shape[d] = bshape[d];
    cp.shape[nb] = M, cp.shape[nb + 1] = N;
    tg__contiguous_strides(cp.ndim, cp.shape, cp.stride);
    tg_tensor a2;
    if (b->ndim <= 2 && a->ndim > 2 && fold_rows(a, &a2)) {
        /* (.., M, K) @ (K, N): one (R, K) @ (K, N) product */
        tg_tensor c2 = cp, b2 = bp;
        c2.ndim = 2, c2.shape[0] = a2.shape[0], c2.shape[1] = N, c2.stride[0] = N, c2.stride[1] = 1;
        b2.ndim = 2, b2.shape[0] = K, b2.shape[1] = N, b2.stride[0] = bp.stride[nb], b2.stride[1] = bp.stride[nb + 1];
        tg_k_gemm(tg_tape_numerics(tp), &c2, &a2, false, &b2, false, 1.0, 0.0);
    } else {
        tg_k_gemm(tg_tape_numerics(tp), &cp, &ap, false, &bp, false, 1.0, 0.0);
    }
    tg_tensor *in[2] = {a, b};
    tg_node *n;
    out = tg__record(tp, id, out, 2, in, 2, in, &n);
    /* one factor's values per gradient (shapes from both), as PyTorch saves */
    if (!tg__needs_grad(b)) tg__saved_shape_only(n, 0);
    if (!tg__needs_grad(a)) tg__saved_shape_only(n, 1);
    if (n) {
        n->iarg[0] = nb;
        for (int d = 0; d < nb; d++) n->iarg[1 + d] = bshape[d];
    }
    return out;
}

tg_tensor *tg_matmul(tg_tape *tp, tg_tensor *a, tg_tensor *b)
{
    if (!a || !b) return tg__error_null_input("matmul");
    tg_op_id id = TG_OP_MATMUL_ND;
    if (a->ndim == 1 && b->ndim == 1)
        id = TG_OP_DOT;
    else if (a->ndim == 2 && b->ndim == 1)
        id = TG_OP_MV;
    else if (a->ndim == 1 && b->ndim == 2)
        id = TG_OP_VM;
    else if (a->ndim == 2 && b->ndim == 2)
        id = TG_OP_MM;
    else if (a->ndim == 2)
        id = TG_OP_MATMUL_2D_ND;
    return product(tp, "matmul", id, a, b);
}

tg_tensor *tg_mm(tg_tape *tp, tg_tensor *a, tg_tensor *b)
{
    char sa[64], sb[64];
    if (a && b && (a->ndim != 2 || b->ndim != 2))
        return tg_error("mm: expects 2-D tensors, got %s and %s", tg_shape_str(a, sa, 64), tg_shape_str(b, sb, 64));
    return product(tp, "mm", TG_OP_MM, a, b);
}

tg_tensor *tg_bmm(tg_tape *tp, tg_tensor *a, tg_tensor *b)
{
    char sa[64], sb[64];
    if (a && b && (a->ndim != 3 || b->ndim != 3 || a->shape[0] != b->shape[0]))
        return tg_error("bmm: expects 3-D tensors with the same batch size, got %s and %s",
                        tg_shape_str(a, sa, 64), tg_shape_str(b, sb, 64));
    return product(tp, "bmm", TG_OP_BMM, a, b);
}

/* dst += op(x) @ op(y) into t's gradient seen as a batch like `like`; when t
 * was broadcast over the batch, through a temporary that is then summed. */
static int grad_product(tg_node *n, tg_tensor *t, const tg_tensor *like, bool exact, const tg_tensor *x, bool tx,
                        const tg_tensor *y, bool ty)
{
    if (!tg__needs_grad(t)) return TG_OK;
    /* Straight into a fresh gradient buffer, or one tg_zero_grad zeroed
     * (beta = 1: 0 + product, PyTorch's bits); under EXACT a buffer that
     * holds a gradient already (a non-leaf's partial sum, a leaf's .grad from
     * an earlier use in this backward, as DPO's chosen and rejected forwards
     * give each weight, or from an earlier backward) gets the product rounded
     * first and then added, as PyTorch adds the gradients reaching one tensor
     * (FAST and BF16 accumulate in place, beta = 1). */
    if (exact && n->numerics == TG_NUMERICS_EXACT && tg__grad_held(t)) exact = false;
    if (exact) {
        bool fresh;
        tg_tensor *buf = tg__grad_buf(t, &fresh, false);
        if (!buf) return TG_ENOMEM;
        tg_tensor v = *buf;
        v.ndim = like->ndim;
        for (int d = 0; d < like->ndim; d++) v.shape[d] = like->shape[d];
        tg__contiguous_strides(v.ndim, v.shape, v.stride);
        tg_k_gemm(n->numerics, &v, x, tx, y, ty, 1.0, fresh ? 0.0 : 1.0);
        return TG_OK;
    }
    tg_tensor *tmp = tg_empty(tg__btape(n), like->dtype, like->ndim, like->shape);
    if (!tmp) return TG_ENOMEM;
    tg_k_gemm(n->numerics, tmp, x, tx, y, ty, 1.0, 0.0);
    if (tg_numel(tmp) == tg_numel(t) && like->ndim != t->ndim) { /* like: t folded into rows */
        tg_tensor v = *tmp;
        v.ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) v.shape[d] = t->shape[d];
        tg__contiguous_strides(v.ndim, v.shape, v.stride);
        return tg__accum(t, &v);
    }
    return tg__accum(t, tmp);
}

/* forward: c = a @ b (batched, broadcast); so da = dc @ b^T, db = a^T @ dc
 * (each summed over the batch dims its operand was broadcast along) */
int tg__matmul_backward(tg_node *n)
{
    tg_tensor *a = n->in[0], *b = n->in[1];
    const tg_tensor *as = n->saved[0], *bs = n->saved[1];
    int nb = (int)n->iarg[0];
    int64_t bshape[TG_MAX_DIMS] = {0};
    for (int d = 0; d < nb; d++) bshape[d] = n->iarg[1 + d];
    tg_tensor ap, bp, gp = *n->grad;
    as_batched(as, true, nb, bshape, &ap);
    as_batched(bs, false, nb, bshape, &bp);
    gp.ndim = nb + 2;
    for (int d = 0; d < nb; d++) gp.shape[d] = bshape[d];
    gp.shape[nb] = ap.shape[nb], gp.shape[nb + 1] = bp.shape[nb + 1];
    tg__contiguous_strides(gp.ndim, gp.shape, gp.stride);

    tg_tensor a2, g2 = gp;
    if (bs->ndim <= 2 && as->ndim > 2 && fold_rows(as, &a2)) {
        /* fold the batch into rows: one GEMM each */
        g2.ndim = 2, g2.shape[0] = a2.shape[0], g2.shape[1] = gp.shape[nb + 1];
        tg__contiguous_strides(2, g2.shape, g2.stride);
        tg_tensor b2 = bp;
        b2.ndim = 2, b2.shape[0] = bp.shape[nb], b2.shape[1] = bp.shape[nb + 1];
        b2.stride[0] = bp.stride[nb], b2.stride[1] = bp.stride[nb + 1];
        int st = grad_product(n, a, &a2, true, &g2, false, &b2, true);
        return st ? st : grad_product(n, b, &b2, true, &a2, true, &g2, false);
    }
    int st = grad_product(n, a, &ap, batch_exact(as, nb, bshape), &gp, false, &bp, true);
    return st ? st : grad_product(n, b, &bp, batch_exact(bs, nb, bshape), &ap, true, &gp, false);
}

/* ---- linear -------------------------------------------------------------------------------------- */

tg_tensor *tg_linear(tg_tape *tp, tg_tensor *x, tg_tensor *w, tg_tensor *b)
{
    char sx[64], sw[64], sb[64];
    if (!x || !w) return tg__error_null_input("linear");
    if (!tg__check_weight_dtype("linear", x, w)) return NULL;
    if (b && !tg__check_weight_dtype("linear", x, b)) return NULL;
    if (w->ndim != 2) return tg_error("linear: weight must be 2-D, got %s", tg_shape_str(w, sw, 64));
    if (x->ndim < 1) return tg_error("linear: input must have at least 1 dim, got %s", tg_shape_str(x, sx, 64));
    int64_t in = w->shape[1], outf = w->shape[0];
    if (x->shape[x->ndim - 1] != in)
        return tg_error("linear: input %s @ weight^T %s: inner dims %lld != %lld", tg_shape_str(x, sx, 64),
                        tg_shape_str(w, sw, 64), (long long)x->shape[x->ndim - 1], (long long)in);
    if (b && (b->ndim != 1 || b->shape[0] != outf))
        return tg_error("linear: bias %s does not match %lld output features", tg_shape_str(b, sb, 64),
                        (long long)outf);
    tg_tensor x2;
    tg_tensor *xs = x;
    if (!fold_rows(x, &x2)) {
        xs = tg_clone(tp, x); /* keeps the graph: CloneBackward0 under the linear node */
        if (!xs || !fold_rows(xs, &x2)) return NULL;
    }
    int64_t oshape[TG_MAX_DIMS];
    for (int d = 0; d < x->ndim - 1; d++) oshape[d] = x->shape[d];
    oshape[x->ndim - 1] = outf;
    tg_tensor *out = tg_empty(tp, x->dtype, x->ndim, oshape);
    if (!out) return NULL;
    tg_tensor y2 = *out;
    y2.ndim = 2, y2.shape[0] = x2.shape[0], y2.shape[1] = outf;
    tg__contiguous_strides(2, y2.shape, y2.stride);
    tg__linear_rows(tg_tape_numerics(tp), &y2, &x2, w, b);
    tg_op_id id;
    if (x->ndim == 1)
        id = b ? TG_OP_LINEAR_ADD : TG_OP_LINEAR_VEC;
    else if (x->ndim == 2)
        id = b ? TG_OP_ADDMM : TG_OP_LINEAR_MM;
    else
        id = b ? (x->ndim == 3 && tg_is_contiguous(x) ? TG_OP_LINEAR_VIEW : TG_OP_LINEAR_ADD) : TG_OP_LINEAR_ND;
    tg_tensor *ins[3] = {xs, w, b};
    tg_node *n;
    out = tg__record(tp, id, out, b ? 3 : 2, ins, 2, ins, &n);
    if (!tg__needs_grad(w)) tg__saved_shape_only(n, 0); /* x's values: for W's gradient */
    if (!tg__needs_grad(xs)) tg__saved_shape_only(n, 1); /* W's: for x's */
    return out;
}

void tg__linear_rows(tg_numerics nm, tg_tensor *y2, const tg_tensor *x2, const tg_tensor *w, const tg_tensor *b)
{
    if (b) tg_k_copy(y2, b);
    tg_k_gemm(nm, y2, x2, false, w, true, 1.0, b ? 1.0 : 0.0);
}

/* forward: y = x W^T + b (x folded to (R, in)); so dx = dy W, dW = dy^T x,
 * db = sum of dy over rows */
int tg__linear_backward(tg_node *n)
{
    tg_tensor x2, g2;
    /* both fold: the forward folded x (or its clone), and n->grad is contiguous */
    if (!fold_rows(n->saved[0], &x2) || !fold_rows(n->grad, &g2))
        return tg_error_status(TG_ESTATE, "%s: cannot fold the input or gradient into rows", n->head.name);
    return tg__linear_grads(n, n->in[0], &x2, n->in[1], n->nin > 2 ? n->in[2] : NULL, &g2, NULL);
}

int tg__linear_grads(tg_node *n, tg_tensor *x, const tg_tensor *x2, tg_tensor *w, tg_tensor *b, const tg_tensor *g2,
                     tg_tensor *dx2)
{
    int st = TG_OK;
    if (dx2)
        tg_k_gemm(n->numerics, dx2, g2, false, w, false, 1.0, 0.0); /* as grad_product into a fresh buffer */
    else
        st = grad_product(n, x, x2, true, g2, false, w, false);
    if (!st) st = grad_product(n, w, w, true, g2, true, x2, false);
    if (st) return st;
    if (tg__needs_grad(b)) {
        bool fresh;
        tg_tensor *buf = tg__grad_buf(b, &fresh, false);
        if (!buf) return TG_ENOMEM;
        tg_tensor acc = *buf; /* (1, out) keepdim view */
        acc.ndim = 2, acc.shape[0] = 1, acc.shape[1] = buf->shape[0], acc.stride[0] = buf->shape[0], acc.stride[1] = 1;
        if (fresh) {
            tg_k_sum_to(&acc, g2);
        } else {
            tg_tensor *t = tg_empty(tg__btape(n), buf->dtype, 2, acc.shape);
            if (!t) return TG_ENOMEM;
            tg_k_sum_to(t, g2);
            tg_k_axpy(&acc, t, 1.0);
        }
    }
    return TG_OK;
}
