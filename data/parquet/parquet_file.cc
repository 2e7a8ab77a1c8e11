// Opening a Parquet file and reading a column's row groups
// (parquet_file.h).
#include "data/parquet/parquet_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/parquet/decompress.h"
#include "framework/status.h"

namespace trellis::parquet {
namespace {

constexpr size_t kMagicBytes = 4;
constexpr size_t kListedColumns = 20;  // at most, in a missing column's error

struct Selected {
  size_t leaf = 0;    // the column's index among the leaves
  size_t leaves = 0;  // of the whole schema
  bool nullable = false;
};

struct TopLevel {
  size_t element = 0;  // in the schema
  size_t first_leaf = 0;
  size_t leaves = 0;
};

// A name from the file or the command line, quoted for a one-line message:
// control characters are escaped, UTF-8 is kept.
std::string Quoted(std::string_view name) {
  std::string out = "\"";
  for (const char c : name) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7F) {
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

// The schema's top-level fields, in order, walked without recursion (a
// hostile schema may nest as deep as it is long); `leaves` gets the count
// of all leaves.
absl::StatusOr<std::vector<TopLevel>> TopLevelFields(
    const std::vector<SchemaElement>& schema, size_t& leaves) {
  if (schema.empty()) return absl::InvalidArgumentError("an empty schema");
  std::vector<TopLevel> fields;
  std::vector<int64_t> open = {schema[0].num_children};  // children left
  size_t i = 1;
  leaves = 0;
  while (!open.empty()) {
    if (open.back() == 0) {
      open.pop_back();
      continue;
    }
    if (i >= schema.size()) {
      return absl::InvalidArgumentError(
          "a schema whose groups count more fields than it lists");
    }
    --open.back();
    if (open.size() == 1) fields.push_back({i, leaves, 0});
    if (schema[i].num_children > 0) {
      open.push_back(schema[i].num_children);
    } else {
      ++leaves;
      ++fields.back().leaves;
    }
    ++i;
  }
  return fields;
}

std::string ColumnList(const std::vector<SchemaElement>& schema,
                       const std::vector<TopLevel>& fields) {
  std::vector<std::string> names;
  for (size_t i = 0; i < fields.size() && i < kListedColumns; ++i) {
    names.push_back(Quoted(schema[fields[i].element].name));
  }
  std::string list = absl::StrJoin(names, ", ");
  if (fields.size() > kListedColumns) {
    absl::StrAppend(&list, " and ", fields.size() - kListedColumns, " more");
  }
  return fields.empty() ? "none" : list;
}

// An annotation's name, or its number in parquet.thrift.
std::string AnnotationName(
    int value, std::initializer_list<std::pair<int, const char*>> names) {
  for (const auto& [number, name] : names) {
    if (number == value) return name;
  }
  return absl::StrCat("#", value, " (parquet.thrift)");
}

// Refuses a BYTE_ARRAY column annotated as something other than text.
absl::Status CheckTextAnnotation(const SchemaElement& e,
                                 const std::string& column) {
  // ConvertedType UTF8, ENUM, JSON; LogicalType STRING, ENUM, JSON.
  const bool text_converted = !e.converted_type.has_value() ||
                              *e.converted_type == 0 ||
                              *e.converted_type == 4 || *e.converted_type == 19;
  const bool text_logical = !e.logical_type.has_value() ||
                            *e.logical_type == 1 || *e.logical_type == 4 ||
                            *e.logical_type == 12;
  if (text_converted && text_logical) return absl::OkStatus();
  const std::string what =
      !text_logical
          ? AnnotationName(*e.logical_type, {{5, "DECIMAL"},
                                             {13, "BSON"},
                                             {14, "UUID"},
                                             {16, "VARIANT"},
                                             {17, "GEOMETRY"},
                                             {18, "GEOGRAPHY"}})
          : AnnotationName(*e.converted_type, {{5, "DECIMAL"}, {20, "BSON"}});
  return absl::InvalidArgumentError(absl::StrCat(
      "column ", Quoted(column), " is BYTE_ARRAY annotated as ", what,
      ", not as text; choose a string column with "
      "--parquet_column"));
}

absl::StatusOr<Selected> SelectColumn(const std::vector<SchemaElement>& schema,
                                      const std::string& column) {
  Selected selected;
  TRELLIS_ASSIGN_OR_RETURN(const std::vector<TopLevel> fields,
                           TopLevelFields(schema, selected.leaves));
  const TopLevel* found = nullptr;
  for (const TopLevel& field : fields) {
    if (schema[field.element].name == column) found = &field;
    if (found != nullptr) break;
  }
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "no column ", Quoted(column), "; its columns are ",
        ColumnList(schema, fields), " (choose one with --parquet_column)"));
  }
  const SchemaElement& e = schema[found->element];
  const std::string quoted = absl::StrCat("column ", Quoted(column));
  if (e.num_children > 0) {
    // ConvertedType LIST 3, MAP 1 and MAP_KEY_VALUE 2; LogicalType LIST 3,
    // MAP 2.
    const int converted = e.converted_type.value_or(-1);
    const int logical = e.logical_type.value_or(-1);
    const std::string what =
        converted == 3 || logical == 3 ? "a list"
        : converted == 1 || converted == 2 || logical == 2
            ? "a map"
            : absl::StrCat("a struct of ", e.num_children,
                           e.num_children == 1 ? " field" : " fields");
    return absl::InvalidArgumentError(
        absl::StrCat(quoted, " is nested (", what,
                     "); only a flat string column can be read"));
  }
  if (e.repetition == static_cast<int32_t>(Repetition::kRepeated)) {
    return absl::InvalidArgumentError(
        absl::StrCat(quoted,
                     " is repeated (a list); only a flat string column can be "
                     "read"));
  }
  if (e.type != static_cast<int32_t>(PhysicalType::kByteArray)) {
    return absl::InvalidArgumentError(absl::StrCat(
        quoted, " is ", e.type.has_value() ? TypeName(*e.type) : "untyped",
        ", not a string (BYTE_ARRAY) column; choose a string column with "
        "--parquet_column"));
  }
  TRELLIS_RETURN_IF_ERROR(CheckTextAnnotation(e, column));
  selected.leaf = found->first_leaf;
  selected.nullable =
      e.repetition == static_cast<int32_t>(Repetition::kOptional);
  return selected;
}

