#include "parallel/device_groups.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "framework/device_info.h"
#include "framework/host_sync.h"
#include "framework/status.h"
#include "parallel/host_staged_communicator.h"
#include "parallel/mpi_communicator.h"
#include "parallel/routing_communicator.h"
#include "parallel/schedule.h"

#ifdef TRELLIS_WITH_CUDA
#include "parallel/nccl_communicator.h"
#endif

namespace trellis {
namespace {

// The fixed size of one gathered GPU id, its terminator included.
constexpr int kGpuIdBytes = 64;

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

absl::Status CheckOneRankPerGpu(const std::vector<RankGpu>& ranks) {
  // The ranks of each GPU, in the order given, and the GPUs in the order of
  // their first rank.
  std::map<std::string, std::vector<int>> holders;
  std::vector<std::string> order;
  for (const RankGpu& r : ranks) {
    std::vector<int>& list = holders[r.gpu];
    if (list.empty()) order.push_back(r.gpu);
    list.push_back(r.rank);
  }
  const std::string* first = nullptr;
  int more = 0;
  for (const std::string& gpu : order) {
    if (holders[gpu].size() < 2) continue;
    if (first == nullptr) {
      first = &gpu;
    } else {
      ++more;
    }
  }
  if (first == nullptr) return absl::OkStatus();
  const std::vector<int>& shared = holders[*first];
  const std::string others =
      more == 0 ? ""
                : absl::StrCat(" (and ", more, " more GPU",
                               more == 1 ? " is" : "s are", " shared)");
  return absl::FailedPreconditionError(absl::StrCat(
      "--gpu_comm=nccl needs a GPU of its own for each rank, but ranks ",
      absl::StrJoin(shared.begin(), shared.end() - 1, ", "), " and ",
      shared.back(), " of one node share GPU ", *first, others,
      "; launch at most one rank per GPU, let each rank take its own device "
      "(a local rank in OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or "
      "MPI_LOCALRANKID, or srun --gpus-per-task=1), or use --gpu_comm=host"));
}

absl::Status CheckNodeGpus(const Communicator& world, const std::string& gpu) {
  TRELLIS_CHECK(gpu.size() < size_t{kGpuIdBytes}) << "GPU id " << gpu;
  TRELLIS_ASSIGN_OR_RETURN(MPI_Comm comm, MpiOf(world));
  int rank = 0, size = 1;
  MPI_Comm node = MPI_COMM_NULL;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TRELLIS_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank,
                                        MPI_INFO_NULL, &node));
  TRELLIS_MPI_CHECK(MPI_Comm_size(node, &size));
  std::vector<int> ranks(size);
  std::vector<char> ids(static_cast<size_t>(size) * kGpuIdBytes);
  char mine[kGpuIdBytes] = {};
  gpu.copy(mine, gpu.size());
  TRELLIS_MPI_CHECK(
      MPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, node));
  TRELLIS_MPI_CHECK(MPI_Allgather(mine, kGpuIdBytes, MPI_CHAR, ids.data(),
                                  kGpuIdBytes, MPI_CHAR, node));
  TRELLIS_MPI_CHECK(MPI_Comm_free(&node));
  std::vector<RankGpu> gathered;
  gathered.reserve(size);
  for (int i = 0; i < size; ++i) {
    gathered.push_back({ranks[i], std::string(&ids[i * kGpuIdBytes])});
  }
  return CheckOneRankPerGpu(gathered);
}

