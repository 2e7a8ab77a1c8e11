#include "tools/bench/bench_device.h"

#include <cblas.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "framework/float16.h"
#include "framework/kernels/matmul.h"
#include "framework/rng.h"

#if defined(TRELLIS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "framework/cuda/cuda_check.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/cuda_memory.h"
#endif

namespace trellis {
namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds used by this process: on a shared machine this counts the
// work done, not the time spent waiting for a core.
double CpuSeconds() {
  timespec t = {};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

double GemmFlops(int64_t n) { return 2.0 * n * n * n; }

// Best of several runs of an n×n×n sgemm.
GemmRate CpuSgemm(int64_t n) {
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(UniformAt(1, 1, i) - 0.5);
    b[i] = static_cast<float>(UniformAt(1, 2, i) - 0.5);
  }
  const int m = static_cast<int>(n);
  double wall = 1e30, cpu = 1e30;
  for (int run = 0; run < 5; ++run) {
    const auto start = Clock::now();
    const double cpu_start = CpuSeconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.0f,
                a.data(), m, b.data(), m, 0.0f, c.data(), m);
    cpu = std::min(cpu, CpuSeconds() - cpu_start);
    wall = std::min(
        wall, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return GemmRate{absl::StrCat("sgemm ", n, "^3"), GemmFlops(n) / wall,
                  GemmFlops(n) / cpu};
}

// "model name" from /proc/cpuinfo, or "cpu".
std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "cpu";
}

#if defined(TRELLIS_WITH_CUDA)
// An (n, n) tensor of `dtype` on `device`, uniform in [-0.5, 0.5).
Tensor DeviceMatrix(int64_t n, DType dtype, uint64_t stream, int device) {
  Tensor host = Tensor::Empty({n, n}, dtype);
  for (int64_t i = 0; i < n * n; ++i) {
    const float v = static_cast<float>(UniformAt(1, stream, i) - 0.5);
    if (dtype == DType::kBF16) {
      static_cast<uint16_t*>(host.raw())[i] = FloatToBf16(v);
    } else {
      host.data<float>()[i] = v;
    }
  }
  return host.To(Device::Cuda(device));
}

GemmRate CudaGemm(int64_t n, DType dtype, int device) {
  constexpr int kCalls = 10;
  CudaDeviceGuard guard(device);
  const Tensor x = DeviceMatrix(n, dtype, 1, device);
  const Tensor w = DeviceMatrix(n, dtype, 2, device);
  Tensor out = Tensor::Empty({n, n}, dtype, Device::Cuda(device));
  const Tensor no_bias;
  for (int i = 0; i < 2; ++i) MatmulForward(x, w, no_bias, out);
  cudaEvent_t start = nullptr, stop = nullptr;
  TRELLIS_CUDA_CHECK(cudaEventCreate(&start));
  TRELLIS_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = 1e30f;
  for (int run = 0; run < 5; ++run) {
    TRELLIS_CUDA_CHECK(cudaEventRecord(start, ComputeStream()));
    for (int i = 0; i < kCalls; ++i) MatmulForward(x, w, no_bias, out);
    TRELLIS_CUDA_CHECK(cudaEventRecord(stop, ComputeStream()));
    WaitForCudaEvent(stop);
    float ms = 0;
    TRELLIS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best_ms = std::min(best_ms, ms / kCalls);
  }
  TRELLIS_CUDA_CHECK(cudaEventDestroy(start));
  TRELLIS_CUDA_CHECK(cudaEventDestroy(stop));
  return GemmRate{absl::StrCat(dtype == DType::kBF16 ? "bf16" : "fp32",
                               " MatmulForward ", n, "^3"),
                  GemmFlops(n) / (1e-3 * best_ms), 0};
}
#endif

}  // namespace

absl::StatusOr<BenchDevice> BenchDevice::Open(DeviceType type) {
  if (type != DeviceType::kCUDA) return BenchDevice(false, 0, CpuName());
#if defined(TRELLIS_WITH_CUDA)
  absl::StatusOr<int> device = SelectCudaDevice();
  if (!device.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: ", device.status().message()));
  }
  cudaDeviceProp properties;
  TRELLIS_CUDA_CHECK(cudaGetDeviceProperties(&properties, *device));
  return BenchDevice(true, *device, properties.name);
#else
  return absl::FailedPreconditionError(
      "--device=cuda: this build of trellis has no CUDA backend");
#endif
}

GemmRate BenchDevice::MeasureGemm(int64_t n, DType dtype) const {
#if defined(TRELLIS_WITH_CUDA)
  if (cuda_) return CudaGemm(n, dtype, index_);
#endif
  return CpuSgemm(n);
}

void BenchDevice::Synchronize() const {
#if defined(TRELLIS_WITH_CUDA)
  if (cuda_) CudaSynchronize(index_);
#endif
}

uint64_t BenchDevice::PeakMemoryBytes() const {
#if defined(TRELLIS_WITH_CUDA)
  if (cuda_) return GetCudaMemoryStats(index_).peak_bytes;
#endif
  struct rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
}

void BenchDevice::ResetPeakMemory() const {
#if defined(TRELLIS_WITH_CUDA)
  if (cuda_) ResetCudaPeakMemory(index_);
#endif
}

}  // namespace trellis
