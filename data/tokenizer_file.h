// The file an hf or sentencepiece tokenizer is built from, carried with the
// data and the model: preprocess keeps it in the token file (/tokenizer_file,
// a uint8 dataset), the trainer writes it into every checkpoint beside
// state.json, and trellis-generate and trellis-convert --to=hf read it from
// there. Wherever it is read it must hash to the sha256 the token file (and
// so the checkpoint) records, so a checkpoint's tokenizer is the one its
// data was tokenized with.
//
// Thread safety: pure functions (each opens what it reads).
#ifndef TRELLIS_DATA_TOKENIZER_FILE_H_
#define TRELLIS_DATA_TOKENIZER_FILE_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "framework/hdf5.h"

namespace trellis {

struct TokenizerFile {
  std::string name;   // TokenizerFileName of its kind
  std::string bytes;  // the file, whole
};

// Where a tokenizer of `kind` keeps its file: "tokenizer.json" for hf,
// "tokenizer.model" for sentencepiece, "" for kinds built from no file
// (byte; gpt2's assets are the well-known ones).
std::string TokenizerFileName(std::string_view kind);

// The file of tokenizer `spec` ("hf:PATH" or "sentencepiece:PATH"; nullopt
// for byte and gpt2), read whole; FailedPrecondition when it no longer
// hashes to `sha256` (changed since the tokenizer read it).
absl::StatusOr<std::optional<TokenizerFile>> ReadSpecTokenizerFile(
    std::string_view spec, const std::string& sha256);

// Keeps `file` in token file `token_file` (/tokenizer_file).
absl::Status WriteTokenizerFile(hdf5::File& token_file,
                                const TokenizerFile& file);

// The tokenizer file token file `path` keeps (nullopt when it keeps none:
// byte and gpt2 data, or files written before it was kept), checked
// against `identity` (the file's own metadata): DataLoss when its sha256
// differs or none is recorded to check it against.
absl::StatusOr<std::optional<TokenizerFile>> ReadTokenizerFile(
    const std::string& path, const TokenizerIdentity& identity);

// `file` as a tokenizer spec once written at `path`: "hf:PATH" or
// "sentencepiece:PATH".
std::string TokenizerSpecAt(std::string_view kind, const std::string& path);

}  // namespace trellis

#endif  // TRELLIS_DATA_TOKENIZER_FILE_H_
