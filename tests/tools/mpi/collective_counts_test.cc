// Collective counts: every call and byte the communicators count, against
// formulas in the layout and the rank's pipeline stage.
//
// With N = micro_batch·T rows of C floats, m microbatches per step, L the
// blocks on this rank, `first` / `last` whether it holds the model's first
// or last chunk, one Trainer::Step issues:
//   tp (tp > 1):  m·(4L + first + last + 2·K·last) + 1 all-reduces: 2 per
//                 block forward and 2 backward, the embedding's forward, the
//                 fused head's d(ln_f) (N·C floats, issued in forward), the
//                 cross-entropy's max and sums (r and 2r floats) for each of
//                 the K = ⌈N / R⌉ chunks of r ≤ R rows the head takes at once
//                 (R = loss_chunk_rows; 3N floats in all), and the gradient
//                 norm (one double);
//   dp (dp > 1):  one all-reduce per gradient bucket, all the local gradient
//                 bytes, and the loss average (one double);
//   pp (pp > 1):  per chunk on this stage, m activation sends and gradient
//                 receives unless it is the last chunk, m activation
//                 receives and gradient sends unless it is the first, all of
//                 N·C floats; and one all-reduce of two doubles (the
//                 stage's gradient squares and the loss, both sums);
//   embed (pp > 1, first or last stage): one all-reduce of the local `wte`
//                 gradient;
//   cp (cp > 1):  per block and microbatch, with K the (B, T/cp, 2·C/tp)
//                 key/value block: the ring's cp-1 sends of K forward and
//                 2·(cp-1)+1 backward (the blocks and their gradients);
//                 all-to-all's 4 exchanges of cp-1 sends each (qkv, the
//                 output; backward the output's and qkv's gradients), with
//                 (cp-1)/cp of the rank's 3·N·C/tp (qkv) or N·C/tp floats
//                 on the wire. Rows are then N = B·T/cp, and dp spans
//                 dp·cp ranks.
// The world group carries two all-reduces per step, none for a world of
// one: the step guard's verdict (one double), then the maxima (three
// doubles: the bubble, the memory high-water mark, the stop check). The
// step's scalars ride on as few collectives as their operators and order
// allow: five in all, where one each took eight. Every --straggler_every
// steps (10 by default: not within the steps counted here) one all-gather
// of each rank's compute time.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/comm_stats_test_util.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/trainer/trainer.h"
#include "transformer/decoder_block.h"
#include "transformer/model_family.h"

