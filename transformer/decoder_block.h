// DecoderBlock: the one transformer block skeleton every family's training
// forward and backward run through, tensor-parallel:
//
//   x2 = x  + out_proj(attention(positions(qkv_proj(norm1(x)))))
//   y  = x2 + down(mlp_up(norm2(x2)))
//
// around the family's hooks (block_parts.h: norms, MLP, positions, the
// attention's parameters and heads). qkv_proj and the MLP's up half are
// column-parallel (heads and MLP columns split over tp), out_proj and down
// row-parallel: two tp all-reduces forward and two backward.
//
// The block holds no activations: each microbatch's live in a State the
// caller owns, so several microbatches can be in flight at once; what one
// call needs only while it runs lives in a Workspace shared by all of them.
// Which tensors are kept per microbatch depends on BlockOptions:
//  - recompute kNone keeps every forward activation; kSelective drops the
//    attention output and its saved state and the MLP's activation
//    (recomputed from qkv and fc in backward: cheap to redo, large to
//    keep); kFull keeps only the block output y and recomputes the whole
//    forward from the block's input (including its tp all-reduce).
//  - defer_weight_grads (zero-bubble schedules): BackwardInput keeps the
//    gradients BackwardWeight later turns into parameter gradients, and
//    BackwardWeight recomputes what recompute dropped. Without it,
//    BackwardInput also accumulates the parameter gradients, its gradient
//    temporaries live in the Workspace, and BackwardWeight does nothing.
// Every mode computes the same numbers in the same order (when
// BackwardWeight follows BackwardInput's microbatch order, as in every
// schedule): gradients match to the bit, except that cuDNN's attention
// backward (BlockOptions::attention kCudnn on CUDA) may sum in another
// order on each call.
//
// Under sequence parallelism (SequenceSplit) the block's input and output,
// the residual x2 and the norm statistics hold this rank's N/tp rows; the
// norm outputs (the column-parallel layers' inputs) and the gradients the
// tensor-parallel layers read are whole (N, ·): all-gathers feed qkv_proj
// and the MLP, reduce-scatters replace the row-parallel layers'
// all-reduces, and the norms' weight gradients are this rank's rows' share
// (NormParameters: summed over tp by the trainer).
//
// Shapes: N = B·T rows, C = d_model, H = query heads on this rank, Cl =
// H·D. Statistics (norm statistics, attention's saved state) are float32
// for float32 and bfloat16 activations, float64 for float64.
//
// Thread safety: none; the chunk's one thread drives its blocks.
#ifndef TRELLIS_TRANSFORMER_DECODER_BLOCK_H_
#define TRELLIS_TRANSFORMER_DECODER_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/context_parallel.h"
#include "parallel/parameter.h"
#include "parallel/tensor_parallel.h"
#include "transformer/block_parts.h"
#include "transformer/chunk_options.h"
#include "transformer/config.h"
#include "transformer/model_family.h"
#include "transformer/sequence_split.h"

namespace trellis {

class DecoderBlock {
 public:
  using Tensors = BlockTensors;
  struct State {
    Tensors kept;  // The per-microbatch subset.
    Tensor y;      // (N, C) block output
    // (B, T) int32 or undefined: where each token's document starts
    // (attention.h). Not allocated by the block: the chunk sets a view of
    // its own per microbatch before Forward; BackwardInput and
    // BackwardWeight (recomputation) read it too.
    Tensor doc_start;
    // The scale of the microbatch's loss gradient (BlockTensors::
    // loss_scale), set by the chunk before Forward like doc_start.
    double loss_scale = 0.0;
  };
  struct Workspace {
    Tensors shared;  // The rest, reused by every microbatch.
    Tensor datt;     // (N, Cl)
    // Sequence parallel only: (N, C) partial sums of a row-parallel layer
    // before their reduce-scatter.
    Tensor partial;
  };

  // Layer `layer` of config's family (ModelFamily::NewBlockParts).
  // REQUIRES: `params` holds the layer's materialized parameters on tp
  // rank tp.rank, and the family accepts tp (CheckTensorParallel).
  DecoderBlock(const ModelConfig& config, int64_t layer, TpPlace tp,
               const ParameterSet& params, BlockOptions options = {});
  // A block of the given parts (a family outside the registry, tests).
  DecoderBlock(const ModelConfig& config, TpPlace tp, BlockParts parts,
               BlockOptions options = {});

