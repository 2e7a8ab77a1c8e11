#include "parallel/shard.h"

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
                                 int64_t index, std::vector<int64_t> sizes) {
  TRELLIS_CHECK(dim >= 0 && dim < static_cast<int>(shape.size()));
  TRELLIS_CHECK(index >= 0 && index < parts);
  int64_t total = 0;
  for (int64_t size : sizes) {
    TRELLIS_CHECK(size > 0 && size % parts == 0)
        << "block " << size << " does not split into " << parts;
    total += size;
  }
  TRELLIS_CHECK_EQ(total, shape[dim]);
  ShardSpec spec;
  spec.logical_shape = std::move(shape);
  spec.split_dim = dim;
  spec.parts = parts;
  spec.index = index;
  spec.groups = static_cast<int64_t>(sizes.size());
  spec.group_sizes = std::move(sizes);
  return spec;
}

Shape ShardSpec::LocalShape() const {
  Shape shape = logical_shape;
  if (!replicated()) {
    const int64_t size = padded_size > 0 ? padded_size : shape[split_dim];
    shape[split_dim] = size / parts;
  }
  return shape;
}

int64_t ShardSpec::LogicalIndex(int64_t j) const {
  if (replicated()) return j;
  if (!group_sizes.empty()) {
    int64_t offset = 0;  // Logical start of the block holding j.
    for (int64_t size : group_sizes) {
      const int64_t piece = size / parts;
      if (j < piece) return offset + index * piece + j;
      j -= piece;
      offset += size;
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

std::string ShardSpec::DebugString() const {
  if (replicated())
    return absl::StrCat("replicated ", ShapeString(logical_shape));
  return absl::StrCat(
      "split dim ", split_dim, " of ", ShapeString(logical_shape), " into ",
      group_sizes.empty()
          ? absl::StrCat(groups)
          : absl::StrCat("[", absl::StrJoin(group_sizes, "|"), "]"),
      "×", parts, " part ", index,
      padded_size > 0 ? absl::StrCat(" padded to ", padded_size)
                      : std::string());
}

}  // namespace trellis
