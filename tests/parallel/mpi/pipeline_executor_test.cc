// The pipeline executor on a toy model, against the same model computed in
// one process. Chunk c (of P·v) holds one scalar weight w_c and computes
// y = w_c · x on a vector; the last chunk's loss is sum(y) / m. Every case
// runs twice: over the pp group's own MPI communicator, and over one in
// MpiP2P::kRendezvous mode (NCCL's semantics: synchronous sends, no tags,
// batches completing one after another), where an order that would
// deadlock on GPUs hangs.
#include "parallel/pipeline_executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/mesh.h"
#include "parallel/mpi_communicator.h"
#include "parallel/pipeline_buffers.h"
#include "parallel/schedule.h"

namespace trellis {
namespace {

constexpr int kWidth = 4;  // elements per activation

// Weights and inputs are formulas, distinct per pipeline (d, t).
double Weight(int chunk, int pipeline) {
  return 1.0 + 0.25 * chunk + 0.125 * pipeline;
}
double Input(int mb, int i, int pipeline) {
  return 0.5 + mb + 0.1 * i - 0.3 * pipeline;
}

struct Reference {
  double loss = 0.0;
  std::vector<double> grad;  // by chunk
};

Reference ComputeReference(int chunks, int m, int pipeline) {
  Reference ref;
  ref.grad.assign(chunks, 0.0);
  for (int mb = 0; mb < m; ++mb) {
    // x[c] is chunk c's input; dy[c] the gradient of its output.
    std::vector<std::vector<double>> x(chunks + 1, std::vector<double>(kWidth));
    for (int i = 0; i < kWidth; ++i) x[0][i] = Input(mb, i, pipeline);
    for (int c = 0; c < chunks; ++c) {
      for (int i = 0; i < kWidth; ++i)
        x[c + 1][i] = Weight(c, pipeline) * x[c][i];
    }
    for (int i = 0; i < kWidth; ++i) ref.loss += x[chunks][i] / m;
    double dy = 1.0 / m;  // the same for every element
    for (int c = chunks - 1; c >= 0; --c) {
      for (int i = 0; i < kWidth; ++i) ref.grad[c] += x[c][i] * dy;
      dy *= Weight(c, pipeline);
    }
  }
  return ref;
}

// With `slots` the transfer buffers are shared between microbatches as
// PipelineBufferSlots assigns them (as the trainer does); without, each
// (virtual stage, microbatch) has its own. Either way a compute copies what
// a later one needs (the input for W, the output gradient for W) into its
// own per-microbatch state, as a model chunk does.
class ToyStage : public PipelineStageCallbacks {
 public:
  ToyStage(int stage, int num_stages, int v, int m, int pipeline,
           const PipelineBufferSlots* slots)
      : stage_(stage),
        num_stages_(num_stages),
        v_(v),
        m_(m),
        pipeline_(pipeline),
        slots_(slots),
        grad_(v, 0.0) {
    for (auto* saved : {&saved_x_, &saved_dy_}) {
      saved->assign(v * m, std::vector<double>(kWidth, 0.0));
    }
  }

  Tensor InputActivation(int u, int mb) override {
    return At(PipelineBuffer::kInputActivation, u, mb);
  }
  Tensor OutputActivation(int u, int mb) override {
    return At(PipelineBuffer::kOutputActivation, u, mb);
  }
  Tensor OutputGradient(int u, int mb) override {
    return At(PipelineBuffer::kOutputGradient, u, mb);
  }
  Tensor InputGradient(int u, int mb) override {
    return At(PipelineBuffer::kInputGradient, u, mb);
  }

  void Forward(int u, int mb) override {
    std::vector<double>& x = saved_x_[u * m_ + mb];
    const double* in =
        Chunk(u) == 0 ? nullptr : InputActivation(u, mb).data<double>();
    for (int i = 0; i < kWidth; ++i) {
      x[i] = in == nullptr ? Input(mb, i, pipeline_) : in[i];
    }
    if (IsLast(u)) {
      for (int i = 0; i < kWidth; ++i) loss_ += W(u) * x[i] / m_;
      return;
    }
    double* y = OutputActivation(u, mb).data<double>();
    for (int i = 0; i < kWidth; ++i) y[i] = W(u) * x[i];
  }
  void BackwardInput(int u, int mb) override {
    std::vector<double>& dy = saved_dy_[u * m_ + mb];
    const double* in =
        IsLast(u) ? nullptr : OutputGradient(u, mb).data<double>();
    for (int i = 0; i < kWidth; ++i) dy[i] = in == nullptr ? 1.0 / m_ : in[i];
    if (Chunk(u) == 0) return;
    double* dx = InputGradient(u, mb).data<double>();
    for (int i = 0; i < kWidth; ++i) dx[i] = W(u) * dy[i];
  }
  void BackwardWeight(int u, int mb) override {
    const std::vector<double>& x = saved_x_[u * m_ + mb];
    const std::vector<double>& dy = saved_dy_[u * m_ + mb];
    for (int i = 0; i < kWidth; ++i) grad_[u] += x[i] * dy[i];
  }

