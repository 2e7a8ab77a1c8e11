#include "tools/trainer/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "framework/device_info.h"
#include "framework/memory_arena.h"
#include "parallel/replicas.h"
#include "parallel/schedule.h"
#include "tools/trainer/evaluator.h"
#include "tools/trainer/health/peak_flops.h"
#include "tools/trainer/rank_device.h"
#include "tools/trainer/zero_memory.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// The communicators handed in must form the layout the options describe.
absl::Status CheckGroups(const TrainOptions& o, const ProcessGroups& g) {
  // The dp group spans the replicas and, within each, its cp ranks.
  const int cp = g.cp != nullptr ? g.cp->size() : 1;
  if (g.tp->size() != o.tp || g.dp->size() != o.gradient_replicas() ||
      g.pp->size() != o.pp || cp != o.cp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the process groups (tp ", g.tp->size(), ", dp ", g.dp->size(), ", cp ",
        cp, ", pp ", g.pp->size(), ") do not match the layout --tp=", o.tp,
        " --dp=", o.dp, " --cp=", o.cp, " --pp=", o.pp,
        "; build the ParallelContext from the same sizes"));
  }
  return absl::OkStatus();
}

// A checkpoint directory that cannot be written fails now, not after the
// first save_every steps of work.
absl::Status CheckSaveDir(const std::string& save_dir) {
  if (save_dir.empty()) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(save_dir, ec);
  if (ec || ::access(save_dir.c_str(), W_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--save_dir=", save_dir, " cannot be created or written",
                     ec ? absl::StrCat(" (", ec.message(), ")") : std::string(),
                     "; choose a writable directory"));
  }
  return CheckLatestPointer(save_dir);
}

// A run starting at `resume_dir` (or from scratch) must be able to save:
// no other run may be using --save_dir (rank 0 takes its lock into `lock`)
// and no checkpoint beyond its start may sit in it. Every rank looks (so
// each fails with the same message) and they agree.
absl::Status CheckStart(const TrainOptions& o, const std::string& resume_dir,
                        Communicator& world,
                        std::unique_ptr<SaveDirLock>& lock) {
  absl::Status mine;
  if (!o.save_dir.empty() && world.rank() == 0) {
    absl::StatusOr<std::unique_ptr<SaveDirLock>> taken =
        SaveDirLock::Acquire(o.save_dir);
    if (taken.ok()) {
      lock = *std::move(taken);
    } else {
      mine = taken.status();
    }
  }
  if (mine.ok() && !o.save_dir.empty()) {
    int64_t start = 0;
    if (!resume_dir.empty()) {
      absl::StatusOr<TrainingState> state = ReadTrainingState(resume_dir);
      if (state.ok()) start = state->step;
      mine = state.status();
    }
    if (mine.ok()) mine = CheckNoLaterCheckpoints(o.save_dir, start);
  }
  return AgreeOnStatus(world, mine);
}

