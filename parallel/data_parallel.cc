#include "parallel/data_parallel.h"

#include <algorithm>
#include <chrono>

#include "framework/kernels/elementwise.h"

namespace trellis {

std::vector<std::vector<size_t>> GradientBuckets::Layout(
    const std::vector<LayoutItem>& items, int64_t bucket_bytes) {
  // Consecutive parameters of one kind (gradient dtype and device), up to
  // bucket_bytes; a parameter alone has a bucket of its own.
  std::vector<std::vector<size_t>> buckets;
  int64_t bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const LayoutItem& item = items[i];
    const int64_t grad_bytes = item.elements * item.element_bytes;
    const bool fits = !buckets.empty() && bytes + grad_bytes <= bucket_bytes;
    const bool same =
        !buckets.empty() && items[buckets.back().front()].kind == item.kind;
    const bool apart =
        item.alone || item.starts ||
        (!buckets.empty() && items[buckets.back().front()].alone);
    if (!(fits && same) || apart) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(i);
    bytes += grad_bytes;
  }
  return buckets;
}

size_t GradientBuckets::PlanBoundBytes(
    const std::vector<LayoutItem>& items, int64_t bucket_bytes, int dp,
    const std::vector<std::vector<size_t>>& groups,
    const std::vector<size_t>& early, size_t* largest_bucket) {
  const std::vector<std::vector<size_t>> layout = Layout(items, bucket_bytes);
  std::vector<size_t> bytes(layout.size());
  std::vector<int> bucket_of(items.size());
  size_t largest = 0;
  for (size_t b = 0; b < layout.size(); ++b) {
    int64_t elements = 0;
    for (size_t i : layout[b]) {
      elements += items[i].elements;
      bucket_of[i] = static_cast<int>(b);
    }
    elements = (elements + dp - 1) / dp * dp;
    bytes[b] = elements * items[layout[b].front()].element_bytes;
    largest = std::max(largest, bytes[b]);
  }
  std::vector<bool> held(layout.size(), false);
  size_t held_bytes = 0;
  for (size_t i : early) {
    if (!held[bucket_of[i]]) held_bytes += bytes[bucket_of[i]];
    held[bucket_of[i]] = true;
  }
  size_t widest = 0;
  for (const std::vector<size_t>& group : groups) {
    std::vector<int> touched;
    for (size_t i : group) {
      const int b = bucket_of[i];
      if (held[b] || std::count(touched.begin(), touched.end(), b) > 0) {
        continue;
      }
      touched.push_back(b);
    }
    // A bucket that reaches past the group (the neighbours' ends) is
    // counted whole.
    size_t sum = 0;
    for (int b : touched) sum += bytes[b];
    widest = std::max(widest, sum);
  }
  if (largest_bucket != nullptr) *largest_bucket = largest;
  return kMaxInFlight * largest + held_bytes + widest;
}

GradientBuckets::GradientBuckets(
    const std::vector<Parameter*>& ready_order, int64_t bucket_bytes,
    Communicator& dp, GradSync sync, const std::vector<const Parameter*>& alone,
    const std::vector<const Parameter*>& starts,
    const std::vector<ParameterDeclaration>& declared)
    : dp_(dp), sync_(sync) {
  // The value's dtype and device: its tensor's, or its declaration's.
  std::unordered_map<const Parameter*, std::pair<DType, Device>> declared_kind;
  for (const ParameterDeclaration& d : declared) {
    declared_kind.emplace(d.parameter, std::pair(d.dtype, d.device));
  }
  auto value_kind = [&](const Parameter* p) -> std::pair<DType, Device> {
    if (p->value.defined()) return {p->value.dtype(), p->value.device()};
    const auto it = declared_kind.find(p);
    TRELLIS_CHECK(it != declared_kind.end())
        << p->name << " has no value and no declaration";
    return it->second;
  };
  // Gradients may not exist yet (ParameterSet::Materialize without
  // grads): their dtype follows the value's.
  auto grad_dtype = [&](const Parameter* p) {
    return GradDType(value_kind(p).first);
  };
  std::vector<LayoutItem> items;
  std::vector<std::pair<DType, Device>> kinds;
  for (Parameter* p : ready_order) {
    TRELLIS_CHECK(bucket_of_.count(p) == 0) << "parameter listed twice";
    bucket_of_[p] = -1;
    const std::pair<DType, Device> kind{grad_dtype(p), value_kind(p).second};
    auto k = std::find(kinds.begin(), kinds.end(), kind);
    if (k == kinds.end()) k = kinds.insert(kinds.end(), kind);
    items.push_back(LayoutItem{
        p->numel(), DTypeSize(kind.first), static_cast<int>(k - kinds.begin()),
        std::find(alone.begin(), alone.end(), p) != alone.end(),
        std::find(starts.begin(), starts.end(), p) != starts.end()});
  }
  std::vector<std::vector<Parameter*>> groups;
  for (const std::vector<size_t>& bucket : Layout(items, bucket_bytes)) {
    groups.emplace_back();
    for (size_t i : bucket) {
      groups.back().push_back(ready_order[i]);
      bucket_of_[ready_order[i]] = static_cast<int>(groups.size()) - 1;
    }
  }
  for (const auto& group : groups) {
    buckets_.push_back(MakeBucket(group, grad_dtype(group.front()),
                                  value_kind(group.front()).second));
  }
}

