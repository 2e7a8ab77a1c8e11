// The α-β cost of one collective or transfer on a cluster: a ring of n
// ranks takes (steps × latency) + wire bytes / bandwidth, where the wire
// bytes are the ones the communicators count (parallel/communicator.h,
// WireBytes: 2(n−1)/n·B for an all-reduce of B bytes, (n−1)/n·B for a
// reduce-scatter or an all-gather, B for a send) and the steps are the
// ring's 2(n−1), n−1, n−1 and 1. The link is the slowest one the group
// spans: inside a node, or between nodes when its ranks sit on more than
// one node (mesh placement: rank r on node r / devices_per_node).
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_PLAN_COMM_COST_H_
#define TRELLIS_TOOLS_PLAN_COMM_COST_H_

#include <cstdint>

#include "parallel/communicator.h"
#include "parallel/mesh.h"
#include "tools/plan/cluster.h"

namespace trellis {

// Seconds one `op` on `bytes` (the buffer the call names, see CommStats)
// takes over `n` ranks on `link`. 0 for a group of one. REQUIRES: op is an
// all-reduce, reduce-scatter, all-gather or send; n ≥ 1; bytes ≥ 0.
double CollectiveSeconds(CommOp op, int64_t bytes, int n, const LinkSpec& link);

// The link group `kind` of `mesh` uses on `cluster`: intra-node when every
// member of every such group shares a node, else inter-node. For kPp the
// pipeline's neighbours decide (transfers go between adjacent stages).
LinkSpec GroupLink(const Mesh& mesh, GroupKind kind,
                   const ClusterSpec& cluster);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_COMM_COST_H_
