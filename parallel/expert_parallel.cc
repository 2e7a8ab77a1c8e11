#include "parallel/expert_parallel.h"

#include <memory>

#include "framework/status.h"

namespace trellis {

void AllToAllRows(Communicator& group, const Tensor& send,
                  const std::vector<int64_t>& send_rows, Tensor& recv,
                  const std::vector<int64_t>& recv_rows) {
  const int n = group.size();
  TRELLIS_CHECK(static_cast<int>(send_rows.size()) == n &&
                static_cast<int>(recv_rows.size()) == n)
      << "AllToAllRows: " << send_rows.size() << " send and "
      << recv_rows.size() << " receive blocks for a group of " << n;
  TRELLIS_CHECK(send.dtype() == recv.dtype() && send.ndim() == recv.ndim() &&
                send.numel() / std::max<int64_t>(send.dim(0), 1) ==
                    recv.numel() / std::max<int64_t>(recv.dim(0), 1))
      << "AllToAllRows: rows of " << ShapeString(send.shape()) << " into "
      << ShapeString(recv.shape());
  std::vector<P2POp> ops;
  int64_t send_at = 0, recv_at = 0;
  for (int q = 0; q < n; ++q) {
    const int64_t out = send_rows[q], in = recv_rows[q];
    TRELLIS_CHECK(out >= 0 && in >= 0 && send_at + out <= send.dim(0) &&
                  recv_at + in <= recv.dim(0))
        << "AllToAllRows: block " << q << " of " << out << " and " << in
        << " rows past " << ShapeString(send.shape()) << " / "
        << ShapeString(recv.shape());
    if (q == group.rank()) {
      TRELLIS_CHECK_EQ(out, in);
      if (out > 0) {
        Tensor mine = recv.Narrow(recv_at, in);
        mine.CopyFrom(send.Narrow(send_at, out));
      }
    } else {
      // Empty blocks too: every call is (n - 1) sends and receives.
      ops.push_back({P2POp::Type::kSend, send.Narrow(send_at, out), q, 0});
      ops.push_back({P2POp::Type::kRecv, recv.Narrow(recv_at, in), q, 0});
    }
    send_at += out;
    recv_at += in;
  }
  if (ops.empty()) return;
  for (const std::unique_ptr<Request>& r : group.BatchSendRecv(ops)) {
    r->Wait();
  }
}

}  // namespace trellis
