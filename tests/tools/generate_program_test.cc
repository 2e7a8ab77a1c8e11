// trellis-generate as a user runs it: tp2 under mpirun gives one rank's
// tokens for both families; its greedy tokens equal an independent
// plain-Python GPT-2 (tests/tools/gpt2_reference.py) on the checkpoint
// exported with trellis-convert --to=hf; bad flags give one line and exit 1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/tools/generate_test_util.h"
#include "tests/tools/torch_reference_util.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

constexpr char kPrompt[] = "abcd efgh";

class GenerateProgramTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::ScratchDir(); }

  // trellis-generate's exit code; its output in `out`.
  int Generate(const std::string& checkpoint,
               const std::vector<std::string>& flags, int ranks,
               std::string* out) {
    std::vector<std::string> argv;
    if (ranks > 1) argv = test::Mpirun(ranks);
    argv.push_back(test::Program("generate"));
    argv.push_back("--load=" + checkpoint);
    argv.insert(argv.end(), flags.begin(), flags.end());
    const std::string log = dir_ + "/generate.txt";
    std::filesystem::remove(log);
    const int code = test::RunProgram(argv, log);
    *out = test::ReadFile(log);
    return code;
  }

  // The new tokens of a successful run, from its JSON line.
  std::vector<int32_t> Tokens(const std::string& checkpoint,
                              const std::vector<std::string>& flags,
                              int ranks = 1) {
    std::string out;
    std::vector<std::string> all = {absl::StrCat("--prompt=", kPrompt),
                                    "--max_new_tokens=32",
                                    "--stop_at_eot=false"};
    all.insert(all.end(), flags.begin(), flags.end());
    EXPECT_EQ(Generate(checkpoint, all, ranks, &out), 0) << out;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("tokens")) {
        EXPECT_EQ(j.at("prompt_tokens"), std::string(kPrompt).size());
        EXPECT_GT(j.at("tokens_per_s").get<double>(), 0);
        return j.at("tokens").get<std::vector<int32_t>>();
      }
    }
    ADD_FAILURE() << "no JSON line in:\n" << out;
    return {};
  }

  std::string dir_;
};

TEST_F(GenerateProgramTest, TensorParallelGivesOneRanksTokens) {
  for (const char* family : {"gpt2", "llama"}) {
    const std::string checkpoint = test::TinyCheckpoint(family);
    for (const std::vector<std::string>& sampling :
         {std::vector<std::string>{"--temperature=0"},
          std::vector<std::string>{"--temperature=1.2", "--top_k=50",
                                   "--top_p=0.95", "--seed=3"}}) {
      const std::vector<int32_t> one = Tokens(checkpoint, sampling);
      ASSERT_EQ(one.size(), 32u) << family;
      std::vector<std::string> tp2 = sampling;
      tp2.push_back("--tp=2");
      EXPECT_EQ(Tokens(checkpoint, tp2, 2), one)
          << family << " " << absl::StrJoin(sampling, " ");
      std::vector<std::string> uncached = tp2;
      uncached.push_back("--no_cache");
      EXPECT_EQ(Tokens(checkpoint, uncached, 2), one) << family;
    }
  }
}

TEST_F(GenerateProgramTest, GreedyTokensEqualAPlainPythonGpt2) {
  const std::string checkpoint = test::TinyCheckpoint("gpt2");
  const std::string hf = dir_ + "/hf";
  const std::string log = dir_ + "/convert.txt";
  ASSERT_EQ(test::RunProgram({test::Program("convert"), "--input=" + checkpoint,
                              "--to=hf", "--output=" + hf},
                             log),
            0)
      << test::ReadFile(log);
  std::vector<std::string> ids;  // The byte tokenizer: one id per byte.
  for (char ch : std::string(kPrompt)) {
    ids.push_back(absl::StrCat(static_cast<unsigned char>(ch)));
  }
  const std::string out = dir_ + "/reference.txt";
  ASSERT_EQ(test::RunProgram({test::Python(),
                              std::string(TRELLIS_SOURCE_DIR) +
                                  "/tests/tools/gpt2_reference.py",
                              hf, absl::StrJoin(ids, ","), "32"},
                             out, /*seconds=*/300),
            0)
      << test::ReadFile(out);
  const nlohmann::json reference = nlohmann::json::parse(test::ReadFile(out));
  const std::vector<int32_t> want = reference.get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), 32u);
  EXPECT_EQ(Tokens(checkpoint, {"--temperature=0"}), want);
  EXPECT_EQ(Tokens(checkpoint, {"--temperature=0", "--no_cache"}), want);
}

TEST_F(GenerateProgramTest, BadFlagsGiveOneLineAndExitOne) {
  const std::string checkpoint = test::TinyCheckpoint("gpt2");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--prompt="}, "--prompt is empty"},
      {{"--prompt=abc", "--max_new_tokens=46"}, "context of 48 tokens"},
      {{"--prompt=abc", "--top_p=0"}, "--top_p=0"},
      {{"--prompt=abc", "--top_p=1.5"}, "--top_p=1.5"},
      {{"--prompt=abc", "--temperature=-1"}, "--temperature=-1"},
      {{"--prompt=abc", "--pp=2"}, "--pp=2"},
      {{"--prompt=abc", "--cp=2"}, "--cp=2"},
      {{"--prompt=abc", "--tp=2"}, "as many ranks as --tp"},
      {{"--prompt=abc", "--load=" + dir_ + "/nothing"}, "nothing"},
  };
  for (const auto& [flags, message] : cases) {
    std::string out;
    EXPECT_EQ(Generate(checkpoint, flags, 1, &out), 1) << out;
    EXPECT_THAT(out, HasSubstr("trellis-generate: error: "));
    EXPECT_THAT(out, HasSubstr(message));
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

// A state.json describing a model far past the device (100,000 layers of
// width 4096) grew memory without bound: it is refused from the model's
// size before a parameter is declared, in one line, at once.
TEST_F(GenerateProgramTest, AModelTooLargeForTheDeviceIsRefusedAtOnce) {
  const std::string source = test::TinyCheckpoint("gpt2");
  const std::string copy = dir_ + "/huge";
  std::filesystem::copy(source, copy, std::filesystem::copy_options::recursive);
  std::string latest;
  std::ifstream(copy + "/latest") >> latest;
  const std::string state_path = copy + "/" + latest + "/state.json";
  nlohmann::json state = nlohmann::json::parse(test::ReadFile(state_path));
  state["model"]["n_layer"] = 100000;
  state["model"]["d_model"] = 4096;
  std::ofstream(state_path, std::ios::trunc) << state.dump(2);
  std::string out;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(Generate(copy, {"--prompt=abc"}, 1, &out), 1) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_THAT(out, HasSubstr("trellis-generate: error: "));
  EXPECT_THAT(out, HasSubstr("100000 layers, width 4096) needs at least"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

}  // namespace
}  // namespace trellis
