// Tokenizers turn UTF-8 text into token ids and back.
//
// MakeTokenizer builds one from a spec (the --tokenizer flag):
//  - "byte": one token per byte (ids 0..255) plus the end-of-text token 256,
//    so vocab_size() is 257. Needs no files.
//  - "gpt2": GPT-2's byte-level BPE, read from the standard `encoder.json`
//    and `vocab.bpe` in a directory. Encodes exactly as OpenAI's GPT-2
//    tokenizer (same pre-tokenization regex); end-of-text is 50256.
//  - "hf:PATH": a Hugging Face tokenizer.json with a BPE model (GPT-2,
//    Llama 2, Llama 3 / tiktoken family); see hf_tokenizer.h.
//  - "sentencepiece:PATH": a SentencePiece .model file; see
//    sentencepiece_tokenizer.h.
//
// A tokenizer's identity (kind, vocabulary size, end-of-text id and the
// SHA-256 of the file it was read from) is stored in token files and
// checkpoints, so data and models made with different tokenizers are told
// apart even when their vocabulary sizes agree.
//
// Thread safety: a constructed Tokenizer is immutable; Encode and Decode may
// be called from many threads at once.
#ifndef TRELLIS_DATA_TOKENIZER_H_
#define TRELLIS_DATA_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace trellis {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte", "gpt2", "hf" or "sentencepiece": stored in data files so
  // readers can check it.
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual uint32_t eot_token() const = 0;
  // The token a document starts with, when the tokenizer defines one:
  // trellis-preprocess writes it before each document's tokens, as the
  // model's pretraining did (hf: the one special token its post-processor
  // puts before a single sequence, such as Llama 3's <|begin_of_text|>).
  // byte, gpt2 and sentencepiece define none, and neither does an hf
  // tokenizer whose post-processor adds no such token (GPT-2's).
  virtual std::optional<uint32_t> bos_token() const { return std::nullopt; }
  // SHA-256 (hex) of the file that defines the tokenizer (tokenizer.json,
  // the .model), or "" for tokenizers fixed by their name (byte, gpt2).
  virtual std::string source_sha256() const { return ""; }
  // Appends the ids of `text` to `out`. Never emits eot_token() for text
  // (text that spells the end-of-text token is ordinary text).
  virtual void Encode(std::string_view text,
                      std::vector<uint32_t>& out) const = 0;
  // The bytes the ids stand for. byte, gpt2 and hf decode eot_token() to
  // its text ("<|endoftext|>", or the hf file's token); sentencepiece to
  // nothing. Fails on an id outside the vocabulary.
  virtual absl::StatusOr<std::string> Decode(
      std::span<const uint32_t> ids) const = 0;
};

// `spec` is "byte", "gpt2", "hf:PATH" or "sentencepiece:PATH"; `assets_dir`
// holds encoder.json and vocab.bpe (used by "gpt2" only). Errors name the
// missing or malformed file.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(
    std::string_view spec, const std::string& assets_dir);

// What makes two tokenizers interchangeable for training data.
struct TokenizerIdentity {
  std::string kind = {};  // Tokenizer::name()
  int64_t vocab_size = 0;
  int64_t eot_token = 0;
  std::string sha256 = {};  // Tokenizer::source_sha256(); "" if not recorded

  static TokenizerIdentity Of(const Tokenizer& tokenizer);
  // "kind=hf vocab_size=50257 eot=50256 sha256=ab12..."
  std::string ToString() const;
};

// "" when `a` and `b` may be used together, else what differs, e.g.
// "tokenizer file sha256 ab12... vs cd34...". An empty sha256 on either side
// (files written before it was recorded) matches any.
std::string IdentityMismatch(const TokenizerIdentity& a,
                             const TokenizerIdentity& b);

// Where scripts/fetch-gpt2-assets.sh puts encoder.json and vocab.bpe,
// relative to the repository root.
inline constexpr char kDefaultGpt2AssetsDir[] = "third_party_assets/gpt2";

}  // namespace trellis

#endif  // TRELLIS_DATA_TOKENIZER_H_
