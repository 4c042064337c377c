/* tapegrad attention: one chapter-3 module, built after manual_seed(--seed)
 * exactly as PyTorch builds it, run on the book's input or a random one. */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tapegrad.h>

static const char *help =
    "usage: tapegrad attention --module sa-v1|sa-v2|causal|mha-wrapper|mha [options]\n"
    "\n"
    "Builds the module after manual_seed(--seed), drawing its weights as PyTorch\n"
    "does, runs it on the input and prints the output as PyTorch prints it.\n"
    "\n"
    "  --module NAME     sa-v1 (SelfAttention_v1), sa-v2 (SelfAttention_v2),\n"
    "                    causal (CausalAttention), mha-wrapper\n"
    "                    (MultiHeadAttentionWrapper), mha (MultiHeadAttention)\n"
    "  --seed N          manual_seed before construction (123)\n"
    "  --d-in N          input features (3)\n"
    "  --d-out N         output features (2); for mha-wrapper per head\n"
    "  --heads N         heads of mha / mha-wrapper (2)\n"
    "  --context N       context_length (default: the number of tokens)\n"
    "  --dropout P       dropout probability in [0, 1) (0)\n"
    "  --qkv-bias        bias in the query/key/value Linear layers\n"
    "  --eval            eval mode (dropout off)\n"
    "  --input SPEC      book (default: the 6x3 sentence; stacked twice, (2,6,3),\n"
    "                    for the batched modules), rand:SEED:T for sa-v1/sa-v2,\n"
    "                    rand:SEED:B:T for causal/mha-wrapper/mha (torch.rand with\n"
    "                    a generator seeded with SEED)\n"
    "  --grads           also print the gradient of output.sum() for every\n"
    "                    parameter (PyTorch's names) and the input\n"
    "  --json            one JSON object: module, output, grad_fn, grads\n"
    "  --gradcheck       finite differences in float64 (eval mode) on every\n"
    "                    parameter and the input; needs --dropout 0; prints\n"
    "                    'gradcheck: PASS' (exit 0) or 'gradcheck: FAIL' (exit 1);\n"
    "                    not combinable with --grads or --json\n"
    "  --save FILE       write the state_dict (safetensors, PyTorch's keys)\n"
    "  --load FILE       load a state_dict after construction, before the forward\n"
    "  --help            this text\n"
    "\n"
    "Options a module does not have are accepted and ignored: --qkv-bias for\n"
    "sa-v1; --context, --dropout and --heads for sa-v1/sa-v2; --heads for causal.\n"
    "Exit status: 0 ok, 1 gradcheck FAIL, 2 bad arguments or runtime error.\n";

#define CMD "attention"

typedef struct {
    const char *name;
    bool batched;
} module_info;

static const module_info modules[] = {
    {"sa-v1", false}, {"sa-v2", false}, {"causal", true}, {"mha-wrapper", true}, {"mha", true},
};

static const float book[6][3] = {
    {0.43f, 0.15f, 0.89f}, /* Your    */
    {0.55f, 0.87f, 0.66f}, /* journey */
    {0.57f, 0.85f, 0.64f}, /* starts  */
    {0.22f, 0.58f, 0.33f}, /* with    */
    {0.77f, 0.25f, 0.10f}, /* one     */
    {0.05f, 0.80f, 0.55f}, /* step    */
};

typedef struct {
    const char *module, *input, *save, *load;
    uint64_t seed;
    int64_t d_in, d_out, heads, context;
    double dropout;
    bool qkv_bias, eval, grads, json, gradcheck, context_set;
} attn_args;

static tg_module *build(tg_tape *tp, const attn_args *a, int mi, int64_t context)
{
    tg_manual_seed((uint64_t)a->seed);
    switch (mi) {
    case 0: return tg_self_attention_v1_new(tp, a->d_in, a->d_out);
    case 1: return tg_self_attention_v2_new(tp, a->d_in, a->d_out, a->qkv_bias);
    case 2: return tg_causal_attention_new(tp, a->d_in, a->d_out, context, a->dropout, a->qkv_bias);
    case 3: return tg_mha_wrapper_new(tp, a->d_in, a->d_out, context, a->dropout, a->heads, a->qkv_bias);
    default: return tg_mha_new(tp, a->d_in, a->d_out, context, a->dropout, a->heads, a->qkv_bias);
    }
}

