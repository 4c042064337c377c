/* BF16 numerics (tensor.h, tg_numerics; README.md, "Numerics"): every
 * float32 matrix product takes bf16 operands (rounded to nearest even) and
 * accumulates in float32, on the CPU's bf16 hardware through oneDNN where
 * tg_numerics_bf16_native() says so, else emulated on sgemm. Each product
 * is checked against float64 products of the same bf16-rounded operands, on
 * both paths where the hardware is here (tg_numerics_bf16_set_emulated);
 * parameters' bf16 copies are checked to follow every change of the
 * parameter; one GPT step's gradients are checked against float32's. */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* ---- a module that records one product under its numerics ---------------------------------------- */

enum { OP_MATMUL, OP_LINEAR, OP_MATMUL_T };

typedef struct {
    int op;
} prod_state;

static tg_tensor *prod_forward(tg_tape *tp, tg_module *self, int n, tg_tensor *const *in)
{
    const prod_state *s = tg_module_state(self);
    if (s->op == OP_LINEAR) return tg_linear(tp, in[0], in[1], n > 2 ? in[2] : NULL);
    if (s->op == OP_MATMUL_T) return tg_matmul(tp, in[0], tg_transpose(tp, in[1], -2, -1));
    return tg_matmul(tp, in[0], in[1]);
}

static const tg_module_type prod_type = {.name = "Prod", .forward = prod_forward};

static tg_module *prod_new(tg_tape *tp, int op)
{
    tg_module *m = tg_module_new(tp, &prod_type, sizeof(prod_state));
    tu_assert_ok(m);
    ((prod_state *)tg_module_state(m))->op = op;
    assert_int_equal(tg_module_set_numerics(m, TG_NUMERICS_BF16), TG_OK);
    return m;
}

/* Element (i, j) of op(x) for a 2-D float32 tensor of any strides. */
static float at2(const tg_tensor *x, int64_t i, int64_t j, bool t)
{
    const float *p = x->data; /* the storage: x may be a view */
    if (t) {
        int64_t s = i;
        i = j;
        j = s;
    }
    return p[x->offset + i * x->stride[x->ndim - 2] + j * x->stride[x->ndim - 1]];
}

/* The worst |got - ref| / (|bias_j| + sum_k |a_ik b_kj| + 1e-30) over c = op(a) op(b)
 * (+ bias), 2-D, ref in float64 over bf16-rounded operands. Also the worst
 * such distance of the float32 product, which a bf16 product must not be. */
static double product_error(const tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb,
                            const tg_tensor *bias, double *f32_apart)
{
    int64_t M = c->shape[0], N = c->shape[1], K = ta ? a->shape[0] : a->shape[1];
    const float *pc = c->data;
    double worst = 0, apart = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double ref = bias ? ((const float *)tg_data_ptr(bias))[j] : 0, mag = fabs(ref), f32 = ref;
            for (int64_t k = 0; k < K; k++) {
                float x = at2(a, i, k, ta), y = at2(b, k, j, tb);
                ref += tu_bf16(x) * tu_bf16(y);
                mag += fabs(tu_bf16(x) * tu_bf16(y));
                f32 += (double)x * y;
            }
            double got = pc[c->offset + i * c->stride[0] + j * c->stride[1]];
            worst = fmax(worst, fabs(got - ref) / (mag + 1e-30));
            apart = fmax(apart, fabs(f32 - ref) / (mag + 1e-30));
        }
    if (f32_apart) *f32_apart = apart;
    return worst;
}

/* float32 accumulation of K bf16 products: well within K * 2^-24 of the
 * magnitude; a product on unrounded operands is ~2^-9 away */
#define PRODUCT_TOL 2e-6

typedef struct {
    int64_t M, N, K;
} dims;

