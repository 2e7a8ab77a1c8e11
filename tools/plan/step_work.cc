#include "tools/plan/step_work.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "framework/status.h"
#include "parallel/schedule.h"
#include "tools/plan/comm_cost.h"
#include "tools/plan/kernel_costs.h"
#include "transformer/config.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// Element-wise bytes per row of one block's forward, in elements: the two
// norms (read, write), the two residual adds (two reads, a write) and the
// row-parallel bias adds, on full rows (this rank's N/tp rows under
// sequence parallelism); the MLP activation (read, write of 4C/tp) on
// tp-split rows. Backward moves about twice as much.
constexpr double kElementwiseFull = 14;
constexpr double kElementwiseSplit = 8;

// The sizes and rates the chunk costs are made of.
struct Sizes {
  double rows = 0;   // N = micro_batch · T
  double width = 0;  // C
  double seq = 0;    // T
  double bytes = 0;  // per activation element
  double attn = 0;   // n_head · head_dim / tp
  double vocab = 0;  // padded vocabulary / tp
  // Seconds of a block's GEMMs per pass (forward, input and weight
  // gradients) and of the LM head's three.
  double gemm_f = 0, gemm_b = 0, gemm_w = 0, head_gemm = 0;
  double attn_rate = 0, memory_rate = 0;
  double split_ratio = 1;    // ZB-H1's B + W over the fused backward
  double full_rows = 1;      // share of the rows the norms see: 1 or 1/tp
  int64_t hidden_bytes = 0;  // one (N, C) activation
  int tp = 1;
  bool sequence_parallel = false;
  // Context parallelism: the cp size, the ring or all-to-all, and the bytes
  // of this rank's key/value block (N, 2·Hkv·D/tp), its qkv (N,
  // (H + 2·Hkv)·D/tp) and its attention output (N, H·D/tp).
  int cp = 1;
  bool ring = true;
  int64_t kv_bytes = 0, qkv_bytes = 0, out_bytes = 0;
  int64_t doc_starts_bytes = 0;  // (B, T/cp) int32 under --document_mask
  // A mixture's layer: the slots each token is routed to (k; 0 for a dense
  // layer), whose rows the dispatch and combine copy; under expert
  // parallelism the ep size and the experts each rank holds.
  double routed = 0;
  int ep = 1;
  int64_t experts_here = 0;
};

// The GEMMs' seconds and the attention and element-wise rates: from the
// cluster's kernel cost table by shape, else at its peak × efficiencies and
// its memory bandwidth.
void RatesOf(const TrainOptions& o, const ClusterSpec& cluster, int64_t layer,
             Sizes& s) {
  const std::vector<GemmShape> shapes = BlockGemmShapes(o, layer);
  for (const GemmShape& g : shapes) {
    if (g.count != 1 || g.rows != 1) {
      s.routed = static_cast<double>(o.model.experts_per_token);
      s.ep = static_cast<int>(o.ep);
      s.experts_here = g.count;
    }
  }
  if (cluster.kernel_costs == nullptr) {
    const double rate = cluster.peak_flops * cluster.gemm_efficiency;
    const double elements = BlockGemmElements(o, layer);
    s.gemm_f = s.gemm_b = s.gemm_w = 2 * s.rows * elements / rate;
    s.head_gemm = 3 * 2 * s.rows * s.vocab * s.width / rate;
    s.attn_rate = cluster.peak_flops * cluster.attention_efficiency;
    s.memory_rate = cluster.memory_bandwidth;
    return;
  }
  const KernelCosts& k = *cluster.kernel_costs;
  for (const GemmShape& g : shapes) {
    const double in = static_cast<double>(g.in);
    const double out = static_cast<double>(g.out);
    const double rows = s.rows * g.rows, n = static_cast<double>(g.count);
    s.gemm_f += n * GemmSeconds(k, GemmPass::kForward, rows, in, out, s.bytes);
    s.gemm_b +=
        n * GemmSeconds(k, GemmPass::kBackwardInput, rows, in, out, s.bytes);
    s.gemm_w +=
        n * GemmSeconds(k, GemmPass::kBackwardWeight, rows, in, out, s.bytes);
  }
  // The head: logits (C in, V/tp out), d(ln_f) and its weight gradient.
  for (GemmPass pass : {GemmPass::kForward, GemmPass::kBackwardInput,
                        GemmPass::kBackwardWeight}) {
    s.head_gemm += GemmSeconds(k, pass, s.rows, s.width, s.vocab, s.bytes);
  }
  // Under cp the ring attends blocks of T/cp keys and queries (cp of them
  // per rank); all-to-all runs the whole window on heads/cp. Each call
  // covers the microbatch's windows times those heads.
  const double pairs = static_cast<double>(o.model.n_head) / o.tp *
                       static_cast<double>(o.micro_batch_size);
  const double head_dim = static_cast<double>(o.model.HeadDim());
  s.attn_rate = s.cp == 1 ? AttentionRate(k, s.seq, head_dim, pairs)
                : s.ring  ? BlockAttentionRate(k, s.seq / s.cp, head_dim, pairs)
                          : AttentionRate(k, s.seq, head_dim, pairs / s.cp);
  s.memory_rate = ElementwiseRate(k, s.rows * s.full_rows, s.width);
}

