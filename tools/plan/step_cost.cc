#include "tools/plan/step_cost.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "framework/status.h"
#include "parallel/communicator.h"
#include "parallel/mesh.h"
#include "parallel/schedule.h"
#include "tools/plan/comm_cost.h"
#include "transformer/config.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

// Element-wise bytes per row of one block's forward, in elements: the two
// norms (read, write), the two residual adds (two reads, a write) and the
// row-parallel bias adds, on full rows; the MLP activation (read, write of
// 4C/tp) on tp-split rows. Backward moves about twice as much.
constexpr double kElementwiseFull = 14;
constexpr double kElementwiseSplit = 8;
// AdamW per owned element: reads weight, gradient and two moments, writes
// weight and moments, float32 each; bf16 runs also write the bf16 copy.
constexpr double kAdamBytes = 28;
constexpr double kAdamBf16Bytes = 2;

// One block's (or the head's) work for one microbatch, in seconds.
struct Pass {
  double compute = 0;
  double tp = 0;
};

// The sizes and rates the chunk costs are made of.
struct Sizes {
  double rows = 0;   // N = micro_batch · T
  double width = 0;  // C
  double seq = 0;    // T
  double bytes = 0;  // per activation element
  double attn = 0;   // n_head · head_dim / tp
  double vocab = 0;  // padded vocabulary / tp
  double gemm = 0;   // a block's local matrix elements
  double gemm_rate = 0, attn_rate = 0, memory_rate = 0;
  double split_ratio = 1;    // ZB-H1's B + W over the fused backward
  int64_t hidden_bytes = 0;  // one (N, C) activation
  int tp = 1;
  LinkSpec tp_link;
};

Sizes SizesOf(const TrainOptions& o, const ClusterSpec& cluster) {
  const ModelConfig& m = o.model;
  Sizes s;
  s.rows = static_cast<double>(o.micro_batch_size * m.seq_len);
  s.width = static_cast<double>(m.d_model);
  s.seq = static_cast<double>(m.seq_len);
  s.bytes = PlanDeviceOf(o).dtype == DType::kBF16 ? 2 : 4;
  s.attn = static_cast<double>(m.n_head * m.head_dim()) / o.tp;
  s.vocab = static_cast<double>(PaddedVocab(m.vocab_size, o.tp)) / o.tp;
  s.gemm = static_cast<double>(BlockGemmElements(o));
  s.gemm_rate = cluster.peak_flops * cluster.gemm_efficiency;
  s.attn_rate = cluster.peak_flops * cluster.attention_efficiency;
  s.memory_rate = cluster.memory_bandwidth;
  s.split_ratio = cluster.split_backward_ratio;
  s.hidden_bytes = static_cast<int64_t>(s.rows * s.width * s.bytes);
  s.tp = static_cast<int>(o.tp);
  return s;
}

double AllReduce(const Sizes& s, double bytes) {
  return CollectiveSeconds(CommOp::kAllReduce, static_cast<int64_t>(bytes),
                           s.tp, s.tp_link);
}

// A block's forward: GEMMs, attention, element-wise, two tp all-reduces.
Pass BlockForward(const Sizes& s) {
  return {2 * s.rows * s.gemm / s.gemm_rate +
              2 * s.rows * s.seq * s.attn / s.attn_rate +
              s.rows * s.bytes *
                  (kElementwiseFull * s.width +
                   kElementwiseSplit * s.width * 4 / s.tp) /
                  s.memory_rate,
          2 * AllReduce(s, s.hidden_bytes)};
}

// What B reruns before it can differentiate a block.
Pass Recomputed(const Sizes& s, Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return {};
    case Recompute::kSelective:
      return {2 * s.rows * s.seq * s.attn / s.attn_rate +
                  s.rows * s.bytes * kElementwiseSplit * s.width * 4 / s.tp /
                      s.memory_rate,
              0};
    case Recompute::kFull:
      return BlockForward(s);
  }
  return {};
}

// F, B and W of one chunk for one microbatch, split into compute and tp.
struct ChunkPasses {
  Pass f, b, w;
};

