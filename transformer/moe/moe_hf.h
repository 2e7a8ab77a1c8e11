// The mixture-of-experts family's Hugging Face mapping table
// (hf_mapping.h), in Qwen3-MoE's names: Llama's rows (llama_hf.h) with, in
// each MoE layer,
//   mlp.gate.weight (C, E)                 = mlp.gate.weightᵀ (HF (E, C))
//   mlp.experts.{j}.gate_up_proj.weight    = [gate_proj; up_proj]ᵀ
//   mlp.experts.{j}.down_proj.weight       = down_projᵀ
#ifndef TRELLIS_TRANSFORMER_MOE_MOE_HF_H_
#define TRELLIS_TRANSFORMER_MOE_MOE_HF_H_

#include <vector>

#include "transformer/config.h"
#include "transformer/hf_mapping.h"

namespace trellis {

// In DeclareMoeParameters' order for the whole model.
std::vector<HfTensorMapping> MoeHfTensors(const ModelConfig& config);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_MOE_MOE_HF_H_
