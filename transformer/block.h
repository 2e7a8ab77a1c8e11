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
#include "transformer/gpt_parameters.h"

namespace trellis {

class Block {
 public:
  // Every tensor a block's forward and backward touch besides its input and
  // output. A State or Workspace defines the ones it holds.
  struct Tensors {
    Tensor ln1, mean1, rstd1;  // (N, C), (N), (N)
    Tensor qkv;                // (N, 3·Cl)
    Tensor att;                // (N, Cl)
    Tensor saved;              // attention's saved state
    Tensor x2;                 // (N, C)
    Tensor ln2, mean2, rstd2;  // (N, C), (N), (N)
    Tensor fc, gelu;           // (N, 4·Cl)
    // Gradients BackwardInput makes and the weight gradients read.
    Tensor dy;         // (N, C)
    Tensor dfc;        // (N, 4·Cl)
    Tensor dln2, dx2;  // (N, C)
    Tensor dqkv;       // (N, 3·Cl)
    Tensor dln1;       // (N, C)
  };
  struct State {
    Tensors kept;  // The per-microbatch subset.
    Tensor y;      // (N, C) block output
    // (B, T) int32 or undefined: where each token's document starts
    // (attention.h). Not allocated by the block: the chunk sets a view of
    // its own per microbatch before Forward; BackwardInput reads it too.
    Tensor doc_start;
  };
  struct Workspace {
    Tensors shared;  // The rest, reused by every microbatch.
    Tensor datt;     // (N, Cl)
  };

  Block(const ModelConfig& config, int64_t layer, TpPlace tp,
        const ParameterSet& params, BlockOptions options = {});

  State NewState(int64_t batch, DType dtype, Device device) const;
  Workspace NewWorkspace(int64_t batch, DType dtype, Device device) const;
  // Bytes of one State / one Workspace (what New* allocate).
  size_t StateBytes(int64_t batch, DType dtype, Device device) const;
  size_t WorkspaceBytes(int64_t batch, DType dtype, Device device) const;

  // x (N, C) must stay alive until BackwardWeight. Writes state.y.
  void Forward(Communicator& tp, const Tensor& x, State& state,
               Workspace& work) const;
  // Overwrites dx (N, C) with dL/dx given dy = dL/dy (dy is not kept).
  void BackwardInput(Communicator& tp, const Tensor& x, const Tensor& dy,
                     State& state, Workspace& work, Tensor& dx) const;
  void BackwardWeight(Communicator& tp, const Tensor& x, State& state,
                      Workspace& work) const;

  // The block's parameters, in registration order.
  std::vector<Parameter*> parameters() const;
  const BlockOptions& options() const { return options_; }

 private:
  struct Slot;
  std::vector<Slot> Slots(int64_t batch, DType dtype, Device device) const;
  // The workspace's scratch gradient, beside the slots.
  Shape DattShape(int64_t batch) const;
  // The tensors of one call: the state's where it keeps them, else the
  // workspace's.
  Tensors Use(const State& state, const Workspace& work) const;
  // ln_1 through the GELU: everything but the MLP's projection and y.
  void ForwardActivations(Communicator& tp, const Tensor& x,
                          const Tensor& doc_start, Tensors& a) const;
  // Refills what the recompute mode dropped; the GELU output only when
  // `need_gelu` (weight gradients read it, input gradients do not).
  void Recompute(Communicator& tp, const Tensor& x, const Tensor& doc_start,
                 Tensors& a, bool need_gelu) const;
  void WeightGradients(const Tensor& x, const Tensors& a) const;

  BlockOptions options_;
  // For each Tensors member, whether a State keeps it (else the Workspace
  // holds it or it is unused): fixed by the options, read by Use().
  std::vector<std::pair<Tensor Tensors::*, bool>> kept_;
  int64_t layer_;
  int64_t seq_len_;
  int64_t d_model_;
  int64_t local_heads_;
  int64_t local_width_;  // Cl = local_heads · head_dim
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
