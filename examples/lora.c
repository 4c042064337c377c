/* The book's appendix E from C: LoRA on a GPTModel. The model is frozen,
 * every Linear becomes LinearWithLoRA (A drawn as PyTorch's
 * kaiming_uniform_(a=sqrt(5)), B zeros), and only the adapters train, here
 * on the-verdict.txt with chapter 5's loss. The adapters alone are then
 * saved and loaded with strict=false into a fresh copy of the frozen base,
 * which must give the trained model's logits to the bit.
 *   lora DATA_DIR   (DATA_DIR holds the-verdict.txt and gpt2/)
 * Exit status 0 when the loss fell and the reloaded model agrees. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

static const tg_gpt_config cfg = {50257, 64, 32, 2, 2, 0.0, false}; /* vocab, context, emb, heads, layers */

/* torch.manual_seed(123); GPTModel(cfg); freeze; replace_linear_with_lora(model, 8, 16) */
static tg_module *lora_model(tg_tape *tp)
{
    tg_manual_seed(123);
    tg_module *m = tg_gpt_new(tp, &cfg);
    if (!m || tg_module_requires_grad_(m, false) != TG_OK || tg_lora_replace_linear(tp, m, 8, 16.0) != TG_OK)
        return NULL;
    return m;
}

static double loss_of(tg_tape *step, tg_module *m, tg_tensor *x, tg_tensor *y, bool backward)
{
    tg_tensor *logits = tg_module_forward(step, m, x);
    int64_t flat[2] = {-1, cfg.vocab_size}, n = -1;
    tg_tensor *loss = logits ? tg_cross_entropy(step, tg_view(step, logits, 2, flat), tg_view(step, y, 1, &n),
                                                TG_REDUCE_MEAN)
                             : NULL;
    if (!loss || (backward && tg_backward(loss, NULL, false) != TG_OK)) return -1;
    return tg_item(loss);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "data";
    char path[4096];
    snprintf(path, sizeof path, "%s/gpt2", dir);
    tg_tokenizer *tok = tg_tokenizer_load_dir(path);
    snprintf(path, sizeof path, "%s/the-verdict.txt", dir);
    FILE *f = fopen(path, "rb");
    char *text = malloc(1 << 20);
    size_t len = f && text ? fread(text, 1, 1 << 20, f) : 0, n_ids = 0;
    if (f) fclose(f);
    int64_t *ids = NULL;
    if (!tok || !len || tg_tokenizer_encode(tok, text, len, &ids, &n_ids) != TG_OK) {
        fprintf(stderr, "lora: %s\n", tok ? tg_last_error() : "cannot read the vocabulary");
        return 1;
    }
    tg_text_dataset *ds = tg_text_dataset_new(ids, (int64_t)n_ids, cfg.context_length, cfg.context_length);
    tg_loader *loader = tg_text_loader_new(ds, (tg_loader_options){.batch_size = 4, .shuffle = true, .drop_last = true});
    tg_tape *tp = tg_tape_new(), *step = tg_tape_new();
    tg_module *model = lora_model(tp);
    if (!loader || !model) {
        fprintf(stderr, "lora: %s\n", tg_last_error());
        return 1;
    }
    printf("Total parameters: %lld\n", (long long)tg_module_num_parameters(model));
    printf("Total trainable LoRA parameters: %lld\n", (long long)tg_module_num_trainable_parameters(model));
    tg_module_print(stdout, tg_module_get_submodule(model, "trf_blocks.0.att"));

    /* AdamW over model.parameters(): the frozen ones get no gradient and are skipped */
    tg_optimizer *opt = tg_adamw_new(tp, model, (tg_adam_options){5e-3, {0.9, 0.999}, 1e-8, 0.1, false});
    double first = 0, last = 0;
    tg_tensor *x = NULL, *y = NULL;
    tg_loader_iter *it = opt ? tg_loader_iter_new(loader) : NULL; /* one epoch */
    for (int s = 1; it && tg_loader_iter_next(it, step, &x, &y) == 1; s++) {
        tg_optimizer_zero_grad(opt);
        last = loss_of(step, model, x, y, true);
        if (last < 0 || tg_optimizer_step(opt) != TG_OK) break;
        if (first == 0) first = last;
        if (s % 5 == 0) printf("step %d: training loss %.3f\n", s, last);
        tg_tape_reset(step);
    }
    tg_loader_iter_free(it);

    /* the adapters alone: the state_dict's lora.A / lora.B entries */
    tg_named_list sd;
    tg_module_state_dict(tp, model, &sd);
    tg_named_tensor adapters[64];
    int na = 0;
    for (int i = 0; i < sd.n && na < 64; i++)
        if (strstr(sd.names[i], ".lora.")) adapters[na++] = (tg_named_tensor){sd.names[i], sd.tensors[i]};
    const char *file = "lora_adapters.safetensors";
    tg_module *fresh = lora_model(tp);
    tg_incompatible_keys keys = {0};
    int ok = tg_safetensors_save(file, adapters, na) == TG_OK && fresh &&
             tg_module_load_ex(fresh, file, false, tp, &keys) == TG_OK;
    remove(file);
    printf("%d adapter tensors saved; loaded with strict=false: %d missing keys (the frozen base), %d unexpected\n",
           na, keys.n_missing, keys.n_unexpected);

    /* the reloaded model gives the trained model's logits, bit for bit */
    int64_t shape[2] = {1, 16};
    tg_tensor *probe = tg_from_data(step, TG_I64, 2, shape, ids);
    tg_module_train(model, false), tg_module_train(fresh, false);
    tg_tensor *a = ok ? tg_module_forward(step, model, probe) : NULL, *b = a ? tg_module_forward(step, fresh, probe) : NULL;
    ok = b && memcmp(tg_data_ptr(a), tg_data_ptr(b), sizeof(float) * (size_t)tg_numel(a)) == 0 && last < first &&
         keys.n_unexpected == 0 && keys.n_missing == sd.n - na;
    printf("loss %.3f -> %.3f; reloaded adapters give the same logits: %s\n", first, last, ok ? "yes" : "NO");
    if (!b) fprintf(stderr, "lora: %s\n", tg_last_error());
    tg_loader_free(loader);
    tg_text_dataset_free(ds);
    tg_tokenizer_free(tok);
    free(ids);
    free(text);
    tg_tape_free(step);
    tg_tape_free(tp);
    return ok ? 0 : 1;
}
