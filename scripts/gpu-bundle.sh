#!/usr/bin/env bash
# Packs a CUDA build into a folder that runs on a GPU node without the
# Debian packages it was built against (docs/gpu.md, "Running a build on a
# GPU node that lacks its packages"): the programs and the GPU test
# binaries, the shared libraries they load (not the C library, nor CUDA,
# NCCL or cuDNN, which the node provides), and a relocated copy of Open MPI
# (mpirun, its daemon and plugins, PMIx), with
#
#   BUNDLE/env.sh             source it: PATH, LD_LIBRARY_PATH, OPAL_PREFIX
#   BUNDLE/cuda-libs.txt      the node's libraries the build needs: soname
#                             and the version it was linked against
#   BUNDLE/glibc-version.txt  the oldest C library the bundle runs on
#   BUNDLE/check-node.sh      checks the node's driver and those libraries
#   BUNDLE/run-gpu-tests.sh   check-node.sh, then the GPU tests (label gpu),
#                             one binary at a time
#   BUNDLE/scripts/gpu-check.sh  the whole GPU check (docs/gpu.md), with the
#                             PyTorch reference scripts it runs
#
#   scripts/gpu-bundle.sh [BUNDLE]        (default: gpu-bundle)
#
# TARBALL=path.tar.xz also packs it into one compressed file to copy.
# LLMC_DIR=folder adds the peer the GPU check measures trellis against:
# llm.c's train_gpt2cu built for the GPU, with its run.sh and make_data.py,
# as BUNDLE/peers/llmc/ (the check finds it there).
#
# On the node, put the CUDA, NCCL and cuDNN library folders on
# LD_LIBRARY_PATH first (CUDA_LIBS="dir1:dir2" for env.sh), then
# `source BUNDLE/env.sh` and run `BUNDLE/run-gpu-tests.sh` or
# `trellis-bench --device=cuda ...`. Needs a CUDA build in build/
# (BUILD_DIR to change): TRELLIS_CUDA=ON scripts/build.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="$(realpath -m "${1:-gpu-bundle}")"
if [ ! -x "$build/bin/cuda_tests" ]; then
  echo "gpu-bundle: $build/bin/cuda_tests not found; build with TRELLIS_CUDA=ON scripts/build.sh (or set BUILD_DIR)" >&2
  exit 1
fi
multiarch="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
ompi_lib="/usr/lib/$multiarch/openmpi"
pmix_lib="/usr/lib/$multiarch/pmix2"
for need in "$ompi_lib" "$pmix_lib" /usr/bin/orterun /usr/bin/orted /usr/share/openmpi; do
  if [ ! -e "$need" ]; then
    echo "gpu-bundle: $need not found; install Debian's Open MPI (scripts/install-deps.sh)" >&2
    exit 1
  fi
done

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/mpi/bin" "$out/mpi/lib/$multiarch" "$out/mpi/share"
programs=(trellis-train trellis-eval trellis-bench trellis-attention-bench
          trellis-bubbles trellis-generate trellis-convert trellis-preprocess
          trellis-plan)
tests=(cuda_tests parallel_collectives_mpi_test)
for f in "$build"/bin/cuda_*_mpi_test; do tests+=("$(basename "$f")"); done
for b in "${programs[@]}" "${tests[@]}"; do cp "$build/bin/$b" "$out/bin/"; done
echo "gpu-bundle: ${#programs[@]} programs and ${#tests[@]} test binaries"
# The GPU check and what it runs besides the programs (the same layout as
# in the source tree, so the script finds them beside itself).
mkdir -p "$out/scripts/torch_reference"
cp "$root/scripts/gpu-check.sh" "$root/scripts/gpu_check_sections.sh" \
  "$root/scripts/gpu_check_report.py" \
  "$root/scripts/gpu_check_llama.py" "$root/scripts/gpu_check_cuda_libs.py" \
  "$out/scripts/"
