#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "framework/hdf5.h"
#include "framework/hdf5_internal.h"

namespace trellis::hdf5 {

using namespace internal;  // NOLINT: the wrapper's own helpers

// ---------------------------------------------------------------- Dataset

Dataset::Dataset(Handle handle, std::string file_name, std::string path)
    : Object(std::move(handle), std::move(file_name), std::move(path)) {
  if (!valid()) return;
  Dataspace space(Handle(H5Dget_space(id()), H5Sclose));
  Handle type(H5Dget_type(id()), H5Tclose);
  if (!space.valid() || !type.valid()) return;
  shape_ = space.dims();
  const Shape max_dims = space.max_dims();
  extendable_ = !max_dims.empty() && max_dims[0] < 0;
  stored_type_ = Classify(type.id(), stored_type_name_);
}

absl::Status Dataset::Transfer(bool write, const Shape& start,
                               const Shape& count, DType dtype,
                               void* memory) const {
  Quiet();
  const std::string operation =
      absl::StrCat(write ? "write of " : "read of ", SliceString(start, count));
  if (start.size() != shape_.size() || count.size() != shape_.size()) {
    return Error(absl::StatusCode::kInvalidArgument, operation,
                 absl::StrCat("the dataset has ", shape_.size(),
                              " dimensions, the slice ", start.size(), " and ",
                              count.size()));
  }
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (start[i] < 0 || count[i] < 0 || start[i] + count[i] > shape_[i]) {
      return Error(
          absl::StatusCode::kOutOfRange, operation,
          absl::StrCat("outside the dataset's shape ", ShapeString(shape_)));
    }
  }
  if (dtype == DType::kBF16 && stored_type_ != StoredType::kU16) {
    return Error(absl::StatusCode::kInvalidArgument, operation,
                 absl::StrCat("bfloat16 needs a uint16 dataset, this one is ",
                              stored_type_name_));
  }
  if (NumElements(count) == 0) return absl::OkStatus();
  Dataspace file_space(Handle(H5Dget_space(id()), H5Sclose));
  std::vector<hsize_t> offset(start.begin(), start.end());
  std::vector<hsize_t> extent(count.begin(), count.end());
  if (!file_space.valid() ||
      H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, offset.data(),
                          nullptr, extent.data(), nullptr) < 0) {
    return Error(absl::StatusCode::kUnknown, operation);
  }
  Dataspace memory_space = Dataspace::Simple(count, count);
  const herr_t result =
      write ? H5Dwrite(id(), MemoryType(dtype), memory_space.id(),
                       file_space.id(), H5P_DEFAULT, memory)
            : H5Dread(id(), MemoryType(dtype), memory_space.id(),
                      file_space.id(), H5P_DEFAULT, memory);
  if (result < 0) return Error(absl::StatusCode::kDataLoss, operation);
  return absl::OkStatus();
}

absl::Status Dataset::Read(const Shape& start, const Shape& count, DType dtype,
                           void* out) const {
  return Transfer(false, start, count, dtype, out);
}

absl::Status Dataset::Write(const Shape& start, const Shape& count, DType dtype,
                            const void* data) {
  return Transfer(true, start, count, dtype, const_cast<void*>(data));
}

absl::StatusOr<Tensor> Dataset::ReadTensor(const Shape& start,
                                           const Shape& count,
                                           DType dtype) const {
  for (int64_t c : count) {
    if (c < 0) return Read(start, count, dtype, nullptr);  // reports the error
  }
  Tensor tensor = Tensor::Empty(count, dtype);
  TRELLIS_RETURN_IF_ERROR(Read(start, count, dtype, tensor.raw()));
  return tensor;
}

absl::StatusOr<Tensor> Dataset::ReadAll(DType dtype) const {
  return ReadTensor(Shape(shape_.size(), 0), shape_, dtype);
}

absl::Status Dataset::WriteTensor(const Shape& start, const Tensor& tensor) {
  TRELLIS_CHECK(tensor.defined() && tensor.device().is_cpu())
      << "WriteTensor needs a CPU tensor";
  return Write(start, tensor.shape(), tensor.dtype(), tensor.raw());
}

absl::Status Dataset::Append(DType dtype, const void* data, int64_t n) {
  Quiet();
  const int64_t old_size = shape_.empty() ? 0 : shape_[0];
  const std::string operation =
      absl::StrCat("append of ", n, " elements at ", old_size);
  if (!extendable_ || shape_.size() != 1) {
    return Error(absl::StatusCode::kInvalidArgument, operation,
                 "not a 1-D extendable dataset");
  }
  if (n == 0) return absl::OkStatus();
  const hsize_t new_size = static_cast<hsize_t>(old_size + n);
  if (H5Dset_extent(id(), &new_size) < 0) {
    return Error(absl::StatusCode::kUnknown, operation);
  }
  shape_[0] = old_size + n;
  absl::Status written = Write({old_size}, {n}, dtype, data);
  if (!written.ok()) {
    const hsize_t back = static_cast<hsize_t>(old_size);
    H5Dset_extent(id(), &back);
    H5Eclear2(H5E_DEFAULT);
    shape_[0] = old_size;
  }
  return written;
}

}  // namespace trellis::hdf5
