/* Checkpoints (tg_checkpoint_save / tg_checkpoint_load, optim.h).
 *
 * (a) save, then load into a fresh model, optimizer and generator: every
 *     byte of the model's state_dict, the optimizer's state_dict and the
 *     generator's state comes back, with the progress and the user tensors;
 *     the file holds the documented keys.
 * (b) a short training run with dropout, saved halfway and resumed in a new
 *     model, optimizer and a reseeded generator, ends bit for bit where the
 *     uninterrupted run ends.
 * (c) each documented error (NULL arguments, a missing or truncated file, a
 *     missing key, another format, a corrupt progress record or generator
 *     state, a mis-shaped model or user tensor, an identity value that
 *     differs, an optimizer state of another kind) returns its status and
 *     message, and leaves the model, optimizer, generator and checkpoint
 *     struct exactly as they were.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static char g_tmpdir[64];

static const char *tmp_path(char *buf, size_t n, const char *name)
{
    if (!g_tmpdir[0]) {
        strcpy(g_tmpdir, "/tmp/tapegrad_test_checkpoint_XXXXXX");
        if (!mkdtemp(g_tmpdir)) fail_msg("mkdtemp failed");
    }
    snprintf(buf, n, "%s/%s", g_tmpdir, name);
    return buf;
}

/* ---- a small run: GPT with dropout, AdamW, ids that depend on the step ---------------------- */

#define VOCAB 23
#define CTX 6
#define BATCH 2

static const tg_gpt_config g_cfg = {VOCAB, CTX, 8, 2, 1, 0.2, false};

typedef struct {
    tg_tape *model_tape, *step_tape;
    tg_module *gpt;
    tg_optimizer *opt;
} run;

static void run_new(run *r, uint64_t seed, const tg_gpt_config *cfg)
{
    r->model_tape = tg_tape_new();
    r->step_tape = tg_tape_new();
    tg_manual_seed(seed);
    r->gpt = tg_gpt_new(r->model_tape, cfg);
    tu_assert_ok(r->gpt);
    tg_adam_options o = tg_adamw_defaults();
    o.lr = 1e-2;
    r->opt = tg_adamw_new(r->model_tape, r->gpt, o);
    tu_assert_ok(r->opt);
}

static void run_free(run *r)
{
    tg_tape_free(r->step_tape);
    tg_tape_free(r->model_tape);
}

/* One step of the book's loop on ids made from the step's index; dropout
 * draws from the default generator. */
static void train_step(run *r, int64_t step)
{
    int64_t ids[BATCH * (CTX + 1)], x[BATCH * CTX], y[BATCH * CTX], shape[2] = {BATCH, CTX}, flat[2] = {-1, VOCAB};
    for (int i = 0; i < BATCH * (CTX + 1); i++) ids[i] = (step * 7 + i * 13 + i * i) % VOCAB;
    for (int b = 0; b < BATCH; b++)
        for (int t = 0; t < CTX; t++) x[b * CTX + t] = ids[b * (CTX + 1) + t], y[b * CTX + t] = ids[b * (CTX + 1) + t + 1];
    tg_tape *tp = r->step_tape;
    tg_optimizer_zero_grad(r->opt);
    tg_tensor *logits = tg_module_forward(tp, r->gpt, tg_from_data(tp, TG_I64, 2, shape, x));
    int64_t n = -1;
    tg_tensor *loss = tg_cross_entropy(tp, tg_view(tp, logits, 2, flat), tg_view(tp, tg_from_data(tp, TG_I64, 2, shape, y), 1, &n),
                                       TG_REDUCE_MEAN);
    tu_assert_ok(loss);
    assert_int_equal(tg_backward(loss, NULL, false), TG_OK);
    assert_int_equal(tg_optimizer_step(r->opt), TG_OK);
    tg_tape_reset(tp);
}

/* ---- snapshots: every byte that a load may change ----------------------------------------- */

