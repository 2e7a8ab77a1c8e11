#!/usr/bin/env bash
# Installs dependencies, builds, fetches GPT-2's tokenizer files and runs
# every test (unit and multi-rank) through ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/install-deps.sh
scripts/fetch-gpt2-assets.sh
scripts/build.sh
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OPENBLAS_NUM_THREADS=1
ctest --test-dir "${TRELLIS_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
