// Checksums of stored checkpoint tensors, and the scan for non-finite
// values (docs/checkpoint-format.md, "Integrity").
//
// A tensor's stored elements are cut into chunks of `chunk` consecutive
// logical elements (row-major); each chunk's checksum is the sum, modulo
// 2^64, of Term(i, bits) over its elements, where i is the element's
// logical flat index and bits its stored bit pattern (float32: 32 bits,
// float16/bfloat16: 16). A sum composes over any split of the elements:
// each writer adds the terms of the slices it writes, whatever their shape
// (a tensor-parallel column slice is strided in the file), and the partial
// sums add up to the whole. A reader verifies every chunk its slice touches
// by reading that chunk whole, so a row-split slice costs little more than
// the slice and a column-split one reads the tensor.
//
// A changed element changes its term, and so its chunk's sum, except with
// probability about 2^-64 per corruption.
//
// Stored as the dataset's string attribute `checksum`:
//   "xsum64 <chunk> <hex sum of chunk 0> <hex sum of chunk 1> ..."
//
// Thread safety: pure functions and a value type.
#ifndef TRELLIS_TOOLS_CHECKPOINT_TENSOR_CHECKSUM_H_
#define TRELLIS_TOOLS_CHECKPOINT_TENSOR_CHECKSUM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/tensor.h"

namespace trellis {

inline constexpr char kChecksumAttribute[] = "checksum";

struct TensorChecksum {
  int64_t chunk = 0;           // Elements per chunk (the last may be short).
  std::vector<uint64_t> sums;  // One per chunk.

  // All zero sums, for a tensor of `elements` elements: the chunk is 2^20
  // elements, larger for tensors over 2^31 elements so the attribute stays
  // under 2048 sums.
  static TensorChecksum Zero(int64_t elements);
  // Adds the terms of `count` stored elements of type `stored` (kF32, kF16
  // or kBF16) whose first logical index is `first`.
  // REQUIRES: the elements lie inside the tensor.
  void Add(const char* data, DType stored, int64_t first, int64_t count);
  // Adds another partial sum of the same tensor.
  // REQUIRES: same chunk and number of sums.
  void Add(const TensorChecksum& other);

  std::string Format() const;
  // InvalidArgument when `text` is not a Format() result.
  static absl::StatusOr<TensorChecksum> Parse(const std::string& text);
};

// The index of the first NaN or infinity among `count` elements of type
// `dtype` (kF32, kF64, kF16, kBF16), or -1.
int64_t FirstNonFinite(const void* data, DType dtype, int64_t count);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_TENSOR_CHECKSUM_H_
