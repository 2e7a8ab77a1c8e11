#include "tools/trainer/stage_model.h"

#include <algorithm>
#include <unordered_set>

#include "framework/host_sync.h"
#include "framework/memory_arena.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

// The loss total is one float64 of a block as large as the arena's
// alignment, so that the plan counts exactly what the arena reserves.
constexpr int64_t kLossBlock = MemoryArena::kAlignment / sizeof(double);

// The context attention over the cp group, or null without --cp.
std::unique_ptr<ContextAttention> NewStageContext(const TrainOptions& o,
                                                  const ProcessGroups& groups) {
  if (o.cp == 1) return nullptr;
  TRELLIS_CHECK(groups.cp != nullptr && groups.cp->size() == o.cp);
  absl::StatusOr<ContextComm> comm = ParseContextComm(o.cp_comm);
  TRELLIS_CHECK(comm.ok()) << comm.status();  // Resolve checked it.
  return NewContextAttention(
      *comm, *groups.cp,
      ContextSplit(o.model.seq_len, static_cast<int>(o.cp), groups.cp->rank()));
}

BlockOptions StageBlockOptions(const TrainOptions& o) {
  BlockOptions block;
  block.recompute = o.recompute;
  block.attention = o.attention;
  // Zero-bubble schedules run W apart from B: only they need the weight
  // gradients' inputs kept per microbatch.
  block.defer_weight_grads = o.schedule == ScheduleKind::kZeroBubbleH1;
  block.loss_chunk_rows = o.head_chunk_rows();
  block.bias_grad_epilogue = o.bias_grad_epilogue;
  block.residual_in_gemm = o.residual_in_gemm;
  block.document_mask = o.document_mask;
  block.eod_mask_loss = o.eod_mask_loss;
  block.sequence_parallel = o.sequence_parallel;
  return block;
}

}  // namespace

StageModel::StageModel(const TrainOptions& options, const ProcessGroups& groups,
                       MeshCoord coord, Device device, DType dtype,
                       const StageSchedules* schedules)
    : options_(options),
      groups_(groups),
      coord_(coord),
      device_(device),
      dtype_(dtype) {
  const std::vector<int64_t> layers =
      options.virtual_stages == 1
          ? StageLayers(options.model.n_layer, options.pp, options.pp_layers)
          : StageLayers(options.model.n_layer, num_chunks(), {});
  const TpPlace tp{options.tp, coord.t};
  const ModelFamily& family = FamilyOf(options.model);
  std::vector<ChunkPlan> plans;
  for (int64_t v = 0; v < options.virtual_stages; ++v) {
    const int64_t k = v * options.pp + coord.p;
    ChunkPlan plan;
    for (int64_t i = 0; i < k; ++i) plan.first_layer += layers[i];
    plan.num_layers = layers[k];
    plan.has_embedding = k == 0;
    plan.has_head = k == num_chunks() - 1;
    plan.expert_rank = coord.d % options.ep;
    plan.expert_ranks = options.ep;
    family.DeclareParameters(options.model, plan, tp, options.seed, device,
                             dtype, params_);
    plans.push_back(plan);
  }
  // Under context parallelism the chunks see windows of seq_len / cp
  // tokens (the parameters above were declared for whole windows).
  context_ = NewStageContext(options, groups);
  ModelConfig local = options.model;
  local.seq_len = options.local_seq_len();
  const BlockOptions block = StageBlockOptions(options);
  for (const ChunkPlan& plan : plans) {
    chunks_.push_back(family.NewChunk(
        local,
        ChunkSetup{plan, tp, groups.tp, &params_, options.micro_batch_size,
                   device, dtype, block, groups.ep, context_.get()}));
  }
  const int v = static_cast<int>(options.virtual_stages);
  if (schedules != nullptr) {
    TRELLIS_CHECK_EQ(schedules->actions.size(),
                     static_cast<size_t>(options.pp));
    schedule_ = schedules->actions[coord.p];
    train_slots_ = schedules->train_slots[coord.p];
    planned_slots_ = schedules->planned_slots[coord.p];
  } else {
    schedule_ =
        BuildSchedule(options.schedule, coord.p, static_cast<int>(options.pp),
                      static_cast<int>(options.microbatches()), v);
    train_slots_ = std::make_shared<const PipelineBufferSlots>(
        PipelineBufferSlots::Assign(schedule_, v));
    planned_slots_ =
        std::make_shared<const PipelineBufferSlots>(PlannedBufferSlots(
            schedule_,
            BuildForwardOnlySchedules(static_cast<int>(options.pp),
                                      static_cast<int>(options.microbatches()),
                                      v)[coord.p],
            v));
  }
  // Each W call reports each group once: a parameter is final after m
  // reports per group it appears in. The head's wte gradient is added in F,
  // which precedes its microbatch's W, so the last report still comes
  // after every contribution.
  for (const auto& c : chunks_) {
    for (const auto& group : c->WeightGroups()) {
      for (Parameter* p : group) expected_[p] += options.microbatches();
    }
  }
}

