#include "framework/hdf5.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

namespace trellis::hdf5 {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

TEST(Hdf5Test, NdHyperslabRoundTrip) {
  const std::string path = TempPath("hdf5_nd.h5");
  {
    auto file = File::Create(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto dataset = file->CreateDataset("model/wte", DType::kF32, {4, 6, 5});
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    EXPECT_EQ(dataset->path(), "/model/wte");
    // Fill the whole tensor slab by slab: value = 100*i + 10*j + k.
    for (int64_t i = 0; i < 4; ++i) {
      Tensor slab = Tensor::Empty({1, 6, 5}, DType::kF32);
      float* v = slab.data<float>();
      for (int64_t j = 0; j < 6; ++j) {
        for (int64_t k = 0; k < 5; ++k) v[j * 5 + k] = 100 * i + 10 * j + k;
      }
      ASSERT_TRUE(dataset->WriteTensor({i, 0, 0}, slab).ok());
    }
    ASSERT_TRUE(file->Close().ok());
  }
  auto file = File::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto dataset = file->OpenDataset("/model/wte");
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->shape(), (Shape{4, 6, 5}));
  EXPECT_EQ(dataset->stored_type(), StoredType::kF32);
  // An interior block, read as float64 to exercise conversion.
  auto block = dataset->ReadTensor({1, 2, 3}, {2, 3, 2}, DType::kF64);
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_EQ(block->shape(), (Shape{2, 3, 2}));
  const double* b = block->data<double>();
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 2; ++k) {
        EXPECT_EQ(b[(i * 3 + j) * 2 + k],
                  100 * (i + 1) + 10 * (j + 2) + (k + 3));
      }
    }
  }
  auto all = dataset->ReadAll(DType::kF32);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->data<float>()[4 * 6 * 5 - 1], 354.0f);
}

TEST(Hdf5Test, SliceOutsideShapeNamesFilePathAndSlice) {
  const std::string path = TempPath("hdf5_range.h5");
  auto file = File::Create(path);
  ASSERT_TRUE(file.ok());
  auto dataset = file->CreateDataset("x", DType::kI32, {10});
  ASSERT_TRUE(dataset.ok());
  std::vector<int32_t> out(20);
  absl::Status status = dataset->Read({5}, {20}, DType::kI32, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(), HasSubstr(path + ": /x: read of [5, 25)"));
  status = dataset->Read({0, 0}, {1, 1}, DType::kI32, out.data());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Hdf5Test, ExtendableAppendAndConversion) {
  const std::string path = TempPath("hdf5_append.h5");
  {
    auto file = File::Create(path);
    ASSERT_TRUE(file.ok());
    auto dataset = file->CreateExtendableDataset("ids", StoredType::kU64, 3);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    std::vector<int64_t> a = {1, 2, 3, 4, 5};
    std::vector<int64_t> b = {6, 7};
    ASSERT_TRUE(dataset->Append(DType::kI64, a.data(), 5).ok());
    ASSERT_TRUE(dataset->Append(DType::kI64, b.data(), 2).ok());
    ASSERT_TRUE(dataset->Append(DType::kI64, nullptr, 0).ok());
    EXPECT_EQ(dataset->shape(), (Shape{7}));
    auto fixed = file->CreateDataset("fixed", DType::kI64, {2});
    ASSERT_TRUE(fixed.ok());
    EXPECT_FALSE(fixed->Append(DType::kI64, a.data(), 1).ok());
  }
  auto file = File::Open(path);
  ASSERT_TRUE(file.ok());
  auto dataset = file->OpenDataset("ids");
  ASSERT_TRUE(dataset.ok());
  EXPECT_TRUE(dataset->extendable());
  EXPECT_EQ(dataset->stored_type(), StoredType::kU64);
  EXPECT_EQ(dataset->stored_type_name(), "uint64");
  std::vector<int32_t> out(3);
  ASSERT_TRUE(dataset->Read({4}, {3}, DType::kI32, out.data()).ok());
  EXPECT_THAT(out, ElementsAre(5, 6, 7));
}

TEST(Hdf5Test, EveryDTypeRoundTrips) {
  const std::string path = TempPath("hdf5_dtypes.h5");
  auto file = File::Create(path);
  ASSERT_TRUE(file.ok());
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                      DType::kI32, DType::kI64, DType::kU16, DType::kU32}) {
    const std::string name = DTypeName(dtype);
    auto dataset = file->CreateDataset(name, dtype, {2, 3});
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    EXPECT_EQ(dataset->stored_type(), StoredTypeOf(dtype));
    // Bytes that are valid for every type: small integers, and for the
    // 16-bit floats the bit patterns of 1.0 (f16 0x3c00, bf16 0x3f80).
    Tensor in = Tensor::Empty({2, 3}, dtype);
    std::vector<unsigned char> bytes(in.nbytes(), 0);
    for (size_t i = 0; i < bytes.size(); i += DTypeSize(dtype)) {
      if (dtype == DType::kF16) bytes[i + 1] = 0x3c;
      if (dtype == DType::kBF16) bytes[i + 1] = 0x3f, bytes[i] = 0x80;
    }
    std::memcpy(in.raw(), bytes.data(), bytes.size());
    ASSERT_TRUE(dataset->WriteTensor({0, 0}, in).ok());
    auto out = dataset->ReadAll(dtype);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(std::memcmp(in.raw(), out->raw(), in.nbytes()), 0) << name;
  }
  // f16 converts to f32 numerically; bf16 refuses a float dataset.
  auto half = file->OpenDataset("float16");
  ASSERT_TRUE(half.ok());
  auto as_float = half->ReadAll(DType::kF32);
  ASSERT_TRUE(as_float.ok()) << as_float.status();
  EXPECT_EQ(as_float->data<float>()[5], 1.0f);
  auto f32 = file->OpenDataset("float32");
  ASSERT_TRUE(f32.ok());
  EXPECT_THAT(f32->ReadAll(DType::kBF16).status().message(),
              HasSubstr("bfloat16 needs a uint16 dataset"));
}

