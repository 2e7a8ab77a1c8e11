#include "transformer/moe/moe_mlp.h"

#include <utility>

#include "framework/kernels/expert_rows.h"
#include "framework/kernels/matmul.h"
#include "framework/kernels/swiglu.h"
#include "parallel/tensor_parallel.h"

namespace trellis {
namespace {

// The first `rows` rows of `t` (all of them in training; the cached
// forward's scratch holds more).
Tensor First(const Tensor& t, int64_t rows) { return t.Narrow(0, rows); }

class MoeMlp : public BlockMlp {
 public:
  MoeMlp(const MoeMlpSpec& spec, Parameter& router,
         std::vector<Parameter*> gate_up, std::vector<Parameter*> down)
      : spec_(spec),
        router_(router),
        gate_up_(std::move(gate_up)),
        down_(std::move(down)) {
    TRELLIS_CHECK(static_cast<int64_t>(gate_up_.size()) == spec_.experts &&
                  static_cast<int64_t>(down_.size()) == spec_.experts);
    TRELLIS_CHECK(router_.spec.logical_shape.size() == 2 &&
                  router_.spec.logical_shape[1] == spec_.experts);
    for (int64_t e = 0; e < spec_.experts; ++e) {
      // The layers' own split checks, as Llama's MLP builds them.
      ColumnParallelLinear check_gate_up(*gate_up_[e]);
      RowParallelLinear check_down(*down_[e]);
      TRELLIS_CHECK_EQ(gate_up_[e]->spec.groups, 2);
    }
  }

  std::vector<Parameter*> parameters() const override {
    std::vector<Parameter*> params = {&router_};
    for (int64_t e = 0; e < spec_.experts; ++e) {
      params.push_back(gate_up_[e]);
      params.push_back(down_[e]);
    }
    return params;
  }

  std::vector<Slot> Slots(int64_t n, DType dtype,
                          SlotPlaces places) const override;
  void Up(BlockTensors& a) const override;
  void Activation(const Tensor& fc, Tensor& act) const override {
    SwiGluForward(fc, act);
  }
  const RowParallelLinear* down() const override { return nullptr; }
  void Down(BlockTensors& a, Tensor& out) const override;
  void BackwardInput(Communicator& tp, BlockTensors& a,
                     Tensor& dln) const override;
  void WeightGradients(const BlockTensors& a, bool,
                       std::vector<ColumnSumJob>&) const override;

 private:
  int64_t k() const { return spec_.router.top_k; }
  // Calls fn(e, rows of expert e) for each expert with rows, the rows
  // [offset, offset + count) of the expert-ordered tensors.
  template <typename Fn>
  void ForEachExpert(const Tensor& counts, Fn&& fn) const {
    const std::vector<int64_t> count = ExpertCounts(counts);
    int64_t offset = 0;
    for (int64_t e = 0; e < spec_.experts; ++e) {
      if (count[e] > 0) {
        fn(e, [&, offset, e](const Tensor& t) {
          return t.Narrow(offset, count[e]);
        });
      }
      offset += count[e];
    }
  }

