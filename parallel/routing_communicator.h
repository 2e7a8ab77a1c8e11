// RoutingCommunicator: one group, two transports. Calls on host buffers go
// to `host` (MPI: the trainer's scalars, flags and checkpoint bookkeeping),
// calls on device buffers to `device` (NCCL or host staging: activations,
// gradients). Both span the same ranks in the same order, so either serves
// any call; which one runs depends only on where the buffer lives.
//
// Thread safety: as the communicators it routes to.
#ifndef TRELLIS_PARALLEL_ROUTING_COMMUNICATOR_H_
#define TRELLIS_PARALLEL_ROUTING_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace trellis {

class RoutingCommunicator : public Communicator {
 public:
  // `host` must outlive this. REQUIRES: both span the same ranks.
  RoutingCommunicator(Communicator& host, std::unique_ptr<Communicator> device);

  Communicator& host() { return host_; }
  Communicator& device() { return *device_; }

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
  // All ops of a batch must be on one side (host or device).
  std::vector<std::unique_ptr<Request>> DoBatchSendRecv(
      const std::vector<P2POp>& ops) override;
  void DoBarrier() override;

 private:
  Communicator& For(const Tensor& buffer);

  Communicator& host_;
  std::unique_ptr<Communicator> device_;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_ROUTING_COMMUNICATOR_H_
