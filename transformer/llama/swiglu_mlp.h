// Llama's MLP as a block hook (BlockMlp, block_parts.h):
//
//   out = down_proj(silu(gate) · up),  [gate | up] = gate_up_proj(ln)
//
// gate_up_proj (C, 2F) column-parallel, its columns two blocks [gate | up]
// split each; down_proj (F, C) row-parallel; no biases. fc is gate_up's
// output (N, 2F/tp), gelu the SwiGLU output (N, F/tp) and dgelu its
// gradient (always in the workspace).
//
// Thread safety: immutable after construction.
#ifndef TRELLIS_TRANSFORMER_LLAMA_SWIGLU_MLP_H_
#define TRELLIS_TRANSFORMER_LLAMA_SWIGLU_MLP_H_

#include <cstdint>
#include <memory>

#include "parallel/parameter.h"
#include "transformer/block_parts.h"

namespace trellis {

// `width`: F/tp, the activation's columns on this rank. REQUIRES:
// gate_up split in two groups, the layers' splits as they state.
std::shared_ptr<const BlockMlp> NewSwiGluMlp(int64_t width,
                                             Parameter& gate_up_weight,
                                             Parameter& down_weight);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_SWIGLU_MLP_H_
