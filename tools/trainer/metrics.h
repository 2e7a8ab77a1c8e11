// Per-step metrics: one readable log line, and one JSON object per logged
// step in the --metrics_file (JSON Lines).
#ifndef TRELLIS_TOOLS_TRAINER_METRICS_H_
#define TRELLIS_TOOLS_TRAINER_METRICS_H_

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace trellis {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the step just taken.
  double loss = 0;   // Mean training loss over the global batch.
  std::optional<double> val_loss;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double ms = 0;            // Wall time of the step.
  double model_tflops = 0;  // Model FLOPs of the step / its time, all ranks.
  double mfu = 0;     // model_tflops / (ranks × peak per rank); 0: no peak.
  double bubble = 0;  // Measured pipeline bubble (worst stage).
  double bubble_theory = 0;
  double dp_wait_ms = 0;  // Time spent waiting on data-parallel buckets.
  // Why the step's update was skipped (StepGuard); empty: it was applied.
  // A skipped step reports the step it attempted, which the next repeats.
  std::string skipped;
  int64_t skipped_steps = 0;      // Skipped by this run so far, all told.
  int64_t consecutive_skips = 0;  // Ending with this step.
};

std::string FormatLogLine(const StepMetrics& m, int64_t total_steps);

class MetricsWriter {
 public:
  // An empty path writes nothing. Appends to an existing file (a resumed
  // run continues its metrics).
  absl::Status Open(const std::string& path);
  void Write(const StepMetrics& m);

 private:
  std::ofstream out_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_METRICS_H_
