/* Generators against torch 1.13: seed figures from the spec, exact draw
 * sequences from tests/ref/rng.json, and argument errors. */
#include "testutil.h"

#include <math.h>
#include <string.h>

/* The spec prints 8 decimals, so allow half a unit in the last of them. */
static void assert_f32_values(const tg_tensor *t, const double *want, int n)
{
    for (int i = 0; i < n; i++) {
        double got = tg_item_at(t, i);
        if (fabs(got - want[i]) > 5e-9) fail_msg("element %d: got %.9g, want %.8f", i, got, want[i]);
    }
}

static void test_spec_seed_figures(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s5[1] = {5}, s3[1] = {3}, s23[2] = {2, 3};

    tg_manual_seed(123);
    tg_tensor *a = tg_rand(tp, TG_F32, 1, s5, NULL);
    tu_assert_ok(a);
    const double wa[5] = {0.29611194, 0.51656228, 0.25167072, 0.68855679, 0.07397246};
    assert_f32_values(a, wa, 5);

    tg_manual_seed(0);
    tg_tensor *b = tg_rand(tp, TG_F32, 1, s3, NULL);
    tu_assert_ok(b);
    const double wb[3] = {0.49625659, 0.76822180, 0.08847743};
    assert_f32_values(b, wb, 3);

    tg_manual_seed(123);
    tg_tensor *c = tg_rand(tp, TG_F64, 2, s23, NULL);
    tu_assert_ok(c);
    assert_true(tg_item_at(c, 0) == 0.368895870664273);
    assert_true(tg_item_at(c, 1) == 0.013365949855291825);
    assert_true(tg_item_at(c, 2) == 0.5917800383018739);

    /* nn.Linear(3, 2) after manual_seed(123): kaiming_uniform_(a=sqrt(5))
     * then the bias, both uniform(-1/sqrt(3), 1/sqrt(3)). */
    tg_manual_seed(123);
    int64_t ws[2] = {2, 3}, bs[1] = {2};
    tg_tensor *w = tg_empty(tp, TG_F32, 2, ws), *bias = tg_empty(tp, TG_F32, 1, bs);
    double bound = 1.0 / sqrt(3.0);
    assert_int_equal(tg_uniform_(w, -bound, bound, NULL), TG_OK);
    assert_int_equal(tg_uniform_(bias, -bound, bound, NULL), TG_OK);
    const double ww[6] = {-0.23542964, 0.01912448, -0.28674594, 0.21772662, -0.49193421, 0.42322308};
    const double wbias[2] = {-0.41964141, -0.45901766};
    assert_f32_values(w, ww, 6);
    assert_f32_values(bias, wbias, 2);
    tg_tape_free(tp);
}

static tg_dtype dtype_of(const char *name) { return strcmp(name, "float64") == 0 ? TG_F64 : TG_F32; }

static void test_reference_sequences(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("rng.json");
    json_t *seeds = json_object_get(ref, "seeds");
    assert_true(json_is_array(seeds) && json_array_size(seeds) == 6);
    tg_tape *tp = tg_tape_new();
    size_t si;
    json_t *entry;
    json_array_foreach(seeds, si, entry) {
        uint64_t seed = (uint64_t)json_integer_value(json_object_get(entry, "seed"));
        tg_generator *g = tg_generator_new(seed);
        assert_non_null(g);
        size_t di;
        json_t *d;
        json_array_foreach(json_object_get(entry, "draws"), di, d) {
            const char *op = json_string_value(json_object_get(d, "op"));
            tg_dtype dt = dtype_of(json_string_value(json_object_get(d, "dtype")));
            json_t *args = json_object_get(d, "args");
            int64_t n = json_integer_value(json_array_get(json_object_get(d, "shape"), 0));
            tg_tensor *got = tg_empty(tp, dt, 1, &n);
            tu_assert_ok(got);
            int st;
            if (strcmp(op, "rand") == 0)
                st = tg_uniform_(got, 0.0, 1.0, g);
            else if (strcmp(op, "uniform_") == 0)
                st = tg_uniform_(got, json_number_value(json_array_get(args, 0)),
                                 json_number_value(json_array_get(args, 1)), g);
            else
                st = tg_normal_(got, json_number_value(json_array_get(args, 0)),
                                json_number_value(json_array_get(args, 1)), g);
            assert_int_equal(st, TG_OK);
            tg_tensor *want = tu_tensor_from_json(tp, d, TG_DTYPE_COUNT);
            char what[96];
            snprintf(what, sizeof what, "seed %llu draw %zu (%s %s n=%lld)", (unsigned long long)seed, di, op,
                     tg_dtype_name(dt), (long long)n);
            tu_assert_close(got, want, 0.0, 0.0, what);
        }
        tg_generator_free(g);
        tg_tape_reset(tp);
    }

    json_t *def = json_object_get(ref, "default_generator");
    tg_manual_seed((uint64_t)json_integer_value(json_object_get(def, "seed")));
    int64_t shape[2] = {2, 3};
    tg_tensor *got = tg_rand(tp, TG_F64, 2, shape, NULL);
    tu_assert_ok(got);
    tu_assert_close(got, tu_tensor_from_json(tp, def, TG_DTYPE_COUNT), 0.0, 0.0, "default generator rand");
    tg_tape_free(tp);
    json_decref(ref);
}

