// StepWork: what one step of a pipeline stage computes and communicates,
// per chunk and microbatch, in the units the step-time model costs: the
// compute seconds of F, B and W at a cluster's rates, and the tensor- and
// data-parallel collectives the trainer issues, as (op, bytes, calls) with
// the bytes the communicators count (CommStats). PlannedStepTraffic adds
// them up to one step's counters per group, which the trainer's own counts
// must equal (tests/plan/mpi/plan_traffic_test.cc); EstimateStep costs the
// same lists, so what is costed is what runs.
//
// Tensor parallelism (tp > 1), per block and microbatch: F and B each two
// all-reduces of the (N, C) activations, or under --sequence_parallel two
// all-gathers (before the column-parallel layers) and two reduce-scatters
// (replacing the row-parallel all-reduces) of the same buffers; full
// recompute reruns the block up to its MLP, one all-reduce (or two
// all-gathers and a reduce-scatter) more, in B and, under ZB-H1, in W. The
// first chunk's embedding: an all-reduce in F (a reduce-scatter, and an
// all-gather in B, with sequence parallelism); the last chunk's head, in F:
// d(ln_f)'s all-reduce (an all-gather of ln_f and a reduce-scatter of
// d(ln_f)) and the cross-entropy's max and sums per --loss_chunk_rows
// piece. Per step: the gradient norm (one double) and, with sequence
// parallelism, one all-reduce per norm gradient left partial over tp.
//
// Expert parallelism (ep > 1), per expert layer and microbatch: the
// forward's exchange of each expert's slot counts (E/ep int32 to each
// peer), of the routed rows (N·k rows of C, (ep-1)/ep of them to the other
// ranks: expected sizes, since routing decides them) and of the experts'
// outputs back; backward the rows' gradients both ways; full recompute
// reruns the forward's. Costed as ep-1 blocking sends each; not in
// PlannedStepTraffic (its bytes depend on the routing).
//
// Context parallelism (cp > 1), per block and microbatch, on N =
// micro_batch·T/cp rows (every per-token cost, the tp collectives and the
// pipeline transfers shrink by cp): the ring's cp-1 sends of the rank's
// (N, 2·Hkv·D/tp) key/value block forward, 2·(cp-1)+1 backward (the blocks
// and their gradients); all-to-all's four exchanges (qkv and the output,
// forward; their gradients, backward) of cp-1 sends of 1/cp of the buffer
// each, and under --document_mask an all-gather of the (B, T/cp) int32
// document starts per forward and backward; every send with its receive.
// Recompute reruns the forward's. The copies around them (qkv split and
// joined, the ring's merges, all-to-all's packing) cost element-wise time.
//
// Data parallelism (dp·cp > 1: the gradient replicas), per step: --zero=0
// all-reduces each gradient bucket once, --zero=1 reduce-scatters each (padded
// to a multiple of dp) and all-gathers the updated weights through it, --zero=2
// reduce-scatters each bucket once per microbatch and all-gathers once,
// --zero=3 reduce-scatters as level 2 and gathers no weights after the step;
// the loss average (one double), and under ZeRO the gradient norm's share (one
// double). Buckets are the trainer's (GradientBuckets::Layout over the stage's
// parameters in gradient-ready order; the tied embedding alone under ZeRO;
// under ZeRO-3 a bucket starting at each weight group).
//
// ZeRO-3 weight gathers (dp > 1), per chunk, pass and microbatch: F walks
// the chunk's gather units (the embedding, each block, the final norm and
// head) in order, B in reverse, and W (deferred weight gradients: ZB-H1)
// in reverse again; each unit all-gathers over dp the buckets holding its
// weights that the unit walked before it does not already hold
// (ShardedParameters::Acquire). The gather of the next unit is started as
// a unit's compute starts, one at a time on the dp link, so a pass waits
// for its first unit's gather and for whatever of each later unit's gather
// outlasts the compute of the unit before it (GatherExposedSeconds).
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_PLAN_STEP_WORK_H_
#define TRELLIS_TOOLS_PLAN_STEP_WORK_H_

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "tools/options/options.h"
#include "tools/plan/cluster.h"
#include "tools/plan/stage_facts.h"