// The sizes and rates of block `layer` (its GEMMs; a mixture's dense and
// expert layers differ).
Sizes SizesOf(const TrainOptions& o, const ClusterSpec& cluster,
              int64_t layer = 0) {
  const ModelConfig& m = o.model;
  Sizes s;
  // Under cp every rank holds T/cp of each window's tokens.
  s.rows = static_cast<double>(o.micro_batch_size * o.local_seq_len());
  s.width = static_cast<double>(m.d_model);
  s.seq = static_cast<double>(m.seq_len);
  s.bytes = PlanDeviceOf(o).dtype == DType::kBF16 ? 2 : 4;
  s.attn = static_cast<double>(m.n_head * m.HeadDim()) / o.tp;
  s.vocab = static_cast<double>(PaddedVocab(m.vocab_size, o.tp)) / o.tp;
  s.split_ratio = cluster.split_backward_ratio;
  s.hidden_bytes = static_cast<int64_t>(s.rows * s.width * s.bytes);
  s.tp = static_cast<int>(o.tp);
  s.sequence_parallel = o.sequence_parallel && o.tp > 1;
  s.full_rows = s.sequence_parallel ? 1.0 / static_cast<double>(o.tp) : 1.0;
  s.cp = static_cast<int>(o.cp);
  s.ring = o.cp_comm != "a2a";
  const int64_t element = static_cast<int64_t>(s.bytes);
  const int64_t n = o.micro_batch_size * o.local_seq_len();
  const int64_t head = m.HeadDim();
  s.kv_bytes = n * 2 * m.kv_heads() * head / o.tp * element;
  s.out_bytes = n * m.n_head * head / o.tp * element;
  s.qkv_bytes = s.out_bytes + s.kv_bytes;
  if (o.document_mask) s.doc_starts_bytes = n * 4;
  RatesOf(o, cluster, layer, s);
  return s;
}

// The tp collectives that replace `all_reduces` all-reduces of the hidden
// state: all-reduces, or under sequence parallelism as many all-gathers
// (before column-parallel layers) and reduce-scatters; `gathers` extra
// all-gathers happen only under sequence parallelism.
std::vector<PlannedCall> HiddenCalls(const Sizes& s, int64_t all_reduces,
                                     int64_t gathers = 0) {
  if (s.tp == 1) return {};
  const int64_t b = s.hidden_bytes;
  if (!s.sequence_parallel) {
    if (all_reduces == 0) return {};
    return {{CommOp::kAllReduce, b, all_reduces}};
  }
  std::vector<PlannedCall> calls;
  if (all_reduces + gathers > 0) {
    calls.push_back({CommOp::kAllGather, b, all_reduces + gathers});
  }
  if (all_reduces > 0)
    calls.push_back({CommOp::kReduceScatter, b, all_reduces});
  return calls;
}

void Append(std::vector<PlannedCall>& to, const std::vector<PlannedCall>& more,
            int64_t times = 1) {
  for (PlannedCall c : more) {
    c.calls *= times;
    if (c.calls > 0) to.push_back(c);
  }
}

// A block's attention forward: the causal half of QKᵀ and AV, N rows
// against the T-long window (its 1/cp share under cp).
double AttentionSeconds(const Sizes& s) {
  return 2 * s.rows * s.seq * s.attn / s.attn_rate;
}

