#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz/), in three modes:
#
#   tools/fuzz.sh [SECONDS (60)] [TARGET...]   exploratory fuzzing (the default)
#   tools/fuzz.sh --ci [TARGET...]              deterministic, as .ci/run does it
#   tools/fuzz.sh --merge [TARGET...]           keep what exploring found
#
# Exploratory: every target runs for SECONDS with a random seed, on its
# committed seed corpus (tests/fuzz/corpus/<target>/, read-only) plus a work
# corpus, $FUZZ_BUILD/fuzz-work/<target>/corpus/, that keeps growing from one
# run to the next. Two runs of the same commit do different work.
#
# --ci: a fixed seed (FUZZ_SEED, 1) and a fixed number of executions per
# target (CI_RUNS below, sized for a few minutes in all on 2 cores), no time
# limit, one libFuzzer process at a time, a fresh empty work corpus
# (fuzz-work/<target>/ci-corpus/), no corpus reloading and no address-space
# randomisation. The same commit then runs the same inputs for the same
# number of executions every time and ends with the same coverage (the
# table's cov, ft and corp columns: edges, features, corpus units); only a
# few of fuzz_safetensors' input reductions were seen to land some
# executions earlier or later from one run to the next. The committed
# corpora are also replayed without libFuzzer by the test suite (meson test
# --suite fuzz-corpus).
#
# --merge: libFuzzer's -merge=1 of the work corpora (corpus/ and ci-corpus/)
# into tests/fuzz/corpus/<target>/: only units that add coverage are copied.
# Review the new files (git status tests/fuzz/corpus) and commit them. A
# typical session:
#
#   tools/fuzz.sh 3600 fuzz_cli      # an hour of fuzz_cli
#   tools/fuzz.sh --merge fuzz_cli   # copy its coverage-increasing units
#   git add tests/fuzz/corpus/fuzz_cli && git commit
#
# Environment:
#   FUZZ_BUILD   build directory (build-fuzz); set up with clang if missing
#   FUZZ_JOBS    targets run at the same time (number of cores). Each target
#                is always one libFuzzer process; under --ci its inputs are
#                its seed's whatever runs beside it.
#   FUZZ_RUNS    exploratory: also stop a target after this many executions
#   FUZZ_SEED    --ci: libFuzzer's -seed (1)
#   FUZZ_ARGS    extra libFuzzer flags for every target
#
# OpenMP and OpenBLAS run with one thread. Every sanitizer report is fatal:
# ASan, LeakSanitizer and UBSan (UBSAN_OPTIONS=halt_on_error=1). Exit status:
# 0 if no target found anything, 1 if any did (crash/leak/timeout/UB input
# saved under $FUZZ_BUILD/fuzz-work/<target>/ and the report printed), 2 on
# usage/build errors.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() {
  echo "usage: tools/fuzz.sh [SECONDS] [TARGET...] | --ci [TARGET...] | --merge [TARGET...]" >&2
  exit 2
}

ALL_TARGETS=(fuzz_safetensors fuzz_module_load fuzz_hf_load fuzz_decoder_hf fuzz_tokenizer fuzz_tokenizer_json fuzz_csv
             fuzz_instruction_json fuzz_cli fuzz_cli_args fuzz_input_spec fuzz_train_log)
# --ci executions per target (the initial pass over the seed corpus included).
# Measured on 2 cores, ASan+UBSan (the -O2 build runs at about these rates:
# fuzz_cli 212 exec/s, fuzz_hf_load 129, fuzz_tokenizer 1,194): fuzz_cli runs whole commands
# (~20 s to load its corpus, then a few hundred exec/s), the parsers run at
# 6,000 (module_load) to 300,000 (input_spec) exec/s; fuzz_hf_load runs a
# forward and generation after every successful load (~150 exec/s), and so
# does fuzz_decoder_hf after writing its folder's two files;
# fuzz_tokenizer encodes, decodes and encodes again with GPT-2's and
# Qwen3's tokenizers and encodes Qwen3's chat (~1,000 exec/s: 80,000
# executions in ~80 s, as long as GPT-2's alone took for 200,000);
# fuzz_tokenizer_json reads each input as a tokenizer.json and as a rank
# file, and encodes fixed texts with what loads (~4,000 exec/s: 50,000
# executions in ~12 s);
# fuzz_csv loads each input twice and fuzz_instruction_json tokenizes every
# entry (~6,000 exec/s each, one at a time; 100,000 executions in ~20 s);
# fuzz_train_log writes a checkpoint and resumes a small run from it every
# execution (~400 exec/s).
declare -A CI_RUNS=(
  [fuzz_safetensors]=2000000
  [fuzz_module_load]=200000
  [fuzz_hf_load]=10000
  [fuzz_decoder_hf]=10000
  [fuzz_tokenizer]=80000
  [fuzz_tokenizer_json]=50000
  [fuzz_csv]=100000
  [fuzz_instruction_json]=100000
  [fuzz_cli]=20000
  [fuzz_cli_args]=2000000
  [fuzz_input_spec]=2000000
  [fuzz_train_log]=5000
)

