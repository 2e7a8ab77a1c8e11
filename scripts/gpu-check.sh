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
#                      --profile (tokens/s, TFLOP/s, MFU, peak memory and
#                      the per-kernel table), each followed by
#   torch:<preset>     a compiled PyTorch GPT-2 of the preset's shape
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
# Environment: PRESETS (default "gpt2-124m gpt2-350m gpt2-774m"), STEPS
# (trellis-bench's timed steps, default 5), BATCH (windows of 1024 tokens
# per optimizer step for trellis, PyTorch and llm.c alike, default 64),
# MICRO_BATCH (trellis's micro batch per preset, "gpt2-124m=16 ...";
# default: the preset's), LLMC_DIR (a folder with llm.c's train_gpt2cu
# built for the GPU, its run.sh and make_data.py: the peer; default: a
# bundle's peers/llmc, else none, and the llmc sections skip),
# LLMC_MICRO_BATCH (llm.c's micro batch per preset, default "gpt2-124m=64
# gpt2-350m=64 gpt2-774m=32", the ones its own scripts use), LLMC_STEPS
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
# Each runs in its own process (gpu-check.sh --section FUNCTION ARG) under
# timeout, with the GC_* variables of the driver.

section_system() {
  echo "host: $(uname -nrm); $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "mode: $GC_MODE, programs in $GC_BIN"
  echo "CUDA_LIBS=${CUDA_LIBS:-}"
  if [ -n "$GC_CUDA_LIBS_FOUND" ]; then
    echo "CUDA libraries found (soname, release, folder):"
    echo "$GC_CUDA_LIBS_FOUND"
  fi
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  else
    echo "nvidia-smi: not on PATH"
  fi
  if command -v nvcc >/dev/null; then nvcc --version | tail -n 2; fi
  # A bundle's node check: the CUDA libraries found and their versions
  # against the build's, the C library, the driver.
  if [ "$GC_MODE" = bundle ]; then "$root/check-node.sh" || return 1; fi
  local missing
  missing="$(ldd "$GC_BIN"/trellis-* "$GC_BIN"/cuda_tests 2>/dev/null |
    grep 'not found' | sort -u)"
  if [ -n "$missing" ]; then
    echo "FAIL: libraries not found (set CUDA_LIBS to their folders):"
    echo "$missing"
    return 1
  fi
  "$GC_BIN/trellis-attention-bench" --device="$GC_DEVICE" --info || return 1
  run_python - <<'EOF' || echo "PyTorch: $GC_PYTHON not found or failed"
try:
    import torch
except ImportError as e:
    print(f"PyTorch: not importable ({e})")
else:
    cuda = torch.cuda.is_available()
    nccl = torch.cuda.nccl.version() if cuda else None
    print(f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}, NCCL {nccl}, device "
          f"{torch.cuda.get_device_name() if cuda else 'none'}")
EOF
}

# The GPU tests; their output also goes to tests.txt, and the names of the
# cases that skipped to tests-skipped.txt.
section_tests() {
  local rc skipped
  run_tests 2>&1 | tee "$GC_RESULTS/tests.txt"
  rc=${PIPESTATUS[0]}
  # gtest's "[  SKIPPED ] Suite.Case", without colours; not its count line.
  sed 's/\x1b\[[0-9;]*m//g' "$GC_RESULTS/tests.txt" |
    grep -o 'SKIPPED \] [A-Za-z][A-Za-z0-9_/.]*' | cut -d' ' -f3 | sort -u \
    >"$GC_RESULTS/tests-skipped.txt"
  skipped=$(wc -l <"$GC_RESULTS/tests-skipped.txt")
  echo "test cases skipped: $skipped$([ "$skipped" -gt 0 ] && echo " ($(paste -sd' ' "$GC_RESULTS/tests-skipped.txt"))")"
  return "$rc"
}

