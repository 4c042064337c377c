/* Elementwise ops with PyTorch broadcasting: forward, shape rule and backward
 * side by side. */
#include "autograd_internal.h"

#include <math.h>

/* Computes x op y (broadcast) and adds it into t's gradient; writes straight
 * into a fresh gradient buffer when the shapes allow. */
static int accum_binary(tg_node *n, tg_tensor *t, const tg_tensor *x, const tg_tensor *y, tg_binop op)
{
    if (!tg__needs_grad(t)) return TG_OK;
    int64_t shape[TG_MAX_DIMS];
    int nd = tg__broadcast_shape("backward", x->ndim, x->shape, y->ndim, y->shape, shape);
    if (nd < 0) return TG_EINVAL;
    tg_tensor *tmp = tg_empty(tg__btape(n), x->dtype, nd, shape);
    if (!tmp) return TG_ENOMEM;
    tg_k_binary(tmp, x, y, op);
    return tg__accum_owned(n, t, tmp);
}

static int accum_scaled(tg_node *n, tg_tensor *t, const tg_tensor *g, double s, tg_binop op)
{
    if (!tg__needs_grad(t)) return TG_OK;
    tg_tensor *tmp = tg__new_like(tg__btape(n), g);
    if (!tmp) return TG_ENOMEM;
    tg_k_binary_scalar(tmp, g, s, op, false);
    return tg__accum_owned(n, t, tmp);
}

/* ---- binary tensor ops --------------------------------------------------------------- */

static tg_tensor *binary(tg_tape *tp, const char *name, tg_op_id id, tg_binop bop, tg_tensor *a, tg_tensor *b)
{
    if (!a || !b) return tg__error_null_input(name);
    if (!tg__check_same_dtype(name, a, b)) return NULL;
    int64_t shape[TG_MAX_DIMS];
    char sa[64], sb[64];
    int nd = tg__broadcast_shape(name, a->ndim, a->shape, b->ndim, b->shape, shape);
    if (nd < 0)
        return tg_error("%s: shapes %s and %s are not broadcastable", name, tg_shape_str(a, sa, 64),
                        tg_shape_str(b, sb, 64));
    tg_tensor *out = tg_empty(tp, a->dtype, nd, shape);
    if (!out) return NULL;
    tg_k_binary(out, a, b, bop);
    tg_tensor *in[2] = {a, b};
    tg_node *n;
    out = tg__record(tp, id, out, 2, in, 2, in, &n);
    /* what backward reads: a factor for the other's gradient; b always, a
     * for b's, in a quotient; nothing in a sum */
    if (bop == TG_BIN_ADD || bop == TG_BIN_SUB || ((bop == TG_BIN_MUL || bop == TG_BIN_DIV) && !tg__needs_grad(b)))
        tg__saved_shape_only(n, 0);
    if (bop == TG_BIN_ADD || bop == TG_BIN_SUB || (bop == TG_BIN_MUL && !tg__needs_grad(a)))
        tg__saved_shape_only(n, 1);
    return out;
}

tg_tensor *tg_add(tg_tape *tp, tg_tensor *a, tg_tensor *b) { return binary(tp, "add", TG_OP_ADD, TG_BIN_ADD, a, b); }
tg_tensor *tg_sub(tg_tape *tp, tg_tensor *a, tg_tensor *b) { return binary(tp, "sub", TG_OP_SUB, TG_BIN_SUB, a, b); }
tg_tensor *tg_mul(tg_tape *tp, tg_tensor *a, tg_tensor *b) { return binary(tp, "mul", TG_OP_MUL, TG_BIN_MUL, a, b); }
tg_tensor *tg_div(tg_tape *tp, tg_tensor *a, tg_tensor *b) { return binary(tp, "div", TG_OP_DIV, TG_BIN_DIV, a, b); }

