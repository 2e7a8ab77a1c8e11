// Fuzz target of the planner's cluster file (trellis-plan --cluster=FILE):
// LoadCluster on a .json file. An accepted cluster must keep the invariants
// cluster.h states, and must read back from ClusterToJson unchanged.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/plan/cluster.h"

namespace trellis {
namespace {

void CheckInvariants(const ClusterSpec& c) {
  const auto positive = [](double x) { return x > 0 && std::isfinite(x); };
  fuzz::Expect(c.devices_per_node >= 1 && c.nodes >= 1 && c.world() >= 1,
               "a count is below 1");
  fuzz::Expect(positive(c.memory_bytes) && positive(c.peak_flops) &&
                   positive(c.memory_bandwidth) &&
                   positive(c.intra.bandwidth) && positive(c.inter.bandwidth) &&
                   positive(c.split_backward_ratio),
               "a size or rate is not positive and finite");
  fuzz::Expect(c.reserved_bytes >= 0 && c.reserved_bytes < c.memory_bytes,
               "reserved memory is not below the device's memory");
  fuzz::Expect(c.gemm_efficiency > 0 && c.gemm_efficiency <= 1 &&
                   c.attention_efficiency > 0 && c.attention_efficiency <= 1,
               "an efficiency is outside (0, 1]");
  fuzz::Expect(c.intra.latency >= 0 && std::isfinite(c.intra.latency) &&
                   c.inter.latency >= 0 && std::isfinite(c.inter.latency),
               "a latency is negative or not finite");
}

}  // namespace
}  // namespace trellis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = trellis::fuzz::ScratchDir() + "/cluster.json";
  trellis::fuzz::WriteFile(path, trellis::fuzz::AsText(data, size));
  const absl::StatusOr<trellis::ClusterSpec> cluster =
      trellis::LoadCluster(path);
  trellis::fuzz::Note("LoadCluster", cluster.status());
  if (!cluster.ok()) return 0;
  trellis::CheckInvariants(*cluster);
  const absl::StatusOr<trellis::ClusterSpec> again =
      trellis::ClusterFromJson(trellis::ClusterToJson(*cluster), "again");
  trellis::fuzz::Expect(again.ok(), "ClusterToJson does not read back");
  trellis::fuzz::Expect(again->devices_per_node == cluster->devices_per_node &&
                            again->nodes == cluster->nodes &&
                            again->name == cluster->name &&
                            again->device == cluster->device,
                        "ClusterToJson reads back different");
  return 0;
}
