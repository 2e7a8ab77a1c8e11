#include "tools/checkpoint/direct_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "framework/status.h"

namespace trellis {
namespace {

constexpr int64_t kBlock = 4096;                  // O_DIRECT alignment.
constexpr int64_t kChunk = int64_t{8} << 20;      // Bytes per system call.
constexpr int64_t kDirectMin = int64_t{1} << 20;  // Smaller ranges buffer.

int64_t AlignUp(int64_t x) { return (x + kBlock - 1) / kBlock * kBlock; }
int64_t AlignDown(int64_t x) { return x / kBlock * kBlock; }

// pwrite of exactly `bytes`; errno set on failure.
bool WriteFully(int fd, const char* data, int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, data, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    bytes -= n;
    offset += n;
  }
  return true;
}

char* AllocateStaging() {
  return static_cast<char*>(std::aligned_alloc(kBlock, kChunk));
}

}  // namespace

DirectWriter::DirectWriter(std::string path, int fd, int direct_fd)
    : path_(std::move(path)),
      fd_(fd),
      direct_fd_(direct_fd),
      staging_(AllocateStaging(), std::free) {
  TRELLIS_CHECK(staging_ != nullptr) << "out of memory";
}

DirectWriter::DirectWriter(DirectWriter&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      direct_fd_(std::exchange(other.direct_fd_, -1)),
      staging_(std::move(other.staging_)) {}

DirectWriter& DirectWriter::operator=(DirectWriter&& other) noexcept {
  if (this != &other) {
    CloseFds();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    direct_fd_ = std::exchange(other.direct_fd_, -1);
    staging_ = std::move(other.staging_);
  }
  return *this;
}

DirectWriter::~DirectWriter() { CloseFds(); }

void DirectWriter::CloseFds() {
  if (fd_ >= 0) ::close(fd_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
  fd_ = direct_fd_ = -1;
}

absl::StatusOr<DirectWriter> DirectWriter::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(
        path, ": cannot open for writing: ", std::strerror(errno)));
  }
  // -1 where the file system does not take O_DIRECT.
  const int direct_fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
  return DirectWriter(path, fd, direct_fd);
}

absl::Status DirectWriter::Write(int64_t offset, int64_t bytes,
                                 const Fill& fill) {
  TRELLIS_CHECK(fd_ >= 0) << "write after Close";
  if (direct_fd_ < 0 || bytes < kDirectMin) {
    return Buffered(offset, 0, bytes, fill);
  }
  const int64_t head = AlignUp(offset) - offset;
  const int64_t tail = AlignDown(offset + bytes) - offset;
  TRELLIS_RETURN_IF_ERROR(Buffered(offset, 0, head, fill));
  TRELLIS_RETURN_IF_ERROR(Direct(offset, head, tail, fill));
  return Buffered(offset, tail, bytes, fill);
}

absl::Status DirectWriter::Buffered(int64_t offset, int64_t from, int64_t to,
                                    const Fill& fill) {
  for (int64_t at = from; at < to; at += kChunk) {
    const int64_t end = std::min(to, at + kChunk);
    fill(staging_.get(), at, end);
    if (!WriteFully(fd_, staging_.get(), end - at, offset + at)) {
      return absl::InternalError(absl::StrCat(
          path_, ": write at byte ", offset + at,
          " failed: ", std::strerror(errno),
          "; check the disk has room and the directory is writable"));
    }
  }
  return absl::OkStatus();
}

// REQUIRES: offset + from and offset + to are multiples of kBlock.
absl::Status DirectWriter::Direct(int64_t offset, int64_t from, int64_t to,
                                  const Fill& fill) {
  for (int64_t at = from; at < to; at += kChunk) {
    const int64_t end = std::min(to, at + kChunk);
    fill(staging_.get(), at, end);
    if (WriteFully(direct_fd_, staging_.get(), end - at, offset + at)) {
      continue;
    }
    if (errno != EINVAL) {
      return absl::InternalError(absl::StrCat(
          path_, ": write at byte ", offset + at,
          " failed: ", std::strerror(errno),
          "; check the disk has room and the directory is writable"));
    }
    // The file system takes O_DIRECT opens but not these writes: buffer
    // from here on.
    ::close(direct_fd_);
    direct_fd_ = -1;
    return Buffered(offset, at, to, fill);
  }
  return absl::OkStatus();
}

absl::Status DirectWriter::Close() {
  if (fd_ < 0) return absl::OkStatus();
  const bool synced =
      ::fdatasync(fd_) == 0 && (direct_fd_ < 0 || ::fdatasync(direct_fd_) == 0);
  const std::string why = synced ? "" : std::strerror(errno);
  CloseFds();
  if (!synced) {
    return absl::InternalError(
        absl::StrCat(path_, ": flushing to disk failed: ", why));
  }
  return absl::OkStatus();
}

}  // namespace trellis
