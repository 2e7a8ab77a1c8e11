// trellis-preprocess with the file-based tokenizers: --tokenizer=hf:PATH
// and sentencepiece:PATH write the tokenizer's ids and its identity (kind,
// vocabulary, end-of-text, SHA-256 of the file) and the file itself into
// the token file; a
// Llama 3 tokenizer.json's <|begin_of_text|> starts every document.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "data/tokenizer_file.h"
#include "tests/data/hf_tokenizer_test_util.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

// Runs trellis-preprocess on `text` with `spec` and `split` into
// dir/out.h5.
void Preprocess(const std::string& dir, const std::string& spec,
                const std::string& text, const std::string& split = "file") {
  const std::string input = dir + "/in.txt", output = dir + "/out.h5";
  std::ofstream(input, std::ios::binary) << text;
  const std::string command = std::string(TRELLIS_BINARY_DIR) +
                              "/bin/trellis-preprocess --input=" + input +
                              " --output=" + output + " --tokenizer=" + spec +
                              " --split=" + split + " --threads=2 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

// Preprocesses `text` as one document with `spec`; checks the file against
// the tokenizer itself.
void ExpectPreprocessed(const std::string& dir, const std::string& spec,
                        const std::string& text) {
  const std::string output = dir + "/out.h5";
  ASSERT_NO_FATAL_FAILURE(Preprocess(dir, spec, text));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      MakeTokenizer(spec, "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<uint32_t> ids;
  if (const std::optional<uint32_t> bos = (*tokenizer)->bos_token()) {
    ids.push_back(*bos);
  }
  (*tokenizer)->Encode(text, ids);
  ids.push_back((*tokenizer)->eot_token());

  absl::StatusOr<TokenDataset> dataset = TokenDataset::Open(output);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const TokenizerIdentity want = TokenizerIdentity::Of(**tokenizer);
  EXPECT_EQ(dataset->tokenizer_identity().ToString(), want.ToString());
  EXPECT_EQ(want.sha256.size(), 64u);
  // The tokenizer's own file is kept in the token file, whole.
  absl::StatusOr<std::optional<TokenizerFile>> kept =
      ReadTokenizerFile(output, dataset->tokenizer_identity());
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(kept->has_value());
  std::ifstream source(spec.substr(spec.find(':') + 1), std::ios::binary);
  EXPECT_EQ((*kept)->bytes,
            std::string(std::istreambuf_iterator<char>(source), {}));
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

// Every document starts with <|begin_of_text|>, before its tokens and
// after the previous document's end-of-text; a 2.5 MB document, which the
// reader cuts into 1 MB pieces, gets one, at its start. BOS appears nowhere
// else.
TEST(PreprocessTokenizersTest, Llama3DocumentsStartWithBeginOfText) {
  const std::string dir = test::ScratchDir();
  const std::string json = dir + "/tokenizer.json";
  std::ofstream(json) << hf_testing::Llama3StyleJson();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      MakeTokenizer("hf:" + json, "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& t = **tokenizer;
  ASSERT_TRUE(t.bos_token().has_value());
  const uint32_t bos = *t.bos_token();
  const std::vector<std::string> short_docs = {"In the beginning", "was",
                                               "the Word"};
  std::string long_doc;
  while (long_doc.size() < (size_t{5} << 19)) long_doc += "and it was so ";
  std::string text;
  for (const std::string& doc : short_docs) text += doc + "\n";
  text += long_doc + "\n";
  ASSERT_NO_FATAL_FAILURE(Preprocess(dir, "hf:" + json, text, "line"));

  absl::StatusOr<TokenDataset> dataset = TokenDataset::Open(dir + "/out.h5");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ(dataset->num_documents(), 4);
  std::vector<int32_t> stored(dataset->num_tokens());
  ASSERT_TRUE(dataset->ReadTokens(0, stored.size(), stored.data()).ok());
  absl::StatusOr<std::vector<int64_t>> offsets = dataset->ReadDocOffsets(0, 4);
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  // The short documents, exactly.
  std::vector<uint32_t> want;
  for (const std::string& doc : short_docs) {
    want.push_back(bos);
    t.Encode(doc, want);
    want.push_back(t.eot_token());
  }
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(stored[i], static_cast<int32_t>(want[i])) << "token " << i;
  }
  // Each document's first token is BOS, and no other token is.
  int64_t bos_count = 0;
  for (int32_t id : stored) bos_count += id == static_cast<int32_t>(bos);
  EXPECT_EQ(bos_count, 4);
  for (int64_t offset : *offsets) {
    EXPECT_EQ(stored[offset], static_cast<int32_t>(bos)) << offset;
  }
  EXPECT_EQ(stored.back(), static_cast<int32_t>(t.eot_token()));
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
