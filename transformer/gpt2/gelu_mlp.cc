#include "transformer/gpt2/gelu_mlp.h"

#include "framework/kernels/gelu.h"
#include "framework/kernels/matmul.h"

namespace trellis {
namespace {

class GeluMlp : public BlockMlp {
 public:
  GeluMlp(int64_t width, Parameter& fc_w, Parameter& fc_b, Parameter& proj_w,
          Parameter& proj_b)
      : width_(width),
        fc_w_(fc_w),
        fc_b_(fc_b),
        proj_w_(proj_w),
        proj_b_(proj_b),
        c_fc_(fc_w, fc_b),
        c_proj_(proj_w, proj_b) {}

  std::vector<Parameter*> parameters() const override {
    return {&fc_w_, &fc_b_, &proj_w_, &proj_b_};
  }
  std::vector<Slot> Slots(int64_t n, DType dtype,
                          SlotPlaces places) const override {
    const int64_t width = width_;
    return {{&BlockTensors::fc, {n, width}, dtype, places.input},
            {&BlockTensors::gelu, {n, width}, dtype, places.cheap},
            {&BlockTensors::dfc, {n, width}, dtype, places.grad}};
  }
  void Up(BlockTensors& a) const override {
    const int64_t n = a.ln2.dim(0);
    Tensor fc = a.fc.Narrow(0, n), act = a.gelu.Narrow(0, n);
    c_fc_.ForwardGelu(a.ln2, fc, act);
  }
  void Activation(const Tensor& fc, Tensor& act) const override {
    GeluForward(fc, act);
  }
  const RowParallelLinear* down() const override { return &c_proj_; }
  void BackwardInput(Communicator&, BlockTensors& a,
                     Tensor& dln) const override {
    // dy -> dfc (GELU's derivative in the GEMM's epilogue) -> dln.
    MatmulBackwardInputGelu(a.dy, proj_w_.value, a.fc, a.dfc);
    MatmulBackwardInput(a.dfc, fc_w_.value, dln, WeightLayout::kInOut,
                        GradWrite::kWrite);
  }
  void WeightGradients(const BlockTensors& a, bool bias_in_gemm,
                       std::vector<ColumnSumJob>& jobs) const override {
    Tensor no_bias;
    MatmulBackwardWeight(a.dy, a.gelu, proj_w_.grad,
                         bias_in_gemm ? proj_b_.grad : no_bias);
    MatmulBackwardWeight(a.dfc, a.ln2, fc_w_.grad,
                         bias_in_gemm ? fc_b_.grad : no_bias);
    if (!bias_in_gemm) {
      jobs.push_back({.dout = &a.dy, .db = &proj_b_.grad});
      jobs.push_back({.dout = &a.dfc, .db = &fc_b_.grad});
    }
  }

 private:
  int64_t width_;  // 4C/tp
  Parameter& fc_w_;
  Parameter& fc_b_;
  Parameter& proj_w_;
  Parameter& proj_b_;
  ColumnParallelLinear c_fc_;
  RowParallelLinear c_proj_;
};

}  // namespace

std::shared_ptr<const BlockMlp> NewGeluMlp(int64_t width, Parameter& fc_weight,
                                           Parameter& fc_bias,
                                           Parameter& proj_weight,
                                           Parameter& proj_bias) {
  return std::make_shared<GeluMlp>(width, fc_weight, fc_bias, proj_weight,
                                   proj_bias);
}

}  // namespace trellis
