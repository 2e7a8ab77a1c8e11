#!/usr/bin/env bash
# Runs one fuzz target for a bounded time, as ctest's "fuzz" tests do:
#
#   run_fuzz.sh PROGRAM SEED_DIR ARTIFACT_DIR [SECONDS]
#
# New inputs go to a fresh temporary corpus directory, named first because
# libFuzzer writes only into its first corpus directory: the seeds in the
# source tree are read, never written. A crash, leak, timeout (10 s for one
# input) or a run past 2 GiB of memory fails the test and leaves the input
# in ARTIFACT_DIR, named after the program. SECONDS defaults to
# TRELLIS_FUZZ_SECONDS, else 20.
set -euo pipefail
program=$1 seeds=$2 artifacts=$3
seconds=${4:-${TRELLIS_FUZZ_SECONDS:-20}}
work=$(mktemp -d "${TMPDIR:-/tmp}/trellis-fuzz-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
"$program" "$work" "$seeds" -max_total_time="$seconds" -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$artifacts/$(basename "$program")-"