typedef struct {
    uint8_t *bytes;
    size_t n;
} snap;

static void snap_list(snap *s, const tg_named_list *l)
{
    for (int i = 0; i < l->n; i++) {
        const tg_tensor *t = l->tensors[i];
        size_t len = strlen(l->names[i]) + 1, nb = (size_t)tg_numel(t) * tg_dtype_size(t->dtype);
        s->bytes = realloc(s->bytes, s->n + len + nb);
        assert_non_null(s->bytes);
        memcpy(s->bytes + s->n, l->names[i], len);
        memcpy(s->bytes + s->n + len, tg_data_ptr(t), nb);
        s->n += len + nb;
    }
}

static snap snapshot(const tg_module *m, const tg_optimizer *opt, const tg_generator *g)
{
    snap s = {NULL, 0};
    tg_tape *tp = tg_tape_new();
    tg_named_list l;
    assert_int_equal(tg_module_state_dict(tp, m, &l), TG_OK);
    snap_list(&s, &l);
    if (opt) {
        assert_int_equal(tg_optimizer_state_dict(tp, opt, &l), TG_OK);
        snap_list(&s, &l);
    }
    s.bytes = realloc(s.bytes, s.n + TG_GENERATOR_STATE_BYTES);
    assert_non_null(s.bytes);
    assert_int_equal(tg_generator_get_state(g, s.bytes + s.n, TG_GENERATOR_STATE_BYTES), TG_OK);
    s.n += TG_GENERATOR_STATE_BYTES;
    tg_tape_free(tp);
    return s;
}

static void assert_same_snap(snap a, snap b)
{
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.bytes, b.bytes, a.n);
    free(a.bytes);
    free(b.bytes);
}

/* ---- (a) round trip ---------------------------------------------------------------------- */

static const tg_checkpoint_value g_identity[3] = {
    {.name = "batch", .i = BATCH},
    {.name = "lr", .is_float = true, .f = 1e-2},
    {.name = "data digest", .i = -77, .differs = "was trained on other data"},
};

