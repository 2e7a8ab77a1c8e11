#!/usr/bin/env bash
# Benchmarks training on one GPU: the GPT-2 124M, 350M and 774M presets at
# seq_len 1024 in bfloat16 without recomputation (docs/performance.md, "GPU
# benchmark"), and prints a Markdown table of the median step of each:
# tokens/s, model TFLOP/s, MFU, the ratio to the measured GEMM rate and the
# peak device memory.
#
#   scripts/gpu-benchmark.sh [OUT_DIR]
#
# Each preset's full report (with --profile's per-kernel table of the last
# step) goes to OUT_DIR/<preset>.txt and its summary to OUT_DIR/<preset>.json
# (default OUT_DIR: runs/gpu-bench). PRESETS (default "gpt2-124m gpt2-350m
# gpt2-774m"), RECOMPUTE (default none), STEPS (default 5) and any extra
# arguments (passed to every trellis-bench run, e.g. --peak_tflops=756 for
# an H100 PCIe) change what runs.
#
# Needs a CUDA build in build/ (BUILD_DIR to change; see docs/gpu.md) and jq.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${1:-$root/runs/gpu-bench}"
shift || true
bench="$build/bin/trellis-bench"
if [ ! -x "$bench" ]; then
  echo "gpu-benchmark: $bench not found; build with -DTRELLIS_CUDA=ON (docs/gpu.md) or set BUILD_DIR" >&2
  exit 1
fi
if ! command -v jq >/dev/null; then
  echo "gpu-benchmark: jq not found; install it (apt-get install jq)" >&2
  exit 1
fi
mkdir -p "$out"

echo "| preset | parameters | tokens/step | step ms | tokens/s | model TFLOP/s | MFU | vs GEMM | peak memory |"
echo "|---|---|---|---|---|---|---|---|---|"
for preset in ${PRESETS:-gpt2-124m gpt2-350m gpt2-774m}; do
  "$bench" --device=cuda --preset="$preset" --seq_len=1024 --precision=bf16 \
    --recompute="${RECOMPUTE:-none}" --steps="${STEPS:-5}" --profile \
    --json="$out/$preset.json" "$@" >"$out/$preset.txt" 2>&1 || {
    echo "gpu-benchmark: $preset failed; see $out/$preset.txt" >&2
    tail -n 3 "$out/$preset.txt" >&2
    exit 1
  }
  jq -r --arg preset "$preset" '
    def pct: if . == null then "n/a" else (. * 1000 | round / 10 | tostring) + "%" end;
    "| \($preset) | \(.model.parameters / 1e6 | round)M | \(.tokens_per_step)" +
    " | \(.median.ms * 10 | round / 10) | \(.median.tokens_per_s | round)" +
    " | \(.median.model_tflops * 10 | round / 10) | \(.median.mfu | pct)" +
    " | \(.median.gemm_ratio | pct) | \(.peak_memory_bytes / 1073741824 * 100 | round / 100) GiB |"
  ' "$out/$preset.json"
done
echo
echo "device: $(jq -r '.device_name' "$out/$(echo ${PRESETS:-gpt2-124m} | cut -d' ' -f1).json"); reports in $out"
