#include "parallel/tracing_communicator.h"

#include <chrono>
#include <utility>

namespace trellis {

using Clock = std::chrono::steady_clock;

// A request whose Wait is recorded by the communicator that issued it.
class TracedRequest : public Request {
 public:
  TracedRequest(TracingCommunicator& owner, std::unique_ptr<Request> inner,
                std::string name, TraceArgs args, int tag, int64_t number)
      : owner_(owner),
        inner_(std::move(inner)),
        name_(std::move(name)),
        args_(std::move(args)),
        tag_(tag),
        number_(number) {}

  // A completed poll is not a wait: the span recorded by Wait() then
  // measures the (near zero) time left.
  bool Poll() override { return inner_->Poll(); }

  void Wait() override {
    if (!owner_.recorder_.active()) {
      inner_->Wait();
      return;
    }
    const Clock::time_point start = Clock::now();
    inner_->Wait();
    const Clock::time_point end = Clock::now();
    TraceRecorder& recorder = owner_.recorder_;
    const double start_us = recorder.MicrosSinceOrigin(start);
    owner_.RecordWait(
        TraceSpan{std::move(name_), owner_.name(), owner_.lane_, start_us,
                  recorder.MicrosSinceOrigin(end) - start_us, std::move(args_)},
        tag_, number_);
  }

 private:
  TracingCommunicator& owner_;
  std::unique_ptr<Request> inner_;
  std::string name_;
  TraceArgs args_;
  int tag_;
  int64_t number_;
};

TracingCommunicator::TracingCommunicator(Communicator& inner,
                                         TraceRecorder& recorder, int lane)
    : Communicator(inner.name(), inner.rank(), inner.size()),
      inner_(inner),
      recorder_(recorder),
      lane_(lane) {}

template <typename Fn>
void TracingCommunicator::Traced(const char* name, TraceArgs args, Fn&& fn) {
  if (!recorder_.active()) {
    fn();
    return;
  }
  const Clock::time_point start = Clock::now();
  fn();
  recorder_.AddSpan(name, this->name().c_str(), lane_, start, Clock::now(),
                    std::move(args));
}

std::unique_ptr<Request> TracingCommunicator::Wrap(
    std::unique_ptr<Request> request, std::string name, TraceArgs args, int tag,
    int64_t number) {
  if (!recorder_.active()) return request;
  return std::make_unique<TracedRequest>(
      *this, std::move(request), std::move(name), std::move(args), tag, number);
}

void TracingCommunicator::RecordWait(TraceSpan span, int tag, int64_t number) {
  if (number >= 0 && recv_namer_) recv_namer_(tag, number, span);
  recorder_.mutable_spans().push_back(std::move(span));
}

std::unique_ptr<Request> TracingCommunicator::DoAllReduce(Tensor& buffer,
                                                          ReduceOp op,
                                                          bool async) {
  if (async) {
    std::unique_ptr<Request> request = inner_.AllReduceAsync(buffer, op);
    if (!recorder_.active()) return request;
    return Wrap(std::move(request), "wait all_reduce",
                {{"bytes", static_cast<int64_t>(buffer.nbytes())}}, -1, -1);
  }
  const TraceArgs args = {{"bytes", static_cast<int64_t>(buffer.nbytes())}};
  Traced("all_reduce", args, [&] { inner_.AllReduce(buffer, op); });
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> TracingCommunicator::DoReduceScatter(
    const Tensor& input, Tensor& output, ReduceOp op, bool async) {
  const TraceArgs args = {{"bytes", static_cast<int64_t>(input.nbytes())}};
  if (async) {
    return Wrap(inner_.ReduceScatterAsync(input, output, op),
                "wait reduce_scatter", args, -1, -1);
  }
  Traced("reduce_scatter", args,
         [&] { inner_.ReduceScatter(input, output, op); });
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Request> TracingCommunicator::DoAllGather(const Tensor& input,
                                                          Tensor& output,
                                                          bool async) {
  const TraceArgs args = {{"bytes", static_cast<int64_t>(output.nbytes())}};
  if (async) {
    return Wrap(inner_.AllGatherAsync(input, output), "wait all_gather", args,
                -1, -1);
  }
  Traced("all_gather", args, [&] { inner_.AllGather(input, output); });
  return std::make_unique<DoneRequest>();
}

void TracingCommunicator::DoBroadcast(Tensor& buffer, int root) {
  Traced("broadcast",
         {{"bytes", static_cast<int64_t>(buffer.nbytes())}, {"root", root}},
         [&] { inner_.Broadcast(buffer, root); });
}

std::unique_ptr<Request> TracingCommunicator::WrapTransfer(
    std::unique_ptr<Request> request, bool is_recv, int64_t bytes, int peer,
    int tag, int64_t number) {
  if (!recorder_.active()) return request;
  return Wrap(std::move(request), is_recv ? "wait recv" : "wait send",
              {{"bytes", bytes}, {"peer", peer}, {"tag", tag}}, tag, number);
}

std::unique_ptr<Request> TracingCommunicator::DoSend(const Tensor& buffer,
                                                     int peer, int tag) {
  return WrapTransfer(inner_.Send(buffer, peer, tag), /*is_recv=*/false,
                      static_cast<int64_t>(buffer.nbytes()), peer, tag, -1);
}

std::unique_ptr<Request> TracingCommunicator::DoRecv(Tensor& buffer, int peer,
                                                     int tag) {
  const int64_t number = recv_numbers_[tag]++;
  return WrapTransfer(inner_.Recv(buffer, peer, tag), /*is_recv=*/true,
                      static_cast<int64_t>(buffer.nbytes()), peer, tag, number);
}

std::vector<std::unique_ptr<Request>> TracingCommunicator::DoBatchSendRecv(
    const std::vector<P2POp>& ops) {
  std::vector<std::unique_ptr<Request>> requests = inner_.BatchSendRecv(ops);
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const bool is_recv = op.type == P2POp::Type::kRecv;
    const int64_t number = is_recv ? recv_numbers_[op.tag]++ : -1;
    requests[i] = WrapTransfer(std::move(requests[i]), is_recv,
                               static_cast<int64_t>(op.buffer.nbytes()),
                               op.peer, op.tag, number);
  }
  return requests;
}

void TracingCommunicator::DoBarrier() {
  Traced("barrier", {}, [&] { inner_.Barrier(); });
}

}  // namespace trellis