// A block's context-parallel transfers in a forward (`backward` false) or
// a backward of its attention. Ring: cp-1 key/value blocks, each sent
// while the block in hand is attended (1/cp of the attention); backward,
// the blocks again and cp-1 gradient blocks beside the blocks' backward
// (cp steps, the middle ones sending a block and a gradient: each send
// hides behind half the step's attention), then the last gradient, which
// waits. All-to-all: two exchanges (qkv in and the output back, or their
// gradients), each cp-1 sends of 1/cp of the buffer, blocking, and under
// document masking an all-gather of the rank's document starts. A
// mixture's layer also sums its router's expert counts over cp in forward
// (E int32: the whole windows' balance statistics).
std::vector<ContextCall> AttentionContextCalls(const Sizes& s, bool backward) {
  const int64_t steps = s.cp - 1;
  if (!s.ring) {
    std::vector<ContextCall> calls = {
        {{CommOp::kSend, s.qkv_bytes / s.cp, steps}, 0},
        {{CommOp::kSend, s.out_bytes / s.cp, steps}, 0}};
    if (s.doc_starts_bytes > 0) {
      calls.push_back({{CommOp::kAllGather, s.doc_starts_bytes, 1}, 0});
    }
    return calls;
  }
  const double attention = AttentionSeconds(s) * (backward ? 2 : 1);
  const double step = attention / s.cp;
  if (!backward) return {{{CommOp::kSend, s.kv_bytes, steps}, step}};
  // The first step sends a block, the last a gradient, those between one
  // of each; then the gradient home.
  std::vector<ContextCall> calls = {{{CommOp::kSend, s.kv_bytes, 2}, step},
                                    {{CommOp::kSend, s.kv_bytes, 1}, 0}};
  if (s.cp > 2) {
    calls.push_back({{CommOp::kSend, s.kv_bytes, 2 * (s.cp - 2)}, step / 2});
  }
  return calls;
}

std::vector<ContextCall> ContextCalls(const Sizes& s, bool backward) {
  if (s.cp == 1) return {};
  std::vector<ContextCall> calls = AttentionContextCalls(s, backward);
  if (s.routed > 0 && !backward) {
    calls.push_back({{CommOp::kAllReduce, 4 * s.experts_here * s.ep, 1}, 0});
  }
  return calls;
}

// A mixture's token exchanges in a layer's forward (counts, rows out,
// outputs back) or backward (the gradients both ways): ep-1 sends each,
// of the expected 1/ep of the N·k routed rows (and the E/ep counts).
std::vector<PlannedCall> ExpertCalls(const Sizes& s, bool backward) {
  if (s.ep == 1 || s.routed == 0) return {};
  const int64_t peers = s.ep - 1;
  const int64_t rows =
      static_cast<int64_t>(s.rows * s.routed * s.width * s.bytes / s.ep);
  std::vector<PlannedCall> calls = {{CommOp::kSend, rows, 2 * peers}};
  if (!backward) calls.push_back({CommOp::kSend, 4 * s.experts_here, peers});
  return calls;
}

// The copies context parallelism adds to a block's attention forward or
// backward, in seconds at the element-wise rate. Ring: splitting qkv into
// queries and the key/value block (read and write), forward cp-1 merges
// (read two outputs and log-sum-exps, write one), backward the gradients
// zeroed and joined back into dqkv. All-to-all: each exchange's buffer
// packed before and unpacked after it.
double ContextCopySeconds(const Sizes& s, bool backward) {
  if (s.cp == 1) return 0;
  const double qkv = static_cast<double>(s.qkv_bytes);
  const double out = static_cast<double>(s.out_bytes);
  double bytes = 0;
  if (!s.ring) {
    bytes = 4 * (qkv + out);
  } else if (backward) {
    bytes = 5 * qkv;
  } else {
    bytes = 2 * qkv + 4 * (s.cp - 1) * out;
  }
  return bytes / s.memory_rate;
}

void Append(std::vector<ContextCall>& to, const std::vector<ContextCall>& more,
            int64_t times) {
  for (ContextCall c : more) {
    c.call.calls *= times;
    if (c.call.calls > 0) to.push_back(c);
  }
}

// Element-wise bytes per row and routed slot of a mixture's layer
// forward: the dispatch writes each slot's row, the experts' outputs are
// read back by the combine, which writes the token's row.
constexpr double kRoutedCopies = 3;

