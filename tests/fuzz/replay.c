/* Replays fuzz corpora through a libFuzzer target without libFuzzer, so the
 * ordinary test suite (and its AddressSanitizer/UBSan build) runs every
 * committed corpus input, including the reproducers of fixed findings.
 *
 *   replay_<target> DIR...
 *
 * Calls LLVMFuzzerInitialize once, then LLVMFuzzerTestOneInput on every
 * regular file of each DIR in name order. A crash, sanitizer report or leak
 * fails the test as it would fail the fuzzer; a corpus with no input is an
 * error too. The count goes to stderr (a target may send stdout to
 * /dev/null). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads a whole file; NULL on error (message printed). */
static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *grown = realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    if (!buf || ferror(f)) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = n;
    return buf;
}

/* Replays every regular file of dir; returns the count, or -1 on error. */
static long replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        perror(dir);
        return -1;
    }
    size_t n = 0, cap = 64;
    char **names = malloc(cap * sizeof *names);
    struct dirent *e;
    while (names && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **grown = realloc(names, 2 * cap * sizeof *names);
            if (!grown) break;
            names = grown;
            cap *= 2;
        }
        size_t len = strlen(dir) + 1 + strlen(e->d_name) + 1;
        if (!(names[n] = malloc(len))) break;
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (!names) return -1;
    qsort(names, n, sizeof *names, by_name);
    long count = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (count >= 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            size_t size = 0;
            uint8_t *data = read_file(names[i], &size);
            if (data) {
                LLVMFuzzerTestOneInput(data, size);
                free(data);
                count++;
            } else {
                count = -1;
            }
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
        return 2;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    long total = 0;
    for (int i = 1; i < argc; i++) {
        long c = replay_dir(argv[i]);
        if (c < 0) return 1;
        if (c == 0) {
            fprintf(stderr, "%s: no corpus inputs\n", argv[i]);
            return 1;
        }
        fprintf(stderr, "%s: %ld inputs replayed\n", argv[i], c);
        total += c;
    }
    return total > 0 ? 0 : 1;
}
