// HostStagedCommunicator: the Communicator interface over MPI for buffers on
// any device. A buffer on a CUDA device is copied to host memory, the MPI
// operation runs there, and the result is copied back; host buffers go
// straight to MPI. This lets several ranks share one GPU (NCCL refuses two
// ranks on one device) and serves machines without NCCL, at the price of
// two device-host copies per call.
//
// Semantics are MpiCommunicator's (types, kAvg, tags, errors). Copies are
// synchronous (Tensor::CopyFrom), so a staged call sees every kernel issued
// before it, and its result is on the device when it returns; for
// AllReduceAsync, ReduceScatterAsync, AllGatherAsync and Recv, when Wait()
// returns (the input is copied out at the call). Send copies out before
// returning, so the device buffer may be reused at once. BatchSendRecv
// stages each op so and posts them as one batch of the MPI communicator.
//
// Thread safety: one thread drives a communicator at a time.
#ifndef TRELLIS_PARALLEL_HOST_STAGED_COMMUNICATOR_H_
#define TRELLIS_PARALLEL_HOST_STAGED_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace trellis {

class HostStagedCommunicator : public Communicator {
 public:
  // Serves the group `comm`; `owned` as for MpiCommunicator.
  HostStagedCommunicator(std::string name, MPI_Comm comm, bool owned);

  // The MPI communicator the staged calls go through (its CommStats count
  // the host-side calls).
  const MpiCommunicator& mpi() const { return *mpi_; }

 protected:
  std::unique_ptr<Request> DoAllReduce(Tensor& buffer, ReduceOp op,
                                       bool async) override;
  std::unique_ptr<Request> DoReduceScatter(const Tensor& input, Tensor& output,
                                           ReduceOp op, bool async) override;
  std::unique_ptr<Request> DoAllGather(const Tensor& input, Tensor& output,
                                       bool async) override;
  void DoBroadcast(Tensor& buffer, int root) override;
  std::unique_ptr<Request> DoSend(const Tensor& buffer, int peer,
                                  int tag) override;
  std::unique_ptr<Request> DoRecv(Tensor& buffer, int peer, int tag) override;
  std::vector<std::unique_ptr<Request>> DoBatchSendRecv(
      const std::vector<P2POp>& ops) override;
  void DoBarrier() override;

 private:
  explicit HostStagedCommunicator(std::unique_ptr<MpiCommunicator> mpi);
  std::unique_ptr<MpiCommunicator> mpi_;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_HOST_STAGED_COMMUNICATOR_H_
