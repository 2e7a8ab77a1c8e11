// Parsing of the footer and page headers (metadata.h).
#include "data/parquet/metadata.h"

#include <array>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/parquet/thrift_compact.h"
#include "framework/status.h"

namespace trellis::parquet {
namespace {

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

template <typename Out>
absl::Status ReadI32Into(CompactReader& r, ThriftType t, Out& out) {
  TRELLIS_ASSIGN_OR_RETURN(const int32_t value, r.ReadI32(t));
  out = value;
  return absl::OkStatus();
}

// A count or size that cannot be negative.
template <typename Out>
absl::Status ReadCountInto(CompactReader& r, ThriftType t, Out& out) {
  TRELLIS_ASSIGN_OR_RETURN(const int64_t value, r.ReadInt(t, 0, kI32Max));
  out = static_cast<int32_t>(value);
  return absl::OkStatus();
}

template <typename Out>
absl::Status ReadSizeInto(CompactReader& r, ThriftType t, Out& out) {
  TRELLIS_ASSIGN_OR_RETURN(const int64_t value, r.ReadInt(t, 0, kI64Max));
  out = value;
  return absl::OkStatus();
}

// Fields seen, by id (ids above 31 are never required).
class Seen {
 public:
  void Add(int16_t id) {
    if (id >= 0 && id < 32) bits_ |= uint32_t{1} << id;
  }
  // InvalidArgument naming the first missing required field.
  absl::Status Require(
      absl::string_view what,
      std::initializer_list<std::pair<int, const char*>> fields) const {
    for (const auto& [id, name] : fields) {
      if ((bits_ & (uint32_t{1} << id)) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " lacks its required field ", name));
      }
    }
    return absl::OkStatus();
  }

 private:
  uint32_t bits_ = 0;
};

std::string EnumName(int32_t value, std::initializer_list<const char*> names) {
  if (value >= 0 && static_cast<size_t>(value) < names.size()) {
    const char* name = names.begin()[value];
    if (name != nullptr) return name;
  }
  return absl::StrCat("#", value);
}

absl::Status ParseLogicalType(CompactReader& r, ThriftType type,
                              SchemaElement& element) {
  // A union: the id of its one field names the type.
  return r.ReadStruct(type, [&](int16_t id, ThriftType t) {
    if (!element.logical_type.has_value()) element.logical_type = id;
    return r.Skip(t);
  });
}

absl::Status ParseSchemaElement(CompactReader& r, ThriftType type,
                                SchemaElement& element) {
  Seen seen;
  TRELLIS_RETURN_IF_ERROR(
      r.ReadStruct(type, [&](int16_t id, ThriftType t) -> absl::Status {
        seen.Add(id);
        switch (id) {
          case 1:
            return ReadI32Into(r, t, element.type);
          case 3:
            return ReadI32Into(r, t, element.repetition);
          case 4: {
            TRELLIS_ASSIGN_OR_RETURN(const std::string_view name,
                                     r.ReadBinary(t));
            element.name = std::string(name);
            return absl::OkStatus();
          }
          case 5:
            return ReadCountInto(r, t, element.num_children);
          case 6:
            return ReadI32Into(r, t, element.converted_type);
          case 10:
            return ParseLogicalType(r, t, element);
          default:
            return r.Skip(t);
        }
      }));
  return seen.Require("a schema element", {{4, "name"}});
}

absl::Status ParseRowGroup(CompactReader& r, ThriftType type, RowGroup& group,
                           std::string_view bytes) {
  Seen seen;
  TRELLIS_RETURN_IF_ERROR(
      r.ReadStruct(type, [&](int16_t id, ThriftType t) -> absl::Status {
        seen.Add(id);
        if (id == 3) return ReadSizeInto(r, t, group.num_rows);
        if (id != 1) return r.Skip(t);
        return r.ReadList(t, [&](ThriftType element) -> absl::Status {
          const size_t start = r.position();
          TRELLIS_RETURN_IF_ERROR(r.Skip(element));
          if (element != ThriftType::kStruct) {
            return absl::InvalidArgumentError("a column chunk not a struct");
          }
          group.columns.push_back(bytes.substr(start, r.position() - start));
          return absl::OkStatus();
        });
      }));
  return seen.Require("a row group", {{1, "columns"}, {3, "num_rows"}});
}

absl::Status ParseColumnMetaData(CompactReader& r, ThriftType type,
                                 ColumnChunk& chunk) {
  Seen seen;
  TRELLIS_RETURN_IF_ERROR(
      r.ReadStruct(type, [&](int16_t id, ThriftType t) -> absl::Status {
        seen.Add(id);
        switch (id) {
          case 1:
            return ReadI32Into(r, t, chunk.type);
          case 3:
            return r.ReadList(t, [&](ThriftType element) -> absl::Status {
              TRELLIS_ASSIGN_OR_RETURN(const std::string_view part,
                                       r.ReadBinary(element));
              chunk.path.emplace_back(part);
              return absl::OkStatus();
            });
          case 4:
            return ReadI32Into(r, t, chunk.codec);
          case 5:
            return ReadSizeInto(r, t, chunk.num_values);
          case 6:
            return ReadSizeInto(r, t, chunk.total_uncompressed_size);
          case 7:
            return ReadSizeInto(r, t, chunk.total_compressed_size);
          case 9:
            return ReadSizeInto(r, t, chunk.data_page_offset);
          case 11:
            return ReadSizeInto(r, t, chunk.dictionary_page_offset);
          default:
            return r.Skip(t);
        }
      }));
  return seen.Require("a column's metadata", {{1, "type"},
                                              {3, "path_in_schema"},
                                              {4, "codec"},
                                              {5, "num_values"},
                                              {7, "total_compressed_size"},
                                              {9, "data_page_offset"}});
}

