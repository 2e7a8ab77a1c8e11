// Shard I/O, by HDF5 hyperslabs (WriteShard/ReadShard) and by the
// checkpoints' raw tensor files: every kind of shard written by the parts of
// one tensor-parallel size and read back by those of another, in one
// process, with padding never reaching the file.
#include "tools/checkpoint/shard_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "framework/hdf5.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kPadding = -777.0;  // What padded local elements hold.

// The logical tensor's element i is i + 0.5 (exact in float32).
double LogicalValue(int64_t i) { return static_cast<double>(i) + 0.5; }

Tensor MakeLocal(const ShardSpec& spec, DType dtype) {
  Tensor local = Tensor::Empty(spec.LocalShape(), dtype);
  spec.ForEachElement([&](int64_t local_flat, int64_t logical_flat) {
    const double v = logical_flat < 0 ? kPadding : LogicalValue(logical_flat);
    if (dtype == DType::kF64) {
      local.data<double>()[local_flat] = v;
    } else {
      local.data<float>()[local_flat] = static_cast<float>(v);
    }
  });
  return local;
}

// How one kind of shard is made for `parts` ranks.
struct Kind {
  std::string name;
  Shape shape;
  int dim;             // -1: replicated
  int64_t groups;      // Blocks along dim.
  int64_t padded_per;  // Padded size is a multiple of this (0: unpadded).

  ShardSpec Spec(int64_t parts, int64_t index) const {
    if (dim < 0) return ShardSpec::Replicated(shape);
    int64_t padded = 0;
    if (padded_per > 0) {
      const int64_t m = padded_per * parts;
      padded = (shape[dim] + m - 1) / m * m;
    }
    return ShardSpec::Split(shape, dim, parts, index, groups, padded);
  }
};

void PrintTo(const Kind& kind, std::ostream* os) { *os << kind.name; }

class ShardIoTest : public ::testing::TestWithParam<Kind> {};

// Writes the tensor as `write_parts` ranks would, one part after another,
// through HDF5 hyperslabs.
void WriteAllParts(const std::string& path, const Kind& kind,
                   int64_t write_parts, DType dtype) {
  absl::StatusOr<hdf5::File> file = hdf5::File::Create(path);
  ASSERT_TRUE(file.ok()) << file.status();
  // Replicated tensors are written by one rank (the primary copy).
  const int64_t writers = kind.dim < 0 ? 1 : write_parts;
  for (int64_t w = 0; w < writers; ++w) {
    const ShardSpec spec = kind.Spec(write_parts, w);
    ASSERT_TRUE(WriteShard(*file, "t", spec, MakeLocal(spec, dtype)).ok())
        << spec.DebugString();
  }
  ASSERT_TRUE(file->Close().ok());
}

// The same by the checkpoint's raw path: every part defines the tensor in
// turn, then each writes its slice through its own writer.
void WriteAllPartsRaw(const std::string& path, const Kind& kind,
                      int64_t write_parts, DType dtype) {
  const int64_t writers = kind.dim < 0 ? 1 : write_parts;
  std::vector<TensorLocation> where;
  {
    absl::StatusOr<hdf5::File> file = hdf5::File::Create(path);
    ASSERT_TRUE(file.ok()) << file.status();
    for (int64_t w = 0; w < writers; ++w) {
      absl::StatusOr<TensorLocation> defined =
          DefineTensor(*file, "t", kind.shape, DType::kF32);
      ASSERT_TRUE(defined.ok()) << defined.status();
      where.push_back(*defined);
    }
    ASSERT_TRUE(file->Close().ok());
  }
  for (int64_t w = 0; w < writers; ++w) {
    const ShardSpec spec = kind.Spec(write_parts, w);
    absl::StatusOr<TensorFileWriter> writer = TensorFileWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->WriteShard(where[w], spec, MakeLocal(spec, dtype)).ok())
        << spec.DebugString();
    ASSERT_TRUE(writer->Close().ok());
  }
}

// The file holds exactly the logical tensor: float32, unpadded, every
// element written once and no padding value anywhere.
void ExpectFileHoldsLogicalTensor(const std::string& path, const Kind& kind,
                                  int64_t write_parts) {
  absl::StatusOr<hdf5::File> in = hdf5::File::Open(path);
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<hdf5::Dataset> dataset = in->OpenDataset("t");
  ASSERT_TRUE(dataset.ok());
  EXPECT_EQ(dataset->shape(), kind.shape);
  EXPECT_EQ(dataset->stored_type(), hdf5::StoredType::kF32);
  absl::StatusOr<Tensor> whole = dataset->ReadAll(DType::kF64);
  ASSERT_TRUE(whole.ok());
  for (int64_t i = 0; i < whole->numel(); ++i) {
    ASSERT_EQ(whole->data<double>()[i], LogicalValue(i))
        << "element " << i << " written by " << write_parts << " parts";
  }
}

// Every part of every tensor-parallel size that can split the tensor reads
// its elements back, leaving padding untouched.
void ExpectEveryLayoutReadsBack(
    const Kind& kind, DType dtype,
    const std::function<absl::Status(const ShardSpec&, Tensor&)>& read) {
  for (int64_t read_parts : {1, 2, 3, 4}) {
    if (kind.dim >= 0 && kind.padded_per == 0 &&
        kind.shape[kind.dim] % (kind.groups * read_parts) != 0) {
      continue;  // This size cannot split this tensor.
    }
    for (int64_t r = 0; r < read_parts; ++r) {
      const ShardSpec spec = kind.Spec(read_parts, r);
      Tensor local = Tensor::Empty(spec.LocalShape(), dtype);
      for (int64_t i = 0; i < local.numel(); ++i) {
        if (dtype == DType::kF64) {
          local.data<double>()[i] = kPadding;
        } else {
          local.data<float>()[i] = static_cast<float>(kPadding);
        }
      }
      const absl::Status status = read(spec, local);
      ASSERT_TRUE(status.ok()) << status;
      const Tensor want = MakeLocal(spec, dtype);
      ASSERT_EQ(std::memcmp(local.raw(), want.raw(), local.nbytes()), 0)
          << "read as " << spec.DebugString();
    }
  }
}

