#!/usr/bin/env python3
"""Runs a program and checks that its standard output is, line for line, the
"lines" (loss table and samples) of one committed PyTorch pretraining run.

    check_pretrain_output.py PROGRAM REF_JSON RUN_NAME -- ARGS...
"""
import json
import subprocess
import sys


def main():
    prog, ref, name = sys.argv[1:4]
    args = sys.argv[5:] if sys.argv[4:5] == ["--"] else sys.argv[4:]
    with open(ref, encoding="utf-8") as f:
        runs = {r["name"]: r for r in json.load(f)["runs"]}
    want = runs[name]["lines"]
    p = subprocess.run([prog] + args, capture_output=True, timeout=600)
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
