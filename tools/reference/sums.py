"""tests/ref/sums.json: float32 sums as PyTorch's CPU kernel adds them
(aten's cascade sum), to check tapegrad's sums bit for bit.

Each case: x drawn with torch.randn (a torch.Generator seeded per case, the
values scaled so that rounding matters), the dim summed and the result:
{"cases": [{"shape", "dim", "keepdim", "x", "sum"}, ...]}. dim -1 sums each
row (sum(dim=-1)); dim 0 sums the rows of a matrix (sum(dim=0)), as a bias
gradient does (fewer than 8 columns: scalar_outer_sum's order, 4 columns at
a time).

"qk_norm": the broadcast weight's gradient of a QK-norm, the composed RMSNorm
over head_dim of queries q = x.view(b, T, H, hd).transpose(1, 2) (a
transposed view), w = 1 + scale:
  out = (q * rsqrt(q.pow(2).mean(-1, keepdim=True) + eps)) * w,
  out.backward(grad); the sum of grad * normed over (b, H, T) down to (hd,).
Each case: {"b", "T", "H", "hd", "eps", "x" (b, T, H * hd), "scale" (hd,),
"grad" (b, H, T, hd), "scale_grad", "x_grad"}.
"""
import torch

from .common import tensor_json, write_json

CASES = [
    ((3, 1), -1), ((3, 5), -1), ((2, 7), -1), ((2, 8), -1), ((2, 13), -1), ((2, 32), -1), ((2, 33), -1),
    ((2, 100), -1), ((2, 768), -1), ((1, 1100), -1),
    ((5, 1), 0), ((7, 3), 0), ((70, 8), 0), ((33, 40), 0), ((130, 77), 0),
    ((80, 6), 0), ((70, 5), 0), ((33, 7), 0), ((200, 4), 0), ((1000, 6), 0),
]

# (b, T, H, hd): head_dim below a vector's 8 lanes and not a multiple of 4,
# and 8 as PyTorch's vector path
QK_NORM_CASES = [(2, 10, 4, 6), (2, 10, 2, 6), (1, 9, 3, 5), (2, 7, 2, 7), (2, 33, 4, 6), (2, 10, 4, 8)]


def generate(outdir):
    cases = []
    for k, (shape, dim) in enumerate(CASES):
        g = torch.Generator().manual_seed(1000 + k)
        x = torch.randn(shape, generator=g) * 3.0 + 0.25
        s = x.sum(dim=dim, keepdim=True)
        cases.append({"shape": list(shape), "dim": dim, "keepdim": True, "x": tensor_json(x), "sum": tensor_json(s)})
    qk = []
    eps = 1e-6
    for k, (b, T, H, hd) in enumerate(QK_NORM_CASES):
        g = torch.Generator().manual_seed(2000 + k)
        x = (torch.randn((b, T, H * hd), generator=g) * 2.0).requires_grad_(True)
        scale = (torch.randn((hd,), generator=g) * 0.1).requires_grad_(True)
        grad = torch.randn((b, H, T, hd), generator=g)
        q = x.view(b, T, H, hd).transpose(1, 2)
        w = 1.0 + scale
        normed = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps)
        (normed * w).backward(grad)
        qk.append({"b": b, "T": T, "H": H, "hd": hd, "eps": eps, "x": tensor_json(x), "scale": tensor_json(scale),
                   "grad": tensor_json(grad), "scale_grad": tensor_json(scale.grad), "x_grad": tensor_json(x.grad)})
    write_json(outdir, "sums.json", {"cases": cases, "qk_norm": qk})
