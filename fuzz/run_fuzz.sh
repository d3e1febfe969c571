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
# libFuzzer's default exit status for a crash, a leak or a timeout is 77, which meson counts as a
# skipped test: 1 makes a finding fail the run.
set -- "$target" -max_total_time="${FUZZ_SECONDS:-5}" -rss_limit_mb=2048 -error_exitcode=1 -timeout_exitcode=1 \
    -artifact_prefix="$artifacts/$name-" "$work"
echo "$*"
"$@"
status=$?
echo "$name: exit status $status"
exit $status
