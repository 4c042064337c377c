#!/usr/bin/python3
"""Compare a fine-tuning step of a random-weight Qwen3-0.6B (or Llama 3.2 1B,
or Gemma 3 270M) between tapegrad and the book's own code under PyTorch on
this CPU.

Usage: /usr/bin/python3 bench/compare_decoder.py [--tapegrad build/tools/tapegrad]
[--model qwen3-0.6b|llama3.2-1b|gemma3-270m] [--only full|lora]
[--precisions LIST] [--runs 3] [--steps 2] [--batch 1] [--tokens 512]
[--layers N] [--threads 2] [--timeout SECONDS] [--markdown] [--json]

with the book's code (rasbt/LLMs-from-scratch, the folder that contains
llms_from_scratch/) named by LLMS_FROM_SCRATCH_DIR, for example

    LLMS_FROM_SCRATCH_DIR=path/to/LLMs-from-scratch/pkg /usr/bin/python3 bench/compare_decoder.py

--model gemma3-270m also needs the book's Gemma 3 notebooks
(ch05/12_gemma3/standalone-gemma3.ipynb and its KV-cache companion) under
the repository's root, LLMS_FROM_SCRATCH_ROOT (default: the parent of
LLMS_FROM_SCRATCH_DIR), as tools/reference/gemma3.py reads them, e.g. from
a clone or mirror:

    mkdir -p /tmp/llms && git -C path/to/LLMs-from-scratch archive HEAD pkg ch05/12_gemma3 | tar -x -C /tmp/llms
    LLMS_FROM_SCRATCH_DIR=/tmp/llms/pkg /usr/bin/python3 bench/compare_decoder.py --model gemma3-270m

LLMS_FROM_SCRATCH_COMMIT names the book's commit in the notes (else git's
of the folder, else unknown).

Quick check (seconds a process): --layers 1 --tokens 64 --runs 1 --steps 1.

The step, on random ids and random targets (batch, tokens) over the whole
vocabulary: forward, cross-entropy over all positions (the book's
calc_loss_batch: logits.flatten(0, 1)), backward, AdamW(lr 4e-4, weight
decay 0.1) step; zero_grad at the start of the step, timed with the forward.
Two set-ups: "full" (every parameter trainable) and "lora" (appendix E: all
parameters frozen, then every nn.Linear, out_head included, wrapped in
LinearWithLoRA rank 16 alpha 16; AdamW over the adapters).

PyTorch side (Debian's python3-torch 1.13, torch.set_num_threads(--threads)):
the book's Qwen3Model / Llama3Model from llms_from_scratch.qwen3 / .llama3,
imported through tools/reference/decoder.py's machinery (stubs for tiktoken
and the like, an nn.RMSNorm stand-in for PyTorch 1.13), built after
torch.manual_seed(123) from QWEN_CONFIG_06_B / LLAMA32_CONFIG_1B with dtype
float32 and context_length = --tokens (the book's model computes RoPE's cos
and sin for the whole context at construction: 40,960 or 131,072 positions;
the step only reads the first --tokens of them); replace_linear_with_lora
from llms_from_scratch.appendix_e. Gemma 3 270M: the book keeps it in a
notebook, not in its package: Gemma3Model and GEMMA3_CONFIG_270M from
ch05/12_gemma3/standalone-gemma3.ipynb, whose defining cells
tools/reference/gemma3.py's load_notebook() executes at run time (nothing
is stubbed for them; the notebook's own RMSNorm), built after
torch.manual_seed(123) from GEMMA3_CONFIG_270M with dtype float32 (the
notebook's: bfloat16) and context_length = --tokens (RoPE tables for
32,768 positions otherwise): 18 layers, five sliding-window (512) layers
then a full one, emb 640, 4 heads of 256, one kv group, GeGLU 2048, vocab
262,144, a separate out_head (435.9 M parameters, 268.1 M of them in
Linears); the LoRA set-up as above (appendix E from the package). With
--layers N its first N layer_types (N at most 18), as tapegrad's preset. Columns "torch-fp32" (float32) and
"torch-bf16" (forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16), backward and the step outside, as usual; its oneDNN
kernels are read from DNNL_VERBOSE). Without LLMS_FROM_SCRATCH_DIR (or,
for Gemma 3, without the notebooks) the PyTorch columns are skipped with a
message.

tapegrad side: `tapegrad bench --model gpt --config MODEL --batch B --tokens T
--steps S --threads N --precision P --json [--lora-rank 16 --lora-alpha 16]
[--layers N]` with OMP_NUM_THREADS=N, columns "exact", "fast", "bf16".

Each process builds the model, runs one warm-up step and then --steps timed
steps (their median); tapegrad and PyTorch processes alternate within each
of --runs runs, so both see the same machine noise, and the table gives the
median over the runs of each run's median step time, the ratios tapegrad
bf16 : PyTorch float32 and tapegrad bf16 : PyTorch bf16 autocast (PyTorch's
step time over tapegrad's: above 1 means tapegrad is faster), each process's
peak RSS (getrusage ru_maxrss), the step's parts and the trainable counts of
both sides. --layers N overrides n_layers on both sides (quick checks).
--precisions takes a comma list of torch-fp32, torch-bf16, exact, fast,
bf16 (default: all five). A process that fails or exceeds --timeout leaves
its cell empty ("fail"/"timeout") and the rest goes on; the exit status is
then 1. Progress goes to stderr; --json prints one JSON object instead of
the tables.

On a CPU without bf16 hardware (no AVX512_BF16 or AMX: the flags are printed
first) tapegrad's bf16 products are emulated on sgemm, so its bf16 may well
be slower than its float32 there; the table prints what it measures. On such
a CPU without AVX-512 at all (AVX2 only) PyTorch 1.13's autocast matmuls do
not reach oneDNN either but its own bf16 gemm, at about 1 GFLOP/s on 2 cores
(float32: 40-80): a torch-bf16 step of the full Qwen3-0.6B at B1 T512 then
takes roughly 15-40 minutes. Before the runs the script measures both
matmul rates and prints a floor for each PyTorch column's step (its Linear
FLOPs at that rate), warning about columns that would take over 30 minutes a
process; leave them out with --precisions (e.g. torch-fp32,exact,fast,bf16)
or bound them with --timeout. SIGTERM or Ctrl-C ends the running process and
prints the tables of what finished. Memory: a full Qwen3-0.6B step holds
float32 weights, gradients and AdamW's two moments of 0.75 B parameters (the
book's model does not tie out_head to tok_emb), ~12-13 GB on either side; a
full Gemma 3 270M step those of 0.44 B parameters (7 GB) and the logits of
its 262,144-word vocabulary (0.5 GB each at B1 T512).
"""
import argparse
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))

