// ParquetFile: DuckDB-written files (tests/data/testdata/parquet/) and
// hand-built ones decode to their rows; columns it cannot read are refused
// by name; every truncation and every single-byte corruption of a real file
// ends in a one-line error naming the file, or decodes, and never reads out
// of bounds (this file also runs under AddressSanitizer, as
// parquet_reader_asan_tests).
#include "data/parquet/parquet_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/parquet/metadata.h"
#include "tests/data/parquet_test_util.h"

namespace trellis::parquet {
namespace {

using namespace std::string_literals;

namespace fs = std::filesystem;
namespace pt = parquet_testing;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Rows = std::vector<std::optional<std::string>>;

const std::string kSeeds =
    std::string(TRELLIS_SOURCE_DIR) + "/tests/data/testdata/parquet";
// Small, so that a corrupted count cannot make a test slow.
constexpr ReadLimits kSmall{size_t{4} << 20, 64, size_t{1} << 20};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Column {
  absl::Status status;
  Rows rows;
  uint32_t page_types = 0, encodings = 0;
};

// Every row group of `column`, nulls in place.
Column ReadColumn(const std::string& path, const std::string& column = "text",
                  const ReadLimits& limits = kSmall) {
  Column out;
  absl::StatusOr<std::unique_ptr<ParquetFile>> file =
      ParquetFile::Open(path, column, limits);
  if (!file.ok()) {
    out.status = file.status();
    return out;
  }
  for (int g = 0; g < (*file)->num_row_groups(); ++g) {
    absl::StatusOr<ColumnText> text = (*file)->ReadRowGroup(g);
    if (!text.ok()) {
      out.status = text.status();
      return out;
    }
    out.page_types |= text->page_types;
    out.encodings |= text->encodings;
    size_t next = 0;
    for (size_t v = 0; v <= text->values.size(); ++v) {
      for (; next < text->nulls.size() && text->nulls[next].before_value <= v;
           ++next) {
        out.rows.insert(out.rows.end(), text->nulls[next].count, std::nullopt);
      }
      if (v < text->values.size()) out.rows.emplace_back(text->values[v]);
    }
    EXPECT_EQ(out.rows.size(), (*file)->first_row(g) + (*file)->num_rows(g));
  }
  return out;
}

class ParquetFileTest : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat(
               "trellis_parquet_file.",
               ::testing::UnitTest::GetInstance()->current_test_info()->name(),
               ".", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // (A new file each time: ext4 flushes a file truncated and rewritten in
  // place when it is closed, which would make the loops below slow.)
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    fs::remove(path);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  fs::path dir_;
};

TEST_F(ParquetFileTest, DuckDbFilesDecodeEveryRowGroup) {
  int files = 0;
  uint32_t page_types = 0, encodings = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(kSeeds)) {
    const std::string path = entry.path().string();
    const Column column = ReadColumn(path);
    ASSERT_TRUE(column.status.ok()) << column.status;
    EXPECT_GE(column.rows.size(), 10u) << path;
    page_types |= column.page_types;
    encodings |= column.encodings;
    ++files;
  }
  EXPECT_EQ(files, 10);
  // Both data page versions and a dictionary page, and every encoding of
  // strings: PLAIN, PLAIN_DICTIONARY, DELTA_LENGTH_BYTE_ARRAY,
  // DELTA_BYTE_ARRAY, RLE_DICTIONARY.
  EXPECT_EQ(page_types, (1u << 0) | (1u << 2) | (1u << 3));
  EXPECT_EQ(encodings,
            (1u << 0) | (1u << 2) | (1u << 6) | (1u << 7) | (1u << 8));
  const Column prose = ReadColumn(kSeeds + "/prose_v2_zstd.parquet");
  ASSERT_EQ(prose.rows.size(), 60u);
  EXPECT_EQ(prose.rows[3], std::nullopt);  // every 11th row from 3 is null
  EXPECT_EQ(prose.rows[5], "");            // and row 5 empty
  ASSERT_TRUE(prose.rows[4].has_value());
  EXPECT_EQ(ReadColumn(kSeeds + "/prose_v1_gzip.parquet").rows, prose.rows);
}

TEST_F(ParquetFileTest, DeltaByteArrayPagesOfBothVersionsDecode) {
  const std::string values = pt::DeltaBinaryPacked({0, 2, 0, 3}) +
                             pt::DeltaBinaryPacked({4, 2, 6, 5}) +
                             "axislebabbleyhood";
  pt::File required;
  required.columns[0].repetition = 0;
  required.groups = {{{pt::Page::kV1, 4, 0, 7, 3, "", values}}};
  required.rows = {4};
  EXPECT_THAT(
      ReadColumn(Write("required.parquet", pt::BuildFile(required))).rows,
      ElementsAre("axis", "axle", "babble", "babyhood"));
  // Nullable: a v2 page (levels without a length), then a v1 page (with
  // one) in a second row group.
  pt::File nullable;
  std::string v1_levels;
  const std::string packed = pt::BitPackedRun({1, 0, 1, 1}, 1);
  pt::PutU32(v1_levels, static_cast<uint32_t>(packed.size()));
  nullable.groups = {{{pt::Page::kV2, 6, 2, 7, 3,
                       pt::BitPackedRun({1, 0, 1, 0, 1, 1}, 1), values}},
                     {{pt::Page::kV1, 4, 0, 0, 3, v1_levels + packed,
                       pt::PlainByteArrays({"p", "q", "r"})}}};
  nullable.rows = {6, 4};
  const Column column =
      ReadColumn(Write("nullable.parquet", pt::BuildFile(nullable)));
  ASSERT_TRUE(column.status.ok()) << column.status;
  EXPECT_THAT(column.rows,
              ElementsAre("axis", std::nullopt, "axle", std::nullopt, "babble",
                          "babyhood", "p", std::nullopt, "q", "r"));
  EXPECT_EQ(column.encodings, (1u << 0) | (1u << 7));
}

TEST_F(ParquetFileTest, DictionaryPagesMayFallBackToPlainInOneChunk) {
  pt::File file;
  std::string all_present, one_null;
  const std::string present = pt::RleRun(1, 3, 1);
  pt::PutU32(all_present, static_cast<uint32_t>(present.size()));
  const std::string mixed = pt::BitPackedRun({0, 1}, 1);
  pt::PutU32(one_null, static_cast<uint32_t>(mixed.size()));
  file.groups = {{
      {pt::Page::kDictionary, 2, 0, 0, 3, "", pt::PlainByteArrays({"x", "yy"})},
      {pt::Page::kV1, 3, 0, 8, 3, all_present + present,
       "\x01"s + pt::BitPackedRun({1, 0, 1}, 1)},
      {pt::Page::kV1, 2, 0, 0, 3, one_null + mixed,
       pt::PlainByteArrays({"zzz"})},
  }};
  file.rows = {5};
  EXPECT_THAT(ReadColumn(Write("f.parquet", pt::BuildFile(file))).rows,
              ElementsAre("yy", "x", "yy", std::nullopt, "zzz"));
}

// The error of opening a hand-built file whose schema is `columns`.
std::string OpenError(ParquetFileTest& test, std::vector<pt::Column> columns,
                      int top_level, size_t leaves,
                      const std::string& column = "text") {
  pt::File file;
  file.columns = std::move(columns);
  file.top_level = top_level;
  file.leaves = leaves;
  const std::string path = test.Write("f.parquet", pt::BuildFile(file));
  absl::StatusOr<std::unique_ptr<ParquetFile>> opened =
      ParquetFile::Open(path, column);
  EXPECT_FALSE(opened.ok());
  if (opened.ok()) return "";
  EXPECT_THAT(std::string(opened.status().message()), StartsWith(path + ": "));
  return std::string(opened.status().message());
}

TEST_F(ParquetFileTest, ColumnsItCannotReadAreRefusedByName) {
  EXPECT_THAT(OpenError(*this, {{"alpha"}, {"beta"}}, 2, 2),
              HasSubstr("no column \"text\"; its columns are \"alpha\", "
                        "\"beta\" (choose one with --parquet_column)"));
  // Names from the file are shown on one line.
  EXPECT_THAT(OpenError(*this, {{"a\nb"}}, 1, 1),
              HasSubstr("its columns are \"a\\x0ab\""));
  EXPECT_THAT(OpenError(*this, {{"text", 2}}, 1, 1),
              HasSubstr("column \"text\" is INT64, not a string"));
  EXPECT_THAT(
      OpenError(*this, {{"text", std::nullopt, 1, 1, std::nullopt}, {"inner"}},
                1, 1),
      HasSubstr("is nested (a struct of 1 field)"));
  EXPECT_THAT(
      OpenError(*this, {{"text", std::nullopt, 1, 1, 3}, {"element"}}, 1, 1),
      HasSubstr("is nested (a list)"));
  EXPECT_THAT(OpenError(*this, {{"text", 6, 2}}, 1, 1),
              HasSubstr("is repeated (a list)"));
  EXPECT_THAT(OpenError(*this, {{"text", 6, 1, 0, 5}}, 1, 1),
              HasSubstr("annotated as DECIMAL, not as text"));
  pt::File lz4;
  lz4.codec = 5;
  lz4.groups = {{}};
  lz4.rows = {0};
  EXPECT_THAT(
      ReadColumn(Write("lz4.parquet", pt::BuildFile(lz4))).status.ToString(),
      HasSubstr("row group 0: the LZ4 codec is not supported"));
  pt::File bit_packed;
  bit_packed.groups = {{{pt::Page::kV1, 1, 0, 0, 4, "\x01", "x"}}};
  bit_packed.rows = {1};
  EXPECT_THAT(ReadColumn(Write("bp.parquet", pt::BuildFile(bit_packed)))
                  .status.ToString(),
              HasSubstr("definition levels in BIT_PACKED encoding"));
}

TEST_F(ParquetFileTest, ARowGroupPastItsMemoryBudgetIsRefusedWithTheFix) {
  pt::File file;
  file.columns[0].repetition = 0;
  std::string indices = "\x00"s;
  indices += pt::RleRun(0, uint64_t{1} << 30, 0);
  file.groups = {{
      {pt::Page::kDictionary, 1, 0, 0, 3, "",
       pt::PlainByteArrays({std::string(1000, 'x')})},
      {pt::Page::kV1, 1 << 30, 0, 8, 3, "", indices},
  }};
  file.rows = {1 << 30};
  const Column column = ReadColumn(Write("f.parquet", pt::BuildFile(file)),
                                   "text", {size_t{1} << 20, 1, 1 << 20});
  EXPECT_TRUE(absl::IsResourceExhausted(column.status)) << column.status;
  EXPECT_THAT(column.status.ToString(),
              HasSubstr("rewrite the file with smaller row groups"));
}

// Where the first page of a file's only row group starts, and its header
// size.
std::pair<int64_t, size_t> FirstPage(const std::string& bytes) {
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + bytes.size() - 8, 4);
  absl::StatusOr<FileMetaData> meta = ParseFileMetaData(
      std::string_view(bytes).substr(bytes.size() - 8 - length, length));
  EXPECT_TRUE(meta.ok());
  absl::StatusOr<ColumnChunk> chunk =
      ParseColumnChunk(meta->row_groups[0].columns[0]);
  const int64_t start =
      chunk->dictionary_page_offset.value_or(chunk->data_page_offset);
  absl::StatusOr<PageHeader> header =
      ParsePageHeader(std::string_view(bytes).substr(start));
  EXPECT_TRUE(header.ok());
  return {start, header->header_size};
}

