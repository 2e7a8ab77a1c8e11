// Compares the hf tokenizer with Hugging Face's JavaScript tokenizer.json
// implementation (@huggingface/tokenizers, fetched at test time by
// scripts/fetch-tokenizers-js.sh and run with node): token for token on a
// whole book (the King James Bible) with GPT-2's tokenizer.json, and on mixed
// text with the hand-written Llama 3 and Llama 2 style files. Skips when
// node, npm or the network is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "data/gpt2_tokenizer_json.h"
#include "data/hf_tokenizer.h"
#include "tests/data/hf_tokenizer_test_util.h"
#include "tests/data/tokenizer_test_util.h"

namespace trellis {
namespace {

using nlohmann::json;

// Encodes `texts` with trellis and with the reference; every id sequence,
// with and without special tokens, and every decoding must agree, and (when
// `round_trip`) trellis must decode its ids back to the text.
void ExpectMatchesReference(const std::string& tokenizer_json,
                            const std::vector<std::string>& texts,
                            bool round_trip = true) {
  const std::string path =
      hf_testing::WriteTemp("tokenizer.json", tokenizer_json);
  std::string skip, error;
  const json reference = hf_testing::RunReference(path, texts, skip, error);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_EQ(reference.size(), texts.size());
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
      HfTokenizer::Parse(tokenizer_json, path);
  ASSERT_TRUE(t.ok()) << t.status();
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<uint32_t> ids, special_ids;
    (*t)->Encode(texts[i], ids);
    (*t)->EncodeWithSpecialTokens(texts[i], special_ids);
    const std::vector<uint32_t> expected = reference[i]["ids"];
    const std::string shown = ::testing::PrintToString(texts[i].substr(0, 300));
    for (size_t k = 0; k < std::min(ids.size(), expected.size()); ++k) {
      ASSERT_EQ(ids[k], expected[k])
          << "text " << i << ", token " << k << ": " << shown;
    }
    ASSERT_EQ(ids.size(), expected.size()) << "text " << i << ": " << shown;
    EXPECT_EQ(special_ids,
              reference[i]["special_ids"].get<std::vector<uint32_t>>());
    absl::StatusOr<std::string> decoded = (*t)->Decode(ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, reference[i]["decoded"].get<std::string>());
    if (round_trip) {
      EXPECT_TRUE(*decoded == texts[i]) << "text " << i << " does not "
                                        << "round-trip";
    }
  }
}

TEST(HfTokenizerReferenceTest, Gpt2JsonMatchesOnAWholeBook) {
  absl::StatusOr<std::string> gpt2 =
      Gpt2TokenizerJson(tokenizer_testing::Gpt2AssetsDir());
  ASSERT_TRUE(gpt2.ok()) << gpt2.status()
                         << " (run scripts/fetch-gpt2-assets.sh)";
  const std::string book = tokenizer_testing::ReadKjvBible();
  if (book.empty()) GTEST_SKIP() << "the `bible` program (bible-kjv) is absent";
  ASSERT_GT(book.size(), 4'000'000u);
  ExpectMatchesReference(*gpt2, {book});
}

TEST(HfTokenizerReferenceTest, Gpt2JsonMatchesOnMixedText) {
  absl::StatusOr<std::string> gpt2 =
      Gpt2TokenizerJson(tokenizer_testing::Gpt2AssetsDir());
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  ExpectMatchesReference(*gpt2, hf_testing::MixedTexts(100, {}));
}

TEST(HfTokenizerReferenceTest, Llama3StyleMatches) {
  std::vector<std::string> specials;
  for (const char* s : hf_testing::kLlama3Specials) {
    if (std::string(s) != "<|end_of_text|>") specials.push_back(s);
  }
  ExpectMatchesReference(hf_testing::Llama3StyleJson(),
                         hf_testing::MixedTexts(150, specials));
}

TEST(HfTokenizerReferenceTest, Llama2StyleMatches) {
  ExpectMatchesReference(hf_testing::Llama2StyleJson(),
                         hf_testing::MixedTexts(150, {}));
  // Llama 2's normalizer prepends "▁" to the text after each special token,
  // so such texts do not round-trip (in Hugging Face's tokenizers either).
  ExpectMatchesReference(hf_testing::Llama2StyleJson(),
                         hf_testing::MixedTexts(150, {"<s>", "<unk>"}),
                         /*round_trip=*/false);
}

// Newer Llama 2 style files (Mistral's too) put the "▁" handling in a
// Metaspace pre-tokenizer instead of the normalizer. Only "split": false:
// the reference ignores "split" (Hugging Face's Rust tokenizers split
// before each "▁" when it is true, as the hf tokenizer does).
TEST(HfTokenizerReferenceTest, MetaspaceStyleMatches) {
  json root = json::parse(hf_testing::Llama2StyleJson());
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "Metaspace"},
                           {"replacement", "▁"},
                           {"prepend_scheme", "first"},
                           {"split", false}};
  // A text that starts with a space gets no "▁" prepended, and the Strip
  // decoder then drops that space: no round trip (in Hugging Face's
  // tokenizers either).
  ExpectMatchesReference(root.dump(),
                         hf_testing::MixedTexts(150, {"<s>", "<unk>"}),
                         /*round_trip=*/false);
}

}  // namespace
}  // namespace trellis
