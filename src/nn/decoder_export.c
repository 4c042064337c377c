/* The decoder's weights under Hugging Face's names, the inverse of the
 * loader's tables (src/nn/decoder_hf.c, the family's names in
 * src/nn/families.c): what save_pretrained writes for the family's class,
 * and PEFT's names for its LoRA adapters. src/export writes them as
 * folders and GGUF files (include/tapegrad/export.h). */
#include "nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tapegrad/export.h"

/* ---- what the family's Hugging Face class can express ----------------------------------------- */

/* One line naming the first feature of r that the family's class has not;
 * TG_OK when there is none. */
static int check_features(const tg_decoder_config *r, const tg__family *f, const char *op)
{
    bool gemma = r->family == TG_GPT_FAMILY_GEMMA3, gpt2 = r->family == TG_GPT_FAMILY_GPT2;
    bool qwen = r->family == TG_GPT_FAMILY_QWEN3, llama = r->family == TG_GPT_FAMILY_LLAMA3;
    const char *why = NULL;
    static const char *const norms[] = {"", "LayerNorm", "RMSNorm"}, *const mlps[] = {"", "GELU MLP", "SwiGLU", "GeGLU"};
    char buf[96];
    if (r->norm != f->norm)
        snprintf(buf, sizeof buf, "%s (the class has %s)", norms[r->norm], norms[f->norm]), why = buf;
    else if (r->mlp != f->mlp)
        snprintf(buf, sizeof buf, "%s feed-forward (the class has %s)", mlps[r->mlp], mlps[f->mlp]), why = buf;
    else if (r->positions != f->positions)
        why = r->positions == TG_POSITIONS_ROPE ? "RoPE (the class has learned positions)"
                                                : "learned positions (the class has RoPE)";
    else if (r->qkv_bias && !gpt2)
        why = "query/key/value bias";
    else if (r->qk_norm != (qwen || gemma))
        why = r->qk_norm ? "QK-norm" : "attention without QK-norm (the class always has it)";
    else if (r->post_norms != gemma)
        why = r->post_norms ? "norms after the attention and the feed-forward" : "two norms per block (the class has four)";
    else if (r->norm_offset != (gemma ? 1.0 : 0.0))
        why = gemma ? "RMSNorm x * w (the class computes x * (1 + w))" : "RMSNorm x * (1 + w)";
    else if (r->emb_scale != gemma)
        why = gemma ? "unscaled embeddings (the class scales them by sqrt(emb_dim))" : "embeddings scaled by sqrt(emb_dim)";
    else if (!gemma && r->sliding_window > 0)
        why = "sliding-window layers";
    else if (gemma && r->sliding_window <= 0)
        why = "attention without a sliding window (the class's config has one)";
    else if (!gemma && r->query_pre_attn_scalar > 0)
        why = "query scale (query_pre_attn_scalar)";
    else if (!gemma && r->positions == TG_POSITIONS_ROPE && r->rope_local_base != r->rope_base)
        why = "local RoPE base";
    else if (!llama && r->rope_freq.factor > 0)
        why = "Llama 3's RoPE smoothing";
    if (!why) return TG_OK;
    return tg_error_status(TG_EINVAL, "%s: %s's Hugging Face class (model_type \"%s\") cannot hold the model's %s", op, f->name,
                           f->hf_model_type, why);
}

/* A module of the tree that is a LinearWithLoRA (its dotted name in buf). */
static bool find_lora(const tg_module *m, char *buf, size_t size, size_t at)
{
    tg_module *lin;
    tg_tensor *a, *b;
    double s;
    if (tg__lora_parts(m, &lin, &a, &b, &s)) return true;
    for (int i = 0; i < m->children.n; i++) {
        const char *name = m->children.items[i].name;
        size_t n = strlen(name);
        if (at + n + 2 < size) {
            snprintf(buf + at, size - at, "%s%s", at ? "." : "", name);
            if (find_lora(m->children.items[i].ptr, buf, size, at + n + (at ? 1 : 0))) return true;
        }
    }
    return false;
}

