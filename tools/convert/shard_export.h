// Pre-sharded weights: a whole model cut into one HDF5 file per (tp, pp)
// rank of a layout, for tools that want each rank's tensors as they sit in
// its memory.
//
//   <dir>/shard_tp<t>_pp<p>.h5  every parameter stage p's tp rank t holds
//                               (the tied wte on the first and the last
//                               stage), local shape with the vocabulary
//                               padded as trellis pads it (zeros), each
//                               dataset with attributes logical_shape (JSON
//                               text), split_dim (-1: replicated), groups,
//                               parts, index, padded_size (0: none),
//                               group_sizes and group_parts (JSON lists,
//                               ShardSpec's; [] when unused); root
//                               attributes tp, pp, tp_rank, pp_rank,
//                               first_layer, num_layers, model (JSON text)
//   <dir>/shards.json           the layout and the list of files
//
// The cut is exactly the trainer's (the model family's DeclareParameters
// with the stage layers of --pp/--pp_layers and one virtual stage).
//
// Thread safety: pure function of its arguments and the files it writes.
#ifndef TRELLIS_TOOLS_CONVERT_SHARD_EXPORT_H_
#define TRELLIS_TOOLS_CONVERT_SHARD_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/convert/gpt2_tensors.h"

namespace trellis {

struct ShardExport {
  std::string dir;
  int64_t tp = 1, pp = 1;
  std::vector<int64_t> pp_layers;  // Empty: even split.
  DType dtype = DType::kF32;       // kF32, kF16 or kBF16.
};

// Writes the shard files; counts tensors and bytes written.
absl::Status ExportShards(const WholeModel& model, const ShardExport& layout,
                          const ProgressFn& progress, int64_t* tensors,
                          int64_t* bytes);

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CONVERT_SHARD_EXPORT_H_
