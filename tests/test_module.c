/* The open module system, used as a user uses it (include/tapegrad/nn.h):
 *
 * (a) repr: PyTorch 1.13's print(model) text (tests/ref/repr.json, written by
 *     tools/reference/repr.py) for every built-in module and a nested tree of
 *     user modules built here with tg_module_new; snprintf semantics.
 * (b) registration: more than 4 parameters and more than 64 children, names,
 *     kinds, replacement, cycles, non-leaf and non-float parameters.
 * (c) look-ups by dotted name and their errors; children by index.
 * (d) weight tying and shared children: listed once by named_parameters,
 *     under every key by state_dict, updated once by SGD.
 * (e) buffers (persistent or not), n inputs of any dtype, containers,
 *     tree-wide settings, tg_module_call errors.
 * (f) dtype conversion in place: an optimizer built before keeps working.
 * (g) tg_gradcheck_module_call: passes on a user module, catches a module
 *     whose graph hides a dependence (and names it, with each checked
 *     tensor's error), refuses float32 parameters and dropout; the first form,
 *     tg_gradcheck_module, gives the same results.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define EXPECT_NULL(call, ...)                     \
    do {                                           \
        tg_clear_error();                          \
        tu_assert_null_error((call), __VA_ARGS__); \
    } while (0)
#define EXPECT_STATUS(call, ...)                     \
    do {                                             \
        tg_clear_error();                            \
        tu_assert_status_error((call), __VA_ARGS__); \
    } while (0)

static void check_ok(int st, const char *what)
{
    if (st != TG_OK) fail_msg("%s: status %d: %s", what, st, tg_last_error());
}

/* ---- user module types used below ----------------------------------------------------- */

/* LayerNorm as the book writes it: parameters only, no extra_repr. */
static tg_tensor *ln_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("LayerNorm: expected 1 input, got %d", n);
    int last = -1;
    tg_tensor *x = in[0];
    tg_tensor *xc = tg_sub(tp, x, tg_mean_dims(tp, x, 1, &last, true));
    tg_tensor *var = tg_mean_dims(tp, tg_pow_scalar(tp, xc, 2), 1, &last, true);
    tg_tensor *norm = tg_div(tp, xc, tg_sqrt(tp, tg_add_scalar(tp, var, 1e-5)));
    return tg_add(tp, tg_mul(tp, tg_module_get_parameter(self, "scale"), norm),
                  tg_module_get_parameter(self, "shift"));
}
static const tg_module_type ln_type = {.name = "LayerNorm", .forward = ln_forward};

static tg_module *ln_new(tg_tape *tp, int64_t dim)
{
    tg_module *m = tg_module_new(tp, &ln_type, 0);
    tg_tensor *scale = tg_ones(tp, TG_F32, 1, &dim), *shift = tg_zeros(tp, TG_F32, 1, &dim);
    if (!m || tg_module_register_parameter(m, "scale", scale) || tg_module_register_parameter(m, "shift", shift))
        return NULL;
    return m;
}

static tg_tensor *gelu_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    (void)self;
    return n == 1 ? tg_gelu(tp, in[0]) : tg_error("GELU: expected 1 input");
}
static const tg_module_type gelu_type = {.name = "GELU", .forward = gelu_forward};

/* A module with no forward of its own and an optional extra_repr. */
static int text_extra_repr(const tg_module *self, char *buf, size_t size)
{
    return snprintf(buf, size, "%s", *(const char *const *)tg_module_state_const(self));
}
static const tg_module_type one_line_type = {.name = "OneLine", .extra_repr = text_extra_repr};
static const tg_module_type one_line_child_type = {.name = "OneLineWithChild", .extra_repr = text_extra_repr};
static const tg_module_type two_lines_type = {.name = "TwoLines", .extra_repr = text_extra_repr};
/* x = drop_shortcut(att(norm1(x))) + x; x = drop_shortcut(ff(norm2(x))) + x */
static tg_tensor *block_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("TransformerBlock: expected 1 input");
    tg_module *drop = tg_module_get_submodule(self, "drop_shortcut");
    tg_tensor *x = in[0];
    tg_tensor *h = tg_module_forward(tp, tg_module_get_submodule(self, "norm1"), x);
    x = tg_add(tp, tg_module_forward(tp, drop, tg_module_forward(tp, tg_module_get_submodule(self, "att"), h)), x);
    h = tg_module_forward(tp, tg_module_get_submodule(self, "norm2"), x);
    return tg_add(tp, tg_module_forward(tp, drop, tg_module_forward(tp, tg_module_get_submodule(self, "ff"), h)), x);
}
static const tg_module_type block_type = {.name = "TransformerBlock", .forward = block_forward};
static const tg_module_type tiny_type = {.name = "TinyGPT"};

static tg_module *text_module(tg_tape *tp, const tg_module_type *type, const char *text)
{
    tg_module *m = tg_module_new(tp, type, sizeof(const char *));
    if (m) *(const char **)tg_module_state(m) = text;
    return m;
}

static tg_module *block_new(tg_tape *tp)
{
    tg_module *m = tg_module_new(tp, &block_type, 0);
    tg_module *ff[3] = {tg_linear_new(tp, 4, 16, true), tg_module_new(tp, &gelu_type, 0), tg_linear_new(tp, 16, 4, true)};
    const char *names[5] = {"att", "ff", "norm1", "norm2", "drop_shortcut"};
    tg_module *kids[5] = {tg_mha_new(tp, 4, 4, 8, 0.1, 2, false), tg_sequential_new(tp, 3, ff), ln_new(tp, 4),
                          ln_new(tp, 4), tg_dropout_new(tp, 0.1)};
    for (int i = 0; m && i < 5; i++)
        if (tg_module_add_module(m, names[i], kids[i]) != TG_OK) return NULL;
    return m;
}

