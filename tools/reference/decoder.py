"""References for the book's bonus decoders, Qwen3 and Llama 3.2, run from the
book's own code (rasbt/LLMs-from-scratch, package llms_from_scratch) under
PyTorch 1.13 in float32.

The book's code is not copied here: it is imported from the folder named by
the environment variable LLMS_FROM_SCRATCH_DIR (the folder that contains
llms_from_scratch/), for example

    git -C <clone or mirror> archive HEAD pkg | tar -x -C /tmp/llms
    LLMS_FROM_SCRATCH_DIR=/tmp/llms/pkg \\
    LLMS_FROM_SCRATCH_COMMIT=$(git -C <clone or mirror> rev-parse HEAD) \\
        /usr/bin/python3 tools/make_reference.py decoder

Without it the generator prints why and writes nothing. The commit goes into
the JSON as "book_commit" (from LLMS_FROM_SCRATCH_COMMIT, else from git if the
folder is in a work tree, else null). What the book's modules import and this
interpreter lacks (tiktoken, matplotlib, tqdm, ...) is replaced by dummy
modules while they are imported, and since PyTorch 1.13 has no nn.RMSNorm
(Llama 3 uses PyTorch 2's), a stand-in is installed meanwhile (RMSNorm below:
x * rsqrt(mean(x^2, -1) + eps) * weight, PyTorch 2's op order and repr).

Digest of a float32 tensor (for tensors too big for JSON):
    {"shape": [...], "fnv1a64": "%016x", "sum": float, "head": [float x <= 8]}
  "fnv1a64" is FNV-1a 64 over 32-bit WORDS, not bytes (hash name
  "fnv1a64-u32"): take the tensor contiguous, row-major, each float32's bit
  pattern as an unsigned 32-bit integer w (its little-endian value), and
      h = 0xcbf29ce484222325
      for each w:  h = ((h XOR w) * 0x100000001b3) mod 2**64
  (one XOR and one multiply per float, not per byte: four times fewer steps
  in Python: the ~85 M floats digested here take most of the generator's
  ~17 s; FNV-1a over the bytes would take four times as long).
  "sum" is float(t.double().sum()) (informative, compare with a tolerance),
  "head" the first 8 values of the flattened tensor, exact.

tests/ref/decoder.json:
  "torch_version", "book_commit", "hash": "fnv1a64-u32", "full_max": 4096
  "hash_check": {"tensor": a few float32 values in full, "digest": theirs}
  "rope": compute_rope_params of qwen3.py (no freq_config) and of llama3.py
    (Llama 3.2's freq_config) for the real presets (cos, sin as digests) and
    for head_dim 64, context 16 (full tensors): {"family", "head_dim",
    "theta_base", "context_length", "freq_config" (or null), "cos", "sin"}.
  "cases": the book's Qwen3Model / Llama3Model built after
    torch.manual_seed(seed) from a full book config (dtype float32; the JSON
    config leaves "dtype" out), train mode, ids and targets (2, 5) from
    gpt.py's ids_for(config, data_seed, 2, 5), loss = cross_entropy of the
    flattened logits: "logits" (full for the tiny cases, a digest for the
    real-vocabulary ones), "loss", "grads" by named_parameters() name (a
    full tensor when it has at most full_max elements, else a digest: the
    full tensors of every case would be ~6 MB), "logits_grad_fn",
    "loss_grad_fn", "parameter_names", "state_dict_keys", "num_parameters",
    "repr" (str(model)).
  "generate": on the same models in eval mode, prompt of 4 ids: ch05's
    generate() (cache false) and, for cache true, the kv_cache variant's
    model (the same initialisation: its state_dict is checked equal) with
    kv_cache/generate.py's generate_text_simple(use_cache=True) when greedy,
    or ch05's sampling steps on the cached model's last logits when sampled.
    Each after torch.manual_seed(sample_seed). temperature 0.0 means greedy,
    top_k 0 means no top-k. "ids" is the whole row, prompt + new ids.
  "hf": tests/ref/hf_qwen3_tiny/, a Qwen3 model in Hugging Face's layout
    (config.json, two BF16 safetensors shards and their index, a copy of
    data/qwen3/tokenizer.json), tied embeddings, no lm_head.weight; the
    book's model loaded from it (bf16 weights widened to float32, through
    the book's load_weights_into_qwen): eval logits of the prompt (digest),
    greedy ids without and with the KV cache, sampled ids.
"""
import contextlib
import copy
import hashlib
import importlib.util
import json
import os
import struct
import subprocess
import sys
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import grad_fn_name, scalar_json, tensor_json, write_json
from .gpt import ids_for

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT_NAME = "decoder.json"
HF_DIR = "hf_qwen3_tiny"