static const dims shapes[] = {
    {5, 8, 64}, {1, 300, 77}, {33, 1, 50}, {1, 1, 1}, {17, 19, 3}, {64, 96, 640}, {2, 130, 129},
    {8195, 6, 17}, /* more than 8192 rows: in slices (src/tensor/bf16.c) */
    /* operands over 2M floats: emulated, rounded a block at a time (of the
     * inner dimension for dx and dW, of c's columns for x v^T; of c's rows
     * with many rows) */
    {3, 2100000, 4}, {2100000, 3, 4},
    /* up to sixteen rows against a weight: the row kernels (one row, and
     * four at a time) through blocks of 32 and 16 columns, with and without
     * a rest */
    {1, 7, 1029}, {1, 10, 32}, {1, 5, 50}, {1, 4, 15}, {1, 9, 3072}, {3, 11, 1029}, {16, 6, 40}, {6, 5, 50},
    /* a trainable weight over 8 MiB in bf16 (more than sixteen rows): on
     * oneDNN rounded in two blocks of its rows, c's columns for y, the inner
     * dimension (the blocks' products added) for dx; only those two are
     * checked (BLOCKED_CHECKS) */
    {17, 2053, 2050},
};

/* A weight of more elements than this times more than sixteen rows (the
 * blocked products): y and dx are checked, not dW and matmul (their
 * operands are not blocked; the float64 reference is slow in the
 * instrumented build) */
#define BLOCKED_CHECKS ((int64_t)4 << 20)

/* The three products of a Linear (y = x W^T + b; dx = dy W; dW = dy^T x)
 * and of matmul with a transposed view, forward and backward, against the
 * float64 products of the same rounded operands. */
static void check_products(bool emulated)
{
    tg_numerics_bf16_set_emulated(emulated);
    tg_manual_seed(7);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        dims d = shapes[s];
        tg_tape *tp = tg_tape_new();
        tg_tensor *x = tg_randn(tp, TG_F32, 2, (int64_t[]){d.M, d.K}, NULL);
        tg_tensor *w = tg_parameter_new(tp, TG_F32, 2, (int64_t[]){d.N, d.K});
        tg_tensor *b = tg_parameter_new(tp, TG_F32, 1, (int64_t[]){d.N});
        tg_tensor *dy = tg_randn(tp, TG_F32, 2, (int64_t[]){d.M, d.N}, NULL);
        tu_assert_ok(dy);
        assert_int_equal(tg_normal_(w, 0.0, 1.0, NULL), TG_OK);
        assert_int_equal(tg_normal_(b, 0.0, 1.0, NULL), TG_OK);
        assert_int_equal(tg_requires_grad_(x, true), TG_OK);
        tg_module *lin = prod_new(tp, OP_LINEAR);
        tg_tensor *y = tg_module_call(tp, lin, 3, (tg_tensor *const[]){x, w, b});
        tu_assert_ok(y);
        double apart, e = product_error(y, x, false, w, true, b, &apart);
        if (e > PRODUCT_TOL) fail_msg("%s linear %lldx%lldx%lld: forward %g", emulated ? "emulated" : "native",
                                      (long long)d.M, (long long)d.N, (long long)d.K, e);
        /* the worst of many outputs on unrounded operands: ~2^-9 away */
        if (d.K >= 50 && d.M * d.N >= 30 && apart < 1e-4) fail_msg("linear forward: the float32 product (%g apart)", apart);
        assert_int_equal(tg_backward(y, dy, false), TG_OK);
        e = product_error(x->grad, dy, false, w, false, NULL, NULL);
        if (e > PRODUCT_TOL) fail_msg("linear dx %lldx%lldx%lld: %g", (long long)d.M, (long long)d.N, (long long)d.K, e);
        if (d.M > 16 && d.N * d.K > BLOCKED_CHECKS) {
            tg_tape_free(tp);
            continue;
        }
        e = product_error(w->grad, dy, true, x, false, NULL, NULL);
        if (e > PRODUCT_TOL) fail_msg("linear dW %lldx%lldx%lld: %g", (long long)d.M, (long long)d.N, (long long)d.K, e);
        /* a plain tensor as the right operand, through a transposed view */
        tg_tensor *v = tg_randn(tp, TG_F32, 2, (int64_t[]){d.N, d.K}, NULL);
        tg_module *mm = prod_new(tp, OP_MATMUL_T);
        tg_tensor *z = tg_module_call(tp, mm, 2, (tg_tensor *const[]){x, v});
        tu_assert_ok(z);
        e = product_error(z, x, false, v, true, NULL, NULL);
        if (e > PRODUCT_TOL) fail_msg("matmul x v^T %lldx%lldx%lld: %g", (long long)d.M, (long long)d.N, (long long)d.K, e);
        tg_tape_free(tp);
    }
    /* a batch: (2, 3, M, K) @ (K, N) broadcast, M = 7 and M = 1 (one row
     * per head, as generation with the KV cache multiplies) */
    for (int64_t M = 7; M >= 1; M -= 6) {
        tg_tape *tp = tg_tape_new();
        tg_tensor *a = tg_randn(tp, TG_F32, 4, (int64_t[]){2, 3, M, 40}, NULL);
        tg_tensor *bm = tg_randn(tp, TG_F32, 2, (int64_t[]){40, 9}, NULL);
        tg_tensor *c = tg_module_call(tp, prod_new(tp, OP_MATMUL), 2, (tg_tensor *const[]){a, bm});
        tu_assert_ok(c);
        for (int64_t i = 0; i < 6; i++) {
            tg_tensor *ai = tg_select(tp, tg_reshape(tp, a, 3, (int64_t[]){6, M, 40}), 0, i);
            tg_tensor *ci = tg_select(tp, tg_reshape(tp, c, 3, (int64_t[]){6, M, 9}), 0, i);
            double e = product_error(ci, ai, false, bm, false, NULL, NULL);
            if (e > PRODUCT_TOL) fail_msg("batched matmul (M %lld), batch %lld: %g", (long long)M, (long long)i, e);
        }
        tg_tape_free(tp);
    }
    tg_numerics_bf16_set_emulated(false);
}