  int Chunk(int u) const { return u * num_stages_ + stage_; }
  bool IsLast(int u) const { return Chunk(u) == num_stages_ * v_ - 1; }
  double loss() const { return loss_; }
  double grad(int u) const { return grad_[u]; }
  // Transfer buffers allocated.
  size_t buffers() const { return buffers_.size(); }

 private:
  Tensor At(PipelineBuffer kind, int u, int mb) {
    const int index = slots_ == nullptr ? mb : slots_->slot(kind, u, mb);
    Tensor& t = buffers_[{static_cast<int>(kind), u, index}];
    if (!t.defined()) t = Tensor::Zeros({kWidth}, DType::kF64);
    return t;
  }
  double W(int u) const { return Weight(Chunk(u), pipeline_); }

  int stage_, num_stages_, v_, m_, pipeline_;
  const PipelineBufferSlots* slots_;
  std::map<std::tuple<int, int, int>, Tensor> buffers_;
  std::vector<std::vector<double>> saved_x_, saved_dy_;
  double loss_ = 0.0;
  std::vector<double> grad_;
};

// Wraps a pipeline communicator so that a send counts as in flight until it
// is waited on (Poll never reports it done: the slowest transport allowed)
// and fails the test if its buffer changed before then: the executor let a
// compute or a receive overwrite data that was still being sent.
class SendGuard : public Communicator {
 public:
  explicit SendGuard(Communicator& inner)
      : Communicator(inner.name(), inner.rank(), inner.size()), inner_(inner) {}
  int overwritten() const { return *overwritten_; }

 protected:
  std::vector<std::unique_ptr<Request>> DoBatchSendRecv(
      const std::vector<P2POp>& ops) override {
    std::vector<std::unique_ptr<Request>> requests = inner_.BatchSendRecv(ops);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].type != P2POp::Type::kSend) continue;
      requests[i] = std::make_unique<Guarded>(std::move(requests[i]),
                                              ops[i].buffer, overwritten_);
    }
    return requests;
  }
  std::unique_ptr<Request> DoAllReduce(Tensor&, ReduceOp, bool) override {
    return Unused();
  }
  std::unique_ptr<Request> DoReduceScatter(const Tensor&, Tensor&, ReduceOp,
                                           bool) override {
    return Unused();
  }
  std::unique_ptr<Request> DoAllGather(const Tensor&, Tensor&, bool) override {
    return Unused();
  }
  void DoBroadcast(Tensor&, int) override { Unused(); }
  std::unique_ptr<Request> DoSend(const Tensor&, int, int) override {
    return Unused();
  }
  std::unique_ptr<Request> DoRecv(Tensor&, int, int) override {
    return Unused();
  }
  void DoBarrier() override { Unused(); }

 private:
  class Guarded : public Request {
   public:
    Guarded(std::unique_ptr<Request> inner, Tensor buffer,
            std::shared_ptr<int> overwritten)
        : inner_(std::move(inner)),
          buffer_(buffer),
          posted_(buffer.Clone()),
          overwritten_(std::move(overwritten)) {}
    ~Guarded() override { Wait(); }
    void Wait() override {
      if (inner_ == nullptr) return;
      if (std::memcmp(buffer_.raw(), posted_.raw(), buffer_.nbytes()) != 0) {
        ++*overwritten_;
      }
      inner_->Wait();
      inner_.reset();
    }
    bool Poll() override {
      if (inner_ != nullptr) inner_->Poll();  // progress, but stay pending
      return inner_ == nullptr;
    }

   private:
    std::unique_ptr<Request> inner_;
    Tensor buffer_, posted_;
    std::shared_ptr<int> overwritten_;
  };

  std::unique_ptr<Request> Unused() {
    ADD_FAILURE() << "the executor only sends and receives";
    return std::make_unique<DoneRequest>();
  }

  Communicator& inner_;
  std::shared_ptr<int> overwritten_ = std::make_shared<int>(0);
};

