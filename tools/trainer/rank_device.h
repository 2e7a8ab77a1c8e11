// RankDevice: the device a rank computes on and the process groups that
// reach it, set up alike for training and evaluation.
//
// With --device=cuda each rank takes the GPU of its local rank and the MPI
// groups gain device transports (--gpu_comm), warmed up so that NCCL's
// buffers exist before free memory is measured; --precision=bf16 turns a
// float32 run into bfloat16. A rank without a usable device fails on every
// rank alike (collective over the world group).
#ifndef TRELLIS_TOOLS_TRAINER_RANK_DEVICE_H_
#define TRELLIS_TOOLS_TRAINER_RANK_DEVICE_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "framework/tensor.h"
#include "parallel/bootstrap.h"
#include "parallel/device_groups.h"
#include "tools/options/options.h"

namespace trellis {

struct RankDevice {
  Device device;
  DType dtype = DType::kF32;
  // The groups to use: `mpi_groups` routed through device_groups on a GPU.
  ProcessGroups groups;
  std::unique_ptr<DeviceGroups> device_groups;
};

absl::StatusOr<RankDevice> SetUpRankDevice(const TrainOptions& options,
                                           const ProcessGroups& mpi_groups,
                                           DType dtype);

// What a run may hold on `device`: --memory_budget_gb, else the device's
// free memory now less what libraries allocate later outside the arena
// (cuBLASLt's workspace, stream-ordered scratch).
size_t AvailableMemory(const TrainOptions& options, Device device);

// `value` all-reduced over `group` (skipped for a group of one).
double AllReduceScalar(Communicator& group, double value, ReduceOp op);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_RANK_DEVICE_H_
