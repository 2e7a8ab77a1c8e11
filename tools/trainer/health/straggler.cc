#include "tools/trainer/health/straggler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace trellis {
namespace {

constexpr int kHostChars = 64;

// The node's name: Slurm's where set, else the hostname (as the layout
// report names nodes).
std::string NodeName() {
  const char* node = std::getenv("SLURMD_NODENAME");
  if (node != nullptr && *node != '\0') return node;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

}  // namespace

std::string Straggler::Describe(int64_t steps) const {
  return absl::StrFormat(
      "rank %d (%s, dp %d tp %d pp %d): %.1f ms of compute over the last %d "
      "steps against a median of %.1f ms (%.2fx)",
      rank, host, coord.d, coord.t, coord.p, 1e3 * seconds, steps,
      1e3 * median_seconds, ratio());
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::optional<int> FindStraggler(const std::vector<double>& seconds,
                                 double threshold) {
  const double median = Median(seconds);
  const int slowest = static_cast<int>(
      std::max_element(seconds.begin(), seconds.end()) - seconds.begin());
  if (!(median > 0) || seconds[slowest] <= threshold * median) {
    return std::nullopt;
  }
  return slowest;
}

absl::StatusOr<std::unique_ptr<StragglerMonitor>> StragglerMonitor::Create(
    Communicator& world, MeshCoord coord, int64_t every, double threshold,
    const std::string& slow_hook) {
  std::unique_ptr<StragglerMonitor> m(
      new StragglerMonitor(world, every, threshold));
  if (!slow_hook.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(slow_hook, ':');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &m->slow_rank_) ||
        !absl::SimpleAtoi(parts[1], &m->slow_ms_) || m->slow_ms_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("TRELLIS_TEST_SLOW_RANK='", slow_hook,
                       "' is not RANK:MS (e.g. 3:200); unset it outside "
                       "tests"));
    }
  }
  if (every == 0) return m;
  // Node names (kHostChars characters at most) and coordinates, one row of
  // kHostChars + 3 ints per rank.
  const int row = kHostChars + 3;
  Tensor mine = Tensor::Zeros({row}, DType::kI32);
  const std::string host = NodeName();
  for (int i = 0; i < kHostChars - 1 && i < static_cast<int>(host.size());
       ++i) {
    mine.data<int32_t>()[i] = static_cast<unsigned char>(host[i]);
  }
  mine.data<int32_t>()[kHostChars] = coord.d;
  mine.data<int32_t>()[kHostChars + 1] = coord.t;
  mine.data<int32_t>()[kHostChars + 2] = coord.p;
  Tensor all = Tensor::Zeros({world.size() * row}, DType::kI32);
  world.AllGather(mine, all);
  for (int r = 0; r < world.size(); ++r) {
    const int32_t* v = all.data<int32_t>() + r * row;
    std::string name;
    for (int i = 0; i < kHostChars && v[i] != 0; ++i) {
      name.push_back(static_cast<char>(v[i]));
    }
    m->hosts_.push_back(name);
    m->coords_.push_back(
        MeshCoord{v[kHostChars], v[kHostChars + 1], v[kHostChars + 2]});
  }
  return m;
}

std::string SlowRankTestHook() {
  const char* value = std::getenv("TRELLIS_TEST_SLOW_RANK");
  return value != nullptr ? value : "";
}

std::optional<Straggler> StragglerMonitor::EndStep(double compute_seconds,
                                                   double* slowest_ratio) {
  *slowest_ratio = 0;
  if (every_ == 0) return std::nullopt;
  if (world_.rank() == slow_rank_ && slow_ms_ > 0) {  // the test hook
    std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
    compute_seconds += slow_ms_ / 1e3;
  }
  window_seconds_ += compute_seconds;
  if (++window_steps_ < every_) return std::nullopt;
  Tensor mine = Tensor::Empty({1}, DType::kF64);
  mine.data<double>()[0] = window_seconds_;
  Tensor all = Tensor::Empty({world_.size()}, DType::kF64);
  world_.AllGather(mine, all);
  const std::vector<double> seconds(all.data<double>(),
                                    all.data<double>() + world_.size());
  window_seconds_ = 0;
  window_steps_ = 0;
  const double median = Median(seconds);
  if (median > 0) {
    *slowest_ratio = *std::max_element(seconds.begin(), seconds.end()) / median;
  }
  const std::optional<int> slow = FindStraggler(seconds, threshold_);
  if (!slow) return std::nullopt;
  return Straggler{*slow, hosts_[*slow], coords_[*slow], seconds[*slow],
                   median};
}

}  // namespace trellis
