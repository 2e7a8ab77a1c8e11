// The block hooks of the model seam: what a family puts into the one
// decoder block skeleton (DecoderBlock for training, CachedBlock for
// generation), so that a family writes only what differs between models:
//
//   x2 = x  + out_proj(attention(positions(qkv_proj(norm1(x)))))
//   y  = x2 + mlp(norm2(x2))
//
// The skeleton owns the order of the work, the attention (column-parallel
// qkv_proj, causal grouped-query attention, row-parallel out_proj), the
// residuals, the tensor-parallel and sequence-parallel communication, the
// recompute modes and the split of backward into input and weight
// gradients. A family supplies, per layer (BlockParts):
//  - the attention's parameters and heads on this rank (AttentionParts),
//  - its two norms (BlockNorm: norms.h has LayerNorm and RMSNorm),
//  - its MLP (BlockMlp): an up half from the norm's output to the
//    activation, the row-parallel down projection the skeleton runs, and
//    their backward,
//  - what it does to positions inside the block (BlockPositions: RoPE's
//    rotation of q and k; none where positions are added at the
//    embedding, as GPT-2's learned ones are),
// and per chunk the parameters at the model's ends and the final norm
// (ChunkEnds), which DecoderChunk and CachedDecoder run.
//
// Hooks read and write the tensors of BlockTensors in fixed roles (ln1/ln2
// the norms' outputs, fc the MLP's up projection, gelu its activation,
// dgelu the activation's gradient, cos/sin a position table, the routing
// roles a mixture of experts' MLP), and declare the shapes and places of
// the ones they own (Slots); an optional per-head norm of q and k
// (QkNorm) runs before the positions. Gradient rule: hooks' weight gradients
// accumulate (+=), activation gradients are written (=) unless a method
// says otherwise.
//
// Thread safety: hooks are immutable after construction; the chunk's one
// thread drives them.
#ifndef TRELLIS_TRANSFORMER_BLOCK_PARTS_H_
#define TRELLIS_TRANSFORMER_BLOCK_PARTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "framework/kernels/elementwise.h"
#include "framework/tensor.h"
#include "parallel/parameter.h"
#include "parallel/tensor_parallel.h"

