#include "parallel/ring_attention.h"

#include <memory>
#include <utility>

#include "framework/kernels/block_attention.h"
#include "framework/kernels/elementwise.h"
#include "framework/status.h"

namespace trellis {
namespace {

Tensor PositionTensor(const std::vector<int32_t>& pos) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(pos.size())}, DType::kI32);
  std::copy(pos.begin(), pos.end(), t.data<int32_t>());
  return t;
}

// Slice i of a (2, ...) double buffer (or the (3, ...) gradient
// buffers), as (B, Tl, W).
Tensor Half(const Tensor& pair, int i) {
  return pair.Narrow(i, 1).View({pair.dim(1), pair.dim(2), pair.dim(3)});
}

void WaitAll(std::vector<std::unique_ptr<Request>>& requests) {
  for (auto& r : requests) r->Wait();
  requests.clear();
}

// The scratch's roles, in Slots' order.
enum Scratch { kQ, kKv, kOut, kLse, kDq, kDkv };

}  // namespace

ContextSlots RingAttention::Slots(int64_t B, int64_t H, int64_t Hkv,
                                  int64_t D) const {
  const int64_t Tl = split_.Local();
  const Shape rows{B, Tl, H * D};
  const Shape pair{2, B, Tl, 2 * Hkv * D};
  const Shape grads{3, B, Tl, 2 * Hkv * D};
  return ContextSlots{
      .saved = {B, H, Tl},
      .kept = {},
      .scratch = {{rows}, {pair}, {rows}, {{B, H, Tl}}, {rows}, {grads}}};
}

RingAttention::RingAttention(Communicator& cp, const ContextSplit& split)
    : ContextAttention(cp, split), q_pos_(PositionTensor(split.Mine())) {
  for (int r = 0; r < split.size(); ++r) {
    k_pos_.push_back(PositionTensor(split.Positions(r)));
  }
}

void RingAttention::Forward(const Tensor& qkv, const Tensor& doc_start,
                            int64_t n_head, int64_t n_kv_head, Tensor& out,
                            Tensor& lse, ContextTensors& t) const {
  std::vector<Tensor>& s = t.scratch;
  const int n = split_.size(), r = split_.rank();
  Tensor first = Half(s[kKv], 0);
  SplitQkv(qkv, n_head, n_kv_head, s[kQ], first);
  const Tensor* starts = doc_start.defined() ? &doc_start : nullptr;
  std::vector<std::unique_ptr<Request>> moving;
  for (int step = 0; step < n; ++step) {
    const Tensor held = Half(s[kKv], step % 2);
    // The next block travels while this one is attended.
    if (step + 1 < n) moving = Post({held}, {Half(s[kKv], (step + 1) % 2)});
    const BlockMask mask{&q_pos_, &k_pos_[(r - step + n) % n], starts};
    if (step == 0) {
      BlockAttentionForward(s[kQ], held, mask, n_head, n_kv_head, out, lse);
    } else {
      BlockAttentionForward(s[kQ], held, mask, n_head, n_kv_head, s[kOut],
                            s[kLse]);
      AttentionMergeBlock(out, lse, s[kOut], s[kLse]);
    }
    WaitAll(moving);
  }
}

void RingAttention::Backward(const Tensor& dout, const Tensor& qkv,
                             const Tensor& doc_start, const Tensor& out,
                             const Tensor& lse, int64_t n_head,
                             int64_t n_kv_head, Tensor& dqkv,
                             ContextTensors& t) const {
  std::vector<Tensor>& s = t.scratch;
  const int n = split_.size(), r = split_.rank();
  Tensor first = Half(s[kKv], 0);
  SplitQkv(qkv, n_head, n_kv_head, s[kQ], first);
  s[kDq].Zero();
  const Tensor* starts = doc_start.defined() ? &doc_start : nullptr;
  // Three gradient buffers: the block in hand's summed gradient on its way
  // to the next rank, the previous holders' sum of the next block arriving,
  // and this rank's share being computed.
  auto grad = [&s](int i) { return Half(s[kDkv], i); };
  int sum = 0;  // holds the last step's block gradient
  std::vector<std::unique_ptr<Request>> moving;
  for (int step = 0; step < n; ++step) {
    const Tensor held = Half(s[kKv], step % 2);
    const int mine = step == 0 ? 0 : (sum + 1) % 3, arriving = (sum + 2) % 3;
    std::vector<Tensor> send, recv;
    if (step + 1 < n) {
      send.push_back(held);
      recv.push_back(Half(s[kKv], (step + 1) % 2));
    }
    if (step > 0) {
      // The previous block's gradient moves on while this block's share
      // is computed; this block's previous holders' sum comes in.
      send.push_back(grad(sum));
      recv.push_back(grad(arriving));
    }
    if (!send.empty()) moving = Post(send, recv);
    Tensor share = grad(mine);
    share.Zero();
    const BlockMask mask{&q_pos_, &k_pos_[(r - step + n) % n], starts};
    BlockAttentionBackward(dout, s[kQ], held, mask, out, lse, n_head, n_kv_head,
                           s[kDq], share);
    WaitAll(moving);
    if (step > 0) Add(share, grad(arriving), share);
    sum = mine;
  }
  if (n > 1) {
    // The last block is the next rank's own: its whole gradient goes home,
    // and this rank's own block's comes in.
    const int home = (sum + 1) % 3;
    moving = Post({grad(sum)}, {grad(home)});
    WaitAll(moving);
    sum = home;
  }
  JoinQkv(s[kDq], grad(sum), n_head, n_kv_head, dqkv);
}

std::vector<std::unique_ptr<Request>> RingAttention::Post(
    const std::vector<Tensor>& send, const std::vector<Tensor>& recv) const {
  const int n = split_.size(), r = split_.rank();
  std::vector<P2POp> ops;
  for (size_t i = 0; i < send.size(); ++i) {
    ops.push_back(
        {P2POp::Type::kSend, send[i], (r + 1) % n, static_cast<int>(i)});
    ops.push_back(
        {P2POp::Type::kRecv, recv[i], (r - 1 + n) % n, static_cast<int>(i)});
  }
  return cp_.BatchSendRecv(ops);
}

}  // namespace trellis
