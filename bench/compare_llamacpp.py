#!/usr/bin/python3
"""Generation speed of tapegrad and llama.cpp on the same weights, greedy from
"Every effort moves you" with the KV cache.

--model qwen3 (default): Qwen3-0.6B's architecture (vocab 151936, hidden
1024, 16 heads, 8 kv heads, head_dim 128, 28 layers, intermediate 3072, tied
embeddings, QK-norm) with random weights: torch.manual_seed(--seed, 0), each
matrix randn * 0.02, RMSNorm weights 1. --model gpt2: GPT-2 124M's shapes
(query/key/value biases), every tensor randn * 0.02 after manual_seed(--seed),
LayerNorm weights + 1. --model gemma3: Gemma 3 270M's architecture (vocab
262144, hidden 640, 4 heads, 1 kv head, head_dim 256, 18 layers, every sixth
full and the others sliding over 512 positions, intermediate 2048, GeGLU,
four norms a block computing x * (1 + w), QK-norm, tied embeddings scaled by
sqrt(640)), manual_seed(--seed), each matrix randn * 0.02 and each norm weight
randn * 0.1 (near Qwen3's norms of 1, but not equal, so that a norm in the
wrong place shows in the ids); its vocabulary is Qwen3's (Gemma's tokenizer
is not shipped), padded to 262,144 ids. The weights are rounded to bf16 and
written, once, under --workdir, and the GGUF files exported from them by
tapegrad:

  WORKDIR/qwen3-0.6b-random/hf/      a Hugging Face folder for tapegrad:
                                     config.json, model.safetensors (BF16),
                                     tokenizer.json (copied from data/qwen3)
  WORKDIR/gpt2-124m-random/hf/       GPT-2's model.safetensors (BF16, Hugging
                                     Face's names, Conv1D layout), config.json
  WORKDIR/gemma3-270m-random/hf/     a gemma3_text folder: config.json,
                                     model.safetensors (BF16), Qwen3's
                                     tokenizer.json
  WORKDIR/*/MODEL-{bf16,q8_0}.gguf   GGUF v3 files for llama.cpp, written by
                                     `tapegrad export --from WORKDIR/*/hf
                                     --gguf FILE --type bf16|q8_0`
                                     (docs/export.md; GPT-2's --tokenizer
                                     data/gpt2): the matrices in BF16, or Q8_0
                                     of the same bf16 values; norms, biases and
                                     GPT-2's position table F32; each family
                                     as convert_hf_to_gguf.py writes it
                                     (Gemma 3's norm weights + 1), with the
                                     folder's tokenizer (Gemma 3's: Qwen3's,
                                     its tokens padded with unused [PADn])

The folder is written again when stamp.json (the configuration, seed,
initialisation and the tokenizer files' sha256) differs; the GGUF files are
exported again when gguf-stamp.json differs: the folder's stamp and the
sha256 of the exporting tapegrad (its executable and the libtapegrad ldd
finds). Exporting needs the tapegrad of --tapegrad, --llamacpp-only too;
without one, GGUF files exported before from the same folder are used.

tapegrad runs `tapegrad generate --hf PATH --prompt ... --max-new-tokens N
--temperature 0 --json --precision bf16` (and --precision fast --weights
f32: float32; --precision fast --weights q8: the matrices quantized at load
to Q8_0 blocks of the folder's values, the blocks the Q8_0 GGUF holds, and
int8 products) with OMP_NUM_THREADS=--threads and reports "tokens_per_s"
(Gemma 3's bf16 run adds --weights bf16). llama.cpp runs
through the npm package node-llama-cpp@3.21.1 (its prebuilt CPU binaries,
never a GPU build or a download) by bench/llamacpp_generate.mjs: the model
read into memory, the prompt tokenized by the GGUF's tokenizer, N ids greedily
with the KV cache (F16, llama.cpp's default), --threads threads. Both time
the same span: from the prompt's forward to the N-th id (the prompt's forward
and N - 1 one-id steps; loading excluded); llama.cpp's one-id steps alone
are printed beside. Each run is a fresh process; tapegrad and llama.cpp
alternate (tapegrad bf16, llama.cpp BF16, tapegrad float32, tapegrad q8,
llama.cpp Q8_0; --pairs picks some: bf16 the first two, f32 the third, q8
the last two) for --runs runs, and the table gives the median tokens/s, the
ratios of their medians for tapegrad bf16 to llama.cpp BF16 and tapegrad q8
to llama.cpp Q8_0 (the goal of each: >= 1.2x), the same ratios run by run
(each tapegrad run over the llama.cpp run of the same storage right after
it, which met the same state of a shared machine) with their medians, and
the CPU's bf16 flags.

Generation reads every weight once an id, so each row also gives the
weight bytes an id reads (from the shapes: every matrix in the row's
storage, bf16 2 bytes, float32 4, Q8_0 34 per 32 values, the tied
embedding once as the head; vectors in float32; GPT-2's position table and
the KV cache left out) times its median tokens/s: the rate at which it
reads its weights, next to the machine's read rate measured before each
round of runs (memchr over 256 MiB in --threads processes at once, the best
of three passes: read_rate), the median of which the table prints. The
prompt's forward is one read of the weights as each later id is, so the
span's N ids are N reads. tapegrad's weights are loaded (under q8
quantized to their blocks; under bf16 their bf16 copies made,
tg_module_prepare_numerics) before its span. Other work on the machine
spoils the figures (llama.cpp's most: its threads spin at barriers, as
OpenMP's do in tapegrad), so each run measures the share of the CPUs that
other processes took meanwhile (/proc/stat less this process's children) and
a run above --max-others (10%) is repeated, --tries times at most.

--check runs each once and prints the prompt ids and the generated ids side
by side, then PyTorch in float32 on the same bf16 weights: greedy for
--check-ids ids with each step's margin (top logit minus the runner-up), and
every engine's ids scored teacher-forced (at how many steps its id is
PyTorch's top-1, and the largest gap below the top-1 logit where it is not).
With random weights the logits lie close together, so bf16 rounding can part
the greedy ids after some steps; so can float rounding between tapegrad q8
and llama.cpp Q8_0, when it moves an activation across an int8 rounding
boundary (a step the quantization's size: the seed-0 Qwen3-0.6B's part at
id 15, with llama.cpp's cache in F16 or F32; tests/check_llamacpp.py
measures it). PyTorch is the book's code: for Qwen3 its
Qwen3Model (KV-cache variant, load_weights_into_qwen) imported from
$LLMS_FROM_SCRATCH_DIR (see tools/reference/decoder.py; skipped when unset),
for GPT-2 tools/reference/gpt_book.py's GPTModel, for Gemma 3 the
Gemma3Model of the book's KV-cache notebook (tools/reference/gemma3.py reads
it from $LLMS_FROM_SCRATCH_ROOT, default the parent of $LLMS_FROM_SCRATCH_DIR).

The npm packages are installed with npm (the registry must be reachable) into
WORKDIR/js when missing (tools/fetch_llamacpp.sh installs the same for the
tests):

    npm install --save-exact --omit=optional --ignore-scripts \\
        node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1

(--omit=optional: none of the CUDA/Vulkan binary packages; --ignore-scripts:
no postinstall that could build llama.cpp). WORKDIR is --workdir, else
$TAPEGRAD_LLAMACPP_DIR, else ~/.cache/tapegrad-llamacpp; Qwen3 needs ~3.2 GB
there, GPT-2 ~0.7 GB, Gemma 3 ~1.4 GB, the npm packages ~85 MB.

    /usr/bin/python3 bench/compare_llamacpp.py [--model qwen3|gpt2|gemma3]
        [--tapegrad build/tools/tapegrad] [--workdir DIR] [--runs 5]
        [--tokens 100] [--threads 2] [--check] [--check-ids 10]
        [--llamacpp-only] [--pairs bf16,f32,q8] [--flash-attention on|off]
        [--kv-type F16] [--max-others 0.1] [--tries 3] [--tapegrad-args=STR] [--json]
"""
import argparse
import contextlib
import hashlib
import json
import os
import platform
import shlex
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JS_SCRIPT = os.path.join(HERE, "llamacpp_generate.mjs")
PROMPT = "Every effort moves you"
NODE_LLAMA_CPP = "3.21.1"
FORMAT = 2  # bump when the files written here change

