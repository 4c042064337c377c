/* tg_format against the text torch 1.13 prints (tests/ref/print.json). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static void assert_text(const char *got, const char *want, const char *what)
{
    if (!got) fail_msg("%s: tg_format failed: %s", what, tg_last_error());
    if (strcmp(got, want) != 0) fail_msg("%s:\n--- got\n%s\n--- want\n%s", what, got, want);
}

static void test_reference_cases(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("print.json");
    json_t *cases = json_object_get(ref, "cases");
    assert_true(json_array_size(cases) >= 40);
    tg_tape *tp = tg_tape_new();
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        tg_tensor *x = tu_tensor_from_json(tp, c, TG_DTYPE_COUNT);
        tu_assert_ok(x);
        x->requires_grad = json_is_true(json_object_get(c, "requires_grad"));
        char *got = tg_format(x);
        assert_text(got, json_string_value(json_object_get(c, "text")), name);
        free(got);
        tg_tape_reset(tp);
    }
    tg_tape_free(tp);
    json_decref(ref);
}

static void test_strided_view(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    const float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    tg_tensor *x = tg_from_f32(tp, 2, shape, v);
    tu_assert_ok(x);
    tg_tensor t = *x; /* x.T */
    t.shape[0] = 3;
    t.shape[1] = 2;
    t.stride[0] = 1;
    t.stride[1] = 3;
    char *got = tg_format(&t);
    assert_text(got, "tensor([[1., 4.],\n        [2., 5.],\n        [3., 6.]])", "transposed view");
    free(got);
    tg_tape_free(tp);
}

static void test_grad_fn_suffix(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    const float a[2] = {1, 2}, b[2] = {2, 3};
    int64_t shape[1] = {2};
    tg_tensor *x = tg_from_f32(tp, 1, shape, a), *y = tg_from_f32(tp, 1, shape, b);
    x->requires_grad = true;
    tg_tensor *z = tg_mul(tp, x, y);
    tu_assert_ok(z);
    char *got = tg_format(z);
    assert_text(got, "tensor([2., 6.], grad_fn=<MulBackward0>)", "grad_fn");
    free(got);
    tg_tape_free(tp);
}

static void test_print_and_errors(void **state)
{
    (void)state;
    tu_assert_null_error(tg_format(NULL), "format", "NULL");
    tu_assert_status_error(tg_print(stdout, NULL), "format", "NULL");
    tg_tape *tp = tg_tape_new();
    tg_tensor *x = tg_scalar(tp, TG_F64, 0.5);
    tu_assert_status_error(tg_print(NULL, x), "print", "NULL file");
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(tg_print(f, x), TG_OK);
    rewind(f);
    char line[64] = {0};
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "tensor(0.5000, dtype=torch.float64)\n");
    fclose(f);
    tg_tape_free(tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_cases),
        cmocka_unit_test(test_strided_view),
        cmocka_unit_test(test_grad_fn_suffix),
        cmocka_unit_test(test_print_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
