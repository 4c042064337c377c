"""Reference bfloat16 data and a safetensors file for tests/test_bf16_dtype.c.

PyTorch 1.13's float32 -> bfloat16 conversion (round to nearest, ties to
even) on values chosen for their rounding: ties either way, values just off
a tie, signed zeros, infinities, NaN, the largest float32 (rounds to inf),
subnormals; the exact widening back. st_bf16.safetensors holds a BF16 and an
F32 tensor, encoded as the reference writer encodes (safetensors_files.py),
for the byte-exact save and the loads; st_f16.safetensors an F16 tensor, for
float16 loaded into bfloat16.

Writes tests/ref/st_bf16.safetensors, st_f16.safetensors and bf16.json.
"""
import json
import os
import struct

import torch

from safetensors_files import encode


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# float32 bit patterns
BITS = [
    0x3F800000,  # 1
    0x3F808000,  # 1 + 2^-8: a tie, rounds down to even (1)
    0x3F818000,  # a tie between 0x3F81 and 0x3F82: rounds up to even
    0x3F808001,  # just above a tie: up
    0x3F817FFF,  # just below a tie: down
    0xBF808000,  # a negative tie
    0x00000000, 0x80000000,  # +0, -0
    0x7F800000, 0xFF800000,  # +inf, -inf
    0x7F7FFFFF,  # the largest float32: rounds to inf
    0x7F7F7FFF,  # below the tie under inf: the largest bf16
    0x00000001, 0x00018000, 0x807FFFFF,  # subnormals
    0x3DCCCCCD,  # 0.1
    0x40490FDB,  # pi
    0xC2F6E979,  # -123.456
]


def main(outdir):
    x = torch.tensor([f32(b) for b in BITS], dtype=torch.float32)
    b = x.to(torch.bfloat16)
    bf_bits = [v & 0xFFFF for v in b.view(torch.int16).tolist()]
    widened = b.to(torch.float32)
    assert widened.view(torch.int32).tolist() == [(v << 16) - (1 << 32) if v & 0x8000 else v << 16 for v in bf_bits]

    g = torch.Generator().manual_seed(11)
    w = (torch.randn(4, 6, generator=g) * 3).to(torch.bfloat16)
    h = (torch.randn(2, 3, generator=g)).to(torch.float16)
    f = torch.randn(3, generator=g)
    blob = encode({"w": w, "f": f}, None, "reference")
    with open(os.path.join(outdir, "st_bf16.safetensors"), "wb") as fh:
        fh.write(blob)
    with open(os.path.join(outdir, "st_f16.safetensors"), "wb") as fh:
        fh.write(encode({"h": h}, None, "reference"))

    def bits16(t):
        return [v & 0xFFFF for v in t.contiguous().view(torch.int16).reshape(-1).tolist()]

    ref = {
        "torch_version": torch.__version__,
        "f32_bits": BITS,
        "bf16_bits": bf_bits,
        "file": {
            "hex": blob.hex(),
            "w": {"shape": list(w.shape), "bf16_bits": bits16(w)},
            "h": {"shape": list(h.shape), "f16_bits": bits16(h),
                  # F16 into bf16: widened to float32 exactly, then rounded
                  "bf16_bits": bits16(h.to(torch.float32).to(torch.bfloat16))},
            "f": {"shape": list(f.shape), "data": f.tolist()},
        },
    }
    with open(os.path.join(outdir, "bf16.json"), "w") as fh:
        json.dump(ref, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