# Qwen3-0.6B's configuration (Hugging Face's config.json keys)
QWEN3_06B = {
    "vocab_size": 151936, "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "num_hidden_layers": 28, "intermediate_size": 3072, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "max_position_embeddings": 40960,
}
QWEN3_BOS, QWEN3_EOS, QWEN3_PAD = 151643, 151645, 151643  # Qwen3-0.6B's config.json / tokenizer_config.json
# GPT-2 124M (Hugging Face's GPT2Config keys)
GPT2_124M = {"vocab_size": 50257, "n_positions": 1024, "n_ctx": 1024, "n_embd": 768, "n_head": 12,
             "n_layer": 12, "layer_norm_epsilon": 1e-5}
GPT2_EOT = 50256


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def bf16_bytes(t):
    import torch
    return t.contiguous().view(torch.int16).numpy().astype("<i2").tobytes()


def write_safetensors(path, tensors):
    """BF16 safetensors, tensors in name order (as tools/reference/decoder.py)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(tensors):
        n = tensors[name].numel() * 2
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + n]}
        offset += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name in sorted(tensors):
            f.write(bf16_bytes(tensors[name]))
    os.replace(path + ".tmp", path)


def read_safetensors_bf16(path):
    import torch
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name != "__metadata__":
            lo, hi = h["data_offsets"]
            out[name] = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.bfloat16).reshape(h["shape"])
    return out


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


# ------------------------------------------------------------------- Qwen3

def qwen3_shapes(c):
    """[(Hugging Face name, shape)] in the model's order (no lm_head: tied)."""
    h, hd, ff = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    nq, nkv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (c["vocab_size"], h))]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "self_attn.q_proj.weight", (nq, h)), (p + "self_attn.k_proj.weight", (nkv, h)),
                (p + "self_attn.v_proj.weight", (nkv, h)), (p + "self_attn.o_proj.weight", (h, nq)),
                (p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,)),
                (p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate_proj.weight", (ff, h)), (p + "mlp.up_proj.weight", (ff, h)),
                (p + "mlp.down_proj.weight", (h, ff))]
    out.append(("model.norm.weight", (h,)))
    return out


def qwen3_weights(c, seed):
    """{HF name: bf16 tensor}: manual_seed(seed), then in qwen3_shapes' order
    each matrix randn * 0.02 (float32, rounded to bf16), each norm weight 1."""
    import torch
    torch.manual_seed(seed)
    return {name: torch.ones(shape, dtype=torch.bfloat16) if len(shape) == 1
            else (torch.randn(shape) * 0.02).to(torch.bfloat16) for name, shape in qwen3_shapes(c)}


def qwen3_hf_config(c):
    return dict(c, architectures=["Qwen3ForCausalLM"], model_type="qwen3", rope_scaling=None,
                tie_word_embeddings=True, torch_dtype="bfloat16", hidden_act="silu", attention_bias=False,
                attention_dropout=0.0, bos_token_id=QWEN3_BOS, eos_token_id=QWEN3_EOS)


def qwen3_make(d, seed, files):
    c = QWEN3_06B
    tok = os.path.join(ROOT, "data", "qwen3", "tokenizer.json")
    w = qwen3_weights(c, seed)
    write_json(os.path.join(d, "hf", "config.json"), qwen3_hf_config(c))
    with open(tok, "rb") as f, open(os.path.join(d, "hf", "tokenizer.json"), "wb") as g:
        g.write(f.read())
    write_safetensors(os.path.join(d, "hf", "model.safetensors"), w)


@contextlib.contextmanager
def quiet_stdout():
    with contextlib.redirect_stdout(sys.stderr):
        yield


