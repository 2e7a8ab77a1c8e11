// GPT-2's MLP as a block hook (BlockMlp, block_parts.h):
//
//   out = c_proj(gelu(c_fc(ln)))     c_fc (C, 4C) column-parallel with its
//                                    bias, GELU in its GEMM's epilogue;
//                                    c_proj (4C, C) row-parallel
//
// fc is c_fc's output and gelu the activation, (N, 4C/tp) each. Backward
// fuses GELU's derivative into the GEMM through c_proj.
//
// Thread safety: immutable after construction.
#ifndef TRELLIS_TRANSFORMER_GPT2_GELU_MLP_H_
#define TRELLIS_TRANSFORMER_GPT2_GELU_MLP_H_

#include <memory>

#include "parallel/parameter.h"
#include "transformer/block_parts.h"

namespace trellis {

// `width`: c_fc's columns on this rank (4C/tp). REQUIRES: the parameters
// split as the layers state (tensor_parallel.h).
std::shared_ptr<const BlockMlp> NewGeluMlp(int64_t width, Parameter& fc_weight,
                                           Parameter& fc_bias,
                                           Parameter& proj_weight,
                                           Parameter& proj_bias);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT2_GELU_MLP_H_
