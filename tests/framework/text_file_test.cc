#include "framework/text_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace trellis {
namespace {

namespace fs = std::filesystem;

class TextFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("text_file_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(TextFileTest, ReadsAWholeFile) {
  std::string bytes = "{\"a\": 1}\n";
  bytes.push_back('\0');  // Binary-safe: a NUL is kept.
  bytes += "tail";
  std::ofstream(Path("f.json"), std::ios::binary) << bytes;
  const absl::StatusOr<std::string> text = ReadTextFile(Path("f.json"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, bytes);
  std::ofstream(Path("empty"));
  EXPECT_EQ(ReadTextFile(Path("empty")).value(), "");
}

TEST_F(TextFileTest, EachWrongPathIsOneClearError) {
  const absl::StatusOr<std::string> missing = ReadTextFile(Path("missing"));
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_EQ(missing.status().message(), Path("missing") + ": no such file");
  // A missing parent is "no such file" too, not a system error.
  EXPECT_TRUE(absl::IsNotFound(ReadTextFile(Path("no/such")).status()));

  fs::create_directories(Path("folder"));
  const absl::StatusOr<std::string> folder = ReadTextFile(Path("folder"));
  EXPECT_TRUE(absl::IsInvalidArgument(folder.status())) << folder.status();
  EXPECT_EQ(folder.status().message(),
            Path("folder") + " is a directory, not a file");

  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  const absl::StatusOr<std::string> fifo = ReadTextFile(Path("fifo"));
  EXPECT_TRUE(absl::IsInvalidArgument(fifo.status())) << fifo.status();
  EXPECT_NE(fifo.status().message().find("not a regular file"),
            std::string::npos);

  std::ofstream(Path("big")) << std::string(100, 'x');
  const absl::StatusOr<std::string> big = ReadTextFile(Path("big"), 99);
  EXPECT_TRUE(absl::IsInvalidArgument(big.status())) << big.status();
  EXPECT_NE(big.status().message().find("100 bytes, more than the 99"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis
