#include "parallel/data_parallel.h"

#include <algorithm>
#include <chrono>

namespace trellis {

GradientBuckets::GradientBuckets(const std::vector<Parameter*>& ready_order,
                                 int64_t bucket_bytes, Communicator& dp,
                                 GradSync sync,
                                 const std::vector<const Parameter*>& alone)
    : dp_(dp), sync_(sync) {
  auto is_alone = [&](const Parameter* p) {
    return std::find(alone.begin(), alone.end(), p) != alone.end();
  };
  // Group consecutive parameters of one gradient dtype and device into
  // buckets. Gradients may not exist yet (ParameterSet::Materialize without
  // grads): their dtype follows the value's.
  auto grad_dtype = [](const Parameter* p) {
    return GradDType(p->value.dtype());
  };
  std::vector<std::vector<Parameter*>> groups;
  int64_t bytes = 0;
  for (Parameter* p : ready_order) {
    TRELLIS_CHECK(bucket_of_.count(p) == 0) << "parameter listed twice";
    const int64_t grad_bytes = p->numel() * DTypeSize(grad_dtype(p));
    const bool fits = !groups.empty() && bytes + grad_bytes <= bucket_bytes;
    const bool same =
        !groups.empty() && grad_dtype(groups.back().front()) == grad_dtype(p) &&
        groups.back().front()->value.device() == p->value.device();
    const bool apart =
        is_alone(p) || (!groups.empty() && is_alone(groups.back().front()));
    if (!(fits && same) || apart) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(p);
    bytes += grad_bytes;
    bucket_of_[p] = static_cast<int>(groups.size()) - 1;
  }
  for (const auto& group : groups) {
    int64_t elements = 0;
    for (const Parameter* p : group) elements += p->numel();
    if (sync_ == GradSync::kReduceScatter) {
      elements = (elements + dp_.size() - 1) / dp_.size() * dp_.size();
    }
    Bucket bucket;
    bucket.flat = Tensor::Zeros({elements}, grad_dtype(group.front()),
                                group.front()->value.device());
    bucket.params = static_cast<int>(group.size());
    const size_t elem = DTypeSize(bucket.flat.dtype());
    int64_t offset = 0;
    for (Parameter* p : group) {
      Tensor view = Tensor::FromStorage(bucket.flat.storage(), offset * elem,
                                        p->value.shape(), bucket.flat.dtype());
      if (p->grad.defined()) view.CopyFrom(p->grad);
      p->grad = view;
      bucket.members.push_back(Member{p, offset});
      offset += p->numel();
    }
    const int64_t block =
        sync_ == GradSync::kReduceScatter ? elements / dp_.size() : elements;
    bucket.shard = sync_ == GradSync::kReduceScatter
                       ? bucket.flat.Narrow(dp_.rank() * block, block)
                       : bucket.flat;
    buckets_.push_back(std::move(bucket));
  }
}

void GradientBuckets::StartStep() {
  launched_early_ = 0;
  for (Bucket& b : buckets_) {
    TRELLIS_CHECK(b.request == nullptr) << "previous step not waited for";
    b.flat.Zero();
    b.ready = 0;
  }
}

void GradientBuckets::MarkReady(const Parameter* p) {
  auto it = bucket_of_.find(p);
  TRELLIS_CHECK(it != bucket_of_.end()) << p->name << " is in no bucket";
  Bucket& b = buckets_[it->second];
  TRELLIS_CHECK_LT(b.ready, b.params) << p->name << " marked ready twice";
  if (++b.ready == b.params) {
    Launch(b);
    ++launched_early_;
  }
}

Tensor GradientBuckets::Shard(int b) const { return buckets_[b].shard; }

int64_t GradientBuckets::elements() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_) n += b.flat.numel();
  return n;
}

void GradientBuckets::Launch(Bucket& b) {
  if (dp_.size() == 1) return;
  b.request = sync_ == GradSync::kReduceScatter
                  ? dp_.ReduceScatterAsync(b.flat, b.shard, ReduceOp::kAvg)
                  : dp_.AllReduceAsync(b.flat, ReduceOp::kAvg);
}

double GradientBuckets::Wait() {
  const auto start = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    if (b.ready < b.params) {
      b.ready = b.params;
      Launch(b);
    }
    if (b.request) {
      b.request->Wait();
      b.request.reset();
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace trellis
