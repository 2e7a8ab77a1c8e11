#include "tools/checkpoint/tensor_checksum.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "framework/float16.h"
#include "framework/rng.h"

namespace trellis {
namespace {

constexpr char kTag[] = "xsum64";
constexpr int64_t kMinChunk = int64_t{1} << 20;
constexpr int64_t kMaxSums = 2048;

uint64_t Term(int64_t index, uint64_t bits) {
  return SplitMix64Finalize(
      static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ULL ^ bits);
}

template <typename Bits>
void AddRange(const char* data, int64_t first, int64_t count, int64_t chunk,
              uint64_t* sums) {
  for (int64_t k = 0; k < count;) {
    const int64_t i = first + k;
    const int64_t c = i / chunk;
    const int64_t end = std::min(count, (c + 1) * chunk - first);
    uint64_t sum = 0;
    for (; k < end; ++k) {
      Bits bits;
      std::memcpy(&bits, data + k * sizeof(Bits), sizeof(Bits));
      sum += Term(first + k, bits);
    }
    sums[c] += sum;
  }
}

}  // namespace

TensorChecksum TensorChecksum::Zero(int64_t elements) {
  TensorChecksum c;
  c.chunk = std::max(kMinChunk, (elements + kMaxSums - 1) / kMaxSums);
  c.sums.assign((elements + c.chunk - 1) / c.chunk, 0);
  return c;
}

void TensorChecksum::Add(const char* data, DType stored, int64_t first,
                         int64_t count) {
  TRELLIS_CHECK(first >= 0 && count >= 0 &&
                (count == 0 || (first + count - 1) / chunk <
                                   static_cast<int64_t>(sums.size())));
  if (DTypeSize(stored) == 4) {
    AddRange<uint32_t>(data, first, count, chunk, sums.data());
  } else {
    TRELLIS_CHECK_EQ(DTypeSize(stored), 2);
    AddRange<uint16_t>(data, first, count, chunk, sums.data());
  }
}

void TensorChecksum::Add(const TensorChecksum& other) {
  TRELLIS_CHECK(chunk == other.chunk && sums.size() == other.sums.size());
  for (size_t c = 0; c < sums.size(); ++c) sums[c] += other.sums[c];
}

std::string TensorChecksum::Format() const {
  std::string text = absl::StrCat(kTag, " ", chunk);
  for (uint64_t s : sums) absl::StrAppend(&text, " ", absl::Hex(s));
  return text;
}

absl::StatusOr<TensorChecksum> TensorChecksum::Parse(const std::string& text) {
  const std::vector<std::string> words =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  TensorChecksum c;
  if (words.size() < 2 || words[0] != kTag ||
      !absl::SimpleAtoi(words[1], &c.chunk) || c.chunk <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not an ", kTag, " checksum: \"", text.substr(0, 40), "\""));
  }
  for (size_t w = 2; w < words.size(); ++w) {
    uint64_t s = 0;
    if (!absl::SimpleHexAtoi(words[w], &s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad checksum word \"", words[w], "\""));
    }
    c.sums.push_back(s);
  }
  return c;
}

namespace {

// The first element whose exponent bits (`mask`) are all set, or -1.
template <typename Bits>
int64_t FirstAllOnes(const char* data, int64_t count, Bits mask) {
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t n = std::min(kBlock, count - b);
    Bits hits = 0;  // Branch-free over a block, so it vectorizes.
    for (int64_t k = 0; k < n; ++k) {
      Bits bits;
      std::memcpy(&bits, data + (b + k) * sizeof(Bits), sizeof(Bits));
      hits |= static_cast<Bits>((bits & mask) == mask);
    }
    if (hits == 0) continue;
    for (int64_t k = 0; k < n; ++k) {
      Bits bits;
      std::memcpy(&bits, data + (b + k) * sizeof(Bits), sizeof(Bits));
      if ((bits & mask) == mask) return b + k;
    }
  }
  return -1;
}

}  // namespace

int64_t FirstNonFinite(const void* data, DType dtype, int64_t count) {
  const char* bytes = static_cast<const char*>(data);
  switch (dtype) {
    case DType::kF32:
      return FirstAllOnes<uint32_t>(bytes, count, 0x7f800000u);
    case DType::kF64:
      return FirstAllOnes<uint64_t>(bytes, count, 0x7ff0000000000000ull);
    case DType::kF16:
      return FirstAllOnes<uint16_t>(bytes, count, 0x7c00);
    case DType::kBF16:
      return FirstAllOnes<uint16_t>(bytes, count, 0x7f80);
    default:
      TRELLIS_CHECK(false) << "FirstNonFinite: not a float type";
  }
  return -1;
}

}  // namespace trellis
