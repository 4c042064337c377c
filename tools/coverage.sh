#!/usr/bin/env bash
# Line and branch coverage of src/ by the test suite (gcc --coverage + gcovr):
#
#   meson setup build-cov -Db_coverage=true -Dbuildtype=debugoptimized -Dnative=false -Dwerror=false
#   meson test -C build-cov
#   gcovr -r . build-cov --filter src/ --print-summary
#
# then a per-file table (least covered first) and the functions the tests
# never enter. -Dwerror=false: warnings are the release build's job, this one
# only measures. Optimized (-O2 -g): the suite runs about a third faster than
# at -O0; a line the optimizer merged into another counts with it. Counters are reset before every run. Exit status: the test
# suite's (the report is printed either way).
#
#   tools/coverage.sh            (COVERAGE_BUILD=build-cov)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${COVERAGE_BUILD:-build-cov}

echo "=== coverage: build ($BUILD, gcc --coverage, debugoptimized) ==="
if [ ! -f "$BUILD/build.ninja" ]; then
  tools/meson-setup.sh "$BUILD" -Db_coverage=true -Dbuildtype=debugoptimized -Dnative=false -Dwerror=false
fi
ninja -C "$BUILD"
find "$BUILD" -name '*.gcda' -delete

echo "=== coverage: meson test ==="
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
rc=0
meson test -C "$BUILD" --print-errorlogs --timeout-multiplier 4 || rc=$?

echo "=== coverage: src/ per file, least covered first ==="
json=$BUILD/coverage-src.json
gcovr -r . "$BUILD" --filter 'src/' --json "$json" --exclude-unreachable-branches
python3 - "$json" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
rows = []
for f in data["files"]:
    lines = [l for l in f["lines"] if not l.get("gcovr/noncode") and not l.get("gcovr/excluded")]
    lt, lc = len(lines), sum(1 for l in lines if l["count"] > 0)
    br = [b for l in lines for b in l.get("branches", [])]
    bt, bc = len(br), sum(1 for b in br if b["count"] > 0)
    fns = f.get("functions", [])
    uncalled = sorted((fn.get("lineno", 0), fn["name"]) for fn in fns if fn.get("execution_count", 0) == 0)
    rows.append((lc / lt if lt else 1.0, bc / bt if bt else 1.0, f["file"], lc, lt, bc, bt, uncalled))
print(f"{'file':34} {'lines':>16} {'branches':>16}  functions never called")
for lp, bp, path, lc, lt, bc, bt, uncalled in sorted(rows):
    names = ", ".join(n for _, n in uncalled) or "-"
    print(f"{path:34} {100*lp:5.1f}% {lc:4}/{lt:<4} {100*bp:5.1f}% {bc:4}/{bt:<4}  {names}")
EOF

echo "=== coverage: summary (src/) ==="
# the report goes to a file of the build: gcovr replaces its -o path, and
# run as root it once replaced /dev/null with a regular file
gcovr -r . "$BUILD" --filter 'src/' --print-summary --exclude-unreachable-branches -o "$BUILD/coverage-summary.txt"
exit "$rc"
