"""The Hugging Face folders `tapegrad export --hf` writes, read by the book's
own loaders under PyTorch 1.13 (tests/ref/export.json, for
tests/test_export_ref.c).

For each family, a tiny model, written by tapegrad twice:

    tapegrad export MODEL-OPTIONS --hf DIR --dtype f32 --tokenizer TOK
    tapegrad export MODEL-OPTIONS --load STATE --hf DIR --dtype f32 --tokenizer TOK

(MODEL-OPTIONS: the case's preset and sizes, --seed; TOK: the small
tokenizer.json below, whose 41 ids fit the tiny vocabularies). The first
folder is the model as tapegrad builds it, and must read back as the book's
model built after torch.manual_seed(seed) from the book's configuration
(the preset's dict with the case's sizes), weight for weight. STATE is that
book model with every parameter whose elements are all equal as built (the
norms' ones and zeros, LayerNorm's shifts) drawn again after
torch.manual_seed(seed + 1) as uniform_(v - 0.5, v + 0.5) around its value
v, so that a norm written under another norm's name shows in the logits;
its state_dict, in a safetensors file. Each folder is read as the book's
code would read it:

  - the book's configuration dict is built from config.json alone, and
    checked against the configuration the model was built with, and
    config.json's other fields against what the book's code hard-wires
    (norm epsilons, activations, no biases or soft-capping, tied or not);
  - the book's model is built from that dict (after manual_seed(seed): the
    loader replaces every weight) and loaded from the folder's safetensors
    (model.safetensors, or the shards of model.safetensors.index.json, as
    the Gemma 3 notebook reads them) by the book's loader:
      GPT-2   the chapter-5 notebook weight-loading-hf-safetensors.ipynb's
              assign() and load_weights_into_gpt(gpt, params) (OpenAI's
              GPT-2 names; the "transformer." that save_pretrained of
              GPT2LMHeadModel puts before them is taken off first), on
              llms_from_scratch.ch04's GPTModel with the notebook's
              BASE_CONFIG keys (drop_rate 0.0, qkv_bias True: GPT-2's c_attn
              always has a bias, zero for a model built without one). That
              loader ties out_head to wte; an untied folder's lm_head.weight
              is then assigned to out_head, as load_weights_into_qwen does;
      Qwen3   llms_from_scratch.qwen3's Qwen3Model and load_weights_into_qwen;
      Llama 3 llms_from_scratch.llama3's Llama3Model and load_weights_into_llama
              (under decoder.py's nn.RMSNorm stand-in: PyTorch 1.13 has none);
      Gemma 3 the notebook standalone-gemma3.ipynb's Gemma3Model and
              load_weights_into_gemma (read as tools/reference/gemma3.py
              reads it);
  - every tensor of the folder must be read by the loader (none left over),
    every weight of the loaded model must equal the model written bit for
    bit (GPT-2's zero qkv biases aside), and for GPT-2 the inverse mapping
    (gpt_book.hf_state_dict) of the loaded model must give the folder's
    tensors back;
  - the second folder's loaded model's eval logits for the case's ids are
    recorded (and those of the model written checked equal).

Safetensors files are read and written here without the safetensors
package (absent from this interpreter): the header, then F32 / F16 / BF16
data (read_safetensors), written as safetensors_files.encode writes them.

Environment, as for tools/reference/decoder.py and gemma3.py:

    LLMS_FROM_SCRATCH_DIR     the book's package folder (llms_from_scratch/)
    LLMS_FROM_SCRATCH_ROOT    the book's repository root (holding
                              ch05/02_alternative_weight_loading/ and
                              ch05/12_gemma3/); default the parent of the above
    LLMS_FROM_SCRATCH_COMMIT  the book's commit (else git's, else null)
    TAPEGRAD                  the tapegrad executable (default
                              build/tools/tapegrad; --tapegrad when run alone)

for example

    git -C <clone or mirror> archive HEAD pkg ch05/02_alternative_weight_loading \\
        ch05/12_gemma3 | tar -x -C /tmp/llms
    LLMS_FROM_SCRATCH_DIR=/tmp/llms/pkg \\
    LLMS_FROM_SCRATCH_COMMIT=$(git -C <clone or mirror> rev-parse HEAD) \\
        /usr/bin/python3 tools/reference/export.py --tapegrad build/tools/tapegrad
    # or, among the other references (TAPEGRAD=... in the environment):
    /usr/bin/python3 tools/make_reference.py export

Without the book or a tapegrad that has `export`, it says why and writes
nothing.

tests/ref/export.json:
  "torch_version", "book_commit", "tolerance" (1e-5: the test's bound on
    |tapegrad's logits - these|),
  "loaders": {"gpt2" | "gemma3": {"path" (in the book's repository),
    "sha256" (of the notebook), "cells" (code cells executed)},
    "qwen3" | "llama3": the package module and function},
  "tokenizer": the tokenizer.json object given to tapegrad export (a BPE
    model of 40 byte-level tokens and 13 merges, <|endoftext|> id 40),
  "cases": [{
    "name", "family" ("gpt2", "qwen3", "llama3", "gemma3"),
    "preset" (tapegrad's --config), "overrides" (tg_decoder_config's fields
      set after the preset, as the MODEL options set them: vocab_size,
      context_length, emb_dim, n_heads, n_layers, hidden_dim, head_dim,
      n_kv_groups, qkv_bias, sliding_window, layer_types ("sliding" /
      "full" per layer), query_pre_attn_scalar), "seed",
    "tapegrad_args" (the MODEL options; --load, --hf, --dtype f32 and
      --tokenizer follow them),
    "vary_seed" (seed + 1), "varied": {state_dict name: the value drawn
      again, in full}, in named_parameters() order,
    "files" (the folder's file names), "hf_config" (config.json),
    "book_config" (the dict built from it; "dtype" float32 left out),
    "ids" (2, 7) int64, "logits" (2, 7, vocab) float32: the loaded book
      model's, eval mode}]
"""
import argparse
import contextlib
import copy
import importlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
if os.path.dirname(HERE) not in sys.path:  # run as a script: the reference package beside it
    sys.path.insert(0, os.path.dirname(HERE))
