// A resumed run equals an uninterrupted one bit for bit, and gradient
// accumulation over microbatches equals one microbatch of the whole batch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/bootstrap.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Trainer> MakeTrainer(const TrainOptions& options,
                                     const ParallelContext& context,
                                     DType dtype = DType::kF32) {
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(options, context.groups(), context.coord(), dtype);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? std::move(*trainer) : nullptr;
}

// Every parameter's values as doubles, by logical name.
std::map<std::string, std::vector<double>> Values(Trainer& trainer) {
  std::map<std::string, std::vector<double>> values;
  for (const Parameter* p : trainer.model().params().all()) {
    std::vector<double>& v = values[p->name];
    for (int64_t i = 0; i < p->numel(); ++i) {
      v.push_back(p->value.dtype() == DType::kF64 ? p->value.data<double>()[i]
                                                  : p->value.data<float>()[i]);
    }
  }
  return values;
}

// Bitwise equality of float32 parameter tensors (== on floats would also
// let -0 equal +0).
void ExpectBitwiseEqual(Trainer& a, Trainer& b) {
  const std::vector<Parameter*>& pa = a.model().params().all();
  const std::vector<Parameter*>& pb = b.model().params().all();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pa[i]->name, pb[i]->name);
    ASSERT_EQ(pa[i]->value.nbytes(), pb[i]->value.nbytes());
    EXPECT_EQ(std::memcmp(pa[i]->value.raw(), pb[i]->value.raw(),
                          pa[i]->value.nbytes()),
              0)
        << pa[i]->name << " differs";
  }
}

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/tokens.h5";
    test::WriteTokenFile(data_, test::kByteVocab);
    // The uninterrupted run, saving at step 5 (and 10).
    TrainOptions o = test::TinyOptions(data_);
    o.save_dir = dir_ + "/full";
    o.save_every = 5;
    full_ = MakeTrainer(o, context_);
    ASSERT_NE(full_, nullptr);
    absl::StatusOr<Trainer::Outcome> outcome = full_->Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    ASSERT_EQ(*outcome, Trainer::Outcome::kCompleted);
    ASSERT_EQ(full_->losses().size(), 10u);
  }

  // Runs `resumed` to the end; its steps 6..10 must equal the full run's.
  void ExpectSameAsFull(Trainer& resumed) {
    EXPECT_EQ(resumed.step(), 5);
    absl::StatusOr<Trainer::Outcome> outcome = resumed.Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    ASSERT_EQ(resumed.losses().size(), 5u);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(resumed.losses()[i], full_->losses()[5 + i])
          << "loss of step " << 6 + i;
    }
    EXPECT_EQ(resumed.step(), 10);
    ExpectBitwiseEqual(*full_, resumed);
  }

  ParallelContext context_ = ParallelContext::Single();
  std::string dir_, data_;
  std::unique_ptr<Trainer> full_;
};

TEST_F(ResumeTest, ResumeFromStepDirectoryEqualsUninterrupted) {
  // The losses must actually move, or equality would prove little.
  EXPECT_LT(full_->losses().back(), full_->losses().front() - 0.1);
  TrainOptions o = test::TinyOptions(data_);
  o.resume = dir_ + "/full/" + CheckpointName(5);
  std::unique_ptr<Trainer> resumed = MakeTrainer(o, context_);
  ASSERT_NE(resumed, nullptr);
  ExpectSameAsFull(*resumed);
}

TEST_F(ResumeTest, ResumeAutoAfterStopEqualsUninterrupted) {
  // A run stopped on request after step 5 saves; "auto" picks it up.
  TrainOptions o = test::TinyOptions(data_);
  o.save_dir = dir_ + "/stopped";
  std::unique_ptr<Trainer> first = MakeTrainer(o, context_);
  ASSERT_NE(first, nullptr);
  Trainer* raw = first.get();
  first->set_stop_check([raw] { return raw->step() >= 5; });
  absl::StatusOr<Trainer::Outcome> outcome = first->Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, Trainer::Outcome::kStopped);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(first->losses()[i], full_->losses()[i]);
  }
  EXPECT_TRUE(fs::exists(o.save_dir + "/" + CheckpointName(5)));
  first.reset();  // the stopped run ends, and --save_dir is free again

  o.resume = "auto";
  std::unique_ptr<Trainer> resumed = MakeTrainer(o, context_);
  ASSERT_NE(resumed, nullptr);
  ExpectSameAsFull(*resumed);
}

TEST_F(ResumeTest, ResumeAutoWithEmptySaveDirStartsFresh) {
  TrainOptions o = test::TinyOptions(data_);
  o.save_dir = dir_ + "/empty";
  o.resume = "auto";
  o.steps = 2;
  std::unique_ptr<Trainer> fresh = MakeTrainer(o, context_);
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(fresh->step(), 0);
}

TEST_F(ResumeTest, ResumeWithAnotherGlobalBatchFailsClearly) {
  TrainOptions o = test::TinyOptions(data_);
  o.resume = dir_ + "/full/" + CheckpointName(5);
  o.global_batch_size = 12;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(o, context_.groups(), context_.coord());
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              ::testing::HasSubstr("--global_batch_size"));
}

