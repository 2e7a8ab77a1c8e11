// The CUDA twins of framework/kernels/*.h, behind the same calls: each public
// kernel there starts with
//
//   TRELLIS_CUDA_DISPATCH(cuda::Kernel(x, out), &x, &out);
//
// so that when any of its tensors is on a CUDA device it runs the function
// declared here, with the same contract (shapes, forward overwrites, backward
// accumulates) as its CPU twin. In a build without CUDA, kEnabled is false,
// the branch is discarded and these functions are never referenced (but still
// type-checked, so CPU-only builds catch a drifting signature).
//
// Dtypes (every tensor of a call on one CUDA device, else an invariant
// failure names the kernel and the tensors' devices):
//  - activations, weights and gradients: float32 or bfloat16 (DType::kBF16),
//    arithmetic in float32; tensors of one role share a dtype (see each
//    group below);
//  - saved statistics (LayerNorm mean/rstd, RMSNorm rstd, attention row
//    log-sum-exps,
//    cross-entropy row max/sumexp/target logit/losses) and AdamW moments:
//    always float32;
//  - ids and targets: int32.
// float64 tensors have no CUDA kernels (they exist for CPU gradient checks).
//
// Ordering: kernels run on ComputeStream() of the tensors' device and return
// without waiting, except Sum and SumOfSquares, which return host values.
//
// Reproducibility: every kernel but EmbeddingBackwardWeight (atomic adds)
// sums in a fixed order, so repeated calls give bitwise equal results (the
// GEMMs and their epilogues as far as cuBLASLt's chosen algorithm is
// deterministic, which the plan cache keeps fixed per problem).
#ifndef TRELLIS_FRAMEWORK_CUDA_CUDA_KERNELS_H_
#define TRELLIS_FRAMEWORK_CUDA_CUDA_KERNELS_H_

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "framework/kernel_profile.h"
#include "framework/kernels/adamw.h"
#include "framework/kernels/attention_path.h"
#include "framework/kernels/elementwise.h"
#include "framework/kernels/grad_write.h"
#include "framework/kernels/matmul.h"
#include "framework/kernels/router.h"
#include "framework/launch_count.h"
#include "framework/tensor.h"

namespace trellis {
namespace cuda {

#if defined(TRELLIS_WITH_CUDA)
inline constexpr bool kEnabled = true;
#else
inline constexpr bool kEnabled = false;
#endif

// True when any defined tensor lives on a CUDA device.
inline bool AnyOnCuda(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && t->device().is_cuda()) return true;
  }
  return false;
}

// Returns `call` from the enclosing function when any of the tensors (given
// as pointers) is on a CUDA device; a no-op in a build without CUDA.
// It first opens a KernelScope named after the enclosing function, so that
// an active KernelProfiler (framework/kernel_profile.h) times the whole call
// on either backend; it therefore belongs at the top of the function's body.
//
// On the CPU path it then opens `trellis_cpu_launches`, a CpuLaunchScope
// (framework/launch_count.h) that counts the launches the CUDA twin would
// make; a kernel whose count depends on its arguments sets it there.
#define TRELLIS_CUDA_DISPATCH(call, ...)                                \
  ::trellis::KernelScope trellis_kernel_scope(__func__, {__VA_ARGS__}); \
  if constexpr (::trellis::cuda::kEnabled) {                            \
    if (::trellis::cuda::AnyOnCuda({__VA_ARGS__})) return call;         \
  }                                                                     \
  ::trellis::CpuLaunchScope trellis_cpu_launches(__func__)

// ---- Tensor support ----

// Sets every element (any dtype; bfloat16 and float16 round to nearest).
void Fill(Tensor& t, double value);
// dst = src converted, float32 <-> bfloat16 (or a copy when they match).
void Convert(const Tensor& src, Tensor& dst);

// ---- elementwise.h: one dtype (float32 or bfloat16) per call, except that
// BiasBackward's dbias may be float32 for bfloat16 dout ----
void Add(const Tensor& a, const Tensor& b, Tensor& out);
void Axpy(double alpha, const Tensor& x, Tensor& y);
void Scale(Tensor& x, double s);
// ScaleRows: w float32, x float32 or bfloat16.
void ScaleRows(const Tensor& w, Tensor& x);
void AddBias(const Tensor& bias, Tensor& out);
void BiasBackward(const Tensor& dout, Tensor& dbias);
// ColumnSumsMany: dout and x of one dtype per job, mean and rstd float32,
// dw and db float32 or bfloat16; one launch for up to kColumnSumJobs jobs.
void ColumnSumsMany(const std::vector<ColumnSumJob>& jobs);
double SumOfSquares(const Tensor& x);
double SumOfSquares(const std::vector<const Tensor*>& xs);
double Sum(const Tensor& x);

// ---- gelu.h: x, out, dout, dx share a dtype ----
void GeluForward(const Tensor& x, Tensor& out);
void GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx);
void GeluBackwardWrite(const Tensor& x, const Tensor& dout, Tensor& dx);

