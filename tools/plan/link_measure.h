// Measures the α-β figures of a group's links by timing its own
// all-reduces: many one-double all-reduces give the latency (a ring of n
// takes 2(n−1) hops), a few 4 MiB ones the bandwidth after it. Under
// mpirun on one machine this is the loopback/shared-memory transport as
// the trainer will see it, load included.
//
// Collective over `group`; every rank returns the same (mean) figures.
// Thread safety: drive from the thread that owns the communicator.
#ifndef TRELLIS_TOOLS_PLAN_LINK_MEASURE_H_
#define TRELLIS_TOOLS_PLAN_LINK_MEASURE_H_

#include "parallel/communicator.h"
#include "tools/plan/cluster.h"

namespace trellis {

// REQUIRES: group.size() ≥ 2.
LinkSpec MeasureLink(Communicator& group);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_LINK_MEASURE_H_
