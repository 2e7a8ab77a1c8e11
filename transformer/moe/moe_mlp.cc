#include "transformer/moe/moe_mlp.h"

#include <algorithm>
#include <utility>

#include "framework/host_sync.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/expert_rows.h"
#include "framework/kernels/matmul.h"
#include "framework/kernels/swiglu.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel.h"
#include "transformer/chunk_options.h"

namespace trellis {
namespace {

// The first `rows` rows of `t` (all of them in training; the cached
// forward's scratch holds more).
Tensor First(const Tensor& t, int64_t rows) { return t.Narrow(0, rows); }

// Counts from their host copy (no wait).
std::vector<int64_t> HostCounts(const Tensor& host) {
  TRELLIS_CHECK(host.device().is_cpu() && host.dtype() == DType::kI32);
  const int32_t* c = host.data<int32_t>();
  return std::vector<int64_t>(c, c + host.numel());
}

// The rows this rank's experts work on, and their gradients: the
// dispatched rows themselves without expert parallelism, else what the ep
// group sent.
struct ExpertRows {
  Tensor in, out, dout, din;
  Tensor counts;  // rows per (sender, own expert), sender-major, on the host
};

class MoeMlp : public BlockMlp {
 public:
  MoeMlp(const MoeMlpSpec& spec, Parameter& router,
         std::vector<Parameter*> gate_up, std::vector<Parameter*> down,
         SharedExpert shared)
      : spec_(spec),
        local_(spec.experts / spec.ep),
        router_(router),
        gate_up_(std::move(gate_up)),
        down_(std::move(down)),
        shared_(shared) {
    TRELLIS_CHECK(spec_.ep >= 1 && spec_.experts % spec_.ep == 0 &&
                  spec_.ep_rank >= 0 && spec_.ep_rank < spec_.ep);
    TRELLIS_CHECK(static_cast<int64_t>(gate_up_.size()) == local_ &&
                  static_cast<int64_t>(down_.size()) == local_);
    TRELLIS_CHECK(router_.spec.logical_shape.size() == 2 &&
                  router_.spec.logical_shape[1] == spec_.experts);
    for (int64_t e = 0; e < local_; ++e) {
      // The layers' own split checks, as Llama's MLP builds them.
      ColumnParallelLinear check_gate_up(*gate_up_[e]);
      RowParallelLinear check_down(*down_[e]);
      TRELLIS_CHECK_EQ(gate_up_[e]->spec.groups, 2);
    }
    TRELLIS_CHECK_EQ(spec_.shared_width > 0, has_shared());
    TRELLIS_CHECK_EQ(shared_.gate_up == nullptr, shared_.down == nullptr);
    if (has_shared()) {
      ColumnParallelLinear check_gate_up(*shared_.gate_up);
      RowParallelLinear check_down(*shared_.down);
      TRELLIS_CHECK_EQ(shared_.gate_up->spec.groups, 2);
    }
  }

