/* LoRA, the book's appendix E: LoRALayer, LinearWithLoRA and the recursive
 * replacement of every Linear of a model. Written with the public module
 * API only, as a user's own modules are (include/tapegrad/nn.h), so the
 * state_dict keys are PyTorch's ("trf_blocks.0.att.W_query.linear.weight",
 * "trf_blocks.0.att.W_query.lora.A"). */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>

typedef struct {
    int64_t rank;
    double alpha;
    bool off; /* tg_lora_set_enabled(model, false): the wrapper gives linear(x) alone */
} lora_state;

/* forward: (self.alpha / self.rank) * (x @ self.A @ self.B) */
static tg_tensor *lora_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *x)
{
    if (n != 1) return tg_error("LoRALayer: expected 1 input, got %d", n);
    const lora_state *s = tg_module_state(self);
    tg_tensor *a = tg_module_get_parameter(self, "A"), *b = tg_module_get_parameter(self, "B");
    if (!a || !b) return NULL;
    return tg_mul_scalar(tp, tg_matmul(tp, tg_matmul(tp, x[0], a), b), s->alpha / (double)s->rank);
}

static const tg_module_type lora_type = {.name = "LoRALayer", .forward = lora_forward};

tg_module *tg_lora_layer_new(tg_tape *tp, int64_t in_dim, int64_t out_dim, int64_t rank, double alpha)
{
    if (!tg__check_size("LoRALayer", "in_dim", in_dim) || !tg__check_size("LoRALayer", "out_dim", out_dim) ||
        !tg__check_size("LoRALayer", "rank", rank))
        return NULL;
    if (!isfinite(alpha)) return tg_error("LoRALayer: alpha must be finite, got %g", alpha);
    tg_module *m = tg_module_new(tp, &lora_type, sizeof(lora_state));
    if (!m) return NULL;
    *(lora_state *)tg_module_state(m) = (lora_state){rank, alpha, false};
    /* self.A = nn.Parameter(torch.empty(in_dim, rank));
     * torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5)) */
    int64_t as[2] = {in_dim, rank}, bs[2] = {rank, out_dim};
    tg_tensor *a = tg_parameter_new(tp, TG_F32, 2, as);
    if (tg_module_register_parameter(m, "A", a) != TG_OK) return NULL;
    if (tg_init_kaiming_uniform_(a, sqrt(5.0), TG_FAN_IN, "leaky_relu", NULL) != TG_OK) return NULL;
    /* self.B = nn.Parameter(torch.zeros(rank, out_dim)) */
    tg_tensor *b = tg_parameter_new(tp, TG_F32, 2, bs);
    if (tg_module_register_parameter(m, "B", b) != TG_OK) return NULL;
    return m;
}

/* forward: self.linear(x) + self.lora(x) */
static tg_tensor *linear_lora_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *x)
{
    if (n != 1) return tg_error("LinearWithLoRA: expected 1 input, got %d", n);
    tg_tensor *y = tg_module_forward(tp, tg_module_get_submodule(self, "linear"), x[0]);
    tg_module *lora = tg_module_get_submodule(self, "lora");
    if (y && lora && lora->type == &lora_type && ((const lora_state *)tg_module_state_const(lora))->off) return y;
    tg_tensor *d = y ? tg_module_forward(tp, lora, x[0]) : NULL;
    return tg_add(tp, y, d);
}

/* The LoRALayers of the tree (each module once), switched. */
static int64_t set_enabled(tg_module *m, bool enabled, int depth)
{
    if (depth > 64) return 0;
    int64_t k = 0;
    if (m->type == &lora_type) {
        ((lora_state *)tg_module_state(m))->off = !enabled;
        k++;
    }
    for (int i = 0; i < m->children.n; i++) k += set_enabled(m->children.items[i].ptr, enabled, depth + 1);
    return k;
}

int64_t tg_lora_set_enabled(tg_module *model, bool enabled)
{
    if (!model) return tg_error_status(TG_EINVAL, "lora_set_enabled: NULL model");
    return set_enabled(model, enabled, 0);
}

static const tg_module_type linear_lora_type = {.name = "LinearWithLoRA", .forward = linear_lora_forward};

bool tg__lora_parts(const tg_module *m, tg_module **linear, tg_tensor **a, tg_tensor **b, double *scale)
{
    if (!m || m->type != &linear_lora_type) return false;
    tg_module *lin = tg__entry_get(&m->children, "linear"), *lo = tg__entry_get(&m->children, "lora");
    if (!lin || !lo || lo->type != &lora_type) return false;
    const lora_state *s = tg_module_state_const(lo);
    *linear = lin;
    *a = tg__entry_get(&lo->params, "A");
    *b = tg__entry_get(&lo->params, "B");
    *scale = s->alpha / (double)s->rank;
    return *a && *b;
}

