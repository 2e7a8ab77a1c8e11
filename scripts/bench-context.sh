#!/usr/bin/env bash
# Context parallelism on the CPU: one long window (T = 4096 unless T is set)
# of a small GPT trained a few steps at cp 1, 2 and 4, over the ring and over
# all-to-all. Prints, per run, the median step time (steps after the first),
# the largest rank's planned memory and arena peak, and the share of rank 0's
# traced last step spent waiting on the cp group's transfers (its trace
# lane), which is the ring's exposed time.
#
#   scripts/bench-context.sh                 # build/, data_cache/kjv-byte.h5
#   T=8192 STEPS=4 scripts/bench-context.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DATA=${DATA:-data_cache/kjv-byte.h5}
T=${T:-4096}
STEPS=${STEPS:-5}
RUNS=${RUNS:-"1:ring 2:ring 4:ring 2:a2a 4:a2a"}
[ -f "$DATA" ] || { echo "no token file $DATA: run scripts/demo.sh once, or set DATA" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OPENBLAS_NUM_THREADS=1
MPI=(mpirun --oversubscribe --mca btl self,tcp)
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
printf '%-10s %10s %12s %12s %10s\n' layout "step ms" "plan MiB" "peak MiB" "cp wait"
for run in $RUNS; do
  cp=${run%%:*}
  comm=${run##*:}
  dir="$OUT/cp$cp-$comm"
  mkdir -p "$dir"
  "${MPI[@]}" -np "$cp" "$BUILD/bin/trellis-train" --data="$DATA" \
    --n_layer=2 --n_head=4 --d_model=128 --seq_len="$T" \
    --micro_batch_size=1 --global_batch_size=1 --steps="$STEPS" \
    --eval_every=0 --log_every=1 --cp="$cp" --cp_comm="$comm" \
    --metrics_file="$dir/metrics.jsonl" --trace_dir="$dir/trace" \
    --trace_steps="$STEPS" >"$dir/log" 2>&1 ||
    { cat "$dir/log" >&2; exit 1; }
  python3 - "$dir" "$cp $comm" <<'PY'
import glob, json, statistics, sys
d, name = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
ms = statistics.median(r["ms"] for r in rows[1:])
plan = rows[-1]["memory_planned_bytes"] / 2**20
peak = rows[-1]["memory_peak_bytes"] / 2**20
trace = json.load(open(sorted(glob.glob(d + "/trace/*"))[0]))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
spans = [e for e in events if e.get("ph") == "X"]
lanes = {e["tid"]: e["args"]["name"] for e in events
         if e.get("ph") == "M" and e.get("name") == "thread_name"}
cp_lane = [t for t, n in lanes.items() if n == "cp"]
step = rows[-1]["ms"] * 1000  # the traced step, in microseconds
wait = sum(e["dur"] for e in spans if e["tid"] in cp_lane)
share = f"{100 * wait / step:.1f}%" if step and cp_lane else "-"
print(f"{name:<10} {ms:10.1f} {plan:12.2f} {peak:12.2f} {share:>10}")
PY
done
