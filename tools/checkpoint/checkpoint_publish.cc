#include "tools/checkpoint/checkpoint_publish.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "framework/status.h"
#include "tools/checkpoint/checkpoint_dir.h"
#include "tools/checkpoint/checkpoint_files.h"
#include "tools/checkpoint/file_tie.h"
#include "tools/checkpoint/model_config_json.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

// `what` failed on `path`, with the system's reason (errno).
absl::Status SystemError(const char* what, const fs::path& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path.string(), ": ", std::strerror(errno)));
}

absl::Status SyncPath(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SystemError("open", path);
  const int rc = ::fsync(fd);
  const absl::Status status =
      rc == 0 ? absl::OkStatus() : SystemError("fsync", path);
  ::close(fd);
  return status;
}

nlohmann::json StateToJson(const TrainingState& s) {
  nlohmann::json j = {{"step", s.step},
                      {"samples_consumed", s.samples_consumed},
                      {"seed", s.seed},
                      {"model", ModelConfigToJson(s.model)},
                      {"tokenizer", s.tokenizer},
                      {"layout", {{"dp", s.dp}, {"tp", s.tp}, {"pp", s.pp}}},
                      {"flags", s.flags},
                      {"format", kFormat}};
  if (!s.source.empty()) j["source"] = s.source;
  if (!s.files.empty()) j["files"] = s.files;
  if (!s.expert_bias.empty()) j["expert_bias"] = s.expert_bias.rows();
  for (const DataSourceState& d : s.data_sources) {
    j["data_sources"].push_back(
        nlohmann::json{{"path", d.path},
                       {"weight", d.weight},
                       {"samples_consumed", d.samples_consumed}});
  }
  if (!s.tokenizer_identity.kind.empty()) {
    const TokenizerIdentity& t = s.tokenizer_identity;
    j["tokenizer_identity"] = {{"kind", t.kind},
                               {"vocab_size", t.vocab_size},
                               {"eot_token", t.eot_token},
                               {"sha256", t.sha256}};
  }
  return j;
}

// Writes `text` to `path` through a temporary file, synced, then renamed:
// the file is whole or as it was. Errors carry the system's reason (a full
// disk says so).
absl::Status WriteTextFile(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return SystemError("create", tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status failed = SystemError("write", tmp);
      ::close(fd);
      return failed;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return SystemError("sync", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return SystemError("rename to", tmp);
  }
  return absl::OkStatus();
}

// Moves the written directory `tmp` to `final_dir`.
absl::Status RenameDir(const fs::path& tmp, const fs::path& final_dir) {
  std::error_code ec;
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("rename ", tmp.string(), " to ",
                                            final_dir.string(), ": ",
                                            ec.message()));
  }
  return absl::OkStatus();
}

// Exchanges `tmp` and the existing `final_dir` in one atomic step (a crash
// leaves one of the two whole in place), then removes the old one.
absl::Status SwapIn(const fs::path& tmp, const fs::path& final_dir) {
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(),
                RENAME_EXCHANGE) != 0) {
    return absl::InternalError(absl::StrCat("exchange ", tmp.string(), " with ",
                                            final_dir.string(), ": ",
                                            std::strerror(errno)));
  }
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return absl::OkStatus();
}

}  // namespace

bool SupersedesCheckpoint(const TrainingState& state,
                          const fs::path& final_dir) {
  if (!fs::exists(final_dir)) return false;
  absl::StatusOr<TrainingState> there = ReadTrainingState(final_dir.string());
  return there.ok() && there->step == state.step &&
         there->samples_consumed < state.samples_consumed;
}

absl::Status PublishCheckpoint(const fs::path& save_dir, const fs::path& tmp,
                               const fs::path& final_dir, TrainingState state,
                               bool supersede) {
  // The state names the files it goes with (file_tie.h).
  TRELLIS_RETURN_IF_ERROR(RecordFileDigests(tmp.string(), state));
  if (state.tokenizer_file.has_value()) {
    TRELLIS_RETURN_IF_ERROR(WriteTextFile(tmp / state.tokenizer_file->name,
                                          state.tokenizer_file->bytes));
  }
  TRELLIS_RETURN_IF_ERROR(
      WriteTextFile(tmp / kStateFile, StateToJson(state).dump(2) + "\n"));
  for (const auto& entry : fs::directory_iterator(tmp)) {
    TRELLIS_RETURN_IF_ERROR(SyncPath(entry.path()));
  }
  TRELLIS_RETURN_IF_ERROR(SyncPath(tmp));
  TRELLIS_RETURN_IF_ERROR(supersede ? SwapIn(tmp, final_dir)
                                    : RenameDir(tmp, final_dir));
  TRELLIS_RETURN_IF_ERROR(SyncPath(save_dir));
  TRELLIS_RETURN_IF_ERROR(
      WriteTextFile(save_dir / kLatest, CheckpointName(state.step) + "\n"));
  return SyncPath(save_dir);
}

absl::Status PrepareCheckpoint(const fs::path& save_dir, const fs::path& tmp) {
  std::error_code ec;
  fs::create_directories(save_dir, ec);
  if (!ec) fs::remove_all(tmp, ec);
  if (!ec) fs::create_directory(tmp, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", tmp.string(), ": ", ec.message(),
                     "; check --save_dir is writable"));
  }
  return absl::OkStatus();
}

}  // namespace trellis
