#include "tools/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "framework/status.h"
#include "tools/plan/stage_facts.h"

namespace trellis {

absl::StatusOr<LayoutPlan> PlanLayout(const TrainOptions& options,
                                      const ClusterSpec& cluster,
                                      const StageSchedules* schedules) {
  LayoutPlan plan;
  plan.options = options;
  plan.name = LayoutName(options);
  const std::vector<StageFacts> stages = PlanStages(options, schedules);
  for (size_t p = 0; p < stages.size(); ++p) {
    if (p == 0 || stages[p].memory.total() > plan.memory.total()) {
      plan.memory = stages[p].memory;
      plan.largest_stage = static_cast<int>(p);
    }
  }
  // The arena a rank reserves when memory is plentiful: plan + headroom.
  plan.arena_bytes = static_cast<double>(
      ArenaCapacity(plan.memory, std::numeric_limits<size_t>::max()));
  plan.available_bytes = cluster.memory_bytes - cluster.reserved_bytes;
  plan.fits = plan.arena_bytes <= plan.available_bytes;
  plan.traffic = PlannedStepTraffic(options, stages[plan.largest_stage]);
  TRELLIS_ASSIGN_OR_RETURN(plan.step,
                           EstimateStep(options, stages, cluster, schedules));
  const double tokens =
      static_cast<double>(options.global_batch_size * options.model.seq_len);
  plan.tokens_per_s = tokens / plan.step.step;
  const double world = static_cast<double>(options.gradient_replicas() *
                                           options.tp * options.pp);
  plan.mfu = options.model.TrainingFlopsPerToken() * plan.tokens_per_s /
             (world * cluster.peak_flops);
  return plan;
}

absl::StatusOr<LayoutPlan> PlanGivenLayout(TrainOptions options, int world,
                                           const ClusterSpec& cluster) {
  TRELLIS_RETURN_IF_ERROR(ValidateLayout(options, world));
  return PlanLayout(options, cluster);
}

absl::StatusOr<std::vector<LayoutPlan>> PlanAll(
    const TrainOptions& base, int world, const ClusterSpec& cluster,
    const SearchLimits& limits,
    const std::function<void(size_t, size_t)>& progress) {
  TRELLIS_CHECK(world >= 1 && world <= cluster.world());
  const std::vector<TrainOptions> layouts =
      EnumerateLayouts(base, world, limits);
  // Layouts grouped by schedule shape (schedule, pp, microbatches, virtual
  // stages), whose schedules are built once and dropped before the next
  // shape's; the plans keep the enumeration's order.
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, std::vector<size_t>>
      by_shape;
  for (size_t i = 0; i < layouts.size(); ++i) {
    const TrainOptions& o = layouts[i];
    by_shape[std::make_tuple(static_cast<int>(o.schedule), o.pp,
                             o.microbatches(), o.virtual_stages)]
        .push_back(i);
  }
  std::vector<LayoutPlan> plans(layouts.size());
  size_t planned = 0;
  for (const auto& [shape, indices] : by_shape) {
    const StageSchedules schedules = BuildStageSchedules(layouts[indices[0]]);
    for (size_t i : indices) {
      TRELLIS_ASSIGN_OR_RETURN(plans[i],
                               PlanLayout(layouts[i], cluster, &schedules));
      if (progress) progress(++planned, layouts.size());
    }
  }
  std::stable_sort(
      plans.begin(), plans.end(), [](const LayoutPlan& a, const LayoutPlan& b) {
        if (a.fits != b.fits) return a.fits;
        // Within 0.1% the smaller memory ranks first.
        if (a.fits && std::abs(a.tokens_per_s - b.tokens_per_s) >
                          1e-3 * std::max(a.tokens_per_s, b.tokens_per_s)) {
          return a.tokens_per_s > b.tokens_per_s;
        }
        return a.arena_bytes < b.arena_bytes;
      });
  return plans;
}

}  // namespace trellis
