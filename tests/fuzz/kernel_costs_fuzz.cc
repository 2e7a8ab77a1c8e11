// Fuzz target of the planner's kernel cost table (trellis-plan --profile,
// a cluster file's "kernel_costs"): LoadKernelCosts on a file. An accepted
// table must keep the invariants kernel_costs.h states, cost any shape in a
// positive finite time, and read back from KernelCostsToJson unchanged.
// The same input, as JSON, goes to ApplyBenchProfile (trellis-plan
// --profile's other form, a trellis-bench summary) on a CPU cluster: an
// accepted profile leaves a valid table or efficiencies within [1e-3, 1].
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/plan/bench_profile.h"
#include "tools/plan/kernel_costs.h"

namespace trellis {
namespace {

void CheckGrid(const RateGrid& g) {
  fuzz::Expect(g.rates.size() == g.size(), "rates do not fill the axes");
  for (const std::vector<double>& axis : g.axes) {
    fuzz::Expect(!axis.empty() && axis.size() <= 64, "an axis's length");
    for (size_t i = 0; i < axis.size(); ++i) {
      fuzz::Expect(axis[i] >= 1 && (i == 0 || axis[i] > axis[i - 1]),
                   "an axis is not ascending from 1");
    }
  }
  for (double r : g.rates) {
    fuzz::Expect(r > 0 && std::isfinite(r), "a rate is not positive");
  }
}

void CheckCosts(const KernelCosts& c) {
  for (const RateGrid* g :
       {&c.gemm_forward, &c.gemm_backward_input, &c.gemm_backward_weight,
        &c.attention, &c.elementwise, &c.adamw}) {
    CheckGrid(*g);
  }
  // Shapes inside, between and beyond the axes.
  for (double x : {1.0, 3.5, 100.0, 7777.0, 1e9}) {
    for (GemmPass pass : {GemmPass::kForward, GemmPass::kBackwardInput,
                          GemmPass::kBackwardWeight}) {
      const double t = GemmSeconds(c, pass, x, x / 2 + 1, 64, 4);
      fuzz::Expect(t > 0 && std::isfinite(t), "a GEMM time is not finite");
    }
    const double a = AttentionRate(c, x, 64, 8);
    const double e = ElementwiseRate(c, x, 256);
    const double w = AdamWRate(c, x);
    fuzz::Expect(a > 0 && std::isfinite(a) && e > 0 && std::isfinite(e) &&
                     w > 0 && std::isfinite(w),
                 "a rate interpolates to a non-positive or infinite value");
  }
}

void FuzzBenchProfile(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return;
  ClusterSpec cluster;
  cluster.device = DeviceType::kCPU;
  cluster.peak_flops = 1e11;
  cluster.memory_bandwidth = 1e10;
  cluster.gemm_efficiency = cluster.attention_efficiency = 0.5;
  const absl::Status applied = ApplyBenchProfile(j, "profile.json", cluster);
  fuzz::Note("ApplyBenchProfile", applied);
  if (!applied.ok()) return;
  // A cost table replaces the efficiencies; kernel times scale them within
  // [1e-3, 1].
  if (cluster.kernel_costs != nullptr) {
    CheckCosts(*cluster.kernel_costs);
    return;
  }
  for (double e : {cluster.gemm_efficiency, cluster.attention_efficiency}) {
    fuzz::Expect(e >= 1e-3 && e <= 1, "an efficiency outside [1e-3, 1]");
  }
}

}  // namespace
}  // namespace trellis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(trellis::fuzz::AsText(data, size));
  trellis::FuzzBenchProfile(text);
  const std::string path = trellis::fuzz::ScratchDir() + "/costs.json";
  trellis::fuzz::WriteFile(path, text);
  const absl::StatusOr<trellis::KernelCosts> costs =
      trellis::LoadKernelCosts(path);
  trellis::fuzz::Note("LoadKernelCosts", costs.status());
  if (!costs.ok()) return 0;
  trellis::CheckCosts(*costs);
  const absl::StatusOr<trellis::KernelCosts> again =
      trellis::KernelCostsFromJson(trellis::KernelCostsToJson(*costs), "again");
  trellis::fuzz::Expect(again.ok(), "KernelCostsToJson does not read back");
  trellis::fuzz::Expect(
      again->gemm_forward.rates.size() == costs->gemm_forward.rates.size() &&
          again->device == costs->device,
      "KernelCostsToJson reads back different");
  return 0;
}
