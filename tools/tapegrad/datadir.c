/* The CLI's tokenizer: the file --tokenizer names, or GPT-2's vocabulary
 * (docs/tokenizers.md), found where the library looks (tg_tokenizer_default_dir: $TAPEGRAD_DATA/gpt2, else the
 * installed share/tapegrad/gpt2), else the source tree's data/gpt2 (a build
 * run in place). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TG_DATA_SOURCE
#define TG_DATA_SOURCE ""
#endif

static const char *vocab_dir(void)
{
    static const char source[] = TG_DATA_SOURCE "/gpt2";
    const char *dir = tg_tokenizer_default_dir();
    if (dir) return dir;
    const char *env = getenv("TAPEGRAD_DATA");
    if (env && *env) return NULL; /* its message stands */
    char path[sizeof source + 16];
    snprintf(path, sizeof path, "%s/encoder.json", source);
    if (*TG_DATA_SOURCE && access(path, R_OK) == 0) {
        tg_clear_error();
        return source;
    }
    tg_error("GPT-2's vocabulary (gpt2/encoder.json) is neither installed nor in the source tree (%s); "
             "set TAPEGRAD_DATA to the directory that holds gpt2/",
             TG_DATA_SOURCE);
    return NULL;
}

/* One tokenizer per process (a fuzzer or a test runs many commands in one
 * process), reloaded if the file changes; freed at exit. */
static tg_tokenizer *cached;
static char cached_path[4096];

static void free_cached(void)
{
    tg_tokenizer_free(cached);
    cached = NULL;
}

tg_tokenizer *tg_cli_tokenizer(const char *path)
{
    const char *what = path ? path : vocab_dir();
    if (!what) return NULL;
    if (cached && strcmp(what, cached_path) == 0) return cached;
    if (strlen(what) >= sizeof cached_path) return tg_error("the tokenizer's path is too long");
    static bool registered;
    if (!registered) registered = atexit(free_cached) == 0;
    free_cached();
    cached = path ? tg_tokenizer_load_file(path) : tg_tokenizer_load_dir(what);
    if (cached) snprintf(cached_path, sizeof cached_path, "%s", what);
    return cached;
}

bool tg_cli_is_dir(const char *path)
{
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *tg_cli_model_tokenizer_path(const char *path, const char *hf, const tg_decoder_config *cfg, char *buf,
                                       size_t size)
{
    if (path) return path;
    if (tg_cli_is_dir(hf)) {
        if (snprintf(buf, size, "%s/tokenizer.json", hf) >= (int)size) return tg_error("--hf: the folder's path is too long");
        return buf;
    }
    const char *gpt2 = vocab_dir();
    if (!gpt2 || cfg->family == TG_GPT_FAMILY_GPT2) return gpt2;
    /* the family's tokenizer.json beside GPT-2's files: DATA/<folder>; Qwen3's
     * is installed, Llama 3's and Gemma 3's are not (their owners' terms) */
    const char *folder = tg_decoder_family_tokenizer(cfg->family);
    if (!folder) return NULL;
    const char *slash = strrchr(gpt2, '/');
    int n = slash ? (int)(slash - gpt2) : 0;
    if (snprintf(buf, size, "%.*s%s%s/tokenizer.json", n, gpt2, slash ? "/" : "", folder) >= (int)size)
        return tg_error("the data directory's path is too long");
    struct stat st;
    if (stat(buf, &st) != 0)
        return tg_error("%s's tokenizer is not shipped (its owner's terms): give --tokenizer FILE "
                        "(tools/fetch_tokenizers.sh fetches it)",
                        tg_decoder_family_name(cfg->family));
    return buf;
}

tg_tokenizer *tg_cli_model_tokenizer(const char *path, const char *hf, const tg_decoder_config *cfg)
{
    char buf[4096];
    const char *file = tg_cli_model_tokenizer_path(path, hf, cfg, buf, sizeof buf);
    if (!file) return NULL;
    /* GPT-2's folder (no --tokenizer, no --hf folder) loads as the default */
    return tg_cli_tokenizer(path || tg_cli_is_dir(hf) || cfg->family != TG_GPT_FAMILY_GPT2 ? file : NULL);
}
