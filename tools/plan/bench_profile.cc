#include "tools/plan/bench_profile.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "framework/status.h"
#include "tools/options/options.h"
#include "tools/plan/json_fields.h"
#include "tools/plan/stage_facts.h"

namespace trellis {
namespace {

absl::Status Bad(const std::string& where, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("--profile=", where, ": ", message));
}

}  // namespace

absl::Status ApplyBenchProfile(const nlohmann::json& p,
                               const std::string& where, ClusterSpec& cluster) {
  if (p.is_object() && p.contains("kernel_costs")) {
    TRELLIS_ASSIGN_OR_RETURN(KernelCosts costs, KernelCostsFromJson(p, where));
    const std::string device =
        cluster.device == DeviceType::kCPU ? "cpu" : "cuda";
    if (costs.device != device) {
      return Bad(where, absl::StrCat("was measured on ", costs.device,
                                     " but the cluster runs on ", device));
    }
    cluster.kernel_costs =
        std::make_shared<const KernelCosts>(std::move(costs));
    cluster.source =
        absl::StrCat(cluster.source, "; kernel costs by shape from ", where);
    return absl::OkStatus();
  }
  if (!p.is_object() || !p.contains("kernels") || !p["kernels"].is_array() ||
      p["kernels"].empty()) {
    return Bad(where,
               "holds no kernel table; write it with trellis-bench --profile "
               "--json=FILE");
  }
  const std::string device = StringOr(p, "device");
  if (device != "cpu" && device != "cuda") {
    return Bad(where, "field \"device\" must be \"cpu\" or \"cuda\"");
  }
  if ((device == "cpu") != (cluster.device == DeviceType::kCPU)) {
    return Bad(
        where,
        absl::StrCat("was measured on ", device, " but the cluster runs on ",
                     cluster.device == DeviceType::kCPU ? "cpu" : "cuda"));
  }
  if (!p.contains("model") || !p["model"].is_object()) {
    return Bad(where, "has no \"model\" object");
  }
  double gemm_ms = 0, attention_ms = 0;
  for (const nlohmann::json& k : p["kernels"]) {
    const std::string name = StringOr(k, "name");
    const double ms = NumberOr(k, "ms");
    if (absl::StartsWith(name, "Matmul")) gemm_ms += ms;
    if (absl::StartsWith(name, "Attention")) attention_ms += ms;
  }
  if (!(gemm_ms > 0 && attention_ms > 0 && std::isfinite(gemm_ms) &&
        std::isfinite(attention_ms))) {
    return Bad(where, "times no Matmul* or no Attention* kernel");
  }
  TrainOptions o;  // the bench's single-rank run
  const nlohmann::json& m = p["model"];
  o.model.n_layer = IntegerOr(m, "n_layer");
  o.model.n_head = IntegerOr(m, "n_head");
  o.model.d_model = IntegerOr(m, "d_model");
  o.model.seq_len = IntegerOr(m, "seq_len");
  o.model.vocab_size = IntegerOr(m, "vocab_size");
  if (!o.model.Validate().ok()) {
    return Bad(where, "its \"model\" is not a valid model shape");
  }
  const double tokens = NumberOr(p, "tokens_per_step");
  if (!(tokens > 0 && std::isfinite(tokens))) {
    return Bad(where, "has no \"tokens_per_step\"");
  }
  const double c = static_cast<double>(o.model.d_model);
  const double layers = static_cast<double>(o.model.n_layer);
  // Forward, input and weight gradients: three passes of 2 FLOPs per
  // matrix element and token, the head's three GEMMs included.
  const double gemm_flops = tokens * 3 * 2 *
                            (layers * BlockGemmElements(o) +
                             static_cast<double>(o.model.vocab_size) * c);
  // 2·T·C per token and block forward (causal), twice that backward.
  const double attention_flops =
      tokens * layers * 3 * 2 * static_cast<double>(o.model.seq_len) * c;
  cluster.gemm_efficiency =
      std::clamp(gemm_flops / (gemm_ms / 1e3) / cluster.peak_flops, 1e-3, 1.0);
  cluster.attention_efficiency = std::clamp(
      attention_flops / (attention_ms / 1e3) / cluster.peak_flops, 1e-3, 1.0);
  cluster.source = absl::StrCat(cluster.source, "; kernel rates from ", where);
  return absl::OkStatus();
}

}  // namespace trellis
