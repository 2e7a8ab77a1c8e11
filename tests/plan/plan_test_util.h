// What the planner's unit tests share: a small cluster of round rates
// (one node of eight CPU devices, 10 GFLOP/s at full GEMM efficiency and
// half of it for attention, 10 GB/s of memory, 1 GB/s links with 10 us
// per hop, asynchronous collectives), which each test changes where it
// needs to, and a layout's step estimate with the sum of its parts.
#ifndef TRELLIS_TESTS_PLAN_PLAN_TEST_UTIL_H_
#define TRELLIS_TESTS_PLAN_PLAN_TEST_UTIL_H_

#include <gtest/gtest.h>

#include "tools/plan/cluster.h"
#include "tools/plan/stage_facts.h"
#include "tools/plan/step_cost.h"

namespace trellis::plantest {

inline ClusterSpec RoundCluster() {
  ClusterSpec c;
  c.name = "test";
  c.device = DeviceType::kCPU;
  c.devices_per_node = 8;
  c.nodes = 1;
  c.memory_bytes = 1e12;
  c.peak_flops = 1e10;
  c.gemm_efficiency = 1;
  c.attention_efficiency = 0.5;
  c.memory_bandwidth = 1e10;
  c.intra = {1e9, 1e-5};
  c.inter = c.intra;
  c.async_collectives = true;
  return c;
}

// The step estimate of resolved `o` on `c` (a failure is a test failure).
inline StepEstimate Estimate(const TrainOptions& o, const ClusterSpec& c) {
  absl::StatusOr<StepEstimate> e = EstimateStep(o, PlanStages(o), c);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : StepEstimate{};
}

// The parts a step estimate splits into, added up (they must make the
// step).
inline double PartsSum(const StepEstimate& e) {
  return e.compute + e.tp_comm + e.cp_comm + e.ep_comm + e.dp_gather +
         e.bubble + e.pp_comm + e.dp_comm + e.optimizer;
}

}  // namespace trellis::plantest

#endif  // TRELLIS_TESTS_PLAN_PLAN_TEST_UTIL_H_
