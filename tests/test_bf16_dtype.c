/* TG_BF16 tensors (tensor.h): storage and conversion against PyTorch 1.13's
 * rounding (tests/ref/bf16.json, made by tools/reference/safetensors_bf16.py),
 * element access and printing, views, safetensors BF16 both ways byte for
 * byte, the weight-reading ops (embedding, linear, matmul) with a bf16
 * weight under each policy, backward through a frozen bf16 weight, modules
 * converted to bf16 (LoRA over a bf16 base), and the errors of everything
 * else given a bf16 tensor. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static float f32_of(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint16_t bf16_at(const tg_tensor *t, int64_t i) { return ((const uint16_t *)tg_data_ptr(t))[i]; }

/* Fails unless a and b (float32, same shape) hold the same bits. */
static void assert_same_bits(const tg_tensor *a, const tg_tensor *b, const char *what)
{
    assert_non_null(a);
    assert_non_null(b);
    assert_true(tg_same_shape(a, b));
    int64_t n = tg_numel(a);
    float *x = malloc(sizeof(float) * (size_t)(n + 1)), *y = malloc(sizeof(float) * (size_t)(n + 1));
    assert_int_equal(tg_copy_to_f32(a, x), TG_OK);
    assert_int_equal(tg_copy_to_f32(b, y), TG_OK);
    for (int64_t i = 0; i < n; i++)
        if (bits_of(x[i]) != bits_of(y[i])) fail_msg("%s: element %lld: %.9g != %.9g", what, (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

/* ---- conversion ------------------------------------------------------------------------------- */

static void test_conversion(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    json_t *ref = tu_load_ref("bf16.json");
    json_t *fb = json_object_get(ref, "f32_bits"), *bb = json_object_get(ref, "bf16_bits");
    int64_t n = (int64_t)json_array_size(fb);
    assert_true(n > 10);
    float *src = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) src[i] = f32_of((uint32_t)json_integer_value(json_array_get(fb, (size_t)i)));
    tg_tensor *x = tg_from_f32(tp, 1, &n, src), *b = tg_to_dtype(tp, x, TG_BF16);
    tu_assert_ok(b);
    assert_int_equal(b->dtype, TG_BF16);
    assert_int_equal(tg_dtype_size(TG_BF16), 2);
    assert_string_equal(tg_dtype_name(TG_BF16), "bfloat16");
    tg_tensor *w = tg_to_dtype(tp, b, TG_F32), *w64 = tg_to_dtype(tp, b, TG_F64);
    for (int64_t i = 0; i < n; i++) {
        uint16_t want = (uint16_t)json_integer_value(json_array_get(bb, (size_t)i));
        /* PyTorch's rounding: ties to even, inf past the largest bf16, signed zeros */
        if (bf16_at(b, i) != want)
            fail_msg("float32 0x%08x: bf16 0x%04x, PyTorch 0x%04x", bits_of(src[i]), bf16_at(b, i), want);
        /* widening is exact, to float32 and to float64, and so is reading an element */
        assert_int_equal(bits_of(((const float *)tg_data_ptr(w))[i]), (uint32_t)want << 16);
        assert_true(((const double *)tg_data_ptr(w64))[i] == (double)f32_of((uint32_t)want << 16));
        double v = tg_item_at(b, i);
        assert_true(v == (double)f32_of((uint32_t)want << 16));
    }
    /* the two ties round to even: 1 + 2^-8 down to 1, 0x3F818000 up to 0x3F82 */
    assert_int_equal(bf16_at(b, 1), 0x3F80);
    assert_int_equal(bf16_at(b, 2), 0x3F82);
    assert_int_equal(bf16_at(b, 7), 0x8000); /* -0 keeps its sign */
    /* NaN stays NaN (quiet), whatever its payload; float64 rounds through float32 */
    float nans[3] = {f32_of(0x7FC00000u), f32_of(0x7F800001u), f32_of(0xFFC00123u)};
    int64_t three = 3;
    tg_tensor *nb = tg_to_dtype(tp, tg_from_f32(tp, 1, &three, nans), TG_BF16);
    for (int64_t i = 0; i < 3; i++) {
        assert_true(isnan(tg_item_at(nb, i)));
        assert_true((bf16_at(nb, i) & 0x7FC0) == 0x7FC0);
    }
    double d[3] = {1.0 + 0x1p-8, 1.0 + 0x1p-8 + 0x1p-30, -3.0};
    tg_tensor *db = tg_to_dtype(tp, tg_from_f64(tp, 1, &three, d), TG_BF16);
    assert_int_equal(bf16_at(db, 0), 0x3F80);
    assert_int_equal(bf16_at(db, 1), 0x3F80); /* to float32 first (1 + 2^-8, a tie), as PyTorch converts */
    assert_int_equal(bf16_at(db, 2), 0xC040);
    free(src);
    json_decref(ref);
    tg_tape_free(tp);
}

static void test_elements_and_creation(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s[2] = {2, 3};
    tg_tensor *z = tg_zeros(tp, TG_BF16, 2, s), *f = tg_full(tp, TG_BF16, 2, s, 0.1);
    tu_assert_ok(z);
    tu_assert_ok(f);
    for (int64_t i = 0; i < 6; i++) {
        assert_int_equal(bf16_at(z, i), 0);
        assert_int_equal(bf16_at(f, i), 0x3DCD); /* torch.full((2, 3), 0.1, dtype=torch.bfloat16) */
    }
    uint16_t raw[6] = {0x3F80, 0x4000, 0xC040, 0x3F00, 0x7F80, 0x8000};
    tg_tensor *t = tg_from_data(tp, TG_BF16, 2, s, raw);
    int64_t idx[2] = {1, 0};
    assert_true(tg_get(t, idx) == 0.5);
    assert_int_equal(tg_set(t, idx, 1.0 + 0x1p-8 + 0x1p-20), TG_OK); /* above the tie: rounds up */
    assert_int_equal(bf16_at(t, 3), 0x3F81);
    assert_int_equal(tg_tensor_version(t), 1);
    idx[1] = 1;
    assert_true(isinf(tg_get(t, idx)) && tg_get(t, idx) > 0);
    int64_t one = 1;
    tg_tensor *sc = tg_from_data(tp, TG_BF16, 1, &one, raw + 2);
    assert_true(tg_item(sc) == -3.0);
    float out[6];
    assert_int_equal(tg_copy_to_f32(t, out), TG_OK);
    assert_true(out[1] == 2.0f && bits_of(out[5]) == 0x80000000u);
    /* printing: PyTorch's text, with the dtype named */
    uint16_t pv[3] = {0x3F80, 0x3F00, 0xC000};
    int64_t n3 = 3;
    char *str = tg_format(tg_from_data(tp, TG_BF16, 1, &n3, pv));
    assert_string_equal(str, "tensor([ 1.0000,  0.5000, -2.0000], dtype=torch.bfloat16)");
    free(str);
    tg_tape_free(tp);
}

static void test_views(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s[2] = {3, 4};
    uint16_t raw[12];
    for (int i = 0; i < 12; i++) raw[i] = (uint16_t)(0x3F80 + i);
    tg_tensor *t = tg_from_data(tp, TG_BF16, 2, s, raw);
    /* moving bytes: transpose + contiguous, narrow, cat, index_select, clone */
    tg_tensor *tt = tg_contiguous(tp, tg_transpose(tp, t, 0, 1));
    tu_assert_ok(tt);
    assert_int_equal(tt->dtype, TG_BF16);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) assert_int_equal(bf16_at(tt, j * 3 + i), raw[i * 4 + j]);
    tg_tensor *nc = tg_contiguous(tp, tg_narrow(tp, t, 1, 1, 2));
    assert_int_equal(bf16_at(nc, 0), raw[1]);
    assert_int_equal(bf16_at(nc, 3), raw[6]);
    tg_tensor *parts[2] = {t, t};
    tg_tensor *c = tg_cat(tp, 2, parts, 0);
    assert_int_equal(c->shape[0], 6);
    assert_int_equal(bf16_at(c, 12 + 5), raw[5]);
    int64_t two = 2, ids[2] = {2, 0};
    tg_tensor *sel = tg_index_select(tp, t, 0, tg_from_data(tp, TG_I64, 1, &two, ids));
    assert_int_equal(bf16_at(sel, 0), raw[8]);
    assert_int_equal(bf16_at(sel, 4), raw[0]);
    tg_tensor *cl = tg_clone(tp, t);
    assert_int_equal(memcmp(tg_data_ptr(cl), raw, sizeof raw), 0);
    /* a strided copy into float32 widens every element */
    tg_tensor *wf = tg_to_dtype(tp, tg_transpose(tp, t, 0, 1), TG_F32);
    assert_int_equal(bits_of(((const float *)tg_data_ptr(wf))[1]), (uint32_t)raw[4] << 16);
    tg_tape_free(tp);
}

/* uniform_ and normal_ of a bf16 tensor: the float32 draw rounded, value for
 * value, with the generator left where the float32 draw leaves it: below
 * 16 elements, a ragged tail, across the fills' chunks of 4096. */
static void test_random_fills(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t sizes[5] = {10, 16, 37, 4096, 2 * 4096 + 21};
    for (int k = 0; k < 5; k++)
        for (int normal = 0; normal < 2; normal++) {
            tg_tensor *f = tg_empty(tp, TG_F32, 1, &sizes[k]), *b = tg_empty(tp, TG_BF16, 1, &sizes[k]);
            tg_generator *gf = tg_generator_new(99), *gb = tg_generator_new(99);
            if (normal) {
                assert_int_equal(tg_normal_(f, 0.5, 2.0, gf), TG_OK);
                assert_int_equal(tg_normal_(b, 0.5, 2.0, gb), TG_OK);
            } else {
                assert_int_equal(tg_uniform_(f, -0.3, 0.7, gf), TG_OK);
                assert_int_equal(tg_uniform_(b, -0.3, 0.7, gb), TG_OK);
            }
            char what[64];
            snprintf(what, sizeof what, "%s of %lld", normal ? "normal_" : "uniform_", (long long)sizes[k]);
            assert_same_bits(tg_to_dtype(tp, b, TG_F32), tg_to_dtype(tp, tg_to_dtype(tp, f, TG_BF16), TG_F32), what);
            assert_int_equal(tg_generator_random(gf), tg_generator_random(gb)); /* the same draws consumed */
            tg_generator_free(gf);
            tg_generator_free(gb);
        }
    tg_tape_free(tp);
}

/* ---- errors -------------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s[2] = {2, 3}, sw[2] = {3, 3};
    tg_tensor *f = tg_ones(tp, TG_F32, 2, s), *b = tg_to_dtype(tp, f, TG_BF16);
    tg_tensor *w = tg_to_dtype(tp, tg_ones(tp, TG_F32, 2, sw), TG_BF16);
    tu_assert_status_error(tg_requires_grad_(b, true), "requires_grad_", "bfloat16");
    assert_false(b->requires_grad);
    assert_int_equal(tg_requires_grad_(b, false), TG_OK);
    tu_assert_null_error(tg_add(tp, f, b), "add", "bfloat16");
    tu_assert_null_error(tg_mul_scalar(tp, b, 2.0), "mul", "bfloat16");
    tu_assert_null_error(tg_exp(tp, b), "exp", "bfloat16");
    tu_assert_null_error(tg_sum(tp, b), "sum", "bfloat16");
    tu_assert_null_error(tg_softmax(tp, b, -1), "softmax", "bfloat16");
    tu_assert_null_error(tg_max(tp, b), "max", "bfloat16");
    tu_assert_null_error(tg_where(tp, tg_zeros(tp, TG_BOOL, 2, s), b, b), "where", "bfloat16");
    int64_t n3 = 3;
    tg_tensor *g = tg_to_dtype(tp, tg_ones(tp, TG_F32, 1, &n3), TG_BF16);
    tu_assert_null_error(tg_layer_norm(tp, f, g, g, 1e-5), "layer_norm", "bfloat16");
    tu_assert_null_error(tg_rms_norm(tp, f, g, 1e-6), "rms_norm", "bfloat16");
    tu_assert_status_error(tg_add_(b, b, 1.0), "add_", "bfloat16");
    tu_assert_status_error(tg_bernoulli_(b, 0.5, NULL), "bernoulli_", "bfloat16");
    tu_assert_null_error(tg_randn(tp, TG_BF16, 2, s, NULL), "randn", "bfloat16");
    /* a bf16 first operand, a bf16 input to linear, a float64 input with a bf16 weight */
    tu_assert_null_error(tg_matmul(tp, b, tg_ones(tp, TG_F32, 2, sw)), "matmul", "bfloat16");
    tu_assert_null_error(tg_linear(tp, b, w, NULL), "linear", "bfloat16");
    tu_assert_null_error(tg_linear(tp, tg_ones(tp, TG_F64, 2, s), w, NULL), "linear", "bfloat16", "float64");
    tu_assert_status_error(tg_module_register_parameter(NULL, "w", b), "register_parameter");
    tg_tape_free(tp);
}

