#include "framework/progress_bar.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trellis {

ProgressBar::ProgressBar(std::string label, std::string unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      enabled_(enabled),
      tty_(isatty(2) == 1) {}

void ProgressBar::Update(int64_t done, int64_t total,
                         absl::string_view detail) {
  if (!enabled_ || total <= 0) return;
  const bool final = done >= total;
  const auto now = Clock::now();
  const double since_draw =
      std::chrono::duration<double>(now - last_draw_).count();
  const double seconds = std::chrono::duration<double>(now - start_).count();
  // Jobs done within a second draw nothing.
  if (!drawn_ && seconds < 1.0) return;
  if (!final && drawn_ && since_draw < (tty_ ? 0.1 : 5.0)) return;
  last_draw_ = now;
  drawn_ = true;
  const double fraction = static_cast<double>(done) / total;
  const int64_t eta =
      done > 0 ? static_cast<int64_t>(seconds * (total - done) / done) : 0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * fraction);
  const std::string figures =
      unit_ == "bytes"
          ? absl::StrFormat("%.1f/%.1f MB  %.1f MB/s", done / 1e6, total / 1e6,
                            seconds > 0 ? done / seconds / 1e6 : 0.0)
          : absl::StrFormat("%lld/%lld %s", static_cast<long long>(done),
                            static_cast<long long>(total), unit_);
  std::string line = absl::StrFormat(
      "%s [%s%s] %s  %.1f%%  ETA %d:%02d", label_, std::string(filled, '#'),
      std::string(kWidth - filled, '.'), figures, 100 * fraction,
      static_cast<int>(eta / 60), static_cast<int>(eta % 60));
  if (!detail.empty()) absl::StrAppend(&line, "  ", detail);
  std::fprintf(stderr, tty_ ? "\r%s%s" : "%s%s", line.c_str(),
               tty_ && !final ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace trellis
