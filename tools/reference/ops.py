"""tests/ref/ops.json: forward values, grad_fn names and gradients of every
differentiable op in include/tapegrad/autograd.h (plus the creation helpers
with a torch equivalent), each case in float32 and float64.

Case layout (see tests/test_ops_ref.c):
  {"op": name without tg_ prefix, "dtype": "float32"|"float64", "args": {...},
   "inputs": [{"tensor": T, "requires_grad": bool, "view": null | {...}}],
   "output": T, "indices": T (max_dim only), "grad_fn": str | null,
   "weight": T | null, "grads": [T | null per input]}
The view ({"op": "transpose", "d0", "d1"} | {"op": "narrow", "dim", "start",
"length"} | {"op": "expand", "shape"}) is applied to the base leaf before the
op; grads are d sum(output * weight) / d base.
"""
import math

import torch
import torch.nn.functional as F

from .common import Data, FLOAT_DTYPES, DTYPES, grad_fn_name, scalar_json, tensor_json, write_json

D = Data(20240611)


def I(data, rg=True, view=None):
    """One input: base data (float64 / bool / int64), requires_grad, view."""
    return {"data": data, "rg": rg, "view": view}


def U(*shape, lo=-2.0, hi=2.0, **kw):
    return D.uniform(shape, lo, hi, **kw)


def POS(*shape):
    return D.uniform(shape, 0.25, 3.0)


def NZ(*shape):
    """Magnitude in [0.25, 2), random sign: safe divisors."""
    mag = D.uniform(shape, 0.25, 2.0)
    sign = torch.where(D.bool(shape), 1.0, -1.0).to(torch.float64)
    return mag * sign


def T(d0, d1):
    return {"op": "transpose", "d0": d0, "d1": d1}


def N(dim, start, length):
    return {"op": "narrow", "dim": dim, "start": start, "length": length}


def E(*shape):
    return {"op": "expand", "shape": list(shape)}


def apply_view(t, v):
    if v is None:
        return t
    if v["op"] == "transpose":
        return t.transpose(v["d0"], v["d1"])
    if v["op"] == "narrow":
        return t.narrow(v["dim"], v["start"], v["length"])
    if v["op"] == "expand":
        return t.expand(*v["shape"])
    raise ValueError(v)


CMP = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
RED = {"mean": "mean", "sum": "sum", "none": "none"}


def fnum(v):
    return float(v) if not isinstance(v, str) else float(v)


