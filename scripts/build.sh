#!/usr/bin/env bash
# Configures and builds trellis into build/ (executables in build/bin/).
# Usage: scripts/build.sh [--demo] [cmake configure arguments...]
#
# By default it builds everything, the tests included (TRELLIS_TESTS=ON),
# and CUDA when nvcc is found (override: TRELLIS_CUDA=ON|OFF).
#
# --demo builds only the programs scripts/demo.sh runs (trellis-preprocess,
# trellis-train, trellis-eval). A build folder configured here for the first
# time is configured without the tests and, unless TRELLIS_CUDA says
# otherwise, without CUDA (the demo trains on CPU); one configured before
# keeps its settings, so the demo reuses what scripts/test.sh built and a
# later full build turns the tests and CUDA on in the same folder.
#
# Extra arguments go to cmake's configure step.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build_dir="${TRELLIS_BUILD_DIR:-build}"
demo=0
if [ "${1:-}" = --demo ]; then
  demo=1
  shift
fi
configure_args=()
if [ "$demo" -eq 1 ]; then
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    configure_args+=(-DTRELLIS_TESTS=OFF -DTRELLIS_CUDA="${TRELLIS_CUDA:-OFF}")
  elif [ -n "${TRELLIS_CUDA:-}" ]; then
    configure_args+=(-DTRELLIS_CUDA="$TRELLIS_CUDA")
  fi
else
  if [ -z "${TRELLIS_CUDA:-}" ]; then
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
      TRELLIS_CUDA=ON
    else
      TRELLIS_CUDA=OFF
    fi
  fi
  configure_args+=(-DTRELLIS_TESTS=ON -DTRELLIS_CUDA="$TRELLIS_CUDA")
fi
if [ "${TRELLIS_CUDA:-}" = ON ] && ! command -v nvcc >/dev/null 2>&1; then
  configure_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
# Rebuilds of unchanged sources (another clone, a wiped build dir) come from
# ccache when it is installed; paths are taken relative to the checkout.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
  configure_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${configure_args[@]}" "$@"
if [ "$demo" -eq 1 ]; then
  cmake --build "$build_dir" -j "$(nproc)" --target trellis-preprocess trellis-train trellis-eval
else
  cmake --build "$build_dir" -j "$(nproc)"
fi
