#include "transformer/norms.h"

#include "framework/kernels/layernorm.h"
#include "framework/kernels/rmsnorm.h"

namespace trellis {
namespace {

class LayerNorm : public BlockNorm {
 public:
  LayerNorm(Parameter& weight, Parameter& bias) : w_(weight), b_(bias) {}

  std::vector<Parameter*> parameters() const override { return {&w_, &b_}; }
  bool has_mean() const override { return true; }
  void Forward(const Tensor& x, Tensor& out, Tensor& mean,
               Tensor& rstd) const override {
    LayerNormForward(x, w_.value, b_.value, out, mean, rstd);
  }
  void AddForward(const Tensor& a, const Tensor& b, Tensor& sum, Tensor& out,
                  Tensor& mean, Tensor& rstd) const override {
    AddLayerNormForward(a, b, w_.value, b_.value, sum, out, mean, rstd);
  }
  void BackwardInput(const Tensor& dout, const Tensor& x, const Tensor& mean,
                     const Tensor& rstd, Tensor& dx) const override {
    LayerNormBackwardInput(dout, x, w_.value, mean, rstd, dx);
  }
  void BackwardInputResidual(const Tensor& dout, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd,
                             const Tensor& dresidual,
                             Tensor& dx) const override {
    LayerNormBackwardInputResidual(dout, x, w_.value, mean, rstd, dresidual,
                                   dx);
  }
  void BackwardWeight(const Tensor& dout, const Tensor& x, const Tensor& mean,
                      const Tensor& rstd) const override {
    LayerNormBackwardWeight(dout, x, mean, rstd, w_.grad, b_.grad);
  }
  // Summed with the block's biases in one pass.
  void BlockWeightGradients(const Tensor& dout, const Tensor& x,
                            const Tensor& mean, const Tensor& rstd,
                            std::vector<ColumnSumJob>& jobs) const override {
    jobs.push_back({.dout = &dout,
                    .x = &x,
                    .mean = &mean,
                    .rstd = &rstd,
                    .dw = &w_.grad,
                    .db = &b_.grad});
  }

 private:
  Parameter& w_;
  Parameter& b_;
};

class RmsNorm : public BlockNorm {
 public:
  RmsNorm(Parameter& weight, double eps) : w_(weight), eps_(eps) {}

  std::vector<Parameter*> parameters() const override { return {&w_}; }
  bool has_mean() const override { return false; }
  void Forward(const Tensor& x, Tensor& out, Tensor&,
               Tensor& rstd) const override {
    RmsNormForward(x, w_.value, eps_, out, rstd);
  }
  void AddForward(const Tensor& a, const Tensor& b, Tensor& sum, Tensor& out,
                  Tensor&, Tensor& rstd) const override {
    AddRmsNormForward(a, b, w_.value, eps_, sum, out, rstd);
  }
  void BackwardInput(const Tensor& dout, const Tensor& x, const Tensor&,
                     const Tensor& rstd, Tensor& dx) const override {
    RmsNormBackwardInput(dout, x, w_.value, rstd, dx);
  }
  void BackwardInputResidual(const Tensor& dout, const Tensor& x, const Tensor&,
                             const Tensor& rstd, const Tensor& dresidual,
                             Tensor& dx) const override {
    RmsNormBackwardInputResidual(dout, x, w_.value, rstd, dresidual, dx);
  }
  void BackwardWeight(const Tensor& dout, const Tensor& x, const Tensor&,
                      const Tensor& rstd) const override {
    RmsNormBackwardWeight(dout, x, rstd, w_.grad);
  }
  // Formed at once: ColumnSumsMany has no RMSNorm job.
  void BlockWeightGradients(const Tensor& dout, const Tensor& x,
                            const Tensor& mean, const Tensor& rstd,
                            std::vector<ColumnSumJob>&) const override {
    BackwardWeight(dout, x, mean, rstd);
  }

 private:
  Parameter& w_;
  double eps_;
};

}  // namespace

std::shared_ptr<const BlockNorm> NewLayerNorm(Parameter& weight,
                                              Parameter& bias) {
  return std::make_shared<LayerNorm>(weight, bias);
}

std::shared_ptr<const BlockNorm> NewRmsNorm(Parameter& weight, double eps) {
  return std::make_shared<RmsNorm>(weight, eps);
}

}  // namespace trellis
