#!/usr/bin/python3
"""Compare a step of the book's DPO notebook (chapter 7,
04_preference-tuning-with-dpo) of tapegrad and PyTorch on GPT-2 124M on this
CPU.

Usage: /usr/bin/python3 bench/compare_dpo.py [--tapegrad build/tools/tapegrad]
[--runs 3] [--steps 3] [--threads 2] [--tokens 79] [--lora] [--only SUBSTR]
[--markdown] [--torch-only].

The step is train_model_dpo_simple's: zero_grad, the notebook's
compute_dpo_loss_batch (compute_logprobs of the policy's logits on the
chosen and on the rejected rows, then of a frozen reference's under no_grad,
compute_dpo_loss with beta 0.1), loss.backward(), AdamW(lr 5e-6, weight decay
0.01).step(). The policy is the book's GPTModel with GPT-2 124M's sizes,
context_length 1024, qkv_bias, drop_rate 0 (the notebook's model settings),
in training mode; the reference a copy.deepcopy of it in eval mode. The
batch: 8 rows of --tokens random ids for "chosen" and for "rejected", the
masks true from --tokens // 2 to the end (the cost does not depend on
where). With --lora, also rows with the policy's parameters frozen and every
Linear wrapped in LinearWithLoRA rank 16 alpha 16 (appendix E), the
reference left plain.

--tokens defaults to 79, the notebook's lengths: its training loader (935
entries of data/preference/instruction-data-with-preference.json, batch 8,
shuffle=True after torch.manual_seed(123), drop_last=True: 116 batches) pads
each batch to max(len + 1) over its chosen and rejected ids (GPT-2's BPE);
those 116 lengths have median 79 and mean 80.3 (63 to 115), 74,528 tokens
seen in the epoch.

Each run is a fresh process per configuration (one warm-up step, then
--steps timed steps, their median; the process's peak RSS), tapegrad
(`tapegrad bench --model dpo ... --json`, under --precision exact, fast and
bf16) and PyTorch (Debian's python3-torch 1.13: float32, and under
torch.autocast("cpu", dtype=torch.bfloat16)) alternating within each run, all
with --threads threads; the table gives the median over --runs runs. Ratios:
each tapegrad row against PyTorch float32, and the bf16 row also against
autocast. The trainable parameter counts of both sides must agree, and the
warm-up step's loss (the policy being the reference) must be ln 2 on both.
--torch-only runs the PyTorch side alone.

On 2 cores (Intel Xeon 2.50 GHz, AVX-512 with VNNI, no AVX512_BF16 / AMX:
bf16 is emulated on both sides) a step takes 15 to 70 s (1.26 TFLOP: four
forwards, two backwards), and each process also builds two models and takes
its warm-up step; one run of the five configurations with --steps 1 took 7.5
minutes, so --runs 2 --steps 1 (docs/performance.md's table) takes about 15
and the defaults about 40.
"""
import argparse
import copy
import json
import math
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_finetune import cpu_info, last_json, onednn_kernels, run_checked, table  # noqa: E402

# name, LoRA (rank, alpha) or None, side, precision: tapegrad's --precision or PyTorch's dtype
PRECISIONS = ["exact", "fast", "bf16"]
TORCH_DTYPES = ["float32", "bf16"]
MODES = [("full", None), ("LoRA r16", (16, 16))]
BATCH, CONTEXT, TOKENS, BETA = 8, 1024, 79, 0.1
LR, WEIGHT_DECAY = 5e-6, 0.01


def tools_path():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))


# ---- the PyTorch side (runs in a child process) ---------------------------------------

def compute_dpo_loss_batch(batch, policy_model, reference_model, beta):
    """The notebook's compute_dpo_loss_batch over its compute_logprobs and
    compute_dpo_loss (tools/reference/dpo_ops.py has them as its cells do)."""
    from reference.dpo_ops import compute_dpo_loss, compute_logprobs
    import torch

    policy_chosen = compute_logprobs(logits=policy_model(batch["chosen"]), labels=batch["chosen"],
                                     selection_mask=batch["chosen_mask"])
    policy_rejected = compute_logprobs(logits=policy_model(batch["rejected"]), labels=batch["rejected"],
                                       selection_mask=batch["rejected_mask"])
    with torch.no_grad():
        ref_chosen = compute_logprobs(logits=reference_model(batch["chosen"]), labels=batch["chosen"],
                                      selection_mask=batch["chosen_mask"])
        ref_rejected = compute_logprobs(logits=reference_model(batch["rejected"]), labels=batch["rejected"],
                                        selection_mask=batch["rejected_mask"])
    return compute_dpo_loss(model_chosen_logprobs=policy_chosen, model_rejected_logprobs=policy_rejected,
                            reference_chosen_logprobs=ref_chosen, reference_rejected_logprobs=ref_rejected, beta=beta)


