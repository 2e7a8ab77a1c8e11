// Internal to framework/cuda/*.cc: the device and dtype checks the
// Tensor-level CUDA kernels run before launching, and the device guard they
// launch under.
#ifndef TRELLIS_FRAMEWORK_CUDA_TENSOR_CHECKS_H_
#define TRELLIS_FRAMEWORK_CUDA_TENSOR_CHECKS_H_

#include <initializer_list>

#include "framework/cuda/cuda_launch.h"
#include "framework/status.h"
#include "framework/tensor.h"

namespace trellis {
namespace cuda_internal {

// Checks that every defined tensor is on one CUDA device and returns its
// index.
inline int CommonDevice(const char* kernel,
                        std::initializer_list<const Tensor*> tensors) {
  int device = -1;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    TRELLIS_CHECK(t->device().is_cuda())
        << kernel << ": a tensor on " << DeviceName(t->device())
        << " among CUDA tensors; move every operand to one device";
    if (device < 0) device = t->device().index;
    TRELLIS_CHECK_EQ(t->device().index, device)
        << kernel << ": tensors on cuda:" << device
        << " and cuda:" << t->device().index;
  }
  TRELLIS_CHECK_GE(device, 0) << kernel << ": no CUDA tensor ";
  return device;
}

// The launch element type of a float32 or bfloat16 tensor.
inline cuda_launch::Elem ElemOf(const char* kernel, const Tensor& t) {
  TRELLIS_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16)
      << kernel << " has no CUDA kernel for " << DTypeName(t.dtype())
      << " tensors (float32 or bfloat16)";
  return t.dtype() == DType::kF32 ? cuda_launch::Elem::kF32
                                  : cuda_launch::Elem::kBF16;
}

// Fails unless every defined tensor has `dtype`.
inline void RequireDType(const char* kernel, DType dtype,
                         std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    TRELLIS_CHECK(t->dtype() == dtype)
        << kernel << ": " << DTypeName(t->dtype()) << " tensor, expected "
        << DTypeName(dtype);
  }
}

// The row count of x (..., C): numel / C, 0 when C is.
inline int64_t Rows(const Tensor& x) {
  const int64_t C = x.ndim() == 0 ? 1 : x.dim(-1);
  return C == 0 ? 0 : x.numel() / C;
}

}  // namespace cuda_internal
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_TENSOR_CHECKS_H_
