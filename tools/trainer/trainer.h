// Trainer: composes data, model, pipeline executor, data-parallel buckets,
// optimizer, evaluation, checkpoints and metrics into training runs.
//
// One optimizer step on rank (d, t, p):
//   1. the loader gives data-parallel rank d its microbatches;
//   2. the executor walks stage p's schedule (F, B, W and transfers);
//      buckets of final gradients start averaging over dp during backward;
//   3. buckets are waited for; the tied embedding's gradient is summed
//      between the first and last stage;
//   4. the global gradient norm is taken; unless the StepGuard skips the
//      step (a non-finite or spiking loss or norm), gradients are clipped
//      and AdamW steps;
//   5. rank 0 logs loss, tokens/s, grad norm, bubble and dp wait.
// With --trace_dir, the --trace_steps are traced (see step_tracer.h).
//
// All ranks of the world must call Run (and Evaluate) together.
#ifndef TRELLIS_TOOLS_TRAINER_TRAINER_H_
#define TRELLIS_TOOLS_TRAINER_TRAINER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/batch_loader.h"
#include "framework/memory_arena.h"
#include "parallel/bootstrap.h"
#include "parallel/data_parallel.h"
#include "parallel/device_groups.h"
#include "parallel/pipeline_executor.h"
#include "parallel/sharded_parameters.h"
#include "parallel/watchdog_communicator.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/save_dir_lock.h"
#include "tools/options/options.h"
#include "tools/trainer/gradient_sync.h"
#include "tools/trainer/health/metrics.h"
#include "tools/trainer/health/routing_report.h"
#include "tools/trainer/health/step_guard.h"
#include "tools/trainer/health/step_tracer.h"
#include "tools/trainer/health/straggler.h"
#include "tools/trainer/optim/optimizer.h"
#include "tools/trainer/stage_model.h"

namespace trellis {

class Trainer {
 public:
  // Validates the options against the data and the world, then builds
  // everything (resuming when options.resume says so: rank 0 prints how the
  // checkpoint was chosen). Refuses a --save_dir holding checkpoints beyond
  // the step the run starts from, and a resume with another --seed or
  // --global_batch_size than the checkpoint records. `dtype` float32 for
  // training (bfloat16 with --precision=bf16); float64 serves tests. With
  // --device=cuda each rank takes the GPU of its local rank and `groups`
  // (MPI groups from ParallelContext::Create) gain device transports
  // (--gpu_comm). Prints the memory plan on rank 0 and fails on every rank
  // when it exceeds the device's free memory (or --memory_budget_gb);
  // allocates nothing before that check, then one arena for the plan.
  // `stop_check` (e.g. a stop signal's flag) is asked between the phases of
  // start-up; when it fires on any rank, every rank returns a Cancelled
  // status before the first step, and Run asks it after every step.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      TrainOptions options, const ProcessGroups& groups, MeshCoord coord,
      DType dtype = DType::kF32, std::function<bool()> stop_check = {});

  // How a Run ended.
  enum class Outcome { kCompleted, kStopped, kGaveUp };
  // Trains from the current step to options.steps. After every step the
  // ranks agree whether any rank's stop check fired (e.g. a preemption
  // signal); if so they save a checkpoint (when --save_dir is set) and
  // return kStopped. After --max_skipped_steps consecutive skipped steps
  // every rank saves (when --save_dir is set) and returns kGaveUp, with
  // give_up_message() saying why and what to do.
  absl::StatusOr<Outcome> Run();
  // Empty unless a --metrics_file write failed (rank 0): what was lost.
  const std::string& metrics_failure() const { return metrics_.failure(); }
  const std::string& give_up_message() const { return give_up_message_; }
  void set_stop_check(std::function<bool()> check) {
    stop_check_ = std::move(check);
  }
  // One optimizer step; returns the step's metrics (identical on all ranks
  // but val_loss). A step the guard skips draws its batch but updates
  // nothing (metrics.skipped says why); the step count stays.
  absl::StatusOr<StepMetrics> Step();
  // Mean next-token loss over the given windows (token offsets of
  // seq_len + 1 tokens each) of --data source `source`, split over
  // data-parallel ranks.
  absl::StatusOr<double> Evaluate(const std::vector<int64_t>& starts,
                                  int source = 0);
  // Mean loss over the first options.eval_windows validation windows of
  // each --data source into m.val_loss (a blend: each source's into
  // m.val_loss_by_source, and their weighted mean into m.val_loss).
  absl::Status Validate(StepMetrics& m);
  absl::Status Save();

  const TrainOptions& options() const { return options_; }
  StageModel& model() { return *model_; }
  int64_t step() const { return optimizer_->step(); }
  // The loss of every Step, skipped ones included.
  const std::vector<double>& losses() const { return losses_; }
  Device device() const { return device_; }
  const MemoryPlan& memory_plan() const { return memory_plan_; }
  // The data-parallel gradient buckets.
  const GradientBuckets& buckets() const { return gradients_->buckets(); }
  // The optimizer (a ShardedOptimizer under --zero 1 to 3).
  const Optimizer& optimizer() const { return *optimizer_; }
  // --zero=3's sharded weights, or null.
  const ShardedParameters* sharded_parameters() const {
    return gradients_->sharded();
  }
  // The arena that holds the plan's tensors.
  const MemoryArena& arena() const { return *arena_scope_->arena(); }
  // Loads the weights (not the optimizer) of checkpoint `dir`, checking
  // that it holds this model.
  absl::Status LoadWeights(const std::string& dir);

