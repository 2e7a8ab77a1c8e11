// Shared by the checkpoint's save side (checkpoint_save.cc) and load
// side (checkpoint.cc): the files' names, the moments' dataset paths, and
// the reader threads. Not a public interface.
#ifndef TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_FILES_H_
#define TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_FILES_H_

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trellis {

inline constexpr char kModelFile[] = "model.h5";
inline constexpr char kOptimizerFile[] = "optimizer.h5";
inline constexpr char kStateFile[] = "state.json";
inline constexpr char kLatest[] = "latest";
inline constexpr char kFormat[] = "trellis-checkpoint-1";

// The dataset path of a moment in optimizer.h5.
inline std::string MomentPath(const char* kind, const std::string& name) {
  return absl::StrCat(kind, "/", name);
}

// Runs read(i) for i in [0, n) on up to TRELLIS_CHECKPOINT_READ_THREADS
// threads (default 4); returns the first error. Several streams keep more
// of a file system's queue busy than one (a first read after a save gets
// about twice one stream's speed).
absl::Status ParallelReads(size_t n,
                           const std::function<absl::Status(size_t)>& read);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_CHECKPOINT_FILES_H_
