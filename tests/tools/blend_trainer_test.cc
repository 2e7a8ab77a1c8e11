// Training on a blend of token files: a resumed run equals an uninterrupted
// one bit for bit, validation is reported per source, one path keeps the
// single-file order, and mixed tokenizers or mismatched resumes fail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "parallel/bootstrap.h"
#include "tests/tools/tools_test_util.h"
#include "tools/checkpoint/checkpoint.h"
#include "tools/trainer/health/metrics.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A byte-vocabulary file unlike WriteSyntheticTokens': counting patterns,
// so a model sees two different sources.
void WriteCountingFile(const std::string& path, int64_t num_tokens) {
  auto writer = TokenDatasetWriter::Create(path, test::kByteVocab);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (int64_t written = 0, doc = 0; written < num_tokens; ++doc) {
    std::vector<uint32_t> tokens(30 + doc % 20);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<uint32_t>(48 + (doc + i * 3) % 10);
    }
    ASSERT_TRUE((*writer)->AppendDocument(tokens).ok());
    written += static_cast<int64_t>(tokens.size()) + 1;
  }
  ASSERT_TRUE((*writer)->Finish().ok());
}

void ExpectBitwiseEqual(Trainer& a, Trainer& b) {
  const std::vector<Parameter*>& pa = a.model().params().all();
  const std::vector<Parameter*>& pb = b.model().params().all();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pa[i]->value.nbytes(), pb[i]->value.nbytes());
    EXPECT_EQ(std::memcmp(pa[i]->value.raw(), pb[i]->value.raw(),
                          pa[i]->value.nbytes()),
              0)
        << pa[i]->name << " differs";
  }
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

class BlendTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    web_ = dir_ + "/web.h5";
    code_ = dir_ + "/code.h5";
    test::WriteTokenFile(web_, test::kByteVocab, 6000);
    WriteCountingFile(code_, 4000);
    blend_ = absl::StrCat("0.7:", web_, ",0.3:", code_);
  }
  TrainOptions Options() const {
    TrainOptions o = test::TinyOptions(blend_);
    o.eval_every = 5;
    o.eval_windows = 8;
    return o;
  }

  ParallelContext context_ = ParallelContext::Single();
  std::string dir_, web_, code_, blend_;
};

TEST_F(BlendTrainerTest, ResumeEqualsUninterruptedAndStatePerSource) {
  TrainOptions o = Options();
  o.save_dir = dir_ + "/full";
  o.save_every = 5;
  o.metrics_file = dir_ + "/full.jsonl";
  std::unique_ptr<Trainer> full = test::MakeTrainer(o, context_);
  ASSERT_NE(full, nullptr);
  ASSERT_TRUE(full->Run().ok());
  ASSERT_EQ(full->losses().size(), 10u);

  // The checkpoint holds each source's draws: 0.7 and 0.3 of 5 · 16.
  absl::StatusOr<TrainingState> state =
      ReadTrainingState(o.save_dir + "/" + CheckpointName(5));
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->data_sources.size(), 2u);
  EXPECT_EQ(state->data_sources[0].path, web_);
  EXPECT_EQ(state->data_sources[0].samples_consumed, 56);
  EXPECT_EQ(state->data_sources[1].path, code_);
  EXPECT_EQ(state->data_sources[1].samples_consumed, 24);
  EXPECT_DOUBLE_EQ(state->data_sources[0].weight, 0.7);

  TrainOptions r = Options();
  r.resume = o.save_dir + "/" + CheckpointName(5);
  std::unique_ptr<Trainer> resumed = test::MakeTrainer(r, context_);
  ASSERT_NE(resumed, nullptr);
  ASSERT_TRUE(resumed->Run().ok());
  ASSERT_EQ(resumed->losses().size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(resumed->losses()[i], full->losses()[5 + i]) << "step " << 6 + i;
  }
  ExpectBitwiseEqual(*full, *resumed);

  // Validation per source at each evaluation, their weighted mean overall.
  const std::vector<nlohmann::json> metrics = ReadJsonLines(o.metrics_file);
  int evaluated = 0;
  for (const nlohmann::json& m : metrics) {
    if (!m.contains("val_loss")) continue;
    ++evaluated;
    const nlohmann::json& by = m.at("val_loss_by_source");
    ASSERT_EQ(by.size(), 2u);
    const double web = by.at(web_), code = by.at(code_);
    EXPECT_NE(web, code);
    EXPECT_NEAR(m.at("val_loss").get<double>(), 0.7 * web + 0.3 * code, 1e-9);
  }
  EXPECT_EQ(evaluated, 2);
}

