// The safetensors format (what Hugging Face's save_pretrained writes):
//
//   bytes [0, 8)      N, the header's length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)  a UTF-8 JSON object: for every tensor
//                       "name": {"dtype": "F32", "shape": [2, 3],
//                                "data_offsets": [begin, end]}
//                     and optionally "__metadata__": {"key": "value", ...};
//                     may end in spaces (writers pad it to 8 bytes)
//   bytes [8 + N, …)  the data: each tensor's bytes, row-major, little-
//                     endian, at [begin, end) counted from 8 + N
//
// SafetensorsReader validates everything before any tensor is read: the
// header length against the file, the JSON, each entry's dtype, shape and
// offsets (inside the data, matching shape × element size, no two tensors
// overlapping). Every failure is an absl::Status naming the file (and the
// tensor); no input makes it read outside the file or its buffers.
// SafetensorsWriter writes a file the same way (to <path>.tmp, then renamed).
//
// Element types: F64, F32, F16, BF16, I64, I32, U32, U16 read into trellis
// tensors; BOOL, U8, I8, I16, U64 and F8_E4M3/F8_E5M2 are recognized
// (ReadBytes) but have no trellis dtype.
//
// Thread safety: a reader may be used from several threads at once (reads
// are pread); a writer from one thread.
#ifndef TRELLIS_FRAMEWORK_SAFETENSORS_H_
#define TRELLIS_FRAMEWORK_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/tensor.h"

namespace trellis {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;                   // As in the file: "F32", "BF16", ...
  std::optional<DType> trellis_dtype;  // When trellis has one.
  Shape shape;
  uint64_t begin = 0, end = 0;  // Byte range within the data section.
  uint64_t nbytes() const { return end - begin; }
};

// The trellis dtype of a safetensors dtype string, and back.
std::optional<DType> SafetensorsToDType(const std::string& dtype);
const char* DTypeToSafetensors(DType dtype);  // nullptr when none.

class SafetensorsReader {
 public:
  static absl::StatusOr<SafetensorsReader> Open(const std::string& path);
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  // In the order of their data.
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }
  const SafetensorsEntry* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  // The tensor as a new CPU tensor of its dtype. NotFound when absent,
  // InvalidArgument for a dtype trellis has no type for.
  absl::StatusOr<Tensor> Read(const std::string& name) const;
  // The entry's raw bytes into `out` (entry.nbytes() bytes).
  absl::Status ReadBytes(const SafetensorsEntry& entry, void* out) const;

 private:
  SafetensorsReader() = default;
  absl::Status ParseHeader(const std::string& header);
  absl::Status AddEntry(const std::string& name, const void* json);

  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // 8 + N.
  uint64_t data_size_ = 0;
  std::vector<SafetensorsEntry> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  void SetMetadata(const std::string& key, const std::string& value) {
    metadata_[key] = value;
  }
  // Queues a CPU tensor (kept by handle until Write). InvalidArgument for a
  // duplicate name or a dtype safetensors cannot hold.
  absl::Status Add(const std::string& name, const Tensor& tensor);
  // Writes every queued tensor, in the order added.
  absl::Status Write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_SAFETENSORS_H_