// The step's stats: every action counted, and the busy and idle times
// within the step's.
void ExpectStepStats(const PipelineStepStats& stats,
                     const std::vector<Action>& actions) {
  EXPECT_EQ(stats.actions, static_cast<int64_t>(actions.size()));
  EXPECT_GE(stats.busy_seconds, 0.0);
  EXPECT_GE(stats.idle_seconds, 0.0);
  EXPECT_LE(stats.busy_seconds + stats.idle_seconds,
            stats.total_seconds * 1.0001 + 1e-6);
  EXPECT_GE(stats.BubbleFraction(), 0.0);
  EXPECT_LE(stats.BubbleFraction(), 1.0);
}

// The pipeline group counted one send (of kWidth doubles) per send action
// and one receive per receive action.
void ExpectTransfersCounted(const CommStats& counted,
                            const std::vector<Action>& actions) {
  int sends = 0, recvs = 0;
  for (const Action& a : actions) {
    sends += IsSend(a.type);
    recvs += IsRecv(a.type);
  }
  EXPECT_EQ(counted.Calls(CommOp::kSend), sends);
  EXPECT_EQ(counted.Bytes(CommOp::kSend), sends * kWidth * 8);
  EXPECT_EQ(counted.Calls(CommOp::kRecv), recvs);
}

// Each of the stage's v chunks' gradients, and the last chunk's loss, are
// the single-process reference's to 1e-12 relative.
void ExpectMatchesReference(const ToyStage& toy, const Reference& ref, int v) {
  for (int u = 0; u < v; ++u) {
    const int chunk = toy.Chunk(u);
    EXPECT_NEAR(toy.grad(u), ref.grad[chunk], 1e-12 * std::abs(ref.grad[chunk]))
        << "chunk " << chunk;
    if (toy.IsLast(u)) {
      EXPECT_NEAR(toy.loss(), ref.loss, 1e-12 * std::abs(ref.loss));
    }
  }
}

class PipelineExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = std::make_unique<MpiRuntime>(nullptr, nullptr);
    ASSERT_EQ(runtime_->world_size(), 8) << "run with 8 ranks";
  }

  // Runs one step of `kind` on every pipeline of a (dp, tp, pp) mesh and
  // compares with the single-process reference. `slotted`: the stages share
  // transfer buffers between microbatches (PipelineBufferSlots), and every
  // send stays in flight until the executor waits for it, failing the test
  // if its buffer was overwritten first.
  void RunAndCompare(int dp, int tp, int pp, ScheduleKind kind, int m,
                     int v = 1, bool slotted = false) {
    for (MpiP2P p2p : {MpiP2P::kEager, MpiP2P::kRendezvous}) {
      RunAndCompare(dp, tp, pp, kind, m, v, p2p, slotted);
    }
  }

  void RunAndCompare(int dp, int tp, int pp, ScheduleKind kind, int m, int v,
                     MpiP2P p2p, bool slotted) {
    SCOPED_TRACE(testing::Message()
                 << ScheduleKindName(kind) << " pp=" << pp << " m=" << m
                 << " v=" << v
                 << (p2p == MpiP2P::kRendezvous ? " rendezvous" : " eager")
                 << (slotted ? " slotted" : ""));
    absl::StatusOr<Mesh> mesh = Mesh::Create(8, dp, tp, pp);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    absl::StatusOr<ParallelContext> context =
        ParallelContext::Create(*runtime_, *mesh);
    ASSERT_TRUE(context.ok()) << context.status();
    std::unique_ptr<Communicator> rendezvous;
    if (p2p == MpiP2P::kRendezvous) {
      auto* mpi = dynamic_cast<MpiCommunicator*>(context->groups().pp);
      ASSERT_NE(mpi, nullptr);
      MPI_Comm dup;
      ASSERT_EQ(MPI_Comm_dup(mpi->comm(), &dup), MPI_SUCCESS);
      rendezvous = std::make_unique<MpiCommunicator>("pp", dup, /*owned=*/true,
                                                     MpiP2P::kRendezvous);
    }
    Communicator& transport =
        rendezvous != nullptr ? *rendezvous : *context->groups().pp;
    std::unique_ptr<SendGuard> guard;
    if (slotted) guard = std::make_unique<SendGuard>(transport);
    Communicator& pipe = slotted ? *guard : transport;
    const int stage = pipe.rank();
    const int pipeline = context->coord().d * tp + context->coord().t;
    const std::vector<Action> actions = BuildSchedule(kind, stage, pp, m, v);
    const PipelineBufferSlots slots = PipelineBufferSlots::Assign(actions, v);
    PipelineExecutor executor(pipe, actions, v);
    int observed = 0;
    // A batch's transfers share its posting span; a compute starts after
    // everything before it.
    PipelineExecutor::Clock::time_point last_start{}, last_end{};
    executor.set_observer([&](const Action& a, const ActionTiming& t) {
      EXPECT_EQ(a, actions[observed]);
      EXPECT_LE(last_start, t.start);
      if (IsCompute(a.type)) {
        EXPECT_LE(last_end, t.start);
      }
      EXPECT_LE(t.start, t.end);
      last_start = t.start;
      last_end = std::max(last_end, t.end);
      ++observed;
    });
    const Reference ref = ComputeReference(pp * v, m, pipeline);
    for (int step = 0; step < 2; ++step) {  // a second step reuses it all
      ToyStage toy(stage, pp, v, m, pipeline, slotted ? &slots : nullptr);
      pipe.ResetStats();
      observed = 0;
      const PipelineStepStats stats = executor.Run(toy);
      EXPECT_EQ(observed, static_cast<int>(actions.size()));
      ExpectStepStats(stats, actions);
      ExpectTransfersCounted(pipe.stats(), actions);
      if (slotted) {
        EXPECT_EQ(guard->overwritten(), 0) << "sends overwritten in flight";
        int planned = 0;
        for (int k = 0; k < kNumPipelineBuffers; ++k) {
          for (int u = 0; u < v; ++u) {
            planned += slots.count(static_cast<PipelineBuffer>(k), u);
          }
        }
        EXPECT_EQ(toy.buffers(), static_cast<size_t>(planned));
      }
      ExpectMatchesReference(toy, ref, v);
    }
  }

  std::unique_ptr<MpiRuntime> runtime_;
};