static tg_tensor *make_input(tg_tape *tp, const tg_cli_input *in, bool batched, int64_t d_in)
{
    if (in->is_rand) {
        tg_generator *g = tg_generator_new(in->seed);
        if (!g) return tg_error("out of memory");
        int64_t shape[3] = {in->batch, in->tokens, d_in};
        tg_tensor *x = batched ? tg_rand(tp, TG_F32, 3, shape, g) : tg_rand(tp, TG_F32, 2, shape + 1, g);
        tg_generator_free(g);
        return x;
    }
    int64_t shape[2] = {6, 3};
    tg_tensor *x = tg_from_f32(tp, 2, shape, &book[0][0]);
    if (batched) {
        tg_tensor *xs[2] = {x, x};
        x = tg_stack(tp, 2, xs, 0); /* torch.stack((inputs, inputs), dim=0) */
    }
    return x;
}

/* "torch.Size([2, 6, 2])" as PyTorch prints x.shape */
static void print_shape(const tg_tensor *x)
{
    printf("torch.Size([");
    for (int d = 0; d < x->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)x->shape[d]);
    printf("])\n");
}

static json_t *tensor_json(const tg_tensor *t)
{
    json_t *o = json_object(), *shape = json_array(), *data = json_array();
    if (!t) {
        json_decref(shape);
        json_decref(data);
        json_decref(o);
        return json_null();
    }
    for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    int64_t n = tg_numel(t);
    for (int64_t i = 0; i < n; i++) json_array_append_new(data, json_real(tg_item_at(t, i)));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "data", data);
    return o;
}

typedef struct {
    tg_module *m;
    tg_tensor *x;
} gc_ctx;

static tg_tensor *gc_fn(tg_tape *tp, void *ctx, int n, tg_tensor *const *inputs)
{
    (void)inputs;
    (void)n;
    gc_ctx *c = ctx; /* the inputs are the module's own parameters and c->x */
    return tg_module_forward(tp, c->m, c->x);
}

/* gradcheck over every parameter and the input (any number of them: a
 * many-headed wrapper's too), printing each one's largest error. */
static int run_gradcheck(tg_tape *tp, tg_module *m, tg_tensor *x)
{
    if (tg_module_to_dtype(tp, m, TG_F64) != TG_OK) return tg_cli_lib_error(CMD, "gradcheck");
    tg_module_train(m, false);
    tg_tensor *x64 = tg_to_dtype(tp, x, TG_F64);
    if (!x64 || tg_requires_grad_(x64, true) != TG_OK) return tg_cli_lib_error(CMD, "gradcheck");
    tg_named_list np;
    if (tg_module_named_parameters(tp, m, &np) != TG_OK) return tg_cli_lib_error(CMD, "gradcheck");
    int n = np.n + 1;
    int64_t total = tg_numel(x64);
    for (int i = 0; i < np.n; i++) total += tg_numel(np.tensors[i]);
    if (total > 20000)
        return tg_cli_error(CMD, "--gradcheck: %lld elements to perturb is too many (at most 20000); use smaller sizes",
                            (long long)total);
    tg_tensor **all = tg_tape_alloc(tp, sizeof(tg_tensor *) * (size_t)n, false);
    const char **names = tg_tape_alloc(tp, sizeof(char *) * (size_t)n, false);
    double *err = tg_tape_alloc(tp, sizeof(double) * (size_t)n, false);
    if (!all || !names || !err) return tg_cli_lib_error(CMD, "gradcheck");
    for (int i = 0; i < np.n; i++) {
        all[i] = np.tensors[i];
        names[i] = np.names[i];
    }
    all[n - 1] = x64;
    names[n - 1] = "input";
    gc_ctx c = {m, x64};
    tg_gradcheck_options opts = {.max_err_per_input = err};
    tg_gradcheck_result res;
    if (tg_gradcheck_call(gc_fn, &c, n, all, &opts, &res) != TG_OK) return tg_cli_lib_error(CMD, "gradcheck");
    bool passed = res.passed;
    for (int i = 0; i < n; i++) printf("%s: max abs error %.3e\n", names[i], err[i]);
    printf("gradcheck: %s\n", passed ? "PASS" : "FAIL");
    return passed ? TG_CLI_OK : TG_CLI_FAIL;
}

