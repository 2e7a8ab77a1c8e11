#include "parallel/nccl_communicator.h"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/status.h"

#define TRELLIS_NCCL_CHECK(call)                      \
  do {                                                \
    const ncclResult_t _trellis_nccl_result = (call); \
    if (_trellis_nccl_result != ncclSuccess) {        \
      ::trellis::internal::DeviceCallFailure(         \
          "NCCL", #call, __FILE__, __LINE__,          \
          ncclGetErrorString(_trellis_nccl_result));  \
    }                                                 \
  } while (0)

namespace trellis {
namespace {

int UserRank(ncclComm_t comm) {
  int rank = 0;
  TRELLIS_NCCL_CHECK(ncclCommUserRank(comm, &rank));
  return rank;
}

int GroupSize(ncclComm_t comm) {
  int count = 0;
  TRELLIS_NCCL_CHECK(ncclCommCount(comm, &count));
  return count;
}

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU32:
      return ncclUint32;
    case DType::kU16:
      break;
  }
  TRELLIS_CHECK(false) << "NCCL cannot reduce " << DTypeName(dtype)
                       << " values";
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op, DType dtype) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      TRELLIS_CHECK(dtype == DType::kF32 || dtype == DType::kF64 ||
                    dtype == DType::kBF16 || dtype == DType::kF16)
          << "average of " << DTypeName(dtype) << " values";
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

bool Overlap(const Tensor& a, const Tensor& b) {
  const char* a0 = static_cast<const char*>(a.raw());
  const char* b0 = static_cast<const char*>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

cudaEvent_t NewEvent() {
  cudaEvent_t event = nullptr;
  TRELLIS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

// An event, destroyed with the last request that shares it.
class SharedEvent {
 public:
  SharedEvent(int device, cudaEvent_t event) : device_(device), event_(event) {}
  ~SharedEvent() {
    CudaDeviceGuard guard(device_);
    TRELLIS_CUDA_CHECK(cudaEventDestroy(event_));
  }
  SharedEvent(const SharedEvent&) = delete;
  SharedEvent& operator=(const SharedEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_;
};

// Work recorded on a communication stream; Wait() orders the compute stream
// after it. Keeps the buffer's storage alive until then. The transfers of
// one batch share their event.
class NcclRequest : public Request {
 public:
  NcclRequest(int device, std::shared_ptr<SharedEvent> done,
              std::vector<Tensor> keep)
      : device_(device), done_(std::move(done)), keep_(std::move(keep)) {}
  ~NcclRequest() override { Wait(); }

  void Wait() override {
    if (waited_) return;
    CudaDeviceGuard guard(device_);
    TRELLIS_CUDA_CHECK(cudaStreamWaitEvent(ComputeStream(), done_->get(), 0));
    waited_ = true;
    keep_.clear();
  }

  // Completed once the communication stream has run the work; Wait() then
  // only orders the compute stream after it.
  bool Poll() override {
    if (waited_) return true;
    CudaDeviceGuard guard(device_);
    const cudaError_t state = cudaEventQuery(done_->get());
    if (state == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error: clear it
      return false;
    }
    TRELLIS_CUDA_CHECK(state);
    Wait();
    return true;
  }

 private:
  int device_;
  std::shared_ptr<SharedEvent> done_;
  std::vector<Tensor> keep_;
  bool waited_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(std::string name, ncclComm_t comm,
                                   int device)
    : Communicator(std::move(name), UserRank(comm), GroupSize(comm)),
      comm_(comm),
      device_(device) {
  CudaDeviceGuard guard(device_);
  TRELLIS_CUDA_CHECK(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TRELLIS_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(float)));
  TRELLIS_CUDA_CHECK(cudaMemset(barrier_word_, 0, sizeof(float)));
}

NcclCommunicator::~NcclCommunicator() {
  CudaDeviceGuard guard(device_);
  WaitForCudaStream(stream_);
  TRELLIS_NCCL_CHECK(ncclCommDestroy(comm_));
  TRELLIS_CUDA_CHECK(cudaFree(barrier_word_));
  TRELLIS_CUDA_CHECK(cudaStreamDestroy(stream_));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::CreateWorld(
    std::string name, MPI_Comm comm, int device) {
  // NCCL 2.22 and later connect a communicator's algorithms lazily, each
  // at the first collective that uses it, so a warm-up collective
  // (WarmUpGroups) connects only the algorithm its size picks and the
  // others would take their buffers mid-run, after the memory arena was
  // sized from the free memory. With 0 every algorithm connects in
  // ncclCommInitRank and ncclCommSplit. NCCL reads the variable once, so it
  // is set before the first NCCL call; a value the user set wins.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  int rank = 0, size = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  TRELLIS_MPI_CHECK(MPI_Comm_size(comm, &size));
  ncclUniqueId id;
  if (rank == 0) TRELLIS_NCCL_CHECK(ncclGetUniqueId(&id));
  TRELLIS_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm));
  CudaDeviceGuard guard(device);
  ncclComm_t nccl = nullptr;
  TRELLIS_NCCL_CHECK(ncclCommInitRank(&nccl, size, id, rank));
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(name), nccl, device));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::Split(std::string name,
                                                          int color, int key) {
  CudaDeviceGuard guard(device_);
  WaitForCudaStream(stream_);
  ncclComm_t nccl = nullptr;
  TRELLIS_NCCL_CHECK(ncclCommSplit(comm_, color, key, &nccl, nullptr));
  if (color == kNoColor || nccl == nullptr) return nullptr;
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(name), nccl, device_));
}

