#!/usr/bin/python3
"""Compare one attention training step of tapegrad and PyTorch on this CPU.

Runs `tapegrad bench --json` and the same step in PyTorch (the book's modules,
forward + MSE against zeros + backward), alternating, each in a fresh process
so peak RSS is per run, and reports the median over --runs runs of each run's
median step time.

    /usr/bin/python3 bench/compare_torch.py [--tapegrad build/tools/tapegrad]
        [--runs 5] [--steps 5] [--threads 2] [--only NAME] [--markdown]

The machine's reference rate is OpenBLAS sgemm (2048^3, float32, --threads
threads) through the same library tapegrad links (build/bench/sgemm_rate),
measured before and after the table; "of sgemm" is tapegrad's GFLOP/s as a
share of its median.

PyTorch comes from Debian's python3-torch (1.13). It runs with the thread
count that is fastest for it (1 or 2 threads, chosen by a quick probe per
configuration); tapegrad runs with --threads.
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

CONFIGS = [
    # name, module, batch, tokens, d_in, d_out, heads, dropout
    ("gpt2-small p=0.1", "mha", 2, 1024, 768, 768, 12, 0.1),
    ("gpt2-small p=0", "mha", 2, 1024, 768, 768, 12, 0.0),
    ("B8 T128 d256", "mha", 8, 128, 256, 256, 8, 0.1),
    ("book toy", "mha", 2, 6, 3, 2, 2, 0.1),
    ("wrapper B4 T512", "mha-wrapper", 4, 512, 768, 768, 12, 0.1),
]
SCALING = [256, 512, 1024, 2048, 4096]
# the book's GPT-2 124M training step (forward, cross-entropy, backward, AdamW),
# tapegrad under each numerics policy (README.md, "Numerics")
# (bf16: PyTorch under torch.autocast("cpu", dtype=torch.bfloat16), its
# matmuls on oneDNN; the kernels both ran on are printed after the table)
GPT_CONFIGS = [("GPT-2 124M B2 T256 exact", 2, 256, "exact"), ("GPT-2 124M B2 T256 fast", 2, 256, "fast"),
               ("GPT-2 124M B2 T256 bf16", 2, 256, "bf16")]
TORCH_MAX_T = 2048  # PyTorch keeps several (B, h, T, T) tensors: 4096 needs ~10 GB


def flops(batch, tokens, d_in, d_out):
    fwd = 2 * batch * tokens * 3 * d_in * d_out + 2 * batch * tokens * d_out ** 2 + 4 * batch * tokens ** 2 * d_out
    return 3 * fwd


# ---- the PyTorch side (runs in a child process) ---------------------------------------

def torch_worker(cfg, steps, threads):
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from reference.book import MultiHeadAttention, MultiHeadAttentionWrapper

    torch.set_num_threads(threads)

    _, module, batch, tokens, d_in, d_out, heads, dropout = cfg
    torch.manual_seed(123)
    if module == "mha":
        m = MultiHeadAttention(d_in, d_out, tokens, dropout, heads)
    else:
        m = MultiHeadAttentionWrapper(d_in, d_out // heads, tokens, dropout, heads)
    m.train()
    x = torch.rand(batch, tokens, d_in)
    fwd, bwd, step = [], [], []
    for i in range(steps + 1):
        m.zero_grad(set_to_none=False)
        t0 = time.perf_counter()
        y = m(x)
        t1 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(y, torch.zeros_like(y))
        loss.backward()
        t2 = time.perf_counter()
        if i > 0:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            step.append((t2 - t0) * 1e3)
    ms = statistics.median(step)
    out = {
        "fwd_ms": statistics.median(fwd),
        "bwd_ms": statistics.median(bwd),
        "step_ms": ms,
        "gflops": flops(batch, tokens, d_in, d_out) / (ms * 1e-3) / 1e9,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }
    print(json.dumps(out))


def torch_gpt_worker(cfg, steps, threads):
    """One GPT training step as the book's train_model_simple runs it."""
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    from reference.gpt_book import GPT_CONFIG_124M, GPTModel

    torch.set_num_threads(threads)
    batch, tokens = cfg[1], cfg[2]
    autocast = cfg[3] == "bf16"
    conf = dict(GPT_CONFIG_124M, context_length=tokens)
    torch.manual_seed(123)
    model = GPTModel(conf)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=0.1)
    x = torch.randint(0, conf["vocab_size"], (batch, tokens))
    y = torch.randint(0, conf["vocab_size"], (batch, tokens))
    fwd, bwd, upd, step = [], [], [], []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
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
    ms = statistics.median(step)
    print(json.dumps({
        "fwd_ms": statistics.median(fwd),
        "bwd_ms": statistics.median(bwd),
        "opt_ms": statistics.median(upd),
        "step_ms": ms,
        "tokens_per_s": batch * tokens / (ms * 1e-3),
        "gflops": gpt_flops(batch, tokens) / (ms * 1e-3) / 1e9,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }))


