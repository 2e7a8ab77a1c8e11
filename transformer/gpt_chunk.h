// GptChunk: the part of a GPT-2 model that one pipeline (virtual) stage runs
// on one rank: optionally the embedding, a run of blocks, optionally the
// final LayerNorm, the tied LM head and the loss.
//
// Per microbatch:
//   Forward(mb)         first chunk: tokens (B, T) -> hidden (N, C);
//                       other chunks: hidden in -> hidden out; the last
//                       chunk ends in the mean next-token loss instead.
//   BackwardInput(mb)   d(output hidden) -> d(input hidden): the B action.
//   BackwardWeight(mb)  parameter gradients (+=), then frees mb's state: W.
// Unless BlockOptions::defer_weight_grads, BackwardInput already accumulates
// the parameter gradients and BackwardWeight only reports and frees (see
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

namespace trellis {

class GptChunk {
 public:
  // `params` must already hold the chunk's parameters (AddGptParameters).
  GptChunk(const GptConfig& config, const ChunkPlan& plan, TpPlace tp,
           Communicator& tp_comm, const ParameterSet& params,
           int64_t micro_batch, Device device, DType dtype,
           BlockOptions options = {});
  ~GptChunk();

  // Allocates the buffers every microbatch shares (WorkspaceBytes); the
  // first Forward does it otherwise. The constructor allocates nothing.
  void AllocateWorkspace();

  const ChunkPlan& plan() const { return plan_; }
  // Rows of the hidden tensors this chunk sends and receives: B·T.
  int64_t rows() const { return micro_batch_ * config_.seq_len; }

  // `tokens` (B, T) int32 on the first chunk, else `input` (N, C); the last
  // chunk reads `targets` (B, T) int32 and computes the per-token losses
  // (TokenLosses), adding their mean to `loss_sum` when given (one float64
  // element on the chunk's device, AccumulateSum: the host does not wait);
  // other chunks write `output` (N, C). Tokens and targets may be on the
  // host or the chunk's device (a device copy does not block the host). On
  // the last chunk a `loss_scale` > 0 starts backward: the loss gradient is
  // loss_scale · d(mean loss), wte's gradient accumulates here and
  // BackwardInput may follow; 0 computes only the losses (evaluation:
  // no gradient is touched, and only Release may follow). Other chunks
  // ignore it.
  void Forward(int mb, const Tensor& tokens, const Tensor& input,
               const Tensor& targets, double loss_scale, Tensor* output,
               Tensor* loss_sum = nullptr);
  // The last chunk's mean loss of microbatch `mb`, read to the host (one
  // host wait; for tests and tools, not the training step). Valid while
  // TokenLosses(mb) is.
  double MeanLoss(int mb) const;
  // `doutput` (N, C) on non-last chunks (the last chunk's loss gradient
  // comes from Forward). Writes `dinput` (N, C) on non-first chunks.
  void BackwardInput(int mb, const Tensor& doutput, Tensor* dinput);
  // Reports each group of parameters as its gradient work for `mb` ends,
  // in the order of WeightGroups() (so data-parallel buckets can launch).
  using WeightsDone = std::function<void(const std::vector<Parameter*>&)>;
  void BackwardWeight(int mb, const WeightsDone& done = nullptr);
  // The last chunk's per-token losses (N) of microbatch `mb`, rows in
  // order; valid until mb's BackwardWeight or Release.
  const Tensor& TokenLosses(int mb) const;
  // Frees mb's state after a forward-only pass (evaluation).
  void Release(int mb);
  // The parameter groups BackwardWeight reports, in its order: the head
  // (ln_f; wte unless this chunk also embeds), the blocks top down, the
  // embedding (wte, wpe). A parameter may appear in several chunks' groups.
  // A report means mb's contributions are done: the head's wte part was
  // added in mb's Forward, which precedes its BackwardWeight.
  std::vector<std::vector<Parameter*>> WeightGroups() const;

  // Bytes of one microbatch's state and of the chunk's shared buffers
  // (exactly what the chunk allocates; the last chunk's state does not grow
  // with the vocabulary, its workspace holds one row chunk's logits).
  size_t StateBytes() const;
  size_t WorkspaceBytes() const;

  int InFlight() const { return static_cast<int>(live_.size()); }
  // Microbatch states allocated so far (the pool's high-water mark).
  int StatesAllocated() const { return states_allocated_; }

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

  GptConfig config_;
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
  std::map<int, std::unique_ptr<State>> live_;
  std::vector<std::unique_ptr<State>> free_;
  int states_allocated_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_GPT_CHUNK_H_
