#include "parallel/host_staged_communicator.h"

#include <utility>

#include "framework/status.h"

namespace trellis {
namespace {

// A host copy of `t` (t itself when it is on the host already).
Tensor Stage(const Tensor& t) {
  TRELLIS_CHECK(t.defined()) << "undefined communication buffer";
  return t.device().is_cpu() ? t : t.To(Device::Cpu());
}

// Where a host result for `t` lands: `t` itself on the host, else a fresh
// host buffer (its old contents are overwritten anyway).
Tensor Landing(const Tensor& t) {
  TRELLIS_CHECK(t.defined()) << "undefined communication buffer";
  return t.device().is_cpu() ? t : Tensor::Empty(t.shape(), t.dtype());
}

// Copies the host result back into `t` when it was staged.
void Unstage(const Tensor& host, Tensor& t) {
  if (host.raw() != t.raw()) t.CopyFrom(host);
}

// Waits for an MPI request on a host copy, then copies the result back to
// the device buffer (for receives and async reductions).
std::unique_ptr<Request> StagedRequest(std::unique_ptr<Request> inner,
                                       Tensor host, Tensor target) {
  return std::make_unique<ThenRequest>(
      std::move(inner),
      [host = std::move(host), target]() mutable { Unstage(host, target); });
}

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(std::string name, MPI_Comm comm,
                                               bool owned)
    : HostStagedCommunicator(
          std::make_unique<MpiCommunicator>(std::move(name), comm, owned)) {}

HostStagedCommunicator::HostStagedCommunicator(
    std::unique_ptr<MpiCommunicator> mpi)
    : Communicator(mpi->name(), mpi->rank(), mpi->size()),
      mpi_(std::move(mpi)) {}

std::unique_ptr<Request> HostStagedCommunicator::DoAllReduce(Tensor& buffer,
                                                             ReduceOp op,
                                                             bool async) {
  Tensor host = Stage(buffer);
  if (!async) {
    mpi_->AllReduce(host, op);
    Unstage(host, buffer);
    return std::make_unique<DoneRequest>();
  }
  auto inner = mpi_->AllReduceAsync(host, op);
  return StagedRequest(std::move(inner), host, buffer);
}

// Reduce-scatter and all-gather run asynchronously on host copies (separate
// from each other even when the device buffers overlap); a blocking call
// waits at once.
std::unique_ptr<Request> HostStagedCommunicator::DoReduceScatter(
    const Tensor& input, Tensor& output, ReduceOp op, bool async) {
  Tensor host_output = Landing(output);
  std::unique_ptr<Request> request =
      StagedRequest(mpi_->ReduceScatterAsync(Stage(input), host_output, op),
                    host_output, output);
  if (async) return request;
  request->Wait();
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> HostStagedCommunicator::DoAllGather(
    const Tensor& input, Tensor& output, bool async) {
  Tensor host_output = Landing(output);
  std::unique_ptr<Request> request = StagedRequest(
      mpi_->AllGatherAsync(Stage(input), host_output), host_output, output);
  if (async) return request;
  request->Wait();
  return std::make_unique<DoneRequest>();
}

void HostStagedCommunicator::DoBroadcast(Tensor& buffer, int root) {
  Tensor host = Stage(buffer);
  mpi_->Broadcast(host, root);
  Unstage(host, buffer);
}

std::unique_ptr<Request> HostStagedCommunicator::DoSend(const Tensor& buffer,
                                                        int peer, int tag) {
  return mpi_->Send(Stage(buffer), peer, tag);
}

std::unique_ptr<Request> HostStagedCommunicator::DoRecv(Tensor& buffer,
                                                        int peer, int tag) {
  Tensor host = buffer.device().is_cpu()
                    ? buffer
                    : Tensor::Empty(buffer.shape(), buffer.dtype());
  auto inner = mpi_->Recv(host, peer, tag);
  return StagedRequest(std::move(inner), host, buffer);
}

std::vector<std::unique_ptr<Request>> HostStagedCommunicator::DoBatchSendRecv(
    const std::vector<P2POp>& ops) {
  std::vector<P2POp> host_ops = ops;
  for (P2POp& op : host_ops) {
    if (op.type == P2POp::Type::kSend) {
      op.buffer = Stage(op.buffer);
    } else if (!op.buffer.device().is_cpu()) {
      op.buffer = Tensor::Empty(op.buffer.shape(), op.buffer.dtype());
    }
  }
  std::vector<std::unique_ptr<Request>> requests =
      mpi_->BatchSendRecv(host_ops);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].type == P2POp::Type::kRecv) {
      requests[i] = StagedRequest(std::move(requests[i]), host_ops[i].buffer,
                                  ops[i].buffer);
    }
  }
  return requests;
}

void HostStagedCommunicator::DoBarrier() { mpi_->Barrier(); }

}  // namespace trellis