# The references hold the bits of OpenBLAS's Haswell kernels (tools/make_reference.py).
os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")

import torch  # noqa: E402

from reference import decoder as dec  # noqa: E402
from reference import gemma3 as gem  # noqa: E402
from reference.common import tensor_json, write_json  # noqa: E402
from reference.gpt_book import hf_state_dict as gpt2_hf_state_dict  # noqa: E402
from reference.safetensors_files import encode as encode_safetensors  # noqa: E402

OUT_NAME = "export.json"
TOLERANCE = 1e-5
GPT2_NOTEBOOK = "ch05/02_alternative_weight_loading/weight-loading-hf-safetensors.ipynb"
GPT2_NAMES = ["assign", "load_weights_into_gpt"]

# tapegrad's MODEL option of each overridden field
OPTION = {"vocab_size": "--vocab", "context_length": "--context", "emb_dim": "--emb", "n_heads": "--heads",
          "n_layers": "--layers", "hidden_dim": "--hidden", "head_dim": "--head-dim", "n_kv_groups": "--kv-groups",
          "qkv_bias": "--qkv-bias", "sliding_window": "--sliding-window", "layer_types": "--layer-types",
          "query_pre_attn_scalar": "--query-pre-attn-scalar"}

BASE = dict(vocab_size=64, context_length=16, n_layers=2)
CASES = [
    # GPT-2 without a qkv bias: the folder's c_attn.bias is zero
    ("gpt2", "gpt2", "gpt2-small", dict(BASE, emb_dim=32, n_heads=4), 123),
    ("gpt2_qkv_bias", "gpt2", "gpt2-small", dict(BASE, emb_dim=32, n_heads=4, qkv_bias=True), 7),
    # head_dim 16 != emb / heads = 8; two heads a group
    ("qwen3", "qwen3", "qwen3-0.6b", dict(BASE, emb_dim=32, n_heads=4, hidden_dim=48, head_dim=16, n_kv_groups=2),
     123),
    # Llama 3.2's RoPE smoothing (the preset's), head_dim 64 / 4 = 16
    ("llama3", "llama3", "llama3.2-1b", dict(BASE, emb_dim=64, n_heads=4, hidden_dim=96, n_kv_groups=2), 123),
    # sliding, full, sliding over 7 positions with a window of 4; the query
    # scale 12 is neither head_dim nor emb / heads
    ("gemma3", "gemma3", "gemma3-270m",
     dict(BASE, n_layers=3, emb_dim=32, n_heads=4, hidden_dim=48, head_dim=16, n_kv_groups=2, sliding_window=4,
          layer_types=["sliding", "full", "sliding"], query_pre_attn_scalar=12), 123),
]
IDS = [[3, 14, 15, 9, 26, 53, 58], [62, 0, 41, 7, 33, 1, 63]]


