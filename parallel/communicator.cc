#include "parallel/communicator.h"

#include "absl/strings/str_cat.h"

namespace trellis {
namespace {

bool Overlap(const Tensor& a, const Tensor& b) {
  if (a.device() != b.device()) return false;
  const char* a0 = static_cast<const char*>(a.raw());
  const char* b0 = static_cast<const char*>(b.raw());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace

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

int64_t WireBytes(CommOp op, int64_t bytes, int size) {
  switch (op) {
    case CommOp::kAllReduce:
      return 2 * (size - 1) * bytes / size;
    case CommOp::kReduceScatter:
    case CommOp::kAllGather:
      return (size - 1) * bytes / size;
    case CommOp::kBroadcast:
    case CommOp::kSend:
      return bytes;
    case CommOp::kRecv:
    case CommOp::kBarrier:
    case CommOp::kCount:
      break;
  }
  return 0;
}

void Communicator::Count(CommOp op, size_t bytes) {
  const int i = static_cast<int>(op);
  stats_.calls[i] += 1;
  stats_.bytes[i] += static_cast<int64_t>(bytes);
  stats_.wire_bytes[i] += WireBytes(op, static_cast<int64_t>(bytes), size_);
}

void Communicator::CheckReduceScatter(const Tensor& input,
                                      const Tensor& output) const {
  TRELLIS_CHECK(input.dtype() == output.dtype())
      << name_ << ": reduce-scatter of " << DTypeName(input.dtype()) << " into "
      << DTypeName(output.dtype());
  TRELLIS_CHECK_EQ(input.numel(), output.numel() * size_);
}

void Communicator::CheckAllGather(const Tensor& input,
                                  const Tensor& output) const {
  TRELLIS_CHECK(input.dtype() == output.dtype())
      << name_ << ": all-gather of " << DTypeName(input.dtype()) << " into "
      << DTypeName(output.dtype());
  TRELLIS_CHECK_EQ(output.numel(), input.numel() * size_);
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
  CheckReduceScatter(input, output);
  Count(CommOp::kReduceScatter, input.nbytes());
  DoReduceScatter(input, output, op, /*async=*/false)->Wait();
}

std::unique_ptr<Request> Communicator::ReduceScatterAsync(const Tensor& input,
                                                          Tensor& output,
                                                          ReduceOp op) {
  CheckReduceScatter(input, output);
  Count(CommOp::kReduceScatter, input.nbytes());
  return DoReduceScatter(input, output, op, /*async=*/true);
}

void Communicator::AllGather(const Tensor& input, Tensor& output) {
  CheckAllGather(input, output);
  Count(CommOp::kAllGather, output.nbytes());
  DoAllGather(input, output, /*async=*/false)->Wait();
}

std::unique_ptr<Request> Communicator::AllGatherAsync(const Tensor& input,
                                                      Tensor& output) {
  CheckAllGather(input, output);
  Count(CommOp::kAllGather, output.nbytes());
  return DoAllGather(input, output, /*async=*/true);
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

std::vector<std::unique_ptr<Request>> Communicator::BatchSendRecv(
    const std::vector<P2POp>& ops) {
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    TRELLIS_CHECK(op.peer >= 0 && op.peer < size_ && op.peer != rank_)
        << "peer " << op.peer;
    TRELLIS_CHECK(op.buffer.defined()) << "transfer " << i << " has no buffer";
    for (size_t j = 0; j < i; ++j) {
      const bool either_recv =
          op.type == P2POp::Type::kRecv || ops[j].type == P2POp::Type::kRecv;
      TRELLIS_CHECK(!either_recv || !Overlap(op.buffer, ops[j].buffer))
          << "transfers " << j << " and " << i
          << " of a batch overlap, and one of them receives";
    }
    Count(op.type == P2POp::Type::kSend ? CommOp::kSend : CommOp::kRecv,
          op.buffer.nbytes());
  }
  std::vector<std::unique_ptr<Request>> requests = DoBatchSendRecv(ops);
  TRELLIS_CHECK_EQ(requests.size(), ops.size());
  return requests;
}

std::vector<std::unique_ptr<Request>> Communicator::DoBatchSendRecv(
    const std::vector<P2POp>& ops) {
  std::vector<std::unique_ptr<Request>> requests;
  requests.reserve(ops.size());
  for (const P2POp& op : ops) {
    Tensor buffer = op.buffer;  // a handle: receives write its storage
    requests.push_back(op.type == P2POp::Type::kSend
                           ? DoSend(buffer, op.peer, op.tag)
                           : DoRecv(buffer, op.peer, op.tag));
  }
  return requests;
}

void Communicator::Barrier() {
  Count(CommOp::kBarrier, 0);
  DoBarrier();
}

std::unique_ptr<Request> SelfCommunicator::DoAllReduce(Tensor&, ReduceOp,
                                                       bool) {
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> SelfCommunicator::DoReduceScatter(const Tensor& input,
                                                           Tensor& output,
                                                           ReduceOp, bool) {
  if (input.raw() != output.raw()) output.CopyFrom(input);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> SelfCommunicator::DoAllGather(const Tensor& input,
                                                       Tensor& output, bool) {
  if (input.raw() != output.raw()) output.CopyFrom(input);
  return std::make_unique<DoneRequest>();
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
