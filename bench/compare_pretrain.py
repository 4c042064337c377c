#!/usr/bin/python3
"""Pretraining with tapegrad and PyTorch on this CPU: the book's chapter-5 run
on data/the-verdict.txt, the same settings on both sides.

PyTorch runs the book's own code (tools/reference/pretrain.py: GPTDatasetV1
and create_dataloader_v1 with real DataLoaders, the chapter-4 GPTModel,
AdamW, train_model_simple, evaluate_model, generate_and_print_sample);
tapegrad runs `tapegrad pretrain --text data/the-verdict.txt ... --json`.
Each run is a fresh process with the same thread count; per repeat both run
once, the order alternating. The report gives both loss tables side by side
(rows whose printed text differs are marked), whether the per-epoch samples
are identical, the wall time of each whole process (startup, tokenizing,
model construction, training, evaluation, sampling; median over --repeat),
the ratio PyTorch / tapegrad, tokens/s (trained tokens over the wall time
and over the training loop alone) and each process's peak RSS (wait4).

    /usr/bin/python3 bench/compare_pretrain.py [--small] [--config NAME|JSON]
        [--threads 2] [--repeat 1] [--tapegrad build/tools/tapegrad]
        [--json FILE]

--config takes "book" (the default: GPT_CONFIG_124M with context 256, batch
2, 10 epochs, lr 4e-4, weight decay 0.1, eval every 5 steps over 5 batches,
seed 123, dropout 0.1, 50 sample tokens; about 15 minutes per side on two
cores), "small" (the same as --small: context 64, emb 32, 2 heads, 2 layers,
2 epochs, 20 sample tokens) or a JSON object (inline, or @FILE) whose keys
override the book run's: vocab, context, emb, heads, layers, drop, qkv_bias,
seed, batch, epochs, lr, weight_decay, eval_freq, eval_iter, train_ratio,
stride (default: the context), start, sample_tokens.
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TEXT = os.path.join(ROOT, "data", "the-verdict.txt")

BOOK = dict(vocab=50257, context=256, emb=768, heads=12, layers=12, drop=0.1, qkv_bias=False, seed=123,
            batch=2, epochs=10, lr=4e-4, weight_decay=0.1, eval_freq=5, eval_iter=5, train_ratio=0.9,
            stride=None, start="Every effort moves you", sample_tokens=50)
SMALL = dict(context=64, emb=32, heads=2, layers=2, epochs=2, sample_tokens=20)


def row_line(epoch, step, train, val):
    """The book's printed row (train_model_simple's f-string)."""
    return f"Ep {epoch} (Step {step:06d}): Train loss {train:.3f}, Val loss {val:.3f}"


# ---- the PyTorch side (a child process) ----------------------------------------------------

class EchoList(list):
    """A list that also prints what is appended: train_model_simple records its
    lines in out["lines"]; this makes them appear as the book's print() would."""

    def append(self, line):
        super().append(line)
        print(line, flush=True)


def torch_worker(s, threads):
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from reference.pretrain import Tokenizer, setup, train_model_simple

    torch.set_num_threads(threads)
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    tokenizer = Tokenizer()
    cfg, model, optimizer, train_loader, val_loader = setup(dict(s, vocab_size=s["vocab"]), text, tokenizer)
    out = {"rows": [], "samples": [], "lines": EchoList()}
    t0 = time.perf_counter()
    steps = train_model_simple(model, train_loader, val_loader, optimizer, s["epochs"], s["eval_freq"],
                               s["eval_iter"], s["start"], tokenizer, s["sample_tokens"], out)
    seconds = time.perf_counter() - t0
    tokens = steps * s["batch"] * s["context"]  # drop_last: every training batch is full
    samples = [line for line in out["lines"] if not line.startswith("Ep ")]
    print(json.dumps({"rows": out["rows"], "samples": samples, "seconds": seconds,
                      "tokens_per_s": tokens / seconds if seconds > 0 else 0.0, "steps": steps,
                      "tokens": tokens, "torch_version": torch.__version__}))


# ---- the driver ----------------------------------------------------------------------------