/* tools/reference/repr.py's TinyGPT */
static tg_module *tiny_gpt_new(tg_tape *tp)
{
    tg_module *m = tg_module_new(tp, &tiny_type, 0);
    tg_module *blocks[2] = {block_new(tp), block_new(tp)};
    tg_module *heads[2] = {tg_linear_new(tp, 4, 5, true), tg_linear_new(tp, 4, 5, false)};
    tg_module *olc = text_module(tp, &one_line_child_type, "k=3");
    tg_module *two = text_module(tp, &two_lines_type, "alpha=1\nbeta=2");
    if (!olc || !two || tg_module_add_module(olc, "inner", text_module(tp, &one_line_type, "k=3")) ||
        tg_module_add_module(two, "drop", tg_dropout_new(tp, 0.25)))
        return NULL;
    tg_module *misc[5] = {text_module(tp, &one_line_type, "k=3"), olc, two, tg_sequential_new(tp, 0, NULL),
                          tg_module_list_new(tp, 0, NULL)};
    if (!m || tg_module_add_module(m, "blocks", tg_sequential_new(tp, 2, blocks)) ||
        tg_module_add_module(m, "heads", tg_module_list_new(tp, 2, heads)) ||
        tg_module_add_module(m, "misc", tg_module_list_new(tp, 5, misc)) ||
        tg_module_add_module(m, "out_head", tg_linear_new(tp, 4, 7, false)))
        return NULL;
    return m;
}

static tg_module *repr_case(tg_tape *tp, const char *name)
{
    tg_module *seq[3] = {tg_linear_new(tp, 3, 4, true), tg_dropout_new(tp, 0.2), tg_linear_new(tp, 4, 2, true)};
    if (!strcmp(name, "linear")) return tg_linear_new(tp, 3, 2, true);
    if (!strcmp(name, "linear_nobias")) return tg_linear_new(tp, 3, 2, false);
    if (!strncmp(name, "dropout_", 8)) return tg_dropout_new(tp, strtod(name + 8, NULL));
    if (!strcmp(name, "sa_v1")) return tg_self_attention_v1_new(tp, 3, 2);
    if (!strcmp(name, "sa_v2")) return tg_self_attention_v2_new(tp, 3, 2, true);
    if (!strcmp(name, "causal")) return tg_causal_attention_new(tp, 3, 2, 6, 0.5, false);
    if (!strcmp(name, "mha_wrapper")) return tg_mha_wrapper_new(tp, 3, 2, 6, 0.0, 2, false);
    if (!strcmp(name, "mha")) return tg_mha_new(tp, 3, 4, 6, 0.1, 2, true);
    if (!strcmp(name, "sequential_empty")) return tg_sequential_new(tp, 0, NULL);
    if (!strcmp(name, "module_list_empty")) return tg_module_list_new(tp, 0, NULL);
    if (!strcmp(name, "sequential")) return tg_sequential_new(tp, 3, seq);
    if (!strcmp(name, "tiny_gpt")) return tiny_gpt_new(tp);
    fail_msg("repr.json: unknown case %s", name);
    return NULL;
}

/* ---- (a) repr ---------------------------------------------------------------------------------- */

/* A user's module in the KV cache: tg_module_set_kv_cache reaches it
 * through any container, tg_module_reset_kv_cache calls its reset_cache
 * (once per place in the tree) and returns its error. */
typedef struct {
    int resets, fail;
    bool seen_cache;
} cache_user_state;

static tg_tensor *cache_user_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    (void)tp;
    cache_user_state *s = tg_module_state(self);
    s->seen_cache = tg_module_kv_cache_enabled(self);
    return n == 1 ? in[0] : tg_error("CacheUser: expected 1 input");
}

static int cache_user_reset(tg_module *self)
{
    cache_user_state *s = tg_module_state(self);
    if (s->fail) return tg_error_status(TG_ESTATE, "CacheUser: refused to reset");
    s->resets++;
    return TG_OK;
}

static void test_kv_cache_user_module(void **state)
{
    (void)state;
    static const tg_module_type cache_user = {
        .name = "CacheUser", .forward = cache_user_forward, .reset_cache = cache_user_reset};
    tg_tape *tp = tg_tape_new();
    tg_module *a = tg_module_new(tp, &cache_user, sizeof(cache_user_state));
    tg_module *b = tg_module_new(tp, &cache_user, sizeof(cache_user_state));
    tg_module *kids[3] = {a, tg_linear_new(tp, 2, 2, false), tg_sequential_new(tp, 1, &b)};
    tg_module *seq = tg_sequential_new(tp, 3, kids);
    tu_assert_ok(seq);
    cache_user_state *sa = tg_module_state(a), *sb = tg_module_state(b);
    int64_t shape[2] = {1, 2};
    tu_assert_ok(tg_module_forward(tp, seq, tg_zeros(tp, TG_F32, 2, shape)));
    assert_false(sa->seen_cache || sb->seen_cache);
    assert_int_equal(tg_module_set_kv_cache(seq, true), TG_OK);
    tu_assert_ok(tg_module_forward(tp, seq, tg_zeros(tp, TG_F32, 2, shape)));
    assert_true(sa->seen_cache && sb->seen_cache);
    assert_int_equal(tg_module_reset_kv_cache(seq), TG_OK);
    assert_int_equal(sa->resets, 1);
    assert_int_equal(sb->resets, 1);
    sb->fail = 1;
    tu_assert_status_error(tg_module_reset_kv_cache(seq), "CacheUser: refused to reset");
    assert_int_equal(tg_module_set_kv_cache(seq, false), TG_OK);
    assert_false(tg_module_kv_cache_enabled(b));
    tg_tape_free(tp);
}

