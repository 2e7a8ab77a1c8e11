// Calibrates a measured kernel cost table (kernel_costs.h) to the cache
// state of a real training step. The table times each kernel alone,
// repeated, so its operands stay in cache; inside a step every layer
// reads weights and activations the layers before it evicted, and the
// same kernels run slower (on a 2-vCPU EPYC VM, GEMMs about 15% and
// attention about 20% below their repeated rate). trellis-bench --profile
// has both: the profiled step's per-kernel times and the table. The
// table's predicted time for that step's GEMMs (`Matmul*` kernels),
// attention (`Attention*`) and AdamW (`AdamW*`) against the measured
// scales each of those grids by measured over predicted (clamped to
// [1/4, 4]); the element-wise grid is left as measured (on the CPU the
// GELU runs inside the `Matmul*` kernels, so no kernel names match it).
//
// Thread safety: pure functions.
#ifndef TRELLIS_TOOLS_PLAN_KERNEL_COST_CALIBRATE_H_
#define TRELLIS_TOOLS_PLAN_KERNEL_COST_CALIBRATE_H_

#include <string>
#include <vector>

#include "framework/kernel_profile.h"
#include "tools/options/options.h"
#include "tools/plan/kernel_costs.h"
#include "tools/plan/pass_measure.h"

namespace trellis {

// What the step's kernels took (seconds) and what the table says they take.
struct StepCalibration {
  double gemm_measured = 0, gemm_predicted = 0;
  double attention_measured = 0, attention_predicted = 0;
  double adamw_measured = 0, adamw_predicted = 0;
  // The factors applied to the rates (predicted / measured, clamped); 1
  // where the step ran no such kernel.
  double gemm = 1, attention = 1, adamw = 1;
};

// Scales `costs` to one single-rank step of `options` (resolved: dp = tp =
// pp = 1, its microbatches) whose kernels took `kernels`, and returns the
// figures; appends them to costs.source.
StepCalibration CalibrateToStep(const TrainOptions& options,
                                const std::vector<KernelTime>& kernels,
                                KernelCosts& costs);

// The same without a profiled step (the cpu preset): `passes` are the
// measured forward and fused backward of one microbatch of a chunk of
// min(2, n_layer) of `options`' blocks (MeasurePassTimes). The table's
// time for those blocks' GEMMs, attention and element-wise kernels
// against the measured scales all three grids by one factor, returned
// (clamped to [1/4, 4]) and appended to costs.source.
double CalibrateToPasses(const TrainOptions& options, const PassTimes& passes,
                         KernelCosts& costs);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_PLAN_KERNEL_COST_CALIBRATE_H_
