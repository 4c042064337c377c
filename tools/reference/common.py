"""Shared helpers for the reference generators: tensor <-> JSON, seeded data."""
import json
import math
import os

import torch

DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.bool: "bool",
    torch.int64: "int64",
}
FLOAT_DTYPES = (torch.float32, torch.float64)


def _num(v):
    """A JSON-safe number: exact float (repr round-trips), non-finite as strings."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def tensor_json(t):
    """{"shape", "dtype", "data"} for a tensor; data flat row-major.

    float32 values are written as the exact double of the float32 value (Python's
    repr round-trips it), so the C side recovers the identical float."""
    if t is None:
        return None
    t = t.detach().contiguous()
    if t.dtype not in DTYPES:
        raise ValueError("unsupported dtype %s" % t.dtype)
    flat = t.reshape(-1).tolist()
    if t.dtype == torch.bool:
        data = [bool(v) for v in flat]
    elif t.dtype == torch.int64:
        data = [int(v) for v in flat]
    else:
        data = [_num(v) for v in flat]
    return {"shape": list(t.shape), "dtype": DTYPES[t.dtype], "data": data}


def scalar_json(v):
    """A scalar argument: number, or "inf"/"-inf"/"nan"."""
    return _num(v)


def grad_fn_name(t):
    return type(t.grad_fn).__name__ if t.grad_fn is not None else None


class Data:
    """Deterministic test data. Values are multiples of 1/1024 (exact in float32
    and float64 alike, short to print), drawn from a seeded torch.Generator."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def randk(self, shape, lo, hi):
        """Integers uniform in [lo, hi)."""
        return torch.randint(lo, hi, tuple(shape), generator=self.g, dtype=torch.int64)

    def uniform(self, shape, lo=-2.0, hi=2.0, distinct=False, nonzero=False):
        """float64 tensor of multiples of 1/1024 in [lo, hi)."""
        a, b = int(math.ceil(lo * 1024)), int(math.floor(hi * 1024))
        while True:
            k = self.randk(shape, a, b).to(torch.float64) / 1024.0
            if nonzero and (k == 0).any():
                continue
            if distinct and k.numel() != torch.unique(k).numel():
                continue
            return k

    def small_ints(self, shape, lo=-2, hi=3, scale=0.5):
        """Few distinct values (for comparisons with ties)."""
        return self.randk(shape, lo, hi).to(torch.float64) * scale

    def bool(self, shape, p=0.5):
        return torch.rand(tuple(shape), generator=self.g, dtype=torch.float64) < p

    def classes(self, n, c):
        return self.randk((n,), 0, c)


def write_json(outdir, name, obj):
    path = os.path.join(outdir, name)
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    with open(path + ".tmp", "w") as f:
        f.write(text)
        f.write("\n")
    os.replace(path + ".tmp", path)
    size = os.path.getsize(path)
    if size > 2 * 1024 * 1024:
        raise RuntimeError("%s is %d bytes (> 2 MB): use smaller shapes" % (path, size))
    print("wrote %s (%d bytes)" % (path, size))
    return path