tg_tensor *tg__add_into(tg_tape *tp, tg_tensor *a, tg_tensor *b)
{
    char sa[64], sb[64];
    if (!a || !b) return tg__error_null_input("add");
    if (!tg__check_same_dtype("add", a, b)) return NULL;
    if (!tg_same_shape(a, b) || !tg_is_contiguous(a))
        return tg_error("add: in-place sum needs a contiguous %s and an addend of its shape, got %s",
                        tg_shape_str(a, sa, 64), tg_shape_str(b, sb, 64));
    tg_tensor *out = tg__alias(tp, a);
    if (!out) return NULL;
    tg__bump(a); /* written in place: a node that saved a refuses backward */
    tg_k_binary(out, a, b, TG_BIN_ADD);
    tg_tensor *in[2] = {a, b};
    tg_node *n;
    out = tg__record(tp, TG_OP_ADD, out, 2, in, 2, in, &n);
    tg__saved_shape_only(n, 0); /* a sum's backward reads neither */
    tg__saved_shape_only(n, 1);
    return out;
}

/* forward: y = a + b; so da = dy, db = dy (summed over broadcast dims) */
int tg__add_backward(tg_node *n)
{
    int st = tg__accum(n->in[0], n->grad);
    return st ? st : tg__accum(n->in[1], n->grad);
}

/* forward: y = a - b; so da = dy, db = -dy */
int tg__sub_backward(tg_node *n)
{
    int st = tg__accum(n->in[0], n->grad);
    return st ? st : accum_scaled(n, n->in[1], n->grad, -1.0, TG_BIN_MUL);
}

/* forward: y = a * b; so da = dy * b, db = dy * a */
int tg__mul_backward(tg_node *n)
{
    int st = accum_binary(n, n->in[0], n->grad, n->saved[1], TG_BIN_MUL);
    return st ? st : accum_binary(n, n->in[1], n->grad, n->saved[0], TG_BIN_MUL);
}

/* forward: y = a / b; so da = dy / b, db = -dy * ((a / b) / b), rounded in
 * PyTorch's order */
int tg__div_backward(tg_node *n)
{
    int st = accum_binary(n, n->in[0], n->grad, n->saved[1], TG_BIN_DIV);
    if (st || !tg__needs_grad(n->in[1])) return st;
    tg_tape *tp = tg__btape(n);
    const tg_tensor *a = n->saved[0], *b = n->saved[1];
    int64_t shape[TG_MAX_DIMS];
    int nd = tg__broadcast_shape("backward", a->ndim, a->shape, b->ndim, b->shape, shape);
    if (nd < 0) return TG_EINVAL;
    nd = tg__broadcast_shape("backward", nd, shape, n->grad->ndim, n->grad->shape, shape);
    if (nd < 0) return TG_EINVAL;
    tg_tensor *q = tg_empty(tp, n->grad->dtype, nd, shape);
    if (!q) return TG_ENOMEM;
    tg_k_binary(q, a, b, TG_BIN_DIV);
    tg_k_binary(q, q, b, TG_BIN_DIV);
    tg_k_binary(q, q, n->grad, TG_BIN_MUL);
    tg_k_unary(n->numerics, q, q, TG_UN_NEG); /* (-dy) * q: the sign alone differs from -(dy * q) */
    return tg__accum(n->in[1], q);
}

/* ---- tensor-scalar ops ------------------------------------------------------------------ */

static tg_tensor *scalar_op(tg_tape *tp, const char *name, tg_op_id id, tg_binop bop, bool rev, tg_tensor *a,
                            double s)
{
    if (!a) return tg__error_null_input(name);
    if (!tg__check_float(name, a)) return NULL;
    tg_tensor *out = tg__new_like(tp, a);
    if (!out) return NULL;
    tg_k_binary_scalar(out, a, s, bop, rev);
    tg_node *n;
    out = tg__record(tp, id, out, 1, &a, 1, &a, &n);
    if (bop != TG_BIN_POW) tg__saved_shape_only(n, 0); /* only pow's backward reads a */
    if (n) n->darg[0] = s;
    return out;
}

