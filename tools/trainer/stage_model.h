// StageModel: the model chunks one rank runs, driven by the pipeline
// executor.
//
// With pp stages and V virtual stages the model is cut into pp·V chunks;
// stage p holds chunks k = v·pp + p for v in [0, V) (Megatron's interleaved
// assignment; V = 1 is plain pipelining). Chunk 0 embeds, chunk pp·V − 1
// ends in the loss. StageModel implements the executor's callbacks: it owns
// the activation and gradient buffers between stages, feeds chunks their
// tokens and targets, collects microbatch losses, and reports parameters
// whose gradients became final for the step.
//
// Buffers between stages: only as many per kind and virtual stage as the
// schedule has live at once (PipelineBufferSlots over schedule(), widened
// to what a forward-only pass of a step's microbatches needs); microbatches
// whose buffers are never live together share one. The memory plan counts
// the same slots.
//
// Host waits: a step's tokens and targets go to the device in one
// StagedUpload (pinned memory, asynchronous copies) into buffers kept for
// the run, and the microbatch losses add up on the device (AccumulateSum);
// StepLoss reads their total once. So the steps' model work never blocks
// the host.
//
// Thread safety: none; the training thread drives it.
#ifndef TRELLIS_TOOLS_TRAINER_STAGE_MODEL_H_
#define TRELLIS_TOOLS_TRAINER_STAGE_MODEL_H_

#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/batch_loader.h"
#include "framework/staged_upload.h"
#include "parallel/bootstrap.h"
#include "parallel/pipeline_buffers.h"
#include "parallel/pipeline_executor.h"
#include "tools/options/options.h"
#include "tools/trainer/memory_plan.h"
#include "tools/trainer/stage_schedules.h"
#include "transformer/model_family.h"

namespace trellis {

class StageModel : public PipelineStageCallbacks {
 public:
  // `options` must be resolved (TrainOptions::Resolve). Declares the
  // parameters and builds the chunks without allocating any tensor, so
  // that PlanMemory can size the run first. `schedules`, when given, are
  // every stage's (BuildStageSchedules of `options`), taken instead of
  // building this stage's own.
  StageModel(const TrainOptions& options, const ProcessGroups& groups,
             MeshCoord coord, Device device, DType dtype,
             const StageSchedules* schedules = nullptr);
  // Allocates the parameters (not their gradients: the data-parallel
  // buckets own those) and fills them as `fill` says (kZero when a
  // checkpoint load follows), the chunks' shared buffers, the step's token
  // and target buffers and the loss total.
  void Allocate(ParameterFill fill = ParameterFill::kInitialize);

  ParameterSet& params() { return params_; }
  const ParameterSet& params() const { return params_; }
  bool first_stage() const { return coord_.p == 0; }
  bool last_stage() const { return coord_.p == options_.pp - 1; }
  // Does this rank need token data (it embeds or computes the loss, or
  // every stage does for the document masks)?
  bool reads_tokens() const {
    return first_stage() || last_stage() || options_.document_mask;
  }
  // Layers of every chunk of this rank, for the layout printout.
  std::vector<ChunkPlan> chunk_plans() const;
  // This stage's training schedule (BuildSchedule of the options): the
  // executor must run this list, whose buffer slots the model uses.
  const std::vector<Action>& schedule() const { return schedule_; }