# ------------------------------------------------------------ the tokenizer

def tokenizer_json():
    """A small byte-level BPE tokenizer.json (ids 0..39 and <|endoftext|> 40):
    the folder needs one, and the families' own hold more ids than the tiny
    models' vocabularies."""
    letters = list("abcdefghijklmnopqrstuvwxyz") + ["\u0120"]  # Ġ: the byte-level space
    merges = ["t h", "th e", "\u0120 t", "\u0120t he", "a n", "i n", "e r", "o n", "r e", "a t", "e n", "o r",
              "\u0120 a"]
    vocab = {}
    for tok in letters + [m.replace(" ", "") for m in merges]:
        vocab.setdefault(tok, len(vocab))
    assert len(vocab) == 40, len(vocab)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 40, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges},
    }


# ------------------------------------------------------------- safetensors

ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    """{name: tensor} of a safetensors file (F32, F16, BF16), as
    safetensors.torch.load_file gives it."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] not in ST_DTYPES:
            raise RuntimeError("%s: %s is %s" % (path, name, e["dtype"]))
        a, b = e["data_offsets"]
        buf = bytearray(raw[base + a:base + b])
        dt = ST_DTYPES[e["dtype"]]
        if dt == torch.float32:
            t = torch.frombuffer(buf, dtype=torch.float32) if buf else torch.empty(0)
        else:
            t = torch.frombuffer(buf, dtype=torch.int16).view(dt) if buf else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"]).clone()
    return out


def read_folder_weights(d):
    """The folder's tensors: model.safetensors, else the shards its index
    names (as the Gemma 3 notebook reads a sharded folder)."""
    single = os.path.join(d, "model.safetensors")
    if os.path.isfile(single):
        return read_safetensors(single)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    weights = {}
    for filename in sorted(set(index["weight_map"].values())):
        weights.update(read_safetensors(os.path.join(d, filename)))
    return weights


class Reads(dict):
    """A dict that remembers which keys were read."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


# ------------------------------------------------------ the book's loaders

def load_gpt2_notebook(root):
    """The cells of the chapter-5 safetensors notebook that define assign and
    load_weights_into_gpt, executed in a namespace holding torch (the
    notebook imports it in a later cell)."""
    ns = {"__name__": "gpt2_hf_notebook", "torch": torch}
    cells, sha256 = gem.notebook_definitions(root, GPT2_NOTEBOOK, GPT2_NAMES, ns)
    return {"load": ns["load_weights_into_gpt"], "assign": ns["assign"], "path": GPT2_NOTEBOOK,
            "sha256": sha256, "cells": cells}


class Book:
    pass


@contextlib.contextmanager
def book(book_dir, root):
    with dec.book_code(book_dir) as b:
        k = Book()
        k.b = b
        k.ch04 = importlib.import_module("llms_from_scratch.ch04")
        k.gemma = gem.load_notebook(root, "plain")
        k.gpt2 = load_gpt2_notebook(root)
        yield k


# ----------------------------------------------------------- configurations

