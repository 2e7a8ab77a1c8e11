#include "tools/trainer/health/step_guard.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "framework/status.h"

namespace trellis {

SpikeDetector::SpikeDetector(int window) : window_(window) {
  TRELLIS_CHECK(window >= 2) << "a spike window needs two values";
}

std::optional<double> SpikeDetector::ZScore(double value) const {
  if (static_cast<int>(values_.size()) < window_ || !std::isfinite(value)) {
    return std::nullopt;
  }
  double mean = 0;
  for (double v : values_) mean += v;
  mean /= static_cast<double>(values_.size());
  double variance = 0;
  for (double v : values_) variance += (v - mean) * (v - mean);
  variance /= static_cast<double>(values_.size());
  if (!(variance > 0)) return std::nullopt;
  return (value - mean) / std::sqrt(variance);
}

void SpikeDetector::Add(double value) {
  if (!std::isfinite(value)) return;
  values_.push_back(value);
  if (static_cast<int>(values_.size()) > window_) values_.pop_front();
}

absl::Status ParseInjectNan(const std::string& value, StepGuardConfig& config) {
  if (value.empty()) return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(value, ':');
  std::string step = parts[0];
  const bool onwards = !step.empty() && step.back() == '+';
  if (onwards) step.pop_back();
  int64_t at = 0;
  int rank = -1;
  if (parts.size() != 2 || !absl::SimpleAtoi(step, &at) || at < 1 ||
      !absl::SimpleAtoi(parts[1], &rank) || rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TRELLIS_TEST_INJECT_NAN='", value,
                     "' is not STEP:RANK or STEP+:RANK (e.g. 5:3); unset it "
                     "outside tests"));
  }
  config.inject_nan_step = at;
  config.inject_nan_onwards = onwards;
  config.inject_nan_rank = rank;
  return absl::OkStatus();
}

absl::Status StepGuardConfig::ReadTestFaults() {
  const char* value = std::getenv("TRELLIS_TEST_INJECT_NAN");
  return ParseInjectNan(value != nullptr ? value : "", *this);
}

const char* SkipReasonName(SkipReason reason) {
  switch (reason) {
    case SkipReason::kNone:
      return "none";
    case SkipReason::kSpike:
      return "loss or gradient norm spike";
    case SkipReason::kNonFinite:
      return "non-finite loss or gradient norm";
  }
  return "?";
}

StepGuard::StepGuard(StepGuardConfig config, int world_rank)
    : config_(config), world_rank_(world_rank) {}

bool StepGuard::InjectNanDue(int64_t step) {
  if (config_.inject_nan_step == 0 || world_rank_ != config_.inject_nan_rank) {
    return false;
  }
  const bool due =
      config_.inject_nan_onwards
          ? step >= config_.inject_nan_step
          : step == config_.inject_nan_step && injected_step_ != step;
  if (due) injected_step_ = step;
  return due;
}

SkipReason StepGuard::Assess(double loss, double grad_norm) const {
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    return SkipReason::kNonFinite;
  }
  if (config_.spike_zscore > 0) {
    const double z = config_.spike_zscore;
    const std::optional<double> loss_z = loss_spikes_.ZScore(loss);
    const std::optional<double> norm_z = norm_spikes_.ZScore(grad_norm);
    if ((loss_z && *loss_z > z) || (norm_z && *norm_z > z)) {
      return SkipReason::kSpike;
    }
  }
  return SkipReason::kNone;
}

void StepGuard::Record(SkipReason agreed, double loss, double grad_norm) {
  // Every rank adds the same values to its windows: none from a step that
  // any rank found non-finite.
  if (config_.spike_zscore > 0 && agreed != SkipReason::kNonFinite) {
    loss_spikes_.Add(loss);
    norm_spikes_.Add(grad_norm);
  }
  if (agreed == SkipReason::kNone) {
    consecutive_ = 0;
  } else {
    ++consecutive_;
    ++skipped_total_;
  }
}

SkipReason StepGuard::Judge(double loss, double grad_norm,
                            Communicator& world) {
  const SkipReason mine = Assess(loss, grad_norm);
  SkipReason agreed = mine;
  if (world.size() > 1) {
    Tensor code = Tensor::Empty({1}, DType::kF64);
    code.data<double>()[0] = static_cast<double>(mine);
    world.AllReduce(code, ReduceOp::kMax);
    agreed = static_cast<SkipReason>(static_cast<int>(code.data<double>()[0]));
  }
  Record(agreed, loss, grad_norm);
  return agreed;
}

bool StepGuard::GaveUp() const {
  return config_.max_skipped_steps > 0 &&
         consecutive_ >= config_.max_skipped_steps;
}

}  // namespace trellis
