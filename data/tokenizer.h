// Tokenizers turn UTF-8 text into token ids and back.
//
// Two are built in:
//  - "byte": one token per byte (ids 0..255) plus the end-of-text token 256,
//    so vocab_size() is 257. Needs no files.
//  - "gpt2": GPT-2's byte-level BPE, read from the standard `encoder.json`
//    and `vocab.bpe` in a directory. Encodes exactly as OpenAI's GPT-2
//    tokenizer (same pre-tokenization regex); end-of-text is 50256.
//
// Thread safety: a constructed Tokenizer is immutable; Encode and Decode may
// be called from many threads at once.
#ifndef TRELLIS_DATA_TOKENIZER_H_
#define TRELLIS_DATA_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte" or "gpt2": stored in data files so readers can check it.
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual uint32_t eot_token() const = 0;
  // Appends the ids of `text` to `out`. Never emits eot_token() for text.
  virtual void Encode(std::string_view text,
                      std::vector<uint32_t>& out) const = 0;
  // The bytes the ids stand for; eot_token() decodes to "<|endoftext|>".
  // Fails on an id outside the vocabulary.
  virtual absl::StatusOr<std::string> Decode(
      std::span<const uint32_t> ids) const = 0;
};

// `name` is "byte" or "gpt2"; `assets_dir` holds encoder.json and vocab.bpe
// (ignored for "byte"). Errors name the missing or malformed file.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(
    std::string_view name, const std::string& assets_dir);

// Where scripts/fetch-gpt2-assets.sh puts encoder.json and vocab.bpe,
// relative to the repository root.
inline constexpr char kDefaultGpt2AssetsDir[] = "third_party_assets/gpt2";

}  // namespace trellis

#endif  // TRELLIS_DATA_TOKENIZER_H_
