// Internal to framework/cuda/: a small RAII layer over cuDNN's backend
// (graph) C API, and the check macros for its calls.
//
//   TRELLIS_CUDNN_CHECK(call)   aborts on failure: "cuDNN error: <call> failed
//                               at <file>:<line> (<rank>): <status> (<cuDNN's
//                               last message>)". For execution, where a
//                               failure is a broken invariant or device.
//   TRELLIS_CUDNN_STATUS(call)  the same text as an absl::Status
//                               (Unavailable) instead, for building graphs and
//                               plans, where "not supported" is an answer the
//                               caller acts on (falls back to other kernels).
//
// BackendDescriptor owns one cudnnBackendDescriptor_t; its setters return the
// status of cudnnBackendSetAttribute with the attribute named.
//
// Thread safety: a descriptor is used by one thread at a time.
#ifndef TRELLIS_FRAMEWORK_CUDA_CUDNN_BACKEND_H_
#define TRELLIS_FRAMEWORK_CUDA_CUDNN_BACKEND_H_

#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trellis {
namespace cudnn_internal {

// OK for CUDNN_STATUS_SUCCESS, else Unavailable naming the call, the status
// string, cuDNN's last error message and file:line.
absl::Status StatusOf(cudnnStatus_t status, const char* call, const char* file,
                      int line);

// Aborts through internal::DeviceCallFailure when status is not success.
void CheckOrDie(cudnnStatus_t status, const char* call, const char* file,
                int line);

}  // namespace cudnn_internal

#define TRELLIS_CUDNN_STATUS(call) \
  ::trellis::cudnn_internal::StatusOf((call), #call, __FILE__, __LINE__)
#define TRELLIS_CUDNN_CHECK(call) \
  ::trellis::cudnn_internal::CheckOrDie((call), #call, __FILE__, __LINE__)

namespace cudnn_internal {

class BackendDescriptor {
 public:
  BackendDescriptor() = default;
  // A new descriptor of `type`; Unavailable when cuDNN refuses.
  static absl::StatusOr<BackendDescriptor> Create(
      cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

  // cudnnBackendSetAttribute(get(), name, type, count, values).
  absl::Status Set(cudnnBackendAttributeName_t name,
                   cudnnBackendAttributeType_t type, int64_t count,
                   const void* values);
  absl::Status SetInt64(cudnnBackendAttributeName_t name, int64_t value);
  absl::Status SetInt64s(cudnnBackendAttributeName_t name,
                         const std::vector<int64_t>& values);
  absl::Status SetDataType(cudnnBackendAttributeName_t name,
                           cudnnDataType_t value);
  absl::Status SetBool(cudnnBackendAttributeName_t name, bool value);
  absl::Status SetDescriptor(cudnnBackendAttributeName_t name,
                             const BackendDescriptor& value);
  absl::Status SetDescriptors(cudnnBackendAttributeName_t name,
                              const std::vector<cudnnBackendDescriptor_t>& v);
  absl::Status SetHandle(cudnnBackendAttributeName_t name,
                         cudnnHandle_t handle);
  absl::Status Finalize();

 private:
  explicit BackendDescriptor(cudnnBackendDescriptor_t desc) : desc_(desc) {}
  cudnnBackendDescriptor_t desc_ = nullptr;
};

}  // namespace cudnn_internal
}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_CUDA_CUDNN_BACKEND_H_