/* The model's resolved configuration and family, checked for export. */
static int export_config(const tg_module *model, const char *op, bool lora_ok, tg_decoder_config *r,
                         const tg__family **f)
{
    tg_decoder_config cfg;
    if (!model) return tg_error_status(TG_EINVAL, "%s: NULL model", op);
    if (tg_decoder_get_config(model, &cfg) != TG_OK)
        return tg_error_status(TG_EINVAL, "%s: the model is a %s, not a decoder (tg_decoder_new)", op,
                               tg_module_type_name(model));
    if (tg_decoder_config_resolve(&cfg, r) != TG_OK) return TG_EINVAL;
    *f = tg__family_get(r->family);
    if (!*f) return tg_error_status(TG_EINVAL, "%s: unknown family %d", op, (int)r->family);
    char where[256] = "";
    if (!lora_ok && find_lora(model, where, sizeof where, 0))
        return tg_error_status(TG_EINVAL, "%s: the model has LoRA layers ('%s'): merge them first (tg_lora_merge) "
                                          "or write them as an adapter",
                               op, where);
    return check_features(r, *f, op);
}

/* ---- the state_dict under Hugging Face's names -------------------------------------------------- */

typedef struct {
    tg_tape *tp;
    const tg_module *model;
    const char *op;
    int n, cap;
    const char **names;
    tg_tensor **tensors;
} out_list;

static int push(out_list *o, const char *name, tg_tensor *t)
{
    if (!name || !t) return TG_ENOMEM;
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 64;
        const char **names = tg_tape_alloc(o->tp, sizeof *names * (size_t)cap, false);
        tg_tensor **tensors = tg_tape_alloc(o->tp, sizeof *tensors * (size_t)cap, false);
        if (!names || !tensors) return tg_error_status(TG_ENOMEM, "%s: out of memory", o->op);
        if (o->n) {
            memcpy(names, o->names, sizeof *names * (size_t)o->n);
            memcpy(tensors, o->tensors, sizeof *tensors * (size_t)o->n);
        }
        o->names = names, o->tensors = tensors, o->cap = cap;
    }
    o->names[o->n] = name;
    o->tensors[o->n++] = t;
    return TG_OK;
}

static tg_tensor *param(out_list *o, const char *ours)
{
    tg_tensor *t = tg_module_get_parameter(o->model, ours);
    if (!t)
        tg_error_status(TG_EINVAL, "%s: the model has no parameter '%s' (not as tg_decoder_new built it?)", o->op,
                        ours);
    return t;
}

/* Whether the head holds the embedding's values: the same tensor, or equal
 * bits (a tied checkpoint loaded into a separate head). */
static bool same_values(const tg_tensor *a, const tg_tensor *b)
{
    if (a == b) return true;
    if (!tg_same_shape(a, b) || a->dtype != b->dtype || !tg_is_contiguous(a) || !tg_is_contiguous(b)) return false;
    return memcmp(tg_data_ptr(a), tg_data_ptr(b), tg_tensor_nbytes(a)) == 0;
}

/* GPT-2's tensor for the file entry hf: the table's rows naming it (the
 * q, k, v thirds of c_attn; a Conv1D weight transposed) gathered into one
 * (in, out) tensor in tp. */
static tg_tensor *gpt2_entry(out_list *o, const tg__hf_part *rows, int i, const char *prefix)
{
    const tg__hf_part *row = &rows[i];
    tg_tensor *parts[3] = {NULL, NULL, NULL};
    int np = 0;
    for (int k = i; rows[k].hf && np < 3; k++) {
        if (strcmp(rows[k].hf, row->hf) != 0) continue;
        char *name = tg__tape_printf(o->tp, "%s%s", prefix, rows[k].ours);
        if (!name) return NULL;
        tg_tensor *t = tg_module_get_parameter(o->model, name);
        if (!t && rows[k].part >= 0 && strstr(rows[k].ours, ".bias")) {
            /* the book's GPT-2 without qkv_bias: Hugging Face's c_attn has a bias, zero here */
            char wname[160];
            snprintf(wname, sizeof wname, "%s%.*s.weight", prefix, (int)(strlen(rows[k].ours) - 5), rows[k].ours);
            tg_tensor *w = param(o, wname);
            if (!w) return NULL;
            t = tg_zeros(o->tp, TG_F32, 1, &w->shape[0]);
        } else if (!t) {
            return param(o, name);
        }
        parts[np++] = t;
        if (row->part < 0) break;
    }
    if (np == 1 && !row->transpose) return parts[0];
    /* (in, out): each part transposed when a weight, then side by side along the last dim */
    tg_tensor *cols[3];
    for (int k = 0; k < np; k++) cols[k] = row->transpose ? tg_transpose(o->tp, parts[k], 0, 1) : parts[k];
    tg_tensor *t = np == 1 ? tg_contiguous(o->tp, cols[0]) : tg_cat(o->tp, np, cols, cols[0] ? cols[0]->ndim - 1 : 0);
    if (t && !tg_is_contiguous(t)) t = tg_contiguous(o->tp, t);
    return t;
}