TEST_F(ResumeTest, ResumeWithAnotherSeedOrBatchThatFitsFailsClearly) {
  // 80 samples consumed: a global batch of 8 would divide them, yet draw
  // another sequence of batches than the run it continues.
  TrainOptions o = test::TinyOptions(data_);
  o.resume = dir_ + "/full/" + CheckpointName(5);
  o.global_batch_size = 8;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(o, context_.groups(), context_.coord());
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(trainer.status().message()),
              ::testing::AllOf(::testing::HasSubstr("--global_batch_size=16"),
                               ::testing::HasSubstr("--global_batch_size=8")));
  o = test::TinyOptions(data_);
  o.resume = dir_ + "/full/" + CheckpointName(5);
  o.seed = 7;
  trainer = Trainer::Create(o, context_.groups(), context_.coord());
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              ::testing::AllOf(::testing::HasSubstr("--seed=1337"),
                               ::testing::HasSubstr("--seed=7")));
}

TEST_F(ResumeTest, LoadWeightsOfAnotherModelSizeNamesBoth) {
  TrainOptions o = test::TinyOptions(data_);
  o.model.d_model = 32;
  std::unique_ptr<Trainer> other = MakeTrainer(o, context_);
  ASSERT_NE(other, nullptr);
  const std::string ckpt = dir_ + "/full/" + CheckpointName(5);
  const absl::Status status = other->LoadWeights(ckpt);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::AllOf(::testing::HasSubstr(ckpt),
                               ::testing::HasSubstr("d_model=16"),
                               ::testing::HasSubstr("d_model=32")));
}

// Same kind, vocabulary and end-of-text, another tokenizer file: every id
// would mean another string, so resuming or loading weights must refuse.
TEST(TokenizerIdentityResumeTest, DataOfAnotherTokenizerFileFailsClearly) {
  const std::string dir = test::ScratchDir();
  const std::string sha_a(64, 'a'), sha_b(64, 'b');
  const std::string data_a = dir + "/a.h5", data_b = dir + "/b.h5";
  test::WriteTokenFile(data_a, {"hf", 257, 256, sha_a});
  test::WriteTokenFile(data_b, {"hf", 257, 256, sha_b});
  ParallelContext context = ParallelContext::Single();
  TrainOptions o = test::TinyOptions(data_a);
  o.save_dir = dir + "/run";
  o.save_every = 5;
  o.steps = 5;
  std::unique_ptr<Trainer> first = MakeTrainer(o, context);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->Run().ok());
  const std::string ckpt = o.save_dir + "/" + CheckpointName(5);
  absl::StatusOr<TrainingState> state = ReadTrainingState(ckpt);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->tokenizer_identity.sha256, sha_a);

  TrainOptions resume = test::TinyOptions(data_b);
  resume.resume = ckpt;
  absl::StatusOr<std::unique_ptr<Trainer>> resumed =
      Trainer::Create(resume, context.groups(), context.coord());
  ASSERT_FALSE(resumed.ok());
  const std::string message(resumed.status().message());
  EXPECT_THAT(message, ::testing::AllOf(::testing::HasSubstr(sha_a),
                                        ::testing::HasSubstr(sha_b),
                                        ::testing::HasSubstr(data_b)));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;

  std::unique_ptr<Trainer> other =
      MakeTrainer(test::TinyOptions(data_b), context);
  ASSERT_NE(other, nullptr);
  EXPECT_THAT(std::string(other->LoadWeights(ckpt).message()),
              ::testing::HasSubstr(sha_b));
  // The same tokenizer resumes.
  resume.data = data_a;
  EXPECT_NE(MakeTrainer(resume, context), nullptr);
}

// Runs `steps` optimizer steps in float64; returns losses and parameters.
struct RunResult {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> values;
};
RunResult RunSteps(const TrainOptions& options, int steps) {
  ParallelContext context = ParallelContext::Single();
  std::unique_ptr<Trainer> trainer = MakeTrainer(options, context, DType::kF64);
  RunResult result;
  if (trainer == nullptr) return result;
  for (int s = 0; s < steps; ++s) {
    absl::StatusOr<StepMetrics> m = trainer->Step();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return result;
    result.losses.push_back(m->loss);
  }
  result.values = Values(*trainer);
  return result;
}

TEST(GradientAccumulationTest, FourMicrobatchesEqualOneWholeBatch) {
  const std::string dir = test::ScratchDir();
  const std::string data = dir + "/tokens.h5";
  test::WriteTokenFile(data, test::kByteVocab);
  TrainOptions accumulated = test::TinyOptions(data);
  accumulated.micro_batch_size = 4;
  accumulated.global_batch_size = 16;
  accumulated.grad_clip = 0.5;  // Clipping acts on the accumulated norm.
  TrainOptions whole = accumulated;
  whole.micro_batch_size = 16;
  const RunResult a = RunSteps(accumulated, 3);
  const RunResult b = RunSteps(whole, 3);
  ASSERT_EQ(a.losses.size(), 3u);
  ASSERT_EQ(b.losses.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_NEAR(a.losses[s], b.losses[s], 1e-5 * std::abs(b.losses[s]))
        << "step " << s + 1;
  }
  // Training moved the weights, and both runs moved them alike.
  EXPECT_NE(a.losses[0], a.losses[2]);
  ASSERT_EQ(a.values.size(), b.values.size());
  for (const auto& [name, va] : a.values) {
    const std::vector<double>& vb = b.values.at(name);
    ASSERT_EQ(va.size(), vb.size()) << name;
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < va.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(va[i] - vb[i]));
      max_abs = std::max(max_abs, std::abs(vb[i]));
    }
    EXPECT_LE(max_diff, 1e-5 * std::max(max_abs, 1e-3)) << name;
  }
}

}  // namespace
}  // namespace trellis
