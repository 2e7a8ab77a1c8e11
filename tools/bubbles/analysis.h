// Pipeline bubble figures, measured from traces or planned from a schedule.
//
// Per optimizer step and per pipeline stage:
//   window     from the first stage's entry into the pipeline (the
//              executor's run) to the last stage's exit: the same interval
//              for every stage, as in SimulateSchedules;
//   busy       time inside F, B and W within the window;
//   idle       window − busy (waiting for transfers, and the executor's own
//              overhead);
//   bubble     idle / window;
//   recv_wait  time blocked on pipeline receives;
//   dp         time in data-parallel collectives and their waits (the whole
//              step);
//   cpu_share  the CPU time of the rank's thread over the wall time of its
//              pipeline run: near 1 when it always had a core (waiting
//              spins); well below 1, other processes took its core and the
//              bubble is inflated by that;
// and the whole step: the mean over stages of each (a stage's figures are
// the mean over its dp × tp ranks). Next to the measured bubble stand the
// textbook formula (TheoreticalBubble) and the bubble SimulateSchedules
// plans with the measured mean F, B and W times ("planned").
//
// A plan (AnalyzePlan) simulates the schedule with given costs and reports
// the same figures in cost units; its dp figure is 0.
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_BUBBLES_ANALYSIS_H_
#define TRELLIS_TOOLS_BUBBLES_ANALYSIS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/schedule.h"
#include "tools/bubbles/trace_file.h"

namespace trellis {

// What a timeline draws: per stage, its computes and its receive waits, in
// the report's unit from the window's start.
struct TimelineBlock {
  ActionType type = ActionType::kForward;  // F, B or W
  int microbatch = 0;
  int virtual_stage = 0;
  double start = 0.0;
  double end = 0.0;
};
struct TimelineRow {
  std::string label;  // "stage 0"
  std::vector<TimelineBlock> compute;
  std::vector<std::pair<double, double>> waits;  // receive waits
};
struct Timeline {
  std::string title;
  std::string unit;  // "ms" or "cost units"
  double end = 0.0;  // the window's length
  std::vector<TimelineRow> rows;
};

struct StageFigures {
  int stage = -1;  // -1: the whole step
  int ranks = 0;
  double busy = 0.0;
  double idle = 0.0;
  double window = 0.0;
  double bubble = 0.0;
  double recv_wait = 0.0;
  double dp = 0.0;
  double cpu_share = 0.0;  // 0 when the trace does not say
};

struct StepFigures {
  int64_t step = 0;        // the optimizer step; 0 for a plan or a median
  double step_time = 0.0;  // the whole step (the slowest rank's)
  std::vector<StageFigures> stages;
  StageFigures whole;
  double theory = 0.0;        // TheoreticalBubble
  double planned = 0.0;       // SimulateSchedules with the mean costs below
  double cost_forward = 0.0;  // mean F, B, W of one chunk
  double cost_backward_input = 0.0;
  double cost_backward_weight = 0.0;
  double min_cpu_share = 0.0;  // the least cpu_share of any rank
  // Per-rank skew of traced steps: the rank that computed longest (its
  // busy time) against the median rank's, as trellis-train's straggler
  // report compares them. slowest_rank is -1 for a plan or a median.
  int slowest_rank = -1;
  double slowest_busy = 0.0;
  double median_busy = 0.0;
  Timeline timeline;
};

struct BubbleReport {
  std::string mode = "trace";  // or "plan"
  std::string unit = "ms";     // or "cost units"
  std::string schedule;
  int pp = 1;
  int microbatches = 1;
  int virtual_stages = 1;
  int dp = 1;
  int tp = 1;
  std::vector<StepFigures> steps;
  // With more than one step: the median of every figure over the steps, and
  // the timeline of the step whose bubble is the median.
  std::optional<StepFigures> median;
};

// Measures every traced step of one run (ReadTraceDir's result).
absl::StatusOr<BubbleReport> AnalyzeTraces(
    const std::vector<RankTrace>& traces);

// The most pp × microbatches × virtual_stages AnalyzePlan accepts.
inline constexpr int64_t kMaxPlanWork = 16384;

// Plans `kind` on `pp` stages with unit or given costs, without a model.
// InvalidArgument for a shape the schedule cannot take or one larger than
// kMaxPlanWork.
absl::StatusOr<BubbleReport> AnalyzePlan(ScheduleKind kind, int pp,
                                         int microbatches, int virtual_stages,
                                         const ActionCosts& costs);

// The element-wise median of `steps` (REQUIRES: not empty, same stages).
StepFigures MedianFigures(const std::vector<StepFigures>& steps);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_BUBBLES_ANALYSIS_H_
