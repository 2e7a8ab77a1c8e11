// StageFacts: what one pipeline stage of a layout holds and computes, read
// from the trainer's own classes. The memory plan is StageModel::PlanMemory
// (the figure trellis-train checks before it allocates, ShardOverDp applied
// for the ZeRO level) for that stage's schedule; the chunks and their
// per-layer GEMM weights come from the model family's declarations, the
// ZeRO-3 gather units from the chunks' own GatherUnits. Nothing
// is allocated: StageModel is built over ShapeOnlyGroups and only declares.
//
// Thread safety: pure functions of their arguments.
#ifndef TRELLIS_TOOLS_PLAN_STAGE_FACTS_H_
#define TRELLIS_TOOLS_PLAN_STAGE_FACTS_H_

#include <cstdint>
#include <vector>

#include "tools/options/options.h"
#include "tools/trainer/memory_plan.h"
#include "tools/trainer/stage_schedules.h"
#include "transformer/chunk_options.h"

namespace trellis {

struct StageFacts {
  MemoryPlan memory;  // tp rank 0 of the stage, after ZeRO
  // The whole gradients' bytes (before ZeRO): what the dp sync moves.
  int64_t gradient_bytes = 0;
  std::vector<ChunkPlan> chunks;  // by virtual stage
  int64_t local_parameters = 0;   // parameter elements this rank holds
  // Bytes of each gradient bucket the dp sync moves, in the order the
  // trainer builds them (GradientBuckets::Layout; padded to a multiple of
  // dp·cp elements under ZeRO, the tied embedding alone). The sync spans
  // the gradient replicas: dp·cp ranks.
  std::vector<int64_t> buckets;
  // Under expert parallelism, the experts' buckets (GradientSync: their
  // own, after the dense ones), synced over the expert-data group of
  // dp·cp / ep ranks and padded to a multiple of that under ZeRO; and the
  // expert parameter elements this rank holds (in local_parameters too).
  std::vector<int64_t> expert_buckets;
  int64_t expert_parameters = 0;
  // The most experts any layer of the model routes over (every stage's:
  // the trainer's routing report spans them all; 0 without a mixture).
  int64_t routed_experts = 0;
  // Bytes of each gradient the chunks leave partial over tp (the norms'
  // under --sequence_parallel), summed over tp once per step: whole, or
  // under ZeRO the part in the rank's own block of its bucket (gradients
  // wholly outside it are not listed).
  std::vector<int64_t> tp_partial;
  // --zero=3 with dp·cp > 1 (empty otherwise): the bytes of each bucket's
  // weights as gathered (padded, in the values' dtype; `buckets`' order,
  // then `expert_buckets`': those from index buckets.size() on are
  // gathered over the expert-data group) and, per chunk, its gather units
  // (ModelChunk::GatherUnits, in forward order) as the distinct buckets
  // each unit's parameters lie in.
  std::vector<int64_t> gather_bytes;
  std::vector<std::vector<std::vector<int>>> unit_buckets;
};

// The device and element type a run of `options` computes in: a CUDA GPU
// with bfloat16 under --precision=bf16, else float32 (on the CPU always).
struct PlanDevice {
  DeviceType device = DeviceType::kCPU;
  DType dtype = DType::kF32;
};
PlanDevice PlanDeviceOf(const TrainOptions& options);

// Every stage of `options`' layout, by stage, for the ranks of dp·cp rank
// `replica` (0 unless given: which ZeRO block's tp sums are listed);
// `schedules`, when given, are BuildStageSchedules(options) (else built
// here). REQUIRES: `options` resolved (TrainOptions::Resolve) and its
// schedule shape valid; 0 ≤ replica < dp·cp.
std::vector<StageFacts> PlanStages(const TrainOptions& options,
                                   const StageSchedules* schedules = nullptr,
                                   int replica = 0);

// The local shapes of block `layer`'s matrix weights on a tp rank, as
// declared (the dense layers' (in, out) on GPT-2; the planner costs each
// as a layer of that many inputs and outputs), with the share of a
// microbatch's rows each runs on and how many such GEMMs a rank runs: 1
// and 1, or for a mixture's experts the rows routed to one on average,
// ep·k/E of the ep group's tokens, and the E/ep experts the rank holds.
struct GemmShape {
  int64_t in = 0, out = 0;
  double rows = 1;
  int64_t count = 1;
};
std::vector<GemmShape> BlockGemmShapes(const TrainOptions& options,
                                       int64_t layer = 0);

// Matrix elements block `layer`'s GEMMs multiply per row of the
// microbatch on a tp rank (Σ count·rows·in·out of BlockGemmShapes: 2 FLOPs
// per element and row forward).
double BlockGemmElements(const TrainOptions& options, int64_t layer = 0);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_STAGE_FACTS_H_