OptimizerConfig OptimizerConfigOf(const TrainOptions& o) {
  OptimizerConfig opt;
  opt.schedule = {o.lr, o.min_lr, o.warmup_steps, o.steps};
  opt.beta1 = o.beta1;
  opt.beta2 = o.beta2;
  opt.weight_decay = o.weight_decay;
  opt.grad_clip = o.grad_clip;
  return opt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    TrainOptions options, const ProcessGroups& groups, MeshCoord coord,
    DType dtype, std::function<bool()> stop_check) {
  // Ranks must agree on the flags before any of them can fail alone.
  TRELLIS_RETURN_IF_ERROR(
      CheckConfigsAgree(*groups.world, options.ToFlagString()));
  // --data may blend files: they share one tokenizer (data/blend.h).
  TRELLIS_ASSIGN_OR_RETURN(TokenFileMetadata data, BlendMetadata(options.data));
  TRELLIS_RETURN_IF_ERROR(
      options.Resolve(groups.world->size(), data.vocab_size));
  TRELLIS_RETURN_IF_ERROR(
      CheckScheduleShape(options.schedule, static_cast<int>(options.pp),
                         static_cast<int>(options.microbatches()),
                         static_cast<int>(options.virtual_stages)));
  TRELLIS_RETURN_IF_ERROR(CheckGroups(options, groups));
  TRELLIS_RETURN_IF_ERROR(CheckSaveDir(options.save_dir));
  TRELLIS_ASSIGN_OR_RETURN(ResumePoint resume,
                           FindResumePoint(options.resume, options.save_dir));
  std::unique_ptr<SaveDirLock> save_lock;
  TRELLIS_RETURN_IF_ERROR(
      CheckStart(options, resume.dir, *groups.world, save_lock));
  std::unique_ptr<Trainer> trainer(new Trainer(options, groups, coord));
  trainer->save_lock_ = std::move(save_lock);
  trainer->stop_check_ = std::move(stop_check);
  // A resumed run's weights all come from the checkpoint: no initializing.
  TRELLIS_RETURN_IF_ERROR(trainer->Build(dtype, resume.dir.empty()
                                                    ? ParameterFill::kInitialize
                                                    : ParameterFill::kZero));
  if (!resume.note.empty() && groups.world->rank() == 0) {
    std::printf("resume: %s\n", resume.note.c_str());
    std::fflush(stdout);
  }
  if (!resume.dir.empty()) TRELLIS_RETURN_IF_ERROR(trainer->Resume(resume.dir));
  return trainer;
}

absl::Status Trainer::Build(DType dtype, ParameterFill fill) {
  const TrainOptions& o = options_;
  TRELLIS_ASSIGN_OR_RETURN(dtype, SetUpDevice(dtype));
  TRELLIS_RETURN_IF_ERROR(CheckStartupStop("before declaring the model"));
  model_ = std::make_unique<StageModel>(o, groups_, coord_, device_, dtype);
  TRELLIS_RETURN_IF_ERROR(CheckStartupStop("after declaring the model"));
  // The model's buffers between stages are laid out for this list.
  std::vector<Action> schedule = model_->schedule();
  // NCCL's buffers are taken already (SetUpRankDevice warmed the groups).
  const size_t available = AvailableMemory(o, device_);
  TRELLIS_RETURN_IF_ERROR(PlanMemory(available));
  // Everything the plan counts comes from one arena, allocated now: the
  // parameters, then the gradient buckets and the optimizer's moments, and
  // during the first step the activations and pipeline buffers.
  arena_scope_ = std::make_unique<ArenaScope>(
      MemoryArena::Create(ArenaCapacity(memory_plan_, available), device_));
  // ZeRO-3 never makes the weights whole: GradientSync fills its blocks of
  // them from the declarations.
  std::vector<ParameterDeclaration> declared;
  if (o.zero == 3) declared = model_->params().TakeDeclarations();
  model_->Allocate(fill);
  TRELLIS_RETURN_IF_ERROR(CheckStartupStop("after initializing the weights"));
  TRELLIS_RETURN_IF_ERROR(OpenData());
  executor_ = std::make_unique<PipelineExecutor>(
      *groups_.pp, std::move(schedule), static_cast<int>(o.virtual_stages));
  executor_->set_device_clock(device_clock_);
  if (tracer_ != nullptr) tracer_->Observe(*executor_);
  gradients_ =
      std::make_unique<GradientSync>(*model_, o, groups_, declared, fill);
  optimizer_ = gradients_->NewOptimizer(OptimizerConfigOf(o));
  // Every rank reports routing when any layer of the model routes.
  const double experts = AllReduceScalar(
      *groups_.world, static_cast<double>(model_->RoutedExperts()),
      ReduceOp::kMax);
  routing_ = std::make_unique<RoutingReport>(
      o.model.n_layer, static_cast<int64_t>(experts), o.microbatches());
  return SetUpHealth();
}

