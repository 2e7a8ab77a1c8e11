#include "tools/trainer/optim/optimizer.h"

#include <cmath>
#include <limits>
#include <vector>

#include "framework/kernels/elementwise.h"
#include "parallel/replicas.h"

namespace trellis {
DType MomentType(const Parameter& p) {
  return p.weights().dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
}

Optimizer::Optimizer(OptimizerConfig config, const ParameterSet& params,
                     NoMoments)
    : config_(config), params_(params) {}

StepReport Optimizer::BeginStep(double grad_norm, AdamWHyper& hyper) {
  StepReport report;
  report.grad_norm = grad_norm;
  report.lr = LearningRate(config_.schedule, step_);
  double scale = 1.0;
  if (config_.grad_clip > 0 && report.grad_norm > config_.grad_clip) {
    scale = config_.grad_clip / (report.grad_norm + 1e-6);
  }
  ++step_;
  hyper.lr = report.lr;
  hyper.beta1 = config_.beta1;
  hyper.beta2 = config_.beta2;
  hyper.eps = config_.eps;
  hyper.step = step_;
  hyper.grad_scale = scale;
  return report;
}

Optimizer::Optimizer(OptimizerConfig config, const ParameterSet& params)
    : config_(config), params_(params) {
  for (const Parameter* p : params.all()) {
    m_.push_back(
        Tensor::Zeros(p->value.shape(), MomentType(*p), p->value.device()));
    v_.push_back(
        Tensor::Zeros(p->value.shape(), MomentType(*p), p->value.device()));
  }
}

double Optimizer::GlobalGradNorm(Communicator& tp, Communicator& pp) const {
  Tensor total = Tensor::Empty({1}, DType::kF64);
  total.data<double>()[0] = StageGradSquares(tp);
  if (pp.size() > 1) pp.AllReduce(total, ReduceOp::kSum);
  return std::sqrt(total.data<double>()[0]);
}

double Optimizer::StageGradSquares(Communicator& tp) const {
  // One reduction over every counted gradient: on a GPU one host wait per
  // step rather than one per parameter.
  // Under expert parallelism the experts' squares are summed over the ep
  // group first: its ranks hold different experts.
  std::vector<const Tensor*> grads[2];
  std::vector<GradRange> ranges[2];
  for (const Parameter* p : params_.all()) {
    if (!p->primary) continue;
    const int expert = p->expert && expert_group_ != nullptr ? 1 : 0;
    grads[expert].push_back(&p->grad);
    ranges[expert].push_back({p, 0, p->numel()});
  }
  // Replicated pieces count on their owner only.
  double local = SumOfSquares(grads[0]) - UnownedGradSquares(ranges[0]);
  if (expert_group_ != nullptr) {
    Tensor experts = Tensor::Empty({1}, DType::kF64);
    experts.data<double>()[0] = SumOfSquares(grads[1]);
    expert_group_->AllReduce(experts, ReduceOp::kSum);
    local += experts.data<double>()[0];
  }
  Tensor total = Tensor::Empty({1}, DType::kF64);
  total.data<double>()[0] = local;
  if (tp.size() > 1) tp.AllReduce(total, ReduceOp::kSum);
  return total.data<double>()[0];
}

void Optimizer::PoisonGradient() {
  for (const Parameter* p : params_.all()) {
    if (!p->primary || p->grad.numel() == 0) continue;
    p->grad.View({p->grad.numel()})
        .Narrow(0, 1)
        .Fill(std::numeric_limits<double>::quiet_NaN());
    return;
  }
}

StepReport Optimizer::Apply(double grad_norm) {
  AdamWHyper hyper;
  const StepReport report = BeginStep(grad_norm, hyper);
  // One multi-tensor step, which also rounds each float32 master into its
  // bfloat16 value (RefreshFromMaster's work).
  const std::vector<Parameter*>& all = params_.all();
  std::vector<AdamWTensors> tensors;
  tensors.reserve(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    Parameter& p = *all[i];
    tensors.push_back(AdamWTensors{&p.grad, &p.weights(), &m_[i], &v_[i],
                                   p.decay ? config_.weight_decay : 0.0,
                                   p.master.defined() ? &p.value : nullptr});
  }
  AdamWStepMany(hyper, tensors);
  return report;
}

}  // namespace trellis
