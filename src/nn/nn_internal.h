/* Private to src/nn: the module struct behind the opaque tg_module, and the
 * checks the built-in modules share. */
#ifndef TG_NN_INTERNAL_H
#define TG_NN_INTERNAL_H

#include "internal.h"
#include "tapegrad/gpt.h"

/* A named entry of a module: a parameter, a buffer or a child. */
typedef struct {
    const char *name;
    void *ptr; /* tg_tensor * or tg_module * */
    bool persistent;
} tg__entry;

typedef struct {
    int n, cap;
    tg__entry *items; /* in the module's tape; grows by doubling */
} tg__entries;

struct tg_module {
    const tg_module_type *type;
    tg_tape *tape;
    void *state;
    bool training, fused, kv_cache;
    bool recompute;       /* tg_module_set_recompute: called through tg_module_call_recompute */
    bool pinned;          /* tg_module_set_numerics: forwards run under numerics */
    tg_numerics numerics; /* the pin (EXACT when not pinned) */
    tg_generator *gen;
    tg__entries params, buffers, children;
};

/* The policy m's forward runs under where the policy around it is nm: its
 * pin, else nm; on tape tp (nm the tape's). */
static inline tg_numerics tg__module_pin_or(const tg_module *m, tg_numerics nm)
{
    return m->pinned ? m->numerics : nm;
}
static inline tg_numerics tg__module_policy(const tg_module *m, const tg_tape *tp)
{
    return tg__module_pin_or(m, tg_tape_numerics(tp));
}
/* A pinned module's forward records under its pin (tg__tape_enter); returns
 * what tg__tape_leave puts back. For forwards run without tg_module_call. */
static inline tg_numerics tg__module_enter(tg_tape *tp, const tg_module *m)
{
    return tg__tape_enter(tp, tg__module_policy(m, tp));
}
/* tg_module_call's argument checks (op names a NULL module's error):
 * false with the error. */
bool tg__module_check_call(const char *op, const tg_module *m, int n, tg_tensor *const *inputs);
/* Whether a call of m on these inputs records a graph: grad mode on and an
 * input or a parameter of m's tree requiring grad. */
bool tg__module_call_records(const tg_module *m, int n, tg_tensor *const *inputs);
/* m's forward on checked arguments under its policy, whatever its recompute
 * mark (tg_module_call's plain call). */
tg_tensor *tg__module_run(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs);
/* tg_module_call_recompute on checked arguments of a call that records
 * (recompute.c). */
tg_tensor *tg__recompute_call(tg_tape *tp, tg_module *m, int n, tg_tensor *const *inputs);
/* The tree's parameters, each once, in named_parameters order, without
 * names (out->names NULL); the array lives in tp. */
int tg__module_parameters(tg_tape *tp, const tg_module *m, tg_named_list *out);
/* The entry `name` of e (a tg_tensor * or tg_module *), or NULL; no error
 * is recorded. */
void *tg__entry_get(const tg__entries *e, const char *name);
/* Configuration checks: record an error naming op and return false. */
bool tg__check_size(const char *op, const char *what, int64_t v);
bool tg__check_dropout(const char *op, double p);
/* Checks that a module got exactly `want` inputs. */
bool tg__check_ninputs(const tg_module *m, int n, int want);
/* Whether m is the built-in Dropout / Linear (fused paths rely on what
 * these keep for backward). */
bool tg__is_dropout(const tg_module *m);
bool tg__is_linear(const tg_module *m);
/* A LinearWithLoRA's parts: its Linear, its LoRALayer's A and B and
 * alpha / rank; false for any other module (src/nn/lora.c). */
bool tg__lora_parts(const tg_module *m, tg_module **linear, tg_tensor **a, tg_tensor **b, double *scale);
/* A built-in Linear's weight and bias (NULL without one); false for any other module. */
bool tg__linear_weights(const tg_module *m, tg_tensor **w, tg_tensor **b);
/* Whether m is the built-in MultiHeadAttention with the built-in Linear as
 * out_proj: its output is a fresh tensor that nothing else reads. */
bool tg__is_mha_owning_output(const tg_module *m);
/* Whether m is the built-in MultiHeadAttention under FAST or BF16, without
 * KV cache and without dropout to draw (eval mode or p = 0), which
 * tg__mha_forward_last_position runs. */
