// DecoderBlock: what every family's transformer block shares: the tensors
// one microbatch's forward and backward touch, and where each lives (a
// per-microbatch State or a Workspace shared by the chunk's microbatches).
//
// A family's block (GPT-2's Block, Llama's LlamaBlock) states its tensors'
// shapes and places (Slots) for its options, and implements the math
// (Forward, BackwardInput, Recompute, WeightGradients). What does not
// depend on the family is here: where the output gradient and the
// recompute modes put tensors (DyPlace, Places), BackwardWeight, and
// attention's backward from the residual gradient to the qkv gradient
// (AttentionBackwardToQkv). The
// members of Tensors are named after GPT-2's block; another family uses the
// ones it needs under the same roles (see its header): ln1/ln2 the norms'
// outputs, fc the MLP's first projection, gelu its activation.
//
// Under sequence parallelism (SequenceSplit) the block's input and output,
// the residual x2 and the norm statistics hold this rank's N/tp rows; the
// norm outputs (the column-parallel layers' inputs) and the gradients the
// tensor-parallel layers read are whole (N, ·), and the norms' weight
// gradients are this rank's rows' share (NormParameters: summed over tp by
// the trainer).
//
// Thread safety: none; the chunk's one thread drives its blocks.
#ifndef TRELLIS_TRANSFORMER_DECODER_BLOCK_H_
#define TRELLIS_TRANSFORMER_DECODER_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "transformer/chunk_options.h"
#include "transformer/sequence_split.h"

namespace trellis {

class DecoderBlock {
 public:
  // Every tensor a block's forward and backward touch besides its input and
  // output. A State or Workspace defines the ones it holds.
  struct Tensors {
    Tensor ln1, mean1, rstd1;  // (N, C), (N), (N)
    Tensor qkv;                // (N, qkv width on this rank)
    Tensor att;                // (N, Cl)
    Tensor saved;              // attention's saved state
    Tensor x2;                 // (N, C)
    Tensor ln2, mean2, rstd2;  // (N, C), (N), (N)
    Tensor fc, gelu;           // the MLP's projection and activation
    // Gradients BackwardInput makes and the weight gradients read.
    Tensor dy;         // (N, C)
    Tensor dfc;        // like fc
    Tensor dln2, dx2;  // (N, C)
    Tensor dqkv;       // like qkv
    Tensor dln1;       // (N, C)
    Tensor dgelu;      // like gelu: the activation's gradient (Llama)
    // Shared tables (Llama's RoPE cos and sin), filled by NewWorkspace.
    Tensor cos, sin;
  };
  struct State {
    Tensors kept;  // The per-microbatch subset.
    Tensor y;      // (N, C) block output
    // (B, T) int32 or undefined: where each token's document starts
    // (attention.h). Not allocated by the block: the chunk sets a view of
    // its own per microbatch before Forward; BackwardInput and
    // BackwardWeight (recomputation) read it too.
    Tensor doc_start;
  };
  struct Workspace {
    Tensors shared;  // The rest, reused by every microbatch.
    Tensor datt;     // (N, Cl)
    // Sequence parallel only: (N, C) partial sums of a row-parallel layer
    // before their reduce-scatter.
    Tensor partial;
  };

  virtual ~DecoderBlock() = default;

  State NewState(int64_t batch, DType dtype, Device device) const;
  virtual Workspace NewWorkspace(int64_t batch, DType dtype,
                                 Device device) const;
  // Bytes of one State / one Workspace (what New* allocate).
  size_t StateBytes(int64_t batch, DType dtype, Device device) const;
  size_t WorkspaceBytes(int64_t batch, DType dtype, Device device) const;

