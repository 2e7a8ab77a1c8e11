#!/usr/bin/env bash
# End-to-end tests of slurm/ on the one-machine cluster of
# slurm/local-cluster.sh (two emulated nodes, n1 and n2).
#
#   slurm_test.sh cluster_start|reference|one_node|two_nodes|mpirun|
#                 preempt|rank_death|mpirun_rank_death|cluster_stop
#
# Each case is one ctest test (tests/slurm/CMakeLists.txt): `cluster_start` and
# `reference` set up (the cluster; the token file and the same training run
# under plain mpirun), `cluster_stop` tears down, and the rest submit
# slurm/train-cpu.sbatch with `sbatch --wait` and compare with the
# reference. Exit 77 (skipped) where the cluster cannot run: not root, or
# Slurm/munge not installed.
#
# Environment (set by CMake): TRELLIS_ROOT, TRELLIS_TRAIN,
# TRELLIS_PREPROCESS, TRELLIS_MPIEXEC, TRELLIS_SLURM_TEST_DIR (scratch,
# outside /tmp), TRELLIS_CLUSTER_DIR, TRELLIS_CLUSTER_PORT.
set -euo pipefail

case_name="${1:?usage: slurm_test.sh <case>}"
root="${TRELLIS_ROOT:?}"
work="${TRELLIS_SLURM_TEST_DIR:?}"
cluster="$root/slurm/local-cluster.sh"
data="$work/tokens.h5"
reference="$work/reference/metrics.jsonl"
steps=10
# The tiny model on 64-token windows, 16 per step, as dp2 · tp2 · pp2.
train_flags=(--flagfile="$root/configs/tiny.flags" --data="$data"
  --seq_len=64 --global_batch_size=16 --eval_every=0 --dp=2 --tp=2 --pp=2)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
note() { echo "slurm_test[$case_name]: $*"; }

skip_unless_possible() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: the local Slurm cluster needs root (it starts daemons)"
    exit 77
  fi
  for tool in munged slurmctld slurmd sbatch srun scontrol; do
    if ! command -v "$tool" >/dev/null; then
      echo "SKIP: $tool is missing; run scripts/install-deps.sh"
      exit 77
    fi
  done
}

# The cluster's environment: SLURM_CONF and the MPI settings it needs.
cluster_env() {
  eval "$("$cluster" env)"
  export OPENBLAS_NUM_THREADS=1
}

# The "loss" values of a metrics file, one per line, at full precision.
losses() { grep -o '"loss":[^,}]*' "$1" | cut -d: -f2; }
steps_of() { grep -o '"step":[0-9]*' "$1" | cut -d: -f2 | paste -sd' '; }

# Jobs this test submitted; cancelled on any exit, so none outlives it.
jobs_submitted=()
cleanup() {
  for j in "${jobs_submitted[@]}"; do
    timeout 10 scancel --full --signal=KILL "$j" 2>/dev/null || true
    timeout 10 scancel "$j" 2>/dev/null || true
  done
}
trap cleanup EXIT

# submit <dir> <sbatch options...> -- <trellis-train flags...>
# Submits train-cpu.sbatch from <dir> in the background, with its output
# in <dir>/job.out and sbatch's own in <dir>/sbatch.out; sets $job, $sbatch.
submit() {
  local dir="$1"
  shift
  local opts=()
  while [ "$1" != -- ]; do
    opts+=("$1")
    shift
  done
  shift
  rm -rf "$dir"
  mkdir -p "$dir"
  # The job gets this environment (sbatch --export=ALL, the default).
  # No CPU binding: the cluster's nodes claim cores the machine lacks.
  (
    cd "$dir"
    export TRELLIS_SAVE_DIR="$dir/checkpoints" TRELLIS_SRUN_ARGS=""
    exec timeout 180 sbatch --wait --parsable --output="$dir/job.out" \
      "${opts[@]}" "$root/slurm/train-cpu.sbatch" "$@" \
      --metrics_file="$dir/metrics.jsonl" >"$dir/sbatch.out" 2>&1
  ) &
  sbatch=$!
  local deadline=$((SECONDS + 30))
  until job="$(head -n1 "$dir/sbatch.out" 2>/dev/null | grep -E '^[0-9]+$')"; do
    [ $SECONDS -lt $deadline ] || fail "no job id from sbatch: $(cat "$dir/sbatch.out")"
    sleep 0.2
  done
  jobs_submitted+=("$job")
  note "submitted job $job"
}

# Waits for the background sbatch --wait; sets $rc to its exit status.
finish() {
  rc=0
  wait "$sbatch" || rc=$?
}