absl::Status WithPrefix(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

}  // namespace

bool IsParquetPath(const std::string& path) {
  return absl::EndsWith(path, ".parquet");
}

ParquetFile::~ParquetFile() { ::close(fd_); }

absl::Status ParquetFile::Error(absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what));
}

absl::Status ParquetFile::ReadAt(int64_t offset, size_t size,
                                 std::string& out) const {
  out.resize(size);
  for (size_t done = 0; done < size;) {
    const ssize_t got = ::pread(fd_, out.data() + done, size - done,
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::DataLossError(
          absl::StrCat(path_, ": cannot read (", std::strerror(errno), ")"));
    }
    if (got == 0) {
      return absl::DataLossError(
          absl::StrCat(path_, ": the file ended early (did it shrink?)"));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParquetFile::ReadFooter() {
  if (file_size_ < static_cast<int64_t>(3 * kMagicBytes)) {
    return Error(absl::StrCat("not a Parquet file (", file_size_,
                              " bytes, less than its magic bytes and "
                              "footer's length)"));
  }
  std::string head, tail;
  TRELLIS_RETURN_IF_ERROR(ReadAt(0, kMagicBytes, head));
  if (head != "PAR1") {
    return Error("not a Parquet file (it does not start with PAR1)");
  }
  TRELLIS_RETURN_IF_ERROR(ReadAt(file_size_ - 8, 8, tail));
  if (tail.substr(4) == "PARE") {
    return Error("an encrypted Parquet file, which cannot be read");
  }
  if (tail.substr(4) != "PAR1") {
    return Error("a truncated Parquet file (it does not end with PAR1)");
  }
  uint32_t length = 0;
  std::memcpy(&length, tail.data(), 4);
  const uint64_t room = static_cast<uint64_t>(file_size_) - 3 * kMagicBytes;
  if (length > room) {
    return Error(absl::StrCat("a truncated footer (it declares ", length,
                              " bytes; the file has room for ", room, ")"));
  }
  if (length > limits_.max_footer_bytes) {
    return Error(absl::StrCat("a footer of ", length,
                              " bytes, past the limit of ",
                              limits_.max_footer_bytes));
  }
  std::string footer;
  TRELLIS_RETURN_IF_ERROR(ReadAt(file_size_ - 8 - length, length, footer));
  return footer;
}

absl::StatusOr<std::unique_ptr<ParquetFile>> ParquetFile::Open(
    const std::string& path, const std::string& column,
    const ReadLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot stat (", std::strerror(error), ")"));
  }
  std::unique_ptr<ParquetFile> file(
      new ParquetFile(path, fd, static_cast<int64_t>(st.st_size), limits));
  TRELLIS_ASSIGN_OR_RETURN(const std::string footer, file->ReadFooter());
  absl::StatusOr<FileMetaData> meta = ParseFileMetaData(footer);
  if (!meta.ok()) {
    return file->Error(
        absl::StrCat("a corrupt footer (", meta.status().message(), ")"));
  }
  absl::StatusOr<Selected> selected = SelectColumn(meta->schema, column);
  if (!selected.ok()) {
    return WithPrefix(selected.status(), absl::StrCat(path, ": "));
  }
  const int64_t data_end =
      file->file_size_ - 8 - static_cast<int64_t>(footer.size());
  TRELLIS_RETURN_IF_ERROR(file->AddGroups(*meta, selected->leaf,
                                          selected->leaves, column,
                                          selected->nullable, data_end));
  return file;
}

absl::Status ParquetFile::AddGroups(const FileMetaData& meta, size_t leaf,
                                    size_t leaves, const std::string& column,
                                    bool nullable, int64_t data_end) {
  uint64_t first_row = 0;
  int64_t accounted = 0;
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    const RowGroup& group = meta.row_groups[g];
    const std::string at = absl::StrCat(path_, ": row group ", g, ": ");
    if (group.columns.size() != leaves) {
      return Error(absl::StrCat("row group ", g, " has ", group.columns.size(),
                                " column chunks for ", leaves, " columns"));
    }
    absl::StatusOr<ColumnChunk> chunk = ParseColumnChunk(group.columns[leaf]);
    if (!chunk.ok()) return WithPrefix(chunk.status(), at);
    if (chunk->has_file_path || !chunk->has_meta_data) {
      return WithPrefix(
          absl::UnimplementedError(absl::StrCat("column ", Quoted(column),
                                                " is stored in another file")),
          at);
    }
    if (chunk->path != std::vector<std::string>{column} ||
        chunk->type != static_cast<int32_t>(PhysicalType::kByteArray)) {
      return WithPrefix(
          absl::InvalidArgumentError(absl::StrCat(
              "a corrupt footer: the chunk of BYTE_ARRAY column ",
              Quoted(column), " describes ", TypeName(chunk->type), " column ",
              Quoted(absl::StrJoin(chunk->path, ".")))),
          at);
    }
    absl::Status codec = CheckCodec(chunk->codec);
    if (!codec.ok()) return WithPrefix(codec, at);
    int64_t start = chunk->data_page_offset;
    const std::optional<int64_t> dictionary = chunk->dictionary_page_offset;
    if (dictionary.has_value() && *dictionary > 0 && *dictionary < start) {
      start = *dictionary;
    }
    const int64_t size = chunk->total_compressed_size;
    if (start < static_cast<int64_t>(kMagicBytes) || start > data_end ||
        size > data_end - start) {
      return WithPrefix(
          absl::InvalidArgumentError(
              absl::StrCat("its column chunk (", size, " bytes at byte ", start,
                           ") lies outside the file's data (bytes 4 to ",
                           data_end, "; truncated?)")),
          at);
    }
    const uint64_t rows = static_cast<uint64_t>(group.num_rows);
    if (rows > std::numeric_limits<uint64_t>::max() / 2 - first_row) {
      return WithPrefix(absl::InvalidArgumentError("too many rows"), at);
    }
    groups_.push_back({{chunk->codec, nullable, start, rows},
                       size,
                       chunk->total_uncompressed_size,
                       first_row,
                       size});
    first_row += rows;
    accounted += size;
  }
  if (!groups_.empty() && accounted < file_size_) {
    groups_.back().input_bytes += file_size_ - accounted;
  }
  return absl::OkStatus();
}

absl::StatusOr<ColumnText> ParquetFile::ReadRowGroup(int group) const {
  const Group& g = groups_[group];
  std::string chunk;
  TRELLIS_RETURN_IF_ERROR(
      ReadAt(g.spec.file_offset, static_cast<size_t>(g.size), chunk));
  size_t budget = limits_.min_memory;
  const size_t size = static_cast<size_t>(g.size);
  if (limits_.expansion > 0 &&
      size <= std::numeric_limits<size_t>::max() / limits_.expansion) {
    budget = std::max(budget, size * limits_.expansion);
  }
  ColumnText text{ByteArrays(budget), {}, 0};
  // The text takes about the pages' uncompressed size: reserved at once, it
  // is not copied as it grows. The footer's word is trusted only so far.
  text.values.Reserve(static_cast<size_t>(
      std::min<uint64_t>({static_cast<uint64_t>(g.uncompressed), budget,
                          16 * static_cast<uint64_t>(size) + (1 << 20)})));
  const absl::Status status = DecodeColumnChunk(chunk, g.spec, text);
  if (status.ok()) return text;
  std::string hint;
  if (absl::IsResourceExhausted(status)) {
    hint = absl::StrCat(
        " (a row group's text is held in memory whole, here up to ", budget,
        " bytes; rewrite the file with smaller row groups)");
  }
  return absl::Status(
      status.code(),
      absl::StrCat(path_, ": row group ", group, ": ", status.message(), hint));
}

}  // namespace trellis::parquet
