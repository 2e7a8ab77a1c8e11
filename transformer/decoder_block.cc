#include "transformer/decoder_block.h"

#include "framework/kernels/attention.h"
#include "framework/kernels/matmul.h"

namespace trellis {

DecoderBlock::State DecoderBlock::NewState(int64_t batch, DType dtype,
                                           Device device) const {
  State s;
  for (const Slot& slot : Slots(batch, dtype, device)) {
    if (slot.place == Place::kState) {
      s.kept.*slot.member = Tensor::Empty(slot.shape, slot.dtype, device);
    }
  }
  s.y = Tensor::Empty({rows_.Local(batch * seq_len_), d_model_}, dtype, device);
  return s;
}

DecoderBlock::Workspace DecoderBlock::NewWorkspace(int64_t batch, DType dtype,
                                                   Device device) const {
  Workspace w;
  for (const Slot& slot : Slots(batch, dtype, device)) {
    if (slot.place == Place::kWorkspace) {
      w.shared.*slot.member = Tensor::Empty(slot.shape, slot.dtype, device);
    }
  }
  w.datt = Tensor::Empty({batch * seq_len_, local_width_}, dtype, device);
  if (rows_.on()) {
    w.partial = Tensor::Empty({batch * seq_len_, d_model_}, dtype, device);
  }
  return w;
}

size_t DecoderBlock::StateBytes(int64_t batch, DType dtype,
                                Device device) const {
  size_t bytes =
      rows_.Local(batch * seq_len_) * d_model_ * DTypeSize(dtype);  // y
  for (const Slot& slot : Slots(batch, dtype, device)) {
    if (slot.place == Place::kState) {
      bytes += NumElements(slot.shape) * DTypeSize(slot.dtype);
    }
  }
  return bytes;
}

size_t DecoderBlock::WorkspaceBytes(int64_t batch, DType dtype,
                                    Device device) const {
  size_t bytes = batch * seq_len_ * local_width_ * DTypeSize(dtype);  // datt
  if (rows_.on()) bytes += batch * seq_len_ * d_model_ * DTypeSize(dtype);
  for (const Slot& slot : Slots(batch, dtype, device)) {
    if (slot.place == Place::kWorkspace) {
      bytes += NumElements(slot.shape) * DTypeSize(slot.dtype);
    }
  }
  return bytes;
}

DecoderBlock::Tensors DecoderBlock::Use(const State& s,
                                        const Workspace& w) const {
  // Slot shapes do not matter here: only where each tensor lives.
  Tensors t;
  for (const Slot& slot : Slots(0, DType::kF32, Device::Cpu())) {
    t.*slot.member = slot.place == Place::kState ? s.kept.*slot.member
                                                 : w.shared.*slot.member;
  }
  return t;
}

DecoderBlock::SlotPlaces DecoderBlock::Places() const {
  const bool full = options_.recompute == Recompute::kFull;
  const bool keep_all = options_.recompute == Recompute::kNone;
  return SlotPlaces{
      .input = full ? Place::kWorkspace : Place::kState,
      .cheap = keep_all ? Place::kState : Place::kWorkspace,
      .grad = options_.defer_weight_grads ? Place::kState : Place::kWorkspace,
  };
}

DecoderBlock::Place DecoderBlock::DyPlace() const {
  if (options_.defer_weight_grads) return Place::kState;
  return rows_.on() ? Place::kWorkspace : Place::kUnused;
}

void DecoderBlock::TakeOutputGrad(Communicator& tp, const Tensor& dy,
                                  Tensors& a) const {
  if (DyPlace() == Place::kUnused) {
    a.dy = dy;
  } else {
    rows_.GatherOutputGrad(tp, dy, a.dy);
  }
}

void DecoderBlock::AttentionBackwardToQkv(const Tensor& out_proj,
                                          const Tensor& doc_start,
                                          int64_t qkv_width, int64_t heads,
                                          int64_t kv_heads, Tensors& a,
                                          Tensor& datt) const {
  MatmulBackwardInput(a.dx2, out_proj, datt, WeightLayout::kInOut,
                      GradWrite::kWrite);
  a.dqkv.Zero();  // AttentionBackward accumulates.
  const int64_t b = a.qkv.dim(0) / seq_len_;
  const Shape qkv_shape = {b, seq_len_, qkv_width};
  const Shape att_shape = {b, seq_len_, local_width_};
  Tensor dqkv = a.dqkv.View(qkv_shape);
  AttentionBackward(datt.View(att_shape), a.qkv.View(qkv_shape), doc_start,
                    a.att.View(att_shape), a.saved, heads, kv_heads, dqkv,
                    options_.attention);
}

void DecoderBlock::BackwardWeight(Communicator& tp, const Tensor& x, State& s,
                                  Workspace& work) const {
  if (!options_.defer_weight_grads) return;  // Done in BackwardInput.
  Tensors a = Use(s, work);
  Recompute(tp, x, s.doc_start, a, work.partial, /*need_activation=*/true);
  WeightGradients(x, a);
}

}  // namespace trellis