/* ---- safetensors ----------------------------------------------------------------------------- */

static uint8_t *hex_bytes(const char *hex, size_t *len)
{
    *len = strlen(hex) / 2;
    uint8_t *b = malloc(*len + 1);
    for (size_t i = 0; i < *len; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        b[i] = (uint8_t)v;
    }
    return b;
}

static void assert_bits16(const tg_tensor *t, const json_t *want)
{
    assert_int_equal(tg_numel(t), (int64_t)json_array_size(want));
    for (int64_t i = 0; i < tg_numel(t); i++)
        assert_int_equal(bf16_at(t, i), (uint16_t)json_integer_value(json_array_get(want, (size_t)i)));
}

static void test_safetensors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    json_t *ref = tu_load_ref("bf16.json"), *file = json_object_get(ref, "file");
    char path[4096], path16[4096];
    tu_ref_path(path, sizeof path, "st_bf16.safetensors");
    tu_ref_path(path16, sizeof path16, "st_f16.safetensors");
    /* kept: the BF16 entry a TG_BF16 tensor with the file's bits, F32 as it is */
    tg_safetensors st;
    assert_int_equal(tg_safetensors_load_ex(tp, path, &(tg_safetensors_options){.keep_bf16 = true}, &st), TG_OK);
    tg_tensor *w = tg_safetensors_get(&st, "w"), *f = tg_safetensors_get(&st, "f");
    tu_assert_ok(w);
    tu_assert_ok(f);
    assert_int_equal(w->dtype, TG_BF16);
    assert_int_equal(f->dtype, TG_F32);
    assert_bits16(w, json_object_get(json_object_get(file, "w"), "bf16_bits"));
    /* by default widened to float32, exactly */
    tg_safetensors wide;
    assert_int_equal(tg_safetensors_load(tp, path, &wide), TG_OK);
    tg_tensor *ww = tg_safetensors_get(&wide, "w");
    assert_int_equal(ww->dtype, TG_F32);
    assert_same_bits(ww, tg_to_dtype(tp, w, TG_F32), "BF16 widened");
    /* F16 into bf16: widened to float32 exactly, then rounded as PyTorch rounds */
    tg_safetensors s16;
    assert_int_equal(tg_safetensors_load_ex(tp, path16, &(tg_safetensors_options){.keep_bf16 = true}, &s16), TG_OK);
    tg_tensor *h = tg_safetensors_get(&s16, "h");
    assert_int_equal(h->dtype, TG_F32);
    assert_bits16(tg_to_dtype(tp, h, TG_BF16), json_object_get(json_object_get(file, "h"), "bf16_bits"));
    /* saved: the reference writer's bytes, from a contiguous tensor and from a view */
    char out[] = "/tmp/tg_bf16_dtype_XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    size_t len, got_len;
    uint8_t *want = hex_bytes(json_string_value(json_object_get(file, "hex")), &len);
    tg_tensor *wt = tg_transpose(tp, tg_contiguous(tp, tg_transpose(tp, w, 0, 1)), 0, 1); /* strided, same values */
    const tg_tensor *sources[2] = {w, wt};
    for (int k = 0; k < 2; k++) {
        tg_named_tensor items[2] = {{"f", f}, {"w", sources[k]}};
        assert_int_equal(tg_safetensors_save(out, items, 2), TG_OK);
        char *got = tu_read_file(out, &got_len);
        assert_int_equal(got_len, len);
        assert_memory_equal(got, want, len);
        free(got);
    }
    free(want);
    unlink(out);
    json_decref(ref);
    tg_tape_free(tp);
}

