#include "framework/cuda/cudnn_backend.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "framework/cuda/cuda_check.h"

namespace trellis {
namespace cudnn_internal {
namespace {

// The status string, with cuDNN's own last message when it left one.
std::string Message(cudnnStatus_t status) {
  std::string message = cudnnGetErrorString(status);
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  if (last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  return message;
}

}  // namespace

absl::Status StatusOf(cudnnStatus_t status, const char* call, const char* file,
                      int line) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "cuDNN: ", call, " failed at ", file, ":", line, ": ", Message(status)));
}

void CheckOrDie(cudnnStatus_t status, const char* call, const char* file,
                int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  internal::DeviceCallFailure("cuDNN", call, file, line,
                              Message(status).c_str());
}

absl::StatusOr<BackendDescriptor> BackendDescriptor::Create(
    cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t desc = nullptr;
  absl::Status status =
      TRELLIS_CUDNN_STATUS(cudnnBackendCreateDescriptor(type, &desc));
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat(status.message(), " [descriptor type ", type, "]"));
  }
  return BackendDescriptor(desc);
}

BackendDescriptor::~BackendDescriptor() {
  if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
}

BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept
    : desc_(std::exchange(other.desc_, nullptr)) {}

BackendDescriptor& BackendDescriptor::operator=(
    BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (desc_ != nullptr) cudnnBackendDestroyDescriptor(desc_);
    desc_ = std::exchange(other.desc_, nullptr);
  }
  return *this;
}

absl::Status BackendDescriptor::Set(cudnnBackendAttributeName_t name,
                                    cudnnBackendAttributeType_t type,
                                    int64_t count, const void* values) {
  absl::Status status = TRELLIS_CUDNN_STATUS(
      cudnnBackendSetAttribute(desc_, name, type, count, values));
  if (status.ok()) return status;
  return absl::UnavailableError(
      absl::StrCat(status.message(), " [attribute ", name, "]"));
}

absl::Status BackendDescriptor::SetInt64(cudnnBackendAttributeName_t name,
                                         int64_t value) {
  return Set(name, CUDNN_TYPE_INT64, 1, &value);
}

absl::Status BackendDescriptor::SetInt64s(cudnnBackendAttributeName_t name,
                                          const std::vector<int64_t>& values) {
  return Set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()),
             values.data());
}

absl::Status BackendDescriptor::SetDataType(cudnnBackendAttributeName_t name,
                                            cudnnDataType_t value) {
  return Set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

absl::Status BackendDescriptor::SetBool(cudnnBackendAttributeName_t name,
                                        bool value) {
  return Set(name, CUDNN_TYPE_BOOLEAN, 1, &value);
}

absl::Status BackendDescriptor::SetDescriptor(cudnnBackendAttributeName_t name,
                                              const BackendDescriptor& value) {
  cudnnBackendDescriptor_t raw = value.get();
  return Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

absl::Status BackendDescriptor::SetDescriptors(
    cudnnBackendAttributeName_t name,
    const std::vector<cudnnBackendDescriptor_t>& v) {
  return Set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             static_cast<int64_t>(v.size()), v.data());
}

absl::Status BackendDescriptor::SetHandle(cudnnBackendAttributeName_t name,
                                          cudnnHandle_t handle) {
  return Set(name, CUDNN_TYPE_HANDLE, 1, &handle);
}

absl::Status BackendDescriptor::Finalize() {
  return TRELLIS_CUDNN_STATUS(cudnnBackendFinalize(desc_));
}

}  // namespace cudnn_internal
}  // namespace trellis