# Cancels the job submit started last and waits for its sbatch.
cancel_submitted() {
  timeout 10 scancel --full --signal=KILL "$job" 2>/dev/null || true
  timeout 10 scancel "$job" 2>/dev/null || true
  wait "$sbatch" 2>/dev/null || true
}

# submit, until the job's ranks log a first step: a job that ends, or
# logs nothing for 60 s, before its first step is cancelled and submitted
# once more, saying so. On this one-host emulation of two nodes, under
# load, the launch itself now and then fails there (PMIx inside MPI_Init);
# a trellis fault fails both attempts. Same arguments and results as
# submit.
submit_started() {
  local dir="$1" attempt
  for attempt in 1 2; do
    submit "$@"
    local deadline=$((SECONDS + 60))
    while [ $SECONDS -lt $deadline ] && kill -0 "$sbatch" 2>/dev/null; do
      [ -s "$dir/metrics.jsonl" ] && return 0
      sleep 0.1
    done
    [ -s "$dir/metrics.jsonl" ] && return 0
    [ "$attempt" = 1 ] || return 0 # the caller's checks report it
    note "job $job logged no step (launch failed or stalled):" \
      "$(tail -n3 "$dir/job.out" 2>/dev/null | paste -sd' '); submitting again"
    cancel_submitted
  done
}

# Waits up to $2 s until $1 (a metrics file) holds at least $3 steps.
wait_for_steps() {
  local deadline=$((SECONDS + $2))
  until [ -f "$1" ] && [ "$(grep -c . "$1")" -ge "$3" ]; do
    [ $SECONDS -lt $deadline ] || fail "fewer than $3 steps in $1 after $2 s"
    sleep 0.05
  done
}

expect_reference_losses() {
  local metrics="$1"
  [ -s "$reference" ] || fail "no reference run ($reference)"
  [ "$(steps_of "$metrics")" = "$(seq -s' ' 1 "$steps")" ] ||
    fail "$metrics has steps '$(steps_of "$metrics")', want 1..$steps"
  if ! diff <(losses "$reference") <(losses "$metrics") >"$metrics.diff"; then
    cat "$metrics.diff" >&2
    fail "per-step losses differ from plain mpirun (< mpirun, > Slurm)"
  fi
  note "losses of all $steps steps equal plain mpirun's:" \
    "$(losses "$metrics" | paste -sd' ')"
}

expect_line() {
  grep -qF -- "$2" "$1" || fail "$1 lacks \"$2\""
}

run_cluster_start() {
  "$cluster" stop >/dev/null 2>&1 || true
  "$cluster" start >/dev/null || fail "the local cluster did not start"
  local t0=$SECONDS
  "$cluster" start 2>&1 >/dev/null | grep -q "already running" ||
    fail "a second start did not find the cluster running"
  [ $((SECONDS - t0)) -le 10 ] || fail "a second start took $((SECONDS - t0)) s"
  cluster_env
  local nodes
  nodes="$(timeout 10 sinfo -h -N -o '%N:%c:%t' | paste -sd' ')"
  [ "$nodes" = "n1:8:idle n2:8:idle" ] || fail "sinfo shows '$nodes'"
  note "nodes: $nodes"
}

run_reference() {
  rm -rf "$work/reference"
  mkdir -p "$work/reference"
  local text=/usr/share/common-licenses/GPL-3
  [ -s "$text" ] || fail "$text (Debian's base-files) is missing"
  "$TRELLIS_PREPROCESS" --input="$text" --output="$data" --tokenizer=byte \
    >"$work/reference/preprocess.out" 2>&1 ||
    fail "trellis-preprocess: $(tail -n3 "$work/reference/preprocess.out")"
  OPENBLAS_NUM_THREADS=1 timeout 120 "$TRELLIS_MPIEXEC" --oversubscribe \
    --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo -np 8 "$TRELLIS_TRAIN" "${train_flags[@]}" \
    --steps="$steps" --metrics_file="$reference" \
    >"$work/reference/train.out" 2>&1 ||
    fail "plain mpirun run failed: $(tail -n5 "$work/reference/train.out")"
  [ "$(steps_of "$reference")" = "$(seq -s' ' 1 "$steps")" ] ||
    fail "the reference run logged steps '$(steps_of "$reference")'"
  local first last
  first="$(losses "$reference" | head -n1)"
  last="$(losses "$reference" | tail -n1)"
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.2) }' ||
    fail "the reference loss did not fall ($first -> $last)"
  note "reference losses: $(losses "$reference" | paste -sd' ')"
}