HASH_NAME = "fnv1a64-u32"
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
MASK64 = (1 << 64) - 1
FULL_MAX = 4096  # grads with at most this many elements are written in full

# "Every effort moves you": Qwen3's ids (tokenizer.json of data/qwen3, as
# tools/reference/hf_tokenizer_ids.mjs gives them, with or without specials)
# and Llama 3's.
EVERY_EFFORT_QWEN3 = [11510, 5041, 10797, 498]
EVERY_EFFORT_LLAMA3 = [11769, 5149, 11031, 499]


# ----------------------------------------------------------------- digests

def fnv1a64_u32(t):
    """FNV-1a 64 over the float32 bit patterns (one 32-bit word per float)."""
    words = t.detach().contiguous().reshape(-1).numpy().astype("<f4").view("<u4")
    h = FNV_OFFSET
    chunk = 1 << 20
    for i in range(0, words.size, chunk):
        for w in words[i:i + chunk].tolist():
            h = ((h ^ w) * FNV_PRIME) & MASK64
    return h


def digest(t):
    t = t.detach().contiguous()
    if t.dtype != torch.float32:
        raise ValueError("digest of a %s tensor" % t.dtype)
    flat = t.reshape(-1)
    return {"shape": list(t.shape), "fnv1a64": "%016x" % fnv1a64_u32(t),
            "sum": float(t.double().sum()),
            "head": [scalar_json(v) for v in flat[:8].tolist()]}


def full_or_digest(t, limit=FULL_MAX):
    return tensor_json(t) if t.numel() <= limit else digest(t)


# ------------------------------------------------ the book's code, imported

class RMSNorm(nn.Module):
    """Stand-in for PyTorch 2's torch.nn.RMSNorm (absent from 1.13)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        if len(self.normalized_shape) != 1:
            raise NotImplementedError("RMSNorm stand-in: one normalized dimension only")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
        return y * self.weight if self.weight is not None else y

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)


class _Missing:
    """What a stubbed module hands out: fails only if actually used."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError("%s is a stub (not installed for the reference generator)" % self._name)

    def __getattr__(self, attr):
        return _Missing(self._name + "." + attr)


def _stub(name):
    mod = types.ModuleType(name)
    mod.__file__ = "<stub>"
    mod.__getattr__ = lambda attr, _n=name: _Missing(_n + "." + attr)
    return mod


# Modules the imported book modules need, and their submodules.
STUBS = {
    "tiktoken": ["tiktoken.load"],
    "matplotlib": ["matplotlib.pyplot", "matplotlib.ticker"],
    "tqdm": [],
    "requests": [],
}
BOOK_MODULES = ["llms_from_scratch.qwen3", "llms_from_scratch.llama3",
                "llms_from_scratch.kv_cache.qwen3", "llms_from_scratch.kv_cache.llama3",
                "llms_from_scratch.kv_cache.utils", "llms_from_scratch.kv_cache.generate",
                "llms_from_scratch.ch05"]


class Book:
    pass


