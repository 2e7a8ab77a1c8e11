// What the planner's unit tests share: a small cluster of round rates
// (one node of eight CPU devices, 10 GFLOP/s at full GEMM efficiency and
// half of it for attention, 10 GB/s of memory, 1 GB/s links with 10 us
// per hop, asynchronous collectives), which each test changes where it
// needs to.
#ifndef TRELLIS_TESTS_PLAN_PLAN_TEST_UTIL_H_
#define TRELLIS_TESTS_PLAN_PLAN_TEST_UTIL_H_

#include "tools/plan/cluster.h"

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

}  // namespace trellis::plantest

#endif  // TRELLIS_TESTS_PLAN_PLAN_TEST_UTIL_H_
