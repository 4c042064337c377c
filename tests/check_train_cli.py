#!/usr/bin/env python3
"""What the library's one training loop gives every training command
(include/tapegrad/train.h), checked through the tapegrad executable:

  - many processes: `mpirun -np 2 tapegrad finetune classify|instruct|dpo`
    prints the one-process run's rows (losses, and DPO's rewards, within 1e-6
    relative, the same epochs, steps and examples or tokens seen), accuracies,
    DPO's values before training and the responses, with dropout 0 and 0.1;
  - resume: `finetune classify`, `finetune instruct` and `finetune dpo` runs
    killed with SIGKILL after a checkpoint (after an epoch, and in the middle
    of one with --checkpoint-every 1) and resumed print the uninterrupted
    run's lines exactly; a changed setting is refused;
  - accumulation: with dropout 0, `--accumulate 2 --batch 4` gives `--batch
    8`'s rows within 1e-5 (relative) for pretrain and finetune classify, on
    sets whose sizes are multiples of 8 and evaluation over whole loaders.

    check_train_cli.py [--quick] TAPEGRAD FINETUNE_REF_DIR TEXT

--quick (the instrumented build, several times slower): dropout 0.1 only on 2
ranks, the resume with a checkpoint every step only, the classifier's
accumulation only, and no DPO run (its vocabulary-wide heads are the slowest;
the release build runs them, dropout 0.1 on 2 ranks and the resume with a
checkpoint every step). The parts under mpirun say they were skipped when mpirun
is not installed.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TIMEOUT = 900
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none", OMP_NUM_THREADS="1")
TINY = ["--context", "64", "--emb", "16", "--heads", "2", "--layers", "2", "--threads", "1", "--seed", "123"]
failures = []


def run(argv, timeout=TIMEOUT):
    p = subprocess.run([str(a) for a in argv], capture_output=True, timeout=timeout, env=ENV)
    return p.returncode, p.stdout.decode("utf-8", errors="replace"), p.stderr.decode("utf-8", errors="replace")


def mpirun(n, argv):
    return ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(n)] + argv


def result(argv, what):
    """The --json line of a run, or None (a failure recorded)."""
    rc, out, err = run(argv + ["--json"])
    if rc != 0:
        failures.append(f"{what}: exit status {rc}: {err.strip()[-400:]}")
        return None
    return json.loads(out.strip().split("\n")[-1])


def same_rows(got, want, seen, tol, what):
    if got is None or want is None:
        return
    if len(got["rows"]) != len(want["rows"]):
        failures.append(f"{what}: {len(got['rows'])} rows, expected {len(want['rows'])}")
        return
    worst = 0.0
    for g, w in zip(got["rows"], want["rows"]):
        for k in ("epoch", "step", seen):
            if g[k] != w[k]:
                failures.append(f"{what}: row of step {w['step']}: {k} {g[k]}, expected {w[k]}")
        for k in ("train_loss", "val_loss"):
            d = abs(g[k] - w[k]) / abs(w[k])
            worst = max(worst, d)
            if d > tol:
                failures.append(f"{what}: step {w['step']} {k} {g[k]!r}, expected {w[k]!r}")
        # DPO's rewards are differences of mean log-probabilities (about -11
        # here): the ranks' forwards on half batches round those to float32
        # otherwise, by a few 1e-6 absolute
        for k in (k for k in DPO_COLUMNS if k in w):
            if abs(g[k] - w[k]) > REWARD_TOL:
                failures.append(f"{what}: step {w['step']} {k} {g[k]!r}, expected {w[k]!r}")
    for k in ("before",):
        for c, v in (want.get(k) or {}).items():
            if abs(got.get(k, {}).get(c, float("inf")) - v) > (1e-6 * abs(v) if c.endswith("loss") else REWARD_TOL):
                failures.append(f"{what}: {k} {c} {got.get(k, {}).get(c)!r}, expected {v!r}")
    for k in ("train_accuracy", "val_accuracy", "test_accuracy", "responses"):
        if k in want and got.get(k) != want[k]:
            failures.append(f"{what}: {k} {got.get(k)!r}, expected {want[k]!r}")
    print(f"{what}: {len(got['rows'])} rows, worst relative loss difference {worst:.2e}")


def classify_args(ref, train="train.csv", val="val.csv", test="test.csv"):
    return ["finetune", "classify", "--train", os.path.join(ref, train), "--val", os.path.join(ref, val),
            "--test", os.path.join(ref, test), "--epochs", "2", "--eval-freq", "2", "--eval-iter", "2",
            "--lr", "5e-4"] + TINY


def instruct_args(ref):
    # 24 entries: 20 training, 2 test, 2 validation; 5 batches of 4 an epoch
    return ["finetune", "instruct", "--data", os.path.join(ref, "instruction-40.json"), "--limit", "24",
            "--batch", "4", "--epochs", "2", "--eval-freq", "2", "--eval-iter", "2", "--lr", "5e-4",
            "--max-new-tokens", "8", "--allowed-max-length", "64"] + TINY


def dpo_args(data):
    # 14 entries: 11 training, 1 test, 2 validation; 5 batches of 2 an epoch
    return ["finetune", "dpo", "--data", data, "--max-entries", "14", "--batch", "2", "--epochs", "2",
            "--eval-freq", "2", "--eval-iter", "1", "--lr", "5e-4", "--max-new-tokens", "8"] + TINY + ["--context", "192"]


REWARD_TOL = 1e-5
DPO_COLUMNS = ("train_chosen_reward", "train_rejected_reward", "val_chosen_reward", "val_rejected_reward")
QUICK = False


def many_processes(tg, ref, data):
    if shutil.which("mpirun") is None:
        print("skipped: many processes (mpirun not found)")
        return
    kinds = (("classify", classify_args(ref), "examples_seen"), ("instruct", instruct_args(ref), "tokens_seen"))
    if not QUICK:
        kinds += (("dpo", dpo_args(data), "tokens_seen"),)
    for kind, args, seen in kinds:
        for p in ("0.1",) if QUICK or kind == "dpo" else ("0", "0.1"):
            a = [tg] + args + ["--dropout", p]
            one = result(a, f"{kind} dropout {p}, 1 process")
            two = result(mpirun(2, a), f"{kind} dropout {p}, 2 ranks")
            same_rows(two, one, seen, 1e-6, f"{kind} dropout {p}, 2 ranks against 1")
            if two is not None and two.get("ranks") != 2:
                failures.append(f"{kind} dropout {p}: the 2-rank run's JSON says ranks {two.get('ranks')}")


def killed_and_resumed(tg, args, tmp, what, every):
    """The uninterrupted run's stdout against a run killed after its first
    checkpoint and resumed."""
    rc, full, err = run([tg] + args)
    if rc != 0:
        failures.append(f"{what}: exit status {rc}: {err.strip()[-300:]}")
        return
    ck = os.path.join(tmp, "run.ckpt")
    if os.path.exists(ck):
        os.remove(ck)
    extra = ["--checkpoint", ck] + (["--checkpoint-every", "1"] if every else [])
    errf = open(os.path.join(tmp, "killed.err"), "w+")
    p = subprocess.Popen([str(a) for a in [tg] + args + extra], stdout=subprocess.DEVNULL, stderr=errf, env=ENV)
    t0 = time.time()
    while not os.path.exists(ck) and p.poll() is None and time.time() - t0 < TIMEOUT:
        time.sleep(0.01)
    killed = p.poll() is None
    if killed:
        p.send_signal(signal.SIGKILL)
    p.wait()
    errf.seek(0)
    err = errf.read()
    errf.close()
    if not os.path.exists(ck):
        failures.append(f"{what}: no checkpoint was written (exit status {p.returncode}: {err.strip()[-300:]})")
        return
    rc, resumed, err = run([tg] + args + ["--resume", ck, "--checkpoint", ck])
    if rc != 0:
        failures.append(f"{what}: the resumed run: exit status {rc}: {err.strip()[-300:]}")
    elif resumed != full:
        a, b = full.split("\n"), resumed.split("\n")
        i = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        failures.append(f"{what}: the resumed run's line {i + 1} differs: {b[i] if i < len(b) else '<none>'!r}, "
                        f"uninterrupted {a[i] if i < len(a) else '<none>'!r}")
    else:
        print(f"{what}: killed {'during the run' if killed else 'after it ended'}, resumed: "
              f"{len(full.splitlines())} lines equal")


def resume(tg, ref, tmp, data):
    kinds = (("classify", classify_args(ref)), ("instruct", instruct_args(ref)))
    if not QUICK:
        kinds += (("dpo", dpo_args(data)),)
    for kind, args in kinds:
        for every in (True,) if QUICK or kind == "dpo" else (False, True):
            killed_and_resumed(tg, args + ["--dropout", "0.1"], tmp, f"{kind} resume"
                               + (" (checkpoint every step)" if every else ""), every)
    # a changed setting is refused, naming it
    ck = os.path.join(tmp, "run.ckpt")
    a = [tg] + classify_args(ref) + ["--dropout", "0.1"]
    rc, out, err = run(a + ["--epochs", "1", "--checkpoint", ck])
    if rc == 0:
        rc, out, err = run(a + ["--lr", "1e-3", "--resume", ck])
    if rc != 2 or "--lr" not in err or len(err.strip().split("\n")) != 1:
        failures.append(f"resume with another --lr: exit {rc}, {err.strip()!r}")


def csv_rows(path):
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    import csv
    import io
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def write_csv(path, header, rows):
    import csv
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def accumulation(tg, ref, text, tmp):
    # classify: 48 training rows, 16 validation and 8 test rows (multiples of 8)
    header, rows = csv_rows(os.path.join(ref, "train.csv"))
    write_csv(os.path.join(tmp, "tr.csv"), header, rows[:48])
    write_csv(os.path.join(tmp, "va.csv"), header, rows[:16])
    write_csv(os.path.join(tmp, "te.csv"), header, rows[16:24])
    c = [tg] + classify_args(tmp, "tr.csv", "va.csv", "te.csv") + ["--dropout", "0", "--eval-iter", "100"]
    same_rows(result(c + ["--batch", "4", "--accumulate", "2"], "classify --accumulate 2 --batch 4"),
              result(c + ["--batch", "8"], "classify --batch 8"), "examples_seen", 1e-5,
              "classify --accumulate 2 --batch 4 against --batch 8")
    if QUICK:
        return
    # pretrain: context 48 and stride 64 give 72 training and 8 validation
    # windows of the-verdict.txt
    p = [tg, "pretrain", "--text", text, "--epochs", "1", "--eval-freq", "2", "--eval-iter", "100",
         "--dropout", "0", "--sample-tokens", "5", "--context", "48", "--stride", "64", "--emb", "16", "--heads", "2",
         "--layers", "2", "--threads", "1"]
    want = result(p + ["--batch", "8"], "pretrain --batch 8")
    got = result(p + ["--batch", "4", "--accumulate", "2"], "pretrain --accumulate 2 --batch 4")
    if want is not None and got is not None:
        want.pop("samples", None), got.pop("samples", None)
    same_rows(got, want, "tokens_seen", 1e-5, "pretrain --accumulate 2 --batch 4 against --batch 8")


def main():
    global QUICK
    args = sys.argv[1:]
    if args and args[0] == "--quick":
        QUICK, args = True, args[1:]
    tg, ref, text = args[0], args[1], args[2]
    tmp = tempfile.mkdtemp(prefix="tapegrad-train-")
    try:
        accumulation(tg, ref, text, tmp)
        data = os.path.join(os.path.dirname(os.path.abspath(text)), "preference",
                            "instruction-data-with-preference.json")
        resume(tg, ref, tmp, data)
        many_processes(tg, ref, data)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
