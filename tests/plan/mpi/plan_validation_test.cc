// The plan against the runs it predicts: for seventeen layouts of a small
// model on two ranks of this machine (dp, tp, pp, cp by ring and
// all-to-all; every schedule; ZeRO-1 and -2; sequence parallelism;
// recompute), the planned memory of the largest
// rank against the arena's measured peak (within 5%), and the predicted step
// time against the measured median of timed steps. The memory is always
// checked; the time is a benchmark, not a timed test: it is reported, and
// checked only when TRELLIS_PLAN_TIME_TOLERANCE names a tolerance (0.15 for
// the planner's goal) and the machine's load average does not exceed its
// cores (the model gives each rank a core of its own; on a loaded machine
// the ranks wait on the scheduler inside every blocking collective, which no
// rate describes). docs/planning.md has the command and the figures. The CPU
// cluster is measured first, on every rank at once (each sees its share of the
// cores), as trellis-plan's cpu preset does, and the links over MPI itself.
// Rank 0 prints the table and writes it to <build>/plan_validation.md.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/plan/mpi/plan_run_util.h"

namespace trellis {
namespace {

constexpr int kWarmup = 2, kTimed = 5;

TrainOptions Base(const std::string& data) {
  TrainOptions o = mpitest::TinyModelOptions(data);
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.d_model = 128;
  o.model.seq_len = 64;
  o.micro_batch_size = 2;
  o.global_batch_size = 16;
  o.steps = kWarmup + kTimed;
  o.straggler_every = 0;
  o.comm_timeout_s = 0;
  return o;
}

struct Case {
  const char* what;
  int64_t dp, tp, pp;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int64_t virtual_stages = 1;
  int64_t micro_batch_size = 2;
  int64_t zero = 0;
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  double dp_bucket_mb = 25;
  int64_t cp = 1;
  const char* cp_comm = "ring";
  int64_t seq_len = 64;
};

// Context parallelism over the two ranks (each holds half of every
// window).
Case Context(const char* what, const char* comm,
             Recompute recompute = Recompute::kNone, int64_t seq_len = 64) {
  Case c{what, 1, 1, 1};
  c.seq_len = seq_len;
  c.cp = 2;
  c.cp_comm = comm;
  c.recompute = recompute;
  return c;
}

std::vector<Case> Cases() {
  using S = ScheduleKind;
  return {
      {"dp2", 2, 1, 1},
      {"dp2 zero-1", 2, 1, 1, S::k1F1B, 1, 2, 1},
      // Buckets of 1 MiB: ZeRO-2 holds a few at a time, not all of them.
      {"dp2 zero-2", 2, 1, 1, S::k1F1B, 1, 2, 2, Recompute::kNone, false, 1},
      {"dp2 full recompute", 2, 1, 1, S::k1F1B, 1, 2, 0, Recompute::kFull},
      {"dp2 mbs 4", 2, 1, 1, S::k1F1B, 1, 4},
      {"tp2", 1, 2, 1},
      {"tp2 selective", 1, 2, 1, S::k1F1B, 1, 2, 0, Recompute::kSelective},
      {"tp2 mbs 8", 1, 2, 1, S::k1F1B, 1, 8},
      {"tp2 sequence parallel", 1, 2, 1, S::k1F1B, 1, 2, 0, Recompute::kNone,
       true},
      {"pp2 1f1b", 1, 1, 2},
      {"pp2 gpipe", 1, 1, 2, S::kGPipe},
      {"pp2 zb-h1", 1, 1, 2, S::kZeroBubbleH1},
      {"pp2 interleaved v2", 1, 1, 2, S::kInterleaved1F1B, 2},
      {"pp2 1f1b mbs 4", 1, 1, 2, S::k1F1B, 1, 4},
      Context("cp2 ring", "ring"),
      Context("cp2 all-to-all", "a2a"),
      Context("cp2 ring selective", "ring", Recompute::kSelective),
      Context("cp2 ring T512", "ring", Recompute::kNone, 512),
      Context("cp2 all-to-all T512", "a2a", Recompute::kNone, 512),
      {"dp2 T512", 2, 1, 1, S::k1F1B, 1, 2, 0, Recompute::kNone, false, 25, 1,
       "ring", 512},
  };
}

TEST(PlanValidationTest, PredictionsMatchMeasuredRuns) {
  ASSERT_EQ(mpitest::WorldSize(), 2);
  MpiRuntime runtime(nullptr, nullptr);
  const std::string dir = mpitest::SharedScratchDir("plan_validation");
  const std::string data = dir + "/tokens.h5";
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(data, 200000));
  TrainOptions shape = Base(data);
  shape.model.vocab_size = mpitest::kByteVocab.vocab_size;
  const ClusterSpec cluster = plantest::MeasuredCluster(runtime, shape);
  std::string status;
  const double tolerance = plantest::TimeTolerance(&status);
  std::vector<plantest::Figures> rows;
  for (const Case& c : Cases()) {
    TrainOptions o = Base(data);
    o.dp = c.dp;
    o.tp = c.tp;
    o.pp = c.pp;
    o.schedule = c.schedule;
    o.virtual_stages = c.virtual_stages;
    o.micro_batch_size = c.micro_batch_size;
    o.zero = c.zero;
    o.recompute = c.recompute;
    o.sequence_parallel = c.sequence_parallel;
    o.dp_bucket_mb = c.dp_bucket_mb;
    o.cp = c.cp;
    o.cp_comm = c.cp_comm;
    o.model.seq_len = c.seq_len;
    plantest::Figures f = plantest::Measure(o, runtime, kWarmup, kTimed);
    f.what = c.what;
    // These runs save no checkpoint: the plan's checkpoint I/O term
    // (between steps) is checked by ZeroMomentsIoTest instead.
    plantest::Predict(o, cluster, f);
    rows.push_back(f);
    EXPECT_NEAR(f.planned_bytes, f.arena_peak_bytes, 0.05 * f.arena_peak_bytes)
        << c.what;
    if (tolerance > 0) {
      EXPECT_NEAR(f.predicted_ms, f.measured_ms, tolerance * f.measured_ms)
          << c.what;
    }
  }
  if (mpitest::WorldRank() == 0) {
    const std::string table =
        status + "\n" + plantest::Table(rows, cluster, kTimed);
    std::printf("%s", table.c_str());
    std::ofstream(std::string(TRELLIS_BINARY_DIR) + "/plan_validation.md")
        << table;
  }
  mpitest::RemoveSharedScratchDir(dir);
}

}  // namespace
}  // namespace trellis