static void test_products_native(void **state)
{
    (void)state;
    if (!tg_numerics_bf16_native()) skip(); /* test_products_emulated covers this CPU */
    check_products(false);
    const char *k = tg_numerics_bf16_kernel();
    /* oneDNN's implementation ran (its names carry the ISA), and the row kernel for M = 1 */
    if (!strstr(k, "bf16")) fail_msg("kernels: '%s'", k);
}

static void test_products_emulated(void **state)
{
    (void)state;
    check_products(true);
    assert_non_null(strstr(tg_numerics_bf16_kernel(), "emulated"));
}

/* ---- which weights keep a bf16 copy --------------------------------------------------------------- */

/* A training step keeps no bf16 copy of a weight, trainable or frozen (its
 * products round it into scratch); generation's few rows keep one of any
 * weight, and an optimizer's update of the weight drops it. */
static void test_kept_copies(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    assert_int_equal(tg_tape_set_numerics(tp, TG_NUMERICS_BF16), TG_OK);
    tg_manual_seed(5);
    tg_module *train = tg_linear_new(mt, 40, 24, false), *frozen = tg_linear_new(mt, 40, 24, false);
    tu_assert_ok(frozen);
    assert_int_equal(tg_requires_grad_(tg_module_get_parameter(frozen, "weight"), false), TG_OK);
    tg_optimizer *opt = tg_sgd_new(mt, train, (tg_sgd_options){.lr = 0.1});
    tu_assert_ok(opt);
    const size_t one = sizeof(uint16_t) * 24 * 40, before = tg_numerics_copy_bytes();
    tg_tensor *x = tg_randn(tp, TG_F32, 2, (int64_t[]){32, 40}, NULL);
    tg_tensor *y = tg_add(tp, tg_module_forward(tp, train, x), tg_module_forward(tp, frozen, x));
    assert_int_equal(tg_backward(tg_sum(tp, y), NULL, false), TG_OK);
    if (tg_numerics_copy_bytes() != before)
        fail_msg("after a step of 32 rows: %zu bytes of copies kept", tg_numerics_copy_bytes() - before);
    bool g = tg_set_grad_enabled(false);
    tg_tensor *x4 = tg_randn(tp, TG_F32, 2, (int64_t[]){4, 40}, NULL);
    tu_assert_ok(tg_module_forward(tp, train, x4));
    tu_assert_ok(tg_module_forward(tp, frozen, x4));
    tg_set_grad_enabled(g);
    assert_int_equal(tg_numerics_copy_bytes() - before, 2 * one);
    assert_int_equal(tg_optimizer_step(opt), TG_OK);
    assert_int_equal(tg_numerics_copy_bytes() - before, one); /* the trainable weight's dropped */
    tg_tape_free(tp);
    tg_tape_free(mt);
    assert_int_equal(tg_numerics_copy_bytes(), before);
}

