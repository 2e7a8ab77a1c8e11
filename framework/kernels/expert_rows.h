// Moving token rows to their experts and back: the permutation that makes
// each expert's tokens one contiguous block (so that an expert is one GEMM
// over its rows) and the weighted sum that brings the experts' outputs home.
//
// Token t's j-th choice (RouterTopK's index[t, j]) is slot s = t·k + j. The
// route puts the slots in expert order, each expert's slots in slot order
// (a stable counting sort): route[s] is slot s's row in that order, and
// expert e's rows are [offset_e, offset_e + counts[e]), offset_e = Σ_{e'<e}
// counts[e']. Every token reaches each of its k experts: nothing is dropped.
//
//   DispatchRows:  x_perm[route[t·k + j]] = x[t]
//   CombineRows:   out[t] = Σ_j weight[t, j] · y_perm[route[t·k + j]]
//
// Gradient rule: the backward functions OVERWRITE their outputs. Rows of
// one dtype: float32 or float64 on the CPU, float32 or bfloat16 on CUDA
// (framework/cuda/expert_rows.cu; indices not range-checked there); route,
// index and counts int32. Thread safety: as every kernel.
#ifndef TRELLIS_FRAMEWORK_KERNELS_EXPERT_ROWS_H_
#define TRELLIS_FRAMEWORK_KERNELS_EXPERT_ROWS_H_

#include <cstdint>
#include <vector>

#include "framework/tensor.h"

namespace trellis {

// route (N·k) and counts (E) from index (N, k) over `experts` experts.
// REQUIRES: every index in [0, experts).
void RouteByExpert(const Tensor& index, int64_t experts, Tensor& route,
                   Tensor& counts);
// The counts (E), read to the host.
std::vector<int64_t> ExpertCounts(const Tensor& counts);

// x_perm (N·k, C) from x (N, C).
void DispatchRows(const Tensor& x, const Tensor& route, Tensor& x_perm);
// dx (N, C) = Σ_j dx_perm[route[t·k + j]]. OVERWRITES dx.
void DispatchRowsBackward(const Tensor& dx_perm, const Tensor& route,
                          Tensor& dx);
// out (N, C) from y_perm (N·k, C) and weight (N, k).
void CombineRows(const Tensor& y_perm, const Tensor& route,
                 const Tensor& weight, Tensor& out);
// dy_perm[route[t·k + j]] = weight[t, j] · dout[t] and dweight[t, j] =
// dout[t] · y_perm[route[t·k + j]]. OVERWRITES dy_perm and dweight.
void CombineRowsBackward(const Tensor& dout, const Tensor& y_perm,
                         const Tensor& route, const Tensor& weight,
                         Tensor& dy_perm, Tensor& dweight);

namespace kernels_internal {
// The checks both backends run, one per kernel, each returning (N, k, C):
// a route (N·k) int32 against token rows `x` (N, C) and permuted rows
// `perm` (N·k, C) of one dtype (DispatchRows and its backward); with the
// weight (N, k) (CombineRows), and the gradients dy_perm as y_perm and
// dweight as weight (CombineRowsBackward); and RouteByExpert's operands.
struct ExpertRowDims {
  int64_t n, k, c;
};
ExpertRowDims CheckExpertRows(const char* kernel, const Tensor& x,
                              const Tensor& route, const Tensor& perm);
ExpertRowDims CheckCombineRows(const char* kernel, const Tensor& y_perm,
                               const Tensor& route, const Tensor& weight,
                               const Tensor& out);
ExpertRowDims CheckCombineRowsBackward(const char* kernel, const Tensor& dout,
                                       const Tensor& y_perm,
                                       const Tensor& route,
                                       const Tensor& weight,
                                       const Tensor& dy_perm,
                                       const Tensor& dweight);
void CheckExpertRoute(const char* kernel, const Tensor& index, int64_t experts,
                      const Tensor& route, const Tensor& counts);
}  // namespace kernels_internal

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_EXPERT_ROWS_H_