TEST_F(PipelineExecutorTest, GPipeAndOneFOneBMatchOneProcess) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int m : {1, 3, 8}) {
      RunAndCompare(/*dp=*/2, /*tp=*/2, /*pp=*/2, kind, m);
      RunAndCompare(/*dp=*/1, /*tp=*/2, /*pp=*/4, kind, m);
    }
  }
}

TEST_F(PipelineExecutorTest, ZeroBubbleH1MatchesOneProcess) {
  for (int m : {1, 3, 8}) {
    RunAndCompare(2, 2, 2, ScheduleKind::kZeroBubbleH1, m);
    RunAndCompare(1, 2, 4, ScheduleKind::kZeroBubbleH1, m);
  }
}

TEST_F(PipelineExecutorTest, InterleavedMatchesOneProcess) {
  RunAndCompare(2, 2, 2, ScheduleKind::kInterleaved1F1B, 2, 2);
  RunAndCompare(2, 2, 2, ScheduleKind::kInterleaved1F1B, 6, 3);
  RunAndCompare(1, 2, 4, ScheduleKind::kInterleaved1F1B, 8, 2);
  RunAndCompare(1, 1, 8, ScheduleKind::kInterleaved1F1B, 8, 2);
}

// Transfer buffers shared between microbatches: many microbatches through
// few buffers, with every send held in flight until the executor waits for
// it, under every schedule kind.
TEST_F(PipelineExecutorTest, SharedBuffersMatchOneProcess) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B,
                            ScheduleKind::kZeroBubbleH1}) {
    RunAndCompare(2, 2, 2, kind, 5, 1, /*slotted=*/true);
    RunAndCompare(1, 2, 4, kind, 16, 1, /*slotted=*/true);
    RunAndCompare(1, 1, 8, kind, 24, 1, /*slotted=*/true);
  }
  RunAndCompare(1, 2, 4, ScheduleKind::kInterleaved1F1B, 16, 2, true);
  RunAndCompare(2, 2, 2, ScheduleKind::kInterleaved1F1B, 6, 3, true);
}

TEST_F(PipelineExecutorTest, EightStages) {
  RunAndCompare(1, 1, 8, ScheduleKind::k1F1B, 3);
  RunAndCompare(1, 1, 8, ScheduleKind::k1F1B, 16);
}

}  // namespace
}  // namespace trellis
