#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_decoder_hf.c into
tests/fuzz/corpus/fuzz_decoder_hf/: each seed is a folder packed as the
target reads it (two bytes little-endian: the length L of config.json, then
config.json, then model.safetensors), for the target's model (Qwen3: vocab
40, context 8, emb 8, 2 heads of head_dim 4, 1 kv group, 1 layer, hidden 8).
With a built tapegrad named (--tapegrad PATH), the folders `tapegrad export
--hf` writes are seeds too (export_*: the target's Qwen3 model, GPT-2 and
Gemma 3 configurations of the same size, Llama 3's with rope_scaling): the
target reads what export writes and exports what it reads.
Pure Python (struct, json): python3 tests/fuzz/make_decoder_hf_seeds.py [--tapegrad PATH]"""
import argparse
import json
import os
import random
import struct
import subprocess
import tempfile

V, D, H, HD, G, F = 40, 8, 2, 4, 1, 8
CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": D,
          "num_attention_heads": H, "num_key_value_heads": G, "head_dim": HD, "intermediate_size": F,
          "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "rope_scaling": None,
          "tie_word_embeddings": True, "vocab_size": V, "max_position_embeddings": 8,
          "torch_dtype": "bfloat16", "hidden_act": "silu", "attention_bias": False}
SHAPES = {
    "model.embed_tokens.weight": [V, D],
    "model.layers.0.self_attn.q_proj.weight": [H * HD, D],
    "model.layers.0.self_attn.k_proj.weight": [G * HD, D],
    "model.layers.0.self_attn.v_proj.weight": [G * HD, D],
    "model.layers.0.self_attn.o_proj.weight": [D, H * HD],
    "model.layers.0.self_attn.q_norm.weight": [HD],
    "model.layers.0.self_attn.k_norm.weight": [HD],
    "model.layers.0.input_layernorm.weight": [D],
    "model.layers.0.post_attention_layernorm.weight": [D],
    "model.layers.0.mlp.gate_proj.weight": [F, D],
    "model.layers.0.mlp.up_proj.weight": [F, D],
    "model.layers.0.mlp.down_proj.weight": [D, F],
    "model.norm.weight": [D],
}


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def safetensors(dtype, shapes, rng):
    size = {"F32": 4, "BF16": 2, "F16": 2}[dtype]
    header, blobs, off = {}, [], 0
    for name, shape in shapes.items():
        n = numel(shape)
        vals = [rng.uniform(-0.5, 0.5) for _ in range(n)]
        if dtype == "F32":
            b = struct.pack("<%df" % n, *vals)
        elif dtype == "F16":
            b = struct.pack("<%de" % n, *vals)
        else:
            b = b"".join(struct.pack("<f", v)[2:] for v in vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n * size]}
        blobs.append(b)
        off += n * size
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def pack(config, weights):
    c = config if isinstance(config, bytes) else json.dumps(config).encode()
    return struct.pack("<H", len(c)) + c + weights


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# MODEL options of `tapegrad export` for the export_* seeds: the target's
# sizes, a tokenizer small enough (tools: a byte-level BPE of 259 ids)
EXPORTS = {
    "export_qwen3": "--config qwen3-0.6b --emb 8 --heads 2 --head-dim 4 --kv-groups 1 --layers 1 --hidden 8",
    "export_llama3": "--config llama3.2-1b --emb 8 --heads 2 --kv-groups 1 --layers 1 --hidden 8",
    "export_gemma3": "--config gemma3-270m --emb 8 --heads 2 --head-dim 4 --kv-groups 1 --layers 2 --hidden 8 "
                     "--sliding-window 4 --layer-types sliding,full",
    "export_gpt2": "--emb 8 --heads 2 --layers 1",
}


def byte_level_tokenizer(path):
    """A tokenizer.json of GPT-2's 256 byte tokens, 2 merges, one special token (259 ids)."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    vocab, k = {}, 0
    for b in range(256):
        vocab[chr(b) if b in printable else chr(256 + k)] = b
        k += b not in printable
    vocab.update({"ab": 256, "abc": 257})
    tok = {"version": "1.0", "added_tokens": [{"id": 258, "content": "<|endoftext|>", "single_word": False,
                                               "lstrip": False, "rstrip": False, "normalized": False,
                                               "special": True}],
           "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                                                 "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "vocab": vocab, "merges": ["a b", "ab c"]}}
    with open(path, "w") as f:
        json.dump(tok, f, ensure_ascii=False)


def exported(tapegrad):
    """The export_* seeds: each folder tapegrad export writes, packed."""
    seeds = {}
    with tempfile.TemporaryDirectory() as tmp:
        tok = os.path.join(tmp, "tokenizer.json")
        byte_level_tokenizer(tok)
        for name, model in EXPORTS.items():
            d = os.path.join(tmp, name)
            subprocess.run([tapegrad, "export"] + model.split() + ["--vocab", "259", "--context", "8", "--seed", "7",
                                                                    "--tokenizer", tok, "--hf", d], check=True)
            with open(os.path.join(d, "config.json"), "rb") as f:
                config = f.read()
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                seeds[name] = pack(config, f.read())
    return seeds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tapegrad", help="a built tapegrad: the folders its export writes are seeds too")
    args = ap.parse_args()
    out = os.path.join(HERE, "corpus", "fuzz_decoder_hf")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    seeds = {
        "f32_tied": pack(CONFIG, safetensors("F32", SHAPES, rng)),
        "bf16_tied": pack(CONFIG, safetensors("BF16", SHAPES, rng)),
        "f16_head": pack(dict(CONFIG, tie_word_embeddings=False),
                         safetensors("F16", dict(SHAPES, **{"lm_head.weight": [V, D]}), rng)),
        "missing_norm": pack(CONFIG, safetensors("F32", {k: v for k, v in SHAPES.items() if k != "model.norm.weight"}, rng)),
        "llama_config": pack(dict(CONFIG, model_type="llama", head_dim=HD,
                                  rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
                             b""),
        "bad_json": pack(b'{"model_type": "qwen3", "hidden_size": ', b""),
        # Gemma 3's config (its layer types, window, bases) with the target's
        # Qwen3 weights: read, then refused as another family's
        "gemma3_config": pack(dict({k: v for k, v in CONFIG.items() if k != "hidden_act"}, model_type="gemma3_text",
                                   sliding_window=4, layer_types=["sliding_attention"], rope_local_base_freq=10000.0,
                                   query_pre_attn_scalar=4, hidden_activation="gelu_pytorch_tanh",
                                   attn_logit_softcapping=None, final_logit_softcapping=None),
                              safetensors("BF16", SHAPES, rng)),
    }
    if args.tapegrad:
        seeds.update(exported(args.tapegrad))
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