absl::StatusOr<DType> Trainer::SetUpDevice(DType dtype) {
  const TrainOptions& o = options_;
  // A rank without a usable device fails on every rank, before any
  // collective setup.
  TRELLIS_ASSIGN_OR_RETURN(RankDevice rank_device,
                           SetUpRankDevice(o, groups_, dtype));
  device_ = rank_device.device;
  groups_ = rank_device.groups;
  device_groups_ = std::move(rank_device.device_groups);
  if (o.comm_timeout_s > 0) {  // the tracer, if any, wraps these
    WatchdogOptions watch;
    watch.timeout_s = o.comm_timeout_s;
    watch.dump_dir = o.save_dir.empty() ? "." : o.save_dir;
    TRELLIS_RETURN_IF_ERROR(watch.ReadTestFaults());
    watched_ = std::make_unique<WatchedGroups>(groups_, std::move(watch));
    groups_ = watched_->groups();
  }
  MeasurePeak();
  // Kernels run after the host queued them: time the pipeline on the device.
  device_clock_ = NewDeviceTraceClock(device_);
  if (!o.trace_dir.empty()) {
    tracer_ = std::make_unique<StepTracer>(o, groups_, coord_, device_clock_);
    groups_ = tracer_->groups();
  }
  return rank_device.dtype;
}

absl::Status Trainer::OpenData() {
  const TrainOptions& o = options_;
  BatchLoader::Config data;
  data.seq_len = o.model.seq_len;
  data.val_fraction = o.val_fraction;
  data.global_batch = o.global_batch_size;
  data.micro_batch = o.micro_batch_size;
  data.seed = o.seed;
  data.dp = static_cast<int>(o.dp);
  // The cp ranks of a replica read the same windows (each takes its share).
  data.dp_rank = static_cast<int>(coord_.d / o.cp);
  data.reads_tokens = model_->reads_tokens();
  data.document_mask = o.document_mask;
  data.eod_mask_loss = o.eod_mask_loss;
  TRELLIS_ASSIGN_OR_RETURN(loader_, BatchLoader::Open(o.data, data));
  return absl::OkStatus();
}

absl::Status Trainer::SetUpHealth() {
  const TrainOptions& o = options_;
  StepGuardConfig guard{o.max_skipped_steps, o.skip_spike_zscore};
  TRELLIS_RETURN_IF_ERROR(guard.ReadTestFaults());
  guard_ = std::make_unique<StepGuard>(guard, groups_.world->rank());
  TRELLIS_ASSIGN_OR_RETURN(
      stragglers_,
      StragglerMonitor::Create(*groups_.world, coord_, o.straggler_every,
                               o.straggler_threshold, SlowRankTestHook()));
  if (groups_.world->rank() == 0) {
    TRELLIS_RETURN_IF_ERROR(metrics_.Open(o.metrics_file, o.tensorboard_dir));
  }
  return absl::OkStatus();
}

void Trainer::MeasurePeak() {
  // CPU ranks that share cores measure together, each its share.
  groups_.world->Barrier();
  const PeakFlops peak = PeakFlopsOf(device_, options_.peak_tflops);
  // A rank that knows no peak turns MFU off for all; otherwise the mean
  // (CPU ranks each measure their own share of the machine).
  const double mean =
      AllReduceScalar(*groups_.world, peak.flops_per_s, ReduceOp::kAvg);
  const bool unknown =
      AllReduceScalar(*groups_.world, peak.flops_per_s > 0 ? 0.0 : 1.0,
                      ReduceOp::kMax) > 0;
  peak_flops_per_rank_ = unknown ? 0.0 : mean;
  if (groups_.world->rank() == 0) {
    std::printf("mfu against: %s (rank 0); %.3g TFLOP/s per rank (mean)%s\n",
                peak.what.c_str(), peak_flops_per_rank_ / 1e12,
                unknown ? ", not reported: a rank knows no peak" : "");
    std::fflush(stdout);
  }
}

