// One pre-LN GPT-2 transformer block, tensor-parallel:
//
//   x2 = x  + c_proj(attention(c_attn(ln_1(x))))      heads split over tp
//   y  = x2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x2))))     4C split over tp
//
// c_attn and c_fc are column-parallel, both c_proj row-parallel, so the
// block issues two tp all-reduces forward and two backward.
//
// The block holds no activations: each microbatch's live in a State the
// caller owns, so several microbatches can be in flight at once; what one
// call needs only while it runs lives in a Workspace shared by all of them.
// Which tensors are kept per microbatch depends on BlockOptions:
//  - recompute kNone keeps every forward activation; kSelective drops the
//    attention output and its saved state and the GELU output (recomputed
//    from qkv and fc in backward: cheap to redo, large to keep); kFull keeps
//    only the block output y and recomputes the whole forward from the
//    block's input (including its tp all-reduce).
//  - defer_weight_grads (zero-bubble schedules): BackwardInput keeps the
//    gradients BackwardWeight later turns into parameter gradients, and
//    BackwardWeight recomputes what recompute dropped. Without it,
//    BackwardInput also accumulates the parameter gradients, its gradient
//    temporaries live in the Workspace, and BackwardWeight does nothing.
// Every mode computes the same numbers in the same order (when
// BackwardWeight follows BackwardInput's microbatch order, as in every
// schedule): gradients match to the bit, except that cuDNN's attention
// backward (BlockOptions::attention kCudnn on CUDA) may sum in another order
// on each call.
//
// Under --sequence_parallel the norms and residuals run on this rank's N/tp
// rows (see decoder_block.h): all-gathers feed c_attn and c_fc, and
// reduce-scatters replace the c_projs' all-reduces.
//
// Shapes: N = B·T rows, C = d_model, H = heads on this rank, Cl = C/tp.
// Statistics (LayerNorm mean and rstd, attention's saved state) are float32
// for float32 and bfloat16 activations, float64 for float64.
#ifndef TRELLIS_TRANSFORMER_BLOCK_H_
#define TRELLIS_TRANSFORMER_BLOCK_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "parallel/tensor_parallel.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"
#include "transformer/decoder_block.h"
#include "transformer/gpt_parameters.h"

namespace trellis {

class Block : public DecoderBlock {
 public:
  Block(const ModelConfig& config, int64_t layer, TpPlace tp,
        const ParameterSet& params, BlockOptions options = {});

  // x (N, C) must stay alive until BackwardWeight. Writes state.y.
  void Forward(Communicator& tp, const Tensor& x, State& state,
               Workspace& work) const override;
  // Overwrites dx (N, C) with dL/dx given dy = dL/dy (dy is not kept).
  void BackwardInput(Communicator& tp, const Tensor& x, const Tensor& dy,
                     State& state, Workspace& work, Tensor& dx) const override;

  // The block's parameters, in registration order.
  std::vector<Parameter*> parameters() const override;
  std::vector<Parameter*> NormParameters() const override;

 private:
  std::vector<Slot> Slots(int64_t batch, DType dtype,
                          Device device) const override;
  // ln_1 through the GELU: everything but the MLP's projection and y.
  // `partial`: the workspace's scratch for the row-parallel layer;
  // doc_start (B, T) or undefined (attention.h).
  void ForwardActivations(Communicator& tp, const Tensor& x,
                          const Tensor& doc_start, Tensors& a,
                          Tensor& partial) const;
  // The MLP's activation is the GELU output.
  void Recompute(Communicator& tp, const Tensor& x, const Tensor& doc_start,
                 Tensors& a, Tensor& partial,
                 bool need_activation) const override;
  void WeightGradients(const Tensor& x, const Tensors& a) const override;

  int64_t layer_;
  int64_t local_heads_;
  Parameter* ln1_w_;
  Parameter* ln1_b_;
  Parameter* ln2_w_;
  Parameter* ln2_b_;
  // The linear layers' parameters, whose gradients the backward forms with
  // kernels directly: input gradients written, not accumulated, GELU's
  // derivative fused; bias gradients with the LayerNorms' in one call.
  Parameter* c_attn_w_;
  Parameter* attn_proj_w_;
  Parameter* c_fc_w_;
  Parameter* mlp_proj_w_;
  Parameter* c_attn_b_;
  Parameter* attn_proj_b_;
  Parameter* c_fc_b_;
  Parameter* mlp_proj_b_;
  std::vector<Parameter*> params_;
  ColumnParallelLinear c_attn_;
  RowParallelLinear attn_proj_;
  ColumnParallelLinear c_fc_;
  RowParallelLinear mlp_proj_;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_BLOCK_H_
