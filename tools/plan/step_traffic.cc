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

DpCalls StepDpCalls(const TrainOptions& o, const StageFacts& stage) {
  DpCalls d;
  if (o.gradient_replicas() == 1) return d;
  for (int64_t bytes : stage.buckets) {
    switch (o.zero) {
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
  d.per_step.push_back({CommOp::kAllReduce, 8, 1});  // the loss average
  // Sharded gradients: the norm is summed over dp too.
  if (o.zero > 0) d.update.push_back({CommOp::kAllReduce, 8, 1});
  return d;
}

namespace {

void Count(CommStats& stats, const std::vector<PlannedCall>& calls,
           int64_t times, int n) {
  for (const PlannedCall& c : calls) {
    const int i = static_cast<int>(c.op);
    stats.calls[i] += times * c.calls;
    stats.bytes[i] += times * c.calls * c.bytes;
    stats.wire_bytes[i] += times * c.calls * WireBytes(c.op, c.bytes, n);
  }
}

}  // namespace

PlannedTraffic PlannedStepTraffic(const TrainOptions& o,
                                  const StageFacts& stage) {
  PlannedTraffic t;
  const int64_t m = o.microbatches();
  const int tp = static_cast<int>(o.tp), cp = static_cast<int>(o.cp);
  const int dp = static_cast<int>(o.gradient_replicas());
  // Rates do not change what is sent.
  ClusterSpec unit;
  unit.peak_flops = unit.memory_bandwidth = 1;
  unit.gemm_efficiency = unit.attention_efficiency = 1;
  for (int c = 0; c < static_cast<int>(stage.chunks.size()); ++c) {
    const ChunkWork w = PlanChunkWork(o, stage, c, unit);
    for (const PassWork* pass : {&w.f, &w.b, &w.w}) {
      Count(t.tp, pass->tp, m, tp);
      for (const UnitRead& r : pass->reads) Count(t.dp, r.gathers, m, dp);
      for (const ContextCall& c : pass->cp) {
        Count(t.cp, {c.call}, m, cp);
        if (c.call.op != CommOp::kSend) continue;
        // Each send has its receive, of as many bytes.
        PlannedCall recv = c.call;
        recv.op = CommOp::kRecv;
        Count(t.cp, {recv}, m, cp);
      }
    }
  }
  Count(t.tp, StepTpCalls(o, stage), 1, tp);
  const DpCalls d = StepDpCalls(o, stage);
  Count(t.dp, d.per_microbatch, m, dp);
  Count(t.dp, d.per_step, 1, dp);
  Count(t.dp, d.update, 1, dp);
  return t;
}

}  // namespace trellis