static void test_round_trip(void **state)
{
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "round_trip.ckpt");
    run a;
    run_new(&a, 123, &g_cfg);
    for (int64_t s = 0; s < 3; s++) train_step(&a, s);
    tg_generator *g = tg_generator_new(5);
    for (int i = 0; i < 1000; i++) tg_generator_random(g); /* somewhere in its stream */
    tg_tape *tp = tg_tape_new();
    int64_t hn = 3, sn = 4;
    double hist[3] = {9.5, 8.25, -1.0 / 3};
    float extra[4] = {1, 2, 3, 4};
    tg_tensor *user[2] = {tg_from_data(tp, TG_F64, 1, &hn, hist), tg_from_data(tp, TG_F32, 1, &sn, extra)};
    const char *user_names[2] = {"history", "extra"};
    tg_checkpoint ck = {.model = a.gpt, .optimizer = a.opt, .generator = g, .epoch = 3, .step = 41,
                        .tokens_seen = 1234, .n_values = 3, .values = g_identity,
                        .tensors = {.n = 2, .names = user_names, .tensors = user}};
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_OK);
    snap want = snapshot(a.gpt, a.opt, g);

    /* the file's layout: model., optimizer., train.*, rng.default, the user's names */
    tg_safetensors f;
    assert_int_equal(tg_safetensors_load(tp, path, &f), TG_OK);
    const char *keys[] = {"model.tok_emb.weight", "model.out_head.weight", "optimizer.param_groups.0.lr",
                          "optimizer.state.0.exp_avg", "train.progress", "train.settings", "train.settings_f64",
                          "rng.default", "history", "extra"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) assert_non_null(tg_safetensors_get(&f, keys[i]));
    const int64_t *p = tg_safetensors_get(&f, "train.progress")->data;
    assert_true(p[0] == 1 && p[1] == 3 && p[2] == 41 && p[3] == 1234);
    const tg_tensor *ints = tg_safetensors_get(&f, "train.settings");
    assert_int_equal(tg_numel(ints), 2);
    assert_true(((const int64_t *)ints->data)[0] == BATCH && ((const int64_t *)ints->data)[1] == -77);
    assert_true(((const double *)tg_safetensors_get(&f, "train.settings_f64")->data)[0] == 1e-2);

    /* another model, a fresh optimizer, another generator state */
    run b;
    run_new(&b, 999, &g_cfg);
    tg_generator *g2 = tg_generator_new(77);
    float into[4] = {0};
    tg_tensor *back[2] = {NULL, tg_from_data(tp, TG_F32, 1, &sn, into)};
    tg_checkpoint in = {.model = b.gpt, .optimizer = b.opt, .generator = g2, .n_values = 3, .values = g_identity,
                        .tensors = {.n = 2, .names = user_names, .tensors = back}};
    tg_tape *out_tp = tg_tape_new();
    assert_int_equal(tg_checkpoint_load(out_tp, &in, path), TG_OK);
    assert_same_snap(want, snapshot(b.gpt, b.opt, g2));
    assert_true(in.epoch == 3 && in.step == 41 && in.tokens_seen == 1234);
    assert_non_null(back[0]);
    assert_true(back[0]->tape == out_tp && back[0]->dtype == TG_F64 && tg_numel(back[0]) == 3);
    assert_memory_equal(back[0]->data, hist, sizeof hist);
    assert_memory_equal(tg_data_ptr(back[1]), extra, sizeof extra);
    assert_true(tg_optimizer_lr(b.opt) == 1e-2);

    /* no generator, no optimizer, no identity, step -1 (before the first step) */
    ck = (tg_checkpoint){.model = a.gpt, .step = -1};
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_OK);
    in = (tg_checkpoint){.model = b.gpt, .step = 7};
    assert_int_equal(tg_checkpoint_load(NULL, &in, path), TG_OK);
    assert_true(in.epoch == 0 && in.step == -1 && in.tokens_seen == 0);

    tg_tape_free(out_tp);
    tg_tape_free(tp);
    tg_generator_free(g);
    tg_generator_free(g2);
    run_free(&a);
    run_free(&b);
    unlink(path);
}

/* ---- (b) resumed training equals the uninterrupted run ------------------------------------- */

static void test_resume_bit_exact(void **state)
{
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "resume.ckpt");
    enum { STEPS = 6, HALF = 3 };
    run full;
    run_new(&full, 123, &g_cfg);
    for (int64_t s = 0; s < STEPS; s++) train_step(&full, s);
    snap want = snapshot(full.gpt, full.opt, tg_default_generator());

    run first;
    run_new(&first, 123, &g_cfg);
    for (int64_t s = 0; s < HALF; s++) train_step(&first, s);
    tg_checkpoint ck = {.model = first.gpt, .optimizer = first.opt, .generator = tg_default_generator(), .step = HALF,
                        .n_values = 3, .values = g_identity};
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_OK);

    run second; /* another process: other weights, a fresh optimizer, the generator elsewhere */
    run_new(&second, 4242, &g_cfg);
    tg_manual_seed(1);
    tg_checkpoint in = {.model = second.gpt, .optimizer = second.opt, .generator = tg_default_generator(),
                        .n_values = 3, .values = g_identity};
    assert_int_equal(tg_checkpoint_load(NULL, &in, path), TG_OK);
    assert_int_equal(in.step, HALF);
    for (int64_t s = in.step; s < STEPS; s++) train_step(&second, s);
    assert_same_snap(want, snapshot(second.gpt, second.opt, tg_default_generator()));
    run_free(&full);
    run_free(&first);
    run_free(&second);
    unlink(path);
}

/* ---- (c) errors leave everything unchanged -------------------------------------------------- */

