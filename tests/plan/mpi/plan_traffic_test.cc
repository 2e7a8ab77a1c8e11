// The plan's counted communication against the trainer's: for layouts of
// two ranks (dp2 under ZeRO 0, 1, 2 and 3 with several buckets; tp2 with and
// without sequence parallelism, with and without full recompute;
// tp2·pp1 under ZB-H1's split backward is not a layout, so pp2 runs 1F1B
// and ZB-H1 with tp1), PlannedStepTraffic's tp and dp calls and bytes per
// operation must equal what the communicators count in one Trainer::Step.
// On four ranks (plan_traffic_mpi_test_np4): ZeRO-3 on dp2·pp2 under
// ZB-H1, with and without full recompute, and on dp2·tp2. Context
// parallelism (the cp group's counts too): cp2 ring and all-to-all, with
// ZeRO-1 and selective or full recompute; on four ranks dp2·cp2 under
// ZeRO-3 and cp2·tp2 with sequence parallelism both ways, and ZeRO-2
// beside tp and sequence parallelism (each rank sums over tp only the norm
// gradients in its own ZeRO block: the plan of its own dp·cp rank). ZeRO-3's
// weight gathers are also checked against ShardedParameters' own count, and
// against their floor: every gather unit of the stage (the embedding, each
// block, the head) at least once per pass (F, B, and ZB-H1's W) and
// microbatch. A mixture of experts under expert parallelism (its
// expert-data group's counts too): dp2·ep2 under ZeRO 0 and 3 (each rank
// alone holding its experts), and on four ranks dp4·ep2 under every ZeRO
// level and dp2·cp2·ep2 under ZeRO-3, the experts' buckets synced and
// gathered over the two ranks holding them; the ep group's token
// exchanges match in calls (their sizes are routing's) and its norm sum
// in bytes too.
// These are the lists EstimateStep costs, so what is costed is what runs.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/sharded_parameters.h"
#include "tests/tools/mpi/comm_stats_test_util.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/plan/layout_space.h"
#include "tools/plan/stage_facts.h"
#include "tools/plan/step_work.h"

