/* Shared test helpers (see testutil.h): reference loading and assertions that
 * report the caller's file and line and the worst element. */
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TG_REF_DIR
#error "TG_REF_DIR must be defined by the build (the tests/ref directory, as a string)"
#endif

#ifndef TG_REF_BLAS
#error "TG_REF_BLAS must be defined by the build (the OpenBLAS kernels the references were made on)"
#endif

const char *tu_blas_kernels(void) {
    void *self = dlopen(NULL, RTLD_NOW);
    char *(*corename)(void) = NULL;
    if (self) {
        *(void **)(&corename) = dlsym(self, "openblas_get_corename");
        dlclose(self);
    }
    return corename ? corename() : NULL;
}

bool tu_cpu_avx2_fma(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

void tu_reference_kernels(char **argv) {
    const char *have = tu_blas_kernels();
    if (!have) {
        printf("BLAS: not OpenBLAS; the references hold OpenBLAS's %s kernels' bits\n", TG_REF_BLAS);
        return;
    }
    if (strcmp(have, TG_REF_BLAS) != 0) {
        const char *set = getenv("OPENBLAS_CORETYPE");
        if (tu_cpu_avx2_fma() && !(set && strcmp(set, TG_REF_BLAS) == 0)) {
            fflush(NULL);
            /* TU_BLAS_PICKED: what OpenBLAS chose, for the line below */
            if (setenv("TU_BLAS_PICKED", have, 1) == 0 && setenv("OPENBLAS_CORETYPE", TG_REF_BLAS, 1) == 0)
                execv("/proc/self/exe", argv);
            fprintf(stderr, "cannot run again on OpenBLAS's %s kernels: %s\n", TG_REF_BLAS, strerror(errno));
        }
        printf("BLAS: OpenBLAS runs %s kernels here and cannot run the references' (%s): products may round "
               "differently\n",
               have, TG_REF_BLAS);
        return;
    }
    const char *picked = getenv("TU_BLAS_PICKED");
    printf("BLAS: bit-for-bit comparisons on OpenBLAS's %s kernels, the references'%s%s%s\n", have,
           picked ? " (OpenBLAS picked " : "", picked ? picked : "", picked ? " for this CPU)" : "");
}

json_t *tu_load_ref(const char *file) {
    char path[4096];
    json_error_t err;
    int n = snprintf(path, sizeof path, "%s/%s", TG_REF_DIR, file);
    if (n < 0 || (size_t)n >= sizeof path) fail_msg("tu_load_ref: path too long for %s", file);
    json_t *root = json_load_file(path, JSON_DECODE_ANY, &err);
    if (!root)
        fail_msg("tu_load_ref: cannot parse %s: %s (line %d, column %d)", path, err.text, err.line,
                 err.column);
    return root;
}

const json_t *tu_json_get(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    if (!v) fail_msg("reference: no \"%s\"", key);
    return v;
}

tg_tensor *tu_json_tensor(tg_tape *tp, const json_t *o, const char *key) {
    tg_tensor *t = tu_tensor_from_json(tp, tu_json_get(o, key), TG_DTYPE_COUNT);
    if (!t) fail_msg("reference: \"%s\" is not a tensor: %s", key, tg_last_error());
    return t;
}

/* A JSON number, boolean or one of the strings "inf", "-inf", "nan". */
static bool json_to_double(const json_t *v, double *out) {
    if (json_is_integer(v)) {
        *out = (double)json_integer_value(v);
    } else if (json_is_real(v)) {
        *out = json_real_value(v);
    } else if (json_is_boolean(v)) {
        *out = json_is_true(v) ? 1.0 : 0.0;
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "inf") == 0 || strcmp(s, "+inf") == 0 || strcmp(s, "Infinity") == 0)
            *out = INFINITY;
        else if (strcmp(s, "-inf") == 0 || strcmp(s, "-Infinity") == 0)
            *out = -INFINITY;
        else if (strcmp(s, "nan") == 0 || strcmp(s, "NaN") == 0)
            *out = NAN;
        else
            return false;
    } else {
        return false;
    }
    return true;
}