namespace trellis {
namespace {

using mpitest::Difference;
using mpitest::ExpectCallsAndBytes;
using mpitest::Layout;
using mpitest::Since;
using mpitest::Snapshot;
using mpitest::TotalBytes;

constexpr int64_t kFloat = 4;   // bytes per activation and gradient element
constexpr int64_t kDouble = 8;  // bytes per scalar reduction

// What a rank holds, from the layout alone.
struct StagePlan {
  int64_t layers = 0;    // blocks over this stage's chunks
  bool first = false;    // holds chunk 0 (embeds)
  bool last = false;     // holds the last chunk (head and loss)
  int64_t nonlast = 0;   // chunks here that send activations on
  int64_t nonfirst = 0;  // chunks here that send gradients back
};

StagePlan PlanFor(const TrainOptions& o, int stage) {
  const int64_t chunks = o.pp * o.virtual_stages;
  const std::vector<int64_t> layers =
      o.virtual_stages == 1 ? StageLayers(o.model.n_layer, o.pp, o.pp_layers)
                            : StageLayers(o.model.n_layer, chunks, {});
  StagePlan plan;
  for (int64_t v = 0; v < o.virtual_stages; ++v) {
    const int64_t k = v * o.pp + stage;
    plan.layers += layers[k];
    plan.first |= k == 0;
    plan.last |= k == chunks - 1;
    plan.nonlast += k != chunks - 1;
    plan.nonfirst += k != 0;
  }
  return plan;
}

// The local `wte` rows: the padded vocabulary's share.
int64_t LocalVocab(const TrainOptions& o) {
  return PaddedVocab(o.model.vocab_size, o.tp) / o.tp;
}

// Parameters and their elements on a rank (tied `wte` once).
int64_t LocalParameters(const StagePlan& plan) {
  return 12 * plan.layers + (plan.first || plan.last) + plan.first +
         2 * plan.last;
}
int64_t LocalElements(const TrainOptions& o, const StagePlan& plan) {
  const int64_t c = o.model.d_model, tp = o.tp;
  const int64_t per_layer = 6 * c + 12 * c * c / tp + 7 * c / tp;
  return plan.layers * per_layer +
         (plan.first || plan.last ? LocalVocab(o) * c : 0) +
         (plan.first ? o.model.seq_len * c : 0) + (plan.last ? 2 * c : 0);
}

void Add(CommStats& stats, CommOp op, int64_t calls, int64_t bytes) {
  stats.calls[static_cast<int>(op)] += calls;
  stats.bytes[static_cast<int>(op)] += bytes;
}

// Bytes a group moves in a step, split into what the analytic model counts
// (tensors of the model's size) and the small rest.
struct Volume {
  int64_t analytic = 0;
  int64_t extra = 0;
};

// The expected traffic of one step on a rank, by group name.
struct Traffic {
  std::map<std::string, CommStats> stats;
  std::map<std::string, Volume> volume;
};

Traffic ExpectedStepTraffic(const TrainOptions& o, MeshCoord coord,
                            bool bucket_per_parameter) {
  const StagePlan plan = PlanFor(o, coord.p);
  const int64_t m = o.microbatches();
  const int64_t n = o.micro_batch_size * o.local_seq_len();
  const int64_t nc = n * o.model.d_model;
  Traffic t;
  CommStats& world = t.stats["world"];
  // The step guard's verdict (one float64), then the maxima: bubble,
  // memory high-water mark, stop check (three).
  if (o.gradient_replicas() * o.tp * o.pp > 1) {
    Add(world, CommOp::kAllReduce, 2, 4 * kDouble);
  }
  CommStats& tp = t.stats["tp"];
  if (o.tp > 1) {
    const int64_t big = m * (4 * plan.layers + plan.first + plan.last);
    const int64_t r =
        o.loss_chunk_rows == 0 ? n : std::min<int64_t>(o.loss_chunk_rows, n);
    const int64_t chunks = (n + r - 1) / r;
    // Per chunk: max (r) and sums (2r); the chunks' rows add up to N.
    const int64_t stats = m * plan.last * 2 * chunks;
    Add(tp, CommOp::kAllReduce, big + stats + 1,
        kFloat * (big * nc + m * plan.last * 3 * n) + kDouble);
    t.volume["tp"] = {kFloat * big * nc,
                      kFloat * m * plan.last * 3 * n + kDouble};
  }
  CommStats& dp = t.stats["dp"];
  if (o.gradient_replicas() > 1) {
    const int64_t buckets = bucket_per_parameter ? LocalParameters(plan) : 1;
    const int64_t grads = kFloat * LocalElements(o, plan);
    Add(dp, CommOp::kAllReduce, buckets + 1, grads + kDouble);
    t.volume["dp"] = {grads, kDouble};
  }
  CommStats& pp = t.stats["pp"];
  if (o.pp > 1) {
    const int64_t messages = m * (plan.nonlast + plan.nonfirst);
    Add(pp, CommOp::kSend, messages, kFloat * messages * nc);
    Add(pp, CommOp::kRecv, messages, kFloat * messages * nc);
    Add(pp, CommOp::kAllReduce, 1, 2 * kDouble);
    t.volume["pp"] = {2 * kFloat * messages * nc, 2 * kDouble};
  }
  // Dense models send nothing over the expert-parallel groups.
  t.stats["ep"];
  t.stats["expert-dp"];
  CommStats& cp = t.stats["cp"];
  if (o.cp > 1) {
    const int64_t width = nc / o.tp;  // one rank's N·C/tp
    const int64_t blocks = m * plan.layers;
    if (o.cp_comm == "ring") {
      const int64_t sends = blocks * (3 * o.cp - 2);
      Add(cp, CommOp::kSend, sends, kFloat * sends * 2 * width);
      Add(cp, CommOp::kRecv, sends, kFloat * sends * 2 * width);
    } else {
      const int64_t sends = blocks * 4 * (o.cp - 1);
      const int64_t floats =
          blocks * 2 * (3 * width + width) / o.cp * (o.cp - 1);
      Add(cp, CommOp::kSend, sends, kFloat * floats);
      Add(cp, CommOp::kRecv, sends, kFloat * floats);
    }
  }
  if (plan.first || plan.last) {
    CommStats& embed = t.stats["embed"];
    if (o.pp > 1) {
      const int64_t wte = kFloat * LocalVocab(o) * o.model.d_model;
      Add(embed, CommOp::kAllReduce, 1, wte);
      t.volume["embed"] = {wte, 0};
    }
  }
  return t;
}

class CollectiveCountsTest
    : public mpitest::SharedTokenFileTest<CollectiveCountsTest> {
 public:
  static constexpr const char* kScratchTag = "counts";
  static constexpr int64_t kTokens = 20000;

 protected:
};

TEST_F(CollectiveCountsTest, BlockAllReducesTwiceForwardAndTwiceBackward) {
  ModelConfig config;
  config.n_layer = 1;
  config.n_head = 4;
  config.d_model = 32;
  config.seq_len = 16;
  const int64_t batch = 2, n = batch * config.seq_len, c = config.d_model;
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE(absl::StrCat("tp=", tp));
    absl::StatusOr<Mesh> mesh = Mesh::Create(mpitest::WorldSize(), 0, tp, 1);
    ASSERT_TRUE(mesh.ok()) << mesh.status();
    absl::StatusOr<ParallelContext> context =
        ParallelContext::Create(*runtime_, *mesh);
    ASSERT_TRUE(context.ok()) << context.status();
    Communicator& group = *context->groups().tp;
    const TpPlace place{tp, context->coord().t};
    ParameterSet params;
    AddModelParameters(config, ChunkPlan{0, 1, false, false}, place, 7,
                       Device::Cpu(), DType::kF32, params);
    const DecoderBlock block(config, 0, place, params);
    DecoderBlock::State state =
        block.NewState(batch, DType::kF32, Device::Cpu());
    DecoderBlock::Workspace work =
        block.NewWorkspace(batch, DType::kF32, Device::Cpu());
    Tensor x = Tensor::Empty({n, c}, DType::kF32);
    Tensor dy = Tensor::Empty({n, c}, DType::kF32);
    Tensor dx = Tensor::Empty({n, c}, DType::kF32);
    for (int64_t i = 0; i < n * c; ++i) {
      x.data<float>()[i] = 0.01f * static_cast<float>(i % 37) - 0.15f;
      dy.data<float>()[i] = 0.02f * static_cast<float>(i % 11) - 0.1f;
    }
    // One all-reduce of N·C floats per row-parallel layer (forward) and per
    // column-parallel layer (backward); none for a group of one.
    const int64_t calls = tp > 1 ? 2 : 0;
    CommStats want;
    Add(want, CommOp::kAllReduce, calls, calls * n * c * kFloat);
    CommStats before = group.stats();
    block.Forward(group, x, state, work);
    ExpectCallsAndBytes("tp forward", Since(group, before), want);
    before = group.stats();
    block.BackwardInput(group, x, dy, state, work, dx);
    ExpectCallsAndBytes("tp backward", Since(group, before), want);
    before = group.stats();
    block.BackwardWeight(group, x, state, work);
    ExpectCallsAndBytes("tp weight gradients", Since(group, before),
                        CommStats{});
  }
}

struct CountCase {
  Layout layout;
  bool bucket_per_parameter = false;
  int64_t loss_chunk_rows = 1024;  // N = 16 rows: 1024 means one chunk
};

mpitest::Layout CpLayout(int dp, int cp, int tp, int pp, const char* comm) {
  mpitest::Layout layout{dp, tp, pp};
  layout.cp = cp;
  layout.cp_comm = comm;
  return layout;
}

TEST_F(CollectiveCountsTest, TrainingStepTrafficFollowsTheLayout) {
  const std::vector<CountCase> cases = {
      {{2, 2, 2, "1f1b"}, false},
      {{2, 2, 2, "zb-h1"}, true, 5},  // head chunks of 5, 5, 5 and 1 rows
      {{2, 2, 2, "interleaved-1f1b", 2}, true},
      {{1, 2, 2, "interleaved-1f1b", 2}, false, 8},
      {{2, 1, 2, "gpipe"}, true},
      {{2, 2, 1}, true, 3},
      {{1, 1, 4, "1f1b"}, false},
      {CpLayout(1, 2, 1, 1, "ring"), false},
      {CpLayout(2, 2, 1, 1, "ring"), true},
      {CpLayout(1, 4, 1, 1, "ring"), false},
      {CpLayout(1, 2, 2, 2, "ring"), false},
      {CpLayout(1, 2, 1, 1, "a2a"), false},
      {CpLayout(1, 4, 1, 1, "a2a"), false},
      {CpLayout(1, 2, 2, 2, "a2a"), true},
  };
  std::vector<int> sizes;
  for (const CountCase& c : cases) sizes.push_back(c.layout.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const CountCase& c = cases[job];
    SCOPED_TRACE(
        c.layout.Name() +
        (c.bucket_per_parameter ? ", a bucket per parameter" : ", one bucket") +
        absl::StrCat(", head chunks of ", c.loss_chunk_rows));
    TrainOptions options = mpitest::TinyModelOptions(*data_);
    options.dp_bucket_mb = c.bucket_per_parameter ? 1e-9 : 25.0;
    options.loss_chunk_rows = c.loss_chunk_rows;
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, c.layout, options, comm);
    ASSERT_TRUE(run.ok()) << run.status();
    const ParallelContext& context = *run->context;
    const Traffic want = ExpectedStepTraffic(
        run->trainer->options(), context.coord(), c.bucket_per_parameter);
    for (int step = 1; step <= 2; ++step) {
      SCOPED_TRACE(absl::StrCat("step ", step));
      const std::map<std::string, CommStats> before = Snapshot(context);
      ASSERT_TRUE(run->trainer->Step().ok());
      const std::map<std::string, CommStats> after = Snapshot(context);
      ASSERT_EQ(after.size(), want.stats.size());
      for (const auto& [group, stats] : after) {
        ASSERT_EQ(want.stats.count(group), 1u) << group;
        ExpectCallsAndBytes(group, Difference(stats, before.at(group)),
                            want.stats.at(group));
      }
    }
  });
}

