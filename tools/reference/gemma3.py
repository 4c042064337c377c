"""References for Gemma 3 as the book builds it (rasbt/LLMs-from-scratch,
ch05/12_gemma3/standalone-gemma3.ipynb and its KV-cache companion
standalone-gemma3-plus-kvcache.ipynb), run under PyTorch 1.13 in float32.

The book's Gemma 3 lives in those two notebooks, not in its package, and is
not copied here: the notebooks are read at run time from a checkout of the
book's repository and only the code cells that define FeedForward, RMSNorm,
compute_rope_params, apply_rope, GroupedQueryAttention, TransformerBlock,
Gemma3Model, load_weights_into_gemma, generate_text_basic_stream and (plain
notebook) GEMMA3_CONFIG_270M, (KV-cache notebook) KVCache are executed, each
notebook in a fresh namespace (load_notebook: a selected cell may hold
nothing else but imports; the cell numbers and the notebooks' sha256 go into
the JSON). ch05's generate() comes from the book's package, imported as
tools/reference/decoder.py imports it. Environment:

    LLMS_FROM_SCRATCH_DIR     the package folder (holding llms_from_scratch/),
                              as for decoder.py
    LLMS_FROM_SCRATCH_ROOT    the repository's root (holding ch05/12_gemma3/);
                              default: the parent of LLMS_FROM_SCRATCH_DIR
    LLMS_FROM_SCRATCH_COMMIT  the book's commit (else git's, else null)

for example

    git -C <clone or mirror> archive HEAD pkg ch05/12_gemma3 | tar -x -C /tmp/llms
    LLMS_FROM_SCRATCH_DIR=/tmp/llms/pkg \\
    LLMS_FROM_SCRATCH_COMMIT=$(git -C <clone or mirror> rev-parse HEAD) \\
        /usr/bin/python3 tools/make_reference.py gemma3 gemma3_train

Without them the generator prints why and writes nothing. Nothing is
stubbed for the notebooks: PyTorch 1.13 has F.gelu(approximate="tanh")
(since 1.12) and torch.inf (check_torch()); the package's own imports are
stubbed by decoder.py's book_code().

The book's model, as the notebooks write it (what the C side must match):
  - config keys (GEMMA3_CONFIG_270M's order): vocab_size, context_length,
    emb_dim, n_heads, n_layers, hidden_dim, head_dim, qk_norm, n_kv_groups,
    rope_local_base, rope_base, sliding_window, layer_types (one of
    "sliding_attention" / "full_attention" per layer), dtype,
    query_pre_attn_scalar. The notebook's dtype is bfloat16; here float32,
    and the JSON configs leave "dtype" out.
  - construction order (the random draws): tok_emb (nn.Embedding,
    normal(0, 1)); per block att.W_query, att.W_key, att.W_value,
    att.out_proj (nn.Linear without bias, kaiming-uniform), att.q_norm,
    att.k_norm (no draw), ff.fc1, ff.fc2, ff.fc3, then the four block norms
    (no draw); final_norm; out_head (a separate nn.Linear, random, drawn
    last). Every RMSNorm weight ("scale") is torch.zeros, float32 whatever
    the config's dtype. cos/sin buffers are non-persistent (not in the
    state_dict).
  - forward: x = tok_emb(ids) * (emb_dim ** 0.5) (a Python double, so the
    float32 multiply uses its float32 rounding: 4.0 for emb 16, 5.656854...
    for 32); per block: x = x + post_attention_layernorm(att(
    input_layernorm(x))), x = x + post_feedforward_layernorm(ff(
    pre_feedforward_layernorm(x))); final_norm; out_head.
  - RMSNorm: x * rsqrt(mean(x^2, -1) + 1e-6) * (1.0 + scale), in that
    order ((1 + scale) a tensor of its own); QK-norm is the same over
    head_dim. Its repr is "RMSNorm()" (no extra_repr).
  - attention: q, k, v projections, views to heads, q_norm / k_norm, RoPE
    (compute_rope_params: rope_local_base on sliding layers, rope_base on
    full ones), keys and values repeat_interleave(group_size, dim=1), then
    queries * (query_pre_attn_scalar ** -0.5) (a Python double; the
    KV-cache notebook scales before the repeat, the plain one after: the
    same values), scores = q @ k^T, masked_fill(mask, -inf), softmax (no
    division by sqrt(head_dim)), @ v, out_proj.
  - masks (bool, True = masked): global triu(ones(T, T), 1); local = global
    | triu(ones(T, T), sliding_window).T, i.e. key j is masked for query i
    when j > i or i - j >= sliding_window (a query sees itself and the
    sliding_window - 1 keys before it).
  - ff: fc3(gelu(fc1(x), approximate="tanh") * fc2(x)).
  - KV cache (the KV-cache notebook): a KVCache holds per layer (k, v)
    after k_norm and before RoPE; each call rotates the cached and new keys
    together at positions start_pos - prev_len.., queries at start_pos..;
    the mask rows are the new positions, a sliding layer's mask the last
    len(cached keys) + T columns; after a call a sliding layer keeps its
    last sliding_window (k, v), a full layer all of them. The cached model
    cannot pass the context (its RoPE tables end there); ch05's generate()
    crops the ids to the last context_length instead (positions restart at
    0 over the cropped window). The cached logits are not the uncached ones
    bit for bit (the products have other shapes: up to 6e-7 apart in these
    cases); the ids here are the same.

Digests are decoder.py's ("fnv1a64-u32": FNV-1a 64 over the float32 bit
patterns as 32-bit words; see its docstring).

tests/ref/gemma3.json:
  "torch_version", "book_commit",
  "notebooks": {"plain" | "kv": {"path" (in the book's repository), "sha256"
    (of the .ipynb), "cells" (indices of the code cells executed)}},
  "hash": "fnv1a64-u32", "hash_check": as decoder.json's.
  "rope": compute_rope_params(head_dim, theta_base, context_length) of the
    plain notebook (the KV-cache notebook's checked equal), float32:
    [{"family": "gemma3", "base": "rope_local_base" | "rope_base",
      "head_dim", "theta_base", "context_length", "freq_config": null,
      "cos", "sin"}] for head_dim 8 at context 24 with 1e4 and 1e6 (full
    tensors) and for the 270M preset's head_dim 256 at its context 32,768
    with 1e4 and 1e6 (digests).
  "preset": GEMMA3_CONFIG_270M built in float32 after manual_seed(123):
    {"name": "gemma3-270m", "config", "book_dtype" ("torch.bfloat16"),
     "num_parameters" (435,870,336: the separate head included),
     "num_parameters_tied" (less tok_emb: the notebook's "unique" count,
     268,098,176), "state_dict_keys"}.
  "cases": the plain notebook's Gemma3Model built after
    torch.manual_seed(seed) from the case's config; then, when "norms" is
    "random", torch.manual_seed(norm_seed = seed + 1) and every parameter
    whose name ends in ".scale", in named_parameters() order, uniform_(-0.5,
    0.5) under no_grad (so the 1 + w offset is exercised); "as_built" keeps
    the zeros. Train mode (nothing in the model depends on it). ids and
    targets (2, 10) from gpt.py's ids_for(config, data_seed, 2, 10) (10 >
    every case's window); logits = model(ids); loss =
    cross_entropy(logits.flatten(0, 1), targets.flatten()); backward.
      {"name", "config", "seed", "data_seed", "norms": "random" | "as_built",
       "norm_seed" (null when as built),
       "emb_scale": emb_dim ** 0.5, "query_scale": query_pre_attn_scalar **
         -0.5 (the Python doubles the model multiplies by),
       "mask_global", "mask_local": the (10, 10) bool masks of the forward,
       "ids", "targets" (int64), "logits" (full), "logits_grad_fn", "loss",
       "loss_grad_fn", "grads": {named_parameters() name: full tensor},
       "parameter_names", "state_dict_keys",
       "state_dict": {key: the tensor before the forward, in full; digests
         for "as_built" (gemma3_tiny's tensors but for the zero norms)},
       "num_parameters", "repr": str(model)}
    Cases: gemma3_tiny (vocab 96, context 24, emb 16, 4 heads, 2 kv groups,
    head_dim 8 != emb / heads, hidden 24, layers sliding, full, sliding,
    window 4, query_pre_attn_scalar 8 = head_dim, seed 123), the same
    as built (gemma3_tiny_as_built), gemma3_mqa (vocab 64, emb 24, 4
    heads, 1 kv group, head_dim 6 = emb / heads, hidden 16, full, sliding,
    sliding, window 3, scalar 12, seed 7), gemma3_mha (vocab 64, emb 16, 2
    heads, 2 kv groups, head_dim 6, hidden 16, 4 layers sliding x3 then full,
    window 6, scalar 16, seed 11); all context 24, rope_local_base 1e4,
    rope_base 1e6, qk_norm true.
    state_dict keys (= parameter names) of a 3-layer model, in order:
      tok_emb.weight,
      blocks.N.att.W_query.weight, blocks.N.att.W_key.weight,
      blocks.N.att.W_value.weight, blocks.N.att.out_proj.weight,
      blocks.N.att.q_norm.scale, blocks.N.att.k_norm.scale,
      blocks.N.ff.fc1.weight, blocks.N.ff.fc2.weight, blocks.N.ff.fc3.weight,
      blocks.N.input_layernorm.scale, blocks.N.post_attention_layernorm.scale,
      blocks.N.pre_feedforward_layernorm.scale,
      blocks.N.post_feedforward_layernorm.scale   (N = 0, 1, 2),
      final_norm.scale, out_head.weight
    repr (gemma3_tiny; every block alike):
      Gemma3Model(
        (tok_emb): Embedding(96, 16)
        (blocks): ModuleList(
          (0): TransformerBlock(
            (att): GroupedQueryAttention(
              (W_query): Linear(in_features=16, out_features=32, bias=False)
              (W_key): Linear(in_features=16, out_features=16, bias=False)
              (W_value): Linear(in_features=16, out_features=16, bias=False)
              (out_proj): Linear(in_features=32, out_features=16, bias=False)
              (q_norm): RMSNorm()
              (k_norm): RMSNorm()
            )
            (ff): FeedForward(
              (fc1): Linear(in_features=16, out_features=24, bias=False)
              (fc2): Linear(in_features=16, out_features=24, bias=False)
              (fc3): Linear(in_features=24, out_features=16, bias=False)
            )
            (input_layernorm): RMSNorm()
            (post_attention_layernorm): RMSNorm()
            (pre_feedforward_layernorm): RMSNorm()
            (post_feedforward_layernorm): RMSNorm()
          )
          (1): TransformerBlock(...)
          (2): TransformerBlock(...)
        )
        (final_norm): RMSNorm()
        (out_head): Linear(in_features=16, out_features=96, bias=False)
      )
    (PyTorch 1.13 prints every block in full; no "N x" folding.)
  "generate": the random-norm cases rebuilt (the KV-cache notebook's model
    built and normed the same way, its state_dict checked equal), eval mode,
    prompt of 4 ids (and, as gemma3_tiny_prompt9_*, gemma3_tiny with a
    prompt of 9 ids, longer than its window), 12 new ids (past every
    window), each after torch.manual_seed(sample_seed = 123):
      cache false: ch05's generate(model, idx, 12, context_length) (greedy)
        or with temperature=1.0, top_k=5 (sampled);
      cache true: greedy: the KV-cache notebook's generate_text_basic_stream
        (prime the cache with the prompt, then one id at a time, argmax);
        sampled: the same feeding with ch05's sampling steps on the last
        logits (as decoder.py's sample_with_cache).
    [{"name": PREFIX_greedy|_sampled[_cache], "case", "config", "seed",
      "norms", "norm_seed", "prompt", "max_new_tokens", "sample_seed",
      "temperature" (0.0 = greedy), "top_k" (0 = none), "cache", "ids" (the
      whole row, prompt + new ids)}], then gemma3_tiny_greedy_past_context
    and gemma3_tiny_sampled_past_context: ch05's generate() without cache,
    24 new ids (28 > context 24: the last 24 ids are fed).
    Checked on the way (a difference goes into "notes"): the plain
    notebook's own greedy generate_text_basic_stream equals ch05's greedy
    ids; the cached model run without a cache equals the plain model; the
    cached ids equal the uncached ones.
  "hf": tests/ref/hf_gemma3_tiny/, a Hugging Face gemma3_text folder:
    config.json (hf_config() below: architectures ["Gemma3ForCausalLM"],
    model_type "gemma3_text", hidden_size, intermediate_size,
    num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
    sliding_window, layer_types, rope_theta, rope_local_base_freq,
    rope_scaling null, query_pre_attn_scalar, rms_norm_eps 1e-6, vocab_size,
    max_position_embeddings (= context), hidden_activation
    "gelu_pytorch_tanh", tie_word_embeddings true, torch_dtype "bfloat16",
    attention_bias false, attn_logit_softcapping null,
    final_logit_softcapping null, pad/eos/bos_token_id 0/1/2 as Gemma 3's),
    two BF16 safetensors shards (model.embed_tokens.weight and
    model.layers.0.* in the first) written as decoder.py writes Qwen3's,
    model.safetensors.index.json; Hugging Face names
    model.embed_tokens.weight, model.layers.N.self_attn.{q,k,v,o}_proj.weight,
    model.layers.N.self_attn.{q,k}_norm.weight,
    model.layers.N.mlp.{gate,up,down}_proj.weight (fc1, fc2, fc3),
    model.layers.N.{input,post_attention,pre_feedforward,post_feedforward}_layernorm.weight,
    model.norm.weight; no lm_head.weight (tied), no tokenizer files. The
    weights: a model built after manual_seed(seed), norms randomised with
    norm_seed = seed + 1 as the cases', tok_emb then multiplied by 0.2 (with
    normal(0, 1) embeddings a tied head just repeats the last id; Gemma's
    own are small), rounded to bf16. Both notebooks' models loaded from the
    files (bf16 widened to float32) by their own load_weights_into_gemma,
    which ties out_head to tok_emb; then as "generate", prompt [2, 17, 42,
    99] (bos first):
      {"dir", "config" (the book's), "hf_config" (config.json's content),
       "seed", "norm_seed", "files": {name: sha256}, "total_size",
       "parameter_names" (the Hugging Face names), "prompt_text": null,
       "prompt", "logits" (eval logits of the prompt, digest), "logits_full"
       (the same in full), "max_new_tokens", "sample_seed", "temperature",
       "top_k", "greedy", "greedy_cache", "sampled", "sampled_cache"}
  "notes": [str]: differences found by the checks above ([] when none).
"""
import ast
import contextlib
import copy
import hashlib
import json
import os
import subprocess
import time
import types

