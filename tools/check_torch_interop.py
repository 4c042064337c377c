#!/usr/bin/python3
"""Checks that tapegrad's state_dict files and PyTorch's are interchangeable.

Run with Debian's python3-torch (1.13):

    /usr/bin/python3 tools/check_torch_interop.py [build/tools/tapegrad]

For each chapter-3 module (built as the book writes it, with the CLI's default
sizes: d_in 3, d_out 2, 2 heads, dropout 0, the book's input):
  (a) `tapegrad attention --save F` (seed 123) loaded into a PyTorch module
      built with another seed (load_state_dict, strict) gives tapegrad's
      `--json` output and gradients;
  (b) a PyTorch module (seed 7) saved with its state_dict to F is reproduced
      by `tapegrad attention --load F --json` (output and gradients).
And for the book's GPTModel (a small configuration, qkv_bias on): (c) a model
that libtapegrad builds (seed 123, called through ctypes) and saves with
tg_module_save loads strictly into a PyTorch GPTModel built with another seed
and gives the eval-mode logits of PyTorch's own seed-123 model; (d) the
reverse direction is tests/test_gpt.c's test_load_state_dict.
There is no safetensors package for Debian's python, so the format is read
and written here by hand (8-byte little-endian header length, JSON header,
raw little-endian data). Prints PASS/FAIL per module; exit 1 on any FAIL.
"""
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

# float32 through different summation orders: a few ulps, relative to the
# magnitude for values above 1 (gradients reach ~6 on the book's input)
TOL = 2e-6

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference.book import (CausalAttention, MultiHeadAttention, MultiHeadAttentionWrapper,  # noqa: E402
                            SelfAttention_v1, SelfAttention_v2)


BOOK = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                     [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])


def build(name, seed, bias, d_in=3, d_out=2, heads=2, context=6):
    torch.manual_seed(seed)
    if name == "sa-v1":
        return SelfAttention_v1(d_in, d_out)
    if name == "sa-v2":
        return SelfAttention_v2(d_in, d_out, bias)
    if name == "causal":
        return CausalAttention(d_in, d_out, context, 0.0, bias)
    if name == "mha-wrapper":
        return MultiHeadAttentionWrapper(d_in, d_out, context, 0.0, heads, bias)
    return MultiHeadAttention(d_in, d_out, context, 0.0, heads, bias)


def book_input(name):
    return BOOK.clone() if name in ("sa-v1", "sa-v2") else torch.stack((BOOK, BOOK), dim=0)

# ---- safetensors by hand ------------------------------------------------------------


ST_DTYPES = {"F32": (torch.float32, "f", 4), "F64": (torch.float64, "d", 8)}


