// The plan of one layout on a cluster — per-rank memory from the trainer's
// memory plan, whether it fits, the predicted step — and the ranking of
// every valid layout by throughput.
//
// Fitting: the largest rank's arena (MemoryPlan plus the arena's headroom,
// ArenaCapacity) must fit in the device's memory less what libraries
// reserve (ClusterSpec::reserved_bytes).
//
// Thread safety: pure functions of their arguments.
#ifndef TRELLIS_TOOLS_PLAN_PLANNER_H_
#define TRELLIS_TOOLS_PLAN_PLANNER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/options/options.h"
#include "tools/plan/cluster.h"
#include "tools/plan/layout_space.h"
#include "tools/plan/step_cost.h"
#include "tools/plan/step_work.h"
#include "tools/trainer/memory_plan.h"

namespace trellis {

struct LayoutPlan {
  TrainOptions options;  // resolved
  std::string name;      // LayoutName
  MemoryPlan memory;     // of the rank that needs most
  int largest_stage = 0;
  double arena_bytes = 0;      // that rank's arena: plan + headroom
  double available_bytes = 0;  // per device, after the reserve
  bool fits = false;
  StepEstimate step;
  PlannedTraffic traffic;  // one step's tp, dp and cp calls on that rank
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs / (world × peak)
};

// Plans resolved `options` (a layout the validator accepted) on `cluster`;
// `schedules`, when given, are BuildStageSchedules(options) (else built
// here).
absl::StatusOr<LayoutPlan> PlanLayout(
    const TrainOptions& options, const ClusterSpec& cluster,
    const StageSchedules* schedules = nullptr);

// The layout `options` describes (dp 0: world / (cp·tp·pp)) on `world` ranks:
// the validator's error if it refuses it, else its plan.
absl::StatusOr<LayoutPlan> PlanGivenLayout(TrainOptions options, int world,
                                           const ClusterSpec& cluster);

// Every valid layout of `base` on `world` ranks of `cluster`, planned:
// those that fit first, fastest first; then those that do not, smallest
// need first. Layouts of one schedule shape (schedule, pp, microbatches,
// virtual stages) share its schedules, built once. `progress`, when given,
// is called after each layout with (planned, total). REQUIRES: 1 ≤ world ≤
// cluster.world().
absl::StatusOr<std::vector<LayoutPlan>> PlanAll(
    const TrainOptions& base, int world, const ClusterSpec& cluster,
    const SearchLimits& limits,
    const std::function<void(size_t, size_t)>& progress = nullptr);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_PLANNER_H_
