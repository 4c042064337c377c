#!/usr/bin/python3
"""Compare the book's chapter-6 classifier fine-tuning step of tapegrad and
PyTorch on GPT-2 124M on this CPU.

Usage: /usr/bin/python3 bench/compare_finetune.py [--tapegrad build/tools/tapegrad]
[--runs 3] [--steps 3] [--threads 2] [--only SUBSTR] [--markdown] [--torch-only].
The step is the book's spam classifier's (GPTModel with context_length 1024,
qkv_bias, no dropout, out_head replaced by Linear(768, 2); batch 8, 120 random
ids, random labels in {0, 1}; zero_grad, cross-entropy of the last token's
logits, backward, AdamW lr 5e-5 weight decay 0.1), with all parameters frozen
and then either the last transformer block, the final norm and the head
trainable ("last block", chapter 6) or every Linear wrapped in LinearWithLoRA
rank 16 alpha 16 ("LoRA r16", appendix E). Each run is a fresh process (one
warm-up step, then --steps timed steps, their median; peak RSS of that
process), tapegrad (`tapegrad bench --model classify ... --json`) and PyTorch
alternating, and the table gives the median over --runs runs. tapegrad runs
with --threads under each numerics policy (exact, fast, bf16); PyTorch
(Debian's python3-torch 1.13) runs in float32 for the exact and fast rows and
under torch.autocast("cpu", dtype=torch.bfloat16) for the bf16 rows, whose
table also gives tapegrad against PyTorch's float32 step (the exact and fast
rows share one PyTorch float32 measurement); PyTorch gets the
faster of 1 and --threads threads (a quick probe per configuration). The
trainable parameter counts of both sides must agree. --torch-only runs the
PyTorch side alone (its medians and trainable counts). On 2 cores (AMD EPYC
Zen 4, AVX512_BF16) the PyTorch side of a default run takes about 3 minutes,
most of it the LoRA float32 rows (3.6 s a step).
"""
import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import time

MODES = [("last block", None), ("LoRA r16", (16, 16))]  # name, (rank, alpha) or None
PRECISIONS = ["exact", "fast", "bf16"]
BATCH, TOKENS, CONTEXT = 8, 120, 1024
# the counts the book prints for these two set-ups
BOOK_TRAINABLE = {"last block": 7090946, "LoRA r16": 2666528}


def configs():
    """(row name, mode, lora, precision) in table order."""
    return [("classify %s %s" % (mode, prec), mode, lora, prec) for mode, lora in MODES for prec in PRECISIONS]


# ---- the PyTorch side (runs in a child process) ---------------------------------------

def lora_classes():
    """Appendix E's replace_linear_with_lora (tools/reference/finetune.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from reference.finetune import replace_linear_with_lora
    return replace_linear_with_lora


def build_model(lora):
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from reference.gpt_book import GPT_CONFIG_124M, GPTModel

    cfg = dict(GPT_CONFIG_124M, context_length=CONTEXT, drop_rate=0.0, qkv_bias=True)
    torch.manual_seed(123)
    model = GPTModel(cfg)
    torch.manual_seed(123)
    model.out_head = torch.nn.Linear(cfg["emb_dim"], 2)
    for p in model.parameters():
        p.requires_grad = False
    if lora is None:
        for m in (model.trf_blocks[-1], model.final_norm, model.out_head):
            for p in m.parameters():
                p.requires_grad = True
    else:
        lora_classes()(model, rank=lora[0], alpha=lora[1])
    return model, cfg


def torch_worker(cfg, steps, threads):
    """One fine-tuning step as the book's train_classifier_simple runs it."""
    import torch

    torch.set_num_threads(threads)
    _, _, lora, prec = cfg
    autocast = prec == "bf16"
    model, conf = build_model(lora)
    model.train()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.1)
    x = torch.randint(0, conf["vocab_size"], (BATCH, TOKENS))
    y = torch.randint(0, 2, (BATCH,))
    fwd, bwd, upd, step = [], [], [], []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(x)[:, -1, :], y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if i > 0:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            upd.append((t3 - t2) * 1e3)
            step.append((t3 - t0) * 1e3)
    print(json.dumps({
        "fwd_ms": statistics.median(fwd),
        "bwd_ms": statistics.median(bwd),
        "opt_ms": statistics.median(upd),
        "step_ms": statistics.median(step),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "trainable_parameters": trainable,
        "loss": float(loss),
    }), flush=True)