  MoeMlpSpec spec_;
  Parameter& router_;
  std::vector<Parameter*> gate_up_;
  std::vector<Parameter*> down_;
};

std::vector<Slot> MoeMlp::Slots(int64_t n, DType dtype,
                                SlotPlaces places) const {
  const int64_t e = spec_.experts, f = spec_.width, nk = n * k();
  const int64_t c = router_.spec.logical_shape[0];
  const SlotPlace input = places.input, grad = places.grad;
  // Gradients only BackwardInput reads are scratch wherever gradients are
  // made.
  const SlotPlace scratch =
      grad == SlotPlace::kUnused ? SlotPlace::kUnused : SlotPlace::kWorkspace;
  using B = BlockTensors;
  return {
      {&B::logits, {n, e}, dtype, input},
      {&B::choice, {n, k()}, DType::kI32, input},
      {&B::choice_weight, {n, k()}, dtype, input},
      {&B::route, {nk}, DType::kI32, input},
      {&B::counts, {e}, DType::kI32, input},
      {&B::route_losses, {2}, dtype, input},
      {&B::moe_in, {nk, c}, dtype, input},
      {&B::fc, {nk, 2 * f}, dtype, input},
      {&B::gelu, {nk, f}, dtype, places.cheap},
      {&B::moe_out, {nk, c}, dtype, input},
      {&B::dlogits, {n, e}, dtype, grad},
      {&B::dmoe_out, {nk, c}, dtype, grad},
      {&B::dfc, {nk, 2 * f}, dtype, grad},
      {&B::dchoice, {n, k()}, dtype, scratch},
      {&B::dgelu, {nk, f}, dtype, scratch},
      {&B::dmoe_in, {nk, c}, dtype, scratch},
  };
}

void MoeMlp::Up(BlockTensors& a) const {
  const int64_t n = a.ln2.dim(0), nk = n * k();
  Tensor logits = First(a.logits, n), choice = First(a.choice, n),
         weight = First(a.choice_weight, n), route = First(a.route, nk),
         in = First(a.moe_in, nk), fc = First(a.fc, nk),
         act = First(a.gelu, nk);
  Tensor no_bias;
  MatmulForward(a.ln2, router_.value, no_bias, logits);
  RouterTopK(logits, no_bias, spec_.router, choice, weight);
  RouteByExpert(choice, spec_.experts, route, a.counts);
  RouterLosses(logits, a.counts, spec_.router, a.route_losses);
  DispatchRows(a.ln2, route, in);
  ForEachExpert(a.counts, [&](int64_t e, auto rows) {
    Tensor out = rows(fc);
    MatmulForward(rows(in), gate_up_[e]->value, no_bias, out);
  });
  SwiGluForward(fc, act);
  // The experts' outputs here too, so that recomputing Up (full
  // recomputation) refills what backward reads.
  Tensor expert_out = First(a.moe_out, nk);
  ForEachExpert(a.counts, [&](int64_t e, auto rows) {
    Tensor y = rows(expert_out);
    MatmulForward(rows(act), down_[e]->value, no_bias, y);
  });
}

void MoeMlp::Down(BlockTensors& a, Tensor& out) const {
  const int64_t n = a.ln2.dim(0), nk = n * k();
  CombineRows(First(a.moe_out, nk), First(a.route, nk),
              First(a.choice_weight, n), out);
}

void MoeMlp::BackwardInput(Communicator& tp, BlockTensors& a,
                           Tensor& dln) const {
  // dy -> the experts' outputs' and the weights' gradients (the latter
  // summed over tp) -> each expert's down and SwiGLU -> gate_up -> the
  // tokens' rows; the weights' gradient -> the router's logits (with the
  // balance losses') -> the router's input.
  CombineRowsBackward(a.dy, a.moe_out, a.route, a.choice_weight, a.dmoe_out,
                      a.dchoice);
  ReduceFromTp::Forward(tp, a.dchoice);
  ForEachExpert(a.counts, [&](int64_t e, auto rows) {
    Tensor dact = rows(a.dgelu);
    MatmulBackwardInput(rows(a.dmoe_out), down_[e]->value, dact,
                        WeightLayout::kInOut, GradWrite::kWrite);
  });
  SwiGluBackwardWrite(a.fc, a.dgelu, a.dfc);
  ForEachExpert(a.counts, [&](int64_t e, auto rows) {
    Tensor din = rows(a.dmoe_in);
    MatmulBackwardInput(rows(a.dfc), gate_up_[e]->value, din,
                        WeightLayout::kInOut, GradWrite::kWrite);
  });
  DispatchRowsBackward(a.dmoe_in, a.route, dln);
  RouterTopKBackward(a.logits, a.choice, a.choice_weight, a.dchoice,
                     spec_.router, a.dlogits);
  RouterLossesBackward(a.logits, a.counts, spec_.router,
                       a.loss_scale * spec_.aux_loss_coeff,
                       a.loss_scale * spec_.z_loss_coeff, a.dlogits);
  if (spec_.router_input_grad) {
    MatmulBackwardInput(a.dlogits, router_.value, dln);
  }
}

void MoeMlp::WeightGradients(const BlockTensors& a, bool,
                             std::vector<ColumnSumJob>&) const {
  Tensor no_bias;
  MatmulBackwardWeight(a.dlogits, a.ln2, router_.grad, no_bias);
  ForEachExpert(a.counts, [&](int64_t e, auto rows) {
    MatmulBackwardWeight(rows(a.dmoe_out), rows(a.gelu), down_[e]->grad,
                         no_bias);
    MatmulBackwardWeight(rows(a.dfc), rows(a.moe_in), gate_up_[e]->grad,
                         no_bias);
  });
}

}  // namespace

std::shared_ptr<const BlockMlp> NewMoeMlp(const MoeMlpSpec& spec,
                                          Parameter& router,
                                          std::vector<Parameter*> gate_up,
                                          std::vector<Parameter*> down) {
  return std::make_shared<MoeMlp>(spec, router, std::move(gate_up),
                                  std::move(down));
}

}  // namespace trellis
