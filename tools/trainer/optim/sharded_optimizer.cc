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
    : ShardedOptimizer(config, params, {ShardedSet{&buckets, sharded}}) {}

ShardedOptimizer::ShardedOptimizer(OptimizerConfig config,
                                   const ParameterSet& params,
                                   std::vector<ShardedSet> sets)
    : Optimizer(config, params, NoMoments{}) {
  TRELLIS_CHECK(!sets.empty()) << "a sharded optimizer needs buckets";
  std::unordered_map<const Parameter*, size_t>& index = index_;
  for (size_t i = 0; i < params.all().size(); ++i) index[params.all()[i]] = i;
  set_of_.assign(params.all().size(), -1);
  for (const ShardedSet& given : sets) {
    TRELLIS_CHECK(given.buckets->sync() != GradSync::kAllReduce)
        << "a sharded optimizer needs reduce-scattered gradient buckets";
    const int k = static_cast<int>(sets_.size());
    sets_.push_back(Set{given.buckets, given.sharded, {}, {}});
    Set& set = sets_.back();
    for (int b = 0; b < set.buckets->num_buckets(); ++b) {
      const Tensor block = set.buckets->Shard(b);
      const int64_t start = set.buckets->block_start(b);
      const int64_t end = start + block.numel();
      for (const GradientBuckets::Member& member : set.buckets->members(b)) {
        auto it = index.find(member.param);
        TRELLIS_CHECK(it != index.end())
            << member.param->name << " is in a bucket but not in the model";
        TRELLIS_CHECK(set_of_[it->second] < 0 || set_of_[it->second] == k)
            << member.param->name << " is in two sets of buckets";
        set_of_[it->second] = k;
        const int64_t lo = std::max(member.offset, start);
        const int64_t hi = std::min(member.offset + member.param->numel(), end);
        if (lo >= hi) continue;
        segments_.push_back(
            Segment{it->second, k, b, lo - member.offset, lo - start, hi - lo});
      }
      set.m_blocks.push_back(
          Tensor::Zeros({block.numel()}, block.dtype(), block.device()));
      set.v_blocks.push_back(
          Tensor::Zeros({block.numel()}, block.dtype(), block.device()));
    }
  }
  for (size_t i = 0; i < set_of_.size(); ++i) {
    TRELLIS_CHECK(set_of_[i] >= 0)
        << params.all()[i]->name << " is in no bucket";
  }
}

const ShardedOptimizer::Set& ShardedOptimizer::SetOf(const Parameter& p) const {
  return sets_[set_of_[index_.at(&p)]];
}

int64_t ShardedOptimizer::shard_elements() const {
  int64_t n = 0;
  for (const Set& set : sets_) {
    for (const Tensor& block : set.m_blocks) n += block.numel();
  }
  return n;
}

Tensor ShardedOptimizer::Piece(const Tensor& whole, const Segment& s) {
  return Flat(whole).Narrow(s.param_offset, s.length);
}

