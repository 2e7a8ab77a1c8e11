#include "parallel/mpi_communicator.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <functional>
#include <iostream>

#include "framework/float16.h"
#include "framework/status.h"

namespace trellis {
namespace internal {

void MpiFailure(const char* call, const char* file, int line, int code) {
  char message[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  if (MPI_Error_string(code, message, &length) != MPI_SUCCESS) {
    snprintf(message, sizeof(message), "MPI error code %d", code);
  }
  std::string where = ErrorContext();
  if (where.empty()) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    where = "rank " + std::to_string(rank) + " on " + host;
  }
  std::cerr << "MPI error: " << call << " failed at " << file << ":" << line
            << " (" << where << "): " << message << std::endl;
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

}  // namespace internal

namespace {

void CheckCpu(const Tensor& tensor) {
  TRELLIS_CHECK(tensor.defined() && tensor.device().is_cpu())
      << "MPI serves defined CPU buffers; this one is on "
      << DeviceName(tensor.device());
}

int ElementCount(const Tensor& tensor) {
  TRELLIS_CHECK_LE(tensor.numel(), static_cast<int64_t>(INT_MAX))
      << "elements in one MPI call";
  return static_cast<int>(tensor.numel());
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64;
}

MPI_Op MpiOp(ReduceOp op, DType dtype) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kAvg:
      TRELLIS_CHECK(IsFloating(dtype))
          << "average of " << DTypeName(dtype) << " values";
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
  }
  return MPI_OP_NULL;
}

// After a kAvg sum: divides by the group size.
void FinishAverage(const Tensor& tensor, ReduceOp op, int size) {
  if (op != ReduceOp::kAvg || size == 1) return;
  if (tensor.dtype() == DType::kF32) {
    float* data = tensor.data<float>();
    const float scale = 1.0f / static_cast<float>(size);
    for (int64_t i = 0; i < tensor.numel(); ++i) data[i] *= scale;
  } else {
    double* data = tensor.data<double>();
    for (int64_t i = 0; i < tensor.numel(); ++i) data[i] /= size;
  }
}

bool Overlap(const Tensor& a, const Tensor& b) {
  const char* a0 = static_cast<const char*>(a.raw());
  const char* b0 = static_cast<const char*>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// An MPI request; completes an average or checks a received size on Wait,
// then runs `then` (copies a result out of a scratch block).
class MpiRequest : public Request {
 public:
  MpiRequest(MPI_Request request, Tensor buffer, ReduceOp op, int group_size,
             bool is_recv, std::vector<Tensor> keep = {},
             std::function<void()> then = nullptr)
      : request_(request),
        buffer_(std::move(buffer)),
        op_(op),
        group_size_(group_size),
        is_recv_(is_recv),
        keep_(std::move(keep)),
        then_(std::move(then)) {}
  ~MpiRequest() override { Wait(); }

  void Wait() override {
    if (done_) return;
    MPI_Status status;
    TRELLIS_MPI_CHECK(MPI_Wait(&request_, &status));
    Finish(status);
  }

  bool Poll() override {
    if (done_) return true;
    int flag = 0;
    MPI_Status status;
    TRELLIS_MPI_CHECK(MPI_Test(&request_, &flag, &status));
    if (flag) Finish(status);
    return done_;
  }

 private:
  void Finish(const MPI_Status& status) {
    done_ = true;
    if (is_recv_) {
      int count = 0;
      TRELLIS_MPI_CHECK(
          MPI_Get_count(&status, MpiTransportType(buffer_.dtype()), &count));
      TRELLIS_CHECK_EQ(static_cast<int64_t>(count), buffer_.numel())
          << "elements received from rank " << status.MPI_SOURCE << " ";
    } else {
      FinishAverage(buffer_, op_, group_size_);
    }
    if (then_) then_();
    keep_.clear();
  }

  MPI_Request request_;
  Tensor buffer_;  // keeps the storage alive while MPI uses it
  ReduceOp op_;
  int group_size_;
  bool is_recv_;
  std::vector<Tensor> keep_;  // other buffers MPI uses
  std::function<void()> then_;
  bool done_ = false;
};

// Completes a blocking call: waits at once and returns a finished request.
std::unique_ptr<Request> Completed(std::unique_ptr<Request> request) {
  request->Wait();
  return std::make_unique<DoneRequest>();
}

// The 16-bit float types, which MPI cannot reduce: reductions widen them to
// float32 and round the result back once.
bool IsHalfWidthFloat(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF16;
}

// A float32 copy of `tensor`.
Tensor Widened(const Tensor& tensor) {
  Tensor wide = Tensor::Empty(tensor.shape(), DType::kF32);
  ConvertElements(tensor.raw(), tensor.dtype(), wide.raw(), DType::kF32,
                  tensor.numel());
  return wide;
}

// Narrows `wide` into `target` when `inner` completes: at once when the call
// is blocking.
std::unique_ptr<Request> NarrowWhenDone(std::unique_ptr<Request> inner,
                                        Tensor wide, Tensor target,
                                        bool async) {
  // Rounds to nearest, ties to even, keeping `wide` alive until then.
  auto request = std::make_unique<ThenRequest>(
      std::move(inner), [wide = std::move(wide), target = std::move(target)] {
        ConvertElements(wide.raw(), wide.dtype(), target.raw(), target.dtype(),
                        target.numel());
      });
  return async ? std::move(request) : Completed(std::move(request));
}

// Every transfer of a kRendezvous communicator uses this tag.
constexpr int kRendezvousTag = 0;

int CommRank(MPI_Comm comm) {
  int rank = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}

int CommSize(MPI_Comm comm) {
  int size = 0;
  TRELLIS_MPI_CHECK(MPI_Comm_size(comm, &size));
  return size;
}

}  // namespace

// The transfers of one kRendezvous batch; they complete together.
class MpiBatch {
 public:
  void Add(std::unique_ptr<Request> request) {
    requests_.push_back(std::move(request));
  }
  void Wait() {
    for (auto& r : requests_) r->Wait();
  }
  bool Poll() {
    bool done = true;
    for (auto& r : requests_) done = r->Poll() && done;
    return done;
  }

