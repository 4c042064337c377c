#!/usr/bin/env bash
# Checks the installed library as a user of it sees it: a fresh build with
# the given meson options (tests off unless an option names them), installed
# with `meson install` into a temporary prefix, then
#   (a) tapegrad.pc: its Libs.private holds no absolute path, and
#       `pkg-config --static --libs tapegrad` names no directory outside the
#       prefix (system directories pkg-config drops are fine);
#   (b) every examples/*.c source is installed under <datadir>/tapegrad/examples/;
#   (c) every installed example compiles outside the source tree with
#         cc -std=c11 -Wall -Wextra -Werror FILE.c $(pkg-config --cflags --libs tapegrad) -lm
#       (-lm for the examples' own <math.h> calls, plus an rpath to the
#       prefix's lib directory) and, unless listed in
#       SKIP_RUN below, runs within RUN_TIMEOUT s with exit status 0;
#   (d) the dynamic symbols libtapegrad.so defines are exactly public API:
#       each must be declared in the installed headers (an identifier
#       tg_[a-z0-9_]+ followed by `(` outside comments and #define lines),
#       and none may start with tg__ or tg_k_ (private by convention);
#   (e) libtapegrad.a links statically with `pkg-config --static --libs
#       tapegrad` (Libs.private is complete) and that program runs; with
#       the run path `pkg-config --variable=blas_rpath tapegrad` names, it
#       loads the OpenMP OpenBLAS;
#   (f) the installed library is the fast one (meson.build, "BLAS"): a
#       program built against it and the installed tapegrad resolve
#       libopenblas.so.0 to OpenBLAS's OpenMP build (ldd), whichever flavour
#       Debian's alternatives select; tapegrad runs without LD_LIBRARY_PATH
#       and reports that build (bench --json "blas"); its bench step is
#       within BENCH_RATIO of the build tree's tapegrad (the same code;
#       alternating runs, medians; once more with more runs before failing,
#       as the machine is noisy); `pkg-config --variable=datadir tapegrad`
#       is the installed vocabulary's folder, and the installed tapegrad and
#       gpt_generate (run with no argument in (c): tg_tokenizer_load_dir(NULL))
#       find it with TAPEGRAD_DATA unset;
#   (g) the man page is installed as <prefix>/share/man/man1/tapegrad.1, the
#       build's page (tools/make_man.py), so `man tapegrad` finds it.
# Every step runs; the offending names are printed. Exit status 0 if all
# passed, 1 if any failed, 2 if the build or install itself failed.
#
#   tools/check_install.sh [MESON_OPTION...]    e.g. -Dnative=false
#
# Environment: CC (cc), KEEP=1 keeps the temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-cc}
RUN_TIMEOUT=120
# Installed examples that are compiled but not run (ones that need arguments
# or input files): classify and instruct read the fine-tuning sets of the
# source tree (tests/ref/finetune/), which are not installed; the test suite
# runs them (classify_example, instruct_example).
SKIP_RUN=(classify instruct)
# Examples run with arguments: pretrain, lora and dpo the installed data
# directory (the vocabulary, the-verdict.txt and the preference data;
# pretrain's small run). gpt_generate runs with none: it loads the installed
# vocabulary (tg_tokenizer_load_dir(NULL)).
declare -A RUN_ARGS=([pretrain]=DATA [lora]=DATA [dpo]=DATA)
# Linked statically against libtapegrad.a in step (e).
STATIC_EXAMPLE=train_toy

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tapegrad-install.XXXXXX")
if [ "${KEEP:-0}" = 1 ]; then trap 'echo "kept $TMP"' EXIT; else trap 'rm -rf "$TMP"' EXIT; fi
BUILD=$TMP/build
PREFIX=$TMP/prefix

opts=("$@")
case " $* " in *" -Dtests="*) ;; *) opts=(-Dtests=disabled "${opts[@]}") ;; esac

echo "=== check_install: configure, build, install (meson options: ${opts[*]}) ==="
t0=$SECONDS
tools/meson-setup.sh "$BUILD" --prefix="$PREFIX" "${opts[@]}" >"$TMP/setup.log" 2>&1 \
  || { tail -n 30 "$TMP/setup.log"; exit 2; }
ninja -C "$BUILD" >"$TMP/build.log" 2>&1 || { tail -n 30 "$TMP/build.log"; exit 2; }
meson install -C "$BUILD" --no-rebuild >"$TMP/install.log" 2>&1 || { tail -n 30 "$TMP/install.log"; exit 2; }
echo "  built and installed into a temporary prefix in $((SECONDS - t0)) s"