@contextlib.contextmanager
def book_code(book_dir):
    """The book's modules, importable while the context lasts; afterwards
    sys.path, sys.modules and torch.nn are as they were."""
    added = []
    for top, subs in STUBS.items():
        if top in sys.modules or importlib.util.find_spec(top) is not None:
            continue
        parent = _stub(top)
        sys.modules[top] = parent
        added.append(top)
        for sub in subs:
            m = _stub(sub)
            sys.modules[sub] = m
            setattr(parent, sub.rsplit(".", 1)[1], m)
            added.append(sub)
    had_rmsnorm = hasattr(nn, "RMSNorm")
    if not had_rmsnorm:
        nn.RMSNorm = RMSNorm
    before = set(sys.modules)
    sys.path.insert(0, book_dir)
    try:
        b = Book()
        b.stubbed = [m for m in added if "." not in m]
        b.rmsnorm_stand_in = not had_rmsnorm
        b.qwen3 = importlib.import_module("llms_from_scratch.qwen3")
        b.llama3 = importlib.import_module("llms_from_scratch.llama3")
        b.kv_qwen3 = importlib.import_module("llms_from_scratch.kv_cache.qwen3")
        b.kv_llama3 = importlib.import_module("llms_from_scratch.kv_cache.llama3")
        b.kv_utils = importlib.import_module("llms_from_scratch.kv_cache.utils")
        b.kv_generate = importlib.import_module("llms_from_scratch.kv_cache.generate")
        b.ch05 = importlib.import_module("llms_from_scratch.ch05")
        for m in (b.qwen3, b.llama3, b.ch05):
            if not os.path.abspath(m.__file__).startswith(os.path.abspath(book_dir)):
                raise RuntimeError("%s imported from %s, not from %s" % (m.__name__, m.__file__, book_dir))
        yield b
    finally:
        sys.path.remove(book_dir)
        for name in set(sys.modules) - before:
            if name == "llms_from_scratch" or name.startswith("llms_from_scratch."):
                del sys.modules[name]
        for name in added:
            sys.modules.pop(name, None)
        if not had_rmsnorm:
            del nn.RMSNorm


def book_location():
    """(folder, None) or (None, why not)."""
    d = os.environ.get("LLMS_FROM_SCRATCH_DIR")
    if not d:
        return None, "LLMS_FROM_SCRATCH_DIR unset"
    d = os.path.abspath(d)
    if not os.path.isfile(os.path.join(d, "llms_from_scratch", "qwen3.py")):
        return None, "no llms_from_scratch/qwen3.py in LLMS_FROM_SCRATCH_DIR=%s" % d
    return d, None


