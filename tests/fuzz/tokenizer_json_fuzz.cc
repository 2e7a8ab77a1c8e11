// Fuzz target of the tokenizer.json reader: HfTokenizer::Parse (what
// --tokenizer=hf:PATH loads), then, when the file parses, encoding a few
// fixed texts with and without the post-processor's tokens and decoding
// the ids back. Every encoded id must lie in the vocabulary and decode.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "data/hf_tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace trellis {
namespace {

// Short texts that reach every stage: words, contractions, digits,
// whitespace runs, other scripts, special tokens, a NUL byte and bytes that
// are not UTF-8.
constexpr std::string_view kTexts[] = {
    "Hello, world! It's 2024: don't stop.\n\n\tAnd   then...",
    "ünïcödé 日本語 🙂 \xe2\x96\x81 <0x41>",
    "<|endoftext|><s></s><|begin_of_text|> <unk>x",
    std::string_view("a\0b \xff\xfe\xc3", 8),
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
};

void CheckIds(const HfTokenizer& tokenizer, const std::vector<uint32_t>& ids) {
  for (const uint32_t id : ids) {
    fuzz::Expect(static_cast<int64_t>(id) < tokenizer.vocab_size(),
                 absl::StrCat("encoded id ", id, " is not below vocab_size ",
                              tokenizer.vocab_size()));
  }
  const absl::StatusOr<std::string> text = tokenizer.Decode(ids);
  fuzz::Expect(text.ok(), absl::StrCat("encoded ids do not decode: ",
                                       text.status().ToString()));
}

}  // namespace
}  // namespace trellis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<trellis::HfTokenizer>> tokenizer =
      trellis::HfTokenizer::Parse(trellis::fuzz::AsText(data, size),
                                  "fuzz input");
  trellis::fuzz::Note("HfTokenizer::Parse", tokenizer.status());
  if (!tokenizer.ok()) return 0;
  for (const std::string_view text : trellis::kTexts) {
    std::vector<uint32_t> ids;
    (*tokenizer)->Encode(text, ids);
    trellis::CheckIds(**tokenizer, ids);
    ids.clear();
    (*tokenizer)->EncodeWithSpecialTokens(text, ids);
    trellis::CheckIds(**tokenizer, ids);
  }
  return 0;
}