static void test_repr_reference(void **state)
{
    (void)state;
    json_t *ref = tu_load_ref("repr.json");
    const json_t *cases = json_object_get(ref, "cases");
    assert_true(json_array_size(cases) >= 16);
    tg_tape *tp = tg_tape_new();
    for (size_t i = 0; i < json_array_size(cases); i++) {
        const json_t *c = json_array_get(cases, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *want = json_string_value(json_object_get(c, "text"));
        tg_module *m = repr_case(tp, name);
        tu_assert_ok(m);
        int len = tg_module_repr(m, NULL, 0);
        assert_int_equal(len, (int)strlen(want));
        char *got = malloc((size_t)len + 1);
        assert_int_equal(tg_module_repr(m, got, (size_t)len + 1), len);
        if (strcmp(got, want) != 0) fail_msg("repr %s:\n--- got\n%s\n--- want (PyTorch)\n%s", name, got, want);
        free(got);
    }
    tg_tape_free(tp);
    json_decref(ref);
}

static void test_repr_buffer(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_module *m = tg_linear_new(tp, 3, 2, false);
    const char *want = "Linear(in_features=3, out_features=2, bias=False)";
    char small[8];
    memset(small, 'x', sizeof small);
    /* as snprintf: the full length, the text cut and terminated */
    assert_int_equal(tg_module_repr(m, small, sizeof small), (int)strlen(want));
    assert_string_equal(small, "Linear(");
    assert_int_equal(tg_module_repr(m, NULL, 0), (int)strlen(want));
    EXPECT_STATUS(tg_module_repr(NULL, small, sizeof small), "repr", "NULL");
    /* print writes the text and a newline */
    FILE *f = tmpfile();
    assert_non_null(f);
    check_ok(tg_module_print(f, m), "print");
    rewind(f);
    char line[128];
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "Linear(in_features=3, out_features=2, bias=False)\n");
    fclose(f);
    tg_tape_free(tp);
}

/* An extra_repr longer than the first buffer, and one that fails. */
static int long_extra_repr(const tg_module *self, char *buf, size_t size)
{
    (void)self;
    char text[600];
    memset(text, 'a', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    return snprintf(buf, size, "%s", text);
}
static int failing_extra_repr(const tg_module *self, char *buf, size_t size)
{
    (void)self, (void)buf, (void)size;
    return tg_error_status(TG_EINVAL, "Broken: cannot describe itself");
}

static void test_repr_extra_repr_edges(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    static const tg_module_type long_type = {.name = "Long", .extra_repr = long_extra_repr};
    static const tg_module_type broken_type = {.name = "Broken", .extra_repr = failing_extra_repr};
    tg_module *m = tg_module_new(tp, &long_type, 0);
    assert_int_equal(tg_module_repr(m, NULL, 0), 599 + 6);
    tg_module *outer = tg_module_list_new(tp, 1, (tg_module *[]){tg_module_new(tp, &broken_type, 0)});
    EXPECT_STATUS(tg_module_repr(outer, NULL, 0), "Broken: cannot describe itself");
    tg_tape_free(tp);
}

/* ---- (b) registration ----------------------------------------------------------------------------- */

/* A module with many parameters and a list of many children; forward sums
 * w_i * x over the parameters and adds every child's output. */
typedef struct {
    int nparams;
} bank_state;

static tg_tensor *bank_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("Bank: expected 1 input, got %d", n);
    const bank_state *s = tg_module_state(self);
    tg_tensor *y = tg_zeros_like(tp, in[0]);
    for (int i = 0; i < s->nparams; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        y = tg_add(tp, y, tg_mul(tp, in[0], tg_module_get_parameter(self, name)));
    }
    tg_module *list = tg_module_get_submodule(self, "experts");
    for (int i = 0; i < tg_module_num_children(list); i++)
        y = tg_add(tp, y, tg_module_forward(tp, tg_module_child(list, i), in[0]));
    return y;
}
static const tg_module_type bank_type = {.name = "Bank", .forward = bank_forward};

