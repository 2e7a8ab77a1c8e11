// Which implementation runs causal attention on a CUDA device.
//
//   kCudnn  cuDNN's fused flash attention (framework/cuda/attention_cudnn.*),
//           bfloat16 only; where no execution plan builds for a call (float32,
//           an unsupported shape, alignment or device, a cuDNN older than
//           9.6), the call runs on kMma instead and one line naming why is
//           printed once per reason.
//   kMma    the tensor-core kernels (attention_mma.cu): bfloat16, head width
//           32, 64 or 128, compute capability 8.0+; other calls run on kSimt.
//   kSimt   the float32 CUDA-core kernels (attention.cu): every call.
//
// CPU calls take the path argument and ignore it. Every path saves the same
// row log-sum-exps (natural log, (B, H, T), float32), so a forward on one
// path and a backward on another agree.
//
// Thread safety: the functions here are pure.
#ifndef TRELLIS_FRAMEWORK_KERNELS_ATTENTION_PATH_H_
#define TRELLIS_FRAMEWORK_KERNELS_ATTENTION_PATH_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace trellis {

enum class AttentionPath : uint8_t { kCudnn, kMma, kSimt };

// The default: cuDNN where a plan builds, else the tensor-core kernels.
inline constexpr AttentionPath kDefaultAttentionPath = AttentionPath::kCudnn;

// "cudnn", "mma" or "simt".
std::string_view AttentionPathName(AttentionPath path);

// The inverse of AttentionPathName; InvalidArgument naming the choices for
// anything else.
absl::StatusOr<AttentionPath> ParseAttentionPath(std::string_view name);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_ATTENTION_PATH_H_
