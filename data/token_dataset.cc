#include "data/token_dataset.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/sha256.h"
#include "framework/status.h"

namespace trellis {
namespace {

constexpr char kHint[] =
    " (was it written by trellis-preprocess? the format is in "
    "docs/data-format.md)";

// "<path>: <what>" + the hint, as a one-line InvalidArgument.
absl::Status Malformed(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what, kHint));
}

absl::Status CheckMetadata(const std::string& path,
                           const TokenFileMetadata& metadata) {
  if (metadata.tokenizer.empty()) {
    return Malformed(path, "the tokenizer attribute is empty");
  }
  if (metadata.vocab_size < 1 ||
      metadata.vocab_size > std::numeric_limits<int32_t>::max()) {
    return Malformed(path, absl::StrCat("vocab_size ", metadata.vocab_size,
                                        " is outside [1, 2^31)"));
  }
  if (metadata.eot_token < 0 || metadata.eot_token >= metadata.vocab_size) {
    return Malformed(path, absl::StrCat("eot_token ", metadata.eot_token,
                                        " is outside the vocabulary [0, ",
                                        metadata.vocab_size, ")"));
  }
  return absl::OkStatus();
}

// The root attributes of the token file at path (the format is in
// docs/data-format.md), checked: the tokenizer, its vocabulary and
// end-of-text token, the tokenizer's hash where there is one and the format
// version.
absl::StatusOr<TokenFileMetadata> ReadMetadata(const std::string& path,
                                               const hdf5::File& file) {
  for (const char* name : {"tokenizer", "vocab_size", "eot_token"}) {
    if (!file.HasAttribute(name)) {
      return Malformed(path, absl::StrCat("no root attribute '", name, "'"));
    }
  }
  absl::StatusOr<std::string> tokenizer = file.ReadStringAttribute("tokenizer");
  absl::StatusOr<int64_t> vocab = file.ReadInt64Attribute("vocab_size");
  absl::StatusOr<int64_t> eot = file.ReadInt64Attribute("eot_token");
  for (const absl::Status& status :
       {tokenizer.status(), vocab.status(), eot.status()}) {
    if (!status.ok()) return Malformed(path, std::string(status.message()));
  }
  TokenFileMetadata metadata{*tokenizer, *vocab, *eot};
  if (file.HasAttribute("tokenizer_sha256")) {  // absent in older files
    absl::StatusOr<std::string> sha256 =
        file.ReadStringAttribute("tokenizer_sha256");
    if (!sha256.ok())
      return Malformed(path, std::string(sha256.status().message()));
    metadata.tokenizer_sha256 = *sha256;
  }
  TRELLIS_RETURN_IF_ERROR(CheckMetadata(path, metadata));
  if (file.HasAttribute("format_version")) {
    absl::StatusOr<int64_t> version = file.ReadInt64Attribute("format_version");
    if (!version.ok() || *version != kTokenFormatVersion) {
      return Malformed(
          path, absl::StrCat("format_version is not ", kTokenFormatVersion));
    }
  }
  return metadata;
}

// The optional max_token_id attribute, which the writer records, must lie
// inside the vocabulary.
absl::Status CheckMaxTokenId(const std::string& path, const hdf5::File& file,
                             int64_t vocab_size) {
  if (!file.HasAttribute("max_token_id")) return absl::OkStatus();
  absl::StatusOr<int64_t> max_id = file.ReadInt64Attribute("max_token_id");
  if (!max_id.ok()) {
    return Malformed(path, std::string(max_id.status().message()));
  }
  if (*max_id < 0 || *max_id >= vocab_size) {
    return Malformed(path,
                     absl::StrCat("max_token_id ", *max_id,
                                  " is outside the vocabulary [0, ", vocab_size,
                                  "): the file mixes tokenizers or is damaged; "
                                  "re-create it with trellis-preprocess"));
  }
  return absl::OkStatus();
}

}  // namespace

hdf5::StoredType TokenStoredType(int64_t vocab_size) {
  return vocab_size <= 65536 ? hdf5::StoredType::kU16 : hdf5::StoredType::kU32;
}

// ---------------------------------------------------------------- writer

TokenDatasetWriter::TokenDatasetWriter(TokenFileMetadata metadata,
                                       Options options, hdf5::File file,
                                       hdf5::Dataset tokens,
                                       hdf5::Dataset doc_offsets)
    : metadata_(std::move(metadata)),
      options_(options),
      file_(std::move(file)),
      tokens_(std::move(tokens)),
      doc_offsets_(std::move(doc_offsets)) {
  token_buffer_.reserve(options_.buffer_tokens);
}

