// tokenizer.json files built to break the reader, most of them first found
// by its fuzz target (tests/fuzz/tokenizer_json_fuzz.cc): each must be
// refused in one line naming what is wrong, or encode within bounds,
// never crash, hang or exhaust memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "data/hf_tokenizer.h"
#include "tests/data/hf_tokenizer_test_util.h"

namespace trellis {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Status ParseStatus(const json& root) {
  return HfTokenizer::Parse(root.dump(), "test").status();
}

// An id outside the vocabulary went into every encoded text and was read
// past the end of the embedding.
TEST(HfTokenizerHostileTest, PostProcessorIdsMustBeTokens) {
  json root = json::parse(hf_testing::Llama2StyleJson());
  root["post_processor"]["special_tokens"]["<s>"]["ids"] = {70000};
  EXPECT_THAT(ParseStatus(root).message(),
              AllOf(HasSubstr("post_processor"), HasSubstr("70000"),
                    HasSubstr("not in the vocabulary")));

  root["post_processor"] = {{"type", "RobertaProcessing"},
                            {"cls", {"<s>", 1}},
                            {"sep", {"</s>", 4000000}}};
  EXPECT_THAT(ParseStatus(root).message(), HasSubstr("4000000"));
}

// 5e45 was cast to uint32_t (undefined), 2^32 + 1 truncated to 1 and -1
// wrapped to 2^32 - 1.
TEST(HfTokenizerHostileTest, PostProcessorIdsAreUnsigned32BitIntegers) {
  for (const json& id : {json(5e45), json(1.0), json(-1),
                         json((uint64_t{1} << 32) + 1), json("1")}) {
    SCOPED_TRACE(id.dump());
    json root = json::parse(hf_testing::Llama2StyleJson());
    root["post_processor"]["special_tokens"]["<s>"]["ids"] = {id};
    EXPECT_THAT(ParseStatus(root).message(),
                AllOf(HasSubstr("post_processor.single[0]"),
                      HasSubstr("not an unsigned 32-bit integer")));
    root["post_processor"] = {
        {"type", "BertProcessing"}, {"cls", {"<s>", 1}}, {"sep", {"</s>", id}}};
    EXPECT_THAT(ParseStatus(root).message(),
                HasSubstr("post_processor.sep: token id"));
  }
}

// The components are parsed recursively: a Sequence nested 100,000 deep
// overflowed the stack before any check.
TEST(HfTokenizerHostileTest, DeepNestingIsRefusedBeforeParsing) {
  json root = json::parse(hf_testing::Llama2StyleJson());
  root.erase("normalizer");
  std::string nested;
  for (int i = 0; i < 100000; ++i) {
    nested += R"({"type": "Sequence", "normalizers": [)";
  }
  nested += R"({"type": "Prepend", "prepend": "x"})";
  for (int i = 0; i < 100000; ++i) nested += "]}";
  const std::string text =
      R"({"normalizer": )" + nested + "," + root.dump().substr(1);
  EXPECT_THAT(HfTokenizer::Parse(text, "deep.json").status().message(),
              HasSubstr("deep.json nests JSON deeper than 64 levels"));
}

// A Sequence runs its steps by recursion: 20,000 of them overflowed the
// stack on the first encode. Nested Sequences count their steps too, and
// run as if flattened.
TEST(HfTokenizerHostileTest, PreTokenizerSequencesAreFlatAndBounded) {
  const json split = {{"type", "Split"},
                      {"pattern", {{"String", "zz"}}},
                      {"behavior", "Isolated"}};
  json root = json::parse(hf_testing::Llama3StyleJson());
  root["pre_tokenizer"]["pretokenizers"] = json::array();
  for (int i = 0; i < 20000; ++i) {
    root["pre_tokenizer"]["pretokenizers"].push_back(split);
  }
  EXPECT_THAT(ParseStatus(root).message(),
              AllOf(HasSubstr("pre_tokenizer: runs 20000 pre-tokenizers"),
                    HasSubstr("at most 64")));

  json inner = {{"type", "Sequence"},
                {"pretokenizers", json::array({split, split, split})}};
  for (int i = 0; i < 22; ++i) {
    inner["pretokenizers"].push_back(split);
  }
  root["pre_tokenizer"]["pretokenizers"] = {inner, inner, inner};
  EXPECT_THAT(ParseStatus(root).message(), HasSubstr("runs 75"));

  // Llama 3's [Split, ByteLevel] as [[Split], [ByteLevel]]: the same ids.
  const json flat = json::parse(hf_testing::Llama3StyleJson());
  json nested = flat;
  for (json& step : nested["pre_tokenizer"]["pretokenizers"]) {
    step = {{"type", "Sequence"}, {"pretokenizers", json::array({step})}};
  }
  const std::unique_ptr<HfTokenizer> a =
      HfTokenizer::Parse(flat.dump(), "flat").value();
  const std::unique_ptr<HfTokenizer> b =
      HfTokenizer::Parse(nested.dump(), "nested").value();
  for (const std::string& text : hf_testing::MixedTexts(50, {})) {
    std::vector<uint32_t> ids_a, ids_b;
    a->Encode(text, ids_a);
    b->Encode(text, ids_b);
    EXPECT_EQ(ids_a, ids_b) << text;
  }
}

// Replace steps each multiplying the text: six of "." -> 64 bytes made
// 2^36 bytes of each byte of input, at the first encode (or, in the
// decoder, the first decode).
TEST(HfTokenizerHostileTest, StepsThatCouldGrowTextWithoutBoundAreRefused) {
  const json grow = {{"type", "Replace"},
                     {"pattern", {{"Regex", "."}}},
                     {"content", std::string(64, 'x')}};
  json root = json::parse(hf_testing::Llama2StyleJson());
  root["normalizer"]["normalizers"] = json::array();
  for (int i = 0; i < 6; ++i) root["normalizer"]["normalizers"].push_back(grow);
  EXPECT_THAT(ParseStatus(root).message(),
              AllOf(HasSubstr("normalizer: its steps could make 6.87195e+10 "
                              "bytes of each byte"),
                    HasSubstr("at most 64")));

  root = json::parse(hf_testing::Llama2StyleJson());
  root["decoder"]["decoders"].push_back(grow);
  root["decoder"]["decoders"].push_back(grow);
  EXPECT_THAT(ParseStatus(root).message(),
              HasSubstr("decoder: its steps could make 4096 bytes"));
  // One such step is within the bound.
  root["decoder"]["decoders"].erase(root["decoder"]["decoders"].size() - 1);
  EXPECT_TRUE(ParseStatus(root).ok());
}

// An empty Strip content matched every time: a start of 2^31 - 1 spun that
// many times for every decoded token. A float start was cast to int.
TEST(HfTokenizerHostileTest, StripNeedsACharacterAndAnIntegerCount) {
  json root = json::parse(hf_testing::Llama2StyleJson());
  json& strip = root["decoder"]["decoders"][3];
  strip["content"] = "";
  strip["start"] = 2147483647;
  EXPECT_THAT(ParseStatus(root).message(),
              HasSubstr("decoder.decoders[3].content: is empty"));
  strip["content"] = " ";
  strip["start"] = 1e30;
  EXPECT_THAT(ParseStatus(root).message(),
              AllOf(HasSubstr("decoder.decoders[3].start: is 1e+30, not an "
                              "integer in [-2147483648, 2147483647]")));
}

// An added token that the normalizer empties matched at every NUL byte
// without moving on: encoding "a\0b" never returned.
TEST(HfTokenizerHostileTest, AddedTokenEmptiedByTheNormalizerIsRefused) {
  json root = json::parse(hf_testing::Llama2StyleJson());
  root["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"String", "<pad>"}}}, {"content", ""}};
  root["added_tokens"].push_back({{"id", 3},
                                  {"content", "<pad>"},
                                  {"special", false},
                                  {"normalized", true}});
  EXPECT_THAT(ParseStatus(root).message(),
              HasSubstr("added_tokens[3]: content is empty after the "
                        "normalizer"));
}

// (a+)+$ on a run of a's backtracks past PCRE2's match limit: the error
// stopped the program. Matching now ends there and the text still encodes
// and decodes whole.
TEST(HfTokenizerHostileTest, CatastrophicSplitRegexEndsMatching) {
  json root = json::parse(hf_testing::Llama3StyleJson());
  root["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a+)+$"}};
  const std::unique_ptr<HfTokenizer> t =
      HfTokenizer::Parse(root.dump(), "test").value();
  const std::string text = std::string(40, 'a') + "! and more text";
  std::vector<uint32_t> ids;
  t->Encode(text, ids);
  const absl::StatusOr<std::string> decoded = t->Decode(ids);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, text);
}

}  // namespace
}  // namespace trellis