// A block's forward compute: GEMMs, attention (with its cp copies),
// element-wise (with a mixture's dispatch and combine).
double BlockForwardCompute(const Sizes& s) {
  return s.gemm_f + AttentionSeconds(s) + ContextCopySeconds(s, false) +
         kRoutedCopies * s.rows * s.routed * s.width * s.bytes / s.memory_rate +
         s.rows * s.bytes *
             (kElementwiseFull * s.width * s.full_rows +
              kElementwiseSplit * s.width * 4 / s.tp) /
             s.memory_rate;
}

// What B (and W under ZB-H1) reruns before it can differentiate a block.
PassWork Recomputed(const Sizes& s, Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return {};
    case Recompute::kSelective: {
      PassWork redo;
      redo.compute = AttentionSeconds(s) + ContextCopySeconds(s, false) +
                     s.rows * s.bytes * kElementwiseSplit * s.width * 4 / s.tp /
                         s.memory_rate;
      // Attention's forward again.
      if (s.cp > 1) redo.cp = AttentionContextCalls(s, false);
      return redo;
    }
    case Recompute::kFull: {
      // The block up to its MLP's down projection: one row-parallel
      // output, and under sequence parallelism the two gathers.
      PassWork redo;
      redo.compute = BlockForwardCompute(s);
      redo.tp = HiddenCalls(s, 1, 1);
      redo.cp = ContextCalls(s, false);
      redo.ep = ExpertCalls(s, false);
      return redo;
    }
  }
  return {};
}

// ZeRO-3: `units` (bucket indices, forward order) read in forward or
// `reverse` order with `compute` seconds each (forward order); a unit
// gathers the buckets the unit read before it does not hold, those from
// index `dense` on (the experts') over their expert-data group.
std::vector<UnitRead> Walk(const std::vector<std::vector<int>>& units,
                           const std::vector<double>& compute,
                           const std::vector<int64_t>& gather_bytes,
                           size_t dense, bool reverse) {
  TRELLIS_CHECK_EQ(units.size(), compute.size()) << "a chunk's gather units";
  std::vector<UnitRead> reads;
  const std::vector<int>* held = nullptr;
  for (size_t k = 0; k < units.size(); ++k) {
    const size_t i = reverse ? units.size() - 1 - k : k;
    UnitRead r;
    r.compute = compute[i];
    for (int b : units[i]) {
      if (held != nullptr &&
          std::find(held->begin(), held->end(), b) != held->end()) {
        continue;
      }
      (static_cast<size_t>(b) < dense ? r.gathers : r.expert_gathers)
          .push_back({CommOp::kAllGather, gather_bytes[b], 1});
    }
    reads.push_back(std::move(r));
    held = &units[i];
  }
  return reads;
}

// A pass's compute per gather unit of `chunk`, in forward order: the
// embedding's, each block's, the head's.
std::vector<double> UnitCompute(const ChunkPlan& chunk, double embedding,
                                const std::vector<double>& blocks,
                                double head) {
  std::vector<double> out;
  if (chunk.has_embedding) out.push_back(embedding);
  out.insert(out.end(), blocks.begin(), blocks.end());
  if (chunk.has_head) out.push_back(head);
  return out;
}

// Adds the embedding's work to chunk work p and returns its forward
// compute.
double AddEmbeddingWork(const Sizes& s, ChunkWork& p) {
  const double embed_f =
      2 * s.rows * s.width * s.bytes * s.full_rows / s.memory_rate;
  p.f.compute += embed_f;
  // Forward: an all-reduce (a reduce-scatter to this rank's rows).
  // Backward: the gradient of every row (an all-gather).
  if (s.tp > 1) {
    p.f.tp.push_back(
        {s.sequence_parallel ? CommOp::kReduceScatter : CommOp::kAllReduce,
         s.hidden_bytes, 1});
    if (s.sequence_parallel) {
      p.b.tp.push_back({CommOp::kAllGather, s.hidden_bytes, 1});
    }
  }
  return embed_f;
}