def gpt_flops(batch, tokens, d=768, layers=12, vocab=50257):
    """README.md ("Performance"): 6 x Linear weights x B x T + 12 x L x B x T^2 x d."""
    return 6 * (layers * 12 * d * d + d * vocab) * batch * tokens + 12 * layers * batch * tokens ** 2 * d


# ---- the driver ------------------------------------------------------------------------------

def run_torch(cfg, steps, threads):
    if cfg[0].startswith("GPT"):
        cmd = [sys.executable, os.path.abspath(__file__), "--gpt-worker", json.dumps(cfg), "--steps", str(steps),
               "--threads", str(threads)]
        # under autocast, oneDNN's verbose lines name the kernels its matmuls ran on
        env = dict(os.environ, DNNL_VERBOSE="1") if cfg[3] == "bf16" else None
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        r = json.loads(out.strip().splitlines()[-1])
        kernels = sorted({f[4] for f in (l.split(",") for l in out.splitlines())
                          if len(f) > 5 and f[0].endswith("_verbose") and f[1] == "exec"
                          and f[3] in ("matmul", "inner_product")})
        if kernels:
            r["kernels"] = ", ".join(kernels)
        return r
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg), "--steps", str(steps),
           "--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_tapegrad(exe, cfg, steps, threads):
    if cfg[0].startswith("GPT"):
        _, batch, tokens, precision = cfg
        cmd = [exe, "bench", "--model", "gpt", "--batch", str(batch), "--tokens", str(tokens), "--steps", str(steps),
               "--threads", str(threads), "--precision", precision, "--json"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    _, module, batch, tokens, d_in, d_out, heads, dropout = cfg
    cmd = [exe, "bench", "--module", module, "--batch", str(batch), "--tokens", str(tokens), "--d-in", str(d_in),
           "--d-out", str(d_out), "--heads", str(heads), "--dropout", str(dropout), "--steps", str(steps),
           "--threads", str(threads), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_sgemm(exe, threads):
    out = subprocess.run([exe, "2048", "7", str(threads)], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["gflops"]


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def compare(exe, cfg, runs, steps, threads, with_torch=True):
    torch_threads = threads
    if with_torch:
        # PyTorch at its best: probe 1 and `threads` threads once, keep the faster.
        probe = {t: run_torch(cfg, 2, t)["step_ms"] for t in sorted({1, threads})}
        torch_threads = min(probe, key=probe.get)
    tg, th = [], []
    for _ in range(runs):  # alternate so both see the same machine noise
        tg.append(run_tapegrad(exe, cfg, steps, threads))
        if with_torch:
            th.append(run_torch(cfg, steps, torch_threads))
    row = {"name": cfg[0], "tapegrad": {k: med(tg, k) for k in tg[0] if isinstance(tg[0][k], (int, float))}}
    row["tapegrad_kernels"] = tg[0].get("bf16_kernel")
    if with_torch:
        row["torch"] = {k: med(th, k) for k in th[0] if isinstance(th[0][k], (int, float))}
        row["torch_kernels"] = th[0].get("kernels")
        row["torch_threads"] = torch_threads
        row["speedup"] = row["torch"]["step_ms"] / row["tapegrad"]["step_ms"]
    return row


def fmt_row(r, markdown, sgemm):
    t = r["tapegrad"]
    cells = [r["name"], "%.2f" % t["step_ms"], "%.1f" % t["gflops"], "%.0f%%" % (100 * t["gflops"] / sgemm),
             "%.0f" % t["peak_rss_mib"]]
    if "torch" in r:
        p = r["torch"]
        cells += ["%.2f" % p["step_ms"], "%.1f" % p["gflops"], "%.0f" % p["peak_rss_mib"], "%.1fx" % r["speedup"]]
    else:
        cells += ["-", "-", "-", "-"]
    if markdown:
        return "| " + " | ".join(cells) + " |"
    return FMT % tuple(cells)


FMT = "%-20s %10s %8s %9s %8s %10s %10s %9s %8s"


def gpt_generation(a):
    """Greedy generation, 50 new ids, with and without the KV cache, alternating."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import compare_generate as cg
    rows = [("PyTorch, no cache", lambda: cg.run_torch(50, a.threads, False)),
            ("tapegrad, no cache", lambda: cg.run_tapegrad(a.tapegrad, 50, a.threads, False)),
            ("PyTorch, KV cache", lambda: cg.run_torch(50, a.threads, True)),
            ("tapegrad, KV cache", lambda: cg.run_tapegrad(a.tapegrad, 50, a.threads, True))]
    rates = {name: [] for name, _ in rows}
    ids = set()
    for _ in range(max(1, a.runs)):
        for name, fn in rows:
            r = fn()
            rates[name].append(r["tokens_per_s"])
            ids.add(tuple(r["ids"]))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print()
    print("GPT-2 124M greedy generation, 50 new ids, %d threads, median of %d runs (ids %s):"
          % (a.threads, max(1, a.runs), "equal" if len(ids) == 1 else "DIFFER"))
    for cache in ("no cache", "KV cache"):
        t, p = med["tapegrad, " + cache], med["PyTorch, " + cache]
        print("  %-9s tapegrad %7.1f tokens/s   PyTorch %7.1f tokens/s   %.2fx" % (cache, t, p, t / p))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tapegrad", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "tapegrad"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sgemm", default=os.path.join(os.path.dirname(__file__), "..", "build", "bench", "sgemm_rate"))
    ap.add_argument("--only", help="run only configurations whose name contains this")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--gpt", action="store_true",
                    help="the GPT-2 rows only: the training step and generation (bench/compare_generate.py)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--gpt-worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(json.loads(a.worker), a.steps, a.threads)
        return
    if a.gpt_worker:
        torch_gpt_worker(json.loads(a.gpt_worker), a.steps, a.threads)
        return
    rates = [run_sgemm(a.sgemm, a.threads) for _ in range(3)]
    sgemm = statistics.median(rates)
    print("OpenBLAS sgemm 2048^3, %d threads: %.1f GFLOP/s (median of %s)" %
          (a.threads, sgemm, ", ".join("%.1f" % x for x in rates)))
    print()
    hdr = ["config", "tg ms/step", "tg GF/s", "of sgemm", "tg MiB", "torch ms", "torch GF/s", "torch MiB", "speedup"]
    if a.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
    else:
        print(FMT % tuple(hdr))
    gpt_rows = {}
    for cfg in ([] if a.gpt else CONFIGS) + GPT_CONFIGS:
        if a.only and a.only not in cfg[0]:
            continue
        r = compare(a.tapegrad, list(cfg), a.runs, a.steps, a.threads)
        print(fmt_row(r, a.markdown, sgemm), flush=True)
        if cfg[0].startswith("GPT"):
            gpt_rows[cfg[3]] = r
    if "bf16" in gpt_rows:
        b = gpt_rows["bf16"]
        print()
        print("bf16: tapegrad on %s; PyTorch autocast on %s" % (b.get("tapegrad_kernels") or "?",
                                                               b.get("torch_kernels") or "?"))
        tb = b["tapegrad"]["step_ms"]
        for name, ref in (("PyTorch float32", gpt_rows.get("exact", {}).get("torch")),
                          ("PyTorch bf16 autocast", b.get("torch")),
                          ("tapegrad fast", gpt_rows.get("fast", {}).get("tapegrad")),
                          ("tapegrad exact", gpt_rows.get("exact", {}).get("tapegrad"))):
            if ref:
                print("  tapegrad bf16 step %.0f ms: %.2fx %s (%.0f ms)" % (tb, ref["step_ms"] / tb, name,
                                                                             ref["step_ms"]))
    if a.gpt:
        gpt_generation(a)
    if not (a.no_scaling or a.only or a.gpt):
        print()
        print("Scaling, MultiHeadAttention B=1 d=768 12 heads p=0.1 (runs: %d):" % max(1, a.runs // 2))
        print()
        if a.markdown:
            print("| " + " | ".join(hdr) + " |")
            print("|" + "---|" * len(hdr))
        for T in SCALING:
            cfg = ["T=%d" % T, "mha", 1, T, 768, 768, 12, 0.1]
            r = compare(a.tapegrad, cfg, max(1, a.runs // 2), 3, a.threads, with_torch=T <= TORCH_MAX_T)
            print(fmt_row(r, a.markdown, sgemm), flush=True)
    after = [run_sgemm(a.sgemm, a.threads) for _ in range(3)]
    print()
    print("OpenBLAS sgemm after the runs: %.1f GFLOP/s (median of %s)" %
          (statistics.median(after), ", ".join("%.1f" % x for x in after)))


if __name__ == "__main__":
    main()