def qwen3_torch(files, threads):
    """(forward(ids) -> last-position logits, a function scoring a whole
    sequence) of the book's Qwen3Model (KV-cache variant) in float32 on the
    bf16 weights, or (None, why not)."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from reference.decoder import book_code, book_location, qwen3_config
    import torch
    book_dir, why = book_location()
    if book_dir is None:
        return None, why + " (the book's code: see tools/reference/decoder.py)"
    torch.set_num_threads(threads)
    with open(os.path.join(files["hf"], "config.json")) as f:
        hc = json.load(f)
    params = {k: v.to(torch.float32) for k, v in
              read_safetensors_bf16(os.path.join(files["hf"], "model.safetensors")).items()}
    with book_code(book_dir) as b:
        cfg = qwen3_config(b, vocab_size=hc["vocab_size"], context_length=hc["max_position_embeddings"],
                           emb_dim=hc["hidden_size"], n_heads=hc["num_attention_heads"],
                           n_layers=hc["num_hidden_layers"], hidden_dim=hc["intermediate_size"],
                           head_dim=hc["head_dim"], qk_norm=True, n_kv_groups=hc["num_key_value_heads"],
                           rope_base=hc["rope_theta"])
        with quiet_stdout():  # "Model uses weight tying."
            model = b.kv_qwen3.Qwen3Model(cfg)
            b.kv_qwen3.load_weights_into_qwen(model, cfg, params)
        del params
        model.eval()
        kv = b.kv_utils.KVCache

    class Run:
        def start(self, ids):
            self.cache = kv(n_layers=cfg["n_layers"])
            model.reset_kv_cache()
            return model(torch.tensor([ids]), cache=self.cache)[0, -1]

        def step(self, i):
            return model(torch.tensor([[i]]), cache=self.cache)[0, -1]

        def all_logits(self, ids):
            return model(torch.tensor([ids]))[0]
    return Run(), None


# -------------------------------------------------------------------- GPT-2

def gpt2_shapes(c):
    """[(Hugging Face GPT-2 name, shape)] in the model's order (Conv1D weights
    (in, out); no lm_head: tied to wte)."""
    d, ff = c["n_embd"], 4 * c["n_embd"]
    out = [("wte.weight", (c["vocab_size"], d)), ("wpe.weight", (c["n_positions"], d))]
    for i in range(c["n_layer"]):
        p = "h.%d." % i
        out += [(p + "ln_1.weight", (d,)), (p + "ln_1.bias", (d,)),
                (p + "attn.c_attn.weight", (d, 3 * d)), (p + "attn.c_attn.bias", (3 * d,)),
                (p + "attn.c_proj.weight", (d, d)), (p + "attn.c_proj.bias", (d,)),
                (p + "ln_2.weight", (d,)), (p + "ln_2.bias", (d,)),
                (p + "mlp.c_fc.weight", (d, ff)), (p + "mlp.c_fc.bias", (ff,)),
                (p + "mlp.c_proj.weight", (ff, d)), (p + "mlp.c_proj.bias", (d,))]
    out += [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]
    return out


def gpt2_weights(c, seed):
    """{HF GPT-2 name: bf16 tensor}: manual_seed(seed), then in gpt2_shapes'
    order randn * 0.02 for every tensor, plus 1 for the LayerNorm weights (so
    that a misplaced bias or norm shows in the ids), rounded to bf16."""
    import torch
    torch.manual_seed(seed)
    w = {}
    for name, shape in gpt2_shapes(c):
        t = torch.randn(shape) * 0.02
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            t += 1
        w[name] = t.to(torch.bfloat16)
    return w


def gpt2_make(d, seed, files):
    c = GPT2_124M
    w = gpt2_weights(c, seed)
    write_json(os.path.join(d, "hf", "config.json"),
               dict(c, architectures=["GPT2LMHeadModel"], model_type="gpt2", activation_function="gelu_new",
                    torch_dtype="bfloat16", tie_word_embeddings=True, bos_token_id=GPT2_EOT,
                    eos_token_id=GPT2_EOT))
    write_safetensors(files["hf"], w)


def gpt2_torch(files, threads):
    """The book's GPTModel (tools/reference/gpt_book.py) in float32 on the
    bf16 weights (no KV cache: each step recomputes the window)."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from reference.gpt_book import GPT_CONFIG_124M, GPTModel
    torch.set_num_threads(threads)
    w = {k: v.to(torch.float32) for k, v in read_safetensors_bf16(files["hf"]).items()}
    model = GPTModel(dict(GPT_CONFIG_124M, qkv_bias=True, drop_rate=0.0)).eval()
    d = model.tok_emb.weight.shape[1]
    with torch.no_grad():
        model.tok_emb.weight.copy_(w["wte.weight"])
        model.out_head.weight.copy_(w["wte.weight"])
        model.pos_emb.weight.copy_(w["wpe.weight"])
        for i, b in enumerate(model.trf_blocks):
            p = "h.%d." % i
            qkv, qkv_b = w[p + "attn.c_attn.weight"].t(), w[p + "attn.c_attn.bias"]
            for j, lin in enumerate((b.att.W_query, b.att.W_key, b.att.W_value)):
                lin.weight.copy_(qkv[j * d:(j + 1) * d])
                lin.bias.copy_(qkv_b[j * d:(j + 1) * d])
            b.att.out_proj.weight.copy_(w[p + "attn.c_proj.weight"].t())
            b.att.out_proj.bias.copy_(w[p + "attn.c_proj.bias"])
            b.ff.layers[0].weight.copy_(w[p + "mlp.c_fc.weight"].t())
            b.ff.layers[0].bias.copy_(w[p + "mlp.c_fc.bias"])
            b.ff.layers[2].weight.copy_(w[p + "mlp.c_proj.weight"].t())
            b.ff.layers[2].bias.copy_(w[p + "mlp.c_proj.bias"])
            b.norm1.scale.copy_(w[p + "ln_1.weight"])
            b.norm1.shift.copy_(w[p + "ln_1.bias"])
            b.norm2.scale.copy_(w[p + "ln_2.weight"])
            b.norm2.shift.copy_(w[p + "ln_2.bias"])
        model.final_norm.scale.copy_(w["ln_f.weight"])
        model.final_norm.shift.copy_(w["ln_f.bias"])

    class Run:
        def start(self, ids):
            self.ids = list(ids)
            return model(torch.tensor([self.ids]))[0, -1]

        def step(self, i):
            self.ids.append(i)
            return model(torch.tensor([self.ids]))[0, -1]

        def all_logits(self, ids):
            return model(torch.tensor([ids]))[0]
    return Run(), None


# ------------------------------------------------------------------- Gemma 3

# Gemma 3 270M's configuration (Hugging Face's gemma3_text config.json keys);
# layers 6, 12 and 18 (counting from 1) attend to the whole context, the
# others to a window of 512
GEMMA3_270M = {
    "vocab_size": 262144, "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "sliding_window": 512,
    "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)],
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 32768,
}
GEMMA3_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "pre_feedforward_layernorm.weight",
                "post_feedforward_layernorm.weight")


