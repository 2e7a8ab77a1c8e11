// ShardSpec: how one rank's tensor is cut from a logical tensor.
//
// A logical tensor (the whole parameter as checkpoints store it, e.g. `wte`
// (V, C)) is either held whole by every tensor-parallel rank (replicated) or
// split along one dimension. A split dimension may be made of `groups` equal
// blocks that are each divided into `parts` (c_attn's columns are [Q | K | V]:
// groups = 3, so a rank takes its heads from each third), and may be padded
// in memory to `padded_size` (the vocabulary, padded to a multiple of tp and
// of 128): padded elements exist only in memory and map to no logical index.
//
// Invariants: the padded size is divisible by groups · parts.
// Thread safety: a value type; all methods are const.
#ifndef TRELLIS_PARALLEL_SHARD_H_
#define TRELLIS_PARALLEL_SHARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor.h"

namespace trellis {

struct ShardSpec {
  Shape logical_shape;
  int split_dim = -1;       // -1: replicated.
  int64_t groups = 1;       // Equal blocks along split_dim.
  int64_t parts = 1;        // Ranks sharing the split (tp size).
  int64_t index = 0;        // This rank's part.
  int64_t padded_size = 0;  // Size of split_dim in memory; 0: unpadded.
  // Unequal blocks along split_dim, their extents in order (sum: the
  // dimension; groups = their count); empty: `groups` equal blocks.
  std::vector<int64_t> group_sizes;

  static ShardSpec Replicated(Shape shape);
  // Splits `dim` of `shape` into `parts` (with `groups` blocks), padding it to
  // `padded_size` when nonzero.
  static ShardSpec Split(Shape shape, int dim, int64_t parts, int64_t index,
                         int64_t groups = 1, int64_t padded_size = 0);

  // Splits `dim` of `shape` (whose extent is the sum of `sizes`) into
  // blocks of `sizes`, each divided into `parts`.
  static ShardSpec SplitGroups(Shape shape, int dim, int64_t parts,
                               int64_t index, std::vector<int64_t> sizes);

  bool replicated() const { return split_dim < 0; }
  Shape LocalShape() const;
  // The logical index along split_dim of local index `j`, or -1 for padding.
  int64_t LogicalIndex(int64_t j) const;

  // A run of consecutive local indices along split_dim that map to
  // consecutive logical indices: what one hyperslab read or write covers.
  struct Run {
    int64_t local_start;
    int64_t logical_start;
    int64_t length;
  };
  std::vector<Run> Runs() const;

  // Logical flat index of each local element, or -1 for padding; calls
  // `visit(local_flat, logical_flat)` for every local element in order.
  template <typename Visit>
  void ForEachElement(Visit&& visit) const;

  std::string DebugString() const;
};

template <typename Visit>
void ShardSpec::ForEachElement(Visit&& visit) const {
  const Shape local = LocalShape();
  if (replicated()) {
    const int64_t n = NumElements(local);
    for (int64_t i = 0; i < n; ++i) visit(i, i);
    return;
  }
  // Elements are [outer][split][inner] in row-major order.
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < split_dim; ++d) outer *= local[d];
  for (int d = split_dim + 1; d < static_cast<int>(local.size()); ++d) {
    inner *= local[d];
  }
  const int64_t local_split = local[split_dim];
  const int64_t logical_split = logical_shape[split_dim];
  int64_t local_flat = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < local_split; ++j) {
      const int64_t logical_j = LogicalIndex(j);
      for (int64_t i = 0; i < inner; ++i, ++local_flat) {
        visit(local_flat,
              logical_j < 0 ? -1 : (o * logical_split + logical_j) * inner + i);
      }
    }
  }
}

}  // namespace trellis

#endif  // TRELLIS_PARALLEL_SHARD_H_