  // Parameters in the order their gradients become final during backward
  // (for data-parallel buckets), each once.
  std::vector<Parameter*> GradientReadyOrder() const;
  // The parameters that begin a weight group in GradientReadyOrder (each
  // group's first one not listed before, and its first expert one, as the
  // experts lie in buckets of their own): ZeRO-3 starts a bucket at each.
  std::vector<const Parameter*> WeightGroupStarts() const;
  // Parameters whose gradients the chunks leave as partial sums over tp
  // (ModelChunk::TpPartialGradients: the norms' under
  // --sequence_parallel), each once; the trainer sums them over tp.
  std::vector<Parameter*> TpPartialGradients() const;
  // Called once per parameter per step, when its gradient is final.
  void set_on_gradient_final(std::function<void(const Parameter*)> fn) {
    on_final_ = std::move(fn);
  }
  // Every chunk's WeightGroups (the units gradients are written in).
  std::vector<std::vector<Parameter*>> WeightGroups() const {
    std::vector<std::vector<Parameter*>> groups;
    for (const auto& c : chunks_) {
      for (auto& g : c->WeightGroups()) groups.push_back(std::move(g));
    }
    return groups;
  }
  // Hands `writes` to every chunk (ModelChunk::set_gradient_writes).
  void set_gradient_writes(const ModelChunk::GradientWrites& writes) {
    for (const auto& c : chunks_) c->set_gradient_writes(writes);
  }
  // Every chunk's GatherUnits, chunk by chunk.
  std::vector<std::vector<Parameter*>> GatherUnits() const {
    std::vector<std::vector<Parameter*>> units;
    for (const auto& c : chunks_) {
      for (auto& u : c->GatherUnits()) units.push_back(std::move(u));
    }
    return units;
  }
  // Hands `gathers` to every chunk (ModelChunk::set_weight_gathers).
  void set_weight_gathers(const ModelChunk::WeightGathers& gathers) {
    for (const auto& c : chunks_) c->set_weight_gathers(gathers);
  }

  // The bytes this rank's training steps hold on its device running this
  // stage's schedule(): parameters, gradients, the optimizer's moments,
  // and the microbatch states, shared buffers and pipeline buffers the
  // steps allocate. Needs no tensor to exist.
  MemoryPlan PlanMemory() const;
  // The bytes evaluation alone (ForwardOnly, no optimizer) holds: weights,
  // one microbatch state per chunk, the shared buffers, and the activation
  // buffers between stages; no gradients or moments.
  MemoryPlan PlanEvalMemory() const;

  // Sets the step's microbatches (host tensors of the loader), queueing
  // their upload to the device without waiting; loss gradients are scaled
  // by 1/m. REQUIRES: Allocate() was called.
  void BeginStep(const std::vector<MicroBatch>& microbatches);
  // Mean over the step's microbatches of their mean loss (last stage; 0
  // elsewhere, without touching the device). Reads the device's total: one
  // host wait on the last stage.
  double StepLoss() const;
  // Its chunks' routing since the last call (ModelChunk::TakeRouting), and
  // the most experts any of their layers routes over.
  std::vector<ModelChunk::LayerRouting> TakeRouting();
  int64_t RoutedExperts() const;
  // Hands the model's expert bias table to every chunk
  // (ModelChunk::SetExpertBias).
  void SetExpertBias(const ExpertBias& bias) {
    for (const auto& c : chunks_) c->SetExpertBias(bias);
  }

  // Forward-only pass over `microbatches` in which only the first `rows[i]`
  // rows of microbatch i count, run by the pipeline executor on forward-only
  // schedules (BuildForwardOnlySchedules) of at most a step's microbatches
  // at a time. Returns {sum of token losses, tokens} on the last stage
  // ({0, 0} elsewhere). Collective over the pp group. Touches no gradient.
  std::pair<double, int64_t> ForwardOnly(
      const std::vector<MicroBatch>& microbatches,
      const std::vector<int64_t>& rows);

  // PipelineStageCallbacks.
  Tensor InputActivation(int vstage, int mb) override;
  Tensor OutputActivation(int vstage, int mb) override;
  Tensor OutputGradient(int vstage, int mb) override;
  Tensor InputGradient(int vstage, int mb) override;
  void Forward(int vstage, int mb) override;
  void BackwardInput(int vstage, int mb) override;
  void BackwardWeight(int vstage, int mb) override;

