#!/bin/sh
# Installs what slipstream needs to build and test, from Debian packages (and pytest from PyPI
# when the python3 on PATH lacks it). Idempotent: when everything is present it only checks.
set -eu

PKGS="build-essential pkg-config meson ninja-build clang llvm libclang-rt-14-dev
      libbpf-dev libxdp-dev bpftool libmnl-dev linux-libc-dev
      iproute2 ethtool iputils-ping procps python3 python3-pytest tcpdump
      curl nginx-light iperf3 redis-server redis-tools memcached libmemcached-tools wrk sockperf
      python3-uvloop"

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

PY=${PYTHON:-python3}
if ! "$PY" -c 'import pytest' 2>/dev/null; then
    echo "deps: installing pytest for $PY from PyPI"
    "$PY" -m pip install -q pytest
fi
exit 0
