#!/usr/bin/env python3
"""Runs a program and checks that its standard output is, line for line, the
"lines" (loss table and samples) of one committed PyTorch pretraining run
(tests/ref/pretrain.json, written by tools/reference/pretrain.py).

    check_pretrain_output.py PROGRAM REF_JSON RUN_NAME -- ARGS...
    check_pretrain_output.py --cli TAPEGRAD REF_JSON RUN_NAME TEXT [EXTRA...]

With --cli the program is `tapegrad pretrain --text TEXT` with the run's
settings as options, then EXTRA (--composed, --threads N, ...).

    check_pretrain_output.py --tol X --cli TAPEGRAD REF_JSON RUN_NAME TEXT [EXTRA...]

compares numbers instead of lines (a policy that is not PyTorch's bits,
--precision fast or bf16): the run's --json rows, every train and val loss
within X of PyTorch's, the same steps and tokens seen, and "precision" in
the JSON as EXTRA asks.

--first-epoch (first, the instrumented build's quick form): the run's first
epoch only (--epochs 1 with --cli; a PROGRAM is given the same by its
ARGS), checked against PyTorch's lines or rows up to the end of that epoch
(its sample included). A run with a constant learning rate, as these are,
trains its first epoch the same whatever --epochs says.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_run_args  # noqa: E402


def cli_args(run, text):
    c = run["config"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    model = decoder_run_args.model_args(run, root)
    if model is None:
        model = ["--seed", run["seed"], "--vocab", c["vocab_size"], "--context", c["context_length"],
                 "--emb", c["emb_dim"], "--heads", c["n_heads"], "--layers", c["n_layers"],
                 "--dropout", repr(c["drop_rate"])] + (["--qkv-bias"] if c["qkv_bias"] else [])
    a = ["pretrain", "--text", text] + model + ["--batch", run["batch"],
         "--epochs", run["epochs"], "--lr", repr(run["lr"]), "--weight-decay", repr(run["weight_decay"]),
         "--eval-freq", run["eval_freq"], "--eval-iter", run["eval_iter"],
         "--train-ratio", repr(run["train_ratio"]), "--stride", run["stride"], "--start", run["start"],
         "--sample-tokens", run["sample_tokens"]]
    return [str(x) for x in a]


def check_tol(prog, args, run, tol):
    p = subprocess.run([prog] + args + ["--json"], capture_output=True, timeout=1200)
    if p.returncode != 0:
        print("exit status %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()))
        return 1
    got = json.loads(p.stdout.decode("utf-8").strip().splitlines()[-1])
    want_prec = args[args.index("--precision") + 1] if "--precision" in args else "exact"
    bad = 0 if got.get("precision") == want_prec else 1
    if bad:
        print("precision %r, expected %r" % (got.get("precision"), want_prec))
    rows, ref = got["rows"], run["rows"]
    if len(rows) != len(ref):
        print("%d rows, PyTorch's run has %d" % (len(rows), len(ref)))
        return 1
    worst = 0.0
    for g, w in zip(rows, ref):
        if (g["epoch"], g["step"], g["tokens_seen"]) != (w["epoch"], w["step"], w["tokens_seen"]):
            print("row %r differs from PyTorch's %r" % (g, w))
            bad += 1
        for k in ("train_loss", "val_loss"):
            d = abs(g[k] - w[k])
            worst = max(worst, d)
            if not d <= tol:
                print("Ep %d step %d %s: %.6f, PyTorch %.6f (|d| %.2e > %g)" % (g["epoch"], g["step"], k, g[k], w[k], d, tol))
                bad += 1
    print("%d rows, largest difference from PyTorch's %.2e (tolerance %g, %s)" % (len(rows), worst, tol, run["name"]))
    return 1 if bad else 0


def first_epoch(run):
    """The run cut to its first epoch: rows, lines (to the first sample) and epochs."""
    lines = run["lines"]
    end = next((i + 1 for i, x in enumerate(lines) if not x.startswith("Ep ")), len(lines))
    return dict(run, epochs=1, rows=[r for r in run["rows"] if r["epoch"] == 1], lines=lines[:end])


def main():
    argv = sys.argv[1:]
    print(decoder_run_args.blas_kernels())
    first = argv[:1] == ["--first-epoch"]
    if first:
        argv = argv[1:]
    tol = None
    if argv[:1] == ["--tol"]:
        tol = float(argv[1])
        argv = argv[2:]
    cli = argv[:1] == ["--cli"]
    if cli:
        argv = argv[1:]
    prog, ref, name = argv[:3]
    with open(ref, encoding="utf-8") as f:
        data = json.load(f)
    runs = {r["name"]: r for key in ("runs", "pretrain") for r in data.get(key, [])}
    run = first_epoch(runs[name]) if first else runs[name]
    if cli:
        try:
            args = cli_args(run, argv[3]) + argv[4:]
        except decoder_run_args.Skip as e:
            print("skipped: %s" % e)
            return 77
    else:
        args = argv[4:] if argv[3:4] == ["--"] else argv[3:]
    if tol is not None:
        return check_tol(prog, args, run, tol)
    want = run["lines"]
    p = subprocess.run([prog] + args, capture_output=True, timeout=1200)
    got = p.stdout.decode("utf-8", errors="replace").splitlines()
    if p.returncode != 0:
        print("exit status %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()))
        return 1
    bad = 0
    for i in range(max(len(want), len(got))):
        w = want[i] if i < len(want) else "<none>"
        g = got[i] if i < len(got) else "<none>"
        if w != g:
            bad += 1
            print("line %d differs:\n  PyTorch:  %s\n  tapegrad: %s" % (i + 1, w, g))
    print("%d of %d lines equal PyTorch's (%s)" % (len(want) - bad, len(want), name))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
