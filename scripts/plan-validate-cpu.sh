#!/usr/bin/env bash
# The planner's step time for one CPU rank on shapes its kernel cost table
# was not measured at, against trellis-bench's measured step:
#
#   scripts/plan-validate-cpu.sh [BUILD_DIR]   (default: build)
#
# First `trellis-bench --profile` measures this machine's kernel cost table
# once (scaled to its own profiled step of a 384-wide model); then, per
# shape (widths 64 to 512, sequence lengths 32 to 512),
# trellis-bench trains it on one rank (median of 5 timed steps, wall and
# CPU time) and trellis-plan predicts the same step with that table, and
# without it (the cpu preset's single sgemm rate and memcpy bandwidth, as
# before the table existed). One core, no MPI: this checks the kernels'
# costs by shape, which the CPU time of a loaded machine still measures;
# the multi-rank layouts are plan_heldout_mpi_test's. Prints a Markdown
# table and the worst errors.
set -euo pipefail
build=${1:-build}
work=$(mktemp -d "${TMPDIR:-/tmp}/trellis-plan-validate.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
bin=$build/bin

# The bench's own model (6 layers, 384 wide, T 256), one warm-up step and
# one profiled: the table is scaled to that step's kernels.
"$bin/trellis-bench" --steps=1 --warmup=1 --profile \
  --json="$work/table.json" | grep "in the profiled step"
# The cpu preset as measured now, less its table: the single-rate model.
"$bin/trellis-plan" --n_layer=1 --n_head=2 --d_model=64 --seq_len=32 \
  --vocab_size=257 --global_batch_size=1 --cluster=cpu --world=1 --top=1 \
  --json >"$work/plan.json"
python3 -B - "$work/plan.json" "$work/untabled.json" <<'EOF'
import json, sys
cluster = json.load(open(sys.argv[1]))["cluster"]
cluster.pop("kernel_costs", None)
json.dump(cluster, open(sys.argv[2], "w"))
EOF

# layers:width:heads:seq_len:micro_batch:global_batch
shapes="6:96:4:64:2:8 4:64:2:96:2:8 4:160:4:32:4:8 2:224:4:48:4:8 \
4:320:4:128:2:4 2:384:6:192:1:2 2:448:8:256:1:2 2:512:8:512:1:2 \
2:96:2:384:1:2 4:192:4:160:1:4"
echo "| shape | measured ms (wall, median of 5) | measured ms (CPU time) | predicted ms | error (CPU time) | single-rate model ms | its error |"
echo "|---|---|---|---|---|---|---|"
for s in $shapes; do
  IFS=: read -r layers width heads seq micro global <<<"$s"
  flags="--n_layer=$layers --d_model=$width --n_head=$heads --seq_len=$seq \
--vocab_size=257 --micro_batch_size=$micro --global_batch_size=$global"
  # shellcheck disable=SC2086
  "$bin/trellis-bench" $flags --steps=7 --warmup=2 --json="$work/bench.json" \
    >/dev/null
  layout="dp1.tp1.pp1/1f1b/v1/mbs$micro/z0/none"
  predict() {
    # shellcheck disable=SC2086
    "$bin/trellis-plan" $flags --world=1 --explain="$layout" "$@" |
      head -1 | sed -E 's/.*step ([0-9.]+) ms.*/\1/'
  }
  tabled=$(predict --cluster="$work/untabled.json" --profile="$work/table.json")
  untabled=$(predict --cluster="$work/untabled.json")
  python3 -B - "$work/bench.json" "$tabled" "$untabled" "$s" \
    2>>"$work/errors" <<'EOF'
import json, sys
median = json.load(open(sys.argv[1]))["median"]
tabled, untabled = float(sys.argv[2]), float(sys.argv[3])
L, C, H, T, B, G = sys.argv[4].split(":")
print(f"| L{L} C{C} H{H} T{T} mbs{B} gbs{G} | {median['ms']:.1f} | "
      f"{median['cpu_ms']:.1f} | {tabled:.1f} | "
      f"{100 * (tabled / median['cpu_ms'] - 1):+.1f}% | {untabled:.1f} | "
      f"{100 * (untabled / median['cpu_ms'] - 1):+.1f}% |")
print(abs(tabled / median['cpu_ms'] - 1), abs(untabled / median['cpu_ms'] - 1),
      file=sys.stderr)
EOF
done
python3 -B - "$work/errors" <<'EOF'
import sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1])]
print(f"\nworst error against CPU time: {100 * max(r[0] for r in rows):.1f}% "
      f"with the table, {100 * max(r[1] for r in rows):.1f}% with the single "
      f"rate ({len(rows)} shapes)")
EOF
