// Shared helpers for the tokenizer tests: where the GPT-2 assets live, a
// fixture that loads them once (and fails, not skips, when they are absent),
// and random text generators.
#ifndef TRELLIS_TESTS_DATA_TOKENIZER_TEST_UTIL_H_
#define TRELLIS_TESTS_DATA_TOKENIZER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "data/utf8.h"

namespace trellis::tokenizer_testing {

inline std::string Gpt2AssetsDir() {
  return std::string(TRELLIS_SOURCE_DIR) + "/" + kDefaultGpt2AssetsDir;
}

// Loads the real GPT-2 tokenizer once per test suite. Tests fail with the fix
// when the assets are missing: silently passing would hide a broken setup.
class Gpt2Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (tokenizer_ != nullptr) return;
    absl::StatusOr<std::unique_ptr<Tokenizer>> loaded =
        MakeTokenizer("gpt2", Gpt2AssetsDir());
    if (loaded.ok()) {
      tokenizer_ = std::move(loaded).value().release();
    } else {
      load_error_ = loaded.status().ToString();
    }
  }
  void SetUp() override {
    ASSERT_NE(tokenizer_, nullptr)
        << "GPT-2 tokenizer assets are missing or broken (" << load_error_
        << "); run scripts/fetch-gpt2-assets.sh from the repository root";
  }
  static std::vector<uint32_t> Encode(std::string_view text) {
    std::vector<uint32_t> ids;
    tokenizer_->Encode(text, ids);
    return ids;
  }
  // Shared by all tests of the process: the tokenizer is immutable.
  static inline const Tokenizer* tokenizer_ = nullptr;
  static inline std::string load_error_;
};

// Random valid UTF-8 drawn mostly from code points that exercise every branch
// of the pattern: ASCII letters, digits, punctuation and whitespace, Latin-1,
// other scripts, combining marks, emoji and any other scalar value.
inline std::string RandomUtf8(std::mt19937& rng, size_t code_points) {
  static constexpr char kAscii[] = "aeiou xyzAB'sdltmrve019 .,!?-_\n\t\r  ";
  std::string text;
  for (size_t i = 0; i < code_points; ++i) {
    char32_t c;
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2:
        c = static_cast<unsigned char>(kAscii[rng() % (sizeof(kAscii) - 1)]);
        break;
      case 3:
        c = 0x80 + rng() % 0x180;  // Latin-1 and Latin Extended
        break;
      case 4:
        c = 0x300 + rng() % 0x700;  // marks, Greek, Cyrillic, Hebrew, Arabic
        break;
      case 5:
        c = 0x2000 + rng() % 0x1000;  // spaces, punctuation, symbols
        break;
      case 6:
        c = 0x1F300 + rng() % 0x300;  // emoji
        break;
      default:
        c = rng() % 0x110000;
        if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;
    }
    AppendUtf8(c, text);
  }
  return text;
}

inline std::string RandomBytes(std::mt19937& rng, size_t size) {
  std::string bytes(size, '\0');
  for (char& b : bytes) b = static_cast<char>(rng() & 0xFF);
  return bytes;
}

// The text of the King James Bible from the `bible` program (Debian package
// bible-kjv), or "" when it is not installed.
inline std::string ReadKjvBible() {
  std::string text;
  FILE* pipe = popen(
      "command -v bible >/dev/null 2>&1 && "
      "bible gen1:1-rev22:21 2>/dev/null",
      "r");
  if (pipe == nullptr) return text;
  char buffer[1 << 16];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    text.append(buffer, n);
  }
  pclose(pipe);
  return text;
}

}  // namespace trellis::tokenizer_testing

#endif  // TRELLIS_TESTS_DATA_TOKENIZER_TEST_UTIL_H_