// Adds the head's and the loss's work to chunk work p and returns their
// forward compute.
double AddHeadWork(const TrainOptions& o, const Sizes& s, ChunkWork& p) {
  // Logits, d(ln_f) and the head's weight gradient, all in F; float32
  // logits written, read for the softmax and written as dlogits.
  const double head_f = s.head_gemm + 3 * 4 * s.rows * s.vocab / s.memory_rate;
  p.f.compute += head_f;
  const int64_t rows = static_cast<int64_t>(s.rows);
  const int64_t chunk = o.head_chunk_rows();
  const int64_t r = chunk == 0 ? rows : std::min<int64_t>(chunk, rows);
  if (s.tp > 1) {
    // d(ln_f): all-reduced, or ln_f gathered and d(ln_f) scattered.
    Append(p.f.tp, HiddenCalls(s, 1));
    // The cross-entropy's max (r floats) and sums (2r) per piece; the
    // pieces' rows add up to N.
    const int64_t full = rows / r, rest = rows % r;
    p.f.tp.push_back({CommOp::kAllReduce, 4 * r, full});
    p.f.tp.push_back({CommOp::kAllReduce, 8 * r, full});
    if (rest > 0) {
      p.f.tp.push_back({CommOp::kAllReduce, 4 * rest, 1});
      p.f.tp.push_back({CommOp::kAllReduce, 8 * rest, 1});
    }
  }
  return head_f;
}

}  // namespace

double CallSeconds(const std::vector<PlannedCall>& calls, int n,
                   const LinkSpec& link) {
  double t = 0;
  for (const PlannedCall& c : calls) {
    t += static_cast<double>(c.calls) *
         CollectiveSeconds(c.op, c.bytes, n, link);
  }
  return t;
}

namespace {

// Per block of one kind, what each pass computes (for ZeRO-3's units).
struct BlockCompute {
  double f = 0, b = 0, w = 0;
};

// Adds `layers` blocks of sizes `s` to `p` and returns one block's compute
// per pass.
BlockCompute AddBlocks(const TrainOptions& o, const Sizes& s, int64_t layers,
                       ChunkWork& p) {
  const double l = static_cast<double>(layers);
  const double forward = BlockForwardCompute(s);
  const PassWork redo = Recomputed(s, o.recompute);
  BlockCompute one;
  one.f = forward;
  Append(p.f.tp, HiddenCalls(s, 2), layers);
  Append(p.f.cp, ContextCalls(s, false), layers);
  Append(p.f.ep, ExpertCalls(s, false), layers);
  // Input gradients: their GEMMs, attention and element-wise twice (and
  // the backward's own cp copies).
  const double copies = ContextCopySeconds(s, false);
  one.b = s.gemm_b + 2 * (forward - s.gemm_f - copies) +
          ContextCopySeconds(s, true);
  Append(p.b.tp, HiddenCalls(s, 2), layers);
  Append(p.b.cp, ContextCalls(s, true), layers);
  Append(p.b.ep, ExpertCalls(s, true), layers);
  one.w = s.gemm_w;
  if (o.schedule == ScheduleKind::kZeroBubbleH1) {
    // Split apart, B and W cost the measured ratio of the fused backward;
    // W reruns what recompute dropped as B did.
    one.b *= s.split_ratio;
    one.w = one.w * s.split_ratio + redo.compute;
    Append(p.w.tp, redo.tp, layers);
    Append(p.w.cp, redo.cp, layers);
    Append(p.w.ep, redo.ep, layers);
  }
  one.b += redo.compute;
  Append(p.b.tp, redo.tp, layers);
  Append(p.b.cp, redo.cp, layers);
  Append(p.b.ep, redo.ep, layers);
  p.f.compute += l * one.f;
  p.b.compute += l * one.b;
  p.w.compute += l * one.w;
  return one;
}

}  // namespace