def source_config(k, family, overrides):
    """The book's configuration dict of the model tapegrad builds: the
    preset's dict (GPT-2: GPT_CONFIG_124M) with the case's fields."""
    ov = dict(overrides)
    if family == "gpt2":
        c = {"vocab_size": 50257, "context_length": 1024, "emb_dim": 768, "n_heads": 12, "n_layers": 12,
             "drop_rate": 0.1, "qkv_bias": False}
        c.update(ov)
        return c
    if family == "qwen3":
        return dec.qwen3_config(k.b, **ov)
    if family == "llama3":
        return dec.llama3_config(k.b, **ov)
    ov["layer_types"] = [{"sliding": gem.SLIDING, "full": gem.FULL}[t] for t in ov["layer_types"]]
    return gem.gemma3_config(k.gemma, **ov)


def tapegrad_args(preset, overrides, seed):
    args = ["--config", preset]
    for key, v in overrides.items():
        if v is True:
            args.append(OPTION[key])
        elif key == "layer_types":
            args += [OPTION[key], ",".join(v)]
        else:
            args += [OPTION[key], str(v)]
    return args + ["--seed", str(seed)]


def require(hc, want, where):
    """config.json's fields that the book's code hard-wires."""
    for key, v in want.items():
        if key not in hc:
            raise RuntimeError("%s: config.json has no %s (the book's code needs %r)" % (where, key, v))
        got = hc[key]
        same = got == v if not isinstance(v, float) else isinstance(got, (int, float)) and float(got) == v
        if not same:
            raise RuntimeError("%s: config.json's %s is %r, the book's code needs %r" % (where, key, got, v))


