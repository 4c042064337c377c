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
    const char *class_name; /* print(model)'s name when a family names the type
                             * its own way (tg__module_set_class); NULL: type->name */
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
 * (module.c, its last part). */
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
/* The decoder's attention (src/nn/attention.c): the book's
 * MultiHeadAttention and GroupedQueryAttention as one module of features.
 * forward(x) or, with RoPE, forward(x, cos, sin), cos and sin the table rows
 * of x's positions. */
typedef struct {
    const char *class_name; /* print(model)'s name */
    int64_t d_in, d_out;    /* x's features; out_proj's output features */
    int64_t context_length, num_heads, num_kv_groups, head_dim;
    double dropout;         /* on the attention weights in training */
    bool qkv_bias, out_bias;
    bool qk_norm;           /* q_norm and k_norm: RMSNorm(head_dim) with these: */
    double norm_eps, norm_offset;
    bool norm_book;         /* their parameter "scale" (else nn.RMSNorm's "weight") */
    bool rope;
    double q_scale;         /* > 0: queries times it after RoPE, scores not divided */
    int64_t window;         /* > 0: a key is masked when i - j >= window */
    bool mask_buffer;       /* the book's MultiHeadAttention: a "dropout" child and the
                             * causal "mask" buffer (state_dict) */
    bool kvq_init;          /* built W_key, W_value, W_query (Llama 3) */
    bool keys_first;        /* forward computes the keys before the queries */
    bool merge_view;        /* heads merged by .contiguous().view() (else .reshape()) */
} tg__attention_spec;
tg_module *tg__attention_new(tg_tape *tp, const tg__attention_spec *spec, tg_dtype weights);
bool tg__is_attention(const tg_module *m);
/* The attention with the built-in Linear as out_proj: its output is a
 * fresh tensor that nothing else reads. */
bool tg__attention_owns_output(const tg_module *m);
/* Whether tg__attention_last_position runs m under policy nm: FAST or BF16,
 * no KV cache, no dropout to draw. */
bool tg__attention_last_position_ok(const tg_module *m, tg_numerics nm);
/* Its forward's last position only, (b, 1, d_out): keys and values of all T
 * positions of x (b, T, d_in), the query of the last. The same values as
 * the full forward's last row, not the same bits. */
tg_tensor *tg__attention_last_position(tg_tape *tp, tg_module *m, int n, tg_tensor *const *in);
/* print(model)'s name for m (the family's), in place of its type's. */
void tg__module_set_class(tg_module *m, const char *name);
/* RMSNorm(dim, eps) computing x_norm * (offset + w), w starting at 1 -
 * offset; book: the parameter is "scale" and the repr "RMSNorm()". */
tg_module *tg__rms_norm_new_ex(tg_tape *tp, int64_t dim, double eps, double offset, bool book);
/* The book's LayerNorm with another eps. */
tg_module *tg__layer_norm_new_eps(tg_tape *tp, int64_t dim, double eps);
/* Whether m is the built-in LayerNorm or RMSNorm (its output nothing else reads). */
bool tg__is_norm(const tg_module *m);
/* Whether m is the built-in Dropout and draws (training, p > 0). */
bool tg__dropout_draws(const tg_module *m);
/* The context (b, H, T, hd) of the queries q (b, H, T, hd) of positions p0
 * .. p0+T-1 over a KV cache's keys and values (b, G, p0 + T, hd), the
 * scores divided by scale, keys further back than window (> 0) masked, read
 * in place by tg__attend_cached under FAST and BF16 (no dropout). *done
 * false: not that case (EXACT, float64, graph recorded), the caller runs
 * the composed ops; true with NULL: failed with an error. */
tg_tensor *tg__attend_cache_in_place(tg_tape *tp, tg_tensor *q, tg_tensor *keys, tg_tensor *values, int64_t p0,
                                     double scale, int64_t window, bool *done);
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

/* ---- the decoder's families (src/nn/families.c) ---- */

/* A per-layer tensor of a Hugging Face folder: its name after
 * "model.layers.N.", ours after "<blocks>.N." (a norm: the module, whose
 * parameter is "scale" or "weight" as the family names it). */
typedef struct {
    const char *hf, *ours;
    bool norm;      /* ours is a norm module */
    bool qk_norm;   /* only with QK-norm */
    bool transpose; /* GPT-2's Conv1D weights, stored (in, out) */
    int part;       /* GPT-2's fused c_attn: 0, 1, 2 the query, key, value third of
                     * the last dim; -1 the whole tensor */
} tg__hf_part;
#define TG__HF_MAX_PARTS 16

/* A family's names and defaults: what differs between the book's models
 * besides their features. */
typedef struct {
    tg_gpt_family family;
    const char *name;             /* for messages: "GPT-2", "Qwen3", "Llama 3", "Gemma 3" */
    const char *model_class;      /* print(model)'s first line: "GPTModel", ... */
    const char *attention_class;  /* "MultiHeadAttention" or "GroupedQueryAttention" */
    const char *blocks;           /* the blocks' child: "trf_blocks" or "blocks" */
    bool blocks_sequential;       /* an nn.Sequential (GPT-2), else an nn.ModuleList */
    const char *norm_names[4];    /* in construction order: before the attention, after it,
                                   * before the feed-forward, after it (the second and
                                   * fourth with post_norms only) */
    bool norm_book;               /* RMSNorm's parameter "scale" (the book's), else
                                   * nn.RMSNorm's "weight" */
    bool kvq_init;                /* attention built W_key, W_value, W_query */
    bool keys_first;              /* attention's forward computes the keys first */
    bool merge_view;              /* heads merged by .contiguous().view() */
    bool dropout;                 /* Dropout modules (drop_emb, drop_shortcut, the
                                   * attention's dropout and mask buffer) */
    bool bias;                    /* out_proj and the GELU MLP's Linear layers have biases */
    double norm_eps;
    tg_norm_kind norm;
    tg_positions_kind positions;
    tg_mlp_kind mlp;
    const char *hf_model_type;    /* config.json's model_type */
    const tg__hf_part *hf_parts;  /* its folders' per-layer tensors, ended by a NULL hf */
    const tg__hf_part *hf_file;   /* GPT-2: its model.safetensors' tensors, those outside
                                   * the layers (named in full) then the per-layer ones
                                   * (after "h.N."), ended by a NULL hf (NULL: none) */
    const char *tokenizer;        /* its tokenizer's data folder */
} tg__family;
/* The family's entry; NULL for an unknown one. */
const tg__family *tg__family_get(tg_gpt_family f);
/* The family whose Hugging Face model_type this is; NULL if none. */
const tg__family *tg__family_of_hf(const char *model_type);

/* ---- RoPE tables (src/nn/rope.c) ---- */

/* A RoPE model's cos and sin tables (rows, head_dim), float32, computed as
 * the book's compute_rope_params computes them, rows added as positions ask
 * for them. */
typedef struct {
    int64_t head_dim, context_length;
    double base;
    tg_rope_freq freq;
    int64_t rows;
    tg_tensor *cos, *sin; /* in the model's tape */
} tg__rope;
/* Rows 0 .. rows-1 computed (TG_EINVAL beyond context_length). */
int tg__rope_need(tg__rope *r, tg_tape *tp, int64_t rows);

/* ---- the decoder (src/nn/decoder.c) ---- */

/* The decoder's class name: its family's model class. */
const char *tg__decoder_class_name(const tg_decoder_config *c);

#endif
