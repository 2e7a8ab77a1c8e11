// One run at a time per --save_dir. Two runs saving into one directory
// interleave their files, and a checkpoint can then hold one run's state
// beside the other's weights. A run holds an exclusive lock on
// <save_dir>/.trellis-lock (flock: released when the process ends, however
// it ends) for as long as it runs; the file names the holder (host, pid,
// start time) so that a refused run can say who has the directory.
//
// Thread safety: a SaveDirLock is not shared between threads.
#ifndef TRELLIS_TOOLS_CHECKPOINT_SAVE_DIR_LOCK_H_
#define TRELLIS_TOOLS_CHECKPOINT_SAVE_DIR_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace trellis {

class SaveDirLock {
 public:
  static constexpr const char* kFileName = ".trellis-lock";

  // Takes the lock of `save_dir` (which must exist). FailedPrecondition
  // naming the holder when another process has it; the error of the
  // failing call when the file cannot be opened or locked.
  static absl::StatusOr<std::unique_ptr<SaveDirLock>> Acquire(
      const std::string& save_dir);
  ~SaveDirLock();
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

 private:
  explicit SaveDirLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_SAVE_DIR_LOCK_H_
