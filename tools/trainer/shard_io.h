// Reading and writing one rank's shard of a logical tensor in an HDF5 file,
// by hyperslab: only the elements the shard holds move, and padding never
// reaches the file.
#ifndef TRELLIS_TOOLS_TRAINER_SHARD_IO_H_
#define TRELLIS_TOOLS_TRAINER_SHARD_IO_H_

#include <string>

#include "absl/status/status.h"
#include "framework/hdf5.h"
#include "framework/tensor.h"
#include "parallel/shard.h"

namespace trellis {

// Writes `local` (spec.LocalShape(), any device, float32/float64) into the
// float32 dataset `path` of the logical shape, creating it if absent.
absl::Status WriteShard(hdf5::Container& file, const std::string& path,
                        const ShardSpec& spec, const Tensor& local);

// Reads this shard of dataset `path` into `local`. The dataset must have the
// logical shape; padding elements of `local` are left untouched.
absl::Status ReadShard(const hdf5::Container& file, const std::string& path,
                       const ShardSpec& spec, Tensor& local);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_TRAINER_SHARD_IO_H_
