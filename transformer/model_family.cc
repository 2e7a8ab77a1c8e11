#include "transformer/model_family.h"

#include "transformer/gpt_family.h"
#include "transformer/llama_family.h"

namespace trellis {

const ModelFamily& FamilyOf(const ModelConfig& config) {
  switch (config.family) {
    case ModelFamilyKind::kGpt2:
      return Gpt2Family();
    case ModelFamilyKind::kLlama:
      return LlamaFamily();
  }
  TRELLIS_CHECK(false) << "unknown model family "
                       << static_cast<int>(config.family);
  return Gpt2Family();
}

std::vector<std::pair<std::string, Shape>> ModelTensorShapes(
    const ModelConfig& config) {
  ParameterSet params;
  FamilyOf(config).DeclareParameters(
      config, ChunkPlan{0, config.n_layer, true, true}, TpPlace{}, /*seed=*/0,
      Device::Cpu(), DType::kF32, params);
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const Parameter* p : params.all()) {
    shapes.emplace_back(p->name, p->spec.logical_shape);
  }
  return shapes;
}

void AddModelParameters(const ModelConfig& config, const ChunkPlan& plan,
                        TpPlace tp, uint64_t seed, Device device, DType dtype,
                        ParameterSet& params, ParameterFill fill) {
  FamilyOf(config).DeclareParameters(config, plan, tp, seed, device, dtype,
                                     params);
  params.Materialize(/*grads=*/true, fill);
}

}  // namespace trellis