TEST_F(ParquetFileTest, CorruptFootersPageHeadersAndPagesSayWhich) {
  const std::string snappy = ReadFile(kSeeds + "/prose_v1_snappy.parquet");
  const auto error = [&](const std::string& bytes) {
    const std::string path = Write("bad.parquet", bytes);
    const Column column = ReadColumn(path);
    EXPECT_THAT(std::string(column.status.message()), StartsWith(path + ": "));
    return std::string(column.status.message());
  };
  EXPECT_THAT(error("text, not Parquet\n"), HasSubstr("not a Parquet file"));
  EXPECT_THAT(error(snappy.substr(0, snappy.size() - 1)),
              HasSubstr("does not end with PAR1"));
  std::string footer = snappy;
  footer[footer.size() - 5] = '\x7F';  // the footer's length's top byte
  EXPECT_THAT(error(footer), HasSubstr("a truncated footer"));
  footer = snappy;
  uint32_t length = 0;
  std::memcpy(&length, snappy.data() + snappy.size() - 8, 4);
  footer[footer.size() - 8 - length] = '\x0F';
  EXPECT_THAT(error(footer), HasSubstr("a corrupt footer (malformed Thrift"));
  for (const char* name :
       {"prose_v1_snappy", "prose_v1_gzip", "repeated_v1_zstd"}) {
    const std::string bytes = ReadFile(kSeeds + "/" + name + ".parquet");
    const auto [start, header_size] = FirstPage(bytes);
    std::string bad = bytes;
    bad[start] = '\x0F';
    EXPECT_THAT(error(bad),
                HasSubstr(absl::StrCat("row group 0: the page at byte ", start,
                                       ": a bad page header")));
    bad = bytes;
    for (size_t i = 0; i < 4; ++i) bad[start + header_size + i] = '\xFF';
    EXPECT_THAT(error(bad), HasSubstr("page does not decompress")) << name;
  }
}

