// A Parquet page's bytes, decompressed under its column chunk's codec:
// UNCOMPRESSED, SNAPPY (libsnappy), GZIP (zlib) or ZSTD (libzstd). The
// others (BROTLI, LZ4, LZ4_RAW, LZO) are refused by name.
//
// A page declares its decompressed size; the data must decompress to
// exactly that many bytes, and is never decompressed past it.
//
// Thread safety: pure functions.
#ifndef TRELLIS_DATA_PARQUET_DECOMPRESS_H_
#define TRELLIS_DATA_PARQUET_DECOMPRESS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis::parquet {

// OK for a codec Decompress reads; Unimplemented naming it otherwise.
absl::Status CheckCodec(int32_t codec);

// `data` decompressed to `size` bytes: a view of `data` itself when
// uncompressed, else of `buffer`, which holds the result. InvalidArgument
// saying why when the data does not decompress to `size` bytes.
absl::StatusOr<std::string_view> Decompress(int32_t codec,
                                            std::string_view data, size_t size,
                                            std::string& buffer);

}  // namespace trellis::parquet

#endif  // TRELLIS_DATA_PARQUET_DECOMPRESS_H_