 private:
  std::vector<std::unique_ptr<Request>> requests_;
};

namespace {

// One transfer's view of its batch: done when the whole batch is.
class BatchMemberRequest : public Request {
 public:
  explicit BatchMemberRequest(std::shared_ptr<MpiBatch> batch)
      : batch_(std::move(batch)) {}
  void Wait() override { batch_->Wait(); }
  bool Poll() override { return batch_->Poll(); }

 private:
  std::shared_ptr<MpiBatch> batch_;
};

}  // namespace

MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU16:
      return MPI_UINT16_T;
    case DType::kU32:
      return MPI_UINT32_T;
    case DType::kBF16:
    case DType::kF16:
      break;
  }
  TRELLIS_CHECK(false) << "MPI has no type for " << DTypeName(dtype)
                       << "; move it as MpiTransportType, reduce it as f32";
  return MPI_DATATYPE_NULL;
}

MPI_Datatype MpiTransportType(DType dtype) {
  return IsHalfWidthFloat(dtype) ? MPI_UINT16_T : MpiType(dtype);
}

MpiCommunicator::MpiCommunicator(std::string name, MPI_Comm comm, bool owned,
                                 MpiP2P p2p)
    : Communicator(std::move(name), CommRank(comm), CommSize(comm)),
      comm_(comm),
      owned_(owned),
      p2p_(p2p) {
  TRELLIS_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
}

MpiCommunicator::~MpiCommunicator() {
  WaitForPendingBatch();
  if (owned_) TRELLIS_MPI_CHECK(MPI_Comm_free(&comm_));
}

void MpiCommunicator::WaitForPendingBatch() {
  if (pending_ == nullptr) return;
  pending_->Wait();
  pending_.reset();
}

std::unique_ptr<Request> MpiCommunicator::DoAllReduce(Tensor& buffer,
                                                      ReduceOp op, bool async) {
  WaitForPendingBatch();
  CheckCpu(buffer);
  if (IsHalfWidthFloat(buffer.dtype())) {
    Tensor wide = Widened(buffer);
    return NarrowWhenDone(DoAllReduce(wide, op, async), wide, buffer, async);
  }
  const MPI_Datatype type = MpiType(buffer.dtype());
  const MPI_Op mpi_op = MpiOp(op, buffer.dtype());
  if (!async) {
    TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buffer.raw(),
                                    ElementCount(buffer), type, mpi_op, comm_));
    FinishAverage(buffer, op, size());
    return std::make_unique<DoneRequest>();
  }
  MPI_Request request;
  TRELLIS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer.raw(),
                                   ElementCount(buffer), type, mpi_op, comm_,
                                   &request));
  return std::make_unique<MpiRequest>(request, buffer, op, size(),
                                      /*is_recv=*/false);
}

std::unique_ptr<Request> MpiCommunicator::DoReduceScatter(const Tensor& input,
                                                          Tensor& output,
                                                          ReduceOp op,
                                                          bool async) {
  WaitForPendingBatch();
  CheckCpu(input);
  CheckCpu(output);
  if (IsHalfWidthFloat(input.dtype())) {
    // The input is widened at the call, so an output that overlaps it may
    // take the result.
    Tensor wide_output = Tensor::Empty(output.shape(), DType::kF32);
    return NarrowWhenDone(DoReduceScatter(Widened(input), wide_output, op,
                                          /*async=*/true),
                          wide_output, output, async);
  }
  // MPI forbids overlapping buffers; reduce into a scratch block then and
  // copy it out once complete.
  const bool scratch = Overlap(input, output);
  const Tensor result =
      scratch ? Tensor::Empty(output.shape(), output.dtype()) : output;
  MPI_Request request;
  TRELLIS_MPI_CHECK(MPI_Ireduce_scatter_block(
      input.raw(), result.raw(), ElementCount(output), MpiType(input.dtype()),
      MpiOp(op, input.dtype()), comm_, &request));
  std::function<void()> then;
  if (scratch) then = [result, output] { Tensor(output).CopyFrom(result); };
  auto pending = std::make_unique<MpiRequest>(
      request, result, op, size(), /*is_recv=*/false,
      std::vector<Tensor>{input, output}, std::move(then));
  return async ? std::move(pending) : Completed(std::move(pending));
}

