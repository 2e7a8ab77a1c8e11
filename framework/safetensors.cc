#include "framework/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "framework/atomic_file.h"

namespace trellis {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; so is every host trellis "
              "supports");

// Headers beyond this are refused before they are read.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr size_t kMaxDims = 16;

struct DTypeInfo {
  const char* name;
  size_t size;
  std::optional<DType> dtype;
};

constexpr DTypeInfo kDTypes[] = {
    {"F64", 8, DType::kF64},      {"F32", 4, DType::kF32},
    {"F16", 2, DType::kF16},      {"BF16", 2, DType::kBF16},
    {"I64", 8, DType::kI64},      {"I32", 4, DType::kI32},
    {"U32", 4, DType::kU32},      {"U16", 2, DType::kU16},
    {"I16", 2, std::nullopt},     {"U64", 8, std::nullopt},
    {"I8", 1, std::nullopt},      {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt},    {"F8_E4M3", 1, std::nullopt},
    {"F8_E5M2", 1, std::nullopt},
};

const DTypeInfo* FindDType(const std::string& name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

std::string ErrnoText() { return std::strerror(errno); }

// pread of exactly `bytes`; false with errno, or errno 0 at end of file.
bool ReadFully(int fd, char* out, uint64_t bytes, uint64_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, out, bytes, static_cast<off_t>(offset));
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

// A non-negative JSON integer.
bool AsCount(const nlohmann::json& j, uint64_t* value) {
  if (j.is_number_unsigned()) {
    *value = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *value = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

// A JSON value for a message, cut short.
std::string Brief(const nlohmann::json& j) {
  std::string text =
      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 60) + "...";
  return text;
}

}  // namespace

std::optional<DType> SafetensorsToDType(const std::string& dtype) {
  const DTypeInfo* info = FindDType(dtype);
  return info == nullptr ? std::nullopt : info->dtype;
}

const char* DTypeToSafetensors(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return nullptr;
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      data_size_(other.data_size_),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsReader& SafetensorsReader::operator=(
    SafetensorsReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    data_size_ = other.data_size_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<SafetensorsReader> SafetensorsReader::Open(
    const std::string& path) {
  SafetensorsReader reader;
  reader.path_ = path;
  reader.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info;
  if (reader.fd_ < 0 || ::fstat(reader.fd_, &info) != 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", ErrnoText()));
  }
  if (S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is a directory, not a safetensors file"));
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  unsigned char length_bytes[8];
  if (size < 8 ||
      !ReadFully(reader.fd_, reinterpret_cast<char*>(length_bytes), 8, 0)) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated: ", size,
        " bytes, too short for the 8-byte header length of a safetensors "
        "file"));
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i)
    header_bytes = (header_bytes << 8) | length_bytes[i];
  if (header_bytes > size - 8) {
    return absl::DataLossError(absl::StrCat(
        path, ": the header claims ", header_bytes, " bytes but only ",
        size - 8, " follow; the file is truncated or not safetensors"));
  }
  if (header_bytes > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a header of ", header_bytes,
                     " bytes is beyond the 100 MiB trellis accepts"));
  }
  std::string header(header_bytes, '\0');
  if (!ReadFully(reader.fd_, header.data(), header_bytes, 8)) {
    return absl::DataLossError(
        absl::StrCat(path, ": reading the header failed: ", ErrnoText()));
  }
  reader.data_start_ = 8 + header_bytes;
  reader.data_size_ = size - reader.data_start_;
  TRELLIS_RETURN_IF_ERROR(reader.ParseHeader(header));
  return reader;
}

absl::Status SafetensorsReader::ParseHeader(const std::string& header) {
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat(
        path_, ": the header is not a JSON object; not a safetensors file"));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "__metadata__") {
      TRELLIS_RETURN_IF_ERROR(AddEntry(it.key(), &it.value()));
      continue;
    }
    if (!it.value().is_object()) {
      return absl::DataLossError(
          absl::StrCat(path_, ": __metadata__ is not a JSON object"));
    }
    for (auto m = it.value().begin(); m != it.value().end(); ++m) {
      if (!m.value().is_string()) {
        return absl::DataLossError(absl::StrCat(
            path_, ": __metadata__ value of '", m.key(), "' is not a string"));
      }
      metadata_[m.key()] = m.value().get<std::string>();
    }
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (i > 0 && tensors_[i].begin < tensors_[i - 1].end) {
      return absl::DataLossError(absl::StrCat(
          path_, ": tensors ", tensors_[i - 1].name, " and ", tensors_[i].name,
          " overlap in the data section; the header is corrupt"));
    }
    index_[tensors_[i].name] = i;
  }
  return absl::OkStatus();
}