pc=$(find "$PREFIX" -name tapegrad.pc -path '*/pkgconfig/*' | head -n1)
so=$(find "$PREFIX" -name libtapegrad.so | head -n1)
ar=$(find "$PREFIX" -name libtapegrad.a | head -n1)
if [ -z "$pc" ] || [ -z "$so" ] || [ -z "$ar" ]; then
  echo "  FAIL: installed files missing (tapegrad.pc: ${pc:-none}, libtapegrad.so: ${so:-none}, libtapegrad.a: ${ar:-none})"
  exit 1
fi
LIBDIR=$(dirname "$so")
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
failed=()
pass() { echo "  ok    $*"; }
fail() { echo "  FAIL  $*"; failed+=("${1%%:*}"); }
indent() { sed 's/^/        /'; }

# Absolute paths among pkg-config flags: -L/x, -I/x, -Wl,...,/x, -R/x, /x.
absolute() { tr ' ' '\n' | grep -E '^(-[LIR])?/|^-Wl,(.*,)?/' || true; }

echo "=== check_install: (a) tapegrad.pc ==="
libs_private=$(sed -nE 's/^Libs\.private:[[:space:]]*//p' "$pc")
bad=$(absolute <<<"$libs_private")
if [ -z "$bad" ]; then pass "(a) Libs.private: $libs_private"
else fail "(a) Libs.private has absolute paths:" ; indent <<<"$bad"; fi
static_libs=$(pkg-config --static --libs tapegrad)
# a required package's own flags (Open MPI's -L to its libdir) are that
# package's: only what tapegrad.pc itself adds must stay inside the prefix
requires=$(pkg-config --print-requires-private tapegrad | awk '{print $1}')
theirs=$(if [ -n "$requires" ]; then pkg-config --static --libs $requires | absolute; fi)
bad=$(absolute <<<"$static_libs" | grep -vE "^(-[LIR]|-Wl,(.*,)?)?$PREFIX(/|$)" | grep -vxF -f <(printf '%s\n' "$theirs") || true)
if [ -z "$bad" ]; then pass "(a) pkg-config --static --libs: ${static_libs//$PREFIX/<prefix>}"
else fail "(a) pkg-config --static --libs names directories outside the prefix:"; indent <<<"$bad"; fi

echo "=== check_install: (b) installed examples ==="
exdir=$(find "$PREFIX" -type d -path '*/tapegrad/examples' | head -n1)
missing=()
for f in examples/*.c; do
  [ -n "$exdir" ] && [ -f "$exdir/$(basename "$f")" ] || missing+=("$(basename "$f")")
done
if [ -n "$exdir" ] && [ ${#missing[@]} -eq 0 ]; then
  pass "(b) ${exdir#"$PREFIX"/}: $(cd "$exdir" && echo *.c)"
else
  fail "(b) examples not installed under <datadir>/tapegrad/examples: ${missing[*]}"
fi

echo "=== check_install: (c) examples built outside the source tree and run ==="
work=$TMP/examples
mkdir -p "$work"
read -r -a pc_flags <<<"$(pkg-config --cflags --libs tapegrad)"
for src in "${exdir:-/nonexistent}"/*.c; do
  [ -f "$src" ] || continue
  name=$(basename "$src" .c)
  cp "$src" "$work/"
  if ! (cd "$work" && "$CC" -std=c11 -Wall -Wextra -Werror "$name.c" -o "$name" "${pc_flags[@]}" \
          -lm -Wl,-rpath,"$LIBDIR") >"$work/$name.cc.log" 2>&1; then
    fail "(c) $name: does not compile:"; head -n 20 "$work/$name.cc.log" | indent
    continue
  fi
  if [[ " ${SKIP_RUN[*]} " == *" $name "* ]]; then pass "(c) $name: compiles (not run: SKIP_RUN)"; continue; fi
  t0=$SECONDS rc=0
  args=()
  [ "${RUN_ARGS[$name]:-}" = DATA ] && args=("$(dirname "$exdir")" small)
  (cd "$work" && env -u TAPEGRAD_DATA timeout "$RUN_TIMEOUT" "./$name" "${args[@]}") >"$work/$name.out" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then pass "(c) $name: compiles, runs, exit 0 in $((SECONDS - t0)) s"
  else fail "(c) $name: exit status $rc after $((SECONDS - t0)) s (124: timeout):"; tail -n 10 "$work/$name.out" | indent; fi
done

echo "=== check_install: (d) exported symbols of ${so#"$PREFIX"/} ==="
# Every identifier the installed headers declare as tg_...( (comments and
# #define lines removed first).
find "$PREFIX" -path '*/include/tapegrad.h' -o -path '*/include/tapegrad/*.h' | sort >"$TMP/headers"
python3 - "$TMP/headers" >"$TMP/declared" <<'EOF'
import re, sys
names = set()
for path in open(sys.argv[1]).read().split():
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^[ \t]*#[ \t]*define(.*\\\n)*.*$", " ", text, flags=re.M)
    names.update(re.findall(r"\b(tg_[a-z0-9_]+)\s*\(", text))
print("\n".join(sorted(names)))
EOF
# Defined dynamic symbols that are functions or data (not the linker's own).
nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVWiu]$/ { print $3 }' \
  | grep -vxE '_init|_fini|_edata|_end|__bss_start' | sort -u >"$TMP/exported"
undeclared=$(comm -23 "$TMP/exported" "$TMP/declared")
private=$(grep -E '^tg_(_|k_)' "$TMP/exported" || true)
n_exp=$(wc -l <"$TMP/exported")
n_dec=$(wc -l <"$TMP/declared")
if [ -z "$undeclared" ] && [ -z "$private" ]; then
  pass "(d) $n_exp exported symbols, all declared in the installed headers ($n_dec declarations)"
else
  n_und=$(grep -c . <<<"$undeclared" || true)
  n_priv=$(grep -c . <<<"$private" || true)
  fail "(d) $n_exp exported symbols: $n_und not declared in the installed headers, $n_priv named tg__*/tg_k_*:"
  indent <<<"$undeclared"
  [ "$n_priv" -eq 0 ] || { echo "      of which tg__*/tg_k_*:"; indent <<<"$private"; }
