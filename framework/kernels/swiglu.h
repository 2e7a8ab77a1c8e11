// SwiGLU, the gated activation of Llama's MLP: out = silu(gate) · up with
// silu(g) = g · sigmoid(g).
//
// The gate and up projections arrive as one tensor gate_up (N, 2F) whose
// column blocks are [gate | up]: columns [0, F) are the gate, [F, 2F) the
// up projection of the same row. A column-parallel weight holding both
// halves of its tensor-parallel shard produces exactly this. out, dout
// (N, F); N may be spread over leading dimensions (B, T, ...).
//
// SwiGluBackward accumulates into dgate_up; SwiGluBackwardWrite overwrites
// it (for a buffer that holds nothing yet, as the matmul backward after it
// usually wants). Thread safety: as every kernel.
#ifndef TRELLIS_FRAMEWORK_KERNELS_SWIGLU_H_
#define TRELLIS_FRAMEWORK_KERNELS_SWIGLU_H_

#include "framework/tensor.h"

namespace trellis {

// out (N, F) = silu(gate_up[:, :F]) · gate_up[:, F:].
void SwiGluForward(const Tensor& gate_up, Tensor& out);
// dgate_up (N, 2F) += [dout · up · silu'(gate) | dout · silu(gate)],
// silu'(g) = sigmoid(g) · (1 + g · (1 - sigmoid(g))).
void SwiGluBackward(const Tensor& gate_up, const Tensor& dout,
                    Tensor& dgate_up);
// As SwiGluBackward, but dgate_up = the gradient, OVERWRITING it. dgate_up
// may alias neither gate_up nor dout.
void SwiGluBackwardWrite(const Tensor& gate_up, const Tensor& dout,
                         Tensor& dgate_up);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_SWIGLU_H_