TEST(Hdf5Test, AttributesOnFileGroupAndDataset) {
  const std::string path = TempPath("hdf5_attrs.h5");
  {
    auto file = File::Create(path);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(file->WriteStringAttribute("tokenizer", "gpt2").ok());
    ASSERT_TRUE(file->WriteInt64Attribute("vocab_size", 50257).ok());
    ASSERT_TRUE(file->WriteInt64Attribute("vocab_size", 50304).ok());
    auto group = file->CreateGroup("a/b");
    ASSERT_TRUE(group.ok()) << group.status();
    ASSERT_TRUE(group->WriteDoubleAttribute("lr", 6e-4).ok());
    auto dataset = group->CreateDataset("w", DType::kF32, {1});
    ASSERT_TRUE(dataset.ok());
    EXPECT_EQ(dataset->path(), "/a/b/w");
    ASSERT_TRUE(dataset->WriteStringAttribute("note", "").ok());
  }
  auto file = File::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file->ReadStringAttribute("tokenizer"), "gpt2");
  EXPECT_EQ(*file->ReadInt64Attribute("vocab_size"), 50304);
  EXPECT_EQ(*file->ReadDoubleAttribute("vocab_size"), 50304.0);
  EXPECT_THAT(*file->ListAttributes(), ElementsAre("tokenizer", "vocab_size"));
  auto missing = file->ReadInt64Attribute("eot_token");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("eot_token"));
  auto wrong = file->ReadInt64Attribute("tokenizer");
  EXPECT_THAT(wrong.status().message(), HasSubstr("not an integer"));
  auto group = file->OpenGroup("/a/b");
  ASSERT_TRUE(group.ok());
  EXPECT_DOUBLE_EQ(*group->ReadDoubleAttribute("lr"), 6e-4);
  EXPECT_THAT(*group->ListMembers(), ElementsAre("w"));
  EXPECT_THAT(*file->ListMembers(), ElementsAre("a"));
  auto dataset = file->OpenDataset("a/b/w");
  ASSERT_TRUE(dataset.ok());
  EXPECT_EQ(*dataset->ReadStringAttribute("note"), "");
}

TEST(Hdf5Test, ExistsAndKindChecks) {
  const std::string path = TempPath("hdf5_exists.h5");
  auto file = File::Create(path);
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(file->CreateDataset("g/d", DType::kI32, {1}).ok());
  EXPECT_TRUE(file->Exists("g"));
  EXPECT_TRUE(file->Exists("/g/d"));
  EXPECT_FALSE(file->Exists("g/e"));
  EXPECT_FALSE(file->Exists("x/y/z"));
  EXPECT_EQ(file->OpenDataset("g").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->OpenGroup("g/d").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto missing = file->OpenDataset("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nope: no such dataset"));
}

TEST(Hdf5Test, BadFilesGiveClearErrors) {
  auto missing = File::Open(TempPath("does_not_exist.h5"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no such file"));

  const std::string text = TempPath("hdf5_text.h5");
  std::ofstream(text) << "just some text\n";
  auto not_hdf5 = File::Open(text);
  EXPECT_THAT(not_hdf5.status().message(), HasSubstr("not an HDF5 file"));

  auto unwritable = File::Create(TempPath("no_such_dir/x.h5"));
  EXPECT_FALSE(unwritable.ok());
  EXPECT_THAT(unwritable.status().message(), HasSubstr("creating file"));

  const std::string truncated = TempPath("hdf5_truncated.h5");
  {
    auto file = File::Create(truncated);
    ASSERT_TRUE(file.ok());
    auto dataset = file->CreateDataset("x", DType::kF64, {1000});
    ASSERT_TRUE(dataset.ok());
    std::vector<double> values(1000, 1.5);
    ASSERT_TRUE(dataset->Write({0}, {1000}, DType::kF64, values.data()).ok());
  }
  std::filesystem::resize_file(truncated,
                               std::filesystem::file_size(truncated) / 2);
  auto opened = File::Open(truncated);
  EXPECT_FALSE(opened.ok());
  EXPECT_THAT(opened.status().message(), HasSubstr(truncated));
}

}  // namespace
}  // namespace trellis::hdf5
