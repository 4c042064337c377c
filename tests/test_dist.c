/* Data-parallel training (include/tapegrad/dist.h). Run alone it checks what
 * one process can: the batch slices of dropout masks against the whole
 * masks, the bucket plan, the gradient views, the errors. Run under
 * `mpirun -np 2` (tests/meson.build) every rank also trains a small GPT on
 * its slice of each global batch, and after every step each parameter must
 * equal the one a single process reaches on the whole batch (each rank
 * trains that reference beside it, from the same seed), with dropout 0 and
 * 0.1, with buckets of 4 KiB (many, started during backward) and the
 * default 25 MiB; and the ranks' parameters must be identical. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void same_state(tg_generator *a, tg_generator *b)
{
    uint8_t sa[TG_GENERATOR_STATE_BYTES], sb[TG_GENERATOR_STATE_BYTES];
    assert_int_equal(tg_generator_get_state(a, sa, sizeof sa), TG_OK);
    assert_int_equal(tg_generator_get_state(b, sb, sizeof sb), TG_OK);
    assert_memory_equal(sa, sb, sizeof sa);
}

/* drop(tp, x, g): one dropout of x drawing from g (whatever path it takes) */
typedef tg_tensor *(*drop_fn)(tg_tape *tp, tg_tensor *x, tg_generator *g);

static tg_tensor *drop_plain(tg_tape *tp, tg_tensor *x, tg_generator *g) { return tg_dropout(tp, x, 0.3, g); }

/* a non-contiguous input takes tg_dropout's other path */
static tg_tensor *drop_strided(tg_tape *tp, tg_tensor *x, tg_generator *g)
{
    tg_tensor *t = tg_transpose(tp, x, 1, 2);
    return tg_transpose(tp, tg_dropout(tp, t, 0.3, g), 1, 2);
}

static tg_tensor *drop_sdpa(tg_tape *tp, tg_tensor *x, tg_generator *g)
{
    return tg_scaled_dot_product_attention(tp, x, x, x, true, 0.3, g);
}

/* The whole mask of a batch of 4 against two halves drawn by generators
 * with batch slices (0, 2) and (1, 2): the same values, and every
 * generator ends where the whole draw ends. */
static void check_slices(drop_fn drop, tg_dropout_stream stream)
{
    tg_tape *tp = tg_tape_new();
    int64_t shape[4] = {4, 3, 5, 6}, half[4] = {2, 3, 5, 6};
    tg_tensor *x = tg_rand(tp, TG_F32, 4, shape, NULL);
    tg_generator *whole = tg_generator_new(7), *part[2] = {tg_generator_new(7), tg_generator_new(7)};
    tg_generator_set_dropout_stream(whole, stream);
    tg_tensor *want = drop(tp, x, whole);
    tu_assert_ok(want);
    for (int r = 0; r < 2; r++) {
        tg_generator_set_dropout_stream(part[r], stream);
        assert_int_equal(tg_generator_set_batch_slice(part[r], r, 2), TG_OK);
        tg_tensor *xs = tg_contiguous(tp, tg_narrow(tp, x, 0, 2 * r, 2));
        tg_tensor *got = drop(tp, xs, part[r]);
        tu_assert_ok(got);
        assert_int_equal(got->shape[0], half[0]);
        tu_assert_close(got, tg_contiguous(tp, tg_narrow(tp, want, 0, 2 * r, 2)), 0, 0, "half of the mask");
        same_state(part[r], whole);
    }
    tg_generator_free(whole);
    tg_generator_free(part[0]);
    tg_generator_free(part[1]);
    tg_tape_free(tp);
}