static void test_raw_draws(void **state)
{
    (void)state;
    tg_generator *a = tg_generator_new(7), *b = tg_generator_new(((uint64_t)1 << 32) + 7);
    assert_non_null(a);
    assert_non_null(b);
    /* Only the low 32 bits of a seed reach the state, as in at::mt19937. */
    for (int i = 0; i < 1000; i++) assert_int_equal(tg_generator_random(a), tg_generator_random(b));

    /* random64 is (first << 32) | second. */
    tg_generator_seed(a, 5);
    tg_generator_seed(b, 5);
    for (int i = 0; i < 10; i++) {
        uint64_t hi = tg_generator_random(a), lo = tg_generator_random(a);
        assert_true(tg_generator_random64(b) == (hi << 32 | lo));
    }
    /* std::mt19937 with the default seed 5489: the 10000th output is 4123659995. */
    tg_generator_seed(a, 5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++) v = tg_generator_random(a);
    assert_int_equal(v, 4123659995u);
    tg_generator_free(a);
    tg_generator_free(b);
}

static void test_reseed_drops_cached_normal(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_generator *g = tg_generator_new(9);
    int64_t one[1] = {1};
    tg_tensor *x = tg_empty(tp, TG_F64, 1, one), *y = tg_empty(tp, TG_F64, 1, one);
    assert_int_equal(tg_normal_(x, 0, 1, g), TG_OK); /* leaves the sine value cached */
    tg_generator_seed(g, 9);
    assert_int_equal(tg_normal_(y, 0, 1, g), TG_OK);
    assert_true(tg_item(x) == tg_item(y));
    tg_generator_free(g);
    tg_tape_free(tp);
}

static void test_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t s23[2] = {2, 3};
    tg_tensor *x = tg_empty(tp, TG_F32, 2, s23);
    tg_tensor t = *x; /* a transposed view: not contiguous */
    t.shape[0] = 3;
    t.shape[1] = 2;
    t.stride[0] = 1;
    t.stride[1] = 3;
    tu_assert_status_error(tg_uniform_(&t, 0, 1, NULL), "uniform_", "contiguous");
    tu_assert_status_error(tg_normal_(&t, 0, 1, NULL), "normal_", "contiguous");
    tg_tensor *i = tg_empty(tp, TG_I64, 2, s23);
    tu_assert_status_error(tg_uniform_(i, 0, 1, NULL), "uniform_", "int64");
    tu_assert_status_error(tg_normal_(i, 0, 1, NULL), "normal_", "int64");
    tu_assert_status_error(tg_uniform_(NULL, 0, 1, NULL), "uniform_", "NULL");
    tu_assert_status_error(tg_uniform_(x, 1, 0, NULL), "uniform_", "from <= to");
    tu_assert_status_error(tg_uniform_(x, 0, NAN, NULL), "uniform_", "from <= to");
    tu_assert_status_error(tg_uniform_(x, -3e38, 3e38, NULL), "uniform_", "overflows float32");
    tu_assert_status_error(tg_normal_(x, 0, -1, NULL), "normal_", "std >= 0");
    tu_assert_null_error(tg_rand(tp, TG_BOOL, 2, s23, NULL), "rand", "bool");
    tu_assert_null_error(tg_randn(tp, TG_I64, 2, s23, NULL), "randn", "int64");
    int64_t bad[1] = {-1};
    tu_assert_null_error(tg_rand(tp, TG_F32, 1, bad, NULL), "negative");
    tg_tape_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_seed_figures),
        cmocka_unit_test(test_reference_sequences),
        cmocka_unit_test(test_raw_draws),
        cmocka_unit_test(test_reseed_drops_cached_normal),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
