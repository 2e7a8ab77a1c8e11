// Helpers for tests that count what a communicator moved: snapshots of
// CommStats, the difference between two snapshots, their totals, and a
// per-operation comparison that names the group, the operation and the
// counter that differ.
//
// A test takes a snapshot before the code under test and the difference
// after it, so counts from earlier work (bootstrap, warm-up, other tests)
// never leak into its expectations. Thread safety: none needed; one thread
// per rank, and a snapshot is a plain copy.
#ifndef TRELLIS_TESTS_TOOLS_MPI_COMM_STATS_TEST_UTIL_H_
#define TRELLIS_TESTS_TOOLS_MPI_COMM_STATS_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "parallel/bootstrap.h"
#include "parallel/communicator.h"

namespace trellis::mpitest {

// What was counted between `before` and `after`, per operation: calls,
// bytes and wire bytes. REQUIRES: both snapshots of one communicator, with
// `before` taken first.
inline CommStats Difference(const CommStats& after, const CommStats& before) {
  CommStats d;
  for (int i = 0; i < static_cast<int>(CommOp::kCount); ++i) {
    d.calls[i] = after.calls[i] - before.calls[i];
    d.bytes[i] = after.bytes[i] - before.bytes[i];
    d.wire_bytes[i] = after.wire_bytes[i] - before.wire_bytes[i];
  }
  return d;
}

// What `comm` counted since the snapshot `before` of its stats.
inline CommStats Since(const Communicator& comm, const CommStats& before) {
  return Difference(comm.stats(), before);
}

// Each of `context`'s communicators' counters, by group name ("world",
// "tp", "dp", "pp" and, where present, "embed").
inline std::map<std::string, CommStats> Snapshot(
    const ParallelContext& context) {
  std::map<std::string, CommStats> all;
  for (const Communicator* c : context.communicators()) {
    all[c->name()] = c->stats();
  }
  return all;
}

// Buffer bytes over every operation.
inline int64_t TotalBytes(const CommStats& stats) {
  int64_t total = 0;
  for (int64_t b : stats.bytes) total += b;
  return total;
}

// Bytes one rank sent over every operation (see WireBytes).
inline int64_t TotalWireBytes(const CommStats& stats) {
  int64_t total = 0;
  for (int64_t b : stats.wire_bytes) total += b;
  return total;
}

// Expects `got` to count the calls and bytes of `want` for every operation;
// wire bytes are not compared. A mismatch names `group`, the operation and
// the counter.
inline void ExpectCallsAndBytes(const std::string& group, const CommStats& got,
                                const CommStats& want) {
  for (int i = 0; i < static_cast<int>(CommOp::kCount); ++i) {
    const char* op = CommOpName(static_cast<CommOp>(i));
    EXPECT_EQ(got.calls[i], want.calls[i]) << group << " " << op << " calls";
    EXPECT_EQ(got.bytes[i], want.bytes[i]) << group << " " << op << " bytes";
  }
}

}  // namespace trellis::mpitest

#endif  // TRELLIS_TESTS_TOOLS_MPI_COMM_STATS_TEST_UTIL_H_
