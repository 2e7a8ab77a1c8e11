// The page encodings' decoders (encodings.h).
#include "data/parquet/encodings.h"

#include <algorithm>
#include <cstring>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis::parquet {
namespace {

// Block sizes past this are refused (writers use 128 to a few thousand).
constexpr uint64_t kMaxBlockValues = uint64_t{1} << 20;

absl::Status Malformed(absl::string_view encoding, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(encoding, ": ", what));
}

// ULEB128 at data[pos] (at most 64 bits); advances pos.
bool ReadUleb(std::string_view data, size_t& pos, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && pos < data.size(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(data[pos++]);
    if (shift == 63 && byte > 1) return false;
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

uint64_t UnZigZag(uint64_t n) { return (n >> 1) ^ (~(n & 1) + 1); }

// `width` (<= 64) bits at bit `bit` of data, least significant first.
// REQUIRES: the bits lie inside data.
uint64_t ReadBits(std::string_view data, size_t bit, int width) {
  if (width == 0) return 0;
  const size_t first = bit / 8;
  const int shift = static_cast<int>(bit % 8);
  unsigned __int128 bits = 0;
  for (int k = 0; k * 8 < shift + width; ++k) {
    bits |=
        static_cast<unsigned __int128>(static_cast<uint8_t>(data[first + k]))
        << (8 * k);
  }
  bits >>= shift;
  const uint64_t value = static_cast<uint64_t>(bits);
  return width == 64 ? value : value & ((uint64_t{1} << width) - 1);
}

// Calls `each` with the byte arrays of a DELTA_LENGTH_BYTE_ARRAY stream of
// `count` values.
absl::Status ForEachDeltaLength(
    std::string_view data, size_t count, const char* encoding,
    absl::FunctionRef<absl::Status(size_t i, std::string_view)> each) {
  std::vector<int64_t> lengths;
  size_t pos = 0;
  TRELLIS_RETURN_IF_ERROR(DecodeDeltaBinaryPacked(data, count, lengths, pos));
  if (lengths.size() != count) {
    return Malformed(encoding, absl::StrCat("holds ", lengths.size(),
                                            " lengths for ", count, " values"));
  }
  for (size_t i = 0; i < count; ++i) {
    if (lengths[i] < 0 ||
        static_cast<uint64_t>(lengths[i]) > data.size() - pos) {
      return Malformed(encoding,
                       absl::StrCat("value ", i, " of ", lengths[i],
                                    " bytes passes the end of the page"));
    }
    const size_t length = static_cast<size_t>(lengths[i]);
    TRELLIS_RETURN_IF_ERROR(each(i, data.substr(pos, length)));
    pos += length;
  }
  return absl::OkStatus();
}

}  // namespace

bool ByteArrays::Fits(uint64_t values, size_t bytes_each) const {
  const size_t left = max_memory_ - std::min(max_memory_, memory());
  return values <= left / (bytes_each + kValueOverhead);
}

absl::Status ByteArrays::OverBudget() const {
  return absl::ResourceExhaustedError(
      absl::StrCat("the decoded text passes ", max_memory_, " bytes"));
}

absl::Status ByteArrays::Append(std::string_view value) {
  if (!Fits(1, value.size())) return OverBudget();
  bytes_.append(value);
  ends_.push_back(bytes_.size());
  return absl::OkStatus();
}

absl::Status ByteArrays::Charge(size_t bytes) {
  if (bytes > max_memory_ - std::min(max_memory_, memory())) {
    return OverBudget();
  }
  charged_ += bytes;
  return absl::OkStatus();
}

void ByteArrays::Clear() {
  bytes_.clear();
  ends_.clear();
  charged_ = 0;
}

absl::Status RleDecoder::StartRun() {
  uint64_t header = 0;
  if (!ReadUleb(data_, pos_, header) || header > UINT32_MAX) {
    return Malformed("RLE", "a run header ends early or is too long");
  }
  if (header & 1) {  // bit-packed: groups of 8 values
    const uint64_t groups = header >> 1;
    const uint64_t bytes = groups * static_cast<uint64_t>(bit_width_);
    const size_t left = data_.size() - pos_;
    left_ = groups * 8;
    packed_bit_ = pos_ * 8;
    if (bytes > left) {  // a last run cut short: the values it holds
      left_ = left * 8 / static_cast<uint64_t>(bit_width_);
      pos_ = data_.size();
    } else {
      pos_ += static_cast<size_t>(bytes);
    }
    rle_ = false;
    return absl::OkStatus();
  }
  const size_t value_bytes = static_cast<size_t>(bit_width_ + 7) / 8;
  if (value_bytes > data_.size() - pos_) {
    return Malformed("RLE", "a run's value ends early");
  }
  uint32_t value = 0;
  for (size_t k = 0; k < value_bytes; ++k) {
    value |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + k]))
             << (8 * k);
  }
  pos_ += value_bytes;
  rle_ = true;
  rle_value_ = value;
  left_ = header >> 1;
  return absl::OkStatus();
}

