/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c) and the corpus
 * replay driver (tests/fuzz/replay.c). A target defines FUZZ_NAME first. */
#ifndef TAPEGRAD_FUZZ_H
#define TAPEGRAD_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A violated invariant is a finding: name it and abort. */
#define CHECK_MSG(c, msg)                                                                          \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s: invariant failed: %s (%s:%d) %s\n", FUZZ_NAME, #c, __FILE__,      \
                    __LINE__, msg);                                                                \
            abort();                                                                               \
        }                                                                                          \
    } while (0)
#define CHECK(c) CHECK_MSG(c, "")

/* LLVMFuzzerInitialize for a target that needs no set-up. */
#define FUZZ_NO_SETUP                                                                              \
    int LLVMFuzzerInitialize(int *argc, char ***argv)                                              \
    {                                                                                              \
        (void)argc;                                                                                \
        (void)argv;                                                                                \
        return 0;                                                                                  \
    }

#endif
