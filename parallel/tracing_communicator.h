// TracingCommunicator: a Communicator that forwards every call to another
// one and, while its TraceRecorder is active, records a span per call.
//
// Blocking calls (AllReduce, ReduceScatter, AllGather, Broadcast, Barrier)
// are recorded from call to return. Non-blocking ones (AllReduceAsync,
// ReduceScatterAsync, AllGatherAsync, Send, Recv, and each transfer of a
// BatchSendRecv, which is forwarded as one batch) return a request whose
// Wait() is recorded instead ("wait all_reduce", "wait reduce_scatter",
// "wait all_gather", "wait send", "wait recv"): posting costs nothing, the wait
// is where a rank loses time. Spans have the group's name as category (so "dp",
// "tp", "pp", ...), lie on the lane given at construction and carry the
// payload bytes, and for transfers the peer and tag.
//
// Receives are numbered per tag from ResetSequence() on; a RecvNamer can
// rename a receive's wait span from (tag, number), e.g. after the pipeline
// action it feeds ("wait RecvAct3").
//
// The wrapped communicator still counts its own calls; this one counts them
// again in its own stats().
//
// Thread safety: as Communicator; the recorder is used from the calling
// thread only.
#ifndef TRELLIS_PARALLEL_TRACING_COMMUNICATOR_H_
#define TRELLIS_PARALLEL_TRACING_COMMUNICATOR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/trace.h"
#include "parallel/communicator.h"

namespace trellis {

class TracingCommunicator : public Communicator {
 public:
  // Called for each receive wait span before it is recorded; may change its
  // name and add arguments.
  using RecvNamer =
      std::function<void(int tag, int64_t number, TraceSpan& span)>;

  // REQUIRES: `inner` and `recorder` outlive this communicator.
  TracingCommunicator(Communicator& inner, TraceRecorder& recorder, int lane);

  Communicator& inner() { return inner_; }
  void set_recv_namer(RecvNamer namer) { recv_namer_ = std::move(namer); }
  // Restarts receive numbering (e.g. at each step).
  void ResetSequence() { recv_numbers_.clear(); }

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
  friend class TracedRequest;
  // Runs `fn` and records it as a span `name` when the recorder is active.
  template <typename Fn>
  void Traced(const char* name, TraceArgs args, Fn&& fn);
  // Wraps `request` so that its Wait is recorded as `name`; `tag` >= 0 and
  // `number` >= 0 for receives.
  std::unique_ptr<Request> Wrap(std::unique_ptr<Request> request,
                                std::string name, TraceArgs args, int tag,
                                int64_t number);
  void RecordWait(TraceSpan span, int tag, int64_t number);
  // Wraps the request of a posted transfer; `number` >= 0 for receives.
  std::unique_ptr<Request> WrapTransfer(std::unique_ptr<Request> request,
                                        bool is_recv, int64_t bytes, int peer,
                                        int tag, int64_t number);

  Communicator& inner_;
  TraceRecorder& recorder_;
  int lane_;
  RecvNamer recv_namer_;
  std::map<int, int64_t> recv_numbers_;  // next receive number per tag
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_TRACING_COMMUNICATOR_H_
