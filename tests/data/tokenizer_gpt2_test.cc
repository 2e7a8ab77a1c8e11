// Tests of the gpt2 tokenizer with the real GPT-2 vocabulary, which
// scripts/fetch-gpt2-assets.sh puts in third_party_assets/gpt2. Without it
// these tests fail (they do not skip) and say how to fetch it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "data/byte_tokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "tests/data/tokenizer_test_util.h"

namespace trellis {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

class Gpt2TokenizerTest : public tokenizer_testing::Gpt2Test {
 protected:
  static std::vector<std::string_view> Split(std::string_view text) {
    return dynamic_cast<const Gpt2Tokenizer&>(*tokenizer_).Split(text);
  }
  static void ExpectRoundTrip(const std::string& text) {
    auto decoded = tokenizer_->Decode(Encode(text));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, text) << ::testing::PrintToString(text);
  }
};

TEST_F(Gpt2TokenizerTest, HelloWorld) {
  EXPECT_THAT(Encode("Hello world"), ElementsAre(15496, 995));
}

TEST_F(Gpt2TokenizerTest, VocabularyAndEot) {
  EXPECT_EQ(tokenizer_->name(), "gpt2");
  EXPECT_EQ(tokenizer_->vocab_size(), 50257);
  EXPECT_EQ(tokenizer_->eot_token(), 50256u);
  const std::vector<uint32_t> eot = {50256};
  EXPECT_EQ(tokenizer_->Decode(eot).value(), "<|endoftext|>");
  // The marker written as text is ordinary text.
  EXPECT_THAT(Encode("a<|endoftext|>b"), Not(Contains(50256u)));
}

TEST_F(Gpt2TokenizerTest, EncodeAppends) {
  std::vector<uint32_t> ids = {1, 2};
  tokenizer_->Encode("Hello world", ids);
  EXPECT_THAT(ids, ElementsAre(1, 2, 15496, 995));
}

// The goldens are GPT-2's reference encodings of tricky strings
// (contractions, numbers, punctuation runs, runs of spaces and newlines,
// many scripts, emoji, trailing whitespace), made by the JavaScript port of
// OpenAI's encoder; tests/data/tokenizer_reference.js says how to remake them.
TEST_F(Gpt2TokenizerTest, MatchesReferenceGoldens) {
  const std::string path = std::string(TRELLIS_SOURCE_DIR) +
                           "/tests/data/testdata/tokenizer_gpt2_golden.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  const nlohmann::json goldens = nlohmann::json::parse(in);
  ASSERT_GE(goldens.size(), 30u);
  for (const nlohmann::json& golden : goldens) {
    const std::string text = golden["text"];
    const std::vector<uint32_t> expected = golden["ids"];
    EXPECT_THAT(Encode(text), ElementsAreArray(expected))
        << "text: " << ::testing::PrintToString(text);
    ExpectRoundTrip(text);
  }
}

TEST_F(Gpt2TokenizerTest, SplitFollowsGpt2Pattern) {
  EXPECT_THAT(Split("\n\n  x"), ElementsAre("\n\n ", " x"));
  EXPECT_THAT(Split("a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(Split("it's 'quoted'"),
              ElementsAre("it", "'s", " '", "quoted", "'"));
  EXPECT_THAT(Split("x1234 tail  "), ElementsAre("x", "1234", " tail", "  "));
  EXPECT_THAT(Split(""), ElementsAre());
}

// `\s` is Unicode White_Space as in Python's `regex` (the results below are
// what OpenAI's encoder.py gives): U+0085 is whitespace, U+FEFF and U+180E
// are not. PCRE2's and JavaScript's own `\s` each disagree on one of these.
TEST_F(Gpt2TokenizerTest, WhitespaceIsUnicodeWhiteSpace) {
  EXPECT_THAT(Split("a \u0085b"), ElementsAre("a", " ", "\u0085", "b"));
  EXPECT_THAT(Split("x \uFEFFy"), ElementsAre("x", " \uFEFF", "y"));
  EXPECT_THAT(Split("x \u180Ey"), ElementsAre("x", " \u180E", "y"));
  EXPECT_THAT(Split("a\u3000\u3000b"),
              ElementsAre("a", "\u3000", "\u3000", "b"));
}

// Bytes that are not part of valid UTF-8 never join a regex piece: each
// maximal run of them is a piece of its own, so any bytes round-trip.
TEST_F(Gpt2TokenizerTest, InvalidUtf8IsSplitOffAndRoundTrips) {
  EXPECT_THAT(Split("abc\xFF\xFE"
                    "def"),
              ElementsAre("abc", "\xFF\xFE", "def"));
  EXPECT_THAT(Split("caf\xC3"), ElementsAre("caf", "\xC3"));
  EXPECT_THAT(Split(" \x80x"), ElementsAre(" ", "\x80", "x"));
  EXPECT_THAT(Split("\xED\xA0\x80"), ElementsAre("\xED\xA0\x80"));
  std::vector<uint32_t> parts = Encode("Hello");
  for (std::string_view part : {"\xFF", " world"}) {
    for (uint32_t id : Encode(part)) parts.push_back(id);
  }
  EXPECT_EQ(Encode("Hello\xFF world"), parts);
  for (const char* text :
       {"\xFF", "\xC0\xAF", "a\xE2\x82", "\xF4\x90\x80\x80 z",
        "\xED\xA0\x80\xED\xB0\x80", "ok \x80\x80\x80 ok", "\xC3\xA9\xC3"}) {
    ExpectRoundTrip(text);
  }
}

TEST_F(Gpt2TokenizerTest, DecodeNamesUnknownId) {
  for (uint32_t bad : {50257u, 4000000000u}) {
    const std::vector<uint32_t> ids = {15496, bad};
    auto text = tokenizer_->Decode(ids);
    ASSERT_FALSE(text.ok());
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(text.status().message(),
                HasSubstr("token id " + std::to_string(bad)));
  }
}

TEST_F(Gpt2TokenizerTest, RoundTripsRandomUtf8) {
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    ExpectRoundTrip(tokenizer_testing::RandomUtf8(rng, rng() % 200));
  }
}