ChunkPasses ChunkWork(const TrainOptions& o, const ChunkPlan& chunk,
                      const Sizes& s) {
  const double layers = static_cast<double>(chunk.num_layers);
  const Pass fwd = BlockForward(s);
  const Pass redo = Recomputed(s, o.recompute);
  ChunkPasses p;
  p.f = {layers * fwd.compute, layers * fwd.tp};
  // Input gradients: the GEMMs again, attention twice, element-wise twice.
  const double b_compute =
      2 * s.rows * s.gemm / s.gemm_rate +
      2 * (fwd.compute - 2 * s.rows * s.gemm / s.gemm_rate);
  p.b = {layers * (b_compute + redo.compute), layers * (fwd.tp + redo.tp)};
  p.w = {layers * 2 * s.rows * s.gemm / s.gemm_rate, 0};
  if (o.schedule == ScheduleKind::kZeroBubbleH1) {
    // Split apart, B and W cost the measured ratio of the fused backward.
    p.b.compute *= s.split_ratio;
    p.w.compute *= s.split_ratio;
    p.w.compute += layers * redo.compute;
    p.w.tp += layers * redo.tp;
  }
  if (chunk.has_embedding) {
    p.f.compute += 2 * s.rows * s.width * s.bytes / s.memory_rate;
    p.f.tp += AllReduce(s, s.hidden_bytes);
  }
  if (chunk.has_head) {
    // Logits, d(ln_f) and the head's weight gradient, all in F; float32
    // logits written, read for the softmax and written as dlogits.
    p.f.compute += 3 * 2 * s.rows * s.vocab * s.width / s.gemm_rate +
                   3 * 4 * s.rows * s.vocab / s.memory_rate;
    const int64_t r = o.loss_chunk_rows == 0
                          ? static_cast<int64_t>(s.rows)
                          : std::min<int64_t>(o.loss_chunk_rows, s.rows);
    const double pieces = std::ceil(s.rows / static_cast<double>(r));
    p.f.tp += AllReduce(s, s.hidden_bytes) +
              pieces * (AllReduce(s, 4.0 * r) + AllReduce(s, 8.0 * r));
  }
  return p;
}

// The gradient sync of one stage: when it ends, from when its buckets
// become ready (the last W of their chunk) and their α-β costs.
double DataParallelEnd(const TrainOptions& o, const StageFacts& stage,
                       const std::vector<TimedAction>& timeline,
                       double stage_end, const ClusterSpec& cluster,
                       const LinkSpec& link, double* total) {
  const int dp = static_cast<int>(o.dp);
  const int64_t grads = stage.gradient_bytes;
  const int64_t bucket = static_cast<int64_t>(o.dp_bucket_mb * 1024 * 1024);
  const CommOp op = o.zero > 0 ? CommOp::kReduceScatter : CommOp::kAllReduce;
  *total = 0;
  if (dp == 1 || grads == 0) return stage_end;
  // The last W of each virtual stage, latest chunk first (gradient order).
  std::vector<std::pair<double, double>> windows;  // (start, end) per chunk
  const int last_mb = static_cast<int>(o.microbatches()) - 1;
  for (int v = static_cast<int>(o.virtual_stages) - 1; v >= 0; --v) {
    for (const TimedAction& a : timeline) {
      if (a.action.type == ActionType::kBackwardWeight &&
          a.action.microbatch == last_mb && a.action.virtual_stage == v) {
        windows.push_back({a.start, a.end});
      }
    }
  }
  if (windows.empty() || !cluster.async_collectives) {
    windows.assign(1, {stage_end, stage_end});
  }
  const double per_chunk = static_cast<double>(grads) / windows.size();
  double link_free = 0, produced = 0;
  for (int64_t sent = 0; sent < grads; sent += bucket) {
    const int64_t bytes = std::min(bucket, grads - sent);
    produced = static_cast<double>(sent + bytes);
    // When the bucket's last byte is produced: linearly over its chunk's W.
    const size_t k = std::min(windows.size() - 1,
                              static_cast<size_t>((produced - 1) / per_chunk));
    const double into = (produced - k * per_chunk) / per_chunk;
    const double ready =
        windows[k].first + into * (windows[k].second - windows[k].first);
    const double cost = CollectiveSeconds(op, bytes, dp, link);
    *total += cost;
    link_free = std::max(link_free, ready) + cost;
  }
  return std::max(stage_end, link_free);
}

// The update: AdamW over the owned elements (memory-bound), then ZeRO-1's
// all-gather of the weights; the slowest stage's.
double UpdateSeconds(const TrainOptions& o,
                     const std::vector<StageFacts>& stages, const Sizes& s,
                     const LinkSpec& dp_link) {
  double update = 0;
  for (const StageFacts& stage : stages) {
    const double owned = static_cast<double>(stage.local_parameters) /
                         (o.zero > 0 ? static_cast<double>(o.dp) : 1.0);
    const double bytes =
        owned * (kAdamBytes + (s.bytes == 2 ? kAdamBf16Bytes : 0));
    double t = bytes / s.memory_rate;
    if (o.zero > 0) {
      t += CollectiveSeconds(CommOp::kAllGather, stage.gradient_bytes,
                             static_cast<int>(o.dp), dp_link);
    }
    update = std::max(update, t);
  }
  return update;
}

}  // namespace

