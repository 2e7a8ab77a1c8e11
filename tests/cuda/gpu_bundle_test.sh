#!/usr/bin/env bash
# scripts/gpu-bundle.sh makes a folder that runs without the build machine's
# packages: this packs the build, then (as root, in a private mount
# namespace) hides this machine's Open MPI, PMIx and every library the
# bundle carries, and runs the bundle's GPU tests (they skip without a GPU
# but must load and start) and an 8-rank MPI test through the bundled
# mpirun, and the bundle's scripts/gpu-check.sh in its dry run. Without
# root or mount namespaces it runs the same checks with nothing hidden.
# First it checks that the bundle names the CUDA runtime and cuBLAS
# versions the build needs and the C library it needs, carries the
# programs the GPU check runs, and that check-node.sh passes here and
# refuses a node that lacks a library or has an older C library. The
# checks run from the bundle moved to another folder, as unpacked on a
# node.
#
#   gpu_bundle_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
root="$1"
build="$2"
work="$(mktemp -d /var/tmp/trellis-bundle.XXXXXX)"
trap 'rm -rf "$work"' EXIT
BUILD_DIR="$build" "$root/scripts/gpu-bundle.sh" "$work/bundle"

libs="$work/bundle/cuda-libs.txt"
for lib in libcudart libcublas libcublasLt; do
  if ! grep -Eq "^$lib\.so\.[0-9]+ [0-9]+(\.[0-9]+)+\$" "$libs"; then
    echo "FAIL: $libs names no $lib with its version:"; cat "$libs"; exit 1
  fi
done
# This machine has what the build needs; a node without a library fails,
# naming it and the version the build needs.
if ! report="$(source "$work/bundle/env.sh" && "$work/bundle/check-node.sh" 2>&1)"; then
  echo "FAIL: check-node.sh refused the build machine:"; echo "$report"; exit 1
fi
grep -q "^check-node: libcublasLt.so" <<<"$report" ||
  { echo "FAIL: check-node.sh did not report cuBLASLt:"; echo "$report"; exit 1; }
cp "$libs" "$work/unmet.txt"
echo 'libcublasLt.so.99 99.0' >>"$work/unmet.txt"
if report="$(source "$work/bundle/env.sh" &&
             CUDA_LIB_LIST="$work/unmet.txt" "$work/bundle/check-node.sh" 2>&1)"; then
  echo "FAIL: check-node.sh accepted a missing library:"; echo "$report"; exit 1
fi
want="libcublasLt.so.99 not found (the build needs version 99.0 or newer)"
if ! grep -qF "$want" <<<"$report"; then
  echo "FAIL: check-node.sh did not say \"$want\":"; echo "$report"; exit 1
fi
# The C library the bundle needs, and a node whose glibc is older.
grep -Eqx '2\.[0-9]+' "$work/bundle/glibc-version.txt" ||
  { echo "FAIL: no glibc version in glibc-version.txt"; exit 1; }
cp "$work/bundle/glibc-version.txt" "$work/glibc-version.txt"
echo 2.999 >"$work/bundle/glibc-version.txt"
if report="$(source "$work/bundle/env.sh" && "$work/bundle/check-node.sh" 2>&1)" ||
    ! grep -q "glibc .* is older than the 2.999 the bundle needs" <<<"$report"; then
  echo "FAIL: check-node.sh accepted an older C library:"; echo "$report"; exit 1
fi
cp "$work/glibc-version.txt" "$work/bundle/glibc-version.txt"
# What the GPU check runs besides the tests, and the tests' program folder.
for f in bin/trellis-generate bin/trellis-convert bin/trellis-preprocess \
         bin/trellis-eval scripts/gpu_check_llama.py \
         scripts/gpu_check_cuda_libs.py scripts/torch_reference/hf_llama_loss.py; do
  [ -e "$work/bundle/$f" ] || { echo "FAIL: the bundle lacks $f"; exit 1; }
done
grep -q 'export TRELLIS_BINARY_DIR="$here"' "$work/bundle/run-gpu-tests.sh" ||
  { echo "FAIL: run-gpu-tests.sh does not point the tests at the bundle"; exit 1; }
# Unpacked elsewhere on a node: everything below runs from another folder.
mkdir "$work/node"
mv "$work/bundle" "$work/node/gpu-bundle"
bundle="$work/node/gpu-bundle"

cat >"$work/check.sh" <<'CHECK'
#!/usr/bin/env bash
set -euo pipefail
bundle="$1"
hide="$2"
multiarch="$(ls "$bundle/mpi/lib")"
if [ "$hide" = 1 ]; then
  empty="$(dirname "$bundle")/empty"
  mkdir -p "$empty"
  : >"$empty.file"
  # The libraries this check's own tools load (libpcre2 through
  # libselinux, for one) stay: hiding them would stop mount and ls, not
  # the bundle.
  base="$(ldd "$(command -v mount)" "$(command -v ls)" "$(command -v bash)" |
    awk '/=> \//{print $3}' | xargs -r readlink -f | sort -u)"
  files=()
  for lib in "$bundle"/lib/*; do
    for sys in "/usr/lib/$multiarch/$(basename "$lib")" \
               "/usr/lib/$multiarch"/*/"$(basename "$lib")"; do
      if [ -e "$sys" ]; then
        real="$(readlink -f "$sys")"
        if ! grep -qxF "$real" <<<"$base"; then files+=("$real"); fi
      fi
    done
  done
  for d in "/usr/lib/$multiarch/openmpi" "/usr/lib/$multiarch/pmix2" \
           /usr/share/openmpi /etc/openmpi; do
    if [ -d "$d" ]; then mount --bind "$empty" "$d"; fi
  done
  for f in /usr/bin/orted /usr/bin/orterun "${files[@]}"; do
    if [ -f "$f" ]; then mount --bind "$empty.file" "$f"; fi
  done
  echo "hid the system's Open MPI, PMIx and ${#files[@]} library files"
fi
source "$bundle/env.sh"
missing="$(ldd "$bundle"/bin/* | grep 'not found' || true)"
if [ -n "$missing" ]; then
  echo "FAIL: unresolved libraries:"; echo "$missing"; exit 1
fi
cd "$(dirname "$bundle")"
"$bundle/run-gpu-tests.sh"
mpi=(mpirun --oversubscribe --mca btl self,tcp)
if [ "$(id -u)" -eq 0 ]; then mpi+=(--allow-run-as-root); fi
"${mpi[@]}" -np 8 parallel_collectives_mpi_test
# The GPU check from the bundle, in its dry run on the CPU.
logs="$(dirname "$bundle")/gpu-runs"
OUT= "$bundle/scripts/gpu-check.sh" --dry-run --log-dir "$logs"
grep -q '^mode: bundle' "$logs"/*-cpu-dry-run.log
grep -q '^gpu-check: every section passed$' "$logs"/*-cpu-dry-run.log
CHECK
chmod +x "$work/check.sh"

if [ "$(id -u)" -eq 0 ] && unshare -m --propagation private true 2>/dev/null; then
  unshare -m --propagation private "$work/check.sh" "$bundle" 1
else
  echo "no mount namespace here: checking the bundle with nothing hidden"
  "$work/check.sh" "$bundle" 0
fi
echo "gpu_bundle_test: the bundle ran"