TEST_F(BlendTrainerTest, ResumeWithAnotherDataFailsClearly) {
  TrainOptions o = Options();
  o.save_dir = dir_ + "/full";
  o.save_every = 5;
  o.steps = 5;
  std::unique_ptr<Trainer> full = test::MakeTrainer(o, context_);
  ASSERT_NE(full, nullptr);
  ASSERT_TRUE(full->Run().ok());
  const std::string ckpt = o.save_dir + "/" + CheckpointName(5);

  for (const std::string& data :
       {web_, absl::StrCat("0.5:", web_, ",0.3:", code_, ",0.2:", web_)}) {
    TrainOptions r = test::TinyOptions(data);
    r.resume = ckpt;
    absl::StatusOr<std::unique_ptr<Trainer>> resumed =
        Trainer::Create(r, context_.groups(), context_.coord());
    EXPECT_FALSE(resumed.ok()) << data;
    EXPECT_THAT(resumed.status().message(),
                HasSubstr("resume with the --data the run started with"));
  }
  // The same files and weights in another order took each other's
  // positions, and trained to other losses with exit 0.
  TrainOptions r =
      test::TinyOptions(absl::StrCat("0.3:", code_, ",0.7:", web_));
  r.resume = ckpt;
  absl::StatusOr<std::unique_ptr<Trainer>> reordered =
      Trainer::Create(r, context_.groups(), context_.coord());
  ASSERT_FALSE(reordered.ok());
  EXPECT_THAT(
      reordered.status().message(),
      AllOf(HasSubstr(absl::StrCat(web_, ", ", code_, " in that order")),
            HasSubstr("in the checkpoint's order")));
}

TEST_F(BlendTrainerTest, OneSourceWithAWeightKeepsTheSingleFileOrder) {
  std::unique_ptr<Trainer> plain =
      test::MakeTrainer(test::TinyOptions(web_), context_);
  std::unique_ptr<Trainer> weighted =
      test::MakeTrainer(test::TinyOptions("2.5:" + web_), context_);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(weighted, nullptr);
  ASSERT_TRUE(plain->Run().ok());
  ASSERT_TRUE(weighted->Run().ok());
  EXPECT_EQ(plain->losses(), weighted->losses());
  // And a blend is another order: its losses differ.
  std::unique_ptr<Trainer> blended =
      test::MakeTrainer(test::TinyOptions(blend_), context_);
  ASSERT_NE(blended, nullptr);
  ASSERT_TRUE(blended->Run().ok());
  EXPECT_NE(plain->losses(), blended->losses());
}

TEST_F(BlendTrainerTest, MixedTokenizersNameBothFiles) {
  const std::string gpt2 = dir_ + "/gpt2.h5";
  test::WriteTokenFile(gpt2, test::kGpt2Vocab, 6000);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(test::TinyOptions(absl::StrCat("1:", web_, ",1:", gpt2)),
                      context_.groups(), context_.coord());
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(trainer.status().message(),
              AllOf(HasSubstr(web_), HasSubstr(gpt2), HasSubstr("tokenizer")));
}

TEST(BlendLogLineTest, ValidationLossPerSourceInTheLogLine) {
  StepMetrics m;
  m.step = 5;
  m.val_loss = 2.5;
  m.val_loss_by_source = {{"web.h5", 2.0}, {"code.h5", 3.0}};
  EXPECT_THAT(FormatLogLine(m, 10),
              HasSubstr("val_loss 2.5000 (web.h5 2.0000, code.h5 3.0000)"));
}

}  // namespace
}  // namespace trellis
