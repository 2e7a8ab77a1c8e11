// Reading and writing one rank's shard of a logical tensor stored whole in
// an HDF5 file: only the elements the shard holds move, and padding never
// reaches the file.
//
// Two paths:
//  - WriteShard/ReadShard go through HDF5 hyperslabs. They work on any
//    dataset (chunked, compressed, big-endian, made by h5py) and serve small
//    files and fallbacks.
//  - Checkpoints use tensor files: HDF5 files whose datasets are contiguous
//    and allocated when defined, so every tensor's bytes sit at a fixed
//    offset. The datasets are defined through HDF5 (one process at a time,
//    serial HDF5 allows no more), then any number of processes write and
//    read their slices of the raw bytes at once with pwrite/pread, with no
//    HDF5 call and no gather (large writes bypass the page cache:
//    direct_writer.h). The files stay ordinary HDF5 that h5py reads.
//
// shard_io.cc holds the HDF5 path, tensor_file.cc the raw one, and
// shard_storage.h what both store (element types, their checks).
//
// Stored element types: float32; float16 (IEEE half, what h5py calls
// float16); bfloat16 as uint16 bits in a dataset with the attribute
// dtype = "bfloat16"; reading also accepts float64. Shards in memory are
// float32 or float64 (any device); values convert on the way, rounding to
// nearest even when narrowing.
//
// Writes (and the checksum parts of writes) move the elements the shard
// owns (ShardSpec::OwnedRuns): a piece replicated over a sub-group of ranks
// is stored by its owner alone, so each logical element is written once;
// reads fill every element the shard holds.
//
// Thread safety: TensorFileWriter/Reader are not synchronized; use one from
// one thread at a time. Separate objects (and processes) may write disjoint
// slices of one file at once.
#ifndef TRELLIS_TOOLS_CHECKPOINT_SHARD_IO_H_
#define TRELLIS_TOOLS_CHECKPOINT_SHARD_IO_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "framework/hdf5.h"
#include "framework/tensor.h"
#include "parallel/shard.h"
#include "tools/checkpoint/direct_writer.h"
#include "tools/checkpoint/tensor_checksum.h"

namespace trellis {

// Writes `local` (spec.LocalShape(), any device, float32/float64) into the
// float32 dataset `path` of the logical shape, creating it if absent.
absl::Status WriteShard(hdf5::Container& file, const std::string& path,
                        const ShardSpec& spec, const Tensor& local);

// Reads this shard of dataset `path` into `local`. The dataset must have the
// logical shape; padding elements of `local` are left untouched.
absl::Status ReadShard(const hdf5::Container& file, const std::string& path,
                       const ShardSpec& spec, Tensor& local);

// Where one stored tensor is.
struct TensorLocation {
  std::string file;  // The file's name, for messages.
  std::string path;  // The dataset's path in the file.
  Shape shape;
  DType dtype = DType::kF32;  // Stored type: kF32, kF16, kBF16 or kF64.
  // Byte offset of the raw little-endian data in the file; -1 when the
  // dataset is not plain contiguous data and must be read through HDF5.
  int64_t offset = -1;
  // The stored checksums (tensor_checksum.h); absent in files written
  // before checkpoints carried them, and in files made elsewhere.
  std::optional<TensorChecksum> checksum;
};

// The stored element types a checkpoint may be written in.
bool IsStorableDType(DType dtype);  // kF32, kF16, kBF16

// Defines dataset `path` (contiguous, space allocated now, never filled) of
// `shape` and element type `stored` (IsStorableDType), creating parent
// groups. An existing dataset of the same shape and type is reused (so the
// ranks sharing a tensor may each define it). Collective over nothing; call
// from one process at a time per file.
absl::StatusOr<TensorLocation> DefineTensor(hdf5::File& file,
                                            const std::string& path,
                                            const Shape& shape, DType stored);

// This shard's part of the checksums of `spec`'s logical tensor stored as
// `stored`: the terms of exactly the elements the shard holds (converted to
// `stored` first, as writing does).
TensorChecksum ShardChecksum(const ShardSpec& spec, const Tensor& local,
                             DType stored);

// Adds `partial` to the checksum attribute of the tensor `where` in `file`
// (starting from zero when it has none). Call from one process at a time
// per file, like DefineTensor.
absl::Status AddChecksum(hdf5::File& file, const TensorLocation& where,
                         const TensorChecksum& partial);

// Writes shards into tensors defined by DefineTensor, by raw I/O.
class TensorFileWriter {
 public:
  static absl::StatusOr<TensorFileWriter> Open(const std::string& file_name);
  TensorFileWriter(TensorFileWriter&& other) noexcept = default;
  TensorFileWriter& operator=(TensorFileWriter&& other) noexcept = default;

  // REQUIRES: `where` came from DefineTensor on this file and has the
  // shard's logical shape; `local` is float32 or float64.
  absl::Status WriteShard(const TensorLocation& where, const ShardSpec& spec,
                          const Tensor& local);
  // Flushes the written data to the disk (fdatasync) and closes.
  absl::Status Close();
  int64_t bytes_written() const { return bytes_; }

 private:
  TensorFileWriter(DirectWriter file, std::string name)
      : file_(std::move(file)), name_(std::move(name)) {}
  DirectWriter file_;
  std::string name_;
  int64_t bytes_ = 0;
};

// Reads shards of the tensors of an HDF5 file, by raw I/O where the data is
// contiguous and through HDF5 elsewhere.
class TensorFileReader {
 public:
  static absl::StatusOr<TensorFileReader> Open(const std::string& file_name);
  TensorFileReader(TensorFileReader&& other) noexcept;
  TensorFileReader& operator=(TensorFileReader&& other) noexcept;
  ~TensorFileReader();

  const std::string& file_name() const { return file_.file_name(); }
  const hdf5::File& hdf5() const { return file_; }
  bool Exists(const std::string& path) const { return file_.Exists(path); }
  // NotFound naming the file and the tensor when absent; InvalidArgument
  // for an element type a checkpoint cannot hold.
  absl::StatusOr<TensorLocation> Locate(const std::string& path) const;
  // Reads this shard of the tensor into `local` (float32 or float64, any
  // device). Safe to call from several threads at once for raw tensors
  // (offset ≥ 0) into different `local`s. The tensor must have the logical
  // shape (InvalidArgument naming both shapes otherwise); data cut short is
  // DataLoss. Padding elements of `local` are left untouched.
  // Verifies: when the tensor has checksums, every chunk the shard touches
  // is read whole and checked (DataLoss naming the tensor and the elements
  // on a mismatch); a NaN or infinity among the values read is DataLoss
  // naming the tensor and the element.
  absl::Status ReadShard(const TensorLocation& where, const ShardSpec& spec,
                         Tensor& local) const;

 private:
  absl::Status ReadRaw(const TensorLocation& where, const ShardSpec& spec,
                       Tensor& host) const;
  absl::Status ReadVerified(const TensorLocation& where, const ShardSpec& spec,
                            Tensor& host) const;
  TensorFileReader(hdf5::File file, int fd, int64_t size)
      : file_(std::move(file)), fd_(fd), size_(size) {}
  hdf5::File file_;
  int fd_ = -1;
  int64_t size_ = 0;
};

}  // namespace trellis

#endif  // TRELLIS_TOOLS_CHECKPOINT_SHARD_IO_H_
