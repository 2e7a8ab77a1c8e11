// The text of one flat string column in one row group: its column chunk's
// pages (an optional dictionary page, then v1 or v2 data pages) decoded
// into the column's non-null values in row order, with where its null rows
// fall.
//
// Pages may be compressed with any codec decompress.h reads, and their
// values encoded as PLAIN, PLAIN_DICTIONARY / RLE_DICTIONARY,
// DELTA_LENGTH_BYTE_ARRAY or DELTA_BYTE_ARRAY (encodings.h); definition
// levels (a nullable column) must be RLE. Errors are InvalidArgument naming
// the page by its byte offset in the file, without the file's name;
// ResourceExhausted when the text passes the memory budget.
//
// Thread safety: a pure function over its arguments.
#ifndef TRELLIS_DATA_PARQUET_COLUMN_READER_H_
#define TRELLIS_DATA_PARQUET_COLUMN_READER_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "data/parquet/encodings.h"

namespace trellis::parquet {

struct ColumnText {
  // `count` null rows just before the non-null value `before_value` (or at
  // the end when it is values.size()).
  struct NullRun {
    uint64_t before_value = 0;
    uint64_t count = 0;
  };
  ByteArrays values;
  std::vector<NullRun> nulls;
  uint64_t null_rows = 0;
  // What the chunk used, a bit per PageType and per data pages' Encoding
  // (for tests and diagnostics).
  uint32_t page_types = 0;
  uint32_t encodings = 0;
  uint32_t data_pages = 0;

  uint64_t rows() const { return values.size() + null_rows; }
};

struct ColumnChunkSpec {
  int32_t codec = 0;
  bool nullable = false;    // an OPTIONAL column: definition levels of 1 bit
  int64_t file_offset = 0;  // of the chunk's first byte, for messages
  uint64_t rows = 0;        // the row group's
};

// Decodes `chunk` (a column chunk's bytes) into `out`, whose values' budget
// also bounds the decompressed pages and the dictionary. The chunk must hold
// spec.rows rows.
absl::Status DecodeColumnChunk(std::string_view chunk,
                               const ColumnChunkSpec& spec, ColumnText& out);

}  // namespace trellis::parquet

#endif  // TRELLIS_DATA_PARQUET_COLUMN_READER_H_