tg_tensor *tg_add_scalar(tg_tape *tp, tg_tensor *a, double s)
{
    return scalar_op(tp, "add", TG_OP_ADD_SCALAR, TG_BIN_ADD, false, a, s);
}
tg_tensor *tg_sub_scalar(tg_tape *tp, tg_tensor *a, double s)
{
    return scalar_op(tp, "sub", TG_OP_SUB_SCALAR, TG_BIN_SUB, false, a, s);
}
tg_tensor *tg_rsub_scalar(tg_tape *tp, tg_tensor *a, double s)
{
    return scalar_op(tp, "rsub", TG_OP_RSUB, TG_BIN_SUB, true, a, s);
}
tg_tensor *tg_mul_scalar(tg_tape *tp, tg_tensor *a, double s)
{
    return scalar_op(tp, "mul", TG_OP_MUL_SCALAR, TG_BIN_MUL, false, a, s);
}
tg_tensor *tg_div_scalar(tg_tape *tp, tg_tensor *a, double s)
{
    return scalar_op(tp, "div", TG_OP_DIV_SCALAR, TG_BIN_DIV, false, a, s);
}
tg_tensor *tg_pow_scalar(tg_tape *tp, tg_tensor *a, double e)
{
    return scalar_op(tp, "pow", TG_OP_POW_SCALAR, TG_BIN_POW, false, a, e);
}

/* forward: y = a + s (or a - s); so da = dy */
int tg__add_scalar_backward(tg_node *n) { return tg__accum(n->in[0], n->grad); }

/* forward: y = s - a; so da = -dy */
int tg__rsub_backward(tg_node *n) { return accum_scaled(n, n->in[0], n->grad, -1.0, TG_BIN_MUL); }

/* forward: y = a * s (or a / s); so da = dy * s (or dy / s) */
int tg__mul_scalar_backward(tg_node *n)
{
    return accum_scaled(n, n->in[0], n->grad, n->darg[0], n->op == TG_OP_DIV_SCALAR ? TG_BIN_DIV : TG_BIN_MUL);
}

/* forward: y = a^p; so da = dy * p * a^(p-1) */
int tg__pow_scalar_backward(tg_node *n)
{
    double p = n->darg[0];
    if (p == 0) return accum_scaled(n, n->in[0], n->grad, 0.0, TG_BIN_MUL);
    tg_tensor *t = tg__new_like(tg__btape(n), n->saved[0]);
    if (!t) return TG_ENOMEM;
    tg_k_binary_scalar(t, n->saved[0], p - 1.0, TG_BIN_POW, false);
    tg_k_binary_scalar(t, t, p, TG_BIN_MUL, false);
    tg_k_binary(t, t, n->grad, TG_BIN_MUL);
    return tg__accum(n->in[0], t);
}

/* ---- unary ops ------------------------------------------------------------------------------ */

static tg_tensor *unary(tg_tape *tp, const char *name, tg_op_id id, tg_unop uop, tg_tensor *a)
{
    if (!a) return tg__error_null_input(name);
    if (!tg__check_float(name, a)) return NULL;
    tg_tensor *out = tg__new_like(tp, a);
    if (!out) return NULL;
    tg_k_unary(tg_tape_numerics(tp), out, a, uop);
    tg_tensor *saved[2] = {a, out};
    tg_node *n;
    out = tg__record(tp, id, out, 1, &a, 2, saved, &n);
    /* backward reads the input (log, gelu), the output (exp, sqrt, rsqrt, tanh,
     * relu) or neither (neg), as PyTorch saves them */
    if (uop != TG_UN_LOG && uop != TG_UN_GELU && uop != TG_UN_GELU_TANH) tg__saved_shape_only(n, 0);
    if (uop != TG_UN_EXP && uop != TG_UN_SQRT && uop != TG_UN_RSQRT && uop != TG_UN_TANH && uop != TG_UN_RELU)
        tg__saved_shape_only(n, 1);
    return out;
}