absl::Status Trainer::CheckStartupStop(const char* phase) {
  const bool mine = stop_check_ && stop_check_();
  // Every rank reaches the same phases: they agree, then stop together.
  const double any =
      AllReduceScalar(*groups_.world, mine ? 1.0 : 0.0, ReduceOp::kMax);
  if (any == 0) return absl::OkStatus();
  return absl::CancelledError(
      absl::StrCat("stopped during start-up (", phase,
                   "), before the first step; nothing was saved"));
}

absl::Status Trainer::PlanMemory(size_t available) {
  // CPU ranks reduce-scatter over MPI, through scratch blocks.
  memory_plan_ =
      PlanZeroMemory(*model_, options_, model_->PlanMemory(), device_.is_cpu());
  const absl::Status fits =
      CheckMemoryPlan(memory_plan_, available,
                      absl::StrCat("rank ", groups_.world->rank(), " (",
                                   DeviceDescription(device_), ")"),
                      options_.micro_batch_size, options_.recompute);
  // Every rank learns that one does not fit: they fail together.
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(*groups_.world, fits));
  const double largest =
      AllReduceScalar(*groups_.world, static_cast<double>(memory_plan_.total()),
                      ReduceOp::kMax);
  largest_planned_bytes_ = largest;
  if (groups_.world->rank() == 0) {
    std::printf("memory plan (rank 0, %s): %s; largest rank %s; arena %s\n",
                DeviceName(device_).c_str(), memory_plan_.Format().c_str(),
                Readable(static_cast<size_t>(largest)).c_str(),
                Readable(ArenaCapacity(memory_plan_, available)).c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepMetrics> Trainer::Step() {
  // A traced step starts on all ranks together; `trace` is null otherwise.
  TraceRecorder* trace =
      tracer_ != nullptr ? tracer_->BeginStep(optimizer_->step() + 1) : nullptr;
  auto phase = [trace](const char* name) {
    return ScopedTraceSpan(trace, name, kTraceCategoryStep,
                           StepTracer::kStepLane);
  };
  const auto start = std::chrono::steady_clock::now();
  // Only a traced step aligns the device clock with the host's (a wait).
  if (device_clock_ != nullptr) device_clock_->BeginStep(trace != nullptr);
  {
    const ScopedTraceSpan span = phase("data");
    TRELLIS_ASSIGN_OR_RETURN(std::vector<MicroBatch> microbatches,
                             loader_->NextStep());
    gradients_->StartStep();
    model_->BeginStep(microbatches);
  }
  // This rank's own work, not its waits: data, then the pipeline's busy.
  const double data_s = Seconds(start);
  PipelineStepStats pipeline;
  {
    const ScopedTraceSpan span = phase("pipeline");
    pipeline = executor_->Run(*model_);
  }
  StepMetrics m;
  const double dp_wait_s = gradients_->Finish(trace);
  // Reported only when there is data parallelism to wait on.
  m.dp_wait_ms = options_.gradient_replicas() > 1 ? 1e3 * dp_wait_s : 0.0;
  {
    const ScopedTraceSpan span = phase("optimizer");
    GuardedUpdate(m);
  }
  // The loads only move the selection bias; a skipped step moves none
  // (its update never happened).
  const double rate = options_.model.moe_bias_update_rate;
  std::vector<std::vector<double>> loads;
  routing_->Report(model_->TakeRouting(), *groups_.pp, *groups_.dp, m,
                   rate > 0 ? &loads : nullptr);
  if (rate > 0 && m.skipped.empty()) {
    expert_bias_.Update(loads, rate);
    model_->SetExpertBias(expert_bias_);
  }
  MeasureStep(pipeline, start, m);
  // After the update, which may gather (ZeRO), the world's maxima.
  AgreeOnMaxima(pipeline, m);
  std::optional<Straggler> slow =
      stragglers_->EndStep(data_s + pipeline.busy_seconds, &m.straggler_ratio);
  if (slow) {
    m.straggler_rank = slow->rank;
    m.straggler = slow->Describe(stragglers_->every());
  }
  losses_.push_back(m.loss);
  if (trace != nullptr) TRELLIS_RETURN_IF_ERROR(tracer_->EndStep(start));
  return m;
}

void Trainer::GuardedUpdate(StepMetrics& m) {
  if (guard_->InjectNanDue(optimizer_->step() + 1)) {
    optimizer_->PoisonGradient();
  }
  // The stages' gradient squares (each reduced over tp, and dp where
  // sharded) and the last stage's loss: one sum over pp; then the loss's
  // mean over dp.
  Tensor stage = Tensor::Empty({2}, DType::kF64);
  stage.data<double>()[0] = optimizer_->StageGradSquares(*groups_.tp);
  stage.data<double>()[1] = model_->last_stage() ? model_->StepLoss() : 0.0;
  if (groups_.pp->size() > 1) groups_.pp->AllReduce(stage, ReduceOp::kSum);
  m.grad_norm = std::sqrt(stage.data<double>()[0]);
  m.loss =
      AllReduceScalar(*groups_.dp, stage.data<double>()[1], ReduceOp::kAvg);
  // The guard's verdict, agreed by the world (if any rank skips, all do).
  const SkipReason mine = guard_->Assess(m.loss, m.grad_norm);
  const auto skip = static_cast<SkipReason>(static_cast<int>(AllReduceScalar(
      *groups_.world, static_cast<double>(mine), ReduceOp::kMax)));
  guard_->Record(skip, m.loss, m.grad_norm);
  if (skip == SkipReason::kNone) {
    m.lr = optimizer_->Apply(m.grad_norm).lr;
    m.step = optimizer_->step();
  } else {
    m.lr = optimizer_->next_lr();
    m.step = optimizer_->step() + 1;
    m.skipped = SkipReasonName(skip);
  }
  m.skipped_steps = guard_->skipped_total();
  m.consecutive_skips = guard_->consecutive_skips();
}

void Trainer::MeasureStep(PipelineStepStats& pipeline,
                          std::chrono::steady_clock::time_point start,
                          StepMetrics& m) const {
  // Waits for the device to finish the pipeline (the optimizer's kernels
  // may still be running).
  if (device_clock_ != nullptr) pipeline.ResolveDeviceTime(*device_clock_);
  m.bubble_theory =
      options_.pp > 1
          ? TheoreticalBubble(options_.schedule, static_cast<int>(options_.pp),
                              static_cast<int>(options_.microbatches()),
                              static_cast<int>(options_.virtual_stages))
          : 0.0;
  const double seconds = Seconds(start);
  m.ms = 1e3 * seconds;
  m.memory_planned_bytes = largest_planned_bytes_;
  const double tokens =
      static_cast<double>(options_.global_batch_size * options_.model.seq_len);
  m.tokens_per_s = tokens / seconds;
  const double model_flops = options_.model.TrainingFlopsPerToken() * tokens;
  m.model_tflops = model_flops / seconds / 1e12;
  m.mfu = peak_flops_per_rank_ > 0
              ? model_flops / seconds /
                    (peak_flops_per_rank_ * groups_.world->size())
              : 0.0;
}

void Trainer::AgreeOnMaxima(const PipelineStepStats& pipeline, StepMetrics& m) {
  // One reduction for all: the largest bubble of any pipeline, the memory
  // high-water mark of the rank that uses the most, and whether any rank's
  // stop check fired.
  Tensor maxima = Tensor::Empty({3}, DType::kF64);
  double* v = maxima.data<double>();
  v[0] = pipeline.BubbleFraction();
  v[1] = static_cast<double>(arena().stats().peak_in_use);
  v[2] = stop_check_ && stop_check_() ? 1.0 : 0.0;
  if (groups_.world->size() > 1) {
    groups_.world->AllReduce(maxima, ReduceOp::kMax);
  }
  m.bubble = v[0];
  m.memory_peak_bytes = v[1];
  m.stop_requested = v[2] > 0;
}

absl::Status Trainer::GiveUp(const StepMetrics& m) {
  std::string saved = "nothing saved (no --save_dir)";
  if (!options_.save_dir.empty()) {
    TRELLIS_RETURN_IF_ERROR(Save());
    saved = absl::StrCat("saved step ", optimizer_->step(), " in ",
                         options_.save_dir, " (the bad batches consumed)");
  }
  give_up_message_ = absl::StrCat(
      m.consecutive_skips, " consecutive steps skipped (", m.skipped,
      ", last at step ", m.step, ", sample ", loader_->samples_consumed(),
      "); ", saved,
      "; check the data there, lower --lr or raise --max_skipped_steps, "
      "then resume with --resume=auto");
  return absl::OkStatus();
}

absl::StatusOr<double> Trainer::Evaluate(const std::vector<int64_t>& starts,
                                         int source) {
  return EvaluateWindows(*model_, *loader_, groups_, coord_, options_, starts,
                         source);
}

absl::Status Trainer::Validate(StepMetrics& m) {
  double weighted = 0;
  for (int source = 0; source < loader_->num_sources(); ++source) {
    const TokenWindows& windows = loader_->windows(source);
    const int64_t n =
        std::min(options_.eval_windows, windows.num_val_windows());
    std::vector<int64_t> starts;
    for (int64_t i = 0; i < n; ++i) {
      starts.push_back(windows.WindowStart(windows.ValWindow(i)));
    }
    if (starts.empty()) {
      return absl::InvalidArgumentError(
          "--eval_every needs validation windows; set --val_fraction > 0");
    }
    TRELLIS_ASSIGN_OR_RETURN(const double loss, Evaluate(starts, source));
    weighted += loader_->weight(source) * loss;
    if (loader_->num_sources() > 1) {
      m.val_loss_by_source.emplace_back(loader_->dataset(source).path(), loss);
    }
  }
  m.val_loss = weighted;
  return absl::OkStatus();
}

absl::StatusOr<Trainer::Outcome> Trainer::Run() {
  const bool root = groups_.world->rank() == 0;
  while (optimizer_->step() < options_.steps) {
    TRELLIS_ASSIGN_OR_RETURN(StepMetrics m, Step());
    const bool skipped = !m.skipped.empty();
    const bool last = !skipped && m.step == options_.steps;
    if (!skipped && options_.eval_every > 0 &&
        (m.step % options_.eval_every == 0 || last)) {
      TRELLIS_RETURN_IF_ERROR(Validate(m));
    }
    if (root && !m.straggler.empty()) {
      std::printf("straggler: %s\n", m.straggler.c_str());
    }
    if (root && (m.step % options_.log_every == 0 || last || m.val_loss ||
                 skipped || m.straggler_rank >= 0)) {
      std::printf("%s\n", FormatLogLine(m, options_.steps).c_str());
      std::fflush(stdout);
      metrics_.Write(m);
    }
    if (root && !said_uncounted_ && loader_->uncounted_batches() > 0) {
      said_uncounted_ = true;
      std::fprintf(stderr,
                   "warning: --eod_mask_loss: a global batch (by step %lld) "
                   "holds only end-of-text inputs, so no position counts "
                   "toward its loss and the step trains nothing (loss and "
                   "gradients 0); check --data\n",
                   static_cast<long long>(m.step + 1));
    }
    if (skipped && guard_->GaveUp()) {
      TRELLIS_RETURN_IF_ERROR(GiveUp(m));
      return Outcome::kGaveUp;
    }
    if (!skipped && !options_.save_dir.empty() && options_.save_every > 0 &&
        m.step % options_.save_every == 0) {
      TRELLIS_RETURN_IF_ERROR(Save());
    }
    if (m.stop_requested) {
      if (root) {
        std::printf("stop requested: stopping after step %lld\n",
                    static_cast<long long>(m.step));
      }
      if (!options_.save_dir.empty()) TRELLIS_RETURN_IF_ERROR(Save());
      return Outcome::kStopped;
    }
  }
  if (!options_.save_dir.empty()) TRELLIS_RETURN_IF_ERROR(Save());
  return Outcome::kCompleted;
}

}  // namespace trellis
