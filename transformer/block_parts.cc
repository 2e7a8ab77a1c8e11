#include "transformer/block_parts.h"

#include "framework/kernels/elementwise.h"
#include "framework/kernels/qk_norm.h"
#include "transformer/chunk_options.h"

namespace trellis {

void BlockMlp::Down(BlockTensors&, Tensor&) const {
  TRELLIS_CHECK(false) << "this MLP's output is its row-parallel layer, down()";
}

int64_t BlockMlp::RoutedExperts() const {
  const SlotPlaces any{SlotPlace::kWorkspace, SlotPlace::kWorkspace,
                       SlotPlace::kWorkspace};
  for (const Slot& s : Slots(1, DType::kF32, any)) {
    if (s.member == &BlockTensors::counts) return s.shape[0];
  }
  return 0;
}

std::vector<Slot> QkNorm::Slots(int64_t n, DType dtype,
                                SlotPlaces places) const {
  // Statistics and the weight gradient in StatsDType: float32 under
  // bfloat16 activations, as the other norms' and the gradients they add to.
  const int64_t d = head_dim_, normed = heads_ + kv_heads_;
  const DType stats = StatsDType(dtype);
  return {{&BlockTensors::qk_in, {n, normed * d}, dtype, places.input},
          {&BlockTensors::qk_rstd, {n, normed}, stats, places.input},
          {&BlockTensors::dqk_weight, {2, d}, stats, places.grad}};
}

void QkNorm::Forward(Tensor& qkv, BlockTensors& a) const {
  QkNormForward(qkv, heads_, kv_heads_, q_weight_->value, k_weight_->value,
                eps_, a.qk_in, a.qk_rstd);
}

void QkNorm::BackwardInput(Tensor& dqkv, BlockTensors& a) const {
  QkNormBackward(dqkv, heads_, kv_heads_, a.qk_in, a.qk_rstd, q_weight_->value,
                 k_weight_->value, a.dqk_weight);
}

void QkNorm::WeightGradients(const BlockTensors& a) const {
  const int64_t d = head_dim_;
  const Tensor dq = a.dqk_weight.Narrow(0, 1).View({d});
  const Tensor dk = a.dqk_weight.Narrow(1, 1).View({d});
  Add(q_weight_->grad, dq, q_weight_->grad);
  Add(k_weight_->grad, dk, k_weight_->grad);
}

ColumnParallelLinear ColumnLayer(Parameter* weight, Parameter* bias) {
  TRELLIS_CHECK(weight != nullptr);
  return bias != nullptr ? ColumnParallelLinear(*weight, *bias)
                         : ColumnParallelLinear(*weight);
}

RowParallelLinear RowLayer(Parameter* weight, Parameter* bias) {
  TRELLIS_CHECK(weight != nullptr);
  return bias != nullptr ? RowParallelLinear(*weight, *bias)
                         : RowParallelLinear(*weight);
}

}  // namespace trellis
