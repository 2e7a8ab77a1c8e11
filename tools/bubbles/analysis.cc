#include "tools/bubbles/analysis.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "framework/status.h"
#include "framework/trace.h"

namespace trellis {
namespace {

constexpr double kMsPerUs = 1e-3;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n == 0) return 0.0;
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The mean of per-rank (or per-stage) figures; `stage` labels the result.
StageFigures Mean(const std::vector<StageFigures>& parts, int stage) {
  StageFigures mean;
  mean.stage = stage;
  if (parts.empty()) return mean;
  for (const StageFigures& p : parts) {
    mean.ranks += p.ranks;
    mean.busy += p.busy;
    mean.idle += p.idle;
    mean.window += p.window;
    mean.bubble += p.bubble;
    mean.recv_wait += p.recv_wait;
    mean.dp += p.dp;
    mean.cpu_share += p.cpu_share;
  }
  const double n = static_cast<double>(parts.size());
  mean.busy /= n;
  mean.idle /= n;
  mean.window /= n;
  mean.bubble /= n;
  mean.recv_wait /= n;
  mean.dp /= n;
  mean.cpu_share /= n;
  return mean;
}

bool IsRecvWait(const TracedSpan& s) {
  return s.category == kTraceCategoryPipeline &&
         (absl::StartsWith(s.name, "wait Recv") || s.name == "wait recv");
}

std::optional<ActionType> ComputeType(const std::string& name) {
  if (name == "F") return ActionType::kForward;
  if (name == "B") return ActionType::kBackwardInput;
  if (name == "W") return ActionType::kBackwardWeight;
  return std::nullopt;
}

std::string Title(const BubbleReport& r, const std::string& what, double bubble,
                  double theory) {
  std::string title =
      absl::StrFormat("%s  pp=%d m=%d", r.schedule, r.pp, r.microbatches);
  if (r.virtual_stages > 1) absl::StrAppend(&title, " v=", r.virtual_stages);
  absl::StrAppend(&title, absl::StrFormat("  %s: bubble %.1f%% (theory %.1f%%)",
                                          what, 100 * bubble, 100 * theory));
  return title;
}

// One rank's spans of one step.
struct RankStep {
  const RankTrace* trace = nullptr;
  const TracedSpan* step = nullptr;
  const TracedSpan* pipeline = nullptr;
};

absl::StatusOr<RankStep> FindStep(const RankTrace& trace, int64_t step) {
  RankStep found;
  found.trace = &trace;
  for (const TracedSpan& s : trace.spans) {
    if (s.category == kTraceCategoryStep && s.name == "step" &&
        s.Arg("step") == step) {
      found.step = &s;
    }
  }
  if (found.step == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(trace.path, " has no span of step ", step,
                     " although rank 0 traced it; was the file cut short?"));
  }
  for (const TracedSpan& s : trace.spans) {
    if (s.category == kTraceCategoryStep && s.name == "pipeline" &&
        s.start_us >= found.step->start_us &&
        s.end_us() <= found.step->end_us()) {
      found.pipeline = &s;
    }
  }
  if (found.pipeline == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        trace.path, " has no \"pipeline\" span inside step ", step));
  }
  return found;
}

// Figures of one rank in [begin, end] (µs), and its costs.
StageFigures RankFigures(const RankStep& rs, double begin, double end,
                         std::map<ActionType, std::vector<double>>& costs) {
  StageFigures f;
  f.stage = rs.trace->stage;
  f.ranks = 1;
  f.window = (end - begin) * kMsPerUs;
  for (const TracedSpan& s : rs.trace->spans) {
    if (s.start_us < rs.step->start_us || s.end_us() > rs.step->end_us()) {
      continue;
    }
    if (s.category == kTraceCategoryCompute) {
      const double overlap =
          std::min(s.end_us(), end) - std::max(s.start_us, begin);
      if (overlap > 0) f.busy += overlap * kMsPerUs;
      if (auto type = ComputeType(s.name)) {
        costs[*type].push_back(s.duration_us * kMsPerUs);
      }
    } else if (IsRecvWait(s)) {
      f.recv_wait += s.duration_us * kMsPerUs;
    } else if (s.category == kTraceCategoryDataParallel) {
      f.dp += s.duration_us * kMsPerUs;
    }
  }
  f.idle = f.window - f.busy;
  f.bubble = f.window > 0 ? f.idle / f.window : 0.0;
  const int64_t cpu_us = rs.pipeline->Arg("cpu_us", 0);
  if (rs.pipeline->duration_us > 0) {
    f.cpu_share = static_cast<double>(cpu_us) / rs.pipeline->duration_us;
  }
  return f;
}

