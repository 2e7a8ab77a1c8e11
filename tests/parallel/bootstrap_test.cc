#include "parallel/bootstrap.h"

#include "gtest/gtest.h"

namespace trellis {
namespace {

TEST(BootstrapTest, SingleHasAGroupOfOneForEveryKind) {
  ParallelContext context = ParallelContext::Single();
  const ProcessGroups& g = context.groups();
  for (Communicator* c :
       {g.world, g.tp, g.dp, g.pp, g.embed, g.ep, g.expert_dp, g.cp}) {
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->rank(), 0);
  }
  EXPECT_EQ(g.tp->name(), "tp");
  EXPECT_EQ(context.mesh().world(), 1);
  EXPECT_EQ(context.communicators().size(), 8u);
  // Moving the context keeps the group pointers valid.
  ParallelContext moved = std::move(context);
  EXPECT_EQ(moved.groups().dp, g.dp);
  EXPECT_EQ(moved.groups().dp->name(), "dp");
}

TEST(BootstrapTest, OneRankAlwaysAgrees) {
  ParallelContext context = ParallelContext::Single();
  EXPECT_TRUE(CheckConfigsAgree(*context.groups().world, "--lr=1").ok());
}

TEST(BootstrapTest, StableHashIsFnv1a) {
  EXPECT_EQ(StableHash(""), 14695981039346656037ull);
  EXPECT_EQ(StableHash("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(StableHash("--lr=0.1"), StableHash("--lr=0.2"));
}

}  // namespace
}  // namespace trellis
