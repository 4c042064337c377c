"""Reference bytes for tests/test_export_gguf.c: tests/ref/q8_0.json.

llama.cpp's Q8_0 (gguf-py's quants.py, Q8_0.quantize_blocks, the numpy twin
of ggml-quants.c's quantize_row_q8_0_ref): per block of 32 float32 values
d = max|x| / 127, id = 1 / d (0 when d is 0), q = np_roundf(x * id) (halves
away from zero), d stored as IEEE half; a block is the half's two bytes
(little-endian) and the 32 int8 values. The rows below cover random values,
zeros, exact halves (x * id = k + 0.5), a negative maximum, values whose
scale is a half subnormal and one whose scale overflows the half's range.

IEEE half from float32 (numpy's astype(float16), round to nearest even):
ties, subnormals, the overflow edge (65504, 65520), signed zero, infinities.

Values are written as the exact doubles of the float32 values, bytes as hex.
"""
import json
import os

import numpy as np


def np_roundf(n):
    """gguf-py's np_roundf: round half away from zero, as C's roundf."""
    a = abs(n)
    floored = np.floor(a)
    b = floored + np.floor(2 * (a - floored))
    return np.sign(n) * b


def q8_0_blocks(x):
    """gguf-py's Q8_0.quantize_blocks on a float32 row (length a multiple of 32)."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    d = abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    qs = np_roundf(blocks * inv)
    with np.errstate(over="ignore"):
        dh = d.astype(np.float16).view(np.uint8)
    qs = qs.astype(np.int8).view(np.uint8)
    return np.concatenate([dh, qs], axis=1).tobytes()


def rows():
    rng = np.random.default_rng(20240607)
    out = []
    out.append(("normal", (rng.standard_normal(64) * 0.02).astype(np.float32)))
    out.append(("uniform", rng.uniform(-3, 3, 96).astype(np.float32)))
    out.append(("zeros", np.zeros(32, dtype=np.float32)))
    # max 127: d = 1, id = 1, so every x.5 is an exact half of the rounding
    ties = np.array([127, -127, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, -3.5, 126.5, -126.5, 0.25, -0.25,
                     0.75, 1.25, 63.5, -63.5, 0, -0.0, 10, -10, 100.49, 100.5, 100.51, 7.5, -7.5,
                     8.5, -8.5, 0.49999997, -0.49999997, 1],
                    dtype=np.float32)
    out.append(("ties", ties))
    neg = rng.uniform(-1, 1, 32).astype(np.float32)
    neg[5] = -4.0
    out.append(("negative_max", neg))
    out.append(("tiny", (rng.standard_normal(32) * 1e-6).astype(np.float32)))
    big = rng.uniform(-1, 1, 32).astype(np.float32)
    big[0] = 1e7
    out.append(("overflowing_scale", big))
    return out


F16_VALUES = [0.0, -0.0, 1.0, -1.0, 1.0 + 2**-11, 1.0 + 3 * 2**-11, 1.0 + 2**-11 + 2**-20, 2.0 - 2**-12,
              0.1, 1 / 3, 65504.0, 65519.0, 65520.0, 70000.0, -65520.0, 6.0e-8, 2**-24, 2**-25,
              1.5 * 2**-25, 2**-25 + 2**-40, 3 * 2**-25, 2**-14, 2**-14 - 2**-25, 2**-14 + 2**-24,
              5.9604645e-08, 1e-10, 3.14159265, -2.71828183, 1024.5, 2049.0, 2051.0, float("inf"),
              float("-inf")]


def generate(outdir):
    out = {"q8_0": [], "f16": []}
    for name, x in rows():
        out["q8_0"].append({"name": name, "x": [float(v) for v in x.astype(np.float32)],
                            "bytes": q8_0_blocks(x).hex()})
    for v in F16_VALUES:
        f = np.float32(v)
        with np.errstate(over="ignore"):
            h = int(np.array([f], dtype=np.float32).astype(np.float16).view(np.uint16)[0])
        out["f16"].append({"x": float(f) if np.isfinite(f) else ("inf" if f > 0 else "-inf"), "bits": h})
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "q8_0.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    generate(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
