// Internal helpers shared by the HDF5 wrapper's sources: error capture and
// type mapping. Not part of the public API (use framework/hdf5.h).
#ifndef TRELLIS_FRAMEWORK_HDF5_INTERNAL_H_
#define TRELLIS_FRAMEWORK_HDF5_INTERNAL_H_

#include <optional>
#include <string>

#include "framework/hdf5.h"

namespace trellis::hdf5::internal {

// Turns off HDF5's automatic error printing for the calling thread.
void Quiet();
// The innermost entry of the calling thread's HDF5 error stack; clears it.
std::string TakeErrorStack();
herr_t CollectName(hid_t, const char* name, const H5A_info_t*, void* data);
// "<file>: <operation> failed: <why>".
absl::Status FileError(absl::StatusCode code, const std::string& file_name,
                       const std::string& operation);
// "[a, b) x [c, d)" for a hyperslab.
std::string SliceString(const Shape& start, const Shape& count);
// HDF5 types for stored and in-memory elements.
hid_t FileType(StoredType type);
hid_t MemoryType(DType dtype);
// Classifies a stored datatype; `name` always gets a readable name.
std::optional<StoredType> Classify(hid_t type, std::string& name);
// Opens the object at `relative` below `parent`, checking its kind.
absl::StatusOr<Handle> OpenObject(const Container& parent,
                                  const std::string& relative,
                                  const std::string& full, H5I_type_t want);

}  // namespace trellis::hdf5::internal

#endif  // TRELLIS_FRAMEWORK_HDF5_INTERNAL_H_
