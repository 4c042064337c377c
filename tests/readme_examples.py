#!/usr/bin/env python3
"""Checks that the documentation quotes its example programs whole.

Every code block preceded by a marker line `<!-- examples/NAME.c -->`, in
README.md or any page docs/*.md, must be the text of that file exactly, so
the programs the documentation shows are the ones the test suite compiles
and runs (suite `examples`).

    tests/readme_examples.py SOURCE_ROOT NAME.c [NAME.c ...]

The names given must each be quoted once in all those files together.
"""
import pathlib
import re
import sys


def documents(root):
    """README.md, then docs/*.md in name order, as (path relative to root, text)."""
    paths = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    return [(p.relative_to(root).as_posix(), p.read_text(encoding="utf-8")) for p in paths if p.is_file()]


def main():
    root = pathlib.Path(sys.argv[1])
    want = sys.argv[2:]
    docs = documents(root)
    quoted = {}
    for doc, text in docs:
        for m in re.finditer(r"^<!-- (examples/[\w.]+) -->\n```c\n(.*?)^```$", text, re.S | re.M):
            where = "%s:%d" % (doc, text.count("\n", 0, m.start()) + 1)
            quoted.setdefault(m.group(1), []).append((where, m.group(2)))
    searched = ", ".join(doc for doc, _ in docs)
    passed = failed = 0
    for name in want:
        path = "examples/" + name
        quotes = quoted.get(path, [])
        text = (root / path).read_text(encoding="utf-8")
        if len(quotes) != 1:
            where = " (at %s)" % ", ".join(w for w, _ in quotes) if quotes else ""
            print("FAIL %s: quoted %d times%s (want once, after <!-- %s -->, in one of %s)"
                  % (path, len(quotes), where, path, searched))
            failed += 1
            continue
        where, body = quotes[0]
        if body != text:
            a, b = body.splitlines(), text.splitlines()
            line = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            print("FAIL %s: the copy at %s differs from the file at the file's line %d" % (path, where, line + 1))
            failed += 1
        else:
            print("ok   %s (%d lines, quoted at %s)" % (path, len(text.splitlines()), where))
            passed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