 private:
  Trainer(TrainOptions options, const ProcessGroups& groups, MeshCoord coord)
      : options_(std::move(options)), groups_(groups), coord_(coord) {}
  // Builds the run; `fill` kZero when a checkpoint load follows.
  absl::Status Build(DType dtype, ParameterFill fill);
  // The rank's device and groups (with --comm_timeout_s watched, with
  // --trace_dir traced); returns the dtype the device computes in.
  absl::StatusOr<DType> SetUpDevice(DType dtype);
  // The loader of this rank's microbatches.
  absl::Status OpenData();
  // The step guard, the straggler monitor and (rank 0) the metrics files.
  absl::Status SetUpHealth();
  // Cancelled on every rank when stop_check_ fired on any (collective).
  absl::Status CheckStartupStop(const char* phase);
  absl::Status PlanMemory(size_t available);
  absl::Status Resume(const std::string& dir);
  // Reads the model's weights (and, with `optimizer`, its moments) from
  // `dir`; under ZeRO one group at a time (GradientSync::CheckpointGroups): its
  // whole moments, and under ZeRO-3 its whole weights.
  absl::Status LoadModel(const std::string& dir, Optimizer* optimizer);
  absl::StatusOr<TrainingState> CheckCheckpoint(const std::string& dir) const;
  // The step's time since `start` (once the device is done), throughput
  // and MFU into `m`.
  void MeasureStep(PipelineStepStats& pipeline,
                   std::chrono::steady_clock::time_point start,
                   StepMetrics& m) const;
  // The step's gradient norm and loss (into `m`), the guard's verdict on
  // them, and the update unless it skips.
  void GuardedUpdate(StepMetrics& m);
  // What the world agrees on by its maximum, in one reduction: the bubble,
  // the memory high-water mark and the stop check (into `m`).
  void AgreeOnMaxima(const PipelineStepStats& pipeline, StepMetrics& m);
  // Saves (with --save_dir) and sets give_up_message_ after too many skips.
  absl::Status GiveUp(const StepMetrics& m);
  // Sets peak_flops_per_rank_ (PeakFlopsOf, agreed over the ranks) and
  // says on rank 0 what MFU is measured against.
  void MeasurePeak();

  TrainOptions options_;
  ProcessGroups groups_;
  MeshCoord coord_;
  Device device_;
  // With --device=cuda: groups_ route device buffers through these.
  std::unique_ptr<DeviceGroups> device_groups_;
  MemoryPlan memory_plan_;
  // Routes this rank's tensor allocations on device_ to one arena of
  // ArenaCapacity(memory_plan_) bytes while the trainer lives.
  std::unique_ptr<ArenaScope> arena_scope_;
  // On a GPU: marks the pipeline's actions on the compute stream, so the
  // step's bubble (and traced spans) is the device's, not the host's.
  std::shared_ptr<TraceClock> device_clock_;
  // With --trace_dir: traces --trace_steps; groups_ then are its wrappers.
  std::unique_ptr<WatchedGroups> watched_;  // wraps the groups below
  std::unique_ptr<StepTracer> tracer_;
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<StageModel> model_;
  std::unique_ptr<PipelineExecutor> executor_;
  // The gradients after the backward: dp buckets, ZeRO, tp and tied sums.
  std::unique_ptr<GradientSync> gradients_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<StepGuard> guard_;
  std::unique_ptr<StragglerMonitor> stragglers_;
  // A mixture of experts' routing per step; off for dense models.
  std::unique_ptr<RoutingReport> routing_;
  // The routers' selection biases (--moe_bias_update_rate), the whole
  // model's on every rank: moved after each applied step, saved and
  // resumed with the checkpoint.
  ExpertBias expert_bias_;
  // Takes `bias` as the model's table and hands it to the chunks.
  void UseExpertBias(const ExpertBias& bias);
  std::string give_up_message_;
  MetricsWriter metrics_;
  // MFU's yardstick: FLOP/s of one rank's device; 0 when unknown.
  double peak_flops_per_rank_ = 0;
  // The plan total of the rank that needs the most (PlanMemory).
  double largest_planned_bytes_ = 0;
  std::vector<double> losses_;
  // Refuses a resume whose --data blend lists the checkpoint's files in
  // another order.
  absl::Status CheckBlendOrder(const std::string& dir,
                               const TrainingState& state) const;
  std::function<bool()> stop_check_;
  // Whether rank 0 said that a batch had no loss-bearing position.
  bool said_uncounted_ = false;
  // Rank 0's hold on --save_dir for the run's life; null elsewhere.
  std::unique_ptr<SaveDirLock> save_lock_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_TRAINER_H_
