#include "parallel/sharded_parameters.h"

#include <algorithm>
#include <unordered_map>
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
  const Parameter& any = *buckets.members(0).front().param;
  TRELLIS_CHECK(any.value.defined())
      << any.name << " must be materialized before it is sharded";
  MakeBlocks(any.value.dtype(), any.value.device());
  // The caller made every weight whole: count them as held until released.
  size_t whole = 0;
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    for (const GradientBuckets::Member& m : buckets.members(b)) {
      const Parameter& p = *m.param;
      TRELLIS_CHECK(p.value.defined() && p.value.dtype() == dtype_ &&
                    p.master.defined() == slots_[b].owned_master.defined())
          << p.name << ": a bucket's weights must share one dtype";
      whole += p.value.numel() * DTypeSize(dtype_) +
               (p.master.defined() ? p.master.numel() * sizeof(float) : 0);
    }
  }
  Hold(whole);
  for (int b = 0; b < buckets.num_buckets(); ++b) KeepBlocks(b);
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    for (const GradientBuckets::Member& m : buckets.members(b)) {
      m.param->value = Tensor();
      m.param->master = Tensor();
    }
  }
  Free(whole);
}

ShardedParameters::ShardedParameters(
    GradientBuckets& buckets, const std::vector<ParameterDeclaration>& declared,
    ParameterFill fill)
    : buckets_(buckets) {
  TRELLIS_CHECK(buckets.sync() == GradSync::kShardGradients)
      << "sharded parameters need buckets that keep only their blocks";
  std::unordered_map<const Parameter*, const ParameterDeclaration*> of;
  for (const ParameterDeclaration& d : declared) of[d.parameter] = &d;
  const ParameterDeclaration* any = nullptr;
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    for (const GradientBuckets::Member& m : buckets.members(b)) {
      const auto it = of.find(m.param);
      TRELLIS_CHECK(it != of.end() && !m.param->value.defined())
          << m.param->name << " must be declared and not materialized";
      if (any == nullptr) any = it->second;
      TRELLIS_CHECK(it->second->dtype == any->dtype)
          << m.param->name << ": a bucket's weights must share one dtype";
    }
  }
  TRELLIS_CHECK(any != nullptr) << "no parameters to shard";
  MakeBlocks(any->dtype, any->device);
  if (fill != ParameterFill::kInitialize) return;
  // Each owned block straight from the initializers: no weight is ever
  // whole.
  const DType weights = GradDType(dtype_);
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    const int64_t block = slots_[b].owned.numel();
    const int64_t start = buckets.block_start(b);
    for (const GradientBuckets::Member& m : buckets.members(b)) {
      const int64_t lo = std::max(m.offset, start);
      const int64_t hi = std::min(m.offset + m.param->numel(), start + block);
      if (lo >= hi) continue;
      Tensor host = Tensor::Empty({hi - lo}, weights);
      InitializeElements(m.param->spec, of.at(m.param)->init, lo - m.offset,
                         hi - lo, host);
      OwnedWeights(b).Narrow(lo - start, hi - lo).CopyFrom(host);
    }
    RefreshOwned(b);
  }
}

void ShardedParameters::MakeBlocks(DType dtype, Device device) {
  dtype_ = dtype;
  slots_.resize(buckets_.num_buckets());
  for (int b = 0; b < buckets_.num_buckets(); ++b) {
    Slot& slot = slots_[b];
    const int64_t block = buckets_.Shard(b).numel();
    slot.owned = Tensor::Zeros({block}, dtype_, device);
    if (dtype_ == DType::kBF16) {
      slot.owned_master = Tensor::Zeros({block}, DType::kF32, device);
    }
  }
}

void ShardedParameters::KeepBlocks(int b) {
  Slot& slot = slots_[b];
  const int64_t block = slot.owned.numel();
  const int64_t start = buckets_.block_start(b);
  for (const GradientBuckets::Member& m : buckets_.members(b)) {
    const Parameter& p = *m.param;
    const int64_t lo = std::max(m.offset, start);
    const int64_t hi = std::min(m.offset + p.numel(), start + block);
    if (lo >= hi) continue;
    slot.owned.Narrow(lo - start, hi - lo)
        .CopyFrom(Flat(p.value).Narrow(lo - m.offset, hi - lo));
    if (slot.owned_master.defined()) {
      slot.owned_master.Narrow(lo - start, hi - lo)
          .CopyFrom(Flat(p.master).Narrow(lo - m.offset, hi - lo));
    }
  }
}

void ShardedParameters::Hold(size_t bytes) {
  whole_bytes_ += bytes;
  peak_whole_bytes_ = std::max(peak_whole_bytes_, whole_bytes_);
}

void ShardedParameters::Free(size_t bytes) {
  TRELLIS_CHECK_LE(bytes, whole_bytes_);
  whole_bytes_ -= bytes;
}

ShardedParameters::~ShardedParameters() {
  for (Slot& slot : slots_) {
    if (slot.request != nullptr) slot.request->Wait();
  }
}

Tensor ShardedParameters::Block(const Tensor& buffer, int b) const {
  return buffer.Narrow(buckets_.block_start(b), slots_[b].owned.numel());
}

