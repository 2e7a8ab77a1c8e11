#include "transformer/expert_bias.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "framework/kernels/elementwise.h"
#include "framework/status.h"

namespace trellis {

bool ExpertBias::empty() const {
  for (const std::vector<double>& row : rows_) {
    if (!row.empty()) return false;
  }
  return true;
}

std::span<const double> ExpertBias::Row(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(rows_.size())) return {};
  return rows_[layer];
}

void ExpertBias::Update(const std::vector<std::vector<double>>& loads,
                        double rate) {
  if (rows_.size() < loads.size()) rows_.resize(loads.size());
  for (size_t l = 0; l < loads.size(); ++l) {
    const std::vector<double>& load = loads[l];
    if (load.empty()) continue;
    std::vector<double>& row = rows_[l];
    if (row.empty()) row.assign(load.size(), 0.0);
    TRELLIS_CHECK_EQ(row.size(), load.size()) << "layer " << l;
    double total = 0;
    for (const double v : load) total += v;
    const double mean = total / static_cast<double>(load.size());
    for (size_t e = 0; e < load.size(); ++e) {
      // sign(mean - load): underloaded experts gain, overloaded lose.
      if (load[e] < mean) row[e] += rate;
      if (load[e] > mean) row[e] -= rate;
    }
  }
}

absl::Status ExpertBias::Check(int64_t n_layer, int64_t experts) const {
  if (empty()) return absl::OkStatus();
  if (static_cast<int64_t>(rows_.size()) != n_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat("the expert bias has ", rows_.size(),
                     " layers' rows but the model has ", n_layer, " layers"));
  }
  for (size_t l = 0; l < rows_.size(); ++l) {
    const std::vector<double>& row = rows_[l];
    if (!row.empty() && static_cast<int64_t>(row.size()) != experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("the expert bias of layer ", l, " has ", row.size(),
                       " values but the model has ", experts, " experts"));
    }
    for (const double v : row) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the expert bias of layer ", l, " holds ", v, ", not a number"));
      }
    }
  }
  return absl::OkStatus();
}

void CopyExpertBiasRow(std::span<const double> row, Tensor& bias) {
  if (row.empty()) {
    bias.Zero();
    return;
  }
  TRELLIS_CHECK_EQ(static_cast<int64_t>(row.size()), bias.numel());
  Tensor host = Tensor::Empty({bias.numel()}, DType::kF64);
  std::copy(row.begin(), row.end(), host.data<double>());
  Tensor rounded = Tensor::Empty({bias.numel()}, bias.dtype());
  Convert(host, rounded);
  bias.CopyFrom(rounded);
}

}  // namespace trellis
