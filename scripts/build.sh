#!/usr/bin/env bash
# Configures and builds trellis into build/ (executables in build/bin/).
# CUDA is built when nvcc is found (override: TRELLIS_CUDA=ON|OFF).
# Extra arguments go to cmake's configure step.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build_dir="${TRELLIS_BUILD_DIR:-build}"
if [ -z "${TRELLIS_CUDA:-}" ]; then
  if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    TRELLIS_CUDA=ON
  else
    TRELLIS_CUDA=OFF
  fi
fi
cuda_args=(-DTRELLIS_CUDA="$TRELLIS_CUDA")
if [ "$TRELLIS_CUDA" = ON ] && ! command -v nvcc >/dev/null 2>&1; then
  cuda_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
# Rebuilds of unchanged sources (another clone, a wiped build dir) come from
# ccache when it is installed; paths are taken relative to the checkout.
launcher_args=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
  launcher_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" "${launcher_args[@]}" "$@"
cmake --build "$build_dir" -j "$(nproc)"
