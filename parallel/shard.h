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
// Unequal blocks (`group_sizes`) may each be cut into fewer pieces than there
// are ranks (`group_parts`): a block cut into q < parts pieces is replicated
// over sub-groups of parts / q consecutive ranks, rank `index` holding piece
// index / (parts / q). That is a grouped-query [Q | K | V] projection with
// fewer key/value heads than tp ranks: every rank holds the one key/value
// head its query heads use. Of the ranks holding a replicated piece, the
// first (index a multiple of parts / q) owns it: checkpoints store and the
// gradient norm counts its copy alone (Owned*), and the replicas' gradients
// are summed over the sub-group (parallel/replicas.h).
//
// Invariants: the padded size is divisible by groups · parts; each block of
// group_sizes is divisible by its piece count, which divides parts.
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
  // Pieces each block of group_sizes is cut into (each divides parts);
  // empty: `parts` each, no replication.
  std::vector<int64_t> group_parts;

  static ShardSpec Replicated(Shape shape);
  // Splits `dim` of `shape` into `parts` (with `groups` blocks), padding it to
  // `padded_size` when nonzero.
  static ShardSpec Split(Shape shape, int dim, int64_t parts, int64_t index,
                         int64_t groups = 1, int64_t padded_size = 0);

  // Splits `dim` of `shape` (whose extent is the sum of `sizes`) into
  // blocks of `sizes`, each divided into `parts`.
  // With `pieces` (one per block, each dividing parts and its block), block
  // g is cut into pieces[g] only, replicated over parts / pieces[g] ranks.
  static ShardSpec SplitGroups(Shape shape, int dim, int64_t parts,
                               int64_t index, std::vector<int64_t> sizes,
                               std::vector<int64_t> pieces = {});

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
  // The runs this rank owns: all of Runs() but the pieces of replicated
  // blocks held by a rank that is not their sub-group's first. What a
  // checkpoint writes from this rank (a wholly replicated tensor is owned
  // by one rank through Parameter::primary instead).
  std::vector<Run> OwnedRuns() const;

  // A block of group_sizes replicated over a sub-group of ranks: this
  // rank's piece of it, local [local_start, local_start + length) along
  // split_dim, logical [logical_start, ...), piece `piece` of the block's
  // block_size / length pieces.
  struct ReplicatedPiece {
    int64_t local_start;
    int64_t logical_start;
    int64_t length;
    int64_t block_start;  // Logical start of the whole block.
    int64_t block_size;
    int64_t piece;
    int64_t replicas;  // Ranks holding this piece.
    bool owned;        // This rank is the sub-group's first.
  };
  // Every replicated piece this rank holds, in local order; empty when no
  // block is replicated over a sub-group.
  std::vector<ReplicatedPiece> ReplicatedPieces() const;
  bool has_replicated_pieces() const;

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
