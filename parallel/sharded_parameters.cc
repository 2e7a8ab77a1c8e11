#include "parallel/sharded_parameters.h"

#include <algorithm>
#include <utility>

#include "framework/kernels/elementwise.h"
#include "framework/status.h"

namespace trellis {
namespace {

Tensor Flat(const Tensor& t) { return t.View({t.numel()}); }

// `buffer` (a bucket's elements) viewed as `p`'s local shape at `offset`.
Tensor ViewOf(const Tensor& buffer, const Parameter& p, int64_t offset) {
  return Tensor::FromStorage(buffer.storage(),
                             offset * DTypeSize(buffer.dtype()),
                             p.spec.LocalShape(), buffer.dtype());
}

}  // namespace

ShardedParameters::ShardedParameters(GradientBuckets& buckets)
    : buckets_(buckets) {
  TRELLIS_CHECK(buckets.sync() == GradSync::kShardGradients)
      << "sharded parameters need buckets that keep only their blocks";
  slots_.resize(buckets.num_buckets());
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    Slot& slot = slots_[b];
    const Parameter& first = *buckets.members(b).front().param;
    TRELLIS_CHECK(first.value.defined())
        << first.name << " must be materialized before it is sharded";
    dtype_ = first.value.dtype();
    const Device device = first.value.device();
    const int64_t block = buckets.Shard(b).numel();
    const int64_t start = buckets.block_start(b);
    slot.owned = Tensor::Zeros({block}, dtype_, device);
    if (first.master.defined()) {
      slot.owned_master = Tensor::Zeros({block}, DType::kF32, device);
    }
    for (const GradientBuckets::Member& m : buckets.members(b)) {
      const Parameter& p = *m.param;
      TRELLIS_CHECK(p.value.dtype() == dtype_ &&
                    p.master.defined() == slot.owned_master.defined())
          << p.name << ": a bucket's weights must share one dtype";
      const int64_t lo = std::max(m.offset, start);
      const int64_t hi = std::min(m.offset + p.numel(), start + block);
      if (lo >= hi) continue;
      slot.owned.Narrow(lo - start, hi - lo)
          .CopyFrom(Flat(p.value).Narrow(lo - m.offset, hi - lo));
      if (p.master.defined()) {
        slot.owned_master.Narrow(lo - start, hi - lo)
            .CopyFrom(Flat(p.master).Narrow(lo - m.offset, hi - lo));
      }
    }
  }
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    for (const GradientBuckets::Member& m : buckets.members(b)) {
      m.param->value = Tensor();
      m.param->master = Tensor();
    }
  }
}

ShardedParameters::~ShardedParameters() {
  for (Slot& slot : slots_) {
    if (slot.request != nullptr) slot.request->Wait();
  }
}

std::vector<int> ShardedParameters::BucketsOf(
    const std::vector<Parameter*>& unit) const {
  std::vector<int> out;
  for (const Parameter* p : unit) {
    const int b = buckets_.BucketOf(p);
    if (std::find(out.begin(), out.end(), b) == out.end()) out.push_back(b);
  }
  return out;
}

Tensor ShardedParameters::Block(const Tensor& buffer, int b) const {
  return buffer.Narrow(buckets_.block_start(b), slots_[b].owned.numel());
}

void ShardedParameters::Launch(int b) {
  Slot& slot = slots_[b];
  if (slot.full.defined()) return;
  slot.full =
      Tensor::Empty({buckets_.bucket_elements(b)}, dtype_, slot.owned.device());
  gathered_bytes_ += slot.full.numel() * DTypeSize(dtype_);
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  Tensor block = Block(slot.full, b);
  block.CopyFrom(slot.owned);
  Communicator& dp = buckets_.dp();
  if (dp.size() == 1) return;
  slot.request = dp.AllGatherAsync(block, slot.full);
  ++gathers_;
}

