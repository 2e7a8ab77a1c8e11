// Learning-rate schedule: linear warmup, then cosine decay to a floor.
//
// For a 0-based optimizer step s:
//   s <  warmup_steps:                 lr = max_lr · (s + 1) / warmup_steps
//   warmup_steps <= s < total_steps:   lr = min_lr + (max_lr - min_lr) ·
//                                           0.5 · (1 + cos(π · p)),
//                                      p = (s - warmup_steps) /
//                                          (total_steps - warmup_steps)
//   s >= total_steps:                  lr = min_lr
// So warmup's last step reaches max_lr, decay starts from max_lr at
// s = warmup_steps, falls monotonically, and reaches min_lr at total_steps.
// With warmup_steps == 0 there is no warmup; with total_steps <=
// warmup_steps there is no decay: min_lr follows the warmup at once.
//
// REQUIRES: warmup_steps >= 0, total_steps >= 0, step >= 0,
// 0 <= min_lr <= max_lr. A pure function: safe from any thread.
#ifndef TRELLIS_FRAMEWORK_LR_SCHEDULE_H_
#define TRELLIS_FRAMEWORK_LR_SCHEDULE_H_

#include <cstdint>

namespace trellis {

struct LrSchedule {
  double max_lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
};

// The learning rate for 0-based optimizer step `step`.
double LearningRate(const LrSchedule& schedule, int64_t step);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_LR_SCHEDULE_H_
