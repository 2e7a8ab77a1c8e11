// The evaluator builds only what a forward pass needs and scores a
// checkpoint as the trainer that wrote it does; a blend is scored file by
// file and weighted as the trainer's validation weighs it.
#include "tools/trainer/evaluator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/token_dataset.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/checkpoint/checkpoint_dir.h"

namespace trellis {
namespace {

// A byte token file of other text than WriteTokenFile's: documents of 50
// tokens counting down the alphabet, so a model scores it differently.
void WriteOtherTokens(const std::string& path) {
  absl::StatusOr<std::unique_ptr<TokenDatasetWriter>> writer =
      TokenDatasetWriter::Create(path, test::kByteVocab);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (int d = 0; d < 40; ++d) {
    std::vector<uint32_t> doc(50);
    for (size_t i = 0; i < doc.size(); ++i) {
      doc[i] = static_cast<uint32_t>(122 - (i * 3 + d) % 26);
    }
    ASSERT_TRUE((*writer)->AppendDocument(doc).ok());
  }
  ASSERT_TRUE((*writer)->Finish().ok());
}

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
    return Train(o);
  }
  std::unique_ptr<Trainer> Train(TrainOptions o) {
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

  // The saved checkpoint's score of the windows at `starts` equals
  // `trainer`'s. The trainer's microbatches hold four windows, the
  // evaluator's three: the same per-token losses, summed in another
  // grouping.
  void ExpectScoresAsTrainer(Trainer& trainer,
                             const std::vector<int64_t>& starts) {
    absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
    ASSERT_TRUE(step.ok()) << step.status();
    absl::StatusOr<std::unique_ptr<Evaluator>> evaluator = Evaluator::Create(
        EvalOptions(), context_.groups(), context_.coord(), *step);
    ASSERT_TRUE(evaluator.ok()) << evaluator.status();
    const absl::StatusOr<double> mine = (*evaluator)->Evaluate(starts);
    const absl::StatusOr<double> theirs = trainer.Evaluate(starts);
    ASSERT_TRUE(mine.ok()) << mine.status();
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    EXPECT_TRUE(std::isfinite(*mine));
    EXPECT_NEAR(*mine, *theirs, 1e-6 * *theirs);
  }

  // Seven windows: two whole microbatches of three and one padded one.
  static std::vector<int64_t> SevenWindows() {
    std::vector<int64_t> starts;
    for (int64_t i = 0; i < 7; ++i) starts.push_back(i * 40);
    return starts;
  }

  std::string dir_, data_;
  ParallelContext context_ = ParallelContext::Single();
};

TEST_F(EvaluatorTest, ScoresACheckpointAsItsTrainerDoes) {
  std::unique_ptr<Trainer> trainer = Train();
  ASSERT_NE(trainer, nullptr);
  ExpectScoresAsTrainer(*trainer, SevenWindows());
}

// A mixture of experts balanced by DeepSeek-V3's selection bias is scored
// with the bias its checkpoint holds, so its routers choose as in training.
TEST_F(EvaluatorTest, ScoresAMixtureWithItsTrainedExpertBias) {
  TrainOptions o = test::TinyMixture(test::TinyOptions(data_));
  o.model.moe_aux_loss_coeff = 0;
  o.model.moe_bias_update_rate = 0.05;
  std::unique_ptr<Trainer> trainer = Train(o);
  ASSERT_NE(trainer, nullptr);
  absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
  ASSERT_TRUE(step.ok()) << step.status();
  absl::StatusOr<TrainingState> state = ReadTrainingState(*step);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_FALSE(state->expert_bias.empty());
  ExpectScoresAsTrainer(*trainer, SevenWindows());
}

// A checkpoint trained with --document_mask is scored with the mask (the
// flag comes from the checkpoint), as its trainer scores it.
TEST_F(EvaluatorTest, ScoresADocumentMaskedCheckpointWithTheMask) {
  std::unique_ptr<Trainer> trainer = Train(/*document_mask=*/true);
  ASSERT_NE(trainer, nullptr);
  // Twelve windows one after another: documents of 40 to 100 tokens end
  // inside several of them.
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < 12; ++i) starts.push_back(i * 16);
  ExpectScoresAsTrainer(*trainer, starts);
}

