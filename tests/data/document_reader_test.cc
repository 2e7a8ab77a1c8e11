// The readers behind trellis-preprocess: compressed files, JSON Lines with
// each kind of bad line, glob inputs, and the documents they make.
#include "data/document_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/compressed_reader.h"
#include "data/input_files.h"
#include "data/jsonl_reader.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info =
        ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("trellis_reader_", info->name(), ".", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }
  // Writes `bytes` to `name`, compressed as the name says.
  std::string Write(const std::string& name, const std::string& bytes) {
    std::string stored = bytes;
    if (CompressionOf(name) == Compression::kZstd) {
      stored.resize(ZSTD_compressBound(bytes.size()));
      const size_t n = ZSTD_compress(stored.data(), stored.size(), bytes.data(),
                                     bytes.size(), 3);
      EXPECT_FALSE(ZSTD_isError(n));
      stored.resize(n);
    } else if (CompressionOf(name) == Compression::kGzip) {
      gzFile gz = gzopen(Path(name).c_str(), "wb");
      EXPECT_NE(gz, nullptr);
      EXPECT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
      gzclose(gz);
      return Path(name);
    }
    std::ofstream(Path(name), std::ios::binary) << stored;
    return Path(name);
  }

  fs::path dir_;
};

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  absl::StatusOr<std::unique_ptr<CompressedReader>> in =
      CompressedReader::Open(path);
  if (!in.ok()) return in.status();
  std::string all;
  char buffer[7];  // small: many calls, frames split across them
  while (true) {
    absl::StatusOr<size_t> got = (*in)->Read(buffer, sizeof(buffer));
    if (!got.ok()) return got.status();
    if (*got == 0) return all;
    all.append(buffer, *got);
  }
}

// Documents as whole strings (pieces joined).
struct Documents {
  std::vector<std::string> docs;
  absl::Status status;
  int64_t skipped = 0;
  std::vector<std::string> first_skipped;
};

Documents ReadDocuments(const std::vector<std::string>& files,
                        DocumentReader::Options options) {
  DocumentReader reader(files, options);
  Documents out;
  std::string current;
  out.status = reader.Run(
      [&](Piece&& piece) {
        current += piece.text;
        if (piece.ends_document) {
          out.docs.push_back(current);
          current.clear();
        }
      },
      [](int64_t) { return true; });
  out.skipped = reader.skipped_lines();
  out.first_skipped = reader.first_skipped();
  return out;
}

std::string LongText() {
  std::string text;
  for (int i = 0; text.size() < 3 * (size_t{1} << 20); ++i) {
    absl::StrAppend(&text, "word", i, i % 17 == 0 ? "\n" : " ");
  }
  return text;
}

TEST_F(ReaderTest, EachCompressionReadsBackTheBytes) {
  const std::string text = LongText();
  for (const char* name : {"a.txt", "a.txt.gz", "a.txt.zst"}) {
    absl::StatusOr<std::string> back = ReadAll(Write(name, text));
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(*back, text) << name;
  }
}

TEST_F(ReaderTest, ConcatenatedGzipMembersAndZstdFramesReadAsOne) {
  const std::string a = "first part\n", b = "second part\n";
  for (const char* name : {"m.gz", "m.zst"}) {
    const std::string one = Write(name, a);
    std::ifstream in(one, std::ios::binary);
    const std::string first((std::istreambuf_iterator<char>(in)), {});
    Write(name, b);
    std::ifstream in2(one, std::ios::binary);
    const std::string second((std::istreambuf_iterator<char>(in2)), {});
    std::ofstream(one, std::ios::binary) << first << second;
    absl::StatusOr<std::string> back = ReadAll(one);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(*back, a + b) << name;
  }
}

TEST_F(ReaderTest, TruncatedOrWrongCompressionIsDataLossNamingTheFile) {
  const std::string text = LongText();
  for (const char* name : {"t.txt.gz", "t.txt.zst"}) {
    const std::string path = Write(name, text);
    fs::resize_file(path, fs::file_size(path) / 2);
    absl::StatusOr<std::string> back = ReadAll(path);
    EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss) << name;
    EXPECT_THAT(back.status().message(), HasSubstr(path));
    // Plain bytes under a compressed name.
    std::ofstream(path, std::ios::binary) << "just some text, not compressed";
    back = ReadAll(path);
    EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss) << name;
  }
}

