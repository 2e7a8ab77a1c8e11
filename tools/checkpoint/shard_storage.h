// Internal to the shard I/O files (shard_io.cc, tensor_file.cc): how a
// checkpoint tensor's elements are stored, shared by the HDF5 hyperslab
// path and the raw tensor-file path of shard_io.h.
//
// Stored element types: float32, IEEE float16, float64, and bfloat16 as
// uint16 bits in a dataset with the attribute dtype = "bfloat16". Shards in
// memory are float32 or float64.
//
// Thread safety: free functions without state, except HalfFileType's type,
// made once (thread-safe static initialization).
#ifndef TRELLIS_TOOLS_CHECKPOINT_SHARD_STORAGE_H_
#define TRELLIS_TOOLS_CHECKPOINT_SHARD_STORAGE_H_

#include <hdf5.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/hdf5.h"
#include "framework/tensor.h"

namespace trellis::shard_storage {

// The attribute naming a uint16 dataset's element type ("bfloat16").
inline constexpr char kDTypeAttribute[] = "dtype";

// Geometry of a tensor seen as [outer][split][inner] around split_dim.
struct Blocks {
  int64_t outer = 1, split = 1, inner = 1;
};
Blocks BlocksOf(const Shape& shape, int dim);

// InvalidArgument unless `local` is float32 or float64.
absl::Status CheckShardDType(const std::string& file, const std::string& path,
                             const Tensor& local);
// The error for a stored tensor of another shape than the model's.
absl::Status ShapeMismatch(const std::string& file, const std::string& path,
                           const Shape& stored, const Shape& wanted);

// Whether a uint16 dataset holds bfloat16 bits.
bool MarkedBf16(const hdf5::Object& dataset);
// The HDF5 type of IEEE half precision, little-endian.
hid_t HalfFileType();
// The HDF5 file type `stored` elements are written as.
hid_t FileTypeOf(DType stored);
// The stored type of an open dataset, and in `raw` whether its bytes are
// plain little-endian data of that type (raw I/O may read them).
absl::StatusOr<DType> StoredDType(const hdf5::Dataset& dataset, bool* raw);

// A CPU tensor to stage `local` through when it lives on another device.
Tensor HostOf(const Tensor& local);

}  // namespace trellis::shard_storage

#endif  // TRELLIS_TOOLS_CHECKPOINT_SHARD_STORAGE_H_