  std::vector<Parameter*> parameters() const override {
    std::vector<Parameter*> params = {&router_};
    for (int64_t e = 0; e < local_; ++e) {
      params.push_back(gate_up_[e]);
      params.push_back(down_[e]);
    }
    if (has_shared()) {
      params.push_back(shared_.gate_up);
      params.push_back(shared_.down);
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
  bool has_shared() const { return shared_.gate_up != nullptr; }
  bool parallel() const { return spec_.ep > 1; }
  ExpertRows Rows(const BlockTensors& a) const {
    if (!parallel())
      return {a.moe_in, a.moe_out, a.dmoe_out, a.dmoe_in, a.host_counts};
    return {a.expert_in, a.expert_out, a.dexpert_out, a.dexpert_in,
            a.host_recv_counts};
  }
  // Rows sent to each ep rank, and received from each, this call, from
  // the host copies of the counts.
  std::vector<int64_t> SendRows(const Tensor& host_counts) const;
  std::vector<int64_t> RecvRows(const Tensor& host_recv_counts) const;
  // Calls fn(own expert, rows) for each (sender, own expert) block of
  // rows the experts received, `rows` narrowing an expert-side tensor to
  // the block.
  template <typename Fn>
  void ForEachBlock(const Tensor& host_counts, Fn&& fn) const {
    const std::vector<int64_t> count = HostCounts(host_counts);
    int64_t offset = 0;
    for (size_t b = 0; b < count.size(); ++b) {
      if (count[b] > 0) {
        fn(static_cast<int64_t>(b) % local_, [&, offset, b](const Tensor& t) {
          return t.Narrow(offset, count[b]);
        });
      }
      offset += count[b];
    }
  }
  // Sends the dispatched rows to their experts' ranks (and the counts).
  void Dispatch(BlockTensors& a) const;
  // The ranks a window's tokens are split over (1 without cp).
  static int64_t ContextSize(const BlockTensors& a) {
    return a.cp != nullptr ? a.cp->size() : 1;
  }
  // The expert counts of the whole window: this rank's, or when the
  // window is split window_counts, which SumWindowCounts fills (summed over
  // cp) in Up.
  static const Tensor& WindowCounts(const BlockTensors& a) {
    return ContextSize(a) == 1 ? a.counts : a.window_counts;
  }
  static const Tensor& SumWindowCounts(BlockTensors& a) {
    if (ContextSize(a) > 1) {
      a.window_counts.CopyFrom(a.counts);
      a.cp->AllReduce(a.window_counts, ReduceOp::kSum);
    }
    return WindowCounts(a);
  }

  MoeMlpSpec spec_;
  int64_t local_;  // experts held here
  Parameter& router_;
  std::vector<Parameter*> gate_up_;
  std::vector<Parameter*> down_;
  SharedExpert shared_;
};

std::vector<Slot> MoeMlp::Slots(int64_t n, DType dtype,
                                SlotPlaces places) const {
  const int64_t e = spec_.experts, f = spec_.width, nk = n * k();
  const int64_t c = router_.spec.logical_shape[0];
  // Rows the experts may receive: every sender's tokens routed here.
  const int64_t r = parallel() ? spec_.ep * n * std::min(k(), local_) : nk;
  const SlotPlace input = places.input, grad = places.grad;
  // Gradients only BackwardInput reads are scratch wherever gradients are
  // made; so are the buffers only the exchanges read.
  const SlotPlace scratch =
      grad == SlotPlace::kUnused ? SlotPlace::kUnused : SlotPlace::kWorkspace;
  using B = BlockTensors;
  std::vector<Slot> slots = {
      {&B::logits, {n, e}, dtype, input},
      {&B::choice, {n, k()}, DType::kI32, input},
      {&B::choice_weight, {n, k()}, dtype, input},
      {&B::route, {nk}, DType::kI32, input},
      {&B::counts, {e}, DType::kI32, input},
      {&B::host_counts, {e}, DType::kI32, input, /*host=*/true},
      {&B::window_counts, {e}, DType::kI32, input},
      {&B::route_losses, {2}, StatsDType(dtype), input},
      {&B::moe_in, {nk, c}, dtype, input},
      {&B::fc, {r, 2 * f}, dtype, input},
      {&B::gelu, {r, f}, dtype, places.cheap},
      {&B::moe_out, {nk, c}, dtype, input},
      {&B::dlogits, {n, e}, dtype, grad},
      {&B::dfc, {r, 2 * f}, dtype, grad},
      {&B::dchoice, {n, k()}, dtype, scratch},
      {&B::dgelu, {r, f}, dtype, scratch},
      {&B::dmoe_in, {nk, c}, dtype, scratch},
  };
  if (has_shared()) {
    // Its activation is kept (the skeleton recomputes only the experts').
    const int64_t fs = spec_.shared_width;
    const SlotPlace combined = input == SlotPlace::kUnused
                                   ? SlotPlace::kUnused
                                   : SlotPlace::kWorkspace;
    for (const Slot& s :
         std::vector<Slot>{{&B::shared_fc, {n, 2 * fs}, dtype, input},
                           {&B::shared_act, {n, fs}, dtype, input},
                           {&B::shared_dfc, {n, 2 * fs}, dtype, grad},
                           {&B::shared_dact, {n, fs}, dtype, scratch},
                           {&B::routed_out, {n, c}, dtype, combined}}) {
      slots.push_back(s);
    }
  }
  if (!parallel()) {
    slots.push_back({&B::dmoe_out, {nk, c}, dtype, grad});
    return slots;
  }
  const SlotPlace send =
      input == SlotPlace::kUnused ? SlotPlace::kUnused : SlotPlace::kWorkspace;
  for (const Slot& s : std::vector<Slot>{
           {&B::dmoe_out, {nk, c}, dtype, scratch},
           {&B::recv_counts, {spec_.ep * local_}, DType::kI32, input},
           {&B::host_recv_counts,
            {spec_.ep * local_},
            DType::kI32,
            input,
            /*host=*/true},
           {&B::expert_in, {r, c}, dtype, input},
           {&B::expert_out, {r, c}, dtype, send},
           {&B::dexpert_out, {r, c}, dtype, grad},
           {&B::dexpert_in, {r, c}, dtype, scratch}}) {
    slots.push_back(s);
  }
  return slots;
}

std::vector<int64_t> MoeMlp::SendRows(const Tensor& host_counts) const {
  const std::vector<int64_t> count = HostCounts(host_counts);
  std::vector<int64_t> rows(spec_.ep, 0);
  for (int64_t e = 0; e < spec_.experts; ++e) rows[e / local_] += count[e];
  return rows;
}

std::vector<int64_t> MoeMlp::RecvRows(const Tensor& host_recv_counts) const {
  const std::vector<int64_t> count = HostCounts(host_recv_counts);
  std::vector<int64_t> rows(spec_.ep, 0);
  for (size_t b = 0; b < count.size(); ++b) rows[b / local_] += count[b];
  return rows;
}

void MoeMlp::Dispatch(BlockTensors& a) const {
  TRELLIS_CHECK(a.ep != nullptr && a.ep->size() == spec_.ep &&
                a.ep->rank() == spec_.ep_rank)
      << "the MoE layer needs its expert-parallel group of " << spec_.ep;
  // Each rank's counts for the receiver's experts, then the rows.
  const std::vector<int64_t> per_rank(spec_.ep, local_);
  Tensor counts = a.counts.View({spec_.experts, 1});
  Tensor received = a.recv_counts.View({spec_.ep * local_, 1});
  AllToAllRows(*a.ep, counts, per_rank, received, per_rank);
  CopyToHost(a.recv_counts, a.host_recv_counts);
  AllToAllRows(*a.ep, a.moe_in, SendRows(a.host_counts), a.expert_in,
               RecvRows(a.host_recv_counts));
}

void MoeMlp::Up(BlockTensors& a) const {
  const int64_t n = a.ln2.dim(0), nk = n * k();
  Tensor logits = First(a.logits, n), choice = First(a.choice, n),
         weight = First(a.choice_weight, n), route = First(a.route, nk),
         in = First(a.moe_in, nk);
  Tensor no_bias;
  MatmulForward(a.ln2, router_.value, no_bias, logits);
  RouterTopK(logits, a.router_bias, spec_.router, choice, weight);
  RouteByExpert(choice, spec_.experts, route, a.counts);
  // The one host read of the counts for this microbatch's layer.
  CopyToHost(a.counts, a.host_counts);
  RouterLosses(logits, SumWindowCounts(a), spec_.router, a.route_losses);
  if (const int64_t cp = ContextSize(a); cp > 1) {
    // With the window's counts the kernel's aux is cp times this rank's
    // share (its shares f are over this rank's N rows): E·Σ f·P summed
    // over the cp ranks is the window's.
    Tensor aux = a.route_losses.Narrow(0, 1);
    Scale(aux, 1.0 / static_cast<double>(cp));
  }
  DispatchRows(a.ln2, route, in);
  if (parallel()) Dispatch(a);
  // The experts' outputs here too, so that recomputing Up (full
  // recomputation) refills what backward reads.
  const ExpertRows rows = Rows(a);
  ForEachBlock(rows.counts, [&](int64_t e, auto block) {
    Tensor fc = block(a.fc), act = block(a.gelu), y = block(rows.out);
    MatmulForward(block(rows.in), gate_up_[e]->value, no_bias, fc);
    SwiGluForward(fc, act);
    MatmulForward(act, down_[e]->value, no_bias, y);
  });
  if (parallel()) {
    AllToAllRows(*a.ep, a.expert_out, RecvRows(a.host_recv_counts), a.moe_out,
                 SendRows(a.host_counts));
  }
  if (has_shared()) {
    Tensor fc = First(a.shared_fc, n), act = First(a.shared_act, n);
    MatmulForward(a.ln2, shared_.gate_up->value, no_bias, fc);
    SwiGluForward(fc, act);
  }
}

void MoeMlp::Down(BlockTensors& a, Tensor& out) const {
  const int64_t n = a.ln2.dim(0), nk = n * k();
  if (!has_shared()) {
    CombineRows(First(a.moe_out, nk), First(a.route, nk),
                First(a.choice_weight, n), out);
    return;
  }
  // The shared expert's down GEMM adds the routed experts' sum.
  Tensor routed = First(a.routed_out, n), no_bias;
  CombineRows(First(a.moe_out, nk), First(a.route, nk),
              First(a.choice_weight, n), routed);
  MatmulForwardResidual(First(a.shared_act, n), shared_.down->value, no_bias,
                        routed, out);
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
  const ExpertRows rows = Rows(a);
  if (parallel()) {
    AllToAllRows(*a.ep, a.dmoe_out, SendRows(a.host_counts), a.dexpert_out,
                 RecvRows(a.host_recv_counts));
  }
  ForEachBlock(rows.counts, [&](int64_t e, auto block) {
    Tensor dact = block(a.dgelu), dfc = block(a.dfc), din = block(rows.din);
    MatmulBackwardInput(block(rows.dout), down_[e]->value, dact,
                        WeightLayout::kInOut, GradWrite::kWrite);
    SwiGluBackwardWrite(block(a.fc), dact, dfc);
    MatmulBackwardInput(dfc, gate_up_[e]->value, din, WeightLayout::kInOut,
                        GradWrite::kWrite);
  });
  if (parallel()) {
    AllToAllRows(*a.ep, a.dexpert_in, RecvRows(a.host_recv_counts), a.dmoe_in,
                 SendRows(a.host_counts));
  }
  DispatchRowsBackward(a.dmoe_in, a.route, dln);
  RouterTopKBackward(a.logits, a.choice, a.choice_weight, a.dchoice,
                     spec_.router, a.dlogits);
  // Under cp the window's counts make the aux gradient cp times this
  // rank's share; the cp ranks' gradients are averaged like the rest.
  const int64_t cp = ContextSize(a);
  RouterLossesBackward(
      a.logits, WindowCounts(a), spec_.router,
      a.loss_scale * spec_.aux_loss_coeff / static_cast<double>(cp),
      a.loss_scale * spec_.z_loss_coeff, a.dlogits);
  if (spec_.router_input_grad) {
    MatmulBackwardInput(a.dlogits, router_.value, dln);
  }
  if (has_shared()) {
    MatmulBackwardInput(a.dy, shared_.down->value, a.shared_dact,
                        WeightLayout::kInOut, GradWrite::kWrite);
    SwiGluBackwardWrite(a.shared_fc, a.shared_dact, a.shared_dfc);
    MatmulBackwardInput(a.shared_dfc, shared_.gate_up->value, dln);
  }
}

void MoeMlp::WeightGradients(const BlockTensors& a, bool,
                             std::vector<ColumnSumJob>&) const {
  Tensor no_bias;
  MatmulBackwardWeight(a.dlogits, a.ln2, router_.grad, no_bias);
  const ExpertRows rows = Rows(a);
  ForEachBlock(rows.counts, [&](int64_t e, auto block) {
    MatmulBackwardWeight(block(rows.dout), block(a.gelu), down_[e]->grad,
                         no_bias);
    MatmulBackwardWeight(block(a.dfc), block(rows.in), gate_up_[e]->grad,
                         no_bias);
  });
  if (has_shared()) {
    MatmulBackwardWeight(a.dy, a.shared_act, shared_.down->grad, no_bias);
    MatmulBackwardWeight(a.shared_dfc, a.ln2, shared_.gate_up->grad, no_bias);
  }
}

}  // namespace

std::shared_ptr<const BlockMlp> NewMoeMlp(const MoeMlpSpec& spec,
                                          Parameter& router,
                                          std::vector<Parameter*> gate_up,
                                          std::vector<Parameter*> down,
                                          SharedExpert shared) {
  return std::make_shared<MoeMlp>(spec, router, std::move(gate_up),
                                  std::move(down), shared);
}

}  // namespace trellis