static bool dtype_from_name(const char *s, tg_dtype *dt) {
    static const struct {
        const char *name;
        tg_dtype dt;
    } names[] = {{"float32", TG_F32}, {"float64", TG_F64}, {"bool", TG_BOOL},
                 {"uint8", TG_U8},    {"int64", TG_I64}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i].name) == 0) {
            *dt = names[i].dt;
            return true;
        }
    }
    return false;
}

tg_tensor *tu_tensor_from_json(tg_tape *tp, const json_t *j, tg_dtype force) {
    if (!json_is_object(j)) fail_msg("tu_tensor_from_json: not a JSON object");
    const json_t *jshape = json_object_get(j, "shape");
    const json_t *jdtype = json_object_get(j, "dtype");
    const json_t *jdata = json_object_get(j, "data");
    if (!json_is_array(jshape) || !json_is_array(jdata))
        fail_msg("tu_tensor_from_json: missing \"shape\" or \"data\" array");
    tg_dtype dt = TG_F32;
    if (jdtype && (!json_is_string(jdtype) || !dtype_from_name(json_string_value(jdtype), &dt)))
        fail_msg("tu_tensor_from_json: bad dtype");
    if (force != TG_DTYPE_COUNT) dt = force;

    int ndim = (int)json_array_size(jshape);
    if (ndim > TG_MAX_DIMS) fail_msg("tu_tensor_from_json: %d dims > TG_MAX_DIMS", ndim);
    int64_t shape[TG_MAX_DIMS];
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        const json_t *s = json_array_get(jshape, (size_t)d);
        if (!json_is_integer(s) || json_integer_value(s) < 0)
            fail_msg("tu_tensor_from_json: bad size in shape at dim %d", d);
        shape[d] = (int64_t)json_integer_value(s);
        numel *= shape[d];
    }
    if ((int64_t)json_array_size(jdata) != numel)
        fail_msg("tu_tensor_from_json: %zu data values for %lld elements", json_array_size(jdata),
                 (long long)numel);

    tg_tensor *t = tg_empty(tp, dt, ndim, shape);
    if (!t) fail_msg("tu_tensor_from_json: tg_empty failed: %s", tg_last_error());
    void *p = tg_data_ptr(t);
    if (!p && numel > 0) fail_msg("tu_tensor_from_json: tg_empty result is not contiguous");
    for (int64_t i = 0; i < numel; i++) {
        const json_t *v = json_array_get(jdata, (size_t)i);
        if (dt == TG_I64 && json_is_integer(v)) { /* exact, beyond 2^53 too */
            ((int64_t *)p)[i] = (int64_t)json_integer_value(v);
            continue;
        }
        double x = 0.0;
        if (!json_to_double(v, &x)) fail_msg("tu_tensor_from_json: bad value at %lld", (long long)i);
        switch (dt) {
        case TG_F32: ((float *)p)[i] = (float)x; break;
        case TG_F64: ((double *)p)[i] = x; break;
        case TG_BOOL: ((uint8_t *)p)[i] = (uint8_t)(x != 0.0); break;
        case TG_U8: ((uint8_t *)p)[i] = (uint8_t)x; break;
        case TG_I64: ((int64_t *)p)[i] = (int64_t)x; break;
        default: fail_msg("tu_tensor_from_json: unsupported dtype %d", (int)dt);
        }
    }
    return t;
}

