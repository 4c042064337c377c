/* Preference tuning (DPO): the book's compute_logprobs and compute_dpo_loss
 * (ch07/04_preference-tuning-with-dpo), composed from recorded ops in the
 * notebook's order: the nodes PyTorch records (but for the slices, below)
 * and, in float32, its values and gradients to the bit. */
#include "autograd_internal.h"

#include <math.h>

/* The notebook's lines, with (B, T, V) the logits' shape:
 *   labels = labels[:, 1:]                                   (B, T-1)
 *   log_probs = F.log_softmax(logits[:, :-1, :], dim=-1)     (B, T-1, V)
 *   selected = torch.gather(log_probs, -1, labels.unsqueeze(-1)).squeeze(-1)
 *   mask given: (selected * mask[:, 1:]).sum(-1) / mask[:, 1:].sum(-1)
 *   else:       selected.mean(-1)                            (B)
 * The bool mask multiplies as 0/1 of the logits' dtype and the int64 count
 * divides as that dtype, as PyTorch's type promotion has them. PyTorch's
 * indexing logits[:, :-1, :] records a SliceBackward0 for each of the three
 * dims, two of them whole; one narrow here gives the same gradient without
 * two more copies of the (B, T, V) logits' gradient. */
#define LP "compute_logprobs"

static bool check_logprobs_args(const tg_tensor *logits, const tg_tensor *labels, const tg_tensor *mask)
{
    char s1[64], s2[64];
    if (logits->ndim != 3) {
        tg_error(LP ": logits must be (B, T, V), got %s", tg_shape_str(logits, s1, sizeof s1));
        return false;
    }
    if (!tg__check_float(LP, logits)) return false;
    int64_t B = logits->shape[0], T = logits->shape[1], V = logits->shape[2];
    if (labels->dtype != TG_I64 || labels->ndim != 2 || labels->shape[0] != B || labels->shape[1] != T) {
        tg_error(LP ": labels must be int64 of shape (%lld,%lld) as logits %s, got %s %s", (long long)B, (long long)T,
                 tg_shape_str(logits, s1, sizeof s1), tg_dtype_name(labels->dtype),
                 tg_shape_str(labels, s2, sizeof s2));
        return false;
    }
    if (mask && (mask->dtype != TG_BOOL || mask->ndim != 2 || mask->shape[0] != B || mask->shape[1] != T)) {
        tg_error(LP ": selection mask must be bool of shape (%lld,%lld) as labels, got %s %s", (long long)B,
                 (long long)T, tg_dtype_name(mask->dtype), tg_shape_str(mask, s2, sizeof s2));
        return false;
    }
    if (T < 2) {
        tg_error(LP ": needs at least 2 tokens per sequence, got %lld", (long long)T);
        return false;
    }
    /* labels[:, 0] is never read: only the predicted tokens must be classes */
    const int64_t *lab = labels->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 1; t < T; t++) {
            int64_t v = lab[labels->offset + b * labels->stride[0] + t * labels->stride[1]];
            if (v < 0 || v >= V) {
                tg_error(LP ": label %lld at (%lld, %lld) is out of range for %lld classes", (long long)v,
                         (long long)b, (long long)t, (long long)V);
                return false;
            }
        }
    return true;
}

tg_tensor *tg_compute_logprobs(tg_tape *tp, tg_tensor *logits, const tg_tensor *labels, const tg_tensor *mask)
{
    if (!logits || !labels) return tg__error_null_input(LP);
    if (!check_logprobs_args(logits, labels, mask)) return NULL;
    int64_t T = logits->shape[1];
    const int last[] = {-1};
    /* the index ops only read labels and mask: views of them stay outside the graph */
    tg_tensor *index = tg_unsqueeze(tp, tg_narrow(tp, (tg_tensor *)labels, 1, 1, T - 1), -1);
    tg_tensor *log_probs = tg_log_softmax(tp, tg_narrow(tp, logits, 1, 0, T - 1), -1);
    tg_tensor *selected = tg_squeeze(tp, tg_gather(tp, log_probs, -1, index), -1);
    if (!mask) return tg_mean_dims(tp, selected, 1, last, false);
    tg_tensor *m = tg_narrow(tp, (tg_tensor *)mask, 1, 1, T - 1);
    tg_tensor *m01 = m ? tg_to_dtype(tp, m, logits->dtype) : NULL;
    tg_tensor *count = m ? tg_sum_dims(tp, m, 1, last, false) : NULL;
    tg_tensor *countf = count ? tg_to_dtype(tp, count, logits->dtype) : NULL;
    return tg_div(tp, tg_sum_dims(tp, tg_mul(tp, selected, m01), 1, last, false), countf);
}

/* The notebook's compute_dpo_loss:
 *   logits = (pc - pr) - (rc - rr)
 *   losses = -F.logsigmoid(beta * logits)
 *   chosen_rewards = (pc - rc).detach(); rejected_rewards = (pr - rr).detach()
 *   return losses.mean(), chosen_rewards.mean(), rejected_rewards.mean() */
#define DPO "compute_dpo_loss"

tg_tensor *tg_compute_dpo_loss(tg_tape *tp, tg_tensor *policy_chosen, tg_tensor *policy_rejected,
                               tg_tensor *reference_chosen, tg_tensor *reference_rejected, double beta,
                               tg_tensor **chosen_reward, tg_tensor **rejected_reward)
{
    if (chosen_reward) *chosen_reward = NULL;
    if (rejected_reward) *rejected_reward = NULL;
    tg_tensor *in[4] = {policy_chosen, policy_rejected, reference_chosen, reference_rejected};
    static const char *const names[4] = {"policy_chosen", "policy_rejected", "reference_chosen",
                                         "reference_rejected"};
    char s1[64], s2[64];
    for (int i = 0; i < 4; i++) {
        if (!in[i]) return tg__error_null_input(DPO);
        if (!tg__check_float(DPO, in[i])) return NULL;
        if (in[i]->ndim != 1)
            return tg_error(DPO ": %s must be 1-D (batch), got %s", names[i], tg_shape_str(in[i], s1, sizeof s1));
        if (i > 0 && (!tg_same_shape(in[i], in[0]) || in[i]->dtype != in[0]->dtype))
            return tg_error(DPO ": %s %s %s does not match %s %s %s", names[i], tg_dtype_name(in[i]->dtype),
                            tg_shape_str(in[i], s1, sizeof s1), names[0], tg_dtype_name(in[0]->dtype),
                            tg_shape_str(in[0], s2, sizeof s2));
    }
    if (!isfinite(beta)) return tg_error(DPO ": beta must be finite, got %g", beta);
    tg_tensor *logits = tg_sub(tp, tg_sub(tp, policy_chosen, policy_rejected),
                               tg_sub(tp, reference_chosen, reference_rejected));
    tg_tensor *loss = tg_mean(tp, tg_neg(tp, tg_logsigmoid(tp, tg_mul_scalar(tp, logits, beta))));
    if (!loss) return NULL;
    /* the rewards are detached: computed with recording off, the same values */
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *cr = chosen_reward ? tg_mean(tp, tg_sub(tp, policy_chosen, reference_chosen)) : NULL;
    tg_tensor *rr = rejected_reward ? tg_mean(tp, tg_sub(tp, policy_rejected, reference_rejected)) : NULL;
    tg_set_grad_enabled(prev);
    if ((chosen_reward && !cr) || (rejected_reward && !rr)) return NULL;
    if (chosen_reward) *chosen_reward = cr;
    if (rejected_reward) *rejected_reward = rr;
    return loss;
}
