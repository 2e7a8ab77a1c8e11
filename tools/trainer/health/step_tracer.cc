#include "tools/trainer/health/step_tracer.h"

#include "absl/strings/str_cat.h"
#include "tools/bubbles/trace_file.h"

namespace trellis {

StepTracer::StepTracer(const TrainOptions& options, const ProcessGroups& groups,
                       MeshCoord coord,
                       std::shared_ptr<TraceClock> device_clock)
    : raw_(groups),
      traced_(groups),
      coord_(coord),
      num_stages_(static_cast<int>(options.pp)),
      steps_(options.trace_steps.begin(), options.trace_steps.end()),
      device_timed_(device_clock != nullptr),
      recorder_(groups.world->rank(), std::move(device_clock)) {
  const int rank = groups.world->rank();
  path_ = absl::StrCat(options.trace_dir, "/", TraceFileName(rank));
  recorder_.SetProcessName(absl::StrCat("rank ", rank, " (d", coord.d, " t",
                                        coord.t, " p", coord.p, ")"));
  for (const char* lane :
       {"step", "compute", "pp", "dp", "tp", "embed", "cp"}) {
    recorder_.AddLane(lane);
  }
  const std::pair<Communicator * ProcessGroups::*, int> wrapped[] = {
      {&ProcessGroups::tp, kTensorParallelLane},
      {&ProcessGroups::dp, kDataParallelLane},
      {&ProcessGroups::pp, kPipelineLane},
      {&ProcessGroups::embed, kEmbedLane},
      {&ProcessGroups::cp, kContextLane}};
  for (const auto& [member, lane] : wrapped) {
    if (groups.*member == nullptr) continue;
    wrappers_.push_back(std::make_unique<TracingCommunicator>(*(groups.*member),
                                                              recorder_, lane));
    traced_.*member = wrappers_.back().get();
    if (member == &ProcessGroups::pp) pp_ = wrappers_.back().get();
  }
  const std::pair<const char*, nlohmann::json> metadata[] = {
      {"rank", rank},
      {"world", groups.world->size()},
      {"dp", options.dp},
      {"tp", options.tp},
      {"pp", options.pp},
      {"cp", options.cp},
      {"stage", coord.p},
      {"coord", {{"d", coord.d}, {"t", coord.t}, {"p", coord.p}}},
      {"schedule", ScheduleKindName(options.schedule)},
      {"virtual_stages", options.virtual_stages},
      {"microbatches", options.microbatches()},
      {"micro_batch_size", options.micro_batch_size},
      {"seq_len", options.model.seq_len},
      {"trace_steps", options.trace_steps},
      {"clock",
       device_timed_
           ? "host steady clock in microseconds from a world barrier before "
             "the first traced step; F, B, W and transfer posts timed by CUDA "
             "events on the compute stream, aligned to the host clock at the "
             "start of each traced step"
           : "host steady clock in microseconds from a world barrier before "
             "the first traced step"}};
  for (const auto& [key, value] : metadata) recorder_.SetMetadata(key, value);
}

void StepTracer::Observe(PipelineExecutor& executor) {
  for (const Action& a : executor.actions()) {
    if (a.type == ActionType::kRecvActivation) recv_activation_.push_back(a);
    if (a.type == ActionType::kRecvGrad) recv_grad_.push_back(a);
  }
  executor.set_observer([this](const Action& a, const ActionTiming& t) {
    if (recorder_.active()) OnAction(a, t);
  });
  if (pp_ == nullptr) return;
  pp_->set_recv_namer([this](int tag, int64_t number, TraceSpan& span) {
    const std::vector<Action>* recvs =
        tag == PipelineExecutor::kActivationTag ? &recv_activation_
        : tag == PipelineExecutor::kGradientTag ? &recv_grad_
                                                : nullptr;
    if (recvs == nullptr || number >= static_cast<int64_t>(recvs->size())) {
      return;
    }
    const Action& a = (*recvs)[number];
    span.name = absl::StrCat("wait ", a.ToString());
    span.args.emplace_back("mb", a.microbatch);
    span.args.emplace_back("vstage", a.virtual_stage);
  });
}

void StepTracer::OnAction(const Action& a, const ActionTiming& t) {
  TraceArgs args = {{"stage", coord_.p},
                    {"vstage", a.virtual_stage},
                    {"mb", a.microbatch},
                    {"chunk", a.virtual_stage * num_stages_ + coord_.p}};
  const bool compute = IsCompute(a.type);
  const char* category =
      compute ? kTraceCategoryCompute : kTraceCategoryPipeline;
  const int lane = compute ? kComputeLane : kPipelineLane;
  if (t.begin_mark >= 0) {
    recorder_.AddMarkedSpan(ActionTypeName(a.type), category, lane,
                            t.begin_mark, t.end_mark, std::move(args));
  } else {
    recorder_.AddSpan(ActionTypeName(a.type), category, lane, t.start, t.end,
                      std::move(args));
  }
}

TraceRecorder* StepTracer::BeginStep(int64_t step) {
  if (steps_.count(step) == 0) return nullptr;
  raw_.world->Barrier();
  if (!origin_set_) {
    recorder_.ResetOrigin();
    origin_set_ = true;
  }
  if (pp_ != nullptr) pp_->ResetSequence();
  step_ = step;
  recorder_.set_active(true);
  return &recorder_;
}

absl::Status StepTracer::EndStep(std::chrono::steady_clock::time_point start) {
  recorder_.AddSpan("step", kTraceCategoryStep, kStepLane, start,
                    std::chrono::steady_clock::now(), {{"step", step_}});
  recorder_.set_active(false);
  return recorder_.Write(path_);
}

}  // namespace trellis