/* ---- the weight-reading ops ----------------------------------------------------------------------- */

/* A float32 tensor of the given shape from g, N(0, 1). */
static tg_tensor *randn(tg_tape *tp, int ndim, const int64_t *shape, tg_generator *g)
{
    tg_tensor *t = tg_randn(tp, TG_F32, ndim, shape, g);
    tu_assert_ok(t);
    return t;
}

/* A frozen float32 parameter holding w's values (a bf16 tensor widened):
 * what a product of w must equal. */
static tg_tensor *widened_param(tg_tape *tp, const tg_tensor *w)
{
    tg_tensor *p = tg_parameter_new(tp, TG_F32, w->ndim, w->shape);
    tu_assert_ok(p);
    assert_int_equal(tg_requires_grad_(p, false), TG_OK);
    assert_int_equal(tg_copy_(p, w), TG_OK);
    return p;
}

/* linear, matmul (W^T as a view and W^T stored) and embedding with a bf16
 * weight against the same ops on its widened float32 copy, bit for bit:
 * under EXACT and FAST both are float32 products of the same values, under
 * BF16 the bf16 rounding of the widened copy is the identity. Rows: 1 (a
 * row against the weight: gemv, the row kernel), 5, 40 (sgemm). FAST's
 * linear of up to sixteen rows reads the bf16 weight on the row kernel,
 * the float32 one on sgemm: to float32 rounding (test_fast_rows). */
