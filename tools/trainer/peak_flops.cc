#include "tools/trainer/peak_flops.h"

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "framework/device_info.h"
#include "tools/bench/bench_device.h"

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
  constexpr int64_t kGemm = 384;
  const absl::StatusOr<BenchDevice> cpu = BenchDevice::Open(DeviceType::kCPU);
  const GemmRate rate = cpu->MeasureGemm(kGemm, DType::kF32);
  return {rate.wall, absl::StrFormat("measured %s on this rank, %.1f GFLOP/s",
                                     rate.what, rate.wall / 1e9)};
}

}  // namespace trellis