tg_tensor *tg_neg(tg_tape *tp, tg_tensor *a) { return unary(tp, "neg", TG_OP_NEG, TG_UN_NEG, a); }
tg_tensor *tg_exp(tg_tape *tp, tg_tensor *a) { return unary(tp, "exp", TG_OP_EXP, TG_UN_EXP, a); }
tg_tensor *tg_log(tg_tape *tp, tg_tensor *a) { return unary(tp, "log", TG_OP_LOG, TG_UN_LOG, a); }
tg_tensor *tg_sqrt(tg_tape *tp, tg_tensor *a) { return unary(tp, "sqrt", TG_OP_SQRT, TG_UN_SQRT, a); }
tg_tensor *tg_rsqrt(tg_tape *tp, tg_tensor *a) { return unary(tp, "rsqrt", TG_OP_RSQRT, TG_UN_RSQRT, a); }
tg_tensor *tg_tanh(tg_tape *tp, tg_tensor *a) { return unary(tp, "tanh", TG_OP_TANH, TG_UN_TANH, a); }
tg_tensor *tg_relu(tg_tape *tp, tg_tensor *a) { return unary(tp, "relu", TG_OP_RELU, TG_UN_RELU, a); }
tg_tensor *tg_gelu(tg_tape *tp, tg_tensor *a) { return unary(tp, "gelu", TG_OP_GELU, TG_UN_GELU, a); }
tg_tensor *tg_gelu_tanh(tg_tape *tp, tg_tensor *a) { return unary(tp, "gelu_tanh", TG_OP_GELU_TANH, TG_UN_GELU_TANH, a); }

/* forward: y = -a; so da = -dy */
int tg__neg_backward(tg_node *n) { return accum_scaled(n, n->in[0], n->grad, -1.0, TG_BIN_MUL); }

/* forward: y = exp(a); so da = dy * y */
int tg__exp_backward(tg_node *n) { return accum_binary(n, n->in[0], n->grad, n->saved[1], TG_BIN_MUL); }

/* forward: y = log(a); so da = dy / a */
int tg__log_backward(tg_node *n) { return accum_binary(n, n->in[0], n->grad, n->saved[0], TG_BIN_DIV); }

/* forward: y = sqrt(a); so da = dy / (2 y) */
int tg__sqrt_backward(tg_node *n)
{
    tg_tensor *t = tg__new_like(tg__btape(n), n->grad);
    if (!t) return TG_ENOMEM;
    tg_k_binary(t, n->grad, n->saved[1], TG_BIN_DIV);
    tg_k_binary_scalar(t, t, 2.0, TG_BIN_DIV, false);
    return tg__accum(n->in[0], t);
}

/* forward: y = 1 / sqrt(a); so da = -0.5 * dy * y^3 (PyTorch's formula:
 * (dy * -0.5) * ((y * y) * y)) */
int tg__rsqrt_backward(tg_node *n)
{
    tg_tensor *t = tg__new_like(tg__btape(n), n->grad), *y3 = tg__new_like(tg__btape(n), n->grad);
    if (!t || !y3) return TG_ENOMEM;
    tg_k_binary(y3, n->saved[1], n->saved[1], TG_BIN_MUL);
    tg_k_binary(y3, y3, n->saved[1], TG_BIN_MUL);
    tg_k_binary_scalar(t, n->grad, -0.5, TG_BIN_MUL, false);
    tg_k_binary(t, t, y3, TG_BIN_MUL);
    return tg__accum(n->in[0], t);
}

/* forward: y = tanh(a); so da = dy * (1 - y^2) (float32: 1 - y y rounded once,
 * as PyTorch's tanh_backward kernel computes it) */