static void test_many_parameters_and_children(void **state)
{
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    enum { P = 10, C = 100, D = 3 };
    tg_manual_seed(5);
    tg_module *m = tg_module_new(model, &bank_type, sizeof(bank_state));
    tu_assert_ok(m);
    ((bank_state *)tg_module_state(m))->nparams = P;
    for (int i = 0; i < P; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        int64_t d = D;
        tg_tensor *w = tg_parameter_new(model, TG_F32, 1, &d);
        bool prev = tg_set_grad_enabled(false); /* initialising is not part of a graph */
        check_ok(tg_fill_(w, 0.01 * (i + 1)), "fill");
        tg_set_grad_enabled(prev);
        check_ok(tg_module_register_parameter(m, name, w), name);
    }
    tg_module *list = tg_module_list_new(model, 0, NULL);
    check_ok(tg_module_add_module(m, "experts", list), "add experts");
    for (int i = 0; i < C; i++) check_ok(tg_module_append(list, tg_linear_new(model, D, D, false)), "append");
    assert_int_equal(tg_module_num_children(list), C);
    assert_string_equal(tg_module_child_name(list, 99), "99");
    /* PyTorch's order: own parameters in registration order, then each child's */
    tg_named_list np;
    check_ok(tg_module_named_parameters(tp, m, &np), "named_parameters");
    assert_int_equal(np.n, P + C);
    assert_string_equal(np.names[0], "w0");
    assert_string_equal(np.names[9], "w9");
    assert_string_equal(np.names[10], "experts.0.weight");
    assert_string_equal(np.names[P + C - 1], "experts.99.weight");
    assert_ptr_equal(np.tensors[P + C - 1], tg_module_get_parameter(m, "experts.99.weight"));
    /* the forward uses all of them: every parameter gets a gradient */
    int64_t xs[2] = {2, D};
    tg_tensor *x = tg_rand(tp, TG_F32, 2, xs, NULL);
    tg_tensor *loss = tg_sum(tp, tg_module_forward(tp, m, x));
    tu_assert_ok(loss);
    check_ok(tg_backward(loss, NULL, false), "backward");
    for (int i = 0; i < np.n; i++)
        if (!np.tensors[i]->grad) fail_msg("%s has no gradient", np.names[i]);
    /* and an optimizer over the tree sees all 110 */
    tg_sgd *opt = tg_sgd_new(model, m, (tg_sgd_options){.lr = 0.1});
    tu_assert_ok(opt);
    double before = tg_item_at(tg_module_get_parameter(m, "experts.99.weight"), 0);
    check_ok(tg_sgd_step(opt), "step");
    assert_true(tg_item_at(tg_module_get_parameter(m, "experts.99.weight"), 0) != before);
    /* 100 heads in the chapter-3 wrapper (one CausalAttention child each) */
    tg_module *w = tg_mha_wrapper_new(model, 3, 1, 4, 0.0, 100, false);
    tu_assert_ok(w);
    int64_t s3[3] = {1, 4, 3};
    tg_tensor *y = tg_module_forward(tp, w, tg_rand(tp, TG_F32, 3, s3, NULL));
    tu_assert_ok(y);
    assert_int_equal(y->shape[2], 100);
    tg_tape_free(tp);
    tg_tape_free(model);
}

static void test_registration_rules(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    static const tg_module_type t = {.name = "Holder"};
    tg_module *m = tg_module_new(tp, &t, 16);
    tu_assert_ok(m);
    /* state: zeroed, owned; no state -> NULL */
    const unsigned char *st = tg_module_state(m);
    for (int i = 0; i < 16; i++) assert_int_equal(st[i], 0);
    assert_null(tg_module_state(tg_module_new(tp, &t, 0)));
    assert_ptr_equal(tg_module_get_type(m), &t);
    assert_string_equal(tg_module_type_name(m), "Holder");
    assert_ptr_equal(tg_module_tape(m), tp);
    int64_t s[1] = {2};
    tg_tensor *p = tg_zeros(tp, TG_F32, 1, s);
    assert_false(p->requires_grad);
    /* a plain tensor becomes a parameter (requires grad); names are copied */
    char name[8] = "w";
    check_ok(tg_module_register_parameter(m, name, p), "register w");
    strcpy(name, "zz");
    assert_true(p->requires_grad);
    assert_true(p->is_param);
    assert_ptr_equal(tg_module_get_parameter(m, "w"), p);
    /* a frozen parameter stays frozen when registered */
    tg_tensor *frozen = tg_parameter_new(tp, TG_F32, 1, s);
    check_ok(tg_requires_grad_(frozen, false), "freeze");
    check_ok(tg_module_register_parameter(m, "frozen", frozen), "register frozen");
    assert_false(frozen->requires_grad);
    /* bad names */
    EXPECT_STATUS(tg_module_register_parameter(m, "a.b", p), "Holder", "must not contain");
    EXPECT_STATUS(tg_module_register_parameter(m, "", p), "empty name");
    EXPECT_STATUS(tg_module_register_parameter(m, NULL, p), "NULL name");
    EXPECT_STATUS(tg_module_add_module(m, "x.y", tg_linear_new(tp, 1, 1, false)), "must not contain");
    /* one name, one kind */
    EXPECT_STATUS(tg_module_register_buffer(m, "w", p, true), "attribute 'w' already exists as a parameter");
    EXPECT_STATUS(tg_module_add_module(m, "w", tg_linear_new(tp, 1, 1, false)), "already exists as a parameter");
    check_ok(tg_module_register_buffer(m, "buf", tg_zeros(tp, TG_F32, 1, s), true), "buffer");
    EXPECT_STATUS(tg_module_register_parameter(m, "buf", p), "already exists as a buffer");
    /* the same name again in the same kind replaces, in place */
    tg_tensor *p2 = tg_parameter_new(tp, TG_F32, 1, s);
    check_ok(tg_module_register_parameter(m, "w", p2), "replace w");
    assert_ptr_equal(tg_module_get_parameter(m, "w"), p2);
    tg_named_list np;
    check_ok(tg_module_named_parameters(tp, m, &np), "named_parameters");
    assert_int_equal(np.n, 2);
    assert_string_equal(np.names[0], "w");
    assert_ptr_equal(np.tensors[0], p2);
    /* parameters are float leaves */
    tg_tensor *ints = tg_zeros(tp, TG_I64, 1, s);
    EXPECT_STATUS(tg_module_register_parameter(m, "i", ints), "must be float32 or float64", "int64");
    tg_tensor *leaf = tg_parameter_new(tp, TG_F32, 1, s);
    tg_tensor *nonleaf = tg_mul_scalar(tp, leaf, 2.0);
    EXPECT_STATUS(tg_module_register_parameter(m, "nl", nonleaf), "non-leaf", "MulBackward0");
    EXPECT_STATUS(tg_module_register_parameter(m, "n", NULL), "NULL");
    EXPECT_STATUS(tg_module_register_buffer(m, "n", NULL, true), "NULL");
    EXPECT_STATUS(tg_module_add_module(m, "n", NULL), "NULL");
    EXPECT_STATUS(tg_module_register_parameter(NULL, "n", p), "NULL module");
    /* an error downstream of a failed constructor keeps the constructor's message */
    tg_clear_error();
    assert_int_not_equal(tg_module_add_module(m, "bad", tg_linear_new(tp, -1, 2, false)), TG_OK);
    assert_non_null(strstr(tg_last_error(), "in_features"));
    /* no cycles: itself, or an ancestor */
    tg_module *child = tg_sequential_new(tp, 0, NULL), *grandchild = tg_sequential_new(tp, 0, NULL);
    check_ok(tg_module_add_module(m, "child", child), "child");
    check_ok(tg_module_add_module(child, "g", grandchild), "grandchild");
    EXPECT_STATUS(tg_module_add_module(m, "self", m), "cycle", "itself");
    EXPECT_STATUS(tg_module_add_module(grandchild, "up", m), "cycle", "ancestor");
    /* bad types */
    static const tg_module_type unnamed = {.name = NULL};
    EXPECT_NULL(tg_module_new(tp, &unnamed, 0), "needs a name");
    EXPECT_NULL(tg_module_new(tp, NULL, 0), "needs a name");
    EXPECT_NULL(tg_module_new(NULL, &t, 0), "NULL tape");
    tg_tape_free(tp);
}

