// CompressedReader: the bytes of a file, decompressed when its name says it
// is compressed.
//
//   name ends in   read as
//   .zst           a Zstandard stream (one or more frames)
//   .gz            a gzip stream (one or more members)
//   anything else  the file's bytes as they are
//
// Read() fills a buffer with the next decompressed bytes; compressed_read()
// counts the bytes taken from the file so far, so a caller can show
// progress against the files' sizes on disk. A stream that ends inside a
// frame or member, or that is not of the format its name claims, is a
// DataLoss error naming the file.
//
// Thread safety: none; use one object from one thread at a time.
#ifndef TRELLIS_DATA_COMPRESSED_READER_H_
#define TRELLIS_DATA_COMPRESSED_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace trellis {

enum class Compression { kNone, kGzip, kZstd };

// The compression a file name implies (by its last extension).
Compression CompressionOf(const std::string& path);

// The file name without a trailing .gz or .zst (so "a.jsonl.zst" gives
// "a.jsonl").
std::string StripCompressionSuffix(const std::string& path);

class CompressedReader {
 public:
  // Opens `path`; NotFound when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<CompressedReader>> Open(
      const std::string& path);
  virtual ~CompressedReader() = default;

  // Up to `size` decompressed bytes into `out`; 0 only at the end of the
  // data. REQUIRES: size > 0.
  virtual absl::StatusOr<size_t> Read(char* out, size_t size) = 0;
  // Bytes taken from the file so far.
  int64_t compressed_read() const { return compressed_read_; }
  const std::string& path() const { return path_; }

 protected:
  explicit CompressedReader(std::string path) : path_(std::move(path)) {}
  std::string path_;
  int64_t compressed_read_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_COMPRESSED_READER_H_
