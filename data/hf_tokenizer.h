// The "hf" tokenizer: a Hugging Face tokenizer.json whose model is BPE, such
// as GPT-2's, Llama 2's or the Llama 3 / tiktoken family's.
//
// Encode follows the Hugging Face pipeline:
//  1. Added tokens (the "added_tokens" list, special or not) are found first,
//     leftmost-longest, and become their ids without BPE; lstrip/rstrip
//     absorb the whitespace beside them. Tokens with "normalized": false are
//     matched in the raw text, the others in the normalized text. One
//     exception keeps the Tokenizer contract: the end-of-text token is never
//     matched, so text that spells it is encoded as ordinary text.
//  2. The text between them is normalized, pre-tokenized (hf_components.h)
//     and each piece BPE-merged by the model: ByteLevel tokenizers work on
//     the piece's bytes, the others on its characters, where a character
//     missing from the vocabulary becomes its <0xXX> byte tokens (with
//     "byte_fallback") or the unk token (merged into one with "fuse_unk"),
//     or is dropped when the model has neither. "ignore_merges" emits a
//     piece that is itself in the vocabulary as that token.
//  3. Encode adds no post-processor tokens (Hugging Face's
//     add_special_tokens=False); EncodeWithSpecialTokens adds the
//     post-processor's tokens for one sequence (e.g. Llama 3's leading
//     <|begin_of_text|>).
// Decode maps ids to their token strings and runs the decoder; an id outside
// the vocabulary is InvalidArgument. With GPT-2's or Llama 3's tokenizer.json
// Decode(Encode(s)) == s for any valid UTF-8 s.
//
// The end-of-text token is the first of <|endoftext|>, <|end_of_text|>,
// </s>, <eos> found among the added tokens (then the vocabulary); a
// tokenizer.json with none of them is rejected.
//
// Unsupported components or options (another model type, a BPE dropout,
// continuing_subword_prefix, an added token with single_word, ...) are
// InvalidArgument naming the type and JSON path.
//
// Thread safety: after Load, Encode and Decode may run on many threads at
// once (the piece cache is the only mutable state and is internally locked).
#ifndef TRELLIS_DATA_HF_TOKENIZER_H_
#define TRELLIS_DATA_HF_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "data/bpe.h"
#include "data/hf_components.h"
#include "data/tokenizer.h"

namespace trellis {

class PieceCache;

class HfTokenizer final : public Tokenizer {
 public:
  // Reads a tokenizer.json file. Errors name the file.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(
      const std::string& path);
  // Parses tokenizer.json text; `origin` names it in errors.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Parse(
      std::string_view json_text, const std::string& origin);
  ~HfTokenizer() override;
  // Token ids (of model.vocab and added_tokens) must be below this: 16
  // times the largest vocabularies in use, and small enough that the
  // id -> token table of a file naming a huge id is refused at once
  // rather than allocated.
  static constexpr uint64_t kMaxTokenIds = uint64_t{1} << 22;

  std::string name() const override { return "hf"; }
  int64_t vocab_size() const override { return vocab_size_; }
  uint32_t eot_token() const override { return eot_token_; }
  // The post-processor's prefix when it is one token other than eot.
  std::optional<uint32_t> bos_token() const override;
  std::string source_sha256() const override { return sha256_; }
  void Encode(std::string_view text, std::vector<uint32_t>& out) const override;
  absl::StatusOr<std::string> Decode(
      std::span<const uint32_t> ids) const override;

  // Encode between the post-processor's tokens for a single sequence.
  void EncodeWithSpecialTokens(std::string_view text,
                               std::vector<uint32_t>& out) const;
  // The id of a vocabulary or added token, by its tokenizer.json string
  // (a linear scan: for tests and tools).
  std::optional<uint32_t> TokenId(std::string_view token) const;

 private:
  struct AddedToken {
    std::string content;
    uint32_t id;
    bool lstrip, rstrip, normalized;
  };
  class AddedTokenMatcher;

  HfTokenizer();
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromJson(
      const nlohmann::json& root, std::string sha256);
  absl::Status ParseModel(const nlohmann::json& model);
  absl::Status ParseMerges(const nlohmann::json& merges);
  absl::Status ParseAddedTokens(const nlohmann::json& added);
  absl::Status FindEot(const nlohmann::json& added);
  // Steps 1-2 on a text between raw-matched added tokens.
  void EncodeSegment(std::string_view segment, bool first,
                     std::vector<uint32_t>& out) const;
  void EncodeNormalized(std::string_view text, bool first,
                        std::vector<uint32_t>& out) const;
  void EncodePiece(std::string_view piece, std::vector<uint32_t>& out) const;
  void Bpe(std::string_view piece, std::vector<uint32_t>& out) const;

  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::Decoder> decoder_;
  hf::SpecialTokenTemplate post_processor_;
  std::unique_ptr<AddedTokenMatcher> raw_added_;         // normalized: false
  std::unique_ptr<AddedTokenMatcher> normalized_added_;  // normalized: true
  std::unique_ptr<PieceCache> cache_;
  BpeMerges merges_;
  // Model-space token (bytes for ByteLevel models) -> id.
  std::unordered_map<std::string, uint32_t> vocab_;
  std::vector<std::string> id_token_;  // tokenizer.json string of each id
  std::vector<bool> id_known_;
  std::array<int64_t, 256> byte_ids_{};      // ByteLevel: id of each byte
  std::array<int64_t, 256> fallback_ids_{};  // <0xXX> ids, or -1
  std::optional<uint32_t> unk_id_;
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int64_t vocab_size_ = 0;
  uint32_t eot_token_ = 0;
  std::string sha256_;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_HF_TOKENIZER_H_