/* ---- parameters' bf16 copies follow their parameter ----------------------------------------------- */

/* The output of a fresh Linear holding w's values, on a new BF16 tape: what
 * a forward after a change must give bit for bit (its weight's bf16 copy is
 * made from the new values). */
static void assert_fresh_output(const tg_tensor *y, const tg_tensor *w, const tg_tensor *x, const char *way)
{
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_module *lin = tg_linear_new(mt, w->shape[1], w->shape[0], false);
    tu_assert_ok(lin);
    bool g = tg_set_grad_enabled(false);
    assert_int_equal(tg_copy_(tg_module_get_parameter(lin, "weight"), w), TG_OK);
    tg_set_grad_enabled(g);
    assert_int_equal(tg_tape_set_numerics(tp, TG_NUMERICS_BF16), TG_OK);
    tg_tensor *want = tg_module_forward(tp, lin, (tg_tensor *)x);
    tu_assert_ok(want);
    int64_t n = tg_numel(y);
    assert_int_equal(n, tg_numel(want));
    if (memcmp(tg_data_ptr(y), tg_data_ptr(want), sizeof(float) * (size_t)n) != 0)
        fail_msg("%s: the forward after the change is not a fresh module's (a stale bf16 copy)", way);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* A Linear's weight changed between two BF16 forwards on the same step tape
 * (no reset in between), by each way the library writes parameters: the
 * second forward equals a fresh module's holding the new values bit for bit,
 * never the first's bf16 copy; on every CPU (emulated products read the same
 * copies). The policy is the tape's: the module is not pinned. */
static void test_weight_copies(void **state)
{
    (void)state;
    static const char *const ways[] = {"copy_", "set", "a view's fill_", "load_state_dict", "mul_", "uniform_",
                                       "an optimizer step", "a checkpoint load"};
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    assert_int_equal(tg_tape_set_numerics(tp, TG_NUMERICS_BF16), TG_OK);
    tg_manual_seed(3);
    tg_module *lin = tg_linear_new(mt, 32, 16, false);
    tu_assert_ok(lin);
    tg_tensor *w = tg_module_get_parameter(lin, "weight");
    tg_tensor *x = tg_randn(tp, TG_F32, 2, (int64_t[]){4, 32}, NULL);
    tg_tensor *w2 = tg_randn(mt, TG_F32, 2, (int64_t[]){16, 32}, NULL);
    tg_optimizer *opt = tg_sgd_new(mt, lin, (tg_sgd_options){.lr = 0.5});
    tu_assert_ok(opt);
    char path[] = "/tmp/tapegrad-bf16-ckpt-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tg_checkpoint ck = {.model = lin};
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_OK); /* the weights as made */
    for (size_t way = 0; way < sizeof ways / sizeof ways[0]; way++) {
        tg_tensor *y0 = tg_module_forward(tp, lin, x);
        tu_assert_ok(y0);
        int64_t v0 = tg_tensor_version(w);
        if (way == 6) { /* a step from this forward's gradient */
            assert_int_equal(tg_backward(tg_sum(tp, y0), NULL, false), TG_OK);
            assert_int_equal(tg_optimizer_step(opt), TG_OK);
            tg_optimizer_zero_grad(opt);
        }
        bool g = tg_set_grad_enabled(false);
        if (way == 0) assert_int_equal(tg_copy_(w, w2), TG_OK);
        if (way == 1) assert_int_equal(tg_set(w, (int64_t[]){3, 5}, 7.0), TG_OK);
        if (way == 2) assert_int_equal(tg_fill_(tg_narrow(tp, w, 0, 2, 3), -1.5), TG_OK);
        if (way == 3) {
            tg_named_list sd = {1, (const char *[]){"weight"}, (tg_tensor *[]){w2}};
            assert_int_equal(tg_module_load_state_dict(lin, &sd), TG_OK);
        }
        if (way == 4) assert_int_equal(tg_mul_scalar_(w, -0.5), TG_OK);
        if (way == 5) assert_int_equal(tg_uniform_(w, -1.0, 1.0, NULL), TG_OK);
        if (way == 7) assert_int_equal(tg_checkpoint_load(NULL, &ck, path), TG_OK);
        tg_set_grad_enabled(g);
        assert_true(tg_tensor_version(w) > v0);
        tg_tensor *y = tg_module_forward(tp, lin, x);
        tu_assert_ok(y);
        assert_fresh_output(y, w, x, ways[way]);
    }
    unlink(path);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* ---- one GPT step --------------------------------------------------------------------------------- */