namespace trellis {

// Every tensor a block's forward and backward touch besides its input and
// output; N = B·T rows, C = d_model, Cl = attention width on this rank.
// A state or workspace defines the ones it holds.
struct BlockTensors {
  Tensor ln1, mean1, rstd1;  // (N, C), (N), (N); mean1 for a LayerNorm
  Tensor qkv;                // (N, qkv width on this rank)
  Tensor att;                // (N, Cl)
  Tensor saved;              // attention's saved state
  Tensor x2;                 // (N, C)
  Tensor ln2, mean2, rstd2;  // (N, C), (N), (N)
  Tensor fc, gelu;           // the MLP's up projection and activation
  // Gradients BackwardInput makes and the weight gradients read.
  Tensor dy;         // (N, C)
  Tensor dfc;        // like fc
  Tensor dln2, dx2;  // (N, C)
  Tensor dqkv;       // like qkv
  Tensor dln1;       // (N, C)
  Tensor dgelu;      // like gelu, where the MLP needs it
  // Shared tables of the position hook (RoPE's cos and sin).
  Tensor cos, sin;
  // A per-head q/k norm's (QkNorm): the query and key channels before it
  // (N, (H + Hkv)·D) and their statistics (N, H + Hkv), and its weights'
  // gradients from this microbatch (2, D).
  Tensor qk_in, qk_rstd, dqk_weight;
  // A mixture of experts' routing (transformer/moe/moe_mlp.h): the
  // router's logits (N, E), each token's experts and their weights
  // (N, k), the route (N·k) and each expert's slot count (E)
  // (framework/kernels/expert_rows.h), the balance losses (2), the rows in
  // expert order (N·k, C) and the experts' outputs in that order (N·k, C,
  // partial sums over tp). fc, gelu, dfc and dgelu then hold N·k rows.
  Tensor logits, choice, choice_weight, route, counts, route_losses;
  // Host copies (Slot::host) of `counts` and, under expert parallelism,
  // `recv_counts`, read by the host to cut the rows into experts' blocks.
  Tensor host_counts, host_recv_counts;
  // A router's counts over the whole window: `counts` summed over cp.
  Tensor window_counts;
  Tensor moe_in, moe_out;
  // Their gradients: the logits' (N, E), the weights' (N, k), the
  // experts' outputs' and inputs' (N·k, C).
  Tensor dlogits, dchoice, dmoe_out, dmoe_in;
  // Under expert parallelism, the rows this rank's experts received from
  // each rank of the ep group and their outputs (fc and gelu then hold
  // these rows), with their gradients, and the rows each sender sent to
  // each of this rank's experts (ep · E/ep).
  Tensor expert_in, expert_out, dexpert_out, dexpert_in, recv_counts;
  // Under context parallelism, what the context attention keeps per
  // microbatch and its scratch (ContextSlots, parallel/context_parallel.h);
  // `saved` then holds its saved state.
  Tensor cp_kept0, cp_kept1;
  Tensor cp_scratch0, cp_scratch1, cp_scratch2, cp_scratch3, cp_scratch4,
      cp_scratch5;
  // The scale of this microbatch's loss gradient (ModelChunk::Forward's
  // loss_scale), which losses of the MLP's own (a router's balance
  // losses) take too; 0 when no backward follows.
  double loss_scale = 0.0;
  // The expert-parallel group the MLP exchanges tokens over (a mixture of
  // experts' dispatch); null without expert parallelism.
  Communicator* ep = nullptr;
  // A mixture's shared expert (a SwiGLU MLP on every row): its up
  // projection and activation (N, 2·Fs/tp) and (N, Fs/tp), their
  // gradients, and the routed experts' combined output (N, C) it is added
  // to.
  Tensor shared_fc, shared_act, shared_dfc, shared_dact, routed_out;
  // A router's selection bias (E), the layer's row of the model's
  // ExpertBias (transformer/expert_bias.h); undefined without one.
  Tensor router_bias;
  // The context-parallel group a window's tokens are split over, whose
  // per-window statistics (a router's expert counts) the MLP sums; null
  // without context parallelism.
  Communicator* cp = nullptr;
};

// Where a tensor lives: one per microbatch in flight, one shared by the
// chunk's microbatches, or nowhere.
enum class SlotPlace { kState, kWorkspace, kUnused };
struct Slot {
  Tensor BlockTensors::*member;
  Shape shape;
  DType dtype;
  SlotPlace place;
  // On the host whatever the block's device: a small table the host reads
  // (a router's expert counts), copied there once per microbatch.
  bool host = false;
};
// Where slot `s` of a block on `device` lives.
inline Device SlotDevice(const Slot& s, Device device) {
  return s.host ? Device::Cpu() : device;
}
// The places the recompute mode and weight-gradient deferral give a
// block's tensors: `input` for those recomputation starts from (dropped
// only by full recomputation), `cheap` for the attention output and its
// saved state and the MLP's activation (kept only without recomputation),
// `grad` for the gradients BackwardInput makes (kept for deferred weight
// gradients).
struct SlotPlaces {
  SlotPlace input, cheap, grad;
};

// One of a block's norms (and a chunk's final norm), over rows of C.
class BlockNorm {
 public:
  virtual ~BlockNorm() = default;
  // Its parameters, in registration order.
  virtual std::vector<Parameter*> parameters() const = 0;
  // Whether it keeps a mean besides rstd (its statistics are (mean, rstd)
  // or rstd alone; `mean` arguments are ignored without one).
  virtual bool has_mean() const = 0;
  // out = norm(x); statistics per row.
  virtual void Forward(const Tensor& x, Tensor& out, Tensor& mean,
                       Tensor& rstd) const = 0;
  // sum = a + b, out = norm(sum) in one pass; `sum` may be `a`.
  virtual void AddForward(const Tensor& a, const Tensor& b, Tensor& sum,
                          Tensor& out, Tensor& mean, Tensor& rstd) const = 0;
  // dx += dL/dx given dout = dL/d(out) (the chunk zeroes dx first).
  virtual void BackwardInput(const Tensor& dout, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd,
                             Tensor& dx) const = 0;
  // dx = dresidual + dL/dx (a block's residual joins its norm's input).
  virtual void BackwardInputResidual(const Tensor& dout, const Tensor& x,
                                     const Tensor& mean, const Tensor& rstd,
                                     const Tensor& dresidual,
                                     Tensor& dx) const = 0;
  // Its parameters' gradients, now (the chunk's final norm).
  virtual void BackwardWeight(const Tensor& dout, const Tensor& x,
                              const Tensor& mean, const Tensor& rstd) const = 0;
  // Its parameters' gradients in a block: either appended to `jobs` (the
  // block runs them with its bias sums in one ColumnSumsMany; the pointers
  // must outlive that call) or formed now.
  virtual void BlockWeightGradients(const Tensor& dout, const Tensor& x,
                                    const Tensor& mean, const Tensor& rstd,
                                    std::vector<ColumnSumJob>& jobs) const = 0;
};

// A block's MLP: up half (norm output -> activation), the row-parallel
// down projection the skeleton runs (sequence-parallel aware) or, for an
// MLP whose output is not one such layer (a mixture of experts), its own
// partial sums over tp that the skeleton reduces, and their backward.
// Reads and writes BlockTensors' ln2, fc, gelu, dy, dfc and dgelu and the
// roles its Slots declare.
class BlockMlp {
 public:
  virtual ~BlockMlp() = default;
  virtual std::vector<Parameter*> parameters() const = 0;
  // fc, gelu, dfc and dgelu's shapes and places for N rows (`places` as
  // the block's options give them).
  virtual std::vector<Slot> Slots(int64_t n, DType dtype,
                                  SlotPlaces places) const = 0;
  // a.fc and a.gelu from the norm's whole output a.ln2 (N, C). The
  // tensors may hold more rows than the N of a.ln2 (the cached forward's
  // scratch): the hook uses the first rows it needs.
  virtual void Up(BlockTensors& a) const = 0;
  // act again from fc (recomputation).
  virtual void Activation(const Tensor& fc, Tensor& act) const = 0;
  // The row-parallel layer the skeleton runs on a.gelu (N, width) into
  // (N, C) partial sums over tp; null when the MLP forms them in Down.
  virtual const RowParallelLinear* down() const = 0;
  // out (N, C) = this rank's partial sums over tp of the MLP's output, N
  // the rows of a.ln2, from what Up wrote. REQUIRES: down() is null.
  virtual void Down(BlockTensors& a, Tensor& out) const;
  // dln (N, C) = this rank's share of dL/d(ln) from a.dy, through the down
  // projection and the activation; writes a.dfc (and a.dgelu) on the way.
  // `tp` carries the MLP's own reductions (a router's weights' gradient,
  // partial over tp), through the mappings of parallel/tensor_parallel.h.
  virtual void BackwardInput(Communicator& tp, BlockTensors& a,
                             Tensor& dln) const = 0;
  // The weight gradients from a.dy, a.gelu, a.dfc and a.ln2; bias
  // gradients in the GEMMs when `bias_in_gemm`, else appended to `jobs`.
  virtual void WeightGradients(const BlockTensors& a, bool bias_in_gemm,
                               std::vector<ColumnSumJob>& jobs) const = 0;
  // The experts it routes over: its expert counts' length (0: a dense
  // MLP, which declares none).
  int64_t RoutedExperts() const;
};

// What a family does to positions inside a block: a map on q and k after
// qkv_proj (RoPE), with tables of its own. Families whose positions are
// added to the embedding (ChunkEnds::positions) have none.
class BlockPositions {
 public:
  virtual ~BlockPositions() = default;
  // Its workspace tables (cos, sin) for windows of `seq_len`.
  virtual std::vector<Slot> Slots(int64_t seq_len, DType dtype,
                                  Device device) const = 0;
  // Fills the tables Slots declared, in a new workspace or decode scratch.
  virtual void FillTables(int64_t seq_len, BlockTensors& tables) const = 0;
  // The same with table row i for window position positions[i] (context
  // parallelism: a rank's tokens sit at scattered positions); Slots was
  // given positions.size().
  virtual void FillTablesAt(const std::vector<int32_t>& positions,
                            BlockTensors& tables) const = 0;
  // qkv (B, T, W): rows at window positions 0..T-1, `first` added to each
  // (the cached decoder's offset), mapped in place.
  virtual void Forward(Tensor& qkv, int64_t first,
                       const BlockTensors& tables) const = 0;
  // dqkv (B, T, W): the gradient through Forward, in place.
  virtual void Backward(Tensor& dqkv, const BlockTensors& tables) const = 0;
};

// A per-head RMSNorm of the queries and keys between qkv_proj and the
// positions (Qwen3's q_norm and k_norm; framework/kernels/qk_norm.h) on
// this rank's heads. Each rank's weight gradients are its heads' share
// (a key head replicated over tp ranks gets, on each, the gradient of that
// rank's query heads): the chunk lists the weights as partial over tp
// (TpPartialGradients).
class QkNorm {
 public:
  // REQUIRES: the weights (head_dim) materialized when used (ZeRO-3's are
  // gathered around the block's compute), eps > 0.
  QkNorm(Parameter& q_weight, Parameter& k_weight, int64_t heads,
         int64_t kv_heads, int64_t head_dim, double eps)
      : q_weight_(&q_weight),
        k_weight_(&k_weight),
        heads_(heads),
        kv_heads_(kv_heads),
        head_dim_(head_dim),
        eps_(eps) {}
  std::vector<Parameter*> parameters() const { return {q_weight_, k_weight_}; }
  // qk_in and qk_rstd (kept as qkv is: `places.input`) and dqk_weight
  // (`places.grad`) for N rows.
  std::vector<Slot> Slots(int64_t n, DType dtype, SlotPlaces places) const;
  // qkv (N, W) normalized in place; a.qk_in and a.qk_rstd written.
  void Forward(Tensor& qkv, BlockTensors& a) const;
  // dqkv (N, W) through the norm in place; a.dqk_weight written.
  void BackwardInput(Tensor& dqkv, BlockTensors& a) const;
  // The weights' gradients += a.dqk_weight.
  void WeightGradients(const BlockTensors& a) const;