TokenDatasetWriter::~TokenDatasetWriter() = default;

absl::StatusOr<std::unique_ptr<TokenDatasetWriter>> TokenDatasetWriter::Create(
    const std::string& path, const TokenFileMetadata& metadata,
    Options options) {
  TRELLIS_CHECK_GT(options.buffer_tokens, 0);
  TRELLIS_CHECK_GT(options.chunk_tokens, 0);
  TRELLIS_RETURN_IF_ERROR(CheckMetadata(path, metadata));
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File file, hdf5::File::Create(path));
  TRELLIS_RETURN_IF_ERROR(
      file.WriteStringAttribute("tokenizer", metadata.tokenizer));
  TRELLIS_RETURN_IF_ERROR(
      file.WriteInt64Attribute("vocab_size", metadata.vocab_size));
  TRELLIS_RETURN_IF_ERROR(
      file.WriteInt64Attribute("eot_token", metadata.eot_token));
  TRELLIS_RETURN_IF_ERROR(
      file.WriteInt64Attribute("format_version", kTokenFormatVersion));
  if (!metadata.tokenizer_sha256.empty()) {
    TRELLIS_RETURN_IF_ERROR(file.WriteStringAttribute(
        "tokenizer_sha256", metadata.tokenizer_sha256));
  }
  TRELLIS_ASSIGN_OR_RETURN(hdf5::Dataset tokens,
                           file.CreateExtendableDataset(
                               "tokens", TokenStoredType(metadata.vocab_size),
                               options.chunk_tokens));
  TRELLIS_ASSIGN_OR_RETURN(
      hdf5::Dataset doc_offsets,
      file.CreateExtendableDataset(
          "doc_offsets", hdf5::StoredType::kU64,
          std::max<int64_t>(options.chunk_tokens / 16, 1024)));
  return std::unique_ptr<TokenDatasetWriter>(
      new TokenDatasetWriter(metadata, options, std::move(file),
                             std::move(tokens), std::move(doc_offsets)));
}

void TokenDatasetWriter::StartDocumentIfNeeded() {
  if (in_document_) return;
  offset_buffer_.push_back(num_tokens_);
  in_document_ = true;
}

absl::Status TokenDatasetWriter::AppendTokens(
    std::span<const uint32_t> tokens) {
  TRELLIS_CHECK(!finished_) << "AppendTokens after Finish";
  const uint32_t vocab = static_cast<uint32_t>(metadata_.vocab_size);
  const uint32_t eot = static_cast<uint32_t>(metadata_.eot_token);
  for (uint32_t id : tokens) {
    if (id >= vocab || id == eot) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_.file_name(), ": token id ", id,
          id == eot ? " is the end-of-text token, which the writer adds itself"
                    : absl::StrCat(" is outside the vocabulary [0, ",
                                   metadata_.vocab_size, ")")));
    }
  }
  for (uint32_t id : tokens) max_id_ = std::max(max_id_, id);
  StartDocumentIfNeeded();
  size_t done = 0;
  while (done < tokens.size()) {
    const size_t room =
        static_cast<size_t>(options_.buffer_tokens) - token_buffer_.size();
    const size_t take = std::min(room, tokens.size() - done);
    token_buffer_.insert(token_buffer_.end(), tokens.begin() + done,
                         tokens.begin() + done + take);
    done += take;
    num_tokens_ += static_cast<int64_t>(take);
    if (token_buffer_.size() >= static_cast<size_t>(options_.buffer_tokens)) {
      TRELLIS_RETURN_IF_ERROR(Flush());
    }
  }
  return absl::OkStatus();
}

absl::Status TokenDatasetWriter::EndDocument() {
  TRELLIS_CHECK(!finished_) << "EndDocument after Finish";
  StartDocumentIfNeeded();
  token_buffer_.push_back(static_cast<uint32_t>(metadata_.eot_token));
  max_id_ = std::max(max_id_, static_cast<uint32_t>(metadata_.eot_token));
  ++num_tokens_;
  ++num_documents_;
  in_document_ = false;
  if (token_buffer_.size() >= static_cast<size_t>(options_.buffer_tokens) ||
      offset_buffer_.size() >= static_cast<size_t>(options_.buffer_tokens)) {
    return Flush();
  }
  return absl::OkStatus();
}

absl::Status TokenDatasetWriter::AppendDocument(
    std::span<const uint32_t> tokens) {
  TRELLIS_RETURN_IF_ERROR(AppendTokens(tokens));
  return EndDocument();
}