fi

# The file libopenblas.so.0 resolves to for a program or library, as the
# loader finds it without LD_LIBRARY_PATH ("" if it does not load one).
blas_of() { env -u LD_LIBRARY_PATH ldd "$1" 2>/dev/null | awk '$1 == "libopenblas.so.0" { print $3 }'; }
ompdir=$(pkg-config --variable=blas_rpath tapegrad)

echo "=== check_install: (e) static link of $STATIC_EXAMPLE with pkg-config --static ==="
read -r -a static_flags <<<"$(pkg-config --cflags --static --libs tapegrad | sed 's/\(^\| \)-ltapegrad\( \|$\)/\1-l:libtapegrad.a\2/')"
[ -z "$ompdir" ] || static_flags+=("-Wl,-rpath,$ompdir")
if ! (cd "$work" && "$CC" -std=c11 -Wall -Wextra -Werror "$STATIC_EXAMPLE.c" -o "$STATIC_EXAMPLE-static" \
        "${static_flags[@]}" -lm) >"$work/static.log" 2>&1; then
  fail "(e) $STATIC_EXAMPLE does not link against libtapegrad.a:"; head -n 20 "$work/static.log" | indent
elif ldd "$work/$STATIC_EXAMPLE-static" | grep -q libtapegrad; then
  fail "(e) $STATIC_EXAMPLE-static still loads libtapegrad.so"
elif ! (cd "$work" && timeout "$RUN_TIMEOUT" "./$STATIC_EXAMPLE-static") >"$work/static.out" 2>&1; then
  fail "(e) $STATIC_EXAMPLE-static does not run:"; tail -n 10 "$work/static.out" | indent