import torch
import torch.nn.functional as F

from . import decoder as dec
from .common import grad_fn_name, tensor_json, write_json
from .gpt import ids_for

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT_NAME = "gemma3.json"
HF_DIR = "hf_gemma3_tiny"

# The book's notebooks, relative to the root of its repository.
NOTEBOOKS = {
    "plain": "ch05/12_gemma3/standalone-gemma3.ipynb",
    "kv": "ch05/12_gemma3/standalone-gemma3-plus-kvcache.ipynb",
}
# What is taken from each: the cells that define these names, and nothing else.
MODEL_NAMES = ["FeedForward", "RMSNorm", "compute_rope_params", "apply_rope", "GroupedQueryAttention",
               "TransformerBlock", "Gemma3Model", "load_weights_into_gemma"]
WANTED = {
    "plain": MODEL_NAMES + ["GEMMA3_CONFIG_270M", "generate_text_basic_stream"],
    "kv": MODEL_NAMES + ["KVCache", "generate_text_basic_stream"],
}

SLIDING, FULL = "sliding_attention", "full_attention"
PRESET_NAME = "gemma3-270m"  # tapegrad's --config name for GEMMA3_CONFIG_270M


# ------------------------------------------------- the book's notebooks

def notebook_root(needed=None):
    """(root of the book's repository, None) or (None, why not); needed: the
    files it must hold (default: the Gemma 3 notebooks)."""
    root = os.environ.get("LLMS_FROM_SCRATCH_ROOT")
    if not root:
        pkg = os.environ.get("LLMS_FROM_SCRATCH_DIR")
        if not pkg:
            return None, "LLMS_FROM_SCRATCH_ROOT and LLMS_FROM_SCRATCH_DIR unset"
        root = os.path.dirname(os.path.abspath(pkg))
    root = os.path.abspath(root)
    for rel in needed if needed is not None else NOTEBOOKS.values():
        if not os.path.isfile(os.path.join(root, rel)):
            return None, "no %s under %s (set LLMS_FROM_SCRATCH_ROOT)" % (rel, root)
    return root, None


