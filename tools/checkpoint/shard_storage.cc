#include "tools/checkpoint/shard_storage.h"

#include "absl/strings/str_cat.h"

namespace trellis::shard_storage {

Blocks BlocksOf(const Shape& shape, int dim) {
  Blocks b;
  for (int d = 0; d < dim; ++d) b.outer *= shape[d];
  b.split = shape[dim];
  for (int d = dim + 1; d < static_cast<int>(shape.size()); ++d) {
    b.inner *= shape[d];
  }
  return b;
}

absl::Status CheckShardDType(const std::string& file, const std::string& path,
                             const Tensor& local) {
  if (local.dtype() == DType::kF32 || local.dtype() == DType::kF64) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": tensor ", path, ": shards in memory must be ",
                   "float32 or float64, not ", DTypeName(local.dtype())));
}

absl::Status ShapeMismatch(const std::string& file, const std::string& path,
                           const Shape& stored, const Shape& wanted) {
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": tensor ", path, " has shape ", ShapeString(stored),
                   " but this model needs ", ShapeString(wanted),
                   "; the checkpoint was written for a model of another size"));
}

bool MarkedBf16(const hdf5::Object& dataset) {
  if (!dataset.HasAttribute(kDTypeAttribute)) return false;
  const absl::StatusOr<std::string> v =
      dataset.ReadStringAttribute(kDTypeAttribute);
  return v.ok() && *v == "bfloat16";
}

hid_t HalfFileType() {
  static const hid_t type = [] {
    const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
  }();
  return type;
}

hid_t FileTypeOf(DType stored) {
  switch (stored) {
    case DType::kF16:
      return HalfFileType();
    case DType::kBF16:
      return H5T_STD_U16LE;
    case DType::kF64:
      return H5T_IEEE_F64LE;
    default:
      return H5T_IEEE_F32LE;
  }
}

absl::StatusOr<DType> StoredDType(const hdf5::Dataset& dataset, bool* raw) {
  hdf5::Handle type(H5Dget_type(dataset.id()), H5Tclose);
  const std::optional<hdf5::StoredType> stored = dataset.stored_type();
  DType dtype = DType::kF32;
  if (stored == hdf5::StoredType::kF32) {
    dtype = DType::kF32;
  } else if (stored == hdf5::StoredType::kF16) {
    dtype = DType::kF16;
  } else if (stored == hdf5::StoredType::kF64) {
    dtype = DType::kF64;
  } else if (stored == hdf5::StoredType::kU16 && MarkedBf16(dataset)) {
    dtype = DType::kBF16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        dataset.file_name(), ": tensor ", dataset.path(), " is stored as ",
        dataset.stored_type_name(),
        "; checkpoint tensors are float32, float16, float64 or bfloat16 "
        "(uint16 with the attribute dtype=\"bfloat16\")"));
  }
  *raw = type.valid() && H5Tequal(type.id(), FileTypeOf(dtype)) > 0;
  return dtype;
}

Tensor HostOf(const Tensor& local) {
  return local.device().is_cpu() ? local
                                 : Tensor::Empty(local.shape(), local.dtype());
}

}  // namespace trellis::shard_storage