/* ---- (c) look-ups -------------------------------------------------------------------------------- */

static void test_lookups(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(1);
    tg_module *w = tg_mha_wrapper_new(tp, 3, 2, 6, 0.0, 2, true);
    tu_assert_ok(w);
    tg_module *q = tg_module_get_submodule(w, "heads.1.W_query");
    tu_assert_ok(q);
    assert_string_equal(tg_module_type_name(q), "Linear");
    assert_ptr_equal(tg_module_get_submodule(w, ""), w);
    tg_tensor *b = tg_module_get_parameter(w, "heads.1.W_query.bias");
    tu_assert_ok(b);
    assert_ptr_equal(b, tg_module_get_parameter(q, "bias"));
    tg_tensor *mask = tg_module_get_buffer(w, "heads.0.mask");
    tu_assert_ok(mask);
    assert_int_equal(mask->shape[0], 6);
    EXPECT_NULL(tg_module_get_submodule(w, "heads.2"), "ModuleList has no submodule `2`");
    EXPECT_NULL(tg_module_get_submodule(w, "tails"), "MultiHeadAttentionWrapper has no submodule `tails`");
    EXPECT_NULL(tg_module_get_parameter(w, "heads.0.W_query.gamma"), "Linear has no parameter `gamma`");
    EXPECT_NULL(tg_module_get_parameter(w, "heads.0.mask"), "CausalAttention has no parameter `mask`");
    EXPECT_NULL(tg_module_get_buffer(w, "heads.0.W_key.weight"), "Linear has no buffer `weight`");
    EXPECT_NULL(tg_module_get_parameter(w, "heads.0.W_nope.weight"), "no submodule `W_nope`");
    EXPECT_NULL(tg_module_get_parameter(w, ""), "no parameter");
    EXPECT_NULL(tg_module_get_parameter(NULL, "x"), "NULL module");
    EXPECT_NULL(tg_module_get_parameter(w, NULL), "NULL name");
    EXPECT_NULL(tg_module_get_submodule(w, NULL), "NULL name");
    EXPECT_NULL(tg_module_child(w, 1), "out of range", "1 children");
    EXPECT_NULL(tg_module_child(w, -1), "out of range");
    EXPECT_NULL(tg_module_child_name(NULL, 0), "NULL module");
    tg_tape_free(tp);
}

/* ---- (d) weight tying and shared children ------------------------------------------------------------ */

static tg_tensor *pair_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("Pair: expected 1 input");
    tg_tensor *h = tg_module_forward(tp, tg_module_get_submodule(self, "a"), in[0]);
    return tg_module_forward(tp, tg_module_get_submodule(self, "b"), h);
}
static const tg_module_type pair_type = {.name = "Pair", .forward = pair_forward};