void StageModel::Allocate(ParameterFill fill) {
  params_.Materialize(/*grads=*/false, fill);
  for (const auto& c : chunks_) c->AllocateWorkspace();
  if (reads_tokens()) {
    step_data_ = Tensor::Empty(StepDataShape(), DType::kI32, device_);
  }
  if (!StepWeightShape().empty()) {
    step_weights_ = Tensor::Empty(StepWeightShape(), DType::kF32, device_);
  }
  if (last_stage()) {
    loss_sum_ = Tensor::Zeros({kLossBlock}, DType::kF64, device_).Narrow(0, 1);
  }
  upload_ = std::make_unique<StagedUpload>(device_);
}

Shape StageModel::StepDataShape() const {
  return {StepDataParts() * options_.microbatches(), options_.micro_batch_size,
          options_.local_seq_len()};
}

Shape StageModel::StepWeightShape() const {
  if (!last_stage() || !options_.eod_mask_loss) return {};
  return {options_.microbatches(), options_.micro_batch_size,
          options_.local_seq_len()};
}

MicroBatch StageModel::Share(const MicroBatch& full) const {
  if (context_ == nullptr) return full;
  const ContextSplit& split = context_->split();
  return MicroBatch{split.Take(full.tokens), split.Take(full.targets),
                    split.Take(full.doc_start), split.Take(full.loss_weight)};
}

std::vector<ChunkPlan> StageModel::chunk_plans() const {
  std::vector<ChunkPlan> plans;
  for (const auto& c : chunks_) plans.push_back(c->plan());
  return plans;
}

std::vector<Parameter*> StageModel::GradientReadyOrder() const {
  std::vector<Parameter*> order;
  std::unordered_set<Parameter*> seen;
  for (auto c = chunks_.rbegin(); c != chunks_.rend(); ++c) {
    for (const auto& group : (*c)->WeightGroups()) {
      for (Parameter* p : group) {
        if (seen.insert(p).second) order.push_back(p);
      }
    }
  }
  TRELLIS_CHECK_EQ(order.size(), params_.all().size());
  return order;
}

std::vector<const Parameter*> StageModel::WeightGroupStarts() const {
  // The same walk as GradientReadyOrder.
  std::vector<const Parameter*> starts;
  std::unordered_set<Parameter*> seen;
  for (auto c = chunks_.rbegin(); c != chunks_.rend(); ++c) {
    for (const auto& group : (*c)->WeightGroups()) {
      bool first[2] = {true, true};  // dense, expert
      for (Parameter* p : group) {
        if (!seen.insert(p).second) continue;
        if (first[p->expert]) starts.push_back(p);
        first[p->expert] = false;
      }
    }
  }
  return starts;
}

std::vector<Parameter*> StageModel::TpPartialGradients() const {
  std::vector<Parameter*> partial;
  std::unordered_set<Parameter*> seen;
  for (const auto& c : chunks_) {
    for (Parameter* p : c->TpPartialGradients()) {
      if (seen.insert(p).second) partial.push_back(p);
    }
  }
  return partial;
}

void StageModel::BeginStep(const std::vector<MicroBatch>& microbatches) {
  TRELLIS_CHECK(upload_ != nullptr) << "StageModel::Allocate first";
  const int64_t m = options_.microbatches();
  TRELLIS_CHECK_EQ(static_cast<int64_t>(microbatches.size()), m);
  microbatches_.assign(m, MicroBatch{});
  if (reads_tokens()) {
    std::vector<std::pair<const Tensor*, Tensor*>> copies;
    const int64_t k = StepDataParts();
    // This rank's share of each window (the batch itself without cp),
    // copied out by Upload before it returns.
    std::vector<MicroBatch> shares;
    for (const MicroBatch& full : microbatches) shares.push_back(Share(full));
    for (int64_t i = 0; i < m; ++i) {
      const MicroBatch& host = shares[i];
      MicroBatch& mb = microbatches_[i];
      const Shape shape = host.tokens.shape();
      mb.tokens = step_data_.Narrow(k * i, 1).View(shape);
      mb.targets = step_data_.Narrow(k * i + 1, 1).View(shape);
      copies.push_back({&host.tokens, &mb.tokens});
      copies.push_back({&host.targets, &mb.targets});
      if (options_.document_mask) {
        TRELLIS_CHECK(host.doc_start.defined());
        mb.doc_start = step_data_.Narrow(k * i + 2, 1).View(shape);
        copies.push_back({&host.doc_start, &mb.doc_start});
      }
      if (step_weights_.defined()) {
        TRELLIS_CHECK(host.loss_weight.defined());
        mb.loss_weight = step_weights_.Narrow(i, 1).View(shape);
        copies.push_back({&host.loss_weight, &mb.loss_weight});
      }
    }
    upload_->Upload(copies);
  }
  if (loss_sum_.defined()) loss_sum_.Zero();
  seen_.clear();
}

