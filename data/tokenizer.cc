#include "data/tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/byte_tokenizer.h"
#include "data/gpt2_tokenizer.h"

namespace trellis {

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(
    std::string_view name, const std::string& assets_dir) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2") {
    absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> gpt2 =
        Gpt2Tokenizer::Load(assets_dir);
    if (!gpt2.ok()) return gpt2.status();
    return std::unique_ptr<Tokenizer>(std::move(gpt2).value());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown tokenizer '", std::string(name), "'; use byte or gpt2"));
}

}  // namespace trellis
