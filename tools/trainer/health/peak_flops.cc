#include "tools/trainer/health/peak_flops.h"

#include <cblas.h>

#include <chrono>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "framework/device_info.h"

namespace trellis {

std::optional<double> KnownPeakTflops(const std::string& device_name) {
  const auto has = [&](const char* part) {
    return absl::StrContains(device_name, part);
  };
  // NVL boards and the Grace Hopper superchip run at other clocks and
  // power limits; their peaks are not in this table.
  if (has("NVL") || has("GH200")) return std::nullopt;
  if (has("H100") && has("PCIe")) return 756;
  // "NVIDIA H100 80GB HBM3" is the SXM5 board.
  if (has("H100") && (has("SXM") || has("HBM3"))) return 989;
  if (has("H200")) return 989;
  // A100 SXM and PCIe share the dense bf16 peak.
  if (has("A100")) return 312;
  return std::nullopt;
}

PeakFlops PeakFlopsOf(Device device, double flag_tflops) {
  if (flag_tflops > 0) {
    return {flag_tflops * 1e12,
            absl::StrFormat("--peak_tflops=%g per rank", flag_tflops)};
  }
  if (device.is_cuda()) {
    const std::string name = DeviceDescription(device);
    const std::optional<double> known = KnownPeakTflops(name);
    if (!known) {
      return {0, absl::StrFormat("no known peak for %s; give --peak_tflops "
                                 "for MFU",
                                 name)};
    }
    return {*known * 1e12,
            absl::StrFormat("%s dense bf16 peak, %g TFLOP/s", name, *known)};
  }
  // The mean over all repetitions, not the best: ranks that share cores
  // measure at once (the trainer lines them up first), so each sees the
  // share of the machine it will train with.
  constexpr int kGemm = 384, kReps = 6;
  std::vector<float> a(kGemm * kGemm, 0.25f), b(kGemm * kGemm, -0.5f),
      c(kGemm * kGemm);
  const auto sgemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kGemm, kGemm, kGemm,
                1.0f, a.data(), kGemm, b.data(), kGemm, 0.0f, c.data(), kGemm);
  };
  sgemm();  // warm-up
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kReps; ++i) sgemm();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const double rate = kReps * 2.0 * kGemm * kGemm * kGemm / seconds;
  return {rate, absl::StrFormat("measured sgemm %d^3 on this rank, %.1f "
                                "GFLOP/s",
                                kGemm, rate / 1e9)};
}

}  // namespace trellis
