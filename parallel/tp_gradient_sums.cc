#include "parallel/tp_gradient_sums.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "framework/status.h"

namespace trellis {

std::vector<GradRange> OwnedGradientRanges(const GradientBuckets& buckets) {
  std::vector<GradRange> ranges;
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    const Tensor block = buckets.Shard(b);
    const int64_t start = buckets.block_start(b);
    const int64_t end = start + block.numel();
    for (const GradientBuckets::Member& m : buckets.members(b)) {
      const int64_t lo = std::max(m.offset, start);
      const int64_t hi = std::min(m.offset + m.param->numel(), end);
      if (lo >= hi) continue;
      ranges.push_back({m.param, lo - m.offset, hi - m.offset,
                        block.Narrow(lo - start, hi - lo)});
    }
  }
  return ranges;
}

std::vector<GradRange> WholeGradientRanges(
    const std::vector<Parameter*>& params) {
  std::vector<GradRange> ranges;
  for (Parameter* p : params) {
    ranges.push_back({p, 0, p->numel(), p->grad.View({p->numel()})});
  }
  return ranges;
}

void SumPartialGradients(Communicator& tp,
                         const std::vector<Parameter*>& partial,
                         const std::vector<GradRange>& ranges) {
  if (partial.empty() || tp.size() == 1) return;
  std::vector<std::unique_ptr<Request>> requests;
  for (const GradRange& range : ranges) {
    if (std::find(partial.begin(), partial.end(), range.param) ==
        partial.end()) {
      continue;
    }
    TRELLIS_CHECK(range.grad.defined()) << range.param->name << ": no tensor";
    Tensor grad = range.grad;
    requests.push_back(tp.AllReduceAsync(grad, ReduceOp::kSum));
  }
  for (auto& request : requests) request->Wait();
}

void CheckRangesMatchOverTp(Communicator& tp,
                            const std::vector<Parameter*>& params,
                            const std::vector<GradRange>& ranges) {
  if (tp.size() == 1) return;
  std::unordered_map<const Parameter*, int64_t> place;
  for (size_t i = 0; i < params.size(); ++i) place[params[i]] = i;
  // FNV-1a over (place, begin, end) of each range, kept to 62 bits so
  // that its negation fits: the maxima of [h, -h] are h and -h on every
  // rank exactly when all ranks have the same h.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const GradRange& range : ranges) {
    auto it = place.find(range.param);
    TRELLIS_CHECK(it != place.end()) << range.param->name << " is not listed";
    mix(it->second);
    mix(range.begin);
    mix(range.end);
  }
  const int64_t mine = static_cast<int64_t>(h >> 2);
  Tensor extremes = Tensor::Empty({2}, DType::kI64);
  extremes.data<int64_t>()[0] = mine;
  extremes.data<int64_t>()[1] = -mine;
  tp.AllReduce(extremes, ReduceOp::kMax);
  TRELLIS_CHECK(extremes.data<int64_t>()[0] == mine &&
                extremes.data<int64_t>()[1] == -mine)
      << "the tensor-parallel ranks own different gradient elements (their "
         "gradient buckets are laid out differently), so sums over tp of "
         "the owned blocks would mix elements";
}

}  // namespace trellis