// A file in memory (memfd), rewritten for each variant of a file: the
// loops below read thousands.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("parquet_test", 0)) { EXPECT_GE(fd_, 0); }
  ~MemoryFile() { ::close(fd_); }
  std::string Write(const std::string& bytes) {
    EXPECT_EQ(::ftruncate(fd_, 0), 0);
    EXPECT_EQ(::pwrite(fd_, bytes.data(), bytes.size(), 0),
              static_cast<ssize_t>(bytes.size()));
    return absl::StrCat("/proc/self/fd/", fd_);
  }

 private:
  int fd_;
};

// Opens and decodes `bytes` as a file: a clean one-line error naming it,
// or rows; never a crash.
void ExpectCleanOutcome(MemoryFile& file, const std::string& bytes,
                        const std::string& what) {
  const std::string path = file.Write(bytes);
  absl::Status status;
  absl::StatusOr<std::unique_ptr<ParquetFile>> opened =
      ParquetFile::Open(path, "text", kSmall);
  status = opened.status();
  for (int g = 0; status.ok() && g < (*opened)->num_row_groups(); ++g) {
    status = (*opened)->ReadRowGroup(g).status();
  }
  if (status.ok()) return;
  const std::string message(status.message());
  EXPECT_THAT(message, StartsWith(path + ": ")) << what;
  EXPECT_EQ(message.find('\n'), std::string::npos) << what << ": " << message;
}

