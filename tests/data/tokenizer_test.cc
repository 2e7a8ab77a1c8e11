// Tests of MakeTokenizer, the byte tokenizer, the UTF-8 helpers, and the gpt2
// tokenizer's loading and BPE rules on small synthetic asset files. The tests
// against the real GPT-2 vocabulary are in tokenizer_gpt2_test.cc.
#include "data/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/byte_tokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "data/utf8.h"
#include "tests/data/tokenizer_test_util.h"

namespace trellis {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<uint32_t> EncodeWith(const Tokenizer& tokenizer,
                                 std::string_view text) {
  std::vector<uint32_t> ids;
  tokenizer.Encode(text, ids);
  return ids;
}

TEST(MakeTokenizerTest, UnknownNameSaysWhichExist) {
  auto tokenizer = MakeTokenizer("sentencepiece", "");  // no model path
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer.status().message(),
            "unknown tokenizer 'sentencepiece'; use byte, gpt2, "
            "hf:PATH/tokenizer.json or sentencepiece:PATH.model");
}

TEST(MakeTokenizerTest, ByteNeedsNoAssets) {
  auto tokenizer = MakeTokenizer("byte", "/nonexistent");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->name(), "byte");
}

TEST(ByteTokenizerTest, VocabularyAndEot) {
  ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.vocab_size(), 257);
  EXPECT_EQ(tokenizer.eot_token(), 256u);
  const std::vector<uint32_t> eot = {256};
  EXPECT_EQ(tokenizer.Decode(eot).value(), "<|endoftext|>");
}

TEST(ByteTokenizerTest, EncodesBytesAndAppends) {
  ByteTokenizer tokenizer;
  std::vector<uint32_t> ids = {7};
  tokenizer.Encode("H\xC3\xA9\xFF", ids);
  EXPECT_THAT(ids, ElementsAre(7, 72, 0xC3, 0xA9, 0xFF));
}

TEST(ByteTokenizerTest, DecodeNamesUnknownId) {
  ByteTokenizer tokenizer;
  const std::vector<uint32_t> ids = {65, 257};
  auto text = tokenizer.Decode(ids);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("257"));
}

TEST(ByteTokenizerTest, RoundTripsRandomBytesAndUtf8) {
  ByteTokenizer tokenizer;
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    const std::string text =
        i % 2 ? tokenizer_testing::RandomBytes(rng, rng() % 300)
              : tokenizer_testing::RandomUtf8(rng, rng() % 300);
    EXPECT_EQ(tokenizer.Decode(EncodeWith(tokenizer, text)).value(), text);
  }
}

TEST(TokenizerUtf8Test, EncodesAndDecodesEveryLength) {
  for (char32_t c : {0x24, 0xA2, 0x939, 0x20AC, 0xD55C, 0x10348, 0x10FFFF}) {
    std::string text;
    AppendUtf8(c, text);
    size_t pos = 0;
    char32_t decoded = 0;
    ASSERT_TRUE(NextUtf8(text, pos, decoded));
    EXPECT_EQ(decoded, c);
    EXPECT_EQ(pos, text.size());
  }
}