 private:
  Parameter* q_weight_;
  Parameter* k_weight_;
  int64_t heads_, kv_heads_, head_dim_;
  double eps_;
};

// The attention's parameters on this rank: qkv_proj (C, (H + 2·Hkv)·D/tp)
// column-parallel and out_proj (H·D/tp, C) row-parallel, biases optional.
struct AttentionParts {
  Parameter* qkv_weight = nullptr;
  Parameter* qkv_bias = nullptr;
  Parameter* out_weight = nullptr;
  Parameter* out_bias = nullptr;
  int64_t heads = 0;     // query heads on this rank
  int64_t kv_heads = 0;  // key/value heads on this rank
  int64_t head_dim = 0;
};

// Everything one layer's block is made of (ModelFamily::NewBlockParts).
struct BlockParts {
  AttentionParts attention;
  std::shared_ptr<const BlockNorm> norm1, norm2;
  std::shared_ptr<const BlockMlp> mlp;
  std::shared_ptr<const BlockPositions> positions;  // null: none
  std::shared_ptr<const QkNorm> qk_norm;            // null: none
};

// The parameters at the ends of the model, as the family names them; each
// null where the chunk's plan lacks that end.
struct ChunkEnds {
  Parameter* embedding = nullptr;  // (V, C) vocab-parallel: first chunk
  Parameter* positions = nullptr;  // (T, C) learned positions, or none
  // The final norm (its parameters replicated): last chunk.
  std::shared_ptr<const BlockNorm> norm;
  // (V, C) vocab-parallel LM head weight: the embedding when tied.
  Parameter* head = nullptr;
};

// A column- or row-parallel layer of `weight` with `bias` (may be null).
ColumnParallelLinear ColumnLayer(Parameter* weight, Parameter* bias);
RowParallelLinear RowLayer(Parameter* weight, Parameter* bias);

}  // namespace trellis

#endif  // TRELLIS_TRANSFORMER_BLOCK_PARTS_H_
