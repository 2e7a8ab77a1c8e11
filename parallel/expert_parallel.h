// Expert parallelism's communication: rows moved between the ranks of an
// expert-parallel group (ProcessGroups::ep), each rank sending a block of
// rows to every rank, blocks of any size (an all-to-all with variable
// counts). A mixture of experts dispatches its tokens' rows to the ranks
// holding their experts and gets the experts' outputs back; its backward
// moves the gradients the other way, the same call with the counts
// swapped: the conjugate pair
//   dispatch  AllToAllRows(send_rows, recv_rows) forward,
//             AllToAllRows(recv_rows, send_rows) backward
// and combine the reverse.
//
// Built on Communicator::BatchSendRecv (MPI's nonblocking sends and
// receives; grouped NCCL sends and receives on GPUs), so every transport
// serves it and the group counts each block as one send and one receive.
// A rank's block for itself is copied; every other block is posted, empty
// or not, so each call is group.size() - 1 sends and as many receives.
//
// Thread safety: as the communicator's.
#ifndef TRELLIS_PARALLEL_EXPERT_PARALLEL_H_
#define TRELLIS_PARALLEL_EXPERT_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "parallel/communicator.h"

namespace trellis {

// `send`'s first rows in group.size() consecutive blocks, send_rows[q] rows
// for rank q; `recv` gets recv_rows[s] rows from each rank s, in rank
// order. Rows are the leading dimension of both (equal trailing shapes and
// dtypes). REQUIRES: recv_rows[s] on this rank equals send_rows[this rank]
// on rank s; send and recv hold at least the rows named; both distinct.
void AllToAllRows(Communicator& group, const Tensor& send,
                  const std::vector<int64_t>& send_rows, Tensor& recv,
                  const std::vector<int64_t>& recv_rows);

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_EXPERT_PARALLEL_H_
