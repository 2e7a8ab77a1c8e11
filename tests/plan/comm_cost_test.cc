// The α-β collective costs: ring steps times latency plus the wire bytes
// the communicators count, over the link the group spans.
#include "tools/plan/comm_cost.h"

#include <gtest/gtest.h>

namespace trellis {
namespace {

TEST(CommCostTest, RingFormulas) {
  const LinkSpec link{1e9, 1e-6};  // 1 GB/s, 1 µs per hop
  const int64_t b = 8000000;
  // All-reduce: 2(n−1) hops and 2(n−1)/n of the bytes.
  EXPECT_DOUBLE_EQ(CollectiveSeconds(CommOp::kAllReduce, b, 4, link),
                   6e-6 + 2.0 * 3 / 4 * b / 1e9);
  // Reduce-scatter and all-gather: n−1 hops, (n−1)/n of the bytes.
  EXPECT_DOUBLE_EQ(CollectiveSeconds(CommOp::kReduceScatter, b, 8, link),
                   7e-6 + 7.0 / 8 * b / 1e9);
  EXPECT_DOUBLE_EQ(CollectiveSeconds(CommOp::kAllGather, b, 8, link),
                   7e-6 + 7.0 / 8 * b / 1e9);
  // A transfer: one hop, all the bytes.
  EXPECT_DOUBLE_EQ(CollectiveSeconds(CommOp::kSend, b, 2, link),
                   1e-6 + b / 1e9);
  // A reduce-scatter and the all-gather of its blocks move what one
  // all-reduce does.
  EXPECT_DOUBLE_EQ(CollectiveSeconds(CommOp::kReduceScatter, b, 4, link) +
                       CollectiveSeconds(CommOp::kAllGather, b, 4, link),
                   CollectiveSeconds(CommOp::kAllReduce, b, 4, link));
  EXPECT_EQ(CollectiveSeconds(CommOp::kAllReduce, b, 1, link), 0.0);
}

TEST(CommCostTest, GroupsThatSpanNodesUseTheInterNodeLink) {
  ClusterSpec c;
  c.devices_per_node = 8;
  c.nodes = 4;
  c.intra = {400e9, 1e-6};
  c.inter = {50e9, 5e-6};
  // tp fastest: tp 8 fills a node; dp then spans nodes.
  absl::StatusOr<Mesh> mesh = Mesh::Create(32, 4, 8, 1);
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(GroupLink(*mesh, GroupKind::kTp, c).bandwidth, 400e9);
  EXPECT_EQ(GroupLink(*mesh, GroupKind::kDp, c).bandwidth, 50e9);
  // dp 2 × tp 4 inside a node, pipeline stages on different nodes.
  mesh = Mesh::Create(32, 2, 4, 4);
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(GroupLink(*mesh, GroupKind::kDp, c).bandwidth, 400e9);
  EXPECT_EQ(GroupLink(*mesh, GroupKind::kPp, c).bandwidth, 50e9);
  // One node: everything inside it.
  c.nodes = 1;
  mesh = Mesh::Create(8, 2, 2, 2);
  ASSERT_TRUE(mesh.ok());
  EXPECT_EQ(GroupLink(*mesh, GroupKind::kPp, c).bandwidth, 400e9);
}

}  // namespace
}  // namespace trellis