  // x (N/tp, C) under sequence parallelism, else (N, C); so are y, dy and
  // dx below. x must stay alive until BackwardWeight. Writes state.y.
  virtual void Forward(Communicator& tp, const Tensor& x, State& state,
                       Workspace& work) const = 0;
  // Overwrites dx (N, C) with dL/dx given dy = dL/dy (dy is not kept).
  virtual void BackwardInput(Communicator& tp, const Tensor& x,
                             const Tensor& dy, State& state, Workspace& work,
                             Tensor& dx) const = 0;
  // With deferred weight gradients, recomputes what the recompute mode
  // dropped and forms the parameter gradients from what BackwardInput
  // kept; without, does nothing (BackwardInput formed them).
  void BackwardWeight(Communicator& tp, const Tensor& x, State& state,
                      Workspace& work) const;
  // The block's parameters, in registration order.
  virtual std::vector<Parameter*> parameters() const = 0;
  // The norms' parameters: under sequence parallelism their gradients are
  // partial sums over tp.
  virtual std::vector<Parameter*> NormParameters() const = 0;
  const SequenceSplit& rows() const { return rows_; }
  const BlockOptions& options() const { return options_; }

 protected:
  enum class Place { kState, kWorkspace, kUnused };
  struct Slot {
    Tensor Tensors::*member;
    Shape shape;
    DType dtype;
    Place place;
  };
  // Where the recompute mode and weight-gradient deferral put a family's
  // tensors: `input` for those recomputation starts from (dropped only by
  // full recomputation), `cheap` for the attention output and its saved
  // state and the MLP's activation (kept only without recomputation),
  // `grad` for the gradients BackwardInput makes (kept for deferred weight
  // gradients).
  struct SlotPlaces {
    Place input, cheap, grad;
  };
  DecoderBlock(int64_t seq_len, int64_t d_model, int64_t local_width,
               BlockOptions options, SequenceSplit rows = {})
      : seq_len_(seq_len),
        d_model_(d_model),
        local_width_(local_width),
        options_(options),
        rows_(rows) {}

  // Every member of Tensors the block uses, with its shape and place.
  virtual std::vector<Slot> Slots(int64_t batch, DType dtype,
                                  Device device) const = 0;
  // Refills what the recompute mode dropped; the MLP's activation only
  // when `need_activation` (weight gradients read it, input gradients do
  // not). `partial`: the workspace's scratch for a row-parallel layer;
  // doc_start (B, T) or undefined (attention.h).
  virtual void Recompute(Communicator& tp, const Tensor& x,
                         const Tensor& doc_start, Tensors& a, Tensor& partial,
                         bool need_activation) const = 0;
  // Accumulates every parameter's gradient from the gradients BackwardInput
  // made (the norms' over this rank's rows).
  virtual void WeightGradients(const Tensor& x, const Tensors& a) const = 0;

  // The tensors of one call: the state's where it keeps them, else the
  // workspace's.
  Tensors Use(const State& state, const Workspace& work) const;
  // The places for this block's options.
  SlotPlaces Places() const;
  // Where the output gradient dy lives: kept with deferred weight
  // gradients, gathered into the workspace under sequence parallelism,
  // else read in place.
  Place DyPlace() const;
  // Makes a.dy the whole output gradient `dy` (N, C): the caller's tensor
  // itself, or gathered (and kept) where DyPlace says.
  void TakeOutputGrad(Communicator& tp, const Tensor& dy, Tensors& a) const;
  // Attention's backward from the residual gradient a.dx2 (N, C) through
  // the output projection (weight `out_proj`, (Cl, C) in-out) into
  // `datt` (N, Cl), then through attention into a.dqkv (N, qkv_width),
  // overwritten; a.qkv, a.att and a.saved as the forward left them, with
  // `heads` query and `kv_heads` key/value heads on this rank.
  void AttentionBackwardToQkv(const Tensor& out_proj, const Tensor& doc_start,
                              int64_t qkv_width, int64_t heads,
                              int64_t kv_heads, Tensors& a, Tensor& datt) const;

  int64_t seq_len_;
  int64_t d_model_;
  int64_t local_width_;  // Cl: the attention output's width on this rank
  BlockOptions options_;
  SequenceSplit rows_;  // Where the row tensors live over tp.
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_DECODER_BLOCK_H_
