// The trainer's checkpoint side: checking a checkpoint against the run,
// loading weights, resuming (weights, optimizer state and data position)
// and saving. Under --zero=3 the weights are saved and loaded one group
// of whole weights at a time (ShardedParameters::IoGroups), never all.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/checkpoint_dir.h"
#include "tools/trainer/evaluator.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

// A checkpoint written by trellis-train records its run's flags: the data
// order follows --seed and --global_batch_size, so a resumed run must keep
// them or it would silently train on another sequence of batches.
absl::Status CheckSameRun(const std::string& dir, const TrainingState& state,
                          const TrainOptions& o) {
  if (state.flags.empty()) return absl::OkStatus();
  TrainOptions recorded;
  if (!recorded.ApplyFlagString(state.flags).ok()) return absl::OkStatus();
  auto differs = [&](const char* flag, auto have, auto want) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " was written with --", flag, "=", have, " but this run has --",
        flag, "=", want, "; resume with --", flag, "=", have,
        " (the data order depends on it), or start a fresh run without "
        "--resume"));
  };
  if (state.seed != o.seed) return differs("seed", state.seed, o.seed);
  if (recorded.global_batch_size != o.global_batch_size) {
    return differs("global_batch_size", recorded.global_batch_size,
                   o.global_batch_size);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainingState> Trainer::CheckCheckpoint(
    const std::string& dir) const {
  TRELLIS_ASSIGN_OR_RETURN(TrainingState state, ReadTrainingState(dir));
  TRELLIS_RETURN_IF_ERROR(CheckCheckpointMatches(
      dir, state, options_.model, loader_->dataset(), options_.data));
  return state;
}

absl::Status Trainer::LoadWeights(const std::string& dir) {
  TRELLIS_ASSIGN_OR_RETURN(const TrainingState state, CheckCheckpoint(dir));
  TRELLIS_RETURN_IF_ERROR(LoadModel(dir, nullptr));
  UseExpertBias(state.expert_bias);
  return absl::OkStatus();
}

void Trainer::UseExpertBias(const ExpertBias& bias) {
  expert_bias_ = bias;
  model_->SetExpertBias(expert_bias_);
}

absl::Status Trainer::LoadModel(const std::string& dir, Optimizer* optimizer) {
  ShardedParameters* sharded = gradients_->sharded();
  const bool moments_in_parts =
      optimizer != nullptr && optimizer->MomentsInParts();
  if (sharded == nullptr && !moments_in_parts) {
    return LoadCheckpoint(dir, model_->params(), optimizer);
  }
  // ZeRO loads one group at a time: ZeRO-3 its whole weights, keeping its
  // blocks of them; every level its moments, keeping the owned segments.
  // No collective: every rank reads its own.
  bool first = true;
  for (const std::vector<Parameter*>& group : gradients_->CheckpointGroups()) {
    gradients_->GatherGroup(group, /*gather=*/false);
    if (optimizer != nullptr) {
      optimizer->BeginCheckpointPart(CheckpointIo::kLoad, group);
    }
    const absl::Status loaded =
        LoadCheckpointPart(dir, model_->params(), group, optimizer, first);
    if (optimizer != nullptr) {
      optimizer->EndCheckpointPart(CheckpointIo::kLoad, group);
    }
    gradients_->ShardGroup(group, /*keep=*/loaded.ok());
    TRELLIS_RETURN_IF_ERROR(loaded);
    first = false;
  }
  return absl::OkStatus();
}

absl::Status Trainer::CheckBlendOrder(const std::string& dir,
                                      const TrainingState& state) const {
  // Positions are restored source by source, and the sampler's draws
  // follow each source's place: the same files in another order would take
  // each other's positions (and another data order) without a word.
  std::vector<std::string> saved, given;
  for (const DataSourceState& d : state.data_sources) saved.push_back(d.path);
  if (saved.size() != static_cast<size_t>(loader_->num_sources())) {
    return absl::OkStatus();  // Restore says what differs
  }
  for (int k = 0; k < loader_->num_sources(); ++k) {
    given.push_back(loader_->dataset(k).path());
  }
  if (saved == given) return absl::OkStatus();
  std::vector<std::string> a = saved, b = given;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b) return absl::OkStatus();  // other files (moved): by place
  return absl::InvalidArgumentError(absl::StrCat(
      dir, " was written by a run on the blend ", absl::StrJoin(saved, ", "),
      " in that order, and --data gives ", absl::StrJoin(given, ", "),
      "; give the files in the checkpoint's order (each keeps its place and "
      "position)"));
}

