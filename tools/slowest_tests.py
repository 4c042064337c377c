#!/usr/bin/env python3
"""The slowest tests of each build's last `meson test` run, from meson's own
log (BUILD/meson-logs/testlog.json): name, seconds and result, slowest first,
and the suite's total, so that a change sees where the time of .ci/run goes;
then one line for all the builds: "tests: N passed, N failed, N skipped".

    tools/slowest_tests.py [--top N] BUILD...
"""
import json
import os
import sys


def main(argv):
    top = 12
    if argv[:1] == ["--top"]:
        top = int(argv[1])
        argv = argv[2:]
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for build in argv:
        path = os.path.join(build, "meson-logs", "testlog.json")
        try:
            with open(path, encoding="utf-8") as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError) as e:
            print(f"{build}: no test log ({e})")
            continue
        total = sum(r.get("duration", 0.0) for r in rows)
        print(f"--- {build}: {len(rows)} tests, {total:.0f} s of test time; the {min(top, len(rows))} slowest:")
        for r in sorted(rows, key=lambda r: -r.get("duration", 0.0))[:top]:
            print(f"  {r.get('duration', 0.0):7.1f} s  {r.get('name', '?'):58} {r.get('result', '?')}")
        for r in rows:
            res = r.get("result", "")
            counts["passed" if res in ("OK", "EXPECTEDFAIL") else "skipped" if res == "SKIP" else "failed"] += 1
    print(f"tests: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