absl::Status TokenDatasetWriter::Flush() {
  TRELLIS_RETURN_IF_ERROR(
      tokens_.Append(DType::kU32, token_buffer_.data(), token_buffer_.size()));
  token_buffer_.clear();
  TRELLIS_RETURN_IF_ERROR(doc_offsets_.Append(
      DType::kI64, offset_buffer_.data(), offset_buffer_.size()));
  offset_buffer_.clear();
  return absl::OkStatus();
}

absl::Status TokenDatasetWriter::KeepTokenizerFile(const TokenizerFile& file) {
  TRELLIS_CHECK(!finished_) << "KeepTokenizerFile after Finish";
  if (metadata_.tokenizer_sha256.empty() ||
      Sha256Hex(file.bytes) != metadata_.tokenizer_sha256) {
    return absl::FailedPreconditionError(absl::StrCat(
        file.name, " does not hash to the tokenizer_sha256 of ",
        file_.file_name(), "; keep the file the tokenizer was built from"));
  }
  return WriteTokenizerFile(file_, file);
}

absl::Status TokenDatasetWriter::Finish() {
  TRELLIS_CHECK(!finished_) << "Finish called twice";
  if (in_document_) TRELLIS_RETURN_IF_ERROR(EndDocument());
  finished_ = true;
  TRELLIS_RETURN_IF_ERROR(Flush());
  TRELLIS_RETURN_IF_ERROR(
      file_.WriteInt64Attribute("max_token_id", static_cast<int64_t>(max_id_)));
  // Datasets first: the file only really closes when nothing in it is open.
  {
    hdf5::Dataset closing_tokens = std::move(tokens_);
    hdf5::Dataset closing_offsets = std::move(doc_offsets_);
  }
  return file_.Close();
}

// ---------------------------------------------------------------- reader

TokenDataset::TokenDataset(std::string path, hdf5::File file,
                           hdf5::Dataset tokens, hdf5::Dataset doc_offsets)
    : path_(std::move(path)),
      file_(std::move(file)),
      tokens_(std::move(tokens)),
      doc_offsets_(std::move(doc_offsets)) {}

absl::StatusOr<TokenDataset> TokenDataset::Open(const std::string& path) {
  absl::StatusOr<hdf5::File> file = hdf5::File::Open(path);
  if (!file.ok()) {
    if (file.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat(
          path, ": no such token file; create one with trellis-preprocess"));
    }
    const bool not_hdf5 =
        file.status().code() == absl::StatusCode::kInvalidArgument;
    return absl::InvalidArgumentError(absl::StrCat(
        file.status().message(),
        not_hdf5 ? "; token files are made from text by trellis-preprocess"
                 : "; the file is damaged (truncated by a full disk or an "
                   "interrupted copy?): re-create it with trellis-preprocess"));
  }
  for (const char* name : {"tokens", "doc_offsets"}) {
    if (!file->Exists(name)) {
      return Malformed(path, absl::StrCat("no /", name, " dataset"));
    }
  }
  absl::StatusOr<hdf5::Dataset> tokens = file->OpenDataset("tokens");
  if (!tokens.ok())
    return Malformed(path, std::string(tokens.status().message()));
  absl::StatusOr<hdf5::Dataset> offsets = file->OpenDataset("doc_offsets");
  if (!offsets.ok()) {
    return Malformed(path, std::string(offsets.status().message()));
  }
  TokenDataset dataset(path, *std::move(file), *std::move(tokens),
                       *std::move(offsets));
  TRELLIS_RETURN_IF_ERROR(dataset.Validate());
  return dataset;
}