# ---- the driver ------------------------------------------------------------------------------

def prog():
    """The running script's name for its messages (compare_dpo.py uses these helpers too)."""
    return os.path.splitext(os.path.basename(sys.argv[0]))[0]


def onednn_kernels(out):
    """The kernels oneDNN's verbose lines (DNNL_VERBOSE=1) say its matmuls ran on, comma-separated, or None."""
    kernels = sorted({f[4] for f in (l.split(",") for l in out.splitlines())
                      if len(f) > 5 and f[0].endswith("_verbose") and f[1] == "exec"
                      and f[3] in ("matmul", "inner_product")})
    return ", ".join(kernels) if kernels else None


def last_json(out, what, cmd):
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    sys.exit("%s: %s printed no JSON line\n  command: %s\n  stdout (last 500 chars): %s"
             % (prog(), what, " ".join(cmd), out[-500:]))


def run_checked(cmd, what, env=None):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    except OSError as e:
        sys.exit("%s: cannot run %s: %s\n  command: %s" % (prog(), what, e, " ".join(cmd)))
    if p.returncode != 0:
        sys.exit("%s: %s failed (exit status %d)\n  command: %s\n  stderr (last 2000 chars):\n%s"
                 % (prog(), what, p.returncode, " ".join(cmd), p.stderr[-2000:]))
    return p.stdout


def run_torch(cfg, steps, threads):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg), "--steps", str(steps),
           "--threads", str(threads)]
    # under autocast, oneDNN's verbose lines name the kernels its matmuls ran on
    env = dict(os.environ, DNNL_VERBOSE="1") if cfg[3] == "bf16" else None
    out = run_checked(cmd, "the PyTorch worker", env)
    r = last_json(out, "the PyTorch worker", cmd)
    kernels = onednn_kernels(out)
    if kernels:
        r["kernels"] = kernels
    return r


TG_KEYS = ("step_ms", "fwd_ms", "bwd_ms", "opt_ms", "peak_rss_mib", "trainable_parameters", "precision")


def run_tapegrad(exe, cfg, steps, threads):
    _, _, lora, prec = cfg
    cmd = [exe, "bench", "--model", "classify", "--batch", str(BATCH), "--tokens", str(TOKENS), "--context",
           str(CONTEXT), "--qkv-bias", "--dropout", "0", "--steps", str(steps), "--threads", str(threads),
           "--precision", prec, "--json"]
    if lora is not None:
        cmd += ["--lora-rank", str(lora[0]), "--lora-alpha", str(lora[1])]
    out = run_checked(cmd, "tapegrad", None)
    r = last_json(out, "tapegrad", cmd)
    missing = [k for k in TG_KEYS + (("bf16_kernel",) if prec == "bf16" else ()) if k not in r]
    if missing:
        sys.exit("compare_finetune: tapegrad's JSON lacks %s\n  command: %s\n  JSON: %s"
                 % (", ".join(missing), " ".join(cmd), json.dumps(r)))
    if r["precision"] != prec:
        sys.exit("compare_finetune: asked tapegrad for --precision %s, it reports %r" % (prec, r["precision"]))
    return r


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def medians(rows):
    return {k: med(rows, k) for k in rows[0] if isinstance(rows[0][k], (int, float)) and not isinstance(rows[0][k], bool)}