/* "[1,0,2]" for the flat row-major position i of a tensor of shape t. */
static void multi_index_str(const tg_tensor *t, int64_t i, char *buf, size_t n) {
    int64_t idx[TG_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->shape[d] ? i % t->shape[d] : 0;
        i = t->shape[d] ? i / t->shape[d] : 0;
    }
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)idx[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

void tu_assert_close_(const tg_tensor *got, const tg_tensor *want, double rtol, double atol,
                      const char *what, const char *file, int line) {
    char sg[128], sw[128];
    if (!want) {
        print_error("%s: reference tensor is NULL\n", what);
        _fail(file, line);
        return;
    }
    if (!got) {
        print_error("%s: got NULL (%s)\n", what, tg_last_error());
        _fail(file, line);
        return;
    }
    if (!tg_same_shape(got, want)) {
        print_error("%s: shape %s, want %s\n", what, tg_shape_str(got, sg, sizeof sg),
                    tg_shape_str(want, sw, sizeof sw));
        _fail(file, line);
        return;
    }
    int64_t n = tg_numel(want), bad = 0, worst = -1;
    double worst_excess = -1.0, max_abs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = tg_item_at(got, i), w = tg_item_at(want, i);
        bool ok;
        double err;
        if (isnan(w) || isnan(g)) {
            ok = isnan(w) && isnan(g);
            err = ok ? 0.0 : INFINITY;
        } else if (isinf(w) || isinf(g)) {
            ok = g == w;
            err = ok ? 0.0 : INFINITY;
        } else {
            err = fabs(g - w);
            ok = err <= atol + rtol * fabs(w);
        }
        if (err > max_abs) max_abs = err;
        if (!ok) {
            double excess = isinf(err) ? INFINITY : err - (atol + rtol * fabs(w));
            if (worst < 0 || excess > worst_excess) {
                worst = i;
                worst_excess = excess;
            }
            bad++;
        }
    }
    if (bad) {
        char idx[128];
        multi_index_str(want, worst, idx, sizeof idx);
        double g = tg_item_at(got, worst), w = tg_item_at(want, worst);
        print_error("%s: %lld of %lld elements differ (rtol %g, atol %g); worst at %s: "
                    "got %.17g want %.17g (|diff| %.3g); max |diff| %.3g; shape %s\n",
                    what, (long long)bad, (long long)n, rtol, atol, idx, g, w, fabs(g - w), max_abs,
                    tg_shape_str(want, sw, sizeof sw));
        _fail(file, line);
    }
}

void tu_assert_error_(bool failed, const char *file, int line, ...) {
    const char *msg = tg_last_error();
    if (!msg) msg = "";
    if (!failed) {
        print_error("expected an error, but the call succeeded (last error: \"%s\")\n", msg);
        _fail(file, line);
        return;
    }
    va_list ap;
    va_start(ap, line);
    const char *sub;
    while ((sub = va_arg(ap, const char *)) != NULL) {
        if (!strstr(msg, sub)) {
            print_error("error message \"%s\" does not contain \"%s\"\n", msg, sub);
            va_end(ap);
            _fail(file, line);
            return;
        }
    }
    va_end(ap);
}

void tu_assert_same_gradcheck_(const tg_gradcheck_result *got, const tg_gradcheck_result *want, const char *file,
                               int line)
{
    if (got->passed != want->passed || got->worst_input != want->worst_input ||
        got->worst_index != want->worst_index || got->analytic != want->analytic || got->numeric != want->numeric ||
        got->max_abs_err != want->max_abs_err || strcmp(got->message, want->message) != 0) {
        print_error("gradcheck results differ:\n  got  %s\n  want %s\n", got->message, want->message);
        _fail(file, line);
    }
}

void tu_assert_ok_(const void *ptr, const char *file, int line) {
    if (!ptr) {
        print_error("unexpected NULL: %s\n", tg_last_error());
        _fail(file, line);
    }
}

const char *tu_ref_path(char *buf, size_t size, const char *file)
{
    snprintf(buf, size, "%s/%s", TG_REF_DIR, file);
    return buf;
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) fail_msg("cannot size %s", path);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    b[n] = '\0';
    *len = (size_t)n;
    return b;
}

double tu_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