def gemma3_shapes(c):
    """[(Hugging Face name, shape)] in Gemma3DecoderLayer's module order (no
    lm_head: tied)."""
    h, hd, ff = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    nq, nkv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (c["vocab_size"], h))]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "self_attn.q_proj.weight", (nq, h)), (p + "self_attn.k_proj.weight", (nkv, h)),
                (p + "self_attn.v_proj.weight", (nkv, h)), (p + "self_attn.o_proj.weight", (h, nq)),
                (p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,)),
                (p + "mlp.gate_proj.weight", (ff, h)), (p + "mlp.up_proj.weight", (ff, h)),
                (p + "mlp.down_proj.weight", (h, ff))]
        out += [(p + n, (h,)) for n in GEMMA3_NORMS]
    out.append(("model.norm.weight", (h,)))
    return out


def gemma3_weights(c, seed):
    """{HF name: bf16 tensor}: manual_seed(seed), then in gemma3_shapes' order
    each matrix randn * 0.02 and each norm weight randn * 0.1 (float32, rounded
    to bf16). Gemma's norms scale by 1 + w: the norms are near 1 as Qwen3's
    are, but not equal, so that a norm in the wrong place shows in the ids."""
    import torch
    torch.manual_seed(seed)
    return {name: (torch.randn(shape) * (0.1 if len(shape) == 1 else 0.02)).to(torch.bfloat16)
            for name, shape in gemma3_shapes(c)}


def gemma3_hf_config(c):
    return dict(c, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", rope_scaling=None,
                tie_word_embeddings=True, torch_dtype="bfloat16", hidden_activation="gelu_pytorch_tanh",
                attention_bias=False, attention_dropout=0.0, attn_logit_softcapping=None,
                final_logit_softcapping=None, bos_token_id=QWEN3_BOS, eos_token_id=QWEN3_EOS,
                pad_token_id=QWEN3_PAD)


def gemma3_make(d, seed, files):
    c = GEMMA3_270M
    tok = os.path.join(ROOT, "data", "qwen3", "tokenizer.json")
    w = gemma3_weights(c, seed)
    write_json(os.path.join(d, "hf", "config.json"), gemma3_hf_config(c))
    with open(tok, "rb") as f, open(os.path.join(d, "hf", "tokenizer.json"), "wb") as g:
        g.write(f.read())
    write_safetensors(os.path.join(d, "hf", "model.safetensors"), w)


