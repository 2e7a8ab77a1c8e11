// GPT-2's Hugging Face mapping table (hf_mapping.h): every tensor keeps
// its name and layout (HF's GPT-2 stores Conv1D weights (in, out), as
// trellis does), except the embeddings: wte and wpe are HF's wte.weight
// and wpe.weight. A file may prefix every name with "transformer."
// (GPT2LMHeadModel), which the converter handles for the whole file.
#ifndef TRELLIS_TRANSFORMER_GPT2_GPT2_HF_H_
#define TRELLIS_TRANSFORMER_GPT2_GPT2_HF_H_

#include <vector>

#include "transformer/config.h"
#include "transformer/hf_mapping.h"

namespace trellis {

// In model order (DeclareGptParameters' for the whole model).
std::vector<HfTensorMapping> Gpt2HfTensors(const ModelConfig& config);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT2_GPT2_HF_H_
