// Layout-free checkpoints.
//
//   <save_dir>/step_00000100/model.h5      every logical tensor, float32,
//                                          whole, under its logical name
//   <save_dir>/step_00000100/optimizer.h5  /exp_avg/<name>, /exp_avg_sq/<name>
//                                          (AdamW moments), attribute `step`
//   <save_dir>/step_00000100/state.json    step, samples consumed, seed, the
//                                          model config, the layout and flags
//   <save_dir>/latest                      "step_00000100", written last
//
// Saving: ranks of data-parallel replica 0 each write the slices of the
// primary parameters they hold (no rank gathers the model), one rank at a
// time into <save_dir>/.step_00000100.tmp; rank 0 then writes state.json,
// syncs, renames the directory into place and replaces `latest` atomically.
// A crash at any moment leaves the previous checkpoint and `latest` intact.
// Loading: every rank reads just the slices its layout needs, so a
// checkpoint loads under any (dp, tp, pp).
//
// All ranks of `world` must call SaveCheckpoint together.
#ifndef TRELLIS_TOOLS_TRAINER_CHECKPOINT_H_
#define TRELLIS_TOOLS_TRAINER_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "tools/trainer/optimizer.h"
#include "transformer/config.h"

namespace trellis {

struct TrainingState {
  int64_t step = 0;              // Optimizer steps taken.
  int64_t samples_consumed = 0;  // Training windows drawn by the sampler.
  uint64_t seed = 0;
  GptConfig model;
  std::string tokenizer;
  int64_t dp = 1, tp = 1, pp = 1;  // The layout it was written with.
  std::string flags;               // The run's flags, for the record.
};

std::string CheckpointName(int64_t step);  // "step_00000100"

// `optimizer` may be null (weights only). `writer`: this rank belongs to
// data-parallel replica 0. Prints progress on rank 0.
absl::Status SaveCheckpoint(const std::string& save_dir,
                            const TrainingState& state,
                            const ParameterSet& params, Optimizer* optimizer,
                            Communicator& world, bool writer);

// The checkpoint directory `--resume` names: "" for a fresh start; "auto"
// means `<save_dir>/latest` when it exists, else a fresh start; anything
// else is a checkpoint directory (or a save_dir holding `latest`).
absl::StatusOr<std::string> ResolveResume(const std::string& resume,
                                          const std::string& save_dir);

absl::StatusOr<TrainingState> ReadTrainingState(const std::string& dir);

// Fills this rank's parameters (and moments, when `optimizer` is not null)
// from the checkpoint. Errors name the file and the tensor.
absl::Status LoadCheckpoint(const std::string& dir, ParameterSet& params,
                            Optimizer* optimizer);

// Deletes all but the newest `keep` step_* directories (keep ≥ 1).
absl::Status PruneCheckpoints(const std::string& save_dir, int64_t keep);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_CHECKPOINT_H_
