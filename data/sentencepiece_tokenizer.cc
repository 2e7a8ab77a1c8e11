#include "data/sentencepiece_tokenizer.h"

#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/sentencepiece_model.h"
#include "data/sha256.h"
#include "framework/status.h"

namespace trellis {

SentencePieceTokenizer::SentencePieceTokenizer() = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>>
SentencePieceTokenizer::Load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sentencepiece tokenizer: ", path,
        " is a directory; pass --tokenizer=sentencepiece:PATH.model, the "
        "model file inside it"));
  }
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(
        absl::StrCat("sentencepiece tokenizer: ", path,
                     " not found; pass --tokenizer=sentencepiece:PATH.model"));
  }
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  std::string error;
  t->model_ = SentencePieceModel::Load(path, error);
  if (t->model_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sentencepiece tokenizer: cannot load ", path, ": ", error));
  }
  t->vocab_size_ = t->model_->piece_size();
  const int eos = t->model_->eos_id();
  if (eos < 0 || eos >= t->vocab_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sentencepiece tokenizer: ", path,
        " has no end-of-sequence piece; train it with --eos_id set"));
  }
  t->eot_token_ = static_cast<uint32_t>(eos);
  TRELLIS_ASSIGN_OR_RETURN(t->sha256_, Sha256OfFile(path));
  return t;
}

void SentencePieceTokenizer::Encode(std::string_view text,
                                    std::vector<uint32_t>& out) const {
  std::vector<int> ids;
  std::string error;
  TRELLIS_CHECK(model_->Encode(text, ids, error))
      << "SentencePiece Encode failed: " << error;
  out.insert(out.end(), ids.begin(), ids.end());
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(
    std::span<const uint32_t> ids) const {
  std::vector<int> pieces;
  pieces.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= static_cast<uint64_t>(vocab_size_)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sentencepiece tokenizer: token id ", ids[i], " (at position ", i,
          ") is not in the vocabulary of ", vocab_size_, " ids"));
    }
    pieces.push_back(static_cast<int>(ids[i]));
  }
  std::string text;
  std::string error;
  if (!model_->Decode(pieces, text, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sentencepiece tokenizer: Decode failed: ", error));
  }
  return text;
}

}  // namespace trellis