/* A saved checkpoint with one tensor's bytes replaced (edit(data, numel)). */
static void edited_copy(const char *from, const char *to, const char *key, void (*edit)(void *, int64_t))
{
    tg_tape *tp = tg_tape_new();
    tg_safetensors f;
    assert_int_equal(tg_safetensors_load(tp, from, &f), TG_OK);
    tg_named_tensor *items = tg_tape_alloc(tp, sizeof *items * (size_t)f.n, false);
    for (int i = 0; i < f.n; i++) {
        items[i] = (tg_named_tensor){f.names[i], f.tensors[i]};
        if (strcmp(f.names[i], key) == 0) edit(f.tensors[i]->data, tg_numel(f.tensors[i]));
    }
    assert_int_equal(tg_safetensors_save(to, items, f.n), TG_OK);
    tg_tape_free(tp);
}

static void format_2(void *d, int64_t n) { (void)n, ((int64_t *)d)[0] = 2; }
static void epoch_negative(void *d, int64_t n) { (void)n, ((int64_t *)d)[1] = -1; }
static void zero_bytes(void *d, int64_t n) { memset(d, 0, (size_t)n); }

/* The first three quarters of a file, as another file. */
static void truncated_copy(const char *from, const char *to)
{
    size_t len;
    char *buf = tu_read_file(from, &len);
    size_t n = len / 4 * 3;
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
}

static void assert_same_fields(const tg_checkpoint *a, const tg_checkpoint *b)
{
    assert_ptr_equal(a->model, b->model);
    assert_ptr_equal(a->optimizer, b->optimizer);
    assert_ptr_equal(a->generator, b->generator);
    assert_true(a->epoch == b->epoch && a->step == b->step && a->tokens_seen == b->tokens_seen);
    assert_true(a->n_values == b->n_values && a->values == b->values);
    assert_true(a->tensors.n == b->tensors.n && a->tensors.names == b->tensors.names &&
                a->tensors.tensors == b->tensors.tensors);
}

/* Loading path into ck fails with status and every given substring; the model,
 * optimizer, default generator and the checkpoint struct are unchanged. */
#define assert_load_fails(tp, ck, path, status, ...)                                                             \
    do {                                                                                                         \
        snap before_ = snapshot((ck)->model, (ck)->optimizer, tg_default_generator());                          \
        tg_checkpoint copy_ = *(ck);                                                                             \
        tg_tensor *slots_[4] = {NULL};                                                                           \
        for (int i_ = 0; i_ < (ck)->tensors.n && i_ < 4; i_++) slots_[i_] = (ck)->tensors.tensors[i_];           \
        int st_ = tg_checkpoint_load((tp), (ck), (path));                                                        \
        assert_int_equal(st_, (status));                                                                         \
        tu_assert_status_error(st_, __VA_ARGS__);                                                                \
        assert_same_fields(&copy_, (ck));                                                                        \
        for (int i_ = 0; i_ < (ck)->tensors.n && i_ < 4; i_++) assert_ptr_equal(slots_[i_], (ck)->tensors.tensors[i_]); \
        assert_same_snap(before_, snapshot((ck)->model, (ck)->optimizer, tg_default_generator()));              \
    } while (0)