static void test_mask_slices(void **state)
{
    (void)state;
    drop_fn fns[3] = {drop_plain, drop_strided, drop_sdpa};
    for (int f = 0; f < 3; f++) {
        check_slices(fns[f], TG_DROPOUT_TORCH);
        check_slices(fns[f], TG_DROPOUT_COUNTER);
    }
    /* the slice survives reseeding, and (0, 1) draws whole masks again */
    tg_generator *g = tg_generator_new(1);
    int64_t i, n;
    assert_int_equal(tg_generator_set_batch_slice(g, 2, 3), TG_OK);
    tg_generator_seed(g, 5);
    tg_generator_batch_slice(g, &i, &n);
    assert_true(i == 2 && n == 3);
    tu_assert_status_error(tg_generator_set_batch_slice(g, 3, 3), "part 3 of 3 does not exist");
    tu_assert_status_error(tg_generator_set_batch_slice(g, 0, 0), "part 0 of 0 does not exist");
    assert_int_equal(tg_generator_set_batch_slice(g, 0, 1), TG_OK);
    tg_generator_batch_slice(g, &i, &n);
    assert_true(i == 0 && n == 1);
    tg_generator_free(g);
}

static tg_gpt_config small_config(double drop)
{
    return (tg_gpt_config){.vocab_size = 97, .context_length = 16, .emb_dim = 32, .n_heads = 4, .n_layers = 2,
                           .drop_rate = drop, .qkv_bias = false};
}

/* The plan: every parameter once, in reverse registration order; a bucket
 * closes once it reaches its cap (1 MiB for the first); each .grad a
 * zeroed view that the ddp owns; one ddp at a time. */
static void test_buckets(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *tp = tg_tape_new();
    tg_gpt_config cfg = small_config(0);
    tg_manual_seed(3);
    tg_module *gpt = tg_gpt_new(mt, &cfg);
    tg_named_list pl;
    assert_int_equal(tg_module_named_parameters(tp, gpt, &pl), TG_OK);
    size_t caps[3] = {4096, 40000, 0};
    for (int c = 0; c < 3; c++) {
        tg_dist_ddp *d = tg_dist_ddp_new(gpt, (tg_dist_ddp_options){caps[c]});
        tu_assert_ok(d);
        tu_assert_null_error(tg_dist_ddp_new(gpt, (tg_dist_ddp_options){0}), "another tg_dist_ddp is active");
        tg_dist_ddp_stats s;
        assert_int_equal(tg_dist_ddp_get_stats(d, &s), TG_OK);
        assert_int_equal(s.params, pl.n);
        int64_t next = 0;
        size_t total = 0, cap = caps[c] ? caps[c] : (size_t)25 << 20;
        for (int64_t k = 0; k < s.buckets; k++) {
            int64_t first, count;
            size_t bytes;
            assert_int_equal(tg_dist_ddp_bucket(d, k, &first, &count, &bytes), TG_OK);
            assert_int_equal(first, next);
            assert_true(count >= 1);
            size_t limit = k == 0 && cap > ((size_t)1 << 20) ? (size_t)1 << 20 : cap;
            const tg_tensor *last = pl.tensors[pl.n - 1 - (first + count - 1)];
            size_t last_bytes = (size_t)tg_numel(last) * 4;
            assert_true(bytes - last_bytes < limit);                  /* it was open when the last one came */
            if (k + 1 < s.buckets) assert_true(bytes >= limit);       /* and closed because it was full */
            for (int64_t e = first; e < first + count; e++) {
                const tg_tensor *p = pl.tensors[pl.n - 1 - e];
                assert_non_null(p->grad);
                assert_true(tg_same_shape(p->grad, p));
                for (int64_t j = 0; j < tg_numel(p); j++) assert_true(tg_item_at(p->grad, j) == 0.0);
            }
            next += count;
            total += bytes;
        }
        assert_int_equal(next, pl.n);
        assert_int_equal(total, s.bytes);
        if (c == 0) assert_true(s.buckets > 5);
        if (c == 2) assert_int_equal(s.buckets, 1);
        tu_assert_status_error(tg_dist_ddp_bucket(d, s.buckets, &next, &next, &total), "bucket");
        tg_dist_ddp_free(d);
        for (int i = 0; i < pl.n; i++) assert_null(pl.tensors[i]->grad);
    }
    /* frozen parameters are left out: only the last block, the final norm
     * and the head of a chapter-6 classifier, and they keep no .grad */
    assert_int_equal(tg_gpt_prepare_finetune(mt, gpt, 2, 3, 0, 0), TG_OK);
    assert_int_equal(tg_module_named_parameters(tp, gpt, &pl), TG_OK);
    int64_t trainable = 0, bytes = 0;
    for (int i = 0; i < pl.n; i++)
        if (pl.tensors[i]->requires_grad) trainable++, bytes += 4 * tg_numel(pl.tensors[i]);
    assert_true(trainable > 0 && trainable < pl.n);
    tg_dist_ddp *d = tg_dist_ddp_new(gpt, (tg_dist_ddp_options){0});
    tu_assert_ok(d);
    tg_dist_ddp_stats s;
    assert_int_equal(tg_dist_ddp_get_stats(d, &s), TG_OK);
    assert_int_equal(s.params, trainable);
    assert_int_equal((int64_t)s.bytes, bytes);
    for (int i = 0; i < pl.n; i++)
        if (!pl.tensors[i]->requires_grad) assert_null(pl.tensors[i]->grad);
    tg_dist_ddp_free(d);
    tg_tape_free(tp);
    tg_tape_free(mt);
}

