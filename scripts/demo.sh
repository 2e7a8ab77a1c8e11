#!/usr/bin/env bash
# The main job on its embedded defaults: install dependencies, build, prepare
# the King James Bible, train the demo model as dp2 × tp2 × pp2 on 8 CPU
# ranks, and evaluate the final checkpoint. A first argument --model=llama
# trains the tiny Llama (configs/llama-tiny.flags) instead of the tiny GPT-2
# (--model=gpt2, the default); --model=moe the tiny mixture of experts
# (configs/moe-tiny.flags) with its experts split over ep=2 of the dp ranks.
# Extra arguments go to trellis-train (e.g. --steps=50).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
preset=configs/tiny.flags
run_dir="runs/demo"
layout=(--dp=2 --tp=2 --pp=2 --schedule=1f1b)
case "${1:-}" in
  --model=gpt2) shift ;;
  --model=llama) preset=configs/llama-tiny.flags run_dir="runs/demo-llama"; shift ;;
  --model=moe) preset=configs/moe-tiny.flags run_dir="runs/demo-moe"; layout+=(--ep=2); shift ;;
  --model=*) echo "demo: ${1} is not a model: use --model=gpt2, --model=llama or --model=moe" >&2; exit 1 ;;
esac
scripts/install-deps.sh --demo
scripts/build.sh --demo
scripts/prepare-kjv.sh byte

mkdir -p "$run_dir"
# shellcheck disable=SC2054 # "self,tcp" is one mpirun argument
mpi=(--oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OPENBLAS_NUM_THREADS=1
mpirun "${mpi[@]}" -np 8 build/bin/trellis-train \
  --flagfile="$preset" --data=data_cache/kjv-byte.h5 \
  "${layout[@]}" \
  --save_dir="$run_dir/checkpoints" --metrics_file="$run_dir/metrics.jsonl" "$@"
build/bin/trellis-eval --load="$run_dir/checkpoints" --data=data_cache/kjv-byte.h5 --max_windows=256
echo "demo: metrics in $run_dir/metrics.jsonl, checkpoints in $run_dir/checkpoints"
