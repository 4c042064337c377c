/* tapegrad/nn.h: parameters, modules, attention, SGD and state_dict files.
 *
 * Ownership: a module, its parameters, buffers and gradients, and an
 * optimizer's state all live in the long-lived tape given to their
 * constructor; they are freed with that tape (there is no per-module free).
 * Constructors draw initial values from the default generator in PyTorch's
 * order, so after tg_manual_seed(s) they equal PyTorch's modules built after
 * torch.manual_seed(s). They return NULL with tg_last_error() set on bad
 * configurations.
 */
#ifndef TAPEGRAD_NN_H
#define TAPEGRAD_NN_H

#include "autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A leaf tensor that requires grad, in tp (nn.Parameter), zero-filled. */
tg_tensor *tg_parameter_new(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape);

typedef struct tg_module tg_module;

typedef enum {
    TG_MODULE_LINEAR,
    TG_MODULE_DROPOUT,
    TG_MODULE_SA_V1,
    TG_MODULE_SA_V2,
    TG_MODULE_CAUSAL,
    TG_MODULE_MHA_WRAPPER,
    TG_MODULE_MHA,
    TG_MODULE_LIST /* nn.ModuleList: children "0", "1", ... */
} tg_module_kind;

#define TG_MODULE_MAX_PARAMS 4
#define TG_MODULE_MAX_BUFFERS 2
#define TG_MODULE_MAX_CHILDREN 64

struct tg_module {
    tg_module_kind kind;
    const char *type_name; /* "Linear", "MultiHeadAttention", ... as in PyTorch */
    bool training;         /* train() / eval(); modules start in training mode */
    /* own parameters and buffers, in registration order */
    int nparams, nbuffers;
    const char *param_names[TG_MODULE_MAX_PARAMS];
    tg_tensor *params[TG_MODULE_MAX_PARAMS];
    const char *buffer_names[TG_MODULE_MAX_BUFFERS];
    tg_tensor *buffers[TG_MODULE_MAX_BUFFERS];
    /* named children, in registration order ("W_query", "heads", "0", ...) */
    int nchildren;
    const char *child_names[TG_MODULE_MAX_CHILDREN];
    tg_module *children[TG_MODULE_MAX_CHILDREN];
    /* configuration */
    int64_t d_in, d_out, context_length, num_heads;
    double dropout;
    bool qkv_bias;
    bool fused;            /* MultiHeadAttention: use the fused attention op */
    tg_generator *gen;     /* dropout generator (NULL = default generator) */
};

tg_module *tg_linear_new(tg_tape *tp, int64_t in_features, int64_t out_features, bool bias);
tg_module *tg_dropout_new(tg_tape *tp, double p);
/* The five attention modules of chapter 3 (see SPEC.md for their forwards). */
tg_module *tg_self_attention_v1_new(tg_tape *tp, int64_t d_in, int64_t d_out);
tg_module *tg_self_attention_v2_new(tg_tape *tp, int64_t d_in, int64_t d_out, bool qkv_bias);
tg_module *tg_causal_attention_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length,
                                   double dropout, bool qkv_bias);
tg_module *tg_mha_wrapper_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length,
                              double dropout, int64_t num_heads, bool qkv_bias);
tg_module *tg_mha_new(tg_tape *tp, int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                      int64_t num_heads, bool qkv_bias);

/* Runs the module on x, recording into tp. NULL with an error on bad input
 * (wrong rank, last dim != d_in, more tokens than context_length). */
tg_tensor *tg_module_forward(tg_tape *tp, tg_module *m, tg_tensor *x);

/* train(true) / eval (train(false)) for the whole tree. */
void tg_module_train(tg_module *m, bool training);
/* MultiHeadAttention: fused attention op (true) or the book's composition. */
void tg_module_set_fused(tg_module *m, bool fused);
/* Dropout generator for the whole tree (NULL = default generator). */
void tg_module_set_generator(tg_module *m, tg_generator *g);
/* Converts every parameter and buffer to dt (new storage in tp). */
int tg_module_to_dtype(tg_tape *tp, tg_module *m, tg_dtype dt);

/* Parameters / state_dict entries with PyTorch's dotted names
 * ("heads.1.W_key.weight"), in PyTorch's order. Arrays and names live in tp. */
typedef struct {
    int n;
    const char **names;
    tg_tensor **tensors;
} tg_named_list;
int tg_module_named_parameters(tg_tape *tp, const tg_module *m, tg_named_list *out);
int tg_module_state_dict(tg_tape *tp, const tg_module *m, tg_named_list *out);
/* Sets every parameter's .grad to zeros (kept allocated). */
void tg_module_zero_grad(tg_module *m);

/* state_dict in safetensors, interchangeable with PyTorch's keys. Save is
 * atomic (temporary file + rename). Load checks every key, dtype and shape
 * and names the first mismatch (missing, unexpected, or mis-shaped key);
 * on error the module is unchanged. */
int tg_module_save(const tg_module *m, const char *path);
int tg_module_load(tg_module *m, const char *path);

/* ---- SGD, as torch.optim.SGD ----------------------------------------------- */

typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} tg_sgd_options;

typedef struct tg_sgd tg_sgd;

/* An optimizer over every parameter of m (or the n given params). Its
 * momentum buffers live in tp. NULL with an error on invalid options
 * (lr < 0, momentum < 0, weight_decay < 0, nesterov without momentum or with
 * dampening). */
tg_sgd *tg_sgd_new(tg_tape *tp, tg_module *m, tg_sgd_options opt);
tg_sgd *tg_sgd_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_sgd_options opt);
void tg_sgd_zero_grad(tg_sgd *opt);
/* One update; parameters without a gradient are skipped. */
int tg_sgd_step(tg_sgd *opt);

#ifdef __cplusplus
}
#endif
#endif
