"""tests/ref/bitexact.json: float32 results that tapegrad reproduces bit for bit.

PyTorch's CPU kernels (AVX2 build): exp, log and tanh through SLEEF, softmax
and log_softmax sums over 8 lanes, nll_loss's cascade, fused multiply-adds in
the backward kernels, backward's schedule; and a training step of the book's
GPT (chapter 4) with dropout, whose loss and every gradient tests/test_bitexact.c
compares with zero tolerance, with the book's composed layers and with the
fused LayerNorm and GELU. Generated with one thread (OpenBLAS's sums depend on
how many threads share a product); the test runs with one too.
"""
import ctypes
import os

import torch
import torch.nn.functional as F

from .common import tensor_json, write_json
from .gpt_book import GPTModel

GPT = {"vocab_size": 97, "context_length": 12, "emb_dim": 32, "n_heads": 4,
       "n_layers": 2, "drop_rate": 0.1, "qkv_bias": True}


def values(n, scale, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * scale


def unary_cases():
    out = []
    # 16-element vector steps, then a tail the C library computes
    for name, fn, x in [("exp", torch.exp, values(1000 + 13, 6.0, 1)),
                        ("log", torch.log, values(1000 + 7, 50.0, 2).abs() + 1e-3),
                        ("tanh", torch.tanh, values(1000 + 9, 3.0, 3))]:
        out.append({"op": name, "x": tensor_json(x), "y": tensor_json(fn(x))})
    return out


def softmax_cases():
    out = []
    for rows, cols, seed in [(4, 5, 4), (6, 37, 5), (3, 300, 6)]:
        x = values(rows * cols, 3.0, seed).reshape(rows, cols)
        x[:, cols // 2:] = torch.where(values(rows * (cols - cols // 2), 1.0, seed + 100).reshape(rows, -1) > 0.8,
                                       torch.tensor(float("-inf")), x[:, cols // 2:])
        gy = values(rows * cols, 1.0, seed + 200).reshape(rows, cols)
        case = {"x": tensor_json(x), "gy": tensor_json(gy)}
        for key, fn in [("softmax", torch.softmax), ("log_softmax", torch.log_softmax)]:
            xx = x.clone().requires_grad_(True)
            y = fn(xx, dim=-1)
            y.backward(gy)
            case[key] = {"y": tensor_json(y), "dx": tensor_json(xx.grad)}
        out.append(case)
    return out


def cross_entropy_case():
    n, c = 300, 50
    x = (values(n * c, 2.0, 7).reshape(n, c)).requires_grad_(True)
    t = torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(8))
    t[::7] = -100
    loss = F.cross_entropy(x, t)
    loss.backward()
    return {"x": tensor_json(x), "target": tensor_json(t), "loss": float(loss), "dx": tensor_json(x.grad)}


def gpt_step():
    torch.manual_seed(123)
    model = GPTModel(GPT)
    model.train()
    g = torch.Generator().manual_seed(9)
    x = torch.randint(0, GPT["vocab_size"], (3, GPT["context_length"]), generator=g)
    y = torch.randint(0, GPT["vocab_size"], (3, GPT["context_length"]), generator=g)
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    return {"config": GPT, "x": tensor_json(x), "y": tensor_json(y), "loss": float(loss),
            "logits": tensor_json(logits),
            "grads": {n: tensor_json(p.grad) for n, p in model.named_parameters()}}


def blas_core():
    """OpenBLAS's kernel family on this CPU (torch's libblas.so.3): GEMM bits
    depend on it, so the test compares the GPT step only under the same one."""
    try:
        lib = ctypes.CDLL("libblas.so.3")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return None


def generate(outdir):
    write_json(outdir, "bitexact.json", {
        "blas_core": blas_core(),
        "unary": unary_cases(),
        "softmax": softmax_cases(),
        "cross_entropy": cross_entropy_case(),
        "gpt": gpt_step(),
    })