run_one_node() {
  cluster_env
  local dir="$work/one_node"
  submit_started "$dir" --nodes=1 --ntasks-per-node=8 -- "${train_flags[@]}" \
    --steps="$steps"
  finish
  [ "$rc" = 0 ] || fail "job failed: $(tail -n5 "$dir/job.out")"
  expect_line "$dir/job.out" "srun --mpi=pmix"
  expect_line "$dir/job.out" "  node n1: 0=(dp0,tp0,pp0) 1=(dp0,tp1,pp0) 2=(dp1,tp0,pp0) 3=(dp1,tp1,pp0) 4=(dp0,tp0,pp1) 5=(dp0,tp1,pp1) 6=(dp1,tp0,pp1) 7=(dp1,tp1,pp1)"
  expect_reference_losses "$dir/metrics.jsonl"
}

# Two nodes of 4 tasks: each tp pair and each dp pair of a stage is inside
# one node; the pipeline crosses nodes.
expect_two_node_map() {
  expect_line "$1" "  node n1: 0=(dp0,tp0,pp0) 1=(dp0,tp1,pp0) 2=(dp1,tp0,pp0) 3=(dp1,tp1,pp0)"
  expect_line "$1" "  node n2: 4=(dp0,tp0,pp1) 5=(dp0,tp1,pp1) 6=(dp1,tp0,pp1) 7=(dp1,tp1,pp1)"
}

run_two_nodes() {
  cluster_env
  local dir="$work/two_nodes"
  submit_started "$dir" --nodes=2 --ntasks-per-node=4 -- "${train_flags[@]}" \
    --steps="$steps"
  finish
  [ "$rc" = 0 ] || fail "job failed: $(tail -n5 "$dir/job.out")"
  expect_two_node_map "$dir/job.out"
  expect_reference_losses "$dir/metrics.jsonl"
}

run_mpirun() {
  cluster_env
  local dir="$work/mpirun"
  TRELLIS_LAUNCHER=mpirun TRELLIS_MPIRUN_ARGS="--bind-to none" \
    submit_started "$dir" --nodes=2 --ntasks-per-node=4 -- "${train_flags[@]}" \
    --steps="$steps"
  finish
  [ "$rc" = 0 ] || fail "job failed: $(tail -n5 "$dir/job.out")"
  expect_line "$dir/job.out" "trellis-launch: mpirun -np 8"
  expect_two_node_map "$dir/job.out"
  expect_reference_losses "$dir/metrics.jsonl"
}

# Whether the requeued attempt of the job submitted into $1 logs a step
# within $2 s of the first attempt's stop (true too when sbatch ends first:
# the caller's checks judge that).
requeue_steps() {
  local dir="$1" deadline=$((SECONDS + $2)) stopped=""
  until [ -n "$stopped" ] && [ "$(grep -c . "$dir/metrics.jsonl")" -gt "$stopped" ]; do
    kill -0 "$sbatch" 2>/dev/null || return 0
    [ $SECONDS -lt $deadline ] || return 1
    [ -n "$stopped" ] || stopped="$(grep -o 'stopped by signal 10 after step [0-9]*' \
      "$dir/job.out" 2>/dev/null | grep -o '[0-9]*$')" || true
    sleep 0.1
  done
}

# SIGUSR1 to the batch shell (what --signal=B:USR1@T sends before the time
# limit): the ranks finish the step and save, the job requeues itself and
# the second attempt resumes; together they log steps 1..N once each, with
# the uninterrupted run's losses. The requeued attempt's first step has
# the first attempt's step id (so the same PMIx namespace), and on this
# one-host emulation under load it has been seen to stall for minutes with
# the second node's slurmd unresponsive: a second attempt that logs no step
# 60 s after the stop is cancelled and the case run once more, saying so; a
# trellis that cannot resume fails both.
run_preempt() {
  cluster_env
  local dir="$work/preempt" round
  for round in 1 2; do
    submit_started "$dir" --nodes=2 --ntasks-per-node=4 -- "${train_flags[@]}" \
      --steps="$steps"
    # Signal as soon as the first step is logged: the remaining steps leave
    # time for the signal to arrive mid-run even on a fast machine.
    wait_for_steps "$dir/metrics.jsonl" 60 1
    timeout 10 scancel --signal=USR1 --batch "$job" ||
      fail "scancel --signal=USR1 --batch $job failed"
    note "sent SIGUSR1 to job $job after step $(grep -c . "$dir/metrics.jsonl")"
    requeue_steps "$dir" 60 && break
    [ "$round" = 1 ] || break # the checks below report it
    note "job $job logged no step 60 s after its stop: $(tail -n3 "$dir/job.out" |
      paste -sd' '); cancelling it and running the case again"
    cancel_submitted
  done
  finish
  [ "$rc" = 0 ] || fail "job failed: $(tail -n5 "$dir/job.out")"
  local stopped
  stopped="$(grep -o 'stopped by signal 10 after step [0-9]*' "$dir/job.out" |
    grep -o '[0-9]*$')" || fail "no 'stopped by signal 10' in $dir/job.out"
  [ "$stopped" -lt "$steps" ] || fail "the signal came after the last step"
  expect_line "$dir/job.out" "requeueing job $job"
  expect_line "$dir/job.out" "job $job attempt 2 on n[1-2]"
  expect_line "$dir/job.out" "resumed from $dir/checkpoints/step_$(printf %08d "$stopped") at step $stopped"
  note "stopped after step $stopped, requeued, resumed"
  expect_reference_losses "$dir/metrics.jsonl"
}

