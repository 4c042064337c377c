#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz/) for SECONDS each, on its committed
# seed corpus (tests/fuzz/corpus/<target>/, read-only) plus a work corpus in
# the build directory, and prints each target's execution count from
# libFuzzer's final "Done N runs in S second(s)" line.
#
#   tools/fuzz.sh [SECONDS (60)] [TARGET...]
#
# Environment:
#   FUZZ_BUILD   build directory (build-fuzz); set up with clang if missing
#   FUZZ_JOBS    targets run at the same time (number of cores)
#   FUZZ_RUNS    also stop a target after this many executions (unset: no cap)
#   FUZZ_ARGS    extra libFuzzer flags for every target
#
# Every sanitizer report is fatal: ASan, LeakSanitizer and UBSan
# (UBSAN_OPTIONS=halt_on_error=1). Exit status: 0 if no target found anything,
# 1 if any did (crash/leak/timeout/UB input saved under
# $FUZZ_BUILD/fuzz-work/<target>/ and the report printed), 2 on usage/build errors.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SECONDS_EACH=${1:-60}
shift || true
if ! [[ $SECONDS_EACH =~ ^[0-9]+$ ]] || [ "$SECONDS_EACH" -lt 1 ]; then
  echo "usage: tools/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 2
fi
ALL_TARGETS=(fuzz_safetensors fuzz_module_load fuzz_cli fuzz_cli_args fuzz_input_spec)
if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${FUZZ_JOBS:-$(nproc)}
WORK=$ROOT/$BUILD/fuzz-work

echo "=== fuzz: build ($BUILD, clang, ASan+UBSan+libFuzzer) ==="
if [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang tools/meson-setup.sh "$BUILD" -Dfuzz=true -Db_sanitize=address,undefined -Dbuildtype=debug \
    -Dnative=false -Db_lundef=false
fi
ninja -C "$BUILD" $(printf "tests/fuzz/%s " "${TARGETS[@]}")

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

run_target() {
  local t=$1 dir=$WORK/$1
  mkdir -p "$dir/corpus"
  rm -f "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*
  local args=(-max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$dir/")
  [ -n "${FUZZ_RUNS:-}" ] && args+=(-runs="$FUZZ_RUNS")
  [ -f "$ROOT/tests/fuzz/$t.dict" ] && args+=(-dict="$ROOT/tests/fuzz/$t.dict")
  case $t in
    fuzz_cli) args+=(-close_fd_mask=2 -max_len=512) ;;
    fuzz_cli_args) args+=(-dict="$ROOT/tests/fuzz/fuzz_cli.dict" -max_len=1024) ;;
    fuzz_module_load) args+=(-dict="$ROOT/tests/fuzz/fuzz_safetensors.dict") ;;
  esac
  # shellcheck disable=SC2086
  "$ROOT/$BUILD/tests/fuzz/$t" "${args[@]}" ${FUZZ_ARGS:-} "$dir/corpus" "$ROOT/tests/fuzz/corpus/$t" \
    >"$dir/log" 2>&1
}

echo "=== fuzz: ${TARGETS[*]}: ${SECONDS_EACH} s each, $JOBS at a time ==="
declare -A PIDS
running=0
for t in "${TARGETS[@]}"; do
  if [ ! -x "$BUILD/tests/fuzz/$t" ]; then echo "unknown target $t" >&2; exit 2; fi
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
  run_target "$t" &
  PIDS[$t]=$!
  running=$((running + 1))
done

status=0
printf '%-18s %14s %8s %10s %8s  %s\n' target executions seconds exec/s corpus result
for t in "${TARGETS[@]}"; do
  rc=0
  wait "${PIDS[$t]}" || rc=$?
  log=$WORK/$t/log
  done_line=$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n1 || true)
  runs=$(sed -nE 's/^Done ([0-9]+) runs in ([0-9]+) second.*/\1/p' <<<"$done_line")
  secs=$(sed -nE 's/^Done ([0-9]+) runs in ([0-9]+) second.*/\2/p' <<<"$done_line")
  if [ -z "$runs" ]; then
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log" | tail -n1)
  fi
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log" | tail -n1)
  corpus=$(( $(find "$WORK/$t/corpus" -type f | wc -l) + $(find "tests/fuzz/corpus/$t" -type f | wc -l) ))
  artifacts=$(find "$WORK/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
              -o -name 'oom-*' \) | sort)
  if [ "$rc" -eq 0 ] && [ -z "$artifacts" ]; then result=ok; else result="FINDING (exit $rc)"; status=1; fi
  printf '%-18s %14s %8s %10s %8s  %s\n' "$t" "${runs:-?}" "${secs:-?}" "${rate:-?}" "$corpus" "$result"
  if [ "$result" != ok ]; then
    echo "--- $t: log $log; report:"
    grep -E -A40 'ERROR: |runtime error|==ERROR|deadly signal|SUMMARY' "$log" | grep -v '^0x' | head -60 || tail -n 40 "$log"
    for a in $artifacts; do echo "--- $t: reproducer $a (run: $BUILD/tests/fuzz/$t $a)"; done
  fi
done
exit "$status"
