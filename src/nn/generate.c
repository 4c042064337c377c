/* Generation: chapter 5's generate() (tools/reference/gpt_book.py) for a
 * GPTModel, through the model's own forward, with the book's KV cache
 * (chapter 4's generate_text_simple_cached) kept by the modules themselves
 * (nn.h, tg_module_set_kv_cache).
 *
 * Without the cache, each new id runs the model on the whole window (the last
 * context_length ids). With it, the cache is turned on and reset, the
 * prompt runs once, then each new id runs alone, its blocks attending to the
 * cached positions. Once the sequence outgrows the context, the window
 * slides and every position's embedding changes, so the cache is reset and
 * refilled from the new window: the same ids as recomputing, past the
 * context too. Either way only the last position goes through final_norm
 * and out_head, as only its logits are read. */
#include "nn_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/gpt.h"

/* The next id from the last position's logits (1, vocab), as generate() picks it. */
static int next_id(tg_tape *tp, tg_tensor *logits, const tg_generate_options *o, int64_t *next)
{
    if (o->top_k > 0) {
        /* top_logits, _ = torch.topk(logits, top_k); min_val = top_logits[:, -1]
         * logits = torch.where(logits < min_val, -inf, logits) */
        tg_tensor *top = NULL, *idx = NULL;
        if (tg_topk(tp, logits, o->top_k, -1, true, true, &top, &idx) != TG_OK) return TG_EINVAL;
        tg_tensor *min_val = tg_narrow(tp, top, 1, o->top_k - 1, 1);
        logits = tg_masked_fill(tp, logits, tg_compare(tp, logits, min_val, TG_CMP_LT), -INFINITY);
    }
    tg_tensor *pick;
    if (o->temperature > 0) {
        /* probs = torch.softmax(logits / temperature, dim=-1); torch.multinomial(probs, num_samples=1) */
        tg_tensor *probs = tg_softmax(tp, tg_div_scalar(tp, logits, o->temperature), -1);
        pick = tg_multinomial(tp, probs, 1, false, o->generator);
    } else {
        pick = tg_argmax(tp, logits, -1, true); /* torch.argmax(logits, dim=-1, keepdim=True) */
    }
    if (!pick) return TG_EINVAL;
    *next = (int64_t)tg_item_at(pick, 0);
    return TG_OK;
}

static int check_options(const tg_gpt_config *c, const int64_t *prompt, int64_t n_prompt,
                         const tg_generate_options *o, const int64_t *out, const int64_t *n_out)
{
    if (!prompt || !o || !out || !n_out) return tg_error_status(TG_EINVAL, "generate: NULL argument");
    if (n_prompt < 1) return tg_error_status(TG_EINVAL, "generate: the prompt has no ids");
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size)
            return tg_error_status(TG_EINVAL, "generate: prompt id %lld at position %lld is out of range for vocab_size %lld",
                                   (long long)prompt[i], (long long)i, (long long)c->vocab_size);
    if (o->max_new_tokens < 0 || o->max_new_tokens > INT64_MAX / 2 - n_prompt)
        return tg_error_status(TG_EINVAL, "generate: max_new_tokens must be >= 0, got %lld", (long long)o->max_new_tokens);
    if (!(o->temperature >= 0) || !isfinite(o->temperature))
        return tg_error_status(TG_EINVAL, "generate: temperature must be finite and >= 0, got %g", o->temperature);
    if (o->top_k < 0 || o->top_k > c->vocab_size)
        return tg_error_status(TG_EINVAL, "generate: top_k must be in [0, vocab_size %lld], got %lld",
                               (long long)c->vocab_size, (long long)o->top_k);
    if (o->eos_id < -1 || o->eos_id >= c->vocab_size)
        return tg_error_status(TG_EINVAL, "generate: eos_id must be -1 or in [0, vocab_size %lld), got %lld",
                               (long long)c->vocab_size, (long long)o->eos_id);
    return TG_OK;
}

int tg_gpt_generate(tg_module *gpt, const int64_t *prompt, int64_t n_prompt, const tg_generate_options *o,
                    int64_t *out, int64_t *n_out)
{
    tg_gpt_config c;
    int st = tg_gpt_get_config(gpt, &c);
    if (st == TG_OK) st = check_options(&c, prompt, n_prompt, o, out, n_out);
    if (st != TG_OK) return st;
    memmove(out, prompt, sizeof *out * (size_t)n_prompt);
    int64_t len = n_prompt;
    *n_out = len;

    bool was_training = tg_module_is_training(gpt), grad = tg_set_grad_enabled(false);
    bool was_cached = tg_module_kv_cache_enabled(gpt), use_cache = !o->no_kv_cache;
    tg_module_train(gpt, false);
    tg_module_set_kv_cache(gpt, use_cache);
    bool was_last_only = tg__gpt_set_last_logits_only(gpt, true);
    st = tg_module_reset_kv_cache(gpt);
    /* every id's forward and sampling under the options' policy (a pinned
     * model's forwards under its pin); under BF16 the weights' bf16 copies
     * are made at the first id and serve every later one (their version
     * does not change) */
    tg_tape *tp = tg_tape_new();
    if (!tp) st = TG_ENOMEM;
    if (st == TG_OK) st = tg_tape_set_numerics(tp, o->numerics);
    int64_t cached_start = 0, cached = 0; /* the window's first id in the sequence, ids the cache holds */

    for (int64_t step = 0; st == TG_OK && step < o->max_new_tokens; step++) {
        tg_tape_reset(tp);
        int64_t start = len > c.context_length ? len - c.context_length : 0; /* idx[:, -context_size:] */
        /* without the cache the whole window runs again; with it only the
         * ids not yet cached, unless the window slid */
        if (use_cache && cached > 0 && start != cached_start) {
            cached = 0;
            if ((st = tg_module_reset_kv_cache(gpt)) != TG_OK) break;
        }
        if (cached == 0) cached_start = start;
        int64_t shape[2] = {1, len - start - cached};
        tg_tensor *ids = tg_from_data(tp, TG_I64, 2, shape, out + start + cached);
        tg_tensor *logits = ids ? tg_module_forward(tp, gpt, ids) : NULL; /* (1, 1, vocab) */
        if (use_cache) cached = len - start;
        int64_t vs[2] = {1, -1}, next = 0; /* out_head's outputs (vocab_size as built) */
        logits = logits ? tg_view(tp, tg_contiguous(tp, logits), 2, vs) : NULL;
        if (!logits || next_id(tp, logits, o, &next) != TG_OK) {
            st = TG_EINVAL;
            break;
        }
        if (next == o->eos_id) break; /* if idx_next == eos_id: break */
        out[len++] = next;
        *n_out = len;
    }
    tg_tape_free(tp);
    int rst = tg_module_reset_kv_cache(gpt);
    if (st == TG_OK) st = rst;
    tg__gpt_set_last_logits_only(gpt, was_last_only);
    tg_module_set_kv_cache(gpt, was_cached);
    tg_module_train(gpt, was_training);
    tg_set_grad_enabled(grad);
    const char *e = tg_last_error();
    if (st != TG_OK && (!e || !*e)) tg_error("generate: out of memory");
    return st;
}