/* cross_entropy(gpt(x).flatten(0, 1), y.flatten()) */
static tg_tensor *lm_loss(tg_tape *tp, tg_module *gpt, tg_tensor *x, tg_tensor *y)
{
    tg_tensor *logits = tg_module_forward(tp, gpt, x);
    if (!logits) return NULL;
    int64_t flat[2] = {-1, logits->shape[2]}, n = -1;
    return tg_cross_entropy(tp, tg_view(tp, logits, 2, flat), tg_view(tp, y, 1, &n), TG_REDUCE_MEAN);
}

static tg_tensor *random_ids(tg_tape *tp, int64_t b, int64_t t, int64_t vocab, tg_generator *g)
{
    int64_t shape[2] = {b, t};
    tg_tensor *ids = tg_empty(tp, TG_I64, 2, shape);
    for (int64_t i = 0; i < b * t; i++) ((int64_t *)ids->data)[i] = (int64_t)(tg_generator_random(g) % (uint32_t)vocab);
    return ids;
}

/* Trains `steps` AdamW steps of a small GPT on global batches of 4: one
 * model on the whole batch (the one-process reference), one with ddp on
 * this rank's slice (its blocks recomputed in backward when asked: the
 * parameters' gradients then come from each block's replay). Returns the
 * worst parameter difference seen. */
