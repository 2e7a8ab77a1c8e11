#include "tools/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/status.h"
#include "tools/plan/stage_facts.h"

namespace trellis {

absl::StatusOr<LayoutPlan> PlanLayout(const TrainOptions& options,
                                      const ClusterSpec& cluster) {
  LayoutPlan plan;
  plan.options = options;
  plan.name = LayoutName(options);
  const std::vector<StageFacts> stages = PlanStages(options);
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
  TRELLIS_ASSIGN_OR_RETURN(plan.step, EstimateStep(options, stages, cluster));
  const double tokens =
      static_cast<double>(options.global_batch_size * options.model.seq_len);
  plan.tokens_per_s = tokens / plan.step.step;
  const double world =
      static_cast<double>(options.dp * options.tp * options.pp);
  plan.mfu = options.model.TrainingFlopsPerToken() * plan.tokens_per_s /
             (world * cluster.peak_flops);
  return plan;
}

absl::StatusOr<LayoutPlan> PlanGivenLayout(TrainOptions options, int world,
                                           const ClusterSpec& cluster) {
  TRELLIS_RETURN_IF_ERROR(ValidateLayout(options, world));
  return PlanLayout(options, cluster);
}

absl::StatusOr<std::vector<LayoutPlan>> PlanAll(const TrainOptions& base,
                                                int world,
                                                const ClusterSpec& cluster,
                                                const SearchLimits& limits) {
  TRELLIS_CHECK(world >= 1 && world <= cluster.world());
  std::vector<LayoutPlan> plans;
  for (const TrainOptions& o : EnumerateLayouts(base, world, limits)) {
    TRELLIS_ASSIGN_OR_RETURN(LayoutPlan plan, PlanLayout(o, cluster));
    plans.push_back(std::move(plan));
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
