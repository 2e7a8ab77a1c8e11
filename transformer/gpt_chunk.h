// GptChunk: the part of a GPT-2 model that one pipeline (virtual) stage runs
// on one rank: optionally the embedding, a run of blocks, optionally the
// final LayerNorm, the tied LM head and the loss.
//
// It keeps ModelChunk's contract (model_family.h). Unless
// BlockOptions::defer_weight_grads, BackwardInput already accumulates the
// parameter gradients and BackwardWeight only reports and frees (see
// block.h, which also describes activation recomputation).
//
// The LM head is fused with its loss and its gradient: the last chunk's
// Forward, when given a loss scale, takes BlockOptions::loss_chunk_rows
// rows at a time through logits = ln_f · wteᵀ, the vocab-parallel
// cross-entropy, dlogits = scale · (softmax − onehot) in place, d(ln_f) and
// wte's gradient, in one (rows, Vl) buffer shared by all microbatches. The
// full (N, Vl) logits never exist and a microbatch keeps only d(ln_f)
// (N, C) for BackwardInput. So wte's gradient from the head accumulates in
// Forward under every schedule (zero-bubble ones included); ln_f's waits
// for B or W like the blocks'.
// Document masks (SetMasks): doc_start goes to every block's attention;
// loss weights multiply each target's loss and its row of dlogits, so the
// chunk's mean loss is the weighted sum over N.
// Several microbatches may be in flight; their state comes from a pool that
// is reused across steps, so steady-state training allocates nothing.
//
// All tensor-parallel communication goes through the `tp` communicator
// handed in; the chunk never addresses another rank itself.
//
// Thread safety: none; one thread drives a chunk.
#ifndef TRELLIS_TRANSFORMER_GPT_CHUNK_H_
#define TRELLIS_TRANSFORMER_GPT_CHUNK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "parallel/tensor_parallel.h"
#include "transformer/block.h"
#include "transformer/config.h"
#include "transformer/gpt_parameters.h"
#include "transformer/model_family.h"

namespace trellis {

class GptChunk : public ModelChunk {
 public:
  // `params` must already hold the chunk's parameters (DeclareGptParameters,
  // materialized).
  GptChunk(const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
           Communicator& tp_comm, const ParameterSet& params,
           int64_t micro_batch, Device device, DType dtype,
           BlockOptions options = {});
  ~GptChunk() override;

  // ModelChunk. The last chunk's Forward with a loss scale also accumulates
  // wte's gradient from the head (see above); WeightGroups are the head
  // (ln_f; wte unless this chunk also embeds), the blocks top down, the
  // embedding (wte, wpe), and a parameter may appear in several chunks'
  // groups. The last chunk's state does not grow with the vocabulary; its
  // workspace holds one row chunk's logits.
  void AllocateWorkspace() override;
  const ChunkPlan& plan() const override { return plan_; }
  int64_t rows() const override { return micro_batch_ * config_.seq_len; }
  int64_t width() const override { return config_.d_model; }
  void Forward(int mb, const Tensor& tokens, const Tensor& input,
               const Tensor& targets, double loss_scale, Tensor* output,
               Tensor* loss_sum = nullptr) override;
  void SetMasks(const ChunkMasks& masks) override;
  double MeanLoss(int mb) const override;
  void BackwardInput(int mb, const Tensor& doutput, Tensor* dinput) override;
  void BackwardWeight(int mb, const WeightsDone& done = nullptr) override;
  const Tensor& TokenLosses(int mb) const override;
  void Release(int mb) override;
  std::vector<std::vector<Parameter*>> WeightGroups() const override;
  size_t StateBytes() const override;
  size_t WorkspaceBytes() const override;
  int InFlight() const override { return static_cast<int>(live_.size()); }
  int StatesAllocated() const override { return states_allocated_; }

 private:
  struct State;
  State& Acquire(int mb);
  State& Live(int mb);
  // Forward of the head on block output x, chunk by chunk; with
  // loss_scale > 0 also its gradients into s.dlnf and wte.
  void HeadForward(State& s, const Tensor& x, double loss_scale);
  void HeadBackwardInput(State& s, const Tensor& x, Tensor& dx);
  void HeadBackwardWeight(const State& s, const Tensor& x);
  void EmbeddingBackwardWeight(const State& s);
  // Tensors of one microbatch's state besides the blocks', as (shape,
  // dtype); Acquire allocates exactly these.
  std::vector<std::pair<Shape, DType>> OwnStateShapes() const;
  // The head's shared buffers, as (shape, dtype); the constructor
  // allocates exactly these (none without a head).
  std::vector<std::pair<Shape, DType>> HeadWorkspaceShapes() const;
  // Rows per head chunk: min(loss_chunk_rows, N), or N for 0.
  int64_t HeadChunkRows() const;

  ModelConfig config_;
  ChunkPlan plan_;
  TpPlace tp_;
  Communicator& tp_comm_;
  int64_t micro_batch_;
  Device device_;
  DType dtype_;
  BlockOptions options_;
  Parameter* wte_ = nullptr;
  Parameter* wpe_ = nullptr;
  Parameter* lnf_w_ = nullptr;
  Parameter* lnf_b_ = nullptr;
  VocabShard vocab_;
  std::vector<Block> blocks_;
  Block::Workspace work_;
  Tensor ping_, pong_;  // (N, C) gradient scratch
  // The head's workspace: ln_f's output (N, C), one row chunk's logits
  // (R, Vl; then its dlogits) and loss statistics (R and 2·R).
  Tensor head_lnf_, head_logits_, head_row_max_, head_sums_;
  ChunkMasks next_masks_;  // for the next Forward
  std::map<int, std::unique_ptr<State>> live_;
  std::vector<std::unique_ptr<State>> free_;
  int states_allocated_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT_CHUNK_H_
