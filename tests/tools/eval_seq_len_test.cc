// trellis-eval --seq_len evaluates a checkpoint at another context length
// than its own: a tiny Hugging Face Llama (16 positions, RoPE) converted
// with trellis-convert scores windows of 8 and of 32 tokens as PyTorch does
// (scripts/torch_reference/hf_llama_loss.py at that length) to 1e-4, on
// one rank and tp2; a tiny GPT-2 (48 learned positions) scores windows of
// 16 as PyTorch does, using the first 16 rows of its wpe, and refuses 64
// with one line naming --seq_len and wpe. ModelAtContext's rule is checked
// on its own too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/token_dataset.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/hf_gpt2_test_util.h"
#include "tests/tools/hf_llama_test_util.h"
#include "tests/tools/tools_test_util.h"
#include "tests/tools/torch_reference_util.h"
#include "tools/trainer/evaluator.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWindows = 4;
constexpr double kTolerance = 1e-4;
// The longest context scored: twice the tiny Llama's 16 positions.
constexpr int64_t kLongest = 2 * test::kLlamaSeq;

class EvalSeqLenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/tokens.h5";
    test::WriteTokenFile(data_, test::kByteVocab, 2000);
    // The tokens of the longest windows scored, for the reference.
    absl::StatusOr<TokenDataset> data = TokenDataset::Open(data_);
    ASSERT_TRUE(data.ok()) << data.status();
    std::vector<int32_t> tokens(kWindows * (kLongest + 1));
    ASSERT_TRUE(data->ReadTokens(0, tokens.size(), tokens.data()).ok());
    std::ofstream out(dir_ + "/tokens.txt");
    for (int32_t t : tokens) out << t << "\n";
  }

  // Writes the HF model with `write` and converts it into dir_/ckpt.
  void Convert(void (*write)(const std::string&)) {
    std::filesystem::create_directories(dir_ + "/hf");
    write(dir_ + "/hf");
    const std::string log = dir_ + "/convert.txt";
    ASSERT_EQ(
        test::RunProgram(
            {test::Program("convert"), "--input=" + dir_ + "/hf",
             "--to=trellis", "--output=" + dir_ + "/ckpt", "--tokenizer=byte"},
            log),
        0)
        << test::ReadFile(log);
  }

  double Torch(int64_t seq_len) {
    const nlohmann::json j =
        test::RunTorchReference("hf_llama_loss.py",
                                {dir_ + "/hf", dir_ + "/tokens.txt",
                                 absl::StrCat(seq_len), absl::StrCat(kWindows)},
                                dir_);
    return j.is_object() ? j.value("loss", NAN) : NAN;
  }

  // trellis-eval's exit code at --seq_len on `tp` ranks; output in `out`.
  int Eval(int64_t seq_len, int tp, std::string* out) {
    std::vector<std::string> argv;
    if (tp > 1) argv = test::Mpirun(tp);
    argv.insert(
        argv.end(),
        {test::Program("eval"), "--load=" + dir_ + "/ckpt", "--data=" + data_,
         absl::StrCat("--max_windows=", kWindows), "--micro_batch_size=2",
         absl::StrCat("--tp=", tp), absl::StrCat("--seq_len=", seq_len)});
    const std::string log = dir_ + "/eval.txt";
    std::filesystem::remove(log);
    const int code = test::RunProgram(argv, log);
    *out = test::ReadFile(log);
    return code;
  }

  double Loss(int64_t seq_len, int tp) {
    std::string out;
    EXPECT_EQ(Eval(seq_len, tp, &out), 0) << out;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("{", 0) != 0) continue;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("eval_loss")) {
        EXPECT_EQ(j.value("windows", 0), kWindows) << out;
        if (!j["eval_loss"].is_number()) break;
        return j["eval_loss"].get<double>();
      }
    }
    ADD_FAILURE() << "no JSON line with a numeric eval_loss in:\n" << out;
    return NAN;
  }

  std::string dir_, data_;
};

TEST_F(EvalSeqLenTest, RopeModelEvaluatesShorterAndLongerContexts) {
  Convert([](const std::string& dir) { test::WriteTinyLlama(dir, {}); });
  for (int64_t seq_len : {int64_t{8}, kLongest}) {
    const double want = Torch(seq_len);
    ASSERT_TRUE(std::isfinite(want));
    for (int tp : {1, 2}) {
      const double got = Loss(seq_len, tp);
      EXPECT_NEAR(got, want, kTolerance)
          << "seq_len " << seq_len << " tp" << tp;
      std::printf("llama seq_len %lld tp%d: trellis %.9f torch %.9f\n",
                  static_cast<long long>(seq_len), tp, got, want);
    }
  }
  // The checkpoint's own context scores other windows: the flag took.
  EXPECT_GT(std::abs(Loss(8, 1) - Loss(0, 1)), 100 * kTolerance);
}

TEST_F(EvalSeqLenTest, Gpt2TakesAShorterContextAndRefusesALongerOne) {
  Convert(test::WriteTinyGpt2);
  const double want = Torch(16);
  ASSERT_TRUE(std::isfinite(want));
  for (int tp : {1, 2}) {
    const double got = Loss(16, tp);
    EXPECT_NEAR(got, want, kTolerance) << "tp" << tp;
    std::printf("gpt2 seq_len 16 tp%d: trellis %.9f torch %.9f\n", tp, got,
                want);
  }
  std::string out;
  EXPECT_EQ(Eval(64, 1, &out), 1) << out;
  EXPECT_THAT(out, HasSubstr("trellis-eval: error: --seq_len=64 exceeds the "
                             "48 positions"));
  EXPECT_THAT(out, HasSubstr("wpe"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST(ModelAtContextTest, OnlyLearnedPositionsBoundTheContext) {
  ModelConfig gpt2;
  gpt2.seq_len = 48;
  EXPECT_EQ(ModelAtContext(gpt2, 0)->seq_len, 48);
  EXPECT_EQ(ModelAtContext(gpt2, 16)->seq_len, 16);
  EXPECT_EQ(ModelAtContext(gpt2, 48)->seq_len, 48);
  const absl::StatusOr<ModelConfig> longer = ModelAtContext(gpt2, 49);
  ASSERT_FALSE(longer.ok());
  EXPECT_THAT(longer.status().message(), HasSubstr("at most 48"));
  EXPECT_FALSE(ModelAtContext(gpt2, -1).ok());
  ModelConfig llama = gpt2;
  llama.family = ModelFamilyKind::kLlama;
  EXPECT_EQ(ModelAtContext(llama, 4096)->seq_len, 4096);
  ModelConfig same = *ModelAtContext(llama, 4096);
  same.seq_len = llama.seq_len;
  EXPECT_EQ(same, llama);  // nothing else changes
}

}  // namespace
}  // namespace trellis
