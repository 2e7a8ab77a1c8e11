// DeviceGroups: the process groups of a run whose tensors live on a GPU.
//
// Each model-parallel group (tp, dp, pp, embed, and expert parallelism's
// ep and expert_dp; expert_dp is the dp one where ep has one rank) becomes
// a RoutingCommunicator: host buffers still go through the run's MPI group,
// device buffers through a communicator for device memory, either NCCL (one
// communicator per group, its unique id broadcast over the group's MPI
// communicator; one GPU per rank) or host staging over MPI (several ranks
// may share one GPU). Groups of one rank need no transport. The world stays
// the MPI one: it carries only host buffers.
//
// Thread safety: none; built and used by the training thread.
#ifndef TRELLIS_PARALLEL_DEVICE_GROUPS_H_
#define TRELLIS_PARALLEL_DEVICE_GROUPS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/tensor.h"
#include "parallel/bootstrap.h"

namespace trellis {

enum class DeviceTransport { kNccl, kHostStaged };
// "nccl" or "host".
absl::StatusOr<DeviceTransport> ParseDeviceTransport(const std::string& name);

class DeviceGroups {
 public:
  // Collective over `host.world`. Groups of more than one rank must be MPI
  // groups (from ParallelContext::Create; ParallelContext::Single serves a
  // lone process); `host` must outlive the result. Fails on every rank
  // alike (FailedPrecondition) when NCCL is asked for but two ranks of a
  // node hold one GPU (CheckNodeGpus), or the build has no NCCL.
  static absl::StatusOr<std::unique_ptr<DeviceGroups>> Create(
      const ProcessGroups& host, Device device, DeviceTransport transport);

  const ProcessGroups& groups() const { return groups_; }

 private:
  DeviceGroups() = default;
  std::vector<std::unique_ptr<Communicator>> owned_;
  ProcessGroups groups_;
};

// The GPU one rank computes on: the rank (in the world) and the physical id
// of its device (PhysicalGpuId, framework/device_info.h).
struct RankGpu {
  int rank = 0;
  std::string gpu;
};

// NCCL's rule for the ranks of one node: each holds a GPU of its own. OK
// when the ids of `ranks` are distinct (however many devices each rank
// sees: under srun --gpus-per-task=1 every rank sees one, its own);
// otherwise FailedPrecondition naming the ranks that share the GPU of the
// lowest such rank, its id, how many other GPUs are shared, and the fixes.
absl::Status CheckOneRankPerGpu(const std::vector<RankGpu>& ranks);

// Collective over `world`, an MPI communicator (InvalidArgument otherwise,
// on every rank, before any communication): gathers the `gpu` of every rank
// of this node (MPI_COMM_TYPE_SHARED) and checks them with
// CheckOneRankPerGpu. Each node judges its own ranks, so ranks of different
// nodes may get different verdicts (AgreeOnStatus makes them one).
// REQUIRES: `gpu` is shorter than 64 bytes.
absl::Status CheckNodeGpus(const Communicator& world, const std::string& gpu);

// Makes every model-parallel group of `groups` (tp, dp, pp, embed, ep,
// expert_dp; not the world, which carries host buffers, nor cp) set up its
// transport now, before the run sizes its memory arena from the free memory:
// NCCL takes buffers at a communicator's first collective (unless
// NCCL_RUNTIME_CONNECT=0, which NcclCommunicator sets) and at the first
// transfer in each direction between two ranks. Each group of more than one
// rank runs one all-reduce of a one-element float32 tensor on `device`. The pp
// group, the only one that sends point-to-point (PipelineExecutor's transfers),
// also sends that tensor to its next and its previous stage and receives from
// both (one batch, Communicator::BatchSendRecv, so no transport can deadlock at
// any group size), which connects every direction a schedule uses, the
// wrap-around of interleaved schedules included. Groups of one rank run
// nothing. Then waits for `device`. Collective over every rank of the
// groups, which must all call it.
void WarmUpGroups(const ProcessGroups& groups, Device device);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_DEVICE_GROUPS_H_
