// Activation recompute and the memory plan, through whole training runs:
// every recompute mode trains to the same bits under every schedule kind,
// the plan printed at start accounts for what the run allocates, and a run
// that cannot fit fails at start with the size it would need.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/memory_arena.h"
#include "framework/tensor.h"
#include "parallel/bootstrap.h"
#include "tests/tools/tools_test_util.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

class TrainerMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/tokens.h5";
    test::WriteTokenFile(data_, test::kByteVocab, 20000);
  }

  // A model big enough that the plan's categories are far above the
  // per-step bookkeeping (loss scalars, token batches).
  TrainOptions Options() const {
    TrainOptions o = test::TinyOptions(data_);
    o.model.d_model = 64;
    o.model.n_head = 4;
    o.model.seq_len = 64;
    o.steps = 3;
    return o;
  }

  std::unique_ptr<Trainer> Make(const TrainOptions& o) {
    return test::MakeTrainer(o, context_);
  }

  ParallelContext context_ = ParallelContext::Single();
  std::string dir_, data_;
};

TEST_F(TrainerMemoryTest, RecomputeModesTrainToTheSameBits) {
  for (ScheduleKind schedule :
       {ScheduleKind::k1F1B, ScheduleKind::kZeroBubbleH1}) {
    TrainOptions o = Options();
    o.schedule = schedule;
    std::unique_ptr<Trainer> reference = Make(o);
    ASSERT_NE(reference, nullptr);
    ASSERT_TRUE(reference->Run().ok());
    for (Recompute recompute : {Recompute::kSelective, Recompute::kFull}) {
      o.recompute = recompute;
      std::unique_ptr<Trainer> trainer = Make(o);
      ASSERT_NE(trainer, nullptr);
      ASSERT_TRUE(trainer->Run().ok());
      EXPECT_EQ(trainer->losses(), reference->losses())
          << schedule << ", --recompute=" << recompute;
      const auto& a = trainer->model().params().all();
      const auto& b = reference->model().params().all();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(std::memcmp(a[i]->value.raw(), b[i]->value.raw(),
                              a[i]->value.nbytes()),
                  0)
            << a[i]->name << " (" << schedule << ", " << recompute << ")";
      }
    }
  }
}

// With --document_mask and --eod_mask_loss too: their per-microbatch
// tensors (doc starts, loss weights) are planned, so none falls back.
TEST_F(TrainerMemoryTest, PlanAccountsForWhatTrainingAllocates) {
  const std::pair<Recompute, bool> cases[] = {{Recompute::kNone, false},
                                              {Recompute::kSelective, false},
                                              {Recompute::kFull, false},
                                              {Recompute::kNone, true},
                                              {Recompute::kFull, true}};
  for (const auto& [recompute, documents] : cases) {
    for (ScheduleKind schedule :
         {ScheduleKind::kGPipe, ScheduleKind::kZeroBubbleH1}) {
      TrainOptions o = Options();
      o.recompute = recompute;
      o.schedule = schedule;
      o.document_mask = o.eod_mask_loss = documents;
      const size_t before = StorageBytesLive(DeviceType::kCPU);
      std::unique_ptr<Trainer> trainer = Make(o);
      ASSERT_NE(trainer, nullptr);
      ASSERT_TRUE(trainer->Step().ok());
      const size_t used = StorageBytesLive(DeviceType::kCPU) - before;
      const size_t planned = trainer->memory_plan().total();
      // What the plan leaves out: the token file and the step's token
      // batches, a few KiB here.
      const size_t unplanned = 256 << 10;
      SCOPED_TRACE(documents ? "document flags" : "no document flags");
      EXPECT_LE(planned, used) << recompute << ", " << schedule;
      EXPECT_LE(used, planned + unplanned)
          << recompute << ", " << schedule << ": "
          << trainer->memory_plan().Format();
      // All of it came from the arena, which the plan sized.
      const MemoryArena::Stats arena = trainer->arena().stats();
      EXPECT_EQ(arena.fallbacks, 0u) << recompute << ", " << schedule;
      EXPECT_GE(arena.peak_in_use, planned);
      EXPECT_EQ(trainer->arena().capacity(),
                ArenaCapacity(trainer->memory_plan(), SIZE_MAX));
    }
  }
}