# op name -> torch implementation(args, *inputs); returns a tensor or (values, indices)
IMPL = {
    "add": lambda a, x, y: x + y,
    "sub": lambda a, x, y: x - y,
    "mul": lambda a, x, y: x * y,
    "div": lambda a, x, y: x / y,
    "add_scalar": lambda a, x: x + a["scalar"],
    "sub_scalar": lambda a, x: x - a["scalar"],
    "rsub_scalar": lambda a, x: a["scalar"] - x,
    "mul_scalar": lambda a, x: x * a["scalar"],
    "div_scalar": lambda a, x: x / a["scalar"],
    "pow_scalar": lambda a, x: x ** a["scalar"],
    "neg": lambda a, x: -x,
    "exp": lambda a, x: torch.exp(x),
    "log": lambda a, x: torch.log(x),
    "sqrt": lambda a, x: torch.sqrt(x),
    "tanh": lambda a, x: torch.tanh(x),
    "relu": lambda a, x: torch.relu(x),
    "gelu": lambda a, x: F.gelu(x, approximate="tanh"),
    "compare": lambda a, x, y: CMP[a["cmp"]](x, y),
    "compare_scalar": lambda a, x: CMP[a["cmp"]](x, a["scalar"]),
    "where": lambda a, c, x, y: torch.where(c, x, y),
    "masked_fill": lambda a, x, m: x.masked_fill(m, float(a["value"])),
    "sum": lambda a, x: x.sum(),
    "mean": lambda a, x: x.mean(),
    "sum_dims": lambda a, x: x.sum(dim=a["dims"], keepdim=a["keepdim"]),
    "mean_dims": lambda a, x: x.mean(dim=a["dims"], keepdim=a["keepdim"]),
    "max": lambda a, x: x.max(),
    "max_dim": lambda a, x: tuple(x.max(dim=a["dim"], keepdim=a["keepdim"])),
    "softmax": lambda a, x: torch.softmax(x, a["dim"]),
    "log_softmax": lambda a, x: torch.log_softmax(x, a["dim"]),
    "matmul": lambda a, x, y: torch.matmul(x, y),
    "mm": lambda a, x, y: torch.mm(x, y),
    "bmm": lambda a, x, y: torch.bmm(x, y),
    "linear": lambda a, *xs: F.linear(*xs),
    "view": lambda a, x: x.view(*a["shape"]),
    "reshape": lambda a, x: x.reshape(*a["shape"]),
    "transpose": lambda a, x: x.transpose(a["d0"], a["d1"]),
    "t": lambda a, x: x.t(),
    "permute": lambda a, x: x.permute(*a["perm"]),
    "narrow": lambda a, x: x.narrow(a["dim"], a["start"], a["length"]),
    "select": lambda a, x: x.select(a["dim"], a["index"]),
    "unsqueeze": lambda a, x: x.unsqueeze(a["dim"]),
    "squeeze": lambda a, x: x.squeeze(a["dim"]),
    "squeeze_all": lambda a, x: x.squeeze(),
    "expand": lambda a, x: x.expand(*a["shape"]),
    "contiguous": lambda a, x: x.contiguous(),
    "clone": lambda a, x: x.clone(),
    "cat": lambda a, *xs: torch.cat(xs, a["dim"]),
    "stack": lambda a, *xs: torch.stack(xs, a["dim"]),
    "mse_loss": lambda a, x, y: F.mse_loss(x, y, reduction=a["reduction"]),
    "cross_entropy": lambda a, x, y: F.cross_entropy(x, y, reduction=a["reduction"]),
    "triu": lambda a, x: torch.triu(x, a["diagonal"]),
    "tril": lambda a, x: torch.tril(x, a["diagonal"]),
}


def make_case(op, args, inputs, dtype, weight_cache):
    leaves, used = [], []
    for inp in inputs:
        d = inp["data"]
        if d.dtype in FLOAT_DTYPES:
            d = d.to(dtype)
        leaf = d.clone().requires_grad_(inp["rg"])
        leaves.append(leaf)
        used.append(apply_view(leaf, inp["view"]))
    targs = dict(args)
    for k in ("scalar", "value"):
        if k in targs:
            targs[k] = float(targs[k])
    if op == "arange":
        out = torch.arange(targs["start"], targs["end"], targs["step"], dtype=dtype)
    elif op == "eye":
        out = torch.eye(targs["n"], targs["m"], dtype=dtype)
    else:
        out = IMPL[op](targs, *used)
    indices = None
    if isinstance(out, tuple):
        out, indices = out
    case = {
        "op": op,
        "dtype": DTYPES[dtype],
        "args": {k: (scalar_json(v) if k in ("scalar", "value") else v) for k, v in args.items()},
        "inputs": [{"tensor": tensor_json(l), "requires_grad": inp["rg"], "view": inp["view"]}
                   for l, inp in zip(leaves, inputs)],
        "output": tensor_json(out),
        "grad_fn": grad_fn_name(out),
    }
    if indices is not None:
        case["indices"] = tensor_json(indices)
    if out.dtype in FLOAT_DTYPES and out.requires_grad:
        if "w" not in weight_cache:
            weight_cache["w"] = D.uniform(list(out.shape), -1.0, 1.0)
        w = weight_cache["w"].to(dtype)
        (out * w).sum().backward()
        case["weight"] = tensor_json(w)
        case["grads"] = [tensor_json(l.grad) if inp["rg"] else None
                         for l, inp in zip(leaves, inputs)]
    else:
        case["weight"] = None
        case["grads"] = [None for _ in inputs]
    return case


