// Communicator: the collectives and point-to-point transfers of one group of
// ranks. Every implementation (MPI for CPU buffers, NCCL for GPU buffers,
// host-staged MPI for GPU ranks sharing a device, Self for a group of one)
// sits behind this interface, and every call is counted here, per group, so
// tests and logs can read calls and bytes.
//
// Collectives are in place where that is natural (AllReduce, Broadcast). All
// members of the group must make the same calls in the same order. Async
// variants (AllReduceAsync, ReduceScatterAsync, AllGatherAsync) return a
// Request to Wait() on; the buffers must stay untouched until then (the
// request keeps their storage alive), and a request destroyed unwaited waits
// first. Reduce-scatter and all-gather are the two halves of an all-reduce:
// reduce-scatter of (size·n) values leaves each rank its reduced block of n,
// all-gather of those blocks gives every rank the whole reduction.
//
// Point-to-point transfers may rendezvous: a send need not complete until
// its receive is posted (NCCL once a message passes its buffers; MPI's
// synchronous sends), and a transport that runs transfers one after another
// on one stream (NCCL) cannot start a rank's later transfer before its
// earlier one completes. A rank that sends to a neighbour who is itself
// sending to it then deadlocks, unless the transfers that meet are posted
// together: BatchSendRecv starts the transfers of a batch together and
// completes them as a whole, so a batch never waits on itself; it only needs
// each peer to post the matching transfers in a batch that does not wait on
// this one.
//
// Thread safety: one thread drives a communicator at a time.
#ifndef TRELLIS_PARALLEL_COMMUNICATOR_H_
#define TRELLIS_PARALLEL_COMMUNICATOR_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framework/tensor.h"

namespace trellis {

enum class ReduceOp { kSum, kAvg, kMax };

// An operation in flight. Wait() blocks until the buffer may be reused.
class Request {
 public:
  virtual ~Request() = default;
  virtual void Wait() = 0;
  // Lets the transfer make progress without blocking (MPI moves large
  // messages only inside MPI calls); returns whether it has completed, after
  // which Wait() returns at once. The default makes no progress.
  virtual bool Poll() { return false; }
};

// One already-finished request (what a group of one returns).
class DoneRequest : public Request {
 public:
  void Wait() override {}
  bool Poll() override { return true; }
};

// Completes `inner`, then runs `then` once (copying a result back, say);
// whatever `then` captures stays alive until it has run. An unwaited
// request completes on destruction.
class ThenRequest : public Request {
 public:
  ThenRequest(std::unique_ptr<Request> inner, std::function<void()> then)
      : inner_(std::move(inner)), then_(std::move(then)) {}
  ~ThenRequest() override { Wait(); }

  void Wait() override {
    if (inner_ == nullptr) return;
    inner_->Wait();
    inner_.reset();
    then_();
    then_ = nullptr;
  }
  bool Poll() override {
    if (inner_ == nullptr) return true;
    if (!inner_->Poll()) return false;
    Wait();
    return true;
  }

 private:
  std::unique_ptr<Request> inner_;
  std::function<void()> then_;
};

// One transfer of a batch (Communicator::BatchSendRecv).
struct P2POp {
  enum class Type { kSend, kRecv };
  Type type = Type::kSend;
  Tensor buffer;  // sent from, or received into
  int peer = -1;  // a rank in the group, not this one
  int tag = 0;
};

enum class CommOp {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kSend,
  kRecv,
  kBarrier,
  kCount
};
const char* CommOpName(CommOp op);

// Calls and payload bytes per operation kind. Bytes count the buffer each
// call names (the full tensor for all-reduce and broadcast, the input for
// reduce-scatter, the output for all-gather, the message for send/recv).
//
// Wire bytes count what one rank sends under the bandwidth-optimal (ring)
// algorithm of a group of n, for a full buffer of B bytes (the all-reduce's
// buffer, the reduce-scatter's input, the all-gather's output):
// reduce-scatter and all-gather (n−1)/n·B each, all-reduce 2(n−1)/n·B (so a
// reduce-scatter followed by an all-gather of the same buffer sends what one
// all-reduce does), broadcast and send B, receive and barrier 0. Rounded
// down to whole bytes per call.
struct CommStats {
  std::array<int64_t, static_cast<int>(CommOp::kCount)> calls{};
  std::array<int64_t, static_cast<int>(CommOp::kCount)> bytes{};
  std::array<int64_t, static_cast<int>(CommOp::kCount)> wire_bytes{};
  int64_t Calls(CommOp op) const { return calls[static_cast<int>(op)]; }
  int64_t Bytes(CommOp op) const { return bytes[static_cast<int>(op)]; }
  int64_t WireBytes(CommOp op) const {
    return wire_bytes[static_cast<int>(op)];
  }
};

// What one rank of a group of `size` sends for `op` on a full buffer of
// `bytes` (see CommStats).
int64_t WireBytes(CommOp op, int64_t bytes, int size);

class Communicator {
 public:
  virtual ~Communicator() = default;

