/* Shared by the targets that fuzz file loaders (fuzz_module_load,
 * fuzz_hf_load): the input becomes an in-memory file (memfd) that the real
 * loader opens by path, and the loaded values are compared before and after.
 * Include after fuzz.h, with _GNU_SOURCE defined before any header. */
#ifndef TAPEGRAD_FUZZ_FILE_H
#define TAPEGRAD_FUZZ_FILE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <tapegrad.h>

/* A memfd named name; its path (/proc/self/fd/N) in path. */
static inline int fuzz_file_open(const char *name, char *path, size_t size)
{
    int fd = memfd_create(name, 0);
    CHECK(fd >= 0);
    snprintf(path, size, "/proc/self/fd/%d", fd);
    return fd;
}

/* The file's contents become data[0..size). */
static inline void fuzz_file_set(int fd, const uint8_t *data, size_t size)
{
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(size == 0 || pwrite(fd, data, size, 0) == (ssize_t)size);
}

/* Every value of the list's tensors, flattened, into vals (room for max);
 * returns the count. */
static inline int fuzz_snapshot(const tg_named_list *l, double *vals, int max)
{
    int k = 0;
    for (int i = 0; i < l->n; i++) {
        int64_t n = tg_numel(l->tensors[i]);
        CHECK(k + n <= max);
        CHECK(tg_copy_to_f64(l->tensors[i], vals + k) == TG_OK);
        k += (int)n;
    }
    return k;
}

/* Equal, NaN equal to NaN. */
static inline bool fuzz_same_value(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

#endif