void NcclCommunicator::CheckBuffer(const Tensor& t) const {
  TRELLIS_CHECK(t.defined() && t.device() == Device::Cuda(device_))
      << "NCCL communicator \"" << name() << "\" serves cuda:" << device_
      << " buffers; this one is on " << DeviceName(t.device());
}

void NcclCommunicator::AfterCompute() {
  cudaEvent_t ready = NewEvent();
  TRELLIS_CUDA_CHECK(cudaEventRecord(ready, ComputeStream()));
  TRELLIS_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
  TRELLIS_CUDA_CHECK(cudaEventDestroy(ready));  // released once it fires
}

std::unique_ptr<Request> NcclCommunicator::Finish(std::vector<Tensor> keep,
                                                  bool async) {
  cudaEvent_t done = NewEvent();
  TRELLIS_CUDA_CHECK(cudaEventRecord(done, stream_));
  auto request = std::make_unique<NcclRequest>(
      device_, std::make_shared<SharedEvent>(device_, done), std::move(keep));
  if (!async) {
    request->Wait();
    return std::make_unique<DoneRequest>();
  }
  return request;
}

std::unique_ptr<Request> NcclCommunicator::DoAllReduce(Tensor& buffer,
                                                       ReduceOp op,
                                                       bool async) {
  CheckBuffer(buffer);
  const ncclDataType_t type = NcclType(buffer.dtype());
  const ncclRedOp_t nccl_op = NcclOp(op, buffer.dtype());
  CudaDeviceGuard guard(device_);
  AfterCompute();
  TRELLIS_NCCL_CHECK(ncclAllReduce(buffer.raw(), buffer.raw(),
                                   static_cast<size_t>(buffer.numel()), type,
                                   nccl_op, comm_, stream_));
  return Finish({buffer}, async);
}

std::unique_ptr<Request> NcclCommunicator::DoReduceScatter(const Tensor& input,
                                                           Tensor& output,
                                                           ReduceOp op,
                                                           bool async) {
  CheckBuffer(input);
  CheckBuffer(output);
  const ncclDataType_t type = NcclType(input.dtype());
  const ncclRedOp_t nccl_op = NcclOp(op, input.dtype());
  CudaDeviceGuard guard(device_);
  AfterCompute();
  // NCCL's in-place form is output == input's own block; other overlaps
  // reduce into a scratch block, copied out on the communication stream and
  // kept alive by the request until the compute stream is ordered after it.
  const bool in_place =
      static_cast<const char*>(output.raw()) ==
      static_cast<const char*>(input.raw()) + output.nbytes() * rank();
  const Tensor result =
      !in_place && Overlap(input, output)
          ? Tensor::Empty(output.shape(), output.dtype(), output.device())
          : output;
  TRELLIS_NCCL_CHECK(ncclReduceScatter(input.raw(), result.raw(),
                                       static_cast<size_t>(output.numel()),
                                       type, nccl_op, comm_, stream_));
  if (result.raw() != output.raw()) {
    TRELLIS_CUDA_CHECK(cudaMemcpyAsync(output.raw(), result.raw(),
                                       output.nbytes(),
                                       cudaMemcpyDeviceToDevice, stream_));
  }
  return Finish({input, output, result}, async);
}

