// Kernel rates from a `trellis-bench --profile --json=FILE` run. Its kernel
// cost table ("kernel_costs", tools/plan/kernel_costs.h) becomes the
// cluster's, so every kernel costs its shape's measured rate. A summary
// without one (written before the table existed) gives two efficiencies
// instead: the profiled step's GEMM and attention kernels' times against
// the FLOPs the plan counts for that step (the same per-block GEMM elements
// and causal attention as step_cost.h) scale the cluster's peak. Run the
// bench on the target device.
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_PLAN_BENCH_PROFILE_H_
#define TRELLIS_TOOLS_PLAN_BENCH_PROFILE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "tools/plan/cluster.h"

namespace trellis {

// Sets cluster.kernel_costs, or else cluster.gemm_efficiency and
// attention_efficiency, from `profile` (trellis-bench's JSON summary,
// `where` naming it in errors). InvalidArgument in one line when its cost
// table is malformed, or it holds no kernel table, no model, or a device
// other than the cluster's.
absl::Status ApplyBenchProfile(const nlohmann::json& profile,
                               const std::string& where, ClusterSpec& cluster);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_BENCH_PROFILE_H_
