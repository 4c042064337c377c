#!/usr/bin/env python3
"""Runs `tapegrad finetune` with the settings of one committed PyTorch
fine-tuning run (tests/ref/finetune.json, written by
tools/reference/finetune.py; tests/ref/dpo.json, by tools/reference/dpo.py)
and checks that its standard output is, line for line, the run's "lines"
(the book's loss table, accuracies, samples and responses).

    check_finetune_output.py --cli TAPEGRAD REF_JSON RUN_NAME [EXTRA...]

The program is `TAPEGRAD finetune classify|instruct|dpo` (the run's "kind")
with the run's settings as options, then EXTRA (--threads N, ...). The run's
fixtures (CSV files, instruction JSON) are named relative to REF_JSON's
folder, a dpo run's "data" relative to the source tree (two folders above
REF_JSON's). A run that starts from pretrained weights
("init_pretrain_args") first runs `TAPEGRAD pretrain <init_pretrain_args>
--save FILE` in a temporary folder (its --text relative to the source tree),
checks that pretraining's lines are PyTorch's, and passes `--init FILE`
(for dpo, the option the run's "pretrained" names: --load or --reference).
With --bits a dpo run also passes --json and its numbers must equal
PyTorch's to the bit (the --tol 0 comparison below): its rewards print with
three decimals. (The instrumented build, compiled without -march=native,
rounds a few rewards otherwise at 1e-7 and compares the lines alone.)

    check_finetune_output.py PROGRAM REF_JSON RUN_NAME -- ARGS...

runs PROGRAM ARGS instead (the examples, examples/classify.c and
examples/instruct.c, which hard-code a run's settings).

    check_finetune_output.py --tol X --cli TAPEGRAD REF_JSON RUN_NAME [EXTRA...]

compares numbers instead of lines (a policy that is not PyTorch's bits,
--precision fast or bf16): the --json line's rows (every train and val loss
within X of PyTorch's, the same epochs, steps and examples or tokens seen),
the accuracies within X, the same number of trainable parameters and of
responses, and "precision" as EXTRA asks. For dpo the rows' four rewards
(train and val, chosen and rejected) are within X too, and so are "before"'s
losses and reward margins.

Output is split at "\\n" only (not str.splitlines): a generated text may hold
"\\r" or U+2028 inside one printed line.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_run_args  # noqa: E402

TIMEOUT = 1200


def model_args(run):
    c = run["config"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    decoder = decoder_run_args.model_args(run, root)
    if decoder is not None:
        return decoder
    a = ["--seed", run["seed"], "--vocab", c["vocab_size"], "--context", c["context_length"],
         "--emb", c["emb_dim"], "--heads", c["n_heads"], "--layers", c["n_layers"],
         "--dropout", repr(c["drop_rate"])]
    if c["qkv_bias"]:
        a.append("--qkv-bias")
    return a


def train_args(run):
    return ["--epochs", run["epochs"], "--batch", run["batch"], "--lr", repr(run["lr"]),
            "--weight-decay", repr(run["weight_decay"]), "--eval-freq", run["eval_freq"],
            "--eval-iter", run["eval_iter"]]


def number(x):
    return repr(x) if isinstance(x, float) else str(x)


def cli_args(run, base, root, init=None):
    """The finetune command line for a run; fixtures relative to base, a dpo
    run's data relative to root (the source tree)."""
    if run["kind"] == "classify":
        a = ["finetune", "classify", "--train", os.path.join(base, run["train"]),
             "--val", os.path.join(base, run["val"]), "--test", os.path.join(base, run["test"])]
        a += model_args(run) + train_args(run)
        if run["max_length"] is not None:
            a += ["--max-length", run["max_length"]]
    elif run["kind"] == "dpo":
        a = ["finetune", "dpo", "--data", os.path.join(root, run["data"]), "--max-entries", run["max_entries"]]
        a += model_args(run) + train_args(run)
        a += ["--beta", number(run["beta"]), "--allowed-max-length", run["allowed_max_length"],
              "--max-new-tokens", run["max_new_tokens"]]
        if run["format"] != "alpaca":
            a += ["--format", run["format"]]
    else:
        a = ["finetune", "instruct", "--data", os.path.join(base, run["data"]), "--limit", run["limit"]]
        a += model_args(run) + train_args(run)
        a += ["--allowed-max-length", run["allowed_max_length"], "--max-new-tokens", run["max_new_tokens"]]
        if run.get("format"):
            a += ["--format", run["format"]]
    if run["lora_rank"] is not None:
        a += ["--lora-rank", number(run["lora_rank"]), "--lora-alpha", number(run["lora_alpha"])]
    if init is not None:
        a += [run["pretrained"] if run["kind"] == "dpo" else "--init", init]
    return [str(x) for x in a]