int tg__tanh_backward(tg_node *n)
{
    tg_tape *tp = tg__btape(n);
    tg_tensor *t = tg__new_like(tp, n->grad);
    if (!t) return TG_ENOMEM;
    if (t->dtype == TG_F32) {
        const tg_tensor *gd = tg__dense(tp, n->grad), *yd = tg__dense(tp, n->saved[1]);
        if (!gd || !yd) return TG_ENOMEM;
        const float *g = tg__ptr(gd, gd->offset), *y = tg__ptr(yd, yd->offset);
        float *o = tg__ptr(t, t->offset);
        int64_t cnt = tg_numel(t);
        for (int64_t i = 0; i < cnt; i++) o[i] = g[i] * fmaf(-y[i], y[i], 1.0f);
        return tg__accum_owned(n, n->in[0], t);
    }
    tg_k_binary(t, n->saved[1], n->saved[1], TG_BIN_MUL);
    tg_k_binary_scalar(t, t, 1.0, TG_BIN_SUB, true);
    tg_k_binary(t, t, n->grad, TG_BIN_MUL);
    return tg__accum(n->in[0], t);
}

/* forward: y = max(a, 0); so da = dy * (y > 0) */
int tg__relu_backward(tg_node *n)
{
    tg_tape *tp = tg__btape(n);
    tg_tensor *mask = tg_empty(tp, TG_BOOL, n->saved[1]->ndim, n->saved[1]->shape);
    tg_tensor *zero = tg_scalar(tp, n->grad->dtype, 0.0);
    tg_tensor *t = tg__new_like(tp, n->grad);
    if (!mask || !zero || !t) return TG_ENOMEM;
    tg_k_compare(mask, n->saved[1], zero, TG_CMP_GT);
    tg_k_where(t, mask, n->grad, zero);
    return tg__accum(n->in[0], t);
}

/* forward: y = a/2 (1 + tanh(k (a + c a^3))), k = sqrt(2/pi), c = 0.044715;
 * so da = dy (1/2 (1 + t) + a/2 (1 - t^2) k (1 + 3 c a^2)), t = tanh(...) */
static tg_tensor *gelu_grad(tg_tape *tp, tg_numerics nm, bool pytorch, const tg_tensor *a, tg_tensor *dy, bool in_place)
{
    tg_tensor *r = in_place ? dy : tg__new_like(tp, dy);
    if (!r) return NULL;
    if (a->dtype == TG_F32) { /* rounded as the book's composed GELU's graph (kernels.c) */
        const tg_tensor *gd = tg__dense(tp, dy), *ad = tg__dense(tp, a);
        if (!gd || !ad) return NULL;
        tg_k_gelu_backward_f32(nm, pytorch, tg__ptr(r, r->offset), tg__ptr(ad, ad->offset), tg__ptr(gd, gd->offset),
                               tg_numel(r));
        return r;
    }
    tg_tensor *t = tg_empty(tp, TG_F64, a->ndim, a->shape);
    tg_tensor *g = tg_empty(tp, TG_F64, a->ndim, a->shape);
    if (!t || !g) return NULL;
    tg_k_copy(t, a);
    tg_k_copy(g, dy);
    double *x = t->data, *d = g->data;
    int64_t cnt = tg_numel(t);
    const double k = 0.7978845608028654, c = 0.044715;
    for (int64_t i = 0; i < cnt; i++) {
        double v = x[i], th = tanh(k * (v + c * v * v * v));
        x[i] = d[i] * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * c * v * v));
    }
    tg_k_copy(r, t);
    return r;
}

tg_tensor *tg__gelu_grad(tg_tape *tp, tg_numerics nm, const tg_tensor *a, tg_tensor *dy, bool in_place)
{
    return gelu_grad(tp, nm, false, a, dy, in_place);
}

int tg__gelu_backward(tg_node *n)
{
    tg_tensor *r = gelu_grad(tg__btape(n), n->numerics, false, n->saved[0], n->grad, false);
    return r ? tg__accum_owned(n, n->in[0], r) : TG_ENOMEM;
}

