// MpiRuntime, ParallelContext and the configuration check under mpirun.
#include "parallel/bootstrap.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/mesh.h"

namespace trellis {
namespace {

using ::testing::HasSubstr;

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime_ = std::make_unique<MpiRuntime>(nullptr, nullptr);
    ASSERT_EQ(runtime_->world_size(), 8) << "run with 8 ranks";
  }
  int rank() const { return runtime_->world_rank(); }

  // The world ranks of a group, gathered over the group itself.
  static std::vector<int> Gathered(Communicator& group, int world_rank) {
    Tensor mine = Tensor::Empty({1}, DType::kI32);
    mine.data<int32_t>()[0] = world_rank;
    Tensor all = Tensor::Empty({group.size()}, DType::kI32);
    group.AllGather(mine, all);
    return std::vector<int>(all.data<int32_t>(),
                            all.data<int32_t>() + group.size());
  }

  std::unique_ptr<MpiRuntime> runtime_;
};

TEST_F(BootstrapTest, RuntimeKnowsRankAndNode) {
  EXPECT_GE(rank(), 0);
  EXPECT_LT(rank(), 8);
  EXPECT_FALSE(runtime_->hostname().empty());
  // mpirun on one machine: the node holds every rank.
  EXPECT_EQ(runtime_->local_size(), 8);
  EXPECT_EQ(runtime_->local_rank(), rank());
  EXPECT_EQ(ErrorContext(),
            "rank " + std::to_string(rank()) + " on " + runtime_->hostname());
}

TEST_F(BootstrapTest, GroupsMatchTheMeshInEveryOrder) {
  for (const std::string order :
       {"tp-dp-pp", "pp-dp-tp", "dp-pp-tp", "tp-pp-dp"}) {
    for (const auto& [dp, tp, pp] : std::vector<std::array<int, 3>>{
             {2, 2, 2}, {1, 2, 4}, {4, 1, 2}, {1, 8, 1}, {1, 1, 8}}) {
      SCOPED_TRACE(order + " dp=" + std::to_string(dp) +
                   " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp));
      absl::StatusOr<Mesh> mesh = Mesh::Create(8, dp, tp, pp, order);
      ASSERT_TRUE(mesh.ok()) << mesh.status();
      absl::StatusOr<ParallelContext> context =
          ParallelContext::Create(*runtime_, *mesh);
      ASSERT_TRUE(context.ok()) << context.status();
      const ProcessGroups& g = context->groups();
      EXPECT_EQ(context->coord(), mesh->Coord(rank()));
      EXPECT_EQ(Gathered(*g.world, rank()).size(), 8u);
      EXPECT_EQ(Gathered(*g.tp, rank()), mesh->TpGroup(rank()));
      EXPECT_EQ(Gathered(*g.dp, rank()), mesh->DpGroup(rank()));
      EXPECT_EQ(Gathered(*g.pp, rank()), mesh->PpGroup(rank()));
      if (mesh->InEmbedGroup(rank())) {
        ASSERT_NE(g.embed, nullptr);
        EXPECT_EQ(Gathered(*g.embed, rank()), mesh->EmbedGroup(rank()));
      } else {
        EXPECT_EQ(g.embed, nullptr);
      }
      EXPECT_EQ(g.tp->name(), "tp");
    }
  }
}

TEST_F(BootstrapTest, RejectsAMeshForAnotherWorld) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(4, 2, 2, 1);
  ASSERT_TRUE(mesh.ok());
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(*runtime_, *mesh);
  ASSERT_FALSE(context.ok());
  EXPECT_THAT(std::string(context.status().message()),
              HasSubstr("is for 4 ranks but MPI started 8"));
}

TEST_F(BootstrapTest, SameConfigPasses) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(8, 0, 2, 2);
  ASSERT_TRUE(mesh.ok());
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(*runtime_, *mesh);
  ASSERT_TRUE(context.ok());
  EXPECT_TRUE(
      CheckConfigsAgree(*context->groups().world, "--lr=0.1\n--steps=10\n")
          .ok());
  EXPECT_TRUE(CheckConfigsAgree(*context->groups().world, "").ok());
}

TEST_F(BootstrapTest, DifferentConfigsFailOnEveryRankWithoutHanging) {
  absl::StatusOr<Mesh> mesh = Mesh::Create(8, 0, 2, 2);
  ASSERT_TRUE(mesh.ok());
  absl::StatusOr<ParallelContext> context =
      ParallelContext::Create(*runtime_, *mesh);
  ASSERT_TRUE(context.ok());
  Communicator& world = *context->groups().world;
  // Ranks 3 and 5 were given another learning rate.
  const std::string lr = (rank() == 3 || rank() == 5) ? "0.3" : "0.1";
  const std::string config = "--model=gpt2\n--lr=" + lr + "\n--steps=10\n";
  absl::Status status = CheckConfigsAgree(world, config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "ranks disagree on flags: rank 3 has \"--lr=0.3\" where rank 0 "
            "has \"--lr=0.1\" (line 2); 2 of 8 ranks differ from rank 0");
  // A rank with a longer config, checked within the tp groups.
  const std::string base = "--model=gpt2\n";
  const std::string extra = context->coord().t == 1 ? base + "--seed=7" : base;
  status = CheckConfigsAgree(*context->groups().tp, extra, "the run config");
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("ranks disagree on the run config: rank 1 has "
                        "\"--seed=7\" where rank 0 has \"\" (line 2)"));
  // The world is still usable afterwards.
  EXPECT_TRUE(CheckConfigsAgree(world, "same").ok());
}

}  // namespace
}  // namespace trellis