cp "$root"/scripts/torch_reference/*.py "$out/scripts/torch_reference/"

if [ -n "${LLMC_DIR:-}" ]; then
  for f in train_gpt2cu run.sh make_data.py; do
    if [ ! -f "$LLMC_DIR/$f" ]; then
      echo "gpu-bundle: LLMC_DIR=$LLMC_DIR has no $f (llm.c's trainer, run.sh and make_data.py)" >&2
      exit 1
    fi
  done
  mkdir -p "$out/peers/llmc"
  cp "$LLMC_DIR/train_gpt2cu" "$LLMC_DIR/run.sh" "$LLMC_DIR/make_data.py" "$out/peers/llmc/"
  echo "gpu-bundle: llm.c's trainer from $LLMC_DIR"
fi

# Open MPI as installed under /usr, moved under mpi/ (OPAL_PREFIX): Open MPI
# and PMIx find their plugins and help texts relative to the prefix.
cp -a "$ompi_lib" "$pmix_lib" "$out/mpi/lib/$multiarch/"
rm -rf "$out/mpi/lib/$multiarch/openmpi/include" "$out/mpi/lib/$multiarch/pmix2/include"
# Leave out the plugins of fabrics that need their own drivers (UCX,
# libfabric, PSM, InfiniBand verbs) and OpenSHMEM: ranks here talk over
# TCP and shared memory, and NCCL carries the GPU traffic.
find "$out/mpi/lib/$multiarch/openmpi/lib/openmpi3" -type f \
  \( -name '*ucx*' -o -name '*ofi*' -o -name '*psm*' -o -name '*openib*' \
  -o -name '*verbs*' -o -name 'mca_spml_*' -o -name 'mca_sshmem_*' \
  -o -name 'mca_scoll_*' -o -name 'mca_atomic_*' \) -delete
find "$out/mpi/lib/$multiarch/openmpi/lib" -maxdepth 1 \
  \( -name 'liboshmem*' -o -name 'libmca_common_ucx*' \
  -o -name 'libmca_common_ofi*' -o -name 'libmca_common_verbs*' \
  -o -name 'libmpi_java*' -o -name 'libmpi_mpifh*' -o -name 'libmpi_usempi*' \
  -o -name '*.a' \) -delete
cp -a /usr/share/openmpi "$out/mpi/share/"
cp /usr/bin/orterun /usr/bin/orted "$out/mpi/bin/"
ln -s orterun "$out/mpi/bin/mpirun"
ln -s orterun "$out/mpi/bin/mpiexec"

# Every shared library the binaries, mpirun, its daemon and plugins load,
# except the C library and loader (the node's must serve) and what the
# node's driver, CUDA, NCCL and cuDNN provide.
# (ldd fails on a file that is no dynamic object: the rest still counts.)
{
  ldd "$out"/bin/* "$out"/mpi/bin/orterun "$out"/mpi/bin/orted || true
  find "$out/mpi/lib" -name '*.so*' -type f -exec ldd {} + 2>/dev/null || true
} | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|libresolv|libutil)\.so|ld-linux' |
  grep -Ev '/(libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn|libnvidia)[^/]*$' |
  grep -Ev "^$out/" |
  xargs -r cp -L -t "$out/lib/"
echo "gpu-bundle: $(ls "$out/lib" | wc -l) shared libraries"

# What the node must provide: the CUDA runtime, cuBLAS, cuBLASLt (and NCCL,
# cuDNN where linked), by soname, with the version the build was compiled
# and linked against: from the headers next to the library
# (CUDART_VERSION, CUBLAS_VER_*, NCCL_*, CUDNN_*; CUDA_INCLUDE overrides),
# else from a versioned file name (libcublasLt.so.13.0.0.19).
header_version() {  # soname include-dir
  local h="$2" v=""
  case "$1" in
    libcudart.*) v="$(awk '/define CUDART_VERSION/{printf "%d.%d", $3/1000, ($3%1000)/10}' "$h/cuda_runtime_api.h" 2>/dev/null)" ;;
    libcublas.* | libcublasLt.*)
      v="$(awk '/define CUBLAS_VER_(MAJOR|MINOR|PATCH|BUILD) /{v = v (v == "" ? "" : ".") $3} END {print v}' "$h/cublas_api.h" 2>/dev/null)" ;;
    libnccl.*) v="$(awk '/define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v == "" ? "" : ".") $3} END {print v}' "$h/nccl.h" 2>/dev/null)" ;;
    libcudnn.*) v="$(awk '/define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{v = v (v == "" ? "" : ".") $3} END {print v}' "$h/cudnn_version.h" 2>/dev/null)" ;;
  esac
  echo "$v"
}
ldd "$build/bin/cuda_tests" "$build/bin/trellis-train" | awk '/=> \//{print $1, $3}' |
  grep -E '^(libcudart|libcublas|libcublasLt|libnccl|libcudnn)\.so' | sort -u |
  while read -r soname path; do
    include="${CUDA_INCLUDE:-$(dirname "$(dirname "$path")")/include}"
    version="$(header_version "$soname" "$include")"
    if [ -z "$version" ]; then
      real="$(basename "$(readlink -f "$path")")"
      version="${real#*.so.}"
    fi
    echo "$soname $version"
  done >"$out/cuda-libs.txt"
for need in libcudart libcublas libcublasLt; do
  if ! grep -q "^$need\.so" "$out/cuda-libs.txt"; then
    echo "gpu-bundle: $build/bin/cuda_tests links no $need; is this a CUDA build?" >&2
    exit 1
  fi
done
echo "gpu-bundle: needs from the node: $(awk '{printf "%s%s (%s)", (NR > 1 ? ", " : ""), $1, $2}' "$out/cuda-libs.txt")"
# The node's C library serves every file of the bundle: the newest
# GLIBC_ symbol version they need (libstdc++ and libevent ask 2.36 of a
# Debian 12 build) is the node's floor, which check-node.sh compares.
# (objdump fails on the files that are no ELF: the rest still counts.)
{ find "$out/bin" "$out/lib" "$out/mpi" -type f -exec objdump -T {} + 2>/dev/null || true; } |
  grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1 \
  >"$out/glibc-version.txt"
if [ ! -s "$out/glibc-version.txt" ]; then
  echo "gpu-bundle: found no GLIBC_ symbol versions (is objdump, from binutils, installed?)" >&2
  exit 1
fi
echo "gpu-bundle: needs glibc $(cat "$out/glibc-version.txt") or newer on the node"
cp "$root/scripts/gpu-bundle-check-node.sh" "$out/check-node.sh"
chmod +x "$out/check-node.sh"

cat >"$out/env.sh" <<'EOF'
# Source me: the bundle's programs, libraries and Open MPI come first.
_trellis_bundle="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_trellis_arch="$(ls "$_trellis_bundle/mpi/lib")"
export OPAL_PREFIX="$_trellis_bundle/mpi"
export PMIX_PREFIX="$_trellis_bundle/mpi/lib/$_trellis_arch/pmix2"
export PMIX_MCA_mca_base_component_path="$PMIX_PREFIX/lib/pmix"
# A node with a PMIx of its own (Ubuntu's under /usr/lib) offers its zlib
# plugin too, which the bundled PMIx cannot load: skip compression (ranks
# talk over loopback) rather than print that failure for every rank.
export PMIX_MCA_pcompress="^zlib" PMIX_MCA_pcompress_base_silence_warning=1
export PATH="$_trellis_bundle/bin:$_trellis_bundle/mpi/bin:$PATH"
export LD_LIBRARY_PATH="$_trellis_bundle/lib:$_trellis_bundle/mpi/lib/$_trellis_arch/openmpi/lib:$PMIX_PREFIX/lib${CUDA_LIBS:+:$CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Multi-rank tests talk over loopback only.
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OPENBLAS_NUM_THREADS=1
unset _trellis_bundle _trellis_arch
EOF

cat >"$out/run-gpu-tests.sh" <<'EOF'
#!/usr/bin/env bash
# The GPU tests of the bundled build: cuda_tests, then each multi-rank GPU
# test under mpirun with the ranks ctest gives it, each under a time limit
# (CUDA_TESTS_TIMEOUT, default 600 s, for cuda_tests; LAYOUT_TEST_TIMEOUT,
# default 600 s, for the 8-rank layout test; MPI_TEST_TIMEOUT, default
# 300 s, for each other multi-rank test), so that one that hangs does not
# keep the others from running. Extra arguments go to every test binary
# (e.g. --gtest_filter=...). Exits nonzero if any fails.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
"$here/check-node.sh" || exit 1
# The tests that run trellis's programs find them here, not in the build.
export TRELLIS_BINARY_DIR="$here"
mpi=(mpirun --oversubscribe --mca btl self,tcp)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
failed=0
run() {  # run SECONDS COMMAND...
  local limit="$1" rc
  shift
  echo "== $*"
  timeout -k 10 "$limit" "$@"
  rc=$?
  case $rc in
    0) ;;
    124|137) echo "FAILED (timed out after $limit s): $*"; failed=1 ;;
    *) echo "FAILED (exit $rc): $*"; failed=1 ;;
  esac
}
# By path: a death test runs the binary again from its argv[0].
run "${CUDA_TESTS_TIMEOUT:-600}" "$here/bin/cuda_tests" "$@"
EOF
# The multi-rank GPU tests and their rank counts, as ctest runs them.
grep -ho 'cuda_[a-z_]*_mpi_test_np[0-9]*' "$build"/tests/cuda/CTestTestfile.cmake 2>/dev/null |
  sort -u | while read -r t; do
    limit='${MPI_TEST_TIMEOUT:-300}'
    # The 8-rank layout test trains dozens of small runs: a limit of its own.
    [ "${t%_np*}" = cuda_layout_equivalence_mpi_test ] && limit='${LAYOUT_TEST_TIMEOUT:-600}'
    echo "run \"$limit\" \"\${mpi[@]}\" -np ${t##*_np} \"\$here/bin/${t%_np*}\" \"\$@\"" >>"$out/run-gpu-tests.sh"
  done
echo 'exit $failed' >>"$out/run-gpu-tests.sh"
chmod +x "$out/run-gpu-tests.sh"
echo "gpu-bundle: $(du -sh "$out" | cut -f1) in $out; on the node: CUDA_LIBS=... source $out/env.sh; $out/run-gpu-tests.sh"
if [ -n "${TARBALL:-}" ]; then
  tar -C "$(dirname "$out")" -cJf "$TARBALL" "$(basename "$out")"
  echo "gpu-bundle: $(du -sh "$TARBALL" | cut -f1) in $TARBALL"
fi