# --model: (family, the book's module (Gemma 3: its notebook), its config's name, its class)
MODELS = {
    "qwen3-0.6b": ("qwen3", "llms_from_scratch.qwen3", "QWEN_CONFIG_06_B", "Qwen3Model"),
    "llama3.2-1b": ("llama3", "llms_from_scratch.llama3", "LLAMA32_CONFIG_1B", "Llama3Model"),
    "gemma3-270m": ("gemma3", "ch05/12_gemma3/standalone-gemma3.ipynb", "GEMMA3_CONFIG_270M", "Gemma3Model"),
}
# tools/reference/gemma3.py's NOTEBOOKS (its notebook_root() wants both), for
# the driver's check without importing torch
GEMMA3_NOTEBOOKS = ["ch05/12_gemma3/standalone-gemma3.ipynb", "ch05/12_gemma3/standalone-gemma3-plus-kvcache.ipynb"]
GEMMA3_LAYERS = 18  # GEMMA3_CONFIG_270M's n_layers: --layers takes a prefix of its layer_types
MODES = [("full", None), ("lora", (16, 16))]  # name, (rank, alpha) or None
TORCH_COLS = ["torch-fp32", "torch-bf16"]
TG_COLS = ["exact", "fast", "bf16"]
COLS = TORCH_COLS + TG_COLS  # table order
COL_TITLE = {"torch-fp32": "torch fp32", "torch-bf16": "torch bf16 ac", "exact": "tg exact", "fast": "tg fast",
             "bf16": "tg bf16"}
SEED = 123
LR, WEIGHT_DECAY = 4e-4, 0.1


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- the PyTorch side (runs in a child process) ---------------------------------------

def book_dir_or_none(model):
    """(folder, None) or (None, why not), as tools/reference/decoder.py decides
    (and, for Gemma 3, tools/reference/gemma3.py's notebook_root()), without
    importing torch into the driver."""
    d = os.environ.get("LLMS_FROM_SCRATCH_DIR")
    if not d:
        return None, "LLMS_FROM_SCRATCH_DIR unset"
    d = os.path.abspath(d)
    if not os.path.isfile(os.path.join(d, "llms_from_scratch", "qwen3.py")):
        return None, "no llms_from_scratch/qwen3.py in LLMS_FROM_SCRATCH_DIR=%s" % d
    if MODELS[model][0] == "gemma3":
        root = os.path.abspath(os.environ.get("LLMS_FROM_SCRATCH_ROOT") or os.path.dirname(d))
        for rel in GEMMA3_NOTEBOOKS:
            if not os.path.isfile(os.path.join(root, rel)):
                return None, "no %s under %s (set LLMS_FROM_SCRATCH_ROOT to the book's repository)" % (rel, root)
    return d, None


