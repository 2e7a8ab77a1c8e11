// The memory plan's buffers between pipeline stages: a stage plans only the
// slots its schedule has live at once (parallel/pipeline_buffers.h), so
// under 1F1B its plan no longer grows with the step's microbatches. Plans
// need no communicator: each stage of a pp layout is declared here in one
// process.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "parallel/bootstrap.h"
#include "parallel/pipeline_buffers.h"
#include "tests/tools/tools_test_util.h"
#include "tools/trainer/stage_model.h"
#include "tools/trainer/stage_schedules.h"

namespace trellis {
namespace {

// The options of a pp-stage run with m microbatches of one window each.
TrainOptions PipelineOptions(ScheduleKind schedule, int64_t pp, int64_t m,
                             int64_t virtual_stages = 1) {
  TrainOptions o = test::TinyOptions("unused.h5");
  o.model.n_layer = 8;
  o.model.d_model = 32;
  o.model.n_head = 4;
  o.schedule = schedule;
  o.pp = pp;
  o.virtual_stages = virtual_stages;
  o.micro_batch_size = 1;
  o.global_batch_size = m;
  const absl::Status resolved = o.Resolve(static_cast<int>(pp), 256);
  EXPECT_TRUE(resolved.ok()) << resolved;
  return o;
}

// Stage `stage`'s training plan.
MemoryPlan PlanOf(const TrainOptions& o, int stage) {
  ParallelContext single = ParallelContext::Single();
  MeshCoord coord;
  coord.p = stage;
  StageModel model(o, single.groups(), coord, Device::Cpu(), DType::kF32);
  return model.PlanMemory();
}

// Bytes of one activation between stages.
size_t Hidden(const TrainOptions& o) {
  return static_cast<size_t>(o.micro_batch_size * o.model.seq_len *
                             o.model.d_model) *
         sizeof(float);
}

TEST(PipelineBufferPlanTest, OneFOneBPlanDoesNotGrowWithTheMicrobatches) {
  for (int stage = 0; stage < 4; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const MemoryPlan few =
        PlanOf(PipelineOptions(ScheduleKind::k1F1B, 4, 4), stage);
    const MemoryPlan many =
        PlanOf(PipelineOptions(ScheduleKind::k1F1B, 4, 64), stage);
    EXPECT_EQ(few.pipeline, many.pipeline);
    EXPECT_GT(many.pipeline, 0u);
    EXPECT_EQ(few.activations, many.activations);
    // The middle stages hold no token batch, whose size is m's: all equal.
    if (stage == 1 || stage == 2) {
      EXPECT_EQ(few.total(), many.total());
    }
    // One buffer per microbatch, kind and side was 4·m (2·m at the ends).
    EXPECT_LT(many.pipeline,
              64 * Hidden(PipelineOptions(ScheduleKind::k1F1B, 4, 64)));
  }
}

TEST(PipelineBufferPlanTest, GPipePlanGrowsWithTheMicrobatches) {
  // GPipe keeps every microbatch's state until its backward; its buffers
  // between stages stay bounded like every schedule's.
  for (int stage = 0; stage < 4; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const MemoryPlan few =
        PlanOf(PipelineOptions(ScheduleKind::kGPipe, 4, 4), stage);
    const MemoryPlan many =
        PlanOf(PipelineOptions(ScheduleKind::kGPipe, 4, 64), stage);
    EXPECT_EQ(many.activations, 16 * few.activations);
    EXPECT_GT(many.total(), few.total());
    EXPECT_LT(many.pipeline,
              64 * Hidden(PipelineOptions(ScheduleKind::kGPipe, 4, 64)));
  }
}

// The plan counts exactly the slots the schedule needs (training widened by
// a forward-only pass), each a (B·T, C) buffer.
TEST(PipelineBufferPlanTest, PlanCountsTheScheduleSlots) {
  for (ScheduleKind kind :
       {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
        ScheduleKind::kInterleaved1F1B, ScheduleKind::kZeroBubbleH1}) {
    const int v = kind == ScheduleKind::kInterleaved1F1B ? 2 : 1;
    const TrainOptions o = PipelineOptions(kind, 4, 16, v);
    for (int stage = 0; stage < 4; ++stage) {
      PipelineBufferSlots slots =
          PipelineBufferSlots::Assign(BuildSchedule(kind, stage, 4, 16, v), v);
      slots.Widen(PipelineBufferSlots::Assign(
          BuildForwardOnlySchedules(4, 16, v)[stage], v));
      size_t want = 0;
      for (int k = 0; k < kNumPipelineBuffers; ++k) {
        for (int u = 0; u < v; ++u) {
          want += slots.count(static_cast<PipelineBuffer>(k), u) * Hidden(o);
        }
      }
      EXPECT_EQ(PlanOf(o, stage).pipeline, want)
          << ScheduleKindName(kind) << " stage " << stage << ": "
          << slots.CountsString();
    }
  }
}

// The numbers docs/performance.md quotes: GPT-2 124M (configs/gpt2-124m.flags:
// micro batch 8 of 1024 tokens, d_model 768, float32 on CPU) over pp 4
// under 1F1B, the first and a middle stage, before (one buffer per
// microbatch, kind and side: the old plan's 2·m·hidden per side) and after.
TEST(PipelineBufferPlanTest, GptTwoSmallTable) {
  std::printf(
      "| m | stage | before | after | buffers |\n|---|---|---|---|---|\n");
  size_t after_at_four[2] = {0, 0};
  for (int64_t m : {4, 16, 64}) {
    TrainOptions o = test::TinyOptions("unused.h5");
    o.model.n_layer = 12;
    o.model.n_head = 12;
    o.model.d_model = 768;
    o.model.seq_len = 1024;
    o.micro_batch_size = 8;
    o.global_batch_size = 8 * m;
    o.pp = 4;
    ASSERT_TRUE(o.Resolve(4, 50257).ok());
    for (int stage : {0, 1}) {
      const size_t hidden = Hidden(o);
      const size_t before = (stage == 0 ? 2 : 4) * m * hidden;
      const size_t after = PlanOf(o, stage).pipeline;
      std::printf("| %lld | %d | %s | %s | %zu |\n", static_cast<long long>(m),
                  stage, Readable(before).c_str(), Readable(after).c_str(),
                  after / hidden);
      if (m == 4) after_at_four[stage] = after;
      EXPECT_EQ(after, after_at_four[stage]) << "m=" << m;
      if (m >= 16) {
        EXPECT_LT(after, before);
      }
    }
  }
}

// Schedules built once for every stage (the planner's way) give each stage
// the list, slots and plan it builds on its own (the trainer's way).
TEST(PipelineBufferPlanTest, SharedStageSchedulesEqualEachStagesOwn) {
  ParallelContext single = ParallelContext::Single();
  for (const TrainOptions& o :
       {PipelineOptions(ScheduleKind::k1F1B, 4, 8),
        PipelineOptions(ScheduleKind::kGPipe, 2, 6),
        PipelineOptions(ScheduleKind::kZeroBubbleH1, 4, 8),
        PipelineOptions(ScheduleKind::kInterleaved1F1B, 2, 4, 2)}) {
    const StageSchedules shared = BuildStageSchedules(o);
    ASSERT_EQ(shared.actions.size(), static_cast<size_t>(o.pp));
    for (int p = 0; p < o.pp; ++p) {
      MeshCoord coord;
      coord.p = p;
      const StageModel own(o, single.groups(), coord, Device::Cpu(),
                           DType::kF32);
      const StageModel given(o, single.groups(), coord, Device::Cpu(),
                             DType::kF32, &shared);
      const std::string what =
          absl::StrCat(ScheduleKindName(o.schedule), " pp", o.pp, " v",
                       o.virtual_stages, " stage ", p);
      EXPECT_EQ(given.schedule(), own.schedule()) << what;
      const MemoryPlan a = own.PlanMemory();
      const MemoryPlan b = given.PlanMemory();
      EXPECT_EQ(b.pipeline, a.pipeline) << what;
      EXPECT_EQ(b.activations, a.activations) << what;
      EXPECT_EQ(b.total(), a.total()) << what;
      EXPECT_EQ(shared.planned_slots[p]->CountsString(),
                PlannedBufferSlots(own.schedule(),
                                   BuildForwardOnlySchedules(
                                       static_cast<int>(o.pp),
                                       static_cast<int>(o.microbatches()),
                                       static_cast<int>(o.virtual_stages))[p],
                                   static_cast<int>(o.virtual_stages))
                    .CountsString())
          << what;
      EXPECT_GT(a.pipeline, 0u) << what;
    }
  }
}

}  // namespace
}  // namespace trellis
