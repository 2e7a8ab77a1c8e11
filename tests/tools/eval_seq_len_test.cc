// trellis-eval --seq_len evaluates a checkpoint at another context length
// than its own. A tiny Hugging Face Llama (16 positions, RoPE) converted
// with trellis-convert scores windows of 8 and of 32 tokens as the
// plain-Python forward of transformers' semantics does at that length
// (tests/tools/hf_llama_reference.py, float64, no BLAS; it agrees with
// PyTorch's hf_llama_loss.py in HfLlamaEvalTest), on one rank and tp2. A
// tiny GPT-2 (48 learned positions) at --seq_len=16 scores exactly as the
// same GPT-2 written with only the first 16 rows of its wpe, and refuses
// 64 with one line naming --seq_len and wpe. ModelAtContext's rule is
// checked on its own too.
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
#include <tuple>
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

  // Writes a Hugging Face model with `write` into dir_/<name> and converts
  // it into dir_/<name>.ckpt, which it returns.
  template <typename Write>
  std::string Convert(const std::string& name, Write write) {
    const std::string hf = dir_ + "/" + name;
    std::filesystem::create_directories(hf);
    write(hf);
    const std::string log = dir_ + "/convert.txt";
    EXPECT_EQ(test::RunProgram(
                  {test::Program("convert"), "--input=" + hf, "--to=trellis",
                   "--output=" + hf + ".ckpt", "--tokenizer=byte"},
                  log),
              0)
        << test::ReadFile(log);
    return hf + ".ckpt";
  }

  // hf_llama_reference.py's loss of the HF Llama in dir_/<name> at
  // `seq_len`, or NaN after a failure it reports.
  double Reference(const std::string& name, int64_t seq_len) {
    const std::string out = dir_ + "/reference.txt";
    std::filesystem::remove(out);
    const int rc = test::RunProgram(
        {test::Python(), "-B",
         absl::StrCat(TRELLIS_SOURCE_DIR, "/tests/tools/hf_llama_reference.py"),
         dir_ + "/" + name, dir_ + "/tokens.txt", absl::StrCat(seq_len),
         absl::StrCat(kWindows)},
        out, 300);
    const std::string text = test::ReadFile(out);
    EXPECT_EQ(rc, 0) << text;
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (rc != 0 || !j.is_object() || !j["loss"].is_number()) {
      ADD_FAILURE() << "no loss from the reference:\n" << text;
      return NAN;
    }
    return j["loss"].get<double>();
  }

  // trellis-eval's exit code on `ckpt` at --seq_len on `tp` ranks; output
  // in `out`.
  int Eval(const std::string& ckpt, int64_t seq_len, int tp, std::string* out) {
    std::vector<std::string> argv;
    if (tp > 1) argv = test::Mpirun(tp);
    argv.insert(
        argv.end(),
        {test::Program("eval"), "--load=" + ckpt, "--data=" + data_,
         absl::StrCat("--max_windows=", kWindows), "--micro_batch_size=2",
         absl::StrCat("--tp=", tp), absl::StrCat("--seq_len=", seq_len)});
    const std::string log = dir_ + "/eval.txt";
    std::filesystem::remove(log);
    const int code = test::RunProgram(argv, log);
    *out = test::ReadFile(log);
    return code;
  }

  // trellis-eval's eval_loss, or NaN after a failure it reports.
  double Loss(const std::string& ckpt, int64_t seq_len, int tp) {
    std::string out;
    EXPECT_EQ(Eval(ckpt, seq_len, tp, &out), 0) << out;
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

void WriteLlama(const std::string& dir) { test::WriteTinyLlama(dir, {}); }

// (context length, tp) for the Llama cases.
class EvalSeqLenLlamaTest
    : public EvalSeqLenTest,
      public ::testing::WithParamInterface<std::tuple<int64_t, int>> {};

TEST_P(EvalSeqLenLlamaTest, RopeModelScoresAnotherContextAsTheReference) {
  const auto [seq_len, tp] = GetParam();
  const std::string ckpt = Convert("hf", WriteLlama);
  const double want = Reference("hf", seq_len);
  ASSERT_TRUE(std::isfinite(want));
  const double got = Loss(ckpt, seq_len, tp);
  EXPECT_NEAR(got, want, kTolerance) << "seq_len " << seq_len << " tp" << tp;
  std::printf("llama seq_len %lld tp%d: trellis %.9f reference %.9f\n",
              static_cast<long long>(seq_len), tp, got, want);
}

INSTANTIATE_TEST_SUITE_P(
    ContextsAndLayouts, EvalSeqLenLlamaTest,
    ::testing::Combine(::testing::Values(int64_t{8}, kLongest),
                       ::testing::Values(1, 2)),
    [](const ::testing::TestParamInfo<std::tuple<int64_t, int>>& info) {
      return absl::StrCat("seq", std::get<0>(info.param), "_tp",
                          std::get<1>(info.param));
    });

TEST_F(EvalSeqLenTest, TheFlagChangesWhatARopeModelScores) {
  const std::string ckpt = Convert("hf", WriteLlama);
  // The checkpoint's own context scores other windows: the flag took.
  EXPECT_GT(std::abs(Loss(ckpt, 8, 1) - Loss(ckpt, 0, 1)), 100 * kTolerance);
}

TEST_F(EvalSeqLenTest, Gpt2AtAShorterContextIsTheModelWithFewerPositions) {
  const std::string full =
      Convert("hf", [](const std::string& dir) { test::WriteTinyGpt2(dir); });
  const std::string shorter = Convert(
      "hf16", [](const std::string& dir) { test::WriteTinyGpt2(dir, 16); });
  const double want = Loss(shorter, 0, 1);
  ASSERT_TRUE(std::isfinite(want));
  for (int tp : {1, 2}) {
    const double got = Loss(full, 16, tp);
    EXPECT_NEAR(got, want, 1e-6) << "tp" << tp;
    std::printf("gpt2 seq_len 16 tp%d: trellis %.9f, 16-position model %.9f\n",
                tp, got, want);
  }
  // Not the full context's windows.
  EXPECT_GT(std::abs(Loss(full, 0, 1) - want), 100 * kTolerance);
}

TEST_F(EvalSeqLenTest, Gpt2RefusesALongerContextInOneLine) {
  const std::string ckpt =
      Convert("hf", [](const std::string& dir) { test::WriteTinyGpt2(dir); });
  std::string out;
  EXPECT_EQ(Eval(ckpt, 64, 1, &out), 1) << out;
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