class BookModel:
    """The book's class and config for --model: cls, config (the book's own
    dict), and for Gemma 3 the notebook (nb: its path, sha256, cells, root)."""

    def __init__(self, b, model):
        family, _, name, cls = MODELS[model]
        self.family, self.nb, self.root = family, None, None
        if family == "gemma3":
            from tools.reference import gemma3 as g3

            self.root, why = g3.notebook_root()
            if self.root is None:
                raise RuntimeError(why)
            g3.check_torch()
            self.nb = g3.load_notebook(self.root, "plain")
            src = self.nb
        else:
            src = b.qwen3 if family == "qwen3" else b.llama3
        self.cls, self.config = getattr(src, cls), getattr(src, name)


def book_config(b, bm, tokens, layers):
    """The book's config for --model (bm: its BookModel), float32,
    context_length = tokens, and n_layers = layers when given
    (tools/reference/decoder.py's and gemma3.py's helpers; Gemma 3: the first
    `layers` layer_types too)."""
    over = {"context_length": tokens}
    if layers:
        over["n_layers"] = layers
    if bm.family == "gemma3":
        from tools.reference.gemma3 import gemma3_config

        if layers:
            if layers > len(bm.config["layer_types"]):
                raise ValueError("--layers %d: GEMMA3_CONFIG_270M has %d layer_types"
                                 % (layers, len(bm.config["layer_types"])))
            over["layer_types"] = list(bm.config["layer_types"][:layers])
        return gemma3_config(bm.nb, **over)
    from tools.reference.decoder import llama3_config, qwen3_config

    return (qwen3_config if bm.family == "qwen3" else llama3_config)(b, **over)


def matmul_rates(threads):
    """GFLOP/s of one (256, 1024) x Linear(1024, 1024) in float32 and under
    bf16 autocast on this CPU (best of 3), for estimating step times."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, lin = torch.randn(256, 1024), torch.nn.Linear(1024, 1024, bias=False)
    out = {}
    for name, ac in (("fp32", False), ("bf16_autocast", True)):
        best = math.inf
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=ac):
            for _ in range(3):
                t0 = time.perf_counter()
                lin(x)
                best = min(best, time.perf_counter() - t0)
        out[name] = 2 * 256 * 1024 * 1024 / best / 1e9
    return out


def torch_info(w):
    """What the PyTorch side will run: versions, the book's folder and commit,
    its config, without building the model; and its matmul rates here."""
    import torch

    sys.path.insert(0, REPO)
    from tools.reference.decoder import book_code, book_location, config_json

    book_dir, why = book_location()
    if book_dir is None:
        print(json.dumps({"error": why}))
        return
    with book_code(book_dir) as b:
        family, mod, name, cls = MODELS[w["model"]]
        try:
            bm = BookModel(b, w["model"])
            cfg = book_config(b, bm, w["tokens"], w["layers"])
        except (RuntimeError, ValueError) as e:
            print(json.dumps({"error": str(e)}))
            return
        book = dict(bm.config)
        commit = os.environ.get("LLMS_FROM_SCRATCH_COMMIT")
        if not commit:
            p = subprocess.run(["git", "-C", bm.root or book_dir, "rev-parse", "HEAD"], capture_output=True,
                               text=True)
            commit = p.stdout.strip() if p.returncode == 0 else None
        notebook = None
        if bm.nb is not None:
            notebook = {"root": bm.root, "path": bm.nb.path, "sha256": bm.nb.sha256, "cells": bm.nb.cells}
        print(json.dumps({
            "torch_version": torch.__version__, "book_dir": book_dir, "book_commit": commit,
            "stubbed": b.stubbed, "rmsnorm_stand_in": b.rmsnorm_stand_in and bm.nb is None,
            "class": "%s.%s" % (mod, cls) if bm.nb is None else "%s:%s" % (mod, cls), "notebook": notebook,
            "config_name": name, "config": config_json(cfg), "book_context_length": book["context_length"],
            "book_dtype": str(book["dtype"]), "matmul_gflops": matmul_rates(w["threads"]),
        }))


def torch_worker(w):
    """One fine-tuning step of the book's model, as its train_model_simple runs it."""
    import importlib

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(w["threads"])
    sys.path.insert(0, REPO)
    from tools.reference.decoder import book_code, book_location

    book_dir, why = book_location()
    if book_dir is None:
        sys.exit("compare_decoder: " + why)
    autocast = w["column"] == "torch-bf16"
    with book_code(book_dir) as b:
        bm = BookModel(b, w["model"])
        cfg = book_config(b, bm, w["tokens"], w["layers"])
        t_build = time.perf_counter()
        torch.manual_seed(SEED)
        model = bm.cls(cfg)
        if w["lora"]:
            appendix_e = importlib.import_module("llms_from_scratch.appendix_e")
            if not os.path.abspath(appendix_e.__file__).startswith(book_dir):
                raise RuntimeError("appendix_e imported from %s, not from %s" % (appendix_e.__file__, book_dir))
            for p in model.parameters():
                p.requires_grad = False
            appendix_e.replace_linear_with_lora(model, rank=w["lora"][0], alpha=w["lora"][1])
        build_s = time.perf_counter() - t_build
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        trainable = sum(p.numel() for p in params)
        total = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)
        x = torch.randint(0, cfg["vocab_size"], (w["batch"], w["tokens"]))
        y = torch.randint(0, cfg["vocab_size"], (w["batch"], w["tokens"]))
        fwd, bwd, upd, step, losses = [], [], [], [], []
        for i in range(w["steps"] + 1):  # i = 0: the warm-up step
            t0 = time.perf_counter()
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(x)
                loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            losses.append(float(loss))
            del logits, loss
            if i > 0:
                fwd.append((t1 - t0) * 1e3)
                bwd.append((t2 - t1) * 1e3)
                upd.append((t3 - t2) * 1e3)
                step.append((t3 - t0) * 1e3)
    print(json.dumps({
        "fwd_ms": statistics.median(fwd), "bwd_ms": statistics.median(bwd), "opt_ms": statistics.median(upd),
        "step_ms": statistics.median(step), "steps_ms": step,
        "tokens_per_s": w["batch"] * w["tokens"] / (statistics.median(step) * 1e-3),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "trainable_parameters": trainable, "parameters": total, "n_layers": cfg["n_layers"],
        "context_length": cfg["context_length"], "build_s": build_s, "losses": losses,
        "threads": torch.get_num_threads(),
    }), flush=True)