def gemma3_torch(files, threads):
    """The book's Gemma3Model (the KV-cache notebook,
    standalone-gemma3-plus-kvcache.ipynb, read by tools/reference/gemma3.py)
    in float32 on the bf16 weights, or (None, why not)."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import torch
    from reference import gemma3 as g3
    root, why = g3.notebook_root()
    if root is None:
        return None, why + " (the book's notebooks: see tools/reference/gemma3.py)"
    plain, kv = g3.load_notebook(root, "plain"), g3.load_notebook(root, "kv")
    g3.check_torch()
    torch.set_num_threads(threads)
    with open(os.path.join(files["hf"], "config.json")) as f:
        hc = json.load(f)
    cfg = g3.gemma3_config(plain, vocab_size=hc["vocab_size"], context_length=hc["max_position_embeddings"],
                           emb_dim=hc["hidden_size"], n_heads=hc["num_attention_heads"],
                           n_layers=hc["num_hidden_layers"], hidden_dim=hc["intermediate_size"],
                           head_dim=hc["head_dim"], qk_norm=True, n_kv_groups=hc["num_key_value_heads"],
                           rope_local_base=hc["rope_local_base_freq"], rope_base=hc["rope_theta"],
                           sliding_window=hc["sliding_window"], layer_types=list(hc["layer_types"]),
                           query_pre_attn_scalar=hc["query_pre_attn_scalar"])
    params = {k: v.to(torch.float32) for k, v in
              read_safetensors_bf16(os.path.join(files["hf"], "model.safetensors")).items()}
    with quiet_stdout():  # "Model uses weight tying."
        model = kv.Gemma3Model(cfg)
        kv.load_weights_into_gemma(model, cfg, params)
    del params
    model.eval()

    class Run:
        def start(self, ids):
            self.cache = kv.KVCache(n_layers=cfg["n_layers"])
            model.reset_kv_cache()
            return model(torch.tensor([ids]), cache=self.cache)[0, -1]

        def step(self, i):
            return model(torch.tensor([[i]]), cache=self.cache)[0, -1]

        def all_logits(self, ids):
            return model(torch.tensor([ids]))[0]
    return Run(), None


MODELS = {
    "qwen3": {"title": "Qwen3-0.6B shapes, random weights", "dir": "qwen3-0.6b-random",
              "gguf": "qwen3-0.6b-random-%s.gguf", "hf": "hf", "config": QWEN3_06B,
              "init": "randn*0.02 bf16, norms 1", "data": ["data/qwen3/tokenizer.json"],
              "make": qwen3_make, "torch": qwen3_torch, "name": "Qwen3-0.6B random (seed %d)",
              "shapes": qwen3_shapes},
    "gpt2": {"title": "GPT-2 124M shapes, random weights", "dir": "gpt2-124m-random",
             "gguf": "gpt2-124m-random-%s.gguf", "hf": os.path.join("hf", "model.safetensors"),
             "config": GPT2_124M, "init": "randn*0.02 (norm weights +1) bf16",
             "data": ["data/gpt2/encoder.json", "data/gpt2/vocab.bpe"], "make": gpt2_make, "torch": gpt2_torch,
             "name": "GPT-2 124M random (seed %d)", "tokenizer": os.path.join(ROOT, "data", "gpt2"),
             "shapes": gpt2_shapes, "one_row": ("wpe.weight",)},
    "gemma3": {"title": "Gemma 3 270M shapes, random weights", "dir": "gemma3-270m-random",
               "gguf": "gemma3-270m-random-%s.gguf", "hf": "hf", "config": GEMMA3_270M,
               "init": "randn*0.02, norm weights randn*0.1, bf16; Qwen3's vocabulary",
               "data": ["data/qwen3/tokenizer.json"], "make": gemma3_make, "torch": gemma3_torch,
               "tapegrad_bf16_args": ["--weights", "bf16"], "needs": "a Hugging Face gemma3_text folder",
               "name": "Gemma 3 270M random (seed %d)", "shapes": gemma3_shapes},
}


def exporter_fingerprint(tapegrad):
    """{file name: sha256} of the tapegrad executable and of the libtapegrad
    it loads (as ldd names it), which hold the GGUF writer; None when there is
    no tapegrad at that path."""
    if not os.access(tapegrad, os.X_OK):
        return None
    paths = [tapegrad]
    try:
        out = subprocess.run(["ldd", tapegrad], capture_output=True, text=True).stdout
        paths += [line.split("=>", 1)[1].split("(")[0].strip() for line in out.splitlines()
                  if "libtapegrad" in line and "=>" in line]
    except OSError:
        pass
    return {os.path.basename(p): sha256_file(p) for p in paths if os.path.isfile(p)}


def ensure_model(m, workdir, seed, tapegrad, log):
    """The Hugging Face files and the two GGUF files under WORKDIR/<dir>, made
    when missing or stale: the folder when stamp.json (what it was made of)
    differs, the GGUF files, `tapegrad export --from` the folder, when
    gguf-stamp.json (the folder's stamp and the exporting build) differs."""
    d = os.path.join(workdir, m["dir"])
    files = {"hf": os.path.join(d, m["hf"]), "BF16": os.path.join(d, m["gguf"] % "bf16"),
             "Q8_0": os.path.join(d, m["gguf"] % "q8_0")}
    stamp = {"format": FORMAT, "config": m["config"], "seed": seed, "init": m["init"],
             "data_sha256": {p: sha256_file(os.path.join(ROOT, p)) for p in m["data"]}}
    stamp_path, gstamp_path = os.path.join(d, "stamp.json"), os.path.join(d, "gguf-stamp.json")

    def stamped(path, want, outputs):
        try:
            with open(path) as f:
                return json.load(f) == want and all(os.path.exists(p) for p in outputs)
        except (OSError, ValueError):
            return False

    if not stamped(stamp_path, stamp, [files["hf"]]):
        os.makedirs(os.path.join(d, "hf"), exist_ok=True)
        for p in (stamp_path, gstamp_path):
            if os.path.exists(p):
                os.remove(p)
        t0 = time.time()
        log("making the weights (%s, seed %d) and writing them to %s ..." % (m["title"], seed, d))
        m["make"](d, seed, files)
        write_json(stamp_path, stamp)
        log("  done in %.0f s" % (time.time() - t0))

    ggufs = [files["BF16"], files["Q8_0"]]
    exporter = exporter_fingerprint(tapegrad)
    gstamp = {"format": FORMAT, "hf": stamp, "exporter": exporter}
    if stamped(gstamp_path, gstamp, ggufs):
        return files
    if exporter is None:
        try:
            with open(gstamp_path) as f:
                kept = json.load(f)["hf"] == stamp and all(os.path.exists(p) for p in ggufs)
        except (OSError, ValueError, KeyError, TypeError):
            kept = False
        if kept:
            log("note: no tapegrad at %s: the GGUF files in %s are kept as an earlier build exported them"
                % (tapegrad, d))
            return files
        sys.exit("compare_llamacpp: the GGUF files are written by tapegrad export: no tapegrad at %s "
                 "(build it, or --tapegrad PATH)" % tapegrad)
    if os.path.exists(gstamp_path):
        os.remove(gstamp_path)
    hf_dir = os.path.join(d, "hf")
    for kind in ("BF16", "Q8_0"):
        cmd = [tapegrad, "export", "--from", hf_dir, "--gguf", files[kind], "--type", kind.lower(),
               "--name", m["name"] % seed] + (["--tokenizer", m["tokenizer"]] if "tokenizer" in m else [])
        log("writing %s: %s" % (os.path.basename(files[kind]), " ".join(shlex.quote(c) for c in cmd)))
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("compare_llamacpp: tapegrad export failed (exit %d): %s"
                     % (r.returncode, (r.stderr or r.stdout).strip()[-2000:]))
        log("  done in %.0f s" % (time.time() - t0))
    write_json(gstamp_path, gstamp)
    return files


# ------------------------------------------------------------ node-llama-cpp

def npm_binary_package():
    plat = {"Linux": "linux", "Darwin": "mac", "Windows": "win"}.get(platform.system())
    arch = {"x86_64": "x64", "AMD64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine())
    if plat is None or arch is None:
        sys.exit("compare_llamacpp: no node-llama-cpp binary package for %s %s"
                 % (platform.system(), platform.machine()))
    name = "%s-%s" % (plat, arch) + ("-metal" if (plat, arch) == ("mac", "arm64") else "")
    return "@node-llama-cpp/%s@%s" % (name, NODE_LLAMA_CPP)


def ensure_js(workdir, log):
    js = os.path.join(workdir, "js")
    try:
        with open(os.path.join(js, "node_modules", "node-llama-cpp", "package.json")) as f:
            if json.load(f)["version"] == NODE_LLAMA_CPP:
                return js
    except (OSError, ValueError, KeyError):
        pass
    os.makedirs(js, exist_ok=True)
    if not os.path.exists(os.path.join(js, "package.json")):
        with open(os.path.join(js, "package.json"), "w") as f:
            f.write('{"name": "tapegrad-llamacpp-bench", "private": true}\n')
    cmd = ["npm", "install", "--save-exact", "--omit=optional", "--ignore-scripts", "--no-audit", "--no-fund",
           "node-llama-cpp@" + NODE_LLAMA_CPP, npm_binary_package()]
    log("installing in %s: %s" % (js, " ".join(cmd)))
    r = subprocess.run(cmd, cwd=js, env=dict(os.environ, NODE_LLAMA_CPP_SKIP_DOWNLOAD="true"))
    if r.returncode != 0:
        sys.exit("compare_llamacpp: npm install failed (exit %d)" % r.returncode)
    return js


# ------------------------------------------------------------------ the runs

class RunError(Exception):
    pass


def last_json(cmd, **kw):
    shown = " ".join(shlex.quote(x) for x in cmd)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    except OSError as e:
        raise RunError("%s\ndid not start: %s" % (shown, e))
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        raise RunError("%s\nfailed (exit %d):\n%s" % (shown, r.returncode, (r.stderr or r.stdout)[-2000:].rstrip()))
    try:
        return json.loads(lines[-1])
    except ValueError:
        raise RunError("%s\nprinted no JSON line:\n%s" % (shown, r.stdout[-2000:]))


def run_tapegrad(a, path, precision, extra=()):
    cmd = [a.tapegrad, "generate", "--hf", path, "--prompt", a.prompt, "--max-new-tokens", str(a.tokens),
           "--temperature", "0", "--json", "--precision", precision] + list(extra) + shlex.split(a.tapegrad_args)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    res = last_json(cmd, env=env)
    if len(res.get("ids") or []) != a.tokens or "tokens_per_s" not in res:
        raise RunError("%s: %d ids (%d asked for) or no tokens_per_s" % (" ".join(cmd), len(res.get("ids") or []),
                                                                         a.tokens))
    return res


def run_llamacpp(a, js_dir, gguf):
    cmd = ["node", JS_SCRIPT, gguf, str(a.tokens), str(a.threads), "--prompt", a.prompt,
           "--flash-attention", a.flash_attention, "--kv-type", a.kv_type]
    return last_json(cmd, cwd=js_dir)


def cpu_flags():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return []
    flags = set(out.split())
    return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]


class CpuMeter:
    """The share of the machine's CPU time that went to other processes
    between start() and stop(): busy time from /proc/stat minus this process's
    and its waited-for children's (Linux; None elsewhere)."""

    @staticmethod
    def sample():
        import resource
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        busy = (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
        own = sum(getattr(resource.getrusage(w), k) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                  for k in ("ru_utime", "ru_stime"))
        return time.monotonic(), busy, own

    def start(self):
        self.t0 = self.sample()

    def stop(self):
        t1 = self.sample()
        if self.t0 is None or t1 is None or t1[0] <= self.t0[0]:
            return None
        others = (t1[1] - self.t0[1]) - (t1[2] - self.t0[2])
        return max(0.0, others) / ((t1[0] - self.t0[0]) * (os.cpu_count() or 1))


def first_difference(x, y):
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def torch_check(m, files, prompt_ids, n, threads, lists):
    """PyTorch float32 on the bf16 weights: greedy ids with each step's top-1
    minus top-2 logit, and each of lists ({name: ids}) scored teacher-forced
    (the prompt and that list in one forward): at how many steps its id is
    PyTorch's top-1, and how far below the top-1 logit its ids are."""
    import torch
    run, why = m["torch"](files, threads)
    if run is None:
        return None, why
    ids, margins, scored = [], [], {}
    with torch.no_grad():
        logits = run.start(prompt_ids)
        for i in range(n):
            top = torch.topk(logits, 2)
            ids.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            if i + 1 < n:
                logits = run.step(ids[-1])
        for name, seq in lists.items():
            p = len(prompt_ids)
            full = run.all_logits(list(prompt_ids) + list(seq[:-1]))[p - 1:]
            chosen = full.gather(1, torch.tensor(seq).view(-1, 1))[:, 0]
            gaps = (full.max(dim=1).values - chosen).tolist()
            scored[name] = {"top1": sum(g == 0 for g in gaps), "n": len(seq), "max_gap": max(gaps), "gaps": gaps}
    return {"ids": ids, "margins": margins, "scored": scored}, None


# ------------------------------------------------------------ memory traffic

# bytes a stored weight takes, by the rows' storage: Q8_0 is 34 bytes per 32
STORAGE_BYTES = {"bf16": 2.0, "float32": 4.0, "q8": 34.0 / 32.0}


def weight_bytes_per_id(m, storage):
    """The weight bytes one generated id reads: every matrix once in the
    given storage (the tied embedding once, as the head: the lookup's one
    row is left out, as is GPT-2's one row of positions), the vectors
    (norms, biases) in float32. The KV cache's reads are left out (under 2%
    of this at 100 ids for these models)."""
    total = 0.0
    for name, shape in m["shapes"](m["config"]):
        if name in m.get("one_row", ()):
            continue
        n = 1
        for x in shape:
            n *= x
        total += n * (STORAGE_BYTES[storage] if len(shape) == 2 else 4.0)
    return total


def read_rate(procs, mib=256, rounds=3):
    """The machine's read rate (GB/s) for a plain sequential read: procs
    processes at once, each running glibc's memchr (mmap.find of a byte that
    is not there) over its own mib MiB of one shared buffer, written first
    (pages that were never written would all read the same zero page); the
    best of rounds rounds, each its total bytes over its slowest process's
    time. Python is in the loop only once per MiB-sized call, so this is the
    memory's rate, as a C loop would see it (memchr reads 32 or 64 bytes per
    instruction). None where fork is not available."""
    import mmap
    import multiprocessing as mp
    try:
        ctx = mp.get_context("fork")
    except ValueError:
        return None
    n = mib << 20
    buf = mmap.mmap(-1, n * procs)
    chunk = b"\x01" * (1 << 24)
    for off in range(0, len(buf), len(chunk)):
        buf[off:off + len(chunk)] = chunk
    barrier, q = ctx.Barrier(procs), ctx.Queue()

    def work(i):
        times = []
        for _ in range(rounds):
            barrier.wait()
            t0 = time.perf_counter()
            found = buf.find(b"\x00", i * n, (i + 1) * n)
            times.append(time.perf_counter() - t0 if found < 0 else None)
        q.put(times)

    ps = [ctx.Process(target=work, args=(i,)) for i in range(procs)]
    for p in ps:
        p.start()
    times = [q.get() for _ in ps]
    for p in ps:
        p.join()
    buf.close()
    per_round = [max(t[r] for t in times) for r in range(rounds) if all(t[r] for t in times)]
    return n * procs / min(per_round) / 1e9 if per_round else None


# ---------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen3")
    ap.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "tools", "tapegrad"))
    ap.add_argument("--workdir", default=os.environ.get("TAPEGRAD_LLAMACPP_DIR")
                    or os.path.join(os.path.expanduser("~"), ".cache", "tapegrad-llamacpp"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=100, help="new ids per run (100)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--seed", type=int, default=0, help="manual_seed of the random weights (0)")
    ap.add_argument("--check", action="store_true", help="one run of each, the ids side by side and PyTorch's")
    ap.add_argument("--check-ids", type=int, default=10, help="greedy ids of the PyTorch reference (10)")
    ap.add_argument("--llamacpp-only", action="store_true",
                    help="leave tapegrad's runs out (its export still writes the GGUF files)")
    ap.add_argument("--pairs", default="bf16,f32,q8",
                    help="the rows, a comma list (bf16,f32,q8): bf16 = tapegrad bf16 and llama.cpp BF16, "
                         "f32 = tapegrad float32, q8 = tapegrad q8 and llama.cpp Q8_0")
    ap.add_argument("--tapegrad-args", default="",
                    help="more arguments for tapegrad generate, one string (--tapegrad-args='--x 1')")
    ap.add_argument("--flash-attention", choices=["on", "off"], default="off",
                    help="llama.cpp's flash attention (off: node-llama-cpp's default)")
    ap.add_argument("--kv-type", default="F16", help="llama.cpp's KV cache type (F16: its default)")
    ap.add_argument("--max-others", type=float, default=0.1,
                    help="a run during which other processes took more than this share of the CPUs is "
                         "repeated (0.1)")
    ap.add_argument("--tries", type=int, default=3, help="runs of one configuration at most, disturbed or not (3)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the table")
    a = ap.parse_args()
    m = MODELS[a.model]
    pairs_asked = [p for p in a.pairs.split(",") if p]
    if not pairs_asked or any(p not in ("bf16", "f32", "q8") for p in pairs_asked):
        ap.error("--pairs: a comma list of bf16, f32, q8 (not %r)" % a.pairs)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    a.workdir = os.path.abspath(a.workdir)
    js_dir = ensure_js(a.workdir, log)
    files = ensure_model(m, a.workdir, a.seed, a.tapegrad, log)
    if not a.llamacpp_only and not os.access(a.tapegrad, os.X_OK):
        sys.exit("compare_llamacpp: no tapegrad at %s (build it, or --tapegrad PATH, or --llamacpp-only)"
                 % a.tapegrad)

    rows = []  # (name, is tapegrad, run, weight storage), tapegrad and llama.cpp alternating
    tg = not a.llamacpp_only
    if tg and "bf16" in pairs_asked:
        rows.append(("tapegrad bf16", True,
                     lambda: run_tapegrad(a, files["hf"], "bf16", m.get("tapegrad_bf16_args", ())), "bf16"))
    if "bf16" in pairs_asked:
        rows.append(("llama.cpp BF16", False, lambda: run_llamacpp(a, js_dir, files["BF16"]), "bf16"))
    if tg and "f32" in pairs_asked:
        rows.append(("tapegrad float32", True, lambda: run_tapegrad(a, files["hf"], "fast", ("--weights", "f32")),
                     "float32"))
    if tg and "q8" in pairs_asked:
        rows.append(("tapegrad q8", True, lambda: run_tapegrad(a, files["hf"], "fast", ("--weights", "q8")), "q8"))
    if "q8" in pairs_asked:
        rows.append(("llama.cpp Q8_0", False, lambda: run_llamacpp(a, js_dir, files["Q8_0"]), "q8"))
    if not rows:
        sys.exit("compare_llamacpp: --pairs %s with --llamacpp-only leaves no run" % a.pairs)
    id_bytes = {name: weight_bytes_per_id(m, storage) for name, _, _, storage in rows}

    probe = CpuMeter()
    probe.start()
    time.sleep(1.0)
    others_before = probe.stop()
    if others_before is not None and others_before > 0.05:
        log("note: other processes use %.0f%% of the CPUs right now: they will slow the runs down"
            % (100 * others_before))
    meter = CpuMeter()
    meter.start()
    failed, last, read_rates = {}, {}, []
    rates, decode, busy = ({name: [] for name, _, _, _ in rows} for _ in range(3))
    runs = 1 if a.check else a.runs
    for r in range(runs):
        # the memory's read rate at the time of this round's runs
        rate = read_rate(a.threads)
        if rate is not None:
            read_rates.append(rate)
            log("run %d/%d  read rate (memchr, %d process%s) %.1f GB/s"
                % (r + 1, runs, a.threads, "" if a.threads == 1 else "es", rate))
        for name, is_tapegrad, fn, _ in rows:
            if name in failed:  # a failing configuration is not run again
                continue
            for attempt in range(1, a.tries + 1):
                one = CpuMeter()
                one.start()
                try:
                    res = fn()
                except RunError as e:
                    res = None
                    failed[name] = str(e)
                    log("%s failed:\n%s" % (name, e))
                    if is_tapegrad and "--hf" in str(e).split("failed", 1)[-1]:
                        log("(a tapegrad whose generate reads %s with --hf is needed)"
                            % m.get("needs", "a Hugging Face Qwen3 folder" if a.model == "qwen3"
                                    else "GPT-2's model.safetensors"))
                    break
                share = one.stop()
                disturbed = share is not None and share > a.max_others
                log("run %d/%d  %-17s %7.2f tokens/s  (other processes: %s of the CPUs)%s"
                    % (r + 1, runs, name, res["tokens_per_s"], "?" if share is None else "%.0f%%" % (100 * share),
                       "" if not disturbed else " -- disturbed, once more" if attempt < a.tries
                       else " -- disturbed, kept"))
                if not disturbed:
                    break
            if res is None:
                continue
            rates[name].append(res["tokens_per_s"])
            busy[name].append(share)
            if res.get("decode_tokens_per_s") is not None:
                decode[name].append(res["decode_tokens_per_s"])
            last[name] = res
    others = meter.stop()

    med = {k: statistics.median(v) for k, v in rates.items() if v}

    def ratio_of(x, y):
        return med[x] / med[y] if x in med and y in med else None
    ratio, ratio_q8 = ratio_of("tapegrad bf16", "llama.cpp BF16"), ratio_of("tapegrad q8", "llama.cpp Q8_0")
    # each tapegrad run against the llama.cpp run of the same storage right
    # after it: the pairs share the machine's state of the moment
    pairs = [t / l for t, l in zip(rates.get("tapegrad bf16", []), rates.get("llama.cpp BF16", []))]
    pairs_q8 = [t / l for t, l in zip(rates.get("tapegrad q8", []), rates.get("llama.cpp Q8_0", []))]
    # the weight bytes an id reads times ids per second
    gbps = {k: id_bytes[k] * v / 1e9 for k, v in med.items()}
    read_med = statistics.median(read_rates) if read_rates else None
    flags = cpu_flags()
    lc = last.get("llama.cpp BF16") or last.get("llama.cpp Q8_0") or {}
    ids = {k: v["ids"] for k, v in last.items()}
    inputs = {k: v.get("input_ids") for k, v in last.items()}
    same_prompt = len({tuple(v) for v in inputs.values() if v is not None}) <= 1

    ref, ref_why = None, None
    if a.check:
        prompt_ids = next((v for v in inputs.values() if v), None)
        if prompt_ids is None:
            ref_why = "no run gave the prompt's ids"
        else:
            log("PyTorch float32 reference (%d greedy ids; each engine's ids scored) ..." % a.check_ids)
            ref, ref_why = torch_check(m, files, prompt_ids, a.check_ids, a.threads, ids)

    summary = {
        "model": a.model, "title": m["title"], "seed": a.seed, "prompt": a.prompt, "tokens": a.tokens,
        "threads": a.threads, "runs": runs, "median_tokens_per_s": med, "runs_tokens_per_s": rates,
        "ratio_tapegrad_bf16_to_llamacpp_bf16": ratio, "runs_ratio_tapegrad_bf16_to_llamacpp_bf16": pairs,
        "ratio_tapegrad_q8_to_llamacpp_q8_0": ratio_q8, "runs_ratio_tapegrad_q8_to_llamacpp_q8_0": pairs_q8,
        "goal": 1.2, "cpu_flags": flags,
        "weight_bytes_per_id": id_bytes, "median_weight_gb_per_s": gbps,
        "read_rate_gb_per_s": {"median": read_med, "runs": read_rates, "processes": a.threads},
        "others_cpu_share": {"before": others_before, "during": others},
        "llamacpp": {k: lc.get(k) for k in ("node_llama_cpp", "llama_cpp_release", "cpu_backend", "system_info",
                                             "flash_attention", "kv_type", "context_size")},
        "llamacpp_median_decode_tokens_per_s": {k: statistics.median(v) for k, v in decode.items() if v},
        "runs_decode_tokens_per_s": {k: v for k, v in decode.items() if v},
        "runs_others_cpu_share": busy,
        "input_ids": inputs, "same_prompt_ids": same_prompt, "ids": ids, "failed": failed, "files": files,
    }
    if a.check:
        summary["torch_reference"] = ref if ref else {"skipped": ref_why}

    if a.json:
        print(json.dumps(summary))
    else:
        print("%s: greedy generation with the KV cache, %d new ids from %r," % (m["title"], a.tokens, a.prompt))
        print("%d threads, median of %d runs; CPU flags: %s; other processes' share of the CPUs during the runs: %s"
              % (a.threads, runs, " ".join(flags) or "-", "?" if others is None else "%.0f%%" % (100 * others)))
        if read_med is not None:
            print("read rate (memchr in %d process%s, once a round): median %.1f GB/s (%s)"
                  % (a.threads, "" if a.threads == 1 else "es", read_med, " ".join("%.1f" % x for x in read_rates)))
        for name, _, _, _ in rows:
            if name not in med:
                print("%-18s   failed" % name)
                continue
            extra = "  (one-id steps alone %.2f)" % statistics.median(decode[name]) if decode[name] else ""
            share = " = %.0f%% of the read rate" % (100 * gbps[name] / read_med) if read_med else ""
            print("%-18s %8.2f tokens/s  %4.0f MB of weights an id: %5.1f GB/s%s%s"
                  % (name, med[name], id_bytes[name] / 1e6, gbps[name], share, extra))
        for label, x, p in (("tapegrad bf16 / llama.cpp BF16", ratio, pairs),
                            ("tapegrad q8 / llama.cpp Q8_0", ratio_q8, pairs_q8)):
            if x is not None:
                print("%s: %.2fx (goal >= 1.2x: %s)" % (label, x, "met" if x >= 1.2 else "not met"))
            if p:
                print("  run by run (each tapegrad run over the llama.cpp run after it): %s; median %.2fx"
                      % (" ".join("%.2f" % v for v in p), statistics.median(p)))
        print("llama.cpp: node-llama-cpp %s, llama.cpp %s, CPU backend %s, KV cache %s, flash attention %s"
              % (lc.get("node_llama_cpp"), (lc.get("llama_cpp_release") or {}).get("release"),
                 lc.get("cpu_backend"), lc.get("kv_type"), "on" if lc.get("flash_attention") else "off"))
        if not same_prompt:
            print("PROMPT IDS DIFFER: %s" % inputs)
        if a.check:
            print("\nprompt ids: %s" % next((v for v in inputs.values() if v), None))
            print("generated ids:")
            for k, v in ids.items():
                print("  %-18s %s" % (k, v))
            if ref:
                print("  %-18s %s" % ("PyTorch float32", ref["ids"]))
                print("  %-18s %s" % ("(top-1 margins)", " ".join("%.3g" % x for x in ref["margins"])))
            pairs = [("tapegrad bf16", "llama.cpp BF16"), ("tapegrad float32", "llama.cpp BF16"),
                     ("tapegrad bf16", "tapegrad float32"), ("tapegrad q8", "llama.cpp Q8_0"),
                     ("llama.cpp BF16", "llama.cpp Q8_0")]
            for x, y in pairs:
                if x in ids and y in ids:
                    i = first_difference(ids[x], ids[y])
                    print("%s vs %s: %s" % (x, y, "equal" if i is None else "first difference at id %d" % i))
            if ref:
                for k, v in ids.items():
                    n = len(ref["ids"])
                    i = first_difference(v[:n], ref["ids"])
                    print("%s vs PyTorch float32 (first %d): %s"
                          % (k, n, "equal" if i is None else "first difference at id %d" % i))
                print("each engine's ids scored by PyTorch float32, teacher-forced:")
                for k, sc in ref["scored"].items():
                    print("  %-18s PyTorch's top-1 at %d of %d steps; largest gap below the top-1 logit %.3g"
                          % (k, sc["top1"], sc["n"], sc["max_gap"]))
            else:
                print("(no PyTorch reference: %s)" % ref_why)
    if failed or not same_prompt:
        sys.exit(1)


if __name__ == "__main__":
    main()