TEST_F(ReaderTest, JsonlOfEachCompressionGivesTheSameDocuments) {
  const std::string jsonl =
      "{\"text\": \"one\\ntwo\"}\n"
      "\n"
      "{\"id\": 7, \"text\": \"caf\\u00e9 \xe2\x82\xac\"}\r\n"
      "{\"text\": \"\"}\n"
      "{\"text\": \"last, without newline\"}";
  for (const char* name : {"d.jsonl", "d.jsonl.gz", "d.jsonl.zst"}) {
    const Documents got = ReadDocuments({Write(name, jsonl)}, {});
    ASSERT_TRUE(got.status.ok()) << name << ": " << got.status;
    EXPECT_THAT(got.docs, ElementsAre("one\ntwo", "caf\xc3\xa9 \xe2\x82\xac",
                                      "last, without newline"))
        << name;
  }
}

TEST_F(ReaderTest, JsonKeyChoosesTheField) {
  DocumentReader::Options options;
  options.json_key = "content";
  const Documents got = ReadDocuments(
      {Write("k.jsonl", "{\"text\": \"no\", \"content\": \"yes\"}\n")},
      options);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_THAT(got.docs, ElementsAre("yes"));
}

// Each kind of bad line fails with path:line and says what is wrong.
TEST_F(ReaderTest, EachBadLineFailsWithFileAndLine) {
  struct Case {
    std::string line, what;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"unterminated}", "not valid JSON"},
      {"{\"text\": \"a\"} trailing", "not valid JSON"},
      {"{\"body\": \"a\"}", "no key \"text\""},
      {"{\"text\": 5}", "\"text\" is a JSON number, not a string"},
      {"{\"text\": null}", "\"text\" is a JSON null, not a string"},
      {"{\"text\": [\"a\"]}", "\"text\" is a JSON array, not a string"},
      {"[\"text\"]", "a JSON array, not an object"},
      {"{\"text\": \"bad \xff byte\"}", "invalid UTF-8 at byte 15"},
      {"{\"text\": \"\xed\xa0\x80\"}", "invalid UTF-8"},  // a surrogate
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path =
        Write(absl::StrCat("bad", i, ".jsonl"),
              absl::StrCat("{\"text\": \"fine\"}\n\n", cases[i].line,
                           "\n{\"text\": "
                           "\"after\"}\n"));
    const Documents got = ReadDocuments({path}, {});
    EXPECT_EQ(got.status.code(), absl::StatusCode::kInvalidArgument)
        << cases[i].line;
    EXPECT_THAT(got.status.message(), HasSubstr(absl::StrCat(path, ":3: ")))
        << cases[i].line;
    EXPECT_THAT(got.status.message(), HasSubstr(cases[i].what))
        << cases[i].line;
  }
}

// A NUL byte ended the JSON parser's input, so the rest of its line was
// dropped without a word; it is no valid JSON anywhere in a line.
TEST_F(ReaderTest, NulByteInALineIsRefused) {
  std::string line = "{\"text\": \"a\"}";  // 13 bytes
  line += '\0';
  line += "{\"more\": 1}";
  const std::string path =
      Write("nul.jsonl", absl::StrCat("{\"text\": \"fine\"}\n", line, "\n"));
  const Documents got = ReadDocuments({path}, {});
  EXPECT_EQ(got.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status.message(),
              HasSubstr(absl::StrCat(path,
                                     ":2: not valid JSON (a NUL byte at "
                                     "byte 14)")));
}

// A line over the bound is refused as soon as it passes it (a file with no
// newline is never held whole), and the next call goes on after it.
TEST_F(ReaderTest, OverlongLineIsRefusedAndSkipped) {
  const std::string long_text(300, 'x');
  const std::string path =
      Write("long.jsonl.zst",
            absl::StrCat("{\"text\": \"a\"}\n{\"text\": \"", long_text,
                         "\"}\n{\"text\": \"b\"}\n", long_text));
  absl::StatusOr<std::unique_ptr<CompressedReader>> in =
      CompressedReader::Open(path);
  ASSERT_TRUE(in.ok()) << in.status();
  JsonlReader reader(*std::move(in), "text", /*max_line_bytes=*/64);
  std::string text;
  ASSERT_TRUE(reader.Next(text).value());
  EXPECT_EQ(text, "a");
  absl::StatusOr<bool> next = reader.Next(text);
  ASSERT_FALSE(next.ok());
  EXPECT_THAT(next.status().message(),
              HasSubstr(absl::StrCat(path, ":2: longer than 64 bytes")));
  ASSERT_TRUE(reader.Next(text).value());
  EXPECT_EQ(text, "b");
  next = reader.Next(text);  // the last line, with no newline
  ASSERT_FALSE(next.ok());
  EXPECT_THAT(next.status().message(), HasSubstr(":4: longer than"));
  EXPECT_FALSE(reader.Next(text).value());
}