static void test_tied_weights(void **state)
{
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    tg_manual_seed(3);
    tg_module *m = tg_module_new(model, &pair_type, 0);
    tg_module *a = tg_linear_new(model, 3, 3, true), *b = tg_linear_new(model, 3, 3, true);
    check_ok(tg_module_add_module(m, "a", a), "a");
    check_ok(tg_module_add_module(m, "b", b), "b");
    tg_tensor *w = tg_module_get_parameter(a, "weight");
    /* b.weight = a.weight */
    check_ok(tg_module_register_parameter(b, "weight", w), "tie");
    tg_named_list np, sd;
    check_ok(tg_module_named_parameters(tp, m, &np), "named_parameters");
    const char *want_np[3] = {"a.weight", "a.bias", "b.bias"};
    assert_int_equal(np.n, 3);
    for (int i = 0; i < 3; i++) assert_string_equal(np.names[i], want_np[i]);
    /* state_dict keeps every key, as PyTorch's does */
    check_ok(tg_module_state_dict(tp, m, &sd), "state_dict");
    const char *want_sd[4] = {"a.weight", "a.bias", "b.weight", "b.bias"};
    assert_int_equal(sd.n, 4);
    for (int i = 0; i < 4; i++) assert_string_equal(sd.names[i], want_sd[i]);
    assert_ptr_equal(sd.tensors[0], sd.tensors[2]);
    /* one SGD update of the tied tensor, by its accumulated gradient */
    tg_sgd *opt = tg_sgd_new(model, m, (tg_sgd_options){.lr = 0.5});
    tu_assert_ok(opt);
    int64_t xs[2] = {4, 3};
    tg_tensor *x = tg_rand(tp, TG_F32, 2, xs, NULL);
    tg_tensor *loss = tg_sum(tp, tg_module_forward(tp, m, x));
    check_ok(tg_backward(loss, NULL, false), "backward");
    tg_tensor *before = tg_to_dtype(tp, w, TG_F64), *g = tg_to_dtype(tp, w->grad, TG_F64);
    check_ok(tg_sgd_step(opt), "step");
    for (int64_t i = 0; i < tg_numel(w); i++) {
        double want = (float)(tg_item_at(before, i) - 0.5 * tg_item_at(g, i));
        if (fabs(tg_item_at(w, i) - want) > 1e-6)
            fail_msg("tied weight element %lld: %.8g, want one update %.8g (before %.8g, grad %.8g)", (long long)i,
                     tg_item_at(w, i), want, tg_item_at(before, i), tg_item_at(g, i));
    }
    /* sgd_new_params drops duplicates too */
    tg_tensor *dup[3] = {w, w, tg_module_get_parameter(b, "bias")};
    tu_assert_ok(tg_sgd_new_params(model, 3, dup, (tg_sgd_options){.lr = 0.1}));
    /* a child shared under two names is walked once by named_parameters */
    static const tg_module_type holder = {.name = "Holder"};
    tg_module *h = tg_module_new(model, &holder, 0);
    tg_module *shared = tg_linear_new(model, 2, 2, false);
    check_ok(tg_module_add_module(h, "first", shared), "first");
    check_ok(tg_module_add_module(h, "second", shared), "second");
    check_ok(tg_module_named_parameters(tp, h, &np), "named_parameters shared");
    assert_int_equal(np.n, 1);
    assert_string_equal(np.names[0], "first.weight");
    check_ok(tg_module_state_dict(tp, h, &sd), "state_dict shared");
    assert_int_equal(sd.n, 2);
    assert_string_equal(sd.names[1], "second.weight");
    /* save and load round-trip a tied model (both keys in the file) */
    char path[] = "/tmp/tapegrad_test_module_tied_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    check_ok(tg_module_save(m, path), "save");
    tg_safetensors file;
    check_ok(tg_safetensors_load(tp, path, &file), "read back");
    assert_int_equal(file.n, 4);
    tg_manual_seed(99);
    tg_module *m2 = tg_module_new(model, &pair_type, 0);
    check_ok(tg_module_add_module(m2, "a", tg_linear_new(model, 3, 3, true)), "a2");
    check_ok(tg_module_add_module(m2, "b", tg_linear_new(model, 3, 3, true)), "b2");
    check_ok(tg_module_load(m2, path), "load");
    tu_assert_close(tg_module_get_parameter(m2, "b.weight"), w, 0, 0, "b.weight after load");
    unlink(path);
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* ---- (e) buffers, inputs, containers, settings ------------------------------------------------------ */

/* Pick(ids, table): rows of table at int64 ids, stacked. Two inputs, two dtypes. */
static tg_tensor *pick_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    (void)self;
    if (n != 2) return tg_error("Pick: expected 2 inputs (ids, table), got %d", n);
    const tg_tensor *ids = in[0];
    if (ids->dtype != TG_I64 || ids->ndim != 1) return tg_error("Pick: ids must be 1-D int64");
    tg_tensor *rows[8];
    if (ids->shape[0] > 8) return tg_error("Pick: at most 8 ids");
    for (int64_t i = 0; i < ids->shape[0]; i++) rows[i] = tg_select(tp, in[1], 0, (int64_t)tg_item_at(ids, i));
    return tg_stack(tp, (int)ids->shape[0], rows, 0);
}
static const tg_module_type pick_type = {.name = "Pick", .forward = pick_forward};

static tg_tensor *silent_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    (void)tp, (void)self, (void)n, (void)in;
    return NULL; /* fails without saying why */
}
static const tg_module_type silent_type = {.name = "Silent", .forward = silent_forward};

