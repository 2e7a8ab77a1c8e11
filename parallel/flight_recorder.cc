#include "parallel/flight_recorder.h"

#include <cstdio>

#include "framework/status.h"

namespace trellis {

double UnixSeconds() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* FlightStateName(FlightRecord::State state) {
  switch (state) {
    case FlightRecord::State::kWaiting:
      return "waiting";
    case FlightRecord::State::kDone:
      return "done";
    case FlightRecord::State::kSkipped:
      return "skipped";
  }
  return "?";
}

std::string FlightRecord::ToText(double now_unix_s) const {
  const double elapsed =
      state == State::kWaiting ? now_unix_s - start_unix_s : seconds;
  char line[512];
  std::snprintf(line, sizeof(line),
                "#%lld %s %s seq=%lld peer=%d bytes=%lld %s %.3f s",
                static_cast<long long>(id), group.c_str(), op.c_str(),
                static_cast<long long>(seq), peer,
                static_cast<long long>(bytes), FlightStateName(state), elapsed);
  return line;
}

nlohmann::json FlightRecord::ToJson(double now_unix_s) const {
  return nlohmann::json{
      {"id", id},
      {"group", group},
      {"op", op},
      {"peer", peer},
      {"bytes", bytes},
      {"seq", seq},
      {"start_unix_s", start_unix_s},
      {"state", FlightStateName(state)},
      {"seconds",
       state == State::kWaiting ? now_unix_s - start_unix_s : seconds}};
}

FlightRecorder::FlightRecorder(int capacity)
    : capacity_(capacity), ring_(capacity), started_(capacity) {
  TRELLIS_CHECK_GT(capacity, 0) << "flight recorder capacity";
}

int64_t FlightRecorder::Begin(FlightRecord record) {
  std::lock_guard<std::mutex> lock(mutex_);
  record.id = next_id_++;
  if (record.start_unix_s == 0) record.start_unix_s = UnixSeconds();
  const size_t slot = static_cast<size_t>(record.id % capacity_);
  started_[slot] = Clock::now();
  ring_[slot] = std::move(record);
  return ring_[slot].id;
}

void FlightRecorder::Finish(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id < 0) return;
  const size_t slot = static_cast<size_t>(id % capacity_);
  FlightRecord& record = ring_[slot];
  if (record.id != id || record.state != FlightRecord::State::kWaiting) return;
  record.state = FlightRecord::State::kDone;
  record.seconds =
      std::chrono::duration<double>(Clock::now() - started_[slot]).count();
}

std::optional<FlightRecord> FlightRecorder::Find(int64_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id < 0) return std::nullopt;
  const FlightRecord& record = ring_[static_cast<size_t>(id % capacity_)];
  if (record.id != id) return std::nullopt;
  return record;
}

std::vector<FlightRecord> FlightRecorder::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<FlightRecord> records;
  const int64_t first = next_id_ > capacity_ ? next_id_ - capacity_ : 0;
  for (int64_t id = first; id < next_id_; ++id) {
    records.push_back(ring_[static_cast<size_t>(id % capacity_)]);
  }
  return records;
}

int64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_id_;
}

std::string FlightRecorder::ToText() const {
  const double now = UnixSeconds();
  std::string text;
  for (const FlightRecord& record : Snapshot()) {
    text += record.ToText(now);
    text += '\n';
  }
  return text;
}

nlohmann::json FlightRecorder::ToJson() const {
  const double now = UnixSeconds();
  nlohmann::json records = nlohmann::json::array();
  for (const FlightRecord& record : Snapshot()) {
    records.push_back(record.ToJson(now));
  }
  return records;
}

}  // namespace trellis