/* F.gelu(x, approximate="tanh")'s GeluBackward0: PyTorch's kernel in float32,
 * the same derivative as the book's in float64 */
int tg__gelu_tanh_backward(tg_node *n)
{
    tg_tensor *r = gelu_grad(tg__btape(n), n->numerics, true, n->saved[0], n->grad, false);
    return r ? tg__accum_owned(n, n->in[0], r) : TG_ENOMEM;
}

/* ---- comparisons, where, masked_fill ------------------------------------------------------- */

tg_tensor *tg_compare(tg_tape *tp, const tg_tensor *a, const tg_tensor *b, tg_cmp op)
{
    if (!a || !b) return tg__error_null_input("compare");
    if (tg__refuse_q8("compare", a) || tg__refuse_q8("compare", b)) return NULL;
    if ((unsigned)op > TG_CMP_GE) return tg_error("compare: unknown comparison %d", (int)op);
    int64_t shape[TG_MAX_DIMS];
    char sa[64], sb[64];
    int nd = tg__broadcast_shape("compare", a->ndim, a->shape, b->ndim, b->shape, shape);
    if (nd < 0)
        return tg_error("compare: shapes %s and %s are not broadcastable", tg_shape_str(a, sa, 64),
                        tg_shape_str(b, sb, 64));
    tg_tensor *out = tg_empty(tp, TG_BOOL, nd, shape);
    if (out) tg_k_compare(out, a, b, op);
    return out;
}

tg_tensor *tg_compare_scalar(tg_tape *tp, const tg_tensor *a, double s, tg_cmp op)
{
    if (!a) return tg__error_null_input("compare");
    tg_tensor *b = tg_scalar(tp, TG_F64, s);
    return b ? tg_compare(tp, a, b, op) : NULL;
}

tg_tensor *tg_where(tg_tape *tp, const tg_tensor *cond, tg_tensor *a, tg_tensor *b)
{
    if (!cond || !a || !b) return tg__error_null_input("where");
    if (cond->dtype != TG_BOOL) return tg_error("where: condition must be bool, got %s", tg_dtype_name(cond->dtype));
    if (!tg__check_same_dtype("where", a, b)) return NULL;
    int64_t s1[TG_MAX_DIMS], shape[TG_MAX_DIMS];
    char sc[64], sa[64], sb[64];
    int n1 = tg__broadcast_shape("where", a->ndim, a->shape, b->ndim, b->shape, s1);
    int nd = n1 < 0 ? -1 : tg__broadcast_shape("where", cond->ndim, cond->shape, n1, s1, shape);
    if (nd < 0)
        return tg_error("where: shapes %s, %s and %s are not broadcastable", tg_shape_str(cond, sc, 64),
                        tg_shape_str(a, sa, 64), tg_shape_str(b, sb, 64));
    tg_tensor *out = tg_empty(tp, a->dtype, nd, shape);
    if (!out) return NULL;
    tg_k_where(out, cond, a, b);
    tg_tensor *in[2] = {a, b}, *saved[1] = {(tg_tensor *)cond};
    return tg__record(tp, TG_OP_WHERE, out, 2, in, 1, saved, NULL);
}

/* dy where cond (or where !cond), zero elsewhere, added into t's gradient. */
static int accum_masked(tg_node *n, tg_tensor *t, const tg_tensor *cond, bool keep_true)
{
    if (!tg__needs_grad(t)) return TG_OK;
    tg_tape *tp = tg__btape(n);
    tg_tensor *zero = tg_scalar(tp, n->grad->dtype, 0.0);
    tg_tensor *r = tg__new_like(tp, n->grad);
    if (!zero || !r) return TG_ENOMEM;
    if (keep_true)
        tg_k_where(r, cond, n->grad, zero);
    else
        tg_k_where(r, cond, zero, n->grad);
    return tg__accum_owned(n, t, r);
}

