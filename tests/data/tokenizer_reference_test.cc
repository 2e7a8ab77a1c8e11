// Compares the gpt2 tokenizer with GPT-2's reference encoder at test time:
// a few kilobytes of varied text are encoded by both, the reference being the
// JavaScript port of OpenAI's encoder.py that scripts/fetch-gpt2-assets.sh
// keeps beside the assets (Encoder.js), run with node through
// tests/data/tokenizer_reference.js. Skips when node or Encoder.js is absent.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/data/tokenizer_test_util.h"

namespace trellis {
namespace {

// Fragments the random texts are stitched from. Avoided: U+0085, U+FEFF and
// U+180E, on which JavaScript's `\s` differs from GPT-2's (see
// WhitespaceIsUnicodeWhiteSpace), and code points newer than Unicode 14,
// where the engines' Unicode tables may differ.
constexpr const char* kFragments[] = {
    "The quick brown fox jumps over the lazy dog.",
    "It's",
    "I'm",
    "you're",
    "we've",
    "they'll",
    "she'd",
    "DON'T",
    "'s",
    "'",
    "rock'n'roll",
    " ",
    "  ",
    "   ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
    " \n ",
    "0",
    "42",
    "3.14159",
    "1,000,000",
    "2024-05-01",
    "x86_64",
    "v1.2.3",
    "...",
    "?!",
    "!!!",
    "---",
    "***",
    "(",
    ")",
    "[]",
    "{}",
    "<>",
    "\"",
    "`",
    ",",
    ",,",
    ",,,",
    ";",
    ":",
    "@",
    "#",
    "$",
    "%",
    "^",
    "&",
    "|",
    "\\",
    "/",
    "https://example.org/a/b?c=d&e=f",
    "foo@bar.com",
    "snake_case",
    "CamelCase",
    "ALLCAPS",
    "naïve",
    "café",
    "Ünïcödé",
    "Привет",
    "мир",
    "Γειά",
    "こんにちは",
    "世界",
    "你好，",
    "안녕",
    "مرحبا",
    "שלום",
    "हिन्दी",
    "½",
    "²",
    "٣٤",
    "Ⅻ",
    "\u00a0",
    "\u2009",
    "\u3000",
    "\u2028",
    "—",
    "“",
    "”",
    "‘",
    "’",
    "…",
    "😀",
    "👍🏽",
    "👨‍👩‍👧",
    "🇺🇸",
    "❤️",
    "€",
    "£",
    "¥",
    "def f(x):\n    return x ** 2\n",
    "for (int i = 0; i < n; ++i) {}",
    "supercalifragilisticexpialidocious",
    "aaaaaaaaaaaaaaaa",
    "<|endoftext|>",
    "\u00e9\u0301",
    "ﬁ",
    "Ａ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢"};

std::vector<std::string> VariedTexts() {
  std::vector<std::string> texts;
  std::mt19937 rng(2024);
  constexpr size_t kFragmentCount = std::size(kFragments);
  for (int t = 0; t < 60; ++t) {
    std::string text;
    const int pieces = 5 + rng() % 40;
    for (int i = 0; i < pieces; ++i) {
      text += kFragments[rng() % kFragmentCount];
      if (rng() % 3 == 0) text += ' ';
    }
    texts.push_back(std::move(text));
  }
  return texts;
}

// Runs the reference encoder on `texts`; returns its JSON output, or "" with
// `error` set.
std::string RunReference(const std::vector<std::string>& texts,
                         std::string& error) {
  // Per process: ctest runs this binary's tests in parallel.
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      ("tokenizer_reference." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string input = (dir / "in.json").string();
  const std::string output = (dir / "out.json").string();
  std::ofstream(input) << nlohmann::json(texts).dump();
  const std::string command = "node '" + std::string(TRELLIS_SOURCE_DIR) +
                              "/tests/data/tokenizer_reference.js' '" +
                              tokenizer_testing::Gpt2AssetsDir() + "' < '" +
                              input + "' > '" + output + "'";
  if (std::system(command.c_str()) != 0) {
    error = "reference encoder failed: " + command;
    return "";
  }
  std::ifstream in(output);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

class Gpt2TokenizerReferenceTest : public tokenizer_testing::Gpt2Test {};

TEST_F(Gpt2TokenizerReferenceTest, MatchesJavaScriptReferenceOnVariedText) {
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "node is not installed; cannot run GPT-2's reference "
                    "encoder (the committed goldens still ran)";
  }
  if (!std::filesystem::exists(tokenizer_testing::Gpt2AssetsDir() +
                               "/Encoder.js")) {
    GTEST_SKIP() << "Encoder.js is not in "
                 << tokenizer_testing::Gpt2AssetsDir()
                 << "; re-run scripts/fetch-gpt2-assets.sh after deleting "
                    "that directory to get it";
  }
  const std::vector<std::string> texts = VariedTexts();
  size_t total_bytes = 0;
  for (const std::string& text : texts) total_bytes += text.size();
  ASSERT_GT(total_bytes, 3000u);

  std::string error;
  const std::string output = RunReference(texts, error);
  ASSERT_FALSE(output.empty()) << error;
  const nlohmann::json reference = nlohmann::json::parse(output);
  ASSERT_EQ(reference.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(reference[i]["text"].get<std::string>(), texts[i]);
    const std::vector<uint32_t> expected = reference[i]["ids"];
    EXPECT_THAT(Encode(texts[i]), ::testing::ElementsAreArray(expected))
        << "text: " << ::testing::PrintToString(texts[i]);
  }
}

}  // namespace
}  // namespace trellis