static int run(tg_tape *tp, const attn_args *a)
{
    int mi = -1;
    for (int i = 0; i < (int)(sizeof modules / sizeof modules[0]); i++)
        if (strcmp(a->module, modules[i].name) == 0) mi = i;
    if (mi < 0)
        return tg_cli_error(CMD, "--module: unknown module '%.200s' (expected sa-v1, sa-v2, causal, mha-wrapper or mha)",
                            a->module);
    bool batched = modules[mi].batched;
    char err[512];
    tg_cli_input in;
    if (tg_cli_parse_input_spec(a->input, &in, err, sizeof err) != 0) return tg_cli_error(CMD, "%s", err);
    if (in.is_rand && batched && !in.batched)
        return tg_cli_error(CMD, "--input: %s takes (batch, tokens, d_in): use rand:SEED:B:T, got '%.200s'", a->module,
                            a->input);
    if (in.is_rand && !batched && in.batched)
        return tg_cli_error(CMD, "--input: %s takes (tokens, d_in): use rand:SEED:T, got '%.200s'", a->module, a->input);
    int64_t B = in.is_rand ? in.batch : (batched ? 2 : 1), T = in.is_rand ? in.tokens : 6;
    int64_t context = a->context_set ? a->context : T;
    int64_t heads = mi >= 3 ? a->heads : 1;
    int64_t dout_total = mi == 3 ? a->d_out * heads : a->d_out;
    if (tg_cli_estimate_bytes(B, context > T ? context : T, a->d_in, dout_total, heads, false) > TG_CLI_MEMORY_BUDGET)
        return tg_cli_error(CMD, "configuration too large: batch %lld, tokens %lld, d_in %lld, d_out %lld, heads %lld "
                                 "would need more than %.0f GiB",
                            (long long)B, (long long)T, (long long)a->d_in, (long long)a->d_out, (long long)heads,
                            TG_CLI_MEMORY_BUDGET / (1024.0 * 1024 * 1024));
    if (a->gradcheck && a->dropout != 0.0)
        return tg_cli_error(CMD, "--gradcheck needs --dropout 0 (dropout draws a new mask on every evaluation)");
    if (tg_cli_check_only) return TG_CLI_OK;

    tg_module *m = build(tp, a, mi, context);
    if (!m) return tg_cli_lib_error(CMD, NULL);
    if (a->load && tg_module_load(m, a->load) != TG_OK) return tg_cli_lib_error(CMD, "--load");
    if (a->save && tg_module_save(m, a->save) != TG_OK) return tg_cli_lib_error(CMD, "--save");
    if (a->eval) tg_module_train(m, false);
    tg_tensor *x = make_input(tp, &in, batched, a->d_in);
    if (!x) return tg_cli_lib_error(CMD, "--input");

    if (a->gradcheck) return run_gradcheck(tp, m, x);

    bool want_grads = a->grads || a->json;
    if (want_grads && tg_requires_grad_(x, true) != TG_OK) return tg_cli_lib_error(CMD, NULL);
    tg_tensor *out = tg_module_forward(tp, m, x);
    if (!out) return tg_cli_lib_error(CMD, NULL);
    tg_named_list np = {0};
    if (want_grads) {
        tg_tensor *s = tg_sum(tp, out);
        if (!s || tg_backward(s, NULL, false) != TG_OK) return tg_cli_lib_error(CMD, "backward");
        if (tg_module_named_parameters(tp, m, &np) != TG_OK) return tg_cli_lib_error(CMD, NULL);
    }
    if (a->json) {
        json_t *root = json_object(), *grads = json_object();
        json_object_set_new(root, "module", json_string(a->module));
        json_object_set_new(root, "output", tensor_json(out));
        const char *fn = tg_grad_fn_name(out);
        json_object_set_new(root, "grad_fn", fn ? json_string(fn) : json_null());
        for (int i = 0; i < np.n; i++) json_object_set_new(grads, np.names[i], tensor_json(np.tensors[i]->grad));
        json_object_set_new(grads, "input", tensor_json(x->grad));
        json_object_set_new(root, "grads", grads);
        return tg_cli_print_json(CMD, root, JSON_REAL_PRECISION(9) | JSON_PRESERVE_ORDER);
    }
    if (tg_print(stdout, out) != TG_OK) return tg_cli_print_error(CMD);
    print_shape(out);
    if (a->grads) {
        for (int i = 0; i < np.n; i++) {
            printf("%s:\n", np.names[i]);
            if (tg_print(stdout, np.tensors[i]->grad) != TG_OK) return tg_cli_print_error(CMD);
        }
        printf("input:\n");
        if (tg_print(stdout, x->grad) != TG_OK) return tg_cli_print_error(CMD);
    }
    return TG_CLI_OK;
}

