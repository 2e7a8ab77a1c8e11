#include "framework/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "framework/status.h"

namespace trellis {

double LearningRate(const LrSchedule& schedule, int64_t step) {
  TRELLIS_CHECK_GE(step, 0);
  TRELLIS_CHECK_GE(schedule.warmup_steps, 0);
  TRELLIS_CHECK_GE(schedule.total_steps, 0);
  TRELLIS_CHECK(schedule.min_lr >= 0 && schedule.min_lr <= schedule.max_lr)
      << "min_lr " << schedule.min_lr << ", max_lr " << schedule.max_lr;
  if (step < schedule.warmup_steps) {
    return schedule.max_lr * static_cast<double>(step + 1) /
           static_cast<double>(schedule.warmup_steps);
  }
  if (step >= schedule.total_steps) return schedule.min_lr;
  // Here warmup_steps <= step < total_steps, so the span is positive.
  const double progress =
      static_cast<double>(step - schedule.warmup_steps) /
      static_cast<double>(schedule.total_steps - schedule.warmup_steps);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return schedule.min_lr + (schedule.max_lr - schedule.min_lr) * cosine;
}

}  // namespace trellis
