// A byte string kept in an HDF5 file as a 1-D uint8 dataset: a file carried
// inside another (a token file keeps its tokenizer's file this way).
#ifndef TRELLIS_FRAMEWORK_HDF5_BYTES_H_
#define TRELLIS_FRAMEWORK_HDF5_BYTES_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/hdf5.h"

namespace trellis::hdf5 {

// Writes `bytes` as the new 1-D uint8 dataset `path` of `at`.
absl::Status WriteBytes(Container& at, const std::string& path,
                        std::string_view bytes);

// The bytes of the 1-D uint8 dataset `path` of `at`. InvalidArgument, naming
// the file and dataset, when it is not one or holds more than `max_bytes`.
absl::StatusOr<std::string> ReadBytes(const Container& at,
                                      const std::string& path,
                                      int64_t max_bytes);

}  // namespace trellis::hdf5

#endif  // TRELLIS_FRAMEWORK_HDF5_BYTES_H_
