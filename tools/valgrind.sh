#!/usr/bin/env bash
# Memcheck on the real programs: a portable debugoptimized build (no
# sanitizers, no -march=native, which valgrind may not emulate), then
#   tapegrad train --steps 50
#   tapegrad attention --module causal|mha-wrapper --grads, --module mha --json
#   tapegrad attention --save / --load round trip (in a temporary directory)
#   tests/test_safetensors
# each under valgrind --leak-check=full. Any memory error or definitely /
# indirectly lost block fails the run (exit 1). OpenMP and OpenBLAS run with one
# thread; tools/valgrind.supp only holds suppressions for libgomp/OpenBLAS
# internals, never for tapegrad's own frames.
#
#   tools/valgrind.sh            (VALGRIND_BUILD=build-valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${VALGRIND_BUILD:-build-valgrind}

echo "=== valgrind: build ($BUILD, debugoptimized, portable) ==="
if [ ! -f "$BUILD/build.ninja" ]; then
  tools/meson-setup.sh "$BUILD" -Dnative=false -Dbuildtype=debugoptimized
fi
ninja -C "$BUILD" tools/tapegrad tests/test_safetensors

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
VG=(valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect
    --errors-for-leak-kinds=definite,indirect --error-exitcode=1 --track-origins=yes
    --suppressions="$ROOT/tools/valgrind.supp" --num-callers=30)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
LOGDIR=$ROOT/$BUILD/valgrind-logs
mkdir -p "$LOGDIR"
TG=$ROOT/$BUILD/tools/tapegrad

failed=0
n=0
run() { # run NAME EXPECTED_EXIT CMD...   (valgrind's own error exit is 1)
  local name=$1 want=$2
  shift 2
  n=$((n + 1))
  local log=$LOGDIR/$name.log
  local t0=$SECONDS rc=0
  (cd "$TMP" && "${VG[@]}" --log-file="$log" "$@" >"$LOGDIR/$name.out" 2>&1) || rc=$?
  local errs lost
  errs=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) errors.*/\1/p' "$log" | tail -n1)
  lost=$(grep -E 'definitely lost:|indirectly lost:' "$log" | sed -E 's/^==[0-9]+== +//' | tr -s ' ' | paste -sd';' - || true)
  if [ "$rc" -eq "$want" ] && [ "${errs:-1}" -eq 0 ]; then
    printf '  ok    %-28s %3ss  errors %s  %s\n' "$name" $((SECONDS - t0)) "${errs:-?}" "${lost:-no leaks}"
  else
    failed=$((failed + 1))
    printf '  FAIL  %-28s %3ss  exit %s, errors %s  %s\n' "$name" $((SECONDS - t0)) "$rc (want $want)" "${errs:-?}" "${lost:-}"
    echo "  --- $log:"
    sed -E 's/^/    /' "$log" | tail -n 60
    echo "  --- program output ($LOGDIR/$name.out):"
    sed -E 's/^/    /' "$LOGDIR/$name.out" | tail -n 10
  fi
}

echo "=== valgrind: memcheck ==="
run train-steps-50 0 "$TG" train --steps 50
run attention-causal-grads 0 "$TG" attention --module causal --grads
run attention-mha-wrapper-grads 0 "$TG" attention --module mha-wrapper --qkv-bias --grads
run attention-mha-json 0 "$TG" attention --module mha --json
run attention-mha-save 0 "$TG" attention --module mha --qkv-bias --save sd.safetensors
run attention-mha-load 0 "$TG" attention --module mha --qkv-bias --load sd.safetensors --grads
run attention-bad-args 2 "$TG" attention --module mha --d-out 3 --heads 2
run test_safetensors 0 "$ROOT/$BUILD/tests/test_safetensors"
# the exporter: a GPT-2 folder (its tokenizer.json built from GPT-2's files), read back; a Q8_0 GGUF file
run export-hf 0 "$TG" export --layers 1 --emb 8 --heads 2 --context 16 --hf gpt2-folder
run export-hf-generate 0 "$TG" generate --hf gpt2-folder --max-new-tokens 3
run export-gguf-q8 0 "$TG" export --layers 1 --emb 32 --heads 2 --context 16 --gguf gpt2.gguf --type q8_0

echo "=== valgrind: $((n - failed))/$n clean (logs in $LOGDIR) ==="
[ "$failed" -eq 0 ]
