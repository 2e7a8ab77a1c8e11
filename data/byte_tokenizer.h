// The "byte" tokenizer: one token per byte of the UTF-8 text.
//
// Ids 0..255 are the bytes themselves and id 256 is end-of-text, so
// vocab_size() is 257. Any byte string round-trips, valid UTF-8 or not.
// Needs no asset files.
//
// Thread safety: stateless; Encode and Decode may run on many threads.
#ifndef TRELLIS_DATA_BYTE_TOKENIZER_H_
#define TRELLIS_DATA_BYTE_TOKENIZER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"

namespace trellis {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kEotToken = 256;

  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return kEotToken + 1; }
  uint32_t eot_token() const override { return kEotToken; }
  void Encode(std::string_view text, std::vector<uint32_t>& out) const override;
  // Fails with InvalidArgumentError naming the first id above 256.
  absl::StatusOr<std::string> Decode(
      std::span<const uint32_t> ids) const override;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_BYTE_TOKENIZER_H_
