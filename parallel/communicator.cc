#include "parallel/communicator.h"

#include "absl/strings/str_cat.h"

namespace trellis {

const char* CommOpName(CommOp op) {
  switch (op) {
    case CommOp::kAllReduce:
      return "all_reduce";
    case CommOp::kReduceScatter:
      return "reduce_scatter";
    case CommOp::kAllGather:
      return "all_gather";
    case CommOp::kBroadcast:
      return "broadcast";
    case CommOp::kSend:
      return "send";
    case CommOp::kRecv:
      return "recv";
    case CommOp::kBarrier:
      return "barrier";
    case CommOp::kCount:
      break;
  }
  return "?";
}

void Communicator::Count(CommOp op, size_t bytes) {
  stats_.calls[static_cast<int>(op)] += 1;
  stats_.bytes[static_cast<int>(op)] += static_cast<int64_t>(bytes);
}

void Communicator::AllReduce(Tensor& buffer, ReduceOp op) {
  Count(CommOp::kAllReduce, buffer.nbytes());
  DoAllReduce(buffer, op, /*async=*/false)->Wait();
}

std::unique_ptr<Request> Communicator::AllReduceAsync(Tensor& buffer,
                                                      ReduceOp op) {
  Count(CommOp::kAllReduce, buffer.nbytes());
  return DoAllReduce(buffer, op, /*async=*/true);
}

void Communicator::ReduceScatter(const Tensor& input, Tensor& output,
                                 ReduceOp op) {
  TRELLIS_CHECK_EQ(input.numel(), output.numel() * size_);
  Count(CommOp::kReduceScatter, input.nbytes());
  DoReduceScatter(input, output, op);
}

void Communicator::AllGather(const Tensor& input, Tensor& output) {
  TRELLIS_CHECK_EQ(output.numel(), input.numel() * size_);
  Count(CommOp::kAllGather, output.nbytes());
  DoAllGather(input, output);
}

void Communicator::Broadcast(Tensor& buffer, int root) {
  TRELLIS_CHECK(root >= 0 && root < size_) << "root " << root;
  Count(CommOp::kBroadcast, buffer.nbytes());
  DoBroadcast(buffer, root);
}

std::unique_ptr<Request> Communicator::Send(const Tensor& buffer, int peer,
                                            int tag) {
  TRELLIS_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "peer " << peer;
  Count(CommOp::kSend, buffer.nbytes());
  return DoSend(buffer, peer, tag);
}

std::unique_ptr<Request> Communicator::Recv(Tensor& buffer, int peer, int tag) {
  TRELLIS_CHECK(peer >= 0 && peer < size_ && peer != rank_) << "peer " << peer;
  Count(CommOp::kRecv, buffer.nbytes());
  return DoRecv(buffer, peer, tag);
}

void Communicator::Barrier() {
  Count(CommOp::kBarrier, 0);
  DoBarrier();
}

std::unique_ptr<Request> SelfCommunicator::DoAllReduce(Tensor&, ReduceOp,
                                                       bool) {
  return std::make_unique<DoneRequest>();
}

void SelfCommunicator::DoReduceScatter(const Tensor& input, Tensor& output,
                                       ReduceOp) {
  if (input.raw() != output.raw()) output.CopyFrom(input);
}

void SelfCommunicator::DoAllGather(const Tensor& input, Tensor& output) {
  if (input.raw() != output.raw()) output.CopyFrom(input);
}

void SelfCommunicator::DoBroadcast(Tensor&, int) {}

std::unique_ptr<Request> SelfCommunicator::DoSend(const Tensor&, int, int) {
  TRELLIS_CHECK(false) << "send in a group of one";
  return nullptr;
}

std::unique_ptr<Request> SelfCommunicator::DoRecv(Tensor&, int, int) {
  TRELLIS_CHECK(false) << "receive in a group of one";
  return nullptr;
}

void SelfCommunicator::DoBarrier() {}

absl::Status AgreeOnStatus(Communicator& group, const absl::Status& mine) {
  Tensor failed = Tensor::Empty({1}, DType::kI32);
  // MAX of (size - rank) finds the lowest failing rank.
  failed.data<int32_t>()[0] = mine.ok() ? 0 : group.size() - group.rank();
  group.AllReduce(failed, ReduceOp::kMax);
  if (!mine.ok()) return mine;
  const int32_t code = failed.data<int32_t>()[0];
  if (code == 0) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("rank ", group.size() - code,
                                         " of group ", group.name(),
                                         " failed (see its message)"));
}

}  // namespace trellis
