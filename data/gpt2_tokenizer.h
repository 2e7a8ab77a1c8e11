// The "gpt2" tokenizer: GPT-2's byte-level BPE, read from OpenAI's
// `encoder.json` (token string -> id) and `vocab.bpe` (merges, best first).
//
// Encoding follows OpenAI's encoder.py step by step:
//  1. Pre-tokenization splits the text with GPT-2's pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//       ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     (PCRE2, UTF and Unicode properties, JIT-compiled). `\s` means Unicode
//     White_Space, as in the Python `regex` module GPT-2 was built with;
//     PCRE2's own `\s` (adds U+180E) and JavaScript's (adds U+FEFF, lacks
//     U+0085) differ from it, so the pattern spells the class out.
//  2. Each piece's bytes become symbols, and the pair of adjacent symbols with
//     the lowest merge rank is merged, every non-overlapping occurrence left
//     to right, until no adjacent pair has a rank.
// Results per piece are cached (sharded, mutex-guarded, bounded).
//
// Invalid UTF-8: text is matched with PCRE2_MATCH_INVALID_UTF, so no piece
// ever contains an invalid byte; each maximal run of bytes that are not part
// of a valid character becomes a piece of its own and is byte-level BPE'd
// like any other. Every byte string therefore encodes without error and
// Decode(Encode(s)) == s for any s. Valid UTF-8 encodes exactly as GPT-2.
//
// Decode concatenates the bytes each id stands for (50256 is the text
// "<|endoftext|>"); an id outside the vocabulary is an InvalidArgumentError.
//
// Thread safety: after Load, Encode, Decode and Split may run on many threads
// at once (the cache is the only mutable state and is internally locked).
#ifndef TRELLIS_DATA_GPT2_TOKENIZER_H_
#define TRELLIS_DATA_GPT2_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/bpe.h"
#include "data/tokenizer.h"

namespace trellis {

class PieceCache;

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Reads `dir`/encoder.json and `dir`/vocab.bpe. Errors name the file and,
  // for a missing one, how to fetch it.
  static absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Load(
      const std::string& dir);
  ~Gpt2Tokenizer() override;

  std::string name() const override { return "gpt2"; }
  int64_t vocab_size() const override {
    return static_cast<int64_t>(id_bytes_.size());
  }
  uint32_t eot_token() const override { return eot_token_; }
  void Encode(std::string_view text, std::vector<uint32_t>& out) const override;
  absl::StatusOr<std::string> Decode(
      std::span<const uint32_t> ids) const override;

  // The pre-tokenization of `text` (step 1 above): views into `text` that
  // concatenate back to it.
  std::vector<std::string_view> Split(std::string_view text) const;

 private:
  class Splitter;
  Gpt2Tokenizer();
  absl::Status LoadEncoder(
      const std::string& path,
      std::unordered_map<std::string, uint32_t>& token_ids);
  absl::Status LoadMerges(
      const std::string& path,
      const std::unordered_map<std::string, uint32_t>& token_ids);
  void EncodePiece(std::string_view piece, std::vector<uint32_t>& out) const;
  // Runs BPE over the bytes of `piece`, appending the resulting ids.
  void Bpe(std::string_view piece, std::vector<uint32_t>& out) const;

  std::unique_ptr<Splitter> splitter_;
  std::unique_ptr<PieceCache> cache_;
  BpeMerges merges_;
  std::array<uint32_t, 256> byte_ids_{};  // the id of each single byte
  std::vector<std::string> id_bytes_;     // the bytes each id stands for
  std::vector<bool> id_known_;            // false for holes in the id range
  uint32_t eot_token_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_GPT2_TOKENIZER_H_
