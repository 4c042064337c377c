"""Reference .safetensors files for tests/test_safetensors.c.

The `safetensors` Python package is not available here, so the files are
encoded by hand following the reference serializer (huggingface/safetensors,
safetensors/src/tensor.rs `prepare`): tensors sorted by descending dtype
(its Dtype enum order) then by name, data back to back from offset 0, header
as compact JSON with "__metadata__" first and each entry's keys in the order
dtype, shape, data_offsets, padded with spaces to a multiple of 8 bytes.

Writes tests/ref/st_*.safetensors and tests/ref/safetensors.json, which lists
each file's tensors (shape, dtype, data) for the test to compare against and
holds each file's bytes in hex, so the test needs only tu_load_ref().
"""
import json
import os
import struct

import torch

# Position in the reference Dtype enum (BOOL, U8, I8, F8_E5M2, F8_E4M3, I16,
# U16, F16, BF16, I32, U32, F32, F64, I64, U64): the writer's sort key.
DTYPES = {
    torch.bool: ("BOOL", 0),
    torch.uint8: ("U8", 1),
    torch.float16: ("F16", 7),
    torch.bfloat16: ("BF16", 8),
    torch.float32: ("F32", 11),
    torch.float64: ("F64", 12),
    torch.int64: ("I64", 13),
}


def encode(tensors, metadata=None, order="reference"):
    """safetensors bytes for a {name: tensor} dict.

    order="reference" sorts as the reference writer does; order="name" lays
    the data out by name only, as some older writers did, to check that
    readers accept any order whose offsets are consistent.
    """
    items = list(tensors.items())
    if order == "reference":
        items.sort(key=lambda kv: (-DTYPES[kv[1].dtype][1], kv[0]))
    else:
        items.sort(key=lambda kv: kv[0])
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs = []
    offset = 0
    for name, t in items:
        t = t.detach().contiguous()
        raw = t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t  # numpy has no bfloat16
        data = raw.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(blobs)


def _describe(tensors):
    out = {}
    for name, t in tensors.items():
        flat = t.detach().reshape(-1).tolist()
        out[name] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                     "data": [float(v) if isinstance(v, float) else v for v in flat]}
    return out


def _files():
    g = torch.Generator().manual_seed(7)
    mixed = {
        "weight": torch.rand(2, 3, generator=g),
        "bias": torch.tensor([0.5, -1.25, 3.0], dtype=torch.float64),
        "index": torch.tensor([[1, -2], [3, 2**40]], dtype=torch.int64),
        "mask": torch.tensor([True, False, False, True]),
        "bytes": torch.tensor([0, 7, 255], dtype=torch.uint8),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 2),
        "a.b.c": torch.tensor([[[1.0], [2.0]]], dtype=torch.float64),
    }
    torch.manual_seed(123)
    lin = torch.nn.Linear(3, 2)
    linear = {k: v.detach() for k, v in lin.state_dict().items()}
    return [
        # What tg_safetensors_save must reproduce byte for byte.
        ("st_mixed.safetensors", mixed, None, "reference"),
        # As transformers' save_pretrained writes: metadata {"format": "pt"}.
        ("st_linear.safetensors", linear, {"format": "pt"}, "reference"),
        # Data in name order, not the reference writer's order.
        ("st_name_order.safetensors", mixed, {"note": "name order"}, "name"),
    ]


def generate(outdir):
    os.makedirs(outdir, exist_ok=True)
    listing = {"torch_version": torch.__version__, "files": []}
    for fname, tensors, metadata, order in _files():
        blob = encode(tensors, metadata, order)
        with open(os.path.join(outdir, fname), "wb") as f:
            f.write(blob)
        listing["files"].append({"file": fname, "metadata": metadata, "order": order,
                                 "tensors": _describe(tensors), "hex": blob.hex()})
    with open(os.path.join(outdir, "safetensors.json"), "w") as f:
        json.dump(listing, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    generate(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref"))
