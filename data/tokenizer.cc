#include "data/tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/byte_tokenizer.h"
#include "data/gpt2_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"

namespace trellis {
namespace {

template <typename T>
absl::StatusOr<std::unique_ptr<Tokenizer>> Upcast(
    absl::StatusOr<std::unique_ptr<T>> loaded) {
  if (!loaded.ok()) return loaded.status();
  return std::unique_ptr<Tokenizer>(std::move(loaded).value());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(
    std::string_view spec, const std::string& assets_dir) {
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  if (spec == "gpt2") return Upcast(Gpt2Tokenizer::Load(assets_dir));
  if (spec.starts_with("hf:") && spec.size() > 3) {
    return Upcast(HfTokenizer::Load(std::string(spec.substr(3))));
  }
  constexpr std::string_view kSentencePiece = "sentencepiece:";
  if (spec.starts_with(kSentencePiece) && spec.size() > kSentencePiece.size()) {
    return Upcast(SentencePieceTokenizer::Load(
        std::string(spec.substr(kSentencePiece.size()))));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown tokenizer '", std::string(spec),
                   "'; use byte, gpt2, hf:PATH/tokenizer.json or "
                   "sentencepiece:PATH.model"));
}

TokenizerIdentity TokenizerIdentity::Of(const Tokenizer& tokenizer) {
  return {tokenizer.name(), tokenizer.vocab_size(),
          static_cast<int64_t>(tokenizer.eot_token()),
          tokenizer.source_sha256()};
}

std::string TokenizerIdentity::ToString() const {
  return absl::StrCat("kind=", kind, " vocab_size=", vocab_size,
                      " eot=", eot_token,
                      " sha256=", sha256.empty() ? "(none)" : sha256);
}

std::string IdentityMismatch(const TokenizerIdentity& a,
                             const TokenizerIdentity& b) {
  if (a.kind != b.kind) {
    return absl::StrCat("tokenizer '", a.kind, "' vs '", b.kind, "'");
  }
  if (a.vocab_size != b.vocab_size) {
    return absl::StrCat("vocab_size ", a.vocab_size, " vs ", b.vocab_size);
  }
  if (a.eot_token != b.eot_token) {
    return absl::StrCat("eot_token ", a.eot_token, " vs ", b.eot_token);
  }
  if (!a.sha256.empty() && !b.sha256.empty() && a.sha256 != b.sha256) {
    return absl::StrCat("tokenizer file sha256 ", a.sha256, " vs ", b.sha256);
  }
  return "";
}

}  // namespace trellis