TimelineRow RankRow(const RankStep& rs, double begin) {
  TimelineRow row;
  row.label = absl::StrCat("stage ", rs.trace->stage);
  for (const TracedSpan& s : rs.trace->spans) {
    if (s.start_us < rs.pipeline->start_us ||
        s.end_us() > rs.pipeline->end_us()) {
      continue;
    }
    const double start = (s.start_us - begin) * kMsPerUs;
    const double end = (s.end_us() - begin) * kMsPerUs;
    if (s.category == kTraceCategoryCompute) {
      if (auto type = ComputeType(s.name)) {
        row.compute.push_back(
            TimelineBlock{*type, static_cast<int>(s.Arg("mb", 0)),
                          static_cast<int>(s.Arg("vstage", 0)), start, end});
      }
    } else if (IsRecvWait(s)) {
      row.waits.emplace_back(start, end);
    }
  }
  return row;
}

double MeanOf(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

// Sets theory and planned from the mean costs.
absl::Status Plan(const BubbleReport& r, StepFigures& f) {
  TRELLIS_ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(r.schedule));
  TRELLIS_RETURN_IF_ERROR(
      CheckScheduleShape(kind, r.pp, r.microbatches, r.virtual_stages));
  f.theory =
      r.pp > 1 ? TheoreticalBubble(kind, r.pp, r.microbatches, r.virtual_stages)
               : 0.0;
  ActionCosts costs;
  costs.forward = f.cost_forward;
  costs.backward_input = f.cost_backward_input;
  costs.backward_weight = f.cost_backward_weight;
  TRELLIS_ASSIGN_OR_RETURN(
      ScheduleSimulation sim,
      SimulateSchedules(
          BuildAllSchedules(kind, r.pp, r.microbatches, r.virtual_stages),
          r.virtual_stages, costs));
  f.planned = sim.BubbleFraction();
  return absl::OkStatus();
}

absl::StatusOr<StepFigures> AnalyzeStep(const std::vector<RankTrace>& traces,
                                        const BubbleReport& report,
                                        int64_t step) {
  std::vector<RankStep> ranks;
  double begin = 0, end = 0;
  StepFigures f;
  f.step = step;
  for (const RankTrace& t : traces) {
    TRELLIS_ASSIGN_OR_RETURN(RankStep rs, FindStep(t, step));
    begin = ranks.empty() ? rs.pipeline->start_us
                          : std::min(begin, rs.pipeline->start_us);
    end = ranks.empty() ? rs.pipeline->end_us()
                        : std::max(end, rs.pipeline->end_us());
    f.step_time = std::max(f.step_time, rs.step->duration_us * kMsPerUs);
    ranks.push_back(rs);
  }
  std::map<ActionType, std::vector<double>> costs;
  std::vector<std::vector<StageFigures>> by_stage(report.pp);
  f.min_cpu_share = 1.0;
  std::vector<double> busy;
  for (const RankStep& rs : ranks) {
    by_stage[rs.trace->stage].push_back(RankFigures(rs, begin, end, costs));
    const StageFigures& mine = by_stage[rs.trace->stage].back();
    f.min_cpu_share = std::min(f.min_cpu_share, mine.cpu_share);
    busy.push_back(mine.busy);
    if (f.slowest_rank < 0 || mine.busy > f.slowest_busy) {
      f.slowest_rank = rs.trace->rank;
      f.slowest_busy = mine.busy;
    }
  }
  f.median_busy = Median(busy);
  for (int s = 0; s < report.pp; ++s) {
    f.stages.push_back(Mean(by_stage[s], s));
    // The stage's lowest rank stands for it in the timeline.
    for (const RankStep& rs : ranks) {
      if (rs.trace->stage != s) continue;
      f.timeline.rows.push_back(RankRow(rs, begin));
      break;
    }
  }
  f.whole = Mean(f.stages, -1);
  f.cost_forward = MeanOf(costs[ActionType::kForward]);
  f.cost_backward_input = MeanOf(costs[ActionType::kBackwardInput]);
  f.cost_backward_weight = MeanOf(costs[ActionType::kBackwardWeight]);
  TRELLIS_RETURN_IF_ERROR(Plan(report, f));
  f.timeline.unit = "ms";
  f.timeline.end = (end - begin) * kMsPerUs;
  f.timeline.title =
      Title(report, absl::StrCat("step ", step), f.whole.bubble, f.theory);
  return f;
}

}  // namespace