absl::Status SafetensorsReader::AddEntry(const std::string& name,
                                         const void* json) {
  const nlohmann::json& e = *static_cast<const nlohmann::json*>(json);
  auto corrupt = [&](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat(path_, ": tensor ", name, ": ", what));
  };
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") ||
      !e.contains("data_offsets")) {
    return corrupt("needs dtype, shape and data_offsets");
  }
  SafetensorsEntry entry;
  entry.name = name;
  const nlohmann::json& dtype = e.at("dtype");
  const DTypeInfo* info =
      dtype.is_string() ? FindDType(dtype.get<std::string>()) : nullptr;
  if (info == nullptr) return corrupt("unknown dtype " + Brief(dtype));
  entry.dtype = info->name;
  entry.trellis_dtype = info->dtype;
  const nlohmann::json& shape = e.at("shape");
  if (!shape.is_array() || shape.size() > kMaxDims) {
    return corrupt("shape is not a list of at most 16 sizes");
  }
  bool empty = false;
  for (const nlohmann::json& d : shape) {
    uint64_t n = 0;
    if (!AsCount(d, &n) || n > (uint64_t{1} << 62)) {
      return corrupt("shape " + Brief(shape) + " has a bad size");
    }
    empty = empty || n == 0;
    entry.shape.push_back(static_cast<int64_t>(n));
  }
  uint64_t bytes = empty ? 0 : info->size;
  for (size_t i = 0; i < entry.shape.size() && !empty; ++i) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(entry.shape[i]),
                               &bytes)) {
      return corrupt("shape " + Brief(shape) + " is impossibly large");
    }
  }
  const nlohmann::json& offsets = e.at("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2 ||
      !AsCount(offsets[0], &entry.begin) || !AsCount(offsets[1], &entry.end) ||
      entry.begin > entry.end) {
    return corrupt("data_offsets " + Brief(offsets) + " is not [begin, end]");
  }
  if (entry.end > data_size_) {
    return corrupt(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end,
                                ") reach past the file's ", data_size_,
                                " data bytes; the file is truncated"));
  }
  if (entry.end - entry.begin != bytes) {
    return corrupt(absl::StrCat("data_offsets hold ", entry.end - entry.begin,
                                " bytes but ", entry.dtype, " shape ",
                                Brief(shape), " needs ", bytes));
  }
  tensors_.push_back(std::move(entry));
  return absl::OkStatus();
}

const SafetensorsEntry* SafetensorsReader::Find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<Tensor> SafetensorsReader::Read(const std::string& name) const {
  const SafetensorsEntry* entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, " has no tensor ", name));
  }
  if (!entry->trellis_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor ", name, " is ", entry->dtype,
        ", which trellis does not read; weights must be F32, F16 or BF16"));
  }
  Tensor t = Tensor::Empty(entry->shape, *entry->trellis_dtype);
  TRELLIS_RETURN_IF_ERROR(ReadBytes(*entry, t.raw()));
  return t;
}

absl::Status SafetensorsReader::ReadBytes(const SafetensorsEntry& entry,
                                          void* out) const {
  if (!ReadFully(fd_, static_cast<char*>(out), entry.nbytes(),
                 data_start_ + entry.begin)) {
    return absl::DataLossError(absl::StrCat(
        path_, ": tensor ", entry.name, ": reading its data failed: ",
        errno == 0 ? "the file ended early (truncated)" : ErrnoText()));
  }
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Add(const std::string& name,
                                    const Tensor& tensor) {
  if (name.empty() || name == "__metadata__") {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' cannot name a tensor"));
  }
  for (const auto& [existing, t] : tensors_) {
    if (existing == name) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, " added twice"));
    }
  }
  if (DTypeToSafetensors(tensor.dtype()) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, ": safetensors has no ", DTypeName(tensor.dtype())));
  }
  TRELLIS_CHECK(tensor.device().is_cpu()) << name;
  tensors_.emplace_back(name, tensor);
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    header[name] = {{"dtype", DTypeToSafetensors(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text =
      header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = (text.size() >> (8 * i)) & 0xff;
  return WriteFileAtomically(path, [&](std::FILE* out) {
    bool ok = std::fwrite(length, 1, 8, out) == 8 &&
              std::fwrite(text.data(), 1, text.size(), out) == text.size();
    for (const auto& [name, t] : tensors_) {
      ok = ok && std::fwrite(t.raw(), 1, t.nbytes(), out) == t.nbytes();
    }
    return ok;
  });
}

}  // namespace trellis
