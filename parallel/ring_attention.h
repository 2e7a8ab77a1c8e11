// Context-parallel attention by a ring (ContextAttention, --cp_comm=ring).
//
// Each rank splits its qkv into queries and a key/value block
// (framework/kernels/block_attention.h: SplitQkv) and attends its queries
// to its own block first; the blocks then pass around the cp group (to
// rank r+1, from rank r-1) in cp-1 steps, each transfer posted before the
// block in hand is attended so that it overlaps the compute, and the
// partial results merge by their log-sum-exps. The layer keeps the output
// and the log-sum-exps (B, H, T/cp) in place of the probabilities.
//
// Backward passes the key/value blocks around again together with their
// gradients: each rank recomputes a block's probabilities from the merged
// log-sum-exp and computes its queries' share of the block's gradient (and
// adds to its own dq) while the previous block's summed gradient travels
// on and the previous holders' sum of this block's arrives, then adds the
// two; after the last step a final transfer returns every block's
// gradient to its owner (the only transfer nothing overlaps). One step's
// transfers are a BatchSendRecv of one send and one receive per tensor, so
// a forward is cp-1 sends (and as many receives) of a (B, T/cp, 2·Hkv·D)
// block per rank, a backward 2·(cp-1) + 1.
//
// Document masking works across the ring: each block tests its keys'
// window positions against the queries' document starts.
#ifndef TRELLIS_PARALLEL_RING_ATTENTION_H_
#define TRELLIS_PARALLEL_RING_ATTENTION_H_

#include <memory>
#include <vector>

#include "parallel/context_parallel.h"

namespace trellis {

class RingAttention : public ContextAttention {
 public:
  RingAttention(Communicator& cp, const ContextSplit& split);

  ContextComm comm() const override { return ContextComm::kRing; }
  // saved: (B, H, T/cp) log-sum-exps; nothing kept; scratch: the queries
  // (B, T/cp, H·D), the block in hand and the next (2, B, T/cp, 2·Hkv·D),
  // one block's output and log-sum-exps, dq, and the block gradients: the
  // one travelling, the one arriving and the share being computed (3, B,
  // T/cp, 2·Hkv·D).
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
  // Posts the transfers of one ring step: each of `send` to the next
  // rank, each of `recv` from the previous one.
  std::vector<std::unique_ptr<Request>> Post(
      const std::vector<Tensor>& send, const std::vector<Tensor>& recv) const;

  Tensor q_pos_;               // (T/cp) int32, this rank's positions
  std::vector<Tensor> k_pos_;  // per rank: (T/cp) int32
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_RING_ATTENTION_H_
