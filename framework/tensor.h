// Tensor: a dense, contiguous, row-major array on one device.
//
// A Tensor is a cheap handle (shape, dtype, device, shared storage and a byte
// offset into it). Copies of a handle share the storage; `Clone` copies the
// data. Views (`View`, `Narrow`) share storage too. Tensors are always
// contiguous: every view is a contiguous range of its storage.
//
// Thread safety: handles may be copied across threads; writing the same
// elements from two threads at once is the caller's race.
#ifndef TRELLIS_FRAMEWORK_TENSOR_H_
#define TRELLIS_FRAMEWORK_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framework/status.h"

namespace trellis {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kU16, kU32 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device&) const = default;
  static Device Cpu() { return Device{}; }
  static Device Cuda(int index) { return Device{DeviceType::kCUDA, index}; }
};
std::string DeviceName(Device device);

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);

// Bytes on one device. Either owned (freed with the last handle) or borrowed
// from an arena that outlives it.
class Storage {
 public:
  // From the arena in scope for `device` (framework/memory_arena.h) when
  // there is one with room, else from the device allocator.
  static std::shared_ptr<Storage> Allocate(size_t bytes, Device device);
  // Wraps memory owned elsewhere; `owner` (may be null) is kept alive.
  static std::shared_ptr<Storage> Borrow(void* data, size_t bytes,
                                         Device device,
                                         std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t bytes, Device device, bool owned, bool counted,
          std::shared_ptr<void> owner);
  void* data_;
  size_t bytes_;
  Device device_;
  bool owned_;    // freed through the device allocator
  bool counted_;  // in StorageBytesLive

  std::shared_ptr<void> owner_;
};

// Bytes of tensor storage this process holds on devices of `type` now, and
// the most it has held at once (allocations through Storage::Allocate, e.g.
// Tensor::Empty, whether an arena served them or not; borrowed memory is not
// counted).
size_t StorageBytesLive(DeviceType type);
size_t StorageBytesPeak(DeviceType type);
// Sets the peak of `type` to its live bytes.
void ResetStorageBytesPeak(DeviceType type);

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kF32;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kF64;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType DTypeOf<uint16_t>() {
  return DType::kU16;
}
template <>
constexpr DType DTypeOf<uint32_t>() {
  return DType::kU32;
}

class Tensor {
 public:
  Tensor() = default;  // An undefined tensor: `defined()` is false.

  // Uninitialized memory.
  static Tensor Empty(Shape shape, DType dtype, Device device = Device::Cpu());
  static Tensor Zeros(Shape shape, DType dtype, Device device = Device::Cpu());
  // Wraps `storage` from `byte_offset`; REQUIRES: it fits.
  static Tensor FromStorage(std::shared_ptr<Storage> storage,
                            size_t byte_offset, Shape shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Negative `i` counts from the back.
  int64_t dim(int i) const;
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return numel_ * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device{}; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t byte_offset() const { return byte_offset_; }

  void* raw() const {
    return static_cast<char*>(storage_->data()) + byte_offset_;
  }
  // REQUIRES: dtype() == DTypeOf<T>().
  template <typename T>
  T* data() const {
    TRELLIS_CHECK(dtype_ == DTypeOf<T>())
        << "tensor is " << DTypeName(dtype_) << ", not "
        << DTypeName(DTypeOf<T>());
    return static_cast<T*>(raw());
  }

  // Same storage, new shape with the same element count.
  Tensor View(Shape shape) const;
  // Rows [start, start + length) along dimension 0.
  Tensor Narrow(int64_t start, int64_t length) const;

  // Copies the data (any device to any device, same dtype and numel).
  void CopyFrom(const Tensor& source);
  Tensor Clone() const;
  Tensor To(Device device) const;
  void Zero();
  // Sets every element (floating and integer dtypes) to `value`.
  void Fill(double value);

  std::string DebugString() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

// Elementwise comparison helpers for tests and checks (CPU float tensors).
// Returns the largest |a - b| / max(|b|, floor).
double MaxRelativeDifference(const Tensor& a, const Tensor& b,
                             double floor = 1e-6);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_TENSOR_H_
