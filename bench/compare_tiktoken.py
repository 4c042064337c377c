#!/usr/bin/python3
"""Tokenizer speed of `tapegrad tokenize` and the npm `tiktoken` package (the
Rust tiktoken compiled to WASM) on the same text, whole process: start-up,
reading the vocabulary, encoding and printing the ids.

The text is --text PATH, or data/the-verdict.txt repeated to --mb megabytes
(5). Each side runs in a fresh process, the two alternate for --runs runs,
and the table gives median wall time and MB/s, the encode-only MB/s each one
reports, and the ratio. The ids must be equal (the run fails otherwise).

tiktoken must be installed with npm in --tiktoken-dir (default
$TIKTOKEN_DIR), e.g. `mkdir /opt/tt && cd /opt/tt && npm install tiktoken`.

    /usr/bin/python3 bench/compare_tiktoken.py --tiktoken-dir DIR
        [--tapegrad build/tools/tapegrad] [--text PATH | --mb 5] [--runs 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(cmd, **kw):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, check=True, **kw)
    return time.perf_counter() - t0, r.stdout, r.stderr.decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tapegrad", default=os.path.join(HERE, "..", "build", "tools", "tapegrad"))
    ap.add_argument("--tiktoken-dir", default=os.environ.get("TIKTOKEN_DIR"))
    ap.add_argument("--text")
    ap.add_argument("--mb", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if not a.tiktoken_dir or not os.path.isdir(os.path.join(a.tiktoken_dir, "node_modules", "tiktoken")):
        sys.exit("compare_tiktoken: give --tiktoken-dir, a directory where `npm install tiktoken` was run")
    tmp = None
    if a.text:
        path = a.text
    else:
        with open(os.path.join(HERE, "..", "data", "the-verdict.txt"), "rb") as f:
            one = f.read()
        data = one * (int(a.mb * 1e6) // len(one) + 1)
        tmp = tempfile.NamedTemporaryFile(suffix=".txt", delete=False)
        tmp.write(data[:int(a.mb * 1e6)].decode("utf-8", "ignore").encode())
        tmp.close()
        path = tmp.name
    size = os.path.getsize(path)
    script = os.path.join(HERE, "tiktoken_encode.mjs")
    wall = {"tapegrad": [], "tiktoken": []}
    enc = {"tapegrad": [], "tiktoken": []}
    ids = {}
    try:
        for r in range(a.runs):
            sec, out, err = timed([a.tapegrad, "tokenize", "--file", path],
                                  env=dict(os.environ, OMP_NUM_THREADS="1"))
            wall["tapegrad"].append(sec)
            enc["tapegrad"].append(float(err.split(" in ")[1].split(" ms")[0]) / 1e3)
            ids["tapegrad"] = out
            sec, out, err = timed(["node", script, os.path.abspath(path)], cwd=a.tiktoken_dir)
            wall["tiktoken"].append(sec)
            enc["tiktoken"].append(json.loads(err.strip().splitlines()[-1])["seconds"])
            ids["tiktoken"] = out
            print("run %d  tapegrad %.3f s  tiktoken %.3f s" % (r + 1, wall["tapegrad"][-1], wall["tiktoken"][-1]),
                  file=sys.stderr)
    finally:
        if tmp:
            os.unlink(tmp.name)
    n = len(ids["tapegrad"].split())
    same = ids["tapegrad"] == ids["tiktoken"]
    print("GPT-2 tokenizer on %.2f MB (%d ids), whole process, median of %d runs%s"
          % (size / 1e6, n, a.runs, "" if same else " -- IDS DIFFER"))
    med = {k: statistics.median(v) for k, v in wall.items()}
    for k in ("tiktoken", "tapegrad"):
        e = statistics.median(enc[k])
        print("%-9s %7.3f s  %7.1f MB/s whole process  %7.1f MB/s encoding only  %5.2fx tiktoken"
              % (k, med[k], size / 1e6 / med[k], size / 1e6 / e, med["tiktoken"] / med[k]))
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
