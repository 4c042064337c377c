"""tests/ref/autograd.json: grad_fn names, values and gradients along the
book's attention computations, step by step, on the book's 6x3 input (BOOK in
tools/reference/book.py).

Each chain: {"name", "dtype", "leaves": {name: {"tensor", "requires_grad"}},
"steps": [{"name", "op", "inputs": [names], "args": {...}, "grad_fn", "output"}],
"root": step name (a 1-element tensor), "grads": {leaf name: tensor}}.
Ops used by steps (tests/test_autograd_ref.c replays them with tg_ calls):
matmul, t, transpose(d0,d1), masked_fill(value), div_scalar(scalar),
softmax(dim), sum, stack(dim), view(shape), contiguous, narrow(dim,start,length),
linear, mul_scalar(scalar), add.
"""
import math

import torch
import torch.nn.functional as F

from .common import DTYPES, grad_fn_name, scalar_json, tensor_json, write_json

BOOK = [[0.43, 0.15, 0.89],
        [0.55, 0.87, 0.66],
        [0.57, 0.85, 0.64],
        [0.22, 0.58, 0.33],
        [0.77, 0.25, 0.10],
        [0.05, 0.80, 0.55]]


class Chain:
    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype
        self.leaves, self.steps, self.vals = {}, [], {}

    def leaf(self, name, t, requires_grad=True):
        t = t.detach().clone()
        if t.dtype.is_floating_point:
            t = t.to(self.dtype).requires_grad_(requires_grad)
        self.leaves[name] = {"tensor": tensor_json(t), "requires_grad": bool(requires_grad)}
        self.vals[name] = t
        return t

    def step(self, name, op, inputs, out, **args):
        for k in ("scalar", "value"):
            if k in args:
                args[k] = scalar_json(args[k])
        self.steps.append({"name": name, "op": op, "inputs": list(inputs), "args": args,
                           "grad_fn": grad_fn_name(out), "output": tensor_json(out)})
        self.vals[name] = out
        return out

    def finish(self, root):
        r = self.vals[root]
        r.backward()
        grads = {n: tensor_json(self.vals[n].grad) for n, l in self.leaves.items()
                 if l["requires_grad"] and self.vals[n].grad is not None}
        return {"name": self.name, "dtype": DTYPES[self.dtype], "leaves": self.leaves,
                "steps": self.steps, "root": root, "grads": grads}


def rand_ws(d_in, d_out, dtype):
    torch.manual_seed(123)
    return [torch.rand(d_in, d_out) for _ in range(3)]   # W_query, W_key, W_value (float32 draws)


def simplified(dtype):
    c = Chain("simplified_self_attention", dtype)
    x = c.leaf("x", torch.tensor(BOOK, dtype=torch.float64))
    xt = c.step("xT", "t", ["x"], x.t())
    s = c.step("scores", "matmul", ["x", "xT"], x @ xt)
    w = c.step("weights", "softmax", ["scores"], torch.softmax(s, dim=-1), dim=-1)
    ctx = c.step("context", "matmul", ["weights", "x"], w @ x)
    c.step("loss", "sum", ["context"], ctx.sum())
    return c.finish("loss")


def self_attention_v1(dtype):
    c = Chain("self_attention_v1", dtype)
    wq, wk, wv = rand_ws(3, 2, dtype)
    x = c.leaf("x", torch.tensor(BOOK, dtype=torch.float64))
    Wq, Wk, Wv = c.leaf("W_query", wq), c.leaf("W_key", wk), c.leaf("W_value", wv)
    k = c.step("keys", "matmul", ["x", "W_key"], x @ Wk)
    q = c.step("queries", "matmul", ["x", "W_query"], x @ Wq)
    v = c.step("values", "matmul", ["x", "W_value"], x @ Wv)
    kt = c.step("keysT", "t", ["keys"], k.t())
    s = c.step("scores", "matmul", ["queries", "keysT"], q @ kt)
    sc = c.step("scaled", "div_scalar", ["scores"], s / k.shape[-1] ** 0.5, scalar=k.shape[-1] ** 0.5)
    w = c.step("weights", "softmax", ["scaled"], torch.softmax(sc, dim=-1), dim=-1)
    ctx = c.step("context", "matmul", ["weights", "values"], w @ v)
    c.step("loss", "sum", ["context"], ctx.sum())
    return c.finish("loss")


