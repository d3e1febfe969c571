#!/bin/sh
# Builds netperf from its upstream source into DIR (default build/netperf): netperf is not in
# Debian main, and no test needs it (tests/system/test_maerts.py reproduces its TCP_MAERTS pattern).
# Opt-in: `make netperf`. Needs git, network access to GitHub, autoconf, automake and a C compiler.
set -eu
dir=${1:-build/netperf}
for t in git autoreconf automake make cc; do
    command -v "$t" >/dev/null || { echo "netperf: '$t' is missing (apt-get install git autoconf automake build-essential)" >&2; exit 1; }
done
[ -d "$dir/src" ] || git clone -q --depth 1 https://github.com/HewlettPackard/netperf "$dir"
cd "$dir"
[ -x configure ] || ./autogen.sh >/dev/null
[ -f Makefile ] || ./configure --quiet
make -s >/dev/null
echo "netperf: built $dir/src/netperf and $dir/src/netserver; e.g. in one namespace:"
echo "  slipstream run --iface IF -- $dir/src/netserver -D -4 -L ADDR"
echo "and from the peer: $dir/src/netperf -H ADDR -t TCP_MAERTS"
