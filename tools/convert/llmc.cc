#include "tools/convert/llmc.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "framework/atomic_file.h"

namespace trellis {
namespace {

static_assert(std::endian::native == std::endian::little,
              "llm.c files are little-endian");

// Sizes beyond this are refused, so no product of them overflows.
constexpr int64_t kMaxDim = int64_t{1} << 24;

std::string ErrnoText() { return std::strerror(errno); }

bool ReadFully(int fd, char* out, int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, out, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    out += n;
    bytes -= n;
    offset += n;
  }
  return true;
}

}  // namespace

absl::Status ValidateLlmcHeader(const LlmcHeader& h, const std::string& file) {
  if (h.version != kLlmcVersionF32 && h.version != kLlmcVersionBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": llm.c version ", h.version,
        " is not supported; trellis reads version 3 (float32) and 5 "
        "(bfloat16) model files"));
  }
  const std::pair<const char*, int64_t> sizes[] = {
      {"maxT", h.max_seq_len}, {"V", h.vocab_size},
      {"L", h.n_layer},        {"NH", h.n_head},
      {"C", h.channels},       {"Vp", h.padded_vocab_size}};
  for (const auto& [name, value] : sizes) {
    if (value <= 0 || value > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": header field ", name, " = ", value,
                       " is outside [1, ", kMaxDim, "]; the file is corrupt"));
    }
  }
  if (h.channels % h.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": C = ", h.channels, " is not divisible by NH = ", h.n_head,
        "; the header is corrupt"));
  }
  if (h.padded_vocab_size < h.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": padded vocabulary Vp = ", h.padded_vocab_size,
                     " is smaller than V = ", h.vocab_size));
  }
  // Every size below 2^24 keeps each product below 2^128; the total must
  // stay far below 2^63 bytes.
  using Wide = unsigned __int128;
  const Wide c = h.channels;
  const Wide elements = Wide(h.padded_vocab_size) * c +
                        Wide(h.max_seq_len) * c +
                        Wide(h.n_layer) * (12 * c * c + 13 * c) + 2 * c;
  if (elements > (Wide(1) << 50)) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": the header's sizes (L = ", h.n_layer, ", C = ", h.channels,
        ") describe a model too large to be real; the file is "
        "corrupt"));
  }
  return absl::OkStatus();
}

std::vector<LlmcTensor> LlmcTensors(const LlmcHeader& h) {
  const int64_t l = h.n_layer, c = h.channels;
  std::vector<LlmcTensor> t = {{"wte", {h.padded_vocab_size, c}},
                               {"wpe", {h.max_seq_len, c}},
                               {"ln1w", {l, c}},
                               {"ln1b", {l, c}},
                               {"qkvw", {l, 3 * c, c}},
                               {"qkvb", {l, 3 * c}},
                               {"attprojw", {l, c, c}},
                               {"attprojb", {l, c}},
                               {"ln2w", {l, c}},
                               {"ln2b", {l, c}},
                               {"fcw", {l, 4 * c, c}},
                               {"fcb", {l, 4 * c}},
                               {"fcprojw", {l, c, 4 * c}},
                               {"fcprojb", {l, c}},
                               {"lnfw", {c}},
                               {"lnfb", {c}}};
  int64_t offset = kLlmcHeaderBytes;
  for (LlmcTensor& tensor : t) {
    tensor.offset = offset;
    tensor.nbytes = NumElements(tensor.shape) * DTypeSize(h.dtype());
    offset += tensor.nbytes;
  }
  return t;
}

LlmcReader::LlmcReader(LlmcReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      header_(other.header_),
      tensors_(std::move(other.tensors_)) {}

LlmcReader& LlmcReader::operator=(LlmcReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    header_ = other.header_;
    tensors_ = std::move(other.tensors_);
  }
  return *this;
}