absl::StatusOr<bool> RleDecoder::Next(uint32_t& value, uint64_t& count) {
  while (left_ == 0) {
    if (pos_ >= data_.size()) return false;
    TRELLIS_RETURN_IF_ERROR(StartRun());
  }
  if (rle_) {
    value = rle_value_;
    count = left_;
    left_ = 0;
    return true;
  }
  value = static_cast<uint32_t>(ReadBits(data_, packed_bit_, bit_width_));
  packed_bit_ += static_cast<size_t>(bit_width_);
  --left_;
  count = 1;
  return true;
}

absl::Status DecodeDeltaBinaryPacked(std::string_view data, size_t max_values,
                                     std::vector<int64_t>& out,
                                     size_t& consumed) {
  constexpr const char* kName = "DELTA_BINARY_PACKED";
  size_t pos = 0;
  uint64_t block = 0, miniblocks = 0, total = 0, first = 0;
  if (!ReadUleb(data, pos, block) || !ReadUleb(data, pos, miniblocks) ||
      !ReadUleb(data, pos, total) || !ReadUleb(data, pos, first)) {
    return Malformed(kName, "the header ends early");
  }
  if (block == 0 || block > kMaxBlockValues || miniblocks == 0 ||
      block % miniblocks != 0 || (block / miniblocks) % 8 != 0) {
    return Malformed(kName, absl::StrCat("blocks of ", block, " values in ",
                                         miniblocks, " miniblocks"));
  }
  if (total > max_values) {
    return Malformed(kName, absl::StrCat("holds ", total, " values where ",
                                         max_values, " are expected"));
  }
  const size_t per_miniblock = static_cast<size_t>(block / miniblocks);
  uint64_t last = UnZigZag(first);
  if (total > 0) out.push_back(static_cast<int64_t>(last));
  for (uint64_t left = total == 0 ? 0 : total - 1; left > 0;) {
    uint64_t min_delta = 0;
    if (!ReadUleb(data, pos, min_delta)) {
      return Malformed(kName, "a block header ends early");
    }
    min_delta = UnZigZag(min_delta);
    if (miniblocks > data.size() - pos) {
      return Malformed(kName, "a block's bit widths end early");
    }
    const std::string_view widths = data.substr(pos, miniblocks);
    pos += static_cast<size_t>(miniblocks);
    for (size_t m = 0; m < widths.size() && left > 0; ++m) {
      const int width = static_cast<uint8_t>(widths[m]);
      if (width > 64) {
        return Malformed(kName, absl::StrCat("a bit width of ", width));
      }
      const size_t bytes = per_miniblock * static_cast<size_t>(width) / 8;
      if (bytes > data.size() - pos) {
        return Malformed(kName, "a miniblock ends early");
      }
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>(left, per_miniblock));
      for (size_t j = 0; j < n; ++j) {
        last += min_delta + ReadBits(data, pos * 8 + j * width, width);
        out.push_back(static_cast<int64_t>(last));
      }
      pos += bytes;
      left -= n;
    }
  }
  consumed = pos;
  return absl::OkStatus();
}