run_tests() {
  local filter=()
  if [ -n "${GTEST_FILTER:-}" ]; then
    filter=(--gtest_filter="$GTEST_FILTER")
  elif [ "$GC_DRY" = 1 ]; then
    filter=(--gtest_filter=-*)  # start every binary, run no case
  fi
  # Each binary under its own limit, within the section's 360 s: a hung
  # cuda_tests leaves time for the three multi-rank tests (60 + 2 × 30 +
  # 240; on an H100 they took 30, 2, 5 and 196 s).
  export CUDA_TESTS_TIMEOUT="${CUDA_TESTS_TIMEOUT:-60}"
  export MPI_TEST_TIMEOUT="${MPI_TEST_TIMEOUT:-30}"
  export LAYOUT_TEST_TIMEOUT="${LAYOUT_TEST_TIMEOUT:-240}"
  if [ "$GC_MODE" = bundle ]; then
    "$root/run-gpu-tests.sh" "${filter[@]}"
    return
  fi
  # A checkout: the same runs as the bundle's run-gpu-tests.sh, with the
  # rank counts ctest gives the multi-rank tests.
  local mpi=(mpirun --oversubscribe --mca btl self,tcp) failed=0 t limit
  local ctest_file="$GC_BIN/../tests/cuda/CTestTestfile.cmake"
  [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
  if [ ! -f "$ctest_file" ]; then
    echo "FAIL: $ctest_file not found: the build's list of multi-rank GPU tests"
    return 1
  fi
  echo "== cuda_tests"
  timeout -k 10 "$CUDA_TESTS_TIMEOUT" "$GC_BIN/cuda_tests" "${filter[@]}" ||
    { echo "FAILED: cuda_tests"; failed=1; }
  for t in $(grep -ho 'cuda_[a-z_]*_mpi_test_np[0-9]*' "$ctest_file" |
      sort -u); do
    echo "== ${mpi[*]} -np ${t##*_np} ${t%_np*}"
    limit="$MPI_TEST_TIMEOUT"
    [ "${t%_np*}" = cuda_layout_equivalence_mpi_test ] && limit="$LAYOUT_TEST_TIMEOUT"
    timeout -k 10 "$limit" "${mpi[@]}" -np "${t##*_np}" \
      "$GC_BIN/${t%_np*}" "${filter[@]}" || { echo "FAILED: ${t%_np*}"; failed=1; }
  done
  return $failed
}

# compute-sanitizer's memcheck over cuda_tests' cases of the hand-written
# kernels (MEMCHECK_FILTER): any error fails the section.
section_memcheck() {
  if [ "$GC_DRY" = 1 ]; then
    echo "skipped: compute-sanitizer runs only on a GPU"
    return 0
  fi
  local cs
  cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if [ ! -x "$cs" ]; then
    echo "FAIL: no compute-sanitizer on PATH or in /usr/local/cuda/bin"
    return 1
  fi
  "$cs" --tool memcheck --error-exitcode 3 "$GC_BIN/cuda_tests" \
    --gtest_filter="${MEMCHECK_FILTER:-CudaAttentionMma*:DTypes/CudaAttentionTest*:DTypes/CudaBackwardFusion*:DTypes/CudaElementwise*:DTypes/CudaLayers*:DTypes/CudaLlama*:Paths/CudaGqa*simt:Paths/CudaGqa*mma}" \
    >"$GC_RESULTS/memcheck.txt" 2>&1
  local rc=$?
  grep -E '^(\[==========\]|\[  PASSED  \]|\[  FAILED  \]|=========)' "$GC_RESULTS/memcheck.txt" | tail -n 20
  return "$rc"
}

# A small Hugging Face Llama (scripts/gpu_check_llama.py) converted to a
# trellis checkpoint, once per check, in $GC_SCRATCH/llama.
llama_model() {
  local d="$GC_SCRATCH/llama"
  [ -d "$d/ckpt" ] && return 0
  rm -rf "$d"
  run_python "$here/gpu_check_llama.py" write "$d" &&
    "$GC_BIN/trellis-preprocess" --input="$d/text.txt" \
      --output="$d/tokens.h5" --tokenizer=byte --threads=1 2>&1 |
      tr '\r' '\n' | tail -n 1 && [ "${PIPESTATUS[0]}" -eq 0 ] &&
    "$GC_BIN/trellis-convert" --input="$d/hf" --to=trellis \
      --output="$d/ckpt" --tokenizer=byte
}

section_llama() {
  have_python || return 1
  llama_model || return 1
  local d="$GC_SCRATCH/llama"
  echo "== trellis-eval --device=$GC_DEVICE"
  "$GC_BIN/trellis-eval" --load="$d/ckpt" --data="$d/tokens.h5" \
    --max_windows=8 --micro_batch_size=4 --device="$GC_DEVICE" 2>&1 |
    tee "$GC_RESULTS/llama-eval.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
  echo "== hf_llama_loss.py --device=$GC_DEVICE"
  run_python "$here/torch_reference/hf_llama_loss.py" "$d/hf" \
    "$d/tokens.txt" 64 8 --device="$GC_DEVICE" \
    --json="$GC_RESULTS/llama-torch.json" || return 1
  run_python "$here/gpu_check_llama.py" loss "$GC_RESULTS/llama-eval.txt" \
    "$GC_RESULTS/llama-torch.json" --device="$GC_DEVICE"
}

section_generate() {
  have_python || return 1
  llama_model || return 1
  local device devices=(cpu)
  [ "$GC_DEVICE" = cpu ] || devices+=("$GC_DEVICE")
  for device in "${devices[@]}"; do
    echo "== trellis-generate --device=$device --temperature=0"
    "$GC_BIN/trellis-generate" --load="$GC_SCRATCH/llama/ckpt" \
      --prompt="the quick brown fox" --max_new_tokens=40 --temperature=0 \
      --device="$device" >"$GC_RESULTS/generate-$device.txt" 2>&1
    local rc=$?
    # The continuation is raw bytes of a random model: only its JSON line
    # (token ids, speed) goes to the log, unless the run failed.
    if [ "$rc" -ne 0 ]; then
      cat -v "$GC_RESULTS/generate-$device.txt"
      return 1
    fi
    grep '^{' "$GC_RESULTS/generate-$device.txt"
  done
  run_python "$here/gpu_check_llama.py" tokens "$GC_RESULTS/generate-cpu.txt" \
    "$GC_RESULTS/generate-$GC_DEVICE.txt" --device="$GC_DEVICE"
}

# trellis-bench's flags for preset $1 into bench_flags (the dry run: a
# tiny model on the CPU).
set_bench_flags() {
  if [ "$GC_DRY" = 1 ]; then
    bench_flags=(--device=cpu --n_layer=2 --n_head=2 --d_model=64 --seq_len=64
                 --vocab_size=257 --steps=2 --warmup=1 --gemm_size=128)
  else
    bench_flags=(--device=cuda --preset="$1" --seq_len=1024 --precision=bf16
                 --recompute=none --steps="${STEPS:-5}"
                 --global_batch_size="${BATCH:-64}")
    local mb
    mb="$(preset_value "${MICRO_BATCH:-}" "$1")"
    [ -n "$mb" ] && bench_flags+=(--micro_batch_size="$mb")
  fi
}

# preset_value "gpt2-124m=16 gpt2-350m=8" PRESET: the value given for
# PRESET, else nothing.
preset_value() {
  local pair
  for pair in $1; do
    [ "${pair%%=*}" = "$2" ] && echo "${pair#*=}" && return 0
  done
  return 0
}

# llm.c's trainer at the preset's depth, the bench's sequence length and
# tokens per step (read from bench-<preset>.json when it ran, else BATCH),
# its own micro batch; its median step goes to llmc-<preset>.json.
section_llmc() {
  local preset="$1" depth b windows seq=1024 json="$GC_RESULTS/llmc-$1.json"
  if [ "$GC_DRY" = 1 ]; then
    echo "skipped: llm.c runs only on a GPU"
    printf '{"skipped": "dry run"}\n' >"$json"
    return 0
  fi
  if [ -z "${LLMC_DIR:-}" ] || [ ! -x "$LLMC_DIR/train_gpt2cu" ]; then
    echo "skipped: no llm.c build (set LLMC_DIR to a folder with train_gpt2cu, run.sh and make_data.py)"
    printf '{"skipped": "no llm.c build"}\n' >"$json"
    return 0
  fi
  case "$preset" in
    gpt2-124m) depth=12 ;; gpt2-350m) depth=24 ;; gpt2-774m) depth=36 ;;
    gpt2-1558m) depth=48 ;;
    *) echo "skipped: llm.c has no depth for $preset"
       printf '{"skipped": "no llm.c shape"}\n' >"$json"; return 0 ;;
  esac
  b="$(preset_value "${LLMC_MICRO_BATCH:-gpt2-124m=64 gpt2-350m=64 gpt2-774m=32 gpt2-1558m=16}" "$preset")"
  windows="${BATCH:-64}"
  if [ -f "$GC_RESULTS/bench-$preset.json" ]; then
    windows="$(run_python -c 'import json, sys; j = json.load(open(sys.argv[1])); print(j["global_batch_size"])' "$GC_RESULTS/bench-$preset.json")" || return 1
    seq="$(run_python -c 'import json, sys; j = json.load(open(sys.argv[1])); print(j["model"]["seq_len"])' "$GC_RESULTS/bench-$preset.json")" || return 1
  fi
  # llm.c takes whole micro batches per step.
  [ $((windows % b)) -eq 0 ] || b="$windows"
  if [ ! -f "$GC_SCRATCH/llmc-data/train_000000.bin" ]; then
    run_python "$LLMC_DIR/make_data.py" "$GC_SCRATCH/llmc-data" 4000000 >/dev/null || return 1
  fi
  local log="$GC_RESULTS/llmc-$preset.txt"
  (cd "$GC_SCRATCH" && PYTHON="$GC_PYTHON" "$LLMC_DIR/run.sh" "$LLMC_DIR/train_gpt2cu" \
    "$GC_SCRATCH/llmc-data" "$depth" "$b" "$seq" $((windows * seq)) \
    "${LLMC_STEPS:-12}") >"$log" 2>&1
  local rc=$?
  grep -E '^(device|num_parameters|llmc |step +(1|12)/)' "$log"
  if [ "$rc" -ne 0 ]; then tail -n 20 "$log"; return 1; fi
  # "llmc d12 B64 T1024 total 65536: median step 140.00 ms (steps 4..12),
  # 468114 tokens/s"
  grep -m 1 '^llmc ' "$log" | sed -E \
    's/^llmc d([0-9]+) B([0-9]+) T([0-9]+) total ([0-9]+): median step ([0-9.]+) ms.* ([0-9]+) tokens\/s$/{"depth": \1, "micro_batch_size": \2, "seq_len": \3, "tokens_per_step": \4, "ms": \5, "tokens_per_s": \6}/' \
    >"$json"
  grep -q '^{' "$json" || { echo "FAIL: no summary line from llm.c's run.sh"; return 1; }
}

