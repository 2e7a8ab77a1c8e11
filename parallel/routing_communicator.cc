#include "parallel/routing_communicator.h"

#include "framework/status.h"

namespace trellis {

RoutingCommunicator::RoutingCommunicator(Communicator& host,
                                         std::unique_ptr<Communicator> device)
    : Communicator(host.name(), host.rank(), host.size()),
      host_(host),
      device_(std::move(device)) {
  TRELLIS_CHECK(device_->rank() == host.rank() &&
                device_->size() == host.size())
      << name() << ": the device communicator (rank " << device_->rank()
      << " of " << device_->size() << ") is not the host one's (rank "
      << host.rank() << " of " << host.size() << ")";
}

Communicator& RoutingCommunicator::For(const Tensor& buffer) {
  return buffer.device().is_cpu() ? host_ : *device_;
}

std::unique_ptr<Request> RoutingCommunicator::DoAllReduce(Tensor& buffer,
                                                          ReduceOp op,
                                                          bool async) {
  Communicator& c = For(buffer);
  if (async) return c.AllReduceAsync(buffer, op);
  c.AllReduce(buffer, op);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> RoutingCommunicator::DoReduceScatter(
    const Tensor& input, Tensor& output, ReduceOp op, bool async) {
  Communicator& c = For(input);
  if (async) return c.ReduceScatterAsync(input, output, op);
  c.ReduceScatter(input, output, op);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> RoutingCommunicator::DoAllGather(const Tensor& input,
                                                          Tensor& output,
                                                          bool async) {
  Communicator& c = For(input);
  if (async) return c.AllGatherAsync(input, output);
  c.AllGather(input, output);
  return std::make_unique<DoneRequest>();
}

void RoutingCommunicator::DoBroadcast(Tensor& buffer, int root) {
  For(buffer).Broadcast(buffer, root);
}

std::unique_ptr<Request> RoutingCommunicator::DoSend(const Tensor& buffer,
                                                     int peer, int tag) {
  return For(buffer).Send(buffer, peer, tag);
}

std::unique_ptr<Request> RoutingCommunicator::DoRecv(Tensor& buffer, int peer,
                                                     int tag) {
  return For(buffer).Recv(buffer, peer, tag);
}

std::vector<std::unique_ptr<Request>> RoutingCommunicator::DoBatchSendRecv(
    const std::vector<P2POp>& ops) {
  if (ops.empty()) return {};
  Communicator& c = For(ops.front().buffer);
  for (const P2POp& op : ops) {
    TRELLIS_CHECK(&For(op.buffer) == &c)
        << name() << ": a batch mixes host and device buffers";
  }
  return c.BatchSendRecv(ops);
}

void RoutingCommunicator::DoBarrier() { host_.Barrier(); }

}  // namespace trellis
