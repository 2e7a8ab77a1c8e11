// Fuzz target of trellis-convert's reading of a Hugging Face config.json:
// HfModelFamily, then ReadHfModelConfig (each architecture's reader: GPT-2,
// Llama, Qwen3, Mixtral, Qwen3-MoE), and, when the
// config is accepted, the conversion to trellis that trellis-convert runs
// (Convert), of the directory holding it and a small model.safetensors (which
// lacks most of the model's tensors: the conversion must fail cleanly, whatever
// the sizes).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "framework/safetensors.h"
#include "framework/tensor.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/convert/convert.h"
#include "tools/convert/hf_files.h"
#include "transformer/config.h"

namespace trellis {
namespace {

// A model directory whose model.safetensors holds a 4×2 embedding and one
// tensor of a second layer for each family, so that configs of up to two
// layers get past trellis-convert's layer count to the reading of tensors.
const std::string& ModelDir() {
  static const std::string* const dir = [] {
    auto* path = new std::string(fuzz::ScratchDir() + "/model");
    std::filesystem::create_directories(*path);
    SafetensorsWriter writer;
    for (const char* name : {"wte.weight", "h.1.ln_1.weight",
                             "model.layers.1.input_layernorm.weight"}) {
      const Shape shape = name[0] == 'w' ? Shape{4, 2} : Shape{2};
      fuzz::Expect(writer.Add(name, Tensor::Zeros(shape, DType::kF32)).ok(),
                   "cannot add a tensor");
    }
    fuzz::Expect(writer.Write(*path + "/" + kHfSingleFile).ok(),
                 "cannot write model.safetensors");
    return path;
  }();
  return *dir;
}

}  // namespace
}  // namespace trellis

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = trellis::ModelDir();
  const std::string path = dir + "/config.json";
  trellis::fuzz::WriteFile(path, trellis::fuzz::AsText(data, size));
  const absl::StatusOr<trellis::ModelFamilyKind> family =
      trellis::HfModelFamily(path);
  trellis::fuzz::Note("HfModelFamily", family.status());
  if (!family.ok()) return 0;
  const absl::StatusOr<trellis::ModelConfig> config =
      trellis::ReadHfModelConfig(path);
  trellis::fuzz::Note("ReadHfModelConfig", config.status());
  if (!config.ok()) return 0;
  trellis::fuzz::Expect(config->Validate().ok(),
                        "an accepted config.json does not validate");
  trellis::ConvertOptions options;
  options.input = dir;
  options.output = trellis::fuzz::ScratchDir() + "/converted";
  options.from = "hf";
  options.to = "trellis";
  const absl::StatusOr<trellis::ConvertSummary> converted =
      trellis::Convert(options);
  trellis::fuzz::Note("Convert", converted.status());
  // vocab_size 4, d_model 2 and nothing else could match the one tensor;
  // no accepted GPT-2 or Llama has so few.
  trellis::fuzz::Expect(!converted.ok(), "a model converted from one tensor");
  return 0;
}
