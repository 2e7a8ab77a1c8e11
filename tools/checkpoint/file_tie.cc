#include "tools/checkpoint/file_tie.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "data/sha256.h"
#include "framework/status.h"
#include "tools/checkpoint/checkpoint_files.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

// Appends "path checksum\n" for every dataset under `group` (at `prefix`)
// to `lines`, members in name order.
absl::Status ListTensors(const hdf5::Container& group,
                         const std::string& prefix, std::string& lines) {
  TRELLIS_ASSIGN_OR_RETURN(std::vector<std::string> names, group.ListMembers());
  for (const std::string& name : names) {
    const std::string path = prefix.empty() ? name : prefix + "/" + name;
    absl::StatusOr<hdf5::Dataset> dataset = group.OpenDataset(name);
    if (!dataset.ok()) {
      TRELLIS_ASSIGN_OR_RETURN(hdf5::Group inner, group.OpenGroup(name));
      TRELLIS_RETURN_IF_ERROR(ListTensors(inner, path, lines));
      continue;
    }
    std::string checksum = "-";
    if (dataset->HasAttribute("checksum")) {
      TRELLIS_ASSIGN_OR_RETURN(checksum,
                               dataset->ReadStringAttribute("checksum"));
    }
    absl::StrAppend(&lines, path, " ", checksum, "\n");
  }
  return absl::OkStatus();
}

// What identifies one version of the file at `path`: its device, inode,
// size and modification time in nanoseconds ("" when it cannot be stat'ed).
std::string Identity(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) return "";
  return absl::StrCat(path, ":", info.st_dev, ":", info.st_ino, ":",
                      info.st_size, ":", info.st_mtim.tv_sec, ".",
                      info.st_mtim.tv_nsec);
}

// The files found tied in this process, by their and their state's
// Identity.
absl::Mutex tied_mutex;
std::set<std::string>* tied ABSL_GUARDED_BY(tied_mutex) = nullptr;
std::atomic<int64_t> digests{0};

bool AlreadyTied(const std::string& key) {
  absl::MutexLock lock(&tied_mutex);
  return tied != nullptr && tied->count(key) > 0;
}

void RememberTied(const std::string& key) {
  if (key.empty()) return;
  absl::MutexLock lock(&tied_mutex);
  if (tied == nullptr) tied = new std::set<std::string>();
  tied->insert(key);
}

}  // namespace

int64_t FileTieDigests() { return digests.load(std::memory_order_relaxed); }

absl::StatusOr<std::string> TensorFileDigest(const hdf5::File& file) {
  std::string lines;
  TRELLIS_RETURN_IF_ERROR(ListTensors(file, "", lines));
  return absl::StrCat("sha256:", Sha256Hex(lines));
}

absl::Status RecordFileDigests(const std::string& dir, TrainingState& state) {
  state.files.clear();
  for (const char* name : {kModelFile, kOptimizerFile}) {
    const fs::path path = fs::path(dir) / name;
    if (!fs::exists(path)) continue;
    TRELLIS_ASSIGN_OR_RETURN(hdf5::File file, hdf5::File::Open(path.string()));
    TRELLIS_ASSIGN_OR_RETURN(state.files[name], TensorFileDigest(file));
  }
  return absl::OkStatus();
}

absl::Status CheckFileTie(const std::string& dir, const std::string& name,
                          const hdf5::File& file) {
  const fs::path base(dir);
  const std::string file_id = Identity((base / name).string());
  const std::string state_id = Identity((base / kStateFile).string());
  const std::string key = file_id.empty() || state_id.empty()
                              ? std::string()
                              : absl::StrCat(file_id, "|", state_id);
  if (!key.empty() && AlreadyTied(key)) return absl::OkStatus();
  TRELLIS_ASSIGN_OR_RETURN(const TrainingState state, ReadTrainingState(dir));
  const auto recorded = state.files.find(name);
  if (recorded == state.files.end()) return absl::OkStatus();
  digests.fetch_add(1, std::memory_order_relaxed);
  TRELLIS_ASSIGN_OR_RETURN(const std::string digest, TensorFileDigest(file));
  if (digest == recorded->second) {
    RememberTied(key);
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat(
      (base / name).string(), " is not the file ", (base / kStateFile).string(),
      " was saved with (its tensors or their checksums differ from the ones "
      "the state records): the directory mixes files of two saves, e.g. two "
      "runs sharing one --save_dir; resume from another checkpoint"));
}

}  // namespace trellis