GradientBuckets::Bucket GradientBuckets::MakeBucket(
    const std::vector<Parameter*>& group, DType dtype, Device device) {
  const bool sharded = sync_ != GradSync::kAllReduce;
  int64_t elements = 0;
  for (const Parameter* p : group) elements += p->numel();
  if (sharded) {
    elements = (elements + dp_.size() - 1) / dp_.size() * dp_.size();
  }
  Bucket bucket;
  bucket.elements = elements;
  bucket.dtype = dtype;
  bucket.device = device;
  bucket.params = static_cast<int>(group.size());
  int64_t offset = 0;
  for (Parameter* p : group) {
    bucket.members.push_back(Member{p, offset});
    offset += p->numel();
  }
  const int64_t block = sharded ? elements / dp_.size() : elements;
  if (sync_ == GradSync::kShardGradients) {
    // Only the block is kept; the grads exist while bound.
    bucket.shard = Tensor::Zeros({block}, bucket.dtype, bucket.device);
    bucket.written.assign(group.size(), false);
    for (Parameter* p : group) p->grad = Tensor();
  } else {
    bucket.flat = Tensor::Zeros({elements}, bucket.dtype, bucket.device);
    const size_t elem = DTypeSize(bucket.dtype);
    for (const Member& m : bucket.members) {
      Tensor view = Tensor::FromStorage(bucket.flat.storage(), m.offset * elem,
                                        m.param->value.shape(), bucket.dtype);
      if (m.param->grad.defined()) view.CopyFrom(m.param->grad);
      m.param->grad = view;
    }
    bucket.shard =
        sharded ? bucket.flat.Narrow(dp_.rank() * block, block) : bucket.flat;
  }
  return bucket;
}

int64_t GradientBuckets::block_start(int b) const {
  return sync_ == GradSync::kAllReduce
             ? 0
             : dp_.rank() * (buckets_[b].elements / dp_.size());
}

int GradientBuckets::BucketOf(const Parameter* p) const {
  auto it = bucket_of_.find(p);
  TRELLIS_CHECK(it != bucket_of_.end()) << p->name << " is in no bucket";
  return it->second;
}

std::vector<Parameter*> GradientBuckets::Held(
    const std::vector<Parameter*>& params) const {
  std::vector<Parameter*> out;
  for (Parameter* p : params) {
    if (Holds(p)) out.push_back(p);
  }
  return out;
}

std::vector<int> GradientBuckets::BucketsOf(
    const std::vector<Parameter*>& params) const {
  std::vector<int> out;
  for (const Parameter* p : params) {
    const int b = BucketOf(p);
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
  }
  return out;
}

std::vector<Parameter*> GradientBuckets::BucketParameters(int b) const {
  std::vector<Parameter*> out;
  for (const Member& m : buckets_[b].members) out.push_back(m.param);
  return out;
}

std::vector<std::vector<int>> GradientBuckets::UnitBucketGroups(
    int num_buckets, const std::vector<std::vector<int>>& unit_buckets) {
  std::vector<bool> taken(num_buckets, false);
  std::vector<std::vector<int>> groups;
  auto add = [&](const std::vector<int>& buckets) {
    std::vector<int> group;
    for (int b : buckets) {
      if (taken[b]) continue;
      taken[b] = true;
      group.push_back(b);
    }
    if (!group.empty()) groups.push_back(std::move(group));
  };
  for (const std::vector<int>& unit : unit_buckets) add(unit);
  for (int b = 0; b < num_buckets; ++b) add({b});
  return groups;
}

Tensor GradientBuckets::GatherBuffer(int b) const {
  const Bucket& bucket = buckets_[b];
  if (sync_ != GradSync::kShardGradients) return bucket.flat;
  return Tensor::Empty({bucket.elements}, bucket.dtype, bucket.device);
}

