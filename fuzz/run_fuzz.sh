#!/bin/sh
# Runs one libFuzzer target for a short time on a scratch copy of its seed corpus, so the
# repository is never modified; crash files go to the artifact folder (the build folder).
# Usage: run_fuzz.sh TARGET SEED_DIR ARTIFACT_DIR
set -u
target=$1
seeds=$2
artifacts=${3:-.}

work=$(mktemp -d "${TMPDIR:-/tmp}/slip-fuzz.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
trap 'rm -rf "$work"; exit 130' INT TERM
cp -R "$seeds"/. "$work"/ || exit 1

name=$(basename "$target")
set -- "$target" -max_total_time="${FUZZ_SECONDS:-5}" -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/$name-" "$work"
echo "$*"
"$@"
status=$?
echo "$name: exit status $status"
exit $status