static void test_inputs_buffers_containers(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    /* n inputs of any dtype */
    tg_module *pick = tg_module_new(tp, &pick_type, 0);
    int64_t idv[3] = {2, 0, 2}, ts[2] = {3, 2}, three = 3;
    tg_tensor *ids = tg_from_data(tp, TG_I64, 1, &three, idv);
    tg_tensor *table = tg_rand(tp, TG_F32, 2, ts, NULL);
    tg_tensor *y = tg_module_call(tp, pick, 2, (tg_tensor *[]){ids, table});
    tu_assert_ok(y);
    assert_int_equal(y->shape[0], 3);
    assert_true(tg_item_at(y, 0) == tg_item_at(table, 4) && tg_item_at(y, 3) == tg_item_at(table, 1));
    EXPECT_NULL(tg_module_call(tp, pick, 1, &ids), "Pick: expected 2 inputs");
    EXPECT_NULL(tg_module_call(tp, pick, 2, (tg_tensor *[]){ids, NULL}), "Pick", "NULL input");
    EXPECT_NULL(tg_module_call(tp, pick, 2, NULL), "bad input list");
    EXPECT_NULL(tg_module_call(tp, NULL, 1, &ids), "NULL module");
    /* built-in modules take one input */
    tg_module *lin = tg_linear_new(tp, 2, 2, true);
    EXPECT_NULL(tg_module_call(tp, lin, 2, (tg_tensor *[]){table, table}), "Linear: expected 1 input, got 2");
    /* a forward that fails silently gets a message, even after an unrelated earlier error */
    tg_module *silent = tg_module_new(tp, &silent_type, 0);
    tg_error("an earlier, unrelated error");
    assert_null(tg_module_forward(tp, silent, table));
    assert_string_equal(tg_last_error(), "Silent: forward returned NULL without an error");
    /* a forward that succeeds leaves an earlier message alone */
    tg_error("an earlier, unrelated error");
    tu_assert_ok(tg_module_forward(tp, lin, table));
    assert_string_equal(tg_last_error(), "an earlier, unrelated error");
    /* a container has no forward */
    tg_module *list = tg_module_list_new(tp, 1, &lin);
    EXPECT_NULL(tg_module_forward(tp, list, table), "ModuleList", "no forward");
    /* Sequential runs its children in order */
    tg_manual_seed(4);
    tg_module *l1 = tg_linear_new(tp, 2, 4, true), *l2 = tg_linear_new(tp, 4, 3, false);
    tg_module *seq = tg_sequential_new(tp, 2, (tg_module *[]){l1, l2});
    tg_tensor *ys = tg_module_forward(tp, seq, table);
    tu_assert_close(ys, tg_module_forward(tp, l2, tg_module_forward(tp, l1, table)), 0, 0, "Sequential");
    assert_string_equal(tg_module_child_name(seq, 1), "1");
    EXPECT_NULL(tg_sequential_new(tp, 2, (tg_module *[]){l1, NULL}), "NULL");
    EXPECT_NULL(tg_sequential_new(tp, -1, NULL), "bad list");
    /* buffers: persistent ones in the state_dict, all of them found and converted */
    static const tg_module_type holder = {.name = "Holder"};
    tg_module *h = tg_module_new(tp, &holder, 0);
    check_ok(tg_module_register_buffer(h, "keep", tg_ones(tp, TG_F32, 1, &three), true), "keep");
    check_ok(tg_module_register_buffer(h, "scratch", tg_ones(tp, TG_F32, 1, &three), false), "scratch");
    check_ok(tg_module_register_buffer(h, "ids", ids, true), "ids");
    tg_named_list sd;
    check_ok(tg_module_state_dict(tp, h, &sd), "state_dict");
    assert_int_equal(sd.n, 2);
    assert_string_equal(sd.names[0], "keep");
    assert_string_equal(sd.names[1], "ids");
    tg_tensor *scratch = tg_module_get_buffer(h, "scratch");
    check_ok(tg_module_to_dtype(tp, h, TG_F64), "to_dtype");
    assert_int_equal(scratch->dtype, TG_F64);
    assert_int_equal(tg_module_get_buffer(h, "ids")->dtype, TG_I64); /* integers stay */
    assert_true(tg_item_at(scratch, 2) == 1.0);
    /* tree-wide settings */
    tg_module *mha = tg_mha_new(tp, 4, 4, 4, 0.5, 2, false);
    tg_module *d = tg_module_get_submodule(mha, "dropout");
    assert_true(tg_module_is_training(d));
    check_ok(tg_module_train(mha, false), "eval");
    assert_false(tg_module_is_training(d));
    tg_generator *g = tg_generator_new(1);
    check_ok(tg_module_set_generator(mha, g), "generator");
    assert_ptr_equal(tg_module_generator(d), g);
    check_ok(tg_module_set_fused(mha, true), "fused");
    assert_true(tg_module_is_fused(tg_module_get_submodule(mha, "out_proj")));
    EXPECT_STATUS(tg_module_train(NULL, true), "NULL module");
    EXPECT_STATUS(tg_module_set_fused(NULL, true), "NULL module");
    EXPECT_STATUS(tg_module_set_generator(NULL, g), "NULL module");
    assert_false(tg_module_is_training(NULL));
    tg_generator_free(g);
    tg_tape_free(tp);
}

/* ---- (f) dtype conversion keeps an optimizer working -------------------------------------------------- */

static void test_to_dtype_keeps_optimizer(void **state)
{
    (void)state;
    tg_tape *model = tg_tape_new(), *tp = tg_tape_new();
    tg_manual_seed(11);
    tg_module *lin = tg_linear_new(model, 3, 2, true);
    tg_tensor *w = tg_module_get_parameter(lin, "weight");
    tg_sgd *opt = tg_sgd_new(model, lin, (tg_sgd_options){.lr = 0.1, .momentum = 0.9});
    tu_assert_ok(opt);
    int64_t xs[2] = {4, 3};
    tg_generator *gen = tg_generator_new(2);
    tg_tensor *x = tg_rand(model, TG_F64, 2, xs, gen);
    tg_generator_free(gen);
    /* step 1 in float32 */
    tg_sgd_zero_grad(opt);
    check_ok(tg_backward(tg_sum(tp, tg_module_forward(tp, lin, tg_to_dtype(tp, x, TG_F32))), NULL, false), "bwd");
    check_ok(tg_sgd_step(opt), "step 1");
    tg_tape_reset(tp);
    /* convert: the same tensor objects, now float64 */
    check_ok(tg_module_to_dtype(model, lin, TG_F64), "to_dtype");
    assert_ptr_equal(tg_module_get_parameter(lin, "weight"), w);
    assert_int_equal(w->dtype, TG_F64);
    assert_int_equal(w->grad->dtype, TG_F64);
    tg_tensor *w1 = tg_to_dtype(model, w, TG_F64), *buf1 = tg_to_dtype(model, w->grad, TG_F64);
    /* step 2 in float64: momentum buffer (= the first gradient) carried over */
    tg_sgd_zero_grad(opt);
    check_ok(tg_backward(tg_sum(tp, tg_module_forward(tp, lin, x)), NULL, false), "bwd 2");
    tg_tensor *g2 = w->grad;
    check_ok(tg_sgd_step(opt), "step 2");
    assert_int_equal(w->dtype, TG_F64);
    for (int64_t i = 0; i < tg_numel(w); i++) {
        double buf = 0.9 * tg_item_at(buf1, i) + tg_item_at(g2, i);
        double want = tg_item_at(w1, i) - 0.1 * buf;
        if (fabs(tg_item_at(w, i) - want) > 1e-6)
            fail_msg("weight[%lld] after the float64 step: %.9g, want %.9g", (long long)i, tg_item_at(w, i), want);
    }
    EXPECT_STATUS(tg_module_to_dtype(model, lin, TG_I64), "float32 or float64");
    EXPECT_STATUS(tg_module_to_dtype(NULL, lin, TG_F64), "NULL tape");
    tg_tape_free(tp);
    tg_tape_free(model);
}