static int gpt2_list(out_list *o, const tg_decoder_config *r, const tg__family *f, bool *tied)
{
    const tg__hf_part *file = f->hf_file;
    tg_tensor *emb = param(o, "tok_emb.weight"), *head = param(o, "out_head.weight");
    if (!emb || !head) return TG_EINVAL;
    *tied = same_values(emb, head);
    int k = 0;
    for (; file[k].hf; k++) {
        if (strcmp(file[k].ours, "out_head.weight") == 0) continue; /* lm_head, last */
        bool seen = false;
        for (int j = 0; j < k; j++) seen |= strcmp(file[j].hf, file[k].hf) == 0 && strcmp(file[j].ours, "out_head.weight");
        if (seen) continue;
        int st = push(o, tg__tape_printf(o->tp, "transformer.%s", file[k].hf), gpt2_entry(o, file, k, ""));
        if (st != TG_OK) return st;
    }
    const tg__hf_part *layer = &file[k + 1];
    for (int64_t l = 0; l < r->n_layers; l++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s.%lld.", f->blocks, (long long)l);
        for (int i = 0; layer[i].hf; i++) {
            bool seen = false;
            for (int j = 0; j < i; j++) seen |= strcmp(layer[j].hf, layer[i].hf) == 0;
            if (seen) continue;
            int st = push(o, tg__tape_printf(o->tp, "transformer.h.%lld.%s", (long long)l, layer[i].hf),
                          gpt2_entry(o, layer, i, prefix));
            if (st != TG_OK) return st;
        }
    }
    return *tied ? TG_OK : push(o, "lm_head.weight", head);
}

static int decoder_list(out_list *o, const tg_decoder_config *r, const tg__family *f, bool *tied)
{
    const char *norm = f->norm_book ? "scale" : "weight";
    tg_tensor *emb = param(o, "tok_emb.weight"), *head = param(o, "out_head.weight");
    if (!emb || !head) return TG_EINVAL;
    *tied = same_values(emb, head);
    int st = push(o, "model.embed_tokens.weight", emb);
    for (int64_t l = 0; st == TG_OK && l < r->n_layers; l++)
        for (int i = 0; st == TG_OK && i < TG__HF_MAX_PARTS && f->hf_parts[i].hf; i++) {
            const tg__hf_part *part = &f->hf_parts[i];
            if (part->qk_norm && !r->qk_norm) continue;
            char *ours = tg__tape_printf(o->tp, "%s.%lld.%s%s%s", f->blocks, (long long)l, part->ours,
                                     part->norm ? "." : "", part->norm ? norm : "");
            tg_tensor *t = ours ? param(o, ours) : NULL;
            if (ours && !t) return TG_EINVAL;
            st = push(o, tg__tape_printf(o->tp, "model.layers.%lld.%s", (long long)l, part->hf), t);
        }
    char *fn = st == TG_OK ? tg__tape_printf(o->tp, "final_norm.%s", norm) : NULL;
    tg_tensor *fnorm = fn ? param(o, fn) : NULL;
    if (st == TG_OK && !fnorm) return fn ? TG_EINVAL : TG_ENOMEM;
    if (st == TG_OK) st = push(o, "model.norm.weight", fnorm);
    if (st == TG_OK && !*tied) st = push(o, "lm_head.weight", head);
    return st;
}

