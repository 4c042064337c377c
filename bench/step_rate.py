#!/usr/bin/python3
"""The training step's rate against the machine's sgemm rate, measured in
the same run.

Usage: /usr/bin/python3 bench/step_rate.py [--tapegrad build/tools/tapegrad]
[--sgemm build/bench/sgemm_rate] [--precisions fast,bf16] [--runs 5]
[--steps 3] [--threads 2] [--against OTHER-TAPEGRAD] [--markdown]
[-- BENCH-ARGS...]

Each run is one round: OpenBLAS sgemm (2048^3, through the library tapegrad
links: build/bench/sgemm_rate), then `tapegrad bench --model gpt --json` once
per precision, each in a fresh process, then sgemm again. A round's ratio is
the step's GFLOP/s over the mean of the two sgemm rates around it, so a
machine whose speed drifts from minute to minute compares each step with the
rate of its own minute. Prints every round, then the medians: step ms,
GFLOP/s, sgemm GFLOP/s, the ratio, peak RSS. BENCH-ARGS go to every bench
(default: the GPT-2 124M step, B2 T256, as pretrain runs it); for example
`-- --config gpt2-small --batch 2 --tokens 256 --recompute`. --against
times a second build (another commit's build/tools/tapegrad) in the same
rounds, right after the first, and adds its rows ("PRECISION against").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def sgemm(exe, threads):
    out = subprocess.run([exe, "2048", "7", str(threads)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["gflops"]


def bench(exe, precision, steps, threads, extra):
    cmd = [exe, "bench", "--model", "gpt", "--precision", precision, "--steps", str(steps),
           "--threads", str(threads), "--json"] + extra
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("step_rate: %s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-400:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tapegrad", default=os.path.join(REPO, "build", "tools", "tapegrad"))
    ap.add_argument("--sgemm", default=os.path.join(REPO, "build", "bench", "sgemm_rate"))
    ap.add_argument("--precisions", default="fast")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--against", help="a second tapegrad binary timed in the same rounds")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("extra", nargs="*", help="arguments for every bench (after --)")
    a = ap.parse_args()
    precs = [p for p in a.precisions.split(",") if p]
    bins = [(p, a.tapegrad, p) for p in precs]
    if a.against:
        bins = [x for p in precs for x in ((p, a.tapegrad, p), (p + " against", a.against, p))]
    rows = {name: [] for name, _, _ in bins}
    for r in range(a.runs):
        before = sgemm(a.sgemm, a.threads)
        got = {name: bench(exe, p, a.steps, a.threads, a.extra) for name, exe, p in bins}
        after = sgemm(a.sgemm, a.threads)
        rate = (before + after) / 2
        for p, _, _ in bins:
            j = got[p]
            rows[p].append((j["step_ms"], j["gflops"], rate, j["gflops"] / rate, j["peak_rss_mib"]))
            print("run %d %-13s step %8.1f ms  %6.1f GFLOP/s  sgemm %6.1f (%.1f, %.1f)  %3.0f%%  %7.1f MiB" %
                  (r + 1, p, j["step_ms"], j["gflops"], rate, before, after, 100 * j["gflops"] / rate,
                   j["peak_rss_mib"]), flush=True)
    sep = "|" if a.markdown else " "
    hdr = ["precision", "step ms", "GFLOP/s", "sgemm GFLOP/s", "of sgemm", "peak RSS MiB"]
    print()
    print((sep + " " + (" " + sep + " ").join(hdr) + " " + sep) if a.markdown else "  ".join(hdr))
    if a.markdown:
        print("|" + "---|" * len(hdr))
    for p, _, _ in bins:
        cols = list(zip(*rows[p]))
        cells = [p, "%.1f" % statistics.median(cols[0]), "%.1f" % statistics.median(cols[1]),
                 "%.1f" % statistics.median(cols[2]), "%.0f%%" % (100 * statistics.median(cols[3])),
                 "%.1f" % max(cols[4])]
        print(("| " + " | ".join(cells) + " |") if a.markdown else "  ".join(cells))


if __name__ == "__main__":
    main()
