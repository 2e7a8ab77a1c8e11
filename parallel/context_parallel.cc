#include "parallel/context_parallel.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "framework/status.h"
#include "parallel/all_to_all_attention.h"
#include "parallel/ring_attention.h"

namespace trellis {

absl::Status ContextSplit::Check(int64_t window, int cp) {
  if (cp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cp=", cp, " must be at least 1"));
  }
  if (window % (2 * cp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--seq_len=", window, " is not a multiple of 2·cp = ", 2 * cp,
        " (context parallelism cuts each window into 2·cp equal chunks); "
        "choose a --seq_len divisible by ",
        2 * cp, " or another --cp"));
  }
  return absl::OkStatus();
}

ContextSplit::ContextSplit(int64_t window, int size, int rank)
    : window_(window), size_(size), rank_(rank) {
  TRELLIS_CHECK(Check(window, size).ok() && rank >= 0 && rank < size)
      << "context split of " << window << " over " << size << " at " << rank;
  mine_ = Positions(rank);
}

std::vector<int32_t> ContextSplit::Positions(int r) const {
  const int64_t chunk = window_ / (2 * size_);
  std::vector<int32_t> pos;
  pos.reserve(2 * chunk);
  for (int64_t c : {int64_t{r}, int64_t{2 * size_ - 1 - r}}) {
    for (int64_t i = 0; i < chunk; ++i) {
      pos.push_back(static_cast<int32_t>(c * chunk + i));
    }
  }
  return pos;
}

Tensor ContextSplit::Take(const Tensor& rows) const {
  if (!on() || !rows.defined()) return rows;
  TRELLIS_CHECK(rows.device().is_cpu() && rows.ndim() == 2 &&
                rows.dim(1) == window_ && DTypeSize(rows.dtype()) == 4)
      << "ContextSplit::Take: " << ShapeString(rows.shape()) << " "
      << DTypeName(rows.dtype()) << ", expected (B, " << window_
      << ") of 4-byte elements";
  const int64_t b = rows.dim(0), local = Local();
  Tensor out = Tensor::Empty({b, local}, rows.dtype());
  const auto* src = static_cast<const uint32_t*>(rows.raw());
  auto* dst = static_cast<uint32_t*>(out.raw());
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < local; ++j) {
      dst[i * local + j] = src[i * window_ + mine_[j]];
    }
  }
  return out;
}

absl::StatusOr<ContextComm> ParseContextComm(const std::string& name) {
  if (name == "ring") return ContextComm::kRing;
  if (name == "a2a") return ContextComm::kAllToAll;
  return absl::InvalidArgumentError(
      absl::StrCat("--cp_comm=", name, " is not a way to attend over a split ",
                   "window: use ring or a2a"));
}

const char* ContextCommName(ContextComm comm) {
  return comm == ContextComm::kRing ? "ring" : "a2a";
}

ContextAttention::ContextAttention(Communicator& cp, const ContextSplit& split)
    : cp_(cp), split_(split) {
  TRELLIS_CHECK(cp.size() == split.size() && cp.rank() == split.rank())
      << "the cp group (" << cp.rank() << " of " << cp.size()
      << ") is not the split's (" << split.rank() << " of " << split.size()
      << ")";
}

std::unique_ptr<ContextAttention> NewContextAttention(
    ContextComm comm, Communicator& cp, const ContextSplit& split) {
  if (comm == ContextComm::kRing) {
    return std::make_unique<RingAttention>(cp, split);
  }
  return std::make_unique<AllToAllAttention>(cp, split);
}

}  // namespace trellis
