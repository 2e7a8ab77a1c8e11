#include "data/sentencepiece_model.h"

#include <sentencepiece_processor.h>

namespace trellis {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(
    const std::string& path, std::string& error) {
  auto impl = std::make_unique<Impl>();
  const sentencepiece::util::Status status = impl->processor.Load(path);
  if (!status.ok()) {
    error = status.ToString();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(
      new SentencePieceModel(std::move(impl)));
}

int SentencePieceModel::piece_size() const {
  return impl_->processor.GetPieceSize();
}

int SentencePieceModel::eos_id() const { return impl_->processor.eos_id(); }

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>& ids,
                                std::string& error) const {
  const sentencepiece::util::Status status =
      impl_->processor.Encode(text, &ids);
  if (!status.ok()) error = status.ToString();
  return status.ok();
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string& text,
                                std::string& error) const {
  const sentencepiece::util::Status status =
      impl_->processor.Decode(ids, &text);
  if (!status.ok()) error = status.ToString();
  return status.ok();
}

}  // namespace trellis
