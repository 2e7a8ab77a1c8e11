// Evaluator: a checkpoint's mean next-token loss on token windows, in any
// layout, holding only what a forward pass needs: the weights, one
// microbatch state per chunk and the activation buffers between stages. It
// builds no optimizer state and no gradient buckets; the pipeline executor
// runs forward-only schedules (StageModel::ForwardOnly).
//
// --data may be a blend (`0.7:a.h5,0.3:b.h5`, data/blend.h): every source
// must match the checkpoint's tokenizer, and EvaluateStreams scores each
// source on its own and reports their weighted mean, as the trainer's
// validation does.
//
// All ranks of the world must call Create and Evaluate together.
#ifndef TRELLIS_TOOLS_TRAINER_EVALUATOR_H_
#define TRELLIS_TOOLS_TRAINER_EVALUATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/batch_loader.h"
#include "framework/memory_arena.h"
#include "parallel/bootstrap.h"
#include "parallel/device_groups.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/options/options.h"
#include "tools/trainer/memory_plan.h"
#include "tools/trainer/stage_model.h"

namespace trellis {

// What EvaluateStreams measured on one source of --data.
struct SourceEval {
  std::string path;
  double weight = 1;    // normalized blend weight (1 for one file)
  int64_t windows = 0;  // windows scored
  double loss = 0;      // mean next-token loss over them
};

// EvaluateStreams' result: `loss` is Σ weight · loss over `sources` (the
// one source's loss for a single file).
struct StreamEval {
  double loss = 0;
  int64_t windows = 0;  // over all sources
  std::vector<SourceEval> sources;
};

class Evaluator {
 public:
  // `options` holds the layout and device options, --data and
  // micro_batch_size (with global_batch_size = micro_batch_size · dp: one
  // microbatch per step); the model is the checkpoint's (`dir`, a step
  // directory). Checks the checkpoint against the data, prints the memory
  // plan on rank 0 and fails on every rank when it does not fit, then
  // allocates one arena and loads the weights. `seq_len` > 0 evaluates at
  // that context instead of the checkpoint's (ModelAtContext).
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(
      TrainOptions options, const ProcessGroups& groups, MeshCoord coord,
      const std::string& dir, DType dtype = DType::kF32, int64_t seq_len = 0);

  // Mean next-token loss over the windows of source `source` at token
  // offsets `starts` (seq_len + 1 tokens each), split over data-parallel
  // ranks.
  absl::StatusOr<double> Evaluate(const std::vector<int64_t>& starts,
                                  int source = 0);
  // trellis-eval's rule on every source of --data: its token stream cut,
  // from its start, into consecutive windows of seq_len + 1 tokens (a last
  // partial one dropped), the first `max_windows` of them (all when 0)
  // scored. Fails, naming the file, when a source holds no whole window.
  absl::StatusOr<StreamEval> EvaluateStreams(int64_t max_windows);
  const BatchLoader& loader() const { return *loader_; }

  const TrainOptions& options() const { return options_; }
  const MemoryPlan& memory_plan() const { return memory_plan_; }
  const StageModel& model() const { return *model_; }
  const MemoryArena& arena() const { return *arena_scope_->arena(); }

 private:
  Evaluator(TrainOptions options, MeshCoord coord)
      : options_(std::move(options)), coord_(coord) {}

  TrainOptions options_;
  MeshCoord coord_;
  ProcessGroups groups_;
  std::unique_ptr<DeviceGroups> device_groups_;
  MemoryPlan memory_plan_;
  std::unique_ptr<ArenaScope> arena_scope_;
  std::unique_ptr<StageModel> model_;
  std::unique_ptr<BatchLoader> loader_;
};

// The mean loss over the windows at `starts` of the loader's source
// `source` (Evaluator::Evaluate and Trainer::Evaluate): rank d of dp takes
// windows d, d + dp, ..., padded to whole microbatches whose padding does
// not count.
absl::StatusOr<double> EvaluateWindows(StageModel& model, BatchLoader& loader,
                                       const ProcessGroups& groups,
                                       MeshCoord coord,
                                       const TrainOptions& options,
                                       const std::vector<int64_t>& starts,
                                       int source = 0);

// The checkpoint's model `stored` evaluated at context `seq_len` (0: its
// own). A model whose parameters do not depend on the context (rotary
// positions: Llama) takes any length; one with a row of weights per
// position (GPT-2's learned wpe) takes at most its rows, and a shorter
// context uses the first ones (Evaluator::Create loads them). Else
// InvalidArgument naming --seq_len, the table and its rows.
absl::StatusOr<ModelConfig> ModelAtContext(const ModelConfig& stored,
                                           int64_t seq_len);

// OK when checkpoint `dir` (its training state `state`) holds the model
// `model` and was trained on data of `data`'s tokenizer (name, and the
// identity where the checkpoint records one); else InvalidArgument naming
// what differs and the fix. `data_path` names the data in messages.
absl::Status CheckCheckpointMatches(const std::string& dir,
                                    const TrainingState& state,
                                    const ModelConfig& model,
                                    const TokenDataset& data,
                                    const std::string& data_path);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_EVALUATOR_H_
