#include "tools/trainer/memory_plan.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "framework/status.h"

namespace trellis {

// "1.25 GiB", "37.5 MiB", "12.0 KiB".
std::string Readable(size_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= (1 << 30)) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  return absl::StrFormat("%.1f KiB", b / (1 << 10));
}

MemoryPlan ShardOverDp(MemoryPlan plan, int64_t zero, int64_t dp,
                       size_t buckets_in_flight, size_t staging,
                       size_t gathered_in_flight) {
  TRELLIS_CHECK(zero >= 0 && zero <= 3) << "ZeRO level " << zero;
  TRELLIS_CHECK_GE(dp, 1);
  const size_t ranks = static_cast<size_t>(dp);
  auto share = [ranks](size_t bytes) { return (bytes + ranks - 1) / ranks; };
  if (zero >= 1) plan.optimizer = share(plan.optimizer);
  if (zero >= 2) {
    plan.gradients =
        share(plan.gradients) + std::min(plan.gradients, buckets_in_flight);
  }
  if (zero >= 1) plan.gradients += staging;
  if (zero >= 3) {
    plan.weights =
        share(plan.weights) + std::min(plan.weights, gathered_in_flight);
  }
  return plan;
}

size_t ArenaCapacity(const MemoryPlan& plan, size_t available) {
  const size_t headroom = std::max<size_t>(plan.total() / 32, 8u << 20);
  return std::min(plan.total() + headroom, std::max(available, plan.total()));
}

std::string MemoryPlan::Format() const {
  const std::string io =
      checkpoint == 0
          ? ""
          : absl::StrFormat(
                ", checkpoint I/O %s (between steps, in place of activations)",
                Readable(checkpoint));
  return absl::StrFormat(
      "weights %s, gradients %s, optimizer %s, activations %s, workspace %s, "
      "pipeline buffers %s%s; total %s",
      Readable(weights), Readable(gradients), Readable(optimizer),
      Readable(activations), Readable(workspace), Readable(pipeline), io,
      Readable(total()));
}

absl::Status CheckMemoryPlan(const MemoryPlan& plan, size_t available,
                             const std::string& where, int64_t micro_batch_size,
                             Recompute recompute) {
  if (plan.total() <= available) return absl::OkStatus();
  const std::string remedy =
      recompute == Recompute::kFull
          ? absl::StrFormat(
                "lower --micro_batch_size=%d (activations grow "
                "with it) or split the model over more ranks "
                "with --tp/--pp",
                micro_batch_size)
          : absl::StrFormat(
                "lower --micro_batch_size=%d (activations grow with it), use "
                "--recompute=%s, or split the model over more ranks with "
                "--tp/--pp",
                micro_batch_size,
                recompute == Recompute::kNone ? "selective or full" : "full");
  return absl::ResourceExhaustedError(
      absl::StrFormat("the run needs %s on %s (%s) but %s is available; %s",
                      Readable(plan.total()), where, plan.Format(),
                      Readable(available), remedy));
}

}  // namespace trellis