static void check_products(tg_numerics nm)
{
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_tape_set_numerics(tp, nm);
    tg_generator *g = tg_generator_new(5);
    int64_t ws[2] = {48, 72}, bs[1] = {48};
    tg_tensor *w = tg_to_dtype(mt, randn(mt, 2, ws, g), TG_BF16), *b = tg_to_dtype(mt, randn(mt, 1, bs, g), TG_BF16);
    tg_tensor *wf = widened_param(mt, w), *bf = widened_param(mt, b);
    tg_tensor *wt = tg_contiguous(mt, tg_transpose(mt, w, 0, 1)), *wtf = tg_to_dtype(mt, wt, TG_F32);
    int64_t rows[3] = {1, 5, 40};
    for (int r = 0; r < 3; r++) {
        int64_t xs[3] = {2, rows[r], 72}, xs2[2] = {rows[r], 72};
        tg_tensor *x3 = randn(tp, 3, xs, g), *x2 = randn(tp, 2, xs2, g);
        char what[96];
        snprintf(what, sizeof what, "%s linear, %lld rows", tg_numerics_name(nm), (long long)rows[r]);
        if (nm == TG_NUMERICS_FAST && 2 * rows[r] <= 16) {
            tu_assert_close(tg_linear(tp, x2, w, b), tg_linear(tp, x2, wf, bf), 1e-5, 1e-5, what);
            tu_assert_close(tg_linear(tp, x3, w, NULL), tg_linear(tp, x3, wf, NULL), 1e-5, 1e-5, what);
        } else {
            assert_same_bits(tg_linear(tp, x2, w, b), tg_linear(tp, x2, wf, bf), what);
            assert_same_bits(tg_linear(tp, x3, w, NULL), tg_linear(tp, x3, wf, NULL), what);
        }
        snprintf(what, sizeof what, "%s matmul, %lld rows", tg_numerics_name(nm), (long long)rows[r]);
        assert_same_bits(tg_matmul(tp, x2, tg_t(tp, w)), tg_matmul(tp, x2, tg_t(tp, wf)), what);
        assert_same_bits(tg_matmul(tp, x3, wt), tg_matmul(tp, x3, wtf), what);
        assert_same_bits(tg_matmul(tp, x2, wt), tg_matmul(tp, x2, wtf), what);
        tg_tape_reset(tp);
    }
    /* embedding: the rows widened */
    int64_t ids[5] = {3, 0, 47, 3, 12}, n5 = 5;
    tg_tensor *id = tg_from_data(tp, TG_I64, 1, &n5, ids);
    tg_tensor *e = tg_embedding(tp, w, id);
    tu_assert_ok(e);
    assert_int_equal(e->dtype, TG_F32);
    assert_same_bits(e, tg_embedding(tp, wf, id), "embedding");
    /* under BF16, the same as a float32 weight whose values it holds, and
     * not the float32 weight's own product (the test can fail) */
    if (nm == TG_NUMERICS_BF16) {
        tg_tensor *xf = randn(tp, 2, (int64_t[]){3, 72}, g), *full = tg_to_dtype(mt, wf, TG_F32);
        tg_tape *ex = tg_tape_new();
        tg_tensor *y32 = tg_linear(ex, xf, full, NULL), *yb = tg_linear(tp, xf, w, NULL);
        float a[144], c[144];
        tg_copy_to_f32(y32, a);
        tg_copy_to_f32(yb, c);
        bool differ = false;
        for (int i = 0; i < 144; i++) differ |= bits_of(a[i]) != bits_of(c[i]);
        assert_true(differ); /* x is rounded to bf16 under BF16, not under EXACT */
        tg_tape_free(ex);
    }
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_products_exact(void **state)
{
    (void)state;
    check_products(TG_NUMERICS_EXACT);
}

static void test_products_fast(void **state)
{
    (void)state;
    check_products(TG_NUMERICS_FAST);
}

static void test_products_bf16(void **state)
{
    (void)state;
    tg_numerics_bf16_set_emulated(true);
    check_products(TG_NUMERICS_BF16);
    tg_numerics_bf16_set_emulated(false);
    check_products(TG_NUMERICS_BF16); /* on the hardware where it has bf16 */
}

/* A bf16 weight whose float32 widening would pass 64 MiB (4200 x 4096):
 * under FAST and emulated BF16 its products run in blocks of columns, each
 * widening its own rows of W only: the widened float32 weight's products
 * to float32 rounding (bit for bit for a few rows, each element one dot
 * product), under EXACT the one call of its widened whole, bit for bit.
 * FAST's linear of a few rows reads W on the row kernel instead: float32
 * rounding apart. */
static void test_products_blocked(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(17);
    int64_t ws[2] = {4200, 4096};
    tg_tensor *w = tg_to_dtype(mt, randn(mt, 2, ws, g), TG_BF16), *wf = widened_param(mt, w);
    tg_numerics_bf16_set_emulated(true);
    tg_numerics nms[3] = {TG_NUMERICS_EXACT, TG_NUMERICS_FAST, TG_NUMERICS_BF16};
    int64_t rows[3] = {1, 3, 40};
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < 3; r++) {
            tg_tape_reset(tp);
            tg_tape_set_numerics(tp, nms[k]);
            int64_t xs[2] = {rows[r], 4096}, gs[2] = {rows[r], 4200};
            tg_tensor *x = randn(tp, 2, xs, g), *dy = randn(tp, 2, gs, g);
            char what[64];
            snprintf(what, sizeof what, "%s, %lld rows", tg_numerics_name(nms[k]), (long long)rows[r]);
            tg_tensor *y[2] = {tg_linear(tp, x, w, NULL), tg_linear(tp, x, wf, NULL)};
            /* dy @ W, as a Linear's backward reads it: W's columns in blocks */
            tg_tensor *d[2] = {tg_matmul(tp, dy, w), tg_matmul(tp, dy, wf)};
            if (nms[k] == TG_NUMERICS_FAST && rows[r] <= 16) { /* the row kernel, then W's blocks */
                tu_assert_close(y[0], y[1], 1e-5, 1e-4, what);
                assert_same_bits(d[0], d[1], what);
            } else if (nms[k] == TG_NUMERICS_EXACT || rows[r] < 16) { /* one call, or a dot product per element */
                assert_same_bits(y[0], y[1], what);
                assert_same_bits(d[0], d[1], what);
            } else { /* sgemm's edge blocks at other columns: float32 rounding apart */
                tu_assert_close(y[0], y[1], 1e-5, 1e-4, what);
                tu_assert_close(d[0], d[1], 1e-5, 1e-4, what);
            }
        }
    tg_numerics_bf16_set_emulated(false);
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* FAST products of up to sixteen rows read a bf16 weight in place (the
 * row kernels of emulated BF16, the activations not rounded): each element
 * is the float32 product of the widened weight (EXACT's, on sgemm) to
 * within 1e-5 of its dot product's magnitude (sum_k |x_ik w_jk| + |b_j|),
 * for 1, 3 and 16 rows, K = 91 (two 32-wide steps, a 16-wide one and a
 * tail of 11), rows of x strided (a narrowed x) and transposed (x^T's
 * view), with and without a bias (beta 1). They are not sgemm's bits (the
 * weight is not widened for them) and keep no copy. */
static void check_fast_rows(tg_tape *tp, tg_tensor *x, tg_tensor *w, tg_tensor *wf, tg_tensor *b, const char *what,
                            int *differ)
{
    tg_tape_set_numerics(tp, TG_NUMERICS_FAST);
    tg_tensor *y = tg_linear(tp, x, w, b);
    tg_tape_set_numerics(tp, TG_NUMERICS_EXACT);
    tg_tensor *want = tg_linear(tp, x, wf, b);
    tu_assert_ok(y);
    tu_assert_ok(want);
    int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double mag = b ? fabs(tg_item_at(b, j)) : 0;
            for (int64_t k = 0; k < K; k++) mag += fabs(tg_get(x, (int64_t[]){i, k}) * tg_get(wf, (int64_t[]){j, k}));
            double got = tg_get(y, (int64_t[]){i, j}), ref = tg_get(want, (int64_t[]){i, j});
            if (fabs(got - ref) > 1e-5 * mag)
                fail_msg("%s: (%lld, %lld): %.9g, float32's product %.9g (terms' magnitude %.3g)", what, (long long)i,
                         (long long)j, got, ref, mag);
            *differ += (float)got != (float)ref;
        }
}