absl::StatusOr<std::unique_ptr<DeviceGroups>> DeviceGroups::Create(
    const ProcessGroups& host, Device device, DeviceTransport transport) {
  absl::Status usable = absl::OkStatus();
  if (transport == DeviceTransport::kNccl && device.is_cuda() &&
      host.world->size() > 1) {
    // NCCL refuses two ranks on one GPU, whatever each rank sees: under
    // srun --gpus-per-task=1 every rank sees one device, its own, while
    // ranks without a local rank all take cuda:0 of the same devices. So
    // the node's ranks compare the physical GPUs they hold.
    absl::StatusOr<std::string> gpu = PhysicalGpuId(device);
    TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(*host.world, gpu.status()));
    usable = CheckNodeGpus(*host.world, *gpu);
  }
  // Every rank must know before any enters a collective setup.
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(*host.world, usable));

  std::unique_ptr<DeviceGroups> result(new DeviceGroups());
  result->groups_.world = host.world;
  // Context parallelism stays on the host's group: --cp runs on the CPU
  // only.
  result->groups_.cp = host.cp;
  // Without expert parallelism (ep groups of one rank) the ranks holding
  // the same experts are the dp group's: it serves both, so that a run
  // without --ep sets up no second transport over its dp ranks.
  const bool expert_dp_is_dp =
      host.ep != nullptr && host.ep->size() == 1 && host.dp != nullptr &&
      host.expert_dp != nullptr && host.expert_dp->size() == host.dp->size();
  Communicator* const* sources[] = {&host.tp,    &host.dp, &host.pp,
                                    &host.embed, &host.ep, &host.expert_dp};
  Communicator** targets[] = {&result->groups_.tp, &result->groups_.dp,
                              &result->groups_.pp, &result->groups_.embed,
                              &result->groups_.ep, &result->groups_.expert_dp};
  // The same order on every rank, so collective setups cannot cross.
  for (int i = 0; i < 6; ++i) {
    Communicator* group = *sources[i];
    if (group == nullptr) continue;  // This rank is in no embed group.
    if (sources[i] == &host.expert_dp && expert_dp_is_dp) {
      result->groups_.expert_dp = result->groups_.dp;
      continue;
    }
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

// One send to each neighbour PipelineExecutor sends to (the next stage and
// the previous one, NextStage and PrevStage) and one receive from each, as
// one batch: a batch never waits on itself, so every rank may post its
// sends and receives together whatever the group's size and transport.
// With two ranks both neighbours are the one peer, met once.
void ExchangeWithNeighbours(Communicator& group, Device device) {
  const int n = group.size(), r = group.rank();
  const int next = NextStage(r, n), prev = PrevStage(r, n);
  const Tensor out = Tensor::Zeros({1}, DType::kF32, device);
  const Tensor from_prev = Tensor::Zeros({1}, DType::kF32, device);
  const Tensor from_next = Tensor::Zeros({1}, DType::kF32, device);
  std::vector<P2POp> ops = {{P2POp::Type::kSend, out, next, kWarmUpTag},
                            {P2POp::Type::kRecv, from_prev, prev, kWarmUpTag}};
  if (next != prev) {
    ops.push_back({P2POp::Type::kSend, out, prev, kWarmUpTag});
    ops.push_back({P2POp::Type::kRecv, from_next, next, kWarmUpTag});
  }
  for (std::unique_ptr<Request>& request : group.BatchSendRecv(ops)) {
    request->Wait();
  }
}

}  // namespace

void WarmUpGroups(const ProcessGroups& groups, Device device) {
  for (Communicator* group : {groups.tp, groups.dp, groups.pp, groups.embed,
                              groups.ep, groups.expert_dp}) {
    if (group == nullptr || group->size() == 1) continue;
    if (group == groups.expert_dp && group == groups.dp) continue;
    Tensor buffer = Tensor::Zeros({1}, DType::kF32, device);
    group->AllReduce(buffer, ReduceOp::kSum);
    // Only the pipeline sends point-to-point: PipelineExecutor, whose
    // transfers are the only pipeline Send, Recv and BatchSendRecv calls of
    // a run, is given the pp group (Trainer and StageModel's evaluation).
    // tp, dp, embed and expert_dp run collectives alone, and connecting
    // their pairs would only take memory; ep's all-to-all connects its
    // pairs at its first exchange.
    if (group == groups.pp) ExchangeWithNeighbours(*group, device);
  }
  // The transports' setup is done before anyone measures memory.
  WaitForDevice(device);
}

}  // namespace trellis
