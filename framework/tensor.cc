#include "framework/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_join.h"
#include "framework/cuda/cuda_kernels.h"
#include "framework/device_memory.h"
#include "framework/memory_arena.h"

namespace trellis {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
    case DType::kU32:
      return 4;
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kBF16:
    case DType::kF16:
    case DType::kU16:
      return 2;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF64:
      return "float64";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU16:
      return "uint16";
    case DType::kU32:
      return "uint32";
  }
  return "?";
}

std::string DeviceName(Device device) {
  return device.is_cpu() ? "cpu" : absl::StrCat("cuda:", device.index);
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

Storage::Storage(void* data, size_t bytes, Device device, bool owned,
                 bool counted, std::shared_ptr<void> owner)
    : data_(data),
      bytes_(bytes),
      device_(device),
      owned_(owned),
      counted_(counted),
      owner_(std::move(owner)) {}

namespace {

struct StorageCounters {
  std::atomic<size_t> live{0};
  std::atomic<size_t> peak{0};
};

StorageCounters& CountersFor(DeviceType type) {
  static StorageCounters counters[2];
  return counters[type == DeviceType::kCPU ? 0 : 1];
}

}  // namespace

size_t StorageBytesLive(DeviceType type) { return CountersFor(type).live; }
size_t StorageBytesPeak(DeviceType type) { return CountersFor(type).peak; }
void ResetStorageBytesPeak(DeviceType type) {
  StorageCounters& counters = CountersFor(type);
  counters.peak = counters.live.load();
}

Storage::~Storage() {
  if (owned_) DeviceFree(data_, device_);
  if (counted_) CountersFor(device_.type).live -= bytes_;
  // An arena block in owner_ returns to its arena after this.
}

std::shared_ptr<Storage> Storage::Allocate(size_t bytes, Device device) {
  std::shared_ptr<void> block;
  void* data = AllocateFromScopedArena(bytes, device, &block);
  const bool owned = data == nullptr;
  if (owned) data = DeviceAllocate(bytes, device);
  StorageCounters& counters = CountersFor(device.type);
  const size_t live = counters.live += bytes;
  size_t peak = counters.peak;
  while (live > peak && !counters.peak.compare_exchange_weak(peak, live)) {
  }
  return std::shared_ptr<Storage>(new Storage(
      data, bytes, device, owned, /*counted=*/true, std::move(block)));
}

std::shared_ptr<Storage> Storage::Borrow(void* data, size_t bytes,
                                         Device device,
                                         std::shared_ptr<void> owner) {
  return std::shared_ptr<Storage>(
      new Storage(data, bytes, device, /*owned=*/false, /*counted=*/false,
                  std::move(owner)));
}

Tensor Tensor::Empty(Shape shape, DType dtype, Device device) {
  for (int64_t d : shape) TRELLIS_CHECK_GE(d, 0);
  const size_t bytes = NumElements(shape) * DTypeSize(dtype);
  return FromStorage(Storage::Allocate(bytes, device), 0, std::move(shape),
                     dtype);
}

Tensor Tensor::Zeros(Shape shape, DType dtype, Device device) {
  Tensor t = Empty(std::move(shape), dtype, device);
  t.Zero();
  return t;
}

Tensor Tensor::FromStorage(std::shared_ptr<Storage> storage, size_t byte_offset,
                           Shape shape, DType dtype) {
  Tensor t;
  t.numel_ = NumElements(shape);
  TRELLIS_CHECK_LE(byte_offset + t.numel_ * DTypeSize(dtype), storage->bytes());
  t.storage_ = std::move(storage);
  t.byte_offset_ = byte_offset;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  if (i < 0) i += n;
  TRELLIS_CHECK(i >= 0 && i < n)
      << "dim " << i << " of " << ShapeString(shape_);
  return shape_[i];
}

Tensor Tensor::View(Shape shape) const {
  TRELLIS_CHECK_EQ(NumElements(shape), numel_)
      << "view " << ShapeString(shape) << " of " << ShapeString(shape_);
  return FromStorage(storage_, byte_offset_, std::move(shape), dtype_);
}

Tensor Tensor::Narrow(int64_t start, int64_t length) const {
  TRELLIS_CHECK_GE(ndim(), 1);
  TRELLIS_CHECK(start >= 0 && length >= 0 && start + length <= shape_[0])
      << "narrow [" << start << ", " << start + length << ") of "
      << ShapeString(shape_);
  Shape shape = shape_;
  shape[0] = length;
  const int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  return FromStorage(storage_, byte_offset_ + start * row * DTypeSize(dtype_),
                     std::move(shape), dtype_);
}

void Tensor::CopyFrom(const Tensor& source) {
  TRELLIS_CHECK_EQ(numel_, source.numel_);
  TRELLIS_CHECK(dtype_ == source.dtype_)
      << DTypeName(dtype_) << " vs " << DTypeName(source.dtype_);
  DeviceCopy(raw(), device(), source.raw(), source.device(), nbytes());
}

Tensor Tensor::Clone() const { return To(device()); }

Tensor Tensor::To(Device device) const {
  Tensor t = Empty(shape_, dtype_, device);
  t.CopyFrom(*this);
  return t;
}

void Tensor::Zero() {
  if (numel_ > 0) DeviceMemset(raw(), device(), 0, nbytes());
}

namespace {

template <typename T>
void FillTyped(void* data, int64_t n, double value) {
  std::fill_n(static_cast<T*>(data), n, static_cast<T>(value));
}

}  // namespace

void Tensor::Fill(double value) {
  if constexpr (cuda::kEnabled) {
    if (device().is_cuda()) return cuda::Fill(*this, value);
  }
  TRELLIS_CHECK(device().is_cpu()) << "Fill runs on CPU tensors";
  switch (dtype_) {
    case DType::kF32:
      return FillTyped<float>(raw(), numel_, value);
    case DType::kF64:
      return FillTyped<double>(raw(), numel_, value);
    case DType::kI32:
      return FillTyped<int32_t>(raw(), numel_, value);
    case DType::kI64:
      return FillTyped<int64_t>(raw(), numel_, value);
    case DType::kU16:
      return FillTyped<uint16_t>(raw(), numel_, value);
    case DType::kU32:
      return FillTyped<uint32_t>(raw(), numel_, value);
    default:
      TRELLIS_CHECK(false) << "Fill does not support " << DTypeName(dtype_);
  }
}

std::string Tensor::DebugString() const {
  if (!defined()) return "Tensor(undefined)";
  return absl::StrCat("Tensor(", ShapeString(shape_), ", ", DTypeName(dtype_),
                      ", ", DeviceName(device()), ")");
}

double MaxRelativeDifference(const Tensor& a, const Tensor& b, double floor) {
  TRELLIS_CHECK_EQ(a.numel(), b.numel());
  TRELLIS_CHECK(a.device().is_cpu() && b.device().is_cpu());
  auto value = [](const Tensor& t, int64_t i) -> double {
    return t.dtype() == DType::kF64 ? t.data<double>()[i] : t.data<float>()[i];
  };
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = value(a, i), y = value(b, i);
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), floor));
  }
  return worst;
}

}  // namespace trellis
