#include "framework/hdf5_internal.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trellis::hdf5::internal {

// HDF5 keeps its error-printing setting per thread (thread-safe build), so
// every thread that enters these wrappers turns it off once.
void Quiet() {
  thread_local bool quiet = false;
  if (!quiet) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    quiet = true;
  }
}

namespace {

// Keeps the first entry an upward walk meets: the innermost one.
herr_t CollectError(unsigned /*n*/, const H5E_error2_t* error, void* data) {
  auto* lines = static_cast<std::vector<std::string>*>(data);
  if (!lines->empty()) return 0;
  char minor[160] = "";
  H5Eget_msg(error->min_num, nullptr, minor, sizeof(minor));
  std::string line = error->desc != nullptr ? error->desc : "";
  if (minor[0] != '\0' && line.find(minor) == std::string::npos) {
    absl::StrAppend(&line, " (", minor, ")");
  }
  lines->push_back(std::move(line));
  return 0;
}

}  // namespace

// The innermost entry of the current thread's HDF5 error stack (where the
// failure was detected, which says why); clears the stack.
std::string TakeErrorStack() {
  std::vector<std::string> lines;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, CollectError, &lines);
  H5Eclear2(H5E_DEFAULT);
  if (lines.empty()) return "";
  std::string text = lines.front();
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

herr_t CollectName(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

// An error about a whole file: "<file>: <operation> failed: <why>".
absl::Status FileError(absl::StatusCode code, const std::string& file_name,
                       const std::string& operation) {
  std::string why = TakeErrorStack();
  if (why.empty()) why = "unknown HDF5 error";
  return absl::Status(
      code, absl::StrCat(file_name, ": ", operation, " failed: ", why));
}

std::string SliceString(const Shape& start, const Shape& count) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < start.size() && i < count.size(); ++i) {
    parts.push_back(
        absl::StrCat("[", start[i], ", ", start[i] + count[i], ")"));
  }
  return absl::StrJoin(parts, " x ");
}

namespace {

// The HDF5 type of IEEE half precision, little-endian (what h5py calls
// float16). Created once and never closed.
hid_t HalfType() {
  static const hid_t type = [] {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    return t;
  }();
  return type;
}

}  // namespace

static_assert(static_cast<int>(DType::kU32) == 7 &&
              static_cast<int>(StoredType::kU64) == 7);

// Indexed by StoredType.
hid_t FileType(StoredType type) {
  const hid_t types[] = {H5T_IEEE_F32LE, H5T_IEEE_F64LE, HalfType(),
                         H5T_STD_I32LE,  H5T_STD_I64LE,  H5T_STD_U16LE,
                         H5T_STD_U32LE,  H5T_STD_U64LE};
  return types[static_cast<int>(type)];
}

// Indexed by DType; bf16 travels as its uint16 bits.
hid_t MemoryType(DType dtype) {
  const hid_t types[] = {H5T_NATIVE_FLOAT,  H5T_NATIVE_DOUBLE,
                         H5T_NATIVE_UINT16, HalfType(),
                         H5T_NATIVE_INT32,  H5T_NATIVE_INT64,
                         H5T_NATIVE_UINT16, H5T_NATIVE_UINT32};
  return types[static_cast<int>(dtype)];
}

// Classifies a stored datatype; `name` always gets a readable name.
std::optional<StoredType> Classify(hid_t type, std::string& name) {
  const H5T_class_t type_class = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (type_class == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    name = absl::StrCat(is_signed ? "int" : "uint", size * 8);
    if (is_signed && size == 4) return StoredType::kI32;
    if (is_signed && size == 8) return StoredType::kI64;
    if (!is_signed && size == 2) return StoredType::kU16;
    if (!is_signed && size == 4) return StoredType::kU32;
    if (!is_signed && size == 8) return StoredType::kU64;
    return std::nullopt;
  }
  if (type_class == H5T_FLOAT) {
    name = absl::StrCat("float", size * 8);
    if (size == 2) return StoredType::kF16;
    if (size == 4) return StoredType::kF32;
    if (size == 8) return StoredType::kF64;
    return std::nullopt;
  }
  if (type_class == H5T_STRING) {
    name = "string";
  } else if (type_class == H5T_COMPOUND) {
    name = "compound";
  } else {
    name = absl::StrCat("HDF5 type class ", static_cast<int>(type_class));
  }
  return std::nullopt;
}

// Opens the object at `relative` below `parent` and checks its kind.
absl::StatusOr<Handle> OpenObject(const Container& parent,
                                  const std::string& relative,
                                  const std::string& full, H5I_type_t want) {
  const char* kind = want == H5I_DATASET ? "dataset" : "group";
  if (!parent.Exists(relative)) {
    return absl::NotFoundError(
        absl::StrCat(parent.file_name(), ": ", full, ": no such ", kind));
  }
  Handle handle(H5Oopen(parent.id(), relative.c_str(), H5P_DEFAULT), H5Oclose);
  if (!handle.valid()) {
    return parent.Error(absl::StatusCode::kDataLoss,
                        absl::StrCat("opening ", kind, " ", full));
  }
  if (H5Iget_type(handle.id()) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(parent.file_name(), ": ", full, ": not a ", kind));
  }
  return handle;
}

}  // namespace trellis::hdf5::internal
