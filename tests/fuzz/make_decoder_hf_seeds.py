#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_decoder_hf.c into
tests/fuzz/corpus/fuzz_decoder_hf/: each seed is a folder packed as the
target reads it (two bytes little-endian: the length L of config.json, then
config.json, then model.safetensors), for the target's model (Qwen3: vocab
40, context 8, emb 8, 2 heads of head_dim 4, 1 kv group, 1 layer, hidden 8).
Pure Python (struct, json): python3 tests/fuzz/make_decoder_hf_seeds.py"""
import json
import os
import random
import struct

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


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_decoder_hf")
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
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