std::unique_ptr<Request> MpiCommunicator::DoAllGather(const Tensor& input,
                                                      Tensor& output,
                                                      bool async) {
  WaitForPendingBatch();
  CheckCpu(input);
  CheckCpu(output);
  const int count = ElementCount(input);
  const MPI_Datatype type = MpiTransportType(input.dtype());
  const char* own_block =
      static_cast<const char*>(output.raw()) + input.nbytes() * rank();
  MPI_Request request;
  Tensor source = input;
  if (input.raw() == own_block) {
    TRELLIS_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL,
                                     output.raw(), count, type, comm_,
                                     &request));
  } else {
    if (Overlap(input, output)) source = input.Clone();
    TRELLIS_MPI_CHECK(MPI_Iallgather(source.raw(), count, type, output.raw(),
                                     count, type, comm_, &request));
  }
  auto pending = std::make_unique<MpiRequest>(request, output, ReduceOp::kSum,
                                              size(), /*is_recv=*/false,
                                              std::vector<Tensor>{source});
  return async ? std::move(pending) : Completed(std::move(pending));
}

void MpiCommunicator::DoBroadcast(Tensor& buffer, int root) {
  WaitForPendingBatch();
  CheckCpu(buffer);
  TRELLIS_MPI_CHECK(MPI_Bcast(buffer.raw(), ElementCount(buffer),
                              MpiTransportType(buffer.dtype()), root, comm_));
}

std::unique_ptr<Request> MpiCommunicator::PostSend(const Tensor& buffer,
                                                   int peer, int tag) {
  CheckCpu(buffer);
  MPI_Request request;
  if (p2p_ == MpiP2P::kRendezvous) {
    TRELLIS_MPI_CHECK(MPI_Issend(buffer.raw(), ElementCount(buffer),
                                 MpiTransportType(buffer.dtype()), peer,
                                 kRendezvousTag, comm_, &request));
  } else {
    TRELLIS_MPI_CHECK(MPI_Isend(buffer.raw(), ElementCount(buffer),
                                MpiTransportType(buffer.dtype()), peer, tag,
                                comm_, &request));
  }
  return std::make_unique<MpiRequest>(request, buffer, ReduceOp::kSum, 1,
                                      /*is_recv=*/false);
}

std::unique_ptr<Request> MpiCommunicator::PostRecv(const Tensor& buffer,
                                                   int peer, int tag) {
  CheckCpu(buffer);
  MPI_Request request;
  TRELLIS_MPI_CHECK(MPI_Irecv(
      buffer.raw(), ElementCount(buffer), MpiTransportType(buffer.dtype()),
      peer, p2p_ == MpiP2P::kRendezvous ? kRendezvousTag : tag, comm_,
      &request));
  return std::make_unique<MpiRequest>(request, buffer, ReduceOp::kSum, 1,
                                      /*is_recv=*/true);
}

std::unique_ptr<Request> MpiCommunicator::DoSend(const Tensor& buffer, int peer,
                                                 int tag) {
  if (p2p_ == MpiP2P::kRendezvous) {
    return std::move(
        DoBatchSendRecv({P2POp{P2POp::Type::kSend, buffer, peer, tag}})
            .front());
  }
  return PostSend(buffer, peer, tag);
}

std::unique_ptr<Request> MpiCommunicator::DoRecv(Tensor& buffer, int peer,
                                                 int tag) {
  if (p2p_ == MpiP2P::kRendezvous) {
    return std::move(
        DoBatchSendRecv({P2POp{P2POp::Type::kRecv, buffer, peer, tag}})
            .front());
  }
  return PostRecv(buffer, peer, tag);
}

std::vector<std::unique_ptr<Request>> MpiCommunicator::DoBatchSendRecv(
    const std::vector<P2POp>& ops) {
  if (p2p_ == MpiP2P::kEager) return Communicator::DoBatchSendRecv(ops);
  WaitForPendingBatch();
  auto batch = std::make_shared<MpiBatch>();
  for (const P2POp& op : ops) {
    batch->Add(op.type == P2POp::Type::kSend
                   ? PostSend(op.buffer, op.peer, op.tag)
                   : PostRecv(op.buffer, op.peer, op.tag));
  }
  std::vector<std::unique_ptr<Request>> requests;
  for (size_t i = 0; i < ops.size(); ++i) {
    requests.push_back(std::make_unique<BatchMemberRequest>(batch));
  }
  pending_ = std::move(batch);
  return requests;
}

void MpiCommunicator::DoBarrier() {
  WaitForPendingBatch();
  TRELLIS_MPI_CHECK(MPI_Barrier(comm_));
}

}  // namespace trellis