ChunkWork PlanChunkWork(const TrainOptions& o, const StageFacts& stage,
                        int index, const ClusterSpec& cluster) {
  const ChunkPlan& chunk = stage.chunks[index];
  const ModelFamily& family = FamilyOf(o.model);
  // The chunk's blocks by kind (a mixture's dense and expert layers), each
  // kind costed at its first layer's shapes.
  std::map<int64_t, std::pair<int64_t, int64_t>> kinds;  // first, count
  std::vector<int64_t> kind_of;
  for (int64_t i = 0; i < chunk.num_layers; ++i) {
    const int64_t layer = chunk.first_layer + i;
    const int64_t kind = family.LayerClass(o.model, layer);
    kinds.try_emplace(kind, layer, 0).first->second.second += 1;
    kind_of.push_back(kind);
  }
  ChunkWork p;
  std::map<int64_t, BlockCompute> per_block;
  std::map<int64_t, Sizes> sizes;
  for (const auto& [kind, first_count] : kinds) {
    const Sizes& k = sizes.emplace(kind, SizesOf(o, cluster, first_count.first))
                         .first->second;
    per_block[kind] = AddBlocks(o, k, first_count.second, p);
  }
  // The ends' sizes: layer 0's (a kind's sizes are its every layer's).
  auto zero = sizes.find(family.LayerClass(o.model, 0));
  const Sizes s = zero != sizes.end() ? zero->second : SizesOf(o, cluster);
  const double embed_f = chunk.has_embedding ? AddEmbeddingWork(s, p) : 0;
  const double head_f = chunk.has_head ? AddHeadWork(o, s, p) : 0;
  if (static_cast<size_t>(index) < stage.unit_buckets.size()) {
    // ZeRO-3: B and W do the head's and the embedding's little work inside
    // their blocks' figures; without ZB-H1 the trainer's B computes the
    // weight gradients too (W only reports them), which the gathers
    // overlap.
    const bool split = o.schedule == ScheduleKind::kZeroBubbleH1;
    std::vector<double> f, b, w;
    for (int64_t kind : kind_of) {
      const BlockCompute& one = per_block[kind];
      f.push_back(one.f);
      b.push_back(one.b + (split ? 0 : one.w));
      w.push_back(one.w);
    }
    const std::vector<std::vector<int>>& units = stage.unit_buckets[index];
    const size_t dense = stage.buckets.size();
    p.f.reads = Walk(units, UnitCompute(chunk, embed_f, f, head_f),
                     stage.gather_bytes, dense, false);
    p.b.reads = Walk(units, UnitCompute(chunk, 0, b, 0), stage.gather_bytes,
                     dense, true);
    if (split) {
      p.w.reads = Walk(units, UnitCompute(chunk, 0, w, 0), stage.gather_bytes,
                       dense, true);
    }
  }
  return p;
}

double ContextExposedSeconds(const PassWork& pass, int n, const LinkSpec& link,
                             bool async) {
  double exposed = 0;
  for (const ContextCall& c : pass.cp) {
    const double send = CollectiveSeconds(c.call.op, c.call.bytes, n, link);
    const double hidden = async ? c.overlap : 0.0;
    exposed += static_cast<double>(c.call.calls) * std::max(0.0, send - hidden);
  }
  return exposed;
}

double GatherExposedSeconds(const PassWork& pass, const SyncGroup& dp,
                            const SyncGroup& expert_dp, bool async,
                            double* total) {
  double exposed = 0, all = 0, before = 0;
  for (size_t i = 0; i < pass.reads.size(); ++i) {
    const UnitRead& r = pass.reads[i];
    const double g = CallSeconds(r.gathers, dp.n, dp.link) +
                     CallSeconds(r.expert_gathers, expert_dp.n, expert_dp.link);
    all += g;
    // The first unit's gather is waited for; a later one started with
    // the previous unit's compute.
    exposed += i == 0 || !async ? g : std::max(0.0, g - before);
    before = pass.reads[i].compute;
  }
  if (total != nullptr) *total = all;
  return exposed;
}

std::vector<KernelRates> PlanKernelRates(const TrainOptions& o,
                                         const ClusterSpec& cluster) {
  const ModelFamily& family = FamilyOf(o.model);
  std::map<int64_t, size_t> at;  // kind → its entry
  std::vector<KernelRates> rates;
  for (int64_t layer = 0; layer < o.model.n_layer; ++layer) {
    const auto [it, first] =
        at.try_emplace(family.LayerClass(o.model, layer), rates.size());
    if (!first) {
      ++rates[it->second].layers;
      continue;
    }
    const Sizes s = SizesOf(o, cluster, layer);
    const double flops = 2 * s.rows * BlockGemmElements(o, layer);
    KernelRates r;
    r.first_layer = layer;
    r.layers = 1;
    r.by_shape = cluster.kernel_costs != nullptr;
    r.rows = s.rows;
    r.gemm_forward = flops / s.gemm_f;
    r.gemm_backward_input = flops / s.gemm_b;
    r.gemm_backward_weight = flops / s.gemm_w;
    r.attention = s.attn_rate;
    r.elementwise = s.memory_rate;
    rates.push_back(r);
  }
  return rates;
}

int64_t TransferBytes(const TrainOptions& o) {
  const int64_t rows = o.micro_batch_size * o.local_seq_len();
  const int64_t bytes = PlanDeviceOf(o).dtype == DType::kBF16 ? 2 : 4;
  const int64_t local = o.sequence_parallel && o.tp > 1 ? rows / o.tp : rows;
  return local * o.model.d_model * bytes;
}

}  // namespace trellis