namespace trellis {

// `calls` collectives `op` on buffers of `bytes` each.
struct PlannedCall {
  CommOp op = CommOp::kAllReduce;
  int64_t bytes = 0;
  int64_t calls = 1;
};

// Seconds `calls` take over `n` ranks on `link` (CollectiveSeconds each).
double CallSeconds(const std::vector<PlannedCall>& calls, int n,
                   const LinkSpec& link);

// One gather unit's share of a pass under ZeRO-3: its compute seconds
// and the dp all-gathers that make its weights whole.
struct UnitRead {
  double compute = 0;
  std::vector<PlannedCall> gathers;
  // Under expert parallelism, the experts' buckets, gathered over their
  // expert-data group.
  std::vector<PlannedCall> expert_gathers;
};

// Context-parallel transfers of a pass (sends, each with its receive)
// and the compute each of them can hide behind: a ring step's block of
// attention, 0 for one that waits.
struct ContextCall {
  PlannedCall call;
  double overlap = 0;  // seconds, per call
};

// One pass of one chunk for one microbatch.
struct PassWork {
  double compute = 0;           // seconds at the cluster's rates
  std::vector<PlannedCall> tp;  // blocking, inside the pass
  std::vector<ContextCall> cp;  // cp > 1: the attention's transfers
  // ep > 1: a mixture's token exchanges (expected sizes), blocking.
  std::vector<PlannedCall> ep;
  // ZeRO-3 (dp·cp > 1): the units in the order the pass reads them.
  std::vector<UnitRead> reads;
};
struct ChunkWork {
  PassWork f, b, w;
};

// The work of chunk `chunk` (virtual stage) of `stage` of resolved `o` per
// microbatch on `cluster`.
ChunkWork PlanChunkWork(const TrainOptions& o, const StageFacts& stage,
                        int chunk, const ClusterSpec& cluster);

// The seconds `pass`'s context-parallel transfers over `n` ranks add to
// its compute on `link`: per call, what of its time the overlapped compute
// does not hide, where transfers progress beside compute (`async`: NCCL);
// without (MPI on CPU ranks moves a message only inside MPI calls, and the
// ring's wait comes after its block's attention) the whole of it.
double ContextExposedSeconds(const PassWork& pass, int n, const LinkSpec& link,
                             bool async);

// A data-parallel group a collective runs over: its ranks and its link.
struct SyncGroup {
  int n = 1;
  LinkSpec link;
};

// ZeRO-3: the seconds `pass` waits for its weight gathers, the dense ones
// over `dp` and the experts' over `expert_dp` (the first unit's gather, and
// each later unit's beyond the previous unit's compute; every gather with
// `async` false), and the gathers' whole duration (`total`, if not null).
double GatherExposedSeconds(const PassWork& pass, const SyncGroup& dp,
                            const SyncGroup& expert_dp, bool async,
                            double* total = nullptr);

// The rates one microbatch's kernels of `o` are costed at on `cluster`: a
// block's GEMMs per pass (their FLOPs over their time), attention, and
// the element-wise kernels; by shape from the cluster's kernel cost table
// when it has one, else its peak × efficiencies and memory bandwidth. One
// per kind of block (ModelFamily::LayerClass: a mixture's dense and
// expert layers), in layer order, each with its first layer and count.
struct KernelRates {
  int64_t first_layer = 0, layers = 0;
  bool by_shape = false;
  double rows = 0;  // N = micro_batch · T / cp
  double gemm_forward = 0, gemm_backward_input = 0, gemm_backward_weight = 0;
  double attention = 0;    // FLOP/s
  double elementwise = 0;  // bytes/s
};
std::vector<KernelRates> PlanKernelRates(const TrainOptions& o,
                                         const ClusterSpec& cluster);

// Bytes of the (N, C) hidden state a pipeline transfer of `o` carries
// (N = micro_batch · T/cp; this rank's N/tp rows under sequence
// parallelism).
int64_t TransferBytes(const TrainOptions& o);

// The tp collectives of a step outside the pipeline (gradient norm, the
// partial norm gradients), and the dp ones: `per_microbatch` (ZeRO-2's
// reduce-scatters), `per_step` (the buckets' sync otherwise, and the loss
// average) and `update` (ZeRO-1 and 2's weight all-gathers, the sharded
// norm's sum, a mixture's routing report; ZeRO-3's gathers are the passes'
// `reads`).
std::vector<PlannedCall> StepTpCalls(const TrainOptions& o,
                                     const StageFacts& stage);
struct DpCalls {
  std::vector<PlannedCall> per_microbatch, per_step, update;
};
DpCalls StepDpCalls(const TrainOptions& o, const StageFacts& stage);
// The same for the experts' buckets under expert parallelism, over their
// expert-data group (no scalars: the loss and the norm sum over dp).
DpCalls StepExpertDpCalls(const TrainOptions& o, const StageFacts& stage);

// One step's counted tp, dp (over dp·cp ranks), cp, expert-data (the
// experts' buckets, over dp·cp / ep ranks) and ep traffic of `stage` (tp
// rank 0): what its communicators' CommStats add in a Trainer::Step. The
// ep group's token exchanges are exact in calls but their bytes are the
// expected 1/ep shares (routing decides the real ones).
struct PlannedTraffic {
  CommStats tp, dp, cp, expert_dp, ep;
};
PlannedTraffic PlannedStepTraffic(const TrainOptions& o,
                                  const StageFacts& stage);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_STEP_WORK_H_
