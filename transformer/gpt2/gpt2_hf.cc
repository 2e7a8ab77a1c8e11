#include "transformer/gpt2/gpt2_hf.h"

#include "transformer/gpt2/gpt2_parameters.h"

namespace trellis {

std::vector<HfTensorMapping> Gpt2HfTensors(const ModelConfig& config) {
  ParameterSet params;
  DeclareGptParameters(config, ChunkPlan{0, config.n_layer, true, true},
                       TpPlace{}, /*seed=*/0, Device::Cpu(), DType::kF32,
                       params);
  std::vector<HfTensorMapping> table;
  for (const Parameter* p : params.all()) {
    const bool embedding = p->name == "wte" || p->name == "wpe";
    table.push_back(HfSame(p->name, p->spec.logical_shape,
                           embedding ? p->name + ".weight" : p->name));
  }
  return table;
}

}  // namespace trellis
