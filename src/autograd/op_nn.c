/* Losses: mean squared error and cross-entropy over logits. */
#include "autograd_internal.h"

#include <math.h>

static tg_tensor *reduce_loss(tg_tape *tp, tg_tensor *elem, tg_reduction r, int64_t count)
{
    if (r == TG_REDUCE_NONE) return elem;
    tg_tensor *out = tg_scalar(tp, elem->dtype, 0.0);
    if (!out) return NULL;
    tg_tensor kv = *out;
    kv.ndim = elem->ndim;
    for (int d = 0; d < elem->ndim; d++) kv.shape[d] = 1, kv.stride[d] = 0;
    tg_k_sum_to(&kv, elem);
    if (r == TG_REDUCE_MEAN) tg_k_binary_scalar(out, out, (double)count, TG_BIN_DIV, false);
    return out;
}

static bool check_reduction(const char *op, tg_reduction r)
{
    if (r != TG_REDUCE_MEAN && r != TG_REDUCE_SUM && r != TG_REDUCE_NONE) {
        tg_error("%s: unknown reduction %d", op, (int)r);
        return false;
    }
    return true;
}

tg_tensor *tg_mse_loss(tg_tape *tp, tg_tensor *input, tg_tensor *target, tg_reduction r)
{
    char si[64], st[64];
    if (!input || !target) return tg__error_null_input("mse_loss");
    if (!tg__check_same_dtype("mse_loss", input, target) || !check_reduction("mse_loss", r)) return NULL;
    if (!tg_same_shape(input, target))
        return tg_error("mse_loss: input %s and target %s must have the same shape", tg_shape_str(input, si, 64),
                        tg_shape_str(target, st, 64));
    tg_tensor *diff = tg__new_like(tp, input);
    tg_tensor *sq = tg__new_like(tp, input);
    if (!diff || !sq) return NULL;
    tg_k_binary(diff, input, target, TG_BIN_SUB);
    tg_k_binary(sq, diff, diff, TG_BIN_MUL);
    tg_tensor *out = reduce_loss(tp, sq, r, tg_numel(input));
    tg_tensor *in[2] = {input, target};
    tg_node *n;
    out = tg__record(tp, TG_OP_MSE_LOSS, out, 2, in, 1, &diff, &n);
    if (n) n->iarg[0] = r;
    return out;
}

/* forward: l = reduce((x - t)^2); so dx = 2 (x - t) dl (/ numel for mean), dt = -dx */
int tg__mse_loss_backward(tg_node *n)
{
    const tg_tensor *diff = n->saved[0];
    tg_tensor *gx = tg__new_like(tg__btape(n), diff);
    if (!gx) return TG_ENOMEM;
    tg_reduction r = (tg_reduction)n->iarg[0];
    tg_k_binary(gx, diff, n->grad, TG_BIN_MUL); /* dl broadcasts (0-dim for mean/sum) */
    double scale = r == TG_REDUCE_MEAN ? 2.0 / (double)tg_numel(diff) : 2.0;
    tg_k_binary_scalar(gx, gx, scale, TG_BIN_MUL, false);
    int st = tg__accum(n->in[0], gx);
    if (st || !tg__needs_grad(n->in[1])) return st;
    tg_k_binary_scalar(gx, gx, -1.0, TG_BIN_MUL, false);
    return tg__accum(n->in[1], gx);
}

tg_tensor *tg_cross_entropy(tg_tape *tp, tg_tensor *logits, const tg_tensor *target, tg_reduction r)
{
    char sl[64], st[64];
    if (!logits || !target) return tg__error_null_input("cross_entropy");
    if (!tg__check_float("cross_entropy", logits) || !check_reduction("cross_entropy", r)) return NULL;
    if (logits->ndim != 2) return tg_error("cross_entropy: logits must be (N, C), got %s", tg_shape_str(logits, sl, 64));
    if (target->dtype != TG_I64 || target->ndim != 1 || target->shape[0] != logits->shape[0])
        return tg_error("cross_entropy: target must be int64 of shape (%lld), got %s %s",
                        (long long)logits->shape[0], tg_dtype_name(target->dtype), tg_shape_str(target, st, 64));
    int64_t N = logits->shape[0], C = logits->shape[1];
    for (int64_t i = 0; i < N; i++) {
        double t = tg_item_at(target, i);
        if (t < 0 || t >= (double)C)
            return tg_error("cross_entropy: target %lld at position %lld is out of bounds for %lld classes",
                            (long long)t, (long long)i, (long long)C);
    }
    /* log-softmax is kept for backward: d logits = softmax - onehot */
    tg_tensor *lsm = tg__new_like(tp, logits);
    int64_t es[1] = {N};
    tg_tensor *elem = tg_empty(tp, logits->dtype, 1, es);
    if (!lsm || !elem) return NULL;
    tg_k_softmax(lsm, logits, 1, true);
    for (int64_t i = 0; i < N; i++) {
        int64_t idx[2] = {i, (int64_t)tg_item_at(target, i)};
        int64_t e[1] = {i};
        tg_set(elem, e, -tg_get(lsm, idx));
    }
    tg_tensor *out = reduce_loss(tp, elem, r, N);
    tg_tensor *saved[2] = {lsm, (tg_tensor *)target};
    tg_node *n;
    out = tg__record(tp, TG_OP_CROSS_ENTROPY, out, 1, &logits, 2, saved, &n);
    if (n) n->iarg[0] = r;
    return out;
}

/* forward: l = reduce(-log_softmax(x)[i, t_i]); so dx_i = (softmax(x_i) - onehot(t_i)) dl_i
 * (dl_i = dl / N for mean) */
int tg__cross_entropy_backward(tg_node *n)
{
    const tg_tensor *lsm = n->saved[0], *target = n->saved[1];
    tg_reduction r = (tg_reduction)n->iarg[0];
    int64_t N = lsm->shape[0], C = lsm->shape[1];
    tg_tensor *gx = tg__new_like(tg__btape(n), lsm);
    if (!gx) return TG_ENOMEM;
    tg_k_unary(gx, lsm, TG_UN_EXP);
    for (int64_t i = 0; i < N; i++) {
        int64_t idx[2] = {i, (int64_t)tg_item_at(target, i)};
        tg_set(gx, idx, tg_get(gx, idx) - 1.0);
        double g = r == TG_REDUCE_NONE ? tg_item_at(n->grad, i) : tg_item(n->grad) / (r == TG_REDUCE_MEAN ? (double)N : 1.0);
        for (int64_t j = 0; j < C; j++) {
            int64_t p[2] = {i, j};
            tg_set(gx, p, tg_get(gx, p) * g);
        }
    }
    return tg__accum(n->in[0], gx);
}
