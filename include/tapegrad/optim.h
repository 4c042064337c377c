/* tapegrad/optim.h: optimizers as torch.optim (SGD, Adam, AdamW), their state
 * in safetensors, clip_grad_norm_, and the learning-rate schedule of the
 * book's appendix D (linear warm-up, then cosine decay).
 *
 * An optimizer holds the parameters it was given (a tensor listed twice, as
 * tied weights are, is updated once) and its state (momentum buffers, Adam's
 * moments) in the tape given to its constructor: it is freed with that tape.
 * The loop is PyTorch's:
 *
 *     tg_optimizer *opt = tg_adamw_new(model_tape, gpt, (tg_adam_options){
 *         .lr = 4e-4, .weight_decay = 0.1, .betas = {0.9, 0.999}, .eps = 1e-8});
 *     for (...) {
 *         tg_optimizer_zero_grad(opt);
 *         tg_tensor *loss = ...;            // recorded in a step tape
 *         tg_backward(loss, NULL, false);
 *         tg_optimizer_step(opt);
 *         tg_tape_reset(step_tape);
 *     }
 */
#ifndef TAPEGRAD_OPTIM_H
#define TAPEGRAD_OPTIM_H

#include "tapegrad/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_optimizer tg_optimizer; /* opaque */

/* ---- an optimizer type: the one public shape every optimizer has ----------------------- */

/* What a torch.optim.Optimizer subclass says: its class name, the state it
 * keeps per parameter, and the update of one parameter. SGD, Adam and AdamW
 * are written through it; a user writes Lion the same way (README.md,
 * "Your own optimizer"; examples/user_optimizer.c):
 *
 *     static int lion_step(tg_optimizer *opt, tg_tensor *p, const tg_tensor *g,
 *                          tg_tensor *const *state)
 *     {
 *         const lion_options *o = tg_optimizer_options(opt);
 *         double lr = tg_optimizer_lr(opt);
 *         float *w = tg_data_ptr(p), *m = tg_data_ptr(state[0]);
 *         ...
 *     }
 *     static const char *const lion_state[] = {"exp_avg"};
 *     static const tg_optimizer_type lion = {"Lion", 1, lion_state, lion_step};
 *     tg_optimizer *opt = tg_optimizer_new(tp, &lion, model, 1e-4, &o, sizeof o);
 *
 * step runs with grad recording off, once per parameter that has a
 * gradient, in named_parameters order (a parameter without one, frozen or
 * unused in this step, is skipped and gets no state). grad is contiguous and
 * of the parameter's dtype; state holds nstate tensors shaped and typed as
 * the parameter, zeros at its first step (converted with the parameter when
 * the module changes dtype). It returns TG_OK or an error status (set with
 * tg_error_status), which stops tg_optimizer_step: parameters after it are
 * not updated. */
typedef struct tg_optimizer_type {
    const char *name;                /* "Lion": in errors and tg_optimizer_name */
    int nstate;                      /* state tensors per parameter (0 or more) */
    const char *const *state_names;  /* their state_dict names, e.g. {"exp_avg"} */
    int (*step)(tg_optimizer *opt, tg_tensor *param, const tg_tensor *grad, tg_tensor *const *state);
} tg_optimizer_type;

/* An optimizer of type over the parameters of model (named_parameters: a
 * tied tensor once), or over n params (a tensor listed twice is one), with
 * learning rate lr and a copy of options_size bytes of options (NULL and 0
 * for none). Frozen parameters (requires_grad false) stay in the list, so
 * state_dict indices are PyTorch's, and are skipped while they have no
 * gradient. NULL with an error for a bad type, a negative or non-finite lr,
 * a parameter that is not a leaf ("can't optimize a non-leaf Tensor") or is
 * not contiguous, and for a list where no parameter requires grad
 * ("optimizer got an empty parameter list"). The optimizer and its state
 * live in tp. */
TG_API tg_optimizer *tg_optimizer_new(tg_tape *tp, const tg_optimizer_type *type, tg_module *model, double lr,
                                      const void *options, size_t options_size);
TG_API tg_optimizer *tg_optimizer_new_params(tg_tape *tp, const tg_optimizer_type *type, int n,
                                             tg_tensor *const *params, double lr, const void *options,
                                             size_t options_size);