int tg_decoder_hf_state_dict(tg_tape *tp, const tg_module *model, tg_named_list *out, bool *tied)
{
    const char *op = "hf_state_dict";
    if (!tp || !out || !tied) return tg_error_status(TG_EINVAL, "%s: NULL argument", op);
    tg_decoder_config r;
    const tg__family *f = NULL;
    int st = export_config(model, op, false, &r, &f);
    if (st != TG_OK) return st;
    out_list o = {tp, model, op, 0, 0, NULL, NULL};
    bool grad = tg_set_grad_enabled(false); /* GPT-2's gathered tensors: copies, no graph */
    st = f->hf_file ? gpt2_list(&o, &r, f, tied) : decoder_list(&o, &r, f, tied);
    tg_set_grad_enabled(grad);
    if (st != TG_OK) return st;
    for (int i = 0; i < o.n; i++)
        if (!tg_is_contiguous(o.tensors[i]) && !(o.tensors[i] = tg_contiguous(tp, o.tensors[i]))) return TG_ENOMEM;
    *out = (tg_named_list){o.n, o.names, o.tensors};
    return TG_OK;
}

/* ---- PEFT's adapters ------------------------------------------------------------------------------ */

/* Our Linear (dotted, without ".weight") -> the Hugging Face module and,
 * for GPT-2's c_attn, which third (0 query, 1 key, 2 value; -1 none).
 * NULL (no error) when the family's class has no such module. */
static const char *hf_module(tg_tape *tp, const char *ours, const tg_decoder_config *r, const tg__family *f, int *part)
{
    *part = -1;
    if (strcmp(ours, "out_head") == 0) return "lm_head";
    size_t nb = strlen(f->blocks);
    if (strncmp(ours, f->blocks, nb) != 0 || ours[nb] != '.') return NULL;
    char *end;
    long long l = strtoll(ours + nb + 1, &end, 10);
    if (end == ours + nb + 1 || *end != '.' || l < 0 || l >= r->n_layers) return NULL;
    const char *rest = end + 1;
    const tg__hf_part *rows = f->hf_parts;
    if (f->hf_file) { /* GPT-2: the per-layer rows after the first NULL */
        rows = f->hf_file;
        while (rows->hf) rows++;
        rows++;
    }
    for (int i = 0; rows[i].hf; i++) {
        size_t n = strlen(rest);
        if (strncmp(rows[i].ours, rest, n) != 0 || strcmp(rows[i].ours + n, ".weight") != 0) continue;
        size_t hn = strlen(rows[i].hf) - strlen(".weight");
        *part = rows[i].part;
        return f->hf_file ? tg__tape_printf(tp, "transformer.h.%lld.%.*s", l, (int)hn, rows[i].hf)
                          : tg__tape_printf(tp, "model.layers.%lld.%.*s", l, (int)hn, rows[i].hf);
    }
    return NULL;
}

/* x (rows, cols) float32 transposed into out at (r0, c0) of an (.., ld) float32 matrix. */
static void put_t(float *out, int64_t ld, int64_t r0, int64_t c0, const tg_tensor *x)
{
    for (int64_t i = 0; i < x->shape[0]; i++)
        for (int64_t j = 0; j < x->shape[1]; j++)
            out[(r0 + j) * ld + c0 + i] = (float)tg__load_elem(x->dtype, tg__ptr(x, i * x->stride[0] + j * x->stride[1]));
}

typedef struct {
    const char *module;
    const tg_tensor *a[3], *b[3]; /* GPT-2's c_attn: the three; else a[0], b[0] */
} adapter;