class TorchProbe:
    """PyTorch's thread count per (mode, dtype): the faster of 1 and `threads`
    over one step after the warm-up."""

    def __init__(self, threads):
        self.threads = threads
        self.best = {}

    def __call__(self, cfg):
        key = (cfg[1], cfg[3] == "bf16")
        if key not in self.best:
            probe = {t: run_torch(cfg, 1, t)["step_ms"] for t in sorted({1, self.threads})}
            self.best[key] = min(probe, key=probe.get)
        return self.best[key]


def compare_group(exe, cfgs, runs, steps, threads, probe, with_tapegrad=True):
    """Rows that share one PyTorch configuration (exact and fast both compare
    against PyTorch's float32 step): each run times every row's tapegrad step,
    then PyTorch's once, so all of them see the same machine noise."""
    tg = {c[0]: [] for c in cfgs}
    th = []
    for _ in range(runs):
        if with_tapegrad:
            for c in cfgs:
                tg[c[0]].append(run_tapegrad(exe, c, steps, threads))
        torch_threads = probe(cfgs[0])  # after tapegrad's first run: its failures show up first
        th.append(run_torch(cfgs[0], steps, torch_threads))
    counts = {r["trainable_parameters"] for r in th}
    assert len(counts) == 1, "PyTorch's trainable count changed between runs: %s" % counts
    trainable = counts.pop()
    rows = []
    for c in cfgs:
        row = {"name": c[0], "mode": c[1], "precision": c[3], "torch": medians(th),
               "torch_kernels": th[0].get("kernels"), "torch_threads": torch_threads, "trainable": trainable}
        if with_tapegrad:
            row["tapegrad"] = medians(tg[c[0]])
            row["tapegrad_kernels"] = tg[c[0]][0].get("bf16_kernel")
            tcounts = {r["trainable_parameters"] for r in tg[c[0]]}
            assert tcounts == {trainable}, \
                "%s: trainable parameters: tapegrad %s, PyTorch %d" % (c[0], sorted(tcounts), trainable)
            row["speedup"] = row["torch"]["step_ms"] / row["tapegrad"]["step_ms"]
        rows.append(row)
    return rows


def cpu_info():
    name, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        m = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
        if m:
            name = m.group(1).strip()
        flags = set(re.findall(r"avx512_bf16|amx_bf16|avx2", text))
    except OSError:
        pass
    return name, sorted(flags)


