// The step's counted calls outside the pipeline's passes (step_work.h:
// StepTpCalls, StepDpCalls) and PlannedStepTraffic, which adds every list
// up to one step's counters.
#include "framework/status.h"
#include "tools/plan/step_work.h"

namespace trellis {

std::vector<PlannedCall> StepTpCalls(const TrainOptions& o,
                                     const StageFacts& stage) {
  if (o.tp == 1) return {};
  std::vector<PlannedCall> calls = {{CommOp::kAllReduce, 8, 1}};  // norm
  for (int64_t bytes : stage.tp_partial) {
    calls.push_back({CommOp::kAllReduce, bytes, 1});
  }
  return calls;
}

namespace {

// The sync of `buckets` at ZeRO level `zero`, calls by when they run.
DpCalls BucketCalls(int64_t zero, const std::vector<int64_t>& buckets) {
  DpCalls d;
  for (int64_t bytes : buckets) {
    switch (zero) {
      case 0:
        d.per_step.push_back({CommOp::kAllReduce, bytes, 1});
        break;
      case 1:
        d.per_step.push_back({CommOp::kReduceScatter, bytes, 1});
        d.update.push_back({CommOp::kAllGather, bytes, 1});
        break;
      case 3:
        // The weights stay sharded: the passes gather them.
        d.per_microbatch.push_back({CommOp::kReduceScatter, bytes, 1});
        break;
      default:
        d.per_microbatch.push_back({CommOp::kReduceScatter, bytes, 1});
        d.update.push_back({CommOp::kAllGather, bytes, 1});
        break;
    }
  }
  return d;
}

void Count(CommStats& stats, const std::vector<PlannedCall>& calls,
           int64_t times, int n) {
  for (const PlannedCall& c : calls) {
    const int i = static_cast<int>(c.op);
    stats.calls[i] += times * c.calls;
    stats.bytes[i] += times * c.calls * c.bytes;
    stats.wire_bytes[i] += times * c.calls * WireBytes(c.op, c.bytes, n);
  }
}

// Count of `call`, and of a receive of as many bytes for each send.
void CountWithReceives(CommStats& stats, const PlannedCall& call, int64_t times,
                       int n) {
  Count(stats, {call}, times, n);
  if (call.op != CommOp::kSend) return;
  PlannedCall recv = call;
  recv.op = CommOp::kRecv;
  Count(stats, {recv}, times, n);
}

}  // namespace

DpCalls StepDpCalls(const TrainOptions& o, const StageFacts& stage) {
  if (o.gradient_replicas() == 1) return {};
  DpCalls d = BucketCalls(o.zero, stage.buckets);
  d.per_step.push_back({CommOp::kAllReduce, 8, 1});  // the loss average
  // Sharded gradients: the norm is summed over dp too.
  if (o.zero > 0) d.update.push_back({CommOp::kAllReduce, 8, 1});
  // A mixture's routing report, after the update: per layer its balance
  // losses, its experts and each expert's slots (RoutingReport, float64).
  if (stage.routed_experts > 0) {
    d.update.push_back({CommOp::kAllReduce,
                        8 * o.model.n_layer * (4 + stage.routed_experts), 1});
  }
  return d;
}

DpCalls StepExpertDpCalls(const TrainOptions& o, const StageFacts& stage) {
  if (o.gradient_replicas() / o.ep == 1) return {};
  return BucketCalls(o.zero, stage.expert_buckets);
}

PlannedTraffic PlannedStepTraffic(const TrainOptions& o,
                                  const StageFacts& stage) {
  PlannedTraffic t;
  const int64_t m = o.microbatches();
  const int tp = static_cast<int>(o.tp), cp = static_cast<int>(o.cp);
  const int dp = static_cast<int>(o.gradient_replicas());
  const int expert_dp = static_cast<int>(o.gradient_replicas() / o.ep);
  const int ep = static_cast<int>(o.ep);
  // Rates do not change what is sent.
  ClusterSpec unit;
  unit.peak_flops = unit.memory_bandwidth = 1;
  unit.gemm_efficiency = unit.attention_efficiency = 1;
  for (int c = 0; c < static_cast<int>(stage.chunks.size()); ++c) {
    const ChunkWork w = PlanChunkWork(o, stage, c, unit);
    for (const PassWork* pass : {&w.f, &w.b, &w.w}) {
      Count(t.tp, pass->tp, m, tp);
      for (const UnitRead& r : pass->reads) {
        Count(t.dp, r.gathers, m, dp);
        Count(t.expert_dp, r.expert_gathers, m, expert_dp);
      }
      for (const ContextCall& c : pass->cp)
        CountWithReceives(t.cp, c.call, m, cp);
      for (const PlannedCall& c : pass->ep) CountWithReceives(t.ep, c, m, ep);
    }
  }
  Count(t.tp, StepTpCalls(o, stage), 1, tp);
  const DpCalls d = StepDpCalls(o, stage);
  Count(t.dp, d.per_microbatch, m, dp);
  Count(t.dp, d.per_step, 1, dp);
  Count(t.dp, d.update, 1, dp);
  const DpCalls e = StepExpertDpCalls(o, stage);
  Count(t.expert_dp, e.per_microbatch, m, expert_dp);
  Count(t.expert_dp, e.per_step, 1, expert_dp);
  Count(t.expert_dp, e.update, 1, expert_dp);
  // Without ZeRO the gradient norm sums the experts' squares over ep.
  if (o.zero == 0 && ep > 1 && stage.expert_parameters > 0) {
    Count(t.ep, {{CommOp::kAllReduce, 8, 1}}, 1, ep);
  }
  return t;
}

}  // namespace trellis
