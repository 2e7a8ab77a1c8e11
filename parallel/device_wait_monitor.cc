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
  thread_ = std::thread([this] { Loop(); });
}

DeviceWaitMonitor::~DeviceWaitMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
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

void DeviceWaitMonitor::Loop() {
  const auto period = std::chrono::duration<double>(poll_s_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (entries_.empty() || fired_) {
      wake_.wait(lock,
                 [this] { return stop_ || (!entries_.empty() && !fired_); });
      continue;
    }
    // Probe outside the lock: a probe may take a device call's time.
    std::deque<Entry> entries;
    entries.swap(entries_);
    lock.unlock();
    std::vector<int64_t> finished;
    const Entry* late = nullptr;
    std::deque<Entry> still;
    for (Entry& e : entries) {
      if (e.probe()) {
        finished.push_back(e.id);
      } else {
        still.push_back(std::move(e));
      }
    }
    for (int64_t id : finished) done_(id);
    double waited = 0;
    for (const Entry& e : still) {
      waited = std::chrono::duration<double>(Clock::now() - e.since).count();
      if (waited > timeout_s_) {
        late = &e;
        break;
      }
    }
    if (late != nullptr) {
      const int64_t id = late->id;
      lock.lock();
      fired_ = true;
      lock.unlock();
      timeout_(id, waited);
    }
    lock.lock();
    // Operations handed over meanwhile go after the older ones.
    for (auto it = still.rbegin(); it != still.rend(); ++it) {
      entries_.push_front(std::move(*it));
    }
    wake_.wait_for(lock, period, [this] { return stop_; });
  }
}

}  // namespace trellis
