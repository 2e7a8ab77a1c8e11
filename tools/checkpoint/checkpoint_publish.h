// Publishing a checkpoint directory: the save writes its files into a
// temporary directory beside the checkpoint, and rank 0 then writes
// state.json (naming the files' digests, file_tie.h), syncs everything and
// renames the directory into place, `latest` last. A crash at any point
// leaves the last published checkpoint whole. Internal to the save side
// (checkpoint_save.cc).
//
// Thread safety: one caller per save directory.
#ifndef TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_PUBLISH_H_
#define TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_PUBLISH_H_

#include <filesystem>

#include "absl/status/status.h"
#include "tools/checkpoint/checkpoint.h"

namespace trellis {

// Creates `save_dir` and an empty temporary directory `tmp` in it.
absl::Status PrepareCheckpoint(const std::filesystem::path& save_dir,
                               const std::filesystem::path& tmp);

// Whether `state` should replace the checkpoint in `final_dir`: one of the
// same step at an earlier data position (steps skipped since, StepGuard).
bool SupersedesCheckpoint(const TrainingState& state,
                          const std::filesystem::path& final_dir);

// Writes `state` into `tmp`, syncs it, moves `tmp` to `final_dir` (with
// `supersede`, exchanged atomically with the checkpoint there, which is
// then removed) and points `latest` at it.
absl::Status PublishCheckpoint(const std::filesystem::path& save_dir,
                               const std::filesystem::path& tmp,
                               const std::filesystem::path& final_dir,
                               TrainingState state, bool supersede);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_PUBLISH_H_