MODE=explore
SECONDS_EACH=60
case ${1:-} in
  --ci) MODE=ci; shift ;;
  --merge) MODE=merge; shift ;;
  -h|--help) usage ;;
  -*) usage ;;
  '') ;;
  *)
    if [[ $1 =~ ^[0-9]+$ ]]; then SECONDS_EACH=$1; shift; fi
    ;;
esac
if [ "$MODE" = explore ] && [ "$SECONDS_EACH" -lt 1 ]; then usage; fi
if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi
for t in "${TARGETS[@]}"; do
  if [ -z "${CI_RUNS[$t]:-}" ]; then echo "unknown target $t (targets: ${ALL_TARGETS[*]})" >&2; exit 2; fi
done
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${FUZZ_JOBS:-$(nproc)}
SEED=${FUZZ_SEED:-1}
WORK=$ROOT/$BUILD/fuzz-work

# Optimized (-O2 -g), as libFuzzer's documentation builds its targets: the
# executions run several times faster than at -O0. -Wno-pass-failed: at -O2
# clang reports each `omp simd` loop it could not vectorize under the
# sanitizers as a warning, which -Werror would make fatal.
echo "=== fuzz: build ($BUILD, clang, ASan+UBSan+libFuzzer, debugoptimized) ==="
if [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang tools/meson-setup.sh "$BUILD" -Dfuzz=true -Db_sanitize=address,undefined -Dbuildtype=debugoptimized \
    -Dc_args=-Wno-pass-failed \
    -Dnative=false -Db_lundef=false || exit 2
fi
ninja -C "$BUILD" "${TARGETS[@]/#/tests/fuzz/}" || exit 2

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# Flags every mode gives a target: its dictionary and input limits.
target_args() {
  local t=$1
  [ -f "$ROOT/tests/fuzz/$t.dict" ] && echo "-dict=$ROOT/tests/fuzz/$t.dict"
  case $t in
    fuzz_cli) echo -close_fd_mask=2 -max_len=512 ;;
    fuzz_cli_args) echo "-dict=$ROOT/tests/fuzz/fuzz_cli.dict" -max_len=1024 ;;
    fuzz_module_load|fuzz_hf_load|fuzz_decoder_hf) echo "-dict=$ROOT/tests/fuzz/fuzz_safetensors.dict" ;;
  esac
}

