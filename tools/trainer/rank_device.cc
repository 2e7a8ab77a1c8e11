#include "tools/trainer/rank_device.h"

#include "framework/device_info.h"
#include "framework/gemm_tuning.h"
#include "framework/status.h"

namespace trellis {
namespace {

// On a GPU, memory the libraries take after the arena: cuBLASLt's 32 MiB
// workspace, the stream-ordered pool of kernels' scratch, cuBLAS handles.
constexpr size_t kCudaLibraryReserve = size_t{256} << 20;

}  // namespace

absl::StatusOr<RankDevice> SetUpRankDevice(const TrainOptions& options,
                                           const ProcessGroups& mpi_groups,
                                           DType dtype) {
  absl::StatusOr<Device> device = SelectDevice(options.device);
  TRELLIS_RETURN_IF_ERROR(AgreeOnStatus(*mpi_groups.world, device.status()));
  RankDevice out;
  out.device = *device;
  out.dtype = dtype;
  out.groups = mpi_groups;
  if (out.device.is_cuda()) {
    SetGemmAutotune(options.gemm_autotune);
    TRELLIS_ASSIGN_OR_RETURN(
        out.device_groups,
        DeviceGroups::Create(mpi_groups, out.device, options.gpu_comm));
    out.groups = out.device_groups->groups();
    // NCCL connects lazily: its buffers must exist before free memory is
    // measured for the arena.
    WarmUpGroups(out.groups, out.device);
    if (options.precision == Precision::kBf16 && dtype == DType::kF32) {
      out.dtype = DType::kBF16;
    }
  }
  return out;
}

size_t AvailableMemory(const TrainOptions& options, Device device) {
  if (options.memory_budget_gb > 0) {
    return static_cast<size_t>(options.memory_budget_gb * (1ull << 30));
  }
  const size_t free = DeviceMemoryAvailable(device);
  const size_t reserve = device.is_cuda() ? kCudaLibraryReserve : 0;
  return free > reserve ? free - reserve : 0;
}

double AllReduceScalar(Communicator& group, double value, ReduceOp op) {
  if (group.size() == 1) return value;
  Tensor t = Tensor::Empty({1}, DType::kF64);
  t.data<double>()[0] = value;
  group.AllReduce(t, op);
  return t.data<double>()[0];
}

}  // namespace trellis