def causal_2d(dtype):
    """The book's causal chain, 2-D input: mask, masked_fill(-inf), /sqrt(d), softmax, @v."""
    c = Chain("causal_attention_2d", dtype)
    wq, wk, wv = rand_ws(3, 2, dtype)
    x = c.leaf("x", torch.tensor(BOOK, dtype=torch.float64))
    Wq, Wk, Wv = c.leaf("W_query", wq), c.leaf("W_key", wk), c.leaf("W_value", wv)
    T = x.shape[0]
    mask = c.leaf("mask", torch.triu(torch.ones(T, T), diagonal=1).bool(), requires_grad=False)
    q = c.step("queries", "matmul", ["x", "W_query"], x @ Wq)
    k = c.step("keys", "matmul", ["x", "W_key"], x @ Wk)
    v = c.step("values", "matmul", ["x", "W_value"], x @ Wv)
    kt = c.step("keysT", "transpose", ["keys"], k.transpose(0, 1), d0=0, d1=1)
    s = c.step("scores", "matmul", ["queries", "keysT"], q @ kt)
    m = c.step("masked", "masked_fill", ["scores", "mask"], s.masked_fill(mask, -math.inf), value=-math.inf)
    d = k.shape[-1] ** 0.5
    sc = c.step("scaled", "div_scalar", ["masked"], m / d, scalar=d)
    w = c.step("weights", "softmax", ["scaled"], torch.softmax(sc, dim=-1), dim=-1)
    ctx = c.step("context", "matmul", ["weights", "values"], w @ v)
    c.step("loss", "sum", ["context"], ctx.sum())
    return c.finish("loss")


def causal_batched(dtype):
    """CausalAttention.forward on stack((x, x)): (2, 6, 3) @ (3, 2), transpose(1, 2),
    mask[:T, :T] from a larger context_length buffer."""
    c = Chain("causal_attention_batched", dtype)
    wq, wk, wv = rand_ws(3, 2, dtype)
    x0 = c.leaf("x", torch.tensor(BOOK, dtype=torch.float64))
    Wq, Wk, Wv = c.leaf("W_query", wq), c.leaf("W_key", wk), c.leaf("W_value", wv)
    buf = c.leaf("mask_buffer", torch.triu(torch.ones(8, 8), diagonal=1).bool(), requires_grad=False)
    xb = c.step("batch", "stack", ["x", "x"], torch.stack((x0, x0), dim=0), dim=0)
    T = xb.shape[1]
    m0 = c.step("mask_rows", "narrow", ["mask_buffer"], buf.narrow(0, 0, T), dim=0, start=0, length=T)
    mask = c.step("mask", "narrow", ["mask_rows"], m0.narrow(1, 0, T), dim=1, start=0, length=T)
    k = c.step("keys", "matmul", ["batch", "W_key"], xb @ Wk)
    q = c.step("queries", "matmul", ["batch", "W_query"], xb @ Wq)
    v = c.step("values", "matmul", ["batch", "W_value"], xb @ Wv)
    kt = c.step("keysT", "transpose", ["keys"], k.transpose(1, 2), d0=1, d1=2)
    s = c.step("scores", "matmul", ["queries", "keysT"], q @ kt)
    m = c.step("masked", "masked_fill", ["scores", "mask"], s.masked_fill(mask, -math.inf), value=-math.inf)
    d = k.shape[-1] ** 0.5
    sc = c.step("scaled", "div_scalar", ["masked"], m / d, scalar=d)
    w = c.step("weights", "softmax", ["scaled"], torch.softmax(sc, dim=-1), dim=-1)
    ctx = c.step("context", "matmul", ["weights", "values"], w @ v)
    c.step("loss", "sum", ["context"], ctx.sum())
    return c.finish("loss")


