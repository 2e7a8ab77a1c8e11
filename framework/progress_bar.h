// ProgressBar: one line on stderr showing how far a long job is.
//
//   planning [#########.....................]  912/3040 layouts  30.0%  ETA
//   0:41
//
// On a terminal the line is redrawn in place at most ten times a second;
// otherwise (a log file, a pipe) a line is written at most every five
// seconds. Nothing is drawn in a job's first second (quick jobs stay
// quiet); after that the last update (done == total) always draws and ends
// the line.
// A `detail` string, when given, follows the figures ("12.5 MB").
//
// Thread safety: none; one thread updates a bar.
#ifndef TRELLIS_FRAMEWORK_PROGRESS_BAR_H_
#define TRELLIS_FRAMEWORK_PROGRESS_BAR_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace trellis {

class ProgressBar {
 public:
  // `label` starts the line, `unit` names what is counted; a bar that is
  // not `enabled` draws nothing. With the unit "bytes" the figures are
  // megabytes and the rate ("1.9/4.3 MB  12.0 MB/s").
  ProgressBar(std::string label, std::string unit, bool enabled = true);

  // `done` of `total` finished. REQUIRES: 0 ≤ done ≤ total.
  void Update(int64_t done, int64_t total, absl::string_view detail = "");

 private:
  using Clock = std::chrono::steady_clock;
  const std::string label_, unit_;
  const bool enabled_, tty_;
  const Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_PROGRESS_BAR_H_
