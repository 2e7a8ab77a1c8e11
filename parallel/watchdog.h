// Watchdog: a deadline on every communicator wait of one rank, and what the
// job reports when one passes.
//
// WatchdogCommunicator (watchdog_communicator.h) records each operation in
// this rank's FlightRecorder and waits by polling Request::Poll() through
// Await(), so a wait can give up. When a wait passes `timeout_s`, Fail():
//   1. sends a dump notice to every other rank over a side channel (an MPI
//      communicator duplicated at start, used for nothing else), and for up
//      to 3 s collects their answers: each answering rank writes its own
//      flight_<rank>.json and replies with how many operations it has issued
//      on each of its groups;
//   2. compares those counts with the sequence number this rank waits on:
//      a member of the waited group that has not issued that operation yet
//      "lags", and ranks that did not answer are named too;
//   3. prints this rank's recorder (text, then JSON) to stderr, writes it to
//      <dump_dir>/flight_<rank>.json, prints one line naming this rank, its
//      host, the operation, group, peer and sequence number it waited on and
//      the lagging ranks, and ends the job with MPI_Abort.
//
// Device work: an operation on device buffers only enqueues work (its
// wait orders GPU streams), so its deadline is kept by a monitor thread
// (device_wait_monitor.h) that follows the device from the operation's
// wait; work unfinished past the deadline ends this process with a one-line
// report and its recorder (WatchDevice).
//
// Best effort: notices are answered only by ranks inside Await() (MPI runs
// MPI_THREAD_FUNNELED, so only the driving thread may touch MPI). A rank that
// is stopped, computing, or inside a call with no polled form (Broadcast,
// a host wait on the GPU) does not answer and is named as silent. A rank
// that answered a notice holds off its own deadline for 30 s so one report
// wins; the first rank to abort ends the job.
//
// Test faults (WatchdogOptions::skip, stop; read from the environment by the
// programs): TRELLIS_TEST_SKIP_COLLECTIVE=RANK:GROUP:SEQ makes rank RANK
// leave out operation SEQ of GROUP (it takes no sequence number);
// TRELLIS_TEST_STOP_COLLECTIVE=RANK:GROUP:SEQ makes it raise SIGSTOP before
// issuing it.
//
// Thread safety: one thread drives a Watchdog (the one driving its
// communicators); recorder() may be read from any thread.
#ifndef TRELLIS_PARALLEL_WATCHDOG_H_
#define TRELLIS_PARALLEL_WATCHDOG_H_

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "framework/device_completion.h"
#include "parallel/communicator.h"
#include "parallel/device_wait_monitor.h"
#include "parallel/flight_recorder.h"

namespace trellis {

// One operation of one rank: RANK:GROUP:SEQ. Unset (rank -1) matches none.
struct CommFault {
  int rank = -1;
  std::string group;
  int64_t seq = -1;
  bool Matches(int r, const std::string& g, int64_t s) const {
    return rank >= 0 && r == rank && s == seq && g == group;
  }
};
// Parses "RANK:GROUP:SEQ"; the empty string is an unset fault.
absl::StatusOr<CommFault> ParseCommFault(absl::string_view text);

struct WatchdogOptions {
  double timeout_s = 600;  // > 0
  std::string dump_dir = ".";
  CommFault skip;
  CommFault stop;
  // Sets skip and stop from TRELLIS_TEST_SKIP_COLLECTIVE and
  // TRELLIS_TEST_STOP_COLLECTIVE; fails naming a malformed one.
  absl::Status ReadTestFaults();
};

// Group -> operations issued on it, per answering rank.
using GroupCounts = std::map<std::string, int64_t>;

// The part of the timeout line that names who lags: members of `members`
// (other than `self`) whose count on `group` is <= `seq`, and ranks in
// [0, world) other than `self` missing from `answers`.
std::string DescribeLag(const std::string& group, int64_t seq,
                        const std::vector<int>& members, int self, int world,
                        const std::map<int, GroupCounts>& answers);

class Watchdog {
 public:
  // Duplicates `world` as the side channel (collective over it); with
  // MPI_COMM_NULL there is none (one process, no MPI).
  // REQUIRES: options.timeout_s > 0.
  Watchdog(WatchdogOptions options, MPI_Comm world);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  int rank() const { return rank_; }  // in the side channel
  const std::string& hostname() const { return hostname_; }
  const WatchdogOptions& options() const { return options_; }
  MPI_Comm side() const { return side_; }
  FlightRecorder& recorder() { return recorder_; }

  // Registers group `name` with its members as side-channel ranks in group
  // order (empty when unknown).
  void AddGroup(const std::string& name, std::vector<int> members);
  // The sequence number the next operation on `group` takes.
  int64_t NextSeq(const std::string& group) const;
  // Whether the test skip fault names operation `seq` of `group`; true once
  // at most.
  bool TakeSkipFault(const std::string& group, int64_t seq);
  // Records an operation on `group` under its next sequence number (taken
  // unless `skipped`); returns its id in the recorder.
  int64_t Start(const std::string& group, CommOp op, int peer, int64_t bytes,
                bool skipped = false);

  // Polls `request` with a growing sleep (up to 0.25 ms) until it completes,
  // answering dump notices meanwhile. DeadlineExceeded once options'
  // timeout has passed since the call.
  absl::Status Await(Request& request, int64_t id);
  // Writes flight_<rank>.json into options' dump_dir and prints the
  // recorder to stderr. Returns the path written.
  absl::StatusOr<std::string> Dump(const std::string& reason);
  // Answers pending dump notices; returns whether any came.
  bool AnswerNotices();
  // Reports the timed-out operation `id` as described above and aborts.
  [[noreturn]] void Fail(int64_t id);

  // Operation `id` was enqueued on `device` (a communication on device
  // buffers, whose wait only orders streams): it stays waiting in the
  // recorder until the device has run it, and one still unfinished after
  // the deadline ends the process from the device monitor's thread with a
  // one-line report and this rank's recorder (no other rank is asked:
  // that thread may not use MPI). A CPU device's work is done now.
  void WatchDevice(int64_t id, Device device);
  // The same with a given probe (tests).
  void WatchDevice(int64_t id, CompletionProbe probe);

 private:
  using Clock = std::chrono::steady_clock;
  std::string CountsText() const;
  // Prints and writes flight_<rank>.json (see Dump); reads only constant
  // members and the recorder, so the device monitor's thread may call it.
  absl::StatusOr<std::string> WriteDump(const std::string& reason,
                                        const nlohmann::json& issued) const;
  [[noreturn]] void FailDevice(int64_t id, double waited_s);
  // Sends notices and gathers the answers (up to 3 s).
  std::map<int, GroupCounts> GatherAnswers();

  WatchdogOptions options_;
  MPI_Comm side_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_ = 1;
  std::string hostname_;
  FlightRecorder recorder_;
  std::map<std::string, int64_t> issued_;  // per group
  std::map<std::string, std::vector<int>> members_;
  bool dumped_ = false;
  bool skip_taken_ = false;
  Clock::time_point noticed_{};  // last notice answered
  bool noticed_any_ = false;
  // Started by the first WatchDevice with a probe; last, so that it stops
  // before the rest goes.
  std::unique_ptr<DeviceWaitMonitor> device_monitor_;
};

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_WATCHDOG_H_
