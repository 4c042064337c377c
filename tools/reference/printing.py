"""Reference texts for tests/test_print.c: tests/ref/print.json.

Each case is a tensor (shape, dtype, row-major data, requires_grad) and the
exact text PyTorch's print() gives it with the default print options.
Non-finite values are stored as the strings "inf", "-inf" and "nan".
"""
import json
import math
import os

import torch


def _rand(seed, *shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=dtype)


def _randn(seed, *shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _cases():
    f64 = torch.float64
    t = torch.tensor
    cases = [
        ("1d", t([1.5, 2.25, -3.0])),
        ("ints_as_floats", t([1.0, 2.0, 3.0])),
        ("zeros", torch.zeros(2)),
        ("2d_ints_as_floats", t([[1.0, 2.0], [3.0, 4.0]])),
        ("2d", _rand(1, 2, 3)),
        ("book_inputs", t([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                           [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])),
        ("3d", _rand(2, 2, 3, 4)),
        ("4d", _rand(3, 2, 2, 3, 2)),
        ("sci_small_min", t([1e-5, 1.0])),
        ("sci_ratio", t([1.0, 2000.0, 0.5])),
        ("sci_int_valued", t([1e9, 2.0])),
        ("huge_int_valued", t([123456789.0])),
        ("int_valued_1e8", t([100000000.0, 3.0])),
        ("tiny", t([1e-10, -3e-12])),
        ("negative", t([-1.2345, -10.5, 3.25])),
        ("nonfinite_mixed", t([-math.inf, math.nan, 1.5, math.inf])),
        ("all_nan", t([math.nan, math.nan])),
        ("int_mode_with_inf", t([math.inf, 1.0, -2.0])),
        ("negative_zero", t([-0.0, 1.5])),
        ("negative_zero_int_mode", t([-0.0, 2.0])),
        ("rounding_near_1e-4", t([0.00015, 0.12345, 0.99995])),
        ("mixed_2d_sci", t([[1e-3, 1.0], [100.0, 5000.0]])),
        ("f64", t([0.1, 0.2], dtype=f64)),
        ("f64_2d", _rand(4, 3, 3, dtype=f64)),
        ("f64_sci", t([1e-20, 3.5e15], dtype=f64)),
        ("bool", t([[True, False], [False, True]])),
        ("int64", t([1, -20, 300])),
        ("int64_2d", torch.arange(12).reshape(3, 4)),
        ("int64_large", t([10**15, -3])),
        ("uint8", t([1, 2, 255], dtype=torch.uint8)),
        ("empty", torch.empty(0)),
        ("empty_2d", torch.empty(2, 0)),
        ("empty_int64", torch.empty(0, dtype=torch.int64)),
        ("empty_bool_2d", torch.empty(0, 3, dtype=torch.bool)),
        ("empty_f64_3d", torch.empty(1, 0, 2, dtype=f64)),
        ("scalar", t(3.5)),
        ("scalar_int64", t(7)),
        ("scalar_f64_int_valued", t(2.0, dtype=f64)),
        ("scalar_bool", t(True)),
        ("scalar_nan", t(math.nan)),
        ("scalar_zero", t(0.0)),
        ("summarized_1d", torch.arange(1500, dtype=torch.float32)),
        ("summarized_2d", _rand(5, 40, 40)),
        ("summarized_3d", _rand(6, 12, 10, 10)),
        ("summarized_4d", _rand(7, 2, 3, 20, 20)),
        ("summarized_int64", torch.arange(2000).reshape(100, 20)),
        ("summarized_bool", _rand(8, 1001) > 0.5),
        ("summarized_sci", _randn(9, 1200) * 1e-5),
        ("wide_row", _rand(10, 30)),
        ("wide_randn", _randn(11, 25)),
        ("wide_2d", _rand(12, 3, 20)),
        ("wide_sci", _randn(13, 20) * 1e-5),
        ("wide_int64", torch.arange(-40, 40) * 1000),
        ("requires_grad", _rand(14, 2, 3).requires_grad_()),
        ("requires_grad_wraps", _rand(15, 9).requires_grad_()),
        ("requires_grad_f64", _rand(16, 2, dtype=f64).requires_grad_()),
        ("requires_grad_f64_wraps", _rand(17, 8, dtype=f64).requires_grad_()),
        ("requires_grad_scalar", t(1.0, requires_grad=True)),
        ("requires_grad_empty_2d", torch.empty(3, 0, dtype=f64).requires_grad_()),
    ]
    return cases


def _value(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def generate(outdir):
    out = {"torch_version": torch.__version__, "cases": []}
    for name, x in _cases():
        text = str(x)
        flat = x.detach().reshape(-1).tolist()
        out["cases"].append({
            "name": name,
            "shape": list(x.shape),
            "dtype": str(x.dtype).replace("torch.", ""),
            "requires_grad": x.requires_grad,
            "data": [_value(v) for v in flat],
            "text": text,
        })
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "print.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    generate(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
