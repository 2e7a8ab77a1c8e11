#!/usr/bin/env bash
# Part of a GPU bundle (scripts/gpu-bundle.sh copies it to
# BUNDLE/check-node.sh): checks, before anything runs, that this node
# provides what the bundled build needs and names what is missing:
#
#   - every library of cuda-libs.txt (the CUDA runtime, cuBLAS, cuBLASLt,
#     NCCL, cuDNN by soname) resolves for the bundled binaries; where the
#     node's file name carries its version (libcublasLt.so.13.0.0.19) and
#     it is older than the version the build was compiled against, it warns
#     (same soname: the loader takes it, and only what the newer release
#     added can fail);
#   - the node's C library is at least the one the bundle needs
#     (glibc-version.txt);
#   - the NVIDIA driver, when one is loaded, is R580 or newer (CUDA 13), as
#     /proc/driver/nvidia/version or else nvidia-smi reports it.
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
    # Same soname, so the loader takes it and most of the build runs; what
    # the newer release added may fail, naming the missing symbol or an
    # unsupported-feature status. Said loudly, not refused.
    echo "check-node: WARNING: $soname is $have at $path, older than the $built the build was compiled against; a failure naming a missing symbol or an unsupported feature may come from it (put a folder with $built or newer first on CUDA_LIBS)"
  else
    echo "check-node: $soname $have ($path; built against $built)"
  fi
done <"$list"

# The C library: every file of the bundle needs glibc-version.txt's or
# newer (the loader would otherwise stop at the first program, naming a
# GLIBC_ version but not the cause).
if [ -f "$here/glibc-version.txt" ]; then
  need="$(cat "$here/glibc-version.txt")"
  have="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  if [ -z "$have" ]; then
    echo "check-node: WARNING: cannot tell this node's C library version (getconf GNU_LIBC_VERSION); the bundle needs glibc $need or newer"
  elif older "$have" "$need"; then
    echo "check-node: this node's glibc $have is older than the $need the bundle needs; build the bundle on a distribution no newer than the node's" >&2
    failed=1
  else
    echo "check-node: glibc $have (the bundle needs $need)"
  fi
fi

gpu_expected=0
if [ "${TRELLIS_REQUIRE_GPU:-}" = 1 ] || compgen -G '/dev/nvidia*' >/dev/null; then
  gpu_expected=1
fi
# The driver's version: the kernel module's, else nvidia-smi's (sandboxed
# nodes, gVisor for one, may have no /proc/driver/nvidia).
driver="" driver_from=""
if [ -r /proc/driver/nvidia/version ]; then
  driver="$(grep -o 'Kernel Module *[0-9][0-9.]*' /proc/driver/nvidia/version | grep -o '[0-9][0-9.]*$')"
  driver_from=/proc/driver/nvidia/version
fi
if [ -z "$driver" ] && command -v nvidia-smi >/dev/null; then
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  driver_from=nvidia-smi
fi
if [ -n "$driver_from" ]; then
  if [ -n "$driver" ] && [ "${driver%%.*}" -lt "$driver_floor" ] 2>/dev/null; then
    echo "check-node: NVIDIA driver $driver is older than R$driver_floor, which CUDA 13 needs; update the driver" >&2
    failed=1
  else
    echo "check-node: NVIDIA driver ${driver:-unknown} (from $driver_from)"
  fi
elif [ "$gpu_expected" = 1 ]; then
  echo "check-node: a GPU is expected (/dev/nvidia* or TRELLIS_REQUIRE_GPU=1) but no NVIDIA driver is loaded (no /proc/driver/nvidia/version, no nvidia-smi); install an R$driver_floor or newer driver" >&2
  failed=1
else
  echo "check-node: no NVIDIA driver here: the GPU tests will skip"
fi
exit $failed