static void test_fast_rows(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(31);
    enum { N = 50, K = 91 };
    int64_t ws[2] = {N, K}, bs[1] = {N};
    tg_tensor *w = tg_to_dtype(mt, randn(mt, 2, ws, g), TG_BF16), *wf = widened_param(mt, w), *b = randn(mt, 1, bs, g);
    int64_t rows[3] = {1, 3, 16};
    size_t kept = tg_numerics_copy_bytes();
    int differ = 0;
    for (int r = 0; r < 3; r++) {
        int64_t M = rows[r];
        char what[96];
        tg_tensor *x = randn(tp, 2, (int64_t[]){M, K}, g);
        tg_tensor *wide = randn(tp, 2, (int64_t[]){M, K + 7}, g), *xs = tg_narrow(tp, wide, 1, 3, K);
        tg_tensor *xt = tg_t(tp, randn(tp, 2, (int64_t[]){K, M}, g));
        tu_assert_ok(xs);
        tu_assert_ok(xt);
        assert_int_equal(xs->stride[0], K + 7); /* what the product is given (tg_linear folds it as it is) */
        snprintf(what, sizeof what, "fast, %lld rows", (long long)M);
        check_fast_rows(tp, x, w, wf, NULL, what, &differ);
        snprintf(what, sizeof what, "fast, %lld rows, bias", (long long)M);
        check_fast_rows(tp, x, w, wf, b, what, &differ);
        snprintf(what, sizeof what, "fast, %lld strided rows, bias", (long long)M);
        check_fast_rows(tp, xs, w, wf, b, what, &differ);
        snprintf(what, sizeof what, "fast, %lld transposed rows", (long long)M);
        check_fast_rows(tp, xt, w, wf, NULL, what, &differ);
        tg_tape_reset(tp);
    }
    assert_true(differ > 0); /* read on the row kernel, not widened for sgemm */
    assert_int_equal(tg_numerics_copy_bytes(), kept);
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* EXACT reads a bf16 weight through a float32 copy kept with it: the
 * product has the bits of a float32 tensor holding the widened values
 * (tg_to_dtype), for a row (gemv) and six (sgemm); the second product
 * reuses the copy (tg_numerics_copy_bytes grows once, by N K floats); W^T
 * read as a view is a second copy; a write to the weight (tg_copy_,
 * tg_fill_: its version goes up) makes the next product follow the new
 * values in the same memory; the weight's tape frees the copies;
 * tg_module_prepare_numerics makes a Linear's copy ahead under EXACT. */
static void test_exact_kept_copy(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(37);
    enum { N = 40, K = 91 };
    int64_t ws[2] = {N, K};
    tg_tensor *w = tg_to_dtype(mt, randn(mt, 2, ws, g), TG_BF16);
    tg_tensor *x1 = randn(tp, 2, (int64_t[]){1, K}, g), *x6 = randn(tp, 2, (int64_t[]){6, K}, g);
    size_t kept = tg_numerics_copy_bytes(), one = sizeof(float) * N * K;
    tg_tensor *first = NULL;
    for (int k = 0; k < 2; k++) {
        tg_tensor *wf = tg_to_dtype(tp, w, TG_F32);
        assert_same_bits(tg_linear(tp, x1, w, NULL), tg_linear(tp, x1, wf, NULL), "exact, 1 row");
        tg_tensor *y6 = tg_linear(tp, x6, w, NULL);
        assert_same_bits(y6, tg_linear(tp, x6, wf, NULL), "exact, 6 rows");
        if (!first) first = y6;
        assert_int_equal(tg_numerics_copy_bytes(), kept + one); /* made once */
    }
    for (int k = 0; k < 2; k++) { /* x W^T as matmul(x, t(W)): another view, another copy */
        tg_tensor *wf = tg_to_dtype(tp, w, TG_F32);
        assert_same_bits(tg_matmul(tp, x6, tg_t(tp, w)), tg_matmul(tp, x6, tg_t(tp, wf)), "exact, matmul W^T");
        assert_int_equal(tg_numerics_copy_bytes(), kept + 2 * one);
    }
    /* a write: the copy is remade for the new version, in place */
    int64_t v = tg_tensor_version(w);
    assert_int_equal(tg_copy_(w, randn(tp, 2, ws, g)), TG_OK);
    assert_true(tg_tensor_version(w) > v);
    tg_tensor *y6 = tg_linear(tp, x6, w, NULL);
    assert_same_bits(y6, tg_linear(tp, x6, tg_to_dtype(tp, w, TG_F32), NULL), "exact, after tg_copy_");
    assert_true(tg_item_at(first, 0) != tg_item_at(y6, 0)); /* not the old copy's product */
    assert_int_equal(tg_fill_(w, 0.375), TG_OK);
    assert_same_bits(tg_matmul(tp, x1, tg_t(tp, w)), tg_matmul(tp, x1, tg_t(tp, tg_to_dtype(tp, w, TG_F32))),
                     "exact, after tg_fill_");
    assert_int_equal(tg_numerics_copy_bytes(), kept + 2 * one);
    tg_tape_free(mt); /* the weight's tape: its copies go with it */
    assert_int_equal(tg_numerics_copy_bytes(), kept);
    /* a bf16 Linear's copy made ahead (tg_module_prepare_numerics, as
     * generate does before its timed span): under EXACT, not under FAST;
     * its product then makes none */
    mt = tg_tape_new();
    tg_module *lin = tg_linear_new(mt, K, N, false);
    tu_assert_ok(lin);
    assert_int_equal(tg_module_requires_grad_(lin, false), TG_OK);
    assert_int_equal(tg_module_to_dtype(mt, lin, TG_BF16), TG_OK);
    assert_int_equal(tg_module_prepare_numerics(lin, TG_NUMERICS_FAST), TG_OK);
    assert_int_equal(tg_numerics_copy_bytes(), kept);
    assert_int_equal(tg_module_prepare_numerics(lin, TG_NUMERICS_EXACT), TG_OK);
    assert_int_equal(tg_numerics_copy_bytes(), kept + one);
    tg_tensor *lw = tg_module_get_parameter(lin, "weight");
    assert_same_bits(tg_module_forward(tp, lin, x6), tg_linear(tp, x6, tg_to_dtype(tp, lw, TG_F32), NULL),
                     "exact, prepared Linear");
    assert_int_equal(tg_numerics_copy_bytes(), kept + one);
    tg_tape_free(mt);
    assert_int_equal(tg_numerics_copy_bytes(), kept);
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* dx through a frozen bf16 Linear (and matmul) equals dx through its
 * widened weight, and the weight gets no gradient. Under FAST the Linear's
 * fourteen rows (and the matmul's dx = dy W^T) run on the row kernel
 * against the bf16 weight, on sgemm against the float32 one: float32
 * rounding apart. */
static void check_backward(tg_numerics nm)
{
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_tape_set_numerics(tp, nm);
    tg_generator *g = tg_generator_new(9);
    int64_t ws[2] = {24, 40}, xs[3] = {2, 7, 40};
    tg_tensor *w = tg_to_dtype(mt, randn(mt, 2, ws, g), TG_BF16), *wf = widened_param(mt, w);
    /* under BF16 a few rows against a parameter run on the row kernel, as against a bf16 matrix */
    tg_tensor *wt = tg_contiguous(mt, tg_transpose(mt, w, 0, 1)), *wtf = widened_param(mt, wt);
    tg_tensor *x0 = randn(mt, 3, xs, g);
    tg_tensor *grads[4];
    for (int k = 0; k < 4; k++) {
        tg_tensor *x = tg_clone(mt, x0);
        assert_int_equal(tg_requires_grad_(x, true), TG_OK);
        tg_tensor *y = k == 0 ? tg_linear(tp, x, w, NULL)
                     : k == 1 ? tg_linear(tp, x, wf, NULL)
                     : k == 2 ? tg_matmul(tp, x, wt)
                              : tg_matmul(tp, x, wtf);
        tg_tensor *loss = tg_sum(tp, tg_mul(tp, y, y));
        tu_assert_ok(loss);
        assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
        grads[k] = tg_clone(mt, x->grad);
        tu_assert_ok(grads[k]);
    }
    assert_null(w->grad);
    assert_null(wt->grad);
    if (nm == TG_NUMERICS_FAST) {
        tu_assert_close(grads[0], grads[1], 1e-5, 1e-4, "dx through linear");
        tu_assert_close(grads[2], grads[3], 1e-5, 1e-4, "dx through matmul");
    } else {
        assert_same_bits(grads[0], grads[1], "dx through linear");
        assert_same_bits(grads[2], grads[3], "dx through matmul");
    }
    tg_generator_free(g);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_backward(void **state)
{
    (void)state;
    check_backward(TG_NUMERICS_EXACT);
    check_backward(TG_NUMERICS_FAST);
    tg_numerics_bf16_set_emulated(true);
    check_backward(TG_NUMERICS_BF16);
    tg_numerics_bf16_set_emulated(false);
}

/* ---- modules ----------------------------------------------------------------------------------- */

/* A Linear(40, 24) with bias drawn from seed, frozen, in bf16 or (its
 * values widened) in float32. */
static tg_module *frozen_linear(tg_tape *tp, bool bf16)
{
    tg_manual_seed(21);
    tg_module *m = tg_linear_new(tp, 40, 24, true);
    tu_assert_ok(m);
    assert_int_equal(tg_module_requires_grad_(m, false), TG_OK);
    assert_int_equal(tg_module_to_dtype(tp, m, TG_BF16), TG_OK);
    if (!bf16) assert_int_equal(tg_module_to_dtype(tp, m, TG_F32), TG_OK);
    return m;
}

static void test_module_to_dtype(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(21);
    tg_module *m = tg_linear_new(tp, 40, 24, true);
    tg_tensor *w = tg_module_get_parameter(m, "weight");
    tg_tensor *w0 = tg_clone(tp, w);
    /* trainable parameters keep float32: refused, nothing converted */
    tu_assert_status_error(tg_module_to_dtype(tp, m, TG_BF16), "to_dtype", "'weight' requires grad");
    assert_int_equal(w->dtype, TG_F32);
    assert_int_equal(tg_module_requires_grad_(m, false), TG_OK);
    assert_int_equal(tg_module_to_dtype(tp, m, TG_BF16), TG_OK);
    assert_int_equal(w->dtype, TG_BF16); /* the same tensor, its storage in bf16 */
    assert_int_equal(tg_module_get_parameter(m, "bias")->dtype, TG_F32); /* a vector: float32 arithmetic reads it */
    assert_same_bits(tg_to_dtype(tp, w, TG_F32), tg_to_dtype(tp, tg_to_dtype(tp, w0, TG_BF16), TG_F32), "rounded");
    tu_assert_status_error(tg_module_requires_grad_(m, true), "bfloat16");
    /* forward and the widened module's, bit for bit */
    tg_module *mf = frozen_linear(tp, false);
    int64_t xs[2] = {6, 40};
    tg_tensor *x = tg_randn(tp, TG_F32, 2, xs, NULL);
    assert_same_bits(tg_module_forward(tp, m, x), tg_module_forward(tp, mf, x), "Linear module");
    /* the state_dict: BF16 entries, loaded into a float32 module widened */
    char out[] = "/tmp/tg_bf16_module_XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tg_module_save(m, out), TG_OK);
    tg_safetensors st;
    assert_int_equal(tg_safetensors_load_ex(tp, out, &(tg_safetensors_options){.keep_bf16 = true}, &st), TG_OK);
    assert_int_equal(tg_safetensors_get(&st, "weight")->dtype, TG_BF16);
    tg_module *back = tg_linear_new(tp, 40, 24, true);
    assert_int_equal(tg_module_load(back, out), TG_OK);
    assert_same_bits(tg_module_get_parameter(back, "weight"), tg_module_get_parameter(mf, "weight"), "loaded");
    /* and a float32 file into the bf16 module: rounded */
    assert_int_equal(tg_module_save(frozen_linear(tp, false), out), TG_OK);
    assert_int_equal(tg_module_load(m, out), TG_OK);
    assert_int_equal(w->dtype, TG_BF16);
    unlink(out);
    tg_tape_free(tp);
}

/* LoRA over a frozen bf16 Linear: the adapters float32, forward and their
 * gradients those of LoRA over the widened base; AdamW steps the adapters. */
static void test_lora(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    int64_t xs[3] = {2, 5, 40};
    tg_tensor *x = tg_randn(mt, TG_F32, 3, xs, NULL);
    tg_tensor *out[2], *ga[2], *gb[2];
    for (int k = 0; k < 2; k++) {
        tg_module *lin = frozen_linear(mt, k == 0);
        tg_manual_seed(4);
        tg_module *m = tg_linear_with_lora_new(mt, lin, 4, 8.0);
        tu_assert_ok(m);
        tg_tensor *a = tg_module_get_parameter(m, "lora.A"), *b = tg_module_get_parameter(m, "lora.B");
        assert_int_equal(a->dtype, TG_F32);
        assert_int_equal(tg_normal_(b, 0.0, 0.1, NULL), TG_OK); /* B is zeros at first */
        out[k] = tg_module_forward(tp, m, x);
        tu_assert_ok(out[k]);
        assert_int_equal(tg_backward(tg_sum(tp, tg_mul(tp, out[k], out[k])), NULL, false), TG_OK);
        ga[k] = a->grad, gb[k] = b->grad;
        tu_assert_ok(ga[k]);
        assert_null(tg_module_get_parameter(m, "linear.weight")->grad);
        if (k == 0) {
            tg_tensor *w = tg_module_get_parameter(m, "linear.weight"), *w0 = tg_clone(mt, w), *b0 = tg_clone(mt, b);
            tg_optimizer *opt = tg_adamw_new(mt, m, tg_adamw_defaults());
            tu_assert_ok(opt);
            assert_int_equal(tg_optimizer_step(opt), TG_OK);
            assert_int_equal(memcmp(tg_data_ptr(w), tg_data_ptr(w0), 2 * 40 * 24), 0); /* the base untouched */
            assert_true(((const float *)tg_data_ptr(b))[0] != ((const float *)tg_data_ptr(b0))[0]);
        }
    }
    assert_same_bits(out[0], out[1], "LoRA forward");
    /* a checkpoint of the LoRA run: the bf16 base saved as BF16 and loaded into bf16 */
    tg_module *m = tg_linear_with_lora_new(mt, frozen_linear(mt, true), 4, 8.0);
    tg_optimizer *opt = tg_adamw_new(mt, m, tg_adamw_defaults());
    tg_tensor *b = tg_module_get_parameter(m, "lora.B"), *w = tg_module_get_parameter(m, "linear.weight");
    assert_int_equal(tg_normal_(b, 0.0, 0.1, NULL), TG_OK);
    tg_tensor *b0 = tg_clone(mt, b), *w0 = tg_clone(mt, w);
    char path[] = "/tmp/tg_bf16_ckpt_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tg_checkpoint ck = {.model = m, .optimizer = opt};
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_OK);
    assert_int_equal(tg_init_zeros_(b), TG_OK);
    assert_int_equal(tg_checkpoint_load(NULL, &ck, path), TG_OK);
    assert_same_bits(b, b0, "LoRA B restored");
    assert_int_equal(w->dtype, TG_BF16);
    assert_int_equal(memcmp(tg_data_ptr(w), tg_data_ptr(w0), 2 * 40 * 24), 0);
    unlink(path);
    assert_same_bits(ga[0], ga[1], "LoRA dA");
    assert_same_bits(gb[0], gb[1], "LoRA dB");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- a decoder built and loaded with bf16 weights --------------------------------------------------- */

static tg_decoder_config tiny_qwen3(void)
{
    return (tg_decoder_config){.vocab_size = 64, .context_length = 32, .emb_dim = 32, .n_heads = 4, .n_layers = 2,
                               .family = TG_GPT_FAMILY_QWEN3, .hidden_dim = 48, .head_dim = 8, .n_kv_groups = 2,
                               .qk_norm = true, .rope_base = 10000.0};
}

/* Logits of m on fixed ids under nm (eval, no recording). */
static tg_tensor *logits_of(tg_tape *tp, tg_module *m, tg_numerics nm)
{
    int64_t ids[10] = {1, 5, 9, 63, 0, 2, 33, 7, 7, 40}, shape[2] = {1, 10};
    tg_tape_set_numerics(tp, nm);
    tg_module_train(m, false);
    bool prev = tg_set_grad_enabled(false);
    tg_tensor *y = tg_module_forward(tp, m, tg_from_data(tp, TG_I64, 2, shape, ids));
    tg_set_grad_enabled(prev);
    tu_assert_ok(y);
    return y;
}

/* Every parameter of a (bf16 weights) equal to b's rounded, b float32. */
static void assert_rounded_params(tg_tape *tp, const tg_module *a, const tg_module *b, int *n_bf16)
{
    tg_named_list pa, pb;
    assert_int_equal(tg_module_named_parameters(tp, a, &pa), TG_OK);
    assert_int_equal(tg_module_named_parameters(tp, b, &pb), TG_OK);
    assert_int_equal(pa.n, pb.n);
    *n_bf16 = 0;
    for (int i = 0; i < pa.n; i++) {
        assert_string_equal(pa.names[i], pb.names[i]);
        const tg_tensor *x = pa.tensors[i];
        if (x->dtype == TG_BF16) ++*n_bf16, assert_false(x->requires_grad);
        tg_tensor *want = tg_to_dtype(tp, x->dtype == TG_BF16 ? tg_to_dtype(tp, pb.tensors[i], TG_BF16) : pb.tensors[i],
                                      TG_F32);
        assert_same_bits(tg_to_dtype(tp, x, TG_F32), want, pa.names[i]);
    }
}

static void test_decoder_weights(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_decoder_config c32 = tiny_qwen3(), c16 = c32;
    c16.weights = TG_BF16;
    tg_manual_seed(7);
    tg_module *m32 = tg_decoder_new(mt, &c32);
    tg_manual_seed(7);
    tg_module *m16 = tg_decoder_new(mt, &c16);
    tu_assert_ok(m32);
    tu_assert_ok(m16);
    /* drawn as the float32 model draws, then rounded; the norms float32 */
    int n_bf16;
    assert_rounded_params(tp, m16, m32, &n_bf16);
    assert_int_equal(n_bf16, 1 + 2 * 7 + 1); /* tok_emb, 7 Linear per block, out_head */
    /* the float32 model with its weights rounded: the same logits, bit for bit, under EXACT and FAST */
    assert_int_equal(tg_module_requires_grad_(m32, false), TG_OK);
    assert_int_equal(tg_module_to_dtype(mt, m32, TG_BF16), TG_OK);
    assert_int_equal(tg_module_to_dtype(mt, m32, TG_F32), TG_OK);
    assert_same_bits(logits_of(tp, m16, TG_NUMERICS_EXACT), logits_of(tp, m32, TG_NUMERICS_EXACT), "EXACT logits");
    assert_same_bits(logits_of(tp, m16, TG_NUMERICS_FAST), logits_of(tp, m32, TG_NUMERICS_FAST), "FAST logits");
    /* greedy generation with the KV cache: the same ids */
    int64_t prompt[3] = {4, 8, 15}, out16[12], out32[12], n16, n32;
    tg_generate_options go = {.max_new_tokens = 8, .eos_id = -1};
    assert_int_equal(tg_gpt_generate(m16, prompt, 3, &go, out16, &n16), TG_OK);
    assert_int_equal(tg_gpt_generate(m32, prompt, 3, &go, out32, &n32), TG_OK);
    assert_int_equal(n16, n32);
    assert_memory_equal(out16, out32, sizeof(int64_t) * (size_t)n16);
    /* LoRA over the bf16 base: the adapters' gradients are the widened model's */
    tg_tensor *ga[2];
    tg_module *ms[2] = {m16, m32};
    for (int k = 0; k < 2; k++) {
        tg_manual_seed(3);
        assert_int_equal(tg_lora_replace_linear(mt, ms[k], 2, 4.0), TG_OK);
        tg_tensor *b = tg_module_get_parameter(ms[k], "trf_blocks.1.ff.fc3.lora.B");
        tu_assert_ok(b);
        tg_generator *gb = tg_generator_new(1);
        assert_int_equal(tg_normal_(b, 0.0, 0.1, gb), TG_OK);
        tg_generator_free(gb);
        tg_tape_reset(tp);
        tg_tape_set_numerics(tp, TG_NUMERICS_EXACT);
        tg_module_train(ms[k], true);
        int64_t ids[6] = {1, 2, 3, 4, 5, 6}, tg[6] = {2, 3, 4, 5, 6, 7}, sh[2] = {1, 6}, n6 = 6;
        tg_tensor *y = tg_module_forward(tp, ms[k], tg_from_data(tp, TG_I64, 2, sh, ids));
        tg_tensor *loss = tg_cross_entropy(tp, tg_view(tp, y, 2, (int64_t[]){6, 64}), tg_from_data(tp, TG_I64, 1, &n6, tg),
                                           TG_REDUCE_MEAN);
        tu_assert_ok(loss);
        assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
        ga[k] = tg_clone(mt, tg_module_get_parameter(ms[k], "trf_blocks.0.att.W_query.lora.A")->grad);
    }
    assert_same_bits(ga[0], ga[1], "LoRA dA over a bf16 base");
    /* GPT-2 has no bf16 build: a clear error */
    tg_decoder_config g = {.vocab_size = 64, .context_length = 16, .emb_dim = 32, .n_heads = 4, .n_layers = 1,
                           .weights = TG_BF16};
    tu_assert_status_error(tg_decoder_config_check(&g), "bfloat16 weights", "built for RoPE models");
    g.weights = TG_I64;
    tu_assert_status_error(tg_decoder_config_check(&g), "weights must be float32", "bfloat16", "int64");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* A BF16 Hugging Face folder into a bf16 model: the file's bits kept, and
 * the logits of the same folder loaded into float32 weights. */
static void test_decoder_load_hf(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    char dir[4096];
    tu_ref_path(dir, sizeof dir, "hf_qwen3_tiny");
    tg_decoder_config c32, c16;
    assert_int_equal(tg_decoder_config_from_hf(dir, &c32), TG_OK);
    assert_int_equal(tg_decoder_hf_weights(dir, &c16.weights), TG_OK);
    assert_int_equal(c16.weights, TG_BF16); /* its shards store BF16 */
    tg_dtype wdt = c16.weights;
    c16 = c32;
    c16.weights = wdt;
    tg_module *m32 = tg_decoder_new(mt, &c32), *m16 = tg_decoder_new(mt, &c16);
    tu_assert_ok(m32);
    tu_assert_ok(m16);
    assert_int_equal(tg_decoder_load_hf(m32, dir), TG_OK);
    assert_int_equal(tg_decoder_load_hf(m16, dir), TG_OK);
    int n_bf16;
    assert_rounded_params(tp, m16, m32, &n_bf16); /* rounding a widened bf16 is the identity */
    assert_true(n_bf16 > 0);
    assert_same_bits(logits_of(tp, m16, TG_NUMERICS_EXACT), logits_of(tp, m32, TG_NUMERICS_EXACT), "loaded, EXACT");
    tu_assert_status_error(tg_decoder_hf_weights("/nonexistent-folder", &wdt), "/nonexistent-folder");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* A GPT-2 converted to bf16 weights (frozen): the logits of its widened
 * copy, through the fused FeedForward too (it runs the composed Linear
 * layers on bf16 weights). Bit for bit under EXACT; under FAST the ten rows
 * read the bf16 weights on the row kernel: float32 rounding apart. */
static void test_gpt2_converted(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_decoder_config c = {.vocab_size = 64, .context_length = 16, .emb_dim = 32, .n_heads = 4, .n_layers = 2,
                           .qkv_bias = true};
    tg_module *m[2];
    for (int k = 0; k < 2; k++) {
        tg_manual_seed(5);
        m[k] = tg_decoder_new(mt, &c);
        tu_assert_ok(m[k]);
        assert_int_equal(tg_module_requires_grad_(m[k], false), TG_OK);
        assert_int_equal(tg_module_to_dtype(mt, m[k], TG_BF16), TG_OK);
    }
    assert_int_equal(tg_module_to_dtype(mt, m[1], TG_F32), TG_OK);
    assert_int_equal(tg_module_get_parameter(m[0], "trf_blocks.0.ff.layers.0.weight")->dtype, TG_BF16);
    assert_same_bits(logits_of(tp, m[0], TG_NUMERICS_EXACT), logits_of(tp, m[1], TG_NUMERICS_EXACT), "GPT-2 EXACT");
    tg_module_set_fused(m[0], false);
    tg_module_set_fused(m[1], false);
    tu_assert_close(logits_of(tp, m[0], TG_NUMERICS_FAST), logits_of(tp, m[1], TG_NUMERICS_FAST), 1e-4, 1e-4,
                    "GPT-2 FAST");
    tg_module_set_fused(m[0], true);
    tg_module_set_fused(m[1], true);
    tu_assert_close(logits_of(tp, m[0], TG_NUMERICS_FAST), logits_of(tp, m[1], TG_NUMERICS_FAST), 1e-4, 1e-4,
                    "GPT-2 FAST fused");
    tg_tape_free(tp);
    tg_tape_free(mt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversion), cmocka_unit_test(test_elements_and_creation),
        cmocka_unit_test(test_views),      cmocka_unit_test(test_errors),
        cmocka_unit_test(test_random_fills),
        cmocka_unit_test(test_safetensors), cmocka_unit_test(test_products_exact),
        cmocka_unit_test(test_products_fast), cmocka_unit_test(test_products_bf16),
        cmocka_unit_test(test_products_blocked), cmocka_unit_test(test_fast_rows),
        cmocka_unit_test(test_exact_kept_copy),
        cmocka_unit_test(test_backward),   cmocka_unit_test(test_module_to_dtype),
        cmocka_unit_test(test_lora),       cmocka_unit_test(test_decoder_weights),
        cmocka_unit_test(test_decoder_load_hf), cmocka_unit_test(test_gpt2_converted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
