#!/bin/sh
# Builds sockperf 3.10 from its upstream source into DIR (default build/sockperf): Debian 12's
# sockperf 3.7 rejects IPv6 addresses (IPv6 came in upstream 3.8), and bench/v6.py needs a
# ping-pong over IPv6 beside the same one over IPv4. Opt-in (`make sockperf`); no test needs it.
# Needs git, network access to GitHub (or SOCKPERF_GIT=<another clone of it>), autoconf,
# automake, libtool and a C++ compiler.
set -eu
dir=${1:-build/sockperf}
src=${SOCKPERF_GIT:-https://github.com/Mellanox/sockperf}
tag=${SOCKPERF_TAG:-3.10}
for t in git autoreconf automake libtoolize make c++; do
    command -v "$t" >/dev/null || { echo "sockperf: '$t' is missing (apt-get install git autoconf automake libtool build-essential)" >&2; exit 1; }
done
[ -d "$dir/src" ] || git clone -q --depth 1 --branch "$tag" "$src" "$dir"
cd "$dir"
[ -x configure ] || ./autogen.sh >/dev/null 2>&1
[ -f Makefile ] || ./configure --quiet
make -s >/dev/null 2>&1 || make
echo "sockperf: built $dir/sockperf ($(./sockperf --version 2>&1 | head -1))"
