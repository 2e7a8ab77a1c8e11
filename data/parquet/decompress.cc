// Page decompression (decompress.h).
#include "data/parquet/decompress.h"

#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <limits>

#include "absl/strings/str_cat.h"
#include "data/parquet/metadata.h"

namespace trellis::parquet {
namespace {

absl::Status Fails(int32_t codec, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "a ", CodecName(codec), " page does not decompress (", why, ")"));
}

absl::Status Inflate(std::string_view data, char* out, size_t size) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 32) != Z_OK) {  // gzip or zlib header
    return Fails(static_cast<int32_t>(Codec::kGzip), "zlib cannot start");
  }
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out);
  stream.avail_out = static_cast<uInt>(size);
  int rc = Z_OK;
  while (true) {
    rc = inflate(&stream, Z_FINISH);
    // Another gzip member follows.
    if (rc == Z_STREAM_END && stream.avail_in > 0 && stream.avail_out > 0) {
      rc = inflateReset(&stream);
      if (rc == Z_OK) continue;
    }
    break;
  }
  const bool whole =
      rc == Z_STREAM_END && stream.avail_out == 0 && stream.avail_in == 0;
  const char* message = stream.msg;
  inflateEnd(&stream);
  if (whole) return absl::OkStatus();
  const int32_t gzip = static_cast<int32_t>(Codec::kGzip);
  if (rc == Z_STREAM_END || rc == Z_BUF_ERROR || rc == Z_OK) {
    return Fails(gzip, stream.avail_out == 0
                           ? "it holds more than the page's declared size"
                           : "it ends before the page's declared size");
  }
  return Fails(gzip, message != nullptr ? message : "corrupt data");
}

}  // namespace

char* PageBuffer::Get(size_t size) {
  if (size > capacity_) {
    data_.reset();  // before the new one: never both at once
    data_.reset(new char[size]);
    capacity_ = size;
  }
  return data_.get();
}

void PageBuffer::Shrink(size_t keep) {
  if (capacity_ <= keep) return;
  data_.reset();
  capacity_ = 0;
}

absl::Status CheckCodec(int32_t codec) {
  switch (static_cast<Codec>(codec)) {
    case Codec::kUncompressed:
    case Codec::kSnappy:
    case Codec::kGzip:
    case Codec::kZstd:
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(absl::StrCat(
          "the ", CodecName(codec),
          " codec is not supported (only UNCOMPRESSED, SNAPPY, GZIP and "
          "ZSTD); rewrite the file with one of those"));
  }
}

absl::StatusOr<std::string_view> Decompress(int32_t codec,
                                            std::string_view data, size_t size,
                                            PageBuffer& buffer) {
  if (static_cast<Codec>(codec) == Codec::kUncompressed) {
    if (data.size() != size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an uncompressed page of ", data.size(), " bytes declares ", size));
    }
    return data;
  }
  if (size > std::numeric_limits<int32_t>::max() ||
      data.size() > std::numeric_limits<int32_t>::max()) {
    return Fails(codec, "over 2 GiB");
  }
  char* const out = buffer.Get(size);
  switch (static_cast<Codec>(codec)) {
    case Codec::kSnappy: {
      size_t length = 0;
      if (!snappy::GetUncompressedLength(data.data(), data.size(), &length)) {
        return Fails(codec, "corrupt data");
      }
      if (length != size) {
        return Fails(codec, absl::StrCat("it holds ", length,
                                         " bytes, the page declares ", size));
      }
      if (!snappy::RawUncompress(data.data(), data.size(), out)) {
        return Fails(codec, "corrupt data");
      }
      break;
    }
    case Codec::kGzip: {
      const absl::Status status = Inflate(data, out, size);
      if (!status.ok()) return status;
      break;
    }
    case Codec::kZstd: {
      const size_t got = ZSTD_decompress(out, size, data.data(), data.size());
      if (ZSTD_isError(got)) return Fails(codec, ZSTD_getErrorName(got));
      if (got != size) {
        return Fails(codec, absl::StrCat("it holds ", got,
                                         " bytes, the page declares ", size));
      }
      break;
    }
    default:
      return CheckCodec(codec);
  }
  return std::string_view(out, size);
}

}  // namespace trellis::parquet
