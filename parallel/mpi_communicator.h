// MpiCommunicator: the Communicator interface over an MPI communicator, for
// CPU buffers.
//
// Element types map to MPI types (f32, f64, i32, i64, u16, u32). MPI has no
// 16-bit floats: bf16 and f16 elements travel as their bits (MPI_UINT16_T)
// in transfers, gathers and broadcasts, and a reduction widens them to a
// float32 copy, reduces that in float32 and rounds the result back once
// (to nearest, ties to even) when the call completes (for an async call,
// on Wait). ReduceOp::kAvg sums, then divides by the group size; it is
// defined for floating types only.
// AllReduceAsync uses MPI_Iallreduce, ReduceScatter(Async) and
// AllGather(Async) MPI_Ireduce_scatter_block and MPI_Iallgather (a blocking
// call waits at once), Send and Recv use MPI_Isend and MPI_Irecv; the
// returned Request keeps the buffers' storage alive, and destroying a
// Request that was not waited on waits first. A reduce-scatter whose output
// overlaps its input reduces into a scratch block, copied out on Wait.
//
// Point-to-point modes (MpiP2P). kEager, the default, is MPI's: a posted
// transfer never holds up the next, and BatchSendRecv posts its ops one by
// one. kRendezvous gives CPU ranks NCCL's semantics, so tests can run the
// exact transfer order a GPU run issues and hang where it would:
//   - sends are synchronous (MPI_Issend): one completes only once its
//     receive has been posted and matched;
//   - tags are ignored: transfers between two ranks are matched in the order
//     posted, as NCCL matches them;
//   - transfers run as on one stream: each batch (BatchSendRecv; a lone Send
//     or Recv is a batch of one) is posted only after the previous batch has
//     completed as a whole (the call waits for it), and a batch completes
//     when all its transfers have; collectives and Barrier first wait for
//     the pending batch too.
//
// Errors: the communicator is set to MPI_ERRORS_RETURN, and every MPI call
// goes through TRELLIS_MPI_CHECK, which on failure prints the call, its
// file:line, the rank and host and MPI's message, then aborts the whole job
// (MPI_Abort) so that no rank hangs waiting on the failed one.
//
// Thread safety: one thread drives a communicator at a time (MPI is
// initialized with MPI_THREAD_FUNNELED).
#ifndef TRELLIS_PARALLEL_MPI_COMMUNICATOR_H_
#define TRELLIS_PARALLEL_MPI_COMMUNICATOR_H_

// The C bindings only (Open MPI and MPICH otherwise pull in C++ ones).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"

namespace trellis {
namespace internal {

// Prints "MPI error: <call> failed at <file>:<line> (rank R on HOST):
// <message>" to stderr and aborts the job.
[[noreturn]] void MpiFailure(const char* call, const char* file, int line,
                             int code);

}  // namespace internal

// Wraps an MPI call that returns an error code.
#define TRELLIS_MPI_CHECK(call)                                  \
  do {                                                           \
    const int _trellis_mpi_code = (call);                        \
    if (_trellis_mpi_code != MPI_SUCCESS) {                      \
      ::trellis::internal::MpiFailure(#call, __FILE__, __LINE__, \
                                      _trellis_mpi_code);        \
    }                                                            \
  } while (0)

// The MPI datatype of a dtype, which MPI can reduce. REQUIRES: not bf16 or
// f16 (MPI has no such type).
MPI_Datatype MpiType(DType dtype);

// The MPI datatype that moves a dtype's elements bit for bit: MpiType, and
// MPI_UINT16_T for bf16 and f16 (never to be reduced as such).
MPI_Datatype MpiTransportType(DType dtype);

// How point-to-point transfers behave (see above).
enum class MpiP2P { kEager, kRendezvous };

class MpiBatch;

class MpiCommunicator : public Communicator {
 public:
  // Serves the group `comm`. When `owned`, the communicator is freed on
  // destruction (REQUIRES: then MPI must still be initialized). Sets
  // MPI_ERRORS_RETURN on `comm`.
  MpiCommunicator(std::string name, MPI_Comm comm, bool owned,
                  MpiP2P p2p = MpiP2P::kEager);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  MPI_Comm comm() const { return comm_; }
  MpiP2P p2p() const { return p2p_; }

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
  // kRendezvous: waits for the batch in flight, if any.
  void WaitForPendingBatch();
  std::unique_ptr<Request> PostSend(const Tensor& buffer, int peer, int tag);
  std::unique_ptr<Request> PostRecv(const Tensor& buffer, int peer, int tag);

  MPI_Comm comm_;
  bool owned_;
  MpiP2P p2p_;
  std::shared_ptr<MpiBatch> pending_;  // kRendezvous: the last batch posted
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_MPI_COMMUNICATOR_H_
