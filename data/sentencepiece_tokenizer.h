// The "sentencepiece" tokenizer: a SentencePiece model file (`.model`, as
// written by spm_train), run by Debian's libsentencepiece.
//
// Encode gives exactly the ids of `spm_encode --output_format=id` (no BOS or
// EOS is added). Decode is SentencePiece's: control pieces such as <s> and
// </s> decode to nothing, and Decode(Encode(s)) == s holds for text the
// model's normalization leaves unchanged (train with
// --normalization_rule_name=identity to make that all text; the default
// nmt_nfkc rewrites some characters and whitespace runs). The end-of-text
// token is the model's EOS piece (</s>); a model without one is rejected.
//
// Thread safety: after Load, Encode and Decode may run on many threads at
// once (SentencePieceProcessor's encode and decode are const).
#ifndef TRELLIS_DATA_SENTENCEPIECE_TOKENIZER_H_
#define TRELLIS_DATA_SENTENCEPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"

namespace trellis {

class SentencePieceModel;

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads `path` (a .model file); errors name the file and the library's
  // reason.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(
      const std::string& path);
  ~SentencePieceTokenizer() override;

  std::string name() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return vocab_size_; }
  uint32_t eot_token() const override { return eot_token_; }
  std::string source_sha256() const override { return sha256_; }
  void Encode(std::string_view text, std::vector<uint32_t>& out) const override;
  absl::StatusOr<std::string> Decode(
      std::span<const uint32_t> ids) const override;

 private:
  SentencePieceTokenizer();

  std::unique_ptr<SentencePieceModel> model_;
  int64_t vocab_size_ = 0;
  uint32_t eot_token_ = 0;
  std::string sha256_;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_SENTENCEPIECE_TOKENIZER_H_