/* The optimizer's copy of options (NULL if none). Its lr field, if it has
 * one, is the initial rate: the current one is tg_optimizer_lr. */
TG_API const void *tg_optimizer_options(const tg_optimizer *opt);
/* PyTorch's state["step"]: inside a step function, the count of the
 * parameter being updated, this step included (1 during its first step);
 * elsewhere the largest count of any parameter (the number of steps taken
 * when every parameter had a gradient each time). */
TG_API int64_t tg_optimizer_step_count(const tg_optimizer *opt);
/* The type the optimizer was made with. */
TG_API const tg_optimizer_type *tg_optimizer_get_type(const tg_optimizer *opt);
/* Whether state_dict holds each parameter's "state.i.step" (on by default,
 * as Adam's; torch.optim.SGD and many user optimizers keep no step). Off,
 * load_state_dict takes no step either and a loaded parameter continues
 * at count 2. */
TG_API int tg_optimizer_set_step_in_state_dict(tg_optimizer *opt, bool on);

/* ---- SGD, as torch.optim.SGD ------------------------------------------------------ */

typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
} tg_sgd_options;

/* SGD is an optimizer: every tg_optimizer_* call takes it too. */
typedef tg_optimizer tg_sgd;

/* An optimizer over every parameter of m (named_parameters: a tied tensor is
 * updated once) or the n given params (duplicates dropped), through
 * tg_optimizer_new. NULL with an error on invalid options (lr < 0,
 * momentum < 0, weight_decay < 0, nesterov without momentum or with
 * dampening) or a parameter list tg_optimizer_new refuses. */
TG_API tg_sgd *tg_sgd_new(tg_tape *tp, tg_module *m, tg_sgd_options opt);
TG_API tg_sgd *tg_sgd_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_sgd_options opt);
/* The same as tg_optimizer_zero_grad / tg_optimizer_step. */
TG_API void tg_sgd_zero_grad(tg_sgd *opt);
TG_API int tg_sgd_step(tg_sgd *opt);

/* ---- Adam and AdamW, as torch.optim.Adam / AdamW (PyTorch 1.13) -------------------- */

/* torch.optim's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 0 (Adam) or 1e-2 (AdamW), amsgrad off; tg_adam_defaults /
 * tg_adamw_defaults fill them. */
typedef struct {
    double lr;
    double betas[2];
    double eps;
    double weight_decay;
    bool amsgrad;
} tg_adam_options;
TG_API tg_adam_options tg_adam_defaults(void);
TG_API tg_adam_options tg_adamw_defaults(void);

/* Adam: weight decay is added to the gradient (L2). AdamW: decoupled, the
 * parameter is first scaled by 1 - lr * weight_decay. Per parameter and step
 * t (from 1):
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   (amsgrad: vmax = max(vmax, v), used in place of v below)
 *   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * in the parameter's dtype, as PyTorch's single-tensor path computes it.
 * NULL with an error on invalid options (lr, eps or weight_decay < 0, a
 * beta outside [0, 1)). */
TG_API tg_optimizer *tg_adam_new(tg_tape *tp, tg_module *m, tg_adam_options opt);
TG_API tg_optimizer *tg_adam_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_adam_options opt);
TG_API tg_optimizer *tg_adamw_new(tg_tape *tp, tg_module *m, tg_adam_options opt);
TG_API tg_optimizer *tg_adamw_new_params(tg_tape *tp, int n, tg_tensor *const *params, tg_adam_options opt);

/* ---- every optimizer ------------------------------------------------------------------ */

/* The type's name: "SGD", "Adam", "AdamW", or a user type's. */
TG_API const char *tg_optimizer_name(const tg_optimizer *opt);
/* Sets every parameter's .grad to zeros (kept allocated). */
TG_API void tg_optimizer_zero_grad(tg_optimizer *opt);
/* One update; parameters without a gradient are skipped (their step count
 * does not advance). A non-finite gradient is applied as PyTorch applies it.
 * A gradient that is not contiguous or not of the parameter's dtype is an
 * error. */
TG_API int tg_optimizer_step(tg_optimizer *opt);
/* The learning rate (param_groups[0]["lr"]): what a schedule sets before
 * each step. set_lr refuses a negative or non-finite value. */
TG_API double tg_optimizer_lr(const tg_optimizer *opt);
TG_API int tg_optimizer_set_lr(tg_optimizer *opt, double lr);
/* The parameters, in the optimizer's order (the order of state_dict's
 * indices). */
