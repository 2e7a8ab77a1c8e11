#include "tools/trainer/shard_io.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace trellis {
namespace {

// Geometry of a tensor seen as [outer][split][inner] around split_dim.
struct Blocks {
  int64_t outer = 1, split = 1, inner = 1;
};

Blocks BlocksOf(const Shape& shape, int dim) {
  Blocks b;
  if (dim < 0) {
    b.split = NumElements(shape);
    return b;
  }
  for (int d = 0; d < dim; ++d) b.outer *= shape[d];
  b.split = shape[dim];
  for (int d = dim + 1; d < static_cast<int>(shape.size()); ++d) {
    b.inner *= shape[d];
  }
  return b;
}

// Copies the run's elements between the local tensor and a packed buffer.
void MoveRun(const Blocks& b, const ShardSpec::Run& run, size_t elem,
             char* local, char* packed, bool to_packed) {
  const size_t row = run.length * b.inner * elem;
  for (int64_t o = 0; o < b.outer; ++o) {
    char* l = local + ((o * b.split + run.local_start) * b.inner) * elem;
    char* p = packed + o * row;
    if (to_packed) {
      std::memcpy(p, l, row);
    } else {
      std::memcpy(l, p, row);
    }
  }
}

Shape RunShape(const ShardSpec& spec, const ShardSpec::Run& run, Shape* start) {
  Shape count = spec.logical_shape;
  start->assign(count.size(), 0);
  if (!spec.replicated()) {
    count[spec.split_dim] = run.length;
    (*start)[spec.split_dim] = run.logical_start;
  }
  return count;
}

}  // namespace

absl::Status WriteShard(hdf5::Container& file, const std::string& path,
                        const ShardSpec& spec, const Tensor& local) {
  const Tensor host = local.device().is_cpu() ? local : local.To(Device::Cpu());
  TRELLIS_ASSIGN_OR_RETURN(
      hdf5::Dataset dataset,
      file.Exists(path)
          ? file.OpenDataset(path)
          : file.CreateDataset(path, DType::kF32, spec.logical_shape));
  const Blocks blocks = BlocksOf(host.shape(), spec.split_dim);
  const size_t elem = DTypeSize(host.dtype());
  for (const ShardSpec::Run& run : spec.Runs()) {
    Shape start;
    const Shape count = RunShape(spec, run, &start);
    std::vector<char> packed(NumElements(count) * elem);
    MoveRun(blocks, run, elem, static_cast<char*>(host.raw()), packed.data(),
            /*to_packed=*/true);
    TRELLIS_RETURN_IF_ERROR(
        dataset.Write(start, count, host.dtype(), packed.data()));
  }
  return absl::OkStatus();
}

absl::Status ReadShard(const hdf5::Container& file, const std::string& path,
                       const ShardSpec& spec, Tensor& local) {
  TRELLIS_ASSIGN_OR_RETURN(hdf5::Dataset dataset, file.OpenDataset(path));
  if (dataset.shape() != spec.logical_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        dataset.file_name(), ": tensor ", path, " has shape ",
        ShapeString(dataset.shape()), " but this model needs ",
        ShapeString(spec.logical_shape),
        "; the checkpoint was written for a model of another size"));
  }
  Tensor host = local.device().is_cpu()
                    ? local
                    : Tensor::Empty(local.shape(), local.dtype());
  const Blocks blocks = BlocksOf(host.shape(), spec.split_dim);
  const size_t elem = DTypeSize(host.dtype());
  for (const ShardSpec::Run& run : spec.Runs()) {
    Shape start;
    const Shape count = RunShape(spec, run, &start);
    std::vector<char> packed(NumElements(count) * elem);
    TRELLIS_RETURN_IF_ERROR(
        dataset.Read(start, count, host.dtype(), packed.data()));
    MoveRun(blocks, run, elem, static_cast<char*>(host.raw()), packed.data(),
            /*to_packed=*/false);
  }
  if (!local.device().is_cpu()) local.CopyFrom(host);
  return absl::OkStatus();
}

}  // namespace trellis
