#!/usr/bin/env python3
"""Checks that the README quotes its example programs whole.

Every code block preceded by a marker line `<!-- examples/NAME.c -->` must be
the text of that file exactly, so the programs the README shows are the ones
the test suite compiles and runs (suite `examples`).

    tests/readme_examples.py SOURCE_ROOT NAME.c [NAME.c ...]

The names given must each be quoted once.
"""
import pathlib
import re
import sys


def main():
    root = pathlib.Path(sys.argv[1])
    want = sys.argv[2:]
    readme = (root / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^<!-- (examples/[\w.]+) -->\n```c\n(.*?)^```$", readme, re.S | re.M)
    quoted = {}
    for path, body in blocks:
        quoted.setdefault(path, []).append(body)
    passed = failed = 0
    for name in want:
        path = "examples/" + name
        bodies = quoted.get(path, [])
        text = (root / path).read_text(encoding="utf-8")
        if len(bodies) != 1:
            print("FAIL %s: quoted %d times in README.md (want once, after <!-- %s -->)" % (path, len(bodies), path))
            failed += 1
        elif bodies[0] != text:
            a, b = bodies[0].splitlines(), text.splitlines()
            line = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            print("FAIL %s: README.md's copy differs from the file at line %d" % (path, line + 1))
            failed += 1
        else:
            print("ok   %s (%d lines)" % (path, len(text.splitlines())))
            passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
