// How trellis-plan shows its plans: a ranked table, the same as JSON, and
// one layout's step broken down (--explain, trellis-train --plan_only).
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_PLAN_PLAN_REPORT_H_
#define TRELLIS_TOOLS_PLAN_PLAN_REPORT_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/plan/cluster.h"
#include "tools/plan/planner.h"

namespace trellis {

// The cluster and model header, then the first `top` layouts that fit
// (ranked) and the first `top` that do not, each with what it needs. When
// none fits the table says so and names the smallest need.
std::string FormatPlanTable(const std::vector<LayoutPlan>& plans,
                            const ClusterSpec& cluster, size_t top);

// {"cluster": {...}, "model": {...}, "layouts": [{...}, ...]} with every
// layout, fitting ones first.
nlohmann::json PlansJson(const std::vector<LayoutPlan>& plans,
                         const ClusterSpec& cluster);
nlohmann::json LayoutJson(const LayoutPlan& plan);

// One layout's step: compute, bubble, exposed tp / pp / dp communication
// and optimizer, in ms and as shares; its ZeRO level and sequence
// parallelism with the tp and dp calls a step issues; its memory by
// category.
std::string FormatExplain(const LayoutPlan& plan, const ClusterSpec& cluster);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_PLAN_REPORT_H_