std::vector<Tensor> ShardedOptimizer::GradientPieces() const {
  std::vector<Tensor> grads;
  grads.reserve(segments_.size());
  for (const Segment& s : segments_) {
    grads.push_back(
        sets_[s.set].buckets->Shard(s.bucket).Narrow(s.block_offset, s.length));
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
  // The later sets' groups tile the first's (dp): summed over dp, each
  // rank's owned blocks of every set cover each element once.
  Tensor total = Tensor::Empty({1}, DType::kF64);
  total.data<double>()[0] = SumOfSquares(primary) - UnownedGradSquares(ranges);
  for (Communicator* group : {&sets_.front().buckets->dp(), &tp}) {
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
    const Set& set = sets_[s.set];
    weights[k] = set.sharded != nullptr
                     ? set.sharded->OwnedWeights(s.bucket).Narrow(
                           s.block_offset, s.length)
                     : Piece(all[s.param]->weights(), s);
    ms[k] = set.m_blocks[s.bucket].Narrow(s.block_offset, s.length);
    vs[k] = set.v_blocks[s.bucket].Narrow(s.block_offset, s.length);
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
  for (int k = 0; k < static_cast<int>(sets_.size()); ++k) {
    const Set& set = sets_[k];
    if (set.sharded == nullptr) {
      GatherWeights(k);
      continue;
    }
    // Each rank keeps its blocks only: nothing to gather.
    for (int b = 0; b < set.buckets->num_buckets(); ++b) {
      set.sharded->RefreshOwned(b);
    }
  }
  return report;
}

Tensor ShardedOptimizer::Block(const Set& set, const Tensor& buffer, int b) {
  return buffer.Narrow(set.buckets->block_start(b),
                       set.buckets->Shard(b).numel());
}

void ShardedOptimizer::GatherWeights(int k) {
  const std::vector<Parameter*>& all = params().all();
  const Set& set = sets_[k];
  GradientBuckets& buckets = *set.buckets;
  const int n = buckets.num_buckets();
  // ZeRO-1 gathers through the (spent) gradient buckets, all launched
  // before the first is waited on; ZeRO-2 through buffers of their own, at
  // most kMaxInFlight at once.
  const int window = buckets.sync() == GradSync::kShardGradients
                         ? GradientBuckets::kMaxInFlight
                         : n;
  std::vector<Tensor> buffers(n);
  std::vector<std::unique_ptr<Request>> gathers(n);
  Communicator& dp = buckets.dp();
  auto launch = [&](int b) {
    buffers[b] = buckets.GatherBuffer(b);
    const Tensor block = Block(set, buffers[b], b);
    for (const Segment& s : segments_) {
      if (s.set != k || s.bucket != b) continue;
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
    for (const GradientBuckets::Member& member : buckets.members(b)) {
      Parameter& p = *member.param;
      Flat(p.weights()).CopyFrom(buffers[b].Narrow(member.offset, p.numel()));
      RefreshFromMaster(p);
    }
    buffers[b] = Tensor();
    if (b + window < n) launch(b + window);
  }
}

void ShardedOptimizer::GatherMoments(const std::vector<Parameter*>& part) {
  for (const Set& set : sets_) {
    GradientBuckets& buckets = *set.buckets;
    Communicator& group = buckets.dp();
    for (int b : buckets.BucketsOf(buckets.Held(part))) {
      Tensor buffer = buckets.GatherBuffer(b);
      Tensor block = Block(set, buffer, b);
      for (auto [blocks, whole] :
           {std::pair{&set.m_blocks, &m()}, std::pair{&set.v_blocks, &v()}}) {
        block.CopyFrom((*blocks)[b]);
        if (group.size() > 1) group.AllGather(block, buffer);
        for (const GradientBuckets::Member& member : buckets.members(b)) {
          Tensor& to = (*whole)[index_.at(member.param)];
          if (!to.defined()) continue;
          Flat(to).CopyFrom(
              buffer.Narrow(member.offset, member.param->numel()));
        }
      }
    }
  }
}

bool ShardedOptimizer::SavesMoments(size_t i) const {
  const Communicator& group = sets_[set_of_[i]].buckets->dp();
  return static_cast<int>(i % static_cast<size_t>(group.size())) ==
         group.rank();
}

Tensor ShardedOptimizer::NewMoment(const Parameter& p) const {
  // The moments' kind is the gradient bucket's (under ZeRO-3 the value may
  // be released).
  const GradientBuckets& buckets = *SetOf(p).buckets;
  const Tensor like = buckets.Shard(buckets.BucketOf(&p));
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
    Set& set = sets_[s.set];
    set.m_blocks[s.bucket]
        .Narrow(s.block_offset, s.length)
        .CopyFrom(Piece(m()[s.param], s));
    set.v_blocks[s.bucket]
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
  // Through the part's gradient buckets: the gradients there are spent
  // after a step and zeroed at the next one's start.
  if (io == CheckpointIo::kSave) GatherMoments(part);
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
