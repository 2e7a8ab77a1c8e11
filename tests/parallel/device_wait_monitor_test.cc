// The device monitor with probes the test controls: finished work is
// reported done (in any order), work still pending past the deadline is
// reported late once, with how long it waited, and nothing after that,
// even when the probe itself never returns.
#include "parallel/device_wait_monitor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace trellis {
namespace {

using Clock = std::chrono::steady_clock;

// What the monitor reported, read from the test's thread.
struct Reports {
  std::mutex mutex;
  std::vector<int64_t> done;
  std::vector<std::pair<int64_t, double>> late;

  std::vector<int64_t> Done() {
    std::lock_guard<std::mutex> lock(mutex);
    return done;
  }
  std::vector<std::pair<int64_t, double>> Late() {
    std::lock_guard<std::mutex> lock(mutex);
    return late;
  }
};

DeviceWaitMonitor Monitor(double timeout_s, Reports& r) {
  return DeviceWaitMonitor(
      timeout_s,
      [&r](int64_t id) {
        std::lock_guard<std::mutex> lock(r.mutex);
        r.done.push_back(id);
      },
      [&r](int64_t id, double waited_s) {
        std::lock_guard<std::mutex> lock(r.mutex);
        r.late.emplace_back(id, waited_s);
      },
      0.001);
}

// Polls `ready` for up to `seconds`.
template <typename F>
bool Eventually(F ready, double seconds = 5) {
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ready();
}

TEST(DeviceWaitMonitorTest, FinishedWorkIsReportedDoneInAnyOrder) {
  Reports r;
  std::atomic<bool> first{false}, second{false};
  {
    DeviceWaitMonitor monitor = Monitor(30, r);
    monitor.Watch(7, [&] { return first.load(); });
    monitor.Watch(8, [&] { return second.load(); });
    EXPECT_EQ(monitor.pending(), 2);
    second = true;
    ASSERT_TRUE(Eventually([&] { return r.Done().size() == 1; }));
    EXPECT_EQ(r.Done(), std::vector<int64_t>{8});
    EXPECT_EQ(monitor.pending(), 1);
    first = true;
    ASSERT_TRUE(Eventually([&] { return monitor.pending() == 0; }));
  }
  EXPECT_EQ(r.Done(), (std::vector<int64_t>{8, 7}));
  EXPECT_TRUE(r.Late().empty());
}

TEST(DeviceWaitMonitorTest, WorkPastTheDeadlineIsReportedOnceWithItsWait) {
  Reports r;
  DeviceWaitMonitor monitor = Monitor(0.2, r);
  const Clock::time_point start = Clock::now();
  monitor.Watch(3, [] { return false; });
  ASSERT_TRUE(Eventually([&] { return !r.Late().empty(); }));
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - start).count();
  const auto late = r.Late();
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].first, 3);
  EXPECT_GT(late[0].second, 0.2);
  EXPECT_LE(late[0].second, elapsed);
  // Once fired, it watches nothing more: no second report.
  monitor.Watch(4, [] { return false; });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(r.Late().size(), 1u);
}

TEST(DeviceWaitMonitorTest, OnlyTheLateOperationIsNamed) {
  Reports r;
  DeviceWaitMonitor monitor = Monitor(0.3, r);
  std::atomic<bool> quick{false};
  monitor.Watch(1, [&] { return quick.load(); });
  monitor.Watch(2, [] { return false; });
  quick = true;
  ASSERT_TRUE(Eventually([&] { return !r.Late().empty(); }));
  EXPECT_EQ(r.Done(), std::vector<int64_t>{1});
  EXPECT_EQ(r.Late()[0].first, 2);
}

// A probe that does not return (a device query stuck behind the hung work
// it asks about) holds up only the probing: the deadline still fires.
TEST(DeviceWaitMonitorTest, AStuckProbeDoesNotSilenceTheDeadline) {
  Reports r;
  std::atomic<bool> release{false};
  {
    DeviceWaitMonitor monitor = Monitor(0.2, r);
    monitor.Watch(5, [&] {
      while (!release.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return false;
    });
    const bool fired = Eventually([&] { return !r.Late().empty(); });
    release = true;  // lets the destructor join the probing thread
    ASSERT_TRUE(fired);
    EXPECT_EQ(r.Late()[0].first, 5);
    EXPECT_GT(r.Late()[0].second, 0.2);
  }
  EXPECT_TRUE(r.Done().empty());
}

TEST(DeviceWaitMonitorTest, StopsWithWorkStillPending) {
  Reports r;
  const Clock::time_point start = Clock::now();
  {
    DeviceWaitMonitor monitor = Monitor(60, r);
    monitor.Watch(1, [] { return false; });
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
  EXPECT_TRUE(r.Done().empty());
  EXPECT_TRUE(r.Late().empty());
}

}  // namespace
}  // namespace trellis
