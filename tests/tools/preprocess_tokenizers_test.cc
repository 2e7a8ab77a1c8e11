// trellis-preprocess with the file-based tokenizers: --tokenizer=hf:PATH
// and sentencepiece:PATH write the tokenizer's ids and its identity (kind,
// vocabulary, end-of-text, SHA-256 of the file) into the token file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "tests/data/hf_tokenizer_test_util.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

// Preprocesses `text` as one document with `spec`; checks the file against
// the tokenizer itself.
void ExpectPreprocessed(const std::string& dir, const std::string& spec,
                        const std::string& text) {
  const std::string input = dir + "/in.txt", output = dir + "/out.h5";
  std::ofstream(input, std::ios::binary) << text;
  const std::string command = std::string(TRELLIS_BINARY_DIR) +
                              "/bin/trellis-preprocess --input=" + input +
                              " --output=" + output + " --tokenizer=" + spec +
                              " --threads=2 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      MakeTokenizer(spec, "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<uint32_t> ids;
  (*tokenizer)->Encode(text, ids);
  ids.push_back((*tokenizer)->eot_token());

  absl::StatusOr<TokenDataset> dataset = TokenDataset::Open(output);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const TokenizerIdentity want = TokenizerIdentity::Of(**tokenizer);
  EXPECT_EQ(dataset->tokenizer_identity().ToString(), want.ToString());
  EXPECT_EQ(want.sha256.size(), 64u);
  ASSERT_EQ(dataset->num_tokens(), static_cast<int64_t>(ids.size()));
  std::vector<int32_t> stored(ids.size());
  ASSERT_TRUE(dataset->ReadTokens(0, ids.size(), stored.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(stored[i], static_cast<int32_t>(ids[i])) << "token " << i;
  }
}

TEST(PreprocessTokenizersTest, HfTokenizerJson) {
  const std::string dir = test::ScratchDir();
  const std::string json = dir + "/tokenizer.json";
  std::ofstream(json) << hf_testing::Llama3StyleJson();
  std::string text;
  for (const std::string& t : hf_testing::MixedTexts(50, {"<|eot_id|>"})) {
    text += t + "\n";
  }
  ExpectPreprocessed(dir, "hf:" + json, text);
}

TEST(PreprocessTokenizersTest, SentencePieceModel) {
  if (std::system("command -v spm_train >/dev/null 2>&1") != 0) {
    GTEST_SKIP()
        << "spm_train is not installed (apt-get install sentencepiece)";
  }
  const std::string dir = test::ScratchDir();
  std::string text;
  for (const std::string& t : hf_testing::MixedTexts(300, {})) text += t + "\n";
  std::ofstream(dir + "/train.txt") << text;
  const std::string command = "spm_train --input=" + dir +
                              "/train.txt --model_prefix=" + dir +
                              "/m --vocab_size=1000 --hard_vocab_limit=false"
                              " --byte_fallback=true"
                              " --minloglevel=2 >/dev/null 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  ExpectPreprocessed(dir, "sentencepiece:" + dir + "/m.model", text);
}

}  // namespace
}  // namespace trellis