int tg_cmd_attention(int argc, char **argv)
{
    attn_args a = {.input = "book", .seed = 123, .d_in = 3, .d_out = 2, .heads = 2};
    const int64_t big = 1 << 20;
    const tg_opt opts[] = {
        {.name = "--module", .type = TG_OPT_STRING, .dest = &a.module},
        {.name = "--seed", .type = TG_OPT_U64, .dest = &a.seed},
        {.name = "--d-in", .type = TG_OPT_INT, .dest = &a.d_in, .imin = 1, .imax = big},
        {.name = "--d-out", .type = TG_OPT_INT, .dest = &a.d_out, .imin = 1, .imax = big},
        {.name = "--heads", .type = TG_OPT_INT, .dest = &a.heads, .imin = 1, .imax = 4096},
        {.name = "--context", .type = TG_OPT_INT, .dest = &a.context, .imin = 1, .imax = TG_CLI_MAX_TOKENS,
         .seen = &a.context_set},
        {.name = "--dropout", .type = TG_OPT_DOUBLE, .dest = &a.dropout, .dmin = 0.0, .dmax = 1.0, .dmax_open = true},
        {.name = "--qkv-bias", .type = TG_OPT_FLAG, .dest = &a.qkv_bias},
        {.name = "--eval", .type = TG_OPT_FLAG, .dest = &a.eval},
        {.name = "--input", .type = TG_OPT_STRING, .dest = &a.input},
        {.name = "--grads", .type = TG_OPT_FLAG, .dest = &a.grads},
        {.name = "--json", .type = TG_OPT_FLAG, .dest = &a.json},
        {.name = "--gradcheck", .type = TG_OPT_FLAG, .dest = &a.gradcheck},
        {.name = "--save", .type = TG_OPT_STRING, .dest = &a.save},
        {.name = "--load", .type = TG_OPT_STRING, .dest = &a.load},
    };
    int rc;
    tg_cli_command c = {.name = CMD, .help = help, .opts = opts, .nopts = TG_CLI_NOPTS(opts)};
    if (!tg_cli_parse(&c, argc, argv, &rc)) return rc;
    if (!a.module) return tg_cli_error(CMD, "--module is required (sa-v1, sa-v2, causal, mha-wrapper or mha)");
    if (a.gradcheck && (a.json || a.grads)) return tg_cli_error(CMD, "--gradcheck cannot be combined with --json or --grads");

    tg_tape *tp = tg_tape_new();
    if (!tp) return tg_cli_error(CMD, "out of memory");
    rc = run(tp, &a);
    tg_cli_flush_stdout();
    tg_tape_free(tp);
    return rc;
}
