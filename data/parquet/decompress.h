// A Parquet page's bytes, decompressed under its column chunk's codec:
// UNCOMPRESSED, SNAPPY (libsnappy), GZIP (zlib) or ZSTD (libzstd). The
// others (BROTLI, LZ4, LZ4_RAW, LZO) are refused by name.
//
// A page declares its decompressed size; the data must decompress to
// exactly that many bytes, and is never decompressed past it.
//
// Thread safety: pure functions; a PageBuffer is used by one thread at a
// time.
#ifndef TRELLIS_DATA_PARQUET_DECOMPRESS_H_
#define TRELLIS_DATA_PARQUET_DECOMPRESS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis::parquet {

// OK for a codec Decompress reads; Unimplemented naming it otherwise.
absl::Status CheckCodec(int32_t codec);

// Memory for decompressed pages, reused from page to page and never
// zeroed (the decompressor writes every byte it hands out).
class PageBuffer {
 public:
  // At least `size` bytes; what they held before is gone.
  char* Get(size_t size);
  // Frees the memory when it holds more than `keep` bytes.
  void Shrink(size_t keep);

 private:
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0;
};

// `data` decompressed to `size` bytes: a view of `data` itself when
// uncompressed, else of `buffer`, which holds the result. InvalidArgument
// saying why when the data does not decompress to `size` bytes.
absl::StatusOr<std::string_view> Decompress(int32_t codec,
                                            std::string_view data, size_t size,
                                            PageBuffer& buffer);

}  // namespace trellis::parquet

#endif  // TRELLIS_DATA_PARQUET_DECOMPRESS_H_
