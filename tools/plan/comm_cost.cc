#include "tools/plan/comm_cost.h"

#include <vector>

#include "framework/status.h"

namespace trellis {

double CollectiveSeconds(CommOp op, int64_t bytes, int n,
                         const LinkSpec& link) {
  TRELLIS_CHECK_GE(n, 1);
  TRELLIS_CHECK_GE(bytes, 0);
  if (n == 1 && op != CommOp::kSend) return 0.0;
  int64_t steps = 0;
  switch (op) {
    case CommOp::kAllReduce:
      steps = 2 * (n - 1);
      break;
    case CommOp::kReduceScatter:
    case CommOp::kAllGather:
      steps = n - 1;
      break;
    case CommOp::kSend:
      steps = 1;
      break;
    default:
      TRELLIS_CHECK(false) << "no cost model for " << CommOpName(op);
  }
  return static_cast<double>(steps) * link.latency +
         static_cast<double>(WireBytes(op, bytes, n)) / link.bandwidth;
}

LinkSpec GroupLink(const Mesh& mesh, GroupKind kind,
                   const ClusterSpec& cluster) {
  const int64_t per_node = cluster.devices_per_node;
  for (int rank = 0; rank < mesh.world(); ++rank) {
    const std::vector<int> group = mesh.Group(kind, rank);
    for (size_t i = 1; i < group.size(); ++i) {
      // Pipelines talk between neighbours; rings span the whole group.
      const int other = kind == GroupKind::kPp ? group[i - 1] : group[0];
      if (group[i] / per_node != other / per_node) return cluster.inter;
    }
  }
  return cluster.intra;
}

}  // namespace trellis
