// The peak a run's MFU is measured against, per rank: the dense bfloat16
// tensor-core peak of a known GPU, a user's --peak_tflops, or on the CPU the
// rate of a short float32 GEMM measured at start.
//
// MFU = model FLOPs of a step (TrainingFlopsPerToken × tokens) / step time /
// (ranks × per-rank peak).
//
// Thread safety: the functions are safe to call from any thread.
#ifndef TRELLIS_TOOLS_TRAINER_HEALTH_PEAK_FLOPS_H_
#define TRELLIS_TOOLS_TRAINER_HEALTH_PEAK_FLOPS_H_

#include <optional>
#include <string>

#include "framework/tensor.h"

namespace trellis {

// The dense (no sparsity) bfloat16 tensor-core peak of a GPU, in TFLOP/s,
// from its CUDA device name: H100 SXM 989, H100 PCIe 756, H200 989, A100
// 312. nullopt for any other device (H100 NVL, H200 NVL and GH200
// included), whose peak the user must give.
std::optional<double> KnownPeakTflops(const std::string& device_name);

// What one rank on `device` is measured against, in FLOP/s, and what it is
// (for the start-up line): `flag_tflops` when positive; on a GPU its known
// peak (0 when unknown: MFU is then not reported); on the CPU the mean rate
// of a few float32 384×384×384 GEMMs, measured now (ranks sharing cores
// should measure at the same time, so each sees its share).
struct PeakFlops {
  double flops_per_s = 0;
  std::string what;
};
PeakFlops PeakFlopsOf(Device device, double flag_tflops);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_HEALTH_PEAK_FLOPS_H_
