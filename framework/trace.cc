#include "framework/trace.h"

#include <time.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

#if defined(TRELLIS_WITH_CUDA)
#include "framework/cuda/cuda_trace_clock.h"
#endif

namespace trellis {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

nlohmann::json Metadata(const char* name, int pid, int tid,
                        nlohmann::json args) {
  nlohmann::json event = {
      {"name", name}, {"ph", "M"}, {"pid", pid}, {"args", std::move(args)}};
  if (tid >= 0) event["tid"] = tid;
  return event;
}

nlohmann::json SpanEvent(const TraceSpan& span, int pid) {
  nlohmann::json args = nlohmann::json::object();
  for (const auto& [key, value] : span.args) args[key] = value;
  return {{"name", span.name},   {"cat", span.category},    {"ph", "X"},
          {"ts", span.start_us}, {"dur", span.duration_us}, {"pid", pid},
          {"tid", span.lane},    {"args", std::move(args)}};
}

}  // namespace

double ThreadCpuMicros() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e6 * static_cast<double>(t.tv_sec) +
         1e-3 * static_cast<double>(t.tv_nsec);
}

int64_t HostTraceClock::Mark() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             Clock::now().time_since_epoch())
      .count();
}

double HostTraceClock::Resolve(int64_t mark, Clock::time_point origin) {
  const Clock::time_point t{std::chrono::nanoseconds(mark)};
  return std::chrono::duration<double, std::micro>(t - origin).count();
}

double HostTraceClock::Seconds(int64_t begin, int64_t end) {
  return 1e-9 * static_cast<double>(end - begin);
}

std::shared_ptr<TraceClock> NewDeviceTraceClock(Device device) {
  if (device.is_cpu()) return nullptr;
#if defined(TRELLIS_WITH_CUDA)
  return std::make_shared<CudaTraceClock>(device.index);
#else
  TRELLIS_CHECK(false) << "this build of trellis has no CUDA backend";
  return nullptr;
#endif
}

TraceRecorder::TraceRecorder(int pid, std::shared_ptr<TraceClock> clock)
    : pid_(pid), clock_(std::move(clock)) {
  if (clock_ == nullptr) clock_ = std::make_shared<HostTraceClock>();
}

double TraceRecorder::MicrosSinceOrigin(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

int TraceRecorder::AddLane(const std::string& name) {
  lanes_.push_back(name);
  return static_cast<int>(lanes_.size());
}

void TraceRecorder::SetMetadata(const std::string& key, nlohmann::json value) {
  metadata_[key] = std::move(value);
}

void TraceRecorder::AddSpan(std::string name, const char* category, int lane,
                            Clock::time_point start, Clock::time_point end,
                            TraceArgs args) {
  if (!active_) return;
  const double start_us = MicrosSinceOrigin(start);
  spans_.push_back(TraceSpan{std::move(name), category, lane, start_us,
                             MicrosSinceOrigin(end) - start_us,
                             std::move(args)});
}

void TraceRecorder::AddMarkedSpan(std::string name, const char* category,
                                  int lane, int64_t begin_mark,
                                  int64_t end_mark, TraceArgs args) {
  if (!active_) return;
  pending_.push_back(Pending{
      TraceSpan{std::move(name), category, lane, 0.0, 0.0, std::move(args)},
      begin_mark, end_mark});
}

void TraceRecorder::Flush() {
  for (Pending& p : pending_) {
    p.span.start_us = clock_->Resolve(p.begin, origin_);
    p.span.duration_us = clock_->Resolve(p.end, origin_) - p.span.start_us;
    spans_.push_back(std::move(p.span));
  }
  pending_.clear();
}

nlohmann::json TraceRecorder::ToJson() const {
  nlohmann::json events = nlohmann::json::array();
  const std::string process =
      process_name_.empty() ? absl::StrCat("process ", pid_) : process_name_;
  events.push_back(Metadata("process_name", pid_, -1, {{"name", process}}));
  events.push_back(
      Metadata("process_sort_index", pid_, -1, {{"sort_index", pid_}}));
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const int tid = static_cast<int>(i) + 1;
    events.push_back(Metadata("thread_name", pid_, tid, {{"name", lanes_[i]}}));
    events.push_back(
        Metadata("thread_sort_index", pid_, tid, {{"sort_index", tid}}));
  }
  for (const TraceSpan& span : spans_) events.push_back(SpanEvent(span, pid_));
  nlohmann::json other = metadata_;
  other["format"] = kTraceFormat;
  other["version"] = kTraceFormatVersion;
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", std::move(other)}};
}

absl::Status TraceRecorder::Write(const std::string& path) {
  Flush();
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create the trace directory ",
                       target.parent_path().string(), ": ", ec.message()));
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << ToJson().dump() << "\n";
    out.close();
    if (!out) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot write the trace file ", tmp,
          "; check that the --trace_dir is writable and has space"));
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

ScopedTraceSpan::ScopedTraceSpan(TraceRecorder* recorder, std::string name,
                                 const char* category, int lane, TraceArgs args)
    : recorder_(recorder != nullptr && recorder->active() ? recorder : nullptr),
      category_(category),
      lane_(lane) {
  if (recorder_ == nullptr) return;
  name_ = std::move(name);
  args_ = std::move(args);
  start_cpu_us_ = ThreadCpuMicros();
  start_ = TraceRecorder::Clock::now();
}

ScopedTraceSpan::~ScopedTraceSpan() {
  if (recorder_ == nullptr) return;
  args_.emplace_back("cpu_us",
                     static_cast<int64_t>(ThreadCpuMicros() - start_cpu_us_));
  recorder_->AddSpan(std::move(name_), category_, lane_, start_,
                     TraceRecorder::Clock::now(), std::move(args_));
}

}  // namespace trellis