/* forward: y = where(c, a, b); so da = where(c, dy, 0), db = where(c, 0, dy) */
int tg__where_backward(tg_node *n)
{
    int st = accum_masked(n, n->in[0], n->saved[0], true);
    return st ? st : accum_masked(n, n->in[1], n->saved[0], false);
}

tg_tensor *tg_masked_fill(tg_tape *tp, tg_tensor *x, const tg_tensor *mask, double value)
{
    if (!x || !mask) return tg__error_null_input("masked_fill");
    if (!tg__check_float("masked_fill", x)) return NULL;
    if (mask->dtype != TG_BOOL)
        return tg_error("masked_fill: mask must be bool, got %s", tg_dtype_name(mask->dtype));
    int64_t shape[TG_MAX_DIMS];
    char sx[64], sm[64];
    int nd = tg__broadcast_shape("masked_fill", x->ndim, x->shape, mask->ndim, mask->shape, shape);
    bool ok = nd == x->ndim;
    for (int d = 0; ok && d < nd; d++) ok = shape[d] == x->shape[d];
    if (!ok)
        return tg_error("masked_fill: mask %s does not broadcast to input %s", tg_shape_str(mask, sm, 64),
                        tg_shape_str(x, sx, 64));
    tg_tensor *out = tg__new_like(tp, x);
    tg_tensor *fill = tg_scalar(tp, x->dtype, value);
    if (!out || !fill) return NULL;
    tg_k_where(out, mask, fill, x);
    tg_tensor *saved[1] = {(tg_tensor *)mask};
    return tg__record(tp, TG_OP_MASKED_FILL, out, 1, &x, 1, saved, NULL);
}

/* forward: y = masked_fill(x, mask, v); so dx = where(mask, 0, dy) */
int tg__masked_fill_backward(tg_node *n) { return accum_masked(n, n->in[0], n->saved[0], false); }

/* ---- dropout ------------------------------------------------------------------------------------ */

/* out = x * z, z = 1/q (in x's dtype: PyTorch's noise.div_(1 - p)) where
 * bit i is set, else 0; x and out dense */
void tg__dropout_mask_mul(tg_tensor *out, const tg_tensor *x, const uint8_t *bits, double q)
{
    int64_t n = tg_numel(x);
    if (x->dtype == TG_F32) {
        const float *a = (const float *)x->data + x->offset, keep = 1.0f / (float)q;
        float *o = (float *)out->data + out->offset;
        for (int64_t i = 0; i < n; i++) o[i] = a[i] * ((bits[i >> 3] >> (i & 7)) & 1u ? keep : 0.0f);
    } else {
        const double *a = (const double *)x->data + x->offset, keep = 1.0 / q;
        double *o = (double *)out->data + out->offset;
        for (int64_t i = 0; i < n; i++) o[i] = a[i] * ((bits[i >> 3] >> (i & 7)) & 1u ? keep : 0.0);
    }
}

/* PyTorch's stream, x contiguous: the draws kept as bits (1/32 of the float
 * mask's memory); over: the product written over x */
static tg_tensor *dropout_bits(tg_tape *tp, tg_tensor *x, double p, tg_generator *gen, bool over)
{
    int64_t cnt = tg_numel(x), nbytes = (cnt + 7) / 8;
    double q = 1.0 - p;
    tg_tensor *bits = tg_empty(tp, TG_U8, 1, &nbytes);
    tg_tensor *out = !bits ? NULL : over ? tg__alias(tp, x) : tg__new_like(tp, x);
    if (!out) return NULL;
    tg__dropout_bits(gen, p, bits->data, cnt);
    if (over) tg__bump(x); /* written in place */
    tg__dropout_mask_mul(out, x, bits->data, q);
    tg_node *n;
    out = tg__record(tp, TG_OP_DROPOUT_BITS, out, 1, &x, 1, &bits, &n);
    if (n) n->darg[0] = q;
    return out;
}

