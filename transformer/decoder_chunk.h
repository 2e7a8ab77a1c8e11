// DecoderChunk: the part of a decoder-only model that one pipeline (virtual)
// stage runs on one rank: optionally the token embedding (and learned
// positions), a run of blocks, optionally the final norm, the LM head and
// the loss. Every family shares it; a family hands it its blocks and its
// ends (ChunkEnds: which parameters, which final norm, tied or not).
//
// It keeps ModelChunk's contract (model_family.h). Unless
// BlockOptions::defer_weight_grads, BackwardInput already accumulates the
// parameter gradients and BackwardWeight only reports and frees (see
// decoder_block.h, which also describes activation recomputation).
//
// The LM head is fused with its loss and its gradient: the last chunk's
// Forward, when given a loss scale, takes BlockOptions::loss_chunk_rows
// rows at a time through logits = ln_f · headᵀ (head = wte when tied), the
// vocab-parallel cross-entropy, dlogits = scale · (softmax − onehot) in place,
// d(ln_f) and wte's gradient, in one (rows, Vl) buffer shared by all
// microbatches. The full (N, Vl) logits never exist and a microbatch keeps only
// d(ln_f) (N, C) for BackwardInput. So wte's gradient from the head accumulates
// in Forward under every schedule (zero-bubble ones included); ln_f's waits for
// B or W like the blocks'. Document masks (SetMasks): doc_start goes to every
// block's attention; loss weights multiply each target's loss and its row of
// dlogits, so the chunk's mean loss is the weighted sum over N. Several
// microbatches may be in flight; their state comes from a pool that is reused
// across steps, so steady-state training allocates nothing.
//
// With BlockOptions::sequence_parallel the hidden tensors it receives, sends
// and passes between blocks hold this rank's N/tp rows (SequenceSplit): the
// first chunk reduce-scatters the embedding's partial sums (and adds the
// positions of its rows), the last chunk runs the final norm on its rows and
// all-gathers them for the LM head, whose d(ln_f) is reduce-scattered in
// turn; the norms' weight gradients are partial sums over tp
// (TpPartialGradients), as a q/k norm's are under any tp.
//
// All tensor-parallel communication goes through the `tp` communicator
// handed in; the chunk never addresses another rank itself.
//
// Thread safety: none; one thread drives a chunk.
#ifndef TRELLIS_TRANSFORMER_DECODER_CHUNK_H_
#define TRELLIS_TRANSFORMER_DECODER_CHUNK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"
#include "parallel/parameter.h"
#include "parallel/tensor_parallel.h"
#include "transformer/config.h"
#include "transformer/decoder_block.h"
#include "transformer/model_family.h"
#include "transformer/sequence_split.h"

namespace trellis {

class DecoderChunk : public ModelChunk {
 public:
  // The chunk of config's family for `plan` (its ends and blocks from
  // FamilyOf(config)). REQUIRES: `params` holds the chunk's parameters
  // (ModelFamily::DeclareParameters), materialized.
  DecoderChunk(const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
               Communicator& tp_comm, const ParameterSet& params,
               int64_t micro_batch, Device device, DType dtype,
               BlockOptions options = {});
  // A chunk of the given ends and blocks. The parameters in `ends` and the
  // blocks' must be materialized.
  DecoderChunk(const ModelConfig& config, const ChunkPlan& plan, TpPlace tp,
               Communicator& tp_comm, ChunkEnds ends,
               std::vector<std::unique_ptr<DecoderBlock>> blocks,
               int64_t micro_batch, Device device, DType dtype,
               BlockOptions options);
  ~DecoderChunk() override;

  // ModelChunk. The last chunk's Forward with a loss scale also accumulates
  // wte's gradient from the head (see above); WeightGroups are the head
  // (the final norm; the head unless this chunk also embeds with it tied),
  // the blocks top down, the embedding (and positions), and a parameter may
  // appear in several chunks' groups. The last chunk's state does not grow with
  // the vocabulary; its workspace holds one row chunk's logits.
  void AllocateWorkspace() override;
  const ChunkPlan& plan() const override { return plan_; }
  // B·T, or B·T/tp under sequence parallelism.
  int64_t rows() const override { return rows_.Local(FullRows()); }
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
  void set_gradient_writes(GradientWrites writes) override {
    writes_ = std::move(writes);
  }
  std::vector<std::vector<Parameter*>> GatherUnits() const override;
  void set_weight_gathers(WeightGathers gathers) override {
    gathers_ = std::move(gathers);
  }
  size_t StateBytes() const override;
  size_t WorkspaceBytes() const override;
  int InFlight() const override { return static_cast<int>(live_.size()); }
  int StatesAllocated() const override { return states_allocated_; }
  std::vector<Parameter*> TpPartialGradients() const override;
  std::vector<LayerRouting> TakeRouting() override;
  // Hands every block the expert-parallel group (REQUIRES: outlives the
  // chunk).
  void set_expert_group(Communicator* ep) {
    for (const auto& block : blocks_) block->set_expert_group(ep);
  }
  int64_t RoutedExperts() const override;
  void SetExpertBias(const ExpertBias& bias) override;
  // Context parallelism: every window here is this cp rank's share
  // (config.seq_len = T/cp tokens at the split's positions) and attention
  // is `context`'s. REQUIRES: outlives the chunk; set before the first
  // Forward.
  void set_context(const ContextAttention* context);

