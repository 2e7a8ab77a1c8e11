#include "parallel/shard.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trellis {

ShardSpec ShardSpec::Replicated(Shape shape) {
  ShardSpec spec;
  spec.logical_shape = std::move(shape);
  return spec;
}

ShardSpec ShardSpec::Split(Shape shape, int dim, int64_t parts, int64_t index,
                           int64_t groups, int64_t padded_size) {
  TRELLIS_CHECK(dim >= 0 && dim < static_cast<int>(shape.size()));
  TRELLIS_CHECK(index >= 0 && index < parts);
  ShardSpec spec;
  spec.logical_shape = std::move(shape);
  spec.split_dim = dim;
  spec.parts = parts;
  spec.index = index;
  spec.groups = groups;
  spec.padded_size = padded_size;
  const int64_t size = padded_size > 0 ? padded_size : spec.logical_shape[dim];
  TRELLIS_CHECK_GE(size, spec.logical_shape[dim]);
  TRELLIS_CHECK_EQ(size % (groups * parts), 0)
      << "dimension " << size << " does not split into " << groups << "×"
      << parts;
  TRELLIS_CHECK(padded_size == 0 || groups == 1)
      << "padding applies to ungrouped splits only";
  return spec;
}

ShardSpec ShardSpec::SplitGroups(Shape shape, int dim, int64_t parts,
                                 int64_t index, std::vector<int64_t> sizes,
                                 std::vector<int64_t> pieces) {
  TRELLIS_CHECK(dim >= 0 && dim < static_cast<int>(shape.size()));
  TRELLIS_CHECK(index >= 0 && index < parts);
  TRELLIS_CHECK(pieces.empty() || pieces.size() == sizes.size())
      << pieces.size() << " piece counts for " << sizes.size() << " blocks";
  int64_t total = 0;
  for (size_t g = 0; g < sizes.size(); ++g) {
    const int64_t size = sizes[g];
    const int64_t q = pieces.empty() ? parts : pieces[g];
    TRELLIS_CHECK(q > 0 && parts % q == 0)
        << "block " << g << " cut into " << q << " pieces over " << parts
        << " ranks";
    TRELLIS_CHECK(size > 0 && size % q == 0)
        << "block " << size << " does not split into " << q;
    total += size;
  }
  // All-`parts` piece counts are the plain split.
  bool plain = true;
  for (int64_t q : pieces) plain = plain && q == parts;
  if (plain) pieces.clear();
  TRELLIS_CHECK_EQ(total, shape[dim]);
  ShardSpec spec;
  spec.logical_shape = std::move(shape);
  spec.split_dim = dim;
  spec.parts = parts;
  spec.index = index;
  spec.groups = static_cast<int64_t>(sizes.size());
  spec.group_sizes = std::move(sizes);
  spec.group_parts = std::move(pieces);
  return spec;
}

namespace {

// Pieces block g of `spec`'s group_sizes is cut into.
int64_t PiecesOf(const ShardSpec& spec, size_t g) {
  return spec.group_parts.empty() ? spec.parts : spec.group_parts[g];
}

}  // namespace

Shape ShardSpec::LocalShape() const {
  Shape shape = logical_shape;
  if (replicated()) return shape;
  if (!group_parts.empty()) {
    int64_t local = 0;
    for (size_t g = 0; g < group_sizes.size(); ++g) {
      local += group_sizes[g] / PiecesOf(*this, g);
    }
    shape[split_dim] = local;
    return shape;
  }
  const int64_t size = padded_size > 0 ? padded_size : shape[split_dim];
  shape[split_dim] = size / parts;
  return shape;
}

