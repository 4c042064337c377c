"""tests/ref/finetune_ops.json: the ops the fine-tuning chapters add, against
PyTorch 1.13 (see tests/test_finetune_ops.c):

  gather, index_select: forward and x's gradient for a given grad_output
    ({"dtype", "x" (base), "transpose" (x = base.transpose(0, 1)), "dim",
    "index", "output", "grad_output", "grad_x", "grad_fn"}); the indices
    repeat, so the backward's scatter-add / index_add adds several
    gradients into one element;
  sum: torch.sum of bool and int64 tensors (all dims, or dims with keepdim),
    some transposed ({"x", "transpose", "dims" | null, "keepdim", "output"});
  init: every torch.nn.init function after torch.manual_seed(seed)
    ({"fn", "seed", "dtype", "shape", "args", "output"}), and one sequence of
    inits from one seed ("init_sequence");
  retain_grad: retained gradients of intermediates (a view among them) after
    one backward and after a second one with retain_graph.
"""
import math

import torch
import torch.nn.init as init

from .common import tensor_json, write_json


def gen(seed):
    return torch.Generator().manual_seed(seed)


def randn(g, shape, dtype):
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)


def indexing_case(op, g, dtype, base_shape, transpose, dim, index):
    base = randn(g, base_shape, dtype)
    x = base.clone().requires_grad_(True)
    xv = x.transpose(0, 1) if transpose else x
    if op == "gather":
        out = torch.gather(xv, dim, index)
    else:
        out = torch.index_select(xv, dim, index)
    go = randn(g, out.shape, dtype)
    out.backward(go)
    return {
        "dtype": "float32" if dtype == torch.float32 else "float64",
        "x": tensor_json(base),
        "transpose": transpose,
        "dim": dim,
        "index": tensor_json(index),
        "output": tensor_json(out),
        "grad_output": tensor_json(go),
        "grad_x": tensor_json(x.grad),
        "grad_fn": type(out.grad_fn).__name__,
    }


def gather_cases():
    g = gen(31)
    specs = [  # base shape, transpose, dim, index shape
        ((4, 5), False, 1, (4, 7)),
        ((4, 5), False, 0, (6, 3)),
        ((2, 3, 4), False, -1, (2, 3, 6)),
        ((2, 3, 4), False, 1, (1, 5, 2)),
        ((2, 3, 4), False, -3, (3, 2, 4)),
        ((5,), False, 0, (9,)),
        ((3, 4, 10), False, -1, (3, 4, 1)),   # log-probabilities of chosen tokens
        ((6, 4), True, 1, (3, 8)),            # x a transposed view (4, 6)
        ((6, 4), True, 0, (5, 6)),
    ]
    cases = []
    for shape, tr, dim, ishape in specs:
        xshape = list(shape)
        if tr:
            xshape[0], xshape[1] = xshape[1], xshape[0]
        size = xshape[dim]
        index = torch.randint(0, size, ishape, generator=g, dtype=torch.int64)
        for dtype in (torch.float32, torch.float64):
            cases.append(indexing_case("gather", g, dtype, shape, tr, dim, index))
    return cases


def index_select_cases():
    g = gen(32)
    specs = [  # base shape, transpose, dim, index
        ((5, 3), False, 0, [4, 0, 4, 2, 4, 1]),
        ((2, 5, 3), False, 1, [3, 3, 0, 4, 1, 3, 2]),
        ((4, 6), False, -1, [5, 0, 5]),
        ((6,), False, 0, [1, 1, 5, 0, 1]),
        ((5, 3), False, 0, 2),               # a 0-dim index
        ((4, 5), True, 0, [4, 0, 4, 1, 3, 2, 4]),  # x a transposed view (5, 4)
        ((3, 2, 4), False, -1, []),          # an empty index
    ]
    cases = []
    for shape, tr, dim, idx in specs:
        index = torch.tensor(idx, dtype=torch.int64)
        for dtype in (torch.float32, torch.float64):
            cases.append(indexing_case("index_select", g, dtype, shape, tr, dim, index))
    return cases


def sum_cases():
    g = gen(33)
    out = []

    def add(x, dims, keepdim=False, transpose=False):
        xv = x.transpose(0, 1) if transpose else x
        r = xv.sum() if dims is None else xv.sum(dim=dims, keepdim=keepdim)
        assert r.dtype == torch.int64
        out.append({"x": tensor_json(x), "transpose": transpose, "dims": dims, "keepdim": keepdim,
                    "output": tensor_json(r)})

    b = torch.rand((3, 4), generator=g) < 0.5
    add(b, None)
    add(b, [1])
    add(b, [0], keepdim=True)
    add(b, [-1, 0])
    add(b, None, transpose=True)
    add(b, [1], transpose=True)
    b3 = torch.rand((2, 3, 5), generator=g) < 0.3
    add(b3, [0, 2])
    add(b3, [-2], keepdim=True)
    add(torch.zeros((0, 3), dtype=torch.bool), None)
    add(torch.zeros((0, 3), dtype=torch.bool), [0])
    add(torch.tensor(True), None)
    i = torch.randint(-1000, 1000, (2, 3, 4), generator=g, dtype=torch.int64)
    add(i, None)
    add(i, [1])
    add(i, [0, -1], keepdim=True)
    add(i, [2], transpose=True)
    big = torch.tensor([[2 ** 62, 2 ** 62], [-(2 ** 61), 5]], dtype=torch.int64)
    add(big, [1])
    return out


SQRT5 = math.sqrt(5)

