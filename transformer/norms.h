// The norms families build their blocks and final norms from (BlockNorm,
// block_parts.h): LayerNorm (weight and bias; GPT-2's, epsilon fixed at
// kLayerNormEps by its kernel) and RMSNorm (weight only, a given epsilon;
// Llama's). Each wraps its kernels (framework/kernels/layernorm.h,
// rmsnorm.h) and holds no state besides its parameters.
//
// Thread safety: immutable after construction.
#ifndef TRELLIS_TRANSFORMER_NORMS_H_
#define TRELLIS_TRANSFORMER_NORMS_H_

#include <memory>
#include <vector>

#include "parallel/parameter.h"
#include "transformer/block_parts.h"

namespace trellis {

// REQUIRES: weight and bias (C) materialized.
std::shared_ptr<const BlockNorm> NewLayerNorm(Parameter& weight,
                                              Parameter& bias);
// REQUIRES: weight (C) materialized, eps > 0.
std::shared_ptr<const BlockNorm> NewRmsNorm(Parameter& weight, double eps);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_NORMS_H_
