// The parts of Parquet's metadata (parquet.thrift in the parquet-format
// specification) that reading one flat string column needs: the footer's
// schema, row groups and column chunks, and a page's header. Everything
// else in the footer (statistics, key-value metadata, indexes) is skipped.
//
// Parsing checks what the decoder relies on (the Thrift structure, required
// fields present, sizes and counts not negative) and nothing about how the
// parts fit together, which ParquetFile checks. Errors are InvalidArgument
// without a file name.
//
// Thread safety: pure functions and plain values.
#ifndef TRELLIS_DATA_PARQUET_METADATA_H_
#define TRELLIS_DATA_PARQUET_METADATA_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis::parquet {

// Enum values as parquet.thrift numbers them.
enum class PhysicalType : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};
enum class Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum class Codec : int32_t {
  kUncompressed = 0,
  kSnappy = 1,
  kGzip = 2,
  kLzo = 3,
  kBrotli = 4,
  kLz4 = 5,
  kZstd = 6,
  kLz4Raw = 7,
};
enum class Encoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};
enum class PageType : int32_t {
  kDataPage = 0,
  kIndexPage = 1,
  kDictionaryPage = 2,
  kDataPageV2 = 3,
};

// Names for messages: "BYTE_ARRAY", "SNAPPY", "DELTA_BYTE_ARRAY"; a number
// the specification does not define prints as such.
std::string TypeName(int32_t type);
std::string CodecName(int32_t codec);
std::string EncodingName(int32_t encoding);

struct SchemaElement {
  std::string name;
  std::optional<int32_t> type;        // PhysicalType; unset for a group
  std::optional<int32_t> repetition;  // Repetition; unset for the root
  int32_t num_children = 0;
  std::optional<int32_t> converted_type;
  // The LogicalType union's field id (1 STRING, 4 ENUM, 12 JSON, ...).
  std::optional<int16_t> logical_type;
};

struct ColumnChunk {
  bool has_file_path = false;  // data in another file
  bool has_meta_data = false;
  int32_t type = 0;
  std::vector<std::string> path;
  int32_t codec = 0;
  int64_t num_values = 0;
  int64_t total_compressed_size = 0;
  int64_t total_uncompressed_size = 0;
  int64_t data_page_offset = 0;
  std::optional<int64_t> dictionary_page_offset;
};

struct RowGroup {
  int64_t num_rows = 0;
  // Each column chunk's Thrift bytes, views into the footer: only the
  // chunk of the column read is parsed (ParseColumnChunk), so a wide file's
  // footer costs a few bytes per chunk in memory.
  std::vector<std::string_view> columns;
};

struct FileMetaData {
  std::vector<SchemaElement> schema;
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
};

// Parses a footer; the result holds views into `bytes`.
absl::StatusOr<FileMetaData> ParseFileMetaData(std::string_view bytes);
// Parses one of RowGroup::columns.
absl::StatusOr<ColumnChunk> ParseColumnChunk(std::string_view bytes);

struct DataPageHeader {  // v1 and v2
  int32_t num_values = 0;
  int32_t encoding = 0;
  int32_t definition_level_encoding = 3;      // v1 only
  int32_t num_nulls = 0;                      // v2 only
  int32_t num_rows = 0;                       // v2 only
  int32_t definition_levels_byte_length = 0;  // v2 only
  int32_t repetition_levels_byte_length = 0;  // v2 only
  bool is_compressed = true;                  // v2 only
};

struct DictionaryPageHeader {
  int32_t num_values = 0;
  int32_t encoding = 0;
};

struct PageHeader {
  int32_t type = 0;
  int32_t uncompressed_page_size = 0;
  int32_t compressed_page_size = 0;
  std::optional<DataPageHeader> data;     // a v1 data page's
  std::optional<DataPageHeader> data_v2;  // a v2 data page's
  std::optional<DictionaryPageHeader> dictionary;
  size_t header_size = 0;  // bytes the header itself took
};

// Parses the page header at the start of `bytes`.
absl::StatusOr<PageHeader> ParsePageHeader(std::string_view bytes);

}  // namespace trellis::parquet

#endif  // TRELLIS_DATA_PARQUET_METADATA_H_
