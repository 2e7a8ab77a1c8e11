#!/usr/bin/env bash
# The GPU check: one command that measures a GPU node end to end and keeps
# the verbatim output (docs/gpu.md, "The GPU check"). In order, each a
# section with a header, a time limit and its duration:
#
#   system             nvidia-smi, driver and runtime versions, PyTorch's
#   tests              every GPU test (cuda_tests, then the multi-rank GPU
#                      tests under mpirun: NCCL, host staging, the 8-rank
#                      layout test on one GPU), each binary under its own
#                      time limit
#   memcheck           compute-sanitizer's memcheck over the hand-written
#                      kernels' tests (MEMCHECK_FILTER)
#   llama              a small Hugging Face Llama converted by
#                      trellis-convert: trellis-eval's loss on the device
#                      against scripts/torch_reference/hf_llama_loss.py's
#                      (PyTorch, float64, on the same device)
#   generate           trellis-generate of that model, greedy: the tokens
#                      on the device equal the CPU's
#   bench:<preset>     trellis-bench, seq_len 1024, bf16, recompute off,
#                      --profile (tokens/s, TFLOP/s, MFU, peak memory, the
#                      per-kernel table and the kernel cost table), and
#                      trellis-plan's step for it from that table against
#                      the measured one; each followed by
#   torch:<preset>     a compiled PyTorch GPT-2 (or Llama, for a llama-*
#                      preset) of the preset's shape
#   llmc:<preset>      llm.c's GPT-2 trainer (when LLMC_DIR holds it) at
#                      the same depth, sequence length and tokens per step,
#                      at its own micro batch
#   attention          trellis-attention-bench: attention alone, per path
#   torch-sdpa         PyTorch's scaled_dot_product_attention, same shapes
#   variants           the step of each VARIANT_PRESETS (default: the
#                      first preset) under other settings (VARIANTS),
#                      beside the preset as benched
#   goals              the tables folded from the JSON results, and the
#                      goals judged
#
# (the largest preset's bench and torch sections run after attention and
# torch-sdpa, and variants last, as what is left of the budget allows).
#
#   scripts/gpu-check.sh [--dry-run] [--log-dir DIR] [--results DIR]
#                        [--bin DIR] [--budget SECONDS] [--only LIST]
#
# Runs from an unpacked bundle (scripts/gpu-bundle.sh puts this script in
# BUNDLE/scripts/ and sources BUNDLE/env.sh) or from a checkout with a CUDA
# build (BUILD_DIR, default build/). A failing section does not stop the
# check; it exits 1 at the end and names the failed sections. Without a
# usable GPU (the system section fails) it stops after the system section
# and exits 1: a GPU check never passes without a GPU, and it sets
# TRELLIS_REQUIRE_GPU=1 so that no GPU test can skip for want of one. The
# whole check, the goals included, stays within a time budget (--budget,
# default 570 s, so that it fits one 10-minute command with room to unpack
# the bundle): each section runs under the smaller of its own limit and
# what is left (less 20 s kept for the goals), a section with too little
# time left is skipped and counts as failed. --only runs only the listed
# kinds of section (comma-separated: system, tests, memcheck, llama, generate,
# bench, attention, torch-sdpa, variants, torch, llmc, goals), e.g. to repeat the
# benchmarks alone.
#
# Everything printed also goes, line by line as it is printed (a killed
# check keeps what ran), to the log <date>-<gpu>.log in --log-dir, else
# $OUT when set, else docs/gpu-runs/ in a checkout or ./gpu-runs/
# beside a bundle. The JSON results go to --results (default: runs/
# gpu-check/<stamp>/ in a checkout, a folder under $TMPDIR beside a
# bundle), packed into $OUT/<log's name>-results.tar.gz when $OUT is set.
#
# --dry-run runs every section on the CPU with tiny shapes and no GPU test
# cases (the test binaries and mpirun still start), to check the plumbing
# on a machine without a GPU; its goals are shown, not judged.
#
# Environment: PRESETS (default "gpt2-124m gpt2-350m gpt2-774m"; also
# gpt2-1558m, llama-3.2-1b, which runs at seq_len 2048, and the mixture of
# experts moe-0.9b-a0.2b, which has no PyTorch or llm.c twin), STEPS
# (trellis-bench's timed steps, default 5), BATCH (windows of 1024 tokens
# per optimizer step for trellis, PyTorch and llm.c alike, default 64),
# MICRO_BATCH (trellis's micro batch per preset, "gpt2-124m=16 ...";
# default: the preset's), LLMC_DIR (a folder with llm.c's train_gpt2cu
# built for the GPU, its run.sh and make_data.py: the peer; default: a
# bundle's peers/llmc, else none, and the llmc sections skip),
# LLMC_MICRO_BATCH (llm.c's micro batch per preset, default "gpt2-124m=64
# gpt2-350m=64 gpt2-774m=32", the ones its own scripts use), TORCH_MICRO_BATCH
# (compiled PyTorch's micro batch per preset, the same form; default:
# trellis's, which may not fit PyTorch: 350M at 64 runs out of 80 GB),
# TORCH_PRESETS (the presets whose PyTorch twin runs; default: all), LLMC_STEPS
# (llm.c's steps, default 12; the median is of the fourth on),
# MEMCHECK_FILTER (the cuda_tests cases memcheck runs),
# VARIANT_PRESETS and VARIANTS (the variants section), ATTENTION_PATHS (default: every
# path the build offers), GTEST_FILTER, CUDA_TESTS_TIMEOUT (default 60 s),
# LAYOUT_TEST_TIMEOUT (240 s, the 8-rank layout test) and MPI_TEST_TIMEOUT
# (30 s, each other multi-rank test) for the tests section, PYTHON
# (default python3), CUDA_LIBS (colon-separated CUDA, NCCL and cuDNN
# library folders; default: /usr/local/cuda's and the nvidia/*/lib folders
# of PYTHON's site-packages, the folder with the newest cuBLAS first, then
# cuDNN's, NCCL's and the runtime's).
set -uo pipefail
self="$(realpath "${BASH_SOURCE[0]}")"
here="$(dirname "$self")"
root="$(dirname "$here")"

