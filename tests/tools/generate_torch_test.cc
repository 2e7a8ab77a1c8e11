// Greedy generation against PyTorch: a tiny Hugging Face Llama (GQA,
// untied head) and a tiny GPT-2 written by the tests convert with
// trellis-convert --from=hf, and trellis-generate --temperature=0 of the
// conversion gives, token for token, the 32 new tokens that
// scripts/torch_reference/hf_generate.py (transformers' modeling_llama and
// modeling_gpt2 math in plain torch, float64, no cache) decodes greedily
// from the original: on one rank and under tp2, with the key/value cache
// and without it (trellis-generate refuses --pp). The reference's smallest
// gap between the two largest logits is checked first, so a near-tie
// cannot make the comparison fragile. PyTorch is required.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/hf_gpt2_test_util.h"
#include "tests/tools/hf_llama_test_util.h"
#include "tests/tools/tools_test_util.h"
#include "tests/tools/torch_reference_util.h"

namespace trellis {
namespace {

constexpr char kPrompt[] = "The tiny model";
constexpr int kNewTokens = 32;
// Well above float32's rounding of these logits (~1e-5), well below their
// spread.
constexpr double kMinMargin = 1e-3;

struct Family {
  const char* name;
  void (*write)(const std::string& dir);
};
void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

void WriteLlama(const std::string& dir) {
  // A context long enough for the prompt and 32 new tokens.
  test::WriteTinyLlama(dir,
                       {.config_patch = {{"max_position_embeddings", 48}}});
}

class GenerateTorchTest : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override { dir_ = test::ScratchDir(); }

  // The new tokens of trellis-generate --temperature=0 on `ranks` ranks.
  std::vector<int32_t> Generate(int ranks, bool cache) {
    std::vector<std::string> argv;
    if (ranks > 1) argv = test::Mpirun(ranks);
    argv.insert(argv.end(),
                {test::Program("generate"), "--load=" + dir_ + "/ckpt",
                 absl::StrCat("--prompt=", kPrompt), "--temperature=0",
                 absl::StrCat("--max_new_tokens=", kNewTokens),
                 "--stop_at_eot=false", absl::StrCat("--tp=", ranks)});
    if (!cache) argv.push_back("--no_cache");
    const std::string log = dir_ + "/generate.txt";
    std::filesystem::remove(log);
    const std::string out =
        test::RunProgram(argv, log) == 0 ? test::ReadFile(log) : "";
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("tokens")) {
        return j.at("tokens").get<std::vector<int32_t>>();
      }
    }
    ADD_FAILURE() << "no JSON line in:\n" << test::ReadFile(log);
    return {};
  }

  std::string dir_;
};

TEST_P(GenerateTorchTest, GreedyTokensEqualPyTorchs) {
  const std::string hf = dir_ + "/hf", log = dir_ + "/convert.txt";
  std::filesystem::create_directories(hf);
  GetParam().write(hf);
  ASSERT_EQ(test::RunProgram(
                {test::Program("convert"), "--input=" + hf, "--to=trellis",
                 "--output=" + dir_ + "/ckpt", "--tokenizer=byte"},
                log),
            0)
      << test::ReadFile(log);
  std::vector<std::string> ids;  // The byte tokenizer: one id per byte.
  for (char ch : std::string(kPrompt)) {
    ids.push_back(absl::StrCat(static_cast<unsigned char>(ch)));
  }
  const nlohmann::json reference = test::RunTorchReference(
      "hf_generate.py", {hf, absl::StrJoin(ids, ","), absl::StrCat(kNewTokens)},
      dir_);
  ASSERT_TRUE(reference.is_object());
  const std::vector<int32_t> want =
      reference.at("tokens").get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), static_cast<size_t>(kNewTokens));
  // No near-tie, and a continuation that is not one token repeated.
  EXPECT_GT(reference.at("min_margin").get<double>(), kMinMargin);
  EXPECT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 8u)
      << absl::StrJoin(want, ",");
  for (int ranks : {1, 2}) {
    for (bool cache : {true, false}) {
      EXPECT_EQ(Generate(ranks, cache), want)
          << GetParam().name << " tp" << ranks
          << (cache ? " cached" : " uncached");
    }
  }
  std::printf(
      "%s: 32 greedy tokens equal PyTorch's (smallest top-2 gap %.4g)\n",
      GetParam().name, reference.at("min_margin").get<double>());
}

INSTANTIATE_TEST_SUITE_P(Families, GenerateTorchTest,
                         ::testing::Values(Family{"llama_gqa_untied",
                                                  WriteLlama},
                                           Family{"gpt2", test::WriteTinyGpt2}),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace trellis