absl::Status Trainer::Resume(const std::string& dir) {
  TRELLIS_ASSIGN_OR_RETURN(TrainingState state, CheckCheckpoint(dir));
  TRELLIS_RETURN_IF_ERROR(CheckSameRun(dir, state, options_));
  optimizer_->BeginCheckpointIo(CheckpointIo::kLoad);
  const absl::Status loaded = LoadModel(dir, optimizer_.get());
  optimizer_->EndCheckpointIo(CheckpointIo::kLoad);
  TRELLIS_RETURN_IF_ERROR(loaded);
  UseExpertBias(state.expert_bias);
  TRELLIS_RETURN_IF_ERROR(CheckBlendOrder(dir, state));
  std::vector<int64_t> source_samples;
  for (const DataSourceState& d : state.data_sources) {
    source_samples.push_back(d.samples_consumed);
  }
  absl::Status position =
      loader_->Restore(state.samples_consumed, source_samples);
  if (!position.ok()) {
    const bool blend = loader_->num_sources() > 1 || !source_samples.empty();
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": ", position.message(),
        blend ? ""
              : "; resume with the --global_batch_size the run started with"));
  }
  if (optimizer_->step() != state.step) {
    return absl::DataLossError(
        absl::StrCat(dir, ": optimizer.h5 is at step ", optimizer_->step(),
                     " but state.json at step ", state.step));
  }
  if (groups_.world->rank() == 0) {
    std::printf("resumed from %s at step %lld (%lld samples consumed)\n",
                dir.c_str(), static_cast<long long>(state.step),
                static_cast<long long>(state.samples_consumed));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Save() {
  TrainingState state;
  state.step = optimizer_->step();
  state.samples_consumed = loader_->samples_consumed();
  const std::vector<int64_t> source_samples = loader_->source_samples();
  for (size_t i = 0; i < source_samples.size(); ++i) {
    const int source = static_cast<int>(i);
    state.data_sources.push_back({loader_->dataset(source).path(),
                                  loader_->weight(source), source_samples[i]});
  }
  state.seed = options_.seed;
  state.model = options_.model;
  state.tokenizer = loader_->dataset().tokenizer();
  state.tokenizer_identity = loader_->dataset().tokenizer_identity();
  if (groups_.world->rank() == 0) {
    // The tokenizer's file, kept in the (first) token file, goes into the
    // checkpoint: rank 0 publishes it.
    TRELLIS_ASSIGN_OR_RETURN(
        state.tokenizer_file,
        ReadTokenizerFile(loader_->dataset().path(),
                          loader_->dataset().tokenizer_identity()));
  }
  state.dp = options_.dp;
  state.tp = options_.tp;
  state.pp = options_.pp;
  state.flags = options_.ToFlagString();
  state.expert_bias = expert_bias_;
  // ZeRO gathers one group at a time, and drops it before the next: its
  // moments (for their savers) and, under ZeRO-3, its whole weights (for
  // the writers, replica 0).
  ShardedParameters* sharded = gradients_->sharded();
  const bool walked = sharded != nullptr || optimizer_->MomentsInParts();
  WeightGroups walk;
  if (walked) {
    walk.groups = gradients_->CheckpointGroups();
    walk.open = [this](const std::vector<Parameter*>& group) {
      gradients_->GatherGroup(group, /*gather=*/true);
      optimizer_->BeginCheckpointPart(CheckpointIo::kSave, group);
    };
    walk.close = [this](const std::vector<Parameter*>& group) {
      optimizer_->EndCheckpointPart(CheckpointIo::kSave, group);
      gradients_->ShardGroup(group, /*keep=*/false);
    };
  }
  optimizer_->BeginCheckpointIo(CheckpointIo::kSave);
  const absl::Status saved =
      SaveCheckpoint(options_.save_dir, state, model_->params(),
                     optimizer_.get(), *groups_.world, coord_.d == 0,
                     walked ? &walk : nullptr, coord_.d < options_.ep);
  optimizer_->EndCheckpointIo(CheckpointIo::kSave);
  TRELLIS_RETURN_IF_ERROR(saved);
  if (options_.keep_checkpoints > 0 && groups_.world->rank() == 0) {
    absl::Status pruned = PruneCheckpoints(
        options_.save_dir, options_.keep_checkpoints, state.step);
    if (!pruned.ok()) {
      std::fprintf(stderr, "warning: %s\n", pruned.ToString().c_str());
    }
  }
  return absl::OkStatus();
}

}  // namespace trellis