absl::StatusOr<StepEstimate> EstimateStep(const TrainOptions& o,
                                          const std::vector<StageFacts>& stages,
                                          const ClusterSpec& cluster) {
  TRELLIS_ASSIGN_OR_RETURN(
      Mesh mesh, Mesh::Create(static_cast<int>(o.dp * o.tp * o.pp),
                              static_cast<int>(o.dp), static_cast<int>(o.tp),
                              static_cast<int>(o.pp), o.mesh_order));
  Sizes s = SizesOf(o, cluster);
  s.tp_link = GroupLink(mesh, GroupKind::kTp, cluster);
  const LinkSpec pp_link = GroupLink(mesh, GroupKind::kPp, cluster);
  const LinkSpec dp_link = GroupLink(mesh, GroupKind::kDp, cluster);
  const int pp = static_cast<int>(o.pp), v = static_cast<int>(o.virtual_stages);
  // Costs per global chunk k = u·pp + p, and the tp share of each stage.
  std::vector<ActionCosts> with(pp * v), without(pp * v);
  std::vector<double> tp_time(pp, 0), busy(pp, 0);
  const double m = static_cast<double>(o.microbatches());
  const double transfer =
      pp > 1 ? CollectiveSeconds(CommOp::kSend, s.hidden_bytes, 2, pp_link) : 0;
  for (int p = 0; p < pp; ++p) {
    for (int u = 0; u < v; ++u) {
      const ChunkPasses c = ChunkWork(o, stages[p].chunks[u], s);
      ActionCosts& a = with[u * pp + p];
      a.forward = c.f.compute + c.f.tp;
      a.backward_input = c.b.compute + c.b.tp;
      a.backward_weight = c.w.compute + c.w.tp;
      a.transfer = transfer;
      without[u * pp + p] = a;
      without[u * pp + p].transfer = 0;
      tp_time[p] += m * (c.f.tp + c.b.tp + c.w.tp);
      busy[p] += m * (a.forward + a.backward_input + a.backward_weight);
    }
  }
  const std::vector<std::vector<Action>> schedules =
      BuildAllSchedules(o.schedule, pp, static_cast<int>(o.microbatches()), v);
  TRELLIS_ASSIGN_OR_RETURN(ScheduleSimulation sim,
                           SimulateSchedules(schedules, v, with));
  TRELLIS_ASSIGN_OR_RETURN(ScheduleSimulation free_transfers,
                           SimulateSchedules(schedules, v, without));
  StepEstimate e;
  const int busiest = static_cast<int>(
      std::max_element(busy.begin(), busy.end()) - busy.begin());
  e.tp_comm = tp_time[busiest];
  e.compute = busy[busiest] - e.tp_comm;
  e.bubble = std::max(0.0, free_transfers.makespan - busy[busiest]);
  e.pp_comm = std::max(0.0, sim.makespan - free_transfers.makespan);
  e.bubble_fraction = sim.BubbleFraction();
  // Each stage's sync starts from its own timeline; the step goes on when
  // the last stage's ends.
  double synced = sim.makespan;
  for (int p = 0; p < pp; ++p) {
    double total = 0;
    const double stage_end =
        sim.timeline[p].empty() ? 0 : sim.timeline[p].back().end;
    synced =
        std::max(synced, DataParallelEnd(o, stages[p], sim.timeline[p],
                                         stage_end, cluster, dp_link, &total));
    e.dp_comm_total = std::max(e.dp_comm_total, total);
  }
  // The tied embedding's gradient is then summed between the first and
  // the last stage (float32, its local rows).
  if (pp > 1 && !FamilyOf(o.model).TiedEmbedding(o.model).empty()) {
    synced += CollectiveSeconds(CommOp::kAllReduce,
                                static_cast<int64_t>(4 * s.vocab * s.width), 2,
                                pp_link);
  }
  e.dp_comm = synced - sim.makespan;
  const double update = UpdateSeconds(o, stages, s, dp_link);
  e.optimizer = update;
  e.step = synced + e.optimizer;
  return e;
}

}  // namespace trellis