TEST_F(Gpt2TokenizerTest, RoundTripsRandomBytes) {
  std::mt19937 rng(8);
  for (int i = 0; i < 500; ++i) {
    ExpectRoundTrip(tokenizer_testing::RandomBytes(rng, rng() % 200));
  }
}

// Pieces of 256 KiB (far too long for the cache) must neither crash the
// regex engine nor take quadratic time (which would take hours here; BPE
// over them takes well under a second in a release build).
TEST_F(Gpt2TokenizerTest, HugePiecesRoundTrip) {
  constexpr size_t kSize = 256 << 10;
  for (char c : {'a', ' ', '!', '7', '\n', '\xFF'}) {
    const std::string text(kSize, c);
    const auto start = std::chrono::steady_clock::now();
    ExpectRoundTrip(text);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    EXPECT_LT(seconds, 60.0) << "256 KiB of byte " << int(c);
  }
}

TEST_F(Gpt2TokenizerTest, ConcurrentEncodesAgreeWithSerial) {
  std::mt19937 rng(9);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i)
    texts.push_back(tokenizer_testing::RandomUtf8(rng, 2000));
  std::vector<std::vector<uint32_t>> serial;
  for (const std::string& text : texts) serial.push_back(Encode(text));
  constexpr int kThreads = 8;
  std::vector<std::vector<std::vector<uint32_t>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < texts.size(); ++i) {
        // Each thread starts at a different text so they race on the cache.
        const size_t k = (i + t * 8) % texts.size();
        results[t].resize(texts.size());
        results[t][k] = Encode(texts[k]);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(results[t], serial) << t;
}

double EncodeSeconds(const Tokenizer& tokenizer, const std::string& text,
                     std::vector<uint32_t>& ids) {
  const auto start = std::chrono::steady_clock::now();
  tokenizer.Encode(text, ids);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

TEST_F(Gpt2TokenizerTest, KjvBibleRoundTrips) {
  const std::string bible = tokenizer_testing::ReadKjvBible();
  if (bible.empty()) {
    GTEST_SKIP() << "the `bible` program (Debian package bible-kjv) is not "
                    "installed";
  }
  std::vector<uint32_t> ids;
  const double seconds = EncodeSeconds(*tokenizer_, bible, ids);
  const double mb_per_s = bible.size() / seconds / 1e6;
  std::printf("gpt2: KJV %zu bytes -> %zu tokens in %.2f s (%.1f MB/s)\n",
              bible.size(), ids.size(), seconds, mb_per_s);
  RecordProperty("kjv_gpt2_mb_per_s", std::to_string(mb_per_s));
  EXPECT_GT(ids.size(), bible.size() / 6);
  EXPECT_LT(ids.size(), bible.size() / 2);
  auto decoded = tokenizer_->Decode(ids);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(*decoded == bible) << "KJV did not round-trip";
}

TEST(ByteTokenizerKjvTest, KjvBibleRoundTrips) {
  const std::string bible = tokenizer_testing::ReadKjvBible();
  if (bible.empty()) {
    GTEST_SKIP() << "the `bible` program (Debian package bible-kjv) is not "
                    "installed";
  }
  ByteTokenizer tokenizer;
  std::vector<uint32_t> ids;
  EncodeSeconds(tokenizer, bible, ids);
  EXPECT_EQ(ids.size(), bible.size());
  auto decoded = tokenizer.Decode(ids);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(*decoded == bible) << "KJV did not round-trip";
}

}  // namespace
}  // namespace trellis