def st_read(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    data = buf[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, code, size = ST_DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        count = (e - b) // size
        vals = struct.unpack_from("<%d%s" % (count, code), data, b)
        out[name] = torch.tensor(vals, dtype=dt).reshape(info["shape"])
    return out


def st_write(path, tensors):
    header, chunks, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        code, tag = ("f", "F32") if t.dtype == torch.float32 else ("d", "F64")
        raw = struct.pack("<%d%s" % (t.numel(), code), *t.reshape(-1).tolist())
        header[name] = {"dtype": tag, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        f.write(b"".join(chunks))

# ---- comparisons ----------------------------------------------------------------------


def run_json(tg, args):
    p = subprocess.run([tg, "attention"] + args + ["--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("tapegrad %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr.strip()))
    return json.loads(p.stdout)


def torch_result(m, x):
    x = x.clone().requires_grad_(True)
    y = m(x)
    y.sum().backward()
    grads = {n: p.grad for n, p in m.named_parameters()}
    grads["input"] = x.grad
    return y.detach(), grads


def max_diff(ref, j):
    t = torch.tensor(j["data"], dtype=torch.float64).reshape(j["shape"])
    if list(t.shape) != list(ref.shape):
        return float("inf")
    r = ref.double()
    return ((t - r).abs() / r.abs().clamp(min=1.0)).max().item() if t.numel() else 0.0


def compare(y, grads, j):
    worst = max_diff(y, j["output"])
    if set(j["grads"]) != set(grads):
        raise RuntimeError("gradient names differ: %s vs %s" % (sorted(j["grads"]), sorted(grads)))
    for n, g in grads.items():
        worst = max(worst, max_diff(g, j["grads"][n]))
    return worst


def check(tg, tmp, name, bias):
    extra = ["--qkv-bias"] if bias else []
    x = book_input(name)
    # (a) tapegrad -> PyTorch
    fa = os.path.join(tmp, "a-%s.safetensors" % name)
    j = run_json(tg, ["--module", name, "--seed", "123", "--save", fa] + extra)
    m = build(name, 999, bias)
    m.load_state_dict(st_read(fa), strict=True)
    ya, ga = torch_result(m, x)
    err_a = compare(ya, ga, j)
    # (b) PyTorch -> tapegrad
    fb = os.path.join(tmp, "b-%s.safetensors" % name)
    m = build(name, 7, bias)
    st_write(fb, m.state_dict())
    yb, gb = torch_result(m, x)
    err_b = compare(yb, gb, run_json(tg, ["--module", name, "--seed", "123", "--load", fb] + extra))
    # the seeds alone: tapegrad's module equals PyTorch's for the same seed
    y0, g0 = torch_result(build(name, 123, bias), x)
    err_0 = compare(y0, g0, j)
    return err_a, err_b, err_0


class GptConfig(ctypes.Structure):
    _fields_ = [("vocab_size", ctypes.c_int64), ("context_length", ctypes.c_int64), ("emb_dim", ctypes.c_int64),
                ("n_heads", ctypes.c_int64), ("n_layers", ctypes.c_int64), ("drop_rate", ctypes.c_double),
                ("qkv_bias", ctypes.c_bool)]


def check_gpt(lib_path, tmp):
    from reference.gpt_book import GPTModel
    cfg = {"vocab_size": 60, "context_length": 10, "emb_dim": 16, "n_heads": 4, "n_layers": 2,
           "drop_rate": 0.1, "qkv_bias": True}
    lib = ctypes.CDLL(lib_path)
    lib.tg_tape_new.restype = ctypes.c_void_p
    lib.tg_gpt_new.restype = ctypes.c_void_p
    lib.tg_gpt_new.argtypes = [ctypes.c_void_p, ctypes.POINTER(GptConfig)]
    lib.tg_module_save.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.tg_manual_seed.argtypes = [ctypes.c_uint64]
    lib.tg_tape_free.argtypes = [ctypes.c_void_p]
    tp = lib.tg_tape_new()
    lib.tg_manual_seed(123)
    c = GptConfig(*[cfg[f] for f, _ in GptConfig._fields_])
    m = lib.tg_gpt_new(tp, ctypes.byref(c))
    path = os.path.join(tmp, "gpt.safetensors")
    if not m or lib.tg_module_save(m, path.encode()) != 0:
        raise RuntimeError("libtapegrad could not build or save the GPT")
    lib.tg_tape_free(tp)
    torch.manual_seed(7)
    loaded = GPTModel(cfg).eval()
    loaded.load_state_dict(st_read(path), strict=True)
    torch.manual_seed(123)
    same_seed = GPTModel(cfg).eval()
    ids = torch.randint(0, cfg["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return (loaded(ids) - same_seed(ids)).abs().max().item()


def main():
    tg = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "build", "tools",
                                                            "tapegrad")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("sa-v1", "sa-v2", "causal", "mha-wrapper", "mha"):
            for bias in ((False,) if name == "sa-v1" else (False, True)):
                label = name + (" --qkv-bias" if bias else "")
                try:
                    ea, eb, e0 = check(tg, tmp, name, bias)
                    ok = max(ea, eb, e0) <= TOL
                    print("%s %-22s tapegrad->torch %.2e  torch->tapegrad %.2e  same-seed %.2e (max rel. error)" %
                          ("PASS" if ok else "FAIL", label, ea, eb, e0))
                except Exception as exc:  # report and go on with the next module
                    ok = False
                    print("FAIL %-22s %s" % (label, exc))
                failed += not ok
        lib = os.path.join(os.path.dirname(os.path.abspath(tg)), "..", "libtapegrad.so")
        try:
            err = check_gpt(lib, tmp)
            ok = err == 0.0
            print("%s %-22s tapegrad->torch, logits max |diff| %.2e (bit-identical weights expected)" %
                  ("PASS" if ok else "FAIL", "GPTModel", err))
        except Exception as exc:
            ok = False
            print("FAIL %-22s %s" % ("GPTModel", exc))
        failed += not ok
    print("%s: %d failed" % ("PASS" if not failed else "FAIL", failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
