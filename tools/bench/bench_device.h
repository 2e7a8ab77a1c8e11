// What trellis-bench needs from the device it measures, for the CPU and a
// CUDA GPU alike: its name, the rate of a reference GEMM, a way to wait for
// its work, and its peak memory.
#ifndef TRELLIS_TOOLS_BENCH_BENCH_DEVICE_H_
#define TRELLIS_TOOLS_BENCH_BENCH_DEVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "framework/tensor.h"

namespace trellis {

// The reference GEMM's rate, in FLOP/s (2·n³ FLOPs per GEMM).
struct GemmRate {
  std::string what;     // e.g. "sgemm 2048^3", "bf16 MatmulForward 8192^3"
  double wall = 0;      // over wall time (CUDA: event time on the stream)
  double cpu_time = 0;  // over process CPU time; 0 on CUDA
};

class BenchDevice {
 public:
  // The host, or (kCUDA) this rank's GPU (SelectCudaDevice).
  // FailedPrecondition when there is no GPU or the build has no CUDA.
  static absl::StatusOr<BenchDevice> Open(DeviceType type);

  bool cuda() const { return cuda_; }
  int index() const { return index_; }
  // The CUDA device name ("NVIDIA H100 80GB HBM3"), or the CPU's model name.
  const std::string& name() const { return name_; }

  // CPU: cblas_sgemm of n×n×n float32 (best of 5). CUDA: the public
  // MatmulForward on n×n device tensors of `dtype` (float32 or bfloat16,
  // float32 accumulation), 10 back to back between two CUDA events on the
  // compute stream, best of 5 such runs after 2 warm-up calls.
  GemmRate MeasureGemm(int64_t n, DType dtype) const;

  // Waits until the device has finished all work issued to it (CPU:
  // returns at once).
  void Synchronize() const;

  // CUDA: the peak of bytes allocated through CudaAllocate since the last
  // ResetPeakMemory. CPU: the process's peak resident set (ru_maxrss),
  // which cannot be reset.
  uint64_t PeakMemoryBytes() const;
  void ResetPeakMemory() const;
  // What PeakMemoryBytes counts, for reports.
  const char* PeakMemoryWhat() const {
    return cuda_ ? "device memory allocated" : "peak RSS";
  }

 private:
  BenchDevice(bool cuda, int index, std::string name)
      : cuda_(cuda), index_(index), name_(std::move(name)) {}

  bool cuda_ = false;
  int index_ = 0;
  std::string name_;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_BENCH_BENCH_DEVICE_H_
