// One pre-LN GPT-2 transformer block, tensor-parallel:
//
//   x2 = x  + c_proj(attention(c_attn(ln_1(x))))      heads split over tp
//   y  = x2 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x2))))     4C split over tp
//
// c_attn and c_fc are column-parallel, both c_proj row-parallel, so the
// block issues two tp all-reduces forward and two backward.
//
// The block holds no activations: each microbatch's live in a State the
// caller owns, so several microbatches can be in flight at once. Backward is
// split: BackwardInput produces dx and keeps in State the gradients that
// BackwardWeight later turns into parameter gradients.
//
// Shapes: N = B·T rows, C = d_model, H = heads on this rank, Cl = C/tp.
#ifndef TRELLIS_TRANSFORMER_BLOCK_H_
#define TRELLIS_TRANSFORMER_BLOCK_H_

#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "parallel/tensor_parallel.h"
#include "transformer/config.h"
#include "transformer/gpt_parameters.h"

namespace trellis {

class Block {
 public:
  struct State {
    Tensor ln1, mean1, rstd1;  // (N, C), (N), (N)
    Tensor qkv;                // (N, 3·Cl)
    Tensor att;                // (N, Cl)
    Tensor saved;              // attention's saved state
    Tensor x2;                 // (N, C)
    Tensor ln2, mean2, rstd2;  // (N, C), (N), (N)
    Tensor fc, gelu;           // (N, 4·Cl)
    Tensor y;                  // (N, C) block output
    // Kept from BackwardInput for BackwardWeight.
    Tensor dy;         // (N, C)
    Tensor dfc;        // (N, 4·Cl)
    Tensor dln2, dx2;  // (N, C)
    Tensor dqkv;       // (N, 3·Cl)
    Tensor dln1;       // (N, C)
  };
  // Scratch shared by all microbatches (used inside one call only).
  struct Workspace {
    Tensor dgelu;  // (N, 4·Cl)
    Tensor datt;   // (N, Cl)
  };

  Block(const GptConfig& config, int64_t layer, TpPlace tp,
        const ParameterSet& params);

  State NewState(int64_t batch, DType dtype, Device device) const;
  Workspace NewWorkspace(int64_t batch, DType dtype, Device device) const;

  // x (N, C) must stay alive until BackwardWeight. Writes state.y.
  void Forward(Communicator& tp, const Tensor& x, State& state) const;
  // Overwrites dx (N, C) with dL/dx given dy = dL/dy.
  void BackwardInput(Communicator& tp, const Tensor& x, const Tensor& dy,
                     State& state, Workspace& work, Tensor& dx) const;
  void BackwardWeight(const Tensor& x, const State& state) const;

  // The block's parameters, in registration order.
  std::vector<Parameter*> parameters() const;

 private:
  int64_t layer_;
  int64_t seq_len_;
  int64_t d_model_;
  int64_t local_heads_;
  int64_t local_width_;  // Cl = local_heads · head_dim
  Parameter* ln1_w_;
  Parameter* ln1_b_;
  Parameter* ln2_w_;
  Parameter* ln2_b_;
  std::vector<Parameter*> params_;
  ColumnParallelLinear c_attn_;
  RowParallelLinear attn_proj_;
  ColumnParallelLinear c_fc_;
  RowParallelLinear mlp_proj_;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_BLOCK_H_