absl::Status TokenDataset::Validate() {
  TRELLIS_ASSIGN_OR_RETURN(metadata_, ReadMetadata(path_, file_));

  const std::optional<hdf5::StoredType> type = tokens_.stored_type();
  const hdf5::StoredType want = TokenStoredType(metadata_.vocab_size);
  if (tokens_.ndim() != 1 || !type.has_value() ||
      (*type != want && *type != hdf5::StoredType::kU32)) {
    return Malformed(
        path_, absl::StrCat("/tokens is ", tokens_.ndim(), "-D ",
                            tokens_.stored_type_name(), "; it must be 1-D ",
                            hdf5::StoredTypeName(want), " for vocab_size ",
                            metadata_.vocab_size));
  }
  token_type_ = *type;
  TRELLIS_RETURN_IF_ERROR(CheckMaxTokenId(path_, file_, metadata_.vocab_size));
  if (doc_offsets_.ndim() != 1 ||
      doc_offsets_.stored_type() != hdf5::StoredType::kU64) {
    return Malformed(
        path_, absl::StrCat("/doc_offsets is ", doc_offsets_.ndim(), "-D ",
                            doc_offsets_.stored_type_name(),
                            "; it must be 1-D uint64"));
  }
  num_tokens_ = tokens_.shape()[0];
  num_documents_ = doc_offsets_.shape()[0];
  if (num_tokens_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_,
                     ": the file holds no tokens; preprocess some text into it "
                     "with trellis-preprocess"));
  }
  if (num_documents_ == 0) return Malformed(path_, "/doc_offsets is empty");

  // doc_offsets: the first and last few thousand start at 0, never decrease
  // and stay inside /tokens.
  const int64_t edge = std::min<int64_t>(num_documents_, 4096);
  for (int64_t start : {int64_t{0}, num_documents_ - edge}) {
    TRELLIS_ASSIGN_OR_RETURN(std::vector<int64_t> offsets,
                             ReadDocOffsets(start, edge));
    if (start == 0 && offsets[0] != 0) {
      return Malformed(path_, "doc_offsets[0] is not 0");
    }
    for (int64_t i = 0; i < edge; ++i) {
      if (offsets[i] >= num_tokens_ || offsets[i] < 0 ||
          (i > 0 && offsets[i] < offsets[i - 1])) {
        return Malformed(
            path_, absl::StrCat("doc_offsets[", start + i, "] = ", offsets[i],
                                " is out of order "
                                "or past the end of /tokens"));
      }
    }
  }
  // Ids: 16 blocks spread over the file, the first and last included.
  const int64_t block = std::min<int64_t>(num_tokens_, 4096);
  for (int64_t i = 0; i < 16; ++i) {
    TRELLIS_RETURN_IF_ERROR(CheckIds((num_tokens_ - block) * i / 15, block));
  }
  TRELLIS_ASSIGN_OR_RETURN(Tensor last, ReadTokens(num_tokens_ - 1, 1));
  if (last.data<int32_t>()[0] != metadata_.eot_token) {
    return Malformed(
        path_,
        absl::StrCat("the last token is ", last.data<int32_t>()[0],
                     ", not the end-of-text token ", metadata_.eot_token));
  }
  return absl::OkStatus();
}

absl::Status TokenDataset::CheckIds(int64_t start, int64_t count) const {
  // ReadTokens checks every id it returns.
  return ReadTokens(start, count).status();
}

absl::Status TokenDataset::CheckIds(int64_t start, int64_t count,
                                    const int32_t* v) const {
  for (int64_t i = 0; i < count; ++i) {
    if (v[i] < 0 || v[i] >= metadata_.vocab_size) {
      return Malformed(path_, absl::StrCat("token ", start + i, " is ", v[i],
                                           ", outside the vocabulary [0, ",
                                           metadata_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status TokenDataset::ReadTokens(int64_t start, int64_t count,
                                      int32_t* out) const {
  if (start < 0 || count < 0 || start + count > num_tokens_) {
    return absl::OutOfRangeError(
        absl::StrCat(path_, ": tokens [", start, ", ", start + count,
                     ") are outside [0, ", num_tokens_, ")"));
  }
  TRELLIS_RETURN_IF_ERROR(tokens_.Read({start}, {count}, DType::kI32, out));
  return CheckIds(start, count, out);
}

absl::StatusOr<Tensor> TokenDataset::ReadTokens(int64_t start,
                                                int64_t count) const {
  if (count < 0) return ReadTokens(start, count, nullptr);
  Tensor tensor = Tensor::Empty({count}, DType::kI32);
  TRELLIS_RETURN_IF_ERROR(ReadTokens(start, count, tensor.data<int32_t>()));
  return tensor;
}

absl::StatusOr<std::vector<int64_t>> TokenDataset::ReadDocOffsets(
    int64_t start, int64_t count) const {
  if (start < 0 || count < 0 || start + count > num_documents_) {
    return absl::OutOfRangeError(
        absl::StrCat(path_, ": doc_offsets [", start, ", ", start + count,
                     ") are outside [0, ", num_documents_, ")"));
  }
  std::vector<int64_t> offsets(count);
  TRELLIS_RETURN_IF_ERROR(
      doc_offsets_.Read({start}, {count}, DType::kI64, offsets.data()));
  return offsets;
}

}  // namespace trellis