# ---- the driver ------------------------------------------------------------------------------

class Interrupted(Exception):
    pass


def _interrupt(*_):
    raise Interrupted()


class Failed(Exception):
    def __init__(self, kind, detail):
        super().__init__(kind)
        self.kind, self.detail = kind, detail


def last_json(out):
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def run_process(cmd, env, timeout):
    """stdout of cmd; raises Failed on a non-zero status, a timeout or no JSON."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout or None)
    except subprocess.TimeoutExpired:
        raise Failed("timeout", "after %s s: %s" % (timeout, " ".join(cmd)))
    except OSError as e:
        raise Failed("fail", "cannot run %s: %s" % (" ".join(cmd), e))
    if p.returncode != 0:
        raise Failed("fail", "exit status %d: %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    r = last_json(p.stdout)
    if r is None:
        raise Failed("fail", "no JSON line from %s\nstdout: %s\nstderr: %s"
                     % (" ".join(cmd), p.stdout[-500:], p.stderr[-1000:]))
    return r, p.stdout


def worker_spec(a, mode, lora, column):
    return {"model": a.model, "mode": mode, "lora": lora, "column": column, "batch": a.batch,
            "tokens": a.tokens, "layers": a.layers, "steps": a.steps, "threads": a.threads}


def run_torch(a, mode, lora, column):
    w = worker_spec(a, mode, lora, column)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(w)]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    if column == "torch-bf16":  # oneDNN's verbose lines name the kernels autocast's matmuls ran on
        env["DNNL_VERBOSE"] = "1"
    r, out = run_process(cmd, env, a.timeout)
    kernels = sorted({f[4] for f in (l.split(",") for l in out.splitlines())
                      if len(f) > 5 and f[0].endswith("_verbose") and f[1] == "exec"
                      and f[3] in ("matmul", "inner_product")})
    r["kernels"] = ", ".join(kernels) if kernels else None
    return r


def tapegrad_cmd(a, lora, precision):
    cmd = [a.tapegrad, "bench", "--model", "gpt", "--config", a.model, "--batch", str(a.batch), "--tokens",
           str(a.tokens), "--steps", str(a.steps), "--threads", str(a.threads), "--precision", precision, "--json"]
    if lora:
        cmd += ["--lora-rank", str(lora[0]), "--lora-alpha", str(lora[1])]
    if a.layers:
        cmd += ["--layers", str(a.layers)]
    return cmd


def run_tapegrad(a, mode, lora, precision):
    cmd = tapegrad_cmd(a, lora, precision)
    r, _ = run_process(cmd, dict(os.environ, OMP_NUM_THREADS=str(a.threads)), a.timeout)
    missing = [k for k in ("step_ms", "fwd_ms", "bwd_ms", "opt_ms", "peak_rss_mib", "trainable_parameters",
                           "precision") if k not in r]
    if missing:
        raise Failed("fail", "tapegrad's JSON lacks %s: %s" % (", ".join(missing), json.dumps(r)))
    if r["precision"] != precision:
        raise Failed("fail", "asked tapegrad for --precision %s, it reports %r" % (precision, r["precision"]))
    return r


def linear_weights(c):
    """Weights of every Linear of the book's config c (out_head included)."""
    d, H, L, V = c["emb_dim"], c["n_heads"], c["n_layers"], c["vocab_size"]
    hd = c.get("head_dim") or d // H
    G = c["n_kv_groups"]
    return L * (2 * d * H * hd + 2 * d * G * hd + 3 * d * c["hidden_dim"]) + d * V


