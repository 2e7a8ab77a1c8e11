// Writes GPT-2's tokenizer as a Hugging Face tokenizer.json, from OpenAI's
// encoder.json and vocab.bpe: a BPE model with those vocab and merges, the
// ByteLevel pre-tokenizer (no prefix space, GPT-2's regex), the ByteLevel
// post-processor and decoder, and <|endoftext|> as a special added token.
// The hf tokenizer reading it encodes exactly as the gpt2 tokenizer does,
// and so does any other tokenizer.json implementation.
//
// Thread safety: pure functions.
#ifndef TRELLIS_DATA_GPT2_TOKENIZER_JSON_H_
#define TRELLIS_DATA_GPT2_TOKENIZER_JSON_H_

#include <string>

#include "absl/status/statusor.h"

namespace trellis {

// The tokenizer.json text; errors name the missing or malformed file.
absl::StatusOr<std::string> Gpt2TokenizerJson(const std::string& assets_dir);

}  // namespace trellis

#endif  // TRELLIS_DATA_GPT2_TOKENIZER_JSON_H_
