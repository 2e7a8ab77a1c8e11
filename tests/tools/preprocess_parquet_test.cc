// trellis-preprocess on Parquet written by two writers independent of
// trellis's reader, DuckDB and parquet-wasm (tests/tools/parquet_writer.mjs
// under node): for each data set, encoding, codec, page version, null
// pattern and row-group layout the token file equals the one made from the
// same text as JSON Lines, token for token; many files on one thread or
// four, taken by a glob over nested directories, give one token file; and
// each kind of bad input ends with one line naming the file, a nonzero exit
// and no output. Skips when node, npm or the network is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/parquet/metadata.h"
#include "data/parquet/parquet_file.h"
#include "data/sha256.h"
#include "data/token_dataset.h"
#include "nlohmann/json.hpp"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct Result {
  int exit_code = -1;
  std::string err;
};

Result Preprocess(const std::string& dir, const std::vector<std::string>& args,
                  int threads = 2) {
  std::string command = absl::StrCat(
      TRELLIS_BINARY_DIR, "/bin/trellis-preprocess --threads=", threads);
  for (const std::string& arg : args) absl::StrAppend(&command, " '", arg, "'");
  const std::string err_path = dir + "/stderr.txt";
  absl::StrAppend(&command, " >/dev/null 2>", err_path);
  const int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  r.err.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

// /tokens and /doc_offsets of a token file.
std::pair<std::vector<int32_t>, std::vector<int64_t>> Contents(
    const std::string& path) {
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(path);
  EXPECT_TRUE(data.ok()) << data.status();
  if (!data.ok()) return {};
  std::vector<int32_t> tokens(data->num_tokens());
  EXPECT_TRUE(data->ReadTokens(0, data->num_tokens(), tokens.data()).ok());
  absl::StatusOr<std::vector<int64_t>> offsets =
      data->ReadDocOffsets(0, data->num_documents());
  EXPECT_TRUE(offsets.ok());
  return {tokens, *offsets};
}

// The writers' files, made once per version of the writer script and kept
// in the build directory (each test runs in a process of its own).
struct Written {
  std::string dir, skip, error;
  nlohmann::json manifest;
};

Written Write() {
  Written w;
  const std::string root = TRELLIS_SOURCE_DIR;
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    w.skip = "node is not installed; cannot run the Parquet writers";
    return w;
  }
  const std::string package = root + "/third_party_assets/parquet-writers-js";
  if (!fs::exists(package + "/node_modules/parquet-wasm/package.json") &&
      std::system(
          ("'" + root + "/scripts/fetch-parquet-writers-js.sh' >&2").c_str()) !=
          0) {
    w.skip = "scripts/fetch-parquet-writers-js.sh failed (no npm or network)";
    return w;
  }
  const std::string script = root + "/tests/tools/parquet_writer.mjs";
  absl::StatusOr<std::string> hash = Sha256OfFile(script);
  if (!hash.ok()) {
    w.error = std::string(hash.status().message());
    return w;
  }
  w.dir = absl::StrCat(TRELLIS_BINARY_DIR, "/parquet-writer-files/",
                       hash->substr(0, 16));
  if (!fs::exists(w.dir + "/manifest.json")) {
    // Staged, then published by one rename: the first complete set wins.
    const std::string staging = absl::StrCat(w.dir, ".", ::getpid());
    fs::remove_all(staging);
    fs::create_directories(staging);
    const std::string command = absl::StrCat(
        "node '", script, "' '", package, "' '", staging, "' tests > '",
        staging, "/manifest.json.tmp' && mv '", staging,
        "/manifest.json.tmp' '", staging, "/manifest.json'");
    if (std::system(command.c_str()) != 0) {
      w.error = "the Parquet writers failed: " + command;
      return w;
    }
    std::error_code ignored;
    fs::rename(staging, w.dir, ignored);
    fs::remove_all(staging, ignored);
  }
  std::ifstream in(w.dir + "/manifest.json");
  w.manifest = nlohmann::json::parse(in);
  return w;
}

const Written& Files() {
  static const Written* const written = new Written(Write());
  return *written;
}

class PreprocessParquetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::ScratchDir();
    if (!Files().skip.empty()) GTEST_SKIP() << Files().skip;
    ASSERT_TRUE(Files().error.empty()) << Files().error;
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static std::string Input(const std::string& name) {
    return Files().dir + "/" + name;
  }
  std::string dir_;
};

// What the files cover, as the writers' metadata and the reader's page
// counts tell it.
void ExpectCoverage(const nlohmann::json& manifest, const std::string& files) {
  std::set<std::string> encodings, codecs;
  uint32_t page_types = 0, most_pages = 0;
  int with_nulls = 0, without_nulls = 0;
  for (const nlohmann::json& file : manifest) {
    const std::string name = file["name"];
    EXPECT_GE(file["row_groups"].get<int>(), 2) << name;
    for (const nlohmann::json& e : file["encodings"]) encodings.insert(e);
    for (const nlohmann::json& c : file["codecs"]) codecs.insert(c);
    (file["nulls"].get<int>() > 0 ? with_nulls : without_nulls) += 1;
    absl::StatusOr<std::unique_ptr<parquet::ParquetFile>> parquet =
        parquet::ParquetFile::Open(files + "/" + name + ".parquet", "text");
    ASSERT_TRUE(parquet.ok()) << parquet.status();
    for (int g = 0; g < (*parquet)->num_row_groups(); ++g) {
      absl::StatusOr<parquet::ColumnText> text = (*parquet)->ReadRowGroup(g);
      ASSERT_TRUE(text.ok()) << text.status();
      page_types |= text->page_types;
      most_pages = std::max(most_pages, text->data_pages);
    }
  }
  EXPECT_EQ(encodings,
            (std::set<std::string>{"PLAIN", "PLAIN_DICTIONARY",
                                   "RLE_DICTIONARY", "DELTA_LENGTH_BYTE_ARRAY",
                                   "DELTA_BYTE_ARRAY", "RLE"}));
  EXPECT_EQ(codecs,
            (std::set<std::string>{"UNCOMPRESSED", "SNAPPY", "GZIP", "ZSTD"}));
  EXPECT_EQ(page_types, (1u << 0) | (1u << 2) | (1u << 3));  // v1, dict, v2
  EXPECT_GE(most_pages, 2u);
  EXPECT_GT(with_nulls, 0);
  EXPECT_GT(without_nulls, 0);
}

// Every file in one run, taken by a glob over two nested directories: the
// Parquet files on one thread and on four, and their JSON Lines twins,
// give one token file. (A file that differs is then found file by file.)
TEST_F(PreprocessParquetTest, EveryFileMatchesItsJsonlTokenForToken) {
  ExpectCoverage(Files().manifest, Files().dir);
  std::vector<std::string> names;
  int64_t nulls = 0;
  for (const nlohmann::json& file : Files().manifest) {
    names.push_back(file["name"]);
    nulls += file["nulls"].get<int64_t>();
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string sub = Path(i % 2 == 0 ? "shards/a" : "shards/b");
    fs::create_directories(sub);
    for (const char* ext : {".parquet", ".jsonl"}) {
      fs::create_symlink(Input(names[i] + ext), sub + "/" + names[i] + ext);
    }
  }
  const std::string glob = Path("shards/*/*");
  Result r = Preprocess(
      dir_, {"--input=" + glob + ".parquet", "--output=" + Path("one.h5")}, 1);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err,
              HasSubstr(absl::StrCat("passed over ", nulls, " null Parquet")));
  r = Preprocess(
      dir_, {"--input=" + glob + ".parquet", "--output=" + Path("four.h5")}, 4);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Preprocess(
      dir_, {"--input=" + glob + ".jsonl", "--output=" + Path("jsonl.h5")}, 4);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto one = Contents(Path("one.h5"));
  EXPECT_GT(one.second.size(), 100000u);
  EXPECT_TRUE(one == Contents(Path("four.h5")));
  if (one == Contents(Path("jsonl.h5"))) return;
  ADD_FAILURE() << "the Parquet files' tokens differ from the JSON Lines'";
  for (const std::string& name : names) {
    for (const char* ext : {".parquet", ".jsonl"}) {
      r = Preprocess(dir_, {"--input=" + Input(name + ext),
                            "--output=" + Path(name + ext + ".h5")});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    EXPECT_TRUE(Contents(Path(name + ".parquet.h5")) ==
                Contents(Path(name + ".jsonl.h5")))
        << name;
  }
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The offset of a one-row-group-or-more file's first page, and the size of
// its header.
std::pair<size_t, size_t> FirstPage(const std::string& bytes) {
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + bytes.size() - 8, 4);
  const absl::StatusOr<parquet::FileMetaData> meta = parquet::ParseFileMetaData(
      std::string_view(bytes).substr(bytes.size() - 8 - length, length));
  const absl::StatusOr<parquet::ColumnChunk> chunk =
      parquet::ParseColumnChunk(meta->row_groups[0].columns[0]);
  const size_t start = static_cast<size_t>(
      chunk->dictionary_page_offset.value_or(chunk->data_page_offset));
  return {start, parquet::ParsePageHeader(std::string_view(bytes).substr(start))
                     ->header_size};
}