/* The loss and every parameter's gradient of one training step of a small
 * GPT under BF16 against the same step in float32 (FAST; dropout 0.1 with
 * the same masks): the loss within 0.01, each gradient within 3% of its
 * float32 norm (bf16 keeps 8 bits: each product carries ~2^-9 relative
 * error, and a step stacks some 30 of them). The BF16 step run twice gives
 * the same bits (no product races another on the kernels' scratch). */
static void test_gpt_step(void **state)
{
    (void)state;
    /* (B h T^2 hd = 2^20: the attention kernel runs its heads on threads) */
    tg_gpt_config cfg = {.vocab_size = 257, .context_length = 64, .emb_dim = 128, .n_heads = 4, .n_layers = 2,
                         .drop_rate = 0.1, .qkv_bias = false};
    double loss[3];
    tg_tape *mt[3], *tp[3];
    tg_named_list ps[3];
    for (int r = 0; r < 3; r++) {
        mt[r] = tg_tape_new();
        tp[r] = tg_tape_new();
        tg_manual_seed(123);
        tg_module *gpt = tg_gpt_new(mt[r], &cfg);
        tu_assert_ok(gpt);
        assert_int_equal(tg_module_set_numerics(gpt, r ? TG_NUMERICS_BF16 : TG_NUMERICS_FAST), TG_OK);
        int64_t ids[2 * 64], tgt[2 * 64];
        for (int i = 0; i < 128; i++) {
            ids[i] = (i * 37 + 11) % 257;
            tgt[i] = (i * 53 + 5) % 257;
        }
        tg_tensor *x = tg_from_data(tp[r], TG_I64, 2, (int64_t[]){2, 64}, ids);
        tg_tensor *y = tg_from_data(tp[r], TG_I64, 1, (int64_t[]){128}, tgt);
        tg_tensor *logits = tg_module_forward(tp[r], gpt, x);
        tu_assert_ok(logits);
        tg_tensor *l = tg_cross_entropy(tp[r], tg_reshape(tp[r], logits, 2, (int64_t[]){128, 257}), y, TG_REDUCE_MEAN);
        tu_assert_ok(l);
        loss[r] = *(const float *)tg_data_ptr(l);
        assert_int_equal(tg_backward(l, NULL, false), TG_OK);
        assert_int_equal(tg_module_named_parameters(mt[r], gpt, &ps[r]), TG_OK);
    }
    if (fabs(loss[1] - loss[0]) > 0.01) fail_msg("loss: bf16 %.6f, float32 %.6f", loss[1], loss[0]);
    assert_int_equal(ps[0].n, ps[1].n);
    double worst = 0;
    for (int i = 0; i < ps[0].n; i++) {
        const tg_tensor *g0 = ps[0].tensors[i]->grad, *g1 = ps[1].tensors[i]->grad;
        assert_non_null(g0);
        assert_non_null(g1);
        const float *a = tg_data_ptr(g0), *b = tg_data_ptr(g1);
        double num = 0, den = 0;
        for (int64_t k = 0; k < tg_numel(g0); k++) {
            num += ((double)b[k] - a[k]) * ((double)b[k] - a[k]);
            den += (double)a[k] * a[k];
        }
        double rel = sqrt(num / (den + 1e-30));
        if (rel > 0.03) fail_msg("%s: gradient %.4f of its norm from float32's", ps[0].names[i], rel);
        worst = fmax(worst, rel);
    }
    assert_true(worst > 1e-5); /* the products did run in bf16 */
    assert_true(loss[2] == loss[1]);
    for (int i = 0; i < ps[1].n; i++) {
        const tg_tensor *g1 = ps[1].tensors[i]->grad, *g2 = ps[2].tensors[i]->grad;
        if (memcmp(tg_data_ptr(g1), tg_data_ptr(g2), sizeof(float) * (size_t)tg_numel(g1)))
            fail_msg("%s: the BF16 step's gradient differs from one run to the next", ps[1].names[i]);
    }
    for (int r = 0; r < 3; r++) {
        tg_tape_free(tp[r]);
        tg_tape_free(mt[r]);
    }
}