static void test_load_errors(void **state)
{
    (void)state;
    char good[128], other[128], nofile[128];
    tmp_path(good, sizeof good, "good.ckpt");
    tmp_path(other, sizeof other, "other.ckpt");
    tmp_path(nofile, sizeof nofile, "no/such/file.ckpt");
    run a, b;
    run_new(&a, 123, &g_cfg);
    train_step(&a, 0);
    tg_tape *tp = tg_tape_new();
    int64_t hn = 2;
    double hist[2] = {1, 2};
    tg_tensor *user[1] = {tg_from_data(tp, TG_F64, 1, &hn, hist)};
    const char *user_names[1] = {"history"};
    tg_checkpoint ck = {.model = a.gpt, .optimizer = a.opt, .generator = tg_default_generator(), .epoch = 1,
                        .step = 0, .n_values = 3, .values = g_identity,
                        .tensors = {.n = 1, .names = user_names, .tensors = user}};
    assert_int_equal(tg_checkpoint_save(&ck, good), TG_OK);

    run_new(&b, 7, &g_cfg);
    train_step(&b, 5); /* an optimizer with state of its own */
    tg_tensor *slot[1] = {NULL};
    tg_checkpoint in = {.model = b.gpt, .optimizer = b.opt, .generator = tg_default_generator(), .epoch = 9,
                        .n_values = 3, .values = g_identity, .tensors = {.n = 1, .names = user_names, .tensors = slot}};

    /* the file itself */
    assert_load_fails(tp, &in, nofile, TG_EIO, "safetensors_load: cannot open", nofile);
    truncated_copy(good, other);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "safetensors_load", "beyond the data buffer");
    /* a state_dict is not a checkpoint */
    assert_int_equal(tg_module_save(a.gpt, other), TG_OK);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "is not a tapegrad checkpoint (no 'train.progress')");
    edited_copy(good, other, "train.progress", format_2);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "has checkpoint format 2, this tapegrad writes 1");
    edited_copy(good, other, "train.progress", epoch_negative);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "corrupt progress record");
    edited_copy(good, other, "rng.default", zero_bytes);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "the generator state: generator_set_state");

    /* missing parts: no generator, no optimizer, no user tensor */
    tg_checkpoint part = ck;
    part.generator = NULL;
    assert_int_equal(tg_checkpoint_save(&part, other), TG_OK);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "(no 'rng.default')");
    part = ck;
    part.optimizer = NULL;
    assert_int_equal(tg_checkpoint_save(&part, other), TG_OK);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "no 'optimizer.' keys");
    part = ck;
    part.tensors.n = 0;
    assert_int_equal(tg_checkpoint_save(&part, other), TG_OK);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "is not a tapegrad checkpoint (no 'history')");

    /* identity: an integer, a float, one with its own message, another count */
    tg_checkpoint_value id[3];
    memcpy(id, g_identity, sizeof id);
    id[0].i = 3;
    in.values = id;
    assert_load_fails(tp, &in, good, TG_EFORMAT, "belongs to another run: it has batch 2, this run 3");
    memcpy(id, g_identity, sizeof id);
    id[1].f = 2e-2;
    assert_load_fails(tp, &in, good, TG_EFORMAT, "belongs to another run: it has lr 0.01, this run 0.02");
    memcpy(id, g_identity, sizeof id);
    id[2].i = 5;
    assert_load_fails(tp, &in, good, TG_EFORMAT, "'", good, "' was trained on other data");
    in.n_values = 2;
    assert_load_fails(tp, &in, good, TG_EFORMAT, "it has 2 integer identity values, this run 1");
    in.n_values = 3;
    in.values = g_identity;

    /* a user tensor of another shape or dtype */
    int64_t three = 3;
    slot[0] = tg_zeros(tp, TG_F64, 1, &three);
    assert_load_fails(tp, &in, good, TG_EFORMAT, "'history' is float64");
    slot[0] = tg_zeros(tp, TG_F32, 1, &hn);
    assert_load_fails(tp, &in, good, TG_EFORMAT, "'history' is float64");
    slot[0] = NULL;

    /* a model of another size: the model's own message */
    run c;
    tg_gpt_config wide = g_cfg;
    wide.emb_dim = 12;
    run_new(&c, 7, &wide);
    tg_checkpoint inc = in;
    inc.model = c.gpt, inc.optimizer = c.opt;
    assert_load_fails(tp, &inc, good, TG_EFORMAT, "the model: load_state_dict: size mismatch");

    /* an optimizer state of another kind, refused after the model has loaded:
     * the model is put back */
    tg_optimizer *sgd = tg_sgd_new(a.model_tape, a.gpt, (tg_sgd_options){.lr = 0.1, .momentum = 0.9});
    tu_assert_ok(sgd);
    train_step(&(run){a.model_tape, a.step_tape, a.gpt, sgd}, 1);
    part = ck;
    part.optimizer = sgd;
    assert_int_equal(tg_checkpoint_save(&part, other), TG_OK);
    assert_load_fails(tp, &in, other, TG_EFORMAT, "the optimizer: AdamW load_state_dict", "momentum_buffer");

    /* NULL arguments */
    assert_load_fails(NULL, &in, good, TG_EINVAL, "read into a tape, and tp is NULL");
    tu_assert_status_error(tg_checkpoint_load(tp, NULL, good), "checkpoint_load: NULL");
    tu_assert_status_error(tg_checkpoint_load(tp, &in, NULL), "checkpoint_load: NULL");
    inc = in;
    inc.model = NULL;
    tu_assert_status_error(tg_checkpoint_load(tp, &inc, good), "checkpoint_load: NULL");
    inc = in;
    inc.values = NULL;
    assert_int_equal(tg_checkpoint_load(tp, &inc, good), TG_EINVAL);
    tu_assert_status_error(TG_EINVAL, "3 identity values without an array");

    /* after all that, the good file still loads */
    assert_int_equal(tg_checkpoint_load(tp, &in, good), TG_OK);
    assert_int_equal(in.epoch, 1);
    assert_memory_equal(slot[0]->data, hist, sizeof hist);

    run_free(&a);
    run_free(&b);
    run_free(&c);
    tg_tape_free(tp);
    unlink(good);
    unlink(other);
}

