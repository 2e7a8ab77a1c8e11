#!/usr/bin/env bash
# Part of a GPU bundle (scripts/gpu-bundle.sh copies it to
# BUNDLE/check-node.sh): checks, before anything runs, that this node
# provides what the bundled build needs and names what is missing:
#
#   - every library of cuda-libs.txt (the CUDA runtime, cuBLAS, cuBLASLt,
#     NCCL, cuDNN by soname) resolves for the bundled binaries, and, where
#     the node's file name carries its version (libcublasLt.so.13.0.0.19),
#     is not older than the version the build was compiled against;
#   - the NVIDIA driver, when one is loaded, is R580 or newer (CUDA 13).
#     A node with /dev/nvidia* or TRELLIS_REQUIRE_GPU=1 must have one.
#
# Source BUNDLE/env.sh first (run-gpu-tests.sh does). CUDA_LIB_LIST names
# another list (tests). Exits 1 when something is missing.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
list="${CUDA_LIB_LIST:-$here/cuda-libs.txt}"
driver_floor=580
failed=0

# How the loader resolves the bundled binaries' libraries now.
resolved="$(ldd "$here/bin/cuda_tests" "$here/bin/trellis-train" 2>/dev/null)"
# Is version $1 (dotted) older than $2?
older() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }

while read -r soname built; do
  [ -z "$soname" ] && continue
  path="$(awk -v s="$soname" '$1 == s && $2 == "=>" {print $3; exit}' <<<"$resolved")"
  if [ -z "$path" ] || [ "$path" = "not" ]; then
    echo "check-node: $soname not found (the build needs version $built or newer); put the folder that holds it on CUDA_LIBS before sourcing env.sh" >&2
    failed=1
    continue
  fi
  real="$(basename "$(readlink -f "$path")")"
  # The version in the file name: libcublasLt.so.13.0.0.19 is 13.0.0.19.
  case "$real" in
    "$soname".*) have="${soname##*.so.}.${real#"$soname".}" ;;
    *) have="" ;;
  esac
  if [ -z "$have" ]; then
    echo "check-node: $soname at $path (no version in its file name; the build needs $built)"
  elif older "$have" "$built"; then
    echo "check-node: $soname is $have at $path, older than the $built the build was compiled against; use CUDA libraries at least as new" >&2
    failed=1
  else
    echo "check-node: $soname $have ($path; built against $built)"
  fi
done <"$list"

gpu_expected=0
if [ "${TRELLIS_REQUIRE_GPU:-}" = 1 ] || compgen -G '/dev/nvidia*' >/dev/null; then
  gpu_expected=1
fi
if [ -r /proc/driver/nvidia/version ]; then
  driver="$(grep -o 'Kernel Module *[0-9][0-9.]*' /proc/driver/nvidia/version | grep -o '[0-9][0-9.]*$')"
  if [ -n "$driver" ] && [ "${driver%%.*}" -lt "$driver_floor" ]; then
    echo "check-node: NVIDIA driver $driver is older than R$driver_floor, which CUDA 13 needs; update the driver" >&2
    failed=1
  else
    echo "check-node: NVIDIA driver ${driver:-unknown}"
  fi
elif [ "$gpu_expected" = 1 ]; then
  echo "check-node: a GPU is expected (/dev/nvidia* or TRELLIS_REQUIRE_GPU=1) but no NVIDIA driver is loaded (/proc/driver/nvidia/version); install an R$driver_floor or newer driver" >&2
  failed=1
else
  echo "check-node: no NVIDIA driver here: the GPU tests will skip"
fi
exit $failed
