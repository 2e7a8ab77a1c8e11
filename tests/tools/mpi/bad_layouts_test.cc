// Bad layouts and mismatched flags: TrainOptions::Resolve and
// Trainer::Create fail with one clear message that names the flags to
// change, every rank gets the same error, and no rank hangs waiting for
// another (the run finishing is the proof).
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "tests/tools/mpi/mpi_test_util.h"
#include "tools/trainer/trainer.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

struct BadCase {
  std::string name;
  void (*edit)(TrainOptions&);
  std::string message;  // the whole message for a world of 4 ranks
};

std::vector<BadCase> BadLayouts() {
  return {
      {"layout larger than the world",
       [](TrainOptions& o) {
         o.dp = 2;
         o.tp = 2;
         o.pp = 2;
       },
       "layout dp=2 × tp=2 × pp=2 = 8 does not match the world size 4; "
       "launch 8 ranks or choose sizes whose product is 4"},
      {"tp × pp not dividing the world",
       [](TrainOptions& o) {
         o.dp = 0;
         o.tp = 3;
         o.pp = 1;
       },
       "the world size 4 is not divisible by tp × pp = 3 × 1; launch a "
       "multiple of 3 ranks"},
      {"heads not divisible by tp",
       [](TrainOptions& o) {
         o.model.n_head = 2;
         o.dp = 1;
         o.tp = 4;
       },
       "--n_head=2 is not divisible by --tp=4; choose tp dividing the head "
       "count"},
      {"fewer layers than stages",
       [](TrainOptions& o) {
         o.model.n_layer = 2;
         o.dp = 1;
         o.pp = 4;
       },
       "--n_layer=2 is fewer than pp × virtual_stages = 4; every stage needs "
       "at least one layer"},
      {"fewer layers than virtual stages",
       [](TrainOptions& o) {
         o.model.n_layer = 3;
         o.dp = 2;
         o.pp = 2;
         o.schedule = ScheduleKind::kInterleaved1F1B;
         o.virtual_stages = 2;
       },
       "--n_layer=3 is fewer than pp × virtual_stages = 4; every stage needs "
       "at least one layer"},
      {"global batch not a multiple of dp × micro batch",
       [](TrainOptions& o) {
         o.dp = 4;
         o.micro_batch_size = 2;
         o.global_batch_size = 12;
       },
       "--global_batch_size=12 is not a multiple of dp × micro_batch_size = "
       "4 × 2 = 8; use a multiple of 8"},
  };
}

class BadLayoutsTest : public mpitest::SharedTokenFileTest<BadLayoutsTest> {
 public:
  static constexpr const char* kScratchTag = "bad_layouts";
  static constexpr int64_t kTokens = 4000;

 protected:
  void SetUp() override {
    ASSERT_EQ(mpitest::WorldSize(), 4) << "run with 4 ranks";
    // Any valid mesh: Create fails before it lays anything out.
    absl::StatusOr<Mesh> mesh = Mesh::Create(4, 4, 1, 1);
    ASSERT_TRUE(mesh.ok());
    absl::StatusOr<ParallelContext> context =
        ParallelContext::Create(*runtime_, *mesh);
    ASSERT_TRUE(context.ok()) << context.status();
    context_ = std::make_unique<ParallelContext>(*std::move(context));
  }

  absl::Status Create(const TrainOptions& options) {
    return Trainer::Create(options, context_->groups(), context_->coord())
        .status();
  }

  // Every rank of the world holds the same text.
  void ExpectSameOnEveryRank(const std::string& text) {
    EXPECT_TRUE(
        CheckConfigsAgree(*context_->groups().world, text, "errors").ok())
        << text;
  }

  std::unique_ptr<ParallelContext> context_;
};

TEST_F(BadLayoutsTest, ResolveNamesTheFlagsToChange) {
  for (const BadCase& c : BadLayouts()) {
    SCOPED_TRACE(c.name);
    TrainOptions options = mpitest::TinyModelOptions(*data_);
    c.edit(options);
    const absl::Status status = options.Resolve(4, 257);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(status.message()), c.message);
  }
  // The same rules at another world size, where dp is derived.
  TrainOptions options = mpitest::TinyModelOptions(*data_);
  options.tp = 2;
  options.pp = 2;
  options.global_batch_size = 7;
  const absl::Status status = options.Resolve(8, 257);
  EXPECT_EQ(options.dp, 2);
  EXPECT_EQ(std::string(status.message()),
            "--global_batch_size=7 is not a multiple of dp × micro_batch_size "
            "= 2 × 1 = 2; use a multiple of 2");
}