bool tg__mha_last_position_ok(const tg_module *m, tg_numerics nm);
/* Its forward's last position only, (b, 1, d_out): keys and values of all T
 * positions of x (b, T, d_in), the query of the last, which the causal mask
 * lets see every key. The same values as the full forward's last row, not
 * the same bits (other products, no fused attention node). */
tg_tensor *tg__mha_forward_last_position(tg_tape *tp, tg_module *m, tg_tensor *x);
/* Whether m is the built-in Dropout and draws (training, p > 0). */
bool tg__dropout_draws(const tg_module *m);
/* The context (b, H, T, hd) of the queries q (b, H, T, hd) of positions p0
 * .. p0+T-1 over a KV cache's keys and values (b, G, p0 + T, hd), read in
 * place by tg__attend_cached under FAST and BF16 (no dropout). *done false:
 * not that case (EXACT, float64, graph recorded), the caller runs the
 * composed ops; true with NULL: failed with an error. */
tg_tensor *tg__attend_cache_in_place(tg_tape *tp, tg_tensor *q, tg_tensor *keys, tg_tensor *values, int64_t p0,
                                     bool *done);
/* Whether m is the built-in Sequential. */
bool tg__is_sequential(const tg_module *m);
/* The built-in Dropout m's forward, its product written over x (x a tensor
 * nothing else reads; tg__dropout_over). */
tg_tensor *tg__dropout_forward_over(tg_tape *tp, tg_module *m, tg_tensor *x);
/* GPTModel gpt's forward computes final_norm and out_head on the last
 * position only while on (tg_gpt_generate and tg_gpt_forward_last read no
 * other logits), under FAST and BF16 the last block too when it can; the
 * previous setting returned. */
bool tg__gpt_set_last_logits_only(tg_module *gpt, bool on);

/* The decoder's derived sizes (gpt.c): head_dim, kv groups, feed-forward
 * width and norm eps with their defaults applied. */
int64_t tg__gpt_head_dim(const tg_decoder_config *c);
const char *tg__gpt_class_name(const tg_decoder_config *c);
int64_t tg__gpt_kv_groups(const tg_decoder_config *c);
int64_t tg__gpt_hidden_dim(const tg_decoder_config *c);
double tg__gpt_norm_eps(const tg_decoder_config *c);
/* The book's RMSNorm of qwen3.py: parameter "scale", print "RMSNorm()". */
tg_module *tg__rms_norm_scale_new(tg_tape *tp, int64_t dim, double eps);

/* A RoPE model's cos and sin tables (rows, head_dim), float32, computed as
 * the book's compute_rope_params computes them, rows added as positions ask
 * for them (decoder.c). */
typedef struct {
    int64_t head_dim, context_length;
    double base;
    tg_rope_freq freq;
    int64_t rows;
    tg_tensor *cos, *sin; /* in the model's tape */
} tg__rope;
/* Rows 0 .. rows-1 computed (TG_EINVAL beyond context_length). */
int tg__rope_need(tg__rope *r, tg_tape *tp, int64_t rows);
/* The parts of a Qwen3 / Llama 3 model added to m in the book's order, and
 * its blocks run on x (b, T, d) at positions p0 .. p0+T-1. */
int tg__rope_decoder_build(tg_tape *tp, tg_module *m, const tg_decoder_config *cfg);
tg_tensor *tg__rope_decoder_blocks(tg_tape *tp, tg_module *m, tg__rope *r, tg_tensor *x, int64_t p0);
/* A parameter made by init (a torch.nn.init fill) in dt: TG_F32 as
 * tg_parameter_new then init; TG_BF16 frozen, filled in place (the random
 * fills draw bf16 as float32 and round each value: the float32 draw's
 * values rounded, never a float32 copy). NULL with an error. */
tg_tensor *tg__parameter_drawn(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape,
                               int (*init)(tg_tensor *w, void *ctx), void *ctx);
/* tg_linear_new and tg_embedding_new with their weight in dt (the bias float32). */
tg_module *tg__linear_new_as(tg_tape *tp, int64_t in_features, int64_t out_features, bool bias, tg_dtype dt);
tg_module *tg__embedding_new_as(tg_tape *tp, int64_t num, int64_t dim, tg_dtype dt);
/* v as Python's repr(float) writes it ("0.0", "0.1", "1e-05"). */
void tg__py_float(char *buf, size_t size, double v);

#endif
