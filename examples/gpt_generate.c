/* The book's GPT-2 124M from C: tokenize a prompt, build the model after
 * manual_seed(123), generate greedily with and without the KV cache, decode.
 *   gpt_generate [VOCAB_DIR ["prompt"]]    (VOCAB_DIR: encoder.json, vocab.bpe;
 *                                          by default the installed vocabulary) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

#define NEW_TOKENS 10

int main(int argc, char **argv)
{
    const char *prompt = argc > 2 ? argv[2] : "Hello, I am";
    tg_tokenizer *tok = tg_tokenizer_load_dir(argc > 1 ? argv[1] : NULL);
    tg_tape *tp = tg_tape_new();
    int64_t *ids = NULL, out[2][1024 + NEW_TOKENS], n[2];
    size_t n_ids = 0;
    if (!tok || !tp || tg_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n_ids) != TG_OK) goto fail;
    if (n_ids == 0 || n_ids > 1024) {
        tg_error("the prompt must have 1 to 1024 tokens, not %zu", n_ids);
        goto fail;
    }

    tg_gpt_config cfg;
    tg_gpt_config_preset("gpt2-small", &cfg);
    tg_manual_seed(123);
    tg_module *gpt = tg_gpt_new(tp, &cfg);
    if (!gpt) goto fail;
    printf("%lld parameters\n", (long long)tg_module_num_parameters(gpt));

    for (int cached = 0; cached < 2; cached++) {
        tg_generate_options opt = {.max_new_tokens = NEW_TOKENS, .eos_id = -1, .no_kv_cache = !cached};
        if (tg_gpt_generate(gpt, ids, (int64_t)n_ids, &opt, out[cached], &n[cached]) != TG_OK) goto fail;
    }
    char *text;
    size_t len;
    if (tg_tokenizer_decode(tok, out[1], (size_t)n[1], &text, &len) != TG_OK) goto fail;
    printf("%s\n", text);
    free(text);
    int same = n[0] == n[1] && memcmp(out[0], out[1], sizeof(int64_t) * (size_t)n[0]) == 0;
    printf("KV cache and recomputation give %s ids\n", same ? "the same" : "DIFFERENT");
    free(ids);
    tg_tape_free(tp);
    tg_tokenizer_free(tok);
    return same ? 0 : 1;
fail:
    fprintf(stderr, "gpt_generate: %s\n", tg_last_error());
    free(ids);
    tg_tape_free(tp);
    tg_tokenizer_free(tok);
    return 2;
}
