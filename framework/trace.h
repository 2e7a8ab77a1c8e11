// Trace events of one process, written as Chrome trace JSON (the format
// chrome://tracing and Perfetto open).
//
// A TraceRecorder collects spans ("complete" events: a name, a category, a
// lane, a start and a duration, and integer arguments) while it is active,
// and writes them, with its metadata, to one JSON file:
//
//   {"traceEvents": [{"name": "F", "cat": "compute", "ph": "X",
//                     "ts": 1200.5, "dur": 830.1, "pid": 3, "tid": 2,
//                     "args": {"mb": 4, "vstage": 0, "stage": 1}}, ...,
//                    {"name": "thread_name", "ph": "M", ...}],
//    "displayTimeUnit": "ms",
//    "otherData": {"format": "trellis-trace", "version": 1, ...}}
//
// Times are microseconds since the recorder's origin (ResetOrigin). The pid
// is the process's rank; a lane is a tid, named by AddLane, so a viewer shows
// one row per lane. Categories and span names are the caller's; the trainer's
// conventions are the kTraceCategory* constants below, which
// trellis-bubbles reads.
//
// Clocks. Host spans are timed with std::chrono::steady_clock time points.
// Spans of device work are timed through a TraceClock: Mark() records a
// moment (on a GPU: a CUDA event recorded on the stream) and Resolve() turns
// it into microseconds since the origin once the device has reached it
// (blocking if need be). AddMarkedSpan keeps such spans pending until Flush()
// resolves them, so recording never waits on the device.
//
// Cost. Callers test active() (one load) before building a span; an
// inactive recorder records nothing.
//
// Thread safety: none. One thread records; Write/ToJson read.
#ifndef TRELLIS_FRAMEWORK_TRACE_H_
#define TRELLIS_FRAMEWORK_TRACE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "framework/tensor.h"

namespace trellis {

// Categories of the trainer's spans (the "cat" field).
inline constexpr char kTraceCategoryStep[] = "step";        // phases of a step
inline constexpr char kTraceCategoryCompute[] = "compute";  // F, B, W
inline constexpr char kTraceCategoryPipeline[] = "pp";      // sends, receives
inline constexpr char kTraceCategoryDataParallel[] = "dp";
inline constexpr char kTraceCategoryTensorParallel[] = "tp";
// The "format" of otherData in every trellis trace file.
inline constexpr char kTraceFormat[] = "trellis-trace";
inline constexpr int kTraceFormatVersion = 1;

using TraceArgs = std::vector<std::pair<std::string, int64_t>>;

struct TraceSpan {
  std::string name;
  std::string category;
  int lane = 0;  // a tid from AddLane
  double start_us = 0.0;
  double duration_us = 0.0;
  TraceArgs args;
};

// A source of timestamps for spans whose times are only known later.
class TraceClock {
 public:
  virtual ~TraceClock() = default;
  // Records the present moment (of the host, or of a device stream) and
  // returns a handle to it.
  virtual int64_t Mark() = 0;
  // Microseconds from `origin` (a host time point) to the moment `mark`
  // recorded. May block until that moment has happened.
  virtual double Resolve(int64_t mark,
                         std::chrono::steady_clock::time_point origin) = 0;
  // Seconds from mark `begin` to mark `end`. May block likewise.
  virtual double Seconds(int64_t begin, int64_t end) = 0;
  // Starts a step: marks made before are invalid from here on (a device
  // clock reuses their events). With `align_with_host` a device clock also
  // waits for its device and aligns its time with the host's again, which
  // Resolve needs; without, it does not block the host and only Seconds
  // may be asked of the step's marks.
  virtual void BeginStep(bool align_with_host) {}
};

// The host's steady clock: a mark is the time in nanoseconds.
class HostTraceClock : public TraceClock {
 public:
  int64_t Mark() override;
  double Resolve(int64_t mark,
                 std::chrono::steady_clock::time_point origin) override;
  double Seconds(int64_t begin, int64_t end) override;
};

// The clock of work queued on `device`'s compute stream (CUDA events), whose
// kernels run after the host has moved on; null for the CPU, whose work the
// host clock times as it happens.
std::shared_ptr<TraceClock> NewDeviceTraceClock(Device device);

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  // `pid` labels every event (the rank). `clock` times marked spans; null
  // means the host clock.
  explicit TraceRecorder(int pid, std::shared_ptr<TraceClock> clock = nullptr);

  bool active() const { return active_; }
  void set_active(bool active) { active_ = active; }

  // Times are measured from here on. Spans recorded so far keep theirs.
  void ResetOrigin(Clock::time_point origin = Clock::now()) {
    origin_ = origin;
  }
  Clock::time_point origin() const { return origin_; }
  double MicrosSinceOrigin(Clock::time_point t) const;

  // Names the process (shown by viewers) and adds a lane; returns its tid.
  // Lanes are shown in the order they were added.
  void SetProcessName(const std::string& name) { process_name_ = name; }
  int AddLane(const std::string& name);
  // A key of the file's "otherData" object (run description for readers).
  void SetMetadata(const std::string& key, nlohmann::json value);

  // Records a host span (when active).
  void AddSpan(std::string name, const char* category, int lane,
               Clock::time_point start, Clock::time_point end,
               TraceArgs args = {});
  // Records a span between two marks of the TraceClock, resolved at Flush().
  void AddMarkedSpan(std::string name, const char* category, int lane,
                     int64_t begin_mark, int64_t end_mark, TraceArgs args = {});
  TraceClock& clock() { return *clock_; }
  // Resolves every marked span.
  void Flush();

  // Spans recorded (and resolved) so far, in recording order.
  const std::vector<TraceSpan>& spans() const { return spans_; }
  std::vector<TraceSpan>& mutable_spans() { return spans_; }

  // The Chrome trace document. REQUIRES: Flush() since the last marked span.
  nlohmann::json ToJson() const;
  // Writes ToJson() to `path` through a temporary file and a rename, so a
  // reader never sees half a file. Flushes first.
  absl::Status Write(const std::string& path);

 private:
  struct Pending {
    TraceSpan span;
    int64_t begin = 0;
    int64_t end = 0;
  };

  int pid_;
  std::shared_ptr<TraceClock> clock_;
  bool active_ = false;
  Clock::time_point origin_ = Clock::now();
  std::string process_name_;
  std::vector<std::string> lanes_;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::vector<TraceSpan> spans_;
  std::vector<Pending> pending_;
};

// Microseconds of CPU time the calling thread has used.
double ThreadCpuMicros();

// Records a host span from construction to destruction when `recorder` is
// non-null and active at construction. The span's argument "cpu_us" is the
// CPU time the thread used meanwhile: well below the duration, the thread
// waited for a core.
class ScopedTraceSpan {
 public:
  ScopedTraceSpan(TraceRecorder* recorder, std::string name,
                  const char* category, int lane, TraceArgs args = {});
  ~ScopedTraceSpan();
  ScopedTraceSpan(const ScopedTraceSpan&) = delete;
  ScopedTraceSpan& operator=(const ScopedTraceSpan&) = delete;

 private:
  TraceRecorder* recorder_;  // null when nothing is recorded
  std::string name_;
  const char* category_;
  int lane_;
  TraceArgs args_;
  TraceRecorder::Clock::time_point start_;
  double start_cpu_us_ = 0.0;
};

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_TRACE_H_