# A pid of job $1's rank whose environment has $2=$3 (the rank variable:
# SLURM_PROCID under srun, OMPI_COMM_WORLD_RANK under mpirun), or nothing.
rank_pid() {
  local env_file pid
  for env_file in /proc/[0-9]*/environ; do
    pid="${env_file#/proc/}"
    pid="${pid%/environ}"
    grep -qzxF "SLURM_JOB_ID=$1" "$env_file" 2>/dev/null || continue
    grep -qzxF "$2=$3" "$env_file" 2>/dev/null || continue
    grep -qzF "trellis-train" "/proc/$pid/cmdline" 2>/dev/null || continue
    echo "$pid"
    return
  done
}

# kill -9 of rank 5 (on n2) mid-run: the job must end nonzero, promptly,
# with a message naming the rank and its node ($3), and leave no rank
# behind. $1: the job's directory; $2: the rank variable (see rank_pid).
expect_rank_death_ends_job() {
  local dir="$1" rank_var="$2" message="$3"
  submit_started "$dir" --nodes=2 --ntasks-per-node=4 -- "${train_flags[@]}" \
    --steps=100000
  wait_for_steps "$dir/metrics.jsonl" 60 2
  local victim
  victim="$(rank_pid "$job" "$rank_var" 5)"
  [ -n "$victim" ] || fail "no process of rank 5 of job $job"
  kill -KILL "$victim"
  local t0=$SECONDS
  finish
  local took=$((SECONDS - t0))
  note "rank 5 (pid $victim) killed; sbatch --wait returned $rc after $took s"
  [ "$rc" != 0 ] || fail "the job ended with exit 0"
  [ "$rc" != 124 ] || fail "the job did not end (sbatch --wait timed out)"
  [ "$took" -le 60 ] || fail "the job took $took s to end"
  expect_line "$dir/job.out" "$message"
  expect_line "$dir/job.out" "trellis-train failed with exit code"
  local r
  for r in 0 1 2 3 4 6 7; do
    [ -z "$(rank_pid "$job" "$rank_var" "$r")" ] ||
      fail "rank $r of job $job is still running"
  done
}

run_rank_death() {
  cluster_env
  expect_rank_death_ends_job "$work/rank_death" SLURM_PROCID \
    "srun: error: n2: task 5: Killed"
}

run_mpirun_rank_death() {
  cluster_env
  TRELLIS_LAUNCHER=mpirun TRELLIS_MPIRUN_ARGS="--bind-to none" \
    expect_rank_death_ends_job "$work/mpirun_rank_death" OMPI_COMM_WORLD_RANK \
    "mpirun noticed that process rank 5 with PID"
  expect_line "$work/mpirun_rank_death/job.out" "on node n2 exited on signal 9"
}

run_cluster_stop() {
  "$cluster" stop || fail "stop failed"
  "$cluster" stop || fail "a second stop failed"
  if "$cluster" status; then fail "the cluster still answers after stop"; fi
  local dir="${TRELLIS_CLUSTER_DIR:?}" left=""
  for env_file in /proc/[0-9]*/environ; do
    grep -qzxF "TRELLIS_CLUSTER=$dir" "$env_file" 2>/dev/null &&
      left="$left ${env_file#/proc/}"
  done
  [ -z "$left" ] || fail "processes of the cluster remain:$left"
}

skip_unless_possible
mkdir -p "$work"
case "$case_name" in
  cluster_start | reference | one_node | two_nodes | mpirun | preempt | \
    rank_death | mpirun_rank_death | cluster_stop)
    "run_$case_name"
    ;;
  *) fail "unknown case $case_name" ;;
esac
note "passed"
