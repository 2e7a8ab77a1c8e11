#include "data/tokenizer_file.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "data/sha256.h"
#include "framework/hdf5_bytes.h"
#include "framework/status.h"
#include "framework/text_file.h"

namespace trellis {
namespace {

constexpr char kDataset[] = "tokenizer_file";
// Llama 3's tokenizer.json is 9 MB; far above any real one.
constexpr int64_t kMaxBytes = int64_t{1} << 30;

}  // namespace

std::string TokenizerFileName(std::string_view kind) {
  if (kind == "hf") return "tokenizer.json";
  if (kind == "sentencepiece") return "tokenizer.model";
  return "";
}

std::string TokenizerSpecAt(std::string_view kind, const std::string& path) {
  return absl::StrCat(std::string(kind), ":", path);
}

absl::StatusOr<std::optional<TokenizerFile>> ReadSpecTokenizerFile(
    std::string_view spec, const std::string& sha256) {
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view kind = spec.substr(0, colon);
  const std::string name = TokenizerFileName(kind);
  if (name.empty()) return std::nullopt;
  const std::string path(spec.substr(colon + 1));
  TRELLIS_ASSIGN_OR_RETURN(std::string bytes, ReadTextFile(path, kMaxBytes));
  if (Sha256Hex(bytes) != sha256) {
    return absl::FailedPreconditionError(
        absl::StrCat(path,
                     " changed while it was read (its sha256 is no "
                     "longer the tokenizer's); run again"));
  }
  return TokenizerFile{name, std::move(bytes)};
}

absl::Status WriteTokenizerFile(hdf5::File& token_file,
                                const TokenizerFile& file) {
  return hdf5::WriteBytes(token_file, kDataset, file.bytes);
}

absl::StatusOr<std::optional<TokenizerFile>> ReadTokenizerFile(
    const std::string& path, const TokenizerIdentity& identity) {
  TRELLIS_ASSIGN_OR_RETURN(const hdf5::File file, hdf5::File::Open(path));
  if (!file.Exists(kDataset)) return std::nullopt;
  const std::string name = TokenizerFileName(identity.kind);
  if (name.empty()) {
    return absl::DataLossError(absl::StrCat(
        path, " keeps a tokenizer file, but its tokenizer '", identity.kind,
        "' is built from none; re-run trellis-preprocess"));
  }
  TRELLIS_ASSIGN_OR_RETURN(std::string bytes,
                           hdf5::ReadBytes(file, kDataset, kMaxBytes));
  if (identity.sha256.empty() || Sha256Hex(bytes) != identity.sha256) {
    return absl::DataLossError(
        absl::StrCat(path, ": its kept ", name,
                     " does not hash to the tokenizer_sha256 "
                     "it records (",
                     identity.sha256.empty() ? "none" : identity.sha256,
                     "); re-run trellis-preprocess"));
  }
  return TokenizerFile{name, std::move(bytes)};
}

}  // namespace trellis
