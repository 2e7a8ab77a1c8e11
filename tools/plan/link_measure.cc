#include "tools/plan/link_measure.h"

#include <algorithm>
#include <chrono>

#include "framework/status.h"

namespace trellis {
namespace {

// Mean seconds of one all-reduce of `elements` floats over `reps` calls.
double AllReduceSeconds(Communicator& group, int64_t elements, int reps) {
  Tensor buffer = Tensor::Zeros({elements}, DType::kF32);
  group.AllReduce(buffer, ReduceOp::kSum);  // warm-up
  group.Barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) group.AllReduce(buffer, ReduceOp::kSum);
  const double mine =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count() /
      reps;
  Tensor mean = Tensor::Zeros({1}, DType::kF64);
  mean.data<double>()[0] = mine;
  group.AllReduce(mean, ReduceOp::kAvg);
  return mean.data<double>()[0];
}

}  // namespace

LinkSpec MeasureLink(Communicator& group) {
  TRELLIS_CHECK_GE(group.size(), 2);
  const int n = group.size();
  const double hops = 2.0 * (n - 1);
  LinkSpec link;
  link.latency = AllReduceSeconds(group, 2, 200) / hops;
  constexpr int64_t kElements = int64_t{1} << 20;  // 4 MiB of floats
  const double large = AllReduceSeconds(group, kElements, 5);
  const double wire =
      static_cast<double>(WireBytes(CommOp::kAllReduce, kElements * 4, n));
  link.bandwidth = wire / std::max(large - hops * link.latency, 1e-9);
  return link;
}

}  // namespace trellis
