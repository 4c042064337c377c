#!/usr/bin/env bash
# meson setup BUILDDIR [ARGS...], once more in the C locale if it fails.
#
# Meson 1.0 decodes the compiler's `-E -v` output as strict UTF-8 and dies
# with an unhandled UnicodeDecodeError if that output holds any other byte.
# In the C locale without Python's UTF-8 mode it takes its byte-tolerant path
# instead, so a second try there gets past it; any real configuration error
# fails both tries and is reported as usual.
set -uo pipefail
dir=$1
shift
meson setup "$dir" "$@" && exit 0
echo "meson-setup: 'meson setup $dir' failed; trying once more in the C locale" >&2
rm -rf "$dir"
LC_ALL=C LANG=C PYTHONUTF8=0 PYTHONCOERCECLOCALE=0 meson setup "$dir" "$@"