/* Bytes of the state the optimizer holds now (momentum buffers, Adam's
 * moments; made at a parameter's first step): 0 for NULL. */
TG_API size_t tg_optimizer_state_bytes(const tg_optimizer *opt);
TG_API int tg_optimizer_num_params(const tg_optimizer *opt);
TG_API tg_tensor *tg_optimizer_param(const tg_optimizer *opt, int i);

/* state_dict(), flattened to tensors as a safetensors file holds them:
 * "param_groups.0.lr" (float64 scalar), and per parameter index i:
 "state.i.step" (float32 scalar, as PyTorch 1.13 keeps it; none after
 * tg_optimizer_set_step_in_state_dict(opt, false)) and "state.i.<name>" for each of the type's
 * state names: Adam/AdamW "exp_avg", "exp_avg_sq" and, with amsgrad,
 * "max_exp_avg_sq"; SGD with momentum "momentum_buffer" (and no step).
 * Parameters not stepped yet have no entries. The tensors are the
 * optimizer's own (not copies); names and arrays live in tp. */
TG_API int tg_optimizer_state_dict(tg_tape *tp, const tg_optimizer *opt, tg_named_list *out);
/* load_state_dict(sd): checks every key, shape and dtype (an unknown key, a
 * parameter index out of range, a state of another optimizer kind or a
 * shape that is not the parameter's are errors) before changing anything. */
TG_API int tg_optimizer_load_state_dict(tg_optimizer *opt, const tg_named_list *sd);
/* The state_dict in a safetensors file (saved atomically) and back. */
TG_API int tg_optimizer_save(const tg_optimizer *opt, const char *path);
TG_API int tg_optimizer_load(tg_optimizer *opt, const char *path);

/* ---- gradient clipping ---------------------------------------------------------------- */

/* torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type): the norm of
 * all gradients together (norm_type > 0, or INFINITY for the largest
 * absolute value) goes to *total_norm (may be NULL); every gradient is then
 * scaled by min(1, max_norm / (total_norm + 1e-6)). Parameters without a
 * gradient are skipped; with none, the norm is 0. */
TG_API int tg_clip_grad_norm_(int n, tg_tensor *const *params, double max_norm, double norm_type,
                              double *total_norm);
/* The same over every parameter of m (model.parameters()). */
TG_API int tg_module_clip_grad_norm_(tg_module *m, double max_norm, double norm_type, double *total_norm);
/* The same over the optimizer's parameters. */
TG_API int tg_optimizer_clip_grad_norm_(tg_optimizer *opt, double max_norm, double norm_type, double *total_norm);

/* ---- learning-rate schedule (the book's appendix D) ------------------------------------ */

/* Linear warm-up from initial_lr to peak_lr over warmup_steps steps, then a
 * cosine decay from peak_lr to min_lr until total_steps:
 *   step < warmup:  initial_lr + step (peak_lr - initial_lr) / warmup_steps
 *   otherwise:      min_lr + (peak_lr - min_lr) (1 + cos(pi progress)) / 2,
 *                   progress = (step - warmup_steps) / (total_steps - warmup_steps)
 * warmup_steps 0 starts at the peak. */
typedef struct {
    double initial_lr, peak_lr, min_lr;
    int64_t warmup_steps, total_steps;
} tg_lr_schedule;
/* TG_OK, or TG_EINVAL naming the bad field (a negative or non-finite rate,
 * warmup_steps < 0, total_steps <= warmup_steps). */
TG_API int tg_lr_schedule_check(const tg_lr_schedule *s);
/* The rate for global step `step` (0-based); NAN with an error for a bad
 * schedule or a negative step. Steps past total_steps stay at min_lr. */
TG_API double tg_lr_schedule_at(const tg_lr_schedule *s, int64_t step);

/* ---- checkpoints: a training run saved and resumed ------------------------------------ */

