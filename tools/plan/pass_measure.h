// Measures what running weight gradients apart from input gradients costs
// on this machine: zero-bubble schedules (ZB-H1) split each chunk's
// backward into B (input gradients, keeping the gradients W needs) and a
// later W (weight gradients), where the other schedules run one fused
// backward. The split pass writes those gradients to the microbatch's
// state instead of a shared workspace, copies the incoming gradient, and W
// re-reads all of them, cold, apart from B; so B + W can cost more than the
// fused backward. Both are timed here in one process, alternating, on a
// chunk of the model's own blocks (no embedding or head) at the layout's
// micro batch, in this thread's CPU time, so the figures hold even while
// the machine is shared.
//
// CPU only (the chunk runs in float32 on this thread, tp = 1).
// Thread safety: runs on the calling thread; touches no shared state.
#ifndef TRELLIS_TOOLS_PLAN_PASS_MEASURE_H_
#define TRELLIS_TOOLS_PLAN_PASS_MEASURE_H_

#include <cstdint>

#include "tools/options/options.h"

namespace trellis {

// Median CPU seconds per microbatch of one chunk's passes.
struct PassTimes {
  double forward = 0;
  double fused_backward = 0;  // B with the weight gradients inside it
  double split_input = 0;     // B of a zero-bubble schedule
  double split_weight = 0;    // its W
  // (B + W) split over the fused backward: the cost of splitting.
  double SplitRatio() const {
    return (split_input + split_weight) / fused_backward;
  }
};

// Times `reps` microbatches (after one untimed) of each kind on a chunk of
// min(2, n_layer) of `o`'s blocks at o.micro_batch_size, with o.recompute.
// REQUIRES: o.model valid, reps ≥ 1.
PassTimes MeasurePassTimes(const TrainOptions& o, int reps);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_PASS_MEASURE_H_
