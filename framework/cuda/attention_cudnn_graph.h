// Internal to framework/cuda/: cuDNN operation graphs of causal scaled-dot-
// product attention, built node by node with the backend API, in the form
// cuDNN's fused flash-attention engines recognize (matmul, pointwise and
// reduction nodes; the T×T tensors are virtual and never stored).
//
// Forward, per (b, h), Q, K, V, O as attention_cudnn_layout.h views:
//   S = scale · Q·Kᵀ; S = -inf where column > row (causal, from two
//   GEN_INDEX nodes, CMP_GE and BINARY_SELECT); M = rowmax S;
//   E = exp(S - M); Z = rowsum E; stats = M + log Z (natural log, the
//   (B, H, T) float32 layout trellis saves); O = (E / Z in io type) · V.
// Backward, from dO, O, stats:
//   Di = rowsum(dO ⊙ O) (stored: kSoftmaxSum); P = exp(masked S - stats);
//   dV = Pᵀ·dO; dS = P ⊙ (dO·Vᵀ - Di) · scale; dK = dSᵀ·Q;
//   dQ = dS·K, accumulated in float32 (kDqAccum) and converted to io type.
// Grouped-query attention (Hkv < H): K and V are (B, Hkv, ...) views that
// the products broadcast over each group of H / Hkv query heads; dK and dV
// are formed per query head in virtual (B, H, T, D) tensors and reduced
// (summed) over each group into the (B, Hkv, T, D) outputs, the pattern of
// cuDNN's SDPA backward for fewer key/value heads.
//
// Tensor uids (the variant pack's keys) are the TensorId values; by-value
// scalars (scale, the mask value, one) are passed as host floats.
//
// Thread safety: a builder is used by one thread; the handle must not be used
// by another thread while graphs are built.
#ifndef TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_GRAPH_H_
#define TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_GRAPH_H_

#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "framework/cuda/cudnn_backend.h"

namespace trellis {
namespace cudnn_attention {

enum TensorId : int64_t {
  kQ = 1,
  kKt = 2,  // K read as (B, H, D, T)
  kV = 3,   // forward (B, H, T, D); backward read as (B, H, D, T)
  kO = 4,
  kStats = 5,
  kDO = 6,
  kDQ = 7,
  kDK = 8,
  kDV = 9,
  kDqAccum = 10,     // backward: dQ in float32, (B, H, T, D), workspace
  kSoftmaxSum = 11,  // backward: Di, (B, H, T, 1) float32, workspace
  kScale = 12,       // by value: 1/sqrt(D)
  kMaskValue = 13,   // by value: what masked scores become
  kOne = 14,         // by value: 1
};

struct GraphShape {
  int64_t B, T, H, D;
  cudnnDataType_t io;  // CUDNN_DATA_BFLOAT16 (or CUDNN_DATA_HALF)
  int64_t Hkv = 0;     // key/value heads; 0 means H
  int64_t KvHeads() const { return Hkv > 0 ? Hkv : H; }
};

// The finalized operation graph of the forward or backward pass; Unavailable
// naming the cuDNN call that refused.
// A finalized operation graph with the tensor and operation descriptors it
// was built from. They stay alive as long as the graph: the backend API does
// not promise that a graph holds copies of the descriptors it was given.
struct Graph {
  cudnn_internal::BackendDescriptor graph;
  std::vector<cudnn_internal::BackendDescriptor> parts;
};

absl::StatusOr<Graph> BuildForwardGraph(cudnnHandle_t handle,
                                        const GraphShape& shape);
absl::StatusOr<Graph> BuildBackwardGraph(cudnnHandle_t handle,
                                         const GraphShape& shape);

}  // namespace cudnn_attention
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_ATTENTION_CUDNN_GRAPH_H_