def run_process(cmd, env, label, echo):
    """Runs cmd; returns (stdout lines, wall seconds, peak RSS in MiB) of that process."""
    with tempfile.TemporaryFile(mode="w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        lines = []
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            if echo and not line.startswith("{"):
                print("  [%s] %s" % (label, line.rstrip("\n")), file=sys.stderr, flush=True)
        p.stdout.close()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            sys.exit("%s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode, err.read()[-4000:]))
    return lines, wall, ru.ru_maxrss / 1024.0


def run_torch(s, threads, echo):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(s), "--threads", str(threads)]
    lines, wall, rss = run_process(cmd, dict(os.environ, OMP_NUM_THREADS=str(threads)), "PyTorch", echo)
    res = json.loads(lines[-1])
    rows = [(r["epoch"], r["step"], r["train_loss"], r["val_loss"]) for r in res["rows"]]
    return {"wall": wall, "rss": rss, "loop_seconds": res["seconds"], "tokens": res["tokens"],
            "steps": res["steps"], "rows": rows, "samples": res["samples"], "printed": lines[:-1],
            "torch_version": res["torch_version"]}


def tapegrad_cmd(exe, s, threads):
    return [exe, "pretrain", "--text", TEXT, "--vocab", str(s["vocab"]), "--context", str(s["context"]),
            "--emb", str(s["emb"]), "--heads", str(s["heads"]), "--layers", str(s["layers"]),
            "--dropout", repr(s["drop"]), "--seed", str(s["seed"]), "--batch", str(s["batch"]),
            "--epochs", str(s["epochs"]), "--lr", repr(s["lr"]), "--weight-decay", repr(s["weight_decay"]),
            "--eval-freq", str(s["eval_freq"]), "--eval-iter", str(s["eval_iter"]),
            "--train-ratio", repr(s["train_ratio"]), "--stride", str(s["stride"]), "--start", s["start"],
            "--sample-tokens", str(s["sample_tokens"]), "--threads", str(threads), "--json"] \
        + (["--qkv-bias"] if s["qkv_bias"] else [])


def run_tapegrad(exe, s, threads, echo):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    lines, wall, rss = run_process(tapegrad_cmd(exe, s, threads), env, "tapegrad", echo)
    res = json.loads(lines[-1])
    nan = float("nan")
    rows = [(r["epoch"], r["step"], nan if r["train_loss"] is None else r["train_loss"],
             nan if r["val_loss"] is None else r["val_loss"]) for r in res["rows"]]
    return {"wall": wall, "rss": rss, "loop_seconds": res["seconds"],
            "tokens": res["tokens_per_s"] * res["seconds"], "rows": rows, "samples": res["samples"],
            "printed": lines[:-1]}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def settings(a):
    s = dict(BOOK)
    name = "small" if a.small else a.config
    if name == "small":
        s.update(SMALL)
    elif name != "book":
        src = name
        if src.startswith("@"):
            with open(src[1:]) as f:
                src = f.read()
        try:
            over = json.loads(src)
        except ValueError:
            sys.exit("--config: expected book, small or a JSON object, got %r" % name)
        unknown = sorted(set(over) - set(BOOK))
        if unknown:
            sys.exit("--config: unknown keys %s (known: %s)" % (unknown, ", ".join(BOOK)))
        s.update(over)
        name = "custom"
    if s["stride"] is None:
        s["stride"] = s["context"]
    return name, s


def same_float(x, y):
    return x == y or (math.isnan(x) and math.isnan(y))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="book", help="book (default), small, or a JSON object / @FILE of overrides")
    ap.add_argument("--small", action="store_true", help="the quick configuration (--config small)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "tools", "tapegrad"))
    ap.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(json.loads(a.worker), a.threads)
        return
    if a.repeat < 1 or a.threads < 1:
        sys.exit("--repeat and --threads must be at least 1")
    if not os.access(a.tapegrad, os.X_OK):
        sys.exit("no tapegrad binary at %s (build it, or pass --tapegrad PATH)" % a.tapegrad)
    name, s = settings(a)
    echo = sys.stderr.isatty()

    runs = {"PyTorch": [], "tapegrad": []}
    fns = {"PyTorch": lambda: run_torch(s, a.threads, echo),
           "tapegrad": lambda: run_tapegrad(a.tapegrad, s, a.threads, echo)}
    for r in range(a.repeat):
        order = ["PyTorch", "tapegrad"] if r % 2 == 0 else ["tapegrad", "PyTorch"]
        for side in order:
            res = fns[side]()
            res["order"] = order.index(side) + 1
            runs[side].append(res)
            print("repeat %d/%d  %-8s  %8.1f s  %6.0f MiB" % (r + 1, a.repeat, side, res["wall"], res["rss"]),
                  file=sys.stderr, flush=True)

    pt, tg = runs["PyTorch"][0], runs["tapegrad"][0]
    torch_version = pt["torch_version"]
    tokens = pt["tokens"]

    # ---- header
    print("Pretraining on the-verdict.txt: PyTorch (the book's chapter-5 code) vs tapegrad")
    print("CPU:      %s, %d logical cores" % (cpu_model(), os.cpu_count() or 0))
    print("Software: PyTorch %s (Python %s), %s (%s)" % (
        torch_version, platform.python_version(),
        subprocess.run([a.tapegrad, "--version"], capture_output=True, text=True).stdout.strip() or "tapegrad",
        os.path.relpath(a.tapegrad)))
    print("Date:     %s" % datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"))
    print("Run:      %s -- vocab %d, context %d, emb %d, %d heads, %d layers, dropout %g%s; batch %d, stride %d,"
          % (name, s["vocab"], s["context"], s["emb"], s["heads"], s["layers"], s["drop"],
             ", qkv bias" if s["qkv_bias"] else "", s["batch"], s["stride"]))
    print("          %d epochs, AdamW lr %g, weight decay %g, eval every %d steps over %d batches,"
          % (s["epochs"], s["lr"], s["weight_decay"], s["eval_freq"], s["eval_iter"]))
    print("          seed %d, %d sample tokens; %d steps, %d tokens trained; %d thread%s each, %d repeat%s"
          % (s["seed"], s["sample_tokens"], pt["steps"], tokens, a.threads, "" if a.threads == 1 else "s",
             a.repeat, "" if a.repeat == 1 else "s"))
    print()

    # ---- loss tables
    pl = [row_line(*r) for r in pt["rows"]]
    tl = [row_line(*r) for r in tg["rows"]]
    width = max([len(x) for x in pl + tl] + [10])
    print("  %-*s | %s" % (width, "PyTorch", "tapegrad"))
    ndiff = 0
    for i in range(max(len(pl), len(tl))):
        p = pl[i] if i < len(pl) else "(no row)"
        t = tl[i] if i < len(tl) else "(no row)"
        ndiff += p != t
        print("%s %-*s | %s" % ("*" if p != t else " ", width, p, t))
    nrows = max(len(pl), len(tl))
    exact = (len(pt["rows"]) == len(tg["rows"])
             and all(p[:2] == t[:2] and same_float(p[2], t[2]) and same_float(p[3], t[3])
                     for p, t in zip(pt["rows"], tg["rows"])))
    maxdiff = max([abs(p[k] - t[k]) for p, t in zip(pt["rows"], tg["rows"]) for k in (2, 3)
                   if not (math.isnan(p[k]) or math.isnan(t[k]))] or [0.0])
    print("Rows: %s%s" % ("all %d identical as printed" % nrows if ndiff == 0 else
                          "%d of %d differ as printed (marked *)" % (ndiff, nrows),
                          "; the losses are equal as doubles too" if exact else
                          "; largest |difference| of a loss: %.3g" % maxdiff))
    # tapegrad's printed rows must be what its JSON says
    tg_printed = [x for x in tg["printed"] if x.startswith("Ep ")]
    if tg_printed != tl:
        print("Note: tapegrad's printed rows differ from its --json rows")

    # ---- samples
    nsame = sum(p == t for p, t in zip(pt["samples"], tg["samples"]))
    samples_same = nsame == len(pt["samples"]) == len(tg["samples"])
    print("Samples (one per epoch): %s" % ("all %d identical" % nsame if samples_same else
                                         "%d of %d identical" % (nsame, max(len(pt["samples"]), len(tg["samples"])))))
    for e in range(max(len(pt["samples"]), len(tg["samples"]))):
        p = pt["samples"][e] if e < len(pt["samples"]) else None
        t = tg["samples"][e] if e < len(tg["samples"]) else None
        if p != t:
            print("  epoch %d PyTorch:  %r\n  epoch %d tapegrad: %r" % (e + 1, p, e + 1, t))
    if samples_same and pt["samples"]:
        print("  last: %r" % pt["samples"][-1])

    # runs after the first must reproduce it
    for side in runs:
        for k, res in enumerate(runs[side][1:], 2):
            if res["rows"] != runs[side][0]["rows"] or res["samples"] != runs[side][0]["samples"]:
                print("Note: %s repeat %d printed a different table or samples than repeat 1" % (side, k))
    print()

    # ---- time and memory
    med = {side: {k: statistics.median(r[k] for r in runs[side]) for k in ("wall", "loop_seconds", "rss")}
           for side in runs}
    ratio = med["PyTorch"]["wall"] / med["tapegrad"]["wall"]
    loop_ratio = med["PyTorch"]["loop_seconds"] / med["tapegrad"]["loop_seconds"]
    what = "median of %d" % a.repeat if a.repeat > 1 else "one run"
    fmt = "%-28s %12s %12s %14s"
    print(fmt % ("(%s each)" % what, "PyTorch", "tapegrad", "PyTorch/tapegrad"))
    print(fmt % ("wall time, whole process", "%.2f s" % med["PyTorch"]["wall"], "%.2f s" % med["tapegrad"]["wall"],
                 "%.2fx" % ratio))
    print(fmt % ("  training loop only", "%.2f s" % med["PyTorch"]["loop_seconds"],
                 "%.2f s" % med["tapegrad"]["loop_seconds"], "%.2fx" % loop_ratio))
    print(fmt % ("tokens/s, whole process", "%.0f" % (tokens / med["PyTorch"]["wall"]),
                 "%.0f" % (tokens / med["tapegrad"]["wall"]), ""))
    print(fmt % ("  training loop only", "%.0f" % (tokens / med["PyTorch"]["loop_seconds"]),
                 "%.0f" % (tokens / med["tapegrad"]["loop_seconds"]), ""))
    print(fmt % ("peak RSS", "%.0f MiB" % med["PyTorch"]["rss"], "%.0f MiB" % med["tapegrad"]["rss"],
                 "%.2fx" % (med["PyTorch"]["rss"] / med["tapegrad"]["rss"])))
    if a.repeat > 1:
        for side in runs:
            print("  %-8s wall per run: %s" % (side, ", ".join("%.2f" % r["wall"] for r in runs[side])))
    print("(The training loop includes evaluation and sampling; tokens/s = %d trained tokens / seconds.)" % tokens)
    print()
    ok = ndiff == 0 and samples_same
    print("Summary: %s; tapegrad %.2fx PyTorch's speed (wall), %.0f vs %.0f MiB peak RSS."
          % ("tables and samples identical" if ok else "OUTPUTS DIFFER", ratio, med["tapegrad"]["rss"],
             med["PyTorch"]["rss"]))

    if a.json:
        doc = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
               "cpu": cpu_model(), "cpu_count": os.cpu_count(), "torch_version": torch_version,
               "python_version": platform.python_version(), "tapegrad": os.path.abspath(a.tapegrad),
               "config_name": name, "settings": s, "threads": a.threads, "repeat": a.repeat,
               "steps": pt["steps"], "tokens_trained": tokens,
               "tapegrad_command": tapegrad_cmd(a.tapegrad, s, a.threads),
               "rows": {"PyTorch": [dict(zip(("epoch", "step", "train_loss", "val_loss"), r)) for r in pt["rows"]],
                        "tapegrad": [dict(zip(("epoch", "step", "train_loss", "val_loss"), r)) for r in tg["rows"]]},
               "row_lines": {"PyTorch": pl, "tapegrad": tl}, "rows_differ": ndiff, "losses_equal_exactly": exact,
               "samples": {"PyTorch": pt["samples"], "tapegrad": tg["samples"]}, "samples_identical": samples_same,
               "runs": {side: [{"order": r["order"], "wall_s": r["wall"], "loop_s": r["loop_seconds"],
                                "peak_rss_mib": r["rss"], "tokens_per_s_wall": tokens / r["wall"],
                                "tokens_per_s_loop": tokens / r["loop_seconds"]} for r in runs[side]]
                        for side in runs},
               "median": {side: {"wall_s": med[side]["wall"], "loop_s": med[side]["loop_seconds"],
                                 "peak_rss_mib": med[side]["rss"],
                                 "tokens_per_s_wall": tokens / med[side]["wall"],
                                 "tokens_per_s_loop": tokens / med[side]["loop_seconds"]} for side in runs},
               "ratio_wall": ratio, "ratio_loop": loop_ratio}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, allow_nan=True)
            f.write("\n")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
