// How the CUDA GEMMs choose their cuBLASLt algorithm, process-wide.
//
// By default each GEMM problem (shape, strides, dtypes, epilogue, beta,
// alignments) runs the first algorithm cuBLASLt's heuristic names, the same
// on every run. With autotuning on (--gemm_autotune), a problem's first call
// also times the heuristic's first few candidates on the call's own inputs,
// into scratch output, and the problem keeps the fastest from then on: each
// problem's results stay those of one algorithm, but which one may differ
// between runs and devices, so results are not bit-for-bit repeatable
// across runs. CPU GEMMs ignore the setting.
//
// Thread safety: every function may be called from any thread; a change of
// the setting applies to problems first seen after it.
#ifndef TRELLIS_FRAMEWORK_GEMM_TUNING_H_
#define TRELLIS_FRAMEWORK_GEMM_TUNING_H_

#include <cstdint>

namespace trellis {

void SetGemmAutotune(bool on);
bool GemmAutotune();

// What autotuning found so far in this process: the problems it timed, how
// many of them run another algorithm than the heuristic's first, and the
// sums over the timed problems of one call's time with the heuristic's
// first and with the chosen algorithm.
struct GemmTuningStats {
  int64_t problems = 0;
  int64_t changed = 0;
  double heuristic_ms = 0;
  double chosen_ms = 0;
};
GemmTuningStats GemmTuningSoFar();
// Adds one timed problem to the stats (the CUDA GEMMs call this).
void RecordGemmTuning(double heuristic_ms, double chosen_ms, bool changed);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_GEMM_TUNING_H_