void ShardedParameters::Bind(int b) {
  Slot& slot = slots_[b];
  if (slot.request != nullptr) {
    slot.request->Wait();
    slot.request.reset();
  }
  if (slot.bound) return;
  for (const GradientBuckets::Member& m : buckets_.members(b)) {
    m.param->value = ViewOf(slot.full, *m.param, m.offset);
  }
  slot.bound = true;
}

void ShardedParameters::Drop(int b) {
  Slot& slot = slots_[b];
  if (slot.request != nullptr) {
    slot.request->Wait();
    slot.request.reset();
  }
  for (const GradientBuckets::Member& m : buckets_.members(b)) {
    m.param->value = Tensor();
  }
  if (slot.full.defined()) {
    gathered_bytes_ -= slot.full.numel() * DTypeSize(dtype_);
  }
  slot.full = Tensor();
  slot.bound = false;
  slot.wanted = false;
}

void ShardedParameters::Acquire(const std::vector<Parameter*>& unit,
                                const std::vector<Parameter*>& next) {
  const std::vector<int> mine = BucketsOf(unit);
  for (int b : mine) {
    ++slots_[b].refs;
    slots_[b].wanted = false;
    Launch(b);
  }
  for (int b : mine) Bind(b);
  // The next unit's gathers run while this one computes.
  for (int b : BucketsOf(next)) {
    Launch(b);
    slots_[b].wanted = true;
  }
}

void ShardedParameters::Release(const std::vector<Parameter*>& unit) {
  for (int b : BucketsOf(unit)) {
    Slot& slot = slots_[b];
    TRELLIS_CHECK_GT(slot.refs, 0) << "a unit released without Acquire";
    if (--slot.refs == 0 && !slot.wanted) Drop(b);
  }
}

Tensor ShardedParameters::OwnedWeights(int b) const {
  const Slot& slot = slots_[b];
  return slot.owned_master.defined() ? slot.owned_master : slot.owned;
}

void ShardedParameters::RefreshOwned(int b) {
  Slot& slot = slots_[b];
  if (slot.owned_master.defined()) Convert(slot.owned_master, slot.owned);
}

void ShardedParameters::GatherAll() {
  Communicator& dp = buckets_.dp();
  for (int b = 0; b < static_cast<int>(slots_.size()); ++b) {
    Slot& slot = slots_[b];
    TRELLIS_CHECK(slot.refs == 0 && !slot.full.defined())
        << "GatherAll while a unit is gathered";
    Launch(b);
    Bind(b);
    if (!slot.owned_master.defined()) continue;
    slot.full_master = Tensor::Empty({buckets_.bucket_elements(b)}, DType::kF32,
                                     slot.owned.device());
    Tensor block = Block(slot.full_master, b);
    block.CopyFrom(slot.owned_master);
    if (dp.size() > 1) {
      dp.AllGather(block, slot.full_master);
      ++gathers_;
    }
    for (const GradientBuckets::Member& m : buckets_.members(b)) {
      m.param->master = ViewOf(slot.full_master, *m.param, m.offset);
    }
  }
}

void ShardedParameters::ShardAll(bool keep) {
  for (int b = 0; b < static_cast<int>(slots_.size()); ++b) {
    Slot& slot = slots_[b];
    TRELLIS_CHECK(slot.bound) << "ShardAll without GatherAll";
    if (keep) {
      slot.owned.CopyFrom(Block(slot.full, b));
      if (slot.owned_master.defined()) {
        slot.owned_master.CopyFrom(Block(slot.full_master, b));
      }
    }
    for (const GradientBuckets::Member& m : buckets_.members(b)) {
      m.param->master = Tensor();
    }
    slot.full_master = Tensor();
    Drop(b);
  }
}

int64_t ShardedParameters::owned_elements() const {
  int64_t n = 0;
  for (const Slot& slot : slots_) n += slot.owned.numel();
  return n;
}

}  // namespace trellis
