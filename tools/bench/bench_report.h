// trellis-bench's figures: per timed step and over the run (median step),
// as text lines and as one JSON object.
//
// Model FLOPs per token are ModelConfig::TrainingFlopsPerToken():
// 6·N + 6·L·C·T, N the parameters (tied embedding once, so the LM head's
// GEMM counts), L layers, C the width, T the sequence length; 6·L·C·T is
// the attention score and value products, forward and backward, counted
// causally (half of the T×T). From them:
//   model FLOP rate = FLOPs per token × tokens per step / step time,
//   MFU             = model FLOP rate / the device's peak,
//   ratio to GEMM   = model FLOP rate / the measured reference GEMM rate.
#ifndef TRELLIS_TOOLS_BENCH_BENCH_REPORT_H_
#define TRELLIS_TOOLS_BENCH_BENCH_REPORT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/kernel_profile.h"
#include "tools/bench/bench_device.h"
#include "transformer/config.h"

namespace trellis {

struct StepSample {
  int64_t step = 0;     // 1-based among the timed steps
  double ms = 0;        // wall time, device work included
  double cpu_ms = 0;    // process CPU time
  uint64_t memory = 0;  // BenchDevice::PeakMemoryBytes after the step
  bool profiled = false;
};

// Everything a report shows.
struct BenchRun {
  std::string device;  // "cpu" or "cuda"
  std::string device_name;
  std::string precision, recompute, attention, preset;
  ModelConfig model;
  int64_t micro_batch_size = 0, global_batch_size = 0, warmup = 0;
  GemmRate gemm;
  double peak_tflops = 0;  // 0: unknown (no MFU)
  std::string memory_what;
  std::vector<StepSample> steps;
  std::vector<KernelTime> kernels;  // the profiled step's; empty if none
  // --profile: the device's kernel cost table (tools/plan/kernel_costs.h)
  // in its JSON form; null if none.
  nlohmann::json kernel_costs;

  bool cuda() const { return device == "cuda"; }
  double tokens_per_step() const {
    return static_cast<double>(global_batch_size * model.seq_len);
  }
};

// The rates of a step that took `ms` of wall and `cpu_ms` of CPU time.
struct StepRates {
  double tokens_per_s = 0;
  double flops = 0;       // model FLOP/s over wall time
  double cpu_flops = 0;   // model FLOP/s over CPU time
  double mfu = 0;         // 0 without a peak
  double gemm_ratio = 0;  // flops / gemm.wall
  double cpu_gemm_ratio = 0;
};
StepRates RatesOf(const BenchRun& run, double ms, double cpu_ms);

// The run's header: model, batch, device, the reference GEMM, the peak.
std::string FormatHeader(const BenchRun& run);
// One timed step, one line.
std::string FormatStep(const BenchRun& run, const StepSample& s);
// The median step's figures (and the kernel table when profiled).
std::string FormatSummary(const BenchRun& run);
nlohmann::json SummaryJson(const BenchRun& run);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_BENCH_BENCH_REPORT_H_
