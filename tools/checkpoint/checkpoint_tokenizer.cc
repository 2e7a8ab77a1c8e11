// ReadCheckpointTokenizerFile and CheckpointTokenizerSpec (checkpoint.h):
// the tokenizer file a checkpoint holds beside its state.json.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "data/sha256.h"
#include "framework/status.h"
#include "framework/text_file.h"
#include "tools/checkpoint/checkpoint.h"

namespace trellis {
namespace {

// Where the file of `state`'s tokenizer would be in `dir` ("" for kinds
// built from no file).
std::filesystem::path HeldPath(const std::string& dir,
                               const TrainingState& state) {
  const std::string name = TokenizerFileName(state.tokenizer);
  return name.empty() ? std::filesystem::path()
                      : std::filesystem::path(dir) / name;
}

}  // namespace

absl::StatusOr<std::optional<TokenizerFile>> ReadCheckpointTokenizerFile(
    const std::string& dir, const TrainingState& state) {
  const std::filesystem::path path = HeldPath(dir, state);
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return std::nullopt;
  TRELLIS_ASSIGN_OR_RETURN(std::string bytes, ReadTextFile(path.string()));
  const std::string sha256 = Sha256Hex(bytes);
  const std::string& recorded = state.tokenizer_identity.sha256;
  if (recorded.empty() || sha256 != recorded) {
    return absl::DataLossError(absl::StrCat(
        path.string(), " is not the tokenizer ", dir,
        "/state.json records (sha256 ", sha256, " vs ",
        recorded.empty() ? "none recorded" : recorded,
        "); put the checkpoint's own file back or pass --tokenizer"));
  }
  return TokenizerFile{path.filename().string(), std::move(bytes)};
}

absl::StatusOr<std::optional<std::string>> CheckpointTokenizerSpec(
    const std::string& dir, const TrainingState& state) {
  TRELLIS_ASSIGN_OR_RETURN(const std::optional<TokenizerFile> held,
                           ReadCheckpointTokenizerFile(dir, state));
  if (!held.has_value()) return std::nullopt;
  return TokenizerSpecAt(state.tokenizer, HeldPath(dir, state).string());
}

}  // namespace trellis
