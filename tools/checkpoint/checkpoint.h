// Layout-free checkpoints (docs/checkpoint-format.md).
//
//   <save_dir>/step_00000100/model.h5      every logical tensor, whole, under
//                                          its logical name (float32; a
//                                          converted checkpoint may hold
//                                          float16 or bfloat16)
//   <save_dir>/step_00000100/optimizer.h5  /exp_avg/<name>, /exp_avg_sq/<name>
//                                          (AdamW moments, float32),
//                                          attribute `step`; absent in a
//                                          weights-only checkpoint
//   <save_dir>/step_00000100/state.json    step, samples consumed (and per
//                                          source of a blend), seed, the
//                                          model config, the layout, flags
//   <save_dir>/latest                      "step_00000100", written last
//
// Saving: ranks of data-parallel replica 0 (`writer`) each write the slices
// of the primary parameters they hold; no rank gathers the model. Their
// moments are written by the same ranks, or, when the optimizer says so
// (Optimizer::SavesOwnMoments, ZeRO), by the ranks it gives each to. The
// writers first define the datasets they touch, one at a time (serial HDF5
// allows one writer per file), as contiguous datasets allocated at once;
// then all of them write their slices' raw bytes concurrently at the
// datasets' offsets (shard_io.h) and flush them to disk. Rank 0 then writes
// state.json, syncs, renames <save_dir>/.step_00000100.tmp into place and
// replaces `latest` atomically (write, sync, rename). A crash at any moment
// leaves the previous checkpoint and `latest` intact.
//
// Resuming and pruning: checkpoint_dir.h.
//
// Loading: every rank reads just the slices its layout needs, of the model
// and of the moments, so a checkpoint loads under any (dp, tp, pp).
//
// ZeRO-3 (weights sharded over dp, never whole) saves and loads one group
// of parameters at a time: SaveCheckpoint with WeightGroups, and
// LoadCheckpointPart per group. The files are the same as any layout's.
//
// Integrity: each stored tensor carries checksums (tensor_checksum.h) that
// the writers sum their slices' parts into while defining it; loading
// verifies every checksum chunk its slices touch and rejects NaN and
// infinity, naming the file and the tensor (DataLoss). Files without
// checksums (older checkpoints) load with a note on stderr.
//
// Test hook: the environment variable TRELLIS_CHECKPOINT_WRITE_DELAY_MS
// makes writers sleep that long before each tensor, to widen the window in
// which a crash test can kill a rank mid-save.
//
// Thread safety: call from the thread that drives the communicators.
#ifndef TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_H_
#define TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "data/tokenizer_file.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "tools/checkpoint/checkpoint_dir.h"
#include "tools/trainer/optim/optimizer.h"
#include "transformer/config.h"
#include "transformer/expert_bias.h"