if [ "$MODE" = merge ]; then
  echo "=== fuzz: merge work corpora into tests/fuzz/corpus/<target>/ ==="
  printf '%-18s %10s %10s %8s\n' target work before added
  status=0
  for t in "${TARGETS[@]}"; do
    dirs=()
    for d in "$WORK/$t/corpus" "$WORK/$t/ci-corpus"; do
      [ -d "$d" ] && [ -n "$(ls -A "$d")" ] && dirs+=("$d")
    done
    committed=$ROOT/tests/fuzz/corpus/$t
    before=$(find "$committed" -type f | wc -l)
    if [ ${#dirs[@]} -eq 0 ]; then
      printf '%-18s %10s %10s %8s\n' "$t" 0 "$before" "-"
      continue
    fi
    work=$(find "${dirs[@]}" -type f | wc -l)
    mkdir -p "$WORK/$t"
    # shellcheck disable=SC2046
    if ! "$ROOT/$BUILD/tests/fuzz/$t" -merge=1 $(target_args "$t") -artifact_prefix="$WORK/$t/" \
         "$committed" "${dirs[@]}" >"$WORK/$t/merge.log" 2>&1; then
      echo "$t: merge failed, see $WORK/$t/merge.log" >&2
      status=1
    fi
    after=$(find "$committed" -type f | wc -l)
    printf '%-18s %10s %10s %8s\n' "$t" "$work" "$before" $((after - before))
  done
  echo "new units are untracked files: git status tests/fuzz/corpus"
  exit "$status"
fi

run_target() {
  local t=$1 dir=$WORK/$1 corpus
  rm -f "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*
  local args=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/")
  if [ "$MODE" = ci ]; then
    corpus=$dir/ci-corpus
    rm -rf "$corpus"
    args+=(-seed="$SEED" -runs="${CI_RUNS[$t]}" -reload=0)
  else
    corpus=$dir/corpus
    args+=(-max_total_time="$SECONDS_EACH")
    [ -n "${FUZZ_RUNS:-}" ] && args+=(-runs="$FUZZ_RUNS")
  fi
  mkdir -p "$corpus"
  # shellcheck disable=SC2046,SC2086
  "${NORAND[@]}" "$ROOT/$BUILD/tests/fuzz/$t" "${args[@]}" $(target_args "$t") ${FUZZ_ARGS:-} \
    "$corpus" "$ROOT/tests/fuzz/corpus/$t" >"$dir/log" 2>&1
}

# --ci also turns address-space randomisation off (setarch -R): libFuzzer
# learns from the operands of the comparisons the targets make, pointers
# among them, and with ASLR those differ from run to run, and so would the
# mutations (seen as different corpus sizes for the same seed).
NORAND=()
if [ "$MODE" = ci ]; then
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    NORAND=(setarch "$(uname -m)" -R)
  else
    echo "fuzz: setarch -R does not work here; runs may differ with address-space randomisation" >&2
  fi
fi

if [ "$MODE" = ci ]; then
  echo "=== fuzz (--ci): ${TARGETS[*]}: seed $SEED, fixed executions, $JOBS at a time ==="
else
  echo "=== fuzz: ${TARGETS[*]}: ${SECONDS_EACH} s each, random seed, $JOBS at a time ==="
fi
declare -A PIDS
running=0
for t in "${TARGETS[@]}"; do
  if [ ! -x "$BUILD/tests/fuzz/$t" ]; then echo "target $t was not built" >&2; exit 2; fi
  mkdir -p "$WORK/$t"
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
  run_target "$t" &
  PIDS[$t]=$!
  running=$((running + 1))
done

status=0
printf '%-18s %11s %7s %8s %6s %7s %6s %6s  %s\n' target executions seconds exec/s cov ft corp files result
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
  # The last status line: "#N DONE cov: C ft: F corp: U/SIZE ...".
  status_line=$(grep -E '^#[0-9]+[[:space:]]+[A-Z]+ +cov: ' "$log" | tail -n1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$status_line")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$status_line")
  corp=$(sed -nE 's/.* corp: ([0-9]+)\/.*/\1/p' <<<"$status_line")
  if [ "$MODE" = ci ]; then wdir=$WORK/$t/ci-corpus; else wdir=$WORK/$t/corpus; fi
  files=$(( $(find "$wdir" -type f | wc -l) + $(find "tests/fuzz/corpus/$t" -type f | wc -l) ))
  artifacts=$(find "$WORK/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
              -o -name 'oom-*' \) | sort)
  if [ "$rc" -eq 0 ] && [ -z "$artifacts" ]; then result=ok; else result="FINDING (exit $rc)"; status=1; fi
  if [ "$MODE" = ci ] && [ "$result" = ok ] && [ "${runs:-}" != "${CI_RUNS[$t]}" ]; then
    result="FAIL: ${runs:-?} executions, want ${CI_RUNS[$t]}"
    status=1
  fi
  printf '%-18s %11s %7s %8s %6s %7s %6s %6s  %s\n' "$t" "${runs:-?}" "${secs:-?}" "${rate:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$files" "$result"
  if [ "$result" != ok ]; then
    echo "--- $t: log $log; report:"
    grep -E -A40 'ERROR: |runtime error|==ERROR|deadly signal|SUMMARY' "$log" | grep -v '^0x' | head -60 || tail -n 40 "$log"
    for a in $artifacts; do echo "--- $t: reproducer $a (run: $BUILD/tests/fuzz/$t $a)"; done
  fi
done
exit "$status"
