// Decoders of the Parquet encodings a string column's pages use
// (Encodings.md in the parquet-format specification): the RLE/bit-packed
// hybrid (definition levels, dictionary indices), DELTA_BINARY_PACKED (the
// lengths inside the next two), and the byte-array encodings PLAIN,
// DELTA_LENGTH_BYTE_ARRAY and DELTA_BYTE_ARRAY.
//
// Every decoder reads only inside the bytes it is given and fails with
// InvalidArgument (what is wrong, no file name) on data that ends early or
// breaks the format. Output goes to ByteArrays, whose budget caps the
// memory a page may expand to: dictionary and prefix encodings repeat
// bytes, so a small page can describe gigabytes; past the budget a decoder
// stops with ResourceExhausted.
//
// Thread safety: plain values and pure functions; a decoder object is used
// from one thread at a time.
#ifndef TRELLIS_DATA_PARQUET_ENCODINGS_H_
#define TRELLIS_DATA_PARQUET_ENCODINGS_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis::parquet {

// Strings back to back, with the end of each.
class ByteArrays {
 public:
  // What one value costs besides its bytes (its end).
  static constexpr size_t kValueOverhead = sizeof(uint64_t);

  ByteArrays() = default;
  explicit ByteArrays(size_t max_memory) : max_memory_(max_memory) {}

  size_t size() const { return ends_.size(); }
  std::string_view operator[](size_t i) const {
    const uint64_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(bytes_).substr(begin, ends_[i] - begin);
  }
  // The bytes and ends held, and what was charged, against max_memory.
  size_t memory() const {
    return bytes_.size() + kValueOverhead * ends_.size() + charged_;
  }
  size_t max_memory() const { return max_memory_; }
  // Whether `values` more values of `bytes_each` bytes each fit the budget.
  bool Fits(uint64_t values, size_t bytes_each) const;

  // Appends a value; ResourceExhausted when it would pass the budget.
  absl::Status Append(std::string_view value);
  // The ResourceExhausted error of a value that does not fit.
  absl::Status OverBudget() const;
  // Counts `bytes` held elsewhere for the same text against the budget.
  absl::Status Charge(size_t bytes);
  // Room for `bytes` of values without growing (an estimate; not charged).
  void Reserve(size_t bytes) { bytes_.reserve(bytes); }
  void Clear();

 private:
  std::string bytes_;
  std::vector<uint64_t> ends_;
  size_t charged_ = 0;
  size_t max_memory_ = std::numeric_limits<size_t>::max();
};

// The RLE/bit-packed hybrid, as runs of equal values.
class RleDecoder {
 public:
  // REQUIRES: 0 <= bit_width <= 32.
  RleDecoder(std::string_view data, int bit_width)
      : data_(data), bit_width_(bit_width) {}

  // The next `count` (>= 1) values equal to `value`: a whole RLE run, or
  // one value of a bit-packed run. False at the end of the data.
  absl::StatusOr<bool> Next(uint32_t& value, uint64_t& count);

 private:
  absl::Status StartRun();

  std::string_view data_;
  int bit_width_;
  size_t pos_ = 0;
  bool rle_ = false;
  uint32_t rle_value_ = 0;
  uint64_t left_ = 0;      // values left in the current run
  size_t packed_bit_ = 0;  // bit-packed run: the next value's bit in data_
};

// Decodes DELTA_BINARY_PACKED integers at the start of `data`: appends them
// to `out` and sets `consumed` to the bytes they took. More than
// `max_values` values is an error.
absl::Status DecodeDeltaBinaryPacked(std::string_view data, size_t max_values,
                                     std::vector<int64_t>& out,
                                     size_t& consumed);

// Appends `count` byte arrays encoded in `data` to `out`.
absl::Status DecodePlainByteArrays(std::string_view data, size_t count,
                                   ByteArrays& out);
absl::Status DecodeDeltaLengthByteArrays(std::string_view data, size_t count,
                                         ByteArrays& out);
absl::Status DecodeDeltaByteArrays(std::string_view data, size_t count,
                                   ByteArrays& out);
// Dictionary indices (a bit-width byte, then the hybrid) of `count` values,
// each appended as its entry of `dictionary`.
absl::Status DecodeDictionaryIndices(std::string_view data, size_t count,
                                     const ByteArrays& dictionary,
                                     ByteArrays& out);

}  // namespace trellis::parquet

#endif  // TRELLIS_DATA_PARQUET_ENCODINGS_H_
