#!/usr/bin/env bash
# Measures the pipeline bubble and step time of every schedule on CPU ranks
# and prints a Markdown table (docs/performance.md, "Pipeline bubbles").
#
#   scripts/measure-bubbles.sh [OUT_DIR]
#
# For pp in PPS (default "2 4"), m in MICROBATCHES (default "4 8 16") and
# gpipe, 1f1b, interleaved-1f1b (2 virtual stages) and zb-h1, it trains
# STEPS steps (default 6) of an 8-block, 256-wide model on windows of 32
# tokens, one window per microbatch (32 KiB activations), traces steps 2 to
# STEPS and reports trellis-bubbles' medians. Traces and timelines stay in
# OUT_DIR (default runs/bubbles); the pp 2, m 8 timelines of each schedule
# are also written to OUT_DIR/bubbles-<schedule>.svg.
#
# Needs build/bin/trellis-train and trellis-bubbles (BUILD_DIR to change),
# data_cache/kjv-byte.h5 (scripts/prepare-kjv.sh byte), mpirun and jq.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
out="${1:-$root/runs/bubbles}"
steps="${STEPS:-6}"
data="${DATA:-$root/data_cache/kjv-byte.h5}"
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OPENBLAS_NUM_THREADS=1
mkdir -p "$out"

trace_steps="$(seq -s, 2 "$steps")"
echo "| pp | m | schedule | step ms | measured bubble | theory | planned | cpu share |"
echo "|---|---|---|---|---|---|---|---|"
for pp in ${PPS:-2 4}; do
  for m in ${MICROBATCHES:-4 8 16}; do
    for schedule in gpipe 1f1b interleaved-1f1b zb-h1; do
      v=1
      [[ "$schedule" == interleaved-1f1b ]] && v=2
      dir="$out/pp$pp-m$m-$schedule"
      rm -rf "$dir"
      mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp \
        -np "$pp" "$build/bin/trellis-train" --n_layer=8 --n_head=4 \
        --d_model=256 --seq_len=32 --micro_batch_size=1 \
        --global_batch_size="$m" --data="$data" --steps="$steps" \
        --warmup_steps=1 --pp="$pp" --schedule="$schedule" \
        --virtual_stages="$v" --eval_every=0 --log_every=1000 \
        --trace_dir="$dir" --trace_steps="$trace_steps" > "$dir.log" 2>&1
      svg=()
      if [[ "$pp" == 2 && "$m" == 8 ]]; then
        svg=(--svg="$out/bubbles-$schedule.svg")
      fi
      "$build/bin/trellis-bubbles" "$dir" --json "${svg[@]}" > "$dir.json"
      jq -r --arg pp "$pp" --arg m "$m" --arg s "$schedule" \
        '.median as $f | "| \($pp) | \($m) | \($s) | \($f.step_time*10|round/10) | \($f.whole.bubble*1000|round/10)% | \($f.theory*1000|round/10)% | \($f.planned*1000|round/10)% | \($f.whole.cpu_share*100|round)% |"' \
        "$dir.json"
    done
  done
done