static double train_both(double drop, size_t bucket_bytes, int steps, bool fused, bool recompute)
{
    tg_tape *mt = tg_tape_new(), *step = tg_tape_new();
    tg_gpt_config cfg = small_config(drop);
    tg_generator *gref = tg_generator_new(11), *gddp = tg_generator_new(11), *data = tg_generator_new(5);
    tg_manual_seed(123);
    tg_module *ref = tg_gpt_new(mt, &cfg);
    tg_manual_seed(123);
    tg_module *gpt = tg_gpt_new(mt, &cfg);
    tu_assert_ok(ref);
    tu_assert_ok(gpt);
    tg_module_set_generator(ref, gref);
    tg_module_set_generator(gpt, gddp);
    tg_module_set_fused(ref, fused);
    tg_module_set_fused(gpt, fused);
    assert_int_equal(tg_gpt_set_recompute(gpt, recompute), TG_OK);
    tg_dist_ddp *ddp = tg_dist_ddp_new(gpt, (tg_dist_ddp_options){bucket_bytes});
    tu_assert_ok(ddp);
    tg_adam_options o = {1e-3, {0.9, 0.999}, 1e-8, 0.1, false};
    tg_optimizer *oref = tg_adamw_new(mt, ref, o), *oddp = tg_adamw_new(mt, gpt, o);
    tg_named_list pr, pd;
    assert_int_equal(tg_module_named_parameters(mt, ref, &pr), TG_OK);
    assert_int_equal(tg_module_named_parameters(mt, gpt, &pd), TG_OK);
    double worst = 0;
    int size = tg_dist_size();
    for (int s = 0; s < steps; s++) {
        tg_tensor *x = random_ids(step, 4, 16, cfg.vocab_size, data), *y = random_ids(step, 4, 16, cfg.vocab_size, data);
        /* the reference: the whole batch */
        tg_optimizer_zero_grad(oref);
        tg_tensor *lr = lm_loss(step, ref, x, y);
        tu_assert_ok(lr);
        assert_int_equal(tg_backward(lr, NULL, false), TG_OK);
        assert_int_equal(tg_optimizer_step(oref), TG_OK);
        /* this rank's slice */
        tg_optimizer_zero_grad(oddp);
        tg_tensor *ld = lm_loss(step, gpt, tg_dist_batch_slice(step, x), tg_dist_batch_slice(step, y));
        tu_assert_ok(ld);
        assert_int_equal(tg_backward(ld, NULL, false), TG_OK);
        assert_int_equal(tg_dist_ddp_sync(ddp), TG_OK);
        assert_int_equal(tg_optimizer_step(oddp), TG_OK);
        double loss = tg_item(ld);
        assert_int_equal(tg_dist_all_reduce_f64(&loss, 1, TG_DIST_SUM), TG_OK);
        loss /= size;
        double want = tg_item(lr);
        assert_true(fabs(loss - want) <= 1e-5 * fabs(want));
        tg_dist_ddp_stats st;
        assert_int_equal(tg_dist_ddp_get_stats(ddp, &st), TG_OK);
        assert_int_equal(st.syncs, s + 1);
        assert_int_equal(st.started_in_backward, st.buckets); /* every bucket started during backward */
        for (int i = 0; i < pd.n; i++) {
            tu_assert_close(pd.tensors[i], pr.tensors[i], 1e-4, 2e-5, pd.names[i]);
            /* every rank holds the same parameters, bit for bit */
            tg_tensor *mine = tg_contiguous(step, pd.tensors[i]);
            tg_tensor *r0 = tg_clone(step, mine);
            assert_int_equal(tg_dist_broadcast(r0->data, (size_t)tg_numel(r0) * 4, 0), TG_OK);
            tu_assert_close(mine, r0, 0, 0, "rank 0's parameter");
            for (int64_t e = 0; e < tg_numel(mine); e++) {
                double dlt = fabs(tg_item_at(pd.tensors[i], e) - tg_item_at(pr.tensors[i], e));
                if (dlt > worst) worst = dlt;
            }
        }
        tg_tape_reset(step);
    }
    tg_dist_ddp_free(ddp);
    tg_generator_free(gref);
    tg_generator_free(gddp);
    tg_generator_free(data);
    tg_tape_free(step);
    tg_tape_free(mt);
    return worst;
}

static void test_train_equals_one_process(void **state)
{
    (void)state;
    struct {
        double drop;
        size_t bucket;
        bool fused, recompute;
    } runs[5] = {{0.0, 4096, true, false}, {0.1, 4096, true, false}, {0.1, 0, true, false}, {0.1, 4096, false, false},
                 {0.1, 4096, true, true}};
    for (int r = 0; r < 5; r++) {
        double worst = train_both(runs[r].drop, runs[r].bucket, 4, runs[r].fused, runs[r].recompute);
        if (tg_dist_rank() == 0)
            printf("ranks %d, dropout %.1f, buckets of %zu bytes, %s%s: worst parameter difference %.3g\n",
                   tg_dist_size(), runs[r].drop, runs[r].bucket ? runs[r].bucket : (size_t)25 << 20,
                   runs[r].fused ? "fused" : "composed", runs[r].recompute ? ", recomputed" : "", worst);
    }
}