def torch_worker(cfg, steps, threads, tokens):
    import torch

    tools_path()
    from reference.gpt_book import GPT_CONFIG_124M, GPTModel

    torch.set_num_threads(threads)
    lora, dtype = cfg["lora"], cfg["precision"]
    conf = dict(GPT_CONFIG_124M, context_length=CONTEXT, drop_rate=0.0, qkv_bias=True)
    torch.manual_seed(123)
    policy = GPTModel(conf)
    reference = copy.deepcopy(policy)
    reference.eval()
    if lora is not None:
        from reference.finetune import replace_linear_with_lora
        for p in policy.parameters():
            p.requires_grad = False
        replace_linear_with_lora(policy, rank=lora[0], alpha=lora[1])
    policy.train()
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    opt = torch.optim.AdamW(policy.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    mask = torch.zeros(BATCH, tokens, dtype=torch.bool)
    mask[:, tokens // 2:] = True
    batch = {"chosen": torch.randint(0, conf["vocab_size"], (BATCH, tokens)),
             "rejected": torch.randint(0, conf["vocab_size"], (BATCH, tokens)),
             "chosen_mask": mask, "rejected_mask": mask.clone()}
    fwd, bwd, upd, step = [], [], [], []
    first_loss = None
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss, _, _ = compute_dpo_loss_batch(batch, policy, reference, BETA)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if i == 0:
            first_loss = float(loss)
        else:
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
        "first_loss": first_loss,
    }), flush=True)


# ---- the driver ------------------------------------------------------------------------------

def fail(msg):
    sys.exit("compare_dpo: " + msg)


def run_torch(cfg, steps, threads, tokens):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg), "--steps", str(steps),
           "--threads", str(threads), "--tokens", str(tokens)]
    # under autocast, oneDNN's verbose lines name the kernels its matmuls ran on
    env = dict(os.environ, DNNL_VERBOSE="1") if cfg["precision"] == "bf16" else None
    out = run_checked(cmd, "the PyTorch worker", env)
    r = last_json(out, "the PyTorch worker", cmd)
    kernels = onednn_kernels(out)
    if kernels:
        r["kernels"] = kernels
    return r


TG_KEYS = ("step_ms", "fwd_ms", "bwd_ms", "opt_ms", "peak_rss_mib", "trainable_parameters", "precision",
           "first_loss", "tokens", "batch")


def run_tapegrad(exe, cfg, steps, threads, tokens):
    prec = cfg["precision"]
    cmd = [exe, "bench", "--model", "dpo", "--batch", str(BATCH), "--tokens", str(tokens), "--context",
           str(CONTEXT), "--qkv-bias", "--dropout", "0", "--steps", str(steps), "--threads", str(threads),
           "--precision", prec, "--json"]
    if cfg["lora"] is not None:
        cmd += ["--lora-rank", str(cfg["lora"][0]), "--lora-alpha", str(cfg["lora"][1])]
    out = run_checked(cmd, "tapegrad", None)
    r = last_json(out, "tapegrad", cmd)
    missing = [k for k in TG_KEYS + (("bf16_kernel",) if prec == "bf16" else ()) if k not in r]
    if missing:
        fail("tapegrad's JSON lacks %s\n  command: %s\n  JSON: %s" % (", ".join(missing), " ".join(cmd), json.dumps(r)))
    if r["precision"] != prec or r["tokens"] != tokens or r["batch"] != BATCH:
        fail("asked tapegrad for --precision %s, batch %d, tokens %d; it reports %s, %s, %s"
             % (prec, BATCH, tokens, r["precision"], r["batch"], r["tokens"]))
    return r


