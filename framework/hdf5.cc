#include "framework/hdf5.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "framework/hdf5_internal.h"

namespace trellis::hdf5 {

using namespace internal;  // NOLINT: the wrapper's own helpers

Handle::Handle(Handle&& other) noexcept
    : id_(std::exchange(other.id_, -1)), closer_(other.closer_) {}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    Reset();
    id_ = std::exchange(other.id_, -1);
    closer_ = other.closer_;
  }
  return *this;
}

herr_t Handle::Reset() {
  herr_t result = 0;
  if (id_ >= 0 && closer_ != nullptr) {
    Quiet();
    result = closer_(id_);
  }
  id_ = -1;
  return result;
}

Dataspace Dataspace::Simple(const Shape& dims, const Shape& max_dims) {
  Quiet();
  std::vector<hsize_t> d(dims.begin(), dims.end());
  std::vector<hsize_t> m(max_dims.begin(), max_dims.end());
  return Dataspace(
      Handle(H5Screate_simple(static_cast<int>(d.size()), d.data(), m.data()),
             H5Sclose));
}

Dataspace Dataspace::Scalar() {
  Quiet();
  return Dataspace(Handle(H5Screate(H5S_SCALAR), H5Sclose));
}

Shape Dataspace::dims() const {
  std::vector<hsize_t> d(std::max(H5Sget_simple_extent_ndims(id()), 0));
  H5Sget_simple_extent_dims(id(), d.data(), nullptr);
  return Shape(d.begin(), d.end());
}

// Unlimited dimensions come back as -1.
Shape Dataspace::max_dims() const {
  std::vector<hsize_t> m(std::max(H5Sget_simple_extent_ndims(id()), 0));
  H5Sget_simple_extent_dims(id(), nullptr, m.data());
  Shape result;
  for (hsize_t v : m)
    result.push_back(v == H5S_UNLIMITED ? -1 : static_cast<int64_t>(v));
  return result;
}

StoredType StoredTypeOf(DType dtype) {
  // Indexed by DType.
  constexpr StoredType kTypes[] = {
      StoredType::kF32, StoredType::kF64, StoredType::kU16, StoredType::kF16,
      StoredType::kI32, StoredType::kI64, StoredType::kU16, StoredType::kU32};
  return kTypes[static_cast<int>(dtype)];
}

const char* StoredTypeName(StoredType type) {
  constexpr const char* kNames[] = {"float32", "float64", "float16", "int32",
                                    "int64",   "uint16",  "uint32",  "uint64"};
  return kNames[static_cast<int>(type)];
}

// ---------------------------------------------------------------- Object

Object::Object(Handle handle, std::string file_name, std::string path)
    : handle_(std::move(handle)),
      file_name_(std::move(file_name)),
      path_(std::move(path)) {}

std::string Object::ChildPath(const std::string& relative) const {
  if (!relative.empty() && relative[0] == '/') return relative;
  if (path_ == "/") return absl::StrCat("/", relative);
  return absl::StrCat(path_, "/", relative);
}

absl::Status Object::Error(absl::StatusCode code, const std::string& operation,
                           const std::string& detail) const {
  // A detail means the wrappers found the problem, not HDF5.
  std::string why = TakeErrorStack();
  if (!detail.empty()) why = detail;
  if (why.empty()) why = "unknown HDF5 error";
  return absl::Status(code, absl::StrCat(file_name_, ": ", path_, ": ",
                                         operation, " failed: ", why));
}

bool Object::HasAttribute(const std::string& name) const {
  Quiet();
  const htri_t exists = H5Aexists(id(), name.c_str());
  if (exists < 0) H5Eclear2(H5E_DEFAULT);
  return exists > 0;
}

absl::StatusOr<std::vector<std::string>> Object::ListAttributes() const {
  Quiet();
  std::vector<std::string> names;
  if (H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, nullptr, CollectName,
                  &names) < 0) {
    return Error(absl::StatusCode::kUnknown, "listing attributes");
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<Attribute> Object::OpenAttribute(const std::string& name) const {
  Quiet();
  if (!HasAttribute(name)) {
    return absl::NotFoundError(
        absl::StrCat(file_name_, ": ", path_, ": no attribute '", name, "'"));
  }
  Attribute attribute(
      Handle(H5Aopen(id(), name.c_str(), H5P_DEFAULT), H5Aclose));
  if (!attribute.valid()) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat("opening attribute '", name, "'"));
  }
  Dataspace space(Handle(H5Aget_space(attribute.id()), H5Sclose));
  if (!space.valid() || H5Sget_simple_extent_npoints(space.id()) != 1) {
    return Error(absl::StatusCode::kInvalidArgument,
                 absl::StrCat("reading attribute '", name, "'"),
                 "it is not a single value");
  }
  return attribute;
}

