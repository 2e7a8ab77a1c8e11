// ParquetFile: a Parquet file opened to read one column of strings, row
// group by row group.
//
// Open() reads and checks the footer: the file starts and ends with PAR1,
// the footer parses, the column is a top-level, flat (not nested, not
// repeated) BYTE_ARRAY column, plain or annotated as text (STRING/UTF8,
// ENUM, JSON), and each row group's chunk of it lies inside the file and
// uses a codec decompress.h reads. ReadRowGroup() then decodes one row
// group's column (column_reader.h), holding only that chunk and its text
// in memory.
//
// Errors are one line: "<path>: <what is wrong>", and a row group's
// "<path>: row group <g>: <what>" (row groups count from 0). A missing
// column lists the file's columns.
//
// A row group's text may take at most max(ReadLimits::min_memory,
// ReadLimits::expansion * its chunk's bytes) bytes of memory: text
// compresses a few times over, while dictionary and prefix encodings let a
// hostile page of a few bytes describe gigabytes.
//
// Thread safety: ReadRowGroup may run on several threads at once (the file
// is read with pread); the rest is immutable after Open().
#ifndef TRELLIS_DATA_PARQUET_PARQUET_FILE_H_
#define TRELLIS_DATA_PARQUET_PARQUET_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/parquet/column_reader.h"
#include "data/parquet/metadata.h"

namespace trellis::parquet {

struct ReadLimits {
  size_t min_memory = size_t{1} << 30;
  size_t expansion = 64;
  size_t max_footer_bytes = size_t{256} << 20;
};

// Whether a file name names Parquet (it ends in .parquet).
bool IsParquetPath(const std::string& path);

class ParquetFile {
 public:
  static absl::StatusOr<std::unique_ptr<ParquetFile>> Open(
      const std::string& path, const std::string& column,
      const ReadLimits& limits = {});
  ~ParquetFile();
  ParquetFile(const ParquetFile&) = delete;
  ParquetFile& operator=(const ParquetFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t file_size() const { return file_size_; }
  int num_row_groups() const { return static_cast<int>(groups_.size()); }
  uint64_t num_rows(int group) const { return groups_[group].spec.rows; }
  // The file's row number of the group's first row.
  uint64_t first_row(int group) const { return groups_[group].first_row; }
  // The bytes of the file a group accounts for: its chunk, and for the last
  // group the rest of the file, so that the groups' sum is the file size.
  int64_t input_bytes(int group) const { return groups_[group].input_bytes; }

  // Decodes group `group`'s column. REQUIRES: 0 <= group <
  // num_row_groups().
  absl::StatusOr<ColumnText> ReadRowGroup(int group) const;

 private:
  struct Group {
    ColumnChunkSpec spec;
    int64_t size = 0;          // the chunk's bytes, from spec.file_offset
    int64_t uncompressed = 0;  // as the footer says: a hint for the text
    uint64_t first_row = 0;
    int64_t input_bytes = 0;
  };
  ParquetFile(std::string path, int fd, int64_t file_size, ReadLimits limits)
      : path_(std::move(path)),
        fd_(fd),
        file_size_(file_size),
        limits_(limits) {}
  absl::Status ReadAt(int64_t offset, size_t size, std::string& out) const;
  absl::Status Error(absl::string_view what) const;
  absl::StatusOr<std::string> ReadFooter();
  // Fills groups_ from the footer, for the leaf column `leaf`.
  absl::Status AddGroups(const FileMetaData& meta, size_t leaf, size_t leaves,
                         const std::string& column, bool nullable,
                         int64_t data_end);

  std::string path_;
  int fd_;
  int64_t file_size_;
  ReadLimits limits_;
  std::vector<Group> groups_;
};

}  // namespace trellis::parquet

#endif  // TRELLIS_DATA_PARQUET_PARQUET_FILE_H_
