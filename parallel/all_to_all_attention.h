// Context-parallel attention by all-to-all (ContextAttention,
// --cp_comm=a2a; DeepSpeed's Ulysses).
//
// Before attention an all-to-all over the cp group trades the sequence
// split for a head split: rank g sends every rank its tokens' share of
// their head group and receives, from each rank, the qkv of that rank's
// tokens for head group g (H/cp query and Hkv/cp key/value heads), which
// it lays out in window order. Each rank then runs the whole-window
// attention (framework/kernels/attention.h, with document masking) on its
// heads, and a second all-to-all sends each rank its tokens' outputs back
// for every head group. Backward is the same two exchanges the other way
// round around the whole-window backward. Each all-to-all is cp-1 sends
// and receives per rank (parallel/expert_parallel.h: AllToAllRows); the
// document starts travel by an all-gather.
//
// REQUIRES: the query and key/value heads on this rank divisible by cp
// (TrainOptions refuses the layout otherwise).
#ifndef TRELLIS_PARALLEL_ALL_TO_ALL_ATTENTION_H_
#define TRELLIS_PARALLEL_ALL_TO_ALL_ATTENTION_H_

#include <vector>

#include "parallel/context_parallel.h"

namespace trellis {

class AllToAllAttention : public ContextAttention {
 public:
  AllToAllAttention(Communicator& cp, const ContextSplit& split);

  ContextComm comm() const override { return ContextComm::kAllToAll; }
  // With G = (H + 2·Hkv)/cp·D and Hg = H/cp: saved is attention.h's for
  // whole windows of Hg heads; kept: the windows' qkv of this rank's heads
  // (B, T, G) and their output (B, T, Hg·D); scratch: the exchanges' send
  // and receive blocks (cp, B, T/cp, G) each, the windows' dout
  // (B, T, Hg·D) and dqkv (B, T, G), and the document starts gathered
  // (cp, B, T/cp) and in window order (B, T), int32.
  ContextSlots Slots(int64_t B, int64_t H, int64_t Hkv,
                     int64_t D) const override;
  void Forward(const Tensor& qkv, const Tensor& doc_start, int64_t n_head,
               int64_t n_kv_head, Tensor& out, Tensor& saved,
               ContextTensors& t) const override;
  void Backward(const Tensor& dout, const Tensor& qkv, const Tensor& doc_start,
                const Tensor& out, const Tensor& saved, int64_t n_head,
                int64_t n_kv_head, Tensor& dqkv,
                ContextTensors& t) const override;

 private:
  // The whole windows' document starts (B, T) in t's scratch, or an
  // undefined tensor without document masking.
  Tensor WholeStarts(const Tensor& doc_start, ContextTensors& t) const;
  // recv (cp, B, T/cp, w) = every rank's block of send (cp, B, T/cp, w):
  // the all-to-all, w the trailing width of both.
  void Exchange(const Tensor& send, Tensor& recv) const;

  std::vector<std::vector<int32_t>> positions_;  // per rank
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_ALL_TO_ALL_ATTENTION_H_