namespace trellis {

// One source of a --data blend, as a checkpoint records it.
struct DataSourceState {
  std::string path;
  double weight = 0;             // normalized
  int64_t samples_consumed = 0;  // windows drawn from it
};

struct TrainingState {
  int64_t step = 0;              // Optimizer steps taken.
  int64_t samples_consumed = 0;  // Training windows drawn by the sampler.
  // Per source of a blend (data/blend.h); empty for one token file.
  std::vector<DataSourceState> data_sources;
  uint64_t seed = 0;
  ModelConfig model;
  std::string tokenizer;
  // The data's tokenizer in full; kind "" in checkpoints written before it
  // was recorded (then only `tokenizer` is compared).
  TokenizerIdentity tokenizer_identity;
  int64_t dp = 1, tp = 1, pp = 1;  // The layout it was written with.
  std::string flags;               // The run's flags, for the record.
  // Where a converted checkpoint came from (format, file, dtype, ...), so a
  // conversion back can reproduce it; empty for a training checkpoint.
  std::map<std::string, std::string> source;
  // The digest of each tensor file the state goes with, by file name
  // (file_tie.h); set by the save, empty in older checkpoints.
  std::map<std::string, std::string> files;
  // A mixture of experts' router selection biases
  // (--moe_bias_update_rate; transformer/expert_bias.h); empty otherwise.
  ExpertBias expert_bias;
  // The hf or sentencepiece tokenizer's own file (data/tokenizer_file.h),
  // written by the save beside state.json under its name (not in
  // state.json); read back with CheckpointTokenizerSpec.
  std::optional<TokenizerFile> tokenizer_file;
};

// The tokenizer file checkpoint `dir` holds for `state`'s tokenizer, read
// once; nullopt when it holds none (byte and gpt2 checkpoints, or ones
// written before the file was kept). DataLoss when it does not hash to the
// recorded sha256.
absl::StatusOr<std::optional<TokenizerFile>> ReadCheckpointTokenizerFile(
    const std::string& dir, const TrainingState& state);
// The tokenizer spec ("hf:DIR/tokenizer.json", ...) of that file, checked
// the same way.
absl::StatusOr<std::optional<std::string>> CheckpointTokenizerSpec(
    const std::string& dir, const TrainingState& state);

// One rank's piece of a logical tensor, as checkpoints read and write it.
// `tensor` is a handle: loading fills the memory it shares.
struct TensorShard {
  std::string name;
  ShardSpec spec;
  Tensor tensor;  // spec.LocalShape(), float32 or float64, any device.
};

// What one rank saves or loads.
struct CheckpointShards {
  std::vector<TensorShard> model;
  // AdamW moments by parameter name (same specs as the model's); both
  // empty for weights only.
  std::vector<TensorShard> exp_avg, exp_avg_sq;
  int64_t optimizer_step = 0;
  // Loading a checkpoint without tensor checksums prints a note to stderr
  // when set; a caller loading one file in many calls clears it after the
  // first.
  bool note_unverified = true;
  bool has_optimizer() const { return !exp_avg.empty(); }
};

// Shards whose tensors exist one group at a time (ZeRO-3): group g is
// shards [model_ends[g - 1], model_ends[g]) of CheckpointShards::model and
// [moment_ends[g - 1], moment_ends[g]) of exp_avg and of exp_avg_sq
// (their `tensor`s left empty). Every rank of the save walks the groups in
// order twice, first for the writers' checksums, then for their bytes:
// open(g) returns the group's tensors (one per shard of each list, in
// order) and close(g) ends their use. Both may be collective over ranks
// that walk the same groups.
struct ShardWalk {
  struct Tensors {
    std::vector<Tensor> model, exp_avg, exp_avg_sq;
  };
  std::vector<size_t> model_ends, moment_ends;
  std::function<Tensors(size_t)> open;
  std::function<void(size_t)> close;
};

struct SaveOptions {
  DType model_dtype = DType::kF32;  // kF32, kF16 or kBF16 (moments: kF32).
  bool log = true;                  // Rank 0 prints a line when saved.
  // Called on writers after each tensor written: (written, total).
  std::function<void(int64_t, int64_t)> progress;
  // When set, the shards are read group by group through it.
  const ShardWalk* walk = nullptr;
};

// Parameters whose weights (and moments) exist one group at a time
// (ZeRO-3, ShardedParameters::IoGroups): every parameter in exactly one
// group; open(group) makes the group's weights readable and, for a save
// with an optimizer, its moments (Optimizer::BeginCheckpointPart);
// close(group) drops them. Both may be collective over the ranks that
// share them, which call them for the same groups in the same order.
struct WeightGroups {
  std::vector<std::vector<Parameter*>> groups;
  std::function<void(const std::vector<Parameter*>&)> open, close;
};

// Saves a training checkpoint: the primary parameters and, when `optimizer`
// is not null, their moments. `writer`: this rank belongs to data-parallel
// replica 0; `expert_writer`: under expert parallelism, it belongs to
// replica 0's ep group, whose ranks hold the experts between them (it
// writes its experts, parallel/parameter.h's `expert`). Collective over
// `world`; every rank returns the same verdict.
// A checkpoint of that step that already exists is left alone. With
// `groups`, the weights and moments are read one group at a time (open,
// hash and write, close: once per group; the checksums are added after
// the bytes), so no rank holds more of them whole than the largest
// group's.
absl::Status SaveCheckpoint(const std::string& save_dir,
                            const TrainingState& state,
                            const ParameterSet& params, Optimizer* optimizer,
                            Communicator& world, bool writer,
                            const WeightGroups* groups = nullptr,
                            bool expert_writer = false);

// The general form: each writer passes the shards it writes (each logical
// element written by exactly one writer rank).
absl::Status SaveShards(const std::string& save_dir, const TrainingState& state,
                        const CheckpointShards& mine, Communicator& world,
                        bool writer, const SaveOptions& options = {});

absl::StatusOr<TrainingState> ReadTrainingState(const std::string& dir);

// Fills this rank's parameters (and moments and step, when `optimizer` is
// not null) from the checkpoint. Errors name the file and the tensor.
absl::Status LoadCheckpoint(const std::string& dir, ParameterSet& params,
                            Optimizer* optimizer);

// LoadCheckpoint for the parameters `part` of `params` only (and their
// moments with `optimizer`, whose moment i is that of params.all()[i]):
// ZeRO-3 loads one group of whole weights at a time. `note_unverified`
// as in CheckpointShards.
absl::Status LoadCheckpointPart(const std::string& dir,
                                const ParameterSet& params,
                                const std::vector<Parameter*>& part,
                                Optimizer* optimizer,
                                bool note_unverified = true);

// Fills the shards' tensors (and optimizer_step when moments are asked
// for). A weights-only checkpoint asked for moments is FailedPrecondition.
absl::Status LoadShards(const std::string& dir, CheckpointShards& mine);

// Whether the checkpoint holds optimizer state (optimizer.h5).
bool HasOptimizerState(const std::string& dir);

// The stored element type of the checkpoint's weights (that of `wte`, else
// of the first tensor found).
absl::StatusOr<DType> StoredModelDType(const std::string& dir);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_H_
