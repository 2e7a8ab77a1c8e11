#include "tools/checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "framework/status.h"
#include "tools/checkpoint/checkpoint_files.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

// The step a step_NNNNNNNN directory name stands for; -1 for other names.
int64_t StepOfName(const std::string& name) {
  int64_t step = -1;
  if (name.rfind("step_", 0) != 0 || !absl::SimpleAtoi(name.substr(5), &step) ||
      step < 0) {
    return -1;
  }
  return step;
}

bool IsComplete(const fs::path& dir) {
  return fs::exists(dir / kModelFile) && fs::exists(dir / kOptimizerFile) &&
         fs::exists(dir / kStateFile);
}

// The newest complete step_* directory of `save_dir`, or "".
std::string NewestComplete(const fs::path& save_dir) {
  const std::vector<int64_t> steps = CheckpointSteps(save_dir.string());
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const fs::path dir = save_dir / CheckpointName(*it);
    if (IsComplete(dir)) return dir.string();
  }
  return "";
}

// --resume=auto: `latest`, unless it is unreadable or a newer complete
// checkpoint exists.
absl::StatusOr<ResumePoint> FindAutomatic(const fs::path& base,
                                          const fs::path& dir_named) {
  const std::string newest = NewestComplete(base);
  const std::string latest = (base / kLatest).string();
  if (dir_named.empty()) {
    if (newest.empty()) {
      return ResumePoint{
          "", absl::StrCat("starting fresh: no checkpoint in ", base.string())};
    }
    return ResumePoint{
        newest, absl::StrCat(latest, " is missing or empty; resuming from ",
                             "the newest complete checkpoint, ", newest)};
  }
  if (!newest.empty() && StepOfName(fs::path(newest).filename().string()) >
                             StepOfName(dir_named.filename().string())) {
    return ResumePoint{
        newest,
        absl::StrCat(latest, " names ", dir_named.filename().string(), " but ",
                     newest, " is newer and complete; resuming from it")};
  }
  return ResumePoint{dir_named.string(), ""};
}

}  // namespace

std::string CheckpointName(int64_t step) {
  return absl::StrFormat("step_%08d", step);
}

absl::Status CheckLatestPointer(const std::string& save_dir) {
  const fs::path path = fs::path(save_dir) / kLatest;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return absl::OkStatus();
  if (!fs::is_regular_file(status)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path.string(),
        " is not a file: trellis keeps there the name of the "
        "newest checkpoint and rewrites it at every save; remove or rename "
        "it"));
  }
  std::ifstream in(path);
  std::string name;
  if (!(in >> name) || StepOfName(name) >= 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      path.string(), " names '", name, "', not a step_NNNNNNNN checkpoint of ",
      save_dir, "; fix or remove it, or pass --resume=<checkpoint directory>"));
}

absl::StatusOr<ResumePoint> FindResumePoint(const std::string& resume,
                                            const std::string& save_dir,
                                            const std::string& flag) {
  if (resume.empty()) return ResumePoint();
  const bool automatic = resume == "auto";
  const fs::path base = automatic ? fs::path(save_dir) : fs::path(resume);
  if (automatic && save_dir.empty()) {
    return absl::InvalidArgumentError("--resume=auto needs --save_dir");
  }
  if (fs::exists(base / kStateFile)) return ResumePoint{base.string(), ""};
  TRELLIS_RETURN_IF_ERROR(CheckLatestPointer(base.string()));
  std::ifstream latest(base / kLatest);
  std::string name;
  fs::path named;
  if (latest >> name) {
    named = base / name;
    if (!fs::exists(named / kStateFile)) {
      return absl::DataLossError(
          absl::StrCat((base / kLatest).string(), " names ", name,
                       ", which is missing or incomplete; point ", flag,
                       " at a step_* directory"));
    }
  }
  if (automatic) return FindAutomatic(base, named);
  if (!named.empty()) return ResumePoint{named.string(), ""};
  return absl::NotFoundError(absl::StrCat(
      flag, "=", resume, " is neither a checkpoint directory (with ",
      kStateFile, ") nor a save directory with a `latest` file"));
}

absl::StatusOr<std::string> ResolveResume(const std::string& resume,
                                          const std::string& save_dir,
                                          const std::string& flag) {
  TRELLIS_ASSIGN_OR_RETURN(ResumePoint point,
                           FindResumePoint(resume, save_dir, flag));
  return point.dir;
}

std::vector<int64_t> CheckpointSteps(const std::string& save_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(save_dir, ec)) {
    const int64_t step = StepOfName(entry.path().filename().string());
    if (step >= 0 && entry.is_directory()) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status CheckNoLaterCheckpoints(const std::string& save_dir,
                                     int64_t start_step) {
  if (save_dir.empty()) return absl::OkStatus();
  std::vector<std::string> later;
  for (int64_t step : CheckpointSteps(save_dir)) {
    if (step > start_step) later.push_back(CheckpointName(step));
  }
  if (later.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--save_dir=", save_dir, " already holds ", absl::StrJoin(later, ", "),
      ", beyond step ", start_step,
      " where this run starts, and saves never replace a checkpoint, so this "
      "run's weights would be lost; continue from the newest with "
      "--resume=auto, or give this run another --save_dir"));
}

absl::Status PruneCheckpoints(const std::string& save_dir, int64_t keep,
                              int64_t saved_step) {
  TRELLIS_CHECK_GE(keep, 1);
  std::string latest;
  std::ifstream(fs::path(save_dir) / kLatest) >> latest;
  std::vector<fs::path> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(save_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step_", 0) == 0) {
      steps.push_back(entry.path());
    }
  }
  if (ec) return absl::InternalError(absl::StrCat("list ", save_dir));
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    if (steps[i].filename() == latest) continue;
    if (StepOfName(steps[i].filename().string()) > saved_step) continue;
    fs::remove_all(steps[i], ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("remove ", steps[i].string(), ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace trellis
