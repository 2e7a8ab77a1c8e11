// The evaluator builds only what a forward pass needs and scores a
// checkpoint as the trainer that wrote it does.
#include "tools/trainer/evaluator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/tools/tools_test_util.h"
#include "tools/trainer/checkpoint_dir.h"

namespace trellis {
namespace {

class EvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/tokens.h5";
    test::WriteTokenFile(data_, test::kByteVocab);
  }

  // Trains the tiny model a few steps and saves it; returns the trainer.
  std::unique_ptr<Trainer> Train(bool document_mask = false) {
    TrainOptions o = test::TinyOptions(data_);
    o.document_mask = document_mask;
    o.steps = 3;
    o.save_dir = dir_ + "/ckpt";
    std::unique_ptr<Trainer> trainer = test::MakeTrainer(o, context_);
    if (trainer == nullptr) return nullptr;
    EXPECT_TRUE(trainer->Run().ok());
    return trainer;
  }

  TrainOptions EvalOptions() const {
    TrainOptions o;
    o.data = data_;
    o.val_fraction = 0;
    o.micro_batch_size = 3;
    o.global_batch_size = 3;
    o.steps = 1;
    o.eval_every = 0;
    return o;
  }

  std::string dir_, data_;
  ParallelContext context_ = ParallelContext::Single();
};

TEST_F(EvaluatorTest, ScoresACheckpointAsItsTrainerDoes) {
  std::unique_ptr<Trainer> trainer = Train();
  ASSERT_NE(trainer, nullptr);
  absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator = Evaluator::Create(
      EvalOptions(), context_.groups(), context_.coord(), *step);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  // Seven windows: two whole microbatches of three and one padded one.
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < 7; ++i) starts.push_back(i * 40);
  const absl::StatusOr<double> mine = (*evaluator)->Evaluate(starts);
  const absl::StatusOr<double> theirs = trainer->Evaluate(starts);
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  EXPECT_TRUE(std::isfinite(*mine));
  // The trainer's microbatches hold four windows, the evaluator's three:
  // the same per-token losses, summed in another grouping.
  EXPECT_NEAR(*mine, *theirs, 1e-6 * *theirs);
}

// A checkpoint trained with --document_mask is scored with the mask (the
// flag comes from the checkpoint), as its trainer scores it.
TEST_F(EvaluatorTest, ScoresADocumentMaskedCheckpointWithTheMask) {
  std::unique_ptr<Trainer> trainer = Train(/*document_mask=*/true);
  ASSERT_NE(trainer, nullptr);
  absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator = Evaluator::Create(
      EvalOptions(), context_.groups(), context_.coord(), *step);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  // Twelve windows one after another: documents of 40 to 100 tokens end
  // inside several of them.
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < 12; ++i) starts.push_back(i * 16);
  const absl::StatusOr<double> mine = (*evaluator)->Evaluate(starts);
  const absl::StatusOr<double> theirs = trainer->Evaluate(starts);
  ASSERT_TRUE(mine.ok() && theirs.ok());
  EXPECT_NEAR(*mine, *theirs, 1e-6 * *theirs);
}

TEST_F(EvaluatorTest, HoldsNoGradientsOrOptimizerState) {
  ASSERT_NE(Train(), nullptr);
  absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator = Evaluator::Create(
      EvalOptions(), context_.groups(), context_.coord(), *step);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  const MemoryPlan& plan = (*evaluator)->memory_plan();
  EXPECT_EQ(plan.gradients, 0u);
  EXPECT_EQ(plan.optimizer, 0u);
  EXPECT_GT(plan.weights, 0u);
  for (const Parameter* p : (*evaluator)->model().params().all()) {
    EXPECT_TRUE(p->value.defined()) << p->name;
    EXPECT_FALSE(p->grad.defined()) << p->name << " has a gradient";
  }
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < 9; ++i) starts.push_back(i * 17);
  ASSERT_TRUE((*evaluator)->Evaluate(starts).ok());
  // Everything evaluation touched came from the plan's arena.
  const MemoryArena::Stats stats = (*evaluator)->arena().stats();
  EXPECT_EQ(stats.fallbacks, 0u);
  EXPECT_LE(stats.peak_in_use, (*evaluator)->arena().capacity());
}

TEST_F(EvaluatorTest, RefusesDataOfAnotherVocabulary) {
  ASSERT_NE(Train(), nullptr);
  absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
  ASSERT_TRUE(step.ok());
  TrainOptions o = EvalOptions();
  o.data = dir_ + "/gpt2.h5";
  test::WriteTokenFile(o.data, test::kGpt2Vocab);
  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator =
      Evaluator::Create(o, context_.groups(), context_.coord(), *step);
  ASSERT_FALSE(evaluator.ok());
  EXPECT_THAT(std::string(evaluator.status().message()),
              ::testing::HasSubstr("vocab_size=257"));
}

}  // namespace
}  // namespace trellis
