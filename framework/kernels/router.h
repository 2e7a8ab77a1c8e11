// The router of a mixture-of-experts layer: which k of E experts each token
// goes to, with what weight, and the losses that keep the experts evenly
// loaded.
//
//   scores s (N, E) = softmax(logits) (Mixtral, Qwen3-MoE) or
//                     sigmoid(logits) (DeepSeek-V3)
//   index  (N, k)   = the k largest of s + bias, ties to the lower expert
//                     index (bias: DeepSeek-V3's per-expert selection bias;
//                     it moves the choice only, never a weight)
//   weight (N, k)   = s at those experts, divided by their sum when
//                     `normalize` (softmax normalized is the softmax over
//                     the chosen logits)
//
// Balance losses, over the N rows of one call (a microbatch's tokens):
//   aux = E · Σ_e f_e · P_e  (Switch Transformer / GShard), f_e = count_e /
//         (N·k) the share of routed slots expert e received (not
//         differentiated), P_e the mean over rows of p_e, p = s for softmax
//         and s / Σ_e s for sigmoid;
//   z   = mean over rows of logsumexp(logits)² (ST-MoE's router z-loss).
//
// Gradient rule: RouterTopKBackward OVERWRITES dlogits (it starts the
// router's chain); RouterLossesBackward ACCUMULATES into it. Logits, bias,
// weight and dlogits of one dtype: float32 or float64 on the CPU, float32
// or bfloat16 on CUDA (at most 1024 experts there; framework/cuda/
// router.cu); losses of that dtype on the CPU, float32 on CUDA; index and
// counts int32. Thread safety: as every kernel.
#ifndef TRELLIS_FRAMEWORK_KERNELS_ROUTER_H_
#define TRELLIS_FRAMEWORK_KERNELS_ROUTER_H_

#include <cstdint>

#include "framework/tensor.h"

namespace trellis {

enum class RouterScore { kSoftmax, kSigmoid };

// The most experts the CUDA router takes (one warp per token row, the
// row's scores in shared memory).
inline constexpr int64_t kMaxCudaRouterExperts = 1024;

struct RouterSpec {
  int64_t top_k = 1;  // 1 <= top_k <= E
  RouterScore score = RouterScore::kSoftmax;
  bool normalize = true;  // divide the chosen scores by their sum
};

// index (N, k) and weight (N, k) from logits (N, E) and bias (E) or
// undefined.
void RouterTopK(const Tensor& logits, const Tensor& bias,
                const RouterSpec& spec, Tensor& index, Tensor& weight);
// dlogits (N, E) = d(Σ dweight · weight)/d(logits), given RouterTopK's
// index and weight. OVERWRITES dlogits.
void RouterTopKBackward(const Tensor& logits, const Tensor& index,
                        const Tensor& weight, const Tensor& dweight,
                        const RouterSpec& spec, Tensor& dlogits);

// losses (2) = [aux, z] over logits (N, E), counts (E) the slots each
// expert received (RouteByExpert, expert_rows.h).
void RouterLosses(const Tensor& logits, const Tensor& counts,
                  const RouterSpec& spec, Tensor& losses);
// dlogits (N, E) += aux_scale · d(aux)/d(logits) + z_scale · d(z)/d(logits).
void RouterLossesBackward(const Tensor& logits, const Tensor& counts,
                          const RouterSpec& spec, double aux_scale,
                          double z_scale, Tensor& dlogits);

namespace kernels_internal {
// The shape checks both backends run, one per kernel (dtypes are each
// backend's own); each returns (N, E) of logits (N, E). index (N, k)
// int32, weight and dweight (N, k), bias (E) or undefined, counts (E)
// int32, losses (2), dlogits as logits.
struct RouterDims {
  int64_t n, e;
};
RouterDims CheckRouterTopK(const char* kernel, const Tensor& logits,
                           const Tensor& bias, const RouterSpec& spec,
                           const Tensor& index, const Tensor& weight);
RouterDims CheckRouterTopKBackward(const char* kernel, const Tensor& logits,
                                   const Tensor& index, const Tensor& weight,
                                   const Tensor& dweight,
                                   const RouterSpec& spec,
                                   const Tensor& dlogits);
RouterDims CheckRouterLosses(const char* kernel, const Tensor& logits,
                             const Tensor& counts, const RouterSpec& spec,
                             const Tensor& losses);
RouterDims CheckRouterLossesBackward(const char* kernel, const Tensor& logits,
                                     const Tensor& counts,
                                     const RouterSpec& spec,
                                     const Tensor& dlogits);
}  // namespace kernels_internal

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ROUTER_H_