static void test_errors(void **state)
{
    (void)state;
    tg_tape *tp = tg_tape_new();
    int64_t shape[2] = {tg_dist_size() + 1, 3}, start, count;
    tg_tensor *x = tg_zeros(tp, TG_F32, 2, shape);
    if (tg_dist_size() > 1) {
        tu_assert_null_error(tg_dist_batch_slice(tp, x), "batch of", "not divisible by the");
        tu_assert_status_error(tg_dist_batch_range(3, &start, &count), "not divisible");
    }
    assert_int_equal(tg_dist_batch_range(4 * tg_dist_size(), &start, &count), TG_OK);
    assert_true(count == 4 && start == 4 * tg_dist_rank());
    tu_assert_status_error(tg_dist_broadcast(&start, sizeof start, tg_dist_size()), "root");
    tu_assert_status_error(tg_dist_all_reduce_f64(NULL, 3, TG_DIST_SUM), "bad buffer");
    int64_t ishape = 2;
    tu_assert_status_error(tg_dist_all_reduce(tg_zeros(tp, TG_I64, 1, &ishape), TG_DIST_SUM), "float32 or float64");
    tu_assert_null_error(tg_dist_ddp_new(NULL, (tg_dist_ddp_options){0}), "NULL model");
    /* every rank passed / one rank failed: everyone learns it, nobody hangs */
    int failed;
    assert_int_equal(tg_dist_agree(TG_OK, &failed), TG_OK);
    assert_int_equal(failed, -1);
    int mine = tg_dist_rank() == tg_dist_size() - 1 ? TG_EINVAL : TG_OK;
    int st = tg_dist_agree(mine, &failed);
    assert_int_equal(failed, tg_dist_size() - 1);
    if (mine == TG_OK) tu_assert_status_error(st, "failed");
    else assert_int_equal(st, TG_EINVAL);
    /* sums over the ranks */
    double v[2] = {1.0, (double)tg_dist_rank()};
    assert_int_equal(tg_dist_all_reduce_f64(v, 2, TG_DIST_SUM), TG_OK);
    assert_true(v[0] == tg_dist_size() && v[1] == tg_dist_size() * (tg_dist_size() - 1) / 2.0);
    v[0] = tg_dist_rank();
    assert_int_equal(tg_dist_all_reduce_f64(v, 1, TG_DIST_MAX), TG_OK);
    assert_true(v[0] == tg_dist_size() - 1);
    tg_tape_free(tp);
}

/* A gradient replaced after tg_dist_ddp_new, or two backward calls
 * without a sync, are refused (every rank fails alike: no collective is left
 * waiting). */
static void test_misuse(void **state)
{
    (void)state;
    tg_tape *mt = tg_tape_new(), *step = tg_tape_new();
    tg_module *lin = tg_linear_new(mt, 3, 2, true);
    tg_dist_ddp *d = tg_dist_ddp_new(lin, (tg_dist_ddp_options){0});
    tu_assert_ok(d);
    int64_t shape[2] = {2 * tg_dist_size(), 3};
    tg_tensor *x = tg_dist_batch_slice(step, tg_rand(step, TG_F32, 2, shape, NULL));
    assert_int_equal(tg_backward(tg_sum(step, tg_module_forward(step, lin, x)), NULL, false), TG_OK);
    tu_assert_status_error(tg_backward(tg_sum(step, tg_module_forward(step, lin, x)), NULL, false),
                           "backward ran again before tg_dist_ddp_sync");
    tu_assert_status_error(tg_dist_ddp_sync(d), "backward failed");
    assert_int_equal(tg_backward(tg_sum(step, tg_module_forward(step, lin, x)), NULL, false), TG_OK);
    assert_int_equal(tg_dist_ddp_sync(d), TG_OK);
    assert_int_equal(tg_module_to_dtype(mt, lin, TG_F64), TG_OK);
    tu_assert_status_error(tg_dist_ddp_sync(d), "gradient was replaced");
    tg_dist_ddp_free(d);
    tg_tape_free(step);
    tg_tape_free(mt);
}

int main(int argc, char **argv)
{
    if (tg_dist_init(&argc, &argv) != TG_OK) {
        fprintf(stderr, "test_dist: %s\n", tg_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_slices),
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_train_equals_one_process),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    tg_dist_finalize();
    return failed;
}