/* ---- generation reads the same products ----------------------------------------------------------- */

/* Greedy generation with the KV cache under BF16 (the row kernel reads the
 * weights' bf16 copies made once) gives the ids of generation without the
 * cache (every product a full one) on the same model. */
static void test_generation(void **state)
{
    (void)state;
    tg_gpt_config cfg = {.vocab_size = 97, .context_length = 16, .emb_dim = 64, .n_heads = 4, .n_layers = 2,
                         .drop_rate = 0.0, .qkv_bias = true};
    tg_tape *mt = tg_tape_new();
    tg_manual_seed(5);
    tg_module *gpt = tg_gpt_new(mt, &cfg);
    tu_assert_ok(gpt);
    assert_int_equal(tg_module_set_numerics(gpt, TG_NUMERICS_BF16), TG_OK);
    int64_t prompt[3] = {1, 2, 3}, a[32], b[32], na = 0, nb = 0;
    tg_generate_options o = {.max_new_tokens = 12, .temperature = 0.0, .top_k = 0, .eos_id = -1};
    assert_int_equal(tg_gpt_generate(gpt, prompt, 3, &o, a, &na), TG_OK);
    o.no_kv_cache = true;
    assert_int_equal(tg_gpt_generate(gpt, prompt, 3, &o, b, &nb), TG_OK);
    assert_int_equal(na, 15);
    assert_int_equal(nb, 15);
    assert_memory_equal(a, b, sizeof a[0] * 15);
    tg_tape_free(mt);
}

/* The policy is the step tape's (tensor.h, tg_tape_set_numerics): a module
 * made after it is set (a LoRA wrapper) and an op outside any module (the
 * loss's matmul) run BF16 products; a node keeps the policy it was recorded
 * under, so its backward runs BF16 products even if the tape's policy is
 * changed before backward; a pinned module (tg_module_set_numerics) runs
 * its pin on an EXACT tape; a tape's policy survives a reset. */