  // "world", "tp", "dp", "pp", "embed", ...
  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  void AllReduce(Tensor& buffer, ReduceOp op);
  std::unique_ptr<Request> AllReduceAsync(Tensor& buffer, ReduceOp op);
  // input (size·n) -> output (n): this rank's block of the reduction.
  // `output` may be this rank's own block of `input` (in place).
  // REQUIRES: same dtype, input.numel() == size() · output.numel().
  void ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op);
  std::unique_ptr<Request> ReduceScatterAsync(const Tensor& input,
                                              Tensor& output, ReduceOp op);
  // input (n) -> output (size·n), blocks in rank order. `input` may be this
  // rank's own block of `output` (in place).
  // REQUIRES: same dtype, output.numel() == size() · input.numel().
  void AllGather(const Tensor& input, Tensor& output);
  std::unique_ptr<Request> AllGatherAsync(const Tensor& input, Tensor& output);
  void Broadcast(Tensor& buffer, int root);
  // `peer` is a rank in this group; messages between two ranks with the
  // same tag arrive in order.
  std::unique_ptr<Request> Send(const Tensor& buffer, int peer, int tag);
  std::unique_ptr<Request> Recv(Tensor& buffer, int peer, int tag);
  // Posts `ops` as one batch, in order, and returns one request per op, in
  // the same order; the transfers between two ranks are matched in the
  // order posted (the tags of a transport without tags are ignored). Each op
  // is counted as one Send or Recv. What a batch guarantees is described
  // above; the default posts the ops one by one with DoSend/DoRecv, which
  // suffices where a posted transfer never holds up the next one (MPI's
  // MPI_Isend/MPI_Irecv). REQUIRES: no buffer of a receive overlaps another
  // buffer of the batch.
  std::vector<std::unique_ptr<Request>> BatchSendRecv(
      const std::vector<P2POp>& ops);
  void Barrier();

  const CommStats& stats() const { return stats_; }
  void ResetStats() { stats_ = CommStats{}; }

 protected:
  Communicator(std::string name, int rank, int size)
      : name_(std::move(name)), rank_(rank), size_(size) {}

  virtual std::unique_ptr<Request> DoAllReduce(Tensor& buffer, ReduceOp op,
                                               bool async) = 0;
  // Blocking when !async (the returned request is then already done).
  virtual std::unique_ptr<Request> DoReduceScatter(const Tensor& input,
                                                   Tensor& output, ReduceOp op,
                                                   bool async) = 0;
  virtual std::unique_ptr<Request> DoAllGather(const Tensor& input,
                                               Tensor& output, bool async) = 0;
  virtual void DoBroadcast(Tensor& buffer, int root) = 0;
  virtual std::unique_ptr<Request> DoSend(const Tensor& buffer, int peer,
                                          int tag) = 0;
  virtual std::unique_ptr<Request> DoRecv(Tensor& buffer, int peer,
                                          int tag) = 0;
  // Called with checked, counted ops; returns one request per op.
  virtual std::vector<std::unique_ptr<Request>> DoBatchSendRecv(
      const std::vector<P2POp>& ops);
  virtual void DoBarrier() = 0;

 private:
  // `bytes`: the buffer the call names, which is the full buffer.
  void Count(CommOp op, size_t bytes);
  void CheckReduceScatter(const Tensor& input, const Tensor& output) const;
  void CheckAllGather(const Tensor& input, const Tensor& output) const;
  std::string name_;
  int rank_;
  int size_;
  CommStats stats_;
};

// A group of one rank: reductions, gathers and broadcasts are copies or
// no-ops; point-to-point has no peer and is an invariant failure.
class SelfCommunicator : public Communicator {
 public:
  explicit SelfCommunicator(std::string name)
      : Communicator(std::move(name), 0, 1) {}

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
  void DoBarrier() override;
};

// Collective over `group`: every rank learns whether any rank's `mine` is an
// error. A failing rank gets its own status back; the others get one naming
// the lowest failing rank. Lets ranks stop together instead of hanging.
absl::Status AgreeOnStatus(Communicator& group, const absl::Status& mine);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_COMMUNICATOR_H_