absl::Status Object::WriteScalarAttribute(const std::string& name,
                                          hid_t file_type, hid_t memory_type,
                                          const void* value) {
  Quiet();
  const std::string operation = absl::StrCat("writing attribute '", name, "'");
  if (HasAttribute(name) && H5Adelete(id(), name.c_str()) < 0) {
    return Error(absl::StatusCode::kUnknown, operation);
  }
  Dataspace space = Dataspace::Scalar();
  Attribute attribute(Handle(H5Acreate2(id(), name.c_str(), file_type,
                                        space.id(), H5P_DEFAULT, H5P_DEFAULT),
                             H5Aclose));
  if (!attribute.valid() || H5Awrite(attribute.id(), memory_type, value) < 0) {
    return Error(absl::StatusCode::kUnknown, operation);
  }
  return absl::OkStatus();
}

absl::Status Object::WriteStringAttribute(const std::string& name,
                                          const std::string& value) {
  Quiet();
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), H5T_VARIABLE);
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  const char* pointer = value.c_str();
  return WriteScalarAttribute(name, type.id(), type.id(), &pointer);
}

absl::Status Object::WriteInt64Attribute(const std::string& name,
                                         int64_t value) {
  return WriteScalarAttribute(name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

absl::Status Object::WriteDoubleAttribute(const std::string& name,
                                          double value) {
  return WriteScalarAttribute(name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

absl::StatusOr<std::string> Object::ReadStringAttribute(
    const std::string& name) const {
  TRELLIS_ASSIGN_OR_RETURN(Attribute attribute, OpenAttribute(name));
  const std::string operation = absl::StrCat("reading attribute '", name, "'");
  Handle type(H5Aget_type(attribute.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING) {
    return Error(absl::StatusCode::kInvalidArgument, operation,
                 "it is not a string");
  }
  Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(memory.id(), H5Tget_cset(type.id()));
  if (H5Tis_variable_str(type.id()) > 0) {
    H5Tset_size(memory.id(), H5T_VARIABLE);
    char* text = nullptr;
    if (H5Aread(attribute.id(), memory.id(), &text) < 0) {
      return Error(absl::StatusCode::kDataLoss, operation);
    }
    std::string result = text != nullptr ? text : "";
    H5free_memory(text);
    return result;
  }
  const size_t size = H5Tget_size(type.id());
  H5Tset_size(memory.id(), size);
  H5Tset_strpad(memory.id(), H5T_STR_NULLPAD);
  std::string result(size, '\0');
  if (H5Aread(attribute.id(), memory.id(), result.data()) < 0) {
    return Error(absl::StatusCode::kDataLoss, operation);
  }
  result.resize(std::strlen(result.c_str()));
  return result;
}

absl::Status Object::ReadNumericAttribute(const std::string& name, bool integer,
                                          hid_t memory_type,
                                          void* value) const {
  TRELLIS_ASSIGN_OR_RETURN(Attribute attribute, OpenAttribute(name));
  const std::string operation = absl::StrCat("reading attribute '", name, "'");
  Handle type(H5Aget_type(attribute.id()), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type.id());
  if (type_class != H5T_INTEGER && (integer || type_class != H5T_FLOAT)) {
    return Error(absl::StatusCode::kInvalidArgument, operation,
                 integer ? "it is not an integer" : "it is not a number");
  }
  if (H5Aread(attribute.id(), memory_type, value) < 0) {
    return Error(absl::StatusCode::kDataLoss, operation);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Object::ReadInt64Attribute(
    const std::string& name) const {
  int64_t value = 0;
  TRELLIS_RETURN_IF_ERROR(
      ReadNumericAttribute(name, true, H5T_NATIVE_INT64, &value));
  return value;
}

absl::StatusOr<double> Object::ReadDoubleAttribute(
    const std::string& name) const {
  double value = 0;
  TRELLIS_RETURN_IF_ERROR(
      ReadNumericAttribute(name, false, H5T_NATIVE_DOUBLE, &value));
  return value;
}

// ---------------------------------------------------------------- Container

bool Container::Exists(const std::string& path) const {
  Quiet();
  std::string prefix = (!path.empty() && path[0] == '/') ? "/" : "";
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&prefix, part);
    const htri_t exists = H5Lexists(id(), prefix.c_str(), H5P_DEFAULT);
    if (exists <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    prefix.push_back('/');
  }
  return true;
}

absl::StatusOr<Group> Container::CreateGroup(const std::string& path) {
  Quiet();
  const std::string full = ChildPath(path);
  Handle properties(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(properties.id(), 1);
  Handle group(
      H5Gcreate2(id(), path.c_str(), properties.id(), H5P_DEFAULT, H5P_DEFAULT),
      H5Gclose);
  if (!group.valid()) {
    Group failed(Handle(), file_name_, full);
    return failed.Error(absl::StatusCode::kUnknown, "creating group");
  }
  return Group(std::move(group), file_name_, full);
}

absl::StatusOr<Group> Container::OpenGroup(const std::string& path) const {
  Quiet();
  const std::string full = ChildPath(path);
  TRELLIS_ASSIGN_OR_RETURN(Handle handle,
                           OpenObject(*this, path, full, H5I_GROUP));
  return Group(std::move(handle), file_name_, full);
}

absl::StatusOr<Dataset> Container::OpenDataset(const std::string& path) const {
  Quiet();
  const std::string full = ChildPath(path);
  TRELLIS_ASSIGN_OR_RETURN(Handle handle,
                           OpenObject(*this, path, full, H5I_DATASET));
  Dataset dataset(std::move(handle), file_name_, full);
  if (dataset.stored_type_name_.empty()) {
    return dataset.Error(absl::StatusCode::kDataLoss, "opening dataset");
  }
  return dataset;
}

absl::StatusOr<std::vector<std::string>> Container::ListMembers() const {
  Quiet();
  H5G_info_t info;
  if (H5Gget_info(id(), &info) < 0) {
    return Error(absl::StatusCode::kUnknown, "listing members");
  }
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t length = H5Lget_name_by_idx(
        id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (length < 0) return Error(absl::StatusCode::kUnknown, "listing members");
    std::string name(static_cast<size_t>(length) + 1, '\0');
    H5Lget_name_by_idx(id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(),
                       name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(length));
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<Dataset> Container::CreateDatasetWith(const std::string& path,
                                                     StoredType type,
                                                     const Shape& dims,
                                                     const Shape& max_dims,
                                                     int64_t chunk_elements) {
  Quiet();
  Dataspace space = Dataspace::Simple(dims, max_dims);
  Handle links(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(links.id(), 1);
  Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (chunk_elements > 0) {
    const hsize_t chunk = static_cast<hsize_t>(chunk_elements);
    H5Pset_chunk(create.id(), 1, &chunk);
  }
  Handle handle(H5Dcreate2(id(), path.c_str(), FileType(type), space.id(),
                           links.id(), create.id(), H5P_DEFAULT),
                H5Dclose);
  Dataset dataset(std::move(handle), file_name_, ChildPath(path));
  if (!dataset.valid()) {
    return dataset.Error(
        absl::StatusCode::kUnknown,
        chunk_elements > 0
            ? absl::StrCat("creating extendable ", StoredTypeName(type),
                           " dataset")
            : absl::StrCat("creating ", StoredTypeName(type),
                           " dataset of shape ", ShapeString(dims)));
  }
  return dataset;
}

absl::StatusOr<Dataset> Container::CreateDataset(const std::string& path,
                                                 StoredType type,
                                                 const Shape& shape) {
  return CreateDatasetWith(path, type, shape, shape, 0);
}

absl::StatusOr<Dataset> Container::CreateDataset(const std::string& path,
                                                 DType dtype,
                                                 const Shape& shape) {
  return CreateDataset(path, StoredTypeOf(dtype), shape);
}

absl::StatusOr<Dataset> Container::CreateExtendableDataset(
    const std::string& path, StoredType type, int64_t chunk_elements) {
  TRELLIS_CHECK_GT(chunk_elements, 0);
  return CreateDatasetWith(path, type, {0}, {-1}, chunk_elements);
}

// ---------------------------------------------------------------- File

absl::StatusOr<File> File::Create(const std::string& file_name) {
  Quiet();
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_file_locking(access.id(), true, true);
  Handle handle(
      H5Fcreate(file_name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.id()),
      H5Fclose);
  File file(std::move(handle), file_name, "/");
  if (!file.valid()) {
    return FileError(absl::StatusCode::kPermissionDenied, file_name,
                     "creating file");
  }
  return file;
}

absl::StatusOr<File> File::Open(const std::string& file_name, OpenMode mode) {
  Quiet();
  File file(Handle(), file_name, "/");
  std::error_code error;
  if (!std::filesystem::exists(file_name, error)) {
    return absl::NotFoundError(absl::StrCat(file_name, ": no such file"));
  }
  if (std::filesystem::is_directory(file_name, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": is a directory, not a file"));
  }
  const htri_t is_hdf5 = H5Fis_hdf5(file_name.c_str());
  if (is_hdf5 == 0) {
    H5Eclear2(H5E_DEFAULT);
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": not an HDF5 file"));
  }
  if (is_hdf5 < 0) {
    return FileError(absl::StatusCode::kDataLoss, file_name, "opening");
  }
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_file_locking(access.id(), true, true);
  const unsigned flags =
      mode == OpenMode::kReadWrite ? H5F_ACC_RDWR : H5F_ACC_RDONLY;
  file.handle_ =
      Handle(H5Fopen(file_name.c_str(), flags, access.id()), H5Fclose);
  if (!file.valid()) {
    return FileError(absl::StatusCode::kDataLoss, file_name, "opening");
  }
  return file;
}

absl::Status File::Flush() {
  Quiet();
  if (H5Fflush(id(), H5F_SCOPE_LOCAL) < 0) {
    return FileError(absl::StatusCode::kDataLoss, file_name_, "flushing");
  }
  return absl::OkStatus();
}

absl::Status File::Close() {
  if (!valid()) return absl::OkStatus();
  absl::Status flushed = Flush();
  if (handle_.Reset() < 0) {
    return FileError(absl::StatusCode::kDataLoss, file_name_, "closing");
  }
  return flushed;
}

}  // namespace trellis::hdf5
