// trellis-preprocess end to end on JSON Lines: the token file equals the
// one made from the same documents as plain text, compressed inputs and
// globs give the same file, and a bad line fails without leaving output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/token_dataset.h"
#include "tests/tools/tools_test_util.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

struct Result {
  int exit_code = -1;
  std::string err;
};

// Runs trellis-preprocess with `args` (quoted for the shell).
Result Preprocess(const std::string& dir,
                  const std::vector<std::string>& args) {
  std::string command =
      absl::StrCat(TRELLIS_BINARY_DIR, "/bin/trellis-preprocess --threads=2");
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

// JSON string literal of `text` (its characters are ASCII here).
std::string Quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '"' || c == '\\') {
      out += std::string("\\") + c;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

class PreprocessInputsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::ScratchDir(); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(PreprocessInputsTest, JsonlGivesTheTokenFileOfTheSameTextDocuments) {
  // Paragraphs (documents under --split=blank_line), some of many lines.
  std::vector<std::string> docs;
  for (int i = 0; i < 200; ++i) {
    std::string doc = absl::StrCat("document ", i, " says \"hello\" \\ ");
    for (int line = 0; line < i % 4; ++line) {
      absl::StrAppend(&doc, "\nline ", line, " of ", i);
    }
    docs.push_back(doc);
  }
  std::ofstream(Path("docs.txt")) << absl::StrJoin(docs, "\n\n") << "\n";
  std::string jsonl;
  for (size_t i = 0; i < docs.size(); ++i) {
    absl::StrAppend(&jsonl, "{\"id\": ", i, ", \"text\": ", Quoted(docs[i]),
                    "}\n");
  }
  // Two JSONL shards, taken by a glob.
  const size_t half = jsonl.find("{\"id\": 100,");
  std::ofstream(Path("shard_0.jsonl")) << jsonl.substr(0, half);
  std::ofstream(Path("shard_1.jsonl")) << jsonl.substr(half);

  Result r =
      Preprocess(dir_, {"--input=" + Path("docs.txt"), "--split=blank_line",
                        "--output=" + Path("t.h5")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Preprocess(
      dir_, {"--input=" + Path("shard_*.jsonl"), "--output=" + Path("j.h5")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto text = Contents(Path("t.h5"));
  const auto json = Contents(Path("j.h5"));
  EXPECT_EQ(text.second.size(), docs.size());
  EXPECT_EQ(json.second, text.second);  // the same document boundaries
  EXPECT_EQ(json.first, text.first);
}

TEST_F(PreprocessInputsTest, BadLineFailsWithoutOutputOrSkipsAndCounts) {
  std::ofstream(Path("in.jsonl")) << "{\"text\": \"good\"}\n"
                                  << "{\"text\": 3}\n"
                                  << "{\"text\": \"also good\"}\n"
                                  << "not json\n";
  const std::string out = Path("out.h5");
  Result r =
      Preprocess(dir_, {"--input=" + Path("in.jsonl"), "--output=" + out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr(Path("in.jsonl") + ":2: \"text\" is a JSON "
                                                  "number, not a string"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  r = Preprocess(dir_, {"--input=" + Path("in.jsonl"), "--output=" + out,
                        "--on_bad_line=skip"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("skipped 2 bad lines"));
  EXPECT_THAT(r.err, HasSubstr(Path("in.jsonl") + ":4: not valid JSON"));
  absl::StatusOr<TokenDataset> data = TokenDataset::Open(out);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_documents(), 2);

  r = Preprocess(dir_, {"--input=" + Path("in.jsonl"), "--output=" + out,
                        "--on_bad_line=maybe"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("--on_bad_line=maybe"));
  r = Preprocess(dir_,
                 {"--input=" + Path("nothing_*.jsonl"), "--output=" + out});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("matches no file"));
}

}  // namespace
}  // namespace trellis
