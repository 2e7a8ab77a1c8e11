#include "data/byte_tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trellis {

void ByteTokenizer::Encode(std::string_view text,
                           std::vector<uint32_t>& out) const {
  // resize grows the vector geometrically; an exact reserve per call would
  // copy it whole for every piece of a batch.
  const size_t start = out.size();
  out.resize(start + text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out[start + i] = static_cast<unsigned char>(text[i]);
  }
}

absl::StatusOr<std::string> ByteTokenizer::Decode(
    std::span<const uint32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    if (id < kEotToken) {
      text.push_back(static_cast<char>(id));
    } else if (id == kEotToken) {
      text.append("<|endoftext|>");
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "byte tokenizer: token id ", id, " (at position ", i,
          ") is outside the vocabulary of ", kEotToken + 1, " ids"));
    }
  }
  return text;
}

}  // namespace trellis
