"""tests/ref/modules.json: the five attention modules of chapter 3
(tools/reference/book.py),
built after torch.manual_seed(seed), run in eval mode, with gradients of
output.sum() for every parameter and the input.

Each case: {"name", "module" (sa_v1|sa_v2|causal|mha_wrapper|mha), "seed",
"d_in", "d_out", "num_heads", "context_length", "dropout", "qkv_bias",
"input_kind" ("book" | "rand"), "input_seed", "input" (tensor),
"state_dict_keys", "parameter_names" (in PyTorch's order),
"output", "grad_fn", "grads": {name: tensor, ..., "input": tensor}}.
num_heads / context_length / dropout / qkv_bias are 0/false where the module
has no such argument. For mha_wrapper, d_out is per head (output
num_heads * d_out); for mha, d_out is the total (head_dim = d_out / heads).

The grid (module x seed {123, 42, 7} x size {(3,2), (4,6), (8,8)}, crossed
with heads {1, 2}, context {T, T+3}, qkv_bias, book/random inputs with batch
1 and 3) is subsampled to a fixed list. The first cases (names starting
"spec_") are the book's printed outputs for its seeds (FIGURES below), which
tests/test_cli.sh also checks on the command line.
"""
import torch

from .common import grad_fn_name, tensor_json, write_json

from .book import (BOOK, CausalAttention, MultiHeadAttention, MultiHeadAttentionWrapper,  # noqa: F401
                   SelfAttention_v1, SelfAttention_v2)


BATCHED = ("causal", "mha_wrapper", "mha")


def build(c):
    torch.manual_seed(c["seed"])
    k = c["module"]
    if k == "sa_v1":
        return SelfAttention_v1(c["d_in"], c["d_out"])
    if k == "sa_v2":
        return SelfAttention_v2(c["d_in"], c["d_out"], c["qkv_bias"])
    if k == "causal":
        return CausalAttention(c["d_in"], c["d_out"], c["context_length"], c["dropout"], c["qkv_bias"])
    if k == "mha_wrapper":
        return MultiHeadAttentionWrapper(c["d_in"], c["d_out"], c["context_length"], c["dropout"],
                                         c["num_heads"], c["qkv_bias"])
    if k == "mha":
        return MultiHeadAttention(c["d_in"], c["d_out"], c["context_length"], c["dropout"],
                                  c["num_heads"], c["qkv_bias"])
    raise ValueError(k)


def make_input(c):
    if c["input_kind"] == "book":
        x = torch.tensor(BOOK)
        if c["module"] in BATCHED:
            x = torch.stack((x, x), dim=0)
        return x
    if c["module"] in BATCHED:
        shape = (c["batch"], c["tokens"], c["d_in"])
    else:
        shape = (c["tokens"], c["d_in"])
    return torch.rand(shape, generator=torch.Generator().manual_seed(c["input_seed"]))


def run(c):
    m = build(c)
    m.eval()
    x = make_input(c).requires_grad_(True)
    out = m(x)
    out.sum().backward()
    grads = {n: tensor_json(p.grad) for n, p in m.named_parameters()}
    grads["input"] = tensor_json(x.grad)
    rec = dict(c)
    rec.update({
        "input": tensor_json(x),
        "state_dict_keys": list(m.state_dict().keys()),
        "parameter_names": [n for n, _ in m.named_parameters()],
        "output": tensor_json(out),
        "grad_fn": grad_fn_name(out),
        "grads": grads,
    })
    return rec, out


def case(name, module, seed, d_in, d_out, heads=0, ctx_extra=0, bias=False, kind="rand",
         batch=1, tokens=6, input_seed=0, dropout=0.0):
    if kind == "book":
        tokens, batch, input_seed = 6, (2 if module in BATCHED else 0), 0
    if module not in BATCHED:
        batch = 0
    has_ctx = module in BATCHED
    return {
        "name": name, "module": module, "seed": seed, "d_in": d_in, "d_out": d_out,
        "num_heads": heads if module in ("mha_wrapper", "mha") else 0,
        "context_length": tokens + ctx_extra if has_ctx else 0,
        "dropout": dropout if has_ctx else 0.0,
        "qkv_bias": bool(bias) if module != "sa_v1" else False,
        "input_kind": kind, "input_seed": input_seed, "batch": batch, "tokens": tokens,
    }