// ---- adamw.h: param and grad float32 or bfloat16, m and v float32 ----
void AdamWStep(const AdamWHyper& hyper, const Tensor& grad, Tensor& param,
               Tensor& m, Tensor& v);
// One launch per kAdamWTensorsPerLaunch parameters when every entry is
// float32 (refresh copies float32 or bfloat16) on one device; else a loop.
void AdamWStepMany(const AdamWHyper& hyper,
                   const std::vector<AdamWTensors>& params);

// ---- embedding.h: table/wpe and out/x share a dtype; gradient tables
// float32 or bfloat16 for dout of either ----
void EmbeddingForward(const Tensor& ids, const Tensor& table,
                      int64_t vocab_start, Tensor& out);
void EmbeddingBackwardWeight(const Tensor& ids, const Tensor& dout,
                             int64_t vocab_start, Tensor& dtable);
void AddPositionEmbedding(const Tensor& wpe, Tensor& x);
void PositionEmbeddingBackwardWeight(const Tensor& dout, Tensor& dwpe);

// ---- layernorm.h: x, w, b, out, dout, dx share a dtype; dw, db float32
// or bfloat16; mean, rstd float32. AddLayerNormForward: a, b, w, bias, sum,
// out share a dtype (bfloat16 sums are rounded before they are normalized),
// mean, rstd float32 ----
void LayerNormForward(const Tensor& x, const Tensor& w, const Tensor& b,
                      Tensor& out, Tensor& mean, Tensor& rstd);
void AddLayerNormForward(const Tensor& a, const Tensor& b, const Tensor& w,
                         const Tensor& bias, Tensor& sum, Tensor& out,
                         Tensor& mean, Tensor& rstd);
void LayerNormBackwardInput(const Tensor& dout, const Tensor& x,
                            const Tensor& w, const Tensor& mean,
                            const Tensor& rstd, Tensor& dx);
void LayerNormBackwardInputResidual(const Tensor& dout, const Tensor& x,
                                    const Tensor& w, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& residual,
                                    Tensor& dx);
void LayerNormBackwardWeight(const Tensor& dout, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd, Tensor& dw,
                             Tensor& db);

// ---- rmsnorm.h: x, w, out, dout, dx, residual (and a, b, sum) share a
// dtype; dw float32 or bfloat16; rstd float32. One warp per row; the weight
// gradient through the deterministic column sums (two launches) ----
void RmsNormForward(const Tensor& x, const Tensor& w, double eps, Tensor& out,
                    Tensor& rstd);
void AddRmsNormForward(const Tensor& a, const Tensor& b, const Tensor& w,
                       double eps, Tensor& sum, Tensor& out, Tensor& rstd);
void RmsNormBackwardInput(const Tensor& dout, const Tensor& x, const Tensor& w,
                          const Tensor& rstd, Tensor& dx);
void RmsNormBackwardInputResidual(const Tensor& dout, const Tensor& x,
                                  const Tensor& w, const Tensor& rstd,
                                  const Tensor& residual, Tensor& dx);
void RmsNormBackwardWeight(const Tensor& dout, const Tensor& x,
                           const Tensor& rstd, Tensor& dw);

// ---- swiglu.h: gate_up, out, dout, dgate_up share a dtype ----
void SwiGluForward(const Tensor& gate_up, Tensor& out);
void SwiGluBackward(const Tensor& gate_up, const Tensor& dout,
                    Tensor& dgate_up);
void SwiGluBackwardWrite(const Tensor& gate_up, const Tensor& dout,
                         Tensor& dgate_up);

// ---- qk_norm.h: qkv, dqkv, wq, wk, in share a dtype; rstd float32; dw
// float32 or qkv's dtype. One warp per (row, head); the weight gradient
// through the deterministic column sums ----
void QkNormForward(Tensor& qkv, int64_t heads, int64_t kv_heads,
                   const Tensor& wq, const Tensor& wk, double eps, Tensor& in,
                   Tensor& rstd);
void QkNormBackward(Tensor& dqkv, int64_t heads, int64_t kv_heads,
                    const Tensor& in, const Tensor& rstd, const Tensor& wq,
                    const Tensor& wk, Tensor& dw);

// ---- router.h: logits, bias, weight, dweight and dlogits share a dtype
// (float32 or bfloat16, arithmetic in float32); losses float32; index and
// counts int32;
// at most 1024 experts. One warp per token row; the balance losses' sums
// over rows through the deterministic column sums ----
void RouterTopK(const Tensor& logits, const Tensor& bias,
                const RouterSpec& spec, Tensor& index, Tensor& weight);
void RouterTopKBackward(const Tensor& logits, const Tensor& index,
                        const Tensor& weight, const Tensor& dweight,
                        const RouterSpec& spec, Tensor& dlogits);
void RouterLosses(const Tensor& logits, const Tensor& counts,
                  const RouterSpec& spec, Tensor& losses);
void RouterLossesBackward(const Tensor& logits, const Tensor& counts,
                          const RouterSpec& spec, double aux_scale,
                          double z_scale, Tensor& dlogits);

