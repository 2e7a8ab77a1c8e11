// Context parallelism: the window of every sequence split over the cp
// ranks of a replica (ProcessGroups::cp), and the attention that gives
// each of them its own tokens' attention over the whole window.
//
// The split (ContextSplit): a window of T tokens is cut into 2·cp chunks
// of T/(2·cp) and cp rank r holds chunks r and 2·cp-1-r, in that order, so
// that under the causal mask every rank attends the same number of
// (query, key) pairs. Everything per token (embeddings, norms, MLPs, the
// head and its loss) runs on the rank's own T/cp tokens at their window
// positions (Positions), which the learned position table and RoPE read.
//
// The attention (ContextAttention), two ways (--cp_comm):
//   - ring (RingAttention, parallel/ring_attention.h): key/value blocks
//     pass around the group while each rank attends its queries to the
//     block in hand; partial results merge by their log-sum-exps;
//   - a2a (AllToAllAttention, parallel/all_to_all_attention.h): an
//     all-to-all trades the sequence split for a head split, each rank
//     attends whole windows with its share of the heads, and a second
//     all-to-all trades back.
// The layer hands its qkv (B, T/cp, (H + 2·Hkv)·D), laid out as
// attention.h's, and gets the output (B, T/cp, H·D); what the way keeps
// per microbatch and the scratch it needs are declared by Slots, so that
// the memory plan counts them. doc_start (B, T/cp) holds window positions.
//
// CPU only (the block kernels have no CUDA twins yet).
// Thread safety: immutable; the communicator is used by one thread.
#ifndef TRELLIS_PARALLEL_CONTEXT_PARALLEL_H_
#define TRELLIS_PARALLEL_CONTEXT_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/tensor.h"
#include "parallel/communicator.h"

namespace trellis {

class ContextSplit {
 public:
  // One rank holding the whole window.
  ContextSplit() = default;
  // REQUIRES: Check(window, size) is ok and 0 <= rank < size.
  ContextSplit(int64_t window, int size, int rank);

  // Fails (InvalidArgument, naming --seq_len and --cp) unless cp >= 1 and
  // 2·cp divides the window.
  static absl::Status Check(int64_t window, int cp);

  bool on() const { return size_ > 1; }
  int size() const { return size_; }
  int rank() const { return rank_; }
  int64_t window() const { return window_; }
  // Tokens of each window held here: T / cp.
  int64_t Local() const { return window_ / size_; }
  // The window positions of rank r's tokens, in order.
  std::vector<int32_t> Positions(int r) const;
  const std::vector<int32_t>& Mine() const { return mine_; }
  // This rank's columns of a (B, T) tensor of 4-byte elements on the CPU
  // (int32 tokens, document starts, float32 loss weights): (B, T/cp). The
  // tensor itself when off.
  Tensor Take(const Tensor& rows) const;

 private:
  int64_t window_ = 0;
  int size_ = 1;
  int rank_ = 0;
  std::vector<int32_t> mine_;
};

// The ways to attend over a split window (--cp_comm).
enum class ContextComm { kRing, kAllToAll };
// "ring" or "a2a"; InvalidArgument naming --cp_comm otherwise.
absl::StatusOr<ContextComm> ParseContextComm(const std::string& name);
const char* ContextCommName(ContextComm comm);

// A tensor a way needs: int32 (`index`) or the activations' dtype.
struct ContextSlot {
  Shape shape;
  bool index = false;
};
// What one layer's context attention holds, for B windows of T/cp tokens,
// H query and Hkv key/value heads of width D on this rank.
struct ContextSlots {
  Shape saved;                       // attention's saved state, replaced
  std::vector<Shape> kept;           // per microbatch, beside it (<= 2)
  std::vector<ContextSlot> scratch;  // shared by the microbatches (<= 6)
};
// The tensors of those slots for one call, in Slots' order.
struct ContextTensors {
  std::vector<Tensor> kept, scratch;
};

class ContextAttention {
 public:
  virtual ~ContextAttention() = default;
  ContextAttention(const ContextAttention&) = delete;
  ContextAttention& operator=(const ContextAttention&) = delete;

  const ContextSplit& split() const { return split_; }
  // The cp group the window's tokens are split over.
  Communicator& group() const { return cp_; }
  virtual ContextComm comm() const = 0;
  virtual ContextSlots Slots(int64_t B, int64_t H, int64_t Hkv,
                             int64_t D) const = 0;
  // out (B, T/cp, H·D) and `saved`: the attention of this rank's queries
  // over the whole window. doc_start (B, T/cp) int32 or undefined.
  virtual void Forward(const Tensor& qkv, const Tensor& doc_start,
                       int64_t n_head, int64_t n_kv_head, Tensor& out,
                       Tensor& saved, ContextTensors& t) const = 0;
  // dqkv (written) = dL/dqkv of this rank's tokens, given dout and what
  // the forward left in out, saved and t.kept.
  virtual void Backward(const Tensor& dout, const Tensor& qkv,
                        const Tensor& doc_start, const Tensor& out,
                        const Tensor& saved, int64_t n_head, int64_t n_kv_head,
                        Tensor& dqkv, ContextTensors& t) const = 0;

 protected:
  // REQUIRES: cp outlives this; cp.size() == split.size() and cp.rank() ==
  // split.rank().
  ContextAttention(Communicator& cp, const ContextSplit& split);

  Communicator& cp_;
  ContextSplit split_;
};

// The attention of `comm` over the cp group.
std::unique_ptr<ContextAttention> NewContextAttention(
    ContextComm comm, Communicator& cp, const ContextSplit& split);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_CONTEXT_PARALLEL_H_