def out_lines(stdout):
    text = stdout.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n") if text else []


def compare_lines(want, got, what):
    bad = 0
    for i in range(max(len(want), len(got))):
        w = want[i] if i < len(want) else "<none>"
        g = got[i] if i < len(got) else "<none>"
        if w != g:
            if bad == 0:
                print("%s: line %d differs:\n  PyTorch:  %s\n  tapegrad: %s" % (what, i + 1, w, g))
            bad += 1
    print("%d of %d lines equal PyTorch's (%s; %d differ)" % (max(len(want), len(got)) - bad, len(want), what, bad))
    return bad


def pretrain_init(prog, run, root, tmp):
    """Runs the pretraining the run starts from; the saved file's path, or None."""
    args = list(run["init_pretrain_args"])
    i = args.index("--text")
    if not os.path.isabs(args[i + 1]):
        args[i + 1] = os.path.join(root, args[i + 1])
    path = os.path.join(tmp, "init.safetensors")
    p = subprocess.run([prog, "pretrain"] + args + ["--save", path], capture_output=True, timeout=TIMEOUT, cwd=tmp)
    if p.returncode != 0:
        print("pretrain: exit status %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()))
        return None
    if compare_lines(run["init_pretrain_lines"], out_lines(p.stdout), run["name"] + " pretraining"):
        return None
    return path


def close(g, w, tol):
    return isinstance(g, (int, float)) and abs(g - w) <= tol


def check_tol(prog, args, run, tol, got=None):
    if got is None:
        p = subprocess.run([prog] + args + ["--json"], capture_output=True, timeout=TIMEOUT)
        if p.returncode != 0:
            print("exit status %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()))
            return 1
        got = json.loads(out_lines(p.stdout)[-1])
    want_prec = args[args.index("--precision") + 1] if "--precision" in args else "exact"
    bad = 0
    if got.get("precision") != want_prec:
        print("precision %r, expected %r" % (got.get("precision"), want_prec))
        bad += 1
    if got.get("trainable_parameters") != run["trainable_parameters"]:
        print("%r trainable parameters, PyTorch's model has %d" % (got.get("trainable_parameters"),
                                                                   run["trainable_parameters"]))
        bad += 1
    seen = "examples_seen" if run["kind"] == "classify" else "tokens_seen"
    numbers = ("train_loss", "val_loss")
    if run["kind"] == "dpo":
        numbers += ("train_chosen_reward", "train_rejected_reward", "val_chosen_reward", "val_rejected_reward")
    rows, ref = got["rows"], run["rows"]
    if len(rows) != len(ref):
        print("%d rows, PyTorch's run has %d" % (len(rows), len(ref)))
        return 1
    worst = 0.0
    for g, w in zip(rows, ref):
        if (g["epoch"], g["step"], g.get(seen)) != (w["epoch"], w["step"], w[seen]):
            print("row %r differs from PyTorch's %r" % (g, w))
            bad += 1
        for k in numbers:
            if not isinstance(g.get(k), (int, float)):
                print("Ep %d step %d: %s is %r" % (g["epoch"], g["step"], k, g.get(k)))
                bad += 1
                continue
            d = abs(g[k] - w[k])
            worst = max(worst, d)
            if not d <= tol:
                print("Ep %d step %d %s: %.6f, PyTorch %.6f (|d| %.2e > %g)" % (g["epoch"], g["step"], k, g[k], w[k], d, tol))
                bad += 1
    if run["kind"] == "dpo":
        before = got.get("before") or {}
        for k, w in run["before"].items():
            if not close(before.get(k), w, tol):
                print("before training, %s: %r, PyTorch %r (tolerance %g)" % (k, before.get(k), w, tol))
                bad += 1
    if run["kind"] == "classify":
        for k in ("train_accuracy", "val_accuracy"):
            if len(got.get(k, [])) != len(run[k]):
                print("%s: %d values, PyTorch's run has %d" % (k, len(got.get(k, [])), len(run[k])))
                bad += 1
                continue
            for e, (g, w) in enumerate(zip(got[k], run[k])):
                if not close(g, w, tol):
                    print("epoch %d %s: %r, PyTorch %r (tolerance %g)" % (e + 1, k, g, w, tol))
                    bad += 1
        if not close(got.get("test_accuracy"), run["test_accuracy"], tol):
            print("test_accuracy %r, PyTorch %r (tolerance %g)" % (got.get("test_accuracy"), run["test_accuracy"], tol))
            bad += 1
    else:
        resp = got.get("responses", [])
        if len(resp) != len(run["responses"]):
            print("%d responses, PyTorch's run has %d" % (len(resp), len(run["responses"])))
            bad += 1
        else:
            same = sum(g == w for g, w in zip(resp, run["responses"]))
            print("%d of %d responses equal PyTorch's" % (same, len(resp)))
    what = "loss and reward" if run["kind"] == "dpo" else "loss"
    print("%d rows, largest %s difference from PyTorch's %.2e (tolerance %g, %s)" % (len(rows), what, worst, tol, run["name"]))
    return 1 if bad else 0


def main():
    argv = sys.argv[1:]
    print(decoder_run_args.blas_kernels())
    tol = None
    cli = False
    bits = False
    while argv[:1] in (["--tol"], ["--cli"], ["--bits"]):
        if argv[0] == "--tol":
            tol = float(argv[1])
            argv = argv[2:]
        elif argv[0] == "--bits":
            bits = True
            argv = argv[1:]
        else:
            cli = True
            argv = argv[1:]
    if not cli and len(argv) >= 4 and argv[3] == "--":
        # a program of its own (examples/classify.c): PROGRAM ARGS, its lines
        prog, ref, name = argv[:3]
        with open(ref, encoding="utf-8") as f:
            run = {r["name"]: r for r in json.load(f)["runs"]}[name]
        p = subprocess.run([prog] + argv[4:], capture_output=True, timeout=TIMEOUT)
        if p.returncode != 0:
            print("exit status %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()))
            return 1
        return 1 if compare_lines(run["lines"], out_lines(p.stdout), name) else 0
    if not cli or len(argv) < 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    prog, ref, name = argv[:3]
    if os.sep in prog:  # the pretraining runs in a temporary folder
        prog = os.path.abspath(prog)
    extra = argv[3:]
    with open(ref, encoding="utf-8") as f:
        data = json.load(f)
    runs = {r["name"]: r for key in ("runs", "instruct") for r in data.get(key, [])}
    run = runs[name]
    base = os.path.dirname(os.path.abspath(ref))
    root = os.path.dirname(os.path.dirname(base))
    with tempfile.TemporaryDirectory(prefix="check_finetune_") as tmp:
        init = None
        if run["init_pretrain_args"] is not None:
            init = pretrain_init(prog, run, root, tmp)
            if init is None:
                return 1
        try:
            args = cli_args(run, base, root, init) + extra
        except decoder_run_args.Skip as e:
            print("skipped: %s" % e)
            return 77
        if tol is not None:
            return check_tol(prog, args, run, tol)
        # DPO's EXACT runs also compare --json's numbers to the bit (tolerance 0):
        # its rewards print with three decimals only
        dpo = run["kind"] == "dpo" and bits
        p = subprocess.run([prog] + args + (["--json"] if dpo else []), capture_output=True, timeout=TIMEOUT)
        if p.returncode != 0:
            print("exit status %d: %s" % (p.returncode, p.stderr.decode(errors="replace").strip()))
            return 1
        lines = out_lines(p.stdout)
        bad = compare_lines(run["lines"], lines[:-1] if dpo else lines, name)
        if dpo and not bad:
            bad = check_tol(prog, args, run, 0.0, json.loads(lines[-1]))
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
