// The pipeline stages of a Hugging Face tokenizer.json that surround its
// model: normalizers, pre-tokenizers, post-processors and decoders, parsed
// from their JSON objects (https://huggingface.co/docs/tokenizers).
//
// Supported types (a Sequence of pre-tokenizers runs at most 64 steps in
// all, counting those of Sequences inside it):
//   normalizer:     Sequence, Prepend, Replace (String or Regex pattern)
//   pre_tokenizer:  Sequence, ByteLevel, Split (String or Regex pattern;
//                   behavior Isolated, Removed, MergedWithPrevious,
//                   MergedWithNext; invert), Metaspace
//   post_processor: Sequence, ByteLevel, TemplateProcessing (its "single"
//                   template), RobertaProcessing, BertProcessing
//   decoder:        Sequence, ByteLevel, ByteFallback, Fuse, Strip, Replace,
//                   Metaspace
// Any other type, or an option these do not implement, is InvalidArgument
// naming the component type and its JSON path (e.g.
// "pre_tokenizer.pretokenizers[1]").
//
// ByteLevel pre-tokenization leaves pieces as raw bytes; the BPE model maps
// its byte-level vocabulary back to bytes instead (see hf_tokenizer.h), so no
// stage here ever sees GPT-2's byte-to-unicode alphabet except the ByteLevel
// decoder, which undoes it.
//
// The decoders live in hf_decoders.cc, the JSON helpers all of them share
// in hf_json_util.h.
//
// Thread safety: every stage is immutable after parsing; Apply/Split/Decode
// may run on many threads at once.
#ifndef TRELLIS_DATA_HF_COMPONENTS_H_
#define TRELLIS_DATA_HF_COMPONENTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trellis::hf {

// Rewrites a whole text (before pre-tokenization).
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Apply(std::string& text) const = 0;
  // The most bytes Apply can make of a text of `bytes` bytes: a bound the
  // tokenizer checks when it loads, so that no file makes an encode run
  // out of memory.
  virtual double MaxOutputBytes(double bytes) const = 0;
};

// Cuts a text into pieces; emit(piece) is called for each piece in order.
// `first` is true when `text` starts the encoded input (Metaspace's "first"
// prepend scheme needs it).
using PieceSink = std::function<void(std::string_view)>;
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void Split(std::string_view text, bool first,
                     const PieceSink& emit) const = 0;
  // True when the pipeline turns pieces into bytes for a byte-level model.
  virtual bool byte_level() const { return false; }
};

// Turns the token strings of an id sequence into text pieces.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void Apply(std::vector<std::string>& tokens) const = 0;
  // The most bytes Apply can make of tokens of `bytes` bytes in all (see
  // Normalizer::MaxOutputBytes).
  virtual double MaxOutputBytes(double bytes) const = 0;
};

// The ids a post-processor puts around one sequence.
struct SpecialTokenTemplate {
  std::vector<uint32_t> prefix;
  std::vector<uint32_t> suffix;
};

// The byte a byte-fallback token such as "<0xAB>" stands for, or -1.
int FallbackByte(std::string_view token);

// GPT-2's byte-to-unicode table: byte b stands for code point table[b].
const std::vector<char32_t>& ByteLevelAlphabet();

// Each parser accepts JSON null (returns nullptr / an empty template) and
// names `path` in its errors.
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(
    const nlohmann::json& json, const std::string& path);
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(
    const nlohmann::json& json, const std::string& path);
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(
    const nlohmann::json& json, const std::string& path);
absl::StatusOr<SpecialTokenTemplate> ParsePostProcessor(
    const nlohmann::json& json, const std::string& path);

// "<component> type '<type>' at <path> is not supported".
absl::Status Unsupported(absl::string_view component, absl::string_view type,
                         const std::string& path);

}  // namespace trellis::hf

#endif  // TRELLIS_DATA_HF_COMPONENTS_H_