CASES = []


def add(op, args, *inputs):
    CASES.append((op, args, list(inputs)))


def build_cases():
    # ---- binary elementwise: same shape, broadcast, 0-dim, non-contiguous ----
    for op in ("add", "sub", "mul", "div"):
        rhs = NZ if op == "div" else U
        add(op, {}, I(U(2, 3)), I(rhs(2, 3)))
        add(op, {}, I(U(2, 3, 4)), I(rhs(4)))                      # trailing broadcast
        add(op, {}, I(U(3, 1)), I(rhs(1, 4)))                      # both broadcast
        add(op, {}, I(U(2, 1, 4)), I(rhs(3, 1)))                   # rank + both
        add(op, {}, I(U(2, 3)), I(rhs(), rg=True))                 # 0-dim rhs
        add(op, {}, I(U(4, 3), view=T(0, 1)), I(rhs(3, 4)))        # transposed lhs
        add(op, {}, I(U(3, 6), view=N(1, 1, 4)), I(rhs(4, 3), view=T(0, 1)))  # sliced + transposed
        add(op, {}, I(U(3, 1), view=E(2, 3, 4)), I(rhs(2, 3, 4)))  # expanded lhs
        add(op, {}, I(U(2, 3)), I(rhs(2, 3), rg=False))            # only lhs needs grad
        add(op, {}, I(U(2, 3), rg=False), I(rhs(3)))               # only rhs needs grad
    # ---- scalar ops ----
    for op, scalars in (("add_scalar", (2.5, -0.75)), ("sub_scalar", (2.5, -0.75)),
                        ("rsub_scalar", (2.5, -0.75)), ("mul_scalar", (2.5, -0.75, 0.0)),
                        ("div_scalar", (2.5, -0.75, math.sqrt(2.0)))):
        for s in scalars:
            add(op, {"scalar": s}, I(U(2, 3)))
        add(op, {"scalar": 1.5}, I(U(4, 3), view=T(0, 1)))
        add(op, {"scalar": 1.5}, I(U(3, 6), view=N(1, 2, 3)))
    for e in (2.0, 3.0, 0.5, -1.5, 1.0, 0.0):
        add("pow_scalar", {"scalar": e}, I(POS(2, 3)))
    add("pow_scalar", {"scalar": 2.0}, I(U(2, 3)))        # negative base, integer exponent
    add("pow_scalar", {"scalar": 3.0}, I(U(4, 3), view=T(0, 1)))
    # ---- unary ----
    for op, gen in (("neg", U), ("exp", U), ("log", POS), ("sqrt", POS), ("tanh", U),
                    ("relu", lambda *s: U(*s, nonzero=True)), ("gelu", lambda *s: U(*s, lo=-4, hi=4))):
        add(op, {}, I(gen(2, 3)))
        add(op, {}, I(gen(2, 3, 4)))
        add(op, {}, I(gen(4, 3), view=T(0, 1)))
        add(op, {}, I(gen(3, 6), view=N(1, 1, 4)))
        add(op, {}, I(gen()))
    add("exp", {}, I(torch.tensor([-100.0, -10.0, 0.0, 10.0, 80.0])))
    add("tanh", {}, I(torch.tensor([-20.0, -5.0, -0.001, 0.0, 0.001, 5.0, 20.0])))
    add("gelu", {}, I(torch.tensor([-10.0, -3.0, -0.5, 0.0, 0.5, 3.0, 10.0])))
    # ---- comparisons (bool results, never recorded) ----
    for cmp in CMP:
        add("compare", {"cmp": cmp}, I(D.small_ints((3, 4)), rg=False), I(D.small_ints((3, 4)), rg=False))
        add("compare", {"cmp": cmp}, I(D.small_ints((2, 3, 4)), rg=False), I(D.small_ints((3, 1)), rg=False))
        add("compare", {"cmp": cmp}, I(D.small_ints((4, 3)), rg=False, view=T(0, 1)),
            I(D.small_ints((4,)), rg=False))
        add("compare_scalar", {"cmp": cmp, "scalar": 0.5}, I(D.small_ints((3, 4)), rg=False))
        add("compare_scalar", {"cmp": cmp, "scalar": -1.0}, I(D.small_ints((4, 3)), rg=False, view=T(0, 1)))
    # ---- where / masked_fill ----
    add("where", {}, I(D.bool((2, 3)), rg=False), I(U(2, 3)), I(U(2, 3)))
    add("where", {}, I(D.bool((3, 1)), rg=False), I(U(2, 3, 4)), I(U(4)))
    add("where", {}, I(D.bool((3, 4)), rg=False), I(U(3, 4)), I(U(), rg=True))
    add("where", {}, I(D.bool((4, 3)), rg=False, view=T(0, 1)), I(U(4, 3), view=T(0, 1)), I(U(3, 4), rg=False))
    for value in (0.0, -0.5, "-inf", 1e9):
        add("masked_fill", {"value": value}, I(U(3, 4)), I(D.bool((3, 4)), rg=False))
    causal = torch.triu(torch.ones(5, 5), 1).bool()
    add("masked_fill", {"value": "-inf"}, I(U(2, 5, 5)), I(causal, rg=False))   # broadcast mask
    add("masked_fill", {"value": "-inf"}, I(U(2, 2, 5, 5)), I(causal, rg=False))
    add("masked_fill", {"value": 2.0}, I(U(4, 3), view=T(0, 1)), I(D.bool((1, 4)), rg=False))
    add("masked_fill", {"value": "inf"}, I(U(3, 6), view=N(1, 1, 4)), I(D.bool((3, 4)), rg=False))
    # ---- reductions ----
    for op in ("sum", "mean"):
        add(op, {}, I(U(2, 3)))
        add(op, {}, I(U(2, 3, 4)))
        add(op, {}, I(U(4, 3), view=T(0, 1)))
        add(op, {}, I(U(3, 1), view=E(2, 3, 4)))
        add(op, {}, I(U()))
        add(op, {}, I(U(40, 30)))
    for op in ("sum_dims", "mean_dims"):
        for keepdim in (False, True):
            add(op, {"dims": [0], "keepdim": keepdim}, I(U(2, 3)))
            add(op, {"dims": [1], "keepdim": keepdim}, I(U(2, 3)))
            add(op, {"dims": [-1], "keepdim": keepdim}, I(U(2, 3, 4)))
            add(op, {"dims": [0, 2], "keepdim": keepdim}, I(U(2, 3, 4)))
            add(op, {"dims": [1, -1], "keepdim": keepdim}, I(U(2, 3, 4, 2)))
            add(op, {"dims": [1], "keepdim": keepdim}, I(U(2, 4, 3), view=T(1, 2)))
            add(op, {"dims": [0], "keepdim": keepdim}, I(U(3, 1), view=E(2, 3, 4)))
            add(op, {"dims": [], "keepdim": keepdim}, I(U(2, 3)))
            add(op, {"dims": [0, 1, 2], "keepdim": keepdim}, I(U(2, 3, 4)))
    add("max", {}, I(U(2, 3, distinct=True)))
    add("max", {}, I(U(2, 3, 4, distinct=True)))
    add("max", {}, I(U(4, 3, distinct=True), view=T(0, 1)))
    add("max", {}, I(torch.tensor([-3.0, -1.0, -2.0])))
    for keepdim in (False, True):
        add("max_dim", {"dim": 0, "keepdim": keepdim}, I(U(3, 4, distinct=True)))
        add("max_dim", {"dim": 1, "keepdim": keepdim}, I(U(3, 4, distinct=True)))
        add("max_dim", {"dim": -1, "keepdim": keepdim}, I(U(2, 3, 4, distinct=True)))
        add("max_dim", {"dim": 1, "keepdim": keepdim}, I(U(2, 3, 4, distinct=True)))
        add("max_dim", {"dim": 0, "keepdim": keepdim}, I(U(4, 3, distinct=True), view=T(0, 1)))
    # ---- softmax / log_softmax ----
    for op in ("softmax", "log_softmax"):
        add(op, {"dim": -1}, I(U(3, 5)))
        add(op, {"dim": 0}, I(U(3, 5)))
        add(op, {"dim": 1}, I(U(2, 3, 4)))
        add(op, {"dim": -1}, I(U(2, 3, 4)))
        add(op, {"dim": 0}, I(U(2, 3, 4)))
        add(op, {"dim": -1}, I(U(2, 2, 3, 4)))
        add(op, {"dim": -1}, I(U(5, 3), view=T(0, 1)))           # non-contiguous rows
        add(op, {"dim": 0}, I(U(5, 3), view=T(0, 1)))
        add(op, {"dim": -1}, I(U(3, 8), view=N(1, 2, 5)))
        add(op, {"dim": -1}, I(U(3, 5) * 1e4))                   # large inputs
        add(op, {"dim": 0}, I(U(4, 3) * -1e4))
        add(op, {"dim": -1}, I(U(4, 40)))
        add(op, {"dim": 0}, I(U(6)))
        x = U(3, 4)
        x[1, 2] = -math.inf
        x[2, 0] = -math.inf
        x[2, 3] = -math.inf
        add(op, {"dim": -1}, I(x))                                # partial -inf (causal-style)
        x = U(3, 4)
        x[1, :] = -math.inf
        add(op, {"dim": -1}, I(x))                                # all -inf row: NaN
    # ---- matrix products ----
    add("matmul", {}, I(U(4)), I(U(4)))                                   # 1-D @ 1-D
    add("matmul", {}, I(U(3, 4)), I(U(4)))                                # 2-D @ 1-D
    add("matmul", {}, I(U(4)), I(U(4, 3)))                                # 1-D @ 2-D
    add("matmul", {}, I(U(3, 4)), I(U(4, 5)))                             # 2-D @ 2-D
    add("matmul", {}, I(U(2, 3, 4)), I(U(4, 5)))                          # 3-D @ 2-D
    add("matmul", {}, I(U(3, 4)), I(U(2, 4, 5)))                          # 2-D @ 3-D
    add("matmul", {}, I(U(2, 3, 4)), I(U(2, 4, 5)))                       # 3-D @ 3-D
    add("matmul", {}, I(U(2, 2, 3, 4)), I(U(2, 2, 4, 3)))                 # 4-D @ 4-D
    add("matmul", {}, I(U(2, 1, 3, 4)), I(U(5, 4, 2)))                    # broadcast batch
    add("matmul", {}, I(U(1, 3, 4)), I(U(3, 4, 2)))                       # broadcast batch 1
    add("matmul", {}, I(U(2, 3, 4)), I(U(4)))                             # 3-D @ 1-D
    add("matmul", {}, I(U(4)), I(U(2, 4, 3)))                             # 1-D @ 3-D
    add("matmul", {}, I(U(4, 3), view=T(0, 1)), I(U(5, 4), view=T(0, 1)))  # transposed both
    add("matmul", {}, I(U(2, 4, 3), view=T(1, 2)), I(U(2, 4, 5)))         # q @ k^T style
    add("matmul", {}, I(U(2, 3, 4)), I(U(2, 5, 4), view=T(1, 2)))
    add("matmul", {}, I(U(3, 2, 4), view=T(0, 1)), I(U(4, 5)))            # batch-strided
    add("matmul", {}, I(U(3, 7), view=N(1, 2, 4)), I(U(6, 5), view=N(0, 1, 4)))  # sliced
    add("matmul", {}, I(U(4, 1), view=E(2, 4, 3)), I(U(2, 3, 5)))         # expanded
    add("matmul", {}, I(U(6, 3)), I(U(3, 2), rg=False))
    add("matmul", {}, I(U(6, 3), rg=False), I(U(3, 2)))
    add("matmul", {}, I(U(2, 12, 40)), I(U(40, 9)))                        # larger inner dim
    add("mm", {}, I(U(3, 4)), I(U(4, 5)))
    add("mm", {}, I(U(4, 3), view=T(0, 1)), I(U(4, 5)))
    add("mm", {}, I(U(3, 4)), I(U(5, 4), view=T(0, 1)))
    add("mm", {}, I(U(4, 3), view=T(0, 1)), I(U(5, 4), view=T(0, 1)))
    add("mm", {}, I(U(3, 7), view=N(1, 1, 4)), I(U(4, 5)))
    add("mm", {}, I(U(1, 4)), I(U(4, 1)))
    add("mm", {}, I(U(16, 48)), I(U(48, 8)))
    add("bmm", {}, I(U(2, 3, 4)), I(U(2, 4, 5)))
    add("bmm", {}, I(U(2, 4, 3), view=T(1, 2)), I(U(2, 4, 5)))
    add("bmm", {}, I(U(2, 3, 4)), I(U(2, 5, 4), view=T(1, 2)))
    add("bmm", {}, I(U(3, 2, 4), view=T(0, 1)), I(U(2, 4, 2)))
    add("bmm", {}, I(U(1, 3, 4)), I(U(1, 4, 1)))
    add("linear", {}, I(U(3, 4)), I(U(5, 4)), I(U(5)))
    add("linear", {}, I(U(3, 4)), I(U(5, 4)))
    add("linear", {}, I(U(2, 3, 4)), I(U(5, 4)), I(U(5)))
    add("linear", {}, I(U(2, 3, 4)), I(U(5, 4)))
    add("linear", {}, I(U(2, 2, 3, 4)), I(U(2, 4)), I(U(2)))
    add("linear", {}, I(U(4, 3), view=T(0, 1)), I(U(5, 4)), I(U(5)))
    add("linear", {}, I(U(3, 4), rg=False), I(U(4, 5), view=T(0, 1)), I(U(5)))
    add("linear", {}, I(U(4)), I(U(3, 4)), I(U(3)))                      # 1-D input
    add("linear", {}, I(U(2, 6, 32)), I(U(8, 32)), I(U(8)))
    # ---- shape and views ----
    add("view", {"shape": [3, 2]}, I(U(2, 3)))
    add("view", {"shape": [-1]}, I(U(2, 3, 4)))
    add("view", {"shape": [2, -1, 2]}, I(U(2, 3, 4)))
    add("view", {"shape": [2, 3, 2, 2]}, I(U(2, 3, 4)))
    add("view", {"shape": [6, 2]}, I(U(2, 3, 4), view=N(2, 1, 2)))     # non-contiguous, merges (2,3)
    add("view", {"shape": [4, 2, 3]}, I(U(4, 6), view=N(0, 0, 4)))
    add("reshape", {"shape": [3, 2]}, I(U(2, 3)))
    add("reshape", {"shape": [-1, 4]}, I(U(2, 3, 4)))
    add("reshape", {"shape": [12]}, I(U(4, 3), view=T(0, 1)))          # needs a copy
    add("reshape", {"shape": [2, 2, 3]}, I(U(4, 3), view=T(0, 1)))
    add("reshape", {"shape": [6, -1]}, I(U(3, 4, 2), view=T(1, 2)))
    add("reshape", {"shape": [3, 4]}, I(U(3, 1), view=E(3, 4)))
    for d0, d1, shp in ((0, 1, (2, 3)), (1, 2, (2, 3, 4)), (-1, -2, (2, 3, 4)), (0, 2, (2, 3, 4)), (1, 1, (2, 3))):
        add("transpose", {"d0": d0, "d1": d1}, I(U(*shp)))
    add("transpose", {"d0": 0, "d1": 1}, I(U(3, 6), view=N(1, 1, 4)))
    add("t", {}, I(U(2, 3)))
    add("t", {}, I(U(4, 3), view=T(0, 1)))
    add("t", {}, I(U(3, 6), view=N(1, 1, 4)))
    for perm, shp in (([1, 0], (2, 3)), ([2, 0, 1], (2, 3, 4)), ([0, 2, 1, 3], (2, 3, 4, 2)), ([0, 1, 2], (2, 3, 4))):
        add("permute", {"perm": perm}, I(U(*shp)))
    add("permute", {"perm": [1, 2, 0]}, I(U(2, 4, 3), view=T(1, 2)))
    for dim, start, length in ((0, 1, 2), (1, 0, 2), (-1, 1, 3), (2, 2, 1), (1, 0, 3)):
        add("narrow", {"dim": dim, "start": start, "length": length}, I(U(3, 3, 4)))
    add("narrow", {"dim": 0, "start": 1, "length": 2}, I(U(4, 3), view=T(0, 1)))
    for dim, index in ((0, 1), (1, 2), (-1, 0), (2, 3), (1, -1)):
        add("select", {"dim": dim, "index": index}, I(U(2, 3, 4)))
    add("select", {"dim": 0, "index": 2}, I(U(4, 3), view=T(0, 1)))
    for dim in (0, 1, 2, -1, -3):
        add("unsqueeze", {"dim": dim}, I(U(2, 3)))
    add("unsqueeze", {"dim": 1}, I(U(4, 3), view=T(0, 1)))
    add("unsqueeze", {"dim": 0}, I(U()))
    for dim, shp in ((0, (1, 3)), (1, (2, 1, 3)), (-1, (2, 3, 1)), (0, (2, 3))):
        add("squeeze", {"dim": dim}, I(U(*shp)))
    add("squeeze_all", {}, I(U(1, 3, 1, 2)))
    add("squeeze_all", {}, I(U(2, 3)))
    add("squeeze_all", {}, I(U(1, 1)))
    add("expand", {"shape": [3, 4]}, I(U(3, 1)))
    add("expand", {"shape": [2, 3, 4]}, I(U(4)))
    add("expand", {"shape": [2, -1, 4]}, I(U(3, 1)))
    add("expand", {"shape": [2, 3]}, I(U(2, 3)))
    add("expand", {"shape": [2, 3, 4]}, I(U(1, 4, 3), view=T(1, 2)))
    add("expand", {"shape": [3, 2]}, I(U()))
    add("contiguous", {}, I(U(2, 3)))                                    # already contiguous: identity
    add("contiguous", {}, I(U(4, 3), view=T(0, 1)))
    add("contiguous", {}, I(U(3, 6), view=N(1, 1, 4)))
    add("contiguous", {}, I(U(3, 1), view=E(2, 3, 4)))
    add("contiguous", {}, I(U(2, 4, 3), view=T(0, 2)))
    add("clone", {}, I(U(2, 3)))
    add("clone", {}, I(U(4, 3), view=T(0, 1)))
    add("clone", {}, I(U(3, 1), view=E(3, 4)))
    add("cat", {"dim": 0}, I(U(2, 3)), I(U(1, 3)), I(U(3, 3)))
    add("cat", {"dim": 1}, I(U(2, 3)), I(U(2, 1)), I(U(2, 2)))
    add("cat", {"dim": -1}, I(U(2, 3, 2)), I(U(2, 3, 1)), I(U(2, 3, 3)))
    add("cat", {"dim": 1}, I(U(2, 2, 4)), I(U(2, 1, 4), rg=False), I(U(2, 3, 4)))
    add("cat", {"dim": 0}, I(U(3, 2), view=T(0, 1)), I(U(2, 5), view=N(1, 1, 3)), I(U(1, 1), view=E(1, 3)))
    add("cat", {"dim": 2}, I(U(2, 3, 2)), I(U(2, 3, 2)))
    add("stack", {"dim": 0}, I(U(2, 3)), I(U(2, 3)), I(U(2, 3)))
    add("stack", {"dim": 1}, I(U(2, 3)), I(U(2, 3)), I(U(2, 3)))
    add("stack", {"dim": 2}, I(U(2, 3)), I(U(2, 3)))
    add("stack", {"dim": -1}, I(U(3, 2), view=T(0, 1)), I(U(2, 3)), I(U(2, 3), rg=False))
    add("stack", {"dim": 0}, I(U(6, 3)), I(U(6, 3)))                    # the book's batch
    # ---- losses ----
    for r in ("mean", "sum", "none"):
        add("mse_loss", {"reduction": r}, I(U(2, 3)), I(U(2, 3), rg=False))
        add("mse_loss", {"reduction": r}, I(U(2, 3, 4)), I(U(2, 3, 4)))
        add("mse_loss", {"reduction": r}, I(U(4, 3), view=T(0, 1)), I(U(3, 4), rg=False))
        add("mse_loss", {"reduction": r}, I(U(8, 30)), I(U(8, 30), rg=False))
        add("cross_entropy", {"reduction": r}, I(U(4, 5)), I(D.classes(4, 5), rg=False))
        add("cross_entropy", {"reduction": r}, I(U(3, 2)), I(D.classes(3, 2), rg=False))
        add("cross_entropy", {"reduction": r}, I(U(5, 4), view=T(0, 1)), I(D.classes(4, 5), rg=False))
        add("cross_entropy", {"reduction": r}, I(U(6, 3) * 1e3), I(D.classes(6, 3), rg=False))
        add("cross_entropy", {"reduction": r}, I(U(8, 40)), I(D.classes(8, 40), rg=False))
    # ---- triangles and creation (tensor.h: not differentiable in tapegrad) ----
    for op in ("triu", "tril"):
        for dg in (-1, 0, 1, 2):
            add(op, {"diagonal": dg}, I(U(4, 5), rg=False))
        add(op, {"diagonal": 1}, I(U(2, 3, 3), rg=False))
        add(op, {"diagonal": 0}, I(U(5, 3), rg=False))
        add(op, {"diagonal": 1}, I(torch.ones(6, 6, dtype=torch.float64), rg=False))
        add(op, {"diagonal": 0}, I(U(4, 3), rg=False, view=T(0, 1)))
    for start, end, step in ((0, 5, 1), (1, 2, 0.25), (-1, 1, 0.3), (5, 0, -1.5), (0, 1, 0.1), (2, 3, 1)):
        add("arange", {"start": start, "end": end, "step": step})
    for n, m in ((3, 3), (2, 4), (4, 2), (1, 1)):
        add("eye", {"n": n, "m": m})


def generate(outdir):
    torch.set_default_dtype(torch.float32)
    CASES.clear()
    build_cases()
    cases = []
    for op, args, inputs in CASES:
        cache = {}
        for dtype in (torch.float64, torch.float32):   # float64 first: weights drawn once
            cases.append(make_case(op, args, inputs, dtype, cache))
    # keep a stable, readable order: by op then dtype then case
    counts = {}
    for c in cases:
        counts[c["op"]] = counts.get(c["op"], 0) + 1
    write_json(outdir, "ops.json", {
        "generator": "tools/reference/ops.py",
        "torch": torch.__version__,
        "cases": cases,
    })
    print("  %d cases over %d ops" % (len(cases), len(counts)))