  State NewState(int64_t batch, DType dtype, Device device) const;
  // Also fills the position hook's tables.
  Workspace NewWorkspace(int64_t batch, DType dtype, Device device) const;
  // The expert-parallel group its MLP exchanges tokens over (null: none).
  // REQUIRES: outlives the block.
  void set_expert_group(Communicator* ep) { ep_ = ep; }
  // The selection bias (E) its router adds when choosing experts
  // (BlockTensors::router_bias; null: none). REQUIRES: outlives the block.
  void set_router_bias(const Tensor* bias) { router_bias_ = bias; }
  // Context parallelism: the block's windows are a cp rank's share and its
  // attention is `context`'s (null: whole windows). REQUIRES: outlives the
  // block; set before the first NewWorkspace.
  void set_context(const ContextAttention* context) { context_ = context; }
  // Experts its MLP routes over (0: a dense MLP).
  int64_t RoutedExperts() const;
  // Adds the routing of the microbatch whose Forward just ran (its MLP's
  // balance losses and each expert's slots) to `routing`, sized at the
  // first call. Nothing for a dense MLP.
  void AddRouting(const State& state, const Workspace& work,
                  ModelChunk::LayerRouting& routing) const;
  // Whether `other`'s workspace holds the same tensors as this block's
  // (blocks of one class: one workspace serves both).
  bool SharesWorkspace(const DecoderBlock& other) const;
  // Bytes of one State / one Workspace (what New* allocate).
  size_t StateBytes(int64_t batch, DType dtype, Device device) const;
  size_t WorkspaceBytes(int64_t batch, DType dtype, Device device) const;

  // x (N/tp, C) under sequence parallelism, else (N, C); so are y, dy and
  // dx below. x must stay alive until BackwardWeight. Writes state.y.
  void Forward(Communicator& tp, const Tensor& x, State& state,
               Workspace& work) const;
  // Overwrites dx with dL/dx given dy = dL/dy (dy is not kept; dx may be
  // the buffer dy came in).
  void BackwardInput(Communicator& tp, const Tensor& x, const Tensor& dy,
                     State& state, Workspace& work, Tensor& dx) const;
  // With deferred weight gradients, recomputes what the recompute mode
  // dropped and forms the parameter gradients from what BackwardInput
  // kept; without, does nothing (BackwardInput formed them).
  void BackwardWeight(Communicator& tp, const Tensor& x, State& state,
                      Workspace& work) const;
  // The block's parameters, in registration order: norm1's, qkv_proj's,
  // out_proj's, the q/k norm's, norm2's, the MLP's.
  std::vector<Parameter*> parameters() const;
  // The norms' parameters: under sequence parallelism their gradients are
  // partial sums over tp.
  std::vector<Parameter*> NormParameters() const;
  // The q/k norm's (none without one): their gradients are partial sums
  // over tp, each rank's heads' share.
  std::vector<Parameter*> QkNormParameters() const;
  const SequenceSplit& rows() const { return rows_; }
  const BlockOptions& options() const { return options_; }

 private:
  using Place = SlotPlace;
  // Every member of Tensors the block uses, with its shape and place.
  std::vector<Slot> Slots(int64_t batch, DType dtype, Device device) const;
  // The tensors of one call: the state's where it keeps them, else the
  // workspace's.
  Tensors Use(const State& state, const Workspace& work) const;
  SlotPlaces Places() const;
  // Where the output gradient dy lives: kept with deferred weight
  // gradients, gathered into the workspace under sequence parallelism,
  // else read in place.
  Place DyPlace() const;
  // norm1 through the MLP's activation: everything but down and y.
  // `partial`: the workspace's scratch for the row-parallel layer;
  // doc_start (B, T) or undefined (attention.h).
  void ForwardActivations(Communicator& tp, const Tensor& x,
                          const Tensor& doc_start, Tensors& a,
                          Tensor& partial) const;
  // The context attention's slots for `batch` windows, and its tensors
  // among a's.
  ContextSlots ContextShapes(int64_t batch) const;
  static ContextTensors Context(const Tensors& a);
  // Appends the context attention's slots: what it keeps at `kept`, its
  // scratch in the workspace.
  void AddContextSlots(int64_t batch, DType dtype, Place kept,
                       std::vector<Slot>& slots) const;
  // Attention on the (position-mapped) qkv into a.att.
  void Attention(Tensors& a, const Tensor& doc_start) const;
  // Refills what the recompute mode dropped; the MLP's activation only
  // when `need_activation` (weight gradients read it, input gradients do
  // not).
  void Recompute(Communicator& tp, const Tensor& x, const Tensor& doc_start,
                 Tensors& a, Tensor& partial, bool need_activation) const;
  // Attention's backward from the residual gradient a.dx2 through out_proj
  // into `datt`, attention and the positions into a.dqkv, and qkv_proj
  // into a.dln1 (this rank's share, before its tp reduction).
  void AttentionBackward(const Tensor& doc_start, Tensors& a,
                         Tensor& datt) const;
  // Accumulates every parameter's gradient from the gradients
  // BackwardInput made (the norms' over this rank's rows).
  void WeightGradients(const Tensor& x, const Tensors& a) const;

  int64_t seq_len_;
  int64_t d_model_;
  int64_t local_width_;  // Cl: the attention output's width on this rank
  int64_t qkv_width_;    // (H + 2·Hkv)·D on this rank
  BlockOptions options_;
  SequenceSplit rows_;  // Where the row tensors live over tp.
  BlockParts parts_;
  ColumnParallelLinear qkv_proj_;
  RowParallelLinear out_proj_;
  Communicator* ep_ = nullptr;
  const Tensor* router_bias_ = nullptr;
  const ContextAttention* context_ = nullptr;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_DECODER_BLOCK_H_
