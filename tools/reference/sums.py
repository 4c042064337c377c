"""tests/ref/sums.json: float32 sums as PyTorch's CPU kernel adds them
(aten's cascade sum), to check tapegrad's sums bit for bit.

Each case: x drawn with torch.randn (a torch.Generator seeded per case, the
values scaled so that rounding matters), the dim summed and the result:
{"cases": [{"shape", "dim", "keepdim", "x", "sum"}, ...]}. dim -1 sums each
row (sum(dim=-1)); dim 0 sums the rows of a matrix (sum(dim=0)), as a bias
gradient does.
"""
import torch

from .common import tensor_json, write_json

CASES = [
    ((3, 1), -1), ((3, 5), -1), ((2, 7), -1), ((2, 8), -1), ((2, 13), -1), ((2, 32), -1), ((2, 33), -1),
    ((2, 100), -1), ((2, 768), -1), ((1, 1100), -1),
    ((5, 1), 0), ((7, 3), 0), ((70, 8), 0), ((33, 40), 0), ((130, 77), 0),
]


def generate(outdir):
    cases = []
    for k, (shape, dim) in enumerate(CASES):
        g = torch.Generator().manual_seed(1000 + k)
        x = torch.randn(shape, generator=g) * 3.0 + 0.25
        s = x.sum(dim=dim, keepdim=True)
        cases.append({"shape": list(shape), "dim": dim, "keepdim": True, "x": tensor_json(x), "sum": tensor_json(s)})
    write_json(outdir, "sums.json", {"cases": cases})