def book_config(k, family, hc, has_head, where):
    """The book's configuration dict from config.json, as the book's code
    would build it, after checking the fields it hard-wires."""
    require(hc, {"tie_word_embeddings": not has_head, "torch_dtype": "float32"}, where)
    if family == "gpt2":
        # the notebook's BASE_CONFIG with the file's sizes (n_inner null: the
        # book's feed-forward is 4 * emb_dim; its LayerNorm's eps is 1e-5)
        require(hc, {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_inner": None,
                     "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}, where)
        return {"vocab_size": hc["vocab_size"], "context_length": hc["n_positions"], "emb_dim": hc["n_embd"],
                "n_heads": hc["n_head"], "n_layers": hc["n_layer"], "drop_rate": 0.0, "qkv_bias": True}
    if family == "qwen3":
        # Qwen3's RMSNorm eps 1e-6, SwiGLU, QK-norm always, no biases
        require(hc, {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "rms_norm_eps": 1e-6,
                     "hidden_act": "silu", "attention_bias": False, "rope_scaling": None,
                     "use_sliding_window": False}, where)
        c = {"vocab_size": hc["vocab_size"], "context_length": hc["max_position_embeddings"],
             "emb_dim": hc["hidden_size"], "n_heads": hc["num_attention_heads"],
             "n_layers": hc["num_hidden_layers"], "hidden_dim": hc["intermediate_size"], "head_dim": hc["head_dim"],
             "qk_norm": True, "n_kv_groups": hc["num_key_value_heads"], "rope_base": hc["rope_theta"],
             "dtype": torch.float32}
        return {key: c[key] for key in k.b.qwen3.QWEN_CONFIG_06_B}
    if family == "llama3":
        # nn.RMSNorm(eps=1e-5), head_dim emb / heads, SwiGLU without biases
        rs = hc.get("rope_scaling")
        require(hc, {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "rms_norm_eps": 1e-5,
                     "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}, where)
        if "head_dim" in hc and hc["head_dim"] != hc["hidden_size"] // hc["num_attention_heads"]:
            raise RuntimeError("%s: head_dim %r is not hidden_size / heads" % (where, hc["head_dim"]))
        if not isinstance(rs, dict) or rs.get("rope_type") != "llama3":
            raise RuntimeError("%s: rope_scaling %r is not Llama 3's" % (where, rs))
        c = {"vocab_size": hc["vocab_size"], "context_length": hc["max_position_embeddings"],
             "emb_dim": hc["hidden_size"], "n_heads": hc["num_attention_heads"],
             "n_layers": hc["num_hidden_layers"], "hidden_dim": hc["intermediate_size"],
             "n_kv_groups": hc["num_key_value_heads"], "rope_base": hc["rope_theta"], "dtype": torch.float32,
             "rope_freq": {"factor": rs["factor"], "low_freq_factor": rs["low_freq_factor"],
                           "high_freq_factor": rs["high_freq_factor"],
                           "original_context_length": rs["original_max_position_embeddings"]}}
        return {key: c[key] for key in k.b.llama3.LLAMA32_CONFIG_1B}
    # Gemma 3: RMSNorm eps 1e-6 of x * (1 + w), tanh GeGLU, no soft-capping
    require(hc, {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "rms_norm_eps": 1e-6,
                 "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False, "rope_scaling": None,
                 "attn_logit_softcapping": None, "final_logit_softcapping": None}, where)
    c = {"vocab_size": hc["vocab_size"], "context_length": hc["max_position_embeddings"],
         "emb_dim": hc["hidden_size"], "n_heads": hc["num_attention_heads"], "n_layers": hc["num_hidden_layers"],
         "hidden_dim": hc["intermediate_size"], "head_dim": hc["head_dim"], "qk_norm": True,
         "n_kv_groups": hc["num_key_value_heads"], "rope_local_base": hc["rope_local_base_freq"],
         "rope_base": hc["rope_theta"], "sliding_window": hc["sliding_window"],
         "layer_types": list(hc["layer_types"]), "dtype": torch.float32,
         "query_pre_attn_scalar": hc["query_pre_attn_scalar"]}
    return {key: c[key] for key in k.gemma.GEMMA3_CONFIG_270M}


def same_config(got, want):
    """Equal dicts, numbers compared by value (1e6 and 1000000.0 alike)."""
    if isinstance(got, dict) and isinstance(want, dict):
        return list(got) == list(want) and all(same_config(got[x], want[x]) for x in got)
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(same_config(a, b) for a, b in zip(got, want))
    if isinstance(got, bool) or isinstance(want, bool):
        return got is want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return float(got) == float(want)
    return got == want


def build(k, family, cfg, seed):
    torch.manual_seed(seed)
    cls = {"gpt2": k.ch04.GPTModel, "qwen3": k.b.qwen3.Qwen3Model, "llama3": k.b.llama3.Llama3Model,
           "gemma3": k.gemma.Gemma3Model}[family]
    return cls(copy.deepcopy(cfg))


def vary(model, seed):
    """After manual_seed(seed), every parameter whose elements are all equal
    drawn again uniform_(v - 0.5, v + 0.5) in named_parameters() order;
    {name: its new value}."""
    torch.manual_seed(seed)
    out = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.reshape(-1)
            if flat.numel() and bool((flat == flat[0]).all()):
                v = float(flat[0])
                p.uniform_(v - 0.5, v + 0.5)
                out[name] = p.detach().clone()
    return out


def load(k, family, model, cfg, weights):
    """The book's loader on the folder's tensors; the names it did not read."""
    if family == "gpt2":
        params = Reads({n[len("transformer."):] if n.startswith("transformer.") else n: t
                        for n, t in weights.items()})
        k.gpt2["load"](model, params)
        if "lm_head.weight" in params:  # untied: the head's own weights, as load_weights_into_qwen reads them
            model.out_head.weight = k.gpt2["assign"](model.out_head.weight, params["lm_head.weight"])
    else:
        params = Reads(weights)
        fn = {"qwen3": k.b.qwen3.load_weights_into_qwen, "llama3": k.b.llama3.load_weights_into_llama,
              "gemma3": k.gemma.load_weights_into_gemma}[family]
        with contextlib.redirect_stdout(open(os.devnull, "w")):  # "Model uses weight tying."
            fn(model, cfg, params)
    return sorted(set(params) - params.read), params


# --------------------------------------------------------------------- run

def run_tapegrad(tapegrad, args, where):
    p = subprocess.run([tapegrad, "export"] + args, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s: tapegrad export %s: exit %d\n%s%s" % (where, " ".join(args), p.returncode, p.stdout,
                                                                     p.stderr))


def read_back(k, family, out, src_cfg, seed, name):
    """The folder out as the book's code reads it: (model, book config,
    config.json, the file names, the tensors the loader was given)."""
    files = sorted(os.listdir(out))
    with open(os.path.join(out, "config.json")) as f:
        hc = json.load(f)
    weights = read_folder_weights(out)
    for n, t in weights.items():
        if t.dtype != torch.float32:
            raise RuntimeError("%s: %s is %s under --dtype f32" % (name, n, t.dtype))
    cfg = book_config(k, family, hc, "lm_head.weight" in weights, name)
    want = copy.deepcopy(src_cfg)
    if family == "gpt2":  # the notebook's BASE_CONFIG: no dropout, qkv biases
        want.update(drop_rate=0.0, qkv_bias=True)
        require(hc, {"attn_pdrop": src_cfg["drop_rate"], "embd_pdrop": src_cfg["drop_rate"],
                     "resid_pdrop": src_cfg["drop_rate"]}, name)
    if not same_config(dec.config_json(cfg), dec.config_json(want)):
        raise RuntimeError("%s: config.json gives the book's config\n  %s\nthe model was built with\n  %s"
                           % (name, dec.config_json(cfg), dec.config_json(want)))
    model = build(k, family, cfg, seed)
    unread, params = load(k, family, model, cfg, weights)
    if unread:
        raise RuntimeError("%s: the book's loader read none of %s" % (name, unread))
    if family == "gpt2":  # the inverse of the chapter-5 mapping gives the folder's tensors back
        back = gpt2_hf_state_dict(model)
        for n, t in params.items():
            if n != "lm_head.weight" and (n not in back or not torch.equal(back[n], t)):
                raise RuntimeError("%s: gpt_book.hf_state_dict's %s is not the folder's" % (name, n))
    return model, cfg, hc, files


def check_same(family, model, ref, name, what):
    """Every tensor of model's state_dict is ref's (GPT-2's qkv biases zero
    where ref has none)."""
    for n, t in model.state_dict().items():
        if n in ref:
            if not torch.equal(t, ref[n]):
                raise RuntimeError("%s: %s loaded from the folder differs from %s" % (name, n, what))
        elif not (family == "gpt2" and n.endswith(("W_query.bias", "W_key.bias", "W_value.bias"))
                  and not bool(t.any())):
            raise RuntimeError("%s: %s is not in %s" % (name, n, what))


def run_case(k, tapegrad, tmp, tok_path, name, family, preset, overrides, seed):
    src_cfg = source_config(k, family, overrides)
    margs = tapegrad_args(preset, overrides, seed)
    tail = ["--dtype", "f32", "--tokenizer", tok_path]
    src = build(k, family, src_cfg, seed)

    # the model as tapegrad builds it, written as it is: the book's model
    # after manual_seed(seed), weight for weight
    out = os.path.join(tmp, name + "_as_built")
    run_tapegrad(tapegrad, margs + ["--hf", out] + tail, name)
    model, _, _, _ = read_back(k, family, out, src_cfg, seed, name)
    check_same(family, model, src.state_dict(), name, "the book's model after manual_seed(%d)" % seed)

    # the norms drawn again, given to tapegrad as a state_dict
    varied = vary(src, seed + 1)
    state_path = os.path.join(tmp, name + ".safetensors")
    with open(state_path, "wb") as f:
        f.write(encode_safetensors({n: t.detach() for n, t in src.state_dict().items()}, {"format": "pt"}))
    out = os.path.join(tmp, name)
    run_tapegrad(tapegrad, margs + ["--load", state_path, "--hf", out] + tail, name)
    model, cfg, hc, files = read_back(k, family, out, src_cfg, seed, name)
    check_same(family, model, src.state_dict(), name, "the model written")

    ids = torch.tensor(IDS)
    model.eval()
    src.eval()
    with torch.no_grad():
        logits = model(ids)
        want_logits = src(ids)
    diff = float((logits - want_logits).abs().max())
    if diff != 0:
        raise RuntimeError("%s: the loaded model's logits are %.3g from the source model's" % (name, diff))
    print("  %-14s %-7s %s  params %d  |logits| <= %.3g" % (name, family, " ".join(margs),
                                                         sum(p.numel() for p in model.parameters()),
                                                         float(logits.abs().max())))
    return {
        "name": name, "family": family, "preset": preset, "overrides": copy.deepcopy(overrides), "seed": seed,
        "tapegrad_args": margs, "vary_seed": seed + 1, "varied": {n: tensor_json(v) for n, v in varied.items()},
        "files": files, "hf_config": hc, "book_config": dec.config_json(cfg),
        "ids": tensor_json(ids), "logits": tensor_json(logits),
    }


def tapegrad_has_export(tapegrad):
    if not (os.path.isfile(tapegrad) and os.access(tapegrad, os.X_OK)):
        return "no tapegrad executable at %s" % tapegrad
    p = subprocess.run([tapegrad, "export", "--help"], capture_output=True, text=True)
    if p.returncode != 0:
        return "%s has no export command (%s)" % (tapegrad, (p.stderr or p.stdout).strip().splitlines()[0])
    return None


def generate(outdir, tapegrad=None):
    tapegrad = os.path.abspath(tapegrad or os.environ.get("TAPEGRAD") or os.path.join(REPO, "build", "tools",
                                                                                        "tapegrad"))
    book_dir, why = dec.book_location()
    root = None
    if book_dir is not None:
        root, why = gem.notebook_root()
        if root is not None and not os.path.isfile(os.path.join(root, GPT2_NOTEBOOK)):
            root, why = None, "no %s under %s (set LLMS_FROM_SCRATCH_ROOT)" % (GPT2_NOTEBOOK, root)
    if root is None:
        print("%s: %s not regenerated (see tools/reference/export.py)" % (why, OUT_NAME))
        return
    why = tapegrad_has_export(tapegrad)
    if why:
        print("%s: %s not regenerated (see tools/reference/export.py)" % (why, OUT_NAME))
        return
    gem.check_torch()
    t0 = time.time()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tools/make_reference.py: deterministic reductions
    tmp = tempfile.mkdtemp(prefix="tg_export_ref_")
    try:
        tok = tokenizer_json()
        tok_path = os.path.join(tmp, "tokenizer.json")
        with open(tok_path, "w") as f:
            json.dump(tok, f, ensure_ascii=False)
        with book(book_dir, root) as k:
            commit = dec.book_commit(book_dir)
            print("book code: %s (commit %s); tapegrad: %s" % (book_dir, commit, tapegrad))
            obj = {"torch_version": torch.__version__, "book_commit": commit, "tolerance": TOLERANCE,
                   "loaders": {
                       "gpt2": {"path": k.gpt2["path"], "sha256": k.gpt2["sha256"], "cells": k.gpt2["cells"],
                                "function": "load_weights_into_gpt"},
                       "qwen3": {"module": "llms_from_scratch.qwen3", "function": "load_weights_into_qwen"},
                       "llama3": {"module": "llms_from_scratch.llama3", "function": "load_weights_into_llama"},
                       "gemma3": {"path": k.gemma.path, "sha256": k.gemma.sha256, "cells": k.gemma.cells,
                                  "function": "load_weights_into_gemma"}},
                   "tokenizer": tok}
            obj["cases"] = [run_case(k, tapegrad, tmp, tok_path, *c) for c in CASES]
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(tmp, ignore_errors=True)
    write_json(outdir, OUT_NAME, obj)
    print("export references: %.1f s" % (time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "ref"), help="output directory (tests/ref)")
    ap.add_argument("--tapegrad", default=None,
                    help="the tapegrad executable (default $TAPEGRAD, else build/tools/tapegrad)")
    a = ap.parse_args()
    generate(os.path.normpath(a.out), a.tapegrad)


if __name__ == "__main__":
    main()
