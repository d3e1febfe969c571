#!/bin/sh
# Installs what slipstream needs to build and test, from Debian packages (and pytest from PyPI
# when the python3 on PATH lacks it). Idempotent: when everything is present it only checks.
set -eu

PKGS="build-essential pkg-config meson ninja-build clang llvm libclang-rt-14-dev
      libbpf-dev libxdp-dev bpftool libmnl-dev linux-libc-dev
      iproute2 ethtool iputils-ping procps python3 python3-pytest tcpdump
      curl nginx-light iperf3 redis-server redis-tools memcached libmemcached-tools wrk sockperf
      python3-uvloop openssh-server openssh-client mariadb-server mariadb-client nodejs openjdk-17-jdk-headless
      fio libaio-dev liburing-dev"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing="$missing $p"
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "deps: missing packages:$missing; run as root (or: sudo apt-get install$missing)" >&2
        exit 1
    fi
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# A root directory closed to other users (0700, as some hand-made chroots have it; Debian's is
# 0755) leaves every program that drops root (nginx's workers, memcached -u nobody, apt's _apt)
# unable to reach any file, and the tests that run them fail for that alone.
mode=$(stat -c %a /)
if [ "$(id -u)" = 0 ] && [ $((0$mode & 5)) -ne 5 ]; then
    echo "deps: / is mode $mode, not Debian's 755: programs that drop root cannot reach any file; setting 755"
    chmod 755 /
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import pytest' 2>/dev/null; then
    echo "deps: installing pytest for $PY from PyPI"
    "$PY" -m pip install -q pytest
fi
exit 0