TEST_P(ShardIoTest, HyperslabsRoundTripAcrossTensorParallelSizes) {
  const Kind& kind = GetParam();
  const std::string path = test::ScratchDir() + "/shards.h5";
  for (int64_t write_parts : {1, 2, 4}) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      SCOPED_TRACE(absl::StrCat("written by ", write_parts, " parts from ",
                                DTypeName(dtype)));
      WriteAllParts(path, kind, write_parts, dtype);
      ExpectFileHoldsLogicalTensor(path, kind, write_parts);
      absl::StatusOr<hdf5::File> in = hdf5::File::Open(path);
      ASSERT_TRUE(in.ok());
      ExpectEveryLayoutReadsBack(kind, dtype,
                                 [&](const ShardSpec& spec, Tensor& local) {
                                   return ReadShard(*in, "t", spec, local);
                                 });
    }
  }
}

TEST_P(ShardIoTest, RawTensorFilesRoundTripAcrossTensorParallelSizes) {
  const Kind& kind = GetParam();
  const std::string path = test::ScratchDir() + "/shards.h5";
  for (int64_t write_parts : {1, 2, 4}) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      SCOPED_TRACE(absl::StrCat("written by ", write_parts, " parts from ",
                                DTypeName(dtype)));
      WriteAllPartsRaw(path, kind, write_parts, dtype);
      ExpectFileHoldsLogicalTensor(path, kind, write_parts);
      absl::StatusOr<TensorFileReader> reader = TensorFileReader::Open(path);
      ASSERT_TRUE(reader.ok()) << reader.status();
      absl::StatusOr<TensorLocation> where = reader->Locate("t");
      ASSERT_TRUE(where.ok()) << where.status();
      EXPECT_GE(where->offset, 0);
      ExpectEveryLayoutReadsBack(
          kind, dtype, [&](const ShardSpec& spec, Tensor& local) {
            return reader->ReadShard(*where, spec, local);
          });
      // Hyperslab reads agree with raw writes.
      absl::StatusOr<hdf5::File> in = hdf5::File::Open(path);
      ASSERT_TRUE(in.ok());
      ExpectEveryLayoutReadsBack(kind, dtype,
                                 [&](const ShardSpec& spec, Tensor& local) {
                                   return ReadShard(*in, "t", spec, local);
                                 });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, ShardIoTest,
    ::testing::Values(Kind{"replicated_2d", {3, 5}, -1, 1, 0},
                      Kind{"replicated_1d", {7}, -1, 1, 0},
                      Kind{"rows", {12, 3}, 0, 1, 0},
                      Kind{"columns", {3, 12}, 1, 1, 0},
                      Kind{"bias", {12}, 0, 1, 0},
                      Kind{"c_attn_weight", {4, 12}, 1, 3, 0},
                      Kind{"c_attn_bias", {12}, 0, 3, 0},
                      Kind{"padded_vocab", {10, 3}, 0, 1, 4},
                      Kind{"padded_vocab_to_128", {257, 2}, 0, 1, 128}),
    [](const ::testing::TestParamInfo<Kind>& info) { return info.param.name; });

TEST(ShardIoErrorTest, ShapeMismatchNamesFileTensorAndShapes) {
  const std::string path = test::ScratchDir() + "/small.h5";
  absl::StatusOr<hdf5::File> file = hdf5::File::Create(path);
  ASSERT_TRUE(file.ok());
  const ShardSpec small = ShardSpec::Replicated({4, 8});
  ASSERT_TRUE(WriteShard(*file, "h.0.attn.c_proj.weight", small,
                         MakeLocal(small, DType::kF32))
                  .ok());
  const ShardSpec big = ShardSpec::Split({8, 8}, 0, 2, 1);
  Tensor local = Tensor::Empty(big.LocalShape(), DType::kF32);
  const absl::Status status =
      ReadShard(*file, "h.0.attn.c_proj.weight", big, local);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr(path), HasSubstr("h.0.attn.c_proj.weight"),
                    HasSubstr("another size")));
  const absl::Status missing = ReadShard(*file, "wte", big, local);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.message()), HasSubstr("wte"));
  ASSERT_TRUE(file->Close().ok());

  // The raw path says the same.
  absl::StatusOr<TensorFileReader> reader = TensorFileReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const absl::StatusOr<TensorLocation> absent = reader->Locate("wte");
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(absent.status().message()),
              AllOf(HasSubstr(path), HasSubstr("wte")));
  absl::StatusOr<TensorLocation> where =
      reader->Locate("h.0.attn.c_proj.weight");
  ASSERT_TRUE(where.ok()) << where.status();
  const absl::Status raw = reader->ReadShard(*where, big, local);
  EXPECT_EQ(raw.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(raw.message()),
              AllOf(HasSubstr(path), HasSubstr("h.0.attn.c_proj.weight"),
                    HasSubstr("(4, 8)"), HasSubstr("(8, 8)")));
}

}  // namespace
}  // namespace trellis