def cpu_flags():
    """lscpu | grep -o 'avx512_bf16\\|amx_bf16\\|avx2' | sort -u, and the model name."""
    name, text = "?", ""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.*)$", text, re.M)
        if m:
            name = m.group(1).strip()
    except OSError:
        pass
    if not text:
        try:
            with open("/proc/cpuinfo") as f:
                text = f.read()
        except OSError:
            pass
    return name, sorted(set(re.findall(r"avx512_bf16|amx_bf16|avx2", text)))


def med(vals):
    return statistics.median(vals) if vals else None


def summarize(results):
    """{mode: {column: medians over the runs that succeeded, or the failure}}"""
    out = {}
    for (mode, col), runs in results.items():
        ok = [r for r in runs if "error" not in r]
        cell = {"runs": len(runs), "ok": len(ok)}
        if ok:
            for k in ("step_ms", "fwd_ms", "bwd_ms", "opt_ms", "peak_rss_mib", "tokens_per_s"):
                cell[k] = med([r[k] for r in ok])
            cell["step_ms_runs"] = [r["step_ms"] for r in ok]
            cell["peak_rss_mib_max"] = max(r["peak_rss_mib"] for r in ok)
            cell["trainable_parameters"] = sorted({r["trainable_parameters"] for r in ok})
            for k in ("kernels", "bf16_kernel", "bf16", "blas"):
                if ok[0].get(k):
                    cell[k] = ok[0][k]
        else:
            cell["error"] = runs[0]["error"] if runs else "not run"
        out.setdefault(mode, {})[col] = cell
    return out


def fmt_ms(cell, key="step_ms"):
    if cell is None:
        return "-"
    if key not in cell:
        return cell.get("error", "-")
    part = " (%d/%d ok)" % (cell["ok"], cell["runs"]) if key == "step_ms" and cell["ok"] < cell["runs"] else ""
    return "%.0f%s" % (cell[key], part)


def table(rows, header, markdown, widths):
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    fmt = " ".join("%-*s" if i == 0 else "%*s" for i in range(len(header)))
    for r in [header] + rows:
        print(fmt % tuple(x for pair in zip(widths, r) for x in pair))


def ratio(num, den):
    """num's step time over den's: how many times faster den is."""
    if not num or not den or "step_ms" not in num or "step_ms" not in den:
        return None
    return num["step_ms"] / den["step_ms"]