std::vector<ModelChunk::LayerRouting> StageModel::TakeRouting() {
  std::vector<ModelChunk::LayerRouting> all;
  for (const auto& c : chunks_) {
    for (ModelChunk::LayerRouting& r : c->TakeRouting()) {
      all.push_back(std::move(r));
    }
  }
  return all;
}

int64_t StageModel::RoutedExperts() const {
  int64_t experts = 0;
  for (const auto& c : chunks_) {
    experts = std::max(experts, c->RoutedExperts());
  }
  return experts;
}

double StageModel::StepLoss() const {
  if (!loss_sum_.defined() || microbatches_.empty()) return 0.0;
  return ReadToHost(loss_sum_).data<double>()[0] /
         static_cast<double>(microbatches_.size());
}

MemoryPlan StageModel::PlanMemory() const {
  std::vector<int> in_flight;
  for (size_t v = 0; v < chunks_.size(); ++v) {
    std::vector<Action> mine;
    for (const Action& a : schedule_) {
      if (a.virtual_stage == static_cast<int>(v)) mine.push_back(a);
    }
    in_flight.push_back(PeakInFlight(mine));
  }
  return Plan(in_flight, *planned_slots_, /*training=*/true);
}

MemoryPlan StageModel::PlanEvalMemory() const {
  // Each chunk frees a microbatch's state right after its forward.
  return Plan(std::vector<int>(chunks_.size(), 1),
              ForwardOnlySlots(static_cast<int>(options_.microbatches())),
              /*training=*/false);
}

PipelineBufferSlots StageModel::ForwardOnlySlots(int n) const {
  const int v = static_cast<int>(options_.virtual_stages);
  return PipelineBufferSlots::Assign(
      BuildForwardOnlySchedules(static_cast<int>(options_.pp), n, v)[coord_.p],
      v);
}

MemoryPlan StageModel::Plan(const std::vector<int>& in_flight,
                            const PipelineBufferSlots& slots,
                            bool training) const {
  MemoryPlan plan;
  // From the declared shapes: the parameters need not exist yet.
  const DType master = dtype_ == DType::kBF16 ? DType::kF32 : dtype_;
  for (const Parameter* p : params_.all()) {
    const size_t n = NumElements(p->spec.LocalShape());
    plan.weights += n * DTypeSize(dtype_);
    if (master != dtype_) plan.weights += n * DTypeSize(master);
    if (!training) continue;
    plan.gradients += n * DTypeSize(GradDType(dtype_));
    // AdamW's two moments, in the master weights' dtype.
    plan.optimizer += 2 * n * DTypeSize(master);
  }
  for (size_t v = 0; v < chunks_.size(); ++v) {
    const ModelChunk& c = *chunks_[v];
    plan.activations += in_flight[v] * c.StateBytes();
    plan.workspace += c.WorkspaceBytes();
    if (v == 0) {
      // The step's tokens and targets and the loss total (Allocate).
      if (reads_tokens()) {
        plan.workspace += NumElements(StepDataShape()) * DTypeSize(DType::kI32);
      }
      if (!StepWeightShape().empty()) {
        plan.workspace +=
            NumElements(StepWeightShape()) * DTypeSize(DType::kF32);
      }
      if (last_stage()) plan.workspace += kLossBlock * DTypeSize(DType::kF64);
    }
    // The buffers between stages: one per slot (BufferFor).
    const size_t hidden = c.rows() * c.width() * DTypeSize(dtype_);
    for (int k = 0; k < kNumPipelineBuffers; ++k) {
      plan.pipeline +=
          slots.count(static_cast<PipelineBuffer>(k), static_cast<int>(v)) *
          hidden;
    }
  }
  return plan;
}

Tensor& StageModel::BufferFor(PipelineBuffer kind, int vstage, int mb) {
  const PipelineBufferSlots& running =
      eval_slots_ != nullptr ? *eval_slots_ : *train_slots_;
  const int slot = running.slot(kind, vstage, mb);
  TRELLIS_CHECK_LT(slot, planned_slots_->count(kind, vstage))
      << PipelineBufferName(kind) << " slot beyond the memory plan";
  Tensor& t = buffers_[static_cast<int>(kind)][{vstage, slot}];
  if (!t.defined()) {
    t = Tensor::Empty({chunks_[vstage]->rows(), chunks_[vstage]->width()},
                      dtype_, device_);
  }
  return t;
}

