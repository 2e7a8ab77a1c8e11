#include "parallel/device_groups.h"

#include "absl/strings/str_cat.h"
#include "framework/device_info.h"
#include "framework/host_sync.h"
#include "parallel/host_staged_communicator.h"
#include "parallel/mpi_communicator.h"
#include "parallel/routing_communicator.h"

#ifdef TRELLIS_WITH_CUDA
#include "parallel/nccl_communicator.h"
#endif

namespace trellis {
namespace {

// The ranks of this node in `world`.
int RanksOnThisNode(MPI_Comm world) {
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return size;
}

absl::StatusOr<MPI_Comm> MpiOf(const Communicator& group) {
  const auto* mpi = dynamic_cast<const MpiCommunicator*>(&group);
  if (mpi == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", group.name(),
        " group is not an MPI communicator; build device groups from "
        "ParallelContext::Create's groups"));
  }
  return mpi->comm();
}

// The device transport of one group of more than one rank.
absl::StatusOr<std::unique_ptr<Communicator>> DeviceTransportFor(
    const Communicator& group, Device device, DeviceTransport transport) {
  TRELLIS_ASSIGN_OR_RETURN(MPI_Comm comm, MpiOf(group));
  if (transport == DeviceTransport::kHostStaged) {
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Comm_dup(comm, &dup);
    return std::unique_ptr<Communicator>(
        std::make_unique<HostStagedCommunicator>(group.name(), dup,
                                                 /*owned=*/true));
  }
#ifdef TRELLIS_WITH_CUDA
  return std::unique_ptr<Communicator>(
      NcclCommunicator::CreateWorld(group.name(), comm, device.index));
#else
  (void)device;
  return absl::FailedPreconditionError(
      "--gpu_comm=nccl: this build has no NCCL; rebuild with CUDA");
#endif
}

}  // namespace

absl::StatusOr<DeviceTransport> ParseDeviceTransport(const std::string& name) {
  if (name == "nccl") return DeviceTransport::kNccl;
  if (name == "host") return DeviceTransport::kHostStaged;
  return absl::InvalidArgumentError(absl::StrCat(
      "--gpu_comm=", name, " is not nccl or host (host-staged MPI)"));
}

absl::StatusOr<std::unique_ptr<DeviceGroups>> DeviceGroups::Create(
    const ProcessGroups& host, Device device, DeviceTransport transport) {
  absl::Status usable = absl::OkStatus();
  if (transport == DeviceTransport::kNccl && device.is_cuda() &&
      host.world->size() > 1) {
    absl::StatusOr<MPI_Comm> world = MpiOf(*host.world);
    if (!world.ok()) {
      usable = world.status();
    } else {
      const int ranks = RanksOnThisNode(*world);
      const absl::StatusOr<int> visible = VisibleCudaDevices();
      const int gpus = visible.ok() ? *visible : 0;
      if (!visible.ok()) {
        usable = visible.status();
      } else if (ranks > gpus) {
        usable = absl::FailedPreconditionError(absl::StrCat(
            ranks, " ranks on this node share ", gpus,
            " GPU(s) and NCCL needs one GPU per rank; launch at most ", gpus,
            " ranks per node or use --gpu_comm=host"));
      }
    }
  }
  // Every rank must know before any enters a collective setup.
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(*host.world, usable));

  std::unique_ptr<DeviceGroups> result(new DeviceGroups());
  result->groups_.world = host.world;
  Communicator* const* sources[] = {&host.tp, &host.dp, &host.pp, &host.embed};
  Communicator** targets[] = {&result->groups_.tp, &result->groups_.dp,
                              &result->groups_.pp, &result->groups_.embed};
  // The same order on every rank, so collective setups cannot cross.
  for (int i = 0; i < 4; ++i) {
    Communicator* group = *sources[i];
    if (group == nullptr) continue;  // This rank is in no embed group.
    std::unique_ptr<Communicator> transport_comm;
    if (group->size() == 1) {
      transport_comm = std::make_unique<SelfCommunicator>(group->name());
    } else {
      TRELLIS_ASSIGN_OR_RETURN(transport_comm,
                               DeviceTransportFor(*group, device, transport));
    }
    result->owned_.push_back(std::make_unique<RoutingCommunicator>(
        *group, std::move(transport_comm)));
    *targets[i] = result->owned_.back().get();
  }
  return result;
}

namespace {

// Any tag serves: every warm-up message is received before other traffic.
constexpr int kWarmUpTag = 1999;

// One send to the next rank of `group` and one receive from the previous.
void RingShift(Communicator& group, Device device) {
  const int n = group.size(), r = group.rank();
  Tensor out = Tensor::Zeros({1}, DType::kF32, device);
  Tensor in = Tensor::Zeros({1}, DType::kF32, device);
  if (r % 2 == 0) {
    group.Send(out, (r + 1) % n, kWarmUpTag)->Wait();
    group.Recv(in, (r + n - 1) % n, kWarmUpTag)->Wait();
  } else {
    group.Recv(in, (r + n - 1) % n, kWarmUpTag)->Wait();
    group.Send(out, (r + 1) % n, kWarmUpTag)->Wait();
  }
}

}  // namespace

void WarmUpGroups(const ProcessGroups& groups, Device device) {
  for (Communicator* group : {groups.tp, groups.dp, groups.pp, groups.embed}) {
    if (group == nullptr || group->size() == 1) continue;
    Tensor buffer = Tensor::Zeros({1}, DType::kF32, device);
    group->AllReduce(buffer, ReduceOp::kSum);
    RingShift(*group, device);
  }
  // The transports' setup is done before anyone measures memory.
  WaitForDevice(device);
}

}  // namespace trellis
