// The token file: a tokenized corpus in one HDF5 file (docs/data-format.md).
//
// Layout:
//   /tokens       1-D, uint16 when vocab_size <= 65536 (every id fits in 16
//                 bits), else uint32. Documents one after another, each
//                 followed by the end-of-text token.
//   /doc_offsets  1-D uint64: doc_offsets[i] is the index in /tokens of
//                 document i's first token (its EOT when it is empty). So
//                 doc_offsets[0] == 0, they never decrease, and document i
//                 ends with the EOT at doc_offsets[i + 1] - 1 (the last
//                 document's EOT is the last token).
//   root attributes: tokenizer (string, e.g. "gpt2"), vocab_size (int64),
//                 eot_token (int64, < vocab_size), format_version (int64, 1),
//                 max_token_id (int64, the largest id in /tokens; optional,
//                 written by TokenDatasetWriter), tokenizer_sha256 (string,
//                 the SHA-256 of the tokenizer's file for hf and
//                 sentencepiece; optional, absent in older files).
//   /tokenizer_file  1-D uint8, optional: the hf or sentencepiece tokenizer's
//                 file itself, hashing to tokenizer_sha256
//                 (data/tokenizer_file.h).
//
// TokenDatasetWriter streams documents into a new file in bounded memory.
// TokenDataset opens one for reading, validates it, and reads ranges of
// tokens as int32 tensors, checking every id it returns against the
// vocabulary (so an id the sampled checks at Open missed fails its read
// instead of reaching the model).
//
// Thread safety: neither class is synchronized; use each object from one
// thread at a time (separate objects may be used from separate threads).
#ifndef TRELLIS_DATA_TOKEN_DATASET_H_
#define TRELLIS_DATA_TOKEN_DATASET_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "data/tokenizer_file.h"
#include "framework/hdf5.h"
#include "framework/tensor.h"

namespace trellis {

inline constexpr int64_t kTokenFormatVersion = 1;

// The root attributes of a token file.
struct TokenFileMetadata {
  std::string tokenizer;
  int64_t vocab_size = 0;
  int64_t eot_token = 0;
  std::string tokenizer_sha256 = {};  // "" when not recorded

  TokenizerIdentity identity() const {
    return {tokenizer, vocab_size, eot_token, tokenizer_sha256};
  }
};

// uint16 when every id < vocab_size fits in 16 bits, else uint32.
hdf5::StoredType TokenStoredType(int64_t vocab_size);

class TokenDatasetWriter {
 public:
  struct Options {
    // Tokens held in memory before they go to the file.
    int64_t buffer_tokens = int64_t{1} << 20;
    // HDF5 chunk length of /tokens (and /doc_offsets).
    int64_t chunk_tokens = int64_t{1} << 18;
  };

  // Creates (replacing) `path`. Fails on an unwritable path or metadata that
  // breaks the format (vocab_size outside [1, 2^31), eot_token outside the
  // vocabulary, empty tokenizer name).
  static absl::StatusOr<std::unique_ptr<TokenDatasetWriter>> Create(
      const std::string& path, const TokenFileMetadata& metadata,
      Options options);
  static absl::StatusOr<std::unique_ptr<TokenDatasetWriter>> Create(
      const std::string& path, const TokenFileMetadata& metadata) {
    return Create(path, metadata, Options());
  }
  // Closes the file; if Finish was not called the file is incomplete.
  ~TokenDatasetWriter();

  // Appends tokens to the current document, starting one if none is open.
  // Fails on an id >= vocab_size or equal to the EOT token.
  absl::Status AppendTokens(std::span<const uint32_t> tokens);
  // Ends the current document with the EOT token (an empty document when
  // none is open).
  absl::Status EndDocument();
  // AppendTokens then EndDocument.
  absl::Status AppendDocument(std::span<const uint32_t> tokens);
  // Keeps the tokenizer's own file in the token file (data/tokenizer_file.h);
  // FailedPrecondition unless it hashes to the metadata's tokenizer_sha256.
  absl::Status KeepTokenizerFile(const TokenizerFile& file);
  // Ends an open document, writes what is buffered and the max_token_id
  // attribute, and closes the file. No call may follow.
  absl::Status Finish();

  // Tokens so far, EOTs included (buffered ones too).
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_documents() const { return num_documents_; }

 private:
  TokenDatasetWriter(TokenFileMetadata metadata, Options options,
                     hdf5::File file, hdf5::Dataset tokens,
                     hdf5::Dataset doc_offsets);
  absl::Status Flush();
  void StartDocumentIfNeeded();

  TokenFileMetadata metadata_;
  Options options_;
  hdf5::File file_;
  hdf5::Dataset tokens_;
  hdf5::Dataset doc_offsets_;
  std::vector<uint32_t> token_buffer_;
  std::vector<int64_t> offset_buffer_;
  int64_t num_tokens_ = 0;
  int64_t num_documents_ = 0;
  uint32_t max_id_ = 0;
  bool in_document_ = false;
  bool finished_ = false;
};

class TokenDataset {
 public:
  // Opens and validates a token file: the datasets and attributes exist with
  // the right types, there is at least one token, doc_offsets start at 0 and
  // stay in range, the last token is the EOT, the max_token_id attribute
  // (when present) and ids spread over the file are inside the vocabulary.
  // Each failure is one line saying what is wrong and how to fix it.
  static absl::StatusOr<TokenDataset> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const TokenFileMetadata& metadata() const { return metadata_; }
  const std::string& tokenizer() const { return metadata_.tokenizer; }
  // What the trainer compares with a checkpoint's tokenizer.
  TokenizerIdentity tokenizer_identity() const { return metadata_.identity(); }
  int64_t vocab_size() const { return metadata_.vocab_size; }
  int64_t eot_token() const { return metadata_.eot_token; }
  hdf5::StoredType token_type() const { return token_type_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_documents() const { return num_documents_; }

  // Tokens [start, start + count) as a CPU int32 tensor of shape (count).
  // OutOfRange when the range leaves [0, num_tokens()); InvalidArgument
  // naming the first id outside [0, vocab_size()).
  absl::StatusOr<Tensor> ReadTokens(int64_t start, int64_t count) const;
  // The same into caller memory holding `count` int32s.
  absl::Status ReadTokens(int64_t start, int64_t count, int32_t* out) const;
  // doc_offsets[start, start + count).
  absl::StatusOr<std::vector<int64_t>> ReadDocOffsets(int64_t start,
                                                      int64_t count) const;

 private:
  TokenDataset(std::string path, hdf5::File file, hdf5::Dataset tokens,
               hdf5::Dataset doc_offsets);
  absl::Status Validate();
  absl::Status CheckIds(int64_t start, int64_t count) const;
  absl::Status CheckIds(int64_t start, int64_t count, const int32_t* ids) const;

  std::string path_;
  hdf5::File file_;
  hdf5::Dataset tokens_;
  hdf5::Dataset doc_offsets_;
  TokenFileMetadata metadata_;
  hdf5::StoredType token_type_ = hdf5::StoredType::kU16;
  int64_t num_tokens_ = 0;
  int64_t num_documents_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_DATA_TOKEN_DATASET_H_
