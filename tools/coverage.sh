#!/usr/bin/env bash
# The instrumented pass: one build gives the sanitizers' verdict and the
# coverage of src/ together. GCC takes --coverage with -fsanitize, so
#
#   meson setup build-inst -Db_sanitize=address,undefined -Db_coverage=true \
#     -Dbuildtype=debugoptimized -Dnative=false -Db_lundef=false \
#     -Dc_args=-fprofile-update=single
#
# builds the library and the suite with AddressSanitizer (LeakSanitizer on),
# UndefinedBehaviorSanitizer and gcov's counters; the suite runs once under
# it, every sanitizer report fatal (the long end-to-end tables in their quick
# forms: tests/meson.build, slow_build); then gcovr reports src/'s lines,
# functions and branches, per file (least covered first, with the functions
# the suite never calls) and in all, and the totals must reach their floors.
#
#   tools/coverage.sh              build, test and report, in turn
#   tools/coverage.sh build        configure (if needed) and build
#   tools/coverage.sh test         reset the counters, run the suite (exit: meson test's)
#   tools/coverage.sh report       the report and its floors (exit 1 below a floor)
#
# Optimized (-O2 -g): the sanitizers' documentation advises it, and the suite
# runs over twice as fast as at -O0; a line the optimizer merged into another
# counts with it. -fprofile-update=single: with -fopenmp GCC makes every
# counter increment atomic, which ran the suite 3 to 5 times slower (the
# OpenMP loops' threads contend for the counters' cache lines). A count two
# threads race on may come out low, and gcov derives the counts of the arcs
# it does not count from those it does, so a few derived branch counts in
# the threaded loops come out below zero: gcovr skips those lines
# (--gcov-ignore-parse-errors; they are listed in the build's
# gcovr-parse-errors.txt) and the totals can move by a few hundredths of a
# point from one run to the next, far inside the floors' margin.
#
# Environment:
#   COVERAGE_BUILD     build directory (build-inst)
#   COVERAGE_MIN_LINES, COVERAGE_MIN_FUNCTIONS, COVERAGE_MIN_BRANCHES
#                      the floors, percent of src/ (below): a point under
#                      what CI measured on a CPU without bf16 hardware, where
#                      src/tensor/bf16.c's oneDNN path never runs (it runs
#                      where the CPU has AVX512_BF16 or AMX, and coverage is
#                      higher there: docs/robustness.md). Branches count the
#                      sanitizers' own checks too, which never fire.
#   MESON_TEST_ARGS    extra arguments for meson test (a --suite, say)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${COVERAGE_BUILD:-build-inst}
MIN_LINES=${COVERAGE_MIN_LINES:-94.0}
MIN_FUNCTIONS=${COVERAGE_MIN_FUNCTIONS:-97.5}
MIN_BRANCHES=${COVERAGE_MIN_BRANCHES:-74.5}

build() {
  echo "=== instrumented build ($BUILD: gcc, ASan + UBSan + --coverage, debugoptimized) ==="
  if [ ! -f "$BUILD/build.ninja" ]; then
    tools/meson-setup.sh "$BUILD" -Dbuildtype=debugoptimized -Dnative=false \
      -Db_sanitize=address,undefined -Db_lundef=false -Db_coverage=true -Dc_args=-fprofile-update=single
  fi
  ninja -C "$BUILD"
}

run_tests() {
  echo "=== instrumented suite: AddressSanitizer + LeakSanitizer + UBSan, coverage counters ==="
  find "$BUILD" -name '*.gcda' -delete
  # shellcheck disable=SC2086
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    meson test -C "$BUILD" --print-errorlogs --timeout-multiplier 4 ${MESON_TEST_ARGS:-}
}

report() {
  echo "=== coverage: src/ per file, least covered first ==="
  local json=$BUILD/coverage-src.json
  gcovr -r . "$BUILD" --filter 'src/' --json "$json" --exclude-unreachable-branches --gcov-ignore-parse-errors \
    2>"$BUILD/gcovr-parse-errors.txt" || { cat "$BUILD/gcovr-parse-errors.txt"; return 1; }
  echo "(gcov lines gcovr could not read: $(grep -c 'UnknownLineType\|unknown line\|Ignoring' "$BUILD/gcovr-parse-errors.txt" || true); see $BUILD/gcovr-parse-errors.txt)"
  python3 - "$json" "$MIN_LINES" "$MIN_FUNCTIONS" "$MIN_BRANCHES" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
floors = {"lines": float(sys.argv[2]), "functions": float(sys.argv[3]), "branches": float(sys.argv[4])}
rows = []
total = {"lines": [0, 0], "functions": [0, 0], "branches": [0, 0]}
for f in data["files"]:
    lines = [l for l in f["lines"] if not l.get("gcovr/noncode") and not l.get("gcovr/excluded")]
    lt, lc = len(lines), sum(1 for l in lines if l["count"] > 0)
    br = [b for l in lines for b in l.get("branches", [])]
    bt, bc = len(br), sum(1 for b in br if b["count"] > 0)
    fns = f.get("functions", [])
    ft, fc = len(fns), sum(1 for fn in fns if fn.get("execution_count", 0) > 0)
    uncalled = sorted((fn.get("lineno", 0), fn["name"]) for fn in fns if fn.get("execution_count", 0) == 0)
    for key, (c, t) in (("lines", (lc, lt)), ("functions", (fc, ft)), ("branches", (bc, bt))):
        total[key][0] += c
        total[key][1] += t
    rows.append((lc / lt if lt else 1.0, bc / bt if bt else 1.0, f["file"], lc, lt, bc, bt, uncalled))
print(f"{'file':34} {'lines':>16} {'branches':>16}  functions never called")
for lp, bp, path, lc, lt, bc, bt, uncalled in sorted(rows):
    names = ", ".join(n for _, n in uncalled) or "-"
    print(f"{path:34} {100*lp:5.1f}% {lc:4}/{lt:<4} {100*bp:5.1f}% {bc:4}/{bt:<4}  {names}")
print("=== coverage: src/ in all, against the floors ===")
below = 0
for key in ("lines", "functions", "branches"):
    c, t = total[key]
    pct = 100.0 * c / t if t else 100.0
    ok = pct >= floors[key]
    below += not ok
    print(f"{key + ':':11} {pct:6.2f}% ({c} of {t})  floor {floors[key]:.1f}%  {'ok' if ok else 'BELOW THE FLOOR'}")
sys.exit(1 if below else 0)
EOF
}

case ${1:-all} in
  build) build ;;
  test) run_tests ;;
  report) report ;;
  all)
    build
    rc=0
    run_tests || rc=$?
    report || rc=1
    exit "$rc"
    ;;
  *) echo "usage: tools/coverage.sh [build|test|report]" >&2; exit 2 ;;
esac