TEST_F(ParquetFileTest, EveryTruncationFailsWithOneLine) {
  for (const char* name : {"prose_v2_zstd", "repeated_v1_zstd", "types",
                           "wasm_v1_required_dictionary_gzip"}) {
    const std::string bytes = ReadFile(kSeeds + "/" + name + ".parquet");
    MemoryFile file;
    for (size_t size = 0; size < bytes.size(); ++size) {
      const std::string path = file.Write(bytes.substr(0, size));
      const Column column = ReadColumn(path);
      ASSERT_FALSE(column.status.ok()) << name << " cut to " << size;
      EXPECT_THAT(std::string(column.status.message()),
                  StartsWith(path + ": "));
    }
  }
}

TEST_F(ParquetFileTest, EveryByteCorruptionFailsCleanlyOrDecodes) {
  for (const char* name :
       {"prose_v1_snappy", "prose_v2_zstd", "dictionary_v1_snappy",
        "wasm_v2_delta_byte_array_zstd"}) {
    const std::string bytes = ReadFile(kSeeds + "/" + name + ".parquet");
    MemoryFile file;
    for (size_t at = 0; at < bytes.size(); ++at) {
      for (const char flip : {'\xFF', '\x01'}) {
        std::string bad = bytes;
        bad[at] = static_cast<char>(bad[at] ^ flip);
        ExpectCleanOutcome(file, bad, absl::StrCat(name, " byte ", at));
      }
    }
  }
}

}  // namespace
}  // namespace trellis::parquet