absl::Status ParseDataPageHeader(CompactReader& r, ThriftType type, bool v2,
                                 DataPageHeader& page) {
  Seen seen;
  TRELLIS_RETURN_IF_ERROR(
      r.ReadStruct(type, [&](int16_t id, ThriftType t) -> absl::Status {
        seen.Add(id);
        if (id == 1) return ReadCountInto(r, t, page.num_values);
        if (!v2) {
          if (id == 2) return ReadI32Into(r, t, page.encoding);
          if (id == 3) return ReadI32Into(r, t, page.definition_level_encoding);
          return r.Skip(t);
        }
        switch (id) {
          case 2:
            return ReadCountInto(r, t, page.num_nulls);
          case 3:
            return ReadCountInto(r, t, page.num_rows);
          case 4:
            return ReadI32Into(r, t, page.encoding);
          case 5:
            return ReadCountInto(r, t, page.definition_levels_byte_length);
          case 6:
            return ReadCountInto(r, t, page.repetition_levels_byte_length);
          case 7: {
            TRELLIS_ASSIGN_OR_RETURN(page.is_compressed, r.ReadBool(t));
            return absl::OkStatus();
          }
          default:
            return r.Skip(t);
        }
      }));
  if (!v2) {
    return seen.Require("a data page header",
                        {{1, "num_values"}, {2, "encoding"}});
  }
  return seen.Require("a data page v2 header", {{1, "num_values"},
                                                {2, "num_nulls"},
                                                {4, "encoding"},
                                                {5, "levels' lengths"},
                                                {6, "levels' lengths"}});
}

absl::Status ParseDictionaryPageHeader(CompactReader& r, ThriftType type,
                                       DictionaryPageHeader& page) {
  Seen seen;
  TRELLIS_RETURN_IF_ERROR(
      r.ReadStruct(type, [&](int16_t id, ThriftType t) -> absl::Status {
        seen.Add(id);
        if (id == 1) return ReadCountInto(r, t, page.num_values);
        if (id == 2) return ReadI32Into(r, t, page.encoding);
        return r.Skip(t);
      }));
  return seen.Require("a dictionary page header",
                      {{1, "num_values"}, {2, "encoding"}});
}

}  // namespace

std::string TypeName(int32_t type) {
  return EnumName(type, {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT",
                         "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"});
}

std::string CodecName(int32_t codec) {
  return EnumName(codec, {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI",
                          "LZ4", "ZSTD", "LZ4_RAW"});
}

std::string EncodingName(int32_t encoding) {
  return EnumName(encoding,
                  {"PLAIN", nullptr, "PLAIN_DICTIONARY", "RLE", "BIT_PACKED",
                   "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY",
                   "DELTA_BYTE_ARRAY", "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"});
}

absl::StatusOr<FileMetaData> ParseFileMetaData(std::string_view bytes) {
  CompactReader r(bytes);
  FileMetaData meta;
  Seen seen;
  TRELLIS_RETURN_IF_ERROR(r.ReadStruct(
      ThriftType::kStruct, [&](int16_t id, ThriftType t) -> absl::Status {
        seen.Add(id);
        switch (id) {
          case 2:
            return r.ReadList(t, [&](ThriftType element) {
              return ParseSchemaElement(r, element, meta.schema.emplace_back());
            });
          case 3:
            return ReadSizeInto(r, t, meta.num_rows);
          case 4:
            return r.ReadList(t, [&](ThriftType element) {
              return ParseRowGroup(r, element, meta.row_groups.emplace_back(),
                                   bytes);
            });
          default:
            return r.Skip(t);
        }
      }));
  TRELLIS_RETURN_IF_ERROR(seen.Require(
      "the footer", {{2, "schema"}, {3, "num_rows"}, {4, "row_groups"}}));
  return meta;
}

absl::StatusOr<ColumnChunk> ParseColumnChunk(std::string_view bytes) {
  CompactReader r(bytes);
  ColumnChunk chunk;
  TRELLIS_RETURN_IF_ERROR(r.ReadStruct(
      ThriftType::kStruct, [&](int16_t id, ThriftType t) -> absl::Status {
        if (id == 1) chunk.has_file_path = true;
        if (id != 3) return r.Skip(t);
        chunk.has_meta_data = true;
        return ParseColumnMetaData(r, t, chunk);
      }));
  return chunk;
}

absl::StatusOr<PageHeader> ParsePageHeader(std::string_view bytes) {
  CompactReader r(bytes);
  PageHeader page;
  Seen seen;
  TRELLIS_RETURN_IF_ERROR(r.ReadStruct(
      ThriftType::kStruct, [&](int16_t id, ThriftType t) -> absl::Status {
        seen.Add(id);
        switch (id) {
          case 1:
            return ReadI32Into(r, t, page.type);
          case 2:
            return ReadCountInto(r, t, page.uncompressed_page_size);
          case 3:
            return ReadCountInto(r, t, page.compressed_page_size);
          case 5:
            return ParseDataPageHeader(r, t, false, page.data.emplace());
          case 8:
            return ParseDataPageHeader(r, t, true, page.data_v2.emplace());
          case 7:
            return ParseDictionaryPageHeader(r, t, page.dictionary.emplace());
          default:
            return r.Skip(t);
        }
      }));
  TRELLIS_RETURN_IF_ERROR(
      seen.Require("a page header", {{1, "type"},
                                     {2, "uncompressed_page_size"},
                                     {3, "compressed_page_size"}}));
  page.header_size = r.position();
  return page;
}

}  // namespace trellis::parquet
