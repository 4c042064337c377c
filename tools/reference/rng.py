"""Reference draws for tests/test_rng.c: tests/ref/rng.json.

For each seed, one generator is seeded once and then drawn from in the order
listed in DRAWS, so the file checks the generator's state sequence (including
the Box-Muller value cached between small normal_ calls), not just each
kernel on a fresh seed. Values are stored exactly: float32 values widen to
double without loss and Python's float repr round-trips.
"""
import json
import os

import torch

SEEDS = [0, 1, 42, 123, 2**32 + 7, 2**40 + 5]

# (op, dtype, size, args). Sizes below 16 take PyTorch's scalar normal path,
# 16 and up the 16-wide Box-Muller fill, non-multiples of 16 its redrawn tail.
DRAWS = [
    ("rand", "float32", 10000, []),
    ("rand", "float64", 10000, []),
    ("uniform_", "float32", 1000, [-0.5, 0.5]),
    ("uniform_", "float64", 100, [-2.0, 3.0]),
    ("normal_", "float32", 5, [0.0, 1.0]),
    ("normal_", "float32", 16, [0.0, 1.0]),
    ("normal_", "float32", 17, [0.0, 1.0]),
    ("normal_", "float32", 100, [0.0, 1.0]),
    ("normal_", "float64", 16, [0.0, 1.0]),
    ("normal_", "float64", 100, [0.0, 1.0]),
    ("normal_", "float64", 5, [0.0, 1.0]),
    ("normal_", "float32", 3, [0.0, 1.0]),
    ("normal_", "float32", 40, [0.3, 1.7]),
    ("normal_", "float64", 7, [-1.0, 0.5]),
    ("rand", "float32", 7, []),
]

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def draw(gen, op, dtype, size, args):
    t = torch.empty(size, dtype=DTYPES[dtype])
    if op == "rand":
        t.uniform_(0.0, 1.0, generator=gen)
    elif op == "uniform_":
        t.uniform_(args[0], args[1], generator=gen)
    elif op == "normal_":
        t.normal_(args[0], args[1], generator=gen)
    else:
        raise ValueError(op)
    return t


def generate(outdir):
    out = {"torch_version": torch.__version__, "seeds": []}
    for seed in SEEDS:
        gen = torch.Generator().manual_seed(seed)
        draws = []
        for op, dtype, size, args in DRAWS:
            t = draw(gen, op, dtype, size, args)
            draws.append({"op": op, "dtype": dtype, "shape": [size], "args": args,
                          "data": [float(v) for v in t.tolist()]})
        out["seeds"].append({"seed": seed, "draws": draws})
    # torch.rand on the default generator, as tg_manual_seed + tg_rand(..., NULL).
    torch.manual_seed(123)
    default = {"seed": 123, "shape": [2, 3], "dtype": "float64",
               "data": torch.rand(2, 3, dtype=torch.float64).flatten().tolist()}
    out["default_generator"] = default
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "rng.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    generate(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