# ---------------------------------------------------------------- sections
# One function each, in gpu_check_sections.sh beside this script.
source "$here/gpu_check_sections.sh"

if [ "${1:-}" = --section ]; then
  name="$2"
  shift 2
  "section_$name" "$@"
  exit
fi

# ------------------------------------------------------------------ driver
usage() { sed -n '2,/^set -uo/p' "$self" | sed -e '$d' -e 's/^# \{0,1\}//'; }

dry=0 log_dir="" results="" bin="" budget=570 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --log-dir) log_dir="$2"; shift ;;
    --results) results="$2"; shift ;;
    --bin) bin="$2"; shift ;;
    --budget) budget="$2"; shift ;;
    --only) only=",$2,"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# CUDA, NCCL and cuDNN library folders: the toolkit's and the wheels'
# (PyTorch's nvidia/cu13/lib, nvidia/cudnn/lib, nvidia/nccl/lib, ...). For
# each library of the bundle's cuda-libs.txt the folder holding its newest
# release (asked of the library, gpu_check_cuda_libs.py) comes first, so
# that an older toolkit does not shadow the wheels' newer cuBLAS or cuDNN.
# Sets CUDA_LIBS, and GC_CUDA_LIBS_FOUND to what was found where.
find_cuda_libs() {
  local dirs=() d site py="${PYTHON:-python3}" found
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && dirs+=("$(realpath "$d")")
  done
  if command -v "$py" >/dev/null; then
    for site in $("$py" -c \
        'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
      for d in "$site"/nvidia/*/lib "$site"/nvidia/*/lib64; do
        [ -d "$d" ] && dirs+=("$d")
      done
    done
  fi
  # Once each (lib64 and targets/.../lib are often the same folder).
  local unique=()
  for d in "${dirs[@]}"; do
    [[ " ${unique[*]} " == *" $d "* ]] || unique+=("$d")
  done
  dirs=("${unique[@]}")
  CUDA_LIBS="$(IFS=:; echo "${dirs[*]}")"
  GC_CUDA_LIBS_FOUND=""
  # (Python with the caller's library path: env.sh is not sourced yet.)
  if [ -f "$root/cuda-libs.txt" ] && command -v "$py" >/dev/null &&
      found="$("$py" "$here/gpu_check_cuda_libs.py" \
        "$root/cuda-libs.txt" "${dirs[@]}")"; then
    CUDA_LIBS="$(head -n 1 <<<"$found")"
    GC_CUDA_LIBS_FOUND="$(tail -n +2 <<<"$found")"
  fi
}

export GC_PY_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
export GC_CUDA_LIBS_FOUND="(CUDA_LIBS set by the caller)"
if [ -z "${CUDA_LIBS+set}" ]; then find_cuda_libs; fi
export CUDA_LIBS GC_CUDA_LIBS_FOUND
if [ -f "$root/env.sh" ]; then
  mode=bundle
  source "$root/env.sh"
  bin="${bin:-$root/bin}"
  [ -z "${LLMC_DIR:-}" ] && [ -d "$root/peers/llmc" ] && export LLMC_DIR="$root/peers/llmc"
else
  mode=checkout
  bin="${bin:-${BUILD_DIR:-$root/build}/bin}"
  export LD_LIBRARY_PATH="${CUDA_LIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ ! -x "$bin/trellis-bench" ] || [ ! -x "$bin/trellis-attention-bench" ]; then
  echo "gpu-check: trellis-bench or trellis-attention-bench not in $bin; build with TRELLIS_CUDA=ON scripts/build.sh (or pass --bin)" >&2
  exit 2
fi

if [ "$dry" = 1 ]; then
  gpu=cpu-dry-run
else
  gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
  gpu="$(echo "${gpu:-unknown-gpu}" | tr 'A-Z' 'a-z' | sed -e 's/^nvidia //' -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/-$//')"
fi
stamp="$(date -u +%Y-%m-%d)-$gpu"
if [ -z "$log_dir" ]; then
  if [ -n "${OUT:-}" ]; then log_dir="$OUT"
  elif [ "$mode" = checkout ]; then log_dir="$root/docs/gpu-runs"
  else log_dir="$PWD/gpu-runs"; fi
fi
mkdir -p "$log_dir"
log="$log_dir/$stamp.log"
[ -e "$log" ] && log="$log_dir/$stamp-$(date -u +%H%M%S).log"
if [ -z "$results" ]; then
  if [ "$mode" = checkout ]; then results="$root/runs/gpu-check/$stamp-$(date -u +%H%M%S)"
  else results="$(mktemp -d "${TMPDIR:-/tmp}/trellis-gpu-check.XXXXXX")"; fi
fi
mkdir -p "$results"
: >"$results/sections.tsv"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/trellis-gpu-check-scratch.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
export GC_MODE="$mode" GC_BIN="$bin" GC_RESULTS="$results" GC_DRY="$dry"
export GC_SCRATCH="$scratch"
# On the GPU, no GPU test may skip for want of a device.
[ "$dry" = 1 ] || export TRELLIS_REQUIRE_GPU=1
export GC_DEVICE="$([ "$dry" = 1 ] && echo cpu || echo cuda)"
export GC_PYTHON="${PYTHON:-python3}" PYTHONUNBUFFERED=1
export GC_PRESETS="${PRESETS:-gpt2-124m gpt2-350m gpt2-774m}"
[ "$dry" = 1 ] && GC_PRESETS="${PRESETS:-tiny}"

start=$(date +%s)
failed=()
summary=()

# Seconds of the budget kept for the goals section, which runs last.
goals_reserve=20
# The programs' output line by line (stdio buffers a pipe's output until
# exit), so that a section killed at its limit still leaves its lines in
# the log.
linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)

