#include "transformer/llama/swiglu_mlp.h"

#include "framework/kernels/matmul.h"
#include "framework/kernels/swiglu.h"

namespace trellis {
namespace {

class SwiGluMlp : public BlockMlp {
 public:
  SwiGluMlp(int64_t width, Parameter& gate_up_w, Parameter& down_w)
      : width_(width),
        gate_up_w_(gate_up_w),
        down_w_(down_w),
        gate_up_proj_(gate_up_w),
        down_proj_(down_w) {
    // The fused projection's split must be the one the math assumes.
    TRELLIS_CHECK_EQ(gate_up_w.spec.groups, 2);
  }

  std::vector<Parameter*> parameters() const override {
    return {&gate_up_w_, &down_w_};
  }
  std::vector<Slot> Slots(int64_t n, DType dtype,
                          SlotPlaces places) const override {
    const int64_t f = width_;
    // The activation's gradient is scratch wherever gradients are made.
    const SlotPlace dact = places.grad == SlotPlace::kUnused
                               ? SlotPlace::kUnused
                               : SlotPlace::kWorkspace;
    return {{&BlockTensors::fc, {n, 2 * f}, dtype, places.input},
            {&BlockTensors::gelu, {n, f}, dtype, places.cheap},
            {&BlockTensors::dfc, {n, 2 * f}, dtype, places.grad},
            {&BlockTensors::dgelu, {n, f}, dtype, dact}};
  }
  void Up(BlockTensors& a) const override {
    const int64_t n = a.ln2.dim(0);
    Tensor fc = a.fc.Narrow(0, n), act = a.gelu.Narrow(0, n);
    gate_up_proj_.Forward(a.ln2, fc);
    SwiGluForward(fc, act);
  }
  void Activation(const Tensor& fc, Tensor& act) const override {
    SwiGluForward(fc, act);
  }
  const RowParallelLinear* down() const override { return &down_proj_; }
  void BackwardInput(Communicator&, BlockTensors& a,
                     Tensor& dln) const override {
    // dy -> d(swiglu) -> d(gate_up) -> dln.
    MatmulBackwardInput(a.dy, down_w_.value, a.dgelu, WeightLayout::kInOut,
                        GradWrite::kWrite);
    SwiGluBackwardWrite(a.fc, a.dgelu, a.dfc);
    MatmulBackwardInput(a.dfc, gate_up_w_.value, dln, WeightLayout::kInOut,
                        GradWrite::kWrite);
  }
  void WeightGradients(const BlockTensors& a, bool,
                       std::vector<ColumnSumJob>&) const override {
    Tensor no_bias;
    MatmulBackwardWeight(a.dy, a.gelu, down_w_.grad, no_bias);
    MatmulBackwardWeight(a.dfc, a.ln2, gate_up_w_.grad, no_bias);
  }

 private:
  int64_t width_;
  Parameter& gate_up_w_;
  Parameter& down_w_;
  ColumnParallelLinear gate_up_proj_;
  RowParallelLinear down_proj_;
};

}  // namespace

std::shared_ptr<const BlockMlp> NewSwiGluMlp(int64_t width,
                                             Parameter& gate_up_weight,
                                             Parameter& down_weight) {
  return std::make_shared<SwiGluMlp>(width, gate_up_weight, down_weight);
}

}  // namespace trellis