static void test_step_policy(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    assert_int_equal(tg_tape_numerics(tp), TG_NUMERICS_EXACT);
    assert_int_equal(tg_tape_set_numerics(tp, TG_NUMERICS_BF16), TG_OK);
    tg_manual_seed(11);
    tg_module *lin = tg_linear_new(mt, 48, 24, false);
    tu_assert_ok(lin);
    tg_module *wrapped = tg_linear_with_lora_new(mt, lin, 4, 8.0); /* made after the policy was set */
    tu_assert_ok(wrapped);
    tg_tensor *x = tg_randn(tp, TG_F32, 2, (int64_t[]){6, 48}, NULL);
    tg_tensor *w = tg_module_get_parameter(lin, "weight");
    /* LoRA's B starts at zero: the wrapper's output is the Linear's */
    tg_tensor *y = tg_module_forward(tp, wrapped, x);
    tu_assert_ok(y);
    double apart, e = product_error(y, x, false, w, true, NULL, &apart);
    if (e > PRODUCT_TOL || apart < 10 * PRODUCT_TOL) fail_msg("a module made later: not a bf16 product (%g, %g)", e, apart);
    /* the loss's own product, outside any module */
    tg_tensor *v = tg_randn(tp, TG_F32, 2, (int64_t[]){24, 24}, NULL);
    tg_tensor *z = tg_matmul(tp, y, v);
    tu_assert_ok(z);
    if (product_error(z, y, false, v, false, NULL, NULL) > PRODUCT_TOL) fail_msg("an op outside modules: not bf16");
    /* backward under the recorded policy although the tape's changed: x's
     * gradient as when the policy stays BF16, not the EXACT one */
    float g[3][6 * 48];
    for (int r = 0; r < 3; r++) {
        tg_tape *st = tg_tape_new();
        assert_int_equal(tg_tape_set_numerics(st, r == 2 ? TG_NUMERICS_EXACT : TG_NUMERICS_BF16), TG_OK);
        tg_tensor *xr = tg_empty_like(st, x);
        tu_assert_ok(xr);
        assert_int_equal(tg_copy_(xr, x), TG_OK);
        tg_requires_grad_(xr, true);
        tg_tensor *zr = tg_matmul(st, tg_module_forward(st, wrapped, xr), v);
        tu_assert_ok(zr);
        if (r == 1) assert_int_equal(tg_tape_set_numerics(st, TG_NUMERICS_EXACT), TG_OK);
        assert_int_equal(tg_backward(tg_sum(st, zr), NULL, false), TG_OK);
        assert_int_equal(tg_copy_to_f32(xr->grad, g[r]), TG_OK);
        tg_tape_free(st);
    }
    if (memcmp(g[0], g[1], sizeof g[0]) != 0) fail_msg("backward did not run under its forward's policy");
    if (!memcmp(g[0], g[2], sizeof g[0])) fail_msg("BF16 and EXACT gradients are the same bits: the test sees nothing");
    /* a pinned module on an EXACT tape runs its pin */
    tg_tape_reset(tp);
    assert_int_equal(tg_tape_numerics(tp), TG_NUMERICS_BF16); /* a reset keeps the policy */
    assert_int_equal(tg_tape_set_numerics(tp, TG_NUMERICS_EXACT), TG_OK);
    x = tg_randn(tp, TG_F32, 2, (int64_t[]){6, 48}, NULL);
    assert_int_equal(tg_module_set_numerics(lin, TG_NUMERICS_BF16), TG_OK);
    y = tg_module_forward(tp, lin, x);
    tu_assert_ok(y);
    if (product_error(y, x, false, w, true, NULL, NULL) > PRODUCT_TOL) fail_msg("a pin: not a bf16 product");
    assert_int_equal(tg_tape_numerics(tp), TG_NUMERICS_EXACT); /* the pin is put back */
    /* bad arguments */
    tu_assert_status_error(tg_tape_set_numerics(NULL, TG_NUMERICS_FAST), "tape_set_numerics: NULL tape");
    tu_assert_status_error(tg_tape_set_numerics(tp, (tg_numerics)9), "9 is not a tg_numerics value");
    assert_int_equal(tg_tape_numerics(NULL), TG_NUMERICS_EXACT);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

static void test_api(void **state)
{
    (void)state;
    /* set_emulated switches the path and back; the kernel list only grows */
    tg_numerics_bf16_set_emulated(true);
    tg_numerics_bf16_set_emulated(false);
    const char *k = tg_numerics_bf16_kernel();
    assert_non_null(k);
    tg_numerics nm;
    tu_assert_status_error(tg_numerics_parse("bfloat16", &nm), "'bfloat16' is not one of exact, fast, bf16");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_products_native), cmocka_unit_test(test_products_emulated),
        cmocka_unit_test(test_weight_copies),   cmocka_unit_test(test_kept_copies),   cmocka_unit_test(test_gpt_step),
        cmocka_unit_test(test_generation),      cmocka_unit_test(test_step_policy),
        cmocka_unit_test(test_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
