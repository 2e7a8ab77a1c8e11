# The sections of scripts/gpu-check.sh, one function each, sourced by it
# (not run on its own). Each runs in its own process (gpu-check.sh --section
# FUNCTION ARG) under timeout, with the GC_* variables of the driver and the
# helpers gpu-check.sh defines before sourcing this file ($self, $here,
# $root and what follows them there).

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
    # GPT-2 at seq_len 1024; a Llama preset at its own context (2048), with
    # the same tokens per step.
    local seq=1024
    case "$1" in llama-*) seq=2048 ;; esac
    bench_flags=(--device=cuda --preset="$1" --seq_len="$seq" --precision=bf16
                 --recompute=none --steps="${STEPS:-5}"
                 --global_batch_size="$(( ${BATCH:-64} * 1024 / seq ))")
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
    --json="$GC_RESULTS/bench-$preset.json" || return
  plan_bench_step "$GC_RESULTS/bench-$preset.json"
}

# trellis-plan's step for the run in bench JSON $1, costed from the kernel
# cost table in bench JSON $2 (default: $1's own; docs/planning.md, "Kernel
# cost tables"): one line, predicted against the measured median.
plan_bench_step() {
  local json="$1" table="${2:-$1}" flags cluster=h100-sxm-8x1 layout
  local predicted mbs
  [ "$GC_DRY" = 1 ] && cluster=cpu
  flags="$(run_python -c '
import json, sys
j = json.load(open(sys.argv[1])); m = j["model"]
flags = ["--family=" + m["family"], "--n_layer=%d" % m["n_layer"],
         "--n_head=%d" % m["n_head"], "--d_model=%d" % m["d_model"],
         "--seq_len=%d" % m["seq_len"], "--vocab_size=%d" % m["vocab_size"],
         "--micro_batch_size=%d" % j["micro_batch_size"],
         "--global_batch_size=%d" % j["global_batch_size"]]
if m["family"] in ("llama", "moe"):
    flags += ["--n_kv_heads=%d" % m["n_kv_heads"],
              "--ffn_hidden=%d" % m["ffn_hidden"]]
if "head_dim" in m:
    flags.append("--head_dim=%d" % m["head_dim"])
if m.get("qk_norm"):
    flags.append("--qk_norm")
for key in ("experts", "experts_per_token", "moe_ffn_hidden",
            "moe_first_dense"):
    if key in m:
        flags.append("--%s=%d" % (key, m[key]))
print(" ".join(flags))' "$json")" || return 1
  mbs="${flags##*--micro_batch_size=}"
  mbs="${mbs%% *}"
  layout="dp1.tp1.pp1/1f1b/v1/mbs$mbs/z0/none"
  # The whole output, then its first line: a pipe into head could end
  # trellis-plan by SIGPIPE (a failure under pipefail) while it still writes.
  # shellcheck disable=SC2086
  # The planner searches micro batches up to 16 unless told more; the
  # GPU presets run at up to 64.
  predicted="$("$GC_BIN/trellis-plan" $flags --cluster="$cluster" --world=1 \
    --max_micro_batch_size="$mbs" --profile="$table" \
    --explain="$layout")" || return
  predicted="${predicted%%$'\n'*}"
  run_python -c '
import json, re, sys
measured = json.load(open(sys.argv[1]))["median"]["ms"]
step = float(re.search(r"step ([0-9.]+) ms", sys.argv[2]).group(1))
print("plan: %s predicted %.2f ms, measured %.2f ms (median): %+.1f%%"
      % (sys.argv[3], step, measured, 100 * (step / measured - 1)))' \
    "$json" "$predicted" "$layout"
}

section_attention() {
  local args
  if [ "$GC_DRY" = 1 ]; then
    args=(--device=cpu --shapes=1x64x2x16,2x32x1x16 --warmup=1 --reps=2)
  else
    # The GPT-2 presets' shapes (the attention bench times MHA at 1024).
    local shapes=() preset
    for preset in $GC_PRESETS; do
      case "$preset" in gpt2-*) shapes+=("$preset") ;; esac
    done
    if [ ${#shapes[@]} -eq 0 ]; then
      echo "skipped: no GPT-2 preset in PRESETS"
      return 0
    fi
    args=(--device=cuda --shapes="$(IFS=,; echo "${shapes[*]}")")
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
  local base_tps="" tag plans=() best="" best_tps=0
  set_bench_flags "$preset"
  local list="${VARIANTS---gemm_autotune;--micro_batch_size=32;--loss_chunk_rows=1024;--bias_grad_epilogue;--attention=mma}"
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
    if [ "$tps" -gt "$best_tps" ] 2>/dev/null; then
      best_tps="$tps"
      best="${variant:-(as benched)}"
    fi
    echo "| ${variant:-(as benched)} | $ms | $tps | ${mfu:-—} | ${mem:-?} | $(awk -v a="$tps" -v b="$base_tps" 'BEGIN { printf "%.2fx", a / b }') |"
    # The planner's step at another micro batch, from the kernel cost table
    # the preset's bench section measured.
    if [[ "$variant" == *--micro_batch_size=* ]] &&
      [ -f "$GC_RESULTS/bench-$preset.json" ]; then
      plans+=("$(plan_bench_step "$GC_RESULTS/$tag.json" \
        "$GC_RESULTS/bench-$preset.json" 2>&1 | tail -n 1)")
    fi
  done
  [ ${#plans[@]} -eq 0 ] || printf '%s\n' "" "${plans[@]}"
  # (A variant that does not fit the device fails its row above.)
  [ -z "$best" ] || echo "fastest of $preset that ran: $best, $best_tps tokens/s"
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
  local mb
  mb="$(preset_value "${TORCH_MICRO_BATCH:-}" "$preset")"
  [ -n "$mb" ] && args+=(--micro_batch_size="$mb")
  if [ "$GC_DRY" = 1 ]; then args+=(--no-compile --warmup=1 --steps=2); fi
  local script=gpt2_bench.py
  case "$preset" in llama-*) script=llama_bench.py ;; esac
  run_python "$here/torch_reference/$script" "${args[@]}"
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

