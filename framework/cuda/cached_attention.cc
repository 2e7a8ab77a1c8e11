// The tensor-level CUDA CachedAttentionForward: checks devices and dtypes
// (the CPU entry point checked the shapes), makes the tensors' device
// current and launches.
#include "framework/cuda/cached_attention_cuda.h"
#include "framework/cuda/cached_attention_launch.h"
#include "framework/cuda/cuda_device.h"
#include "framework/cuda/tensor_checks.h"

namespace trellis {
namespace cuda {

void CachedAttentionForward(const Tensor& qkv, int64_t n_head,
                            int64_t n_kv_head, int64_t start, Tensor& k_cache,
                            Tensor& v_cache, Tensor& out) {
  const char* kernel = "CachedAttentionForward";
  CudaDeviceGuard guard(
      cuda_internal::CommonDevice(kernel, {&qkv, &k_cache, &v_cache, &out}));
  cuda_internal::RequireDType(kernel, qkv.dtype(), {&k_cache, &v_cache, &out});
  const int64_t n = qkv.dim(0);
  const int64_t d = qkv.dim(1) / (n_head + 2 * n_kv_head);
  TRELLIS_CHECK_LE(d, cuda_launch::kMaxCachedAttentionHeadDim)
      << kernel << ": head size " << d;
  TRELLIS_CHECK_LE(start + n, cuda_launch::kMaxCachedAttentionKeys)
      << kernel << ": a context of " << start + n
      << " tokens exceeds the CUDA kernel's "
      << cuda_launch::kMaxCachedAttentionKeys;
  cuda_launch::CachedAttention(cuda_internal::ElemOf(kernel, qkv), qkv.raw(), n,
                               n_head, n_kv_head, d, start, k_cache.raw(),
                               v_cache.raw(), out.raw());
}

}  // namespace cuda
}  // namespace trellis