Tensor StageModel::InputActivation(int v, int mb) {
  return BufferFor(kInAct, v, mb);
}
Tensor StageModel::OutputActivation(int v, int mb) {
  return BufferFor(kOutAct, v, mb);
}
Tensor StageModel::OutputGradient(int v, int mb) {
  return BufferFor(kOutGrad, v, mb);
}
Tensor StageModel::InputGradient(int v, int mb) {
  return BufferFor(kInGrad, v, mb);
}

void StageModel::Forward(int v, int mb) {
  if (evaluating_) return EvaluateForward(v, mb);
  // The step's loss is the mean over its m microbatches.
  RunForward(v, mb, 1.0 / static_cast<double>(microbatches_.size()));
}

void StageModel::RunForward(int v, int mb, double loss_scale) {
  ModelChunk& c = chunk(v);
  const MicroBatch& data = microbatches_[mb];
  Tensor input = c.plan().has_embedding ? Tensor() : BufferFor(kInAct, v, mb);
  Tensor* output = c.plan().has_head ? nullptr : &BufferFor(kOutAct, v, mb);
  // Training adds the microbatch's mean loss to the step's total on the
  // device; evaluation (no loss scale) reads the token losses itself.
  Tensor* loss_sum = c.plan().has_head && loss_scale > 0 ? &loss_sum_ : nullptr;
  // Loss weights only in training: evaluation counts every target.
  c.SetMasks({data.doc_start, loss_scale > 0 && c.plan().has_head
                                  ? data.loss_weight
                                  : Tensor()});
  c.Forward(mb, data.tokens, input, data.targets, loss_scale, output, loss_sum);
}

void StageModel::BackwardInput(int v, int mb) {
  ModelChunk& c = chunk(v);
  const Tensor dout = c.plan().has_head ? Tensor() : BufferFor(kOutGrad, v, mb);
  Tensor* din = c.plan().has_embedding ? nullptr : &BufferFor(kInGrad, v, mb);
  c.BackwardInput(mb, dout, din);
}

void StageModel::BackwardWeight(int v, int mb) {
  chunk(v).BackwardWeight(mb, [this](const std::vector<Parameter*>& group) {
    for (Parameter* p : group) {
      if (++seen_[p] == expected_[p] && on_final_) on_final_(p);
    }
  });
}

std::pair<double, int64_t> StageModel::ForwardOnly(
    const std::vector<MicroBatch>& microbatches,
    const std::vector<int64_t>& rows) {
  TRELLIS_CHECK_EQ(microbatches.size(), rows.size());
  std::vector<MicroBatch> saved = std::move(microbatches_);
  eval_ = EvalTotals{};
  // In runs of at most a training step's microbatches: their buffer slots
  // fit in those planned (PlannedSlots), and each chunk frees a
  // microbatch's state right after its forward, so evaluation allocates
  // nothing beyond the plan.
  const size_t step = static_cast<size_t>(options_.microbatches());
  const int pp = static_cast<int>(options_.pp);
  const int v = static_cast<int>(options_.virtual_stages);
  for (size_t first = 0; first < microbatches.size(); first += step) {
    const size_t n = std::min(step, microbatches.size() - first);
    microbatches_.clear();
    for (size_t i = first; i < first + n; ++i) {
      microbatches_.push_back(Share(microbatches[i]));
    }
    eval_rows_.assign(rows.begin() + first, rows.begin() + first + n);
    const PipelineBufferSlots slots = ForwardOnlySlots(static_cast<int>(n));
    PipelineExecutor executor(
        *groups_.pp,
        BuildForwardOnlySchedules(pp, static_cast<int>(n), v)[coord_.p], v);
    evaluating_ = true;
    eval_slots_ = &slots;
    executor.Run(*this);
    eval_slots_ = nullptr;
    evaluating_ = false;
  }
  microbatches_ = std::move(saved);
  eval_rows_.clear();
  return {eval_.loss_sum, eval_.tokens};
}

void StageModel::EvaluateForward(int v, int mb) {
  ModelChunk& c = chunk(v);
  // No loss scale: losses only, no gradient is touched.
  RunForward(v, mb, 0.0);
  if (c.plan().has_head) {
    const int64_t t = options_.local_seq_len();
    const Tensor host = ReadToHost(c.TokenLosses(mb));
    for (int64_t i = 0; i < eval_rows_[mb] * t; ++i) {
      eval_.loss_sum += host.dtype() == DType::kF64 ? host.data<double>()[i]
                                                    : host.data<float>()[i];
    }
    eval_.tokens += eval_rows_[mb] * t;
  }
  c.Release(mb);
}

}  // namespace trellis
