// The GPT-2 parameters of one model chunk on one rank: their logical names
// and shapes (Hugging Face GPT-2 state dict), how tensor parallelism cuts
// them, and their initialization.
//
// Initialization is a function of (seed, logical name, logical element index)
// only, so every layout starts from the same weights:
//   wte, wpe, c_attn.weight, c_fc.weight   N(0, 0.02)
//   attn.c_proj.weight, mlp.c_proj.weight  N(0, 0.02 / sqrt(2 · n_layer))
//   LayerNorm weights 1, every bias 0.
#ifndef TRELLIS_TRANSFORMER_GPT2_GPT2_PARAMETERS_H_
#define TRELLIS_TRANSFORMER_GPT2_GPT2_PARAMETERS_H_

#include <cstdint>
#include <string>

#include "parallel/parameter.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"

namespace trellis {

// Declares the chunk's parameters in `params` (reusing "wte" when this rank
// already holds it, so a rank with both ends of the model ties one tensor);
// ParameterSet::Materialize allocates and initializes them.
void DeclareGptParameters(const ModelConfig& config, const ChunkPlan& plan,
                          TpPlace tp, uint64_t seed, Device device, DType dtype,
                          ParameterSet& params);

// "h.<layer>.<suffix>".
std::string LayerParameterName(int64_t layer, const char* suffix);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT2_GPT2_PARAMETERS_H_
