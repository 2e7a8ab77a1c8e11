// Helpers of the converter tests: scratch directories, and safetensors and
// llm.c files assembled byte by byte, independently of trellis's writers.
//
// Thread safety: none needed; each test calls these from its own thread.
#ifndef TRELLIS_TESTS_TOOLS_CONVERT_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_CONVERT_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/convert/llmc.h"

namespace trellis::test {

// A fresh directory for the running test alone.
inline std::string Scratch() {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      absl::StrCat("trellis_corrupt_", info->test_suite_name(), ".",
                   info->name(), ".", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <typename T>
inline void Append(std::string& bytes, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  bytes.append(raw, sizeof(T));
}

// 8-byte little-endian length, the header text, the data.
inline std::string Safetensors(const std::string& header,
                               const std::string& data) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) {
    bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  return bytes + header + data;
}

// L=2, C=4, NH=2, maxT=3, V=5, Vp=8; element i of tensor k is k + i/1024,
// but wte's padding rows [V, Vp), which are zero.
inline LlmcHeader TinyHeader(int32_t version) {
  LlmcHeader h;
  h.version = version;
  h.max_seq_len = 3;
  h.vocab_size = 5;
  h.n_layer = 2;
  h.n_head = 2;
  h.channels = 4;
  h.padded_vocab_size = 8;
  return h;
}

inline std::string LlmcBytes(const LlmcHeader& h) {
  std::string bytes;
  const int32_t words[8] = {kLlmcMagic,
                            h.version,
                            static_cast<int32_t>(h.max_seq_len),
                            static_cast<int32_t>(h.vocab_size),
                            static_cast<int32_t>(h.n_layer),
                            static_cast<int32_t>(h.n_head),
                            static_cast<int32_t>(h.channels),
                            static_cast<int32_t>(h.padded_vocab_size)};
  for (int32_t w : words) Append(bytes, w);
  bytes.append(248 * 4, '\0');
  const int64_t c = h.channels, l = h.n_layer;
  const int64_t counts[16] = {h.padded_vocab_size * c,
                              h.max_seq_len * c,
                              l * c,
                              l * c,
                              l * 3 * c * c,
                              l * 3 * c,
                              l * c * c,
                              l * c,
                              l * c,
                              l * c,
                              l * 4 * c * c,
                              l * 4 * c,
                              l * 4 * c * c,
                              l * c,
                              c,
                              c};
  for (int k = 0; k < 16; ++k) {
    for (int64_t i = 0; i < counts[k]; ++i) {
      // llm.c pads wte with zero rows.
      const bool padding = k == 0 && i >= h.vocab_size * c;
      const float v =
          padding ? 0.0f
                  : static_cast<float>(k) + static_cast<float>(i) / 1024.0f;
      if (h.version == kLlmcVersionBf16) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        Append(bytes, static_cast<uint16_t>(bits >> 16));
      } else {
        Append(bytes, v);
      }
    }
  }
  return bytes;
}

// The first byte offset where `a` and `b` differ, or -1 when equal (a
// readable failure for binary files).
inline int64_t FirstDifference(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

}  // namespace trellis::test

#endif  // TRELLIS_TESTS_TOOLS_CONVERT_TEST_UTIL_H_
