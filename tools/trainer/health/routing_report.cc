#include "tools/trainer/health/routing_report.h"

#include <algorithm>
#include <cmath>

#include "framework/status.h"

namespace trellis {

void RoutingReport::Report(const std::vector<ModelChunk::LayerRouting>& mine,
                           Communicator& pp, Communicator& dp, StepMetrics& m,
                           std::vector<std::vector<double>>* loads) const {
  if (!on()) return;
  // Per layer: [replicas holding it, aux, z, its experts, each expert's
  // slots]; summed over the replicas, the experts count divides back.
  const int64_t width = 4 + experts_;
  Tensor sums = Tensor::Zeros({n_layer_ * width}, DType::kF64);
  double* v = sums.data<double>();
  for (const ModelChunk::LayerRouting& r : mine) {
    TRELLIS_CHECK(r.layer >= 0 && r.layer < n_layer_ &&
                  static_cast<int64_t>(r.expert_slots.size()) <= experts_);
    double* row = v + r.layer * width;
    row[0] = 1;
    row[1] = r.aux_loss;
    row[2] = r.z_loss;
    row[3] = static_cast<double>(r.expert_slots.size());
    std::copy(r.expert_slots.begin(), r.expert_slots.end(), row + 4);
  }
  if (pp.size() > 1) pp.AllReduce(sums, ReduceOp::kSum);
  if (dp.size() > 1) dp.AllReduce(sums, ReduceOp::kSum);
  const double microbatches = static_cast<double>(microbatches_ * dp.size());
  int64_t layers = 0;
  m.moe_aux_loss = m.moe_z_loss = 0;
  m.expert_load.clear();
  if (loads != nullptr) loads->assign(n_layer_, {});
  for (int64_t l = 0; l < n_layer_; ++l) {
    const double* row = v + l * width;
    if (row[0] == 0) continue;
    ++layers;
    if (loads != nullptr) {
      const int64_t experts = std::llround(row[3] / row[0]);
      (*loads)[l].assign(row + 4, row + 4 + experts);
    }
    m.moe_aux_loss += row[1] / microbatches;
    m.moe_z_loss += row[2] / microbatches;
    const double experts = row[3] / row[0];
    double total = 0, busiest = 0;
    for (int64_t e = 0; e < experts_; ++e) {
      total += row[4 + e];
      busiest = std::max(busiest, row[4 + e]);
    }
    const double mean = total / experts;
    m.expert_load.emplace_back(l, mean > 0 ? busiest / mean : 0.0);
  }
  if (layers > 0) {
    m.moe_aux_loss /= static_cast<double>(layers);
    m.moe_z_loss /= static_cast<double>(layers);
  }
}

}  // namespace trellis
