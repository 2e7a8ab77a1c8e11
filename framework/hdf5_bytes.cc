#include "framework/hdf5_bytes.h"

#include <hdf5.h>

#include "absl/strings/str_cat.h"
#include "framework/hdf5_internal.h"
#include "framework/status.h"

namespace trellis::hdf5 {
namespace {

absl::Status Bad(const Container& at, const std::string& path,
                 const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat(at.file_name(), ": dataset ", path, " ", why));
}

}  // namespace

absl::Status WriteBytes(Container& at, const std::string& path,
                        std::string_view bytes) {
  internal::Quiet();
  const int64_t n = static_cast<int64_t>(bytes.size());
  Dataspace space = Dataspace::Simple({n}, {n});
  Handle dataset(H5Dcreate2(at.id(), path.c_str(), H5T_STD_U8LE, space.id(),
                            H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose);
  if (!dataset.valid()) {
    return internal::FileError(absl::StatusCode::kUnknown, at.file_name(),
                               absl::StrCat("creating byte dataset ", path));
  }
  if (n > 0 && H5Dwrite(dataset.id(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL,
                        H5P_DEFAULT, bytes.data()) < 0) {
    return internal::FileError(absl::StatusCode::kUnknown, at.file_name(),
                               absl::StrCat("writing byte dataset ", path));
  }
  if (dataset.Reset() < 0) {
    return internal::FileError(absl::StatusCode::kUnknown, at.file_name(),
                               absl::StrCat("closing byte dataset ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadBytes(const Container& at,
                                      const std::string& path,
                                      int64_t max_bytes) {
  internal::Quiet();
  TRELLIS_ASSIGN_OR_RETURN(Handle dataset,
                           internal::OpenObject(at, path, path, H5I_DATASET));
  Handle type(H5Dget_type(dataset.id()), H5Tclose);
  if (!type.valid() || H5Tget_class(type.id()) != H5T_INTEGER ||
      H5Tget_size(type.id()) != 1 || H5Tget_sign(type.id()) != H5T_SGN_NONE) {
    return Bad(at, path, "is not uint8 bytes");
  }
  Dataspace space(Handle(H5Dget_space(dataset.id()), H5Sclose));
  const Shape dims = space.dims();
  if (dims.size() != 1) {
    return Bad(at, path,
               absl::StrCat("has ", dims.size(), " dimensions; bytes are 1-D"));
  }
  if (dims[0] > max_bytes) {
    return Bad(
        at, path,
        absl::StrCat("holds ", dims[0], " bytes, more than ", max_bytes));
  }
  std::string bytes(static_cast<size_t>(dims[0]), '\0');
  if (!bytes.empty() && H5Dread(dataset.id(), H5T_NATIVE_UINT8, H5S_ALL,
                                H5S_ALL, H5P_DEFAULT, bytes.data()) < 0) {
    return internal::FileError(absl::StatusCode::kDataLoss, at.file_name(),
                               absl::StrCat("reading byte dataset ", path));
  }
  return bytes;
}

}  // namespace trellis::hdf5