/* What torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
 * "epoch": epoch, ...}) keeps of a run, in one safetensors file, and what a
 * run that resumes checks it against:
 *
 *     tg_checkpoint ck = {.model = gpt, .optimizer = opt, .generator = tg_default_generator()};
 *     if (resume && tg_checkpoint_load(NULL, &ck, "run.ckpt") != TG_OK) {
 *         fprintf(stderr, "%s\n", tg_last_error());
 *         return 1;
 *     }
 *     for (int64_t epoch = ck.epoch; epoch < epochs; epoch++) {
 *         ...                                  // one epoch, ck.step counting its steps
 *         ck.epoch = epoch + 1;
 *         if (tg_checkpoint_save(&ck, "run.ckpt") != TG_OK) ...
 *     }
 *
 * The file holds "model." + the model's state_dict keys, "optimizer." + the
 * optimizer's (optim.h's tg_optimizer_state_dict), "rng.default" (the
 * generator's TG_GENERATOR_STATE_BYTES bytes), "train.progress" (int64:
 * format 1, epoch, step, tokens_seen), "train.settings" and
 * "train.settings_f64" (the identity values, when there are any: the
 * integers, then the floats, each in the order given) and each user tensor
 * under its own name. */

/* One value that names the run (a setting, a digest of the data): a
 * checkpoint resumes only the run whose values are all equal to its own. */
typedef struct {
    const char *name;    /* how the message names it: "--lr", "batch size" */
    bool is_float;       /* the value is f; otherwise i */
    int64_t i;
    double f;
    const char *differs; /* optional: the message when it differs ("was trained
                          * on another text"); by default "belongs to another
                          * run: it has NAME <file's>, this run <this run's>" */
} tg_checkpoint_value;

typedef struct {
    tg_module *model;         /* required: its state_dict */
    tg_optimizer *optimizer;  /* optional (NULL: neither saved nor loaded) */
    tg_generator *generator;  /* optional: its state (torch.get_rng_state) */
    /* Progress: save writes them; load sets them from the file. epoch and
     * tokens_seen are >= 0; step >= -1 (the book's global_step is -1 before
     * the first step). */
    int64_t epoch, step, tokens_seen;
    /* The run's identity: load refuses a file whose values (as many
     * integers and floats, each equal; NaN equals nothing) differ. None:
     * nothing is checked. */
    int n_values;
    const tg_checkpoint_value *values;
    /* The user's own tensors (a loss history, ...), by name: save writes
     * each; load reads each, into tensors[i] when it is given (contiguous,
     * with the file's dtype and shape) or, when tensors[i] is NULL, sets it
     * to a copy of the file's tensor in load's tape. */
    tg_named_list tensors;
} tg_checkpoint;

/* Writes the checkpoint atomically (a temporary file, then rename: a failed
 * or interrupted save leaves the previous file as it was); ck and its parts
 * are borrowed, nothing of them is kept. Errors: TG_EINVAL (ck, its model or
 * path NULL; a user tensor NULL or without a name; a value without a name;
 * names that repeat), TG_ENOMEM, TG_EIO (safetensors_save's message). */
TG_API int tg_checkpoint_save(const tg_checkpoint *ck, const char *path);

/* Reads path into ck's model, optimizer, generator, progress and tensors,
 * after checking all of it: the file (TG_EIO, TG_EFORMAT as
 * tg_safetensors_load), every key that ck's parts need ("'PATH' is not a
 * tapegrad checkpoint (no 'KEY')"), the format and the progress record,
 * every identity value ("'PATH' belongs to another run: ..."), the generator
 * state, each user tensor's dtype and shape, then the model's and the
 * optimizer's keys, shapes and dtypes (their load_state_dict's message after
 * "'PATH': the model: " or "'PATH': the optimizer: "); all TG_EFORMAT.
 * TG_EINVAL for NULL ck, model or path, or a NULL user slot with tp NULL.
 * On any error the model, optimizer, generator and ck are as they were
 * (tp may hold copies made before the error), and the message is one line.
 * The data is copied into the model, optimizer, generator and the given
 * user tensors; tp (NULL when no slot is NULL) receives the others. While
 * the optimizer loads, a copy of the model's state is kept, to put back if
 * the optimizer refuses its part. */
TG_API int tg_checkpoint_load(tg_tape *tp, tg_checkpoint *ck, const char *path);
/* The model's weights from path: a trainer checkpoint (its model's part,
 * nothing else of the run checked or read into anything) or a state_dict
 * file (tg_module_save, `--save`), told apart by the file's keys; the
 * errors of tg_checkpoint_load or tg_module_load. */
TG_API int tg_checkpoint_load_model(tg_module *model, const char *path);

#ifdef __cplusplus
}
#endif
#endif