// --zero=3 on one rank: the weights' "gathers" are copies of the owned
// blocks, so every recompute mode under GPipe and ZB-H1 trains to the bits
// of --zero=2 (the same gradient accumulation), through weights released
// after each read; the arena's peak lies within the plan (the owned
// weights plus two gather units, none of it outside the arena) and near it.
TEST_F(TrainerMemoryTest, ZeroThreeTrainsToZeroTwoBitsWithinThePlan) {
  for (ScheduleKind schedule :
       {ScheduleKind::kGPipe, ScheduleKind::kZeroBubbleH1}) {
    for (Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
      SCOPED_TRACE(::testing::Message() << schedule << ", " << recompute);
      TrainOptions o = Options();
      o.schedule = schedule;
      o.recompute = recompute;
      o.dp_bucket_mb = 0.05;
      o.zero = 2;
      std::unique_ptr<Trainer> reference = Make(o);
      ASSERT_NE(reference, nullptr);
      ASSERT_TRUE(reference->Run().ok());
      o.zero = 3;
      std::unique_ptr<Trainer> trainer = Make(o);
      ASSERT_NE(trainer, nullptr);
      ASSERT_TRUE(trainer->Run().ok());
      EXPECT_EQ(trainer->losses(), reference->losses());
      // Between computes no weight is whole.
      for (const Parameter* p : trainer->model().params().all()) {
        EXPECT_FALSE(p->value.defined()) << p->name;
      }
      const MemoryPlan& plan = trainer->memory_plan();
      // One rank shards nothing: its block is the whole, plus the units.
      EXPECT_GT(plan.weights, reference->memory_plan().weights);
      const MemoryArena::Stats arena = trainer->arena().stats();
      EXPECT_EQ(arena.fallbacks, 0u);
      const double planned = static_cast<double>(plan.total());
      EXPECT_LE(arena.peak_in_use, plan.total() + (256 << 10)) << plan.Format();
      EXPECT_GE(static_cast<double>(arena.peak_in_use), 0.95 * planned)
          << plan.Format();
    }
  }
}