TEST_F(PreprocessParquetTest, BadInputEndsWithOneLineAndNoOutput) {
  const std::string good = Input("prose_v1_zstd.parquet");
  const std::string zstd = ReadBytes(good);
  uint32_t footer = 0;
  std::memcpy(&footer, zstd.data() + zstd.size() - 8, 4);
  const auto [page, header] = FirstPage(zstd);
  struct Case {
    std::string bytes;  // of bad.parquet; empty: `input` as it is
    std::string input, flag, said;
  };
  std::vector<Case> cases = {
      {"a text file", "", "", "not a Parquet file"},
      {zstd.substr(0, zstd.size() / 2), "", "", "does not end with PAR1"},
      {zstd, "", "", "a truncated footer"},
      {zstd, "", "", "a corrupt footer (malformed Thrift"},
      {zstd, "", "",
       absl::StrCat("row group 0: the page at byte ", page,
                    ": a bad page header")},
      {zstd, "", "", "a ZSTD page does not decompress"},
      {"", Input("types.parquet"), "--parquet_column=id",
       "column \"id\" is INT64, not a string (BYTE_ARRAY) column"},
      {"", Input("types.parquet"), "--parquet_column=body",
       "no column \"body\"; its columns are \"id\", \"text\", \"meta\", "
       "\"tags\", \"raw\", \"amount\""},
      {"", Input("types.parquet"), "--parquet_column=tags",
       "column \"tags\" is nested (a list)"},
      {"", Input("types.parquet"), "--parquet_column=raw",
       "row group 0 row 3 (row 3 of the file): not valid UTF-8 at byte 1"},
      {"", Input("codec_brotli.parquet"), "",
       "row group 0: the BROTLI codec is not supported"},
      {"", Input("codec_lz4.parquet"), "",
       "the LZ4_RAW codec is not supported"},
  };
  cases[2].bytes[cases[2].bytes.size() - 5] = '\x7F';  // the footer's length
  cases[3].bytes[zstd.size() - 8 - footer] = '\x0F';   // its first field
  cases[4].bytes[page] = '\x0F';
  for (size_t i = 0; i < 4; ++i) cases[5].bytes[page + header + i] = '\xFF';
  const std::string out = Path("out.h5");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.said);
    std::string input = c.input;
    if (!c.bytes.empty()) {
      input = Path("bad.parquet");
      std::ofstream(input, std::ios::binary) << c.bytes;
    }
    // After a good file, whose tokens would otherwise be written (a file
    // given a flag comes alone: the flag would refuse the good file).
    std::vector<std::string> args = {
        "--input=" + (c.flag.empty() ? good + "," : "") + input,
        "--output=" + out};
    if (!c.flag.empty()) args.push_back(c.flag);
    const Result r = Preprocess(dir_, args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr(input + ": "));
    EXPECT_THAT(r.err, HasSubstr(c.said));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out + ".tmp"));
  }
  // Rows that are not UTF-8, skipped.
  const Result r = Preprocess(
      dir_, {"--input=" + Input("types.parquet"), "--parquet_column=raw",
             "--on_bad_line=skip", "--output=" + out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("skipped 2 Parquet rows that are not valid "
                               "UTF-8 (--on_bad_line=skip)"));
  EXPECT_EQ(TokenDataset::Open(out)->num_documents(), 8);
}

}  // namespace
}  // namespace trellis
