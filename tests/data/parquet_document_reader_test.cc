// DocumentReader on Parquet: a row a document in file order whatever the
// thread count, null rows and empty strings no document, rows that are not
// UTF-8 failing or skipped by --on_bad_line, long rows cut into pieces,
// the first error in input order, and cancellation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/document_reader.h"
#include "data/parquet/parquet_file.h"
#include "tests/data/parquet_test_util.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
namespace pt = parquet_testing;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kSeeds =
    std::string(TRELLIS_SOURCE_DIR) + "/tests/data/testdata/parquet/";

struct Read {
  std::vector<std::string> docs;
  absl::Status status;
  int64_t null_rows = 0, skipped_rows = 0;
  std::vector<std::string> first_skipped;
  int pieces = 0;
};

Read ReadAll(const std::vector<std::string>& files, int threads,
             BadLines bad = BadLines::kFail,
             const std::string& column = "text") {
  DocumentReader::Options options;
  options.threads = threads;
  options.bad_lines = bad;
  options.parquet_column = column;
  DocumentReader reader(files, options);
  Read out;
  std::string doc;
  out.status = reader.Run(
      [&](Piece&& piece) {
        ++out.pieces;
        doc += piece.text;
        if (piece.ends_document) out.docs.push_back(std::move(doc));
        if (piece.ends_document) doc.clear();
      },
      [](int64_t) { return true; });
  out.null_rows = reader.null_rows();
  out.skipped_rows = reader.skipped_rows();
  out.first_skipped = reader.first_skipped();
  return out;
}

// The non-null, non-empty values of a file's column, in order.
std::vector<std::string> Values(const std::string& path) {
  std::vector<std::string> values;
  absl::StatusOr<std::unique_ptr<parquet::ParquetFile>> file =
      parquet::ParquetFile::Open(path, "text");
  EXPECT_TRUE(file.ok()) << file.status();
  for (int g = 0; file.ok() && g < (*file)->num_row_groups(); ++g) {
    absl::StatusOr<parquet::ColumnText> text = (*file)->ReadRowGroup(g);
    EXPECT_TRUE(text.ok());
    for (size_t i = 0; text.ok() && i < text->values.size(); ++i) {
      if (!text->values[i].empty()) values.emplace_back(text->values[i]);
    }
  }
  return values;
}

class ParquetDocumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat(
               "trellis_parquet_docs.",
               ::testing::UnitTest::GetInstance()->current_test_info()->name(),
               ".", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  fs::path dir_;
};

TEST_F(ParquetDocumentsTest, RowsAreDocumentsInOrderWhateverTheThreads) {
  const std::vector<std::string> parquet = {
      kSeeds + "prose_v1_snappy.parquet", kSeeds + "repeated_v1_zstd.parquet",
      kSeeds + "wasm_v2_delta_byte_array_zstd.parquet",
      kSeeds + "repeated_v2_snappy.parquet", kSeeds + "prose_v2_zstd.parquet"};
  // A plain text file between Parquet files ends one run of them.
  std::vector<std::string> files = parquet;
  files.insert(files.begin() + 2, Write("between.txt", "between"));
  std::vector<std::string> expected;
  for (const std::string& file : files) {
    const std::vector<std::string> values =
        parquet::IsParquetPath(file) ? Values(file)
                                     : std::vector<std::string>{"between"};
    expected.insert(expected.end(), values.begin(), values.end());
  }
  const Read one = ReadAll(files, 1);
  ASSERT_TRUE(one.status.ok()) << one.status;
  EXPECT_EQ(one.docs, expected);
  // Nulls: prose 6 of 60 rows each, repeated 410 + 10 of 2100 each.
  EXPECT_EQ(one.null_rows, 6 + 420 + 6 + 420 + 6);
  for (int threads : {2, 4}) {
    const Read many = ReadAll(files, threads);
    ASSERT_TRUE(many.status.ok()) << many.status;
    EXPECT_EQ(many.docs, one.docs);
    EXPECT_EQ(many.null_rows, one.null_rows);
  }
}

TEST_F(ParquetDocumentsTest, RowsThatAreNotUtf8FailOrAreSkipped) {
  const std::string types = kSeeds + "types.parquet";
  const Read fail = ReadAll({types}, 2, BadLines::kFail, "raw");
  EXPECT_THAT(fail.status.message(),
              HasSubstr(types + ": row group 0 row 3 (row 3 of the file): "
                                "not valid UTF-8 at byte 1"));
  const Read skip = ReadAll({types}, 2, BadLines::kSkip, "raw");
  ASSERT_TRUE(skip.status.ok()) << skip.status;
  EXPECT_EQ(skip.skipped_rows, 2);
  EXPECT_EQ(skip.docs.size(), 8u);
  EXPECT_EQ(skip.docs[3], "raw 4");
  ASSERT_EQ(skip.first_skipped.size(), 2u);
  EXPECT_THAT(skip.first_skipped[1], HasSubstr("row group 0 row 7"));
}

TEST_F(ParquetDocumentsTest, LongRowsAreCutIntoPiecesThatRejoin) {
  std::string long_row;
  for (int i = 0; long_row.size() < 3 * DocumentReader::kPieceBytes; ++i) {
    absl::StrAppend(&long_row, "word", i, " ");
  }
  pt::File file;
  file.groups = {{{pt::Page::kV1, 3, 0, 0, 3,
                   [] {
                     std::string levels;
                     const std::string run = pt::RleRun(1, 3, 1);
                     pt::PutU32(levels, static_cast<uint32_t>(run.size()));
                     return levels + run;
                   }(),
                   pt::PlainByteArrays({"short", long_row, ""})}}};
  file.rows = {3};
  const Read read = ReadAll({Write("long.parquet", pt::BuildFile(file))}, 2);
  ASSERT_TRUE(read.status.ok()) << read.status;
  EXPECT_THAT(read.docs, ElementsAre("short", long_row));
  EXPECT_GE(read.pieces, 4);
}

TEST_F(ParquetDocumentsTest, TheFirstErrorInInputOrderEndsTheRead) {
  pt::File empty;  // no row groups: no documents, no error
  const std::vector<std::string> files = {
      kSeeds + "prose_v1_snappy.parquet",
      Write("empty.parquet", pt::BuildFile(empty)),
      kSeeds + "prose_v1_gzip.parquet", Write("bad.parquet", "not parquet"),
      Write("worse.parquet", "")};
  for (int threads : {1, 4}) {
    const Read read = ReadAll(files, threads);
    EXPECT_THAT(
        read.status.message(),
        HasSubstr((dir_ / "bad.parquet").string() + ": not a Parquet file"));
    EXPECT_EQ(read.docs.size(), 2 * Values(files[0]).size());
  }
}

TEST_F(ParquetDocumentsTest, CancellingStopsTheDecodingThreads) {
  DocumentReader::Options options;
  options.threads = 4;
  std::vector<std::string> files(20, kSeeds + "repeated_v2_snappy.parquet");
  DocumentReader reader(files, options);
  int calls = 0;
  const absl::Status status =
      reader.Run([](Piece&&) {}, [&](int64_t) { return ++calls < 3; });
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace trellis
