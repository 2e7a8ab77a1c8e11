// NcclCommunicator: the Communicator interface over NCCL, for buffers on one
// CUDA device per rank.
//
//   auto world = NcclCommunicator::CreateWorld("world", MPI_COMM_WORLD,
//                                              device);     // collective
//   auto tp = world->Split("tp", /*color=*/d * pp + p, /*key=*/t);
//
// One NCCL communicator per group: the world's unique id is made on rank 0
// and broadcast over MPI, and every group is split from the world
// (ncclCommSplit), so MPI is needed only at start. CreateWorld sets
// NCCL_RUNTIME_CONNECT=0 unless it is set already, so that a communicator
// connects all its collective algorithms when it is made rather than at
// their first use (pairs' point-to-point connections still come with their
// first transfer; see WarmUpGroups in parallel/device_groups.h).
//
// Streams: collectives run on the communicator's own stream. Each call first
// makes that stream wait (an event) for the work already issued to the
// compute stream (ComputeStream(), where trellis kernels run), so it reads
// finished data; on completion the compute stream is made to wait for it.
// "Returns" therefore means "ordered": AllReduce, ReduceScatter, AllGather
// and Broadcast return at once, and later kernels and copies on the compute
// stream see their results. Async requests (AllReduceAsync,
// ReduceScatterAsync, AllGatherAsync, Send, Recv) order the compute stream
// on Wait(), so the work between the call and Wait() overlaps the transfer;
// they keep every buffer the call uses (scratch blocks for overlapping
// reduce-scatter and all-gather buffers included) alive until then. Lone
// collectives need no group; only batched transfers are grouped (below).
// Barrier() waits on the host.
//
// Types: reductions take float32, float64, bfloat16, float16, int32, int64
// and uint32 (kAvg the floating ones, through ncclAvg); broadcast, gathers
// and transfers move bytes, so any dtype.
//
// Transfers: NCCL has no tags (they are ignored): the transfers between two
// ranks are matched in the order posted. Everything runs in order on the
// communicator's stream, and a send may not complete before its receive
// runs, so one rank's lone ncclSend waits for its peer's ncclRecv while the
// peer's stream may be waiting on a send of its own. BatchSendRecv therefore
// issues its ops inside one ncclGroupStart/ncclGroupEnd: they start
// together and complete together (one event for all), as Megatron's batched
// point-to-point does; a lone Send or Recv is a batch of one. The pipeline
// executor posts the transfers that meet at one point of its schedule as
// one batch, and the schedule validator (ValidateSchedules) checks in this
// rendezvous model that no stage waits on itself.
//
// Errors: every NCCL and CUDA call is checked and aborts with the call, its
// file:line and the rank (framework/cuda/cuda_check.h).
//
// Thread safety: one thread drives a communicator at a time.
#ifndef TRELLIS_PARALLEL_NCCL_COMMUNICATOR_H_
#define TRELLIS_PARALLEL_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace trellis {

class NcclCommunicator : public Communicator {
 public:
  // The color of a rank that joins no group in Split.
  static constexpr int kNoColor = NCCL_SPLIT_NOCOLOR;

  // Collective over `comm`: every rank of it joins one NCCL communicator on
  // its CUDA device `device`, ranked as in `comm`.
  static std::unique_ptr<NcclCommunicator> CreateWorld(std::string name,
                                                       MPI_Comm comm,
                                                       int device);
  // Collective over this communicator: the ranks passing one `color` form a
  // new communicator, ordered by `key` (ties by rank here). A rank passing
  // kNoColor joins none and gets null.
  std::unique_ptr<NcclCommunicator> Split(std::string name, int color, int key);

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

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
  NcclCommunicator(std::string name, ncclComm_t comm, int device);
  // Checks that `t` is a defined tensor on this communicator's device.
  void CheckBuffer(const Tensor& t) const;
  // Orders this communicator's stream after the compute stream's work.
  void AfterCompute();
  // Records the end of the work just issued; the returned request orders
  // the compute stream after it (at once unless `async`) and keeps `keep`
  // alive until then.
  std::unique_ptr<Request> Finish(std::vector<Tensor> keep, bool async);

  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_ = nullptr;
  float* barrier_word_ = nullptr;  // one device float for Barrier()
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_NCCL_COMMUNICATOR_H_