# fn, seed, dtype, shape, args
INITS = [
    ("uniform_", 1, torch.float32, (3, 4), {"a": -0.5, "b": 2.0}),
    ("uniform_", 2, torch.float64, (20,), {"a": 0.0, "b": 1.0}),
    ("normal_", 3, torch.float32, (5, 7), {"mean": 0.5, "std": 2.0}),
    ("normal_", 4, torch.float32, (3,), {"mean": 0.0, "std": 0.02}),
    ("zeros_", 5, torch.float32, (2, 3), {}),
    ("ones_", 6, torch.float64, (4,), {}),
    ("kaiming_uniform_", 123, torch.float32, (768, 16), {"a": SQRT5, "mode": "fan_in", "nonlinearity": "leaky_relu"}),
    ("kaiming_uniform_", 0, torch.float32, (32, 4), {"a": SQRT5, "mode": "fan_in", "nonlinearity": "leaky_relu"}),
    ("kaiming_uniform_", 7, torch.float32, (16, 32), {"a": SQRT5, "mode": "fan_in", "nonlinearity": "leaky_relu"}),
    ("kaiming_uniform_", 8, torch.float32, (8, 6), {"a": 0.0, "mode": "fan_in", "nonlinearity": "leaky_relu"}),
    ("kaiming_uniform_", 9, torch.float32, (6, 5, 3), {"a": 0.0, "mode": "fan_out", "nonlinearity": "relu"}),
    ("kaiming_uniform_", 10, torch.float64, (5, 4), {"a": 0.2, "mode": "fan_in", "nonlinearity": "leaky_relu"}),
    ("kaiming_uniform_", 11, torch.float32, (5, 4), {"a": 0.0, "mode": "fan_out", "nonlinearity": "tanh"}),
    ("kaiming_uniform_", 12, torch.float32, (5, 4), {"a": 0.0, "mode": "fan_in", "nonlinearity": "linear"}),
    ("kaiming_uniform_", 13, torch.float32, (5, 4), {"a": 0.0, "mode": "fan_in", "nonlinearity": "sigmoid"}),
    ("kaiming_uniform_", 14, torch.float32, (5, 4), {"a": 0.0, "mode": "fan_in", "nonlinearity": "selu"}),
    ("kaiming_normal_", 15, torch.float32, (16, 8), {"a": 0.0, "mode": "fan_in", "nonlinearity": "leaky_relu"}),
    ("kaiming_normal_", 16, torch.float32, (10, 3, 2), {"a": 0.0, "mode": "fan_out", "nonlinearity": "relu"}),
    ("kaiming_normal_", 17, torch.float64, (3, 5), {"a": SQRT5, "mode": "fan_in", "nonlinearity": "leaky_relu"}),
    ("xavier_uniform_", 18, torch.float32, (20, 30), {"gain": 1.0}),
    ("xavier_uniform_", 19, torch.float32, (4, 5, 3), {"gain": math.sqrt(2.0)}),
    ("xavier_normal_", 20, torch.float32, (20, 30), {"gain": 1.0}),
    ("xavier_normal_", 21, torch.float64, (7, 9), {"gain": 2.0}),
]


def run_init(fn, t, args):
    f = getattr(init, fn)
    if fn in ("kaiming_uniform_", "kaiming_normal_"):
        f(t, a=args["a"], mode=args["mode"], nonlinearity=args["nonlinearity"])
    elif fn in ("zeros_", "ones_"):
        f(t)
    else:
        f(t, *args.values())


def init_cases():
    cases = []
    for fn, seed, dtype, shape, args in INITS:
        torch.manual_seed(seed)
        t = torch.empty(shape, dtype=dtype)
        run_init(fn, t, args)
        cases.append({"fn": fn, "seed": seed, "dtype": "float32" if dtype == torch.float32 else "float64",
                      "shape": list(shape), "args": args, "output": tensor_json(t)})
    # one seed, several inits in a row, as a LoRA layer's parameters are made
    torch.manual_seed(42)
    w = torch.empty((8, 12))
    init.kaiming_uniform_(w, a=SQRT5)
    a = torch.empty((12, 4))
    init.kaiming_uniform_(a, a=SQRT5)
    b = torch.empty((4, 8))
    init.zeros_(b)
    n = torch.empty((6, 5))
    init.xavier_normal_(n)
    seq = {"seed": 42, "outputs": [tensor_json(v) for v in (w, a, b, n)]}
    return cases, seq


def retain_case():
    g = gen(34)
    x = randn(g, (3, 4), torch.float32).requires_grad_(True)
    w = randn(g, (3, 4), torch.float32)
    c = randn(g, (4, 3), torch.float32)
    h = x * w
    h.retain_grad()
    hv = h.transpose(0, 1)
    hv.retain_grad()
    loss = (hv * c).sum() + (h * h).sum()
    loss.retain_grad()
    x.retain_grad()  # a leaf: nothing changes
    loss.backward(retain_graph=True)
    first = {"h": tensor_json(h.grad), "hv": tensor_json(hv.grad), "x": tensor_json(x.grad),
             "loss": tensor_json(loss.grad)}
    loss.backward()
    second = {"h": tensor_json(h.grad), "hv": tensor_json(hv.grad), "x": tensor_json(x.grad),
              "loss": tensor_json(loss.grad)}
    return {"x": tensor_json(x), "w": tensor_json(w), "c": tensor_json(c), "loss": tensor_json(loss),
            "first": first, "second": second}


def generate(outdir):
    torch.set_default_dtype(torch.float32)
    inits, seq = init_cases()
    write_json(outdir, "finetune_ops.json", {
        "generator": "tools/reference/finetune_ops.py",
        "torch": torch.__version__,
        "gather": gather_cases(),
        "index_select": index_select_cases(),
        "sum": sum_cases(),
        "init": inits,
        "init_sequence": seq,
        "retain_grad": retain_case(),
    })