section_bench() {
  local preset="$1" bench_flags
  set_bench_flags "$preset"
  "$GC_BIN/trellis-bench" "${bench_flags[@]}" --profile \
    --json="$GC_RESULTS/bench-$preset.json"
}

section_attention() {
  local args
  if [ "$GC_DRY" = 1 ]; then
    args=(--device=cpu --shapes=1x64x2x16,2x32x1x16 --warmup=1 --reps=2)
  else
    args=(--device=cuda --shapes="${GC_PRESETS// /,}")
  fi
  if [ -n "${ATTENTION_PATHS:-}" ]; then args+=(--paths="$ATTENTION_PATHS"); fi
  "$GC_BIN/trellis-attention-bench" "${args[@]}" \
    --json="$GC_RESULTS/attention.json"
}

# Each VARIANT_PRESETS' step (default: the first preset) under other
# settings, each run beside the preset as benched in this one section
# (shared machines: compare ratios taken together): what a setting costs or
# buys. VARIANTS: ';'-separated flag sets added to trellis-bench's; the
# default tries smaller micro batches (the same tokens per step), the LM
# head in 1024-row chunks, the bias gradients in the GEMMs' epilogue and
# the tensor-core attention.
section_variants() {
  local preset rc=0
  for preset in ${VARIANT_PRESETS:-${GC_PRESETS%% *}}; do
    variants_of "$preset" || rc=1
  done
  return "$rc"
}