TEST_F(BadLayoutsTest, CreateFailsOnEveryRankWithTheSameMessage) {
  for (const BadCase& c : BadLayouts()) {
    SCOPED_TRACE(c.name);
    TrainOptions options = mpitest::TinyModelOptions(*data_);
    c.edit(options);
    const absl::Status status = Create(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(status.message()), c.message);
    ExpectSameOnEveryRank(std::string(status.message()));
  }
}

TEST_F(BadLayoutsTest, GoodLayoutStillCreatesAndSteps) {
  const mpitest::Layout layout{1, 2, 2, "1f1b"};
  absl::StatusOr<mpitest::LayoutRun> run = mpitest::StartLayout(
      *runtime_, layout, mpitest::TinyModelOptions(*data_), MPI_COMM_WORLD);
  ASSERT_TRUE(run.ok()) << run.status();
  absl::StatusOr<StepMetrics> step = run->trainer->Step();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_GT(step->loss, 0.0);
}

// Ranks given different flags must all fail, before any rank could fail
// alone (e.g. on a layout only it was given) or wait on a collective the
// others never join.
TEST_F(BadLayoutsTest, MismatchedFlagsFailOnEveryRank) {
  const int rank = mpitest::WorldRank();
  struct Mismatch {
    std::string name;
    void (*edit)(TrainOptions&);
    int odd_rank;
    std::string odd_flag;
  };
  const std::vector<Mismatch> mismatches = {
      {"learning rate", [](TrainOptions& o) { o.lr = 0.01; }, 2, "--lr=0.01"},
      {"pipeline size", [](TrainOptions& o) { o.pp = 4; }, 3, "--pp=4"},
      {"an impossible layout on one rank", [](TrainOptions& o) { o.tp = 3; }, 1,
       "--tp=3"},
      {"data file", [](TrainOptions& o) { o.data += ".missing"; }, 1,
       ".missing"},
  };
  for (const Mismatch& m : mismatches) {
    SCOPED_TRACE(m.name);
    TrainOptions options = mpitest::TinyModelOptions(*data_);
    options.tp = 2;
    if (rank == m.odd_rank) m.edit(options);
    const absl::Status status = Create(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    const std::string message(status.message());
    EXPECT_THAT(message, HasSubstr("ranks disagree on flags: rank " +
                                   std::to_string(m.odd_rank) + " has "));
    EXPECT_THAT(message, HasSubstr(m.odd_flag));
    EXPECT_THAT(message, HasSubstr("1 of 4 ranks differ from rank 0"));
    ExpectSameOnEveryRank(message);
  }
}

// A layout may run on part of the world (ParallelContext::Create over a
// base communicator): ranks [2h, 2h + 2) form half h, each a tp2 layout
// whose groups hold exactly the half's ranks. A layout of another size on a
// half is refused on both of its ranks.
TEST_F(BadLayoutsTest, LayoutsRunOnPartsOfTheWorld) {
  const int rank = mpitest::WorldRank();
  mpitest::SubWorld half({{0, 2}, {2, 2}});
  ASSERT_TRUE(half.member());
  absl::StatusOr<Mesh> mesh = Mesh::Create(2, 1, 2, 1);
  ASSERT_TRUE(mesh.ok());
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(*runtime_, *mesh, half.comm());
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ(context->rank(), rank % 2);
  EXPECT_EQ(context->coord().t, rank % 2);
  for (Communicator* group : {context->groups().world, context->groups().tp}) {
    Tensor mine = Tensor::Empty({1}, DType::kI32);
    mine.data<int32_t>()[0] = rank;
    Tensor all = Tensor::Empty({2}, DType::kI32);
    group->AllGather(mine, all);
    EXPECT_EQ(all.data<int32_t>()[0], 2 * half.index()) << group->name();
    EXPECT_EQ(all.data<int32_t>()[1], 2 * half.index() + 1) << group->name();
  }
  EXPECT_EQ(context->groups().dp->size(), 1);
  EXPECT_EQ(context->groups().pp->size(), 1);

  absl::StatusOr<Mesh> four = Mesh::Create(4, 1, 2, 2);
  ASSERT_TRUE(four.ok());
  absl::StatusOr<ParallelContext> wrong =
      ParallelContext::Create(*runtime_, *four, half.comm());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(wrong.status().message()),
            "layout " + four->DebugString() +
                " is for 4 ranks but its communicator has 2; run it on as "
                "many ranks as dp × tp × pp");
}

}  // namespace
}  // namespace trellis
