#!/usr/bin/python3
"""The scaling model of README.md ("Scaling, on paper"): data-parallel
GPT-2 124M on N ranks, from what `tapegrad bench --model gpt` measures here.

Per repeat, alternating: one process (`--batch B`, every core), then
`mpirun -np 2` with the global batch 2B (B rows per rank, the cores shared).
Medians over the repeats. From the one process: the step time T and its
backward; from the two ranks: the buckets' bytes in all-reduce order, the
time a step waits after backward, and the same all-reduces alone.

A ring all-reduce of b bytes over N ranks takes 2(N-1)/N * b / bandwidth
+ 2(N-1) * latency. Full overlap: every bucket but the last is hidden while
it fits in backward, so a step waits max(0, t_rest - backward) + t_last; no
overlap: it waits for all of them. Speed-up = N T / (T + wait), the global
batch growing with N. The check: the bandwidth two ranks reach here (from
the all-reduces alone) put into both formulas, against the wait they
measure.

    /usr/bin/python3 bench/scaling_model.py [--tapegrad build/tools/tapegrad]
        [--repeat 3] [--batch 2] [--latency-us 10] [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RANKS = (2, 4, 8, 16, 32, 64)
GBITS = (10, 100)
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")


def bench(argv):
    p = subprocess.run(argv, capture_output=True, text=True, env=MPI_ENV)
    if p.returncode != 0:
        sys.exit(f"scaling_model: {' '.join(argv)}: exit status {p.returncode}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def ring_seconds(nbytes, n, bytes_per_s, latency_s):
    return 2 * (n - 1) / n * nbytes / bytes_per_s + 2 * (n - 1) * latency_s


def waits(buckets, n, bytes_per_s, latency_s, backward_s):
    """(all-reduce time, wait with full overlap, wait with none)."""
    t = [ring_seconds(b, n, bytes_per_s, latency_s) for b in buckets]
    rest, last = sum(t[:-1]), t[-1]
    return sum(t), max(0.0, rest - backward_s) + last, sum(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "tools", "tapegrad"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2, help="rows per rank (2)")
    ap.add_argument("--latency-us", type=float, default=10.0)
    ap.add_argument("--json", help="also write the figures to FILE")
    a = ap.parse_args()
    if shutil.which("mpirun") is None:
        sys.exit("scaling_model: mpirun not found (apt-get install openmpi-bin): the buckets and the wait come "
                 "from two ranks")
    one, two = [], []
    for _ in range(a.repeat):
        one.append(bench([a.tapegrad, "bench", "--model", "gpt", "--batch", str(a.batch), "--json"]))
        two.append(bench(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", a.tapegrad, "bench",
                          "--model", "gpt", "--batch", str(2 * a.batch), "--json"]))

    def med(runs, key):
        return statistics.median(r[key] for r in runs) / 1e3

    T, fwd, bwd, opt = (med(one, k) for k in ("step_ms", "fwd_ms", "bwd_ms", "opt_ms"))
    buckets = two[0]["bucket_bytes"]
    total = sum(buckets)
    wait2, alone2, bwd2, step2 = (med(two, k) for k in ("wait_ms", "allreduce_ms", "bwd_ms", "step_ms"))
    lat = a.latency_us * 1e-6

    print(f"GPT-2 124M as pretrained here: {total / 1e6:.0f} MB of gradients in {len(buckets)} buckets "
          f"(first {buckets[0] / 1e6:.1f} MB, last {buckets[-1] / 1e6:.1f} MB); one process, batch {a.batch}, "
          f"{one[0]['threads']} threads: step T = {T:.2f} s (forward {fwd:.2f}, backward {bwd:.2f}, AdamW {opt:.2f}); "
          f"latency {a.latency_us:g} us per ring step; medians of {a.repeat}")
    print()
    print("| N | " + " | ".join(f"all-reduce, {g} Gbit/s | wait: overlap / none | speed-up: overlap / none"
                              for g in GBITS) + " |")
    print("|---|" + "---|---|---|" * len(GBITS))
    table = []
    for n in RANKS:
        cells, row = [], {"ranks": n}
        for g in GBITS:
            ar, full, none = waits(buckets, n, g * 1e9 / 8, lat, bwd)
            s_full, s_none = n * T / (T + full), n * T / (T + none)
            cells.append(f"{ar:.2f} s | {full:.2f} / {none:.2f} s | {s_full:.1f} / {s_none:.1f}")
            row[f"{g}gbit"] = dict(allreduce_s=ar, wait_overlap_s=full, wait_none_s=none, speedup_overlap=s_full,
                                   speedup_none=s_none)
        table.append(row)
        print(f"| {n} | " + " | ".join(cells) + " |")

    # the check on this machine: two ranks, shared memory
    bus = 2 * (2 - 1) / 2 * total / alone2  # bytes/s the ring formula needs to give the time measured alone
    _, full2, none2 = waits(buckets, 2, bus, 0.0, bwd2)
    print()
    print(f"Two ranks here (global batch {2 * a.batch}, {two[0]['threads']} thread(s) each): step {step2:.2f} s, "
          f"backward {bwd2:.2f} s; the all-reduces alone {alone2 * 1e3:.0f} ms "
          f"({bus * 8 / 1e9:.1f} Gbit/s in the ring formula); the model predicts a wait of {full2 * 1e3:.0f} ms "
          f"with full overlap, {none2 * 1e3:.0f} ms with none; measured {wait2 * 1e3:.0f} ms "
          f"(backward hid {100 * max(0.0, 1 - wait2 / alone2):.0f}%); {sum(r['started_in_backward'] for r in two) / len(two):.0f} "
          f"of {len(buckets)} buckets started during backward")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(one=one, two=two, T=T, backward=bwd, buckets=buckets, table=table,
                           check=dict(wait_s=wait2, alone_s=alone2, predicted_overlap_s=full2,
                                      predicted_none_s=none2)), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