elif [ -n "$ompdir" ] && [[ "$(blas_of "$work/$STATIC_EXAMPLE-static")" != "$ompdir"/* ]]; then
  fail "(e) $STATIC_EXAMPLE-static, linked with -Wl,-rpath,$ompdir, loads '$(blas_of "$work/$STATIC_EXAMPLE-static")'"
else
  pass "(e) $STATIC_EXAMPLE linked against libtapegrad.a (${static_flags[*]//$PREFIX/<prefix>}) runs"
fi

echo "=== check_install: (f) the installed library and tapegrad are the fast ones ==="
exe=$PREFIX/bin/tapegrad
tree_exe=$BUILD/tools/tapegrad
selected=$(readlink -f "$(ldconfig -p | awk '$1 == "libopenblas.so.0" { print $NF; exit }')" 2>/dev/null || true)
if [ -z "$ompdir" ]; then
  pass "(f) built without OpenBLAS's OpenMP build (blas_rpath is empty): no flavour to check"
else
  for bin in "$so" "$exe" "$work/$STATIC_EXAMPLE"; do
    got=$(blas_of "$bin")
    if [[ "$got" == "$ompdir"/* ]]; then pass "(f) ${bin#"$TMP"/} loads $got"
    else fail "(f) ${bin#"$TMP"/} loads libopenblas.so.0 from '${got:-nowhere}', not $ompdir"; fi
  done
  echo "        (the system's alternatives select ${selected:-no libopenblas.so.0})"
fi
if v=$(cd / && env -u LD_LIBRARY_PATH "$exe" --version 2>&1); then pass "(f) installed tapegrad runs without LD_LIBRARY_PATH: $v"
else fail "(f) installed tapegrad does not run without LD_LIBRARY_PATH:"; indent <<<"$v"; fi
datadir=$(pkg-config --variable=datadir tapegrad)
if [[ "$datadir" == "$PREFIX"/* ]] && [ -f "$datadir/encoder.json" ] && [ -f "$datadir/vocab.bpe" ]; then
  pass "(f) pkg-config --variable=datadir tapegrad: ${datadir/#$PREFIX/<prefix>} holds encoder.json and vocab.bpe"
else fail "(f) pkg-config --variable=datadir tapegrad: '$datadir' is not the installed vocabulary's folder"; fi
ids=$(cd / && env -u LD_LIBRARY_PATH -u TAPEGRAD_DATA "$exe" tokenize --text "Hello, world" 2>"$TMP/tok.err")
if [ "$ids" = "15496 11 995" ]; then pass "(f) installed tapegrad tokenize finds the installed vocabulary"
else fail "(f) installed tapegrad tokenize --text 'Hello, world': '$ids' $(head -n 1 "$TMP/tok.err")"; fi

# The bench step of the installed tapegrad and the build tree's, alternating,
# n runs each; prints "installed_ms tree_ms ratio blas".
BENCH_RATIO=1.3
bench_pair() {
  local n=$1 i
  : >"$TMP/bench.inst"; : >"$TMP/bench.tree"
  for ((i = 0; i < n; i++)); do
    (cd / && env -u LD_LIBRARY_PATH "$exe" bench --steps 5 --json) >>"$TMP/bench.inst" 2>>"$TMP/bench.err" || return 1
    (cd / && env -u LD_LIBRARY_PATH "$tree_exe" bench --steps 5 --json) >>"$TMP/bench.tree" 2>>"$TMP/bench.err" || return 1
  done
  python3 - "$TMP/bench.inst" "$TMP/bench.tree" <<'EOF'
import json, statistics, sys
runs = [[json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:]]
inst, tree = (statistics.median(r["step_ms"] for r in rs) for rs in runs)
print("%.1f %.1f %.3f %s" % (inst, tree, max(inst, tree) / min(inst, tree), runs[0][0]["blas"]))
EOF
}
within() { python3 -c "import sys; sys.exit(0 if $1 <= $BENCH_RATIO else 1)"; }
result=""
for n in 3 5; do
  result=$(bench_pair "$n") || { result=""; break; }
  read -r inst_ms tree_ms ratio blas <<<"$result"
  within "$ratio" || [ "$n" = 5 ] && break
  echo "        bench: installed $inst_ms ms, build tree $tree_ms ms per step (${ratio}x, $n runs each); once more"
done
if [ -z "$result" ]; then
  fail "(f) tapegrad bench failed:"; tail -n 5 "$TMP/bench.err" | indent
else
  read -r inst_ms tree_ms ratio blas <<<"$result"
  msg="installed $inst_ms ms, build tree $tree_ms ms per step (medians of $n alternating runs each, ${ratio}x; BLAS: $blas)"
  if ! within "$ratio"; then fail "(f) bench: more than ${BENCH_RATIO}x apart: $msg"
  elif [ -n "$ompdir" ] && [[ "$blas" != *"(OpenMP build)" ]]; then fail "(f) bench: the installed tapegrad runs on $blas"
  else pass "(f) bench: $msg"; fi
fi

echo "=== check_install: (g) the man page ==="
man_page=$PREFIX/share/man/man1/tapegrad.1
if [ ! -f "$man_page" ]; then
  fail "(g) tapegrad.1: not installed as share/man/man1/tapegrad.1$(find "$PREFIX" -name 'tapegrad.1*' | sed "s|^$PREFIX/| (found: |; s|$|)|" | head -n 1)"
elif ! cmp -s "$man_page" "$BUILD/tapegrad.1"; then
  fail "(g) tapegrad.1: share/man/man1/tapegrad.1 differs from the build's tapegrad.1"
elif ! head -n 5 "$man_page" | grep -q '^\.TH TAPEGRAD 1 '; then
  fail "(g) tapegrad.1: share/man/man1/tapegrad.1 has no '.TH TAPEGRAD 1' header"
else
  pass "(g) share/man/man1/tapegrad.1 ($(grep -c '^\.SS ' "$man_page") command sections)"
fi

if [ ${#failed[@]} -eq 0 ]; then echo "=== check_install: all passed ($((SECONDS)) s) ==="; exit 0; fi
echo "=== check_install: FAILED: ${failed[*]} ($((SECONDS)) s) ==="
exit 1