 private:
  // Calls add(row, position, run) for each run of `count` rows from the
  // flattened (B, T) row `first` on whose window positions are
  // consecutive (position: the run's first; runs end at windows and, under
  // context parallelism, at the split's chunks).
  template <typename Fn>
  void ForEachPositionRun(int64_t first, int64_t count, Fn add) const;
  struct State;
  State& Acquire(int mb);
  State& Live(int mb);
  // Moves the masks SetMasks gave into `s` (and its blocks' doc_start).
  void TakeMasks(State& s, double loss_scale);
  // B·T: the rows of a microbatch.
  int64_t FullRows() const { return micro_batch_ * config_.seq_len; }
  // Whether the (N, C) full_rows_ scratch exists: sequence parallel with
  // an embedding or a head.
  bool NeedsFullRows() const;
  // s.x0 = the embedding of s.ids (this rank's rows of it).
  void Embed(State& s);
  // Forward of the head on block output x, chunk by chunk; with
  // loss_scale > 0 also its gradients into s.dlnf and the head weight.
  void HeadForward(State& s, const Tensor& x, double loss_scale);
  void HeadBackwardInput(State& s, const Tensor& x, Tensor& dx);
  void HeadBackwardWeight(const State& s, const Tensor& x);
  void EmbeddingBackwardWeight(const State& s);
  // Runs `add` (additions to `group`'s gradients) between the
  // GradientWrites calls.
  template <typename Add>
  void Writing(const std::vector<Parameter*>& group, Add add) {
    if (writes_.before) writes_.before(group);
    add();
    if (writes_.after) writes_.after(group);
  }
  // Runs `read` (a compute's reads of units[i]) between the WeightGathers
  // calls; `step` is +1 walking forward, -1 walking backward.
  template <typename Read>
  void Reading(const std::vector<std::vector<Parameter*>>& units, size_t i,
               int step, Read read) {
    if (gathers_.acquire) {
      const int64_t next = static_cast<int64_t>(i) + step;
      const bool has_next =
          next >= 0 && next < static_cast<int64_t>(units.size());
      gathers_.acquire(units[i], has_next ? units[next] : no_unit_);
    }
    read();
    if (gathers_.release) gathers_.release(units[i]);
  }
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
  ChunkEnds ends_;
  SequenceSplit rows_;  // Where the hidden rows live over tp.
  VocabShard vocab_;
  std::vector<std::unique_ptr<DecoderBlock>> blocks_;
  // The blocks' workspaces, one per class of blocks (SharesWorkspace):
  // made by the blocks workspace_makers_ names; block l uses
  // works_[work_of_[l]].
  std::vector<DecoderBlock::Workspace> works_;
  // The routing of the training microbatches since TakeRouting, by block.
  std::vector<LayerRouting> routing_;
  std::vector<bool> routed_;  // whether block l routes (RoutedExperts)
  // Block l's router selection bias (E), with moe_bias_update_rate; else
  // undefined, as for a dense block. Made by AllocateRouterBias.
  std::vector<Tensor> router_bias_;
  // The experts of block l's bias: 0 when it has none.
  int64_t BiasExperts(size_t l) const;
  void AllocateRouterBias();
  std::vector<size_t> workspace_makers_;
  std::vector<size_t> work_of_;
  DecoderBlock::Workspace& Work(size_t layer) {
    return works_[work_of_[layer]];
  }
  Tensor ping_, pong_;  // (Nl, C) gradient scratch
  // Sequence parallel: (N, C) partial sums of the embedding, then of the
  // head's d(ln_f), before their reduce-scatter.
  Tensor full_rows_;
  // The head's workspace: ln_f's output (N, C), one row chunk's logits
  // (R, Vl; then its dlogits) and loss statistics (R and 2·R).
  Tensor head_lnf_, head_logits_, head_row_max_, head_sums_;
  ChunkMasks next_masks_;  // for the next Forward
  std::map<int, std::unique_ptr<State>> live_;
  std::vector<std::unique_ptr<State>> free_;
  int states_allocated_ = 0;
  GradientWrites writes_;
  WeightGathers gathers_;
  const std::vector<Parameter*> no_unit_;
  const ContextAttention* context_ = nullptr;
};

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_DECODER_CHUNK_H_