int tg_decoder_peft_state_dict(tg_tape *tp, const tg_module *model, tg_named_list *out, tg_peft_info *info)
{
    const char *op = "peft_state_dict";
    if (!tp || !out || !info) return tg_error_status(TG_EINVAL, "%s: NULL argument", op);
    tg_decoder_config r;
    const tg__family *f = NULL;
    int st = export_config(model, op, true, &r, &f);
    if (st != TG_OK) return st;
    tg_named_list sd;
    if ((st = tg_module_state_dict(tp, model, &sd)) != TG_OK) return st;
    adapter *ad = tg_tape_alloc(tp, sizeof *ad * (size_t)(sd.n + 1), true);
    if (!ad) return TG_ENOMEM;
    int n = 0;
    *info = (tg_peft_info){0};
    for (int i = 0; i < sd.n; i++) {
        size_t len = strlen(sd.names[i]);
        if (len < 7 || strcmp(sd.names[i] + len - 7, ".lora.A") != 0) continue;
        char *ours = tg__tape_printf(tp, "%.*s", (int)(len - 7), sd.names[i]);
        tg_module *w = ours ? tg_module_get_submodule(model, ours) : NULL, *lin;
        tg_tensor *a, *b;
        double scale;
        if (!ours) return TG_ENOMEM;
        if (!w || !tg__lora_parts(w, &lin, &a, &b, &scale)) continue;
        int64_t rank = a->shape[1];
        double alpha = scale * (double)rank;
        if (n == 0) info->rank = rank, info->alpha = alpha;
        if (rank != info->rank || fabs(alpha - info->alpha) > 1e-9 * fabs(info->alpha))
            return tg_error_status(TG_EINVAL, "%s: '%s' has rank %lld and alpha %g, the first adapter %lld and %g: "
                                              "PEFT's files take one rank and alpha",
                                   op, ours, (long long)rank, alpha, (long long)info->rank, info->alpha);
        int part;
        const char *hf = hf_module(tp, ours, &r, f, &part);
        if (!hf) return tg_error_status(TG_EINVAL, "%s: '%s' has an adapter, and %s's Hugging Face class has no "
                                                   "such module", op, ours, f->name);
        int k = 0;
        while (k < n && strcmp(ad[k].module, hf) != 0) k++;
        if (k == n) ad[n++] = (adapter){hf, {NULL}, {NULL}};
        ad[k].a[part < 0 ? 0 : part] = a;
        ad[k].b[part < 0 ? 0 : part] = b;
    }
    if (n == 0) return tg_error_status(TG_EINVAL, "%s: the model has no LoRA layers (tg_lora_replace_linear)", op);
    out_list o = {tp, model, op, 0, 0, NULL, NULL};
    const char **targets = tg_tape_alloc(tp, sizeof *targets * (size_t)n, false);
    if (!targets) return TG_ENOMEM;
    for (int k = 0; k < n; k++) {
        int parts = ad[k].a[1] || ad[k].a[2] ? 3 : 1;
        for (int p = 0; p < parts; p++)
            if (!ad[k].a[p])
                return tg_error_status(TG_EINVAL, "%s: %s has adapters on some of the query, key and value and not "
                                                  "all: Hugging Face's fused c_attn takes all three or none",
                                       op, ad[k].module);
        int64_t in = ad[k].a[0]->shape[0], rk = info->rank * parts, outs = 0;
        for (int p = 0; p < parts; p++) outs += ad[k].b[p]->shape[1];
        /* lora_A.weight (rank, in): the A's transposed, stacked; lora_B.weight
         * (out, rank): the B's transposed on the diagonal */
        tg_tensor *la = tg_zeros(tp, TG_F32, 2, (int64_t[]){rk, in}), *lb = tg_zeros(tp, TG_F32, 2, (int64_t[]){outs, rk});
        if (!la || !lb) return TG_ENOMEM;
        int64_t row0 = 0;
        for (int p = 0; p < parts; p++) {
            put_t(tg__ptr(la, 0), in, p * info->rank, 0, ad[k].a[p]);
            put_t(tg__ptr(lb, 0), rk, row0, p * info->rank, ad[k].b[p]);
            row0 += ad[k].b[p]->shape[1];
        }
        const char *m = ad[k].module;
        if ((st = push(&o, tg__tape_printf(tp, "base_model.model.%s.lora_A.weight", m), la)) != TG_OK ||
            (st = push(&o, tg__tape_printf(tp, "base_model.model.%s.lora_B.weight", m), lb)) != TG_OK)
            return st;
        const char *last = strrchr(m, '.') ? strrchr(m, '.') + 1 : m;
        if (parts == 3) info->fused = last;
        int t = 0;
        while (t < info->n_targets && strcmp(targets[t], last) != 0) t++;
        if (t == info->n_targets) targets[info->n_targets++] = last;
    }
    info->targets = targets;
    info->fan_in_fan_out = f->hf_file != NULL;
    *out = (tg_named_list){o.n, o.names, o.tensors};
    return TG_OK;
}
