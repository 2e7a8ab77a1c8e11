// The plan on shapes it was not measured at: models of widths 64 to 512 and
// sequence lengths 32 to 512 that fall between the points of the kernel cost
// table (widths 64, 256, 1024; rows 32 to 2048), under dp, tp, pp (1F1B,
// GPipe, ZB-H1, interleaved) and ZeRO, on two ranks (and, run on four, the
// four-rank layouts). Planned memory against the arena's peak is checked
// (within 5%); the step time against the median of 5 timed steps is
// reported with the worst error, and checked only when
// TRELLIS_PLAN_TIME_TOLERANCE names a tolerance and the machine's load
// average does not exceed its cores (plan_run_util.h). By default two
// small shapes run on two ranks and one on four (about 20 s each on a
// shared 2-core machine), for CI; TRELLIS_PLAN_HELDOUT=full runs every
// shape (minutes; docs/planning.md has the figures). Rank 0 prints
// the table and writes it to <build>/plan_heldout_np<ranks>.md.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/plan/mpi/plan_run_util.h"

namespace trellis {
namespace {

constexpr int kWarmup = 2, kTimed = 5;

struct Shape {
  int64_t layers, width, heads, seq, micro_batch, global_batch;
  int ci_ranks;  // the default (CI) run's world sizes: 0 none, 2, or 4 (both)
};

std::vector<Shape> Shapes() {
  return {
      {6, 96, 4, 64, 2, 16, 4},   // 96 wide, T 64: priced 21-28% fast before
      {4, 160, 4, 32, 4, 16, 0},  // head width 40, 128 rows
      {4, 64, 2, 96, 2, 8, 2},    // the narrowest
      {4, 320, 4, 128, 2, 8, 0},  // head width 80
      {4, 448, 8, 256, 1, 8, 0},  // head width 56
      {2, 512, 8, 512, 1, 4, 0},  // the longest
  };
}

struct Layout {
  const char* what;
  int64_t dp, tp, pp;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int64_t virtual_stages = 1;
  int64_t zero = 0;
};

std::vector<Layout> Layouts(int world) {
  using S = ScheduleKind;
  if (world == 4) {
    return {{"dp4 zero-1", 4, 1, 1, S::k1F1B, 1, 1},
            {"dp2 tp2", 2, 2, 1},
            {"dp2 pp2 1f1b", 2, 1, 2},
            {"tp2 pp2 zb-h1", 1, 2, 2, S::kZeroBubbleH1},
            {"pp4 1f1b", 1, 1, 4}};
  }
  return {{"dp2", 2, 1, 1},
          {"dp2 zero-2", 2, 1, 1, S::k1F1B, 1, 2},
          {"tp2", 1, 2, 1},
          {"pp2 1f1b", 1, 1, 2},
          {"pp2 gpipe", 1, 1, 2, S::kGPipe},
          {"pp2 zb-h1", 1, 1, 2, S::kZeroBubbleH1},
          {"pp2 interleaved v2", 1, 1, 2, S::kInterleaved1F1B, 2}};
}

TrainOptions Options(const std::string& data, const Shape& s) {
  TrainOptions o = mpitest::TinyModelOptions(data);
  o.model.n_layer = s.layers;
  o.model.n_head = s.heads;
  o.model.d_model = s.width;
  o.model.seq_len = s.seq;
  o.micro_batch_size = s.micro_batch;
  o.global_batch_size = s.global_batch;
  o.steps = kWarmup + kTimed;
  o.straggler_every = 0;
  o.comm_timeout_s = 0;
  return o;
}

// Whether `l` runs on shape `s`: heads over tp, layers over pp's chunks,
// windows over dp and microbatches.
bool Fits(const Shape& s, const Layout& l) {
  return s.heads % l.tp == 0 && s.layers % (l.pp * l.virtual_stages) == 0 &&
         s.global_batch % (l.dp * s.micro_batch) == 0;
}

TEST(PlanHeldOutTest, PredictionsOnUnmeasuredShapes) {
  const int world = mpitest::WorldSize();
  ASSERT_TRUE(world == 2 || world == 4) << "run on 2 or 4 ranks";
  MpiRuntime runtime(nullptr, nullptr);
  const std::string dir = mpitest::SharedScratchDir("plan_heldout");
  const std::string data = dir + "/tokens.h5";
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(data, 400000));
  const char* which = std::getenv("TRELLIS_PLAN_HELDOUT");
  const bool full = which != nullptr && std::string(which) == "full";
  const ClusterSpec cluster =
      plantest::MeasuredCluster(runtime, Options(data, Shapes()[0]));
  std::string status;
  const double tolerance = plantest::TimeTolerance(&status);
  std::vector<plantest::Figures> rows;
  for (const Shape& s : Shapes()) {
    if (!full && s.ci_ranks < world) continue;
    for (const Layout& l : Layouts(world)) {
      if (!Fits(s, l)) continue;
      TrainOptions o = Options(data, s);
      o.dp = l.dp;
      o.tp = l.tp;
      o.pp = l.pp;
      o.schedule = l.schedule;
      o.virtual_stages = l.virtual_stages;
      o.zero = l.zero;
      // As plan_validation_test.cc: ZeRO's buckets of 1 MiB, so that
      // ZeRO-2 holds a few at a time (with one bucket of the whole
      // gradient the plan counts up to 9% more than the arena's peak).
      if (o.zero > 0) o.dp_bucket_mb = 1;
      plantest::Figures f = plantest::Measure(o, runtime, kWarmup, kTimed);
      f.what = absl::StrFormat("L%d C%d H%d T%d mbs%d: %s", s.layers, s.width,
                               s.heads, s.seq, s.micro_batch, l.what);
      plantest::Predict(o, cluster, f);
      // What the single-rate model (no table) said, for the record.
      ClusterSpec untabled = cluster;
      untabled.kernel_costs = nullptr;
      plantest::Figures without = f;
      plantest::Predict(o, untabled, without);
      f.untabled_ms = without.predicted_ms;
      rows.push_back(f);
      EXPECT_NEAR(f.planned_bytes, f.arena_peak_bytes,
                  0.05 * f.arena_peak_bytes)
          << f.what;
      if (tolerance > 0) {
        EXPECT_NEAR(f.predicted_ms, f.measured_ms, tolerance * f.measured_ms)
            << f.what;
      }
    }
  }
  if (mpitest::WorldRank() == 0) {
    const std::string table = absl::StrCat(
        status, "\n", plantest::Table(rows, cluster, kTimed, true));
    std::printf("%s", table.c_str());
    std::ofstream(
        absl::StrCat(TRELLIS_BINARY_DIR, "/plan_heldout_np", world, ".md"))
        << table;
  }
  mpitest::RemoveSharedScratchDir(dir);
}

}  // namespace
}  // namespace trellis