LlmcReader::~LlmcReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<LlmcReader> LlmcReader::Open(const std::string& path) {
  LlmcReader reader;
  reader.path_ = path;
  reader.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info;
  if (reader.fd_ < 0 || ::fstat(reader.fd_, &info) != 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", ErrnoText()));
  }
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not an llm.c .bin file"));
  }
  const int64_t size = info.st_size;
  int32_t words[256];
  if (size < kLlmcHeaderBytes ||
      !ReadFully(reader.fd_, reinterpret_cast<char*>(words), kLlmcHeaderBytes,
                 0)) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: ", size,
                                            " bytes, shorter than llm.c's ",
                                            kLlmcHeaderBytes, "-byte header"));
  }
  if (words[0] != kLlmcMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": magic number ", words[0], " is not llm.c's ", kLlmcMagic,
        "; not an llm.c model file (tokenizer and state files differ)"));
  }
  LlmcHeader& h = reader.header_;
  h.version = words[1];
  h.max_seq_len = words[2];
  h.vocab_size = words[3];
  h.n_layer = words[4];
  h.n_head = words[5];
  h.channels = words[6];
  h.padded_vocab_size = words[7];
  TRELLIS_RETURN_IF_ERROR(ValidateLlmcHeader(h, path));
  reader.tensors_ = LlmcTensors(h);
  const LlmcTensor& last = reader.tensors_.back();
  const int64_t want = last.offset + last.nbytes;
  for (const LlmcTensor& t : reader.tensors_) {
    if (t.offset + t.nbytes > size) {
      return absl::DataLossError(absl::StrCat(
          path, ": truncated: ", size, " bytes, ending inside tensor ", t.name,
          " ", ShapeString(t.shape), "; the header's sizes need ", want,
          " bytes"));
    }
  }
  if (size != want) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", size - want,
                     " bytes follow the last tensor (lnfb); the "
                     "header's sizes need exactly ",
                     want, " bytes"));
  }
  return reader;
}

absl::StatusOr<Tensor> LlmcReader::Read(int index) const {
  TRELLIS_CHECK(index >= 0 && index < kLlmcNumTensors) << index;
  const LlmcTensor& t = tensors_[index];
  Tensor out = Tensor::Empty(t.shape, header_.dtype());
  if (!ReadFully(fd_, static_cast<char*>(out.raw()), t.nbytes, t.offset)) {
    return absl::DataLossError(absl::StrCat(
        path_, ": tensor ", t.name, ": reading failed: ",
        errno == 0 ? "the file ended early (truncated)" : ErrnoText()));
  }
  return out;
}

absl::Status WriteLlmc(const std::string& path, const LlmcHeader& header,
                       const std::vector<Tensor>& tensors) {
  TRELLIS_RETURN_IF_ERROR(ValidateLlmcHeader(header, path));
  const std::vector<LlmcTensor> layout = LlmcTensors(header);
  TRELLIS_CHECK_EQ(tensors.size(), layout.size());
  for (size_t i = 0; i < layout.size(); ++i) {
    TRELLIS_CHECK(tensors[i].shape() == layout[i].shape &&
                  tensors[i].dtype() == header.dtype() &&
                  tensors[i].device().is_cpu())
        << layout[i].name << " " << tensors[i].DebugString();
  }
  int32_t words[256] = {};
  words[0] = kLlmcMagic;
  words[1] = header.version;
  words[2] = static_cast<int32_t>(header.max_seq_len);
  words[3] = static_cast<int32_t>(header.vocab_size);
  words[4] = static_cast<int32_t>(header.n_layer);
  words[5] = static_cast<int32_t>(header.n_head);
  words[6] = static_cast<int32_t>(header.channels);
  words[7] = static_cast<int32_t>(header.padded_vocab_size);
  return WriteFileAtomically(path, [&](std::FILE* out) {
    bool ok = std::fwrite(words, 4, 256, out) == 256;
    for (const Tensor& t : tensors) {
      ok = ok && std::fwrite(t.raw(), 1, t.nbytes(), out) == t.nbytes();
    }
    return ok;
  });
}

}  // namespace trellis
