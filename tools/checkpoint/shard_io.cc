#include "tools/checkpoint/shard_io.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/float16.h"
#include "tools/checkpoint/shard_storage.h"

namespace trellis {
namespace {

using shard_storage::Blocks;
using shard_storage::BlocksOf;
using shard_storage::CheckShardDType;
using shard_storage::HostOf;
using shard_storage::ShapeMismatch;
using shard_storage::StoredDType;

// ------------------------------------------------------------ HDF5 path

Shape RunShape(const ShardSpec& spec, const ShardSpec::Run& run, Shape* start) {
  Shape count = spec.logical_shape;
  start->assign(count.size(), 0);
  count[spec.split_dim] = run.length;
  (*start)[spec.split_dim] = run.logical_start;
  return count;
}

// Moves the run's elements between the local tensor and a packed buffer of
// the run's shape, converting between their element types.
void MoveRun(const Blocks& b, const ShardSpec::Run& run, char* local,
             DType local_dtype, char* packed, DType packed_dtype,
             bool to_packed) {
  const int64_t n = run.length * b.inner;
  const size_t local_elem = DTypeSize(local_dtype);
  const size_t packed_elem = DTypeSize(packed_dtype);
  for (int64_t o = 0; o < b.outer; ++o) {
    char* l = local + ((o * b.split + run.local_start) * b.inner) * local_elem;
    char* p = packed + o * n * packed_elem;
    if (to_packed) {
      ConvertElements(l, local_dtype, p, packed_dtype, n);
    } else {
      ConvertElements(p, packed_dtype, l, local_dtype, n);
    }
  }
}

}  // namespace

absl::Status WriteShard(hdf5::Container& file, const std::string& path,
                        const ShardSpec& spec, const Tensor& local) {
  TRELLIS_RETURN_IF_ERROR(CheckShardDType(file.file_name(), path, local));
  const Tensor host = local.device().is_cpu() ? local : local.To(Device::Cpu());
  TRELLIS_ASSIGN_OR_RETURN(
      hdf5::Dataset dataset,
      file.Exists(path)
          ? file.OpenDataset(path)
          : file.CreateDataset(path, DType::kF32, spec.logical_shape));
  if (dataset.shape() != spec.logical_shape) {
    return ShapeMismatch(dataset.file_name(), path, dataset.shape(),
                         spec.logical_shape);
  }
  if (spec.replicated()) {
    return dataset.Write(Shape(spec.logical_shape.size(), 0),
                         spec.logical_shape, host.dtype(), host.raw());
  }
  const Blocks blocks = BlocksOf(host.shape(), spec.split_dim);
  for (const ShardSpec::Run& run : spec.OwnedRuns()) {
    Shape start;
    const Shape count = RunShape(spec, run, &start);
    std::vector<char> packed(NumElements(count) * DTypeSize(host.dtype()));
    MoveRun(blocks, run, static_cast<char*>(host.raw()), host.dtype(),
            packed.data(), host.dtype(), /*to_packed=*/true);
    TRELLIS_RETURN_IF_ERROR(
        dataset.Write(start, count, host.dtype(), packed.data()));
  }
  return absl::OkStatus();
}

absl::Status ReadShard(const hdf5::Container& file, const std::string& path,
                       const ShardSpec& spec, Tensor& local) {
  TRELLIS_RETURN_IF_ERROR(CheckShardDType(file.file_name(), path, local));
  TRELLIS_ASSIGN_OR_RETURN(hdf5::Dataset dataset, file.OpenDataset(path));
  if (dataset.shape() != spec.logical_shape) {
    return ShapeMismatch(dataset.file_name(), path, dataset.shape(),
                         spec.logical_shape);
  }
  bool raw = false;
  TRELLIS_ASSIGN_OR_RETURN(const DType stored, StoredDType(dataset, &raw));
  // HDF5 converts numbers itself; bfloat16 bits come as they are.
  const DType transfer = stored == DType::kBF16 ? DType::kBF16 : local.dtype();
  Tensor host = HostOf(local);
  if (!local.device().is_cpu()) host.CopyFrom(local);
  std::vector<ShardSpec::Run> runs = spec.Runs();
  const Blocks blocks = spec.replicated()
                            ? Blocks{1, NumElements(spec.logical_shape), 1}
                            : BlocksOf(host.shape(), spec.split_dim);
  if (spec.replicated()) runs = {{0, 0, blocks.split}};
  for (const ShardSpec::Run& run : runs) {
    Shape start(spec.logical_shape.size(), 0);
    const Shape count =
        spec.replicated() ? spec.logical_shape : RunShape(spec, run, &start);
    std::vector<char> packed(NumElements(count) * DTypeSize(transfer));
    TRELLIS_RETURN_IF_ERROR(
        dataset.Read(start, count, transfer, packed.data()));
    MoveRun(blocks, run, static_cast<char*>(host.raw()), host.dtype(),
            packed.data(), transfer, /*to_packed=*/false);
  }
  if (!local.device().is_cpu()) local.CopyFrom(host);
  return absl::OkStatus();
}

}  // namespace trellis