tg_tensor *tg__dropout_over(tg_tape *tp, tg_tensor *x, double p, tg_generator *g)
{
    tg_generator *gen = g ? g : tg_default_generator();
    if (!x || !(p > 0 && p < 1) || !tg__is_float(x->dtype) || !tg_is_contiguous(x)) return tg_dropout(tp, x, p, g);
    return dropout_bits(tp, x, p, gen, true);
}

tg_tensor *tg_dropout(tg_tape *tp, tg_tensor *x, double p, tg_generator *g)
{
    if (!x) return tg__error_null_input("dropout");
    if (!(p >= 0 && p < 1)) return tg_error("dropout: probability %g is outside [0, 1)", p);
    if (!tg__check_float("dropout", x)) return NULL;
    if (p == 0) return x;
    /* PyTorch's CPU dropout (aten's _dropout_impl): noise = empty_like(x)
     * .bernoulli_(1 - p); noise.div_(1 - p) (in x's dtype); x * noise. The
     * scaled keep-mask is the only thing saved. With the counter stream
     * (tensor.h) the mask comes from one seed and a hash instead. */
    double q = 1.0 - p;
    tg_generator *gen = g ? g : tg_default_generator();
    int64_t cnt = tg_numel(x);
    bool counter = tg_generator_dropout_stream(gen) == TG_DROPOUT_COUNTER;
    if (tg_is_contiguous(x)) return dropout_bits(tp, x, p, gen, false);
    tg_tensor *m = tg__new_like(tp, x);
    if (!m) return NULL;
    int64_t before, after; /* a batch slice's place in the whole mask */
    tg__mask_slice(gen, cnt, &before, &after);
    if (counter) {
        uint64_t seed = tg_generator_random64(gen);
        uint32_t th = tg__dropout_threshold(p);
        bool f32 = m->dtype == TG_F32;
        double keep = f32 ? (double)(1.0f / (float)q) : 1.0 / q;
#pragma omp parallel for if (cnt > 65536)
        for (int64_t i = 0; i < cnt; i++) {
            double v = tg__counter_keep(seed, (uint64_t)(before + i), th) ? keep : 0.0;
            if (f32)
                ((float *)m->data)[i] = (float)v;
            else
                ((double *)m->data)[i] = v;
        }
    } else {
        tg__skip_uniform(gen, before);
        if (tg_bernoulli_(m, q, gen) != TG_OK) return NULL;
        tg__skip_uniform(gen, after);
        if (m->dtype == TG_F32) {
            float *d = m->data, fq = (float)q;
            for (int64_t i = 0; i < cnt; i++) d[i] = d[i] / fq;
        } else {
            double *d = m->data;
            for (int64_t i = 0; i < cnt; i++) d[i] = d[i] / q;
        }
    }
    tg_tensor *out = tg__new_like(tp, x);
    if (!out) return NULL;
    tg_k_binary(out, x, m, TG_BIN_MUL);
    return tg__record(tp, TG_OP_DROPOUT, out, 1, &x, 1, &m, NULL);
}

/* forward: y = x * m; so dx = dy * m */
int tg__dropout_backward(tg_node *n) { return accum_binary(n, n->in[0], n->grad, n->saved[0], TG_BIN_MUL); }

/* the same with m kept as bits */
int tg__dropout_bits_backward(tg_node *n)
{
    tg_tensor *x = n->in[0];
    if (!tg__needs_grad(x)) return TG_OK;
    const tg_tensor *g = tg__dense(tg__btape(n), n->grad);
    tg_tensor *dx = g ? tg__new_like(tg__btape(n), x) : NULL;
    if (!dx) return TG_ENOMEM;
    tg__dropout_mask_mul(dx, g, n->saved[0]->data, n->darg[0]);
    return tg__accum_owned(n, x, dx);
}
