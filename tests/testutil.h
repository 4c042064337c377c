/* Shared test helpers: reference loading and assertions that report the
 * caller's file and line and the worst element. */
#ifndef TG_TESTUTIL_H
#define TG_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>

#include "tapegrad.h"

/* Parses tests/ref/<file> (directory from the TG_REF_DIR compile definition);
 * fails the test if it cannot. Caller json_decref()s. */
json_t *tu_load_ref(const char *file);
/* The OpenBLAS kernels this process runs (openblas_get_corename: "Haswell",
 * "SkylakeX", ...), or NULL under another BLAS. */
const char *tu_blas_kernels(void);
/* The CPU has AVX2 and FMA: it runs OpenBLAS's Haswell kernels and
 * PyTorch's vectorised exp, log and tanh (SLEEF's AVX2 functions). */
bool tu_cpu_avx2_fma(void);
/* Called first in main() by every test that compares against committed
 * PyTorch outputs bit for bit. OpenBLAS picks its kernels by CPU (AVX2's
 * Haswell family, or AVX-512's SkylakeX family, which rounds its sums
 * differently), and the references hold the bits of one family: TG_REF_BLAS
 * (tests/meson.build). Where OpenBLAS chose another family and the CPU can
 * run the references' (AVX2 and FMA), the test runs itself again with
 * OPENBLAS_CORETYPE set to it (OpenBLAS reads it when it loads, before
 * main). It then prints the kernels it compares on. */
void tu_reference_kernels(char **argv);
/* The path of tests/ref/<file> in buf. */
const char *tu_ref_path(char *buf, size_t size, const char *file);

/* The whole of a file, malloc'd with a NUL after its *len bytes; fails the
 * test if it cannot be read. */
char *tu_read_file(const char *path, size_t *len);

/* A tensor in tp from {"shape": [...], "dtype": "float32"|"float64"|"bool"|"int64",
 * "data": [...]} (data row-major; "inf", "-inf", "nan" strings allowed).
 * dtype may be overridden with force (pass TG_DTYPE_COUNT to keep the file's). */
tg_tensor *tu_tensor_from_json(tg_tape *tp, const json_t *j, tg_dtype force);
/* Member key of a reference object (the test fails, naming it, without
 * one), and that member as a tensor in its own dtype (the test fails when it
 * is not one). */
const json_t *tu_json_get(const json_t *o, const char *key);
tg_tensor *tu_json_tensor(tg_tape *tp, const json_t *o, const char *key);
/* x rounded to the nearest bf16 (ties to even), as BF16 numerics round a
 * product's operands (tensor.h). */
double tu_bf16(float x);

/* Fails unless got and want have the same shape and
 * |got - want| <= atol + rtol * |want| everywhere (NaN matches NaN, inf
 * matches the same inf). The message names what, the worst index and values. */
void tu_assert_close_(const tg_tensor *got, const tg_tensor *want, double rtol, double atol,
                      const char *what, const char *file, int line);
#define tu_assert_close(got, want, rtol, atol, what) \
    tu_assert_close_((got), (want), (rtol), (atol), (what), __FILE__, __LINE__)

/* Fails unless ptr is NULL (or status != TG_OK) and tg_last_error() contains
 * every one of the given substrings (NULL-terminated list). */
void tu_assert_error_(bool failed, const char *file, int line, ...);
#define tu_assert_null_error(ptr, ...) \
    tu_assert_error_((ptr) == NULL, __FILE__, __LINE__, __VA_ARGS__, (const char *)NULL)
#define tu_assert_status_error(st, ...) \
    tu_assert_error_((st) != TG_OK, __FILE__, __LINE__, __VA_ARGS__, (const char *)NULL)
/* The same, and the message is one line. */
#define tu_assert_one_line_error(st, ...)                                                  \
    do {                                                                                   \
        tu_assert_status_error((st), __VA_ARGS__);                                         \
        if (strchr(tg_last_error(), '\n')) fail_msg("not one line: %s", tg_last_error()); \
    } while (0)

/* Fails unless two gradcheck results are the same: verdict, worst element,
 * its values (to the bit) and message. */
void tu_assert_same_gradcheck_(const tg_gradcheck_result *got, const tg_gradcheck_result *want, const char *file,
                               int line);
#define tu_assert_same_gradcheck(got, want) tu_assert_same_gradcheck_((got), (want), __FILE__, __LINE__)

/* Fails (naming file and line) if ptr is NULL, printing tg_last_error(). */
void tu_assert_ok_(const void *ptr, const char *file, int line);
#define tu_assert_ok(ptr) tu_assert_ok_((ptr), __FILE__, __LINE__)

#endif
