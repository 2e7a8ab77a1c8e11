// DirectWriter: writes byte ranges into an existing file, large ones with
// O_DIRECT.
//
// Checkpoint files are written once and not read back soon, and buffered
// writes of gigabytes are throttled by the kernel's dirty-page limits (worse
// while the model itself fills memory). So the 4096-byte-aligned middle of
// each large range goes through O_DIRECT from an aligned staging buffer,
// and the unaligned ends (and small ranges) through the page cache. No
// 4096-byte block is written both ways. Where the file system refuses
// O_DIRECT (tmpfs, some network file systems), everything is buffered.
//
// Thread safety: none; one writer per thread. Several writers (processes)
// may write disjoint ranges of one file at once.
#ifndef TRELLIS_TOOLS_CHECKPOINT_DIRECT_WRITER_H_
#define TRELLIS_TOOLS_CHECKPOINT_DIRECT_WRITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis {

class DirectWriter {
 public:
  // Fills dst with bytes [begin, end) of the range being written (counted
  // from the range's start).
  using Fill = std::function<void(char* dst, int64_t begin, int64_t end)>;

  static absl::StatusOr<DirectWriter> Open(const std::string& path);
  DirectWriter(DirectWriter&& other) noexcept;
  DirectWriter& operator=(DirectWriter&& other) noexcept;
  ~DirectWriter();

  // Writes `bytes` bytes at `offset`, produced by `fill` chunk by chunk.
  absl::Status Write(int64_t offset, int64_t bytes, const Fill& fill);
  // Flushes to the disk (fdatasync) and closes.
  absl::Status Close();
  bool direct() const { return direct_fd_ >= 0; }

 private:
  DirectWriter(std::string path, int fd, int direct_fd);
  absl::Status Buffered(int64_t offset, int64_t from, int64_t to,
                        const Fill& fill);
  absl::Status Direct(int64_t offset, int64_t from, int64_t to,
                      const Fill& fill);
  void CloseFds();

  std::string path_;
  int fd_ = -1;
  int direct_fd_ = -1;
  std::unique_ptr<char, void (*)(void*)> staging_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_DIRECT_WRITER_H_