absl::StatusOr<BubbleReport> AnalyzeTraces(
    const std::vector<RankTrace>& traces) {
  if (traces.empty()) return absl::InvalidArgumentError("no traces");
  const RankTrace& first = traces.front();
  BubbleReport report;
  report.schedule = first.schedule;
  report.pp = first.pp;
  report.microbatches = first.microbatches;
  report.virtual_stages = first.virtual_stages;
  report.dp = first.dp;
  report.tp = first.tp;
  std::vector<int64_t> steps;
  for (const TracedSpan& s : first.spans) {
    if (s.category == kTraceCategoryStep && s.name == "step") {
      steps.push_back(s.Arg("step"));
    }
  }
  if (steps.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(first.path,
                     " holds no traced step; was the run stopped before "
                     "its --trace_steps?"));
  }
  for (int64_t step : steps) {
    TRELLIS_ASSIGN_OR_RETURN(StepFigures f, AnalyzeStep(traces, report, step));
    report.steps.push_back(std::move(f));
  }
  if (report.steps.size() > 1) {
    report.median = MedianFigures(report.steps);
    report.median->timeline.title =
        Title(report, absl::StrCat("median of ", report.steps.size(), " steps"),
              report.median->whole.bubble, report.median->theory);
  }
  return report;
}

absl::StatusOr<BubbleReport> AnalyzePlan(ScheduleKind kind, int pp,
                                         int microbatches, int virtual_stages,
                                         const ActionCosts& costs) {
  TRELLIS_RETURN_IF_ERROR(
      CheckScheduleShape(kind, pp, microbatches, virtual_stages));
  // Bounds the simulation's memory and the timeline's size (about 9 KB of
  // SVG per chunk-microbatch); in double, so no product overflows.
  const double work = static_cast<double>(pp) * microbatches * virtual_stages;
  if (work > kMaxPlanWork) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pp=", pp, " × --microbatches=", microbatches, " × --virtual_stages=",
        virtual_stages, " = ", work, " is more than ", kMaxPlanWork,
        " chunk-microbatches a plan draws; choose smaller sizes"));
  }
  if (costs.forward < 0 || costs.backward_input < 0 ||
      costs.backward_weight < 0 ||
      costs.forward + costs.backward_input + costs.backward_weight <= 0) {
    return absl::InvalidArgumentError(
        "--costs F,B,W must be at least 0 and not all 0, e.g. --costs=1,1,1");
  }
  BubbleReport report;
  report.mode = "plan";
  report.unit = "cost units";
  report.schedule = ScheduleKindName(kind);
  report.pp = pp;
  report.microbatches = microbatches;
  report.virtual_stages = virtual_stages;
  TRELLIS_ASSIGN_OR_RETURN(
      ScheduleSimulation sim,
      SimulateSchedules(
          BuildAllSchedules(kind, pp, microbatches, virtual_stages),
          virtual_stages, costs));
  StepFigures f;
  f.step_time = sim.makespan;
  for (int s = 0; s < pp; ++s) {
    StageFigures stage;
    stage.stage = s;
    stage.ranks = 1;
    stage.window = sim.makespan;
    stage.busy = sim.busy[s];
    stage.idle = sim.makespan - sim.busy[s];
    stage.bubble = sim.makespan > 0 ? stage.idle / sim.makespan : 0.0;
    TimelineRow row;
    row.label = absl::StrCat("stage ", s);
    for (const TimedAction& t : sim.timeline[s]) {
      if (IsCompute(t.action.type)) {
        row.compute.push_back(TimelineBlock{t.action.type, t.action.microbatch,
                                            t.action.virtual_stage, t.start,
                                            t.end});
      } else if (IsRecv(t.action.type) && t.end > t.start) {
        stage.recv_wait += t.end - t.start;
        row.waits.emplace_back(t.start, t.end);
      }
    }
    f.stages.push_back(stage);
    f.timeline.rows.push_back(std::move(row));
  }
  f.whole = Mean(f.stages, -1);
  f.cost_forward = costs.forward;
  f.cost_backward_input = costs.backward_input;
  f.cost_backward_weight = costs.backward_weight;
  f.theory =
      pp > 1 ? TheoreticalBubble(kind, pp, microbatches, virtual_stages) : 0.0;
  f.planned = sim.BubbleFraction();
  f.timeline.unit = report.unit;
  f.timeline.end = sim.makespan;
  f.timeline.title = Title(report, "plan", f.whole.bubble, f.theory);
  report.steps.push_back(std::move(f));
  return report;
}