// A mixture of experts under expert parallelism: per MoE layer and
// microbatch the ep group runs five all-to-alls of ep - 1 sends and
// receives each (forward the counts, the rows and the outputs back;
// backward the outputs' gradients and the inputs' gradients back). The
// counts' exchange moves E/ep int32 per peer; every row moved is C floats;
// what the group sends it receives. The expert-data group all-reduces the
// experts' gradients once (one bucket) when it has more than one rank;
// the dp group no longer carries them.
TEST_F(CollectiveCountsTest, ExpertParallelAllToAllsFollowTheLayout) {
  const std::vector<mpitest::Layout> layouts = {{2, 1, 1, "1f1b", 1, 2},
                                                {4, 1, 1, "1f1b", 1, 2},
                                                {2, 1, 2, "1f1b", 1, 2}};
  std::vector<int> sizes;
  for (const mpitest::Layout& l : layouts) sizes.push_back(l.world());
  mpitest::RunSideBySide(sizes, [&](int job, MPI_Comm comm) {
    const mpitest::Layout& layout = layouts[job];
    SCOPED_TRACE(layout.Name());
    TrainOptions options = mpitest::TinyModelOptions(*data_);
    options.model.family = ModelFamilyKind("moe");
    options.model.n_kv_heads = 2;
    options.model.experts = 4;
    options.model.experts_per_token = 2;
    options.model.moe_ffn_hidden = 32;
    options.model.moe_first_dense = 1;  // layers 1-3 of 4
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, layout, options, comm);
    ASSERT_TRUE(run.ok()) << run.status();
    const ParallelContext& context = *run->context;
    const TrainOptions& o = run->trainer->options();
    const int64_t stage_layers = o.model.n_layer / o.pp;
    const int64_t first = context.coord().p * stage_layers;
    const int64_t moe_layers =
        stage_layers - (first < o.model.moe_first_dense ? 1 : 0);
    const int64_t calls = o.microbatches() * moe_layers * 5 * (o.ep - 1);
    const int64_t row = kFloat * o.model.d_model;
    const int64_t counts = o.microbatches() * moe_layers * (o.ep - 1) *
                           (o.model.experts / o.ep) * 4;
    const std::map<std::string, CommStats> before = Snapshot(context);
    ASSERT_TRUE(run->trainer->Step().ok());
    const std::map<std::string, CommStats> after = Snapshot(context);
    const CommStats ep = Difference(after.at("ep"), before.at("ep"));
    EXPECT_EQ(ep.Calls(CommOp::kSend), calls);
    EXPECT_EQ(ep.Calls(CommOp::kRecv), calls);
    const int64_t rows_bytes = ep.Bytes(CommOp::kSend) - counts;
    EXPECT_GT(rows_bytes, 0);
    EXPECT_EQ(rows_bytes % row, 0);
    // What the group's ranks send, they receive.
    Tensor sums = Tensor::Empty({2}, DType::kI64);
    sums.data<int64_t>()[0] = ep.Bytes(CommOp::kSend);
    sums.data<int64_t>()[1] = ep.Bytes(CommOp::kRecv);
    context.groups().ep->AllReduce(sums, ReduceOp::kSum);
    EXPECT_EQ(sums.data<int64_t>()[0], sums.data<int64_t>()[1]);
    const CommStats edp =
        Difference(after.at("expert-dp"), before.at("expert-dp"));
    const bool shared = o.dp / o.ep > 1;
    EXPECT_EQ(edp.Calls(CommOp::kAllReduce), shared ? 1 : 0);
    const int64_t experts_here = moe_layers * (o.model.experts / o.ep) * 3 *
                                 o.model.d_model * o.model.moe_ffn_hidden;
    EXPECT_EQ(edp.Bytes(CommOp::kAllReduce),
              shared ? kFloat * experts_here : 0);
  });
}