static void test_save_errors(void **state)
{
    (void)state;
    char path[128], nodir[128];
    tmp_path(path, sizeof path, "save.ckpt");
    tmp_path(nodir, sizeof nodir, "no/such/dir/save.ckpt");
    run a;
    run_new(&a, 123, &g_cfg);
    tg_checkpoint ck = {.model = a.gpt, .optimizer = a.opt};
    assert_int_equal(tg_checkpoint_save(NULL, path), TG_EINVAL);
    tu_assert_status_error(TG_EINVAL, "checkpoint_save: NULL checkpoint, model or path");
    assert_int_equal(tg_checkpoint_save(&ck, NULL), TG_EINVAL);
    ck.model = NULL;
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_EINVAL);
    ck.model = a.gpt;
    tg_tensor *none[1] = {NULL};
    const char *names[1] = {"history"};
    ck.tensors = (tg_named_list){.n = 1, .names = names, .tensors = none};
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_EINVAL);
    tu_assert_status_error(TG_EINVAL, "user tensor 'history' is NULL");
    /* a user tensor under one of the checkpoint's own names */
    int64_t one = 1;
    tg_tensor *dup[1] = {tg_zeros(a.step_tape, TG_I64, 1, &one)};
    names[0] = "train.progress";
    ck.tensors = (tg_named_list){.n = 1, .names = names, .tensors = dup};
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_EINVAL);
    tu_assert_status_error(TG_EINVAL, "duplicate tensor name 'train.progress'");
    assert_int_equal(access(path, F_OK), -1);
    ck.tensors = (tg_named_list){0};
    tg_checkpoint_value unnamed = {.i = 1};
    ck.n_values = 1, ck.values = &unnamed;
    assert_int_equal(tg_checkpoint_save(&ck, path), TG_EINVAL);
    tu_assert_status_error(TG_EINVAL, "identity value 0 has no name");
    ck.n_values = 0;
    /* a directory that does not exist: safetensors_save's message, no file */
    assert_int_equal(tg_checkpoint_save(&ck, nodir), TG_EIO);
    tu_assert_status_error(TG_EIO, "safetensors_save");
    assert_int_equal(access(nodir, F_OK), -1);
    run_free(&a);
}

static int teardown(void **state)
{
    (void)state;
    if (g_tmpdir[0]) rmdir(g_tmpdir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_resume_bit_exact),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_save_errors),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
