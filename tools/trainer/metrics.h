// Per-step metrics: one readable log line, and one JSON object per logged
// step in the --metrics_file (JSON Lines).
#ifndef TRELLIS_TOOLS_TRAINER_METRICS_H_
#define TRELLIS_TOOLS_TRAINER_METRICS_H_

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace trellis {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the step just taken.
  double loss = 0;   // Mean training loss over the global batch.
  // For a blend, the sources' validation losses weighted by the blend.
  std::optional<double> val_loss;
  // Each blended source's validation loss, by its path (empty for one file).
  std::vector<std::pair<std::string, double>> val_loss_by_source;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double ms = 0;            // Wall time of the step.
  double model_tflops = 0;  // Model FLOPs of the step / its time, all ranks.
  double mfu = 0;     // model_tflops / (ranks × peak per rank); 0: no peak.
  double bubble = 0;  // Measured pipeline bubble (worst stage).
  double bubble_theory = 0;
  double dp_wait_ms = 0;  // Time spent waiting on data-parallel buckets.
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
