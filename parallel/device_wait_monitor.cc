#include "parallel/device_wait_monitor.h"

#include <utility>
#include <vector>

#include "framework/status.h"

namespace trellis {

DeviceWaitMonitor::DeviceWaitMonitor(double timeout_s, Done done,
                                     Timeout timeout, double poll_s)
    : timeout_s_(timeout_s),
      poll_s_(poll_s),
      done_(std::move(done)),
      timeout_(std::move(timeout)) {
  TRELLIS_CHECK(timeout_s > 0 && poll_s > 0)
      << "timeout " << timeout_s << " s, poll " << poll_s << " s";
  prober_ = std::thread([this] { ProbeLoop(); });
  deadline_ = std::thread([this] { DeadlineLoop(); });
}

DeviceWaitMonitor::~DeviceWaitMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  prober_.join();
  deadline_.join();
}

void DeviceWaitMonitor::Watch(int64_t id, CompletionProbe probe) {
  TRELLIS_CHECK(probe != nullptr) << "operation #" << id << " has no probe";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back({id, std::move(probe), Clock::now()});
  }
  wake_.notify_all();
}

int DeviceWaitMonitor::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(entries_.size());
}

void DeviceWaitMonitor::ProbeLoop() {
  const auto period = std::chrono::duration<double>(poll_s_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (entries_.empty() || fired_) {
      wake_.wait(lock,
                 [this] { return stop_ || (!entries_.empty() && !fired_); });
      continue;
    }
    // Probe copies outside the lock: a probe may take a device call's time,
    // or never return, and the deadline thread must still see the entries.
    std::vector<std::pair<int64_t, CompletionProbe>> round;
    for (const Entry& e : entries_) round.emplace_back(e.id, e.probe);
    lock.unlock();
    std::vector<int64_t> finished;
    for (auto& [id, probe] : round) {
      if (probe()) finished.push_back(id);
    }
    round.clear();  // releases the probes here, not under the lock
    lock.lock();
    std::vector<Entry> removed;
    for (int64_t id : finished) {
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->id != id) continue;
        removed.push_back(std::move(*it));
        entries_.erase(it);
        break;
      }
    }
    lock.unlock();
    removed.clear();
    for (int64_t id : finished) done_(id);
    lock.lock();
    wake_.wait_for(lock, period, [this] { return stop_; });
  }
}

void DeviceWaitMonitor::DeadlineLoop() {
  const auto period = std::chrono::duration<double>(poll_s_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period, [this] { return stop_; });
    if (stop_ || fired_ || entries_.empty()) continue;
    // Entries are in the order they were handed over: the first is oldest.
    const Entry& oldest = entries_.front();
    const double waited =
        std::chrono::duration<double>(Clock::now() - oldest.since).count();
    if (waited <= timeout_s_) continue;
    fired_ = true;
    const int64_t id = oldest.id;
    lock.unlock();
    timeout_(id, waited);
    lock.lock();
  }
}

}  // namespace trellis