absl::Status DecodePlainByteArrays(std::string_view data, size_t count,
                                   ByteArrays& out) {
  size_t pos = 0;
  for (size_t i = 0; i < count; ++i) {
    if (data.size() - pos < 4) {
      return Malformed(
          "PLAIN", absl::StrCat("the page ends at value ", i, " of ", count));
    }
    uint32_t length = 0;
    std::memcpy(&length, data.data() + pos, 4);  // little-endian hosts
    pos += 4;
    if (length > data.size() - pos) {
      return Malformed("PLAIN",
                       absl::StrCat("value ", i, " of ", length,
                                    " bytes passes the end of the page"));
    }
    TRELLIS_RETURN_IF_ERROR(out.Append(data.substr(pos, length)));
    pos += length;
  }
  return absl::OkStatus();
}

absl::Status DecodeDeltaLengthByteArrays(std::string_view data, size_t count,
                                         ByteArrays& out) {
  if (!out.Fits(count, 0)) return out.OverBudget();
  return ForEachDeltaLength(
      data, count, "DELTA_LENGTH_BYTE_ARRAY",
      [&](size_t, std::string_view value) { return out.Append(value); });
}

absl::Status DecodeDeltaByteArrays(std::string_view data, size_t count,
                                   ByteArrays& out) {
  constexpr const char* kName = "DELTA_BYTE_ARRAY";
  if (!out.Fits(count, 0)) return out.OverBudget();
  std::vector<int64_t> prefixes;
  size_t pos = 0;
  TRELLIS_RETURN_IF_ERROR(DecodeDeltaBinaryPacked(data, count, prefixes, pos));
  if (prefixes.size() != count) {
    return Malformed(kName, absl::StrCat("holds ", prefixes.size(),
                                         " prefixes for ", count, " values"));
  }
  std::string value;
  return ForEachDeltaLength(
      data.substr(pos), count, kName,
      [&](size_t i, std::string_view suffix) -> absl::Status {
        if (prefixes[i] < 0 ||
            static_cast<uint64_t>(prefixes[i]) > value.size()) {
          return Malformed(kName,
                           absl::StrCat("value ", i, " takes ", prefixes[i],
                                        " bytes of a value of ", value.size()));
        }
        value.resize(static_cast<size_t>(prefixes[i]));
        value.append(suffix);
        return out.Append(value);
      });
}

absl::Status DecodeDictionaryIndices(std::string_view data, size_t count,
                                     const ByteArrays& dictionary,
                                     ByteArrays& out) {
  if (count == 0) return absl::OkStatus();
  if (data.empty()) return Malformed("RLE_DICTIONARY", "no bit width");
  const int width = static_cast<uint8_t>(data[0]);
  if (width > 32) {
    return Malformed("RLE_DICTIONARY", absl::StrCat("a bit width of ", width));
  }
  RleDecoder indices(data.substr(1), width);
  for (size_t done = 0; done < count;) {
    uint32_t index = 0;
    uint64_t run = 0;
    TRELLIS_ASSIGN_OR_RETURN(const bool more, indices.Next(index, run));
    if (!more) {
      return Malformed(
          "RLE_DICTIONARY",
          absl::StrCat("the indices end at value ", done, " of ", count));
    }
    if (index >= dictionary.size()) {
      return Malformed("RLE_DICTIONARY",
                       absl::StrCat("index ", index, " past the dictionary's ",
                                    dictionary.size(), " entries"));
    }
    run = std::min<uint64_t>(run, count - done);
    const std::string_view entry = dictionary[index];
    if (!out.Fits(run, entry.size())) return out.OverBudget();
    for (uint64_t k = 0; k < run; ++k) {
      TRELLIS_RETURN_IF_ERROR(out.Append(entry));
    }
    done += static_cast<size_t>(run);
  }
  return absl::OkStatus();
}

}  // namespace trellis::parquet