void GradientBuckets::Bind(int b) {
  Bucket& bucket = buckets_[b];
  const bool launched =
      std::find(in_flight_.begin(), in_flight_.end(), b) != in_flight_.end();
  if (launched) Finish(b);
  if (bucket.flat.defined()) return;
  bucket.flat = Tensor::Zeros({bucket.elements}, bucket.dtype, bucket.device);
  const size_t elem = DTypeSize(bucket.dtype);
  bound_bytes_ += bucket.elements * elem;
  peak_bound_bytes_ = std::max(peak_bound_bytes_, bound_bytes_);
  for (const Member& m : bucket.members) {
    // The value may be released (ZeRO-3): the shape comes from the spec.
    m.param->grad =
        Tensor::FromStorage(bucket.flat.storage(), m.offset * elem,
                            m.param->spec.LocalShape(), bucket.dtype);
  }
  bucket.written.assign(bucket.members.size(), false);
  bucket.ready = 0;
}

void GradientBuckets::Finish(int b) {
  Bucket& bucket = buckets_[b];
  if (bucket.request != nullptr) {
    bucket.request->Wait();
    bucket.request.reset();
  }
  in_flight_.erase(std::remove(in_flight_.begin(), in_flight_.end(), b),
                   in_flight_.end());
  if (!bucket.flat.defined()) return;
  const int64_t block = bucket.shard.numel();
  Axpy(1.0, bucket.flat.Narrow(block_start(b), block), bucket.shard);
  bucket.flat = Tensor();
  bound_bytes_ -= bucket.elements * DTypeSize(bucket.dtype);
  for (const Member& m : bucket.members) m.param->grad = Tensor();
}

void GradientBuckets::BeforeWrite(const std::vector<Parameter*>& group) {
  if (sync_ != GradSync::kShardGradients) return;
  for (const Parameter* p : group) Bind(BucketOf(p));
}

void GradientBuckets::AfterWrite(const std::vector<Parameter*>& group) {
  if (sync_ != GradSync::kShardGradients) return;
  for (const Parameter* p : group) {
    const int b = BucketOf(p);
    Bucket& bucket = buckets_[b];
    TRELLIS_CHECK(bucket.flat.defined() && bucket.request == nullptr)
        << p->name << " written without BeforeWrite";
    size_t slot = 0;
    while (bucket.members[slot].param != p) ++slot;
    if (bucket.written[slot]) continue;
    bucket.written[slot] = true;
    if (++bucket.ready < bucket.params) continue;
    // Every parameter's share is in: reduce-scatter it now; finish the
    // oldest beyond the limit so that few buffers are held.
    Launch(bucket);
    in_flight_.push_back(b);
    while (static_cast<int>(in_flight_.size()) > kMaxInFlight) {
      Finish(in_flight_.front());
    }
  }
}

void GradientBuckets::StartStep() {
  launched_early_ = 0;
  for (Bucket& b : buckets_) {
    TRELLIS_CHECK(b.request == nullptr) << "previous step not waited for";
    if (sync_ == GradSync::kShardGradients) {
      TRELLIS_CHECK(!b.flat.defined()) << "a bucket is still bound";
      b.shard.Zero();
    } else {
      b.flat.Zero();
    }
    b.ready = 0;
  }
}

void GradientBuckets::MarkReady(const Parameter* p) {
  if (sync_ == GradSync::kShardGradients) return;
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
  if (sync_ == GradSync::kShardGradients) {
    // In place: this rank's block of the buffer gets the average.
    const int64_t block = b.elements / dp_.size();
    Tensor mine = b.flat.Narrow(dp_.rank() * block, block);
    b.request = dp_.ReduceScatterAsync(b.flat, mine, ReduceOp::kAvg);
    return;
  }
  b.request = sync_ == GradSync::kReduceScatter
                  ? dp_.ReduceScatterAsync(b.flat, b.shard, ReduceOp::kAvg)
                  : dp_.AllReduceAsync(b.flat, ReduceOp::kAvg);
}

double GradientBuckets::Wait() {
  const auto start = std::chrono::steady_clock::now();
  if (sync_ == GradSync::kShardGradients) {
    // Buckets still bound were written but not completed (none in the
    // trainer): reduce them too.
    for (int b = 0; b < num_buckets(); ++b) {
      if (buckets_[b].flat.defined() && buckets_[b].request == nullptr) {
        Launch(buckets_[b]);
      }
      Finish(b);
    }
    in_flight_.clear();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  }
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
