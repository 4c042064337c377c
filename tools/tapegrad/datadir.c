/* Where the CLI finds GPT-2's vocabulary (README.md, "Tokenizer"): the
 * directory in $TAPEGRAD_DATA, else the installed share/tapegrad, else the
 * source tree's data/ (a build run in place). Each must hold
 * gpt2/encoder.json. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TG_DATA_INSTALLED
#define TG_DATA_INSTALLED ""
#endif
#ifndef TG_DATA_SOURCE
#define TG_DATA_SOURCE ""
#endif

static bool has_vocab(const char *dir)
{
    char path[4096];
    if (!dir || !*dir || snprintf(path, sizeof path, "%s/gpt2/encoder.json", dir) >= (int)sizeof path) return false;
    return access(path, R_OK) == 0;
}

const char *tg_cli_data_dir(void)
{
    const char *env = getenv("TAPEGRAD_DATA");
    if (env && *env) {
        if (has_vocab(env)) return env;
        tg_error("TAPEGRAD_DATA=%.300s has no gpt2/encoder.json", env);
        return NULL;
    }
    if (has_vocab(TG_DATA_INSTALLED)) return TG_DATA_INSTALLED;
    if (has_vocab(TG_DATA_SOURCE)) return TG_DATA_SOURCE;
    tg_error("GPT-2's vocabulary (gpt2/encoder.json) is neither installed (%s) nor in the source tree (%s); "
             "set TAPEGRAD_DATA to the directory that holds gpt2/",
             TG_DATA_INSTALLED, TG_DATA_SOURCE);
    return NULL;
}

/* One tokenizer per process (a fuzzer or a test runs many commands in one
 * process), reloaded if the directory changes; freed at exit. */
static tg_tokenizer *cached;
static char cached_dir[4096];

static void free_cached(void)
{
    tg_tokenizer_free(cached);
    cached = NULL;
}

tg_tokenizer *tg_cli_tokenizer(void)
{
    const char *dir = tg_cli_data_dir();
    if (!dir) return NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/gpt2", dir) >= (int)sizeof path) return tg_error("data directory path too long");
    if (cached && strcmp(path, cached_dir) == 0) return cached;
    static bool registered;
    if (!registered) registered = atexit(free_cached) == 0;
    free_cached();
    cached = tg_tokenizer_load_dir(path);
    if (cached) snprintf(cached_dir, sizeof cached_dir, "%s", path);
    return cached;
}