TEST_F(TrainerMemoryTest, LlamaPlanAccountsForWhatTrainingAllocates) {
  // Grouped-query attention, an untied head and RoPE tables, with and
  // without --document_mask --eod_mask_loss: the plan still covers what a
  // step allocates, and every recompute mode trains to the same bits.
  for (const bool documents : {false, true}) {
    for (ScheduleKind schedule :
         {ScheduleKind::kGPipe, ScheduleKind::kZeroBubbleH1}) {
      SCOPED_TRACE(documents ? "document flags" : "no document flags");
      std::vector<double> reference;
      for (Recompute recompute :
           {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        TrainOptions o = Options();
        o.document_mask = o.eod_mask_loss = documents;
        o.model.family = ModelFamilyKind::kLlama;
        o.model.n_kv_heads = 2;
        o.model.ffn_hidden = 160;
        o.model.tie_embeddings = false;
        o.recompute = recompute;
        o.schedule = schedule;
        const size_t before = StorageBytesLive(DeviceType::kCPU);
        std::unique_ptr<Trainer> trainer = Make(o);
        ASSERT_NE(trainer, nullptr);
        ASSERT_TRUE(trainer->Step().ok());
        const size_t used = StorageBytesLive(DeviceType::kCPU) - before;
        const size_t planned = trainer->memory_plan().total();
        EXPECT_LE(planned, used) << recompute << ", " << schedule;
        EXPECT_LE(used, planned + (256 << 10))
            << recompute << ", " << schedule << ": "
            << trainer->memory_plan().Format();
        EXPECT_EQ(trainer->arena().stats().fallbacks, 0u);
        ASSERT_TRUE(trainer->Run().ok());
        if (recompute == Recompute::kNone) {
          reference = trainer->losses();
        } else {
          EXPECT_EQ(trainer->losses(), reference)
              << schedule << ", " << recompute;
        }
      }
    }
  }
}

TEST_F(TrainerMemoryTest, ParametersGradientsAndStatesLiveInOneArena) {
  TrainOptions o = Options();
  o.global_batch_size = 8;
  o.micro_batch_size = 2;
  std::unique_ptr<Trainer> trainer = Make(o);
  ASSERT_NE(trainer, nullptr);
  // Before the first step: parameters, gradient buckets and moments.
  const MemoryPlan& plan = trainer->memory_plan();
  const size_t before_step = trainer->arena().stats().in_use;
  EXPECT_GE(before_step, plan.weights + plan.gradients + plan.optimizer);
  EXPECT_LE(before_step, plan.weights + plan.gradients + plan.optimizer +
                             plan.workspace + (64 << 10));
  ASSERT_TRUE(trainer->Step().ok());
  ASSERT_TRUE(trainer->Step().ok());
  const size_t after_steps = trainer->arena().stats().in_use;
  // The microbatch states and pipeline buffers joined them, and stay pooled
  // for the next step.
  EXPECT_GE(after_steps, plan.total());
  for (const Parameter* p : trainer->model().params().all()) {
    for (const Tensor* t : {&p->value, &p->grad}) {
      ASSERT_TRUE(t->defined()) << p->name;
      EXPECT_TRUE(trainer->arena().Contains(t->raw())) << p->name;
    }
  }
  EXPECT_EQ(trainer->arena().stats().fallbacks, 0u);
}

TEST_F(TrainerMemoryTest, RecomputeShrinksThePlannedActivations) {
  size_t activations[3];
  const Recompute modes[3] = {Recompute::kNone, Recompute::kSelective,
                              Recompute::kFull};
  for (int i = 0; i < 3; ++i) {
    TrainOptions o = Options();
    o.recompute = modes[i];
    std::unique_ptr<Trainer> trainer = Make(o);
    ASSERT_NE(trainer, nullptr);
    activations[i] = trainer->memory_plan().activations;
  }
  EXPECT_GT(activations[0], activations[1]);
  EXPECT_GT(activations[1], activations[2]);
}

TEST_F(TrainerMemoryTest, TooLargeARunFailsAtStartWithTheSizeItNeeds) {
  TrainOptions o = Options();
  o.memory_budget_gb = 1e-4;  // About 100 KiB.
  ResetStorageBytesPeak(DeviceType::kCPU);
  const size_t live = StorageBytesLive(DeviceType::kCPU);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(o, context_.groups(), context_.coord());
  ASSERT_FALSE(trainer.ok());
  // It failed before allocating the model (megabytes here): only the
  // token file's header and a few scalars were ever live.
  EXPECT_LE(StorageBytesPeak(DeviceType::kCPU), live + (64 << 10));
  EXPECT_TRUE(absl::IsResourceExhausted(trainer.status())) << trainer.status();
  const std::string message(trainer.status().message());
  EXPECT_NE(message.find("the run needs"), std::string::npos) << message;
  EXPECT_NE(message.find("activations"), std::string::npos) << message;
  EXPECT_NE(message.find("--micro_batch_size=4"), std::string::npos) << message;
  EXPECT_NE(message.find("--recompute=selective or full"), std::string::npos)
      << message;
}

TEST_F(TrainerMemoryTest, BadPrecisionAndRecomputeFlagsAreRefused) {
  TrainOptions o = Options();
  o.precision = Precision::kBf16;  // Needs --device=cuda.
  EXPECT_FALSE(
      Trainer::Create(o, context_.groups(), context_.coord()).status().ok());
  o = Options();
  const absl::Status status = o.ApplyFlagString("--recompute=some");
  EXPECT_NE(std::string(status.message()).find("--recompute=some"),
            std::string::npos)
      << status;
}

}  // namespace
}  // namespace trellis
