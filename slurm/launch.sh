#!/usr/bin/env bash
# Runs trellis-train over a Slurm allocation: the body shared by
# slurm/train.sbatch (GPUs) and slurm/train-cpu.sbatch (CPUs), which exec it
# from inside the batch job. Not meant to be run by hand.
#
#   launch.sh <trellis-train flags...>
#
# - Launches one task per allocated slot with `srun --mpi=pmix` (or, with
#   TRELLIS_LAUNCHER=mpirun, with Open MPI's mpirun, which reads the
#   allocation itself). A task that dies ends the whole step at once
#   (srun --kill-on-bad-exit; mpirun does so by default), so a lost rank
#   fails the job instead of leaving the others waiting in a collective.
# - Always passes --resume=auto --save_dir=$TRELLIS_SAVE_DIR before the
#   user's flags: a (re)started job continues from the newest checkpoint.
# - Preemption and time limits: the job asks for SIGUSR1 before its end
#   (#SBATCH --signal=B:USR1@...), which reaches this shell; it is passed to
#   srun/mpirun, which pass it to every rank. trellis-train finishes the
#   step, saves and exits 0; this script then requeues the job
#   (scontrol requeue), which starts again later and resumes. SIGTERM
#   (scancel, preemption) is passed on the same way but never requeues.
#
# Settings (environment; the sbatch scripts set the defaults):
#   TRELLIS_ROOT          the trellis checkout [$SLURM_SUBMIT_DIR]
#   TRELLIS_TRAIN         the trellis-train binary [$TRELLIS_ROOT/build/bin/...]
#   TRELLIS_SAVE_DIR      checkpoints, on storage every node sees
#                         [$SLURM_SUBMIT_DIR/checkpoints/$SLURM_JOB_NAME]
#   TRELLIS_LAUNCHER      srun (default) or mpirun
#   TRELLIS_SRUN_ARGS     extra srun options (binding, GPUs), word-split
#   TRELLIS_MPIRUN_ARGS   extra mpirun options, word-split
#   TRELLIS_REQUEUE       1 (default): requeue after a USR1 stop; 0: don't
set -uo pipefail

say() { echo "trellis-launch: $*"; }

if [ -z "${SLURM_JOB_ID:-}" ]; then
  say "not inside a Slurm job; submit with sbatch slurm/train.sbatch ..." >&2
  exit 2
fi
root="${TRELLIS_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}"
train="${TRELLIS_TRAIN:-$root/build/bin/trellis-train}"
save_dir="${TRELLIS_SAVE_DIR:-${SLURM_SUBMIT_DIR:-$PWD}/checkpoints/${SLURM_JOB_NAME:-trellis}}"
launcher="${TRELLIS_LAUNCHER:-srun}"
attempt=$((${SLURM_RESTART_COUNT:-0} + 1))

if [ ! -x "$train" ]; then
  say "$train is not an executable; build trellis (scripts/build.sh) or set TRELLIS_TRAIN" >&2
  exit 2
fi

case "$launcher" in
  srun)
    # Slurm 22.05's srun does not inherit --cpus-per-task from the batch
    # job; pass it so binding gives each task its own cores.
    cmd=(srun --mpi=pmix --kill-on-bad-exit=1
      --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}")
    # shellcheck disable=SC2206  # deliberately word-split
    cmd+=(${TRELLIS_SRUN_ARGS:-})
    ;;
  mpirun)
    cmd=(mpirun -np "${SLURM_NTASKS:?}")
    [ "$(id -u)" -ne 0 ] || cmd+=(--allow-run-as-root)
    # shellcheck disable=SC2206  # deliberately word-split
    cmd+=(${TRELLIS_MPIRUN_ARGS:-})
    ;;
  *)
    say "TRELLIS_LAUNCHER=$launcher: use srun or mpirun" >&2
    exit 2
    ;;
esac
cmd+=("$train" --resume=auto --save_dir="$save_dir" "$@")

say "job $SLURM_JOB_ID attempt $attempt on ${SLURM_JOB_NODELIST:-?}" \
  "(${SLURM_NNODES:-?} nodes, ${SLURM_NTASKS:-?} tasks), checkpoints in $save_dir"
say "${cmd[*]}"

stop_signal=""
pid=""
forward() {
  stop_signal="$1"
  say "got SIG$1; passing it to the ranks (they finish the step and save)"
  [ -z "$pid" ] || kill -s "$1" "$pid" 2>/dev/null || true
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

"${cmd[@]}" &
pid=$!
# `wait` returns early when a trapped signal arrives; wait again until the
# launcher itself has exited, then take its status.
while :; do
  wait "$pid"
  kill -0 "$pid" 2>/dev/null || break
done
wait "$pid" 2>/dev/null
rc=$?

if [ "$rc" -ne 0 ]; then
  say "trellis-train failed with exit code $rc (job $SLURM_JOB_ID attempt $attempt); the messages above name the rank and node"
  exit "$rc"
fi
case "$stop_signal" in
  USR1)
    if [ "${TRELLIS_REQUEUE:-1}" != 1 ]; then
      say "stopped on SIGUSR1 with a checkpoint; not requeued (TRELLIS_REQUEUE=${TRELLIS_REQUEUE}); submit again to resume"
      exit 0
    fi
    say "stopped on SIGUSR1 with a checkpoint; requeueing job $SLURM_JOB_ID"
    if ! scontrol requeue "$SLURM_JOB_ID"; then
      say "scontrol requeue failed; submit the same command again to resume" >&2
      exit 1
    fi
    ;;
  TERM) say "stopped on SIGTERM with a checkpoint; submit again to resume" ;;
  *) say "done" ;;
esac
