// The predicted time of one optimizer step of a layout on a cluster, split
// into what it is spent on.
//
// Per chunk and microbatch, F, B and W cost their FLOPs at the cluster's
// GEMM and attention rates plus their element-wise bytes at its memory
// bandwidth (each kernel at its shape's rate when the cluster has a kernel
// cost table, tools/plan/kernel_costs.h), plus the tensor-parallel
// collectives they issue (blocking, in the compute), as
// tools/plan/step_work.h lists them:
//   GEMM FLOPs  2·N·(the block's local matrix elements) per block and pass
//               (F; B the input gradients; W the weight gradients), and the
//               fused LM head's 3 GEMMs of 2·N·(V/tp)·C in the last F; a
//               mixture's expert layer counts its router and, per expert
//               the rank holds (E/ep), the ep·k/E of the rows routed to it
//               on average (so k experts' work per token), each kind of
//               layer (dense, expert) at its own shapes, plus the
//               dispatch's and combine's copies of the N·k routed rows;
//   attention   2·N·T·C/tp per block forward (the causal half of QKᵀ and
//               AV), twice that backward;
//   element-wise the norms and residuals on N rows (N/tp under
//               --sequence_parallel), the MLP activation on N·4C/tp;
//   recompute   selective reruns attention and the MLP activation in B,
//               full the whole block forward; ZB-H1 reruns it again in W;
//   ZB-H1       runs W apart from B: the blocks' B and W compute cost
//               ClusterSpec::split_backward_ratio times the fused ones.
// (N = micro_batch·T rows; micro_batch·T/cp under context parallelism,
// where attention stays 2·N·T·C/tp, the rank's 1/cp share.)
//   cp          the ring sends cp-1 key/value blocks per block forward,
//               each while the block in hand is attended (1/cp of the
//               attention: only the send time beyond it is exposed), and
//               backward as many again and cp-1 gradient blocks beside the
//               blocks' backward (two sends in each middle step) plus the
//               last gradient, which waits; all-to-all four exchanges per
//               block (two each way) of cp-1 sends each, all waited for;
//               recompute reruns the forward's transfers with attention.
//               Attention is costed at the ring's block shape (T/cp) or at
//               heads/cp on the whole window (all-to-all).
//   ep          per expert layer, forward: the counts, the routed rows
//               out and the experts' outputs back; backward the two
//               gradients (expected sizes: 1/ep of the N·k rows to each
//               peer), blocking, on the ep group's link.
// The pipeline simulator (SimulateSchedules) runs the stages' schedules
// with those costs and the α-β cost of each activation or gradient
// transfer (N/tp rows under sequence parallelism); the data-parallel
// collectives over the dp·cp gradient replicas (step_work.h: all-reduces,
// or ZeRO's reduce-scatters, once per step or under ZeRO-2 and 3 once per
// microbatch) start as the W that produces their gradients ends (on a cluster
// with asynchronous collectives; otherwise when the pipeline ends) and go one
// after another, and with pp > 1 the tied embedding's gradient is summed
// between the first and last stage; then AdamW (memory-bound: 28 bytes per
// owned element, 30 with bf16 weights) and, under ZeRO, the all-gathers of
// the weights (ZeRO-1 and 2). Under ZeRO-3 each pass also waits for the
// part of its weight gathers that its compute does not hide (step_work.h:
// the first unit's gather, and any later one's beyond the unit before it);
// the gathers are not queued behind the gradient sync on the dp link.
// AdamW's bytes go at the table's AdamW rate when there is one.
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_PLAN_STEP_COST_H_
#define TRELLIS_TOOLS_PLAN_STEP_COST_H_

#include <vector>

#include "absl/status/statusor.h"
#include "tools/options/options.h"
#include "tools/plan/cluster.h"
#include "tools/plan/stage_facts.h"

namespace trellis {

// One step's time in seconds. compute + tp_comm + cp_comm + ep_comm +
// dp_gather + bubble + pp_comm is the pipeline's makespan (the busiest stage's
// work and its waits); dp_comm is the gradient sync left after it, optimizer
// the update (and ZeRO's weight all-gathers). They add up to `step`.
struct StepEstimate {
  double compute = 0;    // the busiest stage's F, B and W without tp comm
  double tp_comm = 0;    // its tensor-parallel all-reduces
  double cp_comm = 0;    // its context-parallel transfers not hidden by
                         // attention
  double ep_comm = 0;    // its experts' token exchanges
  double dp_gather = 0;  // its ZeRO-3 weight gathers not hidden by compute
  double bubble = 0;     // its idle time, transfers taken as free
  double pp_comm = 0;    // what the transfers add to the makespan
  double dp_comm = 0;    // gradient sync not hidden behind backward, and
                         // the tied embedding's sum over the first and
                         // last stage
  double optimizer = 0;  // AdamW, norm, ZeRO's weight all-gathers
  double step = 0;
  double dp_comm_total = 0;    // the sync's whole duration, hidden or not
  double dp_gather_total = 0;  // the ZeRO-3 gathers' whole duration
  double bubble_fraction = 0;  // the simulation's mean idle share of stages
};

// The estimate for resolved `options` whose stages are `stages`
// (PlanStages); `schedules`, when given, are BuildStageSchedules(options)
// (else built here). InvalidArgument if the simulation fails (it should
// not for schedules the validator accepted).
absl::StatusOr<StepEstimate> EstimateStep(
    const TrainOptions& options, const std::vector<StageFacts>& stages,
    const ClusterSpec& cluster, const StageSchedules* schedules = nullptr);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_STEP_COST_H_