std::unique_ptr<Request> NcclCommunicator::DoAllGather(const Tensor& input,
                                                       Tensor& output,
                                                       bool async) {
  CheckBuffer(input);
  CheckBuffer(output);
  CudaDeviceGuard guard(device_);
  AfterCompute();
  const bool in_place =
      static_cast<const char*>(input.raw()) ==
      static_cast<const char*>(output.raw()) + input.nbytes() * rank();
  Tensor source = input;
  if (!in_place && Overlap(input, output)) {
    source = Tensor::Empty(input.shape(), input.dtype(), input.device());
    TRELLIS_CUDA_CHECK(cudaMemcpyAsync(source.raw(), input.raw(),
                                       input.nbytes(), cudaMemcpyDeviceToDevice,
                                       stream_));
  }
  TRELLIS_NCCL_CHECK(ncclAllGather(source.raw(), output.raw(), input.nbytes(),
                                   ncclUint8, comm_, stream_));
  return Finish({input, output, source}, async);
}

void NcclCommunicator::DoBroadcast(Tensor& buffer, int root) {
  CheckBuffer(buffer);
  CudaDeviceGuard guard(device_);
  AfterCompute();
  TRELLIS_NCCL_CHECK(ncclBroadcast(buffer.raw(), buffer.raw(), buffer.nbytes(),
                                   ncclUint8, root, comm_, stream_));
  Finish({buffer}, /*async=*/false);
}

std::unique_ptr<Request> NcclCommunicator::DoSend(const Tensor& buffer,
                                                  int peer, int tag) {
  return std::move(
      DoBatchSendRecv({P2POp{P2POp::Type::kSend, buffer, peer, tag}}).front());
}

std::unique_ptr<Request> NcclCommunicator::DoRecv(Tensor& buffer, int peer,
                                                  int tag) {
  return std::move(
      DoBatchSendRecv({P2POp{P2POp::Type::kRecv, buffer, peer, tag}}).front());
}

std::vector<std::unique_ptr<Request>> NcclCommunicator::DoBatchSendRecv(
    const std::vector<P2POp>& ops) {
  for (const P2POp& op : ops) CheckBuffer(op.buffer);
  CudaDeviceGuard guard(device_);
  AfterCompute();
  // One group: NCCL starts its transfers together, so a send and a receive
  // between the same two ranks cannot wait on each other.
  TRELLIS_NCCL_CHECK(ncclGroupStart());
  for (const P2POp& op : ops) {
    if (op.type == P2POp::Type::kSend) {
      TRELLIS_NCCL_CHECK(ncclSend(op.buffer.raw(), op.buffer.nbytes(),
                                  ncclUint8, op.peer, comm_, stream_));
    } else {
      TRELLIS_NCCL_CHECK(ncclRecv(op.buffer.raw(), op.buffer.nbytes(),
                                  ncclUint8, op.peer, comm_, stream_));
    }
  }
  TRELLIS_NCCL_CHECK(ncclGroupEnd());
  cudaEvent_t event = NewEvent();
  TRELLIS_CUDA_CHECK(cudaEventRecord(event, stream_));
  auto done = std::make_shared<SharedEvent>(device_, event);
  std::vector<std::unique_ptr<Request>> requests;
  requests.reserve(ops.size());
  for (const P2POp& op : ops) {
    requests.push_back(
        std::make_unique<NcclRequest>(device_, done, std::vector{op.buffer}));
  }
  return requests;
}

void NcclCommunicator::DoBarrier() {
  CudaDeviceGuard guard(device_);
  AfterCompute();
  TRELLIS_NCCL_CHECK(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32,
                                   ncclSum, comm_, stream_));
  WaitForCudaStream(stream_);
}

}  // namespace trellis