namespace trellis {
namespace {

using mpitest::Layout;
using mpitest::Since;

struct TrafficCase {
  Layout layout;
  int64_t zero = 0;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
  int64_t loss_chunk_rows = 1024;
  bool moe = false;  // the tiny mixture of experts (mpitest::TinyMoe)
};

// `layout` with a mixture's experts over `ep` of its dp·cp ranks.
Layout WithEp(Layout layout, int ep) {
  layout.ep = ep;
  return layout;
}

Layout Cp(int dp, int cp, int tp, const char* comm) {
  Layout layout{dp, tp, 1};
  layout.cp = cp;
  layout.cp_comm = comm;
  return layout;
}

// `sizes_too` false: the calls only for sends and receives, whose sizes
// routing decides (the ep group's token exchanges).
void ExpectSame(const std::string& group, const CommStats& counted,
                const CommStats& planned, bool sizes_too = true) {
  for (int i = 0; i < static_cast<int>(CommOp::kCount); ++i) {
    const CommOp kind = static_cast<CommOp>(i);
    const char* op = CommOpName(kind);
    EXPECT_EQ(counted.calls[i], planned.calls[i]) << group << " " << op;
    if (!sizes_too && (kind == CommOp::kSend || kind == CommOp::kRecv)) {
      continue;
    }
    EXPECT_EQ(counted.bytes[i], planned.bytes[i]) << group << " " << op;
    EXPECT_EQ(counted.wire_bytes[i], planned.wire_bytes[i])
        << group << " " << op;
  }
}

std::vector<TrafficCase> Cases() {
  return {
      {{2, 1, 1}, 0},
      {{2, 1, 1}, 1},
      {{2, 1, 1}, 2},
      {{2, 1, 1}, 3},
      {{2, 1, 1}, 3, false, Recompute::kFull},
      {{1, 2, 1}},
      {{1, 2, 1}, 0, false, Recompute::kFull, 5},
      {{1, 2, 1}, 0, true},
      {{1, 2, 1}, 0, true, Recompute::kFull, 5},
      {{1, 2, 1}, 0, true, Recompute::kSelective},
      {{1, 1, 2, "zb-h1"}, 0, false, Recompute::kFull},
      // Four ranks: ZeRO-3 under ZB-H1 (a third gather pass, before the
      // deferred W) and beside tp.
      {{2, 1, 2, "zb-h1"}, 3},
      {{2, 1, 2, "zb-h1"}, 3, false, Recompute::kFull},
      {{2, 2, 1}, 3},
      // Context parallelism: the cp group's sends and receives, and the
      // gradient sync over dp·cp.
      {Cp(1, 2, 1, "ring")},
      {Cp(1, 2, 1, "a2a")},
      {Cp(1, 2, 1, "ring"), 1, false, Recompute::kSelective},
      {Cp(1, 2, 1, "a2a"), 0, false, Recompute::kFull},
      {Cp(2, 2, 1, "ring"), 3},
      {Cp(1, 2, 2, "ring"), 0, true},
      {Cp(1, 2, 2, "a2a"), 2, true},
      {Cp(1, 2, 2, "a2a"), 0, true},
      {Cp(1, 2, 2, "ring"), 2, true},
      {{2, 2, 1}, 2, true},
      {{2, 2, 1}, 2, false},
      {Cp(1, 2, 2, "ring"), 2, false},
      // Experts: the expert-data group's sync and gathers.
      {WithEp({2, 1, 1}, 2), 0, false, Recompute::kNone, 1024, true},
      {WithEp({2, 1, 1}, 2), 3, false, Recompute::kNone, 1024, true},
      {WithEp({4, 1, 1}, 2), 0, false, Recompute::kNone, 1024, true},
      {WithEp({4, 1, 1}, 2), 1, false, Recompute::kNone, 1024, true},
      {WithEp({4, 1, 1}, 2), 2, false, Recompute::kNone, 1024, true},
      {WithEp({4, 1, 1}, 2), 3, false, Recompute::kNone, 1024, true},
      {WithEp(Cp(2, 2, 1, "ring"), 2), 3, false, Recompute::kNone, 1024, true},
  };
}

TEST(PlanTrafficTest, PlannedCallsAreTheCountedOnes) {
  const int world = mpitest::WorldSize();
  ASSERT_TRUE(world == 2 || world == 4) << world;
  MpiRuntime runtime(nullptr, nullptr);
  const std::string dir = mpitest::SharedScratchDir("plan_traffic");
  const std::string data = dir + "/tokens.h5";
  ASSERT_TRUE(mpitest::WriteSharedTokenFile(data, 20000));
  const std::vector<TrafficCase> cases = Cases();
  for (const TrafficCase& c : cases) {
    if (c.layout.world() != world) continue;
    TrainOptions o = mpitest::TinyModelOptions(data);
    if (c.moe) o = mpitest::TinyMoe(o);
    o.zero = c.zero;
    o.sequence_parallel = c.sequence_parallel;
    o.recompute = c.recompute;
    o.loss_chunk_rows = c.loss_chunk_rows;
    o.dp_bucket_mb = 0.01;  // about 10 KiB: several buckets
    SCOPED_TRACE(absl::StrCat(c.layout.Name(), " zero ", c.zero,
                              c.sequence_parallel ? " sp " : " ",
                              RecomputeName(c.recompute)));
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(runtime, c.layout, o, MPI_COMM_WORLD);
    ASSERT_TRUE(run.ok()) << run.status();
    // The plan of the run's own resolved options, for this rank's stage.
    TrainOptions planned = run->trainer->options();
    planned.model.vocab_size = mpitest::kByteVocab.vocab_size;
    ASSERT_TRUE(ValidateLayout(planned, world).ok());
    const std::vector<StageFacts> stages =
        PlanStages(planned, nullptr, run->context->coord().d);
    const PlannedTraffic want =
        PlannedStepTraffic(planned, stages[run->context->coord().p]);
    const ProcessGroups& groups = run->context->groups();
    const ShardedParameters* sharded = run->trainer->sharded_parameters();
    ASSERT_EQ(sharded != nullptr, c.zero == 3);
    const int gather = static_cast<int>(CommOp::kAllGather);
    if (c.zero == 3) {
      // Every unit of the stage (its blocks and an end or two) per pass.
      const int64_t passes = c.layout.schedule == "zb-h1" ? 3 : 2;
      const int64_t units =
          planned.model.n_layer / c.layout.pp + 2 - (c.layout.pp > 1 ? 1 : 0);
      EXPECT_GE(want.dp.calls[gather], passes * planned.microbatches() * units);
    }
    for (int step = 1; step <= 2; ++step) {
      SCOPED_TRACE(absl::StrCat("step ", step));
      const CommStats tp = groups.tp->stats(), dp = groups.dp->stats();
      const CommStats expert_dp = groups.expert_dp->stats();
      const CommStats ep = groups.ep->stats();
      const CommStats cp =
          groups.cp != nullptr ? groups.cp->stats() : CommStats{};
      const int64_t gathers = sharded == nullptr ? 0 : sharded->gathers();
      ASSERT_TRUE(run->trainer->Step().ok());
      ExpectSame("tp", Since(*groups.tp, tp), want.tp);
      ExpectSame("dp", Since(*groups.dp, dp), want.dp);
      ExpectSame("expert_dp", Since(*groups.expert_dp, expert_dp),
                 want.expert_dp);
      ExpectSame("ep", Since(*groups.ep, ep), want.ep, /*sizes_too=*/false);
      ExpectSame("cp",
                 groups.cp != nullptr ? Since(*groups.cp, cp) : CommStats{},
                 want.cp);
      if (sharded != nullptr) {
        EXPECT_EQ(sharded->gathers() - gathers, want.dp.calls[gather]);
      }
    }
  }
  mpitest::RemoveSharedScratchDir(dir);
}

}  // namespace
}  // namespace trellis