# The book's printed outputs: (case, first two rows of the output's first batch).
FIGURES = [
    (case("spec_sa_v1", "sa_v1", 123, 3, 2, kind="book"), [[0.2996, 0.8053], [0.3061, 0.8210]]),
    (case("spec_sa_v2", "sa_v2", 123, 3, 2, kind="book"), [[-0.5337, -0.1051], [-0.5323, -0.1080]]),
    (case("spec_causal", "causal", 42, 3, 2, kind="book"), [[0.4429, 0.1077], [0.4656, 0.2597]]),
    (case("spec_mha", "mha", 42, 3, 2, heads=2, kind="book"), [[-0.4140, 0.3158], [-0.3942, 0.2961]]),
    (case("spec_mha_wrapper", "mha_wrapper", 42, 3, 2, heads=2, kind="book"),
     [[0.4429, 0.1077, 0.5473, 0.3307]]),
]

MODULES = ("sa_v1", "sa_v2", "causal", "mha_wrapper", "mha")
SEEDS = (123, 42, 7)
SIZES = ((3, 2), (4, 6), (8, 8))


def grid():
    """A fixed subsample of the full grid: every module x seed x size appears,
    twice, with heads / context / bias / input kind / batch / tokens varied
    cyclically so that each value of each factor appears for every module."""
    cases = []
    i = 0
    for mod in MODULES:
        j = 0
        for seed in SEEDS:
            for (d_in, d_out) in SIZES:
                for rep in range(2):
                    p = j // 2  # index of (seed, size) within the module
                    heads = 1 + (p + rep) % 2
                    ctx_extra = 3 * ((p + p // 3 + rep) % 2)
                    bias = (p // 3 + rep) % 2 == 1
                    kind = "book" if d_in == 3 and rep == 0 else "rand"
                    batch = 1 if (p // 2 + rep) % 2 == 0 else 3
                    tokens = (3, 5, 7, 4)[(p + 2 * rep) % 4]
                    name = "%s_s%d_%dx%d_%d" % (mod, seed, d_in, d_out, rep)
                    cases.append(case(name, mod, seed, d_in, d_out, heads=heads, ctx_extra=ctx_extra,
                                      bias=bias, kind=kind, batch=batch, tokens=tokens,
                                      input_seed=1000 + i))
                    i += 1
                    j += 1
    # Modules built with dropout 0.5, evaluated in eval mode (dropout is the identity).
    for mod, heads in (("causal", 0), ("mha_wrapper", 2), ("mha", 2)):
        for seed, (d_in, d_out), bias in ((123, (3, 2), False), (7, (4, 6), True)):
            cases.append(case("%s_drop05_s%d_%dx%d" % (mod, seed, d_in, d_out), mod, seed, d_in, d_out,
                              heads=heads, ctx_extra=3, bias=bias, kind="rand", batch=3, tokens=5,
                              input_seed=2000 + len(cases), dropout=0.5))
    return cases


def generate(outdir):
    out = []
    for c, rows in FIGURES:
        rec, y = run(c)
        first = y[0] if c["module"] in BATCHED else y
        got = first[:len(rows)].detach()
        want = torch.tensor(rows)
        if not torch.allclose(got, want, atol=6e-5, rtol=0):
            raise RuntimeError("%s: %s differs from the book's %s" % (c["name"], got.tolist(), rows))
        out.append(rec)
    for c in grid():
        out.append(run(c)[0])
    names = [r["name"] for r in out]
    assert len(names) == len(set(names))
    write_json(outdir, "modules.json", {"torch_version": torch.__version__, "cases": out})
    print("modules.json: %d cases" % len(out))