variants_of() {
  local preset="$1" bench_flags variant rc=0 ms="" line tps mfu mem
  local base_tps="" tag
  set_bench_flags "$preset"
  local list="${VARIANTS---micro_batch_size=16;--micro_batch_size=32;--loss_chunk_rows=1024;--bias_grad_epilogue;--attention=mma}"
  local variants=("")
  IFS=';' read -r -a more <<<"$list"
  variants+=("${more[@]}")
  echo "| $preset with | step ms | tokens/s | MFU | memory | tokens/s vs as benched |"
  echo "|---|---|---|---|---|---|"
  local i=0
  for variant in "${variants[@]}"; do
    i=$((i + 1))
    tag="variant-$preset-$i"
    # shellcheck disable=SC2086 # a variant is several flags
    if ! "$GC_BIN/trellis-bench" "${bench_flags[@]}" $variant \
        --json="$GC_RESULTS/$tag.json" >"$GC_RESULTS/$tag.txt" 2>&1; then
      echo "| ${variant:-(as benched)} | failed: $(tail -n 1 "$GC_RESULTS/$tag.txt") | | | | |"
      rc=1
      continue
    fi
    # "step: 81.5 ms median of 5, 401830 tokens/s, ..." and "MFU 32.6% of
    # ...; device memory allocated 4.78 GiB".
    line="$(grep -m 1 '^step: ' "$GC_RESULTS/$tag.txt")"
    ms="$(sed -E 's/^step: ([0-9.]+) ms.*/\1/' <<<"$line")"
    tps="$(sed -E 's/.* ([0-9]+) tokens\/s.*/\1/' <<<"$line")"
    # (On the CPU no MFU; "ratio to sgemm ...; peak RSS 183 MiB".)
    mfu="$(grep -m 1 '^MFU ' "$GC_RESULTS/$tag.txt" | sed -E 's/^MFU ([0-9.]+%).*/\1/')"
    mem="$(grep -m 1 -E '^(MFU |ratio to sgemm)' "$GC_RESULTS/$tag.txt" |
      sed -E 's/.*(allocated|RSS) ([0-9.]+ [KMG]iB).*/\2/')"
    [ -z "$base_tps" ] && base_tps="$tps"
    echo "| ${variant:-(as benched)} | $ms | $tps | ${mfu:-—} | ${mem:-?} | $(awk -v a="$tps" -v b="$base_tps" 'BEGIN { printf "%.2fx", a / b }') |"
  done
  return "$rc"
}

