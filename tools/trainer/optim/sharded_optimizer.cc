#include "tools/trainer/optim/sharded_optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "framework/kernels/adamw.h"
#include "framework/kernels/elementwise.h"
#include "framework/status.h"
#include "parallel/replicas.h"

namespace trellis {
namespace {

// `t` as one row of its elements.
Tensor Flat(const Tensor& t) { return t.View({t.numel()}); }

}  // namespace

ShardedOptimizer::ShardedOptimizer(OptimizerConfig config,
                                   const ParameterSet& params,
                                   GradientBuckets& buckets,
                                   ShardedParameters* sharded)
    : Optimizer(config, params, NoMoments{}),
      buckets_(buckets),
      sharded_(sharded) {
  TRELLIS_CHECK(buckets.sync() != GradSync::kAllReduce)
      << "a sharded optimizer needs reduce-scattered gradient buckets";
  std::unordered_map<const Parameter*, size_t>& index = index_;
  for (size_t i = 0; i < params.all().size(); ++i) index[params.all()[i]] = i;
  std::vector<bool> covered(params.all().size(), false);
  for (int b = 0; b < buckets.num_buckets(); ++b) {
    const Tensor block = buckets.Shard(b);
    const int64_t start = buckets.block_start(b);
    const int64_t end = start + block.numel();
    for (const GradientBuckets::Member& member : buckets.members(b)) {
      auto it = index.find(member.param);
      TRELLIS_CHECK(it != index.end())
          << member.param->name << " is in a bucket but not in the model";
      covered[it->second] = true;
      const int64_t lo = std::max(member.offset, start);
      const int64_t hi = std::min(member.offset + member.param->numel(), end);
      if (lo >= hi) continue;
      segments_.push_back(
          Segment{it->second, b, lo - member.offset, lo - start, hi - lo});
    }
    m_blocks_.push_back(
        Tensor::Zeros({block.numel()}, block.dtype(), block.device()));
    v_blocks_.push_back(
        Tensor::Zeros({block.numel()}, block.dtype(), block.device()));
  }
  for (size_t i = 0; i < covered.size(); ++i) {
    TRELLIS_CHECK(covered[i]) << params.all()[i]->name << " is in no bucket";
  }
}

int64_t ShardedOptimizer::shard_elements() const {
  int64_t n = 0;
  for (const Tensor& block : m_blocks_) n += block.numel();
  return n;
}

Tensor ShardedOptimizer::Piece(const Tensor& whole, const Segment& s) {
  return Flat(whole).Narrow(s.param_offset, s.length);
}

std::vector<Tensor> ShardedOptimizer::GradientPieces() const {
  std::vector<Tensor> grads;
  grads.reserve(segments_.size());
  for (const Segment& s : segments_) {
    grads.push_back(buckets_.Shard(s.bucket).Narrow(s.block_offset, s.length));
  }
  return grads;
}

double ShardedOptimizer::StageGradSquares(Communicator& tp) const {
  const std::vector<Parameter*>& all = params().all();
  const std::vector<Tensor> grads = GradientPieces();
  std::vector<const Tensor*> primary;
  std::vector<GradRange> ranges;
  for (size_t k = 0; k < segments_.size(); ++k) {
    const Segment& s = segments_[k];
    if (!all[s.param]->primary) continue;
    primary.push_back(&grads[k]);
    // The segment is this stretch of the parameter's gradient (under
    // ZeRO-2 held only in the bucket's block).
    ranges.push_back(
        {all[s.param], s.param_offset, s.param_offset + s.length, grads[k]});
  }
  // One reduction of the squares over every group of the stage the
  // elements are split over; replicated pieces count on their owner only.
  Tensor total = Tensor::Empty({1}, DType::kF64);
  total.data<double>()[0] = SumOfSquares(primary) - UnownedGradSquares(ranges);
  for (Communicator* group : {&buckets_.dp(), &tp}) {
    if (group->size() > 1) group->AllReduce(total, ReduceOp::kSum);
  }
  return total.data<double>()[0];
}

void ShardedOptimizer::PoisonGradient() {
  const std::vector<Parameter*>& all = params().all();
  const std::vector<Tensor> grads = GradientPieces();
  for (size_t k = 0; k < segments_.size(); ++k) {
    if (!all[segments_[k].param]->primary || grads[k].numel() == 0) continue;
    grads[k].Narrow(0, 1).Fill(std::numeric_limits<double>::quiet_NaN());
    return;
  }
}

StepReport ShardedOptimizer::Apply(double grad_norm) {
  const std::vector<Parameter*>& all = params().all();
  // Views of each segment: gradient (in the bucket's block), weights and
  // moments. Kept in vectors sized up front, so the pointers stay valid.
  const size_t n = segments_.size();
  std::vector<Tensor> grads = GradientPieces(), weights(n), ms(n), vs(n);
  for (size_t k = 0; k < n; ++k) {
    const Segment& s = segments_[k];
    weights[k] = sharded_ != nullptr ? sharded_->OwnedWeights(s.bucket).Narrow(
                                           s.block_offset, s.length)
                                     : Piece(all[s.param]->weights(), s);
    ms[k] = m_blocks_[s.bucket].Narrow(s.block_offset, s.length);
    vs[k] = v_blocks_[s.bucket].Narrow(s.block_offset, s.length);
  }
  AdamWHyper hyper;
  const StepReport report = BeginStep(grad_norm, hyper);
  std::vector<AdamWTensors> tensors;
  tensors.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    const Parameter& p = *all[segments_[k].param];
    tensors.push_back(AdamWTensors{&grads[k], &weights[k], &ms[k], &vs[k],
                                   p.decay ? config().weight_decay : 0.0,
                                   nullptr});
  }
  AdamWStepMany(hyper, tensors);
  if (sharded_ == nullptr) {
    GatherWeights();
  } else {
    // Each rank keeps its blocks only: nothing to gather.
    for (int b = 0; b < buckets_.num_buckets(); ++b) sharded_->RefreshOwned(b);
  }
  return report;
}

