#include "data/compressed_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis {
namespace {

constexpr size_t kInputBytes = size_t{1} << 18;  // one read of the file

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Raw bytes of the file, shared by the three formats.
class RawFile {
 public:
  explicit RawFile(FilePtr file) : file_(std::move(file)) {}
  // Up to `size` bytes; 0 at the end of the file.
  absl::StatusOr<size_t> Read(const std::string& path, char* out, size_t size) {
    const size_t got = std::fread(out, 1, size, file_.get());
    if (got == 0 && std::ferror(file_.get())) {
      return absl::DataLossError(absl::StrCat(path, ": read failed"));
    }
    return got;
  }

 private:
  FilePtr file_;
};

class PlainReader : public CompressedReader {
 public:
  PlainReader(std::string path, FilePtr file)
      : CompressedReader(std::move(path)), file_(std::move(file)) {}
  absl::StatusOr<size_t> Read(char* out, size_t size) override {
    TRELLIS_ASSIGN_OR_RETURN(const size_t got, file_.Read(path_, out, size));
    compressed_read_ += static_cast<int64_t>(got);
    return got;
  }

 private:
  RawFile file_;
};

class GzipReader : public CompressedReader {
 public:
  GzipReader(std::string path, FilePtr file)
      : CompressedReader(std::move(path)),
        file_(std::move(file)),
        input_(kInputBytes) {
    // 15 + 32: the largest window, gzip or zlib header detected.
    TRELLIS_CHECK_EQ(inflateInit2(&stream_, 15 + 32), Z_OK)
        << "inflateInit2: " << (stream_.msg ? stream_.msg : "out of memory");
  }
  ~GzipReader() override { inflateEnd(&stream_); }

  absl::StatusOr<size_t> Read(char* out, size_t size) override {
    stream_.next_out = reinterpret_cast<Bytef*>(out);
    stream_.avail_out = static_cast<uInt>(size);
    while (stream_.avail_out == size) {
      if (stream_.avail_in == 0 && !flush_pending_) {
        TRELLIS_ASSIGN_OR_RETURN(
            const size_t got, file_.Read(path_, input_.data(), input_.size()));
        compressed_read_ += static_cast<int64_t>(got);
        if (got == 0) {
          if (in_member_) {
            return absl::DataLossError(absl::StrCat(
                path_, ": the gzip stream ends early (truncated file?)"));
          }
          return 0;
        }
        stream_.next_in = reinterpret_cast<Bytef*>(input_.data());
        stream_.avail_in = static_cast<uInt>(got);
      }
      if (stream_.avail_in > 0) in_member_ = true;
      const int rc = inflate(&stream_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        in_member_ = false;  // another member may follow
        inflateReset(&stream_);
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return absl::DataLossError(
            absl::StrCat(path_, ": not a valid gzip stream (",
                         stream_.msg ? stream_.msg : zError(rc), ")"));
      }
      // A full output buffer may leave decompressed bytes inside zlib.
      flush_pending_ = stream_.avail_out == 0;
    }
    return size - stream_.avail_out;
  }

 private:
  RawFile file_;
  std::vector<char> input_;
  z_stream stream_{};
  bool in_member_ = false;
  bool flush_pending_ = false;
};

class ZstdReader : public CompressedReader {
 public:
  ZstdReader(std::string path, FilePtr file)
      : CompressedReader(std::move(path)),
        file_(std::move(file)),
        stream_(ZSTD_createDStream()),
        input_(ZSTD_DStreamInSize()) {
    TRELLIS_CHECK(stream_ != nullptr) << "ZSTD_createDStream: out of memory";
  }
  ~ZstdReader() override { ZSTD_freeDStream(stream_); }

  absl::StatusOr<size_t> Read(char* out, size_t size) override {
    ZSTD_outBuffer output = {out, size, 0};
    while (output.pos == 0) {
      if (in_.pos == in_.size && !flush_pending_) {
        TRELLIS_ASSIGN_OR_RETURN(
            const size_t got, file_.Read(path_, input_.data(), input_.size()));
        compressed_read_ += static_cast<int64_t>(got);
        if (got == 0) {
          if (frame_open_) {
            return absl::DataLossError(absl::StrCat(
                path_, ": the zstd stream ends early (truncated file?)"));
          }
          return 0;
        }
        in_ = {input_.data(), got, 0};
      }
      const size_t rc = ZSTD_decompressStream(stream_, &output, &in_);
      if (ZSTD_isError(rc)) {
        return absl::DataLossError(absl::StrCat(
            path_, ": not a valid zstd stream (", ZSTD_getErrorName(rc), ")"));
      }
      // 0: a frame is complete and flushed.
      frame_open_ = rc != 0;
      // A full output buffer may leave decompressed bytes inside zstd.
      flush_pending_ = output.pos == output.size;
    }
    return output.pos;
  }

 private:
  RawFile file_;
  ZSTD_DStream* stream_;
  std::vector<char> input_;
  ZSTD_inBuffer in_ = {nullptr, 0, 0};
  bool frame_open_ = false;
  bool flush_pending_ = false;
};

}  // namespace

Compression CompressionOf(const std::string& path) {
  if (absl::EndsWith(path, ".zst")) return Compression::kZstd;
  if (absl::EndsWith(path, ".gz")) return Compression::kGzip;
  return Compression::kNone;
}

std::string StripCompressionSuffix(const std::string& path) {
  switch (CompressionOf(path)) {
    case Compression::kZstd:
      return path.substr(0, path.size() - 4);
    case Compression::kGzip:
      return path.substr(0, path.size() - 3);
    case Compression::kNone:
      break;
  }
  return path;
}

absl::StatusOr<std::unique_ptr<CompressedReader>> CompressedReader::Open(
    const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  }
  switch (CompressionOf(path)) {
    case Compression::kZstd:
      return std::make_unique<ZstdReader>(path, std::move(file));
    case Compression::kGzip:
      return std::make_unique<GzipReader>(path, std::move(file));
    case Compression::kNone:
      break;
  }
  return std::make_unique<PlainReader>(path, std::move(file));
}

}  // namespace trellis
