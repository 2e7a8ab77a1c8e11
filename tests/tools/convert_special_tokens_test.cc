// trellis-convert --to=hf names the tokenizer's special tokens in
// config.json: eos_token_id is its end-of-text, bos_token_id the token its
// documents start with where it has one (Llama 3's <|begin_of_text|>);
// GPT-2's config takes end-of-text for both, as OpenAI's does; what the
// tokenizer does not know is left out rather than guessed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "data/tokenizer.h"
#include "tests/data/hf_tokenizer_test_util.h"
#include "tests/tools/checkpoint_test_util.h"
#include "tests/tools/convert_test_util.h"
#include "tests/tools/hf_llama_test_util.h"
#include "tools/convert/convert.h"
#include "tools/convert/hf_files.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLargeVocab = 1 << 20;

TEST(ConvertSpecialTokensTest, LlamaConfigNamesTheByteTokenizersEndOfText) {
  const std::string dir = test::Scratch();
  fs::create_directories(dir + "/in");
  test::WriteTinyLlama(dir + "/in", {});
  ConvertOptions o;
  o.input = dir + "/in";
  o.to = "trellis";
  o.output = dir + "/ckpt";
  o.tokenizer = "byte";
  ASSERT_TRUE(Convert(o).ok());
  o.input = dir + "/ckpt";
  o.to = "hf";
  o.output = dir + "/out";
  const absl::StatusOr<ConvertSummary> out = Convert(o);
  ASSERT_TRUE(out.ok()) << out.status();
  const nlohmann::json config = nlohmann::json::parse(
      test::ReadFile(dir + "/out/config.json"), nullptr, false);
  ASSERT_TRUE(config.is_object());
  EXPECT_EQ(config.value("eos_token_id", -1), 256);
  EXPECT_FALSE(config.contains("bos_token_id")) << config.dump();
}

TEST(ConvertSpecialTokensTest, AnHfTokenizerGivesItsBeginAndEndOfText) {
  const std::string dir = test::Scratch();
  const std::string json = dir + "/tokenizer.json";
  std::ofstream(json) << hf_testing::Llama3StyleJson();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      MakeTokenizer("hf:" + json, "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ASSERT_TRUE((*tokenizer)->bos_token().has_value());
  const TokenizerIdentity identity = TokenizerIdentity::Of(**tokenizer);

  for (const TokenizerIdentity& recorded : {TokenizerIdentity(), identity}) {
    const HfSpecialTokens t = HfSpecialTokensOf(
        "hf:" + json, recorded, ModelFamilyKind::kLlama, kLargeVocab);
    EXPECT_EQ(t.bos, *(*tokenizer)->bos_token());
    EXPECT_EQ(t.eos, (*tokenizer)->eot_token());
  }
  // A file that is no longer the one the checkpoint recorded is not read:
  // the recorded end-of-text stands, and no bos is guessed.
  TokenizerIdentity other = identity;
  other.sha256 = std::string(64, '0');
  other.eot_token = 7;
  const HfSpecialTokens t = HfSpecialTokensOf(
      "hf:" + json, other, ModelFamilyKind::kLlama, kLargeVocab);
  EXPECT_FALSE(t.bos.has_value());
  EXPECT_EQ(t.eos, 7);
  // Gone altogether: the same.
  fs::remove(json);
  EXPECT_EQ(HfSpecialTokensOf("hf:" + json, other, ModelFamilyKind::kLlama,
                              kLargeVocab)
                .eos,
            7);
}

TEST(ConvertSpecialTokensTest, Gpt2TakesEndOfTextForBothAndUnknownsStayOut) {
  const HfSpecialTokens gpt2 = HfSpecialTokensOf("gpt2", TokenizerIdentity(),
                                                 ModelFamilyKind::kGpt2, 50257);
  EXPECT_EQ(gpt2.bos, 50256);
  EXPECT_EQ(gpt2.eos, 50256);
  const HfSpecialTokens byte = HfSpecialTokensOf("byte", TokenizerIdentity(),
                                                 ModelFamilyKind::kGpt2, 257);
  EXPECT_EQ(byte.bos, 256);
  EXPECT_EQ(byte.eos, 256);
  // No tokenizer known: nothing named.
  const HfSpecialTokens none =
      HfSpecialTokensOf("", TokenizerIdentity(), ModelFamilyKind::kGpt2, 257);
  EXPECT_FALSE(none.bos.has_value());
  EXPECT_FALSE(none.eos.has_value());
  // An id the model's vocabulary does not hold is left out.
  const HfSpecialTokens small = HfSpecialTokensOf("byte", TokenizerIdentity(),
                                                  ModelFamilyKind::kLlama, 200);
  EXPECT_FALSE(small.eos.has_value());
}

}  // namespace
}  // namespace trellis