/* ---- (g) gradcheck_module ----------------------------------------------------------------------------- */

/* y = x * w where the graph sees w only once: x * detach(w) + x * w would be
 * right; here y = x * (w * detach(w)) hides half of d/dw. */
static tg_tensor *hidden_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    if (n != 1) return tg_error("Hidden: expected 1 input");
    tg_tensor *w = tg_module_get_parameter(self, "w");
    return tg_mul(tp, in[0], tg_mul(tp, w, tg_detach(tp, w)));
}
static const tg_module_type hidden_type = {.name = "Hidden", .forward = hidden_forward};

static void test_gradcheck_module(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    tg_manual_seed(21);
    tg_module *b = block_new(tp);
    tu_assert_ok(b);
    int64_t xs[3] = {2, 5, 4};
    tg_tensor *x = tg_rand(tp, TG_F64, 3, xs, NULL);
    tg_gradcheck_result res, first;
    /* float32 parameters: refused, naming one */
    EXPECT_STATUS(tg_gradcheck_module_call(b, 1, &x, NULL, &res), "parameter 'att.W_query.weight' is float32",
                  "tg_module_to_dtype");
    check_ok(tg_module_to_dtype(tp, b, TG_F64), "to_dtype");
    /* dropout in training mode: refused */
    EXPECT_STATUS(tg_gradcheck_module_call(b, 1, &x, NULL, &res), "differ", "tg_module_train(m, false)");
    check_ok(tg_module_train(b, false), "eval");
    assert_false(x->requires_grad);
    check_ok(tg_gradcheck_module_call(b, 1, &x, NULL, &res), "gradcheck_module");
    if (!res.passed) fail_msg("%s", res.message);
    assert_false(x->requires_grad); /* restored */
    assert_non_null(strstr(res.message, "TransformerBlock passed"));
    /* the first (deprecated) form gives the same result */
    check_ok(tg_gradcheck_module(b, 1, &x, 0, 0, 0, &first), "gradcheck_module, first form");
    tu_assert_same_gradcheck(&first, &res);
    /* a graph that hides a dependence is caught, and named */
    tg_module *h = tg_module_new(tp, &hidden_type, 0);
    int64_t three = 3;
    check_ok(tg_module_register_parameter(h, "w", tg_rand(tp, TG_F64, 1, &three, NULL)), "w");
    tg_tensor *xh = tg_rand(tp, TG_F64, 1, &three, NULL);
    double err[2] = {-1, -1}; /* the input's, then w's */
    check_ok(tg_gradcheck_module_call(h, 1, &xh, &(tg_gradcheck_options){.max_err_per_input = err}, &res),
             "gradcheck_module hidden");
    assert_false(res.passed);
    assert_non_null(strstr(res.message, "worst element w["));
    assert_int_equal(res.worst_input, 1);
    assert_true(err[0] >= 0 && err[0] < 1e-6);
    assert_true(err[1] == res.max_abs_err && err[1] > 1e-3);
    /* half of d/dw is missing: analytic x w, numeric 2 x w */
    assert_true(fabs(res.analytic - res.numeric / 2) <= 1e-6 * fabs(res.numeric));
    check_ok(tg_gradcheck_module(h, 1, &xh, 0, 0, 0, &first), "gradcheck_module hidden, first form");
    tu_assert_same_gradcheck(&first, &res);
    /* tolerances: loose enough, the same failure passes, in both forms */
    check_ok(tg_gradcheck_module_call(h, 1, &xh, &(tg_gradcheck_options){.atol = 10}, &res), "atol 10");
    assert_true(res.passed);
    check_ok(tg_gradcheck_module(h, 1, &xh, 0, 10, 0, &first), "atol 10, first form");
    tu_assert_same_gradcheck(&first, &res);
    /* bad arguments */
    tg_tensor *x32 = tg_rand(tp, TG_F32, 1, &three, NULL);
    EXPECT_STATUS(tg_gradcheck_module_call(h, 1, &x32, NULL, &res), "input 0 must be a float64 leaf");
    EXPECT_STATUS(tg_gradcheck_module_call(NULL, 1, &xh, NULL, &res), "NULL module");
    EXPECT_STATUS(tg_gradcheck_module_call(h, 1, &xh, NULL, NULL), "NULL module or result");
    EXPECT_STATUS(tg_gradcheck_module_call(h, 1, (tg_tensor *[]){NULL}, NULL, &res), "input 0 is NULL");
    EXPECT_STATUS(tg_gradcheck_module(h, 1, (tg_tensor *[]){NULL}, 0, 0, 0, &res), "input 0 is NULL");
    tg_tape_free(tp);
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_reference_kernels(argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repr_reference),
        cmocka_unit_test(test_repr_buffer),
        cmocka_unit_test(test_repr_extra_repr_edges),
        cmocka_unit_test(test_many_parameters_and_children),
        cmocka_unit_test(test_registration_rules),
        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_tied_weights),
        cmocka_unit_test(test_inputs_buffers_containers),
        cmocka_unit_test(test_to_dtype_keeps_optimizer),
        cmocka_unit_test(test_gradcheck_module),
        cmocka_unit_test(test_kv_cache_user_module),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
