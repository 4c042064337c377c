#!/bin/sh
# tools/fetch_llamacpp.sh CACHE_DIR
#
# Installs llama.cpp as the npm package node-llama-cpp@3.21.1 with its
# prebuilt CPU binaries for this machine (@node-llama-cpp/linux-x64 or
# @node-llama-cpp/linux-arm64, same version) into CACHE_DIR/llamacpp/:
#
#   npm install --save-exact --omit=optional --ignore-scripts --no-audit \
#       --no-fund node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1
#
# --omit=optional leaves out the CUDA, Vulkan and other platforms' binary
# packages; --ignore-scripts runs no postinstall (nothing is built or
# downloaded besides the packages). The two packages' integrity (sha512, as
# package-lock.json records what npm checked the tarballs against) must be
# the one below. node-llama-cpp 3.21.1 needs Node.js 20 or later. The tests
# that load the GGUF files `tapegrad export` writes (tests/check_llamacpp.py)
# find it through TAPEGRAD_NODE_LLAMA_CPP=CACHE_DIR/llamacpp; it stays in
# the cache (about 85 MB) and is never committed.
#
# Idempotent: a CACHE_DIR/llamacpp that holds both packages at this version
# with these checksums is left as it is and nothing is fetched. Prints one
# line saying what it did; on failure (no npm, Node.js older than 20, an
# unsupported machine, no network, a wrong checksum) one line on stderr and
# a non-zero exit, and an installation there before is left as it was (a
# registry that refuses connections fails in about 10 s: one retry).
set -eu

VERSION=3.21.1
# package, its sha512 integrity at $VERSION
SUM_MAIN=sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg==
SUM_LINUX_X64=sha512-Totj6RTDMGo3FoK2yNUaz/oGmZD0olAqTrRluFUWmu0kW2i9TOzHSW0OWCAiGkzRCVX0WsU2CyUQo/W2NYtdPA==
SUM_LINUX_ARM64=sha512-eI3anSEGzJiwF2rpMpZVTdHzw47LztbvfvuRzlu/fPO18ROnBOd+75RPUBlV6qENPpmNtbov85+3VODwEwBurg==

me=fetch_llamacpp
die() { echo "$me: $*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: tools/fetch_llamacpp.sh CACHE_DIR" >&2; exit 2; }
cache=$1
dest=$cache/llamacpp

os=$(uname -s) arch=$(uname -m)
case "$os/$arch" in
    Linux/x86_64 | Linux/amd64) platform=linux-x64 sum_bin=$SUM_LINUX_X64 ;;
    Linux/aarch64 | Linux/arm64) platform=linux-arm64 sum_bin=$SUM_LINUX_ARM64 ;;
    *) die "no prebuilt CPU binaries of node-llama-cpp $VERSION are known here for $os $arch" \
        "(Linux x86_64 and aarch64 are)" ;;
esac
bin_pkg=@node-llama-cpp/$platform

# have DIR: DIR holds node-llama-cpp and the binary package at $VERSION,
# package-lock.json with the expected integrity for both, and the addon
have() {
    [ -f "$1/package-lock.json" ] && [ -f "$1/node_modules/$bin_pkg/bins/$platform/llama-addon.node" ] &&
        command -v node >/dev/null 2>&1 &&
        node -e '
const fs = require("fs"), path = require("path");
const [dir, version, binPkg, sumMain, sumBin] = process.argv.slice(1);
const lock = JSON.parse(fs.readFileSync(path.join(dir, "package-lock.json"), "utf8")).packages || {};
const ok = (name, sum) => {
  const e = lock["node_modules/" + name] || {};
  const p = JSON.parse(fs.readFileSync(path.join(dir, "node_modules", name, "package.json"), "utf8"));
  return e.version === version && e.integrity === sum && p.version === version;
};
process.exit(ok("node-llama-cpp", sumMain) && ok(binPkg, sumBin) ? 0 : 1);
' "$1" "$VERSION" "$bin_pkg" "$SUM_MAIN" "$sum_bin" 2>/dev/null
}

if have "$dest"; then
    echo "$me: $dest already holds node-llama-cpp $VERSION and $bin_pkg $VERSION (integrity matches), nothing fetched"
    exit 0
fi
if [ -e "$dest" ]; then what=replaced; else what=installed; fi

command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js 20 or later with npm to fetch node-llama-cpp"
command -v node >/dev/null 2>&1 || die "node not found: install Node.js 20 or later"
node_version=$(node --version 2>/dev/null || true)
major=$(echo "$node_version" | sed -n 's/^v\([0-9][0-9]*\)\..*/\1/p')
[ -n "$major" ] && [ "$major" -ge 20 ] ||
    die "node-llama-cpp $VERSION needs Node.js 20 or later; this node is ${node_version:-of unknown version}"

mkdir -p "$cache" || die "cannot create $cache"
tmp='' old=''
trap '[ -z "$tmp" ] || rm -rf "$tmp"; [ -z "$old" ] || rm -rf "$old"' EXIT
trap 'exit 1' HUP INT TERM
tmp=$(mktemp -d "$cache/.fetch_llamacpp.XXXXXX") || die "cannot create a temporary folder in $cache"
echo '{"name": "tapegrad-llamacpp", "private": true}' >"$tmp/package.json"
# one retry after 5 s, not npm's two after 10 s and up to 60 s (a refused
# connection costs 10 s, not more than two minutes)
if ! (cd "$tmp" && npm install --save-exact --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error \
        --fetch-retries=1 --fetch-retry-mintimeout=5000 --fetch-retry-maxtimeout=10000 \
        "node-llama-cpp@$VERSION" "$bin_pkg@$VERSION" </dev/null >npm.out 2>npm.err); then
    why=$(sed -n -e 's/^npm error *//p' -e 's/^npm ERR! *//p' "$tmp/npm.err" | grep -v -E '^(code|errno|syscall|at) |^$' | head -n 1)
    die "'npm install node-llama-cpp@$VERSION $bin_pkg@$VERSION' failed:" \
        "${why:-no message from npm (network or registry unreachable?)}"
fi
rm -f "$tmp/npm.out" "$tmp/npm.err"
have "$tmp" || die "the installed node-llama-cpp@$VERSION or $bin_pkg@$VERSION is not the expected one" \
    "(version or sha512 integrity differs, or no llama-addon.node)"

# the new folder in place of the old one, the old one removed after
if [ -e "$dest" ]; then
    old=$cache/.fetch_llamacpp.old.$$
    rm -rf "$old"
    mv "$dest" "$old" || die "cannot move the old $dest aside"
fi
if ! mv "$tmp" "$dest"; then
    [ -z "$old" ] || mv "$old" "$dest"
    old=
    die "cannot move the installation into $dest"
fi
tmp=
echo "$me: $what node-llama-cpp $VERSION and $bin_pkg $VERSION in $dest (sha512 integrity checked)"