// ---- expert_rows.h: rows float32 or bfloat16 of one dtype; route, index
// and counts int32 (the indices are not range-checked on the device). The
// counting sort in three passes over chunks of 256 slots; every sum in a
// fixed order ----
void RouteByExpert(const Tensor& index, int64_t experts, Tensor& route,
                   Tensor& counts);
void DispatchRows(const Tensor& x, const Tensor& route, Tensor& x_perm);
void DispatchRowsBackward(const Tensor& dx_perm, const Tensor& route,
                          Tensor& dx);
void CombineRows(const Tensor& y_perm, const Tensor& route,
                 const Tensor& weight, Tensor& out);
void CombineRowsBackward(const Tensor& dout, const Tensor& y_perm,
                         const Tensor& route, const Tensor& weight,
                         Tensor& dy_perm, Tensor& dweight);

// ---- rope.h: qkv float32 or bfloat16 (rotated in float32, rounded once);
// cos, sin float32 on the same device ----
void RopeForward(Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                 const Tensor& cos, const Tensor& sin);
void RopeBackward(Tensor& dqkv, int64_t n_head, int64_t n_kv_head,
                  const Tensor& cos, const Tensor& sin);

// ---- matmul.h, through cuBLASLt: x and w (forward), dout and w (backward
// input), dout and x (backward weight) share a dtype; out, dx, dw float32 or
// bfloat16; bias of out's dtype, dbias float32 or bfloat16 (its gradient
// comes from cuBLASLt's BGRADA/BGRADB epilogue into float32 scratch, then
// one add; the two-pass column sums where the epilogue has no algorithm).
// MatmulForwardGelu: as MatmulForward, pre_gelu of out's dtype ----
void MatmulForward(const Tensor& x, const Tensor& w, const Tensor& bias,
                   Tensor& out, WeightLayout layout);
// out = residual + x @ w + bias in one GEMM (residual as C, beta 1);
// residual of out's dtype, distinct from out.
void MatmulForwardResidual(const Tensor& x, const Tensor& w, const Tensor& bias,
                           const Tensor& residual, Tensor& out,
                           WeightLayout layout);
void MatmulBackwardInput(const Tensor& dout, const Tensor& w, Tensor& dx,
                         WeightLayout layout,
                         GradWrite write = GradWrite::kAccumulate);
// dpre = (dout @ w^T) · gelu'(pre_gelu) through cuBLASLt's DGELU epilogue
// (the GEMM then GeluBackwardWrite where it does not apply); pre_gelu and
// dpre of dout's dtype.
void MatmulBackwardInputGelu(const Tensor& dout, const Tensor& w,
                             const Tensor& pre_gelu, Tensor& dpre,
                             WeightLayout layout = WeightLayout::kInOut);
void MatmulBackwardWeight(const Tensor& dout, const Tensor& x, Tensor& dw,
                          Tensor& dbias, WeightLayout layout);
// out (N, M) = gelu(x @ w + bias), fused in the GEMM's epilogue;
// pre_gelu (N, M), of out's dtype, receives x @ w + bias for the backward.
// cuBLASLt's GELU is the tanh approximation, as GeluForward's. bias may be
// undefined.
void MatmulForwardGelu(const Tensor& x, const Tensor& w, const Tensor& bias,
                       Tensor& pre_gelu, Tensor& out,
                       WeightLayout layout = WeightLayout::kInOut);

// ---- cross_entropy.h: logits and dlogits share a dtype; row statistics,
// target logits and losses float32 ----
void CrossEntropyRowMax(const Tensor& logits, int64_t valid, Tensor& row_max);
void CrossEntropyRowSumExp(const Tensor& logits, int64_t valid,
                           const Tensor& row_max, Tensor& sumexp);
void CrossEntropyTargetLogit(const Tensor& logits, const Tensor& targets,
                             int64_t vocab_start, int64_t valid,
                             Tensor& target_logit);
void CrossEntropyLoss(const Tensor& row_max, const Tensor& sumexp,
                      const Tensor& target_logit, Tensor& losses);
void CrossEntropyBackward(const Tensor& logits, const Tensor& targets,
                          int64_t vocab_start, int64_t valid,
                          const Tensor& row_max, const Tensor& sumexp,
                          double scale, Tensor& dlogits);
// row_weights (optional) and losses float32; dlogits optional.
void CrossEntropyFused(const Tensor& logits, const Tensor& targets,
                       int64_t valid, const Tensor& row_weights, double scale,
                       Tensor& losses, Tensor& dlogits);

// ---- attention.h: qkv, out, dout, dqkv share a dtype; saved is the row
// log-sum-exps (B, H, T), float32. Head width at most 128. `path` as in
// attention_path.h; every path takes grouped-query calls (n_kv_head <
// n_head) ----
void AttentionForward(const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                      Tensor& out, Tensor& saved, AttentionPath path);
void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                       const Tensor& saved, int64_t n_head, int64_t n_kv_head,
                       Tensor& dqkv, AttentionPath path, GradWrite write);

}  // namespace cuda
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CUDA_KERNELS_H_