Tensor ShardedOptimizer::Block(const Tensor& buffer, int b) const {
  return buffer.Narrow(buckets_.block_start(b), buckets_.Shard(b).numel());
}

void ShardedOptimizer::GatherWeights() {
  const std::vector<Parameter*>& all = params().all();
  const int n = buckets_.num_buckets();
  // ZeRO-1 gathers through the (spent) gradient buckets, all launched
  // before the first is waited on; ZeRO-2 through buffers of their own, at
  // most kMaxInFlight at once.
  const int window = buckets_.sync() == GradSync::kShardGradients
                         ? GradientBuckets::kMaxInFlight
                         : n;
  std::vector<Tensor> buffers(n);
  std::vector<std::unique_ptr<Request>> gathers(n);
  Communicator& dp = buckets_.dp();
  auto launch = [&](int b) {
    buffers[b] = buckets_.GatherBuffer(b);
    const Tensor block = Block(buffers[b], b);
    for (size_t k = 0; k < segments_.size(); ++k) {
      const Segment& s = segments_[k];
      if (s.bucket != b) continue;
      block.Narrow(s.block_offset, s.length)
          .CopyFrom(Piece(all[s.param]->weights(), s));
    }
    gathers[b] = dp.size() > 1 ? dp.AllGatherAsync(block, buffers[b])
                               : std::make_unique<DoneRequest>();
  };
  for (int b = 0; b < std::min(window, n); ++b) launch(b);
  // Copies out bucket by bucket while later gathers are still running.
  for (int b = 0; b < n; ++b) {
    gathers[b]->Wait();
    gathers[b].reset();
    for (const GradientBuckets::Member& member : buckets_.members(b)) {
      Parameter& p = *member.param;
      Flat(p.weights()).CopyFrom(buffers[b].Narrow(member.offset, p.numel()));
      RefreshFromMaster(p);
    }
    buffers[b] = Tensor();
    if (b + window < n) launch(b + window);
  }
}

void ShardedOptimizer::GatherMoments(const std::vector<int>& buckets,
                                     const std::vector<Tensor>& blocks,
                                     std::vector<Tensor>& whole) {
  Communicator& dp = buckets_.dp();
  for (int b : buckets) {
    Tensor buffer = buckets_.GatherBuffer(b);
    Tensor block = Block(buffer, b);
    block.CopyFrom(blocks[b]);
    if (dp.size() > 1) dp.AllGather(block, buffer);
    for (const GradientBuckets::Member& member : buckets_.members(b)) {
      Tensor& to = whole[index_.at(member.param)];
      if (!to.defined()) continue;
      Flat(to).CopyFrom(buffer.Narrow(member.offset, member.param->numel()));
    }
  }
}

bool ShardedOptimizer::SavesMoments(size_t i) const {
  return static_cast<int>(i % static_cast<size_t>(buckets_.dp().size())) ==
         buckets_.dp().rank();
}

Tensor ShardedOptimizer::NewMoment(const Parameter& p) const {
  // The moments' kind is the gradient bucket's (under ZeRO-3 the value may
  // be released).
  const Tensor like = buckets_.Shard(buckets_.BucketOf(&p));
  return Tensor::Zeros(p.spec.LocalShape(), like.dtype(), like.device());
}

void ShardedOptimizer::BeginCheckpointIo(CheckpointIo /*io*/) {
  m().clear();
  v().clear();
  // The moments move part by part (BeginCheckpointPart).
  m().resize(params().all().size());
  v().resize(params().all().size());
}

void ShardedOptimizer::KeepLoadedMoments() {
  for (const Segment& s : segments_) {
    if (!m()[s.param].defined()) continue;
    m_blocks_[s.bucket]
        .Narrow(s.block_offset, s.length)
        .CopyFrom(Piece(m()[s.param], s));
    v_blocks_[s.bucket]
        .Narrow(s.block_offset, s.length)
        .CopyFrom(Piece(v()[s.param], s));
  }
}

void ShardedOptimizer::EndCheckpointIo(CheckpointIo /*io*/) {
  m().clear();
  v().clear();
}

void ShardedOptimizer::BeginCheckpointPart(
    CheckpointIo io, const std::vector<Parameter*>& part) {
  for (const Parameter* p : part) {
    const size_t i = index_.at(p);
    if (io == CheckpointIo::kSave && !SavesMoments(i)) continue;
    m()[i] = NewMoment(*p);
    v()[i] = NewMoment(*p);
  }
  // Outside a part no moment is whole: the part's are all there are.
  size_t whole = 0;
  for (const Parameter* p : part) {
    const size_t i = index_.at(p);
    if (m()[i].defined()) whole += m()[i].nbytes() + v()[i].nbytes();
  }
  peak_whole_moment_bytes_ = std::max(peak_whole_moment_bytes_, whole);
  if (io == CheckpointIo::kSave) {
    // Through the part's gradient buckets: the gradients there are spent
    // after a step and zeroed at the next one's start.
    const std::vector<int> buckets = buckets_.BucketsOf(part);
    GatherMoments(buckets, m_blocks_, m());
    GatherMoments(buckets, v_blocks_, v());
  }
}

void ShardedOptimizer::EndCheckpointPart(CheckpointIo io,
                                         const std::vector<Parameter*>& part) {
  if (io == CheckpointIo::kLoad) KeepLoadedMoments();
  for (const Parameter* p : part) {
    const size_t i = index_.at(p);
    m()[i] = Tensor();
    v()[i] = Tensor();
  }
}

}  // namespace trellis