# run_section NAME FUNCTION LIMIT BUDGETED [ARG]: runs section_FUNCTION
# ARG under timeout, reported as NAME. A budgeted section leaves
# goals_reserve seconds of the budget; the goals section takes what is left.
# Returns the section's status (0: passed).
run_section() {
  local name="$1" fn="$2" limit="$3" budgeted="$4" arg="${5:-}" t0 rc status
  local secs
  if [ -n "$only" ] && [[ "$only" != *",${fn//_/-},"* ]]; then return 0; fi
  # Less the 5 s that timeout may wait before it kills a section that
  # ignores its TERM, so that even then the check ends within the budget.
  local left=$((budget - ($(date +%s) - start) - 5))
  [ "$budgeted" = 1 ] && left=$((left - goals_reserve))
  if [ "$left" -lt "$limit" ]; then limit="$left"; fi
  echo
  echo "==== $name (limit ${limit} s) ==== $(date -u +%H:%M:%S)"
  if [ "$limit" -lt 10 ]; then
    status="skipped: the ${budget} s budget is spent"
    rc=1 secs=0
  else
    t0=$(date +%s)
    timeout -k 5 "$limit" "${linebuf[@]}" "$self" --section "$fn" $arg
    rc=$?
    secs=$(($(date +%s) - t0))
    case $rc in
      0) status=ok ;;
      124|137) status="timed out after ${limit} s" ;;
      *) status="FAILED (exit $rc)" ;;
    esac
  fi
  echo "---- $name: $status in $secs s"
  printf '%s\t%s\t%s\n' "$name" "${status%% *}" "$secs" >>"$results/sections.tsv"
  summary+=("| $name | $status | $secs |")
  [ "$rc" -eq 0 ] || failed+=("$name")
  return "$rc"
}