tg_module *tg_linear_with_lora_new(tg_tape *tp, tg_module *linear, int64_t rank, double alpha)
{
    if (!linear) return tg_error("LinearWithLoRA: NULL linear");
    const tg_tensor *w = tg_module_get_parameter(linear, "weight");
    if (!w || w->ndim != 2)
        return tg_error("LinearWithLoRA: the wrapped %s has no 2-D weight", tg_module_type_name(linear));
    tg_module *m = tg_module_new(tp, &linear_lora_type, 0);
    if (!m || tg_module_add_module(m, "linear", linear) != TG_OK) return NULL;
    /* LoRALayer(linear.in_features, linear.out_features, rank, alpha) */
    tg_module *lora = tg_lora_layer_new(tp, w->shape[1], w->shape[0], rank, alpha);
    if (!lora || tg_module_add_module(m, "lora", lora) != TG_OK) return NULL;
    tg_module_train(m, tg_module_is_training(linear));
    if (linear->pinned) tg_module_set_numerics(m, linear->numerics); /* the wrapper keeps the Linear's pin */
    tg_module_set_fused(m, tg_module_is_fused(linear));
    return m;
}

int tg_lora_replace_linear(tg_tape *tp, tg_module *model, int64_t rank, double alpha)
{
    if (!model) return tg_error_status(TG_EINVAL, "replace_linear_with_lora: NULL module");
    if (!tg__check_size("replace_linear_with_lora", "rank", rank)) return TG_EINVAL;
    /* for name, module in model.named_children(): a Linear becomes
     * LinearWithLoRA(module), anything else is searched in turn */
    for (int i = 0; i < tg_module_num_children(model); i++) {
        tg_module *c = tg_module_child(model, i);
        int st;
        if (tg__is_linear(c)) {
            tg_module *w = tg_linear_with_lora_new(tp, c, rank, alpha);
            st = w ? tg_module_add_module(model, tg_module_child_name(model, i), w) : TG_EINVAL;
        } else {
            st = tg_lora_replace_linear(tp, c, rank, alpha);
        }
        if (st != TG_OK) return st;
    }
    return TG_OK;
}

/* ---- merging ------------------------------------------------------------------------------------- */

/* How many times t is held in m's tree (a tied weight: more than once). */
static int holders(const tg_module *m, const tg_tensor *t)
{
    int n = 0;
    for (int i = 0; i < m->params.n; i++) n += m->params.items[i].ptr == t;
    for (int i = 0; i < m->children.n; i++) n += holders(m->children.items[i].ptr, t);
    return n;
}

/* weight <- weight + scale * (A @ B)^T, computed in float32 and stored in
 * the weight's dtype (bf16: rounded once). A weight held elsewhere too (the
 * head tied to the embedding) gets a new tensor, so what shares it keeps
 * its values. */
static int merge_one(tg_module *root, tg_module *linear, const tg_tensor *a, const tg_tensor *b, double scale)
{
    tg_tensor *w = tg__entry_get(&linear->params, "weight");
    if (!w || w->ndim != 2 || a->ndim != 2 || b->ndim != 2 || a->shape[0] != w->shape[1] ||
        b->shape[1] != w->shape[0] || a->shape[1] != b->shape[0])
        return tg_error_status(TG_EINVAL, "lora_merge: a LoRA layer's A and B do not fit its Linear's weight");
    tg_tape *tp = tg_tape_new();
    if (!tp) return TG_ENOMEM;
    bool grad = tg_set_grad_enabled(false);
    /* (A @ B)^T * (alpha / rank), as PyTorch computes it in float32 */
    tg_tensor *ab = tg_matmul(tp, (tg_tensor *)a, (tg_tensor *)b);
    tg_tensor *delta = ab ? tg_contiguous(tp, tg_transpose(tp, ab, 0, 1)) : NULL;
    tg_tensor *wf = delta ? tg_to_dtype(tp, w, TG_F32) : NULL;
    tg_tensor *sum = wf ? tg_add(tp, wf, tg_mul_scalar(tp, delta, scale)) : NULL;
    tg_set_grad_enabled(grad);
    int st = sum ? TG_OK : TG_ENOMEM;
    if (st == TG_OK && holders(root, w) > 1) {
        tg_tensor *nw = tg_empty(linear->tape, w->dtype, 2, w->shape);
        if (!nw) st = TG_ENOMEM;
        else {
            nw->is_param = true;
            nw->requires_grad = w->requires_grad;
            st = tg_module_register_parameter(linear, "weight", nw);
            w = nw;
        }
    }
    if (st == TG_OK) {
        tg_k_copy(w, sum);
        tg__bump(w);
    }
    tg_tape_free(tp);
    return st;
}

static int merge_tree(tg_module *root, tg_module *m)
{
    for (int i = 0; i < m->children.n; i++) {
        tg_module *c = m->children.items[i].ptr, *lin;
        tg_tensor *a, *b;
        double scale;
        int st;
        if (tg__lora_parts(c, &lin, &a, &b, &scale)) {
            if ((st = merge_one(root, lin, a, b, scale)) != TG_OK) return st;
            /* the wrapper's place goes to its Linear */
            if ((st = tg_module_add_module(m, m->children.items[i].name, lin)) != TG_OK) return st;
        } else if ((st = merge_tree(root, c)) != TG_OK) {
            return st;
        }
    }
    return TG_OK;
}

int tg_lora_merge(tg_module *model)
{
    if (!model) return tg_error_status(TG_EINVAL, "lora_merge: NULL module");
    return merge_tree(model, model);
}