StepFigures MedianFigures(const std::vector<StepFigures>& steps) {
  TRELLIS_CHECK(!steps.empty());
  using Field = double StageFigures::*;
  static constexpr Field kStageFields[] = {
      &StageFigures::busy,     &StageFigures::idle,      &StageFigures::window,
      &StageFigures::bubble,   &StageFigures::recv_wait, &StageFigures::dp,
      &StageFigures::cpu_share};
  using StepField = double StepFigures::*;
  static constexpr StepField kStepFields[] = {
      &StepFigures::step_time,
      &StepFigures::theory,
      &StepFigures::planned,
      &StepFigures::cost_forward,
      &StepFigures::cost_backward_input,
      &StepFigures::cost_backward_weight,
      &StepFigures::min_cpu_share,
      &StepFigures::slowest_busy,
      &StepFigures::median_busy};
  auto median_of = [&](auto get) {
    std::vector<double> values;
    for (const StepFigures& s : steps) values.push_back(get(s));
    return Median(values);
  };
  auto median_stage = [&](auto pick) {
    StageFigures m = pick(steps.front());
    for (Field field : kStageFields) {
      m.*field =
          median_of([&](const StepFigures& s) { return pick(s).*field; });
    }
    return m;
  };
  StepFigures median;
  for (StepField field : kStepFields) {
    median.*field = median_of([&](const StepFigures& s) { return s.*field; });
  }
  for (size_t i = 0; i < steps.front().stages.size(); ++i) {
    median.stages.push_back(
        median_stage([i](const StepFigures& s) -> const StageFigures& {
          return s.stages[i];
        }));
  }
  median.whole = median_stage(
      [](const StepFigures& s) -> const StageFigures& { return s.whole; });
  // The timeline of the step whose bubble is nearest the median.
  const StepFigures* nearest = &steps.front();
  for (const StepFigures& s : steps) {
    if (std::abs(s.whole.bubble - median.whole.bubble) <
        std::abs(nearest->whole.bubble - median.whole.bubble)) {
      nearest = &s;
    }
  }
  median.timeline = nearest->timeline;
  return median;
}

}  // namespace trellis
