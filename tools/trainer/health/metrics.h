// Per-step metrics: one readable log line, one JSON object per logged step
// in the --metrics_file (JSON Lines), and the same as TensorBoard scalars
// in --tensorboard_dir.
#ifndef TRELLIS_TOOLS_TRAINER_HEALTH_METRICS_H_
#define TRELLIS_TOOLS_TRAINER_HEALTH_METRICS_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tools/trainer/health/tensorboard_writer.h"

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
  // Device memory of the rank that uses the most: the arena's high-water
  // mark so far (what the plan's tensors really took) and the plan's total.
  double memory_peak_bytes = 0;
  double memory_planned_bytes = 0;
  // Why the step's update was skipped (StepGuard); empty: it was applied.
  // A skipped step reports the step it attempted, which the next repeats.
  std::string skipped;
  int64_t skipped_steps = 0;      // Skipped by this run so far, all told.
  int64_t consecutive_skips = 0;  // Ending with this step.
  // On a step that compared the ranks' compute times (StragglerMonitor):
  // the slowest's over the median, and the rank (-1: none) past
  // --straggler_threshold with its description.
  double straggler_ratio = 0;
  int straggler_rank = -1;
  std::string straggler;
  // Whether any rank's stop check (e.g. a preemption signal) fired by the
  // end of the step.
  bool stop_requested = false;
  // A mixture of experts' routing (RoutingReport; empty without MoE
  // layers): per MoE layer, the slots its busiest expert received over the
  // mean; the balance losses' mean over those layers and the microbatches.
  std::vector<std::pair<int64_t, double>> expert_load;
  double moe_aux_loss = 0;
  double moe_z_loss = 0;
};

std::string FormatLogLine(const StepMetrics& m, int64_t total_steps);

// The TensorBoard scalars of a step: train/loss, val/loss (when evaluated),
// train/lr, train/grad_norm, perf/tokens_per_s, perf/ms, perf/model_tflops,
// perf/mfu (when a peak is known), pipeline/bubble and bubble_theory,
// perf/dp_wait_ms, memory/peak_bytes and memory/planned_bytes,
// health/skipped_steps and health/skipped (1 on a skipped
// step, else 0), health/slowest_over_median after a straggler exchange,
// for a blend val/loss_by_source/<path>, and with MoE layers moe/aux_loss,
// moe/z_loss and moe/expert_load/layer_<i>.
Scalars TensorBoardScalars(const StepMetrics& m);

class MetricsWriter {
 public:
  // Empty paths write nothing. Appends to an existing metrics file (a
  // resumed run continues its metrics); the TensorBoard directory gets a
  // new event file.
  absl::Status Open(const std::string& path,
                    const std::string& tensorboard_dir = "");
  // A TensorBoard write that fails is reported once on stderr and ends the
  // event file; training goes on. So does a metrics-file write that fails
  // (a full disk): said once on stderr, the file cut back to its last whole
  // line and written no more, and failure() says so for the run's exit.
  void Write(const StepMetrics& m);
  // Empty while every metrics line was written; else what was lost, for
  // the run's closing error.
  const std::string& failure() const { return failure_; }

 private:
  std::ofstream out_;
  std::string path_, failure_;
  // The file's size after the last whole line written.
  std::streamoff whole_bytes_ = 0;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_HEALTH_METRICS_H_
