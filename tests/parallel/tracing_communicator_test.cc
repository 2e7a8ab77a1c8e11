// TracingCommunicator: forwards every call, records blocking calls and the
// waits of non-blocking ones while its recorder is active, numbers receives.
#include "parallel/tracing_communicator.h"

#include <unistd.h>

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace trellis {
namespace {

// A request that takes `micros` to finish.
class SlowRequest : public Request {
 public:
  explicit SlowRequest(int micros) : micros_(micros) {}
  void Wait() override { ::usleep(micros_); }

 private:
  int micros_;
};

// Rank 0 of 2 whose operations do nothing but log their calls; receives take
// 3 ms to complete.
class FakeCommunicator : public Communicator {
 public:
  FakeCommunicator() : Communicator("pp", 0, 2) {}
  std::vector<std::string> calls;

 protected:
  std::unique_ptr<Request> DoAllReduce(Tensor&, ReduceOp, bool async) override {
    calls.push_back(async ? "all_reduce_async" : "all_reduce");
    return std::make_unique<SlowRequest>(1000);
  }
  std::unique_ptr<Request> DoReduceScatter(const Tensor&, Tensor&, ReduceOp,
                                           bool async) override {
    calls.push_back(async ? "reduce_scatter_async" : "reduce_scatter");
    return std::make_unique<SlowRequest>(1000);
  }
  std::unique_ptr<Request> DoAllGather(const Tensor&, Tensor&,
                                       bool async) override {
    calls.push_back(async ? "all_gather_async" : "all_gather");
    return std::make_unique<SlowRequest>(1000);
  }
  void DoBroadcast(Tensor&, int) override { calls.push_back("broadcast"); }
  std::unique_ptr<Request> DoSend(const Tensor&, int, int tag) override {
    calls.push_back("send " + std::to_string(tag));
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> DoRecv(Tensor&, int, int tag) override {
    calls.push_back("recv " + std::to_string(tag));
    return std::make_unique<SlowRequest>(3000);
  }
  void DoBarrier() override { calls.push_back("barrier"); }
};

TEST(TracingCommunicatorTest, ForwardsAndCountsWithoutRecordingWhenInactive) {
  FakeCommunicator inner;
  TraceRecorder recorder(0);
  TracingCommunicator traced(inner, recorder, 3);
  EXPECT_EQ(traced.name(), "pp");
  EXPECT_EQ(traced.rank(), 0);
  EXPECT_EQ(traced.size(), 2);
  Tensor t = Tensor::Zeros({4}, DType::kF32);
  Tensor gathered = Tensor::Zeros({8}, DType::kF32);
  traced.AllReduce(t, ReduceOp::kSum);
  traced.AllReduceAsync(t, ReduceOp::kSum)->Wait();
  traced.AllGather(t, gathered);
  traced.ReduceScatter(gathered, t, ReduceOp::kSum);
  traced.Broadcast(t, 1);
  traced.Send(t, 1, 7)->Wait();
  traced.Recv(t, 1, 7)->Wait();
  traced.Barrier();
  EXPECT_EQ(inner.calls,
            (std::vector<std::string>{
                "all_reduce", "all_reduce_async", "all_gather",
                "reduce_scatter", "broadcast", "send 7", "recv 7", "barrier"}));
  EXPECT_EQ(inner.stats().Calls(CommOp::kAllReduce), 2);
  EXPECT_EQ(traced.stats().Calls(CommOp::kAllReduce), 2);
  EXPECT_EQ(traced.stats().Bytes(CommOp::kRecv), 16);
  EXPECT_TRUE(recorder.spans().empty());
}

TEST(TracingCommunicatorTest, RecordsBlockingCallsAndWaits) {
  FakeCommunicator inner;
  TraceRecorder recorder(0);
  recorder.set_active(true);
  TracingCommunicator traced(inner, recorder, 4);
  Tensor t = Tensor::Zeros({4}, DType::kF32);
  traced.AllReduce(t, ReduceOp::kSum);
  std::unique_ptr<Request> pending = traced.AllReduceAsync(t, ReduceOp::kAvg);
  EXPECT_EQ(recorder.spans().size(), 1u);  // posting is not a span
  pending->Wait();
  traced.Send(t, 1, 9)->Wait();
  traced.Barrier();
  std::vector<std::string> names;
  for (const TraceSpan& s : recorder.spans()) {
    names.push_back(s.name);
    EXPECT_EQ(s.category, "pp");
    EXPECT_EQ(s.lane, 4);
    EXPECT_GE(s.duration_us, 0.0);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"all_reduce", "wait all_reduce",
                                             "wait send", "barrier"}));
  EXPECT_GE(recorder.spans()[1].duration_us, 1000.0);
  EXPECT_EQ(recorder.spans()[0].args, (TraceArgs{{"bytes", 16}}));
  EXPECT_EQ(recorder.spans()[2].args,
            (TraceArgs{{"bytes", 16}, {"peer", 1}, {"tag", 9}}));
}

TEST(TracingCommunicatorTest, RecordsAsyncGatherAndScatterAtTheirWaits) {
  FakeCommunicator inner;
  TraceRecorder recorder(0);
  recorder.set_active(true);
  TracingCommunicator traced(inner, recorder, 2);
  Tensor block = Tensor::Zeros({4}, DType::kF32);
  Tensor full = Tensor::Zeros({8}, DType::kF32);
  std::unique_ptr<Request> scatter =
      traced.ReduceScatterAsync(full, block, ReduceOp::kSum);
  std::unique_ptr<Request> gather = traced.AllGatherAsync(block, full);
  EXPECT_TRUE(recorder.spans().empty());  // posting is not a span
  gather->Wait();
  scatter->Wait();
  EXPECT_EQ(inner.calls, (std::vector<std::string>{"reduce_scatter_async",
                                                   "all_gather_async"}));
  ASSERT_EQ(recorder.spans().size(), 2u);
  EXPECT_EQ(recorder.spans()[0].name, "wait all_gather");
  EXPECT_EQ(recorder.spans()[1].name, "wait reduce_scatter");
  for (const TraceSpan& s : recorder.spans()) {
    EXPECT_EQ(s.args, (TraceArgs{{"bytes", 32}}));
    EXPECT_GE(s.duration_us, 1000.0);
  }
  // Counted by both, payload and wire bytes (a group of 2 sends half).
  for (const Communicator* c : {static_cast<Communicator*>(&inner),
                                static_cast<Communicator*>(&traced)}) {
    EXPECT_EQ(c->stats().Calls(CommOp::kReduceScatter), 1);
    EXPECT_EQ(c->stats().Calls(CommOp::kAllGather), 1);
    EXPECT_EQ(c->stats().Bytes(CommOp::kAllGather), 32);
    EXPECT_EQ(c->stats().WireBytes(CommOp::kReduceScatter), 16);
    EXPECT_EQ(c->stats().WireBytes(CommOp::kAllGather), 16);
  }
}

TEST(TracingCommunicatorTest, NumbersReceivesPerTagForTheNamer) {
  FakeCommunicator inner;
  TraceRecorder recorder(0);
  recorder.set_active(true);
  TracingCommunicator traced(inner, recorder, 3);
  std::vector<std::pair<int, int64_t>> seen;
  traced.set_recv_namer([&](int tag, int64_t number, TraceSpan& span) {
    seen.emplace_back(tag, number);
    span.name = "wait R" + std::to_string(tag) + "#" + std::to_string(number);
    span.args.emplace_back("mb", number);
  });
  Tensor t = Tensor::Zeros({2}, DType::kF32);
  std::unique_ptr<Request> a0 = traced.Recv(t, 1, 1001);
  std::unique_ptr<Request> g0 = traced.Recv(t, 1, 1002);
  std::unique_ptr<Request> a1 = traced.Recv(t, 1, 1001);
  a1->Wait();  // waits may come in any order
  a0->Wait();
  g0->Wait();
  traced.ResetSequence();
  traced.Recv(t, 1, 1002)->Wait();
  EXPECT_EQ(seen, (std::vector<std::pair<int, int64_t>>{
                      {1001, 1}, {1001, 0}, {1002, 0}, {1002, 0}}));
  ASSERT_EQ(recorder.spans().size(), 4u);
  EXPECT_EQ(recorder.spans()[0].name, "wait R1001#1");
  EXPECT_EQ(recorder.spans()[0].args.back(),
            (std::pair<std::string, int64_t>("mb", 1)));
  for (const TraceSpan& s : recorder.spans()) {
    EXPECT_GE(s.duration_us, 3000.0);  // the receive's time to complete
  }
}

}  // namespace
}  // namespace trellis