int64_t ShardSpec::LogicalIndex(int64_t j) const {
  if (replicated()) return j;
  if (!group_sizes.empty()) {
    int64_t offset = 0;  // Logical start of the block holding j.
    for (size_t g = 0; g < group_sizes.size(); ++g) {
      const int64_t q = PiecesOf(*this, g);
      const int64_t piece = group_sizes[g] / q;
      if (j < piece) return offset + index / (parts / q) * piece + j;
      j -= piece;
      offset += group_sizes[g];
    }
    return -1;
  }
  const int64_t size = padded_size > 0 ? padded_size : logical_shape[split_dim];
  const int64_t block = size / groups;  // One group's extent.
  const int64_t piece = block / parts;  // This rank's share of a group.
  const int64_t group = j / piece;
  const int64_t logical = group * block + index * piece + j % piece;
  return logical < logical_shape[split_dim] ? logical : -1;
}

std::vector<ShardSpec::Run> ShardSpec::Runs() const {
  std::vector<Run> runs;
  if (replicated()) {
    runs.push_back({0, 0, logical_shape.empty() ? 1 : logical_shape[0]});
    return runs;
  }
  const int64_t local = LocalShape()[split_dim];
  for (int64_t j = 0; j < local; ++j) {
    const int64_t logical = LogicalIndex(j);
    if (logical < 0) continue;
    if (!runs.empty()) {
      Run& last = runs.back();
      if (last.local_start + last.length == j &&
          last.logical_start + last.length == logical) {
        ++last.length;
        continue;
      }
    }
    runs.push_back({j, logical, 1});
  }
  return runs;
}

std::vector<ShardSpec::ReplicatedPiece> ShardSpec::ReplicatedPieces() const {
  std::vector<ReplicatedPiece> pieces;
  int64_t local = 0, logical = 0;
  for (size_t g = 0; g < group_parts.size(); ++g) {
    const int64_t q = group_parts[g];
    const int64_t length = group_sizes[g] / q;
    const int64_t replicas = parts / q;
    if (replicas > 1) {
      const int64_t piece = index / replicas;
      pieces.push_back({local, logical + piece * length, length, logical,
                        group_sizes[g], piece, replicas,
                        index % replicas == 0});
    }
    local += length;
    logical += group_sizes[g];
  }
  return pieces;
}

bool ShardSpec::has_replicated_pieces() const {
  for (int64_t q : group_parts) {
    if (q < parts) return true;
  }
  return false;
}

std::vector<ShardSpec::Run> ShardSpec::OwnedRuns() const {
  std::vector<Run> runs = Runs();
  for (const ReplicatedPiece& r : ReplicatedPieces()) {
    if (r.owned) continue;
    // Drop [r.local_start, + r.length) from the runs (pieces are whole
    // blocks' parts, but a run may span several blocks).
    std::vector<Run> kept;
    for (const Run& run : runs) {
      const int64_t lo = run.local_start, hi = lo + run.length;
      const int64_t cut_lo = std::max(lo, r.local_start);
      const int64_t cut_hi = std::min(hi, r.local_start + r.length);
      if (cut_lo >= cut_hi) {
        kept.push_back(run);
        continue;
      }
      if (lo < cut_lo) kept.push_back({lo, run.logical_start, cut_lo - lo});
      if (cut_hi < hi) {
        kept.push_back(
            {cut_hi, run.logical_start + (cut_hi - lo), hi - cut_hi});
      }
    }
    runs = std::move(kept);
  }
  return runs;
}

std::string ShardSpec::DebugString() const {
  if (replicated())
    return absl::StrCat("replicated ", ShapeString(logical_shape));
  return absl::StrCat(
      "split dim ", split_dim, " of ", ShapeString(logical_shape), " into ",
      group_sizes.empty()
          ? absl::StrCat(groups)
          : absl::StrCat("[", absl::StrJoin(group_sizes, "|"), "]"),
      "×", parts,
      group_parts.empty()
          ? std::string()
          : absl::StrCat(" (pieces [", absl::StrJoin(group_parts, "|"), "])"),
      " part ", index,
      padded_size > 0 ? absl::StrCat(" padded to ", padded_size)
                      : std::string());
}

}  // namespace trellis