def notebook_commit(root):
    c = os.environ.get("LLMS_FROM_SCRATCH_COMMIT")
    if c:
        return c.strip()
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        print("warning: book commit unknown (set LLMS_FROM_SCRATCH_COMMIT): book_commit is null")
        return None


def _defined(stmt):
    """Names a top-level statement defines, or None if it is not a definition
    (imports count as definitions of nothing)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return []
    if isinstance(stmt, (ast.ClassDef, ast.FunctionDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
        return [t.id for t in stmt.targets]
    return None


def notebook_definitions(root, relpath, wanted, ns):
    """The code cells of the notebook root/relpath that define the wanted
    names, executed in the namespace ns. A selected cell must hold nothing but
    imports and those definitions; every name must be defined exactly once.
    Returns the cells' indices and the notebook file's sha256."""
    with open(os.path.join(root, relpath), "rb") as f:
        raw = f.read()
    nb = json.loads(raw.decode("utf-8"))
    found, cells = {}, []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        try:
            tree = ast.parse(src)
        except SyntaxError:  # shell escapes and the like: never one of ours
            continue
        defs = [_defined(s) for s in tree.body]
        names = [n for d in defs if d for n in d]
        if not any(n in wanted for n in names):
            continue
        for s, d in zip(tree.body, defs):
            if d is None or any(n not in wanted for n in d):
                raise RuntimeError("%s cell %d: %r besides the definitions taken from it"
                                   % (relpath, i, ast.dump(s)[:80]))
        for n in names:
            if n in found:
                raise RuntimeError("%s: %s defined in cells %d and %d" % (relpath, n, found[n], i))
            found[n] = i
        exec(compile(src, "%s[cell %d]" % (relpath, i), "exec"), ns)
        cells.append(i)
    missing = [n for n in wanted if n not in found]
    if missing:
        raise RuntimeError("%s defines no %s" % (relpath, ", ".join(missing)))
    return cells, hashlib.sha256(raw).hexdigest()


def load_notebook(root, which):
    """The notebook's WANTED definitions (notebook_definitions), executed in a
    fresh namespace."""
    wanted = WANTED[which]
    ns = {"__name__": "gemma3_" + which}
    cells, sha256 = notebook_definitions(root, NOTEBOOKS[which], wanted, ns)
    m = types.SimpleNamespace(**{n: ns[n] for n in wanted})
    m.cells = cells
    m.sha256 = sha256
    m.path = NOTEBOOKS[which]
    return m


def check_torch():
    """What the notebooks call that PyTorch 1.13 might lack: nothing is
    stubbed, these are all there (F.gelu's approximate since 1.12)."""
    F.gelu(torch.zeros(1), approximate="tanh")
    assert torch.inf == float("inf")


# ------------------------------------------------------------ configs

def gemma3_config(nb, **kw):
    """GEMMA3_CONFIG_270M with the given keys replaced (the book's key order),
    dtype float32."""
    c = copy.deepcopy({k: v for k, v in nb.GEMMA3_CONFIG_270M.items() if k != "dtype"})
    c["dtype"] = torch.float32
    c = {k: c[k] for k in nb.GEMMA3_CONFIG_270M}
    for k in kw:
        if k not in c:
            raise KeyError(k)
    c.update(copy.deepcopy(kw))
    return c


def config_json(c):
    return copy.deepcopy({k: v for k, v in c.items() if k != "dtype"})


def layers(s):
    """"ssf" -> the book's layer_types strings."""
    return [{"s": SLIDING, "f": FULL}[ch] for ch in s]


def tiny_cases(nb):
    """name: (config, seed, data_seed, norms)."""
    base = dict(vocab_size=96, context_length=24, n_layers=3, qk_norm=True, rope_local_base=10_000.0,
                rope_base=1_000_000.0)
    tiny = gemma3_config(nb, emb_dim=16, n_heads=4, hidden_dim=24, head_dim=8, n_kv_groups=2, sliding_window=4,
                         layer_types=layers("sfs"), query_pre_attn_scalar=8, **base)
    return {
        # head_dim 8 != emb / heads = 4; two heads per kv group; scalar = head_dim
        "gemma3_tiny": (tiny, 123, 1, "random"),
        # the same model as built: every norm weight zero
        "gemma3_tiny_as_built": (copy.deepcopy(tiny), 123, 1, "as_built"),
        # one kv group (four heads share it); head_dim = emb / heads; scalar 12 != head_dim;
        # emb 24: the embedding scale sqrt(24) is not exact
        "gemma3_mqa": (gemma3_config(nb, **dict(base, vocab_size=64), emb_dim=24, n_heads=4, hidden_dim=16,
                                     head_dim=6, n_kv_groups=1, sliding_window=3, layer_types=layers("fss"),
                                     query_pre_attn_scalar=12), 7, 2, "random"),
        # one head per kv group; four layers, the full one last; scalar 16 != head_dim 6
        "gemma3_mha": (gemma3_config(nb, **dict(base, vocab_size=64, n_layers=4), emb_dim=16, n_heads=2,
                                     hidden_dim=16, head_dim=6, n_kv_groups=2, sliding_window=6,
                                     layer_types=layers("sssf"), query_pre_attn_scalar=16), 11, 3, "random"),
    }


def build(nb, cfg, seed):
    """The notebook's Gemma3Model, float32, after manual_seed(seed)."""
    torch.manual_seed(seed)
    return nb.Gemma3Model(copy.deepcopy(cfg))


def randomise_norms(model, norm_seed):
    """manual_seed(norm_seed), then every RMSNorm weight (parameters named
    *.scale, in named_parameters() order) uniform_(-0.5, 0.5)."""
    torch.manual_seed(norm_seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".scale"):
                p.uniform_(-0.5, 0.5)
    return model


def build_case(nb, cfg, seed, norms):
    model = build(nb, cfg, seed)
    if norms == "random":
        randomise_norms(model, seed + 1)
    return model


def same_state(a, c):
    sa, sc = a.state_dict(), c.state_dict()
    return list(sa) == list(sc) and all(torch.equal(sa[k], sc[k]) for k in sa)


# --------------------------------------------------------------- rope

def rope(plain, kv):
    out = []
    p = plain.GEMMA3_CONFIG_270M
    specs = [(8, "rope_local_base", p["rope_local_base"], 24, tensor_json),
             (8, "rope_base", p["rope_base"], 24, tensor_json),
             (p["head_dim"], "rope_local_base", p["rope_local_base"], p["context_length"], dec.digest),
             (p["head_dim"], "rope_base", p["rope_base"], p["context_length"], dec.digest)]
    for hd, base_name, theta, ctx, enc in specs:
        cos, sin = plain.compute_rope_params(head_dim=hd, theta_base=theta, context_length=ctx, dtype=torch.float32)
        kcos, ksin = kv.compute_rope_params(head_dim=hd, theta_base=theta, context_length=ctx, dtype=torch.float32)
        if not (torch.equal(cos, kcos) and torch.equal(sin, ksin)):
            raise RuntimeError("the kv notebook's compute_rope_params differs")
        assert cos.dtype == torch.float32 and cos.shape == (ctx, hd)
        out.append({"family": "gemma3", "base": base_name, "head_dim": hd, "theta_base": theta,
                    "context_length": ctx, "freq_config": None, "cos": enc(cos), "sin": enc(sin)})
    return out


def preset(plain):
    """GEMMA3_CONFIG_270M built in float32 (seed 123, as the notebook does)."""
    cfg = gemma3_config(plain)
    model = build(plain, cfg, 123)
    n = sum(p.numel() for p in model.parameters())
    rec = {"name": PRESET_NAME, "config": config_json(cfg), "book_dtype": str(plain.GEMMA3_CONFIG_270M["dtype"]),
           "num_parameters": n, "num_parameters_tied": n - model.tok_emb.weight.numel(),
           "state_dict_keys": list(model.state_dict().keys())}
    del model
    return rec


# -------------------------------------------------------------- cases

def run_case(nb, name, cfg, seed, data_seed, norms):
    model = build_case(nb, cfg, seed, norms)
    # in full; the model as built only as digests (gemma3_tiny's but for the zero norms)
    enc = tensor_json if norms == "random" else dec.digest
    state = {k: enc(v) for k, v in model.state_dict().items()}
    model.train()
    ids, targets = ids_for(cfg, data_seed, 2, 10)
    logits = model(ids)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    loss.backward()
    named = list(model.named_parameters())
    mask_global, mask_local = model._create_masks(ids.shape[1], ids.device)
    return {
        "name": name, "config": config_json(cfg), "seed": seed, "data_seed": data_seed,
        "norms": norms, "norm_seed": seed + 1 if norms == "random" else None,
        "emb_scale": cfg["emb_dim"] ** 0.5, "query_scale": cfg["query_pre_attn_scalar"] ** -0.5,
        "mask_global": tensor_json(mask_global), "mask_local": tensor_json(mask_local),
        "ids": tensor_json(ids), "targets": tensor_json(targets),
        "logits": tensor_json(logits), "logits_grad_fn": grad_fn_name(logits),
        "loss": loss.item(), "loss_grad_fn": grad_fn_name(loss),
        "grads": {n: tensor_json(p.grad) for n, p in named},
        "parameter_names": [n for n, _ in named],
        "state_dict_keys": list(state),
        "state_dict": state,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "repr": str(model),
    }


# --------------------------------------------------------- generation

def cached_greedy(kv, model, idx, max_new_tokens):
    """The kv notebook's generate_text_basic_stream (argmax, no eos), its
    yielded ids appended to the prompt."""
    new = list(kv.generate_text_basic_stream(model, idx, max_new_tokens))
    return torch.cat([idx] + new, dim=1)


def gen_runs(b, plain, kv, model, kv_model, prompt, max_new, ctx, sample_seed, temperature, top_k, notes, where):
    """{(cache, sampled): ids}: ch05's generate() on the plain model, the kv
    notebook's generation on the cached model; cross-checks into notes."""
    idx = torch.tensor([prompt])
    model.eval()
    kv_model.eval()
    out = {}
    torch.manual_seed(sample_seed)
    out[False, False] = b.ch05.generate(model, idx, max_new, ctx)[0].tolist()
    torch.manual_seed(sample_seed)
    out[False, True] = b.ch05.generate(model, idx, max_new, ctx, temperature=temperature, top_k=top_k)[0].tolist()
    torch.manual_seed(sample_seed)
    out[True, False] = cached_greedy(kv, kv_model, idx, max_new)[0].tolist()
    torch.manual_seed(sample_seed)
    out[True, True] = dec.sample_with_cache(kv.KVCache, kv_model, idx, max_new, temperature, top_k)[0].tolist()
    # the plain notebook's own greedy loop, and the cached model without a cache
    nb_greedy = torch.cat([idx] + list(plain.generate_text_basic_stream(model, idx, max_new)), dim=1)[0].tolist()
    nocache = b.ch05.generate(kv_model, idx, max_new, ctx)[0].tolist()
    if nb_greedy != out[False, False]:
        notes.append("%s: the plain notebook's greedy loop gives %s, ch05 generate %s"
                     % (where, nb_greedy, out[False, False]))
    if nocache != out[False, False]:
        notes.append("%s: the kv notebook's model without its cache gives %s, the plain model %s"
                     % (where, nocache, out[False, False]))
    for sampled in (False, True):
        if out[True, sampled] != out[False, sampled]:
            notes.append("%s %s: with the KV cache %s, without %s" % (
                where, "sampled" if sampled else "greedy", out[True, sampled], out[False, sampled]))
    return out


# (entry name prefix, case, prompt); the last one's prompt is longer than the
# case's window (the cached prefill attends to all of it, then keeps 4)
PROMPTS = [("gemma3_tiny", "gemma3_tiny", [3, 14, 15, 9]), ("gemma3_mqa", "gemma3_mqa", [2, 7, 18, 28]),
           ("gemma3_mha", "gemma3_mha", [5, 61, 40, 22]),
           ("gemma3_tiny_prompt9", "gemma3_tiny", [3, 14, 15, 9, 26, 5, 35, 89, 79])]
MAX_NEW, SAMPLE_SEED, TOP_K = 12, 123, 5


def generation(b, plain, kv, cases, notes):
    entries = []
    for prefix, case, prompt in PROMPTS:
        cfg, seed, _, norms = cases[case]
        model = build_case(plain, cfg, seed, norms)
        kv_model = build_case(kv, cfg, seed, norms)
        if not same_state(model, kv_model):
            raise RuntimeError("%s: the kv notebook's model differs from the plain one" % case)
        runs = gen_runs(b, plain, kv, model, kv_model, prompt, MAX_NEW, cfg["context_length"], SAMPLE_SEED, 1.0,
                        TOP_K, notes, prefix)
        for cache in (False, True):
            for sampled in (False, True):
                entries.append({
                    "name": "%s_%s%s" % (prefix, "sampled" if sampled else "greedy", "_cache" if cache else ""),
                    "case": case, "config": config_json(cfg), "seed": seed, "norms": norms,
                    "norm_seed": seed + 1 if norms == "random" else None, "prompt": prompt,
                    "max_new_tokens": MAX_NEW, "sample_seed": SAMPLE_SEED,
                    "temperature": 1.0 if sampled else 0.0, "top_k": TOP_K if sampled else 0,
                    "cache": cache, "ids": runs[cache, sampled]})
    # past the context: ch05's generate() keeps the last context_length ids
    # (the cached model cannot go there: its RoPE tables end at the context)
    case = "gemma3_tiny"
    cfg, seed, _, norms = cases[case]
    model = build_case(plain, cfg, seed, norms).eval()
    prompt, n = PROMPTS[0][2], cfg["context_length"]
    for temperature, top_k in ((0.0, None), (1.0, TOP_K)):
        torch.manual_seed(SAMPLE_SEED)
        ids = b.ch05.generate(model, torch.tensor([prompt]), n, cfg["context_length"],
                              temperature=temperature, top_k=top_k)[0].tolist()
        entries.append({"name": "%s_%s_past_context" % (case, "sampled" if top_k else "greedy"),
                        "case": case, "config": config_json(cfg), "seed": seed, "norms": norms,
                        "norm_seed": seed + 1, "prompt": prompt, "max_new_tokens": n,
                        "sample_seed": SAMPLE_SEED, "temperature": temperature, "top_k": top_k or 0,
                        "cache": False, "ids": ids})
    return entries


# ------------------------------------------------------- Hugging Face

def hf_names(model):
    """{Hugging Face gemma3_text name: the book's parameter} (no lm_head: tied)."""
    m = {"model.embed_tokens.weight": model.tok_emb.weight}
    for i, blk in enumerate(model.blocks):
        p = "model.layers.%d." % i
        m[p + "self_attn.q_proj.weight"] = blk.att.W_query.weight
        m[p + "self_attn.k_proj.weight"] = blk.att.W_key.weight
        m[p + "self_attn.v_proj.weight"] = blk.att.W_value.weight
        m[p + "self_attn.o_proj.weight"] = blk.att.out_proj.weight
        m[p + "self_attn.q_norm.weight"] = blk.att.q_norm.scale
        m[p + "self_attn.k_norm.weight"] = blk.att.k_norm.scale
        m[p + "input_layernorm.weight"] = blk.input_layernorm.scale
        m[p + "post_attention_layernorm.weight"] = blk.post_attention_layernorm.scale
        m[p + "pre_feedforward_layernorm.weight"] = blk.pre_feedforward_layernorm.scale
        m[p + "post_feedforward_layernorm.weight"] = blk.post_feedforward_layernorm.scale
        m[p + "mlp.gate_proj.weight"] = blk.ff.fc1.weight
        m[p + "mlp.up_proj.weight"] = blk.ff.fc2.weight
        m[p + "mlp.down_proj.weight"] = blk.ff.fc3.weight
    m["model.norm.weight"] = model.final_norm.scale
    return m


HF_EMB_FACTOR = 0.2  # the embedding drawn by nn.Embedding, times this
HF_IDS = {"pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2}  # Gemma 3's


def hf_config(cfg):
    return dict({
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
        "hidden_size": cfg["emb_dim"], "intermediate_size": cfg["hidden_dim"],
        "num_hidden_layers": cfg["n_layers"], "num_attention_heads": cfg["n_heads"],
        "num_key_value_heads": cfg["n_kv_groups"], "head_dim": cfg["head_dim"],
        "sliding_window": cfg["sliding_window"], "layer_types": list(cfg["layer_types"]),
        "rope_theta": cfg["rope_base"], "rope_local_base_freq": cfg["rope_local_base"],
        "rope_scaling": None, "query_pre_attn_scalar": cfg["query_pre_attn_scalar"], "rms_norm_eps": 1e-6,
        "vocab_size": cfg["vocab_size"], "max_position_embeddings": cfg["context_length"],
        "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "attention_bias": False, "attn_logit_softcapping": None, "final_logit_softcapping": None,
    }, **HF_IDS)


def hf(b, plain, kv, outdir, notes):
    cfg = gemma3_config(plain, vocab_size=128, context_length=32, emb_dim=32, n_heads=4, n_layers=4, hidden_dim=48,
                        head_dim=16, qk_norm=True, n_kv_groups=1, rope_local_base=10_000.0, rope_base=1_000_000.0,
                        sliding_window=4, layer_types=layers("ssfs"), query_pre_attn_scalar=16)
    seed = 321
    src = randomise_norms(build(plain, cfg, seed), seed + 1)
    with torch.no_grad():  # small embeddings, as Gemma's are (see the docstring)
        src.tok_emb.weight.mul_(HF_EMB_FACTOR)
    weights = {k: v.detach().to(torch.bfloat16) for k, v in hf_names(src).items()}
    shard_of = {}
    for k in weights:
        first = k == "model.embed_tokens.weight" or k.startswith("model.layers.0.")
        shard_of[k] = "model-0000%d-of-00002.safetensors" % (1 if first else 2)

    d = os.path.join(outdir, HF_DIR)
    os.makedirs(d, exist_ok=True)
    files = {}
    for shard in sorted(set(shard_of.values())):
        part = {k: v for k, v in weights.items() if shard_of[k] == shard}
        files[shard] = dec.write_file(os.path.join(d, shard), dec.encode_bf16(part, {"format": "pt"}))
    total = sum(v.numel() * 2 for v in weights.values())
    index = {"metadata": {"total_size": total}, "weight_map": {k: shard_of[k] for k in sorted(shard_of)}}
    files["model.safetensors.index.json"] = dec.write_file(
        os.path.join(d, "model.safetensors.index.json"), (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())
    hcfg = hf_config(cfg)
    files["config.json"] = dec.write_file(os.path.join(d, "config.json"),
                                          (json.dumps(hcfg, indent=2, sort_keys=True) + "\n").encode())

    # The notebooks' models loaded from those weights (widened to float32) by
    # their load_weights_into_gemma, which ties out_head to tok_emb.
    params = {k: v.to(torch.float32) for k, v in weights.items()}
    with contextlib.redirect_stdout(open(os.devnull, "w")):  # "Model uses weight tying."
        model = build(plain, cfg, seed)
        plain.load_weights_into_gemma(model, cfg, params)
        kv_model = build(kv, cfg, seed)
        kv.load_weights_into_gemma(kv_model, cfg, params)
    for m in (model, kv_model):
        if m.out_head.weight is not m.tok_emb.weight:
            raise RuntimeError("load_weights_into_gemma did not tie out_head")
    if not same_state(model, kv_model):
        raise RuntimeError("hf: the kv notebook's model differs")
    model.eval()
    prompt = [HF_IDS["bos_token_id"], 17, 42, 99]
    with torch.no_grad():
        logits = model(torch.tensor([prompt]))
    runs = gen_runs(b, plain, kv, model, kv_model, prompt, MAX_NEW, cfg["context_length"], SAMPLE_SEED, 1.0, TOP_K,
                    notes, "hf")
    return {
        "dir": HF_DIR, "config": config_json(cfg), "hf_config": hcfg, "seed": seed, "norm_seed": seed + 1,
        "files": files, "total_size": total, "parameter_names": list(weights),
        "prompt_text": None, "prompt": prompt, "logits": dec.digest(logits), "logits_full": tensor_json(logits),
        "max_new_tokens": MAX_NEW, "sample_seed": SAMPLE_SEED, "temperature": 1.0, "top_k": TOP_K,
        "greedy": runs[False, False], "greedy_cache": runs[True, False],
        "sampled": runs[False, True], "sampled_cache": runs[True, True],
    }


# --------------------------------------------------------------- main

def load_book():
    """(plain, kv, commit, root) or None after printing why not."""
    root, why = notebook_root()
    if root is None:
        return None, why
    return (load_notebook(root, "plain"), load_notebook(root, "kv"), notebook_commit(root), root), None


def generate(outdir):
    book_dir, why = dec.book_location()
    if book_dir is None:
        print("%s: %s not regenerated (see tools/reference/gemma3.py)" % (why, OUT_NAME))
        return
    got, why = load_book()
    if got is None:
        print("%s: %s not regenerated (see tools/reference/gemma3.py)" % (why, OUT_NAME))
        return
    plain, kv, commit, root = got
    check_torch()
    t0 = time.time()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as tools/make_reference.py: deterministic reductions
    notes = []
    try:
        with dec.book_code(book_dir) as b:
            print("book notebooks: %s (commit %s), cells %s and %s" % (root, commit, plain.cells, kv.cells))
            obj = {"torch_version": torch.__version__, "book_commit": commit,
                   "notebooks": {w: {"path": nb.path, "sha256": nb.sha256, "cells": nb.cells}
                                 for w, nb in (("plain", plain), ("kv", kv))},
                   "hash": dec.HASH_NAME}
            check = torch.tensor([1.0, -0.0, 0.0, -2.5, 1e-40, 3.4028234663852886e38, 0.1, -1.0 / 3.0, 7.0])
            obj["hash_check"] = {"tensor": tensor_json(check), "digest": dec.digest(check)}
            obj["rope"] = rope(plain, kv)
            print("rope: %.1f s" % (time.time() - t0))
            obj["preset"] = preset(plain)
            print("preset: %.1f s" % (time.time() - t0))
            cases = tiny_cases(plain)
            obj["cases"] = [run_case(plain, name, *c) for name, c in cases.items()]
            print("cases: %.1f s" % (time.time() - t0))
            obj["generate"] = generation(b, plain, kv, cases, notes)
            print("generate: %.1f s" % (time.time() - t0))
            obj["hf"] = hf(b, plain, kv, outdir, notes)
            obj["notes"] = notes
    finally:
        torch.set_num_threads(threads)
    write_json(outdir, OUT_NAME, obj)
    print("  preset %s: %d parameters" % (obj["preset"]["name"], obj["preset"]["num_parameters"]))
    for c in obj["cases"]:
        print("  case %-22s loss %.9g  params %d" % (c["name"], c["loss"], c["num_parameters"]))
    for g in obj["generate"]:
        print("  gen  %-34s %s" % (g["name"], g["ids"]))
    h = obj["hf"]
    print("  hf   greedy %s cache %s\n       sampled %s cache %s"
          % (h["greedy"], h["greedy_cache"], h["sampled"], h["sampled_cache"]))
    for n in notes:
        print("  note: " + n)
    if not notes:
        print("  the KV cache runs give the same ids as the runs without it")
    print("gemma3 references: %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    generate(os.path.join(REPO, "tests", "ref"))
