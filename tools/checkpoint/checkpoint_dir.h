// The save directory as a whole: which checkpoint `--resume` means, which
// checkpoints a run starting at some step would shadow, and pruning (the
// layout of a save directory: checkpoint.h, docs/checkpoint-format.md).
//
// A step_* directory is complete when model.h5, optimizer.h5 and
// state.json are in place: saves publish a whole directory by rename, so
// one lacks them only when damaged or written weights-only.
//
// Thread safety: the functions only read (PruneCheckpoints deletes) files;
// call them for one save directory from one thread at a time.
#ifndef TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_DIR_H_
#define TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_DIR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis {

// The directory name of the checkpoint of `step`: "step_00000100".
std::string CheckpointName(int64_t step);

// Where a run resumes, and a line for the log saying how it was chosen
// ("" when `--resume` named the checkpoint outright).
struct ResumePoint {
  std::string dir;  // "" for a fresh start.
  std::string note;
};

// FailedPrecondition naming `save_dir`'s `latest` when it is there but is
// not a file, or names anything but one of its step_* checkpoints (an
// absolute path, "../x"): saves would fail at the end of the run, or a
// resume follow it out of the directory.
absl::Status CheckLatestPointer(const std::string& save_dir);

// The checkpoint `--resume` names: "" for a fresh start; "auto" means the
// newest complete checkpoint of `save_dir` (the one `latest` names, or a
// newer complete step_* left by a save that died before updating `latest`;
// when `latest` is missing, empty or unreadable, the newest complete step_*),
// else a fresh start; anything else is a checkpoint directory (or a save_dir
// holding `latest`). A `latest` naming a missing checkpoint is DataLoss.
// Messages name the flag the path came in (`flag`: --resume, --load, ...).
absl::StatusOr<ResumePoint> FindResumePoint(
    const std::string& resume, const std::string& save_dir,
    const std::string& flag = "--resume");

// FindResumePoint's directory alone.
absl::StatusOr<std::string> ResolveResume(const std::string& resume,
                                          const std::string& save_dir,
                                          const std::string& flag = "--resume");

// The steps of the step_* directories in `save_dir` (complete or not),
// ascending; empty when it does not exist.
std::vector<int64_t> CheckpointSteps(const std::string& save_dir);

// InvalidArgument when `save_dir` holds step_* directories beyond
// `start_step`, where a run starting there would save: a save never
// replaces an existing checkpoint, so that run's weights would be lost.
// The message names those steps and the flags to choose.
absl::Status CheckNoLaterCheckpoints(const std::string& save_dir,
                                     int64_t start_step);

// Deletes all but the newest `keep` step_* directories (keep ≥ 1), never the
// one `latest` names and never one beyond `saved_step` (the step the run
// just saved): pruning removes a run's own older checkpoints, not newer ones
// it did not write.
absl::Status PruneCheckpoints(const std::string& save_dir, int64_t keep,
                              int64_t saved_step = INT64_MAX);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_DIR_H_