// Such a checkpoint cannot be scored on CUDA (no masked CUDA attention):
// refused in one line before anything is allocated, as the trainer refuses
// --document_mask with --device=cuda.
TEST_F(EvaluatorTest, RefusesADocumentMaskedCheckpointOnCuda) {
  ASSERT_NE(Train(/*document_mask=*/true), nullptr);
  absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
  ASSERT_TRUE(step.ok()) << step.status();
  TrainOptions o = EvalOptions();
  o.device = DeviceType::kCUDA;
  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator =
      Evaluator::Create(o, context_.groups(), context_.coord(), *step);
  ASSERT_FALSE(evaluator.ok());
  EXPECT_EQ(evaluator.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(evaluator.status().message()),
              ::testing::HasSubstr("--document_mask"));
  EXPECT_THAT(std::string(evaluator.status().message()),
              ::testing::HasSubstr("--device=cpu"));
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

// Each file of a blend is scored as it is alone (trellis-eval's windows
// from its start), and the total is the blend's weighted mean.
TEST_F(EvaluatorTest, ScoresEachFileOfABlend) {
  ASSERT_NE(Train(), nullptr);
  absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
  ASSERT_TRUE(step.ok()) << step.status();
  const std::string other = dir_ + "/other.h5";
  WriteOtherTokens(other);
  auto evaluate = [&](const std::string& data) -> absl::StatusOr<StreamEval> {
    TrainOptions o = EvalOptions();
    o.data = data;
    absl::StatusOr<std::unique_ptr<Evaluator>> e =
        Evaluator::Create(o, context_.groups(), context_.coord(), *step);
    if (!e.ok()) return e.status();
    return (*e)->EvaluateStreams(/*max_windows=*/7);
  };
  const absl::StatusOr<StreamEval> a = evaluate(data_);
  const absl::StatusOr<StreamEval> b = evaluate(other);
  const absl::StatusOr<StreamEval> blend =
      evaluate(absl::StrCat("3:", data_, ",1:", other));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  ASSERT_TRUE(blend.ok()) << blend.status();
  ASSERT_EQ(a->sources.size(), 1u);
  EXPECT_EQ(a->loss, a->sources[0].loss);
  EXPECT_GT(std::abs(a->loss - b->loss), 0.05) << "the files should differ";
  ASSERT_EQ(blend->sources.size(), 2u);
  const double want[] = {a->loss, b->loss};
  const std::string paths[] = {data_, other};
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(blend->sources[i].path, paths[i]);
    EXPECT_EQ(blend->sources[i].windows, 7);
    EXPECT_NEAR(blend->sources[i].loss, want[i], 1e-12 * want[i]);
  }
  EXPECT_DOUBLE_EQ(blend->sources[0].weight, 0.75);
  EXPECT_DOUBLE_EQ(blend->sources[1].weight, 0.25);
  EXPECT_NEAR(blend->loss, 0.75 * a->loss + 0.25 * b->loss, 1e-12);
  EXPECT_EQ(blend->windows, 14);
}

// Every file of a blend must be of the checkpoint's tokenizer, not only the
// first.
TEST_F(EvaluatorTest, RefusesABlendWithAFileOfAnotherTokenizer) {
  ASSERT_NE(Train(), nullptr);
  absl::StatusOr<std::string> step = ResolveResume(dir_ + "/ckpt", "");
  ASSERT_TRUE(step.ok());
  const std::string gpt2 = dir_ + "/gpt2.h5";
  test::WriteTokenFile(gpt2, test::kGpt2Vocab);
  TrainOptions o = EvalOptions();
  o.data = absl::StrCat("0.5:", data_, ",0.5:", gpt2);
  absl::StatusOr<std::unique_ptr<Evaluator>> evaluator =
      Evaluator::Create(o, context_.groups(), context_.coord(), *step);
  ASSERT_FALSE(evaluator.ok());
  EXPECT_THAT(std::string(evaluator.status().message()),
              ::testing::AllOf(::testing::HasSubstr(gpt2),
                               ::testing::HasSubstr("'gpt2'")));
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