 private:
  static constexpr PipelineBuffer kInAct = PipelineBuffer::kInputActivation;
  static constexpr PipelineBuffer kOutAct = PipelineBuffer::kOutputActivation;
  static constexpr PipelineBuffer kOutGrad = PipelineBuffer::kOutputGradient;
  static constexpr PipelineBuffer kInGrad = PipelineBuffer::kInputGradient;
  // The buffer of (kind, vstage, mb): its slot's, under the slots of the
  // schedule running now.
  Tensor& BufferFor(PipelineBuffer kind, int vstage, int mb);
  // The slots of this stage's forward-only list for `n` microbatches.
  PipelineBufferSlots ForwardOnlySlots(int n) const;
  // The plan with `in_flight[v]` microbatch states of chunk v and `slots`
  // buffers between stages; gradients and moments only when `training`.
  MemoryPlan Plan(const std::vector<int>& in_flight,
                  const PipelineBufferSlots& slots, bool training) const;
  // Evaluation's F: the losses of the counted rows, then frees the state.
  void EvaluateForward(int vstage, int mb);
  // Forward of (vstage, mb); on the last chunk `loss_scale` > 0 also forms
  // the head's gradients (training), 0 only the losses (evaluation).
  void RunForward(int vstage, int mb, double loss_scale);
  ModelChunk& chunk(int vstage) { return *chunks_[vstage]; }
  // (k·m, B, T): microbatch i's tokens at k·i, its targets at k·i + 1 and,
  // with document masking (k = 3), its doc_start at k·i + 2.
  Shape StepDataShape() const;
  int64_t StepDataParts() const { return options_.document_mask ? 3 : 2; }
  // (m, B, T) float32: the loss weights, with EOT loss masking on the last
  // stage; else empty.
  Shape StepWeightShape() const;
  int64_t num_chunks() const { return options_.pp * options_.virtual_stages; }

  TrainOptions options_;
  ProcessGroups groups_;
  MeshCoord coord_;
  Device device_;
  DType dtype_;
  ParameterSet params_;
  // Context parallelism: the attention over the cp group (its split picks
  // this rank's tokens of every window); null without it. Declared before
  // the chunks, which hold it.
  std::unique_ptr<ContextAttention> context_;
  std::vector<std::unique_ptr<ModelChunk>> chunks_;  // by virtual stage
  // This stage's training schedule, its buffer slots, and the slots
  // planned (training and evaluation).
  std::vector<Action> schedule_;
  StageSchedules::Slots train_slots_, planned_slots_;
  // While ForwardOnly runs: the slots of its list (else training's).
  const PipelineBufferSlots* eval_slots_ = nullptr;
  // By kind, (virtual stage, slot).
  std::map<std::pair<int, int>, Tensor> buffers_[kNumPipelineBuffers];
  // The step's microbatches on device_: views of step_data_ (tokens,
  // targets and doc starts of each microbatch) and step_weights_, filled
  // by upload_.
  // This rank's share of each window of `full` (the batch itself without
  // context parallelism): tokens, targets, document starts, loss weights.
  MicroBatch Share(const MicroBatch& full) const;
  std::vector<MicroBatch> microbatches_;
  Tensor step_data_;     // StepDataShape() int32, on ranks that read tokens
  Tensor step_weights_;  // StepWeightShape() float32, when not empty
  std::unique_ptr<StagedUpload> upload_;
  Tensor loss_sum_;  // (1) float64: the step's sum of microbatch mean losses
  std::unordered_map<const Parameter*, int> expected_, seen_;
  // While ForwardOnly runs: F evaluates, counting eval_rows_[mb] rows of
  // microbatch mb into eval_.
  bool evaluating_ = false;
  std::vector<int64_t> eval_rows_;
  struct EvalTotals {
    double loss_sum = 0;
    int64_t tokens = 0;
  } eval_;
  std::function<void(const Parameter*)> on_final_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_STAGE_MODEL_H_