def medians(rows):
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]
            if isinstance(rows[0][k], (int, float)) and not isinstance(rows[0][k], bool)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tapegrad", default=os.path.join(os.path.dirname(__file__), "..", "build", "tools", "tapegrad"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=TOKENS, help="ids per row (default %d: the notebook's median)" % TOKENS)
    ap.add_argument("--lora", action="store_true", help="also the LoRA r16 rows")
    ap.add_argument("--only", help="run only configurations whose name (\"full tapegrad fast\", \"full torch "
                    "float32\", ...) contains this, or one of these comma-separated strings")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--torch-only", action="store_true", help="the PyTorch side alone")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(json.loads(a.worker), a.steps, a.threads, a.tokens)
        return
    if a.runs < 1 or a.steps < 1 or a.threads < 1:
        ap.error("--runs, --steps and --threads must be at least 1")
    if not 2 <= a.tokens <= CONTEXT:
        ap.error("--tokens must be in [2, %d]" % CONTEXT)
    with_tg = not a.torch_only
    if with_tg and not os.access(a.tapegrad, os.X_OK):
        fail("no tapegrad executable at %s (build it, pass --tapegrad, or use --torch-only)" % a.tapegrad)

    name, flags = cpu_info()
    print("CPU: %s, %d cores; flags: %s" % (name, os.cpu_count() or 0, " ".join(flags) or "none of the listed"))
    print("GPT-2 124M DPO step, batch %d, %d tokens (chosen and rejected), context %d, beta %g; %d threads; "
          "median over %d runs of each run's median of %d steps" % (BATCH, a.tokens, CONTEXT, BETA, a.threads,
                                                                     a.runs, a.steps))
    print(flush=True)

    # per mode: tapegrad's precisions and PyTorch's two, each run alternating
    modes = [m for m in MODES if a.lora or m[1] is None]
    jobs = []
    for mode, lora in modes:
        if with_tg:
            jobs += [("tapegrad", mode, {"lora": lora, "precision": p}) for p in PRECISIONS]
        jobs += [("torch", mode, {"lora": lora, "precision": d}) for d in TORCH_DTYPES]
    wanted = [w for w in (a.only or "").split(",") if w]
    jobs = [j for j in jobs if not wanted or any(w in "%s %s %s" % (j[1], j[0], j[2]["precision"]) for w in wanted)]
    if not jobs:
        fail("no configuration name contains %r" % a.only)
    t_start = time.time()
    got = {}
    for run in range(a.runs):
        for side, mode, cfg in jobs:
            r = (run_tapegrad(a.tapegrad, cfg, a.steps, a.threads, a.tokens) if side == "tapegrad"
                 else run_torch(cfg, a.steps, a.threads, a.tokens))
            got.setdefault((side, mode, cfg["precision"]), []).append(r)
        print("  run %d of %d done (%.0f s)" % (run + 1, a.runs, time.time() - t_start), file=sys.stderr, flush=True)

    # the two sides must train the same parameters, from the same loss
    for mode, _ in modes:
        counts = {r["trainable_parameters"] for (_, m, _), rs in got.items() if m == mode for r in rs}
        if len(counts) != 1:
            fail("%s: trainable parameters differ between the sides or runs: %s" % (mode, sorted(counts)))
    for (side, mode, prec), rs in got.items():
        for r in rs:
            if not abs(r["first_loss"] - math.log(2)) < 2e-3:
                fail("%s %s %s: the warm-up step's loss is %r, expected ln 2 (policy = reference)"
                     % (side, mode, prec, r["first_loss"]))

    med = {k: medians(v) for k, v in got.items()}
    rows = []
    for mode, _ in modes:
        f32 = med.get(("torch", mode, "float32"))
        ac = med.get(("torch", mode, "bf16"))
        trainable = next(rs[0]["trainable_parameters"] for (s, m, _), rs in got.items() if m == mode)
        if with_tg:
            for p in PRECISIONS:
                t = med.get(("tapegrad", mode, p))
                if not t:
                    continue
                cells = ["%s tapegrad %s" % (mode, p), "%.0f" % t["step_ms"], "%.1f" % (BATCH * a.tokens / t["step_ms"] * 1e3)]
                cells.append("%.2fx" % (f32["step_ms"] / t["step_ms"]) if f32 else "-")
                cells.append("%.2fx" % (ac["step_ms"] / t["step_ms"]) if ac and p == "bf16" else "-")
                cells += ["%.0f" % t["peak_rss_mib"], "{:,}".format(trainable)]
                rows.append(cells)
        for d, r in (("float32", f32), ("bf16 autocast", ac)):
            if r:
                rows.append(["%s PyTorch %s" % (mode, d), "%.0f" % r["step_ms"],
                             "%.1f" % (BATCH * a.tokens / r["step_ms"] * 1e3),
                             "%.2fx" % (f32["step_ms"] / r["step_ms"]) if f32 else "-", "-",
                             "%.0f" % r["peak_rss_mib"], "{:,}".format(trainable)])
    hdr = ["config", "step ms", "tokens/s", "vs PyTorch f32", "vs autocast", "peak MiB", "trainable"]
    table(rows, hdr, a.markdown, "%-28s %9s %9s %14s %11s %9s %12s")

    print()
    print("Step parts, median ms (forward: zero_grad, two policy and two reference forwards, the loss):")
    rows = []
    for (side, mode, prec), r in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0] != "tapegrad")):
        rows.append(["%s %s %s" % (mode, "tapegrad" if side == "tapegrad" else "PyTorch", prec)] +
                    ["%.0f" % r[k] for k in ("fwd_ms", "bwd_ms", "opt_ms")])
    table(rows, ["config", "forward", "backward", "AdamW"], a.markdown, "%-28s %9s %9s %9s")

    print()
    print("Run by run, step ms (the machine's load moves them):")
    for (side, mode, prec), rs in got.items():
        print("  %s %s %s: %s" % (mode, side, prec, ", ".join("%.0f" % r["step_ms"] for r in rs)))
    for (side, mode, prec), rs in got.items():
        if prec == "bf16":
            k = rs[0].get("bf16_kernel") if side == "tapegrad" else rs[0].get("kernels")
            print("bf16, %s %s: %s" % (mode, side, k or "?"))
    print("total %.0f s" % (time.time() - t_start))


if __name__ == "__main__":
    main()