TEST_F(ReaderTest, SkipCountsBadLinesAndKeepsTheGoodOnes) {
  const std::string a = Write("a.jsonl.zst",
                              "{\"text\": \"a1\"}\n{oops\n{\"text\": 1}\n"
                              "{\"text\": \"a2\"}\n");
  const std::string b = Write("b.jsonl.gz",
                              "{\"other\": \"x\"}\n{\"text\": "
                              "\"b1\"}\n\xff\n");
  DocumentReader::Options options;
  options.bad_lines = BadLines::kSkip;
  const Documents got = ReadDocuments({a, b}, options);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_THAT(got.docs, ElementsAre("a1", "a2", "b1"));
  EXPECT_EQ(got.skipped, 4);
  EXPECT_THAT(got.first_skipped,
              ElementsAre(HasSubstr(a + ":2:"), HasSubstr(a + ":3:"),
                          HasSubstr(b + ":1:"), HasSubstr(b + ":3:")));
}

TEST_F(ReaderTest, LongJsonDocumentIsCutIntoPiecesThatRejoin) {
  const std::string text = LongText();
  std::string escaped;
  for (char c : text)
    escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
  const std::string path =
      Write("long.jsonl", absl::StrCat("{\"text\": \"", escaped, "\"}\n"));
  DocumentReader reader({path}, {});
  std::vector<Piece> pieces;
  ASSERT_TRUE(reader
                  .Run([&](Piece&& p) { pieces.push_back(std::move(p)); },
                       [](int64_t) { return true; })
                  .ok());
  ASSERT_GT(pieces.size(), 2u);
  std::string joined;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].ends_document, i + 1 == pieces.size());
    EXPECT_LE(pieces[i].text.size(), DocumentReader::kPieceBytes);
    joined += pieces[i].text;
  }
  EXPECT_EQ(joined, text);
}

TEST_F(ReaderTest, PlainTextSplitsAsBeforeAndCompressedTextAlike) {
  const std::string text = "p1 l1\np1 l2\n\n  \np2\r\n";
  for (const char* name : {"p.txt", "p.txt.zst"}) {
    DocumentReader::Options options;
    options.split = Split::kBlankLine;
    EXPECT_THAT(ReadDocuments({Write(name, text)}, options).docs,
                ElementsAre("p1 l1\np1 l2", "p2"));
    options.split = Split::kLine;
    EXPECT_THAT(ReadDocuments({Write(name, text)}, options).docs,
                ElementsAre("p1 l1", "p1 l2", "p2"));
  }
}

TEST_F(ReaderTest, GlobsExpandSortedAndAnUnmatchedPatternIsAnError) {
  Write("b.jsonl", "");
  Write("a.jsonl", "");
  Write("c.txt", "");
  absl::StatusOr<std::vector<std::string>> files =
      ExpandInputList(absl::StrCat(Path("*.jsonl"), ",", Path("c.txt"), ","));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files,
              ElementsAre(Path("a.jsonl"), Path("b.jsonl"), Path("c.txt")));
  files = ExpandInputList(Path("*.jsonl.zst"));
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(files.status().message(), HasSubstr(Path("*.jsonl.zst")));
}

TEST(JsonlPathTest, NamesByExtension) {
  EXPECT_TRUE(IsJsonlPath("a.jsonl"));
  EXPECT_TRUE(IsJsonlPath("dir/a.jsonl.gz"));
  EXPECT_TRUE(IsJsonlPath("a.jsonl.zst"));
  EXPECT_FALSE(IsJsonlPath("a.json"));
  EXPECT_FALSE(IsJsonlPath("a.txt.zst"));
  EXPECT_FALSE(ParseBadLines("ignore").ok());
}

}  // namespace
}  // namespace trellis
