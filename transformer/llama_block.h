// One Llama transformer block, tensor-parallel:
//
//   x2 = x  + o_proj(attention(rope(qkv_proj(rmsnorm_1(x)))))
//   y  = x2 + down_proj(swiglu(gate_up_proj(rmsnorm_2(x2))))
//
// Grouped-query attention: H query heads share Hkv key/value heads; a tp
// rank holds H/tp and Hkv/tp of them (qkv_proj column-parallel), the MLP's
// F columns split over tp (gate_up_proj column-parallel), o_proj and
// down_proj row-parallel: two tp all-reduces forward, two backward. No
// biases, no learned positions: RoPE rotates q and k by their position in
// the window.
//
// States, workspaces, recomputation and deferred weight gradients work as
// GPT-2's Block (block.h) does, with DecoderBlock's tensors in these roles:
// ln1/ln2 the RMSNorms' outputs (rstd1/rstd2 their statistics; no means),
// qkv (N, (H + 2·Hkv)·D / tp) after RoPE, fc the gate_up projection
// (N, 2·F/tp, [gate | up]), gelu the SwiGLU output (N, F/tp), dgelu its
// gradient, cos and sin the RoPE tables (T, D/2) in the workspace.
// kSelective recomputes the attention and the SwiGLU output. With document
// masking (State::doc_start) attention stops at document boundaries; RoPE
// positions stay the positions in the window.
// Every mode computes the same numbers in the same order on the CPU.
// --sequence_parallel splits the RMSNorms and residuals over tp as GPT-2's
// Block does (decoder_block.h).
#ifndef TRELLIS_TRANSFORMER_LLAMA_BLOCK_H_
#define TRELLIS_TRANSFORMER_LLAMA_BLOCK_H_

#include <cstdint>
#include <vector>

#include "framework/kernels/rope.h"
#include "parallel/parameter.h"
#include "parallel/tensor_parallel.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"
#include "transformer/decoder_block.h"

namespace trellis {

class LlamaBlock : public DecoderBlock {
 public:
  // REQUIRES: `params` holds the layer's parameters (DeclareLlamaParameters)
  // and tp divides n_head and the MLP width, and divides n_kv_heads or is a
  // multiple of it (the heads replicated).
  LlamaBlock(const ModelConfig& config, int64_t layer, TpPlace tp,
             const ParameterSet& params, BlockOptions options = {});

  // Also fills the RoPE tables.
  Workspace NewWorkspace(int64_t batch, DType dtype,
                         Device device) const override;
  void Forward(Communicator& tp, const Tensor& x, State& state,
               Workspace& work) const override;
  void BackwardInput(Communicator& tp, const Tensor& x, const Tensor& dy,
                     State& state, Workspace& work, Tensor& dx) const override;
  std::vector<Parameter*> parameters() const override { return params_; }
  std::vector<Parameter*> NormParameters() const override {
    return {norm1_, norm2_};
  }

 private:
  std::vector<Slot> Slots(int64_t batch, DType dtype,
                          Device device) const override;
  // rmsnorm_1 through the SwiGLU: everything but down_proj and y.
  // `partial`: the workspace's scratch for the row-parallel layer;
  // doc_start (B, T) or undefined (attention.h).
  void ForwardActivations(Communicator& tp, const Tensor& x,
                          const Tensor& doc_start, Tensors& a,
                          Tensor& partial) const;
  // The MLP's activation is the SwiGLU output.
  void Recompute(Communicator& tp, const Tensor& x, const Tensor& doc_start,
                 Tensors& a, Tensor& partial,
                 bool need_activation) const override;
  // Attention on the rotated qkv; doc_start (B, T) or undefined
  // (attention.h).
  void Attention(Tensors& a, int64_t batch, const Tensor& doc_start) const;
  void WeightGradients(const Tensor& x, const Tensors& a) const override;

  int64_t local_heads_;
  int64_t local_kv_heads_;
  int64_t head_dim_;
  int64_t qkv_width_;  // (H / tp + 2 · local Hkv)·D
  int64_t ffn_width_;  // F / tp
  double eps_;
  double rope_theta_;
  RopeScaling rope_scaling_;
  Parameter* norm1_;
  Parameter* norm2_;
  Parameter* qkv_w_;
  Parameter* o_w_;
  Parameter* gate_up_w_;
  Parameter* down_w_;
  std::vector<Parameter*> params_;
  ColumnParallelLinear qkv_proj_;
  RowParallelLinear o_proj_;
  ColumnParallelLinear gate_up_proj_;
  RowParallelLinear down_proj_;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_LLAMA_BLOCK_H_