def fmt_ratio(x):
    return "-" if x is None else "%.2fx" % x


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tapegrad", default=os.path.join(REPO, "build", "tools", "tapegrad"))
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen3-0.6b")
    ap.add_argument("--only", choices=[m for m, _ in MODES], help="one set-up only (default: both)")
    ap.add_argument("--precisions", default=",".join(COLS),
                    help="comma list of columns among %s (default: all)" % ", ".join(COLS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per process, after one warm-up step")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--layers", type=int, help="n_layers on both sides (default: the model's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=0, help="seconds per process (default: none)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout instead of the tables")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--info-worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(json.loads(a.worker))
        return
    if a.info_worker:
        torch_info(json.loads(a.info_worker))
        return
    # SIGTERM (kill PID, timeout) or Ctrl-C ends the running worker too
    # (subprocess.run kills its child when an exception interrupts it) and
    # prints the tables of what was measured so far
    signal.signal(signal.SIGTERM, _interrupt)
    for k in ("runs", "steps", "batch", "tokens", "threads"):
        if getattr(a, k) < 1:
            ap.error("--%s must be at least 1" % k)
    if a.layers is not None and a.layers < 1:
        ap.error("--layers must be at least 1")
    if a.layers is not None and MODELS[a.model][0] == "gemma3" and a.layers > GEMMA3_LAYERS:
        ap.error("--layers: at most %d for %s (the book's layer_types)" % (GEMMA3_LAYERS, a.model))
    cols = [c.strip() for c in a.precisions.split(",") if c.strip()]
    bad = [c for c in cols if c not in COLS]
    if bad or not cols:
        ap.error("--precisions: unknown %s (choose among %s)" % (", ".join(bad) or "(empty)", ", ".join(COLS)))
    cols = [c for c in COLS if c in cols]
    modes = [(m, l) for m, l in MODES if not a.only or a.only == m]
    command = " ".join([os.path.relpath(sys.argv[0], REPO) if sys.argv[0] else "bench/compare_decoder.py"]
                       + sys.argv[1:])

    notes = []
    info = None
    torch_cols = [c for c in cols if c in TORCH_COLS]
    if torch_cols:
        book_dir, why = book_dir_or_none(a.model)
        if book_dir is None:
            notes.append("PyTorch side skipped: %s" % why + (
                "" if "LLMS_FROM_SCRATCH_ROOT" in why else " (set it to the folder that contains llms_from_scratch/, "
                "e.g. LLMS_FROM_SCRATCH_DIR=path/to/LLMs-from-scratch/pkg)"))
            log("compare_decoder: " + notes[-1])
            torch_cols = []
        else:
            w = worker_spec(a, None, None, None)
            try:
                info, _ = run_process([sys.executable, os.path.abspath(__file__), "--info-worker", json.dumps(w)],
                                      None, 600)
            except Failed as e:
                sys.exit("compare_decoder: the book's code does not import: %s" % e.detail)
            if "error" in info:
                sys.exit("compare_decoder: " + info["error"])
            # a rough floor for PyTorch's step: the Linear FLOPs (6 per weight and
            # token with every weight trained, ~4 under LoRA: no weight gradients)
            # at the rate of one 256x1024x1024 matmul
            rates = info["matmul_gflops"]
            lw = linear_weights(info["config"]) * a.batch * a.tokens
            est = {}
            for col, key in (("torch-fp32", "fp32"), ("torch-bf16", "bf16_autocast")):
                if col in torch_cols:
                    for mode, lora in modes:
                        est[mode, col] = (4 if lora else 6) * lw / (rates[key] * 1e9)
            info["estimated_step_s"] = {"%s %s" % k: v for k, v in est.items()}
            log("compare_decoder: PyTorch matmul rate here: float32 %.1f GFLOP/s, bf16 autocast %.2f GFLOP/s; "
                "a floor for PyTorch's step (its Linear FLOPs at that rate): %s"
                % (rates["fp32"], rates["bf16_autocast"],
                   ", ".join("%s %s %.0f s" % (m, c, v) for (m, c), v in est.items())))
            slow = [(k, v) for k, v in est.items() if v * (a.steps + 1) > 1800]
            if slow:
                log("compare_decoder: warning: %s would take over 30 minutes a process (%d steps with the "
                    "warm-up); leave such columns out with --precisions, or pass --timeout"
                    % (", ".join("%s %s (~%.0f min a step)" % (m, c, v / 60) for (m, c), v in slow), a.steps + 1))
    tg_cols = [c for c in cols if c in TG_COLS]
    if tg_cols and not os.access(a.tapegrad, os.X_OK):
        sys.exit("compare_decoder: no tapegrad executable at %s (build it or pass --tapegrad)" % a.tapegrad)
    cols = [c for c in cols if c in torch_cols or c in tg_cols]
    if not cols:
        sys.exit("compare_decoder: nothing to run")

    cpu_name, flags = cpu_flags()
    # tapegrad and PyTorch alternate: tg, torch, tg, torch, tg
    order = []
    tq, pq = list(tg_cols[::-1]), list(torch_cols)
    while tq or pq:
        if tq:
            order.append(tq.pop(0))
        if pq:
            order.append(pq.pop(0))
    results = {(m, c): [] for m, _ in modes for c in cols}
    t_start = time.time()
    n_total, n_done = a.runs * len(modes) * len(order), 0
    interrupted = None
    try:
        for run in range(a.runs):
            for mode, lora in modes:
                for col in order:
                    t0 = time.time()
                    try:
                        r = run_torch(a, mode, lora, col) if col in TORCH_COLS else run_tapegrad(a, mode, lora, col)
                    except Failed as e:
                        r = {"error": e.kind, "detail": e.detail}
                        log("compare_decoder: run %d %s %s: %s: %s" % (run + 1, mode, col, e.kind, e.detail))
                    results[mode, col].append(r)
                    n_done += 1
                    el = time.time() - t_start
                    log("  run %d/%d %-4s %-10s %s (process %.0f s; elapsed %.0f s, about %.0f s to go)"
                        % (run + 1, a.runs, mode, col,
                           "%.0f ms/step, %.0f MiB" % (r["step_ms"], r["peak_rss_mib"]) if "step_ms" in r
                           else r["error"], time.time() - t0, el, el / n_done * (n_total - n_done)))
    except (Interrupted, KeyboardInterrupt):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        interrupted = "interrupted during run %d %s %s, after %d of %d processes: the tables show what finished" % (
            run + 1, mode, col, n_done, n_total)
        log("compare_decoder: " + interrupted)
        notes.append(interrupted)
    total_s = time.time() - t_start
    summary = summarize(results)

    # trainable counts of the two sides
    counts = {}
    for mode, _ in modes:
        tc = {c: summary[mode][c].get("trainable_parameters") for c in cols if summary[mode][c].get("ok")}
        seen = {tuple(v) for v in tc.values()}
        counts[mode] = {c: v for c, v in tc.items()}
        if len(seen) > 1:
            notes.append("%s: trainable parameters differ: %s" % (
                mode, "; ".join("%s %s" % (c, ", ".join("{:,}".format(x) for x in v)) for c, v in tc.items())))

    ratios = {}
    for mode, _ in modes:
        s = summary[mode]
        ratios[mode] = {
            "bf16_vs_torch_fp32": ratio(s.get("torch-fp32"), s.get("bf16")),
            "bf16_vs_torch_bf16": ratio(s.get("torch-bf16"), s.get("bf16")),
            "fast_vs_torch_fp32": ratio(s.get("torch-fp32"), s.get("fast")),
            "exact_vs_torch_fp32": ratio(s.get("torch-fp32"), s.get("exact")),
        }
    failed = interrupted or any("error" in r for runs in results.values() for r in runs)

    model_desc = "%s (random weights, seed %d)" % (a.model, SEED)
    if info:
        c = info["config"]
        model_desc += ", the book's %s from %s" % (info["config_name"], info["class"])
        notes.append("PyTorch %s side: context_length %d instead of the book's %d (the book's model computes "
                     "RoPE's cos/sin for the whole context at construction; the step reads the first %d rows)"
                     % (info["torch_version"], c["context_length"], info["book_context_length"], a.tokens))
        notes.append("book code %s (commit %s); stubbed: %s; nn.RMSNorm stand-in: %s; dtype float32 "
                     "(the book's preset: %s)" % (info["book_dir"], info["book_commit"] or "unknown",
                                                   ", ".join(info["stubbed"]) or "none",
                                                   "yes" if info["rmsnorm_stand_in"] else "no", info["book_dtype"]))
        nb = info.get("notebook")
        if nb:
            notes.append("the model from the book's notebook %s under %s (sha256 %s), code cells %s executed by "
                         "tools/reference/gemma3.py's load_notebook(); appendix E's LoRA from the package"
                         % (nb["path"], nb["root"], nb["sha256"][:16], nb["cells"]))
        r = info["matmul_gflops"]
        notes.append("PyTorch matmul (256x1024x1024) here: float32 %.1f GFLOP/s, under bf16 autocast %.2f GFLOP/s"
                     % (r["fp32"], r["bf16_autocast"]))
    layers_desc = ("n_layers %d (--layers)" % a.layers) if a.layers else "all layers"

    if a.json:
        print(json.dumps({
            "command": command, "cpu": cpu_name, "cpu_flags": flags, "model": a.model, "batch": a.batch,
            "tokens": a.tokens, "layers": a.layers, "threads": a.threads, "runs": a.runs, "steps": a.steps,
            "columns": cols, "order": order, "torch": info, "summary": summary, "ratios": ratios,
            "trainable_parameters": counts, "results": {"%s %s" % k: v for k, v in results.items()},
            "notes": notes, "total_s": total_s,
        }, indent=1))
        sys.exit(1 if failed else 0)

    print("command: %s" % command)
    print("CPU: %s; lscpu flags (avx512_bf16, amx_bf16, avx2): %s"
          % (cpu_name, " ".join(flags) or "none of them"))
    if "avx512_bf16" not in flags and "amx_bf16" not in flags:
        print("  no bf16 hardware: tapegrad's bf16 products are emulated on sgemm (see the kernels below)")
    print("%s, %s, fine-tuning step B%d T%d (forward, cross-entropy over all positions, backward, AdamW lr %g "
          "wd %g); %d threads each side; median over %d runs of each process's median of %d steps after one "
          "warm-up step" % (model_desc, layers_desc, a.batch, a.tokens, LR, WEIGHT_DECAY, a.threads, a.runs,
                            a.steps))
    print()

    hdr = ["step ms"] + [COL_TITLE[c] for c in cols]
    show_r = "bf16" in cols and any(c in cols for c in TORCH_COLS)
    if show_r:
        hdr += [x for x, c in (("bf16/fp32", "torch-fp32"), ("bf16/bf16ac", "torch-bf16")) if c in cols]
    rows = []
    for mode, _ in modes:
        cells = [mode if mode == "full" else "lora r16"] + [fmt_ms(summary[mode][c]) for c in cols]
        if show_r:
            if "torch-fp32" in cols:
                cells.append(fmt_ratio(ratios[mode]["bf16_vs_torch_fp32"]))
            if "torch-bf16" in cols:
                cells.append(fmt_ratio(ratios[mode]["bf16_vs_torch_bf16"]))
        rows.append(cells)
    table(rows, hdr, a.markdown, [10] + [13] * (len(hdr) - 1))
    if show_r:
        print("(ratios: PyTorch's step time over tapegrad bf16's; above 1: tapegrad bf16 is faster)")

    print()
    hdr = ["peak MiB"] + [COL_TITLE[c] for c in cols]
    rows = [[mode if mode == "full" else "lora r16"] + [fmt_ms(summary[mode][c], "peak_rss_mib") for c in cols]
            for mode, _ in modes]
    table(rows, hdr, a.markdown, [10] + [13] * (len(hdr) - 1))

    print()
    print("Step parts, median ms, forward / backward / AdamW (forward includes zero_grad and the loss):")
    hdr = ["set-up"] + [COL_TITLE[c] for c in cols]
    rows = []
    for mode, _ in modes:
        cells = [mode if mode == "full" else "lora r16"]
        for c in cols:
            s = summary[mode][c]
            cells.append(" / ".join(fmt_ms(s, k) for k in ("fwd_ms", "bwd_ms", "opt_ms")) if "step_ms" in s
                         else s.get("error", "-"))
        rows.append(cells)
    table(rows, hdr, a.markdown, [10] + [20] * (len(hdr) - 1))

    print()
    for mode, _ in modes:
        tc = counts[mode]
        if tc:
            vals = {tuple(v) for v in tc.values()}
            print("trainable parameters, %s: %s" % (mode, ", ".join("{:,}".format(x) for v in vals for x in v)
                                                    if len(vals) == 1 else "DIFFER (see the notes)"))
    for mode, _ in modes:
        s = summary[mode]
        if "bf16" in s and s["bf16"].get("bf16_kernel"):
            print("bf16, %s: tapegrad on %s" % (mode, s["bf16"]["bf16_kernel"]))
        if "torch-bf16" in s and s["torch-bf16"].get("ok"):
            print("bf16, %s: PyTorch autocast's matmuls on %s" % (mode, s["torch-bf16"].get("kernels")
                                                                    or "no oneDNN matmul (PyTorch's own bf16 gemm)"))
    goal = []
    for mode, _ in modes:
        r = ratios[mode]
        parts = []
        if r["bf16_vs_torch_fp32"] is not None:
            parts.append("tapegrad bf16 %.2fx PyTorch float32 (goal 2x: %s)"
                         % (r["bf16_vs_torch_fp32"], "met" if r["bf16_vs_torch_fp32"] >= 2 else "not met"))
        if r["bf16_vs_torch_bf16"] is not None:
            parts.append("%.2fx PyTorch bf16 autocast (goal 1.3x: %s)"
                         % (r["bf16_vs_torch_bf16"], "met" if r["bf16_vs_torch_bf16"] >= 1.3 else "not met"))
        if r["fast_vs_torch_fp32"] is not None:
            parts.append("tapegrad fast %.2fx PyTorch float32" % r["fast_vs_torch_fp32"])
        if r["exact_vs_torch_fp32"] is not None:
            parts.append("tapegrad exact %.2fx" % r["exact_vs_torch_fp32"])
        if parts:
            goal.append("  %s: %s" % (mode, "; ".join(parts)))
    if goal:
        print("speed-ups (PyTorch's step time over tapegrad's):")
        print("\n".join(goal))
    for n in notes:
        print("note: " + n)
    print("total %.0f s" % total_s)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    try:
        main()
    except (Interrupted, KeyboardInterrupt):
        sys.exit("compare_decoder: interrupted")