def table(rows, header, markdown, fmt):
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        print(fmt % tuple(header))
        for r in rows:
            print(fmt % tuple(r))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tapegrad", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "tapegrad"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", help="run only configurations whose name contains this")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--torch-only", action="store_true", help="the PyTorch side alone: its medians and trainable counts")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(json.loads(a.worker), a.steps, a.threads)
        return
    if a.runs < 1 or a.steps < 1 or a.threads < 1:
        ap.error("--runs, --steps and --threads must be at least 1")
    with_tg = not a.torch_only
    if with_tg and not os.access(a.tapegrad, os.X_OK):
        sys.exit("compare_finetune: no tapegrad executable at %s (build it, pass --tapegrad, or use --torch-only)"
                 % a.tapegrad)

    name, flags = cpu_info()
    print("CPU: %s; flags: %s" % (name, " ".join(flags) or "none of avx2 avx512_bf16 amx_bf16"))
    print("GPT-2 124M classifier fine-tuning step, batch %d, %d tokens, context %d; tapegrad %d threads; "
          "median over %d runs of each run's median of %d steps"
          % (BATCH, TOKENS, CONTEXT, a.threads, a.runs, a.steps))
    print(flush=True)

    cfgs = [c for c in configs() if not a.only or a.only in c[0]]
    if not cfgs:
        sys.exit("compare_finetune: no configuration name contains %r" % a.only)
    probe = TorchProbe(a.threads)
    t_start = time.time()
    groups = {}
    for c in cfgs:
        groups.setdefault((c[1], c[3] == "bf16"), []).append(list(c))
    results = {}
    for group in groups.values():
        for r in compare_group(a.tapegrad, group, a.runs, a.steps, a.threads, probe, with_tg):
            results[r["name"]] = r
        print("  done %s (%.0f s)" % (", ".join(c[0] for c in group), time.time() - t_start),
              file=sys.stderr, flush=True)

    # the float32 PyTorch step for the bf16 rows' second ratio: from the exact
    # and fast rows of the same mode, or measured here when --only left them out
    f32 = {}
    for mode, lora in MODES:
        if not any(r["mode"] == mode and r["precision"] == "bf16" for r in results.values()):
            continue
        same = [r["torch"] for r in results.values() if r["mode"] == mode and r["precision"] != "bf16"]
        if same:
            f32[mode] = same[0]["step_ms"]
        else:
            cfg = ["classify %s float32" % mode, mode, lora, "exact"]
            f32[mode] = compare_group(a.tapegrad, [cfg], a.runs, a.steps, a.threads, probe, False)[0]["torch"]["step_ms"]

    rows = []
    for r in results.values():
        p = r["torch"]
        bf = r["precision"] == "bf16"
        cells = [r["name"]]
        if with_tg:
            cells.append("%.0f" % r["tapegrad"]["step_ms"])
        cells.append("%.0f%s" % (p["step_ms"], " (bf16)" if bf else ""))
        if with_tg:
            cells.append("%.2fx" % r["speedup"])
        cells.append("%.0f" % f32[r["mode"]] if bf else "-")
        if with_tg:
            cells.append("%.2fx" % (f32[r["mode"]] / r["tapegrad"]["step_ms"]) if bf else "-")
            cells.append("%.0f" % r["tapegrad"]["peak_rss_mib"])
        cells += ["%.0f" % p["peak_rss_mib"], "{:,}".format(r["trainable"]), "%d" % r["torch_threads"]]
        rows.append(cells)
    if with_tg:
        hdr = ["config", "tg ms", "torch ms", "speedup", "torch f32 ms", "vs f32", "tg MiB", "torch MiB",
               "trainable", "torch thr"]
        fmt = "%-28s %7s %14s %8s %12s %7s %7s %9s %10s %9s"
    else:
        hdr = ["config", "torch ms", "torch f32 ms", "torch MiB", "trainable", "torch thr"]
        fmt = "%-28s %14s %12s %9s %10s %9s"
    table(rows, hdr, a.markdown, fmt)

    print()
    print("Step parts, median ms (forward includes zero_grad and the loss):")
    rows = []
    for r in results.values():
        cells = [r["name"]]
        for side in (("tapegrad", "torch") if with_tg else ("torch",)):
            cells += ["%.0f" % r[side][k] for k in ("fwd_ms", "bwd_ms", "opt_ms")]
        rows.append(cells)
    if with_tg:
        hdr = ["config", "tg fwd", "tg bwd", "tg opt", "torch fwd", "torch bwd", "torch opt"]
        fmt = "%-28s %7s %7s %7s %9s %9s %9s"
    else:
        hdr = ["config", "torch fwd", "torch bwd", "torch opt"]
        fmt = "%-28s %9s %9s %9s"
    table(rows, hdr, a.markdown, fmt)

    print()
    for mode, _ in MODES:
        counts = {r["trainable"] for r in results.values() if r["mode"] == mode}
        for c in counts:
            book = BOOK_TRAINABLE[mode]
            print("trainable parameters, %s: %s%s" % (mode, "{:,}".format(c),
                                                      "" if c == book else " (the book prints {:,})".format(book)))
    for r in results.values():
        if r["precision"] == "bf16":
            print("bf16, %s: tapegrad on %s; PyTorch autocast on %s" % (
                r["mode"], r.get("tapegrad_kernels") or ("-" if not with_tg else "?"), r.get("torch_kernels") or "?"))
    print("total %.0f s" % (time.time() - t_start))


if __name__ == "__main__":
    main()
