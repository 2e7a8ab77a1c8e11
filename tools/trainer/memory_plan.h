// MemoryPlan: what a rank's training run holds on its device, by category,
// known before the first step so that a run that cannot fit fails at start
// with the size it would need (see StageModel::PlanMemory).
#ifndef TRELLIS_TOOLS_TRAINER_MEMORY_PLAN_H_
#define TRELLIS_TOOLS_TRAINER_MEMORY_PLAN_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "transformer/decoder_block.h"

namespace trellis {

struct MemoryPlan {
  size_t weights = 0;      // parameter values and their float32 masters
  size_t gradients = 0;    // parameter gradients (the dp buckets)
  size_t optimizer = 0;    // AdamW moments
  size_t activations = 0;  // microbatch states × the schedule's peak
  size_t workspace = 0;    // buffers shared by a chunk's microbatches
  size_t pipeline = 0;     // activations and gradients between stages
  // Checkpoint I/O under ZeRO: the largest I/O group's whole moments and
  // its gather buffer, held between steps, where the activations were
  // (PlanZeroMemory); 0 when the moments are whole anyway.
  size_t checkpoint = 0;

  size_t total() const {
    return weights + gradients + optimizer + std::max(activations, checkpoint) +
           workspace + pipeline;
  }
  // "weights 474.2 MiB, gradients ...; total 9.31 GiB".
  std::string Format() const;
};

// `plan` (a replicated-optimizer plan) under ZeRO level `zero` over a dp
// group of `dp`: level 1 keeps 1/dp of the AdamW moments (rounded up; the
// buckets' padding, under dp elements each, is not counted); weights and
// gradients stay whole: the buckets carry the reduce-scatter and then the
// all-gather of the updated weights. Level 2 also keeps 1/dp of the
// gradients (the owned blocks) plus `buckets_in_flight` bytes of bucket
// buffers bound at once (GradientBuckets::PlanBoundBytes), never more than
// the whole gradients. Levels 1 and 2 also count `staging` bytes of
// reduce-scatter scratch (MPI reduces an in-place reduce-scatter into a
// scratch block and copies it out: at level 1 every bucket's at once, at
// level 2 those of the buckets in flight). Level 3 also keeps 1/dp of the
// weights (the owned blocks of values and masters) plus
// `gathered_in_flight` bytes of gathered weights (two units' whole
// values), never more than the whole weights. REQUIRES: zero is 0 to 3,
// dp ≥ 1.
MemoryPlan ShardOverDp(MemoryPlan plan, int64_t zero, int64_t dp,
                       size_t buckets_in_flight = 0, size_t staging = 0,
                       size_t gathered_in_flight = 0);

// The bytes of the arena a run reserves for `plan` when `available` bytes
// are free: the plan plus headroom (1/32 of it, at least 8 MiB) for block
// alignment and short-lived buffers (communication staging, batches),
// never more than `available`.
size_t ArenaCapacity(const MemoryPlan& plan, size_t available);

// `bytes` in KiB, MiB or GiB, whichever reads best.
std::string Readable(size_t bytes);

// OK when `plan` fits in `available` bytes; else ResourceExhausted naming
// the sizes, the device (`where`) and the flags that shrink the plan.
absl::Status CheckMemoryPlan(const MemoryPlan& plan, size_t available,
                             const std::string& where, int64_t micro_batch_size,
                             Recompute recompute);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_MEMORY_PLAN_H_