# Python with the node's own library path: the bundle's libraries (an older
# libstdc++, OpenSSL, ...) and the CUDA folders put first for trellis's
# programs must not replace those PyTorch was built against.
run_python() {
  if [ -n "$GC_PY_LD_LIBRARY_PATH" ]; then
    LD_LIBRARY_PATH="$GC_PY_LD_LIBRARY_PATH" "$GC_PYTHON" "$@"
  else
    env -u LD_LIBRARY_PATH "$GC_PYTHON" "$@"
  fi
}

have_python() {
  command -v "$GC_PYTHON" >/dev/null && return 0
  echo "skipped: no $GC_PYTHON on this node (set PYTHON)"
  return 1
}

section_torch_sdpa() {
  have_python || return 0
  local args=(--device="$GC_DEVICE" --json="$GC_RESULTS/sdpa.json")
  if [ -f "$GC_RESULTS/attention.json" ]; then
    args+=(--from="$GC_RESULTS/attention.json")
  fi
  if [ "$GC_DRY" = 1 ]; then args+=(--shapes=1x64x2x16 --warmup=1 --reps=2); fi
  run_python "$here/torch_reference/sdpa_bench.py" "${args[@]}"
}

section_torch() {
  local preset="$1"
  have_python || return 0
  local args=(--device="$GC_DEVICE" --json="$GC_RESULTS/torch-$preset.json")
  if [ -f "$GC_RESULTS/bench-$preset.json" ]; then
    args+=(--from="$GC_RESULTS/bench-$preset.json")
  else
    args+=(--preset="$preset")
  fi
  if [ "$GC_DRY" = 1 ]; then args+=(--no-compile --warmup=1 --steps=2); fi
  run_python "$here/torch_reference/gpt2_bench.py" "${args[@]}"
}

section_goals() {
  if ! command -v "$GC_PYTHON" >/dev/null; then
    echo "no $GC_PYTHON: the JSON results in $GC_RESULTS are not folded"
    return 1
  fi
  local args=("$GC_RESULTS" --presets="$GC_PRESETS")
  [ "$GC_DRY" = 1 ] && args+=(--dry-run)
  run_python "$here/gpu_check_report.py" "${args[@]}"
}

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
    run_section "torch:$preset" torch 150 1 "$preset"
    run_section "llmc:$preset" llmc 120 1 "$preset"
  done
  run_section attention attention 90 1
  run_section torch-sdpa torch_sdpa 90 1
  if [ -n "$last" ]; then
    run_section "bench:$last" bench 120 1 "$last"
    run_section "torch:$last" torch 150 1 "$last"
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
