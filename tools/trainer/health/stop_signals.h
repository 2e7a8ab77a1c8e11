// Stop signals: a clean way for a scheduler to end a run early.
//
// Slurm (`#SBATCH --signal=USR1@120`) and other schedulers send a signal
// ahead of a time limit or preemption. After InstallStopSignals, receiving
// one of the signals only sets a flag; the trainer checks it after each
// step, finishes that step, saves a checkpoint and exits cleanly, so a
// requeued job resumes where it stopped. During start-up (before any step)
// the trainer checks it between phases and the run ends with a nonzero
// exit, since there is nothing to save.
//
// Thread safety: the flag is a lock-free atomic, safe from signal handlers.
#ifndef TRELLIS_TOOLS_TRAINER_HEALTH_STOP_SIGNALS_H_
#define TRELLIS_TOOLS_TRAINER_HEALTH_STOP_SIGNALS_H_

#include <string>

#include "absl/status/status.h"

namespace trellis {

// The stop signals of a run that names none (--stop_signals' default).
inline constexpr char kDefaultStopSignals[] = "USR1,TERM";

// `names`: comma-separated signal names, e.g. "USR1,TERM" ("" installs
// none). Fails on an unknown name, changing nothing. A signal an earlier
// call installed that `names` lacks gets its default action back, so a
// program can install the defaults first thing (before a slow start-up
// such as MPI_Init) and the configured set once its flags are read; a
// signal received in between stays received.
absl::Status InstallStopSignals(const std::string& names);
// Whether an installed signal has arrived; its number, or 0.
int StopSignalReceived();
// "SIGTERM" for SIGTERM, and so on for the signals InstallStopSignals
// knows; "signal <n>" for others.
std::string SignalName(int signal);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_HEALTH_STOP_SIGNALS_H_
