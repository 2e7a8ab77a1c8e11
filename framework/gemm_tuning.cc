#include "framework/gemm_tuning.h"

#include <atomic>
#include <mutex>

namespace trellis {
namespace {

std::atomic<bool> autotune{false};
std::mutex stats_mutex;
GemmTuningStats stats;

}  // namespace

void SetGemmAutotune(bool on) { autotune.store(on); }

bool GemmAutotune() { return autotune.load(); }

GemmTuningStats GemmTuningSoFar() {
  std::lock_guard<std::mutex> lock(stats_mutex);
  return stats;
}

void RecordGemmTuning(double heuristic_ms, double chosen_ms, bool changed) {
  std::lock_guard<std::mutex> lock(stats_mutex);
  ++stats.problems;
  if (changed) ++stats.changed;
  stats.heuristic_ms += heuristic_ms;
  stats.chosen_ms += chosen_ms;
}

}  // namespace trellis
