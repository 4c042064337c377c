#!/usr/bin/env python3
"""Runs a program and checks that its standard output is, line for line, the
"lines" (loss table and samples) of one committed PyTorch pretraining run
(tests/ref/pretrain.json, written by tools/reference/pretrain.py).

    check_pretrain_output.py PROGRAM REF_JSON RUN_NAME -- ARGS...
    check_pretrain_output.py --cli TAPEGRAD REF_JSON RUN_NAME TEXT [EXTRA...]

With --cli the program is `tapegrad pretrain --text TEXT` with the run's
settings as options, then EXTRA (--composed, --threads N, ...).
"""
import json
import subprocess
import sys


def cli_args(run, text):
    c = run["config"]
    a = ["pretrain", "--text", text, "--seed", run["seed"], "--vocab", c["vocab_size"],
         "--context", c["context_length"], "--emb", c["emb_dim"], "--heads", c["n_heads"],
         "--layers", c["n_layers"], "--dropout", repr(c["drop_rate"]), "--batch", run["batch"],
         "--epochs", run["epochs"], "--lr", repr(run["lr"]), "--weight-decay", repr(run["weight_decay"]),
         "--eval-freq", run["eval_freq"], "--eval-iter", run["eval_iter"],
         "--train-ratio", repr(run["train_ratio"]), "--stride", run["stride"], "--start", run["start"],
         "--sample-tokens", run["sample_tokens"]]
    if c["qkv_bias"]:
        a.append("--qkv-bias")
    return [str(x) for x in a]


def main():
    argv = sys.argv[1:]
    cli = argv[:1] == ["--cli"]
    if cli:
        argv = argv[1:]
    prog, ref, name = argv[:3]
    with open(ref, encoding="utf-8") as f:
        runs = {r["name"]: r for r in json.load(f)["runs"]}
    run = runs[name]
    if cli:
        args = cli_args(run, argv[3]) + argv[4:]
    else:
        args = argv[4:] if argv[3:4] == ["--"] else argv[3:]
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
