// CheckpointTokenizerSpec (checkpoint.h): the tokenizer file a checkpoint
// holds beside its state.json.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "data/sha256.h"
#include "framework/status.h"
#include "tools/checkpoint/checkpoint.h"

namespace trellis {

absl::StatusOr<std::optional<std::string>> CheckpointTokenizerSpec(
    const std::string& dir, const TrainingState& state) {
  const std::string name = TokenizerFileName(state.tokenizer);
  if (name.empty()) return std::nullopt;
  const std::filesystem::path path = std::filesystem::path(dir) / name;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const std::string& recorded = state.tokenizer_identity.sha256;
  TRELLIS_ASSIGN_OR_RETURN(const std::string sha256,
                           Sha256OfFile(path.string()));
  if (recorded.empty() || sha256 != recorded) {
    return absl::DataLossError(absl::StrCat(
        path.string(), " is not the tokenizer ", dir,
        "/state.json records (sha256 ", sha256, " vs ",
        recorded.empty() ? "none recorded" : recorded,
        "); put the checkpoint's own file back or pass --tokenizer"));
  }
  return TokenizerSpecAt(state.tokenizer, path.string());
}

}  // namespace trellis