TEST(TokenizerUtf8Test, RejectsInvalidSequences) {
  for (std::string_view bad :
       {"\x80", "\xC3", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80",
        "\xF4\x90\x80\x80", "\xF8\x88\x80\x80\x80", "\xE2\x82", "\xFF"}) {
    EXPECT_FALSE(IsValidUtf8(bad)) << ::testing::PrintToString(bad);
  }
  EXPECT_TRUE(IsValidUtf8("plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
}

// Writes a tiny GPT-2-format vocabulary to a fresh directory: the 256 byte
// symbols (id = byte), then `tokens` in order, then <|endoftext|>; vocab.bpe
// holds "#version: 0.2" and `merges`.
class Gpt2TokenizerSyntheticTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) /
        ("tokenizer_" +
         std::string(
             ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The byte-to-unicode symbol of each byte, written out independently of
  // the tokenizer: printable Latin-1 stands for itself, the rest from U+0100.
  static std::string Symbol(unsigned char b) {
    static const std::vector<std::string> table = [] {
      std::vector<std::string> t(256);
      char32_t next = 0x100;
      for (int i = 0; i < 256; ++i) {
        const bool printable =
            (i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
        AppendUtf8(printable ? i : next++, t[i]);
      }
      return t;
    }();
    return table[b];
  }

  void WriteEncoder(const std::vector<std::string>& tokens) {
    nlohmann::json json = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) json[Symbol(b)] = b;
    uint32_t id = 256;
    for (const std::string& token : tokens) json[token] = id++;
    json["<|endoftext|>"] = id;
    Write("encoder.json", json.dump());
  }
  void WriteMerges(const std::vector<std::string>& merges) {
    std::string text = "#version: 0.2\n";
    for (const std::string& merge : merges) text += merge + "\n";
    Write("vocab.bpe", text);
  }
  void Write(const std::string& file, const std::string& contents) {
    std::ofstream(dir_ / file, std::ios::binary) << contents;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> Load() {
    return MakeTokenizer("gpt2", dir_.string());
  }
  void ExpectLoadError(absl::StatusCode code,
                       const std::vector<std::string>& fragments) {
    auto tokenizer = Load();
    ASSERT_FALSE(tokenizer.ok());
    EXPECT_EQ(tokenizer.status().code(), code) << tokenizer.status();
    for (const std::string& fragment : fragments) {
      EXPECT_THAT(tokenizer.status().message(), HasSubstr(fragment));
    }
  }

  std::filesystem::path dir_;
};

TEST_F(Gpt2TokenizerSyntheticTest, MissingEncoderNamesFileAndFix) {
  ExpectLoadError(absl::StatusCode::kNotFound,
                  {(dir_ / "encoder.json").string(), "not found",
                   "scripts/fetch-gpt2-assets.sh", "--tokenizer_dir"});
}

TEST_F(Gpt2TokenizerSyntheticTest, MissingMergesNamesFileAndFix) {
  WriteEncoder({});
  ExpectLoadError(absl::StatusCode::kNotFound,
                  {(dir_ / "vocab.bpe").string(), "not found",
                   "scripts/fetch-gpt2-assets.sh"});
}

TEST_F(Gpt2TokenizerSyntheticTest, EncoderThatIsNotJson) {
  Write("encoder.json", "{\"a\": 1,");
  WriteMerges({});
  ExpectLoadError(absl::StatusCode::kInvalidArgument,
                  {"encoder.json", "not valid JSON"});
}

TEST_F(Gpt2TokenizerSyntheticTest, EncoderThatIsNotAnObject) {
  Write("encoder.json", "[1, 2, 3]");
  ExpectLoadError(absl::StatusCode::kInvalidArgument,
                  {"encoder.json", "JSON object"});
}

TEST_F(Gpt2TokenizerSyntheticTest, EncoderWithBadId) {
  Write("encoder.json", "{\"a\": -4}");
  ExpectLoadError(absl::StatusCode::kInvalidArgument,
                  {"encoder.json", "token 'a'"});
}

TEST_F(Gpt2TokenizerSyntheticTest, EncoderWithDuplicateId) {
  Write("encoder.json", "{\"a\": 3, \"b\": 3}");
  ExpectLoadError(absl::StatusCode::kInvalidArgument,
                  {"encoder.json", "id 3 is used twice"});
}

TEST_F(Gpt2TokenizerSyntheticTest, EncoderMissingAByte) {
  Write("encoder.json", "{\"a\": 0, \"<|endoftext|>\": 1}");
  WriteMerges({});
  ExpectLoadError(absl::StatusCode::kInvalidArgument,
                  {"encoder.json", "no token for byte 0x00"});
}

TEST_F(Gpt2TokenizerSyntheticTest, MergeLineWithoutTwoSymbols) {
  WriteEncoder({"ab"});
  WriteMerges({"a b", "abc"});
  ExpectLoadError(absl::StatusCode::kInvalidArgument,
                  {"vocab.bpe", "line 3", "'abc'"});
}

TEST_F(Gpt2TokenizerSyntheticTest, MergeOfUnknownToken) {
  WriteEncoder({"ab"});
  WriteMerges({"a b", "ab c"});
  ExpectLoadError(absl::StatusCode::kInvalidArgument,
                  {"vocab.bpe", "line 3", "'abc' is not in encoder.json"});
}

TEST_F(Gpt2TokenizerSyntheticTest, EncodesAndDecodesWithMerges) {
  // Ids: 256 "ab", 257 "abc", 258 " ab"; "Ġ" is the symbol of ' '.
  WriteEncoder({"ab", "abc", Symbol(' ') + "ab"});
  WriteMerges({"a b", "ab c", Symbol(' ') + " ab"});
  auto tokenizer = Load();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 260);
  EXPECT_EQ((*tokenizer)->eot_token(), 259u);
  EXPECT_THAT(EncodeWith(**tokenizer, "abc ab abd"),
              ElementsAre(257, 258, 258, 'd'));
  const std::vector<uint32_t> ids = {257, 259, 258};
  EXPECT_EQ((*tokenizer)->Decode(ids).value(), "abc<|endoftext|> ab");
  const std::vector<uint32_t> unknown = {260};
  auto decoded = (*tokenizer)->Decode(unknown);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decoded.status().message(), HasSubstr("token id 260"));
}

// encoder.py merges every occurrence of the best pair in one left-to-right
// pass before it looks for the next best pair, even when the pass creates a
// pair of better rank. "aa a" ranks before "a a" here on purpose: a BPE that
// re-picks after each single merge would give "aaa a" for "aaaa".
TEST_F(Gpt2TokenizerSyntheticTest, MergesEveryOccurrenceOfBestPairPerPass) {
  WriteEncoder({"aaa", "aa"});  // ids 256, 257
  WriteMerges({"aa a", "a a"});
  auto tokenizer = Load();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(EncodeWith(**tokenizer, "aaaa"), ElementsAre(257, 257));
  EXPECT_THAT(EncodeWith(**tokenizer, "aaa"), ElementsAre(256));
  // "aa aa a", then the next pass merges the now-present "aa a".
  EXPECT_THAT(EncodeWith(**tokenizer, "aaaaa"), ElementsAre(257, 256));
}

TEST_F(Gpt2TokenizerSyntheticTest, ToleratesCrlfAndBlankLinesInMerges) {
  WriteEncoder({"ab"});
  Write("vocab.bpe", "#version: 0.2\r\na b\r\n\r\n");
  auto tokenizer = Load();
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(EncodeWith(**tokenizer, "ab"), ElementsAre(256));
}

}  // namespace
}  // namespace trellis
