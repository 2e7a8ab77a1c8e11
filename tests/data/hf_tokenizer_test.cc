// Tests of the hf tokenizer that need no JavaScript: GPT-2's tokenizer.json
// (written from third_party_assets/gpt2 by Gpt2TokenizerJson) must encode
// exactly as the gpt2 tokenizer, hand-written Llama-style files must show
// each component's effect, and unsupported components must be named.
#include "data/hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "data/gpt2_tokenizer_json.h"
#include "tests/data/hf_tokenizer_test_util.h"
#include "tests/data/tokenizer_test_util.h"

namespace trellis {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<HfTokenizer> Parse(const std::string& text) {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
      HfTokenizer::Parse(text, "test");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t).value() : nullptr;
}

std::vector<uint32_t> EncodeWith(const Tokenizer& t, std::string_view text) {
  std::vector<uint32_t> ids;
  t.Encode(text, ids);
  return ids;
}

void ExpectRoundTrip(const Tokenizer& t, const std::string& text) {
  absl::StatusOr<std::string> decoded = t.Decode(EncodeWith(t, text));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, text) << ::testing::PrintToString(text);
}

class HfGpt2Test : public tokenizer_testing::Gpt2Test {
 protected:
  static void SetUpTestSuite() {
    Gpt2Test::SetUpTestSuite();
    absl::StatusOr<std::string> text =
        Gpt2TokenizerJson(tokenizer_testing::Gpt2AssetsDir());
    if (!text.ok()) return;
    hf_ = HfTokenizer::Parse(*text, "gpt2 tokenizer.json").value().release();
  }
  static inline const HfTokenizer* hf_ = nullptr;
};

TEST_F(HfGpt2Test, MatchesGpt2TokenizerOnMixedAndRandomText) {
  ASSERT_NE(hf_, nullptr);
  EXPECT_EQ(hf_->vocab_size(), 50257);
  EXPECT_EQ(hf_->eot_token(), 50256u);
  EXPECT_EQ(hf_->name(), "hf");
  EXPECT_EQ(hf_->source_sha256().size(), 64u);
  for (const std::string& text : hf_testing::MixedTexts(200, {})) {
    EXPECT_EQ(EncodeWith(*hf_, text), Encode(text)) << text;
    ExpectRoundTrip(*hf_, text);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) {
    const std::string text = tokenizer_testing::RandomUtf8(rng, 1 + rng() % 80);
    EXPECT_EQ(EncodeWith(*hf_, text), Encode(text));
    ExpectRoundTrip(*hf_, text);
  }
}

TEST_F(HfGpt2Test, EndOfTextInTextIsOrdinaryText) {
  ASSERT_NE(hf_, nullptr);
  EXPECT_THAT(EncodeWith(*hf_, "a<|endoftext|>b"), Not(Contains(50256u)));
  const std::vector<uint32_t> eot = {50256};
  EXPECT_EQ(hf_->Decode(eot).value(), "<|endoftext|>");
  // GPT-2's post-processor adds no token: documents start without a BOS.
  EXPECT_EQ(hf_->bos_token(), std::nullopt);
}

TEST(HfTokenizerTest, Llama3StyleSpecialTokensAndIgnoreMerges) {
  const auto t = Parse(hf_testing::Llama3StyleJson());
  ASSERT_NE(t, nullptr);
  const uint32_t bos = t->TokenId("<|begin_of_text|>").value();
  const uint32_t eot = t->TokenId("<|end_of_text|>").value();
  const uint32_t eot_id = t->TokenId("<|eot_id|>").value();
  EXPECT_EQ(t->eot_token(), eot);
  EXPECT_EQ(t->vocab_size(), eot + 5);
  // Special tokens are matched before BPE, wherever they are.
  const std::vector<uint32_t> ids =
      EncodeWith(*t, "<|begin_of_text|>the<|eot_id|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), bos);
  EXPECT_EQ(ids.back(), eot_id);
  // ...except end-of-text, which stays text.
  EXPECT_THAT(EncodeWith(*t, "x<|end_of_text|>y"), Not(Contains(eot)));
  // " world" is in the vocabulary but no merge builds it.
  EXPECT_THAT(EncodeWith(*t, " world"),
              ElementsAre(t->TokenId("Ġworld").value()));
  // Case-insensitive contractions split as in the pattern.
  EXPECT_THAT(EncodeWith(*t, "IT'S"), Contains(t->TokenId("'").value()));
  std::vector<uint32_t> with_bos;
  t->EncodeWithSpecialTokens("the", with_bos);
  std::vector<uint32_t> expected = {bos};
  for (uint32_t id : EncodeWith(*t, "the")) expected.push_back(id);
  EXPECT_EQ(with_bos, expected);
  // The token each document starts with in token files.
  EXPECT_EQ(t->bos_token(), bos);
  for (const std::string& text : hf_testing::MixedTexts(100, {})) {
    ExpectRoundTrip(*t, text);
  }
}

TEST(HfTokenizerTest, Llama2StyleByteFallbackAndDecoders) {
  const auto t = Parse(hf_testing::Llama2StyleJson());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->eot_token(), 2u);
  EXPECT_EQ(t->bos_token(), t->TokenId("<s>"));
  // "é" is not in the vocabulary: its two UTF-8 bytes become <0xC3> <0xA9>.
  const std::vector<uint32_t> ids = EncodeWith(*t, "é");
  EXPECT_THAT(ids,
              ElementsAre(t->TokenId("▁").value(), t->TokenId("<0xC3>").value(),
                          t->TokenId("<0xA9>").value()));
  EXPECT_EQ(t->Decode(ids).value(), "é");
  EXPECT_THAT(
      EncodeWith(*t, "the God"),
      ElementsAre(t->TokenId("▁the").value(), t->TokenId("▁God").value()));
  for (const std::string& text : hf_testing::MixedTexts(100, {})) {
    ExpectRoundTrip(*t, text);
  }
}

