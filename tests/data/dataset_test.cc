#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "data/token_dataset.h"
#include "framework/hdf5.h"

namespace trellis {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

std::vector<int32_t> ToVector(const Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

const TokenFileMetadata kByte{"byte", 257, 256};

// Writes `docs` with tiny buffers and chunks so every path of the writer
// runs; returns the expected /tokens.
std::vector<int32_t> WriteDocs(const std::string& path,
                               const TokenFileMetadata& metadata,
                               const std::vector<std::vector<uint32_t>>& docs) {
  TokenDatasetWriter::Options options;
  options.buffer_tokens = 5;
  options.chunk_tokens = 3;
  auto writer = TokenDatasetWriter::Create(path, metadata, options);
  EXPECT_TRUE(writer.ok()) << writer.status();
  std::vector<int32_t> expected;
  for (const auto& doc : docs) {
    EXPECT_TRUE((*writer)->AppendDocument(doc).ok());
    expected.insert(expected.end(), doc.begin(), doc.end());
    expected.push_back(static_cast<int32_t>(metadata.eot_token));
  }
  EXPECT_EQ((*writer)->num_tokens(), static_cast<int64_t>(expected.size()));
  EXPECT_TRUE((*writer)->Finish().ok());
  return expected;
}

TEST(TokenDatasetTest, Uint16RoundTrip) {
  const std::string path = TempPath("tokens_u16.h5");
  const std::vector<std::vector<uint32_t>> docs = {
      {72, 105}, {}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {255}};
  const std::vector<int32_t> expected = WriteDocs(path, kByte, docs);
  auto dataset = TokenDataset::Open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->tokenizer(), "byte");
  EXPECT_EQ(dataset->vocab_size(), 257);
  EXPECT_EQ(dataset->eot_token(), 256);
  EXPECT_EQ(dataset->token_type(), hdf5::StoredType::kU16);
  EXPECT_EQ(dataset->num_tokens(), 19);
  EXPECT_EQ(dataset->num_documents(), 4);
  auto all = dataset->ReadTokens(0, dataset->num_tokens());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->dtype(), DType::kI32);
  EXPECT_THAT(ToVector(*all), ElementsAreArray(expected));
  auto middle = dataset->ReadTokens(3, 3);
  ASSERT_TRUE(middle.ok());
  EXPECT_THAT(ToVector(*middle), ElementsAre(256, 1, 2));
  EXPECT_THAT(*dataset->ReadDocOffsets(0, 4), ElementsAre(0, 3, 4, 17));
  EXPECT_EQ(dataset->ReadTokens(18, 3).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(TokenDatasetTest, Uint32RoundTripAndStreaming) {
  const std::string path = TempPath("tokens_u32.h5");
  const TokenFileMetadata metadata{"big", 100000, 99999};
  {
    auto writer = TokenDatasetWriter::Create(path, metadata, {4, 2});
    ASSERT_TRUE(writer.ok()) << writer.status();
    // One document streamed in three pieces, then one left open at Finish.
    std::vector<uint32_t> a = {70000, 1}, b = {65536}, c = {99998, 0, 5};
    ASSERT_TRUE((*writer)->AppendTokens(a).ok());
    ASSERT_TRUE((*writer)->AppendTokens(b).ok());
    ASSERT_TRUE((*writer)->AppendTokens(c).ok());
    ASSERT_TRUE((*writer)->EndDocument().ok());
    ASSERT_TRUE((*writer)->AppendTokens(a).ok());
    EXPECT_EQ((*writer)->num_documents(), 1);
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  auto dataset = TokenDataset::Open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ(dataset->token_type(), hdf5::StoredType::kU32);
  EXPECT_EQ(dataset->num_documents(), 2);
  auto all = dataset->ReadTokens(0, dataset->num_tokens());
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(ToVector(*all), ElementsAre(70000, 1, 65536, 99998, 0, 5, 99999,
                                          70000, 1, 99999));
  EXPECT_THAT(*dataset->ReadDocOffsets(0, 2), ElementsAre(0, 7));
}

TEST(TokenDatasetTest, WriterRejectsBadIdsAndMetadata) {
  const std::string path = TempPath("tokens_bad_ids.h5");
  auto writer = TokenDatasetWriter::Create(path, kByte);
  ASSERT_TRUE(writer.ok());
  std::vector<uint32_t> too_big = {1, 257};
  EXPECT_THAT((*writer)->AppendDocument(too_big).message(),
              HasSubstr("outside the vocabulary"));
  std::vector<uint32_t> eot = {256};
  EXPECT_THAT((*writer)->AppendDocument(eot).message(),
              HasSubstr("end-of-text"));
  EXPECT_FALSE(TokenDatasetWriter::Create(path, {"byte", 257, 257}).ok());
  EXPECT_FALSE(TokenDatasetWriter::Create(path, {"", 257, 1}).ok());
  auto unwritable =
      TokenDatasetWriter::Create(TempPath("no/such/dir/t.h5"), kByte);
  EXPECT_THAT(unwritable.status().message(), HasSubstr("no/such/dir/t.h5"));
}

TEST(TokenDatasetTest, WindowContentsAreExact) {
  const std::string path = TempPath("tokens_windows.h5");
  std::vector<std::vector<uint32_t>> docs;
  for (uint32_t d = 0; d < 10; ++d) {
    docs.push_back({});
    for (uint32_t i = 0; i <= d; ++i) docs.back().push_back((d * 7 + i) % 256);
  }
  const std::vector<int32_t> tokens = WriteDocs(path, kByte, docs);
  auto dataset = TokenDataset::Open(path);
  ASSERT_TRUE(dataset.ok());
  auto windows = TokenWindows::Make(dataset->num_tokens(), 8, 0.2);
  ASSERT_TRUE(windows.ok());
  for (int64_t w = 0; w < windows->num_windows(); ++w) {
    auto got = dataset->ReadTokens(windows->WindowStart(w), 9);
    ASSERT_TRUE(got.ok());
    std::vector<int32_t> want(tokens.begin() + 8 * w,
                              tokens.begin() + 8 * w + 9);
    EXPECT_THAT(ToVector(*got), ElementsAreArray(want)) << "window " << w;
  }
}

// ---------------------------------------------------------------- bad files

// A file shaped by the caller: the attributes always, /tokens of `type`
// holding `tokens`, /doc_offsets {0} unless `offsets` is false.
void WriteRaw(const std::string& path, hdf5::StoredType type,
              const std::vector<int64_t>& tokens, bool offsets = true,
              bool attributes = true) {
  auto file = hdf5::File::Create(path);
  ASSERT_TRUE(file.ok());
  if (attributes) {
    ASSERT_TRUE(file->WriteStringAttribute("tokenizer", "byte").ok());
    ASSERT_TRUE(file->WriteInt64Attribute("vocab_size", 257).ok());
    ASSERT_TRUE(file->WriteInt64Attribute("eot_token", 256).ok());
  }
  auto data = file->CreateDataset("tokens", type,
                                  {static_cast<int64_t>(tokens.size())});
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(data->Write({0}, {static_cast<int64_t>(tokens.size())},
                          DType::kI64, tokens.data())
                  .ok());
  if (offsets) {
    auto offs = file->CreateDataset("doc_offsets", hdf5::StoredType::kU64, {1});
    ASSERT_TRUE(offs.ok());
    const int64_t zero = 0;
    ASSERT_TRUE(offs->Write({0}, {1}, DType::kI64, &zero).ok());
  }
}

void ExpectOpenFails(const std::string& path, const std::string& what) {
  auto dataset = TokenDataset::Open(path);
  ASSERT_FALSE(dataset.ok());
  EXPECT_THAT(dataset.status().message(), HasSubstr(path));
  EXPECT_THAT(dataset.status().message(), HasSubstr(what));
  EXPECT_EQ(dataset.status().message().find('\n'), absl::string_view::npos);
}

TEST(TokenDatasetTest, RawFileWithTheRightShapeOpens) {
  const std::string path = TempPath("raw_good.h5");
  WriteRaw(path, hdf5::StoredType::kU16, {1, 2, 256});
  EXPECT_TRUE(TokenDataset::Open(path).ok());
}

TEST(TokenDatasetTest, MissingFile) {
  ExpectOpenFails(TempPath("nope.h5"), "no such token file");
}

TEST(TokenDatasetTest, NotHdf5) {
  const std::string path = TempPath("not_hdf5.h5");
  std::ofstream(path) << "In the beginning\n";
  ExpectOpenFails(path, "not an HDF5 file");
}

TEST(TokenDatasetTest, MissingTokensAndOffsets) {
  const std::string path = TempPath("no_tokens.h5");
  {
    auto file = hdf5::File::Create(path);
    ASSERT_TRUE(file.ok());
  }
  ExpectOpenFails(path,
                  "no /tokens dataset (was it written by "
                  "trellis-preprocess?");
  WriteRaw(path, hdf5::StoredType::kU16, {256}, /*offsets=*/false);
  ExpectOpenFails(path, "no /doc_offsets dataset");
}

TEST(TokenDatasetTest, MissingAttribute) {
  const std::string path = TempPath("no_attrs.h5");
  WriteRaw(path, hdf5::StoredType::kU16, {256}, true, /*attributes=*/false);
  ExpectOpenFails(path, "no root attribute 'tokenizer'");
}

TEST(TokenDatasetTest, WrongDtype) {
  const std::string path = TempPath("wrong_dtype.h5");
  WriteRaw(path, hdf5::StoredType::kI64, {1, 256});
  ExpectOpenFails(path, "/tokens is 1-D int64; it must be 1-D uint16");
}

TEST(TokenDatasetTest, EmptyFile) {
  const std::string path = TempPath("empty.h5");
  auto writer = TokenDatasetWriter::Create(path, kByte);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  ExpectOpenFails(path, "holds no tokens");
}

TEST(TokenDatasetTest, IdsOutOfRange) {
  const std::string path = TempPath("ids_out_of_range.h5");
  WriteRaw(path, hdf5::StoredType::kU16, {1, 300, 256});
  ExpectOpenFails(path, "token 1 is 300, outside the vocabulary");
}

// An id the 16 sampled blocks miss: Open passes, but reading the window
// that holds it fails instead of handing the id to the model.
TEST(TokenDatasetTest, IdOutsideTheSampledBlocksFailsItsRead) {
  const std::string path = TempPath("ids_out_of_range_unsampled.h5");
  std::vector<int64_t> tokens(200000, 7);
  tokens.back() = 256;
  tokens[8000] = 300;  // between the blocks at 0 and 13060
  WriteRaw(path, hdf5::StoredType::kU16, tokens);
  auto dataset = TokenDataset::Open(path);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_TRUE(dataset->ReadTokens(7000, 1000).ok());
  auto bad = dataset->ReadTokens(7990, 20);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("token 8000 is 300, outside the vocabulary [0, 257)"));
  std::vector<int32_t> window(9);
  EXPECT_FALSE(dataset->ReadTokens(7995, 9, window.data()).ok());
}

TEST(TokenDatasetTest, WriterRecordsMaxIdAndReaderChecksIt) {
  const std::string path = TempPath("max_token_id.h5");
  WriteDocs(path, kByte, {{3, 200}, {17}});
  {
    auto file = hdf5::File::Open(path);
    ASSERT_TRUE(file.ok());
    auto max_id = file->ReadInt64Attribute("max_token_id");
    ASSERT_TRUE(max_id.ok()) << max_id.status();
    EXPECT_EQ(*max_id, 256);  // the EOT is the largest id here
  }
  WriteRaw(path, hdf5::StoredType::kU16, {1, 2, 256});
  {
    auto file = hdf5::File::Open(path, hdf5::OpenMode::kReadWrite);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(file->WriteInt64Attribute("max_token_id", 40000).ok());
  }
  ExpectOpenFails(path, "max_token_id 40000 is outside the vocabulary");
}

TEST(TokenDatasetTest, LastTokenNotEot) {
  const std::string path = TempPath("no_final_eot.h5");
  WriteRaw(path, hdf5::StoredType::kU16, {1, 2});
  ExpectOpenFails(path, "not the end-of-text token");
}

TEST(TokenDatasetTest, TruncatedFile) {
  const std::string path = TempPath("truncated.h5");
  std::vector<std::vector<uint32_t>> docs(50, std::vector<uint32_t>(100, 7));
  WriteDocs(path, kByte, docs);
  ASSERT_TRUE(TokenDataset::Open(path).ok());
  const auto size = std::filesystem::file_size(path);
  for (auto keep : {size - 1, size / 2, uintmax_t{100}, uintmax_t{0}}) {
    std::filesystem::resize_file(path, keep);
    auto dataset = TokenDataset::Open(path);
    ASSERT_FALSE(dataset.ok()) << "kept " << keep << " bytes";
    EXPECT_THAT(dataset.status().message(), HasSubstr(path));
  }
}

}  // namespace
}  // namespace trellis