# wants_torch PRESET: whether TORCH_PRESETS (default: every preset) names it.
# A preset's PyTorch twin runs when TORCH_PRESETS (default: every preset)
# names it; a mixture of experts (moe-*) has none.
wants_torch() {
  case "$1" in moe-*) return 1 ;; esac
  [[ " ${TORCH_PRESETS:-$GC_PRESETS} " == *" $1 "* ]]
}

main() {
  echo "trellis GPU check$([ "$dry" = 1 ] && echo ' (dry run on the CPU)'): $stamp"
  echo "log $log; results $results; budget ${budget} s"
  if ! run_section system system 60 1 && [ "$dry" = 0 ]; then
    echo
    echo "gpu-check: stopped: the system section failed, so no GPU (or a library"
    echo "the programs need) is usable here; nothing else can be measured."
    echo "Its output above names the problem; --dry-run checks the plumbing on a CPU."
    finish
    return 1
  fi
  run_section tests tests 360 1
  run_section memcheck memcheck 150 1
  run_section llama llama 90 1
  run_section generate generate 60 1
  # Each preset's PyTorch run right after its own, the largest preset
  # after attention, so that a short budget cuts the least needed.
  local presets=($GC_PRESETS) preset last=""
  [ ${#presets[@]} -gt 2 ] && last="${presets[-1]}" && unset 'presets[-1]'
  for preset in "${presets[@]}"; do
    run_section "bench:$preset" bench 120 1 "$preset"
    wants_torch "$preset" && run_section "torch:$preset" torch 150 1 "$preset"
    run_section "llmc:$preset" llmc 120 1 "$preset"
  done
  run_section attention attention 90 1
  run_section torch-sdpa torch_sdpa 90 1
  if [ -n "$last" ]; then
    run_section "bench:$last" bench 120 1 "$last"
    wants_torch "$last" && run_section "torch:$last" torch 150 1 "$last"
    run_section "llmc:$last" llmc 120 1 "$last"
  fi
  # Diagnostics last: the goals' measurements come first.
  run_section variants variants 150 1
  run_section goals goals 60 0
  finish
}

# The summary table, the results packed into $OUT, the closing line.
# Returns 1 when a section failed.
finish() {
  local total=$(($(date +%s) - start))
  echo
  echo "==== summary: ${total} s of the check (budget ${budget} s)"
  echo "| section | result | seconds |"
  echo "|---|---|---|"
  printf '%s\n' "${summary[@]}"
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    # Named after the log (a second check on one day adds the time to both).
    local packed="$OUT/$(basename "${log%.log}")-results.tar.gz"
    tar -C "$results" -czf "$packed" . && echo "JSON results packed into $packed"
  fi
  echo "log: $log"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu-check: FAILED sections: ${failed[*]}"
    return 1
  fi
  echo "gpu-check: every section passed"
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