TEST(HfTokenizerTest, MetaspaceSplitKeepsEachWordApart) {
  json root = json::parse(hf_testing::Llama2StyleJson());
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {{"type", "Metaspace"},
                           {"replacement", "▁"},
                           {"prepend_scheme", "always"},
                           {"split", true}};
  const auto split = Parse(root.dump());
  root["pre_tokenizer"]["split"] = false;
  const auto whole = Parse(root.dump());
  ASSERT_NE(split, nullptr);
  ASSERT_NE(whole, nullptr);
  const uint32_t space = split->TokenId("▁").value();
  const uint32_t two_spaces = split->TokenId("▁▁").value();
  // "a  x": "▁a", "▁", "▁x" when split; unsplit, "▁ ▁" merges.
  EXPECT_THAT(EncodeWith(*split, "a  x"), Not(Contains(two_spaces)));
  EXPECT_THAT(EncodeWith(*split, "a  x"), Contains(space));
  EXPECT_THAT(EncodeWith(*whole, "a  x"), Contains(two_spaces));
}

TEST(HfTokenizerTest, ConcurrentEncodersAgree) {
  const auto t = Parse(hf_testing::Llama3StyleJson());
  ASSERT_NE(t, nullptr);
  const std::vector<std::string> texts = hf_testing::MixedTexts(200, {});
  std::vector<std::vector<uint32_t>> expected;
  for (const std::string& text : texts) {
    expected.push_back(EncodeWith(*t, text));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = w; i < texts.size(); i += 1 + w) {
          if (EncodeWith(*t, texts[i]) != expected[i]) ++mismatches[w];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(mismatches, ::testing::Each(0));
}

TEST(HfTokenizerTest, UnsupportedComponentIsNamedWithItsPath) {
  json root = json::parse(hf_testing::Llama3StyleJson());
  root["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Digits"}};
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
      HfTokenizer::Parse(root.dump(), "test");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(),
              HasSubstr("pre_tokenizer type 'Digits' at "
                        "pre_tokenizer.pretokenizers[1]"));

  root = json::parse(hf_testing::Llama3StyleJson());
  root["model"]["type"] = "WordPiece";
  t = HfTokenizer::Parse(root.dump(), "test");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("model type 'WordPiece'"));

  root = json::parse(hf_testing::Llama2StyleJson());
  root["normalizer"]["normalizers"][0] = {{"type", "NFKC"}};
  t = HfTokenizer::Parse(root.dump(), "test");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("normalizer type 'NFKC' at "
                                              "normalizer.normalizers[0]"));
}

TEST(HfTokenizerTest, MalformedFieldsAreErrorsNotCrashes) {
  json root = json::parse(hf_testing::Llama2StyleJson());
  root["model"]["byte_fallback"] = "yes";
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
      HfTokenizer::Parse(root.dump(), "test");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("model.byte_fallback"));

  root = json::parse(hf_testing::Llama2StyleJson());
  root["model"]["vocab"]["<0xZZ>"] = 5000;  // not a byte token
  root["added_tokens"][0]["lstrip"] = 3;
  t = HfTokenizer::Parse(root.dump(), "test");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("unexpected JSON type"));

  root = json::parse(hf_testing::Llama2StyleJson());
  root["model"]["merges"][0] = "▁ t x";
  t = HfTokenizer::Parse(root.dump(), "test");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("model.merges[0]"));
}

// Ids past the table trellis keeps are refused in one line, naming the
// token and its id: 2^32 - 1 wrapped to 0 in `id + 1` and wrote out of
// bounds, 2^32 + 5 was read as 5, and 5e7 took 1.6 GB.
TEST(HfTokenizerTest, HugeTokenIdsAreRefusedNotWrappedOrAllocated) {
  struct Case {
    const char* where;
    uint64_t id;
    const char* path;
  };
  for (const Case& c :
       {Case{"added", 4294967295u, "added_tokens[0].id"},
        Case{"added", (uint64_t{1} << 32) + 5, "added_tokens[0].id"},
        Case{"added", HfTokenizer::kMaxTokenIds, "added_tokens[0].id"},
        Case{"vocab", 50000000, "model.vocab"},
        Case{"vocab", uint64_t{1} << 31, "model.vocab"}}) {
    SCOPED_TRACE(c.id);
    json root = json::parse(hf_testing::Llama2StyleJson());
    if (std::string(c.where) == "added") {
      root["added_tokens"][0]["id"] = c.id;
    } else {
      root["model"]["vocab"]["huge"] = c.id;
    }
    absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
        HfTokenizer::Parse(root.dump(), "test");
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status().message(),
                AllOf(HasSubstr(c.path), HasSubstr(std::to_string(c.id)),
                      HasSubstr("not below 4194304")));
  }
  json root = json::parse(hf_testing::Llama2StyleJson());
  root["added_tokens"][0]["id"] = -3;
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
      HfTokenizer::Parse(root.dump(), "test");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("added_tokens[0].id"));
}

TEST(HfTokenizerTest, MakeTokenizerReadsHfAndRejectsUnknownSpecs) {
  const std::string path =
      hf_testing::WriteTemp("llama3.json", hf_testing::Llama3StyleJson());
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      MakeTokenizer("hf:" + path, "");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->name(), "hf");
  EXPECT_FALSE(MakeTokenizer("hf:/no/such/tokenizer.json", "").ok());
  absl::StatusOr<std::unique_ptr<Tokenizer>> bad = MakeTokenizer("bpe", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("hf:PATH"));
}

}  // namespace
}  // namespace trellis