void ShardedParameters::Launch(int b) {
  Slot& slot = slots_[b];
  if (slot.full.defined()) return;
  slot.full =
      Tensor::Empty({buckets_.bucket_elements(b)}, dtype_, slot.owned.device());
  const size_t bytes = slot.full.numel() * DTypeSize(dtype_);
  gathered_bytes_ += bytes;
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  Hold(bytes);
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
    const size_t bytes = slot.full.numel() * DTypeSize(dtype_);
    gathered_bytes_ -= bytes;
    Free(bytes);
  }
  slot.full = Tensor();
  slot.bound = false;
  slot.wanted = false;
}

void ShardedParameters::Acquire(const std::vector<Parameter*>& unit,
                                const std::vector<Parameter*>& next) {
  const std::vector<int> mine = buckets_.BucketsOf(unit);
  for (int b : mine) {
    ++slots_[b].refs;
    slots_[b].wanted = false;
    Launch(b);
  }
  for (int b : mine) Bind(b);
  // The next unit's gathers run while this one computes.
  for (int b : buckets_.BucketsOf(next)) {
    Launch(b);
    slots_[b].wanted = true;
  }
}

void ShardedParameters::Release(const std::vector<Parameter*>& unit) {
  for (int b : buckets_.BucketsOf(unit)) {
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

void ShardedParameters::GatherAll() { GatherUnit(all_parameters(), true); }

void ShardedParameters::ShardAll(bool keep) {
  ShardUnit(all_parameters(), keep);
}

std::vector<Parameter*> ShardedParameters::all_parameters() const {
  std::vector<Parameter*> all;
  for (int b = 0; b < buckets_.num_buckets(); ++b) {
    for (const GradientBuckets::Member& m : buckets_.members(b)) {
      all.push_back(m.param);
    }
  }
  return all;
}

void ShardedParameters::GatherUnit(const std::vector<Parameter*>& unit,
                                   bool gather) {
  Communicator& dp = buckets_.dp();
  for (int b : buckets_.BucketsOf(unit)) {
    Slot& slot = slots_[b];
    TRELLIS_CHECK(slot.refs == 0 && !slot.full.defined())
        << "GatherUnit while a unit is gathered";
    const Device device = slot.owned.device();
    const int64_t elements = buckets_.bucket_elements(b);
    if (gather) {
      Launch(b);
    } else {
      // Zeros to be loaded into: nothing to fetch.
      slot.full = Tensor::Zeros({elements}, dtype_, device);
      const size_t bytes = elements * DTypeSize(dtype_);
      gathered_bytes_ += bytes;
      peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
      Hold(bytes);
    }
    Bind(b);
    if (!slot.owned_master.defined()) continue;
    slot.full_master = Tensor::Zeros({elements}, DType::kF32, device);
    Hold(elements * sizeof(float));
    if (gather) {
      Tensor block = Block(slot.full_master, b);
      block.CopyFrom(slot.owned_master);
      if (dp.size() > 1) {
        dp.AllGather(block, slot.full_master);
        ++gathers_;
      }
    }
    for (const GradientBuckets::Member& m : buckets_.members(b)) {
      m.param->master = ViewOf(slot.full_master, *m.param, m.offset);
    }
  }
}

void ShardedParameters::ShardUnit(const std::vector<Parameter*>& unit,
                                  bool keep) {
  for (int b : buckets_.BucketsOf(unit)) {
    Slot& slot = slots_[b];
    TRELLIS_CHECK(slot.bound && slot.refs == 0)
        << "ShardUnit without GatherUnit";
    if (keep) {
      slot.owned.CopyFrom(Block(slot.full, b));
      if (slot.owned_master.defined()) {
        slot.owned_master.CopyFrom(Block(slot.full_master, b));
      }
    }
    for (const GradientBuckets::Member& m : buckets_.members(b)) {
      m.param->master = Tensor();
    }
    if (slot.full_master.defined()) {
      Free(slot.full_master.numel() * sizeof(float));
    }
    slot.full_master = Tensor();
    Drop(b);
  }
}

std::vector<std::vector<Parameter*>> ShardedParameters::IoGroups(
    const std::vector<std::vector<Parameter*>>& units) const {
  std::vector<std::vector<int>> unit_buckets;
  for (const std::vector<Parameter*>& unit : units) {
    unit_buckets.push_back(buckets_.BucketsOf(unit));
  }
  std::vector<std::vector<Parameter*>> groups;
  for (const std::vector<int>& buckets : GradientBuckets::UnitBucketGroups(
           static_cast<int>(slots_.size()), unit_buckets)) {
    groups.emplace_back();
    for (int b : buckets) {
      const std::vector<Parameter*> members = buckets_.BucketParameters(b);
      groups.back().insert(groups.back().end(), members.begin(), members.end());
    }
  }
  return groups;
}

int64_t ShardedParameters::owned_elements() const {
  int64_t n = 0;
  for (const Slot& slot : slots_) n += slot.owned.numel();
  return n;
}

}  // namespace trellis