def book_commit(book_dir):
    c = os.environ.get("LLMS_FROM_SCRATCH_COMMIT")
    if c:
        return c.strip()
    try:
        out = subprocess.run(["git", "-C", book_dir, "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        print("warning: book commit unknown (set LLMS_FROM_SCRATCH_COMMIT): book_commit is null")
        return None


# ------------------------------------------------------------------ configs

def qwen3_config(b, **kw):
    c = dict(b.qwen3.QWEN_CONFIG_06_B)
    for k in kw:
        if k not in c:
            raise KeyError(k)
    c.update(kw)
    c["dtype"] = torch.float32
    return c


def llama3_config(b, **kw):
    c = copy.deepcopy({k: v for k, v in b.llama3.LLAMA32_CONFIG_1B.items() if k != "dtype"})
    c["dtype"] = torch.float32  # in its place: the book's key order is kept
    c = {k: c[k] for k in b.llama3.LLAMA32_CONFIG_1B}
    for k in kw:
        if k not in c:
            raise KeyError(k)
    c.update(kw)
    return c


def config_json(c):
    return copy.deepcopy({k: v for k, v in c.items() if k != "dtype"})


def tiny_configs(b):
    llama_freq = copy.deepcopy(b.llama3.LLAMA32_CONFIG_1B["rope_freq"])
    return {
        "qwen3_tiny": ("qwen3", qwen3_config(
            b, vocab_size=64, context_length=16, emb_dim=32, n_heads=4, n_layers=2, hidden_dim=48,
            head_dim=64, qk_norm=True, n_kv_groups=2, rope_base=1_000_000.0), 123, 1),
        "qwen3_noqk_tiny": ("qwen3", qwen3_config(
            b, vocab_size=64, context_length=16, emb_dim=32, n_heads=4, n_layers=2, hidden_dim=48,
            head_dim=None, qk_norm=False, n_kv_groups=4, rope_base=1_000_000.0), 7, 2),
        "llama3_tiny": ("llama3", llama3_config(
            b, vocab_size=64, context_length=16, emb_dim=128, n_heads=2, n_layers=2, hidden_dim=96,
            n_kv_groups=1, rope_base=500_000.0, rope_freq=llama_freq), 123, 3),
        "qwen3_vocab": ("qwen3", qwen3_config(
            b, vocab_size=151_936, context_length=32, emb_dim=64, n_heads=4, n_layers=2, hidden_dim=96,
            head_dim=64, qk_norm=True, n_kv_groups=2, rope_base=1_000_000.0), 123, 4),
        "llama3_vocab": ("llama3", llama3_config(
            b, vocab_size=128_256, context_length=32, emb_dim=128, n_heads=2, n_layers=2, hidden_dim=192,
            n_kv_groups=1, rope_base=500_000.0, rope_freq=copy.deepcopy(llama_freq)), 123, 5),
    }


def build(b, family, cfg, seed, kv=False):
    """The book's model (or its kv_cache variant), float32, after manual_seed."""
    cls = {("qwen3", False): b.qwen3.Qwen3Model, ("qwen3", True): b.kv_qwen3.Qwen3Model,
           ("llama3", False): b.llama3.Llama3Model, ("llama3", True): b.kv_llama3.Llama3Model}[family, kv]
    torch.manual_seed(seed)
    return cls(copy.deepcopy(cfg))


# --------------------------------------------------------------------- rope

def rope(b):
    out = []
    q = b.qwen3.QWEN_CONFIG_06_B
    l = b.llama3.LLAMA32_CONFIG_1B
    specs = [
        ("qwen3", q["head_dim"], q["rope_base"], q["context_length"], None, digest),
        ("llama3", l["emb_dim"] // l["n_heads"], l["rope_base"], l["context_length"], l["rope_freq"], digest),
        ("qwen3", 64, q["rope_base"], 16, None, tensor_json),
        ("llama3", 64, l["rope_base"], 16, l["rope_freq"], tensor_json),
    ]
    for family, hd, theta, ctx, freq, enc in specs:
        if family == "qwen3":
            cos, sin = b.qwen3.compute_rope_params(head_dim=hd, theta_base=theta, context_length=ctx)
            kcos, ksin = b.kv_qwen3.compute_rope_params(head_dim=hd, theta_base=theta, context_length=ctx)
        else:
            cos, sin = b.llama3.compute_rope_params(head_dim=hd, theta_base=theta, context_length=ctx,
                                                    freq_config=freq)
            kcos, ksin = b.kv_llama3.compute_rope_params(head_dim=hd, theta_base=theta, context_length=ctx,
                                                         freq_config=freq)
        if not (torch.equal(cos, kcos) and torch.equal(sin, ksin)):
            raise RuntimeError("%s: kv_cache's compute_rope_params differs" % family)
        assert cos.dtype == torch.float32 and cos.shape == (ctx, hd)
        out.append({"family": family, "head_dim": hd, "theta_base": theta, "context_length": ctx,
                    "freq_config": copy.deepcopy(freq), "cos": enc(cos), "sin": enc(sin)})
    return out


# -------------------------------------------------------------------- cases

def run_case(b, name, family, cfg, seed, data_seed):
    tiny = cfg["vocab_size"] < 1000
    model = build(b, family, cfg, seed)
    model.train()
    ids, targets = ids_for(cfg, data_seed, 2, 5)
    logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    named = list(model.named_parameters())
    return {
        "name": name, "family": family, "config": config_json(cfg), "seed": seed, "data_seed": data_seed,
        "ids": tensor_json(ids), "targets": tensor_json(targets),
        "logits": tensor_json(logits) if tiny else digest(logits),
        "logits_grad_fn": grad_fn_name(logits),
        "loss": loss.item(), "loss_grad_fn": grad_fn_name(loss),
        "grads": {n: full_or_digest(p.grad) for n, p in named},
        "parameter_names": [n for n, _ in named],
        "state_dict_keys": list(model.state_dict().keys()),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "repr": str(model),
    }


# --------------------------------------------------------------- generation

def sample_with_cache(kv_cache, model, idx, max_new_tokens, temperature, top_k):
    """ch05's generate() sampling steps, on the cached model's last logits:
    the prompt once, then one id at a time; kv_cache is the book's KVCache
    class of the model's code."""
    model.eval()
    with torch.no_grad():
        cache = kv_cache(n_layers=model.cfg["n_layers"])
        model.reset_kv_cache()
        logits = model(idx, cache=cache)
        for _ in range(max_new_tokens):
            logits = logits[:, -1, :]
            if top_k is not None:
                top_logits, _ = torch.topk(logits, top_k)
                min_val = top_logits[:, -1]
                logits = torch.where(logits < min_val, torch.tensor(float("-inf")).to(logits.device), logits)
            if temperature > 0.0:
                logits = logits / temperature
                logits = logits - logits.max(dim=-1, keepdim=True).values
                probs = torch.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1)
            else:
                idx_next = torch.argmax(logits, dim=-1, keepdim=True)
            idx = torch.cat((idx, idx_next), dim=1)
            logits = model(idx_next, cache=cache)
    return idx


def same_state(a, c):
    sa, sc = a.state_dict(), c.state_dict()
    return list(sa) == list(sc) and all(torch.equal(sa[k], sc[k]) for k in sa)


def gen_runs(b, model, kv_model, prompt, max_new, ctx, sample_seed, temperature, top_k):
    """{(cache, sampled): ids} with ch05's generate() and the cached model."""
    idx = torch.tensor([prompt])
    model.eval()
    kv_model.eval()
    out = {}
    torch.manual_seed(sample_seed)
    out[False, False] = b.ch05.generate(model, idx, max_new, ctx)[0].tolist()
    torch.manual_seed(sample_seed)
    out[False, True] = b.ch05.generate(model, idx, max_new, ctx, temperature=temperature,
                                       top_k=top_k)[0].tolist()
    torch.manual_seed(sample_seed)
    out[True, False] = b.kv_generate.generate_text_simple(kv_model, idx, max_new, use_cache=True)[0].tolist()
    torch.manual_seed(sample_seed)
    out[True, True] = sample_with_cache(b.kv_utils.KVCache, kv_model, idx, max_new, temperature, top_k)[0].tolist()
    # the cached model without its cache is the plain model
    nocache = b.kv_generate.generate_text_simple(kv_model, idx, max_new, use_cache=False)[0].tolist()
    return out, nocache


def generation(b, configs, notes):
    prompts = {"qwen3_tiny": [3, 14, 15, 9], "llama3_tiny": [2, 7, 18, 28],
               "qwen3_vocab": EVERY_EFFORT_QWEN3, "llama3_vocab": EVERY_EFFORT_LLAMA3}
    entries = []
    max_new, sample_seed = 8, 123
    for case, prompt in prompts.items():
        family, cfg, seed, _ = configs[case]
        top_k = 5 if cfg["vocab_size"] < 1000 else 50
        model = build(b, family, cfg, seed)
        kv_model = build(b, family, cfg, seed, kv=True)
        if not same_state(model, kv_model):
            raise RuntimeError("%s: the kv_cache model's state_dict differs from the plain model's" % case)
        runs, nocache = gen_runs(b, model, kv_model, prompt, max_new, cfg["context_length"], sample_seed,
                                 1.0, top_k)
        if nocache != runs[False, False]:
            notes.append("%s: the kv_cache model without its cache gives %s, ch05 generate %s"
                         % (case, nocache, runs[False, False]))
        for cache in (False, True):
            for sampled in (False, True):
                entries.append({
                    "name": "%s_%s%s" % (case, "sampled" if sampled else "greedy", "_cache" if cache else ""),
                    "case": case, "config": config_json(cfg), "seed": seed, "prompt": prompt,
                    "max_new_tokens": max_new, "sample_seed": sample_seed,
                    "temperature": 1.0 if sampled else 0.0, "top_k": top_k if sampled else 0,
                    "cache": cache, "ids": runs[cache, sampled]})
        for sampled in (False, True):
            if runs[True, sampled] != runs[False, sampled]:
                notes.append("%s %s: with the KV cache %s, without %s" % (
                    case, "sampled" if sampled else "greedy", runs[True, sampled], runs[False, sampled]))
    # past the context: ch05's generate() keeps the last context_length ids
    # (greedy cycles 61, 29 there, so a sampled run too)
    family, cfg, seed, _ = configs["qwen3_tiny"]
    model = build(b, family, cfg, seed).eval()
    prompt, n = prompts["qwen3_tiny"], 20
    for temperature, top_k in ((0.0, None), (1.0, 5)):
        torch.manual_seed(sample_seed)
        ids = b.ch05.generate(model, torch.tensor([prompt]), n, cfg["context_length"],
                              temperature=temperature, top_k=top_k)[0].tolist()
        entries.append({"name": "qwen3_tiny_%s_past_context" % ("sampled" if top_k else "greedy"),
                        "case": "qwen3_tiny", "config": config_json(cfg), "seed": seed, "prompt": prompt,
                        "max_new_tokens": n, "sample_seed": sample_seed, "temperature": temperature,
                        "top_k": top_k or 0, "cache": False, "ids": ids})
    return entries


# ----------------------------------------------------------- Hugging Face

# safetensors' Dtype enum position (see safetensors_files.py) of BF16 is 8;
# every tensor here is BF16, so the reference writer's order is by name.
def encode_bf16(tensors, metadata=None):
    """safetensors bytes for {name: bfloat16 tensor}, laid out as
    safetensors_files.encode lays out the others."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        if t.dtype != torch.bfloat16:
            raise ValueError("%s is %s" % (name, t.dtype))
        data = t.view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(blobs)


def hf_names(model, cfg):
    """{Hugging Face Qwen3 name: the book's parameter} (no lm_head: tied)."""
    m = {"model.embed_tokens.weight": model.tok_emb.weight}
    for i, blk in enumerate(model.trf_blocks):
        p = "model.layers.%d." % i
        m[p + "self_attn.q_proj.weight"] = blk.att.W_query.weight
        m[p + "self_attn.k_proj.weight"] = blk.att.W_key.weight
        m[p + "self_attn.v_proj.weight"] = blk.att.W_value.weight
        m[p + "self_attn.o_proj.weight"] = blk.att.out_proj.weight
        m[p + "self_attn.q_norm.weight"] = blk.att.q_norm.scale
        m[p + "self_attn.k_norm.weight"] = blk.att.k_norm.scale
        m[p + "input_layernorm.weight"] = blk.norm1.scale
        m[p + "post_attention_layernorm.weight"] = blk.norm2.scale
        m[p + "mlp.gate_proj.weight"] = blk.ff.fc1.weight
        m[p + "mlp.up_proj.weight"] = blk.ff.fc2.weight
        m[p + "mlp.down_proj.weight"] = blk.ff.fc3.weight
    m["model.norm.weight"] = model.final_norm.scale
    return m


def hf_config(cfg):
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": cfg["emb_dim"], "num_attention_heads": cfg["n_heads"],
        "num_key_value_heads": cfg["n_kv_groups"], "head_dim": cfg["head_dim"],
        "intermediate_size": cfg["hidden_dim"], "num_hidden_layers": cfg["n_layers"],
        "rms_norm_eps": 1e-6, "rope_theta": cfg["rope_base"], "rope_scaling": None,
        "tie_word_embeddings": True, "vocab_size": cfg["vocab_size"],
        "max_position_embeddings": cfg["context_length"], "torch_dtype": "bfloat16",
        "hidden_act": "silu", "attention_bias": False,
    }


def write_file(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    print("wrote %s (%d bytes)" % (path, len(data)))
    return hashlib.sha256(data).hexdigest()


def hf(b, outdir, notes):
    cfg = qwen3_config(b, vocab_size=151_936, context_length=64, emb_dim=16, n_heads=2, head_dim=32,
                       n_kv_groups=1, n_layers=2, hidden_dim=24, qk_norm=True, rope_base=1_000_000.0)
    seed = 321
    src = build(b, "qwen3", cfg, seed)
    with torch.no_grad():  # tied head: out_head = tok_emb (the files hold no lm_head)
        src.out_head.weight.copy_(src.tok_emb.weight)
    weights = {k: v.detach().to(torch.bfloat16) for k, v in hf_names(src, cfg).items()}
    shard_of = {}
    for k in weights:
        first = k == "model.embed_tokens.weight" or k.startswith("model.layers.0.")
        shard_of[k] = "model-0000%d-of-00002.safetensors" % (1 if first else 2)

    d = os.path.join(outdir, HF_DIR)
    os.makedirs(d, exist_ok=True)
    files = {}
    for shard in sorted(set(shard_of.values())):
        part = {k: v for k, v in weights.items() if shard_of[k] == shard}
        files[shard] = write_file(os.path.join(d, shard), encode_bf16(part, {"format": "pt"}))
    total = sum(v.numel() * 2 for v in weights.values())
    index = {"metadata": {"total_size": total}, "weight_map": {k: shard_of[k] for k in sorted(shard_of)}}
    files["model.safetensors.index.json"] = write_file(
        os.path.join(d, "model.safetensors.index.json"),
        (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())
    files["config.json"] = write_file(os.path.join(d, "config.json"),
                                      (json.dumps(hf_config(cfg), indent=2, sort_keys=True) + "\n").encode())
    with open(os.path.join(REPO, "data", "qwen3", "tokenizer.json"), "rb") as f:
        files["tokenizer.json"] = write_file(os.path.join(d, "tokenizer.json"), f.read())

    # The book's models loaded from those weights (widened to float32).
    params = {k: v.to(torch.float32) for k, v in weights.items()}
    with contextlib.redirect_stdout(open(os.devnull, "w")):  # "Model uses weight tying."
        model = build(b, "qwen3", cfg, seed)
        b.qwen3.load_weights_into_qwen(model, cfg, params)
        kv_model = build(b, "qwen3", cfg, seed, kv=True)
        b.kv_qwen3.load_weights_into_qwen(kv_model, cfg, params)
    if model.out_head.weight is not model.tok_emb.weight:
        raise RuntimeError("load_weights_into_qwen did not tie out_head")
    if not same_state(model, kv_model):
        raise RuntimeError("hf: the kv_cache model's state_dict differs")
    model.eval()
    prompt, max_new, sample_seed, top_k = EVERY_EFFORT_QWEN3, 8, 123, 50
    with torch.no_grad():
        logits = model(torch.tensor([prompt]))
    runs, nocache = gen_runs(b, model, kv_model, prompt, max_new, cfg["context_length"], sample_seed, 1.0, top_k)
    if nocache != runs[False, False]:
        notes.append("hf: the kv_cache model without its cache gives %s, ch05 generate %s"
                     % (nocache, runs[False, False]))
    for sampled in (False, True):
        if runs[True, sampled] != runs[False, sampled]:
            notes.append("hf %s: with the KV cache %s, without %s" % (
                "sampled" if sampled else "greedy", runs[True, sampled], runs[False, sampled]))
    return {
        "dir": HF_DIR, "config": config_json(cfg), "seed": seed, "files": files, "total_size": total,
        "prompt_text": "Every effort moves you", "prompt": prompt, "logits": digest(logits),
        "max_new_tokens": max_new, "sample_seed": sample_seed, "temperature": 1.0, "top_k": top_k,
        "greedy": runs[False, False], "greedy_cache": runs[True, False],
        "sampled": runs[False, True], "sampled_cache": runs[True, True],
    }


# -------------------------------------------------------------------- main

def generate(outdir):
    book_dir, why = book_location()
    if book_dir is None:
        print("%s: %s not regenerated (see tools/reference/decoder.py)" % (why, OUT_NAME))
        return
    t0 = time.time()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tools/make_reference.py: deterministic reductions
    try:
        with book_code(book_dir) as b:
            commit = book_commit(book_dir)
            print("book code: %s (commit %s); stubbed: %s; nn.RMSNorm stand-in: %s"
                  % (book_dir, commit, ", ".join(b.stubbed) or "none", b.rmsnorm_stand_in))
            notes = []
            configs = tiny_configs(b)
            obj = {"torch_version": torch.__version__, "book_commit": commit,
                   "hash": HASH_NAME, "full_max": FULL_MAX}
            # a few floats, in full and digested, for checking the hash itself
            check = torch.tensor([1.0, -0.0, 0.0, -2.5, 1e-40, 3.4028234663852886e38, 0.1, -1.0 / 3.0, 7.0])
            obj["hash_check"] = {"tensor": tensor_json(check), "digest": digest(check)}
            obj["rope"] = rope(b)
            print("rope: %.1f s" % (time.time() - t0))
            obj["cases"] = [run_case(b, name, family, cfg, seed, data_seed)
                            for name, (family, cfg, seed, data_seed) in configs.items()]
            print("cases: %.1f s" % (time.time() - t0))
            obj["generate"] = generation(b, configs, notes)
            print("generate: %.1f s" % (time.time() - t0))
            obj["hf"] = hf(b, outdir, notes)
    finally:
        torch.set_num_threads(threads)
    write_json(outdir, OUT_NAME, obj)
    for c in obj["cases"]:
        print("  case %-16s loss %.9g  params %d" % (c["name"], c["loss"], c["num_parameters"]))
    for g in obj["generate"]:
        print("  gen  %-32s %s" % (g["name"], g["ids"]))
    h = obj["hf"]
    print("  hf   greedy %s cache %s sampled %s" % (h["greedy"], h["greedy_cache"], h["sampled"]))
    for n in notes:
        print("  note: " + n)
    if not notes:
        print("  the KV cache runs give the same ids as the runs without it")
    print("decoder references: %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    generate(os.path.join(REPO, "tests", "ref"))
