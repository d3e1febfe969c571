#!/bin/sh
# Unit test: every header a BPF source is built from is the project's own, the compiler's, the
# kernel uapi's (/usr/include/linux, asm-generic) or libbpf's (/usr/include/bpf). Anything else
# under /usr/include is the host C library or its multiarch tree, which under -target bpf wants
# gnu/stubs-32.h: it would build only where the 32-bit libc headers happen to be installed, and
# break `make` on a plain Debian 12. The header list comes from clang -M with the build's flags
# (ninja keeps the build's own depfiles in its database and deletes them).
#   check-headers.sh CLANG FLAG... -- SOURCE.bpf.c...
set -eu
[ $# -gt 2 ] || { echo "usage: $0 CLANG FLAG... -- SOURCE..." >&2; exit 2; }
clang=$1; shift
flags=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags="$flags $1"; shift; done
[ $# -gt 1 ] || { echo "check-headers: no sources after --" >&2; exit 2; }
shift
bad=0
for src in "$@"; do
    # shellcheck disable=SC2086
    deps=$("$clang" $flags -M "$src") || { echo "check-headers: clang -M $src failed"; bad=1; continue; }
    # "target: dep dep \<newline> dep ...": drop the target and the continuation backslashes.
    for f in $(printf '%s\n' "$deps" | sed -e 's/\\$//' -e 's/^[^ ]*: *//'); do
        case "$f" in
            /usr/include/linux/*|/usr/include/asm-generic/*|/usr/include/bpf/*) ;;
            /usr/include/*|/usr/local/include/*)
                echo "check-headers: $(basename "$src") includes $f (host libc or multiarch header)"
                bad=1 ;;
        esac
    done
done
[ "$bad" = 0 ] && echo "check-headers: $# BPF sources use kernel uapi and libbpf headers only"
exit "$bad"
