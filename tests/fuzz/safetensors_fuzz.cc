// Fuzz target of the safetensors readers: SafetensorsReader (one file) and
// HfSafetensors (what trellis-convert opens: a model.safetensors, or shards
// and their model.safetensors.index.json).
//
// An input that starts with `{"` is an index: it is written as
// model.safetensors.index.json beside two valid shards written here, and
// the directory is opened. Any other input is a model.safetensors file.
// Every tensor a reader accepts is then read in full.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "framework/safetensors.h"
#include "framework/tensor.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/convert/hf_files.h"

namespace trellis {
namespace {

// The shards an index may name: model-00001-of-00002.safetensors holds
// "a" (F32 2×3) and "b" (BF16 4), model-00002-of-00002.safetensors holds
// "c" (F16 1×1).
const std::string& IndexDir() {
  static const std::string* const dir = [] {
    auto* path = new std::string(fuzz::ScratchDir() + "/sharded");
    std::filesystem::create_directories(*path);
    SafetensorsWriter first;
    first.SetMetadata("format", "pt");
    fuzz::Expect(
        first.Add("a", Tensor::Zeros({2, 3}, DType::kF32)).ok() &&
            first.Add("b", Tensor::Zeros({4}, DType::kBF16)).ok() &&
            first.Write(*path + "/model-00001-of-00002.safetensors").ok(),
        "cannot write the first shard");
    SafetensorsWriter second;
    fuzz::Expect(
        second.Add("c", Tensor::Zeros({1, 1}, DType::kF16)).ok() &&
            second.Write(*path + "/model-00002-of-00002.safetensors").ok(),
        "cannot write the second shard");
    return path;
  }();
  return *dir;
}

void ReadEveryTensor(const HfSafetensors& files) {
  for (const std::string& name : files.names()) {
    const SafetensorsEntry* entry = files.Find(name);
    fuzz::Expect(entry != nullptr, "a listed tensor is not found");
    (void)files.Read(name, entry->shape);
  }
}

void ReadEveryTensor(const SafetensorsReader& reader) {
  for (const SafetensorsEntry& entry : reader.tensors()) {
    std::string bytes(entry.nbytes(), '\0');
    (void)reader.ReadBytes(entry, bytes.data());
    if (entry.trellis_dtype.has_value()) {
      const absl::StatusOr<Tensor> tensor = reader.Read(entry.name);
      fuzz::Expect(!tensor.ok() || tensor->nbytes() == entry.nbytes(),
                   "a tensor read is not the size of its entry");
    }
  }
}

}  // namespace
}  // namespace trellis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using trellis::fuzz::WriteFile;
  const std::string_view input = trellis::fuzz::AsText(data, size);
  if (input.starts_with("{\"")) {
    const std::string& dir = trellis::IndexDir();
    WriteFile(dir + "/" + trellis::kHfIndexFile, input);
    const absl::StatusOr<trellis::HfSafetensors> files =
        trellis::HfSafetensors::Open(dir);
    trellis::fuzz::Note("HfSafetensors::Open (index)", files.status());
    if (files.ok()) trellis::ReadEveryTensor(*files);
    return 0;
  }
  const std::string path =
      trellis::fuzz::ScratchDir() + "/" + trellis::kHfSingleFile;
  WriteFile(path, input);
  const absl::StatusOr<trellis::SafetensorsReader> reader =
      trellis::SafetensorsReader::Open(path);
  trellis::fuzz::Note("SafetensorsReader::Open", reader.status());
  if (reader.ok()) trellis::ReadEveryTensor(*reader);
  const absl::StatusOr<trellis::HfSafetensors> files =
      trellis::HfSafetensors::Open(path);
  if (files.ok()) trellis::ReadEveryTensor(*files);
  return 0;
}
