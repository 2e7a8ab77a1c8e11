#include "transformer/decoder_block.h"

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

}  // namespace trellis