def mha_style(dtype):
    """MultiHeadAttention's reshaping on the batched book input: Linear, view,
    transpose(1, 2), 4-D matmul, broadcast mask, softmax, transpose back,
    contiguous, view, out_proj."""
    c = Chain("multi_head_attention", dtype)
    torch.manual_seed(123)
    d_in, d_out, h = 3, 4, 2
    hd = d_out // h
    lq, lk, lv = (torch.nn.Linear(d_in, d_out, bias=False) for _ in range(3))
    lo = torch.nn.Linear(d_out, d_out)
    x0 = c.leaf("x", torch.tensor(BOOK, dtype=torch.float64))
    Wq, Wk, Wv = c.leaf("W_query.weight", lq.weight), c.leaf("W_key.weight", lk.weight), c.leaf("W_value.weight", lv.weight)
    Wo, bo = c.leaf("out_proj.weight", lo.weight), c.leaf("out_proj.bias", lo.bias)
    mask = c.leaf("mask", torch.triu(torch.ones(6, 6), diagonal=1).bool(), requires_grad=False)
    xb = c.step("batch", "stack", ["x", "x"], torch.stack((x0, x0), dim=0), dim=0)
    b, T, _ = xb.shape
    k = c.step("keys", "linear", ["batch", "W_key.weight"], F.linear(xb, Wk))
    q = c.step("queries", "linear", ["batch", "W_query.weight"], F.linear(xb, Wq))
    v = c.step("values", "linear", ["batch", "W_value.weight"], F.linear(xb, Wv))
    shp = [b, T, h, hd]
    k4 = c.step("keys4", "view", ["keys"], k.view(*shp), shape=shp)
    q4 = c.step("queries4", "view", ["queries"], q.view(*shp), shape=shp)
    v4 = c.step("values4", "view", ["values"], v.view(*shp), shape=shp)
    kh = c.step("keysH", "transpose", ["keys4"], k4.transpose(1, 2), d0=1, d1=2)
    qh = c.step("queriesH", "transpose", ["queries4"], q4.transpose(1, 2), d0=1, d1=2)
    vh = c.step("valuesH", "transpose", ["values4"], v4.transpose(1, 2), d0=1, d1=2)
    kt = c.step("keysT", "transpose", ["keysH"], kh.transpose(2, 3), d0=2, d1=3)
    s = c.step("scores", "matmul", ["queriesH", "keysT"], qh @ kt)
    m = c.step("masked", "masked_fill", ["scores", "mask"], s.masked_fill(mask, -math.inf), value=-math.inf)
    d = kh.shape[-1] ** 0.5
    sc = c.step("scaled", "div_scalar", ["masked"], m / d, scalar=d)
    w = c.step("weights", "softmax", ["scaled"], torch.softmax(sc, dim=-1), dim=-1)
    ctx = c.step("context", "matmul", ["weights", "valuesH"], w @ vh)
    ct = c.step("contextT", "transpose", ["context"], ctx.transpose(1, 2), d0=1, d1=2)
    cc = c.step("contextC", "contiguous", ["contextT"], ct.contiguous())
    cv = c.step("contextV", "view", ["contextC"], cc.view(b, T, d_out), shape=[b, T, d_out])
    out = c.step("output", "linear", ["contextV", "out_proj.weight", "out_proj.bias"], F.linear(cv, Wo, bo))
    c.step("loss", "sum", ["output"], out.sum())
    return c.finish("loss")


def generate(outdir):
    chains = []
    for dtype in (torch.float32, torch.float64):
        for fn in (simplified, self_attention_v1, causal_2d, causal_batched, mha_style):
            chains.append(fn(dtype))
    write_json(outdir, "autograd.json", {"generator": "tools/reference/autograd.py",
                                         "torch": torch.__version__, "chains": chains})
