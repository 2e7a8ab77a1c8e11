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
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/mesh.h"
#include "parallel/mpi_communicator.h"
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

class ToyStage : public PipelineStageCallbacks {
 public:
  ToyStage(int stage, int num_stages, int v, int m, int pipeline)
      : stage_(stage),
        num_stages_(num_stages),
        v_(v),
        m_(m),
        pipeline_(pipeline),
        grad_(v, 0.0) {
    for (int k = 0; k < 4; ++k) {
      buffers_[k].resize(v * m);
      for (Tensor& t : buffers_[k]) t = Tensor::Zeros({kWidth}, DType::kF64);
    }
  }

  Tensor InputActivation(int u, int mb) override { return At(kX, u, mb); }
  Tensor OutputActivation(int u, int mb) override { return At(kY, u, mb); }
  Tensor OutputGradient(int u, int mb) override { return At(kDy, u, mb); }
  Tensor InputGradient(int u, int mb) override { return At(kDx, u, mb); }

  void Forward(int u, int mb) override {
    double* x = At(kX, u, mb).data<double>();
    double* y = At(kY, u, mb).data<double>();
    if (Chunk(u) == 0) {
      for (int i = 0; i < kWidth; ++i) x[i] = Input(mb, i, pipeline_);
    }
    for (int i = 0; i < kWidth; ++i) y[i] = W(u) * x[i];
    if (IsLast(u)) {
      for (int i = 0; i < kWidth; ++i) loss_ += y[i] / m_;
    }
  }
  void BackwardInput(int u, int mb) override {
    double* dy = At(kDy, u, mb).data<double>();
    double* dx = At(kDx, u, mb).data<double>();
    if (IsLast(u)) {
      for (int i = 0; i < kWidth; ++i) dy[i] = 1.0 / m_;
    }
    for (int i = 0; i < kWidth; ++i) dx[i] = W(u) * dy[i];
  }
  void BackwardWeight(int u, int mb) override {
    const double* x = At(kX, u, mb).data<double>();
    const double* dy = At(kDy, u, mb).data<double>();
    for (int i = 0; i < kWidth; ++i) grad_[u] += x[i] * dy[i];
  }

  int Chunk(int u) const { return u * num_stages_ + stage_; }
  bool IsLast(int u) const { return Chunk(u) == num_stages_ * v_ - 1; }
  double loss() const { return loss_; }
  double grad(int u) const { return grad_[u]; }

 private:
  enum Slot { kX, kY, kDy, kDx };
  Tensor At(Slot slot, int u, int mb) { return buffers_[slot][u * m_ + mb]; }
  double W(int u) const { return Weight(Chunk(u), pipeline_); }

  int stage_, num_stages_, v_, m_, pipeline_;
  std::vector<Tensor> buffers_[4];
  double loss_ = 0.0;
  std::vector<double> grad_;
};

class PipelineExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = std::make_unique<MpiRuntime>(nullptr, nullptr);
    ASSERT_EQ(runtime_->world_size(), 8) << "run with 8 ranks";
  }

  // Runs one step of `kind` on every pipeline of a (dp, tp, pp) mesh and
  // compares with the single-process reference.
  void RunAndCompare(int dp, int tp, int pp, ScheduleKind kind, int m,
                     int v = 1) {
    for (MpiP2P p2p : {MpiP2P::kEager, MpiP2P::kRendezvous}) {
      RunAndCompare(dp, tp, pp, kind, m, v, p2p);
    }
  }

  void RunAndCompare(int dp, int tp, int pp, ScheduleKind kind, int m, int v,
                     MpiP2P p2p) {
    SCOPED_TRACE(testing::Message()
                 << ScheduleKindName(kind) << " pp=" << pp << " m=" << m
                 << " v=" << v
                 << (p2p == MpiP2P::kRendezvous ? " rendezvous" : " eager"));
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
    Communicator& pipe =
        rendezvous != nullptr ? *rendezvous : *context->groups().pp;
    const int stage = pipe.rank();
    const int pipeline = context->coord().d * tp + context->coord().t;
    const std::vector<Action> actions = BuildSchedule(kind, stage, pp, m, v);
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
      ToyStage toy(stage, pp, v, m, pipeline);
      pipe.ResetStats();
      observed = 0;
      const PipelineStepStats stats = executor.Run(toy);
      EXPECT_EQ(observed, static_cast<int>(actions.size()));
      EXPECT_EQ(stats.actions, static_cast<int64_t>(actions.size()));
      EXPECT_GE(stats.busy_seconds, 0.0);
      EXPECT_GE(stats.idle_seconds, 0.0);
      EXPECT_LE(stats.busy_seconds + stats.idle_seconds,
                stats.total_seconds * 1.0001 + 1e-6);
      EXPECT_GE(stats.BubbleFraction(), 0.0);
      EXPECT_LE(stats.BubbleFraction(), 1.0);
      int sends = 0, recvs = 0;
      for (const Action& a : actions) {
        sends += IsSend(a.type);
        recvs += IsRecv(a.type);
      }
      EXPECT_EQ(pipe.stats().Calls(CommOp::kSend), sends);
      EXPECT_EQ(pipe.stats().Bytes(CommOp::kSend), sends * kWidth * 8);
      EXPECT_EQ(pipe.stats().Calls(CommOp::kRecv), recvs);
      for (int u = 0; u < v; ++u) {
        const int chunk = toy.Chunk(u);
        EXPECT_NEAR(toy.grad(u), ref.grad[chunk],
                    1e-12 * std::abs(ref.grad[chunk]))
            << "chunk " << chunk;
        if (toy.IsLast(u)) {
          EXPECT_NEAR(toy.loss(), ref.loss, 1e-12 * std::abs(ref.loss));
        }
      }
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

TEST_F(PipelineExecutorTest, EightStages) {
  RunAndCompare(1, 1, 8, ScheduleKind::k1F1B, 3);
  RunAndCompare(1, 1, 8, ScheduleKind::k1F1B, 16);
}

}  // namespace
}  // namespace trellis
