// Tests of the sentencepiece tokenizer with models that spm_train (Debian's
// `sentencepiece` package) trains at test time on part of the King James
// Bible, a BPE and a unigram one: encodings must equal `spm_encode
// --output_format=id` line by line, and decoding must give the text back.
// Skips when spm_train or the `bible` program is missing.
#include "data/sentencepiece_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/data/hf_tokenizer_test_util.h"
#include "tests/data/tokenizer_test_util.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

std::string RunCommand(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[1 << 16];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    out.append(buffer, n);
  if (pclose(pipe) != 0) out.clear();
  return out;
}

class SentencePieceTokenizerTest
    : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::system("command -v spm_train >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "spm_train is not installed (apt-get install "
                      "sentencepiece)";
    }
    const std::string book = tokenizer_testing::ReadKjvBible();
    if (book.empty()) GTEST_SKIP() << "the `bible` program is absent";
    const std::string train =
        hf_testing::WriteTemp("spm_train.txt", book.substr(0, 1'000'000));
    prefix_ = train + "." + GetParam();
    const std::string command =
        "spm_train --input='" + train + "' --model_prefix='" + prefix_ +
        "' --model_type=" + GetParam() +
        " --vocab_size=2000 --normalization_rule_name=identity"
        " --remove_extra_whitespaces=false --byte_fallback=true"
        " --character_coverage=1.0 --minloglevel=2 >/dev/null 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    auto loaded = SentencePieceTokenizer::Load(prefix_ + ".model");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    tokenizer_ = std::move(loaded).value();
    // Lines of the rest of the book, and lines with characters the model
    // never saw (they fall back to bytes).
    std::vector<std::string> lines =
        absl::StrSplit(book.substr(1'000'000, 200'000), '\n');
    for (const std::string& text : hf_testing::MixedTexts(100, {})) {
      for (absl::string_view line :
           absl::StrSplit(text, absl::ByAnyChar("\r\n"))) {
        lines.emplace_back(line);
      }
    }
    for (std::string& line : lines) {
      if (!line.empty()) lines_.push_back(std::move(line));
    }
  }

  std::string prefix_;
  std::unique_ptr<SentencePieceTokenizer> tokenizer_;
  std::vector<std::string> lines_;
};

TEST_P(SentencePieceTokenizerTest, MatchesSpmEncodeAndRoundTrips) {
  EXPECT_EQ(tokenizer_->name(), "sentencepiece");
  EXPECT_EQ(tokenizer_->vocab_size(), 2000);
  EXPECT_EQ(tokenizer_->eot_token(), 2u);  // </s>
  EXPECT_EQ(tokenizer_->source_sha256().size(), 64u);
  std::string text;
  for (const std::string& line : lines_) text += line + "\n";
  const std::string input = hf_testing::WriteTemp("spm_lines.txt", text);
  const std::string output =
      RunCommand("spm_encode --model='" + prefix_ +
                 ".model' --output_format=id < '" + input + "'");
  ASSERT_FALSE(output.empty()) << "spm_encode failed";
  const std::vector<std::string> expected = absl::StrSplit(output, '\n');
  ASSERT_GE(expected.size(), lines_.size());
  size_t tokens = 0;
  for (size_t i = 0; i < lines_.size(); ++i) {
    std::vector<uint32_t> ids;
    tokenizer_->Encode(lines_[i], ids);
    tokens += ids.size();
    std::string got;
    for (size_t k = 0; k < ids.size(); ++k) {
      if (k > 0) got += ' ';
      got += std::to_string(ids[k]);
    }
    ASSERT_EQ(got, expected[i]) << "line " << i << ": " << lines_[i];
    absl::StatusOr<std::string> decoded = tokenizer_->Decode(ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, lines_[i]);
  }
  EXPECT_GT(tokens, 10'000u);
}

TEST_P(SentencePieceTokenizerTest, MakeTokenizerAndBadIds) {
  auto made = MakeTokenizer("sentencepiece:" + prefix_ + ".model", "");
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->source_sha256(), tokenizer_->source_sha256());
  const std::vector<uint32_t> bad = {5, 2000};
  auto decoded = tokenizer_->Decode(bad);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("token id 2000"));
  auto missing = MakeTokenizer("sentencepiece:/no/such.model", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/no/such.model"));
}

INSTANTIATE_TEST_SUITE_P(ModelTypes, SentencePieceTokenizerTest,
                         ::testing::Values("bpe", "unigram"));

}  // namespace
}  // namespace trellis