// The model and batch of the demo preset, configs/tiny.flags.
TrainOptions DemoOptions(const std::string& data) {
  TrainOptions o = mpitest::TinyModelOptions(data);
  std::map<std::string, int64_t> flags;
  std::ifstream in(std::string(TRELLIS_SOURCE_DIR) + "/configs/tiny.flags");
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> parts = absl::StrSplit(line, '=');
    int64_t value = 0;
    if (parts.size() == 2 && parts[0].rfind("--", 0) == 0 &&
        absl::SimpleAtoi(parts[1], &value)) {
      flags[parts[0].substr(2)] = value;
    }
  }
  for (const char* name : {"n_layer", "n_head", "d_model", "seq_len",
                           "micro_batch_size", "global_batch_size"}) {
    EXPECT_EQ(flags.count(name), 1u) << name << " not in configs/tiny.flags";
  }
  o.model.n_layer = flags["n_layer"];
  o.model.n_head = flags["n_head"];
  o.model.d_model = flags["d_model"];
  o.model.seq_len = flags["seq_len"];
  o.micro_batch_size = flags["micro_batch_size"];
  o.global_batch_size = flags["global_batch_size"];
  return o;
}

// Bytes per step per rank and group on the demo preset under dp2·tp2·pp2
// against the analytic volume (tp: the blocks', embedding's and head's
// N·C all-reduces; dp: the gradient; pp: the activation and gradient
// messages; embed: the tied embedding's gradient). The counters must add
// exactly the small rest: cross-entropy statistics and scalar reductions.
// Rank 0 prints the table of ratios.
TEST_F(CollectiveCountsTest, DemoConfigMovesTheAnalyticVolume) {
  const Layout layout{2, 2, 2, "1f1b"};
  if (mpitest::WorldSize() != layout.world()) GTEST_SKIP() << "needs 8 ranks";
  const std::vector<std::string> groups = {"tp", "dp", "pp", "embed"};
  std::vector<int64_t> mine;  // per group: counted, analytic
  mpitest::RunSideBySide({layout.world()}, [&](int, MPI_Comm comm) {
    absl::StatusOr<mpitest::LayoutRun> run =
        mpitest::StartLayout(*runtime_, layout, DemoOptions(*data_), comm);
    ASSERT_TRUE(run.ok()) << run.status();
    const Traffic want = ExpectedStepTraffic(run->trainer->options(),
                                             run->context->coord(), false);
    const std::map<std::string, CommStats> before = Snapshot(*run->context);
    ASSERT_TRUE(run->trainer->Step().ok());
    const std::map<std::string, CommStats> after = Snapshot(*run->context);
    for (const std::string& group : groups) {
      const Volume volume =
          want.volume.count(group) ? want.volume.at(group) : Volume{};
      const int64_t counted =
          after.count(group)
              ? TotalBytes(Difference(after.at(group), before.at(group)))
              : 0;
      EXPECT_EQ(counted, volume.analytic + volume.extra) << group;
      mine.push_back(counted);
      mine.push_back(volume.analytic);
    }
  });
  const int width = static_cast<int>(mine.size());
  ASSERT_EQ(width, 2 * static_cast<int>(groups.size()));
  std::vector<int64_t> all(mpitest::WorldRank() == 0 ? width * layout.world()
                                                     : 0);
  MPI_Gather(mine.data(), width, MPI_INT64_T, all.data(), width, MPI_INT64_T, 0,
             MPI_COMM_WORLD);
  if (mpitest::WorldRank() != 0) return;
  std::printf("bytes per step (counted / analytic = ratio), %s:\n",
              layout.Name().c_str());
  for (int r = 0; r < layout.world(); ++r) {
    std::printf("  rank %d:", r);
    for (size_t g = 0; g < groups.size(); ++g) {
      const int64_t counted = all[r * width + 2 * g];
      const int64_t analytic = all[r * width + 2 * g + 1];
      if (analytic == 0 && counted == 0) continue;
      std::printf("  %s %lld / %lld = %.6f", groups[g].c_str(),
                  static_cast<long long>(counted),
                  static_cast<long long>(analytic),
                  analytic > 0 ? static_cast<double>(counted) / analytic : 0.0);
    }
    std::printf("\n");
  }
}

}  // namespace
}  // namespace trellis
