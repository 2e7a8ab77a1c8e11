// FlightRecorder: the last operations a rank issued on its communicators,
// kept so that a hung job can say what each rank was doing when it stopped.
//
// A ring of `capacity` (64 by default) records, oldest overwritten first.
// Each record names the group ("dp", "pp", ...), the operation, the peer
// (-1 for collectives, the root for broadcasts), the payload bytes, the
// operation's sequence number within its group (0, 1, ... in the order this
// rank issued them), when it started (Unix seconds) and its state: waiting
// until its request completes, then done with the seconds it took; "skipped"
// marks an operation a test fault left out.
//
// ToText() prints one line per record, oldest first; ToJson() is the same
// as a JSON array of objects, the form written to flight_<rank>.json.
//
// Thread safety: every method may be called from any thread (one mutex), so
// a reporter can read the ring while the driving thread writes it.
#ifndef TRELLIS_PARALLEL_FLIGHT_RECORDER_H_
#define TRELLIS_PARALLEL_FLIGHT_RECORDER_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace trellis {

struct FlightRecord {
  enum class State { kWaiting, kDone, kSkipped };
  int64_t id = -1;  // this rank's operation number, over all groups
  std::string group;
  std::string op;  // "all_reduce", "send", ... (CommOpName)
  int peer = -1;
  int64_t bytes = 0;
  int64_t seq = -1;  // in its group
  double start_unix_s = 0;
  double seconds = 0;  // from start to done (kDone only)
  State state = State::kWaiting;

  // "#12 dp all_reduce seq=5 peer=-1 bytes=4096 waiting 3.2 s"
  std::string ToText(double now_unix_s) const;
  nlohmann::json ToJson(double now_unix_s) const;
};

const char* FlightStateName(FlightRecord::State state);

class FlightRecorder {
 public:
  static constexpr int kDefaultCapacity = 64;
  // REQUIRES: capacity > 0.
  explicit FlightRecorder(int capacity = kDefaultCapacity);

  // Records a started operation (its id is assigned here and returned).
  int64_t Begin(FlightRecord record);
  // Marks operation `id` done; a no-op once it has left the ring.
  void Finish(int64_t id);
  // The record of `id`, if still in the ring.
  std::optional<FlightRecord> Find(int64_t id) const;
  // The records in the ring, oldest first.
  std::vector<FlightRecord> Snapshot() const;
  // Operations recorded so far (including those overwritten).
  int64_t recorded() const;

  std::string ToText() const;
  nlohmann::json ToJson() const;

 private:
  using Clock = std::chrono::steady_clock;
  const int capacity_;
  mutable std::mutex mutex_;
  std::vector<FlightRecord> ring_;  // slot id % capacity_
  std::vector<Clock::time_point> started_;
  int64_t next_id_ = 0;
};

// Seconds since the Unix epoch, now.
double UnixSeconds();

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_FLIGHT_RECORDER_H_
