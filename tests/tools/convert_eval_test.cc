// trellis-eval of a converted checkpoint equals trellis-eval of the original
// under 1×1×1, tp2, pp2 and dp2·tp2·pp2: a trained trellis checkpoint goes
// to Hugging Face and back, and to llm.c and back, with the programs a user
// runs; the Hugging Face copy evaluates exactly like the original under
// every layout (the weights are the same bits), the llm.c copy under one
// rank, and the layouts agree with each other to float rounding.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

struct EvalLayout {
  const char* name;
  int dp, tp, pp;
  int world() const { return dp * tp * pp; }
};

class ConvertEvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    data_ = dir_ + "/tokens.h5";
    log_ = dir_ + "/log.txt";
    test::WriteTokenFile(data_, test::kByteVocab, 4000);
    TrainOptions o = test::TinyOptions(data_);
    o.steps = 3;
    std::vector<std::string> train = {test::Program("train")};
    for (const std::string& flag : std::vector<std::string>(
             absl::StrSplit(o.ToFlagString(), '\n', absl::SkipEmpty()))) {
      train.push_back(flag);
    }
    train.push_back("--eval_every=0");
    train.push_back("--save_dir=" + dir_ + "/a");
    ASSERT_EQ(test::RunProgram(train, log_), 0) << test::ReadFile(log_);
  }

  void Convert(const std::string& input, const std::string& to,
               const std::string& output) {
    // The weights were trained on byte tokens; conversions from hf and
    // llmc record the tokenizer they are told (trellis-eval compares it).
    ASSERT_EQ(test::RunProgram(
                  {test::Program("convert"), "--input=" + input, "--to=" + to,
                   "--output=" + output, "--tokenizer=byte"},
                  log_),
              0)
        << test::ReadFile(log_);
  }

  // trellis-eval's eval_loss, from its JSON line.
  double Eval(const std::string& checkpoint, const EvalLayout& layout) {
    std::vector<std::string> argv;
    if (layout.world() > 1) argv = test::Mpirun(layout.world());
    argv.push_back(test::Program("eval"));
    argv.push_back("--load=" + checkpoint);
    argv.push_back("--data=" + data_);
    argv.push_back("--max_windows=24");
    argv.push_back("--micro_batch_size=3");
    argv.push_back(absl::StrCat("--dp=", layout.dp));
    argv.push_back(absl::StrCat("--tp=", layout.tp));
    argv.push_back(absl::StrCat("--pp=", layout.pp));
    const std::string out = dir_ + "/eval.txt";
    std::filesystem::remove(out);
    EXPECT_EQ(test::RunProgram(argv, out), 0) << test::ReadFile(out);
    std::istringstream lines(test::ReadFile(out));
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("{", 0) != 0) continue;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("eval_loss")) {
        return j["eval_loss"].get<double>();
      }
    }
    ADD_FAILURE() << layout.name << " " << checkpoint << ": no eval_loss in\n"
                  << test::ReadFile(out);
    return NAN;
  }

  std::string dir_, data_, log_;
};

TEST_F(ConvertEvalTest, ConvertedCheckpointsEvaluateLikeTheOriginal) {
  const std::string a = dir_ + "/a";
  Convert(a, "hf", dir_ + "/hf");
  Convert(dir_ + "/hf", "trellis", dir_ + "/from_hf");
  Convert(a, "llmc", dir_ + "/model.bin");
  Convert(dir_ + "/model.bin", "trellis", dir_ + "/from_llmc");
  const EvalLayout layouts[] = {{"1x1x1", 1, 1, 1},
                                {"tp2", 1, 2, 1},
                                {"pp2", 1, 1, 2},
                                {"dp2.tp2.pp2", 2, 2, 2}};
  double single = 0;
  for (const EvalLayout& layout : layouts) {
    const double original = Eval(a, layout);
    ASSERT_TRUE(std::isfinite(original)) << layout.name;
    EXPECT_EQ(Eval(dir_ + "/from_hf", layout), original) << layout.name;
    if (layout.world() == 1) {
      single = original;
      // The llm.c copy holds the same bits too (convert_roundtrip_test
      // checks them); once is enough here.
      EXPECT_EQ(Eval(dir_ + "/from_llmc", layout), original);
    }
    EXPECT_NEAR(original, single, 1e-5 * single) << layout.name;
  }
}

}  // namespace
}  // namespace trellis
