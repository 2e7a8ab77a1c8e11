// The raw tensor-file path of shard_io.h: checkpoint tensors defined
// through HDF5, their bytes moved with pwrite/pread.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/float16.h"
#include "tools/checkpoint/shard_io.h"
#include "tools/checkpoint/shard_storage.h"

namespace trellis {
namespace {

using shard_storage::Blocks;
using shard_storage::BlocksOf;
using shard_storage::CheckShardDType;
using shard_storage::FileTypeOf;
using shard_storage::HostOf;
using shard_storage::kDTypeAttribute;
using shard_storage::ShapeMismatch;
using shard_storage::StoredDType;

constexpr int64_t kStagingElements = int64_t{1} << 20;
// Each pread/pwrite moves at most this much: the kernel's readahead then
// overlaps the disk with the copies (one huge read waits for each batch).
constexpr int64_t kMaxTransfer = int64_t{8} << 20;

// A range of consecutive elements that is consecutive both in the local
// tensor and in the logical one.
struct Piece {
  int64_t local = 0;    // First local element.
  int64_t logical = 0;  // First logical element.
  int64_t count = 0;
};

// With `owned_only`, the pieces a write stores from this rank: replicated
// pieces of other owners left out (ShardSpec::OwnedRuns).
std::vector<Piece> PiecesOf(const ShardSpec& spec, bool owned_only = false) {
  std::vector<Piece> pieces;
  if (spec.replicated()) {
    pieces.push_back({0, 0, NumElements(spec.logical_shape)});
    return pieces;
  }
  const Blocks local = BlocksOf(spec.LocalShape(), spec.split_dim);
  const int64_t logical_split = spec.logical_shape[spec.split_dim];
  const std::vector<ShardSpec::Run> runs =
      owned_only ? spec.OwnedRuns() : spec.Runs();
  for (int64_t o = 0; o < local.outer; ++o) {
    for (const ShardSpec::Run& run : runs) {
      const Piece p{(o * local.split + run.local_start) * local.inner,
                    (o * logical_split + run.logical_start) * local.inner,
                    run.length * local.inner};
      if (!pieces.empty() &&
          pieces.back().local + pieces.back().count == p.local &&
          pieces.back().logical + pieces.back().count == p.logical) {
        pieces.back().count += p.count;
      } else {
        pieces.push_back(p);
      }
    }
  }
  return pieces;
}

std::string ErrnoText() { return std::strerror(errno); }

// pread of exactly `bytes`, retried over short transfers.
absl::Status ReadAt(int fd, const TensorLocation& where, char* data,
                    int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, data, std::min(bytes, kMaxTransfer), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::DataLossError(absl::StrCat(
          where.file, ": tensor ", where.path, ": read failed: ", ErrnoText()));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(
          where.file, ": tensor ", where.path, ": the file ends at byte ",
          offset, ", inside the tensor's data; the file is truncated"));
    }
    data += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

// The byte offset of a dataset's contiguous data, or -1.
int64_t RawOffset(const hdf5::Dataset& dataset) {
  hdf5::Handle plist(H5Dget_create_plist(dataset.id()), H5Pclose);
  if (!plist.valid() || H5Pget_layout(plist.id()) != H5D_CONTIGUOUS ||
      H5Pget_nfilters(plist.id()) != 0 ||
      H5Pget_external_count(plist.id()) != 0) {
    H5Eclear2(H5E_DEFAULT);
    return -1;
  }
  const haddr_t offset = H5Dget_offset(dataset.id());
  if (offset == HADDR_UNDEF) {
    H5Eclear2(H5E_DEFAULT);
    return -1;
  }
  return static_cast<int64_t>(offset);
}

absl::StatusOr<TensorLocation> LocateDataset(const hdf5::Container& file,
                                             const std::string& path) {
  TRELLIS_ASSIGN_OR_RETURN(hdf5::Dataset dataset, file.OpenDataset(path));
  TensorLocation where;
  where.file = file.file_name();
  where.path = path;
  where.shape = dataset.shape();
  bool raw = false;
  TRELLIS_ASSIGN_OR_RETURN(where.dtype, StoredDType(dataset, &raw));
  where.offset = raw ? RawOffset(dataset) : -1;
  if (NumElements(where.shape) == 0) where.offset = 0;
  if (dataset.HasAttribute(kChecksumAttribute)) {
    TRELLIS_ASSIGN_OR_RETURN(std::string text,
                             dataset.ReadStringAttribute(kChecksumAttribute));
    absl::StatusOr<TensorChecksum> checksum = TensorChecksum::Parse(text);
    if (!checksum.ok() || where.dtype == DType::kF64 ||
        static_cast<int64_t>(checksum->sums.size()) !=
            (NumElements(where.shape) + checksum->chunk - 1) /
                checksum->chunk) {
      return absl::DataLossError(absl::StrCat(
          where.file, ": tensor ", path,
          ": its checksum attribute is damaged; the file is corrupt"));
    }
    where.checksum = *std::move(checksum);
  }
  return where;
}

absl::Status NonFinite(const TensorLocation& where, int64_t element,
                       const void* value, DType dtype) {
  double v = 0;
  ConvertElements(value, dtype, &v, DType::kF64, 1);
  return absl::DataLossError(absl::StrCat(
      where.file, ": tensor ", where.path, " holds ", v, " at element ",
      element, "; the checkpoint is corrupt or the run had diverged when it ",
      "was saved; use an earlier checkpoint"));
}

// Checks the shard's elements of `host` (already read) are finite.
absl::Status CheckFinite(const TensorLocation& where, const ShardSpec& spec,
                         const Tensor& host) {
  const char* data = static_cast<const char*>(host.raw());
  const int64_t elem = DTypeSize(host.dtype());
  for (const Piece& p : PiecesOf(spec)) {
    const int64_t bad =
        FirstNonFinite(data + p.local * elem, host.dtype(), p.count);
    if (bad >= 0) {
      return NonFinite(where, p.logical + bad, data + (p.local + bad) * elem,
                       host.dtype());
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsStorableDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

absl::StatusOr<TensorLocation> DefineTensor(hdf5::File& file,
                                            const std::string& path,
                                            const Shape& shape, DType stored) {
  TRELLIS_CHECK(IsStorableDType(stored)) << DTypeName(stored);
  if (!file.Exists(path)) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    hdf5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    hdf5::Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    const hdf5::Dataspace space = hdf5::Dataspace::Simple(shape, shape);
    if (!dcpl.valid() || !lcpl.valid() || !space.valid() ||
        H5Pset_layout(dcpl.id(), H5D_CONTIGUOUS) < 0 ||
        H5Pset_alloc_time(dcpl.id(), H5D_ALLOC_TIME_EARLY) < 0 ||
        H5Pset_fill_time(dcpl.id(), H5D_FILL_TIME_NEVER) < 0 ||
        H5Pset_create_intermediate_group(lcpl.id(), 1) < 0) {
      return file.Error(absl::StatusCode::kInternal,
                        absl::StrCat("creating dataset ", path));
    }
    hdf5::Handle dataset(
        H5Dcreate2(file.id(), path.c_str(), FileTypeOf(stored), space.id(),
                   lcpl.id(), dcpl.id(), H5P_DEFAULT),
        H5Dclose);
    if (!dataset.valid()) {
      return file.Error(absl::StatusCode::kInternal,
                        absl::StrCat("creating dataset ", path));
    }
    if (stored == DType::kBF16) {
      dataset.Reset();
      TRELLIS_ASSIGN_OR_RETURN(hdf5::Dataset opened, file.OpenDataset(path));
      TRELLIS_RETURN_IF_ERROR(
          opened.WriteStringAttribute(kDTypeAttribute, "bfloat16"));
    }
  }
  TRELLIS_ASSIGN_OR_RETURN(TensorLocation where, LocateDataset(file, path));
  if (where.shape != shape || where.dtype != stored || where.offset < 0) {
    return absl::InternalError(absl::StrCat(
        file.file_name(), ": tensor ", path, " is already defined as ",
        DTypeName(where.dtype), " ", ShapeString(where.shape), ", not ",
        DTypeName(stored), " ", ShapeString(shape)));
  }
  return where;
}

TensorChecksum ShardChecksum(const ShardSpec& spec, const Tensor& local,
                             DType stored) {
  TensorChecksum sum = TensorChecksum::Zero(NumElements(spec.logical_shape));
  const Tensor host = local.device().is_cpu() ? local : local.To(Device::Cpu());
  const char* data = static_cast<const char*>(host.raw());
  const int64_t local_elem = DTypeSize(host.dtype());
  std::vector<char> converted;
  for (const Piece& p : PiecesOf(spec, /*owned_only=*/true)) {
    for (int64_t done = 0; done < p.count; done += kStagingElements) {
      const int64_t n = std::min(kStagingElements, p.count - done);
      const char* source = data + (p.local + done) * local_elem;
      if (host.dtype() != stored) {
        converted.resize(n * DTypeSize(stored));
        ConvertElements(source, host.dtype(), converted.data(), stored, n);
        source = converted.data();
      }
      sum.Add(source, stored, p.logical + done, n);
    }
  }
  return sum;
}

absl::Status AddChecksum(hdf5::File& file, const TensorLocation& where,
                         const TensorChecksum& partial) {
  TRELLIS_ASSIGN_OR_RETURN(hdf5::Dataset dataset, file.OpenDataset(where.path));
  TensorChecksum total = partial;
  if (dataset.HasAttribute(kChecksumAttribute)) {
    TRELLIS_ASSIGN_OR_RETURN(std::string text,
                             dataset.ReadStringAttribute(kChecksumAttribute));
    TRELLIS_ASSIGN_OR_RETURN(TensorChecksum before,
                             TensorChecksum::Parse(text));
    total.Add(before);
  }
  return dataset.WriteStringAttribute(kChecksumAttribute, total.Format());
}

absl::StatusOr<TensorFileWriter> TensorFileWriter::Open(
    const std::string& file_name) {
  TRELLIS_ASSIGN_OR_RETURN(DirectWriter file, DirectWriter::Open(file_name));
  return TensorFileWriter(std::move(file), file_name);
}

absl::Status TensorFileWriter::WriteShard(const TensorLocation& where,
                                          const ShardSpec& spec,
                                          const Tensor& local) {
  TRELLIS_CHECK(where.shape == spec.logical_shape && where.offset >= 0)
      << where.path;
  TRELLIS_RETURN_IF_ERROR(CheckShardDType(name_, where.path, local));
  const Tensor host = local.device().is_cpu() ? local : local.To(Device::Cpu());
  const char* data = static_cast<const char*>(host.raw());
  const DType from = host.dtype(), to = where.dtype;
  const int64_t local_elem = DTypeSize(from);
  const int64_t stored_elem = DTypeSize(to);
  std::vector<char> converted;
  for (const Piece& p : PiecesOf(spec, /*owned_only=*/true)) {
    const char* source = data + p.local * local_elem;
    // Bytes [begin, end) of the piece as stored.
    DirectWriter::Fill fill = [&](char* dst, int64_t begin, int64_t end) {
      if (from == to) {
        std::memcpy(dst, source + begin, end - begin);
        return;
      }
      const int64_t first = begin / stored_elem;
      const int64_t last = (end + stored_elem - 1) / stored_elem;
      converted.resize((last - first) * stored_elem);
      ConvertElements(source + first * local_elem, from, converted.data(), to,
                      last - first);
      std::memcpy(dst, converted.data() + (begin - first * stored_elem),
                  end - begin);
    };
    const int64_t bytes = p.count * stored_elem;
    TRELLIS_RETURN_IF_ERROR(
        file_.Write(where.offset + p.logical * stored_elem, bytes, fill));
    bytes_ += bytes;
  }
  return absl::OkStatus();
}

absl::Status TensorFileWriter::Close() { return file_.Close(); }

absl::StatusOr<TensorFileReader> TensorFileReader::Open(
    const std::string& file_name) {
  TRELLIS_ASSIGN_OR_RETURN(hdf5::File file, hdf5::File::Open(file_name));
  const int fd = ::open(file_name.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat info;
  if (fd < 0 || ::fstat(fd, &info) != 0) {
    const std::string why = ErrnoText();
    if (fd >= 0) ::close(fd);
    return absl::NotFoundError(
        absl::StrCat(file_name, ": cannot open for reading: ", why));
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return TensorFileReader(std::move(file), fd, info.st_size);
}

TensorFileReader::TensorFileReader(TensorFileReader&& other) noexcept
    : file_(std::move(other.file_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_) {}

TensorFileReader& TensorFileReader::operator=(
    TensorFileReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    file_ = std::move(other.file_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

TensorFileReader::~TensorFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<TensorLocation> TensorFileReader::Locate(
    const std::string& path) const {
  if (!file_.Exists(path)) {
    return absl::NotFoundError(
        absl::StrCat(file_.file_name(), " has no tensor ", path));
  }
  TRELLIS_ASSIGN_OR_RETURN(TensorLocation where, LocateDataset(file_, path));
  const int64_t bytes = NumElements(where.shape) * DTypeSize(where.dtype);
  if (where.offset >= 0 && where.offset + bytes > size_) {
    return absl::DataLossError(
        absl::StrCat(file_.file_name(), ": tensor ", path, " needs bytes [",
                     where.offset, ", ", where.offset + bytes,
                     ") but the file has ", size_, "; the file is truncated"));
  }
  return where;
}

absl::Status TensorFileReader::ReadShard(const TensorLocation& where,
                                         const ShardSpec& spec,
                                         Tensor& local) const {
  if (where.shape != spec.logical_shape) {
    return ShapeMismatch(where.file, where.path, where.shape,
                         spec.logical_shape);
  }
  TRELLIS_RETURN_IF_ERROR(CheckShardDType(where.file, where.path, local));
  Tensor host = HostOf(local);
  if (!local.device().is_cpu()) host.CopyFrom(local);
  if (where.offset < 0) {
    TRELLIS_RETURN_IF_ERROR(trellis::ReadShard(file_, where.path, spec, host));
  } else if (where.checksum.has_value()) {
    TRELLIS_RETURN_IF_ERROR(ReadVerified(where, spec, host));
  } else {
    TRELLIS_RETURN_IF_ERROR(ReadRaw(where, spec, host));
  }
  TRELLIS_RETURN_IF_ERROR(CheckFinite(where, spec, host));
  if (!local.device().is_cpu()) local.CopyFrom(host);
  return absl::OkStatus();
}

absl::Status TensorFileReader::ReadRaw(const TensorLocation& where,
                                       const ShardSpec& spec,
                                       Tensor& host) const {
  char* data = static_cast<char*>(host.raw());
  const size_t local_elem = DTypeSize(host.dtype());
  const size_t stored_elem = DTypeSize(where.dtype);
  std::vector<char> staging;
  for (const Piece& p : PiecesOf(spec)) {
    const int64_t file_offset = where.offset + p.logical * stored_elem;
    if (host.dtype() == where.dtype) {
      TRELLIS_RETURN_IF_ERROR(ReadAt(fd_, where, data + p.local * local_elem,
                                     p.count * stored_elem, file_offset));
    } else {
      for (int64_t done = 0; done < p.count; done += kStagingElements) {
        const int64_t n = std::min(kStagingElements, p.count - done);
        staging.resize(n * stored_elem);
        TRELLIS_RETURN_IF_ERROR(ReadAt(fd_, where, staging.data(),
                                       n * stored_elem,
                                       file_offset + done * stored_elem));
        ConvertElements(staging.data(), where.dtype,
                        data + (p.local + done) * local_elem, host.dtype(), n);
      }
    }
  }
  return absl::OkStatus();
}

// Reads every checksum chunk the shard touches, whole, verifies it and
// copies the shard's part out of it.
absl::Status TensorFileReader::ReadVerified(const TensorLocation& where,
                                            const ShardSpec& spec,
                                            Tensor& host) const {
  const TensorChecksum& stored_sums = *where.checksum;
  const int64_t chunk = stored_sums.chunk;
  const int64_t total = NumElements(where.shape);
  std::vector<Piece> pieces = PiecesOf(spec);
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return a.logical < b.logical;
  });
  char* data = static_cast<char*>(host.raw());
  const int64_t local_elem = DTypeSize(host.dtype());
  const int64_t stored_elem = DTypeSize(where.dtype);
  std::vector<char> staging;
  TensorChecksum found{chunk, std::vector<uint64_t>(stored_sums.sums.size())};
  size_t first = 0;  // The first piece not wholly before the chunk.
  for (int64_t c = 0; c * chunk < total && first < pieces.size(); ++c) {
    const int64_t begin = c * chunk, end = std::min(total, begin + chunk);
    while (first < pieces.size() &&
           pieces[first].logical + pieces[first].count <= begin) {
      ++first;
    }
    if (first == pieces.size() || pieces[first].logical >= end) continue;
    staging.resize((end - begin) * stored_elem);
    TRELLIS_RETURN_IF_ERROR(ReadAt(fd_, where, staging.data(),
                                   (end - begin) * stored_elem,
                                   where.offset + begin * stored_elem));
    found.sums[c] = 0;
    found.Add(staging.data(), where.dtype, begin, end - begin);
    if (found.sums[c] != stored_sums.sums[c]) {
      return absl::DataLossError(absl::StrCat(
          where.file, ": tensor ", where.path,
          ": checksum mismatch in elements [", begin, ", ", end,
          "); the stored bytes are corrupt; use an earlier checkpoint"));
    }
    for (size_t k = first; k < pieces.size() && pieces[k].logical < end; ++k) {
      const Piece& p = pieces[k];
      const int64_t from = std::max(begin, p.logical);
      const int64_t to = std::min(end, p.logical + p.count);
      ConvertElements(staging.data() + (from - begin) * stored_elem,
                      where.dtype,
                      data + (p.local + from - p.logical) * local_elem,
                      host.dtype(), to - from);
    }
  }
  return absl::OkStatus();
}

}  // namespace trellis
